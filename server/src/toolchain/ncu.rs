//! Nsight Compute (`ncu`), found and run on this machine for kernel profiles (issue #14):
//! `ncu` around `kernel-lsp bench FILE --kernel K` (the worker is a child process, so
//! `--target-processes all`), clocks left alone, the raw CSV page in a temporary log
//! file, parsed by [`crate::profile::parse_raw_csv`]. Used by `kernel-lsp profile`,
//! `optimize --profile` and the editor's Profile action; never on a timing path. The
//! server itself loads no CUDA library: ncu and the bench it runs are child processes.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::profile::Profile;

/// `ncu` from the setting, `KERNEL_LSP_NCU`, PATH, `CUDA_HOME`/`CUDA_PATH` or
/// `/usr/local/cuda`; None when there is none.
pub fn locate(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return p.is_file().then(|| p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("KERNEL_LSP_NCU") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for v in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = std::env::var_os(v) {
            dirs.push(PathBuf::from(root).join("bin"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/bin"));
    dirs.into_iter()
        .map(|d| d.join("ncu"))
        .find(|p| p.is_file())
}

/// The kernel name as ncu matches it: the whole name (Triton kernels keep theirs).
fn kernel_filter(kernel: &str) -> String {
    format!("regex:^{kernel}$")
}

/// Profile `kernel` of `file` (a file on disk, as written) with `ncu`; every profiled
/// launch, or why there is none.
pub fn profile_file(ncu: &Path, file: &Path, kernel: &str) -> Result<Vec<Profile>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let log = std::env::temp_dir().join(format!(
        "kernel-lsp-ncu-{}-{}.csv",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let out = Command::new(ncu)
        .args([
            "--target-processes",
            "all",
            "--clock-control",
            "none",
            "--csv",
            "--page",
            "raw",
            "--metrics",
            &crate::profile::metrics().join(","),
            "-k",
            &kernel_filter(kernel),
            "--launch-count",
            "6",
            "--log-file",
        ])
        .arg(&log)
        .arg(&exe)
        .arg("bench")
        .arg(file)
        .args(["--kernel", kernel])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", ncu.display()))?;
    let csv = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    let all = format!(
        "{csv}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    crate::profile::parse_raw_csv(&all)
}

/// Profile one version: its text goes to a hidden file next to FILE (so its includes
/// resolve the same way), which is removed after.
pub fn profile_text(
    ncu: &std::path::Path,
    file: &std::path::Path,
    kernel: &str,
    text: &str,
) -> Result<crate::profile::Profile, String> {
    let stem = file
        .file_stem()
        .map_or("kernel".into(), |n| n.to_string_lossy().to_string());
    // The extension picks the language.
    let ext = file
        .extension()
        .map_or("cu".into(), |e| e.to_string_lossy().to_string());
    let tmp = file.with_file_name(format!(
        ".{stem}.kernel-lsp-profile-{}.{ext}",
        std::process::id()
    ));
    std::fs::write(&tmp, text).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    let r = profile_file(ncu, &tmp, kernel);
    let _ = std::fs::remove_file(&tmp);
    let all = r?;
    crate::profile::pick(&all)
        .cloned()
        .ok_or_else(|| "ncu profiled no launch".to_string())
}
