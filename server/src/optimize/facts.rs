//! Static facts about one kernel: what a strategy (the embedded policy or an LLM
//! strategist) knows before it picks a step. Pure: file text, tree-sitter tree and kernel
//! model in, [`Facts`] out; no compiler, no GPU. The step loop later fills the measured
//! slots (registers and spills from ptxas, the last timing and its roofline fractions, the
//! device) with the `set_*` methods.
//!
//! What is computed, over the kernel unit (the kernel and the `__device__` helpers it
//! calls, each call analysed with its arguments bound, so a helper's `p[i]` is the
//! caller's `x[i]`):
//! - loops (counted or not, literal trip count, `#pragma unroll`), shared memory
//!   (static bytes from `__shared__` declarations with literal sizes, `extern __shared__`),
//!   atomics, barriers, warp shuffles, tensor-core calls, fast-math-able calls;
//! - every global access (a subscript or dereference whose base is a pointer parameter,
//!   directly or through a local alias or a helper's parameter; in Triton every
//!   `tl.load`/`tl.store`/`tl.atomic_*`), with its stride across neighbouring lanes: the
//!   symbolic derivative of the address by `threadIdx.x` (CUDA) or by the `tl.arange`
//!   lane (Triton). `b[i * n + col]` with `col = blockIdx.x * blockDim.x + threadIdx.x` is
//!   unit-stride; `a[row * k + i]` with `row` from `threadIdx.y` is uniform across the
//!   x lanes (a broadcast); `x[2 * threadIdx.x]` is strided; `x[idx[threadIdx.x]]` is
//!   unknown. Local variables are merged by name across scopes, which is exact for the
//!   usual kernel shape and errs towards "unknown" otherwise.
//! - the spec's launch geometry, tunables and `bytes`/`flops` (through `spec::analyze`).
//!
//! [`FACT_NAMES`] are the boolean facts a catalog step may require (`requires` in
//! `prompts/strategies.toml`); [`Facts::features`] is the policy's context vector.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};
use tree_sitter::{Node, Tree};

use crate::spec::{self, EvalEnv, Launch};
use crate::syntax::{FileModel, Kernel, Lang, ParamKind};
use crate::worker::protocol::{Ceilings, DeviceInfo};

/// The boolean facts a catalog step may name in `requires` (negated with a leading `!`).
/// Each one is computed by [`Facts::holds`]; [`fact_phrase`] says it in words.
pub const FACT_NAMES: &[&str] = &[
    "has_tunables",
    "has_constexpr_params",
    "block_1d",
    "block_2d",
    "block_resizable",
    "has_counted_loop",
    "loop_without_unroll_pragma",
    "loop_over_global_memory",
    "pointer_without_restrict",
    "read_only_pointer_without_const",
    "has_launch_bounds",
    "has_maxnreg",
    "unit_stride_access",
    "strided_access",
    "one_thread_per_element_1d",
    "uses_shared_memory",
    "has_atomics",
    "reduction_pattern",
    "uses_warp_shuffle",
    "uses_tensor_cores",
    "has_fast_math_calls",
    "memory_bound",
    "compute_bound",
    "has_spills",
    "register_limited_occupancy",
    "far_from_roofline",
];

/// One line for a human or a model: what `name` holding (or not holding) means. `None` for
/// an unknown name.
pub fn fact_phrase(name: &str, holds: bool) -> Option<&'static str> {
    let (yes, no) = match name {
        "has_tunables" => (
            "the spec has a `tune` line with several values",
            "no `tune` line with several values",
        ),
        "has_constexpr_params" => (
            "the kernel has `tl.constexpr` parameters",
            "no `tl.constexpr` parameters",
        ),
        "block_1d" => ("1-D thread blocks", "thread blocks are not 1-D"),
        "block_2d" => ("2-D thread blocks", "thread blocks are not 2-D"),
        "block_resizable" => (
            "the spec sets the block size and the kernel reads blockDim",
            "the block size is fixed by the code or a tunable",
        ),
        "has_counted_loop" => ("the kernel has a counted loop", "no counted loop"),
        "loop_without_unroll_pragma" => (
            "a counted loop has no `#pragma unroll`",
            "every counted loop has `#pragma unroll`",
        ),
        "loop_over_global_memory" => (
            "a loop reads global memory on every iteration",
            "no loop reads global memory",
        ),
        "pointer_without_restrict" => (
            "pointer params lack `__restrict__`",
            "every pointer param is `__restrict__`",
        ),
        "read_only_pointer_without_const" => (
            "a read-only pointer param is not `const`",
            "read-only pointer params are `const`",
        ),
        "has_launch_bounds" => (
            "the kernel has `__launch_bounds__`",
            "no `__launch_bounds__`",
        ),
        "has_maxnreg" => ("the kernel has `__maxnreg__`", "no `__maxnreg__`"),
        "unit_stride_access" => (
            "global accesses are unit-stride (or broadcast) across neighbouring threads",
            "not every global access is unit-stride",
        ),
        "strided_access" => (
            "a global access is strided across neighbouring threads",
            "no strided global access",
        ),
        "one_thread_per_element_1d" => (
            "one thread per element in 1-D, outside any loop",
            "threads do not map one-to-one onto 1-D elements",
        ),
        "uses_shared_memory" => ("the kernel uses shared memory", "no shared memory"),
        "has_atomics" => ("the kernel uses atomics", "no atomics"),
        "reduction_pattern" => (
            "the kernel reduces (atomics to one address, a barrier loop, tl.sum/max)",
            "no reduction",
        ),
        "uses_warp_shuffle" => ("the kernel uses warp shuffles", "no warp shuffles"),
        "uses_tensor_cores" => (
            "the kernel uses tensor cores (tl.dot, wmma, mma)",
            "no tensor-core instructions",
        ),
        "has_fast_math_calls" => (
            "float math calls have fast intrinsics (expf -> __expf, ...)",
            "no float math calls with fast intrinsics",
        ),
        "memory_bound" => ("memory-bound by the roofline", "not memory-bound"),
        "compute_bound" => ("compute-bound by the roofline", "not compute-bound"),
        "has_spills" => ("ptxas reports register spills", "no register spills"),
        "register_limited_occupancy" => (
            "more than 32 registers per thread limit occupancy",
            "registers do not limit occupancy",
        ),
        "far_from_roofline" => (
            "the last run reached under half of its roofline ceiling",
            "the last run is near its roofline ceiling",
        ),
        _ => return None,
    };
    Some(if holds { yes } else { no })
}

/// Names of the context features, in [`Facts::features`] order (bias first).
pub const FEATURE_NAMES: &[&str] = &[
    "bias",
    "triton",
    "block_1d",
    "block_2d",
    "has_counted_loop",
    "loop_over_global_memory",
    "unit_stride_access",
    "strided_access",
    "uses_shared_memory",
    "reduction_pattern",
    "has_fast_math_calls",
    "pointer_without_restrict",
    "memory_bound",
    "compute_bound",
    "log_intensity",
    "registers",
    "has_spills",
    "bw_fraction",
    "flop_fraction",
];

/// Length of [`Facts::features`].
pub const FEATURE_DIM: usize = FEATURE_NAMES.len();

/// Roofline ridge point (FLOP per byte) used before the device is known: an H100 SXM's
/// FP32 FMA rate (~60 TFLOP/s) over its measured copy bandwidth (~3 TB/s).
const DEFAULT_RIDGE: f64 = 20.0;

/// Everything the strategy knows about one kernel. Static slots come from
/// [`static_facts`]; measured slots (`registers` on) are `None` until the step loop sets
/// them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Facts {
    pub kernel: String,
    pub lang: Option<Lang>,

    // From the spec (case 0).
    /// CUDA block shape of the timed case.
    pub block: Option<[u64; 3]>,
    /// The spec's `block = ...` uses only numbers (no tunable, no size variable).
    pub block_literal: bool,
    /// Triton `num_warps` / `num_stages` of the timed case.
    pub num_warps: Option<u64>,
    pub num_stages: Option<u64>,
    /// Tunables with more than one value, as `NAME in [v, ...]`.
    pub tunables: Vec<String>,
    /// Triton `tl.constexpr` parameter names.
    pub constexpr_params: Vec<String>,
    /// Bytes and FLOPs of the timed case (`bytes = E` or the buffers' sizes; `flops = E`).
    pub spec_bytes: Option<f64>,
    pub spec_flops: Option<f64>,
    /// The spec's `smem = E` (dynamic shared memory bytes).
    pub spec_smem_bytes: u64,

    // From the code.
    pub loops: Vec<LoopFact>,
    pub accesses: Vec<Access>,
    /// Bytes of `__shared__` arrays with literal sizes.
    pub static_smem_bytes: u64,
    /// Some `__shared__` declaration has a size that is not a literal (a macro, a
    /// template parameter): it uses shared memory of unknown size.
    pub static_smem_unsized: bool,
    /// `extern __shared__` is declared.
    pub dynamic_smem: bool,
    pub atomics: u32,
    /// `__syncthreads()` / `__syncwarp()` / `tl.debug_barrier()` calls.
    pub barriers: u32,
    /// `__shfl*_sync` calls.
    pub shuffles: u32,
    /// `tl.dot`, `wmma::mma_sync`, inline `mma` calls.
    pub tensor_core_ops: u32,
    /// Triton `tl.sum`/`tl.max`/`tl.min`/`tl.reduce`/... calls.
    pub reductions: u32,
    /// Float math calls that `--use_fast_math` would turn into intrinsics, by name.
    pub fast_math_calls: BTreeMap<String, u32>,
    /// The kernel reads `blockDim`.
    pub uses_block_dim: bool,
    /// `threadIdx.x/y/z` (CUDA) or `tl.program_id(0/1/2)` (Triton) appear.
    pub thread_axes: [bool; 3],
    pub pointers_without_restrict: Vec<String>,
    /// Pointer params never written (no store, no atomic, not passed to unknown code)
    /// whose pointee is not `const`.
    pub read_only_pointers_without_const: Vec<String>,
    pub launch_bounds: bool,
    pub maxnreg: bool,

    // Measured by the step loop.
    pub registers: Option<u32>,
    pub spills: Option<u64>,
    pub last_median_ms: Option<f64>,
    /// Achieved / peak bandwidth of the last timing.
    pub bw_fraction: Option<f64>,
    /// Achieved / peak FP32 FMA rate of the last timing (needs `flops = E`).
    pub flop_fraction: Option<f64>,
    pub device: Option<DeviceFacts>,
}

/// One loop of the kernel unit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoopFact {
    /// 1-based line of the loop keyword.
    pub line: u32,
    /// `for (init; v <op> bound; v update)` in CUDA; `for v in range(...)` in Triton.
    pub counted: bool,
    /// The loop variable of a counted loop.
    pub var: Option<String>,
    /// Known when init, bound and step are literals.
    pub trip_count: Option<u64>,
    /// `#pragma unroll` (CUDA) right before the loop, or `tl.static_range` (Triton).
    pub unroll_pragma: bool,
    /// Global loads and stores inside (nested loops included).
    pub global_loads: u32,
    pub global_stores: u32,
    /// The `__device__` helper the loop is in, if not the kernel itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
}

/// How an access touches memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessKind {
    Load,
    Store,
    /// Compound assignment (`+=`), increment, or an address passed on.
    LoadStore,
    Atomic,
}

/// Address stride between neighbouring lanes (`threadIdx.x` and `threadIdx.x + 1`; in
/// Triton neighbouring `tl.arange` elements), in elements of the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stride {
    /// Neighbours touch neighbouring elements: coalesced, vectorizable.
    Unit,
    /// Every lane touches the same element: a broadcast.
    Uniform,
    /// A literal stride other than 0 and 1.
    Strided(i64),
    /// A stride that is a run-time value (`stride * threadIdx.x`).
    Symbolic,
    /// Not linear in the lane (`x[idx[tid]]`, `x[tid % 32]`, 2-D Triton tiles).
    Unknown,
}

/// One global memory access.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Access {
    /// The kernel's pointer parameter it goes through.
    pub buffer: String,
    /// The index (or pointer) expression, whitespace collapsed.
    pub index: String,
    pub kind: AccessKind,
    pub stride: Stride,
    /// Inside a loop (of the kernel or of the helper it is in).
    pub in_loop: bool,
    /// 1-based line.
    pub line: u32,
    /// The helper it is in, if not the kernel itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
}

/// The device the kernel is measured on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceFacts {
    pub name: String,
    pub sms: u32,
    pub smem_per_block: u64,
    pub l2_bytes: u64,
    pub copy_gbps: Option<f64>,
    pub fma_tflops: Option<f64>,
}

/// Compute the static facts of `kernel` in a file. `tree` must be the tree of `text` and
/// `model` its `syntax::analyze` result; a stale tree gives wrong facts, never a panic.
pub fn static_facts(
    lang: Lang,
    text: &str,
    tree: &Tree,
    model: &FileModel,
    kernel: &Kernel,
) -> Facts {
    let mut f = Facts {
        kernel: kernel.name.clone(),
        lang: Some(lang),
        ..Facts::default()
    };
    spec_facts(&mut f, kernel, model);
    match lang {
        Lang::Cuda => cuda::scan(&mut f, text, tree, kernel),
        Lang::Triton => triton::scan(&mut f, text, tree, kernel),
    }
    f
}

fn spec_facts(f: &mut Facts, kernel: &Kernel, model: &FileModel) {
    f.constexpr_params = kernel
        .params
        .iter()
        .filter(|p| matches!(p.kind, ParamKind::Constexpr))
        .map(|p| p.name.clone())
        .collect();
    let report = spec::analyze(kernel, &model.kernels, &EvalEnv::default());
    let Some(plan) = report.plan else {
        return;
    };
    f.tunables = plan
        .tunables
        .iter()
        .filter(|t| t.values.len() > 1)
        .map(|t| {
            let vals: Vec<String> = t.values.iter().map(ToString::to_string).collect();
            format!("{} in [{}]", t.name, vals.join(", "))
        })
        .collect();
    if let Some(case) = plan.cases.first() {
        f.spec_bytes = Some(case.bytes);
        f.spec_flops = case.flops;
        match &case.launch {
            Launch::Cuda { block, smem, .. } => {
                f.block = Some(*block);
                f.spec_smem_bytes = *smem;
            }
            Launch::Triton {
                num_warps,
                num_stages,
                ..
            } => {
                f.num_warps = *num_warps;
                f.num_stages = *num_stages;
            }
        }
    }
    f.block_literal = block_statement_is_literal(kernel);
}

/// Whether the spec's `block = ...` statement names nothing but numbers and built-ins.
fn block_statement_is_literal(kernel: &Kernel) -> bool {
    const ALLOWED: &[&str] = &["warp", "sms", "cdiv", "min", "max", "next_pow2"];
    for line in &kernel.spec.lines {
        for stmt in line.text.split(';') {
            let stmt = stmt.trim();
            let Some(rest) = stmt.strip_prefix("block") else {
                continue;
            };
            let Some(rhs) = rest.trim_start().strip_prefix('=') else {
                continue;
            };
            return identifiers(rhs).all(|w| ALLOWED.contains(&w));
        }
    }
    false
}

/// Identifier-like words of an expression (words starting with a digit are skipped).
fn identifiers(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| {
            w.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        })
}

impl Facts {
    /// Whether the boolean fact `name` holds; `None` for a name not in [`FACT_NAMES`].
    /// Measured facts are false until measured.
    pub fn holds(&self, name: &str) -> Option<bool> {
        let cuda = self.lang == Some(Lang::Cuda);
        let global = || {
            self.accesses
                .iter()
                .filter(|a| a.kind != AccessKind::Atomic)
        };
        Some(match name {
            "has_tunables" => !self.tunables.is_empty(),
            "has_constexpr_params" => !self.constexpr_params.is_empty(),
            "block_1d" => cuda && self.block_dims() == Some(1),
            "block_2d" => cuda && self.block_dims() == Some(2),
            "block_resizable" => cuda && self.block_literal && self.uses_block_dim,
            "has_counted_loop" => self.loops.iter().any(|l| l.counted),
            "loop_without_unroll_pragma" => {
                cuda && self.loops.iter().any(|l| l.counted && !l.unroll_pragma)
            }
            "loop_over_global_memory" => self.loops.iter().any(|l| l.global_loads > 0),
            "pointer_without_restrict" => !self.pointers_without_restrict.is_empty(),
            "read_only_pointer_without_const" => !self.read_only_pointers_without_const.is_empty(),
            "has_launch_bounds" => self.launch_bounds,
            "has_maxnreg" => self.maxnreg,
            "unit_stride_access" => {
                global().any(|a| a.stride == Stride::Unit)
                    && global().all(|a| matches!(a.stride, Stride::Unit | Stride::Uniform))
            }
            "strided_access" => {
                global().any(|a| matches!(a.stride, Stride::Strided(_) | Stride::Symbolic))
            }
            "one_thread_per_element_1d" => {
                cuda && self.block_dims() == Some(1)
                    && global().any(|a| a.stride == Stride::Unit)
                    && global()
                        .filter(|a| a.stride == Stride::Unit)
                        .all(|a| !a.in_loop)
            }
            "uses_shared_memory" => {
                self.static_smem_bytes > 0
                    || self.static_smem_unsized
                    || self.dynamic_smem
                    || self.spec_smem_bytes > 0
            }
            "has_atomics" => self.atomics > 0,
            "reduction_pattern" => {
                self.reductions > 0
                    || self
                        .accesses
                        .iter()
                        .any(|a| a.kind == AccessKind::Atomic && a.stride == Stride::Uniform)
                    || (self.holds("uses_shared_memory") == Some(true)
                        && self.barriers > 0
                        && self.loops.iter().any(|l| l.counted))
            }
            "uses_warp_shuffle" => self.shuffles > 0,
            "uses_tensor_cores" => self.tensor_core_ops > 0,
            "has_fast_math_calls" => cuda && !self.fast_math_calls.is_empty(),
            "memory_bound" => self.bound() == Some(Bound::Memory),
            "compute_bound" => self.bound() == Some(Bound::Compute),
            "has_spills" => self.spills.is_some_and(|s| s > 0),
            "register_limited_occupancy" => self.registers.is_some_and(|r| r > 32),
            "far_from_roofline" => match (self.bw_fraction, self.flop_fraction) {
                (None, None) => false,
                (b, f) => b.unwrap_or(0.0).max(f.unwrap_or(0.0)) < 0.5,
            },
            _ => return None,
        })
    }

    /// The names of every fact that holds, in [`FACT_NAMES`] order.
    pub fn holding(&self) -> Vec<&'static str> {
        FACT_NAMES
            .iter()
            .copied()
            .filter(|n| self.holds(n) == Some(true))
            .collect()
    }

    /// 1, 2 or 3 for a CUDA kernel's block shape: from the spec, else from which
    /// `threadIdx` axes the code uses.
    fn block_dims(&self) -> Option<u8> {
        if let Some([_, y, z]) = self.block {
            return Some(if z > 1 {
                3
            } else if y > 1 {
                2
            } else {
                1
            });
        }
        match self.thread_axes {
            [_, _, true] => Some(3),
            [_, true, false] => Some(2),
            [true, false, false] => Some(1),
            _ => None,
        }
    }

    /// FLOP per byte of the timed case, when the spec gives `flops`.
    pub fn intensity(&self) -> Option<f64> {
        match (self.spec_flops, self.spec_bytes) {
            (Some(f), Some(b)) if b > 0.0 => Some(f / b),
            _ => None,
        }
    }

    fn ridge(&self) -> f64 {
        match &self.device {
            Some(DeviceFacts {
                copy_gbps: Some(bw),
                fma_tflops: Some(fl),
                ..
            }) if *bw > 0.0 => fl * 1e3 / bw,
            _ => DEFAULT_RIDGE,
        }
    }

    /// Roofline side: by arithmetic intensity against the ridge point when the spec gives
    /// `flops`; else by the measured fractions (the larger one, if it is at least 40%);
    /// else a kernel that reads global memory in no loop streams each element once:
    /// memory-bound.
    fn bound(&self) -> Option<Bound> {
        if let Some(i) = self.intensity() {
            return Some(if i < self.ridge() {
                Bound::Memory
            } else {
                Bound::Compute
            });
        }
        let (b, f) = (
            self.bw_fraction.unwrap_or(0.0),
            self.flop_fraction.unwrap_or(0.0),
        );
        if b.max(f) >= 0.4 {
            return Some(if b >= f {
                Bound::Memory
            } else {
                Bound::Compute
            });
        }
        let streaming = !self.accesses.is_empty() && self.loops.iter().all(|l| l.global_loads == 0);
        streaming.then_some(Bound::Memory)
    }

    /// The policy's context: [`FEATURE_DIM`] numbers, bias first, each in [0, 1]
    /// (names in [`FEATURE_NAMES`]). Unmeasured slots are 0.
    pub fn features(&self) -> Vec<f64> {
        let b = |name: &str| f64::from(u8::from(self.holds(name) == Some(true)));
        let v = vec![
            1.0,
            f64::from(u8::from(self.lang == Some(Lang::Triton))),
            b("block_1d"),
            b("block_2d"),
            b("has_counted_loop"),
            b("loop_over_global_memory"),
            b("unit_stride_access"),
            b("strided_access"),
            b("uses_shared_memory"),
            b("reduction_pattern"),
            b("has_fast_math_calls"),
            b("pointer_without_restrict"),
            b("memory_bound"),
            b("compute_bound"),
            // 1 FLOP/byte -> 0.1, 1000 -> 1.
            self.intensity()
                .map_or(0.0, |i| ((1.0 + i).log10() / 3.0).clamp(0.0, 1.0)),
            self.registers
                .map_or(0.0, |r| (f64::from(r) / 255.0).clamp(0.0, 1.0)),
            b("has_spills"),
            self.bw_fraction.map_or(0.0, |x| x.clamp(0.0, 1.0)),
            self.flop_fraction.map_or(0.0, |x| x.clamp(0.0, 1.0)),
        ];
        debug_assert_eq!(v.len(), FEATURE_DIM);
        v
    }

    /// Registers per thread and spilled bytes, from ptxas.
    pub fn set_resources(&mut self, registers: u32, spills: u64) {
        self.registers = Some(registers);
        self.spills = Some(spills);
    }

    /// The last timing: median, and achieved/peak bandwidth and FLOP rate where known.
    pub fn set_timing(
        &mut self,
        median_ms: f64,
        bw_fraction: Option<f64>,
        flop_fraction: Option<f64>,
    ) {
        self.last_median_ms = Some(median_ms);
        self.bw_fraction = bw_fraction;
        self.flop_fraction = flop_fraction;
    }

    /// The device, with its measured ceilings (`c`, else the ones in `d`).
    pub fn set_device(&mut self, d: &DeviceInfo, c: Option<&Ceilings>) {
        let c = c.or(d.ceilings.as_ref());
        self.device = Some(DeviceFacts {
            name: d.name.clone(),
            sms: d.sms,
            smem_per_block: d.smem_per_block,
            l2_bytes: d.l2_bytes,
            copy_gbps: c.map(|c| c.copy_gbps),
            fma_tflops: c.map(|c| c.fma_tflops),
        });
    }

    /// Markdown bullets for prompts and reports.
    pub fn describe(&self) -> String {
        let mut out = Vec::new();
        let lang = match self.lang {
            Some(Lang::Cuda) => "CUDA",
            Some(Lang::Triton) => "Triton",
            None => "unknown language",
        };
        let mut head = format!("- kernel `{}` ({lang})", self.kernel);
        if let Some(b) = self.block {
            head.push_str(&format!(", block ({}, {}, {})", b[0], b[1], b[2]));
        }
        if let Some(w) = self.num_warps {
            head.push_str(&format!(", num_warps {w}"));
        }
        if let Some(s) = self.num_stages {
            head.push_str(&format!(", num_stages {s}"));
        }
        out.push(head);
        if !self.tunables.is_empty() {
            out.push(format!("- tunables: {}", self.tunables.join("; ")));
        }
        if !self.constexpr_params.is_empty() {
            out.push(format!(
                "- constexpr params: {}",
                self.constexpr_params.join(", ")
            ));
        }
        if self.loops.is_empty() {
            out.push("- loops: none".into());
        }
        for l in &self.loops {
            let mut s = format!("- loop at line {}: ", l.line);
            match (&l.var, l.counted) {
                (Some(v), true) => s.push_str(&format!("counted over `{v}`")),
                _ => s.push_str("not counted"),
            }
            match l.trip_count {
                Some(n) => s.push_str(&format!(", {n} iterations")),
                None if l.counted => s.push_str(", trip count known at run time"),
                None => {}
            }
            s.push_str(if l.unroll_pragma {
                ", unrolled"
            } else {
                ", no unroll pragma"
            });
            s.push_str(&format!(
                ", {} global loads and {} stores inside",
                l.global_loads, l.global_stores
            ));
            if let Some(v) = &l.via {
                s.push_str(&format!(" (in `{v}`)"));
            }
            out.push(s);
        }
        if self.accesses.is_empty() {
            out.push("- global accesses: none found".into());
        }
        for a in &self.accesses {
            let kind = match a.kind {
                AccessKind::Load => "load",
                AccessKind::Store => "store",
                AccessKind::LoadStore => "load+store",
                AccessKind::Atomic => "atomic",
            };
            let stride = match a.stride {
                Stride::Unit => "unit-stride".to_string(),
                Stride::Uniform => "same address for every lane (broadcast)".into(),
                Stride::Strided(k) => format!("stride {k}"),
                Stride::Symbolic => "run-time stride".into(),
                Stride::Unknown => "irregular".into(),
            };
            let mut s = format!(
                "- line {}: {kind} `{}` via `{}`, {stride}",
                a.line, a.buffer, a.index
            );
            if a.in_loop {
                s.push_str(", in a loop");
            }
            if let Some(v) = &a.via {
                s.push_str(&format!(" (in `{v}`)"));
            }
            out.push(s);
        }
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        if self.lang == Some(Lang::Cuda) {
            out.push(format!(
                "- pointers without `__restrict__`: {}; read-only without `const`: {}",
                list(&self.pointers_without_restrict),
                list(&self.read_only_pointers_without_const)
            ));
            let mut smem = Vec::new();
            if self.static_smem_bytes > 0 {
                smem.push(format!("{} B static", self.static_smem_bytes));
            }
            if self.static_smem_unsized {
                smem.push("static of non-literal size".into());
            }
            if self.dynamic_smem || self.spec_smem_bytes > 0 {
                smem.push(format!("dynamic ({} B in the spec)", self.spec_smem_bytes));
            }
            out.push(format!(
                "- shared memory: {}; barriers {}; atomics {}; shuffles {}",
                if smem.is_empty() {
                    "none".into()
                } else {
                    smem.join(", ")
                },
                self.barriers,
                self.atomics,
                self.shuffles
            ));
            out.push(format!(
                "- `__launch_bounds__`: {}; `__maxnreg__`: {}; reads blockDim: {}",
                yes_no(self.launch_bounds),
                yes_no(self.maxnreg),
                yes_no(self.uses_block_dim)
            ));
            let fm: Vec<String> = self
                .fast_math_calls
                .iter()
                .map(|(k, n)| format!("{k} x{n}"))
                .collect();
            out.push(format!("- fast-math-able calls: {}", list(&fm)));
        } else {
            out.push(format!(
                "- atomics {}; reductions {}; tl.dot {}",
                self.atomics, self.reductions, self.tensor_core_ops
            ));
        }
        match (self.intensity(), self.spec_bytes) {
            (Some(i), _) => out.push(format!(
                "- arithmetic intensity {i:.1} FLOP/byte (ridge {:.1})",
                self.ridge()
            )),
            (None, Some(b)) => out.push(format!(
                "- moves {} per run; no `flops` in the spec",
                human_bytes(b)
            )),
            (None, None) => {}
        }
        let mut measured = Vec::new();
        if let Some(r) = self.registers {
            measured.push(format!("{r} registers"));
        }
        if let Some(s) = self.spills {
            measured.push(format!("{s} B spilled"));
        }
        if let Some(ms) = self.last_median_ms {
            measured.push(format!("median {ms:.4} ms"));
        }
        if let Some(b) = self.bw_fraction {
            measured.push(format!("{:.0}% of peak bandwidth", b * 100.0));
        }
        if let Some(f) = self.flop_fraction {
            measured.push(format!("{:.0}% of peak FMA rate", f * 100.0));
        }
        if !measured.is_empty() {
            out.push(format!("- measured: {}", measured.join(", ")));
        }
        if let Some(d) = &self.device {
            let mut s = format!(
                "- device: {} ({} SMs, {} shared memory per block, {} L2",
                d.name,
                d.sms,
                human_bytes(d.smem_per_block as f64),
                human_bytes(d.l2_bytes as f64)
            );
            if let (Some(bw), Some(fl)) = (d.copy_gbps, d.fma_tflops) {
                s.push_str(&format!(", {bw:.0} GB/s copy, {fl:.1} TFLOP/s FP32"));
            }
            s.push(')');
            out.push(s);
        }
        out.push(format!("- facts: {}", self.holding().join(", ")));
        out.join("\n")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bound {
    Memory,
    Compute,
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn human_bytes(b: f64) -> String {
    const UNITS: &[&str] = &["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

// ---------------------------------------------------------------------------------------
// The lane derivative: how an integer expression changes from one lane to the next.

/// d(expr)/d(lane): a literal, a run-time nonzero value, or not linear in the lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Deriv {
    Const(i64),
    Sym,
    Unknown,
}

use Deriv::{Const, Sym, Unknown};

const ZERO: Deriv = Const(0);

impl Deriv {
    fn is_zero(self) -> bool {
        self == ZERO
    }
    fn add(self, o: Deriv) -> Deriv {
        match (self, o) {
            (Unknown, _) | (_, Unknown) => Unknown,
            (Const(a), Const(b)) => a.checked_add(b).map_or(Unknown, Const),
            (Const(0), x) | (x, Const(0)) => x,
            _ => Sym,
        }
    }
    fn neg(self) -> Deriv {
        match self {
            Const(a) => a.checked_neg().map_or(Unknown, Const),
            x => x,
        }
    }
    fn scale(self, c: i64) -> Deriv {
        match self {
            Const(a) => a.checked_mul(c).map_or(Unknown, Const),
            Sym if c == 0 => ZERO,
            x => x,
        }
    }
    /// Derivative of a product `a * b`, where `ka`/`kb` are the factors' literal values.
    fn mul(da: Deriv, ka: Option<i64>, db: Deriv, kb: Option<i64>) -> Deriv {
        match (da.is_zero(), db.is_zero()) {
            (true, true) => ZERO,
            (true, false) => ka.map_or(if db == Unknown { Unknown } else { Sym }, |c| db.scale(c)),
            (false, true) => kb.map_or(if da == Unknown { Unknown } else { Sym }, |c| da.scale(c)),
            (false, false) => Unknown,
        }
    }
    /// An operation that is not linear: uniform in, uniform out, else unknown.
    fn opaque(parts: &[Deriv]) -> Deriv {
        if parts.iter().all(|d| d.is_zero()) {
            ZERO
        } else {
            Unknown
        }
    }
    fn stride(self) -> Stride {
        match self {
            Const(0) => Stride::Uniform,
            Const(1) => Stride::Unit,
            Const(k) => Stride::Strided(k),
            Sym => Stride::Symbolic,
            Unknown => Stride::Unknown,
        }
    }
}

/// One definition of a local name: `v = value`, `v += value`, a loop variable...
#[derive(Clone, Copy)]
struct Def<'t> {
    /// `=`, `+=`, `-=`, ... ; `++` for increments; `opaque` for a definition we cannot
    /// follow (tuple unpacking).
    op: &'t str,
    value: Option<Node<'t>>,
}

#[derive(Clone, Copy)]
enum Memo {
    /// Being computed; a self-reference reads this assumption (None: no assumption yet).
    Assume(Option<Deriv>),
    Done(Deriv),
}

/// Settling a name's lane stride when it has several definitions (loop updates
/// included), shared by the CUDA and Triton analyses: the first definition, evaluated
/// without assumption, is assumed; every other definition must keep it, else the stride
/// is unknown. Memoized; a name met again while it is being settled reads the assumption.
trait Settle<'t> {
    fn memo(&mut self) -> &mut HashMap<String, Memo>;
    fn deriv_def(&mut self, def: Def<'t>, cur: Deriv) -> Deriv;

    fn settle(&mut self, name: &str, defs: &[Def<'t>]) -> Deriv {
        match self.memo().get(name) {
            Some(Memo::Done(d)) => return *d,
            Some(Memo::Assume(a)) => return a.unwrap_or(Unknown),
            None => {}
        }
        let Some((first_def, rest)) = defs.split_first() else {
            return ZERO;
        };
        self.memo().insert(name.to_string(), Memo::Assume(None));
        let first = self.deriv_def(*first_def, ZERO);
        self.memo()
            .insert(name.to_string(), Memo::Assume(Some(first)));
        let result = if rest.iter().all(|d| self.deriv_def(*d, first) == first) {
            first
        } else {
            Unknown
        };
        self.memo().insert(name.to_string(), Memo::Done(result));
        result
    }
}

/// Nesting limit for expression evaluation and tree walks: deeper input is "unknown",
/// never a stack overflow.
const MAX_DEPTH: usize = 200;

fn node_text<'s>(src: &'s str, n: Node) -> &'s str {
    src.get(n.byte_range()).unwrap_or("")
}

fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn line_of(n: Node) -> u32 {
    u32::try_from(n.start_position().row + 1).unwrap_or(u32::MAX)
}

fn named_children(n: Node) -> Vec<Node> {
    let mut c = n.walk();
    n.named_children(&mut c)
        .filter(|k| k.kind() != "comment")
        .collect()
}

/// Parse a C or Python integer literal (`16`, `0x10`, `256u`, `1_024`).
fn int_literal(s: &str) -> Option<i64> {
    let s: String = s
        .trim()
        .trim_end_matches(['u', 'U', 'l', 'L'])
        .chars()
        .filter(|c| *c != '_' && *c != '\'')
        .collect();
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

/// The loop's trip count when init, bound and step are literals, by running it (at most
/// 2^20 iterations; more is "unknown").
fn simulate_trip_count(init: i64, cmp: &str, bound: i64, op: &str, step: i64) -> Option<u64> {
    let mut v = init;
    let mut n: u64 = 0;
    let holds = |v: i64| match cmp {
        "<" => v < bound,
        "<=" => v <= bound,
        ">" => v > bound,
        ">=" => v >= bound,
        "!=" => v != bound,
        _ => false,
    };
    while holds(v) {
        n += 1;
        if n > 1 << 20 {
            return None;
        }
        v = match op {
            "+=" => v.checked_add(step)?,
            "-=" => v.checked_sub(step)?,
            "*=" => v.checked_mul(step)?,
            "/=" => v.checked_div(step)?,
            "<<=" if (0..63).contains(&step) => v.checked_shl(u32::try_from(step).ok()?)?,
            ">>=" if (0..63).contains(&step) => v >> step,
            _ => return None,
        };
    }
    Some(n)
}

// ---------------------------------------------------------------------------------------

mod cuda {
    //! The CUDA scan: the kernel body, and each `__device__` helper it calls with the
    //! call's arguments bound to the helper's parameters.

    use super::*;

    /// Float math calls with a fast intrinsic (`--use_fast_math` picks these).
    const FAST_MATH: &[&str] = &[
        "expf", "exp10f", "logf", "log2f", "log10f", "sinf", "cosf", "tanf", "powf", "sincosf",
    ];

    /// How deep helper calls are followed.
    const MAX_CALL_DEPTH: usize = 4;

    pub(super) fn scan(f: &mut Facts, src: &str, tree: &Tree, kernel: &Kernel) {
        let root = tree.root_node();
        // Every function definition of the unit, by name.
        let mut funcs: HashMap<String, Node> = HashMap::new();
        for r in &kernel.unit_ranges {
            let mut found = Vec::new();
            find_functions(root, r, &mut found, 0);
            for func in found {
                if let Some(name) = function_name(src, func) {
                    funcs.entry(name).or_insert(func);
                }
            }
        }
        let Some(kfunc) = find_kernel(root, src, kernel) else {
            return;
        };
        let Some(body) = kfunc.child_by_field_name("body") else {
            return;
        };
        // Launch bounds and maxnreg sit between the definition's start and its body.
        let header = src
            .get(kernel.def_range.start.min(body.start_byte())..body.start_byte())
            .unwrap_or("");
        f.launch_bounds = header.contains("__launch_bounds__");
        f.maxnreg = header.contains("__maxnreg__") || header.contains("maxnreg(");

        let mut bindings = HashMap::new();
        for p in &kernel.params {
            let b = match &p.kind {
                ParamKind::Pointer { .. } => Binding::Buffer {
                    buffer: p.name.clone(),
                    d: ZERO,
                },
                _ => Binding::Scalar(ZERO),
            };
            bindings.insert(p.name.clone(), b);
        }
        let mut scan = Scan {
            src,
            funcs: &funcs,
            facts: f,
            loops: Vec::new(),
            written: HashSet::new(),
            call_stack: vec![kernel.name.clone()],
        };
        let mut cx = FnCx::new(src, body, bindings, None);
        scan.visit(&mut cx, body, 0);
        let written = std::mem::take(&mut scan.written);

        for p in &kernel.params {
            let ParamKind::Pointer { is_const, .. } = &p.kind else {
                continue;
            };
            let decl = src.get(p.range.clone()).unwrap_or("");
            let restrict =
                identifiers(decl).any(|w| matches!(w, "__restrict__" | "__restrict" | "restrict"));
            if !restrict {
                f.pointers_without_restrict.push(p.name.clone());
            }
            if !is_const && !written.contains(&p.name) {
                f.read_only_pointers_without_const.push(p.name.clone());
            }
        }
    }

    /// Outermost `function_definition`s inside `r`.
    fn find_functions<'t>(
        n: Node<'t>,
        r: &std::ops::Range<usize>,
        out: &mut Vec<Node<'t>>,
        depth: usize,
    ) {
        if depth > MAX_DEPTH || n.end_byte() <= r.start || n.start_byte() >= r.end {
            return;
        }
        if n.kind() == "function_definition" && n.start_byte() >= r.start && n.end_byte() <= r.end {
            out.push(n);
            return;
        }
        let mut c = n.walk();
        for ch in n.children(&mut c) {
            find_functions(ch, r, out, depth + 1);
        }
    }

    fn find_kernel<'t>(root: Node<'t>, src: &str, kernel: &Kernel) -> Option<Node<'t>> {
        let mut found = Vec::new();
        find_functions(root, &kernel.def_range, &mut found, 0);
        found
            .into_iter()
            .find(|f| function_name(src, *f).as_deref() == Some(kernel.name.as_str()))
    }

    /// The function declarator under a definition's declarator (through pointers,
    /// references and attributes).
    fn function_declarator(mut n: Node) -> Option<Node> {
        for _ in 0..16 {
            if n.kind() == "function_declarator" {
                return Some(n);
            }
            n = n.child_by_field_name("declarator")?;
        }
        None
    }

    fn function_name(src: &str, func: Node) -> Option<String> {
        let fd = function_declarator(func.child_by_field_name("declarator")?)?;
        let d = fd.child_by_field_name("declarator")?;
        let d = match d.kind() {
            "template_function" => d.child_by_field_name("name")?,
            "qualified_identifier" => d.child_by_field_name("name")?,
            _ => d,
        };
        Some(node_text(src, d).to_string())
    }

    /// The parameter names of a function definition, in order (None for an unnamed one).
    fn param_names(src: &str, func: Node) -> Vec<Option<String>> {
        let Some(fd) = func
            .child_by_field_name("declarator")
            .and_then(function_declarator)
        else {
            return Vec::new();
        };
        let Some(list) = fd.child_by_field_name("parameters") else {
            return Vec::new();
        };
        named_children(list)
            .into_iter()
            .filter(|p| p.kind() == "parameter_declaration")
            .map(|p| {
                p.child_by_field_name("declarator")
                    .and_then(|d| declared_name(src, d))
            })
            .collect()
    }

    /// The identifier a declarator declares (through pointer, reference, array, init).
    fn declared_name(src: &str, mut d: Node) -> Option<String> {
        for _ in 0..16 {
            match d.kind() {
                "identifier" => return Some(node_text(src, d).to_string()),
                "reference_declarator" => d = named_children(d).into_iter().next()?,
                _ => d = d.child_by_field_name("declarator")?,
            }
        }
        None
    }

    /// The callee name of a call: `f`, `ns::f`, `f<T>`, `obj.f`.
    fn call_name(src: &str, call: Node) -> String {
        let Some(mut f) = call.child_by_field_name("function") else {
            return String::new();
        };
        for _ in 0..4 {
            f = match f.kind() {
                "template_function" | "qualified_identifier" => match f.child_by_field_name("name")
                {
                    Some(n) => n,
                    None => break,
                },
                "field_expression" => match f.child_by_field_name("field") {
                    Some(n) => n,
                    None => break,
                },
                _ => break,
            };
        }
        node_text(src, f).to_string()
    }

    #[derive(Clone)]
    enum Binding {
        Scalar(Deriv),
        /// A pointer into a kernel buffer; `d` is the derivative of its offset.
        Buffer {
            buffer: String,
            d: Deriv,
        },
    }

    /// One function being scanned: its bindings (parameters) and local definitions.
    struct FnCx<'t> {
        src: &'t str,
        bindings: HashMap<String, Binding>,
        defs: HashMap<String, Vec<Def<'t>>>,
        memo: HashMap<String, Memo>,
        /// Per-name results of `konst` and `buffer_of` (None while being computed), so
        /// chains like `a2 = a1 + a1` stay linear.
        konst_memo: RefCell<HashMap<String, Option<i64>>>,
        buffer_memo: RefCell<HashMap<String, Option<String>>>,
        /// The helper's name, or None in the kernel itself.
        via: Option<String>,
    }

    impl<'t> Settle<'t> for FnCx<'t> {
        fn memo(&mut self) -> &mut HashMap<String, Memo> {
            &mut self.memo
        }
        fn deriv_def(&mut self, def: Def<'t>, cur: Deriv) -> Deriv {
            FnCx::deriv_def(self, def, cur)
        }
    }

    impl<'t> FnCx<'t> {
        fn new(
            src: &'t str,
            body: Node<'t>,
            bindings: HashMap<String, Binding>,
            via: Option<String>,
        ) -> Self {
            let mut cx = FnCx {
                src,
                bindings,
                defs: HashMap::new(),
                memo: HashMap::new(),
                konst_memo: RefCell::default(),
                buffer_memo: RefCell::default(),
                via,
            };
            cx.collect_defs(body, 0);
            cx
        }

        fn collect_defs(&mut self, n: Node<'t>, depth: usize) {
            if depth > MAX_DEPTH {
                return;
            }
            match n.kind() {
                "init_declarator" => {
                    if let (Some(d), Some(v)) = (
                        n.child_by_field_name("declarator"),
                        n.child_by_field_name("value"),
                    ) {
                        if let Some(name) = declared_name(self.src, d) {
                            // `T x(v)` and `T x{v}` hold the value in an argument list.
                            let v = match v.kind() {
                                "argument_list" | "initializer_list" => {
                                    let ch = named_children(v);
                                    if ch.len() == 1 {
                                        ch[0]
                                    } else {
                                        v
                                    }
                                }
                                _ => v,
                            };
                            self.defs.entry(name).or_default().push(Def {
                                op: "=",
                                value: Some(v),
                            });
                        }
                    }
                }
                "assignment_expression" => {
                    if let (Some(l), Some(r)) = (
                        n.child_by_field_name("left"),
                        n.child_by_field_name("right"),
                    ) {
                        if l.kind() == "identifier" {
                            let op = n
                                .child_by_field_name("operator")
                                .map_or("=", |o| node_text(self.src, o));
                            self.defs
                                .entry(node_text(self.src, l).to_string())
                                .or_default()
                                .push(Def { op, value: Some(r) });
                        }
                    }
                }
                "update_expression" => {
                    if let Some(a) = n.child_by_field_name("argument") {
                        if a.kind() == "identifier" {
                            self.defs
                                .entry(node_text(self.src, a).to_string())
                                .or_default()
                                .push(Def {
                                    op: "++",
                                    value: None,
                                });
                        }
                    }
                }
                _ => {}
            }
            let mut c = n.walk();
            for ch in n.children(&mut c) {
                self.collect_defs(ch, depth + 1);
            }
        }

        /// A literal integer value (numbers, arithmetic on them, single-definition locals).
        fn konst(&self, n: Node, depth: usize) -> Option<i64> {
            if depth > MAX_DEPTH {
                return None;
            }
            match n.kind() {
                "number_literal" => int_literal(node_text(self.src, n)),
                "parenthesized_expression" => self.konst(*named_children(n).first()?, depth + 1),
                "cast_expression" => self.konst(n.child_by_field_name("value")?, depth + 1),
                "unary_expression" => {
                    let a = self.konst(n.child_by_field_name("argument")?, depth + 1)?;
                    match node_text(self.src, n.child_by_field_name("operator")?) {
                        "-" => a.checked_neg(),
                        "+" => Some(a),
                        _ => None,
                    }
                }
                "binary_expression" => {
                    let a = self.konst(n.child_by_field_name("left")?, depth + 1)?;
                    let b = self.konst(n.child_by_field_name("right")?, depth + 1)?;
                    match node_text(self.src, n.child_by_field_name("operator")?) {
                        "+" => a.checked_add(b),
                        "-" => a.checked_sub(b),
                        "*" => a.checked_mul(b),
                        "/" if b != 0 => a.checked_div(b),
                        "<<" => a.checked_shl(u32::try_from(b).ok()?),
                        ">>" => a.checked_shr(u32::try_from(b).ok()?),
                        _ => None,
                    }
                }
                "identifier" => {
                    let name = node_text(self.src, n);
                    if self.bindings.contains_key(name) {
                        return None;
                    }
                    if let Some(k) = self.konst_memo.borrow().get(name) {
                        return *k;
                    }
                    self.konst_memo.borrow_mut().insert(name.to_string(), None);
                    let k = match self.defs.get(name).map(Vec::as_slice) {
                        Some(
                            [Def {
                                op: "=",
                                value: Some(v),
                            }],
                        ) => self.konst(*v, depth + 1),
                        _ => None,
                    };
                    self.konst_memo.borrow_mut().insert(name.to_string(), k);
                    k
                }
                _ => None,
            }
        }

        fn deriv_name(&mut self, name: &str) -> Deriv {
            match self.bindings.get(name) {
                Some(Binding::Scalar(d)) | Some(Binding::Buffer { d, .. }) => return *d,
                None => {}
            }
            let Some(defs) = self.defs.get(name).cloned() else {
                // Macros, globals, `warpSize`: the same for every lane.
                return ZERO;
            };
            self.settle(name, &defs)
        }

        /// The derivative of the name after one definition, given `cur` before it.
        fn deriv_def(&mut self, def: Def<'t>, cur: Deriv) -> Deriv {
            let Some(v) = def.value else {
                // `++`/`--`: shifts by a constant.
                return cur;
            };
            let dv = self.deriv(v, 0);
            match def.op {
                "=" => dv,
                "+=" => cur.add(dv),
                "-=" => cur.add(dv.neg()),
                "*=" => Deriv::mul(cur, None, dv, self.konst(v, 0)),
                _ => Deriv::opaque(&[cur, dv]),
            }
        }

        /// The lane derivative of an expression.
        fn deriv(&mut self, n: Node<'t>, depth: usize) -> Deriv {
            if depth > MAX_DEPTH {
                return Unknown;
            }
            let src = self.src;
            match n.kind() {
                "number_literal" | "char_literal" | "string_literal" | "true" | "false"
                | "null" | "nullptr" | "sizeof_expression" => ZERO,
                "identifier" => self.deriv_name(node_text(src, n)),
                "field_expression" => {
                    let (Some(a), Some(fld)) = (
                        n.child_by_field_name("argument"),
                        n.child_by_field_name("field"),
                    ) else {
                        return Unknown;
                    };
                    match (node_text(src, a), node_text(src, fld)) {
                        ("threadIdx", "x") => Const(1),
                        ("threadIdx" | "blockIdx" | "blockDim" | "gridDim", _) => ZERO,
                        _ => self.deriv(a, depth + 1),
                    }
                }
                "parenthesized_expression" => match named_children(n).first() {
                    Some(c) => self.deriv(*c, depth + 1),
                    None => Unknown,
                },
                "cast_expression" => match n.child_by_field_name("value") {
                    Some(v) => self.deriv(v, depth + 1),
                    None => Unknown,
                },
                "unary_expression" => {
                    let Some(a) = n.child_by_field_name("argument") else {
                        return Unknown;
                    };
                    let d = self.deriv(a, depth + 1);
                    match n.child_by_field_name("operator").map(|o| node_text(src, o)) {
                        Some("-") => d.neg(),
                        Some("+") => d,
                        _ => Deriv::opaque(&[d]),
                    }
                }
                "binary_expression" => {
                    let (Some(l), Some(r), Some(op)) = (
                        n.child_by_field_name("left"),
                        n.child_by_field_name("right"),
                        n.child_by_field_name("operator"),
                    ) else {
                        return Unknown;
                    };
                    let (dl, dr) = (self.deriv(l, depth + 1), self.deriv(r, depth + 1));
                    match node_text(src, op) {
                        "+" => dl.add(dr),
                        "-" => dl.add(dr.neg()),
                        "*" => Deriv::mul(dl, self.konst(l, 0), dr, self.konst(r, 0)),
                        "<<" => match (dr.is_zero(), self.konst(r, 0)) {
                            (true, Some(k)) if (0..62).contains(&k) => dl.scale(1 << k),
                            (true, _) if dl.is_zero() => ZERO,
                            (true, _) if dl != Unknown => Sym,
                            _ => Unknown,
                        },
                        _ => Deriv::opaque(&[dl, dr]),
                    }
                }
                "conditional_expression" => {
                    let (Some(c), Some(a), Some(b)) = (
                        n.child_by_field_name("condition"),
                        n.child_by_field_name("consequence"),
                        n.child_by_field_name("alternative"),
                    ) else {
                        return Unknown;
                    };
                    let (da, db) = (self.deriv(a, depth + 1), self.deriv(b, depth + 1));
                    if da == db && da != Unknown {
                        da
                    } else {
                        Deriv::opaque(&[self.deriv(c, depth + 1), da, db])
                    }
                }
                "call_expression" => {
                    let args: Vec<Node> = n
                        .child_by_field_name("arguments")
                        .map(named_children)
                        .unwrap_or_default();
                    let ds: Vec<Deriv> = args.iter().map(|a| self.deriv(*a, depth + 1)).collect();
                    Deriv::opaque(&ds)
                }
                // A value read from memory at a lane-independent address is itself
                // lane-independent; anything else read from memory is data.
                "subscript_expression" => {
                    let idx = n
                        .child_by_field_name("indices")
                        .or_else(|| n.child_by_field_name("index"))
                        .map(named_children)
                        .unwrap_or_default();
                    let mut ds: Vec<Deriv> =
                        idx.iter().map(|i| self.deriv(*i, depth + 1)).collect();
                    if let Some(a) = n.child_by_field_name("argument") {
                        ds.push(self.deriv(a, depth + 1));
                    }
                    Deriv::opaque(&ds)
                }
                "pointer_expression" => match n.child_by_field_name("argument") {
                    Some(a) => {
                        let d = self.deriv(a, depth + 1);
                        match n.child_by_field_name("operator").map(|o| node_text(src, o)) {
                            // `&x`: an address moves with the lvalue.
                            Some("&") => d,
                            _ => Deriv::opaque(&[d]),
                        }
                    }
                    None => Unknown,
                },
                _ => Unknown,
            }
        }

        /// The kernel buffer an expression points into, if any.
        fn buffer_of(&mut self, n: Node<'t>, depth: usize) -> Option<String> {
            if depth > MAX_DEPTH {
                return None;
            }
            match n.kind() {
                "identifier" => {
                    let name = node_text(self.src, n);
                    match self.bindings.get(name) {
                        Some(Binding::Buffer { buffer, .. }) => return Some(buffer.clone()),
                        Some(Binding::Scalar(_)) => return None,
                        None => {}
                    }
                    // A local pointer alias: the buffer its first definition points into.
                    if let Some(b) = self.buffer_memo.borrow().get(name) {
                        return b.clone();
                    }
                    self.buffer_memo.borrow_mut().insert(name.to_string(), None);
                    let first = self.defs.get(name)?.first().copied()?;
                    let b = self.buffer_of(first.value?, depth + 1);
                    self.buffer_memo
                        .borrow_mut()
                        .insert(name.to_string(), b.clone());
                    b
                }
                "parenthesized_expression" => {
                    self.buffer_of(*named_children(n).first()?, depth + 1)
                }
                "cast_expression" => self.buffer_of(n.child_by_field_name("value")?, depth + 1),
                "binary_expression" => {
                    let op = node_text(self.src, n.child_by_field_name("operator")?);
                    let l = n.child_by_field_name("left")?;
                    let r = n.child_by_field_name("right")?;
                    match op {
                        "+" => self
                            .buffer_of(l, depth + 1)
                            .or_else(|| self.buffer_of(r, depth + 1)),
                        "-" => self.buffer_of(l, depth + 1),
                        _ => None,
                    }
                }
                "pointer_expression" => {
                    // `&p[i]`
                    let a = n.child_by_field_name("argument")?;
                    if node_text(self.src, n.child_by_field_name("operator")?) == "&"
                        && a.kind() == "subscript_expression"
                    {
                        self.buffer_of(a.child_by_field_name("argument")?, depth + 1)
                    } else {
                        None
                    }
                }
                // `reinterpret_cast<float4*>(p)`, `static_cast<...>(p)`
                "call_expression" => {
                    let name = node_text(self.src, n.child_by_field_name("function")?);
                    if name.contains("_cast") {
                        let a = *named_children(n.child_by_field_name("arguments")?).first()?;
                        self.buffer_of(a, depth + 1)
                    } else {
                        None
                    }
                }
                _ => None,
            }
        }
    }

    struct Scan<'a, 't> {
        src: &'t str,
        funcs: &'a HashMap<String, Node<'t>>,
        facts: &'a mut Facts,
        /// Indices into `facts.loops` of the loops around the current node.
        loops: Vec<usize>,
        /// Buffers that may be written: stored to, atomics, or passed to unknown code.
        written: HashSet<String>,
        call_stack: Vec<String>,
    }

    impl<'t> Scan<'_, 't> {
        fn visit(&mut self, cx: &mut FnCx<'t>, n: Node<'t>, depth: usize) {
            if depth > MAX_DEPTH {
                return;
            }
            let src = self.src;
            let mut pushed_loop = false;
            match n.kind() {
                "for_statement" | "while_statement" | "do_statement" => {
                    let fact = self.loop_fact(cx, n);
                    self.facts.loops.push(fact);
                    self.loops.push(self.facts.loops.len() - 1);
                    pushed_loop = true;
                }
                "subscript_expression" => {
                    if let Some(a) = n.child_by_field_name("argument") {
                        if let Some(buffer) = cx.buffer_of(a, 0) {
                            let idx = n
                                .child_by_field_name("indices")
                                .or_else(|| n.child_by_field_name("index"))
                                .map(named_children)
                                .unwrap_or_default();
                            let mut d = cx.deriv(a, 0);
                            for i in &idx {
                                d = d.add(cx.deriv(*i, 0));
                            }
                            let index = idx
                                .first()
                                .map_or(String::new(), |i| node_text(src, *i).to_string());
                            let kind = self.kind_in_context(n);
                            self.record(cx, buffer, index, kind, d, n);
                        }
                    }
                }
                "pointer_expression" => {
                    let deref =
                        n.child_by_field_name("operator").map(|o| node_text(src, o)) == Some("*");
                    if let (true, Some(a)) = (deref, n.child_by_field_name("argument")) {
                        if let Some(buffer) = cx.buffer_of(a, 0) {
                            let d = cx.deriv(a, 0);
                            let kind = self.kind_in_context(n);
                            let text = node_text(src, a);
                            let text = text
                                .strip_prefix('(')
                                .and_then(|t| t.strip_suffix(')'))
                                .unwrap_or(text);
                            self.record(cx, buffer, text.to_string(), kind, d, n);
                        }
                    }
                }
                "field_expression" => {
                    if let (Some(a), Some(fld)) = (
                        n.child_by_field_name("argument"),
                        n.child_by_field_name("field"),
                    ) {
                        match node_text(src, a) {
                            "blockDim" => self.facts.uses_block_dim = true,
                            "threadIdx" => match node_text(src, fld) {
                                "x" => self.facts.thread_axes[0] = true,
                                "y" => self.facts.thread_axes[1] = true,
                                "z" => self.facts.thread_axes[2] = true,
                                _ => {}
                            },
                            _ => {}
                        }
                    }
                }
                "declaration" => self.shared_decl(cx, n),
                "call_expression" => self.call(cx, n, depth),
                _ => {}
            }
            let mut c = n.walk();
            let children: Vec<Node> = n.children(&mut c).collect();
            for ch in children {
                self.visit(cx, ch, depth + 1);
            }
            if pushed_loop {
                self.loops.pop();
            }
        }

        fn record(
            &mut self,
            cx: &FnCx<'t>,
            buffer: String,
            index: String,
            kind: AccessKind,
            d: Deriv,
            n: Node,
        ) {
            if kind != AccessKind::Load {
                self.written.insert(buffer.clone());
            }
            for &i in &self.loops {
                if let Some(l) = self.facts.loops.get_mut(i) {
                    match kind {
                        AccessKind::Load => l.global_loads += 1,
                        AccessKind::Store => l.global_stores += 1,
                        AccessKind::LoadStore | AccessKind::Atomic => {
                            l.global_loads += 1;
                            l.global_stores += 1;
                        }
                    }
                }
            }
            self.facts.accesses.push(Access {
                buffer,
                index: collapse_ws(&index),
                kind,
                stride: d.stride(),
                in_loop: !self.loops.is_empty(),
                line: line_of(n),
                via: cx.via.clone(),
            });
        }

        /// Load, store or both, from where an lvalue sits.
        fn kind_in_context(&self, n: Node) -> AccessKind {
            let Some(p) = n.parent() else {
                return AccessKind::Load;
            };
            match p.kind() {
                "assignment_expression" if p.child_by_field_name("left") == Some(n) => {
                    match p
                        .child_by_field_name("operator")
                        .map(|o| node_text(self.src, o))
                    {
                        Some("=") | None => AccessKind::Store,
                        _ => AccessKind::LoadStore,
                    }
                }
                "update_expression" => AccessKind::LoadStore,
                "pointer_expression"
                    if p.child_by_field_name("operator")
                        .map(|o| node_text(self.src, o))
                        == Some("&") =>
                {
                    // `&p[i]` handed to a call: atomics, `__ldg`, `__stcs`, or unknown.
                    let call = p
                        .parent()
                        .filter(|a| a.kind() == "argument_list")
                        .and_then(|a| a.parent());
                    match call.map(|c| call_name(self.src, c)) {
                        Some(name) if name.starts_with("atomic") => AccessKind::Atomic,
                        Some(name) if name.starts_with("__ld") => AccessKind::Load,
                        Some(name) if name.starts_with("__st") => AccessKind::Store,
                        _ => AccessKind::LoadStore,
                    }
                }
                _ => AccessKind::Load,
            }
        }

        fn loop_fact(&mut self, cx: &mut FnCx<'t>, n: Node<'t>) -> LoopFact {
            let src = self.src;
            let mut fact = LoopFact {
                line: line_of(n),
                counted: false,
                var: None,
                trip_count: None,
                unroll_pragma: false,
                global_loads: 0,
                global_stores: 0,
                via: cx.via.clone(),
            };
            // `#pragma unroll` right before the loop (comments in between allowed).
            let mut prev = n.prev_named_sibling();
            while let Some(p) = prev.filter(|p| p.kind() == "comment") {
                prev = p.prev_named_sibling();
            }
            if let Some(p) = prev.filter(|p| p.kind() == "preproc_call") {
                let dir = p
                    .child_by_field_name("directive")
                    .map(|d| node_text(src, d));
                let arg = p
                    .child_by_field_name("argument")
                    .map_or("", |a| node_text(src, a));
                fact.unroll_pragma =
                    dir == Some("#pragma") && arg.trim_start().starts_with("unroll");
            }
            if n.kind() != "for_statement" {
                return fact;
            }
            // init: `int v = e` or `v = e`
            let (var, init) = match n.child_by_field_name("initializer") {
                Some(i) if i.kind() == "declaration" => {
                    let d = named_children(i)
                        .into_iter()
                        .find(|c| c.kind() == "init_declarator");
                    let name = d
                        .and_then(|d| d.child_by_field_name("declarator"))
                        .and_then(|d| declared_name(src, d));
                    (name, d.and_then(|d| d.child_by_field_name("value")))
                }
                Some(i) if i.kind() == "assignment_expression" => (
                    i.child_by_field_name("left")
                        .filter(|l| l.kind() == "identifier")
                        .map(|l| node_text(src, l).to_string()),
                    i.child_by_field_name("right"),
                ),
                _ => (None, None),
            };
            let Some(var) = var else {
                return fact;
            };
            // condition: `v <op> bound` (or `bound <op> v`, flipped)
            let Some(cond) = n
                .child_by_field_name("condition")
                .filter(|c| c.kind() == "binary_expression")
            else {
                return fact;
            };
            let (Some(l), Some(r), Some(op)) = (
                cond.child_by_field_name("left"),
                cond.child_by_field_name("right"),
                cond.child_by_field_name("operator")
                    .map(|o| node_text(src, o)),
            ) else {
                return fact;
            };
            let (cmp, bound) = if node_text(src, l) == var {
                (op, r)
            } else if node_text(src, r) == var {
                let flipped = match op {
                    "<" => ">",
                    "<=" => ">=",
                    ">" => "<",
                    ">=" => "<=",
                    o => o,
                };
                (flipped, l)
            } else {
                return fact;
            };
            if !matches!(cmp, "<" | "<=" | ">" | ">=" | "!=") {
                return fact;
            }
            // update: `++v`, `v--`, `v += c`, `v >>= 1`, `v = v + c`
            let Some(upd) = n.child_by_field_name("update") else {
                return fact;
            };
            let (uop, step) = match upd.kind() {
                "update_expression" => {
                    let arg = upd
                        .child_by_field_name("argument")
                        .map(|a| node_text(src, a));
                    if arg != Some(var.as_str()) {
                        return fact;
                    }
                    let dec = node_text(src, upd).contains("--");
                    (if dec { "-=" } else { "+=" }, Some(1))
                }
                "assignment_expression" => {
                    let left = upd.child_by_field_name("left").map(|a| node_text(src, a));
                    let op = upd
                        .child_by_field_name("operator")
                        .map_or("=", |o| node_text(src, o));
                    if left != Some(var.as_str()) || op == "=" {
                        return fact;
                    }
                    (
                        op,
                        upd.child_by_field_name("right")
                            .and_then(|r| cx.konst(r, 0)),
                    )
                }
                _ => return fact,
            };
            fact.counted = true;
            fact.var = Some(var);
            if let (Some(i), Some(b), Some(s)) =
                (init.and_then(|i| cx.konst(i, 0)), cx.konst(bound, 0), step)
            {
                fact.trip_count = simulate_trip_count(i, cmp, b, uop, s);
            }
            fact
        }

        fn shared_decl(&mut self, cx: &FnCx<'t>, n: Node<'t>) {
            let src = self.src;
            let children = named_children(n);
            let has = |kind: &str, word: &str| {
                children
                    .iter()
                    .any(|c| c.kind() == kind && node_text(src, *c) == word)
            };
            if !has("type_qualifier", "__shared__") && !has("attribute_specifier", "__shared__") {
                return;
            }
            if has("storage_class_specifier", "extern") {
                self.facts.dynamic_smem = true;
                return;
            }
            let ty = n
                .child_by_field_name("type")
                .map_or("", |t| node_text(src, t));
            let elem = elem_bytes(ty);
            let mut c = n.walk();
            for d in n.children_by_field_name("declarator", &mut c) {
                let mut d = if d.kind() == "init_declarator" {
                    d.child_by_field_name("declarator").unwrap_or(d)
                } else {
                    d
                };
                let mut count: Option<u64> = Some(1);
                while d.kind() == "array_declarator" {
                    let size = d.child_by_field_name("size").and_then(|s| cx.konst(s, 0));
                    count = match (count, size) {
                        (Some(c), Some(s)) if s > 0 => c.checked_mul(s.unsigned_abs()),
                        _ => None,
                    };
                    match d.child_by_field_name("declarator") {
                        Some(inner) => d = inner,
                        None => break,
                    }
                }
                match (count, elem) {
                    (Some(c), Some(e)) => {
                        self.facts.static_smem_bytes = self
                            .facts
                            .static_smem_bytes
                            .saturating_add(c.saturating_mul(e));
                    }
                    _ => self.facts.static_smem_unsized = true,
                }
            }
        }

        fn call(&mut self, cx: &mut FnCx<'t>, n: Node<'t>, depth: usize) {
            let src = self.src;
            let name = call_name(src, n);
            let args: Vec<Node> = n
                .child_by_field_name("arguments")
                .map(named_children)
                .unwrap_or_default();
            if name.starts_with("atomic") {
                self.facts.atomics += 1;
                // `atomicAdd(out, v)` / `atomicAdd(out + i, v)`; `&p[i]` is recorded by
                // the subscript itself.
                if let Some(a) = args.first().filter(|a| a.kind() != "pointer_expression") {
                    if let Some(buffer) = cx.buffer_of(*a, 0) {
                        let d = cx.deriv(*a, 0);
                        let index = match a.kind() {
                            "identifier" => "0".to_string(),
                            _ => node_text(src, *a).to_string(),
                        };
                        self.record(cx, buffer, index, AccessKind::Atomic, d, n);
                    }
                }
                return;
            }
            match name.as_str() {
                "__syncthreads"
                | "__syncwarp"
                | "__syncthreads_or"
                | "__syncthreads_and"
                | "__syncthreads_count" => {
                    self.facts.barriers += 1;
                }
                n if n.starts_with("__shfl") => self.facts.shuffles += 1,
                "mma_sync" | "wgmma" | "mma" => self.facts.tensor_core_ops += 1,
                n if FAST_MATH.contains(&n) => {
                    *self.facts.fast_math_calls.entry(n.to_string()).or_default() += 1;
                }
                _ => {}
            }
            if let Some(func) = self.funcs.get(&name).copied() {
                if self.call_stack.len() <= MAX_CALL_DEPTH && !self.call_stack.contains(&name) {
                    self.inline_call(cx, func, &name, &args, depth);
                    return;
                }
            }
            // A buffer passed to code we do not follow may be written there.
            if !name.starts_with("__ld") {
                for a in &args {
                    if a.kind() == "identifier" || a.kind() == "binary_expression" {
                        if let Some(b) = cx.buffer_of(*a, 0) {
                            self.written.insert(b);
                        }
                    }
                }
            }
        }

        fn inline_call(
            &mut self,
            cx: &mut FnCx<'t>,
            func: Node<'t>,
            name: &str,
            args: &[Node<'t>],
            depth: usize,
        ) {
            let Some(body) = func.child_by_field_name("body") else {
                return;
            };
            let mut bindings = HashMap::new();
            for (p, a) in param_names(self.src, func).into_iter().zip(args) {
                let Some(p) = p else { continue };
                let b = match cx.buffer_of(*a, 0) {
                    Some(buffer) => Binding::Buffer {
                        buffer,
                        d: cx.deriv(*a, 0),
                    },
                    None => Binding::Scalar(cx.deriv(*a, 0)),
                };
                bindings.insert(p, b);
            }
            let mut inner = FnCx::new(self.src, body, bindings, Some(name.to_string()));
            self.call_stack.push(name.to_string());
            self.visit(&mut inner, body, depth + 1);
            self.call_stack.pop();
        }
    }

    /// Bytes of one element of a shared array's type, when known.
    fn elem_bytes(ty: &str) -> Option<u64> {
        let t = collapse_ws(ty);
        Some(match t.as_str() {
            "char" | "unsigned char" | "signed char" | "bool" | "int8_t" | "uint8_t" => 1,
            "short" | "unsigned short" | "__half" | "half" | "__nv_bfloat16" | "int16_t"
            | "uint16_t" => 2,
            "float" | "int" | "unsigned" | "unsigned int" | "__half2" | "half2"
            | "__nv_bfloat162" | "int32_t" | "uint32_t" => 4,
            "double" | "long long" | "unsigned long long" | "int64_t" | "uint64_t" | "float2"
            | "int2" | "size_t" => 8,
            "float4" | "int4" | "double2" | "uint4" => 16,
            _ => return None,
        })
    }
}

mod triton {
    //! The Triton scan: the `@triton.jit` kernel body. The lane is a `tl.arange`
    //! element: `x_ptr + pid * BLOCK + tl.arange(0, BLOCK)` is unit-stride. A 2-D tile
    //! (`offs[:, None]`) is reported as irregular rather than guessed.

    use super::*;

    pub(super) fn scan(f: &mut Facts, src: &str, tree: &Tree, kernel: &Kernel) {
        let root = tree.root_node();
        let Some(def) = root
            .descendant_for_byte_range(kernel.name_range.start, kernel.name_range.end)
            .and_then(|n| n.parent())
            .filter(|n| n.kind() == "function_definition")
        else {
            return;
        };
        let Some(body) = def.child_by_field_name("body") else {
            return;
        };
        let params: HashSet<String> = kernel
            .params
            .iter()
            .filter(|p| matches!(p.kind, ParamKind::TritonArg { .. }))
            .map(|p| p.name.clone())
            .collect();
        let mut cx = Cx {
            src,
            params,
            defs: HashMap::new(),
            memo: HashMap::new(),
            buffer_memo: RefCell::default(),
        };
        cx.collect_defs(body, 0);
        let mut scan = Scan {
            facts: f,
            loops: Vec::new(),
        };
        scan.visit(&mut cx, body, 0);
    }

    /// `tl.load`, or `triton.language.load` as `tl.load`.
    fn callee(src: &str, call: Node) -> String {
        let f = call
            .child_by_field_name("function")
            .map_or("", |f| node_text(src, f));
        match f.strip_prefix("triton.language.") {
            Some(rest) => format!("tl.{rest}"),
            None => f.to_string(),
        }
    }

    fn positional(args: Node) -> Vec<Node> {
        named_children(args)
            .into_iter()
            .filter(|a| a.kind() != "keyword_argument")
            .collect()
    }

    fn keyword<'t>(src: &str, args: Node<'t>, name: &str) -> Option<Node<'t>> {
        named_children(args).into_iter().find_map(|a| {
            (a.kind() == "keyword_argument"
                && a.child_by_field_name("name").map(|n| node_text(src, n)) == Some(name))
            .then(|| a.child_by_field_name("value"))
            .flatten()
        })
    }

    struct Cx<'t> {
        src: &'t str,
        /// Non-constexpr parameters: pointers or scalars, both lane-independent.
        params: HashSet<String>,
        defs: HashMap<String, Vec<Def<'t>>>,
        memo: HashMap<String, Memo>,
        /// Per-name results of `buffer_of` (None while being computed).
        buffer_memo: RefCell<HashMap<String, Option<String>>>,
    }

    impl<'t> Settle<'t> for Cx<'t> {
        fn memo(&mut self) -> &mut HashMap<String, Memo> {
            &mut self.memo
        }
        fn deriv_def(&mut self, def: Def<'t>, cur: Deriv) -> Deriv {
            Cx::deriv_def(self, def, cur)
        }
    }

    impl<'t> Cx<'t> {
        fn collect_defs(&mut self, n: Node<'t>, depth: usize) {
            if depth > MAX_DEPTH {
                return;
            }
            match n.kind() {
                "assignment" | "augmented_assignment" => {
                    if let (Some(l), r) = (
                        n.child_by_field_name("left"),
                        n.child_by_field_name("right"),
                    ) {
                        let op = if n.kind() == "assignment" {
                            "="
                        } else {
                            n.child_by_field_name("operator")
                                .map_or("opaque", |o| node_text(self.src, o))
                        };
                        if l.kind() == "identifier" {
                            self.defs
                                .entry(node_text(self.src, l).to_string())
                                .or_default()
                                .push(Def { op, value: r });
                        } else {
                            for name in named_children(l)
                                .into_iter()
                                .filter(|c| c.kind() == "identifier")
                            {
                                self.defs
                                    .entry(node_text(self.src, name).to_string())
                                    .or_default()
                                    .push(Def {
                                        op: "opaque",
                                        value: None,
                                    });
                            }
                        }
                    }
                }
                "for_statement" => {
                    if let Some(l) = n
                        .child_by_field_name("left")
                        .filter(|l| l.kind() == "identifier")
                    {
                        // A loop counter is the same for every lane.
                        self.defs
                            .entry(node_text(self.src, l).to_string())
                            .or_default()
                            .push(Def {
                                op: "loop",
                                value: None,
                            });
                    }
                }
                _ => {}
            }
            let mut c = n.walk();
            for ch in n.children(&mut c) {
                self.collect_defs(ch, depth + 1);
            }
        }

        fn konst(&self, n: Node) -> Option<i64> {
            match n.kind() {
                "integer" => int_literal(node_text(self.src, n)),
                "unary_operator"
                    if n.child_by_field_name("operator")
                        .map(|o| node_text(self.src, o))
                        == Some("-") =>
                {
                    self.konst(n.child_by_field_name("argument")?)?
                        .checked_neg()
                }
                _ => None,
            }
        }

        fn deriv_name(&mut self, name: &str) -> Deriv {
            if self.params.contains(name) {
                return ZERO;
            }
            let Some(defs) = self.defs.get(name).cloned() else {
                return ZERO;
            };
            self.settle(name, &defs)
        }

        fn deriv_def(&mut self, def: Def<'t>, cur: Deriv) -> Deriv {
            match (def.op, def.value) {
                ("loop", _) => ZERO,
                (_, None) => Unknown,
                ("=", Some(v)) => self.deriv(v, 0),
                ("+=", Some(v)) => {
                    let d = self.deriv(v, 0);
                    cur.add(d)
                }
                ("-=", Some(v)) => {
                    let d = self.deriv(v, 0);
                    cur.add(d.neg())
                }
                (_, Some(v)) => {
                    let d = self.deriv(v, 0);
                    Deriv::opaque(&[cur, d])
                }
            }
        }

        fn deriv(&mut self, n: Node<'t>, depth: usize) -> Deriv {
            if depth > MAX_DEPTH {
                return Unknown;
            }
            let src = self.src;
            match n.kind() {
                "integer" | "float" | "true" | "false" | "none" | "string" => ZERO,
                "identifier" => self.deriv_name(node_text(src, n)),
                "parenthesized_expression" => match named_children(n).first() {
                    Some(c) => self.deriv(*c, depth + 1),
                    None => Unknown,
                },
                "unary_operator" => {
                    let Some(a) = n.child_by_field_name("argument") else {
                        return Unknown;
                    };
                    let d = self.deriv(a, depth + 1);
                    match n.child_by_field_name("operator").map(|o| node_text(src, o)) {
                        Some("-") => d.neg(),
                        Some("+") => d,
                        _ => Deriv::opaque(&[d]),
                    }
                }
                "binary_operator" => {
                    let (Some(l), Some(r), Some(op)) = (
                        n.child_by_field_name("left"),
                        n.child_by_field_name("right"),
                        n.child_by_field_name("operator"),
                    ) else {
                        return Unknown;
                    };
                    let (dl, dr) = (self.deriv(l, depth + 1), self.deriv(r, depth + 1));
                    match node_text(src, op) {
                        "+" => dl.add(dr),
                        "-" => dl.add(dr.neg()),
                        "*" => Deriv::mul(dl, self.konst(l), dr, self.konst(r)),
                        _ => Deriv::opaque(&[dl, dr]),
                    }
                }
                "call" => {
                    let name = callee(src, n);
                    let args = n
                        .child_by_field_name("arguments")
                        .map(positional)
                        .unwrap_or_default();
                    match name.as_str() {
                        "tl.arange" => Const(1),
                        "tl.multiple_of" | "tl.max_contiguous" | "tl.max_constancy" => {
                            match args.first() {
                                Some(a) => self.deriv(*a, depth + 1),
                                None => Unknown,
                            }
                        }
                        _ => {
                            let ds: Vec<Deriv> =
                                args.iter().map(|a| self.deriv(*a, depth + 1)).collect();
                            Deriv::opaque(&ds)
                        }
                    }
                }
                // `offs[:, None]`: a 2-D tile; which axis is contiguous is not tracked.
                "subscript" => match n.child_by_field_name("value") {
                    Some(v) => Deriv::opaque(&[self.deriv(v, depth + 1)]),
                    None => Unknown,
                },
                "conditional_expression" => {
                    let ch = named_children(n);
                    let ds: Vec<Deriv> = ch.iter().map(|c| self.deriv(*c, depth + 1)).collect();
                    match ds.as_slice() {
                        [a, _, b] if a == b && *a != Unknown => *a,
                        _ => Deriv::opaque(&ds),
                    }
                }
                "comparison_operator" | "boolean_operator" | "not_operator" => {
                    let ch = named_children(n);
                    let ds: Vec<Deriv> = ch.iter().map(|c| self.deriv(*c, depth + 1)).collect();
                    Deriv::opaque(&ds)
                }
                _ => Unknown,
            }
        }

        /// The pointer parameter an address expression is based on.
        fn buffer_of(&self, n: Node, depth: usize) -> Option<String> {
            if depth > MAX_DEPTH {
                return None;
            }
            match n.kind() {
                "identifier" => {
                    let name = node_text(self.src, n);
                    if self.params.contains(name) {
                        return Some(name.to_string());
                    }
                    if let Some(b) = self.buffer_memo.borrow().get(name) {
                        return b.clone();
                    }
                    self.buffer_memo.borrow_mut().insert(name.to_string(), None);
                    let first = self.defs.get(name)?.first().copied()?;
                    let b = self.buffer_of(first.value?, depth + 1);
                    self.buffer_memo
                        .borrow_mut()
                        .insert(name.to_string(), b.clone());
                    b
                }
                "parenthesized_expression" => {
                    self.buffer_of(*named_children(n).first()?, depth + 1)
                }
                "binary_operator" => {
                    let op = node_text(self.src, n.child_by_field_name("operator")?);
                    let l = n.child_by_field_name("left")?;
                    let r = n.child_by_field_name("right")?;
                    match op {
                        "+" => self
                            .buffer_of(l, depth + 1)
                            .or_else(|| self.buffer_of(r, depth + 1)),
                        "-" => self.buffer_of(l, depth + 1),
                        _ => None,
                    }
                }
                _ => None,
            }
        }

        /// A literal trip count for `range(a[, b[, c]])`.
        fn range_count(&self, args: &[Node]) -> Option<u64> {
            let k: Vec<i64> = args.iter().map(|a| self.konst(*a)).collect::<Option<_>>()?;
            let (start, stop, step) = match k.as_slice() {
                [stop] => (0, *stop, 1),
                [start, stop] => (*start, *stop, 1),
                [start, stop, step] => (*start, *stop, *step),
                _ => return None,
            };
            if step > 0 {
                simulate_trip_count(start, "<", stop, "+=", step)
            } else if step < 0 {
                simulate_trip_count(start, ">", stop, "+=", step)
            } else {
                None
            }
        }
    }

    struct Scan<'a> {
        facts: &'a mut Facts,
        loops: Vec<usize>,
    }

    impl<'t> Scan<'_> {
        fn visit(&mut self, cx: &mut Cx<'t>, n: Node<'t>, depth: usize) {
            if depth > MAX_DEPTH {
                return;
            }
            let src = cx.src;
            let mut pushed = false;
            match n.kind() {
                "for_statement" | "while_statement" => {
                    let mut fact = LoopFact {
                        line: line_of(n),
                        counted: false,
                        var: None,
                        trip_count: None,
                        unroll_pragma: false,
                        global_loads: 0,
                        global_stores: 0,
                        via: None,
                    };
                    if n.kind() == "for_statement" {
                        let right = n
                            .child_by_field_name("right")
                            .filter(|r| r.kind() == "call");
                        let name = right.map(|r| callee(src, r));
                        if let (Some(r), Some(name)) = (right, name) {
                            if matches!(name.as_str(), "range" | "tl.range" | "tl.static_range") {
                                fact.counted = true;
                                fact.var = n
                                    .child_by_field_name("left")
                                    .filter(|l| l.kind() == "identifier")
                                    .map(|l| node_text(src, l).to_string());
                                fact.unroll_pragma = name == "tl.static_range";
                                let args = r
                                    .child_by_field_name("arguments")
                                    .map(positional)
                                    .unwrap_or_default();
                                fact.trip_count = cx.range_count(&args);
                            }
                        }
                    }
                    self.facts.loops.push(fact);
                    self.loops.push(self.facts.loops.len() - 1);
                    pushed = true;
                }
                "attribute" => {
                    let t = node_text(src, n);
                    if t == "tl.program_id" {
                        if let Some(call) = n.parent().filter(|p| p.kind() == "call") {
                            let args = call.child_by_field_name("arguments");
                            let axis = args
                                .and_then(|a| {
                                    positional(a)
                                        .first()
                                        .copied()
                                        .or_else(|| keyword(src, a, "axis"))
                                })
                                .and_then(|a| cx.konst(a));
                            if let Some(ax) = axis
                                .and_then(|a| usize::try_from(a).ok())
                                .filter(|a| *a < 3)
                            {
                                self.facts.thread_axes[ax] = true;
                            }
                        }
                    }
                }
                "call" => self.call(cx, n),
                _ => {}
            }
            let mut c = n.walk();
            let children: Vec<Node> = n.children(&mut c).collect();
            for ch in children {
                self.visit(cx, ch, depth + 1);
            }
            if pushed {
                self.loops.pop();
            }
        }

        fn call(&mut self, cx: &mut Cx<'t>, n: Node<'t>) {
            let src = cx.src;
            let name = callee(src, n);
            let Some(args) = n.child_by_field_name("arguments") else {
                return;
            };
            let kind = match name.as_str() {
                "tl.load" => Some(AccessKind::Load),
                "tl.store" => Some(AccessKind::Store),
                a if a.starts_with("tl.atomic_") => {
                    self.facts.atomics += 1;
                    Some(AccessKind::Atomic)
                }
                "tl.dot" | "tl.dot_scaled" => {
                    self.facts.tensor_core_ops += 1;
                    None
                }
                "tl.sum"
                | "tl.max"
                | "tl.min"
                | "tl.reduce"
                | "tl.argmax"
                | "tl.argmin"
                | "tl.xor_sum"
                | "tl.cumsum"
                | "tl.cumprod"
                | "tl.associative_scan" => {
                    self.facts.reductions += 1;
                    None
                }
                "tl.debug_barrier" => {
                    self.facts.barriers += 1;
                    None
                }
                _ => None,
            };
            let Some(kind) = kind else {
                return;
            };
            let ptr = positional(args)
                .first()
                .copied()
                .or_else(|| keyword(src, args, "pointer"));
            let Some(ptr) = ptr else {
                return;
            };
            let Some(buffer) = cx.buffer_of(ptr, 0) else {
                return;
            };
            let d = cx.deriv(ptr, 0);
            for &i in &self.loops {
                if let Some(l) = self.facts.loops.get_mut(i) {
                    match kind {
                        AccessKind::Load => l.global_loads += 1,
                        AccessKind::Store => l.global_stores += 1,
                        AccessKind::LoadStore | AccessKind::Atomic => {
                            l.global_loads += 1;
                            l.global_stores += 1;
                        }
                    }
                }
            }
            self.facts.accesses.push(Access {
                buffer,
                index: collapse_ws(node_text(src, ptr)),
                kind,
                stride: d.stride(),
                in_loop: !self.loops.is_empty(),
                line: line_of(n),
                via: None,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use expect_test::{expect, Expect};

    use super::*;
    use crate::document::Document;
    use crate::syntax;

    /// The facts of kernel `name` (or the last kernel) in a source text.
    fn facts_of(lang: Lang, src: &str, name: Option<&str>) -> Facts {
        let doc = Document::new(lang, 0, src);
        let tree = doc.tree().expect("the test source parses");
        let model = syntax::analyze(lang, src, tree);
        let kernel = match name {
            Some(n) => model.kernel(n).expect("the named kernel exists"),
            None => model.kernels.last().expect("the source has a kernel"),
        };
        static_facts(lang, src, tree, &model, kernel)
    }

    fn check_describe(lang: Lang, src: &str, name: Option<&str>, expect: Expect) {
        expect.assert_eq(&facts_of(lang, src, name).describe());
    }

    /// `buffer index: kind stride` per access, one a line.
    fn check_accesses(lang: Lang, src: &str, expect: Expect) {
        let f = facts_of(lang, src, None);
        let lines: Vec<String> = f
            .accesses
            .iter()
            .map(|a| {
                format!(
                    "{} [{}]: {:?} {:?}{}{}",
                    a.buffer,
                    a.index,
                    a.kind,
                    a.stride,
                    if a.in_loop { " in-loop" } else { "" },
                    a.via
                        .as_ref()
                        .map_or(String::new(), |v| format!(" via {v}"))
                )
            })
            .collect();
        expect.assert_eq(&lines.join("\n"));
    }

    #[test]
    fn matmul_naive() {
        check_describe(
            Lang::Cuda,
            include_str!("../../../examples/matmul_naive.cu"),
            None,
            expect![[r#"
                - kernel `matmul` (CUDA), block (16, 16, 1)
                - loop at line 14: counted over `i`, trip count known at run time, no unroll pragma, 2 global loads and 0 stores inside
                - line 15: load `a` via `row * k + i`, same address for every lane (broadcast), in a loop
                - line 15: load `b` via `i * n + col`, unit-stride, in a loop
                - line 17: store `c` via `row * n + col`, unit-stride
                - pointers without `__restrict__`: a, b, c; read-only without `const`: none
                - shared memory: none; barriers 0; atomics 0; shuffles 0
                - `__launch_bounds__`: no; `__maxnreg__`: no; reads blockDim: yes
                - fast-math-able calls: none
                - arithmetic intensity 170.7 FLOP/byte (ridge 20.0)
                - facts: block_2d, block_resizable, has_counted_loop, loop_without_unroll_pragma, loop_over_global_memory, pointer_without_restrict, unit_stride_access, compute_bound"#]],
        );
    }

    #[test]
    fn saxpy() {
        check_describe(
            Lang::Cuda,
            include_str!("../../../examples/saxpy.cu"),
            None,
            expect![[r#"
                - kernel `saxpy` (CUDA), block (256, 1, 1)
                - loops: none
                - line 12: store `y` via `i`, unit-stride
                - line 12: load `x` via `i`, unit-stride
                - line 12: load `y` via `i`, unit-stride
                - pointers without `__restrict__`: x, y; read-only without `const`: none
                - shared memory: none; barriers 0; atomics 0; shuffles 0
                - `__launch_bounds__`: no; `__maxnreg__`: no; reads blockDim: yes
                - fast-math-able calls: none
                - moves 192 MiB per run; no `flops` in the spec
                - facts: block_1d, block_resizable, pointer_without_restrict, unit_stride_access, one_thread_per_element_1d, memory_bound"#]],
        );
    }

    #[test]
    fn reduce_sum_both_kernels() {
        let src = include_str!("../../../examples/reduce_sum.cu");
        check_describe(
            Lang::Cuda,
            src,
            Some("reduce_naive"),
            expect![[r#"
            - kernel `reduce_naive` (CUDA), block (256, 1, 1)
            - loops: none
            - line 15: atomic `out` via `0`, same address for every lane (broadcast)
            - line 6: load `x` via `i`, unit-stride (in `load_as_float`)
            - pointers without `__restrict__`: x, out; read-only without `const`: none
            - shared memory: none; barriers 0; atomics 1; shuffles 0
            - `__launch_bounds__`: no; `__maxnreg__`: no; reads blockDim: yes
            - fast-math-able calls: none
            - moves 8.0 MiB per run; no `flops` in the spec
            - facts: block_1d, block_resizable, pointer_without_restrict, unit_stride_access, one_thread_per_element_1d, has_atomics, reduction_pattern, memory_bound"#]],
        );
        check_describe(
            Lang::Cuda,
            src,
            Some("reduce_tree"),
            expect![[r#"
                - kernel `reduce_tree` (CUDA), block (128, 1, 1)
                - tunables: BLOCK in [128, 256, 512]
                - loop at line 29: counted over `s`, trip count known at run time, no unroll pragma, 0 global loads and 0 stores inside
                - line 6: load `x` via `i`, unit-stride (in `load_as_float`)
                - line 33: atomic `out` via `0`, same address for every lane (broadcast)
                - pointers without `__restrict__`: x, out; read-only without `const`: none
                - shared memory: dynamic (512 B in the spec); barriers 2; atomics 1; shuffles 0
                - `__launch_bounds__`: no; `__maxnreg__`: no; reads blockDim: no
                - fast-math-able calls: none
                - moves 8.0 MiB per run; no `flops` in the spec
                - facts: has_tunables, block_1d, has_counted_loop, loop_without_unroll_pragma, pointer_without_restrict, unit_stride_access, one_thread_per_element_1d, uses_shared_memory, has_atomics, reduction_pattern, memory_bound"#]],
        );
    }

    #[test]
    fn vector_add() {
        check_describe(
            Lang::Triton,
            include_str!("../../../examples/vector_add.py"),
            None,
            expect![[r#"
                - kernel `add_kernel` (Triton), num_warps 4
                - tunables: BLOCK in [64, 256, 1024, 2048]
                - constexpr params: BLOCK
                - loops: none
                - line 15: load `x_ptr` via `x_ptr + offs`, unit-stride
                - line 16: load `y_ptr` via `y_ptr + offs`, unit-stride
                - line 17: store `out_ptr` via `out_ptr + offs`, unit-stride
                - atomics 0; reductions 0; tl.dot 0
                - moves 192 MiB per run; no `flops` in the spec
                - facts: has_tunables, has_constexpr_params, unit_stride_access, memory_bound"#]],
        );
    }

    #[test]
    fn softmax() {
        check_describe(
            Lang::Triton,
            include_str!("../../../examples/softmax.py"),
            None,
            expect![[r#"
                - kernel `softmax_kernel` (Triton), num_warps 4
                - tunables: num_warps in [2, 4, 8]
                - constexpr params: BLOCK
                - loops: none
                - line 16: load `x_ptr` via `x_ptr + row * stride + offs`, unit-stride
                - line 19: store `out_ptr` via `out_ptr + row * stride + offs`, unit-stride
                - atomics 0; reductions 2; tl.dot 0
                - moves 32 MiB per run; no `flops` in the spec
                - facts: has_tunables, has_constexpr_params, unit_stride_access, reduction_pattern, memory_bound"#]],
        );
    }

    #[test]
    fn cuda_strides() {
        check_accesses(
            Lang::Cuda,
            r#"
__device__ float get(const float* p, int j) { return p[j]; }
__global__ void k(int n, int s, float* x, const float* y, const int* idx, float* out) {
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    x[2 * threadIdx.x] = 1.0f;
    x[threadIdx.x << 2] = 1.0f;
    x[threadIdx.x * s] = y[tid % 32];
    x[idx[i]] += y[(int)i - 1];
    x[blockIdx.x] = y[threadIdx.y * n];
    const float* row = y + blockIdx.x * n;
    out[i] = row[tid] + get(y, i + 1) + get(row, 7) + *(y + i);
    for (int g = i; g < n; g += blockDim.x * gridDim.x) out[g] = y[g];
    atomicAdd(out, 1.0f);
    atomicAdd(&out[i], 1.0f);
}
"#,
            expect![[r#"
                x [2 * threadIdx.x]: Store Strided(2)
                x [threadIdx.x << 2]: Store Strided(4)
                x [threadIdx.x * s]: Store Symbolic
                y [tid % 32]: Load Unknown
                x [idx[i]]: LoadStore Unknown
                idx [i]: Load Unit
                y [(int)i - 1]: Load Unit
                x [blockIdx.x]: Store Uniform
                y [threadIdx.y * n]: Load Uniform
                out [i]: Store Unit
                y [tid]: Load Unit
                y [j]: Load Unit via get
                y [j]: Load Uniform via get
                y [y + i]: Load Unit
                out [g]: Store Unit in-loop
                y [g]: Load Unit in-loop
                out [0]: Atomic Uniform
                out [i]: Atomic Unit"#]],
        );
    }

    #[test]
    fn triton_strides() {
        check_accesses(
            Lang::Triton,
            r#"
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, y_ptr, stride, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    a = tl.load(x_ptr + offs)
    b = tl.load(x_ptr + offs * 2)
    c = tl.load(x_ptr + offs * stride)
    d = tl.load(x_ptr + offs[:, None])
    e = tl.load(y_ptr + pid)
    ptrs = y_ptr + offs
    for i in range(0, 4):
        tl.store(ptrs, a + b)
        ptrs += BLOCK
    tl.atomic_add(y_ptr, 1.0)
"#,
            expect![[r#"
                x_ptr [x_ptr + offs]: Load Unit
                x_ptr [x_ptr + offs * 2]: Load Strided(2)
                x_ptr [x_ptr + offs * stride]: Load Symbolic
                x_ptr [x_ptr + offs[:, None]]: Load Unknown
                y_ptr [y_ptr + pid]: Load Uniform
                y_ptr [ptrs]: Store Unit in-loop
                y_ptr [y_ptr]: Atomic Uniform"#]],
        );
    }

    #[test]
    fn loops_and_unroll_pragmas() {
        let f = facts_of(
            Lang::Cuda,
            r#"
#define N 64
__global__ void k(float* x, int n) {
    #pragma unroll 4
    for (int i = 0; i < 16; ++i) x[i] = 0;
    for (int s = 128; s > 0; s >>= 1) x[s] = 1;
    for (int j = n; j >= 0; j -= 2) {}
    for (int q = 0; q < N; q++) {}
    while (n > 0) { n--; }
}
"#,
            None,
        );
        let got: Vec<String> = f
            .loops
            .iter()
            .map(|l| {
                format!(
                    "{} {:?} {:?} {:?} unroll={}",
                    l.line, l.counted, l.var, l.trip_count, l.unroll_pragma
                )
            })
            .collect();
        expect![[r#"
            5 true Some("i") Some(16) unroll=true
            6 true Some("s") Some(8) unroll=false
            7 true Some("j") None unroll=false
            8 true Some("q") None unroll=false
            9 false None None unroll=false"#]]
        .assert_eq(&got.join("\n"));
        assert_eq!(f.holds("loop_without_unroll_pragma"), Some(true));

        let t = facts_of(
            Lang::Triton,
            r#"
import triton.language as tl
@triton.jit
def k(x_ptr, K: tl.constexpr):
    for k in range(0, 64, 16):
        pass
    for j in tl.static_range(3):
        pass
    for m in tl.range(0, K):
        pass
"#,
            None,
        );
        let got: Vec<String> = t
            .loops
            .iter()
            .map(|l| {
                format!(
                    "{} {:?} {:?} unroll={}",
                    l.line, l.var, l.trip_count, l.unroll_pragma
                )
            })
            .collect();
        expect![[r#"
            5 Some("k") Some(4) unroll=false
            7 Some("j") Some(3) unroll=true
            9 Some("m") None unroll=false"#]]
        .assert_eq(&got.join("\n"));
        assert_eq!(t.holds("loop_without_unroll_pragma"), Some(false));
    }

    #[test]
    fn shared_memory_and_qualifiers() {
        let f = facts_of(
            Lang::Cuda,
            r#"
#define TILE 32
__global__ void __launch_bounds__(256) k(const float* __restrict__ a, float* b, float* c, float* d) {
    __shared__ float t[16][17];
    __shared__ double u[4];
    __shared__ float w[TILE];
    c[threadIdx.x] = a[threadIdx.x] + b[threadIdx.x];
    foo(d);
}
"#,
            None,
        );
        assert_eq!(f.static_smem_bytes, 16 * 17 * 4 + 4 * 8);
        assert!(f.static_smem_unsized, "TILE is a macro: size unknown");
        assert!(!f.dynamic_smem);
        assert!(f.launch_bounds);
        assert!(!f.maxnreg);
        assert_eq!(f.pointers_without_restrict, ["b", "c", "d"]);
        // c is stored to, d escapes into unknown code: only b is provably read-only.
        assert_eq!(f.read_only_pointers_without_const, ["b"]);

        let g = facts_of(
            Lang::Cuda,
            "__global__ void g(float* o) { extern __shared__ float buf[]; buf[threadIdx.x] = 0; o[0] = buf[1]; }",
            None,
        );
        assert!(g.dynamic_smem);
        assert_eq!(g.holds("uses_shared_memory"), Some(true));
        assert_eq!(
            g.accesses.len(),
            1,
            "shared memory accesses are not global: {:?}",
            g.accesses
        );
    }

    #[test]
    fn every_fact_has_a_phrase_and_a_value() {
        let f = Facts::default();
        for name in FACT_NAMES {
            assert!(f.holds(name).is_some(), "{name} is not computed");
            assert!(
                fact_phrase(name, true).is_some() && fact_phrase(name, false).is_some(),
                "{name}"
            );
        }
        assert_eq!(f.holds("no_such_fact"), None);
        assert_eq!(fact_phrase("no_such_fact", true), None);
    }

    #[test]
    fn features_are_bounded_with_bias_first() {
        let mut f = facts_of(
            Lang::Cuda,
            include_str!("../../../examples/matmul_naive.cu"),
            None,
        );
        f.set_resources(400, 16);
        f.set_timing(2.0, Some(3.0), Some(0.25));
        let x = f.features();
        assert_eq!(x.len(), FEATURE_DIM);
        assert_eq!(x[0], 1.0);
        assert!(x.iter().all(|v| (0.0..=1.0).contains(v)), "{x:?}");
        let named: Vec<String> = FEATURE_NAMES
            .iter()
            .zip(&x)
            .filter(|(_, v)| **v != 0.0)
            .map(|(n, v)| format!("{n}={v:.2}"))
            .collect();
        expect!["bias=1.00 block_2d=1.00 has_counted_loop=1.00 loop_over_global_memory=1.00 unit_stride_access=1.00 pointer_without_restrict=1.00 compute_bound=1.00 log_intensity=0.74 registers=1.00 has_spills=1.00 bw_fraction=1.00 flop_fraction=0.25"].assert_eq(&named.join(" "));
    }

    #[test]
    fn measured_slots_move_the_roofline_facts() {
        let mut f = facts_of(Lang::Cuda, include_str!("../../../examples/saxpy.cu"), None);
        // No `flops` and no loop over global memory: a streaming kernel.
        assert_eq!(f.holds("memory_bound"), Some(true));
        assert_eq!(f.holds("far_from_roofline"), Some(false));
        f.set_timing(0.1, Some(0.3), None);
        assert_eq!(f.holds("far_from_roofline"), Some(true));
        f.set_resources(40, 0);
        assert_eq!(f.holds("register_limited_occupancy"), Some(true));
        assert_eq!(f.holds("has_spills"), Some(false));

        // matmul: 2*m*n*k FLOPs over 12 MiB is far above the ridge; a slow device
        // (tiny FMA rate) moves the ridge below it... and a huge one above it.
        let mut m = facts_of(
            Lang::Cuda,
            include_str!("../../../examples/matmul_naive.cu"),
            None,
        );
        assert_eq!(m.holds("compute_bound"), Some(true));
        let dev = DeviceInfo {
            name: "Test GPU".into(),
            arch: "sm_90".into(),
            sms: 132,
            warp_size: 32,
            max_threads_per_block: 1024,
            max_block: [1024, 1024, 64],
            max_grid: [u32::MAX, 65535, 65535],
            smem_per_block: 48 * 1024,
            smem_per_block_optin: 227 * 1024,
            smem_per_sm: 228 * 1024,
            regs_per_block: 65536,
            l2_bytes: 50 * 1024 * 1024,
            mem_bytes: 80 << 30,
            ceilings: Some(Ceilings {
                copy_gbps: 3000.0,
                fma_tflops: 60.0,
            }),
        };
        m.set_device(&dev, None);
        assert_eq!(m.holds("compute_bound"), Some(true));
        m.set_device(
            &dev,
            Some(&Ceilings {
                copy_gbps: 1.0,
                fma_tflops: 1000.0,
            }),
        );
        assert_eq!(m.holds("memory_bound"), Some(true));
        assert!(m.describe().contains("- device: Test GPU (132 SMs, 48 KiB shared memory per block, 50 MiB L2, 1 GB/s copy, 1000.0 TFLOP/s FP32)"), "{}", m.describe());
    }

    #[test]
    fn hostile_input_does_not_panic() {
        let deep = format!(
            "__global__ void k(float* x) {{ x[{}threadIdx.x{}] = 1; }}",
            "(".repeat(3000),
            ")".repeat(3000)
        );
        let f = facts_of(Lang::Cuda, &deep, None);
        assert_eq!(f.kernel, "k");
        let self_ref =
            "__global__ void k(float* x) { int a = b; int b = a; x[a] = 0; for (;;) {} }";
        let f = facts_of(Lang::Cuda, self_ref, None);
        assert_eq!(f.accesses.len(), 1);
        let recursive = "__device__ void h(float* p, int i) { h(p, i + 1); p[i] = 0; }\n__global__ void k(float* x) { h(x, threadIdx.x); }";
        let f = facts_of(Lang::Cuda, recursive, None);
        assert_eq!(f.accesses.len(), 1, "{:?}", f.accesses);
        // Doubling chains: linear, not 2^40 (pointer aliases, constants, Triton pointers).
        let mut chain = String::from("__global__ void k(float* x) { float* p0 = x; int c0 = 1;");
        let mut py = String::from("import triton\n@triton.jit\ndef k(x_ptr):\n    p0 = x_ptr\n");
        for i in 1..=40 {
            chain.push_str(&format!(
                " float* p{i} = p{j} + p{j}; int c{i} = c{j} + c{j};",
                j = i - 1
            ));
            py.push_str(&format!("    p{i} = p{j} + p{j}\n", j = i - 1));
        }
        chain.push_str(" p40[c40 + threadIdx.x] = 0; for (int i = 0; i < c40; i++) {} }");
        py.push_str("    tl.store(p40, 1)\n");
        let f = facts_of(Lang::Cuda, &chain, None);
        assert_eq!(f.accesses.len(), 1);
        let t = facts_of(Lang::Triton, &py, None);
        assert_eq!(t.accesses.len(), 1);
        let overflow = "__global__ void k(float* x) { for (long long i = -9223372036854775807 - 1; i < 0; i /= -1) {} }";
        let f = facts_of(Lang::Cuda, overflow, None);
        assert_eq!(f.loops.len(), 1);
    }
}
