//! `kernel-lsp health`: the report the editors' health checks read, from the real binary.

use std::process::Command;

use serde_json::Value;

/// A secret that must never appear in the output.
const SECRET: &str = "sk-health-test-do-not-print-4242";

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn health(args: &[&str], config: Option<&Value>) -> Run {
    let dir = std::env::temp_dir().join(format!(
        "kernel-lsp-health-{}-{}",
        std::process::id(),
        args.join("_").replace(['/', ' '], "")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"));
    cmd.arg("health").args(args);
    if let Some(c) = config {
        let path = dir.join("settings.json");
        std::fs::write(&path, serde_json::to_string(c).unwrap()).unwrap();
        cmd.arg("--config").arg(&path);
    }
    cmd.env("KERNEL_LSP_HEALTH_TEST_KEY", SECRET)
        .env_remove("KERNEL_LSP_HEALTH_TEST_UNSET");
    let out = cmd.output().unwrap();
    std::fs::remove_dir_all(&dir).ok();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A localhost port nobody listens on: bound, then released.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn llm_config(port: u16) -> Value {
    serde_json::json!({
        "llm": {
            "coder": {
                "provider": "anthropic",
                "url": format!("http://127.0.0.1:{port}/v1"),
                "model": "test-model",
                "apiKeyEnv": "KERNEL_LSP_HEALTH_TEST_KEY"
            },
            "strategy": {
                "provider": "anthropic",
                "url": format!("http://127.0.0.1:{port}"),
                "model": "test-model",
                "apiKeyEnv": "KERNEL_LSP_HEALTH_TEST_UNSET"
            }
        }
    })
}

#[test]
fn json_report_has_the_stable_shape_and_says_why_a_backend_is_off() {
    let run = health(&["--json"], Some(&llm_config(closed_port())));
    assert_eq!(run.code, 0, "stderr: {}", run.stderr);
    assert!(
        !run.stdout.contains(SECRET),
        "the key leaked: {}",
        run.stdout
    );
    let r: Value = serde_json::from_str(&run.stdout).expect("one JSON object");
    assert_eq!(r["version"], env!("CARGO_PKG_VERSION"));
    for key in [
        "config", "nvrtc", "ptxas", "ncu", "worker", "cuda", "triton",
    ] {
        assert!(r[key]["ok"].is_boolean(), "{key}: {r:#}");
        assert!(
            ["ok", "warn", "error"].contains(&r[key]["level"].as_str().unwrap_or("")),
            "{key}: {r:#}"
        );
        assert!(
            r[key]["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{key}: {r:#}"
        );
    }
    assert_eq!(r["worker"]["ok"], true, "{r:#}");
    if r["worker"]["device"].is_null() {
        // No GPU (this machine): the CUDA backend is off and says why, as a warning.
        assert_eq!(r["cuda"]["ok"], false, "{r:#}");
        assert_eq!(r["cuda"]["level"], "warn", "{r:#}");
        let msg = r["cuda"]["message"].as_str().unwrap();
        assert!(msg.starts_with("CUDA backend unavailable: "), "{msg}");
        assert!(
            r["worker"]["message"]
                .as_str()
                .unwrap()
                .contains("no GPU: "),
            "{r:#}"
        );
    } else {
        assert_eq!(r["cuda"]["ok"], true, "{r:#}");
        assert!(r["worker"]["device"]["arch"]
            .as_str()
            .unwrap()
            .starts_with("sm_"));
    }

    let llm = r["llm"].as_array().unwrap();
    let roles: Vec<&str> = llm.iter().map(|l| l["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["strategy", "coder"]);
    let coder = &llm[1];
    assert_eq!(coder["ok"], false);
    assert_eq!(coder["level"], "error");
    assert_eq!(coder["keyEnv"], "KERNEL_LSP_HEALTH_TEST_KEY");
    assert_eq!(coder["keySet"], true);
    let msg = coder["message"].as_str().unwrap();
    assert!(
        msg.contains("not reachable: cannot connect to 127.0.0.1:"),
        "{msg}"
    );
    assert!(msg.contains("$KERNEL_LSP_HEALTH_TEST_KEY is set"), "{msg}");
    let strategy = &llm[0];
    assert_eq!(strategy["keySet"], false);
    let msg = strategy["message"].as_str().unwrap();
    assert!(
        msg.contains("$KERNEL_LSP_HEALTH_TEST_UNSET is not set"),
        "{msg}"
    );
}

#[test]
fn text_report_prints_one_levelled_line_per_check() {
    let port = closed_port();
    let run = health(&[], Some(&llm_config(port)));
    assert_eq!(run.code, 0, "stderr: {}", run.stderr);
    assert!(
        !run.stdout.contains(SECRET),
        "the key leaked: {}",
        run.stdout
    );
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        lines[0],
        concat!("kernel-lsp ", env!("CARGO_PKG_VERSION")),
        "{}",
        run.stdout
    );
    let names: Vec<&str> = lines[1..]
        .iter()
        .map(|l| {
            let (level, rest) = l.split_once(' ').unwrap();
            assert!(["ok", "warn", "error"].contains(&level), "{l}");
            rest.trim_start().split_once(':').unwrap().0
        })
        .collect();
    assert_eq!(
        names,
        [
            "config",
            "nvrtc",
            "ptxas",
            "nvcc",
            "headers",
            "ncu",
            "worker",
            "cuda",
            "triton",
            "llm.strategy",
            "llm.coder"
        ]
    );
    let coder = lines.last().unwrap();
    assert!(
        coder.starts_with(&format!(
            "error llm.coder: anthropic `test-model` at http://127.0.0.1:{port}/v1; not reachable"
        )),
        "{coder}"
    );
}

#[test]
fn a_worker_that_cannot_start_exits_1() {
    let run = health(
        &["--json", "--worker", "/nonexistent/kernel-lsp worker"],
        None,
    );
    assert_eq!(
        run.code, 1,
        "stdout: {}\nstderr: {}",
        run.stdout, run.stderr
    );
    let r: Value = serde_json::from_str(&run.stdout).expect("the report still prints");
    assert_eq!(r["worker"]["ok"], false);
    assert_eq!(r["worker"]["level"], "error");
    let msg = r["worker"]["message"].as_str().unwrap();
    assert!(msg.contains("/nonexistent/kernel-lsp"), "{msg}");
    assert_eq!(r["cuda"]["ok"], false);
    assert_eq!(r["llm"], serde_json::json!([]));
}

#[test]
fn a_config_that_is_not_json_is_a_usage_error() {
    let dir = std::env::temp_dir().join(format!("kernel-lsp-health-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("settings.json");
    std::fs::write(&path, "{ llm: ").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
        .args(["health", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("settings.json: not JSON"), "{err}");
}
