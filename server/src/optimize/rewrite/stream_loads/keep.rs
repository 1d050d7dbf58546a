//! The second hint `stream_loads` offers: loads kept in L2 ahead of the stores. A kernel
//! that streams a read-once input to an output fills L2 with both; with the loads marked
//! `evict_last`, the output's dirty lines are the ones L2 writes back and evicts first,
//! which measured 3% faster on copies and reversed copies on an H200, where the
//! streaming hint gained nothing (torch.compile gives its pointwise loads the same
//! hint). On a kernel that reads more than L2 holds several times over it can be far
//! slower, so it is a candidate the measurement decides, beside `__ldcs`.
//!
//! CUDA has no intrinsic for it: the kernel gets a policy register
//! (`createpolicy.fractional.L2::evict_last`) and one lambda per element type that loads
//! through `ld.global.L2::cache_hint` (the bits of 1, 2, 4, 8 or 16 bytes, as the type).
//! The asm is not `volatile`: the buffers hinted are never written by the kernel, so the
//! compiler may schedule these loads like any other. Triton: `eviction_policy="evict_last"`.

use std::collections::BTreeMap;

use super::super::edits::Edit;
use super::super::tree::{code_names, fresh, kernel_function, line_indent, newline};
use super::super::RewriteContext;

/// The PTX load of `bytes` bytes: (bits type, register constraint, register type).
fn ptx_load(bytes: usize) -> Option<(&'static str, &'static str, &'static str)> {
    Some(match bytes {
        // A byte loads into the low half of a 16-bit register.
        1 => ("b8", "h", "unsigned short"),
        2 => ("b16", "h", "unsigned short"),
        4 => ("b32", "r", "unsigned int"),
        8 => ("b64", "l", "unsigned long long"),
        16 => ("v4.b32", "r", "uint4"),
        _ => return None,
    })
}

/// Bytes of an element type a kernel loads: the scalar types and their 2- and 4-wide
/// vectors.
pub(super) fn load_bytes(ty: &str) -> Option<usize> {
    match ty {
        "float4" | "int4" | "uint4" | "double2" | "longlong2" | "ulonglong2" => Some(16),
        "short4" | "ushort4" | "long" | "unsigned long" => Some(8),
        "char4" | "uchar4" | "short2" | "ushort2" => Some(4),
        "char2" | "uchar2" => Some(2),
        "bool" => None,
        _ => super::super::vectorize::element_bytes(ty),
    }
}

/// The lambda `name` loading one `ty` from `p` under the policy `pol`, its lines. Off
/// the device (a host pass, the CPU emulator of the tests) it is a plain load.
fn lambda(name: &str, ty: &str, pol: &str) -> Option<Vec<String>> {
    let (bits, c, reg) = ptx_load(load_bytes(ty)?)?;
    let (outs, dst) = if reg == "uint4" {
        (
            format!("\"={c}\"(r.x), \"={c}\"(r.y), \"={c}\"(r.z), \"={c}\"(r.w)"),
            "{%0, %1, %2, %3}, [%4], %5",
        )
    } else {
        (format!("\"={c}\"(r)"), "%0, [%1], %2")
    };
    Some(vec![
        format!("auto {name} = [{pol}](const {ty}* p) {{"),
        "#ifdef __CUDA_ARCH__".into(),
        format!("    {reg} r;"),
        format!("    asm(\"ld.global.L2::cache_hint.{bits} {dst};\" : {outs} : \"l\"(p), \"l\"({pol}));"),
        format!("    return *reinterpret_cast<const {ty}*>(&r);"),
        "#else".into(),
        "    return *p;".into(),
        "#endif".into(),
        "};".into(),
    ])
}

/// The loads kept in L2: each replaced by a call of its
/// type's lambda, and the policy and lambdas declared at the top of the kernel's body.
pub(super) fn cuda_edits(
    cx: &RewriteContext<'_>,
    loads: &[super::CudaLoad],
) -> Result<Vec<Edit>, String> {
    let body = kernel_function(cx)
        .and_then(|f| f.child_by_field_name("body"))
        .ok_or("the kernel's body is not in the syntax tree")?;
    let mut names = code_names(cx);
    let pol = fresh("kl_l2_keep", &mut names);
    let mut lambdas: BTreeMap<String, String> = BTreeMap::new();
    let mut edits = Vec::new();
    let mut decls = Vec::new();
    for super::CudaLoad {
        whole: span,
        address,
        ty,
        ..
    } in loads
    {
        if !lambdas.contains_key(ty) {
            let base = format!("kl_keep_{}", ty.replace(' ', "_"));
            let name = fresh(&base, &mut names);
            let Some(code) = lambda(&name, ty, &pol) else {
                continue;
            };
            decls.push(code);
            lambdas.insert(ty.clone(), name);
        }
        let f = &lambdas[ty];
        edits.push(Edit::replace(span.clone(), format!("{f}({address})")));
    }
    if edits.is_empty() {
        return Err("no load has an element type of 1, 2, 4, 8 or 16 bytes".into());
    }
    let first = super::super::tree::named_children(body)
        .into_iter()
        .next()
        .ok_or("the kernel's body is empty")?;
    let nl = newline(cx.text);
    let ind = line_indent(cx.text, first.start_byte()).to_string();
    let mut lines = vec![
        "// the loads below kept in L2 ahead of the stores (evict_last)".to_string(),
        format!("unsigned long long {pol} = 0;"),
        "#ifdef __CUDA_ARCH__".into(),
        format!("asm(\"createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\" : \"=l\"({pol}));"),
        "#endif".into(),
    ];
    lines.extend(decls.into_iter().flatten());
    let mut head = String::new();
    for (k, l) in lines.iter().enumerate() {
        let at = if k == 0 || l.starts_with('#') {
            ""
        } else {
            ind.as_str()
        };
        head.push_str(&format!("{at}{l}{nl}"));
    }
    head.push_str(&ind);
    edits.push(Edit::insert(first.start_byte(), head));
    Ok(edits)
}
