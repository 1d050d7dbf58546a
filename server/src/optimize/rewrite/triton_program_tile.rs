//! `triton_program_tile`: a Triton kernel whose `tl.arange` lanes walk a strided axis
//! while the program id walks the contiguous one (one program per column, its lanes a
//! row apart: every load touches a sector per lane), or whose many programs each load a
//! short loop-free tile (a row of 64 floats on 4 warps: the `narrow_programs` fact),
//! takes CB neighbouring program ids of one grid axis per program as a second tile
//! dimension: that `tl.program_id(d)` becomes the vector `tl.program_id(d) * CB +
//! tl.arange(0, CB)`, every value is broadcast to the 2-D tile its operands need (lanes
//! as `[:, None]`, the program's vector as `[None, :]`), reductions over the lanes keep
//! one result per column (`axis=0`), and every load and store is masked to the grid's
//! old extent. Strided lanes: neighbouring elements of a warp's load are now neighbours
//! in memory. Short tiles: each program moves CB times as much, with CB times fewer
//! program launches.
//!
//! **Matches** kernels with one of those two facts that read `tl.program_id(d)` once for
//! the first grid axis d whose extent is one kernel parameter (`grid = G`, `(G,)`, `(B,
//! G)`; reads of the other axes stay scalars; no `tl.num_programs`), whose values are
//! scalars, lane vectors or built from them with arithmetic, comparisons,
//! `tl.where`/`tl.maximum`/math calls, `tl.load`, and `tl.sum`/`tl.max`/`tl.min` over the
//! lanes; loops (`for`/`while`) with scalar bounds.
//!
//! **Refuses** 2-D tiles already (`[:, None]`), branches, other calls on program-dependent
//! values, a name that is a lane vector before its loop and a tile after, and a grid with
//! no axis that is one kernel parameter (`grid = B * S`: the kernel could not mask it).
//!
//! **Writes** the kernel with the shapes widened and that grid axis divided, `cdiv(G,
//! CB)`; one candidate per CB in param `columns` (default [8, 32]).

use std::collections::BTreeMap;

use tree_sitter::Node;

use super::check::{current_plan, finish, not_applicable, require_lang, set_spec_values, Draft, R};
use super::edits::{Edit, Edits};
use super::params::Params;
use super::spec_expr;
use super::tree::{code_names, fresh, kernel_function, text, walk};
use super::triton_loops::{code_children, splice, ELEMENTWISE};
use super::RewriteContext;
use crate::optimize::edit;
use crate::optimize::facts::triton_loops::{assignment, callee};
use crate::optimize::facts::{static_facts, Stride};
use crate::syntax::{Lang, ParamKind};

const ID: &str = "triton_program_tile";

/// A value's shape: bit 1 the lanes (`tl.arange`), bit 2 the program's columns.
type Shape = u8;
const S: Shape = 0;
const L: Shape = 1;
const C: Shape = 2;
const LC: Shape = 3;

const REDUCE: &[&str] = &["tl.sum", "tl.max", "tl.min"];

pub fn triton_program_tile(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Triton, ID)?;
    current_plan(cx)?;
    let cols = Params(cx.params).uints("columns", &[8, 32], 2..=256)?;
    let k = &cx.kernel.name;
    let na = |why: String| not_applicable(format!("`{k}` cannot take a tile of programs: {why}"));
    let body = kernel_function(cx)
        .and_then(|f| f.child_by_field_name("body"))
        .ok_or_else(|| na("the definition is not in the syntax tree".into()))?;
    super::triton_loops::shallow_enough(body, k)?;
    let facts = static_facts(Lang::Triton, cx.text, cx.tree, cx.model, cx.kernel);
    let strided = facts
        .accesses
        .iter()
        .any(|a| matches!(a.stride, Stride::Strided(_) | Stride::Symbolic));
    let transposed = strided && !facts.accesses.iter().any(|a| a.stride == Stride::Unit);
    if !transposed && !facts.narrow_programs() {
        return Err(na(
            "no global access is strided across the lanes (or one is already unit-stride), and its programs are not many short tiles".into(),
        ));
    }
    let grid = edit::spec_assignment(cx.kernel, "grid")
        .ok_or_else(|| na("the spec has no `grid = ...`".into()))?;
    let (axis, g) = tiled_axis(cx, &grid.text).map_err(na)?;
    let pid = the_program_id(cx.text, body, axis).map_err(na)?;
    let shapes = Shapes::infer(cx.text, body, pid).map_err(na)?;
    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    for cb in cols {
        let mut names = code_names(cx);
        let mask = fresh("in_grid", &mut names);
        let label = format!("{cb} programs' columns per program (2-D tile)");
        let w = Widen {
            src: cx.text,
            shapes: &shapes,
            pid,
            cb,
            mask: &mask,
        };
        match w.body(body, &g).and_then(|t| {
            set_spec_values(
                &t,
                cx.kernel,
                &[("grid".into(), grid_divided(&grid.text, axis, cb))],
            )
            .map_err(|e| e.to_string())
        }) {
            Ok(text) => drafts.push(Draft { label, text }),
            Err(e) => dropped.push(format!("{label}: {e}")),
        }
    }
    finish(cx, drafts, dropped)
}

/// The grid's components: `G` and `(G,)` are one, `(A, B)` two.
fn grid_components(grid: &str) -> Vec<&str> {
    spec_expr::components(grid)
        .into_iter()
        .map(|r| &grid[r])
        .filter(|c| !c.is_empty())
        .collect()
}

/// The program axis to tile and its grid extent: the first axis whose grid component is
/// one kernel parameter (the widened mask compares the program's columns with it).
fn tiled_axis(cx: &RewriteContext<'_>, grid: &str) -> Result<(usize, String), String> {
    let parts = grid_components(grid);
    let is_param = |g: &str| {
        cx.kernel
            .params
            .iter()
            .any(|p| p.name == g && matches!(p.kind, ParamKind::TritonArg { .. }))
    };
    parts
        .iter()
        .position(|g| is_param(g))
        .map(|d| (d, parts[d].to_string()))
        .ok_or_else(|| format!("no axis of `grid = {grid}` is one kernel parameter"))
}

/// `grid` with axis `axis` divided by `cb`: `G` becomes `cdiv(G, CB)`, `(A, G)`
/// becomes `(A, cdiv(G, CB))`.
fn grid_divided(grid: &str, axis: usize, cb: u64) -> String {
    let parts = grid_components(grid);
    let out: Vec<String> = parts
        .iter()
        .enumerate()
        .map(|(d, g)| match d == axis {
            true => format!("cdiv({g}, {cb})"),
            false => g.to_string(),
        })
        .collect();
    match out.as_slice() {
        [one] => one.clone(),
        _ => format!("({})", out.join(", ")),
    }
}

/// The one `tl.program_id(axis)` call of the body; reads of other axes stay scalars.
fn the_program_id<'t>(src: &str, body: Node<'t>, axis: usize) -> Result<Node<'t>, String> {
    let mut found = Vec::new();
    let mut bad = None;
    walk(body, &mut |n| {
        if n.kind() == "call" {
            let f = callee(src, n);
            if f == "tl.num_programs" {
                bad = Some("it reads `tl.num_programs`".to_string());
            }
            if f == "tl.program_id" {
                found.push(n);
            }
        }
        true
    });
    if let Some(b) = bad {
        return Err(b);
    }
    let axis_of = |call: &Node<'t>| {
        call.child_by_field_name("arguments")
            .and_then(|a| a.named_child(0))
            .map(|a| match a.kind() {
                "keyword_argument" => a.child_by_field_name("value").map_or("", |v| text(src, v)),
                _ => text(src, a),
            })
            .unwrap_or("")
            .to_string()
    };
    if let Some(other) = found
        .iter()
        .map(axis_of)
        .find(|a| !matches!(a.as_str(), "0" | "1" | "2"))
    {
        return Err(format!("it reads program axis `{other}`"));
    }
    let on_axis: Vec<Node<'t>> = found
        .into_iter()
        .filter(|c| axis_of(c) == axis.to_string())
        .collect();
    match on_axis.as_slice() {
        [call] => Ok(*call),
        _ => Err(format!(
            "it reads `tl.program_id({axis})` {} times, not once",
            on_axis.len()
        )),
    }
}

/// Each name's shape after the widening.
struct Shapes {
    names: BTreeMap<String, Shape>,
    /// Names whose first assignment has a smaller shape than the name (an accumulator
    /// started from a scalar or a lane vector): that assignment is broadcast.
    widened_inits: BTreeMap<usize, Shape>,
}

impl Shapes {
    fn infer(src: &str, body: Node<'_>, pid: Node<'_>) -> Result<Shapes, String> {
        let mut s = Shapes {
            names: BTreeMap::new(),
            widened_inits: BTreeMap::new(),
        };
        let mut stmts = Vec::new();
        walk(body, &mut |n| {
            if matches!(n.kind(), "if_statement" | "subscript" | "with_statement") {
                stmts.clear();
                stmts.push(n);
                return false;
            }
            if n.kind() == "expression_statement" {
                stmts.push(n);
            }
            true
        });
        if let Some(n) = stmts.iter().find(|n| n.kind() != "expression_statement") {
            return Err(format!(
                "it uses `{}`",
                text(src, *n).lines().next().unwrap_or("")
            ));
        }
        // Fixed point: a name's shape is the union of its assignments'.
        for _ in 0..8 {
            let mut changed = false;
            for st in &stmts {
                let Some((name, op, right)) = assignment(src, *st) else {
                    continue;
                };
                let mut sh = s.shape(src, right, pid)?;
                if op != "=" {
                    sh |= s.get(&name);
                }
                let old = s.get(&name);
                if sh | old != old {
                    s.names.insert(name, sh | old);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let mut first_seen = std::collections::BTreeSet::new();
        for st in &stmts {
            if let Some((name, _, right)) = assignment(src, *st) {
                let sh = s.shape(src, right, pid)?;
                let want = s.get(&name);
                if first_seen.insert(name.clone()) && sh != want {
                    if want == LC && sh != L {
                        return Err(format!(
                            "`{name}` starts as a scalar and becomes a 2-D tile"
                        ));
                    }
                    s.widened_inits.insert(st.id(), want);
                } else if sh | want != want {
                    return Err(format!("`{name}` changes shape"));
                }
            }
        }
        Ok(s)
    }

    fn get(&self, name: &str) -> Shape {
        self.names.get(name).copied().unwrap_or(S)
    }

    fn shape(&self, src: &str, n: Node<'_>, pid: Node<'_>) -> Result<Shape, String> {
        if n.id() == pid.id() {
            return Ok(C);
        }
        let kids = |n: Node<'_>| -> Result<Shape, String> {
            let mut out = S;
            let mut w = n.walk();
            for c in n.named_children(&mut w) {
                out |= self.shape(src, c, pid)?;
            }
            Ok(out)
        };
        match n.kind() {
            "identifier" => Ok(self.get(text(src, n))),
            "integer" | "float" | "true" | "false" | "none" | "string" | "comment" => Ok(S),
            "call" => {
                let f = callee(src, n);
                let args = n.child_by_field_name("arguments");
                match f.as_str() {
                    "tl.arange" => Ok(L),
                    // Another axis than the tiled one (that one is `pid`, above).
                    "tl.program_id" => Ok(S),
                    "tl.load" => {
                        let p = args
                            .and_then(|a| a.named_child(0))
                            .ok_or("a load without a pointer")?;
                        self.shape(src, p, pid)
                    }
                    r if REDUCE.contains(&r) => {
                        let x = args
                            .and_then(|a| a.named_child(0))
                            .ok_or("a reduction of nothing")?;
                        Ok(self.shape(src, x, pid)? & C)
                    }
                    e if ELEMENTWISE.contains(&e) || e == "float" || e == "int" => match args {
                        Some(a) => kids(a),
                        None => Ok(S),
                    },
                    "tl.zeros" | "tl.full" => {
                        let dims = args
                            .and_then(|a| a.named_child(0))
                            .map_or("", |d| text(src, d));
                        if dims.contains(',')
                            && !dims.trim_end_matches([')', ']']).trim_end().ends_with(',')
                        {
                            Err(format!("`{}` builds a 2-D tile", text(src, n)))
                        } else {
                            Ok(L)
                        }
                    }
                    _ => {
                        let sh = match args {
                            Some(a) => kids(a)?,
                            None => S,
                        };
                        let obj = n
                            .child_by_field_name("function")
                            .filter(|f| f.kind() == "attribute")
                            .and_then(|f| f.child_by_field_name("object"))
                            .filter(|o| !text(src, *o).starts_with("tl"));
                        let own = match obj {
                            Some(o) => self.shape(src, o, pid)?,
                            None => S,
                        };
                        if sh & C != 0 || (own & C != 0 && !f.ends_with(".to")) {
                            Err(format!("`{f}` is called on a value of the program"))
                        } else {
                            Ok(sh | own)
                        }
                    }
                }
            }
            "keyword_argument" => match n.child_by_field_name("value") {
                Some(v) => self.shape(src, v, pid),
                None => Ok(S),
            },
            "attribute" => Ok(S),
            _ => kids(n),
        }
    }
}

/// Emits the widened body.
struct Widen<'a> {
    src: &'a str,
    shapes: &'a Shapes,
    pid: Node<'a>,
    cb: u64,
    mask: &'a str,
}

impl Widen<'_> {
    fn shape(&self, n: Node<'_>) -> Shape {
        self.shapes.shape(self.src, n, self.pid).unwrap_or(LC)
    }

    /// `t` of shape `have` broadcast to `want`.
    fn expand(t: String, have: Shape, want: Shape, simple: bool) -> String {
        if want != LC || have == LC || have == S {
            return t;
        }
        let t = if simple { t } else { format!("({t})") };
        if have == L {
            format!("{t}[:, None]")
        } else {
            format!("{t}[None, :]")
        }
    }

    fn emit(&self, n: Node<'_>, want: Shape) -> String {
        let src = self.src;
        let have = self.shape(n);
        let simple = matches!(n.kind(), "identifier" | "call" | "parenthesized_expression");
        let t = if n.id() == self.pid.id() {
            format!(
                "({} * {} + tl.arange(0, {}))",
                text(src, n),
                self.cb,
                self.cb
            )
        } else {
            match n.kind() {
                "call" => self.call(n, have),
                "identifier" | "integer" | "float" | "string" | "attribute" => {
                    text(src, n).to_string()
                }
                _ => {
                    let base = n.start_byte();
                    let reps: Vec<_> = code_children(n)
                        .into_iter()
                        .map(|c| {
                            (
                                c.start_byte() - base..c.end_byte() - base,
                                self.emit(c, have),
                            )
                        })
                        .collect();
                    splice(text(src, n), reps)
                }
            }
        };
        Self::expand(t, have, want, simple || n.id() == self.pid.id())
    }

    fn call(&self, n: Node<'_>, have: Shape) -> String {
        let src = self.src;
        let f = callee(src, n);
        let fun = n
            .child_by_field_name("function")
            .map_or("", |f| text(src, f));
        let Some(args) = n.child_by_field_name("arguments") else {
            return text(src, n).to_string();
        };
        let list = code_children(args);
        match f.as_str() {
            "tl.load" | "tl.store" => self.memory(fun, &list, f == "tl.store"),
            r if REDUCE.contains(&r) => {
                let x = list[0];
                let xs = self.shape(x);
                let mut out = vec![self.emit(x, xs)];
                if xs == LC {
                    out.push("axis=0".into());
                    out.extend(
                        list[1..]
                            .iter()
                            .filter(|a| {
                                a.kind() == "keyword_argument"
                                    && a.child_by_field_name("name")
                                        .is_some_and(|k| text(src, k) != "axis")
                            })
                            .map(|a| text(src, *a).to_string()),
                    );
                } else {
                    out.extend(list[1..].iter().map(|a| text(src, *a).to_string()));
                }
                format!("{fun}({})", out.join(", "))
            }
            _ => {
                let out: Vec<String> = list.iter().map(|a| self.emit(*a, have)).collect();
                let fun_node = n.child_by_field_name("function").expect("a callee");
                let head = match fun_node.kind() {
                    "attribute" => fun_node
                        .child_by_field_name("object")
                        .filter(|o| !text(src, *o).starts_with("tl"))
                        .map_or(fun.to_string(), |o| {
                            let obj = self.emit(o, self.shape(o));
                            splice(
                                fun,
                                vec![(
                                    o.start_byte() - fun_node.start_byte()
                                        ..o.end_byte() - fun_node.start_byte(),
                                    obj,
                                )],
                            )
                        }),
                    _ => fun.to_string(),
                };
                format!("{head}({})", out.join(", "))
            }
        }
    }

    /// A load or store with the columns past the grid masked off.
    fn memory(&self, fun: &str, list: &[Node<'_>], store: bool) -> String {
        let src = self.src;
        let Some(ptr) = list.first() else {
            return format!("{fun}()");
        };
        let sh = self.shape(*ptr);
        let grid_mask = Self::expand(self.mask.to_string(), C, sh, true);
        let mut out = vec![self.emit(*ptr, sh)];
        let mut masked = false;
        let mut positional = 1;
        for a in &list[1..] {
            if a.kind() == "keyword_argument" {
                let name = a.child_by_field_name("name").map_or("", |k| text(src, k));
                let v = a
                    .child_by_field_name("value")
                    .map_or(String::new(), |v| self.emit(v, sh));
                if name == "mask" && sh & C != 0 {
                    masked = true;
                    out.push(format!("mask=({v}) & {grid_mask}"));
                } else {
                    out.push(format!("{name}={v}"));
                }
                continue;
            }
            positional += 1;
            let v = self.emit(*a, sh);
            let mask_slot = if store { 3 } else { 2 };
            if positional == mask_slot && sh & C != 0 {
                masked = true;
                out.push(format!("({v}) & {grid_mask}"));
            } else {
                out.push(v);
            }
        }
        if !masked && sh & C != 0 {
            out.push(format!("mask={grid_mask}"));
        }
        format!("{fun}({})", out.join(", "))
    }

    /// The widened file text.
    fn body(&self, body: Node<'_>, grid: &str) -> Result<String, String> {
        let src = self.src;
        let mut e = Edits::new();
        let mut stmts = Vec::new();
        walk(body, &mut |n| {
            if n.kind() == "expression_statement" {
                stmts.push(n);
                return false;
            }
            if matches!(n.kind(), "for_statement" | "while_statement") {
                for f in ["right", "condition"] {
                    if let Some(h) = n.child_by_field_name(f) {
                        if self.shape(h) != S {
                            stmts.clear();
                        }
                    }
                }
            }
            true
        });
        for st in &stmts {
            let new = match assignment(src, *st) {
                Some((name, _, right))
                    if self.shape(right) == S
                        && !self.shapes.widened_inits.contains_key(&st.id()) =>
                {
                    let _ = name;
                    continue;
                }
                Some((name, op, right)) => {
                    let want = self.shapes.get(&name);
                    let have = self.shape(right);
                    let widened = self.shapes.widened_inits.get(&st.id());
                    let mut v = self.emit(right, if widened.is_some() { have } else { want });
                    if let Some(w) = widened {
                        v = match (have, *w) {
                            (S, C) => format!("{v} + tl.zeros([{}], dtype=tl.int32)", self.cb),
                            (L, LC) => format!(
                                "({v})[:, None] + tl.zeros([1, {}], dtype=tl.int32)",
                                self.cb
                            ),
                            (S, L) | (S, S) => v,
                            _ => return Err(format!("`{name}` cannot be broadcast")),
                        };
                    }
                    let left = st
                        .named_child(0)
                        .and_then(|a| a.child_by_field_name("left"))
                        .map_or(name.as_str(), |l| text(src, l));
                    format!("{left} {op} {v}")
                }
                None => match st.named_child(0) {
                    Some(x) if self.shape(x) != S => self.emit(x, self.shape(x)),
                    _ => continue,
                },
            };
            e.extend([Edit::replace(st.byte_range(), new)]);
        }
        // The grid mask, before the first statement.
        if stmts.is_empty() {
            return Err("a loop's range or condition depends on the program".into());
        }
        let mut w = body.walk();
        let first = body
            .named_children(&mut w)
            .find(|c| c.kind() != "comment")
            .ok_or("an empty body")?;
        let ind = super::tree::line_indent(src, first.start_byte()).to_string();
        let nl = super::tree::newline(src);
        let pid_text = text(src, self.pid);
        e.extend([Edit::insert(
            first.start_byte(),
            format!(
                "{} = ({pid_text} * {cb} + tl.arange(0, {cb})) < {grid}{nl}{ind}",
                self.mask,
                cb = self.cb
            ),
        )]);
        e.apply(src).map_err(|err| err.to_string())
    }
}

#[cfg(test)]
mod tests;
