//! The one edit builder and splice applier every rewrite uses. A rewrite collects
//! byte-range [`Edit`]s against the text it read (the whole file, or a slice of it) and
//! [`Edits::apply`] splices them in one pass. Edits that overlap are refused with an
//! error, never skipped: a rewrite whose edits collide has a bug, and a half-applied
//! rewrite could still parse and plan while computing something else. Two insertions at
//! the same point are kept in the order they were added; an insertion at the start of a
//! replaced range goes before it, one at its end after it.

use crate::syntax::ByteRange;

/// One splice: `at` replaced with `text` (an insertion when `at` is empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Edit {
    pub at: ByteRange,
    pub text: String,
}

impl Edit {
    pub fn insert(at: usize, text: impl Into<String>) -> Edit {
        Edit {
            at: at..at,
            text: text.into(),
        }
    }

    pub fn replace(at: ByteRange, text: impl Into<String>) -> Edit {
        Edit {
            at,
            text: text.into(),
        }
    }
}

/// Why a set of edits could not be applied: always a bug in the rewrite that made them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum EditError {
    #[error("two edits overlap (bytes {first:?} and {second:?})")]
    Overlap { first: ByteRange, second: ByteRange },
    #[error("an edit (bytes {0:?}) lies outside the text it edits or not on a character boundary")]
    OutOfBounds(ByteRange),
}

/// Edits against one text, applied together.
#[derive(Clone, Debug, Default)]
pub(super) struct Edits {
    edits: Vec<Edit>,
}

impl Edits {
    pub fn new() -> Edits {
        Edits::default()
    }

    pub fn extend(&mut self, more: impl IntoIterator<Item = Edit>) {
        self.edits.extend(more);
    }

    /// Edits from (range, new text) pairs.
    pub fn from_pairs(pairs: impl IntoIterator<Item = (ByteRange, String)>) -> Edits {
        Edits {
            edits: pairs
                .into_iter()
                .map(|(at, text)| Edit { at, text })
                .collect(),
        }
    }

    /// `src` with every edit made.
    pub fn apply(&self, src: &str) -> Result<String, EditError> {
        self.apply_within(src, 0..src.len())
    }

    /// `src[span]` with every edit made; every edit must lie inside `span` (ranges are
    /// offsets into `src`, not into the span).
    pub fn apply_within(&self, src: &str, span: ByteRange) -> Result<String, EditError> {
        let mut order: Vec<&Edit> = self.edits.iter().collect();
        // Stable: equal starts keep their order, insertions before a replacement there.
        order.sort_by_key(|e| (e.at.start, !e.at.is_empty()));
        for w in order.windows(2) {
            if w[0].at.end > w[1].at.start {
                return Err(EditError::Overlap {
                    first: w[0].at.clone(),
                    second: w[1].at.clone(),
                });
            }
        }
        let mut out = String::with_capacity(span.len() + 64 * order.len());
        let mut at = span.start;
        for e in order {
            if e.at.start < span.start || e.at.end > span.end {
                return Err(EditError::OutOfBounds(e.at.clone()));
            }
            let kept = src
                .get(at..e.at.start)
                .ok_or_else(|| EditError::OutOfBounds(e.at.clone()))?;
            if src.get(e.at.clone()).is_none() {
                return Err(EditError::OutOfBounds(e.at.clone()));
            }
            out.push_str(kept);
            out.push_str(&e.text);
            at = e.at.end;
        }
        out.push_str(
            src.get(at..span.end)
                .ok_or(EditError::OutOfBounds(span.clone()))?,
        );
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edits(list: Vec<Edit>) -> Edits {
        let mut e = Edits::new();
        e.extend(list);
        e
    }

    #[test]
    fn edits_apply_in_position_order_whatever_order_they_were_added() {
        let e = edits(vec![
            Edit::replace(6..11, "there"),
            Edit::insert(0, "<"),
            Edit::insert(11, ">"),
            Edit::insert(11, "!"),
        ]);
        assert_eq!(e.apply("hello world").unwrap(), "<hello there>!");
    }

    #[test]
    fn an_insertion_at_the_start_of_a_replacement_goes_before_it() {
        let e = edits(vec![
            Edit::replace(0..5, "HELLO"),
            Edit::insert(0, "["),
            Edit::insert(5, "]"),
        ]);
        assert_eq!(e.apply("hello world").unwrap(), "[HELLO] world");
    }

    #[test]
    fn overlapping_edits_are_refused_not_skipped() {
        let e = Edits::from_pairs([(0..5, "a".to_string()), (3..8, "b".to_string())]);
        assert_eq!(
            e.apply("hello world"),
            Err(EditError::Overlap {
                first: 0..5,
                second: 3..8
            })
        );
        let e = edits(vec![Edit::replace(0..5, "a"), Edit::insert(2, "b")]);
        assert!(matches!(e.apply("hello"), Err(EditError::Overlap { .. })));
        let e = edits(vec![Edit::replace(0..2, "a"), Edit::replace(0..3, "b")]);
        assert!(matches!(e.apply("hello"), Err(EditError::Overlap { .. })));
    }

    #[test]
    fn edits_outside_the_span_or_off_char_boundaries_are_refused() {
        let e = edits(vec![Edit::insert(3, "x")]);
        assert_eq!(
            e.apply_within("abcdef", 4..6),
            Err(EditError::OutOfBounds(3..3))
        );
        assert_eq!(e.apply_within("abcdef", 2..6).unwrap(), "cxdef");
        let e = edits(vec![Edit::replace(1..2, "x")]);
        assert_eq!(e.apply("é"), Err(EditError::OutOfBounds(1..2)));
        let e = edits(vec![Edit::insert(40, "x")]);
        assert_eq!(e.apply("abc"), Err(EditError::OutOfBounds(40..40)));
    }
}
