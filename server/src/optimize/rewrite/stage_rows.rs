//! `stage_rows`: a kernel whose threads walk the same range in two or more loops (a
//! row's max or sum, then the row written: a softmax, a norm, a min-max scale, a
//! softmax's backward) reads the same elements again in every pass. The first pass keeps
//! them in registers instead: its first J trips run unrolled, each trip's value of a
//! staged buffer stored in slot `j` of a register array, and the later passes read the
//! slot; the trips past J run as written. A thread owns the same elements in every pass
//! (the loops have the same header), so what a later pass reads is what the first pass
//! loaded, and the second read, which waits on L1 or L2 (or DRAM, for a row that left
//! the cache), is gone. Nothing here reads the lanes: the same holds for a block
//! striding a row (`c = threadIdx.x; c += 256`), a warp (`c = lane; c += 32`) or any
//! other split, which is why it follows the authored cooperative loops that
//! `cooperative_rows`' register modes do not reach.
//!
//! **Matches** sibling loops of one block `for (T v = A; v < B; v += S)` with the same
//! `T`, `A`, `B` and `S` (a step that is not a literal under 32: few trips a thread), and
//! reads `p[E]` of a pointer `p` (a parameter or a local pointer declared once) that the
//! kernel never writes through, never reassigns and whose address it never passes on,
//! with `E` reading `v` and otherwise only names nothing assigns, at the same `E` in two
//! or more of the loops; the first of them reads it on every trip (not under a condition,
//! a loop or a short-circuit).
//!
//! **Writes** `T_p p_st[J];` before the first loop, and each loop that reads a staged
//! buffer as `#pragma unroll for (int j = 0; j < J; ++j) { T v = A + j * S; if (v < B) {
//! [p_st[j] = p[E];] <body, p[E] read as p_st[j]> } }` followed by the author's loop
//! from `A + J * S`. Candidates: J in param `slots` (default 4, 8, 16, 32) where J times
//! the staged buffers is at most 64 registers. No launch change.
//!
//! **Refuses**, with the reason: no two sibling loops with one header; loops whose body
//! has `break`, `return`, `goto`, a barrier or a warp collective, or writes the variable,
//! bound or step; no buffer read at the same index by two of them on every trip of the
//! first; the loops this rewrite left for the trips past its slots (a larger slot count
//! is a candidate of the first step).

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::access::{index_of, unconditional};
use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::edits::Edits;
use super::elementwise::pointer_params;
use super::params::Params;
use super::tree::{
    assigned_names, code_names, fresh, indent_unit, kernel_function, line_indent, named_children,
    newline, one_line, reindent, text, walk,
};
use super::RewriteContext;
use crate::syntax::Lang;

#[cfg(test)]
mod tests;

const ID: &str = "stage_rows";
/// Registers the staged slots of one candidate may take.
const SLOT_BUDGET: u64 = 64;

/// One loop of a group: its node, header parts and body.
struct PassLoop<'t> {
    node: Node<'t>,
    var: String,
    /// The start's value as written (`lane` of `int c = lane`).
    start: Node<'t>,
    body: Node<'t>,
}

/// The header a group's loops share: type, start, bound and step as written.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Header {
    ty: String,
    start: String,
    bound: String,
    step: String,
}

/// A buffer read the same way by several loops of a group.
struct Staged {
    buffer: String,
    pointee: String,
    /// The index with the loop variable written `$v`.
    index: String,
    /// The loop (position in the group) whose trips load it.
    first: usize,
}

pub fn stage_rows(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, ID)?;
    current_plan(cx)?;
    let slots = Params(cx.params).uints("slots", &[4, 8, 16, 32], 1..=64)?;
    let k = &cx.kernel.name;
    let func = kernel_function(cx)
        .ok_or_else(|| not_applicable(format!("`{k}`'s definition is not in the syntax tree")))?;
    let (header, group) = best_group(cx.text, func)
        .map_err(|why| not_applicable(format!("`{k}` has no passes to stage: {why}")))?;
    let staged =
        staged_reads(cx, func, &group).map_err(|why| not_applicable(format!("`{k}`: {why}")))?;
    let mut drafts = Vec::new();
    for j in slots
        .into_iter()
        .filter(|j| j * staged.len() as u64 <= SLOT_BUDGET)
    {
        let text = emit(cx, &header, &group, &staged, j).map_err(not_applicable)?;
        let names: Vec<&str> = staged.iter().map(|s| s.buffer.as_str()).collect();
        drafts.push(Draft {
            label: format!(
                "{} kept in registers over {j} trips of `{}` across {} loops",
                names.join(", "),
                group[0].var,
                group.len()
            ),
            text,
        });
    }
    finish(cx, drafts, Vec::new())
}

/// The largest group of sibling loops with one header (two at least).
fn best_group<'t>(src: &str, func: Node<'t>) -> Result<(Header, Vec<PassLoop<'t>>), String> {
    let mut groups: BTreeMap<(usize, Header), Vec<PassLoop<'t>>> = BTreeMap::new();
    let mut why = Vec::new();
    walk(func, &mut |n| {
        if n.kind() == "compound_statement" {
            for s in named_children(n)
                .into_iter()
                .filter(|s| s.kind() == "for_statement")
            {
                match pass_loop(src, s) {
                    Ok((_, l)) if after_slots(src, &l) => why.push(format!(
                        "`{}` runs the trips past slots already kept in registers (a larger slot count is a candidate of its own)",
                        super::tree::first_line(text(src, s))
                    )),
                    Ok((h, l)) => groups.entry((n.id(), h)).or_default().push(l),
                    Err(e) => why.push(e),
                }
            }
        }
        true
    });
    groups
        .into_iter()
        .filter(|(_, g)| g.len() >= 2)
        .max_by_key(|(_, g)| g.len())
        .map(|((_, h), g)| (h, g))
        .ok_or_else(|| match why.is_empty() {
            true => {
                "no two loops of one block share a header `for (T v = A; v < B; v += S)`".into()
            }
            false => why.join("; "),
        })
}

/// Whether the loop is the rest of a staged pass: right after a loop (comments and
/// pragmas aside) whose body declares the same variable, as [`staged_loop`] writes.
fn after_slots(src: &str, l: &PassLoop<'_>) -> bool {
    let mut prev = l.node.prev_named_sibling();
    while let Some(p) = prev.filter(|p| matches!(p.kind(), "comment" | "preproc_call")) {
        prev = p.prev_named_sibling();
    }
    let Some(body) = prev
        .filter(|p| p.kind() == "for_statement")
        .and_then(|p| p.child_by_field_name("body"))
    else {
        return false;
    };
    named_children(body).iter().any(|d| {
        d.kind() == "declaration"
            && d.child_by_field_name("declarator")
                .and_then(|x| x.child_by_field_name("declarator"))
                .is_some_and(|x| text(src, x) == l.var)
    })
}

/// `for (T v = A; v < B; v += S) body` with S not a small literal and a body that
/// neither leaves early, meets a barrier, nor writes `v`, the bound or the step.
fn pass_loop<'t>(src: &str, l: Node<'t>) -> Result<(Header, PassLoop<'t>), String> {
    let head = super::tree::first_line(text(src, l)).to_string();
    let bad = |why: &str| format!("`{head}` {why}");
    let init = l
        .child_by_field_name("initializer")
        .filter(|i| i.kind() == "declaration")
        .ok_or_else(|| bad("does not declare its variable"))?;
    let ty = init.child_by_field_name("type").map(|t| text(src, t));
    let decl = init.child_by_field_name("declarator");
    let (Some(ty), Some(decl)) = (ty, decl.filter(|d| d.kind() == "init_declarator")) else {
        return Err(bad("does not declare its variable with a start"));
    };
    let var = decl.child_by_field_name("declarator").map(|d| text(src, d));
    let start_node = decl.child_by_field_name("value");
    let (Some(var), Some(start_node)) = (var, start_node) else {
        return Err(bad("has no start"));
    };
    let start = text(src, start_node);
    let bound = bound_of(src, l, var).ok_or_else(|| bad("is not bounded by `v < B`"))?;
    let step = step_of(src, l, var).ok_or_else(|| bad("does not step by `v += S`"))?;
    if step.trim().parse::<u64>().is_ok_and(|s| s < 32) {
        return Err(bad(
            "steps by a small literal: each thread walks many trips",
        ));
    }
    let body = l
        .child_by_field_name("body")
        .ok_or_else(|| bad("has no body"))?;
    body_ok(src, body, &[var, &bound, &step]).map_err(|e| bad(&e))?;
    let header = Header {
        ty: one_line(ty),
        start: one_line(start),
        bound: one_line(&bound),
        step: one_line(&step),
    };
    let pass = PassLoop {
        node: l,
        var: var.to_string(),
        start: start_node,
        body,
    };
    Ok((header, pass))
}

/// B of a condition `v < B`.
fn bound_of(src: &str, l: Node<'_>, var: &str) -> Option<String> {
    let c = l.child_by_field_name("condition")?;
    let op = c.child_by_field_name("operator").map(|o| text(src, o));
    let left = c.child_by_field_name("left").map(|o| text(src, o));
    let right = c.child_by_field_name("right")?;
    (c.kind() == "binary_expression" && op == Some("<") && left == Some(var))
        .then(|| text(src, right).to_string())
}

/// S of an update `v += S`.
fn step_of(src: &str, l: Node<'_>, var: &str) -> Option<String> {
    let u = l.child_by_field_name("update")?;
    let op = u.child_by_field_name("operator").map(|o| text(src, o));
    let left = u.child_by_field_name("left").map(|o| text(src, o));
    let right = u.child_by_field_name("right")?;
    (u.kind() == "assignment_expression" && op == Some("+=") && left == Some(var))
        .then(|| text(src, right).to_string())
}

/// The body may run in a guarded copy per trip: no jump out, no barrier or warp
/// collective, nothing the header reads written.
fn body_ok(src: &str, body: Node<'_>, header: &[&str]) -> Result<(), String> {
    const SYNC: &[&str] = &[
        "__syncthreads",
        "__syncwarp",
        "__shfl",
        "__ballot",
        "__any",
        "__all",
    ];
    let written = assigned_names(src, &[body]);
    if let Some(w) = header
        .iter()
        .flat_map(|h| h.split(|c: char| !(c.is_alphanumeric() || c == '_')))
        .find(|w| !w.is_empty() && written.contains(*w))
    {
        return Err(format!("writes `{w}`, which its header reads"));
    }
    let mut bad = None;
    walk(body, &mut |n| {
        let t = text(src, n);
        bad = bad.take().or(match n.kind() {
            "break_statement" | "return_statement" | "goto_statement" => {
                Some(format!("leaves the loop early (`{t}`)"))
            }
            "call_expression" if SYNC.iter().any(|s| t.starts_with(s)) => Some(format!(
                "meets `{}` in its body",
                super::tree::first_line(t)
            )),
            _ => None,
        });
        bad.is_none()
    });
    bad.map_or(Ok(()), Err)
}

/// Buffers read at the same index by two loops or more of the group.
fn staged_reads(
    cx: &RewriteContext<'_>,
    func: Node<'_>,
    group: &[PassLoop<'_>],
) -> Result<Vec<Staged>, String> {
    let src = cx.text;
    let frozen = Frozen::of(cx, func);
    // (buffer, index) -> loops reading it, and the first loop reading it on every trip.
    let mut seen: BTreeMap<(String, String), (BTreeSet<usize>, Option<usize>)> = BTreeMap::new();
    for (k, l) in group.iter().enumerate() {
        for (buffer, index, every_trip) in reads(src, l, &frozen) {
            let e = seen.entry((buffer, index)).or_default();
            e.0.insert(k);
            if every_trip && e.1.is_none() && e.0.len() == 1 {
                e.1 = Some(k);
            }
        }
    }
    let out: Vec<Staged> = seen
        .into_iter()
        .filter_map(|((buffer, index), (loops, first))| {
            let pointee = frozen.pointee(&buffer)?;
            (loops.len() >= 2 && first == loops.first().copied()).then_some(Staged {
                buffer,
                pointee,
                index,
                first: first?,
            })
        })
        .collect();
    if out.is_empty() {
        return Err(format!(
            "no buffer is read at the same element by two of its {} loops `{}`, on every trip of the first, through a pointer the kernel never writes",
            group.len(),
            super::tree::first_line(text(src, group[0].node))
        ));
    }
    Ok(out)
}

/// What stays the same for the whole kernel: read-only pointers (with their element
/// types) and names nothing assigns.
struct Frozen {
    pointers: BTreeMap<String, String>,
    assigned: BTreeSet<String>,
}

impl Frozen {
    fn of(cx: &RewriteContext<'_>, func: Node<'_>) -> Frozen {
        let src = cx.text;
        let assigned = assigned_names(src, &[func]);
        let mut pointers = pointer_params(cx);
        pointers.extend(local_pointers(src, func));
        let written = written_through(src, func);
        pointers.retain(|name, _| !written.contains(name) && !assigned.contains(name));
        Frozen { pointers, assigned }
    }

    fn pointee(&self, buffer: &str) -> Option<String> {
        self.pointers.get(buffer).cloned()
    }
}

/// Local pointers declared once with an initializer: name -> element type.
fn local_pointers(src: &str, func: Node<'_>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut twice = BTreeSet::new();
    walk(func, &mut |n| {
        if n.kind() == "declaration" {
            let ty = n.child_by_field_name("type").map(|t| text(src, t));
            let mut c = n.walk();
            for d in n.children_by_field_name("declarator", &mut c) {
                let p = d.child_by_field_name("declarator").unwrap_or(d);
                let name = p.child_by_field_name("declarator").map(|x| text(src, x));
                if let (Some(ty), Some(name), "pointer_declarator") = (ty, name, p.kind()) {
                    if out.insert(name.to_string(), ty.to_string()).is_some() {
                        twice.insert(name.to_string());
                    }
                }
            }
        }
        true
    });
    out.retain(|n, _| !twice.contains(n));
    out
}

/// Pointers the kernel writes through, takes an element's address of, or passes on.
fn written_through(src: &str, func: Node<'_>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let base = |n: Node<'_>| {
        let mut b = n;
        while b.kind() == "subscript_expression" || b.kind() == "pointer_expression" {
            match b.child_by_field_name("argument") {
                Some(a) => b = a,
                None => break,
            }
        }
        (b.kind() == "identifier").then(|| text(src, b).to_string())
    };
    walk(func, &mut |n| {
        let target = match n.kind() {
            "assignment_expression" => n.child_by_field_name("left"),
            "update_expression" => n.child_by_field_name("argument"),
            "pointer_expression" if text(src, n).starts_with('&') => {
                n.child_by_field_name("argument")
            }
            "argument_list" => {
                // The pointer itself passed on (`f(x)`, `f(x + k)`), not an element's value.
                for a in named_children(n) {
                    let mut p = a;
                    while p.kind() == "binary_expression" {
                        match p.child_by_field_name("left") {
                            Some(l) => p = l,
                            None => break,
                        }
                    }
                    if p.kind() == "identifier" {
                        out.insert(text(src, p).to_string());
                    }
                }
                None
            }
            _ => None,
        };
        out.extend(target.and_then(base));
        true
    });
    out
}

/// The loop's reads `p[E]` of frozen pointers whose index reads the variable and
/// otherwise only frozen names: (buffer, index with `$v`, read on every trip).
fn reads(src: &str, l: &PassLoop<'_>, frozen: &Frozen) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    walk(l.body, &mut |n| {
        if n.kind() != "subscript_expression" {
            return true;
        }
        let arr = n
            .child_by_field_name("argument")
            .filter(|a| a.kind() == "identifier");
        let (Some(arr), Some(ix)) = (arr, index_of(n)) else {
            return true;
        };
        let buffer = text(src, arr);
        if !frozen.pointers.contains_key(buffer) {
            return true;
        }
        let mut names = Vec::new();
        walk(ix, &mut |m| {
            if m.kind() == "identifier" {
                names.push(text(src, m));
            }
            true
        });
        let moves = names.contains(&l.var.as_str());
        let fixed = names
            .iter()
            .all(|m| *m == l.var || !frozen.assigned.contains(*m));
        if moves && fixed {
            let index = with_var(src, ix, &l.var, "$v");
            out.push((buffer.to_string(), index, unconditional(n, &[l.body])));
        }
        false
    });
    out
}

/// `ix`'s text with the identifier `var` written `to`.
fn with_var(src: &str, ix: Node<'_>, var: &str, to: &str) -> String {
    let mut reps = Vec::new();
    walk(ix, &mut |m| {
        if m.kind() == "identifier" && text(src, m) == var {
            reps.push((m.byte_range(), to.to_string()));
        }
        true
    });
    let span = ix.byte_range();
    super::tree::render(src, &span, &reps)
        .map_or_else(|_| text(src, ix).to_string(), |t| one_line(&t))
}

/// The kernel with the group's loops staged over `j` slots.
fn emit(
    cx: &RewriteContext<'_>,
    h: &Header,
    group: &[PassLoop<'_>],
    staged: &[Staged],
    slots: u64,
) -> Result<String, String> {
    let src = cx.text;
    let nl = newline(src);
    let mut names = code_names(cx);
    let j = fresh("j", &mut names);
    let regs: Vec<String> = staged
        .iter()
        .map(|s| fresh(&format!("{}_st", s.buffer), &mut names))
        .collect();
    let mut e = Edits::new();
    let first = group[0].node;
    let ind = line_indent(src, first.start_byte()).to_string();
    let mut decls =
        String::from("// each thread's elements of the first passes, kept for the later ones");
    for (s, r) in staged.iter().zip(&regs) {
        decls.push_str(&format!(
            "{nl}{ind}{} {r}[{slots}];",
            s.pointee.trim_start_matches("const ").trim()
        ));
    }
    e.extend([super::edits::Edit::insert(
        first.start_byte(),
        format!("{decls}{nl}{ind}"),
    )]);
    for (k, l) in group.iter().enumerate() {
        let mine: Vec<(&Staged, &String)> = staged.iter().zip(&regs).collect();
        let code = staged_loop(src, h, l, k, &mine, (&j, slots), &ind)?;
        if let Some(code) = code {
            e.extend([super::edits::Edit::replace(l.node.byte_range(), code)]);
        }
    }
    e.apply(src).map_err(|e| e.to_string())
}

/// Loop `k` of the group, staged: the unrolled slots, then the rest as written; None when
/// it reads no staged buffer.
fn staged_loop(
    src: &str,
    h: &Header,
    l: &PassLoop<'_>,
    k: usize,
    staged: &[(&Staged, &String)],
    (j, slots): (&str, u64),
    ind: &str,
) -> Result<Option<String>, String> {
    let nl = newline(src);
    let unit = indent_unit(src, l.body, ind);
    let mut reps = Vec::new();
    let mut loads = Vec::new();
    walk(l.body, &mut |n| {
        if n.kind() != "subscript_expression" {
            return true;
        }
        let arr = n.child_by_field_name("argument").map(|a| text(src, a));
        let ix = index_of(n).map(|ix| with_var(src, ix, &l.var, "$v"));
        if let Some((s, r)) = staged
            .iter()
            .find(|(s, _)| Some(s.buffer.as_str()) == arr && Some(&s.index) == ix.as_ref())
        {
            reps.push((n.byte_range(), format!("{r}[{j}]")));
            if s.first == k && !loads.iter().any(|(b, _): &(String, String)| b == *r) {
                loads.push((r.to_string(), text(src, n).to_string()));
            }
            return false;
        }
        true
    });
    if reps.is_empty() {
        return Ok(None);
    }
    let (open, close) = inner_span(l.body);
    let inner = super::tree::render(src, &(open..close), &reps).map_err(|e| e.to_string())?;
    let in1 = format!("{ind}{unit}");
    let in2 = format!("{in1}{unit}");
    let body_ind = body_indent(src, l.body, &in2);
    let body = reindent(inner.trim(), &body_ind, &in2);
    let Header {
        ty,
        start,
        bound,
        step,
    } = h;
    let v = &l.var;
    let mut o = format!("#pragma unroll{nl}{ind}for (int {j} = 0; {j} < {slots}; ++{j}) {{{nl}");
    o.push_str(&format!("{in1}{ty} {v} = {start} + {j} * ({step});{nl}"));
    o.push_str(&format!("{in1}if ({v} < {bound}) {{{nl}"));
    for (r, read) in &loads {
        o.push_str(&format!("{in2}{r}[{j}] = {read};{nl}"));
    }
    o.push_str(&format!("{in2}{body}{nl}{in1}}}{nl}{ind}}}{nl}"));
    let past = format!("{} + {slots} * ({step})", text(src, l.start));
    let rest = super::tree::render(src, &l.node.byte_range(), &[(l.start.byte_range(), past)])
        .map_err(|e| e.to_string())?;
    o.push_str(&format!("{ind}{rest}"));
    Ok(Some(o))
}

/// The body's statements: inside the braces, or the one statement.
fn inner_span(body: Node<'_>) -> (usize, usize) {
    match body.kind() {
        "compound_statement" => (body.start_byte() + 1, body.end_byte() - 1),
        _ => (body.start_byte(), body.end_byte()),
    }
}

/// The indentation of the body's first statement line (for reindenting).
fn body_indent(src: &str, body: Node<'_>, fallback: &str) -> String {
    match body.kind() {
        "compound_statement" => named_children(body)
            .first()
            .map_or(fallback.to_string(), |s| {
                line_indent(src, s.start_byte()).to_string()
            }),
        _ => fallback.to_string(),
    }
}
