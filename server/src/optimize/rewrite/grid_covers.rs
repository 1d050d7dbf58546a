//! Grid-stride loops over a grid that covers their bound, written as a bounds check: `for
//! (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
//! BODY` becomes `size_t i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) BODY` when
//! every case of the spec launches at least `n` threads along x (`grid = cdiv(n, 256)`):
//! then no thread takes a second trip, and the two forms run the same body for the same
//! elements. That is the shape the elementwise, row and column rewrites read. A body that
//! leaves the loop (`break`, `continue`) or writes the index, or a bound the spec's
//! values do not give, keeps the loop. The dispatcher retries a rewrite that refused the
//! kernel on this text (see [`super::apply`]).

use tree_sitter::Node;

use super::check::current_plan;
use super::elementwise::{is_one_d_index, without_int_casts};
use super::tree::{kernel_function, line_indent, named_children, text, walk, written_target};
use super::RewriteContext;
use crate::spec::{Arg, BenchPlan, Launch, Value};

/// The file text with the kernel's top-level grid-stride loop written as a bounds check;
/// None when it has none, or the grid does not cover its bound in some case.
pub(super) fn covered_loop(cx: &RewriteContext<'_>) -> Option<String> {
    let src = cx.text;
    let func = kernel_function(cx)?;
    let stmts = named_children(func.child_by_field_name("body")?);
    let lp = *stmts.iter().find(|s| s.kind() == "for_statement")?;
    let (decl, bound, body) = grid_stride(src, lp)?;
    let plan = current_plan(cx).ok()?;
    if !covers(&plan, src, bound) {
        return None;
    }
    let indent = line_indent(src, lp.start_byte());
    let cond = text(src, lp.child_by_field_name("condition")?);
    Some(
        [
            &src[..lp.start_byte()],
            text(src, decl),
            "\n",
            indent,
            &format!("if ({cond}) "),
            text(src, body),
            &src[lp.end_byte()..],
        ]
        .concat(),
    )
}

/// `for (T i = IDX; i < B; i += blockDim.x * gridDim.x) BODY` with IDX the 1-D thread
/// index and a body that neither leaves the loop nor writes `i`: the declaration, the
/// bound `B` and the body.
fn grid_stride<'t>(src: &str, lp: Node<'t>) -> Option<(Node<'t>, Node<'t>, Node<'t>)> {
    let decl = lp
        .child_by_field_name("initializer")
        .filter(|d| d.kind() == "declaration")?;
    let mut c = decl.walk();
    let ds: Vec<Node> = decl.children_by_field_name("declarator", &mut c).collect();
    let [d] = ds.as_slice() else { return None };
    let name = d.child_by_field_name("declarator")?;
    if name.kind() != "identifier" || !is_one_d_index(text(src, d.child_by_field_name("value")?)) {
        return None;
    }
    let i = text(src, name).to_string();
    let cond = lp.child_by_field_name("condition")?;
    let (l, op, bound) = (
        cond.child_by_field_name("left")?,
        text(src, cond.child_by_field_name("operator")?),
        cond.child_by_field_name("right")?,
    );
    if op != "<" || text(src, l) != i || reads(src, bound, &i) {
        return None;
    }
    if !steps_by_grid(src, lp.child_by_field_name("update")?, &i) {
        return None;
    }
    let body = lp.child_by_field_name("body")?;
    (!leaves_or_writes(src, body, &i)).then_some((decl, bound, body))
}

/// `i += blockDim.x * gridDim.x` (either order, casts anywhere) or `i = i + ...`.
fn steps_by_grid(src: &str, update: Node<'_>, i: &str) -> bool {
    let plain = without_int_casts(text(src, update));
    let plain = plain.replace(['(', ')'], "");
    ["blockDim.x*gridDim.x", "gridDim.x*blockDim.x"]
        .iter()
        .any(|s| plain == format!("{i}+={s}") || plain == format!("{i}={i}+{s}"))
}

/// Whether `n` reads the identifier `name`.
fn reads(src: &str, n: Node<'_>, name: &str) -> bool {
    let mut hit = false;
    walk(n, &mut |m| {
        hit |= m.kind() == "identifier" && text(src, m) == name;
        !hit
    });
    hit
}

/// Whether the loop body leaves this loop (`break` or `continue` outside an inner loop or
/// switch), returns, or writes `i`.
fn leaves_or_writes(src: &str, body: Node<'_>, i: &str) -> bool {
    let mut bad = false;
    let mut stack = vec![(body, false)];
    while let Some((n, inner)) = stack.pop() {
        bad |= match n.kind() {
            "break_statement" | "continue_statement" => !inner,
            "return_statement" => true,
            "assignment_expression" | "update_expression" => {
                written_target(n).is_some_and(|t| text(src, t) == i)
            }
            _ => false,
        };
        let nested = inner
            || matches!(
                n.kind(),
                "for_statement" | "while_statement" | "do_statement" | "switch_statement"
            );
        stack.extend(named_children(n).into_iter().map(|c| (c, nested)));
    }
    bad
}

/// Whether every case launches at least as many threads along x as `bound` is worth.
fn covers(plan: &BenchPlan, src: &str, bound: Node<'_>) -> bool {
    plan.cases.iter().all(|case| {
        let Launch::Cuda { grid, block, .. } = &case.launch else {
            return false;
        };
        let scalar = |name: &str| {
            case.args.iter().find_map(|a| match a {
                Arg::Scalar {
                    name: n,
                    value: Value::Int(v),
                    ..
                } if n == name => Some(*v),
                _ => None,
            })
        };
        value(src, bound, &scalar)
            .is_some_and(|b| (grid[0] as i128) * (block[0] as i128) >= b as i128)
    })
}

/// The value of an integer expression of literals and scalar arguments.
fn value(src: &str, e: Node<'_>, scalar: &dyn Fn(&str) -> Option<i64>) -> Option<i64> {
    match e.kind() {
        "number_literal" => text(src, e)
            .trim_end_matches(['u', 'U', 'l', 'L'])
            .parse()
            .ok(),
        "identifier" => scalar(text(src, e)),
        "parenthesized_expression" => value(src, e.named_child(0)?, scalar),
        "cast_expression" => value(src, e.child_by_field_name("value")?, scalar),
        "binary_expression" => {
            let l = value(src, e.child_by_field_name("left")?, scalar)?;
            let r = value(src, e.child_by_field_name("right")?, scalar)?;
            match text(src, e.child_by_field_name("operator")?) {
                "*" => l.checked_mul(r),
                "+" => l.checked_add(r),
                "-" => l.checked_sub(r),
                _ => None,
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::with_text;
    use super::*;
    use crate::syntax::Lang;

    fn covered(grid: &str, body: &str) -> Option<String> {
        let src = format!("// @bench n = 5000, 999; rows = 4\n// @bench x: in f32[n]; y: out f32[n]\n// @bench grid = {grid}; block = 256\n__global__ void k(const float* x, float* y, size_t n, int rows) {{\n{body}}}\n");
        let out = with_text(Lang::Cuda, &src, "k", &BTreeMap::new(), covered_loop).flatten()?;
        Some(out[src.find(") {\n").unwrap() + 4..].to_string())
    }

    const LOOP: &str = "    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {\n        y[i] = 2.0f * x[i];\n    }\n";

    #[test]
    fn a_grid_stride_loop_over_a_covering_grid_becomes_a_bounds_check() {
        expect_test::expect![[r#"
                size_t i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) {
                    y[i] = 2.0f * x[i];
                }
            }
        "#]]
        .assert_eq(&covered("cdiv(n, 256)", LOOP).unwrap());
        let casts = "    for (int i = threadIdx.x + blockIdx.x * blockDim.x; i < (int)n; i = i + (int)(gridDim.x * blockDim.x)) y[i] = x[i];\n";
        expect_test::expect![[r#"
                int i = threadIdx.x + blockIdx.x * blockDim.x;
                if (i < (int)n) y[i] = x[i];
            }
        "#]]
        .assert_eq(&covered("cdiv(n, 256)", casts).unwrap());
        // The bound as a product of arguments; a break inside an inner loop stays inside it.
        let product = "    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows * 200; i += blockDim.x * gridDim.x) {\n        for (int k = 0; k < 4; k++) { if (k == 2) break; }\n        y[i] = x[i];\n    }\n";
        assert!(covered("cdiv(n, 256)", product).is_some());
    }

    #[test]
    fn loops_that_may_take_a_second_trip_or_leave_early_stay() {
        // 16 blocks of 256 threads do not cover 5000 elements; 20 do.
        assert_eq!(covered("16", LOOP), None);
        assert!(covered("20", LOOP).is_some());
        let cases = [
            LOOP.replace(
                "y[i] = 2.0f * x[i];",
                "if (x[i] < 0) break;\n        y[i] = x[i];",
            ),
            LOOP.replace(
                "y[i] = 2.0f * x[i];",
                "if (x[i] < 0) continue;\n        y[i] = x[i];",
            ),
            LOOP.replace("y[i] = 2.0f * x[i];", "y[i] = x[i];\n        i += 1;"),
            LOOP.replace("blockDim.x * gridDim.x", "blockDim.x"),
            LOOP.replace("i < n;", "i <= n;"),
            LOOP.replace("blockIdx.x * blockDim.x + threadIdx.x;", "threadIdx.x;"),
        ];
        for body in cases {
            assert_eq!(covered("cdiv(n, 256)", &body), None, "{body}");
        }
    }
}
