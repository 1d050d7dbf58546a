use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{labels, not_applicable, show, triton};
use crate::syntax::Lang;

const COLS: &str = include_str!("../../../../../tests/fixtures/rewrites/triton/columns.py");
const VECTOR_ADD: &str = include_str!("../../../../../examples/vector_add.py");
const MATMUL: &str = include_str!("../../../../../examples/matmul.py");

fn tile(k: &str, params: serde_json::Value) -> Vec<super::super::Candidate> {
    triton(COLS, k, "triton_program_tile", params).unwrap()
}

#[test]
fn a_column_sum_by_program_takes_columns_as_a_second_tile_dimension() {
    let out = tile("col_sum_by_program", json!({}));
    assert_eq!(
        labels(&out),
        [
            "8 programs' columns per program (2-D tile)",
            "32 programs' columns per program (2-D tile)"
        ]
    );
    expect![[r#"
        # A column sum: a program per column, BLOCK rows at a time, a scalar total.
        # @bench M = 300, 77; N = 90, 33
        # @bench x: in f32[M, N]; out: out f32[N]
        # @bench grid = cdiv(N, 8); BLOCK = 64
        @triton.jit
        def col_sum_by_program(x, out, M, N, BLOCK: tl.constexpr):
            in_grid = (tl.program_id(0) * 8 + tl.arange(0, 8)) < N
            col = (tl.program_id(0) * 8 + tl.arange(0, 8))
            total = 0.0 + tl.zeros([8], dtype=tl.int32)
            for r0 in range(0, M, BLOCK):
                r = r0 + tl.arange(0, BLOCK)
                total += tl.sum(tl.load((x + r * N)[:, None] + col[None, :], mask=((r < M)[:, None]) & in_grid[None, :], other=0.0), axis=0)
            tl.store(out + col, total, mask=in_grid)"#]]
    .assert_eq(&show(Lang::Triton, COLS, &out[0], "col_sum_by_program"));
}

#[test]
fn a_column_softmax_keeps_one_maximum_and_sum_per_column() {
    let out = tile("col_softmax", json!({"columns": [16]}));
    expect![[r##"
        # A softmax down each column held in one tile, with keyword axes and a local exponential.
        # @bench M = 100, 7; N = 50, 3
        # @bench x: in f32[M, N]; y: out f32[M, N]
        # @bench grid = cdiv(N, 16); BM = 128
        @triton.jit
        def col_softmax(x, y, M, N, BM: tl.constexpr):
            in_grid = (tl.program_id(axis=0) * 16 + tl.arange(0, 16)) < N
            j = (tl.program_id(axis=0) * 16 + tl.arange(0, 16))
            i = tl.arange(0, BM)
            v = tl.load((x + i * N)[:, None] + j[None, :], mask=((i < M)[:, None]) & in_grid[None, :], other=-float("inf"))
            e = tl.exp(v - tl.max(v, axis=0)[None, :])
            tl.store((y + i * N)[:, None] + j[None, :], e / tl.sum(e, axis=0)[None, :], mask=((i < M)[:, None]) & in_grid[None, :])"##]]
    .assert_eq(&show(Lang::Triton, COLS, &out[0], "col_softmax"));
}

#[test]
fn a_while_loop_with_positional_masks_and_a_bias_per_column() {
    let out = tile("bias_relu_cols", json!({"columns": [4]}));
    expect![[r#"
        # Bias and ReLU with the column's bias read once, while loop over the rows, positional
        # masks.
        # @bench M = 200, 30; N = 40, 9
        # @bench x: in f32[M, N]; b: in f32[N]; y: out f32[M, N]
        # @bench grid = cdiv(N, 4); BM = 32
        @triton.jit
        def bias_relu_cols(x, b, y, M, N, BM: tl.constexpr):
            in_grid = (tl.program_id(0) * 4 + tl.arange(0, 4)) < N
            c = (tl.program_id(0) * 4 + tl.arange(0, 4))
            bias = tl.load(b + c, mask=in_grid)
            i0 = 0
            while i0 < M:
                i = i0 + tl.arange(0, BM)
                v = tl.load((x + i * N)[:, None] + c[None, :], ((i < M)[:, None]) & in_grid[None, :])
                tl.store((y + i * N)[:, None] + c[None, :], tl.maximum(v + bias[None, :], 0.0), ((i < M)[:, None]) & in_grid[None, :])
                i0 += BM"#]]
    .assert_eq(&show(Lang::Triton, COLS, &out[0], "bias_relu_cols"));
}

#[test]
fn a_lane_accumulator_becomes_a_tile_of_lanes_by_columns() {
    let out = tile("col_sum_lanes", json!({"columns": [8]}));
    let shown = show(Lang::Triton, COLS, &out[0], "col_sum_lanes");
    assert!(
        shown.contains("acc = (tl.zeros([BLOCK], dtype=tl.float32))[:, None] + tl.zeros([1, 8], dtype=tl.int32)\n"),
        "{shown}"
    );
    assert!(
        shown.contains("tl.store(out + col, tl.sum(acc, axis=0), mask=in_grid)"),
        "{shown}"
    );
}

#[test]
fn branches_coalesced_kernels_and_2d_grids_are_refused() {
    let why = |src: &str, k: &str| not_applicable(triton(src, k, "triton_program_tile", json!({})));
    expect!["`col_sum_branch` cannot take a tile of programs: it uses `if M > 16:`"]
        .assert_eq(&why(COLS, "col_sum_branch"));
    expect!["`add_kernel` cannot take a tile of programs: no global access is strided across the lanes (or one is already unit-stride), and its programs are not many short tiles"].assert_eq(&why(VECTOR_ADD, "add_kernel"));
    expect!["`matmul_kernel` cannot take a tile of programs: no global access is strided across the lanes (or one is already unit-stride), and its programs are not many short tiles"].assert_eq(&why(MATMUL, "matmul_kernel"));
}

const SHORT: &str = include_str!("../../../../../tests/fixtures/rewrites/triton/short_rows.py");

#[test]
fn short_rows_on_a_2d_grid_pack_the_axis_whose_extent_the_kernel_receives() {
    let out = triton(SHORT, "mean_short_rows", "triton_program_tile", json!({})).unwrap();
    expect![[r#"
        # A mean over the short last dim of a 3-D tensor: programs over (batch, position).
        # @bench B = 4, 3; S = 4096, 77; D = 64, 50
        # @bench x: in f32[B, S, D]; out: out f32[B, S]
        # @bench grid = (B, cdiv(S, 8)); BLOCK_D = next_pow2(D)
        @triton.jit
        def mean_short_rows(x, out, S, D, BLOCK_D: tl.constexpr):
            in_grid = (tl.program_id(1) * 8 + tl.arange(0, 8)) < S
            b = tl.program_id(0)
            s = (tl.program_id(1) * 8 + tl.arange(0, 8))
            offs = tl.arange(0, BLOCK_D)
            v = tl.load((x + (b * S + s) * D)[None, :] + offs[:, None], mask=((offs < D)[:, None]) & in_grid[None, :], other=0.0)
            tl.store(out + b * S + s, tl.sum(v, axis=0) / D, mask=in_grid)"#]]
    .assert_eq(&show(Lang::Triton, SHORT, &out[0], "mean_short_rows"));
}

#[test]
fn a_short_stored_row_keeps_its_per_column_weight_as_lanes() {
    let out = triton(
        SHORT,
        "rms_short_rows",
        "triton_program_tile",
        json!({"columns": [16]}),
    )
    .unwrap();
    let shown = show(Lang::Triton, SHORT, &out[0], "rms_short_rows");
    assert!(
        shown.contains("# @bench grid = cdiv(R, 16); BLOCK = 128; eps = 1e-6"),
        "{shown}"
    );
    assert!(
        shown.contains("tl.store((y + row * D)[None, :] + cols[:, None], v * r[None, :] * g[:, None], mask=(m[:, None]) & in_grid[None, :])"),
        "{shown}"
    );
    // The weight is the same for every row: loaded once, unmasked by the grid.
    assert!(
        shown.contains("g = tl.load(w + cols, mask=m, other=0.0)"),
        "{shown}"
    );
}

#[test]
fn short_rows_with_a_loop_a_flat_grid_or_a_branch_are_refused() {
    let why = |k: &str| not_applicable(triton(SHORT, k, "triton_program_tile", json!({})));
    expect!["`sum_row_loop` cannot take a tile of programs: no global access is strided across the lanes (or one is already unit-stride), and its programs are not many short tiles"]
        .assert_eq(&why("sum_row_loop"));
    expect!["`mean_flat_rows` cannot take a tile of programs: no axis of `grid = B * S` is one kernel parameter"]
        .assert_eq(&why("mean_flat_rows"));
    expect!["`sum_rows_branch` cannot take a tile of programs: it uses `if D > 32:`"]
        .assert_eq(&why("sum_rows_branch"));
}
