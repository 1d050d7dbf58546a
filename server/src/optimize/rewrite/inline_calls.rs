//! Calls of the file's `__device__` helpers that hold statements, written out in the
//! kernel: `float m = col_max(x, rows, cols, c);`, where `col_max` declares a local,
//! runs a loop over it and returns it, becomes that declaration and loop in the kernel
//! with the local named `m` and the parameters read as the arguments; a call statement
//! of a `void` helper becomes the helper's statements. The loop rewrites read loops in
//! the kernel's own body only, so a loop the author put in a helper was left serial
//! beside the ones they split; the dispatcher runs those rewrites on this text too
//! ([`super::apply`]).
//!
//! **Inlines** a call that is a statement of a block of the kernel (at any depth): `T v
//! = f(args);` with one declarator, or `f(args);` of a `void` helper. The callee is a
//! function of the file, not a template, not `__global__`, whose only `return` is its
//! last statement (`return e;`, or none for `void`), with no `goto`, label or `static`
//! local, and no call of itself. A parameter the helper never writes and whose argument
//! is a name of the same type (or a literal) reads as the argument; any other parameter
//! becomes a local of the parameter's type initialized with the argument, which is
//! exactly what the call did. Helper locals whose names the kernel uses get fresh ones.
//! The returned local, declared alone with the call's type, becomes `v` itself; any
//! other result is `T v = (R)(e);`. Helpers calling helpers are inlined in rounds.
//! Reference parameters, array parameters and calls inside expressions are left as
//! written.

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::edits::Edits;
use super::tree::{
    assigned_names, code_names_outside, fresh, identifiers_replaced, kernel_function, line_indent,
    named_children, reindent, text, walk,
};
use super::{with_text, RewriteContext};
use crate::syntax::ByteRange;

/// At most this many rounds of inlining (helpers calling helpers).
const ROUNDS: usize = 4;

/// The file text with the kernel's helper calls written out; None when it calls none
/// that can be.
pub(super) fn inlined_calls(cx: &RewriteContext<'_>) -> Option<String> {
    let mut cur = inline_round(cx)?;
    for _ in 1..ROUNDS {
        let next = with_text(cx.lang, &cur, &cx.kernel.name, cx.params, inline_round);
        match next.flatten() {
            Some(t) => cur = t,
            None => break,
        }
    }
    Some(cur)
}

/// One round: every inlinable call statement of the kernel replaced.
fn inline_round(cx: &RewriteContext<'_>) -> Option<String> {
    let func = kernel_function(cx)?;
    let helpers = helpers(cx.text, cx.tree.root_node());
    if helpers.is_empty() {
        return None;
    }
    let types = declared_types(cx.text, func);
    // The names the kernel's code uses: what a written-out local must not shadow.
    let def = func.byte_range();
    let mut taken = code_names_outside(cx, &|n| {
        n.kind() != "translation_unit" && (n.end_byte() <= def.start || n.start_byte() >= def.end)
    });
    let mut reps: Vec<(ByteRange, String)> = Vec::new();
    walk(func.child_by_field_name("body")?, &mut |n| {
        if let Some(call) = call_statement(cx.text, n, &helpers) {
            if let Some(t) = written_out(cx.text, &call, &types, &mut taken) {
                reps.push((n.byte_range(), t));
            }
            return false;
        }
        true
    });
    if reps.is_empty() {
        return None;
    }
    Edits::from_pairs(reps).apply(cx.text).ok()
}

/// A `__device__` function of the file (not `__global__`, not a template). The loop
/// cures write out its call statements; `vectorize_rows` inlines those whose body is
/// `return E;` into expressions.
pub(super) struct Helper<'t> {
    /// The return type's text (`void` for none).
    pub ret: String,
    /// Whether it returns by value (not a pointer or a reference).
    pub by_value: bool,
    pub params: Vec<HelperParam>,
    /// The body's statements, the final `return` excluded.
    pub stmts: Vec<Node<'t>>,
    /// What the final `return` returns.
    pub result: Option<Node<'t>>,
    /// The body's names declared as locals.
    pub locals: BTreeSet<String>,
}

/// One parameter of a [`Helper`]: its name, its type as written before the name
/// (`const float*` for a pointer), and how it is passed.
pub(super) struct HelperParam {
    pub name: String,
    pub ty: String,
    pub passed: Passed,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Passed {
    Value,
    Pointer,
    Reference,
}

impl Helper<'_> {
    /// Whether its call statements can be written out: values and pointers in, a value
    /// (or nothing) out.
    fn can_write_out(&self) -> bool {
        self.by_value && self.params.iter().all(|p| p.passed != Passed::Reference)
    }
}

/// A call statement of a helper: the declared name and type (None for a call
/// statement), the helper and the argument nodes.
struct Call<'h, 't> {
    target: Option<(String, String)>,
    helper: &'h Helper<'t>,
    args: Vec<Node<'t>>,
    at: usize,
}

/// The file's helpers, by name.
pub(super) fn helpers<'t>(src: &str, root: Node<'t>) -> BTreeMap<String, Helper<'t>> {
    named_children(root)
        .into_iter()
        .filter(|f| f.kind() == "function_definition")
        .filter_map(|f| helper(src, f))
        .collect()
}

fn helper<'t>(src: &str, f: Node<'t>) -> Option<(String, Helper<'t>)> {
    let head = &src[f.start_byte()..f.child_by_field_name("body")?.start_byte()];
    if head.contains("__global__") || !head.contains("__device__") {
        return None;
    }
    let mut decl = f.child_by_field_name("declarator")?;
    let mut by_value = true;
    while decl.kind() != "function_declarator" {
        by_value = false; // a pointer or reference return
        decl = decl.child_by_field_name("declarator")?;
    }
    let name = text(src, decl.child_by_field_name("declarator")?).to_string();
    let params = params(src, decl.child_by_field_name("parameters")?)?;
    let ret = text(src, f.child_by_field_name("type")?).to_string();
    let body = f.child_by_field_name("body")?;
    let mut stmts = named_children(body);
    let result = match stmts.last() {
        Some(r) if r.kind() == "return_statement" => {
            let e = named_children(*r).into_iter().next();
            stmts.pop();
            e
        }
        _ => None,
    };
    if (result.is_none()) != (ret == "void") || !plain_body(src, body, &stmts, &name) {
        return None;
    }
    let locals = super::tree::declared_in(src, body);
    let h = Helper {
        ret,
        by_value,
        params,
        stmts,
        result,
        locals,
    };
    Some((name, h))
}

/// Each parameter; None for arrays, function pointers and `...`.
fn params(src: &str, list: Node<'_>) -> Option<Vec<HelperParam>> {
    let mut out = Vec::new();
    for p in named_children(list) {
        if !matches!(
            p.kind(),
            "parameter_declaration" | "optional_parameter_declaration"
        ) {
            return None;
        }
        let d = p.child_by_field_name("declarator")?;
        let (id, passed) = match d.kind() {
            "identifier" => (d, Passed::Value),
            "pointer_declarator" => (pointer_name(d)?, Passed::Pointer),
            "reference_declarator" => (
                named_children(d)
                    .into_iter()
                    .rfind(|n| n.kind() == "identifier")?,
                Passed::Reference,
            ),
            _ => return None,
        };
        let ty = if passed == Passed::Value {
            text(src, p.child_by_field_name("type")?).to_string()
        } else {
            text(src, p)[..id.start_byte() - p.start_byte()]
                .trim()
                .to_string()
        };
        let name = text(src, id).to_string();
        out.push(HelperParam { name, ty, passed });
    }
    Some(out)
}

/// The name a (possibly multi-level) pointer declarator declares.
fn pointer_name(d: Node<'_>) -> Option<Node<'_>> {
    let mut n = d;
    while n.kind() == "pointer_declarator" {
        n = n.child_by_field_name("declarator")?;
    }
    (n.kind() == "identifier").then_some(n)
}

/// No `return` before the end, no `goto` or label, no `static` local and no call of
/// the helper itself.
fn plain_body(src: &str, body: Node<'_>, stmts: &[Node<'_>], name: &str) -> bool {
    let mut ok = true;
    for s in stmts {
        walk(*s, &mut |n| {
            ok &= !matches!(
                n.kind(),
                "return_statement" | "goto_statement" | "labeled_statement"
            );
            ok &= !(n.kind() == "storage_class_specifier" && text(src, n) == "static");
            ok &= !(n.kind() == "call_expression"
                && n.child_by_field_name("function")
                    .is_some_and(|f| text(src, f) == name));
            ok
        });
    }
    ok && body.kind() == "compound_statement"
}

/// The declared type of each parameter and local of the kernel whose name is declared
/// once (a pointer's type with its `*`).
fn declared_types(src: &str, func: Node<'_>) -> BTreeMap<String, String> {
    let mut seen: BTreeMap<String, Option<String>> = BTreeMap::new();
    walk(func, &mut |n| {
        if matches!(n.kind(), "parameter_declaration" | "declaration") {
            let mut c = n.walk();
            for d in n.children_by_field_name("declarator", &mut c) {
                if let Some((name, ty)) = declared_type(src, n, d) {
                    seen.entry(name)
                        .and_modify(|t| *t = None)
                        .or_insert(Some(ty));
                }
            }
        }
        true
    });
    seen.into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
        .collect()
}

fn declared_type(src: &str, decl: Node<'_>, d: Node<'_>) -> Option<(String, String)> {
    let base = text(src, decl.child_by_field_name("type")?);
    let d = if d.kind() == "init_declarator" {
        d.child_by_field_name("declarator")?
    } else {
        d
    };
    match d.kind() {
        "identifier" => Some((text(src, d).to_string(), base.to_string())),
        "pointer_declarator" => {
            let id = pointer_name(d)?;
            let stars = text(src, d).matches('*').count();
            Some((
                text(src, id).to_string(),
                format!("{base}{}", "*".repeat(stars)),
            ))
        }
        _ => None,
    }
}

/// `n` as a call statement of one of `helpers`.
fn call_statement<'h, 't>(
    src: &str,
    n: Node<'t>,
    helpers: &'h BTreeMap<String, Helper<'t>>,
) -> Option<Call<'h, 't>> {
    if n.parent()?.kind() != "compound_statement" {
        return None;
    }
    let (target, call) = match n.kind() {
        "declaration" => {
            let mut c = n.walk();
            let ds: Vec<Node> = n.children_by_field_name("declarator", &mut c).collect();
            let [d] = ds.as_slice() else { return None };
            let name = d.child_by_field_name("declarator")?;
            let value = d.child_by_field_name("value")?;
            let ty = text(src, n.child_by_field_name("type")?);
            let ty = declaration_prefix(src, n, ty);
            (name.kind() == "identifier").then_some(())?;
            (Some((text(src, name).to_string(), ty)), value)
        }
        "expression_statement" => (None, named_children(n).into_iter().next()?),
        _ => return None,
    };
    if call.kind() != "call_expression" {
        return None;
    }
    let helper = helpers.get(text(src, call.child_by_field_name("function")?))?;
    if target.is_none() != (helper.ret == "void") || !helper.can_write_out() {
        return None;
    }
    let args = named_children(call.child_by_field_name("arguments")?);
    (args.len() == helper.params.len()).then_some(Call {
        target,
        helper,
        args,
        at: n.start_byte(),
    })
}

/// The declaration's text before its declarator (`const float`), the type `ty` when
/// there is nothing else.
fn declaration_prefix(src: &str, decl: Node<'_>, ty: &str) -> String {
    let mut c = decl.walk();
    let first = decl.children_by_field_name("declarator", &mut c).next();
    first.map_or(ty.to_string(), |d| {
        src[decl.start_byte()..d.start_byte()].trim().to_string()
    })
}

/// The statements that do what `call` did, at its indentation; None when the call's
/// parent is not a block.
fn written_out(
    src: &str,
    call: &Call<'_, '_>,
    types: &BTreeMap<String, String>,
    taken: &mut BTreeSet<String>,
) -> Option<String> {
    let h = call.helper;
    let indent = line_indent(src, call.at).to_string();
    let mut renames: BTreeMap<String, String> = BTreeMap::new();
    let mut lines = Vec::new();
    for (
        HelperParam {
            name: param, ty, ..
        },
        arg,
    ) in h.params.iter().zip(&call.args)
    {
        let a = text(src, *arg);
        let same_type = arg.kind() == "identifier"
            && types.get(a).is_some_and(|t| bare_type(t) == bare_type(ty));
        if same_type && !writes(src, h, param) {
            renames.insert(param.clone(), a.to_string());
        } else {
            let name = fresh(param, taken);
            lines.push(format!("{ty} {name} = {a};"));
            renames.insert(param.clone(), name);
        }
    }
    let kept = returned_local(src, call);
    for l in &h.locals {
        let name = match &kept {
            Some((local, target)) if local == l => target.clone(),
            _ => fresh(l, taken),
        };
        renames.insert(l.clone(), name);
    }
    for s in &h.stmts {
        let body_indent = line_indent(src, s.start_byte());
        let t = identifiers_replaced(src, *s, &renames)?;
        lines.push(reindent(&t, body_indent, &indent));
    }
    if let (Some((v, ty)), Some(e), None) = (&call.target, h.result, &kept) {
        let e = identifiers_replaced(src, e, &renames)?;
        let cast = if bare_type(&h.ret) == bare_type(ty) {
            String::new()
        } else {
            format!("({})", h.ret)
        };
        lines.push(format!("{ty} {v} = {cast}({e});"));
    }
    Some(lines.join(&format!("\n{indent}")))
}

/// (the helper's returned local, the call's declared name) when the helper returns a
/// local it declares alone at its top level with the call's type, and returns that type.
fn returned_local(src: &str, call: &Call<'_, '_>) -> Option<(String, String)> {
    let (v, ty) = call.target.as_ref()?;
    let e = call.helper.result?;
    if e.kind() != "identifier" || bare_type(&call.helper.ret) != bare_type(ty) {
        return None;
    }
    let name = text(src, e);
    let declares = |s: &Node<'_>| {
        s.kind() == "declaration"
            && bare_type(&declaration_prefix(src, *s, "")) == bare_type(ty)
            && super::tree::declared_in(src, *s)
                .into_iter()
                .eq([name.to_string()])
    };
    call.helper
        .stmts
        .iter()
        .any(declares)
        .then(|| (name.to_string(), v.clone()))
}

/// Whether the helper assigns, increments or takes the address of `param`.
fn writes(src: &str, h: &Helper<'_>, param: &str) -> bool {
    assigned_names(src, &h.stmts).contains(param)
}

/// A type's text without qualifiers and spaces: `const float *__restrict__` is `float*`.
fn bare_type(ty: &str) -> String {
    ty.split(|c: char| c.is_whitespace() || c == '*')
        .filter(|w| !w.is_empty() && !["const", "__restrict__", "volatile"].contains(w))
        .collect::<Vec<_>>()
        .join(" ")
        + &"*".repeat(ty.matches('*').count())
}

#[cfg(test)]
mod tests;
