use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{not_applicable, show, triton};
use crate::syntax::Lang;

const LOOPS: &str = include_str!("../../../../../tests/fixtures/rewrites/triton/reduce_in_loop.py");
const COLUMNS: &str = include_str!("../../../../../tests/fixtures/rewrites/triton/columns.py");
const SEQ: &str = include_str!("../../../../../tests/fixtures/rewrites/triton/sequential.py");

fn hoisted(src: &str, k: &str) -> String {
    let out = triton(src, k, "triton_hoist_reduce", json!({})).unwrap();
    assert_eq!(out.len(), 1);
    show(Lang::Triton, src, &out[0], k)
}

#[test]
fn a_column_norm_over_2d_blocks_adds_squares_into_a_block_of_partials() {
    expect![[r#"
        # The norm of each column: 2-D pointer blocks of BM rows by BN columns, a sum of squares
        # over the rows of each block.
        # @bench M = 301, 40; N = 70, 9
        # @bench x: in f32[M, N]; out: out f32[N]
        # @bench grid = cdiv(N, BN); BM = 32; BN = 16
        # @bench M0_STAGES = 1; tune M0_STAGES in [1, 2, 3, 4]
        @triton.jit
        def col_norm_blocks(x, out, M, N, BM: tl.constexpr, BN: tl.constexpr, M0_STAGES: tl.constexpr):
            cols = tl.program_id(0) * BN + tl.arange(0, BN)
            acc = tl.zeros([BN], dtype=tl.float32)
            acc_part = tl.zeros((BM, BN), dtype=acc.dtype)
            for m0 in tl.range(0, M, BM, num_stages=M0_STAGES):
                rows = m0 + tl.arange(0, BM)
                ptrs = x + rows[:, None] * N + cols[None, :]
                block = tl.load(ptrs, mask=(rows[:, None] < M) & (cols[None, :] < N), other=0.0)
                acc_part += block * block
            acc += tl.sum(acc_part, axis=0)
            tl.store(out + cols, tl.sqrt(acc), mask=cols < N)"#]]
    .assert_eq(&hoisted(LOOPS, "col_norm_blocks"));
}

#[test]
fn a_while_loop_row_sum_from_a_literal_keeps_f32_partials() {
    expect![[r#"
        # A row sum too long for one tile, scalar total from a literal, while loop.
        # @bench R = 5, 2; C = 3001, 77
        # @bench x: in f32[R, C]; y: out f32[R]
        # @bench grid = R; BLOCK = 256
        @triton.jit
        def row_sum_while(x, y, C, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            total = 0.0
            c0 = 0
            total_part = tl.zeros((BLOCK,), dtype=tl.float32)
            while c0 < C:
                offs = c0 + tl.arange(0, BLOCK)
                total_part += tl.load(x + row * C + offs, mask=offs < C, other=0.0)
                c0 += BLOCK
            total += tl.sum(total_part)
            tl.store(y + row, total)"#]]
    .assert_eq(&hoisted(LOOPS, "row_sum_while"));
}

#[test]
fn a_row_maximum_over_axis_1_with_a_cast_starts_its_partials_at_minus_infinity() {
    expect![[r##"
        # The maximum of each row of a tile of rows: 2-D blocks, axis 1, with a cast.
        # @bench R = 37, 5; C = 500, 33
        # @bench x: in f16[R, C] ~ normal(0, 4); y: out f32[R]
        # @bench grid = cdiv(R, ROWS); ROWS = 8; COLS = 64
        # @bench C0_STAGES = 1; tune C0_STAGES in [1, 2, 3, 4]
        @triton.jit
        def row_max_tiles(x, y, R, C, ROWS: tl.constexpr, COLS: tl.constexpr, C0_STAGES: tl.constexpr):
            r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
            best = tl.full([ROWS], float("-inf"), tl.float32)
            best_part = tl.full((ROWS, COLS), float("-inf"), dtype=tl.float32)
            for c0 in tl.range(0, C, COLS, num_stages=C0_STAGES):
                c = c0 + tl.arange(0, COLS)
                t = tl.load(x + r[:, None] * C + c[None, :], mask=(r[:, None] < R) & (c[None, :] < C), other=float("-inf"))
                best_part = tl.maximum(best_part, t.to(tl.float32))
            best = tl.maximum(best, tl.max(best_part, axis=1))
            tl.store(y + r, best, mask=r < R)"##]].assert_eq(&hoisted(LOOPS, "row_max_tiles"));
}

#[test]
fn a_program_tiled_column_sum_is_hoisted() {
    // What `triton_program_tile` writes for a program per column: a scalar total
    // broadcast to the program's columns, a lane reduction every step.
    let tiled = triton(
        COLUMNS,
        "col_sum_by_program",
        "triton_program_tile",
        json!({"columns": [8]}),
    )
    .unwrap();
    let out = hoisted(&tiled[0].text, "col_sum_by_program");
    for line in [
        "    total_part = tl.zeros((BLOCK, 8), dtype=total.dtype)\n    for r0 in tl.range(0, M, BLOCK, num_stages=R0_STAGES):",
        "        total_part += tl.load((x + r * N)[:, None] + col[None, :], mask=((r < M)[:, None]) & in_grid[None, :], other=0.0)\n    total += tl.sum(total_part, axis=0)\n",
    ] {
        assert!(out.contains(line), "{out}");
    }
}

/// Two loops that each set `offs` and `v` afresh: the later one reads nothing the
/// earlier leaves in them, so the earlier one's sum is hoisted.
#[test]
fn names_a_later_loop_sets_before_reading_do_not_hold_a_loop_back() {
    let out = hoisted(LOOPS, "two_pass_stats");
    for line in [
        "    s_part = tl.zeros((BLOCK,), dtype=tl.float32)\n",
        "        s_part += v\n",
        "    s += tl.sum(s_part, axis=0)\n    mu = s / HW\n",
        "        ss += tl.sum((v - mu) * (v - mu), axis=0)\n",
    ] {
        assert!(out.contains(line), "{line}\n{out}");
    }
}

#[test]
fn reductions_used_otherwise_prefixes_lane_sums_unknown_shapes_and_integer_starts_are_refused() {
    let why = |src: &str, k: &str| not_applicable(triton(src, k, "triton_hoist_reduce", json!({})));
    expect!["`sum_of_block_sums_squared` has no reduction to move out of a loop: line 63: `acc` is not one reduction of a tile read only by its update"].assert_eq(&why(LOOPS, "sum_of_block_sums_squared"));
    expect!["`block_prefix` has no reduction to move out of a loop: line 77: it stores, branches or nests a loop"].assert_eq(&why(LOOPS, "block_prefix"));
    expect!["`col_sum` has no reduction to move out of a loop: line 15: it reduces nothing over the lanes"].assert_eq(&why(SEQ, "col_sum"));
    let transposed = LOOPS.replace(
        "tl.sum(block * block, axis=0)",
        "tl.sum(tl.trans(block * block), axis=1)",
    );
    expect!["`col_norm_blocks` has no reduction to move out of a loop: line 16: the shape of `tl.trans(block * block)` is not known"].assert_eq(&why(&transposed, "col_norm_blocks"));
    expect!["`sum_and_last_chunk` has no reduction to move out of a loop: line 113: `v` is set in the loop and read after it"].assert_eq(&why(LOOPS, "sum_and_last_chunk"));
    let int_start = LOOPS.replace("    total = 0.0\n", "    total = 0\n");
    expect!["`row_sum_while` has no reduction to move out of a loop: line 33: `total` starts from the integer `0`: the type of its partials is not known"].assert_eq(&why(&int_start, "row_sum_while"));
}

#[test]
fn shapes_broadcast_as_numpy_does_and_unknown_ones_stop_the_inference() {
    let s = |v: &[&str]| v.iter().map(|d| d.to_string()).collect::<Vec<_>>();
    assert_eq!(
        super::broadcast(&s(&["BM", "1"]), &s(&["1", "BN"])),
        Some(s(&["BM", "BN"]))
    );
    assert_eq!(super::broadcast(&s(&[]), &s(&["B"])), Some(s(&["B"])));
    assert_eq!(
        super::broadcast(&s(&["BM", "BN"]), &s(&["BN"])),
        Some(s(&["BM", "BN"]))
    );
    assert_eq!(super::broadcast(&s(&["BM"]), &s(&["BN"])), None);
}

#[test]
fn an_author_s_own_num_stages_is_kept_and_no_stages_knob_is_added() {
    let src = LOOPS.replace("tl.range(0, C, COLS)", "tl.range(0, C, COLS, num_stages=2)");
    let out = hoisted(&src, "row_max_tiles");
    assert!(
        out.contains("for c0 in tl.range(0, C, COLS, num_stages=2):"),
        "{out}"
    );
    assert!(!out.contains("STAGES"), "{out}");
}
