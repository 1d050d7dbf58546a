//! Which lanes a loop strides over, read from its start and its step as polynomials
//! (`super::super::poly`, thread indices as atoms, the kernel's single-definition locals
//! expanded): the threads of a block (`threadIdx.x`, step `blockDim.x` or the block's
//! width as a literal), of the grid (`blockIdx.x * blockDim.x + threadIdx.x`, step
//! `blockDim.x * gridDim.x`) or of a warp (`threadIdx.x % 32`, `& 31`, step 32 or
//! `warpSize`). The start is split, as written, into a uniform part and the lane part.

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::super::poly::{poly, Atom, Names, Poly};
use super::super::tree::{named_children, text};
use crate::spec::{BenchPlan, Launch};

/// The set of threads a loop's start ranges over and its step counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Form {
    /// `threadIdx.x` over the block's width.
    Block,
    /// `blockIdx.x * blockDim.x + threadIdx.x` over the grid's threads along x.
    Grid,
    /// The lane of a warp over its 32 lanes.
    Warp,
}

impl Form {
    /// For labels: what the step counts.
    pub(super) fn shown(self) -> &'static str {
        match self {
            Form::Block => "the block's threads",
            Form::Grid => "the grid's threads",
            Form::Warp => "a warp's lanes",
        }
    }
}

/// A loop's start split into its uniform part and its lanes, as written.
pub(super) struct Start<'t> {
    pub form: Form,
    /// The uniform summands' nodes.
    pub uniform_nodes: Vec<Node<'t>>,
    /// The summands that do not move with the lane (`row * cols`), or None.
    pub uniform: Option<String>,
    /// The summands that do (`threadIdx.x`, `lane`, `blockIdx.x * blockDim.x + tid`).
    pub lanes: String,
}

/// Thread positions as atoms, the kernel's single definitions expanded.
pub(super) struct Positions<'t> {
    pub defs: BTreeMap<String, Node<'t>>,
    pub varying: BTreeSet<String>,
}

impl<'t> Names<'t> for Positions<'t> {
    fn rename(&self, _: &str) -> Option<Atom> {
        None
    }
    fn definition(&self, name: &str) -> Option<Node<'t>> {
        self.defs.get(name).copied()
    }
    fn varies(&self, name: &str) -> bool {
        self.varying.contains(name)
    }
    fn positions_vary(&self) -> bool {
        false
    }
}

const TID: &str = "threadIdx.x";
/// A lane within its warp, as authors write it after the thread index (`threadIdx.x`, or
/// a local that holds it: `tid & 31`).
const WARP_LANES: [&str; 5] = ["%32", "&31", "&0x1f", "%warpSize", "&(warpSize-1)"];

fn term(atoms: &[&str]) -> Poly {
    let mut k: Vec<Atom> = atoms.iter().map(|a| a.to_string()).collect();
    k.sort();
    Poly(BTreeMap::from([(k, 1)]))
}

/// Is this atom a lane within its warp: the thread index, or a local that holds it,
/// modulo the warp's width?
fn warp_lane(src: &str, names: &Positions<'_>, a: &str) -> bool {
    // An opaque atom over a local is marked `?`; the local is looked up below.
    let a = a.trim_start_matches('?');
    WARP_LANES.iter().any(|w| {
        a.strip_suffix(w).is_some_and(|t| {
            t == TID
                || names
                    .defs
                    .get(t)
                    .is_some_and(|d| poly(src, *d, names) == term(&[TID]))
        })
    })
}

/// Does this summand move with the thread along x, or hold the grid's block offset
/// `blockIdx.x * blockDim.x`?
fn lane_term(src: &str, names: &Positions<'_>, q: &Poly) -> bool {
    q.0.keys().any(|k| {
        k == &["blockDim.x", "blockIdx.x"] || k.iter().any(|a| a == TID || warp_lane(src, names, a))
    })
}

/// The `+` summands of `n`, through parentheses.
fn summands<'t>(n: Node<'t>, out: &mut Vec<Node<'t>>) {
    match n.kind() {
        "parenthesized_expression" if named_children(n).len() == 1 => {
            summands(named_children(n)[0], out)
        }
        "binary_expression" if n.child_by_field_name("operator").map(|o| o.kind()) == Some("+") => {
            for side in ["left", "right"] {
                if let Some(c) = n.child_by_field_name(side) {
                    summands(c, out);
                }
            }
        }
        _ => out.push(n),
    }
}

/// The block widths of every case (x), or None for a launch that is not CUDA's.
fn block_widths(plan: &BenchPlan) -> Option<Vec<u64>> {
    plan.cases
        .iter()
        .map(|c| match &c.launch {
            Launch::Cuda { block, .. } => Some(block[0]),
            Launch::Triton { .. } => None,
        })
        .collect()
}

/// The start split into uniform part and lanes, checked against the step: the lanes
/// must be exactly the threads the step counts, so that the threads sharing the uniform
/// part take every element from it to the bound once between them.
pub(super) fn classify<'t>(
    src: &str,
    names: &Positions<'_>,
    plan: &BenchPlan,
    init: Node<'t>,
    step: Node<'_>,
) -> Result<Start<'t>, String> {
    let mut parts = Vec::new();
    summands(init, &mut parts);
    let (mut lane_poly, mut lanes, mut uniform) = (Poly::default(), Vec::new(), Vec::new());
    let mut uniform_nodes = Vec::new();
    for p in parts {
        let q = poly(src, p, names);
        if lane_term(src, names, &q) {
            lane_poly = lane_poly.add(&q, 1);
            lanes.push(text(src, p));
        } else {
            uniform.push(text(src, p));
            uniform_nodes.push(p);
        }
    }
    let start = text(src, init);
    if lanes.is_empty() {
        return Err(format!(
            "its start `{start}` does not depend on `threadIdx.x`: every thread walks the same elements"
        ));
    }
    let form = if lane_poly == term(&[TID]) {
        Form::Block
    } else if lane_poly == term(&["blockDim.x", "blockIdx.x"]).add(&term(&[TID]), 1) {
        Form::Grid
    } else if matches!(lane_poly.0.iter().next(), Some((k, 1)) if lane_poly.0.len() == 1
        && k.len() == 1
        && warp_lane(src, names, &k[0]))
    {
        Form::Warp
    } else {
        return Err(format!(
            "the lane part of its start (`{}`) is not `threadIdx.x`, `blockIdx.x * blockDim.x + threadIdx.x` or a lane of a warp (`threadIdx.x % 32`): the threads would not take neighbouring elements",
            lanes.join(" + ")
        ));
    };
    check_step(src, names, plan, form, step)?;
    Ok(Start {
        form,
        uniform_nodes,
        uniform: (!uniform.is_empty()).then(|| uniform.join(" + ")),
        lanes: lanes.join(" + "),
    })
}

/// The step must count exactly the lanes of `form`.
fn check_step(
    src: &str,
    names: &Positions<'_>,
    plan: &BenchPlan,
    form: Form,
    step: Node<'_>,
) -> Result<(), String> {
    let s = poly(src, step, names);
    let widths = block_widths(plan).unwrap_or_default();
    let ok = match form {
        Form::Block => {
            s == term(&["blockDim.x"])
                || s.as_constant()
                    .is_some_and(|k| !widths.is_empty() && widths.iter().all(|w| *w as i64 == k))
        }
        Form::Grid => s == term(&["blockDim.x", "gridDim.x"]),
        Form::Warp => {
            if !widths.iter().all(|w| w % 32 == 0) {
                return Err(format!(
                    "it walks a warp's lanes, but a case launches blocks of {:?} threads, not a multiple of 32",
                    widths
                ));
            }
            s == Poly::constant(32) || s == term(&["warpSize"])
        }
    };
    if ok {
        return Ok(());
    }
    let want = match form {
        Form::Block => "`blockDim.x` or the block's width",
        Form::Grid => "`blockDim.x * gridDim.x`",
        Form::Warp => "32 or `warpSize`",
    };
    Err(format!(
        "its step `{}` is not the number of lanes its start ranges over, {want}: the threads would skip or repeat elements",
        text(src, step)
    ))
}
