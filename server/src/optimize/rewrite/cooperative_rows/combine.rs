//! The shared-memory combine that ends a carrying loop in both team rewrites: each
//! thread (or one per warp) stores its partials of every carried value in `__shared__`
//! arrays, a barrier, then every thread that shares the result combines the partials in
//! slot order with the author's own update (an arg-max pick as one group, see
//! [`super::arg`]), and a last barrier. `cooperative_rows` keeps one partial per warp of
//! a block per row; `split_loop` one per thread along y of each output. Only the slots
//! differ ([`Slots`]). When the work is also split over a thread-block cluster (sm_90),
//! [`cluster_combine`] follows: one thread per result stores its block's value, and every
//! thread reads the cluster's block values from their shared memory in rank order
//! ([`ClusterSlot`] says which thread and which element). When it is split over a grid
//! of blocks instead, [`grid_combine`] follows: the blocks leave their values in global
//! scratch arrays and the last block of each group folds them in block order
//! ([`GridSlot`]).

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

/// The combines across blocks carry one value per result: an arg pick (a value kept
/// beside an extreme) is refused, naming `across`.
fn one_value_each(accs: &[&Acc], across: &str) -> Result<(), String> {
    match accs.iter().find(|a| a.arg.is_some()) {
        Some(acc) if acc.arg.as_ref().is_some_and(|p| p.rescale.is_some()) => Err(format!(
            "`{}` rescales sums as it grows (a one-pass logsumexp); {across} combines one value per result",
            acc.name
        )),
        Some(acc) if acc.arg.as_ref().is_some_and(|p| p.moments.is_some()) => Err(format!(
            "`{}` is a running mean carried with its count (Welford); {across} combines one value per result",
            acc.name
        )),
        Some(acc) => Err(format!(
            "`{}` is picked with other values (an arg-max or arg-min); {across} combines one value per result",
            acc.name
        )),
        None => Ok(()),
    }
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
    one_value_each(accs, "the cluster")?;
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
    let at = fresh(&format!("{}_at", acc.name), names);
    let remote = fresh(&format!("{}_remote", acc.name), names);
    let other = fresh(&format!("{}_other", acc.name), names);
    let code = format!(
        "{nl}{ind}const unsigned {at} = (unsigned)__cvta_generic_to_shared(&{part}[{}]);",
        slot.at
    );
    let read = [
        format!("unsigned {remote};"),
        format!("asm volatile(\"mapa.shared::cluster.u32 %0, %1, %2;\" : \"=r\"({remote}) : \"r\"({at}), \"r\"({rank}));"),
        format!("asm volatile(\"ld.shared::cluster.{ptx} %0, [%1];\" : \"={reg}\"({other}) : \"r\"({remote}) : \"memory\");"),
    ];
    let blocks = slot.blocks.to_string();
    code + &fold_in_order(acc, (rank, &blocks), &other, &read, ind, unit, nl)
}

/// The loop over blocks `0..count` (`rank` counting) that folds each block's value of
/// `acc` into it in order, the first one replacing it: `read` are the statements that
/// set `other` to block `rank`'s value. The cluster and the grid combines differ in
/// those statements only.
fn fold_in_order(
    acc: &Acc,
    (rank, count): (&str, &str),
    other: &str,
    read: &[String],
    ind: &str,
    unit: &str,
    nl: &str,
) -> String {
    let i2 = format!("{ind}{unit}");
    let ty = acc.ty.as_deref().unwrap_or("");
    let mut code = format!(
        "{nl}{ind}for (unsigned {rank} = 0; {rank} < {count}; ++{rank}) {{{nl}{i2}{ty} {other};"
    );
    for r in read {
        code.push_str(&format!("{nl}{i2}{r}"));
    }
    code.push_str(&format!(
        "{nl}{i2}if ({rank} == 0) {} = {other};{nl}{i2}else {}",
        acc.name,
        combine_plain(acc, other)
    ));
    code.push_str(&format!("{nl}{ind}}}"));
    code
}

/// Where a block's combined values wait in global memory for the other blocks that
/// share its outputs (the grid combine).
pub(in crate::optimize::rewrite) struct GridSlot<'a> {
    /// The threads that store them (one per result: `threadIdx.y == 0`).
    pub store_if: &'a str,
    /// The element of block `b` (an expression in `b`) of the scratch arrays.
    pub at: &'a dyn Fn(&str) -> String,
    /// This block's number among those that share its outputs (`blockIdx.y`).
    pub me: &'a str,
    /// How many blocks share them (a name: `P`).
    pub blocks: &'a str,
    /// Which counter those blocks share (`blockIdx.x`).
    pub group: &'a str,
}

/// Partials per scratch array, and counters (written out, not `1 << 16`: a literal 16
/// would read as a hard-coded block size to `block_size`): a grid of `gridDim.x` groups
/// of blocks fits when `gridDim.x <= GROUPS` and its threads along x times the blocks
/// sharing each output are at most `SLOTS` (the caller checks both at run time).
pub(in crate::optimize::rewrite) const GRID_SLOTS: &str = "1 << 20";
pub(in crate::optimize::rewrite) const GRID_GROUPS: &str = "65536";

/// After [`shared_combine`], inside its block (indented `ind`): each block's value of
/// every accumulator goes to a function-scope `static __device__` scratch array (global
/// memory) at its slot, unless the block is alone (`blocks` is 1: the sizes did not fit the
/// arrays); after a `__threadfence` and a barrier, one thread takes a ticket
/// from its group's counter; every block but the last of its group leaves (the whole
/// block), and the last one resets the counter and folds the group's values in block
/// order (read past L1, `__ldcg`), as the cluster combine folds ranks: the same result
/// whichever block finishes last. Types: the C arithmetic ones; an arg pick is refused.
pub(in crate::optimize::rewrite) fn grid_combine(
    accs: &[&Acc],
    slot: &GridSlot<'_>,
    ind: &str,
    unit: &str,
    nl: &str,
    names: &mut BTreeSet<String>,
) -> Result<String, String> {
    use crate::optimize::rewrite::grid_total::{read_partial, ARITHMETIC};
    one_value_each(accs, "the grid")?;
    // Inside `if (blocks > 1)`: one block alone holds its values (and its counter and
    // slots may be past the arrays' ends).
    let i2 = format!("{ind}{unit}");
    let mut code = format!(
        "{nl}{ind}// the blocks that share these outputs leave their partials in global memory; the last to finish combines them in block order{nl}{ind}if ({} > 1) {{",
        slot.blocks
    );
    let mut arrays = Vec::new();
    for acc in accs {
        let ty = acc.ty.as_deref().unwrap_or("");
        if !ARITHMETIC.contains(&ty) {
            return Err(format!(
                "`{}` is a `{ty}`; the grid's partials are kept for arithmetic scalars only",
                acc.name
            ));
        }
        let part = fresh(&format!("{}_blocks", acc.name), names);
        code.push_str(&format!(
            "{nl}{i2}static __device__ {ty} {part}[{GRID_SLOTS}]; // global memory, one per output of each block"
        ));
        arrays.push((*acc, ty, part));
    }
    let done = fresh("blocks_done", names);
    let ticket = fresh("ticket", names);
    let b = fresh("b", names);
    let first = "threadIdx.x == 0 && threadIdx.y == 0";
    code.push_str(&format!(
        "{nl}{i2}static __device__ unsigned {done}[{GRID_GROUPS}]; // blocks done per group; the last one sets it back to 0{nl}{i2}__shared__ unsigned {ticket};"
    ));
    for (acc, _, part) in &arrays {
        code.push_str(&format!(
            "{nl}{i2}if ({}) {part}[{}] = {};",
            slot.store_if,
            (slot.at)(slot.me),
            acc.name
        ));
    }
    code.push_str(&format!(
        "{nl}{i2}__threadfence();{nl}{i2}__syncthreads();{nl}{i2}if ({first}) {ticket} = atomicAdd(&{done}[{g}], 1u);{nl}{i2}__syncthreads();{nl}{i2}if ({ticket} != {n} - 1) return;{nl}{i2}if ({first}) {done}[{g}] = 0;{nl}{i2}__threadfence();",
        g = slot.group,
        n = slot.blocks
    ));
    for (acc, ty, part) in arrays {
        let other = fresh(&format!("{}_other", acc.name), names);
        let read = [format!(
            "{other} = {};",
            read_partial(ty, &format!("{part}[{}]", (slot.at)(&b)))
        )];
        code.push_str(&fold_in_order(
            acc,
            (&b, slot.blocks),
            &other,
            &read,
            &i2,
            unit,
            nl,
        ));
    }
    code.push_str(&format!("{nl}{ind}}}"));
    Ok(code)
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
