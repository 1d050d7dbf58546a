//! `kernel-lsp report FILE [--kernel K] [-o OUT.html]`: the kernel's optimization history
//! (`.kernel-lsp/history/`) as one self-contained HTML page with an SVG chart of the time
//! per step and the table of every attempt. Reads only; writes only OUT.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::optimize::history;
use crate::optimize::report::{self, KernelHistory};

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// The CUDA or Triton file whose kernels were optimized.
    pub file: PathBuf,
    /// Only this kernel (default: every kernel of FILE with a history).
    #[arg(long)]
    pub kernel: Option<String>,
    /// Where to write the page (default: `.kernel-lsp/report-<file>.html` at the
    /// workspace root).
    #[arg(short, long, value_name = "OUT")]
    pub output: Option<PathBuf>,
}

pub fn run(args: &ReportArgs) -> ExitCode {
    super::finish(run_inner(args))
}

fn run_inner(args: &ReportArgs) -> Result<(), String> {
    let shown = args.file.display().to_string();
    if !args.file.is_file() {
        return Err(format!("{shown}: error: no such file"));
    }
    let names = match &args.kernel {
        Some(k) => vec![k.clone()],
        None => history::kernels(&args.file),
    };
    let mut loaded = Vec::new();
    for name in names {
        let (steps, bad) =
            history::read(&args.file, &name).map_err(|e| format!("{shown}: error: {e}"))?;
        if bad > 0 {
            eprintln!("{shown}: warning: {bad} lines of `{name}`'s history could not be read");
        }
        if steps.is_empty() && args.kernel.is_some() {
            return Err(format!(
                "{shown}: error: `{name}` has no history; run `kernel-lsp optimize {shown} --kernel {name}` first"
            ));
        }
        let headlines = history::headlines(&args.file, &name);
        loaded.push((name, steps, headlines));
    }
    if loaded.is_empty() {
        return Err(format!(
            "{shown}: error: no kernel of this file has a history; run `kernel-lsp optimize {shown}` first"
        ));
    }
    let kernels: Vec<KernelHistory<'_>> = loaded
        .iter()
        .map(|(name, steps, headlines)| KernelHistory {
            name,
            steps,
            headlines,
        })
        .collect();
    let page = report::html(&shown, &kernels);
    let out = args.output.clone().unwrap_or_else(|| {
        let name = args
            .file
            .file_name()
            .map_or("file".into(), |n| n.to_string_lossy().to_string());
        history::workspace_root(&args.file)
            .join(".kernel-lsp")
            .join(format!("report-{name}.html"))
    });
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(&out, page)
        .map_err(|e| format!("{}: error: cannot write: {e}", out.display()))?;
    // The trees go to the terminal too: the quickest view of what a run explored.
    for (name, steps, headlines) in &loaded {
        for t in report::trees(steps, headlines) {
            println!("{name}: {t}");
        }
    }
    let ran = |s: &[crate::optimize::StepRecord]| {
        s.iter()
            .filter(|s| s.outcome != crate::optimize::Outcome::NotApplicable)
            .count()
    };
    let steps: usize = loaded.iter().map(|(_, s, _)| ran(s)).sum();
    eprintln!(
        "{shown}: report of {} kernel(s), {steps} steps that ran, written to {}",
        loaded.len(),
        out.display()
    );
    Ok(())
}
