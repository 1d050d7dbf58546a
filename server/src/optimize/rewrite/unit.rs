//! What the code-level CUDA rewrites (`restrict_const`, `launch_bounds`, `maxnreg`,
//! `unroll`, `fast_math`) share: the kernel unit's function definitions ([`Unit`]), tree
//! helpers, and [`finish`], which splices a rewrite's edits and checks the result. Each
//! of these rewrites is a pure tree-sitter edit: byte-range splices at node boundaries
//! inside the kernel unit (`Kernel::unit_ranges`), so formatting, comments and strings
//! outside the touched nodes stay byte for byte, and every candidate is re-parsed before
//! it is returned (same kernel name, same `@bench` lines, no new syntax error). Nothing
//! here compiles anything: whether a candidate compiles, verifies and is faster is the
//! worker's job.

use tree_sitter::{Node, Parser};

/// The kernel unit's text: the kernel and the helpers it calls, in file order.
pub(super) fn unit_text(cx: &super::RewriteContext<'_>) -> String {
    cx.kernel
        .unit_ranges
        .iter()
        .filter_map(|r| cx.text.get(r.clone()))
        .collect()
}

/// Whether `p` is a CUDA integer scalar parameter (`int`, `size_t`, `unsigned`, `int64_t`).
pub(super) fn int_scalar(p: &crate::syntax::Param) -> bool {
    match &p.kind {
        crate::syntax::ParamKind::Scalar { ty } => crate::spec::ctype::scalar_ty(ty)
            .is_some_and(|t| !t.is_float() && t != crate::spec::ScalarTy::Bool),
        _ => false,
    }
}

use super::edits::{Edit, Edits};
use super::{Candidate, RewriteContext, RewriteError};
use crate::syntax::{self, ByteRange, Lang};

pub(super) type R = Result<Vec<Candidate>, RewriteError>;

/// The kernel's `function_definition` and those of every unit member (kernel first).
pub(super) struct Unit<'t> {
    pub kernel: Node<'t>,
    pub funcs: Vec<Node<'t>>,
}

impl<'t> Unit<'t> {
    pub fn of(cx: &RewriteContext<'t>, rewrite: &str) -> Result<Unit<'t>, RewriteError> {
        let k = cx.kernel;
        if cx.lang != Lang::Cuda || k.lang != Lang::Cuda {
            return Err(na(format!(
                "`{rewrite}` rewrites CUDA kernels; `{}` is a Triton kernel",
                k.name
            )));
        }
        let root = cx.tree.root_node();
        let kernel = root
            .descendant_for_byte_range(k.name_range.start, k.name_range.end)
            .and_then(|n| ancestor(n, "function_definition"))
            .filter(|d| k.def_range.start <= d.start_byte() && d.end_byte() <= k.def_range.end)
            .ok_or_else(|| {
                na(format!(
                    "the definition of `{}` was not found in this text (was the model made \
                     from an older version?)",
                    k.name
                ))
            })?;
        let mut funcs = vec![kernel];
        for r in &k.unit_ranges {
            if r.start <= kernel.start_byte() && kernel.end_byte() <= r.end {
                continue;
            }
            if let Some(f) = root
                .descendant_for_byte_range(r.start, r.end)
                .and_then(first_function_definition)
            {
                funcs.push(f);
            }
        }
        Ok(Unit { kernel, funcs })
    }

    /// Where an attribute goes: right before the kernel's declarator (after the return
    /// type), e.g. `__global__ void |k(...)`.
    pub fn attribute_point(&self, cx: &RewriteContext<'_>) -> Result<usize, RewriteError> {
        self.kernel
            .child_by_field_name("declarator")
            .map(|d| d.start_byte())
            .ok_or_else(|| na(format!("`{}` has no declarator", cx.kernel.name)))
    }
}

/// The first `function_definition` at or under `n`, not looking into function bodies.
pub(super) fn first_function_definition(n: Node<'_>) -> Option<Node<'_>> {
    let mut stack = vec![n];
    while let Some(x) = stack.pop() {
        if x.kind() == "function_definition" {
            return Some(x);
        }
        if x.kind() == "compound_statement" {
            continue;
        }
        let mut kids = named_children(x);
        kids.reverse();
        stack.extend(kids);
    }
    None
}

pub(super) fn ancestor<'t>(n: Node<'t>, kind: &str) -> Option<Node<'t>> {
    let mut cur = Some(n);
    while let Some(c) = cur {
        if c.kind() == kind {
            return Some(c);
        }
        cur = c.parent();
    }
    None
}

/// The node of `kind` that spans exactly `range`.
pub(super) fn node_with_range<'t>(
    cx: &RewriteContext<'t>,
    range: &ByteRange,
    kind: &str,
) -> Option<Node<'t>> {
    let mut n = cx
        .tree
        .root_node()
        .descendant_for_byte_range(range.start, range.end)?;
    loop {
        if n.kind() == kind && n.byte_range() == *range {
            return Some(n);
        }
        n = n.parent()?;
        if n.start_byte() < range.start {
            return None;
        }
    }
}

/// A function definition's name and parameter list.
pub(super) fn name_and_params<'s, 't>(
    cx: &RewriteContext<'s>,
    f: Node<'t>,
) -> Option<(&'s str, Node<'t>)> {
    let mut d = f.child_by_field_name("declarator")?;
    for _ in 0..16 {
        if d.kind() == "function_declarator" {
            let name = d.child_by_field_name("declarator")?;
            let params = d.child_by_field_name("parameters")?;
            let name = descendants(name)
                .into_iter()
                .rev()
                .find(|n| n.kind() == "identifier")
                .map_or("", |n| text(cx, n));
            return Some((name, params));
        }
        d = d.child_by_field_name("declarator")?;
    }
    None
}

/// The nodes of a definition before its body (specifiers, attributes, declarator).
pub(super) fn header_nodes(def: Node<'_>) -> Vec<Node<'_>> {
    let body = def.child_by_field_name("body").map(|b| b.id());
    let mut c = def.walk();
    let out = def
        .children(&mut c)
        .filter(|n| Some(n.id()) != body)
        .collect();
    out
}

/// Does the definition carry the keyword `tok` (`__host__`) among its specifiers?
pub(super) fn has_token(def: Node<'_>, tok: &str) -> bool {
    header_nodes(def).iter().any(|n| {
        n.kind() == tok
            || (n.kind() == "type_qualifier" && n.child(0).is_some_and(|q| q.kind() == tok))
    })
}

/// The callee's name when a call calls a plain identifier (`f(...)`).
pub(super) fn plain_callee<'s>(cx: &RewriteContext<'s>, call: Node<'_>) -> Option<&'s str> {
    call.child_by_field_name("function")
        .filter(|f| f.kind() == "identifier")
        .map(|f| text(cx, f))
}

pub(super) fn field_kind<'t>(n: Node<'t>, field: &str) -> Option<&'static str> {
    n.child_by_field_name(field).map(|o| o.kind())
}

pub(super) fn named_children(n: Node<'_>) -> Vec<Node<'_>> {
    let mut c = n.walk();
    let out = n.named_children(&mut c).collect();
    out
}

/// `n` and everything under it, in document order (an explicit stack: nesting depth is
/// input-controlled).
pub(super) fn descendants(n: Node<'_>) -> Vec<Node<'_>> {
    let mut out = Vec::new();
    let mut stack = vec![n];
    while let Some(x) = stack.pop() {
        out.push(x);
        let mut c = x.walk();
        let kids: Vec<Node> = x.children(&mut c).collect();
        stack.extend(kids.into_iter().rev());
    }
    out
}

pub(super) fn contains_comment(n: Node<'_>, range: &ByteRange) -> bool {
    descendants(n)
        .iter()
        .any(|c| c.kind() == "comment" && c.start_byte() < range.end && range.start < c.end_byte())
}

pub(super) fn text<'s>(cx: &RewriteContext<'s>, n: Node<'_>) -> &'s str {
    let src: &'s str = cx.text;
    src.get(n.byte_range()).unwrap_or("")
}

/// An integer literal's value: `16`, `0x10`, `16u`, `16UL`, `1'024`.
pub(super) fn int_literal(s: &str) -> Option<u64> {
    let s = s.trim().replace('\'', "");
    let s = s.trim_end_matches(['u', 'U', 'l', 'L']);
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).ok();
    }
    if s.len() > 1 && s.starts_with('0') {
        return u64::from_str_radix(&s[1..], 8).ok();
    }
    s.parse().ok()
}

pub(super) fn squeeze(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

pub(super) fn join_nums(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
}

pub(super) fn na(msg: String) -> RewriteError {
    RewriteError::NotApplicable(msg)
}

/// Apply `edits` and check the result: every edit inside the kernel unit, none
/// overlapping, and the new text still has the kernel, with the same `@bench` lines,
/// and no syntax error the old text did not have. A failed check is a kernel-lsp bug,
/// reported as "not applicable" so that the step loop moves on.
pub(super) fn finish(
    cx: &RewriteContext<'_>,
    rewrite: &str,
    label: String,
    edits: Vec<Edit>,
) -> Result<Candidate, RewriteError> {
    let k = cx.kernel;
    let bug = |why: &str| {
        na(format!(
            "`{rewrite}` ({label}) on `{}` made an edit kernel-lsp could not check ({why}); \
             the kernel is left as it is. Please report this with the kernel's source",
            k.name
        ))
    };
    let in_unit = |e: &Edit| {
        k.unit_ranges
            .iter()
            .any(|r| r.start <= e.at.start && e.at.end <= r.end)
    };
    if !edits.iter().all(in_unit) {
        return Err(bug("an edit falls outside the kernel unit"));
    }
    let mut all = Edits::new();
    all.extend(edits);
    let out = all.apply(cx.text).map_err(|e| bug(&e.to_string()))?;

    let mut parser = Parser::new();
    if parser
        .set_language(&syntax::ts_language(Lang::Cuda))
        .is_err()
    {
        return Err(bug("the CUDA grammar did not load"));
    }
    let Some(tree) = syntax::parse_text(&mut parser, Lang::Cuda, &out) else {
        return Err(bug("the parser gave up"));
    };
    let model = syntax::analyze(Lang::Cuda, &out, &tree);
    let Some(new) = model.kernel(&k.name) else {
        return Err(bug("the kernel is no longer found"));
    };
    let spec_text = |k: &syntax::Kernel| {
        k.spec
            .lines
            .iter()
            .map(|l| l.text.clone())
            .collect::<Vec<_>>()
    };
    if spec_text(new) != spec_text(k) {
        return Err(bug("the @bench lines changed"));
    }
    if model.syntax_errors.len() > cx.model.syntax_errors.len() {
        return Err(bug("the new text has a syntax error"));
    }
    Ok(Candidate { label, text: out })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use expect_test::expect;

    use super::super::unit::testing::*;
    use super::super::{apply, RewriteContext};
    use crate::document::Document;
    use crate::syntax::{self, Lang};

    #[test]
    fn bad_parameters_say_which_and_why() {
        check(
            "launch_bounds",
            SAXPY,
            "saxpy",
            params(r#"{"min_blocks": "two"}"#),
            expect![[r#"
                error: parameter `min_blocks`: expected a non-empty list of integers from 1 to 32, found `"two"`
            "#]],
        );
        check(
            "launch_bounds",
            SAXPY,
            "saxpy",
            params(r#"{"min_blocks": [0]}"#),
            expect![[r#"
                error: parameter `min_blocks`: expected a list of integers from 1 to 32, found `0`
            "#]],
        );
        check(
            "unroll",
            MATMUL,
            "matmul",
            params(r#"{"factors": []}"#),
            expect![[r#"
                error: parameter `factors`: expected a non-empty list of integers from 1 to 1024, found `[]`
            "#]],
        );
        check(
            "maxnreg",
            SAXPY,
            "saxpy",
            params(r#"{"values": [8]}"#),
            expect![[r#"
                error: parameter `values`: expected a list of integers from 16 to 255, found `8`
            "#]],
        );
        check(
            "fast_math",
            SAXPY,
            "saxpy",
            params(r#"{"divisions": "yes"}"#),
            expect![[r#"
            error: parameter `divisions`: expected true or false, got `"yes"`
        "#]],
        );
    }

    #[test]
    fn triton_kernels_are_not_for_these_rewrites() {
        let src = "import triton\n@triton.jit\ndef k(x):\n    pass\n";
        let doc = Document::new(Lang::Triton, 0, src);
        let tree = doc.tree().expect("parsed");
        let model = syntax::analyze(Lang::Triton, src, tree);
        let params = BTreeMap::new();
        let cx = RewriteContext {
            lang: Lang::Triton,
            text: src,
            tree,
            model: &model,
            kernel: &model.kernels[0],
            params: &params,
        };
        let err = apply("unroll", &cx).expect_err("not for Triton");
        expect!["`unroll` rewrites CUDA kernels; `k` is a Triton kernel"]
            .assert_eq(&err.to_string());
    }

    #[test]
    fn literals() {
        assert_eq!(super::int_literal("16"), Some(16));
        assert_eq!(super::int_literal("0x10u"), Some(16));
        assert_eq!(super::int_literal("1'024"), Some(1024));
        assert_eq!(super::int_literal("010"), Some(8));
        assert_eq!(super::int_literal("1.0f"), None);
    }
}

#[cfg(test)]
pub(super) mod testing {
    //! Running a code rewrite on a fixture and rendering what a reviewer needs: each
    //! candidate's label and kernel unit, after checking that nothing outside the unit
    //! changed.
    use std::collections::BTreeMap;

    use expect_test::Expect;

    use super::super::{apply, Candidate, RewriteContext, RewriteError};
    use crate::document::Document;
    use crate::syntax::{self, Lang};

    pub const SAXPY: &str = include_str!("../../../../examples/saxpy.cu");
    pub const MATMUL: &str = include_str!("../../../../examples/matmul_naive.cu");
    pub const REDUCE: &str = include_str!("../../../../examples/reduce_sum.cu");

    pub fn run(
        id: &str,
        src: &str,
        kernel: &str,
        params: serde_json::Value,
    ) -> Result<Vec<Candidate>, RewriteError> {
        let doc = Document::new(Lang::Cuda, 0, src);
        let tree = doc.tree().expect("parsed");
        let model = syntax::analyze(Lang::Cuda, src, tree);
        let k = model.kernel(kernel).expect("kernel in fixture");
        let params: BTreeMap<String, serde_json::Value> = match params {
            serde_json::Value::Object(m) => m.into_iter().collect(),
            _ => BTreeMap::new(),
        };
        let cx = RewriteContext {
            lang: Lang::Cuda,
            text: src,
            tree,
            model: &model,
            kernel: k,
            params: &params,
        };
        let out = apply(id, &cx)?;
        for c in &out {
            assert_only_unit_changed(src, &c.text, kernel);
        }
        Ok(out)
    }

    /// Everything outside the kernel unit is byte for byte the same.
    pub fn assert_only_unit_changed(old: &str, new: &str, kernel: &str) {
        let outside = |text: &str| {
            let doc = Document::new(Lang::Cuda, 0, text);
            let model = syntax::analyze(Lang::Cuda, text, doc.tree().expect("parsed"));
            let k = model.kernel(kernel).expect("kernel still there");
            let mut parts = Vec::new();
            let mut pos = 0;
            for r in &k.unit_ranges {
                parts.push(text[pos..r.start].to_string());
                pos = r.end;
            }
            parts.push(text[pos..].to_string());
            parts
        };
        assert_eq!(outside(old), outside(new));
    }

    /// Each candidate's label and its kernel unit.
    pub fn render(kernel: &str, out: Result<Vec<Candidate>, RewriteError>) -> String {
        match out {
            Err(e) => format!("error: {e}\n"),
            Ok(cands) => {
                let mut s = String::new();
                for c in cands {
                    let doc = Document::new(Lang::Cuda, 0, &c.text);
                    let model = syntax::analyze(Lang::Cuda, &c.text, doc.tree().expect("parsed"));
                    let k = model.kernel(kernel).expect("kernel");
                    s.push_str(&format!("## {}\n", c.label));
                    for r in &k.unit_ranges {
                        s.push_str(&c.text[r.clone()]);
                        s.push('\n');
                    }
                }
                s
            }
        }
    }

    pub fn check(id: &str, src: &str, kernel: &str, params: serde_json::Value, want: Expect) {
        want.assert_eq(&render(kernel, run(id, src, kernel, params)));
    }

    pub fn params(json: &str) -> serde_json::Value {
        serde_json::from_str(json).expect("test params are JSON")
    }

    pub const NONE: &str = "{}";
}
