//! `kernel-lsp.applyRewrite`: the kernel's pending verified rewrite as a versioned
//! `workspace/applyEdit` over its region, refused when the author edited that region since
//! the job started; with none pending, the best version of the kernel's last recorded run
//! (the engine `kernel-lsp apply` uses).

use serde_json::Value;
use tower_lsp::lsp_types::*;

use crate::optimize::{self, history};

use super::{find_kernel, message, region_edit, store, Backend};

impl Backend {
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
    pub(super) async fn send_edit(
        &self,
        edit: TextDocumentEdit,
    ) -> std::result::Result<(), String> {
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
}
