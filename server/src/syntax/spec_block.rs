//! Finds the `@bench` block above a kernel (SPEC.md, "Where it goes"): the consecutive
//! comment-only lines ending on the line right before the kernel's `def_range` (which
//! already starts at `template <...>`, `extern "C"` or the first Python decorator). A
//! blank line or a line with code ends the block; other comments may be mixed in.
//! Comments are found through the tree (`comment` nodes), so `//` inside a string or a
//! `#` inside a Python string never counts. Parsing the statements is `spec`'s job.

use tree_sitter::Node;

use super::{ByteRange, Lang, SpecBlock, SpecLine};

/// The spec block of a kernel whose definition starts at byte `def_start`.
pub(crate) fn spec_block(
    lang: Lang,
    src: &str,
    lines: &LineIndex,
    root: Node,
    def_start: usize,
) -> SpecBlock {
    let bytes = src.as_bytes();
    // Comments of the block, last first.
    let mut comments: Vec<ByteRange> = Vec::new();
    let mut line_start = line_start_of(bytes, def_start.min(bytes.len()));
    'lines: while line_start > 0 {
        let prev_start = line_start_of(bytes, line_start - 1);
        let Some(last) = last_non_space(bytes, prev_start, line_start - 1) else {
            break; // blank line
        };
        let line_comments = comments.len();
        let mut probe = last;
        loop {
            match comment_at(root, probe) {
                Some(c) => {
                    let c_start = c.start;
                    comments.push(c);
                    let c_line_start = line_start_of(bytes, c_start);
                    match last_non_space(bytes, c_line_start, c_start) {
                        None => {
                            line_start = c_line_start;
                            continue 'lines;
                        }
                        Some(b) => probe = b, // another comment (or code) before it on that line
                    }
                }
                None => {
                    // Code on this line: its comments are not part of the block.
                    comments.truncate(line_comments);
                    break 'lines;
                }
            }
        }
    }
    comments.reverse();
    let lines: Vec<SpecLine> = comments
        .iter()
        .flat_map(|c| bench_lines(lang, src, lines, c.clone()))
        .collect();
    let range = match (comments.first(), comments.last()) {
        (Some(first), Some(last)) if !lines.is_empty() => Some(first.start..last.end),
        _ => None,
    };
    SpecBlock { lines, range }
}

/// The comment node covering byte `at`, if any.
fn comment_at(root: Node, at: usize) -> Option<ByteRange> {
    let node = root.descendant_for_byte_range(at, at + 1)?;
    (node.kind() == "comment" && node.start_byte() <= at && at < node.end_byte())
        .then(|| node.byte_range())
}

pub(crate) fn line_start_of(bytes: &[u8], at: usize) -> usize {
    let at = at.min(bytes.len());
    bytes[..at]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1)
}

/// The last byte in `from..to` that is not ASCII whitespace.
fn last_non_space(bytes: &[u8], from: usize, to: usize) -> Option<usize> {
    let to = to.min(bytes.len());
    (from..to).rev().find(|&i| !bytes[i].is_ascii_whitespace())
}

/// Line starts of a text, to turn byte offsets into 0-based line numbers in O(log n).
pub(crate) struct LineIndex(Vec<usize>);

impl LineIndex {
    pub(crate) fn new(src: &str) -> Self {
        let starts = std::iter::once(0).chain(
            src.bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| i + 1),
        );
        LineIndex(starts.collect())
    }

    /// Number of the line holding byte `at` (0-based).
    pub(crate) fn line_of(&self, at: usize) -> u32 {
        (self.0.partition_point(|&s| s <= at).saturating_sub(1)) as u32
    }
}

/// The `@bench` lines of one comment.
fn bench_lines(lang: Lang, src: &str, index: &LineIndex, comment: ByteRange) -> Vec<SpecLine> {
    let bytes = src.as_bytes();
    let text = &src[comment.clone()];
    let block = lang == Lang::Cuda && text.starts_with("/*");
    // Where the comment's content ends: before a closing `*/`.
    let content_end = if block && text.ends_with("*/") && text.len() >= 4 {
        comment.end - 2
    } else {
        comment.end
    };
    let mut out = Vec::new();
    let mut line_start = comment.start;
    let mut first = true;
    let mut line_no = index.line_of(comment.start);
    while line_start <= content_end {
        let line_end = bytes[line_start..content_end]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(content_end, |p| line_start + p);
        let mut i = line_start;
        let skip = |i: &mut usize, pred: &dyn Fn(u8) -> bool| {
            while *i < line_end && pred(bytes[*i]) {
                *i += 1;
            }
        };
        if first {
            // The comment opener and its decoration: `//`, `///`, `//!`, `/*`, `/**`, `#`, `##`.
            match lang {
                Lang::Cuda if block => i += 2,
                Lang::Cuda => i += 2,
                Lang::Triton => {}
            }
            i = i.min(line_end);
            skip(&mut i, &|b| {
                b == b'/' || b == b'!' || b == b'*' || b == b'#'
            });
        } else if block {
            skip(&mut i, &|b| b == b' ' || b == b'\t');
            skip(&mut i, &|b| b == b'*');
        }
        skip(&mut i, &|b| b == b' ' || b == b'\t');
        const MARK: &[u8] = b"@bench";
        if bytes[i..line_end].starts_with(MARK) {
            let after = i + MARK.len();
            let boundary = bytes
                .get(after)
                .is_none_or(|b| !(b.is_ascii_alphanumeric() || *b == b'_'));
            if boundary {
                let mut end = line_end.max(after);
                if end > after && bytes[end - 1] == b'\r' {
                    end -= 1;
                }
                let end = end.min(content_end).max(after);
                out.push(SpecLine {
                    line: line_no,
                    offset: after,
                    text: src[after..end].to_string(),
                });
            }
        }
        if line_end >= content_end {
            break;
        }
        line_start = line_end + 1;
        line_no += 1;
        first = false;
    }
    out
}
