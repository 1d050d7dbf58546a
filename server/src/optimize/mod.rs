//! The optimization step loop, shared by `kernel-lsp optimize` and the editor's code
//! actions: propose → rewrite → compile → verify → time against the current version →
//! accept only if correct and faster by more than the measured noise (ARCHITECTURE.md,
//! "One optimization step"). The strategy is the embedded contextual bandit
//! (`policy`) over the catalog (`catalog`, data in `prompts/strategies.toml`) with the
//! kernel's static facts (`facts`) as context, or an LLM strategist; the coder is an
//! embedded rewrite (`rewrite`) or an LLM coder (`llm`) with bounded repair rounds.
//! Candidates are evaluated as a batch (`evaluate`). Knows nothing about LSP; talks to
//! GPUs only through a `WorkerPool`; writes no file (the caller appends `StepRecord`s to
//! the history as `Event::Step` arrives, and decides what to do with the new text).

pub mod catalog;
pub mod diagnosis;
pub mod edit;
pub mod evaluate;
pub mod facts;
pub mod history;
pub mod launch;
pub mod llm;
pub mod policy;
pub mod report;
pub mod rewrite;
pub mod search;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::document::Document;
use crate::spec::EvalEnv;
use crate::syntax::Lang;
use crate::worker::pool::{WorkerPool, WorkerRef};
use crate::worker::protocol::{Op, OpResult, Timing, Version};

use catalog::{Catalog, Strategy};
use facts::Facts;
use policy::Policy;

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
    pub best_speedup: f64,
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
}

/// `Err` is a message for the author; nothing was tried.
pub async fn optimize(
    pool: &WorkerPool,
    lang: Lang,
    text: &str,
    kernel_name: &str,
    opts: &OptimizeOptions,
    on: &mut (dyn FnMut(Event<'_>) + Send),
) -> Result<OptimizeRun, String> {
    let started = std::time::Instant::now();
    // The other workers start beside the primary, not after its `hello`: each start
    // (Python, torch, a CUDA context) takes seconds, and they overlap.
    pool.start_others_in_background();
    let hello = pool.connect().await.map_err(|e| e.message)?;
    let env = EvalEnv {
        sms: hello
            .device
            .as_ref()
            .map_or(EvalEnv::default().sms, |d| u64::from(d.sms)),
    };
    let backend = match lang {
        Lang::Cuda => &hello.cuda,
        Lang::Triton => &hello.triton,
    };
    if !backend.available {
        return Err(format!(
            "the worker cannot run {} kernels: {}",
            llm::lang_label(lang),
            backend.message
        ));
    }
    // The starting version must plan; its errors are the author's to fix.
    let start = evaluate::plan(lang, text, kernel_name, &env)?;
    let repair_reference = match &opts.repair {
        Some(r) => {
            if opts.llm.as_ref().is_none_or(|l| l.coder.is_none()) {
                return Err("fixing a kernel needs an LLM coder: set `llm.coder` in the settings (docs/configuration.md)".into());
            }
            let mut p = evaluate::plan(lang, &r.reference_text, kernel_name, &env)
                .map_err(|e| format!("the last verified version does not plan: {e}"))?;
            p.version.label = "last verified".into();
            Some(p)
        }
        None => None,
    };

    // Nothing can be verified against a version that does not compile or run: say so
    // once, on the kernel, instead of failing every step against it. The check runs
    // beside the first step: it takes the primary worker first (so one worker checks
    // before it verifies anything), the other workers verify the step's first
    // candidates meanwhile (each computes the reference's outputs itself), and nothing
    // is accepted, recorded or learned before it has passed. A failed check stops the
    // step's verifications and is the run's error.
    let check_failed = AtomicBool::new(false);
    let (check_tx, check_rx) = tokio::sync::watch::channel(None::<Result<(), String>>);
    let check = async {
        if opts.repair.is_some() {
            return;
        }
        let mut quiet = |_: &str| {};
        let checked = evaluate::check_current(pool, &start.version, opts.seed, &mut quiet).await;
        if checked.is_err() {
            check_failed.store(true, Ordering::SeqCst);
        }
        let _ = check_tx.send(Some(checked));
    };
    if opts.repair.is_none() {
        on(Event::Stage("checking the current version".into()));
    }

    let mut warnings = Vec::new();
    let policy = match &opts.policy_path {
        Some(p) => {
            let (policy, warning) = Policy::load(p);
            warnings.extend(warning);
            policy
        }
        None => Policy::default(),
    };
    let run_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut runner = Runner {
        pool,
        lang,
        kernel_name,
        text,
        opts,
        env,
        hello: &hello,
        start: &start,
        repair_reference: repair_reference.as_ref(),
        check: opts.repair.is_none().then_some(check_rx),
        check_failed: &check_failed,
        held: Vec::new(),
        energy: None,
        policy,
        tried: opts.tried.clone(),
        records: Vec::new(),
        warnings,
        strategist_down: false,
        timings: Default::default(),
        profiles: Default::default(),
        spent: LlmSpent::default(),
        run_id,
        started,
        on,
    };
    let mut search = search::Search::new(text, &start.kernel_hash, None, opts.seed);
    let budgets = search::Budgets {
        // One repair step.
        steps: if opts.repair.is_some() { 1 } else { opts.steps },
        wall: opts.budget.wall,
        llm_calls: opts.budget.llm_calls,
        tokens: opts.budget.tokens,
    };
    let mut elapsed = || started.elapsed();
    let drive = search::drive(&mut search, &budgets, &mut runner, &mut elapsed);
    let ((), stopped) = futures::join!(check, drive);
    if let Some(Err(e)) = check_tx.borrow().clone() {
        return Err(e);
    }
    runner.tell(true).await;
    let best = search.best();
    let path = search.path(best.id);
    for r in &mut runner.records {
        r.on_best_path = r.child.is_some_and(|c| path.contains(&c));
    }
    Ok(OptimizeRun {
        kernel: kernel_name.to_string(),
        steps: runner.records,
        stopped,
        warnings: runner.warnings,
        new_text: (best.text != text).then(|| best.text.clone()),
        version_texts: search
            .nodes
            .iter()
            .filter(|n| n.parent.is_some())
            .map(|n| (n.id, n.text.clone()))
            .collect(),
        best_node: best.id,
        best_speedup: best.cumulative,
        versions: search.nodes.len(),
        llm: runner.spent,
    })
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

/// An accepted step's energy measurement running beside the next step: joules per call
/// of the version before the step and of the accepted one, when NVML could tell.
type EnergyTask = tokio::task::JoinHandle<Option<(Option<f64>, Option<f64>)>>;

/// The state of a run between steps; each step expands one version of the tree.
struct Runner<'a, 'o> {
    pool: &'a WorkerPool,
    lang: Lang,
    kernel_name: &'a str,
    /// The run's starting text.
    text: &'a str,
    opts: &'a OptimizeOptions,
    env: EvalEnv,
    hello: &'a crate::worker::protocol::HelloResult,
    start: &'a evaluate::Planned,
    repair_reference: Option<&'a evaluate::Planned>,
    /// The current version's check, running beside the first step (None: passed, or
    /// none is run); its answer is awaited before anything is accepted.
    check: Option<tokio::sync::watch::Receiver<Option<Result<(), String>>>>,
    /// Set when that check failed: the step's verifications stop.
    check_failed: &'a AtomicBool,
    /// Steps not told yet (`Event::Step`), as indices into `records`: those that ended
    /// before the current version's check answered (told once it passed), and the last
    /// accepted step while its energy is being measured.
    held: Vec<usize>,
    /// That measurement: the record it belongs to, and the task.
    energy: Option<(usize, EnergyTask)>,
    policy: Policy,
    tried: BTreeSet<(String, String)>,
    records: Vec<StepRecord>,
    warnings: Vec<String>,
    strategist_down: bool,
    /// The last timing of each version of the tree.
    timings: std::collections::HashMap<usize, Timing>,
    /// Each version's profile, or why it has none (taken once per version).
    profiles: std::collections::HashMap<usize, Result<crate::profile::Profile, String>>,
    spent: LlmSpent,
    run_id: u64,
    started: std::time::Instant,
    on: &'o mut (dyn FnMut(Event<'_>) + Send),
}

impl search::Expand for Runner<'_, '_> {
    fn llm_spent(&self) -> (u64, u64) {
        (
            self.spent.calls,
            self.spent.input_tokens + self.spent.output_tokens,
        )
    }

    async fn expand(
        &mut self,
        tree: &search::Search,
        sel: search::Selection,
        step_no: usize,
    ) -> search::Expansion {
        match self.step(tree, sel, step_no).await {
            Ok(e) => e,
            // The current text stopped planning or parsing: nothing more can be done on
            // this version.
            Err(e) => search::Expansion::Exhausted(e),
        }
    }
}

/// Waits for the current version's check (once: `check` is None after it passed);
/// `Err` is why it failed.
async fn checked(
    check: &mut Option<tokio::sync::watch::Receiver<Option<Result<(), String>>>>,
) -> Result<(), String> {
    let Some(rx) = check.as_mut() else {
        return Ok(());
    };
    let answer = match rx.wait_for(|v| v.is_some()).await {
        Ok(v) => v.clone().unwrap_or(Ok(())),
        Err(_) => Err("the current version's check stopped without an answer".into()),
    };
    *check = None;
    answer
}

impl Runner<'_, '_> {
    /// Waits for a running energy measurement and puts it into its step's record.
    async fn settle_energy(&mut self) {
        if let Some((at, task)) = self.energy.take() {
            if let Ok(Some(e)) = task.await {
                self.records[at].energy_j = Some(e);
            }
        }
    }

    /// Tells the held steps (`Event::Step`) in order, once the current version's check
    /// has passed, up to a step whose energy is still being measured (at the run's end,
    /// `all`: every one, after the measurement).
    async fn tell(&mut self, all: bool) {
        if all {
            self.settle_energy().await;
        } else if self.check.is_some() {
            return;
        }
        let waiting = self.energy.as_ref().map(|(at, _)| *at);
        while let Some(&i) = self.held.first() {
            if Some(i) == waiting {
                break;
            }
            self.held.remove(0);
            (self.on)(Event::Step(&self.records[i]));
        }
    }

    fn cancelled(&self) -> bool {
        self.opts
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
    }

    /// The run's history as the strategist sees it for `node`: steps tried on this
    /// version, on its sibling versions, and the accepted steps that led here.
    fn history_for(&self, tree: &search::Search, node: usize) -> String {
        let parent = tree.nodes[node].parent;
        let path = tree.path(node);
        let on_node: Vec<StepRecord> = self
            .records
            .iter()
            .filter(|r| r.node == Some(node))
            .cloned()
            .collect();
        let siblings: Vec<StepRecord> = self
            .records
            .iter()
            .filter(|r| {
                r.node.is_some_and(|n| {
                    n != node && parent.is_some() && tree.nodes[n].parent == parent
                })
            })
            .cloned()
            .collect();
        let led_here: Vec<StepRecord> = self
            .records
            .iter()
            .filter(|r| r.child.is_some_and(|c| path.contains(&c)))
            .cloned()
            .collect();
        let others = self.records.len() - on_node.len() - siblings.len() - led_here.len();
        let mut out = String::new();
        if !led_here.is_empty() {
            out.push_str("Accepted steps that led to this version:\n");
            out.push_str(&history_text(&led_here));
            out.push('\n');
        }
        out.push_str("Tried on this version:\n");
        out.push_str(&history_text(&on_node));
        if !siblings.is_empty() {
            out.push_str("\nTried on sibling versions (same parent):\n");
            out.push_str(&history_text(&siblings));
        }
        if others > 0 {
            out.push_str(&format!(
                "\n({others} more steps of this run were on other branches)"
            ));
        }
        out
    }

    async fn step(
        &mut self,
        tree: &search::Search,
        sel: search::Selection,
        step_no: usize,
    ) -> Result<search::Expansion, String> {
        use search::Expansion;
        let (lang, kernel_name, opts, pool) = (self.lang, self.kernel_name, self.opts, self.pool);
        let env = self.env.clone();
        let hello = self.hello;
        if self.cancelled() {
            return Ok(Expansion::Stop("cancelled".to_string()));
        }
        let node = &tree.nodes[sel.node];
        let current_text = node.text.clone();
        let last = self.timings.get(&sel.node).cloned();
        let current = evaluate::plan(lang, &current_text, kernel_name, &env)?;
        let doc = Document::new(lang, 0, &current_text);
        let tree_sitter = doc.tree().ok_or("the parser gave up on the current text")?;
        let model = crate::syntax::analyze(lang, &current_text, tree_sitter);
        let kernel = model
            .kernel(kernel_name)
            .ok_or("the kernel disappeared from the current text")?;
        let mut facts = facts::static_facts(lang, &current_text, tree_sitter, &model, kernel);
        if let Some(d) = &hello.device {
            facts.set_device(facts::DeviceFacts {
                name: d.name.clone(),
                sms: d.sms,
                smem_per_block: d.smem_per_block,
                l2_bytes: d.l2_bytes,
                copy_gbps: d.ceilings.as_ref().map(|c| c.copy_gbps),
                fma_tflops: d.ceilings.as_ref().map(|c| c.fma_tflops),
            });
        }
        if let Some(t) = &last {
            facts.set_timing(t.median_ms, t.frac_copy, t.frac_fma);
        }
        if lang == Lang::Cuda {
            if let Ok(OpResult::Compile(c)) = pool
                .request(
                    Op::Compile {
                        version: current.version.clone(),
                    },
                    None,
                )
                .await
            {
                if let Some(r) = c.registers {
                    facts.set_resources(r, u64::from(c.local_bytes.unwrap_or(0)));
                }
            }
        }
        if let Some(profiler) = &opts.profiler {
            if !self.profiles.contains_key(&sel.node) {
                let short = opts.budget.wall.is_some_and(|w| {
                    w.saturating_sub(self.started.elapsed()) < std::time::Duration::from_secs(60)
                });
                let got = if short {
                    Err("skipped: less than a minute of the time budget is left".to_string())
                } else {
                    (self.on)(Event::Stage(format!(
                        "step {step_no}: profiling version {} with Nsight Compute",
                        sel.node
                    )));
                    profiler(current_text.clone()).await
                };
                if let Err(e) = &got {
                    self.warnings
                        .push(format!("version {} was not profiled: {e}", sel.node));
                }
                self.profiles.insert(sel.node, got);
            }
        }
        let profile = self
            .profiles
            .get(&sel.node)
            .and_then(|p| p.as_ref().ok())
            .cloned();
        if let Some(p) = &profile {
            facts.set_profile(p.clone());
        }
        let excluded: BTreeSet<String> = self
            .tried
            .iter()
            .filter(|(_, h)| *h == current.kernel_hash)
            .map(|(id, _)| id.clone())
            .collect();
        let have_coder = opts.llm.as_ref().is_some_and(|l| l.coder.is_some());
        let arms: Vec<&Strategy> = opts
            .catalog
            .applicable(lang, &facts)
            .into_iter()
            .filter(|s| s.rewrite.is_some() || have_coder)
            .filter(|s| opts.only.is_empty() || opts.only.contains(&s.id))
            .collect();

        // Propose. The step's call budget never exceeds what is left of the run's.
        let per_step = opts.llm.as_ref().map_or(0, |l| l.calls_per_step);
        let left = opts
            .budget
            .llm_calls
            .map_or(u64::from(per_step), |c| c.saturating_sub(self.spent.calls));
        let mut budget = llm::Budget::new(per_step.min(left.min(u64::from(u32::MAX)) as u32));
        let where_ = if tree.nodes.len() > 1 {
            format!(
                " on version {}{}",
                sel.node,
                match sel.pick {
                    search::Pick::Best => String::new(),
                    p => format!(" ({})", p.label()),
                }
            )
        } else {
            String::new()
        };
        let history = self.history_for(tree, sel.node);
        let profile_text = match self.profiles.get(&sel.node) {
            Some(Ok(p)) => {
                let mut s = format!("Diagnosis: {}\n", p.diagnosis());
                for (k, v) in p.table() {
                    s.push_str(&format!("- {k}: {v}\n"));
                }
                s
            }
            Some(Err(e)) => format!("(no profile: {e})"),
            None => {
                "(no profile: run `optimize --profile` on a machine with Nsight Compute)".into()
            }
        };
        let cx = StepContext {
            hello,
            text: &current_text,
            model: &model,
            kernel,
            facts: &facts,
            last: last.as_ref(),
        };
        let mut proposal: Option<llm::Proposal> = opts.repair.as_ref().map(|r| llm::Proposal {
            id: "repair".into(),
            params: Default::default(),
            rationale: "the kernel fails verification; the coder fixes it with the report".into(),
            free_form: Some(format!(
                "Fix `{kernel_name}` so that it passes verification again (same results as its last verified version), keeping any optimization that is correct. The verification report of the current code: {}",
                r.feedback
            )),
            ..Default::default()
        });
        if let Some(setup) = &opts.llm {
            if setup.strategist.is_some() && !self.strategist_down && proposal.is_none() {
                (self.on)(Event::Stage(format!("step {step_no}{where_}: proposing")));
                match llm_propose(
                    setup,
                    &mut budget,
                    &cx,
                    &history,
                    &profile_text,
                    &arms,
                    &excluded,
                )
                .await
                {
                    Ok(p) => proposal = Some(p),
                    Err(e) => {
                        // One warning; the embedded policy picks for the rest of the run.
                        self.strategist_down = true;
                        self.warnings.push(format!(
                            "the LLM strategist failed ({e}); the embedded policy chose instead for the rest of the run"
                        ))
                    }
                }
            }
        }
        let proposal = match proposal {
            Some(p) => p,
            None => match self.policy.choose(&facts, &arms, &excluded) {
                Some(c) => llm::Proposal {
                    id: c.id,
                    params: Default::default(),
                    // The measured bound the choice was made under.
                    rationale: match &profile {
                        Some(p) => format!("{} (profile: {})", c.rationale, p.short()),
                        None => c.rationale,
                    },
                    ..Default::default()
                },
                None => {
                    self.spent.add(&budget);
                    return Ok(Expansion::Exhausted(if arms.is_empty() {
                        "no catalog step applies to this kernel".to_string()
                    } else {
                        "every applicable step was tried on this kernel text".to_string()
                    }));
                }
            },
        };
        let strategy = opts.catalog.get(&proposal.id).cloned();
        let title = match (&strategy, &proposal.free_form) {
            (_, Some(d)) => d.clone(),
            (Some(s), None) => s.title.clone(),
            (None, None) => proposal.id.clone(),
        };
        (self.on)(Event::Stage(format!("step {step_no}{where_}: {title}")));

        let mut record = StepRecord {
            step: step_no,
            strategy_id: proposal.id.clone(),
            strategy: title.clone(),
            rationale: proposal.rationale.clone(),
            coder: "embedded".into(),
            outcome: Outcome::Failed,
            candidates: Vec::new(),
            before_ms: last.as_ref().map(|t| t.median_ms),
            best_ms: None,
            speedup: 1.0,
            cumulative: node.cumulative,
            accepted: None,
            seed: opts.seed,
            source_hash: history::hash(&current_text),
            kernel_hash: current.kernel_hash.clone(),
            kernel_after: None,
            interpreter: false,
            unix_ms: 0,
            cancelled: false,
            checks: Vec::new(),
            suspicious: false,
            run: Some(self.run_id),
            node: Some(sel.node),
            child: None,
            pick: (tree.nodes.len() > 1).then(|| sel.pick.label().to_string()),
            on_best_path: false,
            llm: None,
            profile: self.profiles.get(&sel.node).map(|p| match p {
                Ok(p) => p.diagnosis(),
                Err(e) => format!("not profiled: {e}"),
            }),
            energy_j: None,
        };

        // Rewrite: the embedded coder when the step has one and no LLM coder is asked
        // for; the LLM coder otherwise.
        let use_llm_coder = have_coder
            && (strategy.as_ref().is_none_or(|s| s.rewrite.is_none())
                || opts.llm.as_ref().is_some_and(|l| l.prefer_coder));
        let mut batch_candidates: Vec<(String, String)> = Vec::new();
        let mut llm_failure: Option<String> = None;
        if use_llm_coder {
            record.coder = "llm".into();
        } else if let Some(rw) = strategy.as_ref().and_then(|s| s.rewrite.clone()) {
            let mut params = strategy
                .as_ref()
                .map(|s| s.params.clone())
                .unwrap_or_default();
            params.extend(proposal.params.clone());
            let cx = rewrite::RewriteContext {
                lang,
                text: &current_text,
                tree: tree_sitter,
                model: &model,
                kernel,
                params: &params,
            };
            (self.on)(Event::Stage(format!("step {step_no}: rewriting")));
            match rewrite::apply(&rw, &cx) {
                Ok(c) => batch_candidates = c.into_iter().map(|c| (c.label, c.text)).collect(),
                Err(e) => {
                    record.outcome = Outcome::NotApplicable;
                    record.candidates.push(CandidateRecord {
                        label: proposal.id.clone(),
                        verified: false,
                        median_ms: None,
                        message: Some(e.to_string()),
                        ..Default::default()
                    });
                }
            }
        } else {
            record.outcome = Outcome::NotApplicable;
            record.candidates.push(CandidateRecord {
                label: proposal.id.clone(),
                verified: false,
                median_ms: None,
                message: Some(
                    "a model-only step; configure an LLM coder (settings `llm.coder`) to try it"
                        .into(),
                ),
                ..Default::default()
            });
        }

        let on = &mut *self.on;
        let mut stage = |s: String| on(Event::Stage(s));
        let result = if use_llm_coder {
            let setup = opts.llm.as_ref().expect("use_llm_coder implies llm");
            let step = match (&strategy, &proposal.free_form) {
                (_, Some(d)) => d.clone(),
                (Some(s), None) => {
                    let mut params = s.params.clone();
                    params.extend(proposal.params.clone());
                    format!(
                        "{} (`{}`)\n\n{}\n\nParameters: {}",
                        s.title,
                        s.id,
                        s.description,
                        serde_json::to_string(&params).unwrap_or_default()
                    )
                }
                (None, None) => proposal.id.clone(),
            };
            // The strategist's grounding, when it gave one.
            let mut step = step;
            if let Some(t) = &proposal.touches {
                step.push_str(&format!("\n\nThe code this step touches: {t}"));
            }
            if let Some(l) = &proposal.launch {
                step.push_str(&format!("\n\nThe launch change it implies: {l}"));
            }
            match llm_code(
                setup,
                &mut budget,
                pool,
                &env,
                self.repair_reference.unwrap_or(&current),
                self.repair_reference.is_none(),
                &cx,
                &step,
                opts.seed,
                &mut stage,
            )
            .await
            {
                Ok(r) => Some(r),
                Err(e) => {
                    llm_failure = Some(e);
                    None
                }
            }
        } else if batch_candidates.is_empty() {
            None
        } else {
            Some(
                evaluate::batch(
                    pool,
                    lang,
                    kernel_name,
                    &env,
                    &current.version,
                    &batch_candidates,
                    opts.seed,
                    true,
                    &opts
                        .cancel
                        .as_deref()
                        .into_iter()
                        .chain([self.check_failed])
                        .collect::<Vec<_>>(),
                    &mut stage,
                )
                .await,
            )
        };
        if budget.used() > 0 {
            let mut step_spent = LlmSpent::default();
            step_spent.add(&budget);
            self.spent.add(&budget);
            record.llm = Some(step_spent);
            stage(format!(
                "step {step_no}: models so far: {}",
                self.spent.describe()
            ));
        }
        // The coder could not be reached at all (endpoint, key, budget): not the step's
        // fault, so the policy learns nothing and the step is not marked as tried.
        let infra_failure = llm_failure.is_some();
        if let Some(message) = llm_failure {
            record.candidates.push(CandidateRecord {
                label: "llm".into(),
                verified: false,
                median_ms: None,
                message: Some(message),
                ..Default::default()
            });
        }

        // Nothing a step verified counts before the current version has passed its check
        // (a step that did not apply waits for nothing).
        if result.is_some() {
            if let Err(e) = checked(&mut self.check).await {
                return Ok(Expansion::Stop(e));
            }
        }
        let mut accepted: Option<(String, String)> = None;
        let mut energy_task = None;
        if let Some(mut b) = result {
            record.interpreter = b.interpreter;
            record.candidates.extend(std::mem::take(&mut b.records));
            if opts.repair.is_some() {
                // A repair wins by passing verification against the last verified version.
                if let Some(v) = b.verified.first() {
                    record.outcome = Outcome::Accepted;
                    record.accepted = Some(v.label.clone());
                    record.kernel_after = Some(v.planned.kernel_text.clone());
                    accepted = Some((v.text.clone(), v.planned.kernel_hash.clone()));
                }
            } else if let Some(base) = &b.base {
                record.before_ms = Some(base.median_ms);
                if let Some((top, measured)) = b.best() {
                    let (mut i, mut base, mut tm, mut g) =
                        (top, b.bases[top].clone(), b.timings[top].clone(), measured);
                    // A speedup means something only within one device. Each worker's
                    // best candidate that is faster on its own device is a contender;
                    // when one was timed on another worker than the primary, the
                    // contenders are re-timed side by side beside the current version
                    // on the primary worker, and that measurement picks the winner (by
                    // the same rule as one worker's timings).
                    let contenders: Vec<(usize, evaluate::Gain)> = b
                        .best_per_worker()
                        .into_iter()
                        .filter(|(_, g)| g.faster())
                        .collect();
                    // No re-timing when the best was timed on the primary and every
                    // contender timed elsewhere, on the same GPU model, is slower beyond
                    // the noise: it could not win on the primary either.
                    let off_primary = |j: usize| b.timed_on[j].is_some_and(|w| w != 0);
                    let could_win = |j: usize, gj: evaluate::Gain| {
                        !same_model(pool, b.timed_on[j])
                            || gj.speedup * (1.0 + gj.noise.max(measured.noise)) >= measured.speedup
                    };
                    let retime = measured.faster()
                        && (off_primary(top)
                            || contenders
                                .iter()
                                .any(|&(j, gj)| off_primary(j) && could_win(j, gj)));
                    let timed_by = |j: usize| {
                        b.timed_on[j].map_or_else(String::new, |w| pool.describe_worker(w))
                    };
                    if retime {
                        let what: Vec<String> = contenders
                            .iter()
                            .map(|&(j, gj)| {
                                format!(
                                    "`{}` ({:.2}x on {})",
                                    b.verified[j].label,
                                    gj.speedup,
                                    timed_by(j)
                                )
                            })
                            .collect();
                        stage(format!(
                            "re-timing {} against the current version on the primary worker",
                            what.join(", ")
                        ));
                    }
                    // Each candidate is verified against the version it came from; a
                    // winner made from a later version is also checked against the
                    // run's starting version, so differences within tolerance cannot
                    // pile up across steps. That check runs on another worker while the
                    // primary re-times (it is dropped if the re-timing says slower, and
                    // run again if the re-timing picks another winner).
                    let drifts = measured.faster() && current_text != self.text;
                    let drift_of = |w: Version| {
                        let start = &self.start.version;
                        async move {
                            let mut quiet = |_: &str| {};
                            evaluate::verify(pool, start, &w, opts.seed, &mut quiet)
                                .await
                                .err()
                                .map(|why| format!(
                                    "matches the current version but drifted from the run's starting version beyond tolerance: {why}"
                                ))
                        }
                    };
                    let versions: Vec<Version> = contenders
                        .iter()
                        .map(|&(j, _)| b.verified[j].version())
                        .collect();
                    let (retimed, mut drift) = tokio::join!(
                        async {
                            if retime {
                                Some(
                                    evaluate::retime_on_primary(pool, &current.version, &versions)
                                        .await,
                                )
                            } else {
                                None
                            }
                        },
                        async {
                            if drifts {
                                drift_of(b.verified[top].version()).await
                            } else {
                                None
                            }
                        }
                    );
                    match retimed {
                        Some(Ok((b1, ts))) => {
                            let gains: Vec<(usize, evaluate::Gain)> = contenders
                                .iter()
                                .zip(&ts)
                                .map(|(&(j, _), t)| (j, evaluate::gain(&b1, t)))
                                .collect();
                            for (&(j, own), (_, again)) in contenders.iter().zip(&gains) {
                                record.checks.push(format!(
                                    "`{}`: {:.2}x timed on {}; re-timed on {}: {:.2}x",
                                    b.verified[j].label,
                                    own.speedup,
                                    timed_by(j),
                                    pool.describe_worker(0),
                                    again.speedup
                                ));
                            }
                            // The re-timed contenders, side by side on the primary, decide.
                            // When none of them is faster there, the step's speedup is the
                            // best the primary measured, as on one worker: the re-timed
                            // ones and the other candidates it timed.
                            let mut decide: Vec<(usize, evaluate::Gain, Timing, Timing)> = gains
                                .iter()
                                .zip(&ts)
                                .map(|(&(j, gj), t)| (j, gj, b1.clone(), t.clone()))
                                .collect();
                            let retimed = evaluate::pick(&gains);
                            if retimed.is_none_or(|(_, gk)| !gk.faster()) {
                                for j in 0..b.timings.len() {
                                    let on_primary = b.timed_on[j].is_none_or(|w| w == 0);
                                    if on_primary && !decide.iter().any(|d| d.0 == j) {
                                        let gj = evaluate::gain(&b.bases[j], &b.timings[j]);
                                        decide.push((
                                            j,
                                            gj,
                                            b.bases[j].clone(),
                                            b.timings[j].clone(),
                                        ));
                                    }
                                }
                            }
                            decide.sort_by_key(|d| d.0);
                            let pairs: Vec<(usize, evaluate::Gain)> =
                                decide.iter().map(|d| (d.0, d.1)).collect();
                            let chosen = match evaluate::pick(&pairs) {
                                // Measurements of two requests disagree: the re-timing stands.
                                Some((_, gk)) if gk.faster() && retimed.is_none_or(|(_, r)| !r.faster()) => retimed,
                                other => other,
                            };
                            if let Some((k, gk)) = chosen {
                                if let Some(d) = decide.iter().find(|d| d.0 == k) {
                                    (i, g, base, tm) = (k, gk, d.2.clone(), d.3.clone());
                                }
                            }
                        }
                        Some(Err(e)) => record.checks.push(format!(
                            "`{}`: re-timing on the primary worker failed ({e}); the {:.2}x timed on {} decides",
                            b.verified[top].label,
                            measured.speedup,
                            timed_by(top)
                        )),
                        None => {}
                    }
                    if i != top && drifts && g.faster() {
                        drift = drift_of(b.verified[i].version()).await;
                    }
                    let winner = b.verified[i].version();
                    let (base, tm) = (&base, &tm);
                    record.before_ms = Some(base.median_ms);
                    record.best_ms = Some(tm.median_ms);
                    let (speedup, faster) = (g.speedup, g.faster());
                    let drift = drift.filter(|_| faster);
                    // Before acceptance: a suspiciously large speedup is re-verified on
                    // extra seeds, and the winner runs once under compute-sanitizer.
                    let drift = match drift {
                        Some(d) => Some(d),
                        None if faster => {
                            record.suspicious =
                                evaluate::needs_reverify(speedup, opts.verify.suspicious_speedup);
                            let mut stage = |s: &str| stage(s.to_string());
                            evaluate::confirm(
                                pool,
                                &current.version,
                                &winner,
                                speedup,
                                &opts.verify,
                                opts.seed,
                                &mut record.checks,
                                &mut stage,
                            )
                            .await
                            .err()
                        }
                        None => None,
                    };
                    if let Some(why) = drift {
                        record.outcome = Outcome::Failed;
                        record.best_ms = Some(tm.median_ms);
                        record.candidates.push(CandidateRecord {
                            label: b.verified[i].label.clone(),
                            verified: false,
                            median_ms: Some(tm.median_ms),
                            message: Some(why),
                            ..Default::default()
                        });
                        self.timings.insert(sel.node, base.clone());
                    } else if faster {
                        let v = &b.verified[i];
                        record.outcome = Outcome::Accepted;
                        record.speedup = speedup;
                        record.accepted = Some(v.label.clone());
                        record.kernel_after = Some(v.planned.kernel_text.clone());
                        accepted = Some((v.text.clone(), v.planned.kernel_hash.clone()));
                        self.timings.insert(tree.nodes.len(), tm.clone());
                        self.timings.insert(sel.node, base.clone());
                        // Energy per call of both versions, once per accepted step (a
                        // short extra timing with NVML; none on the interpreter).
                        if !b.interpreter {
                            let settings = crate::worker::protocol::TimeSettings {
                                warmup_ms: 5.0,
                                rep_ms: 5.0,
                                min_reps: 3,
                                flush_l2: true,
                                energy: true,
                            };
                            let op = Op::Time {
                                versions: vec![current.version.clone(), winner.clone()],
                                settings,
                            };
                            // It is measured beside the next step (with several workers,
                            // on one while the others take its candidates); the step's
                            // record is told once it is in.
                            let pool = pool.clone();
                            energy_task = Some(tokio::spawn(async move {
                                match pool.request(op, None).await {
                                    Ok(OpResult::Time(t)) => {
                                        let e =
                                            |i: usize| t.timings.get(i).and_then(|x| x.energy_j);
                                        (e(0).is_some() || e(1).is_some()).then(|| (e(0), e(1)))
                                    }
                                    _ => None,
                                }
                            }));
                        }
                    } else {
                        record.outcome = Outcome::NoGain;
                        record.speedup = speedup;
                        self.timings.insert(sel.node, base.clone());
                    }
                }
            }
        }
        record.cumulative = node.cumulative * record.speedup.max(1e-12);
        if record.outcome != Outcome::Accepted {
            record.cumulative = node.cumulative;
        }
        record.unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);

        // A step cut short by a cancel says nothing about the step: nothing is learned.
        let cut_short = self.cancelled() && record.outcome != Outcome::Accepted;
        let expansion = if cut_short {
            record.cancelled = true;
            Expansion::Stop("cancelled".to_string())
        } else if record.outcome == Outcome::NotApplicable {
            Expansion::NotApplicable
        } else if infra_failure {
            Expansion::Infra
        } else if let Some(twin) = accepted
            .as_ref()
            .and_then(|(_, h)| tree.nodes.iter().find(|n| n.kernel_hash == *h))
        {
            // The same version is already in the tree (a step repeated on an earlier
            // version after backtracking): no new node.
            record.outcome = Outcome::NoGain;
            record.accepted = None;
            record.kernel_after = None;
            record.cumulative = node.cumulative;
            record.candidates.push(CandidateRecord {
                label: "tree".into(),
                verified: true,
                median_ms: record.best_ms,
                message: Some(format!(
                    "the winner is the same kernel text as v{}, already in the tree",
                    twin.id
                )),
                ..Default::default()
            });
            Expansion::NoGain
        } else if let Some((text, kernel_hash)) = accepted {
            record.child = Some(tree.nodes.len());
            Expansion::Improved {
                text,
                kernel_hash,
                median_ms: record.best_ms,
                speedup: record.speedup,
                label: format!(
                    "{} ({})",
                    record.strategy_id,
                    record.accepted.as_deref().unwrap_or("")
                ),
            }
        } else {
            Expansion::NoGain
        };
        // The policy learns from counted steps (not from repairs).
        if opts.repair.is_none()
            && matches!(expansion, Expansion::Improved { .. } | Expansion::NoGain)
        {
            let measured = if record.outcome == Outcome::Failed {
                1.0
            } else {
                record.speedup
            };
            self.policy.update(
                &record.strategy_id,
                &facts,
                policy::reward(record.outcome, measured),
            );
            if let Some(p) = &opts.policy_path {
                if let Err(e) = self.policy.save(p) {
                    self.warnings.push(format!(
                        "the strategy policy could not be saved to {}: {e}",
                        p.display()
                    ));
                }
            }
        }
        // A step is not repeated on the same version: after a failure or no gain it
        // would fail again, and after a gain it would make the same child again (when
        // the search comes back to this version).
        if !infra_failure && !cut_short {
            self.tried
                .insert((record.strategy_id.clone(), current.kernel_hash.clone()));
        }
        self.records.push(record);
        self.held.push(self.records.len() - 1);
        // An earlier step's measurement ran beside this step: it is done by now.
        self.settle_energy().await;
        if let Some(task) = energy_task {
            self.energy = Some((self.records.len() - 1, task));
        }
        self.tell(false).await;
        Ok(expansion)
    }
}

/// The LLM strategist and coder of a run, built from the `llm` settings.
pub struct LlmSetup {
    pub strategist: Option<llm::Strategist>,
    pub coder: Option<llm::LlmCoder>,
    /// Use the LLM coder even for steps that have an embedded rewrite.
    pub prefer_coder: bool,
    /// Model calls one step may make (strategy, code and repairs together).
    pub calls_per_step: u32,
    /// Times a failing candidate goes back to the coder with the failure.
    pub repair_rounds: u32,
    /// Coder replies asked for at once in a step's first round (`llm.samples`).
    pub samples: u32,
}

impl LlmSetup {
    /// `Err` names what is missing or wrong, for the author. Neither model configured
    /// is an error: the caller asked for the LLM.
    pub fn from_settings(s: &crate::settings::LlmSettings) -> Result<Self, String> {
        if s.strategy.is_none() && s.coder.is_none() {
            return Err("no LLM is configured: set `llm.strategy` and/or `llm.coder` in the settings (docs/configuration.md)".into());
        }
        let prompts = llm::Prompts::load(s.prompts_dir.as_deref()).map_err(|e| e.to_string())?;
        let strategist = s
            .strategy
            .as_ref()
            .map(|m| llm::Strategist::new(m, prompts.clone()))
            .transpose()
            .map_err(|e| format!("llm.strategy: {e}"))?;
        let coder = s
            .coder
            .as_ref()
            .map(|m| llm::LlmCoder::new(m, prompts.clone()))
            .transpose()
            .map_err(|e| format!("llm.coder: {e}"))?;
        Ok(LlmSetup {
            strategist,
            coder,
            prefer_coder: false,
            calls_per_step: s.calls_per_step.max(1),
            repair_rounds: s.repair_rounds,
            samples: s.samples.max(1),
        })
    }
}

/// The kernel unit's text without the `@bench` block, as models see it.
/// The file with the coder's reply in place of the kernel unit (and of its `@bench`
/// lines, when the reply carries them).
fn splice_reply(
    cx: &StepContext<'_>,
    kernel: &crate::syntax::Kernel,
    reply: &llm::CodeReply,
) -> Result<String, String> {
    if reply.spec.is_empty() {
        llm::splice_unit(cx.text, cx.model, kernel, &reply.unit)
    } else {
        llm::splice_unit_with_spec(cx.text, cx.model, kernel, &reply.unit, &reply.spec)
    }
    .map_err(|e| e.to_string())
}

/// `new_text` when the reply's spec differs from the current version's only in its
/// launch ([`launch::launch_only`]); else the message naming what changed.
fn launch_change_allowed(
    kernel: &crate::syntax::Kernel,
    env: &EvalEnv,
    current: &evaluate::Planned,
    old_lines: &[String],
    reply: &llm::CodeReply,
    new_text: String,
) -> Result<String, String> {
    if reply.spec.is_empty() {
        return Ok(new_text);
    }
    let planned = evaluate::plan(kernel.lang, &new_text, &kernel.name, env)
        .map_err(|e| format!("the reply's @bench lines do not give a plan: {e}"))?;
    launch::launch_only(
        &current.version.plan,
        &planned.version.plan,
        old_lines,
        &reply.spec,
    )?;
    Ok(new_text)
}

/// The reply as the coder wrote it (spec lines first), for the repair prompt.
fn reply_text(reply: &llm::CodeReply, kernel_lang: Lang) -> String {
    if reply.spec.is_empty() {
        return reply.unit.clone();
    }
    let marker = match kernel_lang {
        Lang::Triton => "#",
        Lang::Cuda => "//",
    };
    let spec: Vec<String> = reply
        .spec
        .iter()
        .map(|l| format!("{marker} @bench {l}"))
        .collect();
    format!("{}\n{}", spec.join("\n"), reply.unit)
}

/// The kernel's `@bench` comment lines as written.
fn spec_text(text: &str, kernel: &crate::syntax::Kernel) -> String {
    kernel
        .spec
        .range
        .clone()
        .and_then(|r| text.get(r))
        .unwrap_or("(no @bench lines)")
        .to_string()
}

fn unit_text(text: &str, kernel: &crate::syntax::Kernel) -> String {
    let mut ranges = kernel.unit_ranges.clone();
    if ranges.is_empty() {
        ranges.push(kernel.def_range.clone());
    }
    ranges.sort_by_key(|r| r.start);
    ranges
        .iter()
        .filter_map(|r| text.get(r.clone()))
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn device_text(hello: &crate::worker::protocol::HelloResult) -> String {
    match &hello.device {
        Some(d) => {
            let mut s = format!(
                "- {} ({}), {} SMs, {} KiB shared memory per block ({} KiB opt-in), {} MiB L2, {} registers per block",
                d.name,
                d.arch,
                d.sms,
                d.smem_per_block / 1024,
                d.smem_per_block_optin / 1024,
                d.l2_bytes >> 20,
                d.regs_per_block
            );
            if let Some(c) = &d.ceilings {
                s.push_str(&format!(
                    "\n- measured: {:.0} GB/s copy bandwidth, {:.1} TFLOP/s FP32 FMA",
                    c.copy_gbps, c.fma_tflops
                ));
            }
            s
        }
        None => format!("- no CUDA device ({})", hello.cuda.message),
    }
}

fn history_text(records: &[StepRecord]) -> String {
    if records.is_empty() {
        return "(no steps yet in this run)".into();
    }
    records
        .iter()
        .map(|r| {
            format!(
                "- {} ({}): {}{}",
                r.strategy_id,
                r.strategy,
                r.outcome.label(),
                match (
                    r.outcome,
                    r.candidates.iter().find_map(|c| c.message.as_ref())
                ) {
                    (Outcome::Accepted, _) => format!(", {:.2}× faster", r.speedup),
                    (_, Some(m)) => format!(": {m}"),
                    _ => String::new(),
                }
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

struct StepContext<'a> {
    hello: &'a crate::worker::protocol::HelloResult,
    text: &'a str,
    model: &'a crate::syntax::FileModel,
    kernel: &'a crate::syntax::Kernel,
    facts: &'a Facts,
    last: Option<&'a Timing>,
}

async fn llm_propose(
    setup: &LlmSetup,
    budget: &mut llm::Budget,
    cx: &StepContext<'_>,
    history: &str,
    profile: &str,
    arms: &[&Strategy],
    excluded: &BTreeSet<String>,
) -> Result<llm::Proposal, String> {
    let strategist = setup.strategist.as_ref().ok_or("no strategy model")?;
    let allowed: Vec<Strategy> = arms
        .iter()
        .filter(|s| !excluded.contains(&s.id))
        .map(|s| (*s).clone())
        .collect();
    let sub = Catalog {
        strategies: allowed,
    };
    let refs: Vec<&Strategy> = sub.strategies.iter().collect();
    let input = llm::StrategyInput {
        kernel_name: cx.kernel.name.clone(),
        lang: llm::lang_label(cx.kernel.lang).to_string(),
        kernel_unit: unit_text(cx.text, cx.kernel),
        spec: spec_text(cx.text, cx.kernel),
        facts: cx.facts.describe(),
        device: device_text(cx.hello),
        timing: cx.last.map_or("(not timed yet)".to_string(), |t| {
            format!(
                "median {:.4} ms (p10 {:.4}, p90 {:.4}), {:.0} GB/s{}",
                t.median_ms,
                t.p10_ms,
                t.p90_ms,
                t.gbps,
                t.frac_copy.map_or(String::new(), |f| format!(
                    ", {:.0}% of copy bandwidth",
                    f * 100.0
                ))
            )
        }),
        history: history.to_string(),
        profile: profile.to_string(),
        catalog: sub.describe_for_model(&refs),
    };
    let p = strategist
        .propose(budget, &input, &sub)
        .await
        .map_err(|e| e.to_string())?;
    if p.id != "free" && excluded.contains(&p.id) {
        return Err(format!(
            "it proposed `{}`, which already failed on this kernel text",
            p.id
        ));
    }
    Ok(p)
}

/// Ask the coder for the step, then repair with the failure (a reply that breaks the
/// rules, a compile log, a verification report) up to `repair_rounds` times while the
/// step's budget lasts. Every attempt is a candidate record; the first that verifies
/// is timed against the current version.
#[allow(clippy::too_many_arguments)]
async fn llm_code(
    setup: &LlmSetup,
    budget: &mut llm::Budget,
    pool: &WorkerPool,
    env: &EvalEnv,
    current: &evaluate::Planned,
    time: bool,
    cx: &StepContext<'_>,
    step: &str,
    seed: u64,
    stage: &mut (dyn FnMut(String) + Send),
) -> Result<evaluate::BatchResult, String> {
    let coder = setup.coder.as_ref().ok_or("no coder model")?;
    let kernel = cx.kernel;
    let input = llm::CoderInput {
        kernel_name: kernel.name.clone(),
        lang: kernel.lang,
        param_names: kernel.params.iter().map(|p| p.name.clone()).collect(),
        kernel_unit: unit_text(cx.text, kernel),
        spec: spec_text(cx.text, kernel),
        step: step.to_string(),
        facts: cx.facts.describe(),
        device: device_text(cx.hello),
    };
    let old_lines: Vec<String> = kernel
        .spec
        .lines
        .iter()
        .map(|l| l.text.trim().to_string())
        .collect();
    let mut records = Vec::new();
    let mut round = 0u32;
    let mut attempt = if setup.samples > 1 && budget.remaining() > 1 {
        // Several samples at once: the distinct ones are verified and timed together;
        // when none verifies, the repair rounds start from the first failure.
        let failure = match llm_samples(
            setup, budget, pool, env, current, time, cx, &input, &old_lines, seed, stage,
        )
        .await?
        {
            Sampled::Verified(b) => return Ok(*b),
            Sampled::Failed(mut r, failure) => {
                records.append(&mut r);
                failure
            }
        };
        match failure {
            Some((previous, feedback)) if setup.repair_rounds > 0 && budget.remaining() > 0 => {
                round = 1;
                stage(format!("repair round {round}"));
                coder.repair(budget, &input, &previous, &feedback).await
            }
            _ => {
                return Ok(evaluate::BatchResult {
                    records,
                    ..Default::default()
                })
            }
        }
    } else {
        stage("asking the coder".into());
        coder.rewrite(budget, &input).await
    };
    loop {
        let label = if round == 0 {
            "llm".to_string()
        } else {
            format!("llm repair {round}")
        };
        // (previous code, feedback) for the next repair round, if any.
        let failure: (String, String) = match attempt {
            Err(e) => {
                let message = e.to_string();
                if e.raw_reply().is_none() && round == 0 {
                    // The first call itself failed (endpoint, key, budget): no candidate
                    // was ever made.
                    return Err(message);
                }
                records.push(CandidateRecord {
                    label: label.clone(),
                    verified: false,
                    median_ms: None,
                    message: Some(message.clone()),
                    ..Default::default()
                });
                match e.raw_reply() {
                    Some(raw) => (raw.to_string(), message),
                    // A later call failed: no more repairs.
                    None => break,
                }
            }
            Ok(reply) => match splice_reply(cx, kernel, &reply)
                .and_then(|t| launch_change_allowed(kernel, env, current, &old_lines, &reply, t))
            {
                Err(e) => {
                    records.push(CandidateRecord {
                        label: label.clone(),
                        verified: false,
                        median_ms: None,
                        message: Some(e.clone()),
                        ..Default::default()
                    });
                    (reply_text(&reply, kernel.lang), e)
                }
                Ok(new_text) => {
                    let mut b = evaluate::batch(
                        pool,
                        kernel.lang,
                        &kernel.name,
                        env,
                        &current.version,
                        &[(label.clone(), new_text)],
                        seed,
                        time,
                        &[],
                        stage,
                    )
                    .await;
                    if !b.verified.is_empty() {
                        records.append(&mut b.records);
                        b.records = records;
                        return Ok(b);
                    }
                    let feedback = b
                        .first_failure
                        .clone()
                        .unwrap_or_else(|| "the candidate failed".into());
                    records.append(&mut b.records);
                    (reply_text(&reply, kernel.lang), feedback)
                }
            },
        };
        if round >= setup.repair_rounds || budget.remaining() == 0 {
            break;
        }
        round += 1;
        stage(format!("repair round {round}"));
        attempt = coder.repair(budget, &input, &failure.0, &failure.1).await;
    }
    Ok(evaluate::BatchResult {
        records,
        ..Default::default()
    })
}

/// What the sampled first round of a coder step gave.
enum Sampled {
    /// At least one sample verified (all verified ones are timed).
    Verified(Box<evaluate::BatchResult>),
    /// None did: the records, and the (code, feedback) a repair round starts from.
    Failed(Vec<CandidateRecord>, Option<(String, String)>),
}

/// `llm.samples` coder replies at a spread of temperatures, asked for concurrently.
/// Replies that break the rules or the launch contract are records with their reason;
/// replies identical to an earlier one up to comments and whitespace are dropped as
/// duplicates; the rest go to the worker as one batch (compiled, verified against the
/// current version, timed). `Err` when no model call got through at all.
#[allow(clippy::too_many_arguments)]
async fn llm_samples(
    setup: &LlmSetup,
    budget: &mut llm::Budget,
    pool: &WorkerPool,
    env: &EvalEnv,
    current: &evaluate::Planned,
    time: bool,
    cx: &StepContext<'_>,
    input: &llm::CoderInput,
    old_lines: &[String],
    seed: u64,
    stage: &mut (dyn FnMut(String) + Send),
) -> Result<Sampled, String> {
    let coder = setup.coder.as_ref().ok_or("no coder model")?;
    let kernel = cx.kernel;
    stage(format!("asking the coder for {} samples", setup.samples));
    let samples = coder.rewrite_samples(budget, input, setup.samples).await;
    if let Some(first) = samples.first().and_then(|(_, r)| r.as_ref().err()) {
        if samples
            .iter()
            .all(|(_, r)| r.as_ref().is_err_and(|e| e.raw_reply().is_none()))
        {
            // No call got through (endpoint, key, budget): no candidate was made.
            return Err(first.to_string());
        }
    }
    let mut records = Vec::new();
    let mut failures: Vec<(String, String)> = Vec::new();
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut batch: Vec<(String, String)> = Vec::new();
    let mut codes: Vec<String> = Vec::new();
    for (i, (t, r)) in samples.into_iter().enumerate() {
        let label = format!("llm s{} t={t}", i + 1);
        let reject = |records: &mut Vec<CandidateRecord>, message: String| {
            records.push(CandidateRecord {
                label: label.clone(),
                verified: false,
                median_ms: None,
                message: Some(message),
                ..Default::default()
            })
        };
        match r {
            Err(e) => {
                let message = e.to_string();
                if let Some(raw) = e.raw_reply() {
                    failures.push((raw.to_string(), message.clone()));
                }
                reject(&mut records, message);
            }
            Ok(reply) => {
                let code = reply_text(&reply, kernel.lang);
                match splice_reply(cx, kernel, &reply)
                    .and_then(|t| launch_change_allowed(kernel, env, current, old_lines, &reply, t))
                {
                    Err(e) => {
                        failures.push((code, e.clone()));
                        reject(&mut records, e);
                    }
                    Ok(new_text) => {
                        let key = normalised_reply(&reply, kernel.lang);
                        if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
                            reject(
                                &mut records,
                                format!("a duplicate of {first} (same code up to comments and whitespace); not run"),
                            );
                        } else {
                            seen.push((key, label.clone()));
                            batch.push((label.clone(), new_text));
                            codes.push(code);
                        }
                    }
                }
            }
        }
    }
    if !batch.is_empty() {
        let mut b = evaluate::batch(
            pool,
            kernel.lang,
            &kernel.name,
            env,
            &current.version,
            &batch,
            seed,
            time,
            &[],
            stage,
        )
        .await;
        if !b.verified.is_empty() {
            records.append(&mut b.records);
            b.records = records;
            return Ok(Sampled::Verified(Box::new(b)));
        }
        // The first sample that reached the worker and failed is repaired first: its
        // failure says more than a reply that broke the format.
        let failed = b.records.iter().find_map(|r| {
            let i = batch.iter().position(|(l, _)| *l == r.label)?;
            Some((codes[i].clone(), r.message.clone()?))
        });
        if let Some((code, message)) = failed {
            failures.insert(0, (code, b.first_failure.clone().unwrap_or(message)));
        }
        records.append(&mut b.records);
    }
    Ok(Sampled::Failed(records, failures.into_iter().next()))
}

/// A coder reply as compared for duplicates: the unit without comments, with runs of
/// whitespace made one space, then its `@bench` lines.
fn normalised_reply(reply: &llm::CodeReply, lang: Lang) -> String {
    let mut out = String::new();
    let mut chars = reply.unit.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        if let Some(q) = quote {
            out.push(c);
            if c == '\\' {
                if let Some(n) = chars.next() {
                    out.push(n);
                }
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match (lang, c, chars.peek()) {
            (_, '"' | '\'', _) => {
                quote = Some(c);
                out.push(c);
            }
            (Lang::Triton, '#', _) | (Lang::Cuda, '/', Some('/')) => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            (Lang::Cuda, '/', Some('*')) => {
                chars.next();
                let mut prev = ' ';
                for n in chars.by_ref() {
                    if prev == '*' && n == '/' {
                        break;
                    }
                    prev = n;
                }
                out.push(' ');
            }
            _ => out.push(c),
        }
    }
    let mut key = out.split_whitespace().collect::<Vec<_>>().join(" ");
    for l in &reply.spec {
        key.push('\n');
        key.push_str(&l.split_whitespace().collect::<Vec<_>>().join(" "));
    }
    key
}

/// Whether worker `w` has the primary worker's GPU model (speedups measured on the two
/// compare), as their `hello`s say.
fn same_model(pool: &WorkerPool, w: Option<usize>) -> bool {
    let name = |i: usize| pool.hello_of(i).and_then(|h| h.device).map(|d| d.name);
    match w {
        None | Some(0) => true,
        Some(w) => name(w).is_some() && name(w) == name(0),
    }
}
