//! Sums kept in global memory through a loop, held in a register instead: `c[i] = 0;
//! for (...) c[i] += a[...] * b[...];` becomes `float c_i = 0; for (...) c_i += ...;
//! c[i] = c_i;`. An element qualifies when every access of its pointer inside the loop is
//! that one element (`p[E]`, the same index text each time), one of them writes it, and
//! nothing the loop assigns appears in `E`. The statement just before the loop that
//! stores into it (`p[E] = V;`) becomes the register's declaration; otherwise the
//! register starts from a read of the element. The store after the loop writes what the
//! last iteration left, so every value the kernel stores is the same, the buffers being
//! distinct (what the spec's buffers are, and what `__restrict__` promises). The
//! dispatcher retries a rewrite that refused the kernel on this text (see
//! [`super::apply`]): a loop that writes global memory every iteration is what the
//! tiling, row and loop-splitting analyses refuse.
//!
//! Left as written: an access under a condition inside the loop (its index may be valid
//! only there), an index naming what the loop assigns or declares (`auto c = c0 + j;`),
//! a pointer also used in the loop other than as `p[E]` (another index,
//! `*p`, passed to a call, the element's address taken for an atomic), an index that reads memory or
//! calls, a loop holding `return` or `goto`, a loop holding a barrier, a fence or an
//! atomic (other threads may read the element between its iterations), and a loop that
//! is not a statement of a `{ ... }` block.

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::access::{canon, index_of};
use super::edits::{Edit, Edits};
use super::tree::{
    assigned_names, code_names, declared_in, fresh, kernel_function, line_indent, named_children,
    nested_in, newline, text, walk, written_target,
};
use super::RewriteContext;
use crate::syntax::{pointee_type, Lang, ParamKind};

/// The file text with every qualifying element held in a register through its loop (the
/// outermost loop it qualifies for); None when there is none.
pub(super) fn in_registers(cx: &RewriteContext<'_>) -> Option<String> {
    if cx.lang != Lang::Cuda {
        return None;
    }
    let func = kernel_function(cx)?;
    let pointers = pointers(cx, func);
    let mut names = code_names(cx);
    let mut edits = Vec::new();
    let mut done: Vec<Node> = Vec::new();
    walk(func, &mut |n| {
        if !is_loop(n) || done.iter().any(|d| d.id() == n.id()) {
            return true;
        }
        let sums = held(cx.text, n, &pointers);
        if sums.is_empty() {
            return true;
        }
        for s in &sums {
            edits.extend(promote(cx.text, n, s, &mut names));
        }
        done.push(n);
        false
    });
    if edits.is_empty() {
        return None;
    }
    let mut all = Edits::new();
    all.extend(edits);
    all.apply(cx.text).ok()
}

fn is_loop(n: Node<'_>) -> bool {
    matches!(
        n.kind(),
        "for_statement" | "while_statement" | "do_statement"
    )
}

/// The pointers the kernel may hold a global element of, with their element types: its
/// pointer parameters and the locals it declares as `T* p`.
fn pointers(cx: &RewriteContext<'_>, func: Node<'_>) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = cx
        .kernel
        .params
        .iter()
        .filter_map(|p| match &p.kind {
            ParamKind::Pointer { pointee, .. } => Some((p.name.clone(), pointee.clone())),
            _ => None,
        })
        .collect();
    walk(func, &mut |n| {
        if n.kind() != "declaration" {
            return true;
        }
        let ty = n.child_by_field_name("type").map(|t| text(cx.text, t));
        let mut c = n.walk();
        for d in n.children_by_field_name("declarator", &mut c) {
            let d = match d.kind() {
                "init_declarator" => d.child_by_field_name("declarator"),
                _ => Some(d),
            };
            let Some(d) = d.filter(|d| d.kind() == "pointer_declarator") else {
                continue;
            };
            let name = d
                .child_by_field_name("declarator")
                .map(|x| text(cx.text, x));
            if let (Some(ty), Some(name)) = (ty, name) {
                if let Some(elem) = pointee_type(&format!("{ty}*")) {
                    out.insert(name.to_string(), elem);
                }
            }
        }
        false
    });
    out
}

/// One element to hold: its pointer, index text, element type and its accesses.
struct Sum<'t> {
    pointer: String,
    index: String,
    ty: String,
    uses: Vec<Node<'t>>,
}

/// The elements `l` qualifies to hold (see the module doc).
fn held<'t>(src: &str, l: Node<'t>, pointers: &BTreeMap<String, String>) -> Vec<Sum<'t>> {
    let mut uses: BTreeMap<&str, Vec<Node<'t>>> = BTreeMap::new();
    let mut exits = false;
    walk(l, &mut |n| {
        match n.kind() {
            "return_statement" | "goto_statement" => exits = true,
            // Other threads may read the element between iterations.
            "call_expression" => {
                let f = n
                    .child_by_field_name("function")
                    .map_or("", |f| text(src, f));
                exits |= f.starts_with("__sync")
                    || f.starts_with("__threadfence")
                    || f.starts_with("atomic");
            }
            "subscript_expression" => {
                let base = n.child_by_field_name("argument");
                if let Some(b) = base.filter(|b| pointers.contains_key(text(src, *b))) {
                    uses.entry(text(src, b)).or_default().push(n);
                }
            }
            _ => {}
        }
        true
    });
    if exits || l.parent().is_none_or(|p| p.kind() != "compound_statement") {
        return Vec::new();
    }
    // What the loop assigns or declares (a name declared inside it is a new value
    // each trip, `auto c = c0 + j;`).
    let mut assigned = assigned_names(src, &[l]);
    assigned.extend(declared_in(src, l));
    let index_text = |n: &Node| index_of(*n).map(|i| canon(text(src, i)));
    let mut out = Vec::new();
    for (pointer, nodes) in uses {
        let Some(idx) = index_of(nodes[0]) else {
            continue;
        };
        let first = canon(text(src, idx));
        // The pointer appears in the loop only as the base of these subscripts.
        let only_subscripts = count_identifiers(src, l, pointer) == nodes.len();
        let same = nodes
            .iter()
            .all(|n| index_text(n).as_deref() == Some(&first));
        let writes = nodes.iter().any(|n| is_written(*n));
        // An access under a condition inside the loop: its index may be valid only there.
        let guarded = nodes.iter().any(|n| {
            nested_in(
                *n,
                l,
                &["if_statement", "conditional_expression", "switch_statement"],
            )
        });
        let addressed = nodes.iter().any(|n| {
            n.parent().is_some_and(|p| {
                p.kind() == "pointer_expression"
                    && p.child_by_field_name("operator")
                        .is_some_and(|o| text(src, o) == "&")
            })
        });
        if only_subscripts
            && same
            && writes
            && !addressed
            && !guarded
            && invariant(src, idx, &assigned)
        {
            out.push(Sum {
                pointer: pointer.to_string(),
                index: text(src, idx).to_string(),
                ty: pointers[pointer].clone(),
                uses: nodes,
            });
        }
    }
    out
}

/// How many times `name` appears as an identifier under `root`.
fn count_identifiers(src: &str, root: Node<'_>, name: &str) -> usize {
    let mut n = 0;
    walk(root, &mut |x| {
        if x.kind() == "identifier" && text(src, x) == name {
            n += 1;
        }
        true
    });
    n
}

/// Whether the access `n` is the target of an assignment or an increment.
fn is_written(n: Node<'_>) -> bool {
    n.parent()
        .filter(|p| matches!(p.kind(), "assignment_expression" | "update_expression"))
        .and_then(written_target)
        .is_some_and(|t| t.id() == n.id())
}

/// Whether the index names only what the loop never assigns, and reads no memory and
/// calls nothing.
fn invariant(src: &str, index: Node<'_>, assigned: &BTreeSet<String>) -> bool {
    let mut ok = true;
    walk(index, &mut |n| {
        match n.kind() {
            "identifier" if assigned.contains(text(src, n)) => ok = false,
            "subscript_expression"
            | "call_expression"
            | "pointer_expression"
            | "assignment_expression"
            | "update_expression" => ok = false,
            _ => {}
        }
        ok
    });
    ok
}

/// The edits that hold `s` in a fresh register through the loop `l`.
fn promote(src: &str, l: Node<'_>, s: &Sum<'_>, names: &mut BTreeSet<String>) -> Vec<Edit> {
    let nl = newline(src);
    let ind = line_indent(src, l.start_byte());
    let name = fresh(&format!("{}_sum", s.pointer), names);
    let mut out: Vec<Edit> = s
        .uses
        .iter()
        .map(|u| Edit::replace(u.byte_range(), name.clone()))
        .collect();
    let element = match initial_store(src, l, s) {
        Some((stmt, element, value)) => {
            out.push(Edit::replace(
                stmt.byte_range(),
                format!("{} {name} = {value};", s.ty),
            ));
            element.to_string()
        }
        None => {
            let element = format!("{}[{}]", s.pointer, s.index);
            out.push(Edit::insert(
                l.start_byte(),
                format!("{} {name} = {element};{nl}{ind}", s.ty),
            ));
            element
        }
    };
    out.push(Edit::insert(
        l.end_byte(),
        format!("{nl}{ind}{element} = {name};"),
    ));
    out
}

/// The statement right before `l` when it is `p[E] = V;` for the held element and `V`
/// does not name the pointer, with the texts of `p[E]` and `V`.
fn initial_store<'t>(
    src: &'t str,
    l: Node<'t>,
    s: &Sum<'_>,
) -> Option<(Node<'t>, &'t str, &'t str)> {
    let prev = l.prev_named_sibling()?;
    if prev.kind() != "expression_statement" {
        return None;
    }
    let [a] = named_children(prev)[..] else {
        return None;
    };
    if a.kind() != "assignment_expression" || a.child_by_field_name("operator")?.kind() != "=" {
        return None;
    }
    let left = a.child_by_field_name("left")?;
    let value = a.child_by_field_name("right")?;
    let same = left.kind() == "subscript_expression"
        && left
            .child_by_field_name("argument")
            .is_some_and(|b| text(src, b) == s.pointer)
        && index_of(left).is_some_and(|i| canon(text(src, i)) == canon(&s.index));
    (same && count_identifiers(src, value, &s.pointer) == 0)
        .then(|| (prev, text(src, left), text(src, value)))
}

#[cfg(test)]
mod tests;
