//! GPU tests of verification against kernels that cheat or are subtly wrong (issue #10,
//! docs/verification.md): each kernel must be rejected, and the message must say which
//! check caught it. Skipped visibly without a GPU, as in `cuda_backend.rs`; every test
//! name starts with `gpu_`.

use kernel_lsp::document::Document;
use kernel_lsp::spec::{self, EvalEnv};
use kernel_lsp::syntax::{self, Lang};
use kernel_lsp::worker::backend::Backend;
use kernel_lsp::worker::cuda::CudaBackend;
use kernel_lsp::worker::protocol::{Failure, FailureKind, Op, OpResult, VerifyReport, Version};

fn backend(test: &str) -> Option<CudaBackend> {
    let mut b = CudaBackend::new();
    let s = b.status();
    if s.available {
        return Some(b);
    }
    assert!(
        std::env::var("KERNEL_LSP_REQUIRE_GPU").as_deref() != Ok("1"),
        "{test}: KERNEL_LSP_REQUIRE_GPU=1 but the CUDA backend is unavailable: {}",
        s.message
    );
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "SKIP {test}: no CUDA device ({})",
        s.message
    );
    None
}

fn version(src: &str, name: &str) -> Version {
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
        label: name.into(),
        lang: Lang::Cuda,
        source: model.device_slice.clone(),
        plan,
        options: vec![],
        cuda: None,
    }
}

fn verify_with(
    b: &mut CudaBackend,
    src: &str,
    cand: &str,
    reference: &str,
    sanitize: bool,
) -> VerifyReport {
    let op = Op::Verify {
        candidate: Box::new(version(src, cand)),
        reference: Box::new(version(src, reference)),
        seed: 7,
        sanitize,
        cases: None,
        tally: false,
    };
    match b.run(&op, &mut |_| {}) {
        Ok(OpResult::Verify(r)) => r,
        other => panic!("verify: {other:?}"),
    }
}

/// The failure of `cand` against `reference` in `src`, printed for the run's log.
fn rejected(test: &str, src: &str, cand: &str, reference: &str) -> Failure {
    let Some(mut b) = backend(test) else {
        return Failure {
            case: 0,
            trial: 0,
            seed: 0,
            kind: FailureKind::Mismatch,
            buffer: None,
            index: None,
            expected: None,
            actual: None,
            max_abs_err: None,
            max_rel_err: None,
            message: "SKIPPED".into(),
        };
    };
    // The reference passes its own check: the failure is the candidate's.
    let own = verify_with(&mut b, src, reference, reference, false);
    assert!(
        own.passed,
        "{test}: the reference fails its own check: {:?}",
        own.failure
    );
    let r = verify_with(&mut b, src, cand, reference, false);
    let f = r
        .failure
        .unwrap_or_else(|| panic!("{test}: `{cand}` passed verification"));
    assert!(!r.passed);
    println!("CHEAT {test}: {:?}: {}", f.kind, f.message);
    f
}

fn skipped(f: &Failure) -> bool {
    f.message == "SKIPPED"
}

/// The issue's case: no bounds check, so the last block of the odd case copies bytes of
/// `x`'s guard into `y`'s guard. Identical guards hid it; per-buffer guards show it.
const COPY: &str = r#"
// @bench n = 1 << 20, 4099
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void copy_unchecked(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = x[i];
}
// @bench n = 1 << 20, 4099
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void copy_ref(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
"#;

#[test]
fn gpu_cheat_guard_bytes_copied_from_another_buffer_are_out_of_bounds() {
    let f = rejected("gpu_cheat_guard_copy", COPY, "copy_unchecked", "copy_ref");
    if skipped(&f) {
        return;
    }
    assert_eq!(f.kind, FailureKind::OutOfBounds, "{}", f.message);
    assert_eq!((f.case, f.buffer.as_deref()), (1, Some("y")));
    assert_eq!(f.index, Some(vec![4099]));
    assert!(
        f.message
            .contains("out-of-bounds write past the end of `y`"),
        "{}",
        f.message
    );
    assert!(
        f.message.contains("at elements 4099 to 4351"),
        "{}",
        f.message
    );
}

const CHEATS: &str = r#"
// @bench n = 65536, 4099
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void scaled_ref(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 1.000001f;
}
// @bench n = 65536, 4099
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void copies_input(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
// @bench n = 65536, 4099
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void tiny_ref(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 1e-7f;
}
// @bench n = 65536, 4099
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void all_zero(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 0.0f;
}
// @bench n = 65536, 4099
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void clobbers_input(int n, float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { y[i] = x[i] * 1.000001f; x[i] = 0.0f; }
}
// @bench n = 65536, 4099
// @bench x: in f32[n]; y: inout f32[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void nudge_ref(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += 1e-7f * x[i];
}
// @bench n = 65536, 4099
// @bench x: in f32[n]; y: inout f32[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void does_nothing(int n, const float* x, float* y) {
}
"#;

#[test]
fn gpu_cheat_output_that_copies_an_input() {
    let f = rejected(
        "gpu_cheat_copies_input",
        CHEATS,
        "copies_input",
        "scaled_ref",
    );
    if skipped(&f) {
        return;
    }
    assert_eq!(f.kind, FailureKind::Cheat, "{}", f.message);
    assert!(
        f.message
            .contains("anti-cheat (output copies an input): `y` is a copy of the input `x`"),
        "{}",
        f.message
    );
}

#[test]
fn gpu_cheat_constant_output_within_tolerance() {
    let f = rejected("gpu_cheat_constant", CHEATS, "all_zero", "tiny_ref");
    if skipped(&f) {
        return;
    }
    assert_eq!(f.kind, FailureKind::Cheat, "{}", f.message);
    assert!(
        f.message
            .contains("anti-cheat (constant output): every element of `y` is 0"),
        "{}",
        f.message
    );
}

#[test]
fn gpu_cheat_writes_into_an_input() {
    let f = rejected(
        "gpu_cheat_writes_input",
        CHEATS,
        "clobbers_input",
        "scaled_ref",
    );
    if skipped(&f) {
        return;
    }
    assert_eq!(f.kind, FailureKind::InputWritten, "{}", f.message);
    assert_eq!(f.buffer.as_deref(), Some("x"));
    assert!(
        f.message
            .contains("wrote into the input buffer `x`: 65536 elements changed, first x[0]"),
        "{}",
        f.message
    );
}

#[test]
fn gpu_cheat_inout_left_as_it_was() {
    let f = rejected("gpu_cheat_noop", CHEATS, "does_nothing", "nudge_ref");
    if skipped(&f) {
        return;
    }
    assert_eq!(f.kind, FailureKind::Cheat, "{}", f.message);
    assert!(
        f.message
            .contains("anti-cheat (output unchanged): `y` still holds its initial values"),
        "{}",
        f.message
    );
}

/// Results kept from the first launch and replayed when the inputs change. The spec has
/// one trial, yet case 0 still sees a second input set at the same addresses.
const CACHED: &str = r#"
// @bench n = 65536
// @bench x: in f32[n]; y: out f32[n]
// @bench trials = 1
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void square_ref(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * x[i];
}
__device__ float saved[65536];
__device__ unsigned have_saved = 0;
__device__ unsigned blocks_done = 0;
// @bench n = 65536
// @bench x: in f32[n]; y: out f32[n]
// @bench trials = 1
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void replays(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned have = *(volatile unsigned*)&have_saved;
    if (i < n) {
        if (have) y[i] = saved[i];
        else { y[i] = x[i] * x[i]; saved[i] = y[i]; }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(&blocks_done, 1u) == gridDim.x - 1) { have_saved = 1; blocks_done = 0; }
    }
}
"#;

#[test]
fn gpu_cheat_results_kept_between_launches() {
    let f = rejected("gpu_cheat_cached", CACHED, "replays", "square_ref");
    if skipped(&f) {
        return;
    }
    assert_eq!(f.kind, FailureKind::Cheat, "{}", f.message);
    assert_eq!(f.trial, 1);
    assert!(f.message.contains("anti-cheat (outputs follow inputs): `y` still holds the results for the previous inputs"), "{}", f.message);
}

/// Right on the first launch, wrong on the second: two runs of the same inputs differ.
const FLAKY: &str = r#"
// @bench n = 65536
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void plain_ref(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.0f;
}
__device__ unsigned launches = 0;
__device__ unsigned finished = 0;
// @bench n = 65536
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void drifts(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned l = *(volatile unsigned*)&launches;
    if (i < n) y[i] = x[i] + (l == 1 ? 1.5f : 1.0f);
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(&finished, 1u) == gridDim.x - 1) { launches = l + 1; finished = 0; }
    }
}
"#;

#[test]
fn gpu_cheat_two_runs_of_the_same_inputs_disagree() {
    let f = rejected("gpu_cheat_nondeterministic", FLAKY, "drifts", "plain_ref");
    if skipped(&f) {
        return;
    }
    assert_eq!(f.kind, FailureKind::Nondeterministic, "{}", f.message);
    assert!(
        f.message.starts_with(
            "nondeterministic: two runs on the same inputs differ beyond the tolerance at y[0]"
        ),
        "{}",
        f.message
    );
}

/// A read one element past the end never changes the result and stays inside the guard:
/// only compute-sanitizer, with every buffer at its exact size, sees it.
const READS_PAST: &str = r#"
// @bench n = 4096
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void peeks(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float next = x[i + 1];
    if (i < n) y[i] = next == 123456.0f ? 0.0f : 2.0f * x[i];
}
// @bench n = 4096
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void doubles(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"#;

#[tokio::test]
async fn gpu_sanitizer_sees_a_read_past_the_end_with_exact_size_buffers() {
    if backend("gpu_sanitizer_exact_buffers").is_none() {
        return;
    }
    let bin = std::env::var("KERNEL_LSP_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_kernel-lsp").to_string());
    let pool = kernel_lsp::worker::pool::WorkerPool::new(kernel_lsp::worker::pool::PoolConfig {
        command: vec![bin, "worker".into()],
        ..Default::default()
    });
    let op = |cand: &str| Op::Verify {
        candidate: Box::new(version(READS_PAST, cand)),
        reference: Box::new(version(READS_PAST, "doubles")),
        seed: 3,
        sanitize: true,
        cases: None,
        tally: false,
    };
    let r = match pool.request(op("peeks"), None).await {
        Ok(OpResult::Verify(r)) => r,
        other => panic!("{other:?}"),
    };
    let s = r.sanitizer.clone().unwrap_or_default();
    println!(
        "CHEAT exact-size sanitizer: {:?} {s}",
        r.failure.as_ref().map(|f| &f.message)
    );
    if s.contains("not found") {
        assert!(
            std::env::var("KERNEL_LSP_REQUIRE_GPU").as_deref() != Ok("1"),
            "compute-sanitizer is missing on the GPU machine"
        );
        pool.shutdown().await;
        return;
    }
    assert!(!r.passed, "{r:?}");
    assert_eq!(
        r.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::Sanitizer)
    );
    assert!(
        s.contains("memcheck: ") && !s.contains("memcheck: 0 errors"),
        "{s}"
    );
    let clean = match pool.request(op("doubles"), None).await {
        Ok(OpResult::Verify(r)) => r,
        other => panic!("{other:?}"),
    };
    assert!(clean.passed, "{clean:?}");
    pool.shutdown().await;
}
