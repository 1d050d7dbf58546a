//! `coarsen`: thread coarsening with vector accesses: the 1-D elementwise shape becomes a
//! grid-stride loop over chunks of VEC consecutive elements, each chunk read and written
//! with one vector access per buffer (`vectorize`'s body) and the last, partial chunk
//! element by element; the grid becomes `min(cdiv(n, VEC * B), sms * K)`. So a thread
//! handles several elements with few wide instructions, and a few blocks per SM stream
//! the whole array (no tail of small blocks, less index arithmetic per element).
//! The chunk body is `vectorize`'s, index splits the lanes share included
//! ([`super::lane_split`]).
//!
//! `vectorize` alone keeps one chunk per thread and a grid of `n / (VEC * B)` blocks;
//! `grid_stride` alone keeps scalar accesses; after one of them the other no longer
//! matches (its shape is gone), so they are offered together here.
//!
//! Candidates: each width of param `widths` (default as `vectorize`: 4, 2, and the 16-byte
//! width of the narrowest type) that the buffers' types allow, times each K of param
//! `blocks_per_sm` (default [4, 8]). Refuses what
//! `vectorize` refuses, and a grid that already depends on `sms`.

use super::check::{finish, not_applicable, Draft, R};
use super::edits::Edits;
use super::elementwise::bound_text;
use super::params::Params;
use super::spec_expr::words;
use super::tree::{newline, reindent, text};
use super::vectorize::Vectorized;
use super::RewriteContext;
use crate::optimize::edit;

const ID: &str = "coarsen";

pub fn coarsen(cx: &RewriteContext<'_>) -> R {
    let v = Vectorized::of(cx, ID)?;
    let per_sm = Params(cx.params).ints("blocks_per_sm", &[4, 8], 1..=64)?;
    let k = &cx.kernel.name;
    if let Some(g) = edit::spec_assignment(cx.kernel, "grid") {
        if words(&g.text).contains("sms") {
            return Err(not_applicable(format!(
                "`{k}`'s grid = {} already depends on `sms`",
                g.text
            )));
        }
    }
    let src = cx.text;
    let shape = &v.shape;
    let nl = newline(src);
    let ind = shape.indent.clone();
    let in1 = format!("{ind}{}", shape.unit);
    let i = &shape.index;
    let mut drafts = Vec::new();
    let mut dropped = v.dropped.clone();
    for w in &v.widths {
        // Comments between the index and its check go before the loop.
        let mut code = String::new();
        for c in &shape.between {
            code.push_str(&format!("{}{nl}{ind}", text(src, *c)));
        }
        code.push_str(&format!(
            "for ({} {i} = {}; {} * {i} < {}; {i} += blockDim.x * gridDim.x) {{{nl}{in1}{}{nl}{ind}}}",
            shape.index_ty,
            shape.init,
            w.width,
            bound_text(src, shape.bound),
            reindent(&w.code, &ind, &in1),
        ));
        for n in &per_sm {
            let label = format!("{}, grid-stride, grid <= {n} * sms", w.label);
            let edits = Edits::from_pairs([
                (shape.decl.start_byte()..shape.end, code.clone()),
                (v.grid_range.clone(), format!("min({}, sms * {n})", w.grid)),
            ]);
            match edits.apply(src) {
                Ok(text) => drafts.push(Draft { label, text }),
                Err(e) => dropped.push(format!("{label}: {e}")),
            }
        }
    }
    finish(cx, drafts, dropped)
}

#[cfg(test)]
mod tests {
    use expect_test::expect;
    use serde_json::json;

    use super::super::check::testing::{
        assert_has, cuda, first_shown, labels, not_applicable, show, LEAKY_RELU,
    };
    use crate::syntax::Lang;

    const SAXPY: &str = include_str!("../../../../examples/saxpy.cu");
    const MATMUL: &str = include_str!("../../../../examples/matmul_naive.cu");

    #[test]
    fn saxpy_walks_float4_chunks_with_a_capped_grid() {
        let out = cuda(SAXPY, "saxpy", "coarsen", json!({})).unwrap();
        assert_eq!(
            labels(&out),
            [
                "VEC=4 (float4), grid-stride, grid <= 4 * sms",
                "VEC=4 (float4), grid-stride, grid <= 8 * sms",
                "VEC=2 (float2), grid-stride, grid <= 4 * sms",
                "VEC=2 (float2), grid-stride, grid <= 8 * sms"
            ]
        );
        expect![[r#"
            // The first case is timed; every case is verified.
            // @bench n = 1 << 24, 4099
            // @bench x: in f32[n]
            // @bench y: inout f32[n] ~ normal(0, 1)
            // @bench a = 2.5
            // @bench grid = min(cdiv(n, 4 * 256), sms * 4); block = 256
            extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
                for (int i = blockIdx.x * blockDim.x + threadIdx.x; 4 * i < n; i += blockDim.x * gridDim.x) {
                    if (4 * i + 3 < n) {
                        const float4 x4 = reinterpret_cast<const float4*>(x)[i];
                        float4 y4 = reinterpret_cast<const float4*>(y)[i];
                        y4.x = a * x4.x + y4.x;
                        y4.y = a * x4.y + y4.y;
                        y4.z = a * x4.z + y4.z;
                        y4.w = a * x4.w + y4.w;
                        reinterpret_cast<float4*>(y)[i] = y4;
                    } else {
                        for (int j = 4 * i; j < n; ++j) y[j] = a * x[j] + y[j];
                    }
                }
            }"#]].assert_eq(&show(Lang::Cuda, SAXPY, &out[0], "saxpy"));
    }

    #[test]
    fn an_early_return_body_with_comments_and_locals() {
        let out = cuda(
            LEAKY_RELU,
            "leaky",
            "coarsen",
            json!({"widths": [2], "blocks_per_sm": [8]}),
        )
        .unwrap();
        expect![[r#"
            // @bench n = 1000, 77
            // @bench x: in f32[n]; y: out f32[n]
            // @bench grid = min(cdiv(n, 2 * 128), sms * 8); block = 128
            __global__ void leaky(int n, const float* __restrict__ x, float* __restrict__ y) {
                // past the end
                for (int i = blockIdx.x * blockDim.x + threadIdx.x; 2 * i < n; i += blockDim.x * gridDim.x) {
                    if (2 * i + 1 < n) {
                        const float2 x2 = reinterpret_cast<const float2*>(x)[i];
                        float2 y2;
                        {
                            float v = x2.x;
                            // keep small negatives
                            y2.x = v > 0.0f ? v : 1e-6f * (2 * i);
                        }
                        {
                            float v = x2.y;
                            // keep small negatives
                            y2.y = v > 0.0f ? v : 1e-6f * (2 * i + 1);
                        }
                        reinterpret_cast<float2*>(y)[i] = y2;
                    } else {
                        for (int j = 2 * i; j < n; ++j) {
                            float v = x[j];
                            // keep small negatives
                            y[j] = v > 0.0f ? v : 1e-6f * j;
                        }
                    }
                }
            }"#]].assert_eq(&show(Lang::Cuda, LEAKY_RELU, &out[0], "leaky"));
    }

    #[test]
    fn each_chunk_shares_the_index_split_where_the_width_divides_it() {
        let src = include_str!("../../../../tests/fixtures/rewrites/vec_rows/splits.cu");
        let params = json!({"widths": [2], "blocks_per_sm": [4]});
        let text = first_shown(src, "permute_hwc", "coarsen", params);
        assert_has(
            &text,
            &[
                "for (int idx = blockIdx.x * blockDim.x + threadIdx.x; 2 * idx < (H * WC); idx += blockDim.x * gridDim.x) {",
                "if (2 * idx + 1 < (H * WC) && C % 2 == 0 && WC % 2 == 0) {",
                "int c = ((2 * idx) % C + 1);",
                "for (int j = 2 * idx; j < (H * WC) && j < 2 * idx + 2; ++j) {",
            ],
        );
    }

    #[test]
    fn refusals_say_why() {
        let why = |src: &str, k: &str| not_applicable(cuda(src, k, "coarsen", json!({})));
        expect!["`matmul` is not a 1-D elementwise kernel: `int row = blockIdx.y * blockDim.y + threadIdx.y;` is a 2-D or 3-D index; only 1-D kernels are handled; coarsen needs `int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }` (or `if (i >= n) return;`) with every global access `p[i]`"].assert_eq(&why(MATMUL, "matmul"));
        let capped = SAXPY.replace("grid = cdiv(n, 256)", "grid = min(cdiv(n, 256), sms * 2)");
        expect!["`saxpy`'s grid = min(cdiv(n, 256), sms * 2) already depends on `sms`"]
            .assert_eq(&why(&capped, "saxpy"));
    }
}
