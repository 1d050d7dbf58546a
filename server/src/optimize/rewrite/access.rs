//! Global memory accesses of a kernel body as the idioms need them: which pointer
//! parameter (*buffer*) each access goes through, directly or through a local alias
//! (`T* p = x + offset;`, `= &x[offset]`), the pieces of its address (the alias offset and
//! the index, for [`super::poly`]), and whether it writes. `atomic*` calls write through
//! their first argument. Taking an element's address for anything else is refused: what
//! happens to it cannot be followed.

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::tree::{first_line, named_children, text, walk};
use crate::syntax::ParamKind;

/// A pointer that leads into a kernel buffer: the parameter itself, or a local alias
/// `T* p = x + offset;` / `= &x[offset]`.
#[derive(Clone)]
pub(super) struct Alias<'t> {
    pub buffer: String,
    /// The index parts of its offset (`x + a * W + b`: `a * W`, `b`).
    pub offset: Vec<Node<'t>>,
}

pub(super) struct Scope<'s, 't> {
    pub src: &'s str,
    /// Pointer names (parameters and aliases) -> what they point into.
    pub pointers: BTreeMap<String, Alias<'t>>,
    /// Buffers written anywhere in the kernel.
    pub written: BTreeSet<String>,
    /// Row-level declared types by name.
    pub types: BTreeMap<String, String>,
}

impl<'s, 't> Scope<'s, 't> {
    /// The kernel's pointer parameters (each its own buffer) and scalar parameter types;
    /// aliases and local types are added by [`declare`].
    pub fn of_kernel(cx: &super::RewriteContext<'_>, src: &'s str) -> Scope<'s, 't> {
        let mut scope = Scope {
            src,
            pointers: BTreeMap::new(),
            written: BTreeSet::new(),
            types: BTreeMap::new(),
        };
        for p in &cx.kernel.params {
            match &p.kind {
                ParamKind::Pointer { .. } => {
                    scope.pointers.insert(
                        p.name.clone(),
                        Alias {
                            buffer: p.name.clone(),
                            offset: Vec::new(),
                        },
                    );
                }
                ParamKind::Scalar { ty } => {
                    scope.types.insert(p.name.clone(), ty.clone());
                }
                _ => {}
            }
        }
        scope
    }
}

impl<'s, 't> Scope<'s, 't> {
    /// [`Scope::of_kernel`] with every declaration under `root` (the kernel's body)
    /// recorded: an alias declared anywhere in it (`float* xp = x + ...;`) reaches its
    /// buffer wherever it is used. Err: an alias kernel-lsp does not follow.
    pub fn with_declarations(
        cx: &super::RewriteContext<'_>,
        src: &'s str,
        root: Node<'t>,
    ) -> Result<Scope<'s, 't>, String> {
        let mut scope = Scope::of_kernel(cx, src);
        let mut err = None;
        walk(root, &mut |n| {
            if n.kind() == "declaration" {
                declare_statement(&mut scope, n, &mut err);
            }
            true
        });
        match err {
            Some(e) => Err(e),
            None => Ok(scope),
        }
    }
}

/// One global access: the node (`p[i]` or `*e`), its buffer, and the pieces of its
/// address (alias offset and index).
pub(super) struct Access<'t> {
    pub node: Node<'t>,
    pub buffer: String,
    pub parts: Vec<Node<'t>>,
    pub write: bool,
}

pub(super) fn canon(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

pub(super) fn contains(outer: Node, inner: Node) -> bool {
    outer.start_byte() <= inner.start_byte() && inner.end_byte() <= outer.end_byte()
}

pub(super) fn enclosing_statement(n: Node) -> Option<Node> {
    let mut cur = n;
    loop {
        let k = cur.kind();
        if k.ends_with("_statement") || k == "declaration" {
            return Some(cur);
        }
        cur = cur.parent()?;
    }
}

/// No `if`, `?:`, loop, `switch`, `&&` or `||` between `n` and its element statement.
pub(super) fn unconditional(n: Node<'_>, tops: &[Node<'_>]) -> bool {
    let top: BTreeSet<usize> = tops.iter().map(|t| t.id()).collect();
    let mut cur = n;
    while !top.contains(&cur.id()) {
        let Some(p) = cur.parent() else { return false };
        let k = p.kind();
        if matches!(
            k,
            "if_statement"
                | "conditional_expression"
                | "for_statement"
                | "while_statement"
                | "do_statement"
                | "switch_statement"
        ) {
            return false;
        }
        if k == "binary_expression" {
            let op = p.child_by_field_name("operator").map(|o| o.kind());
            if matches!(op, Some("&&" | "||")) {
                return false;
            }
        }
        cur = p;
    }
    true
}

/// `n` lies in the value of a pointer declarator (`T* p = x + offset;`): it defines an
/// alias, which [`base_of`] follows.
pub(super) fn defines_alias(n: Node<'_>) -> bool {
    std::iter::successors(Some(n), |x| x.parent())
        .take_while(|x| x.kind() != "declaration")
        .any(|x| {
            x.kind() == "init_declarator"
                && x.child_by_field_name("declarator")
                    .is_some_and(|d| d.kind() == "pointer_declarator")
        })
}

/// Record every declarator of a `declaration` statement (see [`declare`]).
pub(super) fn declare_statement<'t>(
    scope: &mut Scope<'_, 't>,
    n: Node<'t>,
    err: &mut Option<String>,
) {
    let ty = n
        .child_by_field_name("type")
        .map(|t| text(scope.src, t).to_string());
    let mut c = n.walk();
    for d in n.children_by_field_name("declarator", &mut c) {
        declare(scope, d, ty.as_deref(), err);
    }
}

/// Record a declarator: its type for later, and pointer aliases into buffers.
pub(super) fn declare<'t>(
    scope: &mut Scope<'_, 't>,
    d: Node<'t>,
    ty: Option<&str>,
    err: &mut Option<String>,
) {
    let src = scope.src;
    let (decl, value) = match d.kind() {
        "init_declarator" => (
            d.child_by_field_name("declarator"),
            d.child_by_field_name("value"),
        ),
        _ => (Some(d), None),
    };
    let Some(decl) = decl else { return };
    let pointer = decl.kind() == "pointer_declarator";
    let mut name_node = decl;
    while let Some(inner) = name_node.child_by_field_name("declarator") {
        name_node = inner;
    }
    let name = text(src, name_node).to_string();
    if decl.kind() == "identifier" {
        if let Some(ty) = ty {
            scope.types.insert(name.clone(), ty.to_string());
        }
    }
    if !pointer {
        return;
    }
    let Some(v) = value else {
        return;
    };
    match base_of(scope, v, 0) {
        Some((buffer, offset)) => {
            scope.pointers.insert(name, Alias { buffer, offset });
        }
        None => {
            // A pointer to something else (a local array, a cast): fine unless it is
            // used to reach a buffer, which base_of will not see; refuse to be safe.
            let mut mentions = false;
            walk(v, &mut |n| {
                mentions |= n.kind() == "identifier" && scope.pointers.contains_key(text(src, n));
                true
            });
            if mentions {
                *err = Some(format!(
                    "`{}` makes a pointer into a buffer in a way kernel-lsp does not follow",
                    first_line(text(src, d))
                ));
            }
        }
    }
}

/// The buffer a pointer-valued expression points into, and the index parts of its
/// offset (alias offset first).
pub(super) fn base_of<'t>(
    scope: &Scope<'_, 't>,
    n: Node<'t>,
    depth: usize,
) -> Option<(String, Vec<Node<'t>>)> {
    if depth > 32 {
        return None;
    }
    let src = scope.src;
    match n.kind() {
        "identifier" => {
            let a = scope.pointers.get(text(src, n))?;
            Some((a.buffer.clone(), a.offset.clone()))
        }
        "parenthesized_expression" => base_of(scope, *named_children(n).first()?, depth + 1),
        "cast_expression" => base_of(scope, n.child_by_field_name("value")?, depth + 1),
        "binary_expression" => {
            let op = text(src, n.child_by_field_name("operator")?);
            let (l, r) = (
                n.child_by_field_name("left")?,
                n.child_by_field_name("right")?,
            );
            if op != "+" {
                return None;
            }
            if let Some((b, mut parts)) = base_of(scope, l, depth + 1) {
                parts.push(r);
                return Some((b, parts));
            }
            let (b, mut parts) = base_of(scope, r, depth + 1)?;
            parts.push(l);
            Some((b, parts))
        }
        "pointer_expression" => {
            // `&p[i]`
            let op = n.child_by_field_name("operator").map(|o| text(src, o))?;
            let arg = n.child_by_field_name("argument")?;
            if op != "&" || arg.kind() != "subscript_expression" {
                return None;
            }
            let (b, mut parts) = base_of(scope, arg.child_by_field_name("argument")?, depth + 1)?;
            parts.extend(index_of(arg));
            Some((b, parts))
        }
        _ => None,
    }
}

pub(super) fn index_of(sub: Node<'_>) -> Option<Node<'_>> {
    sub.child_by_field_name("indices")
        .and_then(|ix| named_children(ix).into_iter().next())
        .or_else(|| sub.child_by_field_name("index"))
}

/// Every global access under `root`, and whether it writes.
pub(super) fn collect_accesses<'t>(
    scope: &Scope<'_, 't>,
    root: Node<'t>,
    out: &mut Vec<Access<'t>>,
) -> Result<(), String> {
    let src = scope.src;
    let mut err = None;
    walk(root, &mut |n| {
        if err.is_some() {
            return false;
        }
        let found = match n.kind() {
            "subscript_expression" => n
                .child_by_field_name("argument")
                .and_then(|a| base_of(scope, a, 0))
                .map(|(b, mut parts)| {
                    parts.extend(index_of(n));
                    (b, parts)
                }),
            "pointer_expression"
                if n.child_by_field_name("operator").map(|o| text(src, o)) == Some("*") =>
            {
                n.child_by_field_name("argument")
                    .and_then(|a| base_of(scope, a, 0))
            }
            "call_expression" => {
                let f = n
                    .child_by_field_name("function")
                    .map_or("", |f| text(src, f));
                if f.starts_with("atomic") {
                    let first = n
                        .child_by_field_name("arguments")
                        .and_then(|a| named_children(a).into_iter().next());
                    if let Some((b, parts)) = first.and_then(|a| base_of(scope, a, 0)) {
                        out.push(Access {
                            node: n,
                            buffer: b,
                            parts,
                            write: true,
                        });
                    }
                }
                None
            }
            _ => None,
        };
        let Some((buffer, parts)) = found else {
            return true;
        };
        let parent = n.parent();
        let write = parent.is_some_and(|p| {
            (p.kind() == "assignment_expression"
                && p.child_by_field_name("left")
                    .is_some_and(|l| l.id() == n.id()))
                || p.kind() == "update_expression"
        });
        // `T* p = &x[i];` declares an alias, followed by `base_of`.
        if parent.is_some_and(|p| {
            p.kind() == "pointer_expression"
                && p.parent().is_some_and(|d| d.kind() == "init_declarator")
        }) {
            return true;
        }
        // `&y[i]` not as an atomic's address: the element may be written elsewhere.
        if parent.is_some_and(|p| {
            p.kind() == "pointer_expression"
                && p.child_by_field_name("operator").map(|o| text(src, o)) == Some("&")
        }) && !parent
            .and_then(|p| p.parent())
            .and_then(|a| a.parent())
            .is_some_and(|c| {
                c.kind() == "call_expression"
                    && c.child_by_field_name("function")
                        .is_some_and(|f| text(src, f).starts_with("atomic"))
            })
        {
            err = Some(format!(
                "`{}` takes the address of an element; kernel-lsp cannot follow what is done with it",
                text(src, parent.expect("checked"))
            ));
            return false;
        }
        out.push(Access {
            node: n,
            buffer,
            parts,
            write,
        });
        // Index expressions may hold further accesses (`x[idx[c]]`).
        true
    });
    match err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
