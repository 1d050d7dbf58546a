//! `kernel-lsp optimize --llm` end to end, as a user runs it: the real binary, settings
//! from `--config`, a local replay server speaking the model wire formats, and the
//! Triton CPU interpreter verifying what the model wrote. Proves the strategist, the
//! coder and the repair rounds, and that no bad answer reaches the author's file.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::bench_triton::python;
use crate::llm_server::{closed_port_url, ReplayServer, Scripted};
use crate::tools;

const ADD: &str = r#"import triton
import triton.language as tl


# @bench n = 1000
# @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 256
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x + y, mask=m)
"#;

fn kernel(body_op: &str) -> String {
    format!(
        "```python\n@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    m = offs < n\n    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) {body_op} tl.load(y_ptr + offs, mask=m), mask=m)\n```"
    )
}

fn workdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kernel-lsp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Run `optimize add.py --llm` with `settings`; (exit code, stdout JSON, stderr, file after).
fn run(py: &str, dir: &Path, settings: &Value, extra: &[&str]) -> (i32, Value, String, String) {
    let file = dir.join("add.py");
    std::fs::write(&file, ADD).unwrap();
    std::fs::write(dir.join("settings.json"), settings.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
        .current_dir(dir)
        .args([
            "optimize",
            "add.py",
            "--json",
            "--llm",
            "--config",
            "settings.json",
        ])
        .args(extra)
        .env("KERNEL_LSP_PYTHON", py)
        .env("TRITON_INTERPRET", "1")
        .env("KERNEL_LSP_DATA_DIR", dir.join("data"))
        .env("REPLAY_KEY", "sk-test-123")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        json,
        stderr,
        std::fs::read_to_string(&file).unwrap(),
    )
}

fn model(url: &str) -> Value {
    json!({"provider": "openai", "url": url, "model": "replay-coder", "apiKeyEnv": "REPLAY_KEY", "maxRetries": 0, "timeoutMs": 20000})
}

fn user_message(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[test]
fn strategist_coder_and_two_repair_rounds_reach_a_verified_candidate() {
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip("strategist_coder_and_two_repair_rounds", &why),
    };
    let server = ReplayServer::start(vec![
        // The strategist picks a free-form step.
        Scripted::openai(
            "```json\n{\"id\": \"free\", \"params\": {}, \"rationale\": \"fuse the loads into the store\", \"description\": \"load both operands inside the store expression\"}\n```",
        ),
        // The coder answers prose: a failed attempt, repaired.
        Scripted::openai("Sure! You should load both operands inside the store."),
        // The repair is wrong code (subtracts): verification fails, repaired again.
        Scripted::openai(&kernel("-")),
        // The second repair is right.
        Scripted::openai(&kernel("+")),
    ]);
    let dir = workdir("opt-llm");
    let settings = json!({"llm": {"strategy": model(&server.url()), "coder": model(&server.url()), "repairRounds": 2, "callsPerStep": 6}});
    let (code, run, err, after) = run(&py, &dir, &settings, &["--steps", "1"]);
    assert_eq!(code, 0, "{run}\n{err}");
    assert_eq!(after, ADD, "nothing is written without --apply");
    let step = &run["steps"][0];
    assert_eq!(step["strategy_id"], "free", "{run}");
    assert_eq!(step["coder"], "llm");
    assert_eq!(step["rationale"], "fuse the loads into the store");
    let c = step["candidates"].as_array().unwrap();
    assert_eq!(c.len(), 3, "{step}");
    assert_eq!(c[0]["label"], "llm");
    assert!(
        c[0]["message"]
            .as_str()
            .unwrap()
            .contains("no fenced code block"),
        "{step}"
    );
    assert_eq!(c[1]["label"], "llm repair 1");
    assert!(
        c[1]["message"].as_str().unwrap().contains("out_ptr["),
        "the verification report names the buffer: {step}"
    );
    assert_eq!(c[2]["label"], "llm repair 2");
    assert_eq!(c[2]["verified"], true, "{step}");
    assert!(c[2]["median_ms"].is_number(), "{step}");
    assert!(
        ["accepted", "no_gain"].contains(&step["outcome"].as_str().unwrap()),
        "{step}"
    );

    let reqs = server.requests();
    assert_eq!(reqs.len(), 4, "strategist + coder + 2 repairs");
    for r in &reqs {
        assert_eq!(r.path, "/chat/completions");
        assert_eq!(r.headers["authorization"], "Bearer sk-test-123");
        assert_eq!(r.body["model"], "replay-coder");
    }
    assert!(
        user_message(&reqs[0].body).contains("def add_kernel"),
        "the strategist sees the kernel"
    );
    assert!(
        user_message(&reqs[1].body).contains("load both operands inside the store"),
        "the coder gets the step"
    );
    assert!(
        user_message(&reqs[2].body).contains("no fenced code block"),
        "the first repair gets the reply error"
    );
    assert!(
        user_message(&reqs[3].body).contains("out_ptr["),
        "the second repair gets the verification report"
    );
    assert!(
        !err.contains("sk-test-123"),
        "the key is never printed: {err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_answers_end_the_attempt_and_leave_the_file_alone() {
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip("bad_answers_end_the_attempt", &why),
    };
    let wrong_kernel = "```python\n@triton.jit\ndef other(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    pass\n```";
    let server = ReplayServer::start(vec![
        Scripted::openai("I think you should try harder."),
        Scripted::openai("```python\n```"),
        Scripted::openai(wrong_kernel),
    ]);
    let dir = workdir("opt-llm-bad");
    // No strategist: the embedded policy picks; the coder is used for every step.
    let settings = json!({"llm": {"coder": model(&server.url()), "repairRounds": 2}});
    let (code, run, err, after) = run(
        &py,
        &dir,
        &settings,
        &[
            "--steps",
            "1",
            "--llm-coder-always",
            "--apply",
            "--only",
            "triton_num_warps",
        ],
    );
    assert_eq!(code, 0, "{run}\n{err}");
    assert_eq!(after, ADD, "nothing unverified reaches the file");
    assert!(
        !dir.join("add.py.orig").exists(),
        "no backup: nothing was applied"
    );
    let step = &run["steps"][0];
    assert_eq!(step["outcome"], "failed", "{run}");
    assert_eq!(step["coder"], "llm");
    let msgs: Vec<&str> = step["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["message"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(msgs.len(), 3, "{step}");
    assert!(msgs[0].contains("no fenced code block"), "{msgs:?}");
    assert!(msgs[1].contains("empty"), "{msgs:?}");
    assert!(
        msgs[2].contains("add_kernel"),
        "names the kernel it wanted: {msgs:?}"
    );
    assert!(err.contains("no verified improvement"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn unreachable_models_fall_back_to_the_embedded_policy_with_a_warning() {
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip("unreachable_models_fall_back", &why),
    };
    let dead = closed_port_url();
    let dir = workdir("opt-llm-down");
    let settings = json!({"llm": {"strategy": model(&dead), "coder": model(&dead)}});
    let (code, run, err, after) = run(
        &py,
        &dir,
        &settings,
        &["--steps", "1", "--only", "triton_num_warps"],
    );
    assert_eq!(code, 0, "{run}\n{err}");
    assert_eq!(after, ADD);
    assert!(
        err.contains("the LLM strategist failed") && err.contains("embedded policy chose instead"),
        "{err}"
    );
    // The embedded rewrite still ran: num_warps candidates verified on the interpreter.
    let step = &run["steps"][0];
    assert_eq!(step["strategy_id"], "triton_num_warps", "{run}");
    assert_eq!(step["coder"], "embedded");
    assert!(
        step["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["verified"] == true),
        "{step}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn llm_without_settings_is_a_clear_error() {
    let dir = workdir("opt-llm-none");
    std::fs::write(dir.join("add.py"), ADD).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
        .current_dir(&dir)
        .args(["optimize", "add.py", "--llm"])
        .env("KERNEL_LSP_DATA_DIR", dir.join("data"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no LLM is configured"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The coder may change the launch (issue #12): a reply with the kernel's `@bench`
/// lines, a new grid, a bigger block and a new trailing `tl.constexpr` parameter, is
/// verified under its own launch (under the old one it would leave half the output
/// unwritten) and, with `--apply`, written back with its spec lines. A reply that changes
/// a size is rejected with a message naming the line, before anything runs.
#[test]
fn a_coder_reply_may_change_the_launch_but_nothing_else() {
    let test = "a_coder_reply_may_change_the_launch_but_nothing_else";
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip(test, &why),
    };
    let two_per_program = |n_line: &str| {
        format!(
            "```python\n# @bench {n_line}\n# @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]\n# @bench grid = cdiv(n, BLOCK * ITEMS); BLOCK = 512; ITEMS = 2\n@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, ITEMS: tl.constexpr):\n    base = tl.program_id(0) * BLOCK * ITEMS\n    for i in tl.static_range(ITEMS):\n        offs = base + i * BLOCK + tl.arange(0, BLOCK)\n        m = offs < n\n        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)\n```"
        )
    };
    let server = ReplayServer::start(vec![
        Scripted::openai(
            "```json\n{\"id\": \"free\", \"params\": {}, \"rationale\": \"fewer, larger programs\", \"description\": \"two blocks of 512 per program\"}\n```",
        ),
        // First a reply that also changes the size: rejected, naming the line.
        Scripted::openai(&two_per_program("n = 1024")),
        // The repair keeps the size and changes only the launch.
        Scripted::openai(&two_per_program("n = 1000")),
    ]);
    let dir = workdir("opt-llm-launch");
    let settings = json!({"llm": {"strategy": model(&server.url()), "coder": model(&server.url()), "repairRounds": 1, "callsPerStep": 4}});
    let (code, run, err, after) = run(&py, &dir, &settings, &["--steps", "1", "--apply"]);
    assert_eq!(code, 0, "{run}\n{err}");
    let step = &run["steps"][0];
    let c = step["candidates"].as_array().unwrap();
    assert_eq!(c.len(), 2, "{step}");
    let rejected = c[0]["message"].as_str().unwrap_or("");
    assert!(
        rejected.contains("buffer `x_ptr` in case 0 (in f32[1024] instead of in f32[1000])")
            && rejected.contains("`n = 1024`")
            && rejected.contains("only the launch may change"),
        "{step}"
    );
    assert_eq!(
        c[1]["verified"], true,
        "verified under its own launch: {step}"
    );
    assert_eq!(
        step["outcome"], "accepted",
        "one program instead of four: {step}"
    );
    assert!(
        after.contains("# @bench grid = cdiv(n, BLOCK * ITEMS); BLOCK = 512; ITEMS = 2\n@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, ITEMS: tl.constexpr):"),
        "the applied edit carries the new launch line: {after}"
    );
    assert!(after.contains("# @bench n = 1000\n"), "{after}");
    assert!(!after.contains("BLOCK = 256"), "{after}");
    let reqs = server.requests();
    assert!(
        user_message(&reqs[1].body).contains("# @bench grid = cdiv(n, BLOCK); BLOCK = 256"),
        "the coder sees the spec lines"
    );
    assert!(
        user_message(&reqs[2].body).contains("`n = 1024`"),
        "the repair gets the reason"
    );
    std::fs::remove_dir_all(&dir).ok();
}
