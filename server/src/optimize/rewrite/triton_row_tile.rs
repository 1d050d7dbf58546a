//! `triton_row_tile`: a Triton kernel whose loops walk a row `BLOCK` elements at a time
//! takes the whole row as one tile: the spec sets `BLOCK = next_pow2(n)` (the row's
//! length), each loop becomes its body run once, and a load or index that repeats an
//! earlier one with the same inputs is dropped, so the row is loaded once and stays in
//! registers between the passes (load, reduce, write).
//!
//! **Matches**, from the loop analysis (`facts/triton_loops.rs`): body loops `for v in
//! range(0, n, BLOCK)` (or `tl.range`, or the while form `v = 0` … `while v < n:` …
//! `v += BLOCK`), all with the same `n` (a kernel parameter) and `BLOCK` (a
//! `tl.constexpr` the spec sets with `BLOCK = ...`, not tuned, not in the grid).
//!
//! **Refuses** loops that step by other values or over other ranges under the same
//! BLOCK, `tl.dot` inside (a K loop of tiles, not a row), and tiles of more than param
//! `max_block` (default 16384) elements in any case of the spec, where one tile would
//! spill: the row's length, times the other dimensions of a 2-D tile (a column block
//! `BLOCK_N` broadcast beside the rows). A dimension whose value the spec does not give
//! (a module-level `BLOCK_N = tl.constexpr(64)`) is refused too, so the dispatcher's
//! normalized form, where it is a parameter the spec sets, is the one sized.
//!
//! **Writes** the flattened body and `BLOCK = next_pow2(n)`; one candidate per
//! `num_warps` in param `num_warps` (default: the spec's and 8), since a row in one tile
//! wants more warps than a strip of it.
//!
//! **Too long for one tile** (`budget.rs`): where the rows of a 2-D tile do not fit (a
//! column reduction walking 8192 rows `BLOCK_M` at a time beside `BLOCK_N` columns a
//! program, on a 1-D grid `cdiv(n, BLOCK_N)`), the loops stay and take the budgeted tile
//! of `triton_split_loop` instead: `BLOCK_N` halved while case 0 launches under 128
//! programs (16 programs each walking every row leave most of a GPU idle), `BLOCK_M` the
//! steps that keep 8192 elements a step in flight, `num_warps` to hold them, and each
//! `for` loop that names no `num_stages` made `tl.range(..., num_stages=BLOCK_M_STAGES)`
//! with that knob set to 3 and tuned over [1, 2, 3, 4]. Only the spec's values and loop
//! headers change; the author's masks cover any power-of-two block. One candidate.
//! Refused: a tile 1-D or with more than one dimension beside the rows, a grid other than
//! one `cdiv(n, LANES)` with `LANES` a power of two the spec sets and does not tune, and a
//! tile already at the budget.

use super::check::{current_plan, finish, not_applicable, require_lang, set_spec_values, Draft, R};
use super::edits::{Edit, Edits};
use super::params::Params;
use super::tree::{line_indent, newline, reindent, text};
use super::triton_loops::{body_loops, lines_of, repeats, with_names, Repeat, Stmt};
use super::RewriteContext;
use crate::optimize::edit;
use crate::optimize::facts::triton_loops::{collapse, Loop};
use crate::spec::{Arg, BenchPlan, Launch};
use crate::syntax::{Lang, ParamKind};

const ID: &str = "triton_row_tile";

pub fn triton_row_tile(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Triton, ID)?;
    let plan = current_plan(cx)?;
    let p = Params(cx.params);
    let max_block = p
        .uints("max_block", &[16384], 16..=1 << 20)?
        .first()
        .copied()
        .unwrap_or(16384);
    let k = &cx.kernel.name;
    let na = |why: String| not_applicable(format!("`{k}` cannot take a row as one tile: {why}"));
    let (top, found) = body_loops(cx)?;
    let tiled = row_loops(cx, &found).map_err(na)?;
    let (block, n) = (tiled[0].step.clone(), tiled[0].stop.clone());
    settable(cx, &plan, &block).map_err(na)?;
    if let Err(long) = fits(cx, &plan, &block, &n, max_block) {
        let d = budget::budgeted(cx, &plan, &tiled)
            .map_err(|b| na(format!("{long}; its loop keeps no budgeted tile: {b}")))?;
        return finish(cx, vec![d], Vec::new());
    }
    let code = flatten(cx, &top, &tiled).map_err(na)?;
    // A size (`cols = 300, 1000`: one value per case) is named as it is; a parameter
    // bound to an expression (`n_cols = cols`), by that expression.
    let n_spec = match edit::spec_assignment(cx.kernel, &n) {
        Some(a) if !a.text.contains(',') => a.text,
        _ => n.clone(),
    };
    let warps_now = plan.cases.first().and_then(|c| match &c.launch {
        Launch::Triton { num_warps, .. } => *num_warps,
        Launch::Cuda { .. } => None,
    });
    let warps = p.uints("num_warps", &[warps_now.unwrap_or(4), 8], 1..=32)?;
    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    for w in warps {
        let mut values = vec![(block.clone(), format!("next_pow2({n_spec})"))];
        if Some(w) != warps_now {
            values.push(("num_warps".to_string(), w.to_string()));
        }
        let label = format!("one tile per row: {block} = next_pow2({n_spec}), num_warps = {w}");
        match set_spec_values(&code, cx.kernel, &values) {
            Ok(text) => drafts.push(Draft { label, text }),
            Err(e) => dropped.push(format!("{label}: {e}")),
        }
    }
    finish(cx, drafts, dropped)
}

/// The loops stepping by a `tl.constexpr` block, all over one `range(0, n, BLOCK)` with
/// `n` a parameter and no `tl.dot` inside.
fn row_loops<'l, 't>(
    cx: &RewriteContext<'_>,
    found: &'l [Loop<'t>],
) -> Result<Vec<&'l Loop<'t>>, String> {
    let param = |n: &str, constexpr: bool| {
        cx.kernel.params.iter().any(|p| {
            p.name == n
                && if constexpr {
                    matches!(p.kind, ParamKind::Constexpr)
                } else {
                    matches!(p.kind, ParamKind::TritonArg { .. })
                }
        })
    };
    let tiled: Vec<&Loop> = found.iter().filter(|l| param(&l.step, true)).collect();
    let Some(first) = tiled.first() else {
        return Err("no loop steps by a `tl.constexpr` block".into());
    };
    let block = &first.step;
    if let Some(l) = tiled.iter().find(|l| l.range_key() != first.range_key()) {
        return Err(format!(
            "loops step by `{block}` over different ranges ({} and {})",
            first.range_key(),
            l.range_key()
        ));
    }
    if first.start != "0" || !param(&first.stop, false) {
        return Err(format!(
            "the loop walks `range({})`; one tile needs `range(0, n, {block})` with `n` a parameter",
            first.range_key()
        ));
    }
    if tiled
        .iter()
        .any(|l| text(cx.text, l.node).contains("tl.dot"))
    {
        return Err("a loop calls `tl.dot`: its block is a matmul tile, not a row".into());
    }
    Ok(tiled)
}

/// The spec may set `block`: it sets it, does not tune it, and the grid does not depend
/// on it.
fn settable(cx: &RewriteContext<'_>, plan: &BenchPlan, block: &str) -> Result<(), String> {
    let tuned = plan
        .tunables
        .iter()
        .any(|t| t.name == block && t.values.len() > 1);
    let grid = edit::spec_assignment(cx.kernel, "grid").map(|g| g.text);
    if tuned || grid.as_deref().is_some_and(|g| mentions(g, block)) {
        return Err(format!(
            "the spec tunes `{block}` or the grid depends on it"
        ));
    }
    if edit::spec_assignment(cx.kernel, block).is_none() {
        return Err(format!("the spec has no `{block} = ...` to change"));
    }
    Ok(())
}

/// Every case's row, times the other dimensions of a 2-D tile, fits in `max_block`.
fn fits(
    cx: &RewriteContext<'_>,
    plan: &BenchPlan,
    block: &str,
    n: &str,
    max_block: u64,
) -> Result<(), String> {
    for (i, case) in plan.cases.iter().enumerate() {
        let len = case.args.iter().find_map(|a| match a {
            Arg::Scalar { name, value, .. } if *name == n => Some(value.as_f64()),
            _ => None,
        });
        let Some(len) = len else {
            return Err(format!("the spec gives no value of `{n}`"));
        };
        let tile = (len.max(1.0) as u64).next_power_of_two();
        if tile > max_block {
            return Err(format!(
                "case {i}: a row of {len} elements needs a tile of {tile}, over {max_block}"
            ));
        }
        let others = tile_dims(&super::unit::unit_text(cx), block);
        let mut across: u64 = 1;
        for d in &others {
            let v = d.parse().ok().or_else(|| constexpr_value(case, d));
            let v = v.ok_or_else(|| {
                format!("case {i}: the tile's other dimension `{d}` has no value the spec gives")
            })?;
            across = across.saturating_mul(v);
        }
        if tile.saturating_mul(across) > max_block {
            return Err(format!(
                "case {i}: a row of {len} elements in a tile {across} wide ({}) needs {} elements, over {max_block}",
                others.join(" x "),
                tile.saturating_mul(across)
            ));
        }
    }
    Ok(())
}

/// The other dimensions of the kernel's 2-D tiles: each `tl.constexpr` NAME (not
/// `block`) of a `tl.arange(0, NAME)` that is broadcast (`[None, :]`, `[:, None]`)
/// itself or through the name it is assigned to (`cols = ... tl.arange(0, BLOCK_N)`,
/// then `cols[None, :]`). A row taken whole is that many times larger a tile.
fn tile_dims(unit: &str, block: &str) -> Vec<String> {
    let broadcast = |at: &str| at.starts_with("[None") || at.starts_with("[:, None");
    let mut dims: Vec<String> = Vec::new();
    for line in unit.lines() {
        let mut rest = line;
        while let Some(i) = rest.find("tl.arange(0,") {
            let after = &rest[i + "tl.arange(0,".len()..];
            let Some(close) = after.find(')') else { break };
            let name = after[..close].trim().to_string();
            let tail = &after[close + 1..];
            let var = line
                .split_once('=')
                .map(|(l, _)| l.trim())
                .filter(|l| l.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
            let spread = broadcast(tail)
                || var.is_some_and(|v| {
                    !v.is_empty()
                        && ["[None", "[:, None"]
                            .iter()
                            .any(|b| unit.contains(&format!("{v}{b}")))
                });
            if spread && name != block && !dims.contains(&name) {
                dims.push(name);
            }
            rest = tail;
        }
    }
    dims
}

/// A constexpr's integer value in `case`.
fn constexpr_value(case: &crate::spec::Case, name: &str) -> Option<u64> {
    case.args.iter().find_map(|a| match a {
        Arg::Constexpr { name: n, value } if n == name => u64::try_from(value.as_f64() as i64).ok(),
        _ => None,
    })
}

/// `name` appears as a whole word in `expr`.
fn mentions(expr: &str, name: &str) -> bool {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|w| w == name)
}

/// The file with each loop of `tiled` replaced by its body, run once.
fn flatten(
    cx: &RewriteContext<'_>,
    top: &[tree_sitter::Node<'_>],
    tiled: &[&Loop<'_>],
) -> Result<String, String> {
    let src = cx.text;
    let nl = newline(src);
    // Every top statement in order, loops opened: (statement, its text, droppable, loop).
    let mut stmts: Vec<Stmt> = Vec::new();
    let mut texts: Vec<(String, bool, Option<usize>)> = Vec::new();
    for s in top {
        let Some(li) = tiled.iter().position(|l| l.node.id() == s.id()) else {
            stmts.push(Stmt::of(src, *s, collapse(text(src, *s))));
            texts.push((String::new(), false, None));
            continue;
        };
        let l = tiled[li];
        let outer = line_indent(src, l.node.start_byte()).to_string();
        if l.init.is_none() {
            let var = if l.reads.contains(&tiled[0].var) {
                &l.var
            } else {
                &tiled[0].var
            };
            let t = format!("{var} = {}", l.start);
            stmts.push(Stmt {
                text: t.clone(),
                reads: Default::default(),
                assigns: [var.clone()].into_iter().collect(),
                pure_assign: true,
                target: Some(var.clone()),
            });
            texts.push((format!("{outer}{t}"), true, Some(li)));
        }
        let inner = l.stmts.first().map_or(outer.clone(), |f| {
            line_indent(src, f.start_byte()).to_string()
        });
        // Every loop's variable is the first's (all start at the same value), so the
        // same index computed under two names is seen as one.
        let canon = &tiled[0].var;
        let rename = |v: &str| {
            (v == l.var && l.var != *canon && !l.reads.contains(canon)).then(|| canon.clone())
        };
        for b in &l.stmts {
            let renamed = with_names(src, *b, &rename);
            let mut st = Stmt::of(src, *b, collapse(&renamed));
            if rename(&l.var).is_some() && st.reads.remove(&l.var) {
                st.reads.insert(canon.clone());
            }
            stmts.push(st);
            let t = reindent(&renamed, &inner, &outer);
            texts.push((format!("{outer}{t}"), true, Some(li)));
        }
    }
    let droppable: Vec<bool> = texts.iter().map(|t| t.1).collect();
    let drop = repeats(&stmts, &droppable);
    let mut e = Edits::new();
    for (li, l) in tiled.iter().enumerate() {
        let outer = line_indent(src, l.node.start_byte());
        let kept: Vec<String> = texts
            .iter()
            .zip(&drop)
            .zip(&stmts)
            .filter(|(((_, _, owner), _), _)| *owner == Some(li))
            .filter_map(|(((t, _, _), r), st)| match (r, &st.target) {
                (Repeat::Drop, _) => None,
                (Repeat::Copy(x), Some(y)) => Some(format!("{outer}{y} = {x}")),
                _ => Some(t.clone()),
            })
            .collect();
        let mut body = kept.join(nl);
        body.push_str(nl);
        e.extend([Edit::replace(lines_of(src, l.node), body)]);
    }
    e.apply(src).map_err(|err| err.to_string())
}

mod budget;
#[cfg(test)]
mod tests;
