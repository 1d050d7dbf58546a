//! `grid_total`: a kernel launched as one block (or one thread) that walks a whole range
//! and folds it into a few accumulators (a loss, a norm, a dot product, a global maximum)
//! keeps one multiprocessor busy while the others sit idle. The loop is spread over a grid
//! of blocks instead: each thread of each block walks a grid-stride share of the range
//! into its own accumulators, writes them to a scratch array, and the last block to finish
//! (a ticket from an atomic counter after a `__threadfence`) combines every block's
//! partials in block order, then runs the author's code after the loop unchanged: the
//! block combine (a shared-memory tree, shuffles) and the epilogue that writes the result.
//! The combine order is fixed, so results do not depend on which block finished last.
//!
//! **Matches**, from the launch and the loop analysis (`facts::carries`): every case
//! launches a grid of one block; the kernel reads neither `blockIdx` nor `gridDim`; one
//! loop at the kernel's top level carries sums, counts, products, maxima or minima of
//! scalars declared before it, reads global memory and writes none, and has no barrier,
//! warp collective, atomic, `return` or `break`. Its header is `for (T i = S + threadIdx.x;
//! i < N; i += blockDim.x)` on a 1-D block (a block stride, `threadIdx.x` possibly through
//! an alias), or `for (T i = S; i < N; ++i)` on a block of one thread (serial).
//!
//! **Refuses**, with the reason: a launch of more than one block, a kernel that already
//! reads `blockIdx`/`gridDim`, no loop carrying such a value or several (two passes), a
//! running value read mid-loop (a prefix, an argmax's index), global writes before or
//! inside the loop, and accumulators of other types than the C arithmetic ones.
//!
//! **Writes** the loop as a grid-stride loop; accumulators of a sum or product that may
//! start from a nonzero value restart from 0 (1) in every thread but the original ones;
//! function-scope `static` scratch arrays of `1 << 20` partials and a block counter
//! (global memory, zero at load, the counter reset by the last block), read back past L1
//! (`__ldcg`) 8 blocks at a time; a serial kernel
//! gets a block of 256 or 1024 threads (param `serial_threads`) whose partials a
//! shared-memory tree folds for thread 0,
//! which alone runs the code after the loop. Grid `min(K * sms, 1024)` for K in param
//! `blocks_per_sm` (default [1, 2, 4]); the loop then runs several iterations per trip
//! (`interleave`), so each thread keeps loads in flight. Each shape also comes with
//! 16-byte loads where the loop reads buffers at its own variable ([`vector`]).

use std::collections::BTreeMap;

use tree_sitter::Node;

use super::check::{current_plan, finish, not_applicable, require_lang, set_spec_values, Draft, R};
use super::edits::{Edit, Edits};
use super::elementwise::thread_field_aliases;
use super::params::Params;
use super::tree::{
    code_names, kernel_function, line_indent, named_children, nested_in, newline, text, walk,
};

/// What a `break` inside leaves instead of the loop around it.
const LOOPS_AND_SWITCH: &[&str] = &[
    "for_statement",
    "while_statement",
    "do_statement",
    "switch_statement",
];
use super::RewriteContext;
use crate::optimize::facts::{static_facts, AccessKind, Carried};
use crate::spec::{BenchPlan, Launch};
use crate::syntax::Lang;

#[cfg(test)]
mod tests;
mod vector;

const ID: &str = "grid_total";
/// The most threads a serial kernel's block may get (its tree's shared arrays).
const SERIAL_BLOCK: u64 = 1024;
/// Partials each scratch array holds: a grid of at most 1024 blocks of 1024 threads.
const SLOTS: &str = "1 << 20";

/// How the one block walks the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// `for (i = S + threadIdx.x; i < N; i += blockDim.x)`.
    BlockStride,
    /// `for (i = S; i < N; ++i)` in a block of one thread.
    Serial,
}

/// How partials of one accumulator combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fold {
    Sum,
    Product,
    Max,
    Min,
}

impl Fold {
    /// The carry kinds of `facts::carries` this rewrite can combine.
    fn of(kind: &str) -> Option<Fold> {
        match kind {
            "sum" | "count" => Some(Fold::Sum),
            "product" => Some(Fold::Product),
            "max" => Some(Fold::Max),
            "min" => Some(Fold::Min),
            _ => None,
        }
    }

    /// `target` folded with `other`, as a statement.
    fn statement(self, target: &str, other: &str) -> String {
        match self {
            Fold::Sum => format!("{target} += {other};"),
            Fold::Product => format!("{target} *= {other};"),
            Fold::Max => format!("if ({other} > {target}) {target} = {other};"),
            Fold::Min => format!("if ({other} < {target}) {target} = {other};"),
        }
    }

    /// The value threads other than the original ones restart from, when the
    /// accumulator's start may not be it; None when folding is idempotent.
    fn identity(self) -> Option<&'static str> {
        match self {
            Fold::Sum => Some("0"),
            Fold::Product => Some("1"),
            Fold::Max | Fold::Min => None,
        }
    }
}

/// One carried accumulator.
#[derive(Debug)]
struct Acc {
    name: String,
    ty: String,
    fold: Fold,
    /// Its start is not the fold's identity: other threads restart it.
    reset: bool,
}

/// The matched kernel.
struct Total<'t> {
    form: Form,
    l: Node<'t>,
    var: String,
    /// The loop's start value and its update expression.
    start: Node<'t>,
    update: Node<'t>,
    accs: Vec<Acc>,
}

pub fn grid_total(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, ID)?;
    let plan = current_plan(cx)?;
    let per_sm = Params(cx.params).ints("blocks_per_sm", &[1, 2, 4], 1..=64)?;
    let k = &cx.kernel.name;
    let func = kernel_function(cx)
        .ok_or_else(|| not_applicable(format!("`{k}`'s definition is not in the syntax tree")))?;
    let block = one_block(&plan).map_err(|why| not_applicable(format!("`{k}` {why}")))?;
    let total = analyze(cx, func, block).map_err(|why| {
        not_applicable(format!("`{k}` cannot spread its total over a grid: {why}"))
    })?;
    let codes: Vec<(Edits, Option<&str>)> = [false, true]
        .into_iter()
        .filter_map(|vector| emit(cx, &total, vector))
        .collect();
    let shapes: Vec<(i64, Option<i64>)> = match total.form {
        Form::BlockStride => per_sm.iter().map(|n| (*n, None)).collect(),
        Form::Serial => serial_threads(cx)?
            .into_iter()
            .flat_map(|t| per_sm.iter().map(move |n| (*n, Some(t))))
            .collect(),
    };
    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    for ((n, threads), (code, vty)) in shapes
        .iter()
        .flat_map(|s| codes.iter().map(move |c| (*s, c)))
    {
        let mut label = format!("grid of min({n} * sms, 1024) blocks");
        let mut values = vec![("grid".to_string(), format!("min({n} * sms, 1024)"))];
        if let Some(t) = threads {
            label.push_str(&format!(" of {t}"));
            values.push(("block".to_string(), t.to_string()));
        }
        if let Some(v) = vty {
            label.push_str(&format!(", {v} loads"));
        }
        label.push_str(", last block combines");
        let text = code
            .apply(cx.text)
            .map_err(|e| e.to_string())
            .and_then(|t| set_spec_values(&t, cx.kernel, &values).map_err(|e| e.to_string()));
        match text {
            Ok(text) => drafts.push(super::split_loop::with_loads_in_flight(
                cx,
                Draft { label, text },
            )),
            Err(e) => dropped.push(format!("{label}: {e}")),
        }
    }
    finish(cx, drafts, dropped)
}

/// The block sizes a serial kernel may get (param `serial_threads`, default [256, 1024]):
/// powers of two up to [`SERIAL_BLOCK`], for the last block's tree.
fn serial_threads(cx: &RewriteContext<'_>) -> Result<Vec<i64>, super::RewriteError> {
    let threads =
        Params(cx.params).ints("serial_threads", &[256, 1024], 32..=SERIAL_BLOCK as i64)?;
    match threads.iter().find(|t| !(**t as u64).is_power_of_two()) {
        Some(t) => Err(super::check::bad_param(
            "serial_threads",
            format!("{t} is not a power of two; the last block folds its threads as a tree"),
        )),
        None => Ok(threads),
    }
}

/// Every case's launch is one block; its block shape (case 0's; every case must agree).
fn one_block(plan: &BenchPlan) -> Result<[u64; 3], String> {
    let mut shape = None;
    for c in &plan.cases {
        let Launch::Cuda { grid, block, .. } = &c.launch else {
            return Err("has no CUDA launch".into());
        };
        if grid.iter().product::<u64>() != 1 {
            return Err(format!(
                "launches {} blocks, not one: its blocks already share the work",
                grid.iter().product::<u64>()
            ));
        }
        if shape.is_some_and(|s| s != *block) {
            return Err("launches blocks of different shapes in different cases".into());
        }
        shape = Some(*block);
    }
    shape.ok_or_else(|| "has no case to launch".into())
}

/// The kernel as one loop folding a range into accumulators, or why not.
fn analyze<'t>(
    cx: &RewriteContext<'t>,
    func: Node<'t>,
    block: [u64; 3],
) -> Result<Total<'t>, String> {
    let src = cx.text;
    let body = func.child_by_field_name("body").ok_or("it has no body")?;
    if let Some(w) = ["blockIdx", "gridDim"]
        .iter()
        .find(|w| reads_word(src, body, w))
    {
        return Err(format!(
            "it reads `{w}`: its work is already split by block"
        ));
    }
    let top = named_children(body);
    let f = static_facts(cx.lang, cx.text, cx.tree, cx.model, cx.kernel);
    let reading: Vec<u32> = f
        .loops
        .iter()
        .filter(|l| l.via.is_none() && l.global_loads > 0)
        .map(|l| l.line)
        .collect();
    let carrying: Vec<(Node, Vec<Carried>)> = top
        .iter()
        .filter(|n| {
            n.kind() == "for_statement" && reading.contains(&(n.start_position().row as u32 + 1))
        })
        .map(|n| (*n, crate::optimize::facts::carried(src, *n)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    let (l, carried) = match (carrying.as_slice(), reading.len()) {
        ([one], 1) => one.clone(),
        ([], _) => return Err("no `for` loop at its top level reads global memory and carries a sum, product, maximum or minimum".into()),
        (_, n) => return Err(format!("{n} loops read global memory (a total in several passes)")),
    };
    loop_reads_only(&f, l)?;
    body_is_plain(src, l)?;
    let before: Vec<Node> = top
        .iter()
        .copied()
        .filter(|n| n.end_byte() <= l.start_byte())
        .collect();
    if let Some(r) = before
        .iter()
        .find_map(|n| first_of_kind(*n, "return_statement"))
    {
        return Err(format!(
            "`{}` returns before its loop: every thread of every block must reach the combine",
            text(src, r)
        ));
    }
    let (var, start, update) = header(src, l)?;
    let form = form_of(src, &before, start, update, block)?;
    let accs = carried
        .iter()
        .map(|c| accumulator(src, &before, c))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Total {
        form,
        l,
        var,
        start,
        update,
        accs,
    })
}

/// The first node of `kind` under `n` (itself included).
fn first_of_kind<'t>(n: Node<'t>, kind: &str) -> Option<Node<'t>> {
    let mut found = None;
    walk(n, &mut |c| {
        if found.is_none() && c.kind() == kind {
            found = Some(c);
        }
        found.is_none()
    });
    found
}

/// Does any identifier or field under `n` name `word` (`blockIdx.x` names `blockIdx`)?
fn reads_word(src: &str, n: Node<'_>, word: &str) -> bool {
    let mut found = false;
    walk(n, &mut |c| {
        found |= c.kind() == "identifier" && text(src, c) == word;
        !found
    });
    found
}

/// The loop reads global memory and writes none, and nothing before it writes any.
fn loop_reads_only(f: &crate::optimize::facts::Facts, l: Node<'_>) -> Result<(), String> {
    let (first, last) = (
        l.start_position().row as u32 + 1,
        l.end_position().row as u32 + 1,
    );
    let mine = |a: &&crate::optimize::facts::Access| a.via.is_none();
    let writes = |a: &&crate::optimize::facts::Access| a.kind != AccessKind::Load;
    if let Some(a) = f
        .accesses
        .iter()
        .filter(mine)
        .filter(writes)
        .find(|a| a.line <= last)
    {
        let where_ = if a.line < first { "before" } else { "inside" };
        return Err(format!(
            "line {}: it writes `{}[{}]` {where_} the loop; only the code after it may write",
            a.line, a.buffer, a.index
        ));
    }
    let reads = f
        .accesses
        .iter()
        .filter(mine)
        .any(|a| (first..=last).contains(&a.line));
    if !reads {
        return Err("its carrying loop reads no global memory".into());
    }
    Ok(())
}

/// No barrier, warp collective, atomic, `return`, `break` or `goto` in the loop.
fn body_is_plain(src: &str, l: Node<'_>) -> Result<(), String> {
    let mut bad: Option<String> = None;
    walk(l, &mut |n| {
        let what = match n.kind() {
            "return_statement" | "goto_statement" => Some(text(src, n).to_string()),
            "break_statement" if !nested_in(n, l, LOOPS_AND_SWITCH) => Some("break".to_string()),
            "call_expression" => n
                .child_by_field_name("function")
                .map(|f| text(src, f))
                .filter(|f| {
                    f.starts_with("__sync")
                        || f.starts_with("__shfl")
                        || f.starts_with("atomic")
                        || f.starts_with("__ballot")
                        || f.starts_with("__any")
                        || f.starts_with("__all")
                })
                .map(str::to_string),
            _ => None,
        };
        if bad.is_none() {
            bad = what;
        }
        bad.is_none()
    });
    match bad {
        Some(what) => Err(format!(
            "its loop has `{}`, which a grid-stride share cannot keep",
            first_words(&what)
        )),
        None => Ok(()),
    }
}

fn first_words(s: &str) -> &str {
    let s = s.lines().next().unwrap_or("").trim();
    &s[..s.len().min(40)]
}

/// `for (T i = V; i < N; UPDATE)`: the variable, V and UPDATE.
fn header<'t>(src: &str, l: Node<'t>) -> Result<(String, Node<'t>, Node<'t>), String> {
    let shape = "its loop header is not `for (T i = start; i < end; step)`";
    let init = l
        .child_by_field_name("initializer")
        .filter(|n| n.kind() == "declaration")
        .ok_or(shape)?;
    let decls: Vec<Node> = {
        let mut c = init.walk();
        init.children_by_field_name("declarator", &mut c).collect()
    };
    let [d] = decls.as_slice() else {
        return Err(shape.into());
    };
    let name = d
        .child_by_field_name("declarator")
        .filter(|n| n.kind() == "identifier")
        .ok_or(shape)?;
    let start = d.child_by_field_name("value").ok_or(shape)?;
    let var = text(src, name).to_string();
    let cond = l.child_by_field_name("condition").ok_or(shape)?;
    let op = cond.child_by_field_name("operator").map(|o| text(src, o));
    let left = cond.child_by_field_name("left").map(|n| text(src, n));
    if cond.kind() != "binary_expression" || op != Some("<") || left != Some(var.as_str()) {
        return Err(format!(
            "its loop condition `{}` is not `{var} < end`",
            text(src, cond)
        ));
    }
    let update = l.child_by_field_name("update").ok_or(shape)?;
    Ok((var, start, update))
}

/// Block stride or serial, from the start, the update and the block shape.
fn form_of(
    src: &str,
    before: &[Node<'_>],
    start: Node<'_>,
    update: Node<'_>,
    block: [u64; 3],
) -> Result<Form, String> {
    let mut aliases: BTreeMap<String, String> = BTreeMap::new();
    for d in before.iter().filter(|n| n.kind() == "declaration") {
        for (name, field) in thread_field_aliases(src, *d, &aliases).unwrap_or_default() {
            aliases.insert(name, field);
        }
    }
    let lane = |n: Node<'_>| {
        let t: String = text(src, n)
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        t == "threadIdx.x" || aliases.get(&t).is_some_and(|f| f == "threadIdx.x")
    };
    let mentions_thread = |n: Node<'_>| {
        reads_word(src, n, "threadIdx") || aliases.keys().any(|a| reads_word(src, n, a))
    };
    let step: String = match update.kind() {
        "update_expression" if text(src, update).contains("++") => "1".into(),
        "assignment_expression"
            if update
                .child_by_field_name("operator")
                .is_some_and(|o| text(src, o) == "+=") =>
        {
            let r = update.child_by_field_name("right").ok_or("no step")?;
            let t: String = text(src, r)
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect();
            if aliases.get(&t).is_some_and(|f| f == "blockDim.x") {
                "blockDim.x".into()
            } else {
                t
            }
        }
        _ => {
            return Err(format!(
                "its loop step `{}` is not `++i` or `i += ...`",
                text(src, update)
            ))
        }
    };
    let lane_start = lane(start)
        || (start.kind() == "binary_expression"
            && start
                .child_by_field_name("operator")
                .is_some_and(|o| text(src, o) == "+")
            && [("left", "right"), ("right", "left")].iter().any(|(a, b)| {
                start.child_by_field_name(a).is_some_and(lane)
                    && start
                        .child_by_field_name(b)
                        .is_some_and(|o| !mentions_thread(o))
            }));
    match step.as_str() {
        "blockDim.x" if lane_start && block[1] == 1 && block[2] == 1 => Ok(Form::BlockStride),
        "blockDim.x" => Err(format!(
            "its loop starts at `{}` and steps by blockDim.x on block ({}, {}, {}): not one 1-D block's stride",
            text(src, start), block[0], block[1], block[2]
        )),
        "1" if block == [1, 1, 1] && !mentions_thread(start) => Ok(Form::Serial),
        "1" => Err(format!(
            "every thread of its block ({}, {}, {}) walks the range one step at a time",
            block[0], block[1], block[2]
        )),
        s => Err(format!("its loop steps by `{s}`, neither blockDim.x nor 1")),
    }
}

/// The accumulator `c`, declared at the top level before the loop as a scalar of an
/// arithmetic type.
fn accumulator(src: &str, before: &[Node<'_>], c: &Carried) -> Result<Acc, String> {
    let fold = Fold::of(&c.kind).ok_or_else(|| {
        let what = match c.kind.as_str() {
            "prefix sum" => "as a running sum read inside the loop",
            _ => "as a value that is no sum, product, maximum or minimum (an index beside a maximum, a rescaled sum)",
        };
        format!("its loop carries `{}` {what}, which partial results cannot reproduce", c.name)
    })?;
    for d in before.iter().rev().filter(|n| n.kind() == "declaration") {
        let mut cur = d.walk();
        for decl in d.children_by_field_name("declarator", &mut cur) {
            let (name, value) = match decl.kind() {
                "init_declarator" => (
                    decl.child_by_field_name("declarator"),
                    decl.child_by_field_name("value"),
                ),
                "identifier" => (Some(decl), None),
                _ => continue,
            };
            if name.is_none_or(|n| n.kind() != "identifier" || text(src, n) != c.name) {
                continue;
            }
            let ty = d
                .child_by_field_name("type")
                .map(|t| text(src, t).to_string())
                .unwrap_or_default();
            if !ARITHMETIC.contains(&ty.as_str()) {
                return Err(format!(
                    "`{}` is a `{ty}`; partials are kept for arithmetic scalars only",
                    c.name
                ));
            }
            let starts_at = value.map(|v| literal_value(text(src, v)));
            let reset = fold
                .identity()
                .is_some_and(|id| starts_at.flatten() != id.parse::<f64>().ok());
            return Ok(Acc {
                name: c.name.clone(),
                ty,
                fold,
                reset,
            });
        }
    }
    Err(format!(
        "`{}` is not declared at the kernel's top level before its loop",
        c.name
    ))
}

pub(in crate::optimize::rewrite) const ARITHMETIC: &[&str] = &[
    "float",
    "double",
    "int",
    "unsigned",
    "unsigned int",
    "long",
    "unsigned long",
    "long long",
    "unsigned long long",
    "size_t",
    "int32_t",
    "uint32_t",
    "int64_t",
    "uint64_t",
];

/// A numeric literal's value (`0.0f`, `0u`, `1.`), None for anything else.
fn literal_value(t: &str) -> Option<f64> {
    let t = t.trim().trim_end_matches(['f', 'F', 'u', 'U', 'l', 'L']);
    t.parse::<f64>().ok()
}

/// The edits: the loop's start and step, the restarts before it, the combine after it.
/// The edits: the loop's start and step (or, with `vector`, the loop as
/// [`vector::vector_loop`] writes it, then None when it cannot), the restarts before it,
/// the combine after it. Also the vector type the loop loads, if any.
fn emit(
    cx: &RewriteContext<'_>,
    t: &Total<'_>,
    vector: bool,
) -> Option<(Edits, Option<&'static str>)> {
    let src = cx.text;
    let nl = newline(src);
    let ind = line_indent(src, t.l.start_byte()).to_string();
    let mut names = code_names(cx);
    let vloop = if vector {
        Some(vector::vector_loop(cx, t, &ind, nl, &mut names)?)
    } else {
        None
    };
    let mut fresh = |base: &str| super::tree::fresh(base, &mut names);
    let s = match t.start.kind() {
        "identifier" | "number_literal" | "field_expression" | "binary_expression"
            if t.form == Form::BlockStride =>
        {
            text(src, t.start).to_string()
        }
        "identifier" | "number_literal" | "field_expression" => text(src, t.start).to_string(),
        _ => format!("({})", text(src, t.start)),
    };
    let start = match t.form {
        Form::BlockStride => format!("{s} + blockIdx.x * blockDim.x"),
        Form::Serial => format!("{s} + blockIdx.x * blockDim.x + threadIdx.x"),
    };
    let mut restart = String::new();
    let original = match t.form {
        Form::BlockStride => "blockIdx.x != 0",
        Form::Serial => "blockIdx.x != 0 || threadIdx.x != 0",
    };
    for a in t.accs.iter().filter(|a| a.reset) {
        let id = a
            .fold
            .identity()
            .expect("reset only for folds with an identity");
        restart.push_str(&format!(
            "if ({original}) {} = {id}; // other threads start from the identity{nl}{ind}",
            a.name
        ));
    }
    let names = Names {
        slot: fresh("slot"),
        done: fresh("blocks_done"),
        last: fresh("last_block"),
        g: fresh("g"),
        w: fresh("w"),
    };
    let parts: Vec<String> = t
        .accs
        .iter()
        .map(|a| fresh(&format!("{}_parts", a.name)))
        .collect();
    let tree: Vec<String> = t
        .accs
        .iter()
        .map(|a| fresh(&format!("{}_lanes", a.name)))
        .collect();
    let combine = combine_text(t, &names, &parts, &tree, &ind, nl);
    let mut e = Edits::new();
    let vty = vloop.as_ref().map(|v| v.1);
    match vloop {
        Some((text, _)) => e.extend([Edit::replace(t.l.byte_range(), format!("{restart}{text}"))]),
        None => {
            e.extend([
                Edit::replace(t.start.byte_range(), start),
                Edit::replace(
                    t.update.byte_range(),
                    format!("{} += gridDim.x * blockDim.x", t.var),
                ),
            ]);
            if !restart.is_empty() {
                e.extend([Edit::insert(t.l.start_byte(), restart)]);
            }
        }
    }
    e.extend([Edit::insert(t.l.end_byte(), combine)]);
    Some((e, vty))
}

/// Fresh names of the combine's locals.
struct Names {
    slot: String,
    done: String,
    last: String,
    g: String,
    w: String,
}

/// After the loop: partials out, the last block's ticket, the partials combined in block
/// order; for a serial kernel, a tree over the block's threads for thread 0.
fn combine_text(
    t: &Total<'_>,
    n: &Names,
    parts: &[String],
    tree: &[String],
    ind: &str,
    nl: &str,
) -> String {
    let i2 = format!("{ind}    ");
    let mut o = format!("{nl}{ind}{{ // the grid's partials: the last block to finish combines them in block order{nl}");
    for (a, p) in t.accs.iter().zip(parts) {
        o.push_str(&format!(
            "{i2}static {} {p}[{SLOTS}]; // global memory, one per thread of the grid{nl}",
            a.ty
        ));
    }
    o.push_str(&format!(
        "{i2}static unsigned {}; // blocks done; the last one sets it back to 0{nl}",
        n.done
    ));
    o.push_str(&format!("{i2}__shared__ bool {};{nl}", n.last));
    o.push_str(&format!(
        "{i2}const unsigned {} = blockIdx.x * blockDim.x + threadIdx.x;{nl}",
        n.slot
    ));
    for (a, p) in t.accs.iter().zip(parts) {
        o.push_str(&format!("{i2}{p}[{}] = {};{nl}", n.slot, a.name));
    }
    o.push_str(&format!("{i2}__threadfence();{nl}{i2}__syncthreads();{nl}"));
    o.push_str(&format!(
        "{i2}if (threadIdx.x == 0) {} = atomicAdd(&{}, 1u) == gridDim.x - 1;{nl}",
        n.last, n.done
    ));
    o.push_str(&format!(
        "{i2}__syncthreads();{nl}{i2}if (!{}) return;{nl}{i2}__threadfence();{nl}",
        n.last
    ));
    for (a, p) in t.accs.iter().zip(parts) {
        let first = read_partial(&a.ty, &format!("{p}[threadIdx.x]"));
        o.push_str(&format!("{i2}{} = {first};{nl}", a.name));
    }
    o.push_str(&folds(t, n, parts, &i2, nl));
    o.push_str(&format!("{i2}if (threadIdx.x == 0) {} = 0;{nl}", n.done));
    if t.form == Form::Serial {
        o.push_str(&serial_tree(t, n, tree, &i2, nl));
    }
    o.push_str(&format!("{ind}}}"));
    o
}

/// How many blocks' partials the last block loads before folding them: the loads of a
/// batch are in flight together, and the folds keep block order.
const BATCH: usize = 8;

/// The last block folds blocks 1.. into its thread's accumulators, [`BATCH`] blocks'
/// partials loaded at a time, then the rest one by one.
fn folds(t: &Total<'_>, n: &Names, parts: &[String], i2: &str, nl: &str) -> String {
    let g = &n.g;
    let batch = |width: usize, i3: &str| {
        let mut o = String::new();
        for (ai, (a, p)) in t.accs.iter().zip(parts).enumerate() {
            for k in 0..width {
                let at = format!("{p}[({g} + {k}) * blockDim.x + threadIdx.x]");
                let load = read_partial(&a.ty, &at);
                o.push_str(&format!(
                    "{i3}const {} {}_{ai}_{k} = {load};{nl}",
                    a.ty, n.w
                ));
            }
        }
        for k in 0..width {
            for (ai, a) in t.accs.iter().enumerate() {
                let stmt = a.fold.statement(&a.name, &format!("{}_{ai}_{k}", n.w));
                o.push_str(&format!("{i3}{stmt}{nl}"));
            }
        }
        o
    };
    let i3 = format!("{i2}    ");
    format!(
        "{i2}unsigned {g} = 1;{nl}{i2}for (; {g} + {BATCH} <= gridDim.x; {g} += {BATCH}) {{{nl}{}{i2}}}{nl}{i2}for (; {g} < gridDim.x; ++{g}) {{{nl}{}{i2}}}{nl}",
        batch(BATCH, &i3),
        batch(1, &i3)
    )
}

/// A load of a partial another block wrote, past the L1 cache (`__ldcg`, or a volatile
/// load for types `__ldcg` has no overload for).
pub(in crate::optimize::rewrite) fn read_partial(ty: &str, at: &str) -> String {
    // `__ldcg` has the overloads `__ldcs` has.
    if super::stream_loads::LDCS_TYPES.contains(&ty) {
        format!("__ldcg(&{at})")
    } else {
        format!("*(volatile {ty} *)&{at}")
    }
}

/// A serial kernel's last block: its threads' combined partials folded for thread 0 by a
/// shared-memory tree (the block is [`SERIAL_BLOCK`], a power of two); the others leave.
fn serial_tree(t: &Total<'_>, n: &Names, tree: &[String], i2: &str, nl: &str) -> String {
    let mut o = String::new();
    for (a, s) in t.accs.iter().zip(tree) {
        o.push_str(&format!(
            "{i2}__shared__ {} {s}[{SERIAL_BLOCK}];{nl}{i2}{s}[threadIdx.x] = {};{nl}",
            a.ty, a.name
        ));
    }
    o.push_str(&format!("{i2}__syncthreads();{nl}"));
    o.push_str(&format!(
        "{i2}for (unsigned {w} = blockDim.x / 2; {w} > 0; {w} >>= 1) {{{nl}",
        w = n.w
    ));
    o.push_str(&format!("{i2}    if (threadIdx.x < {}) {{{nl}", n.w));
    for (a, s) in t.accs.iter().zip(tree) {
        let stmt = a.fold.statement(
            &format!("{s}[threadIdx.x]"),
            &format!("{s}[threadIdx.x + {}]", n.w),
        );
        o.push_str(&format!("{i2}        {stmt}{nl}"));
    }
    o.push_str(&format!(
        "{i2}    }}{nl}{i2}    __syncthreads();{nl}{i2}}}{nl}"
    ));
    o.push_str(&format!("{i2}if (threadIdx.x != 0) return;{nl}"));
    for (a, s) in t.accs.iter().zip(tree) {
        o.push_str(&format!("{i2}{} = {s}[0];{nl}", a.name));
    }
    o
}
