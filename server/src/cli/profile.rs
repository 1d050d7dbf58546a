//! `kernel-lsp profile FILE [--kernel K] [--json]`: one kernel's Nsight Compute profile
//! (issue #14) as a table of metrics and a one-line diagnosis. It runs `ncu` around
//! `kernel-lsp bench FILE --kernel K` on this machine (the worker is a child process:
//! `--target-processes all`), with the clocks left alone (`--clock-control none`), the
//! metric list of `profile::metrics` and the raw CSV page written to a temporary log file,
//! then reports the launch with the most threads (the spec's largest case). Never on the
//! timing path: `bench` and `optimize` times come from their own runs.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::profile::{self, Profile};
use crate::syntax::Lang;

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

/// `ncu` from the setting, `KERNEL_LSP_NCU`, PATH, `CUDA_HOME`/`CUDA_PATH` or
/// `/usr/local/cuda`; None when there is none.
pub fn locate_ncu(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return p.is_file().then(|| p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("KERNEL_LSP_NCU") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for v in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = std::env::var_os(v) {
            dirs.push(PathBuf::from(root).join("bin"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/bin"));
    dirs.into_iter()
        .map(|d| d.join("ncu"))
        .find(|p| p.is_file())
}

/// The kernel name as ncu matches it: the whole name (Triton kernels keep theirs).
fn kernel_filter(kernel: &str) -> String {
    format!("regex:^{kernel}$")
}

/// Profile `kernel` of `file` (a file on disk, as written) with `ncu`; every profiled
/// launch, or why there is none.
pub fn profile_file(ncu: &Path, file: &Path, kernel: &str) -> Result<Vec<Profile>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let log = std::env::temp_dir().join(format!(
        "kernel-lsp-ncu-{}-{}.csv",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let out = Command::new(ncu)
        .args([
            "--target-processes",
            "all",
            "--clock-control",
            "none",
            "--csv",
            "--page",
            "raw",
            "--metrics",
            &profile::metrics().join(","),
            "-k",
            &kernel_filter(kernel),
            "--launch-count",
            "6",
            "--log-file",
        ])
        .arg(&log)
        .arg(&exe)
        .arg("bench")
        .arg(file)
        .args(["--kernel", kernel])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", ncu.display()))?;
    let csv = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    let all = format!(
        "{csv}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    profile::parse_raw_csv(&all)
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
    let ncu = locate_ncu(args.ncu.as_deref()).ok_or_else(|| {
        format!("{shown}: error: Nsight Compute (`ncu`) was not found; install it with the CUDA toolkit, put it on PATH, or set KERNEL_LSP_NCU")
    })?;
    eprintln!(
        "{kernel}: profiling with {} (one extra run under the profiler; clocks left alone)",
        ncu.display()
    );
    let profiles =
        profile_file(&ncu, &args.file, &kernel).map_err(|e| format!("{shown}: error: {e}"))?;
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
