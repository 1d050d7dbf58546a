//! `triton_num_warps` and `triton_num_stages`: the spec's `num_warps = V` / `num_stages =
//! V`, an edit of the kernel's `@bench` lines only. A value the spec already sweeps with a
//! `tune` line of several values is left to `tunable_sweep`. The current value, when the
//! spec sets none, is what Triton's NVIDIA backend uses by default (4 and 3,
//! `CUDAOptions` in triton/backends/nvidia/compiler.py; the worker passes neither then).

use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::params::Params;
use super::{RewriteContext, RewriteError};
use crate::optimize::edit;
use crate::spec::{Launch, TunableKind};
use crate::syntax::Lang;

/// Triton's defaults when the launch sets none.
pub(super) const DEFAULT_NUM_WARPS: u64 = 4;

pub(super) const DEFAULT_NUM_STAGES: u64 = 3;

/// `num_warps = V` for V in param `values` (default [1, 2, 4, 8, 16]), powers of two.
pub fn num_warps(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Triton, "triton_num_warps")?;
    let values = Params(cx.params).ints("values", &[1, 2, 4, 8, 16], 1..=i64::MAX)?;
    if let Some(v) = values.iter().find(|v| !(**v as u64).is_power_of_two()) {
        return Err(RewriteError::BadParam {
            name: "values".into(),
            message: format!("num_warps must be a power of two; {v} is not"),
        });
    }
    launch_option(cx, "num_warps", TunableKind::NumWarps, &values)
}

/// `num_stages = V` for V in param `values` (default [1, 2, 3, 4, 5]).
pub fn num_stages(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Triton, "triton_num_stages")?;
    let values = Params(cx.params).ints("values", &[1, 2, 3, 4, 5], 1..=i64::MAX)?;
    launch_option(cx, "num_stages", TunableKind::NumStages, &values)
}

fn launch_option(cx: &RewriteContext<'_>, name: &str, kind: TunableKind, values: &[i64]) -> R {
    let plan = current_plan(cx)?;
    if plan
        .tunables
        .iter()
        .any(|t| t.kind == kind && t.values.len() > 1)
    {
        return Err(not_applicable(format!(
            "`{}` has a `tune {name} in [...]` line: covered by tunable_sweep",
            cx.kernel.name
        )));
    }
    let current = match plan.cases.first().map(|c| &c.launch) {
        Some(Launch::Triton {
            num_warps,
            num_stages,
            ..
        }) => match kind {
            TunableKind::NumWarps => num_warps.unwrap_or(DEFAULT_NUM_WARPS),
            _ => num_stages.unwrap_or(DEFAULT_NUM_STAGES),
        },
        _ => match kind {
            TunableKind::NumWarps => DEFAULT_NUM_WARPS,
            _ => DEFAULT_NUM_STAGES,
        },
    };
    let drafts: Vec<Draft> = values
        .iter()
        .filter(|v| **v as u64 != current)
        .map(|v| Draft {
            label: format!("{name}={v}"),
            text: edit::set_spec_value(cx.text, cx.kernel, name, &v.to_string()),
        })
        .collect();
    if drafts.is_empty() {
        return Err(not_applicable(format!(
            "`{name}` is already {current}, the only value listed"
        )));
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

    #[test]
    fn num_warps_sweeps_around_the_current_value() {
        let out = run(
            Lang::Triton,
            VECTOR_ADD,
            "add_kernel",
            "triton_num_warps",
            json!({}),
        )
        .unwrap();
        assert_eq!(
            labels(&out),
            ["num_warps=1", "num_warps=2", "num_warps=8", "num_warps=16"]
        );
        assert!(out[2]
            .text
            .contains("# @bench grid = cdiv(n, BLOCK); BLOCK = 64; num_warps = 8\n"));
        let tuned = run(
            Lang::Triton,
            SOFTMAX,
            "softmax_kernel",
            "triton_num_warps",
            json!({}),
        );
        expect!["`softmax_kernel` has a `tune num_warps in [...]` line: covered by tunable_sweep"]
            .assert_eq(&not_applicable(tuned));
        let bad = run(
            Lang::Triton,
            VECTOR_ADD,
            "add_kernel",
            "triton_num_warps",
            json!({"values": [3]}),
        );
        expect!["parameter `values`: num_warps must be a power of two; 3 is not"]
            .assert_eq(&bad.unwrap_err().to_string());
        let only = run(
            Lang::Triton,
            VECTOR_ADD,
            "add_kernel",
            "triton_num_warps",
            json!({"values": [4]}),
        );
        expect!["`num_warps` is already 4, the only value listed"].assert_eq(&not_applicable(only));
        expect!["`triton_num_warps` rewrites Triton kernels; `saxpy` is a CUDA kernel"].assert_eq(
            &not_applicable(run(
                Lang::Cuda,
                SAXPY,
                "saxpy",
                "triton_num_warps",
                json!({}),
            )),
        );
    }

    #[test]
    fn num_stages_defaults_to_tritons_3_and_adds_a_spec_line() {
        let out = run(
            Lang::Triton,
            VECTOR_ADD,
            "add_kernel",
            "triton_num_stages",
            json!({}),
        )
        .unwrap();
        assert_eq!(
            labels(&out),
            [
                "num_stages=1",
                "num_stages=2",
                "num_stages=4",
                "num_stages=5"
            ]
        );
        expect![[r#"
            # @bench n = 1 << 24, 1000
            # @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]
            # @bench grid = cdiv(n, BLOCK); BLOCK = 64; num_warps = 4
            # @bench tune BLOCK in [64, 256, 1024, 2048]
            # @bench num_stages = 1
            @triton.jit
            def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
                pid = tl.program_id(axis=0)
                offs = pid * BLOCK + tl.arange(0, BLOCK)
                mask = offs < n
                x = tl.load(x_ptr + offs, mask=mask)
                y = tl.load(y_ptr + offs, mask=mask)
                tl.store(out_ptr + offs, x + y, mask=mask)"#]]
        .assert_eq(&show(Lang::Triton, VECTOR_ADD, &out[0], "add_kernel"));
    }
}
