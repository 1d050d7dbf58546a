//! The Triton backend of the worker: runs Triton versions through a Python helper
//! (`helper.py`, embedded with `include_str!`). User code never runs in this process: the
//! helper is a child `python3 -u helper.py` that imports torch and triton, imports each
//! version's module from its source text, builds the inputs, launches, compares and times
//! (docs/spec.md, "What the tool does with it").
//!
//! Helper protocol (JSON lines over the child's stdin/stdout): on start the helper writes
//! one `{"hello": {...}}` line (versions, CUDA, interpreter mode, or the module that failed
//! to import, after which it exits). Then each `Request` line of `worker::protocol` is
//! forwarded as is, and the helper answers with the protocol's own `Reply` lines: zero or
//! more `progress`, then one `ok` or `error`. The helper's stderr is drained into a tail
//! kept for error messages. A helper that dies is reported with that tail and started
//! again on the next request. After a CUDA fault its context is gone: it marks its final
//! reply with `"helper_exiting": true` (an extra field the protocol types ignore), exits,
//! and the next request starts a fresh one.
//!
//! Not here: the request loop (`worker::serve`) and the pool; the CUDA backend.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::backend::Backend;
use super::protocol::{
    op_name, BackendStatus, ErrorKind, Op, OpResult, Reply, ReplyBody, Request, WorkerError,
};
use crate::syntax::Lang;

/// The helper's source, written to a private temporary directory when the helper starts.
pub const HELPER_PY: &str = include_str!("helper.py");

/// Bytes of the helper's stderr kept for error messages.
const STDERR_TAIL: usize = 8 * 1024;

/// Names both ways to pick the interpreter: the editors' setting and the CLI's variable.
const SETTING_HINT: &str = "set the editor setting `kernel-lsp.python` (or `KERNEL_LSP_PYTHON` for the command line) to an interpreter with torch and triton";

/// The helper's first line.
#[derive(Clone, Debug, Deserialize)]
struct Hello {
    python: String,
    #[serde(default)]
    executable: Option<String>,
    #[serde(default)]
    torch: Option<String>,
    #[serde(default)]
    triton: Option<String>,
    #[serde(default)]
    cuda: bool,
    #[serde(default)]
    device_name: Option<String>,
    #[serde(default)]
    interpreter: bool,
    /// The module that failed to import ("torch", "triton").
    #[serde(default)]
    missing: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

/// The helper's mark on a final reply after which it exits (`helper.py`'s doc).
#[derive(Deserialize)]
struct ExitFlag {
    #[serde(default)]
    helper_exiting: bool,
}

#[derive(Deserialize)]
struct HelloLine {
    hello: Hello,
}

/// Runs Triton versions through a Python helper process, started on first use.
pub struct TritonBackend {
    python: PathBuf,
    /// Extra environment for the helper (tests set `TRITON_INTERPRET`).
    env: Vec<(String, String)>,
    helper: Option<Helper>,
    /// A helper started ahead of its first use (`Backend::prestart`), hello not read yet.
    spawned: Option<Result<Helper, WorkerError>>,
    /// The last start's outcome: the helper's hello, or why it could not start.
    started: Option<Result<Hello, WorkerError>>,
    next_id: u64,
}

impl TritonBackend {
    /// `python`: the interpreter to run (the `kernel-lsp.python` setting); else env
    /// `KERNEL_LSP_PYTHON`; else `python3` from `PATH`. Starts nothing.
    pub fn new(python: Option<PathBuf>) -> Self {
        let python = python
            .or_else(|| {
                std::env::var_os("KERNEL_LSP_PYTHON")
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            })
            .unwrap_or_else(|| PathBuf::from("python3"));
        TritonBackend {
            python,
            env: Vec::new(),
            helper: None,
            spawned: None,
            started: None,
            next_id: 1,
        }
    }

    /// Set an environment variable for the helper process (e.g. `TRITON_INTERPRET=1`).
    /// Takes effect at the next helper start.
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The interpreter this backend runs.
    pub fn python(&self) -> &Path {
        &self.python
    }

    /// Start the helper if none runs; refresh `started`.
    fn ensure_started(&mut self) -> Result<&Hello, WorkerError> {
        if let Some(h) = &mut self.helper {
            if h.child.try_wait().ok().flatten().is_some() {
                self.helper = None;
            }
        }
        let need_start = match &self.started {
            None => true,
            // A helper that started fine once but is gone now: start a fresh one.
            Some(Ok(hello)) => self.helper.is_none() && hello.missing.is_none(),
            // A failed start (python or a module missing) is not retried on every call.
            Some(Err(_)) => false,
        };
        if need_start {
            let outcome = self.start();
            self.started = Some(outcome);
        }
        match self.started.as_ref().expect("set above") {
            Ok(hello) => Ok(hello),
            Err(e) => Err(e.clone()),
        }
    }

    fn start(&mut self) -> Result<Hello, WorkerError> {
        let helper = match self.spawned.take() {
            Some(spawned) => spawned?,
            None => self.spawn_helper()?,
        };
        self.read_hello(helper)
    }

    /// Starts the helper process without waiting for its hello.
    fn spawn_helper(&self) -> Result<Helper, WorkerError> {
        // A fresh directory per start: the helper removes it when it exits, and so does
        // `Helper::reap`.
        let dir = PrivateDir::create().map_err(|e| WorkerError {
            kind: ErrorKind::Internal,
            message: format!("cannot create a temporary directory for the Triton helper: {e}"),
            log: None,
        })?;
        let script = dir.path.join("helper.py");
        std::fs::write(&script, HELPER_PY).map_err(|e| WorkerError {
            kind: ErrorKind::Internal,
            message: format!(
                "cannot write the Triton helper to {}: {e}",
                script.display()
            ),
            log: None,
        })?;
        let mut cmd = Command::new(&self.python);
        cmd.arg("-u")
            .arg(&script)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("KERNEL_LSP_TRITON_TMP", &dir.path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().map_err(|e| {
            let message = if e.kind() == std::io::ErrorKind::NotFound {
                if self.python == Path::new("python3") {
                    format!("python3 not found; {SETTING_HINT}")
                } else {
                    format!("{} not found; {SETTING_HINT}", self.python.display())
                }
            } else {
                format!(
                    "cannot start {}: {e}; {SETTING_HINT}",
                    self.python.display()
                )
            };
            WorkerError {
                kind: ErrorKind::NoBackend,
                message,
                log: None,
            }
        })?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let stderr = child.stderr.take().expect("stderr is piped");
        let tail = StderrTail::spawn(stderr);
        Ok(Helper {
            child,
            stdin,
            stdout,
            tail,
            _dir: dir,
        })
    }

    /// Waits for a started helper's hello line (its imports of torch and triton).
    fn read_hello(&mut self, mut helper: Helper) -> Result<Hello, WorkerError> {
        let mut line = String::new();
        let read = helper.stdout.read_line(&mut line);
        let hello = match read {
            Ok(n) if n > 0 => serde_json::from_str::<HelloLine>(&line).map(|h| h.hello),
            _ => {
                let (status, log) = helper.reap();
                return Err(WorkerError {
                    kind: ErrorKind::NoBackend,
                    message: format!(
                        "{} could not run the Triton helper ({}); {SETTING_HINT}",
                        self.python.display(),
                        describe_exit(status)
                    ),
                    log: Some(log),
                });
            }
        };
        let hello = match hello {
            Ok(h) => h,
            Err(e) => {
                let (_, log) = helper.reap();
                return Err(WorkerError {
                    kind: ErrorKind::NoBackend,
                    message: format!(
                        "the Triton helper under {} spoke garbage at start ({e}); {SETTING_HINT}",
                        self.python.display()
                    ),
                    log: Some(format!("{}{log}", line.trim_end())),
                });
            }
        };
        if hello.missing.is_none() {
            self.helper = Some(helper);
        } else {
            helper.reap();
        }
        Ok(hello)
    }

    fn status_of(&self, hello: &Hello) -> BackendStatus {
        let py = hello
            .executable
            .clone()
            .unwrap_or_else(|| self.python.display().to_string());
        if let Some(module) = &hello.missing {
            return BackendStatus {
                available: false,
                message: format!(
                    "{py} (Python {}) cannot import {module}: {}; install it with `{py} -m pip install {module}`, or {SETTING_HINT}",
                    hello.python,
                    hello.error.as_deref().unwrap_or("import failed"),
                ),
                interpreter: false,
            };
        }
        let versions = format!(
            "Triton {}, torch {}, Python {}",
            hello.triton.as_deref().unwrap_or("?"),
            hello.torch.as_deref().unwrap_or("?"),
            hello.python
        );
        if hello.interpreter {
            BackendStatus {
                available: true,
                message: format!(
                    "{versions} on the CPU interpreter (TRITON_INTERPRET=1; slow, timings not comparable)"
                ),
                interpreter: true,
            }
        } else if hello.cuda {
            BackendStatus {
                available: true,
                message: format!(
                    "{versions} on {}",
                    hello.device_name.as_deref().unwrap_or("a CUDA device")
                ),
                interpreter: false,
            }
        } else {
            BackendStatus {
                available: false,
                message: "no CUDA device; set TRITON_INTERPRET=1 to run Triton kernels on the CPU interpreter (slow, timings not comparable)".into(),
                interpreter: false,
            }
        }
    }

    /// Send one request to the running helper and read its replies.
    fn exchange(
        &mut self,
        op: &Op,
        progress: &mut dyn FnMut(&str),
    ) -> Result<OpResult, WorkerError> {
        let id = self.next_id;
        self.next_id += 1;
        let line = serde_json::to_string(&Request {
            id,
            time_limit_ms: None,
            op: op.clone(),
        })
        .map_err(|e| WorkerError {
            kind: ErrorKind::BadRequest,
            message: format!("cannot encode the request for the Triton helper: {e}"),
            log: None,
        })?;
        let what = op_name(op);
        let helper = self.helper.as_mut().expect("ensure_started keeps a helper");
        let sent = helper
            .stdin
            .write_all(line.as_bytes())
            .and_then(|_| helper.stdin.write_all(b"\n"))
            .and_then(|_| helper.stdin.flush());
        if sent.is_err() {
            return Err(self.lost(what, "before the request was sent"));
        }
        let mut stage = String::from("starting");
        loop {
            let helper = self.helper.as_mut().expect("still running");
            let mut buf = String::new();
            match helper.stdout.read_line(&mut buf) {
                Ok(n) if n > 0 => {}
                _ => return Err(self.lost(what, &format!("at stage `{stage}`"))),
            }
            let reply: Reply = match serde_json::from_str(&buf) {
                Ok(r) => r,
                Err(e) => {
                    let (_, log) = self.helper.take().expect("running").reap();
                    return Err(WorkerError {
                        kind: ErrorKind::Internal,
                        message: format!(
                            "the Triton helper answered `{what}` with a line kernel-lsp cannot read ({e}); it restarts on the next request"
                        ),
                        log: Some(format!("{}\n{log}", buf.trim_end())),
                    });
                }
            };
            if reply.id != id {
                continue;
            }
            let exiting = serde_json::from_str::<ExitFlag>(&buf)
                .map(|f| f.helper_exiting)
                .unwrap_or(false);
            if exiting && !matches!(reply.body, ReplyBody::Progress { .. }) {
                // A CUDA fault left the helper's context unusable: it exits now; reap it
                // so the next request starts a fresh one.
                if let Some(h) = self.helper.take() {
                    h.reap();
                }
            }
            match reply.body {
                ReplyBody::Progress { stage: s } => {
                    progress(&s);
                    stage = s;
                }
                ReplyBody::Ok { result } => return Ok(*result),
                ReplyBody::Error { error } => return Err(error),
            }
        }
    }

    /// The helper died or stopped answering: reap it, report its exit and stderr tail.
    fn lost(&mut self, what: &str, when: &str) -> WorkerError {
        let (status, log) = match self.helper.take() {
            Some(h) => h.reap(),
            None => (None, String::new()),
        };
        let last = log
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim();
        let mut message = format!(
            "the Triton helper died during `{what}` {when} ({}); a kernel that crashes the interpreter or the driver does this. It restarts on the next request",
            describe_exit(status)
        );
        if !last.is_empty() {
            message.push_str(&format!(". Last stderr line: {last}"));
        }
        WorkerError {
            kind: ErrorKind::Fault,
            message,
            log: Some(log),
        }
    }
}

impl Backend for TritonBackend {
    fn prestart(&mut self) {
        if self.helper.is_none() && self.started.is_none() && self.spawned.is_none() {
            self.spawned = Some(self.spawn_helper());
        }
    }

    fn status(&mut self) -> BackendStatus {
        match self.ensure_started() {
            Ok(hello) => {
                let hello = hello.clone();
                self.status_of(&hello)
            }
            Err(e) => BackendStatus {
                available: false,
                message: e.message,
                interpreter: false,
            },
        }
    }

    fn run(&mut self, op: &Op, progress: &mut dyn FnMut(&str)) -> Result<OpResult, WorkerError> {
        if matches!(op, Op::Hello | Op::Shutdown) {
            return Err(WorkerError {
                kind: ErrorKind::BadRequest,
                message: format!(
                    "the Triton backend does not run `{}`; the worker loop answers it",
                    op_name(op)
                ),
                log: None,
            });
        }
        let versions = op.versions();
        // CUDA versions come here compiled (`cuda`), beside a PyTorch reference.
        let runnable = |v: &&&super::protocol::Version| {
            v.lang == Lang::Triton || v.cuda.is_some() || v.torch.is_some()
        };
        if let Some(v) = versions.iter().find(|v| !runnable(v)) {
            return Err(WorkerError {
                kind: ErrorKind::BadRequest,
                message: format!("version `{}` is not a Triton version", v.label),
                log: None,
            });
        }
        let hello = self.ensure_started()?.clone();
        let status = self.status_of(&hello);
        if !status.available {
            let kind = if hello.missing.is_some() {
                ErrorKind::NoBackend
            } else {
                ErrorKind::NoDevice
            };
            return Err(WorkerError {
                kind,
                message: status.message,
                log: None,
            });
        }
        self.exchange(op, progress)
    }
}

impl Drop for TritonBackend {
    fn drop(&mut self) {
        // A helper started ahead but never used: it may still be importing.
        if let Some(Ok(h)) = self.spawned.take() {
            h.reap();
        }
        if let Some(mut h) = self.helper.take() {
            // Ask politely so the helper removes its files; kill if it does not go.
            let _ = h.stdin.write_all(b"{\"id\":0,\"op\":\"shutdown\"}\n");
            let _ = h.stdin.flush();
            let deadline = Instant::now() + Duration::from_millis(150);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = h.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            h.reap();
        }
    }
}

fn describe_exit(status: Option<ExitStatus>) -> String {
    let Some(status) = status else {
        return "exit status unknown".into();
    };
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            let name = match sig {
                6 => " (SIGABRT)",
                7 => " (SIGBUS)",
                9 => " (SIGKILL)",
                11 => " (SIGSEGV)",
                15 => " (SIGTERM)",
                _ => "",
            };
            return format!("killed by signal {sig}{name}");
        }
    }
    match status.code() {
        Some(c) => format!("exit code {c}"),
        None => "exit status unknown".into(),
    }
}

/// A running helper process.
struct Helper {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    tail: StderrTail,
    /// Removed when the helper is reaped (the helper also removes it at exit).
    _dir: PrivateDir,
}

impl Helper {
    /// Kill (if still running) and wait; the exit status and the stderr tail.
    fn reap(mut self) -> (Option<ExitStatus>, String) {
        let status = match self.child.try_wait() {
            Ok(Some(s)) => Some(s),
            _ => {
                // Give a helper that is exiting by itself a moment before killing it.
                let deadline = Instant::now() + Duration::from_millis(200);
                let mut st = None;
                while Instant::now() < deadline {
                    if let Ok(Some(s)) = self.child.try_wait() {
                        st = Some(s);
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                match st {
                    Some(s) => Some(s),
                    None => {
                        let _ = self.child.kill();
                        self.child.wait().ok()
                    }
                }
            }
        };
        (status, self.tail.finish())
    }
}

/// Drains the helper's stderr on a thread (a full pipe would block the helper), keeping
/// the last `STDERR_TAIL` bytes.
struct StderrTail {
    buf: Arc<Mutex<(VecDeque<u8>, bool)>>,
}

impl StderrTail {
    fn spawn(mut stderr: std::process::ChildStderr) -> Self {
        let buf = Arc::new(Mutex::new((VecDeque::new(), false)));
        let shared = Arc::clone(&buf);
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            loop {
                let n = stderr.read(&mut chunk).unwrap_or(0);
                let mut g = shared.lock().unwrap_or_else(|e| e.into_inner());
                if n == 0 {
                    g.1 = true;
                    break;
                }
                g.0.extend(&chunk[..n]);
                let excess = g.0.len().saturating_sub(STDERR_TAIL);
                g.0.drain(..excess);
            }
        });
        StderrTail { buf }
    }

    /// The tail, after waiting briefly for the reader to reach the end of the pipe.
    fn finish(&self) -> String {
        let deadline = Instant::now() + Duration::from_millis(150);
        loop {
            let g = self.buf.lock().unwrap_or_else(|e| e.into_inner());
            if g.1 || Instant::now() >= deadline {
                let bytes: Vec<u8> = g.0.iter().copied().collect();
                return String::from_utf8_lossy(&bytes).into_owned();
            }
            drop(g);
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A directory only this user can read, removed on drop: the helper script and the
/// modules it writes from version sources.
struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    fn create() -> std::io::Result<Self> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let mut last = None;
        for _ in 0..16 {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = base.join(format!(
                "kernel-lsp-triton-{}-{nanos:x}-{n}",
                std::process::id()
            ));
            let mut b = std::fs::DirBuilder::new();
            #[cfg(unix)]
            {
                use std::os::unix::fs::DirBuilderExt;
                b.mode(0o700);
            }
            match b.create(&path) {
                Ok(()) => return Ok(PrivateDir { path }),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("tried at least once"))
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests;
