//! `kernel-lsp.pinBaseline` and `.revert`: the kernel's baseline (what it is verified and
//! timed against by default) and its last verified version, kept in
//! `.kernel-lsp/<baseline|verified>/<file>/<kernel>.txt` next to the history.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tower_lsp::lsp_types::*;

use crate::optimize::history;

use super::{find_kernel, message, region, region_edit, Backend, Snapshot};

/// The `.kernel-lsp/<what>/<file>/<kernel>.txt` store next to the history.
fn store_path(file: &Path, what: &str, kernel: &str) -> PathBuf {
    history::workspace_root(file)
        .join(".kernel-lsp")
        .join(what)
        .join(history::relative(file))
        .join(format!("{kernel}.txt"))
}

pub(super) fn store(
    file: &Path,
    what: &str,
    kernel: &str,
    text: &str,
) -> std::result::Result<(), String> {
    let p = store_path(file, what, kernel);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    std::fs::write(&p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))
}

pub(super) fn load(file: &Path, what: &str, kernel: &str) -> Option<String> {
    std::fs::read_to_string(store_path(file, what, kernel)).ok()
}

impl Backend {
    pub(super) fn pin(&self, uri: &Url, snap: &Snapshot) -> std::result::Result<Value, String> {
        let name = &snap.kernel.name;
        let file = snap
            .file
            .as_ref()
            .ok_or("only files on disk can have a baseline (the history lives next to them)")?;
        store(file, "baseline", name, &snap.text)?;
        store(file, "verified", name, &snap.text[region(&snap.kernel)])?;
        let mut st = self.state();
        let k = st.kernels.entry((uri.clone(), name.clone())).or_default();
        k.failure = None;
        k.speedup = None;
        k.torch = None;
        Ok(message(
            "ok",
            format!("`{name}`: the current version is now the baseline it is verified and timed against"),
        ))
    }

    pub(super) async fn revert(
        &self,
        uri: &Url,
        snap: &Snapshot,
    ) -> std::result::Result<Value, String> {
        let name = &snap.kernel.name;
        let file = snap
            .file
            .as_ref()
            .ok_or("no history for a file that is not on disk")?;
        let saved = load(file, "verified", name)
            .or_else(|| {
                let base = load(file, "baseline", name)?;
                let (_, r) = find_kernel(snap.lang, &base, name)?;
                Some(base[r].to_string())
            })
            .ok_or_else(|| {
                format!("`{name}` has no verified version yet: run Benchmark or Optimize first")
            })?;
        let edit = {
            let st = self.state();
            let open = st.docs.get(uri).ok_or("the document was closed")?;
            let (_, r) = find_kernel(open.doc.lang, open.doc.text(), name)
                .ok_or_else(|| format!("`{name}` is no longer in the file"))?;
            if open.doc.text()[r.clone()] == saved {
                return Ok(message(
                    "ok",
                    format!("`{name}` is already the last verified version"),
                ));
            }
            region_edit(uri, &open.doc, &r, st.encoding, saved)
        };
        self.send_edit(edit).await?;
        let mut st = self.state();
        if let Some(k) = st.kernels.get_mut(&(uri.clone(), name.clone())) {
            k.failure = None;
        }
        Ok(message(
            "ok",
            format!("`{name}`: reverted to the last verified version"),
        ))
    }
}
