//! `launch_bounds`: `__launch_bounds__(T[, M])` between the return type and the kernel's
//! name, where NVRTC and tree-sitter-cuda both accept it. T is the largest block the spec
//! launches over every case and tunable value. A kernel with a register cap gets none:
//! NVRTC rejects the two on one kernel.

use std::collections::BTreeMap;

use super::edits::Edit;
use super::maxnreg::has_maxnreg;
use super::params::Params;
use super::unit::*;
use super::{RewriteContext, RewriteError};
use crate::spec::{self, EvalEnv, Launch, TunableKind, Value};
use crate::syntax::{self};

/// `__launch_bounds__(T)` and `__launch_bounds__(T, M)` for each `min_blocks` value M
/// (default `[1, 2, 4]`; M = 1 gives the one-argument form; M with T·M > 2048 is
/// skipped). T is the largest block the spec launches over every case and every value
/// of the tunables the block may depend on; when the block is always exactly a `-D` or
/// template tunable, T is written as that name (`__launch_bounds__(BLOCK)`), which stays
/// right whichever value a later sweep picks. A kernel that already has
/// `__launch_bounds__(E[, M0])` keeps E as written and gets the other M values.
pub fn launch_bounds(cx: &RewriteContext<'_>) -> R {
    let unit = Unit::of(cx, "launch_bounds")?;
    if let Some(why) = has_maxnreg(cx, unit.kernel) {
        return Err(na(format!(
            "`{}` has {why}; NVRTC rejects `__launch_bounds__` together with it",
            cx.kernel.name
        )));
    }
    let min_blocks = Params(cx.params).uints("min_blocks", &[1, 2, 4], 1..=32)?;
    let threads = threads_per_block(cx)?;
    let existing = named_children(unit.kernel)
        .into_iter()
        .find(|c| c.kind() == "launch_bounds");
    let (first, check_t, at) = match existing {
        Some(lb) => {
            let args = named_children(lb);
            let Some(e) = args.first() else {
                return Err(na(format!(
                    "`{}` has a `__launch_bounds__` without arguments",
                    cx.kernel.name
                )));
            };
            let written = text(cx, *e).to_string();
            let t = int_literal(&written).unwrap_or(threads.max);
            (written, t, lb.byte_range())
        }
        None => {
            let at = unit.attribute_point(cx)?;
            (threads.expr(), threads.max, at..at)
        }
    };
    let existing_text = existing.map(|lb| squeeze(text(cx, lb)));
    let mut out = Vec::new();
    let mut too_many = Vec::new();
    for m in min_blocks {
        if check_t.saturating_mul(m) > 2048 {
            too_many.push(m);
            continue;
        }
        let attr = if m == 1 {
            format!("__launch_bounds__({first})")
        } else {
            format!("__launch_bounds__({first}, {m})")
        };
        if existing_text.as_deref() == Some(squeeze(&attr).as_str()) {
            continue;
        }
        let insert = if existing.is_some() {
            attr.clone()
        } else {
            format!("{attr} ")
        };
        let label = match &threads.note {
            Some(note) if existing.is_none() => format!("{attr} ({note})"),
            _ => attr,
        };
        out.push(finish(
            cx,
            "launch_bounds",
            label,
            vec![Edit::replace(at.clone(), insert)],
        )?);
    }
    if out.is_empty() {
        let mut why = format!(
            "no `min_blocks` value gives a new `__launch_bounds__` for `{}` ({} threads per block)",
            cx.kernel.name, check_t
        );
        if !too_many.is_empty() {
            why.push_str(&format!(
                "; {} would need more than 2048 threads per multiprocessor",
                join_nums(&too_many)
            ));
        }
        if let Some(lb) = existing {
            why.push_str(&format!("; it already has `{}`", text(cx, lb)));
        }
        return Err(na(why));
    }
    Ok(out)
}

/// Threads per block as the spec launches it.
pub(super) struct Threads {
    /// The largest block (x·y·z) over every case and tunable value.
    pub(super) max: u64,
    /// The tunable the block always equals, if any.
    symbol: Option<String>,
    /// For the label: how `max` was found when tunables were involved.
    note: Option<String>,
}

impl Threads {
    pub(super) fn expr(&self) -> String {
        self.symbol.clone().unwrap_or_else(|| self.max.to_string())
    }
}

/// At most this many tunable combinations are evaluated for the block size.
pub(super) const MAX_COMBINATIONS: usize = 256;

pub(super) fn threads_per_block(cx: &RewriteContext<'_>) -> Result<Threads, RewriteError> {
    let k = cx.kernel;
    let env = EvalEnv::default();
    let report = spec::analyze(k, &cx.model.kernels, &env);
    let Some(plan) = report.plan else {
        return Err(na(if k.spec.lines.is_empty() {
            format!(
                "`{}` has no @bench spec, so its block size is unknown; add one (the \
                 \"insert spec skeleton\" action writes a start)",
                k.name
            )
        } else {
            format!(
                "the @bench spec of `{}` has errors, so its block size is unknown; fix them first",
                k.name
            )
        }));
    };
    let tunables: Vec<_> = plan
        .tunables
        .iter()
        .filter(|t| matches!(t.kind, TunableKind::Define | TunableKind::TemplateParam))
        .collect();
    let combos: usize = tunables
        .iter()
        .map(|t| t.values.len().max(1))
        .try_fold(1usize, |acc, n| acc.checked_mul(n))
        .unwrap_or(usize::MAX);
    if combos > MAX_COMBINATIONS {
        return Err(na(format!(
            "the tunables of `{}` have {} combinations (more than {MAX_COMBINATIONS}); \
             the largest block size was not worked out",
            k.name,
            if combos == usize::MAX {
                "too many".to_string()
            } else {
                combos.to_string()
            }
        )));
    }
    let block_max = |p: &spec::BenchPlan| {
        p.cases
            .iter()
            .filter_map(|c| match &c.launch {
                Launch::Cuda { block, .. } => Some(block.iter().product::<u64>()),
                Launch::Triton { .. } => None,
            })
            .max()
    };
    if tunables.is_empty() {
        let max = block_max(&plan).ok_or_else(|| no_block(k))?;
        return Threads::checked(k, max, None, None);
    }
    // Every combination: (values, largest block).
    let mut seen: Vec<(Vec<Value>, u64)> = Vec::new();
    for i in 0..combos {
        let mut rest = i;
        let mut overrides = BTreeMap::new();
        let mut values = Vec::new();
        for t in &tunables {
            let n = t.values.len().max(1);
            let v = t.values.get(rest % n).copied().unwrap_or(t.current);
            rest /= n;
            overrides.insert(t.name.clone(), v);
            values.push(v);
        }
        let r = spec::analyze_with(k, &cx.model.kernels, &env, &overrides);
        // A combination the spec rejects can never be launched; it does not bound T.
        if let Some(m) = r.plan.as_ref().and_then(block_max) {
            seen.push((values, m));
        }
    }
    let max = seen.iter().map(|s| s.1).max().ok_or_else(|| no_block(k))?;
    let symbol = tunables.iter().enumerate().find_map(|(i, t)| {
        let tracks = seen
            .iter()
            .all(|(vals, m)| vals.get(i) == Some(&Value::Int(*m as i64)));
        tracks.then(|| t.name.clone())
    });
    let names: Vec<&str> = tunables.iter().map(|t| t.name.as_str()).collect();
    let note = match &symbol {
        Some(_) => None,
        None if seen.iter().all(|s| s.1 == max) => None,
        None => Some(format!("largest block over tune {}", names.join(", "))),
    };
    Threads::checked(k, max, symbol, note)
}

impl Threads {
    fn checked(
        k: &syntax::Kernel,
        max: u64,
        symbol: Option<String>,
        note: Option<String>,
    ) -> Result<Threads, RewriteError> {
        if max == 0 || max > 1024 {
            return Err(na(format!(
                "`{}` launches blocks of {max} threads; `__launch_bounds__` needs 1 to 1024",
                k.name
            )));
        }
        Ok(Threads { max, symbol, note })
    }
}

pub(super) fn no_block(k: &syntax::Kernel) -> RewriteError {
    na(format!(
        "the @bench spec of `{}` gives no CUDA block size (`block = ...`)",
        k.name
    ))
}

#[cfg(test)]
mod tests {

    use expect_test::expect;

    use super::super::unit::testing::*;

    #[test]
    fn launch_bounds_on_the_examples() {
        check(
            "launch_bounds",
            SAXPY,
            "saxpy",
            params(NONE),
            expect![[r###"
            ## __launch_bounds__(256)
            extern "C" __global__ void __launch_bounds__(256) saxpy(int n, float a, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }
            ## __launch_bounds__(256, 2)
            extern "C" __global__ void __launch_bounds__(256, 2) saxpy(int n, float a, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }
            ## __launch_bounds__(256, 4)
            extern "C" __global__ void __launch_bounds__(256, 4) saxpy(int n, float a, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }
        "###]],
        );
        // The block is the tunable BLOCK itself: written by name; 512 * 8 > 2048.
        check(
            "launch_bounds",
            REDUCE,
            "reduce_tree",
            params(r#"{"min_blocks": [1, 8]}"#),
            expect![[r###"
                ## __launch_bounds__(BLOCK)
                __device__ float load_as_float(const __half* p, int i) {
                    return __half2float(p[i]);
                }
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
                }
            "###]],
        );
    }

    #[test]
    fn launch_bounds_takes_the_largest_block_over_tunables() {
        let src = "// @bench n = 4096\n// @bench x: in f32[n]\n// @bench tune BX in [32, 64]\n// @bench grid = cdiv(n, BX * 4); block = (BX, 4)\n__global__ void k(int n, const float* x) {}\n";
        check(
            "launch_bounds",
            src,
            "k",
            params(r#"{"min_blocks": [2]}"#),
            expect![[r#"
            ## __launch_bounds__(256, 2) (largest block over tune BX)
            __global__ void __launch_bounds__(256, 2) k(int n, const float* x) {}
        "#]],
        );
    }

    #[test]
    fn launch_bounds_on_a_template_kernel_names_the_template_parameter() {
        let src = "// @bench n = 4096\n// @bench x: in f32[n]\n// @bench tune TILE in [64, 128]\n// @bench grid = cdiv(n, TILE); block = TILE\ntemplate <int TILE>\n__global__ void\nk(int n, const float* x) {}\n";
        check(
            "launch_bounds",
            src,
            "k",
            params(r#"{"min_blocks": [1]}"#),
            expect![[r#"
            ## __launch_bounds__(TILE)
            template <int TILE>
            __global__ void
            __launch_bounds__(TILE) k(int n, const float* x) {}
        "#]],
        );
    }

    #[test]
    fn launch_bounds_keeps_an_existing_thread_count_and_sweeps_min_blocks() {
        let src = "// @bench n = 4096\n// @bench x: in f32[n]\n// @bench grid = cdiv(n, 128); block = 128\n__global__ void __launch_bounds__( 128 ) k(int n, const float* x) {}\n";
        check(
            "launch_bounds",
            src,
            "k",
            params(NONE),
            expect![[r#"
            ## __launch_bounds__(128, 2)
            __global__ void __launch_bounds__(128, 2) k(int n, const float* x) {}
            ## __launch_bounds__(128, 4)
            __global__ void __launch_bounds__(128, 4) k(int n, const float* x) {}
        "#]],
        );
        check(
            "launch_bounds",
            src,
            "k",
            params(r#"{"min_blocks": [1]}"#),
            expect![[r#"
            error: no `min_blocks` value gives a new `__launch_bounds__` for `k` (128 threads per block); it already has `__launch_bounds__( 128 )`
        "#]],
        );
    }

    #[test]
    fn launch_bounds_not_applicable() {
        let no_spec = "__global__ void k(float* x) {}\n";
        check(
            "launch_bounds",
            no_spec,
            "k",
            params(NONE),
            expect![[r#"
            error: `k` has no @bench spec, so its block size is unknown; add one (the "insert spec skeleton" action writes a start)
        "#]],
        );
        let capped = "// @bench n = 64\n// @bench x: in f32[n]\n// @bench grid = 1; block = 64\n__global__ void __attribute__((maxnreg(32))) k(int n, float* x) {}\n";
        check(
            "launch_bounds",
            capped,
            "k",
            params(NONE),
            expect![[r#"
            error: `k` has `__attribute__((maxnreg(..)))`; NVRTC rejects `__launch_bounds__` together with it
        "#]],
        );
        let big = "// @bench n = 1024\n// @bench x: in f32[n]\n// @bench grid = 1; block = 1024\n__global__ void k(int n, float* x) {}\n";
        check(
            "launch_bounds",
            big,
            "k",
            params(r#"{"min_blocks": [4, 8]}"#),
            expect![[r#"
            error: no `min_blocks` value gives a new `__launch_bounds__` for `k` (1024 threads per block); 4, 8 would need more than 2048 threads per multiprocessor
        "#]],
        );
    }
}
