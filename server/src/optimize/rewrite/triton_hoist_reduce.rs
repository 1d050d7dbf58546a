//! `triton_hoist_reduce`: a Triton loop that reduces its tile over the lanes on every
//! iteration (`acc += tl.sum(v * v, axis=0)`, `m = tl.maximum(m, tl.max(t, axis=1))`)
//! adds the tile itself into a tile of partials instead, and reduces once after the loop.
//! A reduction across warps costs a round trip through shared memory and a barrier on
//! every iteration; the partials are plain adds in registers, so the next iteration's
//! loads are not held up.
//!
//! **Matches**, from the loop analysis (`facts/triton_loops.rs`): a body loop (`for` of
//! any step, or the while form) with no store, branch or inner loop, whose carries are
//! all sums, maxima or minima reduced over the lanes, each updated once by one
//! `tl.sum`/`tl.max`/`tl.min` of a tile (the loop's only reductions) and read only by its
//! update. The tile's shape is inferred from the `tl.arange`, `tl.zeros`/`tl.full`,
//! `[:, None]`/`[None, :]` and broadcasting operations it is built from.
//!
//! **Refuses** a reduction whose result the loop uses otherwise, a carry read in the loop
//! (a running prefix), a name set in the loop and read after it, a maximum or minimum of
//! a carry not started from a float, a carry started from an integer literal (the
//! partials' type is unknown), and a tile whose shape the inference cannot follow.
//!
//! **Writes** `acc_part = tl.zeros(shape, dtype=...)` (or `tl.full` of minus/plus
//! infinity) before the loop, `acc_part += E` (`tl.maximum`/`tl.minimum`) in place of the
//! update, and after the loop the update as written with `E` replaced by `acc_part`. A
//! `for` loop whose header names no `num_stages` becomes `tl.range(..., num_stages=
//! V_STAGES)`, a constexpr knob the spec sets to 1 (not pipelined, as before) and tunes
//! over [1, 2, 3, 4], so the retune after the step tries pipelining the loop's loads.
//! One candidate, the launch otherwise unchanged.

use std::collections::BTreeMap;

use tree_sitter::Node;

use super::check::{finish, not_applicable, require_lang, set_spec_statements, Draft, R};
use super::edits::{Edit, Edits};
use super::tree::{code_names, fresh, line_indent, newline, text};
use super::triton_loops::{
    add_constexprs, around_loop, body_loops, code_children, local_read_after, loop_header,
    stages_free, ELEMENTWISE, STAGE_CHOICES,
};
use super::RewriteContext;
use crate::optimize::facts::triton_loops::{assignment, callee, Combine, Loop};
use crate::syntax::Lang;

const ID: &str = "triton_hoist_reduce";

pub fn triton_hoist_reduce(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Triton, ID)?;
    let k = &cx.kernel.name;
    let (top, found) = body_loops(cx)?;
    let mut why = Vec::new();
    for l in &found {
        let line = l.node.start_position().row + 1;
        match hoists(cx, &top, l).and_then(|h| write(cx, l, &h)) {
            Err(e) => why.push(format!("line {line}: {e}")),
            Ok(text) => {
                let label = format!(
                    "the loop at line {line} adds its tiles into partials, reduced once after it"
                );
                return finish(cx, vec![Draft { label, text }], Vec::new());
            }
        }
    }
    Err(not_applicable(if why.is_empty() {
        format!("`{k}` has no loop in its body")
    } else {
        format!(
            "`{k}` has no reduction to move out of a loop: {}",
            why.join("; ")
        )
    }))
}

/// One carry's reduction, moved out of the loop.
struct Hoist<'t> {
    carry: String,
    combine: Combine,
    /// The statement that updates the carry, the reduction's tile argument, its shape.
    stmt: Node<'t>,
    tile: Node<'t>,
    shape: Vec<String>,
    dtype: String,
}

/// The reductions of `l` to move out of it, or why not.
fn hoists<'t>(
    cx: &RewriteContext<'t>,
    top: &[Node<'t>],
    l: &Loop<'t>,
) -> Result<Vec<Hoist<'t>>, String> {
    let src = cx.text;
    if l.stores > 0 || l.nested {
        return Err("it stores, branches or nests a loop".into());
    }
    if l.reductions == 0 {
        return Err("it reduces nothing over the lanes".into());
    }
    if l.carries.is_empty() || l.reductions as usize != l.carries.len() {
        return Err("its reductions are not all updates of carried sums, maxima or minima".into());
    }
    if let Some(n) = local_read_after(src, l) {
        return Err(format!("`{n}` is set in the loop and read after it"));
    }
    let mut env: BTreeMap<String, Vec<String>> = cx
        .kernel
        .params
        .iter()
        .map(|p| (p.name.clone(), Vec::new()))
        .collect();
    for s in top.iter().take_while(|s| s.id() != l.node.id()) {
        bind(src, *s, &mut env);
    }
    env.insert(l.var.clone(), Vec::new());
    let mut out = Vec::new();
    for s in l.stmts.iter().filter(|s| s.kind() != "comment") {
        match assignment(src, *s) {
            Some((n, _, _)) if l.carry(&n).is_some() => out.push(hoist(cx, top, l, *s, &n, &env)?),
            _ => bind(src, *s, &mut env),
        }
    }
    Ok(out)
}

/// The hoist of carry `name`, updated by `stmt`.
fn hoist<'t>(
    cx: &RewriteContext<'t>,
    top: &[Node<'t>],
    l: &Loop<'t>,
    stmt: Node<'t>,
    name: &str,
    env: &BTreeMap<String, Vec<String>>,
) -> Result<Hoist<'t>, String> {
    let src = cx.text;
    let c = l
        .carries
        .iter()
        .find(|c| c.name == name)
        .ok_or("not a carry")?;
    let bad = || format!("`{name}` is not one reduction of a tile read only by its update");
    let [update] = c.updates.as_slice() else {
        return Err(bad());
    };
    let want = match c.combine {
        Combine::Sum => "tl.sum",
        Combine::Max => "tl.max",
        Combine::Min => "tl.min",
        Combine::Other => return Err(bad()),
    };
    if c.lane || c.read_in_loop || update.kind() != "call" || callee(src, *update) != want {
        return Err(bad());
    }
    let tile = update
        .child_by_field_name("arguments")
        .and_then(|a| code_children(a).into_iter().next())
        .filter(|a| a.kind() != "keyword_argument")
        .ok_or_else(bad)?;
    let shape = shape_of(src, tile, env)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("the shape of `{}` is not known", text(src, tile)))?;
    let init = top
        .iter()
        .take_while(|s| s.id() != l.node.id())
        .filter_map(|s| assignment(src, *s))
        .filter(|(n, _, _)| n == name)
        .last()
        .map(|(_, _, r)| text(src, r).to_string())
        .ok_or_else(|| format!("`{name}` is not set before the loop"))?;
    let bare = init.trim().trim_start_matches('-');
    if bare.parse::<i64>().is_ok() {
        return Err(format!(
            "`{name}` starts from the integer `{init}`: the type of its partials is not known"
        ));
    }
    let literal = bare.parse::<f64>().is_ok() || init.contains("float(");
    if c.combine != Combine::Sum && !(literal || init.contains("inf")) {
        return Err(format!(
            "`{name}` is a maximum or minimum not started from a float"
        ));
    }
    let dtype = if literal {
        "tl.float32".to_string()
    } else {
        format!("{name}.dtype")
    };
    Ok(Hoist {
        carry: name.to_string(),
        combine: c.combine,
        stmt,
        tile,
        shape,
        dtype,
    })
}

/// Records the shape an assignment gives its name (or forgets the name).
fn bind(src: &str, s: Node<'_>, env: &mut BTreeMap<String, Vec<String>>) {
    if let Some((name, op, right)) = assignment(src, s) {
        let mut shape = shape_of(src, right, env);
        if op != "=" {
            shape = shape
                .zip(env.get(&name).cloned())
                .and_then(|(a, b)| broadcast(&a, &b));
        }
        match shape {
            Some(sh) => env.insert(name, sh),
            None => env.remove(&name),
        };
    }
}

/// The shape of `e` (dimension sizes as written; `[]` a scalar), where the names' shapes
/// are `env`'s; None where it cannot be followed.
fn shape_of(src: &str, e: Node<'_>, env: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    let kids = code_children(e);
    match e.kind() {
        "integer" | "float" | "true" | "false" | "none" => Some(Vec::new()),
        "identifier" => env.get(text(src, e)).cloned(),
        "parenthesized_expression" | "unary_operator" | "not_operator" => {
            shape_of(src, *kids.last()?, env)
        }
        "binary_operator" | "comparison_operator" | "boolean_operator" => kids
            .iter()
            .filter(|k| k.is_named())
            .try_fold(Vec::new(), |acc, k| {
                broadcast(&acc, &shape_of(src, *k, env)?)
            }),
        "subscript" => {
            let v = shape_of(src, e.child_by_field_name("value")?, env)?;
            let idx: String = text(src, e)[text(src, e).rfind('[')?..]
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect();
            match (v.as_slice(), idx.as_str()) {
                ([d], "[:,None]") => Some(vec![d.clone(), "1".into()]),
                ([d], "[None,:]") => Some(vec!["1".into(), d.clone()]),
                _ => None,
            }
        }
        "call" => call_shape(src, e, env),
        _ => None,
    }
}

/// [`shape_of`] a call.
fn call_shape(src: &str, e: Node<'_>, env: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    let f = callee(src, e);
    let args = code_children(e.child_by_field_name("arguments")?);
    let pos: Vec<Node<'_>> = args
        .iter()
        .copied()
        .filter(|a| a.kind() != "keyword_argument")
        .collect();
    let kw = |name: &str| {
        args.iter().find_map(|a| {
            (a.kind() == "keyword_argument"
                && a.child_by_field_name("name")
                    .is_some_and(|n| text(src, n) == name))
            .then(|| a.child_by_field_name("value"))
            .flatten()
        })
    };
    match f.as_str() {
        "tl.program_id" | "tl.num_programs" | "tl.cdiv" => Some(Vec::new()),
        "tl.arange" => match pos.as_slice() {
            [a, b] if text(src, *a) == "0" => Some(vec![text(src, *b).to_string()]),
            _ => None,
        },
        "tl.zeros" | "tl.full" => {
            let dims = code_children(*pos.first()?);
            Some(dims.iter().map(|d| text(src, *d).to_string()).collect())
        }
        "tl.sum" | "tl.max" | "tl.min" => {
            let mut s = shape_of(src, *pos.first()?, env)?;
            let axis = kw("axis").or_else(|| pos.get(1).copied());
            let Some(axis) = axis else {
                return Some(Vec::new());
            };
            let a: usize = text(src, axis).parse().ok()?;
            (a < s.len()).then(|| {
                s.remove(a);
                s
            })
        }
        _ if ELEMENTWISE.contains(&f.as_str()) || f == "tl.load" => {
            let mut all: Vec<Node<'_>> = pos.clone();
            if f == "tl.load" {
                all.truncate(2);
                all.extend(kw("mask"));
            }
            all.iter().try_fold(Vec::new(), |acc, a| {
                broadcast(&acc, &shape_of(src, *a, env)?)
            })
        }
        _ if f.ends_with(".to") => {
            let obj = e
                .child_by_field_name("function")?
                .child_by_field_name("object")?;
            shape_of(src, obj, env)
        }
        _ => None,
    }
}

/// Numpy's broadcast of two shapes, dimensions compared as written.
fn broadcast(a: &[String], b: &[String]) -> Option<Vec<String>> {
    let n = a.len().max(b.len());
    let at = |s: &[String], i: usize| {
        (i + s.len())
            .checked_sub(n)
            .map_or("1".to_string(), |j| s[j].clone())
    };
    (0..n)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Some(x),
            (x, y) if x == "1" => Some(y),
            (x, y) if y == "1" => Some(x),
            _ => None,
        })
        .collect()
}

/// The file with each of `hs` moved out of `l`.
fn write(cx: &RewriteContext<'_>, l: &Loop<'_>, hs: &[Hoist<'_>]) -> Result<String, String> {
    let src = cx.text;
    let nl = newline(src);
    let outer = line_indent(src, l.node.start_byte()).to_string();
    let mut names = code_names(cx);
    let mut e = Edits::new();
    let (mut head, mut tail) = (String::new(), String::new());
    for h in hs {
        let p = fresh(&format!("{}_part", h.carry), &mut names);
        let dims = match h.shape.as_slice() {
            [one] => format!("({one},)"),
            all => format!("({})", all.join(", ")),
        };
        let (init, update) = match h.combine {
            Combine::Sum => (
                format!("tl.zeros({dims}, dtype={})", h.dtype),
                format!("{p} += {}", text(src, h.tile)),
            ),
            Combine::Max => (
                format!("tl.full({dims}, float(\"-inf\"), dtype={})", h.dtype),
                format!("{p} = tl.maximum({p}, {})", text(src, h.tile)),
            ),
            _ => (
                format!("tl.full({dims}, float(\"inf\"), dtype={})", h.dtype),
                format!("{p} = tl.minimum({p}, {})", text(src, h.tile)),
            ),
        };
        head.push_str(&format!("{p} = {init}{nl}{outer}"));
        let s = text(src, h.stmt);
        let at = h.tile.start_byte() - h.stmt.start_byte()..h.tile.end_byte() - h.stmt.start_byte();
        tail.push_str(&format!("{outer}{}{p}{}{nl}", &s[..at.start], &s[at.end..]));
        e.extend([Edit::replace(h.stmt.byte_range(), update)]);
    }
    e.extend(around_loop(src, l.node, head, tail));
    let stages =
        stages_free(src, l).then(|| fresh(&format!("{}_STAGES", l.var.to_uppercase()), &mut names));
    if let Some(s) = &stages {
        e.extend(loop_header(src, l, &l.step, Some(s))?);
        e.extend(add_constexprs(cx, &[s])?);
    }
    let text = e.apply(src).map_err(|err| err.to_string())?;
    match stages {
        None => Ok(text),
        Some(s) => set_spec_statements(
            &text,
            cx.kernel,
            &[(s.clone(), "1".into())],
            &[format!("tune {s} in {STAGE_CHOICES}")],
        )
        .map_err(|err| err.to_string()),
    }
}

#[cfg(test)]
mod tests;
