//! `vectorize_rows`: vector accesses for kernels whose lane index `c` walks the columns
//! of rows: `int c = blockIdx.x * blockDim.x + threadIdx.x;` with the row from
//! `blockIdx.y`, `threadIdx.y`, a batch index or anything else the lane does not move
//! (as `remap_lanes` leaves a 2-D draft, or as authors write it). Each thread handles W
//! consecutive columns: every buffer the region reaches at the lane's own column
//! (`x[r * ld + c]`, `bias[c]`, `yr[c]` through a row pointer, inside an inlined helper)
//! is loaded and stored with one W-wide access (`float4`, `float2`, `__half2`, 8 halves
//! as a `uint4`, `char4`, four `int64_t` as two `uint4`, ... as `vectorize` types them), a uniform read (`mean[r]`) is
//! read once, other reads of buffers nothing writes stay per column. The grid's x count
//! is divided by W (`cdiv(cols, 16)` -> `cdiv(cols, 4 * 16)`).
//!
//! Whether the vector path may run is decided per thread at run time: the bounds check
//! passed by the thread's last column, and every vector address aligned to its width. A
//! row length not divisible by W (cols = 77, 130, 999) misaligns rows, so those threads
//! (or a tail past the end) run the scalar path: the original statements once per
//! column, in a loop. An index split the columns share (a flat output index
//! `ox = i % OW; oy = (i / OW) % OH`) is written once per thread's quotient,
//! `(W * i) / D` and `(W * i) % D + k` (see [`super::lane_split`]), and `D % W == 0`
//! joins the vector condition for each divisor a column's copy still reads, so sizes W
//! does not divide (OW = 23) take the scalar path. A division by a local of the checked
//! body, or by a literal W does not divide (`i / 3`), stays as written.
//!
//! A trailing loop whose trips are the same for every column (over planes, channels or a
//! batch: `for (int p = 0; p < P; ++p) y[(p * OH + oy) * OW + ox] = ...;`) repeats the
//! columns' work (`vectorize_rows/repeat.rs`): its body counts as element statements, its variable as a
//! value the lane does not move, and both paths run inside its header, so each trip
//! stores one vector per written buffer. Such a loop that carries a local from trip to
//! trip, breaks, or whose header reads the lane or the region's locals is refused.
//!
//! **Refuses** (with the access or statement): no lane index, a read of
//! `threadIdx.x`/`blockIdx.x` elsewhere, no bounds check on the lane or one that is not
//! an upper bound, a write at an index that is not the lane's own column (uniform or
//! computed), a written buffer reached at a second offset, atomics, barriers, warp
//! collectives, shared memory, another `return`, a pointer that escapes, a grid with no
//! `cdiv` along x, and a kernel `vectorize` handles as 1-D. Param `widths` as `vectorize`.

mod accesses;
mod repeat;
mod shape;

use std::collections::BTreeSet;

use tree_sitter::Node;

use self::accesses::{Group, Plan};
use self::shape::{function_at, inline_helpers, match_rows, Form, Rows};
use super::access::index_of;
use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::edits::Edits;
use super::elementwise::{inspect_body, match_elementwise, pointer_params};
use super::lane_split::{fixed_integers, Splits};
use super::spec_expr::{components, strip_parens, widen, words};
use super::tree::{fresh, kernel_function, line_indent, newline, reindent, render, text, walk};
use super::vectorize::{element_bytes, widths, Lanes};
use super::RewriteContext;
use crate::document::Document;
use crate::optimize::edit::spec_assignment;
use crate::syntax::{ByteRange, Lang};

const ID: &str = "vectorize_rows";

pub fn vectorize_rows(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, ID)?;
    current_plan(cx)?;
    widths(cx, None)?;
    let k = &cx.kernel.name;
    let na =
        |why: String| not_applicable(format!("`{k}` cannot be vectorized along its rows: {why}"));
    let func =
        kernel_function(cx).ok_or_else(|| na("its definition is not in the syntax tree".into()))?;
    if is_one_d(cx, func) {
        return Err(not_applicable(format!(
            "`{k}` is a 1-D elementwise kernel; `vectorize` rewrites it"
        )));
    }
    let body = func
        .child_by_field_name("body")
        .ok_or_else(|| na("it has no body".into()))?;
    let work = inline_helpers(cx.text, &cx.kernel.name_range, body.start_byte());
    let doc = Document::new(Lang::Cuda, 0, &work);
    let tree = doc.tree().ok_or_else(|| na("it does not parse".into()))?;
    let func = function_at(tree.root_node(), &cx.kernel.name_range)
        .ok_or_else(|| na("its definition is not in the syntax tree".into()))?;
    let body = func
        .child_by_field_name("body")
        .ok_or_else(|| na("it has no body".into()))?;
    let rows = match_rows(&work, func).map_err(na)?;
    let fixed = fixed_integers(&work, func, rows.span().start, &rows.lane);
    let plan = accesses::plan(cx, &work, body, &rows).map_err(na)?;
    if plan.groups.is_empty() {
        return Err(na(format!(
            "no access moves one element per `{}`",
            rows.lane
        )));
    }
    let grid = spec_assignment(cx.kernel, "grid")
        .ok_or_else(|| na("the spec has no `grid = ...`".into()))?;
    let gx = components(&grid.text)
        .into_iter()
        .next()
        .ok_or_else(|| na("`grid` is empty".into()))?;
    let grid_at = grid.range.start + gx.start..grid.range.start + gx.end;
    let narrowest = plan
        .groups
        .iter()
        .filter_map(|g| element_bytes(&g.pointee))
        .min();
    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    for w in widths(cx, narrowest)? {
        let Some(new_gx) = widen(&grid.text[gx.clone()], w) else {
            return Err(na(format!(
                "grid x `{}` has no `cdiv(n, B)` to divide by the vector width",
                &grid.text[gx.clone()]
            )));
        };
        match draft(&work, (&rows, &plan, &fixed), w, (grid_at.clone(), new_gx)) {
            Ok(d) => drafts.push(d),
            Err(why) => dropped.push(why),
        }
    }
    finish(cx, drafts, dropped)
}

/// The 1-D elementwise shape `vectorize` rewrites (every access `p[i]`).
fn is_one_d(cx: &RewriteContext<'_>, func: Node<'_>) -> bool {
    let Ok(shape) = match_elementwise(cx.text, func) else {
        return false;
    };
    inspect_body(cx.text, &shape, &pointer_params(cx), true).is_ok()
}

/// One width's candidate, or why the width does not fit. `fixed`: the integer names a
/// condition before the region reads as the region does.
fn draft(
    work: &str,
    (rows, plan, fixed): (&Rows<'_>, &Plan<'_>, &BTreeSet<String>),
    w: usize,
    grid: (ByteRange, String),
) -> Result<Draft, String> {
    let mut lanes = Vec::new();
    for g in &plan.groups {
        let l = Lanes::of_wide(&g.pointee, w).ok_or_else(|| {
            format!(
                "VEC={w}: `{}` is `{}*`, which has no {w}-wide vector type and no 8- or 16-byte packing",
                g.buffer, g.pointee
            )
        })?;
        lanes.push(l);
    }
    let mut shown: Vec<String> = Vec::new();
    for l in &lanes {
        let s = l.shown(w);
        if !shown.contains(&s) {
            shown.push(s);
        }
    }
    let label = format!("VEC={w} along rows ({})", shown.join(", "));
    let mut names: BTreeSet<String> = words(work).into_iter().map(str::to_string).collect();
    let covered = plan.covered();
    let stmts = rows.element_statements();
    let code = Emit {
        src: work,
        rows,
        plan,
        lanes: &lanes,
        w,
        splits: Splits::find(work, &stmts, &rows.lane, w, fixed, &covered),
    }
    .code(&mut names)
    .map_err(|e| format!("{label}: {e}"))?;
    let text = Edits::from_pairs([(rows.span(), code), grid])
        .apply(work)
        .map_err(|e| format!("{label}: {e}"))?;
    Ok(Draft { label, text })
}

/// The text of an expression with region locals expanded to their definitions (valid
/// where the region's locals are not yet declared) and evaluated at lane index 0: a
/// lane index that is a summand is dropped with its `+`, any other use becomes `0`.
/// For an address `rest + c` this is `rest`, the same for every column of a row.
fn at_lane_zero(src: &str, n: Node<'_>, plan: &Plan<'_>, x: &str, depth: usize) -> Text {
    let mut reps = Vec::new();
    let mut err = None;
    walk(n, &mut |m| {
        if m.kind() != "identifier" {
            return true;
        }
        let t = text(src, m);
        if t == x {
            reps.push(drop_summand(src, m));
        } else if let Some(def) = plan.defs.get(t).filter(|_| depth < 16) {
            match at_lane_zero(src, *def, plan, x, depth + 1) {
                Ok(e) => reps.push((m.byte_range(), format!("({e})"))),
                Err(e) => err = Some(e),
            }
        }
        true
    });
    match err {
        Some(e) => Err(e),
        None => render(src, &n.byte_range(), &reps).map_err(|e| e.to_string()),
    }
}

/// The replacement that removes the lane index `m`: with its `+` when it is a summand
/// of `a + c` or `c + a`, else by `0`.
fn drop_summand(src: &str, m: Node<'_>) -> (ByteRange, String) {
    let zero = (m.byte_range(), "0".to_string());
    // `(size_t)c` and `(c)` are dropped whole.
    let mut m = m;
    while let Some(p) = m
        .parent()
        .filter(|p| matches!(p.kind(), "parenthesized_expression" | "cast_expression"))
    {
        m = p;
    }
    let Some(p) = m.parent().filter(|p| p.kind() == "binary_expression") else {
        return zero;
    };
    if p.child_by_field_name("operator").map(|o| text(src, o)) != Some("+") {
        return zero;
    }
    match (
        p.child_by_field_name("left"),
        p.child_by_field_name("right"),
    ) {
        (Some(l), Some(r)) if l.id() == m.id() => (m.start_byte()..r.start_byte(), String::new()),
        (Some(l), Some(r)) if r.id() == m.id() => (l.end_byte()..m.end_byte(), String::new()),
        _ => zero,
    }
}

struct Emit<'a, 't> {
    src: &'a str,
    rows: &'a Rows<'t>,
    plan: &'a Plan<'t>,
    lanes: &'a [Lanes],
    w: usize,
    /// The element statements' index splits that the lanes share.
    splits: Splits,
}

type Text = Result<String, String>;

impl<'t> Emit<'_, 't> {
    fn at_lane_zero(&self, n: Node<'_>) -> Text {
        at_lane_zero(self.src, n, self.plan, &self.rows.lane, 0)
    }

    /// Where a group's row starts: its address at lane index 0, so that the thread's
    /// vector is `reinterpret_cast<const float4*>(base)[c]`. The same for every column
    /// of a row, so is its alignment.
    fn base(&self, g: &Group<'_>) -> Text {
        let n = g.nodes[0];
        match (n.child_by_field_name("argument"), index_of(n)) {
            (Some(base), Some(ix)) if n.kind() == "subscript_expression" => {
                let b = self.at_lane_zero(base)?;
                if g.lane_only {
                    return Ok(b);
                }
                let i = self.at_lane_zero(ix)?;
                Ok(match strip_parens(&i) {
                    "0" => b,
                    i => format!("{b} + ({i})"),
                })
            }
            (Some(ptr), _) => self.at_lane_zero(ptr),
            _ => Err(format!("`{}` has no address", text(self.src, n))),
        }
    }

    /// The vector path's condition, the same for every thread of a block on one row:
    /// the block's last column passes the bounds check (so every column of every thread
    /// does), every row base is aligned to its vector's width, and W divides the divisor
    /// of every index split the columns' copies share.
    fn fast(&self, regs: &[String], held: &[String]) -> Result<Vec<String>, String> {
        let (x, w) = (&self.rows.lane, self.w);
        let last = format!("({w} * ({x} - threadIdx.x + blockDim.x) - 1)");
        let reps = lane_uses(self.src, &[self.rows.cond], x, &last, &[]);
        let cond =
            render(self.src, &self.rows.cond.byte_range(), &reps).map_err(|e| e.to_string())?;
        let mut out = vec![match self.rows.form {
            Form::Block => cond,
            Form::EarlyReturn => format!("!({cond})"),
        }];
        for (g, l) in self.plan.groups.iter().zip(self.lanes) {
            let bytes = element_bytes(&g.pointee).unwrap_or(1) * w / l.pieces();
            out.push(format!(
                "reinterpret_cast<unsigned long long>({}) % {bytes} == 0",
                self.base(g)?
            ));
        }
        let (kept, _) = self.copy(1, regs, held);
        let used = |r: &ByteRange| {
            kept.iter()
                .any(|s| s.start_byte() <= r.start && r.end <= s.end_byte())
        };
        out.extend(self.splits.conditions(&used));
        Ok(out)
    }

    /// The region's replacement: the vector and scalar paths, inside the repeated loop's
    /// header when there is one.
    fn code(&self, names: &mut BTreeSet<String>) -> Text {
        let ind = &self.rows.indent;
        let Some((head, _)) = self.rows.repeat_header(self.src) else {
            return self.paths(names, ind);
        };
        let nl = newline(self.src);
        let inner = format!("{ind}{}", self.rows.unit);
        let paths = self.paths(names, &inner)?;
        Ok(format!("{head} {{{nl}{inner}{paths}{nl}{ind}}}"))
    }

    /// `if (<vector path may run>) { ... } else { <scalar path> }` at indentation `ind`.
    fn paths(&self, names: &mut BTreeSet<String>, ind: &str) -> Text {
        let nl = newline(self.src);
        let unit = &self.rows.unit;
        let in1 = format!("{ind}{unit}");
        let w = self.w;
        let mut fresh_each =
            |bases: Vec<String>| -> Vec<String> { bases.iter().map(|b| fresh(b, names)).collect() };
        let regs = fresh_each(
            self.plan
                .groups
                .iter()
                .map(|g| format!("{}{w}", g.buffer))
                .collect(),
        );
        let held = fresh_each(
            self.plan
                .hoists
                .iter()
                .map(|h| format!("{}_row", h.buffer))
                .collect(),
        );
        let fast = self.fast(&regs, &held)?.join(&format!(" &&{nl}{ind}    "));
        let mut o = format!("if ({fast}) {{{nl}");
        let x = &self.rows.lane;
        for (h, name) in self.plan.hoists.iter().zip(&held) {
            let v = self.at_lane_zero(h.node)?;
            o.push_str(&format!("{in1}const {} {name} = {v};{nl}", h.pointee));
        }
        for ((g, l), reg) in self.plan.groups.iter().zip(self.lanes).zip(&regs) {
            let base = self.base(g)?;
            for line in l.declare(reg, &base, x, g.load, g.written, w).lines() {
                o.push_str(&format!("{in1}{line}{nl}"));
            }
        }
        for k in 0..w {
            o.push_str(&self.lane_copy(k, &regs, &held, &in1)?);
        }
        for ((g, l), reg) in self.plan.groups.iter().zip(self.lanes).zip(&regs) {
            if g.written {
                let base = self.base(g)?;
                for line in l.store(reg, &base, x).lines() {
                    o.push_str(&format!("{in1}{line}{nl}"));
                }
            }
        }
        o.push_str(&format!("{ind}}} else {{{nl}"));
        o.push_str(&self.scalar(names, &in1)?);
        o.push_str(&format!("{ind}}}"));
        Ok(o)
    }

    /// Column `k`'s copy of the element statements: vector accesses read and write lane
    /// `k` of their register, uniform reads their held value, the lane index is the
    /// column's.
    fn lane_copy(&self, k: usize, regs: &[String], held: &[String], in1: &str) -> Text {
        let nl = newline(self.src);
        let stmts = self.rows.element_statements();
        let scoped = stmts.iter().any(|s| s.kind() == "declaration");
        let to = match scoped {
            true => format!("{in1}{}", self.rows.unit),
            false => in1.to_string(),
        };
        let (kept, all) = self.copy(k, regs, held);
        let body = self.pieces(&kept, &all, &to)?;
        Ok(match scoped {
            true => format!("{in1}{{{nl}{body}{in1}}}{nl}"),
            false => body,
        })
    }

    /// Column `k`'s statements (those it still reads) and their replacements.
    fn copy(
        &self,
        k: usize,
        regs: &[String],
        held: &[String],
    ) -> (Vec<Node<'t>>, Vec<(ByteRange, String)>) {
        let mut reps: Vec<(ByteRange, String)> = Vec::new();
        for ((g, l), reg) in self.plan.groups.iter().zip(self.lanes).zip(regs) {
            reps.extend(g.nodes.iter().map(|n| (n.byte_range(), l.lane(reg, k))));
        }
        for (h, name) in self.plan.hoists.iter().zip(held) {
            reps.push((h.node.byte_range(), name.clone()));
        }
        let inside = |r: &ByteRange, o: &ByteRange| o != r && o.start <= r.start && r.end <= o.end;
        let mut all: Vec<(ByteRange, String)> = reps
            .iter()
            .filter(|(r, _)| !reps.iter().any(|(o, _)| inside(r, o)))
            .cloned()
            .collect();
        let covered: Vec<ByteRange> = all.iter().map(|(r, _)| r.clone()).collect();
        let stmts = self.rows.element_statements();
        all.extend(self.splits.lane(self.src, &stmts, k, &covered));
        (live(self.src, &stmts, &all), all)
    }

    /// The statements rendered with `reps`, one per line at indentation `to`.
    fn pieces(&self, stmts: &[Node<'_>], reps: &[(ByteRange, String)], to: &str) -> Text {
        let nl = newline(self.src);
        let mut o = String::new();
        for s in stmts {
            let r = s.byte_range();
            let mine: Vec<(ByteRange, String)> = reps
                .iter()
                .filter(|(q, _)| r.start <= q.start && q.end <= r.end)
                .cloned()
                .collect();
            let t = render(self.src, &r, &mine).map_err(|e| e.to_string())?;
            let from = line_indent(self.src, r.start);
            o.push_str(&format!("{to}{}{nl}", reindent(&t, from, to)));
        }
        Ok(o)
    }

    /// The scalar path: the region as written, once per column, the check's `return`
    /// now ending that column only. The block's threads on this row take the columns
    /// the block covers in turn, `blockDim.x` apart, so the path stays coalesced (it
    /// runs for a whole row of the block: a misaligned row, or the row's last block).
    /// A counted, unrolled loop: its W columns' loads may be in flight together.
    fn scalar(&self, names: &mut BTreeSet<String>, in1: &str) -> Text {
        let nl = newline(self.src);
        let (x, w, ty) = (&self.rows.lane, self.w, &self.rows.lane_ty);
        let mut pick = |choices: [&str; 3], base: &str| {
            let n = choices
                .iter()
                .find(|n| !names.contains(**n))
                .map_or_else(|| fresh(&format!("{x}_{base}"), names), |n| n.to_string());
            names.insert(n.clone());
            n
        };
        let j = pick(["j", "k", "e"], "col");
        let k = pick(["k", "q", "s"], "part");
        let mut reps = lane_uses(self.src, &self.rows.region, x, &j, &[]);
        walk(self.rows.guard_node(), &mut |n| {
            if n.kind() == "return_statement" {
                reps.push((n.byte_range(), "continue;".into()));
            }
            true
        });
        // The repeated loop runs around the paths: here its body is a block.
        reps.extend(
            self.rows
                .repeat_header(self.src)
                .map(|(_, r)| (r, String::new())),
        );
        let to = format!("{in1}{}", self.rows.unit);
        let body = self.pieces(&self.rows.region, &reps, &to)?;
        let col = format!(
            "{to}const {ty} {j} = ({ty})({w} * ({x} - threadIdx.x) + {k} * blockDim.x + threadIdx.x);{nl}"
        );
        Ok(format!(
            "{in1}#pragma unroll{nl}{in1}for (int {k} = 0; {k} < {w}; ++{k}) {{{nl}{col}{body}{in1}}}{nl}"
        ))
    }
}

/// The statements less the declarations a column's copy no longer reads: a local whose
/// every use was an access now in a vector register (`int idx = row * ld + c;`), when
/// its initializer calls and assigns nothing. Names are read in the copy as rendered.
fn live<'t>(src: &str, stmts: &[Node<'t>], reps: &[(ByteRange, String)]) -> Vec<Node<'t>> {
    let rendered: Vec<String> = stmts
        .iter()
        .map(|s| {
            let r = s.byte_range();
            let mine: Vec<(ByteRange, String)> = reps
                .iter()
                .filter(|(q, _)| r.start <= q.start && q.end <= r.end)
                .cloned()
                .collect();
            render(src, &r, &mine).unwrap_or_default()
        })
        .collect();
    let mut keep = vec![true; stmts.len()];
    loop {
        let dead = (0..stmts.len()).find(|&i| {
            keep[i]
                && pure_declaration(src, stmts[i]).is_some_and(|name| {
                    !(0..stmts.len())
                        .any(|j| j != i && keep[j] && words(&rendered[j]).contains(name.as_str()))
                })
        });
        match dead {
            Some(i) => keep[i] = false,
            None => break,
        }
    }
    stmts
        .iter()
        .zip(keep)
        .filter_map(|(s, k)| k.then_some(*s))
        .collect()
}

/// The name a one-name declaration declares, when its initializer calls and assigns
/// nothing (dropping it changes nothing but the name).
fn pure_declaration(src: &str, s: Node<'_>) -> Option<String> {
    if s.kind() != "declaration" {
        return None;
    }
    let mut c = s.walk();
    let ds: Vec<Node> = s.children_by_field_name("declarator", &mut c).collect();
    let [d] = ds.as_slice() else { return None };
    let name = d
        .child_by_field_name("declarator")
        .filter(|n| n.kind() == "identifier")?;
    let mut effects = false;
    walk(d.child_by_field_name("value")?, &mut |n| {
        effects |= matches!(
            n.kind(),
            "call_expression"
                | "assignment_expression"
                | "update_expression"
                | "subscript_expression"
                | "pointer_expression"
        );
        !effects
    });
    (!effects).then(|| text(src, name).to_string())
}

/// Replacements of each use of `x` under `roots` by `by`, outside the `covered` ranges.
fn lane_uses(
    src: &str,
    roots: &[Node<'_>],
    x: &str,
    by: &str,
    covered: &[ByteRange],
) -> Vec<(ByteRange, String)> {
    let mut out = Vec::new();
    for r in roots {
        walk(*r, &mut |n| {
            let q = n.byte_range();
            if covered.iter().any(|c| c.start <= q.start && q.end <= c.end) {
                return false;
            }
            if n.kind() == "identifier" && text(src, n) == x {
                out.push((q, by.to_string()));
            }
            true
        });
    }
    out
}

#[cfg(test)]
mod tests;
