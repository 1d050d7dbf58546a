use std::collections::BTreeMap;

use expect_test::{expect, Expect};

use super::super::with_text;
use super::*;
use crate::syntax::Lang;

fn inlined(src: &str) -> Option<String> {
    with_text(Lang::Cuda, src, "k", &BTreeMap::new(), inlined_calls).flatten()
}

fn check(src: &str, want: Expect) {
    want.assert_eq(&inlined(src).expect("the calls are written out"));
}

#[test]
fn a_helper_returning_its_local_becomes_the_declared_name() {
    check(
        "__device__ float col_max(const float* x, int rows, int cols, int c) {\n    float m = -INFINITY;\n    for (int r = 0; r < rows; ++r) m = fmaxf(m, x[r * cols + c]);\n    return m;\n}\n\n__global__ void k(const float* x, float* y, int rows, int cols) {\n    int c = blockIdx.x * blockDim.x + threadIdx.x;\n    if (c >= cols) return;\n    float top = col_max(x, rows, cols, c);\n    for (int r = 0; r < rows; ++r) y[r * cols + c] = x[r * cols + c] - top;\n}\n",
        expect![[r#"
            __device__ float col_max(const float* x, int rows, int cols, int c) {
                float m = -INFINITY;
                for (int r = 0; r < rows; ++r) m = fmaxf(m, x[r * cols + c]);
                return m;
            }

            __global__ void k(const float* x, float* y, int rows, int cols) {
                int c = blockIdx.x * blockDim.x + threadIdx.x;
                if (c >= cols) return;
                float top = -INFINITY;
                for (int r_2 = 0; r_2 < rows; ++r_2) top = fmaxf(top, x[r_2 * cols + c]);
                for (int r = 0; r < rows; ++r) y[r * cols + c] = x[r * cols + c] - top;
            }
        "#]],
    );
}

#[test]
fn arguments_that_are_not_names_of_the_same_type_become_locals() {
    // A row pointer built at the call, a size_t index given to an int parameter, a
    // parameter the helper steps, and a result of another type: each as the call did it.
    check(
        "static __device__ __forceinline__ float row_sum(const float* __restrict__ row, int n, int stride) {\n  float s = 0.f;\n  while (n-- > 0) { s += *row; row += stride; }\n  return s * 0.5f;\n}\n__global__ void k(const float* x, double* out, size_t i, int n) {\n  double total = row_sum(x + i * n, n, 1);\n  out[i] = total;\n}\n",
        expect![[r#"
            static __device__ __forceinline__ float row_sum(const float* __restrict__ row, int n, int stride) {
              float s = 0.f;
              while (n-- > 0) { s += *row; row += stride; }
              return s * 0.5f;
            }
            __global__ void k(const float* x, double* out, size_t i, int n) {
              const float* __restrict__ row = x + i * n;
              int n_2 = n;
              int stride = 1;
              float s = 0.f;
              while (n_2-- > 0) { s += *row; row += stride; }
              double total = (float)(s * 0.5f);
              out[i] = total;
            }
        "#]],
    );
}

#[test]
fn void_helpers_and_helpers_calling_helpers_are_written_out_in_rounds() {
    check(
        "__device__ float sq(float v) { return v * v; }\n__device__ float norm2(const float* p, int n) {\n    float acc = 0.0f;\n    for (int j = 0; j < n; ++j) {\n        float t = sq(p[j]);\n        acc += t;\n    }\n    return acc;\n}\n__device__ void scale_row(const float* p, float* q, int n) {\n    float inv = rsqrtf(norm2(p, n) + 1e-6f);\n    for (int j = 0; j < n; ++j) q[j] = p[j] * inv;\n}\n__global__ void k(const float* x, float* y, int rows, int n) {\n    int r = blockIdx.x * blockDim.x + threadIdx.x;\n    if (r < rows) {\n        scale_row(x + (size_t)r * n, y + (size_t)r * n, n);\n    }\n}\n",
        expect![[r#"
            __device__ float sq(float v) { return v * v; }
            __device__ float norm2(const float* p, int n) {
                float acc = 0.0f;
                for (int j = 0; j < n; ++j) {
                    float t = sq(p[j]);
                    acc += t;
                }
                return acc;
            }
            __device__ void scale_row(const float* p, float* q, int n) {
                float inv = rsqrtf(norm2(p, n) + 1e-6f);
                for (int j = 0; j < n; ++j) q[j] = p[j] * inv;
            }
            __global__ void k(const float* x, float* y, int rows, int n) {
                int r = blockIdx.x * blockDim.x + threadIdx.x;
                if (r < rows) {
                    const float* p = x + (size_t)r * n;
                    float* q = y + (size_t)r * n;
                    float inv = rsqrtf(norm2(p, n) + 1e-6f);
                    for (int j = 0; j < n; ++j) q[j] = p[j] * inv;
                }
            }
        "#]],
    );
}

#[test]
fn calls_it_cannot_write_out_are_left_as_written() {
    let refused = [
        // an early return inside the helper
        "__device__ float f(const float* p, int n) {\n    if (n == 0) return 0.f;\n    float s = 0.f;\n    for (int j = 0; j < n; ++j) s += p[j];\n    return s;\n}\n__global__ void k(const float* x, float* y, int n) {\n    float s = f(x, n);\n    y[0] = s;\n}\n",
        // a call inside an expression
        "__device__ float f(const float* p, int n) {\n    float s = 0.f;\n    for (int j = 0; j < n; ++j) s += p[j];\n    return s;\n}\n__global__ void k(const float* x, float* y, int n) {\n    y[0] = 2.f * f(x, n);\n}\n",
        // a call that is the body of an `if` without braces
        "__device__ void f(float* p, int n) {\n    for (int j = 0; j < n; ++j) p[j] = 0.f;\n}\n__global__ void k(float* y, int n) {\n    if (n > 4) f(y, n);\n}\n",
        // a reference parameter, a template, and a recursive helper
        "__device__ void f(float& a, float b) { a += b; }\ntemplate <int N> __device__ float g(const float* p) {\n    float s = 0.f;\n    for (int j = 0; j < N; ++j) s += p[j];\n    return s;\n}\n__device__ int h(int n) { int r = n; r = n > 1 ? h(n - 1) : 1; return r; }\n__global__ void k(const float* x, float* y, int n) {\n    float a = 0.f;\n    f(a, x[0]);\n    float s = g<4>(x);\n    int m = h(n);\n    y[0] = a + s + m;\n}\n",
        // a __global__ function called as a helper is not one
        "__global__ void f(float* p) { p[0] = 1.f; }\n__global__ void k(float* y) {\n    f(y);\n}\n",
    ];
    for src in refused {
        assert_eq!(inlined(src), None, "{src}");
    }
}
