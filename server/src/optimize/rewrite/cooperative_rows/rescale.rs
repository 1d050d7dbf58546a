//! Sums rescaled by a running maximum in a column loop, the one-pass form of logsumexp
//! and softmax's statistics: the loop carries a maximum `m` and sums `s` whose terms are
//! taken relative to it, so when `m` grows each sum is multiplied by the author's factor
//! `F(old, new)` (`expf(old - new)`):
//!
//! ```c
//! float mn = fmaxf(m, v);                    // or: float m_old = m; m = fmaxf(m, v);
//! s = s * expf(m - mn) + expf(v - mn);       // or: s *= scale; s += ...;
//! m = mn;
//! ```
//!
//! Each lane runs the author's loop over its own columns; two lanes' groups combine as
//! `M = max(m, m')`, `s = s·F(m, M) + s'·F(m', M)` with the author's own factor
//! expression, so the result is the author's sum up to rounding (terms added in another
//! order). A factor is skipped where a lane's maximum is already `M` (exactly 1 then, and
//! no `-inf - -inf` for lanes that met no column).
//!
//! Matched from what the loop carries, not from names: the maximum's update is a
//! `fmaxf`/`fmax`/`max` of the carried `m` and a value (through a local holding the new
//! maximum, or a local saving the old one); each sum is assigned `s * F + T` (either
//! order; or `s *= F` then `s += T`) where `F` is an `exp`-family call of `old - new` (or
//! a local holding one) and `T` reads neither `s` nor the old maximum and subtracts the
//! new maximum inside an `exp`-family call of the same family. Anything else leaves the
//! loop to the plain accumulator analysis (which then names the assignment it cannot
//! split).

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::arg::{ArgPick, Picked};
use super::{strip, Family};
use crate::optimize::rewrite::tree::{named_children, text, walk};

const MAXES: &[&str] = &["fmaxf", "fmax", "max"];
const EXPS: &[&str] = &["expf", "exp", "__expf", "exp2f", "exp2"];
/// Placeholders for the old and the new maximum in the factor's template.
pub(super) const OLD: &str = "\u{2}";
pub(super) const NEW: &str = "\u{3}";

/// A loop body's rescaled sums: the group (the maximum, with the sums as its companions
/// and the factor template) and the ids of the statements it consists of; None when the
/// body has no such group.
pub(super) fn rescaled_sums(
    src: &str,
    body: Node<'_>,
    locals: &BTreeSet<String>,
) -> Option<(Picked, BTreeSet<usize>)> {
    let stmts = statements(body);
    let defs = local_values(src, &stmts);
    let (max, stmt_ids) = max_update(src, &stmts, &defs, locals)?;
    let mut ids: BTreeSet<usize> = stmt_ids;
    let mut sums: Vec<String> = Vec::new();
    let mut template: Option<String> = None;
    for s in &stmts {
        let Some((name, factor, used)) = sum_update(src, *s, &stmts, &defs, &max, locals) else {
            continue;
        };
        if template.as_ref().is_some_and(|t| *t != factor) || sums.contains(&name) {
            return None;
        }
        template = Some(factor);
        sums.push(name);
        ids.extend(used);
    }
    let template = template?;
    let own = identifier_ids(src, &stmts, &ids, &max.carried, &sums);
    let pick = ArgPick {
        with: sums.iter().map(|s| (s.clone(), None)).collect(),
        key: 0,
        first: true,
        rescale: Some(template),
        moments: None,
    };
    Some(((max.carried.clone(), Family::Max, pick, own), ids))
}

/// A loop body's statements, comments left out.
pub(super) fn statements(body: Node<'_>) -> Vec<Node<'_>> {
    named_children(body)
        .into_iter()
        .filter(|s| s.kind() != "comment")
        .collect()
}

/// The carried maximum and how this iteration names its old and new values.
struct MaxUpdate {
    carried: String,
    old: String,
    new: String,
}

/// The values of the body's single-declarator local declarations.
fn local_values<'t>(src: &str, stmts: &[Node<'t>]) -> BTreeMap<String, Node<'t>> {
    let mut out = BTreeMap::new();
    for s in stmts.iter().filter(|s| s.kind() == "declaration") {
        let mut c = s.walk();
        let ds: Vec<Node> = s.children_by_field_name("declarator", &mut c).collect();
        if let [d] = ds[..] {
            if let (Some(n), Some(v)) = (
                d.child_by_field_name("declarator"),
                d.child_by_field_name("value"),
            ) {
                out.insert(text(src, n).to_string(), v);
            }
        }
    }
    out
}

fn declared<'s>(src: &'s str, decl: Node<'_>) -> Option<&'s str> {
    let d = decl.child_by_field_name("declarator")?;
    Some(text(src, d.child_by_field_name("declarator").unwrap_or(d)))
}

/// `CALL(a, b)` with CALL one of `calls`: its two arguments.
fn call2<'t>(src: &str, e: Node<'t>, calls: &[&str]) -> Option<(Node<'t>, Node<'t>)> {
    let e = strip(e);
    if e.kind() != "call_expression" {
        return None;
    }
    let f = text(src, e.child_by_field_name("function")?);
    if !calls.contains(&f) {
        return None;
    }
    match named_children(e.child_by_field_name("arguments")?)[..] {
        [a, b] => Some((a, b)),
        _ => None,
    }
}

/// Whether `e` is a maximum of the carried `m` and something else.
fn max_of(src: &str, e: Node<'_>, m: &str) -> bool {
    call2(src, e, MAXES).is_some_and(|(a, b)| {
        let (a, b) = (text(src, strip(a)), text(src, strip(b)));
        (a == m) != (b == m)
    })
}

/// The statement `target OP value;`: the target's name and the value.
pub(super) fn assignment<'t>(src: &'t str, s: Node<'t>, op: &str) -> Option<(&'t str, Node<'t>)> {
    if s.kind() != "expression_statement" {
        return None;
    }
    let a = named_children(s).into_iter().next()?;
    if a.kind() != "assignment_expression" || text(src, a.child_by_field_name("operator")?) != op {
        return None;
    }
    let t = a
        .child_by_field_name("left")
        .filter(|t| t.kind() == "identifier")?;
    Some((text(src, t), a.child_by_field_name("right")?))
}

/// The maximum's update: `mn = max(m, v)` then `m = mn;`, or `old = m` then `m =
/// max(m, v)`; with the ids of its statements.
fn max_update(
    src: &str,
    stmts: &[Node<'_>],
    defs: &BTreeMap<String, Node<'_>>,
    locals: &BTreeSet<String>,
) -> Option<(MaxUpdate, BTreeSet<usize>)> {
    for s in stmts {
        let Some((m, value)) = assignment(src, *s, "=") else {
            continue;
        };
        if locals.contains(m) {
            continue;
        }
        let v = strip(value);
        // `m = mn;` with `mn = max(m, ...)` declared in the body.
        if v.kind() == "identifier" {
            let mn = text(src, v);
            if defs.get(mn).is_some_and(|d| max_of(src, *d, m)) {
                let decl = stmts
                    .iter()
                    .find(|d| d.kind() == "declaration" && declared(src, **d) == Some(mn))?;
                let ids = BTreeSet::from([s.id(), decl.id()]);
                return Some((
                    MaxUpdate {
                        carried: m.into(),
                        old: m.into(),
                        new: mn.into(),
                    },
                    ids,
                ));
            }
        }
        // `m = max(m, ...)` with `old = m` declared before it.
        if max_of(src, v, m) {
            let (old, decl) = stmts.iter().find_map(|d| {
                let n = (d.kind() == "declaration")
                    .then(|| declared(src, *d))
                    .flatten()?;
                let val = defs.get(n)?;
                (text(src, strip(*val)) == m && d.start_byte() < s.start_byte()).then_some((n, *d))
            })?;
            let ids = BTreeSet::from([s.id(), decl.id()]);
            return Some((
                MaxUpdate {
                    carried: m.into(),
                    old: old.into(),
                    new: m.into(),
                },
                ids,
            ));
        }
    }
    None
}

/// `F` is an exp-family call of `old - new`: its template, or None.
fn factor_template(src: &str, f: Node<'_>, max: &MaxUpdate) -> Option<(String, String)> {
    let f = strip(f);
    if f.kind() != "call_expression" {
        return None;
    }
    let call = text(src, f.child_by_field_name("function")?);
    if !EXPS.contains(&call) {
        return None;
    }
    let [arg] = named_children(f.child_by_field_name("arguments")?)[..] else {
        return None;
    };
    let arg = strip(arg);
    let (l, o, r) = (
        arg.child_by_field_name("left")?,
        arg.child_by_field_name("operator")?,
        arg.child_by_field_name("right")?,
    );
    let ok = arg.kind() == "binary_expression"
        && text(src, o) == "-"
        && text(src, strip(l)) == max.old
        && text(src, strip(r)) == max.new;
    ok.then(|| (format!("{call}({OLD} - {NEW})"), call.to_string()))
}

/// Whether `t` reads neither `names` and holds an exp-family call `call(X - new)`.
fn relative_term(src: &str, t: Node<'_>, call: &str, max: &MaxUpdate, avoid: &[&str]) -> bool {
    let mut reads = false;
    let mut relative = false;
    walk(t, &mut |x| {
        if x.kind() == "identifier" && avoid.contains(&text(src, x)) {
            reads = true;
        }
        if x.kind() == "call_expression"
            && x.child_by_field_name("function")
                .is_some_and(|f| text(src, f) == call)
        {
            let args = x
                .child_by_field_name("arguments")
                .map(named_children)
                .unwrap_or_default();
            if let [a] = args[..] {
                let a = strip(a);
                relative |= a.kind() == "binary_expression"
                    && a.child_by_field_name("operator")
                        .is_some_and(|o| text(src, o) == "-")
                    && a.child_by_field_name("right")
                        .is_some_and(|r| text(src, strip(r)) == max.new);
            }
        }
        true
    });
    relative && !reads
}

/// A sum's update in statement `s`: its name, the factor's template and the ids of the
/// statements it takes (`s *= F; s += T;` takes two).
fn sum_update(
    src: &str,
    s: Node<'_>,
    stmts: &[Node<'_>],
    defs: &BTreeMap<String, Node<'_>>,
    max: &MaxUpdate,
    locals: &BTreeSet<String>,
) -> Option<(String, String, Vec<usize>)> {
    // The factor, or a local holding it (`float scale = expf(m - mn);`, whose
    // declaration then belongs to the group).
    let mut taken = Vec::new();
    let mut factor = |f: Node| -> Option<(String, String)> {
        let f = strip(f);
        if f.kind() != "identifier" {
            return factor_template(src, f, max);
        }
        let decl = stmts
            .iter()
            .find(|d| d.kind() == "declaration" && declared(src, **d) == Some(text(src, f)))?;
        taken.push(decl.id());
        factor_template(src, *defs.get(text(src, f))?, max)
    };
    // `s = s * F + T` or `s = T + s * F`.
    if let Some((name, v)) = assignment(src, s, "=") {
        if locals.contains(name) || name == max.carried {
            return None;
        }
        let v = strip(v);
        if v.kind() != "binary_expression" || text(src, v.child_by_field_name("operator")?) != "+" {
            return None;
        }
        let (l, r) = (
            v.child_by_field_name("left")?,
            v.child_by_field_name("right")?,
        );
        for (scaled, term) in [(l, r), (r, l)] {
            let Some((a, b)) = product(src, scaled) else {
                continue;
            };
            let (own, f) = if text(src, strip(a)) == name {
                (a, b)
            } else {
                (b, a)
            };
            if text(src, strip(own)) != name {
                continue;
            }
            let (template, call) = factor(f)?;
            if relative_term(src, term, &call, max, &[name, &max.old]) {
                taken.push(s.id());
                return Some((name.to_string(), template, taken));
            }
        }
        return None;
    }
    // `s *= F;` followed by `s += T;`.
    let (name, f) = assignment(src, s, "*=")?;
    if locals.contains(name) || name == max.carried {
        return None;
    }
    let (template, call) = factor(f)?;
    let next = stmts.iter().find(|n| n.start_byte() > s.start_byte())?;
    let (again, term) = assignment(src, *next, "+=")?;
    taken.extend([s.id(), next.id()]);
    (again == name && relative_term(src, term, &call, max, &[name, &max.old]))
        .then(|| (name.to_string(), template, taken))
}

fn product<'t>(src: &str, e: Node<'t>) -> Option<(Node<'t>, Node<'t>)> {
    let e = strip(e);
    (e.kind() == "binary_expression" && text(src, e.child_by_field_name("operator")?) == "*")
        .then(|| {
            Some((
                e.child_by_field_name("left")?,
                e.child_by_field_name("right")?,
            ))
        })
        .flatten()
}

/// The ids of the identifiers naming the group (`m`, the sums) inside its statements.
fn identifier_ids(
    src: &str,
    stmts: &[Node<'_>],
    group_stmts: &BTreeSet<usize>,
    m: &str,
    sums: &[String],
) -> Vec<usize> {
    let mut out = Vec::new();
    for s in stmts.iter().filter(|s| group_stmts.contains(&s.id())) {
        walk(*s, &mut |x| {
            if x.kind() == "identifier"
                && (text(src, x) == m || sums.iter().any(|n| n == text(src, x)))
            {
                out.push(x.id());
            }
            true
        });
    }
    out
}

#[cfg(test)]
mod tests;
