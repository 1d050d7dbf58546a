use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{cuda, labels, not_applicable, show};
use crate::syntax::Lang;

const SUMS: &str = include_str!("../../../../../tests/fixtures/rewrites/reduce/sums.cu");
const REDUCE: &str = include_str!("../../../../../examples/reduce_sum.cu");

/// The rewritten kernel up to its grid-stride loop; the block's combine after it is the
/// same for every kernel (shown whole once, for the example) and is checked here.
fn one(src: &str, kernel: &str) -> String {
    let all = whole(src, kernel);
    let at = all
        .find("    for (int offset = 16;")
        .expect("the warp shuffles");
    let tail = &all[at..];
    assert!(tail.contains("__syncthreads();"), "{tail}");
    assert!(
        tail.contains("__shfl_down_sync(0xffffffffu, acc, offset)"),
        "{tail}"
    );
    assert!(tail.contains("if (threadIdx.x == 0) atomicAdd("), "{tail}");
    all[..at].to_string()
}

/// The one candidate at 8 blocks per SM, whole.
fn whole(src: &str, kernel: &str) -> String {
    let out = cuda(src, kernel, "block_reduce", json!({ "blocks_per_sm": [8] }))
        .unwrap_or_else(|e| panic!("{kernel}: {e}"));
    assert_eq!(out.len(), 1, "{:?}", labels(&out));
    show(Lang::Cuda, src, &out[0], kernel)
}

#[test]
fn the_examples_shared_memory_tree_becomes_shuffles_and_one_atomic_per_block() {
    let out = cuda(REDUCE, "reduce_tree", "block_reduce", json!({})).unwrap();
    assert_eq!(
        labels(&out),
        [
            "grid-stride sum, warp shuffles, one atomic per block, grid <= 4 * sms",
            "grid-stride sum, warp shuffles, one atomic per block, grid <= 8 * sms",
            "grid-stride sum, warp shuffles, one atomic per block, grid <= 16 * sms"
        ]
    );
    expect![[r#"
        // @bench n = 1 << 22, 1000
        // @bench x: in f16[n] ~ uniform(0, 1); out: inout f32[1] ~ zeros
        // @bench tune BLOCK in [128, 256, 512]
        // @bench grid = min(cdiv(n, BLOCK), sms * 8); block = BLOCK; smem = BLOCK * 4
        // @bench atol = 1e-1; rtol = 1e-3
        // @bench reference = reduce_naive
        extern "C" __global__ void __launch_bounds__(BLOCK) reduce_tree(int n, const __half* x, float* out) {
            float acc = 0;
            for (int i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += gridDim.x * BLOCK) {
                acc += (i < n ? load_as_float(x, i) : 0.0f);
            }
            for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
            __shared__ float warp_sums[32];
            if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
            __syncthreads();
            if (threadIdx.x < 32) {
                acc = threadIdx.x < (blockDim.x + 31) / 32 ? warp_sums[threadIdx.x] : 0;
                for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
                if (threadIdx.x == 0) atomicAdd(out, acc);
            }
        }"#]].assert_eq(&show(Lang::Cuda, REDUCE, &out[1], "reduce_tree"));
}

#[test]
fn an_atomic_per_element_in_several_styles() {
    expect![[r#"
        // @bench n = 1 << 22, 1000
        // @bench x: in f16[n] ~ uniform(0, 1); out: inout f32[1] ~ zeros
        // @bench grid = min(cdiv(n, 256), sms * 8); block = 256
        // @bench atol = 1e-1; rtol = 1e-3
        extern "C" __global__ void reduce_naive(int n, const __half* x, float* out) {
            float acc = 0;
            for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
                if (i < n) acc += (load_as_float(x, i));
            }
    "#]].assert_eq(&one(REDUCE, "reduce_naive"));
    expect![[r#"
        // @bench n = 1 << 20, 1000
        // @bench x: in f32[n] ~ uniform(-1, 1); out: inout f32[1] ~ zeros
        // @bench grid = min(cdiv(n, 256), sms * 8); block = 256
        // @bench atol = 1e-1; rtol = 1e-3
        extern "C" __global__ void sum_squares(const float* x, float* out, int n) {
            float acc = 0;
            for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
                if (i < n) acc += (x[i] * x[i]);
            }
    "#]].assert_eq(&one(SUMS, "sum_squares"));
    expect![[r#"
        // @bench n = 1 << 20, 4097
        // @bench a: in f32[n]; b: in f32[n]; result: inout f32[1] ~ zeros
        // @bench grid = min(cdiv(n, 128), sms * 8); block = 128
        // @bench atol = 1e-1; rtol = 1e-3
        extern "C" __global__ void dot(int n, const float* a, const float* b, float* result) {
            float acc = 0;
            for (int i = threadIdx.x + blockDim.x * blockIdx.x; i < n; i += gridDim.x * blockDim.x) {
                if (i >= n) continue;
                float p = a[i] * b[i];
                acc += (p);
            }
    "#]].assert_eq(&one(SUMS, "dot"));
    expect![[r#"
        // @bench n = 1 << 20, 999
        // @bench x: in f32[n] ~ uniform(-1, 1); count: inout u32[1] ~ zeros
        // @bench grid = min(cdiv(n, 512), sms * 8); block = 512
        extern "C" __global__ void __launch_bounds__(512) count_positive(const float* x, unsigned int* count, int n) {
            unsigned int acc = 0;
            for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
                if (i < n && x[i] > 0.0f) acc += (1u);
            }
    "#]].assert_eq(&one(SUMS, "count_positive"));
}

#[test]
fn a_classic_tree_with_a_static_array_and_braces() {
    expect![[r#"
        // @bench n = 1 << 20, 777
        // @bench x: in f32[n] ~ uniform(0, 1); out: inout f32[1] ~ zeros
        // @bench grid = min(cdiv(n, 256), sms * 8); block = 256
        // @bench atol = 1e-1; rtol = 1e-3
        extern "C" __global__ void sum_tree(const float* __restrict__ x, float* __restrict__ out, unsigned int n) {
            float acc = 0;
            for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
                acc += ((i < n) ? x[i] : 0.0f);
            }
    "#]].assert_eq(&one(SUMS, "sum_tree"));
}

#[test]
fn what_is_not_one_sum_is_refused_with_the_reason() {
    let why = |k: &str| not_applicable(cuda(SUMS, k, "block_reduce", json!({})));
    expect!["`max_tree` is not a block-reducible sum: the tree combines with `m[threadIdx.x] = fmaxf(m[threadIdx.x], m[threadIdx.x + s])`; block_reduce only sums"].assert_eq(&why("max_tree"));
    expect!["`scatter` is not a block-reducible sum: the atomic's address `&hist[x[i]]` depends on `i`: that is a scatter, not one sum"].assert_eq(&why("scatter"));
    expect!["`partials` is not a block-reducible sum: it has 0 atomic calls; block_reduce needs exactly one (atomicAdd, atomicMax, atomicMin), folding the block's or the element's value into one place"].assert_eq(&why("partials"));
    expect!["`odd_block` is not a block-reducible sum: a case launches blocks of 100 threads; the warp shuffles need a multiple of 32"].assert_eq(&why("odd_block"));
    let saxpy = include_str!("../../../../../examples/saxpy.cu");
    expect!["`saxpy` is not a block-reducible sum: it has 0 atomic calls; block_reduce needs exactly one (atomicAdd, atomicMax, atomicMin), folding the block's or the element's value into one place"].assert_eq(&not_applicable(cuda(saxpy, "saxpy", "block_reduce", json!({}))));
}

#[test]
fn an_atomic_per_element_with_a_cast_index() {
    // The 64-bit index style: the grid-stride loop starts from the author's own index.
    let src = REDUCE.replace(
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) atomicAdd(out, load_as_float(x, i));",
        "    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) atomicAdd(out, load_as_float(x, i));",
    );
    assert_ne!(src, REDUCE, "reduce_naive's body moved; update this test");
    let head = one(&src, "reduce_naive");
    assert!(
        head.contains("for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)"),
        "{head}"
    );
}

#[test]
fn a_tree_total_scaled_by_what_every_thread_shares_keeps_its_scale() {
    // A mean: the block's total divided by the count as it is added; the new atomic
    // divides the block's (larger) share the same way.
    let mean = whole(SUMS, "mean_abs_diff");
    assert!(
        mean.contains("if (threadIdx.x == 0) atomicAdd(out, acc / n);"),
        "{mean}"
    );
    expect![[r#"
        // A mean: the block's tree total divided by the element count as it is added.
        // @bench n = 1 << 20, 999
        // @bench a: in f32[n]; b: in f32[n]; out: inout f32[1] ~ zeros
        // @bench grid = min(cdiv(n, 256), sms * 8); block = 256
        // @bench atol = 1e-3; rtol = 1e-3
        extern "C" __global__ void mean_abs_diff(const float* a, const float* b, float* out, unsigned int n) {
            float acc = 0;
            for (unsigned int i = blockIdx.x * 256 + threadIdx.x; i < n; i += gridDim.x * 256) {
                float v = 0.0f;
                if (i < n) v = fabsf(a[i] - b[i]);
                acc += (v);
            }
    "#]].assert_eq(&one(SUMS, "mean_abs_diff"));
    let scaled = whole(SUMS, "scaled_tree");
    assert!(
        scaled.contains("if (threadIdx.x == 0) atomicAdd(out, (w * acc));"),
        "{scaled}"
    );
}

#[test]
fn integer_maxima_and_minima_fold_from_their_identity() {
    expect![[r#"
        // The absolute maximum through an integer atomicMax on the float's bits, with an early
        // return and a 64-bit index.
        // @bench n = 1 << 20, 1003
        // @bench x: in f32[n]; out: inout f32[1] ~ zeros
        // @bench grid = min(cdiv(n, 256), sms * 8); block = 256
        extern "C" __global__ void abs_max_bits(const float* x, float* out, int n) {
            int acc = (-2147483647 - 1);
            for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
                if (i >= n) continue;
                float v = fabsf(x[i]);
                acc = max(acc, (int)(__float_as_int(v)));
            }
            for (int offset = 16; offset > 0; offset >>= 1) acc = max(acc, (int)__shfl_down_sync(0xffffffffu, acc, offset));
            __shared__ int warp_sums[32];
            if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
            __syncthreads();
            if (threadIdx.x < 32) {
                acc = threadIdx.x < (blockDim.x + 31) / 32 ? warp_sums[threadIdx.x] : (-2147483647 - 1);
                for (int offset = 16; offset > 0; offset >>= 1) acc = max(acc, (int)__shfl_down_sync(0xffffffffu, acc, offset));
                if (threadIdx.x == 0) atomicMax((int*)out, acc);
            }
        }"#]].assert_eq(&whole(SUMS, "abs_max_bits"));
    let out = cuda(SUMS, "max_int", "block_reduce", json!({})).unwrap();
    assert_eq!(
        labels(&out)[0],
        "grid-stride max, warp shuffles, one atomic per block, grid <= 4 * sms"
    );
    // A minimum starts from the largest value and its multi-line guard keeps its shape.
    let first = whole(SUMS, "first_above");
    assert!(first.contains("int acc = 2147483647;"), "{first}");
    assert!(
        first.contains("if (i < n && x[i] > t) acc = min(acc, (int)(i));"),
        "{first}"
    );
    assert!(first.contains(": 2147483647;"), "{first}");
    assert!(
        first.contains("if (threadIdx.x == 0) atomicMin(first, acc);"),
        "{first}"
    );
    let max_int = whole(SUMS, "max_int");
    assert!(
        max_int.contains(
            "        if (i < n) {\n            acc = max(acc, (int)(x[i]));\n        }\n"
        ),
        "{max_int}"
    );
}

#[test]
fn what_is_not_one_fold_is_refused_with_the_reason() {
    let why = |k: &str| not_applicable(cuda(SUMS, k, "block_reduce", json!({})));
    expect!["`max_tree_bits` is not a block-reducible sum: its shared-memory tree ends in atomicMax; block_reduce takes trees of sums only"].assert_eq(&why("max_tree_bits"));
    expect!["`weighted_blocks` is not a block-reducible sum: the block adds `buf[0] * w[blockIdx.x]`, not `buf[0]` of a shared array (or `buf[0]` times or divided by what is the same in every thread)"].assert_eq(&why("weighted_blocks"));
    expect!["`tickets` is not a block-reducible sum: `atomicAdd(counter, 1)` is not a statement of its own: the atomic's old value is read"].assert_eq(&why("tickets"));
}

#[test]
fn a_warps_shuffle_sum_before_one_lanes_atomic_is_every_lanes_atomic() {
    expect![[r#"
        // A warp's shuffle sum, then one atomic per warp (the lane test as a mask).
        // @bench n = 1 << 20, 1013
        // @bench a: in f32[n]; b: in f32[n]; out: inout f32[1] ~ zeros
        // @bench grid = min(cdiv(n, 256), sms * 8); block = 256
        // @bench atol = 1e-1; rtol = 1e-3
        extern "C" __global__ void warp_dot(const float* a, const float* b, float* out, int n) {
            float acc = 0;
            for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
                float v = i < n ? a[i] * b[i] : 0.0f;
                acc += (v);
            }
    "#]]
    .assert_eq(&one(SUMS, "warp_dot"));
    let lane = one(SUMS, "warp_sumsq");
    assert!(!lane.contains("__shfl_xor_sync"), "{lane}");
    assert!(lane.contains("        acc += (s);\n"), "{lane}");
}

#[test]
fn a_collective_that_is_not_a_whole_warps_sum_is_not_read_as_one() {
    let why = |k: &str| not_applicable(cuda(SUMS, k, "block_reduce", json!({})));
    expect!["`warp_ballot_count` is not a block-reducible sum: the per-element code calls `__ballot_sync`; in a grid-stride loop the lanes of a warp leave at different trips, so no collective may stay inside it"].assert_eq(&why("warp_ballot_count"));
    // A half-warp sum counts lanes 0-15 of each warp and drops the rest: not every lane's
    // atomic, so the warp sum is not read as one; the block's own combine is kept instead,
    // and an element keeps its lane in the grid-stride loop, so the same lanes count.
    let half = whole(SUMS, "half_warp_sum");
    assert!(
        half.contains("for (int off = 8; off > 0; off >>= 1) v += __shfl_down_sync"),
        "{half}"
    );
}

#[test]
fn a_block_reduced_its_own_way_keeps_its_combine_and_sums_a_grid_stride_loop_first() {
    expect![[r#"
        // A block reduced its own way (shuffles, a shared slot per warp, the first warp's
        // shuffles) before one atomic per block; the value set under a guard, a mean's scale.
        // @bench n = 1 << 20, 1021
        // @bench a: in f32[n]; b: in f32[n]; out: inout f32[1] ~ zeros
        // @bench grid = min(cdiv(n, 256), sms * 8); block = 256
        // @bench atol = 1e-3; rtol = 1e-3
        extern "C" __global__ void block_shfl_mean(const float* a, const float* b, float* out, int n) {
            __shared__ float sums[8];
            unsigned int tid = threadIdx.x;
            float v = 0;
            for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
                if (i < n) v += (fabsf(a[i] - b[i]));
            }
            for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
            if (tid % 32 == 0) sums[tid / 32] = v;
            __syncthreads();
            if (tid < 32) {
                float t = tid < 8 ? sums[tid] : 0.0f;
                for (int o = 16; o > 0; o /= 2) t += __shfl_xor_sync(0xffffffffu, t, o);
                if (tid == 0) atomicAdd(out, t / n);
            }
        }"#]]
    .assert_eq(&whole(SUMS, "block_shfl_mean"));
    expect![[r#"
        // The same shape with a 64-bit index, the lane and warp declared after the value.
        // @bench n = 1 << 20, 1031
        // @bench x: in f32[n]; out: inout f32[1] ~ zeros
        // @bench grid = min(cdiv(n, 128), sms * 8); block = 128
        // @bench atol = 1e-1; rtol = 1e-3
        extern "C" __global__ void block_shfl_sum(const float* __restrict__ x, float* __restrict__ out, long n) {
            __shared__ float part[32];
            int lane = threadIdx.x & 31;
            int warp = threadIdx.x >> 5;
            float v = 0;
            for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
                v += (i < n ? x[i] : 0.0f);
            }
            for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffff, v, off);
            if (lane == 0) part[warp] = v;
            __syncthreads();
            if (warp == 0) {
                v = lane < (blockDim.x >> 5) ? part[lane] : 0.0f;
                for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffff, v, off);
                if (lane == 0) atomicAdd(out, v);
            }
        }"#]]
    .assert_eq(&whole(SUMS, "block_shfl_sum"));
    let out = cuda(SUMS, "block_shfl_sum", "block_reduce", json!({})).unwrap();
    assert_eq!(
        labels(&out)[0],
        "grid-stride sum, the block's own combine, one atomic per block, grid <= 4 * sms"
    );
}

#[test]
fn a_block_combine_that_is_not_a_plain_sum_is_refused() {
    let why = |k: &str| not_applicable(cuda(SUMS, k, "block_reduce", json!({})));
    expect!["`block_shfl_max` is not a block-reducible sum: the block adds `m`, not `buf[0]` of a shared array (or `buf[0]` times or divided by what is the same in every thread)"].assert_eq(&why("block_shfl_max"));
    expect!["`block_shfl_every_other` is not a block-reducible sum: the block adds `s`, not `buf[0]` of a shared array (or `buf[0]` times or divided by what is the same in every thread)"].assert_eq(&why("block_shfl_every_other"));
}
