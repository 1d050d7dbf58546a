//! GPU test of `reference = torch: ...` (issue #17): `kernel-lsp bench` verifies a Triton
//! kernel against PyTorch on the GPU and times it against PyTorch eager and
//! torch.compile, interleaved. Prints `SKIP` without a GPU (KERNEL_LSP_REQUIRE_GPU=1, as
//! tests/gpu/run.sh sets, fails instead) and one `TORCHREF` line with the times.

use std::process::Command;

use kernel_lsp::worker::backend::Backend;
use kernel_lsp::worker::cuda::CudaBackend;

const SOFTMAX: &str = r#"import triton
import triton.language as tl


# @bench rows = 4096, 5; cols = 1024, 77
# @bench x_ptr: in f32[rows, cols] ~ normal(0, 3); out_ptr: out f32[rows, cols]
# @bench grid = rows; BLOCK = next_pow2(cols); num_warps = 4
# @bench reference = torch: torch.softmax(x_ptr, dim=-1)
@triton.jit
def softmax(x_ptr, out_ptr, rows, cols, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < cols
    x = tl.load(x_ptr + r * cols + offs, mask=m, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + r * cols + offs, e / tl.sum(e, axis=0), mask=m)
"#;

#[test]
fn gpu_triton_kernel_verified_and_timed_against_torch_eager_and_compile() {
    let test = "gpu_triton_kernel_verified_and_timed_against_torch_eager_and_compile";
    let status = CudaBackend::new().status();
    if !status.available {
        assert!(
            std::env::var("KERNEL_LSP_REQUIRE_GPU").as_deref() != Ok("1"),
            "{test}: KERNEL_LSP_REQUIRE_GPU=1 but no GPU: {}",
            status.message
        );
        eprintln!("SKIP {test}: no CUDA device ({})", status.message);
        return;
    }
    let dir = std::env::temp_dir().join(format!("kernel-lsp-gpu-torchref-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("softmax.py"), SOFTMAX).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
        .current_dir(&dir)
        .args(["bench", "--json", "softmax.py"])
        .env_remove("TRITON_INTERPRET")
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let k = &v["kernels"][0];
    assert_eq!(k["verify"]["passed"], true, "{k}");
    assert_eq!(k["interpreter"], false, "{k}");
    let ms = |t: &serde_json::Value| t["median_ms"].as_f64().unwrap_or(0.0);
    let (kernel, eager, compile) = (
        ms(&k["timing"]),
        ms(&k["torch"]["eager"]),
        ms(&k["torch"]["compile"]),
    );
    assert!(
        kernel > 0.0 && eager > 0.0 && compile > 0.0,
        "every time measured: {k}"
    );
    let (se, sc) = (
        k["torch"]["speedup_eager"].as_f64().unwrap(),
        k["torch"]["speedup_compile"].as_f64().unwrap(),
    );
    assert!(
        (se - eager / kernel).abs() < 1e-9 && (sc - compile / kernel).abs() < 1e-9,
        "{k}"
    );
    println!(
        "TORCHREF softmax 4096x1024 kernel_ms={kernel:.4} eager_ms={eager:.4} compile_ms={compile:.4} ({se:.2}x eager, {sc:.2}x compile)"
    );
}
