//! Evaluating one step's candidates as a batch: each candidate text is analyzed and
//! planned like the author's file would be, verified against the current version on
//! the same fresh inputs, and the verified ones are timed interleaved with the current
//! version in one worker. Nothing here decides acceptance; `optimize` does, from the
//! timings this returns.

use crate::analysis::{self, AnalyzeOptions};
use crate::document::Document;
use crate::spec::{BenchPlan, EvalEnv};
use crate::syntax::Lang;
use crate::worker::pool::WorkerPool;
use crate::worker::protocol::{Op, OpResult, TimeSettings, Timing, VerifyReport, Version};

use super::CandidateRecord;

/// The kernel of one file text, ready to run: its version and what identifies it.
#[derive(Clone, Debug)]
pub struct Planned {
    pub version: Version,
    /// Hash of the kernel's `@bench` lines and unit text: "the same kernel text".
    pub kernel_hash: String,
    /// The spec lines and the unit's source, as stored in the history.
    pub kernel_text: String,
}

/// Analyze `text` and plan `kernel_name`. `Err` is a message for the author.
pub fn plan(lang: Lang, text: &str, kernel_name: &str, env: &EvalEnv) -> Result<Planned, String> {
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
        return Err(if names.is_empty() {
            format!("no kernel `{kernel_name}`: the file has no kernels")
        } else {
            format!(
                "no kernel `{kernel_name}`; the file has: {}",
                names.join(", ")
            )
        });
    };
    let kernel = &file.model.kernels[idx];
    let Some(report) = file.specs.get(idx) else {
        return Err(format!(
            "`{kernel_name}` could not be analyzed (the file is too large or did not parse)"
        ));
    };
    let plan: BenchPlan = match report.plan.clone() {
        Some(p) => p,
        None if kernel.spec.lines.is_empty() => return Err(format!(
            "`{kernel_name}` has no @bench spec; add one (the editor's code action \"Insert @bench spec\" writes a skeleton) before optimizing"
        )),
        None => {
            let first = report
                .diagnostics
                .iter()
                .find(|d| d.severity == crate::spec::Severity::Error)
                .map(|d| d.message.clone())
                .unwrap_or_default();
            return Err(format!(
                "`{kernel_name}`'s @bench spec has errors ({first}); run `kernel-lsp check` and fix them first"
            ));
        }
    };
    let kernel_text = kernel_text(text, kernel);
    Ok(Planned {
        version: Version {
            torch: None,
            label: "current".into(),
            lang,
            source: file.kernel_source(kernel_name, text),
            plan,
            options: Vec::new(),
        },
        kernel_hash: super::history::hash(&kernel_text),
        kernel_text,
    })
}

/// The kernel's `@bench` lines (the whole block) and its unit ranges, in file order.
pub fn kernel_text(text: &str, kernel: &crate::syntax::Kernel) -> String {
    let mut ranges: Vec<std::ops::Range<usize>> = kernel.unit_ranges.clone();
    if ranges.is_empty() {
        ranges.push(kernel.def_range.clone());
    }
    if let Some(spec) = &kernel.spec.range {
        ranges.push(spec.clone());
    }
    ranges.sort_by_key(|r| r.start);
    let mut out = String::new();
    for r in ranges {
        if let Some(s) = text.get(r) {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(s);
        }
    }
    out
}

/// A candidate that verified, with its index in the input.
pub struct Verified {
    pub index: usize,
    pub label: String,
    /// The candidate's whole file text.
    pub text: String,
    pub planned: Planned,
}

/// What a batch gave: a record per candidate, the current version's timing and each
/// verified candidate's timing (same order as `verified`).
pub struct BatchResult {
    pub records: Vec<CandidateRecord>,
    pub verified: Vec<Verified>,
    pub base: Option<Timing>,
    pub timings: Vec<Timing>,
    pub interpreter: bool,
    /// The first verification report that failed, for a repair prompt.
    pub first_failure: Option<String>,
}

fn rejected(label: &str, message: String) -> CandidateRecord {
    CandidateRecord {
        label: label.to_string(),
        verified: false,
        median_ms: None,
        message: Some(message),
    }
}

/// Verify one planned candidate against `current`. `Err` is the reason it failed.
pub async fn verify(
    pool: &WorkerPool,
    current: &Version,
    cand: &Version,
    seed: u64,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<VerifyReport, String> {
    let op = Op::Verify {
        candidate: Box::new(cand.clone()),
        reference: Box::new(current.clone()),
        seed,
        sanitize: false,
    };
    match pool.request_with_progress(op, None, progress).await {
        Ok(OpResult::Verify(r)) if r.passed => Ok(r),
        Ok(OpResult::Verify(r)) => Err(r.failure.map_or_else(
            || {
                if r.nondeterministic {
                    "gave different results on the same inputs".to_string()
                } else {
                    "failed verification".to_string()
                }
            },
            |f| f.message,
        )),
        Ok(_) => Err("unexpected worker reply".into()),
        Err(e) => Err(e.message),
    }
}

/// The current version must pass its own check (compiled, run, every output written,
/// within its guards, deterministic within tolerance) before anything is verified
/// against it. It also leaves the reference's outputs in the worker's cache, so the
/// step's candidates reuse them.
pub async fn check_current(
    pool: &WorkerPool,
    current: &Version,
    seed: u64,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<(), String> {
    verify(pool, current, current, seed, progress)
        .await
        .map(|_| ())
        .map_err(|e| {
            format!(
                "the current version of `{}` does not pass its own check, so no candidate can be verified against it; fix it first: {e}",
                current.plan.kernel
            )
        })
}

/// A timed candidate against the version it came from, timed side by side.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gain {
    /// base median / candidate median.
    pub speedup: f64,
    /// The larger of 2% and either timing's spread ((p90 - p10) / median).
    pub noise: f64,
}

impl Gain {
    /// The acceptance rule: faster by more than the measured noise.
    pub fn faster(&self) -> bool {
        self.speedup > 1.0 + self.noise
    }
}

/// The acceptance rule's measurement, one pure function for every caller (the CLI's
/// optimize and tune, the editor's actions).
pub fn gain(base: &Timing, candidate: &Timing) -> Gain {
    Gain {
        speedup: base.median_ms / candidate.median_ms.max(1e-12),
        noise: 0.02f64.max(base.spread()).max(candidate.spread()),
    }
}

/// Whether a speedup is large enough to be re-verified before it is accepted (a
/// threshold of 0 or less turns the check off).
pub fn needs_reverify(speedup: f64, threshold: f64) -> bool {
    threshold > 0.0 && speedup > threshold
}

/// Extra seeds a suspicious winner is re-verified on, with two more trials per case.
const EXTRA_SEEDS: u64 = 2;

/// What a winner must pass beyond its verification before it is accepted
/// (docs/verification.md): a re-verification on extra seeds when its speedup is
/// suspicious, and one run under compute-sanitizer when `settings.sanitize` is on.
/// Each check's result and cost goes into `notes`. `Err` is why it is refused.
#[allow(clippy::too_many_arguments)]
pub async fn confirm(
    pool: &WorkerPool,
    current: &Version,
    cand: &Version,
    speedup: f64,
    settings: &crate::settings::VerifySettings,
    seed: u64,
    notes: &mut Vec<String>,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<(), String> {
    if needs_reverify(speedup, settings.suspicious_speedup) {
        let t0 = std::time::Instant::now();
        let (mut c, mut r) = (cand.clone(), current.clone());
        c.plan.trials = c.plan.trials.max(1) + 2;
        r.plan.trials = c.plan.trials;
        for k in 1..=EXTRA_SEEDS {
            progress(&format!(
                "{:.1}x is above {}x: re-verifying `{}` on extra seed {k}/{EXTRA_SEEDS}",
                speedup, settings.suspicious_speedup, cand.label
            ));
            let s = seed ^ (0x5eed_0000_0000 + k);
            if let Err(e) = verify(pool, &r, &c, s, progress).await {
                return Err(format!(
                    "anti-cheat (large speedup): {speedup:.1}x over the current version, so it was re-verified on extra seeds, and failed: {e}"
                ));
            }
        }
        notes.push(format!(
            "{speedup:.1}x is above {}x: re-verified on {EXTRA_SEEDS} extra seeds with {} trials per case ({:.1} s)",
            settings.suspicious_speedup,
            c.plan.trials,
            t0.elapsed().as_secs_f64()
        ));
    }
    if settings.sanitize && cand.lang == Lang::Cuda {
        let t0 = std::time::Instant::now();
        progress(&format!("running `{}` under compute-sanitizer", cand.label));
        let op = Op::Verify {
            candidate: Box::new(cand.clone()),
            reference: Box::new(current.clone()),
            seed,
            sanitize: true,
        };
        let secs = |t0: std::time::Instant| t0.elapsed().as_secs_f64();
        match pool.request_with_progress(op, None, progress).await {
            Ok(OpResult::Verify(r)) => {
                let summary = r.sanitizer.unwrap_or_default();
                if !r.passed {
                    let why = r
                        .failure
                        .map_or_else(|| "failed".to_string(), |f| f.message);
                    return Err(format!("{why}\n{summary}").trim().to_string());
                }
                if summary.contains("not found") {
                    notes.push(
                        "compute-sanitizer is not on the worker's machine; the exact-size memory check was skipped"
                            .into(),
                    );
                } else {
                    notes.push(format!(
                        "compute-sanitizer (memcheck, racecheck; exact-size buffers): no errors ({:.1} s)",
                        secs(t0)
                    ));
                }
            }
            Ok(_) => return Err("unexpected worker reply to a sanitize request".into()),
            Err(e) => return Err(format!("compute-sanitizer run: {}", e.message)),
        }
    }
    Ok(())
}

/// Plan and verify each `(label, text)` against `current`, then (with `time`) time the
/// verified ones side by side with it.
#[allow(clippy::too_many_arguments)]
pub async fn batch(
    pool: &WorkerPool,
    lang: Lang,
    kernel_name: &str,
    env: &EvalEnv,
    current: &Version,
    candidates: &[(String, String)],
    seed: u64,
    time: bool,
    cancel: Option<&std::sync::atomic::AtomicBool>,
    stage: &mut (dyn FnMut(String) + Send),
) -> BatchResult {
    let mut out = BatchResult {
        records: Vec::new(),
        verified: Vec::new(),
        base: None,
        timings: Vec::new(),
        interpreter: false,
        first_failure: None,
    };
    let n = candidates.len();
    for (i, (label, text)) in candidates.iter().enumerate() {
        if cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed)) {
            out.records
                .push(rejected(label, "not tried: the job was cancelled".into()));
            continue;
        }
        let planned = match plan(lang, text, kernel_name, env) {
            Ok(p) => p,
            Err(e) => {
                out.first_failure.get_or_insert(e.clone());
                out.records.push(rejected(label, e));
                continue;
            }
        };
        let head = format!("verifying {label} ({}/{n})", i + 1);
        stage(head.clone());
        let mut cand = planned.version.clone();
        cand.label = label.clone();
        let mut worker_stage = |s: &str| stage(format!("{head}: {s}"));
        match verify(pool, current, &cand, seed, &mut worker_stage).await {
            Ok(r) => {
                out.interpreter |= r.interpreter;
                out.verified.push(Verified {
                    index: i,
                    label: label.clone(),
                    text: text.clone(),
                    planned,
                });
            }
            Err(e) => {
                out.first_failure.get_or_insert(e.clone());
                out.records.push(rejected(label, e));
            }
        }
    }
    let cancelled = cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed));
    if out.verified.is_empty() || (cancelled && time) {
        for v in &out.verified {
            out.records.push(rejected(
                &candidates[v.index].0,
                "verified; not timed: the job was cancelled".into(),
            ));
        }
        out.verified.clear();
        return out;
    }
    if !time {
        for v in &out.verified {
            out.records.push(CandidateRecord {
                label: candidates[v.index].0.clone(),
                verified: true,
                median_ms: None,
                message: None,
            });
        }
        return out;
    }
    stage(format!("timing {} versions", out.verified.len() + 1));
    let mut versions = vec![current.clone()];
    for v in &out.verified {
        let mut version = v.planned.version.clone();
        version.label = candidates[v.index].0.clone();
        versions.push(version);
    }
    let want = versions.len();
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
        Ok(OpResult::Time(t)) if t.timings.len() == want => {
            out.interpreter |= t.interpreter;
            let mut it = t.timings.into_iter();
            out.base = it.next();
            out.timings = it.collect();
            for (v, tm) in out.verified.iter().zip(&out.timings) {
                out.records.push(CandidateRecord {
                    label: candidates[v.index].0.clone(),
                    verified: true,
                    median_ms: Some(tm.median_ms),
                    message: None,
                });
            }
        }
        other => {
            let message = match other {
                Err(e) => e.message,
                _ => "unexpected worker reply to a time request".into(),
            };
            for v in &out.verified {
                out.records.push(CandidateRecord {
                    label: candidates[v.index].0.clone(),
                    verified: true,
                    median_ms: None,
                    message: Some(format!("verified, but timing failed: {message}")),
                });
            }
            out.verified.clear();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(median: f64, p10: f64, p90: f64) -> Timing {
        Timing {
            label: "t".into(),
            median_ms: median,
            min_ms: p10,
            p10_ms: p10,
            p90_ms: p90,
            reps: 20,
            gbps: 0.0,
            frac_copy: None,
            tflops: None,
            frac_fma: None,
            energy_j: None,
        }
    }

    #[test]
    fn the_acceptance_rule_wants_more_than_the_noise() {
        let base = timing(1.0, 0.995, 1.005);
        // Tight timings: the 2% floor decides.
        let g = gain(&base, &timing(0.97, 0.965, 0.975));
        assert!((g.speedup - 1.0 / 0.97).abs() < 1e-12 && g.noise == 0.02);
        assert!(g.faster(), "3% faster with 2% noise");
        assert!(
            !gain(&base, &timing(0.985, 0.98, 0.99)).faster(),
            "1.5% is noise"
        );
        assert!(!gain(&base, &base).faster(), "the same time is no gain");
        // A wide spread on either side raises the bar.
        let noisy = timing(0.5, 0.3, 0.7);
        let g = gain(&base, &noisy);
        assert!((g.noise - 0.8).abs() < 1e-12);
        assert!(g.faster(), "2× beats 80% noise");
        let noisy_base = timing(1.0, 0.5, 1.5);
        assert!(
            !gain(&noisy_base, &timing(0.6, 0.59, 0.61)).faster(),
            "1.67× within 100% noise"
        );
        // A zero time does not divide by zero.
        assert!(gain(&base, &timing(0.0, 0.0, 0.0)).speedup.is_finite());
        // Slower is never faster.
        assert!(!gain(&base, &timing(1.5, 1.49, 1.51)).faster());
    }
}
