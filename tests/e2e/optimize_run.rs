//! What one `kernel-lsp optimize` run shows, on Triton's CPU interpreter: one number
//! for the run (the answer timed beside the start at the end of the run) in the CLI's
//! output, its `--json` and the report of its history; and `kernel-lsp apply`, which
//! writes a version of a recorded run with no new search.

use std::path::Path;
use std::process::{Command, Output};

use crate::bench_triton::{python, TUNABLE};
use crate::tools;

/// `kernel-lsp` with `args` (split at spaces) in `dir`, on the interpreter.
fn kernel_lsp(dir: &Path, py: &str, args: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
        .current_dir(dir)
        .args(args.split(' '))
        .env("KERNEL_LSP_DATA_DIR", dir.join("data"))
        .env("KERNEL_LSP_PYTHON", py)
        .env("TRITON_INTERPRET", "1")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fresh folder holding `add.py` (the tunable vector add).
fn project(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kernel-lsp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join(".git")).unwrap();
    std::fs::write(dir.join("add.py"), TUNABLE).unwrap();
    dir
}

#[test]
fn one_run_has_one_number_in_the_cli_the_json_and_the_report_and_apply_writes_it() {
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip("one_run_has_one_number", &why),
    };
    let dir = project("headline");
    // Two steps of the sweep alone: the second would time the values the first has
    // just timed, on the version the first made; the run stops instead.
    let args = "optimize add.py --steps 2 --only tunable_sweep --json --fresh-policy";
    let out = kernel_lsp(&dir, &py, args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let run: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let h = &run["headline"];
    let num = |k: &str| {
        h[k].as_f64()
            .unwrap_or_else(|| panic!("headline.{k}: {run}"))
    };
    assert_eq!(h["best_node"], 1, "64 → 1024 programs is faster: {run}");
    let steps = run["steps"].as_array().unwrap();
    assert_eq!(
        steps.len(),
        1,
        "the sweep is not repeated on its winner: {run}"
    );
    let stopped = run["stopped"].as_str().unwrap_or_default();
    assert!(stopped.contains("every applicable step was tried"), "{run}");
    assert_eq!(run["best_speedup"].as_f64(), Some(num("speedup")));
    assert!((num("speedup") - num("start_ms") / num("best_ms")).abs() < 1e-9);
    let line = format!(
        "best v1: {:.4} ms against the start's {:.4} ms, {:.2}× (timed side by side at the end of the run)",
        num("best_ms"),
        num("start_ms"),
        num("speedup")
    );
    assert!(
        stderr.contains(&format!("add_kernel: result: {line}")),
        "{stderr}"
    );

    let out = kernel_lsp(&dir, &py, "report add.py -o report.html");
    let trees = text(&out.stdout);
    assert!(out.status.success(), "{trees}\n{}", text(&out.stderr));
    assert!(trees.contains(&line), "the report's tree: {trees}");
    let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(page.contains(&line.replace('\'', "&#39;")), "{page}");
    let id = h["run"].as_u64().unwrap();
    assert!(
        stderr.contains(&format!(
            "write it with `kernel-lsp apply add.py --run {id}`"
        )),
        "{stderr}"
    );
    apply_writes_the_runs_versions_with_no_search(&dir, id);
    std::fs::remove_dir_all(&dir).ok();
}

/// `kernel-lsp apply` after that run: no worker (its Python does not exist), the same
/// history, the run's best written with a backup, any version of the run on request,
/// and never over text written since.
fn apply_writes_the_runs_versions_with_no_search(dir: &Path, id: u64) {
    let history = || {
        std::fs::read_to_string(dir.join(".kernel-lsp/history/add.py/add_kernel.jsonl")).unwrap()
    };
    let before = history();
    let file = dir.join("add.py");
    let apply = |args: &str| {
        let out = kernel_lsp(dir, "/nonexistent/python3", &format!("apply add.py{args}"));
        (out.status.success(), text(&out.stderr))
    };
    let (ok, err) = apply("");
    assert!(ok, "{err}");
    assert!(err.contains(&format!("applied v1 of run {id}")), "{err}");
    let now = std::fs::read_to_string(&file).unwrap();
    assert!(now.contains("BLOCK = 1024\n"), "{now}");
    assert_eq!(
        std::fs::read_to_string(dir.join("add.py.orig")).unwrap(),
        TUNABLE
    );
    assert_eq!(history(), before, "no new search, nothing recorded");
    let (ok, err) = apply("");
    assert!(ok && err.contains("already holds v1"), "{err}");
    let (ok, err) = apply(&format!(" --run {id} --version v0"));
    assert!(ok, "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), TUNABLE);
    std::fs::write(&file, TUNABLE.replace("m = offs < n", "m = (offs < n)")).unwrap();
    let (ok, err) = apply("");
    assert!(!ok && err.contains("changed since that run"), "{err}");
    let (ok, err) = apply(" --run 7");
    assert!(
        !ok && err.contains(&format!("has no run 7; its runs are {id} (")),
        "{err}"
    );
}
