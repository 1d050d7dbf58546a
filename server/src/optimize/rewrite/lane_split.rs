//! Strength-reduced index splits in the per-lane copies that `vectorize`, `coarsen`,
//! `vectorize_groups` and `vectorize_rows` write. A thread that handles V consecutive
//! elements runs the element statements once per lane with the index `i` replaced by
//! `V * i + k` (k = 0..V-1). Where a statement splits the index with a run-time
//! division, `i / D` or `i % D` (the index bare as the left operand, parentheses and
//! integer casts allowed), and D % V == 0, the V lanes share the quotient:
//! `(V*i + k) / D == (V*i) / D` and `(V*i + k) % D == (V*i) % D + k`. So each lane is
//! written that way, the compiler computes each division once per thread, and
//! `D % V == 0` joins the vector path's run-time condition (the scalar path stays as
//! written, so sizes that V does not divide still run there).
//!
//! Why it holds: in the vector path `a = V*i >= 0` and `|D|` are multiples of V, so
//! `a % |D|` is a multiple of V below `|D|`, at most `|D| - V`, and `a + k` (k < V)
//! stays below the next multiple of `|D|`. C truncates toward zero and `a + k >= 0`,
//! so this holds for negative D too; where the usual conversions make D unsigned it
//! becomes `2^N + D`, still a multiple of V because V is a power of two. D = 0 divides
//! by zero in the original as well.
//!
//! Only a divisor whose value is fixed where the condition is read is reduced: integer
//! literals (a multiple of V is reduced with no condition, any other is left as is) and
//! expressions of `+ - * / % << >>`, integer casts and integer-typed names that are
//! parameters or locals declared at the kernel's top level before the rewritten part,
//! none assigned anywhere in the kernel or declared twice. Any other division stays as
//! written (still correct, just not reduced).

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::elementwise::{without_int_casts, INDEX_CASTS};
use super::spec_expr::strip_parens;
use super::tree::{named_children, render, text, walk, written_target};
use crate::syntax::ByteRange;

/// One reducible division: the whole expression, the lane name in its left operand,
/// whether it is a `%`, and the run-time condition it needs (None for a literal).
struct Split {
    at: ByteRange,
    lane: ByteRange,
    rem: bool,
    cond: Option<String>,
}

/// The reducible divisions of the element statements for lane index `x` and width V.
pub(super) struct Splits {
    x: String,
    v: usize,
    found: Vec<Split>,
}

impl Splits {
    /// The divisions under `roots` (outside the `covered` ranges, which the caller
    /// replaces whole) that may be reduced; `fixed` from [`fixed_integers`].
    pub fn find(
        src: &str,
        roots: &[Node<'_>],
        x: &str,
        v: usize,
        fixed: &BTreeSet<String>,
        covered: &[ByteRange],
    ) -> Splits {
        let mut found = Vec::new();
        for r in roots.iter().filter(|_| v.is_power_of_two()) {
            walk(*r, &mut |n| {
                if is_covered(&n.byte_range(), covered) {
                    return false;
                }
                found.extend(split_at(src, n, x, v, fixed));
                true
            });
        }
        Splits {
            x: x.to_string(),
            v,
            found,
        }
    }

    /// The run-time conditions of the divisions `keep` picks by range, once each.
    pub fn conditions(&self, keep: &dyn Fn(&ByteRange) -> bool) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in self.found.iter().filter(|s| keep(&s.at)) {
            if let Some(c) = c.cond.as_ref().filter(|c| !out.contains(c)) {
                out.push(c.clone());
            }
        }
        out
    }

    /// Lane `k`'s replacements for the uses of the lane index under `roots` outside
    /// `covered`: `(V * x + k)`, or in a reduced division `(V * x)` (and `+ k` after a
    /// reduced `%`).
    pub fn lane(
        &self,
        src: &str,
        roots: &[Node<'_>],
        k: usize,
        covered: &[ByteRange],
    ) -> Vec<(ByteRange, String)> {
        let (x, v) = (&self.x, self.v);
        let base = format!("({v} * {x})");
        let own = match k {
            0 => base.clone(),
            _ => format!("({v} * {x} + {k})"),
        };
        let mut out = Vec::new();
        for r in roots {
            walk(*r, &mut |n| {
                let q = n.byte_range();
                if is_covered(&q, covered) {
                    return false;
                }
                if let Some(s) = self.found.iter().find(|s| s.at == q && s.rem && k > 0) {
                    let whole = render(src, &q, &[(s.lane.clone(), base.clone())]);
                    let sum = format!("{} + {k}", whole.unwrap_or_default());
                    let in_parens = n
                        .parent()
                        .is_some_and(|p| p.kind() == "parenthesized_expression");
                    out.push((q, if in_parens { sum } else { format!("({sum})") }));
                    return false;
                }
                if n.kind() == "identifier" && text(src, n) == x {
                    let reduced = self.found.iter().any(|s| s.lane == q);
                    out.push((q, if reduced { base.clone() } else { own.clone() }));
                }
                true
            });
        }
        out
    }
}

fn is_covered(q: &ByteRange, covered: &[ByteRange]) -> bool {
    covered.iter().any(|c| c.start <= q.start && q.end <= c.end)
}

/// `n` as a reducible division of the bare lane `x`, if it is one.
fn split_at(src: &str, n: Node<'_>, x: &str, v: usize, fixed: &BTreeSet<String>) -> Option<Split> {
    if n.kind() != "binary_expression" {
        return None;
    }
    let rem = match text(src, n.child_by_field_name("operator")?) {
        "/" => false,
        "%" => true,
        _ => return None,
    };
    let left = n.child_by_field_name("left")?;
    if bare(&without_int_casts(text(src, left))) != x {
        return None;
    }
    let mut lane = None;
    walk(left, &mut |m| {
        if m.kind() == "identifier" && text(src, m) == x {
            lane = Some(m.byte_range());
        }
        true
    });
    let cond = divisor_condition(src, n.child_by_field_name("right")?, v, fixed)?;
    Some(Split {
        at: n.byte_range(),
        lane: lane?,
        rem,
        cond,
    })
}

/// `s` without its enclosing parentheses, all levels.
fn bare(s: &str) -> &str {
    let mut s = s.trim();
    while strip_parens(s) != s {
        s = strip_parens(s);
    }
    s
}

/// Whether a division by `d` may be reduced for width V: `Some(None)` for a literal
/// multiple of V (no condition), `Some(Some(c))` with the run-time condition `D % V ==
/// 0` for a divisor fixed where the condition is read, None otherwise.
fn divisor_condition(
    src: &str,
    d: Node<'_>,
    v: usize,
    fixed: &BTreeSet<String>,
) -> Option<Option<String>> {
    let t = text(src, d);
    if let Some(lit) = int_literal(bare(&without_int_casts(t))) {
        return (lit > 0 && lit % v as u128 == 0).then_some(None);
    }
    if !is_fixed_integer(src, d, fixed) {
        return None;
    }
    let shown = match d.kind() {
        "identifier" | "parenthesized_expression" => t.to_string(),
        _ => format!("({t})"),
    };
    Some(Some(format!("{shown} % {v} == 0")))
}

/// `d` is integer arithmetic on integer literals and the `fixed` names.
fn is_fixed_integer(src: &str, d: Node<'_>, fixed: &BTreeSet<String>) -> bool {
    let mut ok = true;
    walk(d, &mut |n| {
        if !n.is_named() || !ok {
            return ok;
        }
        let t = text(src, n);
        ok = match n.kind() {
            "identifier" => fixed.contains(t),
            "number_literal" => int_literal(t).is_some(),
            "parenthesized_expression" => true,
            "binary_expression" => n
                .child_by_field_name("operator")
                .is_some_and(|o| matches!(text(src, o), "+" | "-" | "*" | "/" | "%" | "<<" | ">>")),
            "cast_expression" => n
                .child_by_field_name("type")
                .is_some_and(|ty| is_int_type(text(src, ty))),
            "type_descriptor" => return false,
            _ => false,
        };
        ok
    });
    ok
}

/// The value of an integer literal (`8`, `8u`, `0x10`, `010`, `16ULL`).
fn int_literal(t: &str) -> Option<u128> {
    let digits = t.trim_end_matches(['u', 'U', 'l', 'L']);
    if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        return u128::from_str_radix(hex, 16).ok();
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) || digits.is_empty() {
        return None;
    }
    match digits.len() > 1 && digits.starts_with('0') {
        true => u128::from_str_radix(&digits[1..], 8).ok(),
        false => digits.parse().ok(),
    }
}

/// An integer type an index or size is written in (`int`, `const size_t`, `unsigned
/// int`, `int64_t`), qualifiers and whitespace ignored.
fn is_int_type(t: &str) -> bool {
    let plain: String = t
        .split_whitespace()
        .filter(|w| !matches!(*w, "const" | "__restrict__" | "volatile"))
        .collect();
    INDEX_CASTS.contains(&plain.as_str()) || plain == "short" || plain == "unsignedshort"
}

/// The integer-typed names whose value is fixed from byte `at` of the kernel `func` on,
/// so that a condition standing there reads what the statements after it read:
/// parameters and locals declared at the body's top level before `at`, none assigned
/// anywhere in the kernel or declared twice (a shadowing local would read another
/// value), less the lane index `x`.
pub(super) fn fixed_integers(src: &str, func: Node<'_>, at: usize, x: &str) -> BTreeSet<String> {
    let Some(body) = func.child_by_field_name("body") else {
        return BTreeSet::new();
    };
    let mut typed: BTreeMap<String, bool> = BTreeMap::new();
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for (name, int) in parameters(src, func) {
        *count.entry(name.clone()).or_default() += 1;
        typed.insert(name, int);
    }
    let top: BTreeSet<usize> = named_children(body)
        .iter()
        .filter(|s| s.end_byte() <= at)
        .map(|s| s.id())
        .collect();
    let mut assigned = BTreeSet::new();
    walk(body, &mut |n| {
        if n.kind() == "declaration" {
            for (name, int) in declared(src, n) {
                *count.entry(name.clone()).or_default() += 1;
                typed.insert(name, int && top.contains(&n.id()));
            }
        }
        if matches!(n.kind(), "assignment_expression" | "update_expression") {
            assigned.extend(written_target(n).map(|t| text(src, t).to_string()));
        }
        true
    });
    typed
        .into_iter()
        .filter(|(name, int)| *int && count[name] == 1 && !assigned.contains(name) && name != x)
        .map(|(name, _)| name)
        .collect()
}

/// The kernel's parameters: name, and whether it is a plain integer (not a pointer).
fn parameters(src: &str, func: Node<'_>) -> Vec<(String, bool)> {
    let mut d = func.child_by_field_name("declarator");
    while let Some(f) = d.filter(|f| f.kind() != "function_declarator") {
        d = f.child_by_field_name("declarator");
    }
    let Some(params) = d.and_then(|f| f.child_by_field_name("parameters")) else {
        return Vec::new();
    };
    named_children(params)
        .into_iter()
        .filter(|p| p.kind() == "parameter_declaration")
        .filter_map(|p| {
            let name = p.child_by_field_name("declarator")?;
            let ty = text(src, p.child_by_field_name("type")?);
            let int = name.kind() == "identifier" && is_int_type(ty);
            Some((innermost_name(src, name), int))
        })
        .collect()
}

/// The names a declaration declares, and whether each is a plain integer.
fn declared(src: &str, decl: Node<'_>) -> Vec<(String, bool)> {
    let ty = decl
        .child_by_field_name("type")
        .map_or("", |t| text(src, t));
    let mut c = decl.walk();
    decl.children_by_field_name("declarator", &mut c)
        .map(|d| {
            let inner = match d.kind() {
                "init_declarator" => d.child_by_field_name("declarator").unwrap_or(d),
                _ => d,
            };
            let int = inner.kind() == "identifier" && is_int_type(ty);
            (innermost_name(src, inner), int)
        })
        .collect()
}

/// The identifier at the bottom of a declarator (`*p`, `a[4]`, `&r`).
fn innermost_name(src: &str, mut d: Node<'_>) -> String {
    while let Some(inner) = d.child_by_field_name("declarator") {
        d = inner;
    }
    text(src, d).to_string()
}

#[cfg(test)]
mod tests;
