//! Parts of a bounds check that are the same in every thread of a block, moved out of it
//! as an early exit of whole blocks: `int n = blockIdx.x * blockDim.x + threadIdx.x; if
//! (n < N && b < B) { ... }` with `int b = blockIdx.y;` declared before the index becomes
//! `if (b >= B) return; int n = ...; if (n < N) { ... }`, and `if (n >= N || b >= B)
//! return;` becomes `if (b >= B) return;` before the index and `if (n >= N) return;`. A
//! thread leaves in the normalized kernel exactly when it left or skipped the body in the
//! original, and the check left behind is the one comparison of the index the
//! elementwise, row and column rewrites read; a block-wide exit is met by all of a
//! block's threads, so the barriers those rewrites add stay safe. The dispatcher retries
//! a rewrite that refused the kernel on this text (see [`super::apply`]), after the
//! declarations between the index and the check have moved before the index.

use std::collections::BTreeMap;

use tree_sitter::Node;

use super::elementwise::{block_uniform_expr, is_one_d_index, is_plain_return};
use super::tree::{kernel_function, line_indent, named_children, text, walk};
use super::RewriteContext;

/// The file text with the block-uniform parts of the kernel's bounds check moved to an
/// early exit right before its 1-D thread index; None when there is no such part, or
/// nothing of the index's own check would be left.
pub(super) fn uniform_exit(cx: &RewriteContext<'_>) -> Option<String> {
    let src = cx.text;
    let func = kernel_function(cx)?;
    let stmts = named_children(func.child_by_field_name("body")?);
    let at = stmts.iter().position(|s| is_index(src, *s))?;
    let guard = *stmts[at + 1..].iter().find(|s| s.kind() != "comment")?;
    if guard.kind() != "if_statement" || guard.child_by_field_name("alternative").is_some() {
        return None;
    }
    let exits = guard
        .child_by_field_name("consequence")
        .is_some_and(is_plain_return);
    let op = if exits { "||" } else { "&&" };
    let cond = guard.child_by_field_name("condition")?;
    let parts = terms(src, cond.named_child(0)?, op);
    let varying = thread_varying(src, &stmts, at);
    let varying: Vec<&str> = varying.iter().map(String::as_str).collect();
    let (uniform, own): (Vec<Node>, Vec<Node>) = parts
        .into_iter()
        .partition(|p| block_uniform_expr(src, *p, &BTreeMap::new(), &varying));
    if uniform.is_empty() || own.is_empty() {
        return None;
    }
    let join = |ps: &[Node]| {
        ps.iter()
            .map(|p| text(src, *p))
            .collect::<Vec<_>>()
            .join(&format!(" {op} "))
    };
    let leave = if exits {
        join(&uniform)
    } else {
        negation(src, &uniform)
    };
    let indent = line_indent(src, stmts[at].start_byte());
    let c = cond.byte_range();
    let i = stmts[at].start_byte();
    Some(
        [
            &src[..i],
            &format!("if ({leave}) return;\n{indent}"),
            &src[i..c.start],
            &format!("({})", join(&own)),
            &src[c.end..],
        ]
        .concat(),
    )
}

/// Whether `s` declares the 1-D thread index.
fn is_index(src: &str, s: Node<'_>) -> bool {
    if s.kind() != "declaration" {
        return false;
    }
    let mut c = s.walk();
    let ds: Vec<Node> = s.children_by_field_name("declarator", &mut c).collect();
    matches!(ds.as_slice(), [d] if d
        .child_by_field_name("value")
        .is_some_and(|v| is_one_d_index(text(src, v))))
}

/// The operands of a chain of `op` (`a && b && c`), parentheses around the whole removed.
fn terms<'t>(src: &str, e: Node<'t>, op: &str) -> Vec<Node<'t>> {
    let e = if e.kind() == "parenthesized_expression" {
        e.named_child(0).unwrap_or(e)
    } else {
        e
    };
    let is_op = e.kind() == "binary_expression"
        && e.child_by_field_name("operator")
            .is_some_and(|o| text(src, o) == op);
    match (
        is_op,
        e.child_by_field_name("left"),
        e.child_by_field_name("right"),
    ) {
        (true, Some(l), Some(r)) => [terms(src, l, op), terms(src, r, op)].concat(),
        _ => vec![e],
    }
}

/// The condition under which none of `parts` all hold: one comparison flipped (`b < B`
/// is `b >= B`), else `!(a && b)`.
fn negation(src: &str, parts: &[Node<'_>]) -> String {
    const FLIP: [(&str, &str); 6] = [
        ("<", ">="),
        (">=", "<"),
        (">", "<="),
        ("<=", ">"),
        ("==", "!="),
        ("!=", "=="),
    ];
    if let [p] = parts {
        let (l, o, r) = (
            p.child_by_field_name("left"),
            p.child_by_field_name("operator").map(|o| text(src, o)),
            p.child_by_field_name("right"),
        );
        if let (Some(l), Some(o), Some(r)) = (l, o, r) {
            if let Some((_, f)) = FLIP.iter().find(|(a, _)| *a == o) {
                return format!("{} {f} {}", text(src, l), text(src, r));
            }
        }
    }
    let all: Vec<&str> = parts.iter().map(|p| text(src, *p)).collect();
    format!("!({})", all.join(" && "))
}

/// The names of the kernel body that may differ between the threads of a block: every
/// name declared at or after the index (`at`), and those declared before it from a value
/// that may differ (`int tx = threadIdx.x;`).
fn thread_varying(src: &str, stmts: &[Node<'_>], at: usize) -> Vec<String> {
    let mut varying = names_declared(src, &stmts[at..]);
    for s in stmts[..at].iter().filter(|s| s.kind() == "declaration") {
        let mut c = s.walk();
        for d in s.children_by_field_name("declarator", &mut c) {
            let names = names_declared_by(src, d);
            let locals: Vec<&str> = varying.iter().map(String::as_str).collect();
            let uniform = d
                .child_by_field_name("value")
                .is_some_and(|v| block_uniform_expr(src, v, &BTreeMap::new(), &locals));
            if !uniform {
                varying.extend(names);
            }
        }
    }
    varying
}

/// The name a declarator declares (through pointers and arrays).
fn names_declared_by(src: &str, d: Node<'_>) -> Option<String> {
    let mut d = d;
    while d.kind() != "identifier" {
        d = d.child_by_field_name("declarator")?;
    }
    Some(text(src, d).to_string())
}

/// Every name the statements declare, at any depth.
fn names_declared(src: &str, stmts: &[Node<'_>]) -> Vec<String> {
    let mut out = Vec::new();
    for s in stmts {
        walk(*s, &mut |n| {
            if n.kind() == "declaration" {
                let mut c = n.walk();
                let ds: Vec<Node> = n.children_by_field_name("declarator", &mut c).collect();
                out.extend(ds.into_iter().filter_map(|d| names_declared_by(src, d)));
            }
            true
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::with_text;
    use super::*;
    use crate::syntax::Lang;

    fn moved(body: &str) -> Option<String> {
        let src = format!("__global__ void k(const float* x, float* y, const int* len, int B, int N) {{\n{body}}}\n");
        let out = with_text(Lang::Cuda, &src, "k", &BTreeMap::new(), uniform_exit).flatten()?;
        Some(out[src.find('{').unwrap() + 2..].to_string())
    }

    #[test]
    fn a_batch_bound_in_the_check_becomes_an_exit_of_whole_blocks() {
        let both = "    int b = blockIdx.y;\n    int n = blockIdx.x * blockDim.x + threadIdx.x;\n    if (n < N && b < B) {\n        y[b * N + n] = x[b * N + n];\n    }\n";
        expect_test::expect![[r#"
                int b = blockIdx.y;
                if (b >= B) return;
                int n = blockIdx.x * blockDim.x + threadIdx.x;
                if (n < N) {
                    y[b * N + n] = x[b * N + n];
                }
            }
        "#]]
        .assert_eq(&moved(both).unwrap());
        let early = "    int n = threadIdx.x + blockIdx.x * blockDim.x;\n    if (blockIdx.y >= B || n >= N || len[blockIdx.y] == 0) return;\n    y[n] = x[n];\n";
        expect_test::expect![[r#"
                if (blockIdx.y >= B || len[blockIdx.y] == 0) return;
                int n = threadIdx.x + blockIdx.x * blockDim.x;
                if (n >= N) return;
                y[n] = x[n];
            }
        "#]]
        .assert_eq(&moved(early).unwrap());
        let first = "    int n = blockIdx.x * blockDim.x + threadIdx.x;\n    if ((blockIdx.z < B && blockIdx.y < 2) && n < N) y[n] = x[n];\n";
        assert!(
            moved(first)
                .unwrap()
                .starts_with("    if (!(blockIdx.z < B && blockIdx.y < 2)) return;\n    int n"),
            "{:?}",
            moved(first)
        );
    }

    #[test]
    fn checks_of_thread_dependent_values_stay() {
        let cases = [
            // one comparison of the index only
            "    int n = blockIdx.x * blockDim.x + threadIdx.x;\n    if (n < N) y[n] = x[n];\n",
            // the other part reads the thread's own row
            "    int n = blockIdx.x * blockDim.x + threadIdx.x;\n    int r = blockIdx.y * blockDim.y + threadIdx.y;\n    if (n < N && r < B) y[n] = x[n];\n",
            // a name declared after the index (guard_first moves it first)
            "    int n = blockIdx.x * blockDim.x + threadIdx.x;\n    int b = blockIdx.y;\n    if (n < N && b < B) y[n] = x[n];\n",
            // a name declared before the index from the thread's position
            "    int tx = threadIdx.x;\n    int n = blockIdx.x * blockDim.x + tx;\n    if (n < N && tx < B) y[n] = x[n];\n",
            "    int tx = threadIdx.x;\n    int t2 = tx * 2;\n    int n = blockIdx.x * blockDim.x + threadIdx.x;\n    if (n < N && t2 < B) y[n] = x[n];\n",
            // a block size a rewrite may change, a call
            "    int n = blockIdx.x * blockDim.x + threadIdx.x;\n    if (n < N && blockDim.y == 1) y[n] = x[n];\n",
            "    int n = blockIdx.x * blockDim.x + threadIdx.x;\n    if (n < N && __ldg(len) > 0) y[n] = x[n];\n",
            // an else
            "    int n = blockIdx.x * blockDim.x + threadIdx.x;\n    if (n < N && blockIdx.y < B) y[n] = x[n]; else y[0] = 0;\n",
            // a disjunction is no conjunction of the body's conditions
            "    int n = blockIdx.x * blockDim.x + threadIdx.x;\n    if (n < N || blockIdx.y < B) y[n] = x[n];\n",
        ];
        for body in cases {
            assert_eq!(moved(body), None, "{body}");
        }
    }
}
