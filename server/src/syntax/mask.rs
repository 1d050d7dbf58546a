//! What tree-sitter-cuda cannot parse, hidden from it (issue #11, docs/compat.md,
//! "Known grammar gaps"). The parser reads the text with these regions overwritten by
//! spaces (newlines kept, byte length unchanged), so every range in the tree is still a
//! range of the author's text; analyses read the author's text through those ranges.
//!
//! - `__align__(N)` (`struct __align__(8) Pair { ... }`, `__shared__ __align__(16) float
//!   t[32];`): the attribute is hidden.
//! - Conditional groups (`#if`/`#ifdef`/`#ifndef` ... `#endif`) inside a function body:
//!   the directive lines and every branch but the first are hidden, so an `#if` around
//!   the head of an `if` parses as one statement. (`#if 0` keeps its `#else` branch.)
//! - Other directives inside a function body (`#pragma unroll` between a `for (...)` and
//!   its unbraced body, `#define`) are hidden when they stand in the middle of a
//!   statement; between statements they parse, and stay visible (the unroll facts read
//!   `#pragma unroll` there).
//!
//! Top-level directives are left alone: the grammar parses them. Pure.

use super::{ByteRange, Lang};

/// The text the parser should read, or None when nothing needs hiding.
pub fn masked(lang: Lang, text: &str) -> Option<String> {
    if lang != Lang::Cuda {
        return None;
    }
    let ranges = mask_ranges(text);
    if ranges.is_empty() {
        return None;
    }
    let mut bytes = text.as_bytes().to_vec();
    for r in ranges {
        for b in &mut bytes[r] {
            if *b != b'\n' && *b != b'\r' {
                *b = b' ';
            }
        }
    }
    // Whole lines and ASCII-delimited attributes are replaced, so no character is cut.
    String::from_utf8(bytes).ok()
}

/// One `#if` group inside a body: whether its current branch is the one kept.
struct Group {
    keeping: bool,
    /// A branch has been kept already (later `#elif`/`#else` branches are hidden).
    kept_one: bool,
}

/// The byte ranges to hide (see the module doc).
pub fn mask_ranges(text: &str) -> Vec<ByteRange> {
    let mut out = Vec::new();
    let mut depth: i64 = 0;
    let mut in_block_comment = false;
    // The last significant character of code (not comment, not directive).
    let mut last: u8 = b';';
    let mut groups: Vec<Group> = Vec::new();
    // Nesting of conditional groups inside a hidden branch.
    let mut hidden_nesting = 0usize;
    let mut offset = 0usize;
    let mut lines = text.split_inclusive('\n').peekable();
    while let Some(line) = lines.next() {
        let start = offset;
        offset += line.len();
        let body = line.trim_end_matches(['\n', '\r']);
        let trimmed = body.trim_start();
        let hiding = groups.iter().any(|g| !g.keeping);
        if !in_block_comment && trimmed.starts_with('#') {
            // The directive and its continuation lines.
            let mut end = start + body.len();
            let mut cont = body.ends_with('\\');
            while cont {
                match lines.next() {
                    Some(l) => {
                        let b = l.trim_end_matches(['\n', '\r']);
                        end = offset + b.len();
                        offset += l.len();
                        cont = b.ends_with('\\');
                    }
                    None => break,
                }
            }
            let word: String = trimmed[1..]
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphabetic())
                .collect();
            if depth <= 0 && groups.is_empty() {
                continue;
            }
            let cond = trimmed[1..].trim_start()[word.len()..].trim();
            match word.as_str() {
                "if" | "ifdef" | "ifndef" => {
                    if hiding {
                        hidden_nesting += 1;
                    } else {
                        let first = !(word == "if" && cond == "0");
                        groups.push(Group {
                            keeping: first,
                            kept_one: first,
                        });
                    }
                    out.push(start..end);
                }
                "elif" | "else" if hidden_nesting == 0 => {
                    if let Some(g) = groups.last_mut() {
                        g.keeping = !g.kept_one;
                        g.kept_one = true;
                    }
                    out.push(start..end);
                }
                "endif" => {
                    if hidden_nesting > 0 {
                        hidden_nesting -= 1;
                    } else {
                        groups.pop();
                    }
                    out.push(start..end);
                }
                _ if hiding => out.push(start..end),
                _ => {
                    if !matches!(last, b';' | b'{' | b'}' | b':') {
                        out.push(start..end);
                    }
                }
            }
            continue;
        }
        if hiding {
            out.push(start..start + body.len());
            continue;
        }
        scan_code(
            body,
            start,
            &mut depth,
            &mut in_block_comment,
            &mut last,
            &mut out,
        );
    }
    out
}

/// Lexes one code line: braces, the last significant character, `__align__(...)`.
fn scan_code(
    line: &str,
    base: usize,
    depth: &mut i64,
    in_block_comment: &mut bool,
    last: &mut u8,
    out: &mut Vec<ByteRange>,
) {
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if *in_block_comment {
            if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                *in_block_comment = false;
                i += 2;
            } else {
                i += 1;
            }
            continue;
        }
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => return,
            b'/' if b.get(i + 1) == Some(&b'*') => {
                *in_block_comment = true;
                i += 2;
                continue;
            }
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                *last = q;
            }
            b'{' => {
                *depth += 1;
                *last = b'{';
            }
            b'}' => {
                *depth -= 1;
                *last = b'}';
            }
            b'_' if line[i..].starts_with("__align__") => {
                let after = i + "__align__".len();
                let open = after + (line[after..].len() - line[after..].trim_start().len());
                if b.get(open) == Some(&b'(') {
                    let mut d = 0;
                    let mut j = open;
                    while j < b.len() {
                        match b[j] {
                            b'(' => d += 1,
                            b')' => {
                                d -= 1;
                                if d == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        j += 1;
                    }
                    if j < b.len() {
                        out.push(base + i..base + j + 1);
                        i = j + 1;
                        continue;
                    }
                }
                *last = b'_';
            }
            c if !c.is_ascii_whitespace() => *last = c,
            _ => {}
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text with hidden regions shown as `·` runs, for fixtures.
    fn show(text: &str) -> String {
        let m = masked(Lang::Cuda, text).unwrap_or_else(|| text.to_string());
        m.split('\n')
            .zip(text.split('\n'))
            .map(|(m, t)| {
                if m == t {
                    t.to_string()
                } else {
                    format!("{m}   <- {}", t.trim())
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn pragma_between_a_loop_head_and_its_body_is_hidden_but_not_between_statements() {
        let src = "__global__ void k(float* x) {\n    for (int j = 0; j < 4; ++j)\n#pragma unroll\n        for (int i = 0; i < 8; ++i) x[i] += 1;\n    #pragma unroll 4\n    for (int i = 0; i < 8; ++i) x[i] = 0;\n}\n";
        let shown = show(src);
        assert!(shown.contains("<- #pragma unroll\n"), "{shown}");
        assert!(shown.contains("    #pragma unroll 4\n"), "{shown}");
    }

    #[test]
    fn an_if_group_around_a_statement_head_keeps_the_first_branch() {
        let src = "__global__ void k(int n, float s, float* y) {\n#if USE_FAST\n    if (n > 0 && s > 0)\n#else\n    if (n > 0)\n#endif\n    {\n        y[0] = s;\n    }\n}\n";
        let m = masked(Lang::Cuda, src).unwrap();
        let kept: Vec<&str> = m.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        assert_eq!(
            kept,
            [
                "__global__ void k(int n, float s, float* y) {",
                "if (n > 0 && s > 0)",
                "{",
                "y[0] = s;",
                "}",
                "}"
            ]
        );
        // `#if 0` keeps the other branch.
        let zero = src.replace("#if USE_FAST", "#if 0");
        let m = masked(Lang::Cuda, &zero).unwrap();
        assert!(
            m.contains("    if (n > 0)\n") && !m.contains("s > 0)"),
            "{m}"
        );
    }

    #[test]
    fn align_attributes_are_hidden_and_top_level_directives_stay() {
        let src = "#include <cuda_fp16.h>\n#if defined(X)\nstruct __align__(8) Pair { float a, b; };\n#endif\n__shared__ __align__(16) float t[32];\n";
        let m = masked(Lang::Cuda, src).unwrap();
        assert_eq!(
            m,
            src.replace("__align__(8)", &" ".repeat(12))
                .replace("__align__(16)", &" ".repeat(13))
        );
        assert_eq!(m.len(), src.len());
        assert_eq!(masked(Lang::Cuda, "__global__ void k() { }\n"), None);
        assert_eq!(masked(Lang::Triton, src), None);
    }

    #[test]
    fn braces_in_comments_strings_and_hidden_branches_do_not_count() {
        let src = "__global__ void k(float* x) {\n    // {\n    const char* s = \"{\";\n#if A\n    if (x) {\n#else\n    if (!x) {\n#endif\n        x[0] = 1;\n    }\n}\n#define OUTSIDE 1\n";
        let m = masked(Lang::Cuda, src).unwrap();
        // The directive after the function is top level again: kept.
        assert!(m.ends_with("#define OUTSIDE 1\n"), "{m}");
        assert!(!m.contains("!x"), "{m}");
    }
}
