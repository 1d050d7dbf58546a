use std::collections::BTreeMap;

use expect_test::expect;

use super::super::check::testing::{cuda, labels};
use super::super::with_text;
use super::*;

fn held(src: &str) -> Option<String> {
    with_text(Lang::Cuda, src, "k", &BTreeMap::new(), in_registers).flatten()
}

#[test]
fn an_output_summed_in_place_is_summed_in_a_register_started_from_its_first_store() {
    let src = "__global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        C[row * N + col] = 0.0f;
        for (int k = 0; k < K; k++) C[row*N + col] += A[row * K + k] * B[k * N + col];
    }
}
";
    expect![[r#"
        __global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {
            int row = blockIdx.y * blockDim.y + threadIdx.y;
            int col = blockIdx.x * blockDim.x + threadIdx.x;
            if (row < M && col < N) {
                float C_sum = 0.0f;
                for (int k = 0; k < K; k++) C_sum += A[row * K + k] * B[k * N + col];
                C[row * N + col] = C_sum;
            }
        }
    "#]]
    .assert_eq(&held(src).unwrap());
}

#[test]
fn without_a_store_before_the_loop_the_register_starts_from_the_element() {
    // Doubles through a row pointer, the outermost of two loops, a read as well as a write.
    let src = "__global__ void k(const double* x, double* y, int rows, int n, int taps) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    double* out = y + r;
    for (int j = 0; j < n; ++j) {
        for (int t = 0; t < taps; ++t) {
            out[0] = fmax(out[0], x[r * n + j] * t);
        }
    }
}
";
    expect![[r#"
        __global__ void k(const double* x, double* y, int rows, int n, int taps) {
            int r = blockIdx.x * blockDim.x + threadIdx.x;
            if (r >= rows) return;
            double* out = y + r;
            double out_sum = out[0];
            for (int j = 0; j < n; ++j) {
                for (int t = 0; t < taps; ++t) {
                    out_sum = fmax(out_sum, x[r * n + j] * t);
                }
            }
            out[0] = out_sum;
        }
    "#]]
    .assert_eq(&held(src).unwrap());
}

#[test]
fn elements_that_move_alias_or_escape_stay_in_memory() {
    let kernel = |body: &str| {
        format!(
            "__global__ void k(const float* x, float* y, int* c, int n) {{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i >= n) return;\n{body}\n}}\n"
        )
    };
    for body in [
        // The index moves with the loop.
        "    for (int j = 0; j < n; j++) y[j] += x[i];",
        "    int s = i;\n    for (int j = 0; j < n; j++) { y[s] += x[j]; s += 1; }",
        // Another element of the same buffer is read in the loop.
        "    for (int j = 1; j < n; j++) y[i] += y[i - 1];",
        // Only read: nothing to hold.
        "    float t = 0;\n    for (int j = 0; j < n; j++) t += y[i];\n    y[i] = t;",
        // The element's address is taken for an atomic, the pointer passed to a call.
        "    for (int j = 0; j < n; j++) { y[i] += x[j]; atomicAdd(&y[i], 1.0f); }",
        "    for (int j = 0; j < n; j++) { y[i] += x[j]; __stcs(y, 0.0f); }",
        // The loop can leave the kernel before the store after it would run.
        "    for (int j = 0; j < n; j++) { y[i] += x[j]; if (x[j] < 0) return; }",
        // An index that reads memory.
        "    for (int j = 0; j < n; j++) y[c[i]] += x[j];",
        // The index names a local the loop declares anew each trip (a staged tile's column).
        "    for (int j = 0; j < n; j++) { int col = i + j; y[col] = x[j]; }",
        // The write happens only under a condition inside the loop.
        "    for (int j = 0; j < n; j++) { if (x[j] > 0) y[i] += x[j]; }",
        // Other threads may look at the element between iterations.
        "    for (int j = 0; j < n; j++) { y[i] += x[j]; __syncthreads(); }",
        "    for (int j = 0; j < n; j++) { y[i] += x[j]; __threadfence(); }",
    ] {
        assert_eq!(held(&kernel(body)), None, "{body}");
    }
}

#[test]
fn tiling_takes_a_matmul_that_sums_into_its_output() {
    let src = "// @bench M = 64, 33; N = 48, 17; K = 40, 9
// @bench A: in f32[M, K]; B: in f32[K, N]; C: out f32[M, N]
// @bench grid = (cdiv(N, 16), cdiv(M, 16)); block = (16, 16)
// @bench rtol = 1e-4
__global__ void k(const float* A, const float* B, float* C, int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        C[row * N + col] = 0.0f;
        for (int k = 0; k < K; k++) C[row * N + col] += A[row * K + k] * B[k * N + col];
    }
}
";
    let out = cuda(src, "k", "tile_matmul", serde_json::json!({"tiles": [16], "register_blocks": [], "adjacent_blocks": [], "tensor_cores": [], "staged_blocks": []})).unwrap();
    expect![[r#"["16x16 shared tiles, block (16, 16)"]"#]]
        .assert_eq(&format!("{:?}", labels(&out)));
    assert!(out[0].text.contains("C_sum += a_tile["), "{}", out[0].text);
}
