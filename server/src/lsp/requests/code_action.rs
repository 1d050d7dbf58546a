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
                let start = doc
                    .offset(
                        LinePos {
                            line: params.range.start.line,
                            col: params.range.start.character,
                        },
                        enc,
                    )
                    .unwrap_or(doc.text().len());
                let mut actions = Vec::new();
                if let Some(k) = open.analysis.model.kernel_at(start) {
                    let status = kernels.get(&k.name);
                    let arg = serde_json::json!({"uri": uri, "kernel": k.name});
                    let cmd = |title: String,
                               command: jobs::SupportedCommand,
                               kind: CodeActionKind,
                               diags: Option<Vec<Diagnostic>>| {
                        CodeActionOrCommand::CodeAction(CodeAction {
                            title: title.clone(),
                            kind: Some(kind),
                            diagnostics: diags,
                            command: Some(Command {
                                title,
                                command: command.id().to_string(),
                                arguments: Some(vec![arg.clone()]),
                            }),
                            ..Default::default()
                        })
                    };
                    // Quick fixes for a verification failure shown on this kernel.
                    let failing: Vec<Diagnostic> = params
                        .context
                        .diagnostics
                        .iter()
                        .filter(|d| d.code == Some(NumberOrString::String("verify".into())))
                        .cloned()
                        .collect();
                    if !failing.is_empty() || status.is_some_and(|s| s.failure.is_some()) {
                        let d = (!failing.is_empty()).then_some(failing);
                        actions.push(cmd(
                            "Revert to last verified version".into(),
                            jobs::REVERT,
                            CodeActionKind::QUICKFIX,
                            d.clone(),
                        ));
                        actions.push(cmd(
                            "Ask the coder to fix".into(),
                            jobs::FIX,
                            CodeActionKind::QUICKFIX,
                            d,
                        ));
                    }
                    if let Some(p) = status.and_then(|s| s.pending.as_ref()) {
                        actions.push(cmd(
                            format!("Apply verified rewrite ({:.2}×)", p.speedup),
                            jobs::APPLY,
                            CodeActionKind::REFACTOR_REWRITE,
                            None,
                        ));
                    }
                    if !k.spec.lines.is_empty() {
                        let busy = status.is_some_and(|s| s.running.is_some());
                        // A spec with errors cannot run: no job is offered until it is
                        // fixed (its diagnostics and quick fixes say how).
                        let runs = (open.analysis.model.kernels.iter())
                            .position(|x| x.name == k.name)
                            .and_then(|i| open.analysis.specs.get(i))
                            .is_some_and(|r| r.plan.is_some());
                        if !busy && runs {
                            actions.push(cmd(
                                format!("Optimize `{}`: next step", k.name),
                                jobs::OPTIMIZE,
                                CodeActionKind::REFACTOR_REWRITE,
                                None,
                            ));
                            actions.push(cmd(
                                format!("Tune parameters of `{}`", k.name),
                                jobs::TUNE,
                                CodeActionKind::REFACTOR_REWRITE,
                                None,
                            ));
                            actions.push(cmd(
                                format!("Benchmark `{}`", k.name),
                                jobs::BENCH,
                                CodeActionKind::EMPTY,
                                None,
                            ));
                        }
                        actions.push(cmd(
                            format!("Pin `{}` as baseline", k.name),
                            jobs::PIN,
                            CodeActionKind::EMPTY,
                            None,
                        ));
                        if status.is_none_or(|s| s.failure.is_none()) {
                            actions.push(cmd(
                                "Revert to last verified version".into(),
                                jobs::REVERT,
                                CodeActionKind::EMPTY,
                                None,
                            ));
                        }
                        actions.push(cmd(
                            format!("Show history of `{}`", k.name),
                            jobs::HISTORY,
                            CodeActionKind::EMPTY,
                            None,
                        ));
                    }
                    if k.spec.lines.is_empty() {
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
                        actions.push(CodeActionOrCommand::CodeAction(CodeAction {
                            title: format!("Insert @bench spec for `{}`", k.name),
                            kind: Some(CodeActionKind::REFACTOR_REWRITE),
                            edit: Some(WorkspaceEdit {
                                document_changes: Some(DocumentChanges::Edits(vec![edit])),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }));
                    }
                    // Specs from the author's own program (issue #32), after the skeleton: the command is
                    // asked by the client or read from `captureCommand`. CUDA kernels are
                    // captured through the preload shim (a program using libcudart.so).
                    actions.push(cmd(
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
