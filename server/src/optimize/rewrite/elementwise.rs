//! The 1-D elementwise shape that `vectorize`, `grid_stride`, `coarsen` and
//! `privatize_atomics` rewrite: `int i = blockIdx.x * blockDim.x + threadIdx.x;` (any
//! order of the product and the sum, parenthesised or not) followed by the bounds check
//! `if (i < n) { ... }` ending the kernel or `if (i >= n) return;` followed by the body
//! (before the index: declarations, and early exits of whole blocks such as `if (b >= B)
//! return;` for a batch on `blockIdx.y`);
//! and [`inspect_body`], which checks that the guarded body handles its own element only
//! (no barrier, no warp collective, no `threadIdx`, no write to the index) and collects
//! its accesses. Kernels are matched on the tree-sitter tree, never by regular
//! expressions; a kernel that does not fit gets the statement that did not.

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::check::not_applicable;
use super::spec_expr::{components, strip_parens};
use super::tree::{first_line, line_indent, named_children, text, walk, written_target};
use super::{RewriteContext, RewriteError};
use crate::optimize::edit;
use crate::spec::{BenchPlan, Launch};
use crate::syntax::{ByteRange, ParamKind};

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Guard {
    /// `if (i < n) BODY` ending the kernel.
    Block,
    /// `if (i >= n) return;` followed by the body.
    EarlyReturn,
}

/// `int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }` (or the
/// early-return form), located in the tree.
pub(super) struct Elementwise<'t> {
    /// Helper variables declared before the index that hold `threadIdx.x`, `blockIdx.x`
    /// or `blockDim.x` (name -> the field).
    pub thread_aliases: BTreeMap<String, String>,
    pub index: String,
    /// The index's type without qualifiers (`int`, `unsigned int`, `size_t`).
    pub index_ty: String,
    pub init: String,
    pub decl: Node<'t>,
    pub guard: Node<'t>,
    /// End of the guard's `( ... )`.
    pub cond_end: usize,
    pub bound: Node<'t>,
    pub form: Guard,
    /// Comments between the index and the guard.
    pub between: Vec<Node<'t>>,
    /// The kernel reads `blockIdx.y` or `blockIdx.z` (a batch index, the same for every
    /// thread of a block), in declarations before the index or in the body: its grid
    /// may have y and z, which stay the author's; a rewrite that changes the grid
    /// changes only its x.
    pub batched: bool,
    /// The guarded statements (comments among them included), at least one.
    pub body: Vec<Node<'t>>,
    /// End of the last guarded statement.
    pub body_end: usize,
    /// End of what the rewrite replaces: the guard (`Block`) or the last statement.
    pub end: usize,
    /// Indentation of the guard's line and one indentation step.
    pub indent: String,
    pub unit: String,
}

impl Elementwise<'_> {
    pub fn body_span(&self) -> ByteRange {
        self.body[0].start_byte()..self.body_end
    }
}

pub(super) const INDEX_SHAPE: &str = "`int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }` (or `if (i >= n) return;`)";

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

/// Integer types an index is cast to, whitespace removed (`unsigned int` is `unsignedint`).
pub(super) const INDEX_CASTS: [&str; 16] = [
    "int",
    "long",
    "longlong",
    "longint",
    "unsigned",
    "unsignedint",
    "unsignedlong",
    "unsignedlonglong",
    "size_t",
    "std::size_t",
    "int32_t",
    "int64_t",
    "std::int64_t",
    "uint64_t",
    "uint32_t",
    "ptrdiff_t",
];

/// `init` with its whitespace and its integer casts removed: `(T)` before a term, and
/// `static_cast<T>(v)` around a thread or block position.
pub(super) fn without_int_casts(init: &str) -> String {
    let mut plain: String = init.chars().filter(|c| !c.is_whitespace()).collect();
    for t in INDEX_CASTS {
        plain = plain.replace(&format!("({t})"), "");
        for v in [
            "blockIdx.x",
            "blockDim.x",
            "threadIdx.x",
            "blockIdx.y",
            "blockDim.y",
            "threadIdx.y",
        ] {
            plain = plain.replace(&format!("static_cast<{t}>({v})"), v);
        }
    }
    plain
}

/// Whether `init` is the 1-D global thread index `blockIdx.x * blockDim.x + threadIdx.x`,
/// in either order, the product parenthesized or not, any term or the product cast to an
/// integer type (`(size_t)blockIdx.x * blockDim.x + threadIdx.x`,
/// `(int64_t)(blockIdx.x * blockDim.x) + threadIdx.x`): the style of kernels whose sizes
/// pass 2^31. A widening cast changes no value the index takes below the size.
pub(super) fn is_one_d_index(init: &str) -> bool {
    let plain = without_int_casts(init);
    one_d_index_forms().contains(&plain)
}

/// The statements a bounds check guards, the end of the last one, and the end of what a
/// rewrite replaces: `Block`, the `if`'s body, which must end the kernel (`rest` holds
/// only comments); `EarlyReturn`, everything after a plain `return;`.
pub(super) fn guarded_body<'t>(
    src: &str,
    guard: Node<'t>,
    form: Guard,
    rest: &[Node<'t>],
) -> Result<(Vec<Node<'t>>, usize, usize), String> {
    let consequence = guard
        .child_by_field_name("consequence")
        .ok_or("the bounds check has no body")?;
    match form {
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
            Ok((inner, body_end, guard.end_byte()))
        }
        Guard::EarlyReturn => {
            if !is_plain_return(consequence) {
                return Err(format!(
                    "`{}` must be followed by a plain `return;`",
                    first_line(text(src, guard))
                ));
            }
            let last = rest
                .iter()
                .rposition(|s| s.kind() != "comment")
                .ok_or("nothing follows the early return")?;
            let end = rest[last].end_byte();
            Ok((rest[..=last].to_vec(), end, end))
        }
    }
}

/// `int tid = threadIdx.x;` (or `blockIdx.x`, `blockDim.x`, or a `known` alias of one;
/// several in one declaration too): each (name, field), or None unless every declarator
/// is one.
pub(super) fn thread_field_aliases(
    src: &str,
    decl: Node<'_>,
    known: &BTreeMap<String, String>,
) -> Option<Vec<(String, String)>> {
    let mut c = decl.walk();
    let ds: Vec<Node> = decl.children_by_field_name("declarator", &mut c).collect();
    if ds.is_empty() {
        return None;
    }
    ds.iter()
        .map(|d| {
            let name = d
                .child_by_field_name("declarator")
                .filter(|n| n.kind() == "identifier")?;
            let value: String = text(src, d.child_by_field_name("value")?)
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect();
            let field = match known.get(&value) {
                Some(f) => f.clone(),
                None => value,
            };
            matches!(field.as_str(), "threadIdx.x" | "blockIdx.x" | "blockDim.x")
                .then(|| (text(src, name).to_string(), field))
        })
        .collect()
}

/// The identifier-like words of `s`.
fn words_of(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

/// `s` with whole words replaced by their value in `map`; a word right after `.` (a
/// field, the `x` of `threadIdx.x`) is left alone.
pub(super) fn words_replaced(s: &str, map: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut word = String::new();
    let mut after_dot = false;
    let flush = |word: &mut String, after_dot: bool, out: &mut String| {
        match map.get(word.as_str()).filter(|_| !after_dot) {
            Some(v) => out.push_str(v),
            None => out.push_str(word),
        }
        word.clear();
    };
    for ch in s.chars() {
        if ch.is_ascii_alphanumeric() || ch == '_' {
            word.push(ch);
            continue;
        }
        flush(&mut word, after_dot, &mut out);
        after_dot = ch == '.';
        out.push(ch);
    }
    flush(&mut word, after_dot, &mut out);
    out
}

/// Whether a declaration's text reads the block's position only along y or z
/// (`int b = blockIdx.y;`, `const int head = blockIdx.z % heads;`): no thread index, no
/// x, no block or grid size, no alias of them.
fn block_uniform(t: &str, aliases: &BTreeMap<String, String>) -> bool {
    let reads_yz = t.contains("blockIdx.y") || t.contains("blockIdx.z");
    let no_x = !t.contains("threadIdx")
        && !t.contains("blockIdx.x")
        && !t.contains("blockDim")
        && !t.contains("gridDim");
    reads_yz && no_x && !aliases.keys().any(|a| words_of(t).any(|w| w == a))
}

/// Whether an expression is the same in every thread of a block and changes nothing: no
/// thread index, no `blockIdx.x`, no block or grid size (a rewrite may change them), no
/// alias of those and none of `locals` (names that may differ between threads), no
/// call, assignment or increment (`b >= B` with `int b = blockIdx.y;`, `len[b] == 0`).
pub(super) fn block_uniform_expr(
    src: &str,
    e: Node<'_>,
    aliases: &BTreeMap<String, String>,
    locals: &[&str],
) -> bool {
    let mut ok = true;
    walk(e, &mut |n| {
        let t = text(src, n);
        ok &= match n.kind() {
            "field_expression" => {
                !matches!(
                    n.child_by_field_name("argument").map(|a| text(src, a)),
                    Some("threadIdx" | "blockDim" | "gridDim")
                ) && t != "blockIdx.x"
            }
            "identifier" => !aliases.contains_key(t) && !locals.contains(&t),
            "call_expression" | "assignment_expression" | "update_expression" => false,
            _ => true,
        };
        ok
    });
    ok
}

/// `if (C) return;` with `C` the same in every thread of a block: whole blocks leave
/// together (`if (b >= B) return;` for a batch on `blockIdx.y`).
fn block_exit(src: &str, s: Node<'_>, aliases: &BTreeMap<String, String>) -> bool {
    s.kind() == "if_statement"
        && s.child_by_field_name("alternative").is_none()
        && s.child_by_field_name("consequence")
            .is_some_and(is_plain_return)
        && s.child_by_field_name("condition")
            .is_some_and(|c| block_uniform_expr(src, c, aliases, &[]))
}

/// Whether `n` is `blockIdx.y` or `blockIdx.z`: the same in every thread of a block.
pub(super) fn is_block_yz(src: &str, n: Node<'_>) -> bool {
    n.kind() == "field_expression" && matches!(text(src, n), "blockIdx.y" | "blockIdx.z")
}

fn reads_block_yz(src: &str, root: Node<'_>) -> bool {
    let mut hit = false;
    walk(root, &mut |n| {
        hit |= is_block_yz(src, n);
        !hit
    });
    hit
}

/// Whether `s` is a `for` loop whose variable starts at the 1-D thread index and steps
/// by the grid's width (`i += blockDim.x * gridDim.x`).
fn grid_stride_header(src: &str, s: Node<'_>) -> bool {
    let init = s
        .child_by_field_name("initializer")
        .map_or("", |i| text(src, i));
    let step = s
        .child_by_field_name("update")
        .map_or(String::new(), |u| without_int_casts(text(src, u)));
    let starts = init
        .split_once('=')
        .is_some_and(|(_, v)| is_one_d_index(v.trim_end_matches(';')));
    starts && step.contains("gridDim.x")
}

/// `return;` or `{ return; }`.
pub(super) fn is_plain_return(n: Node<'_>) -> bool {
    let plain = |n: Node| n.kind() == "return_statement" && n.named_child_count() == 0;
    plain(n)
        || (n.kind() == "compound_statement"
            && matches!(named_children(n).as_slice(), [r] if plain(*r)))
}

pub(super) fn match_elementwise<'t>(src: &str, func: Node<'t>) -> Result<Elementwise<'t>, String> {
    let body = func
        .child_by_field_name("body")
        .ok_or("the kernel has no body")?;
    let stmts = named_children(body);
    let mut idx = 0;
    // Helper variables before the index: `int tid = threadIdx.x;`, `int stride = blockDim.x;`.
    let mut aliases: BTreeMap<String, String> = BTreeMap::new();
    let mut batch = false;
    let decl = loop {
        let Some(&s) = stmts.get(idx) else {
            return Err(
                "it has no 1-D thread index `int i = blockIdx.x * blockDim.x + threadIdx.x;`"
                    .into(),
            );
        };
        idx += 1;
        let t = text(src, s);
        if s.kind() == "declaration" {
            if let Some(found) = thread_field_aliases(src, s, &aliases) {
                aliases.extend(found);
                continue;
            }
        }
        let reads_index = t.contains("threadIdx")
            || t.contains("blockIdx")
            || aliases.keys().any(|a| words_of(t).any(|w| w == a));
        match s.kind() {
            "comment" => continue,
            "if_statement" if block_exit(src, s, &aliases) => {
                batch |= reads_block_yz(src, s);
                continue;
            }
            "declaration" if !reads_index => continue,
            "declaration" if block_uniform(t, &aliases) => batch = true,
            "declaration" => break s,
            "for_statement" if grid_stride_header(src, s) => {
                return Err(format!(
                    "`{}` is a grid-stride loop, read as a bounds check only where every case's grid has a thread for each element (`grid = cdiv(n, block)`) and the body neither leaves the loop nor writes its index",
                    first_line(t)
                ))
            }
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
    let expanded = words_replaced(init, &aliases);
    let norm: String = expanded.chars().filter(|c| !c.is_whitespace()).collect();
    if !is_one_d_index(&norm) {
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
                "no bounds check `if ({index} < bound)` follows the index"
            ));
        };
        idx += 1;
        if s.kind() == "comment" {
            between.push(s);
            continue;
        }
        break s;
    };
    let (form, cond, bound) = bounds_check(src, guard, &index)?;
    let (guarded, body_end, end) = guarded_body(src, guard, form, &stmts[idx..])?;
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
        thread_aliases: aliases,
        index,
        index_ty,
        init: init.to_string(),
        decl,
        guard,
        cond_end: cond.end_byte(),
        bound,
        form,
        between,
        batched: batch || reads_block_yz(src, body),
        body: guarded,
        body_end,
        end,
        indent,
        unit,
    })
}

/// The bounds check `guard` of the index `index`: an `if` without `else` whose
/// condition is `index < n` (or `n > index`; `index >= n` or `n <= index` for the
/// early-return form) with a bound that does not depend on the index. Its form, its
/// condition and the bound.
fn bounds_check<'t>(
    src: &str,
    guard: Node<'t>,
    index: &str,
) -> Result<(Guard, Node<'t>, Node<'t>), String> {
    let guard_text = first_line(text(src, guard));
    if guard.kind() != "if_statement" {
        return Err(format!(
            "`{guard_text}` follows the index where the bounds check `if ({index} < bound)` should be"
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
    Ok((form, cond, bound))
}

/// What the guarded body does with the index and the pointer parameters.
#[derive(Default)]
pub(super) struct BodyFacts {
    /// Per pointer parameter accessed as `p[i]`.
    pub buffers: BTreeMap<String, BufferUse>,
    /// `p[i]` of a pointer parameter: (range, p).
    pub subscripts: Vec<(ByteRange, String)>,
    /// Every use of the index.
    pub all_index: Vec<ByteRange>,
    /// A guarded statement is a declaration (per-lane copies need their own scope).
    pub declares: bool,
}

pub(super) struct BufferUse {
    pub pointee: String,
    pub read: bool,
    pub written: bool,
    /// Every write is a plain `p[i] = ...;` statement of the guarded body itself.
    pub writes_unconditional: bool,
}

/// The pointer parameters the guarded body writes through: an assignment or increment
/// of one of their elements, an element's address (`&p[j]`, for an atomic), or the
/// pointer itself passed or offset (`atomicAdd(p + j, v)`).
fn written_buffers(
    src: &str,
    shape: &Elementwise<'_>,
    pointers: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for &root in &shape.body {
        walk(root, &mut |n| {
            let base = match n.kind() {
                "assignment_expression" => n.child_by_field_name("left"),
                "update_expression" => n.child_by_field_name("argument"),
                "pointer_expression" => n.child_by_field_name("argument"),
                "identifier" if pointers.contains_key(text(src, n)) => {
                    let parent = n.parent();
                    let subscripted = parent.is_some_and(|p| {
                        p.kind() == "subscript_expression"
                            && p.child_by_field_name("argument")
                                .is_some_and(|a| a.id() == n.id())
                    });
                    (!subscripted).then_some(n)
                }
                _ => None,
            };
            let mut b = base;
            while let Some(x) = b.filter(|x| x.kind() != "identifier") {
                b = x
                    .child_by_field_name("argument")
                    .or_else(|| x.child_by_field_name("left"));
            }
            if let Some(name) = b
                .map(|x| text(src, x))
                .filter(|x| pointers.contains_key(*x))
            {
                out.insert(name.to_string());
            }
            true
        });
    }
    out
}

/// What ties code to the thread that runs it.
pub(super) enum ThreadBound<'s> {
    /// A barrier or warp collective (`__syncthreads`, `__shfl_xor_sync`, ...).
    Collective(&'s str),
    /// `threadIdx`, `blockIdx`, `blockDim` or `gridDim` (the `.x` read of it).
    Index(&'s str),
}

/// A call or field expression that ties code to its thread, if `n` is one.
pub(super) fn thread_bound<'s>(src: &'s str, n: Node<'_>) -> Option<ThreadBound<'s>> {
    match n.kind() {
        "call_expression" => {
            let f = n
                .child_by_field_name("function")
                .map_or("", |f| text(src, f));
            is_collective(f).then_some(ThreadBound::Collective(f))
        }
        "field_expression" => {
            let a = n
                .child_by_field_name("argument")
                .map_or("", |a| text(src, a));
            matches!(a, "threadIdx" | "blockIdx" | "blockDim" | "gridDim")
                .then_some(ThreadBound::Index(a))
        }
        _ => None,
    }
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
pub(super) fn inspect_body(
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
    // Read-only buffers may be read at another element (`scale[i / cols]`): each
    // element's copy of the body computes its own index. The ids of those reads' names.
    let written = written_buffers(src, shape, pointers);
    let mut gathers: BTreeSet<usize> = BTreeSet::new();
    let inside = |n: Node, kinds: &[&str]| inside_body(n, kinds, &top);
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
                "field_expression" if is_block_yz(src, n) => {}
                "call_expression" | "field_expression" => match thread_bound(src, n) {
                    Some(ThreadBound::Collective(f)) => {
                        err = Some(format!(
                            "the body calls `{f}`; once a thread handles several elements, barriers and warp collectives no longer line up"
                        ));
                    }
                    Some(ThreadBound::Index("threadIdx" | "blockIdx")) => {
                        err = Some(format!(
                            "the body reads `{t}`; once a thread handles several elements it no longer names the element"
                        ));
                    }
                    _ => {}
                },
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
                    let target = written_target(n);
                    if target.is_some_and(|t| t.kind() == "identifier" && text(src, t) == i) {
                        err = Some(format!("the body assigns to `{i}` (`{t}`)"));
                    }
                }
                "subscript_expression" => {
                    let seen = Seen {
                        src,
                        index: i,
                        pointers,
                        written: &written,
                        top: &top,
                        strict,
                    };
                    return match seen.subscript(n, &mut facts, &mut gathers) {
                        Ok(descend) => descend,
                        Err(e) => {
                            err = Some(e);
                            false
                        }
                    };
                }
                "identifier" if t == i => {
                    facts.all_index.push(n.byte_range());
                }
                "identifier"
                    if shape
                        .thread_aliases
                        .get(t)
                        .is_some_and(|f| f != "blockDim.x") =>
                {
                    err = Some(format!(
                        "the body reads `{t}` (`{}`); once a thread handles several elements it no longer names the element",
                        shape.thread_aliases[t]
                    ));
                }
                "identifier"
                    if strict && pointers.contains_key(t) && !gathers.contains(&n.id()) =>
                {
                    let context = text(src, enclosing_statement(n));
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

/// Whether `n` lies in a node of one of `kinds` below the guarded body's statements
/// (`top`, by id): a `break` in a loop or switch of the body stays in the body.
fn inside_body(n: Node<'_>, kinds: &[&str], top: &BTreeSet<usize>) -> bool {
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
}

/// The nearest statement or declaration above `n` (for a message's context).
pub(super) fn enclosing_statement(n: Node<'_>) -> Node<'_> {
    let mut context = n;
    while let Some(p) = context.parent() {
        context = p;
        if p.kind().ends_with("_statement") || p.kind() == "declaration" {
            break;
        }
    }
    context
}

/// What [`inspect_body`] knows while it reads the guarded body: the text, the index,
/// the pointer parameters, those the body writes, the body's own statements (by id), and
/// whether every use of a pointer must be the thread's own element.
struct Seen<'a> {
    src: &'a str,
    index: &'a str,
    pointers: &'a BTreeMap<String, String>,
    written: &'a BTreeSet<String>,
    top: &'a BTreeSet<usize>,
    strict: bool,
}

impl Seen<'_> {
    /// Records the subscript `n` of a pointer parameter in `facts`: the thread's own
    /// element `p[i]` as a read or a write (and whether every write is a plain statement
    /// of the body), another element as a gather (in `gathers`; refused when `strict` and
    /// the body writes `p`). Whether to look inside `n`, or why the body is refused.
    fn subscript(
        &self,
        n: Node<'_>,
        facts: &mut BodyFacts,
        gathers: &mut BTreeSet<usize>,
    ) -> Result<bool, String> {
        let Seen {
            src,
            index: i,
            pointers,
            written,
            top,
            strict,
        } = *self;
        let t = text(src, n);
        let arg = n.child_by_field_name("argument");
        let Some(p) = arg
            .filter(|a| a.kind() == "identifier")
            .map(|a| text(src, a))
            .filter(|p| pointers.contains_key(*p))
        else {
            return Ok(true);
        };
        let own =
            n.child_by_field_name("indices")
                .and_then(|ix| match named_children(ix).as_slice() {
                    [only] if only.kind() == "identifier" && text(src, *only) == i => Some(*only),
                    _ => None,
                });
        let Some(own) = own else {
            if strict && written.contains(p) {
                return Err(format!(
                    "`{t}` is not the thread's own element `{p}[{i}]`, and the body writes `{p}`"
                ));
            }
            gathers.extend(arg.map(|a| a.id()));
            return Ok(true);
        };
        let parent = n.parent();
        if strict
            && parent.is_some_and(|p| {
                p.kind() == "pointer_expression"
                    && p.child_by_field_name("operator")
                        .is_some_and(|o| text(src, o) == "&")
            })
        {
            return Err(format!("`&{t}` takes an element's address"));
        }
        let (mut read, mut written, mut unconditional) = (true, false, true);
        if let Some(p) = parent {
            let is_target = p
                .child_by_field_name("left")
                .is_some_and(|l| l.id() == n.id())
                || p.kind() == "update_expression";
            if is_target && matches!(p.kind(), "assignment_expression" | "update_expression") {
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
        Ok(false)
    }
}

/// The pointer parameters: name -> pointee.
pub(super) fn pointer_params(cx: &RewriteContext<'_>) -> BTreeMap<String, String> {
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
pub(super) fn bound_text(src: &str, bound: Node<'_>) -> String {
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

/// The launch must be 1-D: block (b, 1, 1) and a grid whose y and z are absent or 1,
/// unless the kernel is `batched` (it reads `blockIdx.y`/`.z` as a batch index: see
/// [`Elementwise::batch`]). The grid and the range of its x component.
pub(super) fn one_d_grid(
    cx: &RewriteContext<'_>,
    plan: &BenchPlan,
    id: &str,
    batched: bool,
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
    if !batched
        && parts[1..]
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
