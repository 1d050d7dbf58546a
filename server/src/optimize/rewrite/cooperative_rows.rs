//! `cooperative_rows`: a kernel where one thread owns a row and loops over its columns
//! becomes one where a team of threads shares each row: a warp (32 lanes), half or a
//! quarter of a warp (2 or 4 rows per warp, for short rows), or a whole block with a
//! shared-memory combine (long rows). Modes `warp_regs` and `block_regs` also keep a
//! row that several column loops read or write in registers between them (see
//! [`staging`]: one pass over global memory each way instead of one per loop).
//!
//! **Matches** the 1-D shape `int row = blockIdx.x * blockDim.x + threadIdx.x;` followed
//! by `if (row < rows) { ... }` ending the kernel or `if (row >= rows) return;`. Inside
//! the row body, a *column loop* is a counted loop (`for (int c = S; c < E; c++)`, any
//! literal step, or `int c = S; while (c < E) { ...; c++; }`) whose variable indexes a
//! global access. Each column loop becomes lane-strided (`c = S + lane; c += 32`), so
//! column `c` is always handled by the same lane; the rest of the row body runs in every
//! lane of the team, identically. In a nest, a loop is not the column loop when a loop
//! inside it moves an access by one element, has no literal trip count under 32, and
//! holds no access that moves by one element with the outer loop (a weight per image
//! `w[n]` read outside the inner loop does not count) (`for (n ...) for (p ...) s += x[(n * C + c) * HW +
//! p];`, NCHW channel statistics): the inner loop is, and the outer one runs in every
//! lane. The accumulators are all-reduced after the inner loop, or after the outermost
//! loop around it in which nothing else touches them (one combine a row, not one an
//! image; [`combine_site`]).
//!
//! **Inside a column loop** a variable declared outside it may only be an accumulator:
//! `s += e`, `s -= e`, `s++`, `s = s + e`, `s *= e`, `s |= e`, `s ^= e`,
//! `s = fmaxf(s, e)` (`fmax`, `max`, `fminf`, `fmin`, `min`), `s = e > s ? e : s`, or
//! `if (e > s) s = e;` (any comparison that keeps the larger or the smaller), or an
//! arg-max/min pick `if (e > s) { s = e; at = c; }` (values assigned beside the extreme,
//! one of them the column; see [`arg`]: combined as one, ties to the column the loop
//! meets first or last as the author's comparison does), and it may not be read
//! otherwise in the loop. Right after the loop the team all-reduces it with
//! `__shfl_xor_sync` (the author's own update replayed with the other lane's value), so
//! every lane holds the row's result; a sum or product whose value before the loop is
//! not a literal zero is first reset in every lane but the team's first. Global writes in
//! a column loop must hit the loop's own column (`base + k*c`, `k` nonzero, `base` the
//! same in every lane), and a buffer written anywhere may be read in a column loop only
//! at the very element the same lane writes; read-only buffers may be read anywhere.
//!
//! **Outside column loops**, a statement that writes global memory (`out[row] = s;`, an
//! atomic) runs in the team's first lane only (`if (lane == 0) ...`); it may not assign
//! a local, and no other row-level code may read a buffer written this way.
//!
//! **Refuses**, with the reason: another index or guard shape, a 2-D launch, a grid that
//! does not count blocks of `block` threads, barriers, shared memory, warp collectives,
//! `threadIdx`/`blockIdx` in the row body, `break`/`return`/`goto` in a column loop, a
//! column loop whose bound or start depends on the loop, a variable assigned in a column
//! loop that is not an accumulator, an accumulator read mid-loop, a write whose owner
//! cannot be told (`y[idx[c]]`, `y[c + 1]` next to `y[c]`), a row-level read of a buffer
//! one lane writes, a written buffer passed to a function.
//!
//! **Launch**: warp teams keep the block size (256 when it is not a multiple of 32) and
//! divide the grid's `cdiv(rows, B)` by the rows a block now covers; block teams launch
//! `grid = rows` with param `block_threads` (default 128 and 256, and 1024 when the timed
//! case launches fewer than 512 threads along x: few rows) threads. **Cluster** teams
//! (mode `cluster`, sm_90), offered where the timed case launches fewer than two threads
//! along x per multiprocessor (`sms`; at most that many rows, too few for blocks per row to
//! keep the GPU's loads in flight): each row goes to a cluster of C blocks (param
//! `clusters`, default 4 and 8; `__cluster_dims__(C, 1, 1)`, grid `rows * C`, each block
//! size of `block_threads` whose cluster gives a row more threads than the largest block
//! alone); its column loops are shared by the cluster's lanes (`lane = (blockIdx.x % C) *
//! blockDim.x + threadIdx.x`), each block combines as a block team does, then the blocks'
//! values are read from each other's shared memory in rank order between two cluster
//! barriers ([`combine::cluster_combine`], shared with `split_loop`), so every lane holds
//! the row's values before the next loop reads them. Where the cluster's lanes would take
//! under 4 columns each from a column loop inside a loop that gives each block a trip,
//! the blocks take that loop's trips in turn and each block's threads share the column
//! loop ([`nest`]). An arg pick or a carried type other
//! than a 4- or 8-byte int or float gets no cluster. Param `modes` picks among `warp`,
//! `rows2`, `rows4`, `block`, `warp_regs`, `block_regs`, `cluster` (default all);
//! `stage_registers` caps the registers per staged buffer (default: the longest row), and
//! a block team stages a row only where its threads can hold it beside 64 registers of
//! their own (a 1024-thread block never: it could not launch);
//! `scan_tile` lists the columns a lane takes per trip in a running sum's scan (default
//! 1, 4 and 8), `walk_tile` the same for warp rows whose loops walk the row contiguously
//! (default 1, 4 and 8; see [`tiles`]).

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::access::{
    base_of, canon, collect_accesses, contains, declare, enclosing_statement, Access, Scope,
};
use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::edits::{Edit, Edits};
use super::elementwise::{
    is_block_yz, match_elementwise, one_d_grid, thread_bound, Elementwise, Guard, ThreadBound,
};
use super::params::Params;
use super::poly::{poly, Names, Poly, VarNames};
use super::spec_expr::divisions;
use super::tree::{
    code_names, declared_in, first_line, fresh, kernel_function, line_indent, named_children,
    nested_in, newline, reindent, text, walk, written_target,
};
use super::RewriteContext;
use crate::optimize::edit;
use crate::spec::{BenchPlan, Launch};
use crate::syntax::Lang;

const ID: &str = "cooperative_rows";
const MODES: &[&str] = &[
    "warp",
    "rows2",
    "rows4",
    "block",
    "warp_regs",
    "block_regs",
    "cluster",
];
const ROW_SHAPE: &str = "`int row = blockIdx.x * blockDim.x + threadIdx.x; if (row < rows) { ... }` (or `if (row >= rows) return;`) with loops over the row's columns";

/// How a team combines lane partials of one accumulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Family {
    Sum,
    Prod,
    Or,
    Xor,
    Max,
    Min,
}

impl Family {
    /// The value that lanes other than the first start from, when the accumulator's
    /// value before the loop may be nonzero; None when combining is idempotent.
    pub(super) fn reset(self) -> Option<&'static str> {
        match self {
            Family::Sum | Family::Xor => Some("0"),
            Family::Prod => Some("1"),
            Family::Or | Family::Max | Family::Min => None,
        }
    }
    fn compound(self) -> Option<&'static str> {
        match self {
            Family::Sum => Some("+="),
            Family::Prod => Some("*="),
            Family::Or => Some("|="),
            Family::Xor => Some("^="),
            Family::Max | Family::Min => None,
        }
    }
    fn word(self) -> &'static str {
        match self {
            Family::Sum => "sum",
            Family::Prod => "product",
            Family::Or => "or",
            Family::Xor => "xor",
            Family::Max => "max",
            Family::Min => "min",
        }
    }
}

/// Placeholder for the other lane's value in a replayed update.
const OTHER: &str = "\u{1}";

pub(super) struct Acc {
    pub name: String,
    /// The declared type, for temporaries and shared partials.
    pub ty: Option<String>,
    pub family: Family,
    /// Max/min: the author's update with the compared value replaced by [`OTHER`].
    pub template: Option<String>,
    /// `template` uses the other value once, in an unconditional place (`fmaxf(s, O)`).
    pub inline_ok: bool,
    /// Lanes but the first reset it before the loop.
    pub reset: bool,
    /// A running sum read after its update in the same iteration (a prefix sum): the
    /// update statement's byte range and the added term's text.
    pub prefix: Option<(std::ops::Range<usize>, String)>,
    /// An arg-max/min: the values assigned beside this extreme (see [`arg`]).
    pub arg: Option<arg::ArgPick>,
}

pub(super) struct ColumnLoop<'t> {
    /// The first node of the construct (the `while` form's declaration) and the loop.
    pub start: usize,
    pub node: Node<'t>,
    pub var: String,
    pub init: Node<'t>,
    pub step: i64,
    pub update: Node<'t>,
    pub accs: Vec<Acc>,
    /// Every global access in the loop, and how it moves.
    pub moves: Vec<LoopAccess>,
}

/// A counted loop's header as [`column_header`] reads it: (variable, init value node,
/// step, update node, start byte of the construct).
type Header<'t> = (String, Node<'t>, i64, Node<'t>, usize);

impl<'t> ColumnLoop<'t> {
    /// The loop `node` with its header, before its accumulators and moves are known.
    fn bare(node: Node<'t>, (var, init, step, update, start): Header<'t>) -> Self {
        ColumnLoop {
            start,
            node,
            var,
            init,
            step,
            update,
            accs: Vec::new(),
            moves: Vec::new(),
        }
    }
}

/// How an index moves along one variable: not at all, one element, or otherwise (a
/// stride, a symbolic factor, or not linear).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Zero,
    One,
    Other,
}

/// One global access in a column loop: how its element moves along the row index (what
/// neighbouring threads differ in, as written) and along the loop variable.
#[derive(Clone, Debug)]
pub(super) struct LoopAccess {
    /// The access as written (`x[(size_t)r * cols + col]`).
    pub at: String,
    /// The access's node range and the buffer it reaches.
    pub range: crate::syntax::ByteRange,
    pub buffer: String,
    pub write: bool,
    pub along_row: Step,
    pub along_loop: Step,
}

pub(super) struct RowPlan<'t> {
    pub loops: Vec<ColumnLoop<'t>>,
    /// Per column loop, the loop around it that a cluster's blocks may share.
    nests: Vec<Option<nest::Nest<'t>>>,
    /// Row-level statements that write memory (one lane of the team runs them).
    pub lane0: Vec<Node<'t>>,
    /// What the `*_regs` modes keep in registers, or why they cannot.
    stage: Result<staging::Stage, String>,
}

/// The team a row is given to.
#[derive(Clone, Copy)]
enum Team {
    /// `width` lanes of a warp (32, 16 or 8).
    Warp { width: u32 },
    /// A whole block of `threads`.
    Block { threads: u64 },
    /// A cluster of `blocks` blocks of `threads` each (sm_90), combining through
    /// distributed shared memory.
    Cluster { threads: u64, blocks: u64 },
}

pub fn cooperative_rows(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, ID)?;
    let plan = current_plan(cx)?;
    let p = Params(cx.params);
    let modes = p.choices("modes", MODES, MODES)?;
    let block_threads = block_threads(cx, &plan)?;
    let clusters = p.uints("clusters", &[4, 8], 2..=8)?;
    let stage_registers = p.uints("stage_registers", &[64], 1..=64)?[0];
    let scan_tiles = p.uints("scan_tile", &[1, 4, 8], 1..=16)?;
    let walk_tiles = p.uints("walk_tile", &[1, 4, 8], 1..=16)?;
    let k = &cx.kernel.name;
    let func = kernel_function(cx)
        .ok_or_else(|| not_applicable(format!("`{k}`'s definition is not in the syntax tree")))?;
    let shape = match_elementwise(cx.text, func).map_err(|why| {
        not_applicable(format!(
            "`{k}` does not give one row to each thread: {why}; {ID} needs {ROW_SHAPE}"
        ))
    })?;
    let rows = analyze(cx, &plan, &shape).map_err(|why| {
        not_applicable(format!("`{k}` cannot share a row between threads: {why}"))
    })?;
    not_split_loops(cx, func, &rows, &shape.index)?;
    let RowLaunch {
        grid_range,
        grid: _,
        component,
        divs,
        block,
        old_block,
    } = row_launch(cx, &plan, ID, &shape)?;
    let taken = code_names(cx);

    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    for mode in &modes {
        let teams: Vec<Team> = match mode.as_str() {
            "warp" | "warp_regs" => vec![Team::Warp { width: 32 }],
            "rows2" => vec![Team::Warp { width: 16 }],
            "rows4" => vec![Team::Warp { width: 8 }],
            "cluster" => {
                let sms = crate::spec::EvalEnv::default().sms;
                match cluster_teams(&block_threads, &clusters, threads_along_x(&plan), sms) {
                    Ok(teams) => teams,
                    Err(why) => {
                        dropped.push(format!("cluster: {why}"));
                        continue;
                    }
                }
            }
            _ => block_threads
                .iter()
                .map(|t| Team::Block { threads: *t })
                .collect(),
        };
        let staged = mode.ends_with("_regs");
        if let Some(name) = prefix_name(&rows).filter(|_| mode != "warp") {
            dropped.push(format!(
                "{mode}: the running sum `{name}` is scanned by a whole warp per row"
            ));
            continue;
        }
        for team in teams {
            let (label, new_block, new_grid) =
                match team_launch(mode, team, old_block, &divs, &component, &block.text) {
                    Ok(l) => l,
                    Err(why) => {
                        dropped.push(why);
                        continue;
                    }
                };
            let label = nest_label(cx.text, &rows, team, label);
            let (label, stage) = if staged {
                let stage = match &rows.stage {
                    Ok(s) => s,
                    Err(why) => {
                        dropped.push(format!("{label}, row in registers: {why}"));
                        continue;
                    }
                };
                let width = match team {
                    Team::Warp { width } => u64::from(width),
                    Team::Block { threads } | Team::Cluster { threads, .. } => threads,
                };
                let r = stage.registers(width).min(stage_registers);
                if let Some(threads) = block_threads_of(team).filter(|t| !staging_fits(r, *t)) {
                    dropped.push(format!(
                        "{label}, row in registers: {r} registers a lane beside the kernel's own do not fit a block of {threads} threads ({REGISTERS_PER_BLOCK} registers a block)"
                    ));
                    continue;
                }
                let (head, tail) = label.split_once(" (").unwrap_or((&label, ")"));
                (
                    format!(
                        "{head}, {} in registers ({r} per lane; {tail}",
                        stage.describe()
                    ),
                    Some((stage, r)),
                )
            } else {
                (label, None)
            };
            for tile in tiles_for(&rows, mode, &scan_tiles, &walk_tiles) {
                let label = match tile {
                    None => label.clone(),
                    Some(k) => {
                        let (head, tail) = label.split_once(" (").unwrap_or((&label, ")"));
                        let how = match prefix_name(&rows) {
                            Some(_) => " scanned in registers",
                            None => "",
                        };
                        format!("{head}, {k} columns a lane{how} ({tail}")
                    }
                };
                let mut names = taken.clone();
                let mut e = match emit(cx, &shape, &rows, team, stage, tile, &mut names) {
                    Ok(e) => e,
                    Err(why) => {
                        dropped.push(format!("{label}: {why}"));
                        continue;
                    }
                };
                e.extend([
                    Edit::replace(grid_range.clone(), new_grid.clone()),
                    Edit::replace(block.range.clone(), new_block.to_string()),
                ]);
                if let (Team::Cluster { blocks, .. }, Some(name)) =
                    (team, func.child_by_field_name("declarator"))
                {
                    e.extend([Edit::insert(
                        name.start_byte(),
                        format!("__cluster_dims__({blocks}, 1, 1) "),
                    )]);
                }
                match e.apply(cx.text) {
                    Ok(text) => drafts.push(Draft { label, text }),
                    Err(err) => dropped.push(format!("{label}: {err}")),
                }
            }
        }
    }
    finish(cx, drafts, dropped)
}

/// Param `block_threads` (multiples of 32), else the sizes [`block_teams`] picks.
fn block_threads(
    cx: &RewriteContext<'_>,
    plan: &BenchPlan,
) -> Result<Vec<u64>, super::RewriteError> {
    let listed = Params(cx.params).uints("block_threads", &[128, 256], 32..=1024)?;
    if let Some(t) = listed.iter().find(|t| *t % 32 != 0) {
        return Err(super::RewriteError::BadParam {
            name: "block_threads".into(),
            message: format!("{t} is not a multiple of 32"),
        });
    }
    Ok(if cx.params.contains_key("block_threads") {
        listed
    } else {
        block_teams(&listed, threads_along_x(plan))
    })
}

/// Registers one block may hold on every GPU kernel-lsp targets (sm_70 to sm_90).
const REGISTERS_PER_BLOCK: u64 = 65536;
/// Registers a lane needs besides a staged row: indices, accumulators, addresses.
const REGISTERS_BESIDE_STAGE: u64 = 64;

/// Whether a block of `threads` whose lanes each keep `staged` registers of a row (and
/// [`REGISTERS_BESIDE_STAGE`] more) fits the registers of one block: a staged row in a
/// block that cannot launch is no candidate.
fn staging_fits(staged: u64, threads: u64) -> bool {
    threads.saturating_mul(staged + REGISTERS_BESIDE_STAGE) <= REGISTERS_PER_BLOCK
}

/// The threads of one block of a block or cluster team; None for warp teams.
fn block_threads_of(team: Team) -> Option<u64> {
    match team {
        Team::Warp { .. } => None,
        Team::Block { threads } | Team::Cluster { threads, .. } => Some(threads),
    }
}

/// Below this many rows in the timed case, a block per row also gets 1024 threads: few
/// rows mean few blocks, and each block's threads are all the loads in flight its
/// multiprocessor has (64 channels of an NCHW tensor on a GPU of 132 SMs).
const FEW_ROWS: u64 = 512;

/// The block sizes a block-per-row team is written with: the listed ones, and 1024 when
/// the timed case launches fewer than [`FEW_ROWS`] threads along x (at most that many rows).
fn block_teams(listed: &[u64], threads_along_x: Option<u64>) -> Vec<u64> {
    let mut out = listed.to_vec();
    if threads_along_x.is_some_and(|t| t < FEW_ROWS) && !out.contains(&1024) {
        out.push(1024);
    }
    out
}

/// A cluster per row is offered below this many rows per multiprocessor in the timed
/// case: with fewer rows than about two per SM, blocks per row leave SMs idle or give each
/// SM one row's loads alone (64 channels of an NCHW tensor on 132 SMs).
const CLUSTER_ROWS_PER_SM: u64 = 2;

/// The cluster teams (block size, blocks per cluster): each block size of the block mode
/// with each cluster size whose cluster gives a row more threads than the largest block
/// alone, when the timed case launches fewer than [`CLUSTER_ROWS_PER_SM`] times `sms`
/// threads along x (at most that many rows); else why not.
fn cluster_teams(
    threads: &[u64],
    clusters: &[u64],
    threads_along_x: Option<u64>,
    sms: u64,
) -> Result<Vec<Team>, String> {
    let few = CLUSTER_ROWS_PER_SM * sms;
    match threads_along_x {
        Some(t) if t < few => {
            let largest = threads.iter().copied().max().unwrap_or(0);
            Ok(threads
                .iter()
                .flat_map(|&threads| {
                    clusters
                        .iter()
                        .filter(move |&&blocks| blocks * threads > largest)
                        .map(move |&blocks| Team::Cluster { threads, blocks })
                })
                .collect())
        }
        Some(t) => Err(format!(
            "the timed case launches {t} threads along x, so up to {t} rows: not fewer than {few} ({CLUSTER_ROWS_PER_SM} per multiprocessor), where blocks per row already fill the GPU"
        )),
        None => Err("the timed case's launch is not known".into()),
    }
}

/// A team's launch: its label, block size and the grid's first component (the warp
/// teams divide `cdiv(rows, B)` by the rows a block covers; a block per row launches
/// `rows` blocks, a cluster per row `rows * C`). The error names the mode.
fn team_launch(
    mode: &str,
    team: Team,
    old_block: u64,
    divs: &[super::spec_expr::Division],
    component: &str,
    block: &str,
) -> Result<(String, u64, String), String> {
    let threads = match team {
        Team::Warp { width } => {
            let b = if old_block % 32 == 0 && old_block <= 1024 {
                old_block
            } else {
                256
            };
            let per_block = b / u64::from(width);
            let mut e = Edits::new();
            for d in divs {
                e.extend([Edit::replace(
                    d.range.clone(),
                    format!("cdiv({}, {per_block})", d.num),
                )]);
            }
            let g = e.apply(component).map_err(|err| format!("{mode}: {err}"))?;
            let label = match width {
                32 => format!("warp per row (block {b})"),
                w => format!("{} rows per warp (block {b})", 32 / w),
            };
            return Ok((label, b, g));
        }
        Team::Block { threads } | Team::Cluster { threads, .. } => threads,
    };
    let [d] = divs else {
        return Err(format!(
            "block per row: grid `{component}` has several divisions by the block"
        ));
    };
    if d.range != (0..component.len()) && component.trim() != &component[d.range.clone()] {
        return Err(format!(
            "block per row: grid `{component}` is more than `cdiv(rows, {block})`"
        ));
    }
    let rows = d.num.trim();
    Ok(match team {
        Team::Cluster { blocks, .. } => {
            let simple = rows.chars().all(|c| c.is_alphanumeric() || c == '_');
            let rows = if simple {
                rows.to_string()
            } else {
                format!("({rows})")
            };
            (
                format!("cluster of {blocks} blocks per row ({threads} threads a block)"),
                threads,
                format!("{rows} * {blocks}"),
            )
        }
        _ => (
            format!("block per row ({threads} threads)"),
            threads,
            rows.to_string(),
        ),
    })
}

/// Threads the timed case launches along x (grid times block).
fn threads_along_x(plan: &BenchPlan) -> Option<u64> {
    match &plan.cases.first()?.launch {
        Launch::Cuda { grid, block, .. } => grid[0].checked_mul(block[0]),
        _ => None,
    }
}

/// The launch a team rewrite edits: the grid's `cdiv(rows, block)` divisions and the
/// block assignment.
pub(super) struct RowLaunch {
    /// The whole `grid = ...` expression, and its first component's range.
    pub grid: edit::SpecAssignment,
    pub grid_range: std::ops::Range<usize>,
    /// The grid's first component (`cdiv(rows, 256)`).
    pub component: String,
    /// The divisions of `component` by the block.
    pub divs: Vec<super::spec_expr::Division>,
    pub block: edit::SpecAssignment,
    pub old_block: u64,
}

pub(super) fn row_launch(
    cx: &RewriteContext<'_>,
    plan: &BenchPlan,
    id: &str,
    shape: &Elementwise<'_>,
) -> Result<RowLaunch, super::RewriteError> {
    let k = &cx.kernel.name;
    let (grid, first) = one_d_grid(cx, plan, id, shape.batched)?;
    let block = edit::spec_assignment(cx.kernel, "block")
        .ok_or_else(|| not_applicable(format!("`{k}`'s spec has no `block = ...`")))?;
    let old_block = match plan.cases.first().map(|c| &c.launch) {
        Some(Launch::Cuda { block, .. }) => block[0],
        _ => return Err(not_applicable(format!("`{k}` has no CUDA launch"))),
    };
    let component = grid.text[first.clone()].to_string();
    let grid_range = grid.range.start + first.start..grid.range.start + first.end;
    let divs: Vec<_> = divisions(&component)
        .into_iter()
        .filter(|d| {
            d.den.trim() == block.text.trim() || d.den.trim().parse::<u64>() == Ok(old_block)
        })
        .collect();
    if divs.is_empty() {
        return Err(not_applicable(format!(
            "`{k}`'s grid = {} does not count blocks of `block = {}` threads (`cdiv(rows, {})`)",
            grid.text, block.text, block.text
        )));
    }
    Ok(RowLaunch {
        grid,
        grid_range,
        component,
        divs,
        block,
        old_block,
    })
}

/// The register tiles warp mode is written with (columns a lane per trip; 1 is one
/// column a lane, `None`): `scans` with a running sum, `walks` where a loop walks the
/// row contiguously; other modes and rows: only `None`.
fn tiles_for(rows: &RowPlan<'_>, mode: &str, scans: &[u64], walks: &[u64]) -> Vec<Option<usize>> {
    let sizes = match () {
        _ if mode != "warp" => &[][..],
        _ if prefix_name(rows).is_some() => scans,
        _ if rows.loops.iter().any(tiled_loop) => walks,
        _ => &[][..],
    };
    if sizes.is_empty() {
        return vec![None];
    }
    sizes
        .iter()
        .map(|&k| (k > 1).then_some(k as usize))
        .collect()
}

/// Whether a column loop is written as register tiles: it carries a running sum, or it
/// steps one column at a time and reads an element that moves one place with it.
fn tiled_loop(l: &ColumnLoop<'_>) -> bool {
    l.accs.iter().any(|a| a.prefix.is_some())
        || (l.step == 1
            && l.moves
                .iter()
                .any(|m| !m.write && m.along_loop == Step::One))
}

/// The first running sum a loop reads mid-loop (a prefix), if any.
fn prefix_name<'p>(rows: &'p RowPlan<'_>) -> Option<&'p str> {
    rows.loops
        .iter()
        .flat_map(|l| &l.accs)
        .find(|a| a.prefix.is_some())
        .map(|a| a.name.as_str())
}

// ---------------------------------------------------------------------------------------
// Analysis

pub(super) fn analyze<'t>(
    cx: &RewriteContext<'t>,
    spec: &BenchPlan,
    shape: &Elementwise<'t>,
) -> Result<RowPlan<'t>, String> {
    let src = cx.text;
    let mut scope = body_scope(cx, shape)?;
    // Every access and whether it writes.
    let mut accesses: Vec<Access<'t>> = Vec::new();
    for &root in &shape.body {
        collect_accesses(&scope, root, &mut accesses)?;
    }
    for a in &accesses {
        if a.write {
            scope.written.insert(a.buffer.clone());
        }
    }
    written_not_passed(&scope, shape)?;
    // Column loops, found from the row level down.
    let mut loops = Vec::new();
    let mut row_level: Vec<Node<'t>> = Vec::new();
    for (i, &s) in shape.body.iter().enumerate() {
        find_loops(
            &scope,
            shape,
            &shape.body[..i],
            s,
            &mut loops,
            &mut row_level,
            0,
        )?;
    }
    if loops.is_empty() {
        return Err("no loop in the row body indexes global memory with its variable".into());
    }
    loop_vars_stay_inside(src, shape, &loops)?;
    let loop_buffers = loop_writes(&scope, &accesses, &loops)?;
    let lane0 = row_writes(&scope, &accesses, &loops, &loop_buffers)?;
    row_reads(&scope, &accesses, &loops, &lane0, &row_level)?;
    // Accumulator types, and how each loop's accesses move.
    for l in &mut loops {
        for acc in &mut l.accs {
            acc.ty = scope.types.get(&acc.name).cloned();
            for (w, ty) in acc.arg.iter_mut().flat_map(|p| &mut p.with) {
                *ty = scope.types.get(w.as_str()).cloned();
            }
        }
        l.moves = loop_moves(&scope, shape, l, &accesses);
    }
    let stage = staging::plan(cx.kernel, spec, &scope, &accesses, &loops, &shape.body);
    let nests = (0..loops.len())
        .map(|i| nest::find(&scope, spec, &loops, i, &lane0))
        .collect();
    Ok(RowPlan {
        loops,
        nests,
        lane0,
        stage,
    })
}

/// The row body's scope (declarations and aliases), or the first thing in it a team of
/// lanes cannot share: a collective, a thread index, a jump, shared memory.
fn body_scope<'t>(
    cx: &RewriteContext<'t>,
    shape: &Elementwise<'t>,
) -> Result<Scope<'t, 't>, String> {
    let src = cx.text;
    let mut scope = Scope::of_kernel(cx, src);
    // Forbidden things anywhere in the row body; declarations and aliases.
    let mut err: Option<String> = None;
    for &root in &shape.body {
        walk(root, &mut |n| {
            if err.is_some() {
                return false;
            }
            let t = text(src, n);
            match n.kind() {
                "field_expression" if is_block_yz(src, n) => {}
                "call_expression" | "field_expression" => match thread_bound(src, n) {
                    Some(ThreadBound::Collective(f)) => {
                        err = Some(format!(
                            "the row body calls `{f}`; lanes that share a row would meet it out of step"
                        ));
                    }
                    Some(ThreadBound::Index(_)) => {
                        err = Some(format!(
                            "the row body reads `{t}`; once a team shares the row it no longer means what it did"
                        ));
                    }
                    None => {}
                },
                "goto_statement" | "labeled_statement" => {
                    err = Some(format!("`{}` jumps inside the row body", first_line(t)))
                }
                "declaration" => {
                    if t.contains("__shared__") {
                        err = Some(format!("`{}` declares shared memory", first_line(t)));
                        return false;
                    }
                    let ty = n
                        .child_by_field_name("type")
                        .map(|ty| text(src, ty).to_string());
                    let mut c = n.walk();
                    for d in n.children_by_field_name("declarator", &mut c) {
                        declare(&mut scope, d, ty.as_deref(), &mut err);
                    }
                }
                "identifier" if shape.thread_aliases.contains_key(t) => {
                    err = Some(format!(
                        "the row body reads `{t}` (`{}`); once a team shares the row it no longer means what it did",
                        shape.thread_aliases[t]
                    ));
                }
                _ => {}
            }
            true
        });
    }
    if let Some(e) = err {
        return Err(e);
    }
    Ok(scope)
}

/// Pointers passed to calls: a written buffer may not be.
fn written_not_passed(scope: &Scope<'_, '_>, shape: &Elementwise<'_>) -> Result<(), String> {
    let src = scope.src;
    for &root in &shape.body {
        let mut bad = None;
        walk(root, &mut |n| {
            if bad.is_some() || n.kind() != "call_expression" {
                return bad.is_none();
            }
            let f = n
                .child_by_field_name("function")
                .map_or("", |f| text(src, f));
            if f.starts_with("atomic") {
                return true;
            }
            for arg in n
                .child_by_field_name("arguments")
                .map(named_children)
                .unwrap_or_default()
            {
                if let Some(a) = base_of(scope, arg, 0) {
                    if scope.written.contains(&a.0) {
                        bad = Some(format!(
                            "passes the written buffer `{}` to `{f}`; which lane writes what cannot be told",
                            a.0
                        ));
                    }
                }
            }
            true
        });
        if let Some(b) = bad {
            return Err(b);
        }
    }
    Ok(())
}

/// A loop variable declared outside its loop is read nowhere else: after the rewrite
/// its value after the loop differs from lane to lane.
fn loop_vars_stay_inside(
    src: &str,
    shape: &Elementwise<'_>,
    loops: &[ColumnLoop<'_>],
) -> Result<(), String> {
    for l in loops {
        let decl_inside = l.node.kind() == "for_statement"
            && l.node
                .child_by_field_name("initializer")
                .is_some_and(|i| i.kind() == "declaration");
        if decl_inside {
            continue;
        }
        let mut bad = None;
        for &root in &shape.body {
            walk(root, &mut |n| {
                if bad.is_some()
                    || contains(l.node, n)
                    || (l.start <= n.start_byte() && n.end_byte() <= l.node.start_byte())
                {
                    return false;
                }
                if n.kind() == "identifier" && text(src, n) == l.var {
                    let in_other_header = loops.iter().any(|o| {
                        o.var == l.var
                            && (contains(o.node, n)
                                || (o.start <= n.start_byte()
                                    && n.end_byte() <= o.node.start_byte()))
                    });
                    let declaration = n
                        .parent()
                        .is_some_and(|p| matches!(p.kind(), "declaration" | "init_declarator"));
                    if !in_other_header && !declaration {
                        bad = Some(format!(
                            "`{}` is read outside its column loop; each lane would end it at a different value",
                            l.var
                        ));
                    }
                }
                true
            });
        }
        if let Some(b) = bad {
            return Err(b);
        }
    }
    Ok(())
}

/// Writes inside column loops hit the loop's own column, one address per buffer and
/// loop, and loops over one written buffer start and step alike. The buffers written in
/// loops.
fn loop_writes(
    scope: &Scope<'_, '_>,
    accesses: &[Access<'_>],
    loops: &[ColumnLoop<'_>],
) -> Result<BTreeSet<String>, String> {
    let src = scope.src;
    let mut loop_buffers: BTreeSet<String> = BTreeSet::new();
    for l in loops {
        let names = loop_names(scope, l);
        let mut addr: BTreeMap<String, (Poly, Node)> = BTreeMap::new();
        for a in accesses.iter().filter(|a| contains(l.node, a.node)) {
            if !scope.written.contains(&a.buffer) {
                continue;
            }
            loop_buffers.insert(a.buffer.clone());
            let p = a.parts.iter().fold(Poly::default(), |acc, part| {
                acc.add(&poly(src, *part, &names), 1)
            });
            let at = first_line(text(src, a.node));
            if p.tainted() {
                return Err(format!(
                    "`{at}` uses a value that differs between the lanes of a row; which lane owns the element cannot be told"
                ));
            }
            match p.linear_in("$c") {
                Some(coef) if !coef.is_zero() => {}
                _ => {
                    return Err(format!(
                        "`{at}` touches the written buffer `{}` at an element that is not its own column `base + c`",
                        a.buffer
                    ))
                }
            }
            if let Some((q, other)) = addr.get(&a.buffer) {
                if *q != p {
                    return Err(format!(
                        "`{at}` and `{}` touch `{}` at different elements in one column loop; another lane may own one of them",
                        first_line(text(src, *other)),
                        a.buffer
                    ));
                }
            } else {
                addr.insert(a.buffer.clone(), (p, a.node));
            }
        }
    }
    // Several loops touching one written buffer: same start and step, same address.
    let mut seen: BTreeMap<String, (String, i64)> = BTreeMap::new();
    for l in loops {
        let touched: BTreeSet<&String> = accesses
            .iter()
            .filter(|a| contains(l.node, a.node) && scope.written.contains(&a.buffer))
            .map(|a| &a.buffer)
            .collect();
        let start = canon(text(src, l.init));
        for b in touched {
            if let Some((s, k)) = seen.get(b) {
                if *s != start || *k != l.step {
                    return Err(format!(
                        "column loops over `{b}` start at `{s}` and `{start}` (or step differently); a column would change lanes between them"
                    ));
                }
            } else {
                seen.insert(b.clone(), (start.clone(), l.step));
            }
        }
    }
    Ok(loop_buffers)
}

/// Row-level statements that write memory (each runs in one lane), or why a team cannot
/// share them.
fn row_writes<'t>(
    scope: &Scope<'_, 't>,
    accesses: &[Access<'t>],
    loops: &[ColumnLoop<'t>],
    loop_buffers: &BTreeSet<String>,
) -> Result<Vec<Node<'t>>, String> {
    let src = scope.src;
    let in_loop = |n: Node| loops.iter().any(|l: &ColumnLoop| contains(l.node, n));
    let mut lane0: Vec<Node<'t>> = Vec::new();
    for a in accesses.iter().filter(|a| !in_loop(a.node)) {
        let at = first_line(text(src, a.node));
        if a.write {
            if loop_buffers.contains(&a.buffer) {
                return Err(format!(
                    "`{}` is written both per column and per row (`{at}`)",
                    a.buffer
                ));
            }
            let stmt = enclosing_statement(a.node)
                .filter(|s| s.kind() == "expression_statement")
                .ok_or_else(|| format!("`{at}` writes memory inside an expression that is not a statement of its own"))?;
            if !lane0.iter().any(|s| s.id() == stmt.id()) {
                lane0.push(stmt);
            }
        }
    }
    for s in &lane0 {
        let mut bad = None;
        walk(*s, &mut |n| {
            if matches!(n.kind(), "assignment_expression" | "update_expression") {
                let t = written_target(n);
                if let Some(t) = t.filter(|t| t.kind() == "identifier") {
                    bad = Some(format!(
                        "`{}` writes memory and assigns `{}`; given to one lane, the other lanes would not see it",
                        first_line(text(src, *s)),
                        text(src, t)
                    ));
                }
            }
            bad.is_none()
        });
        if let Some(b) = bad {
            return Err(b);
        }
    }
    Ok(lane0)
}

/// A row-level read of a buffer one lane writes is safe only before every write, with a
/// team reduction (shuffles, barriers) between them, and no loop around both.
fn row_reads<'t>(
    scope: &Scope<'_, 't>,
    accesses: &[Access<'t>],
    loops: &[ColumnLoop<'t>],
    lane0: &[Node<'t>],
    row_level: &[Node<'t>],
) -> Result<(), String> {
    let src = scope.src;
    let in_loop = |n: Node| loops.iter().any(|l: &ColumnLoop| contains(l.node, n));
    let row_loops = row_level;
    let writes_of = |b: &str| -> Vec<Node<'t>> {
        accesses
            .iter()
            .filter(|w| w.write && w.buffer == b && !in_loop(w.node))
            .map(|w| w.node)
            .collect()
    };
    for a in accesses.iter().filter(|a| !in_loop(a.node) && !a.write) {
        let one_lane = lane0.iter().any(|s| contains(*s, a.node));
        let writes = writes_of(&a.buffer);
        let separated = !writes.is_empty()
            && writes.iter().all(|w| {
                w.start_byte() > a.node.end_byte()
                    && loops.iter().any(|l| {
                        !l.accs.is_empty()
                            && l.node.end_byte() <= w.start_byte()
                            && l.start >= a.node.end_byte()
                    })
                    && !row_loops
                        .iter()
                        .any(|rl| contains(*rl, a.node) && contains(*rl, *w))
            });
        if scope.written.contains(&a.buffer) && !one_lane && !separated {
            return Err(format!(
                "`{}` reads `{}`, which is written by one lane of the row",
                first_line(text(src, a.node)),
                a.buffer
            ));
        }
    }
    Ok(())
}

/// How every global access of `l` moves along the row index and the loop variable.
fn loop_moves<'t>(
    scope: &Scope<'_, 't>,
    shape: &Elementwise<'t>,
    l: &ColumnLoop<'t>,
    accesses: &[Access<'t>],
) -> Vec<LoopAccess> {
    let names = RowNames {
        inner: loop_names(scope, l),
        index: &shape.index,
        row_defs: row_definitions(scope.src, shape, l),
    };
    accesses
        .iter()
        .filter(|a| contains(l.node, a.node))
        .map(|a| {
            let p = a.parts.iter().fold(Poly::default(), |acc, part| {
                acc.add(&poly(scope.src, *part, &names), 1)
            });
            LoopAccess {
                at: first_line(text(scope.src, a.node)).to_string(),
                range: a.node.byte_range(),
                buffer: a.buffer.clone(),
                write: a.write,
                along_row: step_along(&p, "$r"),
                along_loop: step_along(&p, "$c"),
            }
        })
        .collect()
}

/// Row-level locals declared once, with a value, before loop `l` and never assigned
/// again in the row body (`int b = row / D2; int j = row % D2;`): their definitions, so
/// that an access through them is seen to move with the row index.
fn row_definitions<'t>(
    src: &str,
    shape: &Elementwise<'t>,
    l: &ColumnLoop<'t>,
) -> BTreeMap<String, Node<'t>> {
    let mut defs: BTreeMap<String, Node<'t>> = BTreeMap::new();
    let mut assigned: BTreeSet<String> = BTreeSet::new();
    for &root in &shape.body {
        walk(root, &mut |n| {
            match n.kind() {
                "init_declarator" if n.end_byte() <= l.start => {
                    let name = n.child_by_field_name("declarator").map(|d| text(src, d));
                    if let (Some(name), Some(v)) = (name, n.child_by_field_name("value")) {
                        if defs.insert(name.to_string(), v).is_some() {
                            assigned.insert(name.to_string());
                        }
                    }
                }
                "assignment_expression" | "update_expression" => {
                    let t = written_target(n);
                    if let Some(t) = t.filter(|t| t.kind() == "identifier") {
                        assigned.insert(text(src, t).to_string());
                    }
                }
                _ => {}
            }
            true
        });
    }
    defs.retain(|name, _| !assigned.contains(name));
    defs
}

fn step_along(p: &Poly, atom: &str) -> Step {
    match p.linear_in(atom) {
        Some(c) if c.is_zero() => Step::Zero,
        Some(c) if c.as_constant() == Some(1) => Step::One,
        _ => Step::Other,
    }
}

/// Names as a loop's accesses see them, for the steps along the row index (`$r`) and
/// the loop variable (`$c`): the loop's own definitions, the row-level ones before it,
/// and quotients taken coarsely (a stride question only).
struct RowNames<'a, 't> {
    inner: VarNames<'t>,
    index: &'a str,
    row_defs: BTreeMap<String, Node<'t>>,
}

impl<'t> Names<'t> for RowNames<'_, 't> {
    fn rename(&self, name: &str) -> Option<String> {
        if name == self.index {
            return Some("$r".into());
        }
        self.inner.rename(name)
    }
    fn definition(&self, name: &str) -> Option<Node<'t>> {
        self.inner
            .definition(name)
            .or_else(|| self.row_defs.get(name).copied())
    }
    fn varies(&self, name: &str) -> bool {
        self.inner.varies(name)
    }
    fn coarse_quotients(&self) -> bool {
        true
    }
}

/// Refuses a kernel whose threads as written read neighbouring elements and whose loops
/// are contiguous only in what every row shares ([`coalesced_along_rows`]): the case
/// `split_loop` takes.
fn not_split_loops(
    cx: &RewriteContext<'_>,
    func: Node<'_>,
    rows: &RowPlan<'_>,
    index: &str,
) -> Result<(), super::RewriteError> {
    let own_range: Vec<bool> = names_varying_by_row(cx.text, func, &rows.loops)
        .iter()
        .map(Option::is_some)
        .collect();
    match coalesced_along_rows(rows, &own_range) {
        Some(m) => Err(not_applicable(format!(
            "`{}`'s neighbouring threads already read neighbouring elements (`{}` moves one element with `{index}`), and nothing in that loop is contiguous along its variable: lanes sharing the loop would read a stride apart (split_loop splits such a loop across threads instead)",
            cx.kernel.name, m.at
        ))),
        None => Ok(()),
    }
}

/// Before a shared loop: each accumulator whose start is not its family's identity (a
/// sum from a bias) restarts at the identity in the threads where `others` holds, so
/// only one thread of the output carries the start into the combine.
pub(super) fn restarts(accs: &[Acc], others: &str, nl: &str, ind: &str) -> String {
    let mut out = String::new();
    for acc in accs.iter().filter(|a| a.reset) {
        let id = acc
            .family
            .reset()
            .expect("reset only for families with one");
        out.push_str(&format!("if ({others}) {} = {id};{nl}{ind}", acc.name));
    }
    out
}

/// The first access that is contiguous along the row index while no access of its loop
/// that differs between rows is contiguous along the loop variable: lanes that shared
/// the loop would read a stride apart, where the threads as written read neighbouring
/// elements. An access that does not move with the row in a loop whose range is the
/// same for every row (`mean[r]` beside `dy[r * n + j]`, `r` from 0 to `M`) reads the
/// same elements in every row, contiguous along the loop in either layout, so it decides
/// nothing; in a loop whose range is the row's own (`jj` from `rowptr[row]`), it is the
/// row's data. `own_range[k]` says which loops have such a range.
pub(super) fn coalesced_along_rows<'p>(
    plan: &'p RowPlan<'_>,
    own_range: &[bool],
) -> Option<&'p LoopAccess> {
    plan.loops.iter().enumerate().find_map(|(k, l)| {
        let own = own_range.get(k).copied().unwrap_or(true);
        let per_row = l.moves.iter().filter(|m| own || m.along_row != Step::Zero);
        if per_row.clone().any(|m| m.along_loop == Step::One) {
            return None;
        }
        l.moves.iter().find(|m| m.along_row == Step::One)
    })
}

/// Per column loop, the first name its start or bound reads that may differ between
/// rows: the row index or a local of the kernel (`start = rowptr[row]`), not a
/// parameter, macro, literal or local made of those alone
/// ([`super::size_locals::uniform_locals`]). None: the same range for every row.
pub(super) fn names_varying_by_row(
    src: &str,
    func: Node<'_>,
    loops: &[ColumnLoop<'_>],
) -> Vec<Option<String>> {
    let uniform: BTreeSet<String> = super::size_locals::uniform_locals(src, func)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let locals = func
        .child_by_field_name("body")
        .map(|b| super::tree::declared_in(src, b))
        .unwrap_or_default();
    loops
        .iter()
        .map(|l| {
            let mut parts = vec![l.init];
            parts.extend(l.node.child_by_field_name("condition"));
            let mut found = None;
            for p in parts {
                walk(p, &mut |n| {
                    let t = text(src, n);
                    let local = locals.contains(t) && !uniform.contains(t);
                    if found.is_none() && n.kind() == "identifier" && t != l.var && local {
                        found = Some(t.to_string());
                    }
                    found.is_none()
                });
            }
            found
        })
        .collect()
}

/// Loops in the row body from `s` down; a loop whose variable indexes a global access in
/// its body is a column loop (not descended into), others are row level.
fn find_loops<'t>(
    scope: &Scope<'_, 't>,
    shape: &Elementwise<'t>,
    before: &[Node<'t>],
    s: Node<'t>,
    loops: &mut Vec<ColumnLoop<'t>>,
    row_level: &mut Vec<Node<'t>>,
    depth: usize,
) -> Result<(), String> {
    if depth > 64 {
        return Err("the row body nests too deeply".into());
    }
    match s.kind() {
        "for_statement" | "while_statement" => {
            let header = column_header(scope, s, before)?;
            if let Some(header) = header {
                let l = ColumnLoop::bare(s, header);
                let update = l.update;
                if indexes_memory(scope, s, &l.var) && !inner_loop_walks_the_row(scope, shape, &l) {
                    let accs = loop_accumulators(scope, s, &l.var, update, shape)?;
                    loops.push(ColumnLoop { accs, ..l });
                    return Ok(());
                }
            }
            row_level.push(s);
            if let Some(b) = s.child_by_field_name("body") {
                descend(scope, shape, b, loops, row_level, depth)?;
            }
        }
        "do_statement" => {
            if let Some(b) = s.child_by_field_name("body") {
                let mut inner = Vec::new();
                let mut rl = Vec::new();
                descend(scope, shape, b, &mut inner, &mut rl, depth)?;
                if !inner.is_empty() {
                    return Err(
                        "a column loop sits inside a `do ... while`; write it as a `for` loop"
                            .into(),
                    );
                }
            }
        }
        "compound_statement" | "if_statement" | "else_clause" => {
            descend(scope, shape, s, loops, row_level, depth)?;
        }
        _ => {}
    }
    Ok(())
}

/// Whether a loop inside `outer` walks one element at a time while `outer` need not (`for (n ...) { const float* plane = x + (n * C + c) * HW; for (p
/// ...) s += plane[p]; }`): the inner loop is then the column loop the team shares, and
/// the outer one runs in every lane. An inner loop of a literal trip count under 32
/// (`for (k = 0; k < 4; k++)` over a small group), or one inside which an access walks
/// the outer loop one element at a time, leaves the outer loop the column loop; an
/// access outside the inner loops that walks the outer one (`w[n]`, a weight per image)
/// does not.
fn inner_loop_walks_the_row<'t>(
    scope: &Scope<'_, 't>,
    shape: &Elementwise<'t>,
    outer: &ColumnLoop<'t>,
) -> bool {
    let Some(body) = outer.node.child_by_field_name("body") else {
        return false;
    };
    let mut accesses = Vec::new();
    if collect_accesses(scope, body, &mut accesses).is_err() {
        return false;
    }
    let contiguous = |l: &ColumnLoop<'t>| {
        loop_moves(scope, shape, l, &accesses)
            .iter()
            .any(|m| m.along_loop == Step::One)
    };
    // Accesses that walk the outer loop one element at a time, as (start, end) bytes: one
    // inside the inner loop keeps the outer loop the column loop; those outside it (a
    // weight per image) run once an outer trip, the inner loop's many times.
    let outer_walks: Vec<(usize, usize)> = loop_moves(scope, shape, outer, &accesses)
        .iter()
        .filter(|m| m.along_loop == Step::One)
        .map(|m| (m.range.start, m.range.end))
        .collect();
    let mut found = false;
    walk(body, &mut |n| {
        if found || !matches!(n.kind(), "for_statement" | "while_statement") {
            return !found;
        }
        let before: Vec<Node<'t>> = n.parent().map_or_else(Vec::new, |p| {
            named_children(p)
                .into_iter()
                .take_while(|x| x.id() != n.id())
                .collect()
        });
        let walked_inside = outer_walks
            .iter()
            .any(|&(a, b)| a >= n.start_byte() && b <= n.end_byte());
        if let Ok(Some(header)) = column_header(scope, n, &before) {
            found = !short_literal_trip(scope.src, n)
                && !walked_inside
                && contiguous(&ColumnLoop::bare(n, header));
        }
        true
    });
    found
}

/// Whether a `for` loop's condition compares with an integer literal under 32.
fn short_literal_trip(src: &str, l: Node<'_>) -> bool {
    let Some(cond) = l.child_by_field_name("condition") else {
        return false;
    };
    let mut short = false;
    if let (Some(op), Some(r)) = (
        cond.child_by_field_name("operator"),
        cond.child_by_field_name("right"),
    ) {
        short = matches!(text(src, op), "<" | "<=" | "!=")
            && r.kind() == "number_literal"
            && text(src, r).parse::<u64>().is_ok_and(|v| v < 32);
    }
    short
}

fn descend<'t>(
    scope: &Scope<'_, 't>,
    shape: &Elementwise<'t>,
    n: Node<'t>,
    loops: &mut Vec<ColumnLoop<'t>>,
    row_level: &mut Vec<Node<'t>>,
    depth: usize,
) -> Result<(), String> {
    let kids = named_children(n);
    for (i, &k) in kids.iter().enumerate() {
        find_loops(scope, shape, &kids[..i], k, loops, row_level, depth + 1)?;
    }
    Ok(())
}

/// Does the loop variable appear in the address of a global access inside the loop?
fn indexes_memory(scope: &Scope<'_, '_>, l: Node<'_>, var: &str) -> bool {
    let mut acc = Vec::new();
    if let Some(b) = l.child_by_field_name("body") {
        if collect_accesses(scope, b, &mut acc).is_err() {
            return true; // let the loop analysis say why
        }
    }
    let src = scope.src;
    // Loop-local names defined from the variable count as the variable.
    let mut derived: BTreeSet<String> = BTreeSet::from([var.to_string()]);
    if let Some(b) = l.child_by_field_name("body") {
        for _ in 0..4 {
            walk(b, &mut |n| {
                if n.kind() == "init_declarator" {
                    if let (Some(d), Some(v)) = (
                        n.child_by_field_name("declarator"),
                        n.child_by_field_name("value"),
                    ) {
                        let mut uses = false;
                        walk(v, &mut |x| {
                            uses |= x.kind() == "identifier" && derived.contains(text(src, x));
                            true
                        });
                        if uses && d.kind() == "identifier" {
                            derived.insert(text(src, d).to_string());
                        }
                    }
                }
                true
            });
        }
    }
    acc.iter().any(|a| {
        a.parts.iter().any(|p| {
            let mut uses = false;
            walk(*p, &mut |x| {
                uses |= x.kind() == "identifier" && derived.contains(text(src, x));
                true
            });
            uses
        })
    })
}

/// The header of a counted loop: (variable, init value node, step, update node, start
/// byte of the construct); Ok(None) when the loop is not counted.
fn column_header<'t>(
    scope: &Scope<'_, 't>,
    l: Node<'t>,
    before: &[Node<'t>],
) -> Result<Option<Header<'t>>, String> {
    let src = scope.src;
    let cond = l.child_by_field_name("condition");
    let cond = cond.map(|c| {
        if c.kind() == "condition_clause" {
            c.child_by_field_name("value").unwrap_or(c)
        } else {
            c
        }
    });
    let Some(cond) = cond.filter(|c| c.kind() == "binary_expression") else {
        return Ok(None);
    };
    let (Some(cl), Some(cop), Some(cr)) = (
        cond.child_by_field_name("left"),
        cond.child_by_field_name("operator"),
        cond.child_by_field_name("right"),
    ) else {
        return Ok(None);
    };
    let (var, bound) = match text(src, cop) {
        "<" | "<=" if cl.kind() == "identifier" => (text(src, cl).to_string(), cr),
        ">" | ">=" if cr.kind() == "identifier" => (text(src, cr).to_string(), cl),
        _ => return Ok(None),
    };
    let mut bound_uses_var = false;
    walk(bound, &mut |n| {
        bound_uses_var |= n.kind() == "identifier" && text(src, n) == var;
        true
    });
    if bound_uses_var {
        return Ok(None);
    }
    if l.kind() == "for_statement" {
        let Some(init) = l.child_by_field_name("initializer") else {
            return Ok(None);
        };
        let value = match init.kind() {
            "declaration" => {
                let mut c = init.walk();
                let ds: Vec<Node> = init.children_by_field_name("declarator", &mut c).collect();
                match ds.as_slice() {
                    [d] if d.kind() == "init_declarator"
                        && d.child_by_field_name("declarator").map(|x| text(src, x))
                            == Some(var.as_str()) =>
                    {
                        d.child_by_field_name("value")
                    }
                    _ => None,
                }
            }
            "assignment_expression"
                if init.child_by_field_name("left").map(|x| text(src, x)) == Some(var.as_str())
                    && init.child_by_field_name("operator").map(|o| text(src, o)) == Some("=") =>
            {
                // `c` declared outside: it must not be read outside loops that set it.
                init.child_by_field_name("right")
            }
            _ => None,
        };
        let Some(value) = value else { return Ok(None) };
        let Some(update) = l.child_by_field_name("update") else {
            return Ok(None);
        };
        let Some(step) = step_of(src, update, &var) else {
            return Ok(None);
        };
        return Ok(Some((var, value, step, update, l.start_byte())));
    }
    // while (c < E) { ...; c++; } right after `int c = S;`
    let Some(decl) = before.iter().rev().find(|n| n.kind() != "comment").copied() else {
        return Ok(None);
    };
    if decl.kind() != "declaration" {
        return Ok(None);
    }
    let mut c = decl.walk();
    let ds: Vec<Node> = decl.children_by_field_name("declarator", &mut c).collect();
    let value = match ds.as_slice() {
        [d] if d.kind() == "init_declarator"
            && d.child_by_field_name("declarator").map(|x| text(src, x)) == Some(var.as_str()) =>
        {
            d.child_by_field_name("value")
        }
        _ => None,
    };
    let Some(value) = value else { return Ok(None) };
    let Some(body) = l
        .child_by_field_name("body")
        .filter(|b| b.kind() == "compound_statement")
    else {
        return Ok(None);
    };
    let stmts = named_children(body);
    let Some(last) = stmts.iter().rev().find(|s| s.kind() != "comment").copied() else {
        return Ok(None);
    };
    let Some(update) = named_children(last)
        .into_iter()
        .next()
        .filter(|_| last.kind() == "expression_statement")
    else {
        return Ok(None);
    };
    let Some(step) = step_of(src, update, &var) else {
        return Ok(None);
    };
    let mut bad = None;
    walk(body, &mut |n| {
        if n.kind() == "continue_statement" {
            bad =
                Some("a `continue` in a `while` column loop would skip its increment".to_string());
        }
        true
    });
    if let Some(b) = bad {
        return Err(b);
    }
    Ok(Some((var, value, step, update, decl.start_byte())))
}

/// `c++`, `++c`, `c += K`, `c = c + K`: K (a positive literal).
fn step_of(src: &str, u: Node<'_>, var: &str) -> Option<i64> {
    match u.kind() {
        "update_expression" => {
            let a = u.child_by_field_name("argument")?;
            let op = u.child_by_field_name("operator").map(|o| text(src, o))?;
            (text(src, a) == var && op == "++").then_some(1)
        }
        "assignment_expression" => {
            let l = u.child_by_field_name("left")?;
            let op = text(src, u.child_by_field_name("operator")?);
            let r = u.child_by_field_name("right")?;
            if text(src, l) != var {
                return None;
            }
            let k = match op {
                "+=" => super::poly::int_literal(text(src, r))?,
                "=" if r.kind() == "binary_expression" => {
                    let (a, o, b) = (
                        r.child_by_field_name("left")?,
                        text(src, r.child_by_field_name("operator")?),
                        r.child_by_field_name("right")?,
                    );
                    if o != "+" {
                        return None;
                    }
                    if text(src, a) == var {
                        super::poly::int_literal(text(src, b))?
                    } else if text(src, b) == var {
                        super::poly::int_literal(text(src, a))?
                    } else {
                        return None;
                    }
                }
                _ => return None,
            };
            (k > 0).then_some(k)
        }
        _ => None,
    }
}

/// The accumulators a column loop updates, after checking every other rule of its body.
fn loop_accumulators(
    scope: &Scope<'_, '_>,
    l: Node<'_>,
    var: &str,
    update: Node<'_>,
    shape: &Elementwise<'_>,
) -> Result<Vec<Acc>, String> {
    let src = scope.src;
    let body = l
        .child_by_field_name("body")
        .ok_or("a loop without a body")?;
    let header = first_line(text(src, l));
    let locals = declared_in(src, body);
    let mut accs: Vec<Acc> = Vec::new();
    let mut own: BTreeSet<usize> = BTreeSet::new(); // identifier nodes that are accumulator updates' own
    let mut err: Option<String> = None;
    // A group carried together (sums rescaled by a running maximum, Welford's moments):
    // its statements are not walked again.
    let grouped = carried_group(src, body, shape, l, &locals, &mut accs, &mut own)?;
    walk(body, &mut |n| {
        if err.is_some() || n.id() == update.id() || grouped.contains(&n.id()) {
            return false;
        }
        let t = text(src, n);
        match n.kind() {
            "return_statement" => {
                err = Some(format!(
                    "`{}` returns from inside the column loop `{header}`",
                    first_line(t)
                ));
            }
            "break_statement"
                if !nested_in(
                    n,
                    body,
                    &[
                        "for_statement",
                        "while_statement",
                        "do_statement",
                        "switch_statement",
                    ],
                ) =>
            {
                err = Some(format!("`break` leaves the column loop `{header}` early; lanes cannot know where another lane stopped"));
            }
            "if_statement" => {
                if let Some((name, fam, tmpl, ids)) = if_max(src, n) {
                    if name == var || locals.contains(&name) {
                        return true;
                    }
                    if let Err(e) = add_accumulator(&mut accs, &name, fam, Some(tmpl), false) {
                        err = Some(e);
                    }
                    own.extend(ids);
                    return false;
                }
                if let Some(picked) = arg::if_arg(src, n, var) {
                    let added = picked.and_then(|p| add_pick(&mut accs, p, &locals, header));
                    match added {
                        Ok(Some(ids)) => own.extend(ids),
                        Ok(None) => return true,
                        Err(why) => err = Some(why),
                    }
                    return false;
                }
            }
            "assignment_expression" | "update_expression" => {
                let target = written_target(n);
                let Some(target) = target.filter(|x| x.kind() == "identifier") else {
                    return true;
                };
                let name = text(src, target).to_string();
                if name == var {
                    err = Some(format!(
                        "`{}` assigns the loop variable `{var}` inside the column loop",
                        t
                    ));
                    return false;
                }
                if locals.contains(&name) {
                    return true;
                }
                if name == shape.index {
                    err = Some(format!("`{t}` assigns the row index"));
                    return false;
                }
                match accumulate(src, n, &name) {
                    Some((fam, tmpl, inline_ok, ids)) => {
                        if let Err(e) = add_accumulator(&mut accs, &name, fam, tmpl, inline_ok) {
                            err = Some(e);
                        }
                        own.extend(ids);
                        own.insert(target.id());
                    }
                    None => {
                        err = Some(format!(
                            "`{t}` assigns `{name}` in the column loop `{header}`, and it is not a sum, product, max or min of `{name}`; kernel-lsp cannot split it between lanes"
                        ));
                    }
                }
                return err.is_none();
            }
            _ => {}
        }
        true
    });
    if let Some(e) = err {
        return Err(e);
    }
    set_prefixes(src, l, &mut accs, &own, header)?;
    // Resets: unless the accumulator's declaration holds a literal zero and nothing
    // touches it before this loop (and no loop around this one repeats it).
    for acc in &mut accs {
        if acc.family.reset().is_none() || acc.prefix.is_some() {
            continue;
        }
        acc.reset = !starts_at_zero(src, shape, l, &acc.name);
    }
    Ok(accs)
}

/// The group of carried values a column loop's body updates together, added to `accs`
/// (its identifiers to `own`): sums rescaled by a running maximum ([`rescale`]) or a
/// Welford mean with its count and squared deviations ([`moments`]). The ids of its
/// statements (none without a group), or why the group cannot be shared (a value that
/// does not start at zero).
fn carried_group(
    src: &str,
    body: Node<'_>,
    shape: &Elementwise<'_>,
    l: Node<'_>,
    locals: &BTreeSet<String>,
    accs: &mut Vec<Acc>,
    own: &mut BTreeSet<usize>,
) -> Result<BTreeSet<usize>, String> {
    let header = first_line(text(src, l));
    let group =
        rescale::rescaled_sums(src, body, locals).or_else(|| moments::welford(src, body, locals));
    let Some((picked, stmts)) = group else {
        return Ok(BTreeSet::new());
    };
    // A rescaled group's sums, and all of a Welford group, must start at zero.
    let welford = picked.2.moments.is_some();
    let mut zeroed: Vec<&String> = picked.2.with.iter().map(|w| &w.0).collect();
    if welford {
        zeroed.push(&picked.0);
    }
    if let Some(s) = zeroed.iter().find(|s| !starts_at_zero(src, shape, l, s)) {
        let what = if welford {
            "carried with a running mean"
        } else {
            "rescaled by a running maximum"
        };
        return Err(format!(
            "`{s}` is {what} in the column loop `{header}` but does not start at zero before it; every lane would count its starting value"
        ));
    }
    match add_pick(accs, picked, locals, header)? {
        Some(ids) => {
            own.extend(ids);
            Ok(stmts)
        }
        None => Ok(BTreeSet::new()),
    }
}

/// Adds the accumulator `name` of `family` to the loop's, or refuses one combined two
/// ways in one loop (a name already there of the same family is kept as it is).
fn add_accumulator(
    accs: &mut Vec<Acc>,
    name: &str,
    family: Family,
    template: Option<String>,
    inline_ok: bool,
) -> Result<(), String> {
    match accs.iter_mut().find(|a| a.name == name) {
        Some(a) if a.family != family => Err(format!(
            "`{name}` is combined as a {} and as a {} in one column loop",
            a.family.word(),
            family.word()
        )),
        Some(_) => Ok(()),
        None => {
            accs.push(Acc {
                name: name.to_string(),
                ty: None,
                family,
                template,
                inline_ok,
                reset: false,
                prefix: None,
                arg: None,
            });
            Ok(())
        }
    }
}

/// Sets the prefix of each accumulator the column loop `l` (`header` its first line)
/// reads other than in its own updates (`own`, identifier ids): a running sum read after
/// its update. Refuses any other read, and any read of an arg pick's names.
fn set_prefixes(
    src: &str,
    l: Node<'_>,
    accs: &mut [Acc],
    own: &BTreeSet<usize>,
    header: &str,
) -> Result<(), String> {
    // No other read of an accumulator in the loop, unless it is a running sum read after
    // its update (a prefix); the bound and start do not use them.
    let names: BTreeSet<String> = accs
        .iter()
        .flat_map(|a| {
            std::iter::once(&a.name).chain(a.arg.iter().flat_map(|p| p.with.iter().map(|w| &w.0)))
        })
        .cloned()
        .collect();
    let mut reads: BTreeMap<String, Vec<Node>> = BTreeMap::new();
    walk(l, &mut |n| {
        if n.kind() == "identifier" && names.contains(text(src, n)) && !own.contains(&n.id()) {
            reads.entry(text(src, n).to_string()).or_default().push(n);
        }
        true
    });
    for (name, at) in &reads {
        let Some(acc) = accs.iter_mut().find(|a| &a.name == name && a.arg.is_none()) else {
            return Err(format!(
                "the column loop `{header}` reads `{name}`, which is picked with a maximum or minimum; each lane only has its own pick until the loop ends"
            ));
        };
        match prefix_update(src, l, acc, at) {
            Ok(p) => acc.prefix = Some(p),
            Err(why) => {
                return Err(format!(
                    "the column loop `{header}` reads the running value of `{name}`; each lane only has its own part of it until the loop ends ({why})"
                ))
            }
        }
    }
    Ok(())
}

/// Adds an arg pick to the loop's accumulators: the ids of its own identifiers, `None`
/// when the group is the loop's own locals (not carried), or why the pick cannot be
/// shared (a name picked in two places).
fn add_pick(
    accs: &mut Vec<Acc>,
    (name, family, pick, ids): arg::Picked,
    locals: &BTreeSet<String>,
    header: &str,
) -> Result<Option<Vec<usize>>, String> {
    let group: Vec<&String> = std::iter::once(&name)
        .chain(pick.with.iter().map(|(w, _)| w))
        .collect();
    if group.iter().any(|g| locals.contains(*g)) {
        return Ok(None);
    }
    let taken = |g: &String| {
        accs.iter()
            .any(|a| &a.name == g || a.arg.iter().any(|p| p.with.iter().any(|w| &w.0 == g)))
    };
    if let Some(g) = group.iter().find(|g| taken(g)) {
        return Err(format!(
            "`{g}` is picked in two places of the column loop `{header}`"
        ));
    }
    accs.push(Acc {
        name,
        ty: None,
        family,
        template: None,
        inline_ok: false,
        reset: false,
        prefix: None,
        arg: Some(pick),
    });
    Ok(Some(ids))
}

/// A running sum that the loop reads after adding to it (`run += x[c]; y[c] = run;`): a
/// prefix a warp can scan. Its update is one unconditional statement of the loop's body,
/// `s += E;` or `s = s + E;`; every other read comes after it; nothing in the body
/// skips the rest of an iteration. The update's range and `E`, or why not.
fn prefix_update(
    src: &str,
    l: Node<'_>,
    acc: &Acc,
    reads: &[Node<'_>],
) -> Result<(std::ops::Range<usize>, String), String> {
    if acc.family != Family::Sum {
        return Err("only a running sum can be scanned".into());
    }
    let body = l
        .child_by_field_name("body")
        .filter(|b| b.kind() == "compound_statement")
        .ok_or("the loop's body is not a block")?;
    let mut update = None;
    for s in named_children(body) {
        let Some(e) = s
            .named_child(0)
            .filter(|_| s.kind() == "expression_statement")
        else {
            continue;
        };
        if let Some(term) = sum_term(src, e, &acc.name) {
            if update.is_some() {
                return Err("it is added to twice".into());
            }
            update = Some((s, term));
        }
    }
    let (stmt, term) = update.ok_or("its update is not a statement of its own in the loop")?;
    if let Some(r) = reads.iter().find(|r| r.start_byte() < stmt.end_byte()) {
        return Err(format!(
            "`{}` reads it before this iteration's update",
            first_line(text(src, r.parent().unwrap_or(*r)))
        ));
    }
    let mut skips = false;
    walk(body, &mut |n| {
        skips |= matches!(n.kind(), "continue_statement" | "goto_statement");
        !skips
    });
    if skips {
        return Err("an iteration may stop early (`continue`)".into());
    }
    Ok((stmt.byte_range(), term))
}

/// `E` of `name += E` or `name = name + E`.
fn sum_term(src: &str, e: Node<'_>, name: &str) -> Option<String> {
    sum_term_node(src, e, name).map(|t| text(src, t).to_string())
}

/// The node of `E` in `name += E` or `name = name + E` (the expression or its statement).
pub(super) fn sum_term_node<'t>(src: &str, e: Node<'t>, name: &str) -> Option<Node<'t>> {
    let e = match e.kind() {
        "expression_statement" => e.named_child(0)?,
        _ => e,
    };
    if e.kind() != "assignment_expression" {
        return None;
    }
    let left = e.child_by_field_name("left")?;
    let right = e.child_by_field_name("right")?;
    if text(src, left) != name {
        return None;
    }
    match text(src, e.child_by_field_name("operator")?) {
        "+=" => Some(right),
        "=" if right.kind() == "binary_expression" => {
            let (a, op, b) = (
                right.child_by_field_name("left")?,
                right.child_by_field_name("operator")?,
                right.child_by_field_name("right")?,
            );
            (text(src, op) == "+" && text(src, a) == name).then_some(b)
        }
        _ => None,
    }
}

/// The declaration of `name` in the row body is `T name = 0` (any zero literal), no
/// statement between it and `l` mentions `name`, and every loop around `l` also holds
/// the declaration.
fn starts_at_zero(src: &str, shape: &Elementwise<'_>, l: Node<'_>, name: &str) -> bool {
    let mut decl: Option<Node> = None;
    let mut mentioned_between = false;
    for &root in &shape.body {
        walk(root, &mut |n| {
            if n.start_byte() >= l.start_byte() {
                return false;
            }
            if n.kind() == "init_declarator"
                && n.child_by_field_name("declarator").map(|d| text(src, d)) == Some(name)
            {
                decl = Some(n);
                mentioned_between = false;
                return false;
            }
            if decl.is_some() && n.kind() == "identifier" && text(src, n) == name {
                mentioned_between = true;
            }
            true
        });
    }
    let Some(d) = decl else { return false };
    let zero = d
        .child_by_field_name("value")
        .map(|v| {
            text(src, v)
                .trim()
                .trim_end_matches(['f', 'F', 'u', 'U', 'l', 'L'])
                .to_string()
        })
        .is_some_and(|v| matches!(v.as_str(), "0" | "0.0" | "0." | ".0" | "0.0e0" | "0x0"));
    if !zero || mentioned_between {
        return false;
    }
    let mut cur = l;
    while let Some(p) = cur.parent() {
        if matches!(
            p.kind(),
            "for_statement" | "while_statement" | "do_statement"
        ) && !contains(p, d)
        {
            return false;
        }
        if shape.body.iter().any(|b| b.id() == p.id()) {
            break;
        }
        cur = p;
    }
    true
}

type Update = (Family, Option<String>, bool, Vec<usize>);

/// An accumulator update of `name` (an assignment or increment node).
fn accumulate(src: &str, n: Node<'_>, name: &str) -> Option<Update> {
    let uses_name = |e: Node| {
        let mut u = false;
        walk(e, &mut |x| {
            u |= x.kind() == "identifier" && text(src, x) == name;
            true
        });
        u
    };
    if n.kind() == "update_expression" {
        let op = n.child_by_field_name("operator").map(|o| text(src, o))?;
        return matches!(op, "++" | "--").then(|| (Family::Sum, None, true, Vec::new()));
    }
    let op = text(src, n.child_by_field_name("operator")?);
    let r = n.child_by_field_name("right")?;
    let simple = |f: Family| (!uses_name(r)).then(|| (f, None, true, Vec::new()));
    match op {
        "+=" | "-=" => return simple(Family::Sum),
        "*=" => return simple(Family::Prod),
        "|=" => return simple(Family::Or),
        "^=" => return simple(Family::Xor),
        "=" => {}
        _ => return None,
    }
    let r = strip(r);
    let is_name = |e: Node| {
        let e = strip(e);
        e.kind() == "identifier" && text(src, e) == name
    };
    match r.kind() {
        "binary_expression" => {
            let (a, o, b) = (
                r.child_by_field_name("left")?,
                text(src, r.child_by_field_name("operator")?),
                r.child_by_field_name("right")?,
            );
            let (other, own) = if is_name(a) {
                (b, strip(a))
            } else if is_name(b) && o != "-" {
                (a, strip(b))
            } else {
                return None;
            };
            if uses_name(other) {
                return None;
            }
            let fam = match o {
                "+" | "-" => Family::Sum,
                "*" => Family::Prod,
                "|" => Family::Or,
                "^" => Family::Xor,
                _ => return None,
            };
            Some((fam, None, true, vec![own.id()]))
        }
        "call_expression" => {
            let f = text(src, r.child_by_field_name("function")?);
            let fam = match f {
                "fmaxf" | "fmax" | "max" => Family::Max,
                "fminf" | "fmin" | "min" => Family::Min,
                _ => return None,
            };
            let args = named_children(r.child_by_field_name("arguments")?);
            let [a, b] = args.as_slice() else { return None };
            let (other, own) = if is_name(*a) {
                (*b, strip(*a))
            } else if is_name(*b) {
                (*a, strip(*b))
            } else {
                return None;
            };
            if uses_name(other) {
                return None;
            }
            let stmt = n.parent().filter(|p| p.kind() == "expression_statement")?;
            let tmpl = replace_nodes(src, stmt, &[other], OTHER);
            Some((fam, Some(tmpl), true, vec![own.id()]))
        }
        "conditional_expression" => {
            let (c, a, b) = (
                strip(r.child_by_field_name("condition")?),
                r.child_by_field_name("consequence")?,
                r.child_by_field_name("alternative")?,
            );
            let (fam, ids, others) = compare_pick(src, c, a, b, name)?;
            let stmt = n.parent().filter(|p| p.kind() == "expression_statement")?;
            let tmpl = replace_nodes(src, stmt, &others, OTHER);
            Some((fam, Some(tmpl), false, ids))
        }
        _ => None,
    }
}

/// `e` without the parentheses around it.
fn strip(mut e: Node<'_>) -> Node<'_> {
    while e.kind() == "parenthesized_expression" {
        match named_children(e).first() {
            Some(c) => e = *c,
            None => break,
        }
    }
    e
}

/// `C ? A : B` where C compares `name` with E and {A, B} = {name, E}: max or min, the
/// ids of `name`'s own occurrences, and E's occurrences.
fn compare_pick<'t>(
    src: &str,
    c: Node<'t>,
    a: Node<'t>,
    b: Node<'t>,
    name: &str,
) -> Option<(Family, Vec<usize>, Vec<Node<'t>>)> {
    if c.kind() != "binary_expression" {
        return None;
    }
    let (l, o, r) = (
        c.child_by_field_name("left")?,
        text(src, c.child_by_field_name("operator")?),
        c.child_by_field_name("right")?,
    );
    let same = |x: Node, y: Node| canon(text(src, x)) == canon(text(src, y));
    let named = |x: Node| x.kind() == "identifier" && text(src, x) == name;
    // Which side of the comparison is the accumulator, and is the larger picked?
    let (e, acc_on_left) = if named(l) {
        (r, true)
    } else if named(r) {
        (l, false)
    } else {
        return None;
    };
    let greater = match o {
        ">" | ">=" => acc_on_left,
        "<" | "<=" => !acc_on_left,
        _ => return None,
    };
    // `greater`: the condition holds when acc > e.
    let picks_acc_when_true = if named(a) && same(b, e) {
        true
    } else if named(b) && same(a, e) {
        false
    } else {
        return None;
    };
    let fam = if greater == picks_acc_when_true {
        Family::Max
    } else {
        Family::Min
    };
    let acc_nodes = [
        if acc_on_left { l } else { r },
        if named(a) { a } else { b },
    ];
    let e_nodes = vec![e, if named(a) { b } else { a }];
    if e_nodes.iter().any(|x| {
        let mut u = false;
        walk(*x, &mut |y| {
            u |= y.kind() == "identifier" && text(src, y) == name;
            true
        });
        u
    }) {
        return None;
    }
    Some((fam, acc_nodes.iter().map(|n| n.id()).collect(), e_nodes))
}

/// `if (e > m) m = e;` (any comparison, `{ m = e; }` too): (name, family, template, own ids).
fn if_max(src: &str, n: Node<'_>) -> Option<(String, Family, String, Vec<usize>)> {
    if n.child_by_field_name("alternative").is_some() {
        return None;
    }
    let cond = n.child_by_field_name("condition")?;
    let cond = cond.child_by_field_name("value").unwrap_or(cond);
    let mut cons = n.child_by_field_name("consequence")?;
    if cons.kind() == "compound_statement" {
        let kids: Vec<Node> = named_children(cons)
            .into_iter()
            .filter(|k| k.kind() != "comment")
            .collect();
        let [only] = kids.as_slice() else { return None };
        cons = *only;
    }
    if cons.kind() != "expression_statement" {
        return None;
    }
    let asg = named_children(cons).into_iter().next()?;
    if asg.kind() != "assignment_expression"
        || text(src, asg.child_by_field_name("operator")?) != "="
    {
        return None;
    }
    let target = asg.child_by_field_name("left")?;
    if target.kind() != "identifier" {
        return None;
    }
    let name = text(src, target);
    let value = asg.child_by_field_name("right")?;
    // `if (C) name = value;` is `name = C ? value : name`.
    let (fam, mut ids, mut others) = compare_pick(src, cond, value, target, name)?;
    ids.push(target.id());
    others.dedup_by_key(|x| x.id());
    let tmpl = replace_nodes(src, n, &others, OTHER);
    Some((name.to_string(), fam, tmpl, ids))
}

/// The text of `n` with each of `nodes` replaced by `with`.
fn replace_nodes(src: &str, n: Node<'_>, nodes: &[Node<'_>], with: &str) -> String {
    let mut e = Edits::new();
    let mut seen = BTreeSet::new();
    for x in nodes {
        if contains(n, *x) && seen.insert(x.id()) {
            e.extend([Edit::replace(x.byte_range(), with)]);
        }
    }
    walk(n, &mut |x| {
        if x.kind() == "comment" {
            e.extend([Edit::replace(x.byte_range(), " ")]);
        }
        true
    });
    let out = e
        .apply_within(src, n.byte_range())
        .unwrap_or_else(|_| text(src, n).to_string());
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Names as a column loop sees them: its variable is `$c`, single-definition locals
/// expand, other locals and the loop's accumulators vary between lanes.
pub(super) fn loop_names<'t>(scope: &Scope<'_, 't>, l: &ColumnLoop<'t>) -> VarNames<'t> {
    let src = scope.src;
    let mut defs: BTreeMap<String, Node<'t>> = BTreeMap::new();
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    let mut varying: BTreeSet<String> = l.accs.iter().map(|a| a.name.clone()).collect();
    if let Some(body) = l.node.child_by_field_name("body") {
        walk(body, &mut |n| {
            match n.kind() {
                "init_declarator" => {
                    if let (Some(d), Some(v)) = (
                        n.child_by_field_name("declarator"),
                        n.child_by_field_name("value"),
                    ) {
                        if d.kind() == "identifier" {
                            let name = text(src, d).to_string();
                            *count.entry(name.clone()).or_default() += 1;
                            defs.insert(name, v);
                        }
                    }
                }
                "declaration" => {
                    let mut c = n.walk();
                    for d in n.children_by_field_name("declarator", &mut c) {
                        if d.kind() == "identifier" {
                            varying.insert(text(src, d).to_string());
                        }
                    }
                }
                "assignment_expression" | "update_expression" => {
                    let t = written_target(n);
                    if let Some(t) = t.filter(|t| t.kind() == "identifier") {
                        *count.entry(text(src, t).to_string()).or_default() += 1;
                    }
                }
                _ => {}
            }
            true
        });
    }
    for (name, c) in &count {
        if *c > 1 {
            defs.remove(name);
            varying.insert(name.clone());
        }
    }
    VarNames {
        var: l.var.clone(),
        defs,
        varying,
    }
}

// ---------------------------------------------------------------------------------------
// Emission

fn emit(
    cx: &RewriteContext<'_>,
    shape: &Elementwise<'_>,
    rows: &RowPlan<'_>,
    team: Team,
    stage: Option<(&staging::Stage, u64)>,
    tile: Option<usize>,
    names: &mut BTreeSet<String>,
) -> Result<Edits, String> {
    let src = cx.text;
    let nl = newline(src);
    let unit = &shape.unit;
    let mut e = Edits::new();
    let lane = fresh("lane", names);
    let off = fresh("offset", names);
    let w = fresh("w", names);
    let (mask, step) = team_lane(src, shape, team, &lane, &mut e, names)?;
    let stage_names = stage.map(|(s, _)| staging::names(s, names));
    let combiner = Combiner {
        team,
        mask: &mask,
        off: &off,
        w: &w,
        lane: &lane,
        unit,
        nl,
    };
    for (i, l) in rows.loops.iter().enumerate() {
        let ind = line_indent(src, l.start).to_string();
        let init = text(src, l.init).trim();
        // a cluster whose blocks share the loop around this one: its threads share this
        let split = split_nest(src, rows, i, team);
        let (col_lane, col_step) = match (split, team) {
            (Some(n), Team::Cluster { blocks, .. }) => {
                e.extend(nest::edits(src, n, blocks));
                ("threadIdx.x".to_string(), "blockDim.x".to_string())
            }
            _ => (lane.clone(), step.clone()),
        };
        let lane_term = if l.step == 1 {
            col_lane
        } else {
            format!("{} * {col_lane}", l.step)
        };
        let new_init = if init == "0" {
            lane_term
        } else {
            format!("{init} + {lane_term}")
        };
        let stride = if l.step == 1 {
            col_step
        } else {
            format!("{} * {col_step}", l.step)
        };
        match (stage, &stage_names) {
            (Some((s, r)), Some(n)) => {
                e.extend(staging::loop_edits(
                    src,
                    s,
                    n,
                    &rows.loops,
                    i,
                    &lane,
                    &step,
                    r,
                    unit,
                    nl,
                ));
            }
            _ if tile.is_some() && tiled_loop(l) => {
                let pointees = pointee_types(cx);
                let args = tiles::TileArgs {
                    k: tile.unwrap_or(4),
                    lane: &lane,
                    unit,
                    nl,
                    pointees: &pointees,
                };
                e.extend(tiles::loop_edits(src, l, &args, names)?);
            }
            _ => {
                e.extend([Edit::replace(l.init.byte_range(), new_init)]);
                e.extend([Edit::replace(
                    l.update.byte_range(),
                    format!("{} += {stride}", l.var),
                )]);
                if l.accs.iter().any(|a| a.prefix.is_some()) {
                    e.extend(scan::loop_edits(src, l, &lane, unit, nl, names)?);
                }
            }
        }
        // Reset and combine around the column loop, or around the loops that enclose it
        // when nothing else in them touches its accumulators (one combine a row).
        let (site_start, site_end, ind) = match combine_site(src, rows, i, stage.is_none()) {
            Some(outer) => (
                outer.start_byte(),
                outer.end_byte(),
                line_indent(src, outer.start_byte()).to_string(),
            ),
            None => (l.start, l.node.end_byte(), ind),
        };
        let before = restarts(&l.accs, &format!("{lane} != 0"), nl, &ind);
        if !before.is_empty() {
            e.extend([Edit::insert(site_start, before)]);
        }
        let Some(code) = combiner.after_loop(l, &ind, names)? else {
            continue;
        };
        e.extend([Edit::insert(site_end, code)]);
    }
    for s in &rows.lane0 {
        e.extend([only_if(src, *s, &format!("{lane} == 0"), unit, nl)]);
    }
    Ok(e)
}

/// `label` with a note where cluster `team` gives a loop around a column loop to its blocks.
fn nest_label(src: &str, rows: &RowPlan<'_>, team: Team, label: String) -> String {
    let split = (0..rows.loops.len()).any(|i| split_nest(src, rows, i, team).is_some());
    match label.split_once(" (") {
        Some((head, tail)) if split => {
            format!("{head}, the loop around the columns shared by its blocks ({tail}")
        }
        _ => label,
    }
}

/// The loop around column loop `i` that cluster `team` gives to its blocks in turn (its
/// threads then share loop `i`): where [`nest::find`] found one inside the loop the
/// accumulators are combined after, and [`nest::across_blocks`] prefers it for the team.
fn split_nest<'a, 't>(
    src: &str,
    rows: &'a RowPlan<'t>,
    i: usize,
    team: Team,
) -> Option<&'a nest::Nest<'t>> {
    let Team::Cluster { threads, blocks } = team else {
        return None;
    };
    let n = rows.nests.get(i)?.as_ref()?;
    let site = combine_site(src, rows, i, true)?;
    let covers = site.start_byte() <= n.node.start_byte() && site.end_byte() >= n.node.end_byte();
    (covers && nest::across_blocks(n.trips, n.column_trips, blocks, threads)).then_some(n)
}

/// The outermost loop around column loop `i` (a loop every lane runs, as the image loop
/// of NCHW statistics) in which its accumulators appear only inside the column loop: the
/// lanes' partials may then run on across that loop's trips and be combined once after
/// it, instead of once a trip. None when the column loop carries a running prefix or an
/// arg pick (their values are read per column), when `hoist` is off (rows staged in
/// registers), or when no enclosing loop qualifies.
fn combine_site<'t>(src: &str, rows: &RowPlan<'t>, i: usize, hoist: bool) -> Option<Node<'t>> {
    let l = &rows.loops[i];
    let plain = l.accs.iter().all(|a| a.prefix.is_none() && a.arg.is_none());
    if !hoist || !plain || l.accs.is_empty() {
        return None;
    }
    let names: BTreeSet<&str> = l.accs.iter().map(|a| a.name.as_str()).collect();
    let inside = l.node.byte_range();
    let mut site = None;
    let mut up = l.node.parent();
    while let Some(n) = up {
        if matches!(
            n.kind(),
            "for_statement" | "while_statement" | "do_statement"
        ) {
            let mut touched = false;
            walk(n, &mut |m| {
                let outside = m.start_byte() < inside.start || m.end_byte() > inside.end;
                if outside && m.kind() == "identifier" && names.contains(text(src, m)) {
                    touched = true;
                }
                !touched
            });
            if touched {
                break;
            }
            site = Some(n);
        }
        up = n.parent();
    }
    site
}

/// The edits that make the row index the team's row and declare the thread's `lane` in
/// it (for a partial warp, also the ballot of lanes whose row exists): the shuffles' mask
/// and the lanes' stride along the row.
fn team_lane(
    src: &str,
    shape: &Elementwise<'_>,
    team: Team,
    lane: &str,
    e: &mut Edits,
    names: &mut BTreeSet<String>,
) -> Result<(String, String), String> {
    let nl = newline(src);
    let decl_indent = line_indent(src, shape.decl.start_byte()).to_string();
    let value = {
        let mut c = shape.decl.walk();
        let d = shape
            .decl
            .children_by_field_name("declarator", &mut c)
            .next()
            .ok_or("the row index has no declarator")?;
        d.child_by_field_name("value")
            .ok_or("the row index has no value")?
    };
    Ok(match team {
        Team::Warp { width } => {
            e.extend([Edit::replace(
                value.byte_range(),
                format!("({}) / {width}", text(src, value)),
            )]);
            let mut after = format!("{nl}{decl_indent}int {lane} = threadIdx.x % {width};");
            let mask = if width == 32 {
                "0xffffffff".to_string()
            } else {
                let m = fresh("mask", names);
                let cond = shape
                    .guard
                    .child_by_field_name("condition")
                    .and_then(|c| c.child_by_field_name("value"))
                    .map_or("", |v| text(src, v));
                let active = match shape.form {
                    Guard::Block => cond.to_string(),
                    Guard::EarlyReturn => format!("!({cond})"),
                };
                after.push_str(&format!(
                    "{nl}{decl_indent}// each {width} lanes share a row; the shuffles name only lanes whose row exists{nl}{decl_indent}unsigned {m} = __ballot_sync(0xffffffff, {active});"
                ));
                m
            };
            e.extend([Edit::insert(shape.decl.end_byte(), after)]);
            (mask, width.to_string())
        }
        Team::Block { .. } => {
            e.extend([Edit::replace(value.byte_range(), "blockIdx.x")]);
            e.extend([Edit::insert(
                shape.decl.end_byte(),
                format!("{nl}{decl_indent}int {lane} = threadIdx.x;"),
            )]);
            ("0xffffffff".to_string(), "blockDim.x".to_string())
        }
        Team::Cluster { blocks, .. } => {
            // the cluster's blocks are consecutive along x: its rank is `blockIdx.x % C`
            e.extend([Edit::replace(
                value.byte_range(),
                format!("blockIdx.x / {blocks}"),
            )]);
            e.extend([Edit::insert(
                shape.decl.end_byte(),
                format!("{nl}{decl_indent}int {lane} = (blockIdx.x % {blocks}) * blockDim.x + threadIdx.x;"),
            )]);
            ("0xffffffff".to_string(), format!("{blocks} * blockDim.x"))
        }
    })
}

/// What combining a column loop's accumulators across the team needs: the team, the
/// shuffles' mask, the names of the shuffle offset, the warp counter and the lane.
struct Combiner<'a> {
    team: Team,
    mask: &'a str,
    off: &'a str,
    w: &'a str,
    lane: &'a str,
    unit: &'a str,
    nl: &'a str,
}

impl Combiner<'_> {
    /// The code after column loop `l` (indented `ind`) that combines its accumulators
    /// (those that are not running prefixes) across the team: a butterfly of shuffles,
    /// and for a block team the warps' partials through shared memory. `None` when it
    /// has none to combine.
    fn after_loop(
        &self,
        l: &ColumnLoop<'_>,
        ind: &str,
        names: &mut BTreeSet<String>,
    ) -> Result<Option<String>, String> {
        let Combiner {
            team,
            mask,
            off,
            w,
            lane,
            unit,
            nl,
        } = *self;
        let combined: Vec<&Acc> = l.accs.iter().filter(|a| a.prefix.is_none()).collect();
        if combined.is_empty() {
            return Ok(None);
        }
        let top = match team {
            Team::Warp { width } => width / 2,
            Team::Block { .. } | Team::Cluster { .. } => 16,
        };
        let mut lines: Vec<String> = Vec::new();
        for acc in &combined {
            let shfl = |v: &str| format!("__shfl_xor_sync({mask}, {v}, {off})");
            lines.extend(match &acc.arg {
                Some(pick) => {
                    let ty = acc.ty.as_deref();
                    arg::combine_arg(&acc.name, ty, acc.family, pick, l.step, &shfl, names)?
                }
                None => combine(acc, &shfl(&acc.name), names)?,
            });
        }
        let mut code = format!("{nl}{ind}");
        if let [one] = lines.as_slice() {
            code.push_str(&format!(
                "for (int {off} = {top}; {off} > 0; {off} /= 2) {one}"
            ));
        } else {
            code.push_str(&format!(
                "for (int {off} = {top}; {off} > 0; {off} /= 2) {{"
            ));
            for c in &lines {
                let (extra, c) = match c.strip_prefix('\t') {
                    Some(rest) => (unit, rest),
                    None => ("", c.as_str()),
                };
                code.push_str(&format!("{nl}{ind}{unit}{extra}{c}"));
            }
            code.push_str(&format!("{nl}{ind}}}"));
        }
        // the thread's place in its block: a cluster's lanes run across its blocks
        let tid = match team {
            Team::Cluster { .. } => "threadIdx.x",
            _ => lane,
        };
        if let Team::Block { .. } | Team::Cluster { .. } = team {
            let slots = combine::Slots {
                len: 32,
                store_if: Some(format!("{tid} % 32 == 0")),
                mine: format!("{tid} / 32"),
                first: "0".into(),
                nth: w.to_string(),
                others: format!("int {w} = 1; {w} < blockDim.x / 32; ++{w}"),
                compact: true,
                comment: "one partial per warp, combined by every thread",
                scope: "row body",
            };
            let (block, parts) =
                combine::shared_combine(&combined, l.step, &slots, ind, unit, nl, names)?;
            code.push_str(&block);
            if let Team::Cluster { blocks, .. } = team {
                let slot = combine::ClusterSlot {
                    store_if: "threadIdx.x == 0",
                    at: "0",
                    blocks,
                };
                let inner = format!("{ind}{unit}");
                code.push_str(&combine::cluster_combine(
                    &combined, &parts, &slot, &inner, unit, nl, names,
                )?);
            }
            code.push_str(&format!("{nl}{ind}}}"));
        }
        Ok(Some(code))
    }
}

/// The edit that runs statement `s` only where `cond` holds (a write given to one lane).
pub(super) fn only_if(src: &str, s: Node<'_>, cond: &str, unit: &str, nl: &str) -> Edit {
    let t = text(src, s);
    // Under an `if` with an `else`, a bare `if` would take the `else`: brace it.
    let under_if = s.parent().is_some_and(|p| p.kind() == "if_statement");
    if !t.contains('\n') && !under_if {
        Edit::insert(s.start_byte(), format!("if ({cond}) "))
    } else if !t.contains('\n') {
        Edit::replace(s.byte_range(), format!("{{ if ({cond}) {t} }}"))
    } else {
        let ind = line_indent(src, s.start_byte());
        let body = reindent(t, ind, &format!("{ind}{unit}"));
        Edit::replace(
            s.byte_range(),
            format!("if ({cond}) {{{nl}{ind}{unit}{body}{nl}{ind}}}"),
        )
    }
}

/// One combine step with the other value `other` (an expression evaluated once, in
/// every lane): the family's compound assignment, or the author's update replayed.
/// Lines; a leading tab is one more level of indentation.
fn combine(acc: &Acc, other: &str, names: &mut BTreeSet<String>) -> Result<Vec<String>, String> {
    if let Some(op) = acc.family.compound() {
        return Ok(vec![format!("{} {op} {other};", acc.name)]);
    }
    let tmpl = acc
        .template
        .as_deref()
        .ok_or("a max/min without its update")?;
    if acc.inline_ok && tmpl.matches(OTHER).count() == 1 {
        return Ok(vec![tmpl.replace(OTHER, other)]);
    }
    let ty = acc.ty.as_deref().unwrap_or("auto");
    let tmp = fresh(&format!("{}_other", acc.name), names);
    Ok(vec![
        "{".to_string(),
        format!("\t{ty} {tmp} = {other};"),
        format!("\t{}", tmpl.replace(OTHER, &tmp)),
        "}".to_string(),
    ])
}

/// A combine step with a value that may be read twice (a shared-memory partial).
pub(super) fn combine_plain(acc: &Acc, other: &str) -> String {
    match acc.family.compound() {
        Some(op) => format!("{} {op} {other};", acc.name),
        None => acc
            .template
            .as_deref()
            .unwrap_or_default()
            .replace(OTHER, other),
    }
}

/// The element type of each pointer parameter.
fn pointee_types(cx: &RewriteContext<'_>) -> BTreeMap<String, String> {
    cx.kernel
        .params
        .iter()
        .filter_map(|p| match &p.kind {
            crate::syntax::ParamKind::Pointer { pointee, .. } => {
                Some((p.name.clone(), pointee.clone()))
            }
            _ => None,
        })
        .collect()
}

pub(super) mod arg;
pub(super) mod combine;
mod moments;
mod nest;
mod rescale;
mod scan;
mod staging;
mod tiles;

#[cfg(test)]
mod tests;
