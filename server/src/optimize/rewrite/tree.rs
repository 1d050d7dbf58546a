//! tree-sitter helpers the CUDA rewrites share: node text, walks, the kernel's
//! definition node, indentation, and splicing replacements into a slice of the text.

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::edits::{EditError, Edits};
use super::RewriteContext;
use crate::syntax::ByteRange;

pub(super) fn text<'s>(src: &'s str, n: Node<'_>) -> &'s str {
    src.get(n.byte_range()).unwrap_or("")
}

pub(super) fn first_line(s: &str) -> &str {
    let l = s.lines().next().unwrap_or("").trim_end();
    l.trim_end_matches('{').trim_end()
}

/// `s` on one line: every run of whitespace (newlines too) one space, none at the ends,
/// so a loop header or an expression reads the same however it was laid out.
pub(super) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Pre-order walk; `f` returns whether to visit the node's children.
pub(super) fn walk<'t>(node: Node<'t>, f: &mut dyn FnMut(Node<'t>) -> bool) {
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        if f(n) {
            let mut c = n.walk();
            let children: Vec<Node<'t>> = n.children(&mut c).collect();
            stack.extend(children.into_iter().rev());
        }
    }
}

/// What an assignment (`left`) or an increment or decrement (`argument`) writes.
pub(super) fn written_target(n: Node<'_>) -> Option<Node<'_>> {
    n.child_by_field_name("left")
        .or_else(|| n.child_by_field_name("argument"))
}

pub(super) fn named_children(n: Node<'_>) -> Vec<Node<'_>> {
    let mut c = n.walk();
    n.named_children(&mut c).collect()
}

/// The kernel's `function_definition` node.
pub(super) fn kernel_function<'a>(cx: &RewriteContext<'a>) -> Option<Node<'a>> {
    let r = &cx.kernel.name_range;
    let mut n = cx
        .tree
        .root_node()
        .descendant_for_byte_range(r.start, r.end)?;
    loop {
        if n.kind() == "function_definition" {
            return Some(n);
        }
        n = n.parent()?;
    }
}

/// The leading whitespace of the line holding byte `pos`.
pub(super) fn line_indent(src: &str, pos: usize) -> &str {
    let start = src[..pos].rfind('\n').map_or(0, |i| i + 1);
    let line = &src[start..];
    &line[..line.len() - line.trim_start_matches([' ', '\t']).len()]
}

/// One indentation level as a loop's or block's `body` uses it past `ind` (the line
/// indentation of the statement that holds it); four spaces when it cannot tell.
pub(super) fn indent_unit(src: &str, body: Node<'_>, ind: &str) -> String {
    named_children(body)
        .first()
        .map(|c| line_indent(src, c.start_byte()).to_string())
        .and_then(|i| i.strip_prefix(ind).map(str::to_string))
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "    ".to_string())
}

/// Lines after the first that start with `from` start with `to` instead.
pub(super) fn reindent(s: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, line) in s.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
            if !line.trim().is_empty() {
                if let Some(rest) = line.strip_prefix(from) {
                    out.push_str(to);
                    out.push_str(rest);
                    continue;
                }
            }
        }
        out.push_str(line);
    }
    out
}

/// `src[span]` with the replacements made (they lie inside `span` and do not overlap).
pub(super) fn render(
    src: &str,
    span: &ByteRange,
    reps: &[(ByteRange, String)],
) -> Result<String, EditError> {
    Edits::from_pairs(reps.iter().cloned()).apply_within(src, span.clone())
}

/// Every name the file's code uses (identifiers, fields, types, macro names), not the
/// words of its comments: what a new local must not shadow or collide with.
pub(super) fn code_names(cx: &RewriteContext<'_>) -> BTreeSet<String> {
    code_names_outside(cx, &|_| false)
}

/// [`code_names`] outside the subtrees `skip` picks (a body about to be replaced whole).
pub(super) fn code_names_outside(
    cx: &RewriteContext<'_>,
    skip: &dyn Fn(Node<'_>) -> bool,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    walk(cx.tree.root_node(), &mut |n| {
        if n.kind() == "comment" || skip(n) {
            return false;
        }
        if n.child_count() == 0 {
            let t = text(cx.text, n);
            if t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
                out.insert(t.to_string());
            }
        }
        true
    });
    out
}

/// `base`, or `base_2`, `base_3`, ... : the first that is not taken (and now is).
pub(super) fn fresh(base: &str, taken: &mut BTreeSet<String>) -> String {
    let mut name = base.to_string();
    let mut n = 2;
    while taken.contains(&name) {
        name = format!("{base}_{n}");
        n += 1;
    }
    taken.insert(name.clone());
    name
}

pub(super) fn newline(src: &str) -> &'static str {
    if src.contains("\r\n") {
        "\r\n"
    } else {
        "\n"
    }
}

/// Whether `n` sits inside a node of one of `kinds` that is itself inside `within`
/// (`within`'s own kind does not count).
pub(super) fn nested_in(n: Node<'_>, within: Node<'_>, kinds: &[&str]) -> bool {
    let mut cur = n;
    while let Some(p) = cur.parent() {
        if p.id() == within.id() {
            return false;
        }
        if kinds.contains(&p.kind()) {
            return true;
        }
        cur = p;
    }
    false
}

/// The names declared inside `body` (plain identifiers).
pub(super) fn declared_in(src: &str, body: Node<'_>) -> BTreeSet<String> {
    let mut locals: BTreeSet<String> = BTreeSet::new();
    walk(body, &mut |n| {
        if n.kind() == "init_declarator" || n.kind() == "declaration" {
            let mut c = n.walk();
            for d in n.children_by_field_name("declarator", &mut c) {
                let mut d = d;
                while let Some(inner) = d.child_by_field_name("declarator") {
                    d = inner;
                }
                if d.kind() == "identifier" {
                    locals.insert(text(src, d).to_string());
                }
            }
        }
        true
    });
    locals
}

/// Every name an assignment or an increment under `roots` writes (`x = ...`, `x += ...`,
/// `++x`), and every name whose address is taken (`&x`).
pub(super) fn assigned_names(src: &str, roots: &[Node<'_>]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for r in roots {
        walk(*r, &mut |n| {
            let target = match n.kind() {
                "assignment_expression" | "update_expression" => written_target(n),
                "pointer_expression"
                    if n.child_by_field_name("operator").map(|o| text(src, o)) == Some("&") =>
                {
                    n.child_by_field_name("argument")
                }
                _ => None,
            };
            if let Some(t) = target.filter(|t| t.kind() == "identifier") {
                out.insert(text(src, t).to_string());
            }
            true
        });
    }
    out
}

/// `node`'s text with each identifier that `names` maps written as its value.
pub(super) fn identifiers_replaced(
    src: &str,
    node: Node<'_>,
    names: &std::collections::BTreeMap<String, String>,
) -> Option<String> {
    let mut reps = Vec::new();
    walk(node, &mut |n| {
        if n.kind() == "identifier" {
            if let Some(v) = names.get(text(src, n)) {
                reps.push((n.byte_range(), v.clone()));
            }
        }
        true
    });
    render(src, &node.byte_range(), &reps).ok()
}
