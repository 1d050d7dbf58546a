//! Evaluating one step's candidates as a batch: each candidate, planned like the
//! author's file would be, is verified against the current version on
//! the same fresh inputs (concurrently, one per free worker of the pool; a request whose
//! worker is lost goes back to the queue), and the verified ones are timed interleaved
//! with the current version: in one worker, or in one group per worker, each beside the
//! current version on its own device, since a speedup means something only within one
//! device. The winner of a multi-worker batch is re-timed on the primary worker
//! (`retime_on_primary`). Nothing here decides acceptance; `accept` does, from the
//! timings this returns. Candidates come planned ([`Candidate`]): each file text is
//! analyzed once, when it is written.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use crate::analysis::{self, AnalyzeOptions};
use crate::document::Document;
use crate::spec::{BenchPlan, EvalEnv};
use crate::syntax::Lang;
use crate::worker::pool::{Served, WorkerPool, WorkerState};
use crate::worker::protocol::{
    ErrorKind, Op, OpResult, TimeSettings, Timing, VerifyReport, Version,
};

pub use super::accept::{gain, pick, Gain};
use super::judge::Rule;
use super::record::CandidateRecord;

/// The kernel of one file text, ready to run: its version and what identifies it.
#[derive(Clone, Debug)]
pub struct Planned {
    pub version: Version,
    /// Hash of the kernel's `@bench` lines and unit text: "the same kernel text".
    pub kernel_hash: String,
    /// The spec lines and the unit's source, as stored in the history.
    pub kernel_text: String,
}

/// One candidate of a step, as the writer (an embedded rewrite or the coder) hands it
/// to evaluation: its whole file text under a label, planned once when it was written
/// (`Err`: why its spec does not plan; it is rejected without reaching a worker).
#[derive(Clone, Debug)]
pub struct Candidate {
    /// A short label for tables ("BLOCK=512", "llm repair 1").
    pub label: String,
    /// The whole new file text.
    pub text: String,
    /// Its version (source, launch and spec) and kernel hash.
    pub planned: Result<Planned, String>,
}

impl Candidate {
    /// `text` under `label`, planned for `kernel_name` like the author's file would be.
    pub fn new(lang: Lang, kernel_name: &str, env: &EvalEnv, label: String, text: String) -> Self {
        let planned = plan(lang, &text, kernel_name, env);
        Candidate {
            label,
            text,
            planned,
        }
    }

    /// The knobs this candidate's spec sets: each tunable and its value for a plain run.
    pub fn knobs(&self) -> Vec<(&str, String)> {
        self.planned.as_ref().map_or_else(
            |_| Vec::new(),
            |p| {
                p.version
                    .plan
                    .tunables
                    .iter()
                    .map(|t| (t.name.as_str(), t.current.to_string()))
                    .collect()
            },
        )
    }
}

/// Analyze `text` and plan `kernel_name`. `Err` is a message for the author.
pub fn plan(lang: Lang, text: &str, kernel_name: &str, env: &EvalEnv) -> Result<Planned, String> {
    let doc = Document::new(lang, 0, text);
    let opts = AnalyzeOptions {
        env: env.clone(),
        ..AnalyzeOptions::default()
    };
    let file = analysis::analyze(lang, text, doc.tree(), &opts);
    plan_in(&file, text, kernel_name)
}

/// [`plan`] over a file already analyzed (`file` is `text`'s analysis).
pub fn plan_in(
    file: &analysis::FileAnalysis,
    text: &str,
    kernel_name: &str,
) -> Result<Planned, String> {
    let lang = file.model.lang;
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
            cuda: None,
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
    /// Verified against PyTorch: its elements outside the tolerance (empty otherwise).
    pub tally: Vec<crate::worker::protocol::Tally>,
}

impl Verified {
    /// The version to run, under the candidate's label.
    pub fn version(&self) -> Version {
        labelled(&self.planned, &self.label)
    }
}

/// `planned`'s version under `label`.
fn labelled(planned: &Planned, label: &str) -> Version {
    let mut v = planned.version.clone();
    v.label = label.to_string();
    v
}

/// What a batch gave: a record per candidate and, for each verified candidate (same
/// order as `verified`), its timing, the current version's timing beside it on the same
/// worker, and that worker.
#[derive(Default)]
pub struct BatchResult {
    pub records: Vec<CandidateRecord>,
    pub verified: Vec<Verified>,
    /// The current version's timing on the primary worker's group (or the first group).
    pub base: Option<Timing>,
    pub timings: Vec<Timing>,
    /// The current version timed in the same request as each verified candidate.
    pub bases: Vec<Timing>,
    /// The worker that timed each verified candidate.
    pub timed_on: Vec<Option<usize>>,
    pub interpreter: bool,
    /// The first verification report that failed, for a repair prompt.
    pub first_failure: Option<String>,
}

impl BatchResult {
    /// The verified candidate with the best speedup over the current version timed
    /// beside it, and that gain, by [`pick`]'s rule.
    pub fn best(&self) -> Option<(usize, Gain)> {
        pick(&self.gains())
    }

    /// Each timing worker's best candidate by [`pick`]'s rule among those it timed, in
    /// the step's order.
    pub fn best_per_worker(&self) -> Vec<(usize, Gain)> {
        super::accept::best_per_worker(&self.gains(), &self.timed_on)
    }

    fn gains(&self) -> Vec<(usize, Gain)> {
        self.timings
            .iter()
            .zip(&self.bases)
            .map(|(t, b)| gain(b, t))
            .enumerate()
            .collect()
    }
}

fn rejected(label: &str, message: String) -> CandidateRecord {
    CandidateRecord {
        label: label.to_string(),
        verified: false,
        median_ms: None,
        message: Some(message),
        ..Default::default()
    }
}

/// Runs `op` on a free worker; when the worker is lost mid-request and the pool has
/// others, the request goes to the queue again (at most once per other worker), so a
/// preempted node or a crashed GPU does not fail the candidate.
pub async fn request_requeued(
    pool: &WorkerPool,
    op: Op,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Served {
    let mut tries = 0;
    loop {
        let served = pool.request_on(None, op.clone(), None, progress).await;
        let lost = matches!(&served.result, Err(e) if e.kind == ErrorKind::WorkerLost);
        if !lost || served.worker.is_none() || tries + 1 >= pool.size() {
            return served;
        }
        tries += 1;
        progress(&requeued(pool, &served, "the request"));
    }
}

/// Logs that the worker of `served` was lost and what goes back to the queue; returns
/// the progress line for the user.
fn requeued(pool: &WorkerPool, served: &Served, what: &str) -> String {
    let who = served
        .worker
        .map_or_else(String::new, |w| pool.describe_worker(w));
    let why = served
        .result
        .as_ref()
        .err()
        .map_or("", |e| e.message.as_str());
    tracing::warn!("{who} was lost; {what} goes back to the queue: {why}");
    format!("{who} was lost; re-queued on the others")
}

/// Runs `op` on worker `target` when there is one; when that worker is lost or cannot
/// start, on any other ([`request_requeued`]).
pub async fn request_preferring(pool: &WorkerPool, target: Option<usize>, op: Op) -> Served {
    if target.is_some() {
        let served = pool.request_on(target, op.clone(), None, &mut |_| {}).await;
        // Lost, or backing off after a failed start: the pool says WorkerLost.
        let unusable = matches!(&served.result, Err(e) if e.kind == ErrorKind::WorkerLost);
        if !unusable || pool.size() == 1 {
            return served;
        }
    }
    request_requeued(pool, op, &mut |_| {}).await
}

/// Verify one planned candidate against `current`. `Err` is the reason it failed.
pub async fn verify(
    pool: &WorkerPool,
    current: &Version,
    cand: &Version,
    seed: u64,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<VerifyReport, String> {
    verify_on(pool, current, cand, seed, progress).await.1
}

/// [`verify`], saying which worker gave the answer.
pub async fn verify_on(
    pool: &WorkerPool,
    current: &Version,
    cand: &Version,
    seed: u64,
    progress: &mut (dyn FnMut(&str) + Send),
) -> (Option<usize>, Result<VerifyReport, String>) {
    let served = request_requeued(pool, Op::verify(cand, current, seed, false), progress).await;
    (served.worker, super::judge::verdict(served.result))
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
    judge: &super::judge::Judge,
    current: &Version,
    cand: &Version,
    speedup: f64,
    settings: &crate::settings::VerifySettings,
    seed: u64,
    notes: &mut Vec<String>,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<(), String> {
    // The checks are independent: with several workers they run at once, each on a free
    // worker, and their notes come out in a fixed order (seeds, then the sanitizer).
    let progress = std::sync::Mutex::new(progress);
    let say = |s: &str| {
        if let Ok(mut p) = progress.lock() {
            (*p)(s);
        }
    };
    let reverify = async {
        if !needs_reverify(speedup, settings.suspicious_speedup) {
            return Ok(None);
        }
        let t0 = std::time::Instant::now();
        let (mut c, mut r) = (cand.clone(), current.clone());
        c.plan.trials = c.plan.trials.max(1) + 2;
        r.plan.trials = c.plan.trials;
        let (c, r) = (&c, &r);
        let seeds = (1..=EXTRA_SEEDS).map(|k| async move {
            say(&format!(
                "{:.1}x is above {}x: re-verifying `{}` on extra seed {k}/{EXTRA_SEEDS}",
                speedup, settings.suspicious_speedup, cand.label
            ));
            let s = seed ^ (0x5eed_0000_0000 + k);
            let mut quiet = |m: &str| say(m);
            judge.verify_on(pool, r, c, s, &mut quiet).await.1
        });
        for result in futures::future::join_all(seeds).await {
            if let Err(e) = result {
                return Err(format!(
                    "anti-cheat (large speedup): {speedup:.1}x over the current version, so it was re-verified on extra seeds, and failed: {e}"
                ));
            }
        }
        Ok(Some(format!(
            "{speedup:.1}x is above {}x: re-verified on {EXTRA_SEEDS} extra seeds with {} trials per case ({:.1} s)",
            settings.suspicious_speedup,
            c.plan.trials,
            t0.elapsed().as_secs_f64()
        )))
    };
    let sanitize = async {
        if !(settings.sanitize && cand.lang == Lang::Cuda) {
            return Ok(None);
        }
        let t0 = std::time::Instant::now();
        say(&format!("running `{}` under compute-sanitizer", cand.label));
        let op = judge.sanitize_op(cand, current, seed);
        let secs = |t0: std::time::Instant| t0.elapsed().as_secs_f64();
        let mut quiet = |m: &str| say(m);
        match pool.request_with_progress(op, None, &mut quiet).await {
            Ok(OpResult::Verify(r)) => {
                let summary = r.sanitizer.unwrap_or_default();
                if !r.passed {
                    let why = r
                        .failure
                        .map_or_else(|| "failed".to_string(), |f| f.message);
                    return Err(format!("{why}\n{summary}").trim().to_string());
                }
                if summary.contains("not found") {
                    Ok(Some(
                        "compute-sanitizer is not on the worker's machine; the exact-size memory check was skipped"
                            .to_string(),
                    ))
                } else {
                    Ok(Some(format!(
                        "compute-sanitizer (memcheck, racecheck; exact-size buffers): no errors ({:.1} s)",
                        secs(t0)
                    )))
                }
            }
            Ok(_) => Err("unexpected worker reply to a sanitize request".into()),
            Err(e) => Err(format!("compute-sanitizer run: {}", e.message)),
        }
    };
    let (reverified, sanitized) = tokio::join!(reverify, sanitize);
    notes.extend(reverified?);
    notes.extend(sanitized?);
    Ok(())
}

/// Candidates re-timed side by side beside the current version on the primary worker
/// (worker 1), so speedups measured on other devices are compared on one device before
/// one is accepted. `Ok((base, one timing per candidate))`; `Err` when the primary
/// could not time them.
pub async fn retime_on_primary(
    pool: &WorkerPool,
    current: &Version,
    candidates: &[Version],
) -> Result<(Timing, Vec<Timing>), String> {
    let (op, want) = time_beside(current, candidates.iter().cloned());
    let served = pool.request_on(Some(0), op, None, &mut |_| {}).await;
    let mut it = time_report(served.result, want)?.timings.into_iter();
    let base = it
        .next()
        .expect("a full report has the current version's timing");
    Ok((base, it.collect()))
}

/// One `time` request for `current` and `others` side by side (default settings), and
/// how many timings its answer must hold.
fn time_beside(current: &Version, others: impl Iterator<Item = Version>) -> (Op, usize) {
    let mut versions = vec![current.clone()];
    versions.extend(others);
    let want = versions.len();
    let op = Op::Time {
        versions,
        settings: TimeSettings::default(),
    };
    (op, want)
}

/// A `time` answer with all `want` timings, or why there is none.
fn time_report(
    result: Result<OpResult, crate::worker::protocol::WorkerError>,
    want: usize,
) -> Result<crate::worker::protocol::TimeReport, String> {
    match result {
        Ok(OpResult::Time(t)) if t.timings.len() == want => Ok(t),
        Ok(OpResult::Time(_)) => Err("the worker's timing came back short".into()),
        Ok(_) => Err("unexpected worker reply to a time request".into()),
        Err(e) => Err(e.message),
    }
}

/// What one candidate's verification gave, in input order.
enum Checked {
    Rejected(String),
    Passed {
        worker: Option<usize>,
        interpreter: bool,
        /// Against PyTorch: its elements outside the tolerance.
        tally: Vec<crate::worker::protocol::Tally>,
    },
}

/// A verified candidate's timing: (the current version's timing beside it, its own, the
/// worker that timed them), or why it has none.
type TimedSlot = Result<(Timing, Timing, Option<usize>), String>;

/// A timing request's answer: the worker that timed, and the timings (the current
/// version's first) or why there are none.
type Timed = (
    Option<usize>,
    Result<crate::worker::protocol::TimeReport, String>,
);

/// One worker's share of a batch: the candidates it verified (indices into the input)
/// and, when they were timed, that timing.
struct Share {
    verified: Vec<usize>,
    timed: Option<Timed>,
}

/// What verifying the next candidate gave.
enum Took {
    /// The candidate is settled (passed or rejected).
    Finished(usize),
    /// The worker was lost; the candidate went back to the queue.
    Lost,
}

/// Whether the primary worker times candidates now.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Verifying,
    Timing,
    /// Done, or it cannot be had: every worker times its own.
    Gone,
}

/// Who times which verified candidate of a batch.
struct Timers {
    /// Verified candidates not yet timed: (candidate, the worker that verified it, or 0
    /// once left to the primary; whether it already counts in `primary_load`).
    pending: Vec<(usize, usize, bool)>,
    /// Each worker: still verifying.
    verifying: Vec<bool>,
    primary: Phase,
    /// Candidates the primary timed or was left this batch.
    primary_load: usize,
    /// Candidates in the primary's timing request now.
    in_flight: usize,
    /// Candidates that passed verification so far.
    passed: usize,
    workers: usize,
}

impl Timers {
    /// The most candidates the primary takes from others while they still verify, with
    /// its own: a worker's share of those verified, so it does not time most of them
    /// alone while the others, soon done, would wait.
    fn cap(&self) -> usize {
        self.passed.div_ceil(self.workers.max(1))
    }

    /// Whether a worker done verifying, with `own` candidates to time, leaves them to
    /// the primary (which then needs no re-timing) rather than timing them beside the
    /// current version on its own device and having its best re-timed on the primary
    /// (about three versions more there): when the primary verifies nothing more and
    /// either they are few or the primary has little left to time.
    fn leaves(&self, own: usize) -> bool {
        let backlog = self.in_flight + self.pending.iter().filter(|e| e.1 == 0).count();
        self.primary == Phase::Timing && (own <= 2 || backlog <= 3)
    }

    /// What the primary times next: its own pending candidates, those left to it and,
    /// up to [`Timers::cap`], those of workers that share its compile cache
    /// (`shares`), all marked as in its request now.
    fn claim_for_primary(&mut self, shares: impl Fn(usize) -> bool) -> Vec<usize> {
        let cap = self.cap();
        let own = self.pending.iter().filter(|e| e.1 == 0 && !e.2).count();
        let mut load = self.primary_load + own;
        let claim = self.take(|e| {
            if e.1 == 0 {
                return true;
            }
            let take = shares(e.1) && load < cap;
            load += usize::from(take);
            take
        });
        self.primary_load = load;
        self.in_flight = claim.len();
        claim
    }

    /// Removes and returns (in the step's order) the pending candidates `pick` takes.
    fn take(&mut self, mut pick: impl FnMut(&(usize, usize, bool)) -> bool) -> Vec<usize> {
        self.pending.sort_by_key(|e| e.0);
        let mut taken = Vec::new();
        self.pending.retain(|e| {
            if pick(e) {
                taken.push(e.0);
                false
            } else {
                true
            }
        });
        taken
    }
}

/// Whether worker `w` keeps Triton's compiled kernels where the primary does, for the
/// same architecture (Triton's cache key has it), so the primary loads `w`'s candidates
/// without compiling them.
fn shares_compile_cache(pool: &WorkerPool, w: usize) -> bool {
    if w == 0 {
        return true;
    }
    let (Some(a), Some(b)) = (pool.hello_of(0), pool.hello_of(w)) else {
        return false;
    };
    a.compile_cache.is_some()
        && a.compile_cache == b.compile_cache
        && a.device.as_ref().map(|d| &d.arch) == b.device.as_ref().map(|d| &d.arch)
}

/// Time `members` (indices into the input, all planned) beside `current` in one request
/// on `target` (another worker if it is lost).
async fn time_members(
    pool: &WorkerPool,
    current: &Version,
    members: &[usize],
    planned: &[Option<Planned>],
    candidates: &[(String, String)],
    target: Option<usize>,
) -> Timed {
    let (op, want) = time_beside(
        current,
        members
            .iter()
            .filter_map(|&i| planned[i].as_ref().map(|p| labelled(p, &candidates[i].0))),
    );
    let served = request_preferring(pool, target, op).await;
    (served.worker, time_report(served.result, want))
}

/// Verify each candidate (planned when it was written) against `current`, then (with
/// `time`) time the verified ones side by side with it. Each worker of the pool takes
/// the next candidate from one queue (in input order) and verifies it. Once the queue is
/// empty a worker times the candidates it verified (their kernels are loaded there) in
/// one request beside the current version on its own device, while the others still
/// verify; the primary also times, up to a worker's share, candidates of workers that
/// share its Triton cache and still verify, and a worker done verifying leaves its
/// candidates to the primary when that is quicker than timing them itself and re-timing
/// its best on the primary. One worker verifies them one after another and times them
/// together, as before. A candidate whose worker is lost goes back to the queue (at most
/// once per other worker). The records come out in the order a one-worker run gives.
/// Any flag of `cancel` that is set stops it (a job's cancel, a failed check of the
/// current version).
#[allow(clippy::too_many_arguments)]
pub async fn batch(
    pool: &WorkerPool,
    rule: &Rule,
    current: &Version,
    candidates: Vec<Candidate>,
    seed: u64,
    time: bool,
    cancel: &[&std::sync::atomic::AtomicBool],
    stage: &mut (dyn FnMut(String) + Send),
) -> BatchResult {
    let n = candidates.len();
    let checked: Vec<Mutex<Option<Checked>>> = (0..n).map(|_| Mutex::new(None)).collect();
    // Planned when they were written; those that do not plan are settled now.
    let mut planned: Vec<Option<Planned>> = Vec::with_capacity(n);
    let mut named: Vec<(String, String)> = Vec::with_capacity(n);
    for (i, c) in candidates.into_iter().enumerate() {
        match c.planned {
            Ok(p) => planned.push(Some(p)),
            Err(e) => {
                if let Ok(mut slot) = checked[i].lock() {
                    *slot = Some(Checked::Rejected(e));
                }
                planned.push(None);
            }
        }
        named.push((c.label, c.text));
    }
    // Whole candidates, even on a pool: splitting one candidate's cases over two
    // workers made each half cost about the whole (the JIT's per-source work paid
    // twice; docs/benchmarks.md, 2026-11-26).
    let queue: VecDeque<usize> = (0..n).filter(|&i| planned[i].is_some()).collect();
    let (moved_tx, moved_rx) = tokio::sync::watch::channel(0u64);
    let run = BatchRun {
        pool,
        rule,
        current,
        candidates: &named,
        planned: &planned,
        seed,
        time,
        cancel,
        parallel: pool.size() > 1,
        stage: Mutex::new(stage),
        done: AtomicUsize::new(0),
        tries: (0..n).map(|_| AtomicUsize::new(0)).collect(),
        checked,
        queue: Mutex::new(queue),
        moved_tx,
        moved_rx,
        timers: Mutex::new(Timers {
            pending: Vec::new(),
            verifying: vec![true; pool.size()],
            primary: Phase::Verifying,
            primary_load: 0,
            in_flight: 0,
            passed: 0,
            workers: pool.size(),
        }),
    };
    let mut shares: Vec<Share> = futures::future::join_all((0..pool.size()).map(|w| run.share(w)))
        .await
        .into_iter()
        .flatten()
        .collect();
    shares.extend(run.late().await);
    let mut out = BatchResult::default();
    let slots = timed_slots(shares, n, &mut out);
    let cancelled = run.is_cancelled();
    let checked = run.checked;
    assemble(
        pool, named, checked, planned, slots, time, cancelled, &mut out,
    );
    out
}

/// The state of one batch that its workers share while they verify and time.
struct BatchRun<'a, 's> {
    pool: &'a WorkerPool,
    /// Against the current version, or no less accurate against PyTorch.
    rule: &'a Rule,
    current: &'a Version,
    /// Each candidate's label and text, and its plan (None: it did not plan).
    candidates: &'a [(String, String)],
    planned: &'a [Option<Planned>],
    seed: u64,
    time: bool,
    cancel: &'a [&'a std::sync::atomic::AtomicBool],
    parallel: bool,
    stage: Mutex<&'s mut (dyn FnMut(String) + Send)>,
    /// Candidates settled so far, for the progress.
    done: AtomicUsize,
    /// How often each candidate's worker was lost.
    tries: Vec<AtomicUsize>,
    /// Each candidate's verdict, once it has one.
    checked: Vec<Mutex<Option<Checked>>>,
    /// The candidates not taken yet, in input order.
    queue: Mutex<VecDeque<usize>>,
    /// Bumped when a candidate is settled or becomes someone's to time, or goes back to
    /// the queue: what the primary, waiting to time, waits for.
    moved_tx: tokio::sync::watch::Sender<u64>,
    moved_rx: tokio::sync::watch::Receiver<u64>,
    timers: Mutex<Timers>,
}

impl BatchRun<'_, '_> {
    fn is_cancelled(&self) -> bool {
        self.cancel.iter().any(|c| c.load(Relaxed))
    }

    fn say(&self, s: String) {
        if let Ok(mut st) = self.stage.lock() {
            (*st)(s);
        }
    }

    fn settle(&self, i: usize, c: Checked) {
        if let Ok(mut slot) = self.checked[i].lock() {
            *slot = Some(c);
        }
    }

    fn moved(&self) {
        self.moved_tx.send_modify(|m| *m += 1);
    }

    fn passed(&self, i: usize) -> bool {
        self.checked[i]
            .lock()
            .is_ok_and(|c| matches!(&*c, Some(Checked::Passed { .. })))
    }

    fn head(&self, i: usize) -> String {
        let n = self.candidates.len();
        format!("verifying {} ({}/{n})", self.candidates[i].0, i + 1)
    }

    /// Asked when it matters: a worker may say hello only during the batch.
    fn shares_cache(&self, w: usize) -> bool {
        self.current.lang == Lang::Triton && shares_compile_cache(self.pool, w)
    }

    /// Verifies the next queued candidate on `target` (any worker when None), taking it
    /// from the queue only once that worker is free. `None`: nothing was taken (the queue
    /// is empty, or the worker cannot be had).
    async fn verify_next(&self, target: Option<usize>) -> Option<Took> {
        let pool = self.pool;
        let taken = Mutex::new(None::<usize>);
        // Nothing is taken once the batch is cancelled, even by a worker that was
        // waiting to be free when it happened.
        let take = || {
            if self.is_cancelled() {
                return None;
            }
            let i = self.queue.lock().ok().and_then(|mut q| q.pop_front())?;
            if let Ok(mut t) = taken.lock() {
                *t = Some(i);
            }
            self.say(self.head(i));
            let p = self.planned[i]
                .as_ref()
                .expect("queued candidates are planned");
            let v = labelled(p, &self.candidates[i].0);
            Some(self.rule.op(&v, self.current, self.seed))
        };
        let mut worker_stage = |s: &str| {
            if let Some(i) = taken.lock().ok().and_then(|t| *t) {
                self.say(format!("{}: {s}", self.head(i)));
            }
        };
        let served = match target {
            Some(_) => {
                pool.request_next_on(target, take, None, &mut worker_stage)
                    .await?
            }
            None => {
                let op = take()?;
                request_requeued(pool, op, &mut worker_stage).await
            }
        };
        let i = taken.lock().ok().and_then(|t| *t)?;
        let label = &self.candidates[i].0;
        let lost = matches!(&served.result, Err(e) if e.kind == ErrorKind::WorkerLost);
        if lost && target.is_some() && self.tries[i].fetch_add(1, Relaxed) + 1 < pool.size() {
            self.say(requeued(pool, &served, &format!("`{label}`")));
            if let Ok(mut q) = self.queue.lock() {
                q.push_front(i);
            }
            self.moved();
            return Some(Took::Lost);
        }
        let checked = match self.rule.verdict(served.result) {
            Ok(r) => Checked::Passed {
                worker: served.worker,
                interpreter: r.interpreter,
                tally: r.tally,
            },
            Err(e) => Checked::Rejected(e),
        };
        let finished = self.done.fetch_add(1, Relaxed) + 1;
        if self.parallel {
            let busy = pool.busy();
            let n = self.candidates.len();
            self.say(format!(
                "{finished}/{n} candidates, {busy} worker{} busy",
                if busy == 1 { "" } else { "s" }
            ));
        }
        self.settle(i, checked);
        self.moved();
        Some(Took::Finished(i))
    }

    /// Times `members` beside the current version on worker `w`.
    async fn time_group(&self, members: Vec<usize>, w: usize) -> Share {
        if self.parallel {
            self.say(format!(
                "timing {} verified candidate{} beside the current version on {}",
                members.len(),
                if members.len() == 1 { "" } else { "s" },
                self.pool.describe_worker(w)
            ));
        } else {
            self.say(format!("timing {} versions", members.len() + 1));
        }
        let timed = time_members(
            self.pool,
            self.current,
            &members,
            self.planned,
            self.candidates,
            Some(w),
        )
        .await;
        Share {
            verified: members,
            timed: Some(timed),
        }
    }

    /// Worker `w`'s part: it verifies from the queue until it is empty, then times what
    /// falls to it.
    async fn share(&self, w: usize) -> Vec<Share> {
        while !self.is_cancelled() {
            match self.verify_next(Some(w)).await {
                Some(Took::Finished(i)) => {
                    if self.passed(i) {
                        if let Ok(mut t) = self.timers.lock() {
                            t.pending.push((i, w, false));
                            t.passed += 1;
                        }
                        self.moved();
                    }
                }
                // Lost: gone for this batch (the pool restarts it). Or nothing left,
                // or this worker cannot start.
                Some(Took::Lost) | None => break,
            }
        }
        if w == 0 {
            self.primary_times().await
        } else {
            self.worker_times(w).await
        }
    }

    /// A worker other than the primary, done verifying: it times what it verified on
    /// its own device, unless the primary, done verifying too, can load it without
    /// compiling and time it soon enough (`Timers::leaves`; then no re-timing is needed).
    async fn worker_times(&self, w: usize) -> Vec<Share> {
        let mine = self.timers.lock().map_or_else(
            |_| Vec::new(),
            |mut t| {
                t.verifying[w] = false;
                let own = t.pending.iter().filter(|e| e.1 == w).count();
                let leave = self.time && self.shares_cache(w) && t.leaves(own);
                if leave {
                    t.primary_load += own;
                    for e in t.pending.iter_mut().filter(|e| e.1 == w) {
                        *e = (e.0, 0, true);
                    }
                    Vec::new()
                } else {
                    t.take(|e| e.1 == w)
                }
            },
        );
        self.moved();
        let mut groups = Vec::new();
        if self.time && !mine.is_empty() && !self.is_cancelled() {
            groups.push(self.time_group(mine, w).await);
        }
        groups
    }

    /// The primary, done verifying: it times its own candidates, those left to it and,
    /// up to a worker's share, those of workers that share its compile cache and still
    /// verify, until no worker verifies any more.
    async fn primary_times(&self) -> Vec<Share> {
        let (pool, time) = (self.pool, self.time);
        let mut groups = Vec::new();
        let mut moved = self.moved_rx.clone();
        let up = pool
            .status()
            .first()
            .is_some_and(|s| !matches!(s.state, WorkerState::Down | WorkerState::NotStarted));
        if let Ok(mut t) = self.timers.lock() {
            t.verifying[0] = false;
            t.primary = if up && time {
                Phase::Timing
            } else {
                Phase::Gone
            };
        }
        loop {
            if !time || self.is_cancelled() {
                break;
            }
            moved.borrow_and_update();
            // What to time next, in one look at the state, or None when nothing is
            // left for it (no worker verifies any more).
            let claim = self.timers.lock().ok().and_then(|mut t| {
                let claim = if t.primary == Phase::Gone {
                    t.take(|e| e.1 == 0)
                } else {
                    t.claim_for_primary(|w| self.shares_cache(w))
                };
                if claim.is_empty() && !t.verifying.iter().any(|v| *v) {
                    t.primary = Phase::Gone;
                    return None;
                }
                Some(claim)
            });
            let Some(claim) = claim else { break };
            if claim.is_empty() {
                if moved.changed().await.is_err() {
                    break;
                }
                continue;
            }
            groups.push(self.time_group(claim, 0).await);
            if let Ok(mut t) = self.timers.lock() {
                t.in_flight = 0;
            }
        }
        groups
    }

    /// Candidates put back by a lost worker after the others had finished: verified on
    /// any worker, then timed together.
    async fn late(&self) -> Option<Share> {
        let mut late = Vec::new();
        while !self.is_cancelled() {
            match self.verify_next(None).await {
                Some(Took::Finished(i)) => {
                    if self.passed(i) {
                        late.push(i);
                    }
                }
                Some(_) => {}
                None => break,
            }
        }
        if late.is_empty() {
            return None;
        }
        let timed = if self.time && !self.is_cancelled() {
            let (pool, current) = (self.pool, self.current);
            Some(time_members(pool, current, &late, self.planned, self.candidates, None).await)
        } else {
            None
        };
        Some(Share {
            verified: late,
            timed,
        })
    }
}

/// Each verified candidate's timing: (base, its timing, the worker that timed it), or
/// why it has none. Sets `out`'s base (the primary's, else the first) and interpreter.
fn timed_slots(shares: Vec<Share>, n: usize, out: &mut BatchResult) -> Vec<Option<TimedSlot>> {
    let mut slots: Vec<Option<TimedSlot>> = vec![None; n];
    for sh in shares {
        match sh.timed {
            Some((worker, Ok(t))) => {
                out.interpreter |= t.interpreter;
                let mut it = t.timings.into_iter();
                let Some(base) = it.next() else { continue };
                if out.base.is_none() || worker == Some(0) {
                    out.base = Some(base.clone());
                }
                for (&m, tm) in sh.verified.iter().zip(it) {
                    slots[m] = Some(Ok((base.clone(), tm, worker)));
                }
            }
            Some((_, Err(message))) => {
                for &m in &sh.verified {
                    slots[m] = Some(Err(message.clone()));
                }
            }
            None => {}
        }
    }
    slots
}

/// The batch's records in input order, and its verified candidates with their timings.
#[allow(clippy::too_many_arguments)]
fn assemble(
    pool: &WorkerPool,
    candidates: Vec<(String, String)>,
    checked: Vec<Mutex<Option<Checked>>>,
    planned: Vec<Option<Planned>>,
    mut slots: Vec<Option<TimedSlot>>,
    time: bool,
    cancelled: bool,
    out: &mut BatchResult,
) {
    let parallel = pool.size() > 1;
    for (i, (((label, text), slot), planned)) in
        candidates.into_iter().zip(checked).zip(planned).enumerate()
    {
        let c = slot
            .into_inner()
            .ok()
            .flatten()
            .unwrap_or_else(|| Checked::Rejected("not tried: the job was cancelled".into()));
        let (worker, interpreter, tally) = match c {
            Checked::Rejected(e) => {
                if !e.starts_with("not tried") {
                    out.first_failure.get_or_insert(e.clone());
                }
                out.records.push(rejected(&label, e));
                continue;
            }
            Checked::Passed {
                worker,
                interpreter,
                tally,
            } => (worker, interpreter, tally),
        };
        out.interpreter |= interpreter;
        let on = worker.filter(|_| parallel).map(|w| pool.worker_ref(w));
        let record = CandidateRecord {
            label: label.clone(),
            verified: true,
            verified_on: on,
            ..Default::default()
        };
        let v = Verified {
            index: i,
            label: label.clone(),
            text,
            planned: planned.expect("a verified candidate was planned"),
            tally,
        };
        if !time {
            out.records.push(record);
            out.verified.push(v);
            continue;
        }
        match slots[i].take() {
            Some(Ok((base, tm, worker))) => {
                out.records.push(CandidateRecord {
                    median_ms: Some(tm.median_ms),
                    timed_on: worker.filter(|_| parallel).map(|w| pool.worker_ref(w)),
                    ..record
                });
                out.bases.push(base);
                out.timings.push(tm);
                out.timed_on.push(worker);
                out.verified.push(v);
            }
            Some(Err(message)) => out.records.push(CandidateRecord {
                message: Some(format!("verified, but timing failed: {message}")),
                ..record
            }),
            None if cancelled => out.records.push(rejected(
                &label,
                "verified; not timed: the job was cancelled".into(),
            )),
            None => out.records.push(CandidateRecord {
                message: Some("verified, but timing failed: not timed".into()),
                ..record
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::optimize::accept::testing::timing;

    fn batch_of(bases_and_times: &[(Timing, Timing)]) -> BatchResult {
        BatchResult {
            bases: bases_and_times.iter().map(|(b, _)| b.clone()).collect(),
            timings: bases_and_times.iter().map(|(_, t)| t.clone()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_candidate_is_planned_when_written_and_carries_its_knobs() {
        let text = include_str!("../../../examples/vector_add.py");
        let env = EvalEnv::default();
        let c = Candidate::new(
            Lang::Triton,
            "add_kernel",
            &env,
            "start".into(),
            text.into(),
        );
        let planned = c.planned.as_ref().expect("the example plans");
        assert_eq!(planned.version.plan.kernel, "add_kernel");
        assert_eq!(c.knobs(), [("BLOCK", "64".to_string())]);
        let swept = text.replace("BLOCK = 64;", "BLOCK = 1024;");
        let c = Candidate::new(Lang::Triton, "add_kernel", &env, "BLOCK=1024".into(), swept);
        assert_eq!(c.knobs(), [("BLOCK", "1024".to_string())]);
        // A spec that no longer plans is carried as the reason, for the batch to reject.
        let broken = text.replace("grid = cdiv(n, BLOCK)", "grid = cdiv(n, BLOCKS)");
        let c = Candidate::new(Lang::Triton, "add_kernel", &env, "bad".into(), broken);
        assert!(c.planned.is_err() && c.knobs().is_empty());
    }

    #[test]
    fn the_best_candidate_is_the_first_within_the_noise_of_the_fastest() {
        let base = timing(1.0, 0.995, 1.005);
        let t = |ms: f64| timing(ms, ms * 0.998, ms * 1.002);
        // 1.25x and 1.26x are one speed within 2%: the first in the step's order wins,
        // whichever was timed faster this time.
        let b = batch_of(&[
            (base.clone(), t(0.9)),
            (base.clone(), t(0.8)),
            (base.clone(), t(0.794)),
        ]);
        let (i, g) = b.best().unwrap();
        assert_eq!(i, 1, "{g:?}");
        assert!((g.speedup - 1.25).abs() < 1e-9);
        // Clearly faster (more than the noise) still wins from later in the order.
        let b = batch_of(&[(base.clone(), t(0.8)), (base.clone(), t(0.7))]);
        assert_eq!(b.best().unwrap().0, 1);
        // Timed on another device beside its own base: speedups are compared, not times.
        let slow_base = timing(2.0, 1.99, 2.01);
        let b = batch_of(&[(base.clone(), t(0.8)), (slow_base, t(1.59))]);
        assert_eq!(b.best().unwrap().0, 0, "1.258x is within 2% of 1.25x");
        // An uncertain median on the fastest widens the tie.
        let mut noisy = timing(0.7, 0.6, 0.8);
        noisy.median_interval_ms = Some([0.58, 0.82]);
        let b = batch_of(&[(base.clone(), t(0.8)), (base.clone(), noisy)]);
        assert_eq!(b.best().unwrap().0, 0, "1.43x known to ±17% ties 1.25x");
        // A tied candidate that is not itself faster than the current version does not
        // take the place of one that is.
        let b = batch_of(&[(base.clone(), t(0.99)), (base.clone(), t(0.975))]);
        let (i, g) = b.best().unwrap();
        assert_eq!(i, 1);
        assert!(g.faster());
        // Nothing timed, nothing best.
        assert!(batch_of(&[]).best().is_none());
    }

    fn timers(pending: &[(usize, usize)], passed: usize, workers: usize) -> Timers {
        Timers {
            pending: pending.iter().map(|&(c, w)| (c, w, false)).collect(),
            verifying: vec![true; workers],
            primary: Phase::Timing,
            primary_load: 0,
            in_flight: 0,
            passed,
            workers,
        }
    }

    #[test]
    fn the_primary_takes_its_own_and_up_to_a_workers_share_of_the_others() {
        // 12 verified on 2 workers: a share is 6. The primary has 4 of its own and takes
        // 2 of worker 2's (in the step's order), not worker 3's (another cache).
        let mut t = timers(
            &[
                (5, 1),
                (0, 0),
                (2, 1),
                (1, 0),
                (3, 0),
                (4, 1),
                (6, 0),
                (7, 2),
            ],
            12,
            2,
        );
        let claim = t.claim_for_primary(|w| w != 2);
        assert_eq!(claim, vec![0, 1, 2, 3, 4, 6]);
        assert_eq!((t.primary_load, t.in_flight), (6, 6));
        assert_eq!(t.pending, vec![(5, 1, false), (7, 2, false)]);
        // Its share is used up: its own still go, the others' stay.
        t.pending.push((8, 0, false));
        assert_eq!(t.claim_for_primary(|_| true), vec![8]);
        assert_eq!(t.take(|e| e.1 == 1), vec![5]);
    }

    #[test]
    fn a_worker_leaves_its_candidates_to_the_primary_when_that_is_quicker() {
        let mut t = timers(&[], 12, 2);
        // Few candidates: always (timing them and re-timing its best costs more).
        assert!(t.leaves(2));
        // Many, and the primary has little left: yes; with a backlog: no.
        assert!(t.leaves(6));
        t.in_flight = 3;
        t.pending.push((9, 0, true));
        assert!(!t.leaves(6));
        assert!(t.leaves(1));
        // Never while the primary still verifies, or when it is gone.
        for phase in [Phase::Verifying, Phase::Gone] {
            t.primary = phase;
            assert!(!t.leaves(1));
        }
    }

    #[test]
    fn each_worker_has_its_own_best_by_the_same_rule() {
        let base = timing(1.0, 0.995, 1.005);
        let t = |ms: f64| timing(ms, ms * 0.998, ms * 1.002);
        let mut b = batch_of(&[
            (base.clone(), t(0.8)),
            (base.clone(), t(0.3)),
            (base.clone(), t(0.79)),
            (base.clone(), t(0.35)),
            (base.clone(), t(0.9)),
        ]);
        // Worker 2's device makes everything look about 2.5x faster.
        b.timed_on = vec![Some(0), Some(1), Some(0), Some(1), Some(0)];
        let per = b.best_per_worker();
        let idx: Vec<usize> = per.iter().map(|(i, _)| *i).collect();
        assert_eq!(idx, [0, 1], "0.8 and 0.79 tie on worker 1: the first wins");
        // One worker: one contender.
        b.timed_on = vec![Some(0); 5];
        assert_eq!(b.best_per_worker().len(), 1);
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
        // A wide spread of 20 launches on either side raises the bar: an 80% spread
        // leaves the median uncertain by 22.5%.
        let noisy = timing(0.5, 0.3, 0.7);
        let g = gain(&base, &noisy);
        assert!((g.noise - 0.2253).abs() < 1e-3, "{}", g.noise);
        assert!(g.faster(), "2× beats 22.5% noise");
        let noisy_base = timing(1.0, 0.5, 1.5);
        assert!(
            !gain(&noisy_base, &timing(0.8, 0.79, 0.81)).faster(),
            "1.25× within 28% noise"
        );
        // A zero time does not divide by zero.
        assert!(gain(&base, &timing(0.0, 0.0, 0.0)).speedup.is_finite());
        // Slower is never faster.
        assert!(!gain(&base, &timing(1.5, 1.49, 1.51)).faster());
    }
}
