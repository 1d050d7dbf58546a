//! Unroll-and-jam, `interleave`'s answer to a two-deep nest `for (outer) { PRE; for
//! (inner) { BODY } }` whose inner loop has few trips per outer iteration: U outer
//! iterations per trip, PRE copied U times (its locals renamed per copy), and one inner
//! loop whose body holds the U copies of BODY, so U independent loads are in flight.
//! Sound when the inner loop runs the same trips in every outer iteration (its header
//! reads neither the outer variable nor what PRE or BODY write) and BODY carries nothing
//! from one outer iteration to the next but associative, commutative updates (`s += e`,
//! `s = fmaxf(s, e)`): the jam only reorders those.

use tree_sitter::Node;

use super::super::edits::Edit;
use super::super::tree::{line_indent, reindent};
use super::super::unit::*;
use super::super::unroll::loop_header;
use super::super::RewriteContext;
use super::{
    condition, for_header, forbidden, in_shared, is_loop, offset, reads_memory, rest_loop, step_of,
    written_names, Shape, Step,
};

/// A nest that can run several outer iterations per trip, its inner loops fused.
pub(super) struct Nest<'t> {
    outer: Shape<'t>,
    pre: Vec<Node<'t>>,
    inner: Node<'t>,
    /// The names PRE declares, renamed per copy.
    locals: Vec<String>,
    /// Every identifier of the function, so renamed locals stay fresh.
    taken: Vec<String>,
}

/// Does loop `l` hold another loop?
pub(super) fn holds_loop(l: Node<'_>) -> bool {
    l.child_by_field_name("body")
        .is_some_and(|b| descendants(b).into_iter().any(is_loop))
}

/// Loop `l` read as a nest whose outer iterations can share a trip, or why not.
pub(super) fn nest<'t>(
    cx: &RewriteContext<'t>,
    f: Node<'t>,
    l: Node<'t>,
    shared: &[&str],
) -> Result<Nest<'t>, String> {
    let (pre, inner) = parts(l)?;
    let inner_body = inner.child_by_field_name("body").ok_or("no body")?;
    if descendants(inner_body).into_iter().skip(1).any(is_loop) {
        return Err("its inner loop holds another loop (only two-deep nests are jammed)".into());
    }
    let outer = outer_shape(cx, l)?;
    let locals: Vec<String> = pre
        .iter()
        .flat_map(|p| declared(cx, *p))
        .map(str::to_string)
        .collect();
    pre_allows(cx, &pre, &locals, &outer.var)?;
    inner_header_allows(cx, inner, &outer.var, &pre)?;
    jam_body_allows(cx, inner_body, &pre, &locals, &outer.var, shared)?;
    let taken = descendants(f)
        .into_iter()
        .filter(|n| n.kind() == "identifier")
        .map(|n| text(cx, n).to_string())
        .collect();
    Ok(Nest {
        outer,
        pre,
        inner,
        locals,
        taken,
    })
}

/// The statements before the inner loop and the inner loop, the last statement of the
/// outer loop's braces.
fn parts(l: Node<'_>) -> Result<(Vec<Node<'_>>, Node<'_>), String> {
    if l.kind() != "for_statement" {
        return Err("only a `for` loop runs several outer iterations per trip".into());
    }
    if l.parent().map(|p| p.kind()) != Some("compound_statement") {
        return Err("it is not directly inside braces".into());
    }
    let body = l.child_by_field_name("body").ok_or("no body")?;
    if body.kind() != "compound_statement" {
        return Err("its body is not in braces".into());
    }
    let stmts: Vec<Node> = named_children(body)
        .into_iter()
        .filter(|n| n.kind() != "comment")
        .collect();
    let (inner, pre) = stmts.split_last().ok_or("its body is empty")?;
    if pre
        .iter()
        .any(|p| is_loop(*p) || descendants(*p).into_iter().any(is_loop))
    {
        return Err(
            "a statement follows its inner loop or holds a loop (only statements before one inner loop are copied)"
                .into(),
        );
    }
    if inner.kind() != "for_statement" {
        return Err("its inner loop is not a `for` loop".into());
    }
    Ok((pre.to_vec(), *inner))
}

/// The outer loop's header, as `interleave` requires of any loop, with a constant step
/// allowed: the compiler does not jam the inner loops of an unrolled loop.
fn outer_shape<'t>(cx: &RewriteContext<'t>, l: Node<'t>) -> Result<Shape<'t>, String> {
    let (var, op, bound) = condition(cx, l)?;
    let body = l.child_by_field_name("body").ok_or("no body")?;
    let mut s = Shape::bare(l, (var, op, bound), body);
    for_header(cx, &mut s)?;
    if s.ty.is_empty() {
        s.ty = format!("decltype({})", s.var);
    }
    let nodes = descendants(body);
    let written = written_names(cx, &nodes);
    let step = match &s.step {
        Step::Expr(e) => e.as_str(),
        Step::Literal(_) => "",
    };
    let header = std::iter::once(s.var.as_str())
        .chain(super::identifiers(&s.bound))
        .chain(super::identifiers(step));
    for name in header {
        if written.contains(&name) {
            return Err(format!(
                "its body writes `{name}`, which the outer header reads"
            ));
        }
    }
    Ok(s)
}

/// The names a declaration statement declares.
fn declared<'s>(cx: &RewriteContext<'s>, n: Node<'_>) -> Vec<&'s str> {
    if n.kind() != "declaration" {
        return Vec::new();
    }
    named_children(n)
        .into_iter()
        .filter_map(|d| match d.kind() {
            "identifier" => Some(d),
            "init_declarator" => d.child_by_field_name("declarator"),
            _ => None,
        })
        .map(|d| declarator_name(d))
        .filter(|d| d.kind() == "identifier")
        .map(|d| text(cx, d))
        .collect()
}

/// The identifier inside `*p`, `a[4]`, `p`.
fn declarator_name(mut d: Node<'_>) -> Node<'_> {
    while let Some(inner) = d.child_by_field_name("declarator") {
        d = inner;
    }
    d
}

/// A store to memory, an atomic, a call whose value is dropped (it is called for what it
/// does), a call of a function of this file that does any of these, or the address of a
/// name not in `mine` among `nodes`: what the jam may not reorder.
fn store(cx: &RewriteContext<'_>, nodes: &[Node<'_>], mine: &[&str]) -> Option<String> {
    store_within(cx, nodes, mine, 0)
}

/// How deep [`store`] follows calls into the file's own functions; deeper is refused.
const CALL_DEPTH: usize = 4;

fn store_within(
    cx: &RewriteContext<'_>,
    nodes: &[Node<'_>],
    mine: &[&str],
    depth: usize,
) -> Option<String> {
    nodes.iter().find_map(|n| {
        let target = match n.kind() {
            "assignment_expression" => n.child_by_field_name("left"),
            "update_expression" => n.child_by_field_name("argument"),
            "expression_statement" => {
                let call = named_children(*n)
                    .into_iter()
                    .find(|e| e.kind() == "call_expression")?;
                return Some(format!(
                    "a call `{}` for its effect",
                    super::super::tree::one_line(text(cx, call))
                ));
            }
            "pointer_expression" if text(cx, *n).trim_start().starts_with('&') => {
                return n
                    .child_by_field_name("argument")
                    .filter(|a| a.kind() == "identifier" && !mine.contains(&text(cx, *a)))
                    .map(|a| format!("an address `&{}` of a name from outside", text(cx, a)));
            }
            "call_expression" => {
                let f = n
                    .child_by_field_name("function")
                    .map_or("", |f| text(cx, f));
                if f.starts_with("atomic") {
                    return Some(format!("an atomic `{f}`"));
                }
                return callee_effect(cx, *n, depth)
                    .map(|why| format!("a call `{f}` that makes {why}"));
            }
            _ => None,
        }?;
        (target.kind() != "identifier").then(|| format!("a store to `{}`", text(cx, target)))
    })
}

/// What a call of a function defined in this file does that the jam may not reorder
/// ([`store`] on its body, its own locals and parameters its own), or `None` for a
/// function that only computes, or one defined elsewhere (a builtin; CUDA's math
/// functions have no effects).
fn callee_effect(cx: &RewriteContext<'_>, call: Node<'_>, depth: usize) -> Option<String> {
    let name = plain_callee(cx, call)?;
    let def = descendants(cx.tree.root_node())
        .into_iter()
        .filter(|d| d.kind() == "function_definition")
        .find(|d| name_and_params(cx, *d).is_some_and(|(n, _)| n == name))?;
    if depth >= CALL_DEPTH {
        return Some(format!("calls {CALL_DEPTH} deep, not followed further"));
    }
    let nodes = descendants(def);
    let params = nodes
        .iter()
        .filter(|n| n.kind() == "parameter_declaration")
        .filter_map(|n| n.child_by_field_name("declarator"))
        .map(declarator_name)
        .filter(|d| d.kind() == "identifier")
        .map(|d| text(cx, d));
    let own: Vec<&str> = nodes
        .iter()
        .flat_map(|n| declared(cx, *n))
        .chain(params)
        .collect();
    let body: Vec<Node<'_>> = def
        .child_by_field_name("body")
        .map(descendants)
        .unwrap_or_default();
    store_within(cx, &body, &own, depth + 1)
}

/// PRE may only declare and compute locals: no store, no atomic, no barrier, no early exit,
/// and no write to a name it does not declare.
fn pre_allows(
    cx: &RewriteContext<'_>,
    pre: &[Node<'_>],
    locals: &[String],
    var: &str,
) -> Result<(), String> {
    let nodes: Vec<Node> = pre.iter().flat_map(|p| descendants(*p)).collect();
    if let Some(p) = pre
        .iter()
        .find(|p| !matches!(p.kind(), "declaration" | "expression_statement"))
    {
        return Err(format!(
            "before its inner loop, `{}` is not a declaration or an expression",
            super::super::tree::one_line(text(cx, *p))
        ));
    }
    if let Some(why) = nodes.iter().find_map(|n| forbidden(cx, *n)) {
        return Err(format!("before its inner loop, {why}"));
    }
    let mine: Vec<&str> = locals.iter().map(String::as_str).collect();
    if let Some(why) = store(cx, &nodes, &mine) {
        return Err(format!("before its inner loop, {why}"));
    }
    if locals.iter().any(|l| l == var) {
        return Err(format!("before its inner loop, `{var}` is declared again"));
    }
    let written = written_names(cx, &nodes);
    if let Some(w) = written.iter().find(|w| !locals.iter().any(|l| l == *w)) {
        return Err(format!(
            "before its inner loop, `{w}` is written, which the loop does not declare (state carried between outer iterations)"
        ));
    }
    Ok(())
}

/// The inner loop must run the same trips in every outer iteration: its header reads
/// neither the outer variable nor a name PRE or BODY writes, and declares its variable.
fn inner_header_allows(
    cx: &RewriteContext<'_>,
    inner: Node<'_>,
    var: &str,
    pre: &[Node<'_>],
) -> Result<(), String> {
    let init = inner.child_by_field_name("initializer");
    if init.map(|i| i.kind()) != Some("declaration") {
        return Err("its inner loop does not declare its variable".into());
    }
    let (ivar, _, _) = condition(cx, inner).map_err(|w| format!("its inner loop: {w}"))?;
    let update = inner.child_by_field_name("update").ok_or("no update")?;
    if let Step::Literal(k) =
        step_of(cx, update, &ivar).map_err(|w| format!("its inner loop: {w}"))?
    {
        return Err(format!(
            "its inner loop steps by the constant {k}: the compiler unrolls it, and a lane-strided inner loop is where the jam pays"
        ));
    }
    let body = inner.child_by_field_name("body").ok_or("no body")?;
    let header = &cx.text[inner.start_byte()..body.start_byte()];
    let mut nodes: Vec<Node> = pre.iter().flat_map(|p| descendants(*p)).collect();
    nodes.extend(descendants(body));
    let written = written_names(cx, &nodes);
    for name in super::identifiers(header) {
        if name == var {
            return Err(format!(
                "its inner loop's header reads `{var}` (its trips differ per outer iteration)"
            ));
        }
        if written.contains(&name) {
            return Err(format!(
                "its inner loop's header reads `{name}`, which the nest writes"
            ));
        }
    }
    Ok(())
}

/// The kind of associative, commutative update `n` makes to a carried `name`, or None.
fn fold<'s>(cx: &RewriteContext<'s>, n: Node<'_>, name: &str) -> Option<&'static str> {
    if n.kind() == "update_expression" {
        return Some("+");
    }
    let right = n.child_by_field_name("right")?;
    let reads_self = |e: Node<'_>| super::identifiers(text(cx, e)).any(|w| w == name);
    match field_kind(n, "operator")? {
        "+=" | "-=" => (!reads_self(right)).then_some("+"),
        "*=" => (!reads_self(right)).then_some("*"),
        "|=" => (!reads_self(right)).then_some("|"),
        "&=" => (!reads_self(right)).then_some("&"),
        "^=" => (!reads_self(right)).then_some("^"),
        "=" if right.kind() == "call_expression" => {
            let f = text(cx, right.child_by_field_name("function")?);
            let kind = match f.rsplit("::").next().unwrap_or(f) {
                "fmaxf" | "fmax" | "max" => "max",
                "fminf" | "fmin" | "min" => "min",
                _ => return None,
            };
            let args = named_children(right.child_by_field_name("arguments")?);
            let [a, b] = args.as_slice() else { return None };
            let own = |x: &Node| x.kind() == "identifier" && text(cx, *x) == name;
            match (own(a), own(b)) {
                (true, false) if !reads_self(*b) => Some(kind),
                (false, true) if !reads_self(*a) => Some(kind),
                _ => None,
            }
        }
        _ => None,
    }
}

/// BODY may write its own locals, PRE's locals (each copy has its own) and scalars
/// carried with one associative, commutative update that nothing else reads; it must
/// read memory and store none, meet no barrier and not leave early.
fn jam_body_allows(
    cx: &RewriteContext<'_>,
    body: Node<'_>,
    pre: &[Node<'_>],
    locals: &[String],
    var: &str,
    shared: &[&str],
) -> Result<(), String> {
    let nodes = descendants(body);
    if !nodes
        .iter()
        .any(|n| reads_memory(cx, *n) && !in_shared(cx, *n, shared))
    {
        return Err("its inner loop reads no global memory (nothing to have in flight)".into());
    }
    if let Some(why) = nodes.iter().find_map(|n| forbidden(cx, *n)) {
        return Err(format!("its inner loop: {why}"));
    }
    let own: Vec<&str> = nodes.iter().flat_map(|n| declared(cx, *n)).collect();
    let mut mine = own.clone();
    mine.extend(locals.iter().map(String::as_str));
    if let Some(why) = store(cx, &nodes, &mine) {
        return Err(format!(
            "its inner loop has {why}, which the jam would reorder"
        ));
    }
    if let Some(d) = own
        .iter()
        .find(|d| **d == var || locals.iter().any(|l| l == *d))
    {
        return Err(format!("its inner loop declares `{d}` again"));
    }
    let carried = carried_updates(cx, &nodes, &own, locals)?;
    let mut everywhere: Vec<Node> = pre.iter().flat_map(|p| descendants(*p)).collect();
    everywhere.extend(nodes.iter().copied());
    for (name, count) in carried {
        let reads = everywhere
            .iter()
            .filter(|n| n.kind() == "identifier" && text(cx, **n) == name)
            .count();
        if reads != count {
            return Err(format!(
                "its inner loop reads `{name}` besides updating it (a running value, order-sensitive)"
            ));
        }
    }
    Ok(())
}

/// The scalars BODY carries, each with how often its updates name it; refused when an
/// update is not associative and commutative or mixes kinds.
fn carried_updates<'s>(
    cx: &RewriteContext<'s>,
    nodes: &[Node<'_>],
    own: &[&str],
    locals: &[String],
) -> Result<Vec<(&'s str, usize)>, String> {
    let mut out: Vec<(&str, &str, usize)> = Vec::new();
    for n in nodes {
        let target = match n.kind() {
            "assignment_expression" => n.child_by_field_name("left"),
            "update_expression" => n.child_by_field_name("argument"),
            _ => None,
        };
        let Some(t) = target.filter(|t| t.kind() == "identifier") else {
            continue;
        };
        let name = text(cx, t);
        if own.contains(&name) || locals.iter().any(|l| l == name) {
            continue;
        }
        let kind = fold(cx, *n, name).ok_or_else(|| {
            format!(
                "its inner loop's `{}` is not an associative, commutative update of `{name}` (order-sensitive)",
                super::super::tree::one_line(text(cx, *n))
            )
        })?;
        let names = descendants(*n)
            .into_iter()
            .filter(|d| d.kind() == "identifier" && text(cx, *d) == name)
            .count();
        match out.iter_mut().find(|(w, _, _)| *w == name) {
            Some((_, k, _)) if *k != kind => {
                return Err(format!("its inner loop updates `{name}` in two ways"));
            }
            Some((_, _, c)) => *c += names,
            None => out.push((name, kind, names)),
        }
    }
    Ok(out.into_iter().map(|(n, _, c)| (n, c)).collect())
}

/// The nest with `u` outer iterations per trip, their inner loops fused, then the
/// author's nest for the outer iterations that remain.
pub(super) fn emit_nest(cx: &RewriteContext<'_>, n: &Nest<'_>, u: u64) -> String {
    let s = &n.outer;
    let nl = if cx.text.contains("\r\n") {
        "\r\n"
    } else {
        "\n"
    };
    let ind = line_indent(cx.text, s.node.start_byte()).to_string();
    let unit = super::super::tree::indent_unit(cx.text, s.body, &ind);
    let v = &s.var;
    let cond = format!("{v} + {} {} {}", offset(s, u - 1), s.op, s.bound);
    let upd = format!("{v} += {}", offset(s, u));
    let at = if s.decl.is_some() {
        format!("{ind}{unit}")
    } else {
        ind.clone()
    };
    let jam = jammed(cx, n, u, &format!("{at}{unit}"), &unit, nl);
    let rest = rest_loop(cx, s, &ind, &at);
    match &s.decl {
        Some(decl) => format!(
            "{{ // {u} outer iterations per trip, their inner loops fused, then the rest{nl}\
             {at}{decl};{nl}{at}for (; {cond}; {upd}) {{{nl}{jam}{at}}}{nl}{at}{rest}{nl}{ind}}}"
        ),
        None => {
            let init = s.assign.clone().unwrap_or_default();
            format!("for ({init}; {cond}; {upd}) {{{nl}{jam}{at}}}{nl}{at}{rest}")
        }
    }
}

/// The body of the jammed trip at indentation `at`: PRE `u` times, then the inner loop
/// with the `u` copies of its body.
fn jammed(cx: &RewriteContext<'_>, n: &Nest<'_>, u: u64, at: &str, unit: &str, nl: &str) -> String {
    let s = &n.outer;
    let from = line_indent(cx.text, n.inner.start_byte());
    let mut out = String::new();
    if let (Some(first), Some(last)) = (n.pre.first(), n.pre.last()) {
        for k in 0..u {
            let piece = copy(cx, n, k, s.body, first.start_byte(), last.end_byte());
            out.push_str(&format!("{at}{}{nl}", reindent(&piece, from, at)));
        }
    }
    let Some(body) = n.inner.child_by_field_name("body") else {
        return out;
    };
    let header = super::super::tree::one_line(&cx.text[n.inner.start_byte()..body.start_byte()]);
    let braced = body.kind() == "compound_statement";
    let (start, end) = if braced {
        (body.start_byte() + 1, body.end_byte() - 1)
    } else {
        (body.start_byte(), body.end_byte())
    };
    let copy_at = format!("{at}{unit}");
    out.push_str(&format!("{at}{header} {{{nl}"));
    for k in 0..u {
        let piece = copy(cx, n, k, body, start, end);
        let piece = reindent(piece.trim_end(), from, &copy_at);
        if braced {
            out.push_str(&format!("{copy_at}{{{piece}{nl}{copy_at}}}{nl}"));
        } else {
            out.push_str(&format!("{copy_at}{{ {} }}{nl}", piece.trim()));
        }
    }
    out.push_str(&format!("{at}}}{nl}"));
    out
}

/// The text `start..end` under `scope` as copy `k` reads it: the outer variable `k`
/// steps on, PRE's locals renamed.
fn copy(
    cx: &RewriteContext<'_>,
    n: &Nest<'_>,
    k: u64,
    scope: Node<'_>,
    start: usize,
    end: usize,
) -> String {
    let s = &n.outer;
    let mut out = String::new();
    let mut pos = start;
    for id in descendants(scope)
        .into_iter()
        .filter(|d| d.kind() == "identifier" && start <= d.start_byte() && d.end_byte() <= end)
    {
        let name = text(cx, id);
        let with = if k == 0 {
            None
        } else if name == s.var {
            Some(format!("({} + {})", s.var, offset(s, k)))
        } else if n.locals.iter().any(|l| l == name) {
            Some(renamed(n, name, k))
        } else {
            None
        };
        if let Some(w) = with {
            out.push_str(&cx.text[pos..id.start_byte()]);
            out.push_str(&w);
            pos = id.end_byte();
        }
    }
    out.push_str(&cx.text[pos..end]);
    out
}

/// `plane_1` for copy 1 of `plane`, with underscores added while the name is taken.
fn renamed(n: &Nest<'_>, name: &str, k: u64) -> String {
    let mut r = format!("{name}_{k}");
    while n.taken.contains(&r) {
        r.push('_');
    }
    r
}

/// The label of the jam candidates.
pub(super) fn label(cx: &RewriteContext<'_>, nests: &[Nest<'_>], u: u64) -> String {
    match nests {
        [one] => format!(
            "{u} iterations of `{}` per trip, their inner loops fused",
            loop_header(cx, one.outer.node)
        ),
        _ => format!(
            "{u} outer iterations per trip in each of {} nests, their inner loops fused",
            nests.len()
        ),
    }
}

/// The edits of one jam candidate.
pub(super) fn edits(cx: &RewriteContext<'_>, nests: &[Nest<'_>], u: u64) -> Vec<Edit> {
    nests
        .iter()
        .map(|n| Edit::replace(n.outer.node.byte_range(), emit_nest(cx, n, u)))
        .collect()
}
