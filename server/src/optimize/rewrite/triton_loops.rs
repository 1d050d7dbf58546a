//! What the Triton loop cures (`triton_online`, `triton_row_tile`, `triton_split_loop`)
//! share: the kernel body's statements and loops (from the facts' loop analysis, so a
//! cure acts on exactly what the diagnosis saw), whole-line spans, identifier renaming,
//! and the rule that drops a statement repeating an earlier one whose inputs have not
//! changed since.

use std::collections::BTreeSet;
use std::ops::Range;

use tree_sitter::Node;

use super::check::not_applicable;
use super::edits::Edit;
use super::tree::{kernel_function, text};
use super::{RewriteContext, RewriteError};
use crate::optimize::facts::triton_loops::{
    assigned, assignment, depth, loops, reads, statements, Loop,
};

/// The kernel body's statements and its loops.
pub(super) fn body_loops<'t>(
    cx: &RewriteContext<'t>,
) -> Result<(Vec<Node<'t>>, Vec<Loop<'t>>), RewriteError> {
    let k = &cx.kernel.name;
    let body = kernel_function(cx)
        .and_then(|f| f.child_by_field_name("body"))
        .ok_or_else(|| not_applicable(format!("`{k}`'s definition is not in the syntax tree")))?;
    shallow_enough(body, k)?;
    let top = statements(body);
    let found = loops(cx.text, &top);
    Ok((top, found))
}

/// Deeper than this, the cures' recursive walks could exhaust the stack; no kernel
/// written by hand comes near it.
const MAX_NESTING: usize = 200;

/// `NotApplicable` for a body nested deeper than [`MAX_NESTING`].
pub(super) fn shallow_enough(body: Node<'_>, kernel: &str) -> Result<(), RewriteError> {
    if depth(body) > MAX_NESTING {
        return Err(not_applicable(format!(
            "`{kernel}` nests expressions more than {MAX_NESTING} deep"
        )));
    }
    Ok(())
}

/// From the start of `n`'s first line to the end of its last line, newline included.
pub(super) fn lines_of(src: &str, n: Node<'_>) -> Range<usize> {
    let start = src[..n.start_byte()].rfind('\n').map_or(0, |i| i + 1);
    let end = src[n.end_byte()..]
        .find('\n')
        .map_or(src.len(), |i| n.end_byte() + i + 1);
    start..end
}

/// `n`'s text with each identifier (not attribute or keyword names) for which `f` gives a
/// replacement replaced.
pub(super) fn with_names(src: &str, n: Node<'_>, f: &dyn Fn(&str) -> Option<String>) -> String {
    let base = n.start_byte();
    let mut reps: Vec<(Range<usize>, String)> = Vec::new();
    let mut stack = vec![n];
    while let Some(c) = stack.pop() {
        if c.kind() == "identifier" {
            let mut one = BTreeSet::new();
            reads(src, c, &mut one);
            if one.is_empty() {
                continue;
            }
            if let Some(r) = f(text(src, c)) {
                reps.push((c.start_byte() - base..c.end_byte() - base, r));
            }
            continue;
        }
        let mut w = c.walk();
        stack.extend(c.named_children(&mut w));
    }
    splice(text(src, n), reps)
}

/// `s` with non-overlapping replacements made.
/// A node's named children other than comments: a call's arguments, an expression's
/// parts, as the rewrites that re-emit them walk them.
pub(super) fn code_children(n: Node<'_>) -> Vec<Node<'_>> {
    let mut w = n.walk();
    let out = n
        .named_children(&mut w)
        .filter(|c| c.kind() != "comment")
        .collect();
    out
}

pub(super) fn splice(s: &str, mut reps: Vec<(Range<usize>, String)>) -> String {
    reps.sort_by_key(|r| std::cmp::Reverse(r.0.start));
    let mut out = s.to_string();
    for (r, t) in reps {
        out.replace_range(r, &t);
    }
    out
}

/// One statement as the cures move it: its text and what it reads and assigns.
#[derive(Clone, Debug)]
pub(super) struct Stmt {
    pub text: String,
    pub reads: BTreeSet<String>,
    pub assigns: BTreeSet<String>,
    /// A plain `name = expr` (not `+=`, not reading its own target): running it twice
    /// with the same inputs gives the same value.
    pub pure_assign: bool,
    /// The name a plain assignment sets.
    pub target: Option<String>,
}

impl Stmt {
    pub fn of(src: &str, n: Node<'_>, text: String) -> Stmt {
        let (mut r, mut a) = (BTreeSet::new(), BTreeSet::new());
        assigned(src, n, &mut a);
        let (pure_assign, target) = match assignment(src, n) {
            Some((name, op, right)) => {
                reads(src, right, &mut r);
                let pure = op == "=" && !r.contains(&name);
                (pure, pure.then_some(name))
            }
            None => {
                reads(src, n, &mut r);
                (false, None)
            }
        };
        Stmt {
            text,
            reads: r,
            assigns: a,
            pure_assign,
            target,
        }
    }

    /// The right side of a plain assignment, as text.
    fn rhs(&self) -> Option<&str> {
        let t = self.target.as_deref()?;
        self.text.strip_prefix(t)?.strip_prefix(" = ")
    }
}

/// What becomes of a statement that repeats an earlier one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Repeat {
    Keep,
    /// The same statement with the same inputs: it is left out.
    Drop,
    /// The same load into another name: `name = earlier`, a copy of the earlier result.
    Copy(String),
}

/// Which of `stmts` repeat an earlier one: the same plain assignment (dropped), or the
/// same load into another name (a copy), where nothing between them assigns what it
/// reads or the earlier name. Only statements marked in `droppable` change; the others
/// serve as originals.
pub(super) fn repeats(stmts: &[Stmt], droppable: &[bool]) -> Vec<Repeat> {
    let mut out = vec![Repeat::Keep; stmts.len()];
    for j in (0..stmts.len()).filter(|j| droppable.get(*j) == Some(&true)) {
        let s = &stmts[j];
        if !s.pure_assign || s.text.contains("tl.atomic") {
            continue;
        }
        let mut changed: BTreeSet<&str> = BTreeSet::new();
        for i in (0..j).rev() {
            if out[i] == Repeat::Drop {
                continue;
            }
            let e = &stmts[i];
            let inputs_kept = !s.reads.iter().any(|r| changed.contains(r.as_str()));
            if !inputs_kept {
                break;
            }
            if e.text == s.text && !s.assigns.iter().any(|a| changed.contains(a.as_str())) {
                out[j] = Repeat::Drop;
                break;
            }
            if let (Some(a), Some(b), Some(t)) = (e.rhs(), s.rhs(), e.target.as_deref()) {
                if a == b && a.contains("tl.load") && !changed.contains(t) && e.target != s.target {
                    out[j] = Repeat::Copy(t.to_string());
                    break;
                }
            }
            changed.extend(e.assigns.iter().map(String::as_str));
        }
    }
    out
}

/// Calls applied element by element: the shape of their result is the broadcast of
/// their arguments'.
pub(super) const ELEMENTWISE: &[&str] = &[
    "tl.exp",
    "tl.exp2",
    "tl.log",
    "tl.log2",
    "tl.sqrt",
    "tl.rsqrt",
    "tl.abs",
    "tl.maximum",
    "tl.minimum",
    "tl.where",
    "tl.sigmoid",
    "tl.fma",
    "tl.cos",
    "tl.sin",
    "tl.erf",
    "tl.math.exp",
    "tl.math.log",
    "tl.math.rsqrt",
    "tl.math.sqrt",
    "tl.cdiv",
    "tl.clamp",
];

/// A name `l` sets (not a carry, not its variable) that a statement after `l` reads: a
/// value the cures that reshape the loop's body would leave with another shape.
pub(super) fn local_read_after<'a>(src: &str, l: &'a Loop<'_>) -> Option<&'a String> {
    l.assigned
        .iter()
        .find(|n| l.carry(n).is_none() && **n != l.var && l.reads_after(src, n))
}

/// The edits that put `head` (whole lines, each ending in a newline and the loop's
/// indent) right before `lp` and `tail` (whole lines) after its last line.
pub(super) fn around_loop(src: &str, lp: Node<'_>, head: String, tail: String) -> [Edit; 2] {
    let end = lines_of(src, lp).end;
    let tail = if src[..end].ends_with('\n') {
        tail
    } else {
        format!("{}{tail}", super::tree::newline(src))
    };
    [Edit::insert(lp.start_byte(), head), Edit::insert(end, tail)]
}

/// The edits that make `l` step by `step`: the `for` header's arguments, with
/// `num_stages=STAGES` where `stages` names a pipelining depth and the author's
/// `tl.range` names none (a plain `range` becomes `tl.range`: Triton pipelines the plain
/// loads of a loop only when it names its stages), or the while form's increment.
pub(super) fn loop_header(
    src: &str,
    l: &Loop<'_>,
    step: &str,
    stages: Option<&str>,
) -> Result<Vec<Edit>, String> {
    let Some(args) = l.range_args else {
        let incr = l.incr.ok_or("the loop has no range to change")?;
        return Ok(vec![Edit::replace(
            incr.byte_range(),
            format!("{} += {step}", l.var),
        )]);
    };
    let mut w = args.walk();
    let mut all = vec![l.start.clone(), l.stop.clone(), step.to_string()];
    let kw: Vec<_> = args
        .named_children(&mut w)
        .filter(|a| a.kind() == "keyword_argument")
        .map(|a| text(src, a).to_string())
        .collect();
    let mut edits = Vec::new();
    if let Some(s) = stages.filter(|_| !kw.iter().any(|k| k.starts_with("num_stages"))) {
        all.push(format!("num_stages={s}"));
        let f = args
            .parent()
            .and_then(|c| c.child_by_field_name("function"));
        if let Some(f) = f.filter(|f| text(src, *f) == "range") {
            edits.push(Edit::replace(f.byte_range(), "tl.range".to_string()));
        }
    }
    all.extend(kw);
    edits.push(Edit::replace(
        args.byte_range(),
        format!("({})", all.join(", ")),
    ));
    Ok(edits)
}

/// The edit that appends `names` to the kernel's signature as `tl.constexpr` parameters,
/// or puts them before the first parameter with a default (`BLOCK: tl.constexpr = 64`,
/// written there by the module-constant normalization or the author): Python allows no
/// parameter without a default after one with it, and the worker launches by keyword.
/// A name the signature already has is not added again (several loops of one kernel can
/// share one knob).
pub(super) fn add_constexprs(cx: &RewriteContext<'_>, names: &[&str]) -> Result<Vec<Edit>, String> {
    let names: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !cx.kernel.params.iter().any(|p| p.name == *n))
        .collect();
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let params = kernel_function(cx)
        .and_then(|f| f.child_by_field_name("parameters"))
        .ok_or("the kernel's parameters are not in the syntax tree")?;
    let inner = text(cx.text, params)
        .strip_suffix(')')
        .ok_or("the kernel's parameter list is not closed")?;
    let comma = if inner.trim_end().ends_with(',') {
        " "
    } else {
        ", "
    };
    let added: Vec<String> = names.iter().map(|n| format!("{n}: tl.constexpr")).collect();
    let mut w = params.walk();
    let defaulted = params
        .named_children(&mut w)
        .find(|p| matches!(p.kind(), "default_parameter" | "typed_default_parameter"));
    if let Some(d) = defaulted {
        return Ok(vec![Edit::insert(
            d.start_byte(),
            format!("{}, ", added.join(", ")),
        )]);
    }
    let at = cx.text[..params.end_byte() - 1].trim_end().len();
    Ok(vec![Edit::insert(
        at,
        format!("{comma}{}", added.join(", ")),
    )])
}

/// The pipelining depths a loop's stages knob is tuned over.
pub(super) const STAGE_CHOICES: &str = "[1, 2, 3, 4]";

/// Whether `l` can take a pipelining-depth knob: a `for` loop whose header names no
/// `num_stages` of its own.
pub(super) fn stages_free(src: &str, l: &Loop<'_>) -> bool {
    l.range_args
        .is_some_and(|a| !text(src, a).contains("num_stages"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: Repeat = Repeat::Keep;
    const D: Repeat = Repeat::Drop;

    fn st(text: &str, reads: &[&str], assigns: &[&str], pure_assign: bool) -> Stmt {
        Stmt {
            text: text.into(),
            reads: reads.iter().map(|s| s.to_string()).collect(),
            assigns: assigns.iter().map(|s| s.to_string()).collect(),
            pure_assign,
            target: pure_assign.then(|| assigns[0].to_string()),
        }
    }

    #[test]
    fn a_repeat_is_dropped_only_while_its_inputs_are_unchanged() {
        let load = st("x = tl.load(p + c)", &["p", "c"], &["x"], true);
        let c0 = st("c = o + a", &["o", "a"], &["c"], true);
        let other = st("s = s + x", &["s", "x"], &["s"], false);
        let c1 = st("c = o + a + 1", &["o", "a"], &["c"], true);
        assert_eq!(
            repeats(
                &[
                    c0.clone(),
                    load.clone(),
                    other.clone(),
                    c0.clone(),
                    load.clone()
                ],
                &[false, false, false, true, true]
            ),
            [K, K, K, D, D]
        );
        assert_eq!(
            repeats(
                &[c0.clone(), load.clone(), c1, load.clone()],
                &[false, false, true, true]
            ),
            [K, K, K, K],
            "c changed in between"
        );
        let acc = st("s = s + x", &["s", "x"], &["s"], false);
        assert_eq!(repeats(&[acc.clone(), acc], &[false, true]), [K, K]);
    }

    #[test]
    fn the_same_load_into_another_name_is_a_copy_while_the_first_name_holds_it() {
        let a = st("a = tl.load(p + c)", &["p", "c"], &["a"], true);
        let b = st("b = tl.load(p + c)", &["p", "c"], &["b"], true);
        let a2 = st("a = a * 2", &["a"], &["a"], false);
        let sum = st("t = a + 1", &["a"], &["t"], true);
        assert_eq!(
            repeats(&[a.clone(), sum, b.clone()], &[false, false, true]),
            [K, K, Repeat::Copy("a".into())]
        );
        assert_eq!(
            repeats(&[a, a2, b], &[false, false, true]),
            [K, K, K],
            "`a` no longer holds the load"
        );
    }
}
