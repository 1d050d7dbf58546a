//! `extern "C" {` and its `}` in two conditional groups of a C header, which the
//! grammar cannot pair ([`split_linkage_groups`]).

use super::ByteRange;

/// C headers open a linkage block in one conditional group and close it in another:
/// `#ifdef __cplusplus` / `extern "C" {` / `#endif`, declarations, then `#ifdef
/// __cplusplus` / `}` / `#endif`. The grammar cannot pair them: everything after the
/// opening group became one ERROR region, whose host prototypes the device slice then
/// kept. Each such pair of groups (a group whose one line of code opens `extern "..." {`,
/// and a later one whose one line is `}`) is hidden, directives and all; the
/// declarations between them parse as top-level items. Only the parser's view changes:
/// the device slice keeps the groups, so NVRTC reads the block as written.
pub(super) fn split_linkage_groups(text: &str) -> Vec<ByteRange> {
    // (range, opens) of each one-line group, in text order.
    let mut groups: Vec<(ByteRange, bool)> = Vec::new();
    let lines: Vec<(usize, &str)> = text
        .split_inclusive('\n')
        .scan(0usize, |at, l| {
            let start = *at;
            *at += l.len();
            Some((start, l))
        })
        .collect();
    let code = |l: &str| -> String {
        let l = l.split("//").next().unwrap_or("");
        l.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let directive = |l: &str, names: &[&str]| {
        let t = l.trim_start();
        t.strip_prefix('#').is_some_and(|d| {
            let word = d
                .trim_start()
                .split(|c: char| !c.is_ascii_alphabetic())
                .next();
            word.is_some_and(|w| names.contains(&w))
        })
    };
    let mut i = 0;
    while i < lines.len() {
        let (start, line) = lines[i];
        if !directive(line, &["if", "ifdef", "ifndef"]) {
            i += 1;
            continue;
        }
        // The group's code lines up to its `#endif`, at most one.
        let mut j = i + 1;
        while j < lines.len() && code(lines[j].1).is_empty() {
            j += 1;
        }
        let body = lines.get(j).map(|(_, l)| code(l)).unwrap_or_default();
        let mut k = j + 1;
        while k < lines.len() && code(lines[k].1).is_empty() {
            k += 1;
        }
        let closes_group = lines.get(k).is_some_and(|(_, l)| directive(l, &["endif"]));
        let opens = body.starts_with("extern \"") && body.ends_with('{') && !body.contains('}');
        if closes_group && (opens || body == "}") {
            let end = lines[k].0 + lines[k].1.len();
            groups.push((start..end, opens));
            i = k + 1;
        } else {
            i += 1;
        }
    }
    let mut out = Vec::new();
    let mut open: Vec<ByteRange> = Vec::new();
    for (range, opens) in groups {
        if opens {
            open.push(range);
        } else if let Some(o) = open.pop() {
            out.push(o);
            out.push(range);
        }
    }
    out
}
