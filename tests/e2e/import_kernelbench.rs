//! `kernel-lsp import-kernelbench` on the small KernelBench-format problems in
//! tests/fixtures/kernelbench: the skeleton it writes checks clean, and once filled in it
//! verifies against the problem's own `Model` (Triton's CPU interpreter, torch on the CPU).

use std::path::{Path, PathBuf};
use std::process::Command;

use expect_test::expect;

use crate::bench_triton::python;
use crate::tools;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/kernelbench")
}

/// A fresh folder holding a copy of the fixture `problem`.
fn workdir(problem: &str, tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kernel-lsp-kb-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(fixtures().join(problem), dir.join(problem)).unwrap();
    dir
}

fn kernel_lsp(dir: &Path, args: &[&str], py: &str) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
        .current_dir(dir)
        .args(args)
        .env("KERNEL_LSP_PYTHON", py)
        .env("TRITON_INTERPRET", "1")
        .output()
        .unwrap();
    tools::outcome(out)
}

#[test]
fn import_writes_a_skeleton_whose_spec_comes_from_the_problem() {
    let py = match python() {
        Ok(p) => p,
        Err(why) => {
            return tools::skip(
                "import_writes_a_skeleton_whose_spec_comes_from_the_problem",
                &why,
            )
        }
    };
    let dir = workdir("linear_relu.py", "skeleton");
    let (code, _, err) = kernel_lsp(&dir, &["import-kernelbench", "linear_relu.py"], &py);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("linear_relu_kernel.py (the kernel to fill in)"),
        "{err}"
    );
    let text = std::fs::read_to_string(dir.join("linear_relu_kernel.py")).unwrap();
    let spec: String = text
        .lines()
        .filter(|l| l.contains("@bench") || l.starts_with("def "))
        .map(|l| format!("{l}\n"))
        .collect();
    // The module's parameters are inputs of the kernel, like the problem's own inputs.
    expect![[r#"
        # @bench n = 128
        # @bench x_ptr: in f32[8, 32]
        # @bench w_linear_weight_ptr: in f32[16, 32]
        # @bench w_linear_bias_ptr: in f32[16]
        # @bench out_ptr: out f32[8, 16]
        # @bench grid = cdiv(n, BLOCK); BLOCK = 1024
        # @bench reference = torch: linear_relu_ref.reference
        def linear_relu_kernel(x_ptr, w_linear_weight_ptr, w_linear_bias_ptr, out_ptr, n, BLOCK: tl.constexpr):
    "#]]
    .assert_eq(&spec);
    let reference = std::fs::read_to_string(dir.join("linear_relu_ref.py")).unwrap();
    assert!(reference.starts_with(
        &std::fs::read_to_string(fixtures().join("linear_relu.py"))
            .unwrap()
            .trim_end()
            .to_string()
    ));
    assert!(
        reference.contains("def reference(x, w_linear_weight, w_linear_bias):"),
        "{reference}"
    );

    // Both languages' skeletons check clean (no errors; the one-case hint is fine).
    let (code, _, err) = kernel_lsp(
        &dir,
        &["import-kernelbench", "--lang", "cuda", "linear_relu.py"],
        &py,
    );
    assert_eq!(code, 0, "the same reference file is no conflict: {err}");
    let cu = std::fs::read_to_string(dir.join("linear_relu_kernel.cu")).unwrap();
    assert!(
        cu.contains("extern \"C\" __global__ void linear_relu_kernel(const float* x, const float* w_linear_weight, const float* w_linear_bias, float* out, int n)"),
        "{cu}"
    );
    for f in ["linear_relu_kernel.py", "linear_relu_kernel.cu"] {
        let (code, out, err) = kernel_lsp(&dir, &["check", "--no-compile", f], &py);
        assert_eq!(code, 0, "{f}: {out}\n{err}");
        assert!(err.contains("0 error(s), 0 warning(s)"), "{f}: {err}");
    }
    // A second import does not overwrite the author's work.
    let edited = std::fs::read_to_string(dir.join("linear_relu_kernel.py")).unwrap() + "    pass\n";
    std::fs::write(dir.join("linear_relu_kernel.py"), &edited).unwrap();
    let (code, _, err) = kernel_lsp(&dir, &["import-kernelbench", "linear_relu.py"], &py);
    assert_eq!(code, 1);
    assert!(
        err.contains("linear_relu_kernel.py: error: exists; pass --force to overwrite it"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn imported_kernels_verify_against_the_problems_model() {
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip("imported_kernels_verify_against_the_problems_model", &why),
    };
    // (problem, the kernel's body the author writes after the skeleton's lines)
    let filled = [
        (
            // Two outputs and a number input.
            "scale_add_two_outputs.py",
            "    a = tl.load(a_ptr + offs, mask=mask)\n    b = tl.load(b_ptr + offs, mask=mask)\n    tl.store(out0_ptr + offs, a * alpha + b, mask=mask)\n    tl.store(out1_ptr + offs, a - b, mask=mask)\n",
        ),
        (
            // A parameterised module: the weights come in as buffers.
            "linear_relu.py",
            "    i = offs // 16\n    j = offs % 16\n    acc = tl.load(w_linear_bias_ptr + j, mask=mask, other=0.0)\n    for k in range(32):\n        acc += tl.load(x_ptr + i * 32 + k, mask=mask, other=0.0) * tl.load(w_linear_weight_ptr + j * 32 + k, mask=mask, other=0.0)\n    tl.store(out_ptr + offs, tl.maximum(acc, 0.0), mask=mask)\n",
        ),
    ];
    for (problem, body) in filled {
        let dir = workdir(problem, "verify");
        let (code, _, err) = kernel_lsp(&dir, &["import-kernelbench", problem], &py);
        assert_eq!(code, 0, "{err}");
        let kernel = problem.replace(".py", "_kernel.py");
        let mut text = std::fs::read_to_string(dir.join(&kernel)).unwrap();
        text.push_str(body);
        std::fs::write(dir.join(&kernel), text).unwrap();
        let (code, out, err) = kernel_lsp(&dir, &["bench", &kernel], &py);
        assert_eq!(code, 0, "{problem}: {out}\n{err}");
        assert!(
            out.contains("passed (1 cases × 3 trials)"),
            "{problem}: {out}"
        );
        assert!(out.contains("× eager"), "{problem}: {out}");
        std::fs::remove_dir_all(&dir).ok();
    }

    // The skeleton as written computes nothing: verification says which element.
    let dir = workdir("softmax.py", "unfilled");
    let (code, _, err) = kernel_lsp(&dir, &["import-kernelbench", "softmax.py"], &py);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = kernel_lsp(&dir, &["bench", "softmax_kernel.py"], &py);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAILED: softmax_kernel: out_ptr[0, 0]: expected "),
        "{out}"
    );
    assert!(out.contains("got NaN (unwritten or invalid)"), "{out}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn import_refuses_a_file_that_is_not_a_kernelbench_problem() {
    let py = match python() {
        Ok(p) => p,
        Err(why) => {
            return tools::skip(
                "import_refuses_a_file_that_is_not_a_kernelbench_problem",
                &why,
            )
        }
    };
    let dir = workdir("not_a_problem.py", "refuse");
    let (code, _, err) = kernel_lsp(&dir, &["import-kernelbench", "not_a_problem.py"], &py);
    assert_eq!(code, 1);
    assert_eq!(
        err.trim_end(),
        "not_a_problem.py: error: the problem defines no `Model`; a KernelBench problem has `class Model(nn.Module)` with `forward`, `get_inputs()` and `get_init_inputs()`"
    );
    assert!(!dir.join("not_a_problem_kernel.py").exists());
    std::fs::remove_dir_all(&dir).ok();
}
