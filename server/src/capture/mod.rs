//! Capture: specs written from a program's own launches (issue #32). `run` runs the
//! user's command as a child process with the Triton hook (`hook.py`) on its PYTHONPATH
//! and reads back the launch `record`s; `infer` turns each kernel's launches into
//! `@bench` statements (pure); `place` puts them above the kernels as text edits (pure).
//! The CLI (`kernel-lsp capture`) and the editor's "Capture launches from…" action both
//! call `capture_specs` and `place::edits`, so the two write the same specs. This module
//! runs no kernel itself and never loads CUDA: the user's code runs only in the child.

pub mod cuda;
pub mod infer;
pub mod mangled;
pub mod place;
pub mod record;
pub mod run;

use std::collections::BTreeMap;

pub use infer::Inferred;
pub use record::{Launch, Records};

/// What capture made of one kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelCapture {
    /// The kernel's source file, as the child saw it (absolute).
    pub file: String,
    pub kernel: String,
    /// Launches the program made (every process of the run together).
    pub launches: u64,
    /// Distinct launches recorded.
    pub recorded: usize,
    /// The statements, or why none could be written.
    pub spec: Result<Inferred, String>,
}

/// Options of the inference.
#[derive(Clone, Debug)]
pub struct InferOptions {
    /// Most cases from distinct launches.
    pub max_cases: usize,
    /// Add the derived odd-sized case.
    pub odd_case: bool,
}

impl Default for InferOptions {
    fn default() -> Self {
        InferOptions {
            max_cases: 4,
            odd_case: true,
        }
    }
}

/// One result per kernel the records name, by file then kernel name.
pub fn capture_specs(records: &Records, opts: &InferOptions) -> Vec<KernelCapture> {
    let mut by_kernel: BTreeMap<(String, String), Vec<&Launch>> = BTreeMap::new();
    for l in &records.launches {
        by_kernel
            .entry((l.file.clone(), l.kernel.clone()))
            .or_default()
            .push(l);
    }
    let mut counts: BTreeMap<(String, String), u64> = BTreeMap::new();
    for c in &records.counts {
        *counts
            .entry((c.file.clone(), c.kernel.clone()))
            .or_default() += c.launches;
    }
    by_kernel
        .into_iter()
        .map(|((file, kernel), launches)| {
            let n = counts
                .get(&(file.clone(), kernel.clone()))
                .copied()
                .unwrap_or(launches.len() as u64);
            KernelCapture {
                spec: infer::infer(&launches, opts.max_cases, opts.odd_case),
                recorded: launches.len(),
                launches: n.max(launches.len() as u64),
                file,
                kernel,
            }
        })
        .collect()
}
