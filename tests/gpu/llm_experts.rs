//! Issue #12 on the GPU: hand-written expert versions of two bundled examples, served by
//! a replay coder through `kernel-lsp optimize --llm`, as a user runs it. Each expert
//! needs a launch the draft does not have (the CUDA softmax a new grid and block, the
//! Triton matmul a 1-D grid, new tile sizes, num_warps, num_stages and a new
//! `GROUP_M` constexpr). Asserted: the reply is accepted, the applied file carries its
//! launch line, and the delivered speedup is at least 90% of the expert's own speedup
//! over the draft, measured with `kernel-lsp bench` in the same run. Test names start
//! with `gpu_`; without a GPU they print `SKIP` (KERNEL_LSP_REQUIRE_GPU=1 fails instead).

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use crate::llm_server::{ReplayServer, Scripted};

const SOFTMAX_EXPERT: &str = r#"```cuda
// @bench rows = 8192, 37; cols = 1024, 100
// @bench x: in f32[rows, cols]; y: out f32[rows, cols]
// @bench grid = cdiv(rows, 8); block = 256
// @bench atol = 1e-6; rtol = 1e-4
extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    const float* in = x + (size_t)row * cols;
    float* out = y + (size_t)row * cols;
    float m = -INFINITY;
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, in[c]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = 0.0f;
    for (int c = lane; c < cols; c += 32) sum += expf(in[c] - m);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    float inv = 1.0f / sum;
    for (int c = lane; c < cols; c += 32) out[c] = expf(in[c] - m) * inv;
}
```"#;

const MATMUL_EXPERT: &str = r#"```python
# @bench M = 4096, 100; N = 4096, 72; K = 4096, 40
# @bench a_ptr: in f16[M, K]; b_ptr: in f16[K, N]; c_ptr: out f32[M, N]
# @bench grid = cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N); BLOCK_M = 128; BLOCK_N = 128; BLOCK_K = 64; GROUP_M = 8; num_warps = 8; num_stages = 3
# @bench atol = 1e-2; rtol = 1e-2
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_n
    first_m = (pid // group) * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + offs_m[:, None] * K + (k + offs_k)[None, :],
                    mask=(offs_m[:, None] < M) & ((k + offs_k)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + offs_k)[:, None] * N + offs_n[None, :],
                    mask=((k + offs_k)[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
```"#;

pub(crate) fn gpu_present(test: &str) -> bool {
    let mut b = kernel_lsp::worker::cuda::CudaBackend::new();
    let s = kernel_lsp::worker::backend::Backend::status(&mut b);
    if s.available {
        return true;
    }
    assert!(
        std::env::var("KERNEL_LSP_REQUIRE_GPU").as_deref() != Ok("1"),
        "{test}: KERNEL_LSP_REQUIRE_GPU=1 but no GPU: {}",
        s.message
    );
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "SKIP {test}: no CUDA device ({})",
        s.message
    );
    false
}

pub(crate) fn kernel_lsp(dir: &Path, args: &[&str]) -> (Value, String) {
    // The GPU machine's copy (tests/gpu/run.sh) or this build's.
    let bin = std::env::var("KERNEL_LSP_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_kernel-lsp").to_string());
    let out = Command::new(bin)
        .current_dir(dir)
        .args(args)
        .env("KERNEL_LSP_DATA_DIR", dir.join("data"))
        .env("REPLAY_KEY", "sk-test")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (
        serde_json::from_str(&stdout).unwrap_or(Value::Null),
        format!("exit {:?}\n{stdout}\n{stderr}", out.status.code()),
    )
}

fn median_ms(bench: &Value) -> f64 {
    bench["kernels"][0]["timing"]["median_ms"]
        .as_f64()
        .unwrap_or(f64::NAN)
}

/// Benches the draft and the expert, then optimizes the draft with the expert as the
/// coder's reply; returns (expert's own speedup, delivered speedup, the file after).
fn serve_expert(test: &str, example: &str, expert_reply: &str) -> (f64, f64, String) {
    let (own, run, after) = serve_samples(test, example, expert_reply, &[expert_reply]);
    (
        own,
        run["steps"][0]["speedup"].as_f64().unwrap_or(0.0),
        after,
    )
}

/// [`serve_expert`] with `replies` as the coder's samples of one step (asked for at
/// once); returns (expert's own speedup, the run's JSON, the file after).
fn serve_samples(
    test: &str,
    example: &str,
    expert_reply: &str,
    replies: &[&str],
) -> (f64, Value, String) {
    let dir = std::env::temp_dir().join(format!("kernel-lsp-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The examples next to tests/gpu/run.sh's working folder on the GPU machine, else
    // this checkout's.
    let root = std::env::var("KERNEL_LSP_EXAMPLES").map_or_else(
        |_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples"),
        std::path::PathBuf::from,
    );
    let draft = std::fs::read_to_string(root.join(example)).unwrap();
    std::fs::write(dir.join(example), &draft).unwrap();
    // The expert as a file of its own: the draft with the reply's block in place of the
    // spec and kernel (everything from the first `@bench` line on).
    let block = expert_reply
        .split_once('\n')
        .map(|(_, b)| b.trim_end_matches("```"))
        .unwrap();
    let marker = if example.ends_with(".py") {
        "# @bench"
    } else {
        "// @bench"
    };
    let head = &draft[..draft.find(marker).unwrap()];
    let expert_name = format!("expert_{example}");
    std::fs::write(dir.join(&expert_name), format!("{head}{block}")).unwrap();

    let (d, log_d) = kernel_lsp(&dir, &["bench", example, "--json"]);
    let (e, log_e) = kernel_lsp(&dir, &["bench", &expert_name, "--json"]);
    let own = median_ms(&d) / median_ms(&e);
    assert!(own.is_finite() && own > 1.0, "{log_d}\n{log_e}");

    let mut script = vec![Scripted::openai(
        "```json\n{\"id\": \"free\", \"params\": {}, \"rationale\": \"the expert rewrite\", \"description\": \"rewrite the kernel as an expert would, with the launch it needs\"}\n```",
    )];
    script.extend(replies.iter().map(|r| Scripted::openai(r)));
    let server = ReplayServer::start(script);
    let model = json!({"provider": "openai", "url": server.url(), "model": "replay", "apiKeyEnv": "REPLAY_KEY", "maxRetries": 0, "timeoutMs": 20000});
    let settings = json!({"llm": {"strategy": model, "coder": model, "repairRounds": 0,
        "callsPerStep": 1 + replies.len(), "samples": replies.len()}});
    std::fs::write(dir.join("settings.json"), settings.to_string()).unwrap();
    let (run, log) = kernel_lsp(
        &dir,
        &[
            "optimize",
            example,
            "--llm",
            "--config",
            "settings.json",
            "--steps",
            "1",
            "--json",
            "--apply",
        ],
    );
    let step = &run["steps"][0];
    assert_eq!(step["outcome"], "accepted", "{log}");
    let delivered = step["speedup"].as_f64().unwrap_or(0.0);
    let after = std::fs::read_to_string(dir.join(example)).unwrap();
    {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "EXPERT {example}: own speedup {own:.2}x (draft {:.4} ms, expert {:.4} ms), delivered {delivered:.2}x ({:.0}%)",
            median_ms(&d),
            median_ms(&e),
            100.0 * delivered / own
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    (own, run, after)
}

#[test]
fn gpu_expert_softmax_with_a_new_grid_and_block_is_delivered() {
    let test = "gpu_expert_softmax_with_a_new_grid_and_block_is_delivered";
    if !gpu_present(test) {
        return;
    }
    let (own, delivered, after) = serve_expert(test, "softmax_rows.cu", SOFTMAX_EXPERT);
    assert!(
        after.contains("// @bench grid = cdiv(rows, 8); block = 256\n"),
        "{after}"
    );
    assert!(
        delivered >= 0.9 * own,
        "delivered {delivered:.2}x, the expert's own {own:.2}x"
    );
}

#[test]
fn gpu_expert_triton_matmul_with_a_new_constexpr_is_delivered() {
    let test = "gpu_expert_triton_matmul_with_a_new_constexpr_is_delivered";
    if !gpu_present(test) {
        return;
    }
    if let Err(why) = crate::bench_triton::python() {
        assert!(
            std::env::var("KERNEL_LSP_REQUIRE_GPU").as_deref() != Ok("1"),
            "{test}: {why}"
        );
        return crate::tools::skip(test, &why);
    }
    let (own, delivered, after) = serve_expert(test, "matmul.py", MATMUL_EXPERT);
    assert!(
        after.contains("GROUP_M = 8; num_warps = 8; num_stages = 3\n"),
        "{after}"
    );
    assert!(after.contains("GROUP_M: tl.constexpr):"), "{after}");
    assert!(
        delivered >= 0.9 * own,
        "delivered {delivered:.2}x, the expert's own {own:.2}x"
    );
}

/// `llm.samples` on the GPU: four samples of one step, asked for at once. One is the
/// expert, one the expert again with comments (dropped as a duplicate), one computes the
/// wrong thing (fails verification), one is a valid variant with one warp per block.
/// The fastest verified sample is kept, and delivers at least 90% of the expert's own
/// speedup.
#[test]
fn gpu_samples_keep_the_fastest_of_four() {
    let test = "gpu_samples_keep_the_fastest_of_four";
    if !gpu_present(test) {
        return;
    }
    let commented = SOFTMAX_EXPERT.replace(
        "    float inv = 1.0f / sum;\n",
        "    // one division, then multiplies\n    float inv = 1.0f / sum;   \n",
    );
    let wrong = SOFTMAX_EXPERT.replace("expf(in[c] - m) * inv", "expf(in[c] - m)");
    let warp_blocks = SOFTMAX_EXPERT
        .replace(
            "grid = cdiv(rows, 8); block = 256",
            "grid = rows; block = 32",
        )
        .replace(
            "blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32",
            "blockIdx.x",
        );
    assert!(
        commented != SOFTMAX_EXPERT && wrong != SOFTMAX_EXPERT && warp_blocks != SOFTMAX_EXPERT
    );
    let (own, run, after) = serve_samples(
        test,
        "softmax_rows.cu",
        SOFTMAX_EXPERT,
        &[SOFTMAX_EXPERT, &commented, &wrong, &warp_blocks],
    );
    let step = &run["steps"][0];
    assert_eq!(step["outcome"], "accepted", "{run}");
    let c = step["candidates"].as_array().unwrap();
    let msg = |c: &Value| c["message"].as_str().unwrap_or("").to_string();
    assert_eq!(
        c.iter()
            .filter(|c| msg(c).contains("a duplicate of"))
            .count(),
        1,
        "{step}"
    );
    assert_eq!(
        c.iter().filter(|c| c["verified"] == true).count(),
        2,
        "{step}"
    );
    assert!(
        c.iter().any(|c| msg(c).contains("y[")),
        "the wrong sample names the buffer: {step}"
    );
    let delivered = step["speedup"].as_f64().unwrap_or(0.0);
    {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SAMPLES softmax_rows.cu: kept {} at {delivered:.2}x; the expert's own {own:.2}x ({:.0}%)",
            step["accepted"],
            100.0 * delivered / own
        );
    }
    assert!(after.contains("__shfl_xor_sync"), "{after}");
    assert!(
        delivered >= 0.9 * own,
        "delivered {delivered:.2}x, the expert's own {own:.2}x"
    );
}
