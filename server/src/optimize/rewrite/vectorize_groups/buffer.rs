//! One buffer's accesses as aligned groups, or why not: every access `p[e + c]` with `e`
//! a proved multiple of k (see `partition.rs`), each group complete and reached
//! whenever the region runs, a written buffer's groups surely apart, and each group's
//! address readable where its first access is.

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::super::access::{unconditional, Access, Scope};
use super::super::poly::{Poly, VarNames};
use super::super::tree::{first_line, text, walk};
use super::super::vectorize::{element_bytes, Lanes};
use super::partition::{by_start, sizes, step, surely_apart};
use super::region::Region;
use super::{compound, plain_statement, Group, Place};

/// What the grouping reads besides the accesses.
pub(super) struct Ctx<'a, 't> {
    pub src: &'a str,
    pub region: &'a Region<'t>,
    pub names: &'a VarNames<'t>,
}

/// An access and its address polynomial, when it is one the analysis can follow.
pub(super) type Placed<'a, 't> = (&'a Access<'t>, Option<Poly>);

/// One buffer's accesses (`(name, pointee)`) as groups, or why not.
pub(super) fn buffer_groups<'t>(
    cx: &Ctx<'_, 't>,
    (p, pointee): (&str, &str),
    list: &[Placed<'_, 't>],
    other: Option<&String>,
) -> Result<Vec<Group<'t>>, String> {
    let src = cx.src;
    if let Some(use_) = other {
        return Err(format!(
            "`{p}` is also used other than as an element ({use_})"
        ));
    }
    let shown = |a: &Access<'_>| first_line(text(src, a.node)).to_string();
    let mut addrs = Vec::new();
    for (a, e) in list {
        match e {
            Some(e) => addrs.push(e),
            None => return Err(format!(
                "`{}` is not an integer address the analysis can follow (a call, a float), and other accesses of `{p}` are",
                shown(a)
            )),
        }
    }
    let g = addrs
        .iter()
        .fold(0, |g, e| super::partition::gcd(g, step(e)));
    if g < 2 {
        let widest = addrs.iter().map(|e| step(e)).max().unwrap_or(0);
        let (a, s) = list
            .iter()
            .zip(&addrs)
            .map(|((a, _), e)| (a, step(e)))
            .find(|(_, s)| *s == 0 || widest % s != 0 || *s < widest)
            .unwrap_or((&list[0].0, 1));
        return Err(format!(
            "`{}` steps by {s} where another access of `{p}` steps by {widest}: `{p}` is also accessed outside its groups",
            shown(a)
        ));
    }
    let ks: Vec<usize> = sizes(g)
        .into_iter()
        .filter(|k| Lanes::of(pointee, *k).is_some())
        .collect();
    if ks.is_empty() {
        return Err(format!(
            "`{p}` is `{pointee}*` in groups of {g}: {} bytes with no vector type and no 8- or 16-byte packing",
            element_bytes(pointee).map_or("unknown".into(), |b| (b * g as usize).to_string())
        ));
    }
    let mut first_err = None;
    for k in ks {
        match complete(cx, p, list, &addrs, k) {
            Ok(parts) => return groups_of(cx, (p, pointee), list, parts, k),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    Err(first_err.unwrap_or_default())
}

/// Group start and members (position in the list, lane).
type Part = (Poly, Vec<(usize, i64)>);

/// The accesses in groups of k, each group complete and each of its lanes reached
/// whenever the region runs; or why not.
fn complete(
    cx: &Ctx<'_, '_>,
    p: &str,
    list: &[Placed<'_, '_>],
    addrs: &[&Poly],
    k: usize,
) -> Result<Vec<Part>, String> {
    let parts = by_start(addrs, k as i64);
    let shown = |n: usize| first_line(text(cx.src, list[n].0.node)).to_string();
    for (_, members) in &parts {
        let seen: BTreeSet<i64> = members.iter().map(|(_, c)| *c).collect();
        if seen.len() != k {
            let have: Vec<String> = seen.iter().map(|c| c.to_string()).collect();
            let straddle = match parts.len() > 1 {
                true => " (the accesses straddle groups: overlapping or misaligned)",
                false => "",
            };
            return Err(format!(
                "`{p}`'s groups of {k} are incomplete: only offset(s) {} of 0..{} are accessed by the group of `{}`{straddle}, and a vector access would touch the rest",
                have.join(", "),
                k - 1,
                shown(members[0].0)
            ));
        }
        // The vector access must reach nothing the kernel might not: each offset is
        // reached whenever the body runs (an odd tail's `if (2 * i + 1 < m) x[2 * i + 1]`).
        if let Some(c) = (0..k as i64).find(|c| {
            !members
                .iter()
                .any(|(n, o)| o == c && unconditional(list[*n].0.node, &cx.region.body))
        }) {
            return Err(format!(
                "`{p}`'s offset {c} is reached only under a condition or in a loop, so a vector access of the whole group could touch an element the kernel does not"
            ));
        }
    }
    Ok(parts)
}

/// The groups of a buffer whose accesses fall in complete groups of k.
fn groups_of<'t>(
    cx: &Ctx<'_, 't>,
    (p, pointee): (&str, &str),
    list: &[Placed<'_, 't>],
    parts: Vec<Part>,
    k: usize,
) -> Result<Vec<Group<'t>>, String> {
    let written = list.iter().any(|(a, _)| a.write);
    let starts: Vec<&Poly> = parts.iter().map(|(s, _)| s).collect();
    if written && !surely_apart(&starts) {
        return Err(format!(
            "`{p}` is written in {} groups that are not a constant apart, so two of them might be one",
            parts.len()
        ));
    }
    let lanes = Lanes::of(pointee, k).ok_or("no vector type")?;
    let mut out = Vec::new();
    for (start, members) in parts {
        let accesses: Vec<(Node<'t>, usize)> = members
            .iter()
            .map(|(n, c)| (list[*n].0.node, *c as usize))
            .collect();
        let mine: Vec<&Placed<'_, 't>> = members.iter().map(|(n, _)| &list[*n]).collect();
        let top: BTreeSet<usize> = cx.region.body.iter().map(|n| n.id()).collect();
        let read = mine.iter().any(|(a, _)| !a.write || compound(a.node));
        let surely: BTreeSet<usize> = accesses
            .iter()
            .zip(&mine)
            .filter(|(_, (a, _))| a.write && plain_statement(a.node, &top))
            .map(|((_, c), _)| *c)
            .collect();
        let group_written = mine.iter().any(|(a, _)| a.write);
        let is_own = cx.region.index.is_some()
            && start == Poly::atom("$c".into()).mul(&Poly::constant(k as i64));
        let at = match is_own {
            true => None,
            false => Some(place(cx, p, &accesses)?),
        };
        let every_lane_written = (0..k).all(|c| {
            accesses
                .iter()
                .zip(&mine)
                .any(|((n, l), (a, _))| *l == c && a.write && unconditional(*n, &cx.region.body))
        });
        if at.is_some() && group_written && !every_lane_written {
            return Err(format!(
                "`{p}`'s group at `{}` is written but not every lane surely is: storing it whole would write an element the kernel does not",
                first_line(text(cx.src, accesses[0].0))
            ));
        }
        out.push(Group {
            buffer: p.to_string(),
            pointee: pointee.to_string(),
            k,
            lanes: lanes.clone(),
            accesses,
            load: read || surely.len() != k,
            written: group_written,
            at,
        });
    }
    Ok(out)
}

/// Where a group that is not the thread's own `k * i` moves: at the address of its
/// lane-0 access, loaded before the first of the region's statements that touches the
/// group; every local that address reads must be defined once, never assigned, before
/// that statement and where the region's end still sees it.
fn place(cx: &Ctx<'_, '_>, p: &str, accesses: &[(Node<'_>, usize)]) -> Result<Place, String> {
    let src = cx.src;
    let body = &cx.region.body;
    let top_of = |n: Node<'_>| {
        body.iter()
            .find(|s| s.start_byte() <= n.start_byte() && n.end_byte() <= s.end_byte())
            .map(|s| s.start_byte())
    };
    let before = accesses
        .iter()
        .filter_map(|(n, _)| top_of(*n))
        .min()
        .ok_or_else(|| format!("`{p}`'s group lies outside the body"))?;
    let lane0 = accesses
        .iter()
        .filter(|(n, c)| *c == 0 && unconditional(*n, body))
        .map(|(n, _)| *n)
        .next()
        .ok_or_else(|| format!("`{p}`'s offset 0 is reached only under a condition"))?;
    let address = match lane0.kind() {
        "subscript_expression" => format!("&{}", text(src, lane0)),
        "pointer_expression" => match lane0.child_by_field_name("argument") {
            Some(a) if a.kind() == "parenthesized_expression" || a.kind() == "identifier" => {
                text(src, a).to_string()
            }
            Some(a) => format!("({})", text(src, a)),
            None => return Err(format!("`{}` has no address", text(src, lane0))),
        },
        _ => return Err(format!("`{}` has no address", text(src, lane0))),
    };
    if let Some(name) = unreadable(cx, lane0, before) {
        return Err(format!(
            "`{}` reads `{name}`, which is not defined once before `{}`, where the vector load of `{p}`'s group goes",
            first_line(text(src, lane0)),
            first_line(&src[before..])
        ));
    }
    Ok(Place { address, before })
}

/// The first local that the access reads and that is assigned, declared twice, or
/// declared after `before` or in a nested block.
fn unreadable(cx: &Ctx<'_, '_>, access: Node<'_>, before: usize) -> Option<String> {
    let scopes: Vec<usize> = [Some(cx.region.kernel), cx.region.body[0].parent()]
        .into_iter()
        .flatten()
        .map(|n| n.id())
        .collect();
    let mut bad = None;
    walk(access, &mut |n| {
        if n.kind() != "identifier" || bad.is_some() {
            return bad.is_none();
        }
        let t = text(cx.src, n);
        let fine = match cx.names.defs.get(t) {
            Some(v) => declaration_of(*v).is_some_and(|d| {
                d.end_byte() <= before && d.parent().is_some_and(|p| scopes.contains(&p.id()))
            }),
            None => !cx.names.varying.contains(t),
        };
        if !fine {
            bad = Some(t.to_string());
        }
        bad.is_none()
    });
    bad
}

/// The declaration statement a value belongs to.
fn declaration_of(value: Node<'_>) -> Option<Node<'_>> {
    std::iter::successors(Some(value), |n| n.parent()).find(|n| n.kind() == "declaration")
}

/// The names the kernel declares with a floating-point type (parameters and locals).
pub(super) fn float_names(scope: &Scope<'_, '_>) -> BTreeSet<String> {
    scope
        .types
        .iter()
        .filter(|(_, ty)| {
            ["float", "double", "half", "bfloat16"]
                .iter()
                .any(|f| ty.contains(f))
        })
        .map(|(n, _)| n.clone())
        .collect()
}

/// No atom of the address reads a floating-point name or literal, so each is an
/// integer and a coefficient's factor divides the whole term (`(int)(2 * s)` with a
/// float `s` is not even).
pub(super) fn integral(p: &Poly, floats: &BTreeSet<String>) -> bool {
    p.0.keys().flatten().all(|atom| integral_atom(atom, floats))
}

fn integral_atom(atom: &str, floats: &BTreeSet<String>) -> bool {
    let b = atom.as_bytes();
    if b.windows(2)
        .any(|w| (w[0].is_ascii_digit() && w[1] == b'.') || (w[0] == b'.' && w[1].is_ascii_digit()))
    {
        return false;
    }
    let mut start = None;
    for (n, ch) in atom.char_indices().chain([(atom.len(), ' ')]) {
        let in_word = ch.is_ascii_alphanumeric() || ch == '_';
        match (in_word, start) {
            (true, None) => start = Some(n),
            (false, Some(s)) => {
                start = None;
                let word = &atom[s..n];
                // `threadIdx.x`'s field; `$c`, the caller's own variable, in an atom or
                // marked after it (`?i/half{$c}`).
                let field = atom[..s].ends_with(['.', '$']) || atom[..s].ends_with("->");
                let hex = word.starts_with("0x") || word.starts_with("0X");
                let number = word.starts_with(|c: char| c.is_ascii_digit());
                if (number && !hex && word.contains(['e', 'E', 'f', 'F']))
                    || (!field && floats.contains(word))
                {
                    return false;
                }
            }
            _ => {}
        }
    }
    true
}
