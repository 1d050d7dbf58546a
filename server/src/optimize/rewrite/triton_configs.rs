//! `triton_configs`: one sweep over a grid of launch configurations — every block-size
//! `tl.constexpr` the spec sets as a power-of-two literal (halved, kept, doubled or
//! quadrupled) ×
//! `num_warps` × `num_stages` — pruned by what the device can hold, ranked, and the best
//! few offered, in place of one knob at a time (`triton_block`, `triton_num_warps`,
//! `triton_num_stages` move one value and keep the others; the best configuration often
//! needs several to move together).
//!
//! For a kernel that multiplies tiles (`tl.dot`, an accumulator `tl.zeros((BM, BN))`,
//! a loop `range(..., ..., BK)`), a configuration is kept when its pipelined tiles fit in
//! shared memory (`num_stages × (BM·BK + BK·BN) × element bytes` ≤ 227 KiB, plus the
//! `BM·BN` output tile where the kernel stores through a tensor descriptor) and its
//! accumulator in registers (`BM·BN / (32·num_warps)` ≤ 128 per thread, as f32), and
//! ranked by the tile's arithmetic intensity `BM·BN / (BM + BN)` times the warps an SM
//! can keep resident (up to 8: Hopper's asynchronous MMAs need no more, so a 128x256
//! tile of one 8-warp program beats two 128x128 ones) and by a deeper k step (+15% per
//! doubling of BK over 16), with fewer than 3 stages counted as 20% worse. Each block
//! size is halved, kept, doubled or quadrupled (tiles of a dot stay within 16..256,
//! BK within 16..128). For
//! other kernels every block holds `BLOCK / (32·num_warps)` elements per thread; 1 to 64
//! are kept, ranked closest to 8 (a few vector loads per thread). Param
//! `max_candidates` (default 12) bounds what is verified and timed.
//!
//! A constexpr the spec ties to a problem size is not a block size and is never swept:
//! one whose doubling changes a buffer's shape (`HD = 64` read by `q: in f16[BH, L, HD]`,
//! a head dimension that `tl.arange(0, HD)` spans unmasked).
//!
//! **Refuses** kernels with no such literal block size (a size from a `tune` line is
//! `tunable_sweep`'s, a problem size is not one), and a spec that tunes `num_warps` or
//! `num_stages`.

use std::collections::BTreeMap;

use super::check::{
    current_plan, finish, not_applicable, require_lang, set_spec_values, sizes_a_buffer, Draft, R,
};
use super::params::Params;
use super::tree::{kernel_function, named_children, text, walk};
use super::triton_launch::{DEFAULT_NUM_STAGES, DEFAULT_NUM_WARPS};
use super::RewriteContext;
use crate::optimize::edit;
use crate::spec::{Arg, BenchPlan, Launch, Role, TunableKind};
use crate::syntax::{Lang, ParamKind};

const ID: &str = "triton_configs";
/// Shared memory one program may use on the device kernel-lsp targets (H100: 227 KiB).
const SMEM_BYTES: u64 = 227 * 1024;

/// Warps per SM past which a tiled dot gains nothing from more programs.
const RESIDENT_WARPS: u64 = 8;

/// The tile roles of a kernel that multiplies tiles.
struct DotShape {
    bm: String,
    bn: String,
    bk: String,
    elem_bytes: u64,
    /// Bytes of one output element where the kernel stores through a tensor descriptor
    /// (the output tile is staged in shared memory), else 0.
    out_tile_bytes: u64,
}

#[derive(Clone, Debug)]
struct Config {
    blocks: BTreeMap<String, u64>,
    warps: u64,
    stages: u64,
    score: f64,
}

pub fn triton_configs(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Triton, ID)?;
    let plan = current_plan(cx)?;
    let p = Params(cx.params);
    let max = p.uints("max_candidates", &[12], 1..=64)?[0] as usize;
    let warps_list = p.uints("num_warps", &[2, 4, 8], 1..=32)?;
    let stages_list = p.uints("num_stages", &[2, 3, 4], 1..=8)?;
    let k = &cx.kernel.name;
    let na =
        |why: String| not_applicable(format!("`{k}` has no configuration grid to sweep: {why}"));
    if plan.tunables.iter().any(|t| {
        t.values.len() > 1 && matches!(t.kind, TunableKind::NumWarps | TunableKind::NumStages)
    }) {
        return Err(na(
            "the spec tunes `num_warps` or `num_stages` itself; tunable_sweep covers it".into(),
        ));
    }
    let blocks = literal_blocks(cx, &plan).map_err(na)?;
    let (cur_warps, cur_stages) = match plan.cases.first().map(|c| &c.launch) {
        Some(Launch::Triton {
            num_warps,
            num_stages,
            ..
        }) => (
            num_warps.unwrap_or(DEFAULT_NUM_WARPS),
            num_stages.unwrap_or(DEFAULT_NUM_STAGES),
        ),
        _ => (DEFAULT_NUM_WARPS, DEFAULT_NUM_STAGES),
    };
    let dot = dot_shape(
        cx,
        &plan
            .cases
            .first()
            .map(|c| c.args.clone())
            .unwrap_or_default(),
        &blocks,
    );
    let has_loop = {
        let mut l = false;
        if let Some(f) = kernel_function(cx) {
            walk(f, &mut |n| {
                l |= n.kind() == "for_statement";
                true
            });
        }
        l
    };
    let stages_list: Vec<u64> = if has_loop {
        stages_list
    } else {
        vec![cur_stages]
    };
    let combos = block_grid(&blocks, &dot);
    let mut configs: Vec<Config> = Vec::new();
    for c in &combos {
        for &w in &warps_list {
            for &s in &stages_list {
                if c == &blocks && w == cur_warps && s == cur_stages {
                    continue;
                }
                if let Some(score) = score(&dot, c, w, s) {
                    configs.push(Config {
                        blocks: c.clone(),
                        warps: w,
                        stages: s,
                        score,
                    });
                }
            }
        }
    }
    if configs.is_empty() {
        return Err(na(
            "every configuration of the grid is pruned by shared memory or registers".into(),
        ));
    }
    configs.sort_by(|a, b| b.score.total_cmp(&a.score));
    configs.truncate(max);
    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    for c in configs {
        let mut values: Vec<(String, String)> = c
            .blocks
            .iter()
            .map(|(n, v)| (n.clone(), v.to_string()))
            .collect();
        values.push(("num_warps".into(), c.warps.to_string()));
        if has_loop {
            values.push(("num_stages".into(), c.stages.to_string()));
        }
        let label = values
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join(", ");
        match set_spec_values(cx.text, cx.kernel, &values) {
            Ok(text) => drafts.push(Draft { label, text }),
            Err(e) => dropped.push(format!("{label}: {e}")),
        }
    }
    finish(cx, drafts, dropped)
}

/// The kernel's block sizes to sweep: each `tl.constexpr` parameter the spec sets to a
/// power-of-two literal of at least 16 and does not tune; or why there is none.
fn literal_blocks(
    cx: &RewriteContext<'_>,
    plan: &BenchPlan,
) -> Result<BTreeMap<String, u64>, String> {
    let mut blocks: BTreeMap<String, u64> = BTreeMap::new();
    let mut reasons = Vec::new();
    for prm in cx
        .kernel
        .params
        .iter()
        .filter(|p| matches!(p.kind, ParamKind::Constexpr))
    {
        let name = &prm.name;
        if plan
            .tunables
            .iter()
            .any(|t| t.name == *name && t.values.len() > 1)
        {
            reasons.push(format!(
                "`{name}` has a `tune` line (tunable_sweep covers it)"
            ));
            continue;
        }
        let Some(v) = edit::spec_assignment(cx.kernel, name)
            .and_then(|a| a.text.parse::<u64>().ok())
            .filter(|v| v.is_power_of_two() && *v >= 16)
        else {
            reasons.push(format!(
                "`{name}` is not set to a power-of-two literal of at least 16"
            ));
            continue;
        };
        if let Some(why) = sizes_a_buffer(cx, plan, name, v as i64) {
            reasons.push(why);
            continue;
        }
        blocks.insert(name.clone(), v);
    }
    if blocks.is_empty() {
        return Err(if reasons.is_empty() {
            "it has no `tl.constexpr` parameter".into()
        } else {
            reasons.join("; ")
        });
    }
    Ok(blocks)
}

/// The grid of block sizes: each block halved, kept, doubled or quadrupled, within the
/// bounds a `tl.dot`'s tiles (`dot`) allow.
fn block_grid(
    blocks: &BTreeMap<String, u64>,
    dot: &Option<DotShape>,
) -> Vec<BTreeMap<String, u64>> {
    let mut combos: Vec<BTreeMap<String, u64>> = vec![BTreeMap::new()];
    for (name, v) in blocks {
        let (lo, hi) = match &dot {
            Some(d) if *name == d.bk => (16, 128),
            Some(_) => (16, 256),
            None => (16, 16384),
        };
        // Every block may also grow fourfold: a first draft's 64x64x32 tiles are two
        // doublings away from the 128x256x64 ones that keep Hopper's tensor cores busy.
        let mut options: Vec<u64> = [*v / 2, *v, *v * 2, *v * 4]
            .into_iter()
            .filter(|x| (lo..=hi).contains(x))
            .collect();
        options.dedup();
        combos = combos
            .into_iter()
            .flat_map(|c| {
                options.iter().map(move |o| {
                    let mut c = c.clone();
                    c.insert(name.clone(), *o);
                    c
                })
            })
            .collect();
    }
    combos
}

/// The kernel multiplies tiles: `tl.dot`, an accumulator `tl.zeros((BM, BN), ...)` and a
/// loop stepping by BK, all three literal block sizes; element bytes from the spec's
/// input buffers.
fn dot_shape(
    cx: &RewriteContext<'_>,
    args: &[Arg],
    blocks: &BTreeMap<String, u64>,
) -> Option<DotShape> {
    let src = cx.text;
    let f = kernel_function(cx)?;
    let (mut has_dot, mut acc, mut step) = (false, None, None);
    let (mut descriptors, mut desc_store) = (false, false);
    walk(f, &mut |n| {
        if n.kind() == "call" {
            let callee = n
                .child_by_field_name("function")
                .map_or("", |c| text(src, c));
            if callee.ends_with(".dot") {
                has_dot = true;
            }
            descriptors |= callee.ends_with("make_tensor_descriptor");
            desc_store |= callee.ends_with(".store") && !callee.starts_with("tl.");
            if callee.ends_with(".zeros") && acc.is_none() {
                let first = n
                    .child_by_field_name("arguments")
                    .and_then(|a| named_children(a).into_iter().next())
                    .filter(|t| t.kind() == "tuple");
                if let Some(t) = first {
                    let dims: Vec<String> = named_children(t)
                        .iter()
                        .map(|d| text(src, *d).to_string())
                        .collect();
                    if let [a, b] = dims.as_slice() {
                        acc = Some((a.clone(), b.clone()));
                    }
                }
            }
            if callee == "range" && step.is_none() {
                let args = n
                    .child_by_field_name("arguments")
                    .map(named_children)
                    .unwrap_or_default();
                if let [_, _, s] = args.as_slice() {
                    step = Some(text(src, *s).to_string());
                }
            }
        }
        true
    });
    let (bm, bn) = acc?;
    let bk = step?;
    if !has_dot || ![&bm, &bn, &bk].iter().all(|n| blocks.contains_key(*n)) {
        return None;
    }
    // The loaded tiles are inputs: their element size sets the tiles' bytes.
    let bytes_of = |out: bool| {
        args.iter()
            .filter_map(|a| match a {
                Arg::Buffer { dtype, role, .. } if (*role == Role::Out) == out => {
                    Some(dtype.size_bytes())
                }
                _ => None,
            })
            .max()
    };
    let elem_bytes = bytes_of(false).unwrap_or(4);
    let out_tile_bytes = if descriptors && desc_store {
        bytes_of(true).unwrap_or(4)
    } else {
        0
    };
    Some(DotShape {
        bm,
        bn,
        bk,
        elem_bytes,
        out_tile_bytes,
    })
}

/// The configuration's rank, or None when it does not fit.
fn score(
    dot: &Option<DotShape>,
    blocks: &BTreeMap<String, u64>,
    warps: u64,
    stages: u64,
) -> Option<f64> {
    match dot {
        Some(d) => {
            let (bm, bn, bk) = (blocks[&d.bm], blocks[&d.bn], blocks[&d.bk]);
            let smem = stages * (bm * bk + bk * bn) * d.elem_bytes + bm * bn * d.out_tile_bytes;
            let acc_regs = bm * bn / (32 * warps);
            if smem > SMEM_BYTES || acc_regs > 128 || acc_regs == 0 {
                return None;
            }
            let regs = acc_regs + 40;
            let by_smem = SMEM_BYTES / smem.max(1);
            let by_regs = 65536 / (regs * 32 * warps);
            let programs = by_smem.min(by_regs).min(32);
            if programs == 0 {
                return None;
            }
            // Eight warps of one or two programs keep an SM's tensor cores fed (the
            // MMAs are asynchronous on Hopper): more occupancy than that buys nothing,
            // while a larger tile reads each operand fewer times.
            let resident = (programs * warps).min(RESIDENT_WARPS) as f64 / RESIDENT_WARPS as f64;
            let intensity = (bm * bn) as f64 / (bm + bn) as f64;
            let pipeline = if stages >= 3 { 1.0 } else { 0.8 };
            // A deeper k step: fewer iterations and longer runs of MMAs per load.
            let depth = 1.0 + 0.15 * (bk as f64 / 16.0).log2();
            Some(intensity * resident * pipeline * depth)
        }
        None => {
            let block: u64 = blocks.values().product();
            let per_thread = block as f64 / (32 * warps) as f64;
            if !(1.0..=64.0).contains(&per_thread) {
                return None;
            }
            Some(-(per_thread.log2() - 3.0).abs())
        }
    }
}

#[cfg(test)]
mod tests;
