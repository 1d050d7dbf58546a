use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{labels, not_applicable, show, triton};
use crate::syntax::Lang;

const SEQ: &str = include_str!("../../../../../tests/fixtures/rewrites/triton/sequential.py");
const PASSES: &str = include_str!("../../../../../tests/fixtures/rewrites/triton/passes.py");
const MATMUL: &str = include_str!("../../../../../examples/matmul.py");
const COL_MIN: &str = include_str!("../../../../../examples/col_min.py");
const COL_SUMSQ: &str = include_str!("../../../../../examples/col_sumsq.py");
const ONLINE: &str = include_str!("../../../../../tests/fixtures/rewrites/triton/online_tiles.py");
const ROW_ABSMAX: &str = include_str!("../../../../../examples/row_absmax.py");

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
            "the loop at line 15 takes 512 steps at a time, BLOCK = 8, 4 warps (2-D tile, 32 programs)"
        ]
    );
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

/// The budgeted candidate: 4 programs of 64 columns leave the GPU idle, so the tile
/// narrows to 8 columns (32 programs) and takes the 300 rows 512 at a time (the trip
/// count rounded up); the steps and the loop's stages are constexpr knobs the spec sets
/// (the stages tuned), and the plain `range` becomes a pipelined `tl.range`.
#[test]
fn a_column_sum_gets_a_budgeted_tile_with_its_steps_and_stages_as_knobs() {
    let out = split("col_sum", json!({}));
    expect![[r#"
        # A column sum: each program owns BLOCK columns and walks every row.
        # @bench M = 300, 77; N = 200, 33
        # @bench x: in f32[M, N]; out: out f32[N]
        # @bench grid = cdiv(N, BLOCK); BLOCK = 8
        # @bench R_STEPS = 512; R_STAGES = 3; num_warps = 4; tune R_STAGES in [1, 2, 3, 4]
        @triton.jit
        def col_sum(x, out, M, N, BLOCK: tl.constexpr, R_STEPS: tl.constexpr, R_STAGES: tl.constexpr):
            cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            acc_part = tl.zeros((R_STEPS, 1), dtype=acc.dtype) + tl.zeros_like(acc)[None, :]
            for r in tl.range(0, M, R_STEPS, num_stages=R_STAGES):
                rs = r + tl.arange(0, R_STEPS)
                r_ok = rs[:, None] < M
                acc_part += tl.where(r_ok, tl.load(x + rs[:, None] * N + cols[None, :], mask=(cols[None, :] < N) & r_ok, other=0.0), 0)
            acc += tl.sum(acc_part, axis=0)
            tl.store(out + cols, acc, mask=cols < N)"#]]
    .assert_eq(&show(Lang::Triton, SEQ, &out[2], "col_sum"));
}

/// The last candidate of `triton_split_loop` on `kernel` of `src`, as the author sees it.
fn budgeted(src: &str, kernel: &str) -> String {
    let out = triton(src, kernel, "triton_split_loop", json!({})).unwrap();
    show(Lang::Triton, src, out.last().unwrap(), kernel)
}

#[test]
fn a_column_minimum_on_odd_sizes_narrows_to_192_programs_and_pipelines_its_tl_range() {
    expect![[r##"
        # @bench M = 12289, 1001; N = 1531, 77
        # @bench x: in f32[M, N] ~ normal(0, 3); lo: out f32[N]
        # @bench grid = cdiv(N, BLOCK); BLOCK = 8; num_warps = 8
        # @bench reference = torch: x.amin(dim=0)
        # @bench ROW_STEPS = 1024; ROW_STAGES = 3; tune ROW_STAGES in [1, 2, 3, 4]
        @triton.jit
        def col_min(x, lo, M, N, BLOCK: tl.constexpr, ROW_STEPS: tl.constexpr, ROW_STAGES: tl.constexpr):
            pid = tl.program_id(axis=0)
            offs = pid * BLOCK + tl.arange(0, BLOCK)
            keep = offs < N
            smallest = tl.full((BLOCK,), float("inf"), dtype=tl.float32)
            smallest_part = tl.full((ROW_STEPS, 1), float("inf"), dtype=smallest.dtype) + tl.zeros_like(smallest)[None, :]
            for row in tl.range(0, M, ROW_STEPS, num_stages=ROW_STAGES):
                rows = row + tl.arange(0, ROW_STEPS)
                row_ok = rows[:, None] < M
                vals = tl.load(x + rows[:, None] * N + offs[None, :], mask=(keep[None, :]) & row_ok, other=float("inf"))
                smallest_part = tl.minimum(smallest_part, tl.where(row_ok, vals, float("inf")))
            smallest = tl.minimum(smallest, tl.min(smallest_part, axis=0))
            tl.store(lo + offs, smallest, mask=keep)"##]].assert_eq(&budgeted(COL_MIN, "col_min"));
}

#[test]
fn a_while_loop_sum_of_squares_gets_the_steps_knob_and_no_stages() {
    expect![[r#"
        # @bench M = 20000, 513; N = 768, 100
        # @bench x: in f32[M, N]; ss: out f32[N]
        # @bench grid = cdiv(N, BLOCK_N); BLOCK_N = 8
        # @bench reference = torch: (x * x).sum(dim=0)
        # @bench rtol = 1e-3
        # @bench M_STEPS = 1024; num_warps = 32
        @triton.jit
        def col_sumsq(x, ss, M, N, BLOCK_N: tl.constexpr, M_STEPS: tl.constexpr):
            n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
            total = tl.zeros((BLOCK_N,), dtype=tl.float32)
            m = 0
            total_part = tl.zeros((M_STEPS, 1), dtype=total.dtype) + tl.zeros_like(total)[None, :]
            while m < M:
                ms = m + tl.arange(0, M_STEPS)
                m_ok = ms[:, None] < M
                v = tl.load(x + ms[:, None] * N + n[None, :], mask=(n[None, :] < N) & m_ok, other=0.0)
                total_part += tl.where(m_ok, v * v, 0)
                m += M_STEPS
            total += tl.sum(total_part, axis=0)
            tl.store(ss + n, total, mask=n < N)"#]].assert_eq(&budgeted(COL_SUMSQ, "col_sumsq"));
}

/// Strided lanes (a row per lane, the loop walking the row): 8 rows a program, each
/// walking 1024 contiguous columns a step, although 188 programs already filled the GPU.
#[test]
fn a_row_maximum_over_strided_lanes_walks_long_contiguous_runs() {
    expect![[r##"
        # @bench R = 6000, 97; C = 2500, 333
        # @bench x: in f32[R, C]; amax: out f32[R]
        # @bench grid = cdiv(R, ROWS); ROWS = 8
        # @bench reference = torch: x.abs().amax(dim=1)
        # @bench C_STEPS = 1024; C_STAGES = 3; num_warps = 8; tune C_STAGES in [1, 2, 3, 4]
        @triton.jit
        def row_absmax(x, amax, R, C, ROWS: tl.constexpr, C_STEPS: tl.constexpr, C_STAGES: tl.constexpr):
            r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
            ok = r < R
            best = tl.full([ROWS], -float("inf"), tl.float32)
            best_part = tl.full((C_STEPS, 1), float("-inf"), dtype=best.dtype) + tl.zeros_like(best)[None, :]
            for c in tl.range(0, C, C_STEPS, num_stages=C_STAGES):
                cs = c + tl.arange(0, C_STEPS)
                c_ok = cs[:, None] < C
                best_part = tl.maximum(best_part, tl.where(c_ok, tl.abs(tl.load(x + r[None, :] * C + cs[:, None], mask=(ok[None, :]) & c_ok, other=0.0)), float("-inf")))
            best = tl.maximum(best, tl.max(best_part, axis=0))
            tl.store(amax + r, best, mask=ok)"##]].assert_eq(&budgeted(ROW_ABSMAX, "row_absmax"));
}

#[test]
fn an_author_s_own_num_stages_is_kept_and_no_stages_knob_is_added() {
    let src = COL_MIN.replace("tl.range(0, M)", "tl.range(0, M, num_stages=2)");
    let text = budgeted(&src, "col_min");
    assert!(
        text.contains("for row in tl.range(0, M, ROW_STEPS, num_stages=2):"),
        "{text}"
    );
    assert!(!text.contains("STAGES"), "{text}");
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
    expect!["`col_prefix` has no loop to split: line 59: it stores and carries an accumulator"]
        .assert_eq(&why(SEQ, "col_prefix"));
    expect!["`col_sum_and_last` has no loop to split: line 86: `v` is set in the loop and read after it"].assert_eq(&why(SEQ, "col_sum_and_last"));
    expect!["`col_sum_pointer_walk` has no loop to split: line 101: `p` is not a lane-shaped sum, maximum or minimum read only by its updates"].assert_eq(&why(SEQ, "col_sum_pointer_walk"));
    expect!["`col_relu_max` has no loop to split: line 73: `top` is a maximum or minimum not started from an infinity"].assert_eq(&why(SEQ, "col_relu_max"));
    expect!["`row_sum_long` has no loop to split: line 134: it steps by `BLOCK`, not 1"]
        .assert_eq(&why(PASSES, "row_sum_long"));
    expect!["`matmul_kernel` has no loop to split: line 20: it steps by `BLOCK_K`, not 1"]
        .assert_eq(&why(MATMUL, "matmul_kernel"));
    let bad = triton(SEQ, "col_sum", "triton_split_loop", json!({"rows": [6]}));
    expect!["parameter `rows`: 6 is not a power of two"].assert_eq(&bad.unwrap_err().to_string());
}

fn lanes(block: u64, programs: u64, strided: bool, trip: Option<u64>) -> super::LaneTile {
    super::LaneTile {
        name: "BLOCK".into(),
        block,
        programs,
        strided,
        trip,
    }
}

fn plan(block: u64, steps: u64, num_warps: u64) -> super::TilePlan {
    super::TilePlan {
        block,
        steps,
        num_warps,
    }
}

#[test]
fn the_budget_narrows_contiguous_lanes_only_until_the_grid_fills_the_gpu() {
    use super::tile_plan;
    // A column mean of 1024 columns, 128 a program: 8 programs -> 8 columns, 128 programs.
    assert_eq!(
        tile_plan(&lanes(128, 8, false, Some(16384)), true),
        plan(8, 1024, 8)
    );
    // Enough programs already: the lanes stay, the steps fill the tile.
    assert_eq!(
        tile_plan(&lanes(64, 1024, false, None), true),
        plan(64, 128, 8)
    );
    // Never narrower than 8 lanes, whatever the grid.
    assert_eq!(
        tile_plan(&lanes(16, 1, false, None), true),
        plan(8, 1024, 8)
    );
    // A lane tile already under the floor is left alone.
    assert_eq!(tile_plan(&lanes(4, 2, false, None), true), plan(4, 2048, 8));
}

#[test]
fn the_budget_gives_strided_lanes_long_contiguous_runs() {
    use super::tile_plan;
    // A matrix-vector product over columns: 128 programs of 64 rows already fill the GPU,
    // but each row's run is what the loop walks: 8 rows, 1024 columns a step.
    assert_eq!(
        tile_plan(&lanes(64, 128, true, Some(4096)), true),
        plan(8, 1024, 8)
    );
    assert_eq!(
        tile_plan(&lanes(8, 1000, true, None), true),
        plan(8, 1024, 8)
    );
}

#[test]
fn an_unpipelined_loop_gets_four_times_the_warps_up_to_32() {
    use super::tile_plan;
    assert_eq!(
        tile_plan(&lanes(128, 8, false, None), false),
        plan(8, 1024, 32)
    );
    assert_eq!(
        tile_plan(&lanes(64, 4, false, Some(300)), false),
        plan(8, 512, 16)
    );
    assert_eq!(
        tile_plan(&lanes(8, 200, false, Some(3)), false),
        plan(8, 4, 1)
    );
}

#[test]
fn the_budget_never_takes_more_steps_than_the_loop_runs() {
    use super::tile_plan;
    assert_eq!(
        tile_plan(&lanes(64, 4, false, Some(300)), true),
        plan(8, 512, 4)
    );
    assert_eq!(
        tile_plan(&lanes(32, 2, true, Some(250)), true),
        plan(8, 256, 2)
    );
    assert_eq!(
        tile_plan(&lanes(8, 200, false, Some(1)), true),
        plan(8, 2, 1)
    );
}

/// The knobs the budgeted tile declares are what the retune after a structural step
/// sweeps on the new version: `triton_block` the steps (and the narrowed lanes),
/// `tunable_sweep` the loop's stages.
#[test]
fn the_retune_sweeps_the_budgeted_tile_s_steps_and_stages() {
    let out = triton(COL_MIN, "col_min", "triton_split_loop", json!({})).unwrap();
    let tile = &out.last().unwrap().text;
    let blocks = triton(tile, "col_min", "triton_block", json!({})).unwrap();
    assert_eq!(
        labels(&blocks),
        [
            "BLOCK=16",
            "BLOCK=32",
            "ROW_STEPS=256",
            "ROW_STEPS=512",
            "ROW_STEPS=2048",
            "ROW_STEPS=4096"
        ]
    );
    let stages = triton(tile, "col_min", "tunable_sweep", json!({})).unwrap();
    assert_eq!(
        labels(&stages),
        ["ROW_STAGES=1", "ROW_STAGES=2", "ROW_STAGES=4"]
    );
}

#[test]
fn passes_over_the_same_rows_split_together_and_a_storing_pass_takes_a_tile_of_rows() {
    let out = split("col_softmax_passes", json!({ "rows": [8] }));
    assert_eq!(
        labels(&out),
        [
            "the loop at line 117 takes 8 steps at a time (2-D tile)",
            "the loop at line 117 takes 128 steps at a time, BN = 8, 1 warps (2-D tile, 8 programs)",
            "the loops at lines 117, 120, 122 take 8 steps at a time (2-D tiles)",
            "the loops at lines 117, 120, 122 take 8 steps at a time (2-D tiles), the first two joined online",
            "the loops at lines 117, 120, 122 take 128 steps at a time, BN = 8, 1 warps (2-D tiles), the first two joined online"
        ]
    );
    let all = show(Lang::Triton, SEQ, &out[2], "col_softmax_passes");
    for want in [
        "top = tl.maximum(top, tl.max(top_part, axis=0))",
        "den += tl.sum(den_part, axis=0)",
        "- top[None, :]), 0)",
        "e = tl.exp(tl.load(x + rs_3[:, None] * N + c[None, :], mask=(live[None, :]) & r_ok_3, other=0.0) - top[None, :])",
        "tl.store(y + rs_3[:, None] * N + c[None, :], e / den, mask=(live[None, :]) & r_ok_3)",
    ] {
        assert!(all.contains(want), "{want}\n{all}");
    }
    // A loop that only stores, in the while form.
    let scale = split("col_scale_rows", json!({ "rows": [32] }));
    let text = show(Lang::Triton, SEQ, &scale[0], "col_scale_rows");
    assert!(
        text.contains("tl.store(y + rs[:, None] * N + c[None, :], v * scale[None, :], mask=(c[None, :] < N) & r_ok)"),
        "{text}"
    );
    expect!["`col_running_in_place` has no loop to split: line 151: it loads from `x`, which it stores to: a step could read what another writes"]
        .assert_eq(&not_applicable(triton(SEQ, "col_running_in_place", "triton_split_loop", json!({}))));
}

/// A maximum pass and a sum of `exp(x - max)` over the same rows become one tiled loop:
/// each step of 8 rows takes its tile's maximum over the steps, rescales the sum once (a
/// column still all -inf keeps its sum), and adds the tile's terms (rows past M add 0);
/// the storing pass is split as before. M = 99 is no multiple of 8.
#[test]
fn a_maximum_and_a_sum_of_exponentials_join_online_in_one_tiled_loop() {
    let out = triton(
        ONLINE,
        "col_softmax_odd",
        "triton_split_loop",
        json!({ "rows": [8] }),
    )
    .unwrap();
    let labels = labels(&out);
    assert_eq!(
        labels[labels.len() - 2..],
        [
            "the loops at lines 18, 21, 23 take 8 steps at a time (2-D tiles), the first two joined online",
            "the loops at lines 18, 21, 23 take 128 steps at a time, BN = 8, 1 warps (2-D tiles), the first two joined online"
        ]
    );
    expect![[r#"
        # Softmax down each column of an odd-sized matrix: three passes over the rows (a maximum,
        # a sum of exponentials, a pass that stores); the tiles of 8 or 32 rows do not divide M.
        # @bench M = 99, 13; N = 1001, 40
        # @bench x: in f32[M, N] ~ normal(0, 3); y: out f32[M, N]
        # @bench grid = cdiv(N, BN); BN = 64
        @triton.jit
        def col_softmax_odd(x, y, M, N, BN: tl.constexpr):
            cols = tl.program_id(0) * BN + tl.arange(0, BN)
            ok = cols < N
            m = tl.full([BN], -float("inf"), tl.float32)
            s = tl.zeros([BN], tl.float32)
            for r in range(0, M, 8):
                rs = r + tl.arange(0, 8)
                r_ok = rs[:, None] < M
                m_prev = m
                m = tl.maximum(m, tl.max(tl.where(r_ok, tl.load(x + rs[:, None] * N + cols[None, :], mask=(ok[None, :]) & r_ok, other=-float("inf")), float("-inf")), axis=0))
                # online rescaling: the sums below follow the running maximum
                s = s * tl.where(m_prev == m, 1.0, tl.exp(m_prev - m))
                s += tl.sum(tl.where(r_ok, tl.exp(tl.load(x + rs[:, None] * N + cols[None, :], mask=(ok[None, :]) & r_ok, other=-float("inf")) - m[None, :]), 0), axis=0)
            for r in range(0, M, 8):
                rs_2 = r + tl.arange(0, 8)
                r_ok_2 = rs_2[:, None] < M
                v = tl.load(x + rs_2[:, None] * N + cols[None, :], mask=(ok[None, :]) & r_ok_2, other=0.0)
                tl.store(y + rs_2[:, None] * N + cols[None, :], tl.exp(v - m[None, :]) / s[None, :], mask=(ok[None, :]) & r_ok_2)"#]]
    .assert_eq(&show(Lang::Triton, ONLINE, &out[out.len() - 2], "col_softmax_odd"));
    // The budgeted tile: the spec narrows the lanes and sets the warps; its steps are one
    // knob every split pass shares, added to the signature once.
    let budgeted = show(Lang::Triton, ONLINE, &out[out.len() - 1], "col_softmax_odd");
    assert_eq!(
        budgeted.matches("R_STEPS: tl.constexpr").count(),
        1,
        "{budgeted}"
    );
    assert_eq!(
        budgeted.matches("range(0, M, R_STEPS)").count(),
        2,
        "{budgeted}"
    );
    for want in [
        "BN = 8",
        "num_warps = 1",
        "R_STEPS = 128",
        "rs = r + tl.arange(0, R_STEPS)",
        "s = s * tl.where(m_prev == m",
    ] {
        assert!(budgeted.contains(want), "{want}\n{budgeted}");
    }
}

/// Other styles join too: a two-pass base-2 logsumexp in the while form (one output row),
/// and a row-wise f16 log-softmax whose lanes are rows and whose loops walk the columns
/// (the upcast load, repeated by the sum pass, is read once).
#[test]
fn a_while_logsumexp_and_a_row_wise_f16_log_softmax_join_online_tiled() {
    let out = triton(
        ONLINE,
        "col_logsumexp2",
        "triton_split_loop",
        json!({ "rows": [32] }),
    )
    .unwrap();
    let text = show(Lang::Triton, ONLINE, &out[out.len() - 2], "col_logsumexp2");
    for want in [
        "acc = acc * tl.where(hi_prev == hi, 1.0, tl.exp2((hi_prev - hi) * 1.4426950408889634))",
        "acc += tl.sum(tl.where(i_ok, tl.exp2((t - hi[None, :]) * 1.4426950408889634), 0), axis=0)",
        "i += 32",
    ] {
        assert!(text.contains(want), "{want}\n{text}");
    }
    let out = triton(
        ONLINE,
        "row_log_softmax_f16",
        "triton_split_loop",
        json!({ "rows": [32] }),
    )
    .unwrap();
    let text = show(
        Lang::Triton,
        ONLINE,
        out.last().unwrap(),
        "row_log_softmax_f16",
    );
    for want in [
        "big = tl.maximum(big, tl.max(tl.where(k_ok, v, float(\"-inf\")), axis=0))",
        "tot += tl.sum(tl.where(k_ok, tl.exp(v - big[None, :]), 0), axis=0)",
    ] {
        assert!(text.contains(want), "{want}\n{text}");
    }
    assert_eq!(text.matches(".to(tl.float32)").count(), 2, "{text}");
}

/// No online candidate where `triton_online` refuses the pair: a sum of x - max (no
/// factor rescales it), a maximum pass that also stores (it does not split), passes over
/// different rows.
#[test]
fn pairs_that_do_not_rescale_store_or_differ_in_rows_get_no_online_tile() {
    for k in ["col_spread_sum", "col_max_copies", "col_lse_skip_first"] {
        let out = triton(ONLINE, k, "triton_split_loop", json!({})).unwrap();
        assert!(!out.is_empty(), "{k}");
        assert!(
            labels(&out).iter().all(|l| !l.contains("online")),
            "{k}: {:?}",
            labels(&out)
        );
    }
    // Why: `triton_online`'s analysis, which the online candidate reuses.
    let why = |k: &str| not_applicable(triton(ONLINE, k, "triton_online", json!({})));
    expect!["`col_spread_sum` has no pair of passes to merge: lines 79 and 82: `m` is used outside exp(...)"]
        .assert_eq(&why("col_spread_sum"));
    expect!["`col_lse_skip_first` has no pair of passes to merge: lines 113 and 116: they walk different ranges (0, M, 1 and 1, M, 1)"]
        .assert_eq(&why("col_lse_skip_first"));
    // The maximum pass that stores joins untiled, but it does not split.
    let copies = triton(
        ONLINE,
        "col_max_copies",
        "triton_split_loop",
        json!({ "rows": [8] }),
    )
    .unwrap();
    assert_eq!(
        labels(&copies),
        [
            "the loop at line 100 takes 8 steps at a time (2-D tile)",
            "the loop at line 100 takes 64 steps at a time, B = 8, 1 warps (2-D tile, 8 programs)"
        ]
    );
}
