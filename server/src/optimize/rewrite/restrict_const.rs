//! `restrict_const`: `__restrict__` on every named pointer parameter of the kernel that
//! lacks it, and `const` on the pointee of every pointer the kernel provably only reads
//! through (see [`only_read_through`]): never a wrong `const`, so a parameter whose
//! element is written, incremented, bound to a reference, passed to a unit function with
//! a reference parameter, whose address is taken, that is passed on, cast, compared or
//! assigned, or that a macro body names, stays as it is. One candidate.

use std::collections::HashSet;

use tree_sitter::Node;

use super::edits::Edit;
use super::unit::*;
use super::RewriteContext;
use crate::syntax::ParamKind;

/// `__restrict__` on every named pointer parameter of the kernel that lacks it, and
/// `const` on the pointee of every pointer the kernel provably only reads through
/// (see [`only_read_through`]). One candidate.
pub fn restrict_const(cx: &RewriteContext<'_>) -> R {
    let unit = Unit::of(cx, "restrict_const")?;
    let macro_words = macro_words(cx);
    let ref_callees = reference_taking_functions(cx, &unit);
    let mut edits = Vec::new();
    let (mut restricted, mut consted) = (Vec::new(), Vec::new());
    for p in &cx.kernel.params {
        let ParamKind::Pointer { is_const, .. } = &p.kind else {
            continue;
        };
        let Some(decl) = node_with_range(cx, &p.range, "parameter_declaration") else {
            continue;
        };
        let Some(ptr) = decl
            .child_by_field_name("declarator")
            .filter(|d| d.kind() == "pointer_declarator")
        else {
            continue;
        };
        let Some(ident) = ptr
            .child_by_field_name("declarator")
            .filter(|d| d.kind() == "identifier")
        else {
            continue; // unnamed, or `T* const* p`-like shapes: leave them
        };
        let has_restrict = named_children(ptr).iter().any(|c| {
            c.kind() == "type_qualifier"
                && matches!(text(cx, *c), "__restrict__" | "__restrict" | "restrict")
        });
        if !has_restrict {
            edits.push(Edit::insert(ident.start_byte(), "__restrict__ "));
            restricted.push(p.name.clone());
        }
        if !is_const
            && !macro_words.contains(p.name.as_str())
            && only_read_through(cx, unit.kernel, &p.name, &ref_callees)
        {
            edits.push(Edit::insert(decl.start_byte(), "const "));
            consted.push(p.name.clone());
        }
    }
    if edits.is_empty() {
        let pointers = cx
            .kernel
            .params
            .iter()
            .filter(|p| matches!(p.kind, ParamKind::Pointer { .. }))
            .count();
        return Err(na(if pointers == 0 {
            format!("`{}` has no pointer parameter", cx.kernel.name)
        } else {
            format!(
                "every pointer parameter of `{}` is already `__restrict__`, and the others \
                 are written through, passed on or cast, so `const` cannot be added safely",
                cx.kernel.name
            )
        }));
    }
    let mut parts = Vec::new();
    if !restricted.is_empty() {
        parts.push(format!("__restrict__ on {}", restricted.join(", ")));
    }
    if !consted.is_empty() {
        parts.push(format!("const on {}", consted.join(", ")));
    }
    Ok(vec![finish(cx, "restrict_const", parts.join("; "), edits)?])
}

/// Does the kernel body use pointer parameter `name` only to read elements (`p[i]`,
/// `*p`, `*(p + i)`, `p->f`, `(p + i)[j]`, as an rvalue)? Anything else, an element on
/// the left of an assignment, `++`/`--`, `&p[i]` (except for `__ldg`-style loads), the
/// pointer passed to a call, cast, compared, assigned or shadowed, a reference bound
/// to an element, says no: the answer must never be a wrong yes.
pub(super) fn only_read_through(
    cx: &RewriteContext<'_>,
    kernel: Node<'_>,
    name: &str,
    ref_callees: &HashSet<String>,
) -> bool {
    let Some(body) = kernel.child_by_field_name("body") else {
        return false;
    };
    descendants(body)
        .into_iter()
        .filter(|n| n.kind() == "identifier" && text(cx, *n) == name)
        .all(|id| element_access(id).is_some_and(|a| rvalue_use(cx, a, ref_callees)))
}

/// The element access (`p[i]`, `*p`, `*(p + i)`, `p->f`) that pointer identifier `id`
/// is the base of, or `None` when `id` is used in any other way.
pub(super) fn element_access(id: Node<'_>) -> Option<Node<'_>> {
    let mut n = id;
    loop {
        let p = n.parent()?;
        match p.kind() {
            "parenthesized_expression" => n = p,
            "binary_expression" => {
                let op = field_kind(p, "operator");
                let left = p
                    .child_by_field_name("left")
                    .is_some_and(|l| l.id() == n.id());
                // `p + i`, `i + p`, `p - i` stay pointers into the same buffer.
                if op == Some("+") || (op == Some("-") && left) {
                    n = p;
                } else {
                    return None;
                }
            }
            _ => break,
        }
    }
    let p = n.parent()?;
    let is_arg = |f: &str| p.child_by_field_name(f).is_some_and(|a| a.id() == n.id());
    match p.kind() {
        "subscript_expression" if is_arg("argument") => Some(p),
        "pointer_expression" if field_kind(p, "operator") == Some("*") => Some(p),
        "field_expression" if field_kind(p, "operator") == Some("->") && is_arg("argument") => {
            Some(p)
        }
        _ => None,
    }
}

/// Is element access `a` (or a member or sub-element of it) only read?
pub(super) fn rvalue_use(
    cx: &RewriteContext<'_>,
    access: Node<'_>,
    ref_callees: &HashSet<String>,
) -> bool {
    let mut a = access;
    for _ in 0..64 {
        let Some(mut p) = a.parent() else {
            return true;
        };
        while p.kind() == "parenthesized_expression" {
            a = p;
            match p.parent() {
                Some(pp) => p = pp,
                None => return true,
            }
        }
        let is = |f: &str| p.child_by_field_name(f).is_some_and(|c| c.id() == a.id());
        match p.kind() {
            "assignment_expression" if is("left") => return false,
            "update_expression" => return false,
            "pointer_expression" if field_kind(p, "operator") == Some("&") => {
                return p
                    .parent()
                    .filter(|l| l.kind() == "argument_list")
                    .and_then(|l| l.parent())
                    .and_then(|c| plain_callee(cx, c))
                    .is_some_and(|f| READ_ONLY_LOADS.contains(&f));
            }
            // `p[i].x`, `p[i][j]`: the same question for the bigger lvalue.
            "field_expression" if is("argument") => {
                if field_kind(p, "operator") == Some("->") {
                    return true; // the element is a pointer; writing through it is not writing `p`
                }
                a = p;
            }
            "subscript_expression" if is("argument") => a = p,
            "call_expression" if is("function") => return false, // a method or functor
            "argument_list" => {
                let Some(call) = p.parent().filter(|c| c.kind() == "call_expression") else {
                    return false; // constructor-style initialisers and the like
                };
                return plain_callee(cx, call).is_some_and(|f| !ref_callees.contains(f));
            }
            "init_declarator" => {
                let by_ref = p
                    .child_by_field_name("declarator")
                    .is_some_and(|d| d.kind() == "reference_declarator");
                return !by_ref;
            }
            "cast_expression" => {
                let ty = p.child_by_field_name("type").map_or("", |t| text(cx, t));
                return !ty.contains('&');
            }
            "gnu_asm_output_operand" | "gnu_asm_input_operand" => return false,
            _ => return true,
        }
    }
    false
}

/// Loads that take `&p[i]` and only read it.
pub(super) const READ_ONLY_LOADS: &[&str] =
    &["__ldg", "__ldca", "__ldcg", "__ldcs", "__ldlu", "__ldcv"];

/// Names of unit functions with a reference parameter: passing `p[i]` to one of them
/// may write it.
pub(super) fn reference_taking_functions(
    cx: &RewriteContext<'_>,
    unit: &Unit<'_>,
) -> HashSet<String> {
    let mut out = HashSet::new();
    for f in &unit.funcs {
        let Some((name, params)) = name_and_params(cx, *f) else {
            continue;
        };
        let takes_ref = named_children(params).iter().any(|p| {
            descendants(*p)
                .iter()
                .any(|d| d.kind() == "reference_declarator")
        });
        if takes_ref {
            out.insert(name.to_string());
        }
    }
    out
}

/// Every identifier-like word in the file's macro bodies: a kernel that uses a macro
/// that names its parameter may write through it without the parameter appearing in
/// the body, so such parameters never get `const`.
pub(super) fn macro_words<'s>(cx: &RewriteContext<'s>) -> HashSet<&'s str> {
    let mut words = HashSet::new();
    let src: &'s str = cx.text;
    for n in descendants(cx.tree.root_node()) {
        if n.kind() != "preproc_arg" {
            continue;
        }
        let body = src.get(n.byte_range()).unwrap_or("");
        words.extend(body.split(|c: char| !(c.is_alphanumeric() || c == '_')));
    }
    words
}

#[cfg(test)]
mod tests {

    use expect_test::expect;

    use super::super::unit::testing::*;

    #[test]
    fn restrict_const_on_the_examples() {
        check(
            "restrict_const",
            SAXPY,
            "saxpy",
            params(NONE),
            expect![[r###"
            ## __restrict__ on x, y
            extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }
        "###]],
        );
        check(
            "restrict_const",
            MATMUL,
            "matmul",
            params(NONE),
            expect![[r###"
            ## __restrict__ on a, b, c
            extern "C" __global__ void matmul(int m, int n, int k, const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c) {
                int row = blockIdx.y * blockDim.y + threadIdx.y;
                int col = blockIdx.x * blockDim.x + threadIdx.x;
                if (row < m && col < n) {
                    float acc = 0.0f;
                    for (int i = 0; i < k; ++i) {
                        acc += a[row * k + i] * b[i * n + col];
                    }
                    c[row * n + col] = acc;
                }
            }
        "###]],
        );
        check(
            "restrict_const",
            REDUCE,
            "reduce_tree",
            params(NONE),
            expect![[r###"
                ## __restrict__ on x, out
                __device__ float load_as_float(const __half* p, int i) {
                    return __half2float(p[i]);
                }
                extern "C" __global__ void __launch_bounds__(BLOCK) reduce_tree(int n, const __half* __restrict__ x, float* __restrict__ out) {
                    extern __shared__ float buf[];
                    int i = blockIdx.x * BLOCK + threadIdx.x;
                    buf[threadIdx.x] = i < n ? load_as_float(x, i) : 0.0f;
                    __syncthreads();
                    for (int s = BLOCK / 2; s > 0; s >>= 1) {
                        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
                        __syncthreads();
                    }
                    if (threadIdx.x == 0) atomicAdd(out, buf[0]);
                }
            "###]],
        );
    }

    /// Every way of writing or leaking a pointer keeps it non-const; comments, strings
    /// and odd spacing stay as they are.
    const WRITES: &str = r#"#include <cuda_fp16.h>
__device__ void store(float* p, int i, float v) { p[i] = v; }

// @bench n = 1024
// @bench a: in f32[n]; b: in f32[n]; c: out f32[n]; d: inout f32[n]
// @bench e: out f32[n]; f: out f32[n]; g: in f32[n]; h: inout f32[n]
// @bench grid = cdiv(n, 128); block = 128
extern "C" __global__ void k(int n,
                  float *a,   // read only: gets const
                  float* /* odd */ b,
                  float *c,
                  float * d,
                  float* e, float *f, float*g, float* h) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = a[i] + *(b + i) + __ldg(&g[i]);   // a[i] = 0; in a comment is no write
    const char* msg = "c[i] = 1"; (void)msg;
    *(c + i) = v;          // written through *(p + i): no const
    d[i] += 1.0f;
    atomicAdd(&e[i], v);
    store(f, i, v);
    float* alias = h;
    alias[i] = v;
}
"#;

    #[test]
    fn restrict_const_only_consts_what_is_only_read() {
        check(
            "restrict_const",
            WRITES,
            "k",
            params(NONE),
            expect![[r###"
            ## __restrict__ on a, b, c, d, e, f, g, h; const on a, b, g
            __device__ void store(float* p, int i, float v) { p[i] = v; }
            extern "C" __global__ void k(int n,
                              const float *__restrict__ a,   // read only: gets const
                              const float* /* odd */ __restrict__ b,
                              float *__restrict__ c,
                              float * __restrict__ d,
                              float* __restrict__ e, float *__restrict__ f, const float*__restrict__ g, float* __restrict__ h) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i >= n) return;
                float v = a[i] + *(b + i) + __ldg(&g[i]);   // a[i] = 0; in a comment is no write
                const char* msg = "c[i] = 1"; (void)msg;
                *(c + i) = v;          // written through *(p + i): no const
                d[i] += 1.0f;
                atomicAdd(&e[i], v);
                store(f, i, v);
                float* alias = h;
                alias[i] = v;
            }
        "###]],
        );
    }

    #[test]
    fn restrict_const_in_a_template_kernel() {
        let src = "// @bench n = 64\n// @bench x: in f32[n]; y: out f32[n]\n// @bench tune T in [1]\n// @bench grid = 1; block = 64\ntemplate <int T>\n__global__ void t(int n, const float *x, float *y) {\n    int i = threadIdx.x;\n    if (i < n) y[i] = T * x[i];\n}\n";
        check(
            "restrict_const",
            src,
            "t",
            params(NONE),
            expect![[r#"
            ## __restrict__ on x, y
            template <int T>
            __global__ void t(int n, const float *__restrict__ x, float *__restrict__ y) {
                int i = threadIdx.x;
                if (i < n) y[i] = T * x[i];
            }
        "#]],
        );
    }

    #[test]
    fn restrict_const_has_nothing_to_do() {
        let done = "__global__ void k(const float* __restrict__ x, float* __restrict__ y) { y[0] = x[0]; }\n";
        check(
            "restrict_const",
            done,
            "k",
            params(NONE),
            expect![[r#"
            error: every pointer parameter of `k` is already `__restrict__`, and the others are written through, passed on or cast, so `const` cannot be added safely
        "#]],
        );
        let scalars = "__global__ void k(int n, float a) {}\n";
        check(
            "restrict_const",
            scalars,
            "k",
            params(NONE),
            expect![[r#"
            error: `k` has no pointer parameter
        "#]],
        );
    }

    #[test]
    fn a_macro_naming_the_pointer_keeps_it_non_const() {
        let src = "#define ZERO(i) y[i] = 0.0f\n__global__ void k(float* __restrict__ y) { ZERO(threadIdx.x); }\n";
        check(
            "restrict_const",
            src,
            "k",
            params(NONE),
            expect![[r#"
            error: every pointer parameter of `k` is already `__restrict__`, and the others are written through, passed on or cast, so `const` cannot be added safely
        "#]],
        );
    }
}
