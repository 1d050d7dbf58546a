//! The server side of the workers: a pool of worker processes, each started by its own
//! command (`kernel-lsp worker` pinned to one GPU with `CUDA_VISIBLE_DEVICES`,
//! `ssh gpu-box kernel-lsp worker`, `srun ... kernel-lsp worker`), each spoken to in JSON
//! lines (`protocol`). Owns the pool's shape from the settings (`PoolConfig::from_settings`,
//! one function for the editor and the CLI), spawning (lazily, `hello` first), routing a
//! request to a free worker or to a named one (the primary, for re-timing), time limits
//! enforced from outside, and recovery: a worker that dies, hangs, speaks garbage, faults
//! or is cancelled mid-request is killed with its whole process group and a replacement
//! is started; a worker that cannot start is backed off (1 s, doubling to 30 s) while the
//! others work, and a pool with no live worker fails a request at once with each
//! worker's reason. Never panics on anything a worker does; all waiting is async.
//!
//! Does not know about files, LSP or the CLI; callers build `Op`s from plans.

use std::collections::{HashSet, VecDeque};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{Mutex, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::protocol::op_name;
use super::protocol::{
    ErrorKind, Failure, FailureKind, HelloResult, Op, OpResult, Reply, ReplyBody, Request,
    VerifyReport, WorkerError, PROTOCOL_VERSION,
};
use crate::settings::{Settings, Workers};

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

/// One worker of the pool: the command that starts it and its own environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerSpec {
    pub command: Vec<String>,
    /// Added to the pool's environment for this worker only.
    pub env: Vec<(String, String)>,
    /// The GPU it is pinned to with `CUDA_VISIBLE_DEVICES`, for status lines.
    pub gpu: Option<String>,
}

#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Program and arguments that start one worker speaking the protocol on stdio.
    pub command: Vec<String>,
    /// Number of workers (requests run in parallel up to this many).
    pub size: usize,
    /// One entry per worker, each with its own command and environment. When empty the
    /// pool is `size` workers started by `command`.
    pub workers: Vec<WorkerSpec>,
    pub limits: TimeLimits,
    /// Extra time past a request's limit before the pool kills the worker, so the worker
    /// can report its own time-out (which says more, e.g. which case hung).
    pub kill_grace: Duration,
    /// How long `shutdown` waits for a worker to exit by itself before killing it.
    pub shutdown_grace: Duration,
    /// Extra environment for every worker process (e.g. `KERNEL_LSP_PYTHON`).
    pub env: Vec<(String, String)>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            command: default_command(),
            size: 1,
            workers: Vec::new(),
            limits: TimeLimits::default(),
            kill_grace: Duration::from_secs(2),
            shutdown_grace: Duration::from_millis(2000),
            env: Vec::new(),
        }
    }
}

impl PoolConfig {
    /// The workers this config starts, in order; the first is the primary worker.
    pub fn specs(&self) -> Vec<WorkerSpec> {
        if !self.workers.is_empty() {
            return self.workers.clone();
        }
        (0..self.size.max(1))
            .map(|_| WorkerSpec {
                command: self.command.clone(),
                env: Vec::new(),
                gpu: None,
            })
            .collect()
    }

    /// The pool the settings `worker`, `workers` and `python` ask for: the one function
    /// behind the editor and every CLI command. `gpus` are the GPUs visible here
    /// ([`visible_gpus`]); `Err` names the setting that is wrong.
    pub fn from_settings(settings: &Settings, gpus: &[String]) -> Result<PoolConfig, String> {
        let mut config = PoolConfig::default();
        let custom = settings.worker.as_deref().filter(|w| !w.trim().is_empty());
        if let Some(w) = custom {
            config.command = split_command(w).map_err(|e| format!("setting `worker`: {e}"))?;
        }
        if let Some(py) = settings.python.as_deref().filter(|p| !p.trim().is_empty()) {
            config
                .env
                .push(("KERNEL_LSP_PYTHON".into(), py.to_string()));
        }
        let pinned = |i: usize, command: &[String]| {
            let gpu = gpus[i % gpus.len()].clone();
            WorkerSpec {
                command: command.to_vec(),
                env: vec![("CUDA_VISIBLE_DEVICES".into(), gpu.clone())],
                gpu: Some(gpu),
            }
        };
        match &settings.workers {
            // A remote command picks its own GPU; a single local worker keeps them all.
            Workers::Count(n) if custom.is_some() || gpus.is_empty() || *n <= 1 => {
                config.size = (*n).max(1);
            }
            Workers::Count(n) => {
                config.workers = (0..*n).map(|i| pinned(i, &config.command)).collect();
            }
            Workers::All if gpus.is_empty() => config.size = 1,
            Workers::All => {
                config.workers = (0..gpus.len())
                    .map(|i| pinned(i, &config.command))
                    .collect();
            }
            Workers::Commands(lines) => {
                for (i, line) in lines.iter().enumerate() {
                    let command = split_command(line)
                        .map_err(|e| format!("setting `workers`, command {}: {e}", i + 1))?;
                    config.workers.push(WorkerSpec {
                        command,
                        env: Vec::new(),
                        gpu: None,
                    });
                }
            }
        }
        Ok(config)
    }
}

/// The GPUs this process may hand to local workers, as `CUDA_VISIBLE_DEVICES` values:
/// the entries of `CUDA_VISIBLE_DEVICES` when it is set, else one per GPU the NVIDIA
/// driver lists under `/proc/driver/nvidia/gpus`. Never loads the CUDA driver.
pub fn visible_gpus() -> Vec<String> {
    if let Ok(v) = std::env::var("CUDA_VISIBLE_DEVICES") {
        return parse_visible(&v);
    }
    let n = std::fs::read_dir("/proc/driver/nvidia/gpus")
        .map(|d| d.filter_map(|e| e.ok()).count())
        .unwrap_or(0);
    (0..n).map(|i| i.to_string()).collect()
}

/// `CUDA_VISIBLE_DEVICES`'s entries up to the first invalid one (`-1` hides the rest,
/// as CUDA reads it).
fn parse_visible(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .take_while(|e| !e.is_empty() && !e.starts_with('-'))
        .map(str::to_string)
        .collect()
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
    slots: Vec<Slot>,
    /// Woken whenever a slot is released, a worker starts or fails, or the pool closes.
    changed: Notify,
    hello: StdMutex<Option<HelloResult>>,
    next_id: AtomicU64,
    closed: AtomicBool,
    /// Process groups (or pids) of live workers, to kill on shutdown or drop even when a
    /// request holds the worker.
    live: Arc<StdMutex<HashSet<u32>>>,
}

/// One place in the pool: the worker's spec, the running worker (the lock is held while
/// it works), and what the pool knows about it.
struct Slot {
    spec: WorkerSpec,
    worker: Mutex<Option<Worker>>,
    busy: AtomicBool,
    info: StdMutex<SlotInfo>,
}

#[derive(Default)]
struct SlotInfo {
    hello: Option<HelloResult>,
    /// Start failures in a row; the backoff doubles with each.
    failures: u32,
    /// No start is tried before this (after a failed start).
    retry_at: Option<Instant>,
    last_error: Option<String>,
}

/// First wait after a failed start; doubles with each failure up to `BACKOFF_MAX`.
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

fn backoff(failures: u32) -> Duration {
    BACKOFF_FIRST
        .saturating_mul(1u32 << failures.saturating_sub(1).min(10))
        .min(BACKOFF_MAX)
}

/// Where one worker of the pool stands, for `health`, the status line and reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// 0 is the primary worker (the one winners are re-timed on).
    pub index: usize,
    pub command: String,
    /// The `CUDA_VISIBLE_DEVICES` it is pinned to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// The device its `hello` named (None: not started yet, or no GPU there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    pub state: WorkerState,
    /// Why its last start failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkerState {
    NotStarted,
    Idle,
    Busy,
    /// Its last start failed; the next is tried after a backoff.
    Down,
}

impl WorkerState {
    pub fn label(self) -> &'static str {
        match self {
            WorkerState::NotStarted => "not started",
            WorkerState::Idle => "alive, idle",
            WorkerState::Busy => "alive, busy",
            WorkerState::Down => "down",
        }
    }
}

/// Which worker of the pool did something, as the history and `--json` record it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRef {
    /// 1-based; worker 1 is the primary.
    pub worker: usize,
    /// The device its `hello` named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// The `CUDA_VISIBLE_DEVICES` it is pinned to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
}

impl std::fmt::Display for WorkerRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "worker {}", self.worker)?;
        let parts: Vec<String> = self
            .device
            .iter()
            .cloned()
            .chain(self.gpu.iter().map(|g| format!("GPU {g}")))
            .collect();
        if !parts.is_empty() {
            write!(f, " ({})", parts.join(", "))?;
        }
        Ok(())
    }
}

/// A request's reply and the worker that gave it (None when no worker could take it).
#[derive(Debug)]
pub struct Served {
    pub worker: Option<usize>,
    pub result: Result<OpResult, WorkerError>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let live = self.live.lock().map(|l| l.clone()).unwrap_or_default();
        for pid in live {
            kill_group(pid);
        }
    }
}

/// A locked slot. Dropping it releases the slot first and then wakes the waiters, so a
/// waiter woken always finds the slot free.
struct Held<'a> {
    index: usize,
    guard: Option<tokio::sync::MutexGuard<'a, Option<Worker>>>,
    inner: &'a Inner,
}

impl Held<'_> {
    fn worker(&mut self) -> &mut Option<Worker> {
        self.guard.as_mut().expect("held until dropped")
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.inner.slots[self.index]
            .busy
            .store(false, Ordering::SeqCst);
        drop(self.guard.take());
        self.inner.changed.notify_waiters();
    }
}

impl WorkerPool {
    pub fn new(config: PoolConfig) -> Self {
        let slots = config
            .specs()
            .into_iter()
            .map(|spec| Slot {
                spec,
                worker: Mutex::new(None),
                busy: AtomicBool::new(false),
                info: StdMutex::new(SlotInfo::default()),
            })
            .collect();
        WorkerPool {
            inner: Arc::new(Inner {
                config,
                slots,
                changed: Notify::new(),
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

    /// How many workers the pool has (started or not).
    pub fn size(&self) -> usize {
        self.inner.slots.len()
    }

    /// How many workers are working on a request right now.
    pub fn busy(&self) -> usize {
        self.inner
            .slots
            .iter()
            .filter(|s| s.busy.load(Ordering::SeqCst))
            .count()
    }

    /// The `hello` of the most recently started worker, if any has started.
    pub fn hello(&self) -> Option<HelloResult> {
        self.inner.hello.lock().ok().and_then(|h| h.clone())
    }

    /// The `hello` of worker `index`, once it has started.
    pub fn hello_of(&self, index: usize) -> Option<HelloResult> {
        let slot = self.inner.slots.get(index)?;
        slot.info.lock().ok().and_then(|i| i.hello.clone())
    }

    /// Which worker `index` is: its number, device and pinned GPU.
    pub fn worker_ref(&self, index: usize) -> WorkerRef {
        WorkerRef {
            worker: index + 1,
            device: self
                .hello_of(index)
                .map(|h| h.device.map_or_else(|| "no GPU".to_string(), |d| d.name)),
            gpu: self.inner.slots.get(index).and_then(|s| s.spec.gpu.clone()),
        }
    }

    /// "worker 2 (NVIDIA H100 80GB HBM3, GPU 1)": which worker, for reports.
    pub fn describe_worker(&self, index: usize) -> String {
        self.worker_ref(index).to_string()
    }

    /// Every worker and where it stands.
    pub fn status(&self) -> Vec<WorkerStatus> {
        let now = Instant::now();
        self.inner
            .slots
            .iter()
            .enumerate()
            .map(|(index, slot)| {
                let info = slot.info.lock();
                let (hello, error, down) = match &info {
                    Ok(i) => (
                        i.hello.clone(),
                        i.last_error.clone(),
                        i.retry_at.is_some_and(|t| t > now)
                            || (i.failures > 0 && i.hello.is_none()),
                    ),
                    Err(_) => (None, None, false),
                };
                let running = match slot.worker.try_lock() {
                    Ok(w) => w.is_some(),
                    Err(_) => true,
                };
                let state = if slot.busy.load(Ordering::SeqCst) {
                    WorkerState::Busy
                } else if down {
                    WorkerState::Down
                } else if running {
                    WorkerState::Idle
                } else {
                    WorkerState::NotStarted
                };
                WorkerStatus {
                    index,
                    command: shorten(&slot.spec.command.join(" "), 80),
                    gpu: slot.spec.gpu.clone(),
                    device: hello.and_then(|h| h.device.map(|d| d.name)),
                    state,
                    error,
                }
            })
            .collect()
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

    /// Starts every worker (in parallel) and returns each one's `hello` or error, in
    /// pool order.
    pub async fn connect_all(&self) -> Vec<Result<HelloResult, WorkerError>> {
        let starts = (0..self.size()).map(|i| async move {
            let served = self.request_on(Some(i), Op::Hello, None, &mut |_| {}).await;
            match served.result {
                Ok(OpResult::Hello(h)) => Ok(h),
                Ok(other) => Err(lost(format!(
                    "the worker answered `hello` with a {} result",
                    result_name(&other)
                ))),
                Err(e) => Err(e),
            }
        });
        futures::future::join_all(starts).await
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
        self.request_on(None, op, time_limit, progress).await.result
    }

    /// Runs `op` on worker `target` (None: the first free one) and says which worker
    /// answered. A worker that cannot start is retried after a backoff while the others
    /// take the work; when no worker of the pool can take it, the error says why each
    /// could not.
    pub async fn request_on(
        &self,
        target: Option<usize>,
        op: Op,
        time_limit: Option<Duration>,
        progress: &mut (dyn FnMut(&str) + Send),
    ) -> Served {
        let mut op = Some(op);
        match self
            .request_next_on(target, || op.take(), time_limit, progress)
            .await
        {
            Some(served) => served,
            None => unreachable!("the op is taken once"),
        }
    }

    /// [`Self::request_on`] with the op chosen only once a worker is held (started and
    /// free): `next` is called then, and `None` from it releases the worker and returns
    /// `None`. So a worker takes the next item of a queue when it is free, not earlier.
    /// When no worker could be held, `next` is not called and the error comes back.
    pub async fn request_next_on(
        &self,
        target: Option<usize>,
        next: impl FnOnce() -> Option<Op>,
        time_limit: Option<Duration>,
        progress: &mut (dyn FnMut(&str) + Send),
    ) -> Option<Served> {
        if target.is_some_and(|t| t >= self.size()) {
            return Some(Served {
                worker: None,
                result: Err(lost(format!(
                    "the pool has {} workers, there is no worker {}",
                    self.size(),
                    target.unwrap_or(0) + 1
                ))),
            });
        }
        let inner = &self.inner;
        let mut held = loop {
            let mut held = match self.acquire(target).await {
                Ok(h) => h,
                Err(e) => {
                    return Some(Served {
                        worker: None,
                        result: Err(e),
                    })
                }
            };
            // A worker that exited while idle is replaced quietly.
            if let Some(w) = held.worker().as_mut() {
                if let Ok(Some(status)) = w.child.try_wait() {
                    tracing::warn!(
                        "worker {} exited while idle ({status}); starting a new one",
                        w.pid_label()
                    );
                    *held.worker() = None;
                }
            }
            if held.worker().is_some() {
                break held;
            }
            match inner.start_worker(held.index).await {
                Ok((worker, hello)) => {
                    inner.started(held.index, &hello);
                    *held.worker() = Some(worker);
                    break held;
                }
                // Back off this worker and try the others (or report them all).
                Err(e) => inner.start_failed(held.index, &e),
            }
        };
        let index = held.index;
        let op = next()?;
        if matches!(op, Op::Shutdown) {
            return Some(Served {
                worker: None,
                result: Err(WorkerError {
                    kind: ErrorKind::BadRequest,
                    message: "`shutdown` is not a request; call WorkerPool::shutdown".into(),
                    log: None,
                }),
            });
        }
        let limit = time_limit.unwrap_or_else(|| inner.config.limits.for_op(&op));
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        // The worker is owned by this future while it works: if the caller drops the
        // future (cancels), the worker is dropped too, which kills it, because its state
        // (a request still running) is unknown. The slot stays locked meanwhile.
        let mut worker = held
            .worker()
            .take()
            .expect("a worker was just put in the slot");
        let began = std::time::SystemTime::now();
        let outcome = worker
            .exchange(id, &op, limit, inner.config.kill_grace, progress)
            .await;
        trace_request(
            index,
            &op,
            began,
            matches!(&outcome, Exchange::Reply(Ok(_))),
        );
        let result = match outcome {
            Exchange::Reply(Ok(OpResult::Hello(h))) => {
                *held.worker() = Some(worker);
                inner.started(index, &h);
                Ok(OpResult::Hello(h))
            }
            // A kernel that faulted while being verified is reported as a failure inside
            // a successful reply, and the worker exits right after it (its CUDA context
            // is gone): retire it now rather than hand it the next request.
            Exchange::Reply(Ok(result)) if reports_fault(&result) => {
                worker.stop(Duration::from_millis(500)).await;
                drop(held);
                self.replace_in_background(index);
                Ok(result)
            }
            Exchange::Reply(Ok(result)) => {
                *held.worker() = Some(worker);
                Ok(result)
            }
            Exchange::Reply(Err(error)) if error.kind == ErrorKind::Fault => {
                // The worker exits by itself after a fault; make sure, then replace it.
                worker.stop(Duration::from_millis(200)).await;
                drop(held);
                self.replace_in_background(index);
                Err(error)
            }
            Exchange::Reply(Err(error)) => {
                *held.worker() = Some(worker);
                Err(error)
            }
            Exchange::TimedOut => {
                worker.kill().await;
                drop(held);
                self.replace_in_background(index);
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
                let message = worker.lost_message(&why, &op).await;
                drop(held);
                self.replace_in_background(index);
                Err(lost(message))
            }
        };
        Some(Served {
            worker: Some(index),
            result,
        })
    }

    /// Locks a free slot among `target` (or all), preferring one with a running worker
    /// and skipping those backing off after a failed start. Waits while all are busy;
    /// fails at once when every one is backing off.
    async fn acquire(&self, target: Option<usize>) -> Result<Held<'_>, WorkerError> {
        let inner = &self.inner;
        let indices: Vec<usize> = match target {
            Some(t) => vec![t],
            None => (0..inner.slots.len()).collect(),
        };
        loop {
            if inner.closed.load(Ordering::SeqCst) {
                return Err(closed());
            }
            // Registered before looking, so a release between the look and the wait
            // still wakes this waiter.
            let changed = inner.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let now = Instant::now();
            let mut empty = None;
            let mut usable = false;
            let mut next_retry: Option<Instant> = None;
            for &i in &indices {
                let slot = &inner.slots[i];
                let retry_at = slot.info.lock().ok().and_then(|s| s.retry_at);
                if let Some(t) = retry_at.filter(|t| *t > now) {
                    next_retry = Some(next_retry.map_or(t, |n: Instant| n.min(t)));
                    continue;
                }
                usable = true;
                if let Ok(guard) = slot.worker.try_lock() {
                    if guard.is_some() {
                        return Ok(inner.hold(i, guard));
                    }
                    if empty.is_none() {
                        empty = Some((i, guard));
                    }
                }
            }
            if let Some((i, guard)) = empty {
                return Ok(inner.hold(i, guard));
            }
            if !usable {
                return Err(inner.none_live(&indices, next_retry));
            }
            let _ = tokio::time::timeout(Duration::from_secs(1), changed).await;
        }
    }

    /// Asks every idle worker to shut down, waits `shutdown_grace`, then kills whatever
    /// is left (busy workers included). Later requests fail.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        inner.closed.store(true, Ordering::SeqCst);
        inner.changed.notify_waiters();
        let grace = inner.config.shutdown_grace;
        let mut stops = Vec::new();
        for slot in &inner.slots {
            if let Ok(mut slot) = slot.worker.try_lock() {
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
        for &pid in &live {
            kill_group(pid);
        }
        // The SIGKILL that follows must not wait for a thread a CLI exits before.
        if !live.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
            #[cfg(unix)]
            for pid in live {
                signal_group(pid, 9);
            }
        }
    }

    /// Starts every worker but the primary in the background (those not running yet), so
    /// their start-up (Python, torch, a CUDA context, a cluster's queue) runs beside the
    /// primary's instead of after it. Nothing waits for them: a request that finds them
    /// still starting takes a running worker or waits for the first free one.
    pub fn start_others_in_background(&self) {
        for index in 1..self.size() {
            self.replace_in_background(index);
        }
    }

    /// Starts a worker in slot `index` again, so the request after a failure does not
    /// pay for start-up. A failed start backs the slot off like any other.
    fn replace_in_background(&self, index: usize) {
        let pool = self.clone();
        tokio::spawn(async move {
            pool.start_in_slot(index).await;
        });
    }

    /// Starts a worker in slot `index` unless one runs there (or the pool is closed).
    /// True when a worker runs there afterwards.
    async fn start_in_slot(&self, index: usize) -> bool {
        let inner = &self.inner;
        if inner.closed.load(Ordering::SeqCst) {
            return false;
        }
        let slot = &inner.slots[index];
        let guard = slot.worker.lock().await;
        let mut held = inner.hold(index, guard);
        if inner.closed.load(Ordering::SeqCst) {
            return false;
        }
        if held.worker().is_some() {
            return true;
        }
        // A slot that just failed to start waits out its backoff (a request retries it).
        let backing_off = slot
            .info
            .lock()
            .ok()
            .and_then(|i| i.retry_at)
            .is_some_and(|t| t > Instant::now());
        if backing_off {
            return false;
        }
        match inner.start_worker(index).await {
            Ok((worker, hello)) => {
                inner.started(index, &hello);
                *held.worker() = Some(worker);
                true
            }
            Err(e) => {
                tracing::warn!("could not start a replacement worker: {}", e.message);
                inner.start_failed(index, &e);
                false
            }
        }
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
    fn hold<'a>(
        &'a self,
        index: usize,
        guard: tokio::sync::MutexGuard<'a, Option<Worker>>,
    ) -> Held<'a> {
        self.slots[index].busy.store(true, Ordering::SeqCst);
        Held {
            index,
            guard: Some(guard),
            inner: self,
        }
    }

    fn started(&self, index: usize, hello: &HelloResult) {
        if let Ok(mut info) = self.slots[index].info.lock() {
            info.hello = Some(hello.clone());
            info.failures = 0;
            info.retry_at = None;
            info.last_error = None;
        }
        if let Ok(mut h) = self.hello.lock() {
            *h = Some(hello.clone());
        }
        self.changed.notify_waiters();
    }

    fn start_failed(&self, index: usize, error: &WorkerError) {
        if let Ok(mut info) = self.slots[index].info.lock() {
            info.failures += 1;
            info.retry_at = Some(Instant::now() + backoff(info.failures));
            info.last_error = Some(error.message.clone());
        }
        self.changed.notify_waiters();
    }

    /// The one error for "no worker can take this": a single worker's own start error,
    /// or each worker's.
    fn none_live(&self, indices: &[usize], next_retry: Option<Instant>) -> WorkerError {
        let errors: Vec<(usize, String)> = indices
            .iter()
            .map(|&i| {
                let e = self.slots[i]
                    .info
                    .lock()
                    .ok()
                    .and_then(|s| s.last_error.clone())
                    .unwrap_or_else(|| "it is backing off after a failed start".into());
                (i, e)
            })
            .collect();
        let retry = next_retry.map_or(String::new(), |t| {
            format!(
                "; the next start is tried in {}",
                human_duration(Duration::from_secs(
                    t.saturating_duration_since(Instant::now())
                        .as_secs_f64()
                        .ceil() as u64
                ))
            )
        });
        let message = match errors.as_slice() {
            [(_, e)] if self.slots.len() == 1 => e.clone(),
            [(i, e)] => format!("worker {} cannot be started: {e}{retry}", i + 1),
            _ => {
                let each: Vec<String> = errors
                    .iter()
                    .map(|(i, e)| {
                        format!(
                            "worker {} (`{}`): {e}",
                            i + 1,
                            worker_cmd(&self.slots[*i].spec.command)
                        )
                    })
                    .collect();
                format!(
                    "no worker of the pool is alive ({} workers, none could be started){retry}:\n{}",
                    errors.len(),
                    each.join("\n")
                )
            }
        };
        lost(message)
    }

    /// Spawns worker `index` and waits for its `hello`.
    async fn start_worker(&self, index: usize) -> Result<(Worker, HelloResult), WorkerError> {
        let spec = &self.slots[index].spec;
        let command = &spec.command;
        let shown = command.join(" ");
        let Some((program, args)) = command.split_first() else {
            return Err(lost("the worker command is empty".into()));
        };
        let mut cmd = Command::new(program);
        cmd.args(args)
            .envs(self.config.env.iter().map(|(k, v)| (k, v)))
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Dropped workers are stopped by `kill_group` (SIGTERM first, so `srun` can
            // cancel its step); tokio reaps them in the background.
            .kill_on_drop(false);
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

    /// Stops the process group (SIGTERM, then SIGKILL to what is left after half a
    /// second) and reaps the worker.
    async fn kill(mut self) {
        #[cfg(unix)]
        if let Some(pid) = self.pid {
            signal_group(pid, 15);
            let _ = tokio::time::timeout(Duration::from_millis(500), self.child.wait()).await;
        }
        self.kill_now();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }

    /// SIGTERM to the group now and SIGKILL soon after (`kill_group`); the direct child
    /// gets SIGKILL at once only when it has no group to signal.
    fn kill_now(&mut self) {
        if let Some(pid) = self.pid {
            kill_group(pid);
            if let Ok(mut live) = self.live.lock() {
                live.remove(&pid);
            }
        } else {
            let _ = self.child.start_kill();
        }
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

/// Stops the worker's process group (it leads one: spawned with `process_group(0)`):
/// SIGTERM first, so a launcher that must clean up far away can (`srun` cancels its job
/// step; killed outright it would leave the step running on the cluster), then SIGKILL
/// half a second later, so children that ignore SIGTERM, an `ssh` client or a Python
/// helper die with it.
pub(crate) fn kill_group(pid: u32) {
    #[cfg(unix)]
    {
        const SIGTERM: i32 = 15;
        const SIGKILL: i32 = 9;
        signal_group(pid, SIGTERM);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            signal_group(pid, SIGKILL);
        });
    }
    #[cfg(not(unix))]
    let _ = pid;
}

#[cfg(unix)]
fn signal_group(pid: u32, sig: i32) {
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    if let Ok(pid) = i32::try_from(pid) {
        if pid > 0 {
            // SAFETY: kill(2) with a negative pid signals that process group; it has
            // no memory-safety preconditions. A group already gone gives ESRCH.
            unsafe {
                kill(-pid, sig);
            }
        }
    }
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
/// With `KERNEL_LSP_TRACE=FILE`, one JSON line per request a worker answered (or lost):
/// the worker's index, the op, what it was about, its start and end (seconds since the
/// Unix epoch) and whether it succeeded. Where a pool's time goes (each worker's busy
/// and idle time): `tests/gpu/multigpu.py` reads it. Appended; failures to write are
/// ignored (a diagnostic, never in the way).
fn trace_request(worker: usize, op: &Op, began: std::time::SystemTime, ok: bool) {
    use std::io::Write;
    static FILE: std::sync::OnceLock<Option<StdMutex<std::fs::File>>> = std::sync::OnceLock::new();
    let file = FILE.get_or_init(|| {
        let path = std::env::var_os("KERNEL_LSP_TRACE").filter(|p| !p.is_empty())?;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()
            .map(StdMutex::new)
    });
    let Some(file) = file else {
        return;
    };
    let secs = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    };
    let (kind, cases) = match op {
        Op::Hello => ("hello", None),
        Op::Compile { .. } => ("compile", None),
        Op::Verify { cases, .. } => ("verify", cases.clone()),
        Op::Time { .. } => ("time", None),
        Op::Shutdown => ("shutdown", None),
    };
    let what = match op {
        Op::Verify { candidate, .. } if !candidate.label.is_empty() => candidate.label.clone(),
        _ => subject(op),
    };
    let line = serde_json::json!({
        "worker": worker,
        "op": kind,
        "what": what,
        "cases": cases,
        "start": secs(began),
        "end": secs(std::time::SystemTime::now()),
        "ok": ok,
    });
    if let Ok(mut f) = file.lock() {
        let _ = writeln!(f, "{line}");
    }
}

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
    fn the_workers_setting_shapes_the_pool() {
        use crate::settings::{Settings, Workers};
        let gpus: Vec<String> = vec!["3".into(), "5".into()];
        let with = |workers: Workers, worker: Option<&str>, gpus: &[String]| {
            let s = Settings {
                workers,
                worker: worker.map(str::to_string),
                python: Some("/opt/py".into()),
                ..Settings::default()
            };
            PoolConfig::from_settings(&s, gpus).map(|c| c.specs())
        };
        let pins = |specs: &[WorkerSpec]| -> Vec<Option<String>> {
            specs.iter().map(|s| s.gpu.clone()).collect()
        };
        // "all": one local worker per visible GPU, each pinned.
        let all = with(Workers::All, None, &gpus).unwrap();
        assert_eq!(pins(&all), vec![Some("3".into()), Some("5".into())]);
        assert_eq!(
            all[1].env,
            vec![("CUDA_VISIBLE_DEVICES".to_string(), "5".to_string())]
        );
        assert_eq!(all[0].command, default_command());
        // No GPU here: one worker (it reports why it has none).
        assert_eq!(with(Workers::All, None, &[]).unwrap().len(), 1);
        // A count pins local workers in turn; one worker keeps every GPU.
        let three = with(Workers::Count(3), None, &gpus).unwrap();
        assert_eq!(
            pins(&three),
            vec![Some("3".into()), Some("5".into()), Some("3".into())]
        );
        assert_eq!(
            pins(&with(Workers::Count(1), None, &gpus).unwrap()),
            vec![None]
        );
        // A remote `worker` command picks its own GPU: not pinned here.
        let remote = with(Workers::Count(2), Some("ssh box kernel-lsp worker"), &gpus).unwrap();
        assert_eq!(pins(&remote), vec![None, None]);
        assert_eq!(
            remote[1].command,
            vec!["ssh", "box", "kernel-lsp", "worker"]
        );
        // A list: one worker per command, in order.
        let list = with(
            Workers::Commands(vec![
                "kernel-lsp worker".into(),
                "srun -n1 kernel-lsp worker".into(),
            ]),
            None,
            &gpus,
        )
        .unwrap();
        assert_eq!(list[1].command[0], "srun");
        let bad = with(
            Workers::Commands(vec!["ok".into(), "'x".into()]),
            None,
            &gpus,
        )
        .unwrap_err();
        assert!(bad.contains("setting `workers`, command 2"), "{bad}");
        // `python` reaches every worker.
        let s = Settings {
            python: Some("/opt/py".into()),
            ..Settings::default()
        };
        let c = PoolConfig::from_settings(&s, &gpus).unwrap();
        assert!(c
            .env
            .contains(&("KERNEL_LSP_PYTHON".into(), "/opt/py".into())));
        assert_eq!(parse_visible("2, 0,-1,1"), vec!["2", "0"]);
        assert!(parse_visible("").is_empty());
    }

    #[test]
    fn backoff_doubles_up_to_a_cap() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(4));
        assert_eq!(backoff(40), BACKOFF_MAX);
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(Duration::from_secs(10)), "10 s");
        assert_eq!(human_duration(Duration::from_millis(300)), "300 ms");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1.5 s");
    }
}
