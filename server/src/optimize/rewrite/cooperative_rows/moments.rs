//! A running mean and sum of squared deviations with an explicit count in a column loop
//! (Welford's update), the one-pass form of a row's variance:
//!
//! ```c
//! n += 1;                      // or n++, ++n, n = n + 1
//! float d = v - mean;
//! mean += d / n;               // or mean = mean + d / n
//! m2 += d * (v - mean);        // or with `float d2 = v - mean;` declared after the mean
//! ```
//!
//! Each lane runs the author's loop over its own columns (its own count, mean and sum);
//! two lanes combine by Chan's formula, `δ = mean' − mean`, `mean += δ·n'/(n + n')`,
//! `m2 += m2' + δ²·n·n'/(n + n')`, `n += n'`, skipped where the other lane met no column.
//! The result is the author's up to rounding. The three must start at zero before the
//! loop. A count taken from the column index (`mean += d / (c + 1)`) is not matched: a
//! lane's count is not its column's index.

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::arg::{ArgPick, Moments, Picked};
use super::rescale::{assignment, statements};
use super::{strip, Family};
use crate::optimize::rewrite::access::canon;
use crate::optimize::rewrite::tree::{named_children, text, walk};

/// A loop body's Welford group: the mean, with the count and the sum of squared
/// deviations as its companions, and the ids of its statements; None when the body has
/// no such group.
pub(super) fn welford(
    src: &str,
    body: Node<'_>,
    locals: &BTreeSet<String>,
) -> Option<(Picked, BTreeSet<usize>)> {
    let stmts = statements(body);
    let carried = |n: &str| !locals.contains(n);
    // `mean += d / n` (or `mean = mean + d / n`), `d` a local `v - mean`.
    let (at, mean, d, n) = stmts.iter().enumerate().find_map(|(i, s)| {
        let (mean, d, n) = mean_update(src, *s)?;
        (carried(mean) && carried(n) && locals.contains(d)).then_some((i, mean, d, n))
    })?;
    let delta = stmts[..at].iter().find(|s| declares(src, **s, d))?;
    let value = minus(src, value_of(*delta)?, mean)?;
    let count = stmts[..at].iter().find(|s| increments(src, **s, n))?;
    let (m2, m2_stmts) = stmts[at + 1..]
        .iter()
        .find_map(|s| m2_update(src, *s, &stmts[at + 1..], d, mean, value))?;
    if !carried(m2) || [mean, n].contains(&m2) {
        return None;
    }
    let mut ids: BTreeSet<usize> = [stmts[at].id(), delta.id(), count.id()].into();
    ids.extend(m2_stmts);
    let names = [mean, n, m2];
    let mut own = Vec::new();
    for s in stmts.iter().filter(|s| ids.contains(&s.id())) {
        walk(*s, &mut |x| {
            if x.kind() == "identifier" && names.contains(&text(src, x)) {
                own.push(x.id());
            }
            true
        });
    }
    let pick = ArgPick {
        with: vec![(n.to_string(), None), (m2.to_string(), None)],
        key: 0,
        first: true,
        rescale: None,
        moments: Some(Moments { count: 0, m2: 1 }),
    };
    Some(((mean.to_string(), Family::Sum, pick, own), ids))
}

/// `mean += d / n` or `mean = mean + d / n`: the three names.
fn mean_update<'t>(src: &'t str, s: Node<'t>) -> Option<(&'t str, &'t str, &'t str)> {
    let (mean, step) = match assignment(src, s, "+=") {
        Some((mean, v)) => (mean, v),
        None => {
            let (mean, v) = assignment(src, s, "=")?;
            let v = strip(v);
            let (l, r) = (
                v.child_by_field_name("left")?,
                v.child_by_field_name("right")?,
            );
            let plus = v.kind() == "binary_expression"
                && text(src, v.child_by_field_name("operator")?) == "+";
            (plus && text(src, strip(l)) == mean).then_some((mean, r))?
        }
    };
    let step = strip(step);
    if step.kind() != "binary_expression" || text(src, step.child_by_field_name("operator")?) != "/"
    {
        return None;
    }
    let (d, n) = (
        strip(step.child_by_field_name("left")?),
        strip(step.child_by_field_name("right")?),
    );
    (d.kind() == "identifier" && n.kind() == "identifier")
        .then(|| (mean, text(src, d), text(src, n)))
}

/// Whether `s` declares `name` alone.
fn declares(src: &str, s: Node<'_>, name: &str) -> bool {
    s.kind() == "declaration"
        && s.child_by_field_name("declarator")
            .and_then(|d| d.child_by_field_name("declarator"))
            .is_some_and(|n| text(src, n) == name)
}

fn value_of(decl: Node<'_>) -> Option<Node<'_>> {
    decl.child_by_field_name("declarator")?
        .child_by_field_name("value")
}

/// `A - name` with `A` free of `name`: `A`.
fn minus<'t>(src: &str, e: Node<'t>, name: &str) -> Option<Node<'t>> {
    let e = strip(e);
    let ok = e.kind() == "binary_expression"
        && text(src, e.child_by_field_name("operator")?) == "-"
        && text(src, strip(e.child_by_field_name("right")?)) == name;
    let a = e.child_by_field_name("left")?;
    let mut free = true;
    walk(a, &mut |x| {
        free &= !(x.kind() == "identifier" && text(src, x) == name);
        free
    });
    (ok && free).then_some(a)
}

/// `n += 1`, `n++`, `++n` or `n = n + 1`.
fn increments(src: &str, s: Node<'_>, n: &str) -> bool {
    let one = |v: Node| {
        matches!(
            text(src, strip(v)),
            "1" | "1.0" | "1.f" | "1.0f" | "1.F" | "1.0F"
        )
    };
    if let Some((t, v)) = assignment(src, s, "+=") {
        return t == n && one(v);
    }
    if let Some((t, v)) = assignment(src, s, "=") {
        let v = strip(v);
        return t == n
            && v.kind() == "binary_expression"
            && v.child_by_field_name("operator")
                .is_some_and(|o| text(src, o) == "+")
            && v.child_by_field_name("left")
                .is_some_and(|l| text(src, strip(l)) == n)
            && v.child_by_field_name("right").is_some_and(one);
    }
    let u = named_children(s).into_iter().next();
    s.kind() == "expression_statement"
        && u.is_some_and(|u| {
            u.kind() == "update_expression"
                && u.child_by_field_name("operator")
                    .is_some_and(|o| text(src, o) == "++")
                && u.child_by_field_name("argument")
                    .is_some_and(|a| text(src, a) == n)
        })
}

/// `m2 += d * (A - mean)` (either factor order), or `m2 += d * d2` with `d2 = A - mean`
/// declared among `after`: the name and the ids of its statements.
fn m2_update<'t>(
    src: &'t str,
    s: Node<'t>,
    after: &[Node<'t>],
    d: &str,
    mean: &str,
    value: Node<'_>,
) -> Option<(&'t str, Vec<usize>)> {
    let (m2, v) = assignment(src, s, "+=")?;
    let v = strip(v);
    if v.kind() != "binary_expression" || text(src, v.child_by_field_name("operator")?) != "*" {
        return None;
    }
    let (l, r) = (
        strip(v.child_by_field_name("left")?),
        strip(v.child_by_field_name("right")?),
    );
    let other = if text(src, l) == d {
        r
    } else if text(src, r) == d {
        l
    } else {
        return None;
    };
    let same_value = |e: Node| {
        minus(src, e, mean).is_some_and(|a| canon(text(src, a)) == canon(text(src, value)))
    };
    if same_value(other) {
        return Some((m2, vec![s.id()]));
    }
    let d2 = (other.kind() == "identifier").then(|| text(src, other))?;
    let decl = after
        .iter()
        .find(|x| declares(src, **x, d2) && x.start_byte() < s.start_byte())?;
    same_value(value_of(*decl)?).then(|| (m2, vec![s.id(), decl.id()]))
}

#[cfg(test)]
mod tests;
