use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{
    assert_has, cuda, first_shown, labels, not_applicable, ranked_steps, show,
};
use crate::syntax::Lang;

const BIAS_RELU: &str = include_str!("../../../../../examples/bias_relu_rows.cu");
const NORM_APPLY: &str = include_str!("../../../../../examples/norm_apply.cu");
const SAXPY: &str = include_str!("../../../../../examples/saxpy.cu");
const ROWS: &str = include_str!("../../../../../tests/fixtures/rewrites/vec_rows/rows.cu");
const HALVES: &str = include_str!("../../../../../tests/fixtures/rewrites/vec_rows/halves.cu");

/// The first candidate of `remap_lanes` on `src`: the kernel as the search reaches it.
fn remapped(src: &str, kernel: &str) -> String {
    cuda(src, kernel, "remap_lanes", json!({}))
        .unwrap()
        .remove(0)
        .text
}

#[test]
fn bias_relu_after_remap_moves_float4_rows_and_a_float4_bias() {
    let src = remapped(BIAS_RELU, "bias_relu_rows");
    let out = cuda(&src, "bias_relu_rows", "vectorize_rows", json!({})).unwrap();
    assert_eq!(
        labels(&out),
        ["VEC=4 along rows (float4)", "VEC=2 along rows (float2)"]
    );
    expect![[r#"
        // A first draft of bias + ReLU over a row-major matrix, written row-first: the thread x
        // index walks the rows, so neighbouring threads touch addresses a whole row apart.
        // @bench rows = 8192, 1001; cols = 4096, 77
        // @bench x: in f32[rows, cols]; bias: in f32[cols]; y: out f32[rows, cols]
        // @bench grid = (cdiv(cols, 4 * 16), cdiv(rows, 16)); block = (16, 16)
        // @bench reference = torch: torch.relu(x + bias)
        __global__ void bias_relu_rows(const float* x, const float* bias, float* y, int rows, int cols) {
            int r = blockIdx.y * blockDim.y + threadIdx.y;
            int c = blockIdx.x * blockDim.x + threadIdx.x;
            if (r < rows && (4 * (c - threadIdx.x + blockDim.x) - 1) < cols &&
                reinterpret_cast<unsigned long long>(x + (r * cols)) % 16 == 0 &&
                reinterpret_cast<unsigned long long>(bias) % 16 == 0 &&
                reinterpret_cast<unsigned long long>(y + (r * cols)) % 16 == 0) {
                const float4 x4 = reinterpret_cast<const float4*>(x + (r * cols))[c];
                const float4 bias4 = reinterpret_cast<const float4*>(bias)[c];
                float4 y4;
                {
                    float v = x4.x + bias4.x;
                    y4.x = v > 0.0f ? v : 0.0f;
                }
                {
                    float v = x4.y + bias4.y;
                    y4.y = v > 0.0f ? v : 0.0f;
                }
                {
                    float v = x4.z + bias4.z;
                    y4.z = v > 0.0f ? v : 0.0f;
                }
                {
                    float v = x4.w + bias4.w;
                    y4.w = v > 0.0f ? v : 0.0f;
                }
                reinterpret_cast<float4*>(y + (r * cols))[c] = y4;
            } else {
                #pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const int j = (int)(4 * (c - threadIdx.x) + k * blockDim.x + threadIdx.x);
                    if (r < rows && j < cols) {
                        float v = x[r * cols + j] + bias[j];
                        y[r * cols + j] = v > 0.0f ? v : 0.0f;
                    }
                }
            }
        }"#]]
    .assert_eq(&show(Lang::Cuda, &src, &out[0], "bias_relu_rows"));
}

#[test]
fn norm_apply_after_remap_reads_each_row_statistic_once_through_the_helper() {
    let src = remapped(NORM_APPLY, "norm_apply");
    let out = cuda(&src, "norm_apply", "vectorize_rows", json!({"widths": [4]})).unwrap();
    expect![[r#"
        // @bench m = 16384, 999; n = 2048, 130
        // @bench x: in f32[m, n]; mean: in f32[m]; rstd: in f32[m] ~ uniform(0.5, 2); out: out f32[m, n]
        // @bench grid = (cdiv(n, 4 * 4), cdiv(m, 32)); block = (4, 32)
        // @bench reference = torch: (x - mean[:, None]) * rstd[:, None]
        __global__ void norm_apply(const float* __restrict__ x, const float* __restrict__ mean,
                                   const float* __restrict__ rstd, float* __restrict__ out, int m, int n) {
            const size_t i = (size_t)blockIdx.y * blockDim.y + threadIdx.y;
            const size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
            if (!(i >= (size_t)m || (4 * (j - threadIdx.x + blockDim.x) - 1) >= (size_t)n) &&
                reinterpret_cast<unsigned long long>(out + (i * n)) % 16 == 0 &&
                reinterpret_cast<unsigned long long>(x + (((size_t)i) * ((size_t)n))) % 16 == 0) {
                const float mean_row = mean[i];
                const float rstd_row = rstd[i];
                float4 out4;
                const float4 x4 = reinterpret_cast<const float4*>(x + (((size_t)i) * ((size_t)n)))[j];
                out4.x = ((x4.x) - mean_row) * rstd_row;
                out4.y = ((x4.y) - mean_row) * rstd_row;
                out4.z = ((x4.z) - mean_row) * rstd_row;
                out4.w = ((x4.w) - mean_row) * rstd_row;
                reinterpret_cast<float4*>(out + (i * n))[j] = out4;
            } else {
                #pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const size_t k = (size_t)(4 * (j - threadIdx.x) + q * blockDim.x + threadIdx.x);
                    if (i >= (size_t)m || k >= (size_t)n) continue;
                    out[i * n + k] = ((x[((size_t)i) * ((size_t)n) + ((size_t)k)]) - mean[i]) * rstd[i];
                }
            }
        }"#]]
    .assert_eq(&show(Lang::Cuda, &src, &out[0], "norm_apply"));
}

#[test]
fn the_default_search_reaches_it_after_remap_and_can_coarsen_after_it() {
    for (src, k) in [(BIAS_RELU, "bias_relu_rows"), (NORM_APPLY, "norm_apply")] {
        assert!(
            !ranked_steps(src, k).contains(&"vectorize_rows".to_string()),
            "{k}: strided as written, the remap comes first"
        );
        let v1 = remapped(src, k);
        let steps = ranked_steps(&v1, k);
        let at = |id: &str| steps.iter().position(|s| s == id);
        assert!(at("vectorize_rows").is_some(), "{k}: {steps:?}");
        assert!(
            at("block_coarsen").is_none_or(|b| at("vectorize_rows") < Some(b)),
            "{k}: a fresh policy tries the vector width before coarsening blocks (which would hide the lane index in a loop): {steps:?}"
        );
        let v2 = cuda(&v1, k, "vectorize_rows", json!({}))
            .unwrap()
            .remove(0)
            .text;
        let after = ranked_steps(&v2, k);
        assert!(
            !after.contains(&"remap_lanes".to_string()),
            "{k}: the vectorized kernel still reads as coalesced: {after:?}"
        );
        for spent in ["interleave", "unroll"] {
            assert!(
                !after.contains(&spent.to_string()),
                "{k}: the scalar path's loop is counted and unrolled already: {after:?}"
            );
        }
        let again = not_applicable(cuda(&v2, k, "vectorize_rows", json!({})));
        assert!(
            again.contains("reads `threadIdx.x` outside the lane index"),
            "{again}"
        );
    }
    let v2 = cuda(
        &remapped(BIAS_RELU, "bias_relu_rows"),
        "bias_relu_rows",
        "vectorize_rows",
        json!({}),
    )
    .unwrap()
    .remove(0)
    .text;
    assert!(ranked_steps(&v2, "bias_relu_rows").contains(&"block_coarsen".to_string()));
    assert!(cuda(&v2, "bias_relu_rows", "block_coarsen", json!({})).is_ok());
}

#[test]
fn every_style_and_element_type_gets_its_vector_types() {
    let cases = [
        (
            "scale_rows",
            vec!["VEC=4 along rows (float4)", "VEC=2 along rows (float2)"],
        ),
        (
            "add_bias_batched",
            vec!["VEC=4 along rows (float4)", "VEC=2 along rows (float2)"],
        ),
        (
            "flat_affine",
            vec!["VEC=4 along rows (float4)", "VEC=2 along rows (float2)"],
        ),
        (
            "square_rows",
            vec!["VEC=4 along rows (float4)", "VEC=2 along rows (float2)"],
        ),
        (
            "axpy_rows",
            vec!["VEC=4 along rows (float4)", "VEC=2 along rows (float2)"],
        ),
        (
            "quantize_rows",
            vec![
                "VEC=4 along rows (float4, char4)",
                "VEC=2 along rows (float2, char2)",
            ],
        ),
        (
            "half_gate",
            vec![
                "VEC=8 along rows (8×__half as uint4)",
                "VEC=4 along rows (4×__half as uint2)",
                "VEC=2 along rows (__half2)",
            ],
        ),
        (
            "bf16_residual",
            vec![
                "VEC=8 along rows (8×__nv_bfloat16 as uint4)",
                "VEC=4 along rows (4×__nv_bfloat16 as uint2)",
                "VEC=2 along rows (__nv_bfloat162)",
            ],
        ),
    ];
    for (k, want) in cases {
        let src = if k.contains("half") || k.contains("bf16") {
            HALVES
        } else {
            ROWS
        };
        let out = cuda(src, k, "vectorize_rows", json!({})).unwrap_or_else(|e| panic!("{k}: {e}"));
        assert_eq!(labels(&out), want, "{k}");
    }
}

#[test]
fn batched_row_pointers_and_a_flat_split_keep_their_offsets() {
    let out = cuda(
        ROWS,
        "add_bias_batched",
        "vectorize_rows",
        json!({"widths": [4]}),
    )
    .unwrap();
    let text = show(Lang::Cuda, ROWS, &out[0], "add_bias_batched");
    for want in [
        "grid = (cdiv(cols, 4 * 32), cdiv(rows, 4), batch)",
        "const float4 x4 = reinterpret_cast<const float4*>(xr)[c];",
        "reinterpret_cast<float4*>(yr)[c] = y4;",
        "y4.w = v;",
    ] {
        assert!(text.contains(want), "{want}\n{text}");
    }
    let out = cuda(
        ROWS,
        "flat_affine",
        "vectorize_rows",
        json!({"widths": [4]}),
    )
    .unwrap();
    let text = show(Lang::Cuda, ROWS, &out[0], "flat_affine");
    for want in [
        "grid = cdiv(rows * cols, 4 * 256)",
        "const float4 x4 = reinterpret_cast<const float4*>(x)[i];",
        "y4.z = x4.z * w[c] + b[r];",
        "int r = (4 * i) / cols;",
        "int c = ((4 * i) % cols + 2);",
        "reinterpret_cast<unsigned long long>(x) % 16 == 0 &&\n        cols % 4 == 0) {",
    ] {
        assert!(text.contains(want), "{want}\n{text}");
    }
    let out = cuda(ROWS, "axpy_rows", "vectorize_rows", json!({"widths": [2]})).unwrap();
    let text = show(Lang::Cuda, ROWS, &out[0], "axpy_rows");
    assert!(
        text.contains("float2 y2 = reinterpret_cast<const float2*>(y + (row * ld))[col];"),
        "y += ... loads y first\n{text}"
    );
    assert!(
        !text.contains("int idx = row * ld + (2 * col"),
        "a column's copy drops the index its vector accesses replaced\n{text}"
    );
}

#[test]
fn it_says_why_a_kernel_does_not_fit() {
    let why = |k: &str| not_applicable(cuda(ROWS, k, "vectorize_rows", json!({})));
    expect!["`transpose_write` cannot be vectorized along its rows: `y[c * rows + r]` is not the lane's own column of `y`, which is written: a write to a computed index, or a read another column may write"].assert_eq(&why("transpose_write"));
    expect!["`shift_left` cannot be vectorized along its rows: `y` is written at `y[r * cols + c]` and reached at `y[r * cols + c + 1]` too: another offset into a written buffer"].assert_eq(&why("shift_left"));
    expect!["`scatter_cols` cannot be vectorized along its rows: `y[r * cols + perm[c]]` is not the lane's own column of `y`, which is written: a write to a computed index, or a read another column may write"].assert_eq(&why("scatter_cols"));
    expect!["`row_total` cannot be vectorized along its rows: `atomicAdd(&s[r], x[r * cols + c])` is an atomic; columns of one thread would race on it"].assert_eq(&why("row_total"));
    expect!["`even_cols` cannot be vectorized along its rows: `y[r * cols + 2 * c]` is not the lane's own column of `y`, which is written: a write to a computed index, or a read another column may write"].assert_eq(&why("even_cols"));
    expect!["`skip_first` cannot be vectorized along its rows: `c < 1` in the bounds check is not an upper bound on `c`"].assert_eq(&why("skip_first"));
    expect!["`count_threads` cannot be vectorized along its rows: `atomicAdd(seen, 1);` runs once per thread before the columns' work; with fewer threads it would run fewer times"].assert_eq(&why("count_threads"));
    expect!["`lane_tag` cannot be vectorized along its rows: it reads `tx` outside the lane index `c`; once a thread handles several columns it no longer names one"].assert_eq(&why("lane_tag"));
    expect!["`saxpy` is a 1-D elementwise kernel; `vectorize` rewrites it"].assert_eq(
        &not_applicable(cuda(SAXPY, "saxpy", "vectorize_rows", json!({}))),
    );
    expect!["`bias_relu_rows` cannot be vectorized along its rows: `y[r * cols + c]` is not the lane's own column of `y`, which is written: a write to a computed index, or a read another column may write"]
        .assert_eq(&not_applicable(cuda(BIAS_RELU, "bias_relu_rows", "vectorize_rows", json!({}))));
}

const SPLITS: &str = include_str!("../../../../../tests/fixtures/rewrites/vec_rows/splits.cu");

#[test]
fn a_flat_split_shares_each_quotient_across_the_vector() {
    let out = cuda(
        SPLITS,
        "upsample2",
        "vectorize_rows",
        json!({"widths": [4]}),
    )
    .unwrap();
    expect![[r#"
        // Nearest-neighbour 2x upsample: the output index split by `%` and `/` of parameters.
        // @bench P = 3, 2; H = 8, 5; W = 8, 7
        // @bench x: in f32[P, H, W]; y: out f32[P, 2 * H, 2 * W]
        // @bench grid = cdiv(P * 4 * H * W, 4 * 64); block = 64
        // @bench reference = torch: torch.nn.functional.interpolate(x[None], scale_factor=2, mode="nearest")[0]
        __global__ void upsample2(const float* x, float* y, int P, int H, int W) {
            int idx = blockIdx.x * blockDim.x + threadIdx.x;
            int total = P * 4 * H * W;
            if ((4 * (idx - threadIdx.x + blockDim.x) - 1) < total &&
                reinterpret_cast<unsigned long long>(y) % 16 == 0 &&
                (2 * W) % 4 == 0 &&
                (4 * H * W) % 4 == 0) {
                float4 y4;
                {
                    int ox = (4 * idx) % (2 * W);
                    int oy = ((4 * idx) / (2 * W)) % (2 * H);
                    int p = (4 * idx) / (4 * H * W);
                    y4.x = x[(p * H + oy / 2) * W + ox / 2];
                }
                {
                    int ox = ((4 * idx) % (2 * W) + 1);
                    int oy = ((4 * idx) / (2 * W)) % (2 * H);
                    int p = (4 * idx) / (4 * H * W);
                    y4.y = x[(p * H + oy / 2) * W + ox / 2];
                }
                {
                    int ox = ((4 * idx) % (2 * W) + 2);
                    int oy = ((4 * idx) / (2 * W)) % (2 * H);
                    int p = (4 * idx) / (4 * H * W);
                    y4.z = x[(p * H + oy / 2) * W + ox / 2];
                }
                {
                    int ox = ((4 * idx) % (2 * W) + 3);
                    int oy = ((4 * idx) / (2 * W)) % (2 * H);
                    int p = (4 * idx) / (4 * H * W);
                    y4.w = x[(p * H + oy / 2) * W + ox / 2];
                }
                reinterpret_cast<float4*>(y)[idx] = y4;
            } else {
                #pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const int j = (int)(4 * (idx - threadIdx.x) + k * blockDim.x + threadIdx.x);
                    if (j < total) {
                        int ox = j % (2 * W);
                        int oy = (j / (2 * W)) % (2 * H);
                        int p = j / (4 * H * W);
                        y[j] = x[(p * H + oy / 2) * W + ox / 2];
                    }
                }
            }
        }"#]]
    .assert_eq(&show(Lang::Cuda, SPLITS, &out[0], "upsample2"));
}

#[test]
fn a_size_t_split_with_a_cast_divisor_reads_four_inputs_per_output() {
    let text = first_shown(
        SPLITS,
        "avg_pool2",
        "vectorize_rows",
        json!({"widths": [4]}),
    );
    assert_has(
        &text,
        &[
            "reinterpret_cast<unsigned long long>(y) % 16 == 0 &&\n        OW % 4 == 0 &&\n        ((size_t)OW * OH) % 4 == 0) {",
            "size_t ox = ((4 * i) % OW + 3);",
            "size_t oy = ((4 * i) / OW) % OH;",
            "size_t p = (4 * i) / ((size_t)OW * OH);",
            "y4.w = 0.25f * (x[at] + x[at + 1] + x[at + 2 * OW] + x[at + 2 * OW + 1]);",
            // The scalar path as written.
            "size_t ox = j % OW;",
            "size_t p = j / ((size_t)OW * OH);",
        ],
    );
}

#[test]
fn a_divisor_of_the_checked_body_or_a_literal_the_width_does_not_divide_stays() {
    let text = first_shown(SPLITS, "ramp_mix", "vectorize_rows", json!({"widths": [4]}));
    assert_has(
        &text,
        &[
            "float c = (float)((4 * i + 3) % period);",
            "y4.w = x4.w * c + (float)((4 * i + 3) / 3) + (float)((4 * i) % 8 + 3);",
            "y4.x = x4.x * c + (float)((4 * i) / 3) + (float)((4 * i) % 8);",
        ],
    );
    assert!(
        !text.contains("% 4 == 0"),
        "a literal multiple of the width needs no condition, `period` cannot have one\n{text}"
    );
}

#[test]
fn a_kernel_with_no_division_gets_no_divisibility_condition() {
    for k in [
        "scale_rows",
        "add_bias_batched",
        "axpy_rows",
        "quantize_rows",
    ] {
        let out = cuda(ROWS, k, "vectorize_rows", json!({})).unwrap();
        for c in &out {
            let text = show(Lang::Cuda, ROWS, c, k);
            let divides = text
                .lines()
                .filter(|l| l.contains(" == 0") && !l.contains("reinterpret_cast"));
            assert_eq!(divides.count(), 0, "{k}\n{text}");
        }
    }
}

const REPEAT: &str = include_str!("../../../../../tests/fixtures/rewrites/vec_rows/repeat.cu");

#[test]
fn a_loop_over_planes_runs_around_both_paths() {
    for k in ["upsample_planes", "scale_batch", "add_slices"] {
        assert!(
            ranked_steps(REPEAT, k).contains(&"vectorize_rows".to_string()),
            "{k}: the search offers the step"
        );
        let out =
            cuda(REPEAT, k, "vectorize_rows", json!({})).unwrap_or_else(|e| panic!("{k}: {e}"));
        assert_eq!(
            labels(&out),
            ["VEC=4 along rows (float4)", "VEC=2 along rows (float2)"],
            "{k}"
        );
    }
    let out = cuda(
        REPEAT,
        "upsample_planes",
        "vectorize_rows",
        json!({"widths": [4]}),
    )
    .unwrap();
    let text = show(Lang::Cuda, REPEAT, &out[0], "upsample_planes");
    for want in [
        "grid = (cdiv(2 * W, 4 * 16), cdiv(2 * H, 8))",
        "    int oy = blockIdx.y * blockDim.y + threadIdx.y;\n    for (int p = 0; p < P; ++p) {\n        if (!((4 * (ox - threadIdx.x + blockDim.x) - 1) >= 2 * W || oy >= 2 * H) &&",
        "reinterpret_cast<unsigned long long>(y + (((size_t)p * 2 * H + oy) * 2 * W)) % 16 == 0) {",
        "float sx = fmaxf(0.5f * (4 * ox + 3) - 0.25f, 0.0f);",
        "reinterpret_cast<float4*>(y + (((size_t)p * 2 * H + oy) * 2 * W))[ox] = y4;",
        "if (j >= 2 * W || oy >= 2 * H) continue;",
        "y[((size_t)p * 2 * H + oy) * 2 * W + j] = ",
    ] {
        assert!(text.contains(want), "{want}\n{text}");
    }
    assert_eq!(
        text.matches("for (int p = 0; p < P; ++p)").count(),
        1,
        "{text}"
    );
    let out = cuda(
        REPEAT,
        "add_slices",
        "vectorize_rows",
        json!({"widths": [2]}),
    )
    .unwrap();
    let text = show(Lang::Cuda, REPEAT, &out[0], "add_slices");
    for want in [
        "for (int k = 0; k < K; k += 1) {",
        "float2 y2 = reinterpret_cast<const float2*>(y + (r * cols))[c];",
        "y2.y += x2.y;",
    ] {
        assert!(text.contains(want), "{want}\n{text}");
    }
}

#[test]
fn a_loop_that_carries_a_value_or_varies_by_column_is_refused() {
    let why = |k: &str| not_applicable(cuda(REPEAT, k, "vectorize_rows", json!({})));
    expect!["`prefix_planes` cannot be vectorized along its rows: `for (int p = 0; p < P; ++p)`: its body assigns `acc`, carried from one iteration to the next"].assert_eq(&why("prefix_planes"));
    expect!["`ragged_planes` cannot be vectorized along its rows: `for (int p = 0; p < n; ++p)` reads `n`, which the columns' work declares before it"].assert_eq(&why("ragged_planes"));
    expect!["`count_then_copy` cannot be vectorized along its rows: `total[r * cols + c] += 1.0f;` would run once per iteration of `for (int p = 0; p < P; ++p)`; only declarations may come before it"].assert_eq(&why("count_then_copy"));
    expect!["`until_negative` cannot be vectorized along its rows: `for (int p = 0; p < P; ++p)`: its body has a `break`"].assert_eq(&why("until_negative"));
}
