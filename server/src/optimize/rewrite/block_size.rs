//! `block_size`: new CUDA block shapes, with the `grid` dims that divide by the old block
//! size rescaled. The body is not read: a body that hard-codes the old block size
//! (`__shared__ float s[256]`) still gets candidates, whose label says `; body has
//! literal 256`, and verification rejects the wrong ones. A block named by a constant
//! that is its width (`block = BLOCK` with `#define BLOCK 256`, a `constexpr`, a template
//! parameter the spec sets: [`super::width_names`]) is retuned too: the spec gets the new
//! literal (`block = 512`, `grid = cdiv(n, 512)`), the constant stays, and the kernel
//! reads `blockDim.x` where it read the name, or the new width where a constant is needed
//! (an array's size). Refuses another block that is not made of integer literals (a block
//! from a `tune` is `tunable_sweep`'s), shapes over 1024 threads or over
//! `__launch_bounds__`, and grids with no division to rescale.

use tree_sitter::Node;

use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::edits::Edits;
use super::params::Params;
use super::spec_expr::{
    components, format_dims, literal_dims, parse_int_literal, rescale, rescale_cap, words,
};
use super::tree::{kernel_function, text, walk};
use super::width_names::{width_names, with_values};
use super::RewriteContext;
use crate::optimize::edit;
use crate::syntax::Lang;

pub(super) const DIMS: [&str; 3] = ["x", "y", "z"];

/// A replacement in the document: its range and the new text.
type GridEdit = (crate::syntax::ByteRange, String);

/// New CUDA block shapes, with the `grid` dims that divide by the old block size
/// rescaled. See the module doc for bodies that hard-code the block size.
pub fn block_size(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, "block_size")?;
    let plan = current_plan(cx)?;
    let sizes_1d = Params(cx.params).ints("sizes_1d", &[64, 128, 256, 512, 1024], 1..=i64::MAX)?;
    let shapes_2d = Params(cx.params).pairs(
        "shapes_2d",
        &[
            [32, 8],
            [32, 4],
            [64, 4],
            [32, 16],
            [16, 16],
            [16, 8],
            [8, 32],
            // Whole rows a block: a row's gathers (`x[r * N + idx[...]]`) stay in one SM's
            // L1. A row gather of 8192 x 1024 from rows of 2048 ran 0.0562 ms in (64, 4)
            // blocks, 0.0490 in (256, 1) and 0.0514 in (128, 2) on an H200.
            [128, 2],
            [256, 1],
        ],
    )?;
    let k = &cx.kernel.name;
    let block = edit::spec_assignment(cx.kernel, "block").ok_or_else(|| {
        not_applicable(format!(
            "`{k}`'s spec has no `block = ...`; block_size rewrites a block of integer literals"
        ))
    })?;
    let names = width_names(cx);
    let Some(old) = literal_dims(&with_values(&block.text, &names)) else {
        let used = words(&block.text);
        if let Some(t) = plan
            .tunables
            .iter()
            .find(|t| used.contains(t.name.as_str()))
        {
            return Err(not_applicable(format!(
                "`block` comes from tune {}; tunable_sweep covers it",
                t.name
            )));
        }
        return Err(not_applicable(format!(
            "`block = {}` is not made of integer literals; block_size rewrites literal blocks only",
            block.text
        )));
    };
    let grid = edit::spec_assignment(cx.kernel, "grid")
        .ok_or_else(|| not_applicable(format!("`{k}`'s spec has no `grid = ...`")))?;
    let parts = components(&grid.text);
    let func = kernel_function(cx);
    let bound = func.and_then(|f| launch_bounds(cx.text, f));
    let hard = func.and_then(|f| hard_coded(cx.text, f, &old));

    let shapes: Vec<Vec<u64>> = match old.len() {
        1 => sizes_1d.iter().map(|s| vec![*s as u64]).collect(),
        2 => shapes_2d.iter().map(|s| s.to_vec()).collect(),
        _ => shapes_2d.iter().map(|s| vec![s[0], s[1], old[2]]).collect(),
    };
    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    for new in shapes {
        let threads = new.iter().fold(1u64, |a, d| a.saturating_mul(*d));
        if new == old || threads > 1024 || bound.is_some_and(|b| threads > b) {
            continue;
        }
        let shown = format_dims(&new);
        let old_threads = old.iter().product::<u64>();
        let mut edits = Vec::new();
        // The same edits with the grid's `sms * K` cap rescaled to keep the threads
        // per multiprocessor (None: no cap to rescale).
        let mut capped: Option<(Vec<GridEdit>, u64)> = None;
        let mut failed = None;
        for (j, (o, n)) in old.iter().zip(&new).enumerate() {
            if o == n {
                continue;
            }
            let Some(part) = parts.get(j) else {
                failed = Some(format!(
                    "grid has no {} dim to rescale for block {} {o} -> {n}",
                    DIMS[j], DIMS[j]
                ));
                break;
            };
            match rescale(&with_values(&grid.text[part.clone()], &names), *o, *n) {
                Some(t) => {
                    let range = grid.range.start + part.start..grid.range.start + part.end;
                    if let Some((c, k)) = rescale_cap(&t, old_threads, threads) {
                        let mut e = edits.clone();
                        e.push((range.clone(), c));
                        capped = Some((e, k));
                    } else if let Some((e, _)) = &mut capped {
                        e.push((range.clone(), t.clone()));
                    }
                    edits.push((range, t));
                }
                None => {
                    failed = Some(format!(
                        "grid {} `{}` has no `cdiv(X, {o})` or `(X + {o} - 1) / {o}` to rescale",
                        DIMS[j],
                        &grid.text[part.clone()]
                    ));
                    break;
                }
            }
        }
        if let Some(why) = failed {
            dropped.push(format!("block={shown}: {why}"));
            continue;
        }
        edits.push((block.range.clone(), shown.clone()));
        let note = hard
            .map(|v| format!("; body has literal {v}"))
            .unwrap_or_default();
        let mut variants = vec![(format!("block={shown}{note}"), edits)];
        if let Some((mut e, k)) = capped {
            e.push((block.range.clone(), shown.clone()));
            variants.push((format!("block={shown}, grid <= {k} * sms{note}"), e));
        }
        for (label, edits) in variants {
            match Edits::from_pairs(edits).apply(cx.text) {
                Ok(text) => drafts.push(Draft { label, text }),
                Err(e) => dropped.push(format!("{label}: {e}")),
            }
        }
    }
    if drafts.is_empty() && dropped.is_empty() {
        return Err(not_applicable(format!(
            "no block shape to try for `{k}`: every listed shape is the current one or over {} threads",
            bound.unwrap_or(1024)
        )));
    }
    finish(cx, drafts, dropped)
}

/// `__launch_bounds__(N, ...)`'s N.
pub(super) fn launch_bounds(src: &str, func: Node<'_>) -> Option<u64> {
    let mut c = func.walk();
    let lb = func
        .children(&mut c)
        .find(|n| n.kind() == "launch_bounds")?;
    let mut c = lb.walk();
    let first = lb.named_children(&mut c).next()?;
    parse_int_literal(text(src, first))
}

/// An integer literal in the body equal to an old block dim (above 1) or to the old
/// thread count: the body may hard-code the block size. A shift count (the 16 of
/// `1 << 16`) is not a size.
pub(super) fn hard_coded(src: &str, func: Node<'_>, old: &[u64]) -> Option<u64> {
    let body = func.child_by_field_name("body")?;
    let mut watch: Vec<u64> = old.iter().copied().filter(|d| *d > 1).collect();
    watch.push(old.iter().fold(1u64, |a, d| a.saturating_mul(*d)));
    let mut found = None;
    walk(body, &mut |n| {
        if found.is_none() && n.kind() == "number_literal" && !shift_count(src, n) {
            if let Some(v) = parse_int_literal(text(src, n)).filter(|v| watch.contains(v)) {
                found = Some(v);
            }
        }
        true
    });
    found
}

/// Is `n` the right operand of `<<` or `>>`?
fn shift_count(src: &str, n: Node<'_>) -> bool {
    n.parent().is_some_and(|p| {
        p.kind() == "binary_expression"
            && p.child_by_field_name("right")
                .is_some_and(|r| r.id() == n.id())
            && p.child_by_field_name("operator")
                .is_some_and(|o| matches!(text(src, o), "<<" | ">>"))
    })
}

#[cfg(test)]
mod tests {
    use expect_test::expect;
    use serde_json::json;

    use super::super::check::testing::{cuda, find, labels, not_applicable, run, show};
    use super::*;

    const SAXPY: &str = include_str!("../../../../examples/saxpy.cu");
    const MATMUL: &str = include_str!("../../../../examples/matmul_naive.cu");
    const REDUCE: &str = include_str!("../../../../examples/reduce_sum.cu");
    const VECTOR_ADD: &str = include_str!("../../../../examples/vector_add.py");

    #[test]
    fn block_size_1d_rescales_the_grid_division() {
        let out = cuda(SAXPY, "saxpy", "block_size", json!({})).unwrap();
        assert_eq!(
            labels(&out),
            ["block=64", "block=128", "block=512", "block=1024"]
        );
        expect![[r#"
            // The first case is timed; every case is verified.
            // @bench n = 1 << 24, 4099
            // @bench x: in f32[n]
            // @bench y: inout f32[n] ~ normal(0, 1)
            // @bench a = 2.5
            // @bench grid = cdiv(n, 512); block = 512
            extern "C" __global__ void __launch_bounds__(512) saxpy(int n, float a, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }"#]]
        .assert_eq(&show(Lang::Cuda, SAXPY, find(&out, "block=512"), "saxpy"));
    }

    #[test]
    fn a_capped_grid_gets_each_block_also_with_the_threads_per_multiprocessor_kept() {
        let capped = SAXPY.replace("grid = cdiv(n, 256)", "grid = min(cdiv(n, 256), sms * 8)");
        let out = cuda(&capped, "saxpy", "block_size", json!({})).unwrap();
        assert_eq!(
            labels(&out),
            [
                "block=64",
                "block=64, grid <= 32 * sms",
                "block=128",
                "block=128, grid <= 16 * sms",
                "block=512",
                "block=512, grid <= 4 * sms",
                "block=1024",
                "block=1024, grid <= 2 * sms"
            ]
        );
        assert!(find(&out, "block=512, grid <= 4 * sms")
            .text
            .contains("// @bench grid = min(cdiv(n, 512), sms * 4); block = 512"));
        assert!(find(&out, "block=512")
            .text
            .contains("// @bench grid = min(cdiv(n, 512), sms * 8); block = 512"));
    }

    #[test]
    fn block_size_2d_rescales_each_dim_that_changes() {
        let out = cuda(MATMUL, "matmul", "block_size", json!({})).unwrap();
        assert_eq!(
            labels(&out),
            [
                "block=(32, 8)",
                "block=(32, 4)",
                "block=(64, 4)",
                "block=(32, 16)",
                "block=(16, 8)",
                "block=(8, 32)",
                "block=(128, 2)",
                "block=(256, 1)"
            ],
            "(16, 16) is current"
        );
        let c = find(&out, "block=(32, 8)");
        assert!(
            c.text
                .contains("// @bench grid = (cdiv(n, 32), cdiv(m, 8)); block = (32, 8)\n"),
            "{}",
            c.text
        );
        let c = find(&out, "block=(16, 8)");
        assert!(c
            .text
            .contains("// @bench grid = (cdiv(n, 16), cdiv(m, 8)); block = (16, 8)\n"));
    }

    #[test]
    fn block_size_from_a_tunable_is_left_to_the_sweep() {
        expect!["`block` comes from tune BLOCK; tunable_sweep covers it"].assert_eq(
            &not_applicable(cuda(REDUCE, "reduce_tree", "block_size", json!({}))),
        );
        assert_eq!(
            not_applicable(run(
                Lang::Triton,
                VECTOR_ADD,
                "add_kernel",
                "block_size",
                json!({})
            )),
            "`block_size` rewrites CUDA kernels; `add_kernel` is a Triton kernel"
        );
    }

    /// A block named by a constant of the file that is its width: the new literal goes
    /// into the spec's `block` and the grid's division, the `#define` (which another
    /// kernel reads) stays, and the kernel reads `blockDim.x` or, for a shared array's
    /// size, the new width.
    #[test]
    fn block_size_retunes_a_block_named_by_a_constant() {
        let other = "// @bench n = 64\n// @bench y: out f32[n]\n// @bench grid = 1; block = 64\n__global__ void other(float* y, int n) { if (threadIdx.x < BLOCK) y[threadIdx.x] = 1.0f; }\n";
        let src = format!("#define BLOCK 256\n{other}// @bench n = 4096, 77\n// @bench x: in f32[n]; total: out f32[1]\n// @bench grid = cdiv(n, BLOCK); block = BLOCK\n__global__ void k(const float* x, float* total, int n) {{\n    __shared__ float s[BLOCK];\n    int i = blockIdx.x * BLOCK + threadIdx.x;\n    s[threadIdx.x] = i < n ? x[i] : 0.0f;\n    __syncthreads();\n    for (int h = BLOCK / 2; h > 0; h >>= 1) {{\n        if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];\n        __syncthreads();\n    }}\n    if (threadIdx.x == 0) atomicAdd(total, s[0]);\n}}\n");
        let out = cuda(&src, "k", "block_size", json!({"sizes_1d": [128, 512]})).unwrap();
        assert_eq!(labels(&out), ["block=128", "block=512"]);
        let wide = &out[1].text;
        assert!(
            wide.starts_with(&format!("#define BLOCK 256\n{other}")),
            "{wide}"
        );
        for want in [
            "// @bench grid = cdiv(n, 512); block = 512",
            "__shared__ float s[512];",
            "int i = blockIdx.x * blockDim.x + threadIdx.x;",
            "for (int h = blockDim.x / 2; h > 0; h >>= 1)",
        ] {
            assert!(wide.contains(want), "{want}: {wide}");
        }
        // A name that is not the launch's width (TILE 64 in blocks given as TILE * 4).
        let tile = src
            .replace("#define BLOCK 256", "#define BLOCK 256\n#define TILE 64")
            .replace(
                "grid = cdiv(n, BLOCK); block = BLOCK",
                "grid = cdiv(n, TILE * 4); block = TILE * 4",
            );
        assert_eq!(
            not_applicable(cuda(&tile, "k", "block_size", json!({}))),
            "`block = TILE * 4` is not made of integer literals; block_size rewrites literal blocks only"
        );
    }

    const BOUNDED: &str = "// @bench n = 4096\n// @bench x: inout f32[n]\n// @bench grid = cdiv(n, 256); block = 256\n__global__ void __launch_bounds__(256) k(int n, float* x) {\n    __shared__ float s[256];\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    s[threadIdx.x] = i < n ? x[i] : 0.0f;\n    if (i < n) x[i] = s[threadIdx.x] * 2.0f;\n}\n";

    #[test]
    fn block_size_respects_launch_bounds_and_flags_a_hard_coded_size() {
        let out = cuda(BOUNDED, "k", "block_size", json!({})).unwrap();
        expect![[r#"
            [
                "block=64; body has literal 256",
                "block=128; body has literal 256",
            ]
        "#]]
        .assert_debug_eq(&labels(&out));
        let out = cuda(BOUNDED, "k", "block_size", json!({"sizes_1d": [1024, 256]}));
        expect!["no block shape to try for `k`: every listed shape is the current one or over 256 threads"]
            .assert_eq(&not_applicable(out));
    }

    /// A shift count equal to the block's height (the 16 of `1 << 16`) is not a hard-coded
    /// block size; a literal 16 elsewhere is.
    #[test]
    fn a_shift_count_is_not_a_hard_coded_block_size() {
        let src = |body: &str| {
            format!("// @bench m = 300; n = 1000\n// @bench x: in f32[m, n]\n// @bench grid = (cdiv(n, 32), cdiv(m, 16)); block = (32, 16)\n__global__ void k(float* x, int m, int n) {{\n    int c = blockIdx.x * blockDim.x + threadIdx.x;\n    int r = blockIdx.y * blockDim.y + threadIdx.y;\n    int i = r * n + c;\n    {body}\n}}\n")
        };
        let shift = src("if (r < m && c < n) x[i] = x[i] * (1 << 16);");
        let out = cuda(&shift, "k", "block_size", json!({})).unwrap();
        assert!(
            labels(&out).iter().all(|l| !l.contains("literal")),
            "{:?}",
            labels(&out)
        );
        let tile = src("if (r < m && c < n) x[i] = x[i] * 16;");
        let out = cuda(&tile, "k", "block_size", json!({})).unwrap();
        assert!(
            labels(&out)
                .iter()
                .all(|l| l.ends_with("; body has literal 16")),
            "{:?}",
            labels(&out)
        );
    }

    #[test]
    fn block_size_drops_shapes_whose_grid_it_cannot_rescale() {
        let src = BOUNDED.replace("grid = cdiv(n, 256)", "grid = sms * 4");
        expect!["no usable candidate for `k`: block=64: grid x `sms * 4` has no `cdiv(X, 256)` or `(X + 256 - 1) / 256` to rescale; block=128: grid x `sms * 4` has no `cdiv(X, 256)` or `(X + 256 - 1) / 256` to rescale"]
            .assert_eq(&not_applicable(cuda(&src, "k", "block_size", json!({}))));
        let bad = cuda(SAXPY, "saxpy", "block_size", json!({"shapes_2d": [[32]]}));
        expect!["parameter `shapes_2d`: expected a list of [x, y] pairs of positive integers, found `[[32]]`"]
            .assert_eq(&bad.unwrap_err().to_string());
        let huge = cuda(
            MATMUL,
            "matmul",
            "block_size",
            json!({"shapes_2d": [[1u64 << 40, 1u64 << 40], [32, 8]]}),
        );
        assert_eq!(
            labels(&huge.unwrap()),
            ["block=(32, 8)"],
            "oversized shapes are skipped"
        );
        let bad = cuda(SAXPY, "saxpy", "block_size", json!({"sizes_1d": "big"}));
        expect![
            r#"parameter `sizes_1d`: expected a non-empty list of integers >= 1, found `"big"`"#
        ]
        .assert_eq(&bad.unwrap_err().to_string());
    }
}
