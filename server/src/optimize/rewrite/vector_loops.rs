//! `vector_loops`: the loops authors write to stride through data with all their lanes
//! (`for (int j = threadIdx.x; j < cols; j += blockDim.x)` in a block per row, a
//! grid-stride loop over a fixed grid, `for (k = lane; k < K; k += 32)` in a warp per row)
//! read 4 bytes per lane per load; here each lane reads 16 (or 8) bytes per access: the
//! lane takes W consecutive elements per vector, `U + W * (L + k * S) + j` for j < W.
//!
//! **Matches** each `for (T v = U + L; v < B; v += S)` of the kernel whose lanes L are
//! exactly those the step S counts (decided from the start's and the step's
//! polynomials, the kernel's single-definition locals expanded: `threadIdx.x` with
//! `blockDim.x` or the block's width as a literal, `blockIdx.x * blockDim.x +
//! threadIdx.x` with `blockDim.x * gridDim.x` in any order or cast, a warp lane
//! `threadIdx.x % 32` / `& 31` with 32 or `warpSize` on blocks of whole warps, a team of
//! blocks `(blockIdx.x % K) * blockDim.x + threadIdx.x` with `K * blockDim.x` on grids of
//! whole teams, or `blockIdx.y * blockDim.x + threadIdx.x` with `gridDim.y * blockDim.x`:
//! see `lanes` for why the team must hold every lane of the step), so that
//! the threads sharing U take every element of `[U, B)` once between them; U, B and
//! every condition the loop runs under the same in every lane. Every global access
//! `p[E + v]` (E unchanged by the loop, through a row pointer too) reached
//! unconditionally in the body is one group `(p, E)`; other reads stay as written, at
//! the copy's own `v`.
//!
//! **Writes** `{ base = U; vecs = (B - U) / W; if (<every group's base address aligned
//! to W elements>) { for (c = L; c < vecs; c += S) { one W-wide load per group read
//! (`float4`, `float2`, `double2`, `int4`, `__half2`, 8 halves as a `uint4`...); W
//! copies of the body in element order, each in its own braces with its own `v`; one
//! W-wide store per group written } rest = base + W * vecs; } for (T v = rest + L; v < B;
//! v += S) <the body as written> }`: the tail (sizes W does not divide) and a misaligned
//! row (cols = 77) run the author's loop with the author's lanes and step. Param
//! `widths` (elements); by default one candidate with 16-byte and one with 8-byte
//! accesses, W chosen per loop by its widest element. No launch change. The loop over
//! vectors steps by a run-time value, so `interleave` can run several of them per trip.
//!
//! A lane now folds other elements than before: a loop with accumulators (sums,
//! counts, products, maxima, minima) changes the order of a float sum (verification's
//! tolerance decides), and is taken only where the partials are combined across the
//! lanes before anything they feed is stored (`flow`: shared memory or a block-level
//! helper after the loop, warp shuffles for a warp's lanes, atomics for the grid's or a
//! team's; a team's cluster shared memory read through `asm` is not followed, verification
//! backs it).
//!
//! **Refuses**, with the reason per loop: a body with `break`, `continue`, `return` or
//! `goto`, a barrier or warp collective, atomics, an inner loop, a write of the loop
//! variable, the bound or the step; a written buffer reached at another element than its
//! own (`y[j - 1]`, `y[row]`) or at two offsets; a step that is not all the lanes
//! (`blockDim.x / 2`) or a start whose lane part is not exactly them (`2 * threadIdx.x`);
//! a team on a grid that is not a multiple of K, whose block part depends on the thread
//! or is not a provable number of blocks, or whose step counts other blocks;
//! a bound, start, condition or body value that differs from lane to lane (`tid`); a
//! running value read mid-loop (a prefix, an argmax's index); a partial stored before
//! the lanes combine it (`out[threadIdx.x] = best`); a shared-memory write read again
//! before a barrier (or any over the grid's lanes), a local array written; a pointee of
//! unknown size; a body that already uses vector types, and the tail loop this rewrite
//! writes.

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::check::{current_plan, R};
use super::interleave::{is_loop, loop_shape, shared_arrays};
use super::params::Params;
use super::poly::{poly, single_definitions};
use super::tree::{code_names, fresh, text};
use super::unit::{descendants, finish, na, Unit};
use super::unroll::loop_header;
use super::vectorize::{element_bytes, Lanes};
use super::RewriteContext;
use crate::optimize::facts::carried;
use crate::spec::BenchPlan;

mod body;
mod emit;
mod flow;
mod lanes;
#[cfg(test)]
mod tests;

use body::Group;
use flow::{Flow, Taint};
use lanes::{Positions, Start};

const ID: &str = "vector_loops";

/// Accumulators whose partials any split of the elements combines to the same total.
const FOLDS: &[&str] = &["sum", "count", "product", "max", "min"];

/// A loop this rewrite vectorizes.
pub(super) struct VecLoop<'t> {
    node: Node<'t>,
    var: String,
    ty: String,
    start: Start<'t>,
    bound: String,
    step: String,
    body: Node<'t>,
    groups: Vec<Group<'t>>,
    /// Fresh names: the uniform start, the count of whole vectors, where the rest
    /// starts, the vector index.
    names: [String; 4],
}

impl VecLoop<'_> {
    /// The comment on the rewritten loop.
    fn comment(&self, w: usize, lanes: &[Lanes]) -> String {
        format!(
            "`{}` over {}: {w} elements a lane per access ({}) where aligned, then the rest",
            self.var,
            self.start.form.shown(),
            shown(lanes, w)
        )
    }

    /// The widest element any group of the loop reads or writes, in bytes.
    fn widest(&self) -> usize {
        self.groups
            .iter()
            .filter_map(|g| element_bytes(&g.pointee))
            .max()
            .unwrap_or(4)
    }
}

/// The distinct vector forms of `lanes`, for labels.
fn shown(lanes: &[Lanes], w: usize) -> String {
    let mut out: Vec<String> = Vec::new();
    for l in lanes {
        let s = l.shown(w);
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out.join(", ")
}

/// What a loop needs from the kernel around it.
struct Around<'s, 't> {
    plan: BenchPlan,
    func_body: Node<'t>,
    shared: Vec<&'s str>,
    positions: Positions<'t>,
    flow: Flow<'s, 't>,
}

pub fn vector_loops(cx: &RewriteContext<'_>) -> R {
    let unit = Unit::of(cx, ID)?;
    let plan = current_plan(cx)?;
    let src = cx.text;
    let func_body = unit
        .kernel
        .child_by_field_name("body")
        .ok_or_else(|| na(format!("`{}` has no body", cx.kernel.name)))?;
    let shared = shared_arrays(cx, unit.kernel);
    let (block_helpers, warp_helpers) = flow::helpers(src, &unit.funcs[1..]);
    let (defs, varying) = single_definitions(src, &[func_body], &|_| true);
    let positions = Positions { defs, varying };
    let constants = positions
        .defs
        .iter()
        .filter_map(|(n, d)| Some((n.clone(), poly(src, *d, &positions).as_constant()?)))
        .collect();
    let around = Around {
        plan,
        func_body,
        shared: shared.clone(),
        positions,
        flow: Flow {
            src,
            form: lanes::Form::Block,
            body: func_body,
            shared,
            block_helpers,
            warp_helpers,
            constants,
        },
    };
    let mut names = code_names(cx);
    let (mut loops, mut reasons) = (Vec::new(), Vec::new());
    for l in descendants(func_body).into_iter().filter(|n| is_loop(*n)) {
        match plan_loop(cx, &around, l, &mut names) {
            Ok(v) => loops.push(v),
            Err(why) => reasons.push(format!("`{}`: {why}", loop_header(cx, l))),
        }
    }
    if loops.is_empty() {
        return Err(na(if reasons.is_empty() {
            format!("`{}` has no loop", cx.kernel.name)
        } else {
            format!(
                "no loop of `{}` strides through memory with all its lanes in a form `vector_loops` can vectorize: {}",
                cx.kernel.name,
                reasons.join("; ")
            )
        }));
    }
    candidates(cx, &loops, &names)
}

/// How wide a candidate's vectors are.
enum Width {
    /// W elements in every loop (param `widths`).
    Elements(usize),
    /// As many elements as fill this many bytes of a loop's widest element.
    Bytes(usize),
}

impl Width {
    fn of(&self, l: &VecLoop<'_>) -> usize {
        match self {
            Width::Elements(w) => *w,
            Width::Bytes(b) => b / l.widest(),
        }
    }

    fn shown(&self) -> String {
        match self {
            Width::Elements(w) => format!("VEC={w}"),
            Width::Bytes(b) => format!("{b}-byte accesses"),
        }
    }
}

/// One candidate per width (param `widths`), or by default one with 16-byte and one
/// with 8-byte accesses, each loop's width set by its widest element.
fn candidates(cx: &RewriteContext<'_>, loops: &[VecLoop<'_>], names: &BTreeSet<String>) -> R {
    let given = cx.params.contains_key("widths");
    let widths = Params(cx.params).uints("widths", &[], 2..=16)?;
    if let Some(w) = widths.iter().find(|w| !w.is_power_of_two()) {
        return Err(super::check::bad_param(
            "widths",
            format!("{w} is not a vector width; use 2, 4, 8 or 16"),
        ));
    }
    let choices: Vec<Width> = if given {
        widths
            .iter()
            .map(|w| Width::Elements(*w as usize))
            .collect()
    } else {
        vec![Width::Bytes(16), Width::Bytes(8)]
    };
    let mut out = Vec::new();
    let mut dropped = Vec::new();
    for width in choices {
        let what = width.shown();
        let mut names = names.clone();
        let (mut edits, mut types, mut vars) = (Vec::new(), Vec::new(), Vec::new());
        for l in loops {
            let w = width.of(l);
            if w < 2 {
                dropped.push(format!(
                    "{what}: `{}` has elements of {} bytes",
                    l.var,
                    l.widest()
                ));
                continue;
            }
            match emit::emit(cx, l, w, &mut names) {
                Ok(code) => {
                    edits.push(super::edits::Edit::replace(l.node.byte_range(), code));
                    let lanes: Vec<Lanes> = l
                        .groups
                        .iter()
                        .filter_map(|g| Lanes::of(&g.pointee, w))
                        .collect();
                    let s = shown(&lanes, w);
                    if !types.contains(&s) {
                        types.push(s);
                    }
                    let v = format!("`{}` over {}", l.var, l.start.form.shown());
                    if !vars.contains(&v) {
                        vars.push(v);
                    }
                }
                Err(e) => dropped.push(format!("{what}: {e}")),
            }
        }
        if edits.is_empty() {
            continue;
        }
        let n = edits.len();
        let label = format!(
            "{what} ({}) in {n} loop{} ({})",
            types.join(", "),
            if n == 1 { "" } else { "s" },
            vars.join(", ")
        );
        out.push(finish(cx, ID, label, edits)?);
    }
    if out.is_empty() {
        return Err(na(format!(
            "no width fits the loops of `{}`: {}",
            cx.kernel.name,
            dropped.join("; ")
        )));
    }
    Ok(out)
}

/// The loop `l` as this rewrite would vectorize it, or why not.
fn plan_loop<'t>(
    cx: &RewriteContext<'t>,
    around: &Around<'_, 't>,
    l: Node<'t>,
    names: &mut BTreeSet<String>,
) -> Result<VecLoop<'t>, String> {
    let src = cx.text;
    if l.kind() != "for_statement" {
        return Err("kernel-lsp vectorizes `for` loops".into());
    }
    let shape = loop_shape(cx, l, &around.shared)?;
    if shape.decl.is_none() {
        return Err(format!(
            "it does not declare `{}` (kernel-lsp vectorizes `for (T v = start; ...)`)",
            shape.var
        ));
    }
    if shape.op != "<" {
        return Err(format!("its condition is not `{} < bound`", shape.var));
    }
    let init = l
        .child_by_field_name("initializer")
        .and_then(|i| {
            super::tree::named_children(i)
                .into_iter()
                .find(|d| d.kind() == "init_declarator")
        })
        .and_then(|d| d.child_by_field_name("value"))
        .ok_or("its variable has no start value")?;
    let step = l
        .child_by_field_name("update")
        .filter(|u| u.kind() == "assignment_expression")
        .and_then(|u| u.child_by_field_name("right"))
        .ok_or_else(|| format!("its step is not `{} += step`", shape.var))?;
    let start = lanes::classify(src, &around.positions, &around.plan, init, step)?;
    tail_of_a_vector_loop(src, l)?;
    let mut trial = names.clone();
    let v = &shape.var;
    let fresh_names = [
        fresh(&format!("{v}_base"), &mut trial),
        fresh(&format!("{v}_vecs"), &mut trial),
        fresh(&format!("{v}_rest"), &mut trial),
        fresh(&format!("{v}_vec"), &mut trial),
    ];
    let cond = l
        .child_by_field_name("condition")
        .ok_or("its loop has no condition")?;
    let (groups, others) =
        body::groups(cx, around.func_body, (shape.body, cond), v, &fresh_names[0])?;
    for w in others {
        barrier_before_read(src, around, (l, start.form), w)?;
    }
    let flow = Flow {
        form: start.form,
        ..around.flow.clone()
    };
    same_in_every_lane(&flow, around.func_body, l, &start, shape.body, v)?;
    partials_combined(&flow, around.func_body, l)?;
    *names = trial;
    let bound = l
        .child_by_field_name("condition")
        .and_then(|c| c.child_by_field_name("right"))
        .map_or(shape.bound.clone(), |b| {
            super::elementwise::bound_text(src, b)
        });
    Ok(VecLoop {
        node: l,
        var: shape.var.clone(),
        ty: shape.ty.clone(),
        start,
        bound,
        step: text(src, step).to_string(),
        body: shape.body,
        groups,
        names: fresh_names,
    })
}

/// A write of shared memory in the loop lands in another lane's element now: the block
/// must meet a barrier before anything reads that array again, and the lanes must be
/// the block's or a warp's. Any other write that is not a global access (a local array)
/// is refused.
fn barrier_before_read(
    src: &str,
    around: &Around<'_, '_>,
    (l, form): (Node<'_>, lanes::Form),
    w: Node<'_>,
) -> Result<(), String> {
    let array = w
        .child_by_field_name("argument")
        .map_or("", |a| text(src, a));
    let what = text(src, w);
    if form.spans_blocks() && around.shared.contains(&array) {
        return Err(format!(
            "its body writes `{what}` in shared memory, but its lanes span blocks (another block would hold the element)"
        ));
    }
    if !around.shared.contains(&array) {
        return Err(format!(
            "its body writes `{what}`, which is not global or shared memory (another lane would hold the element)"
        ));
    }
    let next = descendants(around.func_body)
        .into_iter()
        .filter(|n| n.start_byte() >= l.end_byte())
        .find(|n| match n.kind() {
            "identifier" => text(src, *n) == array,
            "call_expression" => n
                .child_by_field_name("function")
                .is_some_and(|f| text(src, f).ends_with("sync") || text(src, f) == "__syncthreads"),
            _ => false,
        });
    match next {
        Some(n) if n.kind() == "call_expression" => Ok(()),
        _ => Err(format!(
            "its body writes `{what}` and `{array}` is read after the loop before a barrier (another lane would hold the element)"
        )),
    }
}

/// The loop this rewrite leaves after its vectors (its start reads where they stopped)
/// is not vectorized again.
fn tail_of_a_vector_loop(src: &str, l: Node<'_>) -> Result<(), String> {
    let mut prev = l.prev_named_sibling();
    while let Some(p) = prev.filter(|p| p.kind() == "comment") {
        prev = p.prev_named_sibling();
    }
    match prev {
        Some(p) if p.kind() == "if_statement" && text(src, p).contains("reinterpret_cast<") => Err(
            "it finishes the vector loop before it (the elements past its last whole vector)"
                .into(),
        ),
        _ => Ok(()),
    }
}

/// The lanes must see the same bound, uniform start and conditions, and the body must
/// read nothing that differs from lane to lane but its own elements.
fn same_in_every_lane(
    flow: &Flow<'_, '_>,
    func_body: Node<'_>,
    l: Node<'_>,
    start: &Start<'_>,
    body: Node<'_>,
    var: &str,
) -> Result<(), String> {
    let src = flow.src;
    let t = flow.run(
        Taint::positions(),
        func_body.start_byte()..l.start_byte(),
        &mut |_, _| {},
    );
    let differs = |n: Node<'_>, what: &str| {
        if flow.tainted(&t, n) {
            Err(format!(
                "{what} `{}` differs from lane to lane (the lanes would not split one range)",
                text(src, n)
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            ))
        } else {
            Ok(())
        }
    };
    if let Some(b) = l
        .child_by_field_name("condition")
        .and_then(|c| c.child_by_field_name("right"))
    {
        differs(b, "its bound")?;
    }
    for u in &start.uniform_nodes {
        differs(*u, "the uniform part of its start")?;
    }
    let mut up = l.parent();
    while let Some(p) = up.filter(|p| p.id() != func_body.id()) {
        if let Some(c) = p.child_by_field_name("condition") {
            differs(c, "it runs under the condition")?;
        }
        up = p.parent();
    }
    for r in descendants(func_body) {
        if r.kind() != "return_statement" || r.end_byte() > l.start_byte() {
            continue;
        }
        let mut up = r.parent();
        while let Some(p) = up.filter(|p| p.id() != func_body.id()) {
            if p.kind() == "if_statement" {
                if let Some(c) = p.child_by_field_name("condition") {
                    differs(c, "a `return` before it depends on the condition")?;
                }
            }
            up = p.parent();
        }
    }
    let (defs, varying) = single_definitions(src, &[body], &|_| true);
    let own: BTreeSet<&str> = defs
        .keys()
        .chain(varying.iter())
        .map(String::as_str)
        .chain([var])
        .collect();
    let mut bad = None;
    super::tree::walk(body, &mut |n| {
        if bad.is_some() {
            return false;
        }
        let read = match n.kind() {
            "identifier" => !own.contains(text(src, n)),
            "field_expression" => true,
            _ => return true,
        };
        if read && flow.tainted(&t, n) {
            bad = Some(text(src, n).to_string());
        }
        n.kind() != "field_expression"
    });
    match bad {
        Some(b) => Err(format!(
            "its body reads `{b}`, which differs from lane to lane (a lane would compute other elements with it)"
        )),
        None => Ok(()),
    }
}

/// The loop's accumulators must be sums, counts, products, maxima or minima, and what a
/// thread folded must be combined across the lanes before anything it feeds is stored.
fn partials_combined(flow: &Flow<'_, '_>, func_body: Node<'_>, l: Node<'_>) -> Result<(), String> {
    let src = flow.src;
    let carries = carried(src, l);
    if let Some(c) = carries.iter().find(|c| !FOLDS.contains(&c.kind.as_str())) {
        return Err(format!(
            "it carries `{}` ({}) from one iteration to the next: in another order of elements it would differ",
            c.name, c.kind
        ));
    }
    if carries.is_empty() {
        return Ok(());
    }
    let seed = Taint::of(carries.iter().map(|c| c.name.clone()));
    let mut leak = None;
    flow.run(
        seed,
        l.end_byte()..func_body.end_byte(),
        &mut |n, tainted| {
            if tainted && leak.is_none() {
                leak = Some(text(src, n).to_string());
            }
        },
    );
    match leak {
        Some(at) => Err(format!(
            "a thread's partial ({}) reaches the store to `{at}` before the lanes combine it: the lanes would fold other elements, so the values stored would change",
            carries.iter().map(|c| format!("`{}`", c.name)).collect::<Vec<_>>().join(", ")
        )),
        None => Ok(()),
    }
}
