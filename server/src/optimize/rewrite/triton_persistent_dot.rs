//! `triton_persistent_dot`: a Triton matmul in which each program computes one output
//! tile from pointer-arithmetic loads becomes a *persistent* kernel fed by tensor
//! descriptors: one program per SM (`grid = min(sms, tiles)`) walks the output tiles in
//! grouped order (GROUP_M rows of tiles at a time, for L2 reuse), and A, B and C move
//! through `tl.make_tensor_descriptor` (TMA on Hopper: no address arithmetic, no masks,
//! zeros past the edges, stores clipped at them). On an H100 (2026-11-27, f16, 4096³)
//! the author-style kernel with the best launch configuration took 0.2006 ms (90% of
//! cuBLAS's speed), descriptors alone 0.1968 (92%), descriptors in a persistent loop
//! 0.1847 (98%).
//!
//! **Matches** a kernel with one loop `for k in range(0, K, BK)` (or `range(tl.cdiv(K,
//! BK))`, `tl.range` too) holding the only two `tl.load`s and the only `tl.dot`, whose
//! arguments are exactly those two loads, accumulated into `ACC = tl.zeros((BM, BN),
//! dtype=tl.float32)` (`ACC += tl.dot(a, b)`, `ACC = tl.dot(a, b, ACC)` or `ACC = ACC +
//! tl.dot(a, b)`); and after the loop one `tl.store` of `ACC` (or `ACC.to(...)`), whose
//! mask names the bounds of both output axes (`offs_m[:, None] < M`). Each address is a
//! sum of one pointer parameter and two broadcast offsets (`x[:, None] * S`,
//! `y[None, :]`), possibly through local names and `+=` steps along k; the offset with
//! unit stride (no factor, or a factor the spec sets to 1) gives the layout, the other
//! factor the descriptor's stride. So row-major, transposed and strided (`stride_am`
//! parameters) operands all map, and the kernel's own `K`, `M`, `N` parameters size the
//! descriptors.
//!
//! **Refuses** other operand types than f16/bf16 (measured only there); an epilogue
//! (anything done to `ACC` but a cast), more loads or stores, atomics, another loop; a
//! load padded with anything but zero (descriptors read zeros past the edges); an
//! address with another term (a batch offset); a stride that is not a multiple of 16
//! bytes in some case of the spec (TMA needs it: a row of 4097 halves is refused);
//! a block size the spec tunes; configurations whose stages and output tile pass
//! 227 KiB of shared memory. Param `configs`: `[BM, BN, BK, num_warps, num_stages]`
//! (default the measured best, 128x256x64 with 8 warps and 3 stages, and two 128x128x64
//! ones, which fit beside an f32 output tile; 128x256x64 with 2 stages, which would too,
//! ran at 57-70% of cuBLAS's speed on the H100),
//! `group_m` (default 8). Needs a Triton with `tl.make_tensor_descriptor` (measured with
//! 3.6; an older one fails to compile the candidate, which is then dropped) and an
//! allocator for its scratch (the worker sets one).

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::check::{current_plan, finish, not_applicable, require_lang, set_spec_values, Draft, R};
use super::params::Params;
use super::tree::{
    code_names_outside, fresh, kernel_function, line_indent, named_children, newline, text, walk,
};
use super::triton_loops::shallow_enough;
use super::RewriteContext;
use crate::spec::{Arg, BenchPlan, DType, Value};
use crate::syntax::Lang;
use crate::syntax::ParamKind;

const ID: &str = "triton_persistent_dot";
/// Shared memory one program may use on the device kernel-lsp targets (H100: 227 KiB).
const SMEM_BYTES: u64 = 227 * 1024;

/// How one tile (of A, B or the stored C) lies in its buffer.
#[derive(Clone, Debug, PartialEq)]
struct Layout {
    buffer: String,
    /// The tile axis (0: rows, 1: columns) whose consecutive elements are adjacent.
    unit_axis: usize,
    /// The other axis's stride, as the author wrote it, and its value in each case.
    stride: String,
    stride_values: Vec<i64>,
}

/// What the persistent kernel is written from.
#[derive(Debug)]
struct DotKernel {
    acc: String,
    /// Block sizes: the accumulator's rows and columns, the loop's step.
    bm: String,
    bn: String,
    bk: String,
    /// Sizes of the output's rows, its columns and the k loop's bound (kernel parameters).
    m: String,
    n: String,
    k: String,
    a: Layout,
    b: Layout,
    c: Layout,
}

pub fn triton_persistent_dot(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Triton, ID)?;
    let plan = current_plan(cx)?;
    let p = Params(cx.params);
    let configs = p.rows::<5>(
        "configs",
        &[
            [128, 256, 64, 8, 3],
            [128, 128, 64, 8, 4],
            [128, 128, 64, 4, 4],
        ],
    )?;
    let group = p.uints("group_m", &[8], 1..=64)?[0];
    let k = &cx.kernel.name;
    let na = |why: String| {
        not_applicable(format!(
            "`{k}` cannot become a persistent TMA matmul: {why}"
        ))
    };
    let func = kernel_function(cx)
        .ok_or_else(|| not_applicable(format!("`{k}`'s definition is not in the syntax tree")))?;
    let body = func
        .child_by_field_name("body")
        .ok_or_else(|| na("it has no body".into()))?;
    shallow_enough(body, k)?;
    let dk = analyze(cx, &plan, body).map_err(na)?;
    let eb = operand_bytes(&plan, &dk).map_err(na)?;
    tma_strides(&plan, &dk).map_err(na)?;
    for b in [&dk.bm, &dk.bn, &dk.bk] {
        if plan
            .tunables
            .iter()
            .any(|t| t.name == *b && t.values.len() > 1)
        {
            return Err(na(format!("the spec tunes `{b}`")));
        }
    }
    let code = emit(cx.text, body, &dk, group, &mut names_outside(cx));
    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    for [bm, bn, bk, warps, stages] in configs {
        let label = format!(
            "persistent TMA tiles {bm}x{bn}x{bk}, {warps} warps, {stages} stages, GROUP_M={group}"
        );
        let smem = stages * (bm * bk + bk * bn) * eb.0 + bm * bn * eb.1;
        if smem > SMEM_BYTES {
            dropped.push(format!(
                "{label}: {smem} bytes of shared memory, more than {SMEM_BYTES}"
            ));
            continue;
        }
        match draft(cx, body, &code, &dk, [bm, bn, bk, warps, stages]) {
            Ok(text) => drafts.push(Draft { label, text }),
            Err(e) => dropped.push(format!("{label}: {e}")),
        }
    }
    finish(cx, drafts, dropped)
}

/// The file with the kernel's body replaced by `code` and the spec's launch set.
fn draft(
    cx: &RewriteContext<'_>,
    body: Node<'_>,
    code: &str,
    dk: &DotKernel,
    [bm, bn, bk, warps, stages]: [u64; 5],
) -> Result<String, String> {
    let start = body_start(cx.text, body);
    let mut text = String::with_capacity(cx.text.len() + code.len());
    text.push_str(&cx.text[..start]);
    text.push_str(code);
    text.push_str(&cx.text[body.end_byte()..]);
    let doc = crate::document::Document::new(Lang::Triton, 0, &text);
    let tree = doc.tree().ok_or("the parser gave up")?;
    let model = crate::syntax::analyze(Lang::Triton, &text, tree);
    let kernel = model.kernel(&cx.kernel.name).ok_or("the kernel is gone")?;
    let grid = format!(
        "min(sms, cdiv({}, {}) * cdiv({}, {}))",
        dk.m, dk.bm, dk.n, dk.bn
    );
    let values: Vec<(String, String)> = [
        (dk.bm.clone(), bm.to_string()),
        (dk.bn.clone(), bn.to_string()),
        (dk.bk.clone(), bk.to_string()),
        ("num_warps".into(), warps.to_string()),
        ("num_stages".into(), stages.to_string()),
        ("grid".into(), grid),
    ]
    .into_iter()
    .collect();
    set_spec_values(&text, kernel, &values).map_err(|e| e.to_string())
}

/// The names the file uses outside function bodies (the kernel's is replaced whole, and
/// other functions' locals are their own): what the new body's locals must not shadow.
fn names_outside(cx: &RewriteContext<'_>) -> BTreeSet<String> {
    code_names_outside(cx, &|n| {
        n.kind() == "block"
            && n.parent()
                .is_some_and(|p| p.kind() == "function_definition")
    })
}

/// Where the rewritten body starts: after a leading docstring, which stays.
fn body_start(src: &str, body: Node<'_>) -> usize {
    let first = named_children(body).into_iter().next();
    match first {
        Some(s)
            if s.kind() == "expression_statement"
                && named_children(s)
                    .first()
                    .is_some_and(|e| e.kind() == "string") =>
        {
            let after = s.end_byte();
            src[after..].find('\n').map_or(after, |i| after + i + 1)
        }
        _ => body.start_byte() - line_indent(src, body.start_byte()).len(),
    }
}

/// `call`'s callee without its module (`tl.dot` -> `dot`).
fn callee<'s>(src: &'s str, call: Node<'_>) -> &'s str {
    let f = call
        .child_by_field_name("function")
        .map_or("", |f| text(src, f));
    f.rsplit('.').next().unwrap_or(f)
}

/// Positional arguments and keyword arguments of a call.
fn arguments<'t>(src: &str, call: Node<'t>) -> (Vec<Node<'t>>, BTreeMap<String, Node<'t>>) {
    let mut pos = Vec::new();
    let mut kw = BTreeMap::new();
    for a in call
        .child_by_field_name("arguments")
        .map(named_children)
        .unwrap_or_default()
    {
        if a.kind() == "keyword_argument" {
            if let (Some(n), Some(v)) = (
                a.child_by_field_name("name"),
                a.child_by_field_name("value"),
            ) {
                kw.insert(text(src, n).to_string(), v);
            }
        } else if a.kind() != "comment" {
            pos.push(a);
        }
    }
    (pos, kw)
}

/// Parentheses stripped.
fn bare(mut n: Node<'_>) -> Node<'_> {
    while n.kind() == "parenthesized_expression" {
        match named_children(n).into_iter().next() {
            Some(i) => n = i,
            None => break,
        }
    }
    n
}

/// Every local name's plain assignments (`x = ...`: the right sides), and the names only
/// stepped by `+=` besides.
struct Defs<'t> {
    plain: BTreeMap<String, Vec<Node<'t>>>,
}

impl<'t> Defs<'t> {
    fn of(src: &str, body: Node<'t>) -> Defs<'t> {
        let mut plain: BTreeMap<String, Vec<Node<'t>>> = BTreeMap::new();
        walk(body, &mut |n| {
            if n.kind() == "assignment" {
                if let (Some(l), Some(r)) = (
                    n.child_by_field_name("left"),
                    n.child_by_field_name("right"),
                ) {
                    if l.kind() == "identifier" {
                        plain.entry(text(src, l).to_string()).or_default().push(r);
                    }
                }
            }
            true
        });
        Defs { plain }
    }

    /// The one right side of `name`, if it has exactly one.
    fn one(&self, name: &str) -> Option<Node<'t>> {
        match self.plain.get(name).map(Vec::as_slice) {
            Some([r]) => Some(*r),
            _ => None,
        }
    }
}

/// The kernel's shape, or why it is not a plain tiled matmul.
fn analyze<'t>(
    cx: &RewriteContext<'t>,
    plan: &BenchPlan,
    body: Node<'t>,
) -> Result<DotKernel, String> {
    let src = cx.text;
    let defs = Defs::of(src, body);
    let Skeleton { lp, dot, store } = skeleton(src, body)?;
    let (k, bk) = loop_header(src, lp, cx)?;
    let (acc, x, y) = accumulation(src, dot)?;
    let init = accumulator_init(&defs, &acc, lp)?;
    let (bm, bn) = accumulator(src, init, &acc, cx)?;
    let buffers = buffer_names(plan);
    let addr = AddrCx {
        src,
        defs: &defs,
        buffers: &buffers,
        plan,
    };
    let a = addr.layout(arguments(src, load_call(src, &defs, x)?).0.first().copied())?;
    let b = addr.layout(arguments(src, load_call(src, &defs, y)?).0.first().copied())?;
    let (spos, skw) = arguments(src, store);
    let c = addr.layout(spos.first().copied())?;
    let cast = stored_value(src, &defs, spos.get(1).copied(), &acc)?;
    let mask = skw
        .get("mask")
        .copied()
        .or_else(|| spos.get(2).copied())
        .ok_or("the store has no mask naming the output's bounds")?;
    let (m, n) = mask_bounds(src, &defs, mask, cx)?;
    let mut allowed = vec![lp, store, init.parent().unwrap_or(init)];
    allowed.extend(cast);
    acc_only_in_place(src, body, &acc, &allowed)?;
    Ok(DotKernel {
        acc,
        bm,
        bn,
        bk,
        m,
        n,
        k,
        a,
        b,
        c,
    })
}

/// The loop, the dot in it and the store after it.
struct Skeleton<'t> {
    lp: Node<'t>,
    dot: Node<'t>,
    store: Node<'t>,
}

/// One loop holding the only dot and both loads, no atomics, one store after the loop.
fn skeleton<'t>(src: &str, body: Node<'t>) -> Result<Skeleton<'t>, String> {
    let mut calls: BTreeMap<&str, Vec<Node>> = BTreeMap::new();
    let mut loops = Vec::new();
    walk(body, &mut |n| {
        match n.kind() {
            "call" => calls.entry(callee(src, n)).or_default().push(n),
            "for_statement" | "while_statement" => loops.push(n),
            _ => {}
        }
        true
    });
    let count = |name: &str| calls.get(name).map_or(0, Vec::len);
    if let Some(a) = calls.keys().find(|c| c.starts_with("atomic_")) {
        return Err(format!("it calls `{a}`"));
    }
    if (count("dot"), count("load"), count("store")) != (1, 2, 1) {
        return Err(format!(
            "it has {} `tl.dot`, {} `tl.load` and {} `tl.store` calls, not one dot of two loads stored once",
            count("dot"),
            count("load"),
            count("store")
        ));
    }
    let [lp] = loops.as_slice() else {
        return Err(format!("it has {} loops, not one k loop", loops.len()));
    };
    let (dot, store) = (calls["dot"][0], calls["store"][0]);
    if !within(dot, *lp) || calls["load"].iter().any(|l| !within(*l, *lp)) || within(store, *lp) {
        return Err("the dot and both loads must be in the loop, the store after it".into());
    }
    Ok(Skeleton {
        lp: *lp,
        dot,
        store,
    })
}

/// Whether `n` lies inside `outer`.
fn within(n: Node<'_>, outer: Node<'_>) -> bool {
    n.start_byte() >= outer.start_byte() && n.end_byte() <= outer.end_byte()
}

/// The right side of ACC's one assignment before the loop; none after it (an epilogue).
fn accumulator_init<'t>(defs: &Defs<'t>, acc: &str, lp: Node<'t>) -> Result<Node<'t>, String> {
    let outside: Vec<Node> = defs
        .plain
        .get(acc)
        .map(|rs| rs.iter().copied().filter(|r| !within(*r, lp)).collect())
        .unwrap_or_default();
    if let Some(after) = outside.iter().find(|r| r.start_byte() > lp.end_byte()) {
        return Err(format!(
            "`{acc}` is set again after the loop (line {}): an epilogue stays with the author's kernel",
            after.start_position().row + 1
        ));
    }
    match outside.as_slice() {
        [init] => Ok(*init),
        _ => Err(format!("`{acc}` is not set once before the loop")),
    }
}

/// The `tl.load` a dot operand is: the call itself, or a name assigned once from it.
fn load_call<'t>(src: &str, defs: &Defs<'t>, arg: Node<'t>) -> Result<Node<'t>, String> {
    let arg = bare(arg);
    let call = if arg.kind() == "identifier" {
        defs.one(text(src, arg))
            .map(bare)
            .ok_or_else(|| format!("`{}` is not assigned once", text(src, arg)))?
    } else {
        arg
    };
    if call.kind() == "call" && callee(src, call) == "load" {
        // Past the edges the descriptors read zeros: a mask's `other` must be zero too.
        let (pos, kw) = arguments(src, call);
        let other = kw.get("other").or(pos.get(2)).map(|o| text(src, *o));
        match other {
            None | Some("0" | "0.0" | "0." | "0.0f") => Ok(call),
            Some(o) => Err(format!(
                "`{}` pads with `{o}`, where tensor descriptors read zeros",
                text(src, arg)
            )),
        }
    } else {
        Err(format!(
            "the dot's operand `{}` is not a `tl.load`",
            text(src, arg)
        ))
    }
}

/// The spec's buffer arguments.
fn buffer_names(plan: &BenchPlan) -> BTreeSet<&str> {
    plan.cases
        .first()
        .map(|c| {
            c.args
                .iter()
                .filter(|a| matches!(a, Arg::Buffer { .. }))
                .map(Arg::name)
                .collect()
        })
        .unwrap_or_default()
}

/// `for V in range(0, K, BK)` / `range(tl.cdiv(K, BK))`: K and BK (K a kernel
/// parameter, BK a constexpr).
fn loop_header(
    src: &str,
    lp: Node<'_>,
    cx: &RewriteContext<'_>,
) -> Result<(String, String), String> {
    let bad = || {
        format!(
            "the loop is not `for k in range(0, K, BK)` or `range(tl.cdiv(K, BK))` with parameters K and BK: `{}`",
            text(src, lp).lines().next().unwrap_or("")
        )
    };
    lp.child_by_field_name("left")
        .filter(|l| l.kind() == "identifier")
        .ok_or_else(bad)?;
    let range = lp
        .child_by_field_name("right")
        .filter(|r| r.kind() == "call" && callee(src, *r) == "range")
        .ok_or_else(bad)?;
    let (args, _) = arguments(src, range);
    let word = |n: Node<'_>| text(src, bare(n)).to_string();
    let (k, bk) = match args.as_slice() {
        [s, e, st] if word(*s) == "0" => (word(*e), word(*st)),
        [e] | [_, e] => {
            let e = bare(*e);
            let first = args.first().map(|s| word(*s));
            if args.len() == 2 && first.as_deref() != Some("0") {
                return Err(bad());
            }
            if e.kind() != "call" || callee(src, e) != "cdiv" {
                return Err(bad());
            }
            match arguments(src, e).0.as_slice() {
                [kk, b] => (word(*kk), word(*b)),
                _ => return Err(bad()),
            }
        }
        _ => return Err(bad()),
    };
    let kind = |name: &str| {
        cx.kernel
            .params
            .iter()
            .find(|p| p.name == name)
            .map(|p| &p.kind)
    };
    if !matches!(kind(&k), Some(ParamKind::TritonArg { .. }))
        || !matches!(kind(&bk), Some(ParamKind::Constexpr))
    {
        return Err(bad());
    }
    Ok((k, bk))
}

/// The statement holding the dot: `ACC += tl.dot(x, y)`, `ACC = tl.dot(x, y, ACC)` or
/// `ACC = ACC + tl.dot(x, y)`: ACC and the dot's two operands.
fn accumulation<'t>(src: &str, dot: Node<'t>) -> Result<(String, Node<'t>, Node<'t>), String> {
    let (pos, kw) = arguments(src, dot);
    let bad = || {
        format!(
            "`{}` is not accumulated as `acc += tl.dot(a, b)`",
            text(src, dot)
        )
    };
    if let Some(k) = kw
        .keys()
        .find(|k| !matches!(k.as_str(), "acc" | "out_dtype"))
    {
        return Err(format!("the dot passes `{k}=`"));
    }
    if let Some(o) = kw.get("out_dtype") {
        if !text(src, *o).ends_with("float32") {
            return Err(format!("the dot's out_dtype is `{}`", text(src, *o)));
        }
    }
    let (x, y) = match pos.as_slice() {
        [x, y] | [x, y, _] => (*x, *y),
        _ => return Err(bad()),
    };
    let third = pos.get(2).copied().or_else(|| kw.get("acc").copied());
    let mut up = dot.parent().ok_or_else(bad)?;
    let mut summed = false;
    if up.kind() == "binary_operator" {
        summed = true;
        let other = [
            up.child_by_field_name("left"),
            up.child_by_field_name("right"),
        ]
        .into_iter()
        .flatten()
        .find(|n| n.id() != dot.id());
        let op = up.child_by_field_name("operator").map(|o| text(src, o));
        if op != Some("+") || third.is_some() {
            return Err(bad());
        }
        let acc_side = other.map(|o| text(src, bare(o)).to_string());
        up = up.parent().ok_or_else(bad)?;
        let left = up
            .child_by_field_name("left")
            .map(|l| text(src, l).to_string());
        if up.kind() != "assignment" || left.is_none() || left != acc_side {
            return Err(bad());
        }
    }
    let left = up
        .child_by_field_name("left")
        .filter(|l| l.kind() == "identifier")
        .map(|l| text(src, l).to_string())
        .ok_or_else(bad)?;
    let ok = match up.kind() {
        "augmented_assignment" => {
            third.is_none()
                && up.child_by_field_name("operator").map(|o| text(src, o)) == Some("+=")
        }
        "assignment" => summed || third.is_some_and(|t| text(src, bare(t)) == left),
        _ => false,
    };
    if !ok {
        return Err(bad());
    }
    Ok((left, x, y))
}

/// `ACC = tl.zeros((BM, BN), dtype=tl.float32)`: BM and BN, constexpr parameters.
fn accumulator(
    src: &str,
    init: Node<'_>,
    acc: &str,
    cx: &RewriteContext<'_>,
) -> Result<(String, String), String> {
    let bad = || {
        format!(
            "`{acc}` is not set to `tl.zeros((BM, BN), dtype=tl.float32)` with constexpr BM and BN"
        )
    };
    let init = bare(init);
    if init.kind() != "call" || callee(src, init) != "zeros" {
        return Err(bad());
    }
    let (pos, kw) = arguments(src, init);
    let dtype = kw.get("dtype").or(pos.get(1)).map(|d| text(src, *d));
    if !dtype.is_some_and(|d| d.ends_with("float32")) {
        return Err(bad());
    }
    let dims: Vec<String> = pos
        .first()
        .filter(|t| matches!(t.kind(), "tuple" | "list"))
        .map(|t| {
            named_children(*t)
                .iter()
                .map(|d| text(src, *d).to_string())
                .collect()
        })
        .unwrap_or_default();
    let constexpr = |n: &str| {
        cx.kernel
            .params
            .iter()
            .any(|p| p.name == n && matches!(p.kind, ParamKind::Constexpr))
    };
    match dims.as_slice() {
        [a, b] if constexpr(a) && constexpr(b) => Ok((a.clone(), b.clone())),
        _ => Err(bad()),
    }
}

/// The factors of an address's row and column offsets (None: unit, no factor written).
type Factors<'t> = [Option<Node<'t>>; 2];

/// What an address is resolved against.
struct AddrCx<'a, 't> {
    src: &'a str,
    defs: &'a Defs<'t>,
    buffers: &'a BTreeSet<&'a str>,
    plan: &'a BenchPlan,
}

impl<'t> AddrCx<'_, 't> {
    /// The terms of a sum, through local names assigned once (their `+=` steps are moves
    /// along k, which the descriptors take over).
    fn terms(&self, n: Node<'t>, depth: usize, out: &mut Vec<Node<'t>>) -> Result<(), String> {
        let n = bare(n);
        if depth > 16 {
            return Err("the address is defined too deep".into());
        }
        if n.kind() == "binary_operator"
            && n.child_by_field_name("operator").map(|o| text(self.src, o)) == Some("+")
        {
            for side in ["left", "right"] {
                if let Some(s) = n.child_by_field_name(side) {
                    self.terms(s, depth + 1, out)?;
                }
            }
            return Ok(());
        }
        if n.kind() == "identifier" && !self.buffers.contains(text(self.src, n)) {
            let name = text(self.src, n);
            let rhs = self
                .defs
                .one(name)
                .ok_or_else(|| format!("`{name}` in the address is not assigned exactly once"))?;
            return self.terms(rhs, depth + 1, out);
        }
        out.push(n);
        Ok(())
    }

    /// The buffer an address reads and how its tile lies: one pointer parameter plus a
    /// `[:, None]` and a `[None, :]` offset, one of them with unit stride.
    fn layout(&self, addr: Option<Node<'t>>) -> Result<Layout, String> {
        let addr = addr.ok_or("a load or store has no address")?;
        let (buffer, [f0, f1]) = self.split(addr)?;
        let unit = |f: Option<Node<'_>>| {
            f.is_none_or(|f| self.per_case(f).is_some_and(|v| v.iter().all(|x| *x == 1)))
        };
        let (unit_axis, other) = match (unit(f0), unit(f1)) {
            (false, true) => (1, f0),
            (true, false) => (0, f1),
            _ => {
                return Err(format!(
                    "`{}`: not exactly one of its offsets has unit stride",
                    text(self.src, addr)
                ))
            }
        };
        let stride = other.ok_or("no stride")?;
        let stride_values = self.per_case(stride).ok_or_else(|| {
            format!(
                "the stride `{}` is not an integer expression of kernel parameters",
                text(self.src, stride)
            )
        })?;
        Ok(Layout {
            buffer,
            unit_axis,
            stride: text(self.src, stride).to_string(),
            stride_values,
        })
    }

    /// An address as its buffer and the factors (None: none) of its row and column
    /// offsets.
    fn split(&self, addr: Node<'t>) -> Result<(String, Factors<'t>), String> {
        let whole = text(self.src, addr);
        let mut terms = Vec::new();
        self.terms(addr, 0, &mut terms)?;
        let mut buffer = None;
        let mut axes: [Option<Option<Node<'t>>>; 2] = [None, None];
        for t in terms {
            let s = text(self.src, t);
            if t.kind() == "identifier" && self.buffers.contains(s) {
                if buffer.replace(s.to_string()).is_some() {
                    return Err(format!("`{whole}` adds two buffers"));
                }
                continue;
            }
            let (axis, factor) = broadcast_term(self.src, t).ok_or_else(|| {
                format!(
                    "`{whole}`'s address adds `{s}`, not a tile offset `x[:, None] * stride` or `y[None, :]`"
                )
            })?;
            if axes[axis].replace(factor).is_some() {
                return Err(format!("`{whole}` has two offsets along one axis"));
            }
        }
        let buffer = buffer.ok_or_else(|| format!("`{whole}` names no buffer of the spec"))?;
        match axes {
            [Some(f0), Some(f1)] => Ok((buffer, [f0, f1])),
            _ => Err(format!("`{whole}` is not a 2-D tile address")),
        }
    }

    /// An integer expression of literals and scalar parameters, evaluated in every case;
    /// None where it names anything else.
    fn per_case(&self, n: Node<'_>) -> Option<Vec<i64>> {
        self.plan
            .cases
            .iter()
            .map(|case| {
                eval(self.src, n, &|name| {
                    case.args.iter().find_map(|a| match a {
                        Arg::Scalar {
                            name: nm,
                            value: Value::Int(v),
                            ..
                        } if nm == name => Some(*v),
                        _ => None,
                    })
                })
            })
            .collect()
    }
}

/// `x[:, None]` (axis 0) or `x[None, :]` (axis 1), alone or times a factor.
fn broadcast_term<'t>(src: &str, t: Node<'t>) -> Option<(usize, Option<Node<'t>>)> {
    let axis = |n: Node<'_>| -> Option<usize> {
        let n = bare(n);
        if n.kind() != "subscript" {
            return None;
        }
        let value = n.child_by_field_name("value")?;
        let tail: String = text(src, n)[value.end_byte() - n.start_byte()..]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        match tail.as_str() {
            "[:,None]" => Some(0),
            "[None,:]" => Some(1),
            _ => None,
        }
    };
    if let Some(a) = axis(t) {
        return Some((a, None));
    }
    if t.kind() == "binary_operator"
        && t.child_by_field_name("operator").map(|o| text(src, o)) == Some("*")
    {
        let (l, r) = (
            t.child_by_field_name("left")?,
            t.child_by_field_name("right")?,
        );
        if let Some(a) = axis(l) {
            return Some((a, Some(bare(r))));
        }
        if let Some(a) = axis(r) {
            return Some((a, Some(bare(l))));
        }
    }
    None
}

/// An integer expression's value, names looked up by `var`.
fn eval(src: &str, n: Node<'_>, var: &dyn Fn(&str) -> Option<i64>) -> Option<i64> {
    let n = bare(n);
    match n.kind() {
        "integer" => text(src, n).replace('_', "").parse().ok(),
        "identifier" => var(text(src, n)),
        "binary_operator" => {
            let l = eval(src, n.child_by_field_name("left")?, var)?;
            let r = eval(src, n.child_by_field_name("right")?, var)?;
            match n.child_by_field_name("operator").map(|o| text(src, o))? {
                "+" => l.checked_add(r),
                "-" => l.checked_sub(r),
                "*" => l.checked_mul(r),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The stored value is ACC, `ACC.to(...)`, or a name assigned once from one of them
/// (then that assignment's right side, where ACC may also appear).
fn stored_value<'t>(
    src: &str,
    defs: &Defs<'t>,
    value: Option<Node<'t>>,
    acc: &str,
) -> Result<Option<Node<'t>>, String> {
    let value = value.map(bare).ok_or("the store has no value")?;
    let is_acc = |v: Node<'_>| {
        let v = bare(v);
        if text(src, v) == acc {
            return true;
        }
        v.kind() == "call"
            && v.child_by_field_name("function").is_some_and(|f| {
                f.kind() == "attribute"
                    && f.child_by_field_name("object")
                        .is_some_and(|o| text(src, o) == acc)
                    && f.child_by_field_name("attribute")
                        .is_some_and(|a| text(src, a) == "to")
            })
    };
    if is_acc(value) {
        return Ok(None);
    }
    match defs.one(text(src, value)) {
        Some(r) if value.kind() == "identifier" && is_acc(r) => Ok(Some(r)),
        _ => Err(format!(
            "the store writes `{}`, not `{acc}` or a cast of it (an epilogue stays with the author's kernel)",
            text(src, value)
        )),
    }
}

/// From the store's mask, the kernel parameters bounding the rows (`x[:, None] < M`, or
/// `mask_m[:, None]` with `mask_m = x < M`) and the columns (`[None, :]`).
fn mask_bounds(
    src: &str,
    defs: &Defs<'_>,
    mask: Node<'_>,
    cx: &RewriteContext<'_>,
) -> Result<(String, String), String> {
    let mut found: [Option<String>; 2] = [None, None];
    // (node, depth, the axis of an enclosing broadcast)
    let mut stack = vec![(mask, 0usize, None::<usize>)];
    while let Some((n, depth, hint)) = stack.pop() {
        let n = bare(n);
        if depth > 16 {
            continue;
        }
        if n.kind() == "identifier" {
            if let Some(r) = defs.one(text(src, n)) {
                stack.push((r, depth + 1, hint));
            }
            continue;
        }
        if let Some((axis, None)) = broadcast_term(src, n) {
            if let Some(v) = n.child_by_field_name("value") {
                stack.push((v, depth + 1, Some(axis)));
            }
            continue;
        }
        if n.kind() == "comparison_operator" {
            if let Some((axis, bound)) = bounded(src, n, hint) {
                found[axis] = Some(bound);
            }
            continue;
        }
        stack.extend(named_children(n).into_iter().map(|k| (k, depth + 1, hint)));
    }
    let param = |b: &Option<String>, what: &str| -> Result<String, String> {
        b.clone()
            .filter(|b| {
                cx.kernel
                    .params
                    .iter()
                    .any(|p| p.name == *b && matches!(p.kind, ParamKind::TritonArg { .. }))
            })
            .ok_or_else(|| {
                format!(
                    "the store's mask does not bound the {what} by a kernel parameter (`offs[:, None] < M`)"
                )
            })
    };
    Ok((param(&found[0], "rows")?, param(&found[1], "columns")?))
}

/// `off < BOUND` (or `BOUND > off`): the axis (the offset's broadcast, else `hint`) and
/// the bound's text.
fn bounded(src: &str, cmp: Node<'_>, hint: Option<usize>) -> Option<(usize, String)> {
    let kids = named_children(cmp);
    let mut c = cmp.walk();
    let ops: Vec<&str> = cmp
        .children(&mut c)
        .filter(|k| !k.is_named())
        .map(|k| text(src, k))
        .collect();
    let ([l, r], [op]) = (kids.as_slice(), ops.as_slice()) else {
        return None;
    };
    let (off, bound) = match *op {
        "<" | "<=" => (*l, *r),
        ">" | ">=" => (*r, *l),
        _ => return None,
    };
    let axis = match broadcast_term(src, off) {
        Some((axis, None)) => axis,
        _ => hint?,
    };
    Some((axis, text(src, bare(bound)).to_string()))
}

/// Every use of ACC is in its initialisation, the loop, the store or the stored cast.
fn acc_only_in_place(
    src: &str,
    body: Node<'_>,
    acc: &str,
    allowed: &[Node<'_>],
) -> Result<(), String> {
    let mut stray = None;
    walk(body, &mut |n| {
        if stray.is_some() || allowed.iter().any(|a| a.id() == n.id()) {
            return false;
        }
        if n.kind() == "identifier" && text(src, n) == acc {
            stray = Some(n);
        }
        true
    });
    match stray {
        Some(n) => Err(format!(
            "`{acc}` is used outside the loop and the store (line {}): an epilogue stays with the author's kernel",
            n.start_position().row + 1
        )),
        None => Ok(()),
    }
}

/// Bytes of an operand element and of an output element, from the spec.
fn operand_bytes(plan: &BenchPlan, dk: &DotKernel) -> Result<(u64, u64), String> {
    let dtype = |name: &str| -> Option<DType> {
        plan.cases.first()?.args.iter().find_map(|a| match a {
            Arg::Buffer { name: n, dtype, .. } if n == name => Some(*dtype),
            _ => None,
        })
    };
    let (a, b, c) = (
        dtype(&dk.a.buffer),
        dtype(&dk.b.buffer),
        dtype(&dk.c.buffer),
    );
    match (a, b) {
        (Some(x), Some(y)) if x == y && matches!(x, DType::F16 | DType::Bf16) => {}
        _ => {
            return Err(format!(
                "`{}` and `{}` are not both f16 or both bf16 (measured only there)",
                dk.a.buffer, dk.b.buffer
            ))
        }
    }
    let cb = match c {
        Some(DType::F16 | DType::Bf16) => 2,
        Some(DType::F32) => 4,
        _ => {
            return Err(format!(
                "`{}` is not an f16, bf16 or f32 buffer",
                dk.c.buffer
            ))
        }
    };
    Ok((2, cb))
}

/// TMA needs every stride but the last to be a multiple of 16 bytes, in every case.
fn tma_strides(plan: &BenchPlan, dk: &DotKernel) -> Result<(), String> {
    for l in [&dk.a, &dk.b, &dk.c] {
        let eb = plan
            .cases
            .first()
            .and_then(|c| {
                c.args.iter().find_map(|a| match a {
                    Arg::Buffer { name, dtype, .. } if *name == l.buffer => {
                        Some(dtype.size_bytes())
                    }
                    _ => None,
                })
            })
            .unwrap_or(4) as i64;
        for (i, v) in l.stride_values.iter().enumerate() {
            if (v * eb) % 16 != 0 {
                return Err(format!(
                    "`{}`'s stride `{}` is {v} elements ({} bytes) in case {i}, not a multiple of 16 bytes, which TMA needs",
                    l.buffer,
                    l.stride,
                    v * eb
                ));
            }
        }
    }
    Ok(())
}

/// The new body's locals, fresh against the names the file keeps.
struct Locals {
    npm: String,
    npn: String,
    width: String,
    tile: String,
    first: String,
    gsz: String,
    pm: String,
    pn: String,
    kk: String,
    desc: [String; 3],
    x: String,
    y: String,
}

impl Locals {
    fn new(names: &mut BTreeSet<String>) -> Locals {
        let mut f = |b: &str| fresh(b, names);
        Locals {
            npm: f("num_pid_m"),
            npn: f("num_pid_n"),
            width: f("num_pid_in_group"),
            tile: f("tile"),
            first: f("first_pid_m"),
            gsz: f("group_size_m"),
            pm: f("pid_m"),
            pn: f("pid_n"),
            kk: f("k0"),
            desc: [f("a_desc"), f("b_desc"), f("c_desc")],
            x: f("a_tile"),
            y: f("b_tile"),
        }
    }
}

/// The new body: descriptors, the persistent loop over tiles in grouped order, the k loop.
fn emit(
    src: &str,
    body: Node<'_>,
    dk: &DotKernel,
    group: u64,
    names: &mut BTreeSet<String>,
) -> String {
    let ind = named_children(body)
        .iter()
        .find(|s| s.kind() != "comment")
        .map_or("    ", |s| line_indent(src, s.start_byte()))
        .to_string();
    let unit = if ind.starts_with('\t') { "\t" } else { "    " };
    let Locals {
        npm,
        npn,
        width,
        tile,
        first,
        gsz,
        pm,
        pn,
        kk,
        desc: [ad, bd, cd],
        x,
        y,
    } = Locals::new(names);
    let (m, n, k, bm, bn, bk, acc) = (&dk.m, &dk.n, &dk.k, &dk.bm, &dk.bn, &dk.bk, &dk.acc);
    let (om, on) = (format!("{pm} * {bm}"), format!("{pn} * {bn}"));
    // Each tile's axes: (size, block, offset) of its rows and of its columns.
    let a = Tile {
        l: &dk.a,
        rows: (m, bm, &om),
        cols: (k, bk, &kk),
    };
    let b = Tile {
        l: &dk.b,
        rows: (k, bk, &kk),
        cols: (n, bn, &on),
    };
    let c = Tile {
        l: &dk.c,
        rows: (m, bm, &om),
        cols: (n, bn, &on),
    };
    let (i1, i2, i3) = (
        ind.clone(),
        format!("{ind}{unit}"),
        format!("{ind}{unit}{unit}"),
    );
    let value = format!("{acc}.to({}.dtype.element_ty)", dk.c.buffer);
    let lines = [
        format!("{i1}# Persistent and TMA-fed (issue #30): one program per SM walks the output tiles,"),
        format!("{i1}# {group} rows of tiles at a time (L2 reuse); tensor descriptors move the tiles,"),
        format!("{i1}# zero-filled past the edges, and clip the stores."),
        format!("{i1}{npm} = tl.cdiv({m}, {bm})"),
        format!("{i1}{npn} = tl.cdiv({n}, {bn})"),
        format!("{i1}{ad} = {}", a.descriptor()),
        format!("{i1}{bd} = {}", b.descriptor()),
        format!("{i1}{cd} = {}", c.descriptor()),
        format!("{i1}{width} = {group} * {npn}"),
        format!("{i1}for {tile} in tl.range(tl.program_id(0), {npm} * {npn}, tl.num_programs(0), flatten=True):"),
        format!("{i2}{first} = {tile} // {width} * {group}"),
        format!("{i2}{gsz} = min({npm} - {first}, {group})"),
        format!("{i2}{pm} = {first} + {tile} % {width} % {gsz}"),
        format!("{i2}{pn} = {tile} % {width} // {gsz}"),
        format!("{i2}{acc} = tl.zeros(({bm}, {bn}), dtype=tl.float32)"),
        format!("{i2}for {kk} in range(0, {k}, {bk}):"),
        format!("{i3}{x} = {}", a.load(&ad)),
        format!("{i3}{y} = {}", b.load(&bd)),
        format!("{i3}{acc} = tl.dot({x}, {y}, {acc})"),
        format!("{i2}{}", c.store(&cd, &value)),
    ];
    lines.join(newline(src))
}

/// One tile's descriptor and accesses: its rows' and columns' (size, block, offset).
struct Tile<'a> {
    l: &'a Layout,
    rows: (&'a str, &'a str, &'a str),
    cols: (&'a str, &'a str, &'a str),
}

impl Tile<'_> {
    /// Memory order: the unit-stride axis last.
    fn ordered(&self) -> [(&str, &str, &str); 2] {
        if self.l.unit_axis == 1 {
            [self.rows, self.cols]
        } else {
            [self.cols, self.rows]
        }
    }
    fn descriptor(&self) -> String {
        let [o, i] = self.ordered();
        format!(
            "tl.make_tensor_descriptor({}, shape=[{}, {}], strides=[{}, 1], block_shape=[{}, {}])",
            self.l.buffer, o.0, i.0, self.l.stride, o.1, i.1
        )
    }
    fn at(&self) -> String {
        let [o, i] = self.ordered();
        format!("[{}, {}]", o.2, i.2)
    }
    fn transposed(&self) -> &'static str {
        if self.l.unit_axis == 1 {
            ""
        } else {
            ".T"
        }
    }
    fn load(&self, desc: &str) -> String {
        format!("{desc}.load({}){}", self.at(), self.transposed())
    }
    fn store(&self, desc: &str, value: &str) -> String {
        format!("{desc}.store({}, {value}{})", self.at(), self.transposed())
    }
}

#[cfg(test)]
mod tests;
