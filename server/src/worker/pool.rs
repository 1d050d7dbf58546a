//! The server side of the workers: a pool of N worker processes started by a command
//! (`kernel-lsp worker`, or `ssh gpu-box kernel-lsp worker`), each spoken to in JSON
//! lines (`protocol`). Owns spawning (lazily, `hello` first), routing a request to a free
//! worker (FIFO queue when all are busy), time limits enforced from outside, and
//! recovery: a worker that dies, hangs, speaks garbage, faults or is cancelled mid-request
//! is killed with its whole process group and a replacement is started, so the next
//! request works. Never panics on anything a worker does; all waiting is async.
//!
//! Does not know about files, LSP or the CLI; callers build `Op`s from plans.

use std::collections::{HashSet, VecDeque};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{Mutex, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::protocol::op_name;
use super::protocol::{
    ErrorKind, Failure, FailureKind, HelloResult, Op, OpResult, Reply, ReplyBody, Request,
    VerifyReport, WorkerError, PROTOCOL_VERSION,
};

/// How many stderr lines of a worker are kept for error messages.
const STDERR_TAIL: usize = 20;

/// Default time limits per operation, used when a request names none.
#[derive(Clone, Debug)]
pub struct TimeLimits {
    /// Start-up: the process starting, opening the device, measuring ceilings.
    pub hello: Duration,
    pub compile: Duration,
    pub verify: Duration,
    pub time: Duration,
}

impl Default for TimeLimits {
    fn default() -> Self {
        TimeLimits {
            hello: Duration::from_secs(60),
            compile: Duration::from_secs(60),
            verify: Duration::from_secs(120),
            time: Duration::from_secs(120),
        }
    }
}

impl TimeLimits {
    pub fn for_op(&self, op: &Op) -> Duration {
        match op {
            Op::Hello | Op::Shutdown => self.hello,
            Op::Compile { .. } => self.compile,
            Op::Verify { .. } => self.verify,
            Op::Time { .. } => self.time,
        }
    }
}

#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Program and arguments that start one worker speaking the protocol on stdio.
    pub command: Vec<String>,
    /// Number of workers (requests run in parallel up to this many).
    pub size: usize,
    pub limits: TimeLimits,
    /// Extra time past a request's limit before the pool kills the worker, so the worker
    /// can report its own time-out (which says more, e.g. which case hung).
    pub kill_grace: Duration,
    /// How long `shutdown` waits for a worker to exit by itself before killing it.
    pub shutdown_grace: Duration,
    /// Extra environment for the worker process (e.g. `KERNEL_LSP_PYTHON`).
    pub env: Vec<(String, String)>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            command: default_command(),
            size: 1,
            limits: TimeLimits::default(),
            kill_grace: Duration::from_secs(2),
            shutdown_grace: Duration::from_millis(2000),
            env: Vec::new(),
        }
    }
}

/// `[this executable, "worker"]`.
pub fn default_command() -> Vec<String> {
    let exe = std::env::current_exe()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "kernel-lsp".into());
    vec![exe, "worker".into()]
}

/// Splits a `--worker` command line into words: whitespace separates, single or double
/// quotes group, backslash escapes the next character. No other shell syntax.
pub fn split_command(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') | (None, '\\') => match chars.next() {
                Some(n) => {
                    cur.push(n);
                    in_word = true;
                }
                None => return Err("the worker command ends with a lone `\\`".into()),
            },
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if let Some(q) = quote {
        return Err(format!("the worker command has an unclosed {q}"));
    }
    if in_word {
        words.push(cur);
    }
    if words.is_empty() {
        return Err("the worker command is empty".into());
    }
    Ok(words)
}

/// A pool of worker processes. Cheap to clone; clones share the workers.
#[derive(Clone)]
pub struct WorkerPool {
    inner: Arc<Inner>,
}

struct Inner {
    config: PoolConfig,
    slots: Vec<Mutex<Option<Worker>>>,
    /// One permit per slot: holding one guarantees a slot is unlocked.
    permits: Arc<Semaphore>,
    hello: StdMutex<Option<HelloResult>>,
    next_id: AtomicU64,
    closed: AtomicBool,
    /// Process groups (or pids) of live workers, to kill on shutdown or drop even when a
    /// request holds the worker.
    live: Arc<StdMutex<HashSet<u32>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let live = self.live.lock().map(|l| l.clone()).unwrap_or_default();
        for pid in live {
            kill_group(pid);
        }
    }
}

impl WorkerPool {
    pub fn new(mut config: PoolConfig) -> Self {
        config.size = config.size.max(1);
        let slots = (0..config.size).map(|_| Mutex::new(None)).collect();
        WorkerPool {
            inner: Arc::new(Inner {
                permits: Arc::new(Semaphore::new(config.size)),
                config,
                slots,
                hello: StdMutex::new(None),
                next_id: AtomicU64::new(1),
                closed: AtomicBool::new(false),
                live: Arc::new(StdMutex::new(HashSet::new())),
            }),
        }
    }

    pub fn config(&self) -> &PoolConfig {
        &self.inner.config
    }

    /// The `hello` of the most recently started worker, if any has started.
    pub fn hello(&self) -> Option<HelloResult> {
        self.inner.hello.lock().ok().and_then(|h| h.clone())
    }

    /// Starts a worker if none is running and returns its `hello` (device, backends).
    pub async fn connect(&self) -> Result<HelloResult, WorkerError> {
        if let Some(h) = self.hello() {
            return Ok(h);
        }
        match self.request(Op::Hello, None).await? {
            OpResult::Hello(h) => Ok(h),
            other => Err(lost(format!(
                "the worker answered `hello` with a {} result",
                result_name(&other)
            ))),
        }
    }

    /// Runs `op` on a free worker (waiting for one when all are busy). `time_limit`:
    /// None takes the configured default for the op.
    pub async fn request(
        &self,
        op: Op,
        time_limit: Option<Duration>,
    ) -> Result<OpResult, WorkerError> {
        self.request_with_progress(op, time_limit, &mut |_| {})
            .await
    }

    /// Like [`request`](Self::request), calling `progress` with each stage the worker
    /// reports. Dropping the returned future mid-request kills that worker (its state is
    /// unknown) and a replacement is started.
    pub async fn request_with_progress(
        &self,
        op: Op,
        time_limit: Option<Duration>,
        progress: &mut (dyn FnMut(&str) + Send),
    ) -> Result<OpResult, WorkerError> {
        if matches!(op, Op::Shutdown) {
            return Err(WorkerError {
                kind: ErrorKind::BadRequest,
                message: "`shutdown` is not a request; call WorkerPool::shutdown".into(),
                log: None,
            });
        }
        let inner = &self.inner;
        if inner.closed.load(Ordering::SeqCst) {
            return Err(closed());
        }
        let _permit = inner
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| closed())?;
        let mut slot = self.free_slot().await;
        if inner.closed.load(Ordering::SeqCst) {
            return Err(closed());
        }
        // A worker that exited while idle is replaced quietly.
        if let Some(w) = slot.as_mut() {
            if let Ok(Some(status)) = w.child.try_wait() {
                tracing::warn!(
                    "worker {} exited while idle ({status}); starting a new one",
                    w.pid_label()
                );
                *slot = None;
            }
        }
        if slot.is_none() {
            let (worker, hello) = inner.start_worker().await?;
            if let Ok(mut h) = inner.hello.lock() {
                *h = Some(hello);
            }
            *slot = Some(worker);
        }
        let limit = time_limit.unwrap_or_else(|| inner.config.limits.for_op(&op));
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        // The worker is owned by this future while it works: if the caller drops the
        // future (cancels), the worker is dropped too, which kills it, because its state
        // (a request still running) is unknown. The slot stays locked meanwhile.
        let mut worker = slot.take().expect("a worker was just put in the slot");
        let outcome = worker
            .exchange(id, &op, limit, inner.config.kill_grace, progress)
            .await;
        match outcome {
            Exchange::Reply(Ok(OpResult::Hello(h))) => {
                *slot = Some(worker);
                if let Ok(mut cached) = inner.hello.lock() {
                    *cached = Some(h.clone());
                }
                Ok(OpResult::Hello(h))
            }
            // A kernel that faulted while being verified is reported as a failure inside
            // a successful reply, and the worker exits right after it (its CUDA context
            // is gone): retire it now rather than hand it the next request.
            Exchange::Reply(Ok(result)) if reports_fault(&result) => {
                let w = worker;
                w.stop(Duration::from_millis(500)).await;
                drop(slot);
                self.replace_in_background();
                Ok(result)
            }
            Exchange::Reply(Ok(result)) => {
                *slot = Some(worker);
                Ok(result)
            }
            Exchange::Reply(Err(error)) if error.kind == ErrorKind::Fault => {
                // The worker exits by itself after a fault; make sure, then replace it.
                let w = worker;
                w.stop(Duration::from_millis(200)).await;
                drop(slot);
                self.replace_in_background();
                Err(error)
            }
            Exchange::Reply(Err(error)) => {
                *slot = Some(worker);
                Err(error)
            }
            Exchange::TimedOut => {
                let w = worker;
                w.kill().await;
                drop(slot);
                self.replace_in_background();
                Err(WorkerError {
                    kind: ErrorKind::Timeout,
                    message: format!(
                        "{} did not finish within {} and was stopped; the worker was restarted",
                        subject(&op),
                        human_duration(limit)
                    ),
                    log: None,
                })
            }
            Exchange::Lost(why) => {
                let w = worker;
                let message = w.lost_message(&why, &op).await;
                drop(slot);
                self.replace_in_background();
                Err(lost(message))
            }
        }
    }

    /// Asks every idle worker to shut down, waits `shutdown_grace`, then kills whatever
    /// is left (busy workers included). Later requests fail.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        inner.closed.store(true, Ordering::SeqCst);
        inner.permits.close();
        let grace = inner.config.shutdown_grace;
        let mut stops = Vec::new();
        for slot in &inner.slots {
            if let Ok(mut slot) = slot.try_lock() {
                if let Some(mut w) = slot.take() {
                    stops.push(async move {
                        let id = u64::MAX;
                        let line = serde_json::to_string(&Request {
                            id,
                            time_limit_ms: None,
                            op: Op::Shutdown,
                        })
                        .expect("requests serialize");
                        let _ = w.send_line(&line).await;
                        w.stop(grace).await;
                    });
                }
            }
        }
        futures::future::join_all(stops).await;
        let live = inner.live.lock().map(|l| l.clone()).unwrap_or_default();
        for pid in live {
            kill_group(pid);
        }
    }

    /// Locks an unlocked slot, preferring one with a running worker. Only called while
    /// holding a permit, so one is always free.
    async fn free_slot(&self) -> tokio::sync::MutexGuard<'_, Option<Worker>> {
        let mut empty = None;
        for slot in &self.inner.slots {
            if let Ok(guard) = slot.try_lock() {
                if guard.is_some() {
                    return guard;
                }
                if empty.is_none() {
                    empty = Some(guard);
                }
            }
        }
        match empty {
            Some(g) => g,
            // Unreachable with the permit invariant; waiting is still correct.
            None => self.inner.slots[0].lock().await,
        }
    }

    /// Starts a worker in an empty slot once a permit is free, so the request after a
    /// failure does not pay for start-up.
    fn replace_in_background(&self) {
        let pool = self.clone();
        tokio::spawn(async move {
            let inner = &pool.inner;
            if inner.closed.load(Ordering::SeqCst) {
                return;
            }
            let Ok(_permit) = inner.permits.clone().acquire_owned().await else {
                return;
            };
            let Some(mut slot) = inner
                .slots
                .iter()
                .find_map(|s| s.try_lock().ok().filter(|g| g.is_none()))
            else {
                return;
            };
            match inner.start_worker().await {
                Ok((worker, hello)) => {
                    if let Ok(mut h) = inner.hello.lock() {
                        *h = Some(hello);
                    }
                    *slot = Some(worker);
                }
                Err(e) => tracing::warn!("could not start a replacement worker: {}", e.message),
            }
        });
    }

    /// Process ids of the running workers (their process group ids when spawned in a
    /// group of their own). For tests and diagnostics.
    pub fn worker_pids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .inner
            .live
            .lock()
            .map(|l| l.iter().copied().collect())
            .unwrap_or_default();
        v.sort_unstable();
        v
    }
}

impl Inner {
    /// Spawns one worker and waits for its `hello`.
    async fn start_worker(&self) -> Result<(Worker, HelloResult), WorkerError> {
        let command = &self.config.command;
        let shown = command.join(" ");
        let Some((program, args)) = command.split_first() else {
            return Err(lost("the worker command is empty".into()));
        };
        let mut cmd = Command::new(program);
        cmd.args(args)
            .envs(self.config.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // Its own process group, so a kill reaches an `ssh` or a Python child too.
        #[cfg(unix)]
        cmd.process_group(0);
        let mut child = cmd.spawn().map_err(|e| {
            lost(format!(
                "cannot start the worker `{shown}`: {e}; check the worker command (setting `worker.command`, flag --worker)"
            ))
        })?;
        let pid = child.id();
        if let (Some(pid), Ok(mut live)) = (pid, self.live.lock()) {
            live.insert(pid);
        }
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let tail = Arc::new(StdMutex::new(VecDeque::new()));
        let stderr_task = {
            let tail = tail.clone();
            let label = pid.map_or("?".into(), |p| p.to_string());
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::info!(target: "kernel_lsp::worker", "worker {label}: {line}");
                    if let Ok(mut t) = tail.lock() {
                        if t.len() == STDERR_TAIL {
                            t.pop_front();
                        }
                        t.push_back(line);
                    }
                }
            })
        };
        let mut worker = Worker {
            child,
            pid,
            stdin,
            stdout: BufReader::new(stdout).lines(),
            stderr_tail: tail,
            stderr_task: Some(stderr_task),
            live: self.live.clone(),
            command: shown,
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let op = Op::Hello;
        let limit = self.config.limits.hello;
        match worker
            .exchange(id, &op, limit, Duration::ZERO, &mut |_| {})
            .await
        {
            Exchange::Reply(Ok(OpResult::Hello(hello))) => {
                if hello.protocol != PROTOCOL_VERSION {
                    worker.kill().await;
                    return Err(lost(format!(
                        "the worker `{}` speaks protocol {} (kernel-lsp {}), this server speaks {}; \
                         install the same kernel-lsp version on both sides",
                        worker_cmd(command),
                        hello.protocol,
                        hello.worker_version,
                        PROTOCOL_VERSION
                    )));
                }
                tracing::info!(
                    "worker {} started: protocol {}, device {}",
                    worker.pid_label(),
                    hello.protocol,
                    hello.device.as_ref().map_or("none", |d| d.name.as_str())
                );
                Ok((worker, hello))
            }
            Exchange::Reply(Ok(other)) => {
                worker.kill().await;
                Err(lost(format!(
                    "the worker `{}` answered `hello` with a {} result",
                    worker_cmd(command),
                    result_name(&other)
                )))
            }
            Exchange::Reply(Err(e)) => {
                worker.kill().await;
                Err(WorkerError {
                    kind: ErrorKind::WorkerLost,
                    message: format!(
                        "the worker `{}` refused `hello`: {}",
                        worker_cmd(command),
                        e.message
                    ),
                    log: e.log,
                })
            }
            Exchange::TimedOut => {
                let tail = worker.stderr_tail();
                worker.kill().await;
                Err(lost(format!(
                    "the worker `{}` did not answer `hello` within {} and was stopped{}",
                    worker_cmd(command),
                    human_duration(limit),
                    tail_suffix(&tail)
                )))
            }
            Exchange::Lost(why) => Err(lost(worker.lost_message(&why, &op).await)),
        }
    }
}

/// One running worker process.
struct Worker {
    child: Child,
    pid: Option<u32>,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr_tail: Arc<StdMutex<VecDeque<String>>>,
    stderr_task: Option<JoinHandle<()>>,
    live: Arc<StdMutex<HashSet<u32>>>,
    command: String,
}

/// How one request/reply exchange ended.
// Built once per request and matched at once: boxing the reply would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Exchange {
    Reply(Result<OpResult, WorkerError>),
    /// Past the limit (plus grace); the worker is still running.
    TimedOut,
    /// The worker exited, closed its stdout or broke the protocol; says which.
    Lost(String),
}

impl Worker {
    fn pid_label(&self) -> String {
        self.pid.map_or("?".into(), |p| p.to_string())
    }

    async fn send_line(&mut self, line: &str) -> std::io::Result<()> {
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.write_all(b"\n").await?;
        self.stdin.flush().await
    }

    async fn exchange(
        &mut self,
        id: u64,
        op: &Op,
        limit: Duration,
        grace: Duration,
        progress: &mut (dyn FnMut(&str) + Send),
    ) -> Exchange {
        let request = Request {
            id,
            time_limit_ms: Some(limit.as_millis().min(u64::MAX as u128) as u64),
            op: op.clone(),
        };
        let line = serde_json::to_string(&request).expect("requests serialize");
        let deadline = Instant::now() + limit + grace;
        match tokio::time::timeout_at(deadline, self.send_line(&line)).await {
            Err(_) => return Exchange::TimedOut,
            Ok(Err(e)) => return Exchange::Lost(format!("writing the request failed ({e})")),
            Ok(Ok(())) => {}
        }
        loop {
            let next = match tokio::time::timeout_at(deadline, self.stdout.next_line()).await {
                Err(_) => return Exchange::TimedOut,
                Ok(n) => n,
            };
            let line = match next {
                Ok(Some(line)) => line,
                Ok(None) => return Exchange::Lost("it closed its output".into()),
                Err(e) => return Exchange::Lost(format!("reading its output failed ({e})")),
            };
            if line.trim().is_empty() {
                continue;
            }
            let reply: Reply = match serde_json::from_str(&line) {
                Ok(r) => r,
                Err(_) => {
                    return Exchange::Lost(format!(
                        "it printed a line that is not a protocol reply: `{}`",
                        shorten(&line, 200)
                    ))
                }
            };
            if reply.id != id {
                return Exchange::Lost(format!(
                    "it answered request {} while request {id} was pending",
                    reply.id
                ));
            }
            match reply.body {
                ReplyBody::Progress { stage } => progress(&stage),
                ReplyBody::Ok { result } => return Exchange::Reply(Ok(*result)),
                ReplyBody::Error { error } => return Exchange::Reply(Err(error)),
            }
        }
    }

    fn stderr_tail(&self) -> Vec<String> {
        self.stderr_tail
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Kills the process group and reaps the worker.
    async fn kill(mut self) {
        self.kill_now();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }

    fn kill_now(&mut self) {
        if let Some(pid) = self.pid {
            kill_group(pid);
            if let Ok(mut live) = self.live.lock() {
                live.remove(&pid);
            }
        }
        let _ = self.child.start_kill();
    }

    /// Gives the worker `grace` to exit by itself, then kills it.
    async fn stop(mut self, grace: Duration) {
        // Closing stdin is EOF for the worker: it exits 0.
        let _ = self.stdin.shutdown().await;
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                "worker {} did not exit within {}; killing it",
                self.pid_label(),
                human_duration(grace)
            );
        }
        self.kill().await;
    }

    /// The message for a worker lost mid-request: why, its exit status, its last stderr
    /// lines. Kills and reaps it.
    async fn lost_message(mut self, why: &str, op: &Op) -> String {
        // Give an exiting worker a moment, so the status and the last stderr lines are in.
        let status = tokio::time::timeout(Duration::from_millis(500), self.child.wait()).await;
        let status = match status {
            Ok(Ok(s)) => describe_status(s),
            _ => {
                self.kill_now();
                let _ = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
                "it was still running and was killed".into()
            }
        };
        if let Some(task) = self.stderr_task.take() {
            let _ = tokio::time::timeout(Duration::from_millis(300), task).await;
        }
        let tail = self.stderr_tail();
        let message = format!(
            "the worker `{}` was lost during {}: {why}; {status}; a new worker will be started{}",
            shorten(&self.command, 80),
            during(op),
            tail_suffix(&tail)
        );
        self.kill().await;
        message
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A dropped worker (a cancelled request, a dropped pool) is in an unknown state.
        if let Some(pid) = self.pid {
            let still_live = self.live.lock().map(|l| l.contains(&pid)).unwrap_or(false);
            if still_live {
                self.kill_now();
            }
        }
        if let Some(task) = self.stderr_task.take() {
            task.abort();
        }
    }
}

/// SIGKILL to the worker's process group (it leads one: spawned with `process_group(0)`),
/// so children that ignore SIGTERM, an `ssh` client or a Python helper die with it.
fn kill_group(pid: u32) {
    #[cfg(unix)]
    {
        extern "C" {
            fn kill(pid: i32, sig: i32) -> i32;
        }
        const SIGKILL: i32 = 9;
        if let Ok(pid) = i32::try_from(pid) {
            if pid > 0 {
                // SAFETY: kill(2) with a negative pid signals that process group; it has
                // no memory-safety preconditions. A group already gone gives ESRCH.
                unsafe {
                    kill(-pid, SIGKILL);
                }
            }
        }
    }
    #[cfg(not(unix))]
    let _ = pid;
}

fn describe_status(status: std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return format!("it was killed by signal {sig}");
        }
    }
    match status.code() {
        Some(code) => format!("it exited with status {code}"),
        None => format!("it exited ({status})"),
    }
}

fn tail_suffix(tail: &[String]) -> String {
    if tail.is_empty() {
        "; it wrote nothing to stderr".into()
    } else {
        format!("; its last stderr lines:\n{}", tail.join("\n"))
    }
}

/// What a request was about, for messages: "`saxpy`", "`saxpy`, `saxpy_ref`".
fn subject(op: &Op) -> String {
    let names: Vec<String> = match op {
        Op::Compile { version } => vec![version.plan.kernel.clone()],
        Op::Verify { candidate, .. } => vec![candidate.plan.kernel.clone()],
        Op::Time { versions, .. } => {
            let mut n: Vec<String> = Vec::new();
            for v in versions {
                let name = if v.label.is_empty() {
                    v.plan.kernel.clone()
                } else {
                    v.label.clone()
                };
                if !n.contains(&name) {
                    n.push(name);
                }
            }
            n
        }
        Op::Hello | Op::Shutdown => return format!("`{}`", op_name(op)),
    };
    let names: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    names.join(", ")
}

/// "`verify` of `saxpy`", "`hello`".
fn during(op: &Op) -> String {
    match op {
        Op::Hello | Op::Shutdown => format!("`{}`", op_name(op)),
        _ => format!("`{}` of {}", op_name(op), subject(op)),
    }
}

fn result_name(r: &OpResult) -> &'static str {
    match r {
        OpResult::Hello(_) => "hello",
        OpResult::Compile(_) => "compile",
        OpResult::Verify(_) => "verify",
        OpResult::Time(_) => "time",
        OpResult::Shutdown => "shutdown",
    }
}

fn worker_cmd(command: &[String]) -> String {
    shorten(&command.join(" "), 80)
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let cut: String = s.chars().take(max).collect();
        format!("{cut}…")
    }
}

pub fn human_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms >= 1000 && ms % 1000 == 0 {
        format!("{} s", ms / 1000)
    } else if ms >= 1000 {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{ms} ms")
    }
}

fn lost(message: String) -> WorkerError {
    WorkerError {
        kind: ErrorKind::WorkerLost,
        message,
        log: None,
    }
}

fn closed() -> WorkerError {
    WorkerError {
        kind: ErrorKind::WorkerLost,
        message: "the worker pool is shut down".into(),
        log: None,
    }
}

/// Whether a result says a kernel faulted (the worker then exits: see `serve`).
fn reports_fault(result: &OpResult) -> bool {
    matches!(
        result,
        OpResult::Verify(VerifyReport {
            failure: Some(Failure {
                kind: FailureKind::Fault,
                ..
            }),
            ..
        })
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_commands_split_like_a_shell_would_for_simple_words() {
        assert_eq!(
            split_command(r#"ssh gpu-box 'kernel-lsp worker' "a b"\ c"#).unwrap(),
            vec!["ssh", "gpu-box", "kernel-lsp worker", "a b c"]
        );
        assert!(split_command("  ").is_err());
        assert!(split_command("ssh 'x").is_err());
    }

    /// The LSP layer spawns requests on tokio tasks and shares the pool between them.
    #[test]
    fn the_pool_and_its_futures_can_cross_threads() {
        fn is_send<T: Send>(_: &T) {}
        fn is_send_sync<T: Send + Sync>() {}
        is_send_sync::<WorkerPool>();
        let pool = WorkerPool::new(PoolConfig::default());
        let mut progress = |_: &str| {};
        is_send(&pool.request(Op::Hello, None));
        is_send(&pool.request_with_progress(Op::Hello, None, &mut progress));
        is_send(&pool.shutdown());
        is_send(&pool.connect());
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(Duration::from_secs(10)), "10 s");
        assert_eq!(human_duration(Duration::from_millis(300)), "300 ms");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1.5 s");
    }
}
