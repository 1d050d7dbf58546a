//! Finds the `@bench` block above a kernel (docs/spec.md, "Where it goes"): the consecutive
//! comment-only lines ending on the line right before the kernel's `def_range` (which
//! already starts at `template <...>`, `extern "C"` or the first Python decorator). A
//! blank line or a line with code ends the block; other comments may be mixed in.
//! The candidates are the `comment` nodes right before the definition among its
//! siblings (the caller collects them while walking items, so no tree search per kernel):
//! `//` inside a string or `#` inside a Python string never counts. Parsing the statements
//! is `spec`'s job.

use super::{ByteRange, Lang, SpecBlock, SpecLine};

/// The spec block of a kernel whose definition starts at byte `def_start`; `leading` are
/// the comment siblings right before the definition, nearest last.
pub(crate) fn spec_block(
    lang: Lang,
    src: &str,
    lines: &LineIndex,
    leading: &[ByteRange],
    def_start: usize,
) -> SpecBlock {
    let bytes = src.as_bytes();
    // Comments of the block, nearest first: each separated from the next by blanks and at
    // most one line break.
    let mut comments: Vec<ByteRange> = Vec::new();
    let mut next_start = def_start.min(bytes.len());
    for c in leading.iter().rev() {
        let Some(gap) = bytes.get(c.end..next_start) else {
            break;
        };
        if !gap.iter().all(u8::is_ascii_whitespace) || line_breaks(gap) > 1 {
            break;
        }
        comments.push(c.clone());
        next_start = c.start;
    }
    // The top line of the block must hold only comments; if code precedes its first
    // comment (`int x; // note`), that line is code and ends the block below it.
    if let Some(top) = comments.last() {
        let top_line = line_start_of(bytes, top.start);
        // A byte-order mark before the first line is not code.
        let from = if top_line == 0 && src.starts_with('\u{feff}') {
            3.min(top.start)
        } else {
            top_line
        };
        if bytes[from..top.start]
            .iter()
            .any(|b| !b.is_ascii_whitespace())
        {
            comments.retain(|c| line_start_of(bytes, c.start) != top_line);
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

/// Line breaks in `gap`: `\n`, `\r\n` and a lone `\r` (old Mac line endings) count one.
fn line_breaks(gap: &[u8]) -> usize {
    gap.iter()
        .enumerate()
        .filter(|&(i, &b)| b == b'\n' || (b == b'\r' && gap.get(i + 1) != Some(&b'\n')))
        .count()
}

pub(crate) fn line_start_of(bytes: &[u8], at: usize) -> usize {
    let at = at.min(bytes.len());
    bytes[..at]
        .iter()
        .rposition(|&b| b == b'\n' || b == b'\r')
        .map_or(0, |i| i + 1)
}

/// Line starts of a text, to turn byte offsets into 0-based line numbers in O(log n).
pub(crate) struct LineIndex(Vec<usize>);

impl LineIndex {
    pub(crate) fn new(src: &str) -> Self {
        let bytes = src.as_bytes();
        let starts = std::iter::once(0).chain(
            bytes
                .iter()
                .enumerate()
                .filter(|&(i, &b)| b == b'\n' || (b == b'\r' && bytes.get(i + 1) != Some(&b'\n')))
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
    let Some(text) = src.get(comment.clone()) else {
        return Vec::new(); // a tree that does not match the text
    };
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
        // A line ends at `\n`, or at a lone `\r` (old Mac line endings); a `\r\n`'s `\r`
        // is trimmed from the line below.
        let line_end = bytes[line_start..content_end]
            .iter()
            .enumerate()
            .position(|(k, &b)| {
                b == b'\n' || (b == b'\r' && bytes.get(line_start + k + 1) != Some(&b'\n'))
            })
            .map_or(content_end, |p| line_start + p);
        let mut i = line_start;
        let skip = |i: &mut usize, pred: &dyn Fn(u8) -> bool| {
            while *i < line_end && pred(bytes[*i]) {
                *i += 1;
            }
        };
        if first {
            // The comment opener and its decoration: `//`, `///`, `//!`, `/*`, `/**`, `#`, `##`.
            if lang == Lang::Cuda {
                i = (i + 2).min(line_end); // `//` or `/*`
            }
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
                if let Some(text) = src.get(after..end) {
                    out.push(SpecLine {
                        line: line_no,
                        offset: after,
                        text: text.to_string(),
                    });
                }
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
