use std::collections::BTreeMap;

use expect_test::expect;

use super::super::with_text;
use super::*;
use crate::syntax::Lang;

fn written(src: &str) -> Option<String> {
    with_text(Lang::Cuda, src, "k", &BTreeMap::new(), sizes_written_out).flatten()
}

#[test]
fn a_four_level_split_of_a_64_bit_index_becomes_one_divisor_and_the_row_s_splits() {
    let src = "template <int R>\n__global__ void k(const float* x, float* out, int N, int C, int H, int W) {\n    long long total = (long long)N * C * H * R * W * R;\n    long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n    if (o >= total) return;\n    int OW = W * R, OH = H * R;\n    int ow = o % OW;\n    int oh = (o / OW) % OH;\n    int c = (o / ((long long)OW * OH)) % C;\n    int n = o / ((long long)OW * OH * C);\n    out[o] = x[((long long)n * C + c) * OH * OW + oh * OW + ow];\n}\n";
    expect![[r#"
        template <int R>
        __global__ void k(const float* x, float* out, int N, int C, int H, int W) {
            long long total = (long long)N * C * H * R * W * R;
            long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x;
            if (o >= ((long long)N * C * H * R * W * R)) return;
            int OW = W * R, OH = H * R;
            int ow = o % (W * R);
            int oh = (o / (W * R)) % (H * R);
            int c = ((o / (W * R)) / ((long long)H * R)) % C;
            int n = ((o / (W * R)) / ((long long)H * R)) / ((long long)C);
            out[o] = x[((long long)n * C + c) * (H * R) * (W * R) + oh * (W * R) + ow];
        }
    "#]]
    .assert_eq(&written(src).expect("written out"));
}

#[test]
fn a_product_is_split_only_by_another_divisor_of_the_index() {
    // `i / (H * W)` with `i % W` beside it: split; the plane size in a local: read as
    // its value first.
    let pool = "__global__ void k(const float* x, float* y, int P, int H, int W) {\n    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;\n    const size_t plane = (size_t)H * W;\n    if (i >= P * plane) return;\n    int w = i % W;\n    size_t p = i / plane;\n    y[i] = x[p * plane + w];\n}\n";
    expect![[r#"
        __global__ void k(const float* x, float* y, int P, int H, int W) {
            size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
            const size_t plane = (size_t)H * W;
            if (i >= P * ((size_t)H * W)) return;
            int w = i % W;
            size_t p = (i / W) / ((size_t)H);
            y[i] = x[p * ((size_t)H * W) + w];
        }
    "#]]
    .assert_eq(&written(pool).expect("written out"));
    // No other divisor of `i` among the product's factors: the product stays whole.
    let alone = pool.replace("int w = i % W;", "int w = (i / 3) % W;");
    assert!(!written(&alone)
        .expect("the local is written out")
        .contains("(i / W)"));
}

#[test]
fn locals_that_may_differ_between_threads_stay() {
    let srcs = [
        // loaded from memory
        "__global__ void k(const int* dims, float* y, int n) {\n    int w = dims[0];\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = i % w;\n}\n",
        // written after its declaration
        "__global__ void k(float* y, int n, int W) {\n    int w = W;\n    if (n > 4) w = 2 * W;\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = i % w;\n}\n",
        // made of the thread's position
        "__global__ void k(float* y, int n, int W) {\n    int w = W + threadIdx.x;\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = i % w;\n}\n",
    ];
    for src in srcs {
        assert_eq!(written(src), None, "{src}");
    }
}
