//! `kernel-lsp.optimize`, `.tune` and `.fix`: one optimize run of the shared engine
//! (`crate::optimize::optimize`) on the kernel as the command found it, with its stages as
//! `$/progress`, its steps appended to the history, and the verified winner kept as a
//! pending rewrite (applied at once with `applyMode = "apply"`).

use std::sync::atomic::Ordering;

use serde_json::Value;
use tower_lsp::lsp_types::*;

use crate::optimize::catalog::Catalog;
use crate::optimize::{self, history, Event, OptimizeOptions};
use crate::settings::ApplyMode;
use crate::worker::protocol::Timing;

use super::{
    find_kernel, load, message, region, status_for, store, Backend, Pending, Snapshot,
    SupportedCommand, FIX, OPTIMIZE, TUNE,
};

impl Backend {
    pub(super) async fn optimize_job(
        &self,
        cmd: SupportedCommand,
        uri: &Url,
        snap: Snapshot,
        token: Option<NumberOrString>,
    ) -> std::result::Result<Value, String> {
        let name = snap.kernel.name.clone();
        let repair = if cmd == FIX {
            match self.repair_for(uri, &snap)? {
                Ok(r) => Some(r),
                Err(nothing_to_fix) => return Ok(nothing_to_fix),
            }
        } else {
            None
        };
        let (guard, reporter) = self
            .start_job(uri, &name, job_title(cmd, &name), token)
            .await?;
        reporter.report("starting the worker").await;
        let pool = self.pool_for(snap.lang).await?;
        let opts = run_options(cmd, &snap, repair, &guard)?;
        let (run, history_errors) = match run_reporting(&pool, &snap, &opts, &reporter).await {
            Ok(r) => r,
            Err(e) => {
                reporter.end(&e).await;
                return Err(e);
            }
        };
        let cancelled =
            guard.cancel.load(Ordering::Relaxed) && run.stopped.as_deref() == Some("cancelled");
        let Some(new_text) = run.new_text.clone() else {
            let closed = cancelled && !self.still_open(uri, &snap);
            let (outcome, text) = no_winner(&name, uri, &run, cancelled, closed, &history_errors);
            reporter.end(&text).await;
            return Ok(message(outcome, text));
        };
        let (speedup, label) = (run.best_speedup, run.accepted().join(", "));
        self.keep_winner(cmd, uri, &snap, &run, &new_text)?;
        drop(guard);
        if !self.still_open(uri, &snap) {
            let text = format!("`{name}`: {uri} was closed; the verified rewrite ({speedup:.2}×: {label}) is in the history (.kernel-lsp/)");
            reporter.end(&text).await;
            return Ok(message("no_gain", text));
        }
        let r = if snap.settings.apply_mode == ApplyMode::Apply {
            self.apply_pending(uri, &name).await
        } else {
            Ok(message(
                "accepted",
                format!("`{name}`: a verified rewrite is ready ({speedup:.2}×: {label}); use the code action \"Apply verified rewrite\""),
            ))
        };
        reporter
            .end(r.as_ref().map_or_else(
                |e| e.as_str(),
                |v| v["message"].as_str().unwrap_or_default(),
            ))
            .await;
        r
    }

    /// "Ask the coder to fix": the recorded failure and the baseline to verify against;
    /// `Ok(Err(message))` when there is nothing to fix.
    fn repair_for(
        &self,
        uri: &Url,
        snap: &Snapshot,
    ) -> std::result::Result<std::result::Result<optimize::Repair, Value>, String> {
        let name = &snap.kernel.name;
        let failure = self
            .state()
            .kernels
            .get(&(uri.clone(), name.clone()))
            .and_then(|k| k.failure.clone());
        let Some((feedback, _)) = failure else {
            return Ok(Err(message(
                "ok",
                format!("`{name}` has no verification failure to fix; run Benchmark first"),
            )));
        };
        if snap.settings.llm.coder.is_none() {
            return Err("\"Ask the coder to fix\" needs an LLM coder: set `llm.coder` in the settings (docs/configuration.md); meanwhile \"Revert to last verified version\" restores the last text that passed".into());
        }
        let reference_text = snap
            .file
            .as_ref()
            .and_then(|f| load(f, "baseline", name))
            .ok_or_else(|| format!("`{name}` has no baseline to verify a fix against; revert or pin a version that passes"))?;
        Ok(Ok(optimize::Repair {
            feedback,
            reference_text,
        }))
    }

    /// The run's winner kept as the kernel's pending rewrite, with the hint's time and
    /// the message a later action shows.
    fn keep_winner(
        &self,
        cmd: SupportedCommand,
        uri: &Url,
        snap: &Snapshot,
        run: &optimize::OptimizeRun,
        new_text: &str,
    ) -> std::result::Result<(), String> {
        let name = &snap.kernel.name;
        let (speedup, label) = (run.best_speedup, run.accepted().join(", "));
        let (_, new_r) = find_kernel(snap.lang, new_text, name)
            .ok_or("the optimized text lost the kernel (a kernel-lsp bug; nothing was applied)")?;
        let pending = Pending {
            start_region: snap.text[region(&snap.kernel)].to_string(),
            new_region: new_text[new_r].to_string(),
            speedup,
            label: label.clone(),
        };
        let ran = || {
            run.steps
                .iter()
                .filter(|s| s.outcome != optimize::Outcome::NotApplicable)
        };
        let cases = ran()
            .rfind(|s| s.on_best_path)
            .map_or(String::new(), |s| format!(" (seed {})", s.seed));
        let best_ms = ran()
            .find(|s| s.child == Some(run.best_node))
            .and_then(|s| s.best_ms);
        let mut st = self.state();
        if let Some(k) = status_for(&mut st, uri, snap) {
            k.pending = Some(pending);
            k.failure = None;
            k.win = Some(if cmd == FIX {
                format!("the coder's fix passes verification against the baseline on every spec case{cases}")
            } else {
                format!("verified on every spec case{cases}, {speedup:.2}× faster than before the job: {label}")
            });
            // The hint shows the verified winner's time and the job's speedup.
            k.timing = best_ms.map(|ms| winner_timing(name, ms));
            k.speedup = Some(speedup);
            k.torch = None;
        }
        Ok(())
    }
}

fn job_title(cmd: SupportedCommand, name: &str) -> String {
    if cmd == TUNE {
        format!("Tune {name}")
    } else if cmd == FIX {
        format!("Fix {name}")
    } else {
        format!("Optimize {name}")
    }
}

/// The engine's options for this job: the settings' limits and verification, the
/// project's policy, the history's tried steps; knob steps only for Tune; the LLM for an
/// optimize that asks for it and for a fix (one step).
fn run_options(
    cmd: SupportedCommand,
    snap: &Snapshot,
    repair: Option<optimize::Repair>,
    guard: &super::progress::JobGuard,
) -> std::result::Result<OptimizeOptions, String> {
    let s = &snap.settings;
    let name = &snap.kernel.name;
    let catalog = Catalog::load(s.llm.prompts_dir.as_deref()).map_err(|e| e.to_string())?;
    let (steps, budget) = optimize::run_limits(s, None, None);
    let mut opts = OptimizeOptions::new(steps, s.verify.seed, catalog);
    opts.verify = s.verify.clone();
    opts.budget = budget;
    opts.cancel = Some(guard.cancel.clone());
    opts.file = snap.file.clone();
    // The project's own policy (an unsaved file's run learns in memory only).
    let shared = s.shared_policy;
    opts.policy_path = match &snap.file {
        Some(f) => Some(optimize::learning::policy_path(f, shared)),
        None => shared.then(optimize::policy::default_path),
    };
    if cmd == TUNE {
        // Sweeps only, no code changes: the catalog's knob steps.
        opts.only = opts.catalog.knobs();
    }
    if let Some(file) = &snap.file {
        if let Ok((past, _)) = history::read(file, name) {
            opts.tried = history::tried(&past);
        }
        // The job's starting version is benchmarked against: it becomes the baseline
        // when there is none yet (docs/spec.md, `reference`).
        if load(file, "baseline", name).is_none() {
            store(file, "baseline", name, &snap.text)?;
        }
    }
    if (cmd == OPTIMIZE && s.use_llm) || cmd == FIX {
        opts.llm = Some(optimize::LlmSetup::from_settings(&s.llm)?);
    }
    if repair.is_some() {
        opts.repair = repair;
        opts.steps = 1;
    }
    Ok(opts)
}

/// One run of the engine, its stages reported as progress and its steps and end
/// appended to the history; the history's write errors come back beside the run.
async fn run_reporting(
    pool: &crate::worker::pool::WorkerPool,
    snap: &Snapshot,
    opts: &OptimizeOptions,
    reporter: &super::progress::Reporter,
) -> std::result::Result<(optimize::OptimizeRun, Vec<String>), String> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let file = snap.file.clone();
    let kname = snap.kernel.name.clone();
    let mut history_errors = Vec::new();
    let mut on = |e: Event<'_>| match e {
        Event::Stage(stage) => {
            let _ = tx.send(stage);
        }
        Event::Step(step) => {
            if let Some(f) = &file {
                if let Err(e) = history::append(f, &kname, std::slice::from_ref(step)) {
                    history_errors.push(e);
                }
            }
        }
        Event::RunEnd(end) => {
            if let Some(f) = &file {
                if let Err(e) = history::append_run_end(f, &kname, end) {
                    history_errors.push(e);
                }
            }
        }
    };
    let run = {
        let fut = optimize::optimize(pool, snap.lang, &snap.text, &kname, opts, &mut on);
        tokio::pin!(fut);
        loop {
            tokio::select! {
                r = &mut fut => break r,
                Some(stage) = rx.recv() => reporter.report(&stage).await,
            }
        }
    };
    run.map(|r| (r, history_errors))
}

/// A run with no winner: the outcome (`failed` when every step that ran failed) and
/// what the author reads (closed, cancelled, or the steps tried), with its warnings.
fn no_winner(
    name: &str,
    uri: &Url,
    run: &optimize::OptimizeRun,
    cancelled: bool,
    closed: bool,
    history_errors: &[String],
) -> (&'static str, String) {
    let steps: Vec<_> = run
        .steps
        .iter()
        .filter(|s| s.outcome != optimize::Outcome::NotApplicable)
        .collect();
    let tried: Vec<String> = steps
        .iter()
        .map(|s| format!("{} {}", s.strategy_id, s.outcome.label()))
        .collect();
    let mut text = if closed {
        format!(
            "`{name}`: {uri} was closed, so the job stopped after {} step(s); they are in the history",
            steps.len()
        )
    } else if cancelled {
        format!(
            "`{name}`: cancelled after {} step(s); they are in the history",
            steps.len()
        )
    } else {
        format!(
            "`{name}`: no verified improvement ({})",
            if tried.is_empty() {
                run.stopped.clone().unwrap_or_else(|| "no step ran".into())
            } else {
                tried.join(", ")
            }
        )
    };
    for w in run.warnings.iter().chain(history_errors) {
        text.push_str(&format!(" (warning: {w})"));
    }
    let all_failed = steps.iter().any(|s| s.outcome == optimize::Outcome::Failed)
        && steps.iter().all(|s| s.outcome == optimize::Outcome::Failed);
    (if all_failed { "failed" } else { "no_gain" }, text)
}

/// The hint's time for the verified winner (the step's best median; no spread is known).
fn winner_timing(name: &str, ms: f64) -> Timing {
    Timing {
        label: name.to_string(),
        median_ms: ms,
        min_ms: ms,
        p10_ms: ms,
        p90_ms: ms,
        median_interval_ms: None,
        reps: 0,
        gbps: 0.0,
        frac_copy: None,
        tflops: None,
        frac_fma: None,
        energy_j: None,
    }
}
