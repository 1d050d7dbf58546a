//! "Capture launches from…" (issue #32): the editor's front end over `crate::capture`, the
//! engine `kernel-lsp capture` uses. The command the author gave (or the `captureCommand`
//! setting) runs as a child process in the workspace root; the specs it yields for the
//! kernels of this document that have none arrive as one `workspace/applyEdit`, which the
//! editor can undo like any edit. The server itself runs no user code.

use std::path::Path;

use serde_json::Value;
use tower_lsp::lsp_types::*;

use super::{message, Backend, Snapshot};
use crate::capture::{self, place, run, InferOptions, KernelCapture};

/// Kernels whose spec was not written, and why.
type Skipped = Vec<(String, String)>;

fn same_file(a: &Path, b: &Path) -> bool {
    a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// One line per kernel of the file: written, or why not.
fn summary(line: &str, here: &[&KernelCapture], skipped: &[(String, String)]) -> String {
    let mut parts = Vec::new();
    for k in here {
        match (&k.spec, skipped.iter().find(|(n, _)| *n == k.kernel)) {
            (Err(why), _) => parts.push(format!("`{}` refused: {why}", k.kernel)),
            (Ok(_), Some((_, why))) => parts.push(format!("`{}` not written: {why}", k.kernel)),
            (Ok(s), None) => parts.push(format!(
                "`{}`: spec with {} case{} from {} launch{}",
                k.kernel,
                s.cases,
                if s.cases == 1 { "" } else { "s" },
                k.launches,
                if k.launches == 1 { "" } else { "es" }
            )),
        }
    }
    format!("captured from `{line}`: {}", parts.join("; "))
}

impl Backend {
    pub(super) async fn capture_job(
        &self,
        uri: &Url,
        command: Option<&str>,
        snap: Snapshot,
    ) -> std::result::Result<Value, String> {
        let line = command
            .map(str::to_string)
            .or_else(|| snap.settings.capture_command.clone())
            .filter(|l| !l.trim().is_empty())
            .ok_or("Capture launches from…: no command to run; give one, or set `captureCommand` (e.g. \"python train_step.py\")")?;
        let words = crate::worker::pool::split_command(&line)?;
        let file = snap
            .file
            .clone()
            .ok_or("capture needs the file saved on disk: the command imports it from there")?;
        let opts = run::RunOptions {
            command: words,
            cwd: Some(crate::toolchain::project::workspace_root(&file)),
            kernel: None,
            max_cases: 4,
            show_output: false,
        };
        let outcome = tokio::task::spawn_blocking(move || run::run(&opts))
            .await
            .map_err(|e| format!("the capture stopped: {e}"))??;
        let kernels = capture::capture_specs(&outcome.records, &InferOptions::default());
        let here: Vec<&KernelCapture> = kernels
            .iter()
            .filter(|k| same_file(Path::new(&k.file), &file))
            .collect();
        if here.is_empty() {
            let status = outcome
                .status
                .map_or("was killed".to_string(), |s| format!("exited with {s}"));
            return Err(format!(
                "`{line}` {status} and launched no kernel of this file{}",
                if outcome.output_tail.is_empty() {
                    String::new()
                } else {
                    format!("; its last output:\n{}", outcome.output_tail)
                }
            ));
        }
        let specs: Vec<(String, Vec<String>)> = here
            .iter()
            .filter_map(|k| Some((k.kernel.clone(), k.spec.as_ref().ok()?.lines.clone())))
            .collect();
        let (edit, skipped) = self.spec_edit(uri, &snap, &specs)?;
        let text = summary(&line, &here, &skipped);
        match edit {
            Some(e) => {
                self.send_edit(e).await?;
                Ok(message("accepted", text))
            }
            None => Err(text),
        }
    }
    /// The edit that writes `specs` into the open document `snap` was taken of (as it is
    /// now), and per kernel why it was not written; `None` when nothing is to be written.
    fn spec_edit(
        &self,
        uri: &Url,
        snap: &Snapshot,
        specs: &[(String, Vec<String>)],
    ) -> std::result::Result<(Option<TextDocumentEdit>, Skipped), String> {
        let st = self.state();
        let open = st
            .docs
            .get(uri)
            .filter(|o| o.is(snap.epoch, snap.lang))
            .ok_or("the file was closed while the command ran")?;
        let (edits, skipped) = place::edits(snap.lang, open.doc.text(), specs, false);
        let edits: Vec<OneOf<TextEdit, AnnotatedTextEdit>> = edits
            .into_iter()
            .map(|e| {
                OneOf::Left(TextEdit {
                    range: crate::lsp::convert::lsp_range(
                        &open.doc,
                        &(e.start..e.end),
                        st.encoding,
                    ),
                    new_text: e.text,
                })
            })
            .collect();
        let edit = (!edits.is_empty()).then(|| TextDocumentEdit {
            text_document: OptionalVersionedTextDocumentIdentifier {
                uri: uri.clone(),
                version: Some(open.doc.version),
            },
            edits,
        });
        Ok((edit, skipped))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::Inferred;

    #[test]
    fn the_summary_names_every_kernel_and_what_happened() {
        let k = |name: &str, spec: Result<Inferred, String>| KernelCapture {
            file: "/p/k.py".into(),
            kernel: name.into(),
            launches: 3,
            recorded: 2,
            spec,
        };
        let ok = Inferred {
            lines: vec![],
            cases: 2,
            notes: vec![],
        };
        let a = k("a", Ok(ok.clone()));
        let b = k("b", Err("`x` and `y` share memory".into()));
        let c = k("c", Ok(ok));
        let skipped = vec![("c".to_string(), "it already has a @bench spec".to_string())];
        assert_eq!(
            summary("python t.py", &[&a, &b, &c], &skipped),
            "captured from `python t.py`: `a`: spec with 2 cases from 3 launches; `b` refused: `x` and `y` share memory; `c` not written: it already has a @bench spec"
        );
    }
}
