//! What a CUDA loop carries from one iteration to the next: each variable declared
//! outside the loop and assigned inside it, as an associative accumulator (a sum,
//! product, count, maximum or minimum of itself), a running prefix (such an accumulator
//! also read in the loop, after its update: `run += x[c]; y[c] = run;`), or something
//! else (an online rescale, an argmax's index). The strategist reads it in the facts;
//! the cures decide with their own analysis of the same tree. Pure: tree in, list out.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use tree_sitter::Node;

use super::cuda::declared_name;
use super::lanes::{named_children, node_text as text, MAX_DEPTH};

/// One variable a loop carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Carried {
    pub name: String,
    /// `sum`, `product`, `count`, `max`, `min`, `prefix sum`, or `other`.
    pub kind: String,
}

/// The variables `l` (a `for`, `while` or `do` loop) carries, in order of first update.
pub fn carried(src: &str, l: Node<'_>) -> Vec<Carried> {
    let Some(body) = l.child_by_field_name("body") else {
        return Vec::new();
    };
    let locals = declared_in(src, l);
    let var = loop_var(src, l);
    let mut out: Vec<Carried> = Vec::new();
    let mut updates: BTreeSet<usize> = BTreeSet::new();
    walk(body, &mut |n| {
        let Some((name, kind)) = update_of(src, n) else {
            return true;
        };
        if locals.contains(&name) || Some(&name) == var.as_ref() {
            return true;
        }
        updates.insert(n.id());
        match out.iter_mut().find(|c| c.name == name) {
            Some(c) if c.kind != kind => c.kind = "other".into(),
            Some(_) => {}
            None => out.push(Carried { name, kind }),
        }
        false
    });
    // An accumulator read outside its own updates is a running value: a prefix for a
    // sum, otherwise something no combine reproduces.
    for c in &mut out {
        let mut read_after = false;
        walk(body, &mut |n| {
            if updates.contains(&n.id()) {
                return false;
            }
            read_after |= n.kind() == "identifier" && text(src, n) == c.name;
            !read_after
        });
        if read_after {
            c.kind = if c.kind == "sum" {
                "prefix sum"
            } else {
                "other"
            }
            .into();
        }
    }
    out
}

/// An update of a variable in `n`, with its kind: `s += e`, `s = s + e`, `s *= e`,
/// `s++`, `s = fmaxf(s, e)`, `s = max(s, e)`, `s = e > s ? e : s`, `if (e > s) s = e;`.
fn update_of(src: &str, n: Node<'_>) -> Option<(String, String)> {
    match n.kind() {
        "update_expression" => {
            let a = n.child_by_field_name("argument")?;
            (a.kind() == "identifier").then(|| (text(src, a).to_string(), "count".to_string()))
        }
        "assignment_expression" => {
            let left = n.child_by_field_name("left")?;
            if left.kind() != "identifier" {
                return None;
            }
            let name = text(src, left).to_string();
            let op = text(src, n.child_by_field_name("operator")?);
            let right = n.child_by_field_name("right")?;
            let kind = match op {
                "+=" | "-=" => "sum",
                "*=" => "product",
                "=" => plain_update(src, right, &name),
                _ => "other",
            };
            Some((name, kind.to_string()))
        }
        "if_statement" => {
            let cond = n.child_by_field_name("condition")?;
            let body = n.child_by_field_name("consequence")?;
            if n.child_by_field_name("alternative").is_some() || assignments(body) != 1 {
                return None;
            }
            // `if (c) s += e;` is a sum under a condition: its update is read below.
            let assign = first_assignment(body)
                .filter(|a| a.child_by_field_name("operator").map(|o| text(src, o)) == Some("="))?;
            let left = assign
                .child_by_field_name("left")
                .filter(|l| l.kind() == "identifier")?;
            let name = text(src, left).to_string();
            let c = text(src, cond);
            let kind = if !c.contains(name.as_str()) {
                "other"
            } else if c.contains('>') {
                "max"
            } else if c.contains('<') {
                "min"
            } else {
                "other"
            };
            Some((name, kind.to_string()))
        }
        _ => None,
    }
}

/// The kind of `name = right`.
fn plain_update(src: &str, right: Node<'_>, name: &str) -> &'static str {
    let names_it = |n: Node| text(src, n) == name;
    match right.kind() {
        "binary_expression" => {
            let (Some(a), Some(op), Some(b)) = (
                right.child_by_field_name("left"),
                right.child_by_field_name("operator"),
                right.child_by_field_name("right"),
            ) else {
                return "other";
            };
            match text(src, op) {
                "+" | "-" if names_it(a) => "sum",
                "+" if names_it(b) => "sum",
                "*" if names_it(a) || names_it(b) => "product",
                _ => "other",
            }
        }
        "call_expression" => {
            let f = right
                .child_by_field_name("function")
                .map_or("", |f| text(src, f));
            let args = right
                .child_by_field_name("arguments")
                .map_or(String::new(), |a| text(src, a).to_string());
            let mentions = args
                .split(|c: char| !c.is_alphanumeric() && c != '_')
                .any(|w| w == name);
            match f {
                "fmaxf" | "fmax" | "max" | "__hmax" if mentions => "max",
                "fminf" | "fmin" | "min" | "__hmin" if mentions => "min",
                _ => "other",
            }
        }
        "conditional_expression" => {
            let c = right
                .child_by_field_name("condition")
                .map_or("", |c| text(src, c));
            if !c.contains(name) {
                "other"
            } else if c.contains('>') {
                "max"
            } else {
                "min"
            }
        }
        _ => "other",
    }
}

fn assignments(n: Node<'_>) -> usize {
    let mut count = 0;
    walk(n, &mut |x| {
        count += usize::from(matches!(
            x.kind(),
            "assignment_expression" | "update_expression"
        ));
        true
    });
    count
}

fn first_assignment(n: Node<'_>) -> Option<Node<'_>> {
    let mut found = None;
    walk(n, &mut |x| {
        if found.is_none() && x.kind() == "assignment_expression" {
            found = Some(x);
        }
        found.is_none()
    });
    found
}

/// Names declared inside the loop (its header included).
fn declared_in(src: &str, l: Node<'_>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    walk(l, &mut |n| {
        if n.kind() == "init_declarator" || n.kind() == "declaration" {
            if let Some(name) = n
                .child_by_field_name("declarator")
                .and_then(|d| declared_name(src, d))
            {
                out.insert(name);
            }
        }
        true
    });
    out
}

/// The loop variable: what a `for`'s update names (`c++`, `c += 2`), or the left side of
/// a `while`'s comparison (`i < n`).
fn loop_var(src: &str, l: Node<'_>) -> Option<String> {
    if l.kind() == "while_statement" {
        let c = l.child_by_field_name("condition")?;
        let c = c.named_child(0).unwrap_or(c);
        let left = c.child_by_field_name("left")?;
        return (left.kind() == "identifier").then(|| text(src, left).to_string());
    }
    let u = l.child_by_field_name("update")?;
    let target = u
        .child_by_field_name("argument")
        .or_else(|| u.child_by_field_name("left"))?;
    (target.kind() == "identifier").then(|| text(src, target).to_string())
}

/// Every node under `n`, pre-order, while `f` says go on; no deeper than
/// [`MAX_DEPTH`] (deeper input is left out, never a stack overflow).
fn walk<'t>(n: Node<'t>, f: &mut dyn FnMut(Node<'t>) -> bool) {
    let mut stack = vec![(n, 0usize)];
    while let Some((x, depth)) = stack.pop() {
        if !f(x) || depth >= MAX_DEPTH {
            continue;
        }
        let kids = named_children(x);
        stack.extend(kids.into_iter().rev().map(|k| (k, depth + 1)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loops(src: &str) -> Vec<String> {
        let mut p = tree_sitter::Parser::new();
        p.set_language(&tree_sitter_cuda::LANGUAGE.into())
            .expect("grammar");
        let tree = p.parse(src, None).expect("parses");
        let mut out = Vec::new();
        walk(tree.root_node(), &mut |n| {
            if matches!(n.kind(), "for_statement" | "while_statement") {
                let c: Vec<String> = carried(src, n)
                    .into_iter()
                    .map(|c| format!("{} {}", c.kind, c.name))
                    .collect();
                out.push(c.join(", "));
            }
            true
        });
        out
    }

    #[test]
    fn accumulators_prefixes_and_other_carried_values() {
        let src = r#"
__global__ void k(const float* x, float* y, int n, int* idx) {
    float s = 0, m = -1e30f, run = 0, p = 1, lo = 1e30f;
    int cnt = 0, best = 0;
    for (int c = 0; c < n; c++) { s += x[c]; m = fmaxf(m, x[c]); if (x[c] > 0) cnt++; }
    for (int c = 0; c < n; c++) { run += x[c]; y[c] = run; }
    for (int c = 0; c < n; ++c) { p = p * x[c]; lo = x[c] < lo ? x[c] : lo; }
    for (int c = 0; c < n; ++c) { if (x[c] > m) { m = x[c]; best = c; } }
    int i = 0;
    while (i < n) { float v = x[i]; s = s + v; i++; }
    for (int c = 0; c < n; ++c) y[c] = x[c];
    for (int c = 0; c < n; c += 4) { if (c < n) { float v = x[c]; s += v * v; } }
}
"#;
        assert_eq!(
            loops(src),
            [
                "sum s, max m, count cnt",
                "prefix sum run",
                "product p, min lo",
                "other m, other best",
                "sum s",
                "",
                "sum s"
            ]
        );
    }
}
