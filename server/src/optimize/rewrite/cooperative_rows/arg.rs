//! Arg-max and arg-min picks in a column loop: `if (v > best) { best = v; at = c; }`.
//! The extreme `best` is carried with the values assigned beside it under the same
//! condition (`at`, and any payload), one of which is the column index (the loop
//! variable, plus a term that does not move with it). Lanes that share the loop combine
//! the group as one: the better extreme wins, and between equal extremes the column the
//! author's loop meets first (a strict comparison, `>` or `<`) or last (`>=`, `<=`), so
//! the result is the author's for every input, ties included.
//!
//! Refuses (the caller then reports the assignment): an `else`, a companion that reads
//! the extreme or another companion, two assignments of one name, no companion that is
//! the column index.

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::{compare_pick, rescale, strip, Family};
use crate::optimize::rewrite::access::canon;
use crate::optimize::rewrite::tree::{first_line, fresh, named_children, text, walk};

/// What is assigned beside an extreme, and how ties are broken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::optimize::rewrite) struct ArgPick {
    /// The names assigned with the extreme, in the author's order, with their declared
    /// types (filled in by the row analysis).
    pub with: Vec<(String, Option<String>)>,
    /// Which of `with` is the column index.
    pub key: usize,
    /// A strict comparison: the first column met wins a tie (else the last).
    pub first: bool,
    /// Sums rescaled by the maximum instead of values picked with it: the author's
    /// factor with [`rescale::OLD`] and [`rescale::NEW`] for the old and new maximum.
    pub rescale: Option<String>,
    /// A mean with its count and sum of squared deviations instead (see [`super::moments`]):
    /// which of `with` is which.
    pub moments: Option<Moments>,
}

/// Where a Welford group's count and sum of squared deviations sit in `with`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::optimize::rewrite) struct Moments {
    pub count: usize,
    pub m2: usize,
}

/// What [`if_arg`] finds: the extreme's name and family, the pick, and the ids of the
/// identifiers that are the group's own (its reads in the condition and every target).
pub(super) type Picked = (String, Family, ArgPick, Vec<usize>);

/// `if (C) { m = E; a = F; ... }` where C compares `m` with E: the pick, or why such a
/// pick cannot be shared between lanes; `None` for any other statement.
pub(super) fn if_arg(src: &str, n: Node<'_>, var: &str) -> Option<Result<Picked, String>> {
    if n.child_by_field_name("alternative").is_some() {
        return None;
    }
    let cond = n.child_by_field_name("condition")?;
    let cond = strip(cond.child_by_field_name("value").unwrap_or(cond));
    let cons = n.child_by_field_name("consequence")?;
    if cons.kind() != "compound_statement" {
        return None;
    }
    let assigns = plain_assignments(src, cons)?;
    if assigns.len() < 2 {
        return None;
    }
    // The extreme: the one assignment the condition compares with its value.
    let mut found = assigns.iter().enumerate().filter_map(|(i, (t, v))| {
        compare_pick(src, cond, *v, *t, text(src, *t)).map(|(fam, ids, _)| (i, fam, ids))
    });
    let (at, fam, mut ids) = found.next()?;
    if found.next().is_some() {
        return None;
    }
    let name = text(src, assigns[at].0).to_string();
    let with: Vec<(Node, Node)> = assigns
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != at)
        .map(|(_, p)| *p)
        .collect();
    let group: BTreeSet<&str> = assigns.iter().map(|(t, _)| text(src, *t)).collect();
    if group.len() != assigns.len() || group.contains(var) {
        return None;
    }
    let header = first_line(text(src, n));
    if let Some((t, _)) = with.iter().find(|(_, v)| reads_any(src, *v, &group)) {
        return Some(Err(format!(
            "`{}` in `{header}` reads a value picked with it; lanes cannot replay that order",
            text(src, *t)
        )));
    }
    let Some(key) = with.iter().position(|(_, v)| is_column_index(src, *v, var)) else {
        return Some(Err(format!(
            "`{header}` picks values with `{name}`, but none of them is the column `{var}`, so equal values in two lanes could not be told apart in the loop's order"
        )));
    };
    ids.extend(assigns.iter().map(|(t, _)| t.id()));
    let pick = ArgPick {
        with: with
            .iter()
            .map(|(t, _)| (text(src, *t).to_string(), None))
            .collect(),
        key,
        first: strict(src, cond),
        rescale: None,
        moments: None,
    };
    Some(Ok((name, fam, pick, ids)))
}

/// The `target = value` statements of a block (targets plain names), or `None` when
/// it holds anything else.
fn plain_assignments<'t>(src: &str, block: Node<'t>) -> Option<Vec<(Node<'t>, Node<'t>)>> {
    let mut out = Vec::new();
    for s in named_children(block) {
        if s.kind() == "comment" {
            continue;
        }
        if s.kind() != "expression_statement" {
            return None;
        }
        let a = named_children(s).into_iter().next()?;
        if a.kind() != "assignment_expression"
            || text(src, a.child_by_field_name("operator")?) != "="
        {
            return None;
        }
        let t = a.child_by_field_name("left")?;
        if t.kind() != "identifier" {
            return None;
        }
        out.push((t, a.child_by_field_name("right")?));
    }
    Some(out)
}

fn reads_any(src: &str, e: Node<'_>, names: &BTreeSet<&str>) -> bool {
    let mut hit = false;
    walk(e, &mut |x| {
        hit |= x.kind() == "identifier" && names.contains(text(src, x));
        !hit
    });
    hit
}

/// `var`, `var + X`, `X + var` or `var - X` with X free of `var`: a value that grows
/// with the column, so its order is the loop's.
fn is_column_index(src: &str, e: Node<'_>, var: &str) -> bool {
    let e = strip(e);
    if e.kind() == "identifier" {
        return text(src, e) == var;
    }
    if e.kind() != "binary_expression" {
        return false;
    }
    let (Some(l), Some(o), Some(r)) = (
        e.child_by_field_name("left"),
        e.child_by_field_name("operator"),
        e.child_by_field_name("right"),
    ) else {
        return false;
    };
    let just_var = |x: Node| canon(text(src, strip(x))) == var;
    let free = |x: Node| !reads_any(src, x, &BTreeSet::from([var]));
    match text(src, o) {
        "+" => (just_var(l) && free(r)) || (just_var(r) && free(l)),
        "-" => just_var(l) && free(r),
        _ => false,
    }
}

/// Whether a comparison is strict (`>` or `<`).
fn strict(src: &str, cond: Node<'_>) -> bool {
    cond.child_by_field_name("operator")
        .is_some_and(|o| matches!(text(src, o), ">" | "<"))
}

/// One combine step of an extreme `name` of family `fam` and its pick with the other
/// lane's group, each value read through `other` once. `step` is the loop's step: a
/// loop that walks down meets the larger index first. Lines; a leading tab is one more
/// level of indentation.
pub(in crate::optimize::rewrite) fn combine_arg(
    name: &str,
    ty: Option<&str>,
    fam: Family,
    pick: &ArgPick,
    step: i64,
    other: &dyn Fn(&str) -> String,
    names: &mut BTreeSet<String>,
) -> Result<Vec<String>, String> {
    if let Some(factor) = &pick.rescale {
        return combine_rescaled(name, ty, pick, factor, other, names);
    }
    if let Some(m) = pick.moments {
        return combine_moments(name, ty, pick, m, other, names);
    }
    let mut lines = vec!["{".to_string()];
    let mine = fresh(&format!("{name}_other"), names);
    lines.push(format!("\t{} {mine} = {};", typed(name, ty)?, other(name)));
    let mut theirs = Vec::new();
    for (w, t) in &pick.with {
        let o = fresh(&format!("{w}_other"), names);
        lines.push(format!("\t{} {o} = {};", typed(w, t.as_deref())?, other(w)));
        theirs.push(o);
    }
    let better = match fam {
        Family::Max => ">",
        Family::Min => "<",
        _ => return Err(format!("`{name}` is no maximum or minimum")),
    };
    let key = &pick.with[pick.key].0;
    let tie = if pick.first == (step > 0) { "<" } else { ">" };
    let mut take = format!("{name} = {mine};");
    for ((w, _), o) in pick.with.iter().zip(&theirs) {
        take.push_str(&format!(" {w} = {o};"));
    }
    lines.push(format!(
        "\tif ({mine} {better} {name} || ({mine} == {name} && {} {tie} {key})) {{ {take} }}",
        theirs[pick.key]
    ));
    lines.push("}".to_string());
    Ok(lines)
}

/// One combine step of a maximum `name` and the sums rescaled by it (see [`rescale`]):
/// `M = max(m, m')`, each sum `s·F(m, M) + s'·F(m', M)`, a factor skipped where its
/// maximum is already `M`.
fn combine_rescaled(
    name: &str,
    ty: Option<&str>,
    pick: &ArgPick,
    factor: &str,
    other: &dyn Fn(&str) -> String,
    names: &mut BTreeSet<String>,
) -> Result<Vec<String>, String> {
    let t = typed(name, ty)?;
    let mine = fresh(&format!("{name}_other"), names);
    let top = fresh(&format!("{name}_new"), names);
    let mut lines = vec!["{".to_string(), format!("\t{t} {mine} = {};", other(name))];
    let mut theirs = Vec::new();
    for (w, wt) in &pick.with {
        let o = fresh(&format!("{w}_other"), names);
        lines.push(format!(
            "\t{} {o} = {};",
            typed(w, wt.as_deref())?,
            other(w)
        ));
        theirs.push(o);
    }
    lines.push(format!("\t{t} {top} = {mine} > {name} ? {mine} : {name};"));
    let scaled = |sum: &str, max: &str| {
        let f = factor
            .replace(rescale::OLD, max)
            .replace(rescale::NEW, &top);
        format!("({max} == {top} ? {sum} : {sum} * {f})")
    };
    for ((w, _), o) in pick.with.iter().zip(&theirs) {
        lines.push(format!(
            "\t{w} = {} + {};",
            scaled(w, name),
            scaled(o, &mine)
        ));
    }
    lines.push(format!("\t{name} = {top};"));
    lines.push("}".to_string());
    Ok(lines)
}

/// A carried value's declared type, or why the combine cannot declare its temporaries.
fn typed(n: &str, t: Option<&str>) -> Result<String, String> {
    t.map(str::to_string)
        .ok_or_else(|| format!("the type of `{n}` is not declared in the row body"))
}

/// One combine step of a mean `name` with its count and sum of squared deviations (see
/// [`super::moments`]), by Chan's formula; nothing to do where the other lane met no column.
fn combine_moments(
    name: &str,
    ty: Option<&str>,
    pick: &ArgPick,
    m: Moments,
    other: &dyn Fn(&str) -> String,
    names: &mut BTreeSet<String>,
) -> Result<Vec<String>, String> {
    let (count, count_ty) = (&pick.with[m.count].0, pick.with[m.count].1.as_deref());
    let (m2, m2_ty) = (&pick.with[m.m2].0, pick.with[m.m2].1.as_deref());
    let mean_o = fresh(&format!("{name}_other"), names);
    let count_o = fresh(&format!("{count}_other"), names);
    let m2_o = fresh(&format!("{m2}_other"), names);
    let total = fresh(&format!("{count}_total"), names);
    let delta = fresh(&format!("{name}_delta"), names);
    let t = typed(name, ty)?;
    let ct = typed(count, count_ty)?;
    Ok(vec![
        "{".to_string(),
        format!("\t{t} {mean_o} = {};", other(name)),
        format!("\t{ct} {count_o} = {};", other(count)),
        format!("\t{} {m2_o} = {};", typed(m2, m2_ty)?, other(m2)),
        format!(
            "\tif ({count_o} > 0) {{ {ct} {total} = {count} + {count_o}; {t} {delta} = {mean_o} - {name}; {name} += {delta} * {count_o} / {total}; {m2} += {m2_o} + {delta} * {delta} * {count} * {count_o} / {total}; {count} = {total}; }}"
        ),
        "}".to_string(),
    ])
}
