//! A running sum scanned over register tiles: each lane of the warp that shares the row
//! owns `K` consecutive columns of a trip (the warp takes `32 K` columns at a time), so a
//! trip has one warp scan for `32 K` columns instead of one per 32.
//!
//! A trip runs in two phases over the lane's columns `c_first + j * step` (`j < K`; the
//! loop variable is redeclared in an inner block, so the author's statements are reused as
//! written). First the statements before the update (declarations only) and the update's
//! term are evaluated into `tile[j]` (zero past the loop's end); the tile is scanned in
//! registers, the lanes' totals over the warp (`__shfl_up_sync`), and each lane's exclusive
//! offset plus the carry from earlier trips is the running value before its first column.
//! Then the body runs again per column with the running value set, and every lane's carry
//! becomes the row's running value after the trip.
//!
//! **Vector accesses** (unit-step loops only): a read evaluated unconditionally in the
//! loop's body whose element moves one place with the loop variable, and whose address
//! uses no name the body declares, is loaded for the whole tile at once into a local array
//! (16-byte `uint4` units, or `uint2` for an 8-byte tile) when, at run time, the lane's
//! first element is aligned to that unit and all `K` columns are inside the loop; element
//! by element otherwise. A top-level `B[i] = v;` after the update whose element moves one
//! place with the loop variable, when nothing else in the loop writes `B` and nothing
//! after the update reads it, is collected the same way and stored after the tile. Reads
//! of a buffer the loop writes are replaced only before the update (where the author's
//! iteration reads the value before its own write).

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::super::access::canon;
use super::super::edits::Edit;
use super::super::tree::{
    first_line, fresh, line_indent, named_children, reindent, render, text, walk,
};
use super::super::vectorize::element_bytes;
use super::{ColumnLoop, Step};
use crate::syntax::ByteRange;

/// The 16- or 8-byte unit a tile of `k` elements of `bytes` bytes is moved in, and how
/// many units: None when the tile is not a whole number of units.
pub(super) fn tile_units(bytes: usize, k: usize) -> Option<(&'static str, usize, usize)> {
    match bytes * k {
        n if n % 16 == 0 => Some(("uint4", 16, n / 16)),
        8 => Some(("uint2", 8, 1)),
        _ => None,
    }
}

/// Where an access sits in the loop's body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Before the running sum's update, or in its term.
    Before,
    /// After the update.
    After,
}

/// What one access of the loop becomes in the tile: buffered for the whole tile, or left
/// as written. Pure: the facts are gathered by [`facts`].
#[derive(Clone, Debug)]
pub(super) struct AccessFacts {
    pub buffer: String,
    pub write: bool,
    pub along_loop: Step,
    pub phase: Phase,
    /// Evaluated on every iteration (no `?:`, `&&`, `||`, `if` or loop around it).
    pub unconditional: bool,
    /// Its address uses a name the loop's body declares.
    pub uses_body_locals: bool,
    /// A write that is a whole top-level statement `B[i] = v;`.
    pub plain_store: bool,
}

/// Whether a read is loaded for the whole tile, given every access of the loop.
pub(super) fn buffered_read(a: &AccessFacts, all: &[AccessFacts], unit_step: bool) -> bool {
    let written = all.iter().any(|o| o.write && o.buffer == a.buffer);
    unit_step
        && !a.write
        && a.along_loop == Step::One
        && a.unconditional
        && !a.uses_body_locals
        && (a.phase == Phase::Before || !written)
}

/// Whether a write (one of `all`) is collected over the tile and stored after it.
pub(super) fn deferred_store(a: &AccessFacts, all: &[AccessFacts], unit_step: bool) -> bool {
    let same = || all.iter().filter(|o| o.buffer == a.buffer);
    let others = same().filter(|o| o.write).count() > 1
        || same().any(|o| !o.write && o.phase == Phase::After);
    unit_step
        && a.write
        && a.plain_store
        && a.phase == Phase::After
        && a.along_loop == Step::One
        && !a.uses_body_locals
        && !others
}

/// Names the loop's body declares.
fn body_locals(src: &str, body: Node<'_>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    walk(body, &mut |n| {
        if matches!(n.kind(), "init_declarator" | "declaration") {
            if let Some(d) = n.child_by_field_name("declarator") {
                if d.kind() == "identifier" {
                    out.insert(text(src, d).to_string());
                }
            }
        }
        true
    });
    out
}

fn unconditional(n: Node<'_>, body: Node<'_>, src: &str) -> bool {
    let mut p = n.parent();
    while let Some(a) = p {
        if a.id() == body.id() {
            return true;
        }
        let guarded = match a.kind() {
            "conditional_expression"
            | "if_statement"
            | "for_statement"
            | "while_statement"
            | "do_statement"
            | "switch_statement" => true,
            "binary_expression" => a
                .child_by_field_name("operator")
                .is_some_and(|o| matches!(text(src, o), "&&" | "||")),
            _ => false,
        };
        if guarded {
            return false;
        }
        p = a.parent();
    }
    false
}

/// The facts of each of the loop's accesses (in `l.moves` order), with their nodes.
fn facts<'t>(
    src: &str,
    l: &ColumnLoop<'t>,
    body: Node<'t>,
    update: ByteRange,
    nodes: &[Node<'t>],
) -> Vec<AccessFacts> {
    let locals = body_locals(src, body);
    l.moves
        .iter()
        .zip(nodes)
        .map(|(m, n)| {
            let mut uses = false;
            walk(*n, &mut |x| {
                uses |= x.kind() == "identifier" && locals.contains(text(src, x));
                true
            });
            let stmt = n.parent().and_then(|a| a.parent());
            let plain_store = m.write
                && n.parent().is_some_and(|a| {
                    a.kind() == "assignment_expression"
                        && a.child_by_field_name("left").map(|x| x.id()) == Some(n.id())
                        && a.child_by_field_name("operator").map(|o| text(src, o)) == Some("=")
                })
                && stmt.is_some_and(|s| {
                    s.kind() == "expression_statement"
                        && s.parent().map(|b| b.id()) == Some(body.id())
                });
            AccessFacts {
                buffer: m.buffer.clone(),
                write: m.write,
                along_loop: m.along_loop,
                phase: if n.start_byte() < update.end {
                    Phase::Before
                } else {
                    Phase::After
                },
                unconditional: unconditional(*n, body, src),
                uses_body_locals: uses,
                plain_store,
            }
        })
        .collect()
}

/// One buffered access text: its local array and its run-time test.
struct Buffered {
    /// The access's canonical text (its identity) and its text as written.
    key: String,
    at: String,
    array: String,
    whole: String,
    ty: String,
    store: bool,
}

/// The loop's parts a tile needs.
struct Parts<'t> {
    body: Node<'t>,
    cond: Node<'t>,
    update: Node<'t>,
}

fn parts<'t>(l: &ColumnLoop<'t>, range: &ByteRange) -> Result<Parts<'t>, String> {
    if l.node.kind() != "for_statement" {
        return Err(
            "a running sum in a `while` loop is not scanned; write the loop as a `for`".into(),
        );
    }
    let cond = l
        .node
        .child_by_field_name("condition")
        .ok_or("the loop has no condition")?;
    let body = l
        .node
        .child_by_field_name("body")
        .filter(|b| b.kind() == "compound_statement")
        .ok_or("the loop has no braced body")?;
    let update = named_children(body)
        .into_iter()
        .find(|s| s.byte_range() == *range)
        .ok_or("the running sum's update is not a statement of the loop's body")?;
    Ok(Parts { body, cond, update })
}

/// The statements before the update may only declare (they run in both phases).
fn check_before(src: &str, p: &Parts<'_>) -> Result<(), String> {
    for s in named_children(p.body) {
        if s.start_byte() >= p.update.start_byte() {
            break;
        }
        if !matches!(s.kind(), "declaration" | "comment") {
            return Err(format!(
                "`{}` comes before the running sum's update and is not a declaration",
                first_line(text(src, s))
            ));
        }
        let mut effect = false;
        walk(s, &mut |n| {
            effect |= matches!(n.kind(), "assignment_expression" | "update_expression")
                || (n.kind() == "call_expression"
                    && n.child_by_field_name("function")
                        .is_some_and(|f| text(src, f).starts_with("atomic")));
            !effect
        });
        if effect {
            return Err(format!(
                "the declaration `{}` before the running sum's update has a side effect",
                first_line(text(src, s))
            ));
        }
    }
    Ok(())
}

/// `node`'s text with every identifier `var` replaced by `with`.
fn substitute_var(src: &str, node: Node<'_>, var: &str, with: &str) -> Result<String, String> {
    let mut reps = Vec::new();
    walk(node, &mut |n| {
        if n.kind() == "identifier" && text(src, n) == var {
            reps.push((n.byte_range(), with.to_string()));
        }
        true
    });
    render(src, &node.byte_range(), &reps).map_err(|e| e.to_string())
}

/// The tile's settings.
pub(super) struct TileArgs<'a> {
    pub k: usize,
    pub lane: &'a str,
    pub unit: &'a str,
    pub nl: &'a str,
    /// Pointer parameters' element types.
    pub pointees: &'a BTreeMap<String, String>,
}

/// The edits of one column loop with a running sum scanned over register tiles of
/// `a.k` columns per lane: its start, step and condition (uniform over the warp), and its
/// body.
pub(super) fn loop_edits(
    src: &str,
    l: &ColumnLoop<'_>,
    a: &TileArgs<'_>,
    names: &mut BTreeSet<String>,
) -> Result<Vec<Edit>, String> {
    let nodes: Vec<Node<'_>> = l
        .moves
        .iter()
        .map(|m| {
            l.node
                .descendant_for_byte_range(m.range.start, m.range.end)
                .filter(|n| n.byte_range() == m.range)
                .ok_or("an access's node is not in the loop")
        })
        .collect::<Result<_, _>>()?;
    let prefixes: Vec<_> = l.accs.iter().filter(|x| x.prefix.is_some()).collect();
    let [acc] = prefixes.as_slice() else {
        return Err("the loop carries more than one running sum".into());
    };
    let Some((range, _)) = &acc.prefix else {
        return Err("no running sum".into());
    };
    let ty = acc
        .ty
        .clone()
        .ok_or_else(|| format!("the type of `{}` is not declared in the row body", acc.name))?;
    let p = parts(l, range)?;
    check_before(src, &p)?;
    let term = super::sum_term_node(src, p.update, &acc.name)
        .ok_or("the running sum's update has no term")?;
    let (k, step) = (a.k, l.step);
    let lane_term = match k as i64 * step {
        1 => a.lane.to_string(),
        f => format!("{f} * {}", a.lane),
    };
    let init = text(src, l.init).trim();
    let new_init = if init == "0" {
        lane_term.clone()
    } else {
        format!("{init} + {lane_term}")
    };
    let mut edits = vec![
        Edit::replace(l.init.byte_range(), new_init),
        Edit::replace(
            l.update.byte_range(),
            format!("{} += {}", l.var, 32 * k as i64 * step),
        ),
    ];
    let cond_text = substitute_var(src, p.cond, &l.var, &format!("({} - {lane_term})", l.var))?;
    edits.push(Edit::replace(p.cond.byte_range(), cond_text));
    let all = facts(src, l, p.body, p.update.byte_range(), &nodes);
    let body = tile_body(src, l, a, &p, term, &ty, &acc.name, &all, &nodes, names)?;
    edits.push(Edit::replace(p.body.byte_range(), body));
    Ok(edits)
}

/// Names of one tile body.
struct TileNames {
    first: String,
    j: String,
    tile: String,
    lanes: String,
    before: String,
    after: String,
    up: String,
    off: String,
    full: String,
}

#[allow(clippy::too_many_arguments)]
fn tile_body(
    src: &str,
    l: &ColumnLoop<'_>,
    a: &TileArgs<'_>,
    p: &Parts<'_>,
    term: Node<'_>,
    ty: &str,
    acc: &str,
    all: &[AccessFacts],
    nodes: &[Node<'_>],
    names: &mut BTreeSet<String>,
) -> Result<String, String> {
    let (k, nl, unit, lane) = (a.k, a.nl, a.unit, a.lane);
    let var = &l.var;
    let n = TileNames {
        first: fresh(&format!("{var}_first"), names),
        j: fresh("j", names),
        tile: fresh(&format!("{acc}_tile"), names),
        lanes: fresh(&format!("{acc}_lanes"), names),
        before: fresh(&format!("{acc}_before"), names),
        after: fresh(&format!("{acc}_after"), names),
        up: fresh("up", names),
        off: fresh("offset", names),
        full: fresh("full", names),
    };
    let ind = line_indent(src, l.node.start_byte()).to_string();
    let i1 = format!("{ind}{unit}");
    let i2 = format!("{i1}{unit}");
    let i3 = format!("{i2}{unit}");
    let unit_step = l.step == 1;
    let cond = text(src, p.cond);
    let column = match l.step {
        1 => format!("auto {var} = {} + {};", n.first, n.j),
        s => format!("auto {var} = {} + {} * {s};", n.first, n.j),
    };
    // Buffered accesses, by their text.
    let mut bufs: Vec<Buffered> = Vec::new();
    let mut reps_before: Vec<(ByteRange, String)> = Vec::new();
    let mut reps_after: Vec<(ByteRange, String)> = Vec::new();
    let mut store_stmts: Vec<(ByteRange, String)> = Vec::new();
    // Reads first: a deferred store's value uses them.
    let order = all
        .iter()
        .zip(nodes)
        .filter(|(f, _)| !f.write)
        .chain(all.iter().zip(nodes).filter(|(f, _)| f.write));
    for (f, node) in order {
        let read = buffered_read(f, all, unit_step);
        let store = deferred_store(f, all, unit_step);
        if !read && !store {
            continue;
        }
        let Some(elem) = a.pointees.get(&f.buffer) else {
            continue;
        };
        let Some(bytes) = element_bytes(elem) else {
            continue;
        };
        let Some(_) = tile_units(bytes, k) else {
            continue;
        };
        let key = canon(text(src, *node));
        let idx = match bufs.iter().position(|b| b.key == key && b.store == store) {
            Some(i) => i,
            None => {
                let base = if store { "out" } else { "in" };
                let array = fresh(&format!("{}_{base}", f.buffer), names);
                let whole = fresh(&format!("{}_whole", array), names);
                bufs.push(Buffered {
                    key,
                    at: text(src, *node).to_string(),
                    array,
                    whole,
                    ty: elem.clone(),
                    store,
                });
                bufs.len() - 1
            }
        };
        let b = &bufs[idx];
        let elem_at = format!("{}[{}]", b.array, n.j);
        if store {
            let stmt = node.parent().ok_or("a store without its statement")?;
            let value = stmt
                .child_by_field_name("right")
                .ok_or("a store without a value")?;
            let value = render(
                src,
                &value.byte_range(),
                &reps_in(&reps_after, value.byte_range()),
            )
            .map_err(|e| e.to_string())?;
            store_stmts.push((
                stmt.parent().map_or(stmt.byte_range(), |s| s.byte_range()),
                format!("{elem_at} = {value};"),
            ));
        } else {
            let r = (node.byte_range(), elem_at);
            if f.phase == Phase::Before {
                reps_before.push(r.clone());
            }
            if !all.iter().any(|o| o.write && o.buffer == f.buffer) {
                reps_after.push(r);
            }
        }
    }
    // Statements before the update and its term, with buffered reads.
    let body_in = p.body.start_byte() + 1..p.body.end_byte() - 1;
    let pre_range = body_in.start..p.update.start_byte();
    let post_range = p.update.end_byte()..body_in.end;
    let before_reps = reps_in(&reps_before, pre_range.clone());
    let pre = render(src, &pre_range, &before_reps).map_err(|e| e.to_string())?;
    let term_t = render(
        src,
        &term.byte_range(),
        &reps_in(&reps_before, term.byte_range()),
    )
    .map_err(|e| e.to_string())?;
    // After the update: deferred stores, then buffered reads outside them.
    let mut after = reps_in(&store_stmts, post_range.clone());
    for r in reps_in(&reps_after, post_range.clone()) {
        if !after
            .iter()
            .any(|(s, _)| s.start <= r.0.start && r.0.end <= s.end)
        {
            after.push(r);
        }
    }
    let post = render(src, &post_range, &after).map_err(|e| e.to_string())?;
    let block = |code: &str| -> String {
        let t = code.trim_matches(['\n', '\r']).trim_end();
        if t.trim().is_empty() {
            return String::new();
        }
        let r = reindent(t.trim_start(), &i1, &i3);
        format!("{nl}{i3}{r}")
    };
    let (pre_b, post_b) = (block(&pre), block(&post));
    let mut o = String::new();
    let push = |o: &mut String, ind: &str, s: String| o.push_str(&format!("{nl}{ind}{s}"));
    o.push('{');
    push(
        &mut o,
        &i1,
        format!("// this lane's {k} columns from `{var}`: `{acc}`'s terms scanned in registers,"),
    );
    push(
        &mut o,
        &i1,
        "// then the lanes' totals over the warp".to_string(),
    );
    push(&mut o, &i1, format!("auto {} = {var};", n.first));
    push(&mut o, &i1, format!("{ty} {}[{k}];", n.tile));
    if !bufs.is_empty() {
        let last = substitute_var(
            src,
            p.cond,
            var,
            &format!("({var} + {})", (k as i64 - 1) * l.step),
        )?;
        push(&mut o, &i1, format!("bool {} = {last};", n.full));
    }
    for b in &bufs {
        let bytes = element_bytes(&b.ty).unwrap_or(4);
        let (carrier, align, count) = tile_units(bytes, k).unwrap_or(("uint4", 16, 1));
        push(
            &mut o,
            &i1,
            format!("alignas({align}) {} {}[{k}];", b.ty, b.array),
        );
        push(
            &mut o,
            &i1,
            format!(
                "bool {} = {} && reinterpret_cast<size_t>(&{}) % {align} == 0;",
                b.whole, n.full, b.at
            ),
        );
        if b.store {
            continue;
        }
        let copy = (0..count)
            .map(|q| {
                format!(
                    "reinterpret_cast<{carrier}*>({})[{q}] = reinterpret_cast<const {carrier}*>(&{})[{q}];",
                    b.array, b.at
                )
            })
            .collect::<Vec<_>>();
        push(&mut o, &i1, format!("if ({}) {{", b.whole));
        for c in copy {
            push(&mut o, &i2, c);
        }
        push(&mut o, &i1, "} else {".into());
        push(&mut o, &i2, format!("#pragma unroll"));
        push(
            &mut o,
            &i2,
            format!("for (int {j} = 0; {j} < {k}; {j}++) {{", j = n.j),
        );
        push(&mut o, &i3, column.clone());
        push(
            &mut o,
            &i3,
            format!("if ({cond}) {}[{}] = {};", b.array, n.j, b.at),
        );
        push(&mut o, &i2, "}".into());
        push(&mut o, &i1, "}".into());
    }
    // Phase 1: the terms.
    push(&mut o, &i1, "#pragma unroll".into());
    push(
        &mut o,
        &i1,
        format!("for (int {j} = 0; {j} < {k}; {j}++) {{", j = n.j),
    );
    push(&mut o, &i2, column.clone());
    push(&mut o, &i2, format!("{}[{}] = 0;", n.tile, n.j));
    o.push_str(&format!("{nl}{i2}if ({cond}) {{{pre_b}"));
    push(&mut o, &i3, format!("{}[{}] = {term_t};", n.tile, n.j));
    push(&mut o, &i2, "}".into());
    push(&mut o, &i1, "}".into());
    scan_lines(&mut o, &n, ty, acc, k, lane, &i1, &i2, nl);
    // Phase 2: the body per column, with the running value.
    push(&mut o, &i1, "#pragma unroll".into());
    push(
        &mut o,
        &i1,
        format!("for (int {j} = 0; {j} < {k}; {j}++) {{", j = n.j),
    );
    push(&mut o, &i2, column.clone());
    o.push_str(&format!("{nl}{i2}if ({cond}) {{{pre_b}"));
    push(
        &mut o,
        &i3,
        format!("{acc} = {} + {}[{}];", n.before, n.tile, n.j),
    );
    o.push_str(&post_b);
    push(&mut o, &i2, "}".into());
    push(&mut o, &i1, "}".into());
    for b in bufs.iter().filter(|b| b.store) {
        let bytes = element_bytes(&b.ty).unwrap_or(4);
        let (carrier, _, count) = tile_units(bytes, k).unwrap_or(("uint4", 16, 1));
        push(&mut o, &i1, format!("if ({}) {{", b.whole));
        for q in 0..count {
            push(
                &mut o,
                &i2,
                format!(
                    "reinterpret_cast<{carrier}*>(&{})[{q}] = reinterpret_cast<const {carrier}*>({})[{q}];",
                    b.at, b.array
                ),
            );
        }
        push(&mut o, &i1, "} else {".into());
        push(&mut o, &i2, "#pragma unroll".into());
        push(
            &mut o,
            &i2,
            format!("for (int {j} = 0; {j} < {k}; {j}++) {{", j = n.j),
        );
        push(&mut o, &i3, column.clone());
        push(
            &mut o,
            &i3,
            format!("if ({cond}) {} = {}[{}];", b.at, b.array, n.j),
        );
        push(&mut o, &i2, "}".into());
        push(&mut o, &i1, "}".into());
    }
    push(&mut o, &i1, format!("{acc} = {};", n.after));
    push(&mut o, &ind, "}".into());
    Ok(o)
}

/// The replacements that lie inside `span`.
fn reps_in(reps: &[(ByteRange, String)], span: ByteRange) -> Vec<(ByteRange, String)> {
    reps.iter()
        .filter(|(r, _)| span.start <= r.start && r.end <= span.end)
        .cloned()
        .collect()
}

/// The scan of the tile: in registers, then the lanes' totals over the warp; the running
/// value before the lane's first column and after the trip.
#[allow(clippy::too_many_arguments)]
fn scan_lines(
    o: &mut String,
    n: &TileNames,
    ty: &str,
    acc: &str,
    k: usize,
    lane: &str,
    i1: &str,
    i2: &str,
    nl: &str,
) {
    let (t, j, off) = (&n.tile, &n.j, &n.off);
    let lines = [
        (i1, "#pragma unroll".to_string()),
        (
            i1,
            format!("for (int {j} = 1; {j} < {k}; {j}++) {t}[{j}] += {t}[{j} - 1];"),
        ),
        (i1, format!("{ty} {} = {t}[{}];", n.lanes, k - 1)),
        (
            i1,
            format!("for (int {off} = 1; {off} < 32; {off} *= 2) {{"),
        ),
        (
            i2,
            format!(
                "{ty} {} = __shfl_up_sync(0xffffffff, {}, {off});",
                n.up, n.lanes
            ),
        ),
        (i2, format!("if ({lane} >= {off}) {} += {};", n.lanes, n.up)),
        (i1, "}".to_string()),
        (
            i1,
            format!(
                "{ty} {} = __shfl_up_sync(0xffffffff, {}, 1);",
                n.before, n.lanes
            ),
        ),
        (i1, format!("if ({lane} == 0) {} = 0;", n.before)),
        (i1, format!("{} += {acc};", n.before)),
        (
            i1,
            format!(
                "{ty} {} = {acc} + __shfl_sync(0xffffffff, {}, 31);",
                n.after, n.lanes
            ),
        ),
    ];
    for (ind, l) in lines {
        o.push_str(&format!("{nl}{ind}{l}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(buffer: &str, phase: Phase) -> AccessFacts {
        AccessFacts {
            buffer: buffer.into(),
            write: false,
            along_loop: Step::One,
            phase,
            unconditional: true,
            uses_body_locals: false,
            plain_store: false,
        }
    }

    fn store(buffer: &str) -> AccessFacts {
        AccessFacts {
            write: true,
            plain_store: true,
            ..read(buffer, Phase::After)
        }
    }

    #[test]
    fn tiles_move_in_16_byte_units_or_one_8_byte_unit() {
        assert_eq!(tile_units(4, 4), Some(("uint4", 16, 1)));
        assert_eq!(tile_units(4, 8), Some(("uint4", 16, 2)));
        assert_eq!(tile_units(8, 4), Some(("uint4", 16, 2)));
        assert_eq!(tile_units(2, 4), Some(("uint2", 8, 1)));
        assert_eq!(tile_units(2, 8), Some(("uint4", 16, 1)));
        assert_eq!(tile_units(1, 4), None);
        assert_eq!(tile_units(4, 3), None);
    }

    #[test]
    fn a_read_is_buffered_only_where_every_iteration_reads_it_in_order() {
        let x = read("x", Phase::Before);
        let all = [x.clone(), store("y")];
        assert!(buffered_read(&x, &all, true));
        assert!(!buffered_read(&x, &all, false), "columns a step apart");
        for f in [
            AccessFacts { along_loop: Step::Zero, ..x.clone() },
            AccessFacts { along_loop: Step::Other, ..x.clone() },
            AccessFacts { unconditional: false, ..x.clone() },
            AccessFacts { uses_body_locals: true, ..x.clone() },
        ] {
            assert!(!buffered_read(&f, &all, true), "{f:?}");
        }
        // A buffer the loop writes: before the update (its own old value) but not after.
        let y_before = read("y", Phase::Before);
        let y_after = read("y", Phase::After);
        let all = [y_before.clone(), y_after.clone(), store("y")];
        assert!(buffered_read(&y_before, &all, true));
        assert!(!buffered_read(&y_after, &all, true));
    }

    #[test]
    fn a_store_waits_for_the_tile_only_when_nothing_else_touches_its_buffer_after_the_update() {
        let y = store("y");
        assert!(deferred_store(&y, &[read("x", Phase::Before), y.clone()], true));
        assert!(deferred_store(&y, &[read("y", Phase::Before), y.clone()], true), "in place");
        assert!(!deferred_store(&y, &[read("y", Phase::After), y.clone()], true));
        assert!(!deferred_store(&y, &[y.clone(), store("y")], true), "written twice");
        assert!(!deferred_store(&y, &[y.clone()], false));
        for f in [
            AccessFacts { plain_store: false, ..y.clone() },
            AccessFacts { phase: Phase::Before, ..y.clone() },
            AccessFacts { along_loop: Step::Other, ..y.clone() },
            AccessFacts { uses_body_locals: true, ..y.clone() },
        ] {
            assert!(!deferred_store(&f, std::slice::from_ref(&f), true), "{f:?}");
        }
    }
}
