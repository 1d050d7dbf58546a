//! Register tiles of a warp row's column loop: each lane of the warp that shares the row
//! owns `K` consecutive columns of a trip (the warp takes `32 K` columns at a time). For
//! a running sum, a trip has one warp scan for `32 K` columns instead of one per 32; for a
//! loop that walks the row one element at a time (no running sum), the body simply runs
//! per column of the tile, and the tile's reads and writes move in 16-byte units.
//!
//! With a running sum a trip runs in two phases over the lane's columns `c_first + j *
//! step` (`j < K`; the loop variable is redeclared in an inner block, so the author's
//! statements are reused as written). First the statements before the update
//! (declarations only) and the update's term are evaluated into `tile[j]` (zero past the
//! loop's end); the tile is scanned in registers, the lanes' totals over the warp
//! (`__shfl_up_sync`), and each lane's exclusive offset plus the carry from earlier trips
//! is the running value before its first column. Then the body runs again per column with
//! the running value set, and every lane's carry becomes the row's running value after
//! the trip. Without one, only the second phase.
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
    split: usize,
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
                        && (s.id() == body.id() || s.parent().map(|b| b.id()) == Some(body.id()))
                });
            AccessFacts {
                buffer: m.buffer.clone(),
                write: m.write,
                along_loop: m.along_loop,
                phase: if n.start_byte() < split {
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
    /// The body's statements: inside its braces, or the one statement.
    inner: ByteRange,
    cond: Node<'t>,
    /// A running sum's update statement.
    update: Option<Node<'t>>,
}

/// A `for` column loop's condition and body (a running sum in a `while` is not scanned).
pub(super) fn for_parts<'t>(l: &ColumnLoop<'t>) -> Result<(Node<'t>, Node<'t>), String> {
    if l.node.kind() != "for_statement" {
        return Err("the loop is a `while`; write it as a `for`".into());
    }
    let cond = l.node.child_by_field_name("condition");
    let body = l.node.child_by_field_name("body");
    Ok((
        cond.ok_or("the loop has no condition")?,
        body.ok_or("the loop has no body")?,
    ))
}

fn parts<'t>(l: &ColumnLoop<'t>, prefix: Option<&ByteRange>) -> Result<Parts<'t>, String> {
    let (cond, body) = for_parts(l)?;
    let inner = match body.kind() {
        "compound_statement" => body.start_byte() + 1..body.end_byte().saturating_sub(1),
        _ => body.byte_range(),
    };
    let update = match prefix {
        None => None,
        Some(range) => Some(
            named_children(body)
                .into_iter()
                .find(|s| s.byte_range() == *range)
                .ok_or("the running sum's update is not a statement of the loop's body")?,
        ),
    };
    Ok(Parts {
        body,
        inner,
        cond,
        update,
    })
}

/// The statements before the update may only declare (they run in both phases).
fn check_before(src: &str, p: &Parts<'_>) -> Result<(), String> {
    let Some(update) = p.update else {
        return Ok(());
    };
    for s in named_children(p.body) {
        if s.start_byte() >= update.start_byte() {
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
    let (p, prefix) = match prefixes.as_slice() {
        [] => (parts(l, None)?, None),
        [acc] => {
            let range = acc.prefix.as_ref().map(|(r, _)| r);
            let p = parts(l, range)?;
            check_before(src, &p)?;
            let ty = acc.ty.clone().ok_or_else(|| {
                format!("the type of `{}` is not declared in the row body", acc.name)
            })?;
            let term = p
                .update
                .and_then(|u| super::sum_term_node(src, u, &acc.name))
                .ok_or("the running sum's update has no term")?;
            let prefix = Prefix {
                acc: acc.name.clone(),
                ty,
                term,
            };
            (p, Some(prefix))
        }
        _ => return Err("the loop carries more than one running sum".into()),
    };
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
    let split = p.update.map_or(p.inner.start, |u| u.end_byte());
    let all = facts(src, l, p.body, split, &nodes);
    let mut body = tile_body(src, l, a, &p, prefix.as_ref(), &all, &nodes, names)?;
    // An unbraced body on its own line: the new braces open on the loop's line.
    let from = match p.body.prev_sibling() {
        Some(close) if p.body.kind() != "compound_statement" => {
            body.insert(0, ' ');
            close.end_byte()
        }
        _ => p.body.start_byte(),
    };
    edits.push(Edit::replace(from..p.body.end_byte(), body));
    Ok(edits)
}

/// A running sum's parts.
struct Prefix<'t> {
    acc: String,
    ty: String,
    term: Node<'t>,
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

impl TileNames {
    fn new(var: &str, acc: &str, names: &mut BTreeSet<String>) -> TileNames {
        let mut f = |base: String| fresh(&base, names);
        TileNames {
            first: f(format!("{var}_first")),
            j: f("j".into()),
            tile: f(format!("{acc}_tile")),
            lanes: f(format!("{acc}_lanes")),
            before: f(format!("{acc}_before")),
            after: f(format!("{acc}_after")),
            up: f("up".into()),
            off: f("offset".into()),
            full: f("full".into()),
        }
    }
}

/// Lines of code at indentation levels below the loop's.
struct Out<'a> {
    text: String,
    nl: &'a str,
    /// The loop's indentation, one level in, two, three.
    ind: [String; 4],
}

impl Out<'_> {
    fn line(&mut self, level: usize, s: impl AsRef<str>) {
        self.text
            .push_str(&format!("{}{}{}", self.nl, self.ind[level], s.as_ref()));
    }
    /// `for (int j = 0; j < k; j++) {` with its pragma, and the column's declaration.
    fn per_column(&mut self, level: usize, n: &TileNames, k: usize, column: &str) {
        self.line(level, "#pragma unroll");
        self.line(
            level,
            format!("for (int {j} = 0; {j} < {k}; {j}++) {{", j = n.j),
        );
        self.line(level + 1, column);
    }
}

/// What the tile does with the loop's accesses: the buffered ones, and the replacements
/// of the body's text before the update (or in its term) and after it.
#[derive(Default)]
struct Plan {
    bufs: Vec<Buffered>,
    before: Vec<(ByteRange, String)>,
    after: Vec<(ByteRange, String)>,
}

fn plan(
    src: &str,
    l: &ColumnLoop<'_>,
    a: &TileArgs<'_>,
    all: &[AccessFacts],
    nodes: &[Node<'_>],
    j: &str,
    names: &mut BTreeSet<String>,
) -> Result<Plan, String> {
    let unit_step = l.step == 1;
    let mut out = Plan::default();
    let mut stores = Vec::new();
    // Reads first: a deferred store's value uses them.
    let order = all.iter().zip(nodes).filter(|(f, _)| !f.write);
    let order = order.chain(all.iter().zip(nodes).filter(|(f, _)| f.write));
    for (f, node) in order {
        let store = deferred_store(f, all, unit_step);
        if !buffered_read(f, all, unit_step) && !store {
            continue;
        }
        let Some(elem) = a.pointees.get(&f.buffer) else {
            continue;
        };
        if element_bytes(elem)
            .and_then(|b| tile_units(b, a.k))
            .is_none()
        {
            continue;
        }
        let at = slot(&mut out.bufs, src, f, *node, elem, store, j, names);
        if store {
            stores.push(collected_store(src, *node, &at, &out.after)?);
            continue;
        }
        if f.phase == Phase::Before {
            out.before.push((node.byte_range(), at.clone()));
        }
        if !all.iter().any(|o| o.write && o.buffer == f.buffer) {
            out.after.push((node.byte_range(), at));
        }
    }
    // A deferred store's statement is replaced whole, reads inside it included.
    let inside = |r: &ByteRange| {
        stores
            .iter()
            .any(|(s, _)| s.start <= r.start && r.end <= s.end)
    };
    out.after.retain(|(r, _)| !inside(r));
    out.after.extend(stores);
    Ok(out)
}

/// The element `j` of the local array that holds access `node` over the tile (one array
/// per access text and direction, made on first use).
#[allow(clippy::too_many_arguments)]
fn slot(
    bufs: &mut Vec<Buffered>,
    src: &str,
    f: &AccessFacts,
    node: Node<'_>,
    elem: &str,
    store: bool,
    j: &str,
    names: &mut BTreeSet<String>,
) -> String {
    let key = canon(text(src, node));
    if let Some(b) = bufs.iter().find(|b| b.key == key && b.store == store) {
        return format!("{}[{j}]", b.array);
    }
    let array = fresh(
        &format!("{}_{}", f.buffer, if store { "out" } else { "in" }),
        names,
    );
    let whole = fresh(&format!("{array}_whole"), names);
    let at = format!("{array}[{j}]");
    let text = text(src, node).to_string();
    bufs.push(Buffered {
        key,
        at: text,
        array,
        whole,
        ty: elem.to_string(),
        store,
    });
    at
}

/// The statement `B[i] = v;` of store `node` rewritten to set `at` (the reads in `v`
/// replaced by `reads`): its range and its new text.
fn collected_store(
    src: &str,
    node: Node<'_>,
    at: &str,
    reads: &[(ByteRange, String)],
) -> Result<(ByteRange, String), String> {
    let assign = node.parent().ok_or("a store without its statement")?;
    let value = assign
        .child_by_field_name("right")
        .ok_or("a store without a value")?;
    let span = value.byte_range();
    let value = render(src, &span, &reps_in(reads, span.clone())).map_err(|e| e.to_string())?;
    let stmt = assign
        .parent()
        .map_or(assign.byte_range(), |s| s.byte_range());
    Ok((stmt, format!("{at} = {value};")))
}

/// The declarations of the buffered accesses, and the loads of the read ones.
fn load_lines(o: &mut Out<'_>, plan: &Plan, n: &TileNames, k: usize, column: &str, cond: &str) {
    for b in &plan.bufs {
        let bytes = element_bytes(&b.ty).unwrap_or(4);
        let align = tile_units(bytes, k).map_or(16, |u| u.1);
        o.line(1, format!("alignas({align}) {} {}[{k}];", b.ty, b.array));
        let aligned = format!("reinterpret_cast<size_t>(&{}) % {align} == 0", b.at);
        o.line(1, format!("bool {} = {} && {aligned};", b.whole, n.full));
        if !b.store {
            move_lines(o, b, n, k, column, cond);
        }
    }
}

/// The stores of the collected outputs.
fn store_lines(o: &mut Out<'_>, plan: &Plan, n: &TileNames, k: usize, column: &str, cond: &str) {
    for b in plan.bufs.iter().filter(|b| b.store) {
        move_lines(o, b, n, k, column, cond);
    }
}

/// One buffered access moved between memory and its array (into it for a read, out of it
/// for a store): whole units where the run-time test allows, element by element otherwise.
fn move_lines(o: &mut Out<'_>, b: &Buffered, n: &TileNames, k: usize, column: &str, cond: &str) {
    let bytes = element_bytes(&b.ty).unwrap_or(4);
    let (carrier, _, count) = tile_units(bytes, k).unwrap_or(("uint4", 16, 1));
    let (mem, local) = (format!("&{}", b.at), b.array.clone());
    let (to, from) = if b.store {
        (&mem, &local)
    } else {
        (&local, &mem)
    };
    let elem = format!("{}[{}]", b.array, n.j);
    let (to_elem, from_elem) = if b.store {
        (&b.at, &elem)
    } else {
        (&elem, &b.at)
    };
    o.line(1, format!("if ({}) {{", b.whole));
    for q in 0..count {
        o.line(2, format!("reinterpret_cast<{carrier}*>({to})[{q}] = reinterpret_cast<const {carrier}*>({from})[{q}];"));
    }
    o.line(1, "} else {");
    o.per_column(2, n, k, column);
    o.line(3, format!("if ({cond}) {to_elem} = {from_elem};"));
    o.line(2, "}");
    o.line(1, "}");
}

/// The body's statements before the update and after it (all of them without a running
/// sum), with the plan's replacements, indented three levels in (empty: nothing).
fn body_texts(src: &str, p: &Parts<'_>, plan: &Plan, o: &Out<'_>) -> Result<[String; 2], String> {
    let split = p
        .update
        .map_or(p.inner.start..p.inner.start, |u| u.byte_range());
    let body_ind = line_indent(src, p.inner.start.min(src.len())).to_string();
    let from = match p.body.kind() {
        "compound_statement" => o.ind[1].as_str(),
        _ => body_ind.as_str(),
    };
    let mut out = [String::new(), String::new()];
    let spans = [
        (p.inner.start..split.start, &plan.before),
        (split.end..p.inner.end, &plan.after),
    ];
    for (slot, (span, reps)) in out.iter_mut().zip(spans) {
        let code = render(src, &span, &reps_in(reps, span.clone())).map_err(|e| e.to_string())?;
        let t = code.trim_matches(['\n', '\r']).trim_end();
        if !t.trim().is_empty() {
            let body = reindent(t.trim_start(), from, &o.ind[3]);
            *slot = format!("{}{}{body}", o.nl, o.ind[3]);
        }
    }
    Ok(out)
}

/// The trip's first lines: what it does, the lane's first column, whether the whole tile
/// is inside the loop.
#[allow(clippy::too_many_arguments)]
fn head_lines(
    o: &mut Out<'_>,
    src: &str,
    l: &ColumnLoop<'_>,
    p: &Parts<'_>,
    n: &TileNames,
    k: usize,
    prefix: Option<&Prefix<'_>>,
    tested: bool,
) -> Result<(), String> {
    let var = &l.var;
    match prefix {
        Some(x) => {
            let acc = &x.acc;
            o.line(1, format!("// this lane's {k} columns from `{var}`: `{acc}`'s terms scanned in registers,"));
            o.line(1, "// then the lanes' totals over the warp");
        }
        None => o.line(
            1,
            format!("// this lane's {k} columns from `{var}`, moved as whole tiles where aligned"),
        ),
    }
    o.line(1, format!("auto {} = {var};", n.first));
    if tested {
        let last = format!("({var} + {})", (k as i64 - 1) * l.step);
        o.line(
            1,
            format!(
                "bool {} = {};",
                n.full,
                substitute_var(src, p.cond, var, &last)?
            ),
        );
    }
    Ok(())
}

/// A running sum's terms of the lane's columns (zero past the loop), then their scan.
#[allow(clippy::too_many_arguments)]
fn term_lines(
    o: &mut Out<'_>,
    src: &str,
    x: &Prefix<'_>,
    plan: &Plan,
    n: &TileNames,
    k: usize,
    column: &str,
    cond: &str,
    pre: &str,
    lane: &str,
) -> Result<(), String> {
    let span = x.term.byte_range();
    let term =
        render(src, &span, &reps_in(&plan.before, span.clone())).map_err(|e| e.to_string())?;
    o.line(1, format!("{} {}[{k}];", x.ty, n.tile));
    o.per_column(1, n, k, column);
    o.line(2, format!("{}[{}] = 0;", n.tile, n.j));
    o.line(2, format!("if ({cond}) {{{pre}"));
    o.line(3, format!("{}[{}] = {term};", n.tile, n.j));
    o.line(2, "}");
    o.line(1, "}");
    scan_lines(o, n, &x.ty, &x.acc, k, lane);
    Ok(())
}

/// The new body of a tiled loop.
#[allow(clippy::too_many_arguments)]
fn tile_body(
    src: &str,
    l: &ColumnLoop<'_>,
    a: &TileArgs<'_>,
    p: &Parts<'_>,
    prefix: Option<&Prefix<'_>>,
    all: &[AccessFacts],
    nodes: &[Node<'_>],
    names: &mut BTreeSet<String>,
) -> Result<String, String> {
    let (k, var) = (a.k, &l.var);
    let n = TileNames::new(var, prefix.map_or("v", |x| x.acc.as_str()), names);
    let ind = line_indent(src, l.node.start_byte()).to_string();
    let level = |d: usize| format!("{ind}{}", a.unit.repeat(d));
    let mut o = Out {
        text: "{".into(),
        nl: a.nl,
        ind: [level(0), level(1), level(2), level(3)],
    };
    let cond = text(src, p.cond);
    let column = match l.step {
        1 => format!("auto {var} = {} + {};", n.first, n.j),
        s => format!("auto {var} = {} + {} * {s};", n.first, n.j),
    };
    let plan = plan(src, l, a, all, nodes, &n.j, names)?;
    let [pre, post] = body_texts(src, p, &plan, &o)?;
    head_lines(&mut o, src, l, p, &n, k, prefix, !plan.bufs.is_empty())?;
    load_lines(&mut o, &plan, &n, k, &column, cond);
    if let Some(x) = prefix {
        term_lines(&mut o, src, x, &plan, &n, k, &column, cond, &pre, a.lane)?;
    }
    // The body per column, with the running value set.
    o.per_column(1, &n, k, &column);
    o.line(2, format!("if ({cond}) {{{pre}"));
    if let Some(x) = prefix {
        o.line(
            3,
            format!("{} = {} + {}[{}];", x.acc, n.before, n.tile, n.j),
        );
    }
    o.text.push_str(&post);
    o.line(2, "}");
    o.line(1, "}");
    store_lines(&mut o, &plan, &n, k, &column, cond);
    if let Some(x) = prefix {
        o.line(1, format!("{} = {};", x.acc, n.after));
    }
    o.line(0, "}");
    Ok(o.text)
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
fn scan_lines(o: &mut Out<'_>, n: &TileNames, ty: &str, acc: &str, k: usize, lane: &str) {
    let (t, j, off, lanes) = (&n.tile, &n.j, &n.off, &n.lanes);
    o.line(1, "#pragma unroll");
    o.line(
        1,
        format!("for (int {j} = 1; {j} < {k}; {j}++) {t}[{j}] += {t}[{j} - 1];"),
    );
    o.line(1, format!("{ty} {lanes} = {t}[{}];", k - 1));
    o.line(1, format!("for (int {off} = 1; {off} < 32; {off} *= 2) {{"));
    o.line(
        2,
        format!(
            "{ty} {} = __shfl_up_sync(0xffffffff, {lanes}, {off});",
            n.up
        ),
    );
    o.line(2, format!("if ({lane} >= {off}) {lanes} += {};", n.up));
    o.line(1, "}");
    o.line(
        1,
        format!(
            "{ty} {} = __shfl_up_sync(0xffffffff, {lanes}, 1);",
            n.before
        ),
    );
    o.line(1, format!("if ({lane} == 0) {} = 0;", n.before));
    o.line(1, format!("{} += {acc};", n.before));
    o.line(
        1,
        format!(
            "{ty} {} = {acc} + __shfl_sync(0xffffffff, {lanes}, 31);",
            n.after
        ),
    );
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
            AccessFacts {
                along_loop: Step::Zero,
                ..x.clone()
            },
            AccessFacts {
                along_loop: Step::Other,
                ..x.clone()
            },
            AccessFacts {
                unconditional: false,
                ..x.clone()
            },
            AccessFacts {
                uses_body_locals: true,
                ..x.clone()
            },
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
        assert!(deferred_store(
            &y,
            &[read("x", Phase::Before), y.clone()],
            true
        ));
        assert!(
            deferred_store(&y, &[read("y", Phase::Before), y.clone()], true),
            "in place"
        );
        assert!(!deferred_store(
            &y,
            &[read("y", Phase::After), y.clone()],
            true
        ));
        assert!(
            !deferred_store(&y, &[y.clone(), store("y")], true),
            "written twice"
        );
        assert!(!deferred_store(&y, std::slice::from_ref(&y), false));
        for f in [
            AccessFacts {
                plain_store: false,
                ..y.clone()
            },
            AccessFacts {
                phase: Phase::Before,
                ..y.clone()
            },
            AccessFacts {
                along_loop: Step::Other,
                ..y.clone()
            },
            AccessFacts {
                uses_body_locals: true,
                ..y.clone()
            },
        ] {
            assert!(!deferred_store(&f, std::slice::from_ref(&f), true), "{f:?}");
        }
    }
}
