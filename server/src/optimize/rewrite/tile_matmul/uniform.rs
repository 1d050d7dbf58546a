//! What is the same in every thread of a tiled block: the names a tile load may use
//! besides the row, the column and `k`. A tile is filled by all the threads of a block
//! and read by all of them, so a load it serves must mean the same element in each; a
//! batched matmul's batch offset (`A + b * M * K`, `A[(b * M + row) * K + k]`) is such a
//! value when the batch comes from `blockIdx.z` (or `gridDim.z`: the tiles re-cut only x
//! and y, so those two keep their meaning in every candidate) and kernel parameters. A
//! name is uniform when each of its declarators is initialised from uniform values
//! through arithmetic, casts and conditionals (no memory read, no call but `static_cast`,
//! no thread position, no block position along x or y, no block or grid size the
//! rewrite changes) and nothing assigns it in the guarded body.

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

pub(super) use super::super::tree::assigned_names;
use super::super::tree::{text, walk};

/// A block or thread position (`threadIdx.x`, `blockIdx.z`, `gridDim.z`): `Some(true)`
/// where every candidate keeps its meaning and every thread of a block reads the same
/// (`blockIdx.z`, `gridDim.z`), `Some(false)` for any other, `None` for no position.
pub(super) fn kept_position(src: &str, n: Node<'_>) -> Option<bool> {
    if n.kind() != "field_expression" {
        return None;
    }
    let arg = n.child_by_field_name("argument").map(|a| text(src, a))?;
    let field = n.child_by_field_name("field").map(|f| text(src, f))?;
    match arg {
        "blockIdx" | "gridDim" => Some(field == "z"),
        "threadIdx" | "blockDim" => Some(false),
        _ => None,
    }
}

/// Why `expr` may differ between the threads of a block (or between the original and a
/// tiled candidate), or `None` when it is the same in all: it names only `uniform` names
/// and kept positions, through operators, casts and `static_cast`.
pub(super) fn varies(src: &str, expr: Node<'_>, uniform: &BTreeSet<String>) -> Option<String> {
    let mut why = None;
    walk(expr, &mut |n| {
        if why.is_some() {
            return false;
        }
        if let Some(kept) = kept_position(src, n) {
            if !kept {
                why = Some(format!("reads `{}`", text(src, n)));
            }
            return false;
        }
        if let Some(sub) = address_of_element(src, n) {
            // `&x[i]` is `x + i`: no read.
            why = [
                sub.child_by_field_name("argument"),
                super::super::access::index_of(sub),
            ]
            .into_iter()
            .flatten()
            .find_map(|x| varies(src, x, uniform));
            return false;
        }
        match n.kind() {
            "identifier" if !uniform.contains(text(src, n)) => {
                why = Some(format!("names `{}`", text(src, n)));
            }
            "subscript_expression" | "pointer_expression" => {
                why = Some(format!("reads memory (`{}`)", text(src, n)));
            }
            "assignment_expression" | "update_expression" => {
                why = Some(format!("assigns (`{}`)", text(src, n)));
            }
            "call_expression" => {
                let f = n.child_by_field_name("function");
                let cast = f.is_some_and(|f| {
                    f.kind() == "template_function"
                        && f.child_by_field_name("name")
                            .is_some_and(|x| text(src, x) == "static_cast")
                });
                if !cast {
                    why = Some(format!("calls `{}`", f.map_or("", |f| text(src, f))));
                } else if let Some(args) = n.child_by_field_name("arguments") {
                    why = varies(src, args, uniform);
                }
                return false;
            }
            _ => {}
        }
        why.is_none()
    });
    why
}

/// The subscript `x[i]` when `n` is `&x[i]`.
fn address_of_element<'t>(src: &str, n: Node<'t>) -> Option<Node<'t>> {
    (n.kind() == "pointer_expression"
        && n.child_by_field_name("operator").map(|o| text(src, o)) == Some("&"))
    .then(|| n.child_by_field_name("argument"))
    .flatten()
    .filter(|a| a.kind() == "subscript_expression")
}

/// The names known to be the same in every thread of a block, and why each other
/// declared name is not.
pub(super) struct Uniform {
    names: BTreeSet<String>,
    why_not: BTreeMap<String, String>,
    /// The element type of each uniform local pointer (`const float* a = ...`: `float`).
    pointee: BTreeMap<String, String>,
}

impl Uniform {
    /// Starting from the kernel's scalar and pointer parameters (`params`).
    pub fn new<'a>(params: impl IntoIterator<Item = &'a str>) -> Uniform {
        Uniform {
            names: params.into_iter().map(str::to_string).collect(),
            why_not: BTreeMap::new(),
            pointee: BTreeMap::new(),
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// The element type of `name` when it is a uniform local pointer.
    pub fn pointee(&self, name: &str) -> Option<&str> {
        self.pointee.get(name).map(String::as_str)
    }

    /// Why `name` may differ between the threads of a block, as a predicate (`reads
    /// `threadIdx.z``).
    pub fn why_not(&self, name: &str) -> String {
        match self.why_not.get(name) {
            Some(w) => w.clone(),
            None => "is not declared before the k loop from parameters and `blockIdx.z`".into(),
        }
    }

    /// Judges the declaration `d` and records its names: uniform (returns true) when
    /// every declarator is a plain name or pointer set from a value that does not vary
    /// and `assigned` does not hold the name.
    pub fn declare(&mut self, src: &str, d: Node<'_>, assigned: &BTreeSet<String>) -> bool {
        let mut c = d.walk();
        let decls: Vec<Node> = d.children_by_field_name("declarator", &mut c).collect();
        let ty = d.child_by_field_name("type").map(|t| text(src, t));
        let mut judged = Vec::new();
        for x in &decls {
            let mut name = *x;
            while let Some(inner) = name.child_by_field_name("declarator") {
                name = inner;
            }
            let name = text(src, name).to_string();
            let plain = x
                .child_by_field_name("declarator")
                .is_some_and(|n| matches!(n.kind(), "identifier" | "pointer_declarator"));
            let why = match x.child_by_field_name("value") {
                _ if assigned.contains(&name) => Some("is assigned in the loop or after it".into()),
                None => Some("has no initial value".into()),
                Some(_) if !plain => Some("is not a plain name or pointer".into()),
                Some(v) => varies(src, v, &self.names),
            };
            let pointer = x
                .child_by_field_name("declarator")
                .is_some_and(|n| n.kind() == "pointer_declarator");
            if let (true, Some(ty)) = (pointer, ty) {
                self.pointee.insert(name.clone(), ty.to_string());
            }
            judged.push((name, why));
        }
        let all = !judged.is_empty() && judged.iter().all(|(_, w)| w.is_none());
        // A declaration is kept whole: one varying declarator keeps the others per thread.
        let first_varying = judged.iter().find_map(|(n, w)| {
            w.as_ref()
                .map(|w| format!("is declared with `{n}`, which {w}"))
        });
        for (name, why) in judged {
            match why.or_else(|| first_varying.clone()) {
                Some(w) => {
                    self.pointee.remove(&name);
                    self.names.remove(&name);
                    self.why_not.insert(name, w);
                }
                None => {
                    self.why_not.remove(&name);
                    self.names.insert(name);
                }
            }
        }
        all
    }
}

#[cfg(test)]
mod tests;
