//! One open document: its text (one `String` and a line index) plus its parse, kept in step by incremental edits, and
//! the conversions between LSP positions (UTF-16 or UTF-8 code units, per the negotiated
//! `positionEncoding`) and byte offsets. Knows nothing about LSP transport or kernels;
//! `lsp` and `cli` call it.
//!
//! # The parse: a forest of regions
//! A CUDA document is parsed as regions ([`Forest`]): runs of top-level items, about
//! [`REGION_BYTES`] each, cut where the item before is not a comment (a `@bench` block
//! stays with its kernel). An edit marks the regions it touches; the next parse reads
//! only those, each on its own (tree-sitter's included ranges keep the document's
//! offsets), and `syntax::analyze_regions` re-walks only them. tree-sitter's own
//! incremental reparse cannot do this for CUDA: `__device__` next to another specifier
//! (`__device__ __forceinline__`, `static __device__`) parses through a grammar conflict,
//! and nodes from a conflict are never reused, so reparsing a 10,000-line file of device
//! helpers after one keystroke cost as much as parsing it whole (issue #16).
//!
//! A region parse is kept only when it cannot differ from a whole parse: it has no syntax
//! error, its text does not end in a line continuation, and no `/*` is left open in the
//! text. Otherwise the whole text is parsed again and cut anew (a file with a syntax error
//! is one region until the error is fixed). A Triton document is one region, reparsed
//! incrementally with the edited old tree.
//!
//! Invariant: after [`Document::reparse`] (or installing a [`ParseJob`]'s result), the
//! forest describes the current text, because every edit goes through
//! [`Document::apply_change`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tree_sitter::{InputEdit, Node, Parser, Point, Tree};

mod lines;
pub mod pieces;

use crate::syntax::{ts_language, ByteRange, Lang, Region};

/// A region is cut at the first item boundary past this many bytes.
pub const REGION_BYTES: usize = 2048;

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

/// A document's parse: trees with the document's byte offsets, and the regions that
/// cover the text in order, each a run of top-level items of one tree (or `None`: edited
/// since, to parse again). See the module doc.
#[derive(Clone)]
pub struct Forest {
    /// The grammar that made the trees: a tree is never reused by another grammar's
    /// parser (tree-sitter reads its node symbols as the new grammar's and aborts).
    lang: Lang,
    trees: Vec<Tree>,
    chunks: Vec<Chunk>,
}

#[derive(Clone, Debug)]
struct Chunk {
    range: ByteRange,
    tree: Option<usize>,
    id: u64,
}

static NEXT_REGION_ID: AtomicU64 = AtomicU64::new(1);

fn region_id() -> u64 {
    NEXT_REGION_ID.fetch_add(1, Ordering::Relaxed)
}

impl Forest {
    /// A forest of one whole tree of `len` bytes, cut into regions (CUDA) or kept as one
    /// (Triton).
    fn whole(lang: Lang, tree: Tree, len: usize) -> Self {
        let chunks = match lang {
            Lang::Cuda => cut(tree.root_node(), 0..len)
                .into_iter()
                .map(|range| Chunk {
                    range,
                    tree: Some(0),
                    id: region_id(),
                })
                .collect(),
            Lang::Triton => vec![Chunk {
                range: 0..len,
                tree: Some(0),
                id: region_id(),
            }],
        };
        Forest {
            lang,
            trees: vec![tree],
            chunks,
        }
    }

    /// The regions to analyze, in order; `None` while a region waits for its parse.
    pub fn regions(&self) -> Option<Vec<Region<'_>>> {
        self.chunks
            .iter()
            .map(|c| {
                let tree = &self.trees[c.tree?];
                Some(Region {
                    root: tree.root_node(),
                    range: c.range.clone(),
                    id: c.id,
                })
            })
            .collect()
    }

    /// The one tree of the whole text, when the forest has exactly one (a fresh parse).
    pub fn single_tree(&self) -> Option<&Tree> {
        match (
            &self.trees[..],
            self.chunks.iter().all(|c| c.tree.is_some()),
        ) {
            ([t], true) => Some(t),
            _ => None,
        }
    }

    /// How many regions (for tests and benchmarks).
    pub fn region_count(&self) -> usize {
        self.chunks.len()
    }

    /// Follow an edit of `start..old_end` into `start..new_end`: every tree learns it
    /// (offsets after it shift), the regions it touches (ends included) become one region
    /// to parse again, and the regions after it move.
    fn edit(&mut self, edit: &InputEdit) {
        for t in &mut self.trees {
            t.edit(edit);
        }
        let (s, old_e, new_e) = (edit.start_byte, edit.old_end_byte, edit.new_end_byte);
        let moved = |x: usize| (x + new_e).saturating_sub(old_e);
        let mut out: Vec<Chunk> = Vec::with_capacity(self.chunks.len() + 1);
        let mut dirty: Option<ByteRange> = None;
        for c in self.chunks.drain(..) {
            if c.range.end < s {
                out.push(c);
            } else if c.range.start > old_e {
                if let Some(d) = dirty.take() {
                    out.push(Chunk {
                        range: d,
                        tree: None,
                        id: 0,
                    });
                }
                out.push(Chunk {
                    range: moved(c.range.start)..moved(c.range.end),
                    ..c
                });
            } else {
                let end = if c.range.end >= old_e {
                    moved(c.range.end)
                } else {
                    new_e
                };
                dirty = Some(match dirty {
                    Some(d) => d.start..end,
                    None => c.range.start.min(s)..end,
                });
            }
        }
        if let Some(d) = dirty {
            out.push(Chunk {
                range: d,
                tree: None,
                id: 0,
            });
        }
        self.chunks = out;
    }

    /// Drop the trees no region uses.
    fn collect_garbage(&mut self) {
        let mut used = vec![false; self.trees.len()];
        for c in &self.chunks {
            if let Some(t) = c.tree {
                used[t] = true;
            }
        }
        let mut new_index = vec![usize::MAX; self.trees.len()];
        let mut kept = Vec::new();
        for (i, t) in std::mem::take(&mut self.trees).into_iter().enumerate() {
            if used[i] {
                new_index[i] = kept.len();
                kept.push(t);
            }
        }
        self.trees = kept;
        for c in &mut self.chunks {
            c.tree = c.tree.map(|t| new_index[t]);
        }
    }
}

/// Cut the top-level items of `root` that start in `range` into runs of about
/// [`REGION_BYTES`]. A cut goes right before an item, never after a comment (a `@bench`
/// block or any leading comment stays with its item) and never next to an item with a
/// syntax error. The runs cover `range` exactly.
fn cut(root: Node, range: ByteRange) -> Vec<ByteRange> {
    // A tree with a syntax error stays one region: tree-sitter's recovery may carry an
    // error across items, so no part of it stands alone.
    if !stands_alone(root) {
        return vec![range];
    }
    let mut out = Vec::new();
    let mut start = range.start;
    let mut prev: Option<Node> = None;
    for item in crate::syntax::top_items(root, &range) {
        let at = item.start_byte();
        let clean = |n: &Node| n.kind() != "comment" && !n.has_error() && !n.is_missing();
        if at >= start + REGION_BYTES && clean(&item) && prev.as_ref().is_some_and(clean) {
            out.push(start..at);
            start = at;
        }
        prev = Some(item);
    }
    out.push(start..range.end);
    out
}

/// A parse of one document's text, to run on any thread (see [`Document::parse_job`]).
pub struct ParseJob {
    pub lang: Lang,
    /// The document's own text, shared (see [`Document::parse_job`]).
    pub text: Arc<String>,
    forest: Option<Forest>,
    was_masked: bool,
}

/// What a [`ParseJob`] made.
pub struct Parsed {
    /// `None` when the parser gave up or was stopped.
    pub forest: Option<Forest>,
    masked: bool,
    /// The parse was stopped by the caller's `stop` before it finished.
    pub stopped: bool,
    /// Regions parsed (0 for a whole parse), for tests and benchmarks.
    pub regions_parsed: usize,
}

impl Parsed {
    /// No parse (a file that is not checked).
    pub fn none() -> Self {
        Parsed {
            forest: None,
            masked: false,
            stopped: false,
            regions_parsed: 0,
        }
    }

    /// The regions to analyze (see [`Forest::regions`]).
    pub fn regions(&self) -> Option<Vec<Region<'_>>> {
        self.forest.as_ref()?.regions()
    }
}

impl ParseJob {
    /// Parse the text: only the edited regions when the last parse is known (CUDA), or
    /// incrementally from the edited old tree (Triton); `stop` is asked as the parse goes
    /// and ends it when it answers true.
    pub fn run(&self, stop: &mut dyn FnMut() -> bool) -> Parsed {
        let mut parser = parser_for(self.lang);
        let mut stopped = false;
        let mut progress = |_: &tree_sitter::ParseState| {
            stopped = stopped || stop();
            stopped
        };
        if self.lang == Lang::Cuda {
            if let Some(mut forest) = self.forest.clone() {
                match self.parse_regions(&mut parser, &mut forest, &mut progress) {
                    RegionParse::Done(n) => {
                        forest.collect_garbage();
                        return Parsed {
                            forest: Some(forest),
                            masked: false,
                            stopped: false,
                            regions_parsed: n,
                        };
                    }
                    RegionParse::Stopped => {
                        return Parsed {
                            stopped: true,
                            ..Parsed::none()
                        }
                    }
                    // The region parses set included ranges: the whole text is read again.
                    RegionParse::Whole => parser = parser_for(self.lang),
                }
            }
        }
        let masked = crate::syntax::mask::masked(self.lang, &self.text);
        // Text with hidden regions (syntax::mask) is parsed whole: an edit can move them.
        let old = match (&self.forest, self.lang) {
            (Some(f), Lang::Triton) if masked.is_none() && !self.was_masked => f.trees.first(),
            _ => None,
        };
        let bytes = masked.as_deref().unwrap_or(&self.text).as_bytes();
        let options = tree_sitter::ParseOptions::new().progress_callback(&mut progress);
        let mut read = |byte: usize, _: Point| -> &[u8] { bytes.get(byte..).unwrap_or(&[]) };
        let tree = parser.parse_with_options(&mut read, old, Some(options));
        Parsed {
            forest: tree.map(|t| Forest::whole(self.lang, t, self.text.len())),
            masked: masked.is_some(),
            stopped,
            regions_parsed: 0,
        }
    }

    /// Parse each region an edit touched on its own; `Whole` when one of them cannot
    /// stand alone (module doc) and the text must be parsed whole.
    fn parse_regions(
        &self,
        parser: &mut Parser,
        forest: &mut Forest,
        progress: &mut dyn FnMut(&tree_sitter::ParseState) -> bool,
    ) -> RegionParse {
        // A `/*` left open anywhere makes a whole parse read a comment across regions (and
        // the masks' scanner too): regions stand alone only in a text with none.
        if !block_comments_closed(&self.text) {
            return RegionParse::Whole;
        }
        let mut chunks = Vec::with_capacity(forest.chunks.len() + 4);
        let mut parsed = 0;
        for c in std::mem::take(&mut forest.chunks) {
            if c.tree.is_some() {
                chunks.push(c);
                continue;
            }
            let range = c.range.clone();
            if range.len() == self.text.len() {
                return RegionParse::Whole; // one region: the whole parse, not twice
            }
            let Some(text) = self.text.get(range.clone()) else {
                return RegionParse::Whole;
            };
            if !lexically_closed(text) {
                return RegionParse::Whole;
            }
            let tree = match parse_range(parser, self.lang, &self.text, range.clone(), progress) {
                Err(()) => return RegionParse::Whole,
                Ok(None) => return RegionParse::Stopped,
                Ok(Some(tree)) => tree,
            };
            if !stands_alone(tree.root_node()) {
                return RegionParse::Whole;
            }
            parsed += 1;
            let index = forest.trees.len();
            for r in cut(tree.root_node(), range) {
                chunks.push(Chunk {
                    range: r,
                    tree: Some(index),
                    id: region_id(),
                });
            }
            forest.trees.push(tree);
        }
        forest.chunks = chunks;
        RegionParse::Done(parsed)
    }
}

/// Parse `text[range]` alone (masked as `syntax::mask` says), its nodes at the offsets
/// of the whole text. `Err` when the parser refuses the range, `Ok(None)` when `progress`
/// stopped it.
fn parse_range(
    parser: &mut Parser,
    lang: Lang,
    text: &str,
    range: ByteRange,
    progress: &mut dyn FnMut(&tree_sitter::ParseState) -> bool,
) -> Result<Option<Tree>, ()> {
    let piece = &text[range.clone()];
    let masked = crate::syntax::mask::masked(lang, piece);
    let bytes = masked.as_deref().unwrap_or(piece).as_bytes();
    let included = tree_sitter::Range {
        start_byte: range.start,
        end_byte: range.end,
        start_point: point_of(text, range.start),
        end_point: point_of(text, range.end),
    };
    parser.set_included_ranges(&[included]).map_err(|_| ())?;
    let mut callback = |state: &tree_sitter::ParseState| progress(state);
    let options = tree_sitter::ParseOptions::new().progress_callback(&mut callback);
    let base = range.start;
    let mut read = |byte: usize, _: Point| -> &[u8] {
        byte.checked_sub(base)
            .and_then(|i| bytes.get(i..))
            .unwrap_or(&[])
    };
    Ok(parser.parse_with_options(&mut read, None, Some(options)))
}

enum RegionParse {
    Done(usize),
    Stopped,
    Whole,
}

/// Whether no token of a region's text can run on into the next region: no `\` line
/// continuation at its end (a `#define` or `//` comment would take in the next line), no
/// `/*` without a `*/` after it (a whole parse would read a comment up to a `*/` further
/// down), no raw string literal. Conservative: a `/*` inside a string or a `//` comment
/// also counts, and only costs a whole parse.
fn lexically_closed(text: &str) -> bool {
    let t = text.trim_end_matches(['\n', '\r']);
    if t.len() < text.len() && t.ends_with('\\') {
        return false;
    }
    if text.contains("R\"") {
        return false;
    }
    block_comments_closed(text)
}

/// Every `/*` has a `*/` after it.
fn block_comments_closed(text: &str) -> bool {
    let (open, close) = (
        memchr::memmem::Finder::new("/*"),
        memchr::memmem::Finder::new("*/"),
    );
    let bytes = text.as_bytes();
    let mut at = 0;
    while let Some(o) = open.find(&bytes[at..]) {
        match close.find(&bytes[at + o + 2..]) {
            Some(c) => at += o + 2 + c + 2,
            None => return false,
        }
    }
    true
}

/// Whether a region's parse is the same as a whole parse would give it: only when it has
/// no syntax error. (tree-sitter's error recovery looks past the end of a function body:
/// an error that a region parse keeps inside one body, a whole parse may carry into the
/// next function, as the random edits of `region_tests` found.)
fn stands_alone(root: Node) -> bool {
    !root.has_error()
}

/// tree-sitter point (row, byte column) of a byte offset of `text`. Rows count `\n`
/// only, as tree-sitter does.
fn point_of(text: &str, byte: usize) -> Point {
    let before = &text.as_bytes()[..byte.min(text.len())];
    let row = memchr::memchr_iter(b'\n', before).count();
    let line_start = memchr::memrchr(b'\n', before).map_or(0, |i| i + 1);
    Point {
        row,
        column: before.len() - line_start,
    }
}

/// The point reached from `from` by reading `span` (rows count `\n` only).
fn point_after(from: Point, span: &str) -> Point {
    let bytes = span.as_bytes();
    match memchr::memrchr(b'\n', bytes) {
        Some(last) => Point {
            row: from.row + memchr::memchr_iter(b'\n', bytes).count(),
            column: bytes.len() - last - 1,
        },
        None => Point {
            row: from.row,
            column: from.column + bytes.len(),
        },
    }
}

pub struct Document {
    pub lang: Lang,
    pub version: i32,
    /// The text; analysis works on `&str`. Edits splice it in place. Shared with the
    /// [`ParseJob`]s still running on it: an edit then copies it first (`Arc::make_mut`),
    /// so a job never sees a change, and the text is not copied for a job that ends
    /// before the next edit (a 20 MB syntax-only text: once, not twice, issue #28).
    text: Arc<String>,
    /// Where each line starts (positions to offsets and back).
    lines: lines::LineIndex,
    /// The parse of the text (module doc), `None` before the first parse, when the
    /// parser gave up, or when dropped to save memory.
    forest: Option<Forest>,
    /// The last parse read a masked text (syntax::mask).
    masked: bool,
}

impl Document {
    pub fn new(lang: Lang, version: i32, text: &str) -> Self {
        let mut doc = Document::unparsed(lang, version, text);
        doc.reparse();
        doc
    }

    /// A document whose text is not parsed yet: the server parses on an analysis
    /// thread ([`ParseJob`]) and installs the result with [`Document::install_parse`].
    /// A `String` is moved in, not copied (a 20 MB text from the client, issue #28).
    pub fn unparsed(lang: Lang, version: i32, text: impl Into<String>) -> Self {
        let text = text.into();
        Document {
            lang,
            version,
            lines: lines::LineIndex::new(&text),
            text: Arc::new(text),
            forest: None,
            masked: false,
        }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// What a parse of the current text needs, detached from the document so that it
    /// can run on another thread: the text and the last parse, edited to match it (so
    /// only what changed is parsed again).
    pub fn parse_job(&self) -> ParseJob {
        ParseJob {
            lang: self.lang,
            text: Arc::clone(&self.text),
            forest: self.forest.clone().filter(|f| f.lang == self.lang),
            was_masked: self.masked,
        }
    }

    /// Keep the parse a [`ParseJob`] made of the current text. A parse made by another
    /// grammar describes another document (a file reopened under another language) and
    /// is dropped: the next edit parses the text whole.
    pub fn install_parse(&mut self, parsed: Parsed) {
        match parsed.forest {
            Some(f) if f.lang != self.lang => {
                tracing::warn!(
                    "a {:?} parse was offered to a {:?} document; dropped",
                    f.lang,
                    self.lang
                );
                self.forest = None;
                self.masked = false;
            }
            forest => {
                self.forest = forest;
                self.masked = parsed.masked;
            }
        }
    }

    /// The parse of the current text (after [`Document::reparse`] or
    /// [`Document::install_parse`]).
    pub fn forest(&self) -> Option<&Forest> {
        self.forest.as_ref()
    }

    /// The one tree of the whole text: a document parsed once and not edited since
    /// (`Document::new`, as `check` and the optimizer make them). After edits a CUDA
    /// document has several trees: use [`Document::forest`].
    pub fn tree(&self) -> Option<&Tree> {
        self.forest.as_ref()?.single_tree()
    }

    /// Whether the document holds a parse (of the current or an edited text).
    pub fn has_parse(&self) -> bool {
        self.forest.is_some()
    }

    pub fn len_lines(&self) -> usize {
        self.lines.len_lines()
    }

    /// Replace the whole text (a `didChange` without a range). Does not parse: the old
    /// parse describes nothing of the new text, so the next parse ([`Document::parse_job`]
    /// off the server's loop, or [`Document::reparse`]) starts fresh. (Parsing here
    /// blocked the loop for seconds on a 20 MB file and kept a tree of forty times the
    /// text even for files checked for syntax only, issue #16.)
    /// A `String` is moved in, not copied.
    pub fn replace_all(&mut self, text: impl Into<String>) {
        // The old text goes before the new index is built: a big document is then held
        // once, beside its old line index at most.
        self.text = Arc::new(text.into());
        self.lines = lines::LineIndex::new(&self.text);
        self.forest = None;
        self.masked = false;
    }

    /// Apply one ranged edit to the text, its line index and the parse. Does not reparse: call
    /// [`Document::reparse`] (or run a [`ParseJob`]) once after a batch of edits.
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
        // One scan of the text before the edit; the ends from the spans they cover.
        let start_position = point_of(&self.text, start_byte);
        let old_end_position = point_after(start_position, &self.text[start_byte..old_end_byte]);

        Arc::make_mut(&mut self.text).replace_range(start_byte..old_end_byte, new_text);
        self.lines
            .edit(&self.text, start_byte, old_end_byte, new_text.len());

        let new_end_byte = start_byte + new_text.len();
        let new_end_position = point_after(start_position, new_text);
        if let Some(forest) = self.forest.as_mut() {
            forest.edit(&InputEdit {
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

    /// Drop the parse to save memory (a 10,000-line file's trees are several MB). The
    /// next [`Document::reparse`] parses from scratch; analyses made earlier stay valid.
    pub fn drop_tree(&mut self) {
        self.forest = None;
    }

    /// Reparse after edits, on this thread: only the edited regions when possible.
    /// (The server parses through [`ParseJob`] instead, off its message loop.)
    pub fn reparse(&mut self) {
        let parsed = self.parse_job().run(&mut || false);
        self.install_parse(parsed);
    }

    /// Byte offset of an LSP position. A column past the end of its line is clamped to
    /// the line's end (LSP: "defaults back to the line length"); a line past the end of
    /// the document is an error, except the line right after a final newline.
    pub fn offset(&self, pos: LinePos, enc: PositionEncoding) -> Result<usize, PositionError> {
        let line = pos.line as usize;
        let lines = self.lines.len_lines();
        if line >= lines {
            return Err(PositionError::LinePastEnd {
                line: pos.line,
                lines,
            });
        }
        let line_start_byte = self.lines.line_to_byte(line);
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
                // The first character whose UTF-16 column reaches `col` (a column
                // inside a surrogate pair means that character's start).
                let mut cu = 0;
                let mut at = line_end_byte;
                for (i, c) in self.text[line_start_byte..line_end_byte].char_indices() {
                    if cu >= col {
                        at = line_start_byte + i;
                        break;
                    }
                    cu += c.len_utf16();
                    if cu > col {
                        at = line_start_byte + i;
                        break;
                    }
                }
                at
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
        let line = self.lines.byte_to_line(byte);
        let line_start_byte = self.lines.line_to_byte(line);
        let col = match enc {
            PositionEncoding::Utf8 => byte - line_start_byte,
            PositionEncoding::Utf16 => self.text[line_start_byte..byte].encode_utf16().count(),
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
        if line >= self.lines.len_lines() {
            return self.text.len();
        }
        self.lines.line_to_byte(line)
    }

    /// End of a line's content: before its `\n` / `\r\n` / `\r`.
    fn line_content_end(&self, line: usize) -> usize {
        let start = self.lines.line_to_byte(line);
        let end = if line + 1 < self.lines.len_lines() {
            self.lines.line_to_byte(line + 1)
        } else {
            self.text.len()
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_after_a_span_is_the_point_of_its_end() {
        let text = "a\nbc\r\n\nd\u{e9}f\ngh";
        for start in 0..=text.len() {
            for end in start..=text.len() {
                if !text.is_char_boundary(start) || !text.is_char_boundary(end) {
                    continue;
                }
                let from = point_of(text, start);
                assert_eq!(
                    point_after(from, &text[start..end]),
                    point_of(text, end),
                    "{start}..{end}"
                );
            }
        }
    }

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

    #[test]
    fn a_parse_of_another_grammar_is_never_kept_or_reused() {
        // A file reopened under another language: the CUDA parse must not reach the
        // Python document (tree-sitter aborts when a parser reuses a foreign tree).
        let cuda = Document::new(
            Lang::Cuda,
            1,
            "__global__ void k(float* y) { y[0] = 1.0f; }\n",
        );
        let parsed = cuda.parse_job().run(&mut || false);
        let src = "import triton\n@triton.jit\ndef k(y):\n    pass\n";
        let mut py = Document::unparsed(Lang::Triton, 1, src);
        py.install_parse(parsed);
        assert!(
            !py.has_parse(),
            "a CUDA parse was kept by a Python document"
        );
        let parsed = py.parse_job().run(&mut || false);
        py.install_parse(parsed);
        let tree = py.tree().expect("the Python text parses");
        assert_eq!(tree.root_node().kind(), "module");
        assert!(!tree.root_node().has_error());
    }
}

#[cfg(test)]
mod region_tests;
