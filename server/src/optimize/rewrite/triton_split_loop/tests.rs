use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{labels, not_applicable, show, triton};
use crate::syntax::Lang;

const SEQ: &str = include_str!("../../../../../tests/fixtures/rewrites/triton/sequential.py");
const PASSES: &str = include_str!("../../../../../tests/fixtures/rewrites/triton/passes.py");
const MATMUL: &str = include_str!("../../../../../examples/matmul.py");

fn split(k: &str, params: serde_json::Value) -> Vec<super::super::Candidate> {
    triton(SEQ, k, "triton_split_loop", params).unwrap()
}

#[test]
fn a_column_sum_walks_its_rows_eight_and_thirty_two_at_a_time() {
    let out = split("col_sum", json!({}));
    assert_eq!(
        labels(&out),
        [
            "the loop at line 15 takes 8 steps at a time (2-D tile)",
            "the loop at line 15 takes 32 steps at a time (2-D tile)",
            "the loop at line 15 takes 256 steps at a time, BLOCK = 8 (2-D tile, 32 programs)"
        ]
    );
    // 4 programs of 64 columns leave the GPU idle: the third candidate also narrows the
    // tile to 8 columns (32 programs) and takes 8 times the rows per step.
    let narrow = show(Lang::Triton, SEQ, &out[2], "col_sum");
    assert!(
        narrow.contains("# @bench grid = cdiv(N, BLOCK); BLOCK = 8"),
        "{narrow}"
    );
    assert!(narrow.contains("rs = r + tl.arange(0, 256)"), "{narrow}");
    expect![[r#"
        # A column sum: each program owns BLOCK columns and walks every row.
        # @bench M = 300, 77; N = 200, 33
        # @bench x: in f32[M, N]; out: out f32[N]
        # @bench grid = cdiv(N, BLOCK); BLOCK = 64
        @triton.jit
        def col_sum(x, out, M, N, BLOCK: tl.constexpr):
            cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            acc_part = tl.zeros((8, 1), dtype=acc.dtype) + tl.zeros_like(acc)[None, :]
            for r in range(0, M, 8):
                rs = r + tl.arange(0, 8)
                r_ok = rs[:, None] < M
                acc_part += tl.where(r_ok, tl.load(x + rs[:, None] * N + cols[None, :], mask=(cols[None, :] < N) & r_ok, other=0.0), 0)
            acc += tl.sum(acc_part, axis=0)
            tl.store(out + cols, acc, mask=cols < N)"#]]
    .assert_eq(&show(Lang::Triton, SEQ, &out[0], "col_sum"));
}

#[test]
fn a_matvec_with_positional_masks_an_unmasked_load_and_a_local_product() {
    let out = split("matvec_cols", json!({"rows": [16]}));
    expect![[r#"
        # A matrix-vector product: each program owns ROWS rows and walks the columns, reading
        # the vector's element unmasked, with the product in a local.
        # @bench M = 100, 9; K = 250, 31
        # @bench A: in f32[M, K]; v: in f32[K]; y: out f32[M]
        # @bench grid = cdiv(M, ROWS); ROWS = 32
        @triton.jit
        def matvec_cols(A, v, y, M, K, ROWS: tl.constexpr):
            rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
            live = rows < M
            total = tl.zeros((ROWS,), tl.float32)
            total_part = tl.zeros((16, 1), dtype=total.dtype) + tl.zeros_like(total)[None, :]
            for k in tl.range(0, K, 16):
                ks = k + tl.arange(0, 16)
                k_ok = ks[:, None] < K
                prod = tl.load(A + rows[None, :] * K + ks[:, None], (live[None, :]) & k_ok, 0.0) * tl.load(v + ks[:, None], mask=k_ok)
                total_part += tl.where(k_ok, prod, 0)
            total += tl.sum(total_part, axis=0)
            tl.store(y + rows, total, mask=live)"#]]
    .assert_eq(&show(Lang::Triton, SEQ, &out[0], "matvec_cols"));
}

#[test]
fn a_while_loop_maximum_from_a_header_row_keeps_its_start() {
    let out = split("col_max_while", json!({"rows": [4]}));
    expect![[r##"
        # A column maximum with a while loop starting past a header row.
        # @bench M = 130, 40; N = 96, 17
        # @bench x: in f32[M, N] ~ normal(0, 10); out: out f32[N]
        # @bench grid = cdiv(N, B); B = 32
        @triton.jit
        def col_max_while(x, out, M, N, B: tl.constexpr):
            c = tl.program_id(0) * B + tl.arange(0, B)
            best = tl.full([B], -float("inf"), tl.float32)
            i = 1
            best_part = tl.full((4, 1), float("-inf"), dtype=best.dtype) + tl.zeros_like(best)[None, :]
            while i < M:
                i_steps = i + tl.arange(0, 4)
                i_ok = i_steps[:, None] < M
                best_part = tl.maximum(best_part, tl.where(i_ok, tl.load(x + i_steps[:, None] * N + c[None, :], mask=(c[None, :] < N) & i_ok, other=-float("inf")), float("-inf")))
                i += 4
            best = tl.maximum(best, tl.max(best_part, axis=0))
            tl.store(out + c, best, mask=c < N)"##]]
    .assert_eq(&show(Lang::Triton, SEQ, &out[0], "col_max_while"));
}

#[test]
fn prefixes_unknown_identities_block_loops_and_2d_tiles_are_refused() {
    let why = |src: &str, k: &str| not_applicable(triton(src, k, "triton_split_loop", json!({})));
    expect!["`col_prefix` has no loop to split: line 59: it stores, branches, nests a loop or reduces over the lanes inside"].assert_eq(&why(SEQ, "col_prefix"));
    expect!["`col_sum_and_last` has no loop to split: line 86: `v` is set in the loop and read after it"].assert_eq(&why(SEQ, "col_sum_and_last"));
    expect!["`col_relu_max` has no loop to split: line 73: `top` is a maximum or minimum not started from an infinity"].assert_eq(&why(SEQ, "col_relu_max"));
    expect!["`row_sum_long` has no loop to split: line 134: it steps by `BLOCK`, not 1"]
        .assert_eq(&why(PASSES, "row_sum_long"));
    expect!["`matmul_kernel` has no loop to split: line 20: it steps by `BLOCK_K`, not 1"]
        .assert_eq(&why(MATMUL, "matmul_kernel"));
    let bad = triton(SEQ, "col_sum", "triton_split_loop", json!({"rows": [6]}));
    expect!["parameter `rows`: 6 is not a power of two"].assert_eq(&bad.unwrap_err().to_string());
}
