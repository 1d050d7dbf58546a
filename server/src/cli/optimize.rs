//! `kernel-lsp optimize FILE [--kernel K] [--steps N] [--apply] [--json]`: run the step
//! loop on one kernel through a worker, print a table per step, append the steps to the
//! kernel's history in `.kernel-lsp/`, and with `--apply` write the best verified
//! version back (keeping a backup). Without `--apply` the author's file is not touched.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::analysis::{self, AnalyzeOptions};
use crate::document::Document;
use crate::optimize::{self, history, OptimizeRun, Outcome};
use crate::syntax::{self, Lang};
use crate::worker::pool::WorkerPool;

#[derive(clap::Args, Debug)]
pub struct OptimizeArgs {
    /// The CUDA or Triton file.
    pub file: PathBuf,
    /// The kernel to optimize (default: the file's only kernel with a @bench spec).
    #[arg(long)]
    pub kernel: Option<String>,
    /// Steps to try.
    #[arg(long, default_value_t = 8)]
    pub steps: usize,
    /// Write the best verified version into FILE (a backup is kept as FILE.orig).
    #[arg(long)]
    pub apply: bool,
    /// Print the run as JSON.
    #[arg(long)]
    pub json: bool,
    /// The command that starts a worker, e.g. "ssh gpu-box kernel-lsp worker".
    #[arg(long, value_name = "CMD")]
    pub worker: Option<String>,
    /// Base seed for verification inputs.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
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
    let kernel = match &args.kernel {
        Some(k) => k.clone(),
        None => {
            let doc = Document::new(lang, 0, &text);
            let a = analysis::analyze(lang, &text, doc.tree(), &AnalyzeOptions::default());
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
    let config = super::device::pool_config(args.worker.as_deref())?;
    let rt = super::device::runtime()?;
    let pool = WorkerPool::new(config);
    let run = rt.block_on(async {
        let mut progress = |s: &str| eprintln!("{kernel}: {s}");
        let r = optimize::optimize(
            &pool,
            lang,
            &text,
            &kernel,
            args.steps,
            args.seed,
            &mut progress,
        )
        .await;
        pool.shutdown().await;
        r
    });
    let run = run.map_err(|e| format!("{shown}: error: {e}"))?;
    match history::append(&args.file, &kernel, &run.steps) {
        Ok(p) => eprintln!("{kernel}: history appended to {}", p.display()),
        Err(e) => eprintln!("{kernel}: warning: history not written: {e}"),
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&run).expect("run serializes")
        );
    } else {
        print!("{}", table(&run));
    }
    if let Some(new_text) = &run.new_text {
        let change: Vec<String> = run
            .values
            .iter()
            .map(|(k, v)| format!("{k} = {v}"))
            .collect();
        if args.apply {
            // Refuse if the file changed while the run was going on.
            let now = std::fs::read_to_string(&args.file)
                .map_err(|e| format!("{shown}: error: cannot re-read: {e}"))?;
            if now != text {
                return Err(format!("{shown}: error: the file changed during the run; nothing was written (the result is in the history)"));
            }
            let backup = PathBuf::from(format!("{shown}.orig"));
            std::fs::write(&backup, &text).map_err(|e| {
                format!("{}: error: cannot write the backup: {e}", backup.display())
            })?;
            std::fs::write(&args.file, new_text)
                .map_err(|e| format!("{shown}: error: cannot write: {e}"))?;
            eprintln!(
                "{kernel}: applied {} (backup: {})",
                change.join(", "),
                backup.display()
            );
        } else {
            eprintln!(
                "{kernel}: best verified version sets {}; run again with --apply to write it",
                change.join(", ")
            );
        }
    } else {
        eprintln!("{kernel}: no verified improvement; the file is unchanged");
    }
    Ok(ExitCode::SUCCESS)
}

fn table(run: &OptimizeRun) -> String {
    let mut out = String::from(
        "step  strategy        outcome   time (ms)  speedup  cumulative  candidates\n",
    );
    for s in &run.steps {
        let outcome = match s.outcome {
            Outcome::Accepted => "accepted",
            Outcome::NoGain => "no gain",
            Outcome::Failed => "failed",
        };
        let time = s
            .best_ms
            .or(s.before_ms)
            .map_or("-".to_string(), |t| format!("{t:.4}"));
        let cands: Vec<String> = s
            .candidates
            .iter()
            .map(|c| match (c.median_ms, &c.message) {
                (Some(ms), _) => format!("{} {ms:.4} ms", c.label),
                (None, Some(m)) => format!("{} rejected: {m}", c.label),
                (None, None) => c.label.clone(),
            })
            .collect();
        out.push_str(&format!(
            "{:<5} {:<15} {:<9} {:<10} {:<8} {:<11} {}\n",
            s.step,
            s.strategy,
            outcome,
            time,
            format!("{:.2}×", s.speedup),
            format!("{:.2}×", s.cumulative),
            cands.join("; ")
        ));
    }
    if run.steps.is_empty() {
        out.push_str("(no step applies: the embedded catalog has only the tunable sweep so far, and this spec has no `tune` line with two or more values)\n");
    }
    if run.steps.iter().any(|s| s.interpreter) {
        out.push_str("note: interpreter timings: Triton ran on the CPU (TRITON_INTERPRET=1); results are verified for real, times are not GPU times\n");
    }
    out
}
