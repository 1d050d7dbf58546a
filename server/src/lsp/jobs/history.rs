//! `kernel-lsp.showHistory`: the kernel's history as the HTML report the CLI writes,
//! opened in the browser.

use serde_json::Value;
use tower_lsp::lsp_types::*;

use crate::optimize::{self, history};

use super::{message, Backend, Snapshot};

impl Backend {
    pub(super) async fn show_history(&self, snap: &Snapshot) -> std::result::Result<Value, String> {
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
}
