//! A cluster team's split of a loop nest. When a row's column loop sits in a loop that
//! every lane runs (`for (n ...) for (p = lane; p < HW; p += C * blockDim.x)`, NCHW
//! channel statistics), a cluster of C blocks spreads only the inner loop over its lanes:
//! with a short inner loop each lane takes one or two columns per outer trip, so a thread
//! keeps one or two loads in flight and runs the outer loop's every trip. Here the
//! cluster's blocks share the outer loop instead (`n = rank; n < N; n += C`) and each
//! block's threads share the inner one (`p = threadIdx.x; p += blockDim.x`): the same
//! elements, each once, in longer inner loops the compiler unrolls.
//!
//! [`find`] reads which outer loop may be split this way: the loop right around the column
//! loop, counted, with no other column loop in it, no statement one lane runs (a write),
//! and no assignment to a name declared outside it, so that which block runs a trip
//! changes nothing but which lanes add into the accumulators (combined over the whole
//! cluster after the outer loop). [`across_blocks`] decides from case 0's trip counts.

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::super::access::Scope;
use super::super::check::case_int;
use super::super::edits::Edit;
use super::super::tree::{declared_in, text, walk};
use super::{column_header, ColumnLoop};
use crate::spec::BenchPlan;

/// The loop around a column loop that a cluster's blocks can share.
pub(super) struct Nest<'t> {
    pub node: Node<'t>,
    pub var: String,
    pub init: Node<'t>,
    pub step: i64,
    pub update: Node<'t>,
    /// Case 0's trip counts of this loop and of the column loop inside it.
    pub trips: u64,
    pub column_trips: u64,
}

/// Whether a cluster of `blocks` blocks of `threads` should share the outer loop of `trips`
/// trips among its blocks and the column loop of `column_trips` among each block's
/// threads, rather than the column loop among all its lanes. Every block must get an
/// outer trip; then the split wins where it keeps the lanes as evenly busy
/// ([`balance`]) as sharing the column loop would, or where the whole cluster's lanes
/// would take fewer than 4 columns each (too few loads in flight a thread) and the
/// blocks stay three quarters busy. Both ways a thread does the same work; the split's
/// inner loop is the longer, so it unrolls and vectorizes.
pub(super) fn across_blocks(trips: u64, column_trips: u64, blocks: u64, threads: u64) -> bool {
    let lanes = blocks.saturating_mul(threads).max(1);
    if trips < blocks || column_trips == 0 {
        return false;
    }
    let split = balance(trips, blocks);
    let shared = balance(column_trips, lanes);
    split >= shared || (column_trips.div_ceil(lanes) < 4 && split >= 0.75)
}

/// How busy `workers` sharing `items` round-robin keep on average: the items over what
/// the busiest worker's share would take from all of them (1 when they divide evenly).
fn balance(items: u64, workers: u64) -> f64 {
    let workers = workers.max(1);
    items as f64 / (workers * items.div_ceil(workers)) as f64
}

/// The loop right around column loop `i` that a cluster's blocks may share, with case 0's
/// trip counts; None where there is none (see the module doc).
pub(super) fn find<'t>(
    scope: &Scope<'_, 't>,
    spec: &BenchPlan,
    loops: &[ColumnLoop<'t>],
    i: usize,
    lane0: &[Node<'t>],
) -> Option<Nest<'t>> {
    let src = scope.src;
    let l = loops.get(i)?;
    let outer = enclosing_loop(l.node)?;
    let (var, init, step, update, _) = column_header(scope, outer, &[]).ok()??;
    let inside =
        |n: Node<'_>| n.start_byte() >= outer.start_byte() && n.end_byte() <= outer.end_byte();
    let others_inside = loops
        .iter()
        .enumerate()
        .any(|(j, m)| j != i && inside(m.node));
    if others_inside || lane0.iter().any(|s| inside(*s)) {
        return None;
    }
    let body = outer.child_by_field_name("body")?;
    if assigns_outside_names(src, body, l.node, &var) {
        return None;
    }
    let case = spec.cases.first()?;
    let trips = trip_count(src, case, outer, text(src, init), step)?;
    let column_trips = trip_count(src, case, l.node, text(src, l.init), l.step)?;
    Some(Nest {
        node: outer,
        var,
        init,
        step,
        update,
        trips,
        column_trips,
    })
}

/// The nearest `for` loop around `n`.
fn enclosing_loop(n: Node<'_>) -> Option<Node<'_>> {
    let mut up = n.parent();
    while let Some(p) = up {
        match p.kind() {
            "for_statement" => return Some(p),
            "while_statement" | "do_statement" | "function_definition" => return None,
            _ => up = p.parent(),
        }
    }
    None
}

/// Whether `body` (outside the column loop `skip`) assigns a name it does not declare
/// (other than its loop's own `var`), or assigns through anything but a name.
fn assigns_outside_names(src: &str, body: Node<'_>, skip: Node<'_>, var: &str) -> bool {
    let locals: BTreeSet<String> = declared_in(src, body);
    let mut bad = false;
    walk(body, &mut |n| {
        if n.id() == skip.id() || bad {
            return false;
        }
        let target = match n.kind() {
            "assignment_expression" => n.child_by_field_name("left"),
            "update_expression" => n.child_by_field_name("argument"),
            _ => None,
        };
        if let Some(t) = target {
            let name = text(src, t);
            bad = t.kind() != "identifier" || (name != var && !locals.contains(name));
        }
        !bad
    });
    bad
}

/// Case 0's trip count of the counted loop `l` starting at `init` and stepping `step`:
/// its condition `var < B` or `var <= B` with B and `init` literals or scalar arguments.
fn trip_count(
    src: &str,
    case: &crate::spec::Case,
    l: Node<'_>,
    init: &str,
    step: i64,
) -> Option<u64> {
    let cond = l.child_by_field_name("condition")?;
    let (op, bound) = (
        cond.child_by_field_name("operator")?,
        cond.child_by_field_name("right")?,
    );
    let extra = match text(src, op) {
        "<" => 0,
        "<=" => 1,
        _ => return None,
    };
    let span = case_int(case, text(src, bound))? + extra - case_int(case, init)?;
    let step = u64::try_from(step).ok().filter(|s| *s > 0)?;
    Some(u64::try_from(span.max(0)).ok()?.div_ceil(step))
}

/// The edits that give the nest loop's trips to the cluster's blocks in turn: block rank
/// `r` of `blocks` starts at trip `r` and steps `blocks` trips.
pub(super) fn edits(src: &str, n: &Nest<'_>, blocks: u64) -> [Edit; 2] {
    let rank = format!("blockIdx.x % {blocks}");
    let rank = if n.step == 1 {
        rank
    } else {
        format!("{} * ({rank})", n.step)
    };
    let init = text(src, n.init).trim();
    let init = match init {
        "0" => rank,
        _ if init.contains(char::is_whitespace) => format!("({init}) + {rank}"),
        _ => format!("{init} + {rank}"),
    };
    let stride = i64::try_from(blocks).map_or(i64::MAX, |b| n.step.saturating_mul(b));
    [
        Edit::replace(n.init.byte_range(), init),
        Edit::replace(n.update.byte_range(), format!("{} += {stride}", n.var)),
    ]
}
