//! Python forms tree-sitter-python cannot read: starred items in a `return` or `yield`
//! list.

use super::ByteRange;

/// The `*` of each starred item at the top level of a `return` or `yield` list
/// (`return dy, *[None] * 3`, valid since Python 3.8): tree-sitter-python reads a
/// starred item only in a parenthesised tuple or a call. Without the `*` the list is an
/// ordinary tuple, so the rest of the statement parses as the author wrote it.
pub(super) fn starred_returns(text: &str) -> Vec<ByteRange> {
    let mut out = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let lead = line.len() - line.trim_start().len();
        let t = &line[lead..];
        let Some(kw) = ["return", "yield"].into_iter().find(|k| {
            t.strip_prefix(k)
                .is_some_and(|r| r.starts_with([' ', '\t']))
        }) else {
            continue;
        };
        let b = line.as_bytes();
        let mut i = lead + kw.len();
        let (mut depth, mut after_sep) = (0i32, true);
        while i < b.len() {
            match b[i] {
                b'#' | b'\n' | b'\r' => break,
                b' ' | b'\t' => {}
                q @ (b'"' | b'\'') => {
                    i += 1;
                    while i < b.len() && b[i] != q && b[i] != b'\n' {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                    after_sep = false;
                }
                b'(' | b'[' | b'{' => {
                    depth += 1;
                    after_sep = false;
                }
                b')' | b']' | b'}' => {
                    depth -= 1;
                    after_sep = false;
                }
                b',' if depth == 0 => after_sep = true,
                b'*' if depth == 0 && after_sep && b.get(i + 1) != Some(&b'*') => {
                    out.push(start + i..start + i + 1);
                    after_sep = false;
                }
                _ => after_sep = false,
            }
            i += 1;
        }
    }
    out
}
