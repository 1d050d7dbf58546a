//! `transpose_tile`: a 2-D kernel whose reads are coalesced along one thread axis and whose
//! one write is coalesced along the other (a transpose, `out[col * rows + row] =
//! in[row * cols + col]`, or the same with the roles swapped) is staged through a padded
//! `__shared__` tile: the block reads a 32x32 tile with neighbouring threads on
//! neighbouring addresses, computes each value there, and writes the tile back with
//! neighbouring threads on the write's neighbouring addresses. The tile has 33 columns,
//! so the column-wise read of the second phase hits 32 different banks.
//!
//! **Matches** [`super::grid2d`]'s shape whose guarded body is local declarations and one
//! global store, last, `out[G] = V;` (or a compound assignment). Every global load must
//! be unit-stride along the *read axis* or not depend on it; `G` must be unit-stride
//! along the other axis. Which axis is which comes from the index polynomials
//! ([`super::poly`]).
//!
//! **Writes**: `__shared__ T tile[32][33]` (T the store's element type); a first loop in
//! which `threadIdx.x` walks the read axis and `threadIdx.y` steps over the tile's other
//! rows, running the body with the store replaced by a tile write; `__syncthreads()`; a
//! second loop in which `threadIdx.x` walks the write axis and stores from the tile (the
//! block's height is written as a literal, so a block-size sweep leaves it alone). The
//! bounds check is evaluated for each element as the author wrote it. The launch becomes
//! block (32, R) for R in param `rows_per_pass` (default [8, 16, 4]: on an H200 a
//! (0, 2, 1) permute timed 0.0246 ms in (32, 8) blocks, 4 elements a thread, and 0.0410
//! in (32, 16), 2 a thread, so (32, 4) is tried too) and each grid dim `cdiv(X, B)`
//! becomes `cdiv(X, 32)`.
//!
//! The write's address may name locals of the body that are arithmetic on the indices
//! and sizes (no read of memory, no call, never assigned after): the second pass
//! repeats their declarations for its element, and a split of a thread index by a size
//! (`m = row % M; b = row / M`, a batch folded into the row) is judged with the quotient
//! the same and the remainder moving with the index (unit-stride within a batch; each
//! element still computes its own address where a tile crosses one). Such a write is no scatter:
//! two elements that met on one address raced as written too.
//!
//! **Flat kernels**: a 1-D kernel that splits its flat index into a row and a column
//! (`r = i / cols; c = i % cols`, a batch folded in as `i / (M * N)`) is first made a 2-D
//! launch by [`super::delinearize`] (its launches alone, not the vectorized ones), and
//! each launch of the 2-D shape is then tiled as above: label `2-D launch ..., then 32x32
//! tile ...`. The launch alone keeps the strided side as slow as it was, so the search
//! would not keep it as a version to tile next.
//!
//! **Refuses**: another shape; loops, barriers, atomics or `threadIdx` in the body; more
//! than one store or a store that is not last; a read that is coalesced along neither
//! axis; a write already coalesced along the read axis (nothing to gain); a body whose
//! only reads along the read axis are the same along the write's (a broadcast such as
//! `idx[row]`: nothing to transpose); a write through a local read from memory; a store
//! whose buffer the body also reads; a block or grid that is not literal `cdiv(X, B)`
//! dims; a flat kernel none of whose `delinearize` launches is tiled (the reason for one
//! that is the 2-D shape is given).

use std::collections::BTreeMap;

use tree_sitter::Node;

use super::access::{collect_accesses, declare_statement, Access, Scope};
use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::delinearize::then_on_2d_launch;
use super::edits::{Edit, Edits};
use super::elementwise::{pointer_params, thread_bound, ThreadBound};
use super::grid2d::{match_2d, Launch2d, Shape2d, SHAPE_2D};
use super::params::Params;
use super::poly::{poly, Names, Poly, Renamed};
use super::tree::{
    assigned_names, code_names, declared_in, first_line, fresh, kernel_function, line_indent,
    named_children, newline, reindent, text, walk,
};
use super::RewriteContext;
use crate::syntax::Lang;

const ID: &str = "transpose_tile";
const TILE: u64 = 32;
/// How a refusal of the shape begins (after the kernel's name).
const SHAPE_WORDS: &str = "is not a 2-D one-thread-per-element kernel";

/// `Some(true)`: unit-stride along `axis`; `Some(false)`: does not move along it; None:
/// anything else.
fn along(p: &Poly, axis: &str) -> Option<bool> {
    let c = p.linear_in(axis)?;
    if c.is_zero() {
        return Some(false);
    }
    (c.as_constant() == Some(1)).then_some(true)
}

pub fn transpose_tile(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, ID)?;
    current_plan(cx)?;
    let passes = Params(cx.params).uints("rows_per_pass", &[8, 16, 4], 1..=32)?;
    let k = &cx.kernel.name;
    let src = cx.text;
    let func = kernel_function(cx)
        .ok_or_else(|| not_applicable(format!("`{k}`'s definition is not in the syntax tree")))?;
    let shape = match match_2d(src, func) {
        Ok(shape) => shape,
        Err(why) => return through_delinearize(cx, &why),
    };
    let na = |why: String| not_applicable(format!("`{k}` cannot be staged through a tile: {why}"));
    let plan_body = match analyze(cx, &shape) {
        Ok(p) => p,
        Err(whole) => {
            return match stage_reads::analyze(cx, &shape) {
                Ok(plan) => staged(cx, &shape, &plan, &passes),
                Err(Refusal::NotItsShape) => Err(na(whole)),
                Err(Refusal::Why(why)) => Err(na(why)),
            }
        }
    };
    let launch = Launch2d::of(cx).map_err(na)?;
    let names = code_names(cx);

    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    for r in passes {
        let code = emit(cx, &shape, &plan_body, r, &mut names.clone());
        let label = format!("{TILE}x{TILE} tile through shared memory, block (32, {r})");
        let mut e = Edits::new();
        match launch.edits(TILE, r, TILE, TILE) {
            Ok(l) => {
                e.extend(l);
            }
            Err(why) => {
                dropped.push(format!("{label}: {why}"));
                continue;
            }
        }
        e.extend([Edit::replace(
            shape.start..shape.end,
            format!("{}{code}", shape.prelude),
        )]);
        match e.apply(src) {
            Ok(text) => drafts.push(Draft { label, text }),
            Err(err) => dropped.push(format!("{label}: {err}")),
        }
    }
    finish(cx, drafts, dropped)
}

/// A 1-D kernel splitting a flat index (`r = i / cols; c = i % cols`, a batch folded
/// in as `b = i / (M * N)`) made a 2-D launch by `delinearize` first, then tiled: the
/// launch alone keeps the strided side as slow as it was, so the search would not keep
/// it as a version to tile next. `why` is why the kernel is not the 2-D shape.
fn through_delinearize(cx: &RewriteContext<'_>, why: &str) -> R {
    let k = &cx.kernel.name;
    let head = || {
        flat_refusal(cx)
            .unwrap_or_else(|| format!("`{k}` {SHAPE_WORDS}: {why}; {ID} needs {SHAPE_2D}"))
    };
    match then_on_2d_launch(cx, transpose_tile, SHAPE_WORDS, false) {
        Ok(drafts) => finish(cx, drafts, Vec::new()),
        Err(Some(t)) => Err(not_applicable(format!(
            "{}; as a 2-D launch (`delinearize`) it is refused too: {t}",
            head()
        ))),
        Err(None) => Err(not_applicable(head())),
    }
}

/// The candidates that stage only the transposed reads of `plan`: a 32-square tile for
/// each `rows_per_pass` R (block (32, R)), and the author's block when it is (B, R) with
/// R dividing B (tile B square; (16, 16) stays (16, 16)).
fn staged(cx: &RewriteContext<'_>, shape: &Shape2d<'_>, plan: &Plan<'_>, passes: &[u64]) -> R {
    let k = &cx.kernel.name;
    let na = |why: String| not_applicable(format!("`{k}` cannot be staged through a tile: {why}"));
    let launch = Launch2d::of(cx).map_err(na)?;
    let mut shapes: Vec<(u64, u64, &str)> = passes.iter().map(|r| (TILE, *r, "")).collect();
    if let [bx, by, ..] = launch.old[..] {
        let fits = (8..=64).contains(&bx) && by >= 1 && bx % by == 0;
        if fits && !shapes.iter().any(|s| (s.0, s.1) == (bx, by)) {
            shapes.push((bx, by, ", the kernel's own block"));
        }
    }
    let reads = stage_reads::staged_list(cx.text, plan);
    let names = code_names(cx);
    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    for (size, rows, own) in shapes {
        let label = format!(
            "{size}x{size} tiles of the transposed reads {reads} through shared memory, block ({size}, {rows}){own}"
        );
        let code = stage_reads::emit(cx, shape, plan, size, rows, &mut names.clone());
        let edits = code.and_then(|code| {
            let mut e = Edits::new();
            e.extend(launch.edits(size, rows, size, size)?);
            e.extend([Edit::replace(
                shape.start..shape.end,
                format!("{}{code}", shape.prelude),
            )]);
            e.apply(cx.text).map_err(|err| err.to_string())
        });
        match edits {
            Ok(text) => drafts.push(Draft { label, text }),
            Err(why) => dropped.push(format!("{label}: {why}")),
        }
    }
    finish(cx, drafts, dropped)
}

/// Why a kernel of a 1-D block whose stores are coalesced and some read is a stride
/// apart along the lane cannot be staged (`i = idx / n; j = idx % n`), from its facts.
fn flat_refusal(cx: &RewriteContext<'_>) -> Option<String> {
    use crate::optimize::facts::{static_facts, AccessKind, Stride};
    let f = static_facts(cx.lang, cx.text, cx.tree, cx.model, cx.kernel);
    let [_, 1, 1] = f.block? else { return None };
    let stores_coalesced = f
        .accesses
        .iter()
        .filter(|a| a.kind != AccessKind::Load)
        .all(|a| a.stride == Stride::Unit);
    let strided = f.accesses.iter().find(|a| {
        // A run-time stride (a row's length) or a literal one of a warp or more.
        a.kind == AccessKind::Load
            && match a.stride {
                Stride::Symbolic => true,
                Stride::Strided(k) => k.unsigned_abs() >= 32,
                _ => false,
            }
    })?;
    stores_coalesced.then(|| {
        format!(
            "`{}`'s block is 1-D: a block covers a run of one row, so the read `{}[{}]` (a stride apart from one lane to the next) has no 2-D tile of elements to stage; {ID} needs a 2-D block ({SHAPE_2D})",
            cx.kernel.name, strided.buffer, strided.index
        )
    })
}

/// What the guarded body is: statements before the store, the store, and the axes.
struct Staged<'t> {
    /// Statements before the store (declarations, comments).
    before: Vec<Node<'t>>,
    /// The store's target (`out[G]`), operator and value.
    target: Node<'t>,
    op: String,
    value: Node<'t>,
    /// The store's element type.
    ty: String,
    /// Reads are coalesced along x (true) or along y.
    read_x: bool,
    /// The declarations of `before` the write's address needs, which the second pass
    /// repeats for its element.
    write_decls: Vec<Node<'t>>,
}

/// The guarded body's parts to stage (see the module doc), or why it cannot be staged.
fn analyze<'t>(cx: &RewriteContext<'t>, shape: &Shape2d<'t>) -> Result<Staged<'t>, String> {
    let src = cx.text;
    let mut scope = Scope::of_kernel(cx, src);
    check_element_body(src, &shape.body, &mut scope)?;
    if scope.pointers.values().any(|a| !a.offset.is_empty()) {
        return Err(
            "the body makes a pointer into a buffer; kernel-lsp stages plain subscripts only"
                .into(),
        );
    }
    let stmts: Vec<Node> = shape
        .body
        .iter()
        .copied()
        .filter(|n| n.kind() != "comment")
        .collect();
    let (last, before) = stmts.split_last().ok_or("the body is empty")?;
    let mut accesses = Vec::new();
    for &s in &shape.body {
        collect_accesses(&scope, s, &mut accesses)?;
    }
    let stores: Vec<_> = accesses.iter().filter(|a| a.write).collect();
    let [store] = stores.as_slice() else {
        return Err(format!(
            "the body has {} global stores; a tile stages exactly one",
            stores.len()
        ));
    };
    let asg = last_statement_store(src, *last, store)?;
    let (write_decls, defs) = write_locals(src, before, store)?;
    let op = asg
        .child_by_field_name("operator")
        .map_or("=", |o| text(src, o))
        .to_string();
    let value = asg
        .child_by_field_name("right")
        .ok_or("the store has no value")?;
    // Both thread indices renamed, so a polynomial says how an address moves along each.
    let axes = Axes {
        renamed: Renamed(vec![(&shape.x.name, "$x"), (&shape.y.name, "$y")]),
        coarse: !write_decls.is_empty(),
        defs,
    };
    let addr = |parts: &[Node<'t>]| {
        parts
            .iter()
            .fold(Poly::default(), |acc, p| acc.add(&poly(src, *p, &axes), 1))
    };
    let read_x = read_axis(&addr(&store.parts), text(src, store.node))?;
    let reads: Vec<(&Access<'t>, Poly)> = accesses
        .iter()
        .filter(|a| !a.write)
        .map(|a| (a, addr(&a.parts)))
        .collect();
    check_reads(src, &reads, store, read_x)?;
    let ty = pointer_params(cx)
        .remove(&store.buffer)
        .ok_or("the store's buffer is not a pointer parameter")?;
    Ok(Staged {
        before: before.to_vec(),
        target: store.node,
        op,
        value,
        ty,
        read_x,
        write_decls,
    })
}

/// Refuses an element body that loops, leaves early, calls a collective or an atomic,
/// reads a thread index or declares shared memory; records its declarations in `scope`.
fn check_element_body<'t>(
    src: &str,
    body: &[Node<'t>],
    scope: &mut Scope<'_, 't>,
) -> Result<(), String> {
    let mut err = None;
    for &s in body {
        walk(s, &mut |n| {
            if err.is_some() {
                return false;
            }
            match n.kind() {
                "for_statement" | "while_statement" | "do_statement" => {
                    err = Some(format!(
                        "`{}` loops inside the element's body",
                        first_line(text(src, n))
                    ))
                }
                "return_statement" | "goto_statement" | "break_statement"
                | "continue_statement" => {
                    err = Some(format!(
                        "`{}` leaves the element's body",
                        first_line(text(src, n))
                    ))
                }
                "call_expression" | "field_expression" => err = thread_bound_refusal(src, n),
                "declaration" => {
                    if text(src, n).contains("__shared__") {
                        err = Some("the body declares shared memory".into());
                    }
                    declare_statement(scope, n, &mut err);
                }
                _ => {}
            }
            true
        });
    }
    err.map_or(Ok(()), Err)
}

/// Why a call or field `n` of the element's body cannot be staged: a collective, a
/// thread or block index (another element's, in a tile), an atomic.
fn thread_bound_refusal(src: &str, n: Node<'_>) -> Option<String> {
    match thread_bound(src, n) {
        Some(ThreadBound::Collective(f)) => Some(format!("the body calls `{f}`")),
        Some(ThreadBound::Index(_)) => Some(format!(
            "the body reads `{}`; in a tile it names another element",
            text(src, n)
        )),
        None => {
            let f = n
                .child_by_field_name("function")
                .map_or("", |f| text(src, f));
            f.starts_with("atomic")
                .then(|| format!("`{}` is an atomic", text(src, n)))
        }
    }
}

/// The assignment of the one global `store`, when it is the body's `last` statement.
fn last_statement_store<'t>(
    src: &str,
    last: Node<'t>,
    store: &Access<'t>,
) -> Result<Node<'t>, String> {
    (last.kind() == "expression_statement")
        .then(|| last.named_child(0))
        .flatten()
        .filter(|a| a.kind() == "assignment_expression")
        .filter(|a| {
            a.child_by_field_name("left")
                .is_some_and(|l| l.id() == store.node.id())
        })
        .ok_or_else(|| {
            format!(
                "the store `{}` is not the body's last statement",
                first_line(text(src, store.node))
            )
        })
}

/// The declarations among `before` that the write's address names, directly or through
/// each other (in body order), and every pure declarator's value by name. The second pass
/// repeats them for its element, so each must be arithmetic on indices and sizes (no
/// read of memory, no call, no assignment) and never assigned after: a batch split off
/// the row (`m = row % M; b = row / M`).
fn write_locals<'t>(
    src: &str,
    before: &[Node<'t>],
    store: &Access<'t>,
) -> Result<(Vec<Node<'t>>, BTreeMap<String, Node<'t>>), String> {
    let assigned = assigned_names(src, before);
    let mut decl_of: BTreeMap<String, (usize, Option<Node<'t>>)> = BTreeMap::new();
    let mut defs = BTreeMap::new();
    for (at, b) in before.iter().enumerate() {
        for name in declared_in(src, *b) {
            decl_of.insert(name, (at, None));
        }
        for d in named_children(*b)
            .into_iter()
            .filter(|d| d.kind() == "init_declarator")
        {
            let (Some(n), Some(v)) = (
                d.child_by_field_name("declarator"),
                d.child_by_field_name("value"),
            ) else {
                continue;
            };
            let name = text(src, n).to_string();
            if b.kind() == "declaration"
                && super::guard_first::is_pure(v)
                && !assigned.contains(&name)
            {
                decl_of.insert(name.clone(), (at, Some(v)));
                defs.insert(name, v);
            }
        }
    }
    let mut needed = std::collections::BTreeSet::new();
    let mut todo = vec![store.node];
    while let Some(n) = todo.pop() {
        for name in identifiers(src, n) {
            let Some((at, value)) = decl_of.get(&name) else {
                continue;
            };
            let Some(v) = value else {
                return Err(format!(
                    "the write `{}` names `{name}`, which the body computes from memory or changes; the second pass writes without the body",
                    text(src, store.node)
                ));
            };
            if needed.insert(*at) {
                todo.push(*v);
            }
        }
    }
    let decls = needed.into_iter().map(|at| before[at]).collect();
    Ok((decls, defs))
}

/// The identifiers under `n`.
fn identifiers(src: &str, n: Node<'_>) -> Vec<String> {
    let mut out = Vec::new();
    walk(n, &mut |c| {
        if c.kind() == "identifier" {
            out.push(text(src, c).to_string());
        }
        true
    });
    out
}

/// The thread indices renamed `$x` and `$y`, the body's arithmetic locals expanded, and
/// where the write goes through such locals (`row % M`), quotients taken as coarse:
/// within a batch `row % M` moves with the row (a question of stride, never identity).
struct Axes<'a, 't> {
    renamed: Renamed<'a>,
    defs: BTreeMap<String, Node<'t>>,
    coarse: bool,
}

impl<'t> Names<'t> for Axes<'_, 't> {
    fn rename(&self, name: &str) -> Option<String> {
        Names::<'t>::rename(&self.renamed, name)
    }
    fn definition(&self, name: &str) -> Option<Node<'t>> {
        self.defs.get(name).copied()
    }
    fn varies(&self, _: &str) -> bool {
        false
    }
    fn coarse_quotients(&self) -> bool {
        self.coarse
    }
}

/// The read axis from the write's address polynomial `sp` (`write` is its text): the
/// write must be linear in both thread indices and unit-stride along exactly one, and
/// the reads are then staged along the other (true for x).
fn read_axis(sp: &Poly, write: &str) -> Result<bool, String> {
    if sp.tainted() || sp.linear_in("$x").is_none() || sp.linear_in("$y").is_none() {
        return Err(format!(
            "the write `{write}` goes to an address that is not linear in the thread indices; that each element has its own cannot be told"
        ));
    }
    match (along(sp, "$x"), along(sp, "$y")) {
        (Some(true), Some(true)) => Err(format!(
            "the write `{write}` moves along both thread axes at once"
        )),
        (_, Some(true)) => Ok(true),
        (Some(true), _) => Ok(false),
        _ => Err(format!(
            "the write `{write}` is unit-stride along neither thread axis"
        )),
    }
}

/// Refuses reads (each with its address polynomial) of the written buffer, reads
/// coalesced along the write's axis or along neither, and a body with no read coalesced
/// along the read axis.
fn check_reads(
    src: &str,
    reads: &[(&Access<'_>, Poly)],
    store: &Access<'_>,
    read_x: bool,
) -> Result<(), String> {
    let (r, w) = if read_x { ("x", "y") } else { ("y", "x") };
    let mut along_read = 0;
    for (a, p) in reads {
        if a.buffer == store.buffer {
            return Err(format!(
                "the body reads `{}`, the buffer it writes; staged, it would read another element's old value",
                a.buffer
            ));
        }
        match along(p, &format!("${r}")) {
            // Coalesced along the read axis and a stride apart along the write's: a read
            // the same along the write's axis is a broadcast the warp already shares.
            Some(true) if along(p, &format!("${w}")) != Some(false) => along_read += 1,
            Some(true) => {}
            // The same for every thread along the read axis: a broadcast there.
            Some(false) => {}
            None if along(p, &format!("${w}")) == Some(true) => {
                return Err(format!(
                    "the read `{}` and the write `{}` are both coalesced along {w}; there is nothing to transpose",
                    text(src, a.node),
                    text(src, store.node)
                ))
            }
            None => {
                return Err(format!(
                    "the read `{}` is coalesced along neither thread axis; staging it would not help",
                    text(src, a.node)
                ))
            }
        }
    }
    if along_read == 0 {
        return Err(format!(
            "no read is coalesced along {r}, the axis the write `{}` is not coalesced along, and a stride apart along {w} (a read the same along {w} is a broadcast, nothing to transpose)",
            text(src, store.node)
        ));
    }
    Ok(())
}

fn emit(
    cx: &RewriteContext<'_>,
    shape: &Shape2d<'_>,
    st: &Staged<'_>,
    rows: u64,
    names: &mut std::collections::BTreeSet<String>,
) -> String {
    let src = cx.text;
    let nl = newline(src);
    let ind = line_indent(src, shape.start).to_string();
    let u = &shape.unit;
    let (i1, i2) = (format!("{ind}{u}"), format!("{ind}{u}{u}"));
    let tile = fresh("tile", names);
    let j = fresh("tile_row", names);
    let k = fresh("tile_pass", names);
    let coords = |x_fast: bool| tile_coords(shape, x_fast, TILE, &j, &i1, nl);
    let from = st.before.first().map_or(String::new(), |n| {
        line_indent(src, n.start_byte()).to_string()
    });
    let mut o = tile_declaration(
        &st.ty,
        &tile,
        TILE,
        "the column-wise reads below hit 32 banks",
    );
    o.push_str(nl);
    o.push_str(&pass_head(&ind, (&j, &k), TILE, rows, u, nl));
    o.push_str(&coords(st.read_x));
    o.push_str(&format!("{i1}if ({}) {{{nl}", shape.active));
    for s in &st.before {
        o.push_str(&format!("{i2}{}{nl}", reindent(text(src, *s), &from, &i2)));
    }
    o.push_str(&format!(
        "{i2}{tile}[{j}][threadIdx.x] = {};{nl}{i1}}}{nl}{ind}}}{nl}",
        text(src, st.value)
    ));
    o.push_str(&format!("{ind}__syncthreads();{nl}"));
    o.push_str(&pass_head(&ind, (&j, &k), TILE, rows, u, nl));
    o.push_str(&coords(!st.read_x));
    let store = format!(
        "{} {} {tile}[threadIdx.x][{j}];",
        text(src, st.target),
        st.op
    );
    if st.write_decls.is_empty() {
        o.push_str(&format!("{i1}if ({}) {store}{nl}{ind}}}", shape.active));
        return o;
    }
    o.push_str(&format!("{i1}if ({}) {{{nl}", shape.active));
    for s in &st.write_decls {
        o.push_str(&format!("{i2}{}{nl}", reindent(text(src, *s), &from, &i2)));
    }
    o.push_str(&format!("{i2}{store}{nl}{i1}}}{nl}{ind}}}"));
    o
}

/// `__shared__ T name[size][size + 1];` with why it is padded (no newline).
fn tile_declaration(ty: &str, name: &str, size: u64, why: &str) -> String {
    format!("__shared__ {ty} {name}[{size}][{size} + 1];  // + 1: {why}")
}

/// The head of a pass over a tile's rows: each thread takes `row` = `threadIdx.y` + k for
/// k from 0 by the block's height `rows`, written as a literal (a block-size sweep leaves
/// it alone). The trips are a constant the compiler unrolls, so every load of a pass is
/// issued before the first is used (a (0, 2, 1) permute of 8x1024x1024 on an H200:
/// 0.0229-0.0231 ms against 0.0236 when `row` itself stepped from `threadIdx.y`).
fn pass_head(
    ind: &str,
    (row, k): (&str, &str),
    size: u64,
    rows: u64,
    unit: &str,
    nl: &str,
) -> String {
    format!(
        "{ind}#pragma unroll{nl}{ind}for (int {k} = 0; {k} < {size}; {k} += {rows}) {{{nl}{ind}{unit}const int {row} = threadIdx.y + {k};{nl}"
    )
}

/// The author's two thread indices redeclared for one element of a `size`-square tile:
/// `threadIdx.x` along x (`x_fast`) or along y, the pass's `row` along the other.
fn tile_coords(
    shape: &Shape2d<'_>,
    x_fast: bool,
    size: u64,
    row: &str,
    i1: &str,
    nl: &str,
) -> String {
    let fast = "threadIdx.x";
    let (xo, yo) = if x_fast { (fast, row) } else { (row, fast) };
    let (x, y) = (&shape.x, &shape.y);
    format!(
        "{i1}{} {} = blockIdx.x * {size} + {xo};{nl}{i1}{} {} = blockIdx.y * {size} + {yo};{nl}",
        x.ty, x.name, y.ty, y.name
    )
}

mod stage_reads;
use stage_reads::{Plan, Refusal};

#[cfg(test)]
mod tests;
