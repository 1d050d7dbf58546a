//! Spec-expression text: the components of a `grid`/`block` tuple, the ceiling
//! divisions in them (`cdiv(n, 256)`, `(n + 255) / 256`), and rescaling those divisions
//! when a rewrite changes the block a grid counts. Pure string work on the expression
//! text of one `@bench` statement; the evaluator in `spec` checks the result.

use std::collections::BTreeSet;

use super::edits::Edits;
use crate::syntax::ByteRange;

/// `256` -> [256]; `(16, 16)` -> [16, 16]; None unless every dim is an integer literal.
pub(super) fn literal_dims(expr: &str) -> Option<Vec<u64>> {
    let dims: Vec<u64> = components(expr)
        .into_iter()
        .map(|r| parse_uint(strip_parens(&expr[r])))
        .collect::<Option<_>>()?;
    (!dims.is_empty() && dims.len() <= 3 && dims.iter().all(|d| *d > 0)).then_some(dims)
}

pub(super) fn format_dims(dims: &[u64]) -> String {
    match dims {
        [x] => x.to_string(),
        _ => {
            let d: Vec<String> = dims.iter().map(u64::to_string).collect();
            format!("({})", d.join(", "))
        }
    }
}

/// A grid whose cap in blocks per multiprocessor (`sms * K` or `K * sms`, as the
/// grid-stride rewrites write it) is rescaled for a block of `new` threads instead of
/// `old`, so the threads resident per multiprocessor stay as they were: `K * old / new`
/// blocks. None when the grid has no such cap, or the new count is not a whole number of
/// at least one block. Returns the new grid text and the new K.
pub(super) fn rescale_cap(grid: &str, old: u64, new: u64) -> Option<(String, u64)> {
    let (range, k) = sms_cap(grid)?;
    let scaled = k.checked_mul(old)?;
    if new == 0 || scaled % new != 0 || scaled / new == 0 || scaled / new == k {
        return None;
    }
    let k2 = scaled / new;
    Edits::from_pairs(vec![(range, k2.to_string())])
        .apply(grid)
        .ok()
        .map(|g| (g, k2))
}

/// The literal K of the grid's `sms * K` (or `K * sms`) and its range in `grid`.
fn sms_cap(grid: &str) -> Option<(ByteRange, u64)> {
    let b = grid.as_bytes();
    let word_edge = |i: usize| i == 0 || i >= b.len() || !is_word_byte(b[i]);
    // A whole literal in `grid[start..end]`: digits, with no word character beside it.
    let literal = |start: usize, end: usize| {
        let k = parse_uint(&grid[start..end])?;
        (word_edge(end) && (start == 0 || word_edge(start - 1))).then_some((start..end, k))
    };
    let mut from = 0;
    while let Some(i) = grid[from..].find("sms").map(|i| i + from) {
        from = i + 3;
        if !(word_edge(i.wrapping_sub(1)) && word_edge(i + 3)) {
            continue;
        }
        if let Some(rest) = grid[i + 3..].trim_start().strip_prefix('*') {
            let start = grid.len() - rest.trim_start().len();
            let digits = grid[start..].bytes().take_while(u8::is_ascii_digit).count();
            if let Some(found) = literal(start, start + digits) {
                return Some(found);
            }
        }
        if let Some(rest) = grid[..i].trim_end().strip_suffix('*') {
            let end = rest.trim_end().len();
            let digits = grid[..end]
                .bytes()
                .rev()
                .take_while(u8::is_ascii_digit)
                .count();
            if let Some(found) = literal(end - digits, end) {
                return Some(found);
            }
        }
    }
    None
}

/// `component` with every division by `old` made a division by `new`; None if it has none.
/// A divisor that is a product of integer literals with `old` as a factor (`4 * 256`, as
/// coarsening and vector rewrites write it: elements per thread times the block) has
/// that factor replaced, so a structural rewrite's block can be retuned.
pub(super) fn rescale(component: &str, old: u64, new: u64) -> Option<String> {
    let edits: Vec<(ByteRange, String)> = divisions(component)
        .into_iter()
        .filter_map(|d| {
            let den = rescaled_divisor(&d.den, old, new)?;
            Some((d.range, format!("cdiv({}, {den})", d.num)))
        })
        .collect();
    if edits.is_empty() {
        return None;
    }
    Edits::from_pairs(edits).apply(component).ok()
}

/// `den` with its factor `old` made `new`: `old` itself, or a product of integer
/// literals with `old` among them (the last such factor); None otherwise.
fn rescaled_divisor(den: &str, old: u64, new: u64) -> Option<String> {
    if parse_uint(den) == Some(old) {
        return Some(new.to_string());
    }
    let factors: Vec<ByteRange> = split_top(den, b'*')
        .into_iter()
        .map(|r| trim_range(den, r))
        .collect();
    if factors.len() < 2
        || factors
            .iter()
            .any(|f| parse_uint(&den[f.clone()]).is_none())
    {
        return None;
    }
    let at = factors
        .iter()
        .rposition(|f| parse_uint(&den[f.clone()]) == Some(old))?;
    let mut out = den.to_string();
    out.replace_range(factors[at].clone(), &new.to_string());
    Some(out)
}

/// Every division of the grid's first component made `width` times coarser.
pub(super) fn widen(component: &str, width: usize) -> Option<String> {
    let edits: Vec<(ByteRange, String)> = divisions(component)
        .into_iter()
        .map(|d| {
            let den = if d.den.bytes().all(is_word_byte) {
                d.den
            } else {
                format!("({})", d.den)
            };
            (d.range, format!("cdiv({}, {width} * {den})", d.num))
        })
        .collect();
    if edits.is_empty() {
        return None;
    }
    Edits::from_pairs(edits).apply(component).ok()
}

/// Top-level components of `(a, b[, c])`, or the whole (trimmed) text as one; ranges
/// into `expr`.
pub(super) fn components(expr: &str) -> Vec<ByteRange> {
    let lead = expr.len() - expr.trim_start().len();
    let trimmed = expr.trim();
    let whole = lead..lead + trimmed.len();
    if trimmed.starts_with('(') && matching_close(expr, lead) == Some(whole.end - 1) {
        let inner = lead + 1..whole.end - 1;
        let parts = split_top(&expr[inner.clone()], b',');
        if parts.len() > 1 {
            return parts
                .into_iter()
                .map(|r| trim_range(expr, inner.start + r.start..inner.start + r.end))
                .collect();
        }
    }
    vec![whole]
}

pub(super) fn trim_range(s: &str, r: ByteRange) -> ByteRange {
    let t = &s[r.clone()];
    let lead = t.len() - t.trim_start().len();
    r.start + lead..r.start + lead + t.trim().len()
}

/// `(x)` -> `x` (one level, only when the parentheses enclose everything).
pub(super) fn strip_parens(s: &str) -> &str {
    let t = s.trim();
    if t.starts_with('(') && matching_close(t, 0) == Some(t.len() - 1) {
        return t[1..t.len() - 1].trim();
    }
    t
}

/// Index of the `)` matching the `(` at `open`.
pub(super) fn matching_close(s: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, b) in s.bytes().enumerate().skip(open) {
        match b {
            b'(' | b'[' => depth += 1,
            b')' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Index of the `(` matching the `)` at `close`.
pub(super) fn matching_open(s: &str, close: usize) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut depth = 0usize;
    let mut i = close + 1;
    while i > 0 {
        i -= 1;
        match bytes[i] {
            b')' | b']' => depth += 1,
            b'(' | b'[' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Ranges of `s` between `sep`s outside parentheses and brackets.
pub(super) fn split_top(s: &str, sep: u8) -> Vec<ByteRange> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, b) in s.bytes().enumerate() {
        match b {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            _ if b == sep && depth == 0 => {
                out.push(start..i);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(start..s.len());
    out
}

pub(super) fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Every identifier-like word of `s`.
pub(super) fn words(s: &str) -> BTreeSet<&str> {
    s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect()
}

pub(super) fn parse_uint(s: &str) -> Option<u64> {
    let s = s.trim();
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// A C integer literal (`256`, `256u`, `0x100`).
pub(super) fn parse_int_literal(s: &str) -> Option<u64> {
    let s = s.trim().trim_end_matches(['u', 'U', 'l', 'L']);
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => parse_uint(s),
    }
}

/// `cdiv(num, den)` or `(num + den - 1) / den` in a spec expression.
#[derive(Debug, PartialEq)]
pub(super) struct Division {
    pub range: ByteRange,
    pub num: String,
    pub den: String,
}

/// The outermost divisions of `s`, in order.
pub(super) fn divisions(s: &str) -> Vec<Division> {
    let bytes = s.as_bytes();
    let mut found: Vec<Division> = Vec::new();
    // cdiv(a, b)
    let mut from = 0;
    while let Some(p) = s[from..].find("cdiv").map(|p| p + from) {
        from = p + 4;
        if p > 0 && is_word_byte(bytes[p - 1]) {
            continue;
        }
        let open = p + 4 + (s[p + 4..].len() - s[p + 4..].trim_start().len());
        if bytes.get(open) != Some(&b'(') {
            continue;
        }
        let Some(close) = matching_close(s, open) else {
            continue;
        };
        let inner = &s[open + 1..close];
        let args = split_top(inner, b',');
        if let [a, b] = args.as_slice() {
            found.push(Division {
                range: p..close + 1,
                num: inner[a.clone()].trim().to_string(),
                den: inner[b.clone()].trim().to_string(),
            });
        }
    }
    // (a + b - 1) / b
    for (slash, _) in s.match_indices('/') {
        let before = s[..slash].trim_end();
        if !before.ends_with(')') {
            continue;
        }
        let close = before.len() - 1;
        let Some(open) = matching_open(s, close) else {
            continue;
        };
        if s[..open]
            .trim_end()
            .bytes()
            .last()
            .is_some_and(is_word_byte)
        {
            continue; // a call: `max(a, b) / 2`
        }
        let after = &s[slash + 1..];
        let skip = after.len() - after.trim_start().len();
        let den_len = after[skip..]
            .bytes()
            .take_while(|b| is_word_byte(*b))
            .count();
        if den_len == 0 {
            continue;
        }
        let den = &after[skip..skip + den_len];
        let inner = &s[open + 1..close];
        let Some(plus) = split_top(inner, b'+')
            .last()
            .map(|r| r.start)
            .filter(|p| *p > 0)
        else {
            continue;
        };
        let rest: String = inner[plus..]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        let literal = parse_uint(&rest)
            .zip(parse_uint(den))
            .is_some_and(|(r, d)| r + 1 == d);
        if !literal && rest != format!("{den}-1") && rest != format!("({den}-1)") {
            continue;
        }
        found.push(Division {
            range: open..slash + 1 + skip + den_len,
            num: inner[..plus - 1].trim().to_string(),
            den: den.to_string(),
        });
    }
    found.sort_by_key(|d| (d.range.start, std::cmp::Reverse(d.range.end)));
    let mut out: Vec<Division> = Vec::new();
    for d in found {
        if out.last().is_some_and(|o| d.range.start < o.range.end) {
            continue;
        }
        out.push(d);
    }
    out
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn a_grid_cap_in_blocks_per_multiprocessor_keeps_its_threads() {
        let g = "min(cdiv(n, BLOCK), sms * 16)";
        assert_eq!(
            rescale_cap(g, 128, 512),
            Some(("min(cdiv(n, BLOCK), sms * 4)".into(), 4))
        );
        assert_eq!(
            rescale_cap("min(cdiv(n, 256), 8*sms)", 256, 128),
            Some(("min(cdiv(n, 256), 16*sms)".into(), 16))
        );
        assert_eq!(
            rescale_cap("min(cdiv(n, 256), sms * 1)", 256, 512),
            None,
            "half a block"
        );
        assert_eq!(
            rescale_cap("min(cdiv(n, 256), sms * 6)", 256, 1024),
            None,
            "not whole"
        );
        assert_eq!(rescale_cap("cdiv(n, 256)", 256, 512), None, "no cap");
        assert_eq!(rescale_cap("min(cdiv(n, 256), nsms * 4)", 256, 512), None);
        assert_eq!(rescale_cap("min(cdiv(n, 256), sms * k4)", 256, 512), None);
        assert_eq!(rescale_cap("min(cdiv(n, 256), sms * 4)", 256, 256), None);
    }

    #[test]
    fn spec_divisions_are_found_and_rescaled() {
        assert_eq!(
            rescale("(n + 255) / 256", 256, 512).as_deref(),
            Some("cdiv(n, 512)")
        );
        assert_eq!(
            rescale("(n + (256 - 1)) / 256", 256, 64).as_deref(),
            Some("cdiv(n, 64)")
        );
        assert_eq!(
            rescale("(n + 256 - 1) / 256", 256, 64).as_deref(),
            Some("cdiv(n, 64)")
        );
        assert_eq!(
            rescale("(n + 254) / 256", 256, 64),
            None,
            "not a ceiling division"
        );
        assert_eq!(
            rescale("cdiv(n, 16) * 2", 16, 32).as_deref(),
            Some("cdiv(n, 32) * 2")
        );
        assert_eq!(rescale("cdiv(n, 128)", 256, 512), None, "another divisor");
        // What coarsening and vector widths write: elements per thread times the block.
        assert_eq!(
            rescale("min(cdiv(n, 4 * 64), sms * 8)", 64, 256).as_deref(),
            Some("min(cdiv(n, 4 * 256), sms * 8)")
        );
        assert_eq!(
            rescale("cdiv(m, 2 * 128 * 1)", 128, 32).as_deref(),
            Some("cdiv(m, 2 * 32 * 1)")
        );
        assert_eq!(
            rescale("cdiv(n, 4 * 4)", 4, 8).as_deref(),
            Some("cdiv(n, 4 * 8)"),
            "the last factor is the block (widen puts it last)"
        );
        assert_eq!(
            rescale("cdiv(n, 4 * 128)", 256, 512),
            None,
            "no such factor"
        );
        assert_eq!(
            rescale("cdiv(n, V * 256)", 256, 512),
            None,
            "a named factor"
        );
        assert_eq!(
            rescale("max(n, 256) / 256", 256, 512),
            None,
            "a call, not a group"
        );
        assert_eq!(
            widen("cdiv(n, 256)", 4).as_deref(),
            Some("cdiv(n, 4 * 256)")
        );
        assert_eq!(
            widen("cdiv(n, BLOCK * 2)", 2).as_deref(),
            Some("cdiv(n, 2 * (BLOCK * 2))")
        );
        assert_eq!(
            widen("(n + B - 1) / B", 4).as_deref(),
            Some("cdiv(n, 4 * B)")
        );
        assert_eq!(widen("sms * 4", 4), None);
        assert_eq!(components(" (cdiv(n, 16), cdiv(m, 16)) ").len(), 2);
        assert_eq!(components("(n + 255) / 256"), vec![0..15]);
        assert_eq!(literal_dims("(16, 16)"), Some(vec![16, 16]));
        assert_eq!(literal_dims("(256)"), Some(vec![256]));
        assert_eq!(literal_dims("BLOCK"), None);
    }
}
