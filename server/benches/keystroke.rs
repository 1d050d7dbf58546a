//! Keystroke latency and memory of the language server, measured from a client over
//! the real binary's stdio: `didChange` sent -> `publishDiagnostics` for that version
//! received (syntax + @bench checks; NVRTC off, as the target excludes it), on a
//! generated 10,000-line CUDA file with 200 kernels and 6,000 device helpers (issue #16:
//! hundreds of kernels, thousands of helpers); then the server's RSS with 20 such files
//! open. Run with `cargo bench --bench keystroke`; set `KERNEL_LSP_BENCH_BASE` to
//! another build of kernel-lsp (e.g. the main branch's) to measure it in the same run.
//! Record results in docs/benchmarks.md. Targets (issues #2, #16): p95 <= 10 ms,
//! RSS <= 120 MB.

#[path = "../../tests/e2e/client.rs"]
#[allow(dead_code)]
mod client;

use std::time::{Duration, Instant};

use client::{rss_mb, TestClient};
use serde_json::json;

#[path = "shared/generated_cuda.rs"]
mod generated_cuda;
use generated_cuda::generated_file;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

struct Measured {
    p50: f64,
    p95: f64,
    max: f64,
    rss: f64,
}

async fn measure(program: &str, text: &str, rounds: usize) -> Measured {
    let lines = text.lines().count();
    let mut c = TestClient::spawn_program(program, &[]);
    c.initialize(json!({"compileOnType": false}), &["utf-16"])
        .await;
    let pid = c.child().and_then(|ch| ch.id()).unwrap_or(0);
    // KEYSTROKE_RSS=1 prints the server's RSS after each stage (where memory goes).
    let stages = std::env::var_os("KEYSTROKE_RSS").is_some();
    let stage = |what: &str| {
        if stages {
            eprintln!("RSS {:.1} MB {what}", rss_mb(pid));
        }
    };
    stage("after initialize");
    let uri = "file:///bench/gen0.cu";
    c.open(uri, "cuda", text).await;
    let first = c.diagnostics(uri, None).await;
    stage("after the first open");
    assert!(
        first.is_empty() || first.iter().all(|d| d["severity"] != 1),
        "generated file has errors: {first:?}"
    );

    // Keystrokes in the middle of the file, inside a kernel body or a helper: type a
    // character, then delete it, alternating, so the file stays valid.
    let line = text
        .lines()
        .enumerate()
        .skip(lines / 2)
        .find(|(_, l)| l.starts_with("    int base"))
        .map_or(lines / 2, |(i, _)| i) as u32;
    let mut version = 1i64;
    let mut samples = Vec::new();
    for i in 0..rounds {
        version += 1;
        let t0 = Instant::now();
        if i % 2 == 0 {
            c.edit(uri, version, (line, 4), (line, 4), " ").await;
        } else {
            c.edit(uri, version, (line, 4), (line, 5), "").await;
        }
        // The server publishes (possibly empty) diagnostics for every version.
        let _ = c.diagnostics(uri, Some(version)).await;
        samples.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    samples.sort_by(f64::total_cmp);
    stage("after the edits");

    // Memory: 19 more copies of the file open (20 in all).
    for f in 1..20 {
        let u = format!("file:///bench/gen{f}.cu");
        c.open(&u, "cuda", text).await;
        let _ = c.diagnostics(&u, None).await;
        stage(&format!("after opening copy {f}"));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    Measured {
        p50: percentile(&samples, 0.5),
        p95: percentile(&samples, 0.95),
        max: samples[samples.len() - 1],
        rss: rss_mb(pid),
    }
}

#[tokio::main]
async fn main() {
    let text = generated_file(200, 30);
    let lines = text.lines().count();
    let rounds = 400;
    let mut programs = vec![("this build", env!("CARGO_BIN_EXE_kernel-lsp").to_string())];
    if let Ok(base) = std::env::var("KERNEL_LSP_BENCH_BASE") {
        programs.insert(0, ("KERNEL_LSP_BENCH_BASE", base));
    }
    println!(
        "keystroke -> publishDiagnostics, {lines}-line CUDA file, 200 kernels, 6000 device helpers, {rounds} edits"
    );
    println!("| binary | p50 | p95 (<= 10 ms) | max | RSS, 20 files open (<= 120 MB) |");
    println!("| --- | --- | --- | --- | --- |");
    for (name, program) in programs {
        let m = measure(&program, &text, rounds).await;
        println!(
            "| {name} | {:.2} ms | {:.2} ms | {:.2} ms | {:.1} MB |",
            m.p50, m.p95, m.max, m.rss
        );
    }
}
