//! `maxnreg`: a register cap, written in its expanded form `__attribute__((maxnreg(N)))`
//! (what CUDA's `host_defines.h` defines `__maxnreg__(N)` as): NVRTC 12.9 accepts both,
//! but tree-sitter-cuda 0.21 does not know `__maxnreg__` and would lose the kernel. A
//! kernel with `__launch_bounds__` gets none (NVRTC rejects the two together).

use tree_sitter::Node;

use super::edits::Edit;
use super::params::Params;
use super::unit::*;
use super::RewriteContext;

/// `__maxnreg__(N)` for each N in `values` (default `[32, 64, 96, 128]`), written as
/// `__attribute__((maxnreg(N)))` (module doc). A kernel that already has one gets the
/// other values in its place.
pub fn maxnreg(cx: &RewriteContext<'_>) -> R {
    let unit = Unit::of(cx, "maxnreg")?;
    let values = Params(cx.params).uints("values", &[32, 64, 96, 128], 16..=255)?;
    if named_children(unit.kernel)
        .iter()
        .any(|c| c.kind() == "launch_bounds")
    {
        return Err(na(format!(
            "`{}` has `__launch_bounds__`; NVRTC rejects `__maxnreg__` together with it \
             (remove the bounds to try a register cap)",
            cx.kernel.name
        )));
    }
    let existing = maxnreg_attribute(cx, unit.kernel);
    let (at, current) = match (existing, has_maxnreg(cx, unit.kernel)) {
        (Some((num, v)), _) => (num.byte_range(), Some(v)),
        (None, Some(why)) => {
            return Err(na(format!(
                "`{}` has {why}, which kernel-lsp cannot edit; write it as \
                 `__attribute__((maxnreg(N)))` to let `maxnreg` sweep it",
                cx.kernel.name
            )))
        }
        (None, None) => {
            let at = unit.attribute_point(cx)?;
            (at..at, None)
        }
    };
    let mut out = Vec::new();
    for n in values {
        if current == Some(n) {
            continue;
        }
        let insert = match current {
            Some(_) => n.to_string(),
            None => format!("__attribute__((maxnreg({n}))) "),
        };
        out.push(finish(
            cx,
            "maxnreg",
            format!("maxnreg {n}"),
            vec![Edit::replace(at.clone(), insert)],
        )?);
    }
    if out.is_empty() {
        return Err(na(format!(
            "`{}` already has maxnreg {} and no other value was asked for",
            cx.kernel.name,
            current.unwrap_or(0)
        )));
    }
    Ok(out)
}

/// `__attribute__((maxnreg(N)))` on the kernel: the number node and its value.
pub(super) fn maxnreg_attribute<'t>(
    cx: &RewriteContext<'_>,
    def: Node<'t>,
) -> Option<(Node<'t>, u64)> {
    let header = header_nodes(def);
    for attr in header.iter().filter(|n| n.kind() == "attribute_specifier") {
        for call in descendants(*attr)
            .into_iter()
            .filter(|n| n.kind() == "call_expression")
        {
            if plain_callee(cx, call) != Some("maxnreg") {
                continue;
            }
            let args = call.child_by_field_name("arguments")?;
            let num = named_children(args).into_iter().next()?;
            let v = int_literal(text(cx, num))?;
            return Some((num, v));
        }
    }
    None
}

/// Why the kernel has a register cap already, if it has one in any spelling.
pub(super) fn has_maxnreg(cx: &RewriteContext<'_>, def: Node<'_>) -> Option<String> {
    if maxnreg_attribute(cx, def).is_some() {
        return Some("`__attribute__((maxnreg(..)))`".into());
    }
    // `__maxnreg__(N)` does not parse as an attribute: look at every token before the
    // body, and at an ERROR node right before the definition (`extern "C" __maxnreg__(N)
    // __global__ ...`).
    let declarator = def.child_by_field_name("declarator").map(|d| d.id());
    let mut nodes = header_nodes(def);
    nodes.retain(|n| Some(n.id()) != declarator);
    if let Some(prev) = def.prev_sibling().filter(|p| p.kind() == "ERROR") {
        nodes.push(prev);
    }
    let found = nodes
        .iter()
        .flat_map(|n| descendants(*n))
        .any(|n| n.child_count() == 0 && text(cx, n) == "__maxnreg__");
    found.then(|| "`__maxnreg__`".to_string())
}

#[cfg(test)]
mod tests {

    use expect_test::expect;

    use super::super::unit::testing::*;

    #[test]
    fn maxnreg_on_saxpy() {
        check(
            "maxnreg",
            SAXPY,
            "saxpy",
            params(r#"{"values": [32, 64]}"#),
            expect![[r###"
            ## maxnreg 32
            extern "C" __global__ void __attribute__((maxnreg(32))) saxpy(int n, float a, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }
            ## maxnreg 64
            extern "C" __global__ void __attribute__((maxnreg(64))) saxpy(int n, float a, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }
        "###]],
        );
    }

    #[test]
    fn maxnreg_replaces_an_existing_cap_and_refuses_launch_bounds() {
        let capped = "__global__ void __attribute__((maxnreg(64))) k(float* x) { x[0] = 1.0f; }\n";
        check(
            "maxnreg",
            capped,
            "k",
            params(r#"{"values": [32, 64]}"#),
            expect![[r#"
            ## maxnreg 32
            __global__ void __attribute__((maxnreg(32))) k(float* x) { x[0] = 1.0f; }
        "#]],
        );
        check(
            "maxnreg",
            capped,
            "k",
            params(r#"{"values": [64]}"#),
            expect![[r#"
            error: `k` already has maxnreg 64 and no other value was asked for
        "#]],
        );
        let bounded = "__global__ void __launch_bounds__(256) k(float* x) {}\n";
        check(
            "maxnreg",
            bounded,
            "k",
            params(NONE),
            expect![[r#"
            error: `k` has `__launch_bounds__`; NVRTC rejects `__maxnreg__` together with it (remove the bounds to try a register cap)
        "#]],
        );
        let written = "extern \"C\" __maxnreg__(32) __global__ void k(float* x) {}\n";
        check(
            "maxnreg",
            written,
            "k",
            params(NONE),
            expect![[r#"
            error: `k` has `__maxnreg__`, which kernel-lsp cannot edit; write it as `__attribute__((maxnreg(N)))` to let `maxnreg` sweep it
        "#]],
        );
    }
}
