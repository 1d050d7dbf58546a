//! Kernel discovery: finds kernels, their parameters, spec blocks, kernel units and the
//! device slice in a tree-sitter tree, using the queries in `grammars/`. Pure: text and
//! tree in, `FileModel` out. Does not parse `@bench` statements (that is `spec`).

pub mod model;

pub use model::*;

/// The tree-sitter language for a file of `lang`.
pub fn ts_language(lang: Lang) -> tree_sitter::Language {
    match lang {
        Lang::Cuda => tree_sitter_cuda::LANGUAGE.into(),
        Lang::Triton => tree_sitter_python::LANGUAGE.into(),
    }
}

/// Analyze a parsed file. `tree` must be the tree of `source`.
pub fn analyze(lang: Lang, source: &str, tree: &tree_sitter::Tree) -> FileModel {
    // Filled in by the syntax work in progress; see the issue for kernel discovery.
    let _ = (source, tree);
    FileModel { lang, kernels: Vec::new(), device_slice: String::new(), syntax_errors: Vec::new() }
}
