// Variants of the f32 matmul on the tensor cores that `tile_matmul`'s 3xTF32 candidate was
// chosen from (issue #30; docs/benchmarks.md, "Matmuls on the tensor cores"): 3xTF32 on
// mma.sync.m16n8k8 with a cp.async multi-stage pipeline, C[m,n] = A[m,k] * B[k,n]
// row-major, per-chunk alignment check (a 16-byte cp.async where the 4 elements are in
// bounds and aligned, else 4-byte ones). Built and run by tensor_matmul_variants.py,
// which writes the INST lines (the variants) into variants.inc.
//
// MODE: how the products are accumulated (below); SPLIT: 0 two cvt.rna.tf32.f32, 1 the
// TF32 part rounded by integer add and mask, 2 truncated by the mask, 3 the raw bits as
// the TF32 part (the tensor cores read their top 19) and the rest below the mask. (An
// earlier PERM knob, A's fragments read as pairs with k permuted alike in A and B, was
// within noise on the H100 and is gone.)

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
// 8 added in f32; 2: plain TF32 (one product); 3: 3xTF32, fresh accumulator per k tile;
// 4: as 3, but row by row of fragments (B's fragments of the whole k tile first, then per
// m16 row its own fresh accumulators: fewer live registers).
// FILL: 0 the copy loop `for (e = tid; e < N; e += T)` (trip count unknown to the
// compiler), 1 a counted loop the compiler unrolls. LDSM: 1 reads A's fragments with
// ldmatrix.x4 (k contiguous rows). ZF: 1 the first product of a fresh accumulator is
// written from zero ("=f" outputs) instead of zeroing the accumulator first.
template <int BM, int BN, int BK, int WM, int WN, int ST, int MODE, int SPLIT, int FILL, int LDSM, int ZF>
struct Gemm {
    static constexpr int AS = BK + 4, BS = BN + 8, A_ST = BM * AS, B_ST = BK * BS, T = WM * WN * 32;
    static constexpr int WTM = BM / WM, WTN = BN / WN, MI = WTM / 16, NI = WTN / 8;
    static __device__ __forceinline__ void split(float v, unsigned& hi, unsigned& lo) {
        if (SPLIT == 3) {  // hi: the raw bits (the tensor cores read the top 19), lo: the rest
            hi = __float_as_uint(v);
            lo = __float_as_uint(v - __uint_as_float(hi & 0xffffe000u));
        } else if (SPLIT == 2) {
            hi = __float_as_uint(v) & 0xffffe000u;
            lo = __float_as_uint(v - __uint_as_float(hi));
        } else if (SPLIT == 1) {
            hi = (__float_as_uint(v) + 0x1000u) & 0xffffe000u;
            lo = __float_as_uint(v - __uint_as_float(hi));
        } else {
            hi = tf32(v);
            lo = tf32(v - __uint_as_float(hi));
        }
    }
    static __device__ __forceinline__ void a_frag(const float* as, int row0, int ks, int lane, unsigned (&hi)[4], unsigned (&lo)[4]) {
        const int group = lane / 4, tig = lane % 4;
        float v[4];
        if (LDSM) {
            const float* p = as + (row0 + (lane & 7) + ((lane >> 3) & 1) * 8) * AS + ks + (lane >> 4) * 4;
            unsigned r[4];
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                         : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                         : "r"((unsigned)__cvta_generic_to_shared(p)));
#pragma unroll
            for (int h = 0; h < 4; ++h) v[h] = __uint_as_float(r[h]);
        } else {
#pragma unroll
            for (int h = 0; h < 4; ++h) v[h] = as[(row0 + group + (h & 1) * 8) * AS + ks + tig + (h >> 1) * 4];
        }
#pragma unroll
        for (int h = 0; h < 4; ++h) split(v[h], hi[h], lo[h]);
    }
    static __device__ __forceinline__ void b_frag(const float* bs, int col0, int ks, int lane, unsigned (&hi)[2], unsigned (&lo)[2]) {
        const int group = lane / 4, tig = lane % 4;
#pragma unroll
        for (int h = 0; h < 2; ++h) split(bs[(ks + tig + h * 4) * BS + col0 + group], hi[h], lo[h]);
    }
    // Three products into a fresh accumulator (`first`: written from zero where ZF).
    static __device__ __forceinline__ void three(float (&t)[4], const unsigned (&ah)[4], const unsigned (&al)[4],
                                                 const unsigned (&bh)[2], const unsigned (&bl)[2], bool first) {
        if (ZF && first) {
            asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};"
                         : "=f"(t[0]), "=f"(t[1]), "=f"(t[2]), "=f"(t[3])
                         : "r"(al[0]), "r"(al[1]), "r"(al[2]), "r"(al[3]), "r"(bh[0]), "r"(bh[1]), "f"(0.0f));
        } else {
            MMA(t, al, bh);
        }
        MMA(t, ah, bl);
        MMA(t, ah, bh);
    }
};

template <int BM, int BN, int BK, int WM, int WN, int ST, int MODE, int SPLIT, int FILL, int LDSM, int ZF>
__device__ __forceinline__ void gemm_body(int m, int n, int k, const float* a, const float* b, float* c) {
    using G = Gemm<BM, BN, BK, WM, WN, ST, MODE, SPLIT, FILL, LDSM, ZF>;
    extern __shared__ __align__(16) float sm[];
    constexpr int AS = G::AS, BS = G::BS, A_ST = G::A_ST, B_ST = G::B_ST, T = G::T;
    constexpr int WTM = G::WTM, WTN = G::WTN, MI = G::MI, NI = G::NI, KS = BK / 8;
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
    auto a_chunk = [&](float* as, int e, int k0) {
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
    };
    auto b_chunk = [&](float* bs, int e, int k0) {
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
    };
    auto load = [&](int slot, int k0) {
        float* as = As + slot * A_ST;
        float* bs = Bs + slot * B_ST;
        constexpr int NA = BM * BK / 4, NB = BK * BN / 4;
        if (FILL) {
#pragma unroll
            for (int c = 0; c < (NA + T - 1) / T; ++c)
                if (NA % T == 0 || tid + c * T < NA) a_chunk(as, tid + c * T, k0);
#pragma unroll
            for (int c = 0; c < (NB + T - 1) / T; ++c)
                if (NB % T == 0 || tid + c * T < NB) b_chunk(bs, tid + c * T, k0);
        } else {
#pragma unroll
            for (int e = tid; e < NA; e += T) a_chunk(as, e, k0);
#pragma unroll
            for (int e = tid; e < NB; e += T) b_chunk(bs, e, k0);
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
        if (MODE == 4) {
            unsigned bh[KS][NI][2], bl[KS][NI][2];
#pragma unroll
            for (int s = 0; s < KS; ++s)
#pragma unroll
                for (int j = 0; j < NI; ++j) G::b_frag(bs, wn0 + j * 8, s * 8, lane, bh[s][j], bl[s][j]);
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                float t[NI][4];
                if (!ZF) {
#pragma unroll
                    for (int j = 0; j < NI; ++j)
#pragma unroll
                        for (int h = 0; h < 4; ++h) t[j][h] = 0.f;
                }
#pragma unroll
                for (int s = 0; s < KS; ++s) {
                    unsigned ah[4], al[4];
                    G::a_frag(as, wm0 + i * 16, s * 8, lane, ah, al);
#pragma unroll
                    for (int j = 0; j < NI; ++j) G::three(t[j], ah, al, bh[s][j], bl[s][j], s == 0);
                }
#pragma unroll
                for (int j = 0; j < NI; ++j)
#pragma unroll
                    for (int h = 0; h < 4; ++h) acc[i][j][h] += t[j][h];
            }
            continue;
        }
        float tile[MODE == 3 ? MI : 1][MODE == 3 ? NI : 1][4];
        if (MODE == 3 && !ZF) {
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
            for (int i = 0; i < MI; ++i) G::a_frag(as, wm0 + i * 16, ks, lane, ah[i], al[i]);
#pragma unroll
            for (int j = 0; j < NI; ++j) G::b_frag(bs, wn0 + j * 8, ks, lane, bh[j], bl[j]);
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
                        G::three(part, ah[i], al[i], bh[j], bl[j], true);
#pragma unroll
                        for (int h = 0; h < 4; ++h) acc[i][j][h] += part[h];
                    } else if (MODE == 2) {
                        MMA(acc[i][j], ah[i], bh[j]);
                    } else {
                        G::three(tile[MODE == 3 ? i : 0][MODE == 3 ? j : 0], ah[i], al[i], bh[j], bl[j], ks == 0);
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

#define INST(NAME, BM, BN, BK, WM, WN, ST, MODE, SPLIT, FILL, LDSM, ZF)                        \
    extern "C" __global__ void __launch_bounds__(WM * WN * 32)                                      \
        NAME(int m, int n, int k, const float* a, const float* b, float* c) {                      \
        gemm_body<BM, BN, BK, WM, WN, ST, MODE, SPLIT, FILL, LDSM, ZF>(m, n, k, a, b, c);           \
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
