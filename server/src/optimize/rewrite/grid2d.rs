//! The 2-D one-thread-per-output shape that `transpose_tile` and `tile_matmul` rewrite:
//! `int col = blockIdx.x * blockDim.x + threadIdx.x;` and `int row = blockIdx.y *
//! blockDim.y + threadIdx.y;` (any names, either order, the product and sum in any order),
//! then the bounds check `if (row < m && col < n) { ... }` ending the kernel or `if (row
//! >= m || col >= n) return;` followed by the body. The check's condition is kept as
//! text ([`Shape2d::active`]) so a rewrite can re-evaluate it for other coordinates.

use tree_sitter::Node;

use super::edits::Edit;
use super::elementwise::{guarded_body, is_plain_return, without_int_casts, Guard};
use super::spec_expr::{components, format_dims, literal_dims, rescale};
use super::tree::{first_line, line_indent, named_children, text, walk};
use super::RewriteContext;
use crate::optimize::edit;
use crate::syntax::ByteRange;

/// One of the two thread indices.
pub(super) struct Index2 {
    pub name: String,
    /// Its type with its qualifiers as written (`int`, `const unsigned`, `size_t`).
    pub ty: String,
}

pub(super) struct Shape2d<'t> {
    /// The index along `threadIdx.x` and along `threadIdx.y`.
    pub x: Index2,
    pub y: Index2,
    /// The condition under which a thread's element exists (the check's condition, or
    /// its negation for the early-return form), as text.
    pub active: String,
    /// The guarded statements (comments included).
    pub body: Vec<Node<'t>>,
    /// Declarations between the first index and the bounds check that are the same in
    /// every thread of a block (`int b = blockIdx.z;`, `size_t plane = (size_t)M * N;`),
    /// each followed by a newline and the indentation at `start`: a rewrite writes them
    /// back before its own code.
    pub prelude: String,
    /// Every declaration before the bounds check other than the two indices, in order:
    /// those before the first index (kept where they are) and the prelude's.
    pub outer: Vec<Node<'t>>,
    /// Start of the first index declaration and end of what a rewrite replaces.
    pub start: usize,
    pub end: usize,
    /// One indentation step.
    pub unit: String,
}

pub(super) const SHAPE_2D: &str = "`int col = blockIdx.x * blockDim.x + threadIdx.x; int row = blockIdx.y * blockDim.y + threadIdx.y; if (row < m && col < n) { ... }` (or `if (row >= m || col >= n) return;`)";

/// `blockIdx.D * blockDim.D + threadIdx.D` for D = x or y, whitespace and integer casts
/// removed (`(size_t)blockIdx.y * blockDim.y + threadIdx.y`).
fn index_dim(init: &str) -> Option<char> {
    let norm = without_int_casts(init);
    for d in ['x', 'y'] {
        let products = [
            format!("blockIdx.{d}*blockDim.{d}"),
            format!("blockDim.{d}*blockIdx.{d}"),
        ];
        for p in products {
            for q in [p.clone(), format!("({p})")] {
                if norm == format!("{q}+threadIdx.{d}") || norm == format!("threadIdx.{d}+{q}") {
                    return Some(d);
                }
            }
        }
    }
    None
}

/// A declaration that is the same in every thread of a block and reads no memory: it
/// names no thread position, no block position along x or y and no block size, and has
/// no subscript but an element's address (`int b = blockIdx.z;`, `const size_t plane =
/// (size_t)m * n;`, `const float* a = &x[b * n];`).
fn block_uniform_2d(src: &str, s: Node<'_>) -> bool {
    let t = text(src, s);
    let mut reads = false;
    walk(s, &mut |n| {
        reads |= n.kind() == "subscript_expression"
            && !n.parent().is_some_and(|p| {
                p.kind() == "pointer_expression"
                    && p.child_by_field_name("operator").map(|o| text(src, o)) == Some("&")
            });
        !reads
    });
    !reads
        && ["threadIdx", "blockIdx.x", "blockIdx.y", "blockDim"]
            .iter()
            .all(|w| !t.contains(w))
}

pub(super) fn match_2d<'t>(src: &str, func: Node<'t>) -> Result<Shape2d<'t>, String> {
    let body = func
        .child_by_field_name("body")
        .ok_or("the kernel has no body")?;
    let stmts = named_children(body);
    let mut idx = 0;
    let mut x: Option<Index2> = None;
    let mut y: Option<Index2> = None;
    let mut start = None;
    let mut uniform = Vec::new();
    let mut outer = Vec::new();
    while x.is_none() || y.is_none() {
        let Some(&s) = stmts.get(idx) else {
            return Err("it has no 2-D thread index (`blockIdx.x * blockDim.x + threadIdx.x` and the same in y)".into());
        };
        idx += 1;
        let t = text(src, s);
        let reads_index = t.contains("threadIdx") || t.contains("blockIdx");
        match s.kind() {
            "comment" => continue,
            "declaration" if !reads_index && start.is_none() => {
                outer.push(s);
                continue;
            }
            "declaration" if block_uniform_2d(src, s) => {
                if start.is_some() {
                    uniform.push(s);
                }
                outer.push(s);
                continue;
            }
            "declaration" => {}
            _ => {
                return Err(format!(
                    "`{}` comes before the thread indices",
                    first_line(t)
                ))
            }
        }
        let mut c = s.walk();
        let ds: Vec<Node> = s.children_by_field_name("declarator", &mut c).collect();
        let [d] = ds.as_slice() else {
            return Err(format!("`{}` declares several names", first_line(t)));
        };
        let (Some(name), Some(value)) = (
            d.child_by_field_name("declarator")
                .filter(|n| n.kind() == "identifier"),
            d.child_by_field_name("value"),
        ) else {
            return Err(format!("`{}` is not `int i = ...;`", first_line(t)));
        };
        let dim = index_dim(text(src, value)).ok_or_else(|| {
            format!(
                "`{}` is not a global thread index `blockIdx.D * blockDim.D + threadIdx.D`",
                first_line(t)
            )
        })?;
        // The declaration's specifiers as written (`const int`, `unsigned`).
        let ty = src
            .get(s.start_byte()..d.start_byte())
            .map_or("int", str::trim)
            .to_string();
        let i = Index2 {
            name: text(src, name).to_string(),
            ty,
        };
        start.get_or_insert(s.start_byte());
        let slot = if dim == 'x' { &mut x } else { &mut y };
        if slot.is_some() {
            return Err(format!("two indices along {dim}"));
        }
        *slot = Some(i);
    }
    let (x, y) = (x.expect("set"), y.expect("set"));
    let guard = loop {
        let Some(&s) = stmts.get(idx) else {
            return Err("no bounds check follows the indices".into());
        };
        idx += 1;
        match s.kind() {
            "comment" => {}
            "declaration" if block_uniform_2d(src, s) => {
                uniform.push(s);
                outer.push(s);
            }
            _ => break s,
        }
    };
    let gt = first_line(text(src, guard));
    if guard.kind() != "if_statement" || guard.child_by_field_name("alternative").is_some() {
        return Err(format!(
            "`{gt}` follows the indices where the bounds check should be"
        ));
    }
    let cond = guard
        .child_by_field_name("condition")
        .and_then(|c| c.child_by_field_name("value"))
        .ok_or("the bounds check has no condition")?;
    let cond_text = text(src, cond).to_string();
    let mentions = |name: &str| {
        let mut m = false;
        walk(cond, &mut |n| {
            m |= n.kind() == "identifier" && text(src, n) == name;
            true
        });
        m
    };
    if !mentions(&x.name) || !mentions(&y.name) {
        return Err(format!(
            "`{cond_text}` does not bound both `{}` and `{}`",
            y.name, x.name
        ));
    }
    let consequence = guard
        .child_by_field_name("consequence")
        .ok_or("the bounds check has no body")?;
    let (form, active) = if is_plain_return(consequence) {
        (Guard::EarlyReturn, format!("!({cond_text})"))
    } else {
        (Guard::Block, cond_text.clone())
    };
    let (guarded, _, end) = guarded_body(src, guard, form, &stmts[idx..])?;
    let indent = line_indent(src, guard.start_byte()).to_string();
    let fn_indent = line_indent(src, func.start_byte());
    let unit = match indent.strip_prefix(fn_indent) {
        Some(u) if !u.is_empty() => u.to_string(),
        _ => "    ".to_string(),
    };
    let start = start.expect("set with the indices");
    let at = line_indent(src, start);
    let prelude = uniform
        .iter()
        .map(|s| format!("{}\n{at}", text(src, *s)))
        .collect();
    Ok(Shape2d {
        prelude,
        outer,
        start,
        x,
        y,
        active,
        body: guarded,
        end,
        unit,
    })
}

/// A 2-D launch of literal block dims whose grid dims count blocks with `cdiv(X, B)`.
pub(super) struct Launch2d {
    block: edit::SpecAssignment,
    /// The block's dims (2 or 3).
    pub old: Vec<u64>,
    grid: edit::SpecAssignment,
    parts: Vec<ByteRange>,
}

impl Launch2d {
    pub fn of(cx: &RewriteContext<'_>) -> Result<Launch2d, String> {
        let block =
            edit::spec_assignment(cx.kernel, "block").ok_or("the spec has no `block = ...`")?;
        let old = literal_dims(&block.text)
            .filter(|d| d.len() >= 2)
            .ok_or_else(|| format!("`block = {}` is not a 2-D block of literals", block.text))?;
        let grid =
            edit::spec_assignment(cx.kernel, "grid").ok_or("the spec has no `grid = ...`")?;
        let parts = components(&grid.text);
        if parts.len() < 2 {
            return Err(format!("`grid = {}` is not 2-D", grid.text));
        }
        Ok(Launch2d {
            block,
            old,
            grid,
            parts,
        })
    }

    /// The edits for block (bx, by) (z kept) and a grid whose x and y dims count blocks
    /// covering `cover_x` and `cover_y` elements.
    pub fn edits(&self, bx: u64, by: u64, cover_x: u64, cover_y: u64) -> Result<Vec<Edit>, String> {
        let mut out = Vec::new();
        for (d, (part, new)) in self.parts.iter().zip([cover_x, cover_y]).enumerate() {
            let comp = &self.grid.text[part.clone()];
            let text = if self.old[d] == new {
                comp.to_string()
            } else {
                rescale(comp, self.old[d], new).ok_or_else(|| {
                    format!(
                        "grid {} `{comp}` has no `cdiv(X, {})` to rescale",
                        ["x", "y"][d],
                        self.old[d]
                    )
                })?
            };
            out.push(Edit::replace(
                self.grid.range.start + part.start..self.grid.range.start + part.end,
                text,
            ));
        }
        let mut dims = vec![bx, by];
        dims.extend(self.old.get(2));
        out.push(Edit::replace(self.block.range.clone(), format_dims(&dims)));
        Ok(out)
    }
}
