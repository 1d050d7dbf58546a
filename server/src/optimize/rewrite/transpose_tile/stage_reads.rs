//! The second way `transpose_tile` stages a kernel: the write and most reads are already
//! coalesced along x and only some reads are *transposed*, a row apart from one lane to
//! the next and unit-stride along y (`y[i * n + j] = x[i * n + j] + x[j * n + i]`, with
//! `j` from `.x` and `i` from `.y`). Each transposed read (each distinct expression) is
//! loaded for the block's elements into a padded tile of its own, with `threadIdx.x`
//! walking the read's unit-stride axis; after `__syncthreads()` the body runs as written
//! with `threadIdx.x` along x again, each transposed read replaced by its tile element.
//!
//! A tile holds the *value the read gives each element of the block*, evaluated with the
//! author's indices and under the author's bounds check, so it is exact whatever the read's
//! offset: `x[j * n + i + 1]` is its own tile, no halo needed. Which reads are transposed,
//! coalesced or broadcast comes from the access facts (each access's stride along
//! `threadIdx.x` and along `threadIdx.y`), through [`role`] and [`premise`].
//!
//! Refuses: a transposed read of a buffer the kernel writes (another block may already
//! have written that element: `a[i][j] = a[j][i]` races across blocks), one under a
//! condition (the tile would read what the author's code does not), one whose index
//! needs a local the body assigns or computes from memory, a read a stride apart along x
//! that does not move one element along y (the block does not tile the axis it walks),
//! a read that is not linear along x, more than [`MAX_TILES`] distinct transposed reads,
//! and whatever the element body check refuses (loops, barriers, `threadIdx` in the body).

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::super::access::{canon, collect_accesses, contains, unconditional, Access, Scope};
use super::super::edits::{Edit, Edits};
use super::super::elementwise::pointer_params;
use super::super::grid2d::Shape2d;
use super::super::tree::{first_line, fresh, line_indent, newline, reindent, text, walk};
use super::super::RewriteContext;
use super::{check_element_body, pass_head, tile_coords, tile_declaration};
use crate::optimize::facts::{self, AccessKind, Stride};

/// At most this many tiles (distinct transposed reads) a block.
pub(super) const MAX_TILES: usize = 4;

/// How an access moves across a 2-D block, from its strides along x and y.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    /// Unit-stride along x: coalesced as written.
    Coalesced,
    /// The same element for every lane along x.
    Broadcast,
    /// A stride apart along x and unit-stride along y: a tile of the block's elements
    /// loads it coalesced.
    Transposed,
    /// A stride apart along x, and not one element apart along y.
    Strided,
    /// Not linear along x.
    Unknown,
}

/// The role of an access with stride `x` along `threadIdx.x` and `y` along `.y`.
pub(super) fn role(x: Stride, y: Stride) -> Role {
    match (x, y) {
        (Stride::Unit, _) => Role::Coalesced,
        (Stride::Uniform, _) => Role::Broadcast,
        (Stride::Strided(_) | Stride::Symbolic, Stride::Unit) => Role::Transposed,
        (Stride::Strided(_) | Stride::Symbolic, _) => Role::Strided,
        (Stride::Unknown, _) => Role::Unknown,
    }
}

/// Whether a kernel is this shape at all: every store coalesced along x and some load a
/// stride apart along x (transposed, or strided along an axis the block does not tile:
/// refused later with that reason). Other kernels get the whole-body staging's reason.
pub(super) fn premise(stores: &[Role], loads: &[Role]) -> bool {
    !stores.is_empty()
        && stores.iter().all(|r| *r == Role::Coalesced)
        && loads
            .iter()
            .any(|r| matches!(r, Role::Transposed | Role::Strided))
}

/// Why a read the body leaves as written stops the rewrite, if it does.
pub(super) fn unstaged_read_refusal(read: &str, r: Role, y: Stride) -> Option<String> {
    match r {
        Role::Coalesced | Role::Broadcast | Role::Transposed => None,
        Role::Strided => Some(format!(
            "the read `{read}` is a stride apart along x and {} along y: the block does not tile the axis it walks, so no tile loads it coalesced",
            match y {
                Stride::Uniform => "the same element".to_string(),
                Stride::Strided(k) => format!("{k} elements apart"),
                Stride::Symbolic => "a run-time stride apart".to_string(),
                _ => "not linear".to_string(),
            }
        )),
        Role::Unknown => Some(format!(
            "the read `{read}` is not linear in the lane; a tile stages only reads a row apart along x"
        )),
    }
}

/// One distinct transposed read: the expression evaluated for the tile (`x[j * n + i]`,
/// or the `__ldg(&x[...])` around it), every place the body reads it, and its type.
pub(super) struct StagedRead<'t> {
    pub expr: Node<'t>,
    pub sites: Vec<Node<'t>>,
    pub ty: String,
    pub buffer: String,
}

/// What to stage: the reads, and the body's declarations their indices need.
pub(super) struct Plan<'t> {
    pub reads: Vec<StagedRead<'t>>,
    pub needs: Vec<Node<'t>>,
}

/// Why this way does not apply: not its shape (the caller reports its own reason), or
/// its shape with something it refuses.
pub(super) enum Refusal {
    NotItsShape,
    Why(String),
}

/// The roles of the kernel's stores and loads (atomics aside), from its facts.
fn kernel_roles(f: &facts::Facts) -> (Vec<Role>, Vec<Role>) {
    let r = |a: &&facts::Access| role(a.stride, a.stride_y);
    let stores = f
        .accesses
        .iter()
        .filter(|a| !matches!(a.kind, AccessKind::Load | AccessKind::Atomic))
        .map(|a| r(&a))
        .collect();
    let loads = f
        .accesses
        .iter()
        .filter(|a| a.kind == AccessKind::Load)
        .map(|a| r(&a))
        .collect();
    (stores, loads)
}

/// The plan for `shape`'s body, or why it cannot be staged this way.
pub(super) fn analyze<'t>(
    cx: &RewriteContext<'t>,
    shape: &Shape2d<'t>,
) -> Result<Plan<'t>, Refusal> {
    let f = facts::static_facts(cx.lang, cx.text, cx.tree, cx.model, cx.kernel);
    let (stores, loads) = kernel_roles(&f);
    if !premise(&stores, &loads) {
        return Err(Refusal::NotItsShape);
    }
    let why = Refusal::Why;
    let src = cx.text;
    let mut scope = Scope::of_kernel(cx, src);
    check_element_body(src, &shape.body, &mut scope).map_err(why)?;
    let mut accesses = Vec::new();
    for &s in &shape.body {
        collect_accesses(&scope, s, &mut accesses).map_err(why)?;
    }
    let written: BTreeSet<&str> = f
        .accesses
        .iter()
        .filter(|a| a.kind != AccessKind::Load)
        .map(|a| a.buffer.as_str())
        .collect();
    let mut reads: Vec<StagedRead<'t>> = Vec::new();
    for a in accesses.iter().filter(|a| !a.write) {
        let fact = f
            .accesses
            .iter()
            .find(|x| x.span == Some((a.node.start_byte(), a.node.end_byte())));
        let at = text(src, a.node);
        let Some(fact) = fact else {
            return Err(why(format!(
                "the read `{at}` is not one the access analysis follows"
            )));
        };
        let r = role(fact.stride, fact.stride_y);
        if let Some(no) = unstaged_read_refusal(at, r, fact.stride_y) {
            return Err(why(no));
        }
        if r == Role::Transposed {
            let read = staged_read(cx, shape, a, fact, &written).map_err(why)?;
            match reads
                .iter_mut()
                .find(|s| canon(text(src, s.expr)) == canon(text(src, read.expr)))
            {
                Some(same) => same.sites.extend(read.sites),
                None => reads.push(read),
            }
        }
    }
    if reads.len() > MAX_TILES {
        return Err(why(format!(
            "{} distinct transposed reads; a block stages at most {MAX_TILES} tiles",
            reads.len()
        )));
    }
    let exprs: Vec<Node<'t>> = reads.iter().map(|r| r.expr).collect();
    let needs = needed_declarations(src, &shape.body, &exprs, &accesses).map_err(why)?;
    Ok(Plan { reads, needs })
}

/// The transposed read `a` as a tile to fill, or why it cannot be one.
fn staged_read<'t>(
    cx: &RewriteContext<'t>,
    shape: &Shape2d<'t>,
    a: &Access<'t>,
    fact: &facts::Access,
    written: &BTreeSet<&str>,
) -> Result<StagedRead<'t>, String> {
    let src = cx.text;
    let at = text(src, a.node);
    if written.contains(a.buffer.as_str()) {
        return Err(format!(
            "the transposed read `{at}` reads `{}`, which the kernel writes: another block may already have written that element (a race across blocks)",
            a.buffer
        ));
    }
    if fact.kind != AccessKind::Load {
        return Err(format!("`{at}` is not a plain read of its element"));
    }
    let expr = facts::load_call(src, a.node).unwrap_or(a.node);
    if !unconditional(expr, &shape.body) {
        return Err(format!(
            "the transposed read `{at}` is under a condition; a tile would read it where the body does not"
        ));
    }
    let ty = pointer_params(cx)
        .remove(&a.buffer)
        .ok_or_else(|| format!("`{}` is not a pointer parameter", a.buffer))?;
    Ok(StagedRead {
        expr,
        sites: vec![expr],
        ty,
        buffer: a.buffer.clone(),
    })
}

/// Identifiers under `n`.
fn identifiers<'t>(src: &str, n: Node<'t>, out: &mut BTreeSet<String>) {
    walk(n, &mut |c| {
        if c.kind() == "identifier" {
            out.insert(text(src, c).to_string());
        }
        true
    });
}

/// Names a statement declares or assigns, and whether it only declares them.
fn defined_names(src: &str, s: Node<'_>) -> (BTreeSet<String>, bool) {
    let mut names = BTreeSet::new();
    let mut only_declares = s.kind() == "declaration";
    walk(s, &mut |n| {
        let target = match n.kind() {
            "init_declarator" => n.child_by_field_name("declarator"),
            "assignment_expression" => n.child_by_field_name("left"),
            "update_expression" => n.child_by_field_name("argument"),
            _ => None,
        };
        if let Some(t) = target.filter(|t| t.kind() == "identifier") {
            names.insert(text(src, t).to_string());
            only_declares &= n.kind() == "init_declarator";
        }
        true
    });
    (names, only_declares)
}

/// The body's declarations the staged expressions name, directly or through each other,
/// in body order; refused when such a name is assigned or computed from memory.
fn needed_declarations<'t>(
    src: &str,
    body: &[Node<'t>],
    exprs: &[Node<'t>],
    accesses: &[Access<'t>],
) -> Result<Vec<Node<'t>>, String> {
    let mut names = BTreeSet::new();
    for e in exprs {
        identifiers(src, *e, &mut names);
    }
    let mut keep = vec![false; body.len()];
    let mut grew = true;
    while grew {
        grew = false;
        for (k, s) in body.iter().enumerate() {
            let (defined, only_declares) = defined_names(src, *s);
            if keep[k] || defined.is_disjoint(&names) {
                continue;
            }
            let name = defined
                .intersection(&names)
                .next()
                .cloned()
                .unwrap_or_default();
            if !only_declares {
                return Err(format!(
                    "`{}` assigns `{name}`, which a transposed read's index needs; the tile is loaded before the body runs",
                    first_line(text(src, *s))
                ));
            }
            if let Some(m) = accesses.iter().find(|a| contains(*s, a.node)) {
                return Err(format!(
                    "a transposed read's index needs `{name}`, which the body computes from `{}`",
                    text(src, m.node)
                ));
            }
            keep[k] = true;
            identifiers(src, *s, &mut names);
            grew = true;
        }
    }
    Ok(body
        .iter()
        .zip(keep)
        .filter_map(|(s, k)| k.then_some(*s))
        .collect())
}

/// One candidate's code for the region `shape` replaces: tiles of `size` squared, blocks
/// of (`size`, `rows`).
pub(super) fn emit(
    cx: &RewriteContext<'_>,
    shape: &Shape2d<'_>,
    plan: &Plan<'_>,
    size: u64,
    rows: u64,
    names: &mut BTreeSet<String>,
) -> Result<String, String> {
    let src = cx.text;
    let nl = newline(src);
    let ind = line_indent(src, shape.start).to_string();
    let u = &shape.unit;
    let (i1, i2) = (format!("{ind}{u}"), format!("{ind}{u}{u}"));
    let tiles: Vec<String> = plan
        .reads
        .iter()
        .map(|r| fresh(&format!("{}_tile", r.buffer), names))
        .collect();
    let row = fresh("tile_row", names);
    let k = fresh("tile_pass", names);
    let from = shape.body.first().map_or(String::new(), |n| {
        line_indent(src, n.start_byte()).to_string()
    });
    let mut o = String::new();
    for (r, t) in plan.reads.iter().zip(&tiles) {
        if !o.is_empty() {
            o.push_str(&ind);
        }
        let why = format!(
            "the column-wise reads below hit 32 banks; `{}` of the block's elements",
            text(src, r.expr)
        );
        o.push_str(&tile_declaration(&r.ty, t, size, &why));
        o.push_str(nl);
    }
    // Load: threadIdx.x walks the reads' unit-stride axis (y).
    o.push_str(&pass_head(&ind, (&row, &k), size, rows, u, nl));
    o.push_str(&tile_coords(shape, false, size, &row, &i1, nl));
    o.push_str(&format!("{i1}if ({}) {{{nl}", shape.active));
    for s in &plan.needs {
        o.push_str(&format!("{i2}{}{nl}", reindent(text(src, *s), &from, &i2)));
    }
    for (r, t) in plan.reads.iter().zip(&tiles) {
        let e = reindent(text(src, r.expr), &from, &i2);
        o.push_str(&format!("{i2}{t}[{row}][threadIdx.x] = {e};{nl}"));
    }
    o.push_str(&format!("{i1}}}{nl}{ind}}}{nl}{ind}__syncthreads();{nl}"));
    // Compute: the body as written, threadIdx.x along x, the reads from the tiles.
    o.push_str(&pass_head(&ind, (&row, &k), size, rows, u, nl));
    o.push_str(&tile_coords(shape, true, size, &row, &i1, nl));
    o.push_str(&format!("{i1}if ({}) {{{nl}", shape.active));
    for s in &shape.body {
        let mut e = Edits::new();
        for (r, t) in plan.reads.iter().zip(&tiles) {
            for site in r.sites.iter().filter(|n| contains(*s, **n)) {
                let at = site.start_byte() - s.start_byte()..site.end_byte() - s.start_byte();
                e.extend([Edit::replace(at, format!("{t}[threadIdx.x][{row}]"))]);
            }
        }
        let stmt = e.apply(text(src, *s)).map_err(|err| err.to_string())?;
        o.push_str(&format!("{i2}{}{nl}", reindent(&stmt, &from, &i2)));
    }
    o.push_str(&format!("{i1}}}{nl}{ind}}}"));
    Ok(o)
}

/// The reads a candidate stages, for its label: `x[j * n + i]`, `q[c * rows + r]`.
pub(super) fn staged_list(src: &str, plan: &Plan<'_>) -> String {
    plan.reads
        .iter()
        .map(|r| format!("`{}`", text(src, r.expr)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_come_from_the_strides_along_both_axes() {
        use Stride::*;
        assert_eq!(role(Unit, Symbolic), Role::Coalesced);
        assert_eq!(role(Uniform, Unit), Role::Broadcast);
        assert_eq!(role(Symbolic, Unit), Role::Transposed);
        assert_eq!(role(Strided(61), Unit), Role::Transposed);
        assert_eq!(role(Symbolic, Uniform), Role::Strided);
        assert_eq!(role(Symbolic, Strided(2)), Role::Strided);
        assert_eq!(role(Unknown, Unit), Role::Unknown);
    }

    #[test]
    fn the_premise_needs_coalesced_stores_and_a_transposed_load() {
        use Role::*;
        assert!(premise(&[Coalesced], &[Coalesced, Transposed]));
        assert!(premise(&[Coalesced], &[Transposed, Broadcast]));
        assert!(
            premise(&[Coalesced], &[Coalesced, Strided]),
            "refused later, with its reason"
        );
        assert!(!premise(&[Coalesced], &[Coalesced]), "a copy");
        assert!(
            !premise(&[Strided], &[Coalesced, Transposed]),
            "a strided write"
        );
        assert!(!premise(&[], &[Transposed]), "no store");
    }

    #[test]
    fn reads_left_as_written_must_be_coalesced_broadcast_or_staged() {
        assert_eq!(
            unstaged_read_refusal("x[i]", Role::Coalesced, Stride::Unit),
            None
        );
        assert_eq!(
            unstaged_read_refusal("b[j]", Role::Broadcast, Stride::Unit),
            None
        );
        let strided = unstaged_read_refusal("s[j * B + b]", Role::Strided, Stride::Uniform);
        assert_eq!(
            strided.as_deref(),
            Some("the read `s[j * B + b]` is a stride apart along x and the same element along y: the block does not tile the axis it walks, so no tile loads it coalesced")
        );
        let by2 = unstaged_read_refusal("x[j * n + 2 * i]", Role::Strided, Stride::Strided(2));
        assert!(by2.is_some_and(|w| w.contains("2 elements apart along y")));
        let gather = unstaged_read_refusal("q[t]", Role::Strided, Stride::Unknown);
        assert!(gather.is_some_and(|w| w.contains("along x and not linear along y")));
        assert!(unstaged_read_refusal("x[p[j]]", Role::Unknown, Stride::Unknown).is_some());
    }
}
