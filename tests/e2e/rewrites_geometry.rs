//! The embedded launch-geometry rewrites against the real tools: every CUDA candidate
//! that `tunable_sweep`, `block_size`, `vectorize` and `grid_stride` produce for the
//! examples and fixtures plans and compiles with NVRTC; Triton candidates of
//! `triton_block`, `triton_num_warps` and `tunable_sweep` verify against the original
//! through a real worker on Triton's CPU interpreter; and the rewritten bodies of
//! `vectorize` and `grid_stride` compute what the original computes, checked on the CPU
//! emulator (`emulate.rs`: original and candidates compiled as C++ with g++, every
//! thread run, guard elements past each buffer). Missing NVRTC, torch/triton or g++
//! skips (or fails under KERNEL_LSP_REQUIRE_TOOLS=1).

use std::collections::BTreeMap;

use kernel_lsp::analysis::{self, AnalyzeOptions, Severity};
use kernel_lsp::document::Document;
use kernel_lsp::optimize::rewrite::{self, Candidate, RewriteContext, RewriteError};
use kernel_lsp::syntax::{self, Lang};

use crate::bench_triton::python;
use crate::emulate;
use crate::rewrites_idioms::verify_on_interpreter;
use crate::tools;

const SAXPY: &str = include_str!("../../examples/saxpy.cu");
const MATMUL: &str = include_str!("../../examples/matmul_naive.cu");
const REDUCE: &str = include_str!("../../examples/reduce_sum.cu");
const VECTOR_ADD: &str = include_str!("../../examples/vector_add.py");
const LEAKY: &str = include_str!("../fixtures/rewrites/geometry/leaky_relu.cu");
const HALF: &str = include_str!("../fixtures/rewrites/geometry/half_scale.cu");
const DAXPY: &str = include_str!("../fixtures/rewrites/geometry/daxpy.cu");
const PACKED: &str = include_str!("../fixtures/rewrites/geometry/packed.cu");

fn apply(lang: Lang, src: &str, kernel: &str, id: &str) -> Result<Vec<Candidate>, RewriteError> {
    let doc = Document::new(lang, 0, src);
    let tree = doc.tree().expect("fixture parses");
    let model = syntax::analyze(lang, src, tree);
    let k = model.kernel(kernel).expect("fixture has the kernel");
    let params = BTreeMap::new();
    rewrite::apply(
        id,
        &RewriteContext {
            lang,
            text: src,
            tree,
            model: &model,
            kernel: k,
            params: &params,
        },
    )
}

/// (file, kernel, rewrite, how many candidates; 0 = NotApplicable)
const CUDA_CASES: &[(&str, &str, &str, usize)] = &[
    ("saxpy.cu", "saxpy", "tunable_sweep", 0),
    ("saxpy.cu", "saxpy", "block_size", 4),
    ("saxpy.cu", "saxpy", "vectorize", 2),
    ("saxpy.cu", "saxpy", "grid_stride", 4),
    ("matmul_naive.cu", "matmul", "block_size", 8),
    ("matmul_naive.cu", "matmul", "vectorize", 0),
    ("matmul_naive.cu", "matmul", "grid_stride", 0),
    ("reduce_sum.cu", "reduce_tree", "tunable_sweep", 2),
    ("reduce_sum.cu", "reduce_tree", "block_size", 0),
    ("reduce_sum.cu", "reduce_naive", "block_size", 4),
    ("reduce_sum.cu", "reduce_naive", "vectorize", 0),
    ("reduce_sum.cu", "reduce_naive", "grid_stride", 4),
    ("leaky_relu.cu", "leaky", "vectorize", 2),
    ("leaky_relu.cu", "leaky", "grid_stride", 4),
    ("half_scale.cu", "half_scale", "vectorize", 3),
    ("packed.cu", "invert_u8", "vectorize", 3),
    ("packed.cu", "to_bf16", "vectorize", 2),
    ("packed.cu", "invert_u8", "coarsen", 6),
    ("half_scale.cu", "half_scale", "grid_stride", 4),
    ("daxpy.cu", "daxpy_pos", "vectorize", 2),
];

fn source(file: &str) -> &'static str {
    match file {
        "saxpy.cu" => SAXPY,
        "matmul_naive.cu" => MATMUL,
        "reduce_sum.cu" => REDUCE,
        "leaky_relu.cu" => LEAKY,
        "half_scale.cu" => HALF,
        "daxpy.cu" => DAXPY,
        "packed.cu" => PACKED,
        other => panic!("no fixture {other}"),
    }
}

#[test]
fn every_cuda_geometry_candidate_plans_and_compiles_with_nvrtc() {
    let mut all: Vec<(String, Candidate)> = Vec::new();
    for (file, kernel, id, want) in CUDA_CASES {
        let what = format!("{id} on {file}:{kernel}");
        match apply(Lang::Cuda, source(file), kernel, id) {
            Ok(out) => {
                assert_eq!(out.len(), *want, "{what}: {:?}", labels(&out));
                all.extend(out.into_iter().map(|c| (what.clone(), c)));
            }
            Err(RewriteError::NotApplicable(why)) => {
                assert_eq!(*want, 0, "{what} is not applicable: {why}")
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
    let expected: usize = CUDA_CASES.iter().map(|c| c.3).sum();
    assert_eq!(all.len(), expected);

    let analyzed: Vec<_> = all
        .iter()
        .map(|(what, c)| {
            let doc = Document::new(Lang::Cuda, 0, &c.text);
            let file =
                analysis::analyze(Lang::Cuda, &c.text, doc.tree(), &AnalyzeOptions::default());
            for (k, report) in file.model.kernels.iter().zip(&file.specs) {
                assert!(
                    report.plan.is_some(),
                    "{what} [{}]: `{}` does not plan: {:?}\n{}",
                    c.label,
                    k.name,
                    report.diagnostics,
                    c.text
                );
            }
            file
        })
        .collect();

    if let Err(why) = tools::nvrtc_available() {
        return tools::skip(
            "every_cuda_geometry_candidate_plans_and_compiles_with_nvrtc",
            &why,
        );
    }
    let tc = kernel_lsp::toolchain::locate(&Default::default());
    let errors = |text: &str, file: &analysis::FileAnalysis| -> Vec<String> {
        analysis::compile(&tc, text, &file.compile_inputs(), "candidate.cu")
            .findings
            .into_iter()
            .filter(|f| f.severity == Severity::Error)
            .map(|f| f.message)
            .collect()
    };
    for ((what, c), file) in all.iter().zip(&analyzed) {
        let errors = errors(&c.text, file);
        assert!(
            errors.is_empty(),
            "{what} [{}] does not compile: {errors:?}\n{}",
            c.label,
            c.text
        );
    }
    // Control: the same check catches a candidate that does not compile.
    let (_, c) = all
        .iter()
        .find(|(_, c)| c.label == "VEC=4 (float4)")
        .expect("saxpy's float4 candidate");
    let broken = c.text.replace("y4.w", "y4.q");
    let doc = Document::new(Lang::Cuda, 0, &broken);
    let file = analysis::analyze(Lang::Cuda, &broken, doc.tree(), &AnalyzeOptions::default());
    assert!(
        !errors(&broken, &file).is_empty(),
        "NVRTC accepted {broken}"
    );
}

fn labels(out: &[Candidate]) -> Vec<&str> {
    out.iter().map(|c| c.label.as_str()).collect()
}

#[tokio::test]
async fn triton_candidates_verify_against_the_original_on_the_interpreter() {
    let test = "triton_candidates_verify_against_the_original_on_the_interpreter";
    let py = match python() {
        Ok(p) => p,
        Err(why) => return tools::skip(test, &why),
    };
    // The example with small sizes, so the interpreter takes seconds; without its tune
    // line for triton_block (a tuned BLOCK is tunable_sweep's).
    let small = VECTOR_ADD.replace("n = 1 << 24, 1000", "n = 1000, 77");
    assert_ne!(
        small, VECTOR_ADD,
        "the example's sizes line moved; update this test"
    );
    let untuned = small.replace("# @bench tune BLOCK in [64, 256, 1024, 2048]\n", "");
    assert_ne!(
        untuned, small,
        "the example's tune line moved; update this test"
    );

    let mut jobs: Vec<(String, Candidate)> = Vec::new();
    for (src, id, want) in [
        (&small, "tunable_sweep", 3),
        (&untuned, "triton_block", 4),
        (&small, "triton_num_warps", 4),
    ] {
        let out =
            apply(Lang::Triton, src, "add_kernel", id).unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(out.len(), want, "{id}: {:?}", labels(&out));
        jobs.extend(out.into_iter().map(|c| (src.clone(), c)));
    }

    // Control: a launch that covers half the elements must fail verification.
    let half = untuned.replace("grid = cdiv(n, BLOCK)", "grid = cdiv(n, 2 * BLOCK)");
    assert_ne!(half, untuned);
    jobs.push((
        untuned.clone(),
        Candidate {
            label: "control: half the grid".into(),
            text: half,
        },
    ));

    let jobs: Vec<(String, &str, Candidate)> = jobs
        .into_iter()
        .map(|(original, c)| (original, "add_kernel", c))
        .collect();
    verify_on_interpreter(&py, &jobs, 7).await;
}

#[test]
fn vectorized_and_grid_stride_bodies_compute_what_the_original_computes() {
    let test = "vectorized_and_grid_stride_bodies_compute_what_the_original_computes";
    if let Err(why) = emulate::gxx() {
        return tools::skip(test, &why);
    }
    // Small sizes (the emulator runs every thread), with `sms` = 1 so a capped
    // grid-stride grid loops several times.
    for (src, kernel, sizes) in [
        (SAXPY, "saxpy", ("n = 1 << 24, 4099", "n = 5000, 4099")),
        (LEAKY, "leaky", ("n = 1 << 20, 4097", "n = 3001, 4097")),
        (DAXPY, "daxpy_pos", ("n = 1 << 20, 999", "n = 2000, 999")),
        (PACKED, "invert_u8", ("n = 1 << 20, 77", "n = 5003, 77")),
    ] {
        let small = src.replacen(sizes.0, sizes.1, 1);
        assert_ne!(
            small, src,
            "{kernel}: the sizes line moved; update this test"
        );
        let mut cands = Vec::new();
        for id in ["vectorize", "grid_stride"] {
            for c in apply(Lang::Cuda, &small, kernel, id).unwrap_or_else(|e| panic!("{id}: {e}")) {
                cands.push((format!("{id} {}", c.label), c.text));
            }
        }
        assert!(cands.len() >= 2, "{kernel}: {cands:?}");
        emulate::compare(&small, kernel, &cands, 1).unwrap_or_else(|e| panic!("{kernel}: {e}"));
    }
    // Control: a lane that reads its neighbour's element is caught.
    let small = SAXPY.replacen("n = 1 << 24, 4099", "n = 5000, 4099", 1);
    let good = apply(Lang::Cuda, &small, "saxpy", "vectorize")
        .unwrap()
        .remove(0);
    let wrong = good.text.replace("y4.w = a * x4.w", "y4.w = a * x4.z");
    assert_ne!(wrong, good.text);
    let err = emulate::compare(&small, "saxpy", &[("wrong lane".into(), wrong)], 1)
        .expect_err("the emulator missed a wrong lane");
    assert!(err.contains("wrong lane case 0: y["), "{err}");
}
