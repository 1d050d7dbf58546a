//! kernel-lsp: a language server that makes GPU kernels faster and proves it.
//! Layers, lowest first: `document` and `syntax` (text and trees), `spec` (the `@bench`
//! language), `toolchain` (NVRTC and ptxas, no driver), then the front-ends `lsp` and
//! `cli`. See docs/architecture.md.

pub mod analysis;
pub mod capture;
pub mod cli;
pub mod document;
#[cfg(test)]
mod function_length;
pub mod layers;
pub mod lsp;
pub mod optimize;
pub mod profile;
pub mod settings;
pub mod spec;
pub mod syntax;
pub mod toolchain;
pub mod worker;
