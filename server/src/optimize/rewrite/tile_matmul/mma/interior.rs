//! Whether a whole stage tile of the tensor-core candidate passes the author's bounds
//! check, decided once per tile from its corners, so that interior tiles copy without a
//! check per element and only edge tiles evaluate the author's bounds element by element.
//!
//! A conjunct qualifies when it compares one index itself (the tile's row or column, or
//! the k loop's variable) with an expression that names no index (`row < m`, `!(col >=
//! n)`, `i <= k - 1`, `0 <= row`), or names no index at all (`n > 0`): such a bound holds
//! over a range of the index when it holds at the range's end it bounds. Any other
//! conjunct (`row % 2 == 0`, `2 * row < m`, `i < row`) leaves the tile checked element by
//! element, as before. Pure: text in, text out.

use crate::document::Document;
use crate::syntax::Lang;

use super::super::super::tree::{named_children, text, walk};

/// Which end of an index's range a conjunct bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Bound {
    /// `idx < e`, `idx <= e` (or the same negated from `>=`, `>`): checked at the last.
    Upper,
    /// `idx > e`, `idx >= e`: checked at the first.
    Lower,
    /// Names no index: the same over the whole tile.
    Free,
}

/// One index of a tile: its type and name as the author declared it, and its first and
/// last values over the tile (C expressions).
pub(super) struct Span<'a> {
    pub ty: &'a str,
    pub name: &'a str,
    pub first: String,
    pub last: String,
}

/// Whether `s` names `name` as a whole word.
fn mentions(s: &str, name: &str) -> bool {
    s.split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
        .any(|w| w == name)
}

/// How `conj` bounds `idx`; `None` where it is not a comparison of `idx` itself with an
/// expression naming none of `others` nor `idx` (nor names none of them at all).
pub(super) fn bound_of(conj: &str, idx: &str, others: &[&str]) -> Option<Bound> {
    let names_any = |s: &str| mentions(s, idx) || others.iter().any(|o| mentions(s, o));
    if !names_any(conj) {
        return Some(Bound::Free);
    }
    let doc = Document::new(Lang::Cuda, 0, &format!("bool f() {{ return {conj}; }}"));
    let tree = doc.tree()?;
    let src = doc.text();
    let mut ret = None;
    walk(tree.root_node(), &mut |n| {
        if n.kind() == "return_statement" && ret.is_none() {
            ret = named_children(n).into_iter().next();
        }
        ret.is_none()
    });
    let mut e = ret?;
    let mut negated = false;
    loop {
        match e.kind() {
            "parenthesized_expression" => e = named_children(e).into_iter().next()?,
            "unary_expression"
                if e.child_by_field_name("operator").map(|o| text(src, o)) == Some("!") =>
            {
                negated = !negated;
                e = e.child_by_field_name("argument")?;
            }
            _ => break,
        }
    }
    if e.kind() != "binary_expression" {
        return None;
    }
    let op = text(src, e.child_by_field_name("operator")?);
    let (l, r) = (
        text(src, e.child_by_field_name("left")?),
        text(src, e.child_by_field_name("right")?),
    );
    let bare = |s: &str| {
        s.trim()
            .trim_start_matches('(')
            .trim_end_matches(')')
            .trim()
            == idx
    };
    let upper_when_left = match op {
        "<" | "<=" => true,
        ">" | ">=" => false,
        _ => return None,
    };
    let upper = if bare(l) && !names_any(r) {
        upper_when_left
    } else if bare(r) && !names_any(l) {
        !upper_when_left
    } else {
        return None;
    };
    Some(if upper != negated {
        Bound::Upper
    } else {
        Bound::Lower
    })
}

/// The lines that set `flag` to whether every element of the tile spanned by `spans`
/// passes every conjunct of `conds`: upper bounds tested at each span's last value, lower
/// ones at its first. `None` where a conjunct is not such a bound (or names two indices).
pub(super) fn interior_test(
    conds: &[String],
    spans: &[Span<'_>],
    flag: &str,
) -> Option<Vec<String>> {
    let mut upper: Vec<(&str, Option<usize>)> = Vec::new();
    let mut lower: Vec<(&str, Option<usize>)> = Vec::new();
    for c in conds {
        let named: Vec<usize> = (0..spans.len())
            .filter(|&i| mentions(c, spans[i].name))
            .collect();
        match named.as_slice() {
            [] => upper.push((c, None)),
            [i] => {
                let others: Vec<&str> = spans
                    .iter()
                    .map(|s| s.name)
                    .filter(|n| *n != spans[*i].name)
                    .collect();
                match bound_of(c, spans[*i].name, &others)? {
                    Bound::Lower => lower.push((c, Some(*i))),
                    _ => upper.push((c, Some(*i))),
                }
            }
            _ => return None,
        }
    }
    let mut lines = vec![format!("bool {flag} = true;")];
    for (group, at_last) in [(upper, true), (lower, false)] {
        if group.is_empty() {
            continue;
        }
        let mut decls = String::new();
        for (i, s) in spans.iter().enumerate() {
            if group.iter().any(|(_, n)| *n == Some(i)) {
                let v = if at_last { &s.last } else { &s.first };
                decls.push_str(&format!("{} {} = {v}; ", s.ty, s.name));
            }
        }
        let test: Vec<String> = group.iter().map(|(c, _)| format!("({c})")).collect();
        lines.push(format!(
            "{{ {decls}{flag} = {flag} && {}; }}",
            test.join(" && ")
        ));
    }
    Some(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_of_the_index_itself_bound_one_end_and_others_bound_none() {
        let b = |c: &str| bound_of(c, "row", &["i"]);
        assert_eq!(b("row < m"), Some(Bound::Upper));
        assert_eq!(b("(row) <= m - 1"), Some(Bound::Upper));
        assert_eq!(b("m > row"), Some(Bound::Upper));
        assert_eq!(b("!(row >= m)"), Some(Bound::Upper));
        assert_eq!(b("!(!(row < m))"), Some(Bound::Upper));
        assert_eq!(b("row >= 0"), Some(Bound::Lower));
        assert_eq!(b("0 <= row"), Some(Bound::Lower));
        assert_eq!(b("!(row < lo)"), Some(Bound::Lower));
        assert_eq!(b("m > 0"), Some(Bound::Free));
        assert_eq!(b("2 * row < m"), None);
        assert_eq!(b("row % 2 == 0"), None);
        assert_eq!(b("row != m"), None);
        assert_eq!(b("row < i"), None);
        assert_eq!(b("row < row_end"), Some(Bound::Upper));
    }

    #[test]
    fn a_tile_is_interior_when_its_corners_pass_and_unknown_bounds_leave_it_checked() {
        let spans = [
            Span {
                ty: "int",
                name: "row",
                first: "blockIdx.y * 64".into(),
                last: "blockIdx.y * 64 + 63".into(),
            },
            Span {
                ty: "unsigned",
                name: "i",
                first: "k0".into(),
                last: "k0 + 31".into(),
            },
        ];
        let conds = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let lines = interior_test(
            &conds(&["!(row >= m)", "n > 0", "row >= lo", "i < k"]),
            &spans,
            "inside",
        );
        assert_eq!(
            lines.map(|l| l.join("\n")).as_deref(),
            Some(
                "bool inside = true;\n\
                 { int row = blockIdx.y * 64 + 63; unsigned i = k0 + 31; inside = inside && (!(row >= m)) && (n > 0) && (i < k); }\n\
                 { int row = blockIdx.y * 64; inside = inside && (row >= lo); }"
            )
        );
        assert!(interior_test(&conds(&["row % 2 == 0", "i < k"]), &spans, "inside").is_none());
        assert!(interior_test(&conds(&["row < m", "i < row"]), &spans, "inside").is_none());
    }
}
