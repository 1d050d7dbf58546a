//! GPU test of `reference = torch: ...` (issue #17): `kernel-lsp bench` verifies a Triton
//! kernel against PyTorch on the GPU and times it against PyTorch eager and
//! torch.compile, interleaved. Prints `SKIP` without a GPU (KERNEL_LSP_REQUIRE_GPU=1, as
//! tests/gpu/run.sh sets, fails instead) and one `TORCHREF` line with the times.

use std::process::Command;

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
    if !crate::gpu_llm::gpu_present(test) {
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

/// CUDA kernels against PyTorch (issue #17): the worker compiles them for its GPU and its
/// Python helper launches the PTX beside the torch reference. A right kernel (a template
/// instance, so the compiled symbol is the lowered name, whose reference names the
/// template argument) passes and is timed against eager and torch.compile; a wrong one
/// fails with the first bad element; one that writes one element past its output is
/// caught by the guard bytes.
const CUDA_KERNELS: &str = r#"
// @bench rows = 2048, 33; cols = 512, 70
// @bench x: in f32[rows, cols]; y: out f32[rows, cols]
// @bench BLOCK = 128; grid = rows; block = BLOCK
// @bench reference = torch: torch.softmax(x, dim=-1) * (BLOCK // 128)
template <int BLOCK>
__global__ void softmax_ok(const float* x, float* y, int rows, int cols) {
    __shared__ float red[BLOCK];
    int r = blockIdx.x;
    const float* xr = x + (size_t)r * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) sum += expf(xr[c] - m);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    sum = red[0];
    for (int c = threadIdx.x; c < cols; c += BLOCK) y[(size_t)r * cols + c] = expf(xr[c] - m) / sum;
}
template __global__ void softmax_ok<128>(const float*, float*, int, int);

// @bench n = 1 << 20, 4099
// @bench x: in f32[n]; y: inout f32[n]; a = 2.5
// @bench grid = cdiv(n, 256); block = 256
// @bench reference = torch: a * x + y
extern "C" __global__ void saxpy_wrong(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i] + (i == 777 ? 1.0f : 0.0f);
}

// @bench n = 1 << 20, 4099
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 256); block = 256
// @bench reference = torch: x * 2
extern "C" __global__ void double_past_the_end(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) y[i] = 2.0f * (i < n ? x[i] : 0.0f);
}
"#;

#[test]
fn gpu_cuda_kernels_verified_and_timed_against_torch() {
    let test = "gpu_cuda_kernels_verified_and_timed_against_torch";
    if !crate::gpu_llm::gpu_present(test) {
        return;
    }
    let dir = std::env::temp_dir().join(format!(
        "kernel-lsp-gpu-torchref-cuda-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("kernels.cu"), CUDA_KERNELS).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
        .current_dir(&dir)
        .args(["bench", "--json", "kernels.cu"])
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let v: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    let kernel = |name: &str| {
        v["kernels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["kernel"] == name)
            .unwrap_or_else(|| panic!("no {name} in {v}"))
            .clone()
    };
    let ok = kernel("softmax_ok");
    assert_eq!(ok["verify"]["passed"], true, "{ok}\n{stderr}");
    let ms = |t: &serde_json::Value| t["median_ms"].as_f64().unwrap_or(0.0);
    let (k, eager, compile) = (
        ms(&ok["timing"]),
        ms(&ok["torch"]["eager"]),
        ms(&ok["torch"]["compile"]),
    );
    assert!(
        k > 0.0 && eager > 0.0 && compile > 0.0,
        "every time measured: {ok}"
    );
    println!(
        "TORCHREF cuda softmax 2048x512 kernel_ms={k:.4} eager_ms={eager:.4} compile_ms={compile:.4} ({:.2}x eager, {:.2}x compile)",
        eager / k,
        compile / k
    );

    let wrong = kernel("saxpy_wrong");
    assert_eq!(wrong["verify"]["passed"], false, "{wrong}");
    let f = &wrong["verify"]["failure"];
    assert_eq!(f["kind"], "mismatch", "{wrong}");
    assert!(f["message"].as_str().unwrap().contains("y[777]"), "{wrong}");

    let oob = kernel("double_past_the_end");
    assert_eq!(oob["verify"]["passed"], false, "{oob}");
    assert_eq!(oob["verify"]["failure"]["kind"], "out_of_bounds", "{oob}");
    let m = oob["verify"]["failure"]["message"].as_str().unwrap();
    assert!(m.contains("past the end of `y`"), "{oob}");
}
