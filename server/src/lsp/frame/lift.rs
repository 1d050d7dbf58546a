//! Document texts taken out of a big message body without copying them (issue #28: a
//! 20 MB `didChange` cost five times its text before the handler ran: the frame, the
//! parsed `Value`, the parser's scratch buffer, and a second parse to check the body).
//!
//! The texts of document sync, `params.textDocument.text` (`didOpen`) and
//! `params.contentChanges[i].text` (`didChange`), are found by their delimiters
//! ([`texts`]); the rest of the body, with each text replaced by `""`, is a small
//! [`skeleton`] that serde_json parses and the decoder checks as it would the body; each
//! text is then decoded in the frame's own buffer (a JSON string's escapes never decode
//! longer than they are written), and the largest one becomes the `String` by moving,
//! not copying ([`decode`]). Where serde_json keeps the last of duplicate keys, so does
//! [`texts`], so the message is the one a plain parse gives. A text serde_json would
//! refuse ([`valid`]) is not lifted: the plain parse reads that body and words its error.
//! Nothing here knows about documents; the message goes on to tower-lsp as any other.

use std::ops::Range;

use super::{array_elements, object_members, skip_blank, Member};

/// A document text inside a body.
#[derive(Debug, Clone, PartialEq)]
pub struct Text {
    /// Where it goes in the parsed message (a JSON pointer).
    pub pointer: String,
    /// The JSON string as written, quotes included.
    pub raw: Range<usize>,
}

impl Text {
    /// The string's contents as written, without the quotes.
    pub fn inner(&self) -> Range<usize> {
        self.raw.start + 1..self.raw.end - 1
    }
}

/// The last member named `key` (serde_json keeps the last of duplicate keys).
fn last<'a>(members: &'a [Member], key: &str) -> Option<&'a Member> {
    members.iter().rev().find(|m| m.key == key)
}

/// The `text` string of the object at `at`, if it has one.
fn text_of(body: &[u8], at: usize, pointer: String) -> Option<Text> {
    let (members, _) = object_members(body, at)?;
    let raw = last(&members, "text")?.value.clone();
    (body[raw.start] == b'"').then_some(Text { pointer, raw })
}

/// The document texts of a message body whose top level and `params` are well-formed
/// objects, in the order they appear; empty for any other body.
pub fn texts(body: &[u8]) -> Vec<Text> {
    let params = object_members(body, skip_blank(body, 0))
        .and_then(|(top, _)| Some(last(&top, "params")?.value.start))
        .and_then(|at| object_members(body, at));
    let Some((params, _)) = params else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(doc) = last(&params, "textDocument") {
        out.extend(text_of(
            body,
            doc.value.start,
            "/params/textDocument/text".into(),
        ));
    }
    if let Some(changes) = last(&params, "contentChanges") {
        for (i, change) in array_elements(body, changes.value.start)
            .unwrap_or_default()
            .into_iter()
            .enumerate()
        {
            let pointer = format!("/params/contentChanges/{i}/text");
            out.extend(text_of(body, change.start, pointer));
        }
    }
    out.sort_by_key(|t| t.raw.start);
    out
}

/// `body` with each of `texts` (in order, not overlapping) written as `""`.
pub fn skeleton(body: &[u8], texts: &[Text]) -> Vec<u8> {
    let lifted: usize = texts.iter().map(|t| t.raw.len() - 2).sum();
    let mut out = Vec::with_capacity(body.len() - lifted);
    let mut from = 0;
    for t in texts {
        out.extend_from_slice(&body[from..t.raw.start]);
        out.extend_from_slice(b"\"\"");
        from = t.raw.end;
    }
    out.extend_from_slice(&body[from..]);
    out
}

/// Whether serde_json reads these string contents (between the quotes) as a `String`:
/// UTF-8, no control character, and escapes it knows, surrogates paired.
pub fn valid(raw: &[u8]) -> bool {
    if std::str::from_utf8(raw).is_err() || raw.iter().any(|&b| b < 0x20) {
        return false;
    }
    let mut r = 0;
    while let Some(at) = memchr::memchr(b'\\', &raw[r..]) {
        match escape_at(raw, r + at) {
            Some((_, next)) => r = next,
            None => return false,
        }
    }
    true
}

/// The character the escape at `at` (a backslash) stands for and where the next byte
/// is, by serde_json's rules; None for an escape it refuses.
fn escape_at(raw: &[u8], at: usize) -> Option<(char, usize)> {
    let simple = match raw.get(at + 1)? {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => return unicode_at(raw, at),
        _ => return None,
    };
    Some((simple, at + 2))
}

/// A `\uXXXX` escape at `at`, or a surrogate pair of two; a lone surrogate is refused.
fn unicode_at(raw: &[u8], at: usize) -> Option<(char, usize)> {
    let n = hex4(raw, at + 2)?;
    match n {
        0xDC00..=0xDFFF => None,
        0xD800..=0xDBFF => {
            if raw.get(at + 6..at + 8) != Some(b"\\u") {
                return None;
            }
            let low = hex4(raw, at + 8).filter(|l| (0xDC00..=0xDFFF).contains(l))?;
            let c = 0x1_0000 + ((n - 0xD800) << 10) + (low - 0xDC00);
            Some((char::from_u32(c)?, at + 12))
        }
        _ => Some((char::from_u32(n)?, at + 6)),
    }
}

/// Four hex digits at `at`.
fn hex4(raw: &[u8], at: usize) -> Option<u32> {
    let digits = std::str::from_utf8(raw.get(at..at + 4)?).ok()?;
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

/// Decode [`valid`] string contents where they are; returns their decoded length.
fn unescape_in_place(s: &mut [u8]) -> usize {
    let (mut r, mut w) = (0, 0);
    loop {
        let run = memchr::memchr(b'\\', &s[r..]).unwrap_or(s.len() - r);
        s.copy_within(r..r + run, w);
        (r, w) = (r + run, w + run);
        if r == s.len() {
            return w;
        }
        let (c, next) = escape_at(s, r).expect("the contents were checked by `valid`");
        let mut utf8 = [0u8; 4];
        let bytes = c.encode_utf8(&mut utf8).as_bytes();
        s[w..w + bytes.len()].copy_from_slice(bytes);
        (r, w) = (next, w + bytes.len());
    }
}

/// The decoded `texts` of `body` (each [`valid`]), in their order. The largest keeps
/// `body`'s own buffer; the others are copied out of it first.
pub fn decode(mut body: Vec<u8>, texts: &[Text]) -> Vec<String> {
    let spans: Vec<Range<usize>> = texts
        .iter()
        .map(|t| {
            let inner = t.inner();
            let n = unescape_in_place(&mut body[inner.clone()]);
            inner.start..inner.start + n
        })
        .collect();
    let largest = (0..spans.len())
        .max_by_key(|&i| spans[i].len())
        .unwrap_or(0);
    let utf8 = "`valid` checked the contents, and escapes decode to UTF-8";
    let mut out: Vec<String> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| {
            if i == largest {
                String::new()
            } else {
                String::from_utf8(body[s.clone()].to_vec()).expect(utf8)
            }
        })
        .collect();
    if let Some(keep) = spans.get(largest).cloned() {
        body.copy_within(keep.clone(), 0);
        body.truncate(keep.len());
        body.shrink_to_fit();
        out[largest] = String::from_utf8(body).expect(utf8);
    }
    out
}

#[cfg(test)]
mod tests;
