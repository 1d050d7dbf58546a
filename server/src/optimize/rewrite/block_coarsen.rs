//! `block_coarsen`: each block does the work of V consecutive blocks along x, one after
//! the other, in an unrolled loop: the kernel's body runs once per part with
//! `blockIdx.x` read as `blockIdx.x * V + part`, and the grid's x count becomes V times
//! smaller. The threads of a warp still touch what they touched together before, so a
//! coalesced kernel stays coalesced, while each thread has V independent iterations'
//! loads in flight and the index arithmetic and block scheduling are paid once per V
//! elements. It reads no shape: any body whose work is a function of its block index
//! is covered (one element per thread in 1-D or 2-D, guards, early returns, helpers),
//! which is what the remapped 2-D drafts of `remap_lanes` need next.
//!
//! **Writes** the loop around the kernel's statements (a `return` among them becomes
//! `continue`: that part is done), and the grid's x component with each division made V
//! times coarser (`cdiv(cols, 64)` -> `cdiv(cols, 4 * 64)`). Candidates: each V in param
//! `parts` (default [2, 4, 8]).
//!
//! **Refuses**: shared memory and barriers (a block's parts would share them), warp-level
//! code, `gridDim.x` (a grid-stride loop already spreads the work), a helper that reads
//! `blockIdx.x` (it would see the real block), a `return` inside a nested loop or
//! `switch`, and a grid x with no division to coarsen.

use tree_sitter::Node;

use super::check::{finish, not_applicable, require_lang, Draft, R};
use super::edits::{Edit, Edits};
use super::params::Params;
use super::remap_lanes::WARP_LEVEL;
use super::spec_expr::{components, widen};
use super::tree::{code_names, fresh, kernel_function, line_indent, newline, reindent, text, walk};
use super::RewriteContext;
use crate::optimize::edit::spec_assignment;
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
    refusal(cx, func, body).map_or(Ok(()), |why| Err(na(why)))?;
    let grid = spec_assignment(cx.kernel, "grid")
        .ok_or_else(|| na("the spec has no `grid = ...`".into()))?;
    let gx = components(&grid.text)
        .into_iter()
        .next()
        .ok_or_else(|| na("`grid` is empty".into()))?;
    let mut names = code_names(cx);
    let part = fresh("part", &mut names);
    let block = fresh("block_x", &mut names);
    let mut drafts = Vec::new();
    for v in parts {
        let Some(new_gx) = widen(&grid.text[gx.clone()], v as usize) else {
            return Err(na(format!(
                "grid x `{}` has no division (`cdiv(X, B)`) to make {v} times coarser",
                &grid.text[gx.clone()]
            )));
        };
        let mut e = Edits::new();
        e.extend([
            Edit::replace(body.byte_range(), wrapped(cx, body, v, &part, &block)),
            Edit::replace(
                grid.range.start + gx.start..grid.range.start + gx.end,
                new_gx,
            ),
        ]);
        if let Ok(t) = e.apply(cx.text) {
            drafts.push(Draft {
                label: format!("{v} blocks' work per block along x"),
                text: t,
            });
        }
    }
    finish(cx, drafts, Vec::new())
}

/// Why the kernel cannot be coarsened this way, if it cannot.
fn refusal(cx: &RewriteContext<'_>, func: Node<'_>, body: Node<'_>) -> Option<String> {
    let braces = text(cx.text, body);
    if braces.len() < 2 || !braces.starts_with('{') || !braces.ends_with('}') {
        return Some("its body does not parse (a closing brace is missing)".into());
    }
    let unit: String = cx
        .kernel
        .unit_ranges
        .iter()
        .filter_map(|r| cx.text.get(r.clone()))
        .collect();
    for (word, why) in [
        (
            "__shared__",
            "it uses shared memory, which a block's parts would share",
        ),
        ("__syncthreads", "it synchronizes the block"),
        (
            "gridDim.x",
            "it reads `gridDim.x` (a grid-stride loop spreads the work already)",
        ),
    ] {
        if unit.contains(word) {
            return Some(why.into());
        }
    }
    if let Some(w) = WARP_LEVEL.iter().find(|w| unit.contains(*w)) {
        return Some(format!("it uses warp-level code (`{w}`)"));
    }
    let kernel_text = text(cx.text, func);
    if unit.matches("blockIdx.x").count() > kernel_text.matches("blockIdx.x").count() {
        return Some("a helper it calls reads `blockIdx.x`".into());
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

/// The body as one loop over `v` parts, `blockIdx.x` read through `block`.
fn wrapped(cx: &RewriteContext<'_>, body: Node<'_>, v: u64, part: &str, block: &str) -> String {
    let src = cx.text;
    let mut e = Edits::new();
    walk(body, &mut |n| {
        match n.kind() {
            "field_expression"
                if text(src, n).split_whitespace().collect::<String>() == "blockIdx.x" =>
            {
                e.extend([Edit::replace(n.byte_range(), block.to_string())]);
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
    let outer = line_indent(src, body.start_byte()).to_string();
    let ind = format!("{outer}    ");
    let in2 = format!("{ind}    ");
    format!(
        "{{{nl}{ind}#pragma unroll{nl}{ind}for (unsigned {part} = 0; {part} < {v}; ++{part}) {{{nl}{in2}const unsigned {block} = blockIdx.x * {v} + {part};{}{ind}}}{nl}{outer}}}",
        reindent(&inner, &ind, &in2).trim_end_matches([' ', '\t']),
    )
}

#[cfg(test)]
#[path = "block_coarsen/tests.rs"]
mod tests;
