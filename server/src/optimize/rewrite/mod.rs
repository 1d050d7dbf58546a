//! The embedded coder: deterministic rewrites of one kernel, each a pure function from
//! the file text (and its tree-sitter tree) to candidate file texts. A rewrite edits only
//! the kernel unit (the kernel and the device helpers it calls) and, where the launch
//! changes, the kernel's `@bench` lines; everything else, formatting and comments of
//! untouched code included, stays byte for byte. A sweep returns several candidates;
//! the step loop verifies and times them as a batch and keeps the best. No I/O here: a
//! candidate is only text until the worker has compiled, verified and timed it.
//!
//! The rewrite ids are what `prompts/strategies.toml` names in `rewrite = "..."`.
//!
//! Layout: one rewrite per file, named by its id (`block_size.rs`, `vectorize.rs`, ...),
//! each with its doc paragraph (what it matches, what it refuses, what launch it writes)
//! and its fixture tests. What they share: `edits.rs` (the one edit builder and splice
//! applier, which refuses overlapping edits), `params.rs` (the one parameter parser),
//! `check.rs` (drafts to candidates: still parses, still plans), `unit.rs` (the kernel
//! unit's nodes and the check of code-only rewrites), `tree.rs` (tree-sitter helpers),
//! `spec_expr.rs` (grid and block expression text) and `elementwise.rs` (the 1-D
//! one-element-per-thread shape).

mod access;
mod block_coarsen;
mod block_reduce;
mod block_size;
mod check;
mod coarsen;
mod cooperative_rows;
mod edits;
mod elementwise;
mod fast_math;
mod grid2d;
mod grid_stride;
mod launch_bounds;
mod maxnreg;
mod params;
mod poly;
mod privatize_atomics;
mod remap_lanes;
mod restrict_const;
mod spec_expr;
mod tile_matmul;
mod transpose_tile;
mod tree;
mod triton_autotune;
mod triton_block;
mod triton_configs;
mod triton_launch;
mod triton_swizzle;
mod tunable_sweep;
mod unit;
mod unroll;
mod vectorize;

use std::collections::BTreeMap;

use crate::syntax::{FileModel, Kernel, Lang};

/// Everything a rewrite may look at. `params` are the catalog step's parameters.
pub struct RewriteContext<'a> {
    pub lang: Lang,
    /// The whole file.
    pub text: &'a str,
    pub tree: &'a tree_sitter::Tree,
    pub model: &'a FileModel,
    pub kernel: &'a Kernel,
    pub params: &'a BTreeMap<String, serde_json::Value>,
}

/// One candidate: the whole new file text, and a short label for tables ("BLOCK=512",
/// "block=(32, 8)", "__restrict__ on a, b, c").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub label: String,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewriteError {
    /// The kernel has nothing this rewrite can change; the message says why, for the
    /// author ("every pointer parameter is already `__restrict__`").
    #[error("{0}")]
    NotApplicable(String),
    #[error("unknown embedded rewrite `{0}`; known: {known}", known = IDS.join(", "))]
    Unknown(String),
    /// A catalog parameter has the wrong type or value.
    #[error("parameter `{name}`: {message}")]
    BadParam { name: String, message: String },
}

/// Every embedded rewrite id.
pub const IDS: &[&str] = &[
    "tunable_sweep",
    "block_size",
    "restrict_const",
    "launch_bounds",
    "unroll",
    "vectorize",
    "grid_stride",
    "fast_math",
    "maxnreg",
    "triton_block",
    "triton_num_warps",
    "triton_num_stages",
    "cooperative_rows",
    "privatize_atomics",
    "transpose_tile",
    "tile_matmul",
    "triton_swizzle",
    "triton_configs",
    "coarsen",
    "block_reduce",
    "remap_lanes",
    "block_coarsen",
    "triton_autotune",
];

/// Run one embedded rewrite. `Ok` always holds at least one candidate whose text differs
/// from `cx.text`.
pub fn apply(id: &str, cx: &RewriteContext<'_>) -> Result<Vec<Candidate>, RewriteError> {
    let out = match id {
        "tunable_sweep" => tunable_sweep::tunable_sweep(cx),
        "block_size" => block_size::block_size(cx),
        "vectorize" => vectorize::vectorize(cx),
        "grid_stride" => grid_stride::grid_stride(cx),
        "restrict_const" => restrict_const::restrict_const(cx),
        "launch_bounds" => launch_bounds::launch_bounds(cx),
        "unroll" => unroll::unroll(cx),
        "fast_math" => fast_math::fast_math(cx),
        "maxnreg" => maxnreg::maxnreg(cx),
        "triton_block" => triton_block::block(cx),
        "triton_num_warps" => triton_launch::num_warps(cx),
        "triton_num_stages" => triton_launch::num_stages(cx),
        "cooperative_rows" => cooperative_rows::cooperative_rows(cx),
        "privatize_atomics" => privatize_atomics::privatize_atomics(cx),
        "transpose_tile" => transpose_tile::transpose_tile(cx),
        "tile_matmul" => tile_matmul::tile_matmul(cx),
        "triton_swizzle" => triton_swizzle::triton_swizzle(cx),
        "triton_configs" => triton_configs::triton_configs(cx),
        "coarsen" => coarsen::coarsen(cx),
        "block_reduce" => block_reduce::block_reduce(cx),
        "remap_lanes" => remap_lanes::remap_lanes(cx),
        "block_coarsen" => block_coarsen::block_coarsen(cx),
        "triton_autotune" => triton_autotune::triton_autotune(cx),
        other => return Err(RewriteError::Unknown(other.to_string())),
    }?;
    let out: Vec<Candidate> = out.into_iter().filter(|c| c.text != cx.text).collect();
    if out.is_empty() {
        return Err(RewriteError::NotApplicable(format!(
            "`{id}` would not change `{}`",
            cx.kernel.name
        )));
    }
    Ok(out)
}
