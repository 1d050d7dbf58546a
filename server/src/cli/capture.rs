//! `kernel-lsp capture [--kernel K] [--max-cases N] [--apply] -- COMMAND...`: run the
//! user's own command (a script, a test, `pytest -k ...`) with the capture hook, and
//! write a `@bench` spec for every Triton or CUDA kernel it launched (issue #32; docs/spec.md,
//! "Specs from a program's own launches"). Without `--apply` the specs are printed;
//! with it they are written above the kernels (a backup of each file is kept as
//! FILE.orig). Only files under the working folder are written, never a library's.
//! The engine is `crate::capture`, which the editor's action calls too.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;

use crate::capture::{self, place, run, InferOptions, KernelCapture};

#[derive(clap::Args, Debug)]
pub struct CaptureArgs {
    /// Record only this kernel.
    #[arg(long, value_name = "NAME")]
    pub kernel: Option<String>,
    /// Most distinct launches of one kernel that become cases.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub max_cases: usize,
    /// Do not add the derived odd-sized case.
    #[arg(long)]
    pub no_odd_case: bool,
    /// With --kernel: the spec's reference, e.g. "torch: torch.softmax(x_ptr, dim=-1)"
    /// (default: the kernel as captured is the baseline).
    #[arg(long, value_name = "REF", requires = "kernel")]
    pub reference: Option<String>,
    /// Write the specs above the kernels (each file's backup kept as FILE.orig).
    #[arg(long)]
    pub apply: bool,
    /// With --apply: write over a spec a kernel already has.
    #[arg(long, requires = "apply")]
    pub replace: bool,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// One kernel in the report.
#[derive(Debug, Serialize)]
struct Row {
    file: String,
    kernel: String,
    launches: u64,
    recorded: usize,
    cases: usize,
    spec: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refused: Option<String>,
    notes: Vec<String>,
    written: bool,
}

pub fn run(args: &CaptureArgs) -> ExitCode {
    let opts = run::RunOptions {
        command: args.command.clone(),
        cwd: None,
        kernel: args.kernel.clone(),
        max_cases: args.max_cases,
        show_output: true,
    };
    let outcome = match run::run(&opts) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("kernel-lsp capture: {e}");
            return ExitCode::from(2);
        }
    };
    let infer = InferOptions {
        max_cases: args.max_cases,
        odd_case: !args.no_odd_case,
    };
    for n in &outcome.notes {
        eprintln!("kernel-lsp capture: {n}");
    }
    let mut kernels = capture::capture_specs(&outcome.records, &infer);
    if let Some(r) = &args.reference {
        for k in kernels.iter_mut() {
            if let Ok(s) = &mut k.spec {
                s.lines.push(format!("reference = {r}"));
            }
        }
    }
    let cwd = std::env::current_dir().unwrap_or_default();
    let rows = report(&kernels, &cwd, args);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("rows serialize")
        );
    } else {
        print!("{}", table(&rows, &cwd));
    }
    if outcome.status != Some(0) {
        eprintln!(
            "kernel-lsp capture: the command exited with {}; the launches before it are above",
            outcome
                .status
                .map_or("a signal".to_string(), |s| format!("status {s}"))
        );
        return ExitCode::from(1);
    }
    if kernels.is_empty() {
        eprintln!(
            "kernel-lsp capture: no kernel launch was recorded{}; does the command launch \
             @triton.jit kernels, or CUDA kernels of the .cu sources under this folder?",
            args.kernel
                .as_ref()
                .map_or(String::new(), |k| format!(" of `{k}`"))
        );
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// Writes (with --apply) and describes every kernel.
fn report(kernels: &[KernelCapture], cwd: &Path, args: &CaptureArgs) -> Vec<Row> {
    let mut rows: Vec<Row> = kernels.iter().map(row).collect();
    if !args.apply {
        return rows;
    }
    let mut files: Vec<&str> = kernels.iter().map(|k| k.file.as_str()).collect();
    files.dedup();
    for file in files {
        let in_file: Vec<usize> = (0..rows.len())
            .filter(|&i| rows[i].file == file && rows[i].refused.is_none())
            .collect();
        if in_file.is_empty() {
            continue;
        }
        match write_file(Path::new(file), cwd, &in_file, &rows, args.replace) {
            Ok(done) => {
                for (i, note) in done {
                    match note {
                        None => rows[i].written = true,
                        Some(n) => rows[i].notes.push(n),
                    }
                }
            }
            Err(e) => {
                for i in in_file {
                    rows[i].notes.push(format!("not written: {e}"));
                }
            }
        }
    }
    rows
}

fn row(k: &KernelCapture) -> Row {
    let (spec, cases, refused, notes) = match &k.spec {
        Ok(s) => (s.lines.clone(), s.cases, None, s.notes.clone()),
        Err(e) => (Vec::new(), 0, Some(e.clone()), Vec::new()),
    };
    Row {
        file: k.file.clone(),
        kernel: k.kernel.clone(),
        launches: k.launches,
        recorded: k.recorded,
        cases,
        spec,
        refused,
        notes,
        written: false,
    }
}

/// Writes the specs of `rows[which]` into `file`; per row, `None` when written, else why not.
fn write_file(
    file: &Path,
    cwd: &Path,
    which: &[usize],
    rows: &[Row],
    replace: bool,
) -> Result<Vec<(usize, Option<String>)>, String> {
    if !file.starts_with(cwd) {
        return Err("the file is outside the working folder (a library's kernel)".into());
    }
    let text = super::check::read_source(&file.to_path_buf())?;
    let specs: Vec<(String, Vec<String>)> = which
        .iter()
        .map(|&i| (rows[i].kernel.clone(), rows[i].spec.clone()))
        .collect();
    let lang = crate::syntax::lang_for(&file.to_string_lossy(), None)
        .unwrap_or(crate::syntax::Lang::Triton);
    let (edits, skipped) = place::edits(lang, &text, &specs, replace);
    let new = place::apply(&text, &edits);
    if new != text {
        let backup = PathBuf::from(format!("{}.orig", file.display()));
        if !backup.exists() {
            std::fs::write(&backup, &text)
                .map_err(|e| format!("cannot write {}: {e}", backup.display()))?;
        }
        std::fs::write(file, &new).map_err(|e| format!("cannot write: {e}"))?;
    }
    Ok(which
        .iter()
        .map(|&i| {
            let why = skipped
                .iter()
                .find(|(k, _)| *k == rows[i].kernel)
                .map(|(_, w)| format!("not written: {w}"));
            (i, why)
        })
        .collect())
}

fn shown(file: &str, cwd: &Path) -> String {
    Path::new(file)
        .strip_prefix(cwd)
        .map_or(file.to_string(), |p| p.display().to_string())
}

fn table(rows: &[Row], cwd: &Path) -> String {
    let mut out = String::new();
    for r in rows {
        let head = format!("{}: `{}`", shown(&r.file, cwd), r.kernel);
        match &r.refused {
            Some(why) => {
                out.push_str(&format!(
                    "{head}: refused ({} launches): {why}\n",
                    r.launches
                ));
            }
            None => {
                let state = if r.written { ", written" } else { "" };
                out.push_str(&format!(
                    "{head}: {} launches, {} recorded -> {} cases{state}\n",
                    r.launches, r.recorded, r.cases
                ));
                let prefix = match crate::syntax::lang_for(&r.file, None) {
                    Some(crate::syntax::Lang::Cuda) => "//",
                    _ => "#",
                };
                for l in &r.spec {
                    out.push_str(&format!("    {prefix} @bench {l}\n"));
                }
            }
        }
        for n in &r.notes {
            out.push_str(&format!("    note: {n}\n"));
        }
    }
    let refused = rows.iter().filter(|r| r.refused.is_some()).count();
    out.push_str(&format!(
        "{} kernels: {} specs, {} refused\n",
        rows.len(),
        rows.len() - refused,
        refused
    ));
    out
}
