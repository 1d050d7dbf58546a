//! Editor jobs: the `kernel-lsp.*` commands behind the code actions (optimize, tune,
//! benchmark, pin, revert, history, apply). Long ones report `$/progress` with the
//! current stage and stop when the editor cancels (`window/workDoneProgress/cancel` or
//! `$/cancelRequest`). A verified faster result becomes a versioned `workspace/applyEdit`
//! over the kernel's region (its `@bench` lines and unit) — or a code action, with
//! `applyMode = "offer"` — and is refused when the author typed in that region since the
//! job started. One job per kernel at a time. GPU work goes through the worker pool;
//! this module never touches CUDA.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Value};
use tower_lsp::jsonrpc::{Error, Result};
use tower_lsp::lsp_types::notification::{Notification, Progress};
use tower_lsp::lsp_types::request::WorkDoneProgressCreate;
use tower_lsp::lsp_types::*;

use crate::document::{Document, LinePos};
use crate::optimize::catalog::Catalog;
use crate::optimize::{self, evaluate, history, Event, OptimizeOptions};
use crate::settings::{ApplyMode, Settings};
use crate::spec::EvalEnv;
use crate::syntax::{self, Kernel, Lang};
use crate::worker::pool::{self, PoolConfig, WorkerPool, WorkerStatus};
use crate::worker::protocol::{Op, OpResult, Timing, TorchMode, Version};

use super::Backend;

mod capture;

/// The `kernel-lsp.*` commands, as one type: the server advertises [`SupportedCommand::ALL`],
/// parses an `executeCommand` into one, and dispatches on it with an exhaustive match, so a
/// command cannot be advertised without a handler (issue #16, as ruff's server does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SupportedCommand {
    Optimize,
    Tune,
    Bench,
    Pin,
    Revert,
    History,
    Apply,
    Fix,
    Profile,
    Capture,
}

impl SupportedCommand {
    pub const ALL: [SupportedCommand; 10] = [
        Self::Optimize,
        Self::Tune,
        Self::Bench,
        Self::Pin,
        Self::Revert,
        Self::History,
        Self::Apply,
        Self::Fix,
        Self::Profile,
        Self::Capture,
    ];

    /// The command id on the wire.
    pub const fn id(self) -> &'static str {
        match self {
            Self::Optimize => "kernel-lsp.optimize",
            Self::Tune => "kernel-lsp.tune",
            Self::Bench => "kernel-lsp.bench",
            Self::Pin => "kernel-lsp.pinBaseline",
            Self::Revert => "kernel-lsp.revert",
            Self::History => "kernel-lsp.showHistory",
            Self::Apply => "kernel-lsp.applyRewrite",
            Self::Fix => "kernel-lsp.fix",
            Self::Profile => "kernel-lsp.profile",
            Self::Capture => "kernel-lsp.capture",
        }
    }

    pub fn parse(id: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.id() == id)
    }
}

pub const OPTIMIZE: SupportedCommand = SupportedCommand::Optimize;
pub const TUNE: SupportedCommand = SupportedCommand::Tune;
pub const BENCH: SupportedCommand = SupportedCommand::Bench;
pub const PIN: SupportedCommand = SupportedCommand::Pin;
pub const REVERT: SupportedCommand = SupportedCommand::Revert;
pub const HISTORY: SupportedCommand = SupportedCommand::History;
pub const APPLY: SupportedCommand = SupportedCommand::Apply;
pub const FIX: SupportedCommand = SupportedCommand::Fix;
pub const PROFILE: SupportedCommand = SupportedCommand::Profile;
pub const CAPTURE: SupportedCommand = SupportedCommand::Capture;

/// What a command names: a kernel by name, or the kernel at a position.
#[derive(Debug, Deserialize)]
struct Target {
    uri: Url,
    #[serde(default)]
    kernel: Option<String>,
    #[serde(default)]
    position: Option<Position>,
    /// `kernel-lsp.capture`: the command to run (else the `captureCommand` setting).
    #[serde(default)]
    command: Option<String>,
}

/// What the server knows about one kernel from jobs (not from the text).
#[derive(Clone, Debug, Default)]
pub(super) struct KernelStatus {
    /// The last timing of the version in the editor, and its speedup over the baseline.
    pub timing: Option<Timing>,
    pub speedup: Option<f64>,
    /// With `reference = torch: ...`: the speedups over PyTorch eager and torch.compile,
    /// and the setting that picks which the hint shows.
    pub torch: Option<(Option<f64>, Option<f64>, crate::settings::HintSpeedupVs)>,
    pub registers: Option<u32>,
    /// The last verification failure: (message, buffer).
    pub failure: Option<(String, Option<String>)>,
    /// The last win, as an information diagnostic.
    pub win: Option<String>,
    /// A verified rewrite waiting for the author (`applyMode = "offer"`).
    pub pending: Option<Pending>,
    /// Set while a job runs on this kernel; setting it to true cancels the job.
    pub running: Option<Arc<AtomicBool>>,
    /// The region text the last bench measured (benchOnSave skips unchanged kernels).
    pub benched_region: Option<String>,
    /// The last Nsight Compute profile, and the region text it was taken of.
    pub profile: Option<(crate::profile::Profile, String)>,
}

#[derive(Clone, Debug)]
pub(super) struct Pending {
    /// The kernel's region when the job started, and the verified replacement.
    pub start_region: String,
    pub new_region: String,
    pub speedup: f64,
    pub label: String,
}

/// Whether this machine has Nsight Compute (looked up once per server).
pub(super) fn ncu_present() -> bool {
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PRESENT.get_or_init(|| crate::toolchain::ncu::locate(None).is_some())
}

/// The kernel's region: from its `@bench` block (or its first unit range) to the end of
/// its last unit range. Edits of a job cover exactly this.
pub(super) fn region(k: &Kernel) -> std::ops::Range<usize> {
    optimize::apply::kernel_region(k)
}

fn find_kernel(lang: Lang, text: &str, name: &str) -> Option<(Kernel, std::ops::Range<usize>)> {
    let doc = Document::new(lang, 0, text);
    let model = syntax::analyze(lang, text, doc.tree()?);
    let k = model.kernel(name)?.clone();
    let r = region(&k);
    Some((k, r))
}

/// Replace `range` of the document at its current version with `new_text`.
fn region_edit(
    uri: &Url,
    doc: &Document,
    range: &std::ops::Range<usize>,
    enc: crate::document::PositionEncoding,
    new_text: String,
) -> TextDocumentEdit {
    TextDocumentEdit {
        text_document: OptionalVersionedTextDocumentIdentifier {
            uri: uri.clone(),
            version: Some(doc.version),
        },
        edits: vec![OneOf::Left(TextEdit {
            range: super::convert::lsp_range(doc, range, enc),
            new_text,
        })],
    }
}

fn message(outcome: &str, text: impl Into<String>) -> Value {
    json!({"outcome": outcome, "message": text.into()})
}

/// The `.kernel-lsp/<what>/<file>/<kernel>.txt` store next to the history.
fn store_path(file: &Path, what: &str, kernel: &str) -> PathBuf {
    history::workspace_root(file)
        .join(".kernel-lsp")
        .join(what)
        .join(history::relative(file))
        .join(format!("{kernel}.txt"))
}

fn store(file: &Path, what: &str, kernel: &str, text: &str) -> std::result::Result<(), String> {
    let p = store_path(file, what, kernel);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    std::fs::write(&p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))
}

fn load(file: &Path, what: &str, kernel: &str) -> Option<String> {
    std::fs::read_to_string(store_path(file, what, kernel)).ok()
}

/// Sends `$/progress` for one job (when the client gave or accepted a token) and the
/// `kernel-lsp/status` job line.
struct Reporter {
    client: tower_lsp::Client,
    /// The last worker status (GPU name, message), repeated in every status update.
    worker: Arc<std::sync::Mutex<WorkerLine>>,
    token: Option<NumberOrString>,
    title: String,
    /// `end` was sent; otherwise dropping the reporter sends it (a job that returned
    /// early with an error still closes its progress and clears the status line).
    ended: AtomicBool,
}

impl Drop for Reporter {
    fn drop(&mut self) {
        if self.ended.swap(true, Ordering::Relaxed) {
            return;
        }
        let client = self.client.clone();
        let token = self.token.clone();
        let worker = self.worker.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let r = Reporter {
                    worker,
                    client,
                    token,
                    title: String::new(),
                    ended: AtomicBool::new(false),
                };
                r.end("stopped").await;
                r.ended.store(true, Ordering::Relaxed);
            });
        }
    }
}

impl Reporter {
    async fn begin(
        client: &tower_lsp::Client,
        given: Option<NumberOrString>,
        can_create: bool,
        title: String,
        cancel: &Arc<AtomicBool>,
        tokens: &Arc<std::sync::Mutex<HashMap<String, Arc<AtomicBool>>>>,
        worker: Arc<std::sync::Mutex<WorkerLine>>,
    ) -> Reporter {
        let token = match given {
            Some(t) => Some(t),
            None if can_create => {
                let t = NumberOrString::String(format!(
                    "kernel-lsp/{}",
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos())
                ));
                client
                    .send_request::<WorkDoneProgressCreate>(WorkDoneProgressCreateParams {
                        token: t.clone(),
                    })
                    .await
                    .ok()
                    .map(|_| t)
            }
            None => None,
        };
        if let Some(t) = &token {
            if let Ok(mut m) = tokens.lock() {
                m.insert(token_key(t), cancel.clone());
            }
            client
                .send_notification::<Progress>(ProgressParams {
                    token: t.clone(),
                    value: ProgressParamsValue::WorkDone(WorkDoneProgress::Begin(
                        WorkDoneProgressBegin {
                            title: title.clone(),
                            cancellable: Some(true),
                            message: None,
                            percentage: None,
                        },
                    )),
                })
                .await;
        }
        Reporter {
            client: client.clone(),
            worker,
            token,
            title,
            ended: AtomicBool::new(false),
        }
    }

    async fn report(&self, stage: &str) {
        if let Some(t) = &self.token {
            self.client
                .send_notification::<Progress>(ProgressParams {
                    token: t.clone(),
                    value: ProgressParamsValue::WorkDone(WorkDoneProgress::Report(
                        WorkDoneProgressReport {
                            cancellable: Some(true),
                            message: Some(stage.to_string()),
                            percentage: None,
                        },
                    )),
                })
                .await;
        }
        self.client
            .send_notification::<StatusNotification>(
                self.status(Some(format!("{}: {stage}", self.title))),
            )
            .await;
    }

    async fn end(&self, message: &str) {
        if self.ended.swap(true, Ordering::Relaxed) {
            return;
        }
        if let Some(t) = &self.token {
            self.client
                .send_notification::<Progress>(ProgressParams {
                    token: t.clone(),
                    value: ProgressParamsValue::WorkDone(WorkDoneProgress::End(
                        WorkDoneProgressEnd {
                            message: Some(message.to_string()),
                        },
                    )),
                })
                .await;
        }
        self.client
            .send_notification::<StatusNotification>(self.status(None))
            .await;
    }
}

impl Reporter {
    fn status(&self, job: Option<String>) -> StatusParams {
        let (worker, message, workers) = self.worker.lock().map(|w| w.clone()).unwrap_or_default();
        StatusParams {
            worker,
            message,
            job,
            workers,
        }
    }
}

fn token_key(t: &NumberOrString) -> String {
    match t {
        NumberOrString::Number(n) => n.to_string(),
        NumberOrString::String(s) => s.clone(),
    }
}

/// `kernel-lsp/status`: the worker (GPU name, or none and why) and the running job.
pub enum StatusNotification {}

#[derive(Debug, serde::Serialize, Deserialize)]
pub struct StatusParams {
    /// The GPU's name; null when the worker has none (or has not started yet).
    pub worker: Option<String>,
    /// "no GPU: <reason>", or "".
    pub message: String,
    /// The running job, or null when none runs.
    pub job: Option<String>,
    /// Every worker of the pool: its command, pinned GPU, device and whether it is alive.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<WorkerStatus>,
}

/// The status line's worker part: the primary's GPU name, "no GPU: why", every worker.
pub type WorkerLine = (Option<String>, String, Vec<WorkerStatus>);

impl Notification for StatusNotification {
    type Params = StatusParams;
    const METHOD: &'static str = "kernel-lsp/status";
}

/// Clears the kernel's `running` flag when the job ends, and cancels the job if its
/// request was dropped (`$/cancelRequest` drops the handler's future).
struct JobGuard {
    backend: Backend,
    key: (Url, String),
    cancel: Arc<AtomicBool>,
    token: Option<String>,
}

impl Drop for JobGuard {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        let mut st = self.backend.state();
        if let Some(s) = st.kernels.get_mut(&self.key) {
            // Only this job's own flag: after a close and reopen, another job may run.
            if s.running
                .as_ref()
                .is_some_and(|r| Arc::ptr_eq(r, &self.cancel))
            {
                s.running = None;
            }
        }
        if let (Some(t), Ok(mut m)) = (&self.token, self.backend.progress_tokens.lock()) {
            m.remove(t);
        }
    }
}

/// A snapshot of an open document for a job.
struct Snapshot {
    /// The open of the document it was taken of (`OpenDoc::epoch`): results go only to
    /// that open, never to the same file opened again.
    epoch: u64,
    lang: Lang,
    text: String,
    kernel: Kernel,
    file: Option<PathBuf>,
    settings: Settings,
}

impl Backend {
    /// `workspace/executeCommand` for the `kernel-lsp.*` commands.
    pub(super) async fn execute(&self, params: ExecuteCommandParams) -> Result<Option<Value>> {
        let cmd = params.command.as_str();
        let Some(command) = SupportedCommand::parse(cmd) else {
            return Err(Error::invalid_params(format!(
                "unknown command `{cmd}`; kernel-lsp offers {}",
                SupportedCommand::ALL.map(|c| c.id()).join(", ")
            )));
        };
        let arg = params.arguments.first().cloned().ok_or_else(|| {
            Error::invalid_params(format!(
                "{cmd} needs one argument: {{uri, kernel | position}}"
            ))
        })?;
        let target: Target = serde_json::from_value(arg).map_err(|e| {
            Error::invalid_params(format!(
                "{cmd}: the argument must be {{uri, kernel | position}}: {}",
                super::conform::readable_decode_error(&e.to_string())
            ))
        })?;
        let token = params.work_done_progress_params.work_done_token;
        let snap = match self.snapshot(&target) {
            Ok(s) => s,
            Err(e) => return Ok(Some(self.tell(MessageType::WARNING, "failed", e).await)),
        };
        use SupportedCommand as C;
        let result = match command {
            C::Optimize | C::Tune | C::Fix => {
                self.optimize_job(command, &target.uri, snap, token).await
            }
            C::Bench => self.bench_job(&target.uri, snap, token).await,
            C::Profile => self.profile_job(&target.uri, snap, token).await,
            C::Pin => self.pin(&target.uri, &snap),
            C::Revert => self.revert(&target.uri, &snap).await,
            C::History => self.show_history(&snap).await,
            C::Apply => self.apply_pending(&target.uri, &snap.kernel.name).await,
            C::Capture => {
                self.capture_job(&target.uri, target.command.as_deref(), snap)
                    .await
            }
        };
        let value = match result {
            Ok(v) => v,
            Err(e) => message("failed", e),
        };
        let failed = value["outcome"] == "failed";
        let text = value["message"].as_str().unwrap_or_default().to_string();
        let kind = if failed {
            MessageType::WARNING
        } else {
            MessageType::INFO
        };
        self.client.show_message(kind, text).await;
        let uri = target.uri.clone();
        self.publish(uri).await;
        let _ = self.client.inlay_hint_refresh().await;
        let _ = self.client.code_lens_refresh().await;
        Ok(Some(value))
    }

    /// Whether `uri` is still the open that `snap` was taken of.
    fn still_open(&self, uri: &Url, snap: &Snapshot) -> bool {
        let st = self.state();
        st.docs
            .get(uri)
            .is_some_and(|o| o.is(snap.epoch, snap.lang))
    }

    async fn tell(&self, kind: MessageType, outcome: &str, text: String) -> Value {
        self.client.show_message(kind, text.clone()).await;
        message(outcome, text)
    }

    /// The text of `t`'s document as the request found it, and the kernel it names. A
    /// command acts on the text it arrived at (edits after it do not change what it
    /// runs), and commands start in the order they arrived, so this does not wait: when
    /// that text's analysis is still running, the text is analyzed again here, within
    /// the analysis budget. (Commands are rare; edits never wait for this.)
    fn snapshot(&self, t: &Target) -> std::result::Result<Snapshot, String> {
        let st = self.state();
        let open = st
            .docs
            .get(&t.uri)
            .ok_or_else(|| format!("{} is not open in the editor", t.uri))?;
        let epoch = open.epoch;
        if open.analyzed_gen == open.compile_gen {
            return pick_kernel(&open.doc, &open.analysis, t, st.encoding, &st.settings)
                .map(|s| Snapshot { epoch, ..s });
        }
        let (lang, text) = (open.doc.lang, open.doc.text());
        let doc = Document::new(lang, 0, text);
        let deadline = std::time::Instant::now()
            + std::time::Duration::from_millis(st.settings.analysis_budget_ms);
        let analysis = crate::analysis::analyze_within(
            lang,
            text,
            doc.tree(),
            &Self::analyze_opts(&st.settings),
            &mut Default::default(),
            &mut || {
                (std::time::Instant::now() >= deadline)
                    .then(|| "the file took too long to check; try again".to_string())
            },
        );
        pick_kernel(&doc, &analysis, t, st.encoding, &st.settings).map(|s| Snapshot { epoch, ..s })
    }
}

/// What jobs learned about `name` in `uri`, while `uri` is still the open that `snap`
/// was taken of (a closed or reopened file gets nothing from an older open's job).
fn status_for<'a>(
    st: &'a mut super::State,
    uri: &Url,
    snap: &Snapshot,
) -> Option<&'a mut KernelStatus> {
    if !st
        .docs
        .get(uri)
        .is_some_and(|o| o.is(snap.epoch, snap.lang))
    {
        return None;
    }
    Some(
        st.kernels
            .entry((uri.clone(), snap.kernel.name.clone()))
            .or_default(),
    )
}

/// The kernel a command names in one analyzed text, or why there is none to run.
fn pick_kernel(
    doc: &Document,
    analysis: &crate::analysis::FileAnalysis,
    t: &Target,
    enc: crate::document::PositionEncoding,
    settings: &Settings,
) -> std::result::Result<Snapshot, String> {
    let model = &analysis.model;
    let kernel = match (&t.kernel, &t.position) {
        (Some(name), _) => model
            .kernel(name)
            .ok_or_else(|| format!("this file has no kernel `{name}`"))?,
        (None, Some(p)) => {
            let off = doc
                .offset(
                    LinePos {
                        line: p.line,
                        col: p.character,
                    },
                    enc,
                )
                .unwrap_or(0);
            model
                .kernel_at(off)
                .or_else(|| (model.kernels.len() == 1).then(|| &model.kernels[0]))
                .ok_or("put the cursor inside a kernel (or name it)")?
        }
        (None, None) => match model.kernels.as_slice() {
            [one] => one,
            [] => return Err("this file has no kernels".into()),
            _ => {
                return Err(
                    "this file has several kernels: name one or put the cursor in it".into(),
                )
            }
        },
    };
    if let Some(e) = model.syntax_errors.first() {
        let at = doc.position(e.range.start, enc);
        return Err(format!(
            "the file has a syntax error at line {}; fix it before running `{}`",
            at.line + 1,
            kernel.name
        ));
    }
    Ok(Snapshot {
        epoch: 0,
        lang: doc.lang,
        text: doc.text().to_string(),
        kernel: kernel.clone(),
        file: t.uri.to_file_path().ok(),
        settings: settings.clone(),
    })
}

impl Backend {
    /// The worker pool (started on first use, rebuilt when the worker settings change).
    async fn pool(&self) -> std::result::Result<Arc<WorkerPool>, String> {
        let (existing, settings) = {
            let st = self.state();
            (st.pool.clone(), st.settings.clone())
        };
        let pool = match existing {
            Some(p) => p,
            None => {
                let config = PoolConfig::from_settings(&settings, &pool::visible_gpus())?;
                let p = Arc::new(WorkerPool::new(config));
                self.state().pool.get_or_insert(p).clone()
            }
        };
        let hello = if pool.size() > 1 {
            // Every worker starts now, so the status lists each one alive or down; the
            // pool works while any one does.
            let all = pool.connect_all().await;
            let first_err = all.iter().find_map(|r| r.as_ref().err().cloned());
            match all.into_iter().find_map(|r| r.ok()) {
                Some(h) => h,
                None => {
                    return Err(first_err.map_or_else(|| "no worker started".into(), |e| e.message))
                }
            }
        } else {
            pool.connect().await.map_err(|e| e.message)?
        };
        let (worker, msg) = match &hello.device {
            Some(d) => (Some(d.name.clone()), String::new()),
            None => (None, format!("no GPU: {}", hello.cuda.message)),
        };
        let workers = if pool.size() > 1 {
            pool.status()
        } else {
            Vec::new()
        };
        if let Ok(mut w) = self.worker_status.lock() {
            *w = (worker.clone(), msg.clone(), workers.clone());
        }
        self.client
            .send_notification::<StatusNotification>(StatusParams {
                worker,
                message: msg,
                job: None,
                workers,
            })
            .await;
        Ok(pool)
    }

    /// The pool, refused up front when its worker cannot run `lang` (no GPU, no Triton).
    async fn pool_for(&self, lang: Lang) -> std::result::Result<Arc<WorkerPool>, String> {
        let pool = self.pool().await?;
        if let Some(h) = pool.hello() {
            let b = match lang {
                Lang::Cuda => &h.cuda,
                Lang::Triton => &h.triton,
            };
            if !b.available {
                return Err(format!(
                    "the worker cannot run {} kernels: {}",
                    optimize::llm::lang_label(lang),
                    b.message
                ));
            }
        }
        Ok(pool)
    }

    /// Marks the kernel busy; `Err` when another job runs on it.
    fn claim(&self, uri: &Url, kernel: &str) -> std::result::Result<Arc<AtomicBool>, String> {
        let mut st = self.state();
        let s = st
            .kernels
            .entry((uri.clone(), kernel.to_string()))
            .or_default();
        if s.running.is_some() {
            return Err(format!(
                "a job is already running on `{kernel}`; wait for it or cancel it"
            ));
        }
        let c = Arc::new(AtomicBool::new(false));
        s.running = Some(c.clone());
        Ok(c)
    }

    async fn start_job(
        &self,
        uri: &Url,
        kernel: &str,
        title: String,
        token: Option<NumberOrString>,
    ) -> std::result::Result<(JobGuard, Reporter), String> {
        let cancel = self.claim(uri, kernel)?;
        let can_create = self.state().can_create_progress;
        let reporter = Reporter::begin(
            &self.client,
            token,
            can_create,
            title,
            &cancel,
            &self.progress_tokens,
            self.worker_status.clone(),
        )
        .await;
        let guard = JobGuard {
            backend: self.clone(),
            key: (uri.clone(), kernel.to_string()),
            cancel,
            token: reporter.token.as_ref().map(token_key),
        };
        Ok((guard, reporter))
    }

    async fn optimize_job(
        &self,
        cmd: SupportedCommand,
        uri: &Url,
        snap: Snapshot,
        token: Option<NumberOrString>,
    ) -> std::result::Result<Value, String> {
        let name = snap.kernel.name.clone();
        let s = &snap.settings;
        let mut repair = None;
        if cmd == FIX {
            let failure = self
                .state()
                .kernels
                .get(&(uri.clone(), name.clone()))
                .and_then(|k| k.failure.clone());
            let Some((feedback, _)) = failure else {
                return Ok(message(
                    "ok",
                    format!("`{name}` has no verification failure to fix; run Benchmark first"),
                ));
            };
            if s.llm.coder.is_none() {
                return Err("\"Ask the coder to fix\" needs an LLM coder: set `llm.coder` in the settings (docs/configuration.md); meanwhile \"Revert to last verified version\" restores the last text that passed".into());
            }
            let reference_text = snap
                .file
                .as_ref()
                .and_then(|f| load(f, "baseline", &name))
                .ok_or_else(|| format!("`{name}` has no baseline to verify a fix against; revert or pin a version that passes"))?;
            repair = Some(optimize::Repair {
                feedback,
                reference_text,
            });
        }
        let title = if cmd == TUNE {
            format!("Tune {name}")
        } else if cmd == FIX {
            format!("Fix {name}")
        } else {
            format!("Optimize {name}")
        };
        let (guard, reporter) = self.start_job(uri, &name, title, token).await?;
        reporter.report("starting the worker").await;
        let pool = self.pool_for(snap.lang).await?;
        let prompts_dir = s.llm.prompts_dir.clone();
        let catalog = Catalog::load(prompts_dir.as_deref()).map_err(|e| e.to_string())?;
        let (steps, budget) = optimize::run_limits(s, None, None);
        let mut opts = OptimizeOptions::new(steps, s.verify.seed, catalog);
        opts.verify = s.verify.clone();
        opts.budget = budget;
        opts.cancel = Some(guard.cancel.clone());
        opts.file = snap.file.clone();
        // The project's own policy (an unsaved file's run learns in memory only).
        let shared = s.shared_policy;
        opts.policy_path = match &snap.file {
            Some(f) => Some(optimize::learning::policy_path(f, shared)),
            None => shared.then(optimize::policy::default_path),
        };
        if cmd == TUNE {
            // Sweeps only, no code changes: the catalog's knob steps.
            opts.only = opts.catalog.knobs();
        }
        if let Some(file) = &snap.file {
            if let Ok((past, _)) = history::read(file, &name) {
                opts.tried = history::tried(&past);
            }
            // The job's starting version is benchmarked against: it becomes the baseline
            // when there is none yet (docs/spec.md, `reference`).
            if load(file, "baseline", &name).is_none() {
                store(file, "baseline", &name, &snap.text)?;
            }
        }
        if (cmd == OPTIMIZE && s.use_llm) || cmd == FIX {
            opts.llm = Some(optimize::LlmSetup::from_settings(&s.llm)?);
        }
        if repair.is_some() {
            opts.repair = repair;
            opts.steps = 1;
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let file = snap.file.clone();
        let kname = name.clone();
        let mut history_errors = Vec::new();
        let mut on = |e: Event<'_>| match e {
            Event::Stage(stage) => {
                let _ = tx.send(stage);
            }
            Event::Step(step) => {
                if let Some(f) = &file {
                    if let Err(e) = history::append(f, &kname, std::slice::from_ref(step)) {
                        history_errors.push(e);
                    }
                }
            }
            Event::RunEnd(end) => {
                if let Some(f) = &file {
                    if let Err(e) = history::append_run_end(f, &kname, end) {
                        history_errors.push(e);
                    }
                }
            }
        };
        let run = {
            let fut = optimize::optimize(&pool, snap.lang, &snap.text, &name, &opts, &mut on);
            tokio::pin!(fut);
            loop {
                tokio::select! {
                    r = &mut fut => break r,
                    Some(stage) = rx.recv() => reporter.report(&stage).await,
                }
            }
        };
        let run = match run {
            Ok(r) => r,
            Err(e) => {
                reporter.end(&e).await;
                return Err(e);
            }
        };
        let cancelled =
            guard.cancel.load(Ordering::Relaxed) && run.stopped.as_deref() == Some("cancelled");
        let steps: Vec<_> = run
            .steps
            .iter()
            .filter(|s| s.outcome != optimize::Outcome::NotApplicable)
            .collect();
        let tried: Vec<String> = steps
            .iter()
            .map(|s| format!("{} {}", s.strategy_id, s.outcome.label()))
            .collect();
        let mut text = match &run.new_text {
            None if cancelled && !self.still_open(uri, &snap) => format!(
                "`{name}`: {uri} was closed, so the job stopped after {} step(s); they are in the history",
                steps.len()
            ),
            None if cancelled => format!(
                "`{name}`: cancelled after {} step(s); they are in the history",
                steps.len()
            ),
            None => format!(
                "`{name}`: no verified improvement ({})",
                if tried.is_empty() {
                    run.stopped.clone().unwrap_or_else(|| "no step ran".into())
                } else {
                    tried.join(", ")
                }
            ),
            Some(_) => String::new(),
        };
        for w in run.warnings.iter().chain(&history_errors) {
            text.push_str(&format!(" (warning: {w})"));
        }
        let Some(new_text) = run.new_text.clone() else {
            reporter.end(&text).await;
            let outcome = if steps.iter().any(|s| s.outcome == optimize::Outcome::Failed)
                && steps.iter().all(|s| s.outcome == optimize::Outcome::Failed)
            {
                "failed"
            } else {
                "no_gain"
            };
            return Ok(message(outcome, text));
        };
        // The answer is the best version of the run's tree.
        let speedup = run.best_speedup;
        let label = run.accepted().join(", ");
        let start_region = snap.text[region(&snap.kernel)].to_string();
        let (_, new_r) = find_kernel(snap.lang, &new_text, &name)
            .ok_or("the optimized text lost the kernel (a kernel-lsp bug; nothing was applied)")?;
        let pending = Pending {
            start_region,
            new_region: new_text[new_r].to_string(),
            speedup,
            label: label.clone(),
        };
        let cases = steps
            .iter()
            .rev()
            .find(|s| s.on_best_path)
            .map_or(String::new(), |s| format!(" (seed {})", s.seed));
        {
            let mut st = self.state();
            if let Some(k) = status_for(&mut st, uri, &snap) {
                k.pending = Some(pending);
                k.failure = None;
                k.win = Some(if cmd == FIX {
                    format!("the coder's fix passes verification against the baseline on every spec case{cases}")
                } else {
                    format!("verified on every spec case{cases}, {speedup:.2}× faster than before the job: {label}")
                });
                // The hint shows the verified winner's time and the job's speedup.
                k.timing = steps
                    .iter()
                    .find(|s| s.child == Some(run.best_node))
                    .and_then(|s| s.best_ms)
                    .map(|ms| Timing {
                        label: name.clone(),
                        median_ms: ms,
                        min_ms: ms,
                        p10_ms: ms,
                        p90_ms: ms,
                        reps: 0,
                        gbps: 0.0,
                        frac_copy: None,
                        tflops: None,
                        frac_fma: None,
                        energy_j: None,
                    });
                k.speedup = Some(speedup);
                k.torch = None;
            }
        }
        drop(guard);
        if !self.still_open(uri, &snap) {
            let text = format!("`{name}`: {uri} was closed; the verified rewrite ({speedup:.2}×: {label}) is in the history (.kernel-lsp/)");
            reporter.end(&text).await;
            return Ok(message("no_gain", text));
        }
        let r = if snap.settings.apply_mode == ApplyMode::Apply {
            self.apply_pending(uri, &name).await
        } else {
            Ok(message(
                "accepted",
                format!("`{name}`: a verified rewrite is ready ({speedup:.2}×: {label}); use the code action \"Apply verified rewrite\""),
            ))
        };
        reporter
            .end(r.as_ref().map_or_else(
                |e| e.as_str(),
                |v| v["message"].as_str().unwrap_or_default(),
            ))
            .await;
        r
    }

    /// Apply the kernel's pending rewrite to the document, if the author did not edit
    /// the kernel's region since the job started.
    pub(super) async fn apply_pending(
        &self,
        uri: &Url,
        kernel: &str,
    ) -> std::result::Result<Value, String> {
        let key = (uri.clone(), kernel.to_string());
        let waiting = self
            .state()
            .kernels
            .get(&key)
            .and_then(|k| k.pending.clone());
        let Some(p) = waiting else {
            return self.apply_recorded(uri, kernel).await;
        };
        let (pending, edit) = {
            let st = self.state();
            let Some(open) = st.docs.get(uri) else {
                return Err(format!(
                    "{uri} was closed; the verified rewrite is in the history (.kernel-lsp/)"
                ));
            };
            let text = open.doc.text();
            let Some((_, r)) = find_kernel(open.doc.lang, text, kernel) else {
                return Err(format!(
                    "`{kernel}` is no longer in the file; nothing was applied"
                ));
            };
            if text[r.clone()] != p.start_region {
                return Err(format!("you edited `{kernel}` while the job ran; the verified rewrite was not applied (it is in the history, .kernel-lsp/)"));
            }
            let enc = st.encoding;
            let edit = region_edit(uri, &open.doc, &r, enc, p.new_region.clone());
            (p, edit)
        };
        self.send_edit(edit)
            .await
            .map_err(|e| format!("{e}; the verified rewrite stays available"))?;
        let file = uri.to_file_path().ok();
        {
            let mut st = self.state();
            if let Some(k) = st.kernels.get_mut(&(uri.clone(), kernel.to_string())) {
                k.pending = None;
            }
        }
        if let Some(f) = &file {
            let _ = store(f, "verified", kernel, &pending.new_region);
        }
        Ok(message(
            "accepted",
            if pending.label.starts_with("repair") {
                format!("`{kernel}`: applied the coder's fix; it passes verification against the baseline")
            } else {
                format!(
                    "`{kernel}`: applied a verified rewrite, {:.2}× faster ({})",
                    pending.speedup, pending.label
                )
            },
        ))
    }

    /// With no rewrite waiting: the best version of the kernel's last recorded run (the
    /// CLI's `kernel-lsp apply`, the same engine), with no new search, over the kernel's
    /// region only if that region is still one of the run's versions.
    async fn apply_recorded(&self, uri: &Url, kernel: &str) -> std::result::Result<Value, String> {
        let none = || {
            format!("no verified rewrite is waiting for `{kernel}` and it has no recorded run: run Optimize or Tune first")
        };
        let file = uri.to_file_path().map_err(|_| none())?;
        let end = history::run_ends(&file, kernel).pop().ok_or_else(none)?;
        let node = end.headline.best_node;
        let edit = {
            let st = self.state();
            let open = st.docs.get(uri).ok_or("the document was closed")?;
            let lang = open.doc.lang;
            let found = optimize::apply::version_edit(lang, open.doc.text(), kernel, &end, node)
                .map_err(|e| format!("`{kernel}`: {e}"))?;
            let Some((r, region)) = found else {
                return Ok(message(
                    "ok",
                    format!("`{kernel}` already holds the best version of its last run (v{node})"),
                ));
            };
            region_edit(uri, &open.doc, &r, st.encoding, region)
        };
        self.send_edit(edit).await?;
        Ok(message(
            "accepted",
            format!(
                "`{kernel}`: applied v{node} of its last run: {}",
                end.headline.describe()
            ),
        ))
    }

    /// `workspace/applyEdit` with one document edit; `Err` says why it was not applied.
    async fn send_edit(&self, edit: TextDocumentEdit) -> std::result::Result<(), String> {
        let resp = self
            .client
            .apply_edit(WorkspaceEdit {
                document_changes: Some(DocumentChanges::Edits(vec![edit])),
                ..Default::default()
            })
            .await
            .map_err(|e| format!("the editor did not take the edit: {e}"))?;
        if resp.applied {
            return Ok(());
        }
        Err(format!(
            "the editor refused the edit{}",
            resp.failure_reason
                .map_or(String::new(), |r| format!(": {r}"))
        ))
    }

    /// Profile the kernel as it is in the editor with Nsight Compute (a child `ncu`
    /// around `kernel-lsp bench`; the server loads no CUDA library): the diagnosis goes
    /// to the hover and a code lens.
    async fn profile_job(
        &self,
        uri: &Url,
        snap: Snapshot,
        token: Option<NumberOrString>,
    ) -> std::result::Result<Value, String> {
        let name = snap.kernel.name.clone();
        let Some(ncu) = crate::toolchain::ncu::locate(None) else {
            return Ok(message(
                "failed",
                "Nsight Compute (`ncu`) was not found on this machine, so no profile: install it with the CUDA toolkit, put ncu on PATH, or set KERNEL_LSP_NCU (`kernel-lsp health` checks it)",
            ));
        };
        let (guard, reporter) = self
            .start_job(uri, &name, format!("Profile {name}"), token)
            .await?;
        reporter
            .report("running the kernel under Nsight Compute (about 10 s)")
            .await;
        let region_text = snap.text[region(&snap.kernel)].to_string();
        // The text as it is in the editor, next to the file so its includes resolve.
        let file = snap.file.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(match snap.lang {
                Lang::Cuda => "kernel.cu",
                Lang::Triton => "kernel.py",
            })
        });
        let (text, kernel) = (snap.text.clone(), name.clone());
        let got = tokio::task::spawn_blocking(move || {
            crate::toolchain::ncu::profile_text(&ncu, &file, &kernel, &text)
        })
        .await
        .map_err(|e| format!("the profiler task failed: {e}"))?;
        drop(guard);
        match got {
            Ok(p) => {
                let text = format!("`{name}`: {}", p.diagnosis());
                {
                    let mut st = self.state();
                    if let Some(k) = status_for(&mut st, uri, &snap) {
                        k.profile = Some((p, region_text));
                    }
                }
                reporter.end(&text).await;
                Ok(message("profiled", text))
            }
            Err(e) => {
                let text = format!("`{name}` was not profiled: {e}");
                reporter.end(&text).await;
                Ok(message("failed", text))
            }
        }
    }

    async fn bench_job(
        &self,
        uri: &Url,
        snap: Snapshot,
        token: Option<NumberOrString>,
    ) -> std::result::Result<Value, String> {
        let name = snap.kernel.name.clone();
        let (guard, reporter) = self
            .start_job(uri, &name, format!("Benchmark {name}"), token)
            .await?;
        reporter.report("starting the worker").await;
        let pool = self.pool_for(snap.lang).await?;
        let env = EvalEnv {
            sms: pool
                .hello()
                .and_then(|h| h.device.map(|d| u64::from(d.sms)))
                .unwrap_or(snap.settings.sms),
        };
        let current = evaluate::plan(snap.lang, &snap.text, &name, &env)?;
        let region_text = snap.text[region(&snap.kernel)].to_string();
        // The reference: `reference = K` in the spec, else the pinned baseline (pinned
        // now when there is none: docs/spec.md, "the version recorded when it was first
        // benchmarked").
        let mut pinned_now = false;
        let reference: Option<Version> = if let Some(tr) =
            current.version.plan.torch_reference.clone()
        {
            // `reference = torch: ...`: PyTorch eager, on the worker, with the same inputs.
            let module = match &snap.file {
                Some(f) => crate::analysis::torch_module_source(f, &tr)?,
                None if matches!(*tr, crate::spec::TorchReference::Expr { .. }) => String::new(),
                None => return Err("`reference = torch: module.fn` needs the file on disk (the module sits next to it); save the file first".into()),
            };
            Some(Version::torch_reference(
                &current.version,
                TorchMode::Eager,
                module,
            ))
        } else if let Some(r) = current.version.plan.reference.clone() {
            let doc = Document::new(snap.lang, 0, &snap.text);
            let a =
                crate::analysis::analyze(snap.lang, &snap.text, doc.tree(), &Default::default());
            let own = a
                .model
                .kernels
                .iter()
                .position(|k| k.name == r)
                .and_then(|i| a.specs.get(i).and_then(|s| s.plan.as_ref()));
            // On this kernel's inputs, with the reference's own launch.
            let plan = current.version.plan.for_reference(&r, own);
            Some(Version {
                torch: None,
                label: r.clone(),
                lang: snap.lang,
                source: a.kernel_source(&r, &snap.text),
                plan,
                options: Vec::new(),
                cuda: None,
            })
        } else if let Some(base) = snap.file.as_ref().and_then(|f| load(f, "baseline", &name)) {
            match evaluate::plan(snap.lang, &base, &name, &env) {
                Ok(p) => {
                    let mut v = p.version;
                    v.label = "baseline".into();
                    Some(v)
                }
                Err(e) => return Err(format!("the pinned baseline of `{name}` no longer plans ({e}); pin the current version again")),
            }
        } else {
            // Pinned below, once it passes its own check.
            None
        };
        let mut cand = current.version.clone();
        cand.label = name.clone();
        // Without a reference the kernel runs against itself: no result can be judged,
        // but out-of-bounds writes, writes into `in` buffers, faults, hangs and results
        // that change between runs are caught before it is timed or pinned.
        {
            let r = reference.as_ref().unwrap_or(&cand);
            reporter
                .report(&match &reference {
                    Some(r) => format!("verifying against {}", r.label),
                    None => "checking it against itself (no reference yet)".to_string(),
                })
                .await;
            let op = Op::verify(&cand, r, snap.settings.verify.seed, false);
            let verdict = pool.request(op, None).await;
            let failure = match verdict {
                Ok(OpResult::Verify(v)) if v.passed => None,
                Ok(OpResult::Verify(v)) => Some(match v.failure {
                    Some(f) => (f.message, f.buffer),
                    None if v.nondeterministic => {
                        ("gives different results on the same inputs".into(), None)
                    }
                    None => ("failed verification".into(), None),
                }),
                Ok(_) => Some(("unexpected worker reply".into(), None)),
                Err(e) => Some((e.message, None)),
            };
            if let Some((msg, buffer)) = failure {
                {
                    let mut st = self.state();
                    if let Some(k) = status_for(&mut st, uri, &snap) {
                        k.failure = Some((msg.clone(), buffer));
                        k.win = None;
                        k.timing = None;
                        k.benched_region = Some(region_text);
                    }
                }
                drop(guard);
                let text = match &reference {
                    Some(r) => format!("`{name}` fails verification against {}: {msg}", r.label),
                    None => format!(
                        "`{name}` fails its own check (run against itself; it is not pinned as the baseline): {msg}"
                    ),
                };
                reporter.end(&text).await;
                return Ok(message("failed", text));
            }
        }
        if reference.is_none() {
            if let Some(f) = &snap.file {
                store(f, "baseline", &name, &snap.text)?;
                pinned_now = true;
            }
        }
        reporter.report("timing").await;
        let mut versions = vec![cand];
        versions.extend(reference.clone());
        // Against PyTorch: eager (the reference above) and torch.compile, except on
        // Triton's CPU interpreter, where neither is a GPU time.
        let interpreter = pool.hello().is_some_and(|h| h.triton.interpreter);
        let torch_compile = reference.as_ref().is_some_and(|r| r.torch.is_some())
            && !(snap.lang == Lang::Triton && interpreter);
        if let (true, Some(r)) = (torch_compile, &reference) {
            versions.push(Version::torch_reference(
                &current.version,
                TorchMode::Compile,
                r.source.clone(),
            ));
        }
        let timed = pool
            .request(
                Op::Time {
                    versions,
                    settings: Default::default(),
                },
                None,
            )
            .await;
        let compile_speedup: Option<f64>;
        let (timing, speedup, interp) = match timed {
            Ok(OpResult::Time(t)) => {
                let mut it = t.timings.into_iter();
                let c = it.next().ok_or("the worker returned no timing")?;
                let s = it.next().map(|r| r.median_ms / c.median_ms.max(1e-12));
                compile_speedup = it.next().map(|r| r.median_ms / c.median_ms.max(1e-12));
                (c, s, t.interpreter)
            }
            Ok(_) => return Err("unexpected worker reply to a time request".into()),
            Err(e) => return Err(e.message),
        };
        let registers = if snap.lang == Lang::Cuda {
            match pool
                .request(
                    Op::Compile {
                        version: current.version.clone(),
                    },
                    None,
                )
                .await
            {
                Ok(OpResult::Compile(c)) => c.registers,
                _ => None,
            }
        } else {
            None
        };
        let verified = format!(
            "{} ({} case(s) × {} trials), ",
            reference.as_ref().map_or_else(
                || "checked against itself".to_string(),
                |r| format!("verified against {}", r.label)
            ),
            current.version.plan.cases.len(),
            current.version.plan.trials
        );
        let text = format!(
            "`{name}`: {verified}{:.4} ms{}{}{}",
            timing.median_ms,
            speedup.map_or(String::new(), |s| format!(
                ", {s:.2}× vs {}",
                reference.as_ref().map_or("", |r| r.label.as_str())
            )),
            if pinned_now {
                " (pinned as the baseline)"
            } else {
                ""
            },
            if interp {
                " (Triton CPU interpreter: not GPU time)"
            } else {
                ""
            }
        );
        {
            let mut st = self.state();
            if let Some(k) = status_for(&mut st, uri, &snap) {
                k.failure = None;
                k.timing = Some(timing);
                k.speedup = speedup;
                k.torch = reference
                    .as_ref()
                    .filter(|r| r.torch.is_some())
                    .map(|_| (speedup, compile_speedup, snap.settings.hint_speedup_vs));
                k.registers = registers;
                k.benched_region = Some(region_text.clone());
                if reference.is_some() {
                    k.win = speedup
                        .filter(|s| *s > 1.0)
                        .map(|s| format!("{verified}{s:.2}× faster than the baseline"));
                }
            }
        }
        if let (Some(f), true) = (&snap.file, reference.is_some()) {
            let _ = store(f, "verified", &name, &region_text);
        }
        drop(guard);
        reporter.end(&text).await;
        Ok(message("ok", text))
    }

    fn pin(&self, uri: &Url, snap: &Snapshot) -> std::result::Result<Value, String> {
        let name = &snap.kernel.name;
        let file = snap
            .file
            .as_ref()
            .ok_or("only files on disk can have a baseline (the history lives next to them)")?;
        store(file, "baseline", name, &snap.text)?;
        store(file, "verified", name, &snap.text[region(&snap.kernel)])?;
        let mut st = self.state();
        let k = st.kernels.entry((uri.clone(), name.clone())).or_default();
        k.failure = None;
        k.speedup = None;
        k.torch = None;
        Ok(message(
            "ok",
            format!("`{name}`: the current version is now the baseline it is verified and timed against"),
        ))
    }

    async fn revert(&self, uri: &Url, snap: &Snapshot) -> std::result::Result<Value, String> {
        let name = &snap.kernel.name;
        let file = snap
            .file
            .as_ref()
            .ok_or("no history for a file that is not on disk")?;
        let saved = load(file, "verified", name)
            .or_else(|| {
                let base = load(file, "baseline", name)?;
                let (_, r) = find_kernel(snap.lang, &base, name)?;
                Some(base[r].to_string())
            })
            .ok_or_else(|| {
                format!("`{name}` has no verified version yet: run Benchmark or Optimize first")
            })?;
        let edit = {
            let st = self.state();
            let open = st.docs.get(uri).ok_or("the document was closed")?;
            let (_, r) = find_kernel(open.doc.lang, open.doc.text(), name)
                .ok_or_else(|| format!("`{name}` is no longer in the file"))?;
            if open.doc.text()[r.clone()] == saved {
                return Ok(message(
                    "ok",
                    format!("`{name}` is already the last verified version"),
                ));
            }
            region_edit(uri, &open.doc, &r, st.encoding, saved)
        };
        self.send_edit(edit).await?;
        let mut st = self.state();
        if let Some(k) = st.kernels.get_mut(&(uri.clone(), name.clone())) {
            k.failure = None;
        }
        Ok(message(
            "ok",
            format!("`{name}`: reverted to the last verified version"),
        ))
    }

    async fn show_history(&self, snap: &Snapshot) -> std::result::Result<Value, String> {
        let name = &snap.kernel.name;
        let file = snap
            .file
            .as_ref()
            .ok_or("no history for a file that is not on disk")?;
        let (steps, _) = history::read(file, name)?;
        if steps.is_empty() {
            return Ok(message(
                "ok",
                format!("`{name}` has no history yet: run Optimize or Tune first"),
            ));
        }
        let page = optimize::report::html(
            &file.display().to_string(),
            &[optimize::report::KernelHistory {
                name,
                steps: &steps,
                headlines: &history::headlines(file, name),
            }],
        );
        let out = history::workspace_root(file)
            .join(".kernel-lsp")
            .join(format!("report-{name}.html"));
        std::fs::write(&out, page).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
        if let Ok(u) = Url::from_file_path(&out) {
            let _ = self
                .client
                .show_document(ShowDocumentParams {
                    uri: u,
                    external: Some(true),
                    take_focus: Some(true),
                    selection: None,
                })
                .await;
        }
        Ok(message(
            "ok",
            format!(
                "`{name}`: {} steps; report written to {}",
                steps.len(),
                out.display()
            ),
        ))
    }

    /// benchOnSave: re-verify and re-time kernels whose region changed since their last
    /// bench, in the background.
    pub(super) fn bench_on_save(&self, uri: &Url) {
        let targets: Vec<String> = {
            let st = self.state();
            if !st.settings.bench_on_save {
                return;
            }
            let Some(open) = st.docs.get(uri) else { return };
            open.analysis
                .model
                .kernels
                .iter()
                .zip(&open.analysis.specs)
                .filter(|(_, s)| s.plan.is_some())
                .filter(|(k, _)| {
                    let now = &open.doc.text()[region(k)];
                    st.kernels
                        .get(&(uri.clone(), k.name.clone()))
                        .and_then(|s| s.benched_region.as_deref())
                        != Some(now)
                })
                .map(|(k, _)| k.name.clone())
                .collect()
        };
        for name in targets {
            let this = self.clone();
            let uri = uri.clone();
            tokio::spawn(async move {
                let t = Target {
                    uri: uri.clone(),
                    kernel: Some(name),
                    position: None,
                    command: None,
                };
                let Ok(snap) = this.snapshot(&t) else {
                    return;
                };
                let _ = this.bench_job(&uri, snap, None).await;
                this.publish(uri).await;
                let _ = this.client.inlay_hint_refresh().await;
                let _ = this.client.code_lens_refresh().await;
            });
        }
    }

    /// `window/workDoneProgress/cancel`.
    pub(super) async fn progress_cancel(&self, params: WorkDoneProgressCancelParams) {
        if let Ok(m) = self.progress_tokens.lock() {
            if let Some(c) = m.get(&token_key(&params.token)) {
                c.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// Job diagnostics for one kernel: a verification failure (error, with the spec line of
/// the failing buffer as related information) or the last win (information).
pub(super) fn job_diagnostics(
    doc: &Document,
    kernel: &Kernel,
    status: &KernelStatus,
    uri: &Url,
    enc: crate::document::PositionEncoding,
) -> Vec<Diagnostic> {
    let range = super::convert::lsp_range(doc, &kernel.name_range, enc);
    let mut out = Vec::new();
    if let Some((msg, buffer)) = &status.failure {
        let related = buffer.as_ref().and_then(|b| {
            let line = kernel.spec.lines.iter().find(|l| {
                l.text.split(';').any(|seg| {
                    seg.trim_start()
                        .strip_prefix(b.as_str())
                        .is_some_and(|r| r.trim_start().starts_with(':'))
                })
            })?;
            let start = line.offset;
            let r =
                super::convert::lsp_range(doc, &(start..start + line.text.trim_end().len()), enc);
            Some(vec![DiagnosticRelatedInformation {
                location: Location {
                    uri: uri.clone(),
                    range: r,
                },
                message: format!("`{b}` is declared here"),
            }])
        });
        out.push(Diagnostic {
            range,
            severity: Some(DiagnosticSeverity::ERROR),
            source: Some("kernel-lsp".into()),
            code: Some(NumberOrString::String("verify".into())),
            message: format!("`{}` fails verification: {msg}", kernel.name),
            related_information: related,
            ..Default::default()
        });
    } else if let Some(w) = &status.win {
        out.push(Diagnostic {
            range,
            severity: Some(DiagnosticSeverity::INFORMATION),
            source: Some("kernel-lsp".into()),
            code: Some(NumberOrString::String("verified".into())),
            message: w.clone(),
            ..Default::default()
        });
    }
    out
}

/// The inlay hint text after a benchmark: `0.27 ms · 1.10× · 92% BW · 32 regs`.
pub(super) fn timing_label(s: &KernelStatus) -> Option<String> {
    let t = s.timing.as_ref()?;
    let mut parts = vec![if t.median_ms >= 0.1 {
        format!("{:.2} ms", t.median_ms)
    } else {
        format!("{:.1} µs", t.median_ms * 1000.0)
    }];
    if let Some((eager, compile, vs)) = s.torch {
        use crate::settings::HintSpeedupVs;
        let eager = eager.map(|e| format!("{} eager", optimize::headline::ratio(e)));
        let compile = compile.map(|c| format!("{} compile", optimize::headline::ratio(c)));
        match vs {
            HintSpeedupVs::All => parts.extend(eager.into_iter().chain(compile)),
            HintSpeedupVs::Eager => parts.extend(eager),
            HintSpeedupVs::Compile => parts.extend(compile.or(eager)),
        }
    } else if let Some(sp) = s.speedup {
        parts.push(format!("{sp:.2}×"));
    }
    if let Some(f) = t.frac_copy {
        parts.push(format!("{:.0}% BW", f * 100.0));
    }
    if let Some(r) = s.registers {
        parts.push(format!("{r} regs"));
    }
    Some(parts.join(" · "))
}

#[cfg(test)]
mod hint_tests {
    use super::{timing_label, KernelStatus};
    use crate::settings::HintSpeedupVs;
    use crate::worker::protocol::Timing;

    fn status(torch: Option<(Option<f64>, Option<f64>, HintSpeedupVs)>) -> KernelStatus {
        KernelStatus {
            timing: Some(Timing {
                label: "k".into(),
                median_ms: 0.058,
                min_ms: 0.05,
                p10_ms: 0.05,
                p90_ms: 0.06,
                reps: 100,
                gbps: 1.0,
                frac_copy: None,
                tflops: None,
                frac_fma: None,
                energy_j: None,
            }),
            speedup: Some(1.06),
            torch,
            ..Default::default()
        }
    }

    #[test]
    fn the_hint_compares_with_what_the_setting_picks() {
        let both = |vs| status(Some((Some(1.06), Some(0.93), vs)));
        assert_eq!(
            timing_label(&both(HintSpeedupVs::All)).unwrap(),
            "58.0 µs · 1.06× eager · 0.93× compile"
        );
        assert_eq!(
            timing_label(&both(HintSpeedupVs::Eager)).unwrap(),
            "58.0 µs · 1.06× eager"
        );
        assert_eq!(
            timing_label(&both(HintSpeedupVs::Compile)).unwrap(),
            "58.0 µs · 0.93× compile"
        );
        // torch.compile not timed (CPU interpreter): eager stands in.
        let eager_only = status(Some((Some(1.06), None, HintSpeedupVs::Compile)));
        assert_eq!(timing_label(&eager_only).unwrap(), "58.0 µs · 1.06× eager");
        // A kernel or baseline reference: the plain speedup.
        assert_eq!(timing_label(&status(None)).unwrap(), "58.0 µs · 1.06×");
        // On the interpreter a kernel is thousands of times slower than eager: the
        // ratio keeps two significant digits instead of reading 0.00×.
        let slow = status(Some((Some(0.0042), None, HintSpeedupVs::All)));
        assert_eq!(timing_label(&slow).unwrap(), "58.0 µs · 0.0042× eager");
    }
}

#[cfg(test)]
mod command_tests {
    use super::SupportedCommand;

    #[test]
    fn every_command_round_trips_through_its_id_and_ids_are_unique() {
        let ids: Vec<&str> = SupportedCommand::ALL.iter().map(|c| c.id()).collect();
        for c in SupportedCommand::ALL {
            assert_eq!(SupportedCommand::parse(c.id()), Some(c));
            assert!(c.id().starts_with("kernel-lsp."), "{}", c.id());
        }
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len(), "{ids:?}");
        assert_eq!(SupportedCommand::parse("kernel-lsp.nope"), None);
    }
}
