//! Sizes the kernel keeps in locals, and the divisions of a flat index by their
//! products. [`uniform_locals`] finds the locals that are the same in every thread:
//! declared once at the top of the body, never written, and made of parameters, macros,
//! literals and earlier such locals (`int OW = W * R;`, `long long total =
//! (long long)N * C * H * W;`). [`sizes_written_out`] writes their reads as their
//! values, and a division of the flat index by a product that has another of its
//! divisors as factors as two divisions: `o / ((long long)OW * OH)`, with `o % OW`
//! elsewhere, becomes `(o / OW) / ((long long)OH)`. That is the same value for a
//! non-negative index and positive sizes, and the shape `delinearize` reads (one
//! divisor, the row split further per block).

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::edits::Edits;
use super::elementwise::{is_one_d_index, without_int_casts};
use super::spec_expr::{split_top, strip_parens};
use super::tree::{
    assigned_names, identifiers_replaced, kernel_function, named_children, text, walk,
};
use super::{with_text, RewriteContext};
use crate::syntax::ByteRange;

/// The locals of `func` that hold the same value in every thread, in declaration order:
/// (name, the node of its value).
pub(super) fn uniform_locals<'t>(src: &str, func: Node<'t>) -> Vec<(String, Node<'t>)> {
    let mut out: Vec<(String, Node<'t>)> = Vec::new();
    let Some(body) = func.child_by_field_name("body") else {
        return out;
    };
    let counts = declaration_counts(src, body);
    let written = assigned_names(src, &[body]);
    for d in named_children(body) {
        if d.kind() != "declaration" {
            continue;
        }
        let mut c = d.walk();
        for x in d.children_by_field_name("declarator", &mut c) {
            let (Some(name), Some(value)) = (
                x.child_by_field_name("declarator")
                    .filter(|n| n.kind() == "identifier"),
                x.child_by_field_name("value"),
            ) else {
                continue;
            };
            let name = text(src, name).to_string();
            let known: BTreeSet<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
            if counts.get(&name) == Some(&1)
                && !written.contains(&name)
                && plain_of(src, value, &counts, &known)
            {
                out.push((name, value));
            }
        }
    }
    out
}

/// How many times each name is declared in `body` (any depth, `for` headers included).
fn declaration_counts(src: &str, body: Node<'_>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    walk(body, &mut |n| {
        if n.kind() == "declaration" {
            let mut c = n.walk();
            for mut x in n.children_by_field_name("declarator", &mut c) {
                while let Some(inner) = x.child_by_field_name("declarator") {
                    x = inner;
                }
                *out.entry(text(src, x).to_string()).or_insert(0) += 1;
            }
        }
        true
    });
    out
}

/// Whether `value` reads no memory, calls nothing, reads no built-in (`blockIdx.x`) and
/// names no local but `uniform` ones.
fn plain_of(
    src: &str,
    value: Node<'_>,
    locals: &BTreeMap<String, usize>,
    uniform: &BTreeSet<&str>,
) -> bool {
    let mut ok = true;
    walk(value, &mut |n| {
        ok &= !matches!(
            n.kind(),
            "subscript_expression"
                | "pointer_expression"
                | "call_expression"
                | "field_expression"
                | "assignment_expression"
                | "update_expression"
        );
        let t = text(src, n);
        ok &= !(n.kind() == "identifier" && locals.contains_key(t) && !uniform.contains(t));
        ok
    });
    ok
}

/// The file text with the kernel's uniform locals read as their values and its flat
/// index's divisions by products split; None when neither changes anything.
pub(super) fn sizes_written_out(cx: &RewriteContext<'_>) -> Option<String> {
    let expanded = locals_written_out(cx);
    let mut cur = expanded.clone().unwrap_or_else(|| cx.text.to_string());
    let mut split = false;
    for _ in 0..ROUNDS {
        match with_text(cx.lang, &cur, &cx.kernel.name, cx.params, products_split).flatten() {
            Some(t) => (cur, split) = (t, true),
            None => break,
        }
    }
    if split {
        Some(cur)
    } else {
        expanded
    }
}

/// At most this many levels of a product are split off (`i / (A * B * C)` takes two).
const ROUNDS: usize = 4;

/// Every read of a uniform local, outside its own declarator, as `(value)` with the
/// earlier ones inside it written out too.
fn locals_written_out(cx: &RewriteContext<'_>) -> Option<String> {
    let func = kernel_function(cx)?;
    let locals = uniform_locals(cx.text, func);
    if locals.is_empty() {
        return None;
    }
    let mut values: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in &locals {
        let v = identifiers_replaced(cx.text, *value, &values)?;
        values.insert(name.clone(), format!("({v})"));
    }
    let body = func.child_by_field_name("body")?;
    let mut reps: Vec<(ByteRange, String)> = Vec::new();
    walk(body, &mut |n| {
        if is_declarator_name(n) {
            return false;
        }
        if n.kind() == "identifier" {
            if let Some(v) = values.get(text(cx.text, n)) {
                reps.push((n.byte_range(), v.clone()));
            }
        }
        true
    });
    if reps.is_empty() {
        return None;
    }
    Edits::from_pairs(reps).apply(cx.text).ok()
}

/// Whether `n` is the name an `init_declarator` declares.
fn is_declarator_name(n: Node<'_>) -> bool {
    n.parent().is_some_and(|p| {
        p.kind() == "init_declarator"
            && p.child_by_field_name("declarator")
                .is_some_and(|d| d.id() == n.id())
    })
}

/// The normalized factors of a product: `(long long)(W * R) * H` is [`R`, `H`, `W`]
/// (sorted), each factor's own product flattened.
pub(super) fn factors(expr: &str) -> Vec<String> {
    let e = without_int_casts(expr);
    let e = strip_parens(&e).to_string();
    let parts = split_top(&e, b'*');
    if parts.len() == 1 {
        return vec![e];
    }
    let mut out: Vec<String> = parts
        .into_iter()
        .flat_map(|r| factors(strip_parens(&e[r])))
        .collect();
    out.sort();
    out
}

/// `big` without the factors of `small`, when it holds them all and more.
pub(super) fn without(big: &[String], small: &[String]) -> Option<Vec<String>> {
    let mut rest = big.to_vec();
    for f in small {
        let at = rest.iter().position(|r| r == f)?;
        rest.remove(at);
    }
    (!rest.is_empty()).then_some(rest)
}

/// Each `i / P` of the kernel's flat index `i` whose product P holds the factors of
/// another divisor D of `i` (the largest such) written `(i / D) / ((T)REST)`.
fn products_split(cx: &RewriteContext<'_>) -> Option<String> {
    let func = kernel_function(cx)?;
    let (i, ty) = thread_index(cx.text, func)?;
    let i = i.as_str();
    let mut divs: Vec<(Node<'_>, &str, Node<'_>)> = Vec::new();
    walk(func.child_by_field_name("body")?, &mut |n| {
        if n.kind() == "binary_expression" {
            let parts = (
                n.child_by_field_name("left"),
                n.child_by_field_name("operator"),
                n.child_by_field_name("right"),
            );
            if let (Some(l), Some(op), Some(r)) = parts {
                let op = text(cx.text, op);
                let left = without_int_casts(text(cx.text, l));
                if (op == "/" || op == "%") && strip_parens(&left) == i {
                    divs.push((n, op, r));
                }
            }
        }
        true
    });
    let all: Vec<Vec<String>> = divs
        .iter()
        .map(|(_, _, r)| factors(text(cx.text, *r)))
        .collect();
    let mut reps = Vec::new();
    for ((n, op, _), fs) in divs.iter().zip(&all) {
        if *op != "/" {
            continue;
        }
        let inner = all
            .iter()
            .zip(&divs)
            .filter_map(|(small, (_, _, sr))| Some((without(fs, small)?, small.len(), *sr)))
            .max_by_key(|(_, len, _)| *len);
        if let Some((rest, _, sr)) = inner {
            let d = strip_parens(text(cx.text, sr));
            let t = &ty;
            let plain = d.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            let d = if plain {
                d.to_string()
            } else {
                format!("({d})")
            };
            let new = format!("({i} / {d}) / (({t}){})", rest.join(" * "));
            reps.push((n.byte_range(), new));
        }
    }
    if reps.is_empty() {
        return None;
    }
    Edits::from_pairs(reps).apply(cx.text).ok()
}

#[cfg(test)]
mod tests;

/// The name and type of the kernel's 1-D thread index: the first declaration at the top
/// of its body whose value is `blockIdx.x * blockDim.x + threadIdx.x` (casts allowed).
fn thread_index(src: &str, func: Node<'_>) -> Option<(String, String)> {
    named_children(func.child_by_field_name("body")?)
        .into_iter()
        .filter(|d| d.kind() == "declaration")
        .find_map(|d| {
            let ds = named_children(d);
            let x = ds.iter().find(|x| x.kind() == "init_declarator")?;
            let value: String = text(src, x.child_by_field_name("value")?)
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect();
            let name = x.child_by_field_name("declarator")?;
            (is_one_d_index(&value) && name.kind() == "identifier").then(|| {
                let ty = text(src, d.child_by_field_name("type")?).to_string();
                Some((text(src, name).to_string(), ty))
            })?
        })
}
