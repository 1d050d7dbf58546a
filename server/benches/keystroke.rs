//! Keystroke latency and memory of the language server, measured from a client over
//! the real binary's stdio: `didChange` sent -> `publishDiagnostics` for that version
//! received (syntax + @bench checks; NVRTC off, as the target excludes it), on a
//! generated 10,000-line CUDA file with 200 kernels; then the server's RSS with 20 such
//! files open. Run with `cargo bench --bench keystroke`; record results in
//! docs/benchmarks.md. Targets (issue #2): p95 <= 10 ms, RSS <= 120 MB.

#[path = "../../tests/e2e/client.rs"]
#[allow(dead_code)]
mod client;

use std::time::{Duration, Instant};

use client::TestClient;
use serde_json::json;

/// `kernels` blocks of 50 lines: a device helper, a 6-line spec, a kernel with loops,
/// and comment lines.
fn generated_file(kernels: usize) -> String {
    let mut s = String::from("#include <cuda_fp16.h>\n#include <cstdio>\n\n");
    for k in 0..kernels {
        s.push_str(&format!(
            "__device__ __forceinline__ float helper_{k}(float a, float v) {{\n    float t = a * v;\n    t = t * 0.5f + v * 0.25f;\n    return t;\n}}\n\n"
        ));
        s.push_str(&format!(
            "// kernel {k}: a generated workload\n\
             // @bench n = 1 << 20, 4099\n\
             // @bench x: in f32[n]; y: inout f32[n] ~ normal(0, 1)\n\
             // @bench a = 2.5; w = 4\n\
             // @bench grid = cdiv(n, 256 * w); block = 256\n\
             // @bench atol = 1e-4\n\
             extern \"C\" __global__ void kern_{k}(int n, float a, const float* __restrict__ x, float* __restrict__ y) {{\n\
             \x20   int base = (blockIdx.x * blockDim.x + threadIdx.x) * 4;\n\
             \x20   float acc[4];\n\
             \x20   #pragma unroll\n\
             \x20   for (int j = 0; j < 4; ++j) {{\n\
             \x20       int i = base + j;\n\
             \x20       acc[j] = i < n ? helper_{k}(a, x[i]) : 0.0f;\n\
             \x20   }}\n\
             \x20   for (int j = 0; j < 4; ++j) {{\n\
             \x20       int i = base + j;\n\
             \x20       if (i < n) {{\n\
             \x20           y[i] = acc[j] + y[i];\n\
             \x20       }}\n\
             \x20   }}\n\
             }}\n\n"
        ));
        for _ in 0..22 {
            s.push_str("// filler: notes about the kernel above, as real files have\n");
        }
    }
    s
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

#[tokio::main]
async fn main() {
    let text = generated_file(200);
    let lines = text.lines().count();
    let mut c = TestClient::spawn_binary(&[]);
    c.initialize(json!({"compileOnType": false}), &["utf-16"])
        .await;
    let uri = "file:///bench/gen0.cu";
    c.open(uri, "cuda", &text).await;
    let first = c.diagnostics(uri, None).await;
    assert!(
        first.is_empty() || first.iter().all(|d| d["severity"] != 1),
        "generated file has errors: {first:?}"
    );

    // Keystrokes in the middle of the file, inside a kernel body: type a character,
    // then delete it, alternating, so the file stays valid.
    let line = (lines / 2) as u32;
    let mut version = 1i64;
    let mut samples = Vec::new();
    let rounds = 400;
    for i in 0..rounds {
        version += 1;
        let t0 = Instant::now();
        if i % 2 == 0 {
            c.edit(uri, version, (line, 2), (line, 2), "x").await;
        } else {
            c.edit(uri, version, (line, 2), (line, 3), "").await;
        }
        // The server publishes (possibly empty) diagnostics for every version.
        let _ = c.diagnostics(uri, Some(version)).await;
        samples.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    samples.sort_by(f64::total_cmp);
    let p50 = percentile(&samples, 0.5);
    let p95 = percentile(&samples, 0.95);
    let max = samples[samples.len() - 1];

    // Memory: 19 more copies of the file open (20 in all).
    for f in 1..20 {
        let u = format!("file:///bench/gen{f}.cu");
        c.open(&u, "cuda", &text).await;
        let _ = c.diagnostics(&u, None).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pid = c.child().and_then(|ch| ch.id()).unwrap_or(0);
    let rss = rss_mb(pid);

    println!(
        "keystroke -> publishDiagnostics, {lines}-line CUDA file, 200 kernels, {rounds} edits"
    );
    println!("| metric | value | target |");
    println!("| --- | --- | --- |");
    println!("| p50 | {p50:.2} ms | |");
    println!("| p95 | {p95:.2} ms | <= 10 ms |");
    println!("| max | {max:.2} ms | |");
    println!("| RSS, 20 files open | {rss:.1} MB | <= 120 MB |");
}
