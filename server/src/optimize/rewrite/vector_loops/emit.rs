//! The text of a vectorized loop: the uniform start and the whole vectors from it to the
//! bound computed once; where every group's first vector is aligned, a loop over vectors
//! with the author's lanes and step, one load per group read, W copies of the body in
//! element order (each in its own braces, with its own `v`), one store per group
//! written; then the author's loop, unchanged, from where the vectors stopped (from the
//! start when a base is misaligned).

use std::collections::BTreeSet;

use super::super::tree::{
    fresh, indent_unit, line_indent, named_children, newline, reindent, render, text,
};
use super::super::vectorize::{element_bytes, Lanes};
use super::super::RewriteContext;
use super::VecLoop;

/// The loop `l` rewritten for `w` elements a lane per access; Err when a group has no
/// `w`-wide vector.
pub(super) fn emit(
    cx: &RewriteContext<'_>,
    l: &VecLoop<'_>,
    w: usize,
    names: &mut BTreeSet<String>,
) -> Result<String, String> {
    let src = cx.text;
    let nl = newline(src);
    let ind = line_indent(src, l.node.start_byte()).to_string();
    let unit = indent_unit(src, l.body, &ind);
    let (i1, i2) = (format!("{ind}{unit}"), format!("{ind}{unit}{unit}"));
    let i3 = format!("{i2}{unit}");
    let mut lanes = Vec::new();
    for g in &l.groups {
        let lane = Lanes::of(&g.pointee, w)
            .ok_or_else(|| format!("`{}` (`{}`) has no {w}-wide vector", g.pointer, g.pointee))?;
        lanes.push(lane);
    }
    let regs: Vec<String> = l
        .groups
        .iter()
        .map(|g| fresh(&format!("{}{w}", g.pointer), names))
        .collect();
    let (ty, v, b) = (&l.ty, &l.var, &l.bound);
    let (base, vecs, rest, chunk) = (&l.names[0], &l.names[1], &l.names[2], &l.names[3]);
    let uniform = l.start.uniform.as_deref().unwrap_or("0");
    let mut o = format!("{{ // {}{nl}", l.comment(w, &lanes));
    o.push_str(&format!("{i1}const {ty} {base} = {uniform};{nl}"));
    o.push_str(&format!(
        "{i1}const {ty} {vecs} = {b} > {base} ? ({b} - {base}) / {w} : 0;{nl}"
    ));
    o.push_str(&format!("{i1}{ty} {rest} = {base};{nl}"));
    let aligned: Vec<String> = l
        .groups
        .iter()
        .map(|g| {
            let bytes = element_bytes(&g.pointee).unwrap_or(1) * w;
            format!(
                "reinterpret_cast<unsigned long long>({}) % {bytes} == 0",
                g.base
            )
        })
        .collect();
    o.push_str(&format!("{i1}if ({}) {{{nl}", aligned.join(" && ")));
    o.push_str(&format!(
        "{i2}for ({ty} {chunk} = {}; {chunk} < {vecs}; {chunk} += {}) {{{nl}",
        l.start.lanes, l.step
    ));
    for ((g, lane), reg) in l.groups.iter().zip(&lanes).zip(&regs) {
        let load = g.read || !g.always_written;
        for line in lane
            .declare(reg, &g.base, chunk, load, g.written, w)
            .lines()
        {
            o.push_str(&format!("{i3}{line}{nl}"));
        }
    }
    for k in 0..w {
        let at = (i3.as_str(), format!("{i3}{unit}"));
        o.push_str(&copy(cx, l, &lanes, &regs, (w, k), (at.0, &at.1), nl)?);
    }
    for ((g, lane), reg) in l.groups.iter().zip(&lanes).zip(&regs) {
        if g.written {
            for line in lane.store(reg, &g.base, chunk).lines() {
                o.push_str(&format!("{i3}{line}{nl}"));
            }
        }
    }
    o.push_str(&format!("{i2}}}{nl}"));
    o.push_str(&format!(
        "{i2}{rest} = {base} + {w} * {vecs};{nl}{i1}}}{nl}"
    ));
    o.push_str(&format!(
        "{i1}for ({ty} {v} = {rest} + {}; {v} < {b}; {v} += {}) {}{nl}{ind}}}",
        l.start.lanes,
        l.step,
        reindent(text(src, l.body), &ind, &i1)
    ));
    Ok(o)
}

/// Copy `k` of the body, in braces at `at`, its vectorized accesses on lane `k` and, when
/// it still reads the loop variable, that variable its element.
fn copy(
    cx: &RewriteContext<'_>,
    l: &VecLoop<'_>,
    lanes: &[Lanes],
    regs: &[String],
    (w, k): (usize, usize),
    (at, inner): (&str, &str),
    nl: &str,
) -> Result<String, String> {
    let src = cx.text;
    let body = l.body;
    let span = match body.kind() {
        "compound_statement" => body.start_byte() + 1..body.end_byte() - 1,
        _ => body.byte_range(),
    };
    let mut reps = Vec::new();
    for ((g, lane), reg) in l.groups.iter().zip(lanes).zip(regs) {
        for n in &g.nodes {
            reps.push((n.byte_range(), lane.lane(reg, k)));
        }
    }
    let piece = render(src, &span, &reps).map_err(|e| e.to_string())?;
    let from = named_children(body)
        .first()
        .filter(|_| body.kind() == "compound_statement")
        .map_or_else(
            || line_indent(src, body.start_byte()).to_string(),
            |c| line_indent(src, c.start_byte()).to_string(),
        );
    let stmts = format!("{inner}{}", reindent(piece.trim(), &from, inner));
    let (v, base, chunk, ty) = (&l.var, &l.names[0], &l.names[3], &l.ty);
    let plus = if k == 0 {
        String::new()
    } else {
        format!(" + {k}")
    };
    let own = if mentions(&piece, v) {
        format!("{inner}const {ty} {v} = {base} + {w} * {chunk}{plus};{nl}")
    } else {
        String::new()
    };
    Ok(format!("{at}{{{nl}{own}{stmts}{nl}{at}}}{nl}"))
}

/// Does `s` use the identifier `name`?
fn mentions(s: &str, name: &str) -> bool {
    s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|w| w == name)
}
