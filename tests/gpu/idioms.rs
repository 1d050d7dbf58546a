//! GPU tests of the embedded idiom rewrites (issue #13): every candidate of each idiom,
//! on at least two kernels written in different styles, verified against the original
//! on the GPU through a real worker (the spec's cases, odd sizes included, fresh inputs
//! per trial), then timed side by side with it. Each kernel prints one line
//! `IDIOM <id> <file>:<kernel> best=<label> speedup=<x>` (and the rejected candidates),
//! which tests/gpu/run.sh collects. Skips without a GPU (fails under
//! KERNEL_LSP_REQUIRE_GPU=1), like the other `gpu_` tests.

use std::collections::BTreeMap;

use kernel_lsp::analysis::{self, AnalyzeOptions};
use kernel_lsp::document::Document;
use kernel_lsp::optimize::rewrite::{self, RewriteContext};
use kernel_lsp::syntax::Lang;
use kernel_lsp::worker::protocol::{Op, OpResult, TimeSettings, Version};

/// (rewrite, file, kernel): each idiom on two or more kernels in different styles.
const CASES: &[(&str, &str, &str)] = &[
    (
        "cooperative_rows",
        "examples/softmax_rows.cu",
        "softmax_rows",
    ),
    (
        "cooperative_rows",
        "tests/fixtures/rewrites/rows/row_stats.cu",
        "layer_norm",
    ),
    // Few long rows: a cluster of blocks per row (sm_90), combined through distributed
    // shared memory after each of three passes.
    (
        "cooperative_rows",
        "tests/fixtures/rewrites/rows/row_stats.cu",
        "group_norm_long",
    ),
    (
        "cooperative_rows",
        "tests/fixtures/rewrites/rows/row_stats.cu",
        "row_sum_while",
    ),
    // Few channels of 24 images: a cluster whose blocks take the image loop in turn.
    (
        "cooperative_rows",
        "tests/fixtures/rewrites/rows/nests.cu",
        "weighted_moments",
    ),
    (
        "cooperative_rows",
        "tests/fixtures/rewrites/rows/row_stats.cu",
        "spmv_csr",
    ),
    (
        "cooperative_rows",
        "tests/fixtures/rewrites/rows/arg_picks.cu",
        "row_argmax",
    ),
    (
        "split_loop",
        "tests/fixtures/rewrites/rows/arg_picks.cu",
        "col_argmax",
    ),
    ("split_loop", "examples/col_sum.cu", "col_sum"),
    ("split_loop", "examples/col_max.cu", "col_max"),
    (
        "split_loop",
        "tests/fixtures/rewrites/split/columns.cu",
        "col_normalize",
    ),
    (
        "split_loop",
        "tests/fixtures/rewrites/split/columns.cu",
        "even_sum",
    ),
    // A grid of 16 or 32 blocks along y per column of blocks, the last to finish
    // combining their partials from global memory: two sums in one loop, doubles with a
    // min and a product, an int count.
    (
        "split_loop",
        "tests/gpu/drafts/layernorm_bwd_dgamma_dbeta.cu",
        "layernorm_bwd_dgamma_dbeta",
    ),
    (
        "split_loop",
        "tests/fixtures/rewrites/split/grid.cu",
        "col_dsum_min_prod",
    ),
    (
        "split_loop",
        "tests/fixtures/rewrites/split/grid.cu",
        "col_count",
    ),
    (
        "interleave",
        "tests/fixtures/rewrites/interleave/loops.cu",
        "col_sum_split",
    ),
    (
        "interleave",
        "tests/fixtures/rewrites/interleave/loops.cu",
        "row_dot",
    ),
    (
        "interleave",
        "tests/fixtures/rewrites/interleave/loops.cu",
        "grid_stride_axpy",
    ),
    ("cooperative_rows", "examples/row_cumsum.cu", "row_cumsum"),
    (
        "cooperative_rows",
        "tests/fixtures/rewrites/rows/row_stats.cu",
        "offset_cumsum",
    ),
    (
        "cooperative_rows",
        "tests/fixtures/rewrites/rows/scans.cu",
        "cumsum_f64",
    ),
    (
        "cooperative_rows",
        "tests/fixtures/rewrites/rows/scans.cu",
        "weighted_cumsum_inplace",
    ),
    (
        "cooperative_rows",
        "tests/fixtures/rewrites/rows/walks.cu",
        "row_dot_f64",
    ),
    (
        "cooperative_rows",
        "tests/fixtures/rewrites/rows/walks.cu",
        "scale_shift_rows",
    ),
    (
        "cooperative_rows",
        "tests/fixtures/rewrites/rows/walks.cu",
        "plane_sums",
    ),
    ("privatize_atomics", "examples/histogram.cu", "histogram"),
    (
        "privatize_atomics",
        "tests/fixtures/rewrites/atomics/scatter.cu",
        "histogram_range",
    ),
    (
        "privatize_atomics",
        "tests/fixtures/rewrites/atomics/scatter.cu",
        "segment_sum",
    ),
    ("block_reduce", "examples/reduce_sum.cu", "reduce_tree"),
    (
        "block_reduce",
        "tests/fixtures/rewrites/reduce/sums.cu",
        "sum_tree",
    ),
    (
        "block_reduce",
        "tests/fixtures/rewrites/reduce/sums.cu",
        "dot",
    ),
    ("transpose_tile", "examples/transpose.cu", "transpose"),
    (
        "transpose_tile",
        "tests/fixtures/rewrites/tiles/transposes.cu",
        "scaled_transpose",
    ),
    (
        "transpose_tile",
        "tests/fixtures/rewrites/tiles/transposes.cu",
        "add_transposed",
    ),
    ("tile_matmul", "examples/matmul_naive.cu", "matmul"),
    (
        "tile_matmul",
        "tests/fixtures/rewrites/tiles/matmuls.cu",
        "gemm_nt",
    ),
    (
        "tile_matmul",
        "tests/fixtures/rewrites/tiles/matmuls.cu",
        "gemm_tn_bias",
    ),
    (
        "tile_matmul",
        "tests/fixtures/rewrites/tiles/matmuls.cu",
        "matmul_loose",
    ),
    // A bias as the sum's start (tensor cores add to it), a flat index made 2-D first, and
    // a sum kept in the output itself (held in a register first).
    (
        "tile_matmul",
        "tests/fixtures/rewrites/tiles/matmuls.cu",
        "linear_bias_relu",
    ),
    (
        "tile_matmul",
        "tests/fixtures/rewrites/tiles/matmuls.cu",
        "matmul_flat",
    ),
    (
        "tile_matmul",
        "tests/fixtures/rewrites/tiles/matmuls.cu",
        "matmul_in_place",
    ),
    (
        "cooperative_rows",
        "tests/fixtures/rewrites/rows/row_stats.cu",
        "row_sumsq_in_place",
    ),
    // A running maximum rescaling its sums: lanes past a short row keep minus infinity.
    (
        "cooperative_rows",
        "tests/fixtures/rewrites/rows/online.cu",
        "online_lse_inf",
    ),
    (
        "cooperative_rows",
        "tests/fixtures/rewrites/rows/online.cu",
        "softmax_weighted_mean",
    ),
    // Welford's mean, count and squared deviations combined by Chan's formula.
    (
        "cooperative_rows",
        "tests/fixtures/rewrites/rows/moments.cu",
        "welford_stats",
    ),
    (
        "tile_matmul",
        "tests/fixtures/rewrites/tiles/tensor_matmuls.cu",
        "gemm_tn",
    ),
    (
        "tile_matmul",
        "tests/fixtures/rewrites/tiles/tensor_matmuls.cu",
        "gemm_ld",
    ),
    (
        "tile_matmul",
        "tests/fixtures/rewrites/tiles/batched_matmuls.cu",
        "bmm_prelude",
    ),
    (
        "tile_matmul",
        "tests/fixtures/rewrites/tiles/batched_matmuls.cu",
        "attention_scores",
    ),
    ("coarsen", "examples/saxpy.cu", "saxpy"),
    (
        "coarsen",
        "tests/fixtures/rewrites/geometry/leaky_relu.cu",
        "leaky",
    ),
    (
        "grid_total",
        "tests/fixtures/rewrites/totals/one_block.cu",
        "mse_tree",
    ),
    (
        "grid_total",
        "tests/fixtures/rewrites/totals/one_block.cu",
        "weighted_sum",
    ),
    (
        "grid_total",
        "tests/fixtures/rewrites/totals/one_block.cu",
        "norm_serial",
    ),
    (
        "grid_total",
        "tests/fixtures/rewrites/totals/one_block.cu",
        "max_abs_shfl",
    ),
    (
        "grid_total",
        "tests/fixtures/rewrites/totals/one_block.cu",
        "moments",
    ),
    (
        "grid_total",
        "tests/fixtures/rewrites/totals/one_block.cu",
        "count_positive",
    ),
    (
        "transpose_tile",
        "tests/fixtures/rewrites/tiles/transposed_reads.cu",
        "add_transpose",
    ),
    (
        "transpose_tile",
        "tests/fixtures/rewrites/tiles/transposed_reads.cu",
        "add_bt_rect",
    ),
    (
        "transpose_tile",
        "tests/fixtures/rewrites/tiles/transposed_reads.cu",
        "nhwc_to_nchw_residual",
    ),
    (
        "vector_loops",
        "tests/fixtures/rewrites/vec_loops/rows.cu",
        "softmax_block",
    ),
    (
        "vector_loops",
        "tests/fixtures/rewrites/vec_loops/rows.cu",
        "rms_norm_rows",
    ),
    (
        "vector_loops",
        "tests/fixtures/rewrites/vec_loops/rows.cu",
        "row_sum_half",
    ),
    (
        "vector_loops",
        "tests/fixtures/rewrites/vec_loops/rows.cu",
        "center_rows_f64",
    ),
    (
        "vector_loops",
        "tests/fixtures/rewrites/vec_loops/rows.cu",
        "reverse_rows",
    ),
    (
        "vector_loops",
        "tests/fixtures/rewrites/vec_loops/grids.cu",
        "huber_total",
    ),
    (
        "vector_loops",
        "tests/fixtures/rewrites/vec_loops/grids.cu",
        "affine_grid",
    ),
    (
        "vector_loops",
        "tests/fixtures/rewrites/vec_loops/grids.cu",
        "daxpy_grid",
    ),
    (
        "vector_loops",
        "tests/fixtures/rewrites/vec_loops/warps.cu",
        "matvec_warp",
    ),
    // A team of eight blocks per channel in a cluster (sm_90): lanes
    // `(blockIdx.x % 8) * blockDim.x + threadIdx.x`, step `8 * blockDim.x`.
    (
        "vector_loops",
        "tests/fixtures/rewrites/vec_loops/cluster.cu",
        "channel_stats_nchw",
    ),
    // A flat index split by `/ D` and `% D` becomes a 2-D launch: a gather by a per-row
    // index, a broadcast over a flat `n`, and more rows than a grid's y holds.
    (
        "delinearize",
        "tests/gpu/drafts/embedding_gather.cu",
        "embedding_gather",
    ),
    (
        "delinearize",
        "tests/fixtures/rewrites/delin/flat_splits.cu",
        "bias_add",
    ),
    (
        "delinearize",
        "tests/fixtures/rewrites/delin/flat_splits.cu",
        "tall_rows",
    ),
    // A 4-level split of a 64-bit flat index with sizes in locals and a template factor.
    (
        "delinearize",
        "tests/gpu/drafts/pixel_shuffle.cu",
        "pixel_shuffle",
    ),
    // Rows walked in passes keep what the first pass read in registers.
    (
        "stage_rows",
        "tests/fixtures/rewrites/passes/passes.cu",
        "layernorm_block",
    ),
    (
        "stage_rows",
        "tests/gpu/drafts/softmax_backward_rows.cu",
        "softmax_backward_rows",
    ),
    // Four 64-bit indices a lane as two `uint4`, beside the float4 they gather into.
    (
        "vectorize_rows",
        "tests/gpu/drafts/gather_dim1.cu",
        "gather_dim1",
    ),
    (
        "vectorize_rows",
        "tests/fixtures/rewrites/vec_rows/rows.cu",
        "axpy_rows",
    ),
    // Loops in `__device__` helpers, written out before they are split or shared.
    (
        "split_loop",
        "tests/gpu/drafts/softmax_cols.cu",
        "softmax_cols",
    ),
    (
        "cooperative_rows",
        "tests/fixtures/rewrites/helpers/loops.cu",
        "rms_rows",
    ),
    ("triton_swizzle", "examples/matmul.py", "matmul_kernel"),
    (
        "triton_swizzle",
        "tests/fixtures/rewrites/triton/grid2d.py",
        "add_bias_2d",
    ),
    ("triton_configs", "examples/matmul.py", "matmul_kernel"),
    (
        "triton_configs",
        "tests/fixtures/rewrites/triton/grid2d.py",
        "add_bias_2d",
    ),
    (
        "triton_configs",
        "tests/fixtures/rewrites/triton/matmuls.py",
        "mm_bf16",
    ),
];

/// The case files, compiled in: the GPU machine runs a prebuilt test binary, and the
/// checkout it was built from need not be there.
fn source(file: &str) -> &'static str {
    match file {
        "examples/softmax_rows.cu" => include_str!("../../examples/softmax_rows.cu"),
        "examples/histogram.cu" => include_str!("../../examples/histogram.cu"),
        "examples/transpose.cu" => include_str!("../../examples/transpose.cu"),
        "examples/matmul_naive.cu" => include_str!("../../examples/matmul_naive.cu"),
        "examples/saxpy.cu" => include_str!("../../examples/saxpy.cu"),
        "examples/reduce_sum.cu" => include_str!("../../examples/reduce_sum.cu"),
        "tests/fixtures/rewrites/reduce/sums.cu" => {
            include_str!("../fixtures/rewrites/reduce/sums.cu")
        }
        "examples/matmul.py" => include_str!("../../examples/matmul.py"),
        "examples/col_sum.cu" => include_str!("../../examples/col_sum.cu"),
        "examples/col_max.cu" => include_str!("../../examples/col_max.cu"),
        "examples/row_cumsum.cu" => include_str!("../../examples/row_cumsum.cu"),
        "tests/fixtures/rewrites/interleave/loops.cu" => {
            include_str!("../fixtures/rewrites/interleave/loops.cu")
        }
        "tests/fixtures/rewrites/split/columns.cu" => {
            include_str!("../fixtures/rewrites/split/columns.cu")
        }
        "tests/fixtures/rewrites/rows/row_stats.cu" => {
            include_str!("../fixtures/rewrites/rows/row_stats.cu")
        }
        "tests/fixtures/rewrites/rows/arg_picks.cu" => {
            include_str!("../fixtures/rewrites/rows/arg_picks.cu")
        }
        "tests/fixtures/rewrites/rows/scans.cu" => {
            include_str!("../fixtures/rewrites/rows/scans.cu")
        }
        "tests/fixtures/rewrites/rows/walks.cu" => {
            include_str!("../fixtures/rewrites/rows/walks.cu")
        }
        "tests/fixtures/rewrites/atomics/scatter.cu" => {
            include_str!("../fixtures/rewrites/atomics/scatter.cu")
        }
        "tests/fixtures/rewrites/tiles/transposes.cu" => {
            include_str!("../fixtures/rewrites/tiles/transposes.cu")
        }
        "tests/fixtures/rewrites/tiles/matmuls.cu" => {
            include_str!("../fixtures/rewrites/tiles/matmuls.cu")
        }
        "tests/fixtures/rewrites/tiles/tensor_matmuls.cu" => {
            include_str!("../fixtures/rewrites/tiles/tensor_matmuls.cu")
        }
        "tests/fixtures/rewrites/tiles/batched_matmuls.cu" => {
            include_str!("../fixtures/rewrites/tiles/batched_matmuls.cu")
        }
        "tests/fixtures/rewrites/geometry/leaky_relu.cu" => {
            include_str!("../fixtures/rewrites/geometry/leaky_relu.cu")
        }
        "tests/fixtures/rewrites/totals/one_block.cu" => {
            include_str!("../fixtures/rewrites/totals/one_block.cu")
        }
        "tests/fixtures/rewrites/tiles/transposed_reads.cu" => {
            include_str!("../fixtures/rewrites/tiles/transposed_reads.cu")
        }
        "tests/fixtures/rewrites/vec_loops/rows.cu" => {
            include_str!("../fixtures/rewrites/vec_loops/rows.cu")
        }
        "tests/fixtures/rewrites/vec_loops/grids.cu" => {
            include_str!("../fixtures/rewrites/vec_loops/grids.cu")
        }
        "tests/gpu/drafts/embedding_gather.cu" => {
            include_str!("../gpu/drafts/embedding_gather.cu")
        }
        "tests/gpu/drafts/pixel_shuffle.cu" => include_str!("../gpu/drafts/pixel_shuffle.cu"),
        "tests/gpu/drafts/gather_dim1.cu" => include_str!("../gpu/drafts/gather_dim1.cu"),
        "tests/fixtures/rewrites/passes/passes.cu" => {
            include_str!("../fixtures/rewrites/passes/passes.cu")
        }
        "tests/gpu/drafts/softmax_backward_rows.cu" => {
            include_str!("../gpu/drafts/softmax_backward_rows.cu")
        }
        "tests/fixtures/rewrites/vec_rows/rows.cu" => {
            include_str!("../fixtures/rewrites/vec_rows/rows.cu")
        }
        "tests/gpu/drafts/softmax_cols.cu" => include_str!("../gpu/drafts/softmax_cols.cu"),
        "tests/gpu/drafts/layernorm_bwd_dgamma_dbeta.cu" => {
            include_str!("../gpu/drafts/layernorm_bwd_dgamma_dbeta.cu")
        }
        "tests/fixtures/rewrites/split/grid.cu" => {
            include_str!("../fixtures/rewrites/split/grid.cu")
        }
        "tests/fixtures/rewrites/helpers/loops.cu" => {
            include_str!("../fixtures/rewrites/helpers/loops.cu")
        }
        "tests/fixtures/rewrites/delin/flat_splits.cu" => {
            include_str!("../fixtures/rewrites/delin/flat_splits.cu")
        }
        "tests/fixtures/rewrites/vec_loops/warps.cu" => {
            include_str!("../fixtures/rewrites/vec_loops/warps.cu")
        }
        "tests/fixtures/rewrites/rows/nests.cu" => {
            include_str!("../fixtures/rewrites/rows/nests.cu")
        }
        "tests/fixtures/rewrites/rows/online.cu" => {
            include_str!("../fixtures/rewrites/rows/online.cu")
        }
        "tests/fixtures/rewrites/rows/moments.cu" => {
            include_str!("../fixtures/rewrites/rows/moments.cu")
        }
        "tests/fixtures/rewrites/vec_loops/cluster.cu" => {
            include_str!("../fixtures/rewrites/vec_loops/cluster.cu")
        }
        "tests/fixtures/rewrites/triton/grid2d.py" => {
            include_str!("../fixtures/rewrites/triton/grid2d.py")
        }
        "tests/fixtures/rewrites/triton/matmuls.py" => {
            include_str!("../fixtures/rewrites/triton/matmuls.py")
        }
        other => panic!("no case file {other}"),
    }
}

fn lang_of(file: &str) -> Lang {
    if file.ends_with(".py") {
        Lang::Triton
    } else {
        Lang::Cuda
    }
}

fn version(lang: Lang, text: &str, kernel: &str, label: &str) -> Version {
    let doc = Document::new(lang, 0, text);
    let file = analysis::analyze(lang, text, doc.tree(), &AnalyzeOptions::default());
    let idx = file
        .model
        .kernels
        .iter()
        .position(|k| k.name == kernel)
        .unwrap_or_else(|| panic!("no kernel {kernel}"));
    let plan = file.specs[idx].plan.clone().unwrap_or_else(|| {
        panic!(
            "{label}: {kernel} does not plan: {:?}",
            file.specs[idx].diagnostics
        )
    });
    Version {
        torch: None,
        label: label.to_string(),
        lang,
        source: file.kernel_source(kernel, text),
        plan,
        options: vec![],
        cuda: None,
    }
}

fn candidates(lang: Lang, text: &str, kernel: &str, id: &str) -> Vec<rewrite::Candidate> {
    let doc = Document::new(lang, 0, text);
    let tree = doc.tree().expect("parses");
    let model = kernel_lsp::syntax::analyze(lang, text, tree);
    let k = model.kernel(kernel).expect("kernel");
    let params = BTreeMap::new();
    // The catalog's parameters are the rewrites' defaults, except where a sweep is
    // bounded for test time.
    let params = if id == "triton_configs" {
        BTreeMap::from([("max_candidates".to_string(), serde_json::json!(6))])
    } else {
        params
    };
    rewrite::apply(
        id,
        &RewriteContext {
            lang,
            text,
            tree,
            model: &model,
            kernel: k,
            params: &params,
        },
    )
    .unwrap_or_else(|e| panic!("{id} on {kernel}: {e}"))
}

/// Without a GPU: every case still has candidates, and they and the originals plan.
#[test]
fn gpu_idiom_cases_have_candidates_that_plan_without_a_gpu() {
    let mut per_idiom: BTreeMap<&str, usize> = BTreeMap::new();
    for (id, file, kernel) in CASES {
        let lang = lang_of(file);
        let text = source(file).to_string();
        version(lang, &text, kernel, "original");
        let cands = candidates(lang, &text, kernel, id);
        assert!(!cands.is_empty(), "{id} on {kernel}");
        for c in &cands {
            version(lang, &c.text, kernel, &c.label);
        }
        *per_idiom.entry(id).or_default() += 1;
    }
    assert!(per_idiom.values().all(|n| *n >= 2), "{per_idiom:?}");
    assert_eq!(per_idiom.len(), 15, "every idiom: {per_idiom:?}");
}

#[tokio::test]
async fn gpu_idioms_verify_on_two_kernels_each_and_report_their_speedup() {
    if super::backend("gpu_idioms_verify_on_two_kernels_each_and_report_their_speedup").is_none() {
        return;
    }
    let pool = super::gpu_pool();
    let mut failures = Vec::new();
    let mut per_idiom: BTreeMap<&str, usize> = BTreeMap::new();
    for (id, file, kernel) in CASES {
        let lang = lang_of(file);
        let text = source(file).to_string();
        let original = version(lang, &text, kernel, "original");
        let cands = candidates(lang, &text, kernel, id);
        let mut verified = vec![original.clone()];
        let mut rejected = Vec::new();
        for c in &cands {
            let v = version(lang, &c.text, kernel, &c.label);
            match pool.request(super::verify_op(&v, &original), None).await {
                Ok(OpResult::Verify(r)) if r.passed => verified.push(v),
                Ok(OpResult::Verify(r)) => rejected.push(format!(
                    "{}: {}",
                    c.label,
                    r.failure.map(|f| f.message).unwrap_or_default()
                )),
                Ok(other) => rejected.push(format!("{}: unexpected reply {other:?}", c.label)),
                Err(e) => rejected.push(format!("{}: {}", c.label, e.message)),
            }
        }
        let mut line = format!(
            "IDIOM {id} {file}:{kernel} verified={}/{}",
            verified.len() - 1,
            cands.len()
        );
        if verified.len() > 1 {
            let op = Op::Time {
                versions: verified.clone(),
                settings: TimeSettings::default(),
            };
            match pool.request(op, None).await {
                Ok(OpResult::Time(t)) => {
                    let base = t.timings[0].median_ms;
                    let best = t.timings[1..]
                        .iter()
                        .min_by(|a, b| a.median_ms.total_cmp(&b.median_ms))
                        .expect("a candidate");
                    line.push_str(&format!(
                        " original={base:.4}ms best={:.4}ms speedup={:.2}x ({})",
                        best.median_ms,
                        base / best.median_ms,
                        best.label
                    ));
                }
                other => line.push_str(&format!(" timing failed: {other:?}")),
            }
        }
        println!("{line}");
        for r in &rejected {
            println!("    rejected {r}");
        }
        if rejected.is_empty() && verified.len() > 1 {
            *per_idiom.entry(id).or_default() += 1;
        } else {
            failures.push(format!("{id} on {file}:{kernel}: {}", rejected.join("; ")));
        }
    }
    pool.shutdown().await;
    assert!(
        failures.is_empty(),
        "candidates failed on the GPU:\n{}",
        failures.join("\n")
    );
    for (id, n) in &per_idiom {
        assert!(
            *n >= 2,
            "{id} verified on {n} kernel(s); each idiom needs two styles"
        );
    }
}
