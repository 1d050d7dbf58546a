//! One open document: ropey text plus its tree-sitter tree, kept in step by incremental
//! edits; conversions between LSP positions (UTF-16 or UTF-8) and byte offsets.
