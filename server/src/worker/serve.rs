//! The worker process (`kernel-lsp worker`): reads request lines on stdin, answers each
//! with one reply line on stdout (after zero or more `progress` lines), and dispatches
//! `Compile`/`Verify`/`Time` to the backend of the versions' language.
//!
//! Owns the process's lifetime rules, which the pool relies on (docs/worker-protocol.md):
//! EOF or `shutdown` exits 0; a backend that is `poisoned()` after a reply (a fault
//! destroyed its CUDA context) exits [`EXIT_POISONED`]; a backend that panicked exits
//! [`EXIT_PANICKED`] after replying `internal`. Nothing but protocol lines reaches the
//! protocol channel: on Unix, file descriptor 1 is moved aside at start and pointed at
//! stderr, so a kernel's `printf`, a driver message or a Python child's output land in
//! the log instead of corrupting the stream.
//!
//! Does not know about the pool, LSP or files: requests carry source text and plans.

use std::io::{BufRead, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::ExitCode;

use super::backend::Backend;
use super::protocol::{
    op_name, BackendStatus, ErrorKind, Failure, FailureKind, HelloResult, Op, OpResult, Reply,
    ReplyBody, Request, TimeReport, VerifyReport, Version, WorkerError, PROTOCOL_VERSION,
};
use crate::syntax::Lang;

/// Exit status after a reply when the backend's state is unusable (a kernel faulted).
pub const EXIT_POISONED: u8 = 3;
/// Exit status after a backend panicked (its state may be corrupt).
pub const EXIT_PANICKED: u8 = 4;
/// Exit status when the protocol channel itself failed (stdout closed or unwritable).
pub const EXIT_CHANNEL: u8 = 5;

/// The CUDA backend this worker runs. Replaced by the real one when it lands.
fn cuda_backend() -> Box<dyn Backend> {
    // Cheap: the driver is probed on first use, so a machine without CUDA still serves
    // Triton requests and says why CUDA is unavailable.
    Box::new(super::cuda::CudaBackend::new())
}

/// The Triton backend this worker runs. Replaced by the real one when it lands.
fn triton_backend() -> Box<dyn Backend> {
    // The interpreter comes from KERNEL_LSP_PYTHON, else `python3`; TRITON_INTERPRET
    // and the rest of the environment pass through to the helper.
    Box::new(super::triton::TritonBackend::new(None))
}

/// A backend that cannot run anything and says why.
pub struct Unavailable {
    kind: ErrorKind,
    reason: String,
}

impl Unavailable {
    pub fn new(kind: ErrorKind, reason: &str) -> Self {
        Unavailable {
            kind,
            reason: reason.to_string(),
        }
    }
}

impl Backend for Unavailable {
    fn status(&mut self) -> BackendStatus {
        BackendStatus {
            available: false,
            message: self.reason.clone(),
            interpreter: false,
        }
    }

    fn run(&mut self, _op: &Op, _progress: &mut dyn FnMut(&str)) -> Result<OpResult, WorkerError> {
        Err(WorkerError {
            kind: self.kind,
            message: self.reason.clone(),
            log: None,
        })
    }
}

/// The two backends a worker dispatches to.
pub struct Backends {
    pub cuda: Box<dyn Backend>,
    pub triton: Box<dyn Backend>,
}

impl Backends {
    pub fn default_backends() -> Self {
        Backends {
            cuda: cuda_backend(),
            triton: triton_backend(),
        }
    }

    fn for_lang(&mut self, lang: Lang) -> &mut dyn Backend {
        match lang {
            Lang::Cuda => self.cuda.as_mut(),
            Lang::Triton => self.triton.as_mut(),
        }
    }
}

/// How [`serve`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServeExit {
    /// EOF on the input or a `shutdown` request.
    Done,
    /// The backend is poisoned after a fault.
    Poisoned,
    /// A backend call panicked.
    Panicked,
    /// Writing a reply failed: nobody is listening.
    ChannelClosed,
}

impl ServeExit {
    pub fn code(self) -> u8 {
        match self {
            ServeExit::Done => 0,
            ServeExit::Poisoned => EXIT_POISONED,
            ServeExit::Panicked => EXIT_PANICKED,
            ServeExit::ChannelClosed => EXIT_CHANNEL,
        }
    }
}

/// The `kernel-lsp worker` entry point: serve stdin/stdout with the built-in backends.
pub fn run() -> ExitCode {
    let out = protocol_channel();
    let stdin = std::io::stdin();
    let exit = serve(stdin.lock(), out, Backends::default_backends());
    if exit != ServeExit::Done {
        tracing::warn!("worker exits: {exit:?}");
    }
    ExitCode::from(exit.code())
}

/// Takes file descriptor 1 for the protocol and points fd 1 at stderr, so that whatever
/// else writes to stdout (kernel `printf`, the driver, child processes) cannot break the
/// line protocol. Falls back to plain stdout where that is not possible.
fn protocol_channel() -> Box<dyn Write> {
    #[cfg(unix)]
    {
        use std::os::fd::FromRawFd;
        extern "C" {
            fn dup(fd: i32) -> i32;
            fn dup2(old: i32, new: i32) -> i32;
        }
        // SAFETY: dup/dup2 on the process's own standard descriptors; no Rust object owns
        // fd 1 exclusively (std's Stdout only writes to it), and the new descriptor is
        // owned by the File created here and nowhere else.
        unsafe {
            let proto = dup(1);
            if proto >= 0 && dup2(2, 1) >= 0 {
                return Box::new(std::fs::File::from_raw_fd(proto));
            }
        }
    }
    Box::new(std::io::stdout())
}

/// The request loop over any line input and output (tests drive it with buffers).
pub fn serve(input: impl BufRead, mut out: impl Write, mut backends: Backends) -> ServeExit {
    for line in input.lines() {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                // Not UTF-8 or a read error: answer it like any malformed line.
                let reply = error_reply(
                    0,
                    ErrorKind::BadRequest,
                    format!("unreadable request line: {e}"),
                );
                if write_reply(&mut out, &reply).is_err() {
                    return ServeExit::ChannelClosed;
                }
                if e.kind() == std::io::ErrorKind::InvalidData {
                    continue;
                }
                return ServeExit::Done;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let request: Request = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                let id = serde_json::from_str::<serde_json::Value>(&line)
                    .ok()
                    .and_then(|v| v.get("id").and_then(|id| id.as_u64()))
                    .unwrap_or(0);
                let reply = error_reply(
                    id,
                    ErrorKind::BadRequest,
                    format!("malformed request: {e}; see docs/worker-protocol.md"),
                );
                if write_reply(&mut out, &reply).is_err() {
                    return ServeExit::ChannelClosed;
                }
                continue;
            }
        };
        let id = request.id;
        let span = tracing::info_span!("request", id, op = op_name(&request.op));
        let _enter = span.enter();
        let (body, lang) = match &request.op {
            Op::Hello => (Ok(OpResult::Hello(hello(&mut backends))), None),
            Op::Shutdown => {
                let reply = Reply {
                    id,
                    body: ReplyBody::Ok {
                        result: Box::new(OpResult::Shutdown),
                    },
                };
                let _ = write_reply(&mut out, &reply);
                return ServeExit::Done;
            }
            op => match request_lang(op) {
                Err(message) => (
                    Err(WorkerError {
                        kind: ErrorKind::BadRequest,
                        message,
                        log: None,
                    }),
                    None,
                ),
                Ok(lang) => {
                    // A CUDA kernel beside a PyTorch reference: compiled here for this
                    // GPU, then launched by the Python helper, where torch runs (the
                    // inputs, the reference and the timings stay in one process).
                    let with_torch = lang == Lang::Cuda && has_torch(op);
                    let backends = &mut backends;
                    let mut progress_failed = false;
                    let result = {
                        let out = &mut out;
                        let mut progress = |stage: &str| {
                            let line = Reply {
                                id,
                                body: ReplyBody::Progress {
                                    stage: stage.to_string(),
                                },
                            };
                            if write_reply(out, &line).is_err() {
                                progress_failed = true;
                            }
                        };
                        catch_unwind(AssertUnwindSafe(|| {
                            if with_torch {
                                let op =
                                    with_cuda_binaries(op, backends.cuda.as_mut(), &mut progress)?;
                                backends.triton.run(&op, &mut progress)
                            } else {
                                backends.for_lang(lang).run(op, &mut progress)
                            }
                        }))
                    };
                    if progress_failed {
                        return ServeExit::ChannelClosed;
                    }
                    match result {
                        Ok(r) => (r, Some(lang)),
                        Err(panic) => {
                            let what = panic_message(&panic);
                            let reply = error_reply(
                                id,
                                ErrorKind::Internal,
                                format!(
                                    "the worker's {} backend panicked: {what}; the worker exits and \
                                     a fresh one is started (please report this)",
                                    lang_name(lang)
                                ),
                            );
                            let _ = write_reply(&mut out, &reply);
                            return ServeExit::Panicked;
                        }
                    }
                }
            },
        };
        let body = match body {
            Ok(OpResult::Time(mut t)) => {
                fill_roofline(&mut t, &mut backends);
                Ok(OpResult::Time(t))
            }
            Ok(OpResult::Verify(mut r)) => {
                if let Op::Verify {
                    candidate,
                    reference,
                    seed,
                    sanitize: true,
                    ..
                } = &request.op
                {
                    if candidate.lang == Lang::Cuda && reference.torch.is_none() {
                        sanitize_report(&mut r, candidate, reference, *seed, request.time_limit_ms);
                    }
                }
                Ok(OpResult::Verify(r))
            }
            other => other,
        };
        let reply = Reply {
            id,
            body: match body {
                Ok(result) => ReplyBody::Ok {
                    result: Box::new(result),
                },
                Err(error) => ReplyBody::Error { error },
            },
        };
        if write_reply(&mut out, &reply).is_err() {
            return ServeExit::ChannelClosed;
        }
        if let Some(lang) = lang {
            if backends.for_lang(lang).poisoned()
                || backends.triton.poisoned() && has_torch(&request.op)
            {
                return ServeExit::Poisoned;
            }
        }
    }
    ServeExit::Done
}

/// `sanitize`: run the candidate once more under compute-sanitizer in a child worker and
/// fold what it finds into the report. Skipped after a fault (this worker is exiting).
fn sanitize_report(
    r: &mut VerifyReport,
    candidate: &Version,
    reference: &Version,
    seed: u64,
    limit_ms: Option<u64>,
) {
    if r.failure
        .as_ref()
        .is_some_and(|f| f.kind == FailureKind::Fault)
    {
        return;
    }
    let Some(tool) = super::sanitize::find_sanitizer() else {
        r.sanitizer = Some(
            "compute-sanitizer not found (PATH, CUDA_HOME, /usr/local/cuda); install the CUDA toolkit to use sanitize".into(),
        );
        return;
    };
    let limit = std::time::Duration::from_millis(limit_ms.unwrap_or(120_000));
    let outcome = super::sanitize::run(&tool, candidate, reference, seed, limit);
    if outcome.errors > 0 && r.passed {
        r.passed = false;
        r.failure = Some(Failure {
            case: 0,
            trial: 0,
            seed,
            kind: FailureKind::Sanitizer,
            buffer: None,
            index: None,
            expected: None,
            actual: None,
            max_abs_err: None,
            max_rel_err: None,
            message: format!(
                "`{}`: compute-sanitizer found {} error(s); see the sanitizer report",
                candidate.plan.kernel, outcome.errors
            ),
        });
    }
    r.sanitizer = Some(outcome.summary);
}

/// The roofline position of timings whose backend does not know the device's ceilings
/// (the Triton helper): taken against the ceilings the CUDA backend measured on this
/// worker's GPU. Interpreter timings get none; they are not GPU times.
fn fill_roofline(t: &mut TimeReport, backends: &mut Backends) {
    if t.interpreter || t.timings.iter().all(|x| x.frac_copy.is_some()) {
        return;
    }
    let Some(ceilings) = backends.cuda.device().and_then(|d| d.ceilings) else {
        return;
    };
    for x in &mut t.timings {
        if x.frac_copy.is_none() && ceilings.copy_gbps > 0.0 {
            x.frac_copy = Some(x.gbps / ceilings.copy_gbps);
        }
        if let (None, Some(tf)) = (x.frac_fma, x.tflops) {
            if ceilings.fma_tflops > 0.0 {
                x.frac_fma = Some(tf / ceilings.fma_tflops);
            }
        }
    }
}

fn hello(backends: &mut Backends) -> HelloResult {
    // The Python helper's imports (torch, triton: seconds) run while the CUDA backend
    // opens the device and measures its ceilings.
    backends.triton.prestart();
    HelloResult {
        protocol: PROTOCOL_VERSION,
        worker_version: env!("CARGO_PKG_VERSION").to_string(),
        device: backends.cuda.device(),
        cuda: backends.cuda.status(),
        triton: backends.triton.status(),
        compile_cache: triton_cache(),
    }
}

/// Triton's kernel cache as `host:path` (`TRITON_CACHE_DIR`, else `.triton/cache` under
/// `TRITON_HOME` or the home folder, as Triton finds it), or None when neither the host
/// nor the folder can be told.
fn triton_cache() -> Option<String> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let dir = match var("TRITON_CACHE_DIR") {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::PathBuf::from(var("TRITON_HOME").or_else(|| var("HOME"))?)
            .join(".triton/cache"),
    };
    let dir = dir.canonicalize().unwrap_or(dir);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| var("HOSTNAME"))?;
    Some(format!("{host}:{}", dir.display()))
}

/// Whether a version of the request is a PyTorch reference.
fn has_torch(op: &Op) -> bool {
    op.versions().iter().any(|v| v.torch.is_some())
}

/// `op` with every CUDA kernel version (not the PyTorch references) compiled by `cuda` for
/// its GPU, for the Python helper to launch (issue #17). A client's `cuda` field is
/// replaced: only this worker's own compile is trusted.
fn with_cuda_binaries(
    op: &Op,
    cuda: &mut dyn Backend,
    progress: &mut dyn FnMut(&str),
) -> Result<Op, WorkerError> {
    let mut op = op.clone();
    for v in op.versions_mut() {
        v.cuda = None;
        if v.torch.is_none() {
            v.cuda = Some(Box::new(cuda.cuda_binary(v, progress)?));
        }
    }
    Ok(op)
}

/// The language every version of the request is in, or why the request is malformed.
fn request_lang(op: &Op) -> Result<Lang, String> {
    match op {
        Op::Compile { version } => Ok(version.lang),
        Op::Verify {
            candidate,
            reference,
            ..
        } => {
            if candidate.lang != reference.lang {
                return Err(format!(
                    "verify: candidate `{}` is {} but reference `{}` is {}; both must be one language",
                    candidate.label,
                    lang_name(candidate.lang),
                    reference.label,
                    lang_name(reference.lang)
                ));
            }
            Ok(candidate.lang)
        }
        Op::Time { versions, .. } => {
            let Some(first) = versions.first() else {
                return Err("time: `versions` is empty; send at least one version".into());
            };
            if let Some(other) = versions.iter().find(|v| v.lang != first.lang) {
                return Err(format!(
                    "time: `{}` is {} but `{}` is {}; versions timed together must be one language",
                    first.label,
                    lang_name(first.lang),
                    other.label,
                    lang_name(other.lang)
                ));
            }
            Ok(first.lang)
        }
        Op::Hello | Op::Shutdown => unreachable!("answered by the loop"),
    }
}

fn lang_name(lang: Lang) -> &'static str {
    match lang {
        Lang::Cuda => "CUDA",
        Lang::Triton => "Triton",
    }
}

pub(crate) fn error_reply(id: u64, kind: ErrorKind, message: String) -> Reply {
    Reply {
        id,
        body: ReplyBody::Error {
            error: WorkerError {
                kind,
                message,
                log: None,
            },
        },
    }
}

pub(crate) fn write_reply(out: &mut impl Write, reply: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(reply).map_err(std::io::Error::other)?;
    line.push(b'\n');
    out.write_all(&line)?;
    out.flush()
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::protocol::{CompileReport, Version};

    /// A backend whose behaviour is picked by the version label.
    struct Scripted {
        poisoned: bool,
    }

    impl Backend for Scripted {
        fn status(&mut self) -> BackendStatus {
            BackendStatus {
                available: true,
                message: "scripted 1.0".into(),
                interpreter: false,
            }
        }
        fn run(
            &mut self,
            op: &Op,
            progress: &mut dyn FnMut(&str),
        ) -> Result<OpResult, WorkerError> {
            let Op::Compile { version } = op else {
                panic!("only compile is scripted")
            };
            progress("compiling");
            match version.label.as_str() {
                "panic" => panic!("boom"),
                "fault" => {
                    self.poisoned = true;
                    Err(WorkerError {
                        kind: ErrorKind::Fault,
                        message: "illegal address".into(),
                        log: None,
                    })
                }
                _ => Ok(OpResult::Compile(CompileReport {
                    log: String::new(),
                    compile_ms: 1.0,
                    cached: false,
                    registers: Some(16),
                    local_bytes: Some(0),
                })),
            }
        }
        fn poisoned(&self) -> bool {
            self.poisoned
        }
    }

    fn compile_line(id: u64, label: &str) -> String {
        let version = Version {
            torch: None,
            label: label.into(),
            lang: Lang::Cuda,
            source: String::new(),
            plan: crate::spec::BenchPlan {
                kernel: "k".into(),
                lang: Lang::Cuda,
                cases: Vec::new(),
                tunables: Vec::new(),
                defines: Vec::new(),
                atol: None,
                rtol: None,
                reference: None,
                torch_reference: None,
                trials: 3,
            },
            options: Vec::new(),
            cuda: None,
        };
        serde_json::to_string(&Request {
            id,
            time_limit_ms: None,
            op: Op::Compile { version },
        })
        .unwrap()
    }

    fn run_lines(lines: &[String]) -> (ServeExit, Vec<Reply>) {
        let input = lines.join("\n") + "\n";
        let mut out = Vec::new();
        // A fixed Triton stand-in: the real one would start Python, and what it says
        // depends on the machine.
        let backends = Backends {
            cuda: Box::new(Scripted { poisoned: false }),
            triton: Box::new(Unavailable::new(
                ErrorKind::NoBackend,
                "no Triton in this test",
            )),
        };
        let exit = serve(input.as_bytes(), &mut out, backends);
        let replies = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (exit, replies)
    }

    fn error_kind(r: &Reply) -> Option<ErrorKind> {
        match &r.body {
            ReplyBody::Error { error } => Some(error.kind),
            _ => None,
        }
    }

    #[test]
    fn malformed_lines_get_bad_request_and_the_loop_goes_on() {
        let (exit, replies) = run_lines(&[
            "not json".into(),
            r#"{"id": 9, "op": "fly"}"#.into(),
            compile_line(3, "ok"),
        ]);
        assert_eq!(exit, ServeExit::Done);
        assert_eq!(replies[0].id, 0);
        assert_eq!(error_kind(&replies[0]), Some(ErrorKind::BadRequest));
        assert_eq!(replies[1].id, 9);
        assert_eq!(error_kind(&replies[1]), Some(ErrorKind::BadRequest));
        assert_eq!(
            replies[2].body,
            ReplyBody::Progress {
                stage: "compiling".into()
            }
        );
        assert!(matches!(replies[3].body, ReplyBody::Ok { .. }));
    }

    #[test]
    fn hello_reports_both_backends_and_shutdown_stops_reading() {
        let (exit, replies) = run_lines(&[
            r#"{"id":1,"op":"hello"}"#.into(),
            r#"{"id":2,"op":"shutdown"}"#.into(),
            r#"{"id":3,"op":"hello"}"#.into(),
        ]);
        assert_eq!(exit, ServeExit::Done);
        assert_eq!(replies.len(), 2);
        let ReplyBody::Ok { result } = &replies[0].body else {
            panic!("{:?}", replies[0])
        };
        let OpResult::Hello(h) = result.as_ref() else {
            panic!()
        };
        assert_eq!(h.protocol, PROTOCOL_VERSION);
        assert!(h.cuda.available);
        assert!(!h.triton.available);
        assert_eq!(h.triton.message, "no Triton in this test");
    }

    #[test]
    fn a_fault_is_replied_then_the_worker_exits_poisoned() {
        let (exit, replies) = run_lines(&[compile_line(1, "fault"), compile_line(2, "ok")]);
        assert_eq!(exit, ServeExit::Poisoned);
        assert_eq!(error_kind(replies.last().unwrap()), Some(ErrorKind::Fault));
        assert!(replies.iter().all(|r| r.id == 1));
    }

    #[test]
    fn a_panic_is_replied_as_internal_then_the_worker_exits() {
        let (exit, replies) = run_lines(&[compile_line(4, "panic"), compile_line(5, "ok")]);
        assert_eq!(exit, ServeExit::Panicked);
        let last = replies.last().unwrap();
        assert_eq!((last.id, error_kind(last)), (4, Some(ErrorKind::Internal)));
    }

    #[test]
    fn time_with_mixed_languages_is_a_bad_request() {
        let mut v: serde_json::Value = serde_json::from_str(&compile_line(1, "a")).unwrap();
        let version = v["version"].take();
        let mut other = version.clone();
        other["lang"] = "triton".into();
        let line = serde_json::json!({"id": 6, "op": "time", "versions": [version, other]});
        let (_, replies) = run_lines(&[line.to_string()]);
        assert_eq!(error_kind(&replies[0]), Some(ErrorKind::BadRequest));
    }
}
