//! `remap_lanes`: a coalescing cure chosen by the access analysis, not by a shape. When
//! the lane (`threadIdx.x`) walks a slow index of the kernel's global accesses (each
//! lane a row apart, `y[row * n + col]` with `row` from `threadIdx.x`) and `threadIdx.y`
//! walks the fast one, the two thread axes trade places: every `threadIdx.x` of the
//! kernel unit (the kernel and the helpers it calls) becomes `threadIdx.y` and back, and
//! likewise `blockIdx`, `blockDim` and `gridDim`; the launch's grid and block swap their
//! x and y. That is a bijection of threads onto the same work, whatever the body does,
//! so it is exact for any kernel that does not depend on which lanes share a warp.
//!
//! **Decides** by running the access analysis ([`crate::optimize::facts`]) on the
//! kernel as it is and as remapped: applicable when the remap removes strided global
//! accesses (weighted: an access in a loop counts for [`IN_LOOP_WEIGHT`]) and adds to
//! the coalesced ones (unit stride, or one address for the whole warp, as `mean[row]`
//! read by a warp that shares its row). Any index spelling and any body shape the analysis reads is
//! covered (locals, helpers, loops, `if` guards or early returns).
//!
//! **Writes** the remapped unit and launch, and as its knobs, when the block is a 2-D
//! literal of T threads with T a multiple of 32: also the blocks (32, T/32) and
//! (64, T/64) (each grid dim `cdiv(X, B)` rescaled), so the lane axis covers whole
//! 128- or 256-byte lines.
//!
//! **Refuses**: Triton (its compiler orders lanes along the contiguous dimension
//! itself); a helper that reads a thread or block index (another kernel may call it);
//! warp-level code (shuffles, votes, `__syncwarp`, `warpSize`, lane arithmetic
//! on `threadIdx.x` such as `% 32`), where lanes that share a warp matter; a kernel whose
//! accesses the remap would not improve; a launch it cannot swap (a grid x that is
//! larger than the y limit of 65535 blocks in some case); a 1-D block in every case
//! (swapped it would be `(1, T)`: warps are consecutive linear thread ids, so they would
//! still walk the same index, though the analysis, reading the lane as `threadIdx.x`,
//! would see one address a warp).

use std::collections::BTreeMap;

use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::edits::{Edit, Edits};
use super::spec_expr::{components, format_dims, literal_dims, rescale};
use super::tree::{text, walk};
use super::RewriteContext;
use crate::document::Document;
use crate::optimize::edit::{spec_assignment, SpecAssignment};
use crate::optimize::facts::{static_facts, Facts, Stride};
use crate::spec::Launch;
use crate::syntax::{self, Lang};

const ID: &str = "remap_lanes";

/// How much more an access inside a loop weighs than one outside.
pub(super) const IN_LOOP_WEIGHT: u32 = 8;

/// The most blocks a grid's y dimension may have.
const GRID_Y_MAX: u64 = 65_535;

/// Spellings of warp-level code: the remap changes which threads share a warp.
pub(super) const WARP_LEVEL: &[&str] = &[
    "__shfl",
    "__ballot",
    "__activemask",
    "__any_sync",
    "__all_sync",
    "__match_",
    "__syncwarp",
    "__reduce_",
    "warpSize",
    "laneid",
    "tiled_partition",
    "coalesced_threads",
];

pub fn remap_lanes(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, ID)?;
    let plan = current_plan(cx)?;
    let k = &cx.kernel.name;
    let unit_text = super::unit::unit_text(cx);
    if let Some(w) = WARP_LEVEL.iter().find(|w| unit_text.contains(*w)) {
        return Err(not_applicable(format!(
            "`{k}` uses warp-level code (`{w}`): which threads share a warp matters to it, so its thread axes are not swapped"
        )));
    }
    let too_wide = plan
        .cases
        .iter()
        .any(|c| matches!(c.launch, Launch::Cuda { grid, .. } if grid[0] > GRID_Y_MAX));
    if too_wide {
        return Err(not_applicable(format!(
            "`{k}`'s grid has more than {GRID_Y_MAX} blocks along x in some case; swapped, they would exceed the y limit"
        )));
    }
    let one_wide = plan
        .cases
        .iter()
        .all(|c| matches!(c.launch, Launch::Cuda { block, .. } if block[1] == 1));
    if one_wide {
        return Err(not_applicable(format!(
            "`{k}`'s block is 1-D: swapped it would be 1 thread wide along x, and a warp would still be 32 consecutive threads walking the same index"
        )));
    }
    let (grid, block) = (launch_of(cx, "grid")?, launch_of(cx, "block")?);
    let axes = swapped_axes(cx);
    let def = &cx.kernel.def_range;
    if axes
        .iter()
        .any(|a| a.at.start < def.start || a.at.end > def.end)
    {
        return Err(not_applicable(format!(
            "a helper `{k}` calls reads the thread or block index; other kernels may call it too, so it is not remapped"
        )));
    }
    let mut e = Edits::new();
    e.extend(axes);
    e.extend(swapped_dims(&grid));
    e.extend(swapped_dims(&block));
    let remapped = e
        .apply(cx.text)
        .map_err(|err| not_applicable(format!("`{k}` could not be remapped: {err}")))?;
    let (Some(before), Some(after)) = (weights(cx, cx.text), weights(cx, &remapped)) else {
        return Err(not_applicable(format!(
            "`{k}`'s accesses could not be analysed after the remap"
        )));
    };
    if !better(before, after) {
        return Err(not_applicable(format!(
            "swapping `{k}`'s thread axes would not coalesce its global accesses (strided weight {} -> {}, coalesced {} -> {}); the lane already walks the fastest index or none",
            before.strided, after.strided, before.coalesced, after.coalesced
        )));
    }
    let mut drafts = vec![Draft {
        label: "threads remapped: x walks what y walked".into(),
        text: remapped,
    }];
    drafts.extend(wider_lanes(cx, &grid, &block));
    finish(cx, drafts, Vec::new())
}

fn launch_of(cx: &RewriteContext<'_>, name: &str) -> Result<SpecAssignment, super::RewriteError> {
    spec_assignment(cx.kernel, name).ok_or_else(|| {
        not_applicable(format!(
            "`{}`'s spec has no `{name} = ...` to swap",
            cx.kernel.name
        ))
    })
}

/// `threadIdx.x` <-> `threadIdx.y` (and `blockIdx`, `blockDim`, `gridDim`) in every
/// function of the kernel unit.
fn swapped_axes(cx: &RewriteContext<'_>) -> Vec<Edit> {
    let mut out = Vec::new();
    let root = cx.tree.root_node();
    walk(root, &mut |n| {
        let inside = cx
            .kernel
            .unit_ranges
            .iter()
            .any(|r| n.start_byte() < r.end && r.start < n.end_byte());
        if !inside {
            return false;
        }
        if n.kind() == "field_expression" {
            let (Some(a), Some(f)) = (
                n.child_by_field_name("argument"),
                n.child_by_field_name("field"),
            ) else {
                return true;
            };
            let builtin = matches!(
                text(cx.text, a),
                "threadIdx" | "blockIdx" | "blockDim" | "gridDim"
            );
            let other = match text(cx.text, f) {
                "x" => "y",
                "y" => "x",
                _ => return true,
            };
            if builtin {
                out.push(Edit::replace(f.byte_range(), other));
            }
        }
        true
    });
    out
}

/// The launch dims with x and y swapped (a 1-D launch becomes `(1, X)`).
fn swapped_dims(a: &SpecAssignment) -> Vec<Edit> {
    let parts: Vec<&str> = components(&a.text)
        .into_iter()
        .map(|r| &a.text[r])
        .collect();
    let dims: Vec<&str> = match parts.as_slice() {
        [x] => vec!["1", x],
        [x, y, rest @ ..] => [*y, *x].into_iter().chain(rest.iter().copied()).collect(),
        [] => return Vec::new(),
    };
    vec![Edit::replace(
        a.range.clone(),
        format!("({})", dims.join(", ")),
    )]
}

/// The remap with blocks whose x covers 32 or 64 lanes: `(B, A)` from a 2-D literal
/// block (A, B) of T threads becomes (32, T/32) and (64, T/64), the grid's dims rescaled.
fn wider_lanes(
    cx: &RewriteContext<'_>,
    grid: &SpecAssignment,
    block: &SpecAssignment,
) -> Vec<Draft> {
    let Some(old) = literal_dims(&block.text).filter(|d| d.len() >= 2) else {
        return Vec::new();
    };
    let threads = old[0] * old[1];
    let parts: Vec<String> = components(&grid.text)
        .into_iter()
        .map(|r| grid.text[r].to_string())
        .collect();
    if parts.len() < 2 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for lanes in [32, 64] {
        if threads % lanes != 0 || lanes == old[1] {
            continue;
        }
        let new = [lanes, threads / lanes];
        // Swapped: the new x counts what the old y covered, in blocks of `lanes`.
        let (Some(gx), Some(gy)) = (
            rescale(&parts[1], old[1], new[0]),
            rescale(&parts[0], old[0], new[1]),
        ) else {
            continue;
        };
        let mut dims = vec![gx, gy];
        dims.extend(parts.iter().skip(2).cloned());
        let mut e = Edits::new();
        e.extend(swapped_axes(cx));
        e.extend([Edit::replace(
            grid.range.clone(),
            format!("({})", dims.join(", ")),
        )]);
        let mut b = new.to_vec();
        b.extend(old.get(2));
        e.extend([Edit::replace(block.range.clone(), format_dims(&b))]);
        if let Ok(t) = e.apply(cx.text) {
            out.push(Draft {
                label: format!("threads remapped, block ({}, {})", new[0], new[1]),
                text: t,
            });
        }
    }
    out
}

/// Global accesses by how they meet the lane, weighted (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Weights {
    /// Unit stride, or one address for the whole warp.
    pub coalesced: u32,
    pub strided: u32,
}

/// The weights of `cx`'s kernel as it stands in `text` (None if it no longer parses).
fn weights(cx: &RewriteContext<'_>, text: &str) -> Option<Weights> {
    let doc = Document::new(Lang::Cuda, 0, text);
    let tree = doc.tree()?;
    let model = syntax::analyze(Lang::Cuda, text, tree);
    let kernel = model.kernel(&cx.kernel.name)?;
    Some(access_weights(&static_facts(
        Lang::Cuda,
        text,
        tree,
        &model,
        kernel,
    )))
}

pub(super) fn access_weights(f: &Facts) -> Weights {
    let mut w = Weights {
        coalesced: 0,
        strided: 0,
    };
    let mut seen = BTreeMap::new();
    for a in &f.accesses {
        // One access per buffer, index and loop context (a helper inlined twice counts once).
        if seen.insert((&a.buffer, &a.index, a.in_loop), ()).is_some() {
            continue;
        }
        let weight = if a.in_loop { IN_LOOP_WEIGHT } else { 1 };
        match a.stride {
            Stride::Unit | Stride::Uniform => w.coalesced += weight,
            Stride::Strided(_) | Stride::Symbolic => w.strided += weight,
            Stride::Unknown => {}
        }
    }
    w
}

/// Whether the remap pays: fewer strided accesses and more coalesced ones.
pub(super) fn better(before: Weights, after: Weights) -> bool {
    after.strided < before.strided && after.coalesced > before.coalesced
}

#[cfg(test)]
#[path = "remap_lanes/tests.rs"]
mod tests;
