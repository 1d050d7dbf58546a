//! `block_coarsen`: each block does the work of V consecutive blocks along x, one after
//! the other, in an unrolled loop: the kernel's body runs once per part with
//! `blockIdx.x` read as `blockIdx.x * V + part`, and the grid's x count becomes V times
//! smaller. Where case 0's grid has fewer than 2 V blocks along x (V the largest part
//! count) and more along y (`grid = (cdiv(n, 1024), rows)`: a row a block), the same is
//! done along y. The threads of a warp still touch what they touched together before, so a
//! coalesced kernel stays coalesced, while each thread has V independent iterations'
//! loads in flight and the index arithmetic and block scheduling are paid once per V
//! elements. It reads no shape: any body whose work is a function of its block index
//! is covered (one element per thread in 1-D or 2-D, guards, early returns, helpers),
//! which is what the remapped 2-D drafts of `remap_lanes` need next.
//!
//! **Writes** the loop around the kernel's statements (a `return` among them becomes
//! `continue`: that part is done), and the grid's component with each division made V
//! times coarser (`cdiv(cols, 64)` -> `cdiv(cols, 4 * 64)`); a component that is no
//! division but made of the kernel's integer parameters (`rows`, `B * H`) becomes
//! `cdiv(rows, V)`, and a part whose block index reaches it stops the loop. Candidates:
//! each V in param `parts` (default [2, 4, 8]).
//!
//! **Refuses**: shared memory and barriers (a block's parts would share them), warp-level
//! code, `gridDim` along the axis (a grid-stride loop already spreads the work), a helper
//! that reads the axis' `blockIdx` (it would see the real block), a `return` inside a
//! nested loop or `switch`, and a grid component with neither a division to coarsen nor a
//! bound the kernel can read.

use tree_sitter::Node;

use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::edits::{Edit, Edits};
use super::params::Params;
use super::remap_lanes::WARP_LEVEL;
use super::spec_expr::{components, widen};
use super::tree::{code_names, fresh, kernel_function, line_indent, newline, reindent, text, walk};
use super::RewriteContext;
use crate::optimize::edit::spec_assignment;
use crate::spec::Launch;
use crate::syntax::Lang;

const ID: &str = "block_coarsen";

pub fn block_coarsen(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, ID)?;
    let parts = Params(cx.params).uints("parts", &[2, 4, 8], 2..=64)?;
    let k = &cx.kernel.name;
    let na = |why: String| not_applicable(format!("`{k}`'s blocks cannot be coarsened: {why}"));
    let func =
        kernel_function(cx).ok_or_else(|| na("its definition is not in the syntax tree".into()))?;
    let body = func
        .child_by_field_name("body")
        .ok_or_else(|| na("it has no body".into()))?;
    let grid = spec_assignment(cx.kernel, "grid")
        .ok_or_else(|| na("the spec has no `grid = ...`".into()))?;
    let blocks = current_plan(cx)
        .ok()
        .and_then(|p| match p.cases.first()?.launch {
            Launch::Cuda { grid, .. } => Some(grid),
            Launch::Triton { .. } => None,
        });
    let most = parts.iter().copied().max().unwrap_or(2);
    let axis = blocks.map_or(Axis::X, |g| axis_for(g, most));
    refusal(cx, func, body, axis).map_or(Ok(()), |why| Err(na(why)))?;
    let comp = components(&grid.text)
        .into_iter()
        .nth(axis.index())
        .ok_or_else(|| na(format!("`grid` has no {} component", axis.name())))?;
    let comp_text = &grid.text[comp.clone()];
    let mut names = code_names(cx);
    let part = fresh("part", &mut names);
    let block = fresh(&format!("block_{}", axis.name()), &mut names);
    let mut drafts = Vec::new();
    for v in parts {
        let (new_comp, bound) = coarser(cx, comp_text, v).ok_or_else(|| {
            na(format!(
                "grid {} `{comp_text}` has no division (`cdiv(X, B)`) to make {v} times coarser, nor is it made of the kernel's integer parameters",
                axis.name()
            ))
        })?;
        let parts = Parts {
            v,
            part: &part,
            block: &block,
            axis,
            bound: bound.as_deref(),
        };
        let mut e = Edits::new();
        e.extend([
            Edit::replace(body.byte_range(), wrapped(cx, body, &parts)),
            Edit::replace(
                grid.range.start + comp.start..grid.range.start + comp.end,
                new_comp,
            ),
        ]);
        if let Ok(t) = e.apply(cx.text) {
            drafts.push(Draft {
                label: format!("{v} blocks' work per block along {}", axis.name()),
                text: t,
            });
        }
    }
    finish(cx, drafts, Vec::new())
}

/// The grid axis whose blocks are coarsened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Axis {
    X,
    Y,
}

impl Axis {
    fn name(self) -> &'static str {
        match self {
            Axis::X => "x",
            Axis::Y => "y",
        }
    }
    fn index(self) -> usize {
        match self {
            Axis::X => 0,
            Axis::Y => 1,
        }
    }
}

/// The axis to coarsen for case 0's `grid` and parts up to `most`: x, unless it has
/// fewer than `2 * most` blocks (coarsening would leave a handful) and y has more (a row
/// a block along y: `grid = (cdiv(n, 1024), rows)`).
fn axis_for(grid: [u64; 3], most: u64) -> Axis {
    if grid[0] < most.saturating_mul(2) && grid[1] > grid[0] {
        Axis::Y
    } else {
        Axis::X
    }
}

/// The grid component `comp` made `v` times coarser, and where it is not a ceiling
/// division (`rows`, `M * H`: every block index is a row) the bound the coarsened block
/// index must stay under, as C text: the component itself, when it is made only of the
/// kernel's integer parameters (a template's too), integer literals, `+` and `*`.
fn coarser(cx: &RewriteContext<'_>, comp: &str, v: u64) -> Option<(String, Option<String>)> {
    if let Some(w) = widen(comp, v as usize) {
        return Some((w, None));
    }
    // A template parameter the grid names is one the spec sets to a number.
    let ints: Vec<&str> = cx
        .kernel
        .params
        .iter()
        .filter(|p| super::unit::int_scalar(p))
        .map(|p| p.name.as_str())
        .chain(cx.kernel.template_params.iter().map(String::as_str))
        .collect();
    let plain = comp
        .split(['+', '*', '(', ')', ' '])
        .all(|w| w.is_empty() || w.bytes().all(|b| b.is_ascii_digit()) || ints.contains(&w));
    let comp = comp.trim();
    (plain && !comp.is_empty()).then(|| (format!("cdiv({comp}, {v})"), Some(comp.to_string())))
}

/// Why the kernel cannot be coarsened this way, if it cannot.
fn refusal(cx: &RewriteContext<'_>, func: Node<'_>, body: Node<'_>, axis: Axis) -> Option<String> {
    let braces = text(cx.text, body);
    if braces.len() < 2 || !braces.starts_with('{') || !braces.ends_with('}') {
        return Some("its body does not parse (a closing brace is missing)".into());
    }
    let unit = super::unit::unit_text(cx);
    for (word, why) in [
        (
            "__shared__",
            "it uses shared memory, which a block's parts would share",
        ),
        ("__syncthreads", "it synchronizes the block"),
    ] {
        if unit.contains(word) {
            return Some(why.into());
        }
    }
    let (grid_dim, block_idx) = match axis {
        Axis::X => ("gridDim.x", "blockIdx.x"),
        Axis::Y => ("gridDim.y", "blockIdx.y"),
    };
    if unit.contains(grid_dim) {
        return Some(format!(
            "it reads `{grid_dim}` (a grid-stride loop spreads the work already)"
        ));
    }
    if let Some(w) = WARP_LEVEL.iter().find(|w| unit.contains(*w)) {
        return Some(format!("it uses warp-level code (`{w}`)"));
    }
    let kernel_text = text(cx.text, func);
    if unit.matches(block_idx).count() > kernel_text.matches(block_idx).count() {
        return Some(format!("a helper it calls reads `{block_idx}`"));
    }
    let mut nested = false;
    walk(body, &mut |n| {
        if n.kind() == "return_statement" && inside_loop(n, body) {
            nested = true;
        }
        !nested
    });
    nested.then(|| "a `return` inside a loop or `switch` would have to end only its part".into())
}

fn inside_loop(mut n: Node<'_>, body: Node<'_>) -> bool {
    while let Some(p) = n.parent() {
        if p.id() == body.id() {
            return false;
        }
        if matches!(
            p.kind(),
            "for_statement"
                | "while_statement"
                | "do_statement"
                | "switch_statement"
                | "for_range_loop"
        ) {
            return true;
        }
        n = p;
    }
    false
}

/// How the body is split: `v` parts, the names of the part counter and of the block
/// index it reads, the axis, and the bound that index must stay under (a grid component
/// that is not a ceiling division).
struct Parts<'a> {
    v: u64,
    part: &'a str,
    block: &'a str,
    axis: Axis,
    bound: Option<&'a str>,
}

/// The body as one loop over the parts, the axis' `blockIdx` read through `block`.
fn wrapped(cx: &RewriteContext<'_>, body: Node<'_>, p: &Parts<'_>) -> String {
    let src = cx.text;
    let field = format!("blockIdx.{}", p.axis.name());
    let mut e = Edits::new();
    walk(body, &mut |n| {
        match n.kind() {
            "field_expression" if text(src, n).split_whitespace().collect::<String>() == field => {
                e.extend([Edit::replace(n.byte_range(), p.block.to_string())]);
            }
            "return_statement" => e.extend([Edit::replace(n.byte_range(), "continue;")]),
            _ => {}
        }
        true
    });
    let inner_range = body.start_byte() + 1..body.end_byte() - 1;
    let inner = e
        .apply_within(src, inner_range.clone())
        .unwrap_or_else(|_| src[inner_range].to_string());
    let nl = newline(src);
    // the function's own indentation (its body's brace may end a continued parameter line)
    let head = body.parent().map_or(body.start_byte(), |f| f.start_byte());
    let outer = line_indent(src, head).to_string();
    let ind = format!("{outer}    ");
    let in2 = format!("{ind}    ");
    let (v, part, block) = (p.v, p.part, p.block);
    let guard = p.bound.map_or(String::new(), |b| {
        format!("{nl}{in2}if ({block} >= (unsigned)({b})) break; // past the grid's last block")
    });
    format!(
        "{{{nl}{ind}#pragma unroll{nl}{ind}for (unsigned {part} = 0; {part} < {v}; ++{part}) {{{nl}{in2}const unsigned {block} = {field} * {v} + {part};{guard}{}{ind}}}{nl}{outer}}}",
        reindent(&inner, &ind, &in2).trim_end_matches([' ', '\t']),
    )
}

#[cfg(test)]
#[path = "block_coarsen/tests.rs"]
mod tests;
