//! Refusals in the author's words. The dispatcher takes a refusal from a normalized form
//! of the kernel where that names the cause better (a block width written `THREADS` read
//! as `blockDim.x`, [`super::apply`]); the refusal then quotes the normalized text
//! (`for (int s = blockDim.x / 2; ...)`) where the author wrote `THREADS / 2`. Each
//! backticked quote of the message found in the normalized kernel is mapped back through
//! the normalization's edits to the bytes the author wrote there. A quote not found in
//! the kernel, or one the refusal of the author's own text has too (a shape the rewrite
//! needs, `int i = blockIdx.x * blockDim.x + threadIdx.x;`, which may happen to stand in
//! the normalized kernel), stays as it is. Pure.

use super::edits::Edit;
use crate::syntax::ByteRange;

/// A refusal's text: `normalized`, which is the author's text `author` with `edits` made.
pub(super) struct Normalized<'a> {
    pub author: &'a str,
    pub normalized: &'a str,
    /// The kernel's function, a byte range of `normalized`.
    pub kernel: ByteRange,
    pub edits: &'a [Edit],
}

/// `why`, a refusal of `n.normalized`, with each backticked quote that stands in the
/// kernel replaced by the author's text at the same place (its first place there; a
/// quote of inserted text only stays), except quotes that `first`, the refusal of the
/// author's text, has too. A quote that is the kernel's text with its line breaks and
/// indents written as single spaces (a `for` head over two lines) is found too, and the
/// author's text is written the same way.
pub(super) fn in_author_words(why: &str, first: &str, n: &Normalized<'_>) -> String {
    let shared: Vec<&str> = first.split('`').skip(1).step_by(2).collect();
    let mut out = String::with_capacity(why.len());
    for (k, piece) in why.split('`').enumerate() {
        if k > 0 {
            out.push('`');
        }
        let quoted = k % 2 == 1 && !piece.is_empty() && !shared.contains(&piece);
        match quoted.then(|| authors_quote(piece, n)).flatten() {
            Some(mapped) => out.push_str(&mapped),
            None => out.push_str(piece),
        }
    }
    out
}

/// The author's text for `quote`, found in `n`'s kernel as it stands or with its
/// whitespace runs read as single spaces; None when it is not there or maps to nothing.
fn authors_quote(quote: &str, n: &Normalized<'_>) -> Option<String> {
    let body = n.normalized.get(n.kernel.clone())?;
    let (found, loose) = match body.find(quote) {
        Some(at) => (at..at + quote.len(), false),
        None => {
            let (flat, offsets) = collapsed(body);
            let at = flat.find(quote)?;
            (offsets[at]..offsets[at + quote.len() - 1] + 1, true)
        }
    };
    let at = n.kernel.start + found.start..n.kernel.start + found.end;
    let text = n.author.get(author_range(at, n.edits))?;
    let text = if loose {
        collapsed(text).0
    } else {
        text.to_string()
    };
    (!text.is_empty()).then_some(text)
}

/// `text` with each run of whitespace written as one space, and for each byte of it the
/// offset of the byte of `text` it stands for (a run's first).
fn collapsed(text: &str) -> (String, Vec<usize>) {
    let (mut out, mut offsets) = (String::with_capacity(text.len()), Vec::new());
    let mut in_run = false;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            if !in_run {
                out.push(' ');
                offsets.push(i);
            }
            in_run = true;
            continue;
        }
        in_run = false;
        out.push(c);
        offsets.extend(i..i + c.len_utf8());
    }
    (out, offsets)
}

/// The range of the author's text that the range `at` of the edited text came from: a
/// bound inside an edit's new text widens to that edit's whole old range.
pub(super) fn author_range(at: ByteRange, edits: &[Edit]) -> ByteRange {
    let mut order: Vec<&Edit> = edits.iter().collect();
    order.sort_by_key(|e| e.at.start);
    let (mut start, mut end) = (None, None);
    // How far the edited text has moved past the author's before the current edit.
    let mut shift: isize = 0;
    let back = |p: usize, shift: isize| p.saturating_add_signed(-shift);
    for e in order {
        let new_start = e.at.start.saturating_add_signed(shift);
        let new_end = new_start + e.text.len();
        if start.is_none() && at.start < new_end {
            start = Some(if at.start < new_start {
                back(at.start, shift)
            } else {
                e.at.start
            });
        }
        if end.is_none() && at.end <= new_end {
            end = Some(if at.end <= new_start {
                back(at.end, shift)
            } else {
                e.at.end
            });
        }
        shift += e.text.len() as isize - e.at.len() as isize;
    }
    let start = start.unwrap_or_else(|| back(at.start, shift));
    let end = end.unwrap_or_else(|| back(at.end, shift));
    start..end.max(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `author` with each `(old, new)` replaced at its first place, and the edits.
    fn edited(author: &str, swaps: &[(&str, &str)]) -> (String, Vec<Edit>) {
        let edits: Vec<Edit> = swaps
            .iter()
            .map(|(old, new)| {
                let at = author.find(old).unwrap();
                Edit::replace(at..at + old.len(), *new)
            })
            .collect();
        let mut all = super::super::edits::Edits::new();
        all.extend(edits.clone());
        (all.apply(author).unwrap(), edits)
    }

    #[test]
    fn a_range_of_the_edited_text_maps_to_the_authors_bytes() {
        let author = "int i = blockIdx.x * TB + threadIdx.x; for (int s = TC / 2; s > 0;)";
        let (new, edits) = edited(author, &[("TB", "blockDim.x"), ("TC", "blockDim.x")]);
        let back = |q: &str| {
            let at = new.find(q).unwrap();
            author[author_range(at..at + q.len(), &edits)].to_string()
        };
        // Before, across, inside and after the edits.
        assert_eq!(back("int i"), "int i");
        assert_eq!(
            back("blockIdx.x * blockDim.x + threadIdx.x"),
            "blockIdx.x * TB + threadIdx.x"
        );
        assert_eq!(back("int s = blockDim.x / 2"), "int s = TC / 2");
        assert_eq!(back("Dim.x"), "TB");
        assert_eq!(back("s > 0"), "s > 0");
        // A deletion and an insertion.
        let (new, edits) = (
            "ab XY cd".to_string(),
            vec![Edit::replace(2..4, ""), Edit::insert(5, "XY ")],
        );
        assert_eq!(&"ab-- cd"[author_range(0..new.len(), &edits)], "ab-- cd");
        assert_eq!(author_range(3..5, &edits), 5..5);
    }

    #[test]
    fn quotes_found_in_the_kernel_are_the_authors_and_others_stay() {
        let author = "#define THREADS 256\n__global__ void k() { for (int s = THREADS / 2; s > 0; s >>= 1) {} }\n";
        let (new, edits) = edited(author, &[("THREADS / 2", "blockDim.x / 2")]);
        let mut n = Normalized {
            author,
            normalized: &new,
            kernel: new.find("__global__").unwrap()..new.len(),
            edits: &edits,
        };
        let why = "`k` has no counted loop: `for (int s = blockDim.x / 2; s > 0; s >>= 1)` is not counted (the condition `s > 0` is not `s <`); it needs `int i = blockIdx.x * blockDim.x + threadIdx.x;`";
        assert_eq!(
            in_author_words(why, "", &n),
            "`k` has no counted loop: `for (int s = THREADS / 2; s > 0; s >>= 1)` is not counted (the condition `s > 0` is not `s <`); it needs `int i = blockIdx.x * blockDim.x + threadIdx.x;`"
        );
        // A quote the first refusal has too stays: the rewrite wrote it, not the kernel.
        let shape = "no index `blockDim.x / 2`";
        assert_eq!(in_author_words(shape, "", &n), "no index `THREADS / 2`");
        assert_eq!(
            in_author_words(shape, "it needs `blockDim.x / 2`", &n),
            shape
        );
        // A head over two lines, quoted on one.
        let author2 = "__global__ void k() {\n    for (int i = blockIdx.x * TB + threadIdx.x; i < n;\n         i += TB * gridDim.x) {}\n}\n";
        let (new2, edits2) = edited(
            author2,
            &[("TB +", "blockDim.x +"), ("TB *", "blockDim.x *")],
        );
        let two = Normalized {
            author: author2,
            normalized: &new2,
            kernel: 0..new2.len(),
            edits: &edits2,
        };
        assert_eq!(
            in_author_words("`for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)` is not counted", "", &two),
            "`for (int i = blockIdx.x * TB + threadIdx.x; i < n; i += TB * gridDim.x)` is not counted"
        );
        // A message without quotes is as it was; outside the kernel nothing is looked up.
        assert_eq!(in_author_words("no loop", "", &n), "no loop");
        n.kernel = 0..new.find("__global__").unwrap();
        assert_eq!(in_author_words(why, "", &n), why);
    }
}
