use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{cuda, labels, not_applicable, show};
use crate::syntax::Lang;

const MATMUL: &str = include_str!("../../../../../examples/matmul_naive.cu");
const FIXTURES: &str = include_str!("../../../../../tests/fixtures/rewrites/tiles/matmuls.cu");
const SAXPY: &str = include_str!("../../../../../examples/saxpy.cu");
const TRANSPOSE: &str = include_str!("../../../../../examples/transpose.cu");
const BATCHED: &str =
    include_str!("../../../../../tests/fixtures/rewrites/tiles/batched_matmuls.cu");

fn one(src: &str, kernel: &str, params: serde_json::Value) -> String {
    let out = cuda(src, kernel, "tile_matmul", params).unwrap_or_else(|e| panic!("{kernel}: {e}"));
    assert_eq!(out.len(), 1, "{:?}", labels(&out));
    show(Lang::Cuda, src, &out[0], kernel)
}

#[test]
fn the_naive_matmul_gets_tiles_and_register_blocks() {
    let out = cuda(MATMUL, "matmul", "tile_matmul", json!({})).unwrap();
    assert_eq!(
        labels(&out),
        [
            "16x16 shared tiles, block (16, 16)",
            "32x32 shared tiles, block (32, 32)",
            "4x4 register block per thread, 64x64x16 tiles, block (16, 16)",
            "8x8 register block per thread, 128x128x8 tiles, block (16, 16)",
            "4x4 register block per thread (adjacent outputs, A transposed), 64x64x16 tiles, block (16, 16)",
            "8x4 register block per thread (adjacent outputs, A transposed, two buffers filled through registers), 128x64x16 tiles, block (16, 16)",
            "4x4 register block per thread (adjacent outputs, A transposed, two buffers filled through registers), 64x64x32 tiles, block (16, 16)"
        ]
    );
    expect![[r#"
        // @bench m = 1024, 67; n = 1024, 45; k = 1024, 33
        // @bench a: in f32[m, k]; b: in f32[k, n]; c: out f32[m, n]
        // @bench grid = (cdiv(n, 16), cdiv(m, 16)); block = (16, 16)
        // @bench flops = 2 * m * n * k
        // @bench rtol = 1e-3
        extern "C" __global__ void matmul(int m, int n, int k, const float* a, const float* b, float* c) {
            __shared__ float a_tile[16][16 + 1];
            __shared__ float b_tile[16][16 + 1];
            int row = blockIdx.y * 16 + threadIdx.y;
            int col = blockIdx.x * 16 + threadIdx.x;
            float acc = 0.0f;
            for (int k0 = 0; k0 < k; k0 += 16) {
                for (int e = threadIdx.y * 16 + threadIdx.x; e < 256; e += 256) {
                    int row = blockIdx.y * 16 + e / 16;
                    int i = k0 + e % 16;
                    if (row < m && i < k) a_tile[e / 16][e % 16] = a[row * k + i];
                }
                for (int e = threadIdx.y * 16 + threadIdx.x; e < 256; e += 256) {
                    int col = blockIdx.x * 16 + e % 16;
                    int i = k0 + e / 16;
                    if (col < n && i < k) b_tile[e / 16][e % 16] = b[i * n + col];
                }
                __syncthreads();
                for (int kk = 0; kk < 16 && k0 + kk < k; ++kk) {
                    acc += a_tile[threadIdx.y][kk] * b_tile[kk][threadIdx.x];
                }
                __syncthreads();
            }
            if (row < m && col < n) {
                c[row * n + col] = acc;
            }
        }"#]].assert_eq(&one(MATMUL, "matmul", json!({"tiles": [16], "register_blocks": [], "adjacent_blocks": [], "tensor_cores": [], "staged_blocks": []})));
}

#[test]
fn a_register_block_gives_each_output_its_own_accumulator() {
    expect![[r#"
        // @bench m = 1024, 67; n = 1024, 45; k = 1024, 33
        // @bench a: in f32[m, k]; b: in f32[k, n]; c: out f32[m, n]
        // @bench grid = (cdiv(n, 32), cdiv(m, 32)); block = (16, 16)
        // @bench flops = 2 * m * n * k
        // @bench rtol = 1e-3
        extern "C" __global__ void matmul(int m, int n, int k, const float* a, const float* b, float* c) {
            __shared__ float a_tile[32][16 + 1];
            __shared__ float b_tile[16][32 + 1];
            int row_0 = blockIdx.y * 32 + threadIdx.y;
            int row_1 = blockIdx.y * 32 + threadIdx.y + 16;
            int col_0 = blockIdx.x * 32 + threadIdx.x;
            int col_1 = blockIdx.x * 32 + threadIdx.x + 16;
            float acc_0_0 = 0.0f;
            float acc_0_1 = 0.0f;
            float acc_1_0 = 0.0f;
            float acc_1_1 = 0.0f;
            for (int k0 = 0; k0 < k; k0 += 16) {
                for (int e = threadIdx.y * 16 + threadIdx.x; e < 512; e += 256) {
                    int row = blockIdx.y * 32 + e / 16;
                    int i = k0 + e % 16;
                    if (row < m && i < k) a_tile[e / 16][e % 16] = a[row * k + i];
                }
                for (int e = threadIdx.y * 16 + threadIdx.x; e < 512; e += 256) {
                    int col = blockIdx.x * 32 + e % 32;
                    int i = k0 + e / 32;
                    if (col < n && i < k) b_tile[e / 32][e % 32] = b[i * n + col];
                }
                __syncthreads();
                for (int kk = 0; kk < 16 && k0 + kk < k; ++kk) {
                    {
                        acc_0_0 += a_tile[threadIdx.y][kk] * b_tile[kk][threadIdx.x];
                    }
                    {
                        acc_0_1 += a_tile[threadIdx.y][kk] * b_tile[kk][threadIdx.x + 16];
                    }
                    {
                        acc_1_0 += a_tile[threadIdx.y + 16][kk] * b_tile[kk][threadIdx.x];
                    }
                    {
                        acc_1_1 += a_tile[threadIdx.y + 16][kk] * b_tile[kk][threadIdx.x + 16];
                    }
                }
                __syncthreads();
            }
            {
                int row = row_0; int col = col_0;
                if (row < m && col < n) {
                    c[row * n + col] = acc_0_0;
                }
            }
            {
                int row = row_0; int col = col_1;
                if (row < m && col < n) {
                    c[row * n + col] = acc_0_1;
                }
            }
            {
                int row = row_1; int col = col_0;
                if (row < m && col < n) {
                    c[row * n + col] = acc_1_0;
                }
            }
            {
                int row = row_1; int col = col_1;
                if (row < m && col < n) {
                    c[row * n + col] = acc_1_1;
                }
            }
        }"#]].assert_eq(&one(MATMUL, "matmul", json!({"tiles": [], "register_blocks": [2], "adjacent_blocks": [], "tensor_cores": [], "staged_blocks": []})));
}

#[test]
fn a_transposed_operand_is_loaded_along_k_and_the_epilogue_keeps_its_reads() {
    expect![[r#"
        // C = alpha * A * B^T + beta * C in doubles: B is stored transposed, an early return,
        // the column index declared first.
        // @bench m = 300, 33; n = 200, 70; k = 150, 17
        // @bench a: in f64[m, k]; b: in f64[n, k]; c: inout f64[m, n]
        // @bench alpha = 1.5; beta = -0.5
        // @bench grid = (cdiv(n, 16), cdiv(m, 16)); block = (16, 16)
        extern "C" __global__ void gemm_nt(int m, int n, int k, double alpha, const double* __restrict__ a,
                                           const double* __restrict__ b, double beta, double* __restrict__ c) {
            __shared__ double a_tile[16][16 + 1];
            __shared__ double b_tile[16][16 + 1];
            const int i = blockIdx.y * 16 + threadIdx.y;
            const int j = blockIdx.x * 16 + threadIdx.x;
            double sum = 0.0;
            for (int k0 = 0; k0 < k; k0 += 16) {
                for (int e = threadIdx.y * 16 + threadIdx.x; e < 256; e += 256) {
                    const int i = blockIdx.y * 16 + e / 16;
                    int p = k0 + e % 16;
                    if (!(i >= m) && p < k) a_tile[e / 16][e % 16] = a[(size_t)i * k + p];
                }
                for (int e = threadIdx.y * 16 + threadIdx.x; e < 256; e += 256) {
                    const int j = blockIdx.x * 16 + e / 16;
                    int p = k0 + e % 16;
                    if (!(j >= n) && p < k) b_tile[e % 16][e / 16] = b[(size_t)j * k + p];
                }
                __syncthreads();
                for (int kk = 0; kk < 16 && k0 + kk < k; ++kk) {
                    sum += a_tile[threadIdx.y][kk] * b_tile[kk][threadIdx.x];
                }
                __syncthreads();
            }
            if (!(i >= m || j >= n)) {
                c[(size_t)i * n + j] = alpha * sum + beta * c[(size_t)i * n + j];
            }
        }"#]].assert_eq(&one(FIXTURES, "gemm_nt", json!({"tiles": [16], "register_blocks": [], "adjacent_blocks": [], "tensor_cores": [], "staged_blocks": []})));
}

#[test]
fn what_tiles_cannot_serve_is_refused_with_the_reason() {
    let why = |src: &str, k: &str| not_applicable(cuda(src, k, "tile_matmul", json!({})));
    expect!["`conv_rows` cannot be tiled: `x[row * (n + taps) + col + t]` moves with both the row and the column; no tile serves it"].assert_eq(&why(FIXTURES, "conv_rows"));
    expect!["`ragged_rows` cannot be tiled: the bounds of `for (int i = 0; i < len[row]; ++i) s += a[row * k + i] * b[i * n + col];` name more than kernel parameters; every thread of a tile must run the same steps"].assert_eq(&why(FIXTURES, "ragged_rows"));
    expect!["`saxpy` is not a 2-D one-thread-per-output kernel: `if (i < n) y[i] = a * x[i] + y[i];` comes before the thread indices; tile_matmul needs `int col = blockIdx.x * blockDim.x + threadIdx.x; int row = blockIdx.y * blockDim.y + threadIdx.y; if (row < m && col < n) { ... }` (or `if (row >= m || col >= n) return;`) with a loop over k"].assert_eq(&why(SAXPY, "saxpy"));
    expect!["`transpose` cannot be tiled: the guarded body has no `for` loop over k"]
        .assert_eq(&why(TRANSPOSE, "transpose"));
    let writes = MATMUL.replace(
        "acc += a[row * k + i] * b[i * n + col];",
        "acc += a[row * k + i] * b[i * n + col];\n            c[row * n + i % n] = acc;",
    );
    expect![
        "`matmul` cannot be tiled: `c[row * n + i % n]` writes global memory inside the k loop"
    ]
    .assert_eq(&why(&writes, "matmul"));
    let pre = MATMUL.replace(
        "float acc = 0.0f;",
        "const float* c_row = c + row * n;\n            float acc = c_row[col];",
    );
    expect!["`matmul` cannot be tiled: `c_row[col]` reads global memory before the k loop; only a read `p[i]` of a pointer every thread may read can be guarded by the bounds check"].assert_eq(&why(&pre, "matmul"));
    let deref = MATMUL.replace("float acc = 0.0f;", "float acc = *(c + row * n + col);");
    expect!["`matmul` cannot be tiled: `*(c + row * n + col)` reads global memory before the k loop; only a read `p[i]` of a pointer every thread may read can be guarded by the bounds check"].assert_eq(&why(&deref, "matmul"));
}

#[test]
fn a_float_multiply_add_within_a_loose_tolerance_also_gets_3xtf32_tensor_cores() {
    let loose = MATMUL.replace("rtol = 1e-3", "atol = 1e-3; rtol = 1e-3");
    let out = cuda(&loose, "matmul", "tile_matmul", json!({})).unwrap();
    assert_eq!(out.len(), 10, "{:?}", labels(&out));
    expect![[r#"
        // @bench m = 1024, 67; n = 1024, 45; k = 1024, 33
        // @bench a: in f32[m, k]; b: in f32[k, n]; c: out f32[m, n]
        // @bench grid = (cdiv(n, 64), cdiv(m, 64)); block = (128, 1)
        // @bench flops = 2 * m * n * k
        // @bench atol = 1e-3; rtol = 1e-3
        // @bench smem = 73728
        extern "C" __global__ void matmul(int m, int n, int k, const float* a, const float* b, float* c) {
            // 3xTF32 on the tensor cores: each f32 operand split into a TF32 part and the rest;
            // tiles staged by cp.async, a fresh accumulator per k tile added in f32
            extern __shared__ __align__(16) float4 mma_smem[];
            float* a_tiles = reinterpret_cast<float*>(mma_smem);
            float* b_tiles = a_tiles + 9216;
            const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
            const int group = lane / 4, tig = lane % 4;
            const int wm0 = (warp / 2) * 32, wn0 = (warp % 2) * 32;
            float d[2][4][4];
            #pragma unroll
            for (int tm = 0; tm < 2; ++tm)
                #pragma unroll
                for (int tn = 0; tn < 4; ++tn)
                    for (int h = 0; h < 4; ++h) d[tm][tn][h] = 0.0f;
            auto fill = [&](int slot, int k0) {
                bool a_inside = true;
                { int row = blockIdx.y * 64 + 63; int i = k0 + 31; a_inside = a_inside && (row < m) && (i < k); }
                if (a_inside) {
                    #pragma unroll
                    for (int chunk = 0; chunk < 4; ++chunk) {
                        const int e = threadIdx.x + chunk * 128;
                        const int r = e / 8, q = e % 8 * 4;
                        float* dst = a_tiles + slot * 2304 + r * 36 + q;
                        int row = blockIdx.y * 64 + r; int i = k0 + q;
                        const float* p = &(a[row * k + i]);
                        if ((reinterpret_cast<unsigned long long>(p) & 15) == 0) {
                            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(p));
                        } else {
                            #pragma unroll
                            for (int j = 0; j < 4; ++j)
                                asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" :: "r"((unsigned)__cvta_generic_to_shared(dst + j)), "l"(p + j));
                        }
                    }
                } else {
                    #pragma unroll
                    for (int chunk = 0; chunk < 4; ++chunk) {
                        const int e = threadIdx.x + chunk * 128;
                        const int r = e / 8, q = e % 8 * 4;
                        float* dst = a_tiles + slot * 2304 + r * 36 + q;
                        bool full = true;
                        const float* p = a;
                        #pragma unroll
                        for (int j = 0; j < 4; ++j) {
                            int row = blockIdx.y * 64 + r; int i = k0 + q + j;
                            full = full && (row < m && i < k);
                            if (j == 0) p = &(a[row * k + i]);
                        }
                        if (full && (reinterpret_cast<unsigned long long>(p) & 15) == 0) {
                            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(p));
                        } else {
                            #pragma unroll
                            for (int j = 0; j < 4; ++j) {
                                int row = blockIdx.y * 64 + r; int i = k0 + q + j;
                                const bool ok = row < m && i < k;
                                asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"((unsigned)__cvta_generic_to_shared(dst + j)), "l"(ok ? &(a[row * k + i]) : a), "r"(ok ? 4 : 0));
                            }
                        }
                    }
                }
                bool b_inside = true;
                { int col = blockIdx.x * 64 + 63; int i = k0 + 31; b_inside = b_inside && (col < n) && (i < k); }
                if (b_inside) {
                    #pragma unroll
                    for (int chunk = 0; chunk < 4; ++chunk) {
                        const int e = threadIdx.x + chunk * 128;
                        const int r = e / 16, q = e % 16 * 4;
                        float* dst = b_tiles + slot * 2304 + r * 72 + q;
                        int col = blockIdx.x * 64 + q; int i = k0 + r;
                        const float* p = &(b[i * n + col]);
                        if ((reinterpret_cast<unsigned long long>(p) & 15) == 0) {
                            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(p));
                        } else {
                            #pragma unroll
                            for (int j = 0; j < 4; ++j)
                                asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" :: "r"((unsigned)__cvta_generic_to_shared(dst + j)), "l"(p + j));
                        }
                    }
                } else {
                    #pragma unroll
                    for (int chunk = 0; chunk < 4; ++chunk) {
                        const int e = threadIdx.x + chunk * 128;
                        const int r = e / 16, q = e % 16 * 4;
                        float* dst = b_tiles + slot * 2304 + r * 72 + q;
                        bool full = true;
                        const float* p = b;
                        #pragma unroll
                        for (int j = 0; j < 4; ++j) {
                            int col = blockIdx.x * 64 + q + j; int i = k0 + r;
                            full = full && (col < n && i < k);
                            if (j == 0) p = &(b[i * n + col]);
                        }
                        if (full && (reinterpret_cast<unsigned long long>(p) & 15) == 0) {
                            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(p));
                        } else {
                            #pragma unroll
                            for (int j = 0; j < 4; ++j) {
                                int col = blockIdx.x * 64 + q + j; int i = k0 + r;
                                const bool ok = col < n && i < k;
                                asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"((unsigned)__cvta_generic_to_shared(dst + j)), "l"(ok ? &(b[i * n + col]) : b), "r"(ok ? 4 : 0));
                            }
                        }
                    }
                }
            };
            const int k_tiles = (int)((k + 31) / 32);
            for (int kt = 0; kt < 3; ++kt) {
                if (kt < k_tiles) fill(kt, kt * 32);
                asm volatile("cp.async.commit_group;\n" ::);
            }
            for (int kt = 0; kt < k_tiles; ++kt) {
                asm volatile("cp.async.wait_group 2;\n" ::);
                __syncthreads();
                if (kt + 3 < k_tiles) fill((kt + 3) % 4, (kt + 3) * 32);
                asm volatile("cp.async.commit_group;\n" ::);
                const float* a_cur = a_tiles + (kt % 4) * 2304;
                const float* b_cur = b_tiles + (kt % 4) * 2304;
                float t[2][4][4];
                #pragma unroll
                for (int tm = 0; tm < 2; ++tm)
                    #pragma unroll
                    for (int tn = 0; tn < 4; ++tn)
                        for (int h = 0; h < 4; ++h) t[tm][tn][h] = 0.0f;
                #pragma unroll
                for (int ks = 0; ks < 32; ks += 8) {
                    unsigned a_hi[2][4], a_lo[2][4], b_hi[4][2], b_lo[4][2];
                    #pragma unroll
                    for (int tm = 0; tm < 2; ++tm) {
                        unsigned frag[4];
                        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n" : "=r"(frag[0]), "=r"(frag[1]), "=r"(frag[2]), "=r"(frag[3]) : "r"((unsigned)__cvta_generic_to_shared(&a_cur[(wm0 + tm * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * 36 + ks + (lane >> 4) * 4])));
                        #pragma unroll
                        for (int h = 0; h < 4; ++h) {
                            const float v = __uint_as_float(frag[h]);
                            a_hi[tm][h] = __float_as_uint(v);
                            a_lo[tm][h] = __float_as_uint(v - __uint_as_float(__float_as_uint(v) & 0xffffe000u));
                        }
                    }
                    #pragma unroll
                    for (int tn = 0; tn < 4; ++tn) {
                        #pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const float v = b_cur[(ks + tig + h * 4) * 72 + wn0 + tn * 8 + group];
                            b_hi[tn][h] = __float_as_uint(v);
                            b_lo[tn][h] = __float_as_uint(v - __uint_as_float(__float_as_uint(v) & 0xffffe000u));
                        }
                    }
                    #pragma unroll
                    for (int tm = 0; tm < 2; ++tm)
                        #pragma unroll
                        for (int tn = 0; tn < 4; ++tn) {
                            asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                                : "+f"(t[tm][tn][0]), "+f"(t[tm][tn][1]), "+f"(t[tm][tn][2]), "+f"(t[tm][tn][3])
                                : "r"(a_lo[tm][0]), "r"(a_lo[tm][1]), "r"(a_lo[tm][2]), "r"(a_lo[tm][3]), "r"(b_hi[tn][0]), "r"(b_hi[tn][1]));
                            asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                                : "+f"(t[tm][tn][0]), "+f"(t[tm][tn][1]), "+f"(t[tm][tn][2]), "+f"(t[tm][tn][3])
                                : "r"(a_hi[tm][0]), "r"(a_hi[tm][1]), "r"(a_hi[tm][2]), "r"(a_hi[tm][3]), "r"(b_lo[tn][0]), "r"(b_lo[tn][1]));
                            asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                                : "+f"(t[tm][tn][0]), "+f"(t[tm][tn][1]), "+f"(t[tm][tn][2]), "+f"(t[tm][tn][3])
                                : "r"(a_hi[tm][0]), "r"(a_hi[tm][1]), "r"(a_hi[tm][2]), "r"(a_hi[tm][3]), "r"(b_hi[tn][0]), "r"(b_hi[tn][1]));
                        }
                }
                #pragma unroll
                for (int tm = 0; tm < 2; ++tm)
                    #pragma unroll
                    for (int tn = 0; tn < 4; ++tn)
                        for (int h = 0; h < 4; ++h) d[tm][tn][h] += t[tm][tn][h];
            }
            asm volatile("cp.async.wait_group 0;\n" ::);
            #pragma unroll
            for (int tm = 0; tm < 2; ++tm)
                #pragma unroll
                for (int tn = 0; tn < 4; ++tn)
                    #pragma unroll
                    for (int h = 0; h < 4; ++h) {
                        int row = blockIdx.y * 64 + wm0 + tm * 16 + group + (h >> 1) * 8;
                        int col = blockIdx.x * 64 + wn0 + tn * 8 + tig * 2 + (h & 1);
                        float acc = 0.0f;
                        acc = d[tm][tn][h];
                        if (row < m && col < n) {
                            c[row * n + col] = acc;
                        }
                    }
        }"#]].assert_eq(&one(
        &loose,
        "matmul",
        json!({"tiles": [], "register_blocks": [], "adjacent_blocks": [], "tensor_cores": [[64, 64]], "staged_blocks": []}),
    ));
}

#[test]
fn tensor_cores_only_for_a_float_multiply_add_within_the_tolerance() {
    let tc = json!({"tiles": [], "register_blocks": [], "adjacent_blocks": [], "tensor_cores": [[64, 64], [128, 128]], "staged_blocks": []});
    // Another style: an early return, `size_t` indexing, a loop variable `p`.
    let out = cuda(FIXTURES, "matmul_loose", "tile_matmul", tc.clone()).unwrap();
    expect![[r#"
        [
            "3xTF32 tensor cores (mma.sync, cp.async), 64x64x32 tiles, 4 stages, 4 warps",
            "3xTF32 tensor cores (mma.sync, cp.async), 128x128x16 tiles, 4 stages, 4 warps",
        ]
    "#]]
    .assert_debug_eq(&labels(&out));
    let why = |src: &str, k: &str| not_applicable(cuda(src, k, "tile_matmul", tc.clone()));
    // The bundled example's default atol (1e-5): another order of the k sum fails it.
    expect!["no usable candidate for `matmul`: 3xTF32 tensor cores: the spec's atol 1e-5 and rtol 1e-3 do not both reach 1e-4 and it names no PyTorch reference (`reference = torch: ...`); the tensor cores add the k terms in another order than the loop, and near-zero outputs of a long f32 sum then differ from the loop's by more"].assert_eq(&why(MATMUL, "matmul"));
    let loose = |src: &str, from: &str, to: &str| {
        let s = src.replace(from, to);
        assert_ne!(s, src);
        s
    };
    let gemm_nt = loose(
        FIXTURES,
        "// @bench alpha = 1.5; beta = -0.5",
        "// @bench alpha = 1.5; beta = -0.5; atol = 1e-3; rtol = 1e-3",
    );
    expect!["no usable candidate for `gemm_nt`: 3xTF32 tensor cores: `a[(size_t)i*k+p]` is not a float load; the 3xTF32 split is for f32"].assert_eq(&why(&gemm_nt, "gemm_nt"));
    let min_plus = loose(
        FIXTURES,
        "// @bench n = 130, 40",
        "// @bench n = 130, 40; atol = 1e-3; rtol = 1e-3",
    );
    expect!["no usable candidate for `min_plus`: 3xTF32 tensor cores: the k loop is not one `ACC += A * B;`"].assert_eq(&why(&min_plus, "min_plus"));
    let scaled = loose(
        &loose(MATMUL, "rtol = 1e-3", "atol = 1e-3; rtol = 1e-3"),
        "acc += a[row * k + i] * b[i * n + col];",
        "acc += 2.0f * a[row * k + i] * b[i * n + col];",
    );
    expect!["no usable candidate for `matmul`: 3xTF32 tensor cores: the k loop's product is not of one A-like and one B-like load"].assert_eq(&why(&scaled, "matmul"));
}

#[test]
fn a_pytorch_reference_gets_tensor_cores_at_the_default_f32_tolerance() {
    let tc = json!({"tiles": [], "register_blocks": [], "adjacent_blocks": [], "tensor_cores": [[64, 64]], "staged_blocks": []});
    let with = |src: &str, after: &str, line: &str| {
        let s = src.replacen(after, &format!("{after}\n{line}"), 1);
        assert_ne!(s, src, "`{after}` moved; update this test");
        s
    };
    let tc_labels = |src: &str, k: &str| match cuda(src, k, "tile_matmul", tc.clone()) {
        Ok(out) => format!("{:?}", labels(&out)),
        Err(e) => e.to_string(),
    };
    // The bundled example at its default atol (1e-5), with the f64 product as reference:
    // candidates are judged against it, so another order of the k sum can pass.
    let f64_ref = with(
        MATMUL,
        "// @bench rtol = 1e-3",
        "// @bench reference = torch: (a.double() @ b.double()).float()",
    );
    expect![[r#"["3xTF32 tensor cores (mma.sync, cp.async), 64x64x32 tiles, 4 stages, 4 warps"]"#]]
        .assert_eq(&tc_labels(&f64_ref, "matmul"));
    // The same without `rtol` (the f32 default 1e-4) and a module function as reference.
    let module_ref = with(
        &MATMUL.replace("// @bench rtol = 1e-3\n", ""),
        "// @bench flops = 2 * m * n * k",
        "// @bench reference = torch: refs.matmul",
    );
    expect![[r#"["3xTF32 tensor cores (mma.sync, cp.async), 64x64x32 tiles, 4 stages, 4 warps"]"#]]
        .assert_eq(&tc_labels(&module_ref, "matmul"));
    // A reference does not make every loop a float multiply-add.
    let min_plus = with(
        FIXTURES,
        "// @bench n = 130, 40",
        "// @bench reference = torch: d @ d",
    );
    expect!["no usable candidate for `min_plus`: 3xTF32 tensor cores: the k loop is not one `ACC += A * B;`"]
        .assert_eq(&tc_labels(&min_plus, "min_plus"));
}

#[test]
fn adjacent_outputs_read_runs_of_a_transposed_a_tile_and_unroll_full_tiles() {
    // What differs from the register block above (whose outputs are a block apart).
    let text = one(
        MATMUL,
        "matmul",
        json!({"tiles": [], "register_blocks": [], "adjacent_blocks": [2], "tensor_cores": [], "staged_blocks": []}),
    );
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| {
            l.contains("_tile[")
                || l.starts_with("int row_")
                || l.starts_with("int col_")
                || l.contains("kk <")
                || l.contains("k0 + 16 <=")
                || l.starts_with('#')
                || l.starts_with("} else")
        })
        .collect();
    expect![[r##"
        [
            "__shared__ float a_tile[16][32 + 4];",
            "__shared__ float b_tile[16][32 + 4];",
            "int row_0 = blockIdx.y * 32 + threadIdx.y * 2 + 0;",
            "int row_1 = blockIdx.y * 32 + threadIdx.y * 2 + 1;",
            "int col_0 = blockIdx.x * 32 + threadIdx.x * 2 + 0;",
            "int col_1 = blockIdx.x * 32 + threadIdx.x * 2 + 1;",
            "if (row < m && i < k) a_tile[e % 16][e / 16] = a[row * k + i];",
            "if (col < n && i < k) b_tile[e / 32][e % 32] = b[i * n + col];",
            "if (k0 + 16 <= k) {",
            "#pragma unroll",
            "for (int kk = 0; kk < 16; ++kk) {",
            "acc_0_0 += a_tile[kk][threadIdx.y * 2 + 0] * b_tile[kk][threadIdx.x * 2 + 0];",
            "acc_0_1 += a_tile[kk][threadIdx.y * 2 + 0] * b_tile[kk][threadIdx.x * 2 + 1];",
            "acc_1_0 += a_tile[kk][threadIdx.y * 2 + 1] * b_tile[kk][threadIdx.x * 2 + 0];",
            "acc_1_1 += a_tile[kk][threadIdx.y * 2 + 1] * b_tile[kk][threadIdx.x * 2 + 1];",
            "} else {",
            "for (int kk = 0; kk < 16 && k0 + kk < k; ++kk) {",
            "acc_0_0 += a_tile[kk][threadIdx.y * 2 + 0] * b_tile[kk][threadIdx.x * 2 + 0];",
            "acc_0_1 += a_tile[kk][threadIdx.y * 2 + 0] * b_tile[kk][threadIdx.x * 2 + 1];",
            "acc_1_0 += a_tile[kk][threadIdx.y * 2 + 1] * b_tile[kk][threadIdx.x * 2 + 0];",
            "acc_1_1 += a_tile[kk][threadIdx.y * 2 + 1] * b_tile[kk][threadIdx.x * 2 + 1];",
        ]
    "##]]
    .assert_debug_eq(&lines);
}

#[test]
fn staged_blocks_fetch_the_next_tiles_into_registers_while_computing_from_the_other_buffer() {
    expect![[r#"
        // @bench m = 1024, 67; n = 1024, 45; k = 1024, 33
        // @bench a: in f32[m, k]; b: in f32[k, n]; c: out f32[m, n]
        // @bench grid = (cdiv(n, 16), cdiv(m, 32)); block = (16, 16)
        // @bench flops = 2 * m * n * k
        // @bench rtol = 1e-3
        extern "C" __global__ void matmul(int m, int n, int k, const float* a, const float* b, float* c) {
            __shared__ __align__(16) float a_tile[2][32][32 + 4];
            __shared__ __align__(16) float b_tile[2][32][16 + 4];
            int row_0 = blockIdx.y * 32 + threadIdx.y * 2 + 0;
            int row_1 = blockIdx.y * 32 + threadIdx.y * 2 + 1;
            int col_0 = blockIdx.x * 16 + threadIdx.x * 1 + 0;
            float acc_0_0 = 0.0f;
            float acc_1_0 = 0.0f;
            float a_next[4] = {};
            float b_next[2] = {};
            int buf = 0;
            for (int k_next = 0; k_next < k + 32; k_next += 32) {
                if (k_next < k) {
                    #pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        int e = threadIdx.y * 16 + threadIdx.x + j * 256;
                        int row = blockIdx.y * 32 + e / 32;
                        int i = k_next + e % 32;
                        if (row < m && i < k) a_next[j] = a[row * k + i];
                    }
                    #pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        int e = threadIdx.y * 16 + threadIdx.x + j * 256;
                        int col = blockIdx.x * 16 + e % 16;
                        int i = k_next + e / 16;
                        if (col < n && i < k) b_next[j] = b[i * n + col];
                    }
                }
                if (k_next > 0) {
                    int k0 = k_next - 32;
                    if (k0 + 32 <= k) {
                        #pragma unroll
                        for (int kk = 0; kk < 32; ++kk) {
                            {
                                acc_0_0 += a_tile[buf ^ 1][kk][threadIdx.y * 2 + 0] * b_tile[buf ^ 1][kk][threadIdx.x * 1 + 0];
                            }
                            {
                                acc_1_0 += a_tile[buf ^ 1][kk][threadIdx.y * 2 + 1] * b_tile[buf ^ 1][kk][threadIdx.x * 1 + 0];
                            }
                        }
                    } else {
                        for (int kk = 0; kk < 32 && k0 + kk < k; ++kk) {
                            {
                                acc_0_0 += a_tile[buf ^ 1][kk][threadIdx.y * 2 + 0] * b_tile[buf ^ 1][kk][threadIdx.x * 1 + 0];
                            }
                            {
                                acc_1_0 += a_tile[buf ^ 1][kk][threadIdx.y * 2 + 1] * b_tile[buf ^ 1][kk][threadIdx.x * 1 + 0];
                            }
                        }
                    }
                }
                if (k_next < k) {
                    #pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        int e = threadIdx.y * 16 + threadIdx.x + j * 256;
                        a_tile[buf][e % 32][e / 32] = a_next[j];
                    }
                    #pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        int e = threadIdx.y * 16 + threadIdx.x + j * 256;
                        b_tile[buf][e / 16][e % 16] = b_next[j];
                    }
                }
                __syncthreads();
                buf ^= 1;
            }
            {
                int row = row_0; int col = col_0;
                if (row < m && col < n) {
                    c[row * n + col] = acc_0_0;
                }
            }
            {
                int row = row_1; int col = col_0;
                if (row < m && col < n) {
                    c[row * n + col] = acc_1_0;
                }
            }
        }"#]].assert_eq(&one(
        MATMUL,
        "matmul",
        json!({"tiles": [], "register_blocks": [], "adjacent_blocks": [], "tensor_cores": [], "staged_blocks": [[2, 1]]}),
    ));
}

#[test]
fn staged_tiles_of_doubles_take_a_shorter_k_step_and_keep_the_authors_loads() {
    let staged = json!({"tiles": [], "register_blocks": [], "adjacent_blocks": [], "tensor_cores": [], "staged_blocks": [[8, 4], [4, 4]]});
    // Doubles: 128x64x16 would need 50 KiB for its two buffers; the k step halves to fit.
    let out = cuda(FIXTURES, "gemm_nt", "tile_matmul", staged).unwrap();
    expect![[r#"
        [
            "8x4 register block per thread (adjacent outputs, A transposed, two buffers filled through registers), 128x64x8 tiles, block (16, 16)",
            "4x4 register block per thread (adjacent outputs, A transposed, two buffers filled through registers), 64x64x16 tiles, block (16, 16)",
        ]
    "#]].assert_debug_eq(&labels(&out));
    // An early return, B stored transposed (loaded along k), the author's `size_t` loads;
    // the loop variable `j` is the column index here, so the staging loop's is `j_2`.
    let text = show(Lang::Cuda, FIXTURES, &out[0], "gemm_nt");
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| {
            (l.contains("_tile[") && (!l.starts_with("sum_") || l.starts_with("sum_7_3")))
                || l.contains("_next")
                || l.starts_with("for (")
                || l.starts_with("int p")
        })
        .collect();
    expect![[r#"
        [
            "__shared__ __align__(16) double a_tile[2][8][128 + 4];",
            "__shared__ __align__(16) double b_tile[2][8][64 + 4];",
            "double a_next[4] = {};",
            "double b_next[2] = {};",
            "for (int k_next = 0; k_next < k + 8; k_next += 8) {",
            "if (k_next < k) {",
            "for (int j_2 = 0; j_2 < 4; ++j_2) {",
            "int p = k_next + e % 8;",
            "if (!(i >= m) && p < k) a_next[j_2] = a[(size_t)i * k + p];",
            "for (int j_2 = 0; j_2 < 2; ++j_2) {",
            "int p = k_next + e % 8;",
            "if (!(j >= n) && p < k) b_next[j_2] = b[(size_t)j * k + p];",
            "if (k_next > 0) {",
            "int k0 = k_next - 8;",
            "for (int kk = 0; kk < 8; ++kk) {",
            "sum_7_3 += a_tile[buf ^ 1][kk][threadIdx.y * 8 + 7] * b_tile[buf ^ 1][kk][threadIdx.x * 4 + 3];",
            "for (int kk = 0; kk < 8 && k0 + kk < k; ++kk) {",
            "sum_7_3 += a_tile[buf ^ 1][kk][threadIdx.y * 8 + 7] * b_tile[buf ^ 1][kk][threadIdx.x * 4 + 3];",
            "if (k_next < k) {",
            "for (int j_2 = 0; j_2 < 4; ++j_2) {",
            "a_tile[buf][e % 8][e / 8] = a_next[j_2];",
            "for (int j_2 = 0; j_2 < 2; ++j_2) {",
            "b_tile[buf][e % 8][e / 8] = b_next[j_2];",
        ]
    "#]].assert_debug_eq(&lines);
    let bad = cuda(
        MATMUL,
        "matmul",
        "tile_matmul",
        json!({"staged_blocks": [[16, 4]]}),
    )
    .expect_err("16 rows a thread is refused");
    expect!["parameter `staged_blocks`: [16, 4]: each thread's rows and columns must be 1 to 8"]
        .assert_eq(&bad.to_string());
}

const TENSOR: &str = include_str!("../../../../../tests/fixtures/rewrites/tiles/tensor_matmuls.cu");

#[test]
fn tensor_core_tiles_keep_each_operands_contiguous_side_and_guard_unaligned_rows() {
    let tc = json!({"tiles": [], "register_blocks": [], "adjacent_blocks": [], "staged_blocks": [], "tensor_cores": [[64, 64]]});
    // A column-major and B transposed: A's tile `[BK][BM + 8]`, read a float at a time, and
    // B's `[BN][BK + 4]`, read by `ldmatrix` (n8 x k8), each filled along its contiguous
    // side; the epilogue reads C as written.
    let tn = one(TENSOR, "gemm_tn", tc.clone());
    for want in [
        "// @bench smem = 73728",
        "float* dst = a_tiles + slot * 2304 + r * 72 + q;",
        "const int y = blockIdx.y * 64 + q + j; int t = k0 + r;",
        "float* dst = b_tiles + slot * 2304 + r * 36 + q;",
        "const int x = blockIdx.x * 64 + r; int t = k0 + q + j;",
        "const float v = a_cur[(ks + tig + (h >> 1) * 4) * 72 + wm0 + tm * 16 + group + (h & 1) * 8];",
        "asm volatile(\"ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\\n\" : \"=r\"(frag[0]), \"=r\"(frag[1]) : \"r\"((unsigned)__cvta_generic_to_shared(&b_cur[(wn0 + tn * 8 + (lane & 7)) * 36 + ks + ((lane >> 3) & 1) * 4])));",
        "c[y * n + x] = alpha * s + beta * c[y * n + x];",
    ] {
        assert!(tn.contains(want), "gemm_tn lacks `{want}`:\n{tn}");
    }
    // Leading dimensions from parameters: a row may start unaligned, so each chunk checks
    // its first address before a 16-byte copy and falls back to four 4-byte ones; the
    // author's `unsigned` indices are kept.
    let ld = one(TENSOR, "gemm_ld", tc);
    for want in [
        "unsigned row = blockIdx.y * 64 + r; unsigned p = k0 + q + j;",
        "if (j == 0) p_2 = &(a[row * lda + p]);",
        "if (full && (reinterpret_cast<unsigned long long>(p_2) & 15) == 0) {",
        "\"l\"(ok ? &(b[p * ldb + col]) : b), \"r\"(ok ? 4 : 0));",
        "if (!(row >= m || col >= n)) {",
    ] {
        assert!(ld.contains(want), "gemm_ld lacks `{want}`:\n{ld}");
    }
}

#[test]
fn k_contiguous_tiles_are_read_by_ldmatrix_and_small_warp_shares_count_their_copies() {
    let tc = |pairs: serde_json::Value| json!({"tiles": [], "register_blocks": [], "adjacent_blocks": [], "staged_blocks": [], "tensor_cores": pairs});
    // `x @ w.T`: both tiles keep k contiguous, so both fragments come from `ldmatrix` (A
    // m16 x k8 as four 8x8 matrices, B n8 x k8 as two) and no float is read one at a time.
    let nt = one(TENSOR, "linear_nt", tc(json!([[64, 64]])));
    for want in [
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];",
        "&a_cur[(wm0 + tm * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * 36 + ks + (lane >> 4) * 4]",
        "ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];",
        "&b_cur[(wn0 + tn * 8 + (lane & 7)) * 36 + ks + ((lane >> 3) & 1) * 4]",
        "int out = blockIdx.x * 64 + r; int i = k0 + q + j;",
        "y[(long)row * outs + out] = acc + bias[out];",
    ] {
        assert!(nt.contains(want), "linear_nt lacks `{want}`:\n{nt}");
    }
    assert!(
        !nt.contains("= a_cur[") && !nt.contains("= b_cur["),
        "a float read one at a time:\n{nt}"
    );
    // The split passes each operand whole as its TF32 part; the rest is what its
    // truncation leaves.
    assert!(nt.contains("a_hi[tm][h] = __float_as_uint(v);"), "{nt}");
    assert!(
        nt.contains(
            "b_lo[tn][h] = __float_as_uint(v - __uint_as_float(__float_as_uint(v) & 0xffffe000u));"
        ),
        "{nt}"
    );
    // A warp's share under 64x64 counts its copies (4 chunks of 4 floats a thread at
    // 64x64x32, 8 at 128x64x32); a 64x64 share keeps the loop strided from its index.
    let loose = MATMUL.replace("rtol = 1e-3", "atol = 1e-3; rtol = 1e-3");
    let strided = "for (int e = threadIdx.x; e < 512; e += 128) {";
    for (pair, want) in [
        ([64, 64], "for (int chunk = 0; chunk < 4; ++chunk) {"),
        ([128, 64], "for (int chunk = 0; chunk < 8; ++chunk) {"),
        ([128, 128], strided),
    ] {
        let text = one(&loose, "matmul", tc(json!([pair])));
        assert!(text.contains(want), "{pair:?} lacks `{want}`:\n{text}");
        assert_eq!(text.contains("chunk"), want != strided, "{pair:?}:\n{text}");
    }
}

#[test]
fn tensor_core_tiles_follow_the_block_shape_and_the_shared_memory_budget() {
    use super::mma::MmaTiles;
    let rows = (true, false); // A along k, B along the column
    let t =
        |bm, bn, st| MmaTiles::of(bm, bn, st, rows).map(|t| (t.bk, t.stages, t.smem_bytes(rows)));
    // A warp's 64x64 share takes a k tile of 16; smaller ones 32; as many stages (2 to 4)
    // as fit 96 KiB, unless asked.
    assert_eq!(t(128, 128, 0), Ok((16, 4, 75776)));
    assert_eq!(t(128, 64, 0), Ok((32, 3, 82944)));
    assert_eq!(t(64, 64, 0), Ok((32, 4, 73728)));
    assert_eq!(t(256, 128, 0), Ok((16, 3, 87552)));
    assert_eq!(t(64, 64, 2), Ok((32, 2, 36864)));
    assert!(t(48, 64, 0).unwrap_err().contains("multiple of 32"));
    // Counted copies only where a warp's share (a quarter of the block) is under 64x64.
    let counted = |bm, bn| MmaTiles::of(bm, bn, 0, rows).map(|t| t.counted_fill());
    assert_eq!(counted(64, 64), Ok(true));
    assert_eq!(counted(128, 64), Ok(true));
    assert_eq!(counted(32, 256), Ok(true));
    assert_eq!(counted(128, 128), Ok(false));
    assert_eq!(counted(256, 128), Ok(false));
    assert!(t(512, 64, 0).is_err());
    // The stated layouts: k contiguous pads by 4 floats, the other side by 8.
    let cols = (false, true);
    assert_eq!(
        MmaTiles::of(64, 64, 1, cols).map(|t| t.smem_bytes(cols)),
        Ok(2 * 4 * 2 * 32 * 72)
    );
}

#[test]
fn tensor_cores_refuse_a_spec_that_sets_its_own_shared_memory() {
    let tc = json!({"tiles": [], "register_blocks": [], "adjacent_blocks": [], "staged_blocks": [], "tensor_cores": [[64, 64]]});
    let own = TENSOR.replace(
        "// @bench grid = (cdiv(n, 32), cdiv(m, 8)); block = (32, 8)",
        "// @bench grid = (cdiv(n, 32), cdiv(m, 8)); block = (32, 8); smem = 0",
    );
    assert_ne!(own, TENSOR);
    expect!["no usable candidate for `gemm_ld`: 3xTF32 tensor cores (mma.sync, cp.async), 64x64x32 tiles, 4 stages, 4 warps: the spec already sets `smem`"].assert_eq(&not_applicable(cuda(&own, "gemm_ld", "tile_matmul", tc)));
}

#[test]
fn sixteen_bit_drafts_get_simt_tiles_and_no_tensor_cores() {
    // What a first-draft f16 or bf16 matmul in CUDA gets today: the SIMT tiles and
    // register blocks (the loads stay the author's, converted as written), and the
    // reason it gets no tensor-core candidate.
    const HALF: &str = include_str!("../../../../../tests/fixtures/rewrites/tiles/half_matmuls.cu");
    for kernel in ["hgemm", "linear_bt"] {
        let out = cuda(HALF, kernel, "tile_matmul", json!({}))
            .unwrap_or_else(|e| panic!("{kernel}: {e}"));
        assert!(
            labels(&out).iter().all(|l| !l.contains("tensor cores")),
            "{kernel}: {:?}",
            labels(&out)
        );
        assert!(out.len() >= 5, "{kernel}: {:?}", labels(&out));
    }
    let tc =
        json!({"tiles": [], "register_blocks": [], "adjacent_blocks": [], "staged_blocks": []});
    let loose = HALF.replace(
        "// @bench grid = (cdiv(n, 16), cdiv(m, 16)); block = (16, 16)",
        "// @bench grid = (cdiv(n, 16), cdiv(m, 16)); block = (16, 16); atol = 1e-2; rtol = 1e-2",
    );
    assert_ne!(loose, HALF);
    expect!["no usable candidate for `hgemm`: 3xTF32 tensor cores: the k loop's product is not of one A-like and one B-like load"]
        .assert_eq(&not_applicable(cuda(&loose, "hgemm", "tile_matmul", tc)));
}

#[test]
fn interior_tiles_copy_without_a_check_per_element_and_edge_tiles_keep_the_authors_bounds() {
    let tc = json!({"tiles": [], "register_blocks": [], "adjacent_blocks": [], "staged_blocks": [], "tensor_cores": [[64, 64]]});
    // Upper bounds at the tile's last row and k, the lower one at its first, the conjunct
    // that names no index as it is; an interior tile's chunk copies from its first address.
    let band = one(TENSOR, "matmul_band", tc.clone());
    for want in [
        "bool a_inside = true;",
        "{ int row = blockIdx.y * 64 + 63; int i = k0 + 31; a_inside = a_inside && (row < m) && (k > 0) && (i < k); }",
        "{ int row = blockIdx.y * 64; a_inside = a_inside && (row >= row0); }",
        "if (a_inside) {",
        "{ int col = blockIdx.x * 64 + 63; int i = k0 + 31; b_inside = b_inside && (col < n) && (k > 0) && (i < k); }",
        "int row = blockIdx.y * 64 + r; int i = k0 + q;",
        "\"l\"(p_2 + j));",
        // The edge tiles: the author's bounds on each element, as before.
        "const bool ok = row >= row0 && row < m && k > 0 && i < k;",
    ] {
        assert!(band.contains(want), "matmul_band lacks `{want}`:\n{band}");
    }
    // Negated bounds of the early-return form, on `unsigned` indices.
    let ld = one(TENSOR, "gemm_ld", tc.clone());
    let want = "{ unsigned row = blockIdx.y * 64 + 63; unsigned p = k0 + 31; a_inside = a_inside && (!(row >= m)) && (p < k); }";
    assert!(ld.contains(want), "gemm_ld lacks `{want}`:\n{ld}");
    // A tile whose contiguous side has stride 2 in memory: each element's own address.
    let strided = TENSOR.replace("a[row * k + i] * b", "a[2 * (row * k + i)] * b");
    let strided = one(&strided, "matmul_band", tc.clone());
    let want = "int row = blockIdx.y * 64 + r; int i = k0 + q + j;";
    assert!(strided.contains(want), "lacks `{want}`:\n{strided}");
    let want = "\"l\"(&(a[2 * (row * k + i)])));";
    assert!(strided.contains(want), "lacks `{want}`:\n{strided}");
    // A bound that is no comparison of the index leaves that operand checked per element.
    let odd = TENSOR.replace("row >= row0 && row < m", "row % 2 == 0 && row < m");
    let odd = one(&odd, "matmul_band", tc);
    assert!(
        !odd.contains("a_inside") && odd.contains("if (b_inside) {"),
        "{odd}"
    );
}

#[test]
fn a_batched_matmul_hoists_its_batch_pointers_and_tiles_each_batch() {
    expect![[r#"
        // torch.bmm with per-batch pointers declared inside the bounds check, 64-bit offsets.
        // @bench bt = 8, 3; m = 512, 37; n = 512, 29; k = 256, 21
        // @bench a: in f32[bt, m, k]; b: in f32[bt, k, n]; c: out f32[bt, m, n]
        // @bench grid = (cdiv(n, 32), cdiv(m, 32), bt); block = (16, 16)
        // @bench reference = torch: torch.bmm(a, b)
        extern "C" __global__ void bmm_aliases(const float* a, const float* b, float* c, int m, int n, int k) {
            int batch = blockIdx.z;
            __shared__ float a_tile[32][16 + 1];
            __shared__ float b_tile[16][32 + 1];
            const float* ab = a + (size_t)batch * m * k;
            const float* bb = b + (size_t)batch * k * n;
            int row_0 = blockIdx.y * 32 + threadIdx.y;
            int row_1 = blockIdx.y * 32 + threadIdx.y + 16;
            int col_0 = blockIdx.x * 32 + threadIdx.x;
            int col_1 = blockIdx.x * 32 + threadIdx.x + 16;
            float acc_0_0 = 0.f;
            float acc_0_1 = 0.f;
            float acc_1_0 = 0.f;
            float acc_1_1 = 0.f;
            for (int k0 = 0; k0 < k; k0 += 16) {
                for (int e = threadIdx.y * 16 + threadIdx.x; e < 512; e += 256) {
                    int row = blockIdx.y * 32 + e / 16;
                    int i = k0 + e % 16;
                    if (row < m && i < k) a_tile[e / 16][e % 16] = ab[row * k + i];
                }
                for (int e = threadIdx.y * 16 + threadIdx.x; e < 512; e += 256) {
                    int col = blockIdx.x * 32 + e % 32;
                    int i = k0 + e / 32;
                    if (col < n && i < k) b_tile[e / 32][e % 32] = bb[i * n + col];
                }
                __syncthreads();
                for (int kk = 0; kk < 16 && k0 + kk < k; ++kk) {
                    {
                        acc_0_0 += a_tile[threadIdx.y][kk] * b_tile[kk][threadIdx.x];
                    }
                    {
                        acc_0_1 += a_tile[threadIdx.y][kk] * b_tile[kk][threadIdx.x + 16];
                    }
                    {
                        acc_1_0 += a_tile[threadIdx.y + 16][kk] * b_tile[kk][threadIdx.x];
                    }
                    {
                        acc_1_1 += a_tile[threadIdx.y + 16][kk] * b_tile[kk][threadIdx.x + 16];
                    }
                }
                __syncthreads();
            }
            {
                int row = row_0; int col = col_0;
                if (row < m && col < n) {
                    c[(size_t)batch * m * n + row * n + col] = acc_0_0;
                }
            }
            {
                int row = row_0; int col = col_1;
                if (row < m && col < n) {
                    c[(size_t)batch * m * n + row * n + col] = acc_0_1;
                }
            }
            {
                int row = row_1; int col = col_0;
                if (row < m && col < n) {
                    c[(size_t)batch * m * n + row * n + col] = acc_1_0;
                }
            }
            {
                int row = row_1; int col = col_1;
                if (row < m && col < n) {
                    c[(size_t)batch * m * n + row * n + col] = acc_1_1;
                }
            }
        }"#]].assert_eq(&one(BATCHED, "bmm_aliases", json!({"tiles": [], "register_blocks": [2], "adjacent_blocks": [], "tensor_cores": [], "staged_blocks": []})));
}

#[test]
fn every_batched_style_gets_every_candidate() {
    for k in [
        "bmm_aliases",
        "bmm_prelude",
        "batched_linear",
        "attention_scores",
        "bmm_tn",
    ] {
        let out = cuda(BATCHED, k, "tile_matmul", json!({})).unwrap();
        assert_eq!(out.len(), 10, "{k}: {:?}", labels(&out));
    }
    // f64: no tensor cores.
    let out = cuda(BATCHED, "bmm_indexed", "tile_matmul", json!({})).unwrap();
    assert_eq!(out.len(), 7, "{:?}", labels(&out));
}

#[test]
fn a_batch_that_differs_between_threads_of_a_block_is_refused_with_the_reason() {
    let why = |k| not_applicable(cuda(BATCHED, k, "tile_matmul", json!({})));
    let w = why("bmm_thread_batch");
    assert!(
        w.contains("`a[(bi * m + row) * k + i]` names `bi`, which reads `threadIdx.z`")
            && w.contains("a tile would mix batches"),
        "{w}"
    );
    let w = why("bmm_stacked_rows");
    assert!(
        w.contains("`b[(bi * k + i) * n + col]` names `bi`, which names `row`"),
        "{w}"
    );
    let w = why("summed_batches");
    assert!(
        w.contains("nothing to share")
            && w.contains(
                "`a[(bi * m + row) * k + i]` names `bi`, which is not declared before the k loop"
            ),
        "{w}"
    );
}

#[test]
fn a_starting_value_read_before_the_loop_runs_only_inside_the_bounds() {
    let lines = |out: &str, pat: &str| -> String {
        let l: Vec<&str> = out
            .lines()
            .map(str::trim)
            .filter(|l| l.contains(pat))
            .collect();
        l.join("\n")
    };
    // Register blocks: each output's copy of PRE reads its own bias under its own bounds.
    let rb = json!({"tiles": [], "register_blocks": [2], "adjacent_blocks": [], "tensor_cores": [], "staged_blocks": []});
    let out = one(FIXTURES, "linear_bias_relu", rb);
    expect![[r#"
        float acc_0_0 = bias[(r_0 < m && o_0 < n) ? (o_0) : 0];
        float acc_0_1 = bias[(r_0 < m && o_1 < n) ? (o_1) : 0];
        float acc_1_0 = bias[(r_1 < m && o_0 < n) ? (o_0) : 0];
        float acc_1_1 = bias[(r_1 < m && o_1 < n) ? (o_1) : 0];"#]]
    .assert_eq(&lines(&out, "bias["));
    // Tensor cores: the starting value is read in the epilogue and the products added to it.
    let tc = json!({"tiles": [], "register_blocks": [], "adjacent_blocks": [], "tensor_cores": [[64, 64]], "staged_blocks": []});
    let out = one(FIXTURES, "linear_bias_relu", tc);
    expect![[r#"
        float acc = bias[(r < m && o < n) ? (o) : 0];
        acc += d_2[tm][tn][h];
        y[r * n + o] = acc > 0.0f ? acc : 0.0f;"#]]
    .assert_eq(&lines(&out, "acc "));
    // An early return's bounds, and PRE's own names renamed inside the guarded index.
    let early = one(
        FIXTURES,
        "gemm_accumulate",
        json!({"tiles": [], "register_blocks": [2], "adjacent_blocks": [], "tensor_cores": [], "staged_blocks": []}),
    );
    expect![[r#"
        double scale_0_0 = s[(!(row_0 >= m || col_0 >= n)) ? (row_0) : 0];
        double acc_0_0 = c[(!(row_0 >= m || col_0 >= n)) ? (at_0_0) : 0];
        double scale_0_1 = s[(!(row_0 >= m || col_1 >= n)) ? (row_0) : 0];
        double acc_0_1 = c[(!(row_0 >= m || col_1 >= n)) ? (at_0_1) : 0];
        double scale_1_0 = s[(!(row_1 >= m || col_0 >= n)) ? (row_1) : 0];
        double acc_1_0 = c[(!(row_1 >= m || col_0 >= n)) ? (at_1_0) : 0];
        double scale_1_1 = s[(!(row_1 >= m || col_1 >= n)) ? (row_1) : 0];
        double acc_1_1 = c[(!(row_1 >= m || col_1 >= n)) ? (at_1_1) : 0];"#]]
    .assert_eq(&lines(&early, ") ? ("));
}
