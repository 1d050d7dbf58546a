//! `grid_stride`: the 1-D elementwise shape becomes `for (int i = ...; i < n; i +=
//! blockDim.x * gridDim.x)` and the grid `min(grid, sms * K)` for K in param
//! `blocks_per_sm` (default [4, 8, 16, 32]). 2-D kernels are refused: capping a 2-D grid
//! needs a split of the blocks between the dims that this rewrite does not guess.

use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::edits::Edits;
use super::elementwise::{
    bound_text, inspect_body, match_elementwise, one_d_grid, pointer_params, Elementwise, Guard,
    INDEX_SHAPE,
};
use super::params::Params;
use super::spec_expr::words;
use super::tree::{kernel_function, line_indent, newline, reindent, text};
use super::RewriteContext;
use crate::syntax::Lang;

/// The 1-D shape becomes `for (int i = ...; i < n; i += blockDim.x * gridDim.x)` and
/// the grid `min(grid, sms * K)` for K in param `blocks_per_sm` (default [4, 8, 16, 32]).
/// 2-D kernels are `NotApplicable`: capping a 2-D grid needs a split of the blocks
/// between the dims that this rewrite does not guess.
pub fn grid_stride(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, "grid_stride")?;
    let plan = current_plan(cx)?;
    let per_sm = Params(cx.params).ints("blocks_per_sm", &[4, 8, 16, 32], 1..=i64::MAX)?;
    let k = &cx.kernel.name;
    let func = kernel_function(cx)
        .ok_or_else(|| not_applicable(format!("`{k}`'s definition is not in the syntax tree")))?;
    let shape = match_elementwise(cx.text, func).map_err(|why| {
        not_applicable(format!(
            "`{k}` is not a 1-D kernel with a bounds check: {why}; grid_stride needs {INDEX_SHAPE}"
        ))
    })?;
    inspect_body(cx.text, &shape, &pointer_params(cx), false)
        .map_err(|why| not_applicable(format!("`{k}` cannot become a grid-stride loop: {why}")))?;
    let (grid, first) = one_d_grid(cx, &plan, "grid_stride", shape.batched)?;
    if words(&grid.text).contains("sms") {
        return Err(not_applicable(format!(
            "`{k}`'s grid = {} already depends on `sms`",
            grid.text
        )));
    }
    let code = emit_grid_stride(cx.text, &shape);
    let g = &grid.text[first.clone()];
    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    for n in per_sm {
        let label = format!("grid-stride, grid <= {n} * sms");
        let edits = Edits::from_pairs([
            (shape.decl.start_byte()..shape.end, code.clone()),
            (
                grid.range.start + first.start..grid.range.start + first.end,
                format!("min({g}, sms * {n})"),
            ),
        ]);
        match edits.apply(cx.text) {
            Ok(text) => drafts.push(Draft { label, text }),
            Err(e) => dropped.push(format!("{label}: {e}")),
        }
    }
    finish(cx, drafts, dropped)
}

pub(super) fn emit_grid_stride(src: &str, shape: &Elementwise<'_>) -> String {
    let nl = newline(src);
    let i = &shape.index;
    let ind = &shape.indent;
    let mut o = String::new();
    for c in &shape.between {
        o.push_str(&format!("{}{nl}{ind}", text(src, *c)));
    }
    o.push_str(&format!(
        "for ({} {i} = {}; {i} < {}; {i} += blockDim.x * gridDim.x)",
        shape.index_ty,
        shape.init,
        bound_text(src, shape.bound)
    ));
    match shape.form {
        Guard::Block => o.push_str(&src[shape.cond_end..shape.guard.end_byte()]),
        Guard::EarlyReturn => {
            let span = shape.body_span();
            let in1 = format!("{ind}{}", shape.unit);
            let body = reindent(&src[span.clone()], line_indent(src, span.start), &in1);
            o.push_str(&format!(" {{{nl}{in1}{body}{nl}{ind}}}"));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use expect_test::expect;
    use serde_json::json;

    use super::super::check::testing::{cuda, labels, not_applicable, show, LEAKY_RELU};
    use super::*;

    const SAXPY: &str = include_str!("../../../../examples/saxpy.cu");
    const MATMUL: &str = include_str!("../../../../examples/matmul_naive.cu");
    const REDUCE: &str = include_str!("../../../../examples/reduce_sum.cu");

    #[test]
    fn grid_stride_saxpy_caps_the_grid_per_sm() {
        let out = cuda(SAXPY, "saxpy", "grid_stride", json!({})).unwrap();
        assert_eq!(
            labels(&out),
            [
                "grid-stride, grid <= 4 * sms",
                "grid-stride, grid <= 8 * sms",
                "grid-stride, grid <= 16 * sms",
                "grid-stride, grid <= 32 * sms"
            ]
        );
        expect![[r#"
            // The first case is timed; every case is verified.
            // @bench n = 1 << 24, 4099
            // @bench x: in f32[n]
            // @bench y: inout f32[n] ~ normal(0, 1)
            // @bench a = 2.5
            // @bench grid = min(cdiv(n, 256), sms * 4); block = 256
            extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
                for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = a * x[i] + y[i];
            }"#]]
        .assert_eq(&show(Lang::Cuda, SAXPY, &out[0], "saxpy"));
    }

    #[test]
    fn grid_stride_early_return_keeps_comments_and_atomics() {
        let out = cuda(
            LEAKY_RELU,
            "leaky",
            "grid_stride",
            json!({"blocks_per_sm": 8}),
        )
        .unwrap();
        expect![[r#"
            // @bench n = 1000, 77
            // @bench x: in f32[n]; y: out f32[n]
            // @bench grid = min(cdiv(n, 128), sms * 8); block = 128
            __global__ void leaky(int n, const float* __restrict__ x, float* __restrict__ y) {
                // past the end
                for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
                    float v = x[i];
                    // keep small negatives
                    y[i] = v > 0.0f ? v : 1e-6f * i;
                }
            }"#]]
        .assert_eq(&show(Lang::Cuda, LEAKY_RELU, &out[0], "leaky"));
        let out = cuda(
            REDUCE,
            "reduce_naive",
            "grid_stride",
            json!({"blocks_per_sm": [4]}),
        )
        .unwrap();
        assert!(out[0].text.contains(
            "    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) atomicAdd(out, load_as_float(x, i));\n"
        ));
    }

    #[test]
    fn grid_stride_says_why_a_kernel_does_not_fit() {
        let why = |src: &str, k: &str| not_applicable(cuda(src, k, "grid_stride", json!({})));
        expect!["`matmul` is not a 1-D kernel with a bounds check: `int row = blockIdx.y * blockDim.y + threadIdx.y;` is a 2-D or 3-D index; only 1-D kernels are handled; grid_stride needs `int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }` (or `if (i >= n) return;`)"]
            .assert_eq(&why(MATMUL, "matmul"));
        let sync = SAXPY.replace(
            "if (i < n) y[i] = a * x[i] + y[i];",
            "if (i < n) { y[i] = a * x[i]; __syncthreads(); }",
        );
        expect!["`saxpy` cannot become a grid-stride loop: the body calls `__syncthreads`; once a thread handles several elements, barriers and warp collectives no longer line up"]
            .assert_eq(&why(&sync, "saxpy"));
        let tid = SAXPY.replace("a * x[i]", "a * x[threadIdx.x]");
        expect!["`saxpy` cannot become a grid-stride loop: the body reads `threadIdx.x`; once a thread handles several elements it no longer names the element"]
            .assert_eq(&why(&tid, "saxpy"));
        let helpers = SAXPY.replace(
            "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = a * x[i] + y[i];",
            "int t = threadIdx.x, b = blockIdx.x;\n    int lane = t;\n    int i = b * blockDim.x + lane;\n    if (i < n) y[i] = a * x[i] + y[lane];",
        );
        assert_ne!(helpers, SAXPY);
        expect!["`saxpy` cannot become a grid-stride loop: the body reads `lane` (`threadIdx.x`); once a thread handles several elements it no longer names the element"].assert_eq(&why(&helpers, "saxpy"));
        let strided = SAXPY.replace("grid = cdiv(n, 256)", "grid = min(cdiv(n, 256), sms * 2)");
        expect!["`saxpy`'s grid = min(cdiv(n, 256), sms * 2) already depends on `sms`"]
            .assert_eq(&why(&strided, "saxpy"));
        let ret = SAXPY.replace(
            "if (i < n) y[i] = a * x[i] + y[i];",
            "if (i < n) { if (x[i] == 0.0f) return; y[i] = a; }",
        );
        expect!["`saxpy` cannot become a grid-stride loop: `return;` returns from inside the guarded body"]
            .assert_eq(&why(&ret, "saxpy"));
    }
}
