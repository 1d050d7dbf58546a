//! Names that mean the block's width: a kernel launched with `block = BLOCK` (`#define
//! BLOCK 256`, `constexpr int BLOCK = 256;`, or a template parameter the spec sets) that
//! writes `BLOCK` where it means `blockDim.x`. A name is the width along an axis when its
//! value is the same in every case and equals the block's width along that axis in every
//! case, and the spec's `block` names it along that axis or the kernel's thread index
//! counts blocks of it (`blockIdx.x * BLOCK + threadIdx.x`). A name equal to the widths of
//! two axes, declared inside the kernel, or read by a device helper (which a rewrite does
//! not follow) is none. [`super::block_dim`] writes such a name as `blockDim` where the
//! kernel reads it at run time, and [`follow_block`] keeps the kernel consistent when a
//! candidate launches another width: the names left (array sizes, template arguments)
//! become the new width.

use std::collections::BTreeMap;

use tree_sitter::Node;

use super::block_dim::{block_count, block_widths, file_constants, grid_width, AXES};
use super::check::current_plan;
use super::edits::{Edit, Edits};
use super::spec_expr::components;
use super::tree::{kernel_function, text, walk};
use super::unit::has_token;
use super::RewriteContext;
use crate::optimize::edit::spec_assignment;
use crate::spec::{Arg, BenchPlan, Value};
use crate::syntax::Lang;

/// A name that means the block's width along `axis` (0 is `x`) in one kernel, and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct WidthName {
    pub name: String,
    pub axis: usize,
    pub value: u64,
}

/// The names that mean the block's width in `cx`'s kernel (see the module doc).
pub(super) fn width_names(cx: &RewriteContext<'_>) -> Vec<WidthName> {
    if cx.lang != Lang::Cuda {
        return Vec::new();
    }
    let (Ok(plan), Some(func)) = (current_plan(cx), kernel_function(cx)) else {
        return Vec::new();
    };
    let mut values = file_constants(cx.text, cx.tree.root_node());
    values.extend(template_values(&plan));
    let named = spec_block_names(cx);
    let counted = counted_names(cx.text, func);
    width_rule(&values, &block_widths(&plan), &named, &counted)
        .into_iter()
        .filter(|w| !declared_in(cx.text, func, &w.name) && !helper_reads(cx, func, &w.name))
        .collect()
}

/// The decision: each name the spec's block names along an axis (`named`) or the thread
/// index counts blocks of (`counted`, with its axis) whose constant value (`values`) is
/// the launch's width along that axis in every case (`widths`); a name that would be the
/// width of two axes is left out.
pub(super) fn width_rule(
    values: &BTreeMap<String, u64>,
    widths: &[Option<u64>; 3],
    named: &[Option<String>; 3],
    counted: &[(String, usize)],
) -> Vec<WidthName> {
    let mut found: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let seen = named
        .iter()
        .enumerate()
        .filter_map(|(axis, n)| Some((n.clone()?, axis)))
        .chain(counted.iter().cloned());
    for (name, axis) in seen {
        let fits = values.get(&name).is_some_and(|v| widths[axis] == Some(*v));
        let axes = found.entry(name).or_default();
        if fits && !axes.contains(&axis) {
            axes.push(axis);
        }
    }
    // A name of one axis that equals another axis's width too is ambiguous.
    found
        .into_iter()
        .filter_map(|(name, axes)| {
            let value = *values.get(&name)?;
            let equal = widths.iter().filter(|w| **w == Some(value)).count();
            (axes.len() == 1 && equal == 1).then(|| WidthName {
                name,
                axis: axes[0],
                value,
            })
        })
        .collect()
}

/// `expr` (spec text) with each width name written as its value.
pub(super) fn with_values(expr: &str, names: &[WidthName]) -> String {
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        match names.iter().find(|w| w.name == *word) {
            Some(w) => out.push_str(&w.value.to_string()),
            None => out.push_str(word),
        }
        word.clear();
    };
    for c in expr.chars() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Template arguments with the same integer value in every case.
fn template_values(plan: &BenchPlan) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, Option<u64>> = BTreeMap::new();
    for case in &plan.cases {
        for arg in &case.template_args {
            if let Arg::Constexpr { name, value } = arg {
                let v = match value {
                    Value::Int(i) => u64::try_from(*i).ok(),
                    Value::Float(_) => None,
                };
                let e = out.entry(name.clone()).or_insert(v);
                if *e != v {
                    *e = None;
                }
            }
        }
    }
    out.into_iter().filter_map(|(k, v)| Some((k, v?))).collect()
}

/// The name the spec's `block` gives along each axis, where it is a bare name.
fn spec_block_names(cx: &RewriteContext<'_>) -> [Option<String>; 3] {
    let mut out: [Option<String>; 3] = Default::default();
    let Some(block) = spec_assignment(cx.kernel, "block") else {
        return out;
    };
    for (slot, r) in out.iter_mut().zip(components(&block.text)) {
        let part = block.text[r].trim();
        let ident = part
            .chars()
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_')
            && part.chars().all(|c| c.is_alphanumeric() || c == '_');
        *slot = ident.then(|| part.to_string());
    }
    out
}

/// The names the kernel's thread indices count blocks of and its grid-stride steps
/// multiply `gridDim` by, with their axes.
fn counted_names(src: &str, func: Node<'_>) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    walk(func, &mut |n| {
        let hit = match n.kind() {
            "init_declarator" | "assignment_expression" => n
                .child_by_field_name("value")
                .or_else(|| n.child_by_field_name("right"))
                .and_then(|v| block_count(src, v)),
            "binary_expression" => grid_width(src, n),
            _ => None,
        };
        out.extend(
            hit.filter(|(k, _)| k.kind() == "identifier")
                .map(|(k, axis)| (text(src, k).to_string(), axis)),
        );
        true
    });
    out
}

/// The identifiers `name` read in `func` (not its declarations).
pub(super) fn reads<'t>(src: &str, func: Node<'t>, name: &str) -> Vec<Node<'t>> {
    let mut out = Vec::new();
    walk(func, &mut |n| {
        if n.kind() == "identifier" && text(src, n) == name && !is_declarator(n) {
            out.push(n);
        }
        true
    });
    out
}

fn is_declarator(n: Node<'_>) -> bool {
    n.parent()
        .and_then(|p| p.child_by_field_name("declarator"))
        .is_some_and(|d| d.id() == n.id())
}

/// Does `func` declare a variable or parameter `name` (which hides the file's)?
fn declared_in(src: &str, func: Node<'_>, name: &str) -> bool {
    let mut found = false;
    walk(func, &mut |n| {
        found |= n.kind() == "identifier" && text(src, n) == name && is_declarator(n);
        !found
    });
    found
}

/// Does a `__device__` function of the file other than the kernel read `name`?
fn helper_reads(cx: &RewriteContext<'_>, func: Node<'_>, name: &str) -> bool {
    let mut found = false;
    walk(cx.tree.root_node(), &mut |n| {
        if n.kind() != "function_definition" {
            return !found;
        }
        if n.id() != func.id() && has_token(n, "__device__") {
            found |= !reads(cx.text, n, name).is_empty();
        }
        false
    });
    found
}

/// Is the identifier `n` where C++ needs a compile-time constant: an array size, a
/// template argument, a `case` label, `__launch_bounds__`, a `constexpr` or `static`
/// declaration, a `static_assert` or a preprocessor line?
pub(super) fn constant_context(n: Node<'_>) -> bool {
    let mut at = n.parent();
    while let Some(p) = at {
        let k = p.kind();
        if matches!(
            k,
            "array_declarator"
                | "template_argument_list"
                | "case_statement"
                | "launch_bounds"
                | "static_assert_declaration"
        ) || k.starts_with("preproc")
        {
            return true;
        }
        if k == "declaration" {
            let mut c = p.walk();
            let fixed = p.children(&mut c).any(|q| {
                matches!(q.kind(), "type_qualifier" | "storage_class_specifier")
                    && q.child(0)
                        .is_some_and(|t| matches!(t.kind(), "constexpr" | "static"))
            });
            if fixed {
                return true;
            }
        }
        if k == "function_definition" {
            return false;
        }
        at = p.parent();
    }
    false
}

/// A candidate of a rewrite of `cx`'s kernel kept consistent with the block it launches:
/// where the candidate's block width along a width name's axis is another value in every
/// case, the kernel's reads of the name become `blockDim` (at run time) or the new width
/// (where a constant is needed). None when the new width differs between cases and the
/// name is still read (the candidate is dropped); the text unchanged when there is
/// nothing to follow.
pub(super) fn follow_block(
    cx: &RewriteContext<'_>,
    names: &[WidthName],
    cand: &str,
) -> Option<String> {
    if names.is_empty() {
        return Some(cand.to_string());
    }
    let followed = super::with_text(cx.lang, cand, &cx.kernel.name, cx.params, |c| {
        let (Ok(plan), Some(func)) = (current_plan(c), kernel_function(c)) else {
            return Some(None);
        };
        let widths = block_widths(&plan);
        let mut edits = Vec::new();
        for w in names {
            let uses = reads(c.text, func, &w.name);
            if uses.is_empty() || widths[w.axis] == Some(w.value) {
                continue;
            }
            let new = widths[w.axis]?;
            edits.extend(uses.into_iter().map(|n| {
                let by = if constant_context(n) {
                    new.to_string()
                } else {
                    format!("blockDim.{}", AXES[w.axis])
                };
                Edit::replace(n.byte_range(), by)
            }));
        }
        if edits.is_empty() {
            return Some(None);
        }
        let mut all = Edits::new();
        all.extend(edits);
        Some(all.apply(c.text).ok())
    });
    match followed {
        Some(Some(Some(text))) => Some(text),
        Some(None) => None,
        _ => Some(cand.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::with_text;
    use super::*;

    fn names(src: &str) -> Vec<(String, usize, u64)> {
        with_text(Lang::Cuda, src, "k", &BTreeMap::new(), width_names)
            .unwrap_or_default()
            .into_iter()
            .map(|w| (w.name, w.axis, w.value))
            .collect()
    }

    fn values(v: &[(&str, u64)]) -> BTreeMap<String, u64> {
        v.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn a_name_is_the_width_when_the_spec_or_the_index_proves_it() {
        let named = [Some("BLOCK".to_string()), None, None];
        let got = width_rule(
            &values(&[("BLOCK", 256)]),
            &[Some(256), Some(1), Some(1)],
            &named,
            &[],
        );
        assert_eq!(
            got,
            [WidthName {
                name: "BLOCK".into(),
                axis: 0,
                value: 256
            }]
        );
        // Counted by the index only.
        let got = width_rule(
            &values(&[("NT", 96)]),
            &[Some(96), Some(1), Some(1)],
            &Default::default(),
            &[("NT".into(), 0)],
        );
        assert_eq!(got.len(), 1);
        // Another value than the launch's, or no constant value, or a width of several
        // cases: none.
        for (vals, widths) in [
            (values(&[("BLOCK", 256)]), [Some(128), Some(1), Some(1)]),
            (values(&[]), [Some(256), Some(1), Some(1)]),
            (values(&[("BLOCK", 256)]), [None, Some(1), Some(1)]),
        ] {
            assert!(
                width_rule(&vals, &widths, &named, &[]).is_empty(),
                "{vals:?} {widths:?}"
            );
        }
        // A square block's name could be either axis.
        let both = [Some("T".to_string()), Some("T".to_string()), None];
        assert!(width_rule(
            &values(&[("T", 16)]),
            &[Some(16), Some(16), Some(1)],
            &both,
            &[]
        )
        .is_empty());
        // Of one axis but equal to the other's width too.
        let x = [Some("T".to_string()), None, None];
        assert!(width_rule(
            &values(&[("T", 16)]),
            &[Some(16), Some(16), Some(1)],
            &x,
            &[]
        )
        .is_empty());
    }

    const SPEC: &str = "// @bench n = 1000, 37\n// @bench x: in f32[n]; y: out f32[n]\n";

    #[test]
    fn names_from_defines_constexprs_and_template_parameters() {
        let define = format!("#define BLOCK 256\n#define TILE 64\n{SPEC}// @bench grid = cdiv(n, BLOCK); block = BLOCK\n__global__ void k(const float* x, float* y, int n) {{\n    int i = blockIdx.x * BLOCK + threadIdx.x;\n    for (int t = 0; t < TILE; ++t) if (i < n) y[i] = x[i];\n}}\n");
        assert_eq!(names(&define), [("BLOCK".to_string(), 0, 256)]);
        let constexpr = define
            .replace("#define BLOCK 256", "constexpr int BLOCK = 128;")
            .replace("block = BLOCK", "block = 128");
        assert_eq!(names(&constexpr), [("BLOCK".to_string(), 0, 128)]);
        let template = "// @bench n = 1000, 37; BS = 64\n// @bench x: in f32[n]; y: out f32[n]\n// @bench grid = cdiv(n, BS); block = BS\ntemplate <int BS>\n__global__ void k(const float* x, float* y, int n) {\n    int i = blockIdx.x * BS + threadIdx.x;\n    if (i < n) y[i] = x[i];\n}\n";
        assert_eq!(names(template), [("BS".to_string(), 0, 64)]);
        // TILE is 64 but the block is 256: not the width, even when the index counts it.
        let tile = format!("#define TILE 64\n{SPEC}// @bench grid = cdiv(n, 64); block = 256\n__global__ void k(const float* x, float* y, int n) {{\n    int i = blockIdx.x * TILE + threadIdx.x;\n    if (i < n) y[i] = x[i];\n}}\n");
        assert!(names(&tile).is_empty());
        // Hidden by a local of the same name, or read by a device helper.
        let local = define.replace(
            "int i = blockIdx.x * BLOCK",
            "int BLOCK = 3; int i = blockIdx.x * BLOCK",
        );
        assert!(names(&local).is_empty());
        let helper = define.replace(
            "__global__ void k",
            "__device__ int half() { return BLOCK / 2; }\n__global__ void k",
        );
        assert!(names(&helper).is_empty());
    }

    #[test]
    fn spec_text_gets_the_names_values() {
        let w = [WidthName {
            name: "BLOCK".into(),
            axis: 0,
            value: 256,
        }];
        assert_eq!(
            with_values("cdiv(n * BLOCK_ROWS, BLOCK)", &w),
            "cdiv(n * BLOCK_ROWS, 256)"
        );
        assert_eq!(with_values("(BLOCK, 2)", &w), "(256, 2)");
    }

    #[test]
    fn a_candidate_of_another_width_reads_blockdim_or_the_new_width() {
        let src = format!("#define BLOCK 256\n{SPEC}// @bench grid = cdiv(n, BLOCK); block = BLOCK\n__global__ void k(const float* x, float* y, int n) {{\n    __shared__ float s[BLOCK];\n    int i = blockIdx.x * BLOCK + threadIdx.x;\n    for (int h = BLOCK / 2; h > 0; h >>= 1) s[threadIdx.x] = 0.0f;\n    if (i < n) y[i] = x[i];\n}}\n");
        let follow = |cand: &str| {
            with_text(Lang::Cuda, &src, "k", &BTreeMap::new(), |cx| {
                follow_block(cx, &width_names(cx), cand)
            })
            .flatten()
        };
        let wider = src
            .replace("block = BLOCK", "block = 512")
            .replace("cdiv(n, BLOCK)", "cdiv(n, 512)");
        let out = follow(&wider).unwrap();
        assert!(out.starts_with("#define BLOCK 256\n"), "{out}");
        assert!(out.contains("__shared__ float s[512];"), "{out}");
        assert!(
            out.contains("int i = blockIdx.x * blockDim.x + threadIdx.x;"),
            "{out}"
        );
        assert!(out.contains("int h = blockDim.x / 2;"), "{out}");
        // The same width: unchanged.
        assert_eq!(follow(&src).as_deref(), Some(src.as_str()));
        // A width that differs between cases, with the name still read: dropped.
        let tuned = src.replace("block = BLOCK", "block = T").replace(
            "// @bench n = 1000, 37",
            "// @bench n = 1000, 37; T = 128, 512",
        );
        assert_eq!(follow(&tuned), None);
    }
}

#[cfg(test)]
mod refusals {
    use serde_json::json;

    use super::super::check::testing::{cuda, not_applicable};

    /// A rewrite that refuses a kernel whose index counts blocks of its width's name says
    /// why the kernel's shape does not fit, not that the index is not written with
    /// `blockDim.x`.
    #[test]
    fn a_refusal_names_the_shape_not_the_width_name() {
        let src = "#define BLOCK 128\n// @bench n = 1000, 37\n// @bench x: in f32[n]; y: out f32[n]\n// @bench grid = cdiv(n, BLOCK); block = BLOCK\n__global__ void k(const float* x, float* y, int n) {\n    int i = blockIdx.x * BLOCK + threadIdx.x;\n    if (i < n) y[i] = 2.0f * x[i];\n}\n";
        assert_eq!(
            not_applicable(cuda(src, "k", "privatize_atomics", json!({}))),
            "`k` has no `atomicAdd(&h[e], v)` on a pointer parameter"
        );
        // A name that is not the width keeps the refusal of the index as written.
        let tile = src
            .replace("block = BLOCK", "block = 256")
            .replace("cdiv(n, BLOCK)", "cdiv(n, 256)");
        let why = not_applicable(cuda(&tile, "k", "privatize_atomics", json!({})));
        assert!(why.contains("is not the 1-D index"), "{why}");
    }
}
