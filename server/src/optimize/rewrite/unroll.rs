//! `unroll`: `#pragma unroll N` on the innermost counted loops of the kernel unit; an
//! outer loop whose body holds a counted loop is left alone, as is any loop that already
//! has an unroll pragma.

use tree_sitter::Node;

use super::edits::Edit;
use super::params::Params;
use super::unit::*;
use super::RewriteContext;

/// `#pragma unroll N` on its own line, indented like the loop, before each innermost
/// counted `for` loop of the kernel unit that has no unroll pragma: one candidate per
/// `factors` value (default `[2, 4, 8]`), plus one with plain `#pragma unroll` (full
/// unrolling) on the loops whose trip count is a literal of at most 32.
///
/// Counted: the initializer declares or assigns one integer variable, the condition is
/// `var < E`, `var <= E` or `var != E`, and the update is `++`/`--` or `+=`/`-=` by a
/// literal, a template parameter or an ALL_CAPS name. Innermost: no counted loop inside
/// it. Loops that are the unbraced body of another statement are skipped (a pragma line
/// there would change what the outer statement controls).
pub fn unroll(cx: &RewriteContext<'_>) -> R {
    let unit = Unit::of(cx, "unroll")?;
    let factors = Params(cx.params).uints("factors", &[2, 4, 8], 1..=1024)?;
    let mut loops = Vec::new();
    let mut reasons = Vec::new();
    let mut total = 0;
    for f in &unit.funcs {
        let Some(body) = f.child_by_field_name("body") else {
            continue;
        };
        let fors: Vec<Node> = descendants(body)
            .into_iter()
            .filter(|n| n.kind() == "for_statement")
            .collect();
        total += fors.len();
        for l in &fors {
            let counted = counted_loop(cx, *l);
            let header = loop_header(cx, *l);
            let trips = match counted {
                Ok(t) => t,
                Err(why) => {
                    reasons.push(format!("`{header}` is not counted ({why})"));
                    continue;
                }
            };
            let inner_counted = descendants(*l)
                .into_iter()
                .skip(1)
                .any(|n| n.kind() == "for_statement" && counted_loop(cx, n).is_ok());
            if inner_counted {
                continue; // the inner loops get the pragma
            }
            if has_unroll_pragma(cx, *l) {
                reasons.push(format!("`{header}` already has an unroll pragma"));
                continue;
            }
            if l.parent().map(|p| p.kind()) != Some("compound_statement") {
                reasons.push(format!("`{header}` is not directly inside braces"));
                continue;
            }
            loops.push((*l, trips));
        }
    }
    if loops.is_empty() {
        let mut why = format!("`{}` has no counted `for` loop to unroll", cx.kernel.name);
        if total == 0 {
            why.push_str(" (no `for` loop at all in the kernel unit)");
        } else {
            why.push_str(&format!(": {}", reasons.join("; ")));
        }
        return Err(na(why));
    }
    let n = loops.len();
    let plural = |n: usize| if n == 1 { "loop" } else { "loops" };
    let mut out = Vec::new();
    for factor in factors {
        let pragma = format!("#pragma unroll {factor}");
        let edits = loops.iter().map(|(l, _)| pragma_edit(cx, *l, &pragma));
        out.push(finish(
            cx,
            "unroll",
            format!("{pragma} on {n} {}", plural(n)),
            edits.collect(),
        )?);
    }
    let short: Vec<_> = loops
        .iter()
        .filter(|(_, t)| t.is_some_and(|t| (1..=32).contains(&t)))
        .collect();
    if !short.is_empty() {
        let edits = short
            .iter()
            .map(|(l, _)| pragma_edit(cx, *l, "#pragma unroll"));
        out.push(finish(
            cx,
            "unroll",
            format!(
                "#pragma unroll (full) on {} {} of ≤ 32 trips",
                short.len(),
                plural(short.len())
            ),
            edits.collect(),
        )?);
    }
    Ok(out)
}

/// `Ok(trip count if literal)` for a counted loop, `Err(why not)` otherwise.
pub(super) fn counted_loop(cx: &RewriteContext<'_>, l: Node<'_>) -> Result<Option<u64>, String> {
    let init = l
        .child_by_field_name("initializer")
        .ok_or("no initializer")?;
    let (var, start) = match init.kind() {
        "declaration" => {
            let ty = init.child_by_field_name("type").ok_or("no type")?;
            if !is_integer_type(cx, ty) {
                return Err(format!("`{}` is not an integer type", text(cx, ty)));
            }
            let decls: Vec<Node> = {
                let mut c = init.walk();
                init.children_by_field_name("declarator", &mut c).collect()
            };
            let [d] = decls.as_slice() else {
                return Err("it declares several variables".into());
            };
            let v = d
                .child_by_field_name("declarator")
                .filter(|v| d.kind() == "init_declarator" && v.kind() == "identifier")
                .ok_or("the variable is not initialised")?;
            (text(cx, v), d.child_by_field_name("value"))
        }
        "assignment_expression" if field_kind(init, "operator") == Some("=") => {
            let v = init
                .child_by_field_name("left")
                .filter(|v| v.kind() == "identifier")
                .ok_or("the initializer does not assign a variable")?;
            (text(cx, v), init.child_by_field_name("right"))
        }
        _ => return Err("the initializer is not one integer variable".into()),
    };
    let cond = l.child_by_field_name("condition").ok_or("no condition")?;
    let op = field_kind(cond, "operator").unwrap_or("");
    let left_is_var = cond
        .child_by_field_name("left")
        .is_some_and(|n| n.kind() == "identifier" && text(cx, n) == var);
    if cond.kind() != "binary_expression" || !matches!(op, "<" | "<=" | "!=") || !left_is_var {
        return Err(format!(
            "the condition `{}` is not `{var} <`, `<=` or `!=` a bound",
            text(cx, cond)
        ));
    }
    let update = l.child_by_field_name("update").ok_or("no update")?;
    let upd = text(cx, update);
    let step: Option<i64> = match update.kind() {
        "update_expression"
            if update
                .child_by_field_name("argument")
                .is_some_and(|a| text(cx, a) == var) =>
        {
            Some(if upd.contains("++") { 1 } else { -1 })
        }
        "assignment_expression"
            if update
                .child_by_field_name("left")
                .is_some_and(|a| a.kind() == "identifier" && text(cx, a) == var)
                && matches!(field_kind(update, "operator"), Some("+=" | "-=")) =>
        {
            let right = update.child_by_field_name("right").ok_or("no step")?;
            let r = text(cx, right);
            let constant = right.kind() == "number_literal"
                || (right.kind() == "identifier"
                    && (cx.kernel.template_params.iter().any(|t| t == r) || is_all_caps(r)));
            if !constant {
                return Err(format!("the step `{r}` is not a constant"));
            }
            let sign = if field_kind(update, "operator") == Some("-=") {
                -1
            } else {
                1
            };
            int_literal(r).map(|s| sign * s as i64)
        }
        _ => {
            return Err(format!(
                "the update `{upd}` is not `++`, `--`, `+=` or `-=` by a constant"
            ))
        }
    };
    // The literal trip count, where init, bound and step are all literals.
    let lit = |n: Option<Node>| n.and_then(|n| int_literal(text(cx, n)));
    let (a, b) = match (lit(start), lit(cond.child_by_field_name("right"))) {
        (Some(a), Some(b)) => (a as i128, b as i128),
        _ => return Ok(None),
    };
    let Some(s) = step.filter(|s| *s > 0).map(i128::from) else {
        return Ok(None);
    };
    let span = match op {
        "<" => b - a,
        "<=" => b - a + 1,
        _ if (b - a) % s == 0 => b - a,
        _ => return Ok(None),
    };
    Ok(Some(if span <= 0 {
        0
    } else {
        ((span + s - 1) / s) as u64
    }))
}

pub(super) fn is_integer_type(cx: &RewriteContext<'_>, ty: Node<'_>) -> bool {
    const INTS: &[&str] = &[
        "int",
        "char",
        "short",
        "long",
        "unsigned",
        "signed",
        "size_t",
        "ssize_t",
        "ptrdiff_t",
        "intptr_t",
        "uintptr_t",
        "int8_t",
        "int16_t",
        "int32_t",
        "int64_t",
        "uint8_t",
        "uint16_t",
        "uint32_t",
        "uint64_t",
        "index_t",
    ];
    match ty.kind() {
        "sized_type_specifier" => !text(cx, ty).contains("double"),
        "primitive_type" | "type_identifier" => INTS.contains(&text(cx, ty)),
        _ => false,
    }
}

pub(super) fn is_all_caps(s: &str) -> bool {
    s.chars().any(|c| c.is_ascii_uppercase())
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// `for (init; cond; update)` as written, whitespace squeezed, for messages.
pub(super) fn loop_header(cx: &RewriteContext<'_>, l: Node<'_>) -> String {
    let end = l
        .child_by_field_name("body")
        .map_or(l.end_byte(), |b| b.start_byte());
    super::tree::one_line(cx.text.get(l.start_byte()..end).unwrap_or("for"))
}

/// Is the statement right before loop `l` (comments skipped) `#pragma unroll ...` or
/// `#pragma nounroll`?
pub(super) fn has_unroll_pragma(cx: &RewriteContext<'_>, l: Node<'_>) -> bool {
    let mut prev = l.prev_named_sibling();
    while let Some(p) = prev.filter(|p| p.kind() == "comment") {
        prev = p.prev_named_sibling();
    }
    let Some(p) = prev.filter(|p| p.kind() == "preproc_call") else {
        return false;
    };
    let directive = p
        .child_by_field_name("directive")
        .map_or("", |d| text(cx, d));
    let arg = p
        .child_by_field_name("argument")
        .map_or("", |a| text(cx, a));
    let arg = arg.trim_start();
    directive == "#pragma" && (arg.starts_with("unroll") || arg.starts_with("nounroll"))
}

/// Insert `pragma` on its own line before loop `l`, with the loop line's indentation.
pub(super) fn pragma_edit(cx: &RewriteContext<'_>, l: Node<'_>, pragma: &str) -> Edit {
    let src = cx.text;
    let at = l.start_byte();
    let line_start = src[..at].rfind('\n').map_or(0, |i| i + 1);
    let line_end = src[at..].find('\n').map_or(src.len(), |i| at + i);
    let eol = if src[..line_end].ends_with('\r') {
        "\r\n"
    } else {
        "\n"
    };
    let before = &src[line_start..at];
    let indent: String = before
        .chars()
        .take_while(|c| *c == ' ' || *c == '\t')
        .collect();
    if before.trim().is_empty() {
        Edit::insert(line_start, format!("{indent}{pragma}{eol}"))
    } else {
        // Something precedes the loop on its line (`{ for (...)`): break the line,
        // replacing the blanks between that and the loop.
        let blanks = before.len() - before.trim_end_matches([' ', '\t']).len();
        Edit::replace(
            at - blanks..at,
            format!("{eol}{indent}{pragma}{eol}{indent}"),
        )
    }
}

#[cfg(test)]
mod tests {

    use expect_test::expect;

    use super::super::unit::testing::*;

    #[test]
    fn unroll_on_the_examples() {
        check(
            "unroll",
            MATMUL,
            "matmul",
            params(r#"{"factors": [4]}"#),
            expect![[r###"
            ## #pragma unroll 4 on 1 loop
            extern "C" __global__ void matmul(int m, int n, int k, const float* a, const float* b, float* c) {
                int row = blockIdx.y * blockDim.y + threadIdx.y;
                int col = blockIdx.x * blockDim.x + threadIdx.x;
                if (row < m && col < n) {
                    float acc = 0.0f;
                    #pragma unroll 4
                    for (int i = 0; i < k; ++i) {
                        acc += a[row * k + i] * b[i * n + col];
                    }
                    c[row * n + col] = acc;
                }
            }
        "###]],
        );
        check(
            "unroll",
            SAXPY,
            "saxpy",
            params(NONE),
            expect![[r#"
            error: `saxpy` has no counted `for` loop to unroll (no `for` loop at all in the kernel unit)
        "#]],
        );
        check(
            "unroll",
            REDUCE,
            "reduce_tree",
            params(NONE),
            expect![[r#"
            error: `reduce_tree` has no counted `for` loop to unroll: `for (int s = BLOCK / 2; s > 0; s >>= 1)` is not counted (the condition `s > 0` is not `s <`, `<=` or `!=` a bound)
        "#]],
        );
    }

    const LOOPS: &str = "__device__ float dot4(const float* a, const float* b) {\n\tfloat s = 0.0f;\n\tfor (int j = 0; j < 4; j++)   // literal trip count\n\t\ts += a[j] * b[j];\n\treturn s;\n}\n\n// @bench n = 256\n// @bench x: in f32[n]; y: out f32[n]\n// @bench grid = 1; block = 64\n__global__ void k(int n, const float* x, float* y) {\n    for (int r = 0; r < 4; ++r) {   // outer: not marked\n        for (unsigned c = 0; c <= 15; c += 2) { y[r * 16 + c] = dot4(x, x + c); }\n    }\n    #pragma unroll 1\n    for (int i = 0; i != n; i++) y[i] += 1.0f;\n    if (n > 8) for (int i = 0; i < 8; i++) y[i] = 0.0f;\n    { for (int i = 0; i < n; i += 4) y[i] *= 2.0f; }\n    for (int s = n; s > 0; s /= 2) {}\n}\n";

    #[test]
    fn unroll_marks_innermost_counted_loops_with_their_indentation() {
        check(
            "unroll",
            LOOPS,
            "k",
            params(r#"{"factors": [4]}"#),
            expect![[r#"
            ## #pragma unroll 4 on 3 loops
            __device__ float dot4(const float* a, const float* b) {
            	float s = 0.0f;
            	#pragma unroll 4
            	for (int j = 0; j < 4; j++)   // literal trip count
            		s += a[j] * b[j];
            	return s;
            }
            __global__ void k(int n, const float* x, float* y) {
                for (int r = 0; r < 4; ++r) {   // outer: not marked
                    #pragma unroll 4
                    for (unsigned c = 0; c <= 15; c += 2) { y[r * 16 + c] = dot4(x, x + c); }
                }
                #pragma unroll 1
                for (int i = 0; i != n; i++) y[i] += 1.0f;
                if (n > 8) for (int i = 0; i < 8; i++) y[i] = 0.0f;
                {
                #pragma unroll 4
                for (int i = 0; i < n; i += 4) y[i] *= 2.0f; }
                for (int s = n; s > 0; s /= 2) {}
            }
            ## #pragma unroll (full) on 2 loops of ≤ 32 trips
            __device__ float dot4(const float* a, const float* b) {
            	float s = 0.0f;
            	#pragma unroll
            	for (int j = 0; j < 4; j++)   // literal trip count
            		s += a[j] * b[j];
            	return s;
            }
            __global__ void k(int n, const float* x, float* y) {
                for (int r = 0; r < 4; ++r) {   // outer: not marked
                    #pragma unroll
                    for (unsigned c = 0; c <= 15; c += 2) { y[r * 16 + c] = dot4(x, x + c); }
                }
                #pragma unroll 1
                for (int i = 0; i != n; i++) y[i] += 1.0f;
                if (n > 8) for (int i = 0; i < 8; i++) y[i] = 0.0f;
                { for (int i = 0; i < n; i += 4) y[i] *= 2.0f; }
                for (int s = n; s > 0; s /= 2) {}
            }
        "#]],
        );
    }

    #[test]
    fn unroll_keeps_crlf_line_ends() {
        let src =
            "__global__ void k(float* y) {\r\n  for (int i = 0; i < 8; i++) y[i] = 0.0f;\r\n}\r\n";
        let out = run("unroll", src, "k", params(r#"{"factors": [2]}"#)).expect("a candidate");
        assert_eq!(
            out[0].text,
            "__global__ void k(float* y) {\r\n  #pragma unroll 2\r\n  for (int i = 0; i < 8; i++) y[i] = 0.0f;\r\n}\r\n"
        );
    }
}
