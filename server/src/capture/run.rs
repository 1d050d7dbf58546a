//! Running the user's command with the capture hook: a temporary folder holds `hook.py`
//! as `sitecustomize.py` and is put first on the child's PYTHONPATH, with the record file
//! and the options in `KERNEL_LSP_CAPTURE_*` variables. Only the child's environment is
//! set; nothing is installed or written in the user's environment, and the folder is
//! removed afterwards. This is the one I/O edge of capture.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::record::{self, Records};

/// The hook's source.
pub const HOOK_PY: &str = include_str!("hook.py");

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
    Ok(RunOutcome {
        records: record::parse_lines(&text),
        status,
        output_tail,
    })
}

fn spawn_error(program: &str, e: &std::io::Error) -> String {
    format!("cannot run `{program}`: {e}")
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
