//! A text too big to keep a tree for (past `maxFileBytes`: syntax only) is parsed in
//! pieces of about [`PIECE_BYTES`], cut at top-level boundaries found lexically, and
//! each piece's tree is handed on and dropped before the next is parsed. A tree costs
//! about 35 times its text, so a 20 MB file parsed whole peaked at 745 MB; in pieces the
//! peak is the text and one piece's tree. Cuts fall where no token, comment, string or
//! bracket is open: in CUDA after a line ending in `}` or `;` (or a directive without a
//! `\`) at brace depth 0; in Python before a line that starts a new top-level statement
//! (column 0, not a decorated definition's continuation, not `else`/`elif`/`except`/
//! `finally`). A piece that tree-sitter reads differently alone than in the whole text can
//! only shift where a syntax error is reported; nothing else is read from these trees.

use super::{parse_range, parser_for};
use crate::syntax::py_comments::{line_end, string_end};
use crate::syntax::{ByteRange, Lang, Region};

/// The size a piece grows to before the next boundary ends it.
pub const PIECE_BYTES: usize = 256 * 1024;

/// Parse `text` piece by piece, calling `each` with every piece's region; false when
/// `stop` ended it early (the pieces seen so far were handed on).
pub fn parse_in_pieces(
    lang: Lang,
    text: &str,
    stop: &mut dyn FnMut() -> bool,
    each: &mut dyn FnMut(Region<'_>),
) -> bool {
    let mut parser = parser_for(lang);
    for range in cuts(lang, text, PIECE_BYTES) {
        let mut stopped = false;
        let mut progress = |_: &tree_sitter::ParseState| {
            stopped = stopped || stop();
            stopped
        };
        let Ok(Some(tree)) = parse_range(&mut parser, lang, text, range.clone(), &mut progress)
        else {
            return false;
        };
        each(Region {
            root: tree.root_node(),
            range,
            id: 0,
        });
    }
    true
}

/// The pieces of `text`: consecutive ranges covering it, each ending at the first
/// boundary past `target` bytes (module doc).
pub fn cuts(lang: Lang, text: &str, target: usize) -> Vec<ByteRange> {
    let bounds = match lang {
        Lang::Cuda => c_boundaries(text.as_bytes()),
        Lang::Triton => python_boundaries(text.as_bytes()),
    };
    let mut out = Vec::new();
    let mut start = 0;
    for b in bounds {
        if b - start >= target && b < text.len() {
            out.push(start..b);
            start = b;
        }
    }
    out.push(start..text.len());
    out
}

/// Byte offsets just after a line break where a C/CUDA piece may end.
fn c_boundaries(b: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let (mut i, mut depth, mut last) = (0, 0i64, b'\n');
    let mut line_start = true;
    let mut directive = false;
    while i < b.len() {
        let c = b[i];
        match c {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                i = line_end(b, i);
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = memchr::memmem::find(&b[i + 2..], b"*/").map_or(b.len(), |p| i + 4 + p);
                continue;
            }
            b'"' | b'\'' => {
                // A C literal never opens with three quotes, so this is its one-line end.
                i = string_end(b, i, c);
                last = c;
                line_start = false;
                continue;
            }
            b'\n' | b'\r' => {
                let continued = last == b'\\';
                if depth <= 0 && !continued && (matches!(last, b'}' | b';') || directive) {
                    out.push(i + 1);
                }
                if !continued {
                    directive = false;
                }
                line_start = true;
                i += 1;
                continue;
            }
            b' ' | b'\t' => {
                i += 1;
                continue;
            }
            b'#' if line_start => directive = true,
            b'{' | b'(' | b'[' if !directive => depth += 1,
            b'}' | b')' | b']' if !directive => depth -= 1,
            _ => {}
        }
        last = c;
        line_start = false;
        i += 1;
    }
    out
}

/// Byte offsets of line starts where a Python piece may begin.
fn python_boundaries(b: &[u8]) -> Vec<usize> {
    const CONTINUES: &[&[u8]] = &[b"else", b"elif", b"except", b"finally"];
    let mut out = Vec::new();
    let (mut i, mut depth, mut last) = (0, 0i64, b'\n');
    let mut decorated = false;
    while i < b.len() {
        let c = b[i];
        match c {
            b'#' => {
                i = line_end(b, i);
                continue;
            }
            b'"' | b'\'' => {
                i = string_end(b, i, c);
                last = c;
                continue;
            }
            b'\n' | b'\r' => {
                let at = i + 1;
                let next = b.get(at).copied().unwrap_or(b' ');
                let starts_statement = next.is_ascii_alphabetic() || next == b'_' || next == b'@';
                if depth <= 0
                    && last != b'\\'
                    && starts_statement
                    && !decorated
                    && !CONTINUES.iter().any(|k| b[at..].starts_with(k))
                {
                    out.push(at);
                }
                if at < b.len() && !b[at].is_ascii_whitespace() {
                    decorated = next == b'@';
                }
                last = c;
                i += 1;
                continue;
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            _ => {}
        }
        if !c.is_ascii_whitespace() {
            last = c;
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(lang: Lang, text: &str, target: usize) -> Vec<&str> {
        cuts(lang, text, target)
            .into_iter()
            .map(|r| &text[r])
            .collect()
    }

    #[test]
    fn cuda_pieces_end_after_top_level_items() {
        let src = "#define A(x) \\\n  x\nint a;\n/* { */ void f() {\n  g();\n}\nstruct S { int x; };\n__global__ void k(char c = '}') { }\n";
        assert_eq!(
            pieces(Lang::Cuda, src, 1),
            [
                "#define A(x) \\\n  x\n",
                "int a;\n",
                "/* { */ void f() {\n  g();\n}\n",
                "struct S { int x; };\n",
                "__global__ void k(char c = '}') { }\n"
            ]
        );
        assert_eq!(pieces(Lang::Cuda, src, 1 << 20), [src]);
    }

    #[test]
    fn python_pieces_start_at_top_level_statements() {
        let src = "import a\n@d\ndef f(x,\ny):\n    s = '''\nz = 1\n'''\n    return x\nif a:\n    pass\nelse:\n    pass\n# c\nb = [1,\n2]\n";
        assert_eq!(
            pieces(Lang::Triton, src, 1),
            [
                "import a\n",
                "@d\ndef f(x,\ny):\n    s = '''\nz = 1\n'''\n    return x\n",
                "if a:\n    pass\nelse:\n    pass\n# c\n",
                "b = [1,\n2]\n"
            ]
        );
    }

    #[test]
    fn every_piece_is_parsed_and_errors_keep_their_offsets() {
        let mut src = String::new();
        for i in 0..2000 {
            src.push_str(&format!(
                "__global__ void k{i}(float* y) {{ y[0] = {i}.0f; }}\n"
            ));
        }
        src.push_str("__global__ void bad(float* y) { y[0] = ; }\n");
        let mut seen = Vec::new();
        let mut errors = Vec::new();
        let done = parse_in_pieces(Lang::Cuda, &src, &mut || false, &mut |r| {
            seen.push(r.range.clone());
            if r.root.has_error() {
                errors.push(r.range.clone());
            }
        });
        assert!(done);
        assert!(seen.len() == 1 || seen.windows(2).all(|w| w[0].end == w[1].start));
        assert_eq!(seen.last().map(|r| r.end), Some(src.len()));
        assert_eq!(errors.len(), 1);
        assert!(src[errors[0].clone()].contains("bad"));
    }
}
