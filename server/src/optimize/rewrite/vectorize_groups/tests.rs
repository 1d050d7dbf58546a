use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{cuda, labels, not_applicable, ranked_steps, show};
use crate::syntax::Lang;

const GROUPS: &str = include_str!("../../../../../tests/fixtures/rewrites/vec_groups/groups.cu");
const HALVES: &str = include_str!("../../../../../tests/fixtures/rewrites/vec_groups/halves.cu");
const POOLS: &str = include_str!("../../../../../tests/fixtures/rewrites/vec_groups/pools.cu");
const MAXPOOL: &str = include_str!("../../../../../tests/gpu/drafts/maxpool2x2.cu");
const ROPE: &str = include_str!("../../../../../examples/rope_pairs.cu");
const SAXPY: &str = include_str!("../../../../../examples/saxpy.cu");

fn first(src: &str, kernel: &str) -> String {
    let out = cuda(src, kernel, "vectorize_groups", json!({})).unwrap();
    show(Lang::Cuda, src, &out[0], kernel)
}

fn why(src: &str, kernel: &str) -> String {
    not_applicable(cuda(src, kernel, "vectorize_groups", json!({})))
}

#[test]
fn rope_rows_split_index_folds_back_to_pairs() {
    let out = cuda(ROPE, "rope_pairs", "vectorize_groups", json!({})).unwrap();
    assert_eq!(
        labels(&out),
        [
            "groups: x, y as float2",
            "2 groups per thread: x, y as float4"
        ]
    );
    expect![[r#"
        // @bench rows = 65536, 5; half = 64, 63
        // @bench x: in f32[rows, 2 * half]; cos: in f32[rows, half]; sin: in f32[rows, half]
        // @bench y: out f32[rows, 2 * half]
        // @bench grid = cdiv(rows * half, 2 * 256); block = 256
        // @bench reference = torch: torch.stack((x[:, 0::2] * cos - x[:, 1::2] * sin, x[:, 0::2] * sin + x[:, 1::2] * cos), -1).flatten(1)
        __global__ void rope_pairs(const float* x, const float* cos, const float* sin, float* y, int rows, int half) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (2 * i + 1 < (rows * half) &&
                reinterpret_cast<unsigned long long>(x) % 16 == 0 &&
                reinterpret_cast<unsigned long long>(y) % 16 == 0) {
                const float4 x4 = reinterpret_cast<const float4*>(x)[i];
                float4 y4;
                {
                    int r = (2 * i) / half;
                    int p = (2 * i) % half;
                    float c = cos[(2 * i)];
                    float s = sin[(2 * i)];
                    float x0 = x4.x;
                    float x1 = x4.y;
                    y4.x = x0 * c - x1 * s;
                    y4.y = x0 * s + x1 * c;
                }
                {
                    int r = (2 * i + 1) / half;
                    int p = (2 * i + 1) % half;
                    float c = cos[(2 * i + 1)];
                    float s = sin[(2 * i + 1)];
                    float x0 = x4.z;
                    float x1 = x4.w;
                    y4.z = x0 * c - x1 * s;
                    y4.w = x0 * s + x1 * c;
                }
                reinterpret_cast<float4*>(y)[i] = y4;
            } else {
                for (int j = 2 * i; j < (rows * half); ++j) {
                    int r = j / half;
                    int p = j % half;
                    float c = cos[j];
                    float s = sin[j];
                    float x0 = x[r * 2 * half + 2 * p];
                    float x1 = x[r * 2 * half + 2 * p + 1];
                    y[r * 2 * half + 2 * p] = x0 * c - x1 * s;
                    y[r * 2 * half + 2 * p + 1] = x0 * s + x1 * c;
                }
            }
        }"#]].assert_eq(&show(Lang::Cuda, ROPE, &out[1], "rope_pairs"));
    expect![[r#"
        // @bench rows = 65536, 5; half = 64, 63
        // @bench x: in f32[rows, 2 * half]; cos: in f32[rows, half]; sin: in f32[rows, half]
        // @bench y: out f32[rows, 2 * half]
        // @bench grid = cdiv(rows * half, 256); block = 256
        // @bench reference = torch: torch.stack((x[:, 0::2] * cos - x[:, 1::2] * sin, x[:, 0::2] * sin + x[:, 1::2] * cos), -1).flatten(1)
        __global__ void rope_pairs(const float* x, const float* cos, const float* sin, float* y, int rows, int half) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i >= rows * half) return;
            if (reinterpret_cast<unsigned long long>(x) % 8 == 0 &&
                reinterpret_cast<unsigned long long>(y) % 8 == 0) {
                const float2 x2 = reinterpret_cast<const float2*>(x)[i];
                float2 y2;
                int r = i / half;
                int p = i % half;
                float c = cos[i];
                float s = sin[i];
                float x0 = x2.x;
                float x1 = x2.y;
                y2.x = x0 * c - x1 * s;
                y2.y = x0 * s + x1 * c;
                reinterpret_cast<float2*>(y)[i] = y2;
            } else {
                int r = i / half;
                int p = i % half;
                float c = cos[i];
                float s = sin[i];
                float x0 = x[r * 2 * half + 2 * p];
                float x1 = x[r * 2 * half + 2 * p + 1];
                y[r * 2 * half + 2 * p] = x0 * c - x1 * s;
                y[r * 2 * half + 2 * p + 1] = x0 * s + x1 * c;
            }
        }"#]].assert_eq(&first(ROPE, "rope_pairs"));
}

#[test]
fn complex_multiply_and_pointer_quads() {
    expect![[r#"
        // Complex multiply on (re, im) pairs, the check around the body.
        // @bench n = 1000, 77
        // @bench a: in f32[2 * n]; b: in f32[2 * n]; out: out f32[2 * n]
        // @bench grid = cdiv(n, 128); block = 128
        __global__ void cmul(int n, const float* a, const float* b, float* out) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) {
                if (reinterpret_cast<unsigned long long>(a) % 8 == 0 &&
                    reinterpret_cast<unsigned long long>(b) % 8 == 0 &&
                    reinterpret_cast<unsigned long long>(out) % 8 == 0) {
                    const float2 a2 = reinterpret_cast<const float2*>(a)[i];
                    const float2 b2 = reinterpret_cast<const float2*>(b)[i];
                    float2 out2;
                    out2.x = a2.x * b2.x - a2.y * b2.y;
                    out2.y = a2.x * b2.y + a2.y * b2.x;
                    reinterpret_cast<float2*>(out)[i] = out2;
                } else {
                    out[2 * i] = a[2 * i] * b[2 * i] - a[2 * i + 1] * b[2 * i + 1];
                    out[2 * i + 1] = a[2 * i] * b[2 * i + 1] + a[2 * i + 1] * b[2 * i];
                }
            }
        }"#]]
    .assert_eq(&first(GROUPS, "cmul"));
    expect![[r#"
        // Float quads (RGBA pixels) through pointer offsets, in place, with a per-pixel gain.
        // @bench n = 999, 5
        // @bench px: inout f32[4 * n]; gain: in f32[n]
        // @bench grid = cdiv(n, 64); block = 64
        __global__ void gain_rgba(int n, float* px, const float* gain) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i >= n) return;
            if (reinterpret_cast<unsigned long long>(px) % 16 == 0) {
                float4 px4 = reinterpret_cast<const float4*>(px)[i];
                float* q = px + 4 * i;
                float g = gain[i];
                px4.x *= g;
                px4.y *= g;
                px4.z *= g;
                // alpha stays
                px4.w = px4.w;
                reinterpret_cast<float4*>(px)[i] = px4;
            } else {
                float* q = px + 4 * i;
                float g = gain[i];
                q[0] *= g;
                q[1] *= g;
                q[2] *= g;
                // alpha stays
                q[3] = q[3];
            }
        }"#]]
    .assert_eq(&first(GROUPS, "gain_rgba"));
}

#[test]
fn half_pairs_and_packed_half_quads() {
    let half = first(HALVES, "rope_half");
    for line in [
        "if (reinterpret_cast<unsigned long long>(x) % 4 == 0 &&",
        "const __half2 x2 = reinterpret_cast<const __half2*>(x)[i];",
        "float x1 = __half2float(x2.y);",
        "y2.y = __float2half(x0 * sn[i] + x1 * cs[i]);",
        "reinterpret_cast<__half2*>(y)[i] = y2;",
    ] {
        assert!(half.contains(line), "{line}\n{half}");
    }
    let bf = cuda(HALVES, "conj_scale", "vectorize_groups", json!({})).unwrap();
    assert_eq!(
        labels(&bf),
        [
            "groups: z, w as __nv_bfloat162",
            "4 groups per thread: z, w as 8×__nv_bfloat16 as uint4",
            "2 groups per thread: z, w as 4×__nv_bfloat16 as uint2"
        ]
    );
    let out = cuda(HALVES, "quad_scale", "vectorize_groups", json!({})).unwrap();
    assert_eq!(
        labels(&out),
        [
            "groups: x, y as 4×__half as uint2",
            "2 groups per thread: x, y as 8×__half as uint4"
        ]
    );
    let pairs = cuda(HALVES, "rope_half", "vectorize_groups", json!({})).unwrap();
    assert_eq!(
        labels(&pairs),
        [
            "groups: x, y as __half2",
            "4 groups per thread: x, y as 8×__half as uint4",
            "2 groups per thread: x, y as 4×__half as uint2"
        ]
    );
}

#[test]
fn vectorize_groups_says_why_a_kernel_does_not_fit() {
    expect!["`evens` has no groups to vectorize: `x`'s groups of 2 are incomplete: only offset(s) 0 of 0..1 are accessed by the group of `x[2 * i]`, and a vector access would touch the rest"].assert_eq(&why(GROUPS, "evens"));
    expect!["`shifted` has no groups to vectorize: `x`'s groups of 2 are incomplete: only offset(s) 1 of 0..1 are accessed by the group of `x[2 * i + 1]` (the accesses straddle groups: overlapping or misaligned), and a vector access would touch the rest"].assert_eq(&why(GROUPS, "shifted"));
    expect!["`rgb_sum` has no groups to vectorize: `x` is `float*` in groups of 3: 12 bytes with no vector type and no 8- or 16-byte packing"].assert_eq(&why(GROUPS, "rgb_sum"));
    expect!["`mixed` has no groups to vectorize: `x[i]` steps by 1 where another access of `x` steps by 2: `x` is also accessed outside its groups"].assert_eq(&why(GROUPS, "mixed"));
    expect!["`saxpy` has no groups to vectorize: no buffer is accessed in aligned groups `p[e + c]` (e a multiple of k >= 2, c = 0..k-1; accesses `p[i]` are `vectorize`'s)"].assert_eq(&why(SAXPY, "saxpy"));
    let returns = GROUPS.replace("    // alpha stays\n", "    if (g == 0.0f) return;\n");
    expect!["`gain_rgba` has no groups to vectorize: `return;` leaves the body before the vector stores at its end"].assert_eq(&why(&returns, "gain_rgba"));
    let doubles = GROUPS
        .replace("px: inout f32[4 * n]", "px: inout f64[4 * n]")
        .replace("float* px", "double* px")
        .replace("float* q", "double* q");
    // Four doubles (32 bytes) have no vector type, but two aligned `double2` halves do.
    let out = cuda(&doubles, "gain_rgba", "vectorize_groups", json!({})).unwrap();
    assert_eq!(labels(&out), ["groups: px as double2"]);
    for line in [
        "double2 px2 = reinterpret_cast<const double2*>(&q[0])[0];",
        "double2 px2_2 = reinterpret_cast<const double2*>(&q[2])[0];",
        "px2_2.y = px2_2.y;",
        "reinterpret_cast<double2*>(&q[2])[0] = px2_2;",
    ] {
        assert!(out[0].text.contains(line), "{line}\n{}", out[0].text);
    }
    let passed = GROUPS.replace("    q[3] = q[3];\n", "    q[3] = __ldg(&px[4 * i + 3]);\n");
    // `__ldg(&px[...])` is read as the plain load it is (the dispatcher's retry).
    let out = cuda(&passed, "gain_rgba", "vectorize_groups", json!({})).unwrap();
    assert!(!out[0].text.contains("__ldg"), "{}", out[0].text);
    // An odd tail: the second of the last pair may not exist.
    let tail = GROUPS.replace(
        "        out[2 * i + 1] = a[2 * i] * b[2 * i + 1] + a[2 * i + 1] * b[2 * i];\n",
        "        if (2 * i + 1 < m) out[2 * i + 1] = a[2 * i] * b[2 * i + 1];\n",
    );
    let out = cuda(&tail, "cmul", "vectorize_groups", json!({})).unwrap();
    assert_eq!(
        labels(&out),
        [
            "groups: a, b as float2",
            "2 groups per thread: a, b as float4"
        ],
        "`out` stays scalar"
    );
    assert!(out[0]
        .text
        .contains("if (2 * i + 1 < m) out[2 * i + 1] = a2.x * b2.y;"));
    // The thread's own position: one group per thread only.
    let lane = GROUPS.replace(
        "out[2 * i] = a[2 * i] * b[2 * i] - a[2 * i + 1] * b[2 * i + 1];",
        "out[2 * i] = a[2 * i] * b[2 * i] - a[2 * i + 1] * b[2 * i + 1] + threadIdx.x;",
    );
    let out = cuda(&lane, "cmul", "vectorize_groups", json!({})).unwrap();
    assert_eq!(labels(&out), ["groups: a, b, out as float2"]);
    let odd = GROUPS.replace(
        "        y[i] = x[2 * i];\n",
        "        y[i] = x[2 * i];\n        if (2 * i + 1 < m) y[i] += x[2 * i + 1];\n",
    );
    expect!["`evens` has no groups to vectorize: `x`'s offset 1 is reached only under a condition or in a loop, so a vector access of the whole group could touch an element the kernel does not"].assert_eq(&why(&odd, "evens"));
    let moved = GROUPS.replace("    float g = gain[i];\n", "    float g = gain[i++];\n");
    expect!["`gain_rgba` has no groups to vectorize: `i` is assigned or declared again; the group must be the thread's own `i`"].assert_eq(&why(&moved, "gain_rgba"));
    let loop_ = HALVES.replace(
        "        y[4 * i + 3] = __hmul(x[4 * i + 3], h);\n",
        "        for (int c = 3; c < 4; ++c) y[4 * i + c] = __hmul(x[4 * i + c], h);\n",
    );
    expect!["`quad_scale` has no groups to vectorize: `x[4 * i + c]` steps by 1 where another access of `x` steps by 4: `x` is also accessed outside its groups; `y[4 * i + c]` steps by 1 where another access of `y` steps by 4: `y` is also accessed outside its groups"].assert_eq(&why(&loop_, "quad_scale"));
}

#[test]
fn the_rope_example_is_cured_by_groups_first() {
    let ranked = ranked_steps(ROPE, "rope_pairs");
    assert_eq!(
        ranked.first().map(String::as_str),
        Some("vectorize_groups"),
        "{ranked:?}"
    );
    // Its own output is refused: the check has an `else` (V groups), or (one group) the
    // fallback's `r` and `p` are declared on both paths, so no index is proved a pair.
    let v1 = cuda(ROPE, "rope_pairs", "vectorize_groups", json!({})).unwrap();
    expect!["`rope_pairs` has no groups to vectorize: `x` is also used other than as an element (`x` in `if (2 * i + 1 < (rows * half) &&`); `cos[j]` steps by 1 where another access of `cos` steps by 2: `cos` is also accessed outside its groups; `sin[j]` steps by 1 where another access of `sin` steps by 2: `sin` is also accessed outside its groups; `y` is also used other than as an element (`y` in `if (2 * i + 1 < (rows * half) &&`)"].assert_eq(&why(&v1[1].text, "rope_pairs"));
    expect!["`rope_pairs` has no groups to vectorize: `x` is also used other than as an element (`x` in `if (reinterpret_cast<unsigned long long>(x) % 8 == 0 &&`); `y` is also used other than as an element (`y` in `if (reinterpret_cast<unsigned long long>(x) % 8 == 0 &&`)"].assert_eq(&why(&v1[0].text, "rope_pairs"));
    // A pointer declared before the index still reaches its buffer in the body.
    let early = GROUPS
        .replace(
            "__global__ void mixed(int n, const float* x, float* y) {\n",
            "__global__ void mixed(int n, const float* x, float* y) {\n    const float* xs = x;\n",
        )
        .replace("x[2 * i + 1] + x[i];", "xs[2 * i + 1] + x[2 * i + 1];");
    let out = cuda(&early, "mixed", "vectorize_groups", json!({})).unwrap();
    assert!(
        out[0].text.contains("x2.x + x2.y + x2.y;"),
        "{}",
        out[0].text
    );
    // No interleaved group, no `grouped_access`: not offered.
    let saxpy = ranked_steps(SAXPY, "saxpy");
    assert!(!saxpy.iter().any(|s| s == "vectorize_groups"), "{saxpy:?}");
}

#[test]
fn pooling_windows_load_each_row_pair_where_it_is_proved_aligned() {
    let out = cuda(MAXPOOL, "maxpool2x2", "vectorize_groups", json!({})).unwrap();
    assert_eq!(
        labels(&out),
        ["groups: x as float2"],
        "one group per thread only"
    );
    expect![[r#"
        __global__ void maxpool2x2(const float* __restrict__ x, float* __restrict__ y, int NC, int OH, int OW) {
            size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
            size_t total = (size_t)NC * OH * OW;
            if (idx >= total) return;
            if (reinterpret_cast<unsigned long long>(x) % 8 == 0) {
                int ow = idx % OW;
                int oh = (idx / OW) % OH;
                size_t p = idx / ((size_t)OH * OW);
                int W = 2 * OW;
                const float* src = x + (p * 2 * OH + 2 * oh) * W + 2 * ow;
                const float2 x2 = reinterpret_cast<const float2*>(&src[0])[0];
                float a = fmaxf(x2.x, x2.y);
                const float2 x2_2 = reinterpret_cast<const float2*>(&src[W])[0];
                float b = fmaxf(x2_2.x, x2_2.y);
                y[idx] = fmaxf(a, b);
            } else {
                int ow = idx % OW;
                int oh = (idx / OW) % OH;
                size_t p = idx / ((size_t)OH * OW);
                int W = 2 * OW;
                const float* src = x + (p * 2 * OH + 2 * oh) * W + 2 * ow;
                float a = fmaxf(src[0], src[1]);
                float b = fmaxf(src[W], src[W + 1]);
                y[idx] = fmaxf(a, b);
            }
        }"#]]
    .assert_eq(&kernel_text(&out[0].text, "maxpool2x2"));
    // A 2-D grid's window, rows named by locals; a stencil's own pair at `[i]` beside
    // the next pair at its address; complex numbers in rows written back whole.
    for (kernel, lines) in [
        (
            "maxpool_2d",
            &[
                "const float2 x2 = reinterpret_cast<const float2*>(&x[top])[0];",
                "const float2 x2_2 = reinterpret_cast<const float2*>(&x[bottom])[0];",
                "float m = fmaxf(fmaxf(x2.x, x2.y), fmaxf(x2_2.x, x2_2.y));",
            ][..],
        ),
        (
            "pair_diff",
            &[
                "const float2 x2_2 = reinterpret_cast<const float2*>(x)[i];",
                "const float2 x2 = reinterpret_cast<const float2*>(&x[2 * i + 2])[0];",
            ][..],
        ),
        (
            "cplx_rows",
            &[
                "float2 z2 = reinterpret_cast<const float2*>(&v[0])[0];",
                "z2.y = s[row] * (2.0f * re * im);",
                "reinterpret_cast<float2*>(&v[0])[0] = z2;",
            ][..],
        ),
    ] {
        let text = &cuda(POOLS, kernel, "vectorize_groups", json!({})).unwrap()[0].text;
        for line in lines {
            assert!(text.contains(line), "{kernel}: {line}\n{text}");
        }
    }
    let stencil = cuda(POOLS, "pair_diff", "vectorize_groups", json!({})).unwrap();
    assert_eq!(
        labels(&stencil),
        ["groups: x as float2"],
        "not all at `2 * i`"
    );
}

#[test]
fn windows_it_cannot_prove_are_refused() {
    expect!["`pool_odd` has no groups to vectorize: no buffer is accessed in aligned groups `p[e + c]` (e a multiple of k >= 2, c = 0..k-1; accesses `p[i]` are `vectorize`'s)"].assert_eq(&why(POOLS, "pool_odd"));
    expect!["`pool_edge` has no groups to vectorize: `x`'s offset 1 is reached only under a condition or in a loop, so a vector access of the whole group could touch an element the kernel does not"].assert_eq(&why(POOLS, "pool_edge"));
    expect!["`smooth_rows` has no groups to vectorize: `x` is written in 2 groups that are not a constant apart, so two of them might be one"].assert_eq(&why(POOLS, "smooth_rows"));
    // A float in the address: `(int)(2 * h)` is not surely even (a float that is a
    // single definition is expanded: `float h = OW;` makes it `2 * OW`, which is).
    let float = MAXPOOL.replace(
        "int W = 2 * OW;",
        "float h = OW;\n    h *= 0.75f;\n    int W = (int)(2 * h);",
    );
    expect!["`maxpool2x2` has no groups to vectorize: no buffer is accessed in aligned groups `p[e + c]` (e a multiple of k >= 2, c = 0..k-1; accesses `p[i]` are `vectorize`'s)"].assert_eq(&why(&float, "maxpool2x2"));
    // Another use of the buffer, a written lane left as read, a barrier, a local the
    // address reads defined after the first access.
    let passed = MAXPOOL.replace("y[idx] = fmaxf(a, b);", "y[idx] = fmaxf(a, b) + first(x);");
    expect!["`maxpool2x2` has no groups to vectorize: `x` is also used other than as an element (`x` in `y[idx] = fmaxf(a, b) + first(x);`)"].assert_eq(&why(&passed, "maxpool2x2"));
    let half = POOLS.replace("    v[1] = s[row] * (2.0f * re * im);\n", "");
    expect!["`cplx_rows` has no groups to vectorize: `z`'s group at `v[0]` is written but not every lane surely is: storing it whole would write an element the kernel does not"].assert_eq(&why(&half, "cplx_rows"));
    let barrier = MAXPOOL.replace("    float b = ", "    __syncthreads();\n    float b = ");
    expect!["`maxpool2x2` has no groups to vectorize: the body calls `__syncthreads`, so its accesses cannot move"].assert_eq(&why(&barrier, "maxpool2x2"));
    let late = POOLS.replace(
        "        float m = fmaxf(fmaxf(x[top], x[top + 1]), fmaxf(x[bottom], x[bottom + 1]));",
        "        float u = x[top + 1];\n        long t0 = top;\n        float m = fmaxf(fmaxf(x[t0], u), fmaxf(x[bottom], x[bottom + 1]));",
    );
    expect!["`maxpool_2d` has no groups to vectorize: `x[t0]` reads `t0`, which is not defined once before `float u = x[top + 1];`, where the vector load of `x`'s group goes"].assert_eq(&why(&late, "maxpool_2d"));
}

/// The kernel's definition in a candidate's text.
fn kernel_text(text: &str, kernel: &str) -> String {
    let from = text.find(&format!("__global__ void {kernel}")).unwrap_or(0);
    let end = text[from..]
        .find("\n}")
        .map_or(text.len(), |e| from + e + 2);
    text[from..end].to_string()
}
