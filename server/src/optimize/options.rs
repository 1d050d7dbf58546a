//! What a run may do ([`OptimizeOptions`], [`RunBudget`], [`Repair`], a [`Profiler`])
//! and what it reports as it goes ([`Event`]). Set by the front ends (the CLI's
//! `optimize`, the editor's actions); read by the step loop.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::catalog::Catalog;
use super::coder::LlmSetup;
use super::record::StepRecord;

/// What a run may do.
pub struct OptimizeOptions {
    /// Steps to run (steps that turn out not applicable don't count).
    pub steps: usize,
    pub seed: u64,
    pub catalog: Catalog,
    /// Where the policy's state lives; `None` keeps it in memory for this run only.
    pub policy_path: Option<PathBuf>,
    /// Only these catalog ids (empty: all). "Tune parameters" passes the sweeps.
    pub only: Vec<String>,
    /// `(strategy id, kernel hash)` pairs that already failed or gave no gain (from the
    /// history): never repeated on the same kernel text.
    pub tried: BTreeSet<(String, String)>,
    /// The LLM strategist and coder, when configured and asked for.
    pub llm: Option<LlmSetup>,
    /// Set from outside to stop the run; checked before each step (a step that has
    /// started finishes, so its result is recorded).
    pub cancel: Option<Arc<AtomicBool>>,
    /// Repair mode ("Ask the coder to fix"): one LLM coder step whose candidates are
    /// verified against `reference_text` (the last version that passed) and accepted on
    /// correctness alone, because the current version is the one that fails.
    pub repair: Option<Repair>,
    /// The checks a winner passes before it is accepted (sanitizer, large speedups).
    pub verify: crate::settings::VerifySettings,
    /// Limits beyond the step count: wall time, model calls, tokens.
    pub budget: RunBudget,
    /// Profiles a version (its whole file text) with Nsight Compute, once per version
    /// of the tree, for the facts and the strategist (`optimize --profile`).
    pub profiler: Option<Profiler>,
}

/// A version's file text in, its profile out (or why not).
pub type Profiler = Arc<
    dyn Fn(String) -> futures::future::BoxFuture<'static, Result<crate::profile::Profile, String>>
        + Send
        + Sync,
>;

/// A run's limits beyond `steps`; `None` is no limit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunBudget {
    pub wall: Option<std::time::Duration>,
    pub llm_calls: Option<u64>,
    pub tokens: Option<u64>,
}

impl RunBudget {
    /// The model-call and token limits of `llm.callsPerRun` / `llm.tokensPerRun` (0: none).
    pub fn from_llm_settings(s: &crate::settings::LlmSettings) -> Self {
        RunBudget {
            wall: None,
            llm_calls: (s.calls_per_run > 0).then_some(s.calls_per_run),
            tokens: (s.tokens_per_run > 0).then_some(s.tokens_per_run),
        }
    }
}

/// What the coder is asked to fix.
#[derive(Clone, Debug)]
pub struct Repair {
    /// The verification report of the current version.
    pub feedback: String,
    /// A file text whose version of the kernel passed verification.
    pub reference_text: String,
}

impl OptimizeOptions {
    pub fn new(steps: usize, seed: u64, catalog: Catalog) -> Self {
        OptimizeOptions {
            steps,
            seed,
            catalog,
            policy_path: None,
            only: Vec::new(),
            tried: BTreeSet::new(),
            llm: None,
            cancel: None,
            repair: None,
            verify: crate::settings::VerifySettings {
                seed,
                ..Default::default()
            },
            budget: RunBudget::default(),
            profiler: None,
        }
    }
}

/// What a run reports as it goes.
pub enum Event<'a> {
    /// The current stage, for progress ("step 2: unroll", "verifying x=4 (2/3)").
    Stage(String),
    /// A step ended; append it to the history now, so a cancelled run keeps it.
    Step(&'a StepRecord),
    /// The run ended: its answer timed against its start and its versions; append it to
    /// the history too (`history::append_run_end`), so the report prints the same number
    /// and `kernel-lsp apply` can write a version back.
    RunEnd(&'a super::apply::RunEnd),
}
