//! The embedded idiom rewrites (issue #13) against real tools: every CUDA candidate
//! plans and compiles with NVRTC, and computes what the original computes when both run
//! on the CPU emulator (`emulate.rs`: barriers, shared memory and warp shuffles
//! included); every Triton candidate verifies against the original on Triton's CPU
//! interpreter. Missing g++, NVRTC or torch/triton skips (or fails under
//! KERNEL_LSP_REQUIRE_TOOLS=1).

use crate::emulate;
use crate::tools;

const NORMS: &str = include_str!("../fixtures/rewrites/cuda/norms.cu");

/// The emulator itself: a kernel matches itself, a wrong shuffle is a difference, and a
/// shuffle whose mask names an exited lane is an error, not a silent pass.
#[test]
fn the_emulator_runs_shuffles_and_catches_what_it_must() {
    let test = "the_emulator_runs_shuffles_and_catches_what_it_must";
    if let Err(why) = emulate::gxx() {
        return tools::skip(test, &why);
    }
    let small = NORMS.replace(
        "rows = 4096, 33; cols = 1024, 100",
        "rows = 9, 5; cols = 70, 33",
    );
    assert_ne!(small, NORMS, "the fixture's sizes line moved");
    emulate::compare(&small, "softmax_rows", &[("same".into(), small.clone())], 2)
        .unwrap_or_else(|e| panic!("{e}"));
    let wrong = small.replace("16 >> k", "8 >> k");
    let err = emulate::compare(&small, "softmax_rows", &[("wrong offset".into(), wrong)], 2)
        .expect_err("a wrong butterfly must differ");
    assert!(err.contains("wrong offset case 0: y["), "{err}");
    let exited = small.replace(
        "    if (row >= rows) return;\n",
        "    if (row >= rows || threadIdx.x == 3) return;\n",
    );
    let err = emulate::compare(&small, "softmax_rows", &[("exited".into(), exited)], 2)
        .expect_err("a shuffle with an exited lane must fail");
    assert!(
        err.contains("EMULATOR: a warp collective's mask names a lane that has exited"),
        "{err}"
    );
}

use std::collections::BTreeMap;

use kernel_lsp::analysis::{self, AnalyzeOptions, Severity};
use kernel_lsp::document::Document;
use kernel_lsp::optimize::rewrite::{self, Candidate, RewriteContext, RewriteError};
use kernel_lsp::syntax::Lang;

fn apply(src: &str, kernel: &str, id: &str) -> Result<Vec<Candidate>, RewriteError> {
    apply_with(src, kernel, id, BTreeMap::new())
}

pub(crate) fn apply_with(
    src: &str,
    kernel: &str,
    id: &str,
    params: BTreeMap<String, serde_json::Value>,
) -> Result<Vec<Candidate>, RewriteError> {
    let doc = Document::new(Lang::Cuda, 0, src);
    let tree = doc.tree().expect("fixture parses");
    let model = kernel_lsp::syntax::analyze(Lang::Cuda, src, tree);
    let k = model.kernel(kernel).expect("fixture has the kernel");
    rewrite::apply(
        id,
        &RewriteContext {
            lang: Lang::Cuda,
            text: src,
            tree,
            model: &model,
            kernel: k,
            params: &params,
        },
    )
}

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One CUDA idiom case: a file, a kernel, a rewrite, how many candidates it must give
/// (0: it must refuse), and the spec's sizes line with small sizes for the emulator.
struct Case {
    file: &'static str,
    kernel: &'static str,
    id: &'static str,
    want: usize,
    sizes: (&'static str, &'static str),
}

const CASES: &[Case] = &[
    Case {
        file: TOTALS,
        kernel: "weighted_sum",
        id: "grid_total",
        want: 6,
        sizes: ("n = 1 << 22, 1001", "n = 4001, 1001"),
    },
    Case {
        file: TOTALS,
        kernel: "mse_tree",
        id: "grid_total",
        want: 6,
        sizes: ("n = 1 << 22, 99991", "n = 5000, 999"),
    },
    Case {
        file: TOTALS,
        kernel: "norm_serial",
        id: "grid_total",
        want: 12,
        sizes: ("n = 1 << 20, 4099", "n = 3000, 411"),
    },
    Case {
        file: TOTALS,
        kernel: "max_abs_shfl",
        id: "grid_total",
        want: 6,
        sizes: ("n = 1 << 22, 5001", "n = 4000, 501"),
    },
    Case {
        file: TOTALS,
        kernel: "moments",
        id: "grid_total",
        want: 6,
        sizes: ("n = 1 << 21, 777", "n = 3000, 777"),
    },
    Case {
        file: TOTALS,
        kernel: "count_positive",
        id: "grid_total",
        want: 6,
        sizes: ("n = 1 << 22, 3333", "n = 5000, 333"),
    },
    Case {
        file: GRID_LOOPS,
        kernel: "softplus_macro",
        id: "vectorize",
        want: 2,
        sizes: ("n = 1 << 20, 2049", "n = 3000, 2049"),
    },
    Case {
        file: GRID_LOOPS,
        kernel: "elu_covered",
        id: "vectorize",
        want: 2,
        sizes: ("n = 1 << 20, 4097", "n = 3000, 4097"),
    },
    Case {
        file: GRID_LOOPS,
        kernel: "elu_covered",
        id: "coarsen",
        want: 4,
        sizes: ("n = 1 << 20, 4097", "n = 3000, 4097"),
    },
    Case {
        file: GRID_LOOPS,
        kernel: "row_max_covered",
        id: "cooperative_rows",
        want: 11,
        sizes: (
            "rows = 2048, 77; cols = 256, 45",
            "rows = 40, 77; cols = 70, 45",
        ),
    },
    Case {
        file: GRID_LOOPS,
        kernel: "saxpy_capped",
        id: "vectorize",
        want: 0,
        sizes: ("n = 1 << 20, 30001", "n = 3000, 30001"),
    },
    Case {
        file: GRID_LOOPS,
        kernel: "copy_until_large",
        id: "vectorize",
        want: 0,
        sizes: ("n = 1 << 20, 3001", "n = 3000, 3001"),
    },
    Case {
        file: BATCH_EXITS,
        kernel: "mid_max_2d",
        id: "split_loop",
        want: 6,
        sizes: (
            "B = 6, 3; D = 512, 77; N = 1024, 333",
            "B = 2, 3; D = 40, 27; N = 70, 33",
        ),
    },
    Case {
        file: BATCH_EXITS,
        kernel: "mid_max_2d",
        id: "grid_stride",
        want: 4,
        sizes: (
            "B = 6, 3; D = 512, 77; N = 1024, 333",
            "B = 2, 3; D = 40, 27; N = 70, 33",
        ),
    },
    Case {
        file: BATCH_EXITS,
        kernel: "batched_row_sumsq",
        id: "cooperative_rows",
        want: 11,
        sizes: (
            "B = 4, 3; R = 512, 45; C = 256, 99",
            "B = 2, 3; R = 40, 45; C = 70, 99",
        ),
    },
    Case {
        file: BATCH_EXITS,
        kernel: "batched_col_mean",
        id: "split_loop",
        want: 6,
        sizes: (
            "B = 5, 2; M = 300, 101; N = 200, 67",
            "B = 2, 2; M = 50, 101; N = 40, 67",
        ),
    },
    Case {
        file: BATCH_EXITS,
        kernel: "rows_by_thread_y",
        id: "split_loop",
        want: 0,
        sizes: (
            "R = 64, 9; N = 256, 77; D = 128, 33",
            "R = 6, 9; N = 40, 77; D = 20, 33",
        ),
    },
    Case {
        file: NAMED_BLOCKS,
        kernel: "affine_define",
        id: "vectorize",
        want: 2,
        sizes: ("n = 1 << 20, 4099", "n = 3000, 4099"),
    },
    Case {
        file: NAMED_BLOCKS,
        kernel: "affine_define",
        id: "coarsen",
        want: 4,
        sizes: ("n = 1 << 20, 4099", "n = 3000, 4099"),
    },
    Case {
        file: NAMED_BLOCKS,
        kernel: "affine_define",
        id: "grid_stride",
        want: 4,
        sizes: ("n = 1 << 20, 4099", "n = 3000, 4099"),
    },
    Case {
        file: NAMED_BLOCKS,
        kernel: "mid_mean_define",
        id: "split_loop",
        want: 14,
        sizes: (
            "B = 8, 3; D = 512, 37; N = 1024, 333",
            "B = 2, 3; D = 40, 37; N = 70, 33",
        ),
    },
    Case {
        file: NAMED_BLOCKS,
        kernel: "row_l1_constexpr",
        id: "cooperative_rows",
        want: 11,
        sizes: (
            "rows = 4096, 101; cols = 512, 75",
            "rows = 50, 101; cols = 70, 75",
        ),
    },
    Case {
        file: NAMED_BLOCKS,
        kernel: "square_literal",
        id: "vectorize",
        want: 2,
        sizes: ("n = 1 << 20, 3001", "n = 2000, 3001"),
    },
    Case {
        file: NAMED_BLOCKS,
        kernel: "bias_rows_2d",
        id: "vectorize_rows",
        want: 2,
        sizes: ("R = 1024, 77; C = 1024, 301", "R = 20, 77; C = 64, 301"),
    },
    Case {
        file: NAMED_BLOCKS,
        kernel: "two_per_thread",
        id: "vectorize",
        want: 0,
        sizes: ("n = 1 << 20, 2001", "n = 3000, 2001"),
    },
    Case {
        file: NAMED_BLOCKS,
        kernel: "two_per_thread",
        id: "coarsen",
        want: 0,
        sizes: ("n = 1 << 20, 2001", "n = 3000, 2001"),
    },
    Case {
        file: SUMS,
        kernel: "tree_tid",
        id: "block_reduce",
        want: 3,
        sizes: ("n = 1 << 20, 999", "n = 3000, 999"),
    },
    Case {
        file: "tests/fixtures/rewrites/cuda/half2.cu",
        kernel: "swish_half2",
        id: "vectorize",
        want: 2,
        sizes: ("n2 = 1 << 16, 1001", "n2 = 3000, 1001"),
    },
    Case {
        file: "tests/fixtures/rewrites/cuda/half2.cu",
        kernel: "swish_half2",
        id: "coarsen",
        want: 4,
        sizes: ("n2 = 1 << 16, 1001", "n2 = 3000, 1001"),
    },
    Case {
        file: ROWS,
        kernel: "layernorm_ldg",
        id: "cooperative_rows",
        want: 14,
        sizes: ("R = 512, 9; D = 256, 67", "R = 9, 9; D = 67, 67"),
    },
    Case {
        file: STREAM,
        kernel: "row_moments",
        id: "stream_loads",
        want: 1,
        sizes: ("R = 512, 7; S = 1000, 33", "R = 6, 7; S = 300, 33"),
    },
    Case {
        file: STREAM,
        kernel: "add_bias_rows",
        id: "stream_loads",
        want: 1,
        sizes: ("R = 64, 5; C = 1024, 77", "R = 3, 5; C = 256, 77"),
    },
    Case {
        file: STREAM,
        kernel: "scale4",
        id: "stream_loads",
        want: 1,
        sizes: ("n4 = 1 << 16, 250", "n4 = 1000, 250"),
    },
    Case {
        file: STREAM,
        kernel: "decode",
        id: "stream_loads",
        want: 1,
        sizes: ("n = 1 << 16, 999; V = 256", "n = 3000, 999; V = 256"),
    },
    Case {
        file: STREAM,
        kernel: "tile_rows",
        id: "stream_loads",
        want: 1,
        sizes: ("R = 256, 9; C = 1024, 132", "R = 5, 9; C = 256, 132"),
    },
    Case {
        file: STREAM,
        kernel: "matvec_rows",
        id: "stream_loads",
        want: 0,
        sizes: ("rows = 256, 33; K = 512, 77", "rows = 70, 33; K = 50, 77"),
    },
    Case {
        file: "examples/reduce_sum.cu",
        kernel: "reduce_tree",
        id: "block_reduce",
        want: 3,
        sizes: ("n = 1 << 22, 1000", "n = 3000, 1000"),
    },
    Case {
        file: "examples/reduce_sum.cu",
        kernel: "reduce_naive",
        id: "block_reduce",
        want: 3,
        sizes: ("n = 1 << 22, 1000", "n = 3000, 1000"),
    },
    Case {
        file: SUMS,
        kernel: "sum_squares",
        id: "block_reduce",
        want: 3,
        sizes: ("n = 1 << 20, 1000", "n = 3000, 1000"),
    },
    Case {
        file: SUMS,
        kernel: "sum_tree",
        id: "block_reduce",
        want: 3,
        sizes: ("n = 1 << 20, 777", "n = 2000, 777"),
    },
    Case {
        file: SUMS,
        kernel: "dot",
        id: "block_reduce",
        want: 3,
        sizes: ("n = 1 << 20, 4097", "n = 5000, 4097"),
    },
    Case {
        file: SUMS,
        kernel: "count_positive",
        id: "block_reduce",
        want: 3,
        sizes: ("n = 1 << 20, 999", "n = 3000, 999"),
    },
    Case {
        file: "tests/fixtures/rewrites/rows/row_stats.cu",
        kernel: "channel_moments",
        id: "cooperative_rows",
        want: 11,
        sizes: (
            "N = 8, 3; C = 64, 5; HW = 1024, 77",
            "N = 3, 3; C = 5, 5; HW = 100, 77",
        ),
    },
    Case {
        file: "tests/fixtures/rewrites/rows/row_stats.cu",
        kernel: "channel_max",
        id: "cooperative_rows",
        want: 11,
        sizes: (
            "N = 4, 3; C = 128, 9; HW = 2048, 101",
            "N = 2, 3; C = 9, 9; HW = 130, 101",
        ),
    },
    // Loops in `__device__` helpers the kernel calls, seen once the calls are written out:
    // a void row helper calling a sum-of-squares helper, two column helpers handed a
    // size_t row count, and a column softmax whose max pass is a helper.
    Case {
        file: HELPERS,
        kernel: "rms_rows",
        id: "cooperative_rows",
        want: 11,
        sizes: (
            "rows = 4096, 33; cols = 1024, 45",
            "rows = 70, 33; cols = 300, 45",
        ),
    },
    Case {
        file: HELPERS,
        kernel: "column_range",
        id: "split_loop",
        want: 10,
        sizes: ("M = 2048, 37; N = 4096, 301", "M = 300, 37; N = 70, 301"),
    },
    Case {
        file: "tests/gpu/drafts/softmax_cols.cu",
        kernel: "softmax_cols",
        id: "split_loop",
        want: 20,
        sizes: (
            "rows = 2048, 37; cols = 8192, 1001",
            "rows = 300, 37; cols = 70, 101",
        ),
    },
    // The cluster's blocks take the image loop in turn (compiled; clusters are not emulated).
    Case {
        file: "tests/fixtures/rewrites/rows/nests.cu",
        kernel: "weighted_moments",
        id: "cooperative_rows",
        want: 11,
        sizes: (
            "N = 24, 3; C = 40, 5; HW = 8192, 77",
            "N = 16, 3; C = 3, 5; HW = 300, 77",
        ),
    },
    Case {
        file: "tests/fixtures/rewrites/rows/nests.cu",
        kernel: "odd_image_max",
        id: "cooperative_rows",
        want: 11,
        sizes: (
            "N = 40, 5; C = 24, 3; HW = 4096, 99",
            "N = 21, 5; C = 3, 3; HW = 130, 99",
        ),
    },
    Case {
        file: "tests/fixtures/rewrites/rows/row_stats.cu",
        kernel: "row_group_sum",
        id: "cooperative_rows",
        want: 9,
        sizes: (
            "rows = 1024, 33; cols = 256, 45",
            "rows = 40, 33; cols = 70, 45",
        ),
    },
    Case {
        file: SUMS,
        kernel: "mean_abs_diff",
        id: "block_reduce",
        want: 3,
        sizes: ("n = 1 << 20, 999", "n = 3000, 999"),
    },
    Case {
        file: SUMS,
        kernel: "scaled_tree",
        id: "block_reduce",
        want: 3,
        sizes: ("n = 1 << 20, 1001", "n = 3000, 1001"),
    },
    Case {
        file: SUMS,
        kernel: "abs_max_bits",
        id: "block_reduce",
        want: 3,
        sizes: ("n = 1 << 20, 1003", "n = 3000, 1003"),
    },
    Case {
        file: SUMS,
        kernel: "max_int",
        id: "block_reduce",
        want: 3,
        sizes: ("n = 1 << 20, 997", "n = 3000, 997"),
    },
    Case {
        file: SUMS,
        kernel: "first_above",
        id: "block_reduce",
        want: 3,
        sizes: ("n = 1 << 20, 1009", "n = 3000, 1009"),
    },
    Case {
        file: SUMS,
        kernel: "max_tree_bits",
        id: "block_reduce",
        want: 0,
        sizes: ("n = 1 << 20", "n = 1000"),
    },
    Case {
        file: SUMS,
        kernel: "weighted_blocks",
        id: "block_reduce",
        want: 0,
        sizes: ("n = 1 << 20", "n = 1000"),
    },
    Case {
        file: SUMS,
        kernel: "tickets",
        id: "block_reduce",
        want: 0,
        sizes: ("n = 1 << 20", "n = 1000"),
    },
    Case {
        file: SUMS,
        kernel: "max_tree",
        id: "block_reduce",
        want: 0,
        sizes: ("n = 1 << 20", "n = 1000"),
    },
    Case {
        file: SUMS,
        kernel: "scatter",
        id: "block_reduce",
        want: 0,
        sizes: ("n = 1 << 20", "n = 1000"),
    },
    Case {
        file: SUMS,
        kernel: "partials",
        id: "block_reduce",
        want: 0,
        sizes: ("n = 1 << 20", "n = 1000"),
    },
    Case {
        file: SUMS,
        kernel: "odd_block",
        id: "block_reduce",
        want: 0,
        sizes: ("n = 1 << 20", "n = 1000"),
    },
    Case {
        file: "examples/softmax_rows.cu",
        kernel: "softmax_rows",
        id: "cooperative_rows",
        want: 14,
        sizes: (
            "rows = 8192, 37; cols = 1024, 100",
            "rows = 70, 37; cols = 300, 5",
        ),
    },
    Case {
        file: ROWS,
        kernel: "row_sum_while",
        id: "cooperative_rows",
        want: 9,
        sizes: (
            "rows = 4096, 19; cols = 512, 33",
            "rows = 45, 19; cols = 100, 33",
        ),
    },
    Case {
        file: ROWS,
        kernel: "layer_norm",
        id: "cooperative_rows",
        want: 14,
        sizes: (
            "rows = 2048, 7; cols = 768, 45",
            "rows = 20, 7; cols = 200, 45",
        ),
    },
    Case {
        // Few long rows: a cluster of blocks per row, three passes, writes in the last.
        file: ROWS,
        kernel: "group_norm_long",
        id: "cooperative_rows",
        want: 14,
        sizes: ("G = 24, 3; L = 65536, 1001", "G = 5, 3; L = 3001, 1001"),
    },
    Case {
        file: ROWS,
        kernel: "row_max_count",
        id: "cooperative_rows",
        want: 11,
        sizes: (
            "rows = 1000, 3; cols = 96, 17",
            "rows = 40, 3; cols = 96, 17",
        ),
    },
    Case {
        file: ROWS,
        kernel: "spmv_csr",
        id: "cooperative_rows",
        want: 11,
        sizes: (
            "rows = 8192, 50; cols = 4096, 20",
            "rows = 80, 50; cols = 60, 20",
        ),
    },
    Case {
        file: ROWS,
        kernel: "spmv_ell_accumulate",
        id: "cooperative_rows",
        want: 11,
        sizes: (
            "rows = 4096, 10; width = 32, 5; cols = 2048, 40",
            "rows = 40, 10; width = 70, 5; cols = 50, 40",
        ),
    },
    Case {
        file: ROWS,
        kernel: "row_sumsq_in_place",
        id: "cooperative_rows",
        want: 11,
        sizes: (
            "rows = 4096, 37; cols = 1024, 333",
            "rows = 40, 37; cols = 100, 333",
        ),
    },
    Case {
        file: ONLINE,
        kernel: "online_lse",
        id: "cooperative_rows",
        want: 8,
        sizes: (
            "rows = 300, 37; cols = 1000, 7",
            "rows = 37, 5; cols = 300, 7",
        ),
    },
    // Lanes past the row's 5 columns keep minus infinity until the combine.
    Case {
        file: ONLINE,
        kernel: "online_lse_inf",
        id: "cooperative_rows",
        want: 8,
        sizes: (
            "rows = 200, 45; cols = 700, 5",
            "rows = 45, 7; cols = 70, 5",
        ),
    },
    Case {
        file: ONLINE,
        kernel: "softmax_weighted_mean",
        id: "cooperative_rows",
        want: 8,
        sizes: (
            "rows = 256, 19; cols = 512, 33",
            "rows = 19, 5; cols = 100, 33",
        ),
    },
    Case {
        file: MOMENTS,
        kernel: "welford_var",
        id: "cooperative_rows",
        want: 8,
        sizes: (
            "rows = 300, 37; cols = 1000, 7",
            "rows = 37, 5; cols = 300, 7",
        ),
    },
    // Lanes past the row's 5 columns have a count of 0 until the combine.
    Case {
        file: MOMENTS,
        kernel: "welford_stats",
        id: "cooperative_rows",
        want: 8,
        sizes: (
            "rows = 200, 45; cols = 700, 5",
            "rows = 45, 7; cols = 70, 5",
        ),
    },
    Case {
        file: MOMENTS,
        kernel: "welford_index_count",
        id: "cooperative_rows",
        want: 0,
        sizes: ("rows = 64; cols = 100", "rows = 9; cols = 40"),
    },
    Case {
        file: MOMENTS,
        kernel: "welford_old_mean",
        id: "cooperative_rows",
        want: 0,
        sizes: ("rows = 64; cols = 100", "rows = 9; cols = 40"),
    },
    Case {
        file: ONLINE,
        kernel: "rescaled_raw_sum",
        id: "cooperative_rows",
        want: 0,
        sizes: ("rows = 64; cols = 100", "rows = 9; cols = 40"),
    },
    Case {
        file: ONLINE,
        kernel: "rescaled_backwards",
        id: "cooperative_rows",
        want: 0,
        sizes: ("rows = 64; cols = 100", "rows = 9; cols = 40"),
    },
    Case {
        file: ONLINE,
        kernel: "rescaled_from_one",
        id: "cooperative_rows",
        want: 0,
        sizes: ("rows = 64; cols = 100", "rows = 9; cols = 40"),
    },
    Case {
        file: ROWS,
        kernel: "col_major_row_max",
        id: "cooperative_rows",
        // Its threads already read neighbouring elements (column-major): split_loop's.
        want: 0,
        sizes: (
            "rows = 3000, 41; cols = 200, 9",
            "rows = 50, 41; cols = 70, 9",
        ),
    },
    Case {
        file: ROWS,
        kernel: "col_major_row_max",
        id: "split_loop",
        want: 14,
        sizes: (
            "rows = 3000, 41; cols = 200, 9",
            "rows = 50, 41; cols = 70, 9",
        ),
    },
    Case {
        file: "examples/row_cumsum.cu",
        kernel: "row_cumsum",
        id: "cooperative_rows",
        want: 3,
        sizes: (
            "rows = 8192, 37; cols = 2048, 300",
            "rows = 9, 5; cols = 300, 31",
        ),
    },
    Case {
        file: ROWS,
        kernel: "offset_cumsum",
        id: "cooperative_rows",
        want: 3,
        sizes: (
            "rows = 2000, 9; cols = 300, 31",
            "rows = 7, 9; cols = 70, 31",
        ),
    },
    Case {
        file: SCANS,
        kernel: "cumsum_f64",
        id: "cooperative_rows",
        want: 3,
        sizes: (
            "rows = 1500, 7; cols = 333, 45",
            "rows = 5, 3; cols = 300, 45",
        ),
    },
    Case {
        file: SCANS,
        kernel: "count_positive",
        id: "cooperative_rows",
        want: 3,
        sizes: (
            "rows = 2048, 5; cols = 517, 66",
            "rows = 6, 5; cols = 517, 66",
        ),
    },
    Case {
        file: SCANS,
        kernel: "weighted_cumsum_inplace",
        id: "cooperative_rows",
        want: 3,
        sizes: (
            "rows = 1024, 3; cols = 1030, 19",
            "rows = 4, 3; cols = 300, 19",
        ),
    },
    Case {
        file: SCANS,
        kernel: "relu_cumsum_delta",
        id: "cooperative_rows",
        want: 3,
        sizes: (
            "rows = 700, 9; cols = 260, 37",
            "rows = 5, 9; cols = 260, 37",
        ),
    },
    Case {
        file: SCANS,
        kernel: "even_cumsum",
        id: "cooperative_rows",
        want: 3,
        sizes: (
            "rows = 900, 11; cols = 300, 41",
            "rows = 5, 11; cols = 300, 41",
        ),
    },
    Case {
        file: SCANS,
        kernel: "two_running_sums",
        id: "cooperative_rows",
        want: 1,
        sizes: (
            "rows = 600, 3; cols = 200, 21",
            "rows = 5, 3; cols = 200, 21",
        ),
    },
    Case {
        file: SCANS,
        kernel: "copy_then_cumsum",
        id: "cooperative_rows",
        want: 1,
        sizes: (
            "rows = 600, 3; cols = 200, 21",
            "rows = 5, 3; cols = 200, 21",
        ),
    },
    Case {
        file: WALKS,
        kernel: "row_dot_f64",
        id: "cooperative_rows",
        want: 11,
        sizes: ("rows = 1200, 7; n = 1000, 130", "rows = 5, 7; n = 300, 130"),
    },
    Case {
        file: WALKS,
        kernel: "row_l1_int",
        id: "cooperative_rows",
        want: 11,
        sizes: (
            "rows = 2000, 9; cols = 777, 64",
            "rows = 5, 9; cols = 301, 64",
        ),
    },
    Case {
        file: WALKS,
        kernel: "scale_shift_rows",
        id: "cooperative_rows",
        want: 11,
        sizes: (
            "rows = 1024, 5; cols = 1000, 37",
            "rows = 4, 5; cols = 300, 37",
        ),
    },
    Case {
        file: WALKS,
        kernel: "even_columns_sum",
        id: "cooperative_rows",
        want: 9,
        sizes: (
            "rows = 1024, 5; cols = 1000, 37",
            "rows = 4, 5; cols = 300, 37",
        ),
    },
    Case {
        file: WALKS,
        kernel: "plane_sums",
        id: "cooperative_rows",
        want: 11,
        sizes: (
            "N = 6, 3; C = 40, 5; HW = 1000, 77",
            "N = 3, 2; C = 5, 3; HW = 301, 77",
        ),
    },
    Case {
        file: WALKS,
        kernel: "triple_sums",
        id: "cooperative_rows",
        want: 9,
        sizes: (
            "rows = 512, 5; cols = 300, 31",
            "rows = 4, 5; cols = 100, 31",
        ),
    },
    Case {
        file: "examples/matvec.cu",
        kernel: "matvec",
        id: "cooperative_rows",
        want: 11,
        sizes: (
            "out_f = 8192, 77; in_f = 4096, 1000",
            "out_f = 5, 77; in_f = 300, 37",
        ),
    },
    Case {
        file: REFUSALS,
        kernel: "prefix_rows",
        id: "cooperative_rows",
        want: 0,
        sizes: ("rows = 1000; cols = 64", "rows = 10; cols = 64"),
    },
    Case {
        file: REFUSALS,
        kernel: "smooth_rows",
        id: "cooperative_rows",
        want: 0,
        sizes: ("rows = 1000; cols = 64", "rows = 10; cols = 64"),
    },
    Case {
        file: PICKS,
        kernel: "argmax_rows",
        id: "cooperative_rows",
        want: 8,
        sizes: ("rows = 1000; cols = 64", "rows = 10; cols = 64"),
    },
    Case {
        file: REFUSALS,
        kernel: "permute_rows",
        id: "cooperative_rows",
        want: 0,
        sizes: ("rows = 1000; cols = 64", "rows = 10; cols = 64"),
    },
    Case {
        file: REFUSALS,
        kernel: "sum_until_negative",
        id: "cooperative_rows",
        want: 0,
        sizes: ("rows = 1000; cols = 64", "rows = 10; cols = 64"),
    },
    Case {
        file: "examples/histogram.cu",
        kernel: "histogram",
        id: "privatize_atomics",
        want: 3,
        sizes: ("n = 1 << 26, 1000003", "n = 5000, 1003"),
    },
    Case {
        file: SCATTER,
        kernel: "histogram_range",
        id: "privatize_atomics",
        want: 3,
        sizes: (
            "n = 1 << 20, 3001; nbins = 100, 7",
            "n = 4000, 3001; nbins = 100, 7",
        ),
    },
    Case {
        file: SCATTER,
        kernel: "segment_sum",
        id: "privatize_atomics",
        want: 3,
        sizes: ("n = 1 << 20, 999; segs = 64", "n = 3000, 999; segs = 64"),
    },
    Case {
        file: SCATTER,
        kernel: "capped_histogram",
        id: "privatize_atomics",
        want: 0,
        sizes: ("n = 1000; bins = 16", "n = 100; bins = 16"),
    },
    Case {
        file: SCATTER,
        kernel: "bucket_append",
        id: "privatize_atomics",
        want: 0,
        sizes: (
            "n = 1000; bins = 16; cap = 1000",
            "n = 100; bins = 16; cap = 1000",
        ),
    },
    Case {
        file: SCATTER,
        kernel: "bucket_max",
        id: "privatize_atomics",
        want: 0,
        sizes: ("n = 1000; bins = 16", "n = 100; bins = 16"),
    },
    Case {
        file: SCATTER,
        kernel: "wide_histogram",
        id: "privatize_atomics",
        want: 0,
        sizes: ("n = 1000; bins = 1 << 20", "n = 100; bins = 1 << 20"),
    },
    Case {
        file: "examples/transpose.cu",
        kernel: "transpose",
        id: "transpose_tile",
        want: 3,
        sizes: (
            "rows = 8192, 1000; cols = 4096, 333",
            "rows = 70, 33; cols = 45, 100",
        ),
    },
    Case {
        file: "examples/bias_relu_rows.cu",
        kernel: "bias_relu_rows",
        id: "remap_lanes",
        want: 3,
        sizes: (
            "rows = 8192, 1001; cols = 4096, 77",
            "rows = 40, 33; cols = 130, 77",
        ),
    },
    Case {
        file: LANES,
        kernel: "blend_helper",
        id: "remap_lanes",
        want: 3,
        sizes: ("m = 3000, 513; n = 1024, 45", "m = 70, 13; n = 40, 45"),
    },
    Case {
        file: LANES,
        kernel: "row_window",
        id: "remap_lanes",
        want: 3,
        sizes: ("h = 1024, 99; w = 1024, 130", "h = 20, 9; w = 37, 13"),
    },
    Case {
        file: LANES,
        kernel: "scale_cols",
        id: "remap_lanes",
        want: 0,
        sizes: (
            "rows = 2048, 33; cols = 2048, 65",
            "rows = 20, 3; cols = 20, 65",
        ),
    },
    Case {
        file: LANES,
        kernel: "scale_cols",
        id: "block_coarsen",
        want: 3,
        sizes: (
            "rows = 2048, 33; cols = 2048, 65",
            "rows = 20, 3; cols = 300, 65",
        ),
    },
    // Rows along y: each block takes 2, 4 or 8 of them; the last stops at the bound.
    Case {
        file: "tests/fixtures/rewrites/coarsen/rows.cu",
        kernel: "outer_scaled",
        id: "block_coarsen",
        want: 3,
        sizes: ("M = 4096, 77; N = 1024, 999", "M = 37, 77; N = 300, 999"),
    },
    Case {
        file: "tests/fixtures/rewrites/coarsen/rows.cu",
        kernel: "add_row_bias",
        id: "block_coarsen",
        want: 3,
        sizes: (
            "B = 8, 3; H = 512, 13; D = 768, 101",
            "B = 3, 3; H = 7, 13; D = 600, 101",
        ),
    },
    Case {
        file: LANES,
        kernel: "blend_helper",
        id: "block_coarsen",
        want: 3,
        sizes: ("m = 3000, 513; n = 1024, 45", "m = 170, 13; n = 40, 45"),
    },
    Case {
        file: LANES,
        kernel: "row_window",
        id: "block_coarsen",
        want: 3,
        sizes: ("h = 1024, 99; w = 1024, 130", "h = 50, 9; w = 37, 13"),
    },
    Case {
        file: LANES,
        kernel: "neighbour_diff",
        id: "block_coarsen",
        want: 0,
        sizes: (
            "rows = 1024, 31; cols = 64, 64",
            "rows = 100, 31; cols = 6, 6",
        ),
    },
    Case {
        file: TILES,
        kernel: "scaled_transpose",
        id: "transpose_tile",
        want: 3,
        sizes: ("n = 1000, 77; m = 900, 130", "n = 50, 77; m = 40, 13"),
    },
    Case {
        file: TILES,
        kernel: "add_transposed",
        id: "transpose_tile",
        want: 3,
        sizes: (
            "rows = 700, 33; cols = 500, 65",
            "rows = 70, 33; cols = 50, 65",
        ),
    },
    Case {
        file: TILES,
        kernel: "batched_transpose",
        id: "transpose_tile",
        want: 3,
        sizes: (
            "batch = 3, 2; rows = 300, 33; cols = 200, 65",
            "batch = 2, 2; rows = 40, 33; cols = 50, 65",
        ),
    },
    Case {
        file: TILES,
        kernel: "permute_transpose",
        id: "transpose_tile",
        want: 0,
        sizes: ("rows = 100; cols = 100", "rows = 40; cols = 70"),
    },
    Case {
        file: TILES,
        kernel: "copy2d",
        id: "transpose_tile",
        want: 0,
        sizes: ("rows = 100; cols = 100", "rows = 40; cols = 70"),
    },
    Case {
        file: TILES,
        kernel: "symmetrize",
        id: "transpose_tile",
        want: 0,
        sizes: ("n = 100", "n = 40"),
    },
    Case {
        file: READS,
        kernel: "add_transpose",
        id: "transpose_tile",
        want: 4,
        sizes: ("N = 4096, 333", "N = 70, 33"),
    },
    Case {
        file: READS,
        kernel: "mul_transposed",
        id: "transpose_tile",
        want: 3,
        sizes: ("n = 2048, 333", "n = 45, 33"),
    },
    Case {
        file: READS,
        kernel: "sub_transposed",
        id: "transpose_tile",
        want: 4,
        sizes: ("n = 1024, 333", "n = 50, 19"),
    },
    Case {
        file: READS,
        kernel: "add_bt_rect",
        id: "transpose_tile",
        want: 3,
        sizes: ("R = 1000, 47; C = 700, 61", "R = 47, 33; C = 61, 40"),
    },
    Case {
        file: READS,
        kernel: "nhwc_to_nchw_residual",
        id: "transpose_tile",
        want: 4,
        sizes: (
            "batch = 8, 3; C = 256, 45; P = 3136, 70",
            "batch = 3, 2; C = 45, 17; P = 70, 33",
        ),
    },
    Case {
        file: READS,
        kernel: "diff_transposed",
        id: "transpose_tile",
        want: 4,
        sizes: (
            "H = 300, 45; W = 200, 33; L = 301, 46",
            "H = 45, 20; W = 33, 40; L = 46, 21",
        ),
    },
    Case {
        file: READS,
        kernel: "add_transpose_flat",
        id: "transpose_tile",
        want: 3,
        sizes: ("N = 1024, 333", "N = 130, 33"),
    },
    Case {
        file: FLAT_TILES,
        kernel: "transpose_flat",
        id: "transpose_tile",
        want: 3,
        sizes: (
            "rows = 2048, 333; cols = 1024, 77",
            "rows = 40, 33; cols = 130, 77",
        ),
    },
    Case {
        file: FLAT_TILES,
        kernel: "permute_021_flat",
        id: "transpose_tile",
        want: 3,
        sizes: (
            "B = 4, 3; M = 512, 301; N = 256, 77",
            "B = 2, 3; M = 45, 31; N = 130, 7",
        ),
    },
    Case {
        file: FLAT_TILES,
        kernel: "gather_transpose_flat",
        id: "transpose_tile",
        want: 3,
        sizes: (
            "rows = 1024, 45; cols = 2048, 333",
            "rows = 45, 33; cols = 130, 9",
        ),
    },
    Case {
        file: FLAT_TILES,
        kernel: "nchw_to_nhwc_flat",
        id: "transpose_tile",
        want: 4,
        sizes: (
            "NB = 4, 2; C = 64, 3; HW = 1024, 49",
            "NB = 2, 3; C = 64, 3; HW = 45, 49",
        ),
    },
    Case {
        file: FLAT_TILES,
        kernel: "cat_dim1_flat",
        id: "transpose_tile",
        want: 0,
        sizes: (
            "rows = 100, 7; A = 64, 5; Bc = 32, 3",
            "rows = 10, 7; A = 64, 5; Bc = 32, 3",
        ),
    },
    Case {
        file: FLAT_TILES,
        kernel: "scatter_transpose_flat",
        id: "transpose_tile",
        want: 0,
        sizes: ("rows = 100, 7; cols = 64, 5", "rows = 10, 7; cols = 64, 5"),
    },
    Case {
        file: READS,
        kernel: "symmetrize_in_place",
        id: "transpose_tile",
        want: 0,
        sizes: ("n = 100", "n = 40"),
    },
    Case {
        file: READS,
        kernel: "scale_by_batch_column",
        id: "transpose_tile",
        want: 0,
        sizes: (
            "batch = 4; rows = 100; cols = 100",
            "batch = 2; rows = 40; cols = 30",
        ),
    },
    Case {
        file: READS,
        kernel: "from_upper",
        id: "transpose_tile",
        want: 0,
        sizes: ("n = 100", "n = 40"),
    },
    Case {
        file: READS,
        kernel: "sum_transposes",
        id: "transpose_tile",
        want: 0,
        sizes: ("k = 4; n = 100", "k = 2; n = 40"),
    },
    Case {
        file: "examples/matmul_naive.cu",
        kernel: "matmul",
        id: "tile_matmul",
        want: 7,
        sizes: (
            "m = 1024, 67; n = 1024, 45; k = 1024, 33",
            "m = 70, 67; n = 45, 33; k = 40, 33",
        ),
    },
    Case {
        file: MATMULS,
        kernel: "gemm_nt",
        id: "tile_matmul",
        want: 7,
        sizes: (
            "m = 300, 33; n = 200, 70; k = 150, 17",
            "m = 40, 33; n = 70, 19; k = 37, 17",
        ),
    },
    Case {
        file: HALF_MATMULS,
        kernel: "hgemm",
        id: "tile_matmul",
        want: 7,
        sizes: (
            "m = 1024, 67; n = 1024, 45; k = 1024, 33",
            "m = 70, 67; n = 45, 33; k = 40, 33",
        ),
    },
    Case {
        file: HALF_MATMULS,
        kernel: "linear_bt",
        id: "tile_matmul",
        want: 7,
        sizes: (
            "m = 512, 37; n = 768, 70; k = 256, 19",
            "m = 40, 37; n = 70, 19; k = 33, 19",
        ),
    },
    Case {
        file: MATMULS,
        kernel: "min_plus",
        id: "tile_matmul",
        want: 7,
        sizes: ("n = 130, 40", "n = 70, 40"),
    },
    Case {
        file: MATMULS,
        kernel: "gemm_tn_bias",
        id: "tile_matmul",
        want: 7,
        sizes: (
            "m = 200, 31; n = 96, 50; k = 64, 9",
            "m = 40, 31; n = 66, 50; k = 20, 9",
        ),
    },
    Case {
        file: MATMULS,
        kernel: "linear_bias_relu",
        id: "tile_matmul",
        want: 10,
        sizes: (
            "m = 300, 37; n = 130, 61; k = 96, 21",
            "m = 37, 21; n = 61, 19; k = 21, 7",
        ),
    },
    Case {
        file: MATMULS,
        kernel: "gemm_accumulate",
        id: "tile_matmul",
        want: 7,
        sizes: (
            "m = 200, 45; n = 100, 19; k = 64, 30",
            "m = 45, 19; n = 19, 45; k = 30, 5",
        ),
    },
    Case {
        file: MATMULS,
        kernel: "matmul_flat",
        id: "tile_matmul",
        want: 10,
        sizes: (
            "m = 200, 45; n = 130, 19; k = 64, 30",
            "m = 45, 19; n = 19, 45; k = 30, 5",
        ),
    },
    Case {
        file: MATMULS,
        kernel: "matmul_in_place",
        id: "tile_matmul",
        want: 7,
        sizes: (
            "m = 100, 45; n = 70, 19; k = 50, 30",
            "m = 45, 19; n = 19, 45; k = 30, 5",
        ),
    },
    Case {
        file: MATMULS,
        kernel: "gemm_row_pointer",
        id: "tile_matmul",
        want: 0,
        sizes: ("m = 64; n = 64; k = 32", "m = 40; n = 33; k = 17"),
    },
    Case {
        file: MATMULS,
        kernel: "matmul_loose",
        id: "tile_matmul",
        want: 10,
        sizes: (
            "m = 512, 70; n = 256, 33; k = 384, 45",
            "m = 100, 70; n = 80, 33; k = 50, 45",
        ),
    },
    Case {
        file: TENSOR_MATMULS,
        kernel: "gemm_tn",
        id: "tile_matmul",
        want: 10,
        sizes: (
            "m = 300, 37; n = 200, 70; k = 150, 19",
            "m = 40, 37; n = 70, 19; k = 30, 19",
        ),
    },
    Case {
        file: TENSOR_MATMULS,
        kernel: "gemm_ld",
        id: "tile_matmul",
        want: 10,
        sizes: (
            "m = 256, 33; n = 192, 41; k = 96, 17; lda = 100, 20; ldb = 200, 45",
            "m = 40, 33; n = 50, 41; k = 30, 17; lda = 33, 20; ldb = 51, 45",
        ),
    },
    Case {
        file: TENSOR_MATMULS,
        kernel: "matmul_band",
        id: "tile_matmul",
        want: 10,
        sizes: (
            "m = 300, 37; n = 200, 70; k = 150, 19; row0 = 37, 5",
            "m = 40, 37; n = 50, 19; k = 30, 19; row0 = 7, 5",
        ),
    },
    Case {
        file: TENSOR_MATMULS,
        kernel: "linear_nt",
        id: "tile_matmul",
        want: 10,
        sizes: (
            "rows = 300, 37; outs = 200, 70; ins = 150, 19",
            "rows = 40, 37; outs = 70, 19; ins = 30, 19",
        ),
    },
    Case {
        file: BATCHED_MATMULS,
        kernel: "bmm_aliases",
        id: "tile_matmul",
        want: 10,
        sizes: (
            "bt = 8, 3; m = 512, 37; n = 512, 29; k = 256, 21",
            "bt = 2, 3; m = 37, 19; n = 29, 45; k = 21, 35",
        ),
    },
    Case {
        file: BATCHED_MATMULS,
        kernel: "bmm_prelude",
        id: "tile_matmul",
        want: 10,
        sizes: (
            "bt = 4, 2; m = 300, 33; n = 200, 45; k = 150, 19",
            "bt = 3, 2; m = 41, 33; n = 45, 70; k = 19, 37",
        ),
    },
    Case {
        file: BATCHED_MATMULS,
        kernel: "bmm_indexed",
        id: "tile_matmul",
        want: 7,
        sizes: (
            "bt = 3, 2; m = 200, 31; n = 96, 50; k = 64, 9",
            "bt = 3, 2; m = 40, 31; n = 50, 19; k = 23, 9",
        ),
    },
    Case {
        file: BATCHED_MATMULS,
        kernel: "batched_linear",
        id: "tile_matmul",
        want: 10,
        sizes: (
            "bt = 6, 3; m = 128, 21; n = 96, 35; k = 80, 27",
            "bt = 3, 2; m = 21, 70; n = 35, 17; k = 27, 33",
        ),
    },
    Case {
        file: BATCHED_MATMULS,
        kernel: "attention_scores",
        id: "tile_matmul",
        want: 10,
        sizes: (
            "bh = 8, 3; lq = 256, 23; lk = 256, 41; d = 64, 17",
            "bh = 3, 2; lq = 23, 37; lk = 41, 19; d = 17, 40",
        ),
    },
    Case {
        file: BATCHED_MATMULS,
        kernel: "bmm_tn",
        id: "tile_matmul",
        want: 10,
        sizes: (
            "bt = 5, 2; m = 160, 29; n = 112, 23; k = 48, 13",
            "bt = 3, 2; m = 29, 66; n = 23, 41; k = 13, 35",
        ),
    },
    Case {
        file: BATCHED_MATMULS,
        kernel: "bmm_thread_batch",
        id: "tile_matmul",
        want: 0,
        sizes: (
            "bt = 4; m = 64; n = 64; k = 32",
            "bt = 4; m = 20; n = 20; k = 32",
        ),
    },
    Case {
        file: BATCHED_MATMULS,
        kernel: "bmm_stacked_rows",
        id: "tile_matmul",
        want: 0,
        sizes: (
            "bt = 4; m = 40; n = 64; k = 32",
            "bt = 4; m = 20; n = 20; k = 32",
        ),
    },
    Case {
        file: BATCHED_MATMULS,
        kernel: "summed_batches",
        id: "tile_matmul",
        want: 0,
        sizes: (
            "bt = 3; m = 48; n = 48; k = 30",
            "bt = 3; m = 20; n = 20; k = 30",
        ),
    },
    Case {
        file: MATMULS,
        kernel: "conv_rows",
        id: "tile_matmul",
        want: 0,
        sizes: ("rows = 64; n = 64; taps = 5", "rows = 20; n = 20; taps = 5"),
    },
    Case {
        file: MATMULS,
        kernel: "ragged_rows",
        id: "tile_matmul",
        want: 0,
        sizes: ("m = 64; n = 64; k = 32", "m = 20; n = 20; k = 32"),
    },
    Case {
        file: "examples/saxpy.cu",
        kernel: "saxpy",
        id: "coarsen",
        want: 4,
        sizes: ("n = 1 << 24, 4099", "n = 5000, 4099"),
    },
    Case {
        file: "tests/fixtures/rewrites/geometry/leaky_relu.cu",
        kernel: "leaky",
        id: "coarsen",
        want: 4,
        sizes: ("n = 1 << 20, 4097", "n = 3001, 4097"),
    },
    Case {
        file: "tests/fixtures/rewrites/geometry/daxpy.cu",
        kernel: "daxpy_pos",
        id: "coarsen",
        want: 4,
        sizes: ("n = 1 << 20, 999", "n = 2000, 999"),
    },
    Case {
        file: "examples/col_sum.cu",
        kernel: "col_sum",
        id: "split_loop",
        want: 14,
        sizes: (
            "rows = 16384, 1001; cols = 2048, 77",
            "rows = 67, 5; cols = 45, 77",
        ),
    },
    Case {
        file: "examples/matvec_t.cu",
        kernel: "matvec_t",
        id: "split_loop",
        want: 14,
        sizes: ("m = 8192, 333; n = 4096, 65", "m = 70, 33; n = 40, 65"),
    },
    Case {
        file: "examples/col_max.cu",
        kernel: "col_max",
        id: "split_loop",
        want: 14,
        sizes: (
            "batch = 8192, 513; feat = 4096, 100",
            "batch = 51, 9; feat = 37, 100",
        ),
    },
    Case {
        file: SPLIT,
        kernel: "col_normalize",
        id: "split_loop",
        want: 10,
        sizes: (
            "rows = 4096, 37; cols = 1024, 45",
            "rows = 37, 6; cols = 45, 20",
        ),
    },
    Case {
        file: SPLIT,
        kernel: "even_sum",
        id: "split_loop",
        want: 14,
        sizes: ("pairs = 2048, 9; n = 512, 33", "pairs = 21, 9; n = 40, 33"),
    },
    Case {
        file: SPLIT,
        kernel: "col_count_prod",
        id: "split_loop",
        want: 14,
        sizes: (
            "rows = 3000, 7; cols = 700, 31",
            "rows = 30, 7; cols = 70, 31",
        ),
    },
    Case {
        file: SPLIT,
        kernel: "row_sum",
        id: "split_loop",
        want: 0,
        sizes: (
            "rows = 4096, 7; cols = 512, 3",
            "rows = 40, 7; cols = 51, 3",
        ),
    },
    Case {
        file: BROADCASTS,
        kernel: "dequant_rows",
        id: "vectorize",
        want: 2,
        sizes: (
            "rows = 512, 33; cols = 1024, 100",
            "rows = 7, 33; cols = 101, 100",
        ),
    },
    Case {
        file: BROADCASTS,
        kernel: "dequant_rows",
        id: "coarsen",
        want: 4,
        sizes: (
            "rows = 512, 33; cols = 1024, 100",
            "rows = 7, 33; cols = 101, 100",
        ),
    },
    Case {
        file: BROADCASTS,
        kernel: "bias_relu_nchw",
        id: "vectorize",
        want: 2,
        sizes: (
            "n = 8, 3; c = 64, 5; hw = 784, 49",
            "n = 2, 3; c = 3, 5; hw = 37, 49",
        ),
    },
    Case {
        file: BROADCASTS,
        kernel: "bias_relu_nchw",
        id: "coarsen",
        want: 4,
        sizes: (
            "n = 8, 3; c = 64, 5; hw = 784, 49",
            "n = 2, 3; c = 3, 5; hw = 37, 49",
        ),
    },
    Case {
        file: BROADCASTS,
        kernel: "lut_add",
        id: "vectorize",
        want: 2,
        sizes: ("n = 1 << 20, 999", "n = 2001, 999"),
    },
    Case {
        file: BROADCASTS,
        kernel: "lut_add",
        id: "coarsen",
        want: 4,
        sizes: ("n = 1 << 20, 999", "n = 2001, 999"),
    },
    Case {
        file: BROADCASTS,
        kernel: "scale_rows_cols",
        id: "vectorize",
        want: 2,
        sizes: (
            "rows = 300, 7; cols = 1000, 77",
            "rows = 5, 7; cols = 77, 77",
        ),
    },
    Case {
        file: BROADCASTS,
        kernel: "scale_rows_cols",
        id: "coarsen",
        want: 4,
        sizes: (
            "rows = 300, 7; cols = 1000, 77",
            "rows = 5, 7; cols = 77, 77",
        ),
    },
    Case {
        file: BROADCASTS,
        kernel: "center_rows",
        id: "vectorize",
        want: 2,
        sizes: (
            "rows = 300, 7; cols = 1000, 77",
            "rows = 5, 7; cols = 77, 77",
        ),
    },
    Case {
        file: BROADCASTS,
        kernel: "center_rows",
        id: "grid_stride",
        want: 4,
        sizes: (
            "rows = 300, 7; cols = 1000, 77",
            "rows = 5, 7; cols = 77, 77",
        ),
    },
    Case {
        file: SPLITS,
        kernel: "channel_scale",
        id: "vectorize",
        want: 2,
        sizes: (
            "N = 3, 2; C = 5, 3; HW = 64, 7",
            "N = 3, 2; C = 5, 3; HW = 64, 7",
        ),
    },
    Case {
        file: SPLITS,
        kernel: "channel_scale",
        id: "coarsen",
        want: 4,
        sizes: (
            "N = 3, 2; C = 5, 3; HW = 64, 7",
            "N = 3, 2; C = 5, 3; HW = 64, 7",
        ),
    },
    Case {
        file: SPLITS,
        kernel: "permute_hwc",
        id: "vectorize",
        want: 2,
        sizes: (
            "H = 6, 5; W = 4, 3; C = 8, 7",
            "H = 6, 5; W = 4, 3; C = 8, 7",
        ),
    },
    Case {
        file: SPLITS,
        kernel: "permute_hwc",
        id: "coarsen",
        want: 4,
        sizes: (
            "H = 6, 5; W = 4, 3; C = 8, 7",
            "H = 6, 5; W = 4, 3; C = 8, 7",
        ),
    },
    Case {
        file: BROADCASTS,
        kernel: "scale_loaded_early",
        id: "vectorize",
        want: 0,
        sizes: (
            "rows = 300, 7; cols = 1000, 77",
            "rows = 5, 7; cols = 77, 77",
        ),
    },
    Case {
        file: BROADCASTS,
        kernel: "halve_from_half",
        id: "vectorize",
        want: 0,
        sizes: ("n = 1 << 20", "n = 1000"),
    },
    Case {
        file: "examples/col_sum.cu",
        kernel: "col_sum",
        id: "cooperative_rows",
        want: 0,
        sizes: (
            "rows = 16384, 1001; cols = 2048, 77",
            "rows = 67, 5; cols = 45, 77",
        ),
    },
    Case {
        file: INTERLEAVE,
        kernel: "col_sum_split",
        id: "interleave",
        want: 2,
        sizes: (
            "rows = 4096, 37; cols = 1024, 45",
            "rows = 67, 37; cols = 45, 45",
        ),
    },
    Case {
        file: INTERLEAVE,
        kernel: "grid_stride_axpy",
        id: "interleave",
        want: 2,
        sizes: ("n = 1 << 22, 1001", "n = 3001, 1001"),
    },
    Case {
        file: INTERLEAVE,
        kernel: "row_dot",
        id: "interleave",
        want: 2,
        sizes: ("m = 2048, 33; n = 1024, 77", "m = 9, 33; n = 101, 77"),
    },
    Case {
        file: INTERLEAVE,
        kernel: "strided_max",
        id: "interleave",
        want: 2,
        sizes: ("n = 1 << 20, 999", "n = 1000, 999"),
    },
    Case {
        file: INTERLEAVE,
        kernel: "first_negative",
        id: "interleave",
        want: 0,
        sizes: ("n = 1 << 20, 99", "n = 300, 99"),
    },
    Case {
        file: NESTS,
        kernel: "channel_stats_lanes",
        id: "interleave",
        want: 4,
        sizes: (
            "N = 32, 3; C = 64, 5; HW = 16384, 77",
            "N = 7, 3; C = 2, 5; HW = 20001, 77",
        ),
    },
    Case {
        file: NESTS,
        kernel: "block_mean_nchw",
        id: "interleave",
        want: 4,
        sizes: (
            "N = 16, 3; C = 32, 3; HW = 4096, 50",
            "N = 7, 3; C = 3, 3; HW = 1001, 50",
        ),
    },
    Case {
        file: NESTS,
        kernel: "batched_dot_max",
        id: "interleave",
        want: 4,
        sizes: (
            "B = 24, 7; R = 64, 3; K = 512, 45",
            "B = 9, 7; R = 5, 3; K = 101, 45",
        ),
    },
    Case {
        file: NESTS,
        kernel: "odd_rows",
        id: "interleave",
        want: 4,
        sizes: ("M = 40, 5; L = 1000, 9", "M = 13, 5; L = 301, 9"),
    },
    Case {
        file: NESTS,
        kernel: "lower_sums",
        id: "interleave",
        want: 2,
        sizes: ("n = 300, 5", "n = 37, 5"),
    },
    Case {
        file: NESTS,
        kernel: "scale_rows",
        id: "interleave",
        want: 2,
        sizes: ("rows = 64, 3; cols = 500, 9", "rows = 6, 3; cols = 131, 9"),
    },
    Case {
        file: NESTS,
        kernel: "arg_best",
        id: "interleave",
        want: 2,
        sizes: ("rows = 64, 3; cols = 500, 9", "rows = 6, 3; cols = 131, 9"),
    },
    Case {
        file: NESTS,
        kernel: "squared_rows",
        id: "interleave",
        want: 4,
        sizes: (
            "rows = 64, 7; cols = 300, 33",
            "rows = 5, 7; cols = 131, 33",
        ),
    },
    Case {
        file: NESTS,
        kernel: "staged_rows",
        id: "interleave",
        want: 0,
        sizes: ("rows = 64, 3; cols = 512, 9", "rows = 6, 3; cols = 131, 9"),
    },
    Case {
        file: "examples/batched_rowsum.cu",
        kernel: "batched_rowsum",
        id: "cooperative_rows",
        want: 11,
        sizes: (
            "B = 16, 3; R = 1024, 33; C = 1024, 100",
            "B = 2, 3; R = 40, 33; C = 70, 100",
        ),
    },
    Case {
        file: "examples/batched_rowsum.cu",
        kernel: "batched_rowsum",
        id: "grid_stride",
        want: 4,
        sizes: (
            "B = 16, 3; R = 1024, 33; C = 1024, 100",
            "B = 2, 3; R = 40, 33; C = 70, 100",
        ),
    },
    Case {
        file: BATCHED,
        kernel: "mid_sum_flat",
        id: "split_loop",
        want: 14,
        sizes: (
            "B = 16, 3; D1 = 256, 17; D2 = 256, 33",
            "B = 3, 3; D1 = 40, 17; D2 = 50, 33",
        ),
    },
    Case {
        file: BATCHED,
        kernel: "mid_sum_flat",
        id: "cooperative_rows",
        want: 0,
        sizes: (
            "B = 16, 3; D1 = 256, 17; D2 = 256, 33",
            "B = 3, 3; D1 = 40, 17; D2 = 50, 33",
        ),
    },
    Case {
        file: BATCHED,
        kernel: "batched_col_max",
        id: "split_loop",
        want: 6,
        sizes: (
            "B = 3, 2; M = 1024, 77; N = 256, 45",
            "B = 2, 2; M = 50, 77; N = 40, 45",
        ),
    },
    Case {
        file: PICKS,
        kernel: "row_argmax",
        id: "cooperative_rows",
        want: 8,
        sizes: (
            "rows = 4096, 33; cols = 2048, 257",
            "rows = 40, 33; cols = 150, 257",
        ),
    },
    Case {
        file: PICKS,
        kernel: "row_argmin_last",
        id: "cooperative_rows",
        want: 6,
        sizes: (
            "rows = 2048, 17; cols = 1000, 99",
            "rows = 21, 17; cols = 77, 99",
        ),
    },
    Case {
        file: PICKS,
        kernel: "best_label",
        id: "cooperative_rows",
        want: 8,
        sizes: (
            "rows = 1024, 9; cols = 700, 65",
            "rows = 11, 9; cols = 70, 65",
        ),
    },
    Case {
        file: PICKS,
        kernel: "col_argmax",
        id: "split_loop",
        want: 6,
        sizes: (
            "rows = 4096, 301; cols = 512, 77",
            "rows = 130, 301; cols = 40, 77",
        ),
    },
    Case {
        file: PICKS,
        kernel: "running_argmax",
        id: "cooperative_rows",
        want: 0,
        sizes: ("rows = 512; cols = 256", "rows = 5; cols = 40"),
    },
    Case {
        file: PICKS,
        kernel: "max_tag",
        id: "cooperative_rows",
        want: 0,
        sizes: ("rows = 512; cols = 256", "rows = 5; cols = 40"),
    },
];

const SPLIT: &str = "tests/fixtures/rewrites/split/columns.cu";
const HELPERS: &str = "tests/fixtures/rewrites/helpers/loops.cu";
const INTERLEAVE: &str = "tests/fixtures/rewrites/interleave/loops.cu";
const NESTS: &str = "tests/fixtures/rewrites/interleave/nests.cu";
const MATMULS: &str = "tests/fixtures/rewrites/tiles/matmuls.cu";
const HALF_MATMULS: &str = "tests/fixtures/rewrites/tiles/half_matmuls.cu";
const TENSOR_MATMULS: &str = "tests/fixtures/rewrites/tiles/tensor_matmuls.cu";
const BATCHED_MATMULS: &str = "tests/fixtures/rewrites/tiles/batched_matmuls.cu";
const LANES: &str = "tests/fixtures/rewrites/lanes/remaps.cu";
const TILES: &str = "tests/fixtures/rewrites/tiles/transposes.cu";
const READS: &str = "tests/fixtures/rewrites/tiles/transposed_reads.cu";
const FLAT_TILES: &str = "tests/fixtures/rewrites/tiles/flat_transposes.cu";
const SCATTER: &str = "tests/fixtures/rewrites/atomics/scatter.cu";
const SCANS: &str = "tests/fixtures/rewrites/rows/scans.cu";
const WALKS: &str = "tests/fixtures/rewrites/rows/walks.cu";
const SUMS: &str = "tests/fixtures/rewrites/reduce/sums.cu";
const STREAM: &str = "tests/fixtures/rewrites/stream/loads.cu";
const TOTALS: &str = "tests/fixtures/rewrites/totals/one_block.cu";
const ONLINE: &str = "tests/fixtures/rewrites/rows/online.cu";
const MOMENTS: &str = "tests/fixtures/rewrites/rows/moments.cu";
const ROWS: &str = "tests/fixtures/rewrites/rows/row_stats.cu";
const REFUSALS: &str = "tests/fixtures/rewrites/rows/refusals.cu";
const PICKS: &str = "tests/fixtures/rewrites/rows/arg_picks.cu";
const BATCHED: &str = "tests/fixtures/rewrites/rows/batched.cu";
const BROADCASTS: &str = "tests/fixtures/rewrites/geometry/broadcasts.cu";
const SPLITS: &str = "tests/fixtures/rewrites/vec_rows/splits.cu";
const BATCH_EXITS: &str = "tests/fixtures/rewrites/rows/batch_exits.cu";
const GRID_LOOPS: &str = "tests/fixtures/rewrites/geometry/grid_loops.cu";
const NAMED_BLOCKS: &str = "tests/fixtures/rewrites/geometry/named_blocks.cu";
const BLOCK_NAMES: &str = "tests/fixtures/rewrites/geometry/block_names.cu";

/// The case's file with the sizes line made small.
fn small(c: &Case) -> String {
    let text =
        std::fs::read_to_string(root().join(c.file)).unwrap_or_else(|e| panic!("{}: {e}", c.file));
    // Only the kernel's own spec: the first occurrence after its comment block starts.
    // `void name(`, or `void __cluster_dims__(8, 1, 1) name(`.
    let at = text
        .find(&format!("void {}(", c.kernel))
        .or_else(|| text.find(&format!(") {}(", c.kernel)))
        .unwrap_or_else(|| panic!("{}: no kernel {}", c.file, c.kernel));
    let spec = text[..at].rfind(c.sizes.0).unwrap_or_else(|| {
        panic!(
            "{}: the sizes line `{}` of {} moved; update this test",
            c.file, c.sizes.0, c.kernel
        )
    });
    format!(
        "{}{}{}",
        &text[..spec],
        c.sizes.1,
        &text[spec + c.sizes.0.len()..]
    )
}

/// Rows longer than the registers a staged row gets: the head keeps the first columns in
/// registers, the tail loops over the rest in global memory; both must add up to the
/// original on the emulator (`stage_registers` forces a short head).
#[test]
fn a_staged_row_longer_than_its_registers_computes_what_the_original_computes() {
    let test = "a_staged_row_longer_than_its_registers_computes_what_the_original_computes";
    if let Err(why) = emulate::gxx() {
        return tools::skip(test, &why);
    }
    for (file, kernel, sizes) in [
        (
            "examples/softmax_rows.cu",
            "softmax_rows",
            (
                "rows = 8192, 37; cols = 1024, 100",
                "rows = 9, 4; cols = 300, 70",
            ),
        ),
        (
            ROWS,
            "layer_norm",
            (
                "rows = 2048, 7; cols = 768, 45",
                "rows = 5, 3; cols = 700, 45",
            ),
        ),
    ] {
        let c = Case {
            file,
            kernel,
            id: "cooperative_rows",
            want: 3,
            sizes,
        };
        let src = small(&c);
        let params = BTreeMap::from([
            (
                "modes".to_string(),
                serde_json::json!(["warp_regs", "block_regs"]),
            ),
            ("block_threads".to_string(), serde_json::json!([64])),
            ("stage_registers".to_string(), serde_json::json!(2)),
        ]);
        let out =
            apply_with(&src, kernel, c.id, params).unwrap_or_else(|e| panic!("{kernel}: {e}"));
        assert_eq!(
            out.len(),
            2,
            "{kernel}: {:?}",
            out.iter().map(|c| &c.label).collect::<Vec<_>>()
        );
        assert!(
            out.iter().all(|c| c.label.contains("(2 per lane")),
            "{kernel}"
        );
        let cands: Vec<(String, String)> = out
            .iter()
            .map(|c| (c.label.clone(), c.text.clone()))
            .collect();
        emulate::compare(&src, kernel, &cands, 2).unwrap_or_else(|e| panic!("{kernel}: {e}"));
    }
}

/// A staged transposed read against a control on the emulator: the candidate computes
/// what the original computes; the same candidate reading its tile along the rows instead
/// of down the columns must differ, so the idiom cases above cannot pass vacuously.
#[test]
fn a_tile_of_a_transposed_read_read_the_wrong_way_round_differs() {
    let test = "a_tile_of_a_transposed_read_read_the_wrong_way_round_differs";
    if let Err(why) = emulate::gxx() {
        return tools::skip(test, &why);
    }
    let c = Case {
        file: READS,
        kernel: "add_bt_rect",
        id: "transpose_tile",
        want: 3,
        sizes: ("R = 1000, 47; C = 700, 61", "R = 47, 33; C = 61, 40"),
    };
    let src = small(&c);
    let out = apply(&src, c.kernel, c.id).unwrap_or_else(|e| panic!("{e}"));
    let good = &out[0];
    let wrong = good.text.replace(
        "b_tile[threadIdx.x][tile_row]",
        "b_tile[tile_row][threadIdx.x]",
    );
    assert_ne!(wrong, good.text, "the tile read moved; update this test");
    emulate::compare(
        &src,
        c.kernel,
        &[(good.label.clone(), good.text.clone())],
        2,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let err = emulate::compare(&src, c.kernel, &[("control".into(), wrong)], 2)
        .expect_err("a tile read along its rows must differ");
    assert!(err.contains("control case 0: out["), "{err}");
}

/// One case: its candidates, each compiled with NVRTC (when `tc` is given) and run on the
/// emulator against the original (when `emulate` is true); (compiled, emulated).
fn check_idiom_case(
    c: &Case,
    tc: Option<&kernel_lsp::toolchain::Toolchain>,
    emulate: bool,
) -> (usize, usize) {
    check_idiom_candidates(c, tc, emulate, &|_| true)
}

/// [`check_idiom_case`] on the candidates `keep` picks (`c.want` counts those).
fn check_idiom_candidates(
    c: &Case,
    tc: Option<&kernel_lsp::toolchain::Toolchain>,
    emulate: bool,
    keep: &dyn Fn(&Candidate) -> bool,
) -> (usize, usize) {
    let what = format!("{} on {}:{}", c.id, c.file, c.kernel);
    let src = small(c);
    let out = match apply(&src, c.kernel, c.id) {
        Ok(out) => out.into_iter().filter(|c| keep(c)).collect::<Vec<_>>(),
        Err(RewriteError::NotApplicable(why)) => {
            assert_eq!(c.want, 0, "{what} is not applicable: {why}");
            return (0, 0);
        }
        Err(e) => panic!("{what}: {e}"),
    };
    assert_eq!(
        out.len(),
        c.want,
        "{what}: {:?}",
        out.iter().map(|c| &c.label).collect::<Vec<_>>()
    );
    if out.is_empty() {
        return (0, 0);
    }
    let mut compiled = 0;
    for cand in out.iter().filter(|_| tc.is_some()) {
        let doc = Document::new(Lang::Cuda, 0, &cand.text);
        let file = analysis::analyze(
            Lang::Cuda,
            &cand.text,
            doc.tree(),
            &AnalyzeOptions::default(),
        );
        let errors: Vec<String> = analysis::compile(
            tc.expect("filtered"),
            &cand.text,
            &file.compile_inputs(),
            "candidate.cu",
        )
        .findings
        .into_iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| f.message)
        .collect();
        assert!(
            errors.is_empty(),
            "{what} [{}] does not compile: {errors:?}\n{}",
            cand.label,
            cand.text
        );
        compiled += 1;
    }
    // The emulator has no f16 or bf16, no tensor cores (inline `mma.sync`) and no thread
    // block clusters; those candidates are compiled here and verified on the GPU
    // (tests/gpu/idioms.rs).
    let f16 = src.contains(": in f16[") || src.contains(": in bf16[");
    if !emulate || f16 {
        return (compiled, 0);
    }
    let cands: Vec<(String, String)> = out
        .iter()
        .filter(|c| !c.text.contains("mma.sync") && !c.text.contains("barrier.cluster"))
        .map(|c| (c.label.clone(), c.text.clone()))
        .collect();
    emulate::compare(&src, c.kernel, &cands, 2).unwrap_or_else(|e| panic!("{what}: {e}"));
    (compiled, cands.len())
}

/// Kernels whose block width is a name (`#define`, `constexpr`, a template parameter):
/// the rewrites that read `blockDim.x` take them, and a candidate that launches another
/// width keeps the kernel consistent (a shared array of the old width, a tree from half
/// of it); every candidate compiles and computes what the original computes.
const BLOCK_NAME_CASES: &[Case] = &[
    Case {
        file: BLOCK_NAMES,
        kernel: "block_sum_tree",
        id: "block_size",
        want: 4,
        sizes: ("n = 1 << 20, 3001", "n = 5000, 3001"),
    },
    Case {
        file: BLOCK_NAMES,
        kernel: "block_sum_tree",
        id: "block_reduce",
        want: 3,
        sizes: ("n = 1 << 20, 3001", "n = 5000, 3001"),
    },
    Case {
        file: BLOCK_NAMES,
        kernel: "histogram_strided",
        id: "privatize_atomics",
        want: 3,
        sizes: (
            "n = 1 << 20, 4099; bins = 64, 17",
            "n = 3000, 4099; bins = 64, 17",
        ),
    },
    Case {
        file: BLOCK_NAMES,
        kernel: "histogram_strided",
        id: "block_size",
        want: 4,
        sizes: (
            "n = 1 << 20, 4099; bins = 64, 17",
            "n = 3000, 4099; bins = 64, 17",
        ),
    },
    Case {
        file: BLOCK_NAMES,
        kernel: "row_sq_template",
        id: "cooperative_rows",
        want: 8,
        sizes: (
            "rows = 4096, 101; cols = 512, 75; BS = 128",
            "rows = 300, 101; cols = 70, 75; BS = 128",
        ),
    },
    Case {
        file: BLOCK_NAMES,
        kernel: "row_sq_template",
        id: "block_size",
        want: 4,
        sizes: (
            "rows = 4096, 101; cols = 512, 75; BS = 128",
            "rows = 300, 101; cols = 70, 75; BS = 128",
        ),
    },
    Case {
        file: BLOCK_NAMES,
        kernel: "dot_rows_odd",
        id: "cooperative_rows",
        want: 7,
        sizes: ("n = 3000, 77; k = 200, 33", "n = 500, 77; k = 40, 33"),
    },
    Case {
        file: BLOCK_NAMES,
        kernel: "dot_rows_odd",
        id: "block_size",
        want: 5,
        sizes: ("n = 3000, 77; k = 200, 33", "n = 500, 77; k = 40, 33"),
    },
    Case {
        file: BLOCK_NAMES,
        kernel: "row_sum_tree",
        id: "vector_loops",
        want: 2,
        sizes: (
            "rows = 2048, 37; cols = 1000, 333",
            "rows = 20, 37; cols = 300, 333",
        ),
    },
    Case {
        file: BLOCK_NAMES,
        kernel: "chunked_tile",
        id: "cooperative_rows",
        want: 0,
        sizes: (
            "rows = 1024, 45; cols = 640, 70",
            "rows = 300, 45; cols = 130, 70",
        ),
    },
    Case {
        file: "tests/gpu/drafts/l1_loss_mean.cu",
        kernel: "l1_loss_mean",
        id: "block_size",
        want: 4,
        sizes: ("n = 1 << 24, 99991", "n = 5000, 999"),
    },
    Case {
        file: "tests/gpu/drafts/embedding_gather.cu",
        kernel: "embedding_gather",
        id: "block_size",
        want: 4,
        sizes: (
            "T = 16384, 77; D = 1024, 99; V = 32000, 1001",
            "T = 50, 7; D = 40, 9; V = 100, 11",
        ),
    },
    // A row gather in (64, 4) blocks: every other 2-D shape, whole rows a block among
    // them ((128, 2), (256, 1)), over rows shorter and longer than a block.
    Case {
        file: "tests/gpu/drafts/gather_dim1.cu",
        kernel: "gather_dim1",
        id: "block_size",
        want: 8,
        sizes: (
            "M = 8192, 45; N = 2048, 301; K = 1024, 99",
            "M = 13, 5; N = 300, 31; K = 130, 300",
        ),
    },
];

/// `split_loop` over a grid of blocks along y, the last block of each column of blocks
/// combining their partials from global memory in block order: its four candidates
/// (16 and 32 blocks, 8 and 16 threads per output) on column reductions of every
/// accumulator type and fold, odd sizes (N = 301, M = 77 in the second case), code
/// after the loop; none on kernels with a loop after the combined one or two passes.
const GRID_SPLIT_CASES: &[Case] = &[
    Case {
        file: "examples/col_sum.cu",
        kernel: "col_sum",
        id: "split_loop",
        want: 4,
        sizes: (
            "rows = 16384, 1001; cols = 2048, 77",
            "rows = 300, 77; cols = 45, 301",
        ),
    },
    Case {
        file: "tests/gpu/drafts/layernorm_bwd_dgamma_dbeta.cu",
        kernel: "layernorm_bwd_dgamma_dbeta",
        id: "split_loop",
        want: 4,
        sizes: ("M = 16384, 333; N = 1024, 77", "M = 200, 77; N = 70, 301"),
    },
    Case {
        file: "examples/col_max.cu",
        kernel: "col_max",
        id: "split_loop",
        want: 4,
        sizes: (
            "batch = 8192, 513; feat = 4096, 100",
            "batch = 130, 77; feat = 37, 301",
        ),
    },
    Case {
        file: GRID_SPLIT,
        kernel: "col_norm",
        id: "split_loop",
        want: 4,
        sizes: (
            "rows = 4096, 77; cols = 1024, 301",
            "rows = 300, 77; cols = 40, 301",
        ),
    },
    Case {
        file: GRID_SPLIT,
        kernel: "col_count",
        id: "split_loop",
        want: 4,
        sizes: (
            "rows = 3000, 77; cols = 700, 301",
            "rows = 300, 77; cols = 70, 301",
        ),
    },
    Case {
        file: GRID_SPLIT,
        kernel: "col_dsum_min_prod",
        id: "split_loop",
        want: 4,
        sizes: ("M = 2048, 77; N = 512, 301", "M = 300, 77; N = 40, 301"),
    },
    Case {
        file: GRID_SPLIT,
        kernel: "col_first_total",
        id: "split_loop",
        want: 4,
        sizes: (
            "rows = 2048, 77; cols = 512, 301",
            "rows = 200, 77; cols = 70, 301",
        ),
    },
    Case {
        file: GRID_SPLIT,
        kernel: "col_share",
        id: "split_loop",
        want: 0,
        sizes: (
            "rows = 1024, 77; cols = 512, 301",
            "rows = 100, 77; cols = 40, 301",
        ),
    },
    Case {
        file: GRID_SPLIT,
        kernel: "col_var",
        id: "split_loop",
        want: 0,
        sizes: (
            "rows = 1024, 77; cols = 512, 301",
            "rows = 100, 77; cols = 40, 301",
        ),
    },
];

const GRID_SPLIT: &str = "tests/fixtures/rewrites/split/grid.cu";

#[test]
fn grid_split_candidates_compile_and_compute_what_the_original_computes() {
    let test = "grid_split_candidates_compile_and_compute_what_the_original_computes";
    let nvrtc = tools::nvrtc_available();
    let gxx = emulate::gxx();
    let tc = kernel_lsp::toolchain::locate(&Default::default());
    let tc = nvrtc.is_ok().then_some(&tc);
    let grid = |c: &Candidate| c.label.contains("partials combined by the last block");
    let (compiled, emulated) = GRID_SPLIT_CASES
        .iter()
        .map(|c| check_idiom_candidates(c, tc, gxx.is_ok(), &grid))
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    if let Ok(()) = gxx {
        grid_split_falls_back_to_one_block_past_the_scratch_arrays();
    }
    match (nvrtc, gxx) {
        (Err(why), _) | (_, Err(why)) => tools::skip(test, &why),
        _ => eprintln!("{compiled} grid split candidates compiled with NVRTC, {emulated} emulated"),
    }
}

/// Sizes whose partials would not fit the scratch arrays leave one block along y per
/// column of blocks: the others return at the top and the one left needs no combine.
/// Shown on the emulator by lowering the slot count the candidate checks against.
fn grid_split_falls_back_to_one_block_past_the_scratch_arrays() {
    let c = &GRID_SPLIT_CASES[0];
    let src = small(c);
    let out = apply(&src, c.kernel, c.id).unwrap_or_else(|e| panic!("{e:?}"));
    let limit = "<= (1 << 20)) ? gridDim.y : 1;";
    let cands: Vec<(String, String)> = out
        .iter()
        .filter(|c| c.label.contains("partials combined by the last block"))
        .map(|c| {
            assert!(c.text.contains(limit), "{}", c.text);
            let small = c.text.replace(limit, "<= (1 << 4)) ? gridDim.y : 1;");
            (format!("{} (scratch of 16)", c.label), small)
        })
        .collect();
    assert_eq!(cands.len(), 4);
    emulate::compare(&src, c.kernel, &cands, 2).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn named_block_width_candidates_compile_and_compute_what_the_original_computes() {
    let test = "named_block_width_candidates_compile_and_compute_what_the_original_computes";
    let nvrtc = tools::nvrtc_available();
    let gxx = emulate::gxx();
    let tc = kernel_lsp::toolchain::locate(&Default::default());
    let tc = nvrtc.is_ok().then_some(&tc);
    let (compiled, emulated) = BLOCK_NAME_CASES
        .iter()
        .map(|c| check_idiom_case(c, tc, gxx.is_ok()))
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    match (nvrtc, gxx) {
        (Err(why), _) | (_, Err(why)) => tools::skip(test, &why),
        _ => eprintln!("{compiled} candidates compiled with NVRTC, {emulated} emulated"),
    }
}

#[test]
fn every_cuda_idiom_candidate_compiles_and_computes_what_the_original_computes() {
    let test = "every_cuda_idiom_candidate_compiles_and_computes_what_the_original_computes";
    let nvrtc = tools::nvrtc_available();
    let gxx = emulate::gxx();
    let tc = kernel_lsp::toolchain::locate(&Default::default());
    let tc = nvrtc.is_ok().then_some(&tc);
    // The cases are independent (NVRTC in process, g++ and the emulator in their own
    // folders): one thread per core, each taking every `jobs`-th case.
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let (compiled, emulated) = std::thread::scope(|s| {
        let threads: Vec<_> = (0..jobs)
            .map(|j| {
                let emulate = gxx.is_ok();
                s.spawn(move || {
                    CASES
                        .iter()
                        .skip(j)
                        .step_by(jobs)
                        .map(|c| check_idiom_case(c, tc, emulate))
                        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    match (nvrtc, gxx) {
        (Err(why), _) | (_, Err(why)) => tools::skip(test, &why),
        _ => eprintln!("{compiled} idiom candidates compiled with NVRTC, {emulated} emulated"),
    }
}

pub(crate) fn triton_apply(
    src: &str,
    kernel: &str,
    id: &str,
    params: serde_json::Value,
) -> Vec<Candidate> {
    let doc = Document::new(Lang::Triton, 0, src);
    let tree = doc.tree().expect("fixture parses");
    let model = kernel_lsp::syntax::analyze(Lang::Triton, src, tree);
    let k = model.kernel(kernel).expect("fixture has the kernel");
    let params: BTreeMap<String, serde_json::Value> = match params {
        serde_json::Value::Object(m) => m.into_iter().collect(),
        _ => BTreeMap::new(),
    };
    rewrite::apply(
        id,
        &RewriteContext {
            lang: Lang::Triton,
            text: src,
            tree,
            model: &model,
            kernel: k,
            params: &params,
        },
    )
    .unwrap_or_else(|e| panic!("{id} on {kernel}: {e}"))
}

pub(crate) fn triton_version(
    label: &str,
    text: &str,
    kernel: &str,
) -> kernel_lsp::worker::protocol::Version {
    let doc = Document::new(Lang::Triton, 0, text);
    let file = analysis::analyze(Lang::Triton, text, doc.tree(), &AnalyzeOptions::default());
    let idx = file
        .model
        .kernels
        .iter()
        .position(|k| k.name == kernel)
        .expect("the kernel");
    let plan = file.specs[idx]
        .plan
        .clone()
        .unwrap_or_else(|| panic!("{label} does not plan: {:?}", file.specs[idx].diagnostics));
    kernel_lsp::worker::protocol::Version {
        torch: None,
        label: label.to_string(),
        lang: Lang::Triton,
        source: file.kernel_source(kernel, text),
        plan,
        options: Vec::new(),
        cuda: None,
    }
}

/// Every Triton idiom candidate (grouped program order, configuration sweeps) verifies
/// against the original through a real worker on Triton's CPU interpreter, on two
/// kernels of different styles each; a candidate that skips a tile must fail.
#[tokio::test]
async fn triton_idiom_candidates_verify_on_the_interpreter() {
    let test = "triton_idiom_candidates_verify_on_the_interpreter";
    let py = match crate::bench_triton::python() {
        Ok(p) => p,
        Err(why) => return tools::skip(test, &why),
    };
    let read = |f: &str| std::fs::read_to_string(root().join(f)).unwrap();
    let shrink = |text: String, from: &str, to: &str| {
        let out = text.replace(from, to);
        assert_ne!(out, text, "the sizes line `{from}` moved; update this test");
        out
    };
    let matmul = shrink(
        read("examples/matmul.py"),
        "M = 4096, 100; N = 4096, 72; K = 4096, 40",
        "M = 100, 37; N = 72, 150; K = 40, 70",
    );
    let grid2d = shrink(
        shrink(
            read("tests/fixtures/rewrites/triton/grid2d.py"),
            "R = 300, 70; C = 200, 33",
            "R = 70, 33; C = 90, 5",
        ),
        "Bt = 4, 3; M = 256, 40; N = 192, 72; K = 128, 24",
        "Bt = 2, 3; M = 40, 72; N = 72, 40; K = 24, 40",
    );
    let autotuned = shrink(
        shrink(
            read("tests/fixtures/rewrites/triton/autotuned.py"),
            "n = 1 << 20, 1000",
            "n = 3000, 1000",
        ),
        "R = 512, 37; C = 300, 129",
        "R = 20, 37; C = 300, 129",
    );
    let mut jobs: Vec<(String, &str, Candidate)> = Vec::new();
    for (src, kernel, id, params, want) in [
        (
            &autotuned,
            "axpby",
            "triton_autotune",
            serde_json::json!({}),
            2,
        ),
        (
            &autotuned,
            "row_sum",
            "triton_autotune",
            serde_json::json!({}),
            1,
        ),
        (
            &matmul,
            "matmul_kernel",
            "triton_swizzle",
            serde_json::json!({}),
            2,
        ),
        (
            &grid2d,
            "add_bias_2d",
            "triton_swizzle",
            serde_json::json!({}),
            2,
        ),
        // A batch on program axis 2, kept while each batch's tiles are grouped.
        (
            &grid2d,
            "bmm_tiles",
            "triton_swizzle",
            serde_json::json!({}),
            2,
        ),
        (
            &matmul,
            "matmul_kernel",
            "triton_configs",
            serde_json::json!({"max_candidates": 4}),
            4,
        ),
        // `x` is read once (rows by program 0, columns by program 1); `b` is shared. Two
        // candidates each: `evict_first` and `evict_last`.
        (
            &grid2d,
            "add_bias_2d",
            "stream_loads",
            serde_json::json!({}),
            2,
        ),
        (
            &autotuned,
            "row_sum",
            "stream_loads",
            serde_json::json!({}),
            2,
        ),
        (
            &grid2d,
            "add_bias_2d",
            "triton_configs",
            serde_json::json!({"max_candidates": 4}),
            4,
        ),
    ] {
        let out = triton_apply(src, kernel, id, params);
        assert_eq!(out.len(), want, "{id} on {kernel}");
        jobs.extend(out.into_iter().map(|c| (src.clone(), kernel, c)));
    }
    // Control: a grouped order that drops the last group's remainder must fail.
    let (_, _, good) = jobs
        .iter()
        .find(|(_, k, c)| *k == "matmul_kernel" && c.label.contains("GROUP=8"))
        .expect("a GROUP=8 candidate");
    let wrong = good.text.replace("min(num_pid_0 - first_pid_0, 8)", "8");
    assert_ne!(wrong, good.text);
    jobs.push((
        matmul.clone(),
        "matmul_kernel",
        Candidate {
            label: "control: groups of 8 past the last row of tiles".into(),
            text: wrong,
        },
    ));
    verify_on_interpreter(&py, &jobs, 11).await;
}

/// Verifies each (original, kernel, candidate) against its original through one worker
/// on Triton's CPU interpreter; a candidate labelled `control...` must fail, every other
/// must pass.
pub(crate) async fn verify_on_interpreter(py: &str, jobs: &[(String, &str, Candidate)], seed: u64) {
    use kernel_lsp::worker::pool::{PoolConfig, WorkerPool};
    use kernel_lsp::worker::protocol::{Op, OpResult};
    let bin = env!("CARGO_BIN_EXE_kernel-lsp");
    // The candidates are independent: one worker per core (at most 4, each a Python with
    // torch), the requests queued on the pool, the replies checked in order.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pool = WorkerPool::new(PoolConfig {
        command: vec![
            "env".into(),
            format!("KERNEL_LSP_PYTHON={py}"),
            "TRITON_INTERPRET=1".into(),
            bin.into(),
            "worker".into(),
        ],
        size: cores.min(4).min(jobs.len()).max(1),
        ..PoolConfig::default()
    });
    let replies = futures::future::join_all(jobs.iter().map(|(original, kernel, c)| {
        let op = Op::Verify {
            candidate: Box::new(triton_version(&c.label, &c.text, kernel)),
            reference: Box::new(triton_version("original", original, kernel)),
            seed,
            sanitize: false,
            cases: None,
            tally: false,
        };
        pool.request(op, None)
    }))
    .await;
    for ((_, kernel, c), reply) in jobs.iter().zip(replies) {
        let control = c.label.starts_with("control");
        match reply {
            Ok(OpResult::Verify(r)) if control => {
                assert!(!r.passed, "{kernel}: the control `{}` passed", c.label)
            }
            Ok(OpResult::Verify(r)) => assert!(
                r.passed,
                "{kernel} {} failed verification: {:?}\n{}",
                c.label,
                r.failure.map(|f| f.message),
                c.text
            ),
            Ok(other) => panic!("{}: unexpected reply {other:?}", c.label),
            Err(e) => panic!("{}: worker error: {}", c.label, e.message),
        }
    }
    pool.shutdown().await;
}

/// Every embedded rewrite on every kernel of the examples and fixtures, and on damaged
/// copies of them (a line dropped, the text cut short, braces and parentheses nested
/// thousands deep): an answer or a refusal, never a panic or a hang.
#[test]
fn every_rewrite_on_damaged_kernels_answers_or_refuses() {
    let mut files = Vec::new();
    for dir in [
        "examples",
        "tests/fixtures/rewrites/rows",
        "tests/fixtures/rewrites/atomics",
        "tests/fixtures/rewrites/tiles",
        "tests/fixtures/rewrites/triton",
        "tests/fixtures/rewrites/cuda",
        "tests/fixtures/rewrites/geometry",
        "tests/fixtures/rewrites/lanes",
        "tests/fixtures/rewrites/vec_rows",
        "tests/fixtures/rewrites/vec_groups",
    ] {
        let mut paths: Vec<_> = std::fs::read_dir(root().join(dir))
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "cu" || x == "py"))
            .collect();
        paths.sort();
        files.extend(paths);
    }
    let mut runs = 0;
    for path in files {
        let lang = if path.extension().is_some_and(|x| x == "py") {
            Lang::Triton
        } else {
            Lang::Cuda
        };
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut variants = vec![text.clone()];
        for drop in (0..lines.len()).step_by(9) {
            let mut l = lines.clone();
            l.remove(drop);
            variants.push(l.join("\n"));
        }
        for cut in [text.len() / 3, text.len() / 2, text.len() * 9 / 10] {
            let cut = (0..=cut)
                .rev()
                .find(|c| text.is_char_boundary(*c))
                .unwrap_or(0);
            variants.push(text[..cut].to_string());
        }
        let deep = format!("{}{}{}", "(".repeat(3000), "row < rows", ")".repeat(3000));
        variants.push(text.replace("row < rows", &deep));
        variants.push(text.replace("{\n", &"{".repeat(2000)));
        for v in &variants {
            let doc = Document::new(lang, 0, v);
            let Some(tree) = doc.tree() else { continue };
            let model = kernel_lsp::syntax::analyze(lang, v, tree);
            let params = BTreeMap::new();
            for k in &model.kernels {
                for id in rewrite::ids() {
                    let _ = rewrite::apply(
                        id,
                        &RewriteContext {
                            lang,
                            text: v,
                            tree,
                            model: &model,
                            kernel: k,
                            params: &params,
                        },
                    );
                    runs += 1;
                }
            }
        }
    }
    assert!(runs > 2000, "only {runs} rewrite runs");
}

const DELIN: &str = "tests/fixtures/rewrites/delin/flat_splits.cu";

/// `delinearize`'s fixtures: flat indices split by one divisor, in several styles, and a
/// 3-D split taken once its product is split.
const DELIN_CASES: &[Case] = &[
    Case {
        file: "tests/gpu/drafts/embedding_gather.cu",
        kernel: "embedding_gather",
        id: "delinearize",
        want: 5,
        sizes: (
            "T = 16384, 77; D = 1024, 99; V = 32000, 1001",
            "T = 9, 77; D = 40, 99; V = 50, 1001",
        ),
    },
    Case {
        file: DELIN,
        kernel: "bias_add",
        id: "delinearize",
        want: 5,
        sizes: ("R = 300, 77; C = 512, 99", "R = 5, 77; C = 40, 99"),
    },
    Case {
        file: DELIN,
        kernel: "scale_shift",
        id: "delinearize",
        want: 5,
        sizes: (
            "rows = 1000, 77; cols = 768, 99",
            "rows = 7, 77; cols = 50, 99",
        ),
    },
    Case {
        file: DELIN,
        kernel: "tall_rows",
        id: "delinearize",
        want: 3,
        sizes: ("T = 300000, 5; D = 64, 33", "T = 262200, 5; D = 2, 33"),
    },
    Case {
        file: DELIN,
        kernel: "scatter_rows",
        id: "delinearize",
        want: 2,
        sizes: ("T = 4096, 77", "T = 13, 77"),
    },
    Case {
        file: DELIN,
        kernel: "gate_rows",
        id: "delinearize",
        want: 5,
        sizes: ("R = 500, 33", "R = 7, 33"),
    },
    // 4-D and 3-D splits with their sizes in locals and 64-bit indices: taken once the
    // locals read as their values and the products are split.
    Case {
        file: "tests/gpu/drafts/pixel_shuffle.cu",
        kernel: "pixel_shuffle",
        id: "delinearize",
        want: 5,
        sizes: (
            "N = 8, 3; C = 16, 5; H = 128, 17; W = 128, 23; R = 2, 3",
            "N = 2, 3; C = 3, 5; H = 5, 17; W = 20, 23; R = 2, 3",
        ),
    },
    Case {
        file: "tests/gpu/drafts/maxpool2x2.cu",
        kernel: "maxpool2x2",
        id: "delinearize",
        want: 3,
        sizes: (
            "NC = 128, 3; OH = 256, 39; OW = 256, 101",
            "NC = 3, 3; OH = 7, 39; OW = 30, 101",
        ),
    },
    Case {
        file: DELIN,
        kernel: "chw_bias",
        id: "delinearize",
        want: 3,
        sizes: (
            "C = 16, 3; H = 32, 7; W = 32, 9",
            "C = 2, 3; H = 5, 7; W = 6, 9",
        ),
    },
];

#[test]
fn delinearized_candidates_compile_and_compute_what_the_original_computes() {
    check_case_list(
        "delinearized_candidates_compile_and_compute_what_the_original_computes",
        DELIN_CASES,
        36,
    );
}

/// Every candidate of `cases` compiles with NVRTC and computes what the original does on
/// the emulator: `want` of each, or a skip naming the missing tool.
fn check_case_list(test: &str, cases: &[Case], want: usize) {
    let nvrtc = tools::nvrtc_available();
    let gxx = emulate::gxx();
    let tc = kernel_lsp::toolchain::locate(&Default::default());
    let tc = nvrtc.is_ok().then_some(&tc);
    let (compiled, emulated) = cases
        .iter()
        .map(|c| check_idiom_case(c, tc, gxx.is_ok()))
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    match (nvrtc, gxx) {
        (Err(why), _) | (_, Err(why)) => tools::skip(test, &why),
        _ => {
            assert_eq!((compiled, emulated), (want, want));
            eprintln!("{test}: {compiled} candidates compiled with NVRTC, {emulated} emulated");
        }
    }
}

/// `stage_rows`' passes: a block, a warp and a block through a row pointer keep what the
/// first pass read; rows longer than the slots run the rest as written (cols = 700 on
/// blocks of 128 is past 4 slots, 300 on a warp past 8).
const STAGE_CASES: &[Case] = &[
    Case {
        file: "tests/fixtures/rewrites/passes/passes.cu",
        kernel: "layernorm_block",
        id: "stage_rows",
        want: 4,
        sizes: (
            "rows = 64, 5; cols = 1000, 77",
            "rows = 3, 5; cols = 700, 77",
        ),
    },
    Case {
        file: "tests/fixtures/rewrites/passes/passes.cu",
        kernel: "rms_warp",
        id: "stage_rows",
        want: 4,
        sizes: (
            "rows = 40, 7; cols = 700, 33",
            "rows = 5, 7; cols = 300, 33",
        ),
    },
    Case {
        file: "tests/gpu/drafts/minmax_norm_rows.cu",
        kernel: "minmax_norm_rows",
        id: "stage_rows",
        want: 4,
        sizes: (
            "rows = 8192, 37; cols = 2048, 999",
            "rows = 3, 37; cols = 2048, 999",
        ),
    },
    // Three passes whose first reads the row inside a call (`fmaxf(m, xr[j])`).
    Case {
        file: "tests/gpu/drafts/softmax_block.cu",
        kernel: "softmax_block",
        id: "stage_rows",
        want: 4,
        sizes: (
            "rows = 8192, 1001; cols = 4096, 999",
            "rows = 3, 1001; cols = 1500, 999",
        ),
    },
    Case {
        file: "tests/fixtures/rewrites/cuda/norms.cu",
        kernel: "layer_norm",
        id: "stage_rows",
        want: 4,
        sizes: (
            "rows = 2048, 7; cols = 768, 64",
            "rows = 3, 7; cols = 700, 64",
        ),
    },
    Case {
        file: "tests/gpu/drafts/softmax_backward_rows.cu",
        kernel: "softmax_backward_rows",
        id: "stage_rows",
        want: 4,
        sizes: (
            "rows = 16384, 45; cols = 1024, 1003",
            "rows = 5, 45; cols = 300, 1003",
        ),
    },
];

#[test]
fn staged_passes_compile_and_compute_what_the_original_computes() {
    check_case_list(
        "staged_passes_compile_and_compute_what_the_original_computes",
        STAGE_CASES,
        24,
    );
}
