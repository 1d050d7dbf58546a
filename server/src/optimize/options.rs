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
    /// The kernel's file on disk, where a `reference = torch: module.fn` finds its
    /// module (candidates are then verified against PyTorch: docs/optimizer.md).
    pub file: Option<PathBuf>,
    /// Expand every version until nothing is left on it, not only those within the
    /// frontier of the best (`optimize --thorough`): a slower, longer run that shows
    /// what the default run leaves out.
    pub thorough: bool,
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

/// A run's step limit and budget from the settings, with a front end's own flags on
/// top (`--steps`, `--budget`): the one place both the CLI and the editor take them
/// from. No step limit is `usize::MAX`.
pub fn run_limits(
    settings: &crate::settings::Settings,
    steps: Option<usize>,
    wall: Option<std::time::Duration>,
) -> (usize, RunBudget) {
    let wall = wall.or_else(|| {
        (settings.optimize_budget_s > 0)
            .then(|| std::time::Duration::from_secs(settings.optimize_budget_s))
    });
    let steps = steps
        .or(settings.steps_per_action.filter(|s| *s > 0))
        .map_or(usize::MAX, |s| s.max(1));
    (
        steps,
        RunBudget {
            wall,
            ..RunBudget::from_llm_settings(&settings.llm)
        },
    )
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
            file: None,
            thorough: false,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Settings;
    use std::time::Duration;

    #[test]
    fn the_editor_and_the_cli_get_the_same_default_limits() {
        let s = Settings::default();
        let (steps, budget) = run_limits(&s, None, None);
        assert_eq!(steps, usize::MAX, "no step limit by default");
        assert_eq!(budget.wall, Some(Duration::from_secs(600)));
        // Flags win over settings; settings over the defaults.
        let (steps, budget) = run_limits(&s, Some(3), Some(Duration::from_secs(5)));
        assert_eq!((steps, budget.wall), (3, Some(Duration::from_secs(5))));
        let s = Settings {
            steps_per_action: Some(0),
            optimize_budget_s: 0,
            ..Settings::default()
        };
        let (steps, budget) = run_limits(&s, None, None);
        assert_eq!(
            (steps, budget.wall),
            (usize::MAX, None),
            "0 is none, for both"
        );
        let (steps, _) = run_limits(&s, Some(0), None);
        assert_eq!(steps, 1, "--steps 0 runs one step");
    }
}
