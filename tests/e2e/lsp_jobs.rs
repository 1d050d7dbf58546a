//! Editor jobs over the real binary's stdio: "Tune parameters" runs on Triton's CPU
//! interpreter with `$/progress`, a second job on the same kernel is refused while the
//! first runs, a client that does not take the edit leaves the document alone, and
//! unknown commands are errors.

use std::time::Duration;

use serde_json::{json, Value};

use crate::bench_triton::python;
use crate::client::TestClient;
use crate::tools;

const ADD: &str = "import triton\nimport triton.language as tl\n\n\n# @bench n = 4096, 1000\n# @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]\n# @bench grid = cdiv(n, BLOCK); BLOCK = 64\n# @bench tune BLOCK in [64, 1024]\n@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    m = offs < n\n    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)\n";

/// A scratch folder and a server over stdio whose worker runs Triton on the CPU
/// interpreter, with the policy state inside the folder. None (after a visible SKIP)
/// when no Python with torch and triton is available.
fn job_session(test: &str, tag: &str) -> Option<(std::path::PathBuf, TestClient)> {
    let py = match python() {
        Ok(p) => p,
        Err(why) => {
            tools::skip(test, &why);
            return None;
        }
    };
    let dir = std::env::temp_dir().join(format!("kernel-lsp-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("policy");
    let c = TestClient::spawn_binary(&[
        ("KERNEL_LSP_PYTHON", py.as_str()),
        ("TRITON_INTERPRET", "1"),
        ("KERNEL_LSP_DATA_DIR", data.to_str().unwrap()),
    ]);
    Some((dir, c))
}

#[tokio::test]
async fn a_second_job_on_the_same_kernel_is_refused_and_progress_is_reported() {
    let Some((dir, mut c)) = job_session("a_second_job_on_the_same_kernel_is_refused", "jobs")
    else {
        return;
    };
    let file = dir.join("add.py");
    std::fs::write(&file, ADD).unwrap();
    let init = c
        .initialize(json!({"compileOnType": false}), &["utf-16"])
        .await;
    let cmds = init["result"]["capabilities"]["executeCommandProvider"]["commands"].clone();
    assert!(
        cmds.as_array().unwrap().contains(&json!("kernel-lsp.tune")),
        "{cmds}"
    );
    let uri = format!("file://{}", file.display());
    c.open(&uri, "python", ADD).await;

    let exec = |command: &str, token: Option<&str>| {
        let mut p =
            json!({"command": command, "arguments": [{"uri": uri, "kernel": "add_kernel"}]});
        if let Some(t) = token {
            p["workDoneToken"] = json!(t);
        }
        p
    };
    let tune = c
        .send_request(
            "workspace/executeCommand",
            exec("kernel-lsp.tune", Some("job-1")),
        )
        .await;
    let bench = c
        .send_request("workspace/executeCommand", exec("kernel-lsp.bench", None))
        .await;
    let refused = c.response(bench, Duration::from_secs(20)).await;
    assert_eq!(refused["result"]["outcome"], "failed", "{refused}");
    assert!(
        refused["result"]["message"]
            .as_str()
            .unwrap()
            .contains("a job is already running on `add_kernel`"),
        "{refused}"
    );

    // This test client refuses `workspace/applyEdit`: the user is told, and the verified
    // result stays available (and in the history).
    let done = c.response(tune, Duration::from_secs(240)).await;
    let msg = done["result"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(done["result"]["outcome"], "failed", "{done}");
    assert!(
        msg.contains("the editor refused the edit: the test client applies no edits"),
        "{msg}"
    );
    let progress: Vec<&Value> = c
        .seen()
        .filter(|n| n["method"] == "$/progress" && n["params"]["token"] == "job-1")
        .collect();
    let kinds: Vec<&str> = progress
        .iter()
        .filter_map(|n| n["params"]["value"]["kind"].as_str())
        .collect();
    assert_eq!(kinds.first(), Some(&"begin"), "{progress:?}");
    assert_eq!(kinds.last(), Some(&"end"), "{progress:?}");
    assert!(
        progress.iter().any(|n| n["params"]["value"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("verifying BLOCK=1024"))),
        "a stage names the candidate being verified: {progress:?}"
    );
    let history =
        std::fs::read_to_string(dir.join(".kernel-lsp/history/add.py/add_kernel.jsonl")).unwrap();
    assert!(history.contains("\"accepted\":\"BLOCK=1024\""), "{history}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        ADD,
        "the server never writes the file"
    );

    // Code lenses for clients that prefer them: the actions above the kernel.
    let lenses = c
        .request(
            "textDocument/codeLens",
            json!({"textDocument": {"uri": uri}}),
        )
        .await;
    let titles: Vec<&str> = lenses["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["command"]["title"].as_str().unwrap())
        .collect();
    assert!(
        titles.ends_with(&["▶ Benchmark", "⚡ Optimize", "↺ Revert"]),
        "{titles:?}"
    );
    assert_eq!(
        lenses["result"][0]["range"]["start"]["line"], 9,
        "at the kernel's name"
    );

    // Unknown commands and bad arguments are errors, and the server goes on.
    let bad = c
        .request(
            "workspace/executeCommand",
            json!({"command": "kernel-lsp.nope", "arguments": []}),
        )
        .await;
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown command"),
        "{bad}"
    );
    let bad = c
        .request(
            "workspace/executeCommand",
            json!({"command": "kernel-lsp.bench", "arguments": [{"kernel": 3}]}),
        )
        .await;
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("{uri, kernel | position}"),
        "{bad}"
    );
    let again = c
        .request(
            "workspace/executeCommand",
            exec("kernel-lsp.showHistory", None),
        )
        .await;
    assert!(
        again["result"]["message"]
            .as_str()
            .unwrap()
            .contains("report written to"),
        "{again}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

const BROKEN_OP: (&str, &str) = (
    "tl.load(x_ptr + offs, mask=m) + tl.load",
    "tl.load(x_ptr + offs, mask=m) - tl.load",
);

#[tokio::test]
async fn a_failing_kernel_gets_the_diagnostic_quick_fixes_and_a_verified_fix_from_the_coder() {
    use crate::llm_server::{ReplayServer, Scripted};
    let fixed = "```python\n@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    m = offs < n\n    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)\n```";
    let server = ReplayServer::start(vec![Scripted::openai(fixed)]);
    let Some((dir, mut c)) = job_session("a_failing_kernel_gets_the_diagnostic", "fix") else {
        return;
    };
    let file = dir.join("add.py");
    std::fs::write(&file, ADD).unwrap();
    let settings = json!({
        "compileOnType": false,
        "applyMode": "offer",
        "llm": {"coder": {"provider": "openai", "url": server.url(), "model": "replay", "maxRetries": 0}, "samples": 1}
    });
    c.initialize(settings, &["utf-16"]).await;
    let uri = format!("file://{}", file.display());
    c.open(&uri, "python", ADD).await;
    let exec = |command: &str| json!({"command": command, "arguments": [{"uri": uri, "kernel": "add_kernel"}]});

    // The first benchmark pins the baseline.
    let r = c.execute(exec("kernel-lsp.bench")).await;
    assert!(
        r["result"]["message"]
            .as_str()
            .unwrap()
            .contains("pinned as the baseline"),
        "{r}"
    );

    // Break the kernel in the editor (not on disk), benchmark again: it fails.
    let line = 12u32;
    let col = ADD
        .lines()
        .nth(line as usize)
        .unwrap()
        .find(BROKEN_OP.0)
        .unwrap() as u32;
    let plus = col + BROKEN_OP.0.rfind('+').unwrap() as u32;
    c.edit(&uri, 2, (line, plus), (line, plus + 1), "-").await;
    let r = c.execute(exec("kernel-lsp.bench")).await;
    assert_eq!(r["result"]["outcome"], "failed", "{r}");
    let d = verify_diagnostic(&mut c).await;
    assert_eq!(d["severity"], 1);
    assert_eq!(
        d["range"]["start"],
        json!({"line": 9, "character": 4}),
        "on the kernel name"
    );
    assert!(d["message"].as_str().unwrap().contains("out_ptr["), "{d}");
    let related = &d["relatedInformation"][0];
    assert_eq!(
        related["location"]["range"]["start"]["line"], 5,
        "the spec line of out_ptr: {d}"
    );

    // The quick fixes are offered for that diagnostic.
    let actions = c
        .request(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": uri}, "range": d["range"], "context": {"diagnostics": [d]}}),
        )
        .await;
    let titles: Vec<&str> = actions["result"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "quickfix")
        .map(|a| a["title"].as_str().unwrap())
        .collect();
    assert_eq!(
        titles,
        ["Revert to last verified version", "Ask the coder to fix"]
    );

    // Ask the coder: the repair prompt carries the failure; the fix verifies against the
    // baseline and waits as a code action (applyMode "offer").
    let r = c.execute(exec("kernel-lsp.fix")).await;
    assert_eq!(r["result"]["outcome"], "accepted", "{r}");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let user = reqs[0].body["messages"][1]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        user.contains("out_ptr[") && user.contains("tl.load(x_ptr + offs, mask=m) - tl.load"),
        "{user}"
    );
    let actions = c
        .request(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": uri}, "range": d["range"], "context": {"diagnostics": []}}),
        )
        .await;
    assert!(
        actions["result"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["title"] == "Apply verified rewrite (1.00×)"),
        "{actions}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        ADD,
        "the server never writes the file"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn a_cancelled_job_stops_and_a_document_closed_mid_job_is_left_alone() {
    let Some((dir, mut c)) = job_session("a_cancelled_job_stops", "cancel") else {
        return;
    };
    let file = dir.join("add.py");
    // Four candidates, so a cancel lands between them.
    let src = ADD.replace(
        "tune BLOCK in [64, 1024]",
        "tune BLOCK in [64, 128, 256, 512, 1024]",
    );
    std::fs::write(&file, &src).unwrap();
    c.initialize(json!({"compileOnType": false}), &["utf-16"])
        .await;
    let uri = format!("file://{}", file.display());
    c.open(&uri, "python", &src).await;
    let tune = |token: &str| json!({"command": "kernel-lsp.tune", "arguments": [{"uri": uri, "kernel": "add_kernel"}], "workDoneToken": token});

    // Cancel as soon as the job reports its first stage.
    let id = c
        .send_request("workspace/executeCommand", tune("cancel-me"))
        .await;
    c.wait_for("the job's first report", |n| {
        n["method"] == "$/progress" && n["params"]["value"]["kind"] == "report"
    })
    .await;
    c.notify(
        "window/workDoneProgress/cancel",
        json!({"token": "cancel-me"}),
    )
    .await;
    let r = c.response(id, Duration::from_secs(240)).await;
    let msg = r["result"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("cancelled"), "{r}");
    let history = std::fs::read_to_string(dir.join(".kernel-lsp/history/add.py/add_kernel.jsonl"))
        .unwrap_or_default();
    assert!(!history.contains("\"outcome\":\"accepted\""), "{history}");

    // Closed mid-job: the result is not applied anywhere; the user is told.
    let id = c
        .send_request("workspace/executeCommand", tune("closing"))
        .await;
    c.notify(
        "textDocument/didClose",
        json!({"textDocument": {"uri": uri}}),
    )
    .await;
    let r = c.response(id, Duration::from_secs(240)).await;
    let msg = r["result"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        msg.contains("is not open in the editor") || msg.contains("was closed"),
        "{r}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        src,
        "the server never writes the file"
    );
    // The server is still alive and answers.
    let again = c
        .execute(json!({"command": "kernel-lsp.bench", "arguments": [{"uri": uri}]}))
        .await;
    assert!(
        again["result"]["message"]
            .as_str()
            .unwrap()
            .contains("is not open"),
        "{again}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn edits_during_a_job_bad_files_and_bench_on_save() {
    let Some((dir, mut c)) = job_session("edits_during_a_job_bad_files_and_bench_on_save", "edits")
    else {
        return;
    };
    c.initialize(
        json!({"compileOnType": false, "benchOnSave": true}),
        &["utf-16"],
    )
    .await;
    let open = |name: &str, text: &str| {
        let file = dir.join(name);
        std::fs::write(&file, text).unwrap();
        format!("file://{}", file.display())
    };
    let exec = |command: &str, uri: &str| json!({"command": command, "arguments": [{"uri": uri, "kernel": "add_kernel"}]});

    // A file with a syntax error: jobs are refused with where to look.
    let broken = ADD.replace("m = offs < n", "m = offs < (n");
    let uri_bad = open("bad.py", &broken);
    c.open(&uri_bad, "python", &broken).await;
    let r = c
        .request(
            "workspace/executeCommand",
            exec("kernel-lsp.tune", &uri_bad),
        )
        .await;
    assert!(
        r["result"]["message"]
            .as_str()
            .unwrap()
            .contains("syntax error"),
        "{r}"
    );

    // A kernel without a spec: a clear message, no job.
    let bare: String = ADD
        .lines()
        .filter(|l| !l.contains("@bench"))
        .map(|l| format!("{l}\n"))
        .collect();
    let uri_bare = open("bare.py", &bare);
    c.open(&uri_bare, "python", &bare).await;
    let r = c
        .request(
            "workspace/executeCommand",
            exec("kernel-lsp.tune", &uri_bare),
        )
        .await;
    assert!(
        r["result"]["message"]
            .as_str()
            .unwrap()
            .contains("has no @bench spec"),
        "{r}"
    );

    // An edit elsewhere in the file during the job: the edit is still offered, with its
    // range moved down one line and the document's new version.
    let uri = open("add.py", ADD);
    c.open(&uri, "python", ADD).await;
    let id = c
        .send_request("workspace/executeCommand", exec("kernel-lsp.tune", &uri))
        .await;
    c.edit(&uri, 2, (0, 0), (0, 0), "# a note\n").await;
    let r = c.response(id, Duration::from_secs(240)).await;
    assert!(
        r["result"]["message"]
            .as_str()
            .unwrap()
            .contains("the editor refused the edit"),
        "{r}"
    );
    let apply = c
        .seen()
        .find(|n| n["method"] == "workspace/applyEdit")
        .cloned()
        .expect("the server sent workspace/applyEdit");
    let change = &apply["params"]["edit"]["documentChanges"][0];
    assert_eq!(change["textDocument"]["version"], 2, "{apply}");
    assert_eq!(
        change["edits"][0]["range"]["start"]["line"], 5,
        "spec block moved from line 4 to 5: {apply}"
    );
    assert!(
        change["edits"][0]["newText"]
            .as_str()
            .unwrap()
            .contains("BLOCK = 1024"),
        "{apply}"
    );
    assert!(
        !change["edits"][0]["newText"]
            .as_str()
            .unwrap()
            .contains("import"),
        "only the kernel's region is edited: {apply}"
    );

    // An edit inside the kernel during the job: the result is not applied.
    let now = format!("# a note\n{ADD}");
    let uri2 = open("add2.py", &now);
    c.open(&uri2, "python", &now).await;
    let id = c
        .send_request("workspace/executeCommand", exec("kernel-lsp.tune", &uri2))
        .await;
    c.edit(&uri2, 2, (12, 4), (12, 4), "m = m & (offs >= 0)\n    ")
        .await;
    let r = c.response(id, Duration::from_secs(240)).await;
    assert!(
        r["result"]["message"]
            .as_str()
            .unwrap()
            .contains("you edited `add_kernel` while the job ran"),
        "{r}"
    );

    // benchOnSave: saving re-verifies and re-times the kernel; the hint shows the time.
    c.notify(
        "textDocument/didSave",
        json!({"textDocument": {"uri": uri}}),
    )
    .await;
    // The save's bench starts a worker and runs the interpreter; on a loaded 2-core CI
    // machine (the whole suite beside it) that took over 40 s once, so the wait is by the
    // clock, as long as a job's answer may take.
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    let mut label = String::new();
    while std::time::Instant::now() < deadline {
        let h = c
            .request(
                "textDocument/inlayHint",
                json!({"textDocument": {"uri": uri}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 40, "character": 0}}}),
            )
            .await;
        label = h["result"][0]["label"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if label.contains("µs") || label.contains("ms") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let said: Vec<&Value> = c
        .seen()
        .filter(|n| n["method"] == "textDocument/publishDiagnostics" && n["params"]["uri"] == uri)
        .collect();
    assert!(
        label.contains("µs") || label.contains("ms"),
        "no timing hint 240 s after save: {label:?}; diagnostics published for the file: {said:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn the_editor_benchmarks_against_a_torch_reference_and_the_hint_says_eager() {
    let Some((dir, mut c)) = job_session(
        "the_editor_benchmarks_against_a_torch_reference_and_the_hint_says_eager",
        "torchref",
    ) else {
        return;
    };
    let src = ADD.replace(
        "# @bench tune BLOCK in [64, 1024]\n",
        "# @bench reference = torch: x_ptr + y_ptr\n",
    );
    let file = dir.join("add.py");
    std::fs::write(&file, &src).unwrap();
    c.initialize(
        json!({"compileOnType": false, "hintSpeedupVs": "eager"}),
        &["utf-16"],
    )
    .await;
    let uri = format!("file://{}", file.display());
    c.open(&uri, "python", &src).await;
    let r = c
        .execute(
            json!({"command": "kernel-lsp.bench", "arguments": [{"uri": uri, "kernel": "add_kernel"}]}),
        )
        .await;
    let msg = r["result"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("verified against torch eager (2 case(s) × 3 trials)"),
        "{r}"
    );
    assert!(
        !msg.contains("pinned as the baseline"),
        "PyTorch is the bar, no baseline: {r}"
    );
    let h = c
        .request(
            "textDocument/inlayHint",
            json!({"textDocument": {"uri": uri}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 40, "character": 0}}}),
        )
        .await;
    let label = h["result"][0]["label"].as_str().unwrap_or_default();
    assert!(label.contains("× eager"), "{h}");
    assert!(
        !label.contains("compile"),
        "not timed on the interpreter: {label}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn a_first_bench_checks_the_kernel_against_itself_and_pins_no_out_of_bounds_baseline() {
    let Some((dir, mut c)) = job_session(
        "a_first_bench_checks_the_kernel_against_itself",
        "selfcheck",
    ) else {
        return;
    };
    c.initialize(json!({"compileOnType": false}), &["utf-16"])
        .await;
    // The store has no mask: with n = 1000 the last block writes past the end of `b`.
    let oob = "import triton\nimport triton.language as tl\n\n\n# @bench n = 1000\n# @bench a: in f32[n]; b: out f32[n]\n# @bench grid = cdiv(n, 128); BLOCK = 128\n@triton.jit\ndef copy_nomask(a, b, n, BLOCK: tl.constexpr):\n    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    tl.store(b + i, tl.load(a + i, mask=i < n, other=0.0))\n";
    let file = dir.join("copy.py");
    std::fs::write(&file, oob).unwrap();
    let uri = format!("file://{}", file.display());
    c.open(&uri, "python", oob).await;
    let exec = |kernel: &str| json!({"command": "kernel-lsp.bench", "arguments": [{"uri": uri, "kernel": kernel}]});
    let r = c.execute(exec("copy_nomask")).await;
    assert_eq!(r["result"]["outcome"], "failed", "{r}");
    let msg = r["result"]["message"].as_str().unwrap();
    assert!(
        msg.contains("fails its own check")
            && msg.contains("out-of-bounds write past the end of `b`")
            && msg.contains("not pinned"),
        "{msg}"
    );
    let d = verify_diagnostic(&mut c).await;
    assert_eq!(d["severity"], 1, "{d}");
    assert!(d["message"].as_str().unwrap().contains("b[1000]"), "{d}");
    // The baseline store, under the workspace's `.kernel-lsp/` (found there below).
    let pinned = |k: &str| walk_has(&dir.join(".kernel-lsp"), &format!("{k}.txt"));
    assert!(
        !pinned("copy_nomask"),
        "an out-of-bounds kernel is not pinned"
    );

    // With the mask, the same kernel passes its check, is timed and pinned.
    let fixed = oob.replace("other=0.0))", "other=0.0), mask=i < n)");
    c.edit(&uri, 2, (0, 0), (11, 0), &fixed).await;
    let r = c.execute(exec("copy_nomask")).await;
    let msg = r["result"]["message"].as_str().unwrap();
    assert!(
        msg.contains("checked against itself (1 case(s) × 3 trials)")
            && msg.contains("pinned as the baseline"),
        "{r}"
    );
    assert!(pinned("copy_nomask"), "the checked kernel is pinned");
    std::fs::remove_dir_all(&dir).ok();
}

/// The next published `verify` diagnostic (a verification failure on a kernel).
async fn verify_diagnostic(c: &mut TestClient) -> Value {
    let diags = c
        .wait_for("the verification diagnostic", |n| {
            n["method"] == "textDocument/publishDiagnostics"
                && n["params"]["diagnostics"]
                    .as_array()
                    .is_some_and(|d| d.iter().any(|d| d["code"] == "verify"))
        })
        .await;
    diags["params"]["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["code"] == "verify")
        .unwrap()
        .clone()
}

/// Whether a file named `name` lies anywhere under `dir`.
fn walk_has(dir: &std::path::Path, name: &str) -> bool {
    std::fs::read_dir(dir).is_ok_and(|rd| {
        rd.flatten().any(|e| {
            let p = e.path();
            if p.is_dir() {
                walk_has(&p, name)
            } else {
                p.file_name().is_some_and(|f| f == name)
            }
        })
    })
}

#[tokio::test]
async fn the_server_exits_when_the_editor_quits_while_it_waits_for_an_answer() {
    let Some((dir, mut c)) = job_session(
        "the_server_exits_when_the_editor_quits_while_it_waits_for_an_answer",
        "quits",
    ) else {
        return;
    };
    c.initialize(json!({"compileOnType": false}), &["utf-16"])
        .await;
    let file = dir.join("add.py");
    std::fs::write(&file, ADD).unwrap();
    let uri = format!("file://{}", file.display());
    c.open(&uri, "python", ADD).await;
    c.send_request(
        "workspace/executeCommand",
        json!({"command": "kernel-lsp.tune", "arguments": [{"uri": uri, "kernel": "add_kernel"}]}),
    )
    .await;
    // The job ends by asking the editor to apply its edit; this editor quits instead of
    // answering.
    loop {
        let m = c.next_unanswered(Duration::from_secs(240)).await;
        if m["method"] == "workspace/applyEdit" {
            break;
        }
    }
    let mut server = c.close().expect("a server process");
    tokio::time::timeout(Duration::from_secs(30), server.wait())
        .await
        .expect("the server still runs 30 s after the editor quit")
        .unwrap();
    std::fs::remove_dir_all(&dir).ok();
}

/// "Apply verified rewrite" with nothing waiting: the best version of the kernel's last
/// recorded run, from the history (the engine of `kernel-lsp apply`), with no worker
/// and no search; refused once the kernel holds text the run did not make.
#[tokio::test]
async fn apply_with_nothing_waiting_writes_the_last_runs_best_from_the_history() {
    use kernel_lsp::optimize::apply::{record_version, RunEnd};
    use kernel_lsp::optimize::headline::Headline;
    use kernel_lsp::syntax::Lang;
    let dir = std::env::temp_dir().join(format!("kernel-lsp-apply-best-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join(".git")).unwrap();
    let file = dir.join("add.py");
    std::fs::write(&file, ADD).unwrap();
    let v1 = ADD.replace("BLOCK = 64\n", "BLOCK = 1024\n");
    let end = RunEnd {
        headline: Headline::from_times(1_795_000_000_000, 1, 4.0, 2.0),
        versions: vec![
            record_version(Lang::Triton, ADD, "add_kernel", 0).unwrap(),
            record_version(Lang::Triton, &v1, "add_kernel", 1).unwrap(),
        ],
    };
    let history = dir.join(".kernel-lsp/history/add.py");
    std::fs::create_dir_all(&history).unwrap();
    let line = serde_json::to_string(&end).unwrap();
    std::fs::write(history.join("add_kernel.jsonl"), line + "\n").unwrap();

    let mut c = TestClient::in_process();
    c.initialize(json!({"compileOnType": false}), &["utf-16"])
        .await;
    let uri = format!("file://{}", file.display());
    c.open(&uri, "python", ADD).await;
    let apply = json!({"command": "kernel-lsp.applyRewrite", "arguments": [{"uri": uri, "kernel": "add_kernel"}]});
    let r = c.execute(apply.clone()).await;
    let edit = c
        .seen()
        .find(|m| m["method"] == "workspace/applyEdit")
        .cloned()
        .unwrap_or_else(|| panic!("no edit sent: {r}"));
    let change = &edit["params"]["edit"]["documentChanges"][0]["edits"][0];
    let new_text = change["newText"].as_str().unwrap();
    assert!(
        new_text.starts_with("# @bench n = 4096, 1000\n"),
        "{change}"
    );
    assert!(
        new_text.contains("BLOCK = 1024\n") && v1.contains(new_text),
        "{change}"
    );
    assert_eq!(change["range"]["start"]["line"], 4, "{change}");

    // Text the run did not make is never overwritten.
    let edited = ADD.replace("m = offs < n", "m = (offs < n)");
    let whole =
        json!({"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": edited}]});
    c.notify("textDocument/didChange", whole).await;
    let r = c.execute(apply).await;
    let msg = r["error"]["message"]
        .as_str()
        .or(r["result"]["message"].as_str())
        .unwrap_or_default();
    assert!(msg.contains("changed since that run"), "{r}");
    std::fs::remove_dir_all(&dir).ok();
}
