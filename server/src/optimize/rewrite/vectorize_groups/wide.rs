//! Several groups per thread: thread `i` takes groups `V * i` .. `V * i + V - 1`, each
//! buffer's V groups as one `V * k`-wide access (two float pairs as a `float4`, four
//! half pairs as 8 halves in a `uint4`), the body once per group on its lanes with the
//! index read as that group's, and the grid's `cdiv` divided by V. A thread whose last
//! group is past the bound, or whose bases are not aligned to the wider access, runs its
//! V groups as written in a loop.

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::super::elementwise::{bound_text, is_block_yz, thread_bound, Elementwise, ThreadBound};
use super::super::tree::{fresh, line_indent, newline, reindent, render, text, walk};
use super::super::vectorize::{element_bytes, Lanes};
use super::Group;
use crate::syntax::ByteRange;

/// The group counts per thread worth offering: each V > 1 (a power of two) whose
/// widest group times V is at most 16 bytes and that every buffer can move as one
/// access, widest first.
pub(super) fn counts(groups: &[Group<'_>]) -> Vec<usize> {
    let widest = groups
        .iter()
        .map(|g| element_bytes(&g.pointee).unwrap_or(16) * g.k)
        .max()
        .unwrap_or(16);
    let mut out: Vec<usize> = [8, 4, 2]
        .into_iter()
        .filter(|v| widest * v <= 16)
        .filter(|v| {
            groups
                .iter()
                .all(|g| Lanes::of(&g.pointee, g.k * v).is_some())
        })
        .collect();
    out.truncate(2);
    out
}

/// Why the body cannot run for several groups in one thread, if it cannot: it reads
/// what names the thread (`threadIdx.x`, `blockIdx.x`, an alias of them) or the grid
/// (`gridDim`, which V divides), or calls a barrier or warp collective.
pub(super) fn thread_bound_body(src: &str, shape: &Elementwise<'_>) -> Option<String> {
    let mut why = None;
    for s in &shape.body {
        walk(*s, &mut |n| {
            let t = text(src, n);
            let bound = match thread_bound(src, n) {
                Some(ThreadBound::Collective(f)) => Some(format!("calls `{f}`")),
                Some(ThreadBound::Index("blockDim")) => None,
                Some(ThreadBound::Index(_)) if !is_block_yz(src, n) => Some(format!("reads `{t}`")),
                _ if n.kind() == "identifier"
                    && shape
                        .thread_aliases
                        .get(t)
                        .is_some_and(|f| f != "blockDim.x") =>
                {
                    Some(format!("reads `{t}` (`{}`)", shape.thread_aliases[t]))
                }
                _ => None,
            };
            if why.is_none() {
                why = bound;
            }
            why.is_none()
        });
    }
    why.map(|w| format!("the body {w}, which would no longer be each group's own"))
}

/// The replacement of the bounds check and everything after it (`shape.guard` to
/// `shape.end`) for V groups per thread.
pub(super) fn emit(
    src: &str,
    shape: &Elementwise<'_>,
    groups: &[Group<'_>],
    v: usize,
    names: &mut BTreeSet<String>,
) -> Result<String, String> {
    let nl = newline(src);
    let (i, ind) = (&shape.index, &shape.indent);
    let in1 = format!("{ind}{}", shape.unit);
    let in2 = format!("{in1}{}", shape.unit);
    let bound = bound_text(src, shape.bound);
    let span = shape.body_span();
    let from = line_indent(src, span.start).to_string();
    let lanes: Vec<Lanes> = groups
        .iter()
        .map(|g| Lanes::of(&g.pointee, g.k * v).ok_or("no vector type"))
        .collect::<Result<_, _>>()?;
    let regs: Vec<String> = groups
        .iter()
        .map(|g| fresh(&format!("{}{}", g.buffer, g.k * v), names))
        .collect();
    let mut cond = vec![format!("{v} * {i} + {} < {bound}", v - 1)];
    for g in groups {
        let bytes = element_bytes(&g.pointee).unwrap_or(1) * g.k * v;
        cond.push(format!(
            "reinterpret_cast<unsigned long long>({}) % {bytes} == 0",
            g.buffer
        ));
    }
    let mut o = format!("if ({}) {{{nl}", cond.join(&format!(" &&{nl}{ind}    ")));
    for ((g, l), reg) in groups.iter().zip(&lanes).zip(&regs) {
        for line in l
            .declare(reg, &g.buffer, i, g.load, g.written, g.k * v)
            .lines()
        {
            o.push_str(&format!("{in1}{line}{nl}"));
        }
    }
    let grouped: Vec<ByteRange> = groups
        .iter()
        .flat_map(|g| g.accesses.iter().map(|(n, _)| n.byte_range()))
        .collect();
    let uses = index_uses(src, &shape.body, i);
    let scoped = shape.body.iter().any(|n| n.kind() == "declaration");
    for u in 0..v {
        let mut reps: Vec<(ByteRange, String)> = Vec::new();
        for ((g, l), reg) in groups.iter().zip(&lanes).zip(&regs) {
            reps.extend(
                g.accesses
                    .iter()
                    .map(|(n, c)| (n.byte_range(), l.lane(reg, u * g.k + c))),
            );
        }
        let own = match u {
            0 => format!("({v} * {i})"),
            _ => format!("({v} * {i} + {u})"),
        };
        reps.extend(
            uses.iter()
                .filter(|r| !grouped.iter().any(|a| a.start <= r.start && r.end <= a.end))
                .map(|r| (r.clone(), own.clone())),
        );
        let body = render(src, &span, &reps).map_err(|e| e.to_string())?;
        o.push_str(&match scoped {
            true => format!(
                "{in1}{{{nl}{in2}{}{nl}{in1}}}{nl}",
                reindent(&body, &from, &in2)
            ),
            false => format!("{in1}{}{nl}", reindent(&body, &from, &in1)),
        });
    }
    for ((g, l), reg) in groups.iter().zip(&lanes).zip(&regs) {
        if g.written {
            o.push_str(&format!("{in1}{}{nl}", l.store(reg, &g.buffer, i)));
        }
    }
    let t = ["j", "k", "e"]
        .iter()
        .find(|n| !names.contains(**n))
        .map_or_else(|| fresh(&format!("{i}_group"), names), |n| n.to_string());
    let reps: Vec<(ByteRange, String)> = uses.iter().map(|r| (r.clone(), t.clone())).collect();
    let body = render(src, &span, &reps).map_err(|e| e.to_string())?;
    o.push_str(&format!(
        "{ind}}} else {{{nl}{in1}for ({} {t} = {v} * {i}; {t} < {bound}; ++{t}) {{{nl}{in2}{}{nl}{in1}}}{nl}{ind}}}",
        shape.index_ty,
        reindent(&body, &from, &in2)
    ));
    Ok(o)
}

/// Every read of the index `i` in the guarded body.
fn index_uses(src: &str, body: &[Node<'_>], i: &str) -> Vec<ByteRange> {
    let mut out = Vec::new();
    for s in body {
        walk(*s, &mut |n| {
            if n.kind() == "identifier" && text(src, n) == i {
                out.push(n.byte_range());
            }
            true
        });
    }
    out
}
