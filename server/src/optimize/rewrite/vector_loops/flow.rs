//! What flows from lane to lane around a loop, read forward through the kernel's
//! assignments in the order they are written (a name takes the taint of the value last
//! assigned to it; `+=` adds to it). Two questions use it:
//!
//! - **Lanes** (seeded by the thread positions of the loop's lanes): does the loop's
//!   bound, the uniform part of its start, a condition it runs under or a value its body
//!   reads differ from lane to lane? Then handing a lane other elements changes what they
//!   compute.
//! - **Partials** (seeded by the loop's accumulators): does a thread's partial, which
//!   now folds other elements, reach a global store before the lanes combine? Then the
//!   values written change.
//!
//! A combine ends the taint: a read of shared memory at an index the same in every lane
//! (after the block's barrier), a warp collective where the lanes are a warp's, a call of
//! a helper that meets the block's barrier (or, for a warp, a warp collective). Over the
//! grid's threads only atomics combine: a block's shared memory holds that block's
//! partials, so it carries the taint. Control flow is not followed: an estimate of data
//! flow, which verification backs.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use tree_sitter::Node;

use super::super::interleave::is_collective;
use super::super::tree::{named_children, text, walk};
use super::lanes::Form;

/// The kernel as the flow reads it.
#[derive(Clone)]
pub(super) struct Flow<'s, 't> {
    pub src: &'s str,
    pub form: Form,
    pub body: Node<'t>,
    /// The kernel's `__shared__` arrays.
    pub shared: Vec<&'s str>,
    /// The unit's helpers that meet a block barrier, and those that call a warp collective.
    pub block_helpers: BTreeSet<String>,
    pub warp_helpers: BTreeSet<String>,
    /// The kernel's locals defined once as a number (`const int TEAM = 2`).
    pub constants: BTreeMap<String, i64>,
}

/// Taint state: tainted names and (over the grid) tainted shared arrays.
#[derive(Clone, Default)]
pub(super) struct Taint {
    pub names: BTreeSet<String>,
    arrays: BTreeSet<String>,
    /// Thread positions of the lanes count as tainted.
    positions: bool,
}

impl Taint {
    pub(super) fn positions() -> Taint {
        Taint {
            positions: true,
            ..Taint::default()
        }
    }
    pub(super) fn of(names: impl IntoIterator<Item = String>) -> Taint {
        Taint {
            names: names.into_iter().collect(),
            ..Taint::default()
        }
    }
}

impl<'s, 't> Flow<'s, 't> {
    /// Run the assignments whose start lies in `range`, in order; `store` sees each
    /// non-atomic store to global memory with whether its value or address is tainted.
    pub(super) fn run(
        &self,
        mut t: Taint,
        range: Range<usize>,
        store: &mut dyn FnMut(Node<'t>, bool),
    ) -> Taint {
        let mut events = Vec::new();
        walk(self.body, &mut |n| {
            if range.contains(&n.start_byte())
                && matches!(n.kind(), "assignment_expression" | "init_declarator")
            {
                events.push(n);
            }
            true
        });
        for n in events {
            self.event(&mut t, n, store);
        }
        t
    }

    fn event(&self, t: &mut Taint, n: Node<'t>, store: &mut dyn FnMut(Node<'t>, bool)) {
        let src = self.src;
        let (left, value) = match n.kind() {
            "init_declarator" => (
                n.child_by_field_name("declarator"),
                n.child_by_field_name("value"),
            ),
            _ => (
                n.child_by_field_name("left"),
                n.child_by_field_name("right"),
            ),
        };
        let (Some(mut left), Some(value)) = (left, value) else {
            return;
        };
        // `const float* xr = ...` declares `xr`.
        while left.kind() == "pointer_declarator" {
            match left.child_by_field_name("declarator") {
                Some(d) => left = d,
                None => return,
            }
        }
        let compound = n.kind() == "assignment_expression"
            && n.child_by_field_name("operator").map(|o| text(src, o)) != Some("=");
        let combined = self.combines(value);
        let tainted = !combined && (self.tainted(t, value) || (compound && self.tainted(t, left)));
        match left.kind() {
            "identifier" => {
                let name = text(src, left).to_string();
                match tainted {
                    true => t.names.insert(name),
                    false => t.names.remove(&name),
                };
            }
            "subscript_expression" | "pointer_expression" => {
                let array = left
                    .child_by_field_name("argument")
                    .map_or("", |a| text(src, a));
                if self.shared.contains(&array) {
                    if self.form.spans_blocks() && tainted {
                        t.arrays.insert(array.to_string());
                    }
                } else {
                    let at = self.tainted(t, left);
                    store(left, tainted || at);
                }
            }
            _ => {}
        }
    }

    /// Does `n` read a tainted name, a tainted shared array or (seeded so) a lane's
    /// position?
    pub(super) fn tainted(&self, t: &Taint, n: Node<'_>) -> bool {
        let src = self.src;
        let mut hit = false;
        walk(n, &mut |x| {
            if hit {
                return false;
            }
            match x.kind() {
                "identifier" => hit = t.names.contains(text(src, x)),
                "subscript_expression" => {
                    let a = x
                        .child_by_field_name("argument")
                        .map_or("", |a| text(src, a));
                    hit = t.arrays.contains(a);
                }
                "binary_expression" if t.positions && self.group_index(x) => return false,
                "field_expression" if t.positions => hit = self.lane_position(text(src, x)),
                _ => {}
            }
            !hit
        });
        hit
    }

    /// `threadIdx.x` (over the grid `blockIdx.x`, over a team the block index that
    /// tells its blocks apart).
    fn lane_position(&self, field: &str) -> bool {
        let f: String = field.chars().filter(|c| !c.is_whitespace()).collect();
        f == "threadIdx.x"
            || match self.form {
                Form::Grid => f == "blockIdx.x",
                Form::Team(t) => f == format!("blockIdx.{}", t.axis),
                _ => false,
            }
    }

    /// The index of the group of lanes, the same in every lane: over a warp's lanes the
    /// warp's index (`threadIdx.x / 32`, `>> 5`), over a team of K blocks the team's
    /// (`blockIdx.x / K`).
    fn group_index(&self, n: Node<'_>) -> bool {
        let op = n.child_by_field_name("operator").map(|o| o.kind());
        let side = |f: &str| {
            n.child_by_field_name(f).map_or(String::new(), |r| {
                text(self.src, r).split_whitespace().collect()
            })
        };
        let right = side("right");
        match self.form {
            Form::Warp => matches!(
                (op, right.as_str()),
                (Some("/"), "32" | "warpSize") | (Some(">>"), "5")
            ),
            Form::Team(t) => {
                op == Some("/")
                    && side("left") == format!("blockIdx.{}", t.axis)
                    && t.blocks.is_some_and(|k| {
                        right == k.to_string() || self.constants.get(&right) == Some(&k)
                    })
            }
            _ => false,
        }
    }

    /// Does `value` combine the lanes (see the module's paragraph)?
    fn combines(&self, value: Node<'_>) -> bool {
        let src = self.src;
        let mut hit = false;
        walk(value, &mut |x| {
            if hit || x.kind() != "call_expression" {
                return !hit;
            }
            let f = x
                .child_by_field_name("function")
                .map_or("", |f| text(src, f));
            hit = match self.form {
                Form::Grid | Form::Team(_) => false,
                Form::Block => self.block_helpers.contains(f),
                Form::Warp => {
                    is_collective(f)
                        || self.block_helpers.contains(f)
                        || self.warp_helpers.contains(f)
                }
            };
            !hit
        });
        hit
    }
}

/// The helpers among `funcs` (the unit's functions but the kernel) that meet a block
/// barrier, and those that call a warp collective.
pub(super) fn helpers(src: &str, funcs: &[Node<'_>]) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut block, mut warp) = (BTreeSet::new(), BTreeSet::new());
    for f in funcs {
        let Some(name) = function_name(src, *f) else {
            continue;
        };
        let mut calls = BTreeSet::new();
        walk(*f, &mut |n| {
            if n.kind() == "call_expression" {
                if let Some(c) = n.child_by_field_name("function") {
                    calls.insert(text(src, c).to_string());
                }
            }
            true
        });
        if calls
            .iter()
            .any(|c| c == "__syncthreads" || c.ends_with("::sync"))
        {
            block.insert(name);
        } else if calls.iter().any(|c| is_collective(c)) {
            warp.insert(name);
        }
    }
    (block, warp)
}

fn function_name(src: &str, f: Node<'_>) -> Option<String> {
    let mut d = f.child_by_field_name("declarator")?;
    while d.kind() != "function_declarator" {
        d = d
            .child_by_field_name("declarator")
            .or_else(|| named_children(d).into_iter().next())?;
    }
    let name = d.child_by_field_name("declarator")?;
    Some(text(src, name).to_string())
}
