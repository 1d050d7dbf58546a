//! Writing a recorded version back, with no new search: the engine behind `kernel-lsp
//! apply` and the editor's "Apply best". A run leaves a [`RunEnd`] in the kernel's
//! history: its one number and the region (spec lines through the kernel unit) of every
//! version it made. [`version_text`] puts one of those regions in place of the kernel's
//! region in the file as it is now, but only when the kernel there is still a version of
//! that run (its start or one it made): text written since is never overwritten. Pure:
//! text and records in, text out.

use serde::{Deserialize, Serialize};

use super::headline::Headline;
use crate::document::Document;
use crate::syntax::{self, Kernel, Lang};

/// One version of a run as the history keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedVersion {
    /// Its id in the run's tree (0: the start).
    pub node: usize,
    /// Hash of its spec lines and unit text (`evaluate::kernel_text`).
    pub kernel_hash: String,
    /// The file's text from the kernel's first spec line to the end of its unit.
    pub region: String,
}

/// What a finished run leaves in the history besides its steps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunEnd {
    pub headline: Headline,
    /// Every version of the run's tree, the start first.
    #[serde(default)]
    pub versions: Vec<RecordedVersion>,
}

/// The bytes of `k` an edit of the kernel covers: its spec lines through its unit.
pub fn kernel_region(k: &Kernel) -> std::ops::Range<usize> {
    let mut start = k.def_range.start;
    let mut end = k.def_range.end;
    for r in &k.unit_ranges {
        start = start.min(r.start);
        end = end.max(r.end);
    }
    if let Some(s) = &k.spec.range {
        start = start.min(s.start);
    }
    start..end
}

/// The kernel `name` of `text`, with its region and its kernel hash.
fn located(lang: Lang, text: &str, name: &str) -> Option<(std::ops::Range<usize>, String)> {
    let doc = Document::new(lang, 0, text);
    let model = syntax::analyze(lang, text, doc.tree()?);
    let k = model.kernel(name)?;
    let hash = super::history::hash(&super::evaluate::kernel_text(text, k));
    Some((kernel_region(k), hash))
}

/// The recorded form of version `node` of `text` (None when the kernel is not found).
pub fn record_version(lang: Lang, text: &str, name: &str, node: usize) -> Option<RecordedVersion> {
    let (r, kernel_hash) = located(lang, text, name)?;
    Some(RecordedVersion {
        node,
        kernel_hash,
        region: text[r].to_string(),
    })
}

/// `text` with version `node` of `run` in place of kernel `name`. `Ok(None)`: the file
/// already holds that version. `Err`: why nothing can be written.
pub fn version_text(
    lang: Lang,
    text: &str,
    name: &str,
    run: &RunEnd,
    node: usize,
) -> Result<Option<String>, String> {
    let Some((r, region)) = version_edit(lang, text, name, run, node)? else {
        return Ok(None);
    };
    let mut out = String::with_capacity(text.len() + region.len());
    out.push_str(&text[..r.start]);
    out.push_str(&region);
    out.push_str(&text[r.end..]);
    Ok(Some(out))
}

/// The edit that puts version `node` of `run` in place of kernel `name` of `text`: the
/// kernel's region now and the version's region. `Ok(None)`: nothing to change.
pub fn version_edit(
    lang: Lang,
    text: &str,
    name: &str,
    run: &RunEnd,
    node: usize,
) -> Result<Option<(std::ops::Range<usize>, String)>, String> {
    let ids: Vec<String> = run
        .versions
        .iter()
        .map(|v| format!("v{}", v.node))
        .collect();
    let target = run
        .versions
        .iter()
        .find(|v| v.node == node)
        .ok_or_else(|| {
            format!(
                "the run has no v{node}; its versions are {}",
                ids.join(", ")
            )
        })?;
    let (r, now) = located(lang, text, name)
        .ok_or_else(|| format!("`{name}` is no longer in the file; nothing was written"))?;
    if now == target.kernel_hash {
        return Ok(None);
    }
    if !run.versions.iter().any(|v| v.kernel_hash == now) {
        return Err(format!(
            "`{name}` changed since that run (it is neither its start nor one of its versions); nothing was written"
        ));
    }
    Ok(Some((r, target.region.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: &str = "import triton\n\n# @bench n = 64\n# @bench x: out f32[n]\n# @bench grid = cdiv(n, BLOCK); BLOCK = 16\n@triton.jit\ndef k(x, n, BLOCK: tl.constexpr):\n    pass\n\n\ndef host():\n    pass\n";

    fn run_of(texts: &[&str]) -> RunEnd {
        RunEnd {
            headline: Headline::from_times(1, texts.len() - 1, 2.0, 1.0),
            versions: texts
                .iter()
                .enumerate()
                .map(|(i, t)| record_version(Lang::Triton, t, "k", i).unwrap())
                .collect(),
        }
    }

    #[test]
    fn a_version_replaces_the_kernel_region_only() {
        let v1 = START.replace("BLOCK = 16", "BLOCK = 32");
        let run = run_of(&[START, &v1]);
        assert_eq!(
            run.versions[1].region.lines().next(),
            Some("# @bench n = 64")
        );
        // The author added code below the kernel since: it stays.
        let now = format!("{START}\nX = 1\n");
        let out = version_text(Lang::Triton, &now, "k", &run, 1)
            .unwrap()
            .unwrap();
        assert_eq!(out, format!("{v1}\nX = 1\n"));
        assert_eq!(version_text(Lang::Triton, &v1, "k", &run, 1), Ok(None));
        // Back to the start from the applied version.
        let back = version_text(Lang::Triton, &v1, "k", &run, 0)
            .unwrap()
            .unwrap();
        assert_eq!(back, START);
    }

    #[test]
    fn newer_text_is_never_overwritten() {
        let v1 = START.replace("BLOCK = 16", "BLOCK = 32");
        let run = run_of(&[START, &v1]);
        let edited = START.replace("    pass\n\n\ndef", "    x = 1\n\n\ndef");
        let e = version_text(Lang::Triton, &edited, "k", &run, 1).unwrap_err();
        assert!(e.contains("`k` changed since that run"), "{e}");
        let e = version_text(Lang::Triton, START, "k", &run, 5).unwrap_err();
        assert_eq!(e, "the run has no v5; its versions are v0, v1");
    }
}
