//! Big documents (issue #16, item 1). Two measurements, each on this build and, when
//! `KERNEL_LSP_BENCH_BASE` names another kernel-lsp binary (e.g. the main branch's), on
//! that one in the same run:
//! - spec checking at 10,000 and 20,000 `@bench` lines: `kernel-lsp check --no-compile`
//!   on one kernel whose spec has that many statements of one shape (the shapes that
//!   were quadratic), in CUDA and in Triton (whose parse of comment runs was quadratic,
//!   issue #28); linear checking takes about twice as long at 20,000;
//! - memory of a syntax-only document: the server's RSS before and after opening a
//!   20 MB CUDA file and replacing its whole text 3 times (target: the growth is at
//!   most 3 times the text);
//! - the same replacement piece by piece, in this process, with a counting allocator:
//!   the bytes each stage of the server's path allocates at its peak and holds after it
//!   (the frame decoder, tower-lsp's request, the typed params, the document).
//!
//! Run with `cargo bench --bench big_documents`; record results in docs/benchmarks.md.

#[path = "../../tests/e2e/client.rs"]
#[allow(dead_code)]
mod client;

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use client::{peak_mb, rss_mb, TestClient};
use kernel_lsp::document::Document;
use kernel_lsp::lsp::frame::{Decoder, Event};
use kernel_lsp::syntax::Lang;
use serde_json::json;
use tower_lsp::lsp_types::DidChangeTextDocumentParams;

/// The system allocator, counting the bytes live and their peak (for [`pieces`]).
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call goes to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // A growth is counted as a copy may do it, the new block beside the old one (so
        // a peak here is an upper bound: glibc moves a big block with mremap instead);
        // a shrink is done in place.
        if new_size > layout.size() {
            grew(new_size);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One stage of [`pieces`]: bytes allocated at its peak and still held after it, above
/// what was live before it. The counts are of blocks asked for (capacity, a `realloc`
/// as the new block beside the old), so they bound the resident memory from above.
struct Stage {
    base: usize,
}

impl Stage {
    fn start() -> Stage {
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        Stage { base }
    }

    /// Print the stage's row; returns its peak, in bytes live in the process.
    fn end(self, name: &str, text: usize) -> usize {
        let peak = PEAK.load(Ordering::Relaxed);
        let held = LIVE.load(Ordering::Relaxed) as f64 - self.base as f64;
        row(name, peak - self.base, held, text);
        peak
    }
}

fn row(name: &str, peak: usize, held: f64, text: usize) {
    let mb = |b: f64| b / (1024.0 * 1024.0);
    println!(
        "| {name} | {:.1} MB | {:.2} | {:.1} MB |",
        mb(peak as f64),
        peak as f64 / text as f64,
        mb(held)
    );
}

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

/// A whole-text `didChange` of a 20 MB document, stage by stage as the server runs it,
/// with the old text open: what each stage allocates beyond what came before it.
fn pieces() {
    let old = big_cuda(20_000_000, 0);
    let new = big_cuda(20_000_000, 1);
    let text = new.len();
    let body = serde_json::to_vec(&json!({
        "jsonrpc": "2.0", "method": "textDocument/didChange",
        "params": {"textDocument": {"uri": "file:///bench/huge.cu", "version": 2},
                   "contentChanges": [{"text": new}]},
    }))
    .expect("serializes");
    drop(new);
    let frame = [
        format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes(),
        &body,
    ]
    .concat();
    drop(body);
    let mut doc = Document::unparsed(Lang::Cuda, 1, &old);
    drop(old);
    println!("memory piece by piece: a 20 MB whole-text didChange, in this process");
    println!("| stage | peak | peak / text | held after |");
    println!("| --- | --- | --- | --- |");
    let start = LIVE.load(Ordering::Relaxed);
    let mut peak = 0;
    // In 64 KB reads, each followed by a look for a whole message, as the server's
    // reader does; the last read completes the body.
    let stage = Stage::start();
    let mut decoder = Decoder::new();
    let chunks: Vec<&[u8]> = frame.chunks(64 << 10).collect();
    let (last, reads) = chunks.split_last().expect("a frame has bytes");
    for chunk in reads {
        decoder.push(chunk);
        assert!(
            decoder.next_event().is_none(),
            "a message before the body's end"
        );
    }
    peak = peak.max(stage.end("frame bytes in the decoder", text));
    let stage = Stage::start();
    decoder.push(last);
    let Some(Event::Message(value)) = decoder.next_event() else {
        panic!("the frame did not decode");
    };
    peak = peak.max(stage.end("decoder: parse and check the body", text));
    let stage = Stage::start();
    let request: tower_lsp::jsonrpc::Request = serde_json::from_value(value).expect("a request");
    peak = peak.max(stage.end("tower-lsp's Request from the Value", text));
    let stage = Stage::start();
    let (_, _, params) = request.into_parts();
    let params: DidChangeTextDocumentParams =
        serde_json::from_value(params.expect("params")).expect("didChange params");
    peak = peak.max(stage.end("typed params from the Request", text));
    let stage = Stage::start();
    for change in params.content_changes {
        doc.replace_all(change.text);
    }
    peak = peak.max(stage.end("the document takes the text", text));
    drop(decoder);
    let held = LIVE.load(Ordering::Relaxed) as f64 - start as f64;
    row("all of it, beside the old text", peak - start, held, text);
    println!();
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
    pieces();
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
