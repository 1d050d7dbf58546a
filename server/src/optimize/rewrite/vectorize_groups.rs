//! `vectorize_groups`: one vector access per aligned group. A buffer whose every access
//! is `p[e + c]`, where every coefficient of `e`'s polynomial (with the kernel's
//! single-definition locals expanded, pointer aliases `x + a + b` followed) is a
//! multiple of k and the offsets of each group are exactly 0..k-1, is read with one
//! k-wide load per group and written with one k-wide store (`float2`, `float4`,
//! `__half2`, `__nv_bfloat162`, or an aligned register array moved as one
//! `uint2`/`uint4`, as `vectorize` types them); the statements use the register's
//! lanes. k is the widest power of two (16 down to 2) that divides every access's step,
//! has a vector form and leaves every group complete: rotary pairs `x[2*i]`,
//! `x[2*i + 1]`; complex numbers; float quads `q[4*i + c]`; four doubles as two
//! `double2`; a 2x2 pooling window `src[0], src[1], src[W], src[W + 1]` with `src = x +
//! (p*2*OH + 2*oh) * W + 2*ow` and `W = 2*OW` (two groups of `x`); a stencil's own pair
//! and the next. `e` being a multiple of k, a group's alignment is the base pointer's:
//! one run-time check of every grouped base (the same for all threads) picks the
//! vector body, else the body as written. The statements looked at are those every
//! thread runs once (`region.rs`): the 1-D elementwise shape's guarded body
//! (`int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }` or the early
//! return), or in any other kernel the statements after its last top-level `if (...)
//! return;`, or inside a last `if (...) { ... }` (a 2-D grid's `if (ox < OW && oy <
//! OH)`). A group at the elementwise index's own `k * i` is moved as `[i]` at the top
//! of the body (`reinterpret_cast<const float2*>(x)[i]`); any other at its lane-0
//! access's address, loaded just before the first statement that touches it
//! (`reinterpret_cast<const float2*>(&src[W])[0]`) and stored at the end. That
//! candidate leaves the launch as it is. Where every group is at `k * i`, the groups
//! are narrower than 16 bytes and the launch is 1-D with a `cdiv` grid, more candidates
//! give each thread V groups (V = 2, 4, ... up to 16 bytes per access: two float pairs
//! as one `float4`, four half pairs as a `uint4`), the body once per group, the grid's
//! `cdiv` divided by V, and the V groups as written in a loop where the last is past
//! the bound or a base is not aligned (see `wide.rs`).
//!
//! **Refuses** (with the access): no region every thread runs once; no buffer accessed
//! in groups (`p[i]` alone is `vectorize`'s; `x[2*r*W + q]`: q steps by 1, no pair is
//! proved aligned); an incomplete group (`x[2*i]` only; `x[2*i + 1]` with `x[2*i + 2]`:
//! the accesses straddle groups); one buffer at two steps (`x[i]` beside `x[2*i]`, a
//! loop variable in the index); a float in the address (`(int)(2 * h)` with `h`
//! assigned); a step with no vector form (k = 3); an offset reached only under a
//! condition or in a loop (`if (2*i + 1 < m)`, `q < last ? w[1] : ...`: the whole group
//! might reach past what the kernel touches); a buffer also reached another way
//! (another index, its address taken, passed on, an atomic); a buffer written in groups
//! not a constant apart (`a[0..1]` and `b[0..1]` with `b = a + 2 * W`: W might be 0); a
//! group not at `k * i` that is written but not every lane surely (the whole store
//! would write what the kernel does not); a group whose lane-0 address reads a local
//! defined after the group's first access; the index assigned; a barrier or warp
//! collective; a `return` or jump inside the body. A buffer refused beside one that
//! qualifies stays as written. Several groups per thread are not offered for a body
//! that reads `threadIdx.x`, `blockIdx.x` or `gridDim` (or an alias), nor for a launch
//! that is not 1-D.

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::access::{
    collect_accesses, defines_alias, enclosing_statement, index_of, Access, Scope,
};
use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::edits::Edits;
use super::elementwise::{
    match_elementwise, one_d_grid, pointer_params, thread_bound, Elementwise, ThreadBound,
    INDEX_SHAPE,
};
use super::poly::{fold_split, poly, single_definitions, Poly, VarNames};
use super::spec_expr::{widen, words};
use super::tree::{
    first_line, fresh, kernel_function, line_indent, newline, reindent, render, text, walk,
};
use super::vectorize::{element_bytes, Lanes};
use super::RewriteContext;
use crate::syntax::{ByteRange, Lang};
use buffer::{buffer_groups, float_names, integral, Ctx, Placed};
use region::Region;

const ID: &str = "vectorize_groups";

pub fn vectorize_groups(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, ID)?;
    current_plan(cx)?;
    let k = &cx.kernel.name;
    let na = |why: String| not_applicable(format!("`{k}` has no groups to vectorize: {why}"));
    let func =
        kernel_function(cx).ok_or_else(|| na("its definition is not in the syntax tree".into()))?;
    let shape = match_elementwise(cx.text, func);
    let region = match &shape {
        Ok(s) => Region::of_shape(cx.text, s),
        Err(why) => Region::straight(cx.text, func).map_err(|other| {
            not_applicable(format!(
                "`{k}` is not a 1-D elementwise kernel: {why}; {ID} needs {INDEX_SHAPE}, or statements every thread runs once ({other})"
            ))
        })?,
    };
    let groups = plan(cx, &region).map_err(na)?;
    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    let one = label(&groups, 1);
    let draft = emit(cx.text, &region, &groups).and_then(|code| {
        Edits::from_pairs([(region.span(), code)])
            .apply(cx.text)
            .map_err(|e| e.to_string())
    });
    match draft {
        Ok(text) => drafts.push(Draft { label: one, text }),
        Err(e) => dropped.push(format!("{one}: {e}")),
    }
    if let Ok(shape) = &shape {
        several(cx, shape, &groups, &mut drafts, &mut dropped)?;
    }
    finish(cx, drafts, dropped)
}

/// The candidates with V groups per thread: only where every group is the thread's own
/// `k * i`, the launch is 1-D, and the body may not tell the threads apart.
fn several<'t>(
    cx: &RewriteContext<'_>,
    shape: &Elementwise<'t>,
    groups: &[Group<'t>],
    drafts: &mut Vec<Draft>,
    dropped: &mut Vec<String>,
) -> Result<(), super::RewriteError> {
    let mut counts = wide::counts(groups);
    if let Some(g) = groups.iter().find(|g| g.at.is_some()) {
        if !counts.is_empty() {
            dropped.push(format!(
                "several groups per thread: a group of `{}` does not start at `{} * {}`",
                g.buffer, g.k, shape.index
            ));
        }
        counts.clear();
    }
    if let Some(why) = wide::thread_bound_body(cx.text, shape).filter(|_| !counts.is_empty()) {
        dropped.push(format!("several groups per thread: {why}"));
        counts.clear();
    }
    let grid = match counts.is_empty() {
        true => None,
        false => one_d_grid(cx, &current_plan(cx)?, ID, shape.batched).ok(),
    };
    for v in counts.into_iter().filter(|_| grid.is_some()) {
        let (grid, first) = grid.as_ref().expect("checked");
        let label = label(groups, v);
        let Some(new_grid) = widen(&grid.text[first.clone()], v) else {
            dropped.push(format!(
                "{label}: grid = {} has no `cdiv(n, B)` to divide",
                grid.text
            ));
            continue;
        };
        let at = grid.range.start + first.start..grid.range.start + first.end;
        let mut names = words(cx.text).into_iter().map(str::to_string).collect();
        let draft = wide::emit(cx.text, shape, groups, v, &mut names).and_then(|code| {
            Edits::from_pairs([(shape.guard.start_byte()..shape.end, code), (at, new_grid)])
                .apply(cx.text)
                .map_err(|e| e.to_string())
        });
        match draft {
            Ok(text) => drafts.push(Draft { label, text }),
            Err(e) => dropped.push(format!("{label}: {e}")),
        }
    }
    Ok(())
}

/// One group of a buffer: its accesses by lane, its register type, and how it moves.
struct Group<'t> {
    buffer: String,
    pointee: String,
    k: usize,
    lanes: Lanes,
    /// (access node, lane c).
    accesses: Vec<(Node<'t>, usize)>,
    /// Loaded: read, or some lane not surely written.
    load: bool,
    written: bool,
    /// `None`: the group is the thread's own `k * i`, moved as `[i]` at the top of the
    /// body. `Some`: moved at its own address, loaded just before the first statement
    /// that touches it.
    at: Option<Place>,
}

/// Where a group that does not start at `k * i` moves.
struct Place {
    /// The address of its first element, as the kernel writes it (`&src[W]`).
    address: String,
    /// Start of the body's statement before which it is loaded.
    before: usize,
}

/// `groups: x, y as float2; q as float4`, or with V groups per thread `2 groups per
/// thread: x, y as float4`. A buffer with several groups is named once.
fn label(groups: &[Group<'_>], v: usize) -> String {
    let mut by: Vec<(String, Vec<&str>)> = Vec::new();
    for g in groups {
        let shown = Lanes::of(&g.pointee, g.k * v).map_or_else(String::new, |l| l.shown(g.k * v));
        match by.iter_mut().find(|(s, _)| *s == shown) {
            Some((_, names)) if names.contains(&g.buffer.as_str()) => {}
            Some((_, names)) => names.push(&g.buffer),
            None => by.push((shown, vec![&g.buffer])),
        }
    }
    let parts: Vec<String> = by
        .iter()
        .map(|(s, names)| format!("{} as {s}", names.join(", ")))
        .collect();
    match v {
        1 => format!("groups: {}", parts.join("; ")),
        _ => format!("{v} groups per thread: {}", parts.join("; ")),
    }
}

/// The grouped buffers of the region, or why there are none (the first buffer that
/// looks grouped but is not, or that no buffer is).
fn plan<'t>(cx: &RewriteContext<'_>, region: &Region<'t>) -> Result<Vec<Group<'t>>, String> {
    let src = cx.text;
    if let Some(why) = jumps(src, &region.body) {
        return Err(why);
    }
    collective(src, &region.body)?;
    // Pointer aliases from the whole kernel body: one declared before the check
    // (`float* xp = x + ...;`) still reaches its buffer inside it.
    let scope = Scope::with_declarations(cx, src, region.kernel)?;
    let mut accesses = Vec::new();
    for s in &region.body {
        collect_accesses(&scope, *s, &mut accesses)?;
    }
    let others = other_uses(src, &region.body, &scope, &accesses);
    let names = index_names(src, region);
    if let Some(i) = region.index.as_ref().filter(|i| names.varying.contains(*i)) {
        return Err(format!(
            "`{i}` is assigned or declared again; the group must be the thread's own `{i}`"
        ));
    }
    let floats = float_names(&scope);
    let pointers = pointer_params(cx);
    let mut by_buffer: BTreeMap<&str, Vec<Placed<'_, 't>>> = BTreeMap::new();
    for a in &accesses {
        let mut p = a.parts.iter().fold(Poly::default(), |acc, part| {
            acc.add(&poly(src, *part, &names), 1)
        });
        if let Some(i) = &region.index {
            p = fold_split(p, i);
        }
        let p = Some(p).filter(|p| a.node.kind() != "call_expression" && integral(p, &floats));
        by_buffer.entry(a.buffer.as_str()).or_default().push((a, p));
    }
    let ctx = Ctx {
        src,
        region,
        names: &names,
    };
    let mut groups = Vec::new();
    let mut why: Vec<String> = Vec::new();
    for p in cx.kernel.params.iter().map(|p| p.name.as_str()) {
        let Some(list) = by_buffer.get(p) else {
            continue;
        };
        // Only buffers with some access stepping by 2 or more are candidates.
        if !list
            .iter()
            .any(|(_, e)| e.as_ref().is_some_and(|e| partition::step(e) >= 2))
        {
            continue;
        }
        let pointee = pointers.get(p).cloned().unwrap_or_default();
        match buffer_groups(&ctx, (p, &pointee), list, others.get(p)) {
            Ok(g) => groups.extend(g),
            Err(e) => why.push(e),
        }
    }
    match (groups.is_empty(), why.is_empty()) {
        (false, _) => Ok(groups),
        (true, false) => Err(why.join("; ")),
        (true, true) => Err(
            "no buffer is accessed in aligned groups `p[e + c]` (e a multiple of k >= 2, c = 0..k-1; accesses `p[i]` are `vectorize`'s)".into(),
        ),
    }
}
/// A write that also reads (`+=`, `++`).
fn compound(n: Node<'_>) -> bool {
    n.parent().is_some_and(|p| {
        p.kind() == "update_expression"
            || (p.kind() == "assignment_expression"
                && p.child_by_field_name("operator").map(|o| o.kind()) != Some("="))
    })
}

/// `p[...] = v;` as one of the guarded body's own statements: a write that runs
/// whenever the body does.
fn plain_statement(n: Node<'_>, top: &BTreeSet<usize>) -> bool {
    let Some(stmt) = n.parent().and_then(|a| a.parent()) else {
        return false;
    };
    !compound(n) && stmt.kind() == "expression_statement" && top.contains(&stmt.id())
}

/// Per buffer, the first use of one of its pointers that is neither an access's base
/// nor a pointer alias's definition (passed to a call, an address, an atomic).
fn other_uses(
    src: &str,
    body: &[Node<'_>],
    scope: &Scope<'_, '_>,
    accesses: &[Access<'_>],
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for s in body {
        walk(*s, &mut |n| {
            let Some(alias) = (n.kind() == "identifier")
                .then(|| scope.pointers.get(text(src, n)))
                .flatten()
            else {
                return true;
            };
            let r = n.byte_range();
            let within = |x: &ByteRange| x.start <= r.start && r.end <= x.end;
            let reached = accesses.iter().any(|a| {
                a.node.kind() != "call_expression"
                    && within(&a.node.byte_range())
                    && !index_of(a.node).is_some_and(|ix| within(&ix.byte_range()))
            });
            if !reached && !defines_alias(n) {
                let stmt = enclosing_statement(n).map_or("", |x| text(src, x));
                out.entry(alias.buffer.clone())
                    .or_insert_with(|| format!("`{}` in `{}`", text(src, n), first_line(stmt)));
            }
            true
        });
    }
    out
}

/// A `return` or jump inside the guarded body would skip the stores at its end.
fn jumps(src: &str, body: &[Node<'_>]) -> Option<String> {
    let mut why = None;
    for s in body {
        walk(*s, &mut |n| {
            if matches!(
                n.kind(),
                "return_statement" | "goto_statement" | "labeled_statement"
            ) && why.is_none()
            {
                why = Some(format!(
                    "`{}` leaves the body before the vector stores at its end",
                    first_line(text(src, n))
                ));
            }
            why.is_none()
        });
    }
    why
}

/// A barrier or warp collective in the region: another thread's write may reach a
/// group between its accesses, or the group's store move past what waits for it.
fn collective(src: &str, body: &[Node<'_>]) -> Result<(), String> {
    let mut why = None;
    for s in body {
        walk(*s, &mut |n| {
            if let Some(ThreadBound::Collective(f)) = thread_bound(src, n) {
                why.get_or_insert_with(|| {
                    format!("the body calls `{f}`, so its accesses cannot move")
                });
            }
            why.is_none()
        });
    }
    why.map_or(Ok(()), Err)
}

/// The index as `$c` and every local of the kernel with one definition and no
/// assignment expandable; anything assigned or declared twice varies.
fn index_names<'t>(src: &str, region: &Region<'t>) -> VarNames<'t> {
    let (mut defs, varying) = single_definitions(src, &[region.kernel], &|_| true);
    let var = region.index.clone().unwrap_or_default();
    defs.remove(&var);
    VarNames { var, defs, varying }
}

/// The region as `if (<every grouped base aligned>) { loads; body on lanes; stores }
/// else { body as written }`: a group at `k * i` loads at the top, any other just
/// before the first statement that touches it.
fn emit(src: &str, region: &Region<'_>, groups: &[Group<'_>]) -> Result<String, String> {
    let nl = newline(src);
    let span = region.span();
    let from = line_indent(src, span.start).to_string();
    let line_start = src[..span.start].rfind('\n').map_or(0, |p| p + 1);
    if !src[line_start..span.start].trim().is_empty() {
        return Err(
            "the guarded statement shares its line with the check; put it in braces".into(),
        );
    }
    if !region.braced {
        return Err("the guarded statement has no braces".into());
    }
    let in1 = format!("{from}{}", region.unit);
    let i = region.index.as_deref().unwrap_or_default();
    let mut names: BTreeSet<String> = words(src).into_iter().map(str::to_string).collect();
    let regs: Vec<String> = groups
        .iter()
        .map(|g| fresh(&format!("{}{}", g.buffer, g.k), &mut names))
        .collect();
    let mut checks: Vec<String> = Vec::new();
    for g in groups {
        let bytes = element_bytes(&g.pointee).unwrap_or(1) * g.k;
        let c = format!(
            "reinterpret_cast<unsigned long long>({}) % {bytes} == 0",
            g.buffer
        );
        if !checks.contains(&c) {
            checks.push(c);
        }
    }
    let mut o = format!("if ({}) {{{nl}", checks.join(&format!(" &&{nl}{from}    ")));
    let mut reps: Vec<(ByteRange, String)> = Vec::new();
    for (g, reg) in groups.iter().zip(&regs) {
        let (p, at) = address(g, i);
        let decl = g.lanes.declare(reg, &p, at, g.load, g.written, g.k);
        match &g.at {
            None => decl
                .lines()
                .for_each(|line| o.push_str(&format!("{in1}{line}{nl}"))),
            Some(place) => {
                let ind = line_indent(src, place.before);
                let lines: Vec<&str> = decl.lines().collect();
                let text = format!("{}{nl}{ind}", lines.join(&format!("{nl}{ind}")));
                reps.push((place.before..place.before, text));
            }
        }
        reps.extend(
            g.accesses
                .iter()
                .map(|(n, c)| (n.byte_range(), g.lanes.lane(reg, *c))),
        );
    }
    let body = render(src, &span, &reps).map_err(|e| e.to_string())?;
    o.push_str(&format!("{in1}{}{nl}", reindent(&body, &from, &in1)));
    for (g, reg) in groups.iter().zip(&regs).filter(|(g, _)| g.written) {
        let (p, at) = address(g, i);
        for line in g.lanes.store(reg, &p, at).lines() {
            o.push_str(&format!("{in1}{line}{nl}"));
        }
    }
    let plain = &src[span.clone()];
    o.push_str(&format!(
        "{from}}} else {{{nl}{in1}{}{nl}{from}}}",
        reindent(plain, &from, &in1)
    ));
    Ok(o)
}

/// Where a group moves, as the pointer and the vector index [`Lanes`] read: the buffer
/// at the thread's index `i`, or the group's own address at 0.
fn address<'g>(g: &'g Group<'_>, i: &'g str) -> (String, &'g str) {
    match &g.at {
        None => (g.buffer.clone(), i),
        Some(place) => (place.address.clone(), "0"),
    }
}

mod buffer;
mod partition;
mod region;
#[cfg(test)]
mod tests;
mod wide;
