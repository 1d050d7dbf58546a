//! Tokens of one `@bench` line. Spans are DOCUMENT byte offsets (the line's `offset` is
//! added here), so every later stage can put a diagnostic on the exact columns of its cause.

use crate::syntax::ByteRange;

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    Ident(String),
    Int(i64),
    Float(f64),
    /// A number-looking token that is not a valid literal; the string says why.
    BadNumber(String),
    /// Operators and punctuation: `** << >> + - * / % ( ) [ ] , : ; = ~`.
    Punct(&'static str),
    /// Python's `//`, which the spec language does not have; kept as its own token so the
    /// parser can say what to write instead.
    FloorDiv,
    /// A character that starts no token (unicode, `#`, `<`, ...).
    Bad(char),
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Token {
    pub tok: Tok,
    pub span: ByteRange,
}

impl Token {
    pub fn is(&self, p: &str) -> bool {
        matches!(&self.tok, Tok::Punct(q) if *q == p)
    }

    pub fn ident(&self) -> Option<&str> {
        match &self.tok {
            Tok::Ident(s) => Some(s),
            _ => None,
        }
    }
}

const PUNCT2: [&str; 3] = ["**", "<<", ">>"];
const PUNCT1: [&str; 13] = [
    "+", "-", "*", "/", "%", "(", ")", "[", "]", ",", ":", ";", "=",
];

/// Tokenizes `text`, whose first byte is at document offset `base`. Never fails: bad input
/// becomes `Tok::Bad` / `Tok::BadNumber` tokens for the parser to report.
pub(crate) fn lex(text: &str, base: usize) -> Vec<Token> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c.is_ascii_digit() || (c == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            let (tok, end) = lex_number(text, i);
            out.push(Token {
                tok,
                span: base + start..base + end,
            });
            i = end;
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Ident(text[start..i].to_string()),
                span: base + start..base + i,
            });
            continue;
        }
        let rest = &text[i..];
        if rest.starts_with("//") {
            out.push(Token {
                tok: Tok::FloorDiv,
                span: base + i..base + i + 2,
            });
            i += 2;
            continue;
        }
        if let Some(p) = PUNCT2
            .iter()
            .chain(PUNCT1.iter())
            .chain(["~"].iter())
            .find(|p| rest.starts_with(**p))
        {
            out.push(Token {
                tok: Tok::Punct(p),
                span: base + i..base + i + p.len(),
            });
            i += p.len();
            continue;
        }
        // Not ASCII punctuation we know: take one whole char so spans stay on UTF-8 boundaries.
        let ch = rest.chars().next().unwrap_or('\u{FFFD}');
        let len = ch.len_utf8().max(1);
        out.push(Token {
            tok: Tok::Bad(ch),
            span: base + i..base + i + len,
        });
        i += len;
    }
    out
}

/// Lexes a number starting at `start`: `4099`, `4_096`, `0x100`, `0b101`, `0o17`, `1e-3`,
/// `2.5`, `.5`. Letters glued to a number (`1k`, `12abc`) make the whole run a bad number.
fn lex_number(text: &str, start: usize) -> (Tok, usize) {
    let b = text.as_bytes();
    let mut i = start;
    let radix = if b[i] == b'0' && i + 1 < b.len() {
        match b[i + 1] {
            b'x' | b'X' => 16,
            b'b' | b'B' => 2,
            b'o' | b'O' => 8,
            _ => 10,
        }
    } else {
        10
    };
    let mut is_float = false;
    if radix != 10 {
        i += 2;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
    } else {
        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
            i += 1;
        }
        if i < b.len() && b[i] == b'.' {
            is_float = true;
            i += 1;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
                i += 1;
            }
        }
        if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
            let mut j = i + 1;
            if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
                j += 1;
            }
            if j < b.len() && b[j].is_ascii_digit() {
                is_float = true;
                i = j;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
            }
        }
        // Glued letters: `1k`, `3.0f` (C's float suffix), `12abc`.
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
    }
    let raw = &text[start..i];
    let clean: String = raw.chars().filter(|c| *c != '_').collect();
    let tok = if radix != 10 {
        let digits = &clean[2..];
        if digits.is_empty() {
            Tok::BadNumber(format!(
                "`{raw}` is not a number: digits are missing after `{}`",
                &raw[..2]
            ))
        } else {
            parse_int(raw, digits, radix)
        }
    } else if is_float {
        match clean.parse::<f64>() {
            Ok(v) if v.is_finite() => Tok::Float(v),
            Ok(_) => Tok::BadNumber(format!("`{raw}` is too large for a 64-bit float")),
            Err(_) => Tok::BadNumber(bad_number_message(raw)),
        }
    } else {
        parse_int(raw, &clean, 10)
    };
    (tok, i)
}

fn parse_int(raw: &str, digits: &str, radix: u32) -> Tok {
    if !digits.chars().all(|c| c.is_digit(radix)) {
        return Tok::BadNumber(bad_number_message(raw));
    }
    match i64::from_str_radix(digits, radix) {
        Ok(v) => Tok::Int(v),
        Err(_) => Tok::BadNumber(format!(
            "`{raw}` does not fit in a 64-bit signed integer (the largest is 9223372036854775807)"
        )),
    }
}

fn bad_number_message(raw: &str) -> String {
    if raw.ends_with('f') || raw.ends_with('F') {
        format!(
            "`{raw}` is not a number here; write it without the C suffix: `{}`",
            &raw[..raw.len() - 1]
        )
    } else {
        format!("`{raw}` is not a number; write an integer (`4096`, `1 << 12`, `0x100`) or a float (`2.5`, `1e-3`)")
    }
}
