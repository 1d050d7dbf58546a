//! `split_loop`: a kernel where each thread owns one output and loops alone over a long
//! range (a column sum, a column max, `A^T v`) becomes one where several threads share
//! each output's loop: the block gains a y dimension, thread `threadIdx.y` takes every
//! `blockDim.y`-th iteration, and the threads of one output combine their partial
//! accumulators through shared memory. The lanes stay on the output index, so loads that
//! were coalesced stay coalesced, while the grid holds `blockDim.y` times more threads:
//! the cure for a launch that fills a fraction of one wave because each thread carries a
//! long sequential loop.
//!
//! **Matches** the shape of [`super::cooperative_rows`] (one output index
//! `I = blockIdx.x * M + threadIdx.x`, a bound check `if (I < B) { ... }` or
//! `if (I >= B) return;`, loops whose variable indexes global memory, variables carried
//! across iterations only as sums, products, maxima or minima), read by the same
//! analysis. The decision comes from how the loop's accesses move
//! ([`super::cooperative_rows::LoopAccess`]): every access must move one element with
//! the output index or not at all (the threads as written read neighbouring elements),
//! which is exactly where `cooperative_rows` (lanes sharing the loop) would read a stride
//! apart.
//!
//! **Writes** code that works for any block shape: every thread runs the body (the
//! barriers need the whole block), so the bound check becomes `live` and a thread past
//! the bound computes on output 0 and writes nothing; each loop starts at
//! `S + threadIdx.y * step` and steps `blockDim.y * step`; after a loop that carries
//! values, each thread stores its partials in `__shared__` arrays of 1024, and every
//! thread of the output combines them in order with the author's own update, so all of
//! them hold the result; a loop that writes memory runs in live threads only; statements
//! that write memory outside the loops run in `threadIdx.y == 0` of a live output. A sum
//! or product that starts from a nonzero value restarts at 0 (1) in the other threads.
//! Launch: block `(O, T / O)` for O in param `owners` (default 32, 16, 8) and T in
//! `threads` (default 256, 512), the grid's `cdiv(n, M)` becoming `cdiv(n, O)`. The split
//! loop steps by `blockDim.y`, which the compiler does not know, so it is written with 8
//! iterations per trip ([`super::interleave`]): the block shapes are compared with their
//! loads in flight.
//!
//! **Clusters** (sm_90): a grid of `cdiv(n, 32)` blocks of 32 outputs (one 128-byte line
//! of f32 per row) may still fill a fraction of the GPU, and narrower blocks waste half of
//! each 64-byte DRAM burst. So for the 32-output shapes the loop is also split over a
//! cluster of C blocks along y (param `clusters`, default 4 and 8;
//! `__cluster_dims__(1, C, 1)`, grid `(cdiv(n, 32), C)`): each block combines its threads'
//! partials as above, then every thread reads the C block partials from the cluster's
//! shared memory (`mapa` + `ld.shared::cluster`, between two cluster barriers) and
//! combines them in rank order. Carried values of other types than 4- and 8-byte ints and
//! floats get no cluster candidate.
//!
//! **Grids**: a cluster holds at most 8 blocks (portable), so for the 32-output shapes the
//! loop is also split over a grid of G blocks along y (param `grid_rows`, default 16 and
//! 32; grid `(cdiv(n, 32), G)`, block `(32, W)`, no cluster). Thread `(blockIdx.y *
//! blockDim.y + threadIdx.y)` starts the loop and it steps `P * blockDim.y`, where `P` is
//! `gridDim.y` while the partials fit the scratch arrays (`gridDim.x <= 65536` counters,
//! `gridDim.x * blockDim.x * gridDim.y <= 1 << 20` slots) and 1 otherwise; blocks with
//! `blockIdx.y >= P` return at the top, before any barrier, so any size stays correct.
//! After the block's shared-memory combine, `threadIdx.y == 0` stores each value in a
//! function-scope `static __device__` array at `(blockIdx.y * gridDim.x + blockIdx.x) *
//! blockDim.x + threadIdx.x`; `__threadfence`, a barrier, and one thread takes a ticket
//! from `atomicAdd` on its column of blocks' counter; every block but the last returns,
//! and the last resets the counter and folds the P values in block order (`__ldcg`) with
//! the author's update, as the cluster folds ranks: the result does not depend on which
//! block finished last. The code after the loop then runs in that block, written by
//! `live && threadIdx.y == 0` (writes before the loop by block y 0 alone). Only where the
//! loop is the one loop that carries values and no loop follows it (after the combine one
//! block goes on); accumulators of the C arithmetic types, no arg pick; not on a batched
//! kernel (its `blockIdx.y` is the batch).
//!
//! **Refuses**, with the reason: another shape, or what `cooperative_rows`' analysis
//! refuses (barriers, warp code, a running value read mid-loop, writes whose owner cannot
//! be told, early exits from a loop); an access that moves by a stride with the output
//! index (the threads' reads are apart already: `remap_lanes` or `cooperative_rows`); a
//! loop carrying a value whose trip count differs between outputs (its bound reads a local
//! or the output index) or that sits under a condition or another loop (the combine's
//! barriers must be met by every thread); a bound check that is more than one comparison
//! of the index. The grid form alone is left out, with its reason among the dropped, for
//! a loop after the combined one (`col_share` in `tests/fixtures/rewrites/split/grid.cu`),
//! a second loop carrying values (`col_var`), a batched kernel, an arg pick or a carried
//! type that is not a C arithmetic scalar.

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::cooperative_rows::combine::{
    cluster_combine, grid_combine, shared_combine, ClusterSlot, GridSlot, Slots, GRID_GROUPS,
    GRID_SLOTS,
};
use super::cooperative_rows::{analyze, only_if, row_launch, Acc, RowPlan, Step};
use super::edits::{Edit, Edits};
use super::elementwise::{match_elementwise, Elementwise, Guard};
use super::params::Params;
use super::tree::{
    code_names, first_line, fresh, kernel_function, line_indent, named_children, newline, text,
    walk,
};
use super::RewriteContext;
use crate::syntax::Lang;

const ID: &str = "split_loop";
/// Iterations per trip of the split loop (`interleave`'s factor).
const LOADS_IN_FLIGHT: u64 = 8;
const SHAPE: &str = "`int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }` (or `if (i >= n) return;`) with a loop that carries a sum, product, max or min";

pub fn split_loop(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, ID)?;
    let plan = current_plan(cx)?;
    let p = Params(cx.params);
    let owners = p.uints("owners", &[32, 16, 8], 1..=1024)?;
    let threads = p.uints("threads", &[256, 512], 32..=1024)?;
    let clusters = p.uints("clusters", &[4, 8], 2..=8)?;
    let grid_rows = p.uints_or_none("grid_rows", &[16, 32], 2..=1024)?;
    let k = &cx.kernel.name;
    let func = kernel_function(cx)
        .ok_or_else(|| not_applicable(format!("`{k}`'s definition is not in the syntax tree")))?;
    let shape = match_elementwise(cx.text, func).map_err(|why| {
        not_applicable(format!(
            "`{k}` does not give one output to each thread: {why}; {ID} needs {SHAPE}"
        ))
    })?;
    let rows = analyze(cx, &plan, &shape).map_err(|why| {
        not_applicable(format!(
            "`{k}`'s loop cannot be split between threads: {why}"
        ))
    })?;
    let why_not = |why: String| not_applicable(format!("`{k}`: {why}"));
    owner_coalesced(&rows, &shape.index).map_err(why_not)?;
    barriers_reached(cx, func, &shape, &rows).map_err(why_not)?;
    let launch = row_launch(cx, &plan, ID, &shape)?;
    let names = code_names(cx);
    let body = emit(cx, &shape, &rows, Across::Block, &mut names.clone()).map_err(why_not)?;
    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    let var = rows.loops.first().map_or("the loop", |l| l.var.as_str());
    for (o, ways, across) in shapes(&owners, &threads, &clusters, &grid_rows) {
        if across != Across::Block {
            match spread_draft(cx, func, &shape, &rows, &launch, (o, ways, across), &names) {
                Ok(d) => drafts.push(d),
                Err(e) => dropped.push(e),
            }
            continue;
        }
        let mut g = Edits::new();
        for d in &launch.divs {
            g.extend([Edit::replace(
                d.range.clone(),
                format!("cdiv({}, {o})", d.num),
            )]);
        }
        let grid = match g.apply(&launch.component) {
            Ok(grid) => grid,
            Err(e) => {
                dropped.push(format!("{o} outputs per block: {e}"));
                continue;
            }
        };
        let mut e = body.clone();
        e.extend([
            Edit::replace(launch.grid_range.clone(), grid),
            Edit::replace(launch.block.range.clone(), format!("({o}, {ways})")),
        ]);
        let label =
            format!("`{var}` loop split over {ways} threads per output, block ({o}, {ways})");
        match e.apply(cx.text) {
            Ok(text) => drafts.push(Draft { label, text }),
            Err(err) => dropped.push(format!("{label}: {err}")),
        }
    }
    let drafts = drafts
        .into_iter()
        .map(|d| with_loads_in_flight(cx, d))
        .collect();
    finish(cx, drafts, dropped)
}

/// The split loop steps by `blockDim.y` (times the cluster): a step the compiler does not
/// know, so it would not unroll the loop and each thread would wait on one load at a
/// time. The draft's loops run [`LOADS_IN_FLIGHT`] iterations per trip where
/// `interleave` can make them (the block shapes are then compared as they will run).
pub(super) fn with_loads_in_flight(cx: &RewriteContext<'_>, d: Draft) -> Draft {
    match super::interleave::interleaved(&d.text, &cx.kernel.name, LOADS_IN_FLIGHT) {
        Some(text) => Draft {
            label: format!("{}, {LOADS_IN_FLIGHT} iterations per trip", d.label),
            text,
        },
        None => d,
    }
}

/// Where each output's loop is split beyond the threads along y of one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Across {
    /// The block's threads only.
    Block,
    /// A cluster of that many blocks along y (sm_90), combining in shared memory.
    Cluster(u64),
    /// That many blocks along y, the last to finish combining in global memory.
    Grid(u64),
}

/// Launch shapes (outputs per block, threads per output, where the loop is split) from
/// the params: every thread count that holds at least two threads per output, one block
/// each; then, for blocks whose outputs fill a 128-byte line of f32 (32 outputs), the
/// same split over a cluster of blocks, and over a grid of blocks along y.
fn shapes(
    owners: &[u64],
    threads: &[u64],
    clusters: &[u64],
    grid_rows: &[u64],
) -> Vec<(u64, u64, Across)> {
    let mut out = Vec::new();
    for &o in owners {
        for &t in threads {
            if t % o == 0 && t / o >= 2 && !out.contains(&(o, t / o, Across::Block)) {
                out.push((o, t / o, Across::Block));
            }
        }
    }
    let singles: Vec<(u64, u64, Across)> = out.clone();
    let spreads = clusters
        .iter()
        .map(|&c| Across::Cluster(c))
        .chain(grid_rows.iter().map(|&g| Across::Grid(g)));
    for across in spreads {
        for &(o, w, _) in singles.iter().filter(|s| s.0 == 32) {
            out.push((o, w, across));
        }
    }
    out
}

/// One candidate whose loop is also split over several blocks along y: a cluster of
/// `c` blocks (sm_90), each block combining its threads' partials as the one-block
/// candidates do, then every thread reading the cluster's block partials from their
/// shared memory (`mapa`, `ld.shared::cluster`) in rank order; or a grid of `g` blocks
/// along y whose last block to finish combines their partials from global memory.
fn spread_draft(
    cx: &RewriteContext<'_>,
    func: Node<'_>,
    shape: &Elementwise<'_>,
    rows: &RowPlan<'_>,
    launch: &super::cooperative_rows::RowLaunch,
    (o, ways, across): (u64, u64, Across),
    names: &BTreeSet<String>,
) -> Result<Draft, String> {
    let var = rows.loops.first().map_or("the", |l| l.var.as_str());
    let head = format!("`{var}` loop split over {ways} threads per output in each of");
    let (label, y, along) = match across {
        Across::Cluster(c) => (
            format!("{head} {c} blocks of a cluster, block ({o}, {ways})"),
            c,
            "a cluster",
        ),
        Across::Grid(g) => (
            format!("{head} {g} blocks, block ({o}, {ways}), partials combined by the last block"),
            g,
            "a grid of blocks",
        ),
        Across::Block => return Err("one block takes no launch along y".into()),
    };
    let fail = |e: String| format!("{label}: {e}");
    if shape.batched {
        return Err(fail(format!(
            "the grid's y is the kernel's batch index (`blockIdx.y`/`.z`), which {along} along y would take"
        )));
    }
    if matches!(across, Across::Grid(_)) {
        grid_applies(cx.text, shape, rows).map_err(fail)?;
    }
    let mut e = emit(cx, shape, rows, across, &mut names.clone()).map_err(fail)?;
    if let Across::Cluster(c) = across {
        let name = func
            .child_by_field_name("declarator")
            .ok_or_else(|| fail("the kernel has no declarator".into()))?;
        e.extend([Edit::insert(
            name.start_byte(),
            format!("__cluster_dims__(1, {c}, 1) "),
        )]);
    }
    let mut g = Edits::new();
    for d in &launch.divs {
        g.extend([Edit::replace(
            d.range.clone(),
            format!("cdiv({}, {o})", d.num),
        )]);
    }
    let first = g
        .apply(&launch.component)
        .map_err(|e| fail(e.to_string()))?;
    e.extend([
        Edit::replace(launch.grid.range.clone(), format!("({first}, {y})")),
        Edit::replace(launch.block.range.clone(), format!("({o}, {ways})")),
    ]);
    let text = e.apply(cx.text).map_err(|e| fail(e.to_string()))?;
    Ok(Draft { label, text })
}

/// The grid combine leaves one block per group of outputs running: so the loop it
/// combines must be the only one that carries values (an earlier one would hold each
/// block's share only), and no loop may follow it (a later pass would run in one block).
fn grid_applies(src: &str, shape: &Elementwise<'_>, rows: &RowPlan<'_>) -> Result<(), String> {
    let carrying: Vec<usize> = (0..rows.loops.len())
        .filter(|&i| !rows.loops[i].accs.is_empty())
        .collect();
    let Some(&last) = carrying.last() else {
        return Err("no loop carries a value to combine across blocks".into());
    };
    let l = rows.loops[last].node;
    if let Some(&i) = carrying.iter().find(|&&i| i != last) {
        return Err(format!(
            "the loop `{}` carries values before `{}`: split over blocks, each would hold only its share of them, and after a grid combine one block goes on; only the last carrying loop is combined across blocks",
            first_line(text(src, rows.loops[i].node)),
            first_line(text(src, l))
        ));
    }
    let mut later = None;
    for &root in &shape.body {
        walk(root, &mut |n| {
            let is_loop = matches!(
                n.kind(),
                "for_statement" | "while_statement" | "do_statement"
            );
            if later.is_none() && is_loop && n.start_byte() >= l.end_byte() {
                later = Some(n);
            }
            later.is_none()
        });
    }
    match later {
        Some(n) => Err(format!(
            "the loop `{}` follows `{}`: after the grid combine only the last block of each group goes on, so that loop would run in one block",
            first_line(text(src, n)),
            first_line(text(src, l))
        )),
        None => Ok(()),
    }
}

/// Every access of the loops moves one element with the output index or not at all, and
/// one of them moves: neighbouring threads read neighbouring elements, so the lanes stay
/// on the output and the loop is what gets shared.
pub(super) fn owner_coalesced(rows: &RowPlan<'_>, index: &str) -> Result<(), String> {
    if let Some(a) = rows
        .loops
        .iter()
        .flat_map(|l| &l.accs)
        .find(|a| a.prefix.is_some())
    {
        return Err(format!(
            "the loop reads the running value of `{}` after each update (a prefix sum); threads that each hold part of it cannot give every iteration its value",
            a.name
        ));
    }
    let moves = rows.loops.iter().flat_map(|l| &l.moves);
    if let Some(m) = moves.clone().find(|m| m.along_row == Step::Other) {
        return Err(format!(
            "`{}` does not move one element with `{index}`: neighbouring threads read apart, which sharing the loop would not fix (remap_lanes or cooperative_rows fit it)",
            m.at
        ));
    }
    if !moves.clone().any(|m| m.along_row == Step::One) {
        return Err(format!(
            "no access in the loops moves with `{index}`; nothing says the threads read neighbouring elements"
        ));
    }
    Ok(())
}

/// The combine after a loop that carries values has barriers: every thread of the block
/// must reach it the same number of times. So such a loop sits directly in the output's
/// body (not under a condition or another loop), and its start and bound read only
/// parameters, macros, literals and locals made of those alone (the same trip count for
/// every output).
fn barriers_reached(
    cx: &RewriteContext<'_>,
    func: Node<'_>,
    shape: &Elementwise<'_>,
    rows: &RowPlan<'_>,
) -> Result<(), String> {
    let src = cx.text;
    let varying = super::cooperative_rows::names_varying_by_row(src, func, &rows.loops);
    for (l, name) in rows.loops.iter().zip(varying) {
        if l.accs.is_empty() {
            continue;
        }
        let header = first_line(text(src, l.node));
        let top = shape.body.iter().any(|b| b.id() == l.node.id());
        if !top {
            return Err(format!(
                "the loop `{header}` sits under a condition or another loop; the threads of a block would not all meet the barrier after it"
            ));
        }
        if let Some(name) = name {
            return Err(format!(
                "the loop `{header}` reads `{name}` in its start or bound, so its trip count may differ between outputs; the threads of a block would not all meet the barrier after it"
            ));
        }
    }
    Ok(())
}

/// How a thread finds its part of a loop, and who does what, for one [`Across`].
struct Split {
    /// The thread's part (`threadIdx.y`) and how many parts there are (`blockDim.y`).
    part: String,
    parts: String,
    /// The thread that keeps an accumulator's start (the others restart from the
    /// identity) and the one (with `live`) that writes an output.
    first: &'static str,
    lead: &'static str,
    /// Writes before the combined loop: a grid's blocks all run them, one must write.
    lead_before: &'static str,
    /// Code before the output index (the grid's parts, and the blocks with no part).
    prologue: String,
    /// The grid's parts (`P`), for the combine.
    blocks: String,
}

impl Split {
    fn of(across: Across, src: &str, ind: &str, names: &mut BTreeSet<String>) -> Split {
        let nl = newline(src);
        let global = "(blockIdx.y * blockDim.y + threadIdx.y)".to_string();
        match across {
            Across::Block => Split {
                part: "threadIdx.y".into(),
                parts: "blockDim.y".into(),
                first: "threadIdx.y == 0",
                lead: "threadIdx.y == 0",
                lead_before: "",
                prologue: String::new(),
                blocks: String::new(),
            },
            Across::Cluster(_) => Split {
                part: global,
                parts: "(gridDim.y * blockDim.y)".into(),
                first: "threadIdx.y == 0 && blockIdx.y == 0",
                lead: "threadIdx.y == 0 && blockIdx.y == 0",
                lead_before: "",
                prologue: String::new(),
                blocks: String::new(),
            },
            Across::Grid(_) => {
                let p = fresh("P", names);
                Split {
                    part: global,
                    parts: format!("({p} * blockDim.y)"),
                    first: "threadIdx.y == 0 && blockIdx.y == 0",
                    lead: "threadIdx.y == 0",
                    lead_before: " && blockIdx.y == 0",
                    prologue: format!(
                        "// blocks along y that share each output's loop: all of them while their partials fit the scratch arrays{nl}{ind}const unsigned {p} = (gridDim.x <= {GRID_GROUPS} && (unsigned long long)gridDim.x * blockDim.x * gridDim.y <= ({GRID_SLOTS})) ? gridDim.y : 1;{nl}{ind}if (blockIdx.y >= {p}) return;{nl}{ind}"
                    ),
                    blocks: p,
                }
            }
        }
    }
}

/// The kernel body's edits: `live`, the index clamped, the bound check gone, the loops
/// shared along y, the combines, and the writes given to one thread.
fn emit(
    cx: &RewriteContext<'_>,
    shape: &Elementwise<'_>,
    rows: &RowPlan<'_>,
    across: Across,
    names: &mut BTreeSet<String>,
) -> Result<Edits, String> {
    let src = cx.text;
    let nl = newline(src);
    let mut e = Edits::new();
    let live = fresh("live", names);
    let lead = fresh("lead", names);
    let ind = line_indent(src, shape.decl.start_byte()).to_string();
    let split = Split::of(across, src, &ind, names);
    let value = index_value(shape)?;
    let v = own_index(src, shape, value);
    let cond = live_condition(src, shape, &v)?;
    e.extend([
        Edit::insert(
            shape.decl.start_byte(),
            format!(
                "{}// threads past the bound compute on output 0 and write nothing: every thread meets the barriers{nl}{ind}const bool {live} = {cond};{nl}{ind}",
                split.prologue
            ),
        ),
        Edit::replace(value.byte_range(), format!("{live} ? ({v}) : 0")),
        Edit::insert(
            shape.decl.end_byte(),
            format!("{nl}{ind}const bool {lead} = {live} && {};", split.lead),
        ),
    ]);
    e.extend(drop_guard(src, shape));
    for l in &rows.loops {
        e.extend(split_loop_edits(
            src, shape, l, &split, &live, across, names,
        )?);
    }
    // Writes before the grid-combined loop: every block along y runs them, the first writes.
    let combined = rows.loops.iter().rev().find(|l| !l.accs.is_empty());
    for s in &rows.lane0 {
        let before = combined.is_some_and(|l| s.end_byte() <= l.node.start_byte());
        let cond = match before {
            true => format!("{lead}{}", split.lead_before),
            false => lead.clone(),
        };
        e.extend([only_if(src, *s, &cond, &shape.unit, nl)]);
    }
    Ok(e)
}

/// One loop's edits: its start and step over the thread's part, the restarts of the
/// accumulators the thread does not start from, its writes in live threads, and the
/// combines after it (the block's; then the cluster's or the grid's).
fn split_loop_edits(
    src: &str,
    shape: &Elementwise<'_>,
    l: &super::cooperative_rows::ColumnLoop<'_>,
    split: &Split,
    live: &str,
    across: Across,
    names: &mut BTreeSet<String>,
) -> Result<Vec<Edit>, String> {
    let nl = newline(src);
    let mut e = Vec::new();
    let init = text(src, l.init).trim();
    let (lane, stride) = match l.step {
        1 => (split.part.clone(), split.parts.clone()),
        s => (
            format!("{s} * {}", split.part),
            format!("{s} * {}", split.parts),
        ),
    };
    let start = if init == "0" {
        lane
    } else {
        format!("{init} + {lane}")
    };
    e.extend([
        Edit::replace(l.init.byte_range(), start),
        Edit::replace(l.update.byte_range(), format!("{} += {stride}", l.var)),
    ]);
    let lind = line_indent(src, l.start).to_string();
    let others = format!("!({})", split.first);
    let mut before = super::cooperative_rows::restarts(&l.accs, &others, nl, &lind);
    let writes = l.moves.iter().any(|m| m.write);
    if writes && l.start == l.node.start_byte() {
        before.push_str(&format!("if ({live}) "));
    } else if writes {
        e.extend([Edit::insert(l.node.start_byte(), format!("if ({live}) "))]);
    }
    if !before.is_empty() {
        e.extend([Edit::insert(l.start, before)]);
    }
    if l.accs.is_empty() {
        return Ok(e);
    }
    let (mut code, parts) = combine_block(l, &lind, &shape.unit, nl, names)?;
    let inner = format!("{lind}{}", shape.unit);
    let accs: Vec<&Acc> = l.accs.iter().collect();
    match across {
        Across::Block => {}
        Across::Cluster(c) => {
            let slot = ClusterSlot {
                store_if: "threadIdx.y == 0",
                at: "threadIdx.x",
                blocks: c,
            };
            code.push_str(&cluster_combine(
                &accs,
                &parts,
                &slot,
                &inner,
                &shape.unit,
                nl,
                names,
            )?);
        }
        Across::Grid(_) => {
            let at = |b: &str| format!("({b} * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x");
            let slot = GridSlot {
                store_if: "threadIdx.y == 0",
                at: &at,
                me: "blockIdx.y",
                blocks: &split.blocks,
                group: "blockIdx.x",
            };
            code.push_str(&grid_combine(&accs, &slot, &inner, &shape.unit, nl, names)?);
        }
    }
    code.push_str(&format!("{nl}{lind}}}"));
    e.extend([Edit::insert(l.node.end_byte(), code)]);
    Ok(e)
}

fn index_value<'t>(shape: &Elementwise<'t>) -> Result<Node<'t>, String> {
    let mut c = shape.decl.walk();
    let d = shape
        .decl
        .children_by_field_name("declarator", &mut c)
        .next()
        .ok_or("the output index has no declarator")?;
    d.child_by_field_name("value")
        .ok_or_else(|| "the output index has no value".to_string())
}

/// The index's value for a block of any width: the author's, when it counts blocks of
/// `blockDim.x` (directly or through an alias), else `blockIdx.x * blockDim.x + threadIdx.x`.
fn own_index(src: &str, shape: &Elementwise<'_>, value: Node<'_>) -> String {
    let v = text(src, value);
    let mut reads_dim = false;
    walk(value, &mut |n| {
        let t = text(src, n);
        if t == "blockDim.x"
            || (n.kind() == "identifier"
                && shape
                    .thread_aliases
                    .get(t)
                    .is_some_and(|f| f == "blockDim.x"))
        {
            reads_dim = true;
        }
        !reads_dim
    });
    if reads_dim {
        v.to_string()
    } else {
        "blockIdx.x * blockDim.x + threadIdx.x".to_string()
    }
}

/// The bound check as a condition that holds for live threads, with the index replaced
/// by its value (`(int)(V) < n`); one comparison of the index only.
fn live_condition(src: &str, shape: &Elementwise<'_>, v: &str) -> Result<String, String> {
    let cond = shape
        .guard
        .child_by_field_name("condition")
        .and_then(|c| named_children(c).into_iter().last())
        .ok_or("the bound check has no condition")?;
    let comparison = cond.kind() == "binary_expression"
        && cond
            .child_by_field_name("operator")
            .is_some_and(|o| matches!(text(src, o), "<" | "<=" | ">" | ">="));
    if !comparison {
        return Err(format!(
            "the bound check `{}` is more than one comparison of `{}`",
            text(src, cond),
            shape.index
        ));
    }
    let mut spots = Vec::new();
    walk(cond, &mut |n| {
        if n.kind() == "identifier" && text(src, n) == shape.index {
            spots.push(n.byte_range());
        }
        true
    });
    let base = cond.start_byte();
    let mut out = text(src, cond).to_string();
    for r in spots.into_iter().rev() {
        out.replace_range(
            r.start - base..r.end - base,
            &format!("(({})({v}))", shape.index_ty),
        );
    }
    Ok(match shape.form {
        Guard::Block => out,
        Guard::EarlyReturn => format!("!({out})"),
    })
}

/// Removes the bound check: the `if (...)` head of a guarding block (its body stays, a
/// plain block), or the whole `if (...) return;` line.
fn drop_guard(src: &str, shape: &Elementwise<'_>) -> Vec<Edit> {
    let g = shape.guard;
    match shape.form {
        Guard::Block => match g.child_by_field_name("consequence") {
            Some(body) => vec![Edit::replace(g.start_byte()..body.start_byte(), "")],
            None => Vec::new(),
        },
        Guard::EarlyReturn => {
            let start = src[..g.start_byte()]
                .rfind('\n')
                .map_or(g.start_byte(), |p| p + 1);
            let end = match src[g.end_byte()..].find('\n') {
                Some(p) if src[g.end_byte()..g.end_byte() + p].trim().is_empty() => {
                    g.end_byte() + p + 1
                }
                _ => g.end_byte(),
            };
            vec![Edit::replace(start..end, "")]
        }
    }
}

/// After a loop that carries values: every thread stores its partials, and every thread
/// of the same output combines them in the same order, so all hold the result. The
/// block is left open (the caller closes it), with the partial arrays' names.
fn combine_block(
    l: &super::cooperative_rows::ColumnLoop<'_>,
    ind: &str,
    unit: &str,
    nl: &str,
    names: &mut BTreeSet<String>,
) -> Result<(String, Vec<String>), String> {
    let w = fresh("w", names);
    let slots = Slots {
        len: 1024,
        store_if: None,
        mine: "threadIdx.y * blockDim.x + threadIdx.x".into(),
        first: "threadIdx.x".into(),
        nth: format!("{w} * blockDim.x + threadIdx.x"),
        others: format!("unsigned {w} = 1; {w} < blockDim.y; ++{w}"),
        compact: false,
        comment: "the partials of the threads that share an output, combined by each of them",
        scope: "output's body",
    };
    let accs: Vec<&Acc> = l.accs.iter().collect();
    shared_combine(&accs, l.step, &slots, ind, unit, nl, names)
}

#[cfg(test)]
mod tests;
