//! `interleave`: a loop that reads memory once per iteration runs U iterations per trip,
//! their bodies back to back, so the loads of all U are in flight together; the loop as
//! written then runs the iterations that remain. The cure for a thread whose loop waits
//! on one load at a time: a loop whose step is not a constant (`r += blockDim.y`, a
//! grid-stride loop, a pointer walk) is not unrolled by the compiler, and `#pragma unroll`
//! keeps a bound check between iterations, so every load waits for the one before it.
//!
//! **Matches** each innermost `for (v = A; v < B; v += S)` (`<=` too; `++v`, `v++`; the
//! initializer a declaration, an assignment or empty) and each `while (v < B) { ...;
//! v += S; }` whose last statement steps the variable, when the body reads memory (a
//! subscript, a dereference or `->`), and the body writes neither the variable nor a name
//! of the bound or the step. The decision reads the loop's own code: what the body
//! writes, what the header reads; nothing about the operation.
//!
//! **Writes** the same statements in the same order: copy `k` of the body sees
//! `(v + k·S)` wherever it read `v`, each copy in its own braces (its locals stay its
//! own), and the trip runs while `v + (U-1)·S` meets the bound; the original loop follows
//! unchanged for the rest. A step that is not a literal is cast to the variable's type
//! (`(int)(2 * blockDim.y)`), so the arithmetic stays the author's. One candidate per
//! factor in param `factors` (default 4 and 8), every matching loop of the kernel unit
//! rewritten alike. No launch change.
//!
//! **Refuses**, with the reason per loop: a body with `break`, `continue`, `return` or
//! `goto` (a copy would leave the trip early), a barrier or warp collective (threads
//! would meet it at different copies), a body that writes the variable, the bound or the
//! step, or takes the variable's address, a body that reads no memory, a decreasing loop.
//!
//! **Nests** (unroll-and-jam, [`jam`]): a loop with another loop inside is offered as a
//! two-deep nest `for (outer) { PRE; for (inner) { BODY } }` (PRE: declarations and
//! expressions before the inner loop, nothing after it) when the inner loop steps by a
//! non-constant (a lane count such as `blockDim.x` or `8 * blockDim.x`: few trips per
//! outer iteration, and a loop the compiler neither unrolls nor jams). Its candidates run
//! U outer iterations per trip: PRE U times, copy `k`'s locals renamed (`plane_1`) and
//! the outer variable read as `(v + k·S)`, then one inner loop whose body holds the U
//! copies of BODY, so U independent loads are in flight; the author's nest runs the
//! outer iterations that remain. The outer step may be a constant. Sound only when the
//! inner loop runs the same trips every outer iteration and nothing but associative,
//! commutative updates is carried, so it **refuses** a nest whose inner header reads
//! the outer variable or a name PRE or BODY writes (a triangle), whose inner loop does
//! not declare its variable, whose PRE or BODY stores to memory, calls an atomic, makes
//! a call for its effect (its value dropped), calls a function of the file that does
//! any of these (followed a few calls deep) or takes the address of an outer name,
//! whose PRE writes a name it does not declare, whose BODY writes a scalar from outside
//! other than by `s += e` (`-=`, `*=`, `|=`, `&=`, `^=`, `++`) or `s = fmaxf(s, e)`
//! (`fminf`, `fmax`, `fmin`, `max`, `min`) with `e` free of `s`, reads such a scalar
//! elsewhere, or updates it two ways (an argmax `if (v > best) { best = v; ... }`, a
//! running prefix), and any early exit, barrier or warp collective in the nest. The
//! jam reorders floating-point sums, which verification's tolerance covers. Jam
//! candidates follow the single-loop ones, one per factor, labelled "U iterations of
//! `for (...)` per trip, their inner loops fused".

use tree_sitter::Node;

use super::edits::Edit;
use super::params::Params;
use super::tree::{indent_unit, line_indent, one_line, reindent};
use super::unit::*;
use super::unroll::{is_integer_type, loop_header};
use super::RewriteContext;

const ID: &str = "interleave";

/// A loop this rewrite can interleave, read from its header (and, for `while`, its
/// last statement).
pub(super) struct Shape<'t> {
    pub node: Node<'t>,
    pub var: String,
    /// The cast a non-literal step gets: the declared type, else `decltype(v)`.
    pub ty: String,
    /// `int r = 0` when the `for` declares its variable (hoisted above both loops).
    pub decl: Option<String>,
    /// `r = 0` when the `for` assigns it.
    pub assign: Option<String>,
    pub op: &'static str,
    pub bound: String,
    pub step: Step,
    pub body: Node<'t>,
    /// `while` loops: the trailing statement that steps the variable.
    pub update: Option<Node<'t>>,
}

impl<'t> Shape<'t> {
    /// A loop read from its condition (variable, comparison, bound) and body, before its
    /// header or trailing step is read.
    pub(super) fn bare(
        node: Node<'t>,
        (var, op, bound): (String, &'static str, String),
        body: Node<'t>,
    ) -> Self {
        Shape {
            node,
            var,
            ty: String::new(),
            decl: None,
            assign: None,
            op,
            bound,
            step: Step::Literal(1),
            body,
            update: None,
        }
    }
}

#[derive(Clone)]
pub(super) enum Step {
    Literal(u64),
    Expr(String),
}

pub fn interleave(cx: &RewriteContext<'_>) -> R {
    let unit = Unit::of(cx, ID)?;
    let factors = Params(cx.params).uints("factors", &[4, 8], 2..=16)?;
    let jam = Params(cx.params).bool("jam", true)?;
    let mut loops = Vec::new();
    let mut nests = Vec::new();
    let mut reasons = Vec::new();
    for f in &unit.funcs {
        let Some(body) = f.child_by_field_name("body") else {
            continue;
        };
        let shared = shared_arrays(cx, *f);
        for l in descendants(body).into_iter().filter(|n| is_loop(*n)) {
            if jam && jam::holds_loop(l) {
                match jam::nest(cx, *f, l, &shared) {
                    Ok(n) => nests.push(n),
                    Err(why) => reasons.push(format!("`{}`: {why}", loop_header(cx, l))),
                }
                continue;
            }
            match shape(cx, l, &shared) {
                Ok(s) => loops.push(s),
                Err(why) => reasons.push(format!("`{}`: {why}", loop_header(cx, l))),
            }
        }
    }
    if loops.is_empty() && nests.is_empty() {
        let why = if reasons.is_empty() {
            format!("`{}` has no loop", cx.kernel.name)
        } else {
            format!(
                "no loop of `{}` can run several iterations per trip: {}",
                cx.kernel.name,
                reasons.join("; ")
            )
        };
        return Err(na(why));
    }
    let mut out = Vec::new();
    for &u in factors.iter().filter(|_| !loops.is_empty()) {
        let edits: Vec<Edit> = loops
            .iter()
            .map(|s| Edit::replace(s.node.byte_range(), emit(cx, s, u)))
            .collect();
        let n = loops.len();
        let what = if n == 1 {
            format!("`{}`", loop_header(cx, loops[0].node))
        } else {
            format!("{n} loops")
        };
        let label = format!("{u} iterations per trip of {what}, their loads in flight together");
        out.push(finish(cx, ID, label, edits)?);
    }
    for &u in factors.iter().filter(|_| !nests.is_empty()) {
        let label = jam::label(cx, &nests, u);
        out.push(finish(cx, ID, label, jam::edits(cx, &nests, u))?);
    }
    Ok(out)
}

/// `text` with the loops of `kernel` interleaved `factor` iterations per trip, where any
/// loop can be; what another rewrite calls on the loop it has just written.
pub(super) fn interleaved(text: &str, kernel: &str, factor: u64) -> Option<String> {
    let params = std::collections::BTreeMap::from([
        ("factors".to_string(), serde_json::json!([factor])),
        ("jam".to_string(), serde_json::json!(false)),
    ]);
    let out = super::with_text(crate::syntax::Lang::Cuda, text, kernel, &params, interleave)?;
    out.ok()?.into_iter().next().map(|c| c.text)
}

pub(super) fn is_loop(n: Node<'_>) -> bool {
    matches!(
        n.kind(),
        "for_statement" | "while_statement" | "do_statement"
    )
}

fn shape<'t>(cx: &RewriteContext<'t>, l: Node<'t>, shared: &[&str]) -> Result<Shape<'t>, String> {
    let s = loop_shape(cx, l, shared)?;
    if [l.prev_named_sibling(), l.next_named_sibling()]
        .into_iter()
        .flatten()
        .any(|n| is_loop(n) && tests_var(cx, n, &s.var))
    {
        return Err(format!(
            "a loop over `{}` is beside it (it is interleaved already, or the author split it)",
            s.var
        ));
    }
    if let Step::Literal(k) = s.step {
        return Err(format!(
            "its step is the constant {k}: the compiler unrolls such a loop (`unroll` sets the factor)"
        ));
    }
    Ok(s)
}

/// An innermost `for` or `while` loop's header read into a [`Shape`], with the checks
/// every rewrite that runs its body several times per trip needs ([`body_allows`]); what
/// `interleave` and `vector_loops` share.
pub(super) fn loop_shape<'t>(
    cx: &RewriteContext<'t>,
    l: Node<'t>,
    shared: &[&str],
) -> Result<Shape<'t>, String> {
    let body = l.child_by_field_name("body").ok_or("no body")?;
    if descendants(body).into_iter().skip(1).any(is_loop) {
        return Err("another loop is inside it".into());
    }
    if l.parent().map(|p| p.kind()) != Some("compound_statement") {
        return Err("it is not directly inside braces".into());
    }
    let (var, op, bound) = condition(cx, l)?;
    let mut s = Shape::bare(l, (var, op, bound), body);
    match l.kind() {
        "for_statement" => for_header(cx, &mut s)?,
        "while_statement" => while_tail(cx, &mut s)?,
        _ => return Err("a `do` loop runs its body before the test".into()),
    }
    if s.ty.is_empty() {
        s.ty = format!("decltype({})", s.var);
    }
    body_allows(cx, &s, shared)?;
    Ok(s)
}

/// Does loop `n`'s condition start with `var` (`var < B`, `var + 3 * S < B`)?
fn tests_var(cx: &RewriteContext<'_>, n: Node<'_>, var: &str) -> bool {
    let Some(cond) = n.child_by_field_name("condition") else {
        return false;
    };
    let t = text(cx, cond).trim_start_matches(['(', ' ']);
    t.strip_prefix(var)
        .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
}

/// `v < B` or `v <= B`: the variable, the operator and the bound.
fn condition<'t>(
    cx: &RewriteContext<'t>,
    l: Node<'t>,
) -> Result<(String, &'static str, String), String> {
    let cond = l.child_by_field_name("condition").ok_or("no condition")?;
    let cond = if cond.kind() == "parenthesized_expression" || cond.kind() == "condition_clause" {
        named_children(cond)
            .into_iter()
            .next()
            .ok_or("no condition")?
    } else {
        cond
    };
    let op = match field_kind(cond, "operator") {
        Some("<") => "<",
        Some("<=") => "<=",
        _ => {
            return Err(format!(
                "the condition `{}` is not `v < bound` or `v <= bound`",
                one_line(text(cx, cond))
            ))
        }
    };
    let left = cond
        .child_by_field_name("left")
        .filter(|n| n.kind() == "identifier")
        .ok_or_else(|| format!("`{}` does not test a variable", one_line(text(cx, cond))))?;
    let right = cond.child_by_field_name("right").ok_or("no bound")?;
    Ok((text(cx, left).to_string(), op, text(cx, right).to_string()))
}

/// A `for` loop's initializer (declared, assigned or none) and step.
fn for_header(cx: &RewriteContext<'_>, s: &mut Shape<'_>) -> Result<(), String> {
    if let Some(init) = s.node.child_by_field_name("initializer") {
        match init.kind() {
            "declaration" => {
                let t = init.child_by_field_name("type").ok_or("no type")?;
                if !is_integer_type(cx, t) {
                    return Err(format!("`{}` is not an integer type", text(cx, t)));
                }
                s.ty = text(cx, t).to_string();
                s.decl = Some(text(cx, init).trim_end_matches(';').trim().to_string());
            }
            "assignment_expression" | "comma_expression" => {
                s.assign = Some(text(cx, init).to_string());
            }
            _ => return Err("the initializer is not a declaration or an assignment".into()),
        }
    }
    let update = s.node.child_by_field_name("update").ok_or("no update")?;
    s.step = step_of(cx, update, &s.var)?;
    Ok(())
}

/// A `while` loop's last statement, which must step the variable.
fn while_tail<'t>(cx: &RewriteContext<'t>, s: &mut Shape<'t>) -> Result<(), String> {
    if s.body.kind() != "compound_statement" {
        return Err("its body is one statement, with no step of the variable".into());
    }
    let no_step = || format!("its last statement does not step `{}`", s.var);
    let last = named_children(s.body)
        .into_iter()
        .rfind(|n| n.kind() != "comment")
        .filter(|n| n.kind() == "expression_statement")
        .ok_or_else(no_step)?;
    let e = named_children(last)
        .into_iter()
        .next()
        .ok_or_else(no_step)?;
    s.step = step_of(cx, e, &s.var)?;
    s.update = Some(last);
    Ok(())
}

/// `++v`, `v++`, `v += S`: the step; anything else is refused.
fn step_of(cx: &RewriteContext<'_>, e: Node<'_>, var: &str) -> Result<Step, String> {
    let is_var =
        |n: Option<Node>| n.is_some_and(|n| n.kind() == "identifier" && text(cx, n) == var);
    let upd = one_line(text(cx, e));
    match e.kind() {
        "update_expression" if is_var(e.child_by_field_name("argument")) => {
            if upd.contains("++") {
                Ok(Step::Literal(1))
            } else {
                Err(format!("`{upd}` counts down"))
            }
        }
        "assignment_expression"
            if is_var(e.child_by_field_name("left")) && field_kind(e, "operator") == Some("+=") =>
        {
            let right = e.child_by_field_name("right").ok_or("no step")?;
            let r = text(cx, right);
            if identifiers(r).any(|w| w == var) {
                return Err(format!("the step `{upd}` reads `{var}` (its steps differ)"));
            }
            Ok(match int_literal(r) {
                Some(0) => return Err(format!("`{upd}` does not move")),
                Some(s) => Step::Literal(s),
                None => Step::Expr(r.to_string()),
            })
        }
        _ => Err(format!(
            "the step `{upd}` is not `++{var}` or `{var} += step`"
        )),
    }
}

/// The body may run several times per trip: it must read memory, leave the loop only at
/// its end, meet no barrier, and leave the variable, the bound and the step alone.
fn body_allows(cx: &RewriteContext<'_>, s: &Shape<'_>, shared: &[&str]) -> Result<(), String> {
    let skip = s.update.map(|u| u.byte_range());
    let nodes: Vec<Node> = descendants(s.body)
        .into_iter()
        .filter(|n| skip.as_ref().is_none_or(|r| !r.contains(&n.start_byte())))
        .collect();
    if !nodes.iter().any(|n| reads_memory(cx, *n)) {
        return Err("its body reads no memory (nothing to have in flight)".into());
    }
    if !nodes
        .iter()
        .any(|n| reads_memory(cx, *n) && !in_shared(cx, *n, shared))
    {
        return Err("its body reads only shared memory (no long load to overlap)".into());
    }
    if let Some(why) = nodes.iter().find_map(|n| forbidden(cx, *n)) {
        return Err(why);
    }
    let written = written_names(cx, &nodes);
    if written.iter().any(|w| *w == s.var) {
        return Err(format!("its body changes `{}`", s.var));
    }
    let step = match &s.step {
        Step::Expr(e) => e.as_str(),
        Step::Literal(_) => "",
    };
    for name in identifiers(&s.bound).chain(identifiers(step)) {
        if written.contains(&name) {
            return Err(format!(
                "its body writes `{name}`, which the bound or the step reads"
            ));
        }
    }
    let address_taken = nodes.iter().any(|n| {
        n.kind() == "pointer_expression"
            && text(cx, *n).trim_start().starts_with('&')
            && n.child_by_field_name("argument")
                .is_some_and(|a| text(cx, a) == s.var)
    });
    if address_taken {
        return Err(format!("its body takes `&{}`", s.var));
    }
    Ok(())
}

/// Why node `n` may not run several times per trip: an early exit, inline assembly, a
/// barrier or a warp collective.
fn forbidden(cx: &RewriteContext<'_>, n: Node<'_>) -> Option<String> {
    match n.kind() {
        "break_statement" | "continue_statement" | "return_statement" | "goto_statement"
        | "labeled_statement" => Some(format!("its body has `{}`", first_word(text(cx, n)))),
        "gnu_asm_expression" | "asm_statement" => Some("its body has inline assembly".into()),
        "call_expression" => n
            .child_by_field_name("function")
            .filter(|f| is_collective(text(cx, *f)))
            .map(|f| {
                format!(
                    "its body calls `{}` (a barrier or warp collective)",
                    text(cx, f)
                )
            }),
        _ => None,
    }
}

/// A subscript, a dereference or an `->` access: a load or a store of memory.
fn reads_memory(cx: &RewriteContext<'_>, n: Node<'_>) -> bool {
    match n.kind() {
        "subscript_expression" => true,
        "pointer_expression" => text(cx, n).trim_start().starts_with('*'),
        "field_expression" => n
            .child_by_field_name("operator")
            .is_some_and(|o| text(cx, o) == "->"),
        _ => false,
    }
}

/// A subscript of an array the unit declares `__shared__`.
fn in_shared(cx: &RewriteContext<'_>, n: Node<'_>, shared: &[&str]) -> bool {
    n.kind() == "subscript_expression"
        && n.child_by_field_name("argument")
            .is_some_and(|a| a.kind() == "identifier" && shared.contains(&text(cx, a)))
}

/// The names of the arrays a function declares `__shared__`.
pub(super) fn shared_arrays<'s>(cx: &RewriteContext<'s>, f: Node<'_>) -> Vec<&'s str> {
    descendants(f)
        .into_iter()
        .filter(|d| d.kind() == "declaration" && text(cx, *d).contains("__shared__"))
        .flat_map(descendants)
        .filter(|n| n.kind() == "identifier")
        .filter(|n| n.parent().is_some_and(|p| p.kind() == "array_declarator"))
        .map(|n| text(cx, n))
        .collect()
}

pub(super) fn is_collective(callee: &str) -> bool {
    let c = callee.rsplit("::").next().unwrap_or(callee);
    c.contains("sync") || c.starts_with("__shfl") || c.starts_with("__reduce") || c == "__ballot"
}

fn first_word(s: &str) -> &str {
    s.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .find(|w| !w.is_empty())
        .unwrap_or(s)
}

/// Names the nodes assign, step or declare.
fn written_names<'s>(cx: &RewriteContext<'s>, nodes: &[Node<'_>]) -> Vec<&'s str> {
    let mut out = Vec::new();
    for n in nodes {
        let target = match n.kind() {
            "assignment_expression" => n.child_by_field_name("left"),
            "update_expression" => n.child_by_field_name("argument"),
            "init_declarator" => n.child_by_field_name("declarator"),
            "declaration" => named_children(*n)
                .into_iter()
                .find(|c| c.kind() == "identifier"),
            _ => None,
        };
        if let Some(t) = target.filter(|t| t.kind() == "identifier") {
            out.push(text(cx, t));
        }
    }
    out
}

pub(super) fn identifiers(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
}

/// `k` steps past the variable, in the variable's type: `8`, or `(int)(2 * blockDim.y)`.
fn offset(s: &Shape<'_>, k: u64) -> String {
    match &s.step {
        Step::Literal(st) => (k * st).to_string(),
        Step::Expr(e) if k == 1 => format!("({})({})", s.ty, e),
        Step::Expr(e) => format!("({})({k} * {})", s.ty, paren(e)),
    }
}

fn paren(e: &str) -> String {
    let simple = e
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    if simple {
        e.to_string()
    } else {
        format!("({e})")
    }
}

/// The interleaved loop followed by the original one for the iterations that remain.
fn emit(cx: &RewriteContext<'_>, s: &Shape<'_>, u: u64) -> String {
    let nl = if cx.text.contains("\r\n") {
        "\r\n"
    } else {
        "\n"
    };
    let ind = line_indent(cx.text, s.node.start_byte()).to_string();
    let step_unit = indent_unit(cx.text, s.body, &ind);
    let v = &s.var;
    let cond = format!("{v} + {} {} {}", offset(s, u - 1), s.op, s.bound);
    let upd = format!("{v} += {}", offset(s, u));
    let original = text(cx, s.node);
    match (s.update, &s.decl) {
        (Some(last), _) => {
            let inner = format!("{ind}{step_unit}");
            let copies = copies(cx, s, u, &inner, Some(last), nl);
            format!("while ({cond}) {{{nl}{copies}{inner}{upd};{nl}{ind}}}{nl}{ind}{original}")
        }
        (None, Some(decl)) => {
            let inner = format!("{ind}{step_unit}");
            let body_at = format!("{inner}{step_unit}");
            let copies = copies(cx, s, u, &body_at, None, nl);
            let rest = rest_loop(cx, s, &ind, &inner);
            format!(
                "{{ // {u} iterations per trip, then the rest{nl}{inner}{decl};{nl}\
                 {inner}for (; {cond}; {upd}) {{{nl}{copies}{inner}}}{nl}{inner}{rest}{nl}{ind}}}"
            )
        }
        (None, None) => {
            let inner = format!("{ind}{step_unit}");
            let copies = copies(cx, s, u, &inner, None, nl);
            let init = s.assign.clone().unwrap_or_default();
            let rest = rest_loop(cx, s, &ind, &ind);
            format!("for ({init}; {cond}; {upd}) {{{nl}{copies}{ind}}}{nl}{ind}{rest}")
        }
    }
}

/// `for (; v < B; update) body`, the body re-indented from `from` to `to`.
fn rest_loop(cx: &RewriteContext<'_>, s: &Shape<'_>, from: &str, to: &str) -> String {
    let update = s
        .node
        .child_by_field_name("update")
        .map_or("", |u| text(cx, u));
    let body = reindent(text(cx, s.body), from, to);
    format!("for (; {} {} {}; {update}) {body}", s.var, s.op, s.bound)
}

/// The `u` copies of the body, each in braces at indentation `at`, copy `k` reading
/// `(v + k·S)` for `v`; `last` (a `while`'s step) is left out.
fn copies(
    cx: &RewriteContext<'_>,
    s: &Shape<'_>,
    u: u64,
    at: &str,
    last: Option<Node<'_>>,
    nl: &str,
) -> String {
    let ind = line_indent(cx.text, s.node.start_byte()).to_string();
    let braced = s.body.kind() == "compound_statement";
    let (start, end) = match last {
        Some(l) => (s.body.start_byte() + 1, l.start_byte()),
        None if braced => (s.body.start_byte() + 1, s.body.end_byte() - 1),
        None => (s.body.start_byte(), s.body.end_byte()),
    };
    let uses: Vec<Node> = descendants(s.body)
        .into_iter()
        .filter(|n| n.kind() == "identifier" && text(cx, *n) == s.var)
        .filter(|n| start <= n.start_byte() && n.end_byte() <= end)
        .collect();
    let mut out = String::new();
    for k in 0..u {
        let mut piece = String::new();
        let mut pos = start;
        for n in &uses {
            piece.push_str(&cx.text[pos..n.start_byte()]);
            if k == 0 {
                piece.push_str(&s.var);
            } else {
                piece.push_str(&format!("({} + {})", s.var, offset(s, k)));
            }
            pos = n.end_byte();
        }
        piece.push_str(&cx.text[pos..end]);
        let piece = if braced {
            let inner = reindent(piece.trim_end(), &ind, at);
            format!("{at}{{{inner}{nl}{at}}}{nl}")
        } else {
            format!("{at}{{ {} }}{nl}", piece.trim())
        };
        out.push_str(&piece);
    }
    out
}

mod jam;

#[cfg(test)]
mod tests;
