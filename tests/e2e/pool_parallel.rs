//! A step's candidates on a pool of several workers, through `kernel-lsp optimize` with
//! fake workers (`tests/fixtures/workers/fake_worker.py`, which speak the protocol and
//! time a version by a pure function of its text): verification runs in parallel, the
//! result is the one a single worker gives, a lost worker's candidate is re-queued, and
//! a winner timed on another device is re-timed on the primary worker.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_kernel-lsp");

pub(crate) fn fake_worker() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/workers/fake_worker.py")
        .canonicalize()
        .expect("the fake worker script exists")
}

/// A scratch folder with a copy of `examples/vector_add.py`.
fn workspace(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("kernel-lsp-parallel-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/vector_add.py");
    std::fs::copy(example, dir.join("vector_add.py")).unwrap();
    dir
}

/// One worker command: the fake with `env` settings, logging to `dir/log`.
fn worker(dir: &Path, name: &str, extra: &str) -> String {
    format!(
        "env FAKE_NAME={name} FAKE_LOG={} {extra} python3 {}",
        dir.join("log").display(),
        fake_worker().display()
    )
}

/// `optimize --json` with the pool `workers` (`;`-separated commands): (run, stderr).
fn optimize(dir: &Path, workers: &[String], steps: usize) -> (Value, String) {
    optimize_with(dir, workers, steps, &[])
}

/// [`optimize`] with `env` set for the server.
fn optimize_with(
    dir: &Path,
    workers: &[String],
    steps: usize,
    env: &[(&str, &str)],
) -> (Value, String) {
    let out = Command::new(BIN)
        .envs(env.iter().copied())
        .arg("optimize")
        .arg(dir.join("vector_add.py"))
        .args([
            "--steps",
            &steps.to_string(),
            "--fresh-policy",
            "--json",
            "--workers",
        ])
        .arg(workers.join("; "))
        .current_dir(dir)
        .output()
        .expect("kernel-lsp runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "optimize failed:\n{stderr}");
    let run: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", String::from_utf8_lossy(&out.stdout)));
    (run, stderr)
}

/// Per step: (strategy, outcome, accepted, sorted "label verified median").
fn summary(run: &Value) -> Vec<(String, String, String, Vec<String>)> {
    run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let mut cands: Vec<String> = s["candidates"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| format!("{} {} {}", c["label"], c["verified"], c["median_ms"]))
                .collect();
            cands.sort();
            (
                s["strategy_id"].to_string(),
                s["outcome"].to_string(),
                s["accepted"].to_string(),
                cands,
            )
        })
        .collect()
}

/// A logged request: (worker name, op, label, start, end).
type LogLine = (String, String, String, f64, f64);

/// Every logged request, in the order they ended.
fn log(dir: &Path) -> Vec<LogLine> {
    std::fs::read_to_string(dir.join("log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            Some((
                w[0].to_string(),
                w[1].to_string(),
                w[2].to_string(),
                w.get(3)?.parse().ok()?,
                w.get(4)?.parse().ok()?,
            ))
        })
        .collect()
}

/// The first logged `op` request that worker `name` served.
fn first(log: &[LogLine], name: &str, op: &str) -> LogLine {
    log.iter()
        .find(|r| r.0 == name && r.1 == op)
        .unwrap_or_else(|| panic!("no {op} by {name}: {log:?}"))
        .clone()
}

fn verified_candidates(step: &Value) -> Vec<&Value> {
    step["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["verified"] == true)
        .collect()
}

#[test]
fn two_workers_verify_in_parallel_and_accept_what_one_worker_accepts() {
    let one = workspace("one");
    let (seq, _) = optimize(&one, &[worker(&one, "A", "")], 3);
    let two = workspace("two");
    let pool = [
        worker(&two, "A", "FAKE_VERIFY_MS=600"),
        worker(&two, "B", "FAKE_VERIFY_MS=600"),
    ];
    let (par, stderr) = optimize(&two, &pool, 3);
    assert_eq!(
        summary(&seq),
        summary(&par),
        "the same steps, candidates and winners"
    );
    assert!(
        par["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["outcome"] == "accepted"),
        "the fake's timings accept something: {par}"
    );
    // Progress counts candidates and busy workers.
    assert!(stderr.contains("/3 candidates, "), "{stderr}");
    assert!(stderr.contains(" busy"), "{stderr}");
    // Each verified candidate records the worker (and device) that verified and timed it.
    let mut verifiers = std::collections::BTreeSet::new();
    for step in par["steps"].as_array().unwrap() {
        for c in verified_candidates(step) {
            let v = c["verified_on"]["device"]
                .as_str()
                .expect("verified_on.device");
            verifiers.insert(v.to_string());
            assert!(c["timed_on"]["worker"].as_u64().is_some(), "{c}");
        }
    }
    assert_eq!(verifiers.into_iter().collect::<Vec<_>>(), vec!["A", "B"]);
    // One worker's run records no workers (there is only one).
    assert!(seq["steps"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["candidates"].as_array().unwrap())
        .all(|c| c.get("verified_on").is_none() && c.get("timed_on").is_none()));
    // Two verifications on different workers overlapped in time.
    let verifies: Vec<_> = log(&two).into_iter().filter(|r| r.1 == "verify").collect();
    let overlapped = verifies.iter().any(|a| {
        verifies
            .iter()
            .any(|b| a.0 != b.0 && a.3 < b.4 && b.3 < a.4)
    });
    assert!(overlapped, "no two verifications ran at once: {verifies:?}");
    // Candidates are verified whole: no request named a case.
    assert!(
        verifies.iter().all(|r| !r.2.contains('@')),
        "a candidate was split into its cases: {verifies:?}"
    );
}

#[test]
fn the_workers_start_together_and_each_times_what_it_verified() {
    let dir = workspace("warm");
    let pool = [
        // Both are slow to start (a Python with torch, a CUDA context, a cluster's
        // queue), B more so.
        worker(&dir, "A", "FAKE_VERIFY_MS=400 FAKE_START_MS=600"),
        worker(&dir, "B", "FAKE_VERIFY_MS=400 FAKE_START_MS=800"),
    ];
    let (par, _) = optimize(&dir, &pool, 2);
    let log = log(&dir);
    // The workers start at once: B's start does not wait for A's hello.
    let (a_hello, b_hello) = (first(&log, "A", "hello"), first(&log, "B", "hello"));
    assert!(
        b_hello.3 < a_hello.4,
        "B started only after A had started: {log:?}"
    );
    // A's first verify is the current version's check: B was starting during it, not
    // after it (when the first step hands B a candidate).
    let check = first(&log, "A", "verify");
    assert!(
        b_hello.3 < check.4,
        "B started only after the current version's check: {log:?}"
    );
    // A candidate is timed by the worker that verified it (its kernel is loaded there).
    let mut seen = 0;
    for step in par["steps"].as_array().unwrap() {
        for c in verified_candidates(step) {
            assert_eq!(c["verified_on"]["worker"], c["timed_on"]["worker"], "{c}");
            seen += 1;
        }
    }
    assert!(seen >= 2, "too few verified candidates to tell: {par}");
}

#[test]
fn a_worker_done_verifying_times_its_share_while_the_other_still_verifies() {
    let dir = workspace("pipelined");
    let pool = [
        // A checks the current version (0-0.4 s) while B verifies the 1st candidate
        // (0-1.5 s); A verifies the 2nd and the 3rd (0.4-1.2 s), then finds the queue
        // empty and times its share while B still verifies.
        worker(&dir, "A", "FAKE_VERIFY_MS=400"),
        worker(&dir, "B", "FAKE_VERIFY_MS=1500"),
    ];
    let (run, _) = optimize(&dir, &pool, 1);
    let log = log(&dir);
    let check = first(&log, "A", "verify");
    let current = check.2.clone();
    // The primary checks the current version while B already verifies a candidate
    // (computing the reference's outputs itself): B does not check it a second time.
    let b_first = first(&log, "B", "verify");
    assert!(
        b_first.2 != current && b_first.3 < check.4,
        "B did not verify a candidate during the check: {log:?}"
    );
    assert_eq!(
        log.iter()
            .filter(|r| r.1 == "verify" && r.2 == current)
            .count(),
        1,
        "the current version is checked once: {log:?}"
    );
    // The step that verified candidates (a step before it may not apply).
    let step = run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|s| verified_candidates(s).len())
        .expect("a step ran");
    assert!(
        verified_candidates(step).len() >= 3,
        "too few candidates to tell: {run}"
    );
    // Some worker timed its share while the other was still verifying a candidate.
    let overlapped = log.iter().filter(|t| t.1 == "time").any(|t| {
        log.iter()
            .any(|v| v.1 == "verify" && v.0 != t.0 && v.2 != current && v.3 < t.3 && t.3 < v.4)
    });
    assert!(
        overlapped,
        "every timing waited for the last verification: {log:?}"
    );
    // And every verified candidate was timed by the worker that verified it.
    for c in verified_candidates(step) {
        assert_eq!(c["verified_on"]["worker"], c["timed_on"]["worker"], "{c}");
    }
}

#[test]
fn workers_that_share_the_primarys_compile_cache_leave_their_timing_to_it() {
    let one = workspace("cache-ref");
    let (seq, _) = optimize(&one, &[worker(&one, "A", "")], 2);
    let dir = workspace("cache");
    let cache = "FAKE_CACHE=host:/home/a/.triton/cache";
    let pool = [
        // In a step of 3 candidates A verifies the 1st and the 3rd (0-0.8 s; 1.2 s in
        // the first step, which also checks the current version), B the 2nd (0-1.3
        // s). A, done first, times its own while B still verifies; B leaves the 2nd to
        // A. B's device sees every candidate 3x faster: it decides nothing, as it
        // times nothing.
        worker(&dir, "A", &format!("FAKE_VERIFY_MS=400 {cache}")),
        worker(
            &dir,
            "B",
            &format!("FAKE_VERIFY_MS=1300 FAKE_BIAS=:0.33 {cache}"),
        ),
    ];
    let (par, stderr) = optimize(&dir, &pool, 2);
    assert_eq!(summary(&seq), summary(&par), "the one-worker result");
    let lines = log(&dir);
    assert!(
        lines.iter().all(|r| !(r.0 == "B" && r.1 == "time")),
        "B timed candidates the primary could load: {lines:?}"
    );
    let mut foreign = 0;
    for step in par["steps"].as_array().unwrap() {
        for c in verified_candidates(step) {
            assert_eq!(c["timed_on"]["worker"], 1, "{c}");
            foreign += usize::from(c["verified_on"]["worker"] == 2);
        }
        for check in step["checks"].as_array().cloned().unwrap_or_default() {
            assert!(!check.to_string().contains("re-timed"), "{check}");
        }
    }
    assert!(foreign >= 1, "B verified nothing: {par}");
    // The primary timed its own while B still verified.
    let overlapped = lines
        .iter()
        .filter(|t| t.0 == "A" && t.1 == "time")
        .any(|t| {
            lines
                .iter()
                .any(|v| v.0 == "B" && v.1 == "verify" && v.3 < t.3 && t.3 < v.4)
        });
    assert!(overlapped, "A timed only after B was done: {lines:?}");
    assert!(
        stderr.contains("beside the current version on worker 1"),
        "{stderr}"
    );

    // Caches of different folders (or hosts) are not shared: B times its own and its
    // best is re-timed on the primary, as before.
    let apart = workspace("cache-apart");
    let pool = [
        worker(&apart, "A", "FAKE_VERIFY_MS=400 FAKE_CACHE=host:/a"),
        worker(&apart, "B", "FAKE_VERIFY_MS=500 FAKE_CACHE=host:/b"),
    ];
    let (par, _) = optimize(&apart, &pool, 1);
    assert!(
        log(&apart).iter().any(|r| r.0 == "B" && r.1 == "time"),
        "B did not time its own: {:?}",
        log(&apart)
    );
    let step = par["steps"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|s| verified_candidates(s).len())
        .expect("a step ran");
    for c in verified_candidates(step) {
        assert_eq!(c["verified_on"]["worker"], c["timed_on"]["worker"], "{c}");
    }
}

#[test]
fn a_worker_lost_mid_step_has_its_candidate_requeued_and_the_step_completes() {
    let one = workspace("lost-ref");
    let (seq, _) = optimize(&one, &[worker(&one, "A", "")], 1);
    let dir = workspace("lost");
    let pool = [
        worker(&dir, "A", "FAKE_VERIFY_MS=300"),
        // B dies while it verifies its first candidate (its check of the current
        // version, when it is up in time for one, does not count); its replacement
        // lives.
        worker(&dir, "B", "FAKE_VERIFY_MS=300 FAKE_DIE_ON=1"),
    ];
    let (par, stderr) = optimize(&dir, &pool, 1);
    let log = log(&dir);
    assert!(log.iter().any(|r| r.1 == "died"), "B never died: {log:?}");
    assert!(
        stderr.contains("was lost; re-queued on the others"),
        "{stderr}"
    );
    assert_eq!(
        summary(&seq),
        summary(&par),
        "every candidate still verified and timed"
    );
}

#[test]
fn a_winner_timed_on_another_device_is_retimed_on_the_primary() {
    let one = workspace("fair-ref");
    let (seq, _) = optimize(&one, &[worker(&one, "A", "")], 2);
    let dir = workspace("fair");
    let pool = [
        worker(&dir, "A", "FAKE_VERIFY_MS=300"),
        // A device on which every candidate looks 3x faster than on the primary.
        worker(&dir, "B", "FAKE_VERIFY_MS=300 FAKE_BIAS=:0.33"),
    ];
    let (par, _) = optimize(&dir, &pool, 2);
    let outcomes = |run: &Value| -> Vec<(String, String)> {
        run["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["outcome"].to_string(), s["accepted"].to_string()))
            .collect()
    };
    assert_eq!(outcomes(&seq), outcomes(&par), "B's bias decided nothing");
    let checks: Vec<String> = par["steps"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["checks"].as_array().cloned().unwrap_or_default())
        .map(|c| c.as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        checks
            .iter()
            .any(|c| c.contains("timed on worker 2 (B); re-timed on worker 1 (A)")),
        "{checks:?}"
    );
    // The accepted speedup is the primary's measurement, as the one-worker run has it.
    let speedups = |run: &Value| -> Vec<String> {
        run["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| format!("{:.3}", s["speedup"].as_f64().unwrap()))
            .collect()
    };
    assert_eq!(speedups(&seq), speedups(&par), "{seq}\n{par}");
}

#[test]
fn a_best_timed_on_the_primary_that_others_of_its_model_cannot_reach_is_not_retimed() {
    let one = workspace("clear-ref");
    let (seq, _) = optimize(&one, &[worker(&one, "A", "")], 2);
    let dir = workspace("clear");
    let pool = [
        // Two GPUs of one model, compile caches apart. In the step that accepts, B
        // verifies and times one candidate while A checks the current version and
        // verifies the other two, among them the best (timed on A); B's is slower
        // beyond the noise.
        worker(&dir, "A", "FAKE_VERIFY_MS=400 FAKE_DEVICE=H100"),
        worker(&dir, "B", "FAKE_VERIFY_MS=500 FAKE_DEVICE=H100"),
    ];
    let (par, _) = optimize(&dir, &pool, 2);
    assert_eq!(summary(&seq), summary(&par), "the one-worker result");
    assert!(
        log(&dir).iter().any(|r| r.0 == "B" && r.1 == "time"),
        "B timed nothing: {:?}",
        log(&dir)
    );
    let accepted = par["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["outcome"] == "accepted")
        .expect("a step accepts");
    let winner = accepted["accepted"].as_str().unwrap();
    let timed_on = |label: &str| {
        verified_candidates(accepted)
            .into_iter()
            .find(|c| c["label"] == label)
            .map(|c| c["timed_on"]["worker"].clone())
    };
    assert_eq!(timed_on(winner), Some(1.into()), "{accepted}");
    assert!(
        verified_candidates(accepted)
            .iter()
            .any(|c| c["timed_on"]["worker"] == 2),
        "{accepted}"
    );
    let checks = accepted["checks"].to_string();
    assert!(!checks.contains("re-timed"), "{checks}");
}

#[test]
fn a_current_version_that_fails_its_check_stops_the_step_on_every_worker() {
    let msg = "y[4096]: written past the end (case 1)";
    for workers in [1, 2] {
        let dir = workspace(&format!("bad-check-{workers}"));
        let pool: Vec<String> = ["A", "B"][..workers]
            .iter()
            .map(|n| {
                worker(
                    &dir,
                    n,
                    &format!("FAKE_VERIFY_MS=300 'FAKE_FAIL_CHECK={msg}'"),
                )
            })
            .collect();
        let out = Command::new(BIN)
            .arg("optimize")
            .arg(dir.join("vector_add.py"))
            .args(["--steps", "2", "--fresh-policy", "--json", "--workers"])
            .arg(pool.join("; "))
            .current_dir(&dir)
            .output()
            .expect("kernel-lsp runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{workers} workers: a failed check passed:\n{stderr}"
        );
        assert!(
            stderr.contains("does not pass its own check") && stderr.contains(msg),
            "{workers} workers: {stderr}"
        );
        // The other worker verified at most the candidates it had taken before the check
        // failed; the lone worker verified none (it checks first).
        let candidates = log(&dir)
            .iter()
            .filter(|r| r.1 == "verify" && r.2 != "current")
            .count();
        assert!(
            candidates <= workers - 1 + usize::from(workers > 1),
            "{workers} workers: {candidates} candidates verified after a failed check: {:?}",
            log(&dir)
        );
        // Nothing was recorded for the step.
        let history = dir.join(".kernel-lsp/history/vector_add.py/add_kernel.jsonl");
        let kept = std::fs::read_to_string(&history).unwrap_or_default();
        assert!(kept.trim().is_empty(), "{workers} workers: {kept}");
    }
}

#[test]
fn the_pool_trace_records_each_workers_requests() {
    let dir = workspace("trace");
    let pool = [
        worker(&dir, "A", "FAKE_VERIFY_MS=200"),
        worker(&dir, "B", "FAKE_VERIFY_MS=200"),
    ];
    let trace = dir.join("pool.trace");
    let path = trace.to_string_lossy().into_owned();
    let (run, _) = optimize_with(&dir, &pool, 1, &[("KERNEL_LSP_TRACE", path.as_str())]);
    let text = std::fs::read_to_string(&trace).expect("the trace was written");
    let recs: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    // Every request the fake workers logged is in the trace, with its worker and op.
    let logged = log(&dir);
    for op in ["verify", "time"] {
        let traced = recs.iter().filter(|r| r["op"] == op).count();
        let seen = logged.iter().filter(|r| r.1 == op).count();
        assert_eq!(traced, seen, "{op}: {text}");
    }
    let workers: std::collections::BTreeSet<u64> =
        recs.iter().filter_map(|r| r["worker"].as_u64()).collect();
    assert_eq!(
        workers.into_iter().collect::<Vec<_>>(),
        vec![0, 1],
        "{text}"
    );
    assert!(
        recs.iter()
            .any(|r| r["op"] == "verify" && r["what"] == "current"),
        "the current version's check: {text}"
    );
    for r in &recs {
        let (a, b) = (r["start"].as_f64().unwrap(), r["end"].as_f64().unwrap());
        assert!(a > 1.0e9 && a <= b, "{r}");
        assert_eq!(r["ok"], true, "{r}");
    }
    // The candidates verified are named by their labels.
    let labels: Vec<&str> = run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(verified_candidates)
        .filter_map(|c| c["label"].as_str())
        .collect();
    assert!(!labels.is_empty(), "{run}");
    assert!(
        labels
            .iter()
            .all(|l| recs.iter().any(|r| r["op"] == "verify" && r["what"] == *l)),
        "{labels:?}: {text}"
    );
}
