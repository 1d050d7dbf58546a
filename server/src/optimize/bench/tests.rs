//! The bench engine's pure parts: reference resolution, verdicts, and the speedup and
//! PyTorch columns of one interleaved timing.

use super::*;
use crate::analysis::AnalyzeOptions;
use crate::document::Document;
use crate::spec::{Arg, Dist, Launch};
use crate::worker::protocol::{Failure, FailureKind};

/// A kernel whose inputs are far outside the reference's own distribution, and a
/// reference with a launch of its own.
const KERNEL_AND_REFERENCE: &str = r#"
// @bench n = 1000, 77
// @bench x: in f32[n] ~ normal(0, 100); y: out f32[n]
// @bench grid = cdiv(n, 128); block = 128
// @bench reference = slow_copy
extern "C" __global__ void fast_copy(int n, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}

// @bench n = 4096
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = n; block = 1
extern "C" __global__ void slow_copy(int n, const float* x, float* y) {
    int i = blockIdx.x;
    if (i < n) y[i] = x[i];
}
"#;

fn analyze(lang: Lang, text: &str) -> FileAnalysis {
    let doc = Document::new(lang, 0, text);
    analysis::analyze(lang, text, doc.tree(), &AnalyzeOptions::default())
}

fn resolve(
    lang: Lang,
    text: &str,
    kernel: &str,
    path: Option<&Path>,
) -> Result<Option<Reference>, String> {
    let a = analyze(lang, text);
    let file = BenchFile {
        text,
        analysis: &a,
        path,
    };
    let k = file.kernel(kernel)?;
    file.reference(&k)
}

fn dists(plan: &BenchPlan, case: usize) -> Vec<(String, Dist)> {
    plan.cases[case]
        .args
        .iter()
        .filter_map(|a| match a {
            Arg::Buffer { name, dist, .. } => Some((name.clone(), dist.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_kernel_reference_runs_on_the_inputs_of_the_kernel_under_test_with_its_own_launch() {
    let a = analyze(Lang::Cuda, KERNEL_AND_REFERENCE);
    let file = BenchFile {
        text: KERNEL_AND_REFERENCE,
        analysis: &a,
        path: None,
    };
    let kernel = file.kernel("fast_copy").unwrap();
    let Some(Reference::Kernel(r)) = file.reference(&kernel).unwrap() else {
        panic!("expected a kernel reference");
    };
    assert_eq!(r.label, "slow_copy");
    assert!(r.source.contains("void slow_copy"), "{}", r.source);
    assert_eq!(r.plan.kernel, "slow_copy");
    // Both cases of the kernel under test, with its sizes and distributions.
    assert_eq!(r.plan.cases.len(), 2);
    for case in 0..2 {
        assert_eq!(dists(&r.plan, case), dists(&kernel.plan, case));
        assert_eq!(r.plan.cases[case].sizes, kernel.plan.cases[case].sizes);
    }
    assert!(
        matches!(&dists(&r.plan, 0)[0].1, Dist::Normal { .. }),
        "{:?}",
        dists(&r.plan, 0)
    );
    // ...with the reference's own launch: one thread per block.
    let Launch::Cuda { block, .. } = &r.plan.cases[0].launch else {
        panic!("a CUDA launch");
    };
    assert_eq!(block[0], 1);
    assert_eq!(Reference::Kernel(r).name(), "slow_copy");
}

#[test]
fn a_kernel_without_a_reference_has_none_to_resolve() {
    let r = resolve(Lang::Cuda, KERNEL_AND_REFERENCE, "slow_copy", None).unwrap();
    assert_eq!(r, None);
}

const TORCH: &str = r#"import triton
import triton.language as tl

# @bench n = 1000
# @bench x_ptr: in f32[n]; out_ptr: out f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 128
# @bench reference = REF
@triton.jit
def relu(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)
"#;

#[test]
fn a_torch_expression_needs_no_file_and_a_module_function_does() {
    let expr = TORCH.replace("REF", "torch: torch.relu(x_ptr)");
    let r = resolve(Lang::Triton, &expr, "relu", None).unwrap().unwrap();
    let Reference::Torch { describe, eager } = &r else {
        panic!("expected a torch reference: {r:?}");
    };
    assert_eq!(describe, "torch.relu(x_ptr)");
    assert_eq!(eager.torch, Some(TorchMode::Eager));
    assert_eq!(eager.label, "torch eager");
    assert_eq!(eager.source, "");
    assert_eq!(r.name(), "torch: torch.relu(x_ptr)");

    let module = TORCH.replace("REF", "torch: ops.relu_ref");
    let unsaved = resolve(Lang::Triton, &module, "relu", None).unwrap_err();
    assert!(unsaved.contains("needs the file on disk"), "{unsaved}");
    let dir = std::env::temp_dir().join(format!("kernel-lsp-bench-ref-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("relu.py");
    let missing = resolve(Lang::Triton, &module, "relu", Some(&path)).unwrap_err();
    assert!(missing.contains("no module `ops`"), "{missing}");
    std::fs::write(
        dir.join("ops.py"),
        "import torch\ndef relu_ref(x):\n    return torch.relu(x)\n",
    )
    .unwrap();
    let found = resolve(Lang::Triton, &module, "relu", Some(&path))
        .unwrap()
        .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert!(found.version().source.contains("def relu_ref"), "{found:?}");
}

pub(super) fn timing(label: &str, ms: f64) -> Timing {
    Timing {
        label: label.into(),
        median_ms: ms,
        min_ms: ms,
        p10_ms: ms,
        p90_ms: ms,
        median_interval_ms: None,
        reps: 10,
        gbps: 1.0,
        frac_copy: None,
        tflops: None,
        frac_fma: None,
        energy_j: None,
    }
}

fn torch_ref() -> Reference {
    let a = analyze(
        Lang::Triton,
        &TORCH.replace("REF", "torch: torch.relu(x_ptr)"),
    );
    let text = TORCH.replace("REF", "torch: torch.relu(x_ptr)");
    let file = BenchFile {
        text: &text,
        analysis: &a,
        path: None,
    };
    let k = file.kernel("relu").unwrap();
    file.reference(&k).unwrap().unwrap()
}

#[test]
fn the_speedup_is_the_reference_median_over_the_kernels() {
    assert_eq!(
        speedup(&timing("k", 2.0), Some(&timing("r", 3.0))),
        Some(1.5)
    );
    assert_eq!(speedup(&timing("k", 2.0), None), None);
    // A kernel that took no measurable time has no ratio, not an infinite one.
    assert_eq!(speedup(&timing("k", 0.0), Some(&timing("r", 3.0))), None);
}

#[test]
fn torch_compile_is_left_out_only_on_tritons_interpreter() {
    let both = vec![TorchMode::Eager, TorchMode::Compile];
    assert_eq!(torch_modes(Lang::Triton, false), (both.clone(), None));
    assert_eq!(torch_modes(Lang::Cuda, true), (both, None));
    assert_eq!(
        torch_modes(Lang::Triton, true),
        (vec![TorchMode::Eager], Some(NO_COMPILE_ON_INTERPRETER))
    );
}

#[test]
fn a_kernel_reference_timing_gives_one_speedup_and_no_torch_columns() {
    let a = analyze(Lang::Cuda, KERNEL_AND_REFERENCE);
    let file = BenchFile {
        text: KERNEL_AND_REFERENCE,
        analysis: &a,
        path: None,
    };
    let r = file.reference(&file.kernel("fast_copy").unwrap()).unwrap();
    let (modes, note) = torch_modes(Lang::Cuda, false);
    let t = Timed::split(
        vec![timing("fast_copy", 0.5), timing("slow_copy", 2.0)],
        1,
        r.as_ref(),
        (&modes, note),
        false,
    );
    assert_eq!(t.kernels.len(), 1);
    assert_eq!(t.reference.as_ref().map(|r| r.median_ms), Some(2.0));
    assert_eq!(t.speedup(0), Some(4.0));
    assert_eq!(t.bars(0), None);
    // With no reference: a time and no speedup.
    let alone = Timed::split(vec![timing("k", 0.5)], 1, None, (&modes, note), false);
    assert_eq!((alone.speedup(0), alone.reference), (None, None));
}

#[test]
fn the_torch_columns_put_every_kernel_against_eager_and_compile() {
    let r = torch_ref();
    let (modes, note) = torch_modes(Lang::Triton, false);
    let t = Timed::split(
        vec![
            timing("start", 2.0),
            timing("best (v3)", 1.0),
            timing("torch eager", 3.0),
            timing("torch.compile", 1.5),
        ],
        2,
        Some(&r),
        (&modes, note),
        false,
    );
    assert_eq!(t.kernels.len(), 2);
    assert_eq!(t.speedup(0), Some(1.5));
    let best = t.bars(1).unwrap();
    assert_eq!(
        (best.speedup_eager, best.speedup_compile),
        (Some(3.0), Some(1.5))
    );
    assert_eq!(
        best.compile.map(|c| c.label),
        Some("torch.compile".to_string())
    );
    assert_eq!(best.note, None);
    // On the interpreter: eager only, and the note says why.
    let (modes, note) = torch_modes(Lang::Triton, true);
    let t = Timed::split(
        vec![timing("relu", 2.0), timing("torch eager", 1.0)],
        1,
        Some(&r),
        (&modes, note),
        true,
    );
    let bars = t.bars(0).unwrap();
    assert_eq!(
        (bars.speedup_eager, bars.speedup_compile),
        (Some(0.5), None)
    );
    assert_eq!(bars.note.as_deref(), Some(NO_COMPILE_ON_INTERPRETER));
    assert!(t.interpreter);
}

#[test]
fn the_reference_versions_timed_follow_the_modes() {
    let r = torch_ref();
    let labels: Vec<String> = r
        .timed(&[TorchMode::Eager, TorchMode::Compile])
        .into_iter()
        .map(|v| format!("{} {:?}", v.label, v.torch))
        .collect();
    assert_eq!(
        labels,
        ["torch eager Some(Eager)", "torch.compile Some(Compile)"]
    );
}

fn report(passed: bool, failure: Option<Failure>, nondeterministic: bool) -> VerifyReport {
    VerifyReport {
        passed,
        cases: 2,
        trials: 3,
        seed: 42,
        failure,
        nondeterministic,
        sanitizer: None,
        interpreter: false,
        elapsed_ms: 1.0,
        tally: Vec::new(),
    }
}

fn error(kind: ErrorKind) -> WorkerError {
    WorkerError {
        kind,
        message: format!("{kind:?} happened"),
        log: None,
    }
}

#[test]
fn verdicts_tell_a_wrong_result_a_crash_and_an_error_apart() {
    let ok = Verdict::from_reply(Ok(OpResult::Verify(report(true, None, false))));
    assert!(matches!(ok, Verdict::Passed(_)));
    assert_eq!(ok.failure(), None);

    let bad = Failure {
        case: 1,
        trial: 0,
        seed: 43,
        kind: FailureKind::Mismatch,
        buffer: Some("y".into()),
        index: Some(vec![3]),
        expected: None,
        actual: None,
        max_abs_err: None,
        max_rel_err: None,
        message: "y[3]: expected 1, got 2".into(),
    };
    let wrong = Verdict::from_reply(Ok(OpResult::Verify(report(false, Some(bad), false))));
    assert_eq!(
        wrong.failure(),
        Some(("y[3]: expected 1, got 2".into(), Some("y".into())))
    );
    let flaky = Verdict::from_reply(Ok(OpResult::Verify(report(false, None, true))));
    assert_eq!(
        flaky.failure().map(|f| f.0),
        Some("gives different results on the same inputs".into())
    );

    for kind in [ErrorKind::Fault, ErrorKind::Timeout] {
        let v = Verdict::from_reply(Err(error(kind)));
        assert!(matches!(v, Verdict::Crashed(_)), "{kind:?}: {v:?}");
    }
    let lost = Verdict::from_reply(Err(error(ErrorKind::WorkerLost)));
    assert!(matches!(lost, Verdict::Error(_)), "{lost:?}");
    assert_eq!(
        lost.failure().map(|f| f.0),
        Some("WorkerLost happened".into())
    );
    // A reply of another kind is an error, not a pass.
    let odd = Verdict::from_reply(Ok(OpResult::Time(crate::worker::protocol::TimeReport {
        timings: Vec::new(),
        interpreter: false,
    })));
    assert!(matches!(odd, Verdict::Error(_)), "{odd:?}");
}

#[test]
fn a_long_run_times_the_answer_and_the_most_recent_versions_together() {
    let accepted: Vec<(usize, String)> = (1..=20).map(|i| (i, format!("v{i}"))).collect();
    let (few, dropped) = columns::chosen(&accepted[..3], 2);
    assert_eq!((few.len(), dropped), (3, 0));
    // The answer is an early version: it stays, with the 15 most recent.
    let (chosen, dropped) = columns::chosen(&accepted, 2);
    let ids: Vec<usize> = chosen.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        ids,
        [2, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
    );
    assert_eq!((ids.len(), dropped), (columns::MAX_TIMED, 4));
    // The answer among the most recent: the 16 most recent, and the count left out.
    let (chosen, dropped) = columns::chosen(&accepted, 20);
    let ids: Vec<usize> = chosen.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (5..=20).collect::<Vec<_>>());
    assert_eq!(dropped, 4);
}
