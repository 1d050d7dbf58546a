//! Writing an accepted value back into the author's `@bench` spec: `NAME = V` replaces
//! the value of an existing `NAME = ...` statement, keeping everything else on the line,
//! or becomes a new `@bench` line after the block's last one, with that line's comment
//! prefix. [`spec_assignment`] finds a statement's expression and [`replace_ranges`]
//! applies several edits at once (a rewrite that changes `block` and `grid` together).
//! Pure: text in, text out.

use crate::syntax::{ByteRange, Kernel};

/// The expression of a spec statement `NAME = EXPR`, located in the document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecAssignment {
    /// Document byte range of `text`.
    pub range: ByteRange,
    /// The expression, trimmed (`cdiv(n, 256)`, `(16, 16)`, `1 << 24, 4099`).
    pub text: String,
}

/// The first `NAME = EXPR` statement of the kernel's spec, found the way
/// [`set_spec_value`] finds the statement it updates.
pub fn spec_assignment(kernel: &Kernel, name: &str) -> Option<SpecAssignment> {
    for line in &kernel.spec.lines {
        let mut at = 0;
        for segment in line.text.split(';') {
            let seg_start = at;
            at += segment.len() + 1;
            let Some(rest) = segment.trim_start().strip_prefix(name) else {
                continue;
            };
            let after = rest.trim_start();
            if !after.starts_with('=') || after.starts_with("==") {
                continue;
            }
            let eq = segment.len() - after.len();
            let expr = &segment[eq + 1..];
            let lead = expr.len() - expr.trim_start().len();
            let text = expr.trim();
            let start = line.offset + seg_start + eq + 1 + lead;
            return Some(SpecAssignment {
                range: start..start + text.len(),
                text: text.to_string(),
            });
        }
    }
    None
}

/// `text` with every range replaced by its new text. Ranges must not overlap; their
/// order does not matter. A range that is out of bounds or not on character boundaries
/// leaves the text unchanged there (callers pass ranges taken from the same text).
pub fn replace_ranges(text: &str, mut edits: Vec<(ByteRange, String)>) -> String {
    edits.sort_by_key(|(r, _)| r.start);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (range, new) in edits {
        if range.start < at || text.get(range.clone()).is_none() {
            continue;
        }
        out.push_str(&text[at..range.start]);
        out.push_str(&new);
        at = range.end;
    }
    out.push_str(&text[at..]);
    out
}

pub fn set_spec_value(text: &str, kernel: &Kernel, name: &str, value: &str) -> String {
    for line in &kernel.spec.lines {
        let mut at = 0;
        for segment in line.text.split(';') {
            let seg_start = at;
            at += segment.len() + 1;
            let Some(rest) = segment.trim_start().strip_prefix(name) else {
                continue;
            };
            let after = rest.trim_start();
            if !after.starts_with('=') || after.starts_with("==") {
                continue;
            }
            // `NAME = expr`: replace `expr` (trailing spaces kept, so column comments
            // and alignment survive).
            let eq = segment.len() - after.len();
            let expr = &segment[eq + 1..];
            let expr_trim_end = expr.trim_end().len();
            let start = line.offset + seg_start + eq + 1;
            let end = start + expr_trim_end;
            let mut out = String::with_capacity(text.len() + value.len());
            out.push_str(&text[..start]);
            out.push(' ');
            out.push_str(value);
            out.push_str(&text[end..]);
            return out;
        }
    }
    // No statement to update: a new line after the last @bench line, same prefix.
    let Some(last) = kernel.spec.lines.last() else {
        return text.to_string();
    };
    let line_start = text[..last.offset].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[last.offset..]
        .find('\n')
        .map_or(text.len(), |i| last.offset + i);
    let prefix = &text[line_start..last.offset]; // e.g. "// @bench"
    let nl = if text[..line_end].ends_with('\r') {
        "\r\n"
    } else {
        "\n"
    };
    let insert_at = (line_end + 1).min(text.len());
    let mut out = String::with_capacity(text.len() + prefix.len() + value.len() + 8);
    out.push_str(&text[..insert_at]);
    if insert_at == text.len() && !text.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!("{prefix} {name} = {value}{nl}"));
    out.push_str(&text[insert_at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::Document;
    use crate::syntax::{self, Lang};

    fn set(src: &str, name: &str, v: &str) -> String {
        let d = Document::new(Lang::Triton, 0, src);
        let m = syntax::analyze(Lang::Triton, src, d.tree().unwrap());
        set_spec_value(src, &m.kernels[0], name, v)
    }

    const K: &str = "import triton\nimport triton.language as tl\n\n# @bench n = 4096\n# @bench x_ptr: in f32[n]\n# @bench grid = cdiv(n, BLOCK); BLOCK = 64; num_warps = 4\n# @bench tune BLOCK in [64, 1024]\n@triton.jit\ndef k(x_ptr, n, BLOCK: tl.constexpr):\n    pass\n";

    #[test]
    fn replaces_the_value_and_keeps_the_rest_of_the_line() {
        let out = set(K, "BLOCK", "1024");
        assert!(
            out.contains("# @bench grid = cdiv(n, BLOCK); BLOCK = 1024; num_warps = 4\n"),
            "{out}"
        );
        assert!(
            out.contains("# @bench tune BLOCK in [64, 1024]\n"),
            "tune lines stay: {out}"
        );
        assert_eq!(out.lines().count(), K.lines().count());
    }

    #[test]
    fn finds_an_assignment_and_replaces_ranges_out_of_order() {
        let src = K;
        let d = Document::new(Lang::Triton, 0, src);
        let m = syntax::analyze(Lang::Triton, src, d.tree().unwrap());
        let k = &m.kernels[0];
        let grid = spec_assignment(k, "grid").unwrap();
        assert_eq!(grid.text, "cdiv(n, BLOCK)");
        assert_eq!(&src[grid.range.clone()], "cdiv(n, BLOCK)");
        let block = spec_assignment(k, "BLOCK").unwrap();
        assert_eq!(&src[block.range.clone()], "64");
        assert_eq!(spec_assignment(k, "BLOCK_M"), None);
        assert_eq!(spec_assignment(k, "num_stages"), None);
        let out = replace_ranges(
            src,
            vec![
                (block.range, "128".into()),
                (grid.range, "cdiv(n, 2 * BLOCK)".into()),
            ],
        );
        assert!(
            out.contains("# @bench grid = cdiv(n, 2 * BLOCK); BLOCK = 128; num_warps = 4\n"),
            "{out}"
        );
    }

    #[test]
    fn adds_a_line_when_the_name_has_no_statement() {
        let out = set(&K.replace("; BLOCK = 64", ""), "BLOCK", "256");
        assert!(
            out.contains("# @bench tune BLOCK in [64, 1024]\n# @bench BLOCK = 256\n@triton.jit"),
            "{out}"
        );
    }
}
