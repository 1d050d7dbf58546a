// Variants of the f32 matmul on the tensor cores that `tile_matmul`'s 3xTF32 candidate was
// chosen from (issue #30; docs/benchmarks.md, "Matmuls on the tensor cores"): 3xTF32 on
// mma.sync.m16n8k8 with a cp.async multi-stage pipeline, C[m,n] = A[m,k] * B[k,n]
// row-major, per-chunk alignment check (a 16-byte cp.async where the 4 elements are in
// bounds and aligned, else 4-byte ones). Built and run by tensor_matmul_variants.py,
// which writes the INST lines (the variants) into variants.inc.
//
// MODE: how the products are accumulated (below); SPLIT: 0 two cvt.rna.tf32.f32, 1 the
// TF32 part rounded by integer add and mask, 2 truncated by the mask; PERM: 1 reads A's
// fragments as pairs, the k order within each 8 permuted alike in A and B.

__device__ __forceinline__ unsigned tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ void cp16(float* s, const float* g, bool ok) {
    unsigned sa = (unsigned)__cvta_generic_to_shared(s);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(sa), "l"(g), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void cp4(float* s, const float* g, bool ok) {
    unsigned sa = (unsigned)__cvta_generic_to_shared(s);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(sa), "l"(g), "r"(ok ? 4 : 0));
}
#define MMA(D, A, B)                                                                            \
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};" \
                 : "+f"(D[0]), "+f"(D[1]), "+f"(D[2]), "+f"(D[3])                              \
                 : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]))

// MODE 0: 3xTF32 chained in the accumulator; 1: 3xTF32, a fresh accumulator per k step of
// 8 added in f32; 2: plain TF32 (one product); 3: 3xTF32, fresh accumulator per k tile.
template <int BM, int BN, int BK, int WM, int WN, int ST, int MODE, int SPLIT, int PERM>
__device__ __forceinline__ void gemm_body(int m, int n, int k, const float* a, const float* b, float* c) {
    extern __shared__ __align__(16) float sm[];
    constexpr int AS = BK + 4, BS = BN + (PERM ? 4 : 8), A_ST = BM * AS, B_ST = BK * BS, T = WM * WN * 32;
    constexpr int WTM = BM / WM, WTN = BN / WN, MI = WTM / 16, NI = WTN / 8;
    float* As = sm;
    float* Bs = sm + ST * A_ST;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, group = lane / 4, tig = lane % 4;
    const int wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;
    const int bm0 = blockIdx.y * BM, bn0 = blockIdx.x * BN;
    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int h = 0; h < 4; ++h) acc[i][j][h] = 0.f;
    auto load = [&](int slot, int k0) {
        float* as = As + slot * A_ST;
        float* bs = Bs + slot * B_ST;
#pragma unroll
        for (int e = tid; e < BM * BK / 4; e += T) {
            int r = e / (BK / 4), q = (e % (BK / 4)) * 4;
            int row = bm0 + r, i = k0 + q;
            const float* p = &a[(size_t)row * k + i];
            bool full = (((size_t)p & 15) == 0) && row < m && i + 3 < k;
            if (full) {
                cp16(&as[r * AS + q], p, true);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    bool ok = row < m && i + j < k;
                    cp4(&as[r * AS + q + j], ok ? &a[(size_t)row * k + i + j] : a, ok);
                }
            }
        }
#pragma unroll
        for (int e = tid; e < BK * BN / 4; e += T) {
            int r = e / (BN / 4), q = (e % (BN / 4)) * 4;
            int i = k0 + r, col = bn0 + q;
            const float* p = &b[(size_t)i * n + col];
            bool full = (((size_t)p & 15) == 0) && i < k && col + 3 < n;
            if (full) {
                cp16(&bs[r * BS + q], p, true);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    bool ok = i < k && col + j < n;
                    cp4(&bs[r * BS + q + j], ok ? &b[(size_t)i * n + col + j] : b, ok);
                }
            }
        }
    };
    const int KT = (k + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < ST - 1; ++s) {
        if (s < KT) load(s, s * BK);
        asm volatile("cp.async.commit_group;");
    }
    for (int kt = 0; kt < KT; ++kt) {
        asm volatile("cp.async.wait_group %0;" ::"n"(ST - 2));
        __syncthreads();
        {
            int nk = kt + ST - 1;
            if (nk < KT) load(nk % ST, nk * BK);
            asm volatile("cp.async.commit_group;");
        }
        const float* as = As + (kt % ST) * A_ST;
        const float* bs = Bs + (kt % ST) * B_ST;
        float tile[MODE == 3 ? MI : 1][MODE == 3 ? NI : 1][4];
        if (MODE == 3) {
#pragma unroll
            for (int i = 0; i < (MODE == 3 ? MI : 1); ++i)
#pragma unroll
                for (int j = 0; j < (MODE == 3 ? NI : 1); ++j)
#pragma unroll
                    for (int h = 0; h < 4; ++h) tile[i][j][h] = 0.f;
        }
#pragma unroll
        for (int ks = 0; ks < BK; ks += 8) {
            unsigned ah[MI][4], al[MI][4], bh[NI][2], bl[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int h = 0; h < 4; ++h) {
                    float v = PERM ? as[(wm0 + i * 16 + group + (h & 1) * 8) * AS + ks + 2 * tig + (h >> 1)]
                                   : as[(wm0 + i * 16 + group + (h & 1) * 8) * AS + ks + tig + (h >> 1) * 4];
                    if (SPLIT == 2) {
                        ah[i][h] = __float_as_uint(v) & 0xffffe000u;
                        al[i][h] = __float_as_uint(v - __uint_as_float(ah[i][h]));
                    } else if (SPLIT) {
                        ah[i][h] = (__float_as_uint(v) + 0x1000u) & 0xffffe000u;
                        al[i][h] = __float_as_uint(v - __uint_as_float(ah[i][h]));
                    } else {
                        ah[i][h] = tf32(v);
                        al[i][h] = tf32(v - __uint_as_float(ah[i][h]));
                    }
                }
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    float v = PERM ? bs[(ks + 2 * tig + h) * BS + wn0 + j * 8 + group] : bs[(ks + tig + h * 4) * BS + wn0 + j * 8 + group];
                    if (SPLIT == 2) {
                        bh[j][h] = __float_as_uint(v) & 0xffffe000u;
                        bl[j][h] = __float_as_uint(v - __uint_as_float(bh[j][h]));
                    } else if (SPLIT) {
                        bh[j][h] = (__float_as_uint(v) + 0x1000u) & 0xffffe000u;
                        bl[j][h] = __float_as_uint(v - __uint_as_float(bh[j][h]));
                    } else {
                        bh[j][h] = tf32(v);
                        bl[j][h] = tf32(v - __uint_as_float(bh[j][h]));
                    }
                }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    if (MODE == 0) {
                        MMA(acc[i][j], al[i], bh[j]);
                        MMA(acc[i][j], ah[i], bl[j]);
                        MMA(acc[i][j], ah[i], bh[j]);
                    } else if (MODE == 1) {
                        float part[4] = {0.f, 0.f, 0.f, 0.f};
                        MMA(part, al[i], bh[j]);
                        MMA(part, ah[i], bl[j]);
                        MMA(part, ah[i], bh[j]);
#pragma unroll
                        for (int h = 0; h < 4; ++h) acc[i][j][h] += part[h];
                    } else if (MODE == 2) {
                        MMA(acc[i][j], ah[i], bh[j]);
                    } else {
                        MMA(tile[MODE == 3 ? i : 0][MODE == 3 ? j : 0], al[i], bh[j]);
                        MMA(tile[MODE == 3 ? i : 0][MODE == 3 ? j : 0], ah[i], bl[j]);
                        MMA(tile[MODE == 3 ? i : 0][MODE == 3 ? j : 0], ah[i], bh[j]);
                    }
                }
        }
        if (MODE == 3) {
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j)
#pragma unroll
                    for (int h = 0; h < 4; ++h) acc[i][j][h] += tile[MODE == 3 ? i : 0][MODE == 3 ? j : 0][h];
        }
    }
    asm volatile("cp.async.wait_group 0;");
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int h = 0; h < 4; ++h) {
                int row = bm0 + wm0 + i * 16 + group + (h >> 1) * 8;
                int col = bn0 + wn0 + j * 8 + tig * 2 + (h & 1);
                if (row < m && col < n) c[(size_t)row * n + col] = acc[i][j][h];
            }
}

#define INST(NAME, BM, BN, BK, WM, WN, ST, MODE, SPLIT, PERM)                                                     \
    extern "C" __global__ void __launch_bounds__(WM * WN * 32)                                      \
        NAME(int m, int n, int k, const float* a, const float* b, float* c) {                      \
        gemm_body<BM, BN, BK, WM, WN, ST, MODE, SPLIT, PERM>(m, n, k, a, b, c);                                 \
    }

#include "variants.inc"

extern "C" __global__ void naive(int m, int n, int k, const float* a, const float* b, float* c) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < m && col < n) {
        float acc = 0.0f;
        for (int i = 0; i < k; ++i) {
            acc += a[row * k + i] * b[i * n + col];
        }
        c[row * n + col] = acc;
    }
}
