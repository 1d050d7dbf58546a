//! `tunable_sweep`: for every `tune NAME in [...]` line with several values, one
//! candidate per value other than the current one, written as `NAME = V` in the spec (the
//! value of an existing `NAME = ...` statement, else a new `@bench` line). Param `name`
//! limits the sweep to one tunable. Both languages; the code does not change. Where the
//! tunable sets the CUDA block and the grid is capped at `sms * K` blocks (a grid-stride
//! rewrite's launch), each value also gets a candidate with K rescaled so the threads
//! resident per multiprocessor stay as they were: the block and its cap are one knob.

use super::check::{current_plan, finish, not_applicable, Draft, R};
use super::params::Params;
use super::spec_expr::{literal_dims, rescale_cap, words};
use super::RewriteContext;
use crate::optimize::edit;

/// For every `tune NAME in [...]` with several values, one candidate per value other than
/// the current one, written as `NAME = V` in the spec. Param `name` (optional) limits the
/// sweep to one tunable.
pub fn tunable_sweep(cx: &RewriteContext<'_>) -> R {
    let plan = current_plan(cx)?;
    let only = Params(cx.params).string("name")?;
    let tunables: Vec<_> = plan
        .tunables
        .iter()
        .filter(|t| t.values.len() > 1)
        .filter(|t| only.as_ref().is_none_or(|n| *n == t.name))
        .collect();
    if tunables.is_empty() {
        return Err(not_applicable(match only {
            Some(n) => format!(
                "`{}` has no `tune {n} in [...]` line with several values",
                cx.kernel.name
            ),
            None => format!(
                "`{}` has no `tune NAME in [...]` line with several values",
                cx.kernel.name
            ),
        }));
    }
    let mut drafts = Vec::new();
    for t in tunables {
        for v in t.values.iter().filter(|v| **v != t.current) {
            let text = edit::set_spec_value(cx.text, cx.kernel, &t.name, &v.to_string());
            let capped = cap_kept(cx, &t.name, &t.current.to_string(), &v.to_string(), &text);
            drafts.push(Draft {
                label: format!("{}={v}", t.name),
                text,
            });
            drafts.extend(capped);
        }
    }
    finish(cx, drafts, Vec::new())
}

/// `swept` (the spec with `name = new`) with the grid's `sms * K` cap rescaled so the
/// threads resident per multiprocessor stay as they were with `name = old`, when the
/// block is made of `name` alone and the grid has such a cap.
fn cap_kept(
    cx: &RewriteContext<'_>,
    name: &str,
    old: &str,
    new: &str,
    swept: &str,
) -> Option<Draft> {
    let block = edit::spec_assignment(cx.kernel, "block")?;
    if words(&block.text).into_iter().ne([name]) {
        return None;
    }
    let threads = |v: &str| {
        let dims = literal_dims(&block.text.replace(name, v))?;
        Some(dims.iter().product::<u64>())
    };
    let grid = edit::spec_assignment(cx.kernel, "grid")?;
    let (new_grid, k) = rescale_cap(&grid.text, threads(old)?, threads(new)?)?;
    // The sweep's own edit is one statement: the grid moved by its length change if it
    // came before the grid.
    let shift = swept.len() as isize - cx.text.len() as isize;
    let moved = |r: &std::ops::Range<usize>, by: isize| {
        (r.start as isize + by) as usize..(r.end as isize + by) as usize
    };
    let at = [moved(&grid.range, 0), moved(&grid.range, shift)]
        .into_iter()
        .find(|r| swept.get(r.clone()) == Some(grid.text.as_str()))?;
    Some(Draft {
        label: format!("{name}={new}, grid <= {k} * sms"),
        text: edit::replace_ranges(swept, vec![(at, new_grid)]),
    })
}

#[cfg(test)]
mod tests {
    use expect_test::expect;
    use serde_json::json;

    use super::super::check::testing::{cuda, labels, not_applicable, run, show};
    use crate::syntax::Lang;

    const SAXPY: &str = include_str!("../../../../examples/saxpy.cu");
    const REDUCE: &str = include_str!("../../../../examples/reduce_sum.cu");
    const VECTOR_ADD: &str = include_str!("../../../../examples/vector_add.py");
    const SOFTMAX: &str = include_str!("../../../../examples/softmax.py");

    #[test]
    fn tunable_sweep_writes_each_other_value_into_the_spec() {
        let out = cuda(REDUCE, "reduce_tree", "tunable_sweep", json!({})).unwrap();
        assert_eq!(
            labels(&out),
            ["BLOCK=256", "BLOCK=512"],
            "128 is current (first listed)"
        );
        expect![[r#"
            // @bench n = 1 << 22, 1000
            // @bench x: in f16[n] ~ uniform(0, 1); out: inout f32[1] ~ zeros
            // @bench tune BLOCK in [128, 256, 512]
            // @bench grid = cdiv(n, BLOCK); block = BLOCK; smem = BLOCK * 4
            // @bench atol = 1e-1; rtol = 1e-3
            // @bench reference = reduce_naive
            // @bench BLOCK = 512
            extern "C" __global__ void __launch_bounds__(BLOCK) reduce_tree(int n, const __half* x, float* out) {
                extern __shared__ float buf[];
                int i = blockIdx.x * BLOCK + threadIdx.x;
                buf[threadIdx.x] = i < n ? load_as_float(x, i) : 0.0f;
                __syncthreads();
                for (int s = BLOCK / 2; s > 0; s >>= 1) {
                    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
                    __syncthreads();
                }
                if (threadIdx.x == 0) atomicAdd(out, buf[0]);
            }"#]]
        .assert_eq(&show(Lang::Cuda, REDUCE, &out[1], "reduce_tree"));
    }

    #[test]
    fn a_block_tunable_with_a_capped_grid_also_keeps_the_threads_per_multiprocessor() {
        let capped = REDUCE.replace(
            "grid = cdiv(n, BLOCK)",
            "grid = min(cdiv(n, BLOCK), sms * 16)",
        );
        let out = cuda(&capped, "reduce_tree", "tunable_sweep", json!({})).unwrap();
        assert_eq!(
            labels(&out),
            [
                "BLOCK=256",
                "BLOCK=256, grid <= 8 * sms",
                "BLOCK=512",
                "BLOCK=512, grid <= 4 * sms"
            ]
        );
        let spec: Vec<&str> = out[3]
            .text
            .lines()
            .filter(|l| l.contains("@bench"))
            .collect();
        assert!(
            spec.contains(
                &"// @bench grid = min(cdiv(n, BLOCK), sms * 4); block = BLOCK; smem = BLOCK * 4"
            ),
            "{spec:#?}"
        );
        assert!(spec.contains(&"// @bench BLOCK = 512"), "{spec:#?}");
        // With `BLOCK = 512` already written before the grid line, the grid moves with it.
        let set = capped.replace(
            "// @bench tune BLOCK in [128, 256, 512]",
            "// @bench tune BLOCK in [128, 256, 512]; BLOCK = 512",
        );
        let out = cuda(&set, "reduce_tree", "tunable_sweep", json!({})).unwrap();
        assert_eq!(
            labels(&out),
            [
                "BLOCK=128",
                "BLOCK=128, grid <= 64 * sms",
                "BLOCK=256",
                "BLOCK=256, grid <= 32 * sms"
            ]
        );
        assert!(out[1]
            .text
            .contains("BLOCK = 128\n// @bench grid = min(cdiv(n, BLOCK), sms * 64);"));
        // A cap that would not be a whole number of blocks gets no such candidate.
        let one = REDUCE.replace("grid = cdiv(n, BLOCK)", "grid = min(cdiv(n, BLOCK), sms)");
        let out = cuda(&one, "reduce_tree", "tunable_sweep", json!({})).unwrap();
        assert_eq!(labels(&out), ["BLOCK=256", "BLOCK=512"]);
    }

    #[test]
    fn tunable_sweep_on_triton_replaces_the_current_value() {
        let out = run(
            Lang::Triton,
            VECTOR_ADD,
            "add_kernel",
            "tunable_sweep",
            json!({}),
        )
        .unwrap();
        assert_eq!(labels(&out), ["BLOCK=256", "BLOCK=1024", "BLOCK=2048"]);
        assert!(out[0]
            .text
            .contains("# @bench grid = cdiv(n, BLOCK); BLOCK = 256; num_warps = 4\n"));
        let out = run(
            Lang::Triton,
            SOFTMAX,
            "softmax_kernel",
            "tunable_sweep",
            json!({}),
        )
        .unwrap();
        assert_eq!(labels(&out), ["num_warps=2", "num_warps=8"]);
        let only = run(
            Lang::Triton,
            SOFTMAX,
            "softmax_kernel",
            "tunable_sweep",
            json!({"name": "BLOCK"}),
        );
        expect!["`softmax_kernel` has no `tune BLOCK in [...]` line with several values"]
            .assert_eq(&not_applicable(only));
    }

    #[test]
    fn tunable_sweep_without_tunables_or_with_bad_params() {
        expect!["`saxpy` has no `tune NAME in [...]` line with several values"].assert_eq(
            &not_applicable(cuda(SAXPY, "saxpy", "tunable_sweep", json!({}))),
        );
        let bad = cuda(REDUCE, "reduce_tree", "tunable_sweep", json!({"name": 3}));
        expect!["parameter `name`: expected a string, found `3`"]
            .assert_eq(&bad.unwrap_err().to_string());
        let no_spec = "__global__ void k(int n, float* y) { y[0] = 1; }\n";
        expect![[r#"`k` has no @bench spec; add one (code action "Insert @bench spec") first"#]]
            .assert_eq(&not_applicable(cuda(
                no_spec,
                "k",
                "tunable_sweep",
                json!({}),
            )));
    }
}
