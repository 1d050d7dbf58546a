//! Issue #16, item 1: analysis never blocks the server. A document whose checks take a
//! long time does not delay answers about other documents, a newer edit supersedes the
//! running analysis, and the time budget stops the checks with a note that says so.
//! Assertions are on the order in which the client receives messages, not on timings.

use serde_json::{json, Value};

use crate::client::{render_diagnostics, TestClient};

const SMALL: &str = r#"// @bench n = 1 << 20, 4099
// @bench x: in f32[n]; y: inout f32[n]
// @bench a = 2.0
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#;

/// A document that takes long to check: `kernels` kernels, each with a spec of `lines`
/// statements that define names read by the next (and one undefined name each).
fn slow_document(kernels: usize, lines: usize) -> String {
    let mut s = String::new();
    for k in 0..kernels {
        for i in 0..lines {
            let prev = if i == 0 {
                "n".to_string()
            } else {
                format!("v{}", i - 1)
            };
            s.push_str(&format!("// @bench v{i} = {prev} + u{i}\n"));
        }
        s.push_str("// @bench n = 1024; x: in f32[n]; y: out f32[n]\n");
        s.push_str(&format!(
            "// @bench grid = cdiv(v{}, 256); block = 256\n",
            lines - 1
        ));
        s.push_str(&format!(
            "extern \"C\" __global__ void k{k}(int n, const float* x, float* y) {{ }}\n\n"
        ));
    }
    s
}

/// A session without compile checks and with this analysis budget. The tests that are
/// not about the budget give one the slow document fits in on a loaded machine (a debug
/// build checks it in about 2 s).
async fn started(budget_ms: u64) -> TestClient {
    let mut c = TestClient::in_process();
    c.initialize(
        json!({"compileOnType": false, "analysisBudgetMs": budget_ms}),
        &["utf-16"],
    )
    .await;
    c
}

fn is_diagnostics_for(n: &Value, uri: &str) -> bool {
    n["method"] == "textDocument/publishDiagnostics" && n["params"]["uri"] == uri
}

#[tokio::test]
async fn a_slow_document_does_not_delay_a_hover_on_another() {
    let mut c = started(600_000).await;
    let small = "file:///w/small.cu";
    c.open(small, "cuda", SMALL).await;
    let _ = c.diagnostics(small, Some(1)).await;

    let slow = "file:///w/slow.cu";
    c.open(slow, "cuda", &slow_document(40, 500)).await;
    // Hover on `saxpy` in the small file, sent right after the slow file was opened.
    let hover = c
        .request(
            "textDocument/hover",
            json!({"textDocument": {"uri": small}, "position": {"line": 4, "character": 30}}),
        )
        .await;
    assert!(
        hover["result"]["contents"]["value"]
            .as_str()
            .is_some_and(|v| v.contains("saxpy")),
        "hover on the small file: {hover}"
    );
    assert!(
        !c.seen().any(|n| is_diagnostics_for(n, slow)),
        "the hover was answered only after the slow document's checks ended"
    );
    // The slow document is still checked in full: one undefined name per statement.
    let diags = c.diagnostics(slow, Some(1)).await;
    let undefined = diags
        .iter()
        .filter(|d| {
            d["message"]
                .as_str()
                .unwrap_or("")
                .contains("is not defined")
        })
        .count();
    assert_eq!(undefined, 40 * 500);
}

#[tokio::test]
async fn quick_edits_supersede_the_running_analysis() {
    let mut c = started(600_000).await;
    let slow = "file:///w/slow.cu";
    c.open(slow, "cuda", &slow_document(40, 500)).await;
    // Five edits at once: each renames `u0` on the first line (`v0 = n + u0`).
    for v in 2..=6 {
        c.edit(slow, v, (0, 19), (0, 21), &format!("w{v}")).await;
    }
    let last = c.diagnostics(slow, Some(6)).await;
    assert!(
        last.iter().any(|d| d["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("`w6` is not defined")),
        "the last version's diagnostics name its text"
    );
    // Versions that were superseded while being checked were never published: at most
    // the first one and the last one reach the client (each publish is a full check).
    let published: Vec<i64> = c
        .seen()
        .filter(|n| is_diagnostics_for(n, slow))
        .filter_map(|n| n["params"]["version"].as_i64())
        .collect();
    assert!(
        published.iter().all(|v| *v == 1),
        "superseded versions were published: {published:?}"
    );
}

#[tokio::test]
async fn the_time_budget_stops_the_checks_and_says_so() {
    let mut c = started(1).await;
    let slow = "file:///w/slow.cu";
    c.open(slow, "cuda", &slow_document(40, 500)).await;
    let diags = c.diagnostics(slow, Some(1)).await;
    let first = render_diagnostics(&diags[..1]);
    assert!(
        first.starts_with("0:0-0:0 sev3 [kernel-lsp] kernel-lsp stopped checking this file after 1 ms (setting analysisBudgetMs)"),
        "{first}"
    );
    // With a budget it fits in, the same file is checked in full, and the note is gone.
    c.notify(
        "workspace/didChangeConfiguration",
        json!({"settings": {"compileOnType": false, "analysisBudgetMs": 600000}}),
    )
    .await;
    let diags = c.diagnostics(slow, Some(1)).await;
    assert!(diags.iter().all(|d| !d["message"]
        .as_str()
        .unwrap_or("")
        .contains("stopped checking")));
    assert_eq!(diags.len(), 40 * 500);
}

#[tokio::test]
async fn a_triton_file_with_20000_spec_lines_is_checked_within_the_default_budget() {
    // Each `#` line used to cost tree-sitter-python's scanner the rest of the run: 10,000
    // lines took 10 s, and the editor got only the budget note (issue #28).
    let mut c = TestClient::in_process();
    c.initialize(json!({"compileOnType": false}), &["utf-16"])
        .await;
    let mut src = String::from("import triton\nimport triton.language as tl\n\n");
    for i in 0..20_000 {
        src.push_str(&format!("# @bench v{i} = {i}\n"));
    }
    src.push_str("# @bench n = 1024; x: in f32[n]; y: out f32[n]\n");
    src.push_str("# @bench grid = cdiv(n, BLOCK); BLOCK = 256\n");
    src.push_str("@triton.jit\ndef k(x, y, n, BLOCK: tl.constexpr):\n    pass\n");
    let uri = "file:///w/long_spec.py";
    c.open(uri, "python", &src).await;
    let diags = c.diagnostics(uri, Some(1)).await;
    assert!(
        diags.iter().all(|d| !d["message"]
            .as_str()
            .unwrap_or("")
            .contains("stopped checking")),
        "{}",
        render_diagnostics(&diags[..diags.len().min(3)])
    );
    // Every unused size is named, the last one on its own line.
    let last = diags
        .iter()
        .find(|d| d["message"].as_str().unwrap_or("").contains("`v19999`"))
        .expect("a finding for the last spec line");
    assert_eq!(last["range"]["start"]["line"], 20_002);
}
