//! Tests through the real helper: plans come from real `@bench` blocks, kernels run in
//! Triton (the CPU interpreter unless `TRITON_INTERPRET` is set otherwise). Without a
//! python that has torch and triton they print `SKIP <name>: <reason>` and pass, unless
//! `KERNEL_LSP_REQUIRE_TOOLS=1`. The interpreter comes from `KERNEL_LSP_PYTHON`, else
//! `$VIRTUAL_ENV/bin/python3`, else `./.venv/bin/python3` at the repository root.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use super::TritonBackend;
use crate::document::Document;
use crate::spec::{self, BenchPlan, EvalEnv, Value};
use crate::syntax::{self, Lang};
use crate::worker::backend::Backend;
use crate::worker::protocol::{
    ErrorKind, FailureKind, Op, OpResult, TimeReport, TimeSettings, VerifyReport, Version,
    WorkerError,
};

const ADD: &str = r#"import triton
import triton.language as tl


# @bench n = 1000, 77
# @bench x_ptr: in f32[n] ~ arange; y_ptr: in f32[n] ~ ones; out_ptr: out f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 256; num_warps = 4
# @bench tune BLOCK in [256, 1024]
# @bench trials = 2
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)
"#;

/// The same file with random inputs (docs/spec.md's defaults) for the timing test.
fn add_random() -> String {
    ADD.replace(" ~ arange", "").replace(" ~ ones", "")
}

const SOFTMAX: &str = r#"import triton
import triton.language as tl


# @bench rows = 16, 3; cols = 100, 77
# @bench x_ptr: in f32[rows, cols]; out_ptr: out f32[rows, cols]
# @bench n_cols = cols; stride = cols
# @bench BLOCK = next_pow2(cols); grid = rows; num_warps = 4
@triton.jit
def softmax_kernel(out_ptr, x_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * stride + offs, num / tl.sum(num, axis=0), mask=mask)
"#;

/// The interpreter the tests run, per the module doc.
fn test_python() -> PathBuf {
    if let Some(p) = std::env::var_os("KERNEL_LSP_PYTHON").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(v) = std::env::var_os("VIRTUAL_ENV").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(v).join("bin").join("python3");
        if p.exists() {
            return p;
        }
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(".venv")
        .join("bin")
        .join("python3");
    if venv.exists() {
        return venv;
    }
    PathBuf::from("python3")
}

fn new_backend() -> TritonBackend {
    let b = TritonBackend::new(Some(test_python()));
    // CI has no GPU: the CPU interpreter, unless the runner chose otherwise.
    if std::env::var_os("TRITON_INTERPRET").is_none() {
        b.with_env("TRITON_INTERPRET", "1")
    } else {
        b
    }
}

/// One helper for the whole suite (importing torch and triton takes seconds); `None`
/// when the tools are missing and the test should skip.
fn shared(test: &str) -> Option<std::sync::MutexGuard<'static, TritonBackend>> {
    static BACKEND: OnceLock<Mutex<TritonBackend>> = OnceLock::new();
    let m = BACKEND.get_or_init(|| Mutex::new(new_backend()));
    let mut b = m.lock().unwrap_or_else(|e| e.into_inner());
    let st = b.status();
    if st.available {
        return Some(b);
    }
    if std::env::var("KERNEL_LSP_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!(
            "{test}: the Triton backend is required but unavailable: {}",
            st.message
        );
    }
    {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "SKIP {test}: {}", st.message);
    }
    None
}

fn plan_with(src: &str, kernel: &str, overrides: &[(&str, i64)]) -> BenchPlan {
    let doc = Document::new(Lang::Triton, 0, src);
    let tree = doc.tree().expect("python parses");
    let model = syntax::analyze(Lang::Triton, src, tree);
    let k = model.kernel(kernel).expect("kernel found");
    let overrides: BTreeMap<String, Value> = overrides
        .iter()
        .map(|(n, v)| (n.to_string(), Value::Int(*v)))
        .collect();
    let report = spec::analyze_with(k, &model.kernels, &EvalEnv::default(), &overrides);
    report
        .plan
        .unwrap_or_else(|| panic!("no plan for {kernel}: {:?}", report.diagnostics))
}

fn version(label: &str, src: &str, plan: BenchPlan) -> Version {
    Version {
        torch: None,
        label: label.into(),
        lang: Lang::Triton,
        source: src.into(),
        plan,
        options: vec![],
        cuda: None,
    }
}

fn add_version(label: &str, src: &str) -> Version {
    version(label, src, plan_with(src, "add_kernel", &[]))
}

fn verify(
    b: &mut TritonBackend,
    cand: Version,
    reference: Version,
) -> Result<VerifyReport, WorkerError> {
    let op = Op::Verify {
        candidate: Box::new(cand),
        reference: Box::new(reference),
        seed: 42,
        sanitize: false,
        cases: None,
        tally: false,
    };
    let mut stages = Vec::new();
    let r = b.run(&op, &mut |s| stages.push(s.to_string()));
    match r? {
        OpResult::Verify(v) => {
            assert!(!stages.is_empty(), "verify reports progress");
            Ok(v)
        }
        other => panic!("verify answered {other:?}"),
    }
}

#[test]
fn plan_serializes_as_the_helper_reads_it() {
    let plan = plan_with(ADD, "add_kernel", &[]);
    let json = serde_json::to_value(&plan).unwrap();
    let args = &json["cases"][0]["args"];
    assert_eq!(args[0]["kind"], "buffer");
    assert_eq!(args[0]["dtype"], "f32");
    assert_eq!(args[0]["dist"]["kind"], "arange");
    assert_eq!(args[2]["role"], "out");
    assert_eq!(args[3]["kind"], "scalar");
    assert_eq!(args[3]["ty"], "i64");
    assert_eq!(args[4]["kind"], "constexpr");
    assert_eq!(args[4]["value"], 256);
    let launch = &json["cases"][0]["launch"];
    assert_eq!(launch["kind"], "triton");
    assert_eq!(launch["grid"], serde_json::json!([4]));
    assert_eq!(launch["num_warps"], 4);
    let random = plan_with(&add_random(), "add_kernel", &[]);
    let dist = serde_json::to_value(&random).unwrap()["cases"][0]["args"][0]["dist"].clone();
    assert_eq!(
        dist,
        serde_json::json!({"kind": "uniform", "lo": -1.0, "hi": 1.0})
    );
}

#[test]
fn add_kernel_verifies_against_itself() {
    let Some(mut b) = shared("add_kernel_verifies_against_itself") else {
        return;
    };
    let st = b.status();
    let v = verify(
        &mut b,
        add_version("candidate", ADD),
        add_version("baseline", ADD),
    )
    .unwrap();
    assert!(v.passed, "{v:?}");
    assert_eq!(v.failure, None);
    assert_eq!((v.cases, v.trials, v.seed), (2, 2, 42));
    assert!(!v.nondeterministic);
    assert_eq!(v.interpreter, st.interpreter);
    if std::env::var_os("TRITON_INTERPRET").is_none() {
        assert!(v.interpreter && st.interpreter, "{st:?}");
        assert!(st.message.contains("interpreter"), "{}", st.message);
    }

    // Compile: the first launch; the second one of the same kernel is a cache hit.
    let op = Op::Compile {
        version: add_version("candidate", ADD),
    };
    let OpResult::Compile(c) = b.run(&op, &mut |_| {}).unwrap() else {
        panic!("compile answered something else");
    };
    assert!(c.cached, "verify launched this kernel already: {c:?}");
    assert!(c.compile_ms >= 0.0);
}

#[test]
fn wrong_result_names_buffer_index_and_values() {
    let Some(mut b) = shared("wrong_result_names_buffer_index_and_values") else {
        return;
    };
    let bad = ADD.replace("x + y, mask", "x - y, mask");
    let v = verify(
        &mut b,
        add_version("candidate", &bad),
        add_version("baseline", ADD),
    )
    .unwrap();
    assert!(!v.passed);
    let f = v.failure.expect("a failure");
    assert_eq!(f.kind, FailureKind::Mismatch, "{}", f.message);
    assert_eq!(f.buffer.as_deref(), Some("out_ptr"));
    assert_eq!((f.case, f.trial), (0, 0));
    // x = arange, y = ones: out[0] should be 0 + 1, the kernel gives 0 - 1.
    assert_eq!(f.index, Some(vec![0]));
    assert_eq!(f.expected, Some(1.0));
    assert_eq!(f.actual, Some(-1.0));
    assert_eq!(f.max_abs_err, Some(2.0));
    assert!(
        f.message
            .starts_with("add_kernel: out_ptr[0]: expected 1, got -1"),
        "{}",
        f.message
    );
    assert!(f.message.contains("seed 0x"), "{}", f.message);
}

#[test]
fn a_verify_of_one_case_runs_that_case_alone() {
    let Some(mut b) = shared("a_verify_of_one_case_runs_that_case_alone") else {
        return;
    };
    // Wrong in every case: the failure is in the first case the request covers.
    let bad = ADD.replace("x + y, mask", "x - y, mask");
    for case in [1, 0] {
        let op = Op::verify_case(
            &add_version("candidate", &bad),
            &add_version("baseline", ADD),
            42,
            case,
        );
        let mut stages = Vec::new();
        let OpResult::Verify(v) = b.run(&op, &mut |s| stages.push(s.to_string())).unwrap() else {
            panic!("verify answered something else");
        };
        let f = v.failure.expect("a failure");
        assert_eq!(f.case, case, "{}", f.message);
        let other = format!("verifying case {}/2", 2 - case);
        assert!(!stages.iter().any(|s| s.starts_with(&other)), "{stages:?}");
    }
    // A good candidate passes case 2 alone.
    let op = Op::verify_case(
        &add_version("candidate", ADD),
        &add_version("baseline", ADD),
        42,
        1,
    );
    let OpResult::Verify(v) = b.run(&op, &mut |_| {}).unwrap() else {
        panic!("verify answered something else");
    };
    assert!(v.passed, "{v:?}");
}

#[test]
fn unwritten_tail_is_nan_at_first_unwritten_index() {
    let Some(mut b) = shared("unwritten_tail_is_nan_at_first_unwritten_index") else {
        return;
    };
    let short = ADD.replace("x + y, mask=mask", "x + y, mask=offs < n - 3");
    let v = verify(
        &mut b,
        add_version("candidate", &short),
        add_version("baseline", ADD),
    )
    .unwrap();
    let f = v.failure.expect("a failure");
    assert_eq!(f.kind, FailureKind::Nan, "{}", f.message);
    assert_eq!(f.buffer.as_deref(), Some("out_ptr"));
    assert_eq!(f.index, Some(vec![997]));
    assert_eq!(f.expected, Some(998.0));
    assert_eq!(f.actual, None, "NaN travels as null");
    assert!(f.message.contains("got NaN"), "{}", f.message);
}

#[test]
fn store_past_the_end_is_out_of_bounds() {
    let Some(mut b) = shared("store_past_the_end_is_out_of_bounds") else {
        return;
    };
    let oob = ADD.replace("mask = offs < n", "mask = offs <= n");
    let v = verify(
        &mut b,
        add_version("candidate", &oob),
        add_version("baseline", ADD),
    )
    .unwrap();
    let f = v.failure.expect("a failure");
    assert_eq!(f.kind, FailureKind::OutOfBounds, "{}", f.message);
    assert_eq!(f.buffer.as_deref(), Some("out_ptr"));
    assert_eq!(f.index, Some(vec![1000]));
    assert!(f.message.contains("past the end"), "{}", f.message);
}

#[test]
fn python_errors_are_compile_failures() {
    let Some(mut b) = shared("python_errors_are_compile_failures") else {
        return;
    };
    let typo = ADD.replace("y = tl.load(", "y = tl.lod(");
    let e = verify(
        &mut b,
        add_version("candidate", &typo),
        add_version("baseline", ADD),
    )
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::CompileFailed, "{e:?}");
    assert!(
        e.message.starts_with("add_kernel (candidate): "),
        "{}",
        e.message
    );
    assert!(e.message.contains("line 16"), "{}", e.message);
    assert!(
        e.message.contains("has no attribute 'lod'"),
        "{}",
        e.message
    );

    // A module that does not even import: same kind, the SyntaxError's line.
    let broken = ADD.replace("def add_kernel(", "def add_kernel(:");
    let op = Op::Compile {
        version: version("candidate", &broken, plan_with(ADD, "add_kernel", &[])),
    };
    let e = b.run(&op, &mut |_| {}).unwrap_err();
    assert_eq!(e.kind, ErrorKind::CompileFailed, "{e:?}");
    assert!(e.message.contains("SyntaxError"), "{}", e.message);
    assert!(e.message.contains("line 11"), "{}", e.message);
}

#[test]
fn block_tunable_versions_verify_and_time_together() {
    let Some(mut b) = shared("block_tunable_versions_verify_and_time_together") else {
        return;
    };
    let src = add_random();
    let v256 = version(
        "BLOCK=256",
        &src,
        plan_with(&src, "add_kernel", &[("BLOCK", 256)]),
    );
    let v1024 = version(
        "BLOCK=1024",
        &src,
        plan_with(&src, "add_kernel", &[("BLOCK", 1024)]),
    );
    let v = verify(&mut b, v1024.clone(), v256.clone()).unwrap();
    assert!(v.passed, "{v:?}");
    let op = Op::Time {
        versions: vec![v256, v1024],
        settings: TimeSettings {
            warmup_ms: 2.0,
            rep_ms: 10.0,
            min_reps: 3,
            flush_l2: true,
            energy: false,
        },
    };
    let OpResult::Time(TimeReport {
        timings,
        interpreter,
    }) = b.run(&op, &mut |_| {}).unwrap()
    else {
        panic!("time answered something else");
    };
    assert_eq!(interpreter, b.status().interpreter);
    let labels: Vec<&str> = timings.iter().map(|t| t.label.as_str()).collect();
    assert_eq!(labels, ["BLOCK=256", "BLOCK=1024"]);
    for t in &timings {
        assert!(t.reps >= 3, "{t:?}");
        assert!(t.median_ms > 0.0 && t.min_ms <= t.median_ms, "{t:?}");
        assert!(t.p10_ms <= t.median_ms && t.median_ms <= t.p90_ms, "{t:?}");
        let [lo, hi] = t.median_interval_ms.expect("the median's interval");
        assert!(lo <= t.median_ms && t.median_ms <= hi, "{t:?}");
        // case 0 moves 3 * 1000 * 4 bytes
        let expect = 12_000.0 / (t.median_ms * 1e-3) / 1e9;
        assert!((t.gbps - expect).abs() <= 1e-9 * expect.max(1.0), "{t:?}");
    }
}

#[test]
fn softmax_failure_index_is_two_dimensional() {
    let Some(mut b) = shared("softmax_failure_index_is_two_dimensional") else {
        return;
    };
    let plan = || plan_with(SOFTMAX, "softmax_kernel", &[]);
    let good = version("candidate", SOFTMAX, plan());
    let v = verify(&mut b, good.clone(), version("baseline", SOFTMAX, plan())).unwrap();
    assert!(v.passed, "{v:?}");

    // Row 3 is never written.
    let skip = SOFTMAX.replace("    tl.store(", "    if row != 3:\n        tl.store(");
    let v = verify(&mut b, version("candidate", &skip, plan()), good).unwrap();
    let f = v.failure.expect("a failure");
    assert_eq!(f.kind, FailureKind::Nan, "{}", f.message);
    assert_eq!(f.buffer.as_deref(), Some("out_ptr"));
    assert_eq!(f.index, Some(vec![3, 0]));
    assert!(f.message.contains("out_ptr[3, 0]"), "{}", f.message);
}

#[test]
fn dead_helper_is_reported_and_restarted() {
    let Some(mut b) = shared("dead_helper_is_reported_and_restarted") else {
        return;
    };
    let dies = "import os\nos._exit(7)\n";
    let op = Op::Compile {
        version: version("candidate", dies, plan_with(ADD, "add_kernel", &[])),
    };
    let e = b.run(&op, &mut |_| {}).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Fault, "{e:?}");
    assert!(e.message.contains("exit code 7"), "{}", e.message);
    assert!(e.message.contains("restarts"), "{}", e.message);
    // The next request gets a fresh helper.
    let op = Op::Compile {
        version: add_version("candidate", ADD),
    };
    assert!(matches!(b.run(&op, &mut |_| {}), Ok(OpResult::Compile(_))));
}

#[test]
fn missing_python_is_a_clear_status() {
    let mut b = TritonBackend::new(Some(PathBuf::from("/nonexistent/kernel-lsp/python3")));
    let st = b.status();
    assert!(!st.available);
    assert_eq!(
        st.message,
        "/nonexistent/kernel-lsp/python3 not found; set the editor setting `kernel-lsp.python` (or `KERNEL_LSP_PYTHON` for the command line) to an interpreter with torch and triton"
    );
    let e = b
        .run(
            &Op::Compile {
                version: add_version("candidate", ADD),
            },
            &mut |_| {},
        )
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NoBackend);
    assert_eq!(e.message, st.message);
}

#[test]
fn python_without_torch_names_the_module_and_pip() {
    // Any python3 on PATH that lacks torch (a system python usually does).
    let mut b = TritonBackend::new(Some(PathBuf::from("/usr/bin/python3")));
    let st = b.status();
    if st.available || st.message.contains("not found") {
        {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIP python_without_torch_names_the_module_and_pip: /usr/bin/python3 is missing or has torch and triton");
        }
        return;
    }
    if !st.message.contains("cannot import") {
        {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIP python_without_torch_names_the_module_and_pip: {}",
                st.message
            );
        }
        return;
    }
    assert!(
        st.message.contains("cannot import torch") || st.message.contains("cannot import triton"),
        "{}",
        st.message
    );
    assert!(st.message.contains("-m pip install"), "{}", st.message);
}

/// Kernels that cheat or are subtly wrong, each against an honest reference of the same
/// signature (issue #10; the same checks as the CUDA worker's, docs/verification.md).
const CHEATS: &str = r#"import triton
import triton.language as tl


# @bench n = 1000, 77
# @bench x_ptr: in f32[n]; out_ptr: out f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 256
@triton.jit
def copy_ref(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


# @bench n = 1000, 77
# @bench x_ptr: in f32[n]; out_ptr: out f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 256
@triton.jit
def copy_unmasked(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


# @bench n = 1000, 77
# @bench x_ptr: in f32[n]; out_ptr: out f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 256
@triton.jit
def scaled_ref(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 1.000001, mask=m)


# @bench n = 1000, 77
# @bench x_ptr: in f32[n]; out_ptr: out f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 256
@triton.jit
def tiny_ref(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 1e-7, mask=m)


# @bench n = 1000, 77
# @bench x_ptr: in f32[n]; out_ptr: out f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 256
@triton.jit
def all_zero(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=m)


# @bench n = 1000, 77
# @bench x_ptr: in f32[n]; out_ptr: out f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 256
@triton.jit
def clobbers_input(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 1.000001, mask=m)
    tl.store(x_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=m)


# @bench n = 1000, 77
# @bench x_ptr: in f32[n]; y_ptr: inout f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 256
@triton.jit
def nudge_ref(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(y_ptr + offs, y + 1e-7 * tl.load(x_ptr + offs, mask=m), mask=m)


# @bench n = 1000, 77
# @bench x_ptr: in f32[n]; y_ptr: inout f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 256
@triton.jit
def leaves_y(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(y_ptr + offs, mask=m), mask=m)
"#;

/// The failure of `cand` against `reference` (both in `CHEATS`), after checking that the
/// reference passes its own check.
fn cheat_failure(
    test: &str,
    cand: &str,
    reference: &str,
) -> Option<crate::worker::protocol::Failure> {
    let mut b = shared(test)?;
    let v = |k: &str| version(k, CHEATS, plan_with(CHEATS, k, &[]));
    let own = verify(&mut b, v(reference), v(reference)).unwrap();
    assert!(own.passed, "{test}: reference fails its own check: {own:?}");
    let r = verify(&mut b, v(cand), v(reference)).unwrap();
    assert!(!r.passed, "{test}: `{cand}` passed");
    r.failure
}

#[test]
fn cheat_guard_bytes_copied_from_another_buffer_are_out_of_bounds() {
    let Some(f) = cheat_failure("cheat_guard_copy", "copy_unmasked", "copy_ref") else {
        return;
    };
    assert_eq!(f.kind, FailureKind::OutOfBounds, "{}", f.message);
    assert_eq!(f.buffer.as_deref(), Some("out_ptr"));
    assert_eq!(f.index, Some(vec![1000]));
    assert!(
        f.message
            .contains("out-of-bounds write past the end of `out_ptr`"),
        "{}",
        f.message
    );
}

#[test]
fn cheat_constant_output_within_tolerance() {
    let Some(f) = cheat_failure("cheat_constant", "all_zero", "tiny_ref") else {
        return;
    };
    assert_eq!(f.kind, FailureKind::Cheat, "{}", f.message);
    assert!(
        f.message
            .contains("anti-cheat (constant output): every element of `out_ptr` is 0"),
        "{}",
        f.message
    );
}

#[test]
fn cheat_output_that_copies_an_input() {
    let Some(f) = cheat_failure("cheat_copies_input", "copy_ref", "scaled_ref") else {
        return;
    };
    assert_eq!(f.kind, FailureKind::Cheat, "{}", f.message);
    assert!(
        f.message.contains(
            "anti-cheat (output copies an input): `out_ptr` is a copy of the input `x_ptr`"
        ),
        "{}",
        f.message
    );
}

#[test]
fn cheat_writes_into_an_input() {
    let Some(f) = cheat_failure("cheat_writes_input", "clobbers_input", "scaled_ref") else {
        return;
    };
    assert_eq!(f.kind, FailureKind::InputWritten, "{}", f.message);
    assert_eq!(f.buffer.as_deref(), Some("x_ptr"));
    assert!(
        f.message
            .contains("wrote into the input buffer `x_ptr`: 1000 elements changed"),
        "{}",
        f.message
    );
}

#[test]
fn cheat_inout_left_as_it_was() {
    let Some(f) = cheat_failure("cheat_noop", "leaves_y", "nudge_ref") else {
        return;
    };
    assert_eq!(f.kind, FailureKind::Cheat, "{}", f.message);
    assert!(
        f.message
            .contains("anti-cheat (output unchanged): `y_ptr` still holds its initial values"),
        "{}",
        f.message
    );
}
