//! `reference = torch: ...` (issue #17), for real: `kernel-lsp bench` verifies Triton
//! kernels against a PyTorch expression and a function of a module next to the kernel,
//! on Triton's CPU interpreter with torch on the CPU, and times them against PyTorch
//! eager; `kernel-lsp check` puts every spec error on its line.

use std::path::Path;
use std::process::Command;

use crate::bench_triton::python;
use crate::tools;

/// A row-wise softmax over `rows × cols`; `BUG` is replaced to make it wrong on row 3.
const SOFTMAX: &str = r#"import triton
import triton.language as tl


# @bench rows = 64, 5; cols = 100
# @bench x_ptr: in f32[rows, cols] ~ normal(0, 3); out_ptr: out f32[rows, cols]
# @bench grid = rows; BLOCK = 128
# @bench reference = torch: REF
@triton.jit
def softmax(x_ptr, out_ptr, rows, cols, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < cols
    x = tl.load(x_ptr + r * cols + offs, mask=m, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + r * cols + offs, y BUG, mask=m)
"#;

const MODULE: &str = "import torch\n\n\ndef softmax(x):\n    return torch.softmax(x, dim=-1)\n";

fn kernel(reference: &str, bug: &str) -> String {
    SOFTMAX.replace("REF", reference).replace("BUG", bug)
}

/// Runs `kernel-lsp ARGS FILE` in a fresh folder holding `files`; (status, stdout, stderr).
fn run(args: &[&str], files: &[(&str, &str)], py: Option<&str>) -> (i32, String, String) {
    let dir = std::env::temp_dir().join(format!(
        "kernel-lsp-torchref-{}-{}",
        std::process::id(),
        unique()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap_or(Path::new("."))).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"));
    cmd.current_dir(&dir).args(args).arg(files[0].0);
    if let Some(py) = py {
        cmd.env("KERNEL_LSP_PYTHON", py)
            .env("TRITON_INTERPRET", "1");
    }
    let out = cmd.output().unwrap();
    std::fs::remove_dir_all(&dir).ok();
    tools::outcome(out)
}

/// `kernel-lsp bench` on the softmax with `reference`, `bug` and the extra `files`:
/// (status, stdout, stderr, the kernel's row of the table).
fn bench(
    py: &str,
    reference: &str,
    bug: &str,
    files: &[(&str, &str)],
) -> (i32, String, String, String) {
    let src = kernel(reference, bug);
    let mut all = vec![("soft.py", src.as_str())];
    all.extend_from_slice(files);
    let (code, out, err) = run(&["bench"], &all, Some(py));
    let row = out
        .lines()
        .find(|l| l.starts_with("softmax"))
        .unwrap_or_else(|| panic!("{reference}: no row for the kernel:\n{out}\n{err}"))
        .to_string();
    (code, out, err, row)
}

fn unique() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

#[test]
fn bench_verifies_a_triton_kernel_against_a_torch_expression_and_a_module_function() {
    let test = "bench_verifies_a_triton_kernel_against_a_torch_expression_and_a_module_function";
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip(test, &why),
    };
    for (reference, files) in [
        ("torch.softmax(x_ptr, dim=-1)", vec![]),
        ("refs.softmax", vec![("refs.py", MODULE)]),
        // A module in a folder, with a size passed by name.
        (
            "ref.ops.softmax",
            vec![(
                "ref/ops.py",
                "import torch\n\n\ndef softmax(x, cols):\n    assert x.shape[-1] == cols\n    return torch.softmax(x, dim=-1)\n",
            )],
        ),
    ] {
        let (code, out, err, row) = bench(&py, reference, "", &files);
        assert_eq!(code, 0, "{reference}:\n{out}\n{err}");
        assert!(row.contains("passed (2 cases × 3 trials)"), "{row}");
        assert!(row.contains("× eager"), "the speedup against PyTorch eager: {row}");
        assert!(
            out.contains(&format!("softmax: PyTorch `{reference}`: eager ")),
            "{out}"
        );
        assert!(
            out.contains("torch.compile - (torch.compile is not timed on Triton's CPU interpreter)"),
            "{out}"
        );
        assert!(err.contains(&format!("verifying against `torch: {reference}`")), "{err}");
    }
}

#[test]
fn bench_rejects_a_wrong_kernel_with_the_first_bad_element_against_torch() {
    let test = "bench_rejects_a_wrong_kernel_with_the_first_bad_element_against_torch";
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip(test, &why),
    };
    for (reference, files) in [
        ("torch.softmax(x_ptr, dim=-1)", vec![]),
        ("refs.softmax", vec![("refs.py", MODULE)]),
    ] {
        let (code, out, err, row) = bench(&py, reference, "+ (r == 3) * 0.5", &files);
        assert_eq!(code, 1, "{out}\n{err}");
        assert!(
            row.contains("FAILED: softmax: out_ptr[3, 0]: expected "),
            "{row}"
        );
        assert!(row.contains("100 elements differ"), "{row}");
        assert!(row.contains("(case 0, trial 0, seed 0x"), "{row}");
    }
}

/// Two outputs, the softmax and each row's maximum; `BUG` makes the maximum wrong.
const SOFTMAX_MAX: &str = r#"import triton
import triton.language as tl


# @bench rows = 16, 5; cols = 100
# @bench x_ptr: in f32[rows, cols]; out_ptr: out f32[rows, cols]; m_ptr: out f32[rows]
# @bench grid = rows; BLOCK = 128
# @bench reference = torch: (torch.softmax(x_ptr, dim=-1), x_ptr.amax(1))
@triton.jit
def softmax_max(x_ptr, out_ptr, m_ptr, rows, cols, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < cols
    x = tl.load(x_ptr + r * cols + offs, mask=m, other=-float("inf"))
    mx = tl.max(x, axis=0)
    e = tl.exp(x - mx)
    tl.store(out_ptr + r * cols + offs, e / tl.sum(e, axis=0), mask=m)
    tl.store(m_ptr + r, mx BUG)
"#;

#[test]
fn bench_checks_each_output_against_its_element_of_a_torch_tuple() {
    let test = "bench_checks_each_output_against_its_element_of_a_torch_tuple";
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip(test, &why),
    };
    let good = SOFTMAX_MAX.replace(" BUG", "");
    let (code, out, err) = run(&["bench"], &[("two.py", &good)], Some(&py));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("passed (2 cases × 3 trials)"), "{out}");
    let bad = SOFTMAX_MAX.replace(" BUG", " + (r == 2) * 1.0");
    let (code, out, err) = run(&["bench"], &[("two.py", &bad)], Some(&py));
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("FAILED: softmax_max: m_ptr[2]: expected "),
        "{out}"
    );
}

#[test]
fn bench_reports_a_torch_reference_that_fails_in_the_worker() {
    let test = "bench_reports_a_torch_reference_that_fails_in_the_worker";
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip(test, &why),
    };
    // Passes the spec's checks, fails in torch: a shape the spec does not have, and an
    // error raised by torch.
    let cases = [
        (
            "torch.softmax(x_ptr, dim=-1)[:, :10]",
            "the torch reference `torch.softmax(x_ptr, dim=-1)[:, :10]` gave `out_ptr` the shape [64, 10] (640 elements), but the spec says f32[64, 100] (6400 elements)",
        ),
        (
            "torch.mm(x_ptr, x_ptr)",
            // torch's own words, which vary a little between versions, follow.
            "FAILED: the torch reference `torch.mm(x_ptr, x_ptr)` raised RuntimeError: ",
        ),
    ];
    for (reference, want) in cases {
        let (code, out, err, _) = bench(&py, reference, "", &[]);
        assert_eq!(code, 1, "{out}\n{err}");
        assert!(out.contains(want), "{reference}: {out}");
    }
}

#[test]
fn check_puts_every_torch_reference_error_on_its_line() {
    let cases = [
        (
            "torch.softmax(x, dim=-1)",
            vec![],
            "soft.py:8:43: error: unknown name `x` in the torch reference; it can use the input buffers (x_ptr), the sizes and scalars (rows, cols, BLOCK), `torch`, `F` (torch.nn.functional) and `math`; did you mean `x_ptr`? [@bench]",
        ),
        (
            "torch.softmax",
            vec![],
            "soft.py:8:29: error: `torch.softmax` is not a torch expression but a function or attribute; call it on the inputs, e.g. `reference = torch: torch.softmax(x_ptr)`, or name a function of a file next to the kernel (`my_ref.fn`) [@bench]",
        ),
        (
            "refs.softmax",
            vec![],
            "soft.py:8:29: error: no module `refs`: `refs.py` is not next to this file; create it with `def softmax(...)` returning the outputs, or write a torch expression (`reference = torch: torch.relu(x)`) [@bench]",
        ),
        (
            "refs.sofmax",
            vec![("refs.py", MODULE)],
            "soft.py:8:29: error: `refs.py` defines no function `sofmax` at its top level; add `def sofmax(...)` taking the inputs in parameter order and returning the outputs; did you mean `softmax`? [@bench]",
        ),
    ];
    for (reference, files, want) in cases {
        let src = kernel(reference, "");
        let mut all = vec![("soft.py", src.as_str())];
        all.extend(files);
        let (code, out, err) = run(&["check"], &all, None);
        assert_eq!(code, 1, "{reference}: {out}\n{err}");
        assert_eq!(out.trim_end(), want, "{reference}");
    }
}

#[test]
fn optimize_reports_the_start_and_the_answer_next_to_pytorch() {
    let test = "optimize_reports_the_start_and_the_answer_next_to_pytorch";
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip(test, &why),
    };
    let add = "import triton\nimport triton.language as tl\n\n\n# @bench n = 4096, 1000\n# @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]\n# @bench grid = cdiv(n, BLOCK); BLOCK = 64\n# @bench tune BLOCK in [64, 1024]\n# @bench reference = torch: x_ptr + y_ptr\n@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    m = offs < n\n    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)\n";
    let (code, out, err) = run(
        &[
            "optimize",
            "--steps",
            "1",
            "--only",
            "tunable_sweep",
            "--fresh-policy",
        ],
        &[("add.py", add)],
        Some(&py),
    );
    assert_eq!(code, 0, "{out}\n{err}");
    // The step verified its candidates against PyTorch (no less accurate than the start:
    // 3 trials of case 0's 4096 elements and of case 1's 1000, none outside).
    assert!(
        out.contains("checked: verified against the PyTorch reference: 0 of 15288 elements outside the tolerance (the current version: 0)"),
        "{out}"
    );
    let at = out
        .find("against PyTorch `x_ptr + y_ptr` (eager ")
        .unwrap_or_else(|| panic!("{out}"));
    let rows: Vec<&str> = out[at..].lines().skip(1).take(3).collect();
    assert!(
        rows[0].trim_start().starts_with("start ") && rows[0].contains("× eager"),
        "{rows:?}"
    );
    assert!(
        rows[1].trim_start().starts_with("best ") && rows[1].contains("× eager"),
        "{rows:?}"
    );
    assert_eq!(
        rows[2].trim(),
        "note: torch.compile is not timed on Triton's CPU interpreter"
    );
}
