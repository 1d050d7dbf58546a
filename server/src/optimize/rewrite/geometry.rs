//! Launch-geometry rewrites: the tunable sweep (both languages), the CUDA block-shape
//! sweep, float4-style vectorized access and grid-stride loops. Each is a pure edit of
//! the kernel's `@bench` lines and, for `vectorize` and `grid_stride`, of the kernel body;
//! every other byte of the file stays as it was. Also the helpers the Triton rewrites
//! share: parameter parsing, the current plan, and [`finish`], which keeps only the
//! candidates that still parse and whose spec still plans, so the step loop never sees a
//! spec error that a rewrite made.
//!
//! Kernel bodies are matched on the tree-sitter tree, never by regular expressions; a
//! kernel that does not have the exact shape a rewrite needs gets `NotApplicable` with the
//! statement that did not fit. `block_size` does not read the body: a body that
//! hard-codes the old block size (`__shared__ float s[256]`) still gets candidates, whose
//! label says `; body has literal 256`, and verification rejects the wrong ones.

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::{Candidate, RewriteContext, RewriteError};
use crate::document::Document;
use crate::optimize::edit;
use crate::spec::{self, BenchPlan, EvalEnv, Launch};
use crate::syntax::{self, ByteRange, Lang, ParamKind};

type R = Result<Vec<Candidate>, RewriteError>;

// ---------------------------------------------------------------------------------------
// Shared with the Triton rewrites.

pub(super) fn not_applicable(message: impl Into<String>) -> RewriteError {
    RewriteError::NotApplicable(message.into())
}

fn bad_param(name: &str, message: impl Into<String>) -> RewriteError {
    RewriteError::BadParam {
        name: name.to_string(),
        message: message.into(),
    }
}

/// `NotApplicable` unless the kernel is written in `lang`.
pub(super) fn require_lang(
    cx: &RewriteContext<'_>,
    lang: Lang,
    id: &str,
) -> Result<(), RewriteError> {
    if cx.lang == lang && cx.kernel.lang == lang {
        return Ok(());
    }
    let (want, have) = match lang {
        Lang::Cuda => ("CUDA", "a Triton"),
        Lang::Triton => ("Triton", "a CUDA"),
    };
    Err(not_applicable(format!(
        "`{id}` rewrites {want} kernels; `{}` is {have} kernel",
        cx.kernel.name
    )))
}

/// The kernel's plan as it stands; a rewrite of a kernel whose spec does not plan could
/// not be checked, so that is `NotApplicable`.
pub(super) fn current_plan(cx: &RewriteContext<'_>) -> Result<BenchPlan, RewriteError> {
    let report = spec::analyze(cx.kernel, &cx.model.kernels, &EvalEnv::default());
    report.plan.ok_or_else(|| {
        not_applicable(if cx.kernel.spec.lines.is_empty() {
            format!(
                "`{}` has no @bench spec; add one (code action \"Insert @bench spec\") first",
                cx.kernel.name
            )
        } else {
            format!(
                "`{}`'s @bench spec has errors; fix them first (`kernel-lsp check` lists them)",
                cx.kernel.name
            )
        })
    })
}

/// A candidate before [`finish`] has checked it.
pub(super) struct Draft {
    pub label: String,
    pub text: String,
}

/// The drafts that change the text, parse without new syntax errors and whose spec
/// plans, deduplicated; `dropped` holds reasons for candidates already given up on. When
/// nothing is left, `NotApplicable` says why each one went.
pub(super) fn finish(cx: &RewriteContext<'_>, drafts: Vec<Draft>, mut dropped: Vec<String>) -> R {
    let mut out: Vec<Candidate> = Vec::new();
    for d in drafts {
        if d.text == cx.text || out.iter().any(|c| c.text == d.text) {
            continue;
        }
        match still_plans(cx, &d.text) {
            Ok(()) => out.push(Candidate {
                label: d.label,
                text: d.text,
            }),
            Err(why) => dropped.push(format!("{}: {why}", d.label)),
        }
    }
    if out.is_empty() {
        dropped.dedup();
        return Err(not_applicable(if dropped.is_empty() {
            format!("nothing to change in `{}`", cx.kernel.name)
        } else {
            format!(
                "no usable candidate for `{}`: {}",
                cx.kernel.name,
                dropped.join("; ")
            )
        }));
    }
    Ok(out)
}

/// Does `text` parse as well as the original and does the kernel's spec still plan?
fn still_plans(cx: &RewriteContext<'_>, text: &str) -> Result<(), String> {
    let doc = Document::new(cx.lang, 0, text);
    let tree = doc
        .tree()
        .ok_or("the parser gave up on the rewritten file")?;
    let model = syntax::analyze(cx.lang, text, tree);
    if model.syntax_errors.len() > cx.model.syntax_errors.len() {
        let first = model
            .syntax_errors
            .first()
            .map_or(String::new(), |e| e.message.clone());
        return Err(format!("the rewrite leaves a syntax error ({first})"));
    }
    let kernel = model
        .kernel(&cx.kernel.name)
        .ok_or("the kernel is no longer found in the rewritten file")?;
    let report = spec::analyze(kernel, &model.kernels, &EvalEnv::default());
    if report.plan.is_some() {
        return Ok(());
    }
    Err(report.diagnostics.first().map_or_else(
        || "the @bench spec no longer plans".to_string(),
        |d| format!("the @bench spec no longer plans: {}", d.message),
    ))
}

/// A list of integers >= `min` (a single integer counts as a list of one), or `default`.
pub(super) fn param_ints(
    params: &BTreeMap<String, serde_json::Value>,
    name: &str,
    default: &[i64],
    min: i64,
) -> Result<Vec<i64>, RewriteError> {
    super::int_param(params, name, default, min..=i64::MAX)
}

/// A non-empty list of positive numbers, or `default`.
pub(super) fn param_f64s(
    params: &BTreeMap<String, serde_json::Value>,
    name: &str,
    default: &[f64],
) -> Result<Vec<f64>, RewriteError> {
    let one = |v: &serde_json::Value| {
        v.as_f64()
            .filter(|x| x.is_finite() && *x > 0.0)
            .ok_or_else(|| {
                bad_param(
                    name,
                    format!("expected a list of positive numbers, found `{v}`"),
                )
            })
    };
    match params.get(name) {
        None => Ok(default.to_vec()),
        Some(serde_json::Value::Array(items)) if !items.is_empty() => {
            items.iter().map(one).collect()
        }
        Some(v @ serde_json::Value::Number(_)) => Ok(vec![one(v)?]),
        Some(v) => Err(bad_param(
            name,
            format!("expected a non-empty list of positive numbers, found `{v}`"),
        )),
    }
}

fn param_str(
    params: &BTreeMap<String, serde_json::Value>,
    name: &str,
) -> Result<Option<String>, RewriteError> {
    match params.get(name) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(bad_param(name, format!("expected a string, found `{v}`"))),
    }
}

/// `[[32, 8], ...]`: pairs of positive integers.
fn param_shapes(
    params: &BTreeMap<String, serde_json::Value>,
    name: &str,
    default: &[[u64; 2]],
) -> Result<Vec<[u64; 2]>, RewriteError> {
    let Some(v) = params.get(name) else {
        return Ok(default.to_vec());
    };
    let bad = || {
        bad_param(
            name,
            format!("expected a list of [x, y] pairs of positive integers, found `{v}`"),
        )
    };
    let items = v.as_array().filter(|a| !a.is_empty()).ok_or_else(bad)?;
    items
        .iter()
        .map(|pair| {
            let p = pair.as_array().filter(|p| p.len() == 2).ok_or_else(bad)?;
            let x = p[0].as_u64().filter(|x| *x > 0).ok_or_else(bad)?;
            let y = p[1].as_u64().filter(|y| *y > 0).ok_or_else(bad)?;
            Ok([x, y])
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// tunable_sweep

/// For every `tune NAME in [...]` with several values, one candidate per value other than
/// the current one, written as `NAME = V` in the spec. Param `name` (optional) limits the
/// sweep to one tunable.
pub fn tunable_sweep(cx: &RewriteContext<'_>) -> R {
    let plan = current_plan(cx)?;
    let only = param_str(cx.params, "name")?;
    let tunables: Vec<_> = plan
        .tunables
        .iter()
        .filter(|t| t.values.len() > 1)
        .filter(|t| only.as_ref().is_none_or(|n| *n == t.name))
        .collect();
    if tunables.is_empty() {
        return Err(not_applicable(match only {
            Some(n) => format!(
                "`{}` has no `tune {n} in [...]` line with several values",
                cx.kernel.name
            ),
            None => format!(
                "`{}` has no `tune NAME in [...]` line with several values",
                cx.kernel.name
            ),
        }));
    }
    let mut drafts = Vec::new();
    for t in tunables {
        for v in t.values.iter().filter(|v| **v != t.current) {
            drafts.push(Draft {
                label: format!("{}={v}", t.name),
                text: edit::set_spec_value(cx.text, cx.kernel, &t.name, &v.to_string()),
            });
        }
    }
    finish(cx, drafts, Vec::new())
}

// ---------------------------------------------------------------------------------------
// block_size

const DIMS: [&str; 3] = ["x", "y", "z"];

/// New CUDA block shapes, with the `grid` dims that divide by the old block size
/// rescaled. See the module doc for bodies that hard-code the block size.
pub fn block_size(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, "block_size")?;
    let plan = current_plan(cx)?;
    let sizes_1d = param_ints(cx.params, "sizes_1d", &[64, 128, 256, 512, 1024], 1)?;
    let shapes_2d = param_shapes(
        cx.params,
        "shapes_2d",
        &[
            [32, 8],
            [32, 4],
            [64, 4],
            [32, 16],
            [16, 16],
            [16, 8],
            [8, 32],
        ],
    )?;
    let k = &cx.kernel.name;
    let block = edit::spec_assignment(cx.kernel, "block").ok_or_else(|| {
        not_applicable(format!(
            "`{k}`'s spec has no `block = ...`; block_size rewrites a block of integer literals"
        ))
    })?;
    let Some(old) = literal_dims(&block.text) else {
        let used = words(&block.text);
        if let Some(t) = plan
            .tunables
            .iter()
            .find(|t| used.contains(t.name.as_str()))
        {
            return Err(not_applicable(format!(
                "`block` comes from tune {}; tunable_sweep covers it",
                t.name
            )));
        }
        return Err(not_applicable(format!(
            "`block = {}` is not made of integer literals; block_size rewrites literal blocks only",
            block.text
        )));
    };
    let grid = edit::spec_assignment(cx.kernel, "grid")
        .ok_or_else(|| not_applicable(format!("`{k}`'s spec has no `grid = ...`")))?;
    let parts = components(&grid.text);
    let func = kernel_function(cx);
    let bound = func.and_then(|f| launch_bounds(cx.text, f));
    let hard = func.and_then(|f| hard_coded(cx.text, f, &old));

    let shapes: Vec<Vec<u64>> = match old.len() {
        1 => sizes_1d.iter().map(|s| vec![*s as u64]).collect(),
        2 => shapes_2d.iter().map(|s| s.to_vec()).collect(),
        _ => shapes_2d.iter().map(|s| vec![s[0], s[1], old[2]]).collect(),
    };
    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    for new in shapes {
        let threads = new.iter().fold(1u64, |a, d| a.saturating_mul(*d));
        if new == old || threads > 1024 || bound.is_some_and(|b| threads > b) {
            continue;
        }
        let shown = format_dims(&new);
        let mut edits = Vec::new();
        let mut failed = None;
        for (j, (o, n)) in old.iter().zip(&new).enumerate() {
            if o == n {
                continue;
            }
            let Some(part) = parts.get(j) else {
                failed = Some(format!(
                    "grid has no {} dim to rescale for block {} {o} -> {n}",
                    DIMS[j], DIMS[j]
                ));
                break;
            };
            match rescale(&grid.text[part.clone()], *o, *n) {
                Some(t) => edits.push((
                    grid.range.start + part.start..grid.range.start + part.end,
                    t,
                )),
                None => {
                    failed = Some(format!(
                        "grid {} `{}` has no `cdiv(X, {o})` or `(X + {o} - 1) / {o}` to rescale",
                        DIMS[j],
                        &grid.text[part.clone()]
                    ));
                    break;
                }
            }
        }
        if let Some(why) = failed {
            dropped.push(format!("block={shown}: {why}"));
            continue;
        }
        edits.push((block.range.clone(), shown.clone()));
        let mut label = format!("block={shown}");
        if let Some(v) = hard {
            label.push_str(&format!("; body has literal {v}"));
        }
        drafts.push(Draft {
            label,
            text: edit::replace_ranges(cx.text, edits),
        });
    }
    if drafts.is_empty() && dropped.is_empty() {
        return Err(not_applicable(format!(
            "no block shape to try for `{k}`: every listed shape is the current one or over {} threads",
            bound.unwrap_or(1024)
        )));
    }
    finish(cx, drafts, dropped)
}

/// `256` -> [256]; `(16, 16)` -> [16, 16]; None unless every dim is an integer literal.
fn literal_dims(expr: &str) -> Option<Vec<u64>> {
    let dims: Vec<u64> = components(expr)
        .into_iter()
        .map(|r| parse_uint(strip_parens(&expr[r])))
        .collect::<Option<_>>()?;
    (!dims.is_empty() && dims.len() <= 3 && dims.iter().all(|d| *d > 0)).then_some(dims)
}

fn format_dims(dims: &[u64]) -> String {
    match dims {
        [x] => x.to_string(),
        _ => {
            let d: Vec<String> = dims.iter().map(u64::to_string).collect();
            format!("({})", d.join(", "))
        }
    }
}

/// `component` with every division by `old` made a division by `new`; None if it has none.
fn rescale(component: &str, old: u64, new: u64) -> Option<String> {
    let edits: Vec<(ByteRange, String)> = divisions(component)
        .into_iter()
        .filter(|d| parse_uint(&d.den) == Some(old))
        .map(|d| (d.range, format!("cdiv({}, {new})", d.num)))
        .collect();
    (!edits.is_empty()).then(|| edit::replace_ranges(component, edits))
}

/// `__launch_bounds__(N, ...)`'s N.
fn launch_bounds(src: &str, func: Node<'_>) -> Option<u64> {
    let mut c = func.walk();
    let lb = func
        .children(&mut c)
        .find(|n| n.kind() == "launch_bounds")?;
    let mut c = lb.walk();
    let first = lb.named_children(&mut c).next()?;
    parse_int_literal(text(src, first))
}

/// An integer literal in the body equal to an old block dim (above 1) or to the old
/// thread count: the body may hard-code the block size.
fn hard_coded(src: &str, func: Node<'_>, old: &[u64]) -> Option<u64> {
    let body = func.child_by_field_name("body")?;
    let mut watch: Vec<u64> = old.iter().copied().filter(|d| *d > 1).collect();
    watch.push(old.iter().fold(1u64, |a, d| a.saturating_mul(*d)));
    let mut found = None;
    walk(body, &mut |n| {
        if found.is_none() && n.kind() == "number_literal" {
            if let Some(v) = parse_int_literal(text(src, n)).filter(|v| watch.contains(v)) {
                found = Some(v);
            }
        }
        true
    });
    found
}

// ---------------------------------------------------------------------------------------
// Spec-expression text: components, divisions.

/// Top-level components of `(a, b[, c])`, or the whole (trimmed) text as one; ranges
/// into `expr`.
fn components(expr: &str) -> Vec<ByteRange> {
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

fn trim_range(s: &str, r: ByteRange) -> ByteRange {
    let t = &s[r.clone()];
    let lead = t.len() - t.trim_start().len();
    r.start + lead..r.start + lead + t.trim().len()
}

/// `(x)` -> `x` (one level, only when the parentheses enclose everything).
fn strip_parens(s: &str) -> &str {
    let t = s.trim();
    if t.starts_with('(') && matching_close(t, 0) == Some(t.len() - 1) {
        return t[1..t.len() - 1].trim();
    }
    t
}

/// Index of the `)` matching the `(` at `open`.
fn matching_close(s: &str, open: usize) -> Option<usize> {
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
fn matching_open(s: &str, close: usize) -> Option<usize> {
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
fn split_top(s: &str, sep: u8) -> Vec<ByteRange> {
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

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Every identifier-like word of `s`.
fn words(s: &str) -> BTreeSet<&str> {
    s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect()
}

fn parse_uint(s: &str) -> Option<u64> {
    let s = s.trim();
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// A C integer literal (`256`, `256u`, `0x100`).
fn parse_int_literal(s: &str) -> Option<u64> {
    let s = s.trim().trim_end_matches(['u', 'U', 'l', 'L']);
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => parse_uint(s),
    }
}

/// `cdiv(num, den)` or `(num + den - 1) / den` in a spec expression.
#[derive(Debug, PartialEq)]
struct Division {
    range: ByteRange,
    num: String,
    den: String,
}

/// The outermost divisions of `s`, in order.
fn divisions(s: &str) -> Vec<Division> {
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

// ---------------------------------------------------------------------------------------
// Kernel bodies: the 1-D elementwise shape.

fn text<'s>(src: &'s str, n: Node<'_>) -> &'s str {
    src.get(n.byte_range()).unwrap_or("")
}

fn first_line(s: &str) -> &str {
    let l = s.lines().next().unwrap_or("").trim_end();
    l.trim_end_matches('{').trim_end()
}

/// Pre-order walk; `f` returns whether to visit the node's children.
fn walk<'t>(node: Node<'t>, f: &mut dyn FnMut(Node<'t>) -> bool) {
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        if f(n) {
            let mut c = n.walk();
            let children: Vec<Node<'t>> = n.children(&mut c).collect();
            stack.extend(children.into_iter().rev());
        }
    }
}

fn named_children(n: Node<'_>) -> Vec<Node<'_>> {
    let mut c = n.walk();
    n.named_children(&mut c).collect()
}

/// The kernel's `function_definition` node.
fn kernel_function<'a>(cx: &RewriteContext<'a>) -> Option<Node<'a>> {
    let r = &cx.kernel.name_range;
    let mut n = cx
        .tree
        .root_node()
        .descendant_for_byte_range(r.start, r.end)?;
    loop {
        if n.kind() == "function_definition" {
            return Some(n);
        }
        n = n.parent()?;
    }
}

/// The leading whitespace of the line holding byte `pos`.
fn line_indent(src: &str, pos: usize) -> &str {
    let start = src[..pos].rfind('\n').map_or(0, |i| i + 1);
    let line = &src[start..];
    &line[..line.len() - line.trim_start_matches([' ', '\t']).len()]
}

/// Lines after the first that start with `from` start with `to` instead.
fn reindent(s: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, line) in s.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
            if !line.trim().is_empty() {
                if let Some(rest) = line.strip_prefix(from) {
                    out.push_str(to);
                    out.push_str(rest);
                    continue;
                }
            }
        }
        out.push_str(line);
    }
    out
}

/// `src[span]` with the (sorted, non-overlapping, inside `span`) replacements made.
fn render(src: &str, span: &ByteRange, reps: &[(ByteRange, String)]) -> String {
    let mut reps: Vec<&(ByteRange, String)> = reps.iter().collect();
    reps.sort_by_key(|(r, _)| r.start);
    let mut out = String::new();
    let mut at = span.start;
    for (r, new) in reps {
        if r.start < at || r.end > span.end {
            continue;
        }
        out.push_str(&src[at..r.start]);
        out.push_str(new);
        at = r.end;
    }
    out.push_str(&src[at..span.end]);
    out
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Guard {
    /// `if (i < n) BODY` ending the kernel.
    Block,
    /// `if (i >= n) return;` followed by the body.
    EarlyReturn,
}

/// `int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }` (or the
/// early-return form), located in the tree.
struct Elementwise<'t> {
    index: String,
    /// The index's type without qualifiers (`int`, `unsigned int`, `size_t`).
    index_ty: String,
    init: String,
    decl: Node<'t>,
    guard: Node<'t>,
    /// End of the guard's `( ... )`.
    cond_end: usize,
    bound: Node<'t>,
    form: Guard,
    /// Comments between the index and the guard.
    between: Vec<Node<'t>>,
    /// The guarded statements (comments among them included), at least one.
    body: Vec<Node<'t>>,
    /// End of the last guarded statement.
    body_end: usize,
    /// End of what the rewrite replaces: the guard (`Block`) or the last statement.
    end: usize,
    /// Indentation of the guard's line and one indentation step.
    indent: String,
    unit: String,
}

impl Elementwise<'_> {
    fn body_span(&self) -> ByteRange {
        self.body[0].start_byte()..self.body_end
    }
}

const INDEX_SHAPE: &str = "`int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }` (or `if (i >= n) return;`)";

fn one_d_index_forms() -> Vec<String> {
    let products = ["blockIdx.x*blockDim.x", "blockDim.x*blockIdx.x"];
    let mut out = Vec::new();
    for p in products {
        for q in [p.to_string(), format!("({p})")] {
            out.push(format!("{q}+threadIdx.x"));
            out.push(format!("threadIdx.x+{q}"));
        }
    }
    out
}

fn match_elementwise<'t>(src: &str, func: Node<'t>) -> Result<Elementwise<'t>, String> {
    let body = func
        .child_by_field_name("body")
        .ok_or("the kernel has no body")?;
    let stmts = named_children(body);
    let mut idx = 0;
    let decl = loop {
        let Some(&s) = stmts.get(idx) else {
            return Err(
                "it has no 1-D thread index `int i = blockIdx.x * blockDim.x + threadIdx.x;`"
                    .into(),
            );
        };
        idx += 1;
        let t = text(src, s);
        let reads_index = t.contains("threadIdx") || t.contains("blockIdx");
        match s.kind() {
            "comment" => continue,
            "declaration" if !reads_index => continue,
            "declaration" => break s,
            _ => return Err(format!("`{}` comes before the thread index", first_line(t))),
        }
    };
    let decl_text = first_line(text(src, decl));
    let mut c = decl.walk();
    let declarators: Vec<Node> = decl.children_by_field_name("declarator", &mut c).collect();
    let [d] = declarators.as_slice() else {
        return Err(format!("`{decl_text}` declares several names"));
    };
    let (Some(name), Some(value)) = (
        d.child_by_field_name("declarator")
            .filter(|n| n.kind() == "identifier"),
        d.child_by_field_name("value"),
    ) else {
        return Err(format!("`{decl_text}` is not `int i = ...;`"));
    };
    let init = text(src, value);
    let norm: String = init.chars().filter(|c| !c.is_whitespace()).collect();
    if !one_d_index_forms().contains(&norm) {
        if [".y", ".z"].iter().any(|d| norm.contains(d)) {
            return Err(format!(
                "`{decl_text}` is a 2-D or 3-D index; only 1-D kernels are handled"
            ));
        }
        return Err(format!(
            "`{decl_text}` is not the 1-D index `blockIdx.x * blockDim.x + threadIdx.x`"
        ));
    }
    let index = text(src, name).to_string();
    let index_ty = decl
        .child_by_field_name("type")
        .map_or("int", |t| text(src, t))
        .to_string();

    let mut between = Vec::new();
    let guard = loop {
        let Some(&s) = stmts.get(idx) else {
            return Err(format!(
                "no bounds check `if ({index} < n)` follows the index"
            ));
        };
        idx += 1;
        if s.kind() == "comment" {
            between.push(s);
            continue;
        }
        break s;
    };
    let guard_text = first_line(text(src, guard));
    if guard.kind() != "if_statement" {
        return Err(format!(
            "`{guard_text}` follows the index where the bounds check `if ({index} < n)` should be"
        ));
    }
    if guard.child_by_field_name("alternative").is_some() {
        return Err(format!("the bounds check `{guard_text}` has an `else`"));
    }
    let cond = guard
        .child_by_field_name("condition")
        .ok_or("the bounds check has no condition")?;
    let value = cond
        .child_by_field_name("value")
        .filter(|v| v.kind() == "binary_expression");
    let parts = value.and_then(|v| {
        Some((
            v.child_by_field_name("left")?,
            text(src, v.child_by_field_name("operator")?),
            v.child_by_field_name("right")?,
        ))
    });
    let is_index = |n: Node| n.kind() == "identifier" && text(src, n) == index;
    let (form, bound) = match parts {
        Some((l, "<", r)) if is_index(l) => (Guard::Block, r),
        Some((l, ">", r)) if is_index(r) => (Guard::Block, l),
        Some((l, ">=", r)) if is_index(l) => (Guard::EarlyReturn, r),
        Some((l, "<=", r)) if is_index(r) => (Guard::EarlyReturn, l),
        _ => {
            return Err(format!(
                "`{}` is not a bounds check `{index} < n` or `{index} >= n`",
                text(src, cond)
            ))
        }
    };
    let mut bound_uses_index = false;
    walk(bound, &mut |n| {
        bound_uses_index |= is_index(n);
        true
    });
    if bound_uses_index {
        return Err(format!(
            "the bound `{}` depends on `{index}`",
            text(src, bound)
        ));
    }
    let consequence = guard
        .child_by_field_name("consequence")
        .ok_or("the bounds check has no body")?;
    let rest: Vec<Node> = stmts[idx..].to_vec();
    let (guarded, body_end, end) = match form {
        Guard::Block => {
            if let Some(s) = rest.iter().find(|s| s.kind() != "comment") {
                return Err(format!(
                    "`{}` follows the bounds check; the check must end the kernel",
                    first_line(text(src, *s))
                ));
            }
            let inner = if consequence.kind() == "compound_statement" {
                named_children(consequence)
            } else {
                vec![consequence]
            };
            let body_end = inner.last().map_or(guard.end_byte(), |n| n.end_byte());
            (inner, body_end, guard.end_byte())
        }
        Guard::EarlyReturn => {
            let plain_return =
                |n: Node| n.kind() == "return_statement" && n.named_child_count() == 0;
            let ok = plain_return(consequence)
                || (consequence.kind() == "compound_statement"
                    && matches!(named_children(consequence).as_slice(), [r] if plain_return(*r)));
            if !ok {
                return Err(format!(
                    "`{guard_text}` must be followed by a plain `return;`"
                ));
            }
            let last = rest
                .iter()
                .rposition(|s| s.kind() != "comment")
                .ok_or("nothing follows the early return")?;
            let end = rest[last].end_byte();
            (rest[..=last].to_vec(), end, end)
        }
    };
    if !guarded.iter().any(|s| s.kind() != "comment") {
        return Err("the guarded body is empty".into());
    }
    let indent = line_indent(src, guard.start_byte()).to_string();
    let outer = line_indent(src, func.start_byte());
    let unit = match indent.strip_prefix(outer) {
        Some(u) if !u.is_empty() => u.to_string(),
        _ => "    ".to_string(),
    };
    Ok(Elementwise {
        index,
        index_ty,
        init: init.to_string(),
        decl,
        guard,
        cond_end: cond.end_byte(),
        bound,
        form,
        between,
        body: guarded,
        body_end,
        end,
        indent,
        unit,
    })
}

/// What the guarded body does with the index and the pointer parameters.
#[derive(Default)]
struct BodyFacts {
    /// Per pointer parameter accessed as `p[i]`.
    buffers: BTreeMap<String, BufferUse>,
    /// `p[i]` of a pointer parameter: (range, p).
    subscripts: Vec<(ByteRange, String)>,
    /// Uses of the index outside those subscripts.
    index_uses: Vec<ByteRange>,
    /// Every use of the index.
    all_index: Vec<ByteRange>,
    /// A guarded statement is a declaration (per-lane copies need their own scope).
    declares: bool,
}

struct BufferUse {
    pointee: String,
    read: bool,
    written: bool,
    /// Every write is a plain `p[i] = ...;` statement of the guarded body itself.
    writes_unconditional: bool,
}

fn is_collective(name: &str) -> bool {
    const PREFIXES: [&str; 8] = [
        "__sync",
        "__shfl",
        "__ballot",
        "__any",
        "__all",
        "__match",
        "__reduce",
        "__activemask",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
        || name.ends_with(".sync")
        || name.ends_with("::sync")
}

/// Checks that the guarded body handles its own element only, and collects its accesses.
/// `strict` (vectorize): every use of a pointer parameter must be `p[i]`.
fn inspect_body(
    src: &str,
    shape: &Elementwise<'_>,
    pointers: &BTreeMap<String, String>,
    strict: bool,
) -> Result<BodyFacts, String> {
    let i = shape.index.as_str();
    let top: BTreeSet<usize> = shape.body.iter().map(|n| n.id()).collect();
    let mut facts = BodyFacts {
        declares: shape.body.iter().any(|n| n.kind() == "declaration"),
        ..BodyFacts::default()
    };
    let mut err: Option<String> = None;
    let inside = |n: Node, kinds: &[&str]| {
        let mut cur = n;
        loop {
            if kinds.contains(&cur.kind()) {
                return true;
            }
            if top.contains(&cur.id()) {
                return false;
            }
            match cur.parent() {
                Some(p) => cur = p,
                None => return false,
            }
        }
    };
    for &root in &shape.body {
        walk(root, &mut |n| {
            if err.is_some() {
                return false;
            }
            let t = text(src, n);
            match n.kind() {
                "return_statement" => {
                    err = Some(format!(
                        "`{}` returns from inside the guarded body",
                        first_line(t)
                    ));
                }
                "goto_statement" | "labeled_statement" => {
                    err = Some(format!("`{}` jumps inside the guarded body", first_line(t)));
                }
                "break_statement"
                    if !inside(
                        n,
                        &[
                            "for_statement",
                            "while_statement",
                            "do_statement",
                            "switch_statement",
                        ],
                    ) =>
                {
                    err = Some("`break` leaves the guarded body".into());
                }
                "continue_statement"
                    if !inside(n, &["for_statement", "while_statement", "do_statement"]) =>
                {
                    err = Some("`continue` leaves the guarded body".into());
                }
                "call_expression" => {
                    let f = n
                        .child_by_field_name("function")
                        .map_or("", |f| text(src, f));
                    if is_collective(f) {
                        err = Some(format!(
                            "the body calls `{f}`; once a thread handles several elements, barriers and warp collectives no longer line up"
                        ));
                    }
                }
                "field_expression" => {
                    let a = n
                        .child_by_field_name("argument")
                        .map_or("", |a| text(src, a));
                    if a == "threadIdx" || a == "blockIdx" {
                        err = Some(format!(
                            "the body reads `{t}`; once a thread handles several elements it no longer names the element"
                        ));
                    }
                }
                "declaration" => {
                    let mut c = n.walk();
                    for d in n.children_by_field_name("declarator", &mut c) {
                        let mut d = d;
                        while let Some(inner) = d.child_by_field_name("declarator") {
                            d = inner;
                        }
                        if text(src, d) == i {
                            err = Some(format!("the body declares its own `{i}`"));
                        }
                    }
                }
                "assignment_expression" | "update_expression" => {
                    let target = n
                        .child_by_field_name("left")
                        .or_else(|| n.child_by_field_name("argument"));
                    if target.is_some_and(|t| t.kind() == "identifier" && text(src, t) == i) {
                        err = Some(format!("the body assigns to `{i}` (`{t}`)"));
                    }
                }
                "subscript_expression" => {
                    let arg = n.child_by_field_name("argument");
                    let Some(p) = arg
                        .filter(|a| a.kind() == "identifier")
                        .map(|a| text(src, a))
                        .filter(|p| pointers.contains_key(*p))
                    else {
                        return true;
                    };
                    let own = n
                        .child_by_field_name("indices")
                        .and_then(|ix| match named_children(ix).as_slice() {
                            [only] if only.kind() == "identifier" && text(src, *only) == i => {
                                Some(*only)
                            }
                            _ => None,
                        });
                    let Some(own) = own else {
                        if strict {
                            err = Some(format!("`{t}` is not the thread's own element `{p}[{i}]`"));
                            return false;
                        }
                        return true;
                    };
                    let parent = n.parent();
                    if strict
                        && parent.is_some_and(|p| {
                            p.kind() == "pointer_expression"
                                && p.child_by_field_name("operator")
                                    .is_some_and(|o| text(src, o) == "&")
                        })
                    {
                        err = Some(format!("`&{t}` takes an element's address"));
                        return false;
                    }
                    let (mut read, mut written, mut unconditional) = (true, false, true);
                    if let Some(p) = parent {
                        let is_target = p
                            .child_by_field_name("left")
                            .is_some_and(|l| l.id() == n.id())
                            || p.kind() == "update_expression";
                        if is_target
                            && matches!(p.kind(), "assignment_expression" | "update_expression")
                        {
                            written = true;
                            let op = p
                                .child_by_field_name("operator")
                                .map_or("", |o| text(src, o));
                            read = !(p.kind() == "assignment_expression" && op == "=");
                            unconditional = !read
                                && p.parent().is_some_and(|s| {
                                    s.kind() == "expression_statement" && top.contains(&s.id())
                                });
                        }
                    }
                    let pointee = pointers.get(p).cloned().unwrap_or_default();
                    let u = facts.buffers.entry(p.to_string()).or_insert(BufferUse {
                        pointee,
                        read: false,
                        written: false,
                        writes_unconditional: true,
                    });
                    u.read |= read;
                    u.written |= written;
                    if written && !unconditional {
                        u.writes_unconditional = false;
                    }
                    facts.subscripts.push((n.byte_range(), p.to_string()));
                    facts.all_index.push(own.byte_range());
                    return false;
                }
                "identifier" if t == i => {
                    facts.index_uses.push(n.byte_range());
                    facts.all_index.push(n.byte_range());
                }
                "identifier" if strict && pointers.contains_key(t) => {
                    let mut context = n;
                    while let Some(p) = context.parent() {
                        context = p;
                        if p.kind().ends_with("_statement") || p.kind() == "declaration" {
                            break;
                        }
                    }
                    let context = text(src, context);
                    err = Some(format!(
                        "`{t}` is used other than as `{t}[{i}]` (in `{}`)",
                        first_line(context)
                    ));
                }
                _ => {}
            }
            err.is_none()
        });
        if let Some(e) = err {
            return Err(e);
        }
    }
    Ok(facts)
}

/// The CUDA vector type of `width` elements of `pointee`.
fn vector_type(pointee: &str, width: usize) -> Option<&'static str> {
    Some(match (pointee, width) {
        ("float", 4) => "float4",
        ("float", 2) => "float2",
        ("double", 2) => "double2",
        ("__half" | "half", 2) => "__half2",
        ("__nv_bfloat16", 2) => "__nv_bfloat162",
        ("int", 4) => "int4",
        ("int", 2) => "int2",
        ("unsigned int" | "unsigned", 4) => "uint4",
        ("unsigned int" | "unsigned", 2) => "uint2",
        _ => return None,
    })
}

fn fresh(base: &str, taken: &mut BTreeSet<String>) -> String {
    let mut name = base.to_string();
    let mut n = 2;
    while taken.contains(&name) {
        name = format!("{base}_{n}");
        n += 1;
    }
    taken.insert(name.clone());
    name
}

/// The pointer parameters: name -> pointee.
fn pointer_params(cx: &RewriteContext<'_>) -> BTreeMap<String, String> {
    cx.kernel
        .params
        .iter()
        .filter_map(|p| match &p.kind {
            ParamKind::Pointer { pointee, .. } => Some((p.name.clone(), pointee.clone())),
            _ => None,
        })
        .collect()
}

/// A bound usable on the right of `<` as is.
fn bound_text(src: &str, bound: Node<'_>) -> String {
    let t = text(src, bound);
    match bound.kind() {
        "identifier"
        | "number_literal"
        | "field_expression"
        | "call_expression"
        | "parenthesized_expression"
        | "subscript_expression" => t.to_string(),
        _ => format!("({t})"),
    }
}

fn newline(src: &str) -> &'static str {
    if src.contains("\r\n") {
        "\r\n"
    } else {
        "\n"
    }
}

/// The launch must be 1-D: block (b, 1, 1) and a grid whose y and z are absent or 1.
fn one_d_grid(
    cx: &RewriteContext<'_>,
    plan: &BenchPlan,
    id: &str,
) -> Result<(edit::SpecAssignment, ByteRange), RewriteError> {
    let k = &cx.kernel.name;
    if let Some(Launch::Cuda { block, .. }) = plan.cases.first().map(|c| &c.launch) {
        if block[1] != 1 || block[2] != 1 {
            return Err(not_applicable(format!(
                "{id} needs a 1-D block; `{k}` launches block ({}, {}, {})",
                block[0], block[1], block[2]
            )));
        }
    }
    let grid = edit::spec_assignment(cx.kernel, "grid")
        .ok_or_else(|| not_applicable(format!("`{k}`'s spec has no `grid = ...`")))?;
    let parts = components(&grid.text);
    if parts[1..]
        .iter()
        .any(|p| strip_parens(&grid.text[p.clone()]) != "1")
    {
        return Err(not_applicable(format!(
            "{id} needs a 1-D grid; `{k}` has grid = {}",
            grid.text
        )));
    }
    let first = parts[0].clone();
    Ok((grid, first))
}

// ---------------------------------------------------------------------------------------
// vectorize

/// Each thread handles VEC consecutive elements with one vector load per read buffer and
/// one vector store per written buffer, and a scalar tail for the last `n % VEC`. Param
/// `widths` (default [4, 2]).
pub fn vectorize(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, "vectorize")?;
    let plan = current_plan(cx)?;
    let widths = param_ints(cx.params, "widths", &[4, 2], 2)?;
    if let Some(w) = widths.iter().find(|w| !matches!(w, 2 | 4)) {
        return Err(bad_param(
            "widths",
            format!("{w} is not a vector width; use 2 or 4"),
        ));
    }
    let k = &cx.kernel.name;
    let func = kernel_function(cx)
        .ok_or_else(|| not_applicable(format!("`{k}`'s definition is not in the syntax tree")))?;
    let shape = match_elementwise(cx.text, func).map_err(|why| {
        not_applicable(format!(
            "`{k}` is not a 1-D elementwise kernel: {why}; vectorize needs {INDEX_SHAPE} with every global access `p[i]`"
        ))
    })?;
    let pointers = pointer_params(cx);
    let facts = inspect_body(cx.text, &shape, &pointers, true)
        .map_err(|why| not_applicable(format!("`{k}` cannot be vectorized: {why}")))?;
    if facts.buffers.is_empty() {
        return Err(not_applicable(format!(
            "`{k}`'s guarded body accesses no pointer parameter as `p[{}]`",
            shape.index
        )));
    }
    let (grid, first) = one_d_grid(cx, &plan, "vectorize")?;
    let taken: BTreeSet<String> = words(cx.text).into_iter().map(str::to_string).collect();
    // Buffers in parameter order, for stable output.
    let order: Vec<&String> = cx
        .kernel
        .params
        .iter()
        .filter_map(|p| facts.buffers.get_key_value(&p.name).map(|(k, _)| k))
        .collect();

    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    'width: for width in widths {
        let width = width as usize;
        let mut types: BTreeMap<&str, &'static str> = BTreeMap::new();
        for p in &order {
            let u = &facts.buffers[*p];
            match vector_type(&u.pointee, width) {
                Some(vt) => {
                    types.insert(p.as_str(), vt);
                }
                None => {
                    dropped.push(format!(
                        "VEC={width}: `{p}` is `{}*`, which has no {width}-wide vector type",
                        u.pointee
                    ));
                    continue 'width;
                }
            }
        }
        let Some(new_grid) = widen(&grid.text[first.clone()], width) else {
            return Err(not_applicable(format!(
                "grid = {} has no `cdiv(n, B)` or `(n + B - 1) / B` to divide by the vector width",
                grid.text
            )));
        };
        let mut names = taken.clone();
        let code = emit_vectorized(cx.text, &shape, &facts, &order, &types, width, &mut names);
        let edits = vec![
            (shape.guard.start_byte()..shape.end, code),
            (
                grid.range.start + first.start..grid.range.start + first.end,
                new_grid,
            ),
        ];
        let mut shown: Vec<&str> = Vec::new();
        for p in &order {
            if !shown.contains(&types[p.as_str()]) {
                shown.push(types[p.as_str()]);
            }
        }
        drafts.push(Draft {
            label: format!("VEC={width} ({})", shown.join(", ")),
            text: edit::replace_ranges(cx.text, edits),
        });
    }
    finish(cx, drafts, dropped)
}

/// Every division of the grid's first component made `width` times coarser.
fn widen(component: &str, width: usize) -> Option<String> {
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
    (!edits.is_empty()).then(|| edit::replace_ranges(component, edits))
}

#[allow(clippy::too_many_arguments)]
fn emit_vectorized(
    src: &str,
    shape: &Elementwise<'_>,
    facts: &BodyFacts,
    order: &[&String],
    types: &BTreeMap<&str, &'static str>,
    width: usize,
    names: &mut BTreeSet<String>,
) -> String {
    const LANES: [&str; 4] = ["x", "y", "z", "w"];
    let nl = newline(src);
    let i = &shape.index;
    let ind = &shape.indent;
    let in1 = format!("{ind}{}", shape.unit);
    let in2 = format!("{in1}{}", shape.unit);
    let bound = bound_text(src, shape.bound);
    let regs: BTreeMap<&str, String> = order
        .iter()
        .map(|p| (p.as_str(), fresh(&format!("{p}{width}"), names)))
        .collect();
    let span = shape.body_span();
    let from = line_indent(src, span.start);
    let single = shape.body.len() == 1 && !src[span.clone()].contains('\n') && !facts.declares;

    let mut o = format!("if ({width} * {i} + {} < {bound}) {{{nl}", width - 1);
    for p in order {
        let (u, vt, reg) = (&facts.buffers[*p], types[p.as_str()], &regs[p.as_str()]);
        if u.read || !u.writes_unconditional {
            let c = if u.written { "" } else { "const " };
            o.push_str(&format!(
                "{in1}{c}{vt} {reg} = reinterpret_cast<const {vt}*>({p})[{i}];{nl}"
            ));
        } else {
            o.push_str(&format!("{in1}{vt} {reg};{nl}"));
        }
    }
    for (lane, comp) in LANES.iter().enumerate().take(width) {
        let mut reps: Vec<(ByteRange, String)> = facts
            .subscripts
            .iter()
            .map(|(r, p)| (r.clone(), format!("{}.{comp}", regs[p.as_str()])))
            .collect();
        let elem = if lane == 0 {
            format!("({width} * {i})")
        } else {
            format!("({width} * {i} + {lane})")
        };
        reps.extend(facts.index_uses.iter().map(|r| (r.clone(), elem.clone())));
        let body = render(src, &span, &reps);
        if facts.declares {
            o.push_str(&format!(
                "{in1}{{{nl}{in2}{}{nl}{in1}}}{nl}",
                reindent(&body, from, &in2)
            ));
        } else {
            o.push_str(&format!("{in1}{}{nl}", reindent(&body, from, &in1)));
        }
    }
    for p in order {
        if facts.buffers[*p].written {
            let (vt, reg) = (types[p.as_str()], &regs[p.as_str()]);
            o.push_str(&format!(
                "{in1}reinterpret_cast<{vt}*>({p})[{i}] = {reg};{nl}"
            ));
        }
    }
    o.push_str(&format!("{ind}}} else {{{nl}"));
    let t = ["j", "k", "e"]
        .iter()
        .find(|n| !names.contains(**n))
        .map_or_else(|| fresh(&format!("{i}_tail"), names), |n| n.to_string());
    let reps: Vec<(ByteRange, String)> = facts
        .all_index
        .iter()
        .map(|r| (r.clone(), t.clone()))
        .collect();
    let body = render(src, &span, &reps);
    let head = format!(
        "for ({} {t} = {width} * {i}; {t} < {bound}; ++{t})",
        shape.index_ty
    );
    if single {
        o.push_str(&format!("{in1}{head} {body}{nl}"));
    } else {
        o.push_str(&format!(
            "{in1}{head} {{{nl}{in2}{}{nl}{in1}}}{nl}",
            reindent(&body, from, &in2)
        ));
    }
    o.push_str(&format!("{ind}}}"));
    o
}

// ---------------------------------------------------------------------------------------
// grid_stride

/// The 1-D shape becomes `for (int i = ...; i < n; i += blockDim.x * gridDim.x)` and
/// the grid `min(grid, sms * K)` for K in param `blocks_per_sm` (default [4, 8, 16, 32]).
/// 2-D kernels are `NotApplicable`: capping a 2-D grid needs a split of the blocks
/// between the dims that this rewrite does not guess.
pub fn grid_stride(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, "grid_stride")?;
    let plan = current_plan(cx)?;
    let per_sm = param_ints(cx.params, "blocks_per_sm", &[4, 8, 16, 32], 1)?;
    let k = &cx.kernel.name;
    let func = kernel_function(cx)
        .ok_or_else(|| not_applicable(format!("`{k}`'s definition is not in the syntax tree")))?;
    let shape = match_elementwise(cx.text, func).map_err(|why| {
        not_applicable(format!(
            "`{k}` is not a 1-D kernel with a bounds check: {why}; grid_stride needs {INDEX_SHAPE}"
        ))
    })?;
    inspect_body(cx.text, &shape, &pointer_params(cx), false)
        .map_err(|why| not_applicable(format!("`{k}` cannot become a grid-stride loop: {why}")))?;
    let (grid, first) = one_d_grid(cx, &plan, "grid_stride")?;
    if words(&grid.text).contains("sms") {
        return Err(not_applicable(format!(
            "`{k}`'s grid = {} already depends on `sms`",
            grid.text
        )));
    }
    let code = emit_grid_stride(cx.text, &shape);
    let g = &grid.text[first.clone()];
    let drafts = per_sm
        .iter()
        .map(|n| Draft {
            label: format!("grid-stride, grid <= {n} * sms"),
            text: edit::replace_ranges(
                cx.text,
                vec![
                    (shape.decl.start_byte()..shape.end, code.clone()),
                    (
                        grid.range.start + first.start..grid.range.start + first.end,
                        format!("min({g}, sms * {n})"),
                    ),
                ],
            ),
        })
        .collect();
    finish(cx, drafts, Vec::new())
}

fn emit_grid_stride(src: &str, shape: &Elementwise<'_>) -> String {
    let nl = newline(src);
    let i = &shape.index;
    let ind = &shape.indent;
    let mut o = String::new();
    for c in &shape.between {
        o.push_str(&format!("{}{nl}{ind}", text(src, *c)));
    }
    o.push_str(&format!(
        "for ({} {i} = {}; {i} < {}; {i} += blockDim.x * gridDim.x)",
        shape.index_ty,
        shape.init,
        bound_text(src, shape.bound)
    ));
    match shape.form {
        Guard::Block => o.push_str(&src[shape.cond_end..shape.guard.end_byte()]),
        Guard::EarlyReturn => {
            let span = shape.body_span();
            let in1 = format!("{ind}{}", shape.unit);
            let body = reindent(&src[span.clone()], line_indent(src, span.start), &in1);
            o.push_str(&format!(" {{{nl}{in1}{body}{nl}{ind}}}"));
        }
    }
    o
}

#[cfg(test)]
pub(super) mod testing {
    //! Running a rewrite on a fixture the way the step loop does, and showing the part of
    //! a candidate a reviewer needs: the kernel's spec lines and definition.

    use std::collections::BTreeMap;

    use crate::document::Document;
    use crate::optimize::rewrite::{apply, Candidate, RewriteContext, RewriteError};
    use crate::syntax::{self, Lang};

    pub fn run(
        lang: Lang,
        src: &str,
        kernel: &str,
        id: &str,
        params: serde_json::Value,
    ) -> Result<Vec<Candidate>, RewriteError> {
        let doc = Document::new(lang, 0, src);
        let tree = doc.tree().expect("the fixture parses");
        let model = syntax::analyze(lang, src, tree);
        let k = model.kernel(kernel).expect("the fixture has the kernel");
        let params: BTreeMap<String, serde_json::Value> = match params {
            serde_json::Value::Object(m) => m.into_iter().collect(),
            _ => BTreeMap::new(),
        };
        let cx = RewriteContext {
            lang,
            text: src,
            tree,
            model: &model,
            kernel: k,
            params: &params,
        };
        apply(id, &cx)
    }

    pub fn labels(out: &[Candidate]) -> Vec<&str> {
        out.iter().map(|c| c.label.as_str()).collect()
    }

    /// The candidate's spec block and kernel definition, and a check that nothing outside
    /// them changed.
    pub fn show(lang: Lang, before: &str, c: &Candidate, kernel: &str) -> String {
        let region = |text: &str| {
            let doc = Document::new(lang, 0, text);
            let model = syntax::analyze(lang, text, doc.tree().expect("parses"));
            let k = model.kernel(kernel).expect("kernel");
            let start = k.spec.range.as_ref().map_or(k.def_range.start, |r| r.start);
            start..k.def_range.end
        };
        let (old, new) = (region(before), region(&c.text));
        assert_eq!(
            before[..old.start],
            c.text[..new.start],
            "text before the kernel changed"
        );
        assert_eq!(
            before[old.end..],
            c.text[new.end..],
            "text after the kernel changed"
        );
        c.text[new].to_string()
    }

    pub fn not_applicable(r: Result<Vec<Candidate>, RewriteError>) -> String {
        match r {
            Err(RewriteError::NotApplicable(m)) => m,
            other => panic!("expected NotApplicable, got {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use expect_test::expect;
    use serde_json::json;

    use super::testing::{labels, not_applicable, run, show};
    use super::*;
    use crate::optimize::rewrite::Candidate;

    const SAXPY: &str = include_str!("../../../../examples/saxpy.cu");
    const MATMUL: &str = include_str!("../../../../examples/matmul_naive.cu");
    const REDUCE: &str = include_str!("../../../../examples/reduce_sum.cu");
    const VECTOR_ADD: &str = include_str!("../../../../examples/vector_add.py");
    const SOFTMAX: &str = include_str!("../../../../examples/softmax.py");

    fn cuda(
        src: &str,
        kernel: &str,
        id: &str,
        params: serde_json::Value,
    ) -> Result<Vec<Candidate>, RewriteError> {
        run(Lang::Cuda, src, kernel, id, params)
    }

    fn find<'c>(out: &'c [Candidate], label: &str) -> &'c Candidate {
        out.iter()
            .find(|c| c.label == label)
            .unwrap_or_else(|| panic!("no candidate {label}; have {:?}", labels(out)))
    }

    // --- tunable_sweep ---

    #[test]
    fn tunable_sweep_writes_each_other_value_into_the_spec() {
        let out = cuda(REDUCE, "reduce_tree", "tunable_sweep", json!({})).unwrap();
        assert_eq!(
            labels(&out),
            ["BLOCK=256", "BLOCK=512"],
            "128 is current (first listed)"
        );
        expect![[r#"
            // @bench n = 1 << 22, 1000
            // @bench x: in f16[n] ~ uniform(0, 1); out: inout f32[1] ~ zeros
            // @bench tune BLOCK in [128, 256, 512]
            // @bench grid = cdiv(n, BLOCK); block = BLOCK; smem = BLOCK * 4
            // @bench atol = 1e-1; rtol = 1e-3
            // @bench reference = reduce_naive
            // @bench BLOCK = 512
            extern "C" __global__ void reduce_tree(int n, const __half* x, float* out) {
                extern __shared__ float buf[];
                int i = blockIdx.x * BLOCK + threadIdx.x;
                buf[threadIdx.x] = i < n ? load_as_float(x, i) : 0.0f;
                __syncthreads();
                for (int s = BLOCK / 2; s > 0; s >>= 1) {
                    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
                    __syncthreads();
                }
                if (threadIdx.x == 0) atomicAdd(out, buf[0]);
            }"#]]
        .assert_eq(&show(Lang::Cuda, REDUCE, &out[1], "reduce_tree"));
    }

    #[test]
    fn tunable_sweep_on_triton_replaces_the_current_value() {
        let out = run(
            Lang::Triton,
            VECTOR_ADD,
            "add_kernel",
            "tunable_sweep",
            json!({}),
        )
        .unwrap();
        assert_eq!(labels(&out), ["BLOCK=256", "BLOCK=1024", "BLOCK=2048"]);
        assert!(out[0]
            .text
            .contains("# @bench grid = cdiv(n, BLOCK); BLOCK = 256; num_warps = 4\n"));
        let out = run(
            Lang::Triton,
            SOFTMAX,
            "softmax_kernel",
            "tunable_sweep",
            json!({}),
        )
        .unwrap();
        assert_eq!(labels(&out), ["num_warps=2", "num_warps=8"]);
        let only = run(
            Lang::Triton,
            SOFTMAX,
            "softmax_kernel",
            "tunable_sweep",
            json!({"name": "BLOCK"}),
        );
        expect!["`softmax_kernel` has no `tune BLOCK in [...]` line with several values"]
            .assert_eq(&not_applicable(only));
    }

    #[test]
    fn tunable_sweep_without_tunables_or_with_bad_params() {
        expect!["`saxpy` has no `tune NAME in [...]` line with several values"].assert_eq(
            &not_applicable(cuda(SAXPY, "saxpy", "tunable_sweep", json!({}))),
        );
        let bad = cuda(REDUCE, "reduce_tree", "tunable_sweep", json!({"name": 3}));
        expect!["parameter `name`: expected a string, found `3`"]
            .assert_eq(&bad.unwrap_err().to_string());
        let no_spec = "__global__ void k(int n, float* y) { y[0] = 1; }\n";
        expect![[r#"`k` has no @bench spec; add one (code action "Insert @bench spec") first"#]]
            .assert_eq(&not_applicable(cuda(
                no_spec,
                "k",
                "tunable_sweep",
                json!({}),
            )));
    }

    // --- block_size ---

    #[test]
    fn block_size_1d_rescales_the_grid_division() {
        let out = cuda(SAXPY, "saxpy", "block_size", json!({})).unwrap();
        assert_eq!(
            labels(&out),
            ["block=64", "block=128", "block=512", "block=1024"]
        );
        expect![[r#"
            // The first case is timed; every case is verified.
            // @bench n = 1 << 24, 4099
            // @bench x: in f32[n]
            // @bench y: inout f32[n] ~ normal(0, 1)
            // @bench a = 2.5
            // @bench grid = cdiv(n, 512); block = 512
            extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }"#]]
        .assert_eq(&show(Lang::Cuda, SAXPY, find(&out, "block=512"), "saxpy"));
    }

    #[test]
    fn block_size_2d_rescales_each_dim_that_changes() {
        let out = cuda(MATMUL, "matmul", "block_size", json!({})).unwrap();
        assert_eq!(
            labels(&out),
            [
                "block=(32, 8)",
                "block=(32, 4)",
                "block=(64, 4)",
                "block=(32, 16)",
                "block=(16, 8)",
                "block=(8, 32)"
            ],
            "(16, 16) is current"
        );
        let c = find(&out, "block=(32, 8)");
        assert!(
            c.text
                .contains("// @bench grid = (cdiv(n, 32), cdiv(m, 8)); block = (32, 8)\n"),
            "{}",
            c.text
        );
        let c = find(&out, "block=(16, 8)");
        assert!(c
            .text
            .contains("// @bench grid = (cdiv(n, 16), cdiv(m, 8)); block = (16, 8)\n"));
    }

    #[test]
    fn block_size_from_a_tunable_is_left_to_the_sweep() {
        expect!["`block` comes from tune BLOCK; tunable_sweep covers it"].assert_eq(
            &not_applicable(cuda(REDUCE, "reduce_tree", "block_size", json!({}))),
        );
        assert_eq!(
            not_applicable(run(
                Lang::Triton,
                VECTOR_ADD,
                "add_kernel",
                "block_size",
                json!({})
            )),
            "`block_size` rewrites CUDA kernels; `add_kernel` is a Triton kernel"
        );
    }

    const BOUNDED: &str = "// @bench n = 4096\n// @bench x: inout f32[n]\n// @bench grid = cdiv(n, 256); block = 256\n__global__ void __launch_bounds__(256) k(int n, float* x) {\n    __shared__ float s[256];\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    s[threadIdx.x] = i < n ? x[i] : 0.0f;\n    if (i < n) x[i] = s[threadIdx.x] * 2.0f;\n}\n";

    #[test]
    fn block_size_respects_launch_bounds_and_flags_a_hard_coded_size() {
        let out = cuda(BOUNDED, "k", "block_size", json!({})).unwrap();
        expect![[r#"
            [
                "block=64; body has literal 256",
                "block=128; body has literal 256",
            ]
        "#]]
        .assert_debug_eq(&labels(&out));
        let out = cuda(BOUNDED, "k", "block_size", json!({"sizes_1d": [1024, 256]}));
        expect!["no block shape to try for `k`: every listed shape is the current one or over 256 threads"]
            .assert_eq(&not_applicable(out));
    }

    #[test]
    fn block_size_drops_shapes_whose_grid_it_cannot_rescale() {
        let src = BOUNDED.replace("grid = cdiv(n, 256)", "grid = sms * 4");
        expect!["no usable candidate for `k`: block=64: grid x `sms * 4` has no `cdiv(X, 256)` or `(X + 256 - 1) / 256` to rescale; block=128: grid x `sms * 4` has no `cdiv(X, 256)` or `(X + 256 - 1) / 256` to rescale"]
            .assert_eq(&not_applicable(cuda(&src, "k", "block_size", json!({}))));
        let bad = cuda(SAXPY, "saxpy", "block_size", json!({"shapes_2d": [[32]]}));
        expect!["parameter `shapes_2d`: expected a list of [x, y] pairs of positive integers, found `[[32]]`"]
            .assert_eq(&bad.unwrap_err().to_string());
        let huge = cuda(
            MATMUL,
            "matmul",
            "block_size",
            json!({"shapes_2d": [[1u64 << 40, 1u64 << 40], [32, 8]]}),
        );
        assert_eq!(
            labels(&huge.unwrap()),
            ["block=(32, 8)"],
            "oversized shapes are skipped"
        );
        let bad = cuda(SAXPY, "saxpy", "block_size", json!({"sizes_1d": "big"}));
        expect![
            r#"parameter `sizes_1d`: expected a non-empty list of integers >= 1, found `"big"`"#
        ]
        .assert_eq(&bad.unwrap_err().to_string());
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

    // --- vectorize ---

    #[test]
    fn vectorize_saxpy_with_float4_loads_and_a_scalar_tail() {
        let out = cuda(SAXPY, "saxpy", "vectorize", json!({})).unwrap();
        assert_eq!(labels(&out), ["VEC=4 (float4)", "VEC=2 (float2)"]);
        expect![[r#"
            // The first case is timed; every case is verified.
            // @bench n = 1 << 24, 4099
            // @bench x: in f32[n]
            // @bench y: inout f32[n] ~ normal(0, 1)
            // @bench a = 2.5
            // @bench grid = cdiv(n, 4 * 256); block = 256
            extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (4 * i + 3 < n) {
                    const float4 x4 = reinterpret_cast<const float4*>(x)[i];
                    float4 y4 = reinterpret_cast<const float4*>(y)[i];
                    y4.x = a * x4.x + y4.x;
                    y4.y = a * x4.y + y4.y;
                    y4.z = a * x4.z + y4.z;
                    y4.w = a * x4.w + y4.w;
                    reinterpret_cast<float4*>(y)[i] = y4;
                } else {
                    for (int j = 4 * i; j < n; ++j) y[j] = a * x[j] + y[j];
                }
            }"#]]
        .assert_eq(&show(Lang::Cuda, SAXPY, &out[0], "saxpy"));
    }

    const RELU: &str = "#include <cuda_fp16.h>\n// @bench n = 1000, 77\n// @bench x: in f32[n]; y: out f32[n]\n// @bench grid = cdiv(n, 128); block = 128\n__global__ void leaky(int n, const float* __restrict__ x, float* __restrict__ y) {\n    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n    // past the end\n    if (i >= n) return;\n    float v = x[i];\n    // keep small negatives\n    y[i] = v > 0.0f ? v : 1e-6f * i;\n}\n";

    #[test]
    fn vectorize_early_return_body_with_locals_and_index_uses() {
        let out = cuda(RELU, "leaky", "vectorize", json!({"widths": [2]})).unwrap();
        expect![[r#"
            // @bench n = 1000, 77
            // @bench x: in f32[n]; y: out f32[n]
            // @bench grid = cdiv(n, 2 * 128); block = 128
            __global__ void leaky(int n, const float* __restrict__ x, float* __restrict__ y) {
                const int i = blockIdx.x * blockDim.x + threadIdx.x;
                // past the end
                if (2 * i + 1 < n) {
                    const float2 x2 = reinterpret_cast<const float2*>(x)[i];
                    float2 y2;
                    {
                        float v = x2.x;
                        // keep small negatives
                        y2.x = v > 0.0f ? v : 1e-6f * (2 * i);
                    }
                    {
                        float v = x2.y;
                        // keep small negatives
                        y2.y = v > 0.0f ? v : 1e-6f * (2 * i + 1);
                    }
                    reinterpret_cast<float2*>(y)[i] = y2;
                } else {
                    for (int j = 2 * i; j < n; ++j) {
                        float v = x[j];
                        // keep small negatives
                        y[j] = v > 0.0f ? v : 1e-6f * j;
                    }
                }
            }"#]]
        .assert_eq(&show(Lang::Cuda, RELU, &out[0], "leaky"));
    }

    #[test]
    fn vectorize_loads_a_written_buffer_when_a_write_is_conditional() {
        let src = RELU.replace(
            "y[i] = v > 0.0f ? v : 1e-6f * i;",
            "if (v > 0.0f) y[i] = v;",
        );
        let out = cuda(&src, "leaky", "vectorize", json!({"widths": [4]})).unwrap();
        assert!(
            out[0]
                .text
                .contains("float4 y4 = reinterpret_cast<const float4*>(y)[i];"),
            "{}",
            out[0].text
        );
    }

    #[test]
    fn vectorize_half_only_pairs() {
        let src = "#include <cuda_fp16.h>\n// @bench n = 1000\n// @bench x: in f16[n]; y: out f16[n]\n// @bench grid = cdiv(n, 256); block = 256\n__global__ void h(int n, const __half* x, __half* y) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) {\n        y[i] = __hmul(x[i], x[i]);\n    }\n}\n";
        let out = cuda(src, "h", "vectorize", json!({})).unwrap();
        assert_eq!(labels(&out), ["VEC=2 (__half2)"]);
        expect![[r#"
            // @bench n = 1000
            // @bench x: in f16[n]; y: out f16[n]
            // @bench grid = cdiv(n, 2 * 256); block = 256
            __global__ void h(int n, const __half* x, __half* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (2 * i + 1 < n) {
                    const __half2 x2 = reinterpret_cast<const __half2*>(x)[i];
                    __half2 y2;
                    y2.x = __hmul(x2.x, x2.x);
                    y2.y = __hmul(x2.y, x2.y);
                    reinterpret_cast<__half2*>(y)[i] = y2;
                } else {
                    for (int j = 2 * i; j < n; ++j) y[j] = __hmul(x[j], x[j]);
                }
            }"#]]
        .assert_eq(&show(Lang::Cuda, src, &out[0], "h"));
        let only4 = cuda(src, "h", "vectorize", json!({"widths": [4]}));
        expect![
            "no usable candidate for `h`: VEC=4: `x` is `__half*`, which has no 4-wide vector type"
        ]
        .assert_eq(&not_applicable(only4));
    }

    #[test]
    fn vectorize_says_why_a_kernel_does_not_fit() {
        let why = |src: &str, k: &str| not_applicable(cuda(src, k, "vectorize", json!({})));
        expect!["`matmul` is not a 1-D elementwise kernel: `int row = blockIdx.y * blockDim.y + threadIdx.y;` is a 2-D or 3-D index; only 1-D kernels are handled; vectorize needs `int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }` (or `if (i >= n) return;`) with every global access `p[i]`"]
            .assert_eq(&why(MATMUL, "matmul"));
        expect!["`reduce_naive` cannot be vectorized: `out` is used other than as `out[i]` (in `atomicAdd(out, load_as_float(x, i));`)"]
            .assert_eq(&why(REDUCE, "reduce_naive"));
        expect!["`reduce_tree` is not a 1-D elementwise kernel: `int i = blockIdx.x * BLOCK + threadIdx.x;` is not the 1-D index `blockIdx.x * blockDim.x + threadIdx.x`; vectorize needs `int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }` (or `if (i >= n) return;`) with every global access `p[i]`"]
            .assert_eq(&why(REDUCE, "reduce_tree"));
        let shifted = SAXPY.replace("a * x[i]", "a * x[i + 1]");
        expect!["`saxpy` cannot be vectorized: `x[i + 1]` is not the thread's own element `x[i]`"]
            .assert_eq(&why(&shifted, "saxpy"));
        let address = SAXPY.replace("y[i] = a * x[i] + y[i];", "atomicAdd(&y[i], a * x[i]);");
        expect!["`saxpy` cannot be vectorized: `&y[i]` takes an element's address"]
            .assert_eq(&why(&address, "saxpy"));
        let after = SAXPY.replace(
            "y[i] = a * x[i] + y[i];\n",
            "y[i] = a * x[i] + y[i];\n    __syncthreads();\n",
        );
        expect!["`saxpy` is not a 1-D elementwise kernel: `__syncthreads();` follows the bounds check; the check must end the kernel; vectorize needs `int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }` (or `if (i >= n) return;`) with every global access `p[i]`"]
            .assert_eq(&why(&after, "saxpy"));
        let bad = cuda(SAXPY, "saxpy", "vectorize", json!({"widths": [8]}));
        expect!["parameter `widths`: 8 is not a vector width; use 2 or 4"]
            .assert_eq(&bad.unwrap_err().to_string());
    }

    // --- grid_stride ---

    #[test]
    fn grid_stride_saxpy_caps_the_grid_per_sm() {
        let out = cuda(SAXPY, "saxpy", "grid_stride", json!({})).unwrap();
        assert_eq!(
            labels(&out),
            [
                "grid-stride, grid <= 4 * sms",
                "grid-stride, grid <= 8 * sms",
                "grid-stride, grid <= 16 * sms",
                "grid-stride, grid <= 32 * sms"
            ]
        );
        expect![[r#"
            // The first case is timed; every case is verified.
            // @bench n = 1 << 24, 4099
            // @bench x: in f32[n]
            // @bench y: inout f32[n] ~ normal(0, 1)
            // @bench a = 2.5
            // @bench grid = min(cdiv(n, 256), sms * 4); block = 256
            extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
                for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = a * x[i] + y[i];
            }"#]]
        .assert_eq(&show(Lang::Cuda, SAXPY, &out[0], "saxpy"));
    }

    #[test]
    fn grid_stride_early_return_keeps_comments_and_atomics() {
        let out = cuda(RELU, "leaky", "grid_stride", json!({"blocks_per_sm": 8})).unwrap();
        expect![[r#"
            // @bench n = 1000, 77
            // @bench x: in f32[n]; y: out f32[n]
            // @bench grid = min(cdiv(n, 128), sms * 8); block = 128
            __global__ void leaky(int n, const float* __restrict__ x, float* __restrict__ y) {
                // past the end
                for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
                    float v = x[i];
                    // keep small negatives
                    y[i] = v > 0.0f ? v : 1e-6f * i;
                }
            }"#]]
        .assert_eq(&show(Lang::Cuda, RELU, &out[0], "leaky"));
        let out = cuda(
            REDUCE,
            "reduce_naive",
            "grid_stride",
            json!({"blocks_per_sm": [4]}),
        )
        .unwrap();
        assert!(out[0].text.contains(
            "    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) atomicAdd(out, load_as_float(x, i));\n"
        ));
    }

    #[test]
    fn grid_stride_says_why_a_kernel_does_not_fit() {
        let why = |src: &str, k: &str| not_applicable(cuda(src, k, "grid_stride", json!({})));
        expect!["`matmul` is not a 1-D kernel with a bounds check: `int row = blockIdx.y * blockDim.y + threadIdx.y;` is a 2-D or 3-D index; only 1-D kernels are handled; grid_stride needs `int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }` (or `if (i >= n) return;`)"]
            .assert_eq(&why(MATMUL, "matmul"));
        let sync = SAXPY.replace(
            "if (i < n) y[i] = a * x[i] + y[i];",
            "if (i < n) { y[i] = a * x[i]; __syncthreads(); }",
        );
        expect!["`saxpy` cannot become a grid-stride loop: the body calls `__syncthreads`; once a thread handles several elements, barriers and warp collectives no longer line up"]
            .assert_eq(&why(&sync, "saxpy"));
        let tid = SAXPY.replace("a * x[i]", "a * x[threadIdx.x]");
        expect!["`saxpy` cannot become a grid-stride loop: the body reads `threadIdx.x`; once a thread handles several elements it no longer names the element"]
            .assert_eq(&why(&tid, "saxpy"));
        let strided = SAXPY.replace("grid = cdiv(n, 256)", "grid = min(cdiv(n, 256), sms * 2)");
        expect!["`saxpy`'s grid = min(cdiv(n, 256), sms * 2) already depends on `sms`"]
            .assert_eq(&why(&strided, "saxpy"));
        let ret = SAXPY.replace(
            "if (i < n) y[i] = a * x[i] + y[i];",
            "if (i < n) { if (x[i] == 0.0f) return; y[i] = a; }",
        );
        expect!["`saxpy` cannot become a grid-stride loop: `return;` returns from inside the guarded body"]
            .assert_eq(&why(&ret, "saxpy"));
    }
}
