//! Triton kernel discovery. A kernel is a function decorated with `@triton.jit` (or
//! `@jit` imported from triton, with or without call arguments; `@triton.autotune` and
//! `@triton.heuristics` may be stacked above), or a function the file passes to a jit
//! call (`f = triton.jit(f)`, also wrapped: `triton.heuristics({...})(triton.jit(f))`).
//! Definitions are found at any statement nesting (`if`/`elif`/`else`, `try`/`except`,
//! `with`, classes, functions), never inside expressions. A jit function that another
//! jit function of the file calls is a helper, part of its callers' units, not a kernel,
//! unless it has its own `@bench` block.

use std::collections::HashSet;

use streaming_iterator::StreamingIterator;
use tree_sitter::{Node, QueryCursor};

use super::spec_block::{spec_block, LineIndex};
use super::unit::{CallGraph, Func};
use super::{queries, text, Autotune, Kernel, Lang, Param, ParamKind, SpecBlock};

pub(crate) fn analyze(src: &str, root: Node, lines: &LineIndex) -> Vec<Kernel> {
    let Some(query) = queries::TRITON_KERNELS.as_ref() else {
        return Vec::new();
    };
    let cap = |n| queries::capture(query, n);
    let (c_def, c_name, c_params, c_body) =
        (cap("definition"), cap("name"), cap("params"), cap("body"));
    let jit_names = jit_decorator_names(src, root);
    let (defs, jit_calls) = statement_defs_and_jit_calls(src, root, &jit_names);

    struct Found<'t> {
        name: Node<'t>,
        params: Node<'t>,
        spec: SpecBlock,
        autotune: Option<Autotune>,
        heuristics: Vec<String>,
    }
    let mut found: Vec<Found> = Vec::new();
    let mut funcs: Vec<Func> = Vec::new();
    // Read from the text, not the tree: the parser does not see long comment runs.
    let comments = super::py_comments::comment_lines(src);
    // The query runs at each statement-level definition only: expression trees are
    // not walked.
    let mut cursor = QueryCursor::new();
    cursor.set_max_start_depth(Some(0));
    for site in defs {
        let mut matches = cursor.matches(query, site, src.as_bytes());
        while let Some(m) = matches.next() {
            let (mut def, mut name, mut params, mut body) = (None, None, None, None);
            for c in m.captures {
                let i = Some(c.index);
                if i == c_def {
                    def = Some(c.node);
                } else if i == c_name {
                    name = Some(c.node);
                } else if i == c_params {
                    params = Some(c.node);
                } else if i == c_body {
                    body = Some(c.node);
                }
            }
            let (Some(def), Some(name), Some(params), Some(body)) = (def, name, params, body)
            else {
                continue;
            };
            let called_jit = jit_calls.iter().find(|c| c.name == text(src, name));
            let decorated = def.kind() == "decorated_definition";
            if !(decorated && is_jit(src, def, &jit_names)) && called_jit.is_none() {
                continue;
            }
            let mut heuristic_names = if decorated {
                heuristics(src, def)
            } else {
                Vec::new()
            };
            heuristic_names.extend(called_jit.into_iter().flat_map(|c| c.heuristics.clone()));
            funcs.push(Func {
                name: text(src, name).to_string(),
                def_range: def.byte_range(),
                body: Some(body),
                helper: true,
                calls: None,
            });
            found.push(Found {
                name,
                params,
                autotune: decorated.then(|| autotune(src, def)).flatten(),
                heuristics: heuristic_names,
                spec: spec_block(
                    Lang::Triton,
                    src,
                    lines,
                    &comments[..comments.partition_point(|c| c.end <= def.start_byte())],
                    def.start_byte(),
                ),
            });
        }
    }

    let mut graph = CallGraph::new(Lang::Triton, src, &funcs);
    let mut called: HashSet<&str> = HashSet::new();
    for (i, f) in funcs.iter().enumerate() {
        called.extend(graph.calls(i).into_iter().filter(|c| *c != f.name));
    }
    let constants = super::constants::python_constants(src);
    let mut kernels = Vec::new();
    for (i, f) in found.into_iter().enumerate() {
        let name = funcs[i].name.as_str();
        if called.contains(name) && f.spec.lines.is_empty() {
            continue; // a helper
        }
        let (callees, unit_ranges) = graph.unit(i);
        kernels.push(Kernel {
            name: name.to_string(),
            lang: Lang::Triton,
            name_range: f.name.byte_range(),
            def_range: funcs[i].def_range.clone(),
            params: params(src, f.params),
            template_params: Vec::new(),
            extern_c: false,
            spec: f.spec,
            callees,
            unit_ranges,
            autotune: f.autotune,
            heuristics: f.heuristics,
            constants: super::constants::constants_before(&constants, funcs[i].def_range.start),
        });
    }
    kernels.sort_by_key(|k| k.def_range.start);
    kernels
}

/// A function made a kernel by a call: `f = triton.jit(f)`, with the names of a
/// `triton.heuristics({...})` call wrapped around it.
struct JitCall {
    name: String,
    heuristics: Vec<String>,
}

/// The function definitions at statement level, at any nesting of compound statements
/// (decorated or not, in document order), and the functions passed to a jit call in an
/// expression statement. An explicit stack: nesting depth is input-controlled.
fn statement_defs_and_jit_calls<'t>(
    src: &str,
    root: Node<'t>,
    jit_names: &HashSet<String>,
) -> (Vec<Node<'t>>, Vec<JitCall>) {
    let (mut defs, mut calls) = (Vec::new(), Vec::new());
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        let mut cursor = n.walk();
        for c in n.named_children(&mut cursor) {
            match c.kind() {
                "decorated_definition" | "function_definition" => {
                    defs.push(c);
                    let inner = match c.kind() {
                        "decorated_definition" => c.child_by_field_name("definition"),
                        _ => Some(c),
                    };
                    stack.extend(inner.and_then(|d| d.child_by_field_name("body")));
                }
                "expression_statement" => jit_calls_in(src, c, jit_names, &mut calls),
                "block"
                | "if_statement"
                | "elif_clause"
                | "else_clause"
                | "try_statement"
                | "except_clause"
                | "except_group_clause"
                | "finally_clause"
                | "with_statement"
                | "for_statement"
                | "while_statement"
                | "class_definition" => stack.push(c),
                _ => {}
            }
        }
    }
    defs.sort_by_key(|d| d.start_byte());
    (defs, calls)
}

/// The jit calls of one expression statement whose one argument names a function:
/// `triton.jit(f)`, inside any expression (an assignment's value, a wrapping call).
fn jit_calls_in(src: &str, stmt: Node, jit_names: &HashSet<String>, out: &mut Vec<JitCall>) {
    let mut stack = vec![stmt];
    while let Some(n) = stack.pop() {
        let mut cursor = n.walk();
        stack.extend(n.named_children(&mut cursor));
        if n.kind() != "call" {
            continue;
        }
        let Some(f) = n.child_by_field_name("function") else {
            continue;
        };
        let spelled: String = text(src, f).split_whitespace().collect();
        let args = n.child_by_field_name("arguments");
        let arg = args.and_then(|a| a.named_child(0)).filter(|a| {
            a.kind() == "identifier" && args.is_some_and(|l| l.named_child_count() == 1)
        });
        let (true, Some(arg)) = (jit_names.contains(&spelled), arg) else {
            continue;
        };
        out.push(JitCall {
            name: text(src, arg).to_string(),
            heuristics: wrapping_heuristics(src, n),
        });
    }
}

/// The string keys of `triton.heuristics({...})` when `call` is its wrapped argument:
/// `triton.heuristics({"EVEN": ...})(triton.jit(f))`.
fn wrapping_heuristics(src: &str, call: Node) -> Vec<String> {
    let outer = call
        .parent()
        .filter(|p| p.kind() == "argument_list")
        .and_then(|p| p.parent())
        .filter(|p| p.kind() == "call");
    let Some(maker) = outer
        .and_then(|o| o.child_by_field_name("function"))
        .filter(|f| f.kind() == "call")
    else {
        return Vec::new();
    };
    let named = maker
        .child_by_field_name("function")
        .is_some_and(|f| text(src, f).trim_end().ends_with("heuristics"));
    match maker.child_by_field_name("arguments") {
        Some(args) if named => dictionary_keys(src, argument(src, args, "values", 0)),
        _ => Vec::new(),
    }
}

/// Decorator spellings that mean `triton.jit`: `triton.jit` and the local names of
/// `from triton import jit [as x]` at the top level.
fn jit_decorator_names(src: &str, root: Node) -> HashSet<String> {
    let mut names = HashSet::from(["triton.jit".to_string()]);
    let mut cursor = root.walk();
    for stmt in root.named_children(&mut cursor) {
        if stmt.kind() != "import_from_statement" {
            continue;
        }
        if stmt
            .child_by_field_name("module_name")
            .is_none_or(|m| text(src, m) != "triton")
        {
            continue;
        }
        let mut c2 = stmt.walk();
        for n in stmt.children_by_field_name("name", &mut c2) {
            match n.kind() {
                "dotted_name" if text(src, n) == "jit" => {
                    names.insert("jit".to_string());
                }
                "aliased_import" => {
                    let is_jit = n
                        .child_by_field_name("name")
                        .is_some_and(|x| text(src, x) == "jit");
                    if let (true, Some(alias)) = (is_jit, n.child_by_field_name("alias")) {
                        names.insert(text(src, alias).to_string());
                    }
                }
                _ => {}
            }
        }
    }
    names
}

/// Does one decorator of `def` (a `decorated_definition`) mean `triton.jit`?
fn is_jit(src: &str, def: Node, jit_names: &HashSet<String>) -> bool {
    let mut cursor = def.walk();
    let found = def
        .named_children(&mut cursor)
        .filter(|d| d.kind() == "decorator")
        .any(|d| {
            let Some(mut expr) = d.named_child(0) else {
                return false;
            };
            if expr.kind() == "call" {
                match expr.child_by_field_name("function") {
                    Some(f) => expr = f,
                    None => return false,
                }
            }
            let spelled: String = text(src, expr)
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect();
            jit_names.contains(&spelled)
        });
    found
}

/// The `@triton.autotune(...)` (or `@autotune(...)`) decorator of `def`, with the configs
/// its literal `configs=[triton.Config({...}, num_warps=..., num_stages=...), ...]` list
/// gives.
fn autotune(src: &str, def: Node) -> Option<Autotune> {
    decorator_calls(src, def, "autotune")
        .into_iter()
        .find_map(|(d, call)| {
            let args = call.child_by_field_name("arguments")?;
            let list = argument(src, args, "configs", 0);
            let configs = list
                .filter(|l| l.kind() == "list")
                .and_then(|l| {
                    let mut c = l.walk();
                    let items: Vec<Node> = l.named_children(&mut c).collect();
                    items.into_iter().map(|i| config(src, i)).collect()
                })
                .unwrap_or_default();
            Some(Autotune {
                range: d.byte_range(),
                configs,
            })
        })
}

/// The names a `@triton.heuristics({"EVEN": lambda args: ...})` decorator of `def`
/// computes at launch: the string keys of its literal dictionary.
fn heuristics(src: &str, def: Node) -> Vec<String> {
    let mut out = Vec::new();
    for (_, call) in decorator_calls(src, def, "heuristics") {
        let dict = call
            .child_by_field_name("arguments")
            .and_then(|a| argument(src, a, "values", 0));
        out.extend(dictionary_keys(src, dict));
    }
    out
}

/// The string keys of a literal dictionary (none for anything else).
fn dictionary_keys(src: &str, dict: Option<Node>) -> Vec<String> {
    let Some(dict) = dict.filter(|d| d.kind() == "dictionary") else {
        return Vec::new();
    };
    let mut c = dict.walk();
    let keys: Vec<String> = dict
        .named_children(&mut c)
        .filter_map(|pair| pair.child_by_field_name("key"))
        .filter(|k| k.kind() == "string")
        .map(|key| {
            text(src, key)
                .trim_matches(|c| c == '\'' || c == '"')
                .to_string()
        })
        .collect();
    keys
}

/// The decorators of `def` that call `name` (`@triton.name(...)`, `@name(...)`), with
/// their call nodes.
fn decorator_calls<'t>(src: &str, def: Node<'t>, name: &str) -> Vec<(Node<'t>, Node<'t>)> {
    let mut cursor = def.walk();
    let decorators: Vec<Node> = def
        .named_children(&mut cursor)
        .filter(|d| d.kind() == "decorator")
        .collect();
    decorators
        .into_iter()
        .filter_map(|d| {
            let call = d.named_child(0).filter(|e| e.kind() == "call")?;
            let f = call.child_by_field_name("function")?;
            let spelled: String = text(src, f)
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect();
            let named = spelled == name
                || spelled
                    .strip_suffix(name)
                    .is_some_and(|head| head.ends_with('.'));
            named.then_some((d, call))
        })
        .collect()
}

/// The argument named `name` of a call's `argument_list`, else its `position`-th
/// positional one.
fn argument<'t>(src: &str, args: Node<'t>, name: &str, position: usize) -> Option<Node<'t>> {
    let mut cursor = args.walk();
    let all: Vec<Node> = args.named_children(&mut cursor).collect();
    all.iter()
        .find(|a| {
            a.kind() == "keyword_argument"
                && a.child_by_field_name("name")
                    .is_some_and(|n| text(src, n) == name)
        })
        .and_then(|a| a.child_by_field_name("value"))
        .or_else(|| {
            all.iter()
                .filter(|a| a.kind() != "keyword_argument" && a.kind() != "comment")
                .nth(position)
                .copied()
        })
}

/// One `triton.Config({...}, num_warps=4, num_stages=3)`: its integer values by name, or
/// None when it is not written that way.
fn config(src: &str, node: Node) -> Option<Vec<(String, i64)>> {
    if node.kind() != "call" {
        return None;
    }
    let f = node.child_by_field_name("function")?;
    let spelled = text(src, f);
    if spelled != "Config" && !spelled.ends_with(".Config") {
        return None;
    }
    let args = node.child_by_field_name("arguments")?;
    let dict = argument(src, args, "kwargs", 0).filter(|d| d.kind() == "dictionary")?;
    let mut out = Vec::new();
    let mut cursor = dict.walk();
    for pair in dict.named_children(&mut cursor) {
        if pair.kind() != "pair" {
            continue;
        }
        let key = pair.child_by_field_name("key")?;
        let value = pair.child_by_field_name("value")?;
        let k = text(src, key);
        let k = k.trim_matches(|c| c == '\'' || c == '"');
        out.push((k.to_string(), int_value(src, value)?));
    }
    for name in ["num_warps", "num_stages"] {
        let mut c = args.walk();
        let kw = args.named_children(&mut c).find(|a| {
            a.kind() == "keyword_argument"
                && a.child_by_field_name("name")
                    .is_some_and(|n| text(src, n) == name)
        });
        if let Some(v) = kw.and_then(|a| a.child_by_field_name("value")) {
            out.push((name.to_string(), int_value(src, v)?));
        }
    }
    Some(out)
}

fn int_value(src: &str, node: Node) -> Option<i64> {
    python_int(text(src, node))
}

/// A Python integer literal (`128`, `1_024`, `0x80`, `-1`) or `True`/`False` (1/0).
pub(crate) fn python_int(text: &str) -> Option<i64> {
    let t: String = text.chars().filter(|c| *c != '_').collect();
    match t.as_str() {
        "True" => return Some(1),
        "False" => return Some(0),
        _ => {}
    }
    let (neg, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest.trim()),
        None => (false, t.as_str()),
    };
    let v = if let Some(h) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        i64::from_str_radix(h, 16).ok()?
    } else {
        digits.parse::<i64>().ok()?
    };
    Some(if neg { -v } else { v })
}

fn params(src: &str, list: Node) -> Vec<Param> {
    let mut cursor = list.walk();
    let mut out = Vec::new();
    for p in list.named_children(&mut cursor) {
        let (name, annotation) = match p.kind() {
            "identifier" => (Some(p), None),
            "typed_parameter" => (p.named_child(0), p.child_by_field_name("type")),
            "default_parameter" => (p.child_by_field_name("name"), None),
            "typed_default_parameter" => {
                (p.child_by_field_name("name"), p.child_by_field_name("type"))
            }
            "list_splat_pattern" | "dictionary_splat_pattern" => (p.named_child(0), None),
            _ => continue, // `*`, `/` separators, comments
        };
        let Some(name) = name else { continue };
        let annotation: Option<String> = annotation.map(|a| {
            text(src, a)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        });
        let constexpr = annotation.as_deref().is_some_and(|a| {
            // A string annotation (`BLOCK: "tl.constexpr"`) counts as Triton reads it.
            let compact: String = a
                .chars()
                .filter(|c| !c.is_whitespace() && *c != '"' && *c != '\'')
                .collect();
            compact == "constexpr" || compact.ends_with(".constexpr")
        });
        let kind = if constexpr {
            ParamKind::Constexpr
        } else {
            ParamKind::TritonArg { annotation }
        };
        let default = p
            .child_by_field_name("value")
            .filter(|_| p.kind().ends_with("default_parameter"))
            .map(|v| text(src, v).trim().to_string());
        out.push(Param {
            name: text(src, name).to_string(),
            index: out.len(),
            range: p.byte_range(),
            kind,
            default,
        });
    }
    out
}
