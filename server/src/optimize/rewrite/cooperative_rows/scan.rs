//! A running sum that a column loop reads after adding to it (a prefix sum), scanned by the
//! warp that shares the row. The loop walks the row 32 columns at a time, every lane
//! taking the same number of turns (the condition reads the chunk's first column, so the
//! warp stays together for the shuffles); in each turn the lanes whose column exists
//! (`__ballot_sync`) add their terms with an inclusive `__shfl_up_sync` scan onto the
//! running value carried from the previous turn, run the rest of the author's body with
//! it, and the last such lane's value becomes every lane's carry (`__shfl_sync`). After
//! the loop every lane holds the row's total, as the author's single thread did.

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::super::edits::Edit;
use super::super::tree::{fresh, line_indent, reindent, text, walk};
use super::ColumnLoop;

/// The edits of one column loop with running sums: its condition made uniform over the
/// warp, and its body wrapped and given the scans. The loop's start and step are the
/// warp team's usual edits (made by the caller).
pub(super) fn loop_edits(
    src: &str,
    l: &ColumnLoop<'_>,
    lane: &str,
    unit: &str,
    nl: &str,
    names: &mut BTreeSet<String>,
) -> Result<Vec<Edit>, String> {
    let (cond, body) = super::tiles::for_parts(l)?;
    let lane_term = match l.step {
        1 => lane.to_string(),
        s => format!("{s} * {lane}"),
    };
    let mut edits = Vec::new();
    walk(cond, &mut |n| {
        if n.kind() == "identifier" && text(src, n) == l.var {
            edits.push(Edit::replace(
                n.byte_range(),
                format!("({} - {lane_term})", l.var),
            ));
        }
        true
    });
    let mask = fresh("active", names);
    let ind = line_indent(src, l.node.start_byte()).to_string();
    let i1 = format!("{ind}{unit}");
    let inner = scanned_body(src, l, body, &mask, lane, unit, nl, names)?;
    let inner = reindent(
        inner.trim_start_matches(['\n', '\r']).trim_end(),
        &i1,
        &format!("{i1}{unit}"),
    );
    let c = text(src, cond);
    let mut out = format!("{{{nl}{i1}unsigned {mask} = __ballot_sync(0xffffffff, {c});");
    out.push_str(&format!(
        "{nl}{i1}if ({c}) {{{nl}{i1}{unit}{}",
        inner.trim_start()
    ));
    out.push_str(&format!("{nl}{i1}}}"));
    for acc in l.accs.iter().filter(|a| a.prefix.is_some()) {
        out.push_str(&format!(
            "{nl}{i1}{n} = __shfl_sync(0xffffffff, {n}, 31 - __clz({mask}));",
            n = acc.name
        ));
    }
    out.push_str(&format!("{nl}{ind}}}"));
    edits.push(Edit::replace(body.byte_range(), out));
    Ok(edits)
}

/// The body's statements (inside its braces) with each running sum's update made a warp
/// scan of the lanes' terms.
#[allow(clippy::too_many_arguments)]
fn scanned_body(
    src: &str,
    l: &ColumnLoop<'_>,
    body: Node<'_>,
    mask: &str,
    lane: &str,
    unit: &str,
    nl: &str,
    names: &mut BTreeSet<String>,
) -> Result<String, String> {
    let start = body.start_byte() + 1;
    let end = body.end_byte().saturating_sub(1).max(start);
    let mut spots: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    for acc in &l.accs {
        let Some((range, term)) = &acc.prefix else {
            continue;
        };
        let ty = acc
            .ty
            .as_deref()
            .ok_or_else(|| format!("the type of `{}` is not declared in the row body", acc.name))?;
        let sind = line_indent(src, range.start);
        let (v, u, o) = (
            fresh(&format!("{}_add", acc.name), names),
            fresh("up", names),
            fresh("offset", names),
        );
        let code = [
            format!(
                "{{ // `{}` over the warp: each lane's term after every lower lane's",
                acc.name
            ),
            format!("{sind}{unit}{ty} {v} = {term};"),
            format!("{sind}{unit}for (int {o} = 1; {o} < 32; {o} *= 2) {{"),
            format!("{sind}{unit}{unit}{ty} {u} = __shfl_up_sync({mask}, {v}, {o});"),
            format!("{sind}{unit}{unit}if ({lane} >= {o}) {v} += {u};"),
            format!("{sind}{unit}}}"),
            format!("{sind}{unit}{} += {v};", acc.name),
            format!("{sind}}}"),
        ]
        .join(nl);
        spots.push((range.clone(), code));
    }
    spots.sort_by_key(|(r, _)| std::cmp::Reverse(r.start));
    let mut out = src[start..end].to_string();
    for (r, code) in spots {
        if r.start < start || r.end > end {
            return Err("a running sum's update is outside the loop's braces".into());
        }
        out.replace_range(r.start - start..r.end - start, &code);
    }
    Ok(out)
}
