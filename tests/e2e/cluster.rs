//! Pools of workers started through a real Slurm (`srun`) and a real sshd on this host
//! (`tests/cluster/setup.sh` starts both; CI runs it). A pool of 2 CPU workers optimizes
//! a Triton example on the interpreter, through `srun` and through `ssh localhost`; a
//! worker whose srun step is cancelled (`scancel`) or whose remote process dies mid-step
//! has its candidate re-queued and the step completes. Without Slurm or sshd the tests
//! print SKIP, unless KERNEL_LSP_REQUIRE_CLUSTER=1 (CI), where they fail.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::Value;

use crate::bench_triton::python;

const BIN: &str = env!("CARGO_BIN_EXE_kernel-lsp");

/// Why the cluster tests cannot run here, if they cannot.
fn unavailable(what: &str, probe: &mut Command) -> Option<String> {
    let ok = probe
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return None;
    }
    let why = format!("no {what} here (bash tests/cluster/setup.sh starts one)");
    if std::env::var("KERNEL_LSP_REQUIRE_CLUSTER").is_ok_and(|v| v == "1") {
        panic!("KERNEL_LSP_REQUIRE_CLUSTER=1 but {why}");
    }
    Some(why)
}

fn slurm_missing() -> Option<String> {
    unavailable(
        "Slurm",
        Command::new("timeout").args(["60", "srun", "-n1", "--quiet", "true"]),
    )
}

fn ssh_words() -> Vec<String> {
    let home = std::env::var("HOME").unwrap_or_default();
    vec![
        "ssh".into(),
        "-i".into(),
        format!("{home}/.ssh/kernel_lsp_ci"),
        "-o".into(),
        "BatchMode=yes".into(),
        "-o".into(),
        "StrictHostKeyChecking=no".into(),
        "-o".into(),
        "UserKnownHostsFile=/dev/null".into(),
        "-o".into(),
        "LogLevel=ERROR".into(),
        "localhost".into(),
    ]
}

fn sshd_missing() -> Option<String> {
    let mut c = Command::new("timeout");
    c.arg("30").args(ssh_words()).arg("true");
    unavailable("sshd with the CI key", &mut c)
}

fn workspace(name: &str) -> PathBuf {
    workspace_sized(name, "1 << 12")
}

/// [`workspace`] with `n = size` (a C expression) for the example's first case.
fn workspace_sized(name: &str, size: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("kernel-lsp-cluster-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/vector_add.py");
    // Small sizes: Triton's interpreter runs every program in Python.
    let text = std::fs::read_to_string(example).unwrap();
    let small = text.replace("n = 1 << 24, 1000", &format!("n = {size}, 1000"));
    assert_ne!(
        small, text,
        "examples/vector_add.py's sizes changed; update this test"
    );
    std::fs::write(dir.join("vector_add.py"), small).unwrap();
    dir
}

fn fake_worker() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/workers/fake_worker.py")
        .canonicalize()
        .unwrap()
        .display()
        .to_string()
}

/// Starts `optimize --json` on `vector_add.py` with the `;`-separated pool `workers`,
/// calling `on_line` with each stderr line as it comes; returns (stdout JSON, stderr).
fn optimize_streaming(
    dir: &Path,
    workers: &[String],
    extra: &[&str],
    mut on_line: impl FnMut(&str),
) -> (Value, String) {
    let mut child = Command::new(BIN)
        .current_dir(dir)
        .args([
            "optimize",
            "vector_add.py",
            "--fresh-policy",
            "--json",
            "--workers",
        ])
        .arg(workers.join("; "))
        .args(extra)
        .env("KERNEL_LSP_DATA_DIR", dir.join("data"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let out_thread = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut BufReader::new(stdout), &mut s).unwrap();
        s
    });
    let mut stderr = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        on_line(&line);
        stderr.push_str(&line);
        stderr.push('\n');
    }
    let status = child.wait().unwrap();
    let stdout = out_thread.join().unwrap();
    assert!(status.success(), "optimize failed:\n{stderr}");
    let run = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}"));
    (run, stderr)
}

/// The workers (1-based) that verified and timed the candidates of every step.
fn workers_used(run: &Value) -> (Vec<u64>, usize) {
    let mut on: Vec<u64> = Vec::new();
    let mut timed = 0;
    for s in run["steps"].as_array().unwrap() {
        for c in s["candidates"].as_array().unwrap() {
            if let Some(w) = c["verified_on"]["worker"].as_u64() {
                on.push(w);
            }
            timed += usize::from(c["median_ms"].is_number());
        }
    }
    on.sort_unstable();
    on.dedup();
    (on, timed)
}

/// A real `kernel-lsp worker` on Triton's interpreter, started by `launcher`.
fn triton_worker(launcher: &[String], py: &str) -> String {
    let mut words: Vec<String> = launcher.to_vec();
    words.extend([
        "env".into(),
        "TRITON_INTERPRET=1".into(),
        format!("KERNEL_LSP_PYTHON={py}"),
        BIN.into(),
        "worker".into(),
    ]);
    words.join(" ")
}

fn srun(name: &str) -> Vec<String> {
    [
        "srun",
        "--ntasks=1",
        "--quiet",
        "--unbuffered",
        &format!("--job-name={name}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A pool of two real workers on Triton's interpreter, each started by `launcher`,
/// optimizes one step: both verify candidates and the candidates are timed.
fn two_triton_workers_optimize(name: &str, launcher: &[String]) {
    let py = python().expect("torch and triton for the interpreter");
    // Candidates that take the interpreter a while, so both workers get some: the first
    // checks the current version while the second verifies the first candidate. The
    // current version is the quick one (BLOCK = 1024: few programs to interpret), and
    // the first candidate the slow one (BLOCK = 64), so the check cannot outlast every
    // candidate of the second worker.
    let dir = workspace_sized(name, "1 << 15");
    let file = dir.join("vector_add.py");
    let text = std::fs::read_to_string(&file).unwrap();
    let quick = text.replace("BLOCK = 64;", "BLOCK = 1024;");
    assert_ne!(
        quick, text,
        "examples/vector_add.py's BLOCK changed; update this test"
    );
    std::fs::write(&file, quick).unwrap();
    let w = triton_worker(launcher, &py);
    let (run, stderr) = optimize_streaming(
        &dir,
        &[w.clone(), w],
        &["--steps", "1", "--only", "tunable_sweep"],
        |_| {},
    );
    let (on, timed) = workers_used(&run);
    assert_eq!(
        on,
        vec![1, 2],
        "both workers verified candidates:\n{stderr}"
    );
    assert!(timed >= 2, "candidates were timed: {run}");
    assert!(stderr.contains("candidates, "), "{stderr}");
}

#[test]
fn an_srun_pool_of_two_cpu_workers_optimizes_a_triton_example() {
    match slurm_missing() {
        Some(why) => eprintln!("SKIP cluster::srun: {why}"),
        None => two_triton_workers_optimize("srun", &srun(&format!("klsp-{}", std::process::id()))),
    }
}

#[test]
fn an_ssh_pool_of_two_cpu_workers_optimizes_a_triton_example() {
    match sshd_missing() {
        Some(why) => eprintln!("SKIP cluster::ssh: {why}"),
        None => two_triton_workers_optimize("ssh", &ssh_words()),
    }
}

/// Every candidate of the run verified and timed, as with no loss.
fn all_timed(run: &Value) -> bool {
    run["steps"].as_array().unwrap().iter().all(|s| {
        s["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["verified"] == true && c["median_ms"].is_number())
    })
}

#[test]
fn cancelling_an_srun_step_mid_run_requeues_its_candidate() {
    if let Some(why) = slurm_missing() {
        eprintln!("SKIP cluster::srun cancel: {why}");
        return;
    }
    let dir = workspace("scancel");
    let victim = format!("klsp-victim-{}", std::process::id());
    let fake = |name: &str, job: &str| {
        let mut w = srun(job);
        w.extend([
            "env".into(),
            format!("FAKE_NAME={name}"),
            "FAKE_VERIFY_MS=3000".into(),
            "python3".into(),
            fake_worker(),
        ]);
        w.join(" ")
    };
    let pool = [
        fake("A", &format!("klsp-a-{}", std::process::id())),
        fake("B", &victim),
    ];
    let (mut started, mut finished) = (0, 0);
    let mut cancelled_at = None;
    let (run, stderr) = optimize_streaming(
        &dir,
        &pool,
        &["--steps", "1", "--only", "tunable_sweep"],
        |line| {
            // Both workers hold a candidate or one of its cases (3 s a candidate; the
            // worker's own progress line says it has started): cancel B's srun step.
            finished += usize::from(line.contains("/3 candidates, "));
            if line.contains("/3)") && line.contains(": verifying") {
                started += 1;
                if started - finished == 2 && cancelled_at.is_none() {
                    let ok = Command::new("scancel")
                        .args(["--name", &victim])
                        .status()
                        .unwrap();
                    assert!(ok.success(), "scancel failed");
                    cancelled_at = Some(Instant::now());
                }
            }
        },
    );
    assert!(
        cancelled_at.is_some(),
        "the two candidates never ran at once:\n{stderr}"
    );
    assert!(
        stderr.contains("was lost; re-queued on the others"),
        "{stderr}"
    );
    assert!(
        all_timed(&run),
        "every candidate verified and timed after the loss: {run}\n{stderr}"
    );
}

#[test]
fn a_remote_worker_lost_over_ssh_has_its_candidate_requeued() {
    if let Some(why) = sshd_missing() {
        eprintln!("SKIP cluster::ssh loss: {why}");
        return;
    }
    let dir = workspace("ssh-loss");
    let log = dir.join("log");
    let fake = |name: &str, extra: &str| {
        let mut w = ssh_words();
        w.extend([
            "env".into(),
            format!("FAKE_NAME={name}"),
            "FAKE_VERIFY_MS=500".into(),
            format!("FAKE_LOG={}", log.display()),
        ]);
        w.extend(extra.split_whitespace().map(str::to_string));
        w.extend(["python3".into(), fake_worker()]);
        w.join(" ")
    };
    // B's remote process exits abruptly while it verifies its first candidate.
    let pool = [fake("A", ""), fake("B", "FAKE_DIE_ON=1")];
    let (run, stderr) = optimize_streaming(
        &dir,
        &pool,
        &["--steps", "1", "--only", "tunable_sweep"],
        |_| {},
    );
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(logged.contains("B died"), "{logged}");
    assert!(
        stderr.contains("was lost; re-queued on the others"),
        "{stderr}"
    );
    assert!(all_timed(&run), "{run}\n{stderr}");
}
