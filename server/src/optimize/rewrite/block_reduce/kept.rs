//! The author's own block combine, kept: a kernel that computes one value `v` per thread
//! (`float v = i < n ? x[i] * x[i] : 0.0f;`), then sums the block's values its own way
//! (warp shuffles, a shared slot per warp, the first warp's shuffles) and adds the total
//! with one `atomicAdd`. Only `v` changes: each thread sums its grid-stride elements into
//! it, and everything after runs as written, over a grid of a few blocks per SM.
//!
//! That is exact when the combine adds each thread's `v` with a weight fixed by the
//! thread's place in its block: an element keeps its place (`i % blockDim.x`) in the
//! grid-stride loop, so it keeps its weight. The combine is checked to be such a sum:
//! the values (`v`, the `__shared__` arrays, every local assigned from them) flow only
//! through `=`, `+=`, `+`, a select with zero (`c ? a : 0`), a product or quotient with
//! what is not a value (`v / n`), casts and shuffles (`__shfl_down_sync(mask, a, k)`),
//! into the one `atomicAdd`; every condition, index,
//! shuffle lane and loop header is free of values and of what differs between blocks
//! (`blockIdx`, `gridDim`, the element index).

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::super::tree::{named_children, text, walk};
use super::warp_sum::collective;

/// The per-thread part of the kernel and its kept combine.
pub(super) struct Kept<'t> {
    /// Statements after the index that do not read it (the lane, the warp): before the loop.
    pub before: Vec<Node<'t>>,
    /// Statements that read the index, before the value's declaration: in the loop.
    pub in_loop: Vec<Node<'t>>,
    /// `v` and `T` of `T v = E;` (or of `T v = 0;` then `if (C) v = E;`), and the value
    /// added per element (`E`; `C` for the guarded form).
    pub var: String,
    pub ty: String,
    pub term: Node<'t>,
    pub guard: Option<Node<'t>>,
    /// The combine, from the first collective on, as written.
    pub combine: Vec<Node<'t>>,
}

/// Names whose values change with the block or the element (`index` and what is
/// computed from it, `blockIdx`, `gridDim`).
fn block_dependent(src: &str, n: Node<'_>, locals: &BTreeSet<String>) -> bool {
    let mut dep = false;
    walk(n, &mut |x| {
        let t = text(src, x);
        dep |= (x.kind() == "identifier" && locals.contains(t))
            || (x.kind() == "field_expression"
                && (t.starts_with("blockIdx") || t.starts_with("gridDim")));
        !dep
    });
    dep
}

/// The kernel's statements `after` its index declaration as [`Kept`], or why not.
pub(super) fn kept<'t>(
    src: &str,
    after: &[Node<'t>],
    index: &str,
    shared: &BTreeSet<String>,
) -> Result<Kept<'t>, String> {
    let first = after
        .iter()
        .position(|s| collective(src, &[*s]).is_some())
        .ok_or("no warp or block collective combines the threads' values")?;
    let (pre, combine) = after.split_at(first);
    if let Some(r) = pre.iter().find(|s| jumps(**s)) {
        return Err(format!(
            "`{}` leaves before the combine, which every thread must reach",
            text(src, *r)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    let indexed = indexed_names(src, pre, index);
    let (mut before, mut in_loop, mut value) = (Vec::new(), Vec::new(), Vec::new());
    for s in pre {
        if !block_dependent(src, *s, &indexed) {
            before.push(*s);
        } else if read_by(src, combine, &written(src, *s)) {
            value.push(*s);
        } else if value.is_empty() {
            in_loop.push(*s);
        } else {
            return Err(format!(
                "`{}` follows the value the combine reads",
                text(src, *s)
            ));
        }
    }
    let (var, ty, term, guard) = value_statements(src, &value)?;
    let data = data_names(src, combine, &var, shared);
    let mut dependent = indexed;
    dependent.remove(&var);
    for s in combine {
        summed(src, *s, &data, &dependent)?;
    }
    Ok(Kept {
        before,
        in_loop,
        var,
        ty,
        term,
        guard,
        combine: combine.to_vec(),
    })
}

/// Whether `s` holds a `return`, `break`, `continue` or `goto`.
fn jumps(s: Node<'_>) -> bool {
    let mut found = false;
    walk(s, &mut |n| {
        found |= matches!(
            n.kind(),
            "return_statement" | "break_statement" | "continue_statement" | "goto_statement"
        );
        !found
    });
    found
}

/// The element index and every local of `pre` set from it (declared or assigned from an
/// expression that reads one, or assigned under a condition that does).
fn indexed_names(src: &str, pre: &[Node<'_>], index: &str) -> BTreeSet<String> {
    let mut indexed = BTreeSet::from([index.to_string()]);
    for _ in 0..4 {
        for s in pre {
            let conditional = s.kind() == "if_statement"
                && s.child_by_field_name("condition")
                    .is_some_and(|c| reads(src, c, &indexed));
            walk(*s, &mut |n| {
                if let Some((l, r)) = sets(n) {
                    if conditional || reads(src, r, &indexed) {
                        indexed.insert(base(src, l));
                    }
                }
                true
            });
        }
    }
    indexed
}

/// The names a statement declares or assigns.
fn written(src: &str, s: Node<'_>) -> Vec<String> {
    let mut out = Vec::new();
    walk(s, &mut |n| {
        let l = match n.kind() {
            "init_declarator" => n.child_by_field_name("declarator"),
            "assignment_expression" | "update_expression" => n
                .child_by_field_name("left")
                .or_else(|| n.child_by_field_name("argument")),
            _ => None,
        };
        out.extend(
            l.filter(|l| l.kind() == "identifier")
                .map(|l| text(src, l).to_string()),
        );
        true
    });
    out
}

fn read_by(src: &str, stmts: &[Node<'_>], names: &[String]) -> bool {
    stmts.iter().any(|s| {
        let mut found = false;
        walk(*s, &mut |x| {
            found |= x.kind() == "identifier" && names.iter().any(|n| n == text(src, x));
            !found
        });
        found
    })
}

/// The value's statements: `T v = E;` (one declarator), or `T v = 0;` then
/// `if (C) v = E;` (no else), and nothing else that the combine reads.
#[allow(clippy::type_complexity)]
fn value_statements<'t>(
    src: &str,
    value: &[Node<'t>],
) -> Result<(String, String, Node<'t>, Option<Node<'t>>), String> {
    let decl = *value
        .first()
        .filter(|d| d.kind() == "declaration")
        .ok_or("the combine reads no per-thread value declared after the index")?;
    let [d] = named_children(decl)
        .into_iter()
        .filter(|c| c.kind() == "init_declarator")
        .collect::<Vec<_>>()[..]
    else {
        return Err(format!("`{}` does not declare one value", text(src, decl)));
    };
    let (name, init) = (
        d.child_by_field_name("declarator"),
        d.child_by_field_name("value"),
    );
    let (Some(name), Some(init)) = (name.filter(|n| n.kind() == "identifier"), init) else {
        return Err(format!("`{}` does not declare one value", text(src, decl)));
    };
    let ty = text(
        src,
        decl.child_by_field_name("type")
            .ok_or("a declaration without a type")?,
    );
    let var = text(src, name).to_string();
    match value.len() {
        1 => Ok((var, ty.to_string(), init, None)),
        2 if is_zero(src, init) => {
            let (guard, term) = guarded_set(src, value[1], &var)
                .ok_or_else(|| format!("`{}` is not `if (C) {var} = E;`", text(src, value[1])))?;
            Ok((var, ty.to_string(), term, Some(guard)))
        }
        _ => Err(format!("the per-thread value `{var}` is set by more than `{var} = E` (or `if (C) {var} = E`) just before the combine")),
    }
}

/// `(C, E)` of `if (C) v = E;` (braces allowed, no else).
fn guarded_set<'t>(src: &str, s: Node<'t>, var: &str) -> Option<(Node<'t>, Node<'t>)> {
    if s.kind() != "if_statement" || s.child_by_field_name("alternative").is_some() {
        return None;
    }
    let mut b = s.child_by_field_name("consequence")?;
    if b.kind() == "compound_statement" {
        let [only] = named_children(b)[..] else {
            return None;
        };
        b = only;
    }
    let e = b
        .named_child(0)
        .filter(|e| e.kind() == "assignment_expression")?;
    let op = e.child_by_field_name("operator").map(|o| text(src, o));
    let left = e.child_by_field_name("left").map(|l| text(src, l));
    (b.kind() == "expression_statement" && op == Some("=") && left == Some(var)).then_some(())?;
    Some((
        s.child_by_field_name("condition")?,
        e.child_by_field_name("right")?,
    ))
}

fn is_zero(src: &str, e: Node<'_>) -> bool {
    matches!(
        text(src, e).trim(),
        "0" | "0.0" | "0.0f" | "0.f" | "0u" | "0.0F"
    )
}

/// The names that hold summed values: `v`, the shared arrays, and every local the combine
/// assigns from them.
fn data_names(
    src: &str,
    combine: &[Node<'_>],
    var: &str,
    shared: &BTreeSet<String>,
) -> BTreeSet<String> {
    let mut data: BTreeSet<String> = shared.clone();
    data.insert(var.to_string());
    for _ in 0..4 {
        for s in combine {
            walk(*s, &mut |n| {
                if let Some((l, r)) = sets(n) {
                    if reads(src, r, &data) {
                        data.insert(base(src, l));
                    }
                }
                true
            });
        }
    }
    data
}

/// A call's function name and arguments.
fn call_parts<'s, 't>(src: &'s str, e: Node<'t>) -> (&'s str, Vec<Node<'t>>) {
    let f = e
        .child_by_field_name("function")
        .map_or("", |f| &src[f.byte_range()]);
    let args = e
        .child_by_field_name("arguments")
        .map(named_children)
        .unwrap_or_default();
    (f, args)
}

/// What a declaration with a value or an assignment sets, and from what.
fn sets(n: Node<'_>) -> Option<(Node<'_>, Node<'_>)> {
    match n.kind() {
        "init_declarator" => n
            .child_by_field_name("declarator")
            .zip(n.child_by_field_name("value")),
        "assignment_expression" => n
            .child_by_field_name("left")
            .zip(n.child_by_field_name("right")),
        _ => None,
    }
}

fn base(src: &str, l: Node<'_>) -> String {
    match l.kind() {
        "subscript_expression" => l
            .child_by_field_name("argument")
            .map_or_else(String::new, |a| base(src, a)),
        _ => text(src, l).to_string(),
    }
}

fn reads(src: &str, n: Node<'_>, names: &BTreeSet<String>) -> bool {
    let mut found = false;
    walk(n, &mut |x| {
        found |= x.kind() == "identifier" && names.contains(text(src, x));
        !found
    });
    found
}

/// Refuses a combine statement that is not a sum of the threads' values (module doc).
fn summed(
    src: &str,
    s: Node<'_>,
    data: &BTreeSet<String>,
    dependent: &BTreeSet<String>,
) -> Result<(), String> {
    let clean = |n: Node<'_>| !reads(src, n, data) && !block_dependent(src, n, dependent);
    let bad = |n: Node<'_>| {
        Err(format!(
            "the combine's `{}` is not a plain sum of the threads' values",
            text(src, n)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        ))
    };
    match s.kind() {
        "compound_statement" => named_children(s)
            .into_iter()
            .try_for_each(|c| summed(src, c, data, dependent)),
        "comment" => Ok(()),
        "if_statement" | "for_statement" | "while_statement" => {
            for f in ["condition", "initializer", "update"] {
                if let Some(c) = s.child_by_field_name(f) {
                    if !clean(c) {
                        return bad(c);
                    }
                }
            }
            for f in ["consequence", "alternative", "body"] {
                if let Some(b) = s.child_by_field_name(f) {
                    summed(src, b, data, dependent)?;
                }
            }
            Ok(())
        }
        "else_clause" => named_children(s)
            .into_iter()
            .try_for_each(|c| summed(src, c, data, dependent)),
        "declaration" => {
            for d in named_children(s)
                .into_iter()
                .filter(|d| d.kind() == "init_declarator")
            {
                let (Some(l), Some(r)) = (
                    d.child_by_field_name("declarator"),
                    d.child_by_field_name("value"),
                ) else {
                    continue;
                };
                let ok = if data.contains(&base(src, l)) {
                    linear(src, r, data, &clean)
                } else {
                    clean(r)
                };
                if !ok {
                    return bad(d);
                }
            }
            Ok(())
        }
        "expression_statement" => match s.named_child(0) {
            None => Ok(()),
            Some(e) if statement_sums(src, e, data, &clean) => Ok(()),
            Some(e) => bad(e),
        },
        _ => bad(s),
    }
}

/// An expression statement of the combine: an assignment (a value's: `=`/`+=` of a
/// linear term at a clean index; another's: clean), a barrier, or `atomicAdd(OUT, linear)`.
fn statement_sums(
    src: &str,
    e: Node<'_>,
    data: &BTreeSet<String>,
    clean: &dyn Fn(Node<'_>) -> bool,
) -> bool {
    match e.kind() {
        "assignment_expression" => {
            let (Some(l), Some(r), Some(op)) = (
                e.child_by_field_name("left"),
                e.child_by_field_name("right"),
                e.child_by_field_name("operator"),
            ) else {
                return false;
            };
            if !data.contains(&base(src, l)) {
                return clean(e);
            }
            let index_clean = l
                .child_by_field_name("indices")
                .or_else(|| l.child_by_field_name("index"))
                .is_none_or(clean);
            matches!(text(src, op), "=" | "+=") && index_clean && linear(src, r, data, clean)
        }
        "update_expression" => clean(e),
        "call_expression" => {
            let (f, args) = call_parts(src, e);
            match (f, args.as_slice()) {
                ("__syncthreads" | "__syncwarp", _) => args.iter().all(|a| clean(*a)),
                ("atomicAdd", [out, v]) => clean(*out) && linear(src, *v, data, clean),
                _ => false,
            }
        }
        _ => false,
    }
}

/// Whether `e` is a sum of values with clean selectors: a value name, a value array at a
/// clean index, zero, `a + b`, `a * c`, `c * a` and `a / c` with a clean `c`, `c ? a : b`
/// with a clean `c`, a cast, a shuffle of a linear value with clean lanes.
fn linear(
    src: &str,
    e: Node<'_>,
    data: &BTreeSet<String>,
    clean: &dyn Fn(Node<'_>) -> bool,
) -> bool {
    match e.kind() {
        "parenthesized_expression" => e
            .named_child(0)
            .is_some_and(|x| linear(src, x, data, clean)),
        "number_literal" => is_zero(src, e),
        "identifier" => data.contains(text(src, e)),
        "subscript_expression" => {
            let index = e
                .child_by_field_name("indices")
                .or_else(|| e.child_by_field_name("index"));
            let array = e.child_by_field_name("argument");
            array.is_some_and(|a| a.kind() == "identifier" && data.contains(text(src, a)))
                && index.is_some_and(clean)
        }
        "binary_expression" => {
            let (Some(l), Some(r)) = (
                e.child_by_field_name("left"),
                e.child_by_field_name("right"),
            ) else {
                return false;
            };
            match e.child_by_field_name("operator").map(|o| text(src, o)) {
                Some("+") => linear(src, l, data, clean) && linear(src, r, data, clean),
                Some("*") => {
                    (linear(src, l, data, clean) && clean(r))
                        || (clean(l) && linear(src, r, data, clean))
                }
                Some("/") => linear(src, l, data, clean) && clean(r),
                _ => false,
            }
        }
        "conditional_expression" => {
            e.child_by_field_name("condition").is_some_and(clean)
                && e.child_by_field_name("consequence")
                    .is_some_and(|x| linear(src, x, data, clean))
                && e.child_by_field_name("alternative")
                    .is_some_and(|x| linear(src, x, data, clean))
        }
        "cast_expression" => e
            .child_by_field_name("value")
            .is_some_and(|x| linear(src, x, data, clean)),
        "call_expression" => {
            let (f, args) = call_parts(src, e);
            f.starts_with("__shfl")
                && f.ends_with("_sync")
                && args.len() >= 3
                && linear(src, args[1], data, clean)
                && args.iter().enumerate().all(|(k, a)| k == 1 || clean(*a))
        }
        _ => false,
    }
}
