use expect_test::expect;

use super::super::check::testing::{cuda, first_shown, not_applicable, show, triton};
use crate::syntax::Lang;

const AXPY: &str = r#"// @bench n = 1 << 20, 1001
// @bench x: in f32[n]; y: inout f32[n]; a = 2.5
// @bench grid = cdiv(n, 256); block = 256
__global__ void axpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#;

#[test]
fn a_stream_read_once_is_hinted_and_a_buffer_written_is_not() {
    expect![[r#"
        // @bench n = 1 << 20, 1001
        // @bench x: in f32[n]; y: inout f32[n]; a = 2.5
        // @bench grid = cdiv(n, 256); block = 256
        __global__ void axpy(int n, float a, const float* x, float* y) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = a * __ldcs(&x[i]) + y[i];
        }"#]]
    .assert_eq(&first_shown(
        AXPY,
        "axpy",
        "stream_loads",
        serde_json::json!({}),
    ));
}

/// A block per row through a row pointer, two rows of blocks on a 2-D grid with a shared
/// bias, a float4 view, a half buffer: each read-once load is hinted, the shared one not.
const ROWS: &str = r#"#include <cuda_fp16.h>
// @bench R = 512, 33; S = 1024, 999
// @bench x: in f32[R, S]; out: out f32[R]
// @bench grid = R; block = 256
__global__ void row_sum(const float* __restrict__ x, float* __restrict__ out, int R, int S) {
    const float* row = x + (size_t)blockIdx.x * S;
    float s = 0.f;
    for (int i = threadIdx.x; i < S; i += blockDim.x) s += row[i];
    __shared__ float part[32];
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = part[0] + part[1];
}
// @bench R = 512, 33; C = 1024, 999
// @bench x: in f16[R, C]; bias: in f32[C]; y: out f32[R, C]
// @bench grid = (cdiv(C, 128), R); block = 128
__global__ void add_bias(const __half* x, const float* bias, float* y, int R, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y;
    if (c < C) y[r * C + c] = __half2float(x[r * C + c]) + bias[c];
}
// @bench n4 = 1 << 18, 250
// @bench x: in f32[4 * n4]; y: out f32[4 * n4]
// @bench grid = cdiv(n4, 256); block = 256
__global__ void scale4(const float* x, float* y, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 v = reinterpret_cast<const float4*>(x)[i];
    v.x *= 2.f; v.y *= 2.f; v.z *= 2.f; v.w *= 2.f;
    reinterpret_cast<float4*>(y)[i] = v;
}
"#;

#[test]
fn loads_through_row_pointers_casts_and_2d_grids_take_the_hint_where_no_block_shares_them() {
    let row = first_shown(ROWS, "row_sum", "stream_loads", serde_json::json!({}));
    assert!(row.contains("s += __ldcs(&row[i]);"), "{row}");
    let bias = first_shown(ROWS, "add_bias", "stream_loads", serde_json::json!({}));
    assert!(
        bias.contains("__half2float(__ldcs(&x[r * C + c])) + bias[c];"),
        "{bias}"
    );
    let v4 = first_shown(ROWS, "scale4", "stream_loads", serde_json::json!({}));
    assert!(
        v4.contains("float4 v = __ldcs(&reinterpret_cast<const float4*>(x)[i]);"),
        "{v4}"
    );
    let out = cuda(ROWS, "add_bias", "stream_loads", serde_json::json!({})).unwrap();
    assert_eq!(out[0].label, "streaming loads (`__ldcs`) of x");
}

const REFUSED: &str = r#"// @bench rows = 4096, 33; K = 1024, 77
// @bench W: in f32[rows, K]; v: in f32[K]; y: out f32[rows]
// @bench grid = cdiv(rows, 128); block = 128
__global__ void matvec(const float* W, const float* v, float* y, int rows, int K) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    float s = 0.f;
    for (int k = 0; k < K; ++k) s += W[row * K + k] * v[k];
    y[row] = s;
}
// @bench n = 4096, 77
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 128); block = 128
__global__ void hinted(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __ldg(&x[i]) * 2.f;
}
// @bench n = 4096, 77
// @bench m: in bool[n]; y: inout f32[n]
// @bench grid = cdiv(n, 128); block = 128
__global__ void masked(const bool* m, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && m[i]) y[i] = 0.f;
}
"#;

#[test]
fn shared_strided_and_unhintable_loads_are_refused_with_the_reason_and_ldg_is_replaced() {
    let na = |k: &str| not_applicable(cuda(REFUSED, k, "stream_loads", serde_json::json!({})));
    // The thread walks its row alone (stride K along the lanes) and every thread reads `v`.
    expect!["`matvec` has no load of data one thread reads alone without a cache hint: every load is hinted, of a buffer the kernel writes, shared by several threads or blocks, or lanes too far apart"].assert_eq(&na("matvec"));
    // `__ldg` keeps its lines like a plain load: the streaming hint replaces it.
    let ldg = first_shown(REFUSED, "hinted", "stream_loads", serde_json::json!({}));
    assert!(ldg.contains("y[i] = __ldcs(&x[i]) * 2.f;"), "{ldg}");
    let once = cuda(REFUSED, "hinted", "stream_loads", serde_json::json!({})).unwrap();
    let twice = not_applicable(cuda(
        &once[0].text,
        "hinted",
        "stream_loads",
        serde_json::json!({}),
    ));
    assert!(twice.starts_with("`hinted` has no load"), "{twice}");
    expect!["`masked`: no load can take the hint: `m[i]`: `__ldcs` takes no `bool`"]
        .assert_eq(&na("masked"));
}

const ROW_VAR: &str = r#"import triton
import triton.language as tl


# @bench R = 256, 21; C = 1024, 1000
# @bench x: in f32[R, C]; v: in f32[C]; var: out f32[R]
# @bench grid = R; BLOCK = 256
@triton.jit
def row_var(x, v, var, C, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    s = tl.zeros((BLOCK,), dtype=tl.float32)
    for c0 in range(0, C, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        s += tl.load(x + r * C + cols, mask=cols < C, other=0.0) * tl.load(v + cols, mask=cols < C)
    tl.store(var + r, tl.sum(s, axis=0) / C)
"#;

#[test]
fn triton_loads_each_program_reads_alone_get_evict_first() {
    let out = triton(ROW_VAR, "row_var", "stream_loads", serde_json::json!({})).unwrap();
    assert_eq!(out[0].label, "`evict_first` loads of x");
    let shown = show(Lang::Triton, ROW_VAR, &out[0], "row_var");
    assert!(
        shown.contains(
            "tl.load(x + r * C + cols, mask=cols < C, other=0.0, eviction_policy=\"evict_first\") * tl.load(v + cols, mask=cols < C)"
        ),
        "{shown}"
    );
    assert_eq!(
        out[1].label,
        "loads of x kept in L2 ahead of the stores (`evict_last`)"
    );
    let kept = show(Lang::Triton, ROW_VAR, &out[1], "row_var");
    assert!(
        kept.contains("other=0.0, eviction_policy=\"evict_last\") * tl.load(v + cols"),
        "{kept}"
    );
    // Applied again, nothing is left to hint.
    let again = not_applicable(triton(
        &out[0].text,
        "row_var",
        "stream_loads",
        serde_json::json!({}),
    ));
    assert!(
        again.contains("no load of data one thread reads alone"),
        "{again}"
    );
}

/// Flat elements whose channel is `(offs // HW) % C`: neighbouring lanes gather the same
/// per-channel parameters (shared, kept in cache); only the stream itself, and a gather
/// through a remainder of the lanes in another style, are told apart from it.
const CHANNEL_GATHER: &str = r#"import triton
import triton.language as tl


# @bench N = 8, 3; C = 16, 5; HW = 1024, 77
# @bench x: in f32[N, C, HW]; g: in f32[C]; h: in f32[HW]; y: out f32[N, C, HW]
# @bench total = N * C * HW; grid = cdiv(total, BLOCK); BLOCK = 1024
@triton.jit
def scale_channels(x, g, h, y, total, C, HW, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < total
    ch = offs // HW
    c = ch % C
    v = tl.load(x + offs, mask=ok, other=0.0)
    w = tl.load(g + c, mask=ok, other=1.0) * tl.load(h + offs % HW, mask=ok, other=1.0)
    tl.store(y + offs, v * w, mask=ok)
"#;

#[test]
fn a_triton_gather_through_a_floor_division_or_remainder_of_the_lanes_is_not_read_once() {
    let out = triton(
        CHANNEL_GATHER,
        "scale_channels",
        "stream_loads",
        serde_json::json!({}),
    )
    .unwrap();
    assert_eq!(out[0].label, "`evict_first` loads of x");
}

#[test]
fn read_once_needs_the_thread_and_every_axis_the_launch_spreads_over() {
    use crate::optimize::facts::read_once;
    let (tx, ty, bx, by) = (1u8, 2u8, 8u8, 16u8);
    assert!(read_once(tx | bx, [64, 1, 1], [256, 1, 1]));
    assert!(read_once(tx, [1, 1, 1], [256, 1, 1]), "one block");
    assert!(
        !read_once(bx, [64, 1, 1], [256, 1, 1]),
        "the block's threads share it"
    );
    assert!(
        !read_once(tx | bx, [8, 512, 1], [128, 1, 1]),
        "rows of blocks share it"
    );
    assert!(read_once(tx | bx | by, [8, 512, 1], [128, 1, 1]));
    assert!(
        !read_once(tx | bx, [64, 1, 1], [32, 8, 1]),
        "threads along y share it"
    );
    assert!(read_once(tx | ty | bx, [64, 1, 1], [32, 8, 1]));
}

#[test]
fn a_triton_tile_shared_along_a_program_axis_is_left_alone() {
    let src = include_str!("../../../../../tests/fixtures/rewrites/triton/grid2d.py");
    let out = triton(src, "add_bias_2d", "stream_loads", serde_json::json!({})).unwrap();
    assert_eq!(out[0].label, "`evict_first` loads of x_ptr");
    let shown = show(Lang::Triton, src, &out[0], "add_bias_2d");
    assert!(
        shown.contains("b = tl.load(b_ptr + cols, mask=cols < C)\n"),
        "{shown}"
    );
}

/// A vector load through a cast of an element's address, as register tiles and hand
/// vectorized code write it: the load is the cast's element, read once a lane.
const CAST_TILES: &str = r#"// @bench R = 1024, 37; C = 2048, 333
// @bench x: in f32[R, C]; out: out f32[R]
// @bench grid = cdiv(R * 32, 256); block = 256
__global__ void tile_sum(const float* x, float* out, int R, int C) {
    int r = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (r >= R) return;
    float acc = 0.f;
    for (int c = 4 * lane; c + 3 < C; c += 128) {
        alignas(16) float t[4];
        if (reinterpret_cast<size_t>(&x[(long)r * C + c]) % 16 != 0 || (size_t)&x[0] % 16 != 0) continue;
        reinterpret_cast<uint4*>(t)[0] = reinterpret_cast<const uint4*>(&x[(long)r * C + c])[0];
        acc += t[0] + t[1] + t[2] + t[3];
    }
    for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffff, acc, o);
    if (lane == 0) out[r] = acc;
}
// @bench n = 1 << 20, 1000
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 4 * 256); block = 256
__global__ void deref4(const float* x, float* y, int n) {
    int i = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (i + 3 >= n) return;
    float4 v = *(const float4*)&x[i];
    v.x += 1.f;
    *reinterpret_cast<float4*>(&y[i]) = v;
}
"#;

#[test]
fn vector_loads_through_a_cast_address_are_hinted_as_the_vector() {
    let tile = first_shown(
        CAST_TILES,
        "tile_sum",
        "stream_loads",
        serde_json::json!({}),
    );
    assert!(
        tile.contains("= __ldcs(&reinterpret_cast<const uint4*>(&x[(long)r * C + c])[0]);"),
        "{tile}"
    );
    let deref = first_shown(CAST_TILES, "deref4", "stream_loads", serde_json::json!({}));
    assert!(
        deref.contains("float4 v = __ldcs((const float4*)&x[i]);"),
        "{deref}"
    );
    assert!(
        deref.contains("*reinterpret_cast<float4*>(&y[i]) = v;"),
        "{deref}"
    );
}
