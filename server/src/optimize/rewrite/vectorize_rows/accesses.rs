//! What `vectorize_rows` does with each global access of the region: its address as a
//! polynomial in the lane index ([`super::super::poly`], locals of the region expanded,
//! aliases `T* row = x + r * ld;` followed by [`super::super::access`]) sorts it into
//! *unit* (the lane's own column: `x[r * ld + c]`, read or written with one vector access
//! per buffer), *uniform* (the same element for every column of the thread: `mean[r]`,
//! read once), or *gather* (anything else: each column computes its own index, allowed
//! for buffers nothing writes). A written buffer must be reached at one unit address
//! only; a write at a uniform or computed index, a second offset into a written buffer,
//! an atomic, or a pointer that escapes into a call is refused with the access.

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::super::access::{
    collect_accesses, declare_statement, defines_alias, enclosing_statement, unconditional, Access,
    Scope,
};
use super::super::elementwise::{thread_bound, ThreadBound};
use super::super::poly::{fold_split, poly, single_definitions, FixedPositions, Poly, VarNames};
use super::super::tree::{first_line, text, walk};
use super::shape::{Form, Rows};
use crate::syntax::ByteRange;

/// The buffers read or written with one vector access per thread.
pub(super) struct Group<'t> {
    pub buffer: String,
    pub pointee: String,
    /// Every access of this address (the first gives the address's text).
    pub nodes: Vec<Node<'t>>,
    pub written: bool,
    /// The index is the lane index itself (`y[i]`, or `y[r * cols + c]` with `r = i / cols`
    /// and `c = i % cols`): the row base is the pointer.
    pub lane_only: bool,
    /// The vector must be loaded: it is read, or some write is not a plain `p[i] = v;`
    /// statement that every element runs.
    pub load: bool,
}

/// A uniform read of a buffer nothing writes, at a place every element reaches: read
/// once per thread.
pub(super) struct Hoist<'t> {
    pub node: Node<'t>,
    pub buffer: String,
    pub pointee: String,
}

pub(super) struct Plan<'t> {
    pub groups: Vec<Group<'t>>,
    pub hoists: Vec<Hoist<'t>>,
    /// Region locals with one definition (name -> value), expanded into addresses.
    pub defs: BTreeMap<String, Node<'t>>,
}

impl Plan<'_> {
    /// The ranges a column's copy replaces whole: vector accesses and uniform reads.
    pub fn covered(&self) -> Vec<ByteRange> {
        let groups = self.groups.iter().flat_map(|g| g.nodes.iter());
        let hoists = self.hoists.iter().map(|h| &h.node);
        groups.chain(hoists).map(|n| n.byte_range()).collect()
    }
}

enum Kind {
    Unit,
    Uniform,
    Gather,
}

/// The region's locals: those declared once at the top of the element statements and
/// never assigned (name -> value), and all the others (they vary between elements).
fn locals<'t>(src: &str, rows: &Rows<'t>) -> (BTreeMap<String, Node<'t>>, BTreeSet<String>) {
    let elements = rows.element_statements();
    let top: BTreeSet<usize> = elements.iter().map(|n| n.id()).collect();
    // A repeated loop's header is not walked: its variable is the same for every column.
    single_definitions(src, &elements, &|n| {
        n.parent().is_some_and(|p| top.contains(&p.id()))
    })
}

/// The kernel's pointer aliases, declared in order.
fn scope_of<'s, 't>(
    cx: &super::super::RewriteContext<'_>,
    src: &'s str,
    body: Node<'t>,
) -> Result<Scope<'s, 't>, String> {
    let mut scope = Scope::of_kernel(cx, src);
    let mut err = None;
    walk(body, &mut |n| {
        if n.kind() == "declaration" {
            declare_statement(&mut scope, n, &mut err);
        }
        true
    });
    err.map_or(Ok(scope), Err)
}

/// What the region does that one thread doing several columns cannot: another return,
/// a barrier or warp collective, an atomic, shared memory.
fn forbidden(src: &str, rows: &Rows<'_>, body: Node<'_>) -> Option<String> {
    if text(src, body).contains("__shared__") {
        return Some("it uses shared memory".into());
    }
    // The early return's own `return` ends a column; the check is looked at elsewhere.
    let early = (rows.form == Form::EarlyReturn).then(|| rows.guard_node().id());
    let mut why = None;
    for s in &rows.region {
        walk(*s, &mut |n| {
            if why.is_some() || Some(n.id()) == early {
                return false;
            }
            let t = text(src, n);
            match n.kind() {
                "return_statement" => {
                    why = Some(format!(
                        "`{}` returns from inside the columns' work",
                        first_line(t)
                    ));
                }
                "goto_statement" | "labeled_statement" => {
                    why = Some(format!("`{}` jumps", first_line(t)));
                }
                "call_expression" => {
                    let f = n
                        .child_by_field_name("function")
                        .map_or("", |f| text(src, f));
                    if f.starts_with("atomic") {
                        why = Some(format!(
                            "`{}` is an atomic; columns of one thread would race on it",
                            first_line(t)
                        ));
                    } else if let Some(ThreadBound::Collective(f)) = thread_bound(src, n) {
                        why = Some(format!(
                            "the body calls `{f}`; barriers and warp collectives no longer line up"
                        ));
                    }
                }
                _ => {}
            }
            why.is_none()
        });
    }
    why
}

pub(super) fn plan<'t>(
    cx: &super::super::RewriteContext<'_>,
    src: &'t str,
    body: Node<'t>,
    rows: &Rows<'t>,
) -> Result<Plan<'t>, String> {
    if let Some(why) = forbidden(src, rows, body) {
        return Err(why);
    }
    let scope = scope_of(cx, src, body)?;
    let mut accesses: Vec<Access> = Vec::new();
    for s in rows.element_statements() {
        collect_accesses(&scope, s, &mut accesses)?;
    }
    escapes(src, &scope, rows, &accesses)?;
    let (defs, varying) = locals(src, rows);
    // The lane index (`$c`), the region's locals, and thread and block positions that do
    // not move with the lane: `match_rows` refused every read of an x position but the
    // lane index's own, so those left are y and z, the same for every column of a thread.
    let names = FixedPositions(VarNames {
        var: rows.lane.clone(),
        defs: defs.clone(),
        varying,
    });
    let written: BTreeSet<String> = accesses
        .iter()
        .filter(|a| a.write)
        .map(|a| a.buffer.clone())
        .collect();
    let mut unit: Vec<(Access, Poly)> = Vec::new();
    let mut hoists = Vec::new();
    for a in accesses {
        let p = address(src, &a, &names);
        let shown = first_line(text(src, a.node)).to_string();
        let w = written.contains(&a.buffer);
        let everywhere = unconditional(a.node, &rows.element_statements());
        match (kind(&p), w) {
            (Kind::Unit, true) => unit.push((a, p)),
            (Kind::Unit, false) if everywhere => unit.push((a, p)),
            (Kind::Uniform, true) => return Err(format!("`{shown}` is the same element for every column of a row, and `{}` is written: the columns would race on it", a.buffer)),
            (Kind::Gather, true) => return Err(format!("`{shown}` is not the lane's own column of `{}`, which is written: a write to a computed index, or a read another column may write", a.buffer)),
            (Kind::Uniform, false) if everywhere => {
                hoists.push(Hoist { node: a.node, pointee: pointee(cx, &a.buffer), buffer: a.buffer.clone() });
            }
            _ => {}
        }
    }
    let groups = group(cx, src, rows, unit, &written)?;
    Ok(Plan {
        groups,
        hoists,
        defs,
    })
}

/// The address of an access: the sum of its parts' polynomials, with a flat index split
/// into row and column and put back together folded (see [`fold_split`]).
fn address<'t>(src: &str, a: &Access<'t>, names: &FixedPositions<'t>) -> Poly {
    let p = a
        .parts
        .iter()
        .fold(Poly::default(), |acc, p| acc.add(&poly(src, *p, names), 1));
    fold_split(p, &names.0.var)
}

fn kind(p: &Poly) -> Kind {
    match p.linear_in("$c") {
        Some(k)
            if k.as_constant() == Some(1)
                && !p.clone().add(&Poly::atom("$c".into()), -1).tainted() =>
        {
            Kind::Unit
        }
        Some(k) if k.is_zero() && !p.tainted() => Kind::Uniform,
        _ => Kind::Gather,
    }
}

fn pointee(cx: &super::super::RewriteContext<'_>, buffer: &str) -> String {
    super::super::elementwise::pointer_params(cx)
        .remove(buffer)
        .unwrap_or_default()
}

/// Unit accesses by buffer and address. A written buffer must have one address; a read
/// one's first address is vectorized and the others stay per column.
fn group<'t>(
    cx: &super::super::RewriteContext<'_>,
    src: &str,
    rows: &Rows<'_>,
    unit: Vec<(Access<'t>, Poly)>,
    written: &BTreeSet<String>,
) -> Result<Vec<Group<'t>>, String> {
    let tops: BTreeSet<usize> = rows.element_statements().iter().map(|n| n.id()).collect();
    let mut groups: Vec<(Group<'t>, Poly)> = Vec::new();
    for (a, p) in unit {
        if let Some((g, _)) = groups
            .iter_mut()
            .find(|(g, q)| g.buffer == a.buffer && *q == p)
        {
            g.nodes.push(a.node);
            g.load |= !plain_store(&a, &tops);
            continue;
        }
        if let Some((g, _)) = groups.iter().find(|(g, _)| g.buffer == a.buffer) {
            if written.contains(&a.buffer) {
                return Err(format!(
                    "`{}` is written at `{}` and reached at `{}` too: another offset into a written buffer",
                    a.buffer,
                    first_line(text(src, g.nodes[0])),
                    first_line(text(src, a.node))
                ));
            }
            continue;
        }
        let lane_only = a.parts.len() == 1 && p == Poly::atom("$c".into());
        let g = Group {
            lane_only,
            buffer: a.buffer.clone(),
            pointee: pointee(cx, &a.buffer),
            nodes: vec![a.node],
            written: written.contains(&a.buffer),
            load: !plain_store(&a, &tops),
        };
        groups.push((g, p));
    }
    Ok(groups.into_iter().map(|(g, _)| g).collect())
}

/// `p[i] = v;` as an element statement of its own: the element is written whatever
/// happens, so its old value need not be loaded.
fn plain_store(a: &Access<'_>, tops: &BTreeSet<usize>) -> bool {
    let Some(assign) = a.node.parent() else {
        return false;
    };
    a.write
        && assign.kind() == "assignment_expression"
        && assign
            .child_by_field_name("operator")
            .is_some_and(|o| o.kind() == "=")
        && assign
            .parent()
            .is_some_and(|s| s.kind() == "expression_statement" && tops.contains(&s.id()))
}

/// A pointer into a buffer used other than to reach an element (passed to a call,
/// compared, stored): what happens through it cannot be followed.
fn escapes(
    src: &str,
    scope: &Scope<'_, '_>,
    rows: &Rows<'_>,
    accesses: &[Access<'_>],
) -> Result<(), String> {
    let inside: Vec<ByteRange> = accesses.iter().map(|a| a.node.byte_range()).collect();
    let mut err = None;
    for s in rows.element_statements() {
        walk(s, &mut |n| {
            if err.is_some() {
                return false;
            }
            if n.kind() != "identifier" || !scope.pointers.contains_key(text(src, n)) {
                return true;
            }
            let r = n.byte_range();
            let reached = inside.iter().any(|a| a.start <= r.start && r.end <= a.end);
            if !reached && !defines_alias(n) {
                let stmt = enclosing_statement(n).map_or("", |x| text(src, x));
                err = Some(format!(
                    "`{}` is used other than to reach an element (in `{}`)",
                    text(src, n),
                    first_line(stmt)
                ));
            }
            true
        });
    }
    err.map_or(Ok(()), Err)
}
