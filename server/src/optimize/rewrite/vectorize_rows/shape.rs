//! The shape `vectorize_rows` rewrites, found on the tree: the *lane index* `X`, declared
//! once as `blockIdx.x * blockDim.x + threadIdx.x` (casts, either order, and aliases
//! such as `int tx = threadIdx.x;` allowed), and the *region*: every top-level statement
//! from the first that mentions `X` to the end of the kernel. Statements before the region (row indices from y or z, batch offsets,
//! row pointers, row guards) run once per thread and stay as written. In the region the
//! *bounds check* is the first `if` whose condition mentions `X`: `if (c) return;`, or
//! `if (c) { ... }` ending the kernel; every term of it that mentions `X` must be an
//! upper bound on `X`, so that a check passed by a thread's last element is passed by
//! all its elements.
//!
//! Helper calls are inlined first ([`inline_helpers`]): a `__device__` function whose
//! body is `return E;` becomes `E` with each parameter replaced by its argument (cast to
//! the parameter's type), and `__ldg(&p[i])` becomes `p[i]`, so that the accesses they
//! hide are seen.

use std::collections::BTreeMap;

use tree_sitter::Node;

use super::super::inline_calls::{Helper, Passed};

use super::super::elementwise::{
    is_one_d_index, is_plain_return, without_int_casts, words_replaced,
};
use super::super::tree::{first_line, line_indent, named_children, text, walk};
use super::repeat::trailing_loop;
use crate::syntax::ByteRange;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Form {
    /// `if (c) return;` followed by the rest of the region.
    EarlyReturn,
    /// `if (c) { ... }` ending the kernel.
    Block,
}

pub(super) struct Rows<'t> {
    /// The lane index and its type without `const` (`int`, `size_t`).
    pub lane: String,
    pub lane_ty: String,
    /// Region statements (comments included), in order.
    pub region: Vec<Node<'t>>,
    /// Index of the bounds check in `region`.
    pub guard: usize,
    pub form: Form,
    /// The check's condition (its `(...)` contents).
    pub cond: Node<'t>,
    /// Indentation of the region's lines and one indentation step.
    pub indent: String,
    pub unit: String,
    /// A trailing loop whose iterations repeat the columns' work (`repeat.rs`): its body
    /// is read as element statements and the rewritten region runs inside its header.
    pub repeat: Option<Node<'t>>,
}

impl<'t> Rows<'t> {
    pub fn span(&self) -> ByteRange {
        let first = self.region.first().map_or(0, |n| n.start_byte());
        first..self.region.last().map_or(first, |n| n.end_byte())
    }

    pub fn guard_node(&self) -> Node<'t> {
        self.region[self.guard]
    }

    /// The statements each element runs once the check has passed: those before the
    /// check and, for `Block`, the check's body, or, for `EarlyReturn`, those after it.
    pub fn element_statements(&self) -> Vec<Node<'t>> {
        let mut out: Vec<Node<'t>> = self.region[..self.guard].to_vec();
        match self.form {
            Form::EarlyReturn => out.extend(self.region[self.guard + 1..].iter().copied()),
            Form::Block => {
                if let Some(body) = self.guard_node().child_by_field_name("consequence") {
                    if body.kind() == "compound_statement" {
                        out.extend(named_children(body));
                    } else {
                        out.push(body);
                    }
                }
            }
        }
        if let Some(l) = self
            .repeat
            .filter(|l| out.last().is_some_and(|s| s.id() == l.id()))
        {
            out.pop();
            if let Some(body) = l.child_by_field_name("body") {
                match body.kind() {
                    "compound_statement" => out.extend(named_children(body)),
                    _ => out.push(body),
                }
            }
        }
        out
    }

    /// The repeated loop's header (`for (int p = 0; p < planes; ++p)`) and the range
    /// from the loop's start to its body's, which the scalar path drops.
    pub fn repeat_header(&self, src: &str) -> Option<(String, ByteRange)> {
        let l = self.repeat?;
        let body = l.child_by_field_name("body")?;
        let r = l.start_byte()..body.start_byte();
        Some((src[r.clone()].trim_end().to_string(), r))
    }
}

/// `name` is mentioned as an identifier somewhere under `n`.
pub(super) fn mentions(src: &str, n: Node<'_>, name: &str) -> bool {
    let mut hit = false;
    walk(n, &mut |x| {
        hit |= x.kind() == "identifier" && text(src, x) == name;
        !hit
    });
    hit
}

/// Names declared before the lane index for a thread or block position along x
/// (`int tx = threadIdx.x;`, `const int bx = blockIdx.x, bd = blockDim.x;`): name ->
/// the field, and the declarations.
fn x_aliases<'t>(src: &str, stmts: &[Node<'t>]) -> (BTreeMap<String, String>, Vec<Node<'t>>) {
    let (mut names, mut decls) = (BTreeMap::new(), Vec::new());
    for s in stmts.iter().filter(|s| s.kind() == "declaration") {
        let mut c = s.walk();
        let found: Option<Vec<(String, String)>> = s
            .children_by_field_name("declarator", &mut c)
            .map(|d| {
                let name = d
                    .child_by_field_name("declarator")
                    .filter(|n| n.kind() == "identifier")?;
                let field = without_int_casts(text(src, d.child_by_field_name("value")?));
                matches!(field.as_str(), "threadIdx.x" | "blockIdx.x" | "blockDim.x")
                    .then(|| (text(src, name).to_string(), field))
            })
            .collect();
        if let Some(found) = found.filter(|f| !f.is_empty()) {
            names.extend(found);
            decls.push(*s);
        }
    }
    (names, decls)
}

/// The lane index declaration: its position among `stmts`, its name and type. Its
/// initializer may read the positions through `aliases` (declared in `skip`).
fn lane_index(
    src: &str,
    stmts: &[Node<'_>],
    aliases: &BTreeMap<String, String>,
    skip: &[Node<'_>],
) -> Result<(usize, String, String), String> {
    for (i, s) in stmts.iter().enumerate() {
        let t = text(src, *s);
        let reads_x = t.contains("threadIdx.x") || aliases.keys().any(|a| mentions(src, *s, a));
        if s.kind() != "declaration" || !reads_x || skip.iter().any(|k| k.id() == s.id()) {
            continue;
        }
        let mut c = s.walk();
        let ds: Vec<Node> = s.children_by_field_name("declarator", &mut c).collect();
        let [d] = ds.as_slice() else {
            return Err(format!("`{}` declares several names", first_line(t)));
        };
        let (Some(name), Some(value)) = (
            d.child_by_field_name("declarator")
                .filter(|n| n.kind() == "identifier"),
            d.child_by_field_name("value"),
        ) else {
            break;
        };
        if !is_one_d_index(&words_replaced(text(src, value), aliases)) {
            break;
        }
        let ty = s
            .child_by_field_name("type")
            .map_or("int", |t| text(src, t));
        return Ok((i, text(src, name).to_string(), ty.to_string()));
    }
    Err("it has no lane index `int c = blockIdx.x * blockDim.x + threadIdx.x;` declared at the top of the kernel".into())
}

/// A read of the x thread or block position other than in the lane index (directly or
/// through an alias; `blockDim.x` is the same for every thread): once a thread handles
/// several columns it no longer names one.
fn stray_x(
    src: &str,
    body: Node<'_>,
    skip: &[Node<'_>],
    aliases: &BTreeMap<String, String>,
) -> Option<String> {
    let mut found = None;
    walk(body, &mut |n| {
        if skip.iter().any(|s| s.id() == n.id()) || found.is_some() {
            return false;
        }
        let t = text(src, n);
        let direct = n.kind() == "field_expression"
            && matches!(t, "threadIdx.x" | "blockIdx.x" | "gridDim.x");
        let alias = n.kind() == "identifier" && aliases.get(t).is_some_and(|f| f != "blockDim.x");
        if direct || alias {
            found = Some(t.to_string());
        }
        true
    });
    found
}

pub(super) fn match_rows<'t>(src: &str, func: Node<'t>) -> Result<Rows<'t>, String> {
    let body = func
        .child_by_field_name("body")
        .ok_or("the kernel has no body")?;
    let stmts = named_children(body);
    let (aliases, mut skip) = x_aliases(src, &stmts);
    let (at, lane, ty) = lane_index(src, &stmts, &aliases, &skip)?;
    skip.push(stmts[at]);
    if let Some(x) = stray_x(src, body, &skip, &aliases) {
        return Err(format!(
            "it reads `{x}` outside the lane index `{lane}`; once a thread handles several columns it no longer names one"
        ));
    }
    let first = (at + 1..stmts.len())
        .find(|i| mentions(src, stmts[*i], &lane))
        .ok_or_else(|| format!("nothing after `{lane}`'s declaration uses it"))?;
    if let Some(s) = stmts[..first]
        .iter()
        .find(|s| !once_per_thread_ok(src, **s))
    {
        return Err(format!(
            "`{}` runs once per thread before the columns' work; with fewer threads it would run fewer times",
            first_line(text(src, *s))
        ));
    }
    let mut region: Vec<Node> = stmts[first..].to_vec();
    while region.last().is_some_and(|n| n.kind() == "comment") {
        region.pop();
    }
    let guard = region
        .iter()
        .position(|s| {
            s.kind() == "if_statement"
                && s.child_by_field_name("condition")
                    .is_some_and(|c| mentions(src, c, &lane))
        })
        .ok_or_else(|| format!("no bounds check `if ({lane} < n)` or `if ({lane} >= n) return;` limits the lane index"))?;
    let (form, cond) = guard_form(src, &region, guard)?;
    for s in &region[..guard] {
        if !matches!(s.kind(), "declaration" | "comment") {
            return Err(format!(
                "`{}` comes before the bounds check; only declarations may",
                first_line(text(src, *s))
            ));
        }
    }
    upper_bounds(src, cond, form, &lane)?;
    let indent = line_indent(src, region[0].start_byte()).to_string();
    let outer = line_indent(src, func.start_byte());
    let unit = match indent.strip_prefix(outer) {
        Some(u) if !u.is_empty() => u.to_string(),
        _ => "    ".to_string(),
    };
    let lane_ty = ty.trim_start_matches("const ").trim().to_string();
    let mut rows = Rows {
        lane,
        lane_ty,
        region,
        guard,
        form,
        cond,
        indent,
        unit,
        repeat: None,
    };
    rows.repeat = trailing_loop(src, &rows.element_statements(), &rows.lane)?;
    Ok(rows)
}

/// A statement before the columns' work that may run once per thread whatever the
/// number of threads: a declaration, a comment or `if (...) return;`, with no
/// assignment, increment or atomic in it.
fn once_per_thread_ok(src: &str, s: Node<'_>) -> bool {
    let shape = match s.kind() {
        "declaration" | "comment" => true,
        "if_statement" => {
            s.child_by_field_name("alternative").is_none()
                && s.child_by_field_name("consequence")
                    .is_some_and(is_plain_return)
        }
        _ => false,
    };
    shape && !has_effects(src, s)
}

/// An assignment, increment or atomic somewhere under `s`.
pub(super) fn has_effects(src: &str, s: Node<'_>) -> bool {
    let mut effects = false;
    walk(s, &mut |n| {
        effects |= matches!(n.kind(), "assignment_expression" | "update_expression")
            || (n.kind() == "call_expression"
                && n.child_by_field_name("function")
                    .is_some_and(|f| text(src, f).starts_with("atomic")));
        !effects
    });
    effects
}

/// The check's form and condition: `if (c) return;` anywhere in the region, or
/// `if (c) { ... }` as its last statement; no `else`.
fn guard_form<'t>(src: &str, region: &[Node<'t>], at: usize) -> Result<(Form, Node<'t>), String> {
    let g = region[at];
    let gt = first_line(text(src, g));
    if g.child_by_field_name("alternative").is_some() {
        return Err(format!("the bounds check `{gt}` has an `else`"));
    }
    let cond = g
        .child_by_field_name("condition")
        .and_then(|c| c.child_by_field_name("value"))
        .ok_or("the bounds check has no condition")?;
    let then = g
        .child_by_field_name("consequence")
        .ok_or("the bounds check has no body")?;
    if is_plain_return(then) {
        return Ok((Form::EarlyReturn, cond));
    }
    if at + 1 != region.len() {
        return Err(format!(
            "`{}` follows the bounds check `{gt}`; the check must end the kernel or return",
            first_line(text(src, region[at + 1]))
        ));
    }
    Ok((Form::Block, cond))
}

/// The terms of a condition joined by `op` (`&&` or `||`), parentheses looked through.
fn terms<'t>(src: &str, n: Node<'t>, op: &str, out: &mut Vec<Node<'t>>) {
    let n = strip(n);
    if n.kind() == "binary_expression"
        && n.child_by_field_name("operator")
            .is_some_and(|o| text(src, o) == op)
    {
        for side in ["left", "right"] {
            if let Some(s) = n.child_by_field_name(side) {
                terms(src, s, op, out);
            }
        }
        return;
    }
    out.push(n);
}

fn strip(mut n: Node<'_>) -> Node<'_> {
    while matches!(n.kind(), "parenthesized_expression" | "cast_expression") {
        let inner = if n.kind() == "cast_expression" {
            n.child_by_field_name("value")
        } else {
            named_children(n).into_iter().next()
        };
        match inner {
            Some(i) => n = i,
            None => break,
        }
    }
    n
}

/// Every term of the check that mentions the lane must bound it from above: `X < B`,
/// `X <= B` in `if (...) { }`; `X >= B`, `X > B` in `if (...) return;` (either side).
fn upper_bounds(src: &str, cond: Node<'_>, form: Form, lane: &str) -> Result<(), String> {
    let op = if form == Form::Block { "&&" } else { "||" };
    let mut ts = Vec::new();
    terms(src, cond, op, &mut ts);
    for t in ts.into_iter().filter(|t| mentions(src, *t, lane)) {
        let parts = (|| {
            let l = strip(t.child_by_field_name("left")?);
            let r = strip(t.child_by_field_name("right")?);
            Some((l, text(src, t.child_by_field_name("operator")?), r))
        })();
        let is_lane = |n: Node| n.kind() == "identifier" && text(src, n) == lane;
        let ok = match parts {
            Some((l, o, r)) if is_lane(l) && !mentions(src, r, lane) => match form {
                Form::Block => matches!(o, "<" | "<="),
                Form::EarlyReturn => matches!(o, ">=" | ">"),
            },
            Some((l, o, r)) if is_lane(r) && !mentions(src, l, lane) => match form {
                Form::Block => matches!(o, ">" | ">="),
                Form::EarlyReturn => matches!(o, "<=" | "<"),
            },
            _ => false,
        };
        if !ok {
            return Err(format!(
                "`{}` in the bounds check is not an upper bound on `{lane}`",
                text(src, t)
            ));
        }
    }
    Ok(())
}

/// The file's `__device__` helpers whose body is `return E;`, by name.
fn helpers<'t>(src: &str, root: Node<'t>) -> BTreeMap<String, Helper<'t>> {
    let mut all = super::super::inline_calls::helpers(src, root);
    all.retain(|_, h| h.stmts.is_empty() && h.result.is_some());
    all
}

/// One round of inlining in `body` after byte `from`: each outermost call of a helper
/// (or `__ldg(&p[i])`) replaced. None when there was nothing to inline.
fn inline_once(src: &str, root: Node<'_>, body: Node<'_>, from: usize) -> Option<String> {
    let hs = helpers(src, root);
    let mut reps: Vec<(ByteRange, String)> = Vec::new();
    walk(body, &mut |n| {
        if n.end_byte() <= from || n.kind() != "call_expression" {
            return true;
        }
        let f = n
            .child_by_field_name("function")
            .map_or("", |f| text(src, f));
        let args: Vec<Node> = n
            .child_by_field_name("arguments")
            .map(named_children)
            .unwrap_or_default();
        let new = match (f, args.as_slice()) {
            ("__ldg", [a])
                if a.kind() == "pointer_expression" && text(src, *a).starts_with('&') =>
            {
                a.child_by_field_name("argument")
                    .map(|x| format!("({})", text(src, x)))
            }
            _ => hs.get(f).and_then(|h| inlined(src, h, &args)),
        };
        match new {
            Some(t) if n.start_byte() >= from => {
                reps.push((n.byte_range(), t));
                false
            }
            _ => true,
        }
    });
    if reps.is_empty() {
        return None;
    }
    super::super::edits::Edits::from_pairs(reps).apply(src).ok()
}

/// The helper's expression with its parameters replaced by the arguments.
fn inlined(src: &str, h: &Helper<'_>, args: &[Node<'_>]) -> Option<String> {
    if args.len() != h.params.len() {
        return None;
    }
    let expr = h.result?;
    let mut reps = Vec::new();
    walk(expr, &mut |n| {
        if n.kind() == "identifier" {
            let t = text(src, n);
            if let Some(i) = h.params.iter().position(|p| p.name == t) {
                let a = text(src, args[i]);
                let a = match args[i].kind() {
                    "identifier" | "number_literal" | "field_expression" => a.to_string(),
                    _ => format!("({a})"),
                };
                let v = match h.params[i].passed {
                    Passed::Value => format!("(({}){a})", h.params[i].ty),
                    Passed::Pointer | Passed::Reference => a,
                };
                reps.push((n.byte_range(), v));
            }
        }
        true
    });
    let e = super::super::tree::render(src, &expr.byte_range(), &reps).ok()?;
    Some(format!("({e})"))
}

/// `src` with the helper calls after byte `from` in the kernel `func_at` (the byte range
/// of its name) inlined, to a fixed point (at most 4 rounds).
pub(super) fn inline_helpers(src: &str, name_at: &ByteRange, from: usize) -> String {
    let mut cur = src.to_string();
    for _ in 0..4 {
        let doc = crate::document::Document::new(crate::syntax::Lang::Cuda, 0, &cur);
        let Some(tree) = doc.tree() else { break };
        let Some(func) = function_at(tree.root_node(), name_at) else {
            break;
        };
        let Some(body) = func.child_by_field_name("body") else {
            break;
        };
        match inline_once(&cur, tree.root_node(), body, from) {
            Some(next) => cur = next,
            None => break,
        }
    }
    cur
}

/// The `function_definition` holding the byte range `name_at`.
pub(super) fn function_at<'t>(root: Node<'t>, name_at: &ByteRange) -> Option<Node<'t>> {
    let mut n = root.descendant_for_byte_range(name_at.start, name_at.end)?;
    loop {
        if n.kind() == "function_definition" {
            return Some(n);
        }
        n = n.parent()?;
    }
}
