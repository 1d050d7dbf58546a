//! `kernel-lsp bench` on Triton kernels, for real, on Triton's CPU interpreter: the
//! worker, the Python helper, verification against a reference and interleaved timing.

use std::process::Command;

use crate::tools;

/// A python3 that has torch and triton: KERNEL_LSP_PYTHON, else the active venv's.
pub(crate) fn python() -> Result<String, String> {
    let py = std::env::var("KERNEL_LSP_PYTHON")
        .ok()
        .or_else(|| {
            std::env::var("VIRTUAL_ENV")
                .ok()
                .map(|v| format!("{v}/bin/python3"))
        })
        .ok_or("no KERNEL_LSP_PYTHON or VIRTUAL_ENV with torch and triton (run tests/setup.sh)")?;
    let ok = Command::new(&py)
        .args(["-c", "import torch, triton"])
        .output()
        .map_err(|e| format!("{py}: {e}"))?;
    if !ok.status.success() {
        return Err(format!("{py} cannot import torch and triton"));
    }
    Ok(py)
}

pub(crate) const KERNELS: &str = r#"import triton
import triton.language as tl


# @bench n = 4096, 1000
# @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 1024
@triton.jit
def add_ref(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


# @bench n = 4096, 1000
# @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 256
# @bench reference = add_ref
@triton.jit
def add_new(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) OP tl.load(y_ptr + offs, mask=m), mask=m)
"#;

fn bench(py: &str, src: &str, name: &str) -> (i32, String, String) {
    let dir = std::env::temp_dir().join(format!("kernel-lsp-bench-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{name}.py"));
    std::fs::write(&file, src).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
        .arg("bench")
        .arg(&file)
        .env("KERNEL_LSP_PYTHON", py)
        .env("TRITON_INTERPRET", "1")
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The table row of `kernel` in `bench`'s output.
fn row_of<'o>(out: &'o str, kernel: &str) -> &'o str {
    out.lines()
        .find(|l| l.starts_with(kernel))
        .unwrap_or_else(|| panic!("no row for {kernel}: {out}"))
}

#[test]
fn bench_verifies_and_times_triton_kernels_on_the_interpreter() {
    let py = match python() {
        Ok(p) => p,
        Err(why) => {
            return tools::skip(
                "bench_verifies_and_times_triton_kernels_on_the_interpreter",
                &why,
            )
        }
    };
    let (code, out, err) = bench(&py, &KERNELS.replace("OP", "+"), "good");
    assert_eq!(code, 0, "{out}\n{err}");
    let row = row_of(&out, "add_new");
    assert!(row.contains("passed (2 cases × 3 trials)"), "{row}");
    assert!(
        row.contains("× vs add_ref"),
        "a side-by-side speedup: {row}"
    );
    assert!(out.contains("note: interpreter timings"), "{out}");
}

/// `reference = R` runs R on the kernel's inputs (issue #33): the kernel's spec draws
/// `x_ptr ~ normal(0, 100)` and `y_ptr` from 5 upward, R's own spec the defaults. On R's
/// own inputs the outputs differ (values near 1 against values near 100), so this fails
/// unless both run on the kernel's data; R keeps its own BLOCK.
#[test]
fn a_reference_kernel_runs_on_the_inputs_of_the_kernel_under_test() {
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip("a_reference_kernel_runs_on_the_inputs", &why),
    };
    let src = KERNELS.replace("OP", "+").replace(
        "# @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]\n# @bench grid = cdiv(n, BLOCK); BLOCK = 256",
        "# @bench x_ptr: in f32[n] ~ normal(0, 100); y_ptr: in f32[n] ~ uniform(5, 9); out_ptr: out f32[n]\n# @bench grid = cdiv(n, BLOCK); BLOCK = 256",
    );
    assert!(src.contains("normal(0, 100)"), "the spec line moved");
    let (code, out, err) = bench(&py, &src, "refinputs");
    assert_eq!(code, 0, "{out}\n{err}");
    let row = row_of(&out, "add_new");
    assert!(row.contains("passed (2 cases × 3 trials)"), "{row}");
}

#[test]
fn bench_reports_a_wrong_triton_kernel_with_buffer_index_and_seed() {
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip("bench_reports_a_wrong_triton_kernel", &why),
    };
    let (code, out, err) = bench(&py, &KERNELS.replace("OP", "-"), "bad");
    assert_eq!(code, 1, "{out}\n{err}");
    let all = format!("{out}\n{err}");
    assert!(
        all.contains("out_ptr[0]"),
        "names the buffer and first bad index: {all}"
    );
    assert!(all.contains("seed"), "names the seed: {all}");
}

/// Kernels without a reference, in different styles: one clean, one whose store has no
/// mask (it writes past the end when n is not a multiple of the block), one that writes
/// into its `in` buffer, one whose spec leaves its constexprs to their defaults (`None`
/// among them), and an autotuned one whose spec leaves BLOCK to its first config (the
/// worker runs that config, not the autotuner's search) and EVEN to its
/// `@triton.heuristics`.
const UNREFERENCED: &str = r#"import triton
import triton.language as tl


# @bench N = 8192, 1000
# @bench X: in f32[N]; Y: out f32[N]
# @bench grid = (cdiv(N, BLOCK_SIZE),); BLOCK_SIZE = 256
@triton.jit
def gelu_fwd(X, Y, N, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    x = tl.load(X + offsets, mask=mask)
    tl.store(Y + offsets, 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476)), mask=mask)


# @bench n = 1000
# @bench a: in f32[n]; b: out f32[n]
# @bench grid = cdiv(n, 128); BLOCK = 128
@triton.jit
def copy_nomask(a, b, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(b + i, tl.load(a + i, mask=i < n, other=0.0))


# @bench n = 2048, 777
# @bench x: in f32[n]; y: out f32[n]
# @bench grid = cdiv(n, 256); BLOCK = 256
@triton.jit
def scale_inplace(x, y, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    v = tl.load(x + i, mask=m) * 2.0
    tl.store(x + i, v, mask=m)
    tl.store(y + i, v, mask=m)


# @bench n = 4096, 1001
# @bench x: in f32[n]; y: out f32[n]
# @bench grid = cdiv(n, BLOCK)
@triton.jit
def scale_defaults(x, y, n, alpha: tl.constexpr = 2.0, BLOCK: tl.constexpr = 512, ACT: tl.constexpr = None):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    v = tl.load(x + i, mask=m) * alpha
    if ACT is not None:
        v = tl.maximum(v, 0.0)
    tl.store(y + i, v, mask=m)


# @bench n_elements = 4096, 513
# @bench in_ptr: in f32[n_elements]; out_ptr: out f32[n_elements]
# @bench grid = cdiv(n_elements, BLOCK)
@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 1024}, num_warps=8),
    ],
    key=["n_elements"],
)
@triton.heuristics({"EVEN": lambda args: args["n_elements"] % args["BLOCK"] == 0})
@triton.jit
def relu_autotuned(in_ptr, out_ptr, n_elements, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offs, tl.maximum(tl.load(in_ptr + offs), 0.0))
    else:
        m = offs < n_elements
        tl.store(out_ptr + offs, tl.maximum(tl.load(in_ptr + offs, mask=m), 0.0), mask=m)
"#;

#[test]
fn bench_checks_a_kernel_without_reference_against_itself() {
    let py = match python() {
        Ok(p) => p,
        Err(why) => {
            return tools::skip(
                "bench_checks_a_kernel_without_reference_against_itself",
                &why,
            )
        }
    };
    let (code, out, err) = bench(&py, UNREFERENCED, "unreferenced");
    assert_eq!(code, 1, "a kernel failed its own check: {out}\n{err}");
    let row = |k: &str| {
        out.lines()
            .find(|l| l.starts_with(k))
            .unwrap_or_else(|| panic!("no row for {k}: {out}\n{err}"))
            .to_string()
    };
    let clean = row("gelu_fwd");
    assert!(
        clean.contains("self-check passed (2 cases × 3 trials; no reference to compare with)"),
        "{clean}"
    );
    assert!(
        clean.contains(" ms") || clean.contains('±'),
        "timed: {clean}"
    );
    let oob = row("copy_nomask");
    assert!(
        oob.contains("FAILED its own check")
            && oob.contains("out-of-bounds write past the end of `b`")
            && oob.contains("b[1000]"),
        "{oob}"
    );
    assert!(
        !oob.contains("reference copy_nomask"),
        "its own failure, not a reference's: {oob}"
    );
    assert!(oob.contains("seed 0x"), "names the seed: {oob}");
    let written = row("scale_inplace");
    assert!(
        written.contains("FAILED its own check")
            && written.contains("wrote into the input buffer `x`"),
        "{written}"
    );
    let defaults = row("scale_defaults");
    assert!(
        defaults.contains("self-check passed (2 cases × 3 trials"),
        "{defaults}\n{out}"
    );
    let tuned = row("relu_autotuned");
    assert!(
        tuned.contains("self-check passed (2 cases × 3 trials"),
        "{tuned}\n{out}"
    );
    assert!(err.contains("checking it against itself"), "{err}");
}

pub(crate) const TUNABLE: &str = r#"import triton
import triton.language as tl


# @bench n = 4096, 1000
# @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 64
# @bench tune BLOCK in [64, 1024]
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)
"#;

fn optimize(
    py: &str,
    dir: &std::path::Path,
    src: &str,
    extra: &[&str],
) -> (i32, String, String, String) {
    std::fs::create_dir_all(dir).unwrap();
    let file = dir.join("add.py");
    std::fs::write(&file, src).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
        .current_dir(dir)
        .args(["optimize", "add.py", "--steps", "1", "--json"])
        .args(["--only", "tunable_sweep"])
        .args(extra)
        .env("KERNEL_LSP_DATA_DIR", dir.join("data"))
        .env("KERNEL_LSP_PYTHON", py)
        .env("TRITON_INTERPRET", "1")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        std::fs::read_to_string(&file).unwrap(),
    )
}

#[test]
fn optimize_sweeps_a_tunable_verifies_and_applies_the_winner_with_history() {
    let py = match python() {
        Ok(p) => p,
        Err(why) => {
            return tools::skip(
                "optimize_sweeps_a_tunable_verifies_and_applies_the_winner_with_history",
                &why,
            )
        }
    };
    let dir = std::env::temp_dir().join(format!("kernel-lsp-opt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);

    // Without --apply the file is untouched.
    let (code, out, err, after) = optimize(&py, &dir, TUNABLE, &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(after, TUNABLE);
    let run: serde_json::Value = serde_json::from_str(&out).unwrap();
    let step = &run["steps"][0];
    assert_eq!(step["strategy_id"], "tunable_sweep");
    assert_eq!(step["candidates"][0]["label"], "BLOCK=1024");
    assert_eq!(step["candidates"][0]["verified"], true, "{step}");
    assert_eq!(
        run["steps"].as_array().unwrap().len(),
        1,
        "--steps 1: {run}"
    );

    // With --apply: the accepted value is written into the spec line, with a backup.
    let (code, out, err, after) = optimize(&py, &dir, TUNABLE, &["--apply"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let run: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        run["steps"][0]["outcome"], "accepted",
        "64 → 1024 programs: {run}"
    );
    assert!(
        after.contains("# @bench grid = cdiv(n, BLOCK); BLOCK = 1024\n"),
        "{after}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("add.py.orig")).unwrap(),
        TUNABLE
    );
    assert!(err.contains("applied tunable_sweep (BLOCK=1024)"), "{err}");
    assert!(
        dir.join(".kernel-lsp/policy.json").exists(),
        "the project's policy learned from the step"
    );
    assert!(
        !dir.join("data/policy.json").exists(),
        "the user-level policy is used only on request"
    );
    let history =
        std::fs::read_to_string(dir.join(".kernel-lsp/history/add.py/add_kernel.jsonl")).unwrap();
    let count = |key: &str| history.lines().filter(|l| l.starts_with(key)).count();
    assert_eq!(
        (count("{\"step\":"), count("{\"headline\":")),
        (2, 2),
        "one line per step and one per run's end, both runs: {history}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn optimize_rejects_a_value_that_breaks_the_kernel() {
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip("optimize_rejects_a_value_that_breaks_the_kernel", &why),
    };
    // No mask: any BLOCK that does not divide n writes out of bounds.
    let src = TUNABLE
        .replace("tune BLOCK in [64, 1024]", "tune BLOCK in [64, 3000]")
        .replace("n = 4096, 1000", "n = 4096")
        .replace(
            ", mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)",
            ") + tl.load(y_ptr + offs))",
        );
    let dir = std::env::temp_dir().join(format!("kernel-lsp-opt-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (code, out, err, after) = optimize(&py, &dir, &src, &["--apply"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let run: serde_json::Value = serde_json::from_str(&out).unwrap();
    let c = &run["steps"][0]["candidates"][0];
    assert_eq!(c["label"], "BLOCK=3000");
    assert_eq!(c["verified"], false, "{c}");
    assert_eq!(run["steps"][0]["outcome"], "failed");
    assert_eq!(after, src, "nothing unverified reaches the file");
    std::fs::remove_dir_all(&dir).ok();
}
