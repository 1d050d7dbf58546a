//! The tower-lsp backend: protocol glue only. It keeps the open documents, calls the
//! `analysis` engine on every change, publishes diagnostics, and answers hover, symbols,
//! code actions and inlay hints. NVRTC runs debounced on a blocking thread, never on the
//! request path. This layer never touches CUDA or the GPU.
//!
//! Invariants: every handler applies document edits synchronously before its first
//! `.await` (tower-lsp polls handlers concurrently, so this is what keeps edits in
//! order); every handler body runs under [`guarded`], so a panic becomes an error
//! answer and a log line, not a dead server.

mod conform;
mod convert;
pub mod frame;
mod hover;
mod jobs;
mod requests;
mod transport;

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde_json::Value;
use tower_lsp::jsonrpc::{Error, ErrorCode, Result};
use tower_lsp::lsp_types::*;
use tower_lsp::{Client, LanguageServer, LspService};

use crate::analysis::{self, AnalyzeOptions, CompileOutcome, FileAnalysis};
use crate::document::{Document, LinePos, ParseJob, Parsed, PositionEncoding};
use crate::settings::Settings;
use crate::spec::EvalEnv;
use crate::syntax::{self, Lang};
use crate::toolchain::{self, Toolchain};

use convert::{lsp_diagnostic, lsp_range};

/// Serve LSP over stdin/stdout until the client sends `exit` (or closes stdin).
/// Returns the process exit code LSP asks for: 0 after `shutdown`, 1 otherwise.
pub async fn serve_stdio() -> i32 {
    large_blocks_from_the_system();
    serve(tokio::io::stdin(), tokio::io::stdout()).await
}

/// Blocks of 1 MiB and more (a big document's text, a message's frame) are mapped from
/// the system and given back when freed. glibc's default raises its threshold to the
/// largest block freed so far (up to 32 MiB), after which each 20 MB text lands in the
/// heap and leaves it fragmented (issue #16: a 20 MB file replaced three times).
fn large_blocks_from_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn mallopt(param: i32, value: i32) -> i32;
        }
        const M_MMAP_THRESHOLD: i32 = -3;
        // SAFETY: mallopt only changes the allocator's tuning; called before serving.
        unsafe {
            mallopt(M_MMAP_THRESHOLD, 1 << 20);
        }
    }
}

/// Serve LSP over any byte streams, through the framing layer ([`transport`]), until the
/// client sends `exit` or closes `input`. Returns the exit code, as [`serve_stdio`].
pub async fn serve<I, O>(input: I, output: O) -> i32
where
    I: tokio::io::AsyncRead + Unpin + Send + 'static,
    O: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (exit_tx, exit_rx) = tokio::sync::oneshot::channel();
    let (service, socket) = LspService::build(Backend::new)
        .custom_method("kernel-lsp/debugPanic", Backend::debug_panic)
        .custom_method("window/workDoneProgress/cancel", Backend::progress_cancel)
        .finish();
    let service = conform::Conform::new(service, Some(exit_tx));
    let (bodies, frames, transport) = transport::start(input, output);
    // The serve loop only notices `exit` at the next message; stop on it now.
    let code = tokio::select! {
        _ = transport::serve_messages(bodies, frames, socket, service) => 0,
        code = exit_rx => code.unwrap_or(1),
    };
    // The service is dropped by now: send what it and the framing layer already wrote.
    transport.finish(Duration::from_secs(1)).await;
    code
}

#[derive(Clone)]
pub struct Backend {
    client: Client,
    inner: Arc<Mutex<State>>,
    /// Progress tokens of running jobs → their cancel flags.
    progress_tokens: Arc<Mutex<HashMap<String, Arc<std::sync::atomic::AtomicBool>>>>,
    /// The worker's last status for `kernel-lsp/status`: GPU name, "no GPU: why".
    worker_status: Arc<Mutex<jobs::WorkerLine>>,
    /// Woken whenever an analysis ends (see [`Backend::settled`]).
    analyzed: Arc<tokio::sync::Notify>,
    /// Held from reading a document's diagnostics until they are sent, so that a close's
    /// clearing publish cannot overtake diagnostics read just before the close (the
    /// editor would keep showing them for a file that is no longer open).
    publishing: Arc<tokio::sync::Mutex<()>>,
}

struct State {
    settings: Settings,
    encoding: PositionEncoding,
    docs: HashMap<Url, OpenDoc>,
    /// Located lazily on first use (it may probe python), reset when settings change.
    toolchain: Option<Arc<Toolchain>>,
    /// The missing-NVRTC message is shown once per server (and again after settings change).
    nvrtc_warned: bool,
    /// Counts edits, to know which documents were edited least recently.
    edit_clock: u64,
    /// Counts opens: each open of a document gets the next number as its epoch.
    opens: u64,
    /// The worker pool for jobs, started on first use.
    pool: Option<Arc<crate::worker::pool::WorkerPool>>,
    /// What jobs learned per (document, kernel): timings, failures, pending rewrites.
    kernels: HashMap<(Url, String), jobs::KernelStatus>,
    /// The client accepts `window/workDoneProgress/create`.
    can_create_progress: bool,
}

/// Documents that keep their tree-sitter tree between edits (for incremental reparse).
/// Trees are the largest per-file cost; a document beyond this many, edited least
/// recently, drops its tree and reparses fully on its next edit.
const TREES_KEPT: usize = 4;
/// A tree-sitter tree costs about 35 times its text (a 0.77 MB file's tree: 26 MB):
/// trees are kept for at most this much text, about 35 MB of trees.
const TREE_TEXT_BUDGET: usize = 1 << 20;

/// Returns the allocator's free pages to the system (glibc keeps them otherwise: a
/// dropped tree-sitter tree leaves tens of MB of freed small blocks in the heap).
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: malloc_trim has no preconditions; it only releases free memory.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// Compile checks running at once, over all documents.
static COMPILE_SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

struct OpenDoc {
    doc: Document,
    /// Which open of its URI this is (`State::opens`). Every job started for the document
    /// carries it, with the language: a result for another open, or for the same URI
    /// under another language, is dropped (a file reopened as Python must never get the
    /// CUDA parse of the closed one; tree-sitter aborts on a tree of another grammar).
    epoch: u64,
    /// False for Python files without `@triton.jit`: they get no diagnostics at all.
    kernel_file: bool,
    analysis: Arc<FileAnalysis>,
    /// The last finished compile (its ranges refer to the text it compiled).
    compile: Option<Arc<CompileOutcome>>,
    spec_cache: analysis::SpecCache,
    /// Bumped on every change of the text or of the settings analysis reads; a
    /// debounced compile, or an analysis, applies only if it is still current.
    compile_gen: u64,
    /// The `compile_gen` that `analysis` describes; diagnostics are published only
    /// while it is current (their ranges are byte offsets into that text).
    analyzed_gen: u64,
    /// The cancel flag of this document's running analysis, if one runs.
    analyzing: Option<Arc<AtomicBool>>,
    /// `State::edit_clock` at this document's last edit or open.
    last_edit: u64,
    /// Whether the last publish sent any diagnostics (so a file that stops being a
    /// kernel file gets one clearing publish).
    published_any: bool,
}

impl OpenDoc {
    /// Whether this is the open that a job started for `epoch` and `lang` belongs to.
    fn is(&self, epoch: u64, lang: Lang) -> bool {
        self.epoch == epoch && self.doc.lang == lang
    }
}

fn internal(msg: impl Into<String>) -> Error {
    Error {
        code: ErrorCode::InternalError,
        message: msg.into().into(),
        data: None,
    }
}

fn not_open(uri: &Url) -> Error {
    Error::invalid_params(format!(
        "document {uri} is not open; send textDocument/didOpen first"
    ))
}

/// Run a handler body, turning a panic into a logged internal error.
async fn guarded<T>(what: &str, fut: impl Future<Output = Result<T>>) -> Result<T> {
    match AssertUnwindSafe(fut).catch_unwind().await {
        Ok(r) => r,
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            tracing::error!(handler = what, "handler panicked: {msg}");
            Err(internal(format!(
                "kernel-lsp hit an internal error in {what}: {msg}"
            )))
        }
    }
}

impl Backend {
    fn new(client: Client) -> Self {
        Backend {
            client,
            inner: Arc::new(Mutex::new(State {
                settings: Settings::default(),
                encoding: PositionEncoding::Utf16,
                docs: HashMap::new(),
                toolchain: None,
                nvrtc_warned: false,
                edit_clock: 0,
                opens: 0,
                pool: None,
                kernels: HashMap::new(),
                can_create_progress: false,
            })),
            progress_tokens: Arc::new(Mutex::new(HashMap::new())),
            worker_status: Arc::new(Mutex::new(Default::default())),
            analyzed: Arc::new(tokio::sync::Notify::new()),
            publishing: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    /// The state lock. A panic while it was held poisons it; the data is still
    /// consistent per document (edits are applied whole), so recover rather than
    /// take every later request down with the first panic.
    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Test hook for panic containment; only active with KERNEL_LSP_DEBUG_COMMANDS=1.
    async fn debug_panic(&self, _params: Value) -> Result<Value> {
        guarded("kernel-lsp/debugPanic", async {
            if std::env::var_os("KERNEL_LSP_DEBUG_COMMANDS").is_some() {
                panic!("deliberate panic requested by kernel-lsp/debugPanic");
            }
            Err(Error::method_not_found())
        })
        .await
    }

    fn analyze_opts(settings: &Settings) -> AnalyzeOptions {
        AnalyzeOptions {
            env: EvalEnv { sms: settings.sms },
            max_file_bytes: settings.max_file_bytes,
        }
    }

    /// Analyze `uri`'s current text off the message loop (issue #16): parse and check on
    /// a blocking thread, then install the result and publish, if the document did not
    /// change meanwhile. One analysis runs per document at a time; a newer change cancels
    /// the running one, which then starts again on the latest text. Each run has the
    /// time budget `analysisBudgetMs`; past it the checks stop and a note says so.
    fn schedule_analysis(&self, uri: Url, compile_now: bool) {
        let Some(job) = Self::start_analysis(&mut self.state(), &uri) else {
            return;
        };
        let this = self.clone();
        let epoch = job.epoch;
        tokio::spawn(async move {
            let mut job = job;
            loop {
                let run = tokio::task::spawn_blocking(move || job.run()).await;
                let done = match run {
                    Ok(done) => done,
                    Err(e) => {
                        tracing::error!("analysis of {uri} failed: {e}");
                        if let Some(open) = this.state().docs.get_mut(&uri) {
                            if open.epoch == epoch {
                                open.analyzing = None;
                            }
                        }
                        this.analyzed.notify_waiters();
                        return;
                    }
                };
                let next = {
                    let mut st = this.state();
                    let Some(open) = st
                        .docs
                        .get_mut(&uri)
                        .filter(|o| o.is(done.epoch, done.lang))
                    else {
                        // Closed (or reopened: that open runs its own analysis).
                        drop(st);
                        this.analyzed.notify_waiters();
                        return;
                    };
                    // The cache stays valid either way: it is keyed by what a report reads.
                    open.spec_cache = done.cache;
                    open.analyzing = None;
                    if open.compile_gen == done.gen {
                        if done.keep_tree {
                            open.doc.install_parse(done.parsed);
                        } else {
                            // Syntax only (past maxFileBytes): the parse of a big text
                            // is dropped, and its pages go back to the system.
                            open.doc.drop_tree();
                            trim_heap();
                        }
                        open.kernel_file = done.kernel_file;
                        open.analysis = Arc::new(done.analysis);
                        open.analyzed_gen = done.gen;
                        Self::trim_trees(&mut st);
                        None
                    } else {
                        Self::start_analysis(&mut st, &uri)
                    }
                };
                match next {
                    Some(again) => job = again,
                    None => break,
                }
            }
            this.analyzed.notify_waiters();
            this.publish(uri.clone()).await;
            this.schedule_compile(uri, compile_now);
        });
    }

    /// Take what an analysis of `uri` needs from the state, or cancel the running one
    /// (which starts again when it ends) and return None.
    fn start_analysis(state: &mut State, uri: &Url) -> Option<AnalysisJob> {
        let opts = Self::analyze_opts(&state.settings);
        let budget = Duration::from_millis(state.settings.analysis_budget_ms.max(1));
        let open = state.docs.get_mut(uri)?;
        if let Some(running) = &open.analyzing {
            running.store(true, Ordering::Relaxed);
            return None;
        }
        let cancel = Arc::new(AtomicBool::new(false));
        open.analyzing = Some(cancel.clone());
        // A syntax-only file keeps no tree between edits: a tree costs about 40 times
        // its text (issue #16: at most 3 times the text for such files).
        let keep_tree = open.doc.text().len() <= opts.max_file_bytes;
        Some(AnalysisJob {
            epoch: open.epoch,
            gen: open.compile_gen,
            parse: open.doc.parse_job(),
            keep_tree,
            opts,
            budget,
            cache: std::mem::take(&mut open.spec_cache),
            cancel,
        })
    }

    /// End the open of `uri` (a close, or an open over an open one): its analysis and
    /// jobs are cancelled, and what jobs learned about it goes (its history stays on
    /// disk).
    fn forget(state: &mut State, uri: &Url) {
        state.kernels.retain(|(u, _), s| {
            if u != uri {
                return true;
            }
            if let Some(job) = &s.running {
                job.store(true, Ordering::Relaxed);
            }
            false
        });
        if let Some(running) = state.docs.remove(uri).and_then(|o| o.analyzing) {
            running.store(true, Ordering::Relaxed);
        }
    }

    /// Mark `uri` as just edited (its text changed): a new generation, to analyze.
    fn touch(state: &mut State, uri: &Url) {
        state.edit_clock += 1;
        let now = state.edit_clock;
        if let Some(open) = state.docs.get_mut(uri) {
            open.last_edit = now;
            open.compile_gen += 1;
        }
    }

    /// Drop the trees of the documents edited least recently: beyond `TREES_KEPT`, or
    /// beyond `TREE_TEXT_BUDGET` bytes of text in all (the most recent one always keeps
    /// its tree).
    fn trim_trees(state: &mut State) {
        let mut with_trees: Vec<(u64, usize, Url)> = state
            .docs
            .iter()
            .filter(|(_, o)| o.doc.has_parse())
            .map(|(u, o)| (o.last_edit, o.doc.text().len(), u.clone()))
            .collect();
        with_trees.sort_by_key(|t| std::cmp::Reverse(t.0));
        let mut text = 0;
        let mut dropped = false;
        for (i, (_, len, u)) in with_trees.iter().enumerate() {
            text += len;
            if i == 0 || (i < TREES_KEPT && text <= TREE_TEXT_BUDGET) {
                continue;
            }
            if let Some(o) = state.docs.get_mut(u) {
                o.doc.drop_tree();
                // Its region facts go with the regions (the next edit parses the whole
                // text and cuts new ones); the spec reports stay.
                o.spec_cache.drop_syntax();
                dropped = true;
            }
        }
        if dropped {
            // A tree is some hundred thousand small blocks: give the freed pages back.
            trim_heap();
        }
    }

    /// Diagnostics for the current text of `uri`, or None when there is nothing to send.
    fn diagnostics(state: &mut State, uri: &Url) -> Option<(Vec<Diagnostic>, i32)> {
        let enc = state.encoding;
        let state = &mut *state;
        let open = state.docs.get_mut(uri)?;
        if open.analyzed_gen != open.compile_gen {
            // The analysis describes an older text; its own run publishes when it ends.
            return None;
        }
        let mut spec_findings = open.analysis.findings();
        // `reference = torch: module.fn` names a file next to this one: read it now.
        if let Ok(path) = uri.to_file_path() {
            spec_findings.extend(open.analysis.torch_module_findings(&path));
            spec_findings.sort_by_key(|f| (f.range.start, f.range.end));
        }
        let findings =
            analysis::merge_findings(spec_findings, open.compile.as_deref(), open.doc.text());
        // Kernel files get a publish for every version (clients then know the edit was
        // checked); other files only once, to clear what an earlier version showed.
        if !open.kernel_file && !open.published_any {
            return None;
        }
        let mut diags: Vec<Diagnostic> = findings
            .iter()
            .map(|f| lsp_diagnostic(&open.doc, f, enc))
            .collect();
        for k in &open.analysis.model.kernels {
            if let Some(s) = state.kernels.get(&(uri.clone(), k.name.clone())) {
                diags.extend(jobs::job_diagnostics(&open.doc, k, s, uri, enc));
            }
        }
        open.published_any = !diags.is_empty();
        Some((diags, open.doc.version))
    }

    async fn publish(&self, uri: Url) {
        let _order = self.publishing.lock().await;
        let out = Self::diagnostics(&mut self.state(), &uri);
        if let Some((diags, version)) = out {
            self.client
                .publish_diagnostics(uri, diags, Some(version))
                .await;
        }
    }

    /// Find (once) the NVRTC/ptxas toolchain, on a blocking thread.
    async fn toolchain(&self) -> Arc<Toolchain> {
        let (existing, ts) = {
            let st = self.state();
            (st.toolchain.clone(), st.settings.toolchain())
        };
        if let Some(tc) = existing {
            return tc;
        }
        let tc = match tokio::task::spawn_blocking(move || toolchain::locate(&ts)).await {
            Ok(tc) => Arc::new(tc),
            Err(e) => {
                tracing::error!("locating the CUDA toolchain failed: {e}");
                Arc::new(Toolchain::unavailable(format!(
                    "locating the CUDA toolchain failed: {e}"
                )))
            }
        };
        match &tc.nvrtc {
            Ok(n) => tracing::info!("NVRTC {:?} at {}", n.version(), n.path().display()),
            Err(e) => tracing::warn!("NVRTC not available: {e}"),
        }
        self.state().toolchain.get_or_insert(tc).clone()
    }

    /// Debounced NVRTC run for a CUDA document; results are published only if the text
    /// did not change while compiling.
    fn schedule_compile(&self, uri: Url, immediate: bool) {
        let (epoch, gen, delay) = {
            let st = self.state();
            let Some(open) = st.docs.get(&uri) else {
                return;
            };
            if open.doc.lang != Lang::Cuda || !st.settings.compile_on_type {
                return;
            }
            let delay = if immediate {
                0
            } else {
                st.settings.compile_debounce_ms
            };
            (open.epoch, open.compile_gen, delay)
        };
        let this = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            let still_current = |st: &State| {
                st.docs
                    .get(&uri)
                    .is_some_and(|o| o.is(epoch, Lang::Cuda) && o.compile_gen == gen)
            };
            if !still_current(&this.state()) {
                return;
            }
            let tc = this.toolchain().await;
            if let (Err(e), None) = (&tc.nvrtc, &tc.nvcc) {
                this.warn_nvrtc_once(e.to_string()).await;
                return;
            }
            let job = {
                let st = this.state();
                let Some(open) = st.docs.get(&uri).filter(|o| o.is(epoch, Lang::Cuda)) else {
                    return;
                };
                if open.compile_gen != gen
                    || open.analyzed_gen != gen
                    || open.analysis.size_note.is_some()
                {
                    return;
                }
                let name = uri
                    .path_segments()
                    .and_then(|mut s| s.next_back().map(str::to_string))
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "kernel.cu".into());
                (
                    open.doc.text().to_string(),
                    open.analysis.compile_inputs(),
                    name,
                )
            };
            let (text, mut inputs, name) = job;
            let (file, cuda) = (uri.to_file_path().ok(), this.state().settings.cuda.clone());
            // nvcc takes seconds: at most two checks run at once, and one whose text is
            // no longer current by the time a slot frees up is not started.
            let Ok(_slot) = COMPILE_SLOTS.acquire().await else {
                return;
            };
            if !still_current(&this.state()) {
                return;
            }
            let outcome = tokio::task::spawn_blocking(move || {
                if let Some(f) = &file {
                    inputs = analysis::with_project(
                        inputs,
                        &text,
                        f,
                        &cuda.include_paths,
                        &cuda.defines,
                        &tc,
                    );
                }
                analysis::compile(&tc, &text, &inputs, &name)
            })
            .await;
            let outcome = match outcome {
                Ok(o) => o,
                Err(e) => {
                    tracing::error!("compile task failed: {e}");
                    return;
                }
            };
            {
                let mut st = this.state();
                if !still_current(&st) {
                    return;
                }
                if let Some(open) = st.docs.get_mut(&uri) {
                    open.compile = Some(Arc::new(outcome));
                }
            }
            this.publish(uri.clone()).await;
            this.client
                .send_request::<request::InlayHintRefreshRequest>(())
                .await
                .ok();
        });
    }

    async fn warn_nvrtc_once(&self, why: String) {
        let first = {
            let mut st = self.state();
            !std::mem::replace(&mut st.nvrtc_warned, true)
        };
        if first {
            self.client
                .show_message(
                    MessageType::WARNING,
                    format!("kernel-lsp: compile checks are off: {why}. Syntax and @bench checks still run."),
                )
                .await;
        }
    }

    /// Wait until `uri`'s analysis describes its current text (or it is closed), so a
    /// request never answers from an older text's positions. A slow document makes
    /// requests on itself wait, never requests on other documents.
    async fn settled(&self, uri: &Url) {
        loop {
            let notified = self.analyzed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let current = {
                let st = self.state();
                st.docs
                    .get(uri)
                    .is_none_or(|o| o.analyzed_gen == o.compile_gen)
            };
            if current {
                return;
            }
            notified.await;
        }
    }

    /// Run `f` on an open document once its analysis is current.
    async fn with_doc<T>(
        &self,
        uri: &Url,
        f: impl FnOnce(&OpenDoc, PositionEncoding, &Settings) -> T,
    ) -> Result<T> {
        self.settled(uri).await;
        let st = self.state();
        let open = st.docs.get(uri).ok_or_else(|| not_open(uri))?;
        Ok(f(open, st.encoding, &st.settings))
    }
}

/// One run of a document's analysis, with what it took from the state.
struct AnalysisJob {
    epoch: u64,
    gen: u64,
    parse: ParseJob,
    keep_tree: bool,
    opts: AnalyzeOptions,
    budget: Duration,
    cache: analysis::SpecCache,
    /// Set by a newer change: the run stops early and its result is dropped.
    cancel: Arc<AtomicBool>,
}

/// What an [`AnalysisJob`] made.
struct AnalysisDone {
    epoch: u64,
    lang: Lang,
    gen: u64,
    parsed: Parsed,
    keep_tree: bool,
    kernel_file: bool,
    analysis: FileAnalysis,
    cache: analysis::SpecCache,
}

impl AnalysisJob {
    /// Parse and check, on a blocking thread. Pure apart from the clock and the flag.
    fn run(mut self) -> AnalysisDone {
        let deadline = Instant::now() + self.budget;
        let cancel = self.cancel.clone();
        let over = || cancel.load(Ordering::Relaxed) || Instant::now() >= deadline;
        let stopped_after = format!(
            "kernel-lsp stopped checking this file after {} ms (setting analysisBudgetMs)",
            self.budget.as_millis()
        );
        let text = &self.parse.text;
        let lang = self.parse.lang;
        let kernel_file = match lang {
            Lang::Cuda => true,
            Lang::Triton => syntax::is_triton_source(text),
        };
        if kernel_file && !self.keep_tree {
            // Syntax only (past maxFileBytes): parsed in pieces, no tree kept, so the
            // peak is the text and one piece's tree (issue #28: 745 MB for 20 MB whole).
            let analysis = analysis::syntax_only_in_pieces(lang, text, &self.opts, &mut || {
                over().then(|| stopped_after.clone())
            });
            drop(self.parse);
            give_back_freed_memory();
            return AnalysisDone {
                epoch: self.epoch,
                lang,
                gen: self.gen,
                parsed: Parsed::none(),
                keep_tree: false,
                kernel_file,
                analysis,
                cache: self.cache,
            };
        }
        let parsed = if kernel_file {
            self.parse.run(&mut || over())
        } else {
            Parsed::none()
        };
        let analysis = if !kernel_file {
            empty_analysis(lang)
        } else if parsed.stopped {
            let mut a = empty_analysis(lang);
            a.size_note = Some(format!(
                "{stopped_after} while parsing; nothing was checked"
            ));
            a
        } else {
            analysis::analyze_regions_within(
                lang,
                text,
                parsed.regions().as_deref(),
                &self.opts,
                &mut self.cache,
                &mut || over().then(|| stopped_after.clone()),
            )
        };
        let mut parsed = parsed;
        if !self.keep_tree {
            // A syntax-only file keeps no tree (tens of bytes per byte of text).
            parsed.forest = None;
            drop(self.parse);
            give_back_freed_memory();
        }
        AnalysisDone {
            epoch: self.epoch,
            lang,
            gen: self.gen,
            parsed,
            keep_tree: self.keep_tree,
            kernel_file,
            analysis,
            cache: self.cache,
        }
    }
}

/// Return freed heap pages to the system. tree-sitter builds a tree from many small
/// allocations; after a big file's tree is dropped, glibc keeps them (issue #16: a 20 MB
/// file left the server at 845 MB), so a syntax-only file would cost its tree for good.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: malloc_trim only releases free memory of glibc's own heaps; it takes no
        // pointer and is safe to call from any thread at any time.
        unsafe {
            malloc_trim(0);
        }
    }
}

fn empty_analysis(lang: Lang) -> FileAnalysis {
    FileAnalysis {
        model: syntax::FileModel {
            lang,
            kernels: Vec::new(),
            device_slice: String::new(),
            syntax_errors: Vec::new(),
        },
        specs: Vec::new(),
        size_note: None,
    }
}

fn negotiate_encoding(params: &InitializeParams) -> PositionEncoding {
    let offered = params
        .capabilities
        .general
        .as_ref()
        .and_then(|g| g.position_encodings.as_ref());
    match offered {
        Some(list) if list.contains(&PositionEncodingKind::UTF8) => PositionEncoding::Utf8,
        _ => PositionEncoding::Utf16,
    }
}

#[tower_lsp::async_trait]
impl LanguageServer for Backend {
    async fn initialize(&self, params: InitializeParams) -> Result<InitializeResult> {
        guarded("initialize", async {
            let encoding = negotiate_encoding(&params);
            let mut warn = None;
            {
                let mut st = self.state();
                st.encoding = encoding;
                st.can_create_progress = params
                    .capabilities
                    .window
                    .as_ref()
                    .and_then(|w| w.work_done_progress)
                    .unwrap_or(false);
                if let Some(opts) = &params.initialization_options {
                    let (s, msg) = Settings::from_json(opts);
                    st.settings = s;
                    warn = msg;
                }
            }
            if let Some(w) = warn {
                self.client.show_message(MessageType::WARNING, w).await;
            }
            Ok(InitializeResult {
                server_info: Some(ServerInfo {
                    name: "kernel-lsp".into(),
                    version: Some(env!("CARGO_PKG_VERSION").into()),
                }),
                capabilities: ServerCapabilities {
                    position_encoding: Some(match encoding {
                        PositionEncoding::Utf8 => PositionEncodingKind::UTF8,
                        PositionEncoding::Utf16 => PositionEncodingKind::UTF16,
                    }),
                    text_document_sync: Some(TextDocumentSyncCapability::Options(
                        TextDocumentSyncOptions {
                            open_close: Some(true),
                            change: Some(TextDocumentSyncKind::INCREMENTAL),
                            save: Some(TextDocumentSyncSaveOptions::Supported(true)),
                            ..Default::default()
                        },
                    )),
                    hover_provider: Some(HoverProviderCapability::Simple(true)),
                    document_symbol_provider: Some(OneOf::Left(true)),
                    code_action_provider: Some(CodeActionProviderCapability::Options(
                        CodeActionOptions {
                            code_action_kinds: Some(vec![CodeActionKind::REFACTOR_REWRITE]),
                            ..Default::default()
                        },
                    )),
                    inlay_hint_provider: Some(OneOf::Left(true)),
                    code_lens_provider: Some(CodeLensOptions {
                        resolve_provider: Some(false),
                    }),
                    execute_command_provider: Some(ExecuteCommandOptions {
                        commands: jobs::SupportedCommand::ALL
                            .iter()
                            .map(|c| c.id().to_string())
                            .collect(),
                        work_done_progress_options: WorkDoneProgressOptions {
                            work_done_progress: Some(true),
                        },
                    }),
                    ..Default::default()
                },
            })
        })
        .await
    }

    async fn initialized(&self, _: InitializedParams) {
        tracing::info!("kernel-lsp {} ready", env!("CARGO_PKG_VERSION"));
    }

    async fn shutdown(&self) -> Result<()> {
        let pool = self.state().pool.take();
        if let Some(p) = pool {
            p.shutdown().await;
        }
        Ok(())
    }

    async fn execute_command(&self, params: ExecuteCommandParams) -> Result<Option<Value>> {
        guarded("executeCommand", self.execute(params)).await
    }

    async fn did_open(&self, params: DidOpenTextDocumentParams) {
        let _ = guarded("didOpen", async {
            let td = params.text_document;
            let Some(lang) = syntax::lang_for_text(td.uri.path(), Some(&td.language_id), &td.text)
            else {
                tracing::debug!("ignoring {} ({})", td.uri, td.language_id);
                return Ok(());
            };
            {
                let mut st = self.state();
                // Opened again without a close (a language change can do this): the
                // old open ends here, as at a close.
                Self::forget(&mut st, &td.uri);
                st.opens += 1;
                let epoch = st.opens;
                let doc = Document::unparsed(lang, td.version, td.text);
                st.docs.insert(
                    td.uri.clone(),
                    OpenDoc {
                        epoch,
                        doc,
                        kernel_file: false,
                        analysis: Arc::new(empty_analysis(lang)),
                        compile: None,
                        spec_cache: Default::default(),
                        compile_gen: 0,
                        analyzed_gen: 0,
                        analyzing: None,
                        last_edit: 0,
                        published_any: false,
                    },
                );
                Self::touch(&mut st, &td.uri);
            }
            self.schedule_analysis(td.uri, true);
            Ok(())
        })
        .await;
    }

    async fn did_change(&self, params: DidChangeTextDocumentParams) {
        let _ = guarded("didChange", async {
            let uri = params.text_document.uri;
            let problem = {
                let mut st = self.state();
                let enc = st.encoding;
                let Some(open) = st.docs.get_mut(&uri) else {
                    tracing::warn!("didChange for {uri}, which is not open; ignored");
                    return Ok(());
                };
                let mut problem = None;
                for change in params.content_changes {
                    match change.range {
                        None => open.doc.replace_all(change.text),
                        Some(r) => {
                            let start = LinePos { line: r.start.line, col: r.start.character };
                            let end = LinePos { line: r.end.line, col: r.end.character };
                            if let Err(e) = open.doc.apply_change(start, end, &change.text, enc) {
                                // The client and server now disagree on the text. Say so;
                                // the client's next full sync (reopen) repairs it.
                                problem = Some(format!(
                                    "kernel-lsp could not apply an edit to {uri}: {e}. Its view of the file may be out of date; close and reopen the file."
                                ));
                                break;
                            }
                        }
                    }
                }
                open.doc.version = params.text_document.version;
                Self::touch(&mut st, &uri);
                problem
            };
            // Parsing and checking run off the message loop; they publish when done.
            self.schedule_analysis(uri.clone(), false);
            if let Some(p) = problem {
                tracing::error!("{p}");
                self.client.show_message(MessageType::ERROR, p).await;
            }
            Ok(())
        })
        .await;
    }

    async fn did_save(&self, params: DidSaveTextDocumentParams) {
        self.bench_on_save(&params.text_document.uri);
        self.schedule_compile(params.text_document.uri, true);
    }

    async fn did_close(&self, params: DidCloseTextDocumentParams) {
        let uri = params.text_document.uri;
        Self::forget(&mut self.state(), &uri);
        // Requests waiting for this document's analysis answer "not open" now.
        self.analyzed.notify_waiters();
        // Cleared whether or not this open published: a publish read before the close
        // may still be on its way, and goes out first (`publishing`).
        let _order = self.publishing.lock().await;
        self.client.publish_diagnostics(uri, Vec::new(), None).await;
    }

    async fn did_change_configuration(&self, params: DidChangeConfigurationParams) {
        let _ = guarded("didChangeConfiguration", async {
            let (settings, warn) = Settings::from_json(&params.settings);
            let uris: Vec<Url> = {
                let mut st = self.state();
                if st.settings.toolchain() != settings.toolchain() {
                    st.toolchain = None;
                    st.nvrtc_warned = false;
                }
                if (
                    &st.settings.worker,
                    &st.settings.workers,
                    &st.settings.python,
                ) != (&settings.worker, &settings.workers, &settings.python)
                {
                    // Jobs holding the old pool finish on it; the next job starts anew.
                    st.pool = None;
                }
                st.settings = settings;
                let uris: Vec<Url> = st.docs.keys().cloned().collect();
                for open in st.docs.values_mut() {
                    open.compile_gen += 1;
                }
                uris
            };
            if let Some(w) = warn {
                self.client.show_message(MessageType::WARNING, w).await;
            }
            for u in uris {
                self.schedule_analysis(u, true);
            }
            Ok(())
        })
        .await;
    }

    async fn hover(&self, params: HoverParams) -> Result<Option<Hover>> {
        self.hover_request(params).await
    }

    async fn document_symbol(
        &self,
        params: DocumentSymbolParams,
    ) -> Result<Option<DocumentSymbolResponse>> {
        self.document_symbol_request(params).await
    }

    async fn code_action(&self, params: CodeActionParams) -> Result<Option<CodeActionResponse>> {
        self.code_action_request(params).await
    }

    async fn code_lens(&self, params: CodeLensParams) -> Result<Option<Vec<CodeLens>>> {
        self.code_lens_request(params).await
    }

    async fn inlay_hint(&self, params: InlayHintParams) -> Result<Option<Vec<InlayHint>>> {
        self.inlay_hint_request(params).await
    }
}

impl OpenDoc {
    fn doc_ref(&self) -> &Document {
        &self.doc
    }
}
