//! One open document: ropey text plus its tree-sitter tree, kept in step by incremental
//! edits (`InputEdit` + reparse with the old tree), and the conversions between LSP
//! positions (UTF-16 or UTF-8 code units, per the negotiated `positionEncoding`) and byte
//! offsets. Knows nothing about LSP transport or kernels; `lsp` and `cli` call it.
//!
//! Invariant: `tree` is always the tree of the current `rope` text (or `None` when the
//! parser gave up), because every edit goes through [`Document::apply_change`].

use ropey::Rope;
use tree_sitter::{InputEdit, Parser, Point, Tree};

use crate::syntax::{ts_language, ByteRange, Lang};

/// How the client counts columns (LSP `positionEncoding`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PositionEncoding {
    Utf8,
    #[default]
    Utf16,
}

/// A zero-based line and column in the negotiated encoding, as LSP sends them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LinePos {
    pub line: u32,
    pub col: u32,
}

/// Why a position did not name a place in the document. Positions past the end of a
/// line are clamped to the line's end as the LSP spec asks; these are the rest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PositionError {
    #[error("line {line} is past the end of the document ({lines} lines)")]
    LinePastEnd { line: u32, lines: usize },
    #[error("range end {}:{} is before its start {}:{}", end.line, end.col, start.line, start.col)]
    Reversed { start: LinePos, end: LinePos },
}

fn parser_for(lang: Lang) -> Parser {
    let mut parser = Parser::new();
    // The grammars are compiled into this binary with a matching ABI (a test checks
    // both), so failure here is a build defect, not an input problem.
    parser
        .set_language(&ts_language(lang))
        .expect("bundled tree-sitter grammar matches the tree-sitter ABI");
    parser
}

/// A parse of one document's text, to run on any thread (see [`Document::parse_job`]).
pub struct ParseJob {
    pub lang: Lang,
    pub text: String,
    old_tree: Option<Tree>,
    was_masked: bool,
}

/// What a [`ParseJob`] made.
pub struct Parsed {
    /// `None` when the parser gave up or was stopped.
    pub tree: Option<Tree>,
    masked: bool,
    /// The parse was stopped by the caller's `stop` before it finished.
    pub stopped: bool,
}

impl Parsed {
    /// No parse (a file that is not checked).
    pub fn none() -> Self {
        Parsed {
            tree: None,
            masked: false,
            stopped: false,
        }
    }
}

impl ParseJob {
    /// Parse the text, incrementally from the old tree when there is one; `stop` is
    /// asked as the parse goes and ends it when it answers true.
    pub fn run(&self, stop: &mut dyn FnMut() -> bool) -> Parsed {
        let mut parser = parser_for(self.lang);
        let masked = crate::syntax::mask::masked(self.lang, &self.text);
        // Text with hidden regions (syntax::mask) is parsed whole: an edit can move them.
        let old = if masked.is_some() || self.was_masked {
            None
        } else {
            self.old_tree.as_ref()
        };
        let bytes = masked.as_deref().unwrap_or(&self.text).as_bytes();
        let mut stopped = false;
        let mut progress = |_: &tree_sitter::ParseState| {
            stopped = stopped || stop();
            stopped
        };
        let options = tree_sitter::ParseOptions::new().progress_callback(&mut progress);
        let mut read = |byte: usize, _: Point| -> &[u8] { bytes.get(byte..).unwrap_or(&[]) };
        let tree = parser.parse_with_options(&mut read, old, Some(options));
        Parsed {
            tree,
            masked: masked.is_some(),
            stopped,
        }
    }
}

pub struct Document {
    pub lang: Lang,
    pub version: i32,
    rope: Rope,
    /// The text as one string, rebuilt after each batch of edits; analysis works on `&str`.
    text: String,
    parser: Parser,
    tree: Option<Tree>,
    /// The last parse read a masked text (syntax::mask).
    masked: bool,
}

impl Document {
    pub fn new(lang: Lang, version: i32, text: &str) -> Self {
        let mut doc = Document::unparsed(lang, version, text);
        doc.tree = crate::syntax::parse_text(&mut doc.parser, lang, text);
        doc.masked = doc.tree.is_some() && crate::syntax::mask::masked(lang, text).is_some();
        doc
    }

    /// A document whose text is not parsed yet: the server parses on an analysis
    /// thread ([`ParseJob`]) and installs the tree with [`Document::install_tree`].
    pub fn unparsed(lang: Lang, version: i32, text: &str) -> Self {
        Document {
            lang,
            version,
            rope: Rope::from_str(text),
            text: text.to_string(),
            parser: parser_for(lang),
            tree: None,
            masked: false,
        }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// What a parse of the current text needs, detached from the document so that it
    /// can run on another thread: the text and the last tree, edited to match it (so
    /// the parse is incremental).
    pub fn parse_job(&self) -> ParseJob {
        ParseJob {
            lang: self.lang,
            text: self.text.clone(),
            old_tree: self.tree.clone(),
            was_masked: self.masked,
        }
    }

    /// Keep the tree a [`ParseJob`] made of the current text.
    pub fn install_tree(&mut self, parsed: Parsed) {
        self.tree = parsed.tree;
        self.masked = parsed.masked;
    }

    pub fn tree(&self) -> Option<&Tree> {
        self.tree.as_ref()
    }

    pub fn len_lines(&self) -> usize {
        self.rope.len_lines()
    }

    /// Replace the whole text (a `didChange` without a range). Does not parse: the old
    /// tree describes nothing of the new text, so the next parse ([`Document::parse_job`]
    /// off the server's loop, or [`Document::reparse`]) starts fresh. (Parsing here
    /// blocked the loop for seconds on a 20 MB file and kept a tree of forty times the
    /// text even for files checked for syntax only, issue #16.)
    pub fn replace_all(&mut self, text: &str) {
        self.rope = Rope::from_str(text);
        self.text = text.to_string();
        self.tree = None;
        self.masked = false;
    }

    /// Apply one ranged edit to the rope and the tree. Does not reparse: call
    /// [`Document::reparse`] once after a batch of edits.
    pub fn apply_change(
        &mut self,
        start: LinePos,
        end: LinePos,
        new_text: &str,
        enc: PositionEncoding,
    ) -> Result<(), PositionError> {
        if end < start {
            return Err(PositionError::Reversed { start, end });
        }
        let start_byte = self.offset(start, enc)?;
        let old_end_byte = self.offset(end, enc)?;
        let start_position = self.point(start_byte);
        let old_end_position = self.point(old_end_byte);

        let start_char = self.rope.byte_to_char(start_byte);
        let old_end_char = self.rope.byte_to_char(old_end_byte);
        self.rope.remove(start_char..old_end_char);
        self.rope.insert(start_char, new_text);
        self.text.replace_range(start_byte..old_end_byte, new_text);

        let new_end_byte = start_byte + new_text.len();
        let new_end_position = self.point(new_end_byte);
        if let Some(tree) = self.tree.as_mut() {
            tree.edit(&InputEdit {
                start_byte,
                old_end_byte,
                new_end_byte,
                start_position,
                old_end_position,
                new_end_position,
            });
        }
        Ok(())
    }

    /// Drop the tree to save memory (a 10,000-line file's tree is several MB). The next
    /// [`Document::reparse`] parses from scratch; analyses made earlier stay valid.
    pub fn drop_tree(&mut self) {
        self.tree = None;
    }

    /// A fresh tree of the current text that the document does not keep (for analyzing
    /// a document whose tree was dropped, without growing memory again).
    pub fn parse_detached(&mut self) -> Option<Tree> {
        crate::syntax::parse_text(&mut self.parser, self.lang, &self.text)
    }

    /// Reparse after edits: incrementally, reusing the edited old tree, when there is one.
    /// (The server parses through [`ParseJob`] instead, off its message loop.)
    pub fn reparse(&mut self) {
        // Text with hidden regions (syntax::mask) is parsed whole: an edit can move them.
        let masked = crate::syntax::mask::masked(self.lang, &self.text);
        if masked.is_some() || self.masked {
            self.masked = masked.is_some();
            let text = masked.as_deref().unwrap_or(&self.text);
            self.tree = self.parser.parse(text, None);
            return;
        }
        let rope = &self.rope;
        let mut read = |byte: usize, _: Point| -> &[u8] {
            if byte >= rope.len_bytes() {
                return &[];
            }
            let (chunk, chunk_start, _, _) = rope.chunk_at_byte(byte);
            &chunk.as_bytes()[byte - chunk_start..]
        };
        self.tree = self
            .parser
            .parse_with_options(&mut read, self.tree.as_ref(), None);
    }

    /// Byte offset of an LSP position. A column past the end of its line is clamped to
    /// the line's end (LSP: "defaults back to the line length"); a line past the end of
    /// the document is an error, except the line right after a final newline.
    pub fn offset(&self, pos: LinePos, enc: PositionEncoding) -> Result<usize, PositionError> {
        let line = pos.line as usize;
        let lines = self.rope.len_lines();
        if line >= lines {
            return Err(PositionError::LinePastEnd {
                line: pos.line,
                lines,
            });
        }
        let line_start_byte = self.rope.line_to_byte(line);
        let line_end_byte = self.line_content_end(line);
        let col = pos.col as usize;
        let byte = match enc {
            PositionEncoding::Utf8 => {
                let mut b = (line_start_byte + col).min(line_end_byte);
                // A UTF-8 column inside a multi-byte character means its start.
                while b > line_start_byte && !self.text.is_char_boundary(b) {
                    b -= 1;
                }
                b
            }
            PositionEncoding::Utf16 => {
                let line_start_char = self.rope.byte_to_char(line_start_byte);
                let line_end_char = self.rope.byte_to_char(line_end_byte);
                let start_cu = self.rope.char_to_utf16_cu(line_start_char);
                let end_cu = self.rope.char_to_utf16_cu(line_end_char);
                let cu = (start_cu + col).min(end_cu);
                let ch = self.rope.utf16_cu_to_char(cu);
                self.rope.char_to_byte(ch)
            }
        };
        Ok(byte)
    }

    /// LSP position of a byte offset (clamped to the document; a byte inside a
    /// multi-byte character maps to that character's start).
    pub fn position(&self, byte: usize, enc: PositionEncoding) -> LinePos {
        let mut byte = byte.min(self.text.len());
        while byte > 0 && !self.text.is_char_boundary(byte) {
            byte -= 1;
        }
        let line = self.rope.byte_to_line(byte);
        let line_start_byte = self.rope.line_to_byte(line);
        let col = match enc {
            PositionEncoding::Utf8 => byte - line_start_byte,
            PositionEncoding::Utf16 => {
                let c0 = self.rope.byte_to_char(line_start_byte);
                let c1 = self.rope.byte_to_char(byte);
                self.rope.char_to_utf16_cu(c1) - self.rope.char_to_utf16_cu(c0)
            }
        };
        LinePos {
            line: line as u32,
            col: col as u32,
        }
    }

    pub fn range(&self, r: &ByteRange, enc: PositionEncoding) -> (LinePos, LinePos) {
        (self.position(r.start, enc), self.position(r.end, enc))
    }

    /// Byte offset of the start of a (0-based) line, clamped to the document.
    pub fn line_start(&self, line: usize) -> usize {
        if line >= self.rope.len_lines() {
            return self.text.len();
        }
        self.rope.line_to_byte(line)
    }

    /// End of a line's content: before its `\n` / `\r\n` / `\r`.
    fn line_content_end(&self, line: usize) -> usize {
        let start = self.rope.line_to_byte(line);
        let end = if line + 1 < self.rope.len_lines() {
            self.rope.line_to_byte(line + 1)
        } else {
            self.rope.len_bytes()
        };
        let bytes = &self.text.as_bytes()[start..end];
        let mut e = end;
        if bytes.ends_with(b"\r\n") {
            e -= 2;
        } else if bytes.ends_with(b"\n") || bytes.ends_with(b"\r") {
            e -= 1;
        }
        e
    }

    /// tree-sitter point (row, byte column) of a byte offset. Rows count `\n` only, as
    /// tree-sitter does.
    fn point(&self, byte: usize) -> Point {
        let before = &self.text.as_bytes()[..byte.min(self.text.len())];
        let row = memchr_count(before);
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        Point {
            row,
            column: byte - line_start,
        }
    }
}

fn memchr_count(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b == b'\n').count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(line: u32, col: u32) -> LinePos {
        LinePos { line, col }
    }

    #[test]
    fn utf16_columns_count_surrogate_pairs() {
        // "😀" is 4 bytes and 2 UTF-16 code units; "é" is 2 bytes and 1 code unit.
        let doc = Document::new(Lang::Cuda, 1, "// é😀x\nint y;\n");
        assert_eq!(doc.offset(pos(0, 4), PositionEncoding::Utf16).unwrap(), 5);
        // Column 5 falls between the surrogates of 😀: it means the character's start.
        assert_eq!(doc.offset(pos(0, 5), PositionEncoding::Utf16).unwrap(), 5);
        assert_eq!(doc.offset(pos(0, 6), PositionEncoding::Utf16).unwrap(), 9);
        assert_eq!(doc.position(9, PositionEncoding::Utf16), pos(0, 6));
        assert_eq!(doc.position(9, PositionEncoding::Utf8), pos(0, 9));
        assert_eq!(doc.offset(pos(1, 3), PositionEncoding::Utf8).unwrap(), 14);
    }

    #[test]
    fn columns_past_line_end_clamp_and_lines_past_end_fail() {
        let doc = Document::new(Lang::Cuda, 1, "ab\r\ncd");
        assert_eq!(doc.offset(pos(0, 99), PositionEncoding::Utf16).unwrap(), 2);
        assert_eq!(doc.offset(pos(1, 99), PositionEncoding::Utf16).unwrap(), 6);
        assert!(matches!(
            doc.offset(pos(7, 0), PositionEncoding::Utf16),
            Err(PositionError::LinePastEnd { line: 7, lines: 2 })
        ));
    }

    #[test]
    fn incremental_edits_match_a_fresh_parse() {
        let src = "__global__ void k(float* x) { x[0] = 1.0f; }\n";
        let mut doc = Document::new(Lang::Cuda, 1, src);
        // Rename x to yy in the body and insert a parameter, as two edits in one batch.
        doc.apply_change(pos(0, 30), pos(0, 31), "yy", PositionEncoding::Utf16)
            .unwrap();
        doc.apply_change(
            pos(0, 26),
            pos(0, 26),
            ", float* yy",
            PositionEncoding::Utf16,
        )
        .unwrap();
        doc.reparse();
        let expected = "__global__ void k(float* x, float* yy) { yy[0] = 1.0f; }\n";
        assert_eq!(doc.text(), expected);
        let fresh = Document::new(Lang::Cuda, 1, expected);
        assert_eq!(
            doc.tree().unwrap().root_node().to_sexp(),
            fresh.tree().unwrap().root_node().to_sexp()
        );
    }

    #[test]
    fn reversed_range_is_an_error() {
        let mut doc = Document::new(Lang::Triton, 1, "x = 1\n");
        let err = doc
            .apply_change(pos(0, 3), pos(0, 1), "", PositionEncoding::Utf16)
            .unwrap_err();
        assert_eq!(err.to_string(), "range end 0:1 is before its start 0:3");
    }
}
