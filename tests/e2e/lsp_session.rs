//! LSP sessions against the real backend: what an editor would receive.

use expect_test::expect;
use serde_json::{json, Value};

use crate::client::{render_diagnostics, TestClient};
use crate::tools;

const SAXPY_BAD: &str = r#"// @bench n = 1 << 20, 4099
// @bench x: in f33[n]
// @bench y: inout f32[n]
// @bench a = 2.0
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#;

async fn started(encodings: &[&str]) -> TestClient {
    let mut c = TestClient::in_process();
    // No compile: these tests are about syntax and spec; NVRTC has its own test.
    c.initialize(json!({"compileOnType": false}), encodings)
        .await;
    c
}

#[tokio::test]
async fn spec_mistake_is_reported_on_its_columns_and_clears_when_fixed() {
    let mut c = started(&["utf-16"]).await;
    let uri = "file:///w/saxpy.cu";
    c.open(uri, "cuda", SAXPY_BAD).await;
    let diags = c.diagnostics(uri, Some(1)).await;
    expect!["1:16-1:19 sev1 [@bench] `f33` is not an element type; use one of f16, bf16, f32, f64, i8, i16, i32, i64, u8, u32, bool; did you mean `f32`?"].assert_eq(&render_diagnostics(&diags));
    // Fix `f33` -> `f32` (line 1, columns 16..19) as an editor would: a ranged edit.
    c.edit(uri, 2, (1, 16), (1, 19), "f32").await;
    let diags = c.diagnostics(uri, Some(2)).await;
    assert_eq!(
        render_diagnostics(&diags),
        "",
        "the fix clears the diagnostic"
    );
}

#[tokio::test]
async fn positions_follow_the_negotiated_encoding() {
    // An astral character (2 UTF-16 units, 4 UTF-8 bytes) before a syntax error.
    let src = "__global__ void k(int n) { /* 😀 */ int x = ; }\n";
    let mut cols = Vec::new();
    for enc in ["utf-16", "utf-8"] {
        let mut c = TestClient::in_process();
        let init = c.initialize(json!({"compileOnType": false}), &[enc]).await;
        assert_eq!(
            init["result"]["capabilities"]["positionEncoding"],
            json!(enc)
        );
        c.open("file:///w/k.cu", "cuda", src).await;
        let diags = c.diagnostics("file:///w/k.cu", Some(1)).await;
        let d = diags
            .iter()
            .find(|d| d["source"] == "syntax")
            .expect("a syntax diagnostic");
        cols.push(d["range"]["start"]["character"].as_u64().unwrap());
    }
    // `int x = ;` starts after the emoji; UTF-8 counts it as 4 units, UTF-16 as 2.
    assert_eq!(cols[1] - cols[0], 2, "{cols:?}");
    // Without any offered encoding the server uses UTF-16, as LSP requires.
    let mut c = TestClient::in_process();
    let init = c.initialize(json!({}), &[]).await;
    assert_eq!(init["result"]["capabilities"]["positionEncoding"], "utf-16");
}

#[tokio::test]
async fn symbols_hover_and_skeleton_action() {
    let mut c = started(&["utf-16"]).await;
    let uri = "file:///w/two.cu";
    let src = format!(
        "{}\n__device__ float twice(float v) {{ return 2 * v; }}\n__global__ void scale(const float* __restrict__ in, float* out, int n) {{\n    int i = threadIdx.x;\n    if (i < n) out[i] = twice(in[i]);\n}}\n",
        SAXPY_BAD.replace("f33", "f32")
    );
    c.open(uri, "cuda-cpp", &src).await;
    let _ = c.diagnostics(uri, Some(1)).await;

    let syms = c
        .request(
            "textDocument/documentSymbol",
            json!({"textDocument": {"uri": uri}}),
        )
        .await;
    let names: Vec<String> = syms["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            format!(
                "{} ({})",
                s["name"].as_str().unwrap(),
                s["detail"].as_str().unwrap()
            )
        })
        .collect();
    expect![[r#"
        saxpy (__global__ · 2 case(s))
        scale (__global__ · no @bench spec)"#]]
    .assert_eq(&names.join("\n"));

    // Hover on `saxpy` (line 5, inside the name).
    let hover = c
        .request(
            "textDocument/hover",
            json!({"textDocument": {"uri": uri}, "position": {"line": 5, "character": 30}}),
        )
        .await;
    expect![[r#"
        ```cuda
        extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
        ```

        ---
        **@bench `saxpy`**: 2 cases (case 0 is timed), 3 trials per case

        | case | n | a |
        |---|---|---|
        | 0 (timed) | 1048576 | 2.0 |
        | 1 | 4099 | 2.0 |

        | buffer (case 0) | role | dtype | shape | bytes | init |
        |---|---|---|---|---|---|
        | `x` | in | f32 | [1048576] | 4.0 MiB | uniform(-1.0, 1.0) |
        | `y` | inout | f32 | [1048576] | 4.0 MiB | uniform(-1.0, 1.0) |

        **Launch** (case 0): grid (4096, 1, 1) × block (256, 1, 1), 0 B dynamic shared memory

        **Moves** (case 0): 12.0 MiB

        **Tolerance**: f32 atol 1e-5 rtol 0.0001

        **Reference**: the recorded baseline of this kernel

        ---
        **Resources**: unknown (compile checks are off (setting compileOnType))
    "#]]
    .assert_eq(hover["result"]["contents"]["value"].as_str().unwrap());

    // Code action on `scale`, which has no spec: insert a skeleton.
    let actions = c
        .request(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": uri}, "range": {"start": {"line": 12, "character": 20}, "end": {"line": 12, "character": 20}}, "context": {"diagnostics": []}}),
        )
        .await;
    let action = &actions["result"][0];
    assert_eq!(action["title"], "Insert @bench spec for `scale`");
    let edit = &action["edit"]["documentChanges"][0];
    assert_eq!(edit["textDocument"]["version"], 1);
    let te = &edit["edits"][0];
    expect![[r#"
        {"character":0,"line":11} // @bench in: in f32[n]
        // @bench out: out f32[n]
        // @bench n = 1 << 20, 4099
        // @bench grid = cdiv(n, 256); block = 256
    "#]]
    .assert_eq(&format!(
        "{} {}",
        te["range"]["start"],
        te["newText"].as_str().unwrap()
    ));

    // Apply it as the editor would; the inserted spec must check clean.
    let line = te["range"]["start"]["line"].as_u64().unwrap() as u32;
    c.edit(
        uri,
        2,
        (line, 0),
        (line, 0),
        te["newText"].as_str().unwrap(),
    )
    .await;
    let diags = c.diagnostics(uri, Some(2)).await;
    assert_eq!(
        render_diagnostics(&diags),
        "",
        "the skeleton analyzes without errors"
    );
}

/// A spec error whose message names the fix has a quick fix that writes it; a kernel
/// whose spec has errors is offered no job (Benchmark, Optimize, Tune) until it is fixed.
#[tokio::test]
async fn a_named_fix_is_a_quick_fix_and_a_broken_spec_offers_no_job() {
    let mut c = started(&["utf-16"]).await;
    let uri = "file:///w/saxpy.cu";
    c.open(uri, "cuda", SAXPY_BAD).await;
    let diags = c.diagnostics(uri, Some(1)).await;
    let at = |line: u32| json!({"start": {"line": line, "character": 18}, "end": {"line": line, "character": 18}});
    let ask = |range: Value, diags: &[Value]| json!({"textDocument": {"uri": uri}, "range": range, "context": {"diagnostics": diags}});
    let actions = c
        .request("textDocument/codeAction", ask(at(1), &diags))
        .await;
    let titles: Vec<&str> = actions["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["title"].as_str().unwrap())
        .collect();
    assert!(titles.contains(&"Replace with `f32`"), "{titles:?}");
    for job in [
        "Benchmark `saxpy`",
        "Optimize `saxpy`: next step",
        "Tune parameters of `saxpy`",
    ] {
        assert!(
            !titles.contains(&job),
            "{job} offered on a broken spec: {titles:?}"
        );
    }
    let fix = actions["result"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["title"] == "Replace with `f32`")
        .unwrap();
    assert_eq!(fix["kind"], "quickfix");
    let te = &fix["edit"]["documentChanges"][0]["edits"][0];
    assert_eq!(te["newText"], "f32");
    assert_eq!(te["range"], diags[0]["range"]);

    // Applied as the editor would: the spec checks clean and the jobs are offered.
    c.edit(uri, 2, (1, 16), (1, 19), "f32").await;
    assert_eq!(render_diagnostics(&c.diagnostics(uri, Some(2)).await), "");
    let actions = c.request("textDocument/codeAction", ask(at(6), &[])).await;
    assert!(
        actions.to_string().contains("Benchmark `saxpy`"),
        "{actions}"
    );
}

#[tokio::test]
async fn bad_requests_get_errors_and_the_server_keeps_serving() {
    let mut c = started(&["utf-16"]).await;
    // A request for a document never opened.
    let r = c
        .request("textDocument/hover", json!({"textDocument": {"uri": "file:///nope.cu"}, "position": {"line": 0, "character": 0}}))
        .await;
    assert_eq!(r["error"]["code"], -32602);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is not open"),
        "{r}"
    );

    // An edit past the end of the document: an error message, text unchanged.
    let uri = "file:///w/a.cu";
    c.open(uri, "cuda", SAXPY_BAD).await;
    let _ = c.diagnostics(uri, Some(1)).await;
    c.edit(uri, 2, (500, 0), (501, 0), "garbage").await;
    let msg = c
        .wait_for("showMessage", |n| n["method"] == "window/showMessage")
        .await;
    assert!(
        msg["params"]["message"]
            .as_str()
            .unwrap()
            .contains("line 500 is past the end"),
        "{msg}"
    );
    let syms = c
        .request(
            "textDocument/documentSymbol",
            json!({"textDocument": {"uri": uri}}),
        )
        .await;
    assert_eq!(syms["result"][0]["name"], "saxpy");
}

#[tokio::test]
async fn plain_python_is_ignored_and_triton_is_checked() {
    let mut c = started(&["utf-16"]).await;
    c.open("file:///w/plain.py", "python", "def f(:\n  pass\n")
        .await;
    let tri = "import triton\nimport triton.language as tl\n\n# @bench n = 1000; BLOCK = 128\n# @bench x_ptr: in f32[n]\n# @bench grid = cdiv(n, BLOCK) extra\n@triton.jit\ndef k(x_ptr, n, BLOCK: tl.constexpr):\n    pass\n";
    c.open("file:///w/tri.py", "python", tri).await;
    let diags = c.diagnostics("file:///w/tri.py", Some(1)).await;
    expect!["5:31-5:36 sev1 [@bench] unexpected `extra` after the statement; separate statements with `;` and put remarks on a comment line without @bench"].assert_eq(&render_diagnostics(&diags));
    // Nothing was ever published for the plain Python file.
    assert!(
        !c.notifications
            .iter()
            .any(|n| n["params"]["uri"] == "file:///w/plain.py"),
        "plain Python files get no diagnostics"
    );
}

#[tokio::test]
async fn syntax_errors_are_one_per_region() {
    let mut c = started(&["utf-16"]).await;
    let src =
        "__global__ void k(float* x, int n) {\n    int i = threadIdx.x\n    x[i] = (1.0f;\n}\n";
    c.open("file:///w/s.cu", "cuda", src).await;
    let diags = c.diagnostics("file:///w/s.cu", Some(1)).await;
    expect!["2:4-2:17 sev1 [syntax] syntax error: unexpected `x`"]
        .assert_eq(&render_diagnostics(&diags));
}

#[tokio::test]
async fn big_texts_keep_their_characters_positions_and_edits() {
    // Bodies of 1 MiB and more have their texts decoded apart from the rest of the
    // message (issue #28): escapes, non-ASCII text, CRLF lines, a whole-text change and
    // a ranged edit in UTF-16 columns after it must read as in a small document.
    let mut c = started(&["utf-16"]).await;
    let uri = "file:///w/big_text.cu";
    let mut src = String::new();
    while src.len() < 1_200_000 {
        src.push_str("// naïve ∑ 🚀 \"quoted\" \\ back\tslash\r\n");
    }
    let kernel = "__global__ void first(float* y) { /* 🚀 */ y[0] = 1.0f; }\n";
    c.open(uri, "cuda", &(src.clone() + kernel)).await;
    let _ = c.diagnostics(uri, Some(1)).await;
    let renamed = kernel.replace("first", "second");
    let changed = src.clone() + &renamed;
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": changed}]}),
    )
    .await;
    assert_eq!(render_diagnostics(&c.diagnostics(uri, Some(2)).await), "");
    // Delete `1.0f`, after the 🚀 (two UTF-16 units) on the kernel's line.
    let line = changed.matches('\n').count() as u32 - 1;
    let at = renamed.find("1.0f").unwrap();
    let col = renamed[..at].encode_utf16().count() as u32;
    c.edit(uri, 3, (line, col), (line, col + 4), "").await;
    let big = c.diagnostics(uri, Some(3)).await;
    let syms = c
        .request(
            "textDocument/documentSymbol",
            json!({"textDocument": {"uri": uri}}),
        )
        .await;
    assert_eq!(syms["result"][0]["name"], "second");
    assert_eq!(syms["result"][0]["range"]["start"]["line"], line);
    // The same line in a small document, below as many empty lines, gets the same.
    let small = "file:///w/small_text.cu";
    let edited = "\n".repeat(line as usize) + &renamed.replace("1.0f", "");
    c.open(small, "cuda", &edited).await;
    let expected = render_diagnostics(&c.diagnostics(small, Some(1)).await);
    assert!(!expected.is_empty(), "the edit leaves a syntax error");
    assert_eq!(render_diagnostics(&big), expected);
}

#[tokio::test]
async fn huge_files_get_syntax_checks_only_and_say_so() {
    let mut c = started(&["utf-16"]).await;
    let mut src = String::from("// @bench n = 4; bogus\n__global__ void k(int n) {}\n");
    while src.len() < 2_200_000 {
        src.push_str("// padding padding padding padding padding padding padding padding\n");
    }
    c.open("file:///w/big.cu", "cuda", &src).await;
    let diags = c.diagnostics("file:///w/big.cu", Some(1)).await;
    expect!["0:0-0:0 sev3 [kernel-lsp] this file is 2.1 MiB: past 2.0 MiB kernel-lsp checks syntax only (setting maxFileBytes)"].assert_eq(&render_diagnostics(&diags));
    // Such a file is parsed in pieces (no whole tree is held): a syntax error far past
    // the first piece is still reported on its own line.
    let line = src.lines().count();
    src.push_str("__global__ void bad(float* y) { y[0] = ; }\n");
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": "file:///w/big.cu", "version": 2}, "contentChanges": [{"text": src}]}),
    )
    .await;
    let diags = c.diagnostics("file:///w/big.cu", Some(2)).await;
    let rendered = render_diagnostics(&diags);
    assert!(
        rendered.contains(&format!(
            "{line}:37-{line}:38 sev1 [syntax] syntax error: unexpected `=`"
        )),
        "{rendered}"
    );
}

#[tokio::test]
async fn a_panicking_handler_answers_an_error_and_the_server_lives() {
    let mut c = TestClient::spawn_binary(&[("KERNEL_LSP_DEBUG_COMMANDS", "1")]);
    c.initialize(json!({"compileOnType": false}), &["utf-16"])
        .await;
    let r = c.request("kernel-lsp/debugPanic", json!({})).await;
    assert_eq!(r["error"]["code"], -32603, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("deliberate panic"),
        "{r}"
    );
    c.open("file:///w/a.cu", "cuda", SAXPY_BAD).await;
    let diags = c.diagnostics("file:///w/a.cu", Some(1)).await;
    assert_eq!(diags.len(), 1, "still serving after the panic: {diags:?}");
    let r = c.request("shutdown", Value::Null).await;
    assert_eq!(r["result"], Value::Null);
    c.notify("exit", Value::Null).await;
    let status = c.child().unwrap().wait().await.unwrap();
    assert!(status.success(), "clean exit after shutdown: {status}");
}

#[tokio::test]
async fn nvrtc_errors_and_ptxas_hints_arrive_after_typing() {
    if let Err(why) = tools::nvrtc_available() {
        return tools::skip("nvrtc_errors_and_ptxas_hints_arrive_after_typing", &why);
    }
    let mut c = TestClient::in_process();
    c.initialize(json!({"compileDebounceMs": 50}), &["utf-16"])
        .await;
    let uri = "file:///w/k.cu";
    let good = SAXPY_BAD.replace("f33", "f32");
    c.open(uri, "cuda", &good).await;
    // Wait until the compile has run: inlay hints then show registers.
    // By the clock: NVRTC and ptxas share 2 cores with the whole suite in CI.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut hint = Value::Null;
    while std::time::Instant::now() < deadline {
        let r = c
            .request("textDocument/inlayHint", json!({"textDocument": {"uri": uri}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 20, "character": 0}}}))
            .await;
        if r["result"].as_array().is_some_and(|a| !a.is_empty()) {
            hint = r["result"][0].clone();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    if hint.is_null() {
        if tools::required() {
            panic!("no ptxas inlay hint 60 s after opening");
        }
        return tools::skip(
            "nvrtc_errors_and_ptxas_hints_arrive_after_typing",
            "ptxas not found: no hint",
        );
    }
    assert_eq!(hint["position"], json!({"line": 5, "character": 32}));
    let label = hint["label"].as_str().unwrap();
    assert!(label.ends_with("regs · 0 spills"), "{label}");

    // Rename `a` in the body to an undefined `alpha` (line 7: `    if (i < n) y[i] = a * ...`).
    c.edit(uri, 2, (7, 22), (7, 23), "alpha").await;
    let diags = c
        .wait_for("nvrtc diagnostics", |n| {
            n["method"] == "textDocument/publishDiagnostics"
                && n["params"]["diagnostics"]
                    .as_array()
                    .is_some_and(|d| d.iter().any(|d| d["source"] == "nvrtc"))
        })
        .await;
    expect![[r#"7:22-7:27 sev1 [nvrtc] identifier "alpha" is undefined"#]].assert_eq(
        &render_diagnostics(diags["params"]["diagnostics"].as_array().unwrap()),
    );
}

#[tokio::test]
async fn editing_a_file_whose_tree_was_dropped_still_checks_correctly() {
    // Six open files: the first one opened loses its tree to the memory budget.
    let mut c = started(&["utf-16"]).await;
    for i in 0..6 {
        let uri = format!("file:///w/f{i}.cu");
        c.open(&uri, "cuda", &SAXPY_BAD.replace("f33", "f32")).await;
        let _ = c.diagnostics(&uri, Some(1)).await;
    }
    // Break the first file's spec, then fix it again.
    c.edit("file:///w/f0.cu", 2, (1, 16), (1, 19), "f33").await;
    let diags = c.diagnostics("file:///w/f0.cu", Some(2)).await;
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert_eq!(
        diags[0]["range"]["start"],
        json!({"line": 1, "character": 16})
    );
    c.edit("file:///w/f0.cu", 3, (1, 16), (1, 19), "f32").await;
    assert_eq!(
        c.diagnostics("file:///w/f0.cu", Some(3)).await,
        Vec::<Value>::new()
    );
}

#[tokio::test]
async fn without_nvrtc_the_server_says_so_once_and_keeps_checking() {
    // Hide every place NVRTC could come from: no venv, no CUDA variables, a PATH whose
    // python3 (if any) has no NVIDIA wheels, and a setting that points nowhere.
    let mut c = TestClient::spawn_binary(&[
        ("VIRTUAL_ENV", ""),
        ("CONDA_PREFIX", ""),
        ("CUDA_HOME", ""),
        ("CUDA_PATH", ""),
        ("KERNEL_LSP_NVRTC", ""),
        ("PATH", "/nonexistent"),
    ]);
    if std::path::Path::new("/usr/local/cuda").exists() {
        return tools::skip(
            "without_nvrtc_the_server_says_so_once",
            "/usr/local/cuda exists on this machine",
        );
    }
    c.initialize(
        json!({"compileDebounceMs": 0, "nvrtcPath": "/nonexistent/libnvrtc.so"}),
        &["utf-16"],
    )
    .await;
    for i in 0..2 {
        let uri = format!("file:///w/n{i}.cu");
        c.open(&uri, "cuda", SAXPY_BAD).await;
        let diags = c.diagnostics(&uri, Some(1)).await;
        assert_eq!(diags.len(), 1, "spec checks still run: {diags:?}");
    }
    let msg = c
        .wait_for("showMessage", |n| n["method"] == "window/showMessage")
        .await;
    let text = msg["params"]["message"].as_str().unwrap();
    assert!(
        text.starts_with("kernel-lsp: compile checks are off:"),
        "{text}"
    );
    assert!(
        text.contains("nvidia-cuda-nvrtc-cu12"),
        "says what to install: {text}"
    );
    // A third file, and still only the one message.
    c.open("file:///w/n2.cu", "cuda", SAXPY_BAD).await;
    let _ = c.diagnostics("file:///w/n2.cu", Some(1)).await;
    let r = c
        .request(
            "textDocument/documentSymbol",
            json!({"textDocument": {"uri": "file:///w/n2.cu"}}),
        )
        .await;
    assert_eq!(r["result"][0]["name"], "saxpy");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let _ = c
        .request(
            "textDocument/documentSymbol",
            json!({"textDocument": {"uri": "file:///w/n2.cu"}}),
        )
        .await;
    assert!(
        !c.notifications
            .iter()
            .any(|n| n["method"] == "window/showMessage"),
        "the message is shown once: {:?}",
        c.notifications
    );
}

#[tokio::test]
async fn empty_files_and_huge_signatures_are_fine() {
    let mut c = started(&["utf-16"]).await;
    c.open("file:///w/empty.cu", "cuda", "").await;
    assert_eq!(
        c.diagnostics("file:///w/empty.cu", Some(1)).await,
        Vec::<Value>::new()
    );
    let params: Vec<String> = (0..200).map(|i| format!("float* p{i}")).collect();
    let src = format!("__global__ void wide({}) {{}}\n", params.join(", "));
    c.open("file:///w/wide.cu", "cuda", &src).await;
    let diags = c.diagnostics("file:///w/wide.cu", Some(1)).await;
    assert_eq!(diags, Vec::<Value>::new(), "no spec, no errors");
    let hover = c
        .request("textDocument/hover", json!({"textDocument": {"uri": "file:///w/wide.cu"}, "position": {"line": 0, "character": 17}}))
        .await;
    let text = hover["result"]["contents"]["value"].as_str().unwrap();
    assert!(
        text.contains("float* p199") || text.ends_with(" …\n```\n") || text.contains("…"),
        "{text}"
    );
    assert!(text.contains("Insert @bench spec"), "{text}");
}
