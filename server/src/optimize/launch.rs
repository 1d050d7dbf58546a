//! The launch is part of a candidate (issue #12): a coder may change how a kernel is
//! launched, never what it is verified on. [`launch_only`] compares the evaluated plans
//! of the current version and a candidate: the launch (CUDA grid, block, dynamic shared
//! memory; Triton grid, num_warps, num_stages), Triton constexpr values, CUDA template
//! arguments and the tunables may differ; the cases, buffers (names, roles, types,
//! shapes, distributions), scalar arguments, tolerances, reference, trials and the
//! roofline's bytes and flops may not. Pure.

use crate::spec::{Arg, BenchPlan};

/// `Ok` when `new` differs from `old` only in its launch. `Err` says what else changed,
/// and names the reply's spec lines that are not the current version's (`new_lines`,
/// `old_lines`: the `@bench` statements after the marker).
pub fn launch_only(
    old: &BenchPlan,
    new: &BenchPlan,
    old_lines: &[String],
    new_lines: &[String],
) -> Result<(), String> {
    let Some(what) = first_difference(old, new) else {
        return Ok(());
    };
    let changed: Vec<String> = new_lines
        .iter()
        .filter(|l| !old_lines.iter().any(|o| squash(o) == squash(l)))
        .map(|l| format!("`{}`", l.trim()))
        .collect();
    let lines = match changed.as_slice() {
        [] => String::new(),
        [one] => format!(" (changed spec line {one})"),
        many => format!(" (changed spec lines {})", many.join(", ")),
    };
    Err(format!(
        "the reply's @bench lines change {what}{lines}; only the launch may change (CUDA grid, block, smem; Triton grid, constexpr values, num_warps, num_stages; tune lists): copy every other spec line as it is"
    ))
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What differs beyond the launch, in words, or None.
fn first_difference(old: &BenchPlan, new: &BenchPlan) -> Option<String> {
    if old.cases.len() != new.cases.len() {
        return Some(format!(
            "the number of cases ({} instead of {})",
            new.cases.len(),
            old.cases.len()
        ));
    }
    if old.atol != new.atol || old.rtol != new.rtol {
        return Some("the tolerance".into());
    }
    if old.reference != new.reference {
        return Some("the reference".into());
    }
    if old.trials != new.trials {
        return Some(format!(
            "`trials` ({} instead of {})",
            new.trials, old.trials
        ));
    }
    for (ci, (a, b)) in old.cases.iter().zip(&new.cases).enumerate() {
        let fixed = |c: &crate::spec::Case| -> Vec<Arg> {
            c.args
                .iter()
                .filter(|a| !matches!(a, Arg::Constexpr { .. }))
                .cloned()
                .collect()
        };
        let (fa, fb) = (fixed(a), fixed(b));
        if fa.len() != fb.len() {
            return Some(format!("the kernel's arguments in case {ci}"));
        }
        for (x, y) in fa.iter().zip(&fb) {
            if x != y {
                return Some(match (x, y) {
                    (
                        Arg::Buffer {
                            name,
                            dtype,
                            shape,
                            role,
                            ..
                        },
                        Arg::Buffer {
                            dtype: d2,
                            shape: s2,
                            role: r2,
                            ..
                        },
                    ) if (dtype, shape, role) != (d2, s2, r2) => format!(
                        "buffer `{name}` in case {ci} ({r2} {d2}{s2:?} instead of {role} {dtype}{shape:?})"
                    ),
                    (Arg::Buffer { name, .. }, _) => {
                        format!("buffer `{name}` in case {ci} (its distribution)")
                    }
                    (Arg::Scalar { name, value, .. }, Arg::Scalar { value: v2, .. }) => {
                        format!("`{name}` in case {ci} ({v2} instead of {value})")
                    }
                    _ => format!("the argument `{}` in case {ci}", x.name()),
                });
            }
        }
        if a.bytes != b.bytes || a.flops != b.flops {
            return Some(format!("`bytes` or `flops` in case {ci}"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::Document;
    use crate::spec::EvalEnv;
    use crate::syntax::{self, Lang};

    fn plan(lang: Lang, src: &str) -> (BenchPlan, Vec<String>) {
        let doc = Document::new(lang, 0, src);
        let model = syntax::analyze(lang, src, doc.tree().expect("parses"));
        let k = &model.kernels[0];
        let r = crate::spec::analyze(k, &model.kernels, &EvalEnv::default());
        let lines = k
            .spec
            .lines
            .iter()
            .map(|l| l.text.trim().to_string())
            .collect();
        (
            r.plan.unwrap_or_else(|| panic!("{:?}", r.diagnostics)),
            lines,
        )
    }

    const CUDA: &str = "// @bench n = 1 << 20, 4099\n// @bench x: in f32[n]; y: out f32[n]\n// @bench grid = cdiv(n, 256); block = 256\nextern \"C\" __global__ void k(int n, const float* x, float* y) { }\n";

    fn check(lang: Lang, old: &str, new: &str) -> Result<(), String> {
        let (a, la) = plan(lang, old);
        let (b, lb) = plan(lang, new);
        launch_only(&a, &b, &la, &lb)
    }

    #[test]
    fn a_new_grid_block_and_smem_is_a_launch_change() {
        let new = CUDA.replace(
            "grid = cdiv(n, 256); block = 256",
            "grid = cdiv(n, 32 * 8); block = (32, 8); smem = 1024",
        );
        assert_eq!(check(Lang::Cuda, CUDA, &new), Ok(()));
        // A helper size used only by the launch is fine too.
        let new = CUDA.replace(
            "grid = cdiv(n, 256); block = 256",
            "ROWS = 4; grid = cdiv(n, 128 * ROWS); block = 128",
        );
        assert_eq!(check(Lang::Cuda, CUDA, &new), Ok(()));
    }

    #[test]
    fn a_changed_size_dtype_or_distribution_is_refused_naming_the_line() {
        let new = CUDA.replace("n = 1 << 20, 4099", "n = 1 << 16, 4099");
        let e = check(Lang::Cuda, CUDA, &new).unwrap_err();
        assert!(
            e.starts_with("the reply's @bench lines change `n` in case 0 (65536 instead of 1048576) (changed spec line `n = 1 << 16, 4099`)"),
            "{e}"
        );
        let new = CUDA.replace("x: in f32[n]", "x: in f32[n] ~ zeros");
        let e = check(Lang::Cuda, CUDA, &new).unwrap_err();
        assert!(e.contains("buffer `x` in case 0 (its distribution)"), "{e}");
        let new = CUDA.replace("n = 1 << 20, 4099", "n = 1 << 20");
        let e = check(Lang::Cuda, CUDA, &new).unwrap_err();
        assert!(e.contains("the number of cases (1 instead of 2)"), "{e}");
        let new = CUDA.replace("block = 256", "block = 256; rtol = 0.1");
        let e = check(Lang::Cuda, CUDA, &new).unwrap_err();
        assert!(e.contains("change the tolerance"), "{e}");
    }

    const TRITON: &str = "import triton\nimport triton.language as tl\n\n# @bench M = 512; N = 512; K = 512\n# @bench a: in f16[M, K]; b: in f16[K, N]; c: out f16[M, N]\n# @bench grid = (cdiv(M, BM), cdiv(N, BN)); BM = 64; BN = 64; num_warps = 4\n@triton.jit\ndef mm(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr):\n    pass\n";

    #[test]
    fn triton_constexprs_warps_stages_and_new_constexpr_parameters_may_change() {
        let new = TRITON
            .replace(
                "BM = 64; BN = 64; num_warps = 4",
                "BM = 128; BN = 128; BK = 32; num_warps = 8; num_stages = 3",
            )
            .replace("BN: tl.constexpr):", "BN: tl.constexpr, BK: tl.constexpr):");
        assert_eq!(check(Lang::Triton, TRITON, &new), Ok(()));
        let new = TRITON.replace("M = 512;", "M = 1024;");
        let e = check(Lang::Triton, TRITON, &new).unwrap_err();
        assert!(e.contains("buffer `a` in case 0"), "{e}");
        assert!(
            e.contains("(changed spec line `M = 1024; N = 512; K = 512`)"),
            "{e}"
        );
    }
}
