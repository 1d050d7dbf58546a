//! `triton_split_loop`: a Triton program that walks a long axis one step at a time,
//! accumulating a tile (a column sum looping over rows, a matrix-vector product looping
//! over columns), walks it R steps at a time instead: the loop variable becomes a second
//! `tl.arange` dimension, the accumulator a 2-D tile of R partial results, and one
//! reduction over that dimension after the loop combines them. R loads are in flight per
//! iteration instead of one, and the loop runs R times fewer iterations. The split stays
//! inside the program, so the output is written once, as before (no atomics into an
//! output the verifier poisons).
//!
//! **Matches**, from the loop analysis (`facts/triton_loops.rs`): a body loop of unit step
//! (`for r in range(a, b)`, `tl.range`, or the while form ending in `r += 1`) with no
//! store, branch, inner loop or reduction over the lanes inside, whose carries are all
//! lane-shaped sums, maxima or minima (`acc += E`, `acc = tl.maximum(acc, E)`) read only
//! by their updates; maxima and minima start from an infinity (a float).
//!
//! A loop that stores and carries nothing (a pass writing each row it reads) splits too,
//! when no buffer it loads from is one it stores to; several passes over the same rows
//! (a maximum, a sum, a pass that writes) also get one candidate that splits them all.
//!
//! **Online pairs**: where two neighbouring splittable passes are a running maximum and
//! sums of `exp(x - max)` that `triton_online` joins (its analysis decides: same range,
//! sums linear in one `exp(A - m)` factor, no store in the second), one more candidate per
//! R joins them (`triton_online::merge`) and tiles the joined loop: each step takes its
//! tile's maximum over the steps (`m = tl.maximum(m, tl.max(tl.where(ok, E, -inf), 0))`),
//! rescales each sum once by `tl.where(m_prev == m, 1.0, exp(m_prev - m))` (a column still
//! all -inf would give `-inf - -inf`, NaN), and adds `tl.sum(tl.where(ok, term, 0), 0)`;
//! the other passes split as before: one candidate per R, and on a 1-D grid one with the
//! budgeted tile's steps, lanes and warps (below; its steps one constexpr knob, `R_STEPS`,
//! that every split pass shares, so the retune sweeps it). A three-pass softmax then reads its
//! input twice, tiled, in one step of the search (a 4096 x 4096 column softmax on an
//! H100: 1.13x torch.compile with the budgeted tile, 0.43x with 32 steps of 64 lanes). A
//! pair `triton_online` refuses (a sum of `x - m`, a maximum pass that stores, different
//! ranges) gets no such candidate.
//!
//! **Refuses** tiles that are already 2-D (`[:, None]` inside), a loop that builds its own
//! `tl.arange` or shapes, a running prefix or any other carry, and a bound the loop itself
//! changes.
//!
//! **Writes** `rr = r + tl.arange(0, R)`, every use of `r` as `rr[:, None]` and of a
//! lane-shaped value from before the loop as `v[None, :]`, the row mask `rr[:, None] < b`
//! and'ed into every load's mask, each update into the 2-D partials (rows past `b` add the
//! identity), and after the loop `acc += tl.sum(part, axis=0)` (or `tl.max`/`tl.min`). One
//! candidate per R in param `rows` (default [8, 32]), the launch unchanged; and on a 1-D
//! grid `cdiv(n, BLOCK)`, the budgeted tile ([`tile_plan`]): as many loads in flight per
//! step as one program holds at 32 a thread, lanes narrowed where the grid is small or
//! strided along the lanes, its steps a constexpr knob and a `for` loop's `num_stages` a
//! tuned one, which the search's retune sweeps on the new version.

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::check::{
    current_plan, finish, not_applicable, require_lang, set_spec_statements, Draft, R,
};
use super::edits::{Edit, Edits};
use super::params::Params;
use super::tree::{code_names, fresh, line_indent, newline, text, walk};
use super::triton_loops::{
    add_constexprs, around_loop, body_loops, code_children, local_read_after, loop_header, splice,
    stages_free, STAGE_CHOICES,
};
use super::triton_online::Online;
use super::RewriteContext;
use crate::optimize::facts::triton_loops::{assignment, callee, reads, reduces, Combine, Loop};
use crate::optimize::facts::{static_facts, AccessKind, Stride};
use crate::syntax::Lang;

const ID: &str = "triton_split_loop";

/// Shapes a loop body may not build: the rewrite would have to reshape them too.
const SHAPED: &[&str] = &[
    "None",
    "tl.arange",
    "tl.zeros",
    "tl.full",
    "tl.reshape",
    "tl.view",
    "tl.broadcast",
    "tl.trans",
];

/// Python keywords a name made from a loop variable could spell.
const PY_KEYWORDS: &[&str] = &[
    "as", "if", "in", "is", "or", "and", "def", "del", "for", "not", "try",
];

pub fn triton_split_loop(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Triton, ID)?;
    let plan = current_plan(cx)?;
    let rows = Params(cx.params).uints("rows", &[8, 32], 2..=256)?;
    if let Some(r) = rows.iter().find(|r| !r.is_power_of_two()) {
        return Err(super::check::bad_param(
            "rows",
            format!("{r} is not a power of two"),
        ));
    }
    let k = &cx.kernel.name;
    let (top, found) = body_loops(cx)?;
    let mut why = Vec::new();
    let mut splittable = Vec::new();
    for (i, l) in found.iter().enumerate() {
        let line = l.node.start_position().row + 1;
        match check(cx, &top, l) {
            Err(e) => why.push(format!("line {line}: {e}")),
            Ok(lanes) => splittable.push((i, line, lanes)),
        }
    }
    let Some((first, line, lanes)) = splittable.first() else {
        return Err(not_applicable(if why.is_empty() {
            format!("`{k}` has no loop in its body")
        } else {
            format!("`{k}` has no loop to split: {}", why.join("; "))
        }));
    };
    let l = &found[*first];
    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    for r in &rows {
        let label = format!("the loop at line {line} takes {r} steps at a time (2-D tile)");
        match write(cx, l, lanes, &Steps::Fixed(*r), None) {
            Ok(text) => drafts.push(Draft { label, text }),
            Err(e) => dropped.push(format!("{label}: {e}")),
        }
    }
    if let Some(lane) = lane_tile(cx, &plan, l) {
        match budgeted(cx, l, lanes, &lane) {
            Ok(d) => drafts.push(d),
            Err(e) => dropped.push(format!("line {line}, the budgeted tile: {e}")),
        }
    }
    if splittable.len() > 1 {
        let which: Vec<usize> = splittable.iter().map(|(i, _, _)| *i).collect();
        let lines: Vec<String> = splittable.iter().map(|(_, n, _)| n.to_string()).collect();
        for r in &rows {
            let label = format!(
                "the loops at lines {} take {r} steps at a time (2-D tiles)",
                lines.join(", ")
            );
            match split_each(cx, cx.text.to_string(), &which, &Steps::Fixed(*r)) {
                Ok(text) => drafts.push(Draft { label, text }),
                Err(e) => dropped.push(format!("{label}: {e}")),
            }
        }
        online_drafts(
            cx,
            (&top, &found),
            (&which, &lines),
            &plan,
            &rows,
            (&mut drafts, &mut dropped),
        );
    }
    finish(cx, drafts, dropped)
}

/// The candidates that split every splittable loop (indices `which`, at `lines`) with the
/// first neighbouring pair that `triton_online` joins (a running maximum, then sums of
/// `exp(x - max)`) made one tiled loop: each step reduces its tile's maximum, rescales
/// the sums once, and adds the tile's terms. One per R in `rows`, and on a 1-D grid one
/// with the budgeted tile's steps, lanes and warps ([`tile_plan`]; its steps a constexpr knob the spec sets, shared by every split pass, so the retune sweeps them).
/// A pair `triton_online` refuses adds none; a tiling that fails goes to `dropped`.
fn online_drafts(
    cx: &RewriteContext<'_>,
    (top, found): (&[Node<'_>], &[Loop<'_>]),
    (which, lines): (&[usize], &[String]),
    plan: &crate::spec::BenchPlan,
    rows: &[u64],
    out: (&mut Vec<Draft>, &mut Vec<String>),
) {
    let Some((i, (text, online))) = which.windows(2).find_map(|w| {
        (w[1] == w[0] + 1)
            .then(|| super::triton_online::merge(cx, top, &found[w[0]], &found[w[1]]).ok())
            .flatten()
            .map(|m| (w[0], m))
    }) else {
        return;
    };
    let rest: Vec<usize> = which
        .iter()
        .filter(|&&j| j > i + 1)
        .map(|j| j - 1)
        .collect();
    let (drafts, dropped) = out;
    let lines = lines.join(", ");
    for (r, how, values) in online_tiles(cx, plan, &found[i], rows) {
        let label = format!(
            "the loops at lines {lines} take {how} (2-D tiles), the first two joined online"
        );
        let joined = super::with_text(cx.lang, &text, &cx.kernel.name, cx.params, |c| {
            let (top, found) = body_loops(c).map_err(|e| e.to_string())?;
            let l = found.get(i).ok_or("the joined loop went missing")?;
            let lanes = lane_names(c.text, &top, l);
            write(c, l, &lanes, &r, Some(&online))
        })
        .ok_or_else(|| "the joined text does not parse".to_string())
        .and_then(|t| t)
        .and_then(|joined| split_each(cx, joined, &rest, &r))
        .and_then(|t| match values.is_empty() {
            true => Ok(t),
            false => set_spec_statements(&t, cx.kernel, &values, &[]).map_err(|e| e.to_string()),
        });
        match joined {
            Ok(text) => drafts.push(Draft { label, text }),
            Err(e) => dropped.push(format!("{label}: {e}")),
        }
    }
}

/// One tile an online candidate takes: its steps, how the label says it, and the spec
/// statements it sets (`name = value`).
type OnlineTile = (Steps, String, Vec<(String, String)>);

/// The tiles the online candidates take: each R in `rows`, then the budgeted tile of the joined loop `l`
/// where the launch is a 1-D grid `cdiv(n, BLOCK)`. Measured on an H100, a column
/// softmax of 4096 x 4096 f32 joined online: 32 steps of 64 lanes ran at 0.43x
/// torch.compile (64 programs, 2048 loads a step), the budgeted 256 steps of 32 lanes on
/// 8 warps at 1.13x.
fn online_tiles(
    cx: &RewriteContext<'_>,
    plan: &crate::spec::BenchPlan,
    l: &Loop<'_>,
    rows: &[u64],
) -> Vec<OnlineTile> {
    let mut out: Vec<_> = rows
        .iter()
        .map(|r| (Steps::Fixed(*r), format!("{r} steps at a time"), Vec::new()))
        .collect();
    if let Some(lane) = lane_tile(cx, plan, l) {
        let t = tile_plan(&lane, l.range_args.is_some());
        let steps = fresh(
            &format!("{}_STEPS", l.var.to_uppercase()),
            &mut code_names(cx),
        );
        let mut values = vec![(steps.clone(), t.steps.to_string())];
        if t.block != lane.block {
            values.push((lane.name.clone(), t.block.to_string()));
        }
        values.push(("num_warps".to_string(), t.num_warps.to_string()));
        let how = format!(
            "{} steps at a time, {} = {}, {} warps",
            t.steps, lane.name, t.block, t.num_warps
        );
        out.push((
            Steps::Knob {
                steps,
                stages: None,
            },
            how,
            values,
        ));
    }
    out
}

/// `text` (the kernel's file, or one a rewrite made of it) with every loop at an index in
/// `which` (of the body's loops, in order) split `r` steps at a time: one loop after
/// another, each on the text the one before wrote (a split adds statements, never loops,
/// so the indices stay).
fn split_each(
    cx: &RewriteContext<'_>,
    mut text: String,
    which: &[usize],
    r: &Steps,
) -> Result<String, String> {
    for &i in which {
        text = super::with_text(cx.lang, &text, &cx.kernel.name, cx.params, |c| {
            let (top, found) = body_loops(c).map_err(|e| e.to_string())?;
            let l = found.get(i).ok_or("a loop went missing")?;
            let lanes = check(c, &top, l)?;
            write(c, l, &lanes, r, None)
        })
        .ok_or("the split text does not parse")??;
    }
    Ok(text)
}

/// A grid under this many programs leaves most multiprocessors of a large GPU idle (an
/// H100 has 132): the budgeted tile narrows its lanes until this many programs run.
const MIN_PROGRAMS: u64 = 128;
/// The narrowest tile of lanes the split makes (8 f32 lanes: one 32-byte sector a row).
const MIN_BLOCK: u64 = 8;
/// Elements one program loads per iteration of the budgeted tile (32 KiB of f32), and
/// the elements each thread holds of it. Measured on an H200 (docs/benchmarks.md, issue
/// #29): a column mean's [1024, 8] tile on 8 warps, 3 stages, reached 51% of copy where
/// [512, 8] on 16 warps, unpipelined, reached 45%; taller tiles or more warps gave no more.
/// A loop Triton does not pipeline (the while form) needs more warps for the same
/// loads in flight: the [1024, 8] tile unpipelined ran at 24% of copy on 8 warps, 50% on
/// 32.
const TILE_ELEMS: u64 = 8192;
const ELEMS_PER_THREAD: u64 = 32;
const ELEMS_PER_THREAD_UNPIPELINED: u64 = 8;
/// Where the lanes are strided and the loop walks the contiguous axis, the steps a lane
/// walks per iteration: 4 KiB of f32 in one run of addresses.
const CONTIGUOUS_STEPS: u64 = 1024;
/// The most steps one tile takes, and the pipelining depth the split loop starts with
/// (Triton pipelines a loop's plain loads only when its `tl.range` names `num_stages`).
const MAX_STEPS: u64 = 4096;
const STAGES: u64 = 3;

/// The lanes of the kernel's tile as the launch sets them: the constexpr the 1-D grid
/// `cdiv(n, BLOCK)` divides by (a power of two the spec sets and does not tune), its
/// value, the programs case 0 launches, and whether every global load in the kernel
/// that moves with the lanes is strided along them (the loop then walks the contiguous
/// axis, as a matrix-vector product over columns does).
/// `trip` is the loop's trip count in case 0, where its bounds are literals or scalar
/// arguments.
pub(super) struct LaneTile {
    pub name: String,
    pub block: u64,
    pub programs: u64,
    pub strided: bool,
    pub trip: Option<u64>,
}

pub(super) fn lane_tile(
    cx: &RewriteContext<'_>,
    plan: &crate::spec::BenchPlan,
    l: &Loop<'_>,
) -> Option<LaneTile> {
    let case = plan.cases.first()?;
    let trip = super::check::case_int(case, &l.stop)
        .zip(super::check::case_int(case, &l.start))
        .and_then(|(b, a)| u64::try_from(b - a).ok());
    let crate::spec::Launch::Triton { grid, .. } = &case.launch else {
        return None;
    };
    let [programs] = grid.as_slice() else {
        return None;
    };
    let g = crate::optimize::edit::spec_assignment(cx.kernel, "grid")?.text;
    let inner = g.trim().strip_prefix("cdiv(")?.strip_suffix(')')?;
    let (_, name) = inner.split_once(',')?;
    let name = name.trim();
    if plan.tunables.iter().any(|t| t.name == name) {
        return None;
    }
    let block: u64 = crate::optimize::edit::spec_assignment(cx.kernel, name)?
        .text
        .parse()
        .ok()?;
    let facts = static_facts(Lang::Triton, cx.text, cx.tree, cx.model, cx.kernel);
    let loads: Vec<_> = facts
        .accesses
        .iter()
        .filter(|a| a.kind == AccessKind::Load && a.stride != Stride::Uniform)
        .collect();
    let strided = !loads.is_empty()
        && loads
            .iter()
            .all(|a| matches!(a.stride, Stride::Strided(_) | Stride::Symbolic));
    block.is_power_of_two().then(|| LaneTile {
        name: name.to_string(),
        block,
        programs: *programs,
        strided,
        trip,
    })
}

/// The budgeted tile of one split step: lanes, steps per iteration, warps.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct TilePlan {
    pub block: u64,
    pub steps: u64,
    pub num_warps: u64,
}

impl TilePlan {
    /// The programs case 0 launches with this tile's lanes.
    pub(super) fn programs(&self, lane: &LaneTile) -> u64 {
        lane.programs.saturating_mul(lane.block / self.block.max(1))
    }
}

/// The tile that keeps [`TILE_ELEMS`] loads in flight per program per iteration, at
/// [`ELEMS_PER_THREAD`] a thread where the loop is pipelined (else
/// [`ELEMS_PER_THREAD_UNPIPELINED`], up to 32 warps). Strided lanes (the loop walks the contiguous axis)
/// narrow to the lanes that let each walk [`CONTIGUOUS_STEPS`]; contiguous lanes narrow
/// (by halves, to [`MIN_BLOCK`]) only while case 0 launches under [`MIN_PROGRAMS`]
/// programs, so the split fills the GPU. The steps fill the rest of the tile, up to the
/// loop's trip count (rounded up to a power of two).
pub(super) fn tile_plan(lanes: &LaneTile, pipelined: bool) -> TilePlan {
    let mut block = lanes.block;
    let mut programs = lanes.programs;
    let wide = |b: u64, p: u64| {
        if lanes.strided {
            b * CONTIGUOUS_STEPS > TILE_ELEMS
        } else {
            p < MIN_PROGRAMS
        }
    };
    while block > MIN_BLOCK && wide(block, programs) {
        block /= 2;
        programs = programs.saturating_mul(2);
    }
    let whole = lanes
        .trip
        .map_or(MAX_STEPS, |t| t.max(2).next_power_of_two());
    let steps = (TILE_ELEMS / block).clamp(2, MAX_STEPS).min(whole);
    let (per_thread, most) = if pipelined {
        (ELEMS_PER_THREAD, 16)
    } else {
        (ELEMS_PER_THREAD_UNPIPELINED, 32)
    };
    let num_warps = (steps * block / (32 * per_thread))
        .clamp(1, most)
        .next_power_of_two();
    TilePlan {
        block,
        steps,
        num_warps,
    }
}

/// The candidate with the budgeted tile: the steps per iteration and the loop's
/// pipelining depth become constexpr parameters the spec sets (knobs the search's
/// retuning sweeps: `triton_block` the steps, `tunable_sweep` the stages), the lanes
/// narrowed and the warps set as [`tile_plan`] says. A `while` loop, or a `tl.range`
/// that names its own `num_stages`, gets no stages knob.
fn budgeted(
    cx: &RewriteContext<'_>,
    l: &Loop<'_>,
    lanes: &BTreeSet<String>,
    lane: &LaneTile,
) -> Result<Draft, String> {
    let t = tile_plan(lane, l.range_args.is_some());
    let mut names = code_names(cx);
    let steps = fresh(&format!("{}_STEPS", l.var.to_uppercase()), &mut names);
    let stages = stages_free(cx.text, l)
        .then(|| fresh(&format!("{}_STAGES", l.var.to_uppercase()), &mut names));
    let text = write(
        cx,
        l,
        lanes,
        &Steps::Knob {
            steps: steps.clone(),
            stages: stages.clone(),
        },
        None,
    )?;
    let (values, extra) = budget_statements(&t, lane, &steps, stages.as_deref());
    let text = set_spec_statements(&text, cx.kernel, &values, &extra).map_err(|e| e.to_string())?;
    let line = l.node.start_position().row + 1;
    let label = format!(
        "the loop at line {line} takes {} steps at a time, {} = {}, {} warps (2-D tile, {} programs)",
        t.steps,
        lane.name,
        t.block,
        t.num_warps,
        t.programs(lane)
    );
    Ok(Draft { label, text })
}

/// The spec statements that set budgeted tile `t` of `lane`: its steps under the name
/// `steps`, the pipelining knob `stages` (3, tuned over [`STAGE_CHOICES`]), the lanes
/// where they narrow, the warps; as values to set and statements to add.
pub(super) fn budget_statements(
    t: &TilePlan,
    lane: &LaneTile,
    steps: &str,
    stages: Option<&str>,
) -> (Vec<(String, String)>, Vec<String>) {
    let mut values = vec![(steps.to_string(), t.steps.to_string())];
    let mut extra = Vec::new();
    if let Some(s) = stages {
        values.push((s.to_string(), STAGES.to_string()));
        extra.push(format!("tune {s} in {STAGE_CHOICES}"));
    }
    if t.block != lane.block {
        values.push((lane.name.clone(), t.block.to_string()));
    }
    values.push(("num_warps".into(), t.num_warps.to_string()));
    (values, extra)
}

/// The lane-shaped names defined before `l`, or why `l` cannot be split.
fn check(
    cx: &RewriteContext<'_>,
    top: &[Node<'_>],
    l: &Loop<'_>,
) -> Result<BTreeSet<String>, String> {
    let src = cx.text;
    if l.step != "1" {
        return Err(format!("it steps by `{}`, not 1", l.step));
    }
    if l.nested || l.reductions > 0 {
        return Err("it branches, nests a loop or reduces over the lanes inside".into());
    }
    match (l.stores, l.carries.is_empty()) {
        (0, true) => return Err("it carries no accumulator and stores nothing".into()),
        (_, true) => stores_apart(src, l)?,
        (0, false) => {}
        (_, false) => return Err("it stores and carries an accumulator".into()),
    }
    for c in &l.carries {
        if !c.lane || c.read_in_loop || c.combine == Combine::Other {
            return Err(format!(
                "`{}` is not a lane-shaped sum, maximum or minimum read only by its updates",
                c.name
            ));
        }
    }
    let body: String = l
        .stmts
        .iter()
        .map(|s| text(src, *s))
        .collect::<Vec<_>>()
        .join("\n");
    if let Some(s) = SHAPED.iter().find(|s| body.contains(*s)) {
        return Err(format!(
            "its body uses `{s}`: the tile is already shaped there"
        ));
    }
    let mut bound = BTreeSet::new();
    for e in [&l.start, &l.stop] {
        bound.extend(
            e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map(str::to_string),
        );
    }
    if bound.iter().any(|b| l.assigned.contains(b)) {
        return Err("the loop changes its own bounds".into());
    }
    if let Some(n) = local_read_after(src, l) {
        return Err(format!("`{n}` is set in the loop and read after it"));
    }
    let lanes = lane_names(src, top, l);
    for c in &l.carries {
        if !lanes.contains(&c.name) {
            return Err(format!("`{}` is not a tile of lanes", c.name));
        }
        if c.combine != Combine::Sum
            && !init_of(src, top, l, &c.name).is_some_and(|t| t.contains("inf"))
        {
            return Err(format!(
                "`{}` is a maximum or minimum not started from an infinity",
                c.name
            ));
        }
    }
    Ok(lanes)
}

/// A loop that stores and carries nothing may take several steps at once when no step
/// reads what another stores: no buffer it loads from is one it stores to (the base
/// pointer of each address, its first name).
fn stores_apart(src: &str, l: &Loop<'_>) -> Result<(), String> {
    let mut loaded = BTreeSet::new();
    let mut stored = BTreeSet::new();
    for s in &l.stmts {
        walk(*s, &mut |call| {
            if call.kind() != "call" {
                return true;
            }
            let set = match callee(src, call).as_str() {
                "tl.load" => &mut loaded,
                "tl.store" => &mut stored,
                _ => return true,
            };
            let first = call
                .child_by_field_name("arguments")
                .and_then(|a| code_children(a).into_iter().next());
            set.insert(first.and_then(|a| first_name(src, a)).unwrap_or_default());
            true
        });
    }
    match loaded.intersection(&stored).next() {
        Some(b) => Err(format!(
            "it loads from `{b}`, which it stores to: a step could read what another writes"
        )),
        None if stored.contains("") => Err("a store's address starts with no name".into()),
        None => Ok(()),
    }
}

/// The first identifier of an expression, left to right (`x` of `x + r * N + cols`).
fn first_name(src: &str, n: Node<'_>) -> Option<String> {
    if n.kind() == "identifier" {
        return Some(text(src, n).to_string());
    }
    code_children(n)
        .into_iter()
        .find_map(|c| first_name(src, c))
}

/// Names assigned before `l` whose value has one element per lane: built from
/// `tl.arange`, `tl.zeros`/`tl.full` of a shape, or other such names, and not reduced.
fn lane_names(src: &str, top: &[Node<'_>], l: &Loop<'_>) -> BTreeSet<String> {
    let mut lanes = BTreeSet::new();
    for s in top.iter().take_while(|s| s.id() != l.node.id()) {
        let Some((name, _, right)) = assignment(src, *s) else {
            continue;
        };
        let t = text(src, right);
        let mut r = BTreeSet::new();
        reads(src, right, &mut r);
        let shaped = ["tl.arange", "tl.zeros", "tl.full"]
            .iter()
            .any(|f| t.contains(f))
            || r.iter().any(|n| lanes.contains(n));
        if shaped && !reduces(src, right) {
            lanes.insert(name);
        } else {
            lanes.remove(&name);
        }
    }
    lanes
}

/// The right side of the last top-level assignment to `name` before `l`.
fn init_of<'s>(src: &'s str, top: &[Node<'_>], l: &Loop<'_>, name: &str) -> Option<&'s str> {
    top.iter()
        .take_while(|s| s.id() != l.node.id())
        .filter_map(|s| assignment(src, *s))
        .filter(|(n, _, _)| n == name)
        .last()
        .map(|(_, _, r)| text(src, r))
}

/// Text of body nodes with the loop variable a column of steps and lanes a row.
struct Tile<'a> {
    src: &'a str,
    var: &'a str,
    steps: &'a str,
    mask: &'a str,
    lanes: &'a BTreeSet<String>,
    /// Names the body assigns: its own values, already 2-D.
    locals: &'a BTreeSet<String>,
}

impl Tile<'_> {
    fn emit(&self, n: Node<'_>) -> String {
        let src = self.src;
        match n.kind() {
            "identifier" => {
                let mut one = BTreeSet::new();
                reads(src, n, &mut one);
                let name = text(src, n);
                if one.is_empty() {
                    name.to_string()
                } else if name == self.var {
                    format!("{}[:, None]", self.steps)
                } else if self.lanes.contains(name) && !self.locals.contains(name) {
                    format!("{name}[None, :]")
                } else {
                    name.to_string()
                }
            }
            "call" if callee(src, n) == "tl.load" => self.masked(n, 2),
            "call" if callee(src, n) == "tl.store" => self.masked(n, 3),
            _ => {
                let base = n.start_byte();
                let reps: Vec<_> = code_children(n)
                    .into_iter()
                    .map(|c| (c.start_byte() - base..c.end_byte() - base, self.emit(c)))
                    .collect();
                splice(text(src, n), reps)
            }
        }
    }

    /// A load or store (whose mask is positional argument `mask_at`) with the rows past
    /// the bound masked off.
    fn masked(&self, call: Node<'_>, mask_at: usize) -> String {
        let src = self.src;
        let f = call
            .child_by_field_name("function")
            .map_or("tl.load", |f| text(src, f));
        let Some(args) = call.child_by_field_name("arguments") else {
            return text(src, call).to_string();
        };
        let list = code_children(args);
        let mut out = Vec::new();
        let mut masked = false;
        let mut positional = 0;
        for a in list {
            if a.kind() == "keyword_argument" {
                let name = a.child_by_field_name("name").map_or("", |n| text(src, n));
                let value = a
                    .child_by_field_name("value")
                    .map_or(String::new(), |v| self.emit(v));
                if name == "mask" {
                    masked = true;
                    out.push(format!("mask=({value}) & {}", self.mask));
                } else {
                    out.push(format!("{name}={value}"));
                }
                continue;
            }
            positional += 1;
            let v = self.emit(a);
            if positional == mask_at {
                masked = true;
                out.push(format!("({v}) & {}", self.mask));
            } else {
                out.push(v);
            }
        }
        if !masked {
            out.push(format!("mask={}", self.mask));
        }
        format!("{f}({})", out.join(", "))
    }
}

/// How many steps one iteration of the split loop takes: a literal, or constexpr
/// parameters the rewrite adds (the steps, and for a `for` loop its pipelining depth).
enum Steps {
    Fixed(u64),
    Knob {
        steps: String,
        stages: Option<String>,
    },
}

impl Steps {
    fn text(&self) -> String {
        match self {
            Steps::Fixed(r) => r.to_string(),
            Steps::Knob { steps, .. } => steps.clone(),
        }
    }

    /// The constexpr parameters the kernel's signature gains.
    fn params(&self) -> Vec<&str> {
        match self {
            Steps::Fixed(_) => Vec::new(),
            Steps::Knob { steps, stages } => std::iter::once(steps.as_str())
                .chain(stages.as_deref())
                .collect(),
        }
    }
}

/// The file with `l` split `r` steps at a time.
fn write(
    cx: &RewriteContext<'_>,
    l: &Loop<'_>,
    lanes: &BTreeSet<String>,
    r: &Steps,
    online: Option<&Online>,
) -> Result<String, String> {
    let src = cx.text;
    let nl = newline(src);
    let mut names = code_names(cx);
    // `ks` for `k`; `i_steps` for `i` (`is` is a keyword).
    let plural = format!("{}s", l.var);
    let steps = if PY_KEYWORDS.contains(&plural.as_str()) {
        fresh(&format!("{}_steps", l.var), &mut names)
    } else {
        fresh(&plural, &mut names)
    };
    let mask = fresh(&format!("{}_ok", l.var), &mut names);
    let body_locals: BTreeSet<String> = l
        .stmts
        .iter()
        .filter_map(|s| assignment(src, *s).map(|a| a.0))
        .filter(|n| l.carry(n).is_none())
        .collect();
    let tile = Tile {
        src,
        var: &l.var,
        steps: &steps,
        mask: &mask,
        lanes,
        locals: &body_locals,
    };
    let knobs = r;
    let r = knobs.text();
    let first = *l.stmts.first().ok_or("the loop is empty")?;
    let ind = line_indent(src, first.start_byte()).to_string();
    let outer = line_indent(src, l.node.start_byte()).to_string();
    let mut e = Edits::new();
    e.extend([Edit::insert(
        first.start_byte(),
        format!(
            "{steps} = {} + tl.arange(0, {r}){nl}{ind}{mask} = {steps}[:, None] < {}{nl}{ind}",
            l.var, l.stop
        ),
    )]);
    let mut before = Vec::new();
    let mut after = Vec::new();
    let mut parts = BTreeMap::new();
    for c in l
        .carries
        .iter()
        .filter(|c| !online.is_some_and(|o| o.joins(&c.name)))
    {
        let p = fresh(&format!("{}_part", c.name), &mut names);
        let (init, combine) = partials(&c.name, &p, c.combine, &r)?;
        before.push(format!("{p} = {init}"));
        after.push(combine);
        parts.insert(c.name.clone(), (p, c.combine));
    }
    let mut rescaled = BTreeSet::new();
    for s in l.stmts.iter().filter(|s| s.kind() != "comment") {
        if let Some(o) = online {
            if let Some(new) = o.step(&tile, l, *s, &mut rescaled) {
                e.extend([Edit::replace(s.byte_range(), new?)]);
                continue;
            }
        }
        let new = match assignment(src, *s) {
            Some((n, op, _)) if parts.contains_key(&n) => {
                let c = l.carry(&n).expect("a carry");
                let upd = *c.updates.first().ok_or("an update")?;
                if c.updates.len() != 1 || (op != "+=" && op != "=") {
                    return Err(format!("`{n}` is updated more than once"));
                }
                let (p, combine) = &parts[&n];
                accumulate(p, *combine, &mask, &tile.emit(upd))
            }
            _ => tile.emit(*s),
        };
        e.extend([Edit::replace(s.byte_range(), new)]);
    }
    let stages = match knobs {
        Steps::Knob { stages, .. } => stages.as_deref(),
        Steps::Fixed(_) => None,
    };
    e.extend(loop_header(src, l, &r, stages)?);
    e.extend(add_constexprs(cx, &knobs.params())?);
    let head: String = before.iter().map(|b| format!("{b}{nl}{outer}")).collect();
    let tail: String = after.iter().map(|a| format!("{outer}{a}{nl}")).collect();
    e.extend(around_loop(src, l.node, head, tail));
    e.apply(src).map_err(|err| err.to_string())
}

/// The `(r, lanes)` tile of partials for accumulator `acc` (its identity in every row)
/// and the statement that folds it into `acc` after the loop.
fn partials(acc: &str, p: &str, combine: Combine, r: &str) -> Result<(String, String), String> {
    let lanes = format!("tl.zeros_like({acc})[None, :]");
    Ok(match combine {
        Combine::Sum => (
            format!("tl.zeros(({r}, 1), dtype={acc}.dtype) + {lanes}"),
            format!("{acc} += tl.sum({p}, axis=0)"),
        ),
        Combine::Max => (
            format!("tl.full(({r}, 1), float(\"-inf\"), dtype={acc}.dtype) + {lanes}"),
            format!("{acc} = tl.maximum({acc}, tl.max({p}, axis=0))"),
        ),
        Combine::Min => (
            format!("tl.full(({r}, 1), float(\"inf\"), dtype={acc}.dtype) + {lanes}"),
            format!("{acc} = tl.minimum({acc}, tl.min({p}, axis=0))"),
        ),
        Combine::Other => return Err(format!("`{acc}` is not a sum, maximum or minimum")),
    })
}

/// One update of the partials `p` with the tile value `v`; rows past the end add the
/// identity.
fn accumulate(p: &str, combine: Combine, mask: &str, v: &str) -> String {
    match combine {
        Combine::Sum => format!("{p} += tl.where({mask}, {v}, 0)"),
        Combine::Max => format!("{p} = tl.maximum({p}, tl.where({mask}, {v}, float(\"-inf\")))"),
        _ => format!("{p} = tl.minimum({p}, tl.where({mask}, {v}, float(\"inf\")))"),
    }
}

impl Online {
    /// A maximum or a rescaled sum of the joined pair: updated once a step, not split.
    fn joins(&self, name: &str) -> bool {
        self.prevs.contains_key(name) || self.sums.iter().any(|(s, _, _)| s == name)
    }

    /// The tiled form of `s`, a statement of the joined loop `l`, when it is one of the
    /// online pair's: the saved maximum as it is; the maximum grown by the tile's maximum
    /// over its steps (rows past the bound add -inf); a sum's first assignment (the
    /// rescale) with a column still all -inf kept (`-inf - -inf` is NaN); its update the
    /// tile's terms summed over the steps (rows past the bound add 0). None for others.
    fn step(
        &self,
        tile: &Tile<'_>,
        l: &Loop<'_>,
        s: Node<'_>,
        rescaled: &mut BTreeSet<String>,
    ) -> Option<Result<String, String>> {
        let src = tile.src;
        let (n, op, right) = assignment(src, s)?;
        let mask = tile.mask;
        if self.prevs.values().any(|p| *p == n) {
            return Some(Ok(text(src, s).to_string()));
        }
        if self.prevs.contains_key(&n) {
            let e = l.carry(&n).and_then(|c| c.updates.first().copied());
            return Some(e.ok_or(format!("`{n}` has no update")).map(|e| {
                let v = tile.emit(e);
                format!(
                    "{n} = tl.maximum({n}, tl.max(tl.where({mask}, {v}, float(\"-inf\")), axis=0))"
                )
            }));
        }
        let (_, m, f) = self.sums.iter().find(|(sum, _, _)| *sum == n)?;
        if rescaled.insert(n.clone()) {
            let p = &self.prevs[m];
            let f = f.replace("{prev}", p);
            return Some(Ok(format!("{n} = {n} * tl.where({p} == {m}, 1.0, {f})")));
        }
        let term = match op.as_str() {
            "+=" => Some(right),
            "=" if right.kind() == "binary_operator"
                && right.child_by_field_name("operator").map(|o| text(src, o)) == Some("+")
                && right.child_by_field_name("left").map(|o| text(src, o)) == Some(n.as_str()) =>
            {
                right.child_by_field_name("right")
            }
            _ => None,
        };
        Some(
            term.ok_or(format!("`{n}` is updated other than by adding a term"))
                .map(|t| {
                    format!(
                        "{n} += tl.sum(tl.where({mask}, {}, 0), axis=0)",
                        tile.emit(t)
                    )
                }),
        )
    }
}

#[cfg(test)]
mod tests;
