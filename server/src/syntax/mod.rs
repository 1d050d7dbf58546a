//! Kernel discovery: finds kernels, their parameters, spec blocks, kernel units and the
//! device slice in a tree-sitter tree, using the queries in `grammars/`. Pure: text and
//! tree in, `FileModel` out. Does not parse `@bench` statements (that is `spec`), does
//! not parse (that is `document`), never panics on any input.
//!
//! - `cuda`: `__global__` kernels, `__device__` unit members, the device slice (its
//!   module doc has the keep/drop rule).
//! - `triton`: `@triton.jit` kernels and helpers.
//! - `spec_block`: the `@bench` comment block above a kernel.
//! - `py_comments`: Python's comment-only lines, outside strings (Triton spec blocks).
//! - `unit`: callees and unit ranges.
//! - `errors`: one syntax error per ERROR/MISSING region.
//! - `header_items`: the item of a header at a line, for the NVRTC check's retries.

pub mod branches;
pub mod constants;
mod cuda;
pub(crate) use cuda::{normalize_type, pointee_type};
mod errors;
pub mod header_items;
pub mod mask;
pub mod model;
pub(crate) mod py_comments;
pub mod qualifiers;
mod queries;
mod spec_block;
mod triton;
pub(crate) use triton::python_int;
mod unit;

#[cfg(test)]
mod real_code_tests;
#[cfg(test)]
mod tests;

pub use cuda::{
    blank_macro_invocations, host_macros, is_device_header, is_global_math, is_host_library_header,
};
pub use model::*;

/// The tree-sitter language for a file of `lang`.
pub fn ts_language(lang: Lang) -> tree_sitter::Language {
    match lang {
        Lang::Cuda => tree_sitter_cuda::LANGUAGE.into(),
        Lang::Triton => tree_sitter_python::LANGUAGE.into(),
    }
}

/// Analyze a parsed file. `tree` must be the tree of `source` (a stale tree gives a
/// wrong model, never a panic).
pub fn analyze(lang: Lang, source: &str, tree: &tree_sitter::Tree) -> FileModel {
    let whole = Region::whole(tree, source.len());
    analyze_regions(lang, source, &[whole], &mut SyntaxCache::default())
}

/// A part of a file to analyze: the top-level items of `root` that start in `range`.
/// A file is analyzed as regions that cover it, in order (`document::Forest`): one
/// region per run of items, so that an edit re-parses and re-analyzes only its region.
#[derive(Clone)]
pub struct Region<'t> {
    pub root: tree_sitter::Node<'t>,
    pub range: std::ops::Range<usize>,
    /// Identifies the parse of this region: the facts of a region with the same id are
    /// reused from [`SyntaxCache`].
    pub id: u64,
}

/// The children of `root` (named or not) that start in `range`, found without visiting
/// the children before it (a file's root can have thousands).
pub fn top_items<'t>(
    root: tree_sitter::Node<'t>,
    range: &std::ops::Range<usize>,
) -> Vec<tree_sitter::Node<'t>> {
    let mut out = Vec::new();
    let mut cursor = root.walk();
    if cursor.goto_first_child_for_byte(range.start).is_none() {
        return out;
    }
    loop {
        let n = cursor.node();
        if n.start_byte() >= range.end {
            break;
        }
        if n.start_byte() >= range.start {
            out.push(n);
        }
        if !cursor.goto_next_sibling() {
            break;
        }
    }
    out
}

impl<'t> Region<'t> {
    /// The whole of a tree (id 0: never reused).
    pub fn whole(tree: &'t tree_sitter::Tree, len: usize) -> Self {
        Region {
            root: tree.root_node(),
            range: 0..len.max(tree.root_node().end_byte()),
            id: 0,
        }
    }
}

/// What [`analyze_regions`] keeps between analyses of one document: the facts of each
/// region, by region id.
#[derive(Debug, Default)]
pub struct SyntaxCache {
    cuda: cuda::CudaCache,
}

/// Analyze a file parsed as regions (see [`Region`]); regions whose facts are in `cache`
/// are not walked again. CUDA only: a Triton file is one region.
pub fn analyze_regions(
    lang: Lang,
    source: &str,
    regions: &[Region],
    cache: &mut SyntaxCache,
) -> FileModel {
    let lines = spec_block::LineIndex::new(source);
    match lang {
        Lang::Cuda => {
            let (kernels, device_slice, errors) =
                cuda::analyze_regions(source, regions, &lines, &mut cache.cuda);
            FileModel {
                lang,
                kernels,
                device_slice,
                syntax_errors: errors::merge(source, errors),
            }
        }
        Lang::Triton => {
            let mut kernels = Vec::new();
            let mut found = Vec::new();
            for r in regions {
                kernels.extend(triton::analyze(source, r.root, &lines));
                found.extend(errors::found(source, r.root, &r.range));
            }
            FileModel {
                lang,
                kernels,
                device_slice: String::new(),
                syntax_errors: errors::merge(source, found),
            }
        }
    }
}

/// The model of a file checked for syntax only (past `maxFileBytes`): its syntax errors,
/// no kernels and no device slice, so a huge file costs no per-kernel memory.
pub fn syntax_only(lang: Lang, source: &str, regions: &[Region]) -> FileModel {
    let found = regions
        .iter()
        .flat_map(|r| errors::found(source, r.root, &r.range))
        .collect();
    FileModel {
        lang,
        kernels: Vec::new(),
        device_slice: String::new(),
        syntax_errors: errors::merge(source, found),
    }
}

/// Cheap text check: does this Python file use Triton's `jit` decorator? The LSP layer
/// uses it to leave ordinary Python files alone without parsing them.
pub fn is_triton_source(source: &str) -> bool {
    if !source.contains("triton") {
        return false;
    }
    // Lines end at `\n`, `\r\n` or a lone `\r` (old Mac files), as the document counts them.
    source.split(['\n', '\r']).any(|l| {
        let l = l.trim_start();
        l.starts_with("@triton.jit")
            || l.starts_with("@jit")
            || l.contains("triton.jit(")
            || (l.starts_with("from triton") && l.contains("jit"))
    })
}

/// The language of a document from its URI or path and the editor's language id:
/// `.cu`, `.cuh`, `cuda`, `cuda-cpp` are CUDA; `.py`, `python` are Triton candidates
/// (see [`is_triton_source`]). A known language id wins over the extension.
pub fn lang_for(uri_or_path: &str, language_id: Option<&str>) -> Option<Lang> {
    match language_id.map(str::to_ascii_lowercase).as_deref() {
        Some("cuda" | "cuda-cpp" | "cuda-c") => return Some(Lang::Cuda),
        Some("python") => return Some(Lang::Triton),
        _ => {}
    }
    let path = uri_or_path.split(['?', '#']).next().unwrap_or(uri_or_path);
    let file = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let ext = file.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase())?;
    match ext.as_str() {
        "cu" | "cuh" => Some(Lang::Cuda),
        "py" => Some(Lang::Triton),
        _ => None,
    }
}

/// The language of an opened document: [`lang_for`], and a C or C++ header (`.h`,
/// `.hpp`, `.hh`, `.hxx`, `.inl`, `.inc`; language ids `c`, `cpp`) that declares device
/// code (`__global__` or `__device__` outside comments) is CUDA: projects keep kernels
/// and device functions in `.h` files that nvcc compiles through a `.cu`.
pub fn lang_for_text(uri_or_path: &str, language_id: Option<&str>, text: &str) -> Option<Lang> {
    if let Some(lang) = lang_for(uri_or_path, language_id) {
        return Some(lang);
    }
    let path = uri_or_path.split(['?', '#']).next().unwrap_or(uri_or_path);
    let file = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let ext = file.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    let header = matches!(
        ext.as_deref(),
        Some("h" | "hpp" | "hh" | "hxx" | "inl" | "inc")
    );
    let c_family = matches!(
        language_id.map(str::to_ascii_lowercase).as_deref(),
        None | Some("c" | "cpp" | "objective-c" | "objective-cpp")
    );
    (header && c_family && declares_device_code(text)).then_some(Lang::Cuda)
}

/// Whether C++ text has `__global__` or `__device__` as a word outside comments and
/// string literals.
pub fn declares_device_code(text: &str) -> bool {
    let code = mask::code_only(text);
    let b = code.as_bytes();
    ["__global__", "__device__"].iter().any(|word| {
        code.match_indices(word).any(|(i, _)| {
            let end = i + word.len();
            let name = |c: &u8| c.is_ascii_alphanumeric() || *c == b'_';
            !(b.get(end).is_some_and(name) || (i > 0 && name(&b[i - 1])))
        })
    })
}

impl FileModel {
    /// The kernel whose definition or spec block holds byte `offset` (a cursor right
    /// after the closing brace counts as inside).
    pub fn kernel_at(&self, offset: usize) -> Option<&Kernel> {
        let inside = |r: &ByteRange| r.start <= offset && offset <= r.end;
        self.kernels
            .iter()
            .find(|k| inside(&k.def_range) || k.spec.range.as_ref().is_some_and(inside))
    }

    /// The kernel named `name` (the first one, if several share it).
    pub fn kernel(&self, name: &str) -> Option<&Kernel> {
        self.kernels.iter().find(|k| k.name == name)
    }
}

/// The text of `node`, or "" when the tree does not match the text.
fn text<'s>(src: &'s str, node: tree_sitter::Node) -> &'s str {
    src.get(node.byte_range()).unwrap_or("")
}

/// Parses `text` as the grammar should see it: the regions of [`mask`] hidden (same
/// byte length, so the tree's ranges are the text's). `old` is reused only when nothing
/// is hidden in the text (hidden regions may move anywhere with an edit).
pub fn parse_text(
    parser: &mut tree_sitter::Parser,
    lang: Lang,
    text: &str,
) -> Option<tree_sitter::Tree> {
    match mask::masked(lang, text) {
        Some(m) => parser.parse(&m, None),
        None => parser.parse(text, None),
    }
}
