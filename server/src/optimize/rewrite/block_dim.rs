//! Thread indices that count blocks of a constant, written with `blockDim`: `int i =
//! blockIdx.x * 256 + threadIdx.x;` becomes `int i = blockIdx.x * blockDim.x +
//! threadIdx.x;` when every case of the spec launches blocks of exactly that width along
//! the axis (the same for `y` and `z`), and so does a grid-stride step `256 * gridDim.x`.
//! A name that means the block's width ([`super::width_names`]: `#define BLOCK 256`,
//! `constexpr int kBlock = 128;`, a template parameter the spec sets, named by the spec's
//! `block` or counted by the index) is written as `blockDim` wherever the kernel reads it
//! at run time: the index, a grid-stride or block loop's step, a reduction's `BLOCK / 2`.
//! Where a constant is needed (`__shared__ float s[BLOCK]`, a template argument) the name
//! stays; a candidate that launches another width gets the new width there
//! ([`super::width_names::follow_block`]). That is the shape the elementwise, row and
//! column rewrites read, and the value is the same in every thread of every case. The
//! dispatcher retries a rewrite that refused the kernel on this text (see
//! [`super::apply`]).

use std::collections::BTreeMap;

use tree_sitter::Node;

use super::check::current_plan;
use super::edits::{Edit, Edits};
use super::elementwise::INDEX_CASTS;
use super::tree::{kernel_function, named_children, text, walk};
use super::width_names::{constant_context, reads, width_names};
use super::RewriteContext;
use crate::spec::{BenchPlan, Launch};

pub(super) const AXES: [&str; 3] = ["x", "y", "z"];

/// The file text with each thread index of the kernel that counts blocks of a literal
/// equal to the launch's block width written with `blockDim`, and every run-time read of
/// a name that means the width ([`width_names`]) too; None when there is none.
pub(super) fn block_dim_written(cx: &RewriteContext<'_>) -> Option<String> {
    block_dim_form(cx).map(|(text, _)| text)
}

/// [`block_dim_written`]'s text and its edits (each a width's node replaced by
/// `blockDim.A`), which map the written text back to the author's.
pub(super) fn block_dim_form(cx: &RewriteContext<'_>) -> Option<(String, Vec<Edit>)> {
    let edits = block_dim_edits(cx)?;
    let mut all = Edits::new();
    all.extend(edits.clone());
    Some((all.apply(cx.text).ok()?, edits))
}

/// The edits of [`block_dim_form`]; None when there is none.
fn block_dim_edits(cx: &RewriteContext<'_>) -> Option<Vec<Edit>> {
    let plan = current_plan(cx).ok()?;
    let widths = block_widths(&plan);
    let func = kernel_function(cx)?;
    let mut found = Vec::new();
    walk(func, &mut |n| {
        let hit = match n.kind() {
            "init_declarator" => n
                .child_by_field_name("value")
                .and_then(|v| block_count(cx.text, v)),
            "binary_expression" => grid_width(cx.text, n),
            _ => None,
        };
        found.extend(hit);
        true
    });
    let mut at: BTreeMap<usize, (Node, usize)> = counted_widths(cx, func, found, &widths)
        .into_iter()
        .map(|(k, axis)| (k.start_byte(), (k, axis)))
        .collect();
    for w in width_names(cx) {
        let run_time = reads(cx.text, func, &w.name)
            .into_iter()
            .filter(|n| !constant_context(*n));
        at.extend(run_time.map(|n| (n.start_byte(), (n, w.axis))));
    }
    let edits: Vec<Edit> = at
        .into_values()
        .map(|(k, axis)| Edit::replace(k.byte_range(), format!("blockDim.{}", AXES[axis])))
        .collect();
    (!edits.is_empty()).then_some(edits)
}

/// The index and grid-step occurrences (`found`) whose literal, or constant name read
/// nowhere else in the kernel, is the launch's width along their axis (a name of a square
/// block's two axes is read by each occurrence's axis).
fn counted_widths<'t>(
    cx: &RewriteContext<'_>,
    func: Node<'t>,
    found: Vec<(Node<'t>, usize)>,
    widths: &[Option<u64>; 3],
) -> Vec<(Node<'t>, usize)> {
    let consts = file_constants(cx.text, cx.tree.root_node());
    let fits: Vec<(Node, usize)> = found
        .into_iter()
        .filter(|(k, axis)| {
            let name = text(cx.text, *k);
            let value = match k.kind() {
                "number_literal" => int_literal(name),
                _ => consts.get(name).copied(),
            };
            value.is_some() && value == widths[*axis]
        })
        .collect();
    fits.iter()
        .filter(|(k, _)| {
            let name = text(cx.text, *k);
            let counted = fits
                .iter()
                .filter(|(o, _)| text(cx.text, *o) == name)
                .count();
            k.kind() == "number_literal" || reads(cx.text, func, name).len() <= counted
        })
        .copied()
        .collect()
}

/// The block's width along each axis when every case launches the same one.
pub(super) fn block_widths(plan: &BenchPlan) -> [Option<u64>; 3] {
    let mut out = [None; 3];
    for (axis, w) in out.iter_mut().enumerate() {
        let mut all = plan.cases.iter().map(|c| match &c.launch {
            Launch::Cuda { block, .. } => Some(block[axis]),
            Launch::Triton { .. } => None,
        });
        let first = all.next().flatten();
        if all.all(|b| b == first) {
            *w = first;
        }
    }
    out
}

/// `blockIdx.A * K + threadIdx.A` in either order, parenthesized or cast to an integer
/// type anywhere: the node of `K` (a name or an integer literal) and the axis A.
pub(super) fn block_count<'t>(src: &str, value: Node<'t>) -> Option<(Node<'t>, usize)> {
    let (l, r) = operands(src, bare(src, value), "+")?;
    let (product, t) = match thread_axis(src, r, "threadIdx") {
        Some(t) => (l, t),
        None => (r, thread_axis(src, l, "threadIdx")?),
    };
    let (a, b) = operands(src, bare(src, product), "*")?;
    let (block, k) = match thread_axis(src, a, "blockIdx") {
        Some(axis) => (axis, bare(src, b)),
        None => (thread_axis(src, b, "blockIdx")?, bare(src, a)),
    };
    (block == t && matches!(k.kind(), "identifier" | "number_literal")).then_some((k, t))
}

/// `K * gridDim.A` in either order (a grid-stride loop's step): the node of `K` and A.
pub(super) fn grid_width<'t>(src: &str, n: Node<'t>) -> Option<(Node<'t>, usize)> {
    let (a, b) = operands(src, n, "*")?;
    let (axis, k) = match thread_axis(src, a, "gridDim") {
        Some(axis) => (axis, bare(src, b)),
        None => (thread_axis(src, b, "gridDim")?, bare(src, a)),
    };
    matches!(k.kind(), "identifier" | "number_literal").then_some((k, axis))
}

/// The axis of `builtin.A` (`threadIdx.y` is 1), through parentheses and casts.
fn thread_axis(src: &str, n: Node<'_>, builtin: &str) -> Option<usize> {
    let t: String = text(src, bare(src, n))
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let field = t.strip_prefix(builtin)?.strip_prefix('.')?;
    AXES.iter().position(|a| *a == field)
}

/// The operands of a binary expression with operator `op`.
fn operands<'t>(src: &str, n: Node<'t>, op: &str) -> Option<(Node<'t>, Node<'t>)> {
    if n.kind() != "binary_expression" || text(src, n.child_by_field_name("operator")?) != op {
        return None;
    }
    Some((
        n.child_by_field_name("left")?,
        n.child_by_field_name("right")?,
    ))
}

/// `n` without enclosing parentheses and integer casts.
fn bare<'t>(src: &str, n: Node<'t>) -> Node<'t> {
    let inner = match n.kind() {
        "parenthesized_expression" => n.named_child(0),
        "cast_expression" => {
            let ty: String = n
                .child_by_field_name("type")
                .map_or("", |t| text(src, t))
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect();
            INDEX_CASTS
                .contains(&ty.as_str())
                .then(|| n.child_by_field_name("value"))
                .flatten()
        }
        _ => None,
    };
    inner.map_or(n, |i| bare(src, i))
}

/// An integer literal's value (`256`, `256u`, `0x100`, `(256)`).
fn int_literal(s: &str) -> Option<u64> {
    let s = s
        .trim()
        .trim_start_matches('(')
        .trim_end_matches(')')
        .trim();
    let s = s.trim_end_matches(['u', 'U', 'l', 'L']);
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Integer constants of the file: object-like `#define NAME 256` anywhere (inside
/// `#ifndef` too) and `const`/`constexpr` integer declarations at file scope with a
/// literal value. A name given two different values is left out.
pub(super) fn file_constants(src: &str, root: Node<'_>) -> BTreeMap<String, u64> {
    let mut seen: BTreeMap<String, Option<u64>> = BTreeMap::new();
    let mut note = |name: &str, v: Option<u64>| {
        let e = seen.entry(name.to_string()).or_insert(v);
        if *e != v {
            *e = None;
        }
    };
    walk(root, &mut |n| match n.kind() {
        "preproc_def" => {
            if let Some(name) = n.child_by_field_name("name") {
                let v = n.child_by_field_name("value").map(|v| text(src, v));
                note(text(src, name), v.and_then(int_literal));
            }
            false
        }
        "function_definition" => false,
        "declaration" => {
            let constant = named_children(n).iter().any(|q| {
                q.kind() == "type_qualifier" && matches!(text(src, *q), "const" | "constexpr")
            });
            let mut c = n.walk();
            for d in n.children_by_field_name("declarator", &mut c) {
                let (Some(name), Some(v)) = (
                    d.child_by_field_name("declarator"),
                    d.child_by_field_name("value"),
                ) else {
                    continue;
                };
                let v = (constant && v.kind() == "number_literal")
                    .then(|| int_literal(text(src, v)))
                    .flatten();
                note(text(src, name), v);
            }
            false
        }
        _ => true,
    });
    seen.into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::with_text;
    use super::*;
    use crate::syntax::Lang;

    fn written(src: &str) -> Option<String> {
        with_text(Lang::Cuda, src, "k", &BTreeMap::new(), block_dim_written).flatten()
    }

    const SPEC: &str = "// @bench n = 1000, 37\n// @bench x: in f32[n]; y: out f32[n]\n";

    #[test]
    fn a_named_or_literal_block_width_becomes_block_dim() {
        let src = format!("#define THREADS 256\n{SPEC}// @bench grid = cdiv(n, 256); block = 256\n__global__ void k(const float* x, float* y, int n) {{\n    int i = blockIdx.x * THREADS + threadIdx.x;\n    if (i < n) y[i] = 2.0f * x[i];\n}}\n");
        let out = written(&src).unwrap();
        assert!(
            out.contains("int i = blockIdx.x * blockDim.x + threadIdx.x;"),
            "{out}"
        );
        assert!(out.starts_with("#define THREADS 256\n"), "{out}");
        let cases = [
            (
                "constexpr int BS = 128;\n",
                "128",
                "(size_t)blockIdx.x * BS + threadIdx.x",
                "(size_t)blockIdx.x * blockDim.x + threadIdx.x",
            ),
            (
                "",
                "128",
                "threadIdx.x + 128 * blockIdx.x",
                "threadIdx.x + blockDim.x * blockIdx.x",
            ),
            (
                "#ifndef BS\n#define BS (64u)\n#endif\n",
                "64",
                "(int)(blockIdx.x * BS) + threadIdx.x",
                "(int)(blockIdx.x * blockDim.x) + threadIdx.x",
            ),
        ];
        for (head, block, index, want) in cases {
            let src = format!("{head}{SPEC}// @bench grid = cdiv(n, {block}); block = {block}\n__global__ void k(const float* x, float* y, int n) {{\n    long i = {index};\n    if (i < n) y[i] = x[i];\n}}\n");
            let out = written(&src).unwrap_or_default();
            assert!(out.contains(&format!("long i = {want};")), "{index}: {out}");
        }
    }

    #[test]
    fn a_grid_stride_step_in_the_constant_is_written_with_block_dim_too() {
        let src = format!("#define BS 256\n{SPEC}// @bench grid = cdiv(n, BS); block = BS; BS = 256\n__global__ void k(const float* x, float* y, int n) {{\n    for (int i = blockIdx.x * BS + threadIdx.x; i < n; i += BS * gridDim.x) y[i] = x[i];\n}}\n");
        let out = written(&src).unwrap();
        assert!(
            out.contains("for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)"),
            "{out}"
        );
        // The step alone, with the index already in blockDim: still the block's width.
        let step = src.replace("blockIdx.x * BS", "blockIdx.x * blockDim.x");
        assert!(written(&step)
            .unwrap()
            .contains("i += blockDim.x * gridDim.x"));
    }

    #[test]
    fn the_y_axis_of_a_two_d_block_is_read_too() {
        let src = "#define TX 32\n#define TY 8\n// @bench R = 100, 7; C = 300, 5\n// @bench x: in f32[R, C]; y: out f32[R, C]\n// @bench grid = (cdiv(C, TX), cdiv(R, TY)); block = (TX, TY); TX = 32; TY = 8\n__global__ void k(const float* x, float* y, int R, int C) {\n    int c = blockIdx.x * TX + threadIdx.x;\n    int r = blockIdx.y * TY + threadIdx.y;\n    if (r < R && c < C) y[r * C + c] = x[r * C + c];\n}\n";
        let out = written(src).unwrap();
        assert!(
            out.contains("int c = blockIdx.x * blockDim.x + threadIdx.x;"),
            "{out}"
        );
        assert!(
            out.contains("int r = blockIdx.y * blockDim.y + threadIdx.y;"),
            "{out}"
        );
    }

    #[test]
    fn widths_that_differ_or_names_used_elsewhere_stay() {
        let kernels = [
            // the block is 128, the constant 256
            ("#define B 256\n", "128", "int i = blockIdx.x * B + threadIdx.x;\n    if (i < n) y[i] = x[i];"),
            // a run-time value, not a constant
            ("", "128", "int b = n / 8;\n    int i = blockIdx.x * b + threadIdx.x;\n    if (i < n) y[i] = x[i];"),
            // a constant of two values
            ("#ifdef BIG\n#define B 256\n#else\n#define B 128\n#endif\n", "128", "int i = blockIdx.x * B + threadIdx.x;\n    if (i < n) y[i] = x[i];"),
            // the thread's and the block's axes differ
            ("#define B 128\n", "128", "int i = blockIdx.y * B + threadIdx.x;\n    if (i < n) y[i] = x[i];"),
            // already blockDim
            ("", "128", "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = x[i];"),
        ];
        for (head, block, body) in kernels {
            let src = format!("{head}{SPEC}// @bench grid = cdiv(n, {block}); block = {block}\n__global__ void k(const float* x, float* y, int n) {{\n    {body}\n}}\n");
            assert_eq!(written(&src), None, "{head}{body}");
        }
        // Cases that launch different widths.
        let two = "#define B 128\n// @bench n = 1000, 37; T = 128, 256\n// @bench x: in f32[n]; y: out f32[n]\n// @bench grid = cdiv(n, T); block = T\n__global__ void k(const float* x, float* y, int n) {\n    int i = blockIdx.x * B + threadIdx.x;\n    if (i < n) y[i] = x[i];\n}\n";
        assert_eq!(written(two), None);
    }

    #[test]
    fn a_width_name_that_also_sizes_an_array_keeps_the_size_and_its_reads_become_block_dim() {
        let src = format!("#define B 128\n{SPEC}// @bench grid = cdiv(n, B); block = B\n__global__ void k(const float* x, float* y, int n) {{\n    __shared__ float s[B];\n    int i = blockIdx.x * B + threadIdx.x;\n    for (int h = B / 2; h > 0; h >>= 1) s[threadIdx.x] = 0.0f;\n    if (i < n) {{ s[threadIdx.x] = x[i]; y[i] = s[threadIdx.x]; }}\n}}\n");
        let out = written(&src).unwrap();
        assert!(out.contains("__shared__ float s[B];"), "{out}");
        assert!(
            out.contains("int i = blockIdx.x * blockDim.x + threadIdx.x;"),
            "{out}"
        );
        assert!(out.contains("int h = blockDim.x / 2;"), "{out}");
        assert!(
            out.contains("// @bench grid = cdiv(n, B); block = B"),
            "{out}"
        );
    }

    #[test]
    fn literals_read_in_their_c_forms() {
        assert_eq!(int_literal("256"), Some(256));
        assert_eq!(int_literal(" (256u) "), Some(256));
        assert_eq!(int_literal("0x100"), Some(256));
        assert_eq!(int_literal("256L"), Some(256));
        assert_eq!(int_literal("2.5f"), None);
        assert_eq!(int_literal("BLOCK"), None);
    }
}
