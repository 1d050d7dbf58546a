use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{assert_has, labels, not_applicable, show, triton};
use crate::syntax::Lang;

const PASSES: &str = include_str!("../../../../../tests/fixtures/rewrites/triton/passes.py");
const MATMUL: &str = include_str!("../../../../../examples/matmul.py");
const VECTOR_ADD: &str = include_str!("../../../../../examples/vector_add.py");

#[test]
fn three_passes_over_a_row_become_one_tile_loaded_once_per_distinct_load() {
    let out = triton(PASSES, "softmax3", "triton_row_tile", json!({})).unwrap();
    assert_eq!(
        labels(&out),
        [
            "one tile per row: BLOCK = next_pow2(cols), num_warps = 4",
            "one tile per row: BLOCK = next_pow2(cols), num_warps = 8"
        ]
    );
    expect![[r##"
        # Three passes: the maximum, the sum of exponentials, the write.
        # @bench rows = 37, 5; cols = 300, 1000
        # @bench x_ptr: in f32[rows, cols]; y_ptr: out f32[rows, cols]
        # @bench grid = rows; BLOCK = next_pow2(cols)
        # @bench num_warps = 8
        @triton.jit
        def softmax3(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            base = x_ptr + row * cols
            m = -float("inf")
            off = 0
            c = off + tl.arange(0, BLOCK)
            x = tl.load(base + c, mask=c < cols, other=-float("inf"))
            m = tl.maximum(m, tl.max(x, axis=0))
            s = 0.0
            s += tl.sum(tl.exp(x - m), axis=0)
            x = tl.load(base + c, mask=c < cols)
            tl.store(y_ptr + row * cols + c, tl.exp(x - m) / s, mask=c < cols)"##]]
    .assert_eq(&show(Lang::Triton, PASSES, &out[1], "softmax3"));
}

#[test]
fn while_loops_under_other_names_share_one_index_and_one_load() {
    let out = triton(
        PASSES,
        "logsumexp_while",
        "triton_row_tile",
        json!({"num_warps": [2]}),
    )
    .unwrap();
    expect![[r##"
        # Logsumexp per row with while loops, other names, exp2 and the difference in a local.
        # @bench R = 21, 3; N = 777, 64
        # @bench inp: in f32[R, N] ~ normal(0, 4); out: out f32[R]
        # @bench grid = R; BN = next_pow2(N); num_warps = 2
        @triton.jit
        def logsumexp_while(inp, out, N, BN: tl.constexpr):
            pid = tl.program_id(axis=0)
            mx = float("-inf")
            j = 0
            idx = j + tl.arange(0, BN)
            v = tl.load(inp + pid * N + idx, idx < N, float("-inf"))
            mx = tl.maximum(tl.max(v, 0), mx)
            total = 0.0
            k = 0
            d = v - mx
            total = total + tl.sum(tl.exp2(d * 1.4426950408889634), 0)
            tl.store(out + pid, mx + tl.log2(total) / 1.4426950408889634)"##]]
    .assert_eq(&show(Lang::Triton, PASSES, &out[0], "logsumexp_while"));
}

#[test]
fn a_2d_tile_of_rows_takes_its_columns_whole() {
    let out = triton(PASSES, "xent_rows", "triton_row_tile", json!({})).unwrap();
    let shown = show(Lang::Triton, PASSES, &out[0], "xent_rows");
    assert!(shown.contains("COLS = next_pow2(V)"), "{shown}");
    assert!(!shown.contains("for "), "{shown}");
    assert_eq!(
        shown.matches("cols = c0 + tl.arange(0, COLS)").count(),
        1,
        "{shown}"
    );
}

#[test]
fn tiles_that_are_not_rows_or_rows_too_long_are_refused() {
    let why = |src: &str, k: &str| not_applicable(triton(src, k, "triton_row_tile", json!({})));
    expect!["`row_sum_long` cannot take a row as one tile: case 0: a row of 40000 elements needs a tile of 65536, over 16384; its loop keeps no budgeted tile: its tile is 1-D: no lanes beside `BLOCK` to narrow"].assert_eq(&why(PASSES, "row_sum_long"));
    expect!["`matmul_kernel` cannot take a row as one tile: a loop calls `tl.dot`: its block is a matmul tile, not a row"].assert_eq(&why(MATMUL, "matmul_kernel"));
    expect!["`add_kernel` cannot take a row as one tile: no loop steps by a `tl.constexpr` block"]
        .assert_eq(&why(VECTOR_ADD, "add_kernel"));
}

#[test]
fn a_layer_norm_in_three_passes_loads_its_row_once_and_copies_it_under_other_names() {
    const LAYERNORM: &str = include_str!("../../../../../examples/layernorm_3pass.py");
    let out = triton(
        LAYERNORM,
        "layernorm_3pass",
        "triton_row_tile",
        json!({"num_warps": [8]}),
    )
    .unwrap();
    expect![[r#"
        # @bench rows = 8192, 31; N = 4096, 1111
        # @bench X: in f32[rows, N]; W: in f32[N]; Bias: in f32[N]; Y: out f32[rows, N]
        # @bench eps = 1e-5
        # @bench grid = rows; BLOCK_SIZE = next_pow2(N); num_warps = 8
        # @bench atol = 1e-4; rtol = 1e-4
        # @bench reference = torch: F.layer_norm(X, (N,), W, Bias, 1e-5)
        @triton.jit
        def layernorm_3pass(X, W, Bias, Y, N, eps, BLOCK_SIZE: tl.constexpr):
            row = tl.program_id(0)
            X += row * N
            Y += row * N
            _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
            off = 0
            cols = off + tl.arange(0, BLOCK_SIZE)
            a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
            _mean += a
            mean = tl.sum(_mean, axis=0) / N
            _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
            x = a
            x = tl.where(cols < N, x - mean, 0.)
            _var += x * x
            var = tl.sum(_var, axis=0) / N
            rstd = 1 / tl.sqrt(var + eps)
            mask = cols < N
            w = tl.load(W + cols, mask=mask)
            b = tl.load(Bias + cols, mask=mask)
            x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
            tl.store(Y + cols, (x - mean) * rstd * w + b, mask=mask)"#]]
    .assert_eq(&show(Lang::Triton, LAYERNORM, &out[0], "layernorm_3pass"));
}

const COL_SUMS: &str = include_str!("../../../../../tests/gpu/drafts/col_sum_tiles.py");

#[test]
fn a_2d_tile_counts_its_other_dimension_against_the_limit() {
    // Column sums walking 8192 rows BLOCK_M at a time in tiles BLOCK_N = 64 wide: all the
    // rows in one tile would be 8192 x 64 elements, so the loop stays (budgeted below).
    let out = triton(COL_SUMS, "col_sum_tiles", "triton_row_tile", json!({})).unwrap();
    assert!(
        !labels(&out)[0].starts_with("one tile per row"),
        "{:?}",
        labels(&out)
    );
    // 200 rows: 256 x 64 elements fit.
    let short = COL_SUMS.replace("M = 8192, 77", "M = 200, 77");
    assert_ne!(short, COL_SUMS);
    let out = triton(&short, "col_sum_tiles", "triton_row_tile", json!({})).unwrap();
    assert!(labels(&out)[0].starts_with("one tile per row: BLOCK_M = next_pow2(M)"));
}

const LOGSUMEXP_DIM0: &str = include_str!("../../../../../tests/gpu/drafts/logsumexp_dim0.py");
const TILED: &str = include_str!("../../../../../tests/fixtures/rewrites/triton/tiled_columns.py");

#[test]
fn column_sums_too_long_for_one_tile_keep_their_loop_with_the_budgeted_tile() {
    // 32 programs of 64 columns: the columns narrow to 16 (128 programs), each step
    // loads 512 rows of them (8192 elements) on 8 warps, and the loop is pipelined.
    let out = triton(COL_SUMS, "col_sum_tiles", "triton_row_tile", json!({})).unwrap();
    expect![[r#"
        [
            "the loop at line 17 keeps a budgeted tile: BLOCK_M = 512 rows of 8192 a step, BLOCK_N = 16, 8 warps (128 programs)",
        ]
    "#]].assert_debug_eq(&labels(&out));
    expect![[r#"
        # @bench M = 8192, 77; N = 2048, 301
        # @bench x: in f32[M, N]; out: out f32[N]
        # @bench grid = cdiv(N, BLOCK_N); BLOCK_M = 512; BLOCK_N = 16
        # @bench atol = 1e-3; rtol = 1e-4
        # @bench reference = torch: x.sum(dim=0)
        # @bench BLOCK_M_STAGES = 3; num_warps = 8; tune BLOCK_M_STAGES in [1, 2, 3, 4]
        @triton.jit
        def col_sum_tiles(x, out, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M_STAGES: tl.constexpr):
            cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
            acc = tl.zeros([BLOCK_N], dtype=tl.float32)
            for r0 in tl.range(0, M, BLOCK_M, num_stages=BLOCK_M_STAGES):
                rows = r0 + tl.arange(0, BLOCK_M)
                tile = tl.load(x + rows[:, None] * N + cols[None, :],
                               mask=(rows[:, None] < M) & (cols[None, :] < N), other=0.0)
                acc += tl.sum(tile, axis=0)
            tl.store(out + cols, acc, mask=cols < N)"#]].assert_eq(&show(Lang::Triton, COL_SUMS, &out[0], "col_sum_tiles"));
}

#[test]
fn an_online_column_logsumexp_keeps_its_rescale_and_takes_the_budget() {
    let out = triton(
        LOGSUMEXP_DIM0,
        "logsumexp_dim0",
        "triton_row_tile",
        json!({}),
    )
    .unwrap();
    expect![[r#"
        [
            "the loop at line 19 keeps a budgeted tile: BLOCK_M = 512 rows of 8192 a step, BLOCK_N = 16, 8 warps (128 programs)",
        ]
    "#]].assert_debug_eq(&labels(&out));
    let shown = show(Lang::Triton, LOGSUMEXP_DIM0, &out[0], "logsumexp_dim0");
    assert_has(
        &shown,
        &[
            "BLOCK_M = 512; BLOCK_N = 16",
            "for r0 in tl.range(0, M, BLOCK_M, num_stages=BLOCK_M_STAGES):",
            "s = s * tl.exp(m - new_m) + tl.sum(tl.exp(tile - new_m[None, :]), axis=0)",
            "BLOCK_M_STAGES: tl.constexpr):",
        ],
    );
}

#[test]
fn while_loops_own_stages_and_two_passes_are_budgeted_alike() {
    let one = |k: &str| {
        let out = triton(TILED, k, "triton_row_tile", json!({})).unwrap();
        assert_eq!(out.len(), 1, "{k}");
        (out[0].label.clone(), show(Lang::Triton, TILED, &out[0], k))
    };
    // A while loop is not pipelined: more warps hold the same loads in flight.
    let (label, shown) = one("col_max_while");
    expect!["the loop at line 21 keeps a budgeted tile: BM = 256 rows of 16384 a step, BN = 32, 32 warps (128 programs)"].assert_eq(&label);
    assert!(
        shown.contains("while r < M:") && !shown.contains("STAGES"),
        "{shown}"
    );
    // A tl.range that names its stages keeps them; no knob.
    let (label, shown) = one("col_meansq_f16");
    expect!["the loop at line 40 keeps a budgeted tile: BLOCK_M = 1024 rows of 8192 a step, BLOCK_N = 8, 8 warps (128 programs)"].assert_eq(&label);
    assert!(
        shown.contains("tl.range(0, M, BLOCK_M, num_stages=2)") && !shown.contains("STAGES"),
        "{shown}"
    );
    // Both passes over the rows share the budget and one stages knob.
    let (label, shown) = one("col_normalize_2pass");
    expect!["the loop at line 58 keeps a budgeted tile: BLOCK_M = 512 rows of 8192 a step, BLOCK_N = 16, 8 warps (128 programs)"].assert_eq(&label);
    assert_eq!(
        shown
            .matches("tl.range(0, M, BLOCK_M, num_stages=BLOCK_M_STAGES)")
            .count(),
        2,
        "{shown}"
    );
    // Chunk indices and a module-constant column block, normalized first: the knob goes
    // before the parameter that now has a default (Python allows none after it).
    let (label, shown) = one("col_min_chunks");
    expect!["the loop at line 86 keeps a budgeted tile: BLOCK_R = 256 rows of 8192 a step, BLOCK_C = 32, 8 warps (128 programs)"].assert_eq(&label);
    assert_has(
        &shown,
        &[
            "def col_min_chunks(x, out, M, N, BLOCK_R: tl.constexpr, BLOCK_R_STAGES: tl.constexpr, BLOCK_C: tl.constexpr = 64):",
            "for i in tl.range(0, M, BLOCK_R, num_stages=BLOCK_R_STAGES):",
        ],
    );
}

#[test]
fn a_second_grid_axis_tuned_lanes_or_a_tile_at_the_budget_are_refused() {
    let why = |k: &str| not_applicable(triton(TILED, k, "triton_row_tile", json!({})));
    expect!["`col_sum_batched` cannot take a row as one tile: case 0: a row of 8192 elements in a tile 64 wide (BN) needs 524288 elements, over 16384; its loop keeps no budgeted tile: the grid is not `cdiv(n, BN)` on one axis, `BN` a power of two the spec sets and does not tune"].assert_eq(&why("col_sum_batched"));
    expect!["`col_sum_tuned` cannot take a row as one tile: case 0: a row of 8192 elements in a tile 64 wide (BN) needs 524288 elements, over 16384; its loop keeps no budgeted tile: the grid is not `cdiv(n, BN)` on one axis, `BN` a power of two the spec sets and does not tune"].assert_eq(&why("col_sum_tuned"));
    expect!["`col_sum_budgeted` cannot take a row as one tile: case 0: a row of 8192 elements in a tile 16 wide (BN) needs 131072 elements, over 16384; its loop keeps no budgeted tile: its tile (BM = 512, BN = 16, 8 warps) is already the budget's"].assert_eq(&why("col_sum_budgeted"));
}

#[test]
fn the_other_tile_dimensions_are_the_broadcast_aranges() {
    let unit = "    cols = pid * BN + tl.arange(0, BN)\n    rows = r0 + tl.arange(0, BM)\n    t = tl.load(x + rows[:, None] * n + cols[None, :])\n    k = tl.arange(0, BK)\n    v = tl.load(y + k)\n";
    assert_eq!(super::tile_dims(unit, "BM"), ["BN"]);
    assert!(super::tile_dims(unit, "BN").contains(&"BM".to_string()));
    assert!(super::tile_dims("    offs = tl.arange(0, BLOCK)\n", "BLOCK").is_empty());
}
