//! A Triton check the CPU interpreter does not make: a `@triton.jit` function may read a
//! module-level global only when its value is a `tl.constexpr` (or a module, a function,
//! a dtype; Triton 3.x's code generator), so a kernel that reads `BLOCK = 512` runs under
//! `TRITON_INTERPRET=1` but fails to compile for a GPU ("Cannot access global variable
//! BLOCK from within @jit'ed function"). [`check`] warns at the kernel's first read of
//! each such global, saying how to fix it. A global counts when its last module-level
//! definition (column 0) assigns a plain value: a number, a string, `True`/`False`/`None`
//! or arithmetic and tuples of those, also under an annotation (`BLOCK: tl.constexpr =
//! 512` stays a plain int at run time, which Triton also rejects). A call on the right
//! (`tl.constexpr(512)`, a helper's result), an attribute (`tl.float32`), an import, a
//! `def` or a `class` do not count, nor does a name the kernel binds itself (a parameter,
//! an assignment, a loop variable). Pure: text, kernel and report in.

use std::collections::BTreeMap;

use tree_sitter::{Node, Parser};

use crate::spec::{Severity, SpecDiagnostic, SpecReport};
use crate::syntax::{ts_language, Kernel, Lang};

/// A module-level global whose value is plain: its definition's value text and line.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Plain {
    value: String,
    line: usize,
}

/// The plain module-level globals of `src`, by name: the last column-0 definition of
/// each name decides (a later `def`, `class`, import or non-plain assignment removes it).
fn plain_globals(src: &str) -> BTreeMap<String, Plain> {
    let mut out = BTreeMap::new();
    for (i, line) in src.lines().enumerate() {
        if !line.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            continue;
        }
        let code = line.split('#').next().unwrap_or("").trim_end();
        for name in defined_otherwise(code) {
            out.remove(name);
        }
        let Some((name, value)) = assignment(code) else {
            continue;
        };
        if is_plain(value) {
            let plain = Plain {
                value: value.to_string(),
                line: i + 1,
            };
            out.insert(name.to_string(), plain);
        } else {
            out.remove(name);
        }
    }
    out
}

/// Names a `def`, `class` or import line binds.
fn defined_otherwise(code: &str) -> Vec<&str> {
    fn word(s: &str) -> &str {
        let end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        &s[..end]
    }
    for kw in ["def ", "class "] {
        if let Some(rest) = code.strip_prefix(kw) {
            return vec![word(rest.trim_start())];
        }
    }
    let imported = code
        .strip_prefix("import ")
        .or_else(|| code.split_once(" import ").map(|(_, r)| r));
    let Some(list) = imported.filter(|_| code.starts_with("import ") || code.starts_with("from "))
    else {
        return Vec::new();
    };
    list.trim_matches(|c| c == '(' || c == ')' || c == ' ')
        .split(',')
        .filter_map(|part| {
            let part = part.trim();
            let bound = part.rsplit_once(" as ").map_or(part, |(_, a)| a);
            let bound = bound.split('.').next()?.trim();
            (!bound.is_empty()).then_some(bound)
        })
        .collect()
}

/// `NAME = VALUE` or `NAME: ANNOTATION = VALUE` (not `==`, not augmented).
fn assignment(code: &str) -> Option<(&str, &str)> {
    let (left, right) = code.split_once('=')?;
    if right.starts_with('=')
        || left.ends_with(['!', '<', '>', '+', '-', '*', '/', '%', '&', '|', '^', '@'])
    {
        return None;
    }
    let name = left.split_once(':').map_or(left, |(n, _)| n).trim();
    let ident = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    ident.then(|| (name, right.trim()))
}

/// A value Triton keeps as a plain Python object: literals and arithmetic, tuples and
/// lists of them; no name, call or attribute.
fn is_plain(value: &str) -> bool {
    if value.is_empty() {
        return false;
    }
    if value.starts_with(['"', '\'']) {
        return true;
    }
    value
        .split(|c: char| "+-*/%<>&|^~()[], ".contains(c))
        .filter(|t| !t.is_empty())
        .all(|t| {
            matches!(t, "True" | "False" | "None")
                || (t.starts_with(|c: char| c.is_ascii_digit() || c == '.')
                    && t.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_'))
        })
}

/// Adds a warning at the first read of each plain global in each function of the Triton
/// kernel `kernels[i]`'s unit (itself and the `@triton.jit` helpers it calls); a helper
/// an earlier kernel's unit holds was checked with that kernel.
pub fn check(text: &str, kernels: &[Kernel], i: usize, report: &mut SpecReport) {
    let Some(kernel) = kernels.get(i).filter(|k| k.lang == Lang::Triton) else {
        return;
    };
    let globals = plain_globals(text);
    if globals.is_empty() {
        return;
    }
    let seen = |r: &std::ops::Range<usize>| kernels[..i].iter().any(|k| k.unit_ranges.contains(r));
    let mut funcs: Vec<std::ops::Range<usize>> = vec![kernel.def_range.clone()];
    funcs.extend(kernel.unit_ranges.iter().filter(|r| !seen(r)).cloned());
    funcs.sort_by_key(|r| r.start);
    funcs.dedup_by(|b, a| a.start <= b.start && b.end <= a.end);
    for f in funcs {
        let start = text[..f.start].rfind('\n').map_or(0, |i| i + 1);
        let Some(def) = text.get(start..f.end) else {
            continue;
        };
        for (name, at) in global_reads(def, &globals) {
            let Some(g) = globals.get(name.as_str()) else {
                continue;
            };
            report.diagnostics.push(SpecDiagnostic {
                range: start + at.start..start + at.end,
                severity: Severity::Warning,
                message: message(&name, g),
            });
        }
    }
}

/// "`BLOCK` is a plain module-level global (`BLOCK = 512`, line 4): ...".
fn message(name: &str, g: &Plain) -> String {
    format!(
        "`{name}` is a plain module-level global (`{name} = {v}`, line {line}): a @triton.jit \
         function may read a global only when it is a constexpr, so this runs on the CPU \
         interpreter but fails to compile for a GPU; annotate as `{name} = \
         tl.constexpr({v})` or pass it as a `tl.constexpr` parameter",
        v = g.value,
        line = g.line,
    )
}

/// The first read of each name of `globals` in the function `def` (its text from the
/// start of its first line), with its range in `def`; names the function binds do not
/// count.
fn global_reads(
    def: &str,
    globals: &BTreeMap<String, Plain>,
) -> Vec<(String, std::ops::Range<usize>)> {
    let mut parser = Parser::new();
    if parser.set_language(&ts_language(Lang::Triton)).is_err() {
        return Vec::new();
    }
    let Some(tree) = parser.parse(def, None) else {
        return Vec::new();
    };
    let Some(func) = first_function(tree.root_node()) else {
        return Vec::new();
    };
    let Some(body) = func.child_by_field_name("body") else {
        return Vec::new();
    };
    let name_of = |n: Node<'_>| def.get(n.byte_range()).unwrap_or("");
    let mut bound: Vec<&str> = Vec::new();
    let mut reads: Vec<Node<'_>> = Vec::new();
    if let Some(params) = func.child_by_field_name("parameters") {
        bound.extend(parameter_names(params).into_iter().map(name_of));
    }
    walk(body, &mut |n| {
        match binding_target(n) {
            Some(t) if t.kind() == "parameters" || t.kind() == "lambda_parameters" => {
                bound.extend(parameter_names(t).into_iter().map(name_of))
            }
            Some(t) => bound.extend(identifiers(t).into_iter().map(name_of)),
            None => {}
        }
        if n.kind() == "identifier" && is_read(n) {
            reads.push(n);
        }
    });
    let mut out: Vec<(String, std::ops::Range<usize>)> = Vec::new();
    for r in reads {
        let name = name_of(r);
        let new = !out.iter().any(|(n, _)| n == name);
        if new && globals.contains_key(name) && !bound.contains(&name) {
            out.push((name.to_string(), r.byte_range()));
        }
    }
    out
}

/// The first `function_definition` at or under `n`.
fn first_function(n: Node<'_>) -> Option<Node<'_>> {
    let mut found = None;
    walk(n, &mut |x| {
        if found.is_none() && x.kind() == "function_definition" {
            found = Some(x);
        }
    });
    found
}

/// What `n` binds, if it is a binding: an assignment's or loop's target, a `with ... as`
/// alias, a walrus name, a nested function's or lambda's parameters.
fn binding_target(n: Node<'_>) -> Option<Node<'_>> {
    match n.kind() {
        "assignment" | "augmented_assignment" | "for_statement" | "for_in_clause" => {
            n.child_by_field_name("left")
        }
        "named_expression" => n.child_by_field_name("name"),
        "as_pattern" => n.child_by_field_name("alias"),
        "lambda" | "function_definition" => n.child_by_field_name("parameters"),
        _ => None,
    }
}

/// An identifier that reads a variable: not an attribute's field (`x.BLOCK`) nor a
/// keyword argument's name (`f(BLOCK=...)`).
fn is_read(n: Node<'_>) -> bool {
    let Some(p) = n.parent() else {
        return true;
    };
    let is_field = |f: &str| p.child_by_field_name(f).is_some_and(|c| c.id() == n.id());
    match p.kind() {
        "attribute" => !is_field("attribute"),
        "keyword_argument" => !is_field("name"),
        _ => true,
    }
}

/// The names a parameter list binds (not the names its annotations and defaults read).
fn parameter_names(params: Node<'_>) -> Vec<Node<'_>> {
    let mut cursor = params.walk();
    let kids: Vec<Node<'_>> = params.named_children(&mut cursor).collect();
    kids.into_iter()
        .filter_map(|p| match p.kind() {
            "identifier" => Some(p),
            "default_parameter" | "typed_default_parameter" => p.child_by_field_name("name"),
            _ => p.named_child(0).filter(|c| c.kind() == "identifier"),
        })
        .collect()
}

/// Every identifier at or under `n`.
fn identifiers(n: Node<'_>) -> Vec<Node<'_>> {
    let mut out = Vec::new();
    walk(n, &mut |x| {
        if x.kind() == "identifier" {
            out.push(x);
        }
    });
    out
}

/// `f` on `n` and every node under it, in text order.
fn walk<'t>(n: Node<'t>, f: &mut impl FnMut(Node<'t>)) {
    let mut stack = vec![n];
    while let Some(x) = stack.pop() {
        f(x);
        let mut cursor = x.walk();
        let kids: Vec<Node<'t>> = x.children(&mut cursor).collect();
        stack.extend(kids.into_iter().rev());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::Document;

    /// The warnings `check` gives on `src`: (line, column, global), line and column
    /// 1-based.
    fn warnings(src: &str) -> Vec<(usize, usize, String)> {
        let doc = Document::new(Lang::Triton, 0, src);
        let model = crate::syntax::analyze(Lang::Triton, src, doc.tree().expect("parses"));
        let mut report = SpecReport {
            plan: None,
            diagnostics: Vec::new(),
        };
        for i in 0..model.kernels.len() {
            check(src, &model.kernels, i, &mut report);
        }
        report
            .diagnostics
            .iter()
            .map(|d| {
                let line = src[..d.range.start].matches('\n').count() + 1;
                let col = d.range.start - src[..d.range.start].rfind('\n').map_or(0, |i| i + 1);
                let name = d.message.split('`').nth(1).unwrap_or("").to_string();
                (line, col + 1, name)
            })
            .collect()
    }

    const HEAD: &str = "import math\nimport triton\nimport triton.language as tl\nfrom triton.language import constexpr as cx\n";

    #[test]
    fn plain_globals_a_kernel_reads_are_warned_at_the_first_read() {
        let src = format!(
            "{HEAD}BLOCK = 512\nSCALE: tl.constexpr = 2\nEPS = 1e-6  # tolerance\nSHAPE = (4, 8)\nNAME = \"rows\"\n\n\
             @triton.jit\ndef k(x, y, n):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    \
             v = tl.load(x + offs, mask=offs < n) * SCALE\n    tl.store(y + offs, v + EPS + SHAPE[0], mask=offs < n)\n"
        );
        let w = warnings(&src);
        let names: Vec<&str> = w.iter().map(|x| x.2.as_str()).collect();
        assert_eq!(names, ["BLOCK", "SCALE", "EPS", "SHAPE"], "{w:?}");
        // At the first read: `BLOCK` in `* BLOCK` on line 13, column 31.
        assert_eq!(w[0], (13, 31, "BLOCK".to_string()));
    }

    #[test]
    fn constexprs_modules_functions_and_bound_names_are_not_warned() {
        let src = format!(
            "{HEAD}GOOD = tl.constexpr(256)\nALIASED = cx(8)\nLATER = 4\nLATER = tl.constexpr(LATER)\n\
             DTYPE = tl.float16\nP = 1\nQ = 2\nR = 3\nS = 4\nhelper = 7\n\n\
             @triton.jit\ndef helper(x):\n    return x * 2\n\n\
             @triton.jit\ndef k(x, n, P, Q: tl.constexpr = 3, BIG: tl.constexpr = S):\n    \
             R = P + 1\n    for i in range(Q):\n        x += helper(i) * GOOD * ALIASED * LATER\n    \
             y = tl.zeros((GOOD,), dtype=DTYPE) + math.pi + R + BIG\n    \
             tl.store(x + tl.arange(0, GOOD), y, mask=tl.arange(0, GOOD) < n, cache_modifier=NAME)\n"
        );
        assert_eq!(warnings(&src), [], "{src}");
        // An attribute's field and a keyword's name are not reads of the global.
        let src = format!(
            "{HEAD}BLOCK = 64\n\n@triton.jit\ndef k(x, cfg):\n    tl.store(x, cfg.BLOCK)\n    f(BLOCK=1)\n"
        );
        assert_eq!(warnings(&src), []);
    }

    #[test]
    fn a_helper_the_kernel_calls_is_checked_once() {
        let src = format!(
            "{HEAD}WIDTH = 1 << 10\n\n@triton.jit\ndef scale(v):\n    return v * WIDTH\n\n\
             @triton.jit\ndef a(x):\n    tl.store(x, scale(tl.load(x)))\n\n\
             @triton.jit\ndef b(x):\n    tl.store(x, scale(tl.load(x)) + 1)\n"
        );
        let w = warnings(&src);
        assert_eq!(w, [(9, 16, "WIDTH".to_string())]);
    }

    #[test]
    fn what_counts_as_plain() {
        for v in [
            "512",
            "1 << 10",
            "-1",
            "2 * (64 + 1)",
            "1e-6",
            "0x40",
            "(4, 8)",
            "'s'",
            "True",
        ] {
            assert!(is_plain(v), "{v}");
        }
        for v in [
            "tl.constexpr(4)",
            "N * 2",
            "tl.float32",
            "f()",
            "",
            "[BLOCK]",
        ] {
            assert!(!is_plain(v), "{v}");
        }
    }
}
