//! The shared-memory combine that ends a carrying loop in both team rewrites: each
//! thread (or one per warp) stores its partials of every carried value in `__shared__`
//! arrays, a barrier, then every thread that shares the result combines the partials in
//! slot order with the author's own update (an arg-max pick as one group, see
//! [`super::arg`]), and a last barrier. `cooperative_rows` keeps one partial per warp of
//! a block per row; `split_loop` one per thread along y of each output. Only the slots
//! differ ([`Slots`]).

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
