//! `textDocument/codeLens`: above each kernel with a spec, its last timing (the inlay
//! hint's label), the profile's bound, and the Benchmark, Profile, Optimize and Revert
//! commands.

use tower_lsp::jsonrpc::Result;
use tower_lsp::lsp_types::*;

use crate::lsp::{guarded, jobs, lsp_range, Backend};

impl Backend {
    /// Code lenses above each kernel with a spec, for clients that prefer them to inlay
    /// hints: the last timing (if any), then "▶ Benchmark", "⚡ Optimize", "↺ Revert".
    pub(in crate::lsp) async fn code_lens_request(
        &self,
        params: CodeLensParams,
    ) -> Result<Option<Vec<CodeLens>>> {
        guarded("codeLens", async {
            let uri = params.text_document.uri.clone();
            let timed = self.kernel_statuses(&uri, jobs::timing_label);
            let profiled = self.kernel_statuses(&uri, |s| {
                let (p, region) = s.profile.as_ref()?;
                Some((p.short(), region.clone()))
            });
            self.with_doc(&uri, |open, enc, _| {
                let mut lenses = Vec::new();
                for (k, report) in open.analysis.model.kernels.iter().zip(&open.analysis.specs) {
                    if report.plan.is_none() {
                        continue;
                    }
                    let range = lsp_range(&open.doc, &k.name_range, enc);
                    let arg = serde_json::json!({"uri": uri, "kernel": k.name});
                    let mut items = Vec::new();
                    if let Some(t) = timed.get(&k.name) {
                        items.push((t.clone(), jobs::BENCH));
                    }
                    items.push(("▶ Benchmark".to_string(), jobs::BENCH));
                    // The profile's bound while the kernel is as it was profiled; the
                    // action only where ncu is installed.
                    match profiled.get(&k.name) {
                        Some((short, region))
                            if open.doc.text().get(jobs::region(k)) == Some(region.as_str()) =>
                        {
                            items.push((format!("🔍 {short}"), jobs::PROFILE))
                        }
                        _ if jobs::ncu_present() => {
                            items.push(("🔍 Profile".to_string(), jobs::PROFILE))
                        }
                        _ => {}
                    }
                    items.push(("⚡ Optimize".to_string(), jobs::OPTIMIZE));
                    items.push(("↺ Revert".to_string(), jobs::REVERT));
                    for (title, command) in items {
                        lenses.push(CodeLens {
                            range,
                            command: Some(Command {
                                title,
                                command: command.id().to_string(),
                                arguments: Some(vec![arg.clone()]),
                            }),
                            data: None,
                        });
                    }
                }
                Some(lenses)
            })
            .await
        })
        .await
    }
}
