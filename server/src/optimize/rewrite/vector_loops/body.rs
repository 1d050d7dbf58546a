//! A loop body's global accesses, grouped by where they fall: each access whose address
//! is `p[E + v]` (E the same on every iteration, through a row pointer `xr = x + row *
//! cols` too) is at the iteration's own element of its group `(p, E)`; such a group
//! read or written unconditionally somewhere in the body becomes one vector per W
//! elements. A buffer the loop writes must be reached only at its own element of one
//! group, so no copy reads what another copy writes.

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::super::access::{collect_accesses, unconditional, Scope};
use super::super::poly::{poly, single_definitions, FixedPositions, Poly, VarNames};
use super::super::tree::{named_children, text, walk};
use super::super::vectorize::element_bytes;
use super::super::RewriteContext;

/// One buffer at one offset from the loop variable: the accesses a vector replaces.
pub(super) struct Group<'t> {
    /// The pointer the accesses go through (`xr`, `x`): the vector's name starts with it.
    pub pointer: String,
    pub pointee: String,
    /// The address of the group's element at `v = base` (`&xr[j_base]`): where the
    /// vectors of the uniform part start.
    pub base: String,
    pub nodes: Vec<Node<'t>>,
    pub read: bool,
    pub written: bool,
    /// Some write happens in every iteration (not under a condition).
    pub always_written: bool,
}

/// Vector types a body may already use; such a loop is vectorized already.
const VECTOR_TYPES: &[&str] = &[
    "float2",
    "float4",
    "double2",
    "int2",
    "int4",
    "uint2",
    "uint4",
    "__half2",
    "half2",
    "__nv_bfloat162",
    "char4",
    "uchar4",
    "short4",
    "ushort4",
];

/// The groups of `body`, the body of a loop over `var`, whose base address is written
/// with `var` read as `base`, and the body's writes that are not global accesses; or why
/// no group can be vectorized.
pub(super) fn groups<'t>(
    cx: &RewriteContext<'t>,
    func_body: Node<'t>,
    (body, cond): (Node<'t>, Node<'t>),
    var: &str,
    base: &str,
) -> Result<(Vec<Group<'t>>, Vec<Node<'t>>), String> {
    let src = cx.text;
    let mut refusal = None;
    walk(body, &mut |n| {
        if refusal.is_some() {
            return false;
        }
        let t = text(src, n);
        if n.kind() == "call_expression" {
            let f = n
                .child_by_field_name("function")
                .map_or("", |f| text(src, f));
            if f.starts_with("atomic") {
                refusal = Some(format!(
                    "its body calls `{f}` (atomics would land in another order)"
                ));
            }
        }
        if matches!(n.kind(), "type_identifier" | "identifier") && VECTOR_TYPES.contains(&t) {
            refusal = Some(format!("its body already uses `{t}`"));
        }
        true
    });
    if let Some(r) = refusal {
        return Err(r);
    }
    let scope = Scope::with_declarations(cx, src, func_body)?;
    let mut accesses = Vec::new();
    collect_accesses(&scope, body, &mut accesses)?;
    let (defs, varying) = single_definitions(src, &[body], &|_| true);
    let names = FixedPositions(VarNames {
        var: var.to_string(),
        defs,
        varying,
    });
    let tops = statements(src, body, cond);
    // (buffer, offset) -> accesses; buffer -> whether some access is not at its own element.
    let mut by_key: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    let mut elsewhere: BTreeMap<&str, Node> = BTreeMap::new();
    for (i, a) in accesses.iter().enumerate() {
        match offset(src, a.parts.as_slice(), &names) {
            Some(e) => by_key.entry((a.buffer.clone(), e)).or_default().push(i),
            None => {
                elsewhere.entry(a.buffer.as_str()).or_insert(a.node);
            }
        }
    }
    let written: BTreeSet<&str> = accesses
        .iter()
        .filter(|a| a.write)
        .map(|a| a.buffer.as_str())
        .collect();
    for w in &written {
        let offsets = by_key.keys().filter(|(b, _)| b == w).count();
        if let Some(n) = elsewhere.get(w) {
            return Err(format!(
                "`{}` reaches `{w}`, which the loop writes, at another element than its own (a copy would read what another writes)",
                text(src, *n)
            ));
        }
        if offsets > 1 {
            let mut at: Vec<String> = Vec::new();
            for a in accesses.iter().filter(|a| a.buffer == *w) {
                let t = format!("`{}`", text(src, a.node));
                if !at.contains(&t) {
                    at.push(t);
                }
            }
            return Err(format!(
                "the loop writes `{w}` and reaches it at {offsets} offsets from `{var}` ({}): a copy would read what another writes",
                at.join(", ")
            ));
        }
    }
    let pointers = super::super::elementwise::pointer_params(cx);
    let mut out = Vec::new();
    let mut why = Vec::new();
    for ((buffer, _), idx) in &by_key {
        let list: Vec<&super::super::access::Access> = idx.iter().map(|i| &accesses[*i]).collect();
        let Some(first) = list.iter().find(|a| unconditional(a.node, &tops)) else {
            why.push(format!(
                "`{}` is reached only under a condition (a vector would read elements the loop does not)",
                text(src, list[0].node)
            ));
            continue;
        };
        let pointee =
            crate::syntax::normalize_type(pointers.get(buffer).map_or("", |p| p.as_str()));
        if element_bytes(&pointee).is_none() {
            why.push(format!(
                "`{buffer}` points to `{pointee}`, of no known size"
            ));
            continue;
        }
        let (pointer, base_text) = base_address(src, first.node, var, base, &names)?;
        out.push(Group {
            pointer,
            pointee,
            base: base_text,
            nodes: list.iter().map(|a| a.node).collect(),
            read: list.iter().any(|a| !a.write || is_compound(src, a.node)),
            written: list.iter().any(|a| a.write),
            always_written: list.iter().any(|a| a.write && unconditional(a.node, &tops)),
        });
    }
    out.sort_by_key(|g| g.nodes[0].start_byte());
    if out.is_empty() {
        why.insert(
            0,
            format!("no global access in its body is at its own element (`p[E + {var}]`)"),
        );
        return Err(why.join("; "));
    }
    Ok((out, other_writes(body, &accesses)))
}

/// What the body writes through a subscript or a dereference that is not a global
/// access: shared memory, a local array.
fn other_writes<'t>(body: Node<'t>, global: &[super::super::access::Access<'t>]) -> Vec<Node<'t>> {
    let mut out = Vec::new();
    walk(body, &mut |n| {
        if matches!(n.kind(), "assignment_expression" | "update_expression") {
            if let Some(t) = super::super::tree::written_target(n).filter(|t| {
                matches!(t.kind(), "subscript_expression" | "pointer_expression")
                    && !global.iter().any(|a| a.node.id() == t.id())
            }) {
                out.push(t);
            }
        }
        true
    });
    out
}

/// The statements of a loop body that run on every iteration: its own, and those of an
/// `if` (without `else`) that tests the loop's condition again (`if (i < n)` in a loop
/// while `i < n`, as a grid-stride rewrite of a bounds check leaves it).
fn statements<'t>(src: &str, body: Node<'t>, cond: Node<'_>) -> Vec<Node<'t>> {
    let canon = |n: Node<'_>| -> String {
        let t: String = text(src, n)
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        t.trim_start_matches('(').trim_end_matches(')').to_string()
    };
    let mut out = Vec::new();
    let mut todo = match body.kind() {
        "compound_statement" => named_children(body),
        _ => vec![body],
    };
    todo.reverse();
    while let Some(s) = todo.pop() {
        let again = s.kind() == "if_statement"
            && s.child_by_field_name("alternative").is_none()
            && s.child_by_field_name("condition")
                .is_some_and(|c| canon(c) == canon(cond));
        match s.child_by_field_name("consequence").filter(|_| again) {
            Some(c) if c.kind() == "compound_statement" => {
                let mut inner = named_children(c);
                inner.reverse();
                todo.extend(inner);
            }
            Some(c) => todo.push(c),
            None => out.push(s),
        }
    }
    out
}

/// The offset E of an access `p[E + v]` (canonical text), when v's coefficient is 1 and E
/// does not change from one iteration to the next.
fn offset(src: &str, parts: &[Node<'_>], names: &FixedPositions<'_>) -> Option<String> {
    let p = parts.iter().fold(Poly::default(), |acc, part| {
        acc.add(&poly(src, *part, names), 1)
    });
    if p.linear_in("$c")?.as_constant()? != 1 {
        return None;
    }
    let e = p.add(&Poly::atom("$c".into()), -1);
    e.is_invariant().then(|| format!("{:?}", e.0))
}

/// `y[i] += ...`: a write that reads the element first.
fn is_compound(src: &str, n: Node<'_>) -> bool {
    n.parent().is_some_and(|p| {
        (p.kind() == "assignment_expression"
            && p.child_by_field_name("operator").map(|o| text(src, o)) != Some("="))
            || p.kind() == "update_expression"
    })
}

/// The pointer an access goes through and its address at `var = base`: `&xr[base]`,
/// `&x[row * cols + base]`, `(p + base)`; locals the body defines are written out.
fn base_address(
    src: &str,
    n: Node<'_>,
    var: &str,
    base: &str,
    names: &FixedPositions<'_>,
) -> Result<(String, String), String> {
    let (ptr, inner) = match n.kind() {
        "subscript_expression" => (
            n.child_by_field_name("argument"),
            super::super::access::index_of(n),
        ),
        _ => (n.child_by_field_name("argument"), None),
    };
    let ptr = ptr.ok_or_else(|| format!("`{}` has no pointer", text(src, n)))?;
    let mut pointer = String::new();
    walk(ptr, &mut |x| {
        if pointer.is_empty() && x.kind() == "identifier" {
            pointer = text(src, x).to_string();
        }
        pointer.is_empty()
    });
    if names.0.defs.contains_key(&pointer) || names.0.varying.contains(&pointer) {
        return Err(format!(
            "`{}` goes through `{pointer}`, which the body declares",
            text(src, n)
        ));
    }
    let at = |x: Node<'_>| expanded(src, x, var, base, names, 0);
    Ok(match inner {
        Some(ix) => (pointer, format!("&{}[{}]", at(ptr)?, at(ix)?)),
        None => (pointer, format!("({})", at(ptr)?)),
    })
}

/// The text of `n` with `var` read as `base` and the body's single-definition locals
/// written out.
fn expanded(
    src: &str,
    n: Node<'_>,
    var: &str,
    base: &str,
    names: &FixedPositions<'_>,
    depth: usize,
) -> Result<String, String> {
    if depth > 16 {
        return Err(format!("`{}` nests its locals too deeply", text(src, n)));
    }
    let mut reps: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    let mut err = None;
    walk(n, &mut |x| {
        if x.kind() != "identifier" {
            return true;
        }
        let t = text(src, x);
        if t == var {
            reps.push((x.byte_range(), base.to_string()));
        } else if let Some(d) = names.0.defs.get(t) {
            match expanded(src, *d, var, base, names, depth + 1) {
                Ok(s) => reps.push((x.byte_range(), format!("({s})"))),
                Err(e) => err = Some(e),
            }
        } else if names.0.varying.contains(t) {
            err = Some(format!("`{t}` changes inside the loop"));
        }
        false
    });
    if let Some(e) = err {
        return Err(e);
    }
    super::super::tree::render(src, &n.byte_range(), &reps).map_err(|e| e.to_string())
}
