//! GPU tests of the CUDA worker backend, driven through `CudaBackend` with plans made
//! by the real spec pipeline from inline sources. Each test prints
//! `SKIP <name>: no CUDA device (...)` and returns when no GPU can be opened, unless
//! KERNEL_LSP_REQUIRE_GPU=1 (tests/gpu/run.sh sets it), where that fails the test.
//! Every test name starts with `gpu_` so `e2e gpu` selects exactly these.

use std::time::Instant;

use kernel_lsp::document::Document;
use kernel_lsp::spec::{self, EvalEnv, Launch};
use kernel_lsp::syntax::{self, Lang};
use kernel_lsp::worker::backend::Backend;
use kernel_lsp::worker::cuda::CudaBackend;
use kernel_lsp::worker::protocol::{
    ErrorKind, FailureKind, Op, OpResult, TimeReport, TimeSettings, VerifyReport, Version,
};

fn backend(test: &str) -> Option<CudaBackend> {
    let mut b = CudaBackend::new();
    let s = b.status();
    if s.available {
        return Some(b);
    }
    if std::env::var("KERNEL_LSP_REQUIRE_GPU").as_deref() == Ok("1") {
        panic!(
            "{test}: KERNEL_LSP_REQUIRE_GPU=1 but the CUDA backend is unavailable: {}",
            s.message
        );
    }
    {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIP {test}: no CUDA device ({})",
            s.message
        );
    }
    None
}

/// The version of kernel `name` in `src`, planned by the real spec pipeline.
fn version(src: &str, name: &str, label: &str) -> Version {
    let doc = Document::new(Lang::Cuda, 0, src);
    let model = syntax::analyze(Lang::Cuda, doc.text(), doc.tree().expect("parsed"));
    let k = model
        .kernels
        .iter()
        .find(|k| k.name == name)
        .unwrap_or_else(|| panic!("no kernel `{name}`"));
    let report = spec::analyze(k, &model.kernels, &EvalEnv::default());
    let plan = report
        .plan
        .unwrap_or_else(|| panic!("`{name}` has no plan: {:?}", report.diagnostics));
    Version {
        torch: None,
        label: label.into(),
        lang: Lang::Cuda,
        source: model.device_slice.clone(),
        plan,
        options: vec![],
        cuda: None,
    }
}

fn verify(b: &mut CudaBackend, cand: &Version, reference: &Version) -> VerifyReport {
    let op = Op::Verify {
        candidate: Box::new(cand.clone()),
        reference: Box::new(reference.clone()),
        seed: 0x2a,
        sanitize: false,
        cases: None,
        tally: false,
    };
    match b.run(&op, &mut |_| {}) {
        Ok(OpResult::Verify(r)) => r,
        other => panic!("verify: {other:?}"),
    }
}

fn verify_err(
    b: &mut CudaBackend,
    cand: &Version,
    reference: &Version,
) -> kernel_lsp::worker::protocol::WorkerError {
    let op = Op::Verify {
        candidate: Box::new(cand.clone()),
        reference: Box::new(reference.clone()),
        seed: 1,
        sanitize: false,
        cases: None,
        tally: false,
    };
    match b.run(&op, &mut |_| {}) {
        Err(e) => e,
        Ok(r) => panic!("expected an error, got {r:?}"),
    }
}

/// saxpy plus a correct reference; `BODY` is replaced by the candidate's statement.
const SAXPY: &str = r#"
// @bench n = 1 << 20, 4099
// @bench x: in f32[n]; y: inout f32[n] ~ normal(0, 1)
// @bench a = 2.5
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    BODY
}

// @bench n = 1 << 20, 4099
// @bench x: in f32[n]; y: inout f32[n] ~ normal(0, 1)
// @bench a = 2.5
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void saxpy_ref(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#;

fn saxpy(body: &str) -> (Version, Version) {
    let src = SAXPY.replace("BODY", body);
    (
        version(&src, "saxpy", "candidate"),
        version(&src, "saxpy_ref", "reference"),
    )
}

/// Runs without a GPU: every fixture in this file plans cleanly, so a GPU run fails
/// only on the GPU.
#[test]
fn gpu_fixtures_plan_without_a_gpu() {
    let (c, r) = saxpy("if (i < n) y[i] = a * x[i] + y[i];");
    assert_eq!((c.plan.cases.len(), r.plan.cases.len()), (2, 2));
    for (src, names) in [
        (UNWRITTEN, &["half_done", "twice"][..]),
        (SMEM, &["staged", "plain"][..]),
        (TEMPLATE, &["scale_t", "scale_ref"][..]),
        (F16, &["dbl", "dbl_ref", "triple"][..]),
    ] {
        for n in names {
            let v = version(src, n, n);
            assert!(!v.plan.cases.is_empty(), "{n}");
        }
    }
    assert_eq!(
        version(TEMPLATE, "scale_t", "t")
            .plan
            .template_instance()
            .as_deref(),
        Some("scale_t<128>")
    );
}

#[test]
fn gpu_saxpy_matches_reference() {
    let Some(mut b) = backend("gpu_saxpy_matches_reference") else {
        return;
    };
    let (c, r) = saxpy("if (i < n) y[i] = fmaf(a, x[i], y[i]);");
    let rep = verify(&mut b, &c, &r);
    assert!(rep.passed, "{:?}", rep.failure);
    assert_eq!((rep.cases, rep.trials), (2, 3));
    assert!(!rep.nondeterministic);
    assert!(!b.poisoned());
}

#[test]
fn gpu_wrong_kernel_names_buffer_and_index() {
    let Some(mut b) = backend("gpu_wrong_kernel_names_buffer_and_index") else {
        return;
    };
    let (c, r) = saxpy("if (i < n) y[i] = a * x[i] + y[i] + (i == 4097 ? 1.0f : 0.0f);");
    let rep = verify(&mut b, &c, &r);
    assert!(!rep.passed);
    let f = rep.failure.expect("a failure");
    assert_eq!(f.kind, FailureKind::Mismatch, "{}", f.message);
    assert_eq!(f.buffer.as_deref(), Some("y"));
    assert_eq!(f.index, Some(vec![4097]));
    assert_eq!((f.case, f.trial, f.seed), (0, 0, 0x2a));
    assert!(f.message.starts_with("y[4097]: expected "), "{}", f.message);
    assert!(
        f.message.ends_with("(case 0, trial 0, seed 0x2a)"),
        "{}",
        f.message
    );
    assert!(f.max_abs_err.unwrap() >= 0.99);
}

#[test]
fn gpu_a_verify_of_one_case_runs_that_case_alone() {
    let Some(mut b) = backend("gpu_a_verify_of_one_case_runs_that_case_alone") else {
        return;
    };
    // Wrong in both cases: the failure is in the case the request names.
    let (c, r) = saxpy("if (i < n) y[i] = a * x[i] + y[i] + (i == 7 ? 1.0f : 0.0f);");
    for case in [1, 0] {
        let op = Op::verify_case(&c, &r, 0x2a, case);
        let Ok(OpResult::Verify(rep)) = b.run(&op, &mut |_| {}) else {
            panic!("verify answered something else");
        };
        let f = rep.failure.expect("a failure");
        assert_eq!(
            (f.case, f.index.clone()),
            (case, Some(vec![7])),
            "{}",
            f.message
        );
    }
    let (c, r) = saxpy("if (i < n) y[i] = a * x[i] + y[i];");
    let Ok(OpResult::Verify(rep)) = b.run(&Op::verify_case(&c, &r, 0x2a, 1), &mut |_| {}) else {
        panic!("verify answered something else");
    };
    assert!(rep.passed, "{rep:?}");
}

#[test]
fn gpu_out_of_bounds_write_fails() {
    let Some(mut b) = backend("gpu_out_of_bounds_write_fails") else {
        return;
    };
    let (c, r) = saxpy("if (i < n) y[i + 1] = a * x[i] + y[i];");
    let f = verify(&mut b, &c, &r).failure.expect("a failure");
    assert_eq!(f.kind, FailureKind::OutOfBounds, "{}", f.message);
    assert_eq!(f.buffer.as_deref(), Some("y"));
    assert_eq!(f.index, Some(vec![1 << 20]));
    assert!(
        f.message.contains(
            "out-of-bounds write past the end of `y`: 4 bytes changed, at element 1048576"
        ),
        "{}",
        f.message
    );
}

const UNWRITTEN: &str = r#"
// @bench n = 4096
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 128); block = 128
extern "C" __global__ void half_done(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n / 2) y[i] = 2.0f * x[i];
}
// @bench n = 4096
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 128); block = 128
extern "C" __global__ void twice(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + x[i];
}
"#;

#[test]
fn gpu_unwritten_output_fails_nan() {
    let Some(mut b) = backend("gpu_unwritten_output_fails_nan") else {
        return;
    };
    let src = UNWRITTEN;
    let f = verify(
        &mut b,
        &version(src, "half_done", "c"),
        &version(src, "twice", "r"),
    )
    .failure
    .expect("a failure");
    assert_eq!(f.kind, FailureKind::Nan, "{}", f.message);
    assert_eq!(f.index, Some(vec![2048]));
    assert!(f.message.contains("never written"), "{}", f.message);
}

#[test]
fn gpu_illegal_address_faults_and_poisons() {
    let Some(mut b) = backend("gpu_illegal_address_faults_and_poisons") else {
        return;
    };
    let (c, r) = saxpy("if (i < n) ((float*)0x10)[i] = a * x[i];");
    let rep = verify(&mut b, &c, &r);
    let f = rep.failure.expect("a failure");
    assert_eq!(f.kind, FailureKind::Fault, "{}", f.message);
    assert!(f.message.contains("at launch of `saxpy`"), "{}", f.message);
    assert!(f.message.contains("CUDA_ERROR_"), "{}", f.message);
    println!("fault message: {}", f.message);
    assert!(b.poisoned());
    let e = verify_err(&mut b, &r, &r);
    assert_eq!(e.kind, ErrorKind::Fault);
}

#[test]
fn gpu_block_2048_is_refused_before_launch() {
    let Some(mut b) = backend("gpu_block_2048_is_refused_before_launch") else {
        return;
    };
    let (mut c, r) = saxpy("if (i < n) y[i] = a * x[i] + y[i];");
    for case in &mut c.plan.cases {
        if let Launch::Cuda { block, .. } = &mut case.launch {
            *block = [2048, 1, 1];
        }
    }
    let e = verify_err(&mut b, &c, &r);
    assert_eq!(e.kind, ErrorKind::LimitExceeded, "{}", e.message);
    assert!(e.message.contains("2048"), "{}", e.message);
    assert!(!b.poisoned());
}

const SMEM: &str = r#"
// @bench n = 1 << 16
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 256); block = 256; smem = 64 * 1024
extern "C" __global__ void staged(int n, const float* x, float* y) {
    extern __shared__ float buf[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    buf[threadIdx.x * 64] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (i < n) y[i] = buf[threadIdx.x * 64] * 3.0f;
}
// @bench n = 1 << 16
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void plain(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 3.0f;
}
"#;

#[test]
fn gpu_large_dynamic_smem_opts_in_and_too_much_is_refused() {
    let Some(mut b) = backend("gpu_large_dynamic_smem_opts_in_and_too_much_is_refused") else {
        return;
    };
    let (c, r) = (version(SMEM, "staged", "c"), version(SMEM, "plain", "r"));
    let rep = verify(&mut b, &c, &r);
    assert!(rep.passed, "64 KiB needs the opt-in: {:?}", rep.failure);
    let mut big = c.clone();
    for case in &mut big.plan.cases {
        if let Launch::Cuda { smem, .. } = &mut case.launch {
            *smem = 1 << 20;
        }
    }
    let e = verify_err(&mut b, &big, &r);
    assert_eq!(e.kind, ErrorKind::LimitExceeded, "{}", e.message);
    assert!(e.message.contains("shared memory"), "{}", e.message);
}

const TEMPLATE: &str = r#"
// @bench n = 100000, 777
// @bench x: in f32[n]; y: out f32[n]
// @bench tune BLOCK in [128, 256]
// @bench grid = cdiv(n, BLOCK); block = BLOCK
template <int BLOCK>
__global__ void scale_t(int n, const float* x, float* y) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) y[i] = 0.5f * x[i];
}
// @bench n = 100000, 777
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 64); block = 64
extern "C" __global__ void scale_ref(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] / 2.0f;
}
"#;

#[test]
fn gpu_template_kernel_with_tunable() {
    let Some(mut b) = backend("gpu_template_kernel_with_tunable") else {
        return;
    };
    let src = TEMPLATE;
    let c = version(src, "scale_t", "BLOCK=128");
    assert_eq!(c.plan.template_instance().as_deref(), Some("scale_t<128>"));
    let rep = verify(&mut b, &c, &version(src, "scale_ref", "r"));
    assert!(rep.passed, "{:?}", rep.failure);
    match b.run(&Op::Compile { version: c.clone() }, &mut |_| {}) {
        Ok(OpResult::Compile(r)) => assert!(r.cached && r.registers.is_some()),
        other => panic!("{other:?}"),
    }
}

const F16: &str = r#"
#include <cuda_fp16.h>
// @bench n = 5000
// @bench x: in f16[n]; y: out f16[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void dbl(int n, const __half* x, __half* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __hadd(x[i], x[i]);
}
// @bench n = 5000
// @bench x: in f16[n]; y: out f16[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void dbl_ref(int n, const __half* x, __half* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2half(2.0f * __half2float(x[i]));
}
// @bench n = 5000
// @bench x: in f16[n]; y: out f16[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void triple(int n, const __half* x, __half* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2half(3.0f * __half2float(x[i]));
}
"#;

#[test]
fn gpu_f16_buffers() {
    let Some(mut b) = backend("gpu_f16_buffers") else {
        return;
    };
    let src = F16;
    let r = version(src, "dbl_ref", "r");
    let rep = verify(&mut b, &version(src, "dbl", "c"), &r);
    assert!(rep.passed, "{:?}", rep.failure);
    let f = verify(&mut b, &version(src, "triple", "c"), &r)
        .failure
        .expect("a failure");
    assert_eq!(f.kind, FailureKind::Mismatch, "{}", f.message);
    assert_eq!(f.buffer.as_deref(), Some("y"));
}

fn time(b: &mut CudaBackend, versions: Vec<Version>, settings: TimeSettings) -> TimeReport {
    match b.run(&Op::Time { versions, settings }, &mut |_| {}) {
        Ok(OpResult::Time(t)) => t,
        other => panic!("time: {other:?}"),
    }
}

#[test]
fn gpu_timing_two_versions_is_sane() {
    let Some(mut b) = backend("gpu_timing_two_versions_is_sane") else {
        return;
    };
    let (c, r) = saxpy("if (i < n) y[i] = a * x[i] + y[i];");
    let t = time(&mut b, vec![r, c], TimeSettings::default());
    assert_eq!(t.timings.len(), 2);
    for x in &t.timings {
        println!(
            "{}: median {:.4} ms (p10 {:.4}, p90 {:.4}, {} reps) {:.0} GB/s {:?} of copy",
            x.label, x.median_ms, x.p10_ms, x.p90_ms, x.reps, x.gbps, x.frac_copy
        );
        assert!(x.median_ms > 0.0 && x.median_ms < 10.0, "{x:?}");
        assert!(x.min_ms <= x.p10_ms && x.p10_ms <= x.median_ms && x.median_ms <= x.p90_ms);
        assert!(x.reps >= 10);
        assert!(x.gbps > 10.0, "{x:?}");
        let frac = x.frac_copy.expect("ceilings measured");
        assert!(frac > 0.05 && frac < 2.0, "{x:?}");
    }
    let ratio = t.timings[0].median_ms / t.timings[1].median_ms;
    assert!((0.5..2.0).contains(&ratio), "same kernel, ratio {ratio}");
}

#[test]
fn gpu_device_reports_limits_and_ceilings() {
    let Some(mut b) = backend("gpu_device_reports_limits_and_ceilings") else {
        return;
    };
    let d = b.device().expect("a device");
    println!("{d:?}");
    assert!(d.arch.starts_with("sm_"));
    assert!(d.sms >= 1 && d.warp_size == 32);
    assert_eq!(d.max_threads_per_block, 1024);
    assert_eq!(d.max_block, [1024, 1024, 64]);
    assert!(d.max_grid[0] >= 65535);
    assert!(d.smem_per_block == 48 * 1024 && d.smem_per_block_optin >= d.smem_per_block);
    assert!(d.regs_per_block >= 65536 && d.l2_bytes > 0 && d.mem_bytes > 1 << 30);
    let c = d.ceilings.expect("ceilings");
    println!(
        "CEILINGS copy_gbps={:.0} fma_tflops={:.1}",
        c.copy_gbps, c.fma_tflops
    );
    assert!(c.copy_gbps > 100.0, "{c:?}");
    assert!(c.fma_tflops > 1.0, "{c:?}");
}

/// Compile + verify (3 trials, 2 cases) + time (two versions) with a warm backend, five
/// times with a fresh source each time (no compile cache), median printed as
/// TURNAROUND_MS for tests/gpu/run.sh to compare with the KernelBench-style path.
/// Per-candidate turnaround as an optimization step sees it: compile a new candidate,
/// verify it against the same current version (whose outputs the worker keeps after the
/// first candidate), and time the two side by side with the optimizer's default timing
/// settings. Ten candidates at n = 2^20 ("small") and ten at n = 2^24 (issue #10's
/// targets: <= 0.35 s and <= 0.5 s, medians).
#[test]
fn gpu_turnaround() {
    let Some(mut b) = backend("gpu_turnaround") else {
        return;
    };
    let _ = b.device();
    for (tag, n) in [("", "1 << 20"), ("_24", "1 << 24")] {
        let mut ms = Vec::new();
        let mut parts: Vec<[f64; 3]> = Vec::new();
        for round in 0..10 {
            let src = SAXPY.replace("n = 1 << 20, 4099", &format!("n = {n}, 4099"));
            let src = src.replace("BODY", "if (i < n) y[i] = a * x[i] + y[i];");
            let mut c = version(&src, "saxpy", "candidate");
            let r = version(&src, "saxpy_ref", "reference");
            c.source
                .push_str(&format!("\n// turnaround round {round}\n"));
            let t0 = Instant::now();
            match b.run(&Op::Compile { version: c.clone() }, &mut |_| {}) {
                Ok(OpResult::Compile(rep)) => assert!(!rep.cached),
                other => panic!("{other:?}"),
            }
            let t_compile = t0.elapsed().as_secs_f64() * 1e3;
            let rep = verify(&mut b, &c, &r);
            let t_verify = t0.elapsed().as_secs_f64() * 1e3 - t_compile;
            assert!(rep.passed, "{:?}", rep.failure);
            let _ = time(&mut b, vec![r, c], TimeSettings::default());
            let total = t0.elapsed().as_secs_f64() * 1e3;
            parts.push([t_compile, t_verify, total - t_compile - t_verify]);
            ms.push(total);
        }
        ms.sort_by(f64::total_cmp);
        println!("TURNAROUND{tag}_RUNS_MS={ms:?}");
        let median = |k: usize| {
            let mut v: Vec<f64> = parts.iter().map(|p| p[k]).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "TURNAROUND{tag}_PARTS compile_ms={:.0} verify_ms={:.0} time_ms={:.0}",
            median(0),
            median(1),
            median(2)
        );
        println!("TURNAROUND{tag}_MS={:.0}", ms[ms.len() / 2]);
    }
}

/// A pool of one real worker: `KERNEL_LSP_BIN` (the GPU machine's copy) or this build's.
fn gpu_pool() -> kernel_lsp::worker::pool::WorkerPool {
    let bin = std::env::var("KERNEL_LSP_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_kernel-lsp").to_string());
    kernel_lsp::worker::pool::WorkerPool::new(kernel_lsp::worker::pool::PoolConfig {
        command: vec![bin, "worker".into()],
        ..Default::default()
    })
}

fn verify_op(cand: &Version, reference: &Version) -> Op {
    Op::Verify {
        candidate: Box::new(cand.clone()),
        reference: Box::new(reference.clone()),
        seed: 7,
        sanitize: false,
        cases: None,
        tally: false,
    }
}

#[tokio::test]
async fn gpu_pool_replaces_a_worker_whose_kernel_faulted() {
    if backend("gpu_pool_replaces_a_worker_whose_kernel_faulted").is_none() {
        return;
    }
    let pool = gpu_pool();
    let (bad, reference) = saxpy("if (i < n) y[i + (1 << 30)] = a * x[i];");
    let r = pool.request(verify_op(&bad, &reference), None).await;
    let Ok(OpResult::Verify(report)) = r else {
        panic!("expected a verify report, got {r:?}")
    };
    let f = report.failure.expect("a fault is a failure");
    assert_eq!(f.kind, FailureKind::Fault, "{f:?}");
    // 4 GiB past the buffer: the driver reports an illegal or wrong-space address.
    assert!(
        f.message.contains("at launch of `saxpy` (CUDA_ERROR_"),
        "{}",
        f.message
    );
    assert!(
        f.message.contains("the CUDA context is lost"),
        "{}",
        f.message
    );
    // The worker lost its context and exited; the pool starts a fresh one.
    let (good, reference) = saxpy("if (i < n) y[i] = a * x[i] + y[i];");
    let r = pool.request(verify_op(&good, &reference), None).await;
    let Ok(OpResult::Verify(report)) = r else {
        panic!("expected a verify report, got {r:?}")
    };
    assert!(report.passed, "{report:?}");
    pool.shutdown().await;
}

#[tokio::test]
async fn gpu_pool_stops_a_hung_kernel_and_serves_the_next_request() {
    if backend("gpu_pool_stops_a_hung_kernel_and_serves_the_next_request").is_none() {
        return;
    }
    let pool = gpu_pool();
    // clock64() is an opaque read, so the compiler cannot drop the loop.
    let (hung, reference) = saxpy(
        "long long t0 = clock64(); while (clock64() - t0 < (1LL << 62)) { } if (i < n) y[i] = 0.f;",
    );
    let t0 = Instant::now();
    let r = pool
        .request(
            verify_op(&hung, &reference),
            Some(std::time::Duration::from_secs(5)),
        )
        .await;
    let e = r.expect_err("a hung kernel is stopped");
    assert_eq!(e.kind, ErrorKind::Timeout, "{e:?}");
    assert!(
        e.message.contains("did not finish within 5 s"),
        "{}",
        e.message
    );
    assert!(
        t0.elapsed().as_secs_f64() < 20.0,
        "stopped promptly: {:?}",
        t0.elapsed()
    );
    let (good, reference) = saxpy("if (i < n) y[i] = a * x[i] + y[i];");
    let r = pool.request(verify_op(&good, &reference), None).await;
    let Ok(OpResult::Verify(report)) = r else {
        panic!("expected a verify report, got {r:?}")
    };
    assert!(report.passed, "{report:?}");
    pool.shutdown().await;
}

const REVERSE: &str = r#"
// @bench n = 4096
// @bench x: in f32[n]; out: out f32[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void rev(int n, const float* x, float* out) {
    __shared__ float t[256];
    int i = blockIdx.x * 256 + threadIdx.x;
    t[threadIdx.x] = i < n ? x[i] : 0.f;
    SYNC
    if (i < n) out[i] = READ;
}

// @bench n = 4096
// @bench x: in f32[n]; out: out f32[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void rev_ref(int n, const float* x, float* out) {
    __shared__ float t[256];
    int i = blockIdx.x * 256 + threadIdx.x;
    t[threadIdx.x] = i < n ? x[i] : 0.f;
    __syncthreads();
    if (i < n) out[i] = t[255 - threadIdx.x];
}
"#;

#[tokio::test]
async fn gpu_sanitize_finds_races_and_passes_clean_kernels() {
    if backend("gpu_sanitize_finds_races_and_passes_clean_kernels").is_none() {
        return;
    }
    let pool = gpu_pool();
    let run = |sync: &str, read: &str| {
        let src = REVERSE.replace("SYNC", sync).replace("READ", read);
        let op = Op::Verify {
            candidate: Box::new(version(&src, "rev", "candidate")),
            reference: Box::new(version(&src, "rev_ref", "reference")),
            seed: 3,
            sanitize: true,
            cases: None,
            tally: false,
        };
        let pool = pool.clone();
        async move {
            match pool.request(op, None).await {
                Ok(OpResult::Verify(r)) => r,
                other => panic!("{other:?}"),
            }
        }
    };
    let clean = run("__syncthreads();", "t[255 - threadIdx.x]").await;
    println!("SANITIZE clean: {:?}", clean.sanitizer);
    assert!(clean.passed, "{clean:?}");
    let s = clean.sanitizer.unwrap();
    assert!(
        s.contains("memcheck: 0 errors") && s.contains("racecheck: 0 errors"),
        "{s}"
    );

    let racy = run("", "t[255 - threadIdx.x]").await;
    println!("SANITIZE race: {:?}", racy.sanitizer);
    assert!(!racy.passed, "{racy:?}");
    let s = racy.sanitizer.unwrap();
    assert!(
        s.contains("racecheck: ") && !s.contains("racecheck: 0 errors"),
        "{s}"
    );

    // memcheck needs no case of its own here: it flags addresses outside every
    // allocation, while a read just past a buffer lands in its guard elements or a
    // neighbouring buffer, and one far out faults in the normal run first (sanitize is
    // skipped after a fault). It did catch a real teardown bug in this worker.
    pool.shutdown().await;
}

#[test]
fn gpu_a_spec_larger_than_device_memory_is_refused_before_allocating() {
    let Some(mut b) = backend("gpu_a_spec_larger_than_device_memory_is_refused_before_allocating")
    else {
        return;
    };
    // 24 buffers of 4 GiB (the per-buffer maximum): 96 GiB, more than an H100 or H200 has
    // free once the reference's copies count too.
    let params: Vec<String> = (0..24).map(|i| format!("float* b{i}")).collect();
    let lines: Vec<String> = (0..24)
        .map(|i| format!("// @bench b{i}: inout f32[1 << 30]"))
        .collect();
    let src = format!(
        "{}\n// @bench grid = 1; block = 32\nextern \"C\" __global__ void big({}) {{ b0[threadIdx.x] = 1.f; }}\n",
        lines.join("\n"),
        params.join(", ")
    );
    let v = version(&src, "big", "candidate");
    let e = verify_err(&mut b, &v, &v);
    assert_eq!(e.kind, ErrorKind::LimitExceeded, "{}", e.message);
    println!("MEMORY message: {}", e.message);
    assert!(!b.poisoned());
}

/// The editor path on a real GPU: the language server over stdio benchmarks saxpy
/// (the hint shows time, % of bandwidth and registers) and runs optimization steps on
/// it (the verified winner is offered as an edit; this client refuses edits, so the
/// message says so and the file stays as it was).
#[tokio::test]
async fn gpu_lsp_benchmark_hint_and_optimize_from_the_editor() {
    if backend("gpu_lsp_benchmark_hint_and_optimize_from_the_editor").is_none() {
        return;
    }
    use serde_json::json;
    let bin = std::env::var("KERNEL_LSP_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_kernel-lsp").to_string());
    let dir = std::env::temp_dir().join(format!("kernel-lsp-gpu-lsp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = include_str!("../../examples/saxpy.cu");
    let file = dir.join("saxpy.cu");
    std::fs::write(&file, src).unwrap();
    let data = dir.join("policy");
    let mut c = crate::client::TestClient::spawn_program(
        &bin,
        &[("KERNEL_LSP_DATA_DIR", data.to_str().unwrap())],
    );
    c.initialize(
        json!({"compileOnType": false, "stepsPerAction": 3}),
        &["utf-16"],
    )
    .await;
    let uri = format!("file://{}", file.display());
    c.open(&uri, "cuda", src).await;
    let exec =
        |command: &str| json!({"command": command, "arguments": [{"uri": uri, "kernel": "saxpy"}]});
    let id = c
        .send_request("workspace/executeCommand", exec("kernel-lsp.bench"))
        .await;
    let r = c.response(id, std::time::Duration::from_secs(120)).await;
    let msg = r["result"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    println!("LSP_BENCH={msg}");
    assert_eq!(r["result"]["outcome"], "ok", "{r}");
    assert!(msg.contains("pinned as the baseline"), "{msg}");
    let hints = c
        .request(
            "textDocument/inlayHint",
            json!({"textDocument": {"uri": uri}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 40, "character": 0}}}),
        )
        .await;
    let label = hints["result"][0]["label"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    println!("LSP_HINT={label}");
    assert!(label.contains("% BW") && label.contains("regs"), "{hints}");

    let id = c
        .send_request("workspace/executeCommand", exec("kernel-lsp.optimize"))
        .await;
    let r = c.response(id, std::time::Duration::from_secs(300)).await;
    let msg = r["result"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    println!("LSP_OPTIMIZE={msg}");
    assert!(
        msg.contains("the editor refused the edit") || msg.contains("no verified improvement"),
        "{r}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), src);
    std::fs::remove_dir_all(&dir).ok();
}

/// The idiom rewrites on the GPU.
#[path = "idioms.rs"]
mod idioms;
