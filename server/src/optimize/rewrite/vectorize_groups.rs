//! `vectorize_groups`: one vector access per interleaved group. In the 1-D elementwise
//! shape (`int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }` or the
//! early return), a buffer whose every access is `p[k * i + c]` with the offsets `c`
//! exactly 0..k-1 (rotary pairs `x[2*i]`, `x[2*i + 1]`; complex numbers as (re, im);
//! float quads `q[4*i + c]`) is read with one k-wide load at the top of the body and
//! written with one k-wide store at its end (`float2`, `float4`, `__half2`,
//! `__nv_bfloat162`, or an aligned register array moved as one `uint2`/`uint4`, as
//! `vectorize` types them); the statements use the register's lanes. The index is
//! proved from the polynomial of the address with the body's single-definition locals
//! expanded: `2*i + 1`, `r * 2 * half + 2 * p + 1` with `r = i / half; p = i % half`
//! (the split folds back to `i`), and a pointer `const float* xp = x + 2 * i;` read as
//! `xp[0]`, `xp[1]` all qualify. Other buffers (`cos[i]`, `table[p]`) stay as written.
//! A group starts `k * sizeof(T)` bytes after the previous one, so its alignment is the
//! base pointer's: one run-time check of every grouped base (the same for all threads)
//! picks the vector body, else the body as written. That candidate leaves the launch
//! as it is. Where the groups are narrower than 16 bytes and the launch is 1-D with a
//! `cdiv` grid, more candidates give each thread V groups (V = 2, 4, ... up to 16 bytes
//! per access: two float pairs as one `float4`, four half pairs as a `uint4`), the body
//! once per group, the grid's `cdiv` divided by V, and the V groups as written in a loop
//! where the last is past the bound or a base is not aligned (see `wide.rs`).
//!
//! **Refuses** (with the access): another shape (`vectorize_rows`, `vectorize` take
//! theirs); no buffer accessed in groups (`p[i]` alone is `vectorize`'s); an incomplete
//! group (`x[2*i]` only); offsets outside 0..k-1 (`x[2*i + 1]` with `x[2*i + 2]`: groups
//! overlap or are misaligned); two strides for one buffer; a group size with no vector
//! form (k = 3, 8 floats, 4 doubles); an offset reached only under a condition or in a
//! loop (`if (2*i + 1 < m)`: the whole group might reach past what the kernel touches);
//! a buffer also reached another way (another index, its address taken, passed on, an
//! atomic); the index assigned; a `return` or jump inside the body. A buffer refused
//! beside one that qualifies stays as written. Several groups per thread are not
//! offered for a body that reads `threadIdx.x`, `blockIdx.x` or `gridDim` (or an alias)
//! or calls a barrier or warp collective, nor for a launch that is not 1-D.

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::access::{
    collect_accesses, defines_alias, enclosing_statement, index_of, unconditional, Access, Scope,
};
use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::edits::Edits;
use super::elementwise::{
    match_elementwise, one_d_grid, pointer_params, Elementwise, Guard, INDEX_SHAPE,
};
use super::poly::{fold_split, poly, single_definitions, Poly, VarNames};
use super::spec_expr::{widen, words};
use super::tree::{
    first_line, fresh, kernel_function, line_indent, newline, reindent, render, text, walk,
};
use super::vectorize::{element_bytes, Lanes};
use super::RewriteContext;
use crate::syntax::{ByteRange, Lang};

const ID: &str = "vectorize_groups";

pub fn vectorize_groups(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, ID)?;
    current_plan(cx)?;
    let k = &cx.kernel.name;
    let na = |why: String| not_applicable(format!("`{k}` has no groups to vectorize: {why}"));
    let func =
        kernel_function(cx).ok_or_else(|| na("its definition is not in the syntax tree".into()))?;
    let shape = match_elementwise(cx.text, func).map_err(|why| {
        not_applicable(format!(
            "`{k}` is not a 1-D elementwise kernel: {why}; {ID} needs {INDEX_SHAPE}"
        ))
    })?;
    let groups = plan(cx, &shape).map_err(na)?;
    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    let one = label(&groups, 1);
    let draft = emit(cx.text, &shape, &groups).and_then(|code| {
        Edits::from_pairs([(shape.body_span(), code)])
            .apply(cx.text)
            .map_err(|e| e.to_string())
    });
    match draft {
        Ok(text) => drafts.push(Draft { label: one, text }),
        Err(e) => dropped.push(format!("{one}: {e}")),
    }
    // Several groups per thread change the grid: only where the launch is 1-D, and the
    // body may not tell the threads apart.
    let mut counts = wide::counts(&groups);
    if let Some(why) = wide::thread_bound_body(cx.text, &shape).filter(|_| !counts.is_empty()) {
        dropped.push(format!("several groups per thread: {why}"));
        counts.clear();
    }
    let grid = match counts.is_empty() {
        true => None,
        false => one_d_grid(cx, &current_plan(cx)?, ID, shape.batched).ok(),
    };
    for v in counts.into_iter().filter(|_| grid.is_some()) {
        let (grid, first) = grid.as_ref().expect("checked");
        let label = label(&groups, v);
        let Some(new_grid) = widen(&grid.text[first.clone()], v) else {
            dropped.push(format!(
                "{label}: grid = {} has no `cdiv(n, B)` to divide",
                grid.text
            ));
            continue;
        };
        let at = grid.range.start + first.start..grid.range.start + first.end;
        let mut names = words(cx.text).into_iter().map(str::to_string).collect();
        let draft = wide::emit(cx.text, &shape, &groups, v, &mut names).and_then(|code| {
            Edits::from_pairs([(shape.guard.start_byte()..shape.end, code), (at, new_grid)])
                .apply(cx.text)
                .map_err(|e| e.to_string())
        });
        match draft {
            Ok(text) => drafts.push(Draft { label, text }),
            Err(e) => dropped.push(format!("{label}: {e}")),
        }
    }
    finish(cx, drafts, dropped)
}

/// One grouped buffer: its accesses by lane, its register type, and how it moves.
struct Group<'t> {
    buffer: String,
    pointee: String,
    k: usize,
    lanes: Lanes,
    /// (access node, lane c).
    accesses: Vec<(Node<'t>, usize)>,
    /// Loaded at the top: read, or some lane not surely written.
    load: bool,
    written: bool,
}

/// `groups: x, y as float2; q as float4`, or with V groups per thread `2 groups per
/// thread: x, y as float4`.
fn label(groups: &[Group<'_>], v: usize) -> String {
    let mut by: Vec<(String, Vec<&str>)> = Vec::new();
    for g in groups {
        let shown = Lanes::of(&g.pointee, g.k * v).map_or_else(String::new, |l| l.shown(g.k * v));
        match by.iter_mut().find(|(s, _)| *s == shown) {
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

/// The grouped buffers of the guarded body, or why there are none (the first buffer
/// that looks grouped but is not, or that no buffer is).
fn plan<'t>(cx: &RewriteContext<'_>, shape: &Elementwise<'t>) -> Result<Vec<Group<'t>>, String> {
    let src = cx.text;
    if let Some(why) = jumps(src, shape) {
        return Err(why);
    }
    // Pointer aliases from the whole kernel body: one declared before the check
    // (`float* xp = x + ...;`) still reaches its buffer inside it.
    let scope = Scope::with_declarations(cx, src, kernel_body(shape))?;
    let mut accesses = Vec::new();
    for s in &shape.body {
        collect_accesses(&scope, *s, &mut accesses)?;
    }
    let others = other_uses(src, shape, &scope, &accesses);
    let names = index_names(src, shape);
    if names.varying.contains(&shape.index) {
        return Err(format!(
            "`{0}` is assigned or declared again; the group must be the thread's own `{0}`",
            shape.index
        ));
    }
    let pointers = pointer_params(cx);
    let mut by_buffer: BTreeMap<&str, Vec<Placed<'_, 't>>> = BTreeMap::new();
    for a in &accesses {
        let p = a.parts.iter().fold(Poly::default(), |acc, part| {
            acc.add(&poly(src, *part, &names), 1)
        });
        let kc =
            affine(&fold_split(p, &shape.index)).filter(|_| a.node.kind() != "call_expression");
        by_buffer
            .entry(a.buffer.as_str())
            .or_default()
            .push((a, kc));
    }
    let mut groups = Vec::new();
    let mut why: Vec<String> = Vec::new();
    for p in cx.kernel.params.iter().map(|p| p.name.as_str()) {
        let Some(list) = by_buffer.get(p) else {
            continue;
        };
        // Only buffers with some access at a stride of 2 or more are candidates.
        if !list.iter().any(|(_, kc)| kc.is_some_and(|(k, _)| k >= 2)) {
            continue;
        }
        let pointee = pointers.get(p).cloned().unwrap_or_default();
        match group(src, p, &pointee, list, others.get(p), &shape.body) {
            Ok(g) => groups.push(g),
            Err(e) => why.push(e),
        }
    }
    match (groups.is_empty(), why.is_empty()) {
        (false, _) => Ok(groups),
        (true, false) => Err(why.join("; ")),
        (true, true) => Err(format!(
            "no buffer is accessed as `p[k * {0} + c]` with k >= 2 (accesses `p[{0}]` are `vectorize`'s)",
            shape.index
        )),
    }
}

/// An access and, when its address is `k * i + c` with literal k and c, `(k, c)`.
type Placed<'a, 't> = (&'a Access<'t>, Option<(i64, i64)>);

/// `Some((k, c))` when the address is `k * $c + c` with literal k and c.
fn affine(p: &Poly) -> Option<(i64, i64)> {
    let k = p.linear_in("$c")?.as_constant()?;
    let c = p
        .clone()
        .add(&Poly::atom("$c".into()).mul(&Poly::constant(k)), -1);
    Some((k, c.as_constant()?))
}

/// One buffer's accesses as a complete group, or why not.
fn group<'t>(
    src: &str,
    p: &str,
    pointee: &str,
    list: &[Placed<'_, 't>],
    other: Option<&String>,
    tops: &[Node<'t>],
) -> Result<Group<'t>, String> {
    let top: &BTreeSet<usize> = &tops.iter().map(|n| n.id()).collect();
    if let Some(use_) = other {
        return Err(format!(
            "`{p}` is also used other than as an element ({use_})"
        ));
    }
    let shown = |a: &Access<'_>| first_line(text(src, a.node)).to_string();
    let mut k = None;
    for (a, kc) in list {
        match kc {
            None => {
                return Err(format!(
                    "`{}` is not `{p}[k * i + c]` with literal k and c, and other accesses of `{p}` are",
                    shown(a)
                ))
            }
            Some((s, _)) if k.is_some_and(|k| k != *s) => {
                return Err(format!(
                    "`{}` steps by {s} per thread where another access of `{p}` steps by {}: `{p}` is also accessed outside its groups",
                    shown(a),
                    k.unwrap_or_default()
                ))
            }
            Some((s, _)) => k = Some(*s),
        }
    }
    let k = k.unwrap_or_default();
    let mut seen = BTreeSet::new();
    for (a, kc) in list {
        let c = kc.map_or(0, |(_, c)| c);
        if !(0..k).contains(&c) {
            return Err(format!(
                "`{}` is offset {c} from its group of {k}: the groups `{p}[{k} * i .. {k} * i + {}]` would overlap or be misaligned",
                shown(a),
                k - 1
            ));
        }
        seen.insert(c);
    }
    if seen.len() as i64 != k {
        let have: Vec<String> = seen.iter().map(|c| c.to_string()).collect();
        return Err(format!(
            "`{p}`'s groups of {k} are incomplete: only offset(s) {} of 0..{} are accessed, and a vector access would touch the rest",
            have.join(", "),
            k - 1
        ));
    }
    // The vector access must reach nothing the kernel might not: each offset is
    // reached whenever the body runs (an odd tail's `if (2 * i + 1 < m) x[2 * i + 1]`).
    if let Some(c) = (0..k).find(|c| {
        !list
            .iter()
            .any(|(a, kc)| kc.is_some_and(|(_, o)| o == *c) && unconditional(a.node, tops))
    }) {
        return Err(format!(
            "`{p}`'s offset {c} is reached only under a condition or in a loop, so a vector access of the whole group could touch an element the kernel does not"
        ));
    }
    let ku = k as usize;
    let lanes = Lanes::of(pointee, ku).filter(|_| matches!(k, 2 | 4 | 8 | 16));
    let Some(lanes) = lanes else {
        return Err(format!(
            "`{p}` is `{pointee}*` in groups of {k}: {} bytes with no vector type and no 8- or 16-byte packing",
            element_bytes(pointee).map_or("unknown".into(), |b| (b * ku).to_string())
        ));
    };
    let read = list.iter().any(|(a, _)| !a.write || compound(a.node));
    let surely: BTreeSet<i64> = list
        .iter()
        .filter(|(a, _)| a.write && plain_statement(a.node, top))
        .filter_map(|(_, kc)| kc.map(|(_, c)| c))
        .collect();
    Ok(Group {
        buffer: p.to_string(),
        pointee: pointee.to_string(),
        k: ku,
        lanes,
        accesses: list
            .iter()
            .map(|(a, kc)| (a.node, kc.map_or(0, |(_, c)| c as usize)))
            .collect(),
        load: read || surely.len() != ku,
        written: list.iter().any(|(a, _)| a.write),
    })
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
    shape: &Elementwise<'_>,
    scope: &Scope<'_, '_>,
    accesses: &[Access<'_>],
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for s in &shape.body {
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
fn jumps(src: &str, shape: &Elementwise<'_>) -> Option<String> {
    let mut why = None;
    for s in &shape.body {
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

/// The braces around the index's declaration: the kernel's body.
fn kernel_body<'t>(shape: &Elementwise<'t>) -> Node<'t> {
    let mut root = shape.decl;
    while let Some(p) = root.parent() {
        root = p;
        if p.kind() == "compound_statement" {
            break;
        }
    }
    root
}

/// The index as `$c` and every local of the kernel with one definition and no
/// assignment expandable; anything assigned or declared twice varies.
fn index_names<'t>(src: &str, shape: &Elementwise<'t>) -> VarNames<'t> {
    let (mut defs, varying) = single_definitions(src, &[kernel_body(shape)], &|_| true);
    defs.remove(&shape.index);
    VarNames {
        var: shape.index.clone(),
        defs,
        varying,
    }
}

/// The guarded body as `if (<every grouped base aligned>) { loads; body on lanes;
/// stores } else { body as written }`.
fn emit(src: &str, shape: &Elementwise<'_>, groups: &[Group<'_>]) -> Result<String, String> {
    let nl = newline(src);
    let span = shape.body_span();
    let from = line_indent(src, span.start).to_string();
    let line_start = src[..span.start].rfind('\n').map_or(0, |p| p + 1);
    if !src[line_start..span.start].trim().is_empty() {
        return Err(
            "the guarded statement shares its line with the check; put it in braces".into(),
        );
    }
    if shape.form == Guard::Block && !src[shape.cond_end..span.start].contains('{') {
        return Err("the guarded statement has no braces".into());
    }
    let in1 = format!("{from}{}", shape.unit);
    let i = &shape.index;
    let mut names: BTreeSet<String> = words(src).into_iter().map(str::to_string).collect();
    let regs: Vec<String> = groups
        .iter()
        .map(|g| fresh(&format!("{}{}", g.buffer, g.k), &mut names))
        .collect();
    let checks: Vec<String> = groups
        .iter()
        .map(|g| {
            let bytes = element_bytes(&g.pointee).unwrap_or(1) * g.k;
            format!(
                "reinterpret_cast<unsigned long long>({}) % {bytes} == 0",
                g.buffer
            )
        })
        .collect();
    let mut o = format!("if ({}) {{{nl}", checks.join(&format!(" &&{nl}{from}    ")));
    for (g, reg) in groups.iter().zip(&regs) {
        for line in g
            .lanes
            .declare(reg, &g.buffer, i, g.load, g.written, g.k)
            .lines()
        {
            o.push_str(&format!("{in1}{line}{nl}"));
        }
    }
    let reps: Vec<(ByteRange, String)> = groups
        .iter()
        .zip(&regs)
        .flat_map(|(g, reg)| {
            g.accesses
                .iter()
                .map(|(n, c)| (n.byte_range(), g.lanes.lane(reg, *c)))
        })
        .collect();
    let body = render(src, &span, &reps).map_err(|e| e.to_string())?;
    o.push_str(&format!("{in1}{}{nl}", reindent(&body, &from, &in1)));
    for (g, reg) in groups.iter().zip(&regs) {
        if g.written {
            o.push_str(&format!("{in1}{}{nl}", g.lanes.store(reg, &g.buffer, i)));
        }
    }
    let plain = &src[span.clone()];
    o.push_str(&format!(
        "{from}}} else {{{nl}{in1}{}{nl}{from}}}",
        reindent(plain, &from, &in1)
    ));
    Ok(o)
}

#[cfg(test)]
mod tests;
mod wide;
