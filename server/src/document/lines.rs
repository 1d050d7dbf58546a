//! Where each line of a document starts, kept in step with edits: LSP positions
//! (line, UTF-8 or UTF-16 column) to byte offsets and back, over the document's one
//! `String` (no second copy of the text, as a rope would be). Line breaks are the LSP's:
//! `\n`, `\r\n` and a lone `\r`.

/// The byte offset of every line's first byte; `starts[0] == 0`. A text ending in a line
/// break has an empty last line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineIndex {
    starts: Vec<usize>,
}

/// Pushes the start of every line that begins in `text[from..to]`, as offsets into
/// `text` (a line begins after `\n`, and after a `\r` not followed by `\n`).
fn scan(text: &[u8], from: usize, to: usize, out: &mut Vec<usize>) {
    let mut i = from;
    while i < to {
        match text[i] {
            b'\n' => out.push(i + 1),
            b'\r' if text.get(i + 1) != Some(&b'\n') => out.push(i + 1),
            _ => {}
        }
        i += 1;
    }
}

impl LineIndex {
    pub fn new(text: &str) -> Self {
        let mut starts = vec![0];
        scan(text.as_bytes(), 0, text.len(), &mut starts);
        LineIndex { starts }
    }

    pub fn len_lines(&self) -> usize {
        self.starts.len()
    }

    /// Start of `line` (< `len_lines`).
    pub fn line_to_byte(&self, line: usize) -> usize {
        self.starts[line]
    }

    /// The line that holds byte `byte`.
    pub fn byte_to_line(&self, byte: usize) -> usize {
        self.starts.partition_point(|&s| s <= byte) - 1
    }

    /// After `text` had `old_start..old_end` replaced by `inserted` bytes (`text` is the
    /// new text). Only the lines around the edit are scanned again; later starts shift.
    pub fn edit(&mut self, text: &str, old_start: usize, old_end: usize, inserted: usize) {
        let bytes = text.as_bytes();
        // A line break right before the edit may change meaning (`\r` then `\n`): scan
        // again from the start of the line before the one the edit begins in.
        let first = self.byte_to_line(old_start).saturating_sub(1);
        let from = self.starts[first];
        // Old starts after the edit, and one byte past it (a `\n` joining a `\r`).
        let keep_from = self.starts.partition_point(|&s| s <= old_end + 1);
        let new_end = old_start + inserted;
        let to = (new_end + 1).min(bytes.len());
        let mut fresh = Vec::new();
        scan(bytes, from, to, &mut fresh);
        // The old starts past the window (past `old_end + 1`) stay, shifted in place by
        // the edit; those in the window are replaced by the fresh scan.
        let (removed, shift) = (old_end - old_start, inserted);
        let fresh_len = fresh.len();
        self.starts.splice(first + 1..keep_from, fresh);
        for s in &mut self.starts[first + 1 + fresh_len..] {
            *s = *s + shift - removed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breaks_are_lf_crlf_and_lone_cr() {
        let t = "a\nb\r\nc\rd\n";
        assert_eq!(LineIndex::new(t).starts, vec![0, 2, 5, 7, 9]);
        assert_eq!(LineIndex::new("").starts, vec![0]);
        assert_eq!(LineIndex::new("x").starts, vec![0]);
        assert_eq!(LineIndex::new("\r").starts, vec![0, 1]);
        let i = LineIndex::new(t);
        assert_eq!(i.byte_to_line(0), 0);
        assert_eq!(i.byte_to_line(1), 0);
        assert_eq!(i.byte_to_line(2), 1);
        assert_eq!(i.byte_to_line(4), 1);
        assert_eq!(i.byte_to_line(9), 4);
    }

    /// Random edits, with line breaks of every kind in and around them, always give
    /// the index a fresh scan gives.
    #[test]
    fn edits_match_a_fresh_index() {
        let pieces = [
            "", "a", "\n", "\r", "\r\n", "ab\ncd", "\r\r\n\n", "é\r", "x\ny\rz",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let mut text = String::from("int a;\r\nint b;\nint c;\r");
        let mut index = LineIndex::new(&text);
        for round in 0..5000 {
            let boundaries: Vec<usize> = (0..=text.len())
                .filter(|&b| text.is_char_boundary(b))
                .collect();
            let a = boundaries[next(boundaries.len())];
            let b = boundaries[next(boundaries.len())];
            let (start, end) = (a.min(b), a.max(b));
            let end = if next(3) == 0 {
                end
            } else {
                start + (end - start).min(3)
            };
            let end = (end..=text.len())
                .find(|&e| text.is_char_boundary(e))
                .unwrap();
            let new = pieces[next(pieces.len())];
            text.replace_range(start..end, new);
            index.edit(&text, start, end, new.len());
            assert_eq!(index, LineIndex::new(&text), "round {round}: {text:?}");
            if text.len() > 200 {
                text.truncate(20);
                while !text.is_char_boundary(text.len()) {
                    text.pop();
                }
                index = LineIndex::new(&text);
            }
        }
    }
}
