//! Big documents (issue #16, item 1). Two measurements, each on this build and, when
//! `KERNEL_LSP_BENCH_BASE` names another kernel-lsp binary (e.g. the main branch's), on
//! that one in the same run:
//! - spec checking at 10,000 and 20,000 `@bench` lines: `kernel-lsp check --no-compile`
//!   on one kernel whose spec has that many statements of one shape (the shapes that
//!   were quadratic), in CUDA and in Triton (whose parse of comment runs was quadratic,
//!   issue #28); linear checking takes about twice as long at 20,000;
//! - memory of a syntax-only document: the server's RSS before and after opening a
//!   20 MB CUDA file and replacing its whole text 3 times (target: the growth is at
//!   most 3 times the text).
//!
//! Run with `cargo bench --bench big_documents`; record results in docs/benchmarks.md.

#[path = "../../tests/e2e/client.rs"]
#[allow(dead_code)]
mod client;

use std::process::Command;
use std::time::{Duration, Instant};

use client::{peak_mb, rss_mb, TestClient};
use serde_json::json;

/// A file of one kernel whose spec has `n` statements of `shape`: CUDA (`ext` "cu") or
/// Triton ("py", where each `#` line used to cost the parser the whole run after it).
fn spec_file(ext: &str, shape: &str, n: usize) -> String {
    let comment = if ext == "py" { "#" } else { "//" };
    let mut s = String::new();
    for i in 0..n {
        let line = match shape {
            "undefined names" => format!("v{i} = u{i}"),
            "unused names" => format!("v{i} = {i}"),
            "duplicates" => format!("w = {i}"),
            "a chain" => format!(
                "v{i} = {}",
                if i == 0 {
                    "1".into()
                } else {
                    format!("v{} + 1", i - 1)
                }
            ),
            other => panic!("no shape {other}"),
        };
        s.push_str(&format!("{comment} @bench {line}\n"));
    }
    if ext == "py" {
        s.insert_str(0, "import triton\nimport triton.language as tl\n\n");
        s.push_str("# @bench n = 1024; x: in f32[n]; y: out f32[n]\n");
        s.push_str("# @bench grid = cdiv(n, BLOCK); BLOCK = 256\n");
        s.push_str("@triton.jit\ndef k(x, y, n, BLOCK: tl.constexpr):\n    pass\n");
        return s;
    }
    s.push_str("// @bench n = 1024; x: in f32[n]; y: out f32[n]\n");
    s.push_str("// @bench grid = cdiv(n, 256); block = 256\n");
    s.push_str("extern \"C\" __global__ void k(int n, const float* x, float* y) { }\n");
    s
}

/// Seconds of `program check --no-compile file`: the best of 3 runs (1 when a run
/// takes over 5 s).
fn check_seconds(program: &str, file: &std::path::Path) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t0 = Instant::now();
        let out = Command::new(program)
            .args(["check", "--no-compile"])
            .arg(file)
            .output()
            .expect("run kernel-lsp check");
        let s = t0.elapsed().as_secs_f64();
        assert!(!out.stdout.is_empty(), "check printed nothing");
        best = best.min(s);
        if s > 5.0 {
            break;
        }
    }
    best
}

/// About `bytes` of ordinary CUDA: kernels with loops, a spec each.
fn big_cuda(bytes: usize, variant: usize) -> String {
    let mut s = String::with_capacity(bytes + 1024);
    let mut k = 0;
    while s.len() < bytes {
        s.push_str(&format!(
            "// @bench n = 1 << 20; x: in f32[n]; y: out f32[n]\n// @bench grid = cdiv(n, 256); block = 256\n\
             __global__ void k{variant}_{k}(int n, const float* x, float* y) {{\n\
             \x20   int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
             \x20   for (int j = 0; j < 4; ++j) {{ if (i + j < n) y[i + j] = 2.0f * x[i + j] + {k}.0f; }}\n\
             }}\n\n"
        ));
        k += 1;
    }
    s
}

/// RSS before, after opening a 20 MB file, after 3 full replacements, and the peak, in MB.
async fn memory(program: &str) -> (f64, f64, f64, f64, usize) {
    let mut c = TestClient::spawn_program(program, &[]);
    // A budget the whole parse fits in, so the full cost is measured.
    c.initialize(
        json!({"compileOnType": false, "analysisBudgetMs": 600000}),
        &["utf-16"],
    )
    .await;
    let pid = c.child().and_then(|ch| ch.id()).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss_mb(pid);
    let uri = "file:///bench/huge.cu";
    let text = big_cuda(20_000_000, 0);
    c.open(uri, "cuda", &text).await;
    let _ = c.diagnostics(uri, Some(1)).await;
    let opened = rss_mb(pid);
    for v in 2..=4 {
        let replacement = big_cuda(20_000_000, v as usize);
        c.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri, "version": v}, "contentChanges": [{"text": replacement}]}),
        )
        .await;
        let _ = c.diagnostics(uri, Some(v)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    (before, opened, rss_mb(pid), peak_mb(pid), text.len())
}

#[tokio::main]
async fn main() {
    let mut programs = vec![("this build", env!("CARGO_BIN_EXE_kernel-lsp").to_string())];
    if let Ok(base) = std::env::var("KERNEL_LSP_BENCH_BASE") {
        programs.insert(0, ("KERNEL_LSP_BENCH_BASE", base));
    }
    let dir = std::env::temp_dir().join(format!("kernel-lsp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // KERNEL_LSP_BENCH_ONLY=memory skips the spec timing (e.g. under heaptrack).
    let only = std::env::var("KERNEL_LSP_BENCH_ONLY").unwrap_or_default();
    if only != "memory" {
        println!("spec checking: `kernel-lsp check --no-compile`, one kernel, N @bench lines");
        println!("| binary | file | shape | 10,000 lines | 20,000 lines | ratio |");
        println!("| --- | --- | --- | --- | --- | --- |");
        let rows = [
            ("cu", "undefined names"),
            ("cu", "unused names"),
            ("cu", "duplicates"),
            ("cu", "a chain"),
            ("py", "unused names"),
            ("py", "a chain"),
        ];
        for (name, program) in &programs {
            for (ext, shape) in rows {
                let mut secs = Vec::new();
                for n in [10_000, 20_000] {
                    let file = dir.join(format!("spec_{}_{n}.{ext}", shape.replace(' ', "_")));
                    std::fs::write(&file, spec_file(ext, shape, n)).unwrap();
                    secs.push(check_seconds(program, &file));
                }
                println!(
                    "| {name} | .{ext} | {shape} | {:.3} s | {:.3} s | {:.2} |",
                    secs[0],
                    secs[1],
                    secs[1] / secs[0]
                );
            }
        }

        println!();
    }
    println!("memory: a 20 MB CUDA file (syntax only) opened, then replaced whole 3 times");
    println!("| binary | RSS before | after open | after 3 replacements | growth / text (<= 3) | peak | peak / text (<= 3) |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (name, program) in &programs {
        let (before, opened, after, peak, len) = memory(program).await;
        let text_mb = len as f64 / (1024.0 * 1024.0);
        println!(
            "| {name} | {before:.1} MB | {opened:.1} MB | {after:.1} MB | {:.2} | {peak:.1} MB | {:.2} |",
            (after - before) / text_mb,
            (peak - before) / text_mb
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
