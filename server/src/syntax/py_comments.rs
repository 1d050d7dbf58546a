//! Comment-only lines of Python text, found by a small lexer that knows strings: the
//! `@bench` block above a Triton kernel is read from them, and long runs of them are
//! hidden from the parser (`mask`). tree-sitter-python's external scanner looks past
//! every following comment line at each one of a run, so a run of n comment lines cost
//! n² (10,000 `@bench` lines took 10 s); blank lines cost nothing, so the parser reads
//! long runs as blank lines. Pure, linear, never panics.

use super::ByteRange;

/// Runs of at least this many comment lines are hidden from the parser. Shorter ones
/// keep their `comment` nodes (and cost at most this many lines each, per line).
pub const HIDDEN_RUN: usize = 16;

/// The comment of every comment-only line (its first non-blank character is `#`, and
/// the line does not start inside a string), from `#` to the end of the line without
/// its line break, in order.
pub fn comment_lines(src: &str) -> Vec<ByteRange> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line_blank = true;
    while i < b.len() {
        match b[i] {
            b'\n' | b'\r' => {
                line_blank = true;
                i += 1;
            }
            b' ' | b'\t' | b'\x0c' => i += 1,
            b'#' => {
                let end = line_end(b, i);
                if line_blank {
                    out.push(i..end);
                }
                i = end;
            }
            q @ (b'\'' | b'"') => {
                line_blank = false;
                i = string_end(b, i, q);
            }
            b'\\' => i += 2, // a line continuation or a stray backslash
            _ => {
                line_blank = false;
                i += 1;
            }
        }
    }
    out
}

/// The runs of comment lines, separated by nothing but blanks and line breaks, that
/// hold at least `min` lines: each as the range from its first `#` to its last line's end.
pub fn comment_runs(src: &str, min: usize) -> Vec<ByteRange> {
    let b = src.as_bytes();
    let lines = comment_lines(src);
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=lines.len() {
        let joined = i < lines.len()
            && b[lines[i - 1].end..lines[i].start]
                .iter()
                .all(u8::is_ascii_whitespace);
        if !joined {
            if i - start >= min {
                out.push(lines[start].start..lines[i - 1].end);
            }
            start = i;
        }
    }
    out
}

/// The offset of the line break that ends the line holding `from` (or the end).
pub(crate) fn line_end(b: &[u8], from: usize) -> usize {
    b[from..]
        .iter()
        .position(|&c| c == b'\n' || c == b'\r')
        .map_or(b.len(), |p| from + p)
}

/// The byte after the string that opens with quote `q` at `at` (one or three quotes).
/// A backslash escapes the next byte in every string, raw ones too, as Python's
/// tokenizer reads them; a one-quote string ends at the line's end if left open.
pub(crate) fn string_end(b: &[u8], at: usize, q: u8) -> usize {
    let triple = b.get(at + 1) == Some(&q) && b.get(at + 2) == Some(&q);
    let mut i = at + if triple { 3 } else { 1 };
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            c if c == q => {
                if !triple {
                    return i + 1;
                }
                if b.get(i + 1) == Some(&q) && b.get(i + 2) == Some(&q) {
                    return i + 3;
                }
                i += 1;
            }
            b'\n' | b'\r' if !triple => return i,
            _ => i += 1,
        }
    }
    b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(src: &str) -> Vec<&str> {
        comment_lines(src).into_iter().map(|r| &src[r]).collect()
    }

    #[test]
    fn comment_only_lines_outside_strings() {
        let src = "# a\nx = 1  # not alone\n    # b\r\ns = '''\n# in a string\n'''\nt = \"# no\" # no\nu = '\\'' \n#c\r# d";
        assert_eq!(texts(src), ["# a", "# b", "#c", "# d"]);
        // An escaped quote does not end a string; a one-quote string ends at the line.
        let src = "s = \"\"\"a \\\"\"\" still\n# in\n\"\"\"\n# out\nt = 'open\n# after";
        assert_eq!(texts(src), ["# out", "# after"]);
        assert!(comment_lines("").is_empty());
        assert_eq!(texts("#"), ["#"]);
    }

    #[test]
    fn runs_join_comments_across_blank_lines_only() {
        let src = "# 1\n# 2\n\n   # 3\nx = 0\n# 4\n# 5\n";
        let runs: Vec<&str> = comment_runs(src, 2).into_iter().map(|r| &src[r]).collect();
        assert_eq!(runs, ["# 1\n# 2\n\n   # 3", "# 4\n# 5"]);
        assert_eq!(comment_runs(src, 4), Vec::<ByteRange>::new());
    }
}
