//! The optimization step loop, shared by `kernel-lsp optimize` and the editor's code
//! actions: propose → rewrite → compile → verify → time against the current version →
//! accept only if correct and faster by more than the measured noise (`docs/optimizer.md`,
//! "One step"). [`optimize`] sets a run up and drives the search (`search`) over a tree
//! of versions; each expansion is one step (`step`), in stages: observe → propose →
//! write → evaluate (`evaluate`) → decide (`accept`, pure) → learn. The strategy is the
//! embedded contextual bandit (`policy`) over the catalog (`catalog`, data in
//! `prompts/strategies.toml`) with the kernel's static facts (`facts`) as context, or an
//! LLM strategist; the coder is an embedded rewrite (`rewrite`) or an LLM coder (`llm`,
//! glued in by `coder`) with bounded repair rounds. What a run may do is `options`; what
//! it leaves is `record`. Knows nothing about LSP; talks to GPUs only through a
//! `WorkerPool`; writes no file (the caller appends `StepRecord`s to the history as
//! `Event::Step` arrives, and decides what to do with the new text).
//!
//! This file holds the run's set-up only; no submodule imports from it (the layering
//! test checks it), so the types it re-exports live in the submodules.

pub mod accept;
pub mod apply;
pub mod bench;
pub mod catalog;
pub mod coder;
pub mod diagnosis;
pub mod edit;
pub mod evaluate;
pub mod explain;
pub mod facts;
pub mod headline;
pub mod history;
pub mod judge;
pub mod launch;
pub mod learning;
pub mod llm;
pub mod options;
pub mod policy;
pub mod record;
pub mod report;
pub mod retune;
pub mod rewrite;
pub mod search;
mod step;

use std::sync::atomic::{AtomicBool, Ordering};

use crate::spec::EvalEnv;
use crate::syntax::Lang;
use crate::worker::pool::WorkerPool;
use crate::worker::protocol::HelloResult;

pub use coder::LlmSetup;
pub use options::{run_limits, Event, OptimizeOptions, Profiler, Repair, RunBudget};
pub use record::{CandidateRecord, LlmSpent, OptimizeRun, Outcome, StepRecord};

use policy::Policy;
use step::Runner;

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
    let (hello, env) = connect(pool, lang).await?;
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

    let (policy, mut warnings) = load_policy(opts);
    let run_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    // A repair is judged against the last verified version, not against PyTorch.
    let (judge, judge_warning) = match &opts.repair {
        Some(_) => (judge::Judge::current(), None),
        None => judge::Judge::for_run(&start.version, opts.file.as_deref()),
    };
    warnings.extend(judge_warning);
    let mut runner = Runner {
        pool,
        lang,
        kernel_name,
        text,
        opts,
        env,
        hello: &hello,
        start: &start,
        judge: &judge,
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
        untried: Default::default(),
        run_id,
        started,
        on,
    };
    let mut search = search::Search::with_config(
        text,
        &start.kernel_hash,
        None,
        opts.seed,
        search::SearchConfig::for_run(opts.thorough),
    );
    let budgets = budgets(opts);
    let mut elapsed = || started.elapsed();
    let drive = search::drive(&mut search, &budgets, &mut runner, &mut elapsed);
    let ((), stopped) = futures::join!(check, drive);
    let stopped = Some(stopped);
    if let Some(Err(e)) = check_tx.borrow().clone() {
        return Err(e);
    }
    runner.tell(true).await;
    let best = search.best();
    let path = search.path(best.id);
    let headline = end_of_run_timing(&mut runner, &start, best, run_id).await;
    if let Some(h) = &headline {
        let end = apply::RunEnd {
            headline: h.clone(),
            versions: recorded_versions(lang, kernel_name, &search),
        };
        (runner.on)(Event::RunEnd(&end));
    }
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
        best_speedup: headline.as_ref().map_or(best.cumulative, |h| h.speedup),
        headline,
        versions: search.nodes.len(),
        llm: runner.spent,
    })
}

/// Every version of the run's tree as the history keeps it, the start first.
/// The primary worker's `hello` and the spec environment it gives, or why the run
/// cannot start (no worker, or a worker that cannot run this language).
async fn connect(pool: &WorkerPool, lang: Lang) -> Result<(HelloResult, EvalEnv), String> {
    let hello = pool.connect().await.map_err(|e| e.message)?;
    let env = EvalEnv {
        sms: hello
            .device
            .as_ref()
            .map_or(EvalEnv::default().sms, |d| u64::from(d.sms)),
    };
    backend_ready(&hello, lang)?;
    Ok((hello, env))
}

/// Whether the worker that said `hello` runs `lang` kernels; the message says why not.
/// The CLI's runs and the editor's jobs both ask before they send work.
pub fn backend_ready(hello: &HelloResult, lang: Lang) -> Result<(), String> {
    let backend = match lang {
        Lang::Cuda => &hello.cuda,
        Lang::Triton => &hello.triton,
    };
    if backend.available {
        return Ok(());
    }
    Err(format!(
        "the worker cannot run {} kernels: {}",
        llm::lang_label(lang),
        backend.message
    ))
}

/// The run's policy (from its state file, if any) and the warnings loading it gave.
fn load_policy(opts: &OptimizeOptions) -> (Policy, Vec<String>) {
    match &opts.policy_path {
        Some(p) => {
            let (policy, warning) = Policy::load(p);
            (policy, warning.into_iter().collect())
        }
        None => (Policy::default(), Vec::new()),
    }
}

/// The run's limits: its steps (one for a repair), wall time and model budget.
fn budgets(opts: &OptimizeOptions) -> search::Budgets {
    search::Budgets {
        steps: if opts.repair.is_some() { 1 } else { opts.steps },
        wall: opts.budget.wall,
        llm_calls: opts.budget.llm_calls,
        tokens: opts.budget.tokens,
    }
}

fn recorded_versions(
    lang: Lang,
    kernel: &str,
    search: &search::Search,
) -> Vec<apply::RecordedVersion> {
    search
        .nodes
        .iter()
        .filter_map(|n| apply::record_version(lang, &n.text, kernel, n.id))
        .collect()
}

/// The run's one number ([`headline::Headline`]): the answer and the start timed side
/// by side once the search is over. None for a repair (its start fails verification:
/// its result is a fix, not a speedup), for a cancelled run, and (with a warning) when
/// the timing fails; the table then says so instead of printing another figure.
async fn end_of_run_timing(
    runner: &mut Runner<'_, '_>,
    start: &evaluate::Planned,
    best: &search::Node,
    run_id: u64,
) -> Option<headline::Headline> {
    let cancelled = (runner.opts.cancel.as_ref()).is_some_and(|c| c.load(Ordering::SeqCst));
    if cancelled || runner.opts.repair.is_some() {
        return None;
    }
    let answer = match best.id {
        0 => None,
        id => match evaluate::plan(runner.lang, &best.text, runner.kernel_name, &runner.env) {
            Ok(p) => Some((id, p.version)),
            Err(e) => {
                runner.warnings.push(format!(
                    "the best version does not plan for its end-of-run timing: {e}"
                ));
                return None;
            }
        },
    };
    (runner.on)(Event::Stage(
        "timing the best version beside the start".into(),
    ));
    let interpreter = runner.lang == Lang::Triton && runner.hello.triton.interpreter;
    let best = answer.as_ref().map(|(id, v)| (*id, v));
    match headline::measure(runner.pool, run_id, &start.version, best, interpreter).await {
        Ok(h) => Some(h),
        Err(e) => {
            runner
                .warnings
                .push(format!("the end-of-run timing failed: {e}"));
            None
        }
    }
}
