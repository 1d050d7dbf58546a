//! Code-level CUDA rewrites of one kernel unit: `restrict_const`, `launch_bounds`,
//! `unroll`, `fast_math` and `maxnreg`. Each is a pure tree-sitter edit: byte-range
//! splices at node boundaries inside the kernel unit (`Kernel::unit_ranges`), so
//! formatting, comments and strings outside the touched nodes stay byte for byte, and
//! every candidate is re-parsed before it is returned (same kernel name, same `@bench`
//! lines, no new syntax error). This module does not compile anything: whether a
//! candidate compiles, verifies and is faster is the worker's job.
//!
//! Conventions shared by the five rewrites:
//! - Attributes go between the return type and the kernel's name
//!   (`extern "C" __global__ void __launch_bounds__(256) k(...)`), where NVRTC and
//!   tree-sitter-cuda both accept them.
//! - `__maxnreg__(N)` is written in its expanded form `__attribute__((maxnreg(N)))`
//!   (what CUDA's `host_defines.h` defines it as): NVRTC 12.9 accepts both, but
//!   tree-sitter-cuda 0.21 does not know `__maxnreg__` and would lose the kernel.
//! - A kernel with `__launch_bounds__` gets no `maxnreg` and vice versa: NVRTC rejects
//!   the two on one kernel.
//! - `unroll` only marks the innermost counted loops; an outer loop whose body holds a
//!   counted loop is left alone, as is any loop that already has an unroll pragma.
//! - `fast_math` skips `__host__ __device__` functions (the intrinsics are device-only
//!   and the author's host build would break).

use std::collections::{BTreeMap, HashSet};

use tree_sitter::{Node, Parser};

use super::{Candidate, RewriteContext, RewriteError};
use crate::spec::{self, EvalEnv, Launch, TunableKind, Value};
use crate::syntax::{self, ByteRange, Lang, ParamKind};

type R = Result<Vec<Candidate>, RewriteError>;

// ---------------------------------------------------------------------------------------
// restrict_const

/// `__restrict__` on every named pointer parameter of the kernel that lacks it, and
/// `const` on the pointee of every pointer the kernel provably only reads through
/// (see [`only_read_through`]). One candidate.
pub fn restrict_const(cx: &RewriteContext<'_>) -> R {
    let unit = Unit::of(cx, "restrict_const")?;
    let macro_words = macro_words(cx);
    let ref_callees = reference_taking_functions(cx, &unit);
    let mut edits = Vec::new();
    let (mut restricted, mut consted) = (Vec::new(), Vec::new());
    for p in &cx.kernel.params {
        let ParamKind::Pointer { is_const, .. } = &p.kind else {
            continue;
        };
        let Some(decl) = node_with_range(cx, &p.range, "parameter_declaration") else {
            continue;
        };
        let Some(ptr) = decl
            .child_by_field_name("declarator")
            .filter(|d| d.kind() == "pointer_declarator")
        else {
            continue;
        };
        let Some(ident) = ptr
            .child_by_field_name("declarator")
            .filter(|d| d.kind() == "identifier")
        else {
            continue; // unnamed, or `T* const* p`-like shapes: leave them
        };
        let has_restrict = named_children(ptr).iter().any(|c| {
            c.kind() == "type_qualifier"
                && matches!(text(cx, *c), "__restrict__" | "__restrict" | "restrict")
        });
        if !has_restrict {
            edits.push(Edit::insert(ident.start_byte(), "__restrict__ "));
            restricted.push(p.name.clone());
        }
        if !is_const
            && !macro_words.contains(p.name.as_str())
            && only_read_through(cx, unit.kernel, &p.name, &ref_callees)
        {
            edits.push(Edit::insert(decl.start_byte(), "const "));
            consted.push(p.name.clone());
        }
    }
    if edits.is_empty() {
        let pointers = cx
            .kernel
            .params
            .iter()
            .filter(|p| matches!(p.kind, ParamKind::Pointer { .. }))
            .count();
        return Err(na(if pointers == 0 {
            format!("`{}` has no pointer parameter", cx.kernel.name)
        } else {
            format!(
                "every pointer parameter of `{}` is already `__restrict__`, and the others \
                 are written through, passed on or cast, so `const` cannot be added safely",
                cx.kernel.name
            )
        }));
    }
    let mut parts = Vec::new();
    if !restricted.is_empty() {
        parts.push(format!("__restrict__ on {}", restricted.join(", ")));
    }
    if !consted.is_empty() {
        parts.push(format!("const on {}", consted.join(", ")));
    }
    Ok(vec![finish(cx, "restrict_const", parts.join("; "), edits)?])
}

/// Does the kernel body use pointer parameter `name` only to read elements (`p[i]`,
/// `*p`, `*(p + i)`, `p->f`, `(p + i)[j]`, as an rvalue)? Anything else, an element on
/// the left of an assignment, `++`/`--`, `&p[i]` (except for `__ldg`-style loads), the
/// pointer passed to a call, cast, compared, assigned or shadowed, a reference bound
/// to an element, says no: the answer must never be a wrong yes.
fn only_read_through(
    cx: &RewriteContext<'_>,
    kernel: Node<'_>,
    name: &str,
    ref_callees: &HashSet<String>,
) -> bool {
    let Some(body) = kernel.child_by_field_name("body") else {
        return false;
    };
    descendants(body)
        .into_iter()
        .filter(|n| n.kind() == "identifier" && text(cx, *n) == name)
        .all(|id| element_access(id).is_some_and(|a| rvalue_use(cx, a, ref_callees)))
}

/// The element access (`p[i]`, `*p`, `*(p + i)`, `p->f`) that pointer identifier `id`
/// is the base of, or `None` when `id` is used in any other way.
fn element_access(id: Node<'_>) -> Option<Node<'_>> {
    let mut n = id;
    loop {
        let p = n.parent()?;
        match p.kind() {
            "parenthesized_expression" => n = p,
            "binary_expression" => {
                let op = field_kind(p, "operator");
                let left = p
                    .child_by_field_name("left")
                    .is_some_and(|l| l.id() == n.id());
                // `p + i`, `i + p`, `p - i` stay pointers into the same buffer.
                if op == Some("+") || (op == Some("-") && left) {
                    n = p;
                } else {
                    return None;
                }
            }
            _ => break,
        }
    }
    let p = n.parent()?;
    let is_arg = |f: &str| p.child_by_field_name(f).is_some_and(|a| a.id() == n.id());
    match p.kind() {
        "subscript_expression" if is_arg("argument") => Some(p),
        "pointer_expression" if field_kind(p, "operator") == Some("*") => Some(p),
        "field_expression" if field_kind(p, "operator") == Some("->") && is_arg("argument") => {
            Some(p)
        }
        _ => None,
    }
}

/// Is element access `a` (or a member or sub-element of it) only read?
fn rvalue_use(cx: &RewriteContext<'_>, access: Node<'_>, ref_callees: &HashSet<String>) -> bool {
    let mut a = access;
    for _ in 0..64 {
        let Some(mut p) = a.parent() else {
            return true;
        };
        while p.kind() == "parenthesized_expression" {
            a = p;
            match p.parent() {
                Some(pp) => p = pp,
                None => return true,
            }
        }
        let is = |f: &str| p.child_by_field_name(f).is_some_and(|c| c.id() == a.id());
        match p.kind() {
            "assignment_expression" if is("left") => return false,
            "update_expression" => return false,
            "pointer_expression" if field_kind(p, "operator") == Some("&") => {
                return p
                    .parent()
                    .filter(|l| l.kind() == "argument_list")
                    .and_then(|l| l.parent())
                    .and_then(|c| plain_callee(cx, c))
                    .is_some_and(|f| READ_ONLY_LOADS.contains(&f));
            }
            // `p[i].x`, `p[i][j]`: the same question for the bigger lvalue.
            "field_expression" if is("argument") => {
                if field_kind(p, "operator") == Some("->") {
                    return true; // the element is a pointer; writing through it is not writing `p`
                }
                a = p;
            }
            "subscript_expression" if is("argument") => a = p,
            "call_expression" if is("function") => return false, // a method or functor
            "argument_list" => {
                let Some(call) = p.parent().filter(|c| c.kind() == "call_expression") else {
                    return false; // constructor-style initialisers and the like
                };
                return plain_callee(cx, call).is_some_and(|f| !ref_callees.contains(f));
            }
            "init_declarator" => {
                let by_ref = p
                    .child_by_field_name("declarator")
                    .is_some_and(|d| d.kind() == "reference_declarator");
                return !by_ref;
            }
            "cast_expression" => {
                let ty = p.child_by_field_name("type").map_or("", |t| text(cx, t));
                return !ty.contains('&');
            }
            "gnu_asm_output_operand" | "gnu_asm_input_operand" => return false,
            _ => return true,
        }
    }
    false
}

/// Loads that take `&p[i]` and only read it.
const READ_ONLY_LOADS: &[&str] = &["__ldg", "__ldca", "__ldcg", "__ldcs", "__ldlu", "__ldcv"];

/// Names of unit functions with a reference parameter: passing `p[i]` to one of them
/// may write it.
fn reference_taking_functions(cx: &RewriteContext<'_>, unit: &Unit<'_>) -> HashSet<String> {
    let mut out = HashSet::new();
    for f in &unit.funcs {
        let Some((name, params)) = name_and_params(cx, *f) else {
            continue;
        };
        let takes_ref = named_children(params).iter().any(|p| {
            descendants(*p)
                .iter()
                .any(|d| d.kind() == "reference_declarator")
        });
        if takes_ref {
            out.insert(name.to_string());
        }
    }
    out
}

/// Every identifier-like word in the file's macro bodies: a kernel that uses a macro
/// that names its parameter may write through it without the parameter appearing in
/// the body, so such parameters never get `const`.
fn macro_words<'s>(cx: &RewriteContext<'s>) -> HashSet<&'s str> {
    let mut words = HashSet::new();
    let src: &'s str = cx.text;
    for n in descendants(cx.tree.root_node()) {
        if n.kind() != "preproc_arg" {
            continue;
        }
        let body = src.get(n.byte_range()).unwrap_or("");
        words.extend(body.split(|c: char| !(c.is_alphanumeric() || c == '_')));
    }
    words
}

// ---------------------------------------------------------------------------------------
// launch_bounds

/// `__launch_bounds__(T)` and `__launch_bounds__(T, M)` for each `min_blocks` value M
/// (default `[1, 2, 4]`; M = 1 gives the one-argument form; M with T·M > 2048 is
/// skipped). T is the largest block the spec launches over every case and every value
/// of the tunables the block may depend on; when the block is always exactly a `-D` or
/// template tunable, T is written as that name (`__launch_bounds__(BLOCK)`), which stays
/// right whichever value a later sweep picks. A kernel that already has
/// `__launch_bounds__(E[, M0])` keeps E as written and gets the other M values.
pub fn launch_bounds(cx: &RewriteContext<'_>) -> R {
    let unit = Unit::of(cx, "launch_bounds")?;
    if let Some(why) = has_maxnreg(cx, unit.kernel) {
        return Err(na(format!(
            "`{}` has {why}; NVRTC rejects `__launch_bounds__` together with it",
            cx.kernel.name
        )));
    }
    let min_blocks = int_list(cx, "min_blocks", &[1, 2, 4], 1..=32)?;
    let threads = threads_per_block(cx)?;
    let existing = named_children(unit.kernel)
        .into_iter()
        .find(|c| c.kind() == "launch_bounds");
    let (first, check_t, at) = match existing {
        Some(lb) => {
            let args = named_children(lb);
            let Some(e) = args.first() else {
                return Err(na(format!(
                    "`{}` has a `__launch_bounds__` without arguments",
                    cx.kernel.name
                )));
            };
            let written = text(cx, *e).to_string();
            let t = int_literal(&written).unwrap_or(threads.max);
            (written, t, lb.byte_range())
        }
        None => {
            let at = unit.attribute_point(cx)?;
            (threads.expr(), threads.max, at..at)
        }
    };
    let existing_text = existing.map(|lb| squeeze(text(cx, lb)));
    let mut out = Vec::new();
    let mut too_many = Vec::new();
    for m in min_blocks {
        if check_t.saturating_mul(m) > 2048 {
            too_many.push(m);
            continue;
        }
        let attr = if m == 1 {
            format!("__launch_bounds__({first})")
        } else {
            format!("__launch_bounds__({first}, {m})")
        };
        if existing_text.as_deref() == Some(squeeze(&attr).as_str()) {
            continue;
        }
        let insert = if existing.is_some() {
            attr.clone()
        } else {
            format!("{attr} ")
        };
        let label = match &threads.note {
            Some(note) if existing.is_none() => format!("{attr} ({note})"),
            _ => attr,
        };
        out.push(finish(
            cx,
            "launch_bounds",
            label,
            vec![Edit::replace(at.clone(), insert)],
        )?);
    }
    if out.is_empty() {
        let mut why = format!(
            "no `min_blocks` value gives a new `__launch_bounds__` for `{}` ({} threads per block)",
            cx.kernel.name, check_t
        );
        if !too_many.is_empty() {
            why.push_str(&format!(
                "; {} would need more than 2048 threads per multiprocessor",
                join_nums(&too_many)
            ));
        }
        if let Some(lb) = existing {
            why.push_str(&format!("; it already has `{}`", text(cx, lb)));
        }
        return Err(na(why));
    }
    Ok(out)
}

/// Threads per block as the spec launches it.
struct Threads {
    /// The largest block (x·y·z) over every case and tunable value.
    max: u64,
    /// The tunable the block always equals, if any.
    symbol: Option<String>,
    /// For the label: how `max` was found when tunables were involved.
    note: Option<String>,
}

impl Threads {
    fn expr(&self) -> String {
        self.symbol.clone().unwrap_or_else(|| self.max.to_string())
    }
}

/// At most this many tunable combinations are evaluated for the block size.
const MAX_COMBINATIONS: usize = 256;

fn threads_per_block(cx: &RewriteContext<'_>) -> Result<Threads, RewriteError> {
    let k = cx.kernel;
    let env = EvalEnv::default();
    let report = spec::analyze(k, &cx.model.kernels, &env);
    let Some(plan) = report.plan else {
        return Err(na(if k.spec.lines.is_empty() {
            format!(
                "`{}` has no @bench spec, so its block size is unknown; add one (the \
                 \"insert spec skeleton\" action writes a start)",
                k.name
            )
        } else {
            format!(
                "the @bench spec of `{}` has errors, so its block size is unknown; fix them first",
                k.name
            )
        }));
    };
    let tunables: Vec<_> = plan
        .tunables
        .iter()
        .filter(|t| matches!(t.kind, TunableKind::Define | TunableKind::TemplateParam))
        .collect();
    let combos: usize = tunables
        .iter()
        .map(|t| t.values.len().max(1))
        .try_fold(1usize, |acc, n| acc.checked_mul(n))
        .unwrap_or(usize::MAX);
    if combos > MAX_COMBINATIONS {
        return Err(na(format!(
            "the tunables of `{}` have {} combinations (more than {MAX_COMBINATIONS}); \
             the largest block size was not worked out",
            k.name,
            if combos == usize::MAX {
                "too many".to_string()
            } else {
                combos.to_string()
            }
        )));
    }
    let block_max = |p: &spec::BenchPlan| {
        p.cases
            .iter()
            .filter_map(|c| match &c.launch {
                Launch::Cuda { block, .. } => Some(block.iter().product::<u64>()),
                Launch::Triton { .. } => None,
            })
            .max()
    };
    if tunables.is_empty() {
        let max = block_max(&plan).ok_or_else(|| no_block(k))?;
        return Threads::checked(k, max, None, None);
    }
    // Every combination: (values, largest block).
    let mut seen: Vec<(Vec<Value>, u64)> = Vec::new();
    for i in 0..combos {
        let mut rest = i;
        let mut overrides = BTreeMap::new();
        let mut values = Vec::new();
        for t in &tunables {
            let n = t.values.len().max(1);
            let v = t.values.get(rest % n).copied().unwrap_or(t.current);
            rest /= n;
            overrides.insert(t.name.clone(), v);
            values.push(v);
        }
        let r = spec::analyze_with(k, &cx.model.kernels, &env, &overrides);
        // A combination the spec rejects can never be launched; it does not bound T.
        if let Some(m) = r.plan.as_ref().and_then(block_max) {
            seen.push((values, m));
        }
    }
    let max = seen.iter().map(|s| s.1).max().ok_or_else(|| no_block(k))?;
    let symbol = tunables.iter().enumerate().find_map(|(i, t)| {
        let tracks = seen
            .iter()
            .all(|(vals, m)| vals.get(i) == Some(&Value::Int(*m as i64)));
        tracks.then(|| t.name.clone())
    });
    let names: Vec<&str> = tunables.iter().map(|t| t.name.as_str()).collect();
    let note = match &symbol {
        Some(_) => None,
        None if seen.iter().all(|s| s.1 == max) => None,
        None => Some(format!("largest block over tune {}", names.join(", "))),
    };
    Threads::checked(k, max, symbol, note)
}

impl Threads {
    fn checked(
        k: &syntax::Kernel,
        max: u64,
        symbol: Option<String>,
        note: Option<String>,
    ) -> Result<Threads, RewriteError> {
        if max == 0 || max > 1024 {
            return Err(na(format!(
                "`{}` launches blocks of {max} threads; `__launch_bounds__` needs 1 to 1024",
                k.name
            )));
        }
        Ok(Threads { max, symbol, note })
    }
}

fn no_block(k: &syntax::Kernel) -> RewriteError {
    na(format!(
        "the @bench spec of `{}` gives no CUDA block size (`block = ...`)",
        k.name
    ))
}

// ---------------------------------------------------------------------------------------
// maxnreg

/// `__maxnreg__(N)` for each N in `values` (default `[32, 64, 96, 128]`), written as
/// `__attribute__((maxnreg(N)))` (module doc). A kernel that already has one gets the
/// other values in its place.
pub fn maxnreg(cx: &RewriteContext<'_>) -> R {
    let unit = Unit::of(cx, "maxnreg")?;
    let values = int_list(cx, "values", &[32, 64, 96, 128], 16..=255)?;
    if named_children(unit.kernel)
        .iter()
        .any(|c| c.kind() == "launch_bounds")
    {
        return Err(na(format!(
            "`{}` has `__launch_bounds__`; NVRTC rejects `__maxnreg__` together with it \
             (remove the bounds to try a register cap)",
            cx.kernel.name
        )));
    }
    let existing = maxnreg_attribute(cx, unit.kernel);
    let (at, current) = match (existing, has_maxnreg(cx, unit.kernel)) {
        (Some((num, v)), _) => (num.byte_range(), Some(v)),
        (None, Some(why)) => {
            return Err(na(format!(
                "`{}` has {why}, which kernel-lsp cannot edit; write it as \
                 `__attribute__((maxnreg(N)))` to let `maxnreg` sweep it",
                cx.kernel.name
            )))
        }
        (None, None) => {
            let at = unit.attribute_point(cx)?;
            (at..at, None)
        }
    };
    let mut out = Vec::new();
    for n in values {
        if current == Some(n) {
            continue;
        }
        let insert = match current {
            Some(_) => n.to_string(),
            None => format!("__attribute__((maxnreg({n}))) "),
        };
        out.push(finish(
            cx,
            "maxnreg",
            format!("maxnreg {n}"),
            vec![Edit::replace(at.clone(), insert)],
        )?);
    }
    if out.is_empty() {
        return Err(na(format!(
            "`{}` already has maxnreg {} and no other value was asked for",
            cx.kernel.name,
            current.unwrap_or(0)
        )));
    }
    Ok(out)
}

/// `__attribute__((maxnreg(N)))` on the kernel: the number node and its value.
fn maxnreg_attribute<'t>(cx: &RewriteContext<'_>, def: Node<'t>) -> Option<(Node<'t>, u64)> {
    let header = header_nodes(def);
    for attr in header.iter().filter(|n| n.kind() == "attribute_specifier") {
        for call in descendants(*attr)
            .into_iter()
            .filter(|n| n.kind() == "call_expression")
        {
            if plain_callee(cx, call) != Some("maxnreg") {
                continue;
            }
            let args = call.child_by_field_name("arguments")?;
            let num = named_children(args).into_iter().next()?;
            let v = int_literal(text(cx, num))?;
            return Some((num, v));
        }
    }
    None
}

/// Why the kernel has a register cap already, if it has one in any spelling.
fn has_maxnreg(cx: &RewriteContext<'_>, def: Node<'_>) -> Option<String> {
    if maxnreg_attribute(cx, def).is_some() {
        return Some("`__attribute__((maxnreg(..)))`".into());
    }
    // `__maxnreg__(N)` does not parse as an attribute: look at every token before the
    // body, and at an ERROR node right before the definition (`extern "C" __maxnreg__(N)
    // __global__ ...`).
    let declarator = def.child_by_field_name("declarator").map(|d| d.id());
    let mut nodes = header_nodes(def);
    nodes.retain(|n| Some(n.id()) != declarator);
    if let Some(prev) = def.prev_sibling().filter(|p| p.kind() == "ERROR") {
        nodes.push(prev);
    }
    let found = nodes
        .iter()
        .flat_map(|n| descendants(*n))
        .any(|n| n.child_count() == 0 && text(cx, n) == "__maxnreg__");
    found.then(|| "`__maxnreg__`".to_string())
}

// ---------------------------------------------------------------------------------------
// unroll

/// `#pragma unroll N` on its own line, indented like the loop, before each innermost
/// counted `for` loop of the kernel unit that has no unroll pragma: one candidate per
/// `factors` value (default `[2, 4, 8]`), plus one with plain `#pragma unroll` (full
/// unrolling) on the loops whose trip count is a literal of at most 32.
///
/// Counted: the initializer declares or assigns one integer variable, the condition is
/// `var < E`, `var <= E` or `var != E`, and the update is `++`/`--` or `+=`/`-=` by a
/// literal, a template parameter or an ALL_CAPS name. Innermost: no counted loop inside
/// it. Loops that are the unbraced body of another statement are skipped (a pragma line
/// there would change what the outer statement controls).
pub fn unroll(cx: &RewriteContext<'_>) -> R {
    let unit = Unit::of(cx, "unroll")?;
    let factors = int_list(cx, "factors", &[2, 4, 8], 1..=1024)?;
    let mut loops = Vec::new();
    let mut reasons = Vec::new();
    let mut total = 0;
    for f in &unit.funcs {
        let Some(body) = f.child_by_field_name("body") else {
            continue;
        };
        let fors: Vec<Node> = descendants(body)
            .into_iter()
            .filter(|n| n.kind() == "for_statement")
            .collect();
        total += fors.len();
        for l in &fors {
            let counted = counted_loop(cx, *l);
            let header = loop_header(cx, *l);
            let trips = match counted {
                Ok(t) => t,
                Err(why) => {
                    reasons.push(format!("`{header}` is not counted ({why})"));
                    continue;
                }
            };
            let inner_counted = descendants(*l)
                .into_iter()
                .skip(1)
                .any(|n| n.kind() == "for_statement" && counted_loop(cx, n).is_ok());
            if inner_counted {
                continue; // the inner loops get the pragma
            }
            if has_unroll_pragma(cx, *l) {
                reasons.push(format!("`{header}` already has an unroll pragma"));
                continue;
            }
            if l.parent().map(|p| p.kind()) != Some("compound_statement") {
                reasons.push(format!("`{header}` is not directly inside braces"));
                continue;
            }
            loops.push((*l, trips));
        }
    }
    if loops.is_empty() {
        let mut why = format!("`{}` has no counted `for` loop to unroll", cx.kernel.name);
        if total == 0 {
            why.push_str(" (no `for` loop at all in the kernel unit)");
        } else {
            why.push_str(&format!(": {}", reasons.join("; ")));
        }
        return Err(na(why));
    }
    let n = loops.len();
    let plural = |n: usize| if n == 1 { "loop" } else { "loops" };
    let mut out = Vec::new();
    for factor in factors {
        let pragma = format!("#pragma unroll {factor}");
        let edits = loops.iter().map(|(l, _)| pragma_edit(cx, *l, &pragma));
        out.push(finish(
            cx,
            "unroll",
            format!("{pragma} on {n} {}", plural(n)),
            edits.collect(),
        )?);
    }
    let short: Vec<_> = loops
        .iter()
        .filter(|(_, t)| t.is_some_and(|t| (1..=32).contains(&t)))
        .collect();
    if !short.is_empty() {
        let edits = short
            .iter()
            .map(|(l, _)| pragma_edit(cx, *l, "#pragma unroll"));
        out.push(finish(
            cx,
            "unroll",
            format!(
                "#pragma unroll (full) on {} {} of ≤ 32 trips",
                short.len(),
                plural(short.len())
            ),
            edits.collect(),
        )?);
    }
    Ok(out)
}

/// `Ok(trip count if literal)` for a counted loop, `Err(why not)` otherwise.
fn counted_loop(cx: &RewriteContext<'_>, l: Node<'_>) -> Result<Option<u64>, String> {
    let init = l
        .child_by_field_name("initializer")
        .ok_or("no initializer")?;
    let (var, start) = match init.kind() {
        "declaration" => {
            let ty = init.child_by_field_name("type").ok_or("no type")?;
            if !is_integer_type(cx, ty) {
                return Err(format!("`{}` is not an integer type", text(cx, ty)));
            }
            let decls: Vec<Node> = {
                let mut c = init.walk();
                init.children_by_field_name("declarator", &mut c).collect()
            };
            let [d] = decls.as_slice() else {
                return Err("it declares several variables".into());
            };
            let v = d
                .child_by_field_name("declarator")
                .filter(|v| d.kind() == "init_declarator" && v.kind() == "identifier")
                .ok_or("the variable is not initialised")?;
            (text(cx, v), d.child_by_field_name("value"))
        }
        "assignment_expression" if field_kind(init, "operator") == Some("=") => {
            let v = init
                .child_by_field_name("left")
                .filter(|v| v.kind() == "identifier")
                .ok_or("the initializer does not assign a variable")?;
            (text(cx, v), init.child_by_field_name("right"))
        }
        _ => return Err("the initializer is not one integer variable".into()),
    };
    let cond = l.child_by_field_name("condition").ok_or("no condition")?;
    let op = field_kind(cond, "operator").unwrap_or("");
    let left_is_var = cond
        .child_by_field_name("left")
        .is_some_and(|n| n.kind() == "identifier" && text(cx, n) == var);
    if cond.kind() != "binary_expression" || !matches!(op, "<" | "<=" | "!=") || !left_is_var {
        return Err(format!(
            "the condition `{}` is not `{var} <`, `<=` or `!=` a bound",
            text(cx, cond)
        ));
    }
    let update = l.child_by_field_name("update").ok_or("no update")?;
    let upd = text(cx, update);
    let step: Option<i64> = match update.kind() {
        "update_expression"
            if update
                .child_by_field_name("argument")
                .is_some_and(|a| text(cx, a) == var) =>
        {
            Some(if upd.contains("++") { 1 } else { -1 })
        }
        "assignment_expression"
            if update
                .child_by_field_name("left")
                .is_some_and(|a| a.kind() == "identifier" && text(cx, a) == var)
                && matches!(field_kind(update, "operator"), Some("+=" | "-=")) =>
        {
            let right = update.child_by_field_name("right").ok_or("no step")?;
            let r = text(cx, right);
            let constant = right.kind() == "number_literal"
                || (right.kind() == "identifier"
                    && (cx.kernel.template_params.iter().any(|t| t == r) || is_all_caps(r)));
            if !constant {
                return Err(format!("the step `{r}` is not a constant"));
            }
            let sign = if field_kind(update, "operator") == Some("-=") {
                -1
            } else {
                1
            };
            int_literal(r).map(|s| sign * s as i64)
        }
        _ => {
            return Err(format!(
                "the update `{upd}` is not `++`, `--`, `+=` or `-=` by a constant"
            ))
        }
    };
    // The literal trip count, where init, bound and step are all literals.
    let lit = |n: Option<Node>| n.and_then(|n| int_literal(text(cx, n)));
    let (a, b) = match (lit(start), lit(cond.child_by_field_name("right"))) {
        (Some(a), Some(b)) => (a as i128, b as i128),
        _ => return Ok(None),
    };
    let Some(s) = step.filter(|s| *s > 0).map(i128::from) else {
        return Ok(None);
    };
    let span = match op {
        "<" => b - a,
        "<=" => b - a + 1,
        _ if (b - a) % s == 0 => b - a,
        _ => return Ok(None),
    };
    Ok(Some(if span <= 0 {
        0
    } else {
        ((span + s - 1) / s) as u64
    }))
}

fn is_integer_type(cx: &RewriteContext<'_>, ty: Node<'_>) -> bool {
    const INTS: &[&str] = &[
        "int",
        "char",
        "short",
        "long",
        "unsigned",
        "signed",
        "size_t",
        "ssize_t",
        "ptrdiff_t",
        "intptr_t",
        "uintptr_t",
        "int8_t",
        "int16_t",
        "int32_t",
        "int64_t",
        "uint8_t",
        "uint16_t",
        "uint32_t",
        "uint64_t",
        "index_t",
    ];
    match ty.kind() {
        "sized_type_specifier" => !text(cx, ty).contains("double"),
        "primitive_type" | "type_identifier" => INTS.contains(&text(cx, ty)),
        _ => false,
    }
}

fn is_all_caps(s: &str) -> bool {
    s.chars().any(|c| c.is_ascii_uppercase())
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// `for (init; cond; update)` as written, whitespace squeezed, for messages.
fn loop_header(cx: &RewriteContext<'_>, l: Node<'_>) -> String {
    let end = l
        .child_by_field_name("body")
        .map_or(l.end_byte(), |b| b.start_byte());
    let s = cx.text.get(l.start_byte()..end).unwrap_or("for");
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Is the statement right before loop `l` (comments skipped) `#pragma unroll ...` or
/// `#pragma nounroll`?
fn has_unroll_pragma(cx: &RewriteContext<'_>, l: Node<'_>) -> bool {
    let mut prev = l.prev_named_sibling();
    while let Some(p) = prev.filter(|p| p.kind() == "comment") {
        prev = p.prev_named_sibling();
    }
    let Some(p) = prev.filter(|p| p.kind() == "preproc_call") else {
        return false;
    };
    let directive = p
        .child_by_field_name("directive")
        .map_or("", |d| text(cx, d));
    let arg = p
        .child_by_field_name("argument")
        .map_or("", |a| text(cx, a));
    let arg = arg.trim_start();
    directive == "#pragma" && (arg.starts_with("unroll") || arg.starts_with("nounroll"))
}

/// Insert `pragma` on its own line before loop `l`, with the loop line's indentation.
fn pragma_edit(cx: &RewriteContext<'_>, l: Node<'_>, pragma: &str) -> Edit {
    let src = cx.text;
    let at = l.start_byte();
    let line_start = src[..at].rfind('\n').map_or(0, |i| i + 1);
    let line_end = src[at..].find('\n').map_or(src.len(), |i| at + i);
    let eol = if src[..line_end].ends_with('\r') {
        "\r\n"
    } else {
        "\n"
    };
    let before = &src[line_start..at];
    let indent: String = before
        .chars()
        .take_while(|c| *c == ' ' || *c == '\t')
        .collect();
    if before.trim().is_empty() {
        Edit::insert(line_start, format!("{indent}{pragma}{eol}"))
    } else {
        // Something precedes the loop on its line (`{ for (...)`): break the line,
        // replacing the blanks between that and the loop.
        let blanks = before.len() - before.trim_end_matches([' ', '\t']).len();
        Edit::replace(
            at - blanks..at,
            format!("{eol}{indent}{pragma}{eol}{indent}"),
        )
    }
}

// ---------------------------------------------------------------------------------------
// fast_math

/// Single-precision math calls and their fast intrinsics.
const INTRINSICS: &[(&str, &str)] = &[
    ("expf", "__expf"),
    ("exp10f", "__exp10f"),
    ("logf", "__logf"),
    ("log2f", "__log2f"),
    ("log10f", "__log10f"),
    ("sinf", "__sinf"),
    ("cosf", "__cosf"),
    ("tanf", "__tanf"),
    ("powf", "__powf"),
];

/// In the kernel unit (`__host__ __device__` functions excepted): `expf` → `__expf` and
/// the other calls in [`INTRINSICS`]; `1.0f / sqrtf(x)` → `rsqrtf(x)`; and, unless the
/// parameter `divisions` is false, `a / b` → `__fdividef(a, b)` where both operands are
/// surely `float` (a literal with an `f` suffix, a variable declared `float` in the same
/// function, an element of a `float` pointer or one-dimensional array declared there,
/// and no other declaration of that name in the function). One candidate.
pub fn fast_math(cx: &RewriteContext<'_>) -> R {
    let unit = Unit::of(cx, "fast_math")?;
    let divisions = bool_param(cx, "divisions", true)?;
    let mut edits = Vec::new();
    let mut renamed: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut rsqrt, mut fdiv, mut skipped_host) = (0, 0, 0);
    for f in &unit.funcs {
        if has_token(*f, "__host__") {
            skipped_host += 1;
            continue;
        }
        let Some(body) = f.child_by_field_name("body") else {
            continue;
        };
        let floats = FloatNames::of(cx, *f);
        for n in descendants(body) {
            match n.kind() {
                "call_expression" => {
                    let Some(func) = n
                        .child_by_field_name("function")
                        .filter(|f| f.kind() == "identifier")
                    else {
                        continue;
                    };
                    let name = text(cx, func);
                    if cx.kernel.callees.iter().any(|c| c == name) {
                        continue; // the file defines its own `expf`
                    }
                    if let Some((from, to)) = INTRINSICS.iter().find(|(from, _)| *from == name) {
                        edits.push(Edit::replace(func.byte_range(), *to));
                        *renamed.entry(from).or_default() += 1;
                    }
                }
                "binary_expression" if field_kind(n, "operator") == Some("/") => {
                    if let Some(e) = rsqrt_edit(cx, n) {
                        edits.push(e);
                        rsqrt += 1;
                    } else if divisions {
                        if let Some(e) = fdividef_edits(cx, n, &floats) {
                            edits.extend(e);
                            fdiv += 1;
                        }
                    }
                }
                _ => {}
            }
        }
    }
    if edits.is_empty() {
        let mut why = format!(
            "`{}` calls none of {}{}",
            cx.kernel.name,
            INTRINSICS
                .iter()
                .map(|(f, _)| *f)
                .collect::<Vec<_>>()
                .join(", "),
            if divisions {
                ", has no `1.0f / sqrtf(x)` and no division of two surely-float operands"
            } else {
                " and has no `1.0f / sqrtf(x)`"
            }
        );
        if skipped_host > 0 {
            why.push_str(" (`__host__ __device__` functions are left alone)");
        }
        return Err(na(why));
    }
    let mut parts: Vec<String> = renamed
        .iter()
        .map(|(from, n)| {
            let to = INTRINSICS
                .iter()
                .find(|(f, _)| f == from)
                .map_or("", |(_, t)| *t);
            times(format!("{from}→{to}"), *n)
        })
        .collect();
    if rsqrt > 0 {
        parts.push(times("1.0f / sqrtf→rsqrtf".into(), rsqrt));
    }
    if fdiv > 0 {
        parts.push(times("/→__fdividef".into(), fdiv));
    }
    Ok(vec![finish(cx, "fast_math", parts.join(", "), edits)?])
}

fn times(s: String, n: usize) -> String {
    if n == 1 {
        s
    } else {
        format!("{s} ×{n}")
    }
}

/// `1.0f / sqrtf(x)` → `rsqrtf(x)`: replaces `1.0f / sqrtf(` with `rsqrtf(` and keeps
/// the argument and its `)` as they are.
fn rsqrt_edit(cx: &RewriteContext<'_>, div: Node<'_>) -> Option<Edit> {
    let left = div.child_by_field_name("left")?;
    let right = div.child_by_field_name("right")?;
    if left.kind() != "number_literal" || float_f_literal(text(cx, left)) != Some(1.0) {
        return None;
    }
    if right.kind() != "call_expression" || plain_callee(cx, right) != Some("sqrtf") {
        return None;
    }
    if cx.kernel.callees.iter().any(|c| c == "sqrtf") {
        return None;
    }
    let args = right.child_by_field_name("arguments")?;
    if named_children(args)
        .iter()
        .filter(|a| a.kind() != "comment")
        .count()
        != 1
    {
        return None;
    }
    let open = args.child(0).filter(|c| c.kind() == "(")?;
    let replaced = div.start_byte()..open.end_byte();
    if contains_comment(div, &replaced) {
        return None;
    }
    Some(Edit::replace(replaced, "rsqrtf("))
}

/// `a / b` → `__fdividef(a, b)` as three edits around the operands (which stay as
/// written), when both operands are surely float and no comment sits between them.
fn fdividef_edits(
    cx: &RewriteContext<'_>,
    div: Node<'_>,
    floats: &FloatNames,
) -> Option<Vec<Edit>> {
    let left = div.child_by_field_name("left")?;
    let right = div.child_by_field_name("right")?;
    if !floats.surely_float(cx, left) || !floats.surely_float(cx, right) {
        return None;
    }
    let between = left.end_byte()..right.start_byte();
    if contains_comment(div, &between) {
        return None;
    }
    Some(vec![
        Edit::insert(div.start_byte(), "__fdividef("),
        Edit::replace(between, ", "),
        Edit::insert(div.end_byte(), ")"),
    ])
}

/// The names one function declares as `float` scalars and as one-level `float` pointers
/// or arrays; a name declared with any other type anywhere in the function is in none.
struct FloatNames {
    scalars: HashSet<String>,
    arrays: HashSet<String>,
    other: HashSet<String>,
}

impl FloatNames {
    fn of(cx: &RewriteContext<'_>, f: Node<'_>) -> FloatNames {
        let mut names = FloatNames {
            scalars: HashSet::new(),
            arrays: HashSet::new(),
            other: HashSet::new(),
        };
        let mut decls: Vec<Node> = Vec::new();
        if let Some((_, params)) = name_and_params(cx, f) {
            decls.extend(named_children(params));
        }
        if let Some(body) = f.child_by_field_name("body") {
            decls.extend(
                descendants(body)
                    .into_iter()
                    .filter(|n| n.kind() == "declaration"),
            );
        }
        for d in decls {
            let is_float = d
                .child_by_field_name("type")
                .is_some_and(|t| t.kind() == "primitive_type" && text(cx, t) == "float");
            let mut c = d.walk();
            let declarators: Vec<Node> = d.children_by_field_name("declarator", &mut c).collect();
            for mut decl in declarators {
                if decl.kind() == "init_declarator" {
                    match decl.child_by_field_name("declarator") {
                        Some(inner) => decl = inner,
                        None => continue,
                    }
                }
                let inner_ident = decl
                    .child_by_field_name("declarator")
                    .filter(|i| i.kind() == "identifier");
                let (name, slot) = match (decl.kind(), inner_ident) {
                    ("identifier", _) => (text(cx, decl), &mut names.scalars),
                    ("pointer_declarator" | "array_declarator", Some(i)) => {
                        (text(cx, i), &mut names.arrays)
                    }
                    _ => {
                        // Anything deeper: every identifier in it is "other".
                        for i in descendants(decl)
                            .into_iter()
                            .filter(|i| i.kind() == "identifier")
                        {
                            names.other.insert(text(cx, i).to_string());
                        }
                        continue;
                    }
                };
                if is_float {
                    slot.insert(name.to_string());
                } else {
                    names.other.insert(name.to_string());
                }
            }
        }
        names
    }

    fn surely_float(&self, cx: &RewriteContext<'_>, e: Node<'_>) -> bool {
        let ok = |set: &HashSet<String>, n: &str| set.contains(n) && !self.other.contains(n);
        match e.kind() {
            "number_literal" => float_f_literal(text(cx, e)).is_some(),
            "identifier" => ok(&self.scalars, text(cx, e)) && !self.arrays.contains(text(cx, e)),
            "subscript_expression" => e.child_by_field_name("argument").is_some_and(|a| {
                a.kind() == "identifier"
                    && ok(&self.arrays, text(cx, a))
                    && !self.scalars.contains(text(cx, a))
            }),
            "parenthesized_expression" => {
                let inner = named_children(e);
                matches!(inner.as_slice(), [i] if self.surely_float(cx, *i))
            }
            _ => false,
        }
    }
}

/// The value of a float literal with an `f`/`F` suffix (`1.0f`, `2.f`, `1e-3f`), else
/// `None` (hex integers such as `0xff` end in `f` too and are not floats).
fn float_f_literal(s: &str) -> Option<f64> {
    let body = s.strip_suffix(['f', 'F'])?;
    let lower = body.to_ascii_lowercase();
    if lower.starts_with("0x") {
        return None; // hex floats (`0x1p3f`) are rare enough to leave alone
    }
    if !(lower.contains('.') || lower.contains('e')) {
        return None;
    }
    body.replace('\'', "").parse::<f64>().ok()
}

// ---------------------------------------------------------------------------------------
// Shared: the unit's nodes, edits, validation, parameters.

/// The kernel's `function_definition` and those of every unit member (kernel first).
struct Unit<'t> {
    kernel: Node<'t>,
    funcs: Vec<Node<'t>>,
}

impl<'t> Unit<'t> {
    fn of(cx: &RewriteContext<'t>, rewrite: &str) -> Result<Unit<'t>, RewriteError> {
        let k = cx.kernel;
        if cx.lang != Lang::Cuda || k.lang != Lang::Cuda {
            return Err(na(format!(
                "`{rewrite}` rewrites CUDA kernels; `{}` is a Triton kernel",
                k.name
            )));
        }
        let root = cx.tree.root_node();
        let kernel = root
            .descendant_for_byte_range(k.name_range.start, k.name_range.end)
            .and_then(|n| ancestor(n, "function_definition"))
            .filter(|d| k.def_range.start <= d.start_byte() && d.end_byte() <= k.def_range.end)
            .ok_or_else(|| {
                na(format!(
                    "the definition of `{}` was not found in this text (was the model made \
                     from an older version?)",
                    k.name
                ))
            })?;
        let mut funcs = vec![kernel];
        for r in &k.unit_ranges {
            if r.start <= kernel.start_byte() && kernel.end_byte() <= r.end {
                continue;
            }
            if let Some(f) = root
                .descendant_for_byte_range(r.start, r.end)
                .and_then(first_function_definition)
            {
                funcs.push(f);
            }
        }
        Ok(Unit { kernel, funcs })
    }

    /// Where an attribute goes: right before the kernel's declarator (after the return
    /// type), e.g. `__global__ void |k(...)`.
    fn attribute_point(&self, cx: &RewriteContext<'_>) -> Result<usize, RewriteError> {
        self.kernel
            .child_by_field_name("declarator")
            .map(|d| d.start_byte())
            .ok_or_else(|| na(format!("`{}` has no declarator", cx.kernel.name)))
    }
}

/// The first `function_definition` at or under `n`, not looking into function bodies.
fn first_function_definition(n: Node<'_>) -> Option<Node<'_>> {
    let mut stack = vec![n];
    while let Some(x) = stack.pop() {
        if x.kind() == "function_definition" {
            return Some(x);
        }
        if x.kind() == "compound_statement" {
            continue;
        }
        let mut kids = named_children(x);
        kids.reverse();
        stack.extend(kids);
    }
    None
}

fn ancestor<'t>(n: Node<'t>, kind: &str) -> Option<Node<'t>> {
    let mut cur = Some(n);
    while let Some(c) = cur {
        if c.kind() == kind {
            return Some(c);
        }
        cur = c.parent();
    }
    None
}

/// The node of `kind` that spans exactly `range`.
fn node_with_range<'t>(cx: &RewriteContext<'t>, range: &ByteRange, kind: &str) -> Option<Node<'t>> {
    let mut n = cx
        .tree
        .root_node()
        .descendant_for_byte_range(range.start, range.end)?;
    loop {
        if n.kind() == kind && n.byte_range() == *range {
            return Some(n);
        }
        n = n.parent()?;
        if n.start_byte() < range.start {
            return None;
        }
    }
}

/// A function definition's name and parameter list.
fn name_and_params<'s, 't>(cx: &RewriteContext<'s>, f: Node<'t>) -> Option<(&'s str, Node<'t>)> {
    let mut d = f.child_by_field_name("declarator")?;
    for _ in 0..16 {
        if d.kind() == "function_declarator" {
            let name = d.child_by_field_name("declarator")?;
            let params = d.child_by_field_name("parameters")?;
            let name = descendants(name)
                .into_iter()
                .rev()
                .find(|n| n.kind() == "identifier")
                .map_or("", |n| text(cx, n));
            return Some((name, params));
        }
        d = d.child_by_field_name("declarator")?;
    }
    None
}

/// The nodes of a definition before its body (specifiers, attributes, declarator).
fn header_nodes(def: Node<'_>) -> Vec<Node<'_>> {
    let body = def.child_by_field_name("body").map(|b| b.id());
    let mut c = def.walk();
    let out = def
        .children(&mut c)
        .filter(|n| Some(n.id()) != body)
        .collect();
    out
}

/// Does the definition carry the keyword `tok` (`__host__`) among its specifiers?
fn has_token(def: Node<'_>, tok: &str) -> bool {
    header_nodes(def).iter().any(|n| {
        n.kind() == tok
            || (n.kind() == "type_qualifier" && n.child(0).is_some_and(|q| q.kind() == tok))
    })
}

/// The callee's name when a call calls a plain identifier (`f(...)`).
fn plain_callee<'s>(cx: &RewriteContext<'s>, call: Node<'_>) -> Option<&'s str> {
    call.child_by_field_name("function")
        .filter(|f| f.kind() == "identifier")
        .map(|f| text(cx, f))
}

fn field_kind<'t>(n: Node<'t>, field: &str) -> Option<&'static str> {
    n.child_by_field_name(field).map(|o| o.kind())
}

fn named_children(n: Node<'_>) -> Vec<Node<'_>> {
    let mut c = n.walk();
    let out = n.named_children(&mut c).collect();
    out
}

/// `n` and everything under it, in document order (an explicit stack: nesting depth is
/// input-controlled).
fn descendants(n: Node<'_>) -> Vec<Node<'_>> {
    let mut out = Vec::new();
    let mut stack = vec![n];
    while let Some(x) = stack.pop() {
        out.push(x);
        let mut c = x.walk();
        let kids: Vec<Node> = x.children(&mut c).collect();
        stack.extend(kids.into_iter().rev());
    }
    out
}

fn contains_comment(n: Node<'_>, range: &ByteRange) -> bool {
    descendants(n)
        .iter()
        .any(|c| c.kind() == "comment" && c.start_byte() < range.end && range.start < c.end_byte())
}

fn text<'s>(cx: &RewriteContext<'s>, n: Node<'_>) -> &'s str {
    let src: &'s str = cx.text;
    src.get(n.byte_range()).unwrap_or("")
}

/// An integer literal's value: `16`, `0x10`, `16u`, `16UL`, `1'024`.
fn int_literal(s: &str) -> Option<u64> {
    let s = s.trim().replace('\'', "");
    let s = s.trim_end_matches(['u', 'U', 'l', 'L']);
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).ok();
    }
    if s.len() > 1 && s.starts_with('0') {
        return u64::from_str_radix(&s[1..], 8).ok();
    }
    s.parse().ok()
}

fn squeeze(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

fn join_nums(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
}

fn na(msg: String) -> RewriteError {
    RewriteError::NotApplicable(msg)
}

/// One splice: replace `at` with `text` (an insertion when `at` is empty).
#[derive(Clone, Debug)]
struct Edit {
    at: ByteRange,
    text: String,
}

impl Edit {
    fn insert(at: usize, text: impl Into<String>) -> Edit {
        Edit {
            at: at..at,
            text: text.into(),
        }
    }

    fn replace(at: ByteRange, text: impl Into<String>) -> Edit {
        Edit {
            at,
            text: text.into(),
        }
    }
}

/// Apply `edits` and check the result: every edit inside the kernel unit, none
/// overlapping, and the new text still has the kernel, with the same `@bench` lines,
/// and no syntax error the old text did not have. A failed check is a kernel-lsp bug,
/// reported as "not applicable" so that the step loop moves on.
fn finish(
    cx: &RewriteContext<'_>,
    rewrite: &str,
    label: String,
    mut edits: Vec<Edit>,
) -> Result<Candidate, RewriteError> {
    let k = cx.kernel;
    let bug = |why: &str| {
        na(format!(
            "`{rewrite}` ({label}) on `{}` made an edit kernel-lsp could not check ({why}); \
             the kernel is left as it is. Please report this with the kernel's source",
            k.name
        ))
    };
    edits.sort_by_key(|e| (e.at.start, e.at.end));
    let in_unit = |e: &Edit| {
        k.unit_ranges
            .iter()
            .any(|r| r.start <= e.at.start && e.at.end <= r.end)
    };
    if !edits.iter().all(in_unit) {
        return Err(bug("an edit falls outside the kernel unit"));
    }
    if edits.windows(2).any(|w| w[0].at.end > w[1].at.start) {
        return Err(bug("two edits overlap"));
    }
    let mut out = String::with_capacity(cx.text.len() + 64 * edits.len());
    let mut pos = 0;
    for e in &edits {
        let Some(kept) = cx.text.get(pos..e.at.start) else {
            return Err(bug("an edit is not on a character boundary"));
        };
        out.push_str(kept);
        out.push_str(&e.text);
        pos = e.at.end;
    }
    out.push_str(cx.text.get(pos..).unwrap_or(""));

    let mut parser = Parser::new();
    if parser
        .set_language(&syntax::ts_language(Lang::Cuda))
        .is_err()
    {
        return Err(bug("the CUDA grammar did not load"));
    }
    let Some(tree) = parser.parse(&out, None) else {
        return Err(bug("the parser gave up"));
    };
    let model = syntax::analyze(Lang::Cuda, &out, &tree);
    let Some(new) = model.kernel(&k.name) else {
        return Err(bug("the kernel is no longer found"));
    };
    let spec_text = |k: &syntax::Kernel| {
        k.spec
            .lines
            .iter()
            .map(|l| l.text.clone())
            .collect::<Vec<_>>()
    };
    if spec_text(new) != spec_text(k) {
        return Err(bug("the @bench lines changed"));
    }
    if model.syntax_errors.len() > cx.model.syntax_errors.len() {
        return Err(bug("the new text has a syntax error"));
    }
    Ok(Candidate { label, text: out })
}

/// A list of integers from `cx.params[name]`, each in `range`; `default` when absent.
fn int_list(
    cx: &RewriteContext<'_>,
    name: &str,
    default: &[u64],
    range: std::ops::RangeInclusive<u64>,
) -> Result<Vec<u64>, RewriteError> {
    let to_i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let default: Vec<i64> = default.iter().map(|v| to_i(*v)).collect();
    let range = to_i(*range.start())..=to_i(*range.end());
    let list = super::int_param(cx.params, name, &default, range)?;
    // Every value is within a range of non-negative numbers.
    Ok(list.into_iter().map(|v| v.unsigned_abs()).collect())
}

fn bool_param(cx: &RewriteContext<'_>, name: &str, default: bool) -> Result<bool, RewriteError> {
    match cx.params.get(name) {
        None => Ok(default),
        Some(serde_json::Value::Bool(b)) => Ok(*b),
        Some(other) => Err(RewriteError::BadParam {
            name: name.to_string(),
            message: format!("expected true or false, got `{other}`"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use expect_test::{expect, Expect};

    use super::super::{apply, Candidate, RewriteContext, RewriteError};
    use crate::document::Document;
    use crate::syntax::{self, Lang};

    const SAXPY: &str = include_str!("../../../../examples/saxpy.cu");
    const MATMUL: &str = include_str!("../../../../examples/matmul_naive.cu");
    const REDUCE: &str = include_str!("../../../../examples/reduce_sum.cu");

    fn run(
        id: &str,
        src: &str,
        kernel: &str,
        params: serde_json::Value,
    ) -> Result<Vec<Candidate>, RewriteError> {
        let doc = Document::new(Lang::Cuda, 0, src);
        let tree = doc.tree().expect("parsed");
        let model = syntax::analyze(Lang::Cuda, src, tree);
        let k = model.kernel(kernel).expect("kernel in fixture");
        let params: BTreeMap<String, serde_json::Value> = match params {
            serde_json::Value::Object(m) => m.into_iter().collect(),
            _ => BTreeMap::new(),
        };
        let cx = RewriteContext {
            lang: Lang::Cuda,
            text: src,
            tree,
            model: &model,
            kernel: k,
            params: &params,
        };
        let out = apply(id, &cx)?;
        for c in &out {
            assert_only_unit_changed(src, &c.text, kernel);
        }
        Ok(out)
    }

    /// Everything outside the kernel unit is byte for byte the same.
    fn assert_only_unit_changed(old: &str, new: &str, kernel: &str) {
        let outside = |text: &str| {
            let doc = Document::new(Lang::Cuda, 0, text);
            let model = syntax::analyze(Lang::Cuda, text, doc.tree().expect("parsed"));
            let k = model.kernel(kernel).expect("kernel still there");
            let mut parts = Vec::new();
            let mut pos = 0;
            for r in &k.unit_ranges {
                parts.push(text[pos..r.start].to_string());
                pos = r.end;
            }
            parts.push(text[pos..].to_string());
            parts
        };
        assert_eq!(outside(old), outside(new));
    }

    /// Each candidate's label and its kernel unit.
    fn render(kernel: &str, out: Result<Vec<Candidate>, RewriteError>) -> String {
        match out {
            Err(e) => format!("error: {e}\n"),
            Ok(cands) => {
                let mut s = String::new();
                for c in cands {
                    let doc = Document::new(Lang::Cuda, 0, &c.text);
                    let model = syntax::analyze(Lang::Cuda, &c.text, doc.tree().expect("parsed"));
                    let k = model.kernel(kernel).expect("kernel");
                    s.push_str(&format!("## {}\n", c.label));
                    for r in &k.unit_ranges {
                        s.push_str(&c.text[r.clone()]);
                        s.push('\n');
                    }
                }
                s
            }
        }
    }

    fn check(id: &str, src: &str, kernel: &str, params: serde_json::Value, want: Expect) {
        want.assert_eq(&render(kernel, run(id, src, kernel, params)));
    }

    fn params(json: &str) -> serde_json::Value {
        serde_json::from_str(json).expect("test params are JSON")
    }

    const NONE: &str = "{}";

    // --- restrict_const ------------------------------------------------------------

    #[test]
    fn restrict_const_on_the_examples() {
        check(
            "restrict_const",
            SAXPY,
            "saxpy",
            params(NONE),
            expect![[r###"
            ## __restrict__ on x, y
            extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }
        "###]],
        );
        check(
            "restrict_const",
            MATMUL,
            "matmul",
            params(NONE),
            expect![[r###"
            ## __restrict__ on a, b, c
            extern "C" __global__ void matmul(int m, int n, int k, const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c) {
                int row = blockIdx.y * blockDim.y + threadIdx.y;
                int col = blockIdx.x * blockDim.x + threadIdx.x;
                if (row < m && col < n) {
                    float acc = 0.0f;
                    for (int i = 0; i < k; ++i) {
                        acc += a[row * k + i] * b[i * n + col];
                    }
                    c[row * n + col] = acc;
                }
            }
        "###]],
        );
        check(
            "restrict_const",
            REDUCE,
            "reduce_tree",
            params(NONE),
            expect![[r###"
            ## __restrict__ on x, out
            __device__ float load_as_float(const __half* p, int i) {
                return __half2float(p[i]);
            }
            extern "C" __global__ void reduce_tree(int n, const __half* __restrict__ x, float* __restrict__ out) {
                extern __shared__ float buf[];
                int i = blockIdx.x * BLOCK + threadIdx.x;
                buf[threadIdx.x] = i < n ? load_as_float(x, i) : 0.0f;
                __syncthreads();
                for (int s = BLOCK / 2; s > 0; s >>= 1) {
                    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
                    __syncthreads();
                }
                if (threadIdx.x == 0) atomicAdd(out, buf[0]);
            }
        "###]],
        );
    }

    /// Every way of writing or leaking a pointer keeps it non-const; comments, strings
    /// and odd spacing stay as they are.
    const WRITES: &str = r#"#include <cuda_fp16.h>
__device__ void store(float* p, int i, float v) { p[i] = v; }

// @bench n = 1024
// @bench a: in f32[n]; b: in f32[n]; c: out f32[n]; d: inout f32[n]
// @bench e: out f32[n]; f: out f32[n]; g: in f32[n]; h: inout f32[n]
// @bench grid = cdiv(n, 128); block = 128
extern "C" __global__ void k(int n,
                  float *a,   // read only: gets const
                  float* /* odd */ b,
                  float *c,
                  float * d,
                  float* e, float *f, float*g, float* h) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = a[i] + *(b + i) + __ldg(&g[i]);   // a[i] = 0; in a comment is no write
    const char* msg = "c[i] = 1"; (void)msg;
    *(c + i) = v;          // written through *(p + i): no const
    d[i] += 1.0f;
    atomicAdd(&e[i], v);
    store(f, i, v);
    float* alias = h;
    alias[i] = v;
}
"#;

    #[test]
    fn restrict_const_only_consts_what_is_only_read() {
        check(
            "restrict_const",
            WRITES,
            "k",
            params(NONE),
            expect![[r###"
            ## __restrict__ on a, b, c, d, e, f, g, h; const on a, b, g
            __device__ void store(float* p, int i, float v) { p[i] = v; }
            extern "C" __global__ void k(int n,
                              const float *__restrict__ a,   // read only: gets const
                              const float* /* odd */ __restrict__ b,
                              float *__restrict__ c,
                              float * __restrict__ d,
                              float* __restrict__ e, float *__restrict__ f, const float*__restrict__ g, float* __restrict__ h) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i >= n) return;
                float v = a[i] + *(b + i) + __ldg(&g[i]);   // a[i] = 0; in a comment is no write
                const char* msg = "c[i] = 1"; (void)msg;
                *(c + i) = v;          // written through *(p + i): no const
                d[i] += 1.0f;
                atomicAdd(&e[i], v);
                store(f, i, v);
                float* alias = h;
                alias[i] = v;
            }
        "###]],
        );
    }

    #[test]
    fn restrict_const_in_a_template_kernel() {
        let src = "// @bench n = 64\n// @bench x: in f32[n]; y: out f32[n]\n// @bench tune T in [1]\n// @bench grid = 1; block = 64\ntemplate <int T>\n__global__ void t(int n, const float *x, float *y) {\n    int i = threadIdx.x;\n    if (i < n) y[i] = T * x[i];\n}\n";
        check(
            "restrict_const",
            src,
            "t",
            params(NONE),
            expect![[r#"
            ## __restrict__ on x, y
            template <int T>
            __global__ void t(int n, const float *__restrict__ x, float *__restrict__ y) {
                int i = threadIdx.x;
                if (i < n) y[i] = T * x[i];
            }
        "#]],
        );
    }

    #[test]
    fn restrict_const_has_nothing_to_do() {
        let done = "__global__ void k(const float* __restrict__ x, float* __restrict__ y) { y[0] = x[0]; }\n";
        check(
            "restrict_const",
            done,
            "k",
            params(NONE),
            expect![[r#"
            error: every pointer parameter of `k` is already `__restrict__`, and the others are written through, passed on or cast, so `const` cannot be added safely
        "#]],
        );
        let scalars = "__global__ void k(int n, float a) {}\n";
        check(
            "restrict_const",
            scalars,
            "k",
            params(NONE),
            expect![[r#"
            error: `k` has no pointer parameter
        "#]],
        );
    }

    #[test]
    fn a_macro_naming_the_pointer_keeps_it_non_const() {
        let src = "#define ZERO(i) y[i] = 0.0f\n__global__ void k(float* __restrict__ y) { ZERO(threadIdx.x); }\n";
        check(
            "restrict_const",
            src,
            "k",
            params(NONE),
            expect![[r#"
            error: every pointer parameter of `k` is already `__restrict__`, and the others are written through, passed on or cast, so `const` cannot be added safely
        "#]],
        );
    }

    // --- launch_bounds -------------------------------------------------------------

    #[test]
    fn launch_bounds_on_the_examples() {
        check(
            "launch_bounds",
            SAXPY,
            "saxpy",
            params(NONE),
            expect![[r###"
            ## __launch_bounds__(256)
            extern "C" __global__ void __launch_bounds__(256) saxpy(int n, float a, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }
            ## __launch_bounds__(256, 2)
            extern "C" __global__ void __launch_bounds__(256, 2) saxpy(int n, float a, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }
            ## __launch_bounds__(256, 4)
            extern "C" __global__ void __launch_bounds__(256, 4) saxpy(int n, float a, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }
        "###]],
        );
        // The block is the tunable BLOCK itself: written by name; 512 * 8 > 2048.
        check(
            "launch_bounds",
            REDUCE,
            "reduce_tree",
            params(r#"{"min_blocks": [1, 8]}"#),
            expect![[r###"
                ## __launch_bounds__(BLOCK)
                __device__ float load_as_float(const __half* p, int i) {
                    return __half2float(p[i]);
                }
                extern "C" __global__ void __launch_bounds__(BLOCK) reduce_tree(int n, const __half* x, float* out) {
                    extern __shared__ float buf[];
                    int i = blockIdx.x * BLOCK + threadIdx.x;
                    buf[threadIdx.x] = i < n ? load_as_float(x, i) : 0.0f;
                    __syncthreads();
                    for (int s = BLOCK / 2; s > 0; s >>= 1) {
                        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
                        __syncthreads();
                    }
                    if (threadIdx.x == 0) atomicAdd(out, buf[0]);
                }
            "###]],
        );
    }

    #[test]
    fn launch_bounds_takes_the_largest_block_over_tunables() {
        let src = "// @bench n = 4096\n// @bench x: in f32[n]\n// @bench tune BX in [32, 64]\n// @bench grid = cdiv(n, BX * 4); block = (BX, 4)\n__global__ void k(int n, const float* x) {}\n";
        check(
            "launch_bounds",
            src,
            "k",
            params(r#"{"min_blocks": [2]}"#),
            expect![[r#"
            ## __launch_bounds__(256, 2) (largest block over tune BX)
            __global__ void __launch_bounds__(256, 2) k(int n, const float* x) {}
        "#]],
        );
    }

    #[test]
    fn launch_bounds_on_a_template_kernel_names_the_template_parameter() {
        let src = "// @bench n = 4096\n// @bench x: in f32[n]\n// @bench tune TILE in [64, 128]\n// @bench grid = cdiv(n, TILE); block = TILE\ntemplate <int TILE>\n__global__ void\nk(int n, const float* x) {}\n";
        check(
            "launch_bounds",
            src,
            "k",
            params(r#"{"min_blocks": [1]}"#),
            expect![[r#"
            ## __launch_bounds__(TILE)
            template <int TILE>
            __global__ void
            __launch_bounds__(TILE) k(int n, const float* x) {}
        "#]],
        );
    }

    #[test]
    fn launch_bounds_keeps_an_existing_thread_count_and_sweeps_min_blocks() {
        let src = "// @bench n = 4096\n// @bench x: in f32[n]\n// @bench grid = cdiv(n, 128); block = 128\n__global__ void __launch_bounds__( 128 ) k(int n, const float* x) {}\n";
        check(
            "launch_bounds",
            src,
            "k",
            params(NONE),
            expect![[r#"
            ## __launch_bounds__(128, 2)
            __global__ void __launch_bounds__(128, 2) k(int n, const float* x) {}
            ## __launch_bounds__(128, 4)
            __global__ void __launch_bounds__(128, 4) k(int n, const float* x) {}
        "#]],
        );
        check(
            "launch_bounds",
            src,
            "k",
            params(r#"{"min_blocks": [1]}"#),
            expect![[r#"
            error: no `min_blocks` value gives a new `__launch_bounds__` for `k` (128 threads per block); it already has `__launch_bounds__( 128 )`
        "#]],
        );
    }

    #[test]
    fn launch_bounds_not_applicable() {
        let no_spec = "__global__ void k(float* x) {}\n";
        check(
            "launch_bounds",
            no_spec,
            "k",
            params(NONE),
            expect![[r#"
            error: `k` has no @bench spec, so its block size is unknown; add one (the "insert spec skeleton" action writes a start)
        "#]],
        );
        let capped = "// @bench n = 64\n// @bench x: in f32[n]\n// @bench grid = 1; block = 64\n__global__ void __attribute__((maxnreg(32))) k(int n, float* x) {}\n";
        check(
            "launch_bounds",
            capped,
            "k",
            params(NONE),
            expect![[r#"
            error: `k` has `__attribute__((maxnreg(..)))`; NVRTC rejects `__launch_bounds__` together with it
        "#]],
        );
        let big = "// @bench n = 1024\n// @bench x: in f32[n]\n// @bench grid = 1; block = 1024\n__global__ void k(int n, float* x) {}\n";
        check(
            "launch_bounds",
            big,
            "k",
            params(r#"{"min_blocks": [4, 8]}"#),
            expect![[r#"
            error: no `min_blocks` value gives a new `__launch_bounds__` for `k` (1024 threads per block); 4, 8 would need more than 2048 threads per multiprocessor
        "#]],
        );
    }

    #[test]
    fn bad_parameters_say_which_and_why() {
        check(
            "launch_bounds",
            SAXPY,
            "saxpy",
            params(r#"{"min_blocks": "two"}"#),
            expect![[r#"
                error: parameter `min_blocks`: expected a non-empty list of integers from 1 to 32, found `"two"`
            "#]],
        );
        check(
            "launch_bounds",
            SAXPY,
            "saxpy",
            params(r#"{"min_blocks": [0]}"#),
            expect![[r#"
                error: parameter `min_blocks`: expected a list of integers from 1 to 32, found `0`
            "#]],
        );
        check(
            "unroll",
            MATMUL,
            "matmul",
            params(r#"{"factors": []}"#),
            expect![[r#"
                error: parameter `factors`: expected a non-empty list of integers from 1 to 1024, found `[]`
            "#]],
        );
        check(
            "maxnreg",
            SAXPY,
            "saxpy",
            params(r#"{"values": [8]}"#),
            expect![[r#"
                error: parameter `values`: expected a list of integers from 16 to 255, found `8`
            "#]],
        );
        check(
            "fast_math",
            SAXPY,
            "saxpy",
            params(r#"{"divisions": "yes"}"#),
            expect![[r#"
            error: parameter `divisions`: expected true or false, got `"yes"`
        "#]],
        );
    }

    // --- unroll --------------------------------------------------------------------

    #[test]
    fn unroll_on_the_examples() {
        check(
            "unroll",
            MATMUL,
            "matmul",
            params(r#"{"factors": [4]}"#),
            expect![[r###"
            ## #pragma unroll 4 on 1 loop
            extern "C" __global__ void matmul(int m, int n, int k, const float* a, const float* b, float* c) {
                int row = blockIdx.y * blockDim.y + threadIdx.y;
                int col = blockIdx.x * blockDim.x + threadIdx.x;
                if (row < m && col < n) {
                    float acc = 0.0f;
                    #pragma unroll 4
                    for (int i = 0; i < k; ++i) {
                        acc += a[row * k + i] * b[i * n + col];
                    }
                    c[row * n + col] = acc;
                }
            }
        "###]],
        );
        check(
            "unroll",
            SAXPY,
            "saxpy",
            params(NONE),
            expect![[r#"
            error: `saxpy` has no counted `for` loop to unroll (no `for` loop at all in the kernel unit)
        "#]],
        );
        check(
            "unroll",
            REDUCE,
            "reduce_tree",
            params(NONE),
            expect![[r#"
            error: `reduce_tree` has no counted `for` loop to unroll: `for (int s = BLOCK / 2; s > 0; s >>= 1)` is not counted (the condition `s > 0` is not `s <`, `<=` or `!=` a bound)
        "#]],
        );
    }

    const LOOPS: &str = "__device__ float dot4(const float* a, const float* b) {\n\tfloat s = 0.0f;\n\tfor (int j = 0; j < 4; j++)   // literal trip count\n\t\ts += a[j] * b[j];\n\treturn s;\n}\n\n// @bench n = 256\n// @bench x: in f32[n]; y: out f32[n]\n// @bench grid = 1; block = 64\n__global__ void k(int n, const float* x, float* y) {\n    for (int r = 0; r < 4; ++r) {   // outer: not marked\n        for (unsigned c = 0; c <= 15; c += 2) { y[r * 16 + c] = dot4(x, x + c); }\n    }\n    #pragma unroll 1\n    for (int i = 0; i != n; i++) y[i] += 1.0f;\n    if (n > 8) for (int i = 0; i < 8; i++) y[i] = 0.0f;\n    { for (int i = 0; i < n; i += 4) y[i] *= 2.0f; }\n    for (int s = n; s > 0; s /= 2) {}\n}\n";

    #[test]
    fn unroll_marks_innermost_counted_loops_with_their_indentation() {
        check(
            "unroll",
            LOOPS,
            "k",
            params(r#"{"factors": [4]}"#),
            expect![[r#"
            ## #pragma unroll 4 on 3 loops
            __device__ float dot4(const float* a, const float* b) {
            	float s = 0.0f;
            	#pragma unroll 4
            	for (int j = 0; j < 4; j++)   // literal trip count
            		s += a[j] * b[j];
            	return s;
            }
            __global__ void k(int n, const float* x, float* y) {
                for (int r = 0; r < 4; ++r) {   // outer: not marked
                    #pragma unroll 4
                    for (unsigned c = 0; c <= 15; c += 2) { y[r * 16 + c] = dot4(x, x + c); }
                }
                #pragma unroll 1
                for (int i = 0; i != n; i++) y[i] += 1.0f;
                if (n > 8) for (int i = 0; i < 8; i++) y[i] = 0.0f;
                {
                #pragma unroll 4
                for (int i = 0; i < n; i += 4) y[i] *= 2.0f; }
                for (int s = n; s > 0; s /= 2) {}
            }
            ## #pragma unroll (full) on 2 loops of ≤ 32 trips
            __device__ float dot4(const float* a, const float* b) {
            	float s = 0.0f;
            	#pragma unroll
            	for (int j = 0; j < 4; j++)   // literal trip count
            		s += a[j] * b[j];
            	return s;
            }
            __global__ void k(int n, const float* x, float* y) {
                for (int r = 0; r < 4; ++r) {   // outer: not marked
                    #pragma unroll
                    for (unsigned c = 0; c <= 15; c += 2) { y[r * 16 + c] = dot4(x, x + c); }
                }
                #pragma unroll 1
                for (int i = 0; i != n; i++) y[i] += 1.0f;
                if (n > 8) for (int i = 0; i < 8; i++) y[i] = 0.0f;
                { for (int i = 0; i < n; i += 4) y[i] *= 2.0f; }
                for (int s = n; s > 0; s /= 2) {}
            }
        "#]],
        );
    }

    #[test]
    fn unroll_keeps_crlf_line_ends() {
        let src =
            "__global__ void k(float* y) {\r\n  for (int i = 0; i < 8; i++) y[i] = 0.0f;\r\n}\r\n";
        let out = run("unroll", src, "k", params(r#"{"factors": [2]}"#)).expect("a candidate");
        assert_eq!(
            out[0].text,
            "__global__ void k(float* y) {\r\n  #pragma unroll 2\r\n  for (int i = 0; i < 8; i++) y[i] = 0.0f;\r\n}\r\n"
        );
    }

    // --- fast_math -----------------------------------------------------------------

    const MATH: &str = "__host__ __device__ float both(float v) { return expf(v); }\n__device__ float gelu_ish(float v) { return v * powf(2.0f, v) / 3.0f; }\n\n// @bench n = 1024\n// @bench x: in f32[n]; y: out f32[n]\n// @bench grid = cdiv(n, 256); block = 256\nextern \"C\" __global__ void k(int n, const float* x, float* y) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i >= n) return;\n    // expf(x) in a comment stays\n    float sum = expf(x[i]) + logf( x[i] + 1.0f );\n    float inv = 1.0f / sqrtf(sum + 1e-5f);\n    float d = 1.0 / sqrtf(sum);         // double: stays\n    int half = n / 2;                   // int: stays\n    y[i] = x[i] / sum + inv * d + half + both(x[i]) + gelu_ish(x[i]) + sinf(cosf(x[i])) / 2;\n}\n";

    #[test]
    fn fast_math_swaps_calls_rsqrt_and_float_divisions() {
        check(
            "fast_math",
            MATH,
            "k",
            params(NONE),
            expect![[r###"
            ## cosf→__cosf, expf→__expf, logf→__logf, powf→__powf, sinf→__sinf, 1.0f / sqrtf→rsqrtf, /→__fdividef
            __host__ __device__ float both(float v) { return expf(v); }
            __device__ float gelu_ish(float v) { return v * __powf(2.0f, v) / 3.0f; }
            extern "C" __global__ void k(int n, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i >= n) return;
                // expf(x) in a comment stays
                float sum = __expf(x[i]) + __logf( x[i] + 1.0f );
                float inv = rsqrtf(sum + 1e-5f);
                float d = 1.0 / sqrtf(sum);         // double: stays
                int half = n / 2;                   // int: stays
                y[i] = __fdividef(x[i], sum) + inv * d + half + both(x[i]) + gelu_ish(x[i]) + __sinf(__cosf(x[i])) / 2;
            }
        "###]],
        );
        check(
            "fast_math",
            MATH,
            "k",
            params(r#"{"divisions": false}"#),
            expect![[r###"
            ## cosf→__cosf, expf→__expf, logf→__logf, powf→__powf, sinf→__sinf, 1.0f / sqrtf→rsqrtf
            __host__ __device__ float both(float v) { return expf(v); }
            __device__ float gelu_ish(float v) { return v * __powf(2.0f, v) / 3.0f; }
            extern "C" __global__ void k(int n, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i >= n) return;
                // expf(x) in a comment stays
                float sum = __expf(x[i]) + __logf( x[i] + 1.0f );
                float inv = rsqrtf(sum + 1e-5f);
                float d = 1.0 / sqrtf(sum);         // double: stays
                int half = n / 2;                   // int: stays
                y[i] = x[i] / sum + inv * d + half + both(x[i]) + gelu_ish(x[i]) + __sinf(__cosf(x[i])) / 2;
            }
        "###]],
        );
    }

    #[test]
    fn fast_math_not_applicable() {
        check(
            "fast_math",
            SAXPY,
            "saxpy",
            params(NONE),
            expect![[r#"
            error: `saxpy` calls none of expf, exp10f, logf, log2f, log10f, sinf, cosf, tanf, powf, has no `1.0f / sqrtf(x)` and no division of two surely-float operands
        "#]],
        );
    }

    // --- maxnreg -------------------------------------------------------------------

    #[test]
    fn maxnreg_on_saxpy() {
        check(
            "maxnreg",
            SAXPY,
            "saxpy",
            params(r#"{"values": [32, 64]}"#),
            expect![[r###"
            ## maxnreg 32
            extern "C" __global__ void __attribute__((maxnreg(32))) saxpy(int n, float a, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }
            ## maxnreg 64
            extern "C" __global__ void __attribute__((maxnreg(64))) saxpy(int n, float a, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }
        "###]],
        );
    }

    #[test]
    fn maxnreg_replaces_an_existing_cap_and_refuses_launch_bounds() {
        let capped = "__global__ void __attribute__((maxnreg(64))) k(float* x) { x[0] = 1.0f; }\n";
        check(
            "maxnreg",
            capped,
            "k",
            params(r#"{"values": [32, 64]}"#),
            expect![[r#"
            ## maxnreg 32
            __global__ void __attribute__((maxnreg(32))) k(float* x) { x[0] = 1.0f; }
        "#]],
        );
        check(
            "maxnreg",
            capped,
            "k",
            params(r#"{"values": [64]}"#),
            expect![[r#"
            error: `k` already has maxnreg 64 and no other value was asked for
        "#]],
        );
        let bounded = "__global__ void __launch_bounds__(256) k(float* x) {}\n";
        check(
            "maxnreg",
            bounded,
            "k",
            params(NONE),
            expect![[r#"
            error: `k` has `__launch_bounds__`; NVRTC rejects `__maxnreg__` together with it (remove the bounds to try a register cap)
        "#]],
        );
        let written = "extern \"C\" __maxnreg__(32) __global__ void k(float* x) {}\n";
        check(
            "maxnreg",
            written,
            "k",
            params(NONE),
            expect![[r#"
            error: `k` has `__maxnreg__`, which kernel-lsp cannot edit; write it as `__attribute__((maxnreg(N)))` to let `maxnreg` sweep it
        "#]],
        );
    }

    #[test]
    fn triton_kernels_are_not_for_these_rewrites() {
        let src = "import triton\n@triton.jit\ndef k(x):\n    pass\n";
        let doc = Document::new(Lang::Triton, 0, src);
        let tree = doc.tree().expect("parsed");
        let model = syntax::analyze(Lang::Triton, src, tree);
        let params = BTreeMap::new();
        let cx = RewriteContext {
            lang: Lang::Triton,
            text: src,
            tree,
            model: &model,
            kernel: &model.kernels[0],
            params: &params,
        };
        let err = apply("unroll", &cx).expect_err("not for Triton");
        expect!["`unroll` rewrites CUDA kernels; `k` is a Triton kernel"]
            .assert_eq(&err.to_string());
    }

    #[test]
    fn literals() {
        assert_eq!(super::int_literal("16"), Some(16));
        assert_eq!(super::int_literal("0x10u"), Some(16));
        assert_eq!(super::int_literal("1'024"), Some(1024));
        assert_eq!(super::int_literal("010"), Some(8));
        assert_eq!(super::int_literal("1.0f"), None);
        assert_eq!(super::float_f_literal("1.0f"), Some(1.0));
        assert_eq!(super::float_f_literal("1.F"), Some(1.0));
        assert_eq!(super::float_f_literal("1e-5f"), Some(1e-5));
        assert_eq!(super::float_f_literal("0xff"), None);
        assert_eq!(super::float_f_literal("1.0"), None);
    }
}
