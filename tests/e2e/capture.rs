//! `kernel-lsp capture` for real, on Triton's CPU interpreter (issue #32): the command runs
//! with the hook, specs are written above the kernels, and `check` and `bench` take them.
//! Three public projects (vendored under tests/fixtures/capture/, with their licenses) and
//! kernels of our own in several launch styles, including three that must be refused.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::bench_triton::python;
use crate::tools;

fn kernel_lsp() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// The fixture project copied to a fresh folder (capture writes into it).
fn project(name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/capture")
        .join(name);
    let dir =
        std::env::temp_dir().join(format!("kernel-lsp-capture-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(&src, &dir);
    dir
}

/// PYTHONPATH with the project first, so its package imports (and the worker's imports
/// of its kernel files) resolve.
fn python_path(dir: &Path) -> String {
    match std::env::var("PYTHONPATH") {
        Ok(p) if !p.is_empty() => format!("{}:{p}", dir.display()),
        _ => dir.display().to_string(),
    }
}

struct Captured {
    rows: Vec<serde_json::Value>,
    stderr: String,
}

fn capture(py: &str, dir: &Path, script: &str) -> Captured {
    let out = kernel_lsp()
        .args(["capture", "--apply", "--json", "--", py, script, "--cpu"])
        .current_dir(dir)
        .env("TRITON_INTERPRET", "1")
        .env("PYTHONPATH", python_path(dir))
        .output()
        .unwrap();
    let (code, stdout, stderr) = tools::outcome(out);
    assert_eq!(code, 0, "capture failed:\n{stdout}\n{stderr}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    Captured { rows, stderr }
}

/// `bench --json` on every file capture wrote: kernel name -> status.
fn bench_written(py: &str, dir: &Path, rows: &[serde_json::Value]) -> Vec<(String, String)> {
    let mut files: Vec<&str> = rows
        .iter()
        .filter(|r| r["written"] == true)
        .filter_map(|r| r["file"].as_str())
        .collect();
    files.sort();
    files.dedup();
    let mut out = Vec::new();
    for f in files {
        let check = kernel_lsp().arg("check").arg(f).output().unwrap();
        let (code, stdout, stderr) = tools::outcome(check);
        assert_eq!(code, 0, "check {f}:\n{stdout}\n{stderr}");
        let run = kernel_lsp()
            .args(["bench", "--json"])
            .arg(f)
            .current_dir(dir)
            .env("TRITON_INTERPRET", "1")
            .env("KERNEL_LSP_PYTHON", py)
            .env("PYTHONPATH", python_path(dir))
            .output()
            .unwrap();
        let (_, stdout, stderr) = tools::outcome(run);
        let report: serde_json::Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("bench {f}: {e}\n{stdout}\n{stderr}"));
        for k in report["kernels"].as_array().unwrap() {
            let status = k["status"].as_str().unwrap_or("?").to_string();
            if status != "no_spec" {
                out.push((k["kernel"].as_str().unwrap().to_string(), status));
            }
        }
    }
    out
}

fn row<'a>(rows: &'a [serde_json::Value], kernel: &str) -> &'a serde_json::Value {
    rows.iter()
        .find(|r| r["kernel"] == kernel)
        .unwrap_or_else(|| panic!("no row for `{kernel}` in {rows:#?}"))
}

fn spec_of(r: &serde_json::Value) -> Vec<String> {
    r["spec"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn own_kernels_in_several_styles_and_the_ones_it_refuses() {
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip("capture own kernels", &why),
    };
    let dir = project("own");
    let c = capture(&py, &dir, "run_own.py");
    let rows = &c.rows;
    // What a user reads: sizes named after the arguments, the grid as cdiv of a size by the
    // block, the odd case, roles from what the launch wrote, refusals with their reason.
    let scale = spec_of(row(rows, "scale_add"));
    assert!(
        scale.contains(&"n = 4096, 1000, 4095".to_string()),
        "{scale:?}"
    );
    assert!(
        scale.contains(&"grid = cdiv(n, BLOCK)".to_string()),
        "{scale:?}"
    );
    assert!(
        scale.contains(&"out_ptr: out f32[n]".to_string()),
        "{scale:?}"
    );
    let rows_sum = spec_of(row(rows, "row_sum"));
    assert!(
        rows_sum.contains(&"stride_row = cols".to_string()),
        "{rows_sum:?}"
    );
    assert!(spec_of(row(rows, "relu_inplace"))
        .iter()
        .any(|l| l.starts_with("x_ptr: inout f32[n]")));
    assert!(spec_of(row(rows, "add_bias")).contains(&"b_ptr = None".to_string()));
    assert!(!spec_of(row(rows, "copy_maybe_even"))
        .iter()
        .any(|l| l.starts_with("EVEN")));
    let refused = |k: &str| row(rows, k)["refused"].as_str().unwrap_or("").to_string();
    assert!(
        refused("shift_copy").contains("share memory"),
        "{}",
        refused("shift_copy")
    );
    assert!(
        refused("count_calls").contains("state outside its arguments"),
        "{}",
        refused("count_calls")
    );
    let benched = bench_written(&py, &dir, rows);
    let failed: Vec<_> = benched.iter().filter(|(_, s)| s != "ok").collect();
    assert!(failed.is_empty(), "{failed:?}\n{}", c.stderr);
    assert_eq!(benched.len(), 6, "{benched:?}");
    // The program itself ran to the end, unchanged by the capture.
    assert!(!c.stderr.contains("WRONG"), "{}", c.stderr);
}

/// The lines a project script prints per op (`ok NAME`, `FAILED NAME ...`), in order.
fn outcome_lines(output: &str) -> Vec<String> {
    output
        .lines()
        .filter(|l| l.starts_with("ok ") || l.starts_with("FAILED "))
        .map(str::to_string)
        .collect()
}

/// One project: capture its script, check and bench what was written; (launched kernels,
/// verified kernels, table lines).
fn run_project(py: &str, name: &str, script: &str) -> (usize, usize, Vec<String>) {
    let dir = project(name);
    let c = capture(py, &dir, script);
    // The program does under capture what it does without: the same ops pass and fail.
    let alone = Command::new(py)
        .args([script, "--cpu"])
        .current_dir(&dir)
        .env("TRITON_INTERPRET", "1")
        .env("PYTHONPATH", python_path(&dir))
        .output()
        .unwrap();
    let (_, alone_out, _) = tools::outcome(alone);
    assert_eq!(
        outcome_lines(&c.stderr),
        outcome_lines(&alone_out),
        "{name}: the program behaved differently under capture"
    );
    let benched = bench_written(py, &dir, &c.rows);
    let mut lines = Vec::new();
    for r in &c.rows {
        let k = r["kernel"].as_str().unwrap();
        let file = r["file"].as_str().unwrap();
        let status = match (r["refused"].as_str(), benched.iter().find(|(b, _)| b == k)) {
            (Some(why), _) => format!("refused: {why}"),
            (None, Some((_, s))) => s.clone(),
            (None, None) => "not written".into(),
        };
        lines.push(format!("{name}\t{file}\t{k}\t{status}"));
    }
    let ok = lines.iter().filter(|l| l.ends_with("\tok")).count();
    (c.rows.len(), ok, lines)
}

#[test]
fn three_public_projects_on_the_cpu_interpreter() {
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip("capture projects", &why),
    };
    // The vendored projects' own requirements (tests/setup.sh installs them).
    let deps = Command::new(&py)
        .args(["-c", "import packaging, einops"])
        .env(
            "PYTHONPATH",
            std::env::var("PYTHONPATH").unwrap_or_default(),
        )
        .output()
        .unwrap();
    if !deps.status.success() {
        return tools::skip(
            "capture projects",
            &format!("{py} lacks packaging or einops, which mamba-ssm and liger-kernel import (run tests/setup.sh)"),
        );
    }
    let projects = [
        ("liger", "run_liger.py"),
        ("lightning_attn", "run_lightning_attn.py"),
        ("mamba", "run_mamba.py"),
    ];
    // The projects are independent (each in its own folder, its own processes): run side
    // by side, reported in order.
    let py = py.as_str();
    let results: Vec<(usize, usize, Vec<String>)> = std::thread::scope(|s| {
        let runs: Vec<_> = projects
            .iter()
            .map(|&(name, script)| s.spawn(move || run_project(py, name, script)))
            .collect();
        runs.into_iter()
            .map(|r| r.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let (mut launched, mut verified) = (0, 0);
    for ((name, _), (n, ok, lines)) in projects.iter().zip(results) {
        eprintln!("{name}: {ok} of {n} kernels verified\n{}", lines.join("\n"));
        assert!(n >= 5, "{name}: only {n} kernels launched");
        launched += n;
        verified += ok;
    }
    eprintln!("all: {verified} of {launched} kernels verified");
    assert!(
        verified * 10 >= launched * 8,
        "{verified} of {launched} verified: below 80%"
    );
}

fn cc(args: &[&str], dir: &Path) {
    let o = Command::new("cc")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// CUDA capture through the whole CLI on the CPU: a C program launches "kernels" through
/// a stand-in `libcudart.so` (tests/fixtures/capture_cuda); `capture --apply` finds the
/// kernels of the folder's `.cu` source, compiles and preloads the shim, and writes each
/// spec above its kernel, which `check` accepts; the kernel the sources lack gets none.
#[test]
fn cuda_launches_through_the_shim_become_specs_in_the_cu_source() {
    if Command::new("cc").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no C compiler (`cc`): the CUDA capture shim cannot be built");
        return;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/capture_cuda");
    let dir = std::env::temp_dir().join(format!("kernel-lsp-capture-cuda-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(&src, &dir);
    cc(
        &["-shared", "-fPIC", "-o", "libcudart.so", "fake_cudart.c"],
        &dir,
    );
    cc(
        &[
            "-o",
            "prog",
            "prog.c",
            "-L.",
            "-lcudart",
            "-Wl,-rpath,$ORIGIN",
        ],
        &dir,
    );
    let out = kernel_lsp()
        .args(["capture", "--apply", "--json", "--", "./prog"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let (code, stdout, stderr) = tools::outcome(out);
    assert_eq!(code, 0, "capture failed:\n{stdout}\n{stderr}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        rows.len(),
        2,
        "saxpy and fill, not the kernel the sources lack: {rows:#?}"
    );
    for k in ["saxpy", "fill"] {
        assert_eq!(row(&rows, k)["written"], true, "{rows:#?}");
    }
    assert_eq!(row(&rows, "saxpy")["launches"], 3);
    let fill = row(&rows, "fill");
    assert_eq!(fill["launches"], 2);
    assert!(
        fill["notes"]
            .to_string()
            .contains("while a CUDA graph was being captured"),
        "{fill:#}"
    );
    let text = std::fs::read_to_string(dir.join("kernels.cu")).unwrap();
    assert!(
        text.contains(
            "// @bench n = 1000, 600, 999\n// @bench a = 2.0\n// @bench x: in f32[n] ~ uniform(1.000, 3.000)\n\
             // @bench y: inout f32[n] ~ uniform(-599.0, 999.0)\n// @bench grid = cdiv(n, 128)\n// @bench block = 128\n\
             extern \"C\" __global__ void saxpy("
        ),
        "{text}"
    );
    assert!(
        text.contains("// @bench out: out f32[rows, cols]\n"),
        "{text}"
    );
    let check = kernel_lsp()
        .arg("check")
        .arg(dir.join("kernels.cu"))
        .output()
        .unwrap();
    let (code, stdout, stderr) = tools::outcome(check);
    assert_eq!(code, 0, "check kernels.cu:\n{stdout}\n{stderr}\n{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
