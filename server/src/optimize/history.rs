//! Every optimization step, appended as a JSON line to the kernel's history under
//! `.kernel-lsp/` at the workspace root (the nearest folder above the file holding
//! `.git`, else the file's folder), under the file's path from that root, so a run can be audited, replayed and reverted.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::apply::RunEnd;
use super::headline::Headline;
use super::record::StepRecord;

/// `sha256:` and the first 16 hex digits of the text's SHA-256.
pub fn hash(text: &str) -> String {
    let d = Sha256::digest(text.as_bytes());
    let hex: String = d.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

pub fn workspace_root(file: &Path) -> PathBuf {
    crate::toolchain::project::workspace_root(file)
}

/// The file's path relative to the workspace root (its name when it is not under it),
/// so two `kernel.cu` in different folders keep separate histories.
pub fn relative(file: &Path) -> PathBuf {
    let name = || {
        file.file_name()
            .map_or_else(|| PathBuf::from("file"), PathBuf::from)
    };
    let root = workspace_root(file);
    let abs = match file.canonicalize() {
        Ok(a) => a,
        Err(_) => return name(),
    };
    match abs.strip_prefix(&root) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_path_buf(),
        _ => name(),
    }
}

/// `.kernel-lsp/history/<file path from the workspace root>/<kernel>.jsonl`.
pub fn path_for(file: &Path, kernel: &str) -> PathBuf {
    workspace_root(file)
        .join(".kernel-lsp")
        .join("history")
        .join(relative(file))
        .join(format!("{kernel}.jsonl"))
}

pub fn append(file: &Path, kernel: &str, steps: &[StepRecord]) -> Result<PathBuf, String> {
    let lines = steps
        .iter()
        .map(serde_json::to_string)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    append_lines(file, kernel, &lines)
}

fn append_lines(file: &Path, kernel: &str, lines: &[String]) -> Result<PathBuf, String> {
    let path = path_for(file, kernel);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    for line in lines {
        writeln!(f, "{line}").map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(path)
}

/// Appends what a run left besides its steps (read back by [`run_ends`]).
pub fn append_run_end(file: &Path, kernel: &str, end: &RunEnd) -> Result<PathBuf, String> {
    let line = serde_json::to_string(end).map_err(|e| e.to_string())?;
    append_lines(file, kernel, &[line])
}

/// The ends of the runs recorded for `kernel` of `file`, oldest first.
pub fn run_ends(file: &Path, kernel: &str) -> Vec<RunEnd> {
    let text = std::fs::read_to_string(path_for(file, kernel)).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<RunEnd>(l).ok())
        .collect()
}

/// The end-of-run timings recorded for `kernel` of `file`, oldest first.
pub fn headlines(file: &Path, kernel: &str) -> Vec<Headline> {
    run_ends(file, kernel)
        .into_iter()
        .map(|e| e.headline)
        .collect()
}

/// The steps recorded for `kernel` of `file`, oldest first. A missing history is empty;
/// a line that does not parse is skipped and counted in the second value.
pub fn read(file: &Path, kernel: &str) -> Result<(Vec<StepRecord>, usize), String> {
    let path = path_for(file, kernel);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let mut steps = Vec::new();
    let mut bad = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<StepRecord>(line) {
            Ok(s) => steps.push(s),
            Err(_) if serde_json::from_str::<RunEnd>(line).is_ok() => {}
            Err(_) => bad += 1,
        }
    }
    Ok((steps, bad))
}

/// Kernels of `file` that have a history, sorted by name.
pub fn kernels(file: &Path) -> Vec<String> {
    let Some(dir) = path_for(file, "x").parent().map(Path::to_path_buf) else {
        return Vec::new();
    };
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.strip_suffix(".jsonl").map(str::to_string)
        })
        .collect();
    out.sort();
    out
}

/// `(strategy id, kernel hash)` of every step that did not win: the step loop never
/// repeats one of these on the same kernel text.
pub fn tried(steps: &[StepRecord]) -> std::collections::BTreeSet<(String, String)> {
    steps
        .iter()
        .filter(|s| {
            s.outcome != super::record::Outcome::Accepted
                && !s.cancelled
                && !s.kernel_hash.is_empty()
        })
        .map(|s| (s.strategy_id.clone(), s.kernel_hash.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_of_the_same_name_in_different_folders_keep_separate_histories() {
        let root = std::env::temp_dir().join(format!("kernel-lsp-hist-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in [".git", "a", "b"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let (a, b) = (root.join("a/k.cu"), root.join("b/k.cu"));
        std::fs::write(&a, "").unwrap();
        std::fs::write(&b, "").unwrap();
        let root = root.canonicalize().unwrap();
        assert_eq!(
            path_for(&a, "k"),
            root.join(".kernel-lsp/history/a/k.cu/k.jsonl")
        );
        assert_eq!(
            path_for(&b, "k"),
            root.join(".kernel-lsp/history/b/k.cu/k.jsonl")
        );
        std::fs::remove_dir_all(&root).ok();
    }
}
