use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{labels, not_applicable, run, show};
use crate::syntax::Lang;

const MATMUL: &str = include_str!("../../../../../examples/matmul.py");
const VECTOR_ADD: &str = include_str!("../../../../../examples/vector_add.py");
const GRID2D: &str = include_str!("../../../../../tests/fixtures/rewrites/triton/grid2d.py");

fn swizzle(
    src: &str,
    k: &str,
    params: serde_json::Value,
) -> Result<Vec<super::super::Candidate>, super::super::RewriteError> {
    run(Lang::Triton, src, k, "triton_swizzle", params)
}

#[test]
fn a_2d_program_grid_becomes_grouped_1d() {
    let out = swizzle(MATMUL, "matmul_kernel", json!({})).unwrap();
    assert_eq!(
        labels(&out),
        [
            "grouped program order, GROUP=8",
            "grouped program order, GROUP=4"
        ]
    );
    expect![[r#"
        # @bench M = 4096, 100; N = 4096, 72; K = 4096, 40
        # @bench a_ptr: in f16[M, K]; b_ptr: in f16[K, N]; c_ptr: out f32[M, N]
        # @bench grid = cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N); BLOCK_M = 64; BLOCK_N = 64; BLOCK_K = 32
        # @bench atol = 1e-2; rtol = 1e-2
        @triton.jit
        def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
            pid = tl.program_id(0)
            # 8 programs in a row share their rows of tiles along axis 0: L2 reuse
            num_pid_0 = tl.cdiv(M, BLOCK_M)
            num_pid_1 = tl.cdiv(N, BLOCK_N)
            num_pid_in_group = 8 * num_pid_1
            first_pid_0 = (pid // num_pid_in_group) * 8
            group_size = min(num_pid_0 - first_pid_0, 8)
            pid_m = first_pid_0 + ((pid % num_pid_in_group) % group_size)
            pid_n = (pid % num_pid_in_group) // group_size
            offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            offs_k = tl.arange(0, BLOCK_K)
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k in range(0, K, BLOCK_K):
                a = tl.load(a_ptr + offs_m[:, None] * K + (k + offs_k)[None, :],
                            mask=(offs_m[:, None] < M) & ((k + offs_k)[None, :] < K), other=0.0)
                b = tl.load(b_ptr + (k + offs_k)[:, None] * N + offs_n[None, :],
                            mask=((k + offs_k)[:, None] < K) & (offs_n[None, :] < N), other=0.0)
                acc += tl.dot(a, b)
            tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc,
                     mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))"#]].assert_eq(&show(Lang::Triton, MATMUL, &out[0], "matmul_kernel"));
}

#[test]
fn keyword_axes_and_a_grid_of_sums_in_another_style() {
    let out = swizzle(GRID2D, "add_bias_2d", json!({"group_sizes": [4]})).unwrap();
    expect![[r#"
        # A bias added to every row, over a 2-D grid named with keyword axes, a grid of sums.
        # @bench R = 300, 70; C = 200, 33
        # @bench x_ptr: in f32[R, C]; b_ptr: in f32[C]; y_ptr: out f32[R, C]
        # @bench grid = cdiv(R, BR) * (cdiv(C + BC, BC) - 1); BR = 16; BC = 32
        @triton.jit
        def add_bias_2d(x_ptr, b_ptr, y_ptr, R, C, BR: tl.constexpr, BC: tl.constexpr):
            pid = tl.program_id(0)
            # 4 programs in a row share their rows of tiles along axis 0: L2 reuse
            num_pid_0 = tl.cdiv(R, BR)
            num_pid_1 = tl.cdiv(C + BC, BC) - 1
            num_pid_in_group = 4 * num_pid_1
            first_pid_0 = (pid // num_pid_in_group) * 4
            group_size = min(num_pid_0 - first_pid_0, 4)
            r = first_pid_0 + ((pid % num_pid_in_group) % group_size)
            c = (pid % num_pid_in_group) // group_size
            rows = r * BR + tl.arange(0, BR)
            cols = c * BC + tl.arange(0, BC)
            m = (rows[:, None] < R) & (cols[None, :] < C)
            x = tl.load(x_ptr + rows[:, None] * C + cols[None, :], mask=m)
            b = tl.load(b_ptr + cols, mask=cols < C)
            tl.store(y_ptr + rows[:, None] * C + cols[None, :], x + b[None, :], mask=m)"#]]
    .assert_eq(&show(Lang::Triton, GRID2D, &out[0], "add_bias_2d"));
}

#[test]
fn a_batch_on_program_axis_2_is_kept_and_each_batchs_tiles_are_grouped() {
    let out = swizzle(GRID2D, "bmm_tiles", json!({"group_sizes": [8]})).unwrap();
    let shown = show(Lang::Triton, GRID2D, &out[0], "bmm_tiles");
    for want in [
        "# @bench grid = (cdiv(M, BM) * cdiv(N, BN), 1, Bt); BM = 32; BN = 32; BK = 16",
        "    pid = tl.program_id(0)\n",
        "    pid_m = first_pid_0 + ((pid % num_pid_in_group) % group_size)\n",
        "    pid_n = (pid % num_pid_in_group) // group_size\n    pid_b = tl.program_id(2)\n",
    ] {
        assert!(shown.contains(want), "no `{want}` in\n{shown}");
    }
}

#[test]
fn what_grouping_cannot_do_is_refused_with_the_reason() {
    let why = |src: &str, k: &str| not_applicable(swizzle(src, k, json!({})));
    expect!["`add_kernel` cannot take its programs in grouped order: it reads `tl.program_id` 1 times; grouping needs one read of axis 0 and one of axis 1"].assert_eq(&why(VECTOR_ADD, "add_kernel"));
    expect!["`uses_num_programs` cannot take its programs in grouped order: `tl.num_programs(1)` reads the grid's shape, which a 1-D grid changes"].assert_eq(&why(GRID2D, "uses_num_programs"));
    expect!["`grid_from_sizes` cannot take its programs in grouped order: the grid names `rows`, which the kernel cannot see; write the grid with kernel parameters"].assert_eq(&why(GRID2D, "grid_from_sizes"));
}

#[test]
fn a_spec_grid_becomes_kernel_code_or_is_refused() {
    let params = ["M", "N"];
    assert_eq!(
        super::grid_in_kernel("cdiv(M, 64)", &params).as_deref(),
        Ok("tl.cdiv(M, 64)")
    );
    assert_eq!(
        super::grid_in_kernel("N / 2 + 1", &params).as_deref(),
        Ok("N // 2 + 1")
    );
    assert_eq!(
        super::grid_in_kernel("cdiv(M, BM)", &params),
        Err("the grid names `BM`, which the kernel cannot see; write the grid with kernel parameters".to_string())
    );
    assert_eq!(
        super::grid_in_kernel("M % 2", &params),
        Err("the grid uses `%`".to_string())
    );
}
