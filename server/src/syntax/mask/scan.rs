//! The line-by-line scan of CUDA text ([`mask_ranges`]): directives go to the open
//! conditional groups, lines of hidden branches are hidden whole, and code lines are
//! lexed by [`Scan`], which hides the statement forms ([`super::macros`]) and the tokens
//! (attributes, calling conventions, qualifier macros, `unsigned(x)` casts) the grammar
//! cannot read.

use super::directives::{Conditionals, LineCursor};
use super::lex::{caps_name, close_paren, is_name_byte, name_len, starts_word};
use super::macros::{macro_statement, top_level_macro_call, wrapping_macro_call};
use super::ByteRange;

/// Attributes with a parenthesized argument list that the grammar does not know.
const HIDDEN_ATTRIBUTES: &[&str] = &["__align__", "__builtin_align__", "__cluster_dims__"];

/// The byte ranges to hide (see the module doc): line by line, directives go to the
/// open conditional groups, lines of hidden branches are hidden whole, and code lines
/// to `Scan::code_line`. Directives outside function bodies and groups are left alone.
pub fn mask_ranges(text: &str) -> Vec<ByteRange> {
    let mut scan = Scan::new();
    let mut conditionals = Conditionals::default();
    let mut lines = LineCursor::new(text);
    while let Some((start, line)) = lines.next_line() {
        let body = line.trim_end_matches(['\n', '\r']);
        let trimmed = body.trim_start();
        if !scan.in_block_comment && trimmed.starts_with('#') {
            let end = lines.directive_end(start, body);
            let in_body = scan.depth > 0 || conditionals.any_open();
            if in_body && conditionals.hides_directive(trimmed, scan.last) {
                scan.out.push(start..end);
            }
        } else if conditionals.hiding() {
            scan.out.push(start..start + body.len());
        } else {
            scan.code_line(text, &mut lines, start, body);
        }
    }
    scan.out
}

/// Calling-convention macros of the CUDA and Windows APIs, between a declaration's type
/// and its name (`void CUDART_CB callback(...)`, `CUresult CUDAAPI cuInit(...)`). They
/// expand to nothing on Linux; the grammar reads them as a second type.
pub(super) const CALLING_CONVENTIONS: &[&str] = &[
    "CUDART_CB",
    "CUDARTAPI",
    "CUDAAPI",
    "CUBLASAPI",
    "CUBLASWINAPI",
    "CUFFTAPI",
    "CURANDAPI",
    "CUSPARSEAPI",
    "CUSOLVERAPI",
    "CUDNNWINAPI",
    "CUDNNAPI",
    "NVRTC_API",
    "WINAPI",
    "CALLBACK",
    "APIENTRY",
    "__stdcall",
    "__cdecl",
];

/// The state of the lexical scan over code lines, carried from line to line, and the
/// ranges it hides.
struct Scan {
    /// Brace depth (0 at file scope).
    depth: i64,
    in_block_comment: bool,
    /// The last significant character of code (not comment, not directive).
    last: u8,
    out: Vec<ByteRange>,
}

/// The last significant bytes after which `unsigned(` starts a functional cast: an
/// expression may stand there.
const BEFORE_EXPRESSION: &[u8] = b"(,=+-*/%?:<>&|![{";

impl Scan {
    /// The scan at the start of a text: at file scope, as after a statement.
    fn new() -> Self {
        Scan {
            depth: 0,
            in_block_comment: false,
            last: b';',
            out: Vec::new(),
        }
    }

    /// One code line (`body`, without its line break, at byte `start` of `text`):
    /// first the forms that hide a whole statement (an explicit class instantiation, a
    /// file-scope macro call, a macro used as a statement), which only a line starting
    /// outside a comment can begin; else the line is lexed.
    fn code_line(&mut self, text: &str, lines: &mut LineCursor, start: usize, body: &str) {
        if !self.in_block_comment {
            let at = start + (body.len() - body.trim_start().len());
            if self.class_instantiation(start, at, body)
                || self.file_scope_macro(text, lines, at)
                || self.statement_macro(start, body)
            {
                return;
            }
        }
        self.code(body, start);
    }

    /// `template class PiEstimator<float>;`: an explicit instantiation of a class
    /// template, which the grammar cannot read ("missing identifier"). At file scope
    /// or in a namespace (explicit instantiations stand nowhere else), after a `;` or
    /// a brace. Hidden from its first word (at byte `at`) to its `;`; whether it was.
    fn class_instantiation(&mut self, start: usize, at: usize, body: &str) -> bool {
        if !matches!(self.last, b';' | b'}' | b'{') {
            return false;
        }
        let words: Vec<&str> = body.split_whitespace().take(3).collect();
        let instantiation = matches!(
            words.as_slice(),
            ["template", "class" | "struct" | "union", ..]
                | ["extern", "template", "class" | "struct" | "union"]
        );
        let hidden = instantiation && body.trim_end().ends_with(';');
        if hidden {
            self.out.push(at..start + body.trim_end().len());
        }
        hidden
    }

    /// A macro call starting a file-scope item at byte `at` (after a `;` or `}`):
    /// `GGML_DEPRECATED(...)` wrapping a declaration ([`wrapping_macro_call`]), hidden
    /// to its line's end, or `LAUNCH(4, float, f32)` with no `;`
    /// ([`top_level_macro_call`]), which the grammar would read with the items after
    /// it as one broken definition (hiding a kernel): hidden, the rest of its last line
    /// lexed. The lines the call spans are passed over. Whether there was one.
    fn file_scope_macro(&mut self, text: &str, lines: &mut LineCursor, at: usize) -> bool {
        if self.depth != 0 || !matches!(self.last, b';' | b'}') {
            return false;
        }
        if let Some(end) = wrapping_macro_call(text, at) {
            self.out.push(at..end);
            lines.skip_to(end);
            return true;
        }
        let Some(close) = top_level_macro_call(text, at) else {
            return false;
        };
        self.out.push(at..close + 1);
        lines.skip_to(close + 1);
        let rest_end = text[..lines.offset].trim_end_matches(['\n', '\r']).len();
        if close + 1 < rest_end {
            self.code(&text[close + 1..rest_end], close + 1);
        }
        true
    }

    /// A macro used as a statement inside a body, at the start of a statement
    /// ([`macro_statement`]): hidden, the rest of the line lexed. A bare name stands
    /// for whole statements, so a statement ends with it. Whether there was one.
    fn statement_macro(&mut self, start: usize, body: &str) -> bool {
        if self.depth <= 0 || !matches!(self.last, b';' | b'{' | b'}' | b':') {
            return false;
        }
        let Some((a, b, bare)) = macro_statement(body) else {
            return false;
        };
        self.out.push(start + a..start + b);
        if bare {
            // The macro stands for whole statements (`GGML_TENSOR_LOCALS`).
            self.last = b';';
        }
        self.code(&body[b..], start + b);
        true
    }

    /// Lexes one piece of a code line (`line`, at byte `base` of the text): comments,
    /// literals, braces and the last significant character, and the tokens hidden
    /// inside a line, each decided by [`Scan::token`].
    fn code(&mut self, line: &str, base: usize) {
        let b = line.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if self.in_block_comment {
                if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    self.in_block_comment = false;
                    i += 2;
                } else {
                    i += 1;
                }
                continue;
            }
            match self.token(line, base, i) {
                Some(next) => i = next,
                None => return,
            }
        }
    }

    /// The token at byte `i` of `line`, outside comments: where the scan goes on, or
    /// None at a `//` comment (the rest of the line).
    fn token(&mut self, line: &str, base: usize, i: usize) -> Option<usize> {
        let b = line.as_bytes();
        let next = match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => return None,
            b'/' if b.get(i + 1) == Some(&b'*') => {
                self.in_block_comment = true;
                i + 2
            }
            b'"' | b'\'' => self.literal(line, base, i),
            b'*' | b'&' => self.qualifier_macro(line, base, i),
            b'{' => {
                self.depth += 1;
                self.last = b'{';
                i + 1
            }
            b'}' => {
                self.depth -= 1;
                self.last = b'}';
                i + 1
            }
            b'_' if hidden_attribute(&line[i..]).is_some() => self.attribute(line, base, i),
            c if (c.is_ascii_uppercase() || c == b'_') && starts_word(b, i) => {
                self.caps_word(line, base, i)
            }
            b'u' if self.unsigned_cast(line, i) => {
                // `unsigned(x)`, a functional cast the grammar cannot read: hidden, it
                // leaves the parenthesized `(x)`.
                self.out.push(base + i..base + i + "unsigned".len());
                i + "unsigned".len()
            }
            c => {
                if !c.is_ascii_whitespace() {
                    self.last = c;
                }
                i + 1
            }
        };
        Some(next)
    }

    /// The string or character literal opening at byte `i` (the line's end closes it
    /// if its quote does not), which becomes the last significant character. After a
    /// string literal, a name and another string literal (`"%" PRId64 "\n"`,
    /// concatenation): the name is hidden, as only a macro fits there. Where the scan
    /// goes on.
    fn literal(&mut self, line: &str, base: usize, i: usize) -> usize {
        let b = line.as_bytes();
        let q = b[i];
        let mut j = i + 1;
        while j < b.len() && b[j] != q {
            j += if b[j] == b'\\' { 2 } else { 1 };
        }
        self.last = q;
        if q == b'"' && j < b.len() {
            let after = j + 1;
            let ws = line[after..].len() - line[after..].trim_start().len();
            // Any name will do here: between two literals only a macro fits.
            let t = &line[after + ws..];
            let n = name_len(t);
            if ws > 0 && n > 0 && t[n..].trim_start().starts_with('"') {
                self.out.push(base + after + ws..base + after + ws + n);
                return after + ws + n;
            }
        }
        j + 1
    }

    /// `const T * GGML_RESTRICT p`: after the `*` or `&` at byte `i`, an all-caps
    /// macro standing for a qualifier, followed by a name: hidden. The `*` or `&` is
    /// the last significant character either way. Where the scan goes on.
    fn qualifier_macro(&mut self, line: &str, base: usize, i: usize) -> usize {
        self.last = line.as_bytes()[i];
        let after = i + 1;
        let ws = line[after..].len() - line[after..].trim_start().len();
        let (n, rest) = caps_name(&line[after + ws..]);
        let rest_ws = rest.len() - rest.trim_start().len();
        let name_follows = rest
            .trim_start()
            .starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
        if n > 0 && rest_ws > 0 && name_follows {
            self.out.push(base + after + ws..base + after + ws + n);
            return after + ws + n;
        }
        i + 1
    }

    /// A [`HIDDEN_ATTRIBUTES`] word at byte `i`: with its parenthesized arguments on
    /// this line, hidden whole; else its `_` is the last significant character. Where
    /// the scan goes on.
    fn attribute(&mut self, line: &str, base: usize, i: usize) -> usize {
        let word = hidden_attribute(&line[i..]).expect("an attribute at i");
        let after = i + word.len();
        let open = after + (line[after..].len() - line[after..].trim_start().len());
        if line.as_bytes().get(open) == Some(&b'(') {
            if let Some(j) = close_paren(line, open) {
                self.out.push(base + i..base + j + 1);
                return j + 1;
            }
        }
        self.last = b'_';
        i + 1
    }

    /// The word starting at byte `i` with a capital or `_`: hidden if it is one of the
    /// [`CALLING_CONVENTIONS`] (`void CUDART_CB callback(...)`, empty on Linux), else
    /// its last byte is the last significant character. The byte after it.
    fn caps_word(&mut self, line: &str, base: usize, i: usize) -> usize {
        let n = line.as_bytes()[i..]
            .iter()
            .take_while(|&&c| is_name_byte(c))
            .count();
        if CALLING_CONVENTIONS.contains(&&line[i..i + n]) {
            self.out.push(base + i..base + i + n);
        } else {
            self.last = line.as_bytes()[i + n - 1];
        }
        i + n
    }

    /// Whether the word `unsigned` at byte `i` is a functional cast (`unsigned(x)`):
    /// a whole word, where an expression may stand, followed by `(`.
    fn unsigned_cast(&self, line: &str, i: usize) -> bool {
        line[i..].starts_with("unsigned")
            && BEFORE_EXPRESSION.contains(&self.last)
            && starts_word(line.as_bytes(), i)
            && line[i + "unsigned".len()..].trim_start().starts_with('(')
    }
}

/// The [`HIDDEN_ATTRIBUTES`] word that `t` starts with, if any.
fn hidden_attribute(t: &str) -> Option<&'static str> {
    HIDDEN_ATTRIBUTES.iter().copied().find(|w| t.starts_with(w))
}
