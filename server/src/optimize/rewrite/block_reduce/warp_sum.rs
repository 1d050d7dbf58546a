//! A warp's shuffle sum before one lane's atomic: `for (int off = 16; off > 0; off >>= 1)
//! v += __shfl_down_sync(0xffffffff, v, off);` then `if (lane == 0) atomicAdd(out, v);`
//! adds to `out` the sum of the warp's `v`s, which is what every lane's own
//! `atomicAdd(out, v)` adds: `block_reduce` reads the pair as that per-element atomic
//! (whole warps: its block check). Also the warp collectives it cannot read that way,
//! which a grid-stride loop cannot hold (lanes leave it at different trips).

use tree_sitter::Node;

use super::super::tree::{named_children, one_line, text, walk};

/// The author's warp sum: the shuffle loop (dropped) and the lane's `if` around the atomic
/// (which becomes the fold into the thread's accumulator).
pub(super) struct WarpSum<'t> {
    pub shuffles: Node<'t>,
    pub lane_if: Node<'t>,
}

/// The warp sum among the per-element statements `stmts` that feeds `atomic` (an
/// `atomicAdd` whose value is the summed variable), if the statements hold one.
pub(super) fn warp_sum<'t>(
    src: &str,
    body: Node<'t>,
    stmts: &[Node<'t>],
    atomic: Node<'t>,
    value: Node<'t>,
) -> Option<WarpSum<'t>> {
    if value.kind() != "identifier" {
        return None;
    }
    let v = text(src, value);
    let lane_if = lane_if(src, body, stmts, atomic)?;
    let at = stmts.iter().position(|s| s.id() == lane_if.id())?;
    let shuffles = stmts[..at]
        .iter()
        .rev()
        .find(|s| shuffle_sum(src, **s).as_deref() == Some(v))?;
    Some(WarpSum {
        shuffles: *shuffles,
        lane_if,
    })
}

/// The statement of `stmts` that is `if (<lane 0 of the warp>) atomic;` (braces allowed,
/// no `else`).
fn lane_if<'t>(
    src: &str,
    body: Node<'t>,
    stmts: &[Node<'t>],
    atomic: Node<'t>,
) -> Option<Node<'t>> {
    let stmt = atomic
        .parent()
        .filter(|p| p.kind() == "expression_statement")?;
    let mut up = stmt.parent()?;
    if up.kind() == "compound_statement" && named_children(up).len() == 1 {
        up = up.parent()?;
    }
    if up.kind() != "if_statement" || up.child_by_field_name("alternative").is_some() {
        return None;
    }
    let cond = up.child_by_field_name("condition")?;
    (stmts.iter().any(|s| s.id() == up.id()) && first_lane(src, body, cond)).then_some(up)
}

/// Whether `cond` holds for exactly the first lane of each warp: `threadIdx.x % 32 == 0`,
/// `(threadIdx.x & 31) == 0`, `% warpSize`, `!(...)`, or a local holding the lane
/// (`int lane = threadIdx.x % 32;`, declared in `body`) compared with 0.
fn first_lane(src: &str, body: Node<'_>, cond: Node<'_>) -> bool {
    let c = one_line(text(src, cond));
    let c = c.trim_start_matches('(').trim_end_matches(')').trim();
    let lane = c
        .strip_suffix("== 0")
        .or_else(|| c.strip_prefix("0 =="))
        .or_else(|| c.strip_prefix('!'))
        .map(|e| {
            e.trim()
                .trim_start_matches('(')
                .trim_end_matches(')')
                .trim()
        });
    let Some(lane) = lane else {
        return false;
    };
    is_lane(lane) || lane_local(src, body, lane)
}

/// `threadIdx.x % 32`, `threadIdx.x & 31`, `threadIdx.x % warpSize` (spaces ignored).
fn is_lane(e: &str) -> bool {
    let e: String = e
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '(' && *c != ')')
        .collect();
    matches!(
        e.as_str(),
        "threadIdx.x%32" | "threadIdx.x&31" | "threadIdx.x%warpSize" | "threadIdx.x&(warpSize-1)"
    )
}

/// Whether `name` is declared once in `body`, as the lane, and never assigned.
fn lane_local(src: &str, body: Node<'_>, name: &str) -> bool {
    let mut lane = 0;
    let mut other = false;
    walk(body, &mut |n| {
        match n.kind() {
            "init_declarator" => {
                let d = n.child_by_field_name("declarator").map(|d| text(src, d));
                if d == Some(name) {
                    let v = n.child_by_field_name("value").map(|v| text(src, v));
                    if v.is_some_and(is_lane) {
                        lane += 1;
                    } else {
                        other = true;
                    }
                }
            }
            "assignment_expression" | "update_expression" => {
                let t = n
                    .child_by_field_name("left")
                    .or_else(|| n.child_by_field_name("argument"));
                other |= t.is_some_and(|t| text(src, t) == name);
            }
            _ => {}
        }
        true
    });
    lane == 1 && !other
}

/// The variable a statement sums over the warp, when it is `for (int o = 16; o > 0; o
/// >>= 1) v += __shfl_down_sync(FULL, v, o);` (`__shfl_xor_sync`, `o /= 2`, `o >= 1`,
/// braces, `v = v + ...` allowed).
fn shuffle_sum(src: &str, s: Node<'_>) -> Option<String> {
    if s.kind() != "for_statement" {
        return None;
    }
    let o = loop_offset(src, s)?;
    let mut b = s.child_by_field_name("body")?;
    if b.kind() == "compound_statement" {
        let [only] = named_children(b)[..] else {
            return None;
        };
        b = only;
    }
    let stmt = one_line(text(src, b));
    let stmt = stmt.strip_suffix(';')?.trim();
    let (v, rest) = stmt.split_once("+=").map_or_else(
        || {
            let (v, r) = stmt.split_once('=')?;
            let r = r.trim().strip_prefix(v.trim())?.trim().strip_prefix('+')?;
            Some((v.trim(), r.trim()))
        },
        |(v, r)| Some((v.trim(), r.trim())),
    )?;
    let call = rest
        .strip_prefix("__shfl_down_sync(")
        .or_else(|| rest.strip_prefix("__shfl_xor_sync("))?
        .strip_suffix(')')?;
    let args: Vec<&str> = call.split(',').map(str::trim).collect();
    let full = matches!(
        args.first().copied(),
        Some("0xffffffff" | "0xffffffffu" | "0xFFFFFFFF" | "0xFFFFFFFFu")
    );
    (full && args.len() == 3 && args[1] == v && args[2] == o).then(|| v.to_string())
}

/// The offset variable of `for (int o = 16; o > 0; o >>= 1)` (or `warpSize / 2`, `o >= 1`,
/// `o /= 2`, `o = o / 2`).
fn loop_offset(src: &str, s: Node<'_>) -> Option<String> {
    let init = one_line(text(src, s.child_by_field_name("initializer")?));
    let init = init.trim_end_matches(';').trim();
    let (lhs, start) = init.split_once('=')?;
    let o = lhs.split_whitespace().last()?.to_string();
    if !matches!(start.trim(), "16" | "warpSize / 2" | "warpSize/2") {
        return None;
    }
    let cond = one_line(text(src, s.child_by_field_name("condition")?));
    let update = one_line(text(src, s.child_by_field_name("update")?));
    let halves = [
        format!("{o} >>= 1"),
        format!("{o} /= 2"),
        format!("{o} = {o} / 2"),
        format!("{o} = {o} >> 1"),
    ];
    let ok = [format!("{o} > 0"), format!("{o} >= 1")].contains(&cond) && halves.contains(&update);
    ok.then_some(o)
}

/// The first warp or block collective under `stmts`, by name: in a grid-stride loop the
/// lanes of a warp leave at different trips, so none may stay inside it.
pub(super) fn collective(src: &str, stmts: &[Node<'_>]) -> Option<String> {
    let mut found = None;
    for s in stmts {
        walk(*s, &mut |n| {
            if n.kind() == "call_expression" {
                let f = n.child_by_field_name("function").map(|f| text(src, f));
                if let Some(f) = f.filter(|f| is_collective(f)) {
                    found.get_or_insert_with(|| f.to_string());
                }
            }
            found.is_none()
        });
    }
    found
}

fn is_collective(f: &str) -> bool {
    [
        "__shfl",
        "__ballot",
        "__any_sync",
        "__all_sync",
        "__match",
        "__reduce_",
        "__syncwarp",
        "__syncthreads",
        "__activemask",
    ]
    .iter()
    .any(|p| f.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::is_lane;

    #[test]
    fn the_first_lane_of_a_warp_is_written_several_ways() {
        assert!(is_lane("threadIdx.x % 32"));
        assert!(is_lane("(threadIdx.x & 31)"));
        assert!(is_lane("threadIdx.x % warpSize"));
        assert!(!is_lane("threadIdx.x % 16"));
        assert!(!is_lane("threadIdx.x"));
    }
}
