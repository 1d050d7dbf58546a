//! `kernel-lsp apply FILE [--kernel K] [--run R] [--version V]`: write a version that a
//! recorded run made (default: the last run's answer) into FILE, keeping a backup, with
//! no new search. The run's versions come from the kernel's history; the kernel in FILE
//! must still be one of that run's versions (`optimize::apply`), so text written since
//! the run is never overwritten.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::optimize::apply::{self, RunEnd};
use crate::optimize::history;
use crate::optimize::report::utc;
use crate::syntax;

#[derive(clap::Args, Debug)]
pub struct ApplyArgs {
    /// The CUDA or Triton file whose kernel was optimized.
    pub file: PathBuf,
    /// The kernel (default: the file's only kernel with a recorded run).
    #[arg(long, value_name = "K")]
    pub kernel: Option<String>,
    /// The run, by its id (`kernel-lsp report` and `optimize` print it; default: the last).
    #[arg(long)]
    pub run: Option<u64>,
    /// The version of that run, `v2` or `2` (default: the run's best).
    #[arg(long, value_name = "V")]
    pub version: Option<String>,
}

pub fn run(args: &ApplyArgs) -> ExitCode {
    super::finish(run_inner(args))
}

fn run_inner(args: &ApplyArgs) -> Result<(), String> {
    let shown = args.file.display().to_string();
    let lang = syntax::lang_for(&shown, None)
        .ok_or_else(|| format!("{shown}: error: not a CUDA (.cu, .cuh) or Python file"))?;
    let text = super::check::read_source(&args.file).map_err(|e| format!("{shown}: error: {e}"))?;
    let kernel = pick_kernel(&args.file, args.kernel.as_deref())?;
    let end = pick_run(&args.file, &kernel, args.run)?;
    let node = match &args.version {
        Some(v) => v.trim_start_matches('v').parse::<usize>().map_err(|_| {
            format!("{shown}: error: --version `{v}` is not a version; write v2 or 2")
        })?,
        None => end.headline.best_node,
    };
    let which = format!(
        "v{node} of run {} ({})",
        end.headline.run,
        utc(end.headline.run)
    );
    let new = apply::version_text(lang, &text, &kernel, &end, node)
        .map_err(|e| format!("{shown}: error: {e}"))?;
    let Some(new) = new else {
        eprintln!("{kernel}: {shown} already holds {which}; nothing to write");
        return Ok(());
    };
    let backup = write_with_backup(&args.file, &text, &new)?;
    eprintln!("{kernel}: applied {which} (backup: {})", backup.display());
    if node == end.headline.best_node {
        eprintln!("{kernel}: {}", end.headline.describe());
    }
    Ok(())
}

/// The kernel named, else the file's only kernel with a recorded run.
fn pick_kernel(file: &Path, named: Option<&str>) -> Result<String, String> {
    if let Some(k) = named {
        return Ok(k.to_string());
    }
    let shown = file.display();
    let with_runs: Vec<String> = history::kernels(file)
        .into_iter()
        .filter(|k| !history::run_ends(file, k).is_empty())
        .collect();
    match with_runs.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(format!(
            "{shown}: error: no recorded run to apply; run `kernel-lsp optimize {shown}` first"
        )),
        many => Err(format!(
            "{shown}: error: several kernels have recorded runs ({}); pick one with --kernel",
            many.join(", ")
        )),
    }
}

/// Run `id` of the kernel's history, else its last run.
fn pick_run(file: &Path, kernel: &str, id: Option<u64>) -> Result<RunEnd, String> {
    let shown = file.display();
    let mut ends = history::run_ends(file, kernel);
    if ends.is_empty() {
        return Err(format!(
            "{shown}: error: `{kernel}` has no recorded run; run `kernel-lsp optimize {shown} --kernel {kernel}` first"
        ));
    }
    let Some(id) = id else {
        return Ok(ends.pop().expect("not empty"));
    };
    let listed: Vec<String> = ends
        .iter()
        .map(|e| format!("{} ({})", e.headline.run, utc(e.headline.run)))
        .collect();
    ends.into_iter()
        .find(|e| e.headline.run == id)
        .ok_or_else(|| {
            format!(
                "{shown}: error: `{kernel}` has no run {id}; its runs are {}",
                listed.join(", ")
            )
        })
}

/// Writes `new` into `file` after saving `old` as `FILE.orig`; refuses when the file no
/// longer holds `old`. Returns the backup's path.
pub fn write_with_backup(file: &Path, old: &str, new: &str) -> Result<PathBuf, String> {
    let shown = file.display();
    let now = std::fs::read_to_string(file)
        .map_err(|e| format!("{shown}: error: cannot re-read: {e}"))?;
    if now != old {
        return Err(format!(
            "{shown}: error: the file changed meanwhile; nothing was written (the versions are in the history)"
        ));
    }
    let backup = PathBuf::from(format!("{shown}.orig"));
    std::fs::write(&backup, old)
        .map_err(|e| format!("{}: error: cannot write the backup: {e}", backup.display()))?;
    std::fs::write(file, new).map_err(|e| format!("{shown}: error: cannot write: {e}"))?;
    Ok(backup)
}
