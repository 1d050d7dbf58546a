//! The row that does not fit one tile: a loop walking a long axis `BLOCK` rows at a time
//! through a 2-D tile whose other dimension is the program's lanes (a column sum or a
//! column logsumexp written as `rows = r0 + tl.arange(0, BLOCK_M)` beside `cols =
//! pid * BLOCK_N + tl.arange(0, BLOCK_N)`, on a grid `cdiv(n, BLOCK_N)`) keeps its loop
//! and takes the budgeted tile `triton_split_loop` gives a loop it splits itself
//! ([`tile_plan`]): lanes narrowed until case 0 launches enough programs to fill the GPU
//! (a few wide programs each walking every row leave most multiprocessors idle), the
//! steps widened so each iteration still loads the budget's elements, the warps to hold
//! them, and the loop pipelined through a `num_stages` knob. Only the spec's values and
//! the loop header change: the author's masks already cover any power-of-two block.

use super::super::check::{case_int, Draft};
use super::super::edits::Edits;
use super::super::tree::{code_names, fresh};
use super::super::triton_loops::{add_constexprs, loop_header, stages_free};
use super::super::triton_split_loop::{budget_statements, lane_tile, tile_plan};
use super::super::RewriteContext;
use super::{constexpr_value, tile_dims};
use crate::optimize::facts::triton_loops::Loop;
use crate::spec::BenchPlan;

/// The candidate that budgets the tile of `tiled` (loops over one range stepping by one
/// constexpr block), or why not.
pub(super) fn budgeted(
    cx: &RewriteContext<'_>,
    plan: &BenchPlan,
    tiled: &[&Loop<'_>],
) -> Result<Draft, String> {
    let first = tiled.first().ok_or("no loop")?;
    let block = &first.step;
    let others = tile_dims(&super::super::unit::unit_text(cx), block);
    let lanes = match others.as_slice() {
        [lanes] => lanes,
        [] => return Err(format!("its tile is 1-D: no lanes beside `{block}` to narrow")),
        more => {
            return Err(format!(
                "its tile has {} dimensions beside `{block}` ({}); the budget needs one, the lanes the grid divides",
                more.len(),
                more.join(", ")
            ))
        }
    };
    let lane = lane_tile(cx, plan, first)
        .filter(|l| l.name == *lanes)
        .ok_or_else(|| {
            format!("the grid is not `cdiv(n, {lanes})` on one axis, `{lanes}` a power of two the spec sets and does not tune")
        })?;
    let case = plan.cases.first().ok_or("the spec has no case")?;
    let now = constexpr_value(case, block).ok_or_else(|| format!("`{block}` has no value"))?;
    let warps_now = match &case.launch {
        crate::spec::Launch::Triton { num_warps, .. } => num_warps.unwrap_or(4),
        crate::spec::Launch::Cuda { .. } => return Err("not a Triton launch".into()),
    };
    let t = tile_plan(&lane, tiled.iter().all(|l| l.range_args.is_some()));
    let mut names = code_names(cx);
    let stages = tiled
        .iter()
        .any(|l| stages_free(cx.text, l))
        .then(|| fresh(&format!("{}_STAGES", block.to_uppercase()), &mut names));
    if (t.steps, t.block, t.num_warps) == (now, lane.block, warps_now) && stages.is_none() {
        return Err(format!(
            "its tile ({block} = {now}, {lanes} = {}, {warps_now} warps) is already the budget's",
            lane.block
        ));
    }
    let text = pipelined(cx, tiled, stages.as_deref())?;
    let (values, extra) = budget_statements(&t, &lane, block, stages.as_deref());
    let text = super::super::check::set_spec_statements(&text, cx.kernel, &values, &extra)
        .map_err(|e| e.to_string())?;
    let line = first.node.start_position().row + 1;
    let trip = case_int(case, &first.stop).map_or(String::new(), |n| format!(" of {n}"));
    let label = format!(
        "the loop at line {line} keeps a budgeted tile: {block} = {} rows{trip} a step, {lanes} = {}, {} warps ({} programs)",
        t.steps,
        t.block,
        t.num_warps,
        t.programs(&lane)
    );
    Ok(Draft { label, text })
}

/// The file with each loop of `tiled` that names no `num_stages` pipelined through the
/// constexpr `stages` (added to the signature), its step unchanged.
fn pipelined(
    cx: &RewriteContext<'_>,
    tiled: &[&Loop<'_>],
    stages: Option<&str>,
) -> Result<String, String> {
    let Some(s) = stages else {
        return Ok(cx.text.to_string());
    };
    let mut e = Edits::new();
    for l in tiled.iter().filter(|l| stages_free(cx.text, l)) {
        e.extend(loop_header(cx.text, l, &l.step, Some(s))?);
    }
    e.extend(add_constexprs(cx, &[s])?);
    e.apply(cx.text).map_err(|err| err.to_string())
}
