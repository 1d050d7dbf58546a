//! `textDocument/codeAction`: the jobs offered on the kernel at the cursor (optimize,
//! tune, benchmark, pin, revert, history, capture; apply when a verified rewrite waits;
//! revert and fix as quick fixes of a verification failure), "Insert @bench spec" for a
//! kernel without one, and a quick fix for each spec diagnostic that names its fix.

use tower_lsp::jsonrpc::Result;
use tower_lsp::lsp_types::*;

use crate::document::LinePos;
use crate::lsp::{guarded, jobs, Backend};

impl Backend {
    pub(in crate::lsp) async fn code_action_request(
        &self,
        params: CodeActionParams,
    ) -> Result<Option<CodeActionResponse>> {
        guarded("codeAction", async {
            let uri = params.text_document.uri.clone();
            let kernels = self.kernel_statuses(&uri, |s| Some(s.clone()));
            self.with_doc(&uri, |open, enc, _| {
                let doc = &open.doc;
                let at = LinePos {
                    line: params.range.start.line,
                    col: params.range.start.character,
                };
                let start = doc.offset(at, enc).unwrap_or(doc.text().len());
                let mut actions = Vec::new();
                if let Some(k) = open.analysis.model.kernel_at(start) {
                    let status = kernels.get(&k.name);
                    let on = OnKernel {
                        arg: serde_json::json!({"uri": uri, "kernel": k.name}),
                    };
                    actions.extend(failure_fixes(&on, status, &params.context.diagnostics));
                    actions.extend(job_actions(&on, open, k, status));
                    if k.spec.lines.is_empty() {
                        actions.push(skeleton_action(&uri, doc, k, enc));
                    }
                    // Specs from the author's own program (issue #32), after the skeleton:
                    // the command is asked by the client or read from `captureCommand`.
                    // CUDA kernels are captured through the preload shim (a program using
                    // libcudart.so).
                    actions.push(on.cmd(
                        "Capture launches from…".into(),
                        jobs::CAPTURE,
                        CodeActionKind::REFACTOR_REWRITE,
                        None,
                    ));
                }
                actions.extend(spec_quick_fixes(
                    &uri,
                    doc.version,
                    &params.context.diagnostics,
                ));
                (!actions.is_empty()).then_some(actions)
            })
            .await
        })
        .await
    }
}

/// The kernel an action runs a job on: the command's one argument.
struct OnKernel {
    arg: serde_json::Value,
}

impl OnKernel {
    /// An action that runs `command` on the kernel.
    fn cmd(
        &self,
        title: String,
        command: jobs::SupportedCommand,
        kind: CodeActionKind,
        diags: Option<Vec<Diagnostic>>,
    ) -> CodeActionOrCommand {
        CodeActionOrCommand::CodeAction(CodeAction {
            title: title.clone(),
            kind: Some(kind),
            diagnostics: diags,
            command: Some(Command {
                title,
                command: command.id().to_string(),
                arguments: Some(vec![self.arg.clone()]),
            }),
            ..Default::default()
        })
    }
}

/// Revert and "ask the coder to fix" as quick fixes of a verification failure shown on
/// the kernel (or recorded in its status).
fn failure_fixes(
    on: &OnKernel,
    status: Option<&jobs::KernelStatus>,
    diags: &[Diagnostic],
) -> Vec<CodeActionOrCommand> {
    let failing: Vec<Diagnostic> = diags
        .iter()
        .filter(|d| d.code == Some(NumberOrString::String("verify".into())))
        .cloned()
        .collect();
    if failing.is_empty() && status.is_none_or(|s| s.failure.is_none()) {
        return Vec::new();
    }
    let d = (!failing.is_empty()).then_some(failing);
    vec![
        on.cmd(
            "Revert to last verified version".into(),
            jobs::REVERT,
            CodeActionKind::QUICKFIX,
            d.clone(),
        ),
        on.cmd(
            "Ask the coder to fix".into(),
            jobs::FIX,
            CodeActionKind::QUICKFIX,
            d,
        ),
    ]
}

/// Apply (when a verified rewrite waits), and for a kernel with a spec: optimize, tune
/// and benchmark (when the spec plans and no job runs), pin, revert, history.
fn job_actions(
    on: &OnKernel,
    open: &crate::lsp::OpenDoc,
    k: &crate::syntax::Kernel,
    status: Option<&jobs::KernelStatus>,
) -> Vec<CodeActionOrCommand> {
    let mut actions = Vec::new();
    if let Some(p) = status.and_then(|s| s.pending.as_ref()) {
        actions.push(on.cmd(
            format!("Apply verified rewrite ({:.2}×)", p.speedup),
            jobs::APPLY,
            CodeActionKind::REFACTOR_REWRITE,
            None,
        ));
    }
    if k.spec.lines.is_empty() {
        return actions;
    }
    let busy = status.is_some_and(|s| s.running.is_some());
    // A spec with errors cannot run: no job is offered until it is fixed (its
    // diagnostics and quick fixes say how).
    let runs = (open.analysis.model.kernels.iter())
        .position(|x| x.name == k.name)
        .and_then(|i| open.analysis.specs.get(i))
        .is_some_and(|r| r.plan.is_some());
    let name = &k.name;
    if !busy && runs {
        actions.push(on.cmd(
            format!("Optimize `{name}`: next step"),
            jobs::OPTIMIZE,
            CodeActionKind::REFACTOR_REWRITE,
            None,
        ));
        actions.push(on.cmd(
            format!("Tune parameters of `{name}`"),
            jobs::TUNE,
            CodeActionKind::REFACTOR_REWRITE,
            None,
        ));
        actions.push(on.cmd(
            format!("Benchmark `{name}`"),
            jobs::BENCH,
            CodeActionKind::EMPTY,
            None,
        ));
    }
    actions.push(on.cmd(
        format!("Pin `{name}` as baseline"),
        jobs::PIN,
        CodeActionKind::EMPTY,
        None,
    ));
    if status.is_none_or(|s| s.failure.is_none()) {
        actions.push(on.cmd(
            "Revert to last verified version".into(),
            jobs::REVERT,
            CodeActionKind::EMPTY,
            None,
        ));
    }
    actions.push(on.cmd(
        format!("Show history of `{name}`"),
        jobs::HISTORY,
        CodeActionKind::EMPTY,
        None,
    ));
    actions
}

/// "Insert @bench spec": the skeleton from the kernel's signature, as a versioned edit
/// above the kernel.
fn skeleton_action(
    uri: &Url,
    doc: &crate::document::Document,
    k: &crate::syntax::Kernel,
    enc: crate::document::PositionEncoding,
) -> CodeActionOrCommand {
    let sk = crate::spec::skeleton(k, doc.text());
    let at = doc.position(sk.insert_at, enc);
    let pos = Position {
        line: at.line,
        character: at.col,
    };
    let edit = TextDocumentEdit {
        text_document: OptionalVersionedTextDocumentIdentifier {
            uri: uri.clone(),
            version: Some(doc.version),
        },
        edits: vec![OneOf::Left(TextEdit {
            range: Range {
                start: pos,
                end: pos,
            },
            new_text: sk.text,
        })],
    };
    CodeActionOrCommand::CodeAction(CodeAction {
        title: format!("Insert @bench spec for `{}`", k.name),
        kind: Some(CodeActionKind::REFACTOR_REWRITE),
        edit: Some(WorkspaceEdit {
            document_changes: Some(DocumentChanges::Edits(vec![edit])),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// A quick fix for each spec diagnostic whose message names the fix ("did you mean
/// `f32`?"): the suggested word in place of the diagnostic's range, which covers the
/// wrong word exactly.
fn spec_quick_fixes(uri: &Url, version: i32, diags: &[Diagnostic]) -> Vec<CodeActionOrCommand> {
    let spec = crate::analysis::FindingSource::Spec.label();
    let spec_diag = |d: &&Diagnostic| d.source.as_deref() == Some(spec);
    diags
        .iter()
        .filter(spec_diag)
        .filter_map(|d| {
            let word = crate::spec::suggestion(&d.message)?;
            let edit = TextDocumentEdit {
                text_document: OptionalVersionedTextDocumentIdentifier {
                    uri: uri.clone(),
                    version: Some(version),
                },
                edits: vec![OneOf::Left(TextEdit {
                    range: d.range,
                    new_text: word.to_string(),
                })],
            };
            Some(CodeActionOrCommand::CodeAction(CodeAction {
                title: format!("Replace with `{word}`"),
                kind: Some(CodeActionKind::QUICKFIX),
                diagnostics: Some(vec![d.clone()]),
                edit: Some(WorkspaceEdit {
                    document_changes: Some(DocumentChanges::Edits(vec![edit])),
                    ..Default::default()
                }),
                is_preferred: Some(true),
                ..Default::default()
            }))
        })
        .collect()
}
