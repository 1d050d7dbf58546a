//! Which lanes a loop strides over, read from its start and its step as polynomials
//! (`super::super::poly`, thread indices as atoms, the kernel's single-definition locals
//! expanded): the threads of a block (`threadIdx.x`, step `blockDim.x` or the block's
//! width as a literal), of the grid (`blockIdx.x * blockDim.x + threadIdx.x`, step
//! `blockDim.x * gridDim.x`) or of a warp (`threadIdx.x % 32`, `& 31`, step 32 or
//! `warpSize`). The start is split, as written, into a uniform part and the lane part.
//!
//! A **team** of blocks is the fourth: a start `U * blockDim.x + threadIdx.x` (written out
//! or through a local such as `lane`) with U uniform within a block and built from a block
//! index (`blockIdx.x % K`, `blockIdx.x - (blockIdx.x / K) * K`, `blockIdx.y`) and a step
//! `K * blockDim.x` (or `blockDim.x * gridDim.y` where U is `blockIdx.y`): the team is the
//! blocks that share `blockIdx.x / K` (or every other block index), its lanes the
//! `K * blockDim.x` threads those blocks hold. Taken only where the team provably covers
//! every residue of the step, U taking every value in `[0, K)` within it: `blockIdx.x % K`
//! on a grid whose width is a multiple of K in every case of the spec, `blockIdx.y` with
//! `gridDim.y` in the step (or a step `K * blockDim.x` on grids K blocks high). Coverage
//! matters because the vector loop hands element groups to lanes differently from the
//! author's loop: lane c reads vectors c, c + S, ..., not elements c, c + S, .... Only where
//! the team holds every lane of the step do its threads own the same elements between them
//! before and after the rewrite (what a team missing lanes skips would change), and only
//! then does combining the team's partials after the loop (the data-flow check,
//! `super::flow`: over blocks only atomics combine; a value read back through `asm`, as a
//! cluster's shared memory is, is not followed and verification backs it) give the same
//! totals.

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
    /// `U * blockDim.x + threadIdx.x` over a team of blocks (see the module's paragraph).
    Team(Team),
}

/// A team of blocks: the block index that tells its blocks apart, and how many there
/// are where the step gives the number (`K * blockDim.x`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Team {
    pub axis: char,
    pub blocks: Option<i64>,
}

impl Form {
    /// For labels: what the step counts.
    pub(super) fn shown(self) -> String {
        match self {
            Form::Block => "the block's threads".into(),
            Form::Grid => "the grid's threads".into(),
            Form::Warp => "a warp's lanes".into(),
            Form::Team(Team {
                axis,
                blocks: Some(k),
            }) => format!("a team of {k} blocks' threads (`blockIdx.{axis}`)"),
            Form::Team(Team { axis, blocks: None }) => {
                format!("the threads of the blocks along {axis}")
            }
        }
    }

    /// Do the lanes span several blocks (so a block's shared memory holds only some of
    /// their partials)?
    pub(super) fn spans_blocks(self) -> bool {
        matches!(self, Form::Grid | Form::Team(_))
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
    let step_poly = poly(src, step, names);
    let teams = team_step(&step_poly);
    let (mut lane_poly, mut lanes, mut uniform) = (Poly::default(), Vec::new(), Vec::new());
    let mut uniform_nodes = Vec::new();
    for p in parts {
        let q = poly(src, p, names);
        if lane_term(src, names, &q) || (teams && block_offset(&q)) {
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
    let shown = lanes.join(" + ");
    let form = if lane_poly == term(&[TID]) {
        Form::Block
    } else if lane_poly == term(&["blockDim.x", "blockIdx.x"]).add(&term(&[TID]), 1) {
        Form::Grid
    } else if matches!(lane_poly.0.iter().next(), Some((k, 1)) if lane_poly.0.len() == 1
        && k.len() == 1
        && warp_lane(src, names, &k[0]))
    {
        Form::Warp
    } else if teams {
        let u = block_part(&lane_poly, &shown)?;
        Form::Team(team(src, names, plan, (&u, &shown), (step, &step_poly))?)
    } else {
        return Err(format!(
            "the lane part of its start (`{shown}`) is not `threadIdx.x`, `blockIdx.x * blockDim.x + threadIdx.x`, a lane of a warp (`threadIdx.x % 32`) or a team of blocks (`(blockIdx.x % K) * blockDim.x + threadIdx.x` with step `K * blockDim.x`): the threads would not take neighbouring elements"
        ));
    };
    if !matches!(form, Form::Team(_)) {
        check_step(src, names, plan, form, step)?;
    }
    Ok(Start {
        form,
        uniform_nodes,
        uniform: (!uniform.is_empty()).then(|| uniform.join(" + ")),
        lanes: shown,
    })
}

/// Is the step a whole number of blocks other than one block or the grid's threads:
/// `K * blockDim.x`, `blockDim.x * gridDim.y`, `k * blockDim.x` (a team whose size the
/// team's index must then prove)?
fn team_step(s: &Poly) -> bool {
    let by = |k: &Vec<Atom>, c: i64| {
        k.iter().filter(|a| *a == "blockDim.x").count() == 1
            && match k.len() {
                1 => c > 1,
                2 => c == 1,
                _ => false,
            }
    };
    s.0.len() == 1 && s.0.iter().all(|(k, c)| by(k, *c)) && s != &term(&["blockDim.x", "gridDim.x"])
}

/// Is this summand a block's offset among a team's lanes: the block's width times a
/// value of the block indices alone (`(blockIdx.x % 8) * blockDim.x`)?
fn block_offset(q: &Poly) -> bool {
    !q.0.is_empty()
        && q.0.keys().all(|k| {
            k.iter().filter(|a| *a == "blockDim.x").count() == 1
                && k.iter()
                    .any(|a| a.trim_start_matches('?').starts_with("blockIdx."))
        })
}

/// U of lanes `U * blockDim.x + threadIdx.x`, or why the lanes are not a team's.
fn block_part(lanes: &Poly, shown: &str) -> Result<Poly, String> {
    let rest = lanes.clone().add(&term(&[TID]), -1);
    let mut u = Poly::default();
    for (k, c) in &rest.0 {
        let at = k.iter().position(|a| a == "blockDim.x");
        let (Some(at), false) = (at, k.iter().any(|a| a.contains("threadIdx"))) else {
            return Err(format!(
                "the lane part of its start (`{shown}`) is not `U * blockDim.x + threadIdx.x` with U the same in every thread of a block (a block's index within its team): the threads would not take neighbouring elements"
            ));
        };
        let mut k = k.clone();
        k.remove(at);
        u.0.insert(k, *c);
    }
    Ok(u)
}

/// The value a name or literal of an atom's text stands for: a number, a position, or
/// a local's single definition.
fn resolve(src: &str, names: &Positions<'_>, t: &str) -> Option<Poly> {
    if let Some(k) = super::super::poly::int_literal(t) {
        return Some(Poly::constant(k));
    }
    if t.starts_with("blockIdx.") {
        return Some(term(&[t]));
    }
    names.defs.get(t).map(|d| poly(src, *d, names))
}

/// `X op K` of an opaque atom's text with X the block index along `axis` and K a number.
fn index_op(src: &str, names: &Positions<'_>, atom: &str, op: char) -> Option<(char, i64)> {
    let (x, k) = atom.trim_start_matches('?').rsplit_once(op)?;
    let x = resolve(src, names, x)?;
    let k = resolve(src, names, k)?.as_constant()?;
    let axis = ['x', 'y', 'z']
        .into_iter()
        .find(|a| x == term(&[&format!("blockIdx.{a}")]))?;
    Some((axis, k))
}

/// The team U names: `blockIdx.y` (any axis: every block along it), `blockIdx.x % K` or
/// `blockIdx.x - K * (blockIdx.x / K)` (K blocks), or why U is not a block's place in
/// its team.
fn team_of(src: &str, names: &Positions<'_>, u: &Poly, shown: &str) -> Result<Team, String> {
    if let Some(axis) = ['x', 'y', 'z']
        .into_iter()
        .find(|a| u == &term(&[&format!("blockIdx.{a}")]))
    {
        return Ok(Team { axis, blocks: None });
    }
    let single = |k: &Vec<Atom>, op| match k.as_slice() {
        [a] => index_op(src, names, a, op),
        _ => None,
    };
    let terms: Vec<(&Vec<Atom>, i64)> = u.0.iter().map(|(k, c)| (k, *c)).collect();
    let team = match terms.as_slice() {
        [(k, 1)] => single(k, '%'),
        [(a, 1), (q, c)] | [(q, c), (a, 1)] => single(q, '/')
            .filter(|(axis, k)| *c == -*k && a.as_slice() == [format!("blockIdx.{axis}")]),
        _ => None,
    };
    match team {
        Some((axis, k)) if k > 1 => Ok(Team {
            axis,
            blocks: Some(k),
        }),
        _ => Err(format!(
            "the block part of its lanes (`{shown}`) is not `blockIdx.x % K` with K a number, `blockIdx.x - (blockIdx.x / K) * K` or `blockIdx.y` times `blockDim.x`: kernel-lsp cannot prove the team's blocks take every lane of the step once"
        )),
    }
}

/// The team of lanes `U * blockDim.x + threadIdx.x`, checked against the step and the
/// spec's grids: it must hold every lane the step counts (see the module's paragraph).
fn team(
    src: &str,
    names: &Positions<'_>,
    plan: &BenchPlan,
    (u, shown): (&Poly, &str),
    (step, s): (Node<'_>, &Poly),
) -> Result<Team, String> {
    let t = team_of(src, names, u, shown)?;
    let whole = term(&["blockDim.x", &format!("gridDim.{}", t.axis)]);
    let k = s.0.get(&vec!["blockDim.x".to_string()]).copied();
    let grids = cuda_grids(plan).ok_or_else(|| {
        "its lanes are a team of blocks, but its spec's launch is not CUDA's".to_string()
    })?;
    let along = |g: &[u64; 3]| g[(t.axis as u8 - b'x') as usize];
    let mismatch = || {
        format!(
            "its step `{}` is not the number of lanes of its team ({}): the threads would skip or repeat elements",
            text(src, step),
            match t.blocks {
                Some(k) => format!("`{k} * blockDim.x`"),
                None => format!("`blockDim.x * gridDim.{}`", t.axis),
            }
        )
    };
    match (t.blocks, k) {
        (None, _) if s == &whole => Ok(t),
        (None, Some(k)) if grids.iter().all(|g| along(g) as i64 == k) => Ok(Team {
            blocks: Some(k),
            ..t
        }),
        (None, Some(k)) => Err(format!(
            "its step `{}` counts {k} blocks along {}, but a case launches {:?} blocks there: the team would not hold every lane of the step",
            text(src, step),
            t.axis,
            grids.iter().map(along).collect::<Vec<_>>()
        )),
        (Some(b), Some(k)) if b == k => match grids.iter().find(|g| along(g) % b as u64 != 0) {
            None => Ok(t),
            Some(g) => Err(format!(
                "its lanes are teams of {b} blocks (`{shown}`), but a case launches {} blocks along {}, not a multiple of {b}: the last team would miss lanes of the step",
                along(g),
                t.axis
            )),
        },
        _ => Err(mismatch()),
    }
}

/// The grid of every case, or None for a launch that is not CUDA's.
fn cuda_grids(plan: &BenchPlan) -> Option<Vec<[u64; 3]>> {
    plan.cases
        .iter()
        .map(|c| match &c.launch {
            Launch::Cuda { grid, .. } => Some(*grid),
            Launch::Triton { .. } => None,
        })
        .collect()
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
        Form::Team(_) => true,
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
        Form::Team(_) => "the lanes of its team",
    };
    Err(format!(
        "its step `{}` is not the number of lanes its start ranges over, {want}: the threads would skip or repeat elements",
        text(src, step)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(terms: &[(&[&str], i64)]) -> Poly {
        Poly(
            terms
                .iter()
                .map(|(k, c)| (k.iter().map(|a| a.to_string()).collect(), *c))
                .collect(),
        )
    }

    #[test]
    fn a_team_steps_by_whole_blocks_other_than_one_or_the_grid() {
        assert!(team_step(&p(&[(&["blockDim.x"], 8)])));
        assert!(team_step(&p(&[(&["blockDim.x", "gridDim.y"], 1)])));
        assert!(team_step(&p(&[(&["blockDim.x", "k"], 1)])));
        assert!(!team_step(&p(&[(&["blockDim.x"], 1)])));
        assert!(!team_step(&p(&[(&["blockDim.x", "gridDim.x"], 1)])));
        assert!(!team_step(&p(&[(&["blockDim.x", "gridDim.y"], 2)])));
        assert!(!team_step(&p(&[(&["blockDim.x"], 4), (&[], 1)])));
    }

    #[test]
    fn a_block_offset_is_the_blocks_width_times_block_indices() {
        assert!(block_offset(&p(&[(&["blockDim.x", "blockIdx.x%8"], 1)])));
        assert!(block_offset(&p(&[(&["blockDim.x", "blockIdx.y"], 1)])));
        assert!(!block_offset(&p(&[(&["blockDim.x", "row"], 1)])));
        assert!(!block_offset(&p(&[(&["blockIdx.x%8"], 1)])));
        assert!(!block_offset(&Poly::default()));
    }

    #[test]
    fn the_block_part_is_u_of_u_times_the_width_plus_the_thread() {
        let lanes = p(&[(&["blockDim.x", "blockIdx.x%4"], 1), (&[TID], 1)]);
        assert_eq!(block_part(&lanes, "l"), Ok(p(&[(&["blockIdx.x%4"], 1)])));
        let from_threads = p(&[(&["blockDim.x", "(threadIdx.x/32)%4"], 1), (&[TID], 1)]);
        assert!(block_part(&from_threads, "l").is_err());
        let twice = p(&[(&["blockDim.x", "blockIdx.y"], 1), (&[TID], 2)]);
        assert!(block_part(&twice, "l").is_err());
    }
}
