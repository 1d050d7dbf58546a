//! `kernel-lsp optimize FILE [--kernel K] [--steps N] [--llm] [--apply] [--json]`: run the
//! step loop on one kernel through a worker, print a table per step, append every step to
//! the kernel's history in `.kernel-lsp/` as it ends, and with `--apply` write the best
//! verified version back (keeping a backup). Without `--apply` the author's file is not
//! touched.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::analysis::{self, AnalyzeOptions, Finding, FindingSource, Severity};
use crate::document::Document;
use crate::optimize::bench::{self, TorchColumns};
use crate::optimize::catalog::Catalog;
use crate::optimize::headline::ratio;
use crate::optimize::{self, explain, history, learning, Event, OptimizeOptions, OptimizeRun};
use crate::settings::Workers;
use crate::syntax::{self, Lang};
use crate::worker::pool::WorkerPool;

#[derive(clap::Args, Debug)]
pub struct OptimizeArgs {
    /// The CUDA or Triton file.
    pub file: PathBuf,
    /// The kernel to optimize (default: the file's only kernel with a @bench spec).
    #[arg(long)]
    pub kernel: Option<String>,
    /// At most this many steps (each expands one version of the run's tree). Default:
    /// the `stepsPerAction` setting, else no step limit (the time budget and the
    /// search's stop rule end the run).
    #[arg(long)]
    pub steps: Option<usize>,
    /// Wall-time budget of the run: seconds, or with a unit (`90s`, `10m`, `1h`).
    /// Default: the `optimizeBudgetS` setting (10 min). The step that is running when it
    /// is spent finishes; the best version so far is the answer.
    #[arg(long, value_name = "TIME", value_parser = parse_budget)]
    pub budget: Option<std::time::Duration>,
    /// Expand every version of the tree until nothing is left to try on it, not only the
    /// versions within 80% of the best's speedup: a longer run that shows what the
    /// default run leaves out (pair it with `--steps` or `--budget`).
    #[arg(long)]
    pub thorough: bool,
    /// Write the best verified version into FILE (a backup is kept as FILE.orig).
    #[arg(long)]
    pub apply: bool,
    /// Print the run as JSON.
    #[arg(long)]
    pub json: bool,
    /// The command that starts a worker, e.g. "ssh gpu-box kernel-lsp worker"
    /// (default: the `worker` setting, else this binary's `worker` subcommand).
    #[arg(long, value_name = "CMD")]
    pub worker: Option<String>,
    /// The pool: a count, `all` (one worker per visible GPU) or worker commands
    /// separated by `;` (default: the `workers` setting, 1).
    #[arg(long, value_name = "N|all|CMDS")]
    pub workers: Option<Workers>,
    /// Base seed for verification inputs (default: the `verify.seed` setting, 42).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Only these catalog steps (comma-separated ids, e.g. `tunable_sweep,block_size`).
    #[arg(long, value_delimiter = ',', value_name = "IDS")]
    pub only: Vec<String>,
    /// A folder whose `strategies.toml` (and prompt files) replace the embedded ones.
    #[arg(long, value_name = "DIR")]
    pub prompts: Option<PathBuf>,
    /// Use the LLM strategist and coder from the settings (`llm.strategy`, `llm.coder`).
    #[arg(long)]
    pub llm: bool,
    /// Use the LLM coder for every step, also those with an embedded rewrite.
    #[arg(long, requires = "llm")]
    pub llm_coder_always: bool,
    /// Settings as JSON, the shape editors send as initializationOptions (default:
    /// `.kernel-lsp/settings.json` at the workspace root, if it exists).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Profile each version of the tree once with Nsight Compute (`ncu` on this
    /// machine): its diagnosis and metrics become facts for the policy and part of the
    /// strategist's prompt. Never on the timing path.
    #[arg(long)]
    pub profile: bool,
    /// Keep the strategy policy in memory only (do not read or update the learned state).
    #[arg(long)]
    pub fresh_policy: bool,
    /// Learn in the user-level policy shared by every project (default: the project's
    /// own `.kernel-lsp/policy.json`, or the `sharedPolicy` setting).
    #[arg(long, conflicts_with = "fresh_policy")]
    pub shared_policy: bool,
}

pub fn run(args: &OptimizeArgs) -> ExitCode {
    match run_inner(args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("{message}");
            ExitCode::from(1)
        }
    }
}

fn run_inner(args: &OptimizeArgs) -> Result<ExitCode, String> {
    let shown = args.file.display().to_string();
    let lang = syntax::lang_for(&shown, None)
        .ok_or_else(|| format!("{shown}: error: not a CUDA (.cu, .cuh) or Python file"))?;
    let text = super::check::read_source(&args.file).map_err(|e| format!("{shown}: error: {e}"))?;
    if lang == Lang::Triton && !syntax::is_triton_source(&text) {
        return Err(format!("{shown}: error: no @triton.jit kernels"));
    }
    let doc = Document::new(lang, 0, &text);
    let a = analysis::analyze(lang, &text, doc.tree(), &AnalyzeOptions::default());
    let kernel = match &args.kernel {
        Some(k) => k.clone(),
        None => {
            let specd: Vec<&str> = a
                .model
                .kernels
                .iter()
                .filter(|k| !k.spec.lines.is_empty())
                .map(|k| k.name.as_str())
                .collect();
            match specd.as_slice() {
                [one] => one.to_string(),
                [] => return Err(format!("{shown}: error: no kernel has a @bench spec")),
                many => {
                    return Err(format!(
                        "{shown}: error: several kernels have specs ({}); pick one with --kernel",
                        many.join(", ")
                    ))
                }
            }
        }
    };
    refuse_spec_errors(&shown, &doc, &a, &kernel)?;
    let settings = super::load_settings(args.config.as_deref(), &args.file)?;
    let prompts_dir = args
        .prompts
        .clone()
        .or_else(|| settings.llm.prompts_dir.clone());
    let catalog = Catalog::load(prompts_dir.as_deref()).map_err(|e| e.to_string())?;
    let (past, bad) = history::read(&args.file, &kernel)?;
    if bad > 0 {
        eprintln!("{kernel}: warning: {bad} history lines could not be read and were skipped");
    }
    if let Some(bad) = args.only.iter().find(|id| catalog.get(id).is_none()) {
        let ids: Vec<&str> = catalog.strategies.iter().map(|s| s.id.as_str()).collect();
        return Err(format!(
            "{shown}: error: --only: no catalog step `{bad}`; the steps are {}",
            ids.join(", ")
        ));
    }
    let seed = args.seed.unwrap_or(settings.verify.seed);
    let (steps, budget) = optimize::run_limits(&settings, args.steps, args.budget);
    let mut opts = OptimizeOptions::new(steps, seed, catalog);
    opts.verify = crate::settings::VerifySettings {
        seed,
        ..settings.verify.clone()
    };
    opts.only = args.only.clone();
    opts.file = Some(args.file.clone());
    opts.budget = budget;
    opts.thorough = args.thorough;
    opts.tried = history::tried(&past);
    let shared = args.shared_policy || settings.shared_policy;
    opts.policy_path = (!args.fresh_policy).then(|| learning::policy_path(&args.file, shared));
    if args.llm {
        let mut llm_settings = settings.llm.clone();
        llm_settings.prompts_dir = prompts_dir.clone();
        let mut setup = optimize::LlmSetup::from_settings(&llm_settings)
            .map_err(|e| format!("{shown}: error: --llm: {e}"))?;
        setup.prefer_coder = args.llm_coder_always;
        opts.llm = Some(setup);
    }
    if args.profile {
        let ncu = crate::toolchain::ncu::locate(None).ok_or_else(|| {
            format!("{shown}: error: --profile: Nsight Compute (`ncu`) was not found; install it, put it on PATH, or set KERNEL_LSP_NCU")
        })?;
        let file = args.file.clone();
        let name = kernel.clone();
        opts.profiler = Some(std::sync::Arc::new(move |text: String| {
            let (ncu, file, name) = (ncu.clone(), file.clone(), name.clone());
            Box::pin(async move {
                tokio::task::spawn_blocking(move || {
                    crate::toolchain::ncu::profile_text(&ncu, &file, &name, &text)
                })
                .await
                .map_err(|e| format!("the profiler task failed: {e}"))?
            })
        }));
    }
    let config = super::device::settings_pool_config(
        &settings,
        args.worker.as_deref(),
        args.workers.as_ref(),
    )
    .map_err(|e| format!("{shown}: error: {e}"))?;
    let rt = super::device::runtime()?;
    let pool = WorkerPool::new(config);
    let file = args.file.clone();
    let run = rt.block_on(async {
        let mut on = |e: Event<'_>| match e {
            Event::Stage(s) => eprintln!("{kernel}: {s}"),
            Event::Step(step) => {
                if let Err(e) = history::append(&file, &kernel, std::slice::from_ref(step)) {
                    eprintln!("{kernel}: warning: history not written: {e}");
                }
            }
            Event::RunEnd(end) => {
                if let Err(e) = history::append_run_end(&file, &kernel, end) {
                    eprintln!("{kernel}: warning: history not written: {e}");
                }
            }
        };
        let r = optimize::optimize(&pool, lang, &text, &kernel, &opts, &mut on).await;
        // Against PyTorch (`reference = torch: ...`): the start and every accepted
        // version, timed together with PyTorch eager and torch.compile.
        let bars = match &r {
            Ok(run) => {
                bench::torch_columns(
                    &pool,
                    lang,
                    &args.file,
                    &text,
                    &run.version_texts,
                    run.best_node,
                    &kernel,
                )
                .await
            }
            Err(_) => None,
        };
        pool.shutdown().await;
        r.map(|run| (run, bars))
    });
    let (run, bars) = run.map_err(|e| format!("{shown}: error: {e}"))?;
    for w in &run.warnings {
        eprintln!("{kernel}: warning: {w}");
    }
    eprintln!(
        "{kernel}: history in {}",
        history::path_for(&args.file, &kernel).display()
    );
    if args.json {
        let mut v = serde_json::to_value(&run).expect("run serializes");
        if let Some(b) = &bars {
            v["torch"] = serde_json::to_value(b).expect("columns serialize");
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&v).expect("run serializes")
        );
        // The run's one number on the terminal too, as the table would print it.
        eprint!("{kernel}: {}", result_line(&run));
    } else {
        print!("{}", table(&run));
        if let Some(b) = &bars {
            print!("{}", torch_table(b));
        }
    }
    if let Some(new_text) = &run.new_text {
        let change = run.accepted();
        if args.apply {
            // This run's answer; refused if the file changed while the run went on.
            let backup = super::apply::write_with_backup(&args.file, &text, new_text)?;
            eprintln!(
                "{kernel}: applied {} (backup: {})",
                change.join(", "),
                backup.display()
            );
        } else {
            let how = match &run.headline {
                Some(h) => format!("`kernel-lsp apply {shown} --run {}`", h.run),
                None => "`--apply` on the next run".to_string(),
            };
            eprintln!(
                "{kernel}: the best verified version applies {}; write it with {how} (no new search)",
                change.join(", ")
            );
        }
    } else {
        eprintln!("{kernel}: no verified improvement; the file is unchanged");
    }
    Ok(ExitCode::SUCCESS)
}

/// The kernel's spec is checked before a worker starts, as `bench` does: its errors
/// are what the author must fix, whatever the worker's state. The step loop checks it
/// again with the device's `sms`.
fn refuse_spec_errors(
    shown: &str,
    doc: &Document,
    a: &analysis::FileAnalysis,
    kernel: &str,
) -> Result<(), String> {
    let Some(i) = a.model.kernels.iter().position(|k| k.name == kernel) else {
        let names: Vec<&str> = a.model.kernels.iter().map(|k| k.name.as_str()).collect();
        return Err(format!(
            "{shown}: error: no kernel `{kernel}`; the file has: {}",
            names.join(", ")
        ));
    };
    let Some(report) = a.specs.get(i).filter(|r| r.plan.is_none()) else {
        return Ok(());
    };
    if a.model.kernels[i].spec.lines.is_empty() {
        return Err(format!(
            "{shown}: error: `{kernel}` has no @bench spec; add @bench lines above it (the editor's \"Insert @bench spec\" code action writes a skeleton) before optimizing"
        ));
    }
    let mut out = String::new();
    let errors = report
        .diagnostics
        .iter()
        .filter(|d| d.severity == crate::spec::Severity::Error);
    for d in errors {
        let f = Finding {
            range: d.range.clone(),
            severity: Severity::Error,
            source: FindingSource::Spec,
            message: d.message.clone(),
        };
        out.push_str(&super::check::error_line(shown, doc, &f));
    }
    out.push_str("kernel-lsp optimize: fix the errors above first; nothing was run");
    Err(out)
}

fn torch_table(c: &TorchColumns) -> String {
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.4} ms"));
    let mut out = format!(
        "against PyTorch `{}` (eager {}, torch.compile {}), timed together:\n",
        c.reference,
        ms(c.eager_ms),
        ms(c.compile_ms)
    );
    for (label, t, e, k) in &c.rows {
        let x = |v: &Option<f64>, what: &str| v.map(|v| format!("{} {what}", ratio(v)));
        let parts: Vec<String> = [x(e, "eager"), x(k, "compile")]
            .into_iter()
            .flatten()
            .collect();
        out.push_str(&format!("  {label:<10} {t:.4} ms  {}\n", parts.join(" · ")));
    }
    if let Some(n) = &c.note {
        out.push_str(&format!("  note: {n}\n"));
    }
    if let Some(n) = c.measured.as_ref().and_then(|m| m.note()) {
        out.push_str(&format!("  note: {n}\n"));
    }
    out
}

/// `300`, `90s`, `10m`, `1.5h`.
fn parse_budget(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a time: write seconds, or e.g. `90s`, `10m`, `1h`"))?;
    let secs = match unit.trim() {
        "s" | "sec" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        u => return Err(format!("`{u}` is not a time unit: use s, m or h")),
    };
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!("`{s}`: the budget must be more than zero"));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// The run as a table: the start with its time, one row per step that ran (with a note
/// where the row needs one: `explain::step_note`), the steps that never ran apart, and
/// the run's one number (`headline`).
fn table(run: &OptimizeRun) -> String {
    let tree = run.versions > 1 || run.steps.iter().any(|s| s.pick.is_some());
    let mut out = String::from(if tree {
        "step  version          strategy         outcome   time (ms)  speedup  cumulative  candidates\n"
    } else {
        "step  strategy         outcome   time (ms)  speedup  cumulative  candidates\n"
    });
    let start_ms = run
        .headline
        .as_ref()
        .map(|h| h.start_ms)
        .or_else(|| run.steps.iter().find_map(|s| s.before_ms));
    let start = (String::from("-"), "v0", "start", "start");
    out.push_str(&row(tree, start, start_ms, "1.00×", "1.00×", String::new()));
    let ran = run
        .steps
        .iter()
        .filter(|s| s.outcome != optimize::Outcome::NotApplicable);
    for s in ran {
        out.push_str(&step_row(tree, s));
        for c in &s.checks {
            out.push_str(&format!("      checked: {c}\n"));
        }
        if let Some(n) = explain::step_note(s) {
            out.push_str(&format!("      note: {n}\n"));
        }
    }
    if let Some(n) = explain::never_ran(&run.steps) {
        out.push_str(&format!("{n}\n"));
    }
    if let Some(why) = &run.stopped {
        out.push_str(&format!("stopped: {why}\n"));
    }
    out.push_str(&result_line(run));
    if run.llm.calls > 0 {
        out.push_str(&format!("models: {}\n", run.llm.describe()));
    }
    if run.steps.iter().any(|s| s.interpreter) {
        out.push_str("note: interpreter timings: Triton ran on the CPU (TRITON_INTERPRET=1); results are verified for real, times are not GPU times\n");
    }
    out
}

/// One step's row: its time is the accepted candidate's, else the current version's;
/// a step that kept the current version has no speedup (its note says why).
fn step_row(tree: bool, s: &optimize::StepRecord) -> String {
    let accepted = s.outcome == optimize::Outcome::Accepted;
    let time = if accepted { s.best_ms } else { s.before_ms };
    let cands: Vec<String> = s
        .candidates
        .iter()
        .map(|c| match (c.median_ms, &c.message) {
            (Some(ms), _) => match &c.timed_on {
                Some(w) => format!("{} {ms:.4} ms on w{}", c.label, w.worker),
                None => format!("{} {ms:.4} ms", c.label),
            },
            (None, Some(m)) => format!("{} rejected: {m}", c.label),
            (None, None) => c.label.clone(),
        })
        .collect();
    let mut v = format!("v{}", s.node.unwrap_or(0));
    if let Some(c) = s.child {
        v.push_str(&format!("→v{c}"));
    }
    if let Some(p) = s.pick.as_deref().filter(|p| *p != "best") {
        v.push_str(&format!(" ({p})"));
    }
    let speedup = if accepted {
        ratio(s.speedup)
    } else {
        "-".into()
    };
    let what = (
        s.step.to_string(),
        v.as_str(),
        s.strategy_id.as_str(),
        s.outcome.label(),
    );
    let cumulative = ratio(s.cumulative);
    row(tree, what, time, &speedup, &cumulative, cands.join("; "))
}

/// The columns of one row.
fn row(
    tree: bool,
    (step, version, strategy, outcome): (String, &str, &str, &str),
    time: Option<f64>,
    speedup: &str,
    cumulative: &str,
    candidates: String,
) -> String {
    let time = time.map_or("-".to_string(), |t| format!("{t:.4}"));
    let step = if tree {
        format!("{step:<5} {version:<16}")
    } else {
        step
    };
    let line = format!(
        "{step:<5} {strategy:<16} {outcome:<9} {time:<10} {speedup:<8} {cumulative:<11} {candidates}"
    );
    format!("{}\n", line.trim_end())
}

/// The run's one number, and the path that led to it.
fn result_line(run: &OptimizeRun) -> String {
    let path: Vec<String> = run
        .steps
        .iter()
        .filter(|s| s.on_best_path)
        .map(|s| format!("{} (step {})", s.strategy_id, s.step))
        .collect();
    let by = if path.is_empty() {
        String::new()
    } else {
        format!("; by {}", path.join(" → "))
    };
    let ran = run
        .steps
        .iter()
        .filter(|s| s.outcome != optimize::Outcome::NotApplicable)
        .count();
    let what = match &run.headline {
        Some(h) => h.describe(),
        None => format!(
            "best v{}, {} over the start by the steps' own timings (no end-of-run timing)",
            run.best_node,
            ratio(run.best_speedup)
        ),
    };
    format!(
        "result: {what}; {ran} steps ran, {} versions{by}\n",
        run.versions
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optimize::bench::Measured;

    fn columns(measured: Option<Measured>) -> TorchColumns {
        TorchColumns {
            reference: "torch.relu(x)".into(),
            rows: vec![("start".into(), 0.0254, Some(1.1), Some(0.98))],
            eager_ms: Some(0.028),
            compile_ms: Some(0.025),
            note: None,
            measured,
        }
    }

    #[test]
    fn the_pytorch_table_says_when_its_timing_was_measured_again() {
        let cols = columns(Some(Measured::of(vec![0.53, 0.40, 0.06])));
        let json = serde_json::to_value(&cols).unwrap();
        assert_eq!(json["measurements"], 3, "{json}");
        assert_eq!(
            json["spreads"],
            serde_json::json!([0.53, 0.40, 0.06]),
            "{json}"
        );
        let retimed = torch_table(&cols);
        assert!(
            retimed.contains("  note: timing was disturbed (spread 53%): measured 3 times, kept the steadiest (±6%)\n"),
            "{retimed}"
        );
        for once in [Some(Measured::of(vec![0.06])), None] {
            let table = torch_table(&columns(once));
            assert!(!table.contains("note:"), "{table}");
        }
    }
}
