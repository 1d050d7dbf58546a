//! The embedded CUDA code rewrites (`restrict_const`, `launch_bounds`, `unroll`,
//! `fast_math`, `maxnreg`) on every kernel of examples/*.cu and
//! tests/fixtures/rewrites/cuda/*.cu: what each rewrite offers (a snapshot, no tools
//! needed), and that every candidate keeps an error-free spec, compiles with NVRTC
//! without new warnings, and (with ptxas) honours its register cap.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use expect_test::expect;
use kernel_lsp::analysis::{self, AnalyzeOptions, CompileInputs, Severity};
use kernel_lsp::document::Document;
use kernel_lsp::optimize::rewrite::{self, Candidate, RewriteContext, RewriteError};
use kernel_lsp::syntax::Lang;

use crate::tools;

const IDS: [&str; 5] = [
    "restrict_const",
    "launch_bounds",
    "unroll",
    "fast_math",
    "maxnreg",
];

/// (path relative to the repository, text) of every CUDA file the rewrites run on.
fn files() -> Vec<(String, String)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    for dir in ["examples", "tests/fixtures/rewrites/cuda"] {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "cu"))
            .collect();
        paths.sort();
        for p in paths {
            let name = format!("{dir}/{}", p.file_name().unwrap().to_string_lossy());
            out.push((name, std::fs::read_to_string(&p).unwrap()));
        }
    }
    out
}

/// One (file, kernel, rewrite) and what it gave.
struct Outcome {
    file: String,
    kernel: String,
    id: &'static str,
    result: Result<Vec<Candidate>, RewriteError>,
}

/// Every (file, kernel, rewrite) and what it gave.
fn outcomes() -> Vec<Outcome> {
    let mut out = Vec::new();
    let params = BTreeMap::new();
    for (name, text) in files() {
        let doc = Document::new(Lang::Cuda, 0, &text);
        let tree = doc.tree().expect("parsed");
        let model = kernel_lsp::syntax::analyze(Lang::Cuda, &text, tree);
        for kernel in &model.kernels {
            for id in IDS {
                let cx = RewriteContext {
                    lang: Lang::Cuda,
                    text: &text,
                    tree,
                    model: &model,
                    kernel,
                    params: &params,
                };
                out.push(Outcome {
                    file: name.clone(),
                    kernel: kernel.name.clone(),
                    id,
                    result: rewrite::apply(id, &cx),
                });
            }
        }
    }
    out
}

#[test]
fn what_each_code_rewrite_offers_on_the_examples_and_fixtures() {
    let mut table = String::new();
    for Outcome {
        file,
        kernel,
        id,
        result,
    } in outcomes()
    {
        let what = match result {
            Ok(c) => c
                .iter()
                .map(|c| c.label.as_str())
                .collect::<Vec<_>>()
                .join(" | "),
            Err(e) => format!("n/a: {e}"),
        };
        table.push_str(&format!("{file} {kernel} {id}: {what}\n"));
    }
    expect![[r#"
        examples/batched_rowsum.cu batched_rowsum restrict_const: __restrict__ on x, y
        examples/batched_rowsum.cu batched_rowsum launch_bounds: __launch_bounds__(128) | __launch_bounds__(128, 2) | __launch_bounds__(128, 4)
        examples/batched_rowsum.cu batched_rowsum unroll: #pragma unroll 2 on 1 loop | #pragma unroll 4 on 1 loop | #pragma unroll 8 on 1 loop
        examples/batched_rowsum.cu batched_rowsum fast_math: n/a: `batched_rowsum` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/batched_rowsum.cu batched_rowsum maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/bias_relu_rows.cu bias_relu_rows restrict_const: __restrict__ on x, bias, y
        examples/bias_relu_rows.cu bias_relu_rows launch_bounds: __launch_bounds__(256) | __launch_bounds__(256, 2) | __launch_bounds__(256, 4)
        examples/bias_relu_rows.cu bias_relu_rows unroll: n/a: `bias_relu_rows` has no counted `for` loop to unroll (no `for` loop at all in the kernel unit)
        examples/bias_relu_rows.cu bias_relu_rows fast_math: n/a: `bias_relu_rows` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/bias_relu_rows.cu bias_relu_rows maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/col_max.cu col_max restrict_const: __restrict__ on x, out
        examples/col_max.cu col_max launch_bounds: __launch_bounds__(256) | __launch_bounds__(256, 2) | __launch_bounds__(256, 4)
        examples/col_max.cu col_max unroll: #pragma unroll 2 on 1 loop | #pragma unroll 4 on 1 loop | #pragma unroll 8 on 1 loop
        examples/col_max.cu col_max fast_math: n/a: `col_max` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/col_max.cu col_max maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/col_sum.cu col_sum restrict_const: n/a: every pointer parameter of `col_sum` is already `__restrict__`, and the others are written through, passed on or cast, so `const` cannot be added safely
        examples/col_sum.cu col_sum launch_bounds: __launch_bounds__(256) | __launch_bounds__(256, 2) | __launch_bounds__(256, 4)
        examples/col_sum.cu col_sum unroll: #pragma unroll 2 on 1 loop | #pragma unroll 4 on 1 loop | #pragma unroll 8 on 1 loop
        examples/col_sum.cu col_sum fast_math: n/a: `col_sum` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/col_sum.cu col_sum maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/cross_entropy.cu cross_entropy restrict_const: __restrict__ on logits, target, loss
        examples/cross_entropy.cu cross_entropy launch_bounds: __launch_bounds__(256) | __launch_bounds__(256, 2) | __launch_bounds__(256, 4)
        examples/cross_entropy.cu cross_entropy unroll: #pragma unroll 2 on 2 loops | #pragma unroll 4 on 2 loops | #pragma unroll 8 on 2 loops
        examples/cross_entropy.cu cross_entropy fast_math: expf→__expf, logf→__logf
        examples/cross_entropy.cu cross_entropy maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/dequant.cu dequant restrict_const: __restrict__ on q, scale, y
        examples/dequant.cu dequant launch_bounds: __launch_bounds__(256) | __launch_bounds__(256, 2) | __launch_bounds__(256, 4)
        examples/dequant.cu dequant unroll: n/a: `dequant` has no counted `for` loop to unroll (no `for` loop at all in the kernel unit)
        examples/dequant.cu dequant fast_math: n/a: `dequant` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/dequant.cu dequant maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/gelu_bias_half.cu gelu_bias_half restrict_const: __restrict__ on x, bias, y
        examples/gelu_bias_half.cu gelu_bias_half launch_bounds: __launch_bounds__(256) | __launch_bounds__(256, 2) | __launch_bounds__(256, 4)
        examples/gelu_bias_half.cu gelu_bias_half unroll: n/a: `gelu_bias_half` has no counted `for` loop to unroll (no `for` loop at all in the kernel unit)
        examples/gelu_bias_half.cu gelu_bias_half fast_math: n/a: `gelu_bias_half` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/gelu_bias_half.cu gelu_bias_half maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/half_axpy.cu half_axpy restrict_const: __restrict__ on x, y
        examples/half_axpy.cu half_axpy launch_bounds: __launch_bounds__(256) | __launch_bounds__(256, 2) | __launch_bounds__(256, 4)
        examples/half_axpy.cu half_axpy unroll: n/a: `half_axpy` has no counted `for` loop to unroll (no `for` loop at all in the kernel unit)
        examples/half_axpy.cu half_axpy fast_math: n/a: `half_axpy` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/half_axpy.cu half_axpy maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/histogram.cu histogram restrict_const: __restrict__ on data, hist
        examples/histogram.cu histogram launch_bounds: __launch_bounds__(256) | __launch_bounds__(256, 2) | __launch_bounds__(256, 4)
        examples/histogram.cu histogram unroll: n/a: `histogram` has no counted `for` loop to unroll (no `for` loop at all in the kernel unit)
        examples/histogram.cu histogram fast_math: n/a: `histogram` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/histogram.cu histogram maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/matmul_naive.cu matmul restrict_const: __restrict__ on a, b, c
        examples/matmul_naive.cu matmul launch_bounds: __launch_bounds__(256) | __launch_bounds__(256, 2) | __launch_bounds__(256, 4)
        examples/matmul_naive.cu matmul unroll: #pragma unroll 2 on 1 loop | #pragma unroll 4 on 1 loop | #pragma unroll 8 on 1 loop
        examples/matmul_naive.cu matmul fast_math: n/a: `matmul` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/matmul_naive.cu matmul maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/matvec.cu matvec restrict_const: n/a: every pointer parameter of `matvec` is already `__restrict__`, and the others are written through, passed on or cast, so `const` cannot be added safely
        examples/matvec.cu matvec launch_bounds: __launch_bounds__(64) | __launch_bounds__(64, 2) | __launch_bounds__(64, 4)
        examples/matvec.cu matvec unroll: #pragma unroll 2 on 1 loop | #pragma unroll 4 on 1 loop | #pragma unroll 8 on 1 loop
        examples/matvec.cu matvec fast_math: n/a: `matvec` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/matvec.cu matvec maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/matvec_t.cu matvec_t restrict_const: __restrict__ on a, v, y
        examples/matvec_t.cu matvec_t launch_bounds: __launch_bounds__(128) | __launch_bounds__(128, 2) | __launch_bounds__(128, 4)
        examples/matvec_t.cu matvec_t unroll: n/a: `matvec_t` has no counted `for` loop to unroll (no `for` loop at all in the kernel unit)
        examples/matvec_t.cu matvec_t fast_math: n/a: `matvec_t` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/matvec_t.cu matvec_t maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/mid_sum.cu mid_sum restrict_const: __restrict__ on x, y
        examples/mid_sum.cu mid_sum launch_bounds: __launch_bounds__(256) | __launch_bounds__(256, 2) | __launch_bounds__(256, 4)
        examples/mid_sum.cu mid_sum unroll: #pragma unroll 2 on 1 loop | #pragma unroll 4 on 1 loop | #pragma unroll 8 on 1 loop
        examples/mid_sum.cu mid_sum fast_math: n/a: `mid_sum` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/mid_sum.cu mid_sum maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/norm_apply.cu norm_apply restrict_const: n/a: every pointer parameter of `norm_apply` is already `__restrict__`, and the others are written through, passed on or cast, so `const` cannot be added safely
        examples/norm_apply.cu norm_apply launch_bounds: __launch_bounds__(128) | __launch_bounds__(128, 2) | __launch_bounds__(128, 4)
        examples/norm_apply.cu norm_apply unroll: n/a: `norm_apply` has no counted `for` loop to unroll (no `for` loop at all in the kernel unit)
        examples/norm_apply.cu norm_apply fast_math: n/a: `norm_apply` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/norm_apply.cu norm_apply maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/reduce_sum.cu reduce_naive restrict_const: __restrict__ on x, out
        examples/reduce_sum.cu reduce_naive launch_bounds: __launch_bounds__(256) | __launch_bounds__(256, 2) | __launch_bounds__(256, 4)
        examples/reduce_sum.cu reduce_naive unroll: n/a: `reduce_naive` has no counted `for` loop to unroll (no `for` loop at all in the kernel unit)
        examples/reduce_sum.cu reduce_naive fast_math: n/a: `reduce_naive` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/reduce_sum.cu reduce_naive maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/reduce_sum.cu reduce_tree restrict_const: __restrict__ on x, out
        examples/reduce_sum.cu reduce_tree launch_bounds: __launch_bounds__(BLOCK) | __launch_bounds__(BLOCK, 2) | __launch_bounds__(BLOCK, 4)
        examples/reduce_sum.cu reduce_tree unroll: n/a: `reduce_tree` has no counted `for` loop to unroll: `for (int s = BLOCK / 2; s > 0; s >>= 1)` is not counted (the condition `s > 0` is not `s <`, `<=` or `!=` a bound)
        examples/reduce_sum.cu reduce_tree fast_math: n/a: `reduce_tree` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/reduce_sum.cu reduce_tree maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/rms_norm.cu rms_norm restrict_const: __restrict__ on x, w, y
        examples/rms_norm.cu rms_norm launch_bounds: __launch_bounds__(128) | __launch_bounds__(128, 2) | __launch_bounds__(128, 4)
        examples/rms_norm.cu rms_norm unroll: #pragma unroll 2 on 2 loops | #pragma unroll 4 on 2 loops | #pragma unroll 8 on 2 loops
        examples/rms_norm.cu rms_norm fast_math: n/a: `rms_norm` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/rms_norm.cu rms_norm maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/rope_pairs.cu rope_pairs restrict_const: __restrict__ on x, cos, sin, y
        examples/rope_pairs.cu rope_pairs launch_bounds: __launch_bounds__(256) | __launch_bounds__(256, 2) | __launch_bounds__(256, 4)
        examples/rope_pairs.cu rope_pairs unroll: n/a: `rope_pairs` has no counted `for` loop to unroll (no `for` loop at all in the kernel unit)
        examples/rope_pairs.cu rope_pairs fast_math: n/a: `rope_pairs` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/rope_pairs.cu rope_pairs maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/row_argmax.cu row_argmax restrict_const: __restrict__ on x, idx
        examples/row_argmax.cu row_argmax launch_bounds: __launch_bounds__(256) | __launch_bounds__(256, 2) | __launch_bounds__(256, 4)
        examples/row_argmax.cu row_argmax unroll: #pragma unroll 2 on 1 loop | #pragma unroll 4 on 1 loop | #pragma unroll 8 on 1 loop
        examples/row_argmax.cu row_argmax fast_math: n/a: `row_argmax` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/row_argmax.cu row_argmax maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/row_cumsum.cu row_cumsum restrict_const: __restrict__ on x, y
        examples/row_cumsum.cu row_cumsum launch_bounds: __launch_bounds__(128) | __launch_bounds__(128, 2) | __launch_bounds__(128, 4)
        examples/row_cumsum.cu row_cumsum unroll: #pragma unroll 2 on 1 loop | #pragma unroll 4 on 1 loop | #pragma unroll 8 on 1 loop
        examples/row_cumsum.cu row_cumsum fast_math: n/a: `row_cumsum` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/row_cumsum.cu row_cumsum maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/saxpy.cu saxpy restrict_const: __restrict__ on x, y
        examples/saxpy.cu saxpy launch_bounds: __launch_bounds__(256) | __launch_bounds__(256, 2) | __launch_bounds__(256, 4)
        examples/saxpy.cu saxpy unroll: n/a: `saxpy` has no counted `for` loop to unroll (no `for` loop at all in the kernel unit)
        examples/saxpy.cu saxpy fast_math: n/a: `saxpy` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/saxpy.cu saxpy maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/scale_shift_batched.cu scale_shift_batched restrict_const: __restrict__ on x, gamma, beta, y
        examples/scale_shift_batched.cu scale_shift_batched launch_bounds: __launch_bounds__(256) | __launch_bounds__(256, 2) | __launch_bounds__(256, 4)
        examples/scale_shift_batched.cu scale_shift_batched unroll: n/a: `scale_shift_batched` has no counted `for` loop to unroll (no `for` loop at all in the kernel unit)
        examples/scale_shift_batched.cu scale_shift_batched fast_math: n/a: `scale_shift_batched` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/scale_shift_batched.cu scale_shift_batched maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/softmax_rows.cu softmax_rows restrict_const: __restrict__ on x, y
        examples/softmax_rows.cu softmax_rows launch_bounds: __launch_bounds__(128) | __launch_bounds__(128, 2) | __launch_bounds__(128, 4)
        examples/softmax_rows.cu softmax_rows unroll: #pragma unroll 2 on 3 loops | #pragma unroll 4 on 3 loops | #pragma unroll 8 on 3 loops
        examples/softmax_rows.cu softmax_rows fast_math: expf→__expf
        examples/softmax_rows.cu softmax_rows maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/sum_squares.cu sum_squares restrict_const: __restrict__ on x, total
        examples/sum_squares.cu sum_squares launch_bounds: __launch_bounds__(256) | __launch_bounds__(256, 2) | __launch_bounds__(256, 4)
        examples/sum_squares.cu sum_squares unroll: n/a: `sum_squares` has no counted `for` loop to unroll (no `for` loop at all in the kernel unit)
        examples/sum_squares.cu sum_squares fast_math: n/a: `sum_squares` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/sum_squares.cu sum_squares maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        examples/transpose.cu transpose restrict_const: __restrict__ on src, dst
        examples/transpose.cu transpose launch_bounds: __launch_bounds__(256) | __launch_bounds__(256, 2) | __launch_bounds__(256, 4)
        examples/transpose.cu transpose unroll: n/a: `transpose` has no counted `for` loop to unroll (no `for` loop at all in the kernel unit)
        examples/transpose.cu transpose fast_math: n/a: `transpose` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        examples/transpose.cu transpose maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        tests/fixtures/rewrites/cuda/half2.cu swish_half2 restrict_const: __restrict__ on x, y
        tests/fixtures/rewrites/cuda/half2.cu swish_half2 launch_bounds: __launch_bounds__(256) | __launch_bounds__(256, 2) | __launch_bounds__(256, 4)
        tests/fixtures/rewrites/cuda/half2.cu swish_half2 unroll: n/a: `swish_half2` has no counted `for` loop to unroll (no `for` loop at all in the kernel unit)
        tests/fixtures/rewrites/cuda/half2.cu swish_half2 fast_math: n/a: `swish_half2` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        tests/fixtures/rewrites/cuda/half2.cu swish_half2 maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        tests/fixtures/rewrites/cuda/norms.cu softmax_rows restrict_const: __restrict__ on x, y
        tests/fixtures/rewrites/cuda/norms.cu softmax_rows launch_bounds: __launch_bounds__(128) | __launch_bounds__(128, 2) | __launch_bounds__(128, 4)
        tests/fixtures/rewrites/cuda/norms.cu softmax_rows unroll: #pragma unroll 2 on 4 loops | #pragma unroll 4 on 4 loops | #pragma unroll 8 on 4 loops | #pragma unroll (full) on 1 loop of ≤ 32 trips
        tests/fixtures/rewrites/cuda/norms.cu softmax_rows fast_math: expf→__expf ×2, /→__fdividef
        tests/fixtures/rewrites/cuda/norms.cu softmax_rows maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        tests/fixtures/rewrites/cuda/norms.cu layer_norm restrict_const: __restrict__ on x, gamma, beta, y; const on gamma, beta
        tests/fixtures/rewrites/cuda/norms.cu layer_norm launch_bounds: __launch_bounds__(THREADS) | __launch_bounds__(THREADS, 2) | __launch_bounds__(THREADS, 4)
        tests/fixtures/rewrites/cuda/norms.cu layer_norm unroll: #pragma unroll 2 on 2 loops | #pragma unroll 4 on 2 loops | #pragma unroll 8 on 2 loops
        tests/fixtures/rewrites/cuda/norms.cu layer_norm fast_math: 1.0f / sqrtf→rsqrtf
        tests/fixtures/rewrites/cuda/norms.cu layer_norm maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
        tests/fixtures/rewrites/cuda/stencil.cu stencil restrict_const: __restrict__ on src, dst; const on src
        tests/fixtures/rewrites/cuda/stencil.cu stencil launch_bounds: __launch_bounds__(128) | __launch_bounds__(128, 2) | __launch_bounds__(128, 4)
        tests/fixtures/rewrites/cuda/stencil.cu stencil unroll: #pragma unroll 2 on 1 loop | #pragma unroll 4 on 1 loop | #pragma unroll 8 on 1 loop
        tests/fixtures/rewrites/cuda/stencil.cu stencil fast_math: n/a: `stencil` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands (`__host__ __device__` functions are left alone)
        tests/fixtures/rewrites/cuda/stencil.cu stencil maxnreg: maxnreg 32 | maxnreg 64 | maxnreg 96 | maxnreg 128
    "#]].assert_eq(&table);
}

/// Error findings (syntax, spec) of a text, and the compile inputs of `kernel`.
fn check_text(text: &str, kernel: &str) -> (Vec<String>, Option<CompileInputs>) {
    let doc = Document::new(Lang::Cuda, 0, text);
    let fa = analysis::analyze(Lang::Cuda, text, doc.tree(), &AnalyzeOptions::default());
    let errors = fa
        .findings()
        .into_iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| f.message)
        .collect();
    let Some(i) = fa.model.kernels.iter().position(|k| k.name == kernel) else {
        return (vec![format!("kernel `{kernel}` is gone")], None);
    };
    let Some(plan) = &fa.specs[i].plan else {
        return (errors, None);
    };
    let inputs = CompileInputs {
        device_slice: fa.kernel_source(kernel, text),
        defines: plan.defines.clone(),
        name_expressions: plan.template_instance().into_iter().collect(),
        project: Default::default(),
        headers: Vec::new(),
        file: None,
    };
    (errors, Some(inputs))
}

#[test]
fn every_candidate_compiles_and_keeps_an_error_free_spec() {
    let test = "every_candidate_compiles_and_keeps_an_error_free_spec";
    if let Err(why) = tools::nvrtc_available() {
        return tools::skip(test, &why);
    }
    let tc = kernel_lsp::toolchain::locate(&Default::default());
    let mut compiled = 0;
    let mut capped = 0;
    let texts: BTreeMap<String, String> = files().into_iter().collect();
    let mut baselines: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for Outcome {
        file,
        kernel,
        id,
        result,
    } in outcomes()
    {
        let Ok(candidates) = result else { continue };
        // The original's own warnings, so that only new ones fail.
        let before = baselines
            .entry((file.clone(), kernel.clone()))
            .or_insert_with(|| {
                let (errors, inputs) = check_text(&texts[&file], &kernel);
                assert!(errors.is_empty(), "{file} {kernel}: {errors:?}");
                let inputs = inputs.expect("the original has a plan");
                let out = analysis::compile(&tc, &texts[&file], &inputs, "original.cu");
                out.findings.into_iter().map(|f| f.message).collect()
            })
            .clone();
        for c in candidates {
            let at = format!("{file} {kernel} {id} ({})", c.label);
            let (errors, inputs) = check_text(&c.text, &kernel);
            assert!(errors.is_empty(), "{at}: {errors:?}\n{}", c.text);
            let inputs = inputs.unwrap_or_else(|| panic!("{at}: no plan"));
            let out = analysis::compile(&tc, &c.text, &inputs, "candidate.cu");
            let new: Vec<_> = out
                .findings
                .iter()
                .filter(|f| !before.contains(&f.message))
                .map(|f| format!("{:?}: {}", f.severity, f.message))
                .collect();
            assert!(new.is_empty(), "{at}: NVRTC says {new:?}\n{}", c.text);
            compiled += 1;
            if id != "maxnreg" || tc.ptxas.is_none() {
                continue;
            }
            let cap: u32 = c
                .label
                .trim_start_matches("maxnreg ")
                .parse()
                .unwrap_or_else(|_| panic!("{at}: label"));
            let doc = Document::new(Lang::Cuda, 0, &c.text);
            let model = kernel_lsp::syntax::analyze(Lang::Cuda, &c.text, doc.tree().unwrap());
            let k = model.kernel(&kernel).unwrap();
            let res = analysis::resources_for(&out.resources, k)
                .unwrap_or_else(|| panic!("{at}: no ptxas resources ({:?})", out.note));
            assert!(
                res.registers <= cap,
                "{at}: {} registers over a cap of {cap}",
                res.registers
            );
            capped += 1;
        }
    }
    eprintln!("{compiled} candidates compiled, {capped} register caps checked with ptxas");
    assert!(
        compiled >= 40,
        "only {compiled} candidates: a rewrite went missing"
    );
}

/// maxnreg on a kernel that wants many registers really lowers its count.
#[test]
fn a_register_cap_lowers_the_count_ptxas_reports() {
    let test = "a_register_cap_lowers_the_count_ptxas_reports";
    if let Err(why) = tools::nvrtc_available() {
        return tools::skip(test, &why);
    }
    let tc = kernel_lsp::toolchain::locate(&Default::default());
    if tc.ptxas.is_none() {
        return tools::skip(test, "ptxas not found");
    }
    // 32 independent accumulators keep many values live at once.
    let text = "// @bench n = 1 << 16\n// @bench x: in f32[n]; y: out f32[n]\n// @bench grid = cdiv(n, 32 * 128); block = 128\nextern \"C\" __global__ void wide(int n, const float* x, float* y) {\n    int base = (blockIdx.x * blockDim.x + threadIdx.x) * 32;\n    float acc[32];\n    #pragma unroll\n    for (int j = 0; j < 32; j++) acc[j] = base + j < n ? x[base + j] : 0.0f;\n    #pragma unroll\n    for (int r = 0; r < 8; r++) {\n        #pragma unroll\n        for (int j = 0; j < 32; j++) acc[j] = acc[j] * acc[(j + 1) % 32] + 1.0f;\n    }\n    #pragma unroll\n    for (int j = 0; j < 32; j++) if (base + j < n) y[base + j] = acc[j];\n}\n";
    let regs = |text: &str| {
        let (errors, inputs) = check_text(text, "wide");
        assert!(errors.is_empty(), "{errors:?}");
        let out = analysis::compile(&tc, text, &inputs.unwrap(), "wide.cu");
        let doc = Document::new(Lang::Cuda, 0, text);
        let model = kernel_lsp::syntax::analyze(Lang::Cuda, text, doc.tree().unwrap());
        analysis::resources_for(&out.resources, model.kernel("wide").unwrap())
            .map(|r| r.registers)
            .unwrap_or_else(|| panic!("no resources: {:?} {:?}", out.note, out.findings))
    };
    let before = regs(text);
    let doc = Document::new(Lang::Cuda, 0, text);
    let tree = doc.tree().unwrap();
    let model = kernel_lsp::syntax::analyze(Lang::Cuda, text, tree);
    let params: BTreeMap<String, serde_json::Value> =
        [("values".to_string(), serde_json::json!([32]))].into();
    let cx = RewriteContext {
        lang: Lang::Cuda,
        text,
        tree,
        model: &model,
        kernel: &model.kernels[0],
        params: &params,
    };
    let c = rewrite::apply("maxnreg", &cx).expect("a candidate");
    let after = regs(&c[0].text);
    eprintln!("wide: {before} registers, {after} with maxnreg 32");
    assert!(
        before > 32,
        "the fixture should need more than 32 registers: {before}"
    );
    assert!(after <= 32, "{after}");
}
