//! `triton_online`: two loops of a Triton kernel over the same range, where the second
//! depends on the first only through the first's running maximum, become one loop with
//! online rescaling (the online softmax): the second loop's sums are multiplied by
//! `exp(m_prev - m)` each time the maximum grows, so both reductions finish after one
//! pass over the data. A three-pass softmax becomes two passes; a two-pass logsumexp or
//! cross-entropy, one.
//!
//! **Matches**, from the loop analysis (`facts/triton_loops.rs`): consecutive body loops
//! `L1`, `L2` over the same range (`for` or while form, any names); `L2` reads carries of
//! `L1` that are all maxima (`m = tl.maximum(m, E)`); every carry of `L2` is a sum whose
//! every update is linear in one factor `exp(A - m)` or `exp2((A - m) * K)` (through
//! locals, products, quotients, `tl.where(c, ·, 0)` and `tl.sum`), or does not read `m`;
//! `L2` stores nothing and reads no other value of `L1`'s body; the statements between the
//! loops initialise `L2`'s carries from values `L1` does not touch.
//!
//! **Refuses** a sum of `exp` and a term without it, a maximum read outside `exp`, a lane
//! maximum with a reduced sum, a second loop that writes memory, a store between the
//! loops, and ranges that differ.
//!
//! **Writes** `L2`'s body into `L1` (its loop variable renamed, statements that repeat
//! `L1`'s with the same inputs dropped, so each tile is loaded once), with `m_prev = m`
//! first and `s = s * exp(m_prev - m)` before the sums; the initialisations move above
//! `L1`. The launch does not change. `triton_split_loop` reuses [`merge`] to tile the
//! joined loop R steps at a time (its online candidate).

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::edits::{Edit, Edits};
use super::tree::{code_names, fresh, line_indent, newline, reindent, text};
use super::triton_loops::{body_loops, lines_of, repeats, with_names, Repeat, Stmt};
use super::RewriteContext;
use crate::optimize::facts::triton_loops::{
    assigned, assignment, callee, collapse, reads, Combine, Loop,
};
use crate::syntax::Lang;

const ID: &str = "triton_online";

pub fn triton_online(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Triton, ID)?;
    current_plan(cx)?;
    let k = &cx.kernel.name;
    let (top, found) = body_loops(cx)?;
    if found.len() < 2 {
        return Err(not_applicable(format!(
            "`{k}` has {} loop(s) in its body; merging passes needs two over the same range",
            found.len()
        )));
    }
    let mut why = Vec::new();
    for w in found.windows(2) {
        match merge(cx, &top, &w[0], &w[1]) {
            Ok((text, _)) => {
                let label = format!(
                    "one pass: the loop at line {} joins the loop at line {} (online rescaling)",
                    w[1].node.start_position().row + 1,
                    w[0].node.start_position().row + 1
                );
                return finish(cx, vec![Draft { label, text }], Vec::new());
            }
            Err(e) => why.push(format!(
                "lines {} and {}: {e}",
                w[0].node.start_position().row + 1,
                w[1].node.start_position().row + 1
            )),
        }
    }
    Err(not_applicable(format!(
        "`{k}` has no pair of passes to merge: {}",
        why.join("; ")
    )))
}

/// What a merge joined: each sum rescaled, with the maximum it follows and its rescale
/// factor (with `{prev}` for the saved maximum), and each maximum's saved name
/// (`m_prev`). `triton_split_loop` reads it to tile the merged loop.
pub(super) struct Online {
    pub sums: Vec<(String, String, String)>,
    pub prevs: BTreeMap<String, String>,
}

/// The file with `b` merged into `a`, and what the merge joined; or why not.
pub(super) fn merge(
    cx: &RewriteContext<'_>,
    top: &[Node<'_>],
    a: &Loop<'_>,
    b: &Loop<'_>,
) -> Result<(String, Online), String> {
    let src = cx.text;
    if a.range_key() != b.range_key() {
        return Err(format!(
            "they walk different ranges ({} and {})",
            a.range_key(),
            b.range_key()
        ));
    }
    let maxima: Vec<&str> = a
        .carries
        .iter()
        .filter(|c| b.reads.contains(&c.name))
        .map(|c| c.name.as_str())
        .collect();
    if maxima.is_empty() {
        return Err("the second reads nothing the first carries".into());
    }
    for m in &maxima {
        let c = a.carry(m).expect("a carry of the first loop");
        if c.combine != Combine::Max || c.read_in_loop {
            return Err(format!(
                "the second reads `{m}`, which the first carries as {}; only a running maximum rescales",
                describe(c.combine)
            ));
        }
    }
    if b.stores > 0 {
        return Err("the second writes memory, which needs the final maximum".into());
    }
    if b.nested || a.nested {
        return Err("a loop holds a branch or another loop".into());
    }
    if let Some(c) = b.carries.iter().find(|c| a.reads.contains(&c.name)) {
        return Err(format!(
            "the first reads `{}`, which the second carries",
            c.name
        ));
    }
    let locals = locals_of(src, &b.stmts);
    // Values of the first loop's body the second reads must be recomputed by it first.
    for n in b.reads.intersection(&a.assigned) {
        if maxima.contains(&n.as_str()) || *n == b.var || (*n == a.var && a.var == b.var) {
            continue;
        }
        if !defined_before_read(src, &b.stmts, n) {
            return Err(format!("the second reads `{n}` as the first left it"));
        }
    }
    let plan = rescales(src, a, b, &maxima, &locals)?;
    let between: Vec<Node> = top
        .iter()
        .filter(|s| s.start_byte() >= a.node.end_byte() && s.end_byte() <= b.node.start_byte())
        .copied()
        .collect();
    let mut moved = Vec::new();
    for s in &between {
        if b.init.is_some_and(|i| i.id() == s.id()) {
            continue;
        }
        let (mut r, mut w) = (BTreeSet::new(), BTreeSet::new());
        reads(src, *s, &mut r);
        assigned(src, *s, &mut w);
        let t = text(src, *s);
        if r.iter().any(|n| a.assigned.contains(n))
            || w.iter()
                .any(|n| a.assigned.contains(n) || a.reads.contains(n))
            || t.contains("tl.store")
            || t.contains("tl.atomic")
        {
            return Err(format!(
                "`{}` between the loops touches a value or the memory of the first",
                collapse(text(src, *s))
            ));
        }
        moved.push(*s);
    }
    write(cx, a, b, &moved, plan)
}

fn describe(c: Combine) -> &'static str {
    match c {
        Combine::Sum => "a sum",
        Combine::Max => "a maximum",
        Combine::Min => "a minimum",
        Combine::Other => "a value updated otherwise",
    }
}

/// Single `name = expr` definitions among `stmts`.
fn locals_of<'t>(src: &str, stmts: &[Node<'t>]) -> BTreeMap<String, Node<'t>> {
    let mut out = BTreeMap::new();
    let mut twice = BTreeSet::new();
    for s in stmts {
        if let Some((n, op, right)) = assignment(src, *s) {
            if op == "=" && !out.contains_key(&n) {
                out.insert(n, right);
                continue;
            }
            twice.insert(n);
        }
    }
    out.retain(|n, _| !twice.contains(n));
    out
}

/// The first statement of `stmts` mentioning `name` assigns it without reading it.
fn defined_before_read(src: &str, stmts: &[Node<'_>], name: &str) -> bool {
    for s in stmts {
        let mut r = BTreeSet::new();
        reads(src, *s, &mut r);
        if !r.contains(name) {
            continue;
        }
        return match assignment(src, *s) {
            Some((n, op, right)) if n == name && op == "=" => {
                let mut rr = BTreeSet::new();
                reads(src, right, &mut rr);
                !rr.contains(name)
            }
            _ => false,
        };
    }
    true
}

/// For each carry of `b` that reads a maximum: its name and the rescale expression (with
/// `{prev}` for the saved maximum). Errors when `b` reads a maximum any other way.
fn rescales(
    src: &str,
    a: &Loop<'_>,
    b: &Loop<'_>,
    maxima: &[&str],
    locals: &BTreeMap<String, Node<'_>>,
) -> Result<Vec<(String, String, String)>, String> {
    let lin = Linear {
        src,
        maxima,
        locals,
        body: &b.assigned,
    };
    let carry_names: BTreeSet<&str> = b.carries.iter().map(|c| c.name.as_str()).collect();
    // Statements other than the sums' updates: locals only, and none read after the loop.
    for s in &b.stmts {
        if s.kind() == "comment" {
            continue;
        }
        match assignment(src, *s) {
            Some((n, _, _)) if carry_names.contains(n.as_str()) => {}
            Some((n, op, right)) if op == "=" && lin.depends(right) && b.reads_after(src, &n) => {
                return Err(format!(
                    "`{n}` depends on the maximum and is read after the loop"
                ));
            }
            Some((_, op, _)) if op == "=" => {}
            _ if lin.depends(*s) => {
                return Err(format!(
                    "`{}` reads the maximum outside a sum",
                    collapse(text(src, *s))
                ))
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for c in &b.carries {
        if c.combine != Combine::Sum || c.read_in_loop {
            if c.updates.iter().any(|u| lin.depends(*u)) || c.combine == Combine::Other {
                return Err(format!(
                    "`{}` is carried as {}, not a sum",
                    c.name,
                    describe(c.combine)
                ));
            }
            continue;
        }
        let mut found: Option<(String, String)> = None;
        let mut free = false;
        for u in &c.updates {
            match lin.factor(*u)? {
                None => free = true,
                Some(f) if found.as_ref().is_none_or(|g| *g == f) => found = Some(f),
                Some(_) => return Err(format!("`{}` sums terms of different maxima", c.name)),
            }
        }
        match (found, free) {
            (Some(_), true) => {
                return Err(format!(
                    "`{}` adds terms with and without the maximum",
                    c.name
                ))
            }
            (Some((m, f)), false) => {
                let m_lane = a.carry(&m).is_some_and(|mc| mc.lane);
                if m_lane && !c.lane {
                    return Err(format!(
                        "`{m}` is a maximum per lane but `{}` a total: one factor cannot rescale it",
                        c.name
                    ));
                }
                out.push((c.name.clone(), m, f));
            }
            (None, _) => {}
        }
    }
    if out.is_empty() {
        return Err("no sum of the second reads the maximum".into());
    }
    Ok(out)
}

/// Linearity of a sum's terms in `exp(-m)`.
struct Linear<'a, 't> {
    src: &'a str,
    maxima: &'a [&'a str],
    locals: &'a BTreeMap<String, Node<'t>>,
    /// Names the second loop assigns: a rescale factor may not read them.
    body: &'a BTreeSet<String>,
}

impl Linear<'_, '_> {
    /// `n` reads a maximum, directly or through the loop's locals.
    fn depends(&self, n: Node<'_>) -> bool {
        let mut seen = BTreeSet::new();
        self.depends_in(n, &mut seen)
    }

    fn depends_in(&self, n: Node<'_>, seen: &mut BTreeSet<String>) -> bool {
        let mut r = BTreeSet::new();
        reads(self.src, n, &mut r);
        r.into_iter().any(|name| {
            self.maxima.contains(&name.as_str())
                || (seen.insert(name.clone())
                    && self
                        .locals
                        .get(&name)
                        .is_some_and(|d| self.depends_in(*d, seen)))
        })
    }

    /// None: `e` does not read a maximum; Some((m, rescale)): `e` is linear in one
    /// `exp(A - m)` factor, and `rescale` (with `{prev}`) is its change when m grows.
    fn factor<'n>(&self, e: Node<'n>) -> Result<Option<(String, String)>, String> {
        fn kids(n: Node<'_>) -> Vec<Node<'_>> {
            let mut w = n.walk();
            n.named_children(&mut w)
                .filter(|c| c.kind() != "comment")
                .collect()
        }
        if !self.depends(e) {
            return Ok(None);
        }
        let src = self.src;
        let nonlinear = || {
            Err(format!(
                "`{}` is not linear in exp(-max)",
                collapse(text(src, e))
            ))
        };
        match e.kind() {
            "parenthesized_expression" => match kids(e).as_slice() {
                [c] => self.factor(*c),
                _ => nonlinear(),
            },
            "identifier" => match self.locals.get(text(src, e)) {
                Some(d) => self.factor(*d),
                None => Err(format!("`{}` is used outside exp(...)", text(src, e))),
            },
            "binary_operator" => {
                let (Some(l), Some(r), Some(op)) = (
                    e.child_by_field_name("left"),
                    e.child_by_field_name("right"),
                    e.child_by_field_name("operator"),
                ) else {
                    return nonlinear();
                };
                let (fl, fr) = (self.factor(l)?, self.factor(r)?);
                match (text(src, op), fl, fr) {
                    ("*", Some(f), None) | ("*", None, Some(f)) | ("/", Some(f), None) => {
                        Ok(Some(f))
                    }
                    ("+" | "-", Some(f), Some(g)) if f == g => Ok(Some(f)),
                    _ => nonlinear(),
                }
            }
            "call" => {
                let name = callee(src, e);
                let args: Vec<Node> = e
                    .child_by_field_name("arguments")
                    .map(|a| {
                        kids(a)
                            .into_iter()
                            .filter(|c| c.kind() != "keyword_argument")
                            .collect()
                    })
                    .unwrap_or_default();
                match (name.as_str(), args.as_slice()) {
                    ("tl.sum", [x, ..]) => self.factor(*x),
                    ("tl.where", [c, x, y]) if !self.depends(*c) => {
                        let zero = |n: Node<'_>| {
                            matches!(text(src, n).trim(), "0" | "0.0" | "0." | "0.0f")
                        };
                        match (self.factor(*x)?, self.factor(*y)?) {
                            (Some(f), None) if zero(*y) => Ok(Some(f)),
                            (None, Some(f)) if zero(*x) => Ok(Some(f)),
                            _ => nonlinear(),
                        }
                    }
                    (f, [x]) if f.ends_with(".exp") || f.ends_with(".exp2") => {
                        let fun = text(src, e.child_by_field_name("function").expect("a callee"));
                        self.exponent(*x)
                            .map(|(m, d)| Some((m, format!("{fun}({d})"))))
                    }
                    _ => nonlinear(),
                }
            }
            _ => nonlinear(),
        }
    }

    /// `m` or `m[:, None]` (a row maximum broadcast over a tile) for a maximum `m`.
    fn maximum_of(&self, n: Node<'_>) -> Option<String> {
        let base = match n.kind() {
            "subscript" => n.child_by_field_name("value")?,
            _ => n,
        };
        let name = text(self.src, base);
        (base.kind() == "identifier" && self.maxima.contains(&name)).then(|| name.to_string())
    }

    /// An exponent `A - m` or `(A - m) * K` (A without the maximum, K without it and
    /// without the loop's values): the maximum and the exponent's change when m grows,
    /// with `{prev}` for the saved maximum.
    fn exponent(&self, x: Node<'_>) -> Result<(String, String), String> {
        let src = self.src;
        let bad = || {
            Err(format!(
                "exponent `{}` is not (value - max) times a constant",
                collapse(text(src, x))
            ))
        };
        match x.kind() {
            "parenthesized_expression" => match x.named_child(0) {
                Some(c) => self.exponent(c),
                None => bad(),
            },
            "identifier" => match self.locals.get(text(src, x)) {
                Some(d) => self.exponent(*d),
                None => bad(),
            },
            "binary_operator" => {
                let (Some(l), Some(r), Some(op)) = (
                    x.child_by_field_name("left"),
                    x.child_by_field_name("right"),
                    x.child_by_field_name("operator"),
                ) else {
                    return bad();
                };
                let constant = |n: Node<'_>| {
                    let mut names = BTreeSet::new();
                    reads(src, n, &mut names);
                    !self.depends(n) && names.iter().all(|v| !self.body.contains(v))
                };
                match text(src, op) {
                    "-" if self.maximum_of(r).is_some() && !self.depends(l) => {
                        let m = self.maximum_of(r).unwrap_or_default();
                        Ok((m.clone(), format!("{{prev}} - {m}")))
                    }
                    "*" if constant(r) => self
                        .exponent(l)
                        .map(|(m, d)| (m, format!("({d}) * {}", text(src, r)))),
                    "*" if constant(l) => self
                        .exponent(r)
                        .map(|(m, d)| (m, format!("{} * ({d})", text(src, l)))),
                    _ => bad(),
                }
            }
            _ => bad(),
        }
    }
}

/// The merged file: `b`'s body after `a`'s, rescales between, `moved` above `a`.
fn write(
    cx: &RewriteContext<'_>,
    a: &Loop<'_>,
    b: &Loop<'_>,
    moved: &[Node<'_>],
    plan: Vec<(String, String, String)>,
) -> Result<(String, Online), String> {
    let src = cx.text;
    let nl = newline(src);
    let first = *a.stmts.first().ok_or("the first loop is empty")?;
    let ind = line_indent(src, first.start_byte()).to_string();
    let outer = line_indent(src, a.node.start_byte()).to_string();
    let mut names = code_names(cx);
    let mut prev: BTreeMap<String, String> = BTreeMap::new();
    for (_, m, _) in &plan {
        if !prev.contains_key(m) {
            let p = fresh(&format!("{m}_prev"), &mut names);
            prev.insert(m.clone(), p);
        }
    }
    let mut tail =
        vec!["# online rescaling: the sums below follow the running maximum".to_string()];
    for (s, m, f) in &plan {
        tail.push(format!("{s} = {s} * {}", f.replace("{prev}", &prev[m])));
    }
    tail.extend(second_body(src, a, b, &ind)?);
    let tail = tail.join(&format!("{nl}{ind}"));
    let head: String = prev
        .iter()
        .map(|(m, p)| format!("{p} = {m}{nl}{ind}"))
        .collect();
    let mut e = Edits::new();
    e.extend([Edit::insert(first.start_byte(), head)]);
    match a.incr {
        Some(incr) => e.extend([Edit::insert(incr.start_byte(), format!("{tail}{nl}{ind}"))]),
        None => {
            let last = *a.stmts.last().expect("a non-empty body");
            e.extend([Edit::insert(last.end_byte(), format!("{nl}{ind}{tail}"))]);
        }
    }
    let up: String = moved
        .iter()
        .map(|s| format!("{}{nl}{outer}", text(src, *s)))
        .collect();
    if !up.is_empty() {
        e.extend([Edit::insert(a.node.start_byte(), up)]);
    }
    for s in moved {
        e.extend([Edit::replace(lines_of(src, *s), String::new())]);
    }
    if let Some(init) = b.init.filter(|i| i.start_byte() > a.node.end_byte()) {
        e.extend([Edit::replace(lines_of(src, init), String::new())]);
    }
    e.extend([Edit::replace(lines_of(src, b.node), String::new())]);
    let text = e.apply(src).map_err(|err| err.to_string())?;
    Ok((
        text,
        Online {
            sums: plan,
            prevs: prev,
        },
    ))
}

/// The second loop's statements as they go into the first's body (indented `ind`): its
/// loop variable renamed to the first's, a statement repeating one of the first's with
/// the same inputs dropped, the same load into another name a copy.
fn second_body(src: &str, a: &Loop<'_>, b: &Loop<'_>, ind: &str) -> Result<Vec<String>, String> {
    if b.var != a.var && b.reads.contains(&a.var) {
        return Err(format!(
            "the second loop reads `{}`, the first's loop variable",
            a.var
        ));
    }
    let rename = |n: &str| (n == b.var && b.var != a.var).then(|| a.var.clone());
    let mut stmts: Vec<Stmt> = a
        .stmts
        .iter()
        .map(|s| Stmt::of(src, *s, collapse(text(src, *s))))
        .collect();
    let from = stmts.len();
    let b_ind = b.stmts.first().map_or(ind.to_string(), |s| {
        line_indent(src, s.start_byte()).to_string()
    });
    let mut b_text = Vec::new();
    for s in &b.stmts {
        let t = with_names(src, *s, &rename);
        let mut st = Stmt::of(src, *s, collapse(&t));
        if st.reads.remove(&b.var) {
            st.reads.insert(a.var.clone());
        }
        stmts.push(st);
        b_text.push(reindent(&t, &b_ind, ind));
    }
    let droppable: Vec<bool> = (0..stmts.len()).map(|i| i >= from).collect();
    let drop = repeats(&stmts, &droppable);
    let mut out = Vec::new();
    for ((t, r), st) in b_text.into_iter().zip(&drop[from..]).zip(&stmts[from..]) {
        match (r, &st.target) {
            (Repeat::Drop, _) => {}
            (Repeat::Copy(x), Some(y)) => out.push(format!("{y} = {x}")),
            _ => out.push(t),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
