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
    run_on(ADD, py, dir, settings, extra)
}

/// [`run`] on another starting text of `add.py`.
fn run_on(
    start: &str,
    py: &str,
    dir: &Path,
    settings: &Value,
    extra: &[&str],
) -> (i32, Value, String, String) {
    let file = dir.join("add.py");
    std::fs::write(&file, start).unwrap();
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
    let settings = json!({"llm": {"strategy": model(&server.url()), "coder": model(&server.url()), "repairRounds": 2, "callsPerStep": 6, "samples": 1}});
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
    let settings = json!({"llm": {"coder": model(&server.url()), "repairRounds": 2, "samples": 1}});
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

/// The add kernel with two blocks of `block` per program and its new launch lines.
fn two_per_program(n_line: &str, block: u32) -> String {
    format!(
        "```python\n# @bench {n_line}\n# @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]\n# @bench grid = cdiv(n, BLOCK * ITEMS); BLOCK = {block}; ITEMS = 2\n@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, ITEMS: tl.constexpr):\n    base = tl.program_id(0) * BLOCK * ITEMS\n    for i in tl.static_range(ITEMS):\n        offs = base + i * BLOCK + tl.arange(0, BLOCK)\n        m = offs < n\n        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)\n```"
    )
}

fn free_step(what: &str) -> Scripted {
    Scripted::openai(&format!(
        "```json\n{{\"id\": \"free\", \"params\": {{}}, \"rationale\": \"{what}\", \"description\": \"{what}\"}}\n```"
    ))
}

/// `llm.samples` (issue #12): four coder replies asked for at once at a spread of
/// temperatures; one is a copy of another up to comments and whitespace and is dropped
/// before anything runs, one computes the wrong thing and fails verification, the two
/// others verify and are timed in one batch, and the faster (one program instead of
/// four, under its own launch) is kept.
#[test]
fn samples_are_asked_at_once_duplicates_are_dropped_and_the_fastest_is_kept() {
    let test = "samples_are_asked_at_once";
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip(test, &why),
    };
    let same = kernel("+");
    let same_with_comments = same
        .replace(
            "    m = offs < n\n",
            "    # the tail mask\n    m   =   offs < n\n\n",
        )
        .replace(
            "tl.arange(0, BLOCK)\n",
            "tl.arange(0, BLOCK)  # this block\n",
        );
    assert_ne!(same, same_with_comments);
    let server = ReplayServer::start(vec![
        Scripted::openai(&same),
        Scripted::openai(&same_with_comments),
        Scripted::openai(&kernel("-")),
        Scripted::openai(&two_per_program("n = 1000", 512)),
    ]);
    let dir = workdir("opt-llm-samples");
    let settings = json!({"llm": {"coder": model(&server.url()), "samples": 4, "repairRounds": 0, "callsPerStep": 6}});
    // 32 programs of 32 at the start: the one-program sample is many times faster,
    // beyond the interpreter's timing noise on a busy CI machine.
    let slow = ADD.replace("BLOCK = 256", "BLOCK = 32");
    let (code, run, err, after) = run_on(
        &slow,
        &py,
        &dir,
        &settings,
        &[
            "--steps",
            "1",
            "--llm-coder-always",
            "--only",
            "triton_num_warps",
            "--apply",
        ],
    );
    assert_eq!(code, 0, "{run}\n{err}");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 4, "four samples, no repair: {run}");
    let mut temps: Vec<f64> = reqs
        .iter()
        .map(|r| r.body["temperature"].as_f64().unwrap())
        .collect();
    temps.sort_by(f64::total_cmp);
    assert_eq!(
        temps,
        [0.2, 0.47, 0.73, 1.0],
        "a spread from the configured 0.2"
    );
    let step = &run["steps"][0];
    let c = step["candidates"].as_array().unwrap();
    assert_eq!(c.len(), 4, "{step}");
    let msg = |c: &Value| c["message"].as_str().unwrap_or("").to_string();
    let dups: Vec<&Value> = c
        .iter()
        .filter(|c| msg(c).contains("a duplicate of llm s"))
        .collect();
    assert_eq!(dups.len(), 1, "exactly one duplicate: {step}");
    assert_eq!(dups[0]["verified"], false);
    assert!(
        dups[0]["median_ms"].is_null(),
        "a duplicate is not run: {step}"
    );
    assert_eq!(
        c.iter().filter(|c| msg(c).contains("out_ptr[")).count(),
        1,
        "the wrong sample fails verification, naming the buffer: {step}"
    );
    let verified: Vec<&Value> = c.iter().filter(|c| c["verified"] == true).collect();
    assert_eq!(verified.len(), 2, "{step}");
    assert!(
        verified.iter().all(|c| c["median_ms"].is_number()),
        "{step}"
    );
    assert_eq!(step["outcome"], "accepted", "{step}");
    let fastest = verified
        .iter()
        .min_by(|a, b| {
            a["median_ms"]
                .as_f64()
                .unwrap()
                .total_cmp(&b["median_ms"].as_f64().unwrap())
        })
        .unwrap();
    assert_eq!(
        step["accepted"], fastest["label"],
        "the fastest sample wins: {step}"
    );
    assert!(
        after.contains("ITEMS: tl.constexpr"),
        "the two-per-program sample: {after}"
    );
    assert!(after.contains("BLOCK = 512; ITEMS = 2"), "{after}");
    // The step's model use is recorded: 4 calls of 100 + 50 tokens.
    assert_eq!(step["llm"]["calls"], 4, "{step}");
    assert_eq!(step["llm"]["input_tokens"], 400, "{step}");
    assert_eq!(run["llm"]["output_tokens"], 200, "{run}");
    assert!(
        err.contains("step 1: models so far: 4 model calls, 400 tokens in, 200 out"),
        "the progress shows the tokens: {err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The tree of versions (issues #12, #30): after a large gain, failed steps do not send
/// the search back to the start: the new version is expanded while it has steps left,
/// and the start, far slower, is below the frontier. The answer is the best version of
/// the tree, and the strategist is told what was tried on the version it works on.
#[test]
fn a_tree_run_keeps_to_the_best_version_after_misses() {
    let test = "a_tree_run_keeps_to_the_best_version";
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip(test, &why),
    };
    let server = ReplayServer::start(vec![
        free_step("two blocks per program"),
        Scripted::openai(&two_per_program("n = 1000", 512)),
        free_step("subtract instead"),
        Scripted::openai(&kernel("-")),
        free_step("subtract again"),
        Scripted::openai(&kernel("-")),
        free_step("two smaller blocks per program"),
        Scripted::openai(&two_per_program("n = 1000", 128)),
    ]);
    let dir = workdir("opt-llm-tree");
    let settings = json!({"llm": {"strategy": model(&server.url()), "coder": model(&server.url()), "samples": 1, "repairRounds": 0, "callsPerStep": 2}});
    // 32 programs of 32: on the interpreter, a version with one program is many times
    // faster, far beyond the timing noise of a busy CI machine.
    let slow = ADD.replace("BLOCK = 256", "BLOCK = 32");
    let (code, run, err, after) = run_on(
        &slow,
        &py,
        &dir,
        &settings,
        &["--steps", "4", "--seed", "1"],
    );
    assert_eq!(code, 0, "{run}\n{err}");
    assert_eq!(after, slow, "nothing is written without --apply");
    let steps = run["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 4, "{run}");
    let at = |i: usize, k: &str| steps[i][k].clone();
    assert_eq!(
        (at(0, "node"), at(0, "child")),
        (json!(0), json!(1)),
        "{run}"
    );
    assert_eq!(at(0, "outcome"), "accepted");
    assert_eq!(
        (at(1, "node"), at(1, "outcome")),
        (json!(1), json!("failed")),
        "{run}"
    );
    assert_eq!(
        (at(2, "node"), at(2, "outcome")),
        (json!(1), json!("failed")),
        "{run}"
    );
    assert_eq!(
        (at(3, "node"), at(3, "pick")),
        (json!(1), json!("best")),
        "still on the best version after two misses: {run}"
    );
    assert!(
        steps
            .iter()
            .all(|s| s["pick"] != "backtrack" && s["pick"] != "explore"),
        "{run}"
    );
    assert!(run["versions"].as_u64().unwrap() >= 2, "{run}");
    let best = run["best_node"].as_u64().unwrap();
    assert!(best >= 1, "{run}");
    // The strategists of steps 3 and 4 saw the failures before them on the same version.
    let reqs = server.requests();
    assert_eq!(reqs.len(), 8);
    let third = user_message(&reqs[4].body);
    assert!(
        third.contains("Tried on this version:\n- free (subtract instead): failed"),
        "{third}"
    );
    assert!(
        third.contains(
            "Accepted steps that led to this version:\n- free (two blocks per program): accepted"
        ),
        "{third}"
    );
    let fourth = user_message(&reqs[6].body);
    assert!(
        fourth.contains("Tried on this version:\n- free (subtract instead): failed"),
        "{fourth}"
    );
    assert!(
        fourth.contains("\n- free (subtract again): failed"),
        "{fourth}"
    );
    assert!(!fourth.contains("other branches"), "{fourth}");
    // The table shows the versions and the answer; the history draws the tree.
    let report = std::process::Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
        .current_dir(&dir)
        .args(["report", "add.py"])
        .output()
        .unwrap();
    let tree = String::from_utf8_lossy(&report.stdout);
    assert!(tree.contains("add_kernel: run of "), "{tree}");
    assert!(
        tree.contains("8 model calls, 800 tokens in, 400 out"),
        "{tree}"
    );
    assert!(tree.contains("├─ v1") || tree.contains("└─ v1"), "{tree}");
    assert!(tree.contains("tried: free failed, free failed"), "{tree}");
    assert!(tree.contains("★"), "the winning path is marked: {tree}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Each budget stops a run with its own message, and the best version so far stays the
/// answer: wall time, model calls and tokens.
#[test]
fn each_run_budget_stops_the_run_and_says_which() {
    let test = "each_run_budget_stops_the_run";
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip(test, &why),
    };
    let slow = ADD.replace("BLOCK = 256", "BLOCK = 32");
    let script = || {
        vec![
            free_step("two blocks per program"),
            Scripted::openai(&two_per_program("n = 1000", 512)),
            free_step("subtract"),
            Scripted::openai(&kernel("-")),
            free_step("subtract"),
            Scripted::openai(&kernel("-")),
        ]
    };
    let priced = |url: &str| {
        let mut m = model(url);
        m["priceIn"] = json!(3.0);
        m["priceOut"] = json!(15.0);
        m
    };
    let base = |url: &str| json!({"strategy": priced(url), "coder": priced(url), "samples": 1, "repairRounds": 0, "callsPerStep": 2});

    // Model calls: 2 per step; at most 3 → the second step gets one call (the
    // strategist's) and the coder cannot be asked; then the run stops.
    let server = ReplayServer::start(script());
    let dir = workdir("opt-llm-calls");
    let mut llm = base(&server.url());
    llm["callsPerRun"] = json!(3);
    let (code, out, err, _) = run_on(&slow, &py, &dir, &json!({"llm": llm}), &["--steps", "5"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(
        out["stopped"], "budget spent: the model-call budget of 3 (3 calls)",
        "{out}"
    );
    assert_eq!(server.requests().len(), 3);
    assert_eq!(out["steps"][0]["outcome"], "accepted", "{out}");
    assert_eq!(
        out["best_node"], 1,
        "the best version so far is the answer: {out}"
    );
    assert_eq!(out["llm"]["calls"], 3);
    // 3 calls of 100 tokens in at $3/M and 50 out at $15/M.
    let cost = out["llm"]["cost_usd"].as_f64().unwrap();
    assert!((cost - 3.0 * 0.00105).abs() < 1e-9, "{out}");

    // Tokens: 150 per call, 300 per step, at most 400 → two steps.
    let server = ReplayServer::start(script());
    let dir2 = workdir("opt-llm-tokens");
    let mut llm = base(&server.url());
    llm["tokensPerRun"] = json!(400);
    let (code, out, err, _) = run_on(&slow, &py, &dir2, &json!({"llm": llm}), &["--steps", "5"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(
        out["stopped"], "budget spent: the token budget of 400 (600 tokens)",
        "{out}"
    );
    assert_eq!(out["steps"].as_array().unwrap().len(), 2, "{out}");

    // Wall time: spent while the worker checks the starting version, so no step runs,
    // and the table says why.
    let server = ReplayServer::start(script());
    let dir3 = workdir("opt-llm-wall");
    let (code, out, err, _) = run_on(
        &slow,
        &py,
        &dir3,
        &json!({"llm": base(&server.url())}),
        &["--steps", "5", "--budget", "0.01s"],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let stopped = out["stopped"].as_str().unwrap_or("");
    assert!(
        stopped.starts_with("budget spent: the time budget of 0 s"),
        "{out}"
    );
    assert!(out["steps"].as_array().unwrap().is_empty(), "{out}");
    assert!(server.requests().is_empty());
    assert!(err.contains("no verified improvement"), "{err}");
    for d in [dir, dir2, dir3] {
        std::fs::remove_dir_all(&d).ok();
    }
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
    let settings = json!({"llm": {"strategy": model(&server.url()), "coder": model(&server.url()), "repairRounds": 1, "callsPerStep": 4, "samples": 1}});
    // 32 programs of 32 at the start: one program of two 512-blocks is many times faster
    // on the interpreter, beyond its timing noise on a busy CI machine.
    let slow = ADD.replace("BLOCK = 256", "BLOCK = 32");
    let (code, run, err, after) = run_on(&slow, &py, &dir, &settings, &["--steps", "1", "--apply"]);
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
        "one program instead of 32: {step}"
    );
    assert!(
        after.contains("# @bench grid = cdiv(n, BLOCK * ITEMS); BLOCK = 512; ITEMS = 2\n@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, ITEMS: tl.constexpr):"),
        "the applied edit carries the new launch line: {after}"
    );
    assert!(after.contains("# @bench n = 1000\n"), "{after}");
    assert!(!after.contains("BLOCK = 32"), "{after}");
    let reqs = server.requests();
    assert!(
        user_message(&reqs[1].body).contains("# @bench grid = cdiv(n, BLOCK); BLOCK = 32"),
        "the coder sees the spec lines"
    );
    assert!(
        user_message(&reqs[2].body).contains("`n = 1024`"),
        "the repair gets the reason"
    );
    std::fs::remove_dir_all(&dir).ok();
}
