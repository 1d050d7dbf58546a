//! `fast_math`: the float math calls `--use_fast_math` would turn into intrinsics
//! (`expf` -> `__expf`, ...), `1.0f / sqrtf(x)` -> `rsqrtf(x)` and float divisions ->
//! `__fdividef`, in the source so the change stays in this kernel. `__host__ __device__`
//! functions are skipped (the intrinsics are device-only and the author's host build
//! would break).

use std::collections::{BTreeMap, HashSet};

use tree_sitter::Node;

use super::edits::Edit;
use super::params::Params;
use super::unit::*;
use super::RewriteContext;

/// Single-precision math calls and their fast intrinsics.
pub(super) const INTRINSICS: &[(&str, &str)] = &[
    ("expf", "__expf"),
    ("exp10f", "__exp10f"),
    ("logf", "__logf"),
    ("log2f", "__log2f"),
    ("log10f", "__log10f"),
    ("sinf", "__sinf"),
    ("cosf", "__cosf"),
    ("tanf", "__tanf"),
    ("powf", "__powf"),
];

/// In the kernel unit (`__host__ __device__` functions excepted): `expf` → `__expf` and
/// the other calls in [`INTRINSICS`]; `1.0f / sqrtf(x)` → `rsqrtf(x)`; and, unless the
/// parameter `divisions` is false, `a / b` → `__fdividef(a, b)` where both operands are
/// surely `float` (a literal with an `f` suffix, a variable declared `float` in the same
/// function, an element of a `float` pointer or one-dimensional array declared there,
/// and no other declaration of that name in the function). One candidate.
pub fn fast_math(cx: &RewriteContext<'_>) -> R {
    let unit = Unit::of(cx, "fast_math")?;
    let divisions = Params(cx.params).bool("divisions", true)?;
    let mut edits = Vec::new();
    let mut renamed: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut rsqrt, mut fdiv, mut skipped_host) = (0, 0, 0);
    for f in &unit.funcs {
        if has_token(*f, "__host__") {
            skipped_host += 1;
            continue;
        }
        let Some(body) = f.child_by_field_name("body") else {
            continue;
        };
        let floats = FloatNames::of(cx, *f);
        for n in descendants(body) {
            match n.kind() {
                "call_expression" => {
                    let Some(func) = n
                        .child_by_field_name("function")
                        .filter(|f| f.kind() == "identifier")
                    else {
                        continue;
                    };
                    let name = text(cx, func);
                    if cx.kernel.callees.iter().any(|c| c == name) {
                        continue; // the file defines its own `expf`
                    }
                    if let Some((from, to)) = INTRINSICS.iter().find(|(from, _)| *from == name) {
                        edits.push(Edit::replace(func.byte_range(), *to));
                        *renamed.entry(from).or_default() += 1;
                    }
                }
                "binary_expression" if field_kind(n, "operator") == Some("/") => {
                    if let Some(e) = rsqrt_edit(cx, n) {
                        edits.push(e);
                        rsqrt += 1;
                    } else if divisions {
                        if let Some(e) = fdividef_edits(cx, n, &floats) {
                            edits.extend(e);
                            fdiv += 1;
                        }
                    }
                }
                _ => {}
            }
        }
    }
    if edits.is_empty() {
        let mut why = format!(
            "`{}` calls none of {}{}",
            cx.kernel.name,
            INTRINSICS
                .iter()
                .map(|(f, _)| *f)
                .collect::<Vec<_>>()
                .join(", "),
            if divisions {
                ", has no `1.0f / sqrtf(x)` and no division of two surely-float operands"
            } else {
                " and has no `1.0f / sqrtf(x)`"
            }
        );
        if skipped_host > 0 {
            why.push_str(" (`__host__ __device__` functions are left alone)");
        }
        return Err(na(why));
    }
    let mut parts: Vec<String> = renamed
        .iter()
        .map(|(from, n)| {
            let to = INTRINSICS
                .iter()
                .find(|(f, _)| f == from)
                .map_or("", |(_, t)| *t);
            times(format!("{from}→{to}"), *n)
        })
        .collect();
    if rsqrt > 0 {
        parts.push(times("1.0f / sqrtf→rsqrtf".into(), rsqrt));
    }
    if fdiv > 0 {
        parts.push(times("/→__fdividef".into(), fdiv));
    }
    Ok(vec![finish(cx, "fast_math", parts.join(", "), edits)?])
}

pub(super) fn times(s: String, n: usize) -> String {
    if n == 1 {
        s
    } else {
        format!("{s} ×{n}")
    }
}

/// `1.0f / sqrtf(x)` → `rsqrtf(x)`: replaces `1.0f / sqrtf(` with `rsqrtf(` and keeps
/// the argument and its `)` as they are.
pub(super) fn rsqrt_edit(cx: &RewriteContext<'_>, div: Node<'_>) -> Option<Edit> {
    let left = div.child_by_field_name("left")?;
    let right = div.child_by_field_name("right")?;
    if left.kind() != "number_literal" || float_f_literal(text(cx, left)) != Some(1.0) {
        return None;
    }
    if right.kind() != "call_expression" || plain_callee(cx, right) != Some("sqrtf") {
        return None;
    }
    if cx.kernel.callees.iter().any(|c| c == "sqrtf") {
        return None;
    }
    let args = right.child_by_field_name("arguments")?;
    if named_children(args)
        .iter()
        .filter(|a| a.kind() != "comment")
        .count()
        != 1
    {
        return None;
    }
    let open = args.child(0).filter(|c| c.kind() == "(")?;
    let replaced = div.start_byte()..open.end_byte();
    if contains_comment(div, &replaced) {
        return None;
    }
    Some(Edit::replace(replaced, "rsqrtf("))
}

/// `a / b` → `__fdividef(a, b)` as three edits around the operands (which stay as
/// written), when both operands are surely float and no comment sits between them.
pub(super) fn fdividef_edits(
    cx: &RewriteContext<'_>,
    div: Node<'_>,
    floats: &FloatNames,
) -> Option<Vec<Edit>> {
    let left = div.child_by_field_name("left")?;
    let right = div.child_by_field_name("right")?;
    if !floats.surely_float(cx, left) || !floats.surely_float(cx, right) {
        return None;
    }
    let between = left.end_byte()..right.start_byte();
    if contains_comment(div, &between) {
        return None;
    }
    Some(vec![
        Edit::insert(div.start_byte(), "__fdividef("),
        Edit::replace(between, ", "),
        Edit::insert(div.end_byte(), ")"),
    ])
}

/// The names one function declares as `float` scalars and as one-level `float` pointers
/// or arrays; a name declared with any other type anywhere in the function is in none.
pub(super) struct FloatNames {
    scalars: HashSet<String>,
    arrays: HashSet<String>,
    other: HashSet<String>,
}

impl FloatNames {
    fn of(cx: &RewriteContext<'_>, f: Node<'_>) -> FloatNames {
        let mut names = FloatNames {
            scalars: HashSet::new(),
            arrays: HashSet::new(),
            other: HashSet::new(),
        };
        let mut decls: Vec<Node> = Vec::new();
        if let Some((_, params)) = name_and_params(cx, f) {
            decls.extend(named_children(params));
        }
        if let Some(body) = f.child_by_field_name("body") {
            decls.extend(
                descendants(body)
                    .into_iter()
                    .filter(|n| n.kind() == "declaration"),
            );
        }
        for d in decls {
            let is_float = d
                .child_by_field_name("type")
                .is_some_and(|t| t.kind() == "primitive_type" && text(cx, t) == "float");
            let mut c = d.walk();
            let declarators: Vec<Node> = d.children_by_field_name("declarator", &mut c).collect();
            for mut decl in declarators {
                if decl.kind() == "init_declarator" {
                    match decl.child_by_field_name("declarator") {
                        Some(inner) => decl = inner,
                        None => continue,
                    }
                }
                let inner_ident = decl
                    .child_by_field_name("declarator")
                    .filter(|i| i.kind() == "identifier");
                let (name, slot) = match (decl.kind(), inner_ident) {
                    ("identifier", _) => (text(cx, decl), &mut names.scalars),
                    ("pointer_declarator" | "array_declarator", Some(i)) => {
                        (text(cx, i), &mut names.arrays)
                    }
                    _ => {
                        // Anything deeper: every identifier in it is "other".
                        for i in descendants(decl)
                            .into_iter()
                            .filter(|i| i.kind() == "identifier")
                        {
                            names.other.insert(text(cx, i).to_string());
                        }
                        continue;
                    }
                };
                if is_float {
                    slot.insert(name.to_string());
                } else {
                    names.other.insert(name.to_string());
                }
            }
        }
        names
    }

    fn surely_float(&self, cx: &RewriteContext<'_>, e: Node<'_>) -> bool {
        let ok = |set: &HashSet<String>, n: &str| set.contains(n) && !self.other.contains(n);
        match e.kind() {
            "number_literal" => float_f_literal(text(cx, e)).is_some(),
            "identifier" => ok(&self.scalars, text(cx, e)) && !self.arrays.contains(text(cx, e)),
            "subscript_expression" => e.child_by_field_name("argument").is_some_and(|a| {
                a.kind() == "identifier"
                    && ok(&self.arrays, text(cx, a))
                    && !self.scalars.contains(text(cx, a))
            }),
            "parenthesized_expression" => {
                let inner = named_children(e);
                matches!(inner.as_slice(), [i] if self.surely_float(cx, *i))
            }
            _ => false,
        }
    }
}

/// The value of a float literal with an `f`/`F` suffix (`1.0f`, `2.f`, `1e-3f`), else
/// `None` (hex integers such as `0xff` end in `f` too and are not floats).
pub(super) fn float_f_literal(s: &str) -> Option<f64> {
    let body = s.strip_suffix(['f', 'F'])?;
    let lower = body.to_ascii_lowercase();
    if lower.starts_with("0x") {
        return None; // hex floats (`0x1p3f`) are rare enough to leave alone
    }
    if !(lower.contains('.') || lower.contains('e')) {
        return None;
    }
    body.replace('\'', "").parse::<f64>().ok()
}

#[cfg(test)]
mod tests {

    use expect_test::expect;

    use super::super::unit::testing::*;

    const MATH: &str = "__host__ __device__ float both(float v) { return expf(v); }\n__device__ float gelu_ish(float v) { return v * powf(2.0f, v) / 3.0f; }\n\n// @bench n = 1024\n// @bench x: in f32[n]; y: out f32[n]\n// @bench grid = cdiv(n, 256); block = 256\nextern \"C\" __global__ void k(int n, const float* x, float* y) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i >= n) return;\n    // expf(x) in a comment stays\n    float sum = expf(x[i]) + logf( x[i] + 1.0f );\n    float inv = 1.0f / sqrtf(sum + 1e-5f);\n    float d = 1.0 / sqrtf(sum);         // double: stays\n    int half = n / 2;                   // int: stays\n    y[i] = x[i] / sum + inv * d + half + both(x[i]) + gelu_ish(x[i]) + sinf(cosf(x[i])) / 2;\n}\n";

    #[test]
    fn fast_math_swaps_calls_rsqrt_and_float_divisions() {
        check(
            "fast_math",
            MATH,
            "k",
            params(NONE),
            expect![[r###"
            ## cosf→__cosf, expf→__expf, logf→__logf, powf→__powf, sinf→__sinf, 1.0f / sqrtf→rsqrtf, /→__fdividef
            __host__ __device__ float both(float v) { return expf(v); }
            __device__ float gelu_ish(float v) { return v * __powf(2.0f, v) / 3.0f; }
            extern "C" __global__ void k(int n, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i >= n) return;
                // expf(x) in a comment stays
                float sum = __expf(x[i]) + __logf( x[i] + 1.0f );
                float inv = rsqrtf(sum + 1e-5f);
                float d = 1.0 / sqrtf(sum);         // double: stays
                int half = n / 2;                   // int: stays
                y[i] = __fdividef(x[i], sum) + inv * d + half + both(x[i]) + gelu_ish(x[i]) + __sinf(__cosf(x[i])) / 2;
            }
        "###]],
        );
        check(
            "fast_math",
            MATH,
            "k",
            params(r#"{"divisions": false}"#),
            expect![[r###"
            ## cosf→__cosf, expf→__expf, logf→__logf, powf→__powf, sinf→__sinf, 1.0f / sqrtf→rsqrtf
            __host__ __device__ float both(float v) { return expf(v); }
            __device__ float gelu_ish(float v) { return v * __powf(2.0f, v) / 3.0f; }
            extern "C" __global__ void k(int n, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i >= n) return;
                // expf(x) in a comment stays
                float sum = __expf(x[i]) + __logf( x[i] + 1.0f );
                float inv = rsqrtf(sum + 1e-5f);
                float d = 1.0 / sqrtf(sum);         // double: stays
                int half = n / 2;                   // int: stays
                y[i] = x[i] / sum + inv * d + half + both(x[i]) + gelu_ish(x[i]) + __sinf(__cosf(x[i])) / 2;
            }
        "###]],
        );
    }

    #[test]
    fn fast_math_not_applicable() {
        check(
            "fast_math",
            SAXPY,
            "saxpy",
            params(NONE),
            expect![[r#"
            error: `saxpy` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        "#]],
        );
    }

    #[test]
    fn float_literals() {
        assert_eq!(super::float_f_literal("1.0f"), Some(1.0));
        assert_eq!(super::float_f_literal("1.F"), Some(1.0));
        assert_eq!(super::float_f_literal("1e-5f"), Some(1e-5));
        assert_eq!(super::float_f_literal("0xff"), None);
        assert_eq!(super::float_f_literal("1.0"), None);
    }
}
