//! `block_reduce`: a sum, maximum or minimum of every element into one place becomes a
//! grid-stride fold per thread, a warp-shuffle fold per warp, a shared-memory combine of
//! the warps, and one global atomic per block, over a grid of a few blocks per SM.
//!
//! **Matches** a 1-D kernel with an index `I = blockIdx.x * M + threadIdx.x` (any order
//! of the terms and factors; `M` is `blockDim.x`, a macro or a literal) and a bound
//! `I < B` (or `I >= B`) in its body, in one of three shapes:
//! - *an atomic per element*: the body after the index folds a value into a fixed
//!   address, `atomicAdd(OUT, E)`, `atomicMax(OUT, E)` or `atomicMin(OUT, E)`, where `OUT`
//!   does not depend on the thread (`out`, `&out[0]`, `out + 3`, `(int*)out`: an integer
//!   maximum of a float's bits), under `if (I < B)` or after `if (I >= B) return;`; a
//!   warp's shuffle sum of `v` (offsets 16 down to 1, full mask) followed by `if (<lane
//!   0>) atomicAdd(OUT, v);` counts as every lane's `atomicAdd(OUT, v)` (see [`warp_sum`]);
//! - *a shared-memory tree per block* (the classic reduction): before the first
//!   `__syncthreads()`, the thread stores its value in `buf[tid] = E;` (with or without a
//!   bounds guard); after it, only barriers and loops that add `buf` elements into `buf`
//!   (`buf[t] += buf[t + s]`, `buf[t] = buf[t] + buf[t + s]`); last,
//!   `if (tid == 0) atomicAdd(OUT, T);` with `T` = `buf[0]`, or `buf[0]` times or divided
//!   by what is the same in every thread of the grid (`buf[0] / n` of a mean: scalar
//!   parameters, macros, literals).
//! - *the block's own combine* (when neither shape above matches): one value per thread
//!   (`float v = i < n ? E : 0.0f;`, or `float v = 0; if (C) v = E;`), then any combine
//!   that adds the threads' values with weights fixed by their place in the block (warp
//!   shuffles, a shared slot per warp, the first warp's shuffles, a select with zero, a
//!   scale) and ends in one `atomicAdd`; only the value becomes a grid-stride sum, the
//!   combine stays as written (see [`kept`]).
//!
//! **Writes** `T acc = <identity>;` (0; for a maximum the type's least value, for a
//! minimum its greatest) then the statements that computed the thread's value, as the
//! body of `for (I = <the index>; I < B; I += gridDim.x * M)` with the store (or the
//! atomic) made `acc += E;` (`acc = max(acc, (T)E);`, `min`) and `return` made
//! `continue`; then the block's fold by `__shfl_down_sync` within each warp, a
//! `__shared__ T [32]` for the warps' values, the first warp's shuffle fold of those, and
//! the author's atomic of `acc` (of `T` with `acc` for `buf[0]`) by thread 0. The grid
//! becomes `min(grid, sms * K)` for K in param `blocks_per_sm` (default [4, 8, 16]). The
//! shared tree's array is no longer used and its declaration goes.
//!
//! **Refuses**: other shapes; a warp or block collective left in the per-element code (a
//! ballot, a partial warp sum: lanes leave a grid-stride loop at different trips); a
//! tree combine other than `+` (a max, a product), a tree
//! ending in `atomicMax`/`atomicMin`; several atomics, another atomic (`atomicCAS`), an
//! atomic whose old value is read (a ticket), or whose address depends on the thread
//! (that is a scatter: see `privatize_atomics`); a tree total scaled by what differs
//! between blocks (`buf[0] * w[blockIdx.x]`); a `return` inside a loop of the
//! per-element code; block sizes that are not a multiple of 32 in some case (the shuffles
//! need whole warps), or not 1-D; a grid that already depends on `sms`; element types
//! the atomic and the shuffles do not both take (sums of float, double, int, unsigned;
//! maxima and minima of 32- and 64-bit integers). Float sums change order within the
//! spec's tolerance; integer folds are exact.

use std::collections::BTreeMap;

use tree_sitter::Node;

use self::combine::{Combine, ATOMICS};
use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::elementwise::{
    bound_text, one_d_grid, pointer_params, thread_field_aliases, without_int_casts, words_replaced,
};
use super::params::Params;
use super::spec_expr::words;
use super::tree::{
    code_names, fresh, kernel_function, line_indent, named_children, newline, one_line, reindent,
    render, text, walk, written_target,
};
use super::RewriteContext;
use crate::spec::Launch;
use crate::syntax::Lang;

const ID: &str = "block_reduce";

/// What the kernel's per-element part and its combine look like.
struct Shape<'t> {
    /// `int i = ...;`
    index_decl: Node<'t>,
    index_type: String,
    index: String,
    /// `M` of `blockIdx.x * M`.
    stride: String,
    init: String,
    bound: String,
    /// The statements that compute the thread's value, in order (the index declaration,
    /// the shared array's declaration and the combine left out).
    per_element: Vec<Node<'t>>,
    /// The store `buf[tid] = E` or the call `atomicAdd(OUT, E)` whose value is summed,
    /// or (`sink_statement`) the statement `if (lane == 0) atomicAdd(OUT, v);` after a
    /// warp's shuffle sum of `v`.
    sink: Node<'t>,
    sink_statement: bool,
    /// `E`.
    value: String,
    /// `OUT`.
    out: String,
    /// The element type folded.
    ty: String,
    /// The atomic's fold.
    combine: Combine,
    /// A shared tree's block total as the final atomic adds it, and its `buf[0]` inside
    /// it (`buf[0] / n`): the new atomic adds the same expression of the block's sum.
    block_total: Option<(Node<'t>, Node<'t>)>,
}

pub fn block_reduce(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, ID)?;
    let plan = current_plan(cx)?;
    let per_sm = Params(cx.params).ints("blocks_per_sm", &[4, 8, 16], 1..=64)?;
    let k = &cx.kernel.name;
    let func = kernel_function(cx)
        .ok_or_else(|| not_applicable(format!("`{k}`'s definition is not in the syntax tree")))?;
    let body = func
        .child_by_field_name("body")
        .ok_or_else(|| not_applicable(format!("`{k}` has no body")))?;
    let na = |why: String| not_applicable(format!("`{k}` is not a block-reducible sum: {why}"));
    let shape = match match_shape(cx, body) {
        Ok(shape) => shape,
        Err(why) => {
            // The author's own block combine, kept where it is a sum (see [`kept`]).
            let code = kept_code(cx, body).map_err(|_| na(why))?;
            let (grid, first) = sums_launch(cx, &plan, &na)?;
            return with_grid(
                cx,
                &code,
                &grid,
                first,
                &per_sm,
                "sum, the block's own combine",
            );
        }
    };
    let (grid, first) = sums_launch(cx, &plan, &na)?;

    // The new body.
    let src = cx.text;
    let nl = newline(src);
    let ind = line_indent(src, shape.index_decl.start_byte()).to_string();
    let unit = if ind.starts_with('\t') {
        "\t".to_string()
    } else {
        "    ".to_string()
    };
    let inner = format!("{ind}{unit}");
    let mut names = code_names(cx);
    let acc = fresh("acc", &mut names);
    let off = fresh("offset", &mut names);
    let warp_sums = fresh("warp_sums", &mut names);
    let start = shape.combine.identity(&shape.ty).map_err(na)?;
    let mut lines = vec![
        format!("{ind}{} {acc} = {start};", shape.ty),
        format!(
            "{ind}for ({} {} = {}; {} < {}; {} += gridDim.x * {}) {{",
            shape.index_type,
            shape.index,
            shape.init,
            shape.index,
            shape.bound,
            shape.index,
            shape.stride
        ),
    ];
    for s in &shape.per_element {
        let mut reps: Vec<(std::ops::Range<usize>, String)> = Vec::new();
        if s.byte_range().contains(&shape.sink.start_byte()) {
            // `buf[t] = E` or `atomicAdd(OUT, E)` becomes `acc += (E)` (or the max, min).
            let fold = shape.combine.fold(&acc, &shape.value, &shape.ty);
            let fold = if shape.sink_statement {
                format!("{fold};")
            } else {
                fold
            };
            reps.push((shape.sink.byte_range(), fold));
        }
        walk(*s, &mut |n| {
            if n.kind() == "return_statement" {
                reps.push((n.byte_range(), "continue;".to_string()));
                return false;
            }
            true
        });
        let stmt = render(src, &s.byte_range(), &reps).map_err(|e| na(e.to_string()))?;
        let stmt = reindent(stmt.trim(), line_indent(src, s.start_byte()), &inner);
        lines.push(format!("{inner}{stmt}"));
    }
    lines.push(format!("{ind}}}"));
    let shuffled = format!("__shfl_down_sync(0xffffffffu, {acc}, {off})");
    let step = shape.combine.fold(&acc, &shuffled, &shape.ty);
    let shfl = |pad: &str| format!("{pad}for (int {off} = 16; {off} > 0; {off} >>= 1) {step};");
    lines.push(shfl(&ind));
    lines.push(format!("{ind}__shared__ {} {warp_sums}[32];", shape.ty));
    lines.push(format!(
        "{ind}if (threadIdx.x % 32 == 0) {warp_sums}[threadIdx.x / 32] = {acc};"
    ));
    lines.push(format!("{ind}__syncthreads();"));
    lines.push(format!("{ind}if (threadIdx.x < 32) {{"));
    lines.push(format!(
        "{inner}{acc} = threadIdx.x < (blockDim.x + 31) / 32 ? {warp_sums}[threadIdx.x] : {start};"
    ));
    lines.push(shfl(&inner));
    let total = match shape.block_total {
        Some((value, buf0)) => render(
            src,
            &value.byte_range(),
            &[(buf0.byte_range(), acc.clone())],
        )
        .map_err(|e| na(e.to_string()))?,
        None => acc.clone(),
    };
    lines.push(format!(
        "{inner}if (threadIdx.x == 0) {}({}, {total});",
        shape.combine.atomic(),
        shape.out
    ));
    lines.push(format!("{ind}}}"));
    let open = body.start_byte() + 1;
    let close = body.end_byte() - 1;
    let new_body = format!("{nl}{}{nl}{}", lines.join(nl), line_indent(src, close));
    let code = format!("{}{}{}", &src[..open], new_body, &src[close..]);

    let noun = format!("{}, warp shuffles", shape.combine.noun());
    with_grid(cx, &code, &grid, first, &per_sm, &noun)
}

/// The launch a block reduction rewrites: every case's blocks whole warps, and the 1-D
/// grid (not yet capped by `sms`) with its first component's range.
fn sums_launch(
    cx: &RewriteContext<'_>,
    plan: &crate::spec::BenchPlan,
    na: &dyn Fn(String) -> super::RewriteError,
) -> Result<
    (
        crate::optimize::edit::SpecAssignment,
        std::ops::Range<usize>,
    ),
    super::RewriteError,
> {
    for case in &plan.cases {
        if let Launch::Cuda { block, .. } = &case.launch {
            if block[0] % 32 != 0 {
                return Err(na(format!(
                    "a case launches blocks of {} threads; the warp shuffles need a multiple of 32",
                    block[0]
                )));
            }
        }
    }
    let (grid, first) = one_d_grid(cx, plan, ID, false)?;
    if words(&grid.text).contains("sms") {
        return Err(na(format!(
            "its grid = {} already depends on `sms`",
            grid.text
        )));
    }
    Ok((grid, first))
}

/// One candidate per `per_sm` K: `code` with the grid capped at `sms * K` blocks (the spec
/// lines come before the kernel, so their offsets are the same in `code`).
fn with_grid(
    cx: &RewriteContext<'_>,
    code: &str,
    grid: &crate::optimize::edit::SpecAssignment,
    first: std::ops::Range<usize>,
    per_sm: &[i64],
    what: &str,
) -> R {
    let g = &grid.text[first.clone()];
    let at = grid.range.start + first.start..grid.range.start + first.end;
    let drafts = per_sm
        .iter()
        .map(|n| {
            let mut out = code.to_string();
            out.replace_range(at.clone(), &format!("min({g}, sms * {n})"));
            Draft {
                label: format!("grid-stride {what}, one atomic per block, grid <= {n} * sms"),
                text: out,
            }
        })
        .collect();
    finish(cx, drafts, Vec::new())
}

/// The kernel with its per-thread value summed over a grid-stride loop and its own block
/// combine kept (see [`kept`]), or why it is not that shape.
fn kept_code(cx: &RewriteContext<'_>, body: Node<'_>) -> Result<String, String> {
    let src = cx.text;
    let stmts = statements(body);
    let (pos, index_decl, index_type, index, init) = index_declaration(src, &stmts)?;
    let stride = index_stride(&init).ok_or("not the 1-D index")?;
    let bound = index_bound(src, body, &index)?;
    let (atomic, combine) = the_atomic(src, body)?;
    if combine != Combine::Sum {
        return Err("not a sum".into());
    }
    fixed_address(src, &pointer_params(cx), args(atomic)[0])?;
    let shared = shared_arrays(src, body);
    let k = kept::kept(src, &stmts[pos + 1..], &index, &shared)?;
    let nl = newline(src);
    let ind = line_indent(src, index_decl.start_byte()).to_string();
    let unit = if ind.starts_with('\t') { "\t" } else { "    " };
    let line = |s: Node<'_>, to: &str| {
        format!(
            "{to}{}",
            reindent(text(src, s), line_indent(src, s.start_byte()), to)
        )
    };
    let inner = format!("{ind}{unit}");
    let mut lines: Vec<String> = k.before.iter().map(|s| line(*s, &ind)).collect();
    lines.push(format!("{ind}{} {} = 0;", k.ty, k.var));
    lines.push(format!(
        "{ind}for ({index_type} {index} = {init}; {index} < {bound}; {index} += gridDim.x * {stride}) {{"
    ));
    lines.extend(k.in_loop.iter().map(|s| line(*s, &inner)));
    let add = format!("{} += ({});", k.var, text(src, k.term));
    lines.push(match k.guard {
        Some(c) => format!("{inner}if {} {add}", text(src, c)),
        None => format!("{inner}{add}"),
    });
    lines.push(format!("{ind}}}"));
    lines.extend(k.combine.iter().map(|s| line(*s, &ind)));
    let start = index_decl.start_byte() - ind.len();
    let close = body.end_byte() - 1;
    Ok(format!(
        "{}{}{nl}{}{}",
        &src[..start],
        lines.join(nl),
        line_indent(src, close),
        &src[close..]
    ))
}

/// The names of the `__shared__` arrays the body declares.
fn shared_arrays(src: &str, body: Node<'_>) -> std::collections::BTreeSet<String> {
    let mut shared = std::collections::BTreeSet::new();
    walk(body, &mut |n| {
        if n.kind() == "declaration" && text(src, n).contains("__shared__") {
            let mut name = n.child_by_field_name("declarator");
            while let Some(inner) = name.and_then(|d| d.child_by_field_name("declarator")) {
                name = Some(inner);
            }
            shared.extend(name.map(|d| text(src, d).to_string()));
        }
        true
    });
    shared
}

/// A statement list without comments.
fn statements(body: Node<'_>) -> Vec<Node<'_>> {
    named_children(body)
        .into_iter()
        .filter(|n| n.kind() != "comment")
        .collect()
}

fn mentions(src: &str, n: Node<'_>, name: &str) -> bool {
    let mut found = false;
    walk(n, &mut |x| {
        if x.child_count() == 0 && text(src, x) == name {
            found = true;
        }
        !found
    });
    found
}

/// Every call to `name` under `n`.
fn calls<'t>(src: &str, n: Node<'t>, name: &str) -> Vec<Node<'t>> {
    let mut out = Vec::new();
    walk(n, &mut |x| {
        if x.kind() == "call_expression"
            && x.child_by_field_name("function")
                .is_some_and(|f| text(src, f) == name)
        {
            out.push(x);
        }
        true
    });
    out
}

fn args<'t>(call: Node<'t>) -> Vec<Node<'t>> {
    call.child_by_field_name("arguments")
        .map(|a| {
            named_children(a)
                .into_iter()
                .filter(|n| n.kind() != "comment")
                .collect()
        })
        .unwrap_or_default()
}

fn strip_parens(s: &str) -> &str {
    let t = s.trim();
    if t.starts_with('(')
        && t.ends_with(')')
        && t[1..t.len() - 1].matches('(').count() == t[1..t.len() - 1].matches(')').count()
    {
        strip_parens(&t[1..t.len() - 1])
    } else {
        t
    }
}

/// `M` of an index `blockIdx.x * M + threadIdx.x` in any order, its terms or product
/// cast to an integer type or not (`(size_t)blockIdx.x * blockDim.x + threadIdx.x`).
fn index_stride(init: &str) -> Option<String> {
    let s = without_int_casts(strip_parens(init));
    let s = strip_parens(&s);
    let terms: Vec<&str> = s.split('+').map(str::trim).collect();
    let [a, b] = terms.as_slice() else {
        return None;
    };
    let product = match (strip_parens(a), strip_parens(b)) {
        ("threadIdx.x", p) | (p, "threadIdx.x") => p.to_string(),
        _ => return None,
    };
    let factors: Vec<&str> = product.split('*').map(|f| strip_parens(f.trim())).collect();
    let [x, y] = factors.as_slice() else {
        return None;
    };
    let m = match (*x, *y) {
        ("blockIdx.x", m) | (m, "blockIdx.x") => m,
        _ => return None,
    };
    if m.is_empty() || m.contains("Idx") {
        return None;
    }
    Some(
        if m.chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
        {
            m.to_string()
        } else {
            format!("({m})")
        },
    )
}

/// Whether `n` is an expression statement holding only `__syncthreads()`.
fn is_barrier(src: &str, n: Node<'_>) -> bool {
    n.kind() == "expression_statement"
        && one_line(text(src, n)).trim_end_matches(';').trim() == "__syncthreads()"
}

/// The kernel's shape (see the module doc), or why it is not one `block_reduce` takes.
fn match_shape<'t>(cx: &RewriteContext<'t>, body: Node<'t>) -> Result<Shape<'t>, String> {
    let src = cx.text;
    let stmts = statements(body);
    let pointers = pointer_params(cx);
    let (pos, index_decl, index_type, index, init) = index_declaration(src, &stmts)?;
    let stride = index_stride(&init).ok_or_else(|| {
        format!("`{index} = {init}` is not the 1-D index `blockIdx.x * M + threadIdx.x`")
    })?;
    let bound = index_bound(src, body, &index)?;
    let after: Vec<Node<'t>> = stmts[pos + 1..].to_vec();
    let shared: Vec<Node<'t>> = stmts
        .iter()
        .copied()
        .filter(|s| s.kind() == "declaration" && text(src, *s).contains("__shared__"))
        .collect();
    let (atomic, combine) = the_atomic(src, body)?;
    let a = args(atomic);
    if a.len() != 2 {
        return Err(format!(
            "its {} does not take two arguments",
            combine.atomic()
        ));
    }
    let out = fixed_address(src, &pointers, a[0])?;
    let tree = !calls(src, body, "__syncthreads").is_empty();
    if tree && combine != Combine::Sum {
        return Err(format!(
            "its shared-memory tree ends in {}; {ID} takes trees of sums only",
            combine.atomic()
        ));
    }
    let Summand {
        per_element,
        sink,
        sink_statement,
        value,
        ty,
        block_total,
    } = if tree {
        shared_tree(cx, &after, &shared, atomic, a[1])?
    } else {
        if !shared.is_empty() {
            return Err("it declares shared memory but never synchronizes".into());
        }
        let ty = address_pointee(src, &pointers, a[0])
            .ok_or_else(|| format!("cannot tell the type of `{out}`"))?;
        per_element_atomic(src, body, after, atomic, a[1], combine, ty)
    };
    if let Some(f) = warp_sum::collective(src, &per_element) {
        return Err(format!(
            "the per-element code calls `{f}`; in a grid-stride loop the lanes of a warp leave at different trips, so no collective may stay inside it"
        ));
    }
    check_returns(src, &per_element)?;
    Ok(Shape {
        index_decl,
        index_type,
        index,
        stride,
        init,
        bound,
        per_element,
        sink,
        sink_statement,
        value: format!("({})", text(src, value)),
        out,
        ty: numeric(&ty),
        combine,
        block_total,
    })
}

/// The [`Summand`] of an atomic per element: the atomic itself, or, where a warp's
/// shuffle sum of `v` comes before `if (lane == 0) atomicAdd(OUT, v);`, that `if` with
/// the shuffles dropped (every lane's `v` is then added, as the warp sum did).
fn per_element_atomic<'t>(
    src: &str,
    body: Node<'t>,
    mut per_element: Vec<Node<'t>>,
    atomic: Node<'t>,
    value: Node<'t>,
    combine: Combine,
    ty: String,
) -> Summand<'t> {
    let warp = (combine == Combine::Sum)
        .then(|| warp_sum::warp_sum(src, body, &per_element, atomic, value))
        .flatten();
    let (sink, sink_statement) = match warp {
        Some(w) => {
            per_element.retain(|s| s.id() != w.shuffles.id());
            (w.lane_if, true)
        }
        None => (atomic, false),
    };
    Summand {
        per_element,
        sink,
        sink_statement,
        value,
        ty,
        block_total: None,
    }
}

/// The body's one atomic, when it is one `block_reduce` folds (a sum, a maximum, a
/// minimum) and its old value is not read.
fn the_atomic<'t>(src: &str, body: Node<'t>) -> Result<(Node<'t>, Combine), String> {
    let mut atomics = Vec::new();
    walk(body, &mut |x| {
        if x.kind() == "call_expression"
            && x.child_by_field_name("function")
                .is_some_and(|f| text(src, f).starts_with("atomic"))
        {
            atomics.push(x);
        }
        true
    });
    let [atomic] = atomics.as_slice() else {
        return Err(format!(
            "it has {} atomic calls; {ID} needs exactly one ({}), folding the block's or the element's value into one place",
            atomics.len(),
            ATOMICS.join(", ")
        ));
    };
    let name = atomic
        .child_by_field_name("function")
        .map(|f| text(src, f))
        .unwrap_or_default();
    let combine = Combine::of_atomic(name).ok_or_else(|| {
        format!(
            "its atomic is `{name}`; {ID} folds only {}",
            ATOMICS.join(", ")
        )
    })?;
    if atomic.parent().map(|p| p.kind()) != Some("expression_statement") {
        return Err(format!(
            "`{}` is not a statement of its own: the atomic's old value is read",
            one_line(text(src, *atomic))
        ));
    }
    Ok((*atomic, combine))
}

/// The index declaration `T i = <init with blockIdx.x and threadIdx.x>;` among the body's
/// statements: (its position, the declaration, `T`, `i`, the initializer). Names declared
/// before it for a thread or block position (`int tid = threadIdx.x;`) count as what
/// they hold, and the initializer comes back with them written out.
fn index_declaration<'t>(
    src: &str,
    stmts: &[Node<'t>],
) -> Result<(usize, Node<'t>, String, String, String), String> {
    let mut aliases = BTreeMap::new();
    for (p, s) in stmts.iter().enumerate() {
        if s.kind() != "declaration" {
            continue;
        }
        if let Some(found) = thread_field_aliases(src, *s, &aliases) {
            aliases.extend(found);
            continue;
        }
        let Some((ty, d)) = s
            .child_by_field_name("type")
            .zip(s.child_by_field_name("declarator"))
            .filter(|(_, d)| d.kind() == "init_declarator")
        else {
            continue;
        };
        let (Some(name), Some(value)) = (
            d.child_by_field_name("declarator"),
            d.child_by_field_name("value"),
        ) else {
            continue;
        };
        let value = words_replaced(text(src, value), &aliases);
        if value.contains("blockIdx.x") && value.contains("threadIdx.x") {
            let (ty, name) = (text(src, ty).to_string(), text(src, name).to_string());
            return Ok((p, *s, ty, name, value));
        }
    }
    Err("no index `int i = blockIdx.x * blockDim.x + threadIdx.x;`".to_string())
}

/// The text of `B` in the body's first comparison `index < B` (or `index >= B`,
/// `B > index`, `B <= index`) whose `B` depends neither on the index nor on a thread
/// or block index.
fn index_bound(src: &str, body: Node<'_>, index: &str) -> Result<String, String> {
    let mut bound = None;
    walk(body, &mut |n| {
        if bound.is_none() && n.kind() == "binary_expression" {
            if let (Some(l), Some(op), Some(r)) = (
                n.child_by_field_name("left"),
                n.child_by_field_name("operator"),
                n.child_by_field_name("right"),
            ) {
                let (l_is, r_is) = (text(src, l) == index, text(src, r) == index);
                let b = match text(src, op) {
                    "<" | ">=" if l_is => Some(r),
                    ">" | "<=" if r_is => Some(l),
                    _ => None,
                };
                if let Some(b) =
                    b.filter(|b| !mentions(src, *b, index) && !text(src, *b).contains("Idx"))
                {
                    bound = Some(bound_text(src, b));
                }
            }
        }
        bound.is_none()
    });
    bound.ok_or_else(|| format!("no bound `{index} < n` on the index"))
}

/// The atomic's address as text, when it names only pointer parameters (the same place
/// for every thread); otherwise the refusal: a thread-dependent address is a scatter.
fn fixed_address(
    src: &str,
    pointers: &BTreeMap<String, String>,
    out: Node<'_>,
) -> Result<String, String> {
    let mut bad = None;
    walk(out, &mut |x| {
        if x.kind() == "identifier" && !pointers.contains_key(text(src, x)) {
            bad = Some(text(src, x).to_string());
        }
        bad.is_none()
    });
    match bad {
        Some(b) => Err(format!(
            "the atomic's address `{}` depends on `{b}`: that is a scatter, not one sum",
            text(src, out)
        )),
        None => Ok(text(src, out).to_string()),
    }
}

/// The element type an atomic's address points to: the type it is cast to (`(int*)out`,
/// as an integer atomicMax on a float's bits is written), else the pointee of the
/// pointer parameter it starts from.
fn address_pointee(
    src: &str,
    pointers: &BTreeMap<String, String>,
    address: Node<'_>,
) -> Option<String> {
    let mut a = address;
    while a.kind() == "parenthesized_expression" {
        a = a.named_child(0)?;
    }
    if a.kind() == "cast_expression" {
        let ty = text(src, a.child_by_field_name("type")?);
        return Some(ty.trim().strip_suffix('*')?.trim().to_string());
    }
    pointee(pointers, text(src, a))
}

/// The element type of the pointer parameter an address (`out`, `&out[0]`, `out + 3`)
/// starts from.
fn pointee(pointers: &BTreeMap<String, String>, out: &str) -> Option<String> {
    let base = out
        .trim_start_matches('&')
        .split(['[', ' ', '+'])
        .next()?
        .trim();
    pointers.get(base).cloned()
}

/// What each thread sums: the parts of [`Shape`] that the two shapes find differently.
struct Summand<'t> {
    per_element: Vec<Node<'t>>,
    sink: Node<'t>,
    sink_statement: bool,
    value: Node<'t>,
    ty: String,
    block_total: Option<(Node<'t>, Node<'t>)>,
}

/// The shared-memory tree's [`Summand`], from the statements `after` the index (its type
/// is the shared array's), when the block's total is added last by one thread, only
/// barriers and `buf`-into-`buf` sums run between the first barrier and it, and one
/// plain store `buf[tid] = E` feeds `buf` before that barrier.
fn shared_tree<'t>(
    cx: &RewriteContext<'t>,
    after: &[Node<'t>],
    shared: &[Node<'t>],
    atomic: Node<'t>,
    total: Node<'t>,
) -> Result<Summand<'t>, String> {
    let src = cx.text;
    let first_barrier = after
        .iter()
        .position(|s| is_barrier(src, *s))
        .ok_or("its `__syncthreads()` is not a statement of the kernel's body")?;
    let last = *after.last().ok_or("an empty body")?;
    let buf0 = block_total(cx, last, atomic, total)?;
    let buf = text(
        src,
        buf0.child_by_field_name("argument")
            .ok_or("a subscript without an array")?,
    )
    .to_string();
    let buf_decl = shared
        .iter()
        .copied()
        .find(|d| mentions(src, *d, &buf))
        .ok_or_else(|| format!("`{buf}` is not a `__shared__` array of the kernel"))?;
    let ty = text(
        src,
        buf_decl
            .child_by_field_name("type")
            .ok_or("a declaration without a type")?,
    )
    .to_string();
    for s in &after[first_barrier..after.len() - 1] {
        check_combine_step(src, *s, &buf)?;
    }
    let before = &after[..first_barrier];
    let (store, value) = thread_store(src, before, &buf)?;
    let per_element: Vec<Node<'t>> = before
        .iter()
        .copied()
        .filter(|s| !shared.contains(s))
        .collect();
    Ok(Summand {
        per_element,
        sink: store,
        sink_statement: false,
        value,
        ty,
        block_total: Some((total, buf0)),
    })
}

/// The `buf[0]` of a shared array that the body's last statement adds, when that
/// statement is `if (tid == 0) atomicAdd(out, T);` and `T` (`total`) is `buf[0]`, or
/// `buf[0]` times or divided by what is the same in every thread of the grid (`buf[0] /
/// n` of a mean): a sum of such terms is that factor times the sum of the `buf[0]`s.
fn block_total<'t>(
    cx: &RewriteContext<'t>,
    last: Node<'t>,
    atomic: Node<'t>,
    total: Node<'t>,
) -> Result<Node<'t>, String> {
    let src = cx.text;
    if !last.byte_range().contains(&atomic.start_byte()) || last.kind() != "if_statement" {
        return Err(
            "the block's sum is not added last, by `if (tid == 0) atomicAdd(out, buf[0]);`".into(),
        );
    }
    let cond = last
        .child_by_field_name("condition")
        .map(|c| one_line(text(src, c)))
        .unwrap_or_default();
    if !cond.contains("== 0") {
        return Err(format!(
            "the last atomic runs under `{cond}`, not for one thread of the block"
        ));
    }
    let body = kernel_function(cx).and_then(|f| f.child_by_field_name("body"));
    let uniform = |n: Node<'_>| body.is_some_and(|b| grid_uniform(cx, b, n));
    scaled_first_element(src, total, &uniform).ok_or_else(|| {
        format!(
            "the block adds `{}`, not `buf[0]` of a shared array (or `buf[0]` times or divided by what is the same in every thread)",
            one_line(text(src, total))
        )
    })
}

/// The `buf[0]` that `e` is, or is a product or quotient of with factors `uniform` holds
/// for (`buf[0] * s`, `s * buf[0]`, `buf[0] / n`, parentheses allowed).
fn scaled_first_element<'t>(
    src: &str,
    e: Node<'t>,
    uniform: &dyn Fn(Node<'t>) -> bool,
) -> Option<Node<'t>> {
    match e.kind() {
        "parenthesized_expression" => scaled_first_element(src, e.named_child(0)?, uniform),
        "subscript_expression" => {
            let index = e
                .child_by_field_name("indices")
                .or_else(|| e.child_by_field_name("index"));
            let index = index.map(|i| one_line(text(src, i))).unwrap_or_default();
            (index.trim_matches(|c| c == '[' || c == ']').trim() == "0").then_some(e)
        }
        "binary_expression" => {
            let (l, r) = (
                e.child_by_field_name("left")?,
                e.child_by_field_name("right")?,
            );
            match text(src, e.child_by_field_name("operator")?) {
                "*" if uniform(r) => scaled_first_element(src, l, uniform),
                "*" if uniform(l) => scaled_first_element(src, r, uniform),
                "/" if uniform(r) => scaled_first_element(src, l, uniform),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Whether `e` has one value in every thread of the grid: literals, casts and arithmetic
/// of scalar kernel parameters and names the kernel neither declares nor assigns (macros,
/// file constants); no memory read, call, thread or block position.
fn grid_uniform(cx: &RewriteContext<'_>, body: Node<'_>, e: Node<'_>) -> bool {
    let src = cx.text;
    let pointers = pointer_params(cx);
    let mut ok = true;
    walk(e, &mut |n| {
        match n.kind() {
            "call_expression"
            | "subscript_expression"
            | "field_expression"
            | "pointer_expression"
            | "assignment_expression"
            | "update_expression" => ok = false,
            "identifier" => {
                let name = text(src, n);
                ok &= !pointers.contains_key(name) && !declared_or_assigned(src, body, name);
            }
            _ => {}
        }
        ok
    });
    ok
}

/// Whether the kernel body declares `name` or writes it.
fn declared_or_assigned(src: &str, body: Node<'_>, name: &str) -> bool {
    let mut found = false;
    walk(body, &mut |n| {
        let target = match n.kind() {
            "init_declarator" => n.child_by_field_name("declarator"),
            "declaration" => n
                .child_by_field_name("declarator")
                .filter(|d| d.kind() == "identifier"),
            "assignment_expression" | "update_expression" => written_target(n),
            _ => None,
        };
        found |= target.is_some_and(|t| text(src, t) == name);
        !found
    });
    found
}

/// Refuses a statement of the tree's combine (between the first barrier and the final
/// atomic) that is not a barrier or a loop, or that assigns `buf` anything but a sum of
/// `buf` elements.
fn check_combine_step(src: &str, s: Node<'_>, buf: &str) -> Result<(), String> {
    if is_barrier(src, s) {
        return Ok(());
    }
    if !matches!(s.kind(), "for_statement" | "while_statement") {
        return Err(format!(
            "between the first barrier and the final atomic, `{}` is neither a barrier nor the tree's loop",
            one_line(text(src, s))
        ));
    }
    let mut bad = None;
    walk(s, &mut |n| {
        if n.kind() == "assignment_expression" {
            let l = n
                .child_by_field_name("left")
                .map(|l| text(src, l))
                .unwrap_or("");
            if l.starts_with(&format!("{buf}[")) && !sums_buf(src, n, buf) {
                bad = Some(format!(
                    "the tree combines with `{}`; {ID} only sums",
                    one_line(text(src, n))
                ));
            }
        }
        bad.is_none()
    });
    bad.map_or(Ok(()), Err)
}

/// Whether the assignment `n` adds `buf` elements: `_ += buf[..]` or
/// `_ = buf[..] + buf[..]`.
fn sums_buf(src: &str, n: Node<'_>, buf: &str) -> bool {
    let op = n
        .child_by_field_name("operator")
        .map(|o| text(src, o))
        .unwrap_or("");
    let is_buf = |x: Node<'_>| {
        x.kind() == "subscript_expression"
            && x.child_by_field_name("argument")
                .is_some_and(|a| text(src, a) == buf)
    };
    match (op, n.child_by_field_name("right")) {
        ("+=", Some(r)) => is_buf(r),
        ("=", Some(r)) => {
            r.kind() == "binary_expression"
                && r.child_by_field_name("operator").map(|o| text(src, o)) == Some("+")
                && r.child_by_field_name("left").is_some_and(is_buf)
                && r.child_by_field_name("right").is_some_and(is_buf)
        }
        _ => false,
    }
}

/// The one plain store `buf[tid] = E;` among the statements `before` the first barrier
/// and its `E`, which must not read `buf`.
fn thread_store<'t>(
    src: &str,
    before: &[Node<'t>],
    buf: &str,
) -> Result<(Node<'t>, Node<'t>), String> {
    let mut stores = Vec::new();
    for s in before {
        walk(*s, &mut |n| {
            if n.kind() == "assignment_expression"
                && n.child_by_field_name("left")
                    .is_some_and(|l| text(src, l).starts_with(&format!("{buf}[")))
            {
                stores.push(n);
            }
            true
        });
    }
    let [store] = stores.as_slice() else {
        return Err(format!(
            "before the first barrier it stores into `{buf}` {} times; {ID} needs one `{buf}[tid] = value;`",
            stores.len()
        ));
    };
    if store.child_by_field_name("operator").map(|o| text(src, o)) != Some("=") {
        return Err(format!(
            "`{}` is not a plain store",
            one_line(text(src, *store))
        ));
    }
    let value = store
        .child_by_field_name("right")
        .ok_or("a store without a value")?;
    if mentions(src, value, buf) {
        return Err("the stored value reads the shared array".into());
    }
    Ok((*store, value))
}

/// An element type written one way (`volatile` and extra spaces dropped); which types
/// each combine takes is [`Combine::identity`]'s to say.
fn numeric(ty: &str) -> String {
    one_line(ty.trim_start_matches("volatile").trim())
}

/// A `return` of the per-element code becomes `continue`: never inside a loop of its own.
fn check_returns(src: &str, stmts: &[Node<'_>]) -> Result<(), String> {
    let mut bad = None;
    for s in stmts {
        walk(*s, &mut |n| {
            if matches!(
                n.kind(),
                "for_statement" | "while_statement" | "do_statement"
            ) {
                let mut inner = false;
                walk(n, &mut |x| {
                    inner |= x.kind() == "return_statement";
                    !inner
                });
                if inner {
                    bad = Some(format!(
                        "`{}` returns from inside a loop; a grid-stride loop could not skip just that element",
                        one_line(text(src, n)).chars().take(60).collect::<String>()
                    ));
                }
                return false;
            }
            true
        });
    }
    bad.map_or(Ok(()), Err)
}

mod combine;
mod kept;
#[cfg(test)]
mod tests;
mod warp_sum;
