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
pub mod edit;
pub mod evaluate;
pub mod facts;
pub mod history;
pub mod launch;
pub mod llm;
pub mod policy;
pub mod report;
pub mod rewrite;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::document::Document;
use crate::spec::EvalEnv;
use crate::syntax::Lang;
use crate::worker::pool::WorkerPool;
use crate::worker::protocol::{Op, OpResult, Timing};

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
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CandidateRecord {
    pub label: String,
    pub verified: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_ms: Option<f64>,
    /// Why it was rejected (spec error, verification failure, worker error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
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
}

impl OptimizeRun {
    /// Labels of the accepted candidates, in order.
    pub fn accepted(&self) -> Vec<String> {
        self.steps
            .iter()
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
    // once, on the kernel, instead of failing every step against it.
    if opts.repair.is_none() {
        on(Event::Stage("checking the current version".into()));
        let mut stage = |s: &str| on(Event::Stage(format!("checking the current version: {s}")));
        evaluate::check_current(pool, &start.version, opts.seed, &mut stage).await?;
    }

    let mut warnings = Vec::new();
    let mut policy = match &opts.policy_path {
        Some(p) => {
            let (policy, warning) = Policy::load(p);
            warnings.extend(warning);
            policy
        }
        None => Policy::default(),
    };
    let mut tried = opts.tried.clone();
    let mut current_text = text.to_string();
    let mut start_ms: Option<f64> = None;
    let mut last: Option<Timing> = None;
    let mut records: Vec<StepRecord> = Vec::new();
    let mut steps_done = 0;
    let mut stopped = None;
    let cancelled = || {
        opts.cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
    };

    // Steps that turn out not applicable don't count, but every attempt excludes its
    // step on this text, so this bound is only a guard.
    let mut attempts = 0usize;
    let mut strategist_down = false;
    while steps_done < opts.steps && attempts < opts.steps * 4 + 16 {
        attempts += 1;
        if cancelled() {
            stopped = Some("cancelled".to_string());
            break;
        }
        let current = evaluate::plan(lang, &current_text, kernel_name, &env)?;
        let doc = Document::new(lang, 0, &current_text);
        let tree = doc.tree().ok_or("the parser gave up on the current text")?;
        let model = crate::syntax::analyze(lang, &current_text, tree);
        let kernel = model
            .kernel(kernel_name)
            .ok_or("the kernel disappeared from the current text")?;
        let mut facts = facts::static_facts(lang, &current_text, tree, &model, kernel);
        if let Some(d) = &hello.device {
            facts.set_device(d, d.ceilings.as_ref());
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
                    facts.set_resources(r, 0);
                }
            }
        }
        let excluded: BTreeSet<String> = tried
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

        // Propose.
        let mut budget = llm::Budget::new(opts.llm.as_ref().map_or(0, |l| l.calls_per_step));
        let cx = StepContext {
            hello: &hello,
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
        });
        if let Some(setup) = &opts.llm {
            if setup.strategist.is_some() && !strategist_down && proposal.is_none() {
                on(Event::Stage(format!("step {}: proposing", steps_done + 1)));
                match llm_propose(setup, &mut budget, &cx, &records, &arms, &excluded).await {
                    Ok(p) => proposal = Some(p),
                    Err(e) => {
                        // One warning; the embedded policy picks for the rest of the run.
                        strategist_down = true;
                        warnings.push(format!(
                            "the LLM strategist failed ({e}); the embedded policy chose instead for the rest of the run"
                        ))
                    }
                }
            }
        }
        let proposal = match proposal {
            Some(p) => p,
            None => match policy.choose(&facts, &arms, &excluded) {
                Some(c) => llm::Proposal {
                    id: c.id,
                    params: Default::default(),
                    rationale: c.rationale,
                    free_form: None,
                },
                None => {
                    stopped = Some(if arms.is_empty() {
                        "no catalog step applies to this kernel".to_string()
                    } else {
                        "every applicable step was tried on this kernel text".to_string()
                    });
                    break;
                }
            },
        };
        let strategy = opts.catalog.get(&proposal.id).cloned();
        let title = match (&strategy, &proposal.free_form) {
            (_, Some(d)) => d.clone(),
            (Some(s), None) => s.title.clone(),
            (None, None) => proposal.id.clone(),
        };
        on(Event::Stage(format!("step {}: {title}", steps_done + 1)));

        let mut record = StepRecord {
            step: steps_done + 1,
            strategy_id: proposal.id.clone(),
            strategy: title.clone(),
            rationale: proposal.rationale.clone(),
            coder: "embedded".into(),
            outcome: Outcome::Failed,
            candidates: Vec::new(),
            before_ms: last.as_ref().map(|t| t.median_ms),
            best_ms: None,
            speedup: 1.0,
            cumulative: 1.0,
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
                tree,
                model: &model,
                kernel,
                params: &params,
            };
            on(Event::Stage(format!("step {}: rewriting", steps_done + 1)));
            match rewrite::apply(&rw, &cx) {
                Ok(c) => batch_candidates = c.into_iter().map(|c| (c.label, c.text)).collect(),
                Err(e) => {
                    record.outcome = Outcome::NotApplicable;
                    record.candidates.push(CandidateRecord {
                        label: proposal.id.clone(),
                        verified: false,
                        median_ms: None,
                        message: Some(e.to_string()),
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
            });
        }

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
            match llm_code(
                setup,
                &mut budget,
                pool,
                &env,
                repair_reference.as_ref().unwrap_or(&current),
                repair_reference.is_none(),
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
                    opts.cancel.as_deref(),
                    &mut stage,
                )
                .await,
            )
        };
        // The coder could not be reached at all (endpoint, key, budget): not the step's
        // fault, so the policy learns nothing and the step is not marked as tried.
        let infra_failure = llm_failure.is_some();
        if let Some(message) = llm_failure {
            record.candidates.push(CandidateRecord {
                label: "llm".into(),
                verified: false,
                median_ms: None,
                message: Some(message),
            });
        }

        let mut accepted_text: Option<String> = None;
        if let Some(b) = result {
            record.interpreter = b.interpreter;
            record.candidates.extend(b.records);
            if opts.repair.is_some() {
                // A repair wins by passing verification against the last verified version.
                if let Some(v) = b.verified.first() {
                    record.outcome = Outcome::Accepted;
                    record.accepted = Some(v.label.clone());
                    record.kernel_after = Some(v.planned.kernel_text.clone());
                    accepted_text = Some(v.text.clone());
                }
            } else if let Some(base) = &b.base {
                start_ms.get_or_insert(base.median_ms);
                record.before_ms = Some(base.median_ms);
                let best = b
                    .timings
                    .iter()
                    .enumerate()
                    .min_by(|x, y| x.1.median_ms.total_cmp(&y.1.median_ms));
                if let Some((i, tm)) = best {
                    record.best_ms = Some(tm.median_ms);
                    let noise = 0.02f64.max(base.spread()).max(tm.spread());
                    let speedup = base.median_ms / tm.median_ms.max(1e-12);
                    // Each candidate is verified against the current version; after an
                    // accepted step, the winner is also checked against the run's starting
                    // version, so differences within tolerance cannot pile up across steps.
                    let drift = if speedup > 1.0 + noise && current_text != text {
                        let v = &b.verified[i];
                        let mut cand = v.planned.version.clone();
                        cand.label = v.label.clone();
                        let mut quiet = |_: &str| {};
                        evaluate::verify(pool, &start.version, &cand, opts.seed, &mut quiet)
                            .await
                            .err()
                            .map(|why| format!(
                                "matches the current version but drifted from the run's starting version beyond tolerance: {why}"
                            ))
                    } else {
                        None
                    };
                    // Before acceptance: a suspiciously large speedup is re-verified on
                    // extra seeds, and the winner runs once under compute-sanitizer.
                    let drift = match drift {
                        Some(d) => Some(d),
                        None if speedup > 1.0 + noise => {
                            let v = &b.verified[i];
                            let mut cand = v.planned.version.clone();
                            cand.label = v.label.clone();
                            record.suspicious =
                                evaluate::needs_reverify(speedup, opts.verify.suspicious_speedup);
                            let mut stage = |s: &str| on(Event::Stage(s.to_string()));
                            evaluate::confirm(
                                pool,
                                &current.version,
                                &cand,
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
                        });
                        last = Some(base.clone());
                    } else if speedup > 1.0 + noise {
                        let v = &b.verified[i];
                        record.outcome = Outcome::Accepted;
                        record.speedup = speedup;
                        record.accepted = Some(v.label.clone());
                        record.kernel_after = Some(v.planned.kernel_text.clone());
                        accepted_text = Some(v.text.clone());
                        last = Some(tm.clone());
                    } else {
                        record.outcome = Outcome::NoGain;
                        record.speedup = speedup;
                        last = Some(base.clone());
                    }
                }
            }
        }
        if let (Some(s), Some(c)) = (start_ms, last.as_ref()) {
            record.cumulative = s / c.median_ms.max(1e-12);
        }
        record.unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);

        // A step cut short by a cancel says nothing about the step: nothing is learned.
        let cut_short = cancelled() && record.outcome != Outcome::Accepted;
        if cut_short {
            record.cancelled = true;
            stopped = Some("cancelled".to_string());
            steps_done = opts.steps;
        } else if opts.repair.is_some() {
            // One repair step; the policy does not learn from repairs.
            steps_done = opts.steps;
        } else if record.outcome != Outcome::NotApplicable && !infra_failure {
            steps_done += 1;
            let measured = if record.outcome == Outcome::Failed {
                1.0
            } else {
                record.speedup
            };
            policy.update(
                &record.strategy_id,
                &facts,
                policy::reward(record.outcome, measured),
            );
            if let Some(p) = &opts.policy_path {
                if let Err(e) = policy.save(p) {
                    warnings.push(format!(
                        "the strategy policy could not be saved to {}: {e}",
                        p.display()
                    ));
                }
            }
        }
        if infra_failure {
            steps_done += 1;
        } else if record.outcome != Outcome::Accepted && !cut_short {
            tried.insert((record.strategy_id.clone(), current.kernel_hash.clone()));
        }
        if let Some(t) = accepted_text {
            current_text = t;
        }
        on(Event::Step(&record));
        records.push(record);
    }
    Ok(OptimizeRun {
        kernel: kernel_name.to_string(),
        steps: records,
        stopped,
        warnings,
        new_text: (current_text != text).then_some(current_text),
    })
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
    records: &[StepRecord],
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
        history: history_text(records),
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
    stage("asking the coder".into());
    let mut attempt = coder.rewrite(budget, &input).await;
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
                        None,
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
        verified: Vec::new(),
        base: None,
        timings: Vec::new(),
        interpreter: false,
        first_failure: None,
    })
}
