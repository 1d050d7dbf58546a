//! `textDocument/documentSymbol`: one symbol per kernel, with its language and how many
//! spec cases it has.

use tower_lsp::jsonrpc::Result;
use tower_lsp::lsp_types::*;

use crate::lsp::{guarded, lsp_range, Backend};
use crate::syntax::Lang;

impl Backend {
    pub(in crate::lsp) async fn document_symbol_request(
        &self,
        params: DocumentSymbolParams,
    ) -> Result<Option<DocumentSymbolResponse>> {
        guarded("documentSymbol", async {
            self.with_doc(&params.text_document.uri, |open, enc, _| {
                let syms = open
                    .analysis
                    .model
                    .kernels
                    .iter()
                    .zip(&open.analysis.specs)
                    .map(|(k, report)| {
                        let detail = match (k.lang, &report.plan) {
                            (Lang::Cuda, Some(p)) => {
                                format!("__global__ · {} case(s)", p.cases.len())
                            }
                            (Lang::Cuda, None) => "__global__ · no @bench spec".to_string(),
                            (Lang::Triton, Some(p)) => {
                                format!("@triton.jit · {} case(s)", p.cases.len())
                            }
                            (Lang::Triton, None) => "@triton.jit · no @bench spec".to_string(),
                        };
                        #[allow(deprecated)] // `deprecated` is a required field of the struct
                        DocumentSymbol {
                            name: k.name.clone(),
                            detail: Some(detail),
                            kind: SymbolKind::FUNCTION,
                            tags: None,
                            deprecated: None,
                            range: lsp_range(&open.doc, &k.def_range, enc),
                            selection_range: lsp_range(&open.doc, &k.name_range, enc),
                            children: None,
                        }
                    })
                    .collect();
                Some(DocumentSymbolResponse::Nested(syms))
            })
            .await
        })
        .await
    }
}
