use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{cuda, labels, not_applicable, show};
use crate::syntax::Lang;

const HISTOGRAM: &str = include_str!("../../../../../examples/histogram.cu");
const SCATTER: &str = include_str!("../../../../../tests/fixtures/rewrites/atomics/scatter.cu");
const SAXPY: &str = include_str!("../../../../../examples/saxpy.cu");
const REDUCE: &str = include_str!("../../../../../examples/reduce_sum.cu");

fn one(src: &str, kernel: &str) -> String {
    let out = cuda(
        src,
        kernel,
        "privatize_atomics",
        json!({ "blocks_per_sm": [4] }),
    )
    .unwrap_or_else(|e| panic!("{kernel}: {e}"));
    assert_eq!(out.len(), 1, "{:?}", labels(&out));
    show(Lang::Cuda, src, &out[0], kernel)
}

#[test]
fn a_byte_histogram_gets_a_shared_copy_per_block() {
    let out = cuda(HISTOGRAM, "histogram", "privatize_atomics", json!({})).unwrap();
    assert_eq!(
        labels(&out),
        [
            "hist in shared memory, grid <= 2 * sms",
            "hist in shared memory, grid <= 4 * sms",
            "hist in shared memory, grid <= 8 * sms"
        ]
    );
    expect![[r#"
        // @bench n = 1 << 26, 1000003
        // @bench data: in u8[n] ~ randint(0, 256); hist: inout u32[256] ~ zeros
        // @bench grid = min(cdiv(n, 256), sms * 4); block = 256
        extern "C" __global__ void histogram(const unsigned char* data, unsigned int* hist, int n) {
            __shared__ unsigned int hist_s[256];
            for (int bin = threadIdx.x; bin < 256; bin += blockDim.x) hist_s[bin] = 0;
            __syncthreads();
            for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
                atomicAdd(&hist_s[data[i]], 1u);
            }
            __syncthreads();
            for (int bin = threadIdx.x; bin < 256; bin += blockDim.x)
                if (hist_s[bin] != 0) atomicAdd(&hist[bin], hist_s[bin]);
        }"#]].assert_eq(&one(HISTOGRAM, "histogram"));
}

#[test]
fn a_bin_count_that_changes_between_cases_takes_dynamic_shared_memory() {
    expect![[r#"
        // A float histogram with a computed, clamped bin, pointer arithmetic, an early return,
        // and a bin count that changes between cases (a parameter holds it).
        // @bench n = 1 << 20, 3001; nbins = 100, 7
        // @bench x: in f32[n]; hist: inout i32[nbins] ~ zeros
        // @bench lo = -1.0; hi = 1.0
        // @bench grid = min(cdiv(n, 128), sms * 4); block = 128
        // @bench smem = nbins * 4
        extern "C" __global__ void histogram_range(const float* x, int* hist, int n, int nbins, float lo, float hi) {
            extern __shared__ int hist_s[];
            for (int bin = threadIdx.x; bin < nbins; bin += blockDim.x) hist_s[bin] = 0;
            __syncthreads();
            for (int idx = threadIdx.x + blockIdx.x * blockDim.x; idx < n; idx += blockDim.x * gridDim.x) {
                int b = (int)((x[idx] - lo) / (hi - lo) * nbins);
                b = min(max(b, 0), nbins - 1);
                atomicAdd(hist_s + b, 1);
            }
            __syncthreads();
            for (int bin = threadIdx.x; bin < nbins; bin += blockDim.x)
                if (hist_s[bin] != 0) atomicAdd(&hist[bin], hist_s[bin]);
        }"#]].assert_eq(&one(SCATTER, "histogram_range"));
}

#[test]
fn several_targets_each_get_a_copy() {
    expect![[r#"
        // Segment sums: float values scattered into 64 segments, and a count per segment.
        // @bench n = 1 << 20, 999; segs = 64
        // @bench seg: in i32[n] ~ randint(0, segs); val: in f32[n]
        // @bench sums: inout f32[segs] ~ zeros; counts: inout u32[segs] ~ zeros
        // @bench grid = min(cdiv(n, 256), sms * 4); block = 256
        // @bench atol = 1e-2; rtol = 1e-4
        extern "C" __global__ void segment_sum(int n, const int* __restrict__ seg, const float* __restrict__ val,
                                               float* sums, unsigned int* counts) {
            __shared__ unsigned int counts_s[64];
            for (int bin = threadIdx.x; bin < 64; bin += blockDim.x) counts_s[bin] = 0;
            __shared__ float sums_s[64];
            for (int bin = threadIdx.x; bin < 64; bin += blockDim.x) sums_s[bin] = 0;
            __syncthreads();
            for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
                int s = seg[i];
                atomicAdd(&sums_s[s], val[i]);
                atomicAdd(&counts_s[s], 1u);
            }
            __syncthreads();
            for (int bin = threadIdx.x; bin < 64; bin += blockDim.x)
                if (counts_s[bin] != 0) atomicAdd(&counts[bin], counts_s[bin]);
            for (int bin = threadIdx.x; bin < 64; bin += blockDim.x)
                if (sums_s[bin] != 0) atomicAdd(&sums[bin], sums_s[bin]);
        }"#]].assert_eq(&one(SCATTER, "segment_sum"));
}

#[test]
fn what_a_private_copy_cannot_do_is_refused_with_the_reason() {
    let why = |src: &str, k: &str| not_applicable(cuda(src, k, "privatize_atomics", json!({})));
    expect!["`capped_histogram` cannot privatize its atomics: `hist` is used other than as an atomicAdd address (in `if (hist[key[i]] < 10) atomicAdd(&hist[key[i]], 1);`); its private copy would not see that"].assert_eq(&why(SCATTER, "capped_histogram"));
    expect!["`bucket_append` cannot privatize its atomics: the value of `atomicAdd(&fill[key[i]], 1u)` is used; a private copy would return a per-block count"].assert_eq(&why(SCATTER, "bucket_append"));
    expect!["`bucket_max` cannot privatize its atomics: `atomicMax(&best[key[i]], v[i])` is not an atomicAdd; a private copy needs a zero to start from"].assert_eq(&why(SCATTER, "bucket_max"));
    expect!["`wide_histogram` cannot privatize its atomics: `hist` has 1048576 elements (4096 KiB), more than the 48 KiB of shared memory a block can count on"].assert_eq(&why(SCATTER, "wide_histogram"));
    expect!["`saxpy` has no `atomicAdd(&h[e], v)` on a pointer parameter"]
        .assert_eq(&why(SAXPY, "saxpy"));
    expect!["`reduce_tree` is not a 1-D kernel with a bounds check: `int i = blockIdx.x * BLOCK + threadIdx.x;` is not the 1-D index `blockIdx.x * blockDim.x + threadIdx.x`; privatize_atomics needs `int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }` (or `if (i >= n) return;`)"].assert_eq(&why(REDUCE, "reduce_tree"));
    let capped = HISTOGRAM.replace("grid = cdiv(n, 256)", "grid = min(cdiv(n, 256), sms * 2)");
    expect!["`histogram`'s grid = min(cdiv(n, 256), sms * 2) already depends on `sms`"]
        .assert_eq(&why(&capped, "histogram"));
    let wide = HISTOGRAM
        .replace("unsigned int* hist", "long long* hist")
        .replace("hist: inout u32[256]", "hist: inout i64[256]")
        .replace("1u);", "1LL);");
    expect!["`histogram` cannot privatize its atomics: `hist` holds `long long`; shared-memory atomicAdd takes int, unsigned, unsigned long long, float or double"].assert_eq(&why(&wide, "histogram"));
}
