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
//!
//! Layout: this file holds [`Facts`] and everything computed from it (the boolean facts,
//! their phrases, the features, `describe`); `lanes.rs` the analysis both languages
//! share (the lane derivative [`Deriv`] of an index and the settling of a name with
//! several definitions), so CUDA and Triton strides are computed one way; `cuda.rs` and
//! `triton.rs` the per-language lowering from the tree to loops, accesses and counts;
//! `carries.rs` what a CUDA loop carries between iterations and `triton_loops.rs` the
//! same for Triton loops (with which later loop reads each result).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::{Deserialize, Serialize};
use tree_sitter::{Node, Tree};

pub use carries::{carried, Carried};
pub(crate) use cuda::load_call;

use crate::spec::{self, Arg, EvalEnv, Launch};
use crate::syntax::{FileModel, Kernel, Lang, ParamKind};

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
    "grouped_access",
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
    "thread_walks_a_row",
    "thread_walks_a_column",
    "scatter_atomics",
    "transposed_access",
    "matmul_like_loop",
    "program_grid_2d",
    "autotune_configs",
    "multi_pass_loops",
    "sequential_axis_loop",
    "reduce_every_step",
    "loop_steps_by_block",
    "loop_steps_at_run_time",
    "loop_steps_over_lanes",
    "read_once_loads",
    "one_block_total",
    "narrow_programs",
    "flat_index_split",
];

/// One line for a human or a model: what `name` holding (or not holding) means. `None` for
/// an unknown name.
pub fn fact_phrase(name: &str, holds: bool) -> Option<&'static str> {
    let (yes, no) = spec_launch_and_loop_phrase(name).or_else(|| access_and_bound_phrase(name))?;
    Some(if holds { yes } else { no })
}

/// [`fact_phrase`] for the spec, the launch, the loops and the pointers: (holds, does not
/// hold).
fn spec_launch_and_loop_phrase(name: &str) -> Option<(&'static str, &'static str)> {
    Some(match name {
        "has_tunables" => (
            "the spec has a `tune` line with several values",
            "no `tune` line with several values",
        ),
        "has_constexpr_params" => (
            "the kernel has `tl.constexpr` parameters",
            "no `tl.constexpr` parameters",
        ),
        "autotune_configs" => (
            "a @triton.autotune decorator lists two or more configs",
            "no @triton.autotune list of several configs",
        ),
        "multi_pass_loops" => (
            "a later loop over the same range reads an earlier loop's max or sum (several passes over the data)",
            "no loop depends on an earlier loop's reduction over the same range",
        ),
        "sequential_axis_loop" => (
            "a Triton program loops one step at a time over a long axis, accumulating a tile",
            "no program walks an axis one step at a time",
        ),
        "reduce_every_step" => (
            "a Triton loop reduces its tile across the lanes on every iteration",
            "no loop reduces across the lanes on every iteration",
        ),
        "loop_steps_by_block" => (
            "a Triton loop walks its range a block of elements at a time",
            "no Triton loop steps by a block",
        ),
        "narrow_programs" => (
            "each of many Triton programs loads fewer elements than 4 a thread, with no loop (a short row a program)",
            "Triton programs are not many small loop-free tiles",
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
        "loop_steps_at_run_time" => (
            "a loop that reads global memory steps by a value known only at run time (`i += blockDim.x * gridDim.x`): the compiler does not unroll it, so each thread waits on one load at a time",
            "every loop that reads global memory steps by a constant",
        ),
        "loop_steps_over_lanes" => (
            "a loop that reads global memory starts at the thread's lane and steps by all the lanes (`j = threadIdx.x; j < n; j += blockDim.x`, a grid-stride loop, `k = lane; k += 32`, a team of blocks per row stepping by `K * blockDim.x`): each lane reads 4 bytes per access where 16 would do",
            "no loop strides through memory by all its lanes",
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
            "global accesses are unit-stride (or broadcast, or reads of a read-only buffer at a computed element) across neighbouring threads",
            "not every global access is unit-stride",
        ),
        _ => return None,
    })
}

/// [`fact_phrase`] for the accesses, the shapes and the bounds: (holds, does not hold).
fn access_and_bound_phrase(name: &str) -> Option<(&'static str, &'static str)> {
    Some(match name {
        "strided_access" => (
            "a global access is strided across neighbouring threads",
            "no strided global access",
        ),
        "read_once_loads" => (
            "loads of data each thread reads alone (no other thread or block reads the element), with no cache hint",
            "no unhinted load of data only one thread reads",
        ),
        "one_block_total" => (
            "the launch is one block, and a loop at the kernel's top level folds global memory into sums, products, maxima or minima: one multiprocessor does all the work",
            "not a one-block total",
        ),
        "flat_index_split" => (
            "the 1-D thread index is split into row and column by `/` or `%` (a divisor that is not a power-of-two literal): every thread divides",
            "no division of the flat thread index",
        ),
        "grouped_access" => (
            "a thread touches an interleaved group: a global access at a stride of 2, 4, 8 or 16 elements, outside loops",
            "no global access in interleaved groups",
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
        "has_spills" => (
            "the kernel uses local memory (register spills or a local array)",
            "no local memory (no register spills)",
        ),
        "register_limited_occupancy" => (
            "more than 32 registers per thread limit occupancy",
            "registers do not limit occupancy",
        ),
        "far_from_roofline" => (
            "the last run reached under half of its roofline ceiling",
            "the last run is near its roofline ceiling",
        ),
        "program_grid_2d" => (
            "Triton programs are laid out over a 2-D grid (`tl.program_id(0)` and `(1)`; a batch on axis 2 may be read too)",
            "Triton programs are not on a 2-D grid",
        ),
        "matmul_like_loop" => (
            "2-D threads (or a flat index split into row and column) each loop over k reading a row operand (the same for a row of threads) and a column operand, with no shared memory",
            "no matmul-shaped loop",
        ),
        "transposed_access" => (
            "2-D threads whose reads and write are coalesced along different axes (a transpose), or a 1-D thread index split into row and column whose read and write are coalesced differently (a flat transpose or permute)",
            "reads and writes are not coalesced along different axes",
        ),
        "scatter_atomics" => (
            "global atomics at data-dependent addresses (a histogram, a scatter-add), no shared memory",
            "no data-dependent global atomics",
        ),
        "thread_walks_a_row" => (
            "each thread loops over a row of its own (neighbouring threads a row apart), with no shared memory or warp cooperation",
            "no thread walks a row of its own",
        ),
        "thread_walks_a_column" => (
            "each thread loops alone over a long range (a column, neighbouring threads on neighbouring elements), with no shared memory or warp cooperation",
            "no thread loops alone down a column",
        ),
        _ => return None,
    })
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
    /// Blocks (CUDA) or programs (Triton) along each axis of the timed case's grid.
    #[serde(default)]
    pub grid: Option<[u64; 3]>,
    /// The spec's `block = ...` uses only numbers (no tunable, no size variable).
    pub block_literal: bool,
    /// Triton `num_warps` / `num_stages` of the timed case.
    pub num_warps: Option<u64>,
    pub num_stages: Option<u64>,
    /// Tunables with more than one value, as `NAME in [v, ...]`.
    pub tunables: Vec<String>,
    /// Triton `tl.constexpr` parameter names.
    pub constexpr_params: Vec<String>,
    /// Triton: the timed case's integer `tl.constexpr` values, by name.
    #[serde(default, skip)]
    pub constexpr_values: BTreeMap<String, u64>,
    /// Triton: the words of the spec's `grid = ...` statement.
    #[serde(default, skip)]
    pub grid_names: BTreeSet<String>,
    /// Triton: the widest `tl.arange` of the body in the timed case; `u64::MAX` when one
    /// cannot be evaluated, or when its block is a constexpr the grid reads too (a wider
    /// block then means fewer programs: `triton_block`'s knob); `None` without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane_extent: Option<u64>,
    /// Triton: the configs of a literal `@triton.autotune(configs=[...])` list.
    pub autotune_configs: usize,
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
    /// CUDA: `/` and `%` of a global 1-D thread index by a divisor that is not a
    /// power-of-two literal (`t = i / D; d = i % D;`).
    #[serde(default)]
    pub flat_index_splits: u32,
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
    /// Blocks (CUDA) or programs (Triton) of the timed case's launch, once planned.
    #[serde(default)]
    pub grid_blocks: Option<u64>,
    /// The version's Nsight Compute profile, when one was taken (`optimize --profile`):
    /// its numbers decide the bound, spills and occupancy facts over the estimates.
    #[serde(default, skip)]
    pub profile: Option<crate::profile::Profile>,
    /// Triton: the kernel body's loops, what each carries and which earlier loops it reads.
    #[serde(default)]
    pub triton_loops: Vec<triton_loops::LoopPass>,
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
    /// What the loop carries from one iteration to the next (CUDA): accumulators,
    /// running prefixes, other values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub carries: Vec<Carried>,
    /// CUDA: the loop steps its variable by a value the compiler does not know (`+=
    /// blockDim.y`, a parameter), in its header or, for `while`, its last statement.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub runtime_step: bool,
    /// CUDA: a `for` loop whose start moves with `threadIdx.x` and whose step counts
    /// lanes (`blockDim.x`, `blockDim.x * gridDim.x`, `warpSize`, a multiple of 32),
    /// directly or through a local defined once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lane_step: bool,
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

fn unknown_stride() -> Stride {
    Stride::Unknown
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
    /// The stride between neighbouring threads along `threadIdx.y` (CUDA; Triton:
    /// [`Stride::Unknown`]): in a 2-D block, `x[j * n + i]` with `i` from `.y` and `j`
    /// from `.x` has stride `n` along x and is unit-stride along y, a transposed read
    /// whose rows a block can stage through a tile.
    #[serde(default = "unknown_stride")]
    pub stride_y: Stride,
    /// Inside a loop (of the kernel or of the helper it is in).
    pub in_loop: bool,
    /// 1-based line.
    pub line: u32,
    /// The helper it is in, if not the kernel itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// The launch axes the address depends on ([`lanes::THREAD_X`] ... as bits): the
    /// ones it leaves out are axes whose threads or blocks share the element.
    #[serde(default)]
    pub axes: u8,
    /// Byte range of the access in the analysed text (`p[i]`; Triton: the `tl.load`
    /// call), for rewrites that edit it.
    #[serde(skip)]
    pub span: Option<(usize, usize)>,
    /// The load already carries a cache hint (`__ldcs(&p[i])`, `__ldlu(...)`, not
    /// `__ldg`; `eviction_policy=` or `cache_modifier=` in Triton).
    #[serde(default)]
    pub hinted: bool,
}

/// Programs fewer than this do not fill an H100 a few times over when packed by 8.
const NARROW_MIN_PROGRAMS: u64 = 1024;

/// Does a launch of `programs` programs of `warps` warps, each a tile of `lanes`
/// elements, spend a program on too little? Under 4 elements a thread is under one
/// 16-byte f32 load each, and a multiprocessor holds at most 32 programs: too few bytes
/// in flight to cover memory latency, and a program's launch costs more than its loads.
/// Only many programs count: packing few would leave multiprocessors idle.
pub fn narrow_tile(lanes: u64, warps: u64, programs: u64) -> bool {
    programs >= NARROW_MIN_PROGRAMS && lanes < 4 * 32 * warps.max(1)
}

/// Is an element at an address that depends on `axes` read by one thread of the launch
/// only (so caching it for others is wasted)? The address must move with the thread
/// along x, and with every axis the launch spreads over: each grid axis of more than one
/// block and each block axis past x of more than one thread. `x[r * n + c]` on a grid
/// of rows along y is read once; `bias[c]` there is read by every row's blocks.
pub fn read_once(axes: u8, grid: [u64; 3], block: [u64; 3]) -> bool {
    let has = |bit: u8| axes & bit != 0;
    has(lanes::THREAD_X)
        && (0..3).all(|d| grid[d] <= 1 || has(lanes::BLOCK_X << d))
        && (1..3).all(|d| block[d] <= 1 || has(lanes::THREAD_X << d))
}

/// Neighbouring lanes read at most 8 elements apart (unit stride, `x[2 * i]`, a lane's
/// 8-column tile), so a warp's loads use whole sectors between them.
fn sector_dense(s: Stride) -> bool {
    match s {
        Stride::Unit => true,
        Stride::Strided(k) => k.unsigned_abs() <= 8,
        _ => false,
    }
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
        Lang::Cuda => {
            let block_x = crate::optimize::rewrite::block_width_names(text, tree, model, kernel);
            cuda::scan(&mut f, text, tree, kernel, &block_x)
        }
        Lang::Triton => triton::scan(&mut f, text, tree, kernel),
    }
    f
}

fn spec_facts(f: &mut Facts, kernel: &Kernel, model: &FileModel) {
    f.autotune_configs = kernel.autotune.as_ref().map_or(0, |a| a.configs.len());
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
            Launch::Cuda { grid, block, smem } => {
                f.grid = Some(*grid);
                f.block = Some(*block);
                f.spec_smem_bytes = *smem;
            }
            Launch::Triton {
                grid,
                num_warps,
                num_stages,
            } => {
                let axis = |d: usize| grid.get(d).copied().unwrap_or(1);
                f.grid = Some([axis(0), axis(1), axis(2)]);
                f.num_warps = *num_warps;
                f.num_stages = *num_stages;
                f.constexpr_values = case
                    .args
                    .iter()
                    .filter_map(|a| match a {
                        Arg::Constexpr { name, value } => {
                            let v = value.as_f64();
                            (v >= 0.0 && v.fract() == 0.0).then(|| (name.clone(), v as u64))
                        }
                        _ => None,
                    })
                    .collect();
            }
        }
    }
    f.block_literal = block_statement_is_literal(kernel);
    f.grid_names = crate::optimize::edit::spec_assignment(kernel, "grid")
        .map(|g| identifiers(&g.text).map(str::to_string).collect())
        .unwrap_or_default();
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
    /// `x[2 * i]`, `x[2 * i + 1]`: a global access outside loops at a stride of 2, 4, 8 or
    /// 16 elements, so each thread's group could be one vector access (`vectorize_groups`
    /// proves the group complete).
    fn grouped_access(&self) -> bool {
        self.accesses.iter().any(|a| {
            a.kind != AccessKind::Atomic
                && !a.in_loop
                && matches!(a.stride, Stride::Strided(2 | 4 | 8 | 16))
        })
    }

    /// `grouped_access` or `flat_index_split`: what the thread index does in the accesses.
    fn index_shape(&self, name: &str) -> bool {
        match name {
            "grouped_access" => self.grouped_access(),
            _ => self.flat_index_splits > 0,
        }
    }

    /// The loads a streaming cache hint suits: loads without a hint, of a buffer the
    /// kernel only reads, each element read by one thread of the launch ([`read_once`]),
    /// and in CUDA dense ([`sector_dense`]: a thread that walks a row alone wants its
    /// sectors kept for its next iterations).
    pub fn read_once_loads(&self) -> Vec<&Access> {
        let Some(grid) = self.grid else {
            return Vec::new();
        };
        let block = self.block.unwrap_or([1, 1, 1]);
        let cuda = self.lang == Some(Lang::Cuda);
        let written: BTreeSet<&str> = self
            .accesses
            .iter()
            .filter(|a| a.kind != AccessKind::Load)
            .map(|a| a.buffer.as_str())
            .collect();
        self.accesses
            .iter()
            .filter(|a| a.kind == AccessKind::Load && !a.hinted && a.via.is_none())
            .filter(|a| !written.contains(a.buffer.as_str()))
            .filter(|a| !cuda || sector_dense(a.stride))
            .filter(|a| read_once(a.axes, grid, block))
            .collect()
    }

    /// Some access other than an atomic is strided, by a literal or a run-time stride.
    fn strided_access(&self) -> bool {
        self.accesses.iter().any(|a| {
            a.kind != AccessKind::Atomic
                && matches!(a.stride, Stride::Strided(_) | Stride::Symbolic)
        })
    }

    /// CUDA: 2-D blocks, or a 1-D block whose flat index is split, with no shared memory
    /// and no loop over global memory, and a load and a store coalesced along different
    /// axes (one unit-stride across neighbouring threads, the other strided).
    fn transposed_access(&self) -> bool {
        let strided = |a: &&Access| {
            matches!(
                a.stride,
                Stride::Strided(_) | Stride::Symbolic | Stride::Unknown
            )
        };
        let global = || {
            self.accesses
                .iter()
                .filter(|a| a.kind != AccessKind::Atomic)
        };
        let loads = || global().filter(|a| a.kind == AccessKind::Load);
        let stores = || global().filter(|a| a.kind != AccessKind::Load);
        let flat = self.block_dims() == Some(1) && self.flat_index_splits > 0;
        self.lang == Some(Lang::Cuda)
            && (self.block_dims() == Some(2) || flat)
            && self.holds("uses_shared_memory") == Some(false)
            && self.loops.iter().all(|l| l.global_loads == 0)
            && ((stores().any(|a| strided(&a)) && loads().any(|a| a.stride == Stride::Unit))
                || (loads().any(|a| strided(&a)) && stores().any(|a| a.stride == Stride::Unit)))
    }

    /// Triton: the kernel reads `tl.program_id(0)` and `tl.program_id(1)`.
    fn program_grid_2d(&self) -> bool {
        self.lang == Some(Lang::Triton) && self.thread_axes[0] && self.thread_axes[1]
    }

    /// Triton: many programs, each a loop-free tile of unit-stride or broadcast accesses
    /// whose widest `tl.arange` is short for its threads ([`narrow_tile`]).
    pub fn narrow_programs(&self) -> bool {
        let (Some(lanes), Some(grid)) = (self.lane_extent, self.grid) else {
            return false;
        };
        self.lang == Some(Lang::Triton)
            && self.loops.is_empty()
            && self.unit_stride()
            && !self.strided_access()
            && narrow_tile(lanes, self.num_warps.unwrap_or(4), grid.iter().product())
    }

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
            "autotune_configs" => self.autotune_configs > 1,
            "multi_pass_loops" => triton_loops::multi_pass(&self.triton_loops),
            "sequential_axis_loop" => triton_loops::sequential_axis(&self.triton_loops),
            "reduce_every_step" => triton_loops::reduce_every_step(&self.triton_loops),
            "loop_steps_by_block" => self.triton_loops.iter().any(|l| !l.range.ends_with(", 1")),
            "block_1d" => cuda && self.block_dims() == Some(1),
            "block_2d" => cuda && self.block_dims() == Some(2),
            "block_resizable" => cuda && self.block_literal && self.uses_block_dim,
            "has_counted_loop"
            | "loop_without_unroll_pragma"
            | "loop_over_global_memory"
            | "loop_steps_at_run_time"
            | "loop_steps_over_lanes" => self.loop_holds(name, cuda),
            "pointer_without_restrict" => !self.pointers_without_restrict.is_empty(),
            "read_only_pointer_without_const" => !self.read_only_pointers_without_const.is_empty(),
            "has_launch_bounds" => self.launch_bounds,
            "has_maxnreg" => self.maxnreg,
            "unit_stride_access" => self.unit_stride(),
            "strided_access" => self.strided_access(),
            "grouped_access" | "flat_index_split" => cuda && self.index_shape(name),
            "read_once_loads" => !self.read_once_loads().is_empty(),
            "one_block_total" => cuda && self.one_block_total(),
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
            "has_spills" => {
                self.spills.is_some_and(|s| s > 0)
                    || self
                        .profile
                        .as_ref()
                        .and_then(|p| p.local_sectors)
                        .is_some_and(|s| s > 0.0)
            }
            "register_limited_occupancy" => match &self.profile {
                Some(p) if p.occupancy_limiter.is_some() => {
                    p.occupancy_limiter
                        .as_deref()
                        .is_some_and(|l| l.contains("registers"))
                        && p.theoretical_occupancy_pct.is_some_and(|t| t < 100.0)
                }
                _ => self.registers.is_some_and(|r| r > 32),
            },
            "program_grid_2d" => self.program_grid_2d(),
            "narrow_programs" => self.narrow_programs(),
            "matmul_like_loop" => {
                let in_loop = || global().filter(|a| a.in_loop && a.kind == AccessKind::Load);
                // 2-D threads, or a flat index split into the row and the column.
                let threads = self.block_dims() == Some(2)
                    || (self.block_dims() == Some(1)
                        && self.holds("flat_index_split") == Some(true));
                cuda && threads
                    && self.holds("uses_shared_memory") == Some(false)
                    && self.loops.iter().any(|l| l.global_loads >= 2)
                    && in_loop().any(|a| a.stride == Stride::Uniform)
                    && in_loop().any(|a| a.stride != Stride::Uniform)
            }
            "transposed_access" => self.transposed_access(),
            "scatter_atomics" => {
                cuda && self.holds("uses_shared_memory") == Some(false)
                    && self
                        .accesses
                        .iter()
                        .any(|a| a.kind == AccessKind::Atomic && a.stride == Stride::Unknown)
            }
            "thread_walks_a_row" => {
                cuda && self.block_dims() == Some(1)
                    && self.holds("uses_shared_memory") == Some(false)
                    && self.barriers == 0
                    && self.shuffles == 0
                    && self
                        .loops
                        .iter()
                        .any(|l| l.global_loads > 0 && l.trip_count.is_none_or(|t| t >= 32))
                    && global().any(|a| {
                        a.in_loop
                            && matches!(
                                a.stride,
                                Stride::Strided(_) | Stride::Symbolic | Stride::Unknown
                            )
                    })
            }
            "thread_walks_a_column" => {
                cuda && self.block_dims() == Some(1)
                    && self.holds("uses_shared_memory") == Some(false)
                    && self.barriers == 0
                    && self.shuffles == 0
                    && self
                        .loops
                        .iter()
                        .any(|l| l.global_loads > 0 && l.trip_count.is_none_or(|t| t >= 32))
                    && global().any(|a| a.in_loop && a.stride == Stride::Unit)
                    && global()
                        .filter(|a| a.in_loop)
                        .all(|a| matches!(a.stride, Stride::Unit | Stride::Uniform))
            }
            "far_from_roofline" => match (self.bw_fraction, self.flop_fraction) {
                (None, None) => false,
                (b, f) => b.unwrap_or(0.0).max(f.unwrap_or(0.0)) < 0.5,
            },
            _ => return None,
        })
    }

    /// Every global access unit-stride or broadcast, and at least one unit-stride.
    fn unit_stride(&self) -> bool {
        let global = || {
            self.accesses
                .iter()
                .filter(|a| a.kind != AccessKind::Atomic)
        };
        // Besides unit-stride and broadcast accesses, loads of a buffer nothing
        // writes at an index not linear in the lane (`scale[i / cols]`,
        // `lut[code[i]]`): each element reads its own, whatever the stride.
        let written: BTreeSet<&str> = global()
            .filter(|a| a.kind != AccessKind::Load)
            .map(|a| a.buffer.as_str())
            .collect();
        let gather =
            |a: &Access| a.kind == AccessKind::Load && !written.contains(a.buffer.as_str());
        global().any(|a| a.stride == Stride::Unit)
            && global().all(|a| match a.stride {
                Stride::Unit | Stride::Uniform => true,
                Stride::Unknown => gather(a),
                _ => false,
            })
    }

    /// One block in the grid, and one loop of the kernel itself reads global memory: it
    /// writes none and carries only folds (sums, counts, products, maxima, minima).
    fn one_block_total(&self) -> bool {
        let folds =
            |c: &Carried| matches!(c.kind.as_str(), "sum" | "count" | "product" | "max" | "min");
        let reading: Vec<&LoopFact> = self
            .loops
            .iter()
            .filter(|l| l.via.is_none() && l.global_loads > 0)
            .collect();
        self.grid == Some([1, 1, 1])
            && matches!(reading.as_slice(), [l] if l.global_stores == 0
                && !l.carries.is_empty()
                && l.carries.iter().all(folds))
    }

    /// The facts about loops' headers: counted, unrolled, reading memory, stepping at run
    /// time or by all the lanes.
    fn loop_holds(&self, name: &str, cuda: bool) -> bool {
        let reading = || self.loops.iter().filter(|l| l.global_loads > 0);
        match name {
            "has_counted_loop" => self.loops.iter().any(|l| l.counted),
            "loop_without_unroll_pragma" => {
                cuda && self.loops.iter().any(|l| l.counted && !l.unroll_pragma)
            }
            "loop_over_global_memory" => reading().next().is_some(),
            "loop_steps_at_run_time" => cuda && reading().any(|l| l.runtime_step),
            "loop_steps_over_lanes" => cuda && reading().any(|l| l.lane_step),
            _ => false,
        }
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
        // A profile measures what bounds the kernel; the roofline only estimates it.
        if let Some(p) = &self.profile {
            let mem = p.dram_pct.unwrap_or(0.0).max(p.l2_pct.unwrap_or(0.0));
            let sm = p.sm_pct.unwrap_or(0.0);
            // Neither near its peak: latency-bound, whatever the roofline estimates.
            return (mem.max(sm) >= 40.0).then_some(if mem >= sm {
                Bound::Memory
            } else {
                Bound::Compute
            });
        }
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

    /// The version's Nsight Compute profile.
    pub fn set_profile(&mut self, p: crate::profile::Profile) {
        self.profile = Some(p);
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

    /// The device and its measured ceilings (the step loop builds them from the
    /// worker's hello: facts know no protocol type).
    pub fn set_device(&mut self, d: DeviceFacts) {
        self.device = Some(d);
    }

    /// The timed case's launch: its blocks or programs.
    pub fn set_launch(&mut self, launch: &crate::spec::Launch) {
        self.grid_blocks = Some(match launch {
            crate::spec::Launch::Cuda { grid, .. } => grid.iter().product(),
            crate::spec::Launch::Triton { grid, .. } => grid.iter().product(),
        });
    }

    /// Markdown bullets for prompts and reports.
    pub fn describe(&self) -> String {
        let mut out = vec![self.head_line()];
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
        out.extend(self.loops.iter().map(loop_line));
        if self.accesses.is_empty() {
            out.push("- global accesses: none found".into());
        }
        out.extend(self.accesses.iter().map(access_line));
        if self.lang == Some(Lang::Cuda) {
            out.extend(self.cuda_lines());
        } else {
            out.push(format!(
                "- atomics {}; reductions {}; tl.dot {}",
                self.atomics, self.reductions, self.tensor_core_ops
            ));
            out.extend(triton_loops::describe(&self.triton_loops));
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
        out.extend(self.measured_line());
        if let Some(p) = &self.profile {
            out.push(format!("- profile (Nsight Compute): {}", p.diagnosis()));
            out.push(format!("- profile numbers: {}", p.short()));
        }
        out.extend(self.device.as_ref().map(device_line));
        out.push(format!("- facts: {}", self.holding().join(", ")));
        out.join("\n")
    }

    /// The description's first line: the kernel, its language and its launch.
    fn head_line(&self) -> String {
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
        if let Some(g) = self.grid_blocks {
            head.push_str(&format!(", {g} blocks in the grid"));
        }
        head
    }

    /// The CUDA-only lines: pointer qualifiers, shared memory and synchronization,
    /// launch bounds, fast-math-able calls.
    fn cuda_lines(&self) -> Vec<String> {
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        let mut out = vec![format!(
            "- pointers without `__restrict__`: {}; read-only without `const`: {}",
            list(&self.pointers_without_restrict),
            list(&self.read_only_pointers_without_const)
        )];
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
        out
    }

    /// What was measured (registers, spills, time, fractions of the peaks), if anything.
    fn measured_line(&self) -> Option<String> {
        let mut measured = Vec::new();
        if let Some(r) = self.registers {
            measured.push(format!("{r} registers"));
        }
        if let Some(s) = self.spills.filter(|s| *s > 0) {
            measured.push(format!("{s} B of local memory per thread (spills)"));
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
        (!measured.is_empty()).then(|| format!("- measured: {}", measured.join(", ")))
    }
}

/// One loop's line of [`Facts::describe`]: counted or not, trip count, unrolling, global
/// accesses inside and what it carries.
fn loop_line(l: &LoopFact) -> String {
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
    if !l.carries.is_empty() {
        let c: Vec<String> = l
            .carries
            .iter()
            .map(|c| format!("{} `{}`", c.kind, c.name))
            .collect();
        s.push_str(&format!(", carries {}", c.join(", ")));
    }
    if let Some(v) = &l.via {
        s.push_str(&format!(" (in `{v}`)"));
    }
    s
}

/// One global access's line of [`Facts::describe`]: its kind, buffer, index and stride.
fn access_line(a: &Access) -> String {
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
    s
}

/// The device's line of [`Facts::describe`]: name, SMs, memory sizes and ceilings.
fn device_line(d: &DeviceFacts) -> String {
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
    s
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

mod carries;
mod cuda;
pub(crate) use cuda::elem_bytes;
mod lanes;
mod triton;
pub(crate) mod triton_loops;

use lanes::*;

#[cfg(test)]
mod tests;
