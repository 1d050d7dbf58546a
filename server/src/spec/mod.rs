//! The `@bench` language (docs/spec.md): parser, expression evaluator and checks against the
//! kernel's signature. Pure: spec lines in, a `BenchPlan` or diagnostics out. It does not
//! find spec blocks (that is `syntax`) and runs nothing (that is the worker).
//!
//! Pipeline: `lexer` (tokens with document offsets) -> `parser` (statements) and `expr`
//! (expressions and their evaluation) -> `check` (names, cases, types, launch) -> `plan`
//! (the evaluated `BenchPlan`). `skeleton` writes a starting spec for a kernel without one.

mod check;
pub(crate) mod ctype;
mod expr;
mod lexer;
mod parser;
mod plan;
mod skeleton;
mod skeleton2d;
#[cfg(test)]
mod tests;
mod torch_ref;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::syntax::{ByteRange, Kernel};

pub use plan::{
    Arg, BenchPlan, Case, DType, Dist, Launch, Role, ScalarTy, TorchReference, Tunable,
    TunableKind, Value,
};
pub use skeleton::{skeleton, Skeleton};

/// What expressions may know about the device: the built-in `sms`. `warp` is always 32.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvalEnv {
    pub sms: u64,
}

impl Default for EvalEnv {
    /// An H100 SXM: 132 multiprocessors.
    fn default() -> Self {
        EvalEnv { sms: 132 }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Severity {
    Error,
    Warning,
    Info,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecDiagnostic {
    /// Document byte offsets of the cause (a token, an expression, a parameter).
    pub range: ByteRange,
    pub severity: Severity,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpecReport {
    /// `None` when the kernel has no spec or when any diagnostic is an error.
    pub plan: Option<BenchPlan>,
    /// Sorted by position.
    pub diagnostics: Vec<SpecDiagnostic>,
}

/// Parse, evaluate and check the kernel's spec block. `kernels` is every kernel of the
/// same file (for `reference = K`). A kernel with an empty spec block gives no plan and no
/// diagnostics.
pub fn analyze(kernel: &Kernel, kernels: &[Kernel], env: &EvalEnv) -> SpecReport {
    analyze_with(kernel, kernels, env, &BTreeMap::new())
}

/// Like [`analyze`], with named values replaced: a tunable's current value (`BLOCK` =
/// 512), a size variable or a scalar / constexpr / template parameter, for every case. An
/// override naming nothing of that kind is an error on the first @bench line.
pub fn analyze_with(
    kernel: &Kernel,
    kernels: &[Kernel],
    env: &EvalEnv,
    overrides: &BTreeMap<String, Value>,
) -> SpecReport {
    check::analyze(kernel, kernels, env, overrides)
}

/// The document span of the text after `reference = torch:` in the kernel's spec, where
/// the edge puts what it finds on disk (a module file that is missing).
pub fn torch_reference_span(kernel: &Kernel) -> Option<ByteRange> {
    let (stmts, _) = parser::parse_lines(&kernel.spec.lines);
    stmts.into_iter().find_map(|s| match s.kind {
        parser::StmtKind::TorchReference { span, .. } => Some(span),
        _ => None,
    })
}

/// The word a spec message suggests ("… did you mean `f32`?" gives `f32`), for the
/// editor's quick fix that writes it in place of the diagnostic's range.
pub fn suggestion(message: &str) -> Option<&str> {
    let rest = message.strip_suffix("`?")?;
    let (_, word) = rest.rsplit_once("did you mean `")?;
    (!word.is_empty() && !word.contains('`')).then_some(word)
}

/// "; did you mean `f32`?" when a candidate is within a small edit distance, else "".
pub(crate) fn did_you_mean<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> String {
    let limit = (word.chars().count() / 3).max(1);
    let best = candidates
        .filter(|c| *c != word)
        .map(|c| {
            let (w, l) = (word.to_ascii_lowercase(), c.to_ascii_lowercase());
            // `output` for `out`, `inp` for `in`: a prefix is as good as one edit.
            let prefix = w.len() >= 2 && l.len() >= 2 && (w.starts_with(&l) || l.starts_with(&w));
            (if prefix { 1 } else { edit_distance(&w, &l) }, c)
        })
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d);
    match best {
        Some((_, c)) => format!("; did you mean `{c}`?"),
        None => String::new(),
    }
}

/// Levenshtein distance over chars. Inputs are names from one spec line, so O(n·m) is fine;
/// very long words are cut off to keep hostile input cheap.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().take(64).collect();
    let b: Vec<char> = b.chars().take(64).collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}
