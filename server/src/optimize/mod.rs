//! The optimization step loop, shared by `kernel-lsp optimize` and (later) the editor's
//! code action. This first slice implements one embedded step, the tunable sweep: for a
//! `tune NAME in [...]` line, every listed value is planned (`spec::analyze_with`),
//! verified against the current version, and the verified ones are timed interleaved
//! with it in one worker; the best is accepted only if it is faster by more than the
//! measured noise. Steps sweep the kernel's tunables in spec order, each starting from
//! the values accepted so far. Knows nothing about LSP; talks to GPUs only through a
//! `WorkerPool`. The strategy catalog, static facts, the bandit policy, code rewrites and
//! the LLM coder (issue #4) come next.

pub mod catalog;
pub mod edit;
pub mod facts;
pub mod history;
pub mod llm;
pub mod policy;
pub mod rewrite;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::analysis::{self, AnalyzeOptions};
use crate::document::Document;
use crate::spec::{self, BenchPlan, EvalEnv, Value};
use crate::syntax::Lang;
use crate::worker::pool::WorkerPool;
use crate::worker::protocol::{Op, OpResult, TimeSettings, Timing, Version};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A verified candidate was faster by more than the noise; it is the new current.
    Accepted,
    /// Candidates verified but none was faster by more than the noise.
    NoGain,
    /// No candidate passed verification (or none could be planned or timed).
    Failed,
}

/// One candidate of a step.
#[derive(Clone, Debug, Serialize)]
pub struct CandidateRecord {
    pub label: String,
    pub verified: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub median_ms: Option<f64>,
    /// Why it was rejected (spec error, verification failure, worker error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One step, as printed and as appended to the kernel's history.
#[derive(Clone, Debug, Serialize)]
pub struct StepRecord {
    pub step: usize,
    /// The catalog step that was tried, e.g. `tune BLOCK`.
    pub strategy: String,
    pub rationale: String,
    pub outcome: Outcome,
    pub candidates: Vec<CandidateRecord>,
    /// Median of the current version before the step, and of the best candidate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_ms: Option<f64>,
    /// before / best of this step; 1.0 when nothing was accepted.
    pub speedup: f64,
    /// Speedup of the current version after this step over the starting version.
    pub cumulative: f64,
    /// The accepted values so far (`NAME = V`).
    pub values: BTreeMap<String, String>,
    pub seed: u64,
    /// Hash of the kernel's file text the step started from.
    pub source_hash: String,
    /// Timings came from Triton's CPU interpreter.
    pub interpreter: bool,
}

/// A finished run: the steps, and the file text with the accepted values written into
/// the kernel's spec (None when nothing was accepted).
#[derive(Debug, Serialize)]
pub struct OptimizeRun {
    pub kernel: String,
    pub steps: Vec<StepRecord>,
    pub values: BTreeMap<String, String>,
    #[serde(skip)]
    pub new_text: Option<String>,
}

/// Run up to `steps` steps on `kernel` of a file. Errors are for the author as is.
pub async fn optimize(
    pool: &WorkerPool,
    lang: Lang,
    text: &str,
    kernel_name: &str,
    steps: usize,
    seed: u64,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<OptimizeRun, String> {
    let hello = pool.connect().await.map_err(|e| e.message)?;
    let env = EvalEnv {
        sms: hello
            .device
            .as_ref()
            .map_or(EvalEnv::default().sms, |d| u64::from(d.sms)),
    };
    let doc = Document::new(lang, 0, text);
    let opts = AnalyzeOptions {
        env: env.clone(),
        ..AnalyzeOptions::default()
    };
    let file = analysis::analyze(lang, text, doc.tree(), &opts);
    let Some(idx) = file
        .model
        .kernels
        .iter()
        .position(|k| k.name == kernel_name)
    else {
        let names: Vec<&str> = file.model.kernels.iter().map(|k| k.name.as_str()).collect();
        return Err(format!(
            "no kernel `{kernel_name}`; the file has: {}",
            names.join(", ")
        ));
    };
    let kernel = &file.model.kernels[idx];
    let Some(plan) = file.specs[idx].plan.clone() else {
        return Err(if kernel.spec.lines.is_empty() {
            format!("`{kernel_name}` has no @bench spec; add one (the editor's code action \"Insert @bench spec\" writes a skeleton) before optimizing")
        } else {
            format!("`{kernel_name}`'s @bench spec has errors; run `kernel-lsp check` and fix them first")
        });
    };
    let source = file.kernel_source(kernel_name, text);
    let version = |label: &str, plan: BenchPlan| Version {
        label: label.into(),
        lang,
        source: source.clone(),
        plan,
        options: Vec::new(),
    };
    let source_hash = history::hash(text);

    let sweeps: Vec<_> = plan
        .tunables
        .iter()
        .filter(|t| t.values.len() > 1)
        .cloned()
        .collect();
    let mut overrides: BTreeMap<String, Value> = BTreeMap::new();
    let mut current = version("current", plan);
    let mut start_ms: Option<f64> = None;
    let mut current_ms: Option<f64> = None;
    let mut records = Vec::new();

    for (step, tunable) in sweeps.iter().enumerate().take(steps) {
        progress(&format!("step {}: tune {}", step + 1, tunable.name));
        let mut candidates = Vec::new();
        let mut planned = Vec::new();
        for v in tunable
            .values
            .iter()
            .filter(|v| **v != current_value(&current.plan, &tunable.name, &tunable.current))
        {
            let label = format!("{}={v}", tunable.name);
            let mut o = overrides.clone();
            o.insert(tunable.name.clone(), *v);
            let report = spec::analyze_with(kernel, &file.model.kernels, &env, &o);
            match report.plan {
                Some(p) => planned.push((label, o, version(&format!("{}={v}", tunable.name), p))),
                None => candidates.push(CandidateRecord {
                    label,
                    verified: false,
                    median_ms: None,
                    message: Some(
                        report
                            .diagnostics
                            .first()
                            .map_or("the spec does not plan with this value".into(), |d| {
                                d.message.clone()
                            }),
                    ),
                }),
            }
        }
        // Verify each against the current version on the same fresh inputs.
        let mut verified = Vec::new();
        for (label, o, cand) in planned {
            progress(&format!("verifying {label}"));
            let op = Op::Verify {
                candidate: Box::new(cand.clone()),
                reference: Box::new(current.clone()),
                seed,
                sanitize: false,
            };
            match pool.request(op, None).await {
                Ok(OpResult::Verify(r)) if r.passed => verified.push((label, o, cand)),
                Ok(OpResult::Verify(r)) => candidates.push(CandidateRecord {
                    label,
                    verified: false,
                    median_ms: None,
                    message: Some(
                        r.failure
                            .map_or("failed verification".into(), |f| f.message),
                    ),
                }),
                Ok(_) => candidates.push(CandidateRecord {
                    label,
                    verified: false,
                    median_ms: None,
                    message: Some("unexpected worker reply".into()),
                }),
                Err(e) => candidates.push(CandidateRecord {
                    label,
                    verified: false,
                    median_ms: None,
                    message: Some(e.message),
                }),
            }
        }
        let mut record = StepRecord {
            step: step + 1,
            strategy: format!("tune {}", tunable.name),
            rationale: format!(
                "sweep the listed values of `{}` ({} candidates)",
                tunable.name,
                tunable.values.len() - 1
            ),
            outcome: Outcome::Failed,
            candidates: Vec::new(),
            before_ms: current_ms,
            best_ms: None,
            speedup: 1.0,
            cumulative: 1.0,
            values: BTreeMap::new(),
            seed,
            source_hash: source_hash.clone(),
            interpreter: false,
        };
        if !verified.is_empty() {
            progress(&format!("timing {} versions", verified.len() + 1));
            let mut versions = vec![current.clone()];
            versions.extend(verified.iter().map(|(_, _, v)| v.clone()));
            match pool
                .request(
                    Op::Time {
                        versions,
                        settings: TimeSettings::default(),
                    },
                    None,
                )
                .await
            {
                Ok(OpResult::Time(t)) if t.timings.len() == verified.len() + 1 => {
                    record.interpreter = t.interpreter;
                    let base = &t.timings[0];
                    start_ms.get_or_insert(base.median_ms);
                    record.before_ms = Some(base.median_ms);
                    let mut best: Option<(usize, &Timing)> = None;
                    for (i, tm) in t.timings[1..].iter().enumerate() {
                        candidates.push(CandidateRecord {
                            label: verified[i].0.clone(),
                            verified: true,
                            median_ms: Some(tm.median_ms),
                            message: None,
                        });
                        if best.is_none_or(|(_, b)| tm.median_ms < b.median_ms) {
                            best = Some((i, tm));
                        }
                    }
                    if let Some((i, tm)) = best {
                        record.best_ms = Some(tm.median_ms);
                        let noise = 0.02f64.max(base.spread()).max(tm.spread());
                        let speedup = base.median_ms / tm.median_ms.max(1e-12);
                        if speedup > 1.0 + noise {
                            record.outcome = Outcome::Accepted;
                            record.speedup = speedup;
                            overrides = verified[i].1.clone();
                            current = verified[i].2.clone();
                            current.label = "current".into();
                            current_ms = Some(tm.median_ms);
                        } else {
                            record.outcome = Outcome::NoGain;
                            current_ms = Some(base.median_ms);
                        }
                    }
                }
                Ok(_) => candidates.push(CandidateRecord {
                    label: "time".into(),
                    verified: true,
                    median_ms: None,
                    message: Some("unexpected worker reply".into()),
                }),
                Err(e) => candidates.push(CandidateRecord {
                    label: "time".into(),
                    verified: true,
                    median_ms: None,
                    message: Some(e.message),
                }),
            }
        }
        record.candidates = candidates;
        record.values = overrides
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect();
        if let (Some(s), Some(c)) = (start_ms, current_ms) {
            record.cumulative = s / c.max(1e-12);
        }
        records.push(record);
    }

    let values: BTreeMap<String, String> = overrides
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect();
    let new_text = if values.is_empty() {
        None
    } else {
        let mut t = text.to_string();
        for (name, v) in &values {
            // Re-analyze after each edit: spec line offsets move.
            let d = Document::new(lang, 0, &t);
            let m = crate::syntax::analyze(lang, &t, d.tree().ok_or("the parser gave up")?);
            let k = m
                .kernel(kernel_name)
                .ok_or("the kernel disappeared while editing")?;
            t = edit::set_spec_value(&t, k, name, v);
        }
        Some(t)
    };
    Ok(OptimizeRun {
        kernel: kernel_name.to_string(),
        steps: records,
        values,
        new_text,
    })
}

/// The value a tunable has in `plan`: the case-0 constexpr/template argument or define of
/// that name, else `fallback` (the tunable's own current value).
fn current_value(plan: &BenchPlan, name: &str, fallback: &Value) -> Value {
    plan.tunables
        .iter()
        .find(|t| t.name == name)
        .map_or(*fallback, |t| t.current)
}
