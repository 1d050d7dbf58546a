//! `triton_autotune`: times the configs of a kernel's own `@triton.autotune` decorator as
//! one step. An autotuned kernel runs at one config (the spec's values, else the first
//! config of the list, docs/spec.md), so each candidate moves one config to the front of
//! the literal `configs=[...]` list, formatting kept; the fastest verified one is the
//! step's winner, and applying it writes the list with that config first (the autotuner
//! itself still sees every config). Refuses a kernel with no decorator, a list that is
//! not written out (`configs=get_configs()`, a comprehension), fewer than two configs,
//! or configs whose every value the spec sets (they would all run the same launch).
//! Param `max_candidates` (default 16): the first configs of the list after the current
//! first one.

use tree_sitter::Node;

use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::edits::Edits;
use super::params::Params;
use super::tree::text;
use super::RewriteContext;
use crate::optimize::edit;
use crate::syntax::Lang;

const ID: &str = "triton_autotune";

pub fn triton_autotune(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Triton, ID)?;
    let max = Params(cx.params).ints("max_candidates", &[16], 1..=256)?[0] as usize;
    let k = &cx.kernel.name;
    let tune = cx
        .kernel
        .autotune
        .as_ref()
        .ok_or_else(|| not_applicable(format!("`{k}` has no @triton.autotune decorator")))?;
    let list = configs_list(cx, tune.range.clone()).ok_or_else(|| {
        not_applicable(format!(
            "`{k}`'s @triton.autotune configs are not a list written in the decorator"
        ))
    })?;
    let mut cursor = list.walk();
    let items: Vec<Node> = list.named_children(&mut cursor).collect();
    if items.len() < 2 || tune.configs.len() != items.len() {
        return Err(not_applicable(format!(
            "`{k}`'s @triton.autotune list has {} config(s) of `triton.Config({{...}}, ...)`; there is nothing to choose between",
            tune.configs.len()
        )));
    }
    let plan = current_plan(cx)?;
    let from_spec = |name: &str| {
        edit::spec_assignment(cx.kernel, name).is_some()
            || plan.tunables.iter().any(|t| t.name == name)
    };
    if tune.configs.iter().flatten().all(|(n, _)| from_spec(n)) {
        return Err(not_applicable(format!(
            "the spec sets every value of `{k}`'s autotune configs, so each would run the same launch"
        )));
    }
    let sep = &cx.text[items[0].end_byte()..items[1].start_byte()];
    let mut drafts = Vec::new();
    for at in (1..items.len()).take(max) {
        let mut order: Vec<&str> = vec![text(cx.text, items[at])];
        order.extend(
            items
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != at)
                .map(|(_, n)| text(cx.text, *n)),
        );
        let span = items[0].start_byte()..items[items.len() - 1].end_byte();
        let label = format!("config {} first: {}", at + 1, describe(&tune.configs[at]));
        let applied = Edits::from_pairs(vec![(span, order.join(sep))]).apply(cx.text);
        match applied {
            Ok(text) => drafts.push(Draft { label, text }),
            Err(e) => return Err(not_applicable(format!("{label}: {e}"))),
        }
    }
    finish(cx, drafts, Vec::new())
}

/// `BLOCK_M=128, BLOCK_N=64, num_warps=4`.
fn describe(config: &[(String, i64)]) -> String {
    let parts: Vec<String> = config.iter().map(|(n, v)| format!("{n}={v}")).collect();
    parts.join(", ")
}

/// The `list` node of the decorator's `configs=` argument (or its first positional one).
fn configs_list<'t>(cx: &RewriteContext<'t>, range: std::ops::Range<usize>) -> Option<Node<'t>> {
    let deco = cx
        .tree
        .root_node()
        .descendant_for_byte_range(range.start, range.end)?;
    let call = deco.named_child(0).filter(|c| c.kind() == "call")?;
    let args = call.child_by_field_name("arguments")?;
    let mut cursor = args.walk();
    let all: Vec<Node> = args.named_children(&mut cursor).collect();
    let keyword = all.iter().find_map(|a| {
        (a.kind() == "keyword_argument"
            && a.child_by_field_name("name").map(|n| text(cx.text, n)) == Some("configs"))
        .then(|| a.child_by_field_name("value"))
        .flatten()
    });
    let value = keyword.or_else(|| {
        all.first()
            .copied()
            .filter(|a| a.kind() != "keyword_argument")
    })?;
    (value.kind() == "list").then_some(value)
}

#[cfg(test)]
mod tests {
    use expect_test::expect;
    use serde_json::json;

    use super::super::check::testing::{labels, not_applicable, show, triton};
    use super::*;

    const AUTOTUNED: &str = include_str!("../../../../tests/fixtures/rewrites/triton/autotuned.py");

    #[test]
    fn each_config_is_tried_first_with_the_list_formatting_kept() {
        let out = triton(AUTOTUNED, "axpby", ID, json!({})).unwrap();
        assert_eq!(
            labels(&out),
            [
                "config 2 first: BLOCK=256, num_warps=4",
                "config 3 first: BLOCK=1024, num_warps=8, num_stages=2"
            ]
        );
        expect![[r##"
            # @bench n = 1 << 20, 1000
            # @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]
            # @bench grid = cdiv(n, BLOCK)
            @triton.autotune(
                configs=[
                    triton.Config({"BLOCK": 1024}, num_warps=8, num_stages=2),
                    triton.Config({"BLOCK": 64}, num_warps=2),
                    triton.Config({"BLOCK": 256}, num_warps=4),
                ],
                key=["n"],
            )
            @triton.jit
            def axpby(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
                pid = tl.program_id(axis=0)
                offs = pid * BLOCK + tl.arange(0, BLOCK)
                mask = offs < n
                x = tl.load(x_ptr + offs, mask=mask)
                y = tl.load(y_ptr + offs, mask=mask)
                tl.store(out_ptr + offs, 0.5 * x - 2.0 * y, mask=mask)"##]]
        .assert_eq(&show(Lang::Triton, AUTOTUNED, &out[1], "axpby"));
        let one = triton(AUTOTUNED, "axpby", ID, json!({"max_candidates": 1})).unwrap();
        assert_eq!(one.len(), 1);
    }

    #[test]
    fn positional_configs_and_a_trailing_comma_less_list() {
        let src = AUTOTUNED
            .replace("    configs=[\n", "    [\n")
            .replace("num_stages=2),\n    ]", "num_stages=2)\n    ]");
        let out = triton(&src, "axpby", ID, json!({})).unwrap();
        assert_eq!(out.len(), 2);
        assert!(
            out[0].text.contains("triton.Config({\"BLOCK\": 256}, num_warps=4),\n        triton.Config({\"BLOCK\": 64}, num_warps=2),\n        triton.Config({\"BLOCK\": 1024}, num_warps=8, num_stages=2)\n    ]"),
            "{}",
            out[0].text
        );
    }

    #[test]
    fn refuses_what_it_cannot_reorder() {
        let why = |src: &str| not_applicable(triton(src, "axpby", ID, json!({})));
        let plain = AUTOTUNED.replace(
            &AUTOTUNED[AUTOTUNED.find("@triton.autotune").unwrap()
                ..AUTOTUNED.find("@triton.jit").unwrap()],
            "",
        );
        expect!["`axpby` has no @triton.autotune decorator"].assert_eq(&why(
            &plain.replace("cdiv(n, BLOCK)", "cdiv(n, BLOCK); BLOCK = 256")
        ));
        let called = AUTOTUNED.replacen(
            "    configs=[",
            "    configs=get_configs(),\n    unused=[",
            1,
        );
        expect!["`axpby`'s @triton.autotune configs are not a list written in the decorator"]
            .assert_eq(&why(&called));
        let pinned = AUTOTUNED.replace(
            "cdiv(n, BLOCK)",
            "cdiv(n, BLOCK); BLOCK = 256; num_warps = 4; num_stages = 3",
        );
        expect!["the spec sets every value of `axpby`'s autotune configs, so each would run the same launch"].assert_eq(&why(&pinned));
        let single = AUTOTUNED
            .replace(
                "        triton.Config({\"BLOCK\": 256}, num_warps=4),\n",
                "",
            )
            .replace(
                "        triton.Config({\"BLOCK\": 1024}, num_warps=8, num_stages=2),\n",
                "",
            );
        expect!["`axpby`'s @triton.autotune list has 1 config(s) of `triton.Config({...}, ...)`; there is nothing to choose between"].assert_eq(&why(&single));
        // The spec sets BLOCK only: num_warps still differs between configs.
        let partly = AUTOTUNED.replace("cdiv(n, BLOCK)", "cdiv(n, BLOCK); BLOCK = 256");
        assert_eq!(triton(&partly, "axpby", ID, json!({})).unwrap().len(), 2);
    }
}
