//! Editor jobs: the `kernel-lsp.*` commands behind the code actions, one file each
//! (`optimize` for optimize, tune and fix; `bench`, `profile`, `capture`, `apply`,
//! `baseline` for pin and revert, `history`), over the engines the CLI uses. This file
//! holds the commands as one type, the dispatch, and what a job starts from: the
//! document's snapshot and the kernel's region. Long jobs report `$/progress` and stop
//! when the editor cancels (`progress`). A verified faster result becomes a versioned
//! `workspace/applyEdit` over the kernel's region (its `@bench` lines and unit) — or a
//! code action, with `applyMode = "offer"` — and is refused when the author typed in
//! that region since the job started. One job per kernel at a time. GPU work goes
//! through the worker pool (`pool`); this module never touches CUDA.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{json, Value};
use tower_lsp::jsonrpc::{Error, Result};
use tower_lsp::lsp_types::*;

use crate::document::{Document, LinePos};
use crate::settings::Settings;
use crate::syntax::{self, Kernel, Lang};

use super::Backend;

mod apply;
mod baseline;
mod bench;
mod capture;
mod history;
mod optimize;
mod pool;
mod profile;
mod progress;
mod status;

use baseline::{load, store};
pub(super) use profile::ncu_present;
pub(super) use progress::{StatusNotification, StatusParams, WorkerLine};
pub(super) use status::{job_diagnostics, timing_label, KernelStatus, Pending};

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

/// The kernel's region: from its `@bench` block (or its first unit range) to the end of
/// its last unit range. Edits of a job cover exactly this.
pub(in crate::lsp) fn region(k: &Kernel) -> std::ops::Range<usize> {
    crate::optimize::apply::kernel_region(k)
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
