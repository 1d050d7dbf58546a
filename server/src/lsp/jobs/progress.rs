//! A job's life in the editor: `$/progress` begin, report and end (cancellable), the
//! `kernel-lsp/status` line (the worker and the running job), the per-kernel claim that
//! lets one job run on a kernel at a time, and cancellation from
//! `window/workDoneProgress/cancel` or a dropped request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::Deserialize;
use tower_lsp::lsp_types::notification::{Notification, Progress};
use tower_lsp::lsp_types::request::WorkDoneProgressCreate;
use tower_lsp::lsp_types::*;

use crate::worker::pool::WorkerStatus;

use super::Backend;

/// Sends `$/progress` for one job (when the client gave or accepted a token) and the
/// `kernel-lsp/status` job line.
pub(super) struct Reporter {
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

    pub(super) async fn report(&self, stage: &str) {
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

    pub(super) async fn end(&self, message: &str) {
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
pub(super) struct JobGuard {
    backend: Backend,
    key: (Url, String),
    pub(super) cancel: Arc<AtomicBool>,
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

impl Backend {
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

    pub(super) async fn start_job(
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

    /// `window/workDoneProgress/cancel`.
    pub(in crate::lsp) async fn progress_cancel(&self, params: WorkDoneProgressCancelParams) {
        if let Ok(m) = self.progress_tokens.lock() {
            if let Some(c) = m.get(&token_key(&params.token)) {
                c.store(true, Ordering::Relaxed);
            }
        }
    }
}
