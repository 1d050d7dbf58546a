//! `kernel-lsp.profile`: the kernel as it is in the editor under Nsight Compute (a child
//! `ncu` around `kernel-lsp bench`; the server loads no CUDA library); the diagnosis goes
//! to the hover and a code lens.

use serde_json::Value;
use tower_lsp::lsp_types::*;

use crate::syntax::Lang;

use super::{message, region, status_for, Backend, Snapshot};

/// Whether this machine has Nsight Compute (looked up once per server).
pub(in crate::lsp) fn ncu_present() -> bool {
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PRESENT.get_or_init(|| crate::toolchain::ncu::locate(None).is_some())
}

impl Backend {
    /// Profile the kernel as it is in the editor with Nsight Compute (a child `ncu`
    /// around `kernel-lsp bench`; the server loads no CUDA library): the diagnosis goes
    /// to the hover and a code lens.
    pub(super) async fn profile_job(
        &self,
        uri: &Url,
        snap: Snapshot,
        token: Option<NumberOrString>,
    ) -> std::result::Result<Value, String> {
        let name = snap.kernel.name.clone();
        let Some(ncu) = crate::toolchain::ncu::locate(None) else {
            return Ok(message(
                "failed",
                "Nsight Compute (`ncu`) was not found on this machine, so no profile: install it with the CUDA toolkit, put ncu on PATH, or set KERNEL_LSP_NCU (`kernel-lsp health` checks it)",
            ));
        };
        let (guard, reporter) = self
            .start_job(uri, &name, format!("Profile {name}"), token)
            .await?;
        reporter
            .report("running the kernel under Nsight Compute (about 10 s)")
            .await;
        let region_text = snap.text[region(&snap.kernel)].to_string();
        // The text as it is in the editor, next to the file so its includes resolve.
        let file = snap.file.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(match snap.lang {
                Lang::Cuda => "kernel.cu",
                Lang::Triton => "kernel.py",
            })
        });
        let (text, kernel) = (snap.text.clone(), name.clone());
        let got = tokio::task::spawn_blocking(move || {
            crate::toolchain::ncu::profile_text(&ncu, &file, &kernel, &text)
        })
        .await
        .map_err(|e| format!("the profiler task failed: {e}"))?;
        drop(guard);
        match got {
            Ok(p) => {
                let text = format!("`{name}`: {}", p.diagnosis());
                {
                    let mut st = self.state();
                    if let Some(k) = status_for(&mut st, uri, &snap) {
                        k.profile = Some((p, region_text));
                    }
                }
                reporter.end(&text).await;
                Ok(message("profiled", text))
            }
            Err(e) => {
                let text = format!("`{name}` was not profiled: {e}");
                reporter.end(&text).await;
                Ok(message("failed", text))
            }
        }
    }
}
