//! `textDocument/hover`: the kernel's or spec line's hover (`lsp::hover`), with the
//! kernel's last Nsight Compute profile while the kernel is as it was profiled.

use tower_lsp::jsonrpc::Result;
use tower_lsp::lsp_types::*;

use crate::lsp::{guarded, hover, jobs, Backend};

impl Backend {
    pub(in crate::lsp) async fn hover_request(&self, params: HoverParams) -> Result<Option<Hover>> {
        guarded("hover", async {
            let p = params.text_document_position_params;
            let profiles = self.kernel_statuses(&p.text_document.uri, |s| s.profile.clone());
            self.with_doc(&p.text_document.uri, |open, enc, settings| {
                let mut h = hover::hover(
                    open.doc_ref(),
                    &open.analysis,
                    open.compile.as_deref(),
                    p.position,
                    enc,
                    settings,
                )?;
                // The kernel's profile, while the kernel is as it was profiled.
                let offset = open
                    .doc
                    .offset(
                        crate::document::LinePos {
                            line: p.position.line,
                            col: p.position.character,
                        },
                        enc,
                    )
                    .ok()?;
                let kernel = open.analysis.model.kernels.iter().find(|k| {
                    (k.name_range.start..=k.name_range.end).contains(&offset)
                        || k.spec
                            .range
                            .as_ref()
                            .is_some_and(|r| (r.start..=r.end).contains(&offset))
                });
                if let (Some(k), HoverContents::Markup(m)) = (kernel, &mut h.contents) {
                    if let Some((prof, region)) = profiles.get(&k.name) {
                        if open.doc.text().get(jobs::region(k)) == Some(region.as_str()) {
                            m.value.push_str(&hover::profile_section(prof));
                        }
                    }
                }
                Some(h)
            })
            .await
        })
        .await
    }
}
