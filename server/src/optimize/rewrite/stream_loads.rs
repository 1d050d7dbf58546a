//! `stream_loads`: loads of data that one thread of the launch reads alone get the
//! streaming cache hint, so that a stream read once does not crowd the lines other
//! accesses (and the next blocks) want out of L1 and L2. CUDA: `x[i]` becomes
//! `__ldcs(&x[i])` (`*(p + i)` becomes `__ldcs(p + i)`, and `__ldg(&x[i])`, which only
//! routes the load through the read-only path, `__ldcs(&x[i])`); Triton: `tl.load(...)` gets
//! `eviction_policy="evict_first"`, the hint torch.compile gives its reduction loads, and a
//! second candidate with the opposite one, `evict_last`, which torch.compile gives its
//! pointwise loads: the input kept in L2 ahead of the output's dirty lines. On an H200
//! (2026-11-28) `evict_last` won on four Triton drafts (a transposed add, GEGLU, SwiGLU,
//! dropout: 2-3% each, where `evict_first` lost 4-6%). The same hint in CUDA (a policy
//! register and `ld.global.L2::cache_hint`) gained nothing on a reversed copy or a
//! permute's tile and lost 15% on a two-input elementwise backward, so CUDA gets `__ldcs`
//! alone.
//!
//! **Matches** the loads the access analysis finds read once
//! ([`Facts::read_once_loads`]): a buffer the kernel never writes, no hint yet, an
//! address that moves with the thread along x and with every axis the launch spreads
//! over (a 2-D grid's rows read `x[r * n + c]` once each, but share `bias[c]`), and in
//! CUDA a dense one: neighbouring lanes at most 8 elements apart (a thread walking a row
//! alone wants its sectors kept for its next iterations); in Triton an address built
//! through `//` or `%` of a lane value (`g + (offs // HW) % C`) is shared by
//! neighbouring lanes, so it is not read once.
//!
//! **Refuses** kernels with no such load, and (CUDA) a load whose element type has no
//! `__ldcs` overload (`bool`, a struct) or cannot be told from the code: that load stays
//! as written, the others are hinted. Loads in `__device__` helpers stay as written (a
//! helper may be called on other data).
//!
//! One candidate in CUDA, two in Triton; the launch does not change. Only the hint
//! changes, never a value: a hinted load is an ordinary coherent load.

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::check::{current_plan, finish as finish_drafts, not_applicable, Draft, R};
use super::edits::{Edit, Edits};
use super::elementwise::pointer_params;
use super::tree::text;
use super::unit::{finish, named_children};
use super::RewriteContext;
use super::RewriteError;
use crate::optimize::facts::{static_facts, Access};
use crate::syntax::Lang;
use crate::syntax::{normalize_type, pointee_type};

const ID: &str = "stream_loads";

/// Element types `__ldcs` has an overload for (CUDA 12 and 13 headers; the fp16 and bf16
/// headers add theirs), after `const` and `volatile` are dropped.
pub(super) const LDCS_TYPES: &[&str] = &[
    "char",
    "signed char",
    "unsigned char",
    "short",
    "unsigned short",
    "int",
    "unsigned",
    "unsigned int",
    "long",
    "unsigned long",
    "long long",
    "unsigned long long",
    "float",
    "double",
    "char2",
    "char4",
    "uchar2",
    "uchar4",
    "short2",
    "short4",
    "ushort2",
    "ushort4",
    "int2",
    "int4",
    "uint2",
    "uint4",
    "longlong2",
    "ulonglong2",
    "float2",
    "float4",
    "double2",
    "int8_t",
    "uint8_t",
    "int16_t",
    "uint16_t",
    "int32_t",
    "uint32_t",
    "int64_t",
    "uint64_t",
    "__half",
    "half",
    "__half2",
    "half2",
    "__nv_bfloat16",
    "nv_bfloat16",
    "__nv_bfloat162",
    "nv_bfloat162",
];

pub fn stream_loads(cx: &RewriteContext<'_>) -> R {
    current_plan(cx)?;
    let facts = static_facts(cx.lang, cx.text, cx.tree, cx.model, cx.kernel);
    let loads = outermost(facts.read_once_loads());
    if loads.is_empty() {
        return Err(not_applicable(format!(
            "`{}` has no load of data one thread reads alone without a cache hint: every \
             load is hinted, of a buffer the kernel writes, shared by several threads or \
             blocks{}",
            cx.kernel.name,
            if cx.lang == Lang::Cuda {
                ", or lanes too far apart"
            } else {
                ""
            }
        )));
    }
    match cx.lang {
        Lang::Cuda => cuda_candidates(cx, &loads),
        Lang::Triton => triton_candidates(cx, &loads),
    }
}

/// Why no load of `cx` can take a hint.
fn none_hinted(cx: &RewriteContext<'_>, kept: &[String]) -> RewriteError {
    not_applicable(format!(
        "`{}`: no load can take the hint: {}",
        cx.kernel.name,
        kept.join("; ")
    ))
}

/// What `hint` makes of each load that takes it, and the buffers those read (`x, w`); Err
/// with every reason when none does.
fn hinted<T>(
    cx: &RewriteContext<'_>,
    loads: &[&Access],
    hint: impl Fn(&Access) -> Result<T, String>,
) -> Result<(Vec<T>, String), RewriteError> {
    let (mut out, mut buffers, mut kept) = (Vec::new(), BTreeSet::new(), Vec::new());
    for a in loads {
        match hint(a) {
            Ok(t) => {
                out.push(t);
                buffers.insert(a.buffer.as_str());
            }
            Err(why) => kept.push(why),
        }
    }
    if out.is_empty() {
        return Err(none_hinted(cx, &kept));
    }
    Ok((out, buffers.into_iter().collect::<Vec<_>>().join(", ")))
}

/// `__ldcs` on every load that takes it.
fn cuda_candidates(cx: &RewriteContext<'_>, loads: &[&Access]) -> R {
    let (edits, names) = hinted(cx, loads, |a| cuda_edit(cx, a))?;
    let label = format!("streaming loads (`__ldcs`) of {names}");
    Ok(vec![finish(cx, ID, label, edits)?])
}

/// `evict_first` on every load, and `evict_last` on every load.
fn triton_candidates(cx: &RewriteContext<'_>, loads: &[&Access]) -> R {
    let (sites, names) = hinted(cx, loads, |a| triton_hint_site(cx, a))?;
    let mut drafts = Vec::new();
    for (policy, label) in [
        ("evict_first", format!("`evict_first` loads of {names}")),
        (
            "evict_last",
            format!("loads of {names} kept in L2 ahead of the stores (`evict_last`)"),
        ),
    ] {
        let mut all = Edits::new();
        all.extend(
            sites
                .iter()
                .map(|(at, sep)| Edit::insert(*at, format!("{sep}eviction_policy=\"{policy}\""))),
        );
        let text = all
            .apply(cx.text)
            .map_err(|e| not_applicable(format!("`{ID}`: {e}")))?;
        drafts.push(Draft { label, text });
    }
    finish_drafts(cx, drafts, Vec::new())
}

/// The loads with a span, less those inside another one's span (`x[idx[i]]`: the
/// outer load is the one edited), in source order.
fn outermost(loads: Vec<&Access>) -> Vec<&Access> {
    let spans: Vec<(usize, usize)> = loads.iter().filter_map(|a| a.span).collect();
    let inside = |s: (usize, usize)| spans.iter().any(|o| *o != s && o.0 <= s.0 && s.1 <= o.1);
    let mut out: Vec<&Access> = loads
        .into_iter()
        .filter(|a| a.span.is_some_and(|s| !inside(s)))
        .collect();
    out.sort_by_key(|a| a.span);
    out.dedup_by_key(|a| a.span);
    out
}

/// `x[i]` -> `__ldcs(&x[i])`, `*(p + i)` -> `__ldcs(p + i)`.
fn cuda_edit(cx: &RewriteContext<'_>, a: &Access) -> Result<Edit, String> {
    let (start, end) = a.span.ok_or("no span")?;
    let node = cx
        .tree
        .root_node()
        .descendant_for_byte_range(start, end)
        .filter(|n| n.start_byte() == start && n.end_byte() == end)
        .ok_or_else(|| format!("`{}`: not found in the tree", &cx.text[start..end]))?;
    if let Some(call) = crate::optimize::facts::load_call(cx.text, node) {
        // `__ldg(&x[i])`: the same load with the streaming hint instead.
        let f = call.child_by_field_name("function").ok_or("no callee")?;
        let arg = node.child_by_field_name("argument");
        return typed_for_ldcs(cx, node, arg)
            .map(|_| Edit::replace(f.start_byte()..f.end_byte(), "__ldcs"));
    }
    let (address, arg) = match node.kind() {
        "subscript_expression" => (
            format!("&{}", text(cx.text, node)),
            node.child_by_field_name("argument"),
        ),
        "pointer_expression" => {
            let arg = node.child_by_field_name("argument").ok_or("no operand")?;
            (text(cx.text, arg).to_string(), Some(arg))
        }
        other => return Err(format!("a {other} is not a load kernel-lsp hints")),
    };
    typed_for_ldcs(cx, node, arg)?;
    Ok(Edit::replace(start..end, format!("__ldcs({address})")))
}

/// The element type of the load `node` through pointer `arg`, when `__ldcs` takes it.
fn typed_for_ldcs(
    cx: &RewriteContext<'_>,
    node: Node<'_>,
    arg: Option<Node<'_>>,
) -> Result<String, String> {
    let ty = arg
        .and_then(|n| element_type(cx, n, 0))
        .ok_or_else(|| format!("`{}`: its element type is not known", text(cx.text, node)))?;
    if !LDCS_TYPES.contains(&ty.as_str()) {
        return Err(format!(
            "`{}`: `__ldcs` takes no `{ty}`",
            text(cx.text, node)
        ));
    }
    Ok(ty)
}

/// The element type of the pointer expression `n`: a pointer parameter's, a cast's, a
/// local pointer's declared type, or the pointer operand's of `p + i`.
fn element_type(cx: &RewriteContext<'_>, n: Node<'_>, depth: usize) -> Option<String> {
    if depth > 8 {
        return None;
    }
    match n.kind() {
        "parenthesized_expression" => element_type(cx, *named_children(n).first()?, depth + 1),
        "identifier" => {
            let name = text(cx.text, n);
            match pointer_params(cx).remove(name) {
                Some(pointee) => Some(pointee),
                None if cx.kernel.params.iter().any(|p| p.name == name) => None,
                None => local_pointee(cx, name),
            }
        }
        "binary_expression" => {
            let l = n.child_by_field_name("left")?;
            let r = n.child_by_field_name("right")?;
            element_type(cx, l, depth + 1).or_else(|| element_type(cx, r, depth + 1))
        }
        "cast_expression" => pointee_type(text(cx.text, n.child_by_field_name("type")?)),
        "call_expression" => {
            // `reinterpret_cast<const float4*>(x)`: the type between the angle brackets.
            let f = text(cx.text, n.child_by_field_name("function")?);
            let inner = f.split_once('<')?.1.strip_suffix('>')?;
            f.contains("_cast").then(|| pointee_type(inner))?
        }
        _ => None,
    }
}

/// The pointee of a local pointer `name` declared in the kernel (`const float* row =
/// ...;`), when one declaration of that name declares it as a pointer.
fn local_pointee(cx: &RewriteContext<'_>, name: &str) -> Option<String> {
    let def = cx
        .tree
        .root_node()
        .descendant_for_byte_range(cx.kernel.def_range.start, cx.kernel.def_range.end)?;
    let mut found = Vec::new();
    super::tree::walk(def, &mut |n| {
        if n.kind() == "declaration" {
            let ty = n.child_by_field_name("type").map(|t| text(cx.text, t));
            let mut c = n.walk();
            for d in n.children_by_field_name("declarator", &mut c) {
                let d = if d.kind() == "init_declarator" {
                    d.child_by_field_name("declarator").unwrap_or(d)
                } else {
                    d
                };
                let named = d
                    .child_by_field_name("declarator")
                    .is_some_and(|i| i.kind() == "identifier" && text(cx.text, i) == name);
                if d.kind() == "pointer_declarator" && named {
                    found.push(normalize_type(ty.unwrap_or("")));
                }
            }
        }
        true
    });
    found.dedup();
    (found.len() == 1).then(|| found.remove(0))
}

/// Where `tl.load(p, mask=m)` takes `, eviction_policy="..."`: the byte before its closing
/// parenthesis, and the separator the arguments before it need.
fn triton_hint_site(cx: &RewriteContext<'_>, a: &Access) -> Result<(usize, &'static str), String> {
    let (start, end) = a.span.ok_or("no span")?;
    let call = &cx.text[start..end];
    let close = call.rfind(')').ok_or("no closing parenthesis")?;
    let before = call[..close].trim_end();
    let sep = match before.chars().last() {
        Some('(') => "",
        Some(',') => " ",
        _ => ", ",
    };
    Ok((start + before.len(), sep))
}

#[cfg(test)]
mod tests;
