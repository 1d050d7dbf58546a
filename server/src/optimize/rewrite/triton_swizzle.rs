//! `triton_swizzle`: a Triton kernel launched over a 2-D grid of programs (`pid_m =
//! tl.program_id(0)`, `pid_n = tl.program_id(1)`) is launched over a 1-D grid instead,
//! with the program ids computed in *grouped* order: GROUP consecutive programs take
//! GROUP consecutive tiles along axis 0 before moving along axis 1, so the operands they
//! share are still in L2 when the next one needs them (the matmul tutorial's "L2 cache
//! optimization"). The mapping is a bijection of the same tiles: each program still
//! computes exactly one tile, the same set of tiles as before.
//!
//! **Matches** exactly two assignments `a = tl.program_id(0)` and `b = tl.program_id(1)`
//! (`axis=` too), one right after the other, no other read of those axes and no
//! `tl.num_programs`; reads of axis 2 (a batch: `pid_b = tl.program_id(2)` over `grid =
//! (G0, G1, B)`) are kept as they are. The spec's G0 and G1 must name only kernel
//! parameters, integer literals, `+ - * /` and `cdiv`, so that the kernel can compute the
//! grid's shape itself (`cdiv` becomes `tl.cdiv`, `/` becomes `//`).
//!
//! **Writes** the grouped mapping in place of the two assignments, and `grid = G0 * G1`
//! (`(G0 * G1, 1, B)` for a 3-D grid: each batch's tiles in grouped order); one candidate
//! per GROUP in param `group_sizes` (default [8, 4]).

use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::edits::{Edit, Edits};
use super::params::Params;
use super::spec_expr::components;
use super::tree::{
    code_names, first_line, fresh, kernel_function, line_indent, named_children, newline, text,
    walk,
};
use super::RewriteContext;
use crate::optimize::edit;
use crate::syntax::Lang;

const ID: &str = "triton_swizzle";

pub fn triton_swizzle(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Triton, ID)?;
    current_plan(cx)?;
    let groups = Params(cx.params).uints("group_sizes", &[8, 4], 2..=64)?;
    let k = &cx.kernel.name;
    let src = cx.text;
    let na = |why: String| {
        not_applicable(format!(
            "`{k}` cannot take its programs in grouped order: {why}"
        ))
    };
    let func = kernel_function(cx)
        .ok_or_else(|| not_applicable(format!("`{k}`'s definition is not in the syntax tree")))?;
    let body = func
        .child_by_field_name("body")
        .ok_or_else(|| na("it has no body".into()))?;
    let ids = program_ids(src, body).map_err(na)?;
    let [(a0, c0), (a1, c1)] = ids.as_slice() else {
        return Err(na(format!(
            "it reads `tl.program_id` {} times; grouping needs one read of axis 0 and one of axis 1",
            ids.len()
        )));
    };
    if a0 == a1 {
        return Err(na("both program ids read the same axis".into()));
    }
    // Each call is the whole right side of `name = tl.program_id(a)`, consecutive.
    let ((n0, s0), (n1, s1)) = match (assigned_by(src, *c0), assigned_by(src, *c1)) {
        (Some(x), Some(y)) => {
            if *a0 == 0 {
                (x, y)
            } else {
                (y, x)
            }
        }
        _ => return Err(na(
            "`tl.program_id` is not the whole right side of an assignment `pid = tl.program_id(0)`"
                .into(),
        )),
    };
    let (first, second) = if s0.start_byte() < s1.start_byte() {
        (s0, s1)
    } else {
        (s1, s0)
    };
    if first.next_named_sibling().map(|n| n.id()) != Some(second.id()) {
        return Err(na(format!(
            "`{}` and `{}` are not consecutive statements",
            first_line(text(src, first)),
            first_line(text(src, second))
        )));
    }
    // The grid, in the kernel's terms.
    let grid = edit::spec_assignment(cx.kernel, "grid")
        .ok_or_else(|| na("the spec has no `grid = ...`".into()))?;
    let parts = components(&grid.text);
    if !(2..=3).contains(&parts.len()) {
        return Err(na(format!(
            "`grid = {}` is not a 2-D or 3-D grid",
            grid.text
        )));
    }
    let params: Vec<&str> = cx.kernel.params.iter().map(|p| p.name.as_str()).collect();
    let in_kernel = |e: &str| grid_in_kernel(e, &params);
    let g0 = &grid.text[parts[0].clone()];
    let g1 = &grid.text[parts[1].clone()];
    let batches = parts.get(2).map(|p| grid.text[p.clone()].trim());
    let (k0, k1) = (in_kernel(g0).map_err(na)?, in_kernel(g1).map_err(na)?);
    let mut names = code_names(cx);
    let pid = fresh("pid", &mut names);
    let n_0 = fresh("num_pid_0", &mut names);
    let n_1 = fresh("num_pid_1", &mut names);
    let in_group = fresh("num_pid_in_group", &mut names);
    let first0 = fresh("first_pid_0", &mut names);
    let size = fresh("group_size", &mut names);
    let nl = newline(src);
    let ind = line_indent(src, first.start_byte()).to_string();
    let grid_range = grid.range.clone();
    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    for g in groups {
        let label = format!("grouped program order, GROUP={g}");
        let code = [
            format!("{pid} = tl.program_id(0)"),
            format!("# {g} programs in a row share their rows of tiles along axis 0: L2 reuse"),
            format!("{n_0} = {k0}"),
            format!("{n_1} = {k1}"),
            format!("{in_group} = {g} * {n_1}"),
            format!("{first0} = ({pid} // {in_group}) * {g}"),
            format!("{size} = min({n_0} - {first0}, {g})"),
            format!("{n0} = {first0} + (({pid} % {in_group}) % {size})"),
            format!("{n1} = ({pid} % {in_group}) // {size}"),
        ]
        .join(&format!("{nl}{ind}"));
        let mut e = Edits::new();
        e.extend([
            Edit::replace(first.start_byte()..second.end_byte(), code),
            Edit::replace(grid_range.clone(), grouped_grid(g0, g1, batches)),
        ]);
        match e.apply(src) {
            Ok(text) => drafts.push(Draft { label, text }),
            Err(err) => dropped.push(format!("{label}: {err}")),
        }
    }
    finish(cx, drafts, dropped)
}

/// The grouped launch of grid `(g0, g1)`, or `(g0, g1, batches)`: `g0 * g1` programs
/// along axis 0, the batches kept along axis 2.
fn grouped_grid(g0: &str, g1: &str, batches: Option<&str>) -> String {
    let tiles = format!("{} * {}", factor(g0), factor(g1));
    match batches {
        Some(b) => format!("({tiles}, 1, {b})"),
        None => tiles,
    }
}

/// Every `tl.program_id` call of `body` on axis 0 or 1 with its axis (axis 2 is left as
/// it is); refuses a `tl.num_programs` read and another axis.
fn program_ids<'t>(
    src: &str,
    body: tree_sitter::Node<'t>,
) -> Result<Vec<(u8, tree_sitter::Node<'t>)>, String> {
    let mut ids: Vec<(u8, tree_sitter::Node)> = Vec::new();
    let mut err = None;
    walk(body, &mut |n| {
        if n.kind() != "call" {
            return true;
        }
        let f = n
            .child_by_field_name("function")
            .map_or("", |f| text(src, f));
        let short = f.rsplit('.').next().unwrap_or(f);
        if short == "num_programs" {
            err = Some(format!(
                "`{}` reads the grid's shape, which a 1-D grid changes",
                text(src, n)
            ));
        }
        if short != "program_id" {
            return true;
        }
        let axis = n
            .child_by_field_name("arguments")
            .and_then(|a| named_children(a).into_iter().next())
            .map(|a| match a.kind() {
                "keyword_argument" => a.child_by_field_name("value").map_or("", |v| text(src, v)),
                _ => text(src, a),
            })
            .unwrap_or("");
        match axis {
            "0" => ids.push((0, n)),
            "1" => ids.push((1, n)),
            "2" => {}
            other => {
                err = Some(format!("`{}` takes program axis `{other}`", text(src, n)));
            }
        }
        true
    });
    err.map_or(Ok(ids), Err)
}

/// A spec grid expression `e` as kernel code: literals and the kernel's `params` kept,
/// `cdiv` as `tl.cdiv`, `/` as `//`; refuses other names and operators.
fn grid_in_kernel(e: &str, params: &[&str]) -> Result<String, String> {
    let mut out = String::new();
    let mut word = String::new();
    let mut chars = e.chars().peekable();
    while let Some(ch) = chars.next() {
        if ch.is_ascii_alphanumeric() || ch == '_' {
            word.push(ch);
            if chars
                .peek()
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
            {
                continue;
            }
            if word.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                out.push_str(&word);
            } else if word == "cdiv" {
                out.push_str("tl.cdiv");
            } else if params.contains(&word.as_str()) {
                out.push_str(&word);
            } else {
                return Err(format!(
                    "the grid names `{word}`, which the kernel cannot see; write the grid with kernel parameters"
                ));
            }
            word.clear();
        } else if ch == '/' {
            out.push_str("//");
        } else if "+-*(), ".contains(ch) {
            out.push(ch);
        } else {
            return Err(format!("the grid uses `{ch}`"));
        }
    }
    Ok(out)
}

/// `name = CALL` as a whole statement: the name and the statement.
fn assigned_by<'t>(
    src: &str,
    call: tree_sitter::Node<'t>,
) -> Option<(String, tree_sitter::Node<'t>)> {
    let asg = call.parent().filter(|p| p.kind() == "assignment")?;
    let left = asg
        .child_by_field_name("left")
        .filter(|l| l.kind() == "identifier")?;
    let stmt = asg
        .parent()
        .filter(|p| p.kind() == "expression_statement")?;
    Some((text(src, left).to_string(), stmt))
}

/// A grid dim as a factor of a product: parenthesized when it holds a sum.
fn factor(g: &str) -> String {
    let g = g.trim();
    if g.contains(['+', '-']) && !(g.starts_with('(') && g.ends_with(')')) {
        format!("({g})")
    } else {
        g.to_string()
    }
}

#[cfg(test)]
mod tests;
