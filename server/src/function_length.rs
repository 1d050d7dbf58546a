//! Functions fit on a screen (issue #33, in the manner of rust-analyzer's tidy tests):
//! `no_function_outgrows_the_limit` reads every source file of the crate and fails when a
//! non-test function spans more than [`LIMIT`] lines, counted from its `fn` line to its
//! closing brace. The functions that were longer when the rule came are listed in
//! [`ALLOWED`] with their length then; each may shrink but not grow, and an entry that
//! falls to the limit (or whose function is gone) must be removed, so the list only
//! shortens. Test code is exempt: items under `#[cfg(test)]`, `tests.rs` files and the
//! files of modules declared `#[cfg(test)] mod name;`. The scan is lexical (comments,
//! strings and character literals blanked, braces matched), which is enough for this
//! crate's code and needs no parser.

use std::path::{Path, PathBuf};

/// The most lines a non-test function may span.
const LIMIT: usize = 150;

/// The functions over [`LIMIT`] when the rule came: (file under `server/src`, function
/// name, its length then). Lower a number when its function shrinks; remove the entry
/// when it fits.
#[rustfmt::skip]
const ALLOWED: &[(&str, &str, usize)] = &[
    ("cli/optimize.rs", "run_inner", 183),
    ("worker/cuda/verify.rs", "judge", 169),
    ("worker/serve.rs", "serve", 162),
    ("spec/plan.rs", "hover_markdown", 161),
];

/// A function found in a file: its name, the line of its `fn` (1-based) and how many
/// lines it spans.
#[derive(Debug, PartialEq)]
struct Function {
    name: String,
    line: usize,
    lines: usize,
}

/// Rust text with its comments and its string and character literals overwritten by
/// spaces (newlines kept), so that the braces and keywords left are code. Lifetimes
/// (`'a`) stay.
fn code_only(text: &str) -> Vec<u8> {
    let mut b = text.as_bytes().to_vec();
    let mut i = 0;
    while i < b.len() {
        let end = match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => Some(memchr_or_end(&b, i, b'\n')),
            b'/' if b.get(i + 1) == Some(&b'*') => Some(block_comment_end(&b, i)),
            b'"' => Some(string_end(&b, i + 1)),
            b'r' if !ident_before(&b, i) || (b[i - 1] == b'b' && !ident_before(&b, i - 1)) => {
                raw_string_end(&b, i)
            }
            b'\'' => char_end(&b, i),
            _ => None,
        };
        let Some(end) = end else {
            i += 1;
            continue;
        };
        for c in &mut b[i..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        i = end;
    }
    b
}

/// The index of the first `c` at or after `from`, or the end.
fn memchr_or_end(b: &[u8], from: usize, c: u8) -> usize {
    b[from..]
        .iter()
        .position(|&x| x == c)
        .map_or(b.len(), |k| from + k)
}

/// Whether the byte before `i` continues an identifier.
fn ident_before(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// One past the `*/` closing the (nestable) block comment opened at `i`.
fn block_comment_end(b: &[u8], i: usize) -> usize {
    let (mut depth, mut j) = (0, i);
    while j + 1 < b.len() {
        match (b[j], b[j + 1]) {
            (b'/', b'*') => depth += 1,
            (b'*', b'/') => {
                depth -= 1;
                if depth == 0 {
                    return j + 2;
                }
            }
            _ => {
                j += 1;
                continue;
            }
        }
        j += 2;
    }
    b.len()
}

/// One past the `"` closing a string whose text starts at `from` (escapes honoured).
fn string_end(b: &[u8], mut from: usize) -> usize {
    while from < b.len() && b[from] != b'"' {
        from += if b[from] == b'\\' { 2 } else { 1 };
    }
    (from + 1).min(b.len())
}

/// One past the end of the raw string `r#"..."#` starting at `i`, if one starts there.
fn raw_string_end(b: &[u8], i: usize) -> Option<usize> {
    let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
    let open = i + 1 + hashes;
    if b.get(open) != Some(&b'"') {
        return None;
    }
    let close: Vec<u8> = std::iter::once(b'"')
        .chain(std::iter::repeat_n(b'#', hashes))
        .collect();
    let at = b[open + 1..]
        .windows(close.len())
        .position(|w| w == close.as_slice())?;
    Some(open + 1 + at + close.len())
}

/// One past the character literal starting at `i` (`'x'`, `'\n'`, `'\u{1F600}'`), or
/// `None` for a lifetime or label (`'a`).
fn char_end(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i + 1) == Some(&b'\\') {
        let close = b.get(i + 3..)?.iter().position(|&c| c == b'\'')?;
        return Some(i + 3 + close + 1);
    }
    let width = match b.get(i + 1)? {
        c if *c < 0x80 => 1,
        c if *c >= 0xF0 => 4,
        c if *c >= 0xE0 => 3,
        _ => 2,
    };
    (b.get(i + 1 + width) == Some(&b'\'')).then_some(i + 2 + width)
}

/// The index one past the `}` that closes the item starting at `from`: its first `{`
/// outside brackets (`fn f(x: [u8; 4]) {`), matched. `None` when a `;` comes first (a
/// declaration without a body: `fn f();`, `mod tests;`) or the text ends.
fn item_end(code: &[u8], from: usize) -> Option<usize> {
    let mut nesting = 0i32;
    let open = from
        + code[from..].iter().position(|&c| {
            match c {
                b'(' | b'[' => nesting += 1,
                b')' | b']' => nesting -= 1,
                _ => {}
            }
            nesting == 0 && (c == b'{' || c == b';')
        })?;
    if code[open] == b';' {
        return None;
    }
    let mut depth = 0usize;
    for (k, &c) in code[open..].iter().enumerate() {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + k + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The byte ranges of items marked `#[cfg(test)]` in blanked code.
fn test_items(code: &[u8]) -> Vec<std::ops::Range<usize>> {
    const MARK: &[u8] = b"#[cfg(test)]";
    let mut out = Vec::new();
    for at in (0..code.len()).filter(|&i| code[i..].starts_with(MARK)) {
        if let Some(end) = item_end(code, at + MARK.len()) {
            out.push(at..end);
        }
    }
    out
}

/// The functions with bodies that `text` defines outside `#[cfg(test)]` items, nested
/// ones included (an inner function counts toward its outer one too).
fn functions(text: &str) -> Vec<Function> {
    let code = code_only(text);
    let tests = test_items(&code);
    let line_of = |at: usize| code[..at].iter().filter(|&&c| c == b'\n').count() + 1;
    let mut out = Vec::new();
    for at in (0..code.len()).filter(|&i| code[i..].starts_with(b"fn ") && !ident_before(&code, i))
    {
        if tests.iter().any(|r| r.contains(&at)) {
            continue;
        }
        let name: String = code[at + 3..]
            .iter()
            .skip_while(|c| c.is_ascii_whitespace())
            .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
            .map(|&c| c as char)
            .collect();
        let Some(end) = item_end(&code, at).filter(|_| !name.is_empty()) else {
            continue;
        };
        let line = line_of(at);
        out.push(Function {
            name,
            line,
            lines: line_of(end) - line + 1,
        });
    }
    out
}

/// The files of modules declared `#[cfg(test)] mod name;` in `file` (whose text is
/// `text`): `name.rs` or `name/mod.rs` beside a `mod.rs` or `lib.rs`, else in the
/// folder named after `file`.
fn test_module_files(file: &Path, text: &str) -> Vec<PathBuf> {
    let code = String::from_utf8_lossy(&code_only(text)).into_owned();
    let dir = match file.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs" | "lib.rs" | "main.rs") => file.parent().map(Path::to_path_buf),
        _ => Some(file.with_extension("")),
    }
    .unwrap_or_default();
    let mut out = Vec::new();
    for (at, mark) in code.match_indices("#[cfg(test)]") {
        let rest = code[at + mark.len()..].trim_start();
        let Some(decl) = rest.strip_prefix("mod ").or(rest.strip_prefix("pub mod ")) else {
            continue;
        };
        let Some((name, _)) = decl.split_once(';').filter(|(n, _)| !n.contains('{')) else {
            continue;
        };
        out.push(dir.join(format!("{}.rs", name.trim())));
        out.push(dir.join(name.trim()).join("mod.rs"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                rust_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    /// Every non-test function over [`LIMIT`]: (file under `src`, name, lines, line).
    fn long_functions(src: &Path) -> Vec<(String, String, usize, usize)> {
        let mut all = Vec::new();
        rust_files(src, &mut all);
        assert!(
            all.len() > 50,
            "found {} files under {}",
            all.len(),
            src.display()
        );
        let texts: Vec<(PathBuf, String)> = all
            .into_iter()
            .map(|f| {
                let t = std::fs::read_to_string(&f).unwrap();
                (f, t)
            })
            .collect();
        let test_files: Vec<PathBuf> = texts
            .iter()
            .flat_map(|(f, t)| test_module_files(f, t))
            .collect();
        let mut out = Vec::new();
        for (f, text) in &texts {
            if test_files.contains(f) || f.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let rel = f
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            for func in functions(text).into_iter().filter(|g| g.lines > LIMIT) {
                out.push((rel.clone(), func.name, func.lines, func.line));
            }
        }
        out.sort();
        out
    }

    /// What breaks the rule, given the long functions found: a function over the limit
    /// that is not allowed, or longer than allowed, and an entry of `allowed` that no
    /// longer names a long function.
    fn breaches(
        found: &[(String, String, usize, usize)],
        allowed: &[(&str, &str, usize)],
    ) -> Vec<String> {
        let mut bad = Vec::new();
        for (file, name, lines, line) in found {
            match allowed.iter().find(|(f, n, _)| f == file && n == name) {
                None => bad.push(format!(
                    "{file}:{line}: `{name}` is {lines} lines (limit {LIMIT}): split it into named pieces"
                )),
                Some((_, _, max)) if lines > max => bad.push(format!(
                    "{file}:{line}: `{name}` grew to {lines} lines (allowed {max}, limit {LIMIT}): split it, do not raise the number"
                )),
                Some(_) => {}
            }
        }
        for (file, name, max) in allowed {
            if !found.iter().any(|(f, n, _, _)| f == file && n == name) {
                bad.push(format!(
                    "{file}: `{name}` (allowed {max}) is gone or within {LIMIT} lines: remove its entry from ALLOWED"
                ));
            }
        }
        bad
    }

    #[test]
    fn no_function_outgrows_the_limit() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let bad = breaches(&long_functions(&src), ALLOWED);
        assert!(bad.is_empty(), "functions too long:\n{}", bad.join("\n"));
    }

    #[test]
    fn the_rule_fails_on_a_new_a_grown_or_a_stale_entry() {
        let found = vec![
            ("a.rs".to_string(), "new_one".to_string(), 151, 3),
            ("a.rs".to_string(), "grown".to_string(), 200, 40),
            ("b.rs".to_string(), "held".to_string(), 180, 9),
        ];
        let allowed = [
            ("a.rs", "grown", 190),
            ("b.rs", "held", 180),
            ("b.rs", "split_since", 170),
        ];
        let bad = breaches(&found, &allowed);
        assert_eq!(bad.len(), 3, "{bad:#?}");
        assert!(
            bad[0].starts_with("a.rs:3: `new_one` is 151 lines"),
            "{}",
            bad[0]
        );
        assert!(
            bad[1].starts_with("a.rs:40: `grown` grew to 200 lines (allowed 190"),
            "{}",
            bad[1]
        );
        assert!(
            bad[2].starts_with("b.rs: `split_since` (allowed 170) is gone"),
            "{}",
            bad[2]
        );
        assert!(breaches(&found[2..], &allowed[1..2]).is_empty());
    }

    #[test]
    fn functions_are_measured_from_fn_to_the_closing_brace() {
        let text = r##"
/// { not code }
pub(crate) async fn outer(x: &str) -> Option<u8> {
    let open = "{ in a string \" still";
    let raw = r#"}"#;
    let c = '{';
    let e = '\'';
    let b = b'}';
    fn inner<'a>(s: &'a str) -> &'a str {
        /* } /* nested } */ */
        s
    }
    // }
    None
}
trait T { fn declared(&self); }
let f: fn(u8) -> u8 = g;
#[cfg(test)]
mod tests {
    fn in_a_test() {}
}
fn after() {}
"##;
        let found = functions(text);
        assert_eq!(
            found,
            vec![
                Function {
                    name: "outer".into(),
                    line: 3,
                    lines: 13
                },
                Function {
                    name: "inner".into(),
                    line: 9,
                    lines: 4
                },
                Function {
                    name: "after".into(),
                    line: 22,
                    lines: 1
                },
            ]
        );
    }

    #[test]
    fn modules_declared_for_tests_are_test_files() {
        let text = "#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod fuzz;\nmod real;\n#[cfg(test)]\nmod inline {}\n";
        assert_eq!(
            test_module_files(Path::new("src/lsp/frame.rs"), text),
            [
                "src/lsp/frame/tests.rs",
                "src/lsp/frame/tests/mod.rs",
                "src/lsp/frame/fuzz.rs",
                "src/lsp/frame/fuzz/mod.rs",
            ]
            .map(PathBuf::from)
        );
        assert_eq!(
            test_module_files(Path::new("src/spec/mod.rs"), "#[cfg(test)]\nmod tests;"),
            ["src/spec/tests.rs", "src/spec/tests/mod.rs"].map(PathBuf::from)
        );
    }
}
