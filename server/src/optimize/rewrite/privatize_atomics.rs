//! `privatize_atomics`: global atomics into a small array (a histogram, a scatter-add
//! into a few bins) become a per-block copy in shared memory, a grid-stride loop over a
//! grid of a few blocks per SM, and one global atomic per nonzero bin per block.
//!
//! **Matches** the 1-D elementwise shape (`int i = blockIdx.x * blockDim.x +
//! threadIdx.x; if (i < n) { ... }`, or `if (i >= n) return;`) whose body does
//! `atomicAdd(&h[e], v)` (or `atomicAdd(h + e, v)`) on one or more pointer parameters
//! `h` that it touches in no other way. The element counts of `h` come from the spec:
//! the same in every case, they size a static `__shared__` copy; different between
//! cases, a kernel parameter must hold the count in every case and the copy becomes
//! dynamic shared memory (`smem` in the spec).
//!
//! **Writes** `__shared__ T h_s[N]` zeroed by the block, `__syncthreads()`, the body as a
//! grid-stride loop with its atomics on `h_s`, `__syncthreads()`, then every nonzero bin
//! added to `h` with one `atomicAdd` per bin per block. The grid becomes
//! `min(grid, sms * K)` for K in param `blocks_per_sm` (default [2, 4, 8]).
//!
//! **Refuses**: another shape; `h` read, written or passed other than as an
//! `atomicAdd` address; another atomic (`atomicMax` has no zero to start a copy from);
//! an element type shared-memory `atomicAdd` does not take; copies over 48 KiB; element
//! counts that change between cases with no parameter holding them; a spec that already
//! uses dynamic shared memory; what `grid_stride` refuses (barriers, `threadIdx` in the
//! body, a 2-D launch, a grid that already depends on `sms`).

use std::collections::BTreeMap;

use tree_sitter::Node;

use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::edits::{Edit, Edits};
use super::elementwise::{
    inspect_body, match_elementwise, one_d_grid, pointer_params, Elementwise, INDEX_SHAPE,
};
use super::grid_stride::emit_grid_stride;
use super::params::Params;
use super::spec_expr::words;
use super::tree::{
    code_names, fresh, kernel_function, line_indent, named_children, newline, text, walk,
};
use super::RewriteContext;
use super::RewriteError;
use crate::document::Document;
use crate::optimize::edit;
use crate::spec::{Arg, BenchPlan, Value};
use crate::syntax::{self, Lang};

const ID: &str = "privatize_atomics";

/// Static shared memory a block may declare.
const MAX_STATIC_SMEM: u64 = 48 * 1024;

/// One privatized buffer.
struct Private {
    buffer: String,
    pointee: String,
    /// The count: a literal, or the parameter that holds it.
    count: Count,
    bytes_per_elem: u64,
}

enum Count {
    Literal(u64),
    Param(String),
}

fn elem_bytes(pointee: &str) -> Option<u64> {
    Some(match pointee {
        "int" | "unsigned int" | "unsigned" | "float" | "uint32_t" | "int32_t" => 4,
        "unsigned long long" | "unsigned long long int" | "double" => 8,
        _ => return None,
    })
}

pub fn privatize_atomics(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, ID)?;
    let plan = current_plan(cx)?;
    let per_sm = Params(cx.params).ints("blocks_per_sm", &[2, 4, 8], 1..=64)?;
    let k = &cx.kernel.name;
    let func = kernel_function(cx)
        .ok_or_else(|| not_applicable(format!("`{k}`'s definition is not in the syntax tree")))?;
    let shape = match_elementwise(cx.text, func).map_err(|why| {
        not_applicable(format!(
            "`{k}` is not a 1-D kernel with a bounds check: {why}; {ID} needs {INDEX_SHAPE}"
        ))
    })?;
    let pointers = pointer_params(cx);
    inspect_body(cx.text, &shape, &pointers, false)
        .map_err(|why| not_applicable(format!("`{k}` cannot become a grid-stride loop: {why}")))?;
    let (grid, first) = one_d_grid(cx, &plan, ID, shape.batched)?;
    if words(&grid.text).contains("sms") {
        return Err(not_applicable(format!(
            "`{k}`'s grid = {} already depends on `sms`",
            grid.text
        )));
    }
    let body = func
        .child_by_field_name("body")
        .ok_or_else(|| not_applicable(format!("`{k}` has no body")))?;
    let na = |why: String| not_applicable(format!("`{k}` cannot privatize its atomics: {why}"));
    let targets = atomic_targets(cx.text, body, &pointers).map_err(na)?;
    if targets.is_empty() {
        return Err(not_applicable(format!(
            "`{k}` has no `atomicAdd(&h[e], v)` on a pointer parameter"
        )));
    }
    let privates = private_copies(cx, &plan, &targets).map_err(na)?;
    let dynamic = privates.iter().find_map(|p| match &p.count {
        Count::Param(name) => Some((p, name.clone())),
        Count::Literal(_) => None,
    });
    if dynamic.is_some() && edit::spec_assignment(cx.kernel, "smem").is_some() {
        return Err(na(
            "the spec already sets `smem`; a dynamic private copy would need it".into(),
        ));
    }
    let text2 = privatized_text(cx, &shape, &privates)?;

    // The launch: a few blocks per SM, and the dynamic copy's bytes.
    let g = &grid.text[first.clone()];
    let grid_range = grid.range.start + first.start..grid.range.start + first.end;
    let smem = dynamic.map(|(p, param)| format!("{param} * {}", p.bytes_per_elem));
    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    for n in per_sm {
        let label = format!(
            "{} in shared memory, grid <= {n} * sms",
            privates
                .iter()
                .map(|p| p.buffer.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        // The spec lines precede the kernel: their offsets are the same in text2.
        let mut spec = Edits::new();
        spec.extend([Edit::replace(
            grid_range.clone(),
            format!("min({g}, sms * {n})"),
        )]);
        match spec
            .apply(&text2)
            .map_err(|err| err.to_string())
            .and_then(|out| with_smem(&out, k, smem.as_deref()))
        {
            Ok(out) => drafts.push(Draft { label, text: out }),
            Err(why) => dropped.push(format!("{label}: {why}")),
        }
    }
    finish(cx, drafts, dropped)
}

/// `text` with the kernel `k`'s spec setting `smem = bytes`, when the copy is dynamic.
fn with_smem(text: &str, k: &str, bytes: Option<&str>) -> Result<String, String> {
    let Some(bytes) = bytes else {
        return Ok(text.to_string());
    };
    let doc = Document::new(Lang::Cuda, 0, text);
    let tree = doc.tree().ok_or("the parser gave up")?;
    let model = syntax::analyze(Lang::Cuda, text, tree);
    let kernel = model.kernel(k).ok_or("the kernel is gone")?;
    Ok(edit::set_spec_value(text, kernel, "smem", bytes))
}

/// The shared copy of each target buffer (name, element type): its element size and its
/// count from the spec's cases, a literal when every case has the same, else the kernel
/// parameter that holds it in every case. Refuses element types shared `atomicAdd` does
/// not take, counts no parameter holds, and copies past the static shared memory.
fn private_copies(
    cx: &RewriteContext<'_>,
    plan: &BenchPlan,
    targets: &BTreeMap<String, String>,
) -> Result<Vec<Private>, String> {
    let mut privates = Vec::new();
    for (buffer, pointee) in targets {
        let bytes = elem_bytes(pointee).ok_or_else(|| {
            format!(
                "`{buffer}` holds `{pointee}`; shared-memory atomicAdd takes int, unsigned, unsigned long long, float or double"
            )
        })?;
        let counts: Vec<u64> = plan
            .cases
            .iter()
            .filter_map(|c| {
                c.args.iter().find_map(|a| match a {
                    Arg::Buffer { name, elems, .. } if name == buffer => Some(*elems),
                    _ => None,
                })
            })
            .collect();
        let max = counts.iter().copied().max().unwrap_or(0);
        privates.push(Private {
            buffer: buffer.clone(),
            pointee: pointee.clone(),
            count: copy_count(cx, plan, buffer, &counts)?,
            bytes_per_elem: bytes,
        });
        if max.saturating_mul(bytes) > MAX_STATIC_SMEM {
            return Err(format!(
                "`{buffer}` has {max} elements ({} KiB), more than the 48 KiB of shared memory a block can count on",
                max * bytes / 1024
            ));
        }
    }
    fits_in_shared_memory(&privates)?;
    Ok(privates)
}

/// The count of `buffer`'s copy, given its element count in each case: the literal when
/// they are all the same, else an integer parameter equal to it in every case.
fn copy_count(
    cx: &RewriteContext<'_>,
    plan: &BenchPlan,
    buffer: &str,
    counts: &[u64],
) -> Result<Count, String> {
    if counts.windows(2).all(|w| w[0] == w[1]) {
        return Ok(Count::Literal(counts.iter().copied().max().unwrap_or(0)));
    }
    let param = cx.kernel.params.iter().find(|p| {
        super::unit::int_scalar(p)
            && plan.cases.iter().zip(counts).all(|(c, n)| {
                c.args.iter().any(|a| {
                    matches!(a, Arg::Scalar { name, value: Value::Int(v), .. } if *name == p.name && *v as u64 == *n)
                })
            })
    });
    match param {
        Some(p) => Ok(Count::Param(p.name.clone())),
        None => Err(format!(
            "`{buffer}` has {} elements depending on the case, and no kernel parameter holds the count in every case",
            counts.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// Refuses copies that together pass the static shared memory (a dynamic copy counted at
/// the most it could be), or several copies of which one is dynamic.
fn fits_in_shared_memory(privates: &[Private]) -> Result<(), String> {
    let total: u64 = privates
        .iter()
        .map(|p| {
            let n = match p.count {
                Count::Literal(n) => n,
                Count::Param(_) => MAX_STATIC_SMEM / p.bytes_per_elem,
            };
            n * p.bytes_per_elem
        })
        .sum();
    if privates.len() > 1 && privates.iter().any(|p| matches!(p.count, Count::Param(_))) {
        return Err(
            "it would privatize several buffers and one of them changes size between cases; only one dynamic shared array is possible".into()
        );
    }
    if total > MAX_STATIC_SMEM {
        return Err(format!(
            "the private copies take {} KiB, more than the 48 KiB of shared memory a block can count on",
            total / 1024
        ));
    }
    Ok(())
}

/// The kernel's text with its body a grid-stride loop whose atomics go to the shared
/// copies, the copies declared and zeroed before it, and every nonzero bin flushed to
/// its buffer after it.
fn privatized_text(
    cx: &RewriteContext<'_>,
    shape: &Elementwise<'_>,
    privates: &[Private],
) -> Result<String, RewriteError> {
    // Phase 1: the body as a grid-stride loop.
    let loop_code = emit_grid_stride(cx.text, shape);
    let start = shape.decl.start_byte();
    let mut e = Edits::new();
    e.extend([Edit::replace(start..shape.end, loop_code.clone())]);
    let text1 = e
        .apply(cx.text)
        .map_err(|err| not_applicable(format!("`{ID}` made edits that collide: {err}")))?;
    let loop_end = start + loop_code.len();
    // Phase 2, on the new text: atomics onto the copies, the copies, the flush.
    let doc = Document::new(Lang::Cuda, 0, &text1);
    let tree = doc
        .tree()
        .ok_or_else(|| not_applicable("the parser gave up on the grid-stride loop"))?;
    let mut names = code_names(cx);
    let nl = newline(cx.text);
    let ind = line_indent(cx.text, start).to_string();
    let bin = fresh("bin", &mut names);
    let mut copies = BTreeMap::new();
    for p in privates {
        copies.insert(
            p.buffer.clone(),
            fresh(&format!("{}_s", p.buffer), &mut names),
        );
    }
    let renames = atomics_onto_copies(&text1, tree.root_node(), start..loop_end, &copies);
    if renames.is_empty() {
        return Err(not_applicable(format!(
            "`{ID}` lost the atomics in the grid-stride loop; nothing was changed"
        )));
    }
    let mut pre = String::new();
    let mut post = format!("{nl}{ind}__syncthreads();");
    for p in privates {
        let c = &copies[&p.buffer];
        let (decl, count) = match &p.count {
            Count::Literal(n) => (format!("__shared__ {} {c}[{n}];", p.pointee), n.to_string()),
            Count::Param(name) => (
                format!("extern __shared__ {} {c}[];", p.pointee),
                name.clone(),
            ),
        };
        pre.push_str(&format!(
            "{decl}{nl}{ind}for (int {bin} = threadIdx.x; {bin} < {count}; {bin} += blockDim.x) {c}[{bin}] = 0;{nl}{ind}"
        ));
        post.push_str(&format!(
            "{nl}{ind}for (int {bin} = threadIdx.x; {bin} < {count}; {bin} += blockDim.x){nl}{ind}{}if ({c}[{bin}] != 0) atomicAdd(&{}[{bin}], {c}[{bin}]);",
            shape.unit, p.buffer
        ));
    }
    pre.push_str(&format!("__syncthreads();{nl}{ind}"));
    let mut e2 = Edits::new();
    e2.extend(renames);
    e2.extend([Edit::insert(start, pre), Edit::insert(loop_end, post)]);
    e2.apply(&text1)
        .map_err(|err| not_applicable(format!("`{ID}` made edits that collide: {err}")))
}

/// The edits that rename each copied buffer to its copy (`copies`) in the address of
/// every `atomicAdd` within `span` (the grid-stride loop) of `src`.
fn atomics_onto_copies(
    src: &str,
    root: Node<'_>,
    span: std::ops::Range<usize>,
    copies: &BTreeMap<String, String>,
) -> Vec<Edit> {
    let mut out = Vec::new();
    walk(root, &mut |n| {
        if n.end_byte() <= span.start || n.start_byte() >= span.end {
            return n.start_byte() < span.end && n.end_byte() > span.start;
        }
        if n.kind() == "call_expression" && is_atomic_add(src, n) {
            if let Some(first) = n
                .child_by_field_name("arguments")
                .and_then(|a| named_children(a).into_iter().next())
            {
                walk(first, &mut |x| {
                    if x.kind() == "identifier" {
                        if let Some(c) = copies.get(text(src, x)) {
                            out.push(Edit::replace(x.byte_range(), c.clone()));
                        }
                    }
                    true
                });
            }
        }
        true
    });
    out
}

fn is_atomic_add(src: &str, call: Node<'_>) -> bool {
    call.child_by_field_name("function")
        .is_some_and(|f| text(src, f) == "atomicAdd")
}

/// The pointer parameters the body touches only as `atomicAdd` addresses, with their
/// pointee; Err when one of them is touched otherwise or through another atomic.
fn atomic_targets(
    src: &str,
    body: Node<'_>,
    pointers: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, String> {
    // Identifier uses of each pointer parameter, and those inside an atomicAdd address.
    let mut in_atomic: BTreeMap<String, usize> = BTreeMap::new();
    let mut other: BTreeMap<String, String> = BTreeMap::new();
    let mut wrong_atomic: Option<String> = None;
    walk(body, &mut |n| {
        if n.kind() == "call_expression" {
            let f = n
                .child_by_field_name("function")
                .map_or("", |f| text(src, f));
            let first = n
                .child_by_field_name("arguments")
                .and_then(|a| named_children(a).into_iter().next());
            if let Some(first) = first {
                let base = address_base(src, first, pointers);
                if let Some(b) = base {
                    let value_used = n
                        .parent()
                        .is_none_or(|p| p.kind() != "expression_statement");
                    if f == "atomicAdd" && value_used && wrong_atomic.is_none() {
                        wrong_atomic = Some(format!(
                            "the value of `{}` is used; a private copy would return a per-block count",
                            text(src, n)
                        ));
                    } else if f == "atomicAdd" {
                        *in_atomic.entry(b.to_string()).or_default() += 1;
                    } else if f.starts_with("atomic") && wrong_atomic.is_none() {
                        wrong_atomic = Some(format!(
                            "`{}` is not an atomicAdd; a private copy needs a zero to start from",
                            text(src, n)
                        ));
                    }
                }
            }
        }
        true
    });
    if let Some(w) = wrong_atomic {
        return Err(w);
    }
    // Every use of a target outside an atomicAdd address disqualifies it.
    walk(body, &mut |n| {
        if n.kind() == "identifier" && in_atomic.contains_key(text(src, n)) {
            let mut cur = n;
            let mut ok = false;
            while let Some(p) = cur.parent() {
                if p.kind() == "argument_list" {
                    let call = p.parent();
                    let first = named_children(p).into_iter().next();
                    ok = call.is_some_and(|c| is_atomic_add(src, c))
                        && first.is_some_and(|f| {
                            f.start_byte() <= n.start_byte() && n.end_byte() <= f.end_byte()
                        })
                        && first.and_then(|f| address_base(src, f, pointers)) == Some(text(src, n));
                    break;
                }
                if p.kind().ends_with("statement") || p.kind() == "declaration" {
                    break;
                }
                cur = p;
            }
            if !ok {
                let stmt = {
                    let mut s = n;
                    while let Some(p) = s.parent() {
                        s = p;
                        if p.kind().ends_with("statement") || p.kind() == "declaration" {
                            break;
                        }
                    }
                    s
                };
                other
                    .entry(text(src, n).to_string())
                    .or_insert_with(|| super::tree::first_line(text(src, stmt)).to_string());
            }
        }
        true
    });
    if let Some((b, at)) = other.into_iter().next() {
        return Err(format!(
            "`{b}` is used other than as an atomicAdd address (in `{at}`); its private copy would not see that"
        ));
    }
    Ok(in_atomic
        .into_keys()
        .map(|b| {
            let p = pointers[&b].clone();
            (b, p)
        })
        .collect())
}

/// The pointer parameter an atomic's address names: `&h[e]`, `h + e`, `e + h`, `h`.
fn address_base<'s>(
    src: &'s str,
    a: Node<'_>,
    pointers: &BTreeMap<String, String>,
) -> Option<&'s str> {
    let mut a = a;
    while a.kind() == "parenthesized_expression" {
        a = named_children(a).into_iter().next()?;
    }
    let named = |n: Node<'_>| {
        let t = text(src, n);
        (n.kind() == "identifier" && pointers.contains_key(t)).then_some(t)
    };
    match a.kind() {
        "pointer_expression" => {
            let op = a.child_by_field_name("operator").map(|o| text(src, o))?;
            let arg = a.child_by_field_name("argument")?;
            if op != "&" || arg.kind() != "subscript_expression" {
                return None;
            }
            named(arg.child_by_field_name("argument")?)
        }
        "binary_expression" => {
            let op = a.child_by_field_name("operator").map(|o| text(src, o))?;
            if op != "+" {
                return None;
            }
            let (l, r) = (
                a.child_by_field_name("left")?,
                a.child_by_field_name("right")?,
            );
            named(l).or_else(|| named(r))
        }
        "identifier" => named(a),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
