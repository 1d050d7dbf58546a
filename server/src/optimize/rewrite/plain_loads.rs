//! Load intrinsics written as plain loads: `__ldg(&x[i])` becomes `x[i]` and `__ldg(p + i)`
//! becomes `*(p + i)` (likewise `__ldcs`, `__ldca`, `__ldcg`, `__ldlu`, `__ldcv`), in the
//! kernel's own definition. The value loaded is the same; only a cache hint is dropped.
//! The dispatcher retries a rewrite that refused the kernel on this text (see
//! [`super::apply`]), since the row, loop and elementwise analyses cannot follow an
//! element's address handed to a call; the candidates then load plainly, and
//! `stream_loads` or `restrict_const` may add hints back as steps of their own.

use tree_sitter::Node;

use super::edits::{Edit, Edits};
use super::tree::{kernel_function, named_children, text, walk};
use super::RewriteContext;

const INTRINSICS: &[&str] = &["__ldg", "__ldcs", "__ldca", "__ldcg", "__ldlu", "__ldcv"];

/// The file text with every load intrinsic of the kernel's definition written as a plain
/// load; None when it has none.
pub(super) fn plain_loads(cx: &RewriteContext<'_>) -> Option<String> {
    let func = kernel_function(cx)?;
    let mut edits = Vec::new();
    walk(func, &mut |n| {
        if let Some(plain) = plain_load(cx.text, n) {
            edits.push(Edit::replace(n.start_byte()..n.end_byte(), plain));
            return false;
        }
        true
    });
    if edits.is_empty() {
        return None;
    }
    let mut all = Edits::new();
    all.extend(edits);
    all.apply(cx.text).ok()
}

/// `__ldg(&E)` -> `E` (parenthesized unless it is a subscript or a name); `__ldg(P)` ->
/// `*(P)`; None for anything else. Nested intrinsics inside `E` stay as written.
fn plain_load(src: &str, n: Node<'_>) -> Option<String> {
    if n.kind() != "call_expression" {
        return None;
    }
    let f = n.child_by_field_name("function")?;
    if f.kind() != "identifier" || !INTRINSICS.contains(&text(src, f)) {
        return None;
    }
    let [arg] = named_children(n.child_by_field_name("arguments")?)[..] else {
        return None;
    };
    let amp = (arg.kind() == "pointer_expression")
        .then(|| arg.child_by_field_name("operator"))
        .flatten()
        .is_some_and(|o| text(src, o) == "&");
    Some(match (amp, arg.child_by_field_name("argument")) {
        (true, Some(e))
            if matches!(
                e.kind(),
                "subscript_expression" | "identifier" | "parenthesized_expression"
            ) =>
        {
            text(src, e).to_string()
        }
        (true, Some(e)) => format!("({})", text(src, e)),
        _ => format!("*({})", text(src, arg)),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::with_text;
    use super::*;
    use crate::syntax::Lang;

    fn plain(src: &str) -> Option<String> {
        with_text(Lang::Cuda, src, "k", &BTreeMap::new(), plain_loads).flatten()
    }

    #[test]
    fn load_intrinsics_become_plain_loads_in_the_kernel_only() {
        let src = "__device__ float h(const float* p) { return __ldg(p); }\n__global__ void k(const float* __restrict__ x, const float* w, float* y, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    const float* xr = x + i;\n    if (i < n) y[i] = __ldg(&x[i]) + __ldcs(xr + 1) * __ldg(&(w[i])) + h(x);\n}\n";
        expect_test::expect![[r#"
            __device__ float h(const float* p) { return __ldg(p); }
            __global__ void k(const float* __restrict__ x, const float* w, float* y, int n) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                const float* xr = x + i;
                if (i < n) y[i] = x[i] + *(xr + 1) * (w[i]) + h(x);
            }
        "#]]
        .assert_eq(&plain(src).unwrap());
        let none = "__global__ void k(const float* x, float* y) { y[0] = x[0] + __shfl_sync(~0u, 1.f, 0); }\n";
        assert_eq!(plain(none), None);
    }
}
