//! Triton module-level constants read by a kernel written as its `tl.constexpr`
//! parameters: `BLOCK = tl.constexpr(512)` above a kernel whose body reads `BLOCK`
//! becomes the parameter `BLOCK: tl.constexpr = 512` (last, with a default, so it may
//! follow parameters that have one) and the spec statement `BLOCK = 512`. Inside the
//! kernel the parameter shadows the module name with the same value, so the kernel
//! computes what it did; the rewrites that size blocks through the spec (`triton_row_tile`,
//! `triton_block`, `triton_configs`) can then read and change it. A name the kernel
//! assigns, a parameter already, or one a helper of the unit reads too (the helper would
//! keep the module's value while the kernel's changes) stays as written. The dispatcher
//! retries a rewrite that refused the kernel on this text (see [`super::apply`]).

use super::edits::{Edit, Edits};
use super::tree::{kernel_function, text, walk};
use super::RewriteContext;
use crate::syntax::Lang;

/// The file text with every module-level integer constant the kernel's body reads made
/// a `tl.constexpr` parameter set by the spec; None when there is none to lift.
pub(super) fn constants_as_params(cx: &RewriteContext<'_>) -> Option<String> {
    if cx.lang != Lang::Triton || cx.kernel.spec.lines.is_empty() {
        return None;
    }
    let func = kernel_function(cx)?;
    let body = func.child_by_field_name("body")?;
    let params = func.child_by_field_name("parameters")?;
    let lifted: Vec<(String, i64)> = cx
        .kernel
        .constants
        .iter()
        .filter(|(name, _)| liftable(cx, body, name))
        .cloned()
        .collect();
    if lifted.is_empty() {
        return None;
    }
    let mut w = params.walk();
    let last = params
        .named_children(&mut w)
        .filter(|p| p.kind() != "comment")
        .last()?;
    let added: String = lifted
        .iter()
        .map(|(n, v)| format!(", {n}: tl.constexpr = {v}"))
        .collect();
    let mut e = Edits::new();
    e.extend([Edit::insert(last.end_byte(), added)]);
    let text = e.apply(cx.text).ok()?;
    // The spec lines lie above the signature: their offsets still hold.
    let values: Vec<(String, String)> = lifted
        .iter()
        .map(|(n, v)| (n.clone(), v.to_string()))
        .collect();
    super::check::set_spec_values(&text, cx.kernel, &values).ok()
}

/// `name` is read by the kernel's body, never assigned there, not a parameter, and not
/// read by another function of the unit.
fn liftable(cx: &RewriteContext<'_>, body: tree_sitter::Node<'_>, name: &str) -> bool {
    if cx.kernel.params.iter().any(|p| p.name == name) {
        return false;
    }
    let (mut read, mut assigned) = (false, false);
    walk(body, &mut |n| {
        if n.kind() == "identifier" && text(cx.text, n) == name {
            let parent = n.parent();
            let is_attr = parent.is_some_and(|p| {
                p.kind() == "attribute"
                    && p.child_by_field_name("attribute").map(|a| a.id()) == Some(n.id())
            });
            let is_target = parent.is_some_and(|p| {
                matches!(
                    p.kind(),
                    "assignment" | "augmented_assignment" | "for_statement"
                ) && p.child_by_field_name("left").map(|l| l.id()) == Some(n.id())
            });
            assigned |= is_target;
            read |= !is_attr && !is_target;
        }
        true
    });
    let own = cx.kernel.def_range.clone();
    let in_helper = cx
        .kernel
        .unit_ranges
        .iter()
        .filter(|r| **r != own)
        .any(|r| words(&cx.text[r.clone()]).any(|w| w == name));
    read && !assigned && !in_helper
}

fn words(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::with_text;
    use super::*;

    fn lifted(src: &str) -> Option<String> {
        with_text(
            Lang::Triton,
            src,
            "k",
            &BTreeMap::new(),
            constants_as_params,
        )
        .flatten()
    }

    const BODY: &str = "    row = tl.program_id(0)\n    acc = tl.zeros([BLOCK], dtype=tl.float32)\n    for o in range(0, n, BLOCK):\n        c = o + tl.arange(0, BLOCK)\n        acc += tl.load(x + row * n + c, mask=c < n, other=0.0)\n    tl.store(y + row, tl.sum(acc, axis=0))\n";

    fn file(head: &str, sig: &str, body: &str) -> String {
        format!("import triton\nimport triton.language as tl\n{head}\n\n# @bench R = 64; n = 1000\n# @bench x: in f32[R, n]; y: out f32[R]\n# @bench grid = R\n@triton.jit\ndef k({sig}):\n{body}")
    }

    #[test]
    fn a_constant_block_becomes_a_constexpr_parameter_the_spec_sets() {
        let src = file("BLOCK = tl.constexpr(512)", "x, y, n", BODY);
        let out = lifted(&src).unwrap();
        assert!(
            out.contains("def k(x, y, n, BLOCK: tl.constexpr = 512):\n"),
            "{out}"
        );
        assert!(
            out.contains("# @bench grid = R\n# @bench BLOCK = 512\n"),
            "{out}"
        );
        // The body is untouched; a parameter with a default may come before.
        assert!(out.ends_with(BODY), "{out}");
        let src = file(
            "BLOCK: tl.constexpr = 256",
            "x, y, n, eps: float = 1e-5",
            BODY,
        );
        let out = lifted(&src).unwrap();
        assert!(
            out.contains("def k(x, y, n, eps: float = 1e-5, BLOCK: tl.constexpr = 256):"),
            "{out}"
        );
    }

    #[test]
    fn parameters_assigned_names_helper_reads_and_unread_constants_stay() {
        // Already a parameter.
        let src = file(
            "BLOCK = tl.constexpr(512)",
            "x, y, n, BLOCK: tl.constexpr",
            BODY,
        );
        assert_eq!(lifted(&src), None);
        // Assigned in the body.
        let body = format!("    BLOCK = 128\n{BODY}");
        assert_eq!(
            lifted(&file("BLOCK = tl.constexpr(512)", "x, y, n", &body)),
            None
        );
        // Not read.
        assert_eq!(
            lifted(&file(
                "OTHER = tl.constexpr(8)",
                "x, y, n, BLOCK: tl.constexpr",
                BODY
            )),
            None
        );
        // Read by a helper of the unit too.
        let helper = "BLOCK = tl.constexpr(512)\n\n\n@triton.jit\ndef _lanes():\n    return tl.arange(0, BLOCK)";
        let body = BODY.replace("c = o + tl.arange(0, BLOCK)", "c = o + _lanes()");
        assert_eq!(lifted(&file(helper, "x, y, n", &body)), None);
    }

    const FIXTURE: &str =
        include_str!("../../../../tests/fixtures/rewrites/triton/module_blocks.py");

    #[test]
    fn the_row_tile_takes_a_module_block_through_the_dispatcher() {
        use super::super::check::testing::{show, triton};
        use expect_test::expect;
        let out = triton(
            FIXTURE,
            "scale_by_absmax",
            "triton_row_tile",
            serde_json::json!({}),
        )
        .unwrap();
        expect![[r#"
            # The absolute maximum of each row, then each element scaled by it: two passes.
            # @bench R = 6, 3; C = 700, 1001
            # @bench x: in f32[R, C]; y: out f32[R, C]
            # @bench grid = R
            # @bench RBLOCK = next_pow2(C)
            # @bench num_warps = 4
            @triton.jit
            def scale_by_absmax(x, y, C, RBLOCK: tl.constexpr = 256):
                row = tl.program_id(0)
                m = 0.0
                o = 0
                c = o + tl.arange(0, RBLOCK)
                m = tl.maximum(m, tl.max(tl.abs(tl.load(x + row * C + c, mask=c < C, other=0.0)), axis=0))
                v = tl.load(x + row * C + c, mask=c < C, other=0.0)
                tl.store(y + row * C + c, v / tl.maximum(m, 1e-6), mask=c < C)"#]]
        .assert_eq(&show(Lang::Triton, FIXTURE, &out[0], "scale_by_absmax"));
        // Chunk indices and a module block at once; the parameter with a default stays first.
        let out = triton(
            FIXTURE,
            "row_sumsq_chunks",
            "triton_row_tile",
            serde_json::json!({}),
        )
        .unwrap();
        assert!(
            out[0].text.contains(
                "def row_sumsq_chunks(x, out, C, scale: float = 1.0, CHUNK: tl.constexpr = 128):"
            ),
            "{}",
            out[0].text
        );
    }
}
