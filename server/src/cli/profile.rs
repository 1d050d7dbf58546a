//! `kernel-lsp profile FILE [--kernel K] [--json]`: one kernel's Nsight Compute profile
//! (issue #14) as a table of metrics and a one-line diagnosis. It runs `ncu` around
//! `kernel-lsp bench FILE --kernel K` on this machine (the worker is a child process:
//! `--target-processes all`), with the clocks left alone (`--clock-control none`), the
//! metric list of `profile::metrics` and the raw CSV page written to a temporary log file,
//! then reports the launch with the most threads (the spec's largest case). Never on the
//! timing path: `bench` and `optimize` times come from their own runs.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::profile;
use crate::syntax::Lang;
use crate::toolchain::ncu;

#[derive(clap::Args, Debug)]
pub struct ProfileArgs {
    /// The CUDA or Triton file.
    pub file: PathBuf,
    /// The kernel to profile (default: the file's only kernel with a @bench spec).
    #[arg(long)]
    pub kernel: Option<String>,
    /// Print the profile as JSON.
    #[arg(long)]
    pub json: bool,
    /// The `ncu` to run (default: KERNEL_LSP_NCU, then PATH, then the CUDA toolkit).
    #[arg(long, value_name = "PATH")]
    pub ncu: Option<PathBuf>,
}

pub fn run(args: &ProfileArgs) -> ExitCode {
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(m) => {
            eprintln!("{m}");
            ExitCode::from(1)
        }
    }
}

fn run_inner(args: &ProfileArgs) -> Result<(), String> {
    let shown = args.file.display().to_string();
    let lang = crate::syntax::lang_for(&shown, None)
        .ok_or_else(|| format!("{shown}: error: not a CUDA (.cu, .cuh) or Python file"))?;
    let text = super::check::read_source(&args.file).map_err(|e| format!("{shown}: error: {e}"))?;
    let kernel = match &args.kernel {
        Some(k) => k.clone(),
        None => {
            let doc = crate::document::Document::new(lang, 0, &text);
            let tree = doc
                .tree()
                .ok_or(format!("{shown}: error: the parser gave up"))?;
            let model = crate::syntax::analyze(lang, &text, tree);
            let specced: Vec<&str> = model
                .kernels
                .iter()
                .filter(|k| !k.spec.lines.is_empty())
                .map(|k| k.name.as_str())
                .collect();
            match specced.as_slice() {
                [one] => one.to_string(),
                [] => return Err(format!("{shown}: error: no kernel with a @bench spec")),
                many => {
                    return Err(format!(
                        "{shown}: error: several kernels have a @bench spec ({}); pick one with --kernel",
                        many.join(", ")
                    ))
                }
            }
        }
    };
    let exe = ncu::locate(args.ncu.as_deref()).ok_or_else(|| {
        format!("{shown}: error: Nsight Compute (`ncu`) was not found; install it with the CUDA toolkit, put it on PATH, or set KERNEL_LSP_NCU")
    })?;
    eprintln!(
        "{kernel}: profiling with {} (one extra run under the profiler; clocks left alone)",
        exe.display()
    );
    let profiles =
        ncu::profile_file(&exe, &args.file, &kernel).map_err(|e| format!("{shown}: error: {e}"))?;
    let p = profile::pick(&profiles).ok_or(format!("{shown}: error: no profile"))?;
    if args.json {
        let mut v = serde_json::to_value(p).expect("a profile serializes");
        v["diagnosis"] = serde_json::Value::String(p.diagnosis());
        v["short"] = serde_json::Value::String(p.short());
        println!("{}", serde_json::to_string_pretty(&v).expect("JSON"));
    } else {
        let width = p
            .table()
            .iter()
            .map(|(k, _)| k.chars().count())
            .max()
            .unwrap_or(0);
        for (k, v) in p.table() {
            println!("{k:<width$}  {v}");
        }
        println!("diagnosis: {}", p.diagnosis());
    }
    if lang == Lang::Triton {
        eprintln!("{kernel}: profiled as the CUDA kernel Triton compiled it to");
    }
    Ok(())
}
