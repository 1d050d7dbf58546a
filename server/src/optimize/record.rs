//! The records a run leaves: each step's [`StepRecord`] with its candidates'
//! [`CandidateRecord`]s and [`Outcome`], the finished [`OptimizeRun`], and what it spent
//! on models ([`LlmSpent`]). Plain data, serialized into the history and `--json`; the
//! step loop fills them, `history` and `report` read them.

use serde::{Deserialize, Serialize};

use super::llm;
use crate::worker::pool::WorkerRef;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A verified candidate was faster by more than the noise; it is the new current.
    Accepted,
    /// Candidates verified but none was faster by more than the noise.
    NoGain,
    /// No candidate passed verification (or none could be planned or timed).
    Failed,
    /// The step had nothing to change in this kernel (no candidate was made); it does
    /// not count as one of the run's steps.
    NotApplicable,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::NoGain => "no gain",
            Outcome::Failed => "failed",
            Outcome::NotApplicable => "n/a",
        }
    }
}

/// One candidate of a step.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CandidateRecord {
    pub label: String,
    pub verified: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_ms: Option<f64>,
    /// Why it was rejected (spec error, verification failure, worker error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The worker (and its device) that verified it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_on: Option<WorkerRef>,
    /// The worker that timed it, beside the current version on the same device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_on: Option<WorkerRef>,
}

/// One step, as printed and as appended to the kernel's history.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepRecord {
    pub step: usize,
    /// The catalog id (`restrict_const`, `block_size`) or `free` for an LLM's own step.
    #[serde(default)]
    pub strategy_id: String,
    /// What was tried, for tables: the catalog title or the LLM's description.
    pub strategy: String,
    /// Why this step was picked (the policy's or the strategist's one line).
    pub rationale: String,
    /// `embedded` (a tree-sitter rewrite) or `llm`.
    #[serde(default)]
    pub coder: String,
    pub outcome: Outcome,
    pub candidates: Vec<CandidateRecord>,
    /// Median of the current version before the step, and of the best candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_ms: Option<f64>,
    /// before / best of this step; 1.0 when nothing was accepted.
    pub speedup: f64,
    /// Speedup of the current version after this step over the run's starting version.
    pub cumulative: f64,
    /// The accepted candidate's label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<String>,
    pub seed: u64,
    /// Hash of the kernel's file text the step started from.
    pub source_hash: String,
    /// Hash of the kernel's spec lines and unit text the step started from.
    #[serde(default)]
    pub kernel_hash: String,
    /// The accepted version's spec lines and unit text (for audit and revert).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_after: Option<String>,
    /// Timings came from Triton's CPU interpreter.
    pub interpreter: bool,
    /// Milliseconds since the Unix epoch when the step ended.
    #[serde(default)]
    pub unix_ms: u64,
    /// The job was cancelled during this step: its outcome says nothing about the step
    /// (not learned from, not counted as tried).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancelled: bool,
    /// The checks the accepted version passed beyond verification, with their cost
    /// ("compute-sanitizer: 0 errors (1.9 s)", "re-verified on 2 extra seeds").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<String>,
    /// The speedup was above `verify.suspiciousSpeedup` and was re-verified.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspicious: bool,
    /// The run this step belongs to (its start, ms since the Unix epoch); node ids are
    /// per run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<u64>,
    /// The version of the run's tree the step worked on (0: the run's start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<usize>,
    /// The version the step made, when it was accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child: Option<usize>,
    /// Why that version was expanded (`best`, `explore`, `backtrack`), once the tree
    /// has more than one version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pick: Option<String>,
    /// The step made a version on the path to the run's answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub on_best_path: bool,
    /// The model calls and tokens of this step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm: Option<LlmSpent>,
    /// The profile of the version the step worked on (`optimize --profile`): its
    /// diagnosis, or why it was not profiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Energy per call (J, NVML) of the version before the step and of the accepted one,
    /// measured once when a step is accepted on a GPU with NVML.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_j: Option<(Option<f64>, Option<f64>)>,
}

/// A finished run: the steps, and the file text with every accepted step applied (None
/// when nothing was accepted).
#[derive(Debug, Serialize)]
pub struct OptimizeRun {
    pub kernel: String,
    pub steps: Vec<StepRecord>,
    /// Why the run stopped before its step count, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// Warnings for the author (a policy file that had to be reset, an LLM that failed
    /// and was replaced by the embedded policy).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(skip)]
    pub new_text: Option<String>,
    /// Every version the run accepted (the tree's versions but the start), in the order
    /// they were made: (node id, whole file text).
    #[serde(skip)]
    pub version_texts: Vec<(usize, String)>,
    /// The answer: the version of the tree with the highest speedup over the start.
    pub best_node: usize,
    /// The headline's speedup; without one (a cancelled run, a failed timing), the
    /// product of the steps' speedups on the answer's path.
    pub best_speedup: f64,
    /// The answer and the start timed side by side at the end of the run: the run's
    /// one number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headline: Option<super::headline::Headline>,
    /// Versions in the tree (the start included).
    pub versions: usize,
    /// What the run spent on models.
    pub llm: LlmSpent,
}

impl OptimizeRun {
    /// Labels of the accepted candidates on the path to the answer, in order.
    pub fn accepted(&self) -> Vec<String> {
        self.steps
            .iter()
            .filter(|s| s.on_best_path)
            .filter_map(|s| {
                s.accepted
                    .as_ref()
                    .map(|a| format!("{} ({a})", s.strategy_id))
            })
            .collect()
    }
}

/// Model calls, tokens and estimated cost of a run so far.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LlmSpent {
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Estimated from the models' `priceIn` / `priceOut`; None when no price is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl LlmSpent {
    pub fn add(&mut self, b: &llm::Budget) {
        self.calls += u64::from(b.used());
        self.input_tokens += b.input_tokens;
        self.output_tokens += b.output_tokens;
        if let Some(c) = b.cost_usd {
            *self.cost_usd.get_or_insert(0.0) += c;
        }
    }

    /// "3 model calls, 12.4k tokens in, 2.1k out, ~$0.05", for progress and reports.
    pub fn describe(&self) -> String {
        let k = |t: u64| {
            if t >= 1000 {
                format!("{:.1}k", t as f64 / 1000.0)
            } else {
                t.to_string()
            }
        };
        format!(
            "{} model call{}, {} tokens in, {} out{}",
            self.calls,
            if self.calls == 1 { "" } else { "s" },
            k(self.input_tokens),
            k(self.output_tokens),
            self.cost_usd.map_or(String::new(), |c| if c >= 0.1 {
                format!(", ~${c:.2}")
            } else {
                format!(", ~${c:.4}")
            })
        )
    }
}
