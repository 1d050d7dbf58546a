// kernel-lsp's own device helpers for verification and timing (worker/cuda/devgen.rs):
// inputs drawn from a counter-based generator, guard bytes, and the comparison of two
// buffers, all on the GPU so that no buffer crosses PCIe unless a failure needs its values.
//
// The generator is a pure function of (key, element index): the same values on every run,
// every GPU and every launch geometry. Its CPU twin is worker/cuda/counter.rs; the two
// must stay in step (the CPU tests pin the twin's values, the GPU tests compare the two).
// Compiled with --fmad=false so that lo + (hi - lo) * u rounds as it does on the CPU.
//
// No headers: f16 and bf16 are converted by hand (round to nearest even, as the CPU twin).

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;

// Element types, in the order of spec::DType.
#define DT_F16 0
#define DT_BF16 1
#define DT_F32 2
#define DT_F64 3
#define DT_I8 4
#define DT_I16 5
#define DT_I32 6
#define DT_I64 7
#define DT_U8 8
#define DT_U32 9
#define DT_BOOL 10

// Distributions, in the order of spec::Dist, then the poison of `out` buffers.
#define DS_UNIFORM 0
#define DS_NORMAL 1
#define DS_RANDINT 2
#define DS_ZEROS 3
#define DS_ONES 4
#define DS_ARANGE 5
#define DS_POISON 6

__device__ __forceinline__ u64 klsp_mix(u64 z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Word `k` of the stream `key` at element `i`.
__device__ __forceinline__ u64 klsp_bits(u64 key, u64 i, u64 k) {
    return klsp_mix(key ^ klsp_mix(i * 0x9e3779b97f4a7c15ull + k * 0xd1b54a32d192ed03ull + 1ull));
}

__device__ __forceinline__ int klsp_size(int dt) {
    switch (dt) {
    case DT_F16: case DT_BF16: case DT_I16: return 2;
    case DT_F32: case DT_I32: case DT_U32: return 4;
    case DT_F64: case DT_I64: return 8;
    default: return 1;
    }
}

__device__ u32 klsp_f32_to_f16(float f) {
    u32 bits = __float_as_uint(f);
    u32 sign = (bits >> 16) & 0x8000u;
    int exp = (int)((bits >> 23) & 0xff);
    u32 man = bits & 0x7fffffu;
    if (exp == 0xff) return sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u);
    int e = exp - 127 + 15;
    if (e >= 0x1f) return sign | 0x7c00u;
    if (e <= 0) {
        if (e < -10) return sign;
        man |= 0x800000u;
        u32 shift = (u32)(14 - e);
        u32 half = man >> shift;
        u32 rem = man & ((1u << shift) - 1u);
        u32 mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (half & 1u))) half += 1u;
        return sign | half;
    }
    u32 half = sign | ((u32)e << 10) | (man >> 13);
    u32 rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half += 1u;
    return half;
}

__device__ float klsp_f16_to_f32(u32 h) {
    u32 sign = (h & 0x8000u) << 16;
    u32 exp = (h >> 10) & 0x1fu;
    u32 man = h & 0x3ffu;
    if (exp == 0) {
        if (man == 0) return __uint_as_float(sign);
        // Subnormal: value = man * 2^-24.
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 0x1f) return __uint_as_float(sign | (man ? 0x7fc00000u : 0x7f800000u) | (man << 13));
    return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
}

__device__ u32 klsp_f32_to_bf16(float f) {
    u32 bits = __float_as_uint(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return ((bits >> 16) | 0x40u) & 0xffffu;
    u32 lsb = (bits >> 16) & 1u;
    return ((bits + 0x7fffu + lsb) >> 16) & 0xffffu;
}

__device__ __forceinline__ float klsp_bf16_to_f32(u32 h) { return __uint_as_float(h << 16); }

// A real value into the element's bits: floats round to nearest (f16/bf16 through f32, as
// the CPU twin does); integers take the floor and clamp; NaN becomes 0; bool is v != 0.
__device__ u64 klsp_encode_real(int dt, double v) {
    double lo, hi;
    switch (dt) {
    case DT_F16: return klsp_f32_to_f16((float)v);
    case DT_BF16: return klsp_f32_to_bf16((float)v);
    case DT_F32: return (u64)__float_as_uint((float)v);
    case DT_F64: return (u64)__double_as_longlong(v);
    case DT_BOOL: return (v != 0.0 && v == v) ? 1ull : 0ull;
    case DT_I8: lo = -128.0; hi = 127.0; break;
    case DT_I16: lo = -32768.0; hi = 32767.0; break;
    case DT_I32: lo = -2147483648.0; hi = 2147483647.0; break;
    case DT_U8: lo = 0.0; hi = 255.0; break;
    case DT_U32: lo = 0.0; hi = 4294967295.0; break;
    default: lo = -9223372036854775808.0; hi = 9223372036854775807.0; break;
    }
    if (v != v) return 0ull;
    double f = floor(v);
    if (f < lo) f = lo;
    if (f > hi) f = hi;
    if (dt == DT_I64) {
        if (f >= 9223372036854775807.0) return 0x7fffffffffffffffull;
        return (u64)(i64)f;
    }
    if (dt == DT_U8 || dt == DT_U32) return (u64)f;
    return (u64)(i64)f;
}

// An integer value into the element's bits, clamped to the type; floats get the nearest.
__device__ u64 klsp_encode_int(int dt, i64 v) {
    i64 lo, hi;
    switch (dt) {
    case DT_F16: case DT_BF16: case DT_F32: case DT_F64: return klsp_encode_real(dt, (double)v);
    case DT_BOOL: return v != 0 ? 1ull : 0ull;
    case DT_I8: lo = -128; hi = 127; break;
    case DT_I16: lo = -32768; hi = 32767; break;
    case DT_I32: lo = -2147483648ll; hi = 2147483647ll; break;
    case DT_U8: lo = 0; hi = 255; break;
    case DT_U32: lo = 0; hi = 4294967295ll; break;
    default: return (u64)v;
    }
    if (v < lo) v = lo;
    if (v > hi) v = hi;
    return (u64)v;
}

__device__ u64 klsp_poison(int dt) {
    switch (dt) {
    case DT_F16: return 0x7eadull;
    case DT_BF16: return 0x7fedull;
    case DT_F32: return 0x7fc0deadull;
    case DT_F64: return 0x7ff8deaddeaddeadull;
    case DT_I16: return 0xa5a5ull;
    case DT_I32: case DT_U32: return 0xa5a5a5a5ull;
    case DT_I64: return 0xa5a5a5a5a5a5a5a5ull;
    default: return 0xa5ull;
    }
}

// The value of element `i` of a buffer filled from `dist` with stream `key`, as an
// encoder gives it (a negative integer sign-extended to 64 bits).
__device__ u64 klsp_gen_wide(int dt, int dist, double p1, double p2, i64 ilo, u64 ispan,
                             u64 key, u64 i) {
    switch (dist) {
    case DS_UNIFORM: {
        double u = (double)(klsp_bits(key, i, 0) >> 11) * 1.1102230246251565e-16;
        return klsp_encode_real(dt, p1 + (p2 - p1) * u);
    }
    case DS_NORMAL: {
        double u1 = (double)((klsp_bits(key, i, 0) >> 11) + 1ull) * 1.1102230246251565e-16;
        double u2 = (double)(klsp_bits(key, i, 1) >> 11) * 1.1102230246251565e-16;
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        return klsp_encode_real(dt, p1 + p2 * z);
    }
    case DS_RANDINT:
        return klsp_encode_int(dt, (i64)((u64)ilo + __umul64hi(klsp_bits(key, i, 0), ispan)));
    case DS_ZEROS: return klsp_encode_int(dt, 0);
    case DS_ONES: return klsp_encode_int(dt, 1);
    case DS_ARANGE: return klsp_encode_int(dt, (i64)i);
    default: return klsp_poison(dt);
    }
}

// The bits of element `i`, exactly as the element holds them: the encoded value cut to
// the element's size (so a negative i8 is 0xc5, as a load reads it back, not 0xff..c5).
__device__ u64 klsp_gen(int dt, int dist, double p1, double p2, i64 ilo, u64 ispan, u64 key,
                        u64 i) {
    u64 v = klsp_gen_wide(dt, dist, p1, p2, ilo, ispan, key, i);
    int size = klsp_size(dt);
    return size >= 8 ? v : v & ((1ull << (8 * size)) - 1ull);
}

__device__ __forceinline__ u64 klsp_load(const unsigned char* p, int size, u64 i) {
    switch (size) {
    case 2: return ((const unsigned short*)p)[i];
    case 4: return ((const u32*)p)[i];
    case 8: return ((const u64*)p)[i];
    default: return p[i];
    }
}

__device__ __forceinline__ void klsp_store(unsigned char* p, int size, u64 i, u64 bits) {
    switch (size) {
    case 2: ((unsigned short*)p)[i] = (unsigned short)bits; break;
    case 4: ((u32*)p)[i] = (u32)bits; break;
    case 8: ((u64*)p)[i] = bits; break;
    default: p[i] = (unsigned char)bits; break;
    }
}

extern "C" __global__ void klsp_fill(unsigned char* buf, u64 n, int dt, int dist, double p1,
                                     double p2, i64 ilo, u64 ispan, u64 key) {
    int size = klsp_size(dt);
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x)
        klsp_store(buf, size, i, klsp_gen(dt, dist, p1, p2, ilo, ispan, key, i));
}

// Guard bytes: byte j of the guard with stream `key`. Never a run of equal bytes, and
// different for every buffer, case and trial, so bytes copied from anywhere else show.
__device__ __forceinline__ unsigned char klsp_guard_byte(u64 key, u64 j) {
    return (unsigned char)(klsp_bits(key, j >> 3, 7) >> ((j & 7ull) * 8ull));
}

extern "C" __global__ void klsp_guard_fill(unsigned char* buf, u64 n, u64 key) {
    for (u64 j = blockIdx.x * (u64)blockDim.x + threadIdx.x; j < n;
         j += (u64)gridDim.x * blockDim.x)
        buf[j] = klsp_guard_byte(key, j);
}

// What a scan of one or two buffers found. Counters are summed with atomics; `first_*`
// start at ~0 and take the minimum, `last_*` the maximum plus one (0: none).
struct KlspStats {
    u64 bad;           // elements outside tolerance (compare) or differing (match)
    u64 first_bad;
    u64 last_bad;
    u64 max_abs;       // bits of a non-negative double: integer order is numeric order
    u64 max_rel;
    u64 bit_equal;     // a[i] and b[i] bit for bit equal
    u64 a_same;        // a[i] equal to a[0], bit for bit
    u64 b_same;        // b[i] equal to b[0]
};

__device__ __forceinline__ double klsp_value(int dt, u64 bits) {
    switch (dt) {
    case DT_F16: return (double)klsp_f16_to_f32((u32)bits);
    case DT_BF16: return (double)klsp_bf16_to_f32((u32)bits);
    case DT_F32: return (double)__uint_as_float((u32)bits);
    case DT_F64: return __longlong_as_double((i64)bits);
    case DT_I8: return (double)(signed char)bits;
    case DT_I16: return (double)(short)bits;
    case DT_I32: return (double)(int)bits;
    case DT_I64: return (double)(i64)bits;
    case DT_U32: return (double)(u32)bits;
    default: return (double)(unsigned char)bits;
    }
}

__device__ __forceinline__ bool klsp_is_int(int dt) { return dt >= DT_I8; }

// Same rule as compare::within: NaN matches only NaN, equal values (infinities included)
// match, an infinity matches nothing else, else |a - b| <= atol + rtol * |a|.
__device__ __forceinline__ bool klsp_within(double e, double a, double atol, double rtol) {
    if (e != e || a != a) return e != e && a != a;
    if (e == a) return true;
    if (isinf(e) || isinf(a)) return false;
    return fabs(a - e) <= atol + rtol * fabs(e);
}

__device__ void klsp_flush_stats(KlspStats* out, u64 bad, u64 first, u64 last, double mabs,
                                 double mrel, u64 eq, u64 asame, u64 bsame) {
    // Warp reduction first: one set of atomics per warp.
    for (int o = 16; o > 0; o >>= 1) {
        bad += __shfl_down_sync(0xffffffffu, bad, o);
        u64 f = __shfl_down_sync(0xffffffffu, first, o);
        first = f < first ? f : first;
        u64 l = __shfl_down_sync(0xffffffffu, last, o);
        last = l > last ? l : last;
        double x = __shfl_down_sync(0xffffffffu, mabs, o);
        mabs = x > mabs ? x : mabs;
        double y = __shfl_down_sync(0xffffffffu, mrel, o);
        mrel = y > mrel ? y : mrel;
        eq += __shfl_down_sync(0xffffffffu, eq, o);
        asame += __shfl_down_sync(0xffffffffu, asame, o);
        bsame += __shfl_down_sync(0xffffffffu, bsame, o);
    }
    if ((threadIdx.x & 31u) == 0u) {
        if (bad) {
            atomicAdd(&out->bad, bad);
            atomicMin(&out->first_bad, first);
            atomicMax(&out->last_bad, last);
        }
        if (mabs > 0.0) atomicMax(&out->max_abs, (u64)__double_as_longlong(mabs));
        if (mrel > 0.0) atomicMax(&out->max_rel, (u64)__double_as_longlong(mrel));
        atomicAdd(&out->bit_equal, eq);
        atomicAdd(&out->a_same, asame);
        atomicAdd(&out->b_same, bsame);
    }
}

// Compares `b` (actual) with `a` (expected), n elements of type dt, under (atol, rtol);
// `exact` compares bits (integers with zero tolerance). Launch with blockDim a multiple of
// 32 and every thread of a warp present (the grid-stride loop keeps them together).
extern "C" __global__ void klsp_compare(const unsigned char* a, const unsigned char* b, u64 n,
                                        int dt, double atol, double rtol, int exact,
                                        KlspStats* out) {
    int size = klsp_size(dt);
    u64 a0 = n ? klsp_load(a, size, 0) : 0ull, b0 = n ? klsp_load(b, size, 0) : 0ull;
    u64 bad = 0, first = ~0ull, last = 0, eq = 0, asame = 0, bsame = 0;
    double mabs = 0.0, mrel = 0.0;
    u64 stride = (u64)gridDim.x * blockDim.x;
    u64 start = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    for (u64 i = start; i < n; i += stride) {
        u64 x = klsp_load(a, size, i), y = klsp_load(b, size, i);
        eq += x == y;
        asame += x == a0;
        bsame += y == b0;
        double e = klsp_value(dt, x), v = klsp_value(dt, y);
        bool ok = (exact && klsp_is_int(dt)) ? x == y : klsp_within(e, v, atol, rtol);
        if (!ok) {
            bad++;
            first = i < first ? i : first;
            last = i + 1 > last ? i + 1 : last;
        }
        if (!isinf(e) && !isinf(v) && e == e && v == v) {
            double d = fabs(v - e);
            mabs = d > mabs ? d : mabs;
            if (e != 0.0) {
                double r = d / fabs(e);
                mrel = r > mrel ? r : mrel;
            }
        }
    }
    klsp_flush_stats(out, bad, first, last, mabs, mrel, eq, asame, bsame);
}

// Compares a buffer with what `klsp_fill` would write there (bit for bit): `bad` counts
// the elements that differ, `bit_equal` those that match. Used to prove that `in`
// buffers came back unchanged and that a reference wrote every `out` element.
extern "C" __global__ void klsp_match(const unsigned char* buf, u64 n, int dt, int dist,
                                      double p1, double p2, i64 ilo, u64 ispan, u64 key,
                                      KlspStats* out) {
    int size = klsp_size(dt);
    u64 bad = 0, first = ~0ull, last = 0, eq = 0;
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += stride) {
        bool same = klsp_load(buf, size, i) == klsp_gen(dt, dist, p1, p2, ilo, ispan, key, i);
        eq += same;
        if (!same) {
            bad++;
            first = i < first ? i : first;
            last = i + 1 > last ? i + 1 : last;
        }
    }
    klsp_flush_stats(out, bad, first, last, 0.0, 0.0, eq, 0, 0);
}

// Compares guard bytes with their pattern: `bad` counts changed bytes, `first_bad` and
// `last_bad` bound them (byte offsets within the guard).
extern "C" __global__ void klsp_guard_check(const unsigned char* buf, u64 n, u64 key,
                                            KlspStats* out) {
    u64 bad = 0, first = ~0ull, last = 0;
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 j = blockIdx.x * (u64)blockDim.x + threadIdx.x; j < n; j += stride) {
        if (buf[j] != klsp_guard_byte(key, j)) {
            bad++;
            first = j < first ? j : first;
            last = j + 1 > last ? j + 1 : last;
        }
    }
    klsp_flush_stats(out, bad, first, last, 0.0, 0.0, 0, 0, 0);
}
