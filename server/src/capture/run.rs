//! Running the user's command with the capture hook: a temporary folder holds `hook.py`
//! as `sitecustomize.py` and is put first on the child's PYTHONPATH, with the record file
//! and the options in `KERNEL_LSP_CAPTURE_*` variables. Only the child's environment is
//! set; nothing is installed or written in the user's environment, and the folder is
//! removed afterwards. This is the one I/O edge of capture.
//!
//! CUDA: when the working folder's `.cu`/`.cuh` sources define kernels, the preload shim
//! (`shim.c`) is compiled there with the system C compiler (`$CC`, else `cc`) and put in
//! the child's LD_PRELOAD, told the kernels' names, with PyTorch's caching allocator off
//! (`PYTORCH_NO_CUDA_MEMORY_CACHING=1`: each tensor is its own allocation). Its records
//! are resolved against those sources (`cuda::resolve`) into the same launches.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::cuda;
use super::record::{self, Records};

/// The hook's source.
pub const HOOK_PY: &str = include_str!("hook.py");

/// The CUDA preload shim's source.
pub const SHIM_C: &str = include_str!("shim.c");

/// Bytes of device memory one CUDA launch may have snapshotted (each allocation it
/// points into, three copies on the host).
pub const MAX_BYTES: u64 = 256 << 20;

/// How to run one capture.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The command and its arguments, run without a shell.
    pub command: Vec<String>,
    /// Its working folder (default: this process's).
    pub cwd: Option<PathBuf>,
    /// Record only this kernel.
    pub kernel: Option<String>,
    /// Most distinct launches recorded per kernel.
    pub max_cases: usize,
    /// The child's stdout and stderr go to this process's stderr (the CLI); otherwise
    /// they are kept and their last lines returned (the editor, whose stdout is the LSP
    /// channel).
    pub show_output: bool,
}

/// What the run left.
#[derive(Debug)]
pub struct RunOutcome {
    pub records: Records,
    /// The command's exit status (`None`: killed by a signal).
    pub status: Option<i32>,
    /// The last lines of its output, when it was not shown.
    pub output_tail: String,
    /// What the run could not do (no C compiler for the CUDA shim).
    pub notes: Vec<String>,
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir() -> Result<TempDir, String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir =
        std::env::temp_dir().join(format!("kernel-lsp-capture-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(TempDir(dir))
}

/// PYTHONPATH with `first` in front of what the environment has.
fn python_path(first: &Path) -> std::ffi::OsString {
    let mut paths = vec![first.to_path_buf()];
    if let Some(old) = std::env::var_os("PYTHONPATH") {
        paths.extend(std::env::split_paths(&old));
    }
    std::env::join_paths(paths).unwrap_or_else(|_| first.as_os_str().to_owned())
}

/// Runs the command with the hook and reads its records.
pub fn run(opts: &RunOptions) -> Result<RunOutcome, String> {
    let (program, args) = opts
        .command
        .split_first()
        .ok_or("no command to run: give one after `--`")?;
    let dir = temp_dir()?;
    std::fs::write(dir.0.join("sitecustomize.py"), HOOK_PY)
        .map_err(|e| format!("cannot write the capture hook: {e}"))?;
    let out_file = dir.0.join("records.jsonl");
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("PYTHONPATH", python_path(&dir.0))
        .env("KERNEL_LSP_CAPTURE_OUT", &out_file)
        .env(
            "KERNEL_LSP_CAPTURE_MAX_CASES",
            opts.max_cases.max(1).to_string(),
        )
        .stdin(Stdio::null());
    match &opts.kernel {
        Some(k) => cmd.env("KERNEL_LSP_CAPTURE_KERNEL", k),
        None => cmd.env_remove("KERNEL_LSP_CAPTURE_KERNEL"),
    };
    if let Some(cwd) = &opts.cwd {
        cmd.current_dir(cwd);
    }
    let root = match &opts.cwd {
        Some(c) => c.clone(),
        None => std::env::current_dir().map_err(|e| format!("no working folder: {e}"))?,
    };
    let sources = cuda_sources(&root);
    let mut notes = Vec::new();
    if let Err(e) = cuda_env(&mut cmd, &dir.0, &sources, opts.kernel.as_deref()) {
        notes.push(format!("CUDA launches are not captured: {e}"));
    }
    let (status, output_tail) = if opts.show_output {
        // The child's stdout goes to stderr: stdout is for the capture's own report.
        let err = std::io::stderr();
        let out = std::os::fd::AsFd::as_fd(&err)
            .try_clone_to_owned()
            .map_err(|e| format!("cannot share stderr: {e}"))?;
        cmd.stdout(Stdio::from(out)).stderr(Stdio::inherit());
        let st = cmd.status().map_err(|e| spawn_error(program, &e))?;
        (st.code(), String::new())
    } else {
        let o = cmd.output().map_err(|e| spawn_error(program, &e))?;
        let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&o.stderr));
        (o.status.code(), tail(&text, 20))
    };
    let text = std::fs::read_to_string(&out_file).unwrap_or_default();
    let mut records = record::parse_lines(&text);
    let (launches, counts) = cuda::resolve(&records.cuda, &records.cuda_counts, &sources);
    records.launches.extend(launches);
    records.counts.extend(counts);
    Ok(RunOutcome {
        records,
        status,
        output_tail,
        notes,
    })
}

/// Sets the child up for CUDA capture when the sources define kernels.
fn cuda_env(
    cmd: &mut Command,
    dir: &Path,
    sources: &[cuda::SourceKernel],
    only: Option<&str>,
) -> Result<(), String> {
    let mut names: Vec<&str> = sources
        .iter()
        .map(|k| k.kernel.name.as_str())
        .filter(|n| only.is_none_or(|o| o == *n))
        .collect();
    names.sort_unstable();
    names.dedup();
    if names.is_empty() {
        return Ok(());
    }
    let lib = compile_shim(dir)?;
    let mut preload = lib.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    cmd.env("LD_PRELOAD", preload)
        .env("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
        .env("KERNEL_LSP_CAPTURE_CUDA_NAMES", names.join(","))
        .env("KERNEL_LSP_CAPTURE_MAX_BYTES", MAX_BYTES.to_string());
    Ok(())
}

/// Compiles the shim into `dir` with `$CC` (else `cc`); the library's path.
pub fn compile_shim(dir: &Path) -> Result<PathBuf, String> {
    let src = dir.join("kernel_lsp_capture.c");
    let lib = dir.join("libkernel_lsp_capture.so");
    std::fs::write(&src, SHIM_C).map_err(|e| format!("cannot write the shim: {e}"))?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .arg(&src)
        .args(["-ldl", "-lpthread", "-lm"])
        .output()
        .map_err(|e| format!("no C compiler to build the launch shim (`{cc}`: {e}); set CC"))?;
    if !out.status.success() {
        return Err(format!(
            "`{cc}` could not build the launch shim: {}",
            tail(&String::from_utf8_lossy(&out.stderr), 5)
        ));
    }
    Ok(lib)
}

/// The kernels of the `.cu`/`.cuh` files under `root` (hidden folders, build outputs and
/// virtual environments left out; at most 2000 files of at most 4 MB).
pub fn cuda_sources(root: &Path) -> Vec<cuda::SourceKernel> {
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0u32)];
    let mut files = 0;
    while let Some((d, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                let skip = name.starts_with('.')
                    || matches!(
                        name.as_str(),
                        "target"
                            | "build"
                            | "node_modules"
                            | "__pycache__"
                            | "venv"
                            | "site-packages"
                    );
                if !skip && depth < 12 {
                    stack.push((p, depth + 1));
                }
            } else if ft.is_file() && (name.ends_with(".cu") || name.ends_with(".cuh")) {
                files += 1;
                if files > 2000 {
                    return out;
                }
                let small = e.metadata().is_ok_and(|m| m.len() <= 4 << 20);
                if let (true, Ok(text)) = (small, std::fs::read_to_string(&p)) {
                    out.extend(cuda::kernels_of(&p.to_string_lossy(), &text));
                }
            }
        }
    }
    out
}

fn spawn_error(program: &str, e: &std::io::Error) -> String {
    format!("cannot run `{program}`: {e}")
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
#[path = "shim_tests.rs"]
mod shim_tests;
