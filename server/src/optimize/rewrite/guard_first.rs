//! Declarations between a 1-D thread index and its bounds check, moved inside the check:
//! `int i = ...; int row = i / cols; if (i < n) { ... }` becomes `int i = ...; if (i < n)
//! { int row = i / cols; ... }`, the shape the elementwise, row and reduction rewrites
//! read. A declaration moves only when it has no effect to move: no memory read, call,
//! assignment or increment in it, and the check does not read what it declares. The
//! dispatcher retries a rewrite that refused the kernel on this text (see
//! [`super::apply`]); the candidates then carry the moved declarations, which compute the
//! same values in every thread that gets past the check.

use tree_sitter::Node;

use super::elementwise::is_one_d_index;
use super::tree::{kernel_function, line_indent, named_children, text, walk};
use super::RewriteContext;
use crate::syntax::ByteRange;

/// The file text with the kernel's declarations between its 1-D thread index and the
/// bounds check moved out of the way: those that do not depend on the index (`long
/// total = (long)n * c;`, what the check itself may read) to just before the index, the
/// others to the start of what the check guards; None when there are none, or one of
/// them cannot move.
pub(super) fn moved_inside_guard(cx: &RewriteContext<'_>) -> Option<String> {
    let func = kernel_function(cx)?;
    let stmts = named_children(func.child_by_field_name("body")?);
    let at = stmts.iter().position(|s| is_thread_index(cx.text, *s))?;
    let rest = &stmts[at + 1..];
    let guard_at = rest
        .iter()
        .position(|s| s.kind() != "declaration" && s.kind() != "comment")?;
    let (moving, guard) = (&rest[..guard_at], rest[guard_at]);
    if !moving.iter().any(|s| s.kind() == "declaration") || guard.kind() != "if_statement" {
        return None;
    }
    if guard.child_by_field_name("alternative").is_some() {
        return None;
    }
    let index = declared_names(cx.text, stmts[at]);
    let (hoisted, inside) = partition(cx.text, moving, &index);
    let declared: Vec<&str> = inside
        .iter()
        .filter(|s| s.kind() == "declaration")
        .flat_map(|d| declared_names(cx.text, *d))
        .collect();
    let cond = text(cx.text, guard.child_by_field_name("condition")?);
    if !moving.iter().all(|d| d.kind() == "comment" || is_pure(*d)) || reads_any(cond, &declared) {
        return None;
    }
    let first = moving.first()?.start_byte();
    let lines: Vec<&str> = inside.iter().map(|s| text(cx.text, *s)).collect();
    let moved = if lines.is_empty() {
        [&cx.text[..first], &cx.text[guard.start_byte()..]].concat()
    } else {
        splice(cx.text, first..guard.start_byte(), guard, &lines)
    };
    Some(hoist(cx.text, &moved, stmts[at], &hoisted))
}

/// The statements that do not depend on the index (declarations that read neither the
/// index nor a name declared from it, and the comments right before them), and the rest.
fn partition<'t>(src: &str, moving: &[Node<'t>], index: &[&str]) -> (Vec<Node<'t>>, Vec<Node<'t>>) {
    let mut dependent: Vec<&str> = index.to_vec();
    let (mut hoisted, mut inside, mut comments) = (Vec::new(), Vec::new(), Vec::new());
    for s in moving {
        if s.kind() == "comment" {
            comments.push(*s);
        } else if reads_any(text(src, *s), &dependent) {
            dependent.extend(declared_names(src, *s));
            inside.append(&mut comments);
            inside.push(*s);
        } else {
            hoisted.append(&mut comments);
            hoisted.push(*s);
        }
    }
    inside.append(&mut comments);
    (hoisted, inside)
}

/// `moved` (the text after the other moves, which all lie after `index`) with `hoisted`
/// (statements of the original text) placed just before the index declaration.
fn hoist(src: &str, moved: &str, index: Node<'_>, hoisted: &[Node<'_>]) -> String {
    if hoisted.is_empty() {
        return moved.to_string();
    }
    let at = index.start_byte();
    let indent = line_indent(src, at);
    let lines: String = hoisted
        .iter()
        .map(|s| format!("{}\n{indent}", text(src, *s).trim()))
        .collect();
    [&moved[..at], &lines, &moved[at..]].concat()
}

/// `text` without `removed` and with `lines` placed first in what `guard` guards: after
/// its `{`, after an early `return;`, or with its single statement wrapped in braces.
fn splice(src: &str, removed: ByteRange, guard: Node<'_>, lines: &[&str]) -> String {
    let indent = line_indent(src, guard.start_byte());
    let step = if indent.contains('\t') { "\t" } else { "    " };
    let inner = format!("{indent}{step}");
    let cons = guard.child_by_field_name("consequence");
    let (at, insert) = match cons {
        Some(c) if c.kind() == "compound_statement" => {
            (c.start_byte() + 1, block_lines(lines, &inner))
        }
        Some(c) if c.kind() == "return_statement" => (guard.end_byte(), block_lines(lines, indent)),
        Some(c) => {
            let body = format!(
                "{{{}\n{inner}{}\n{indent}}}",
                block_lines(lines, &inner),
                text(src, c)
            );
            return [
                &src[..removed.start],
                &src[removed.end..c.start_byte()],
                &body,
                &src[c.end_byte()..],
            ]
            .concat();
        }
        None => return src.to_string(),
    };
    [
        &src[..removed.start],
        &src[removed.end..at],
        &insert,
        &src[at..],
    ]
    .concat()
}

/// Each line on its own new line at `indent`.
fn block_lines(lines: &[&str], indent: &str) -> String {
    lines
        .iter()
        .map(|l| format!("\n{indent}{}", l.trim()))
        .collect()
}

/// `int i = blockIdx.x * blockDim.x + threadIdx.x;` (any order, `size_t`/`unsigned`).
fn is_thread_index(src: &str, s: Node<'_>) -> bool {
    if s.kind() != "declaration" {
        return false;
    }
    let mut c = s.walk();
    let decls: Vec<Node> = s.children_by_field_name("declarator", &mut c).collect();
    let [d] = decls.as_slice() else { return false };
    let Some(v) = d.child_by_field_name("value") else {
        return false;
    };
    let norm: String = text(src, v)
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    is_one_d_index(&norm)
}

/// The names a declaration declares.
fn declared_names<'s>(src: &'s str, d: Node<'_>) -> Vec<&'s str> {
    let mut c = d.walk();
    d.children_by_field_name("declarator", &mut c)
        .filter_map(|n| {
            let mut n = n;
            while n.kind() != "identifier" {
                n = n.child_by_field_name("declarator")?;
            }
            Some(text(src, n))
        })
        .collect()
}

/// No memory read, call, assignment or increment anywhere in the declaration.
pub(super) fn is_pure(d: Node<'_>) -> bool {
    let mut pure = true;
    walk(d, &mut |n| {
        if matches!(
            n.kind(),
            "subscript_expression"
                | "pointer_expression"
                | "call_expression"
                | "assignment_expression"
                | "update_expression"
                | "array_declarator"
                | "pointer_declarator"
                | "reference_declarator"
        ) || (n.kind() == "field_expression" && n.child(1).is_some_and(|op| op.kind() == "->"))
        {
            pure = false;
        }
        pure
    });
    pure
}

/// Whether `code` names any of `names` as a whole word.
fn reads_any(code: &str, names: &[&str]) -> bool {
    code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|w| names.contains(&w))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::with_text;
    use super::*;
    use crate::syntax::Lang;

    fn moved(src: &str) -> Option<String> {
        with_text(Lang::Cuda, src, "k", &BTreeMap::new(), moved_inside_guard).flatten()
    }

    #[test]
    fn declarations_before_the_check_move_inside_it() {
        let block = "__global__ void k(const float* x, const float* s, float* y, int n, int cols) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    int row = i / cols, col = i % cols;\n    // the row's factor\n    const float two = 2.0f;\n    if (i < n) y[i] = x[i] * s[row] + col * two;\n}\n";
        expect_test::expect![[r#"
            __global__ void k(const float* x, const float* s, float* y, int n, int cols) {
                // the row's factor
                const float two = 2.0f;
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) {
                    int row = i / cols, col = i % cols;
                    y[i] = x[i] * s[row] + col * two;
                }
            }
        "#]]
        .assert_eq(&moved(block).unwrap());
        let early = "__global__ void k(const float* x, float* y, size_t n, int d) {\n    size_t i = threadIdx.x + blockIdx.x * blockDim.x;\n    int c = i % d;\n    if (i >= n) return;\n    y[i] = x[i] * c;\n}\n";
        expect_test::expect![[r#"
            __global__ void k(const float* x, float* y, size_t n, int d) {
                size_t i = threadIdx.x + blockIdx.x * blockDim.x;
                if (i >= n) return;
                int c = i % d;
                y[i] = x[i] * c;
            }
        "#]]
        .assert_eq(&moved(early).unwrap());
        let braces = "__global__ void k(float* y, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    float h = 0.5f * i;\n    if (i < n) {\n        y[i] = h;\n    }\n}\n";
        assert!(moved(braces)
            .unwrap()
            .contains("if (i < n) {\n        float h = 0.5f * i;\n        y[i] = h;\n    }"));
    }

    #[test]
    fn declarations_that_do_not_depend_on_the_index_move_before_it() {
        // The check reads `total`: it moves before the index, `c` inside the check.
        let src = "__global__ void k(const float* x, const float* s, float* y, int N, int C, int HW) {\n    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;\n    long total = (long)N * C * HW;\n    int c = (idx / HW) % C;\n    if (idx < total) {\n        y[idx] = x[idx] * s[c];\n    }\n}\n";
        expect_test::expect![[r#"
            __global__ void k(const float* x, const float* s, float* y, int N, int C, int HW) {
                long total = (long)N * C * HW;
                long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
                if (idx < total) {
                    int c = (idx / HW) % C;
                    y[idx] = x[idx] * s[c];
                }
            }
        "#]]
        .assert_eq(&moved(src).unwrap());
        // A name declared from the index stays with it, and so does what reads that name.
        let chain = "__global__ void k(float* y, int n, int w) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    int r = i / w;\n    int r2 = r * 2;\n    int n2 = n / 2;\n    if (i < n2) y[i] = r2;\n}\n";
        let out = moved(chain).unwrap();
        assert!(
            out.contains("    int n2 = n / 2;\n    int i = blockIdx.x"),
            "{out}"
        );
        assert!(
            out.contains("if (i < n2) {\n        int r = i / w;\n        int r2 = r * 2;"),
            "{out}"
        );
    }

    #[test]
    fn declarations_with_effects_or_read_by_the_check_stay() {
        let cases = [
            // a memory read before the check
            "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    float v = x[i];\n    if (i < n) y[i] = v;",
            // a call
            "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    float v = f(i);\n    if (i < n) y[i] = v;",
            // the check reads it
            "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    int r = i / 4;\n    if (r < n) y[i] = r;",
            // an increment
            "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    int r = i++;\n    if (i < n) y[i] = r;",
            // nothing between
            "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = 1;",
            // a statement that is not a declaration
            "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    int r = 0;\n    r += 1;\n    if (i < n) y[i] = r;",
            // an else
            "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    int r = i;\n    if (i < n) y[i] = r; else y[0] = 0;",
            // a pointer declared from the index
            "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    const float* p = x + i;\n    if (i < n) y[i] = *p;",
        ];
        for body in cases {
            let src = format!("__device__ float f(int i) {{ return i; }}\n__global__ void k(const float* x, float* y, int n) {{\n    {body}\n}}\n");
            assert_eq!(moved(&src), None, "{body}");
        }
    }
}
