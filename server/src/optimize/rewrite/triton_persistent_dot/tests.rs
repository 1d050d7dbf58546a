use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{labels, not_applicable, show, triton};
use crate::syntax::Lang;

const MATMUL: &str = include_str!("../../../../../examples/matmul.py");
const DOTS: &str = include_str!("../../../../../tests/fixtures/rewrites/triton/persistent_dots.py");
const MATMULS: &str = include_str!("../../../../../tests/fixtures/rewrites/triton/matmuls.py");

fn one(src: &str, kernel: &str, config: [u64; 5]) -> String {
    let out = triton(
        src,
        kernel,
        "triton_persistent_dot",
        json!({ "configs": [config] }),
    )
    .unwrap_or_else(|e| panic!("{kernel}: {e}"));
    assert_eq!(out.len(), 1, "{:?}", labels(&out));
    show(Lang::Triton, src, &out[0], kernel)
}

#[test]
fn the_bundled_matmul_becomes_persistent_with_descriptors_and_its_configs() {
    let out = triton(MATMUL, "matmul_kernel", "triton_persistent_dot", json!({})).unwrap();
    expect![[r#"
        [
            "persistent TMA tiles 128x128x64, 8 warps, 4 stages, GROUP_M=8",
            "persistent TMA tiles 128x128x64, 4 warps, 4 stages, GROUP_M=8",
        ]
    "#]]
    .assert_debug_eq(&labels(&out));
    expect![[r#"
        # @bench M = 4096, 100; N = 4096, 72; K = 4096, 40
        # @bench a_ptr: in f16[M, K]; b_ptr: in f16[K, N]; c_ptr: out f32[M, N]
        # @bench grid = min(sms, cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)); BLOCK_M = 128; BLOCK_N = 128; BLOCK_K = 64
        # @bench atol = 1e-2; rtol = 1e-2
        # @bench num_warps = 8; num_stages = 4
        @triton.jit
        def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
            # Persistent and TMA-fed (issue #30): one program per SM walks the output tiles,
            # 8 rows of tiles at a time (L2 reuse); tensor descriptors move the tiles,
            # zero-filled past the edges, and clip the stores.
            num_pid_m = tl.cdiv(M, BLOCK_M)
            num_pid_n = tl.cdiv(N, BLOCK_N)
            a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
            b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
            c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
            num_pid_in_group = 8 * num_pid_n
            for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0), flatten=True):
                first_pid_m = tile // num_pid_in_group * 8
                group_size_m = min(num_pid_m - first_pid_m, 8)
                pid_m = first_pid_m + tile % num_pid_in_group % group_size_m
                pid_n = tile % num_pid_in_group // group_size_m
                acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for k0 in range(0, K, BLOCK_K):
                    a_tile = a_desc.load([pid_m * BLOCK_M, k0])
                    b_tile = b_desc.load([k0, pid_n * BLOCK_N])
                    acc = tl.dot(a_tile, b_tile, acc)
                c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_ptr.dtype.element_ty))"#]]
    .assert_eq(&show(Lang::Triton, MATMUL, &out[0], "matmul_kernel"));
}

#[test]
fn strided_transposed_and_cast_operands_keep_their_layouts() {
    // The tutorial's style: strides as parameters, the spec sets the unit ones to 1.
    let tutorial = one(DOTS, "mm_tutorial", [128, 256, 64, 8, 3]);
    for line in [
        "# @bench grid = min(sms, cdiv(M, BLOCK_SIZE_M) * cdiv(N, BLOCK_SIZE_N))",
        "    \"\"\"C = A @ B.\"\"\"",
        "    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_SIZE_M, BLOCK_SIZE_K])",
        "    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_SIZE_K, BLOCK_SIZE_N])",
        "    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_SIZE_M, BLOCK_SIZE_N])",
        "        for k0 in range(0, K, BLOCK_SIZE_K):",
        "        c_desc.store([pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N], accumulator.to(c_ptr.dtype.element_ty))",
    ] {
        assert!(tutorial.contains(line), "missing `{line}` in\n{tutorial}");
    }
    assert!(!tutorial.contains("a_ptrs"), "{tutorial}");
    // B stored as rows of W (`w[n, k]`): its descriptor is [n, k] and each tile transposed.
    let bt = one(DOTS, "linear_bt", [128, 256, 64, 8, 3]);
    for line in [
        "    b_desc = tl.make_tensor_descriptor(w, shape=[n, k], strides=[k, 1], block_shape=[BN, BK])",
        "            b_tile = b_desc.load([pid_n * BN, k0]).T",
        "            acc = tl.dot(a_tile, b_tile, acc)",
        "        c_desc.store([pid_m * BM, pid_n * BN], acc.to(y.dtype.element_ty))",
        "# @bench grid = min(sms, cdiv(m, BM) * cdiv(n, BN)); BM = 128; BN = 256; BK = 64; num_warps = 8",
    ] {
        assert!(bt.contains(line), "missing `{line}` in\n{bt}");
    }
    // A stored column-major (`at[k, m]`).
    let at = one(DOTS, "mm_at", [128, 128, 64, 4, 4]);
    for line in [
        "    a_desc = tl.make_tensor_descriptor(at, shape=[K, M], strides=[M, 1], block_shape=[BK, BM])",
        "            a_tile = a_desc.load([k0, pid_m * BM]).T",
        "            b_tile = b_desc.load([k0, pid_n * BN])",
    ] {
        assert!(at.contains(line), "missing `{line}` in\n{at}");
    }
    // Pointer increments along k, bf16 (triton_configs' fixture).
    let inc = one(MATMULS, "mm_bf16", [128, 128, 64, 8, 4]);
    assert!(
        inc.contains("a_desc = tl.make_tensor_descriptor(a, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])"),
        "{inc}"
    );
}

#[test]
fn epilogues_batches_unaligned_rows_and_f32_operands_are_refused() {
    let why =
        |src: &str, k: &str| not_applicable(triton(src, k, "triton_persistent_dot", json!({})));
    expect!["`mm_bias_relu` cannot become a persistent TMA matmul: it has 1 `tl.dot`, 3 `tl.load` and 1 `tl.store` calls, not one dot of two loads stored once"]
        .assert_eq(&why(DOTS, "mm_bias_relu"));
    // Without the bias, the ReLU alone is still an epilogue.
    let relu = DOTS
        .replace("; bias: in f16[N]", "")
        .replace("(a, b, bias, c,", "(a, b, c,")
        .replace(
            "    acc = acc + tl.load(bias + on, mask=on < N, other=0.0)[None, :]\n",
            "",
        );
    expect!["`mm_bias_relu` cannot become a persistent TMA matmul: `acc` is set again after the loop (line 102): an epilogue stays with the author's kernel"]
        .assert_eq(&why(&relu, "mm_bias_relu"));
    let relu_named = relu
        .replace(
            "    acc = tl.maximum(acc, 0.0)\n",
            "    r = tl.maximum(acc, 0.0)\n",
        )
        .replace(
            "acc.to(tl.float16), mask=(om[:, None] < M) & (on[None, :] < N))\n\n\n# Refused: rows",
            "r.to(tl.float16), mask=(om[:, None] < M) & (on[None, :] < N))\n\n\n# Refused: rows",
        );
    assert_ne!(relu_named, relu);
    expect!["`mm_bias_relu` cannot become a persistent TMA matmul: the store writes `r.to(tl.float16)`, not `acc` or a cast of it (an epilogue stays with the author's kernel)"]
        .assert_eq(&why(&relu_named, "mm_bias_relu"));
    expect!["`mm_odd` cannot become a persistent TMA matmul: `a`'s stride `K` is 4099 elements (8198 bytes) in case 0, not a multiple of 16 bytes, which TMA needs"]
        .assert_eq(&why(DOTS, "mm_odd"));
    expect!["`bmm` cannot become a persistent TMA matmul: `a + z * M * K + om[:, None] * K + (k0 + ok)[None, :]`'s address adds `z * M * K`, not a tile offset `x[:, None] * stride` or `y[None, :]`"]
        .assert_eq(&why(DOTS, "bmm"));
    expect!["`mm_small` cannot become a persistent TMA matmul: `a` and `b` are not both f16 or both bf16 (measured only there)"]
        .assert_eq(&why(MATMULS, "mm_small"));
    // No mask on the store: the output's bounds are unknown.
    let unmasked = MATMUL.replace(
        "    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc,\n             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))",
        "    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc)",
    );
    assert_ne!(unmasked, MATMUL);
    expect!["`matmul_kernel` cannot become a persistent TMA matmul: the store has no mask naming the output's bounds"]
        .assert_eq(&why(&unmasked, "matmul_kernel"));
    // Past the edges TMA reads zeros; a load padded with something else is the author's.
    let ones = MATMUL.replacen(
        "(k + offs_k)[None, :] < K), other=0.0)",
        "(k + offs_k)[None, :] < K), other=1.0)",
        1,
    );
    assert_ne!(ones, MATMUL);
    expect!["`matmul_kernel` cannot become a persistent TMA matmul: `a` pads with `1.0`, where tensor descriptors read zeros"]
        .assert_eq(&why(&ones, "matmul_kernel"));
    // A tuned block size is tunable_sweep's.
    let tuned = MATMUL.replace(
        "BLOCK_K = 32",
        "BLOCK_K = 32\n# @bench tune BLOCK_K in [32, 64]",
    );
    expect!["`matmul_kernel` cannot become a persistent TMA matmul: the spec tunes `BLOCK_K`"]
        .assert_eq(&why(&tuned, "matmul_kernel"));
    // Configurations that overflow shared memory are dropped with the reason.
    expect!["no usable candidate for `matmul_kernel`: persistent TMA tiles 256x256x128, 8 warps, 4 stages, GROUP_M=8: 786432 bytes of shared memory, more than 232448"]
        .assert_eq(&not_applicable(triton(MATMUL, "matmul_kernel", "triton_persistent_dot", json!({"configs": [[256, 256, 128, 8, 4]]}))));
}

#[test]
fn other_spellings_of_the_same_loop_are_matched() {
    let variant = |from: &str, to: &str| {
        let s = MATMUL.replacen(from, to, 1);
        assert_ne!(s, MATMUL, "`{from}` moved; update this test");
        s
    };
    let offered = |src: &str| match triton(src, "matmul_kernel", "triton_persistent_dot", json!({}))
    {
        Ok(out) => format!("{} candidates", out.len()),
        Err(e) => e.to_string(),
    };
    for (what, src) in [
        (
            "the accumulator by keyword",
            variant("acc += tl.dot(a, b)", "acc = tl.dot(a, b, acc=acc)"),
        ),
        (
            "an explicit f32 out_dtype",
            variant(
                "acc += tl.dot(a, b)",
                "acc += tl.dot(a, b, out_dtype=tl.float32)",
            ),
        ),
        (
            "a sum written out",
            variant("acc += tl.dot(a, b)", "acc = acc + tl.dot(a, b)"),
        ),
        (
            "tl.range with its own stages",
            variant(
                "for k in range(0, K, BLOCK_K):",
                "for k in tl.range(0, K, BLOCK_K, num_stages=3):",
            ),
        ),
        (
            "bounds written the other way round",
            variant(
                "mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))",
                "mask=(M > offs_m[:, None]) & (N > offs_n[None, :]))",
            ),
        ),
    ] {
        assert_eq!(offered(&src), "2 candidates", "{what}");
    }
    for (what, src, why) in [
        (
            "a while loop",
            variant("for k in range(0, K, BLOCK_K):", "k = 0\n    while k < K:"),
            "`matmul_kernel` cannot become a persistent TMA matmul: the loop is not `for k in range(0, K, BK)` or `range(tl.cdiv(K, BK))` with parameters K and BK: `while k < K:`",
        ),
        (
            "a loop from 1",
            variant("for k in range(0, K, BLOCK_K):", "for k in range(1, K, BLOCK_K):"),
            "`matmul_kernel` cannot become a persistent TMA matmul: the loop is not `for k in range(0, K, BK)` or `range(tl.cdiv(K, BK))` with parameters K and BK: `for k in range(1, K, BLOCK_K):`",
        ),
        (
            "a scaled product",
            variant("acc += tl.dot(a, b)", "acc += 2.0 * tl.dot(a, b)"),
            "`matmul_kernel` cannot become a persistent TMA matmul: `tl.dot(a, b)` is not accumulated as `acc += tl.dot(a, b)`",
        ),
        (
            "a dot at another precision",
            variant("acc += tl.dot(a, b)", "acc += tl.dot(a, b, input_precision=\"ieee\")"),
            "`matmul_kernel` cannot become a persistent TMA matmul: the dot passes `input_precision=`",
        ),
    ] {
        assert_eq!(offered(&src), why, "{what}");
    }
}
