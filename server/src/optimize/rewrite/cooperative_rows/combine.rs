//! The shared-memory combine that ends a carrying loop in both team rewrites: each
//! thread (or one per warp) stores its partials of every carried value in `__shared__`
//! arrays, a barrier, then every thread that shares the result combines the partials in
//! slot order with the author's own update (an arg-max pick as one group, see
//! [`super::arg`]), and a last barrier. `cooperative_rows` keeps one partial per warp of
//! a block per row; `split_loop` one per thread along y of each output. Only the slots
//! differ ([`Slots`]). When the work is also split over a thread-block cluster (sm_90),
//! [`cluster_combine`] follows: one thread per result stores its block's value, and every
//! thread reads the cluster's block values from their shared memory in rank order
//! ([`ClusterSlot`] says which thread and which element).

use std::collections::BTreeSet;

use super::arg::combine_arg;
use super::{combine_plain, Acc};
use crate::optimize::rewrite::tree::fresh;

/// Where the partials sit, and who combines them.
pub(in crate::optimize::rewrite) struct Slots<'a> {
    /// Elements of each `__shared__` array.
    pub len: u32,
    /// The condition under which a thread stores its partial (`lane % 32 == 0`).
    pub store_if: Option<String>,
    /// The storing thread's slot.
    pub mine: String,
    /// The first partial's slot, which every thread starts from.
    pub first: String,
    /// The slot of partial `counter`.
    pub nth: String,
    /// The header of the loop over the other partials (it declares the counter `nth`
    /// reads).
    pub others: String,
    /// A single combine statement goes on the loop's own line.
    pub compact: bool,
    /// The comment that opens the block.
    pub comment: &'a str,
    /// Where the carried values are declared, for the missing-type message.
    pub scope: &'a str,
}

/// The combine's code, opening a block that is left open (the caller closes it), and
/// the arrays' names in the order of `accs` (each accumulator, then what it picks).
pub(in crate::optimize::rewrite) fn shared_combine(
    accs: &[&Acc],
    step: i64,
    slots: &Slots<'_>,
    ind: &str,
    unit: &str,
    nl: &str,
    names: &mut BTreeSet<String>,
) -> Result<(String, Vec<String>), String> {
    let i1 = format!("{ind}{unit}");
    let mut code = format!("{nl}{ind}{{ // {}", slots.comment);
    // One array per carried value: each accumulator, and what an arg pick keeps with it.
    let mut parts: Vec<(String, String)> = Vec::new();
    for acc in accs {
        let picked = acc.arg.iter().flat_map(|p| &p.with);
        for (name, ty) in std::iter::once((&acc.name, &acc.ty)).chain(picked.map(|(n, t)| (n, t))) {
            let ty = ty.clone().ok_or_else(|| {
                format!(
                    "the type of `{name}` is not declared in the {}",
                    slots.scope
                )
            })?;
            let part = fresh(&format!("{name}_part"), names);
            code.push_str(&format!("{nl}{i1}__shared__ {ty} {part}[{}];", slots.len));
            parts.push((name.clone(), part));
        }
    }
    let guard = slots
        .store_if
        .as_ref()
        .map_or(String::new(), |c| format!("if ({c}) "));
    for (name, part) in &parts {
        code.push_str(&format!("{nl}{i1}{guard}{part}[{}] = {name};", slots.mine));
    }
    code.push_str(&format!("{nl}{i1}__syncthreads();"));
    for (name, part) in &parts {
        code.push_str(&format!("{nl}{i1}{name} = {part}[{}];", slots.first));
    }
    let part_of = |v: &str| {
        let p = parts.iter().find(|(n, _)| n == v).map_or(v, |(_, p)| p);
        format!("{p}[{}]", slots.nth)
    };
    let mut inner = Vec::new();
    for acc in accs {
        match &acc.arg {
            Some(pick) => inner.extend(combine_arg(
                &acc.name,
                acc.ty.as_deref(),
                acc.family,
                pick,
                step,
                &part_of,
                names,
            )?),
            None => inner.push(combine_plain(acc, &part_of(&acc.name))),
        }
    }
    match inner.as_slice() {
        [one] if slots.compact && !one.contains('\t') => {
            code.push_str(&format!("{nl}{i1}for ({}) {one}", slots.others));
        }
        _ => {
            code.push_str(&format!("{nl}{i1}for ({}) {{", slots.others));
            for c in &inner {
                let (extra, c) = c.strip_prefix('\t').map_or(("", c.as_str()), |r| (unit, r));
                code.push_str(&format!("{nl}{i1}{unit}{extra}{c}"));
            }
            code.push_str(&format!("{nl}{i1}}}"));
        }
    }
    code.push_str(&format!("{nl}{i1}__syncthreads();"));
    Ok((code, parts.into_iter().map(|(_, p)| p).collect()))
}

/// Where a block's combined value waits for the other blocks of its cluster.
pub(in crate::optimize::rewrite) struct ClusterSlot<'a> {
    /// The threads that store it (one per result: `threadIdx.y == 0`).
    pub store_if: &'a str,
    /// Its element in the block combine's `__shared__` arrays (`threadIdx.x`, `0`).
    pub at: &'a str,
    /// Blocks per cluster.
    pub blocks: u64,
}

const CLUSTER_BARRIER: &str = "asm volatile(\"barrier.cluster.arrive.release.aligned;\\n\\tbarrier.cluster.wait.acquire.aligned;\" ::: \"memory\");";

/// After [`shared_combine`], inside its block (indented `ind`): the block's value of
/// each accumulator (array `parts[i]` for `accs[i]`) is stored at the slot, and every
/// thread of the cluster reads the blocks' values from their shared memory (`mapa`,
/// `ld.shared::cluster`) and combines them in rank order, between two cluster barriers
/// (the second keeps each block's shared memory alive until all have read it). One
/// value per result: an arg pick is refused, and types other than 4- and 8-byte ints and
/// floats.
pub(in crate::optimize::rewrite) fn cluster_combine(
    accs: &[&Acc],
    parts: &[String],
    slot: &ClusterSlot<'_>,
    ind: &str,
    unit: &str,
    nl: &str,
    names: &mut BTreeSet<String>,
) -> Result<String, String> {
    if let Some(acc) = accs.iter().find(|a| a.arg.is_some()) {
        return Err(format!(
            "`{}` is picked with other values (an arg-max or arg-min); the cluster combines one value per result",
            acc.name
        ));
    }
    let mut code = format!(
        "{nl}{ind}// the blocks of the cluster share their partials through distributed shared memory"
    );
    let mut reads = Vec::new();
    for (acc, part) in accs.iter().zip(parts) {
        let ty = acc.ty.as_deref().unwrap_or("");
        let (ptx, reg) = ptx_type(ty).ok_or_else(|| {
            format!(
                "`{}` is a `{ty}`, which the cluster's shared-memory reads do not cover",
                acc.name
            )
        })?;
        code.push_str(&format!(
            "{nl}{ind}if ({}) {part}[{}] = {};",
            slot.store_if, slot.at, acc.name
        ));
        reads.push((*acc, part.as_str(), ptx, reg));
    }
    code.push_str(&format!("{nl}{ind}{CLUSTER_BARRIER}"));
    let rank = fresh("rank", names);
    for (acc, part, ptx, reg) in reads {
        code.push_str(&remote_reads(
            acc,
            part,
            (ptx, reg),
            slot,
            &rank,
            ind,
            unit,
            nl,
            names,
        ));
    }
    code.push_str(&format!("{nl}{ind}{CLUSTER_BARRIER}"));
    Ok(code)
}

/// The loop that reads `acc`'s value from every block of the cluster, in rank order.
#[allow(clippy::too_many_arguments)]
fn remote_reads(
    acc: &Acc,
    part: &str,
    (ptx, reg): (&str, &str),
    slot: &ClusterSlot<'_>,
    rank: &str,
    ind: &str,
    unit: &str,
    nl: &str,
    names: &mut BTreeSet<String>,
) -> String {
    let i2 = format!("{ind}{unit}");
    let ty = acc.ty.as_deref().unwrap_or("");
    let at = fresh(&format!("{}_at", acc.name), names);
    let remote = fresh(&format!("{}_remote", acc.name), names);
    let other = fresh(&format!("{}_other", acc.name), names);
    let blocks = slot.blocks;
    let mut code = format!(
        "{nl}{ind}const unsigned {at} = (unsigned)__cvta_generic_to_shared(&{part}[{}]);",
        slot.at
    );
    code.push_str(&format!(
        "{nl}{ind}for (unsigned {rank} = 0; {rank} < {blocks}; ++{rank}) {{{nl}{i2}{ty} {other};{nl}{i2}unsigned {remote};"
    ));
    code.push_str(&format!(
        "{nl}{i2}asm volatile(\"mapa.shared::cluster.u32 %0, %1, %2;\" : \"=r\"({remote}) : \"r\"({at}), \"r\"({rank}));"
    ));
    code.push_str(&format!(
        "{nl}{i2}asm volatile(\"ld.shared::cluster.{ptx} %0, [%1];\" : \"={reg}\"({other}) : \"r\"({remote}) : \"memory\");"
    ));
    code.push_str(&format!(
        "{nl}{i2}if ({rank} == 0) {} = {other};{nl}{i2}else {}",
        acc.name,
        combine_plain(acc, &other)
    ));
    code.push_str(&format!("{nl}{ind}}}"));
    code
}

/// The PTX type and asm constraint of a shared-memory read of a C type, for the types a
/// carried value has in practice.
fn ptx_type(ty: &str) -> Option<(&'static str, &'static str)> {
    let t: Vec<&str> = ty.split_whitespace().filter(|w| *w != "const").collect();
    Some(match t.join(" ").as_str() {
        "float" => ("f32", "f"),
        "double" => ("f64", "d"),
        "int" | "unsigned" | "unsigned int" | "int32_t" | "uint32_t" => ("b32", "r"),
        "long long" | "unsigned long long" | "int64_t" | "uint64_t" | "size_t" | "long" => {
            ("b64", "l")
        }
        _ => return None,
    })
}
