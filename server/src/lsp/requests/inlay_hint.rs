//! `textDocument/inlayHint`: after each kernel's name, its last timing and speedups, or,
//! before any benchmark, ptxas's registers, shared memory and spills.

use tower_lsp::jsonrpc::Result;
use tower_lsp::lsp_types::*;

use crate::analysis;
use crate::document::LinePos;
use crate::lsp::{guarded, jobs, Backend};

impl Backend {
    pub(in crate::lsp) async fn inlay_hint_request(
        &self,
        params: InlayHintParams,
    ) -> Result<Option<Vec<InlayHint>>> {
        guarded("inlayHint", async {
            let uri = params.text_document.uri.clone();
            let timed = self.kernel_statuses(&uri, jobs::timing_label);
            self.with_doc(&params.text_document.uri, |open, enc, settings| {
                let mut hints: Vec<InlayHint> = Vec::new();
                for k in &open.analysis.model.kernels {
                    if let Some(label) = timed.get(&k.name) {
                        let p = open.doc.position(k.name_range.end, enc);
                        hints.push(hint(p, label.clone(), format!(
                            "kernel-lsp: last benchmark of `{}` (median time · speedup vs baseline · share of the measured copy bandwidth · registers)",
                            k.name
                        )));
                    }
                }
                let Some(compile) = &open.compile else {
                    return Some(hints);
                };
                let ptxas: Vec<InlayHint> = open
                    .analysis
                    .model
                    .kernels
                    .iter()
                    .filter(|k| !timed.contains_key(&k.name))
                    .filter_map(|k| {
                        let r = analysis::resources_for(&compile.resources, k)?;
                        let p = open.doc.position(k.name_range.end, enc);
                        Some(hint(p, analysis::resources_label(r), format!(
                            "ptxas -arch={} for `{}`: {} registers, {} B shared, {} B stack, {} B spill stores, {} B spill loads",
                            settings.arch, r.symbol, r.registers, r.shared_bytes, r.stack_bytes, r.spill_stores, r.spill_loads
                        )))
                    })
                    .collect();
                hints.extend(ptxas);
                hints.retain(|h| h.position.line >= params.range.start.line && h.position.line <= params.range.end.line);
                Some(hints)
            }).await
        })
        .await
    }
}

/// A hint after a kernel's name (at `p`), with its tooltip.
fn hint(p: LinePos, label: String, tooltip: String) -> InlayHint {
    InlayHint {
        position: Position {
            line: p.line,
            character: p.col,
        },
        label: InlayHintLabel::String(label),
        kind: None,
        text_edits: None,
        tooltip: Some(InlayHintTooltip::String(tooltip)),
        padding_left: Some(true),
        padding_right: None,
        data: None,
    }
}
