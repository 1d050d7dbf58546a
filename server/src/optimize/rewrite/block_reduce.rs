//! `block_reduce`: a sum of every element into one place becomes a grid-stride sum per
//! thread, a warp-shuffle sum per warp, a shared-memory combine of the warps, and one
//! global atomic per block, over a grid of a few blocks per SM.
//!
//! **Matches** a 1-D kernel with an index `I = blockIdx.x * M + threadIdx.x` (any order
//! of the terms and factors; `M` is `blockDim.x`, a macro or a literal) and a bound
//! `I < B` (or `I >= B`) in its body, in one of two shapes:
//! - *an atomic per element*: the body after the index adds a value to a fixed address,
//!   `atomicAdd(OUT, E)`, where `OUT` does not depend on the thread (`out`, `&out[0]`,
//!   `out + 3`), under `if (I < B)` or after `if (I >= B) return;`;
//! - *a shared-memory tree per block* (the classic reduction): before the first
//!   `__syncthreads()`, the thread stores its value in `buf[tid] = E;` (with or without a
//!   bounds guard); after it, only barriers and loops that add `buf` elements into `buf`
//!   (`buf[t] += buf[t + s]`, `buf[t] = buf[t] + buf[t + s]`); last,
//!   `if (tid == 0) atomicAdd(OUT, buf[0]);`.
//!
//! **Writes** `T acc = 0;` then the statements that computed the thread's value, as the
//! body of `for (I = <the index>; I < B; I += gridDim.x * M)` with the store (or the
//! atomic) made `acc += E;` and `return` made `continue`; then the block's sum by
//! `__shfl_down_sync` within each warp, a `__shared__ T [32]` for the warps' sums, the
//! first warp's shuffle sum of those, and `atomicAdd(OUT, acc)` by thread 0. The grid
//! becomes `min(grid, sms * K)` for K in param `blocks_per_sm` (default [4, 8, 16]). The
//! shared tree's array is no longer used and its declaration goes.
//!
//! **Refuses**: other shapes; a combine other than `+` (a max, a product); several atomics
//! or an atomic whose address depends on the thread (that is a scatter: see
//! `privatize_atomics`); a `return` inside a loop of the per-element code; block sizes that
//! are not a multiple of 32 in some case (the shuffles need whole warps), or not 1-D; a
//! grid that already depends on `sms`; element types `atomicAdd` and the shuffles do not
//! both take. Float sums change order within the spec's tolerance.

use std::collections::BTreeMap;

use tree_sitter::Node;

use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::elementwise::{
    bound_text, one_d_grid, pointer_params, thread_field_aliases, without_int_casts, words_replaced,
};
use super::params::Params;
use super::spec_expr::words;
use super::tree::{
    code_names, fresh, kernel_function, line_indent, named_children, newline, render, text, walk,
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
    /// The store `buf[tid] = E` or the call `atomicAdd(OUT, E)` whose value is summed.
    sink: Node<'t>,
    /// `E`.
    value: String,
    /// `OUT`.
    out: String,
    /// The element type summed.
    ty: String,
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
    let shape = match_shape(cx, body).map_err(na)?;
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
    let (grid, first) = one_d_grid(cx, &plan, ID, false)?;
    if words(&grid.text).contains("sms") {
        return Err(na(format!(
            "its grid = {} already depends on `sms`",
            grid.text
        )));
    }

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
    let mut lines = vec![
        format!("{ind}{} {acc} = 0;", shape.ty),
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
            // `buf[t] = E` or `atomicAdd(OUT, E)` becomes `acc += (E)`.
            reps.push((shape.sink.byte_range(), format!("{acc} += {}", shape.value)));
        }
        walk(*s, &mut |n| {
            if n.kind() == "return_statement" {
                reps.push((n.byte_range(), "continue;".to_string()));
                return false;
            }
            true
        });
        let stmt = render(src, &s.byte_range(), &reps).map_err(|e| na(e.to_string()))?;
        lines.push(format!("{inner}{}", stmt.trim()));
    }
    lines.push(format!("{ind}}}"));
    let shfl = |pad: &str| {
        format!(
            "{pad}for (int {off} = 16; {off} > 0; {off} >>= 1) {acc} += __shfl_down_sync(0xffffffffu, {acc}, {off});"
        )
    };
    lines.push(shfl(&ind));
    lines.push(format!("{ind}__shared__ {} {warp_sums}[32];", shape.ty));
    lines.push(format!(
        "{ind}if (threadIdx.x % 32 == 0) {warp_sums}[threadIdx.x / 32] = {acc};"
    ));
    lines.push(format!("{ind}__syncthreads();"));
    lines.push(format!("{ind}if (threadIdx.x < 32) {{"));
    lines.push(format!(
        "{inner}{acc} = threadIdx.x < (blockDim.x + 31) / 32 ? {warp_sums}[threadIdx.x] : 0;"
    ));
    lines.push(shfl(&inner));
    lines.push(format!(
        "{inner}if (threadIdx.x == 0) atomicAdd({}, {acc});",
        shape.out
    ));
    lines.push(format!("{ind}}}"));
    let open = body.start_byte() + 1;
    let close = body.end_byte() - 1;
    let new_body = format!("{nl}{}{nl}{}", lines.join(nl), line_indent(src, close));
    let code = format!("{}{}{}", &src[..open], new_body, &src[close..]);

    // The launch: a few blocks per SM (the spec lines come before the kernel, so their
    // offsets are the same in `code`).
    let g = &grid.text[first.clone()];
    let at = grid.range.start + first.start..grid.range.start + first.end;
    let mut drafts = Vec::new();
    for n in per_sm {
        let mut out = code.clone();
        out.replace_range(at.clone(), &format!("min({g}, sms * {n})"));
        drafts.push(Draft {
            label: format!(
                "grid-stride sum, warp shuffles, one atomic per block, grid <= {n} * sms"
            ),
            text: out,
        });
    }
    finish(cx, drafts, Vec::new())
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

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
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
        && squash(text(src, n)).trim_end_matches(';').trim() == "__syncthreads()"
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
    let atomics = calls(src, body, "atomicAdd");
    if atomics.len() != 1 {
        return Err(format!(
            "it has {} `atomicAdd` calls; {ID} needs exactly one, adding the block's or the element's value to one place",
            atomics.len()
        ));
    }
    let atomic = atomics[0];
    let a = args(atomic);
    if a.len() != 2 {
        return Err("its atomicAdd does not take two arguments".into());
    }
    let out = fixed_address(src, &pointers, a[0])?;
    let Summand {
        per_element,
        sink,
        value,
        ty,
    } = if !calls(src, body, "__syncthreads").is_empty() {
        shared_tree(src, &after, &shared, atomic, a[1])?
    } else {
        if !shared.is_empty() {
            return Err("it declares shared memory but never synchronizes".into());
        }
        let ty =
            pointee(&pointers, &out).ok_or_else(|| format!("cannot tell the type of `{out}`"))?;
        Summand {
            per_element: after,
            sink: atomic,
            value: a[1],
            ty,
        }
    };
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
        value: format!("({})", text(src, value)),
        out,
        ty: numeric(&ty)?,
    })
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
    value: Node<'t>,
    ty: String,
}

/// The shared-memory tree's [`Summand`], from the statements `after` the index (its type
/// is the shared array's), when the block's total is added last by one thread, only
/// barriers and `buf`-into-`buf` sums run between the first barrier and it, and one
/// plain store `buf[tid] = E` feeds `buf` before that barrier.
fn shared_tree<'t>(
    src: &str,
    after: &[Node<'t>],
    shared: &[Node<'t>],
    atomic: Node<'t>,
    total: Node<'t>,
) -> Result<Summand<'t>, String> {
    let first_barrier = after
        .iter()
        .position(|s| is_barrier(src, *s))
        .ok_or("its `__syncthreads()` is not a statement of the kernel's body")?;
    let last = *after.last().ok_or("an empty body")?;
    let buf = block_total_array(src, last, atomic, total)?;
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
        value,
        ty,
    })
}

/// The shared array `buf` whose `buf[0]` the body's last statement adds, when that
/// statement is `if (tid == 0) atomicAdd(out, buf[0]);` (`total` is the atomic's value).
fn block_total_array(
    src: &str,
    last: Node<'_>,
    atomic: Node<'_>,
    total: Node<'_>,
) -> Result<String, String> {
    if !last.byte_range().contains(&atomic.start_byte()) || last.kind() != "if_statement" {
        return Err(
            "the block's sum is not added last, by `if (tid == 0) atomicAdd(out, buf[0]);`".into(),
        );
    }
    let cond = last
        .child_by_field_name("condition")
        .map(|c| squash(text(src, c)))
        .unwrap_or_default();
    if !cond.contains("== 0") {
        return Err(format!(
            "the last atomic runs under `{cond}`, not for one thread of the block"
        ));
    }
    let total = squash(text(src, total));
    total
        .strip_suffix("[0]")
        .map(str::to_string)
        .ok_or_else(|| format!("the block adds `{total}`, not `buf[0]` of a shared array"))
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
            squash(text(src, s))
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
                    squash(text(src, n))
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
            squash(text(src, *store))
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

/// The element types both `atomicAdd` and `__shfl_down_sync` take.
fn numeric(ty: &str) -> Result<String, String> {
    let t = squash(ty.trim_start_matches("volatile").trim());
    match t.as_str() {
        "float"
        | "double"
        | "int"
        | "unsigned"
        | "unsigned int"
        | "unsigned long long"
        | "unsigned long long int" => Ok(t),
        _ => Err(format!(
            "it sums `{t}`; {ID} handles float, double, int and unsigned sums"
        )),
    }
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
                        squash(text(src, n)).chars().take(60).collect::<String>()
                    ));
                }
                return false;
            }
            true
        });
    }
    bad.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests;
