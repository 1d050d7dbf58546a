//! The LSP request handlers, one file each (as ruff's server keeps them): each reads the
//! open document's analysis and what jobs learned about its kernels
//! ([`Backend::kernel_statuses`]), and answers in the protocol's types. Protocol glue only:
//! what they show is computed by `analysis`, `lsp::hover` and the jobs.

use std::collections::HashMap;

use tower_lsp::lsp_types::Url;

use super::jobs::KernelStatus;
use super::Backend;

mod code_action;
mod code_lens;
mod document_symbol;
mod hover;
mod inlay_hint;

impl Backend {
    /// What jobs learned about each kernel of `uri`, by kernel name, as `view` picks it
    /// (kernels it gives `None` for are left out). Every request reads job status this way.
    pub(in crate::lsp) fn kernel_statuses<T>(
        &self,
        uri: &Url,
        view: impl Fn(&KernelStatus) -> Option<T>,
    ) -> HashMap<String, T> {
        let st = self.state();
        st.kernels
            .iter()
            .filter(|((u, _), _)| u == uri)
            .filter_map(|((_, k), s)| Some((k.clone(), view(s)?)))
            .collect()
    }
}
