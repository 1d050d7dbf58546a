//! `kernel-lsp bench` on a GPU disturbed for a while (another tenant, clocks), with the
//! fake worker (`tests/fixtures/workers/fake_worker.py`, FAKE_DISTURBED): a disturbed
//! measurement is timed again, at most twice more, and the steadiest is reported whole,
//! the kernel and its reference from the one measurement, with a line that says so.

use std::process::Command;

use serde_json::Value;

use crate::bench_triton::KERNELS;
use crate::pool_parallel::fake_worker;

/// `bench --kernel add_new` (timed beside its reference `add_ref`) on the fake worker
/// whose first `disturbed` time requests are disturbed: (stdout, its time requests).
fn bench(name: &str, disturbed: u32, json: bool) -> (String, usize) {
    let dir = std::env::temp_dir().join(format!("kernel-lsp-retime-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("add.py");
    std::fs::write(&file, KERNELS.replace("OP", "+")).unwrap();
    let log = dir.join("log");
    let worker = format!(
        "env FAKE_DISTURBED={disturbed} FAKE_LOG={} python3 {}",
        log.display(),
        fake_worker().display()
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"));
    cmd.arg("bench")
        .arg(&file)
        .args(["--kernel", "add_new", "--worker", &worker]);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().expect("kernel-lsp runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    let requests = std::fs::read_to_string(&log).unwrap_or_default();
    let times = requests.lines().filter(|l| l.contains(" time ")).count();
    std::fs::remove_dir_all(&dir).ok();
    (stdout, times)
}

fn spread(t: &Value) -> f64 {
    (t["p90_ms"].as_f64().unwrap() - t["p10_ms"].as_f64().unwrap())
        / t["median_ms"].as_f64().unwrap()
}

fn only_kernel(stdout: &str) -> Value {
    let v: Value = serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    v["kernels"][0].clone()
}

#[test]
fn a_disturbed_timing_is_retimed_and_the_steady_measurement_reported_whole() {
    let (stdout, times) = bench("steadied", 2, true);
    let k = only_kernel(&stdout);
    assert_eq!(times, 3, "two disturbed measurements, then a steady one");
    assert_eq!(k["measurements"], 3, "{k:#}");
    let spreads: Vec<f64> = k["spreads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_f64().unwrap())
        .collect();
    assert_eq!(spreads.len(), 3, "{k:#}");
    assert!(
        (spreads[0] - 0.9).abs() < 1e-9 && (spreads[1] - 0.7).abs() < 1e-9,
        "{spreads:?}"
    );
    assert_eq!(spreads[2], 0.0);
    // The kernel and its reference both come from the steady measurement.
    assert_eq!(spread(&k["timing"]), 0.0, "{k:#}");
    assert_eq!(spread(&k["reference_timing"]), 0.0, "{k:#}");
    let ratio = k["reference_timing"]["median_ms"].as_f64().unwrap()
        / k["timing"]["median_ms"].as_f64().unwrap();
    assert!(
        (k["speedup"].as_f64().unwrap() - ratio).abs() < 1e-12,
        "{k:#}"
    );
}

#[test]
fn a_timing_disturbed_throughout_keeps_the_steadiest_of_three_and_says_so() {
    let (stdout, times) = bench("disturbed", 5, false);
    assert_eq!(times, 3, "at most two more measurements:\n{stdout}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("add_new "))
        .expect(&stdout);
    assert!(row.contains("± 50%"), "the kept (third) measurement: {row}");
    assert!(
        stdout.contains("add_new: timing was disturbed (spread 90%): measured 3 times, kept the steadiest (±50%), still disturbed"),
        "{stdout}"
    );
}

#[test]
fn an_undisturbed_timing_is_measured_once_and_says_nothing() {
    let (stdout, times) = bench("steady", 0, true);
    let k = only_kernel(&stdout);
    assert_eq!(times, 1);
    assert_eq!(k["measurements"], 1, "{k:#}");
    assert!(k.get("spreads").is_none(), "{k:#}");
}
