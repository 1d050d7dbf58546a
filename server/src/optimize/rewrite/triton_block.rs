//! `triton_block`: the `tl.constexpr` block sizes the spec sets as power-of-two literals
//! (`BLOCK = 1024`), scaled by each of param `factors` (default [0.25, 0.5, 2, 4]) that
//! lands on a power of two in [16, 16384]; an edit of the kernel's `@bench` lines only. A
//! value the spec already sweeps with a `tune` line of several values is left to
//! `tunable_sweep`, and a problem size (a constexpr whose doubling changes a buffer's
//! shape, such as a head dimension) is not a block size and is left alone.

use super::check::{current_plan, finish, not_applicable, require_lang, sizes_a_buffer, Draft, R};
use super::params::Params;
use super::RewriteContext;
use crate::optimize::edit;
use crate::syntax::{Lang, ParamKind};

/// Block sizes outside this range are not tried.
const MIN_BLOCK: i64 = 16;

const MAX_BLOCK: i64 = 16384;

/// For each `tl.constexpr` parameter set in the spec as a power-of-two literal and not
/// tuned: V times each of param `factors` (default [0.25, 0.5, 2, 4]) that is a power
/// of two within [16, 16384].
pub fn block(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Triton, "triton_block")?;
    let plan = current_plan(cx)?;
    let factors = Params(cx.params).positive_numbers("factors", &[0.25, 0.5, 2.0, 4.0])?;
    let k = &cx.kernel.name;
    let mut drafts = Vec::new();
    let mut reasons = Vec::new();
    for p in cx
        .kernel
        .params
        .iter()
        .filter(|p| matches!(p.kind, ParamKind::Constexpr))
    {
        let name = &p.name;
        if plan
            .tunables
            .iter()
            .any(|t| t.name == *name && t.values.len() > 1)
        {
            reasons.push(format!(
                "`{name}` has a `tune {name} in [...]` line: covered by tunable_sweep"
            ));
            continue;
        }
        let Some(stmt) = edit::spec_assignment(cx.kernel, name) else {
            reasons.push(format!("`{name}` has no `{name} = V` statement"));
            continue;
        };
        let Some(v) = stmt.text.parse::<i64>().ok().filter(|v| *v > 0) else {
            reasons.push(format!(
                "`{name} = {}` is not an integer literal; triton_block changes literal values only",
                stmt.text
            ));
            continue;
        };
        if !(v as u64).is_power_of_two() {
            reasons.push(format!("`{name} = {v}` is not a power of two"));
            continue;
        }
        if let Some(why) = sizes_a_buffer(cx, &plan, name, v) {
            reasons.push(why);
            continue;
        }
        let mut any = false;
        for f in &factors {
            let scaled = v as f64 * f;
            if scaled.fract() != 0.0 || !(MIN_BLOCK as f64..=MAX_BLOCK as f64).contains(&scaled) {
                continue;
            }
            let new = scaled as i64;
            if new == v || !(new as u64).is_power_of_two() {
                continue;
            }
            any = true;
            drafts.push(Draft {
                label: format!("{name}={new}"),
                text: edit::set_spec_value(cx.text, cx.kernel, name, &new.to_string()),
            });
        }
        if !any {
            reasons.push(format!(
                "no factor takes `{name} = {v}` to another power of two in [{MIN_BLOCK}, {MAX_BLOCK}]"
            ));
        }
    }
    if drafts.is_empty() {
        return Err(not_applicable(if reasons.is_empty() {
            format!("`{k}` has no `tl.constexpr` parameter")
        } else {
            reasons.join("; ")
        }));
    }
    finish(cx, drafts, Vec::new())
}

#[cfg(test)]
mod tests {
    use expect_test::expect;
    use serde_json::json;

    use super::super::check::testing::{labels, not_applicable, run, show};
    use crate::syntax::Lang;

    const VECTOR_ADD: &str = include_str!("../../../../examples/vector_add.py");
    const SOFTMAX: &str = include_str!("../../../../examples/softmax.py");
    const SAXPY: &str = include_str!("../../../../examples/saxpy.cu");

    fn untuned() -> String {
        VECTOR_ADD.replace("# @bench tune BLOCK in [64, 256, 1024, 2048]\n", "")
    }

    #[test]
    fn block_scales_a_literal_power_of_two() {
        let src = untuned();
        let out = run(Lang::Triton, &src, "add_kernel", "triton_block", json!({})).unwrap();
        assert_eq!(
            labels(&out),
            ["BLOCK=16", "BLOCK=32", "BLOCK=128", "BLOCK=256"]
        );
        expect![[r#"
            # @bench n = 1 << 24, 1000
            # @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]
            # @bench grid = cdiv(n, BLOCK); BLOCK = 256; num_warps = 4
            @triton.jit
            def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
                pid = tl.program_id(axis=0)
                offs = pid * BLOCK + tl.arange(0, BLOCK)
                mask = offs < n
                x = tl.load(x_ptr + offs, mask=mask)
                y = tl.load(y_ptr + offs, mask=mask)
                tl.store(out_ptr + offs, x + y, mask=mask)"#]]
        .assert_eq(&show(Lang::Triton, &src, &out[3], "add_kernel"));
        let big = src.replace("BLOCK = 64", "BLOCK = 8192");
        let out = run(
            Lang::Triton,
            &big,
            "add_kernel",
            "triton_block",
            json!({"factors": [0.5, 2, 4]}),
        )
        .unwrap();
        assert_eq!(
            labels(&out),
            ["BLOCK=4096", "BLOCK=16384"],
            "32768 is past the cap"
        );
    }

    #[test]
    fn block_leaves_tuned_and_computed_values_alone() {
        let tuned = run(
            Lang::Triton,
            VECTOR_ADD,
            "add_kernel",
            "triton_block",
            json!({}),
        );
        expect!["`BLOCK` has a `tune BLOCK in [...]` line: covered by tunable_sweep"]
            .assert_eq(&not_applicable(tuned));
        let computed = run(
            Lang::Triton,
            SOFTMAX,
            "softmax_kernel",
            "triton_block",
            json!({}),
        );
        expect!["`BLOCK = next_pow2(cols)` is not an integer literal; triton_block changes literal values only"]
            .assert_eq(&not_applicable(computed));
        let odd = untuned().replace("BLOCK = 64", "BLOCK = 96");
        expect!["`BLOCK = 96` is not a power of two"].assert_eq(&not_applicable(run(
            Lang::Triton,
            &odd,
            "add_kernel",
            "triton_block",
            json!({}),
        )));
        let bad = run(
            Lang::Triton,
            &untuned(),
            "add_kernel",
            "triton_block",
            json!({"factors": [-2]}),
        );
        expect!["parameter `factors`: expected a list of positive numbers, found `-2`"]
            .assert_eq(&bad.unwrap_err().to_string());
        expect!["`triton_block` rewrites Triton kernels; `saxpy` is a CUDA kernel"].assert_eq(
            &not_applicable(run(Lang::Cuda, SAXPY, "saxpy", "triton_block", json!({}))),
        );
    }

    /// The head dimension the buffers' shapes read is refused with its reason; the
    /// tiles beside it are scaled.
    #[test]
    fn block_leaves_a_problem_size_alone() {
        let src = include_str!("../../../../tests/fixtures/rewrites/triton/problem_sizes.py");
        let out = run(Lang::Triton, src, "scores", "triton_block", json!({})).unwrap();
        expect![[r#"["BM=16", "BM=32", "BM=128", "BM=256", "BN=16", "BN=64", "BN=128"]"#]]
            .assert_eq(&format!("{:?}", labels(&out)));
        let why = not_applicable(run(
            Lang::Triton,
            src,
            "row_copy",
            "triton_block",
            json!({}),
        ));
        expect!["`W` is a problem size, not a block size: the shape of `x` changes with it"]
            .assert_eq(&why);
    }
}
