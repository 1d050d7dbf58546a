//! `delinearize`: a 1-D elementwise kernel whose flat index `i` is split into a row and a
//! column by one divisor D (`t = i / D; d = i % D;`, or `d = i - t * D` with `t` the
//! quotient, or `i - (i / D) * D`) becomes a 2-D launch: the column along x
//! (`blockIdx.x * blockDim.x + threadIdx.x`, bounds check `col < D`) and the row along y
//! (`blockIdx.y`), so no thread divides and a row's values are the same for a whole
//! block (what `vectorize_rows` and `stream_loads` then read). Every `i / D` becomes the
//! row, every `i % D` the column, and a plain `p[i]` of a pointer parameter `p[row * D +
//! col]`; the row and column have the index's type, so 64-bit arithmetic stays 64-bit.
//! A guarded declaration of the index's type holding the split (`size_t t = i / D;`,
//! `int col = i - row * cols;`) whose name is declared once and never assigned becomes
//! the coordinate itself (`size_t t = blockIdx.y;`); others read fresh `row`/`col`.
//!
//! The rows T come from the bounds check: `i < T * D` (factors in any order, casts
//! allowed), or `i < n` where every case of the spec makes n a multiple of D (T is then
//! `n / D`). The grid becomes `(cdiv(D, B), T)` for a block B of 128 or 256 threads, at
//! most D (in the timed case) rounded up to 32. A block narrower than 256 threads also
//! takes several rows along `threadIdx.y` (`row = blockIdx.y * blockDim.y + threadIdx.y`,
//! `row < T` in the check, block `(B, 256 / B)`): one row of 64 threads a block pays for
//! four times the block launches (B = 128 gets both forms, narrower B only this one).
//! Where some case has more rows than 65535 blocks along y hold, the row is a loop
//! `for (row = <first>; row < T; row += gridDim.y * blockDim.y)` and the grid's y is
//! capped at 65535. Spec lines other than `grid` and `block` are unchanged. Each launch
//! also comes with `vectorize_rows` applied to it ([`with_vector_rows`]).
//!
//! A kernel refused as written is tried again with its sizes written out
//! ([`size_locals::sizes_written_out`]): locals made of parameters (`int OW = W * R;`)
//! read as their values, and `i / (W * H)` beside `i % W` as `(i / W) / H`, so a 3-D or
//! 4-D split (a pool's, a pixel shuffle's) has one divisor and splits its row further.
//! That retry lives here, not among the dispatcher's normalizations (`rewrite::apply`):
//! this is the rewrite that needs the split by one divisor, and each shared
//! normalization doubles the retries of every rewrite that refuses a kernel.
//!
//! **Refuses** (with the use or statement): a kernel that is not the 1-D elementwise
//! shape, or that already reads `blockIdx.y`/`.z`; a use of `i` other than those
//! (passed to a function, compared, offset); two different divisors that the retry
//! cannot make one; a divisor that is a local of the kernel (it
//! may differ between threads); no split at all; shared memory, barriers and warp
//! collectives (a block's threads would change); a body that reads `blockDim` or
//! `gridDim` (the launch changes); a bound that is not T * D and a plain `n` that some
//! case does not make a multiple of D. D, T and n are read per case from the spec as
//! the launch reads them (parameters, `#define`s, file constants).

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::edits::Edits;
use super::elementwise::{
    enclosing_statement, inspect_body, match_elementwise, pointer_params, without_int_casts,
    Elementwise, INDEX_SHAPE,
};
use super::spec_expr::{split_top, strip_parens, words};
use super::tree::{
    assigned_names, code_names_outside, first_line, fresh, kernel_function, line_indent,
    named_children, newline, reindent, text, walk,
};
use super::{size_locals, with_text, RewriteContext, RewriteError};
use crate::document::Document;
use crate::optimize::edit::spec_assignment;
use crate::spec::{self, EvalEnv, Launch};
use crate::syntax::{self, Lang, ParamKind};

const ID: &str = "delinearize";

/// The most blocks a CUDA grid has along y.
const GRID_Y_MAX: u64 = 65535;

/// `f` on each 2-D launch this rewrite makes of the kernel (its launches alone, not the
/// vectorized ones), in order: the candidates of every launch `f` takes (of the first
/// only where `first`: `f` writes its own launch), labelled "LAUNCH, then CANDIDATE".
/// `Err(Some(why))`: `f` refused them all, the reason one not containing `not_2d`
/// (why a row-a-block launch is not 2-D) where there is one; `Err(None)`: this rewrite
/// refuses the kernel. For rewrites that need a 2-D kernel and meet a flat index.
pub(super) fn then_on_2d_launch(
    cx: &RewriteContext<'_>,
    f: fn(&RewriteContext<'_>) -> R,
    not_2d: &str,
    first: bool,
) -> Result<Vec<Draft>, Option<String>> {
    let k = &cx.kernel.name;
    let none = BTreeMap::new();
    let Some(Ok(launches)) = with_text(Lang::Cuda, cx.text, k, &none, delinearize) else {
        return Err(None);
    };
    let mut drafts = Vec::new();
    let mut refused: Option<String> = None;
    for d in launches.iter().filter(|d| !d.label.contains(", then ")) {
        match with_text(Lang::Cuda, &d.text, k, cx.params, f) {
            Some(Ok(cs)) => {
                drafts.extend(cs.into_iter().map(|c| Draft {
                    label: format!("{}, then {}", d.label, c.label),
                    text: c.text,
                }));
                if first {
                    break;
                }
            }
            Some(Err(e)) if refused.is_none() || !e.to_string().contains(not_2d) => {
                refused = Some(e.to_string())
            }
            _ => {}
        }
    }
    if drafts.is_empty() {
        return Err(refused);
    }
    Ok(drafts)
}

pub fn delinearize(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, ID)?;
    current_plan(cx)?;
    match delinearize_as_written(cx) {
        Err(RewriteError::NotApplicable(why)) => {
            let sizes = size_locals::sizes_written_out(cx);
            let retry = sizes.and_then(|t| {
                with_text(
                    cx.lang,
                    &t,
                    &cx.kernel.name,
                    cx.params,
                    delinearize_as_written,
                )
            });
            match retry {
                Some(Ok(out)) => Ok(out),
                _ => Err(RewriteError::NotApplicable(why)),
            }
        }
        out => out,
    }
}

/// [`delinearize`] on the text as it is.
fn delinearize_as_written(cx: &RewriteContext<'_>) -> R {
    let k = &cx.kernel.name;
    let na = |why: String| not_applicable(format!("`{k}` cannot take a 2-D launch: {why}"));
    let func =
        kernel_function(cx).ok_or_else(|| na("its definition is not in the syntax tree".into()))?;
    let shape = match_elementwise(cx.text, func).map_err(|why| {
        not_applicable(format!(
            "`{k}` is not a 1-D kernel with a bounds check: {why}; delinearize needs {INDEX_SHAPE}"
        ))
    })?;
    if shape.batched {
        return Err(na(
            "it reads `blockIdx.y` or `blockIdx.z`; the rows would need y".into(),
        ));
    }
    if let Some(s) = shared_memory(cx.text, func) {
        return Err(na(format!(
            "`{s}` is shared memory; a 2-D launch changes which threads share a block"
        )));
    }
    let pointers = pointer_params(cx);
    inspect_body(cx.text, &shape, &pointers, false).map_err(na)?;
    if let Some(t) = launch_read(cx.text, &shape) {
        return Err(na(format!(
            "the body reads `{t}`, which the 2-D launch changes"
        )));
    }
    let split = Split::of(cx.text, func, &shape, &pointers).map_err(na)?;
    check_divisor(cx, func, &split).map_err(na)?;
    let rows = Rows::of(cx, &shape, &split).map_err(na)?;
    drafts(cx, &shape, &split, &rows, block_widths(cx, &split))
}

/// The first `__shared__` declaration of the kernel, if any.
fn shared_memory(src: &str, func: Node<'_>) -> Option<String> {
    let mut found = None;
    walk(func, &mut |n| {
        if found.is_none() && n.kind() == "declaration" && text(src, n).contains("__shared__") {
            found = Some(first_line(text(src, n)).to_string());
        }
        found.is_none()
    });
    found
}

/// The first `blockDim` or `gridDim` field the guarded body reads, if any.
fn launch_read(src: &str, shape: &Elementwise<'_>) -> Option<String> {
    let mut found = None;
    for &root in &shape.body {
        walk(root, &mut |n| {
            let arg = n.child_by_field_name("argument").map(|a| text(src, a));
            if n.kind() == "field_expression" && matches!(arg, Some("blockDim" | "gridDim")) {
                found.get_or_insert_with(|| text(src, n).to_string());
            }
            found.is_none()
        });
    }
    found
}

/// `s` without whitespace, integer casts and outer parentheses.
fn norm(s: &str) -> String {
    strip_parens(&without_int_casts(s)).to_string()
}

/// One use of the flat index in the guarded body.
#[derive(Clone, PartialEq, Debug)]
enum Use {
    /// `i / D`: the row.
    Quot,
    /// `i % D` or `i - (i / D) * D`: the column.
    Rem,
    /// `p[i]`: the element at the row and column of `p`.
    Flat(String),
}

/// How the guarded body splits the flat index: its uses (range, kind) and the divisor
/// as written at its first split and normalized.
struct Split {
    uses: Vec<(std::ops::Range<usize>, Use)>,
    divisor: String,
    divisor_norm: String,
}

impl Split {
    fn of(
        src: &str,
        func: Node<'_>,
        shape: &Elementwise<'_>,
        pointers: &BTreeMap<String, String>,
    ) -> Result<Split, String> {
        let i = shape.index.as_str();
        let quotients = quotient_locals(src, func, shape);
        let mut split = Split {
            uses: Vec::new(),
            divisor: String::new(),
            divisor_norm: String::new(),
        };
        let mut err: Option<String> = None;
        for &root in &shape.body {
            walk(root, &mut |n| {
                if err.is_some() {
                    return false;
                }
                match split.classify(src, n, i, pointers, &quotients) {
                    Ok(Some(u)) => {
                        split.uses.push((n.byte_range(), u));
                        false
                    }
                    Ok(None) if n.kind() == "identifier" && text(src, n) == i => {
                        err = Some(format!(
                            "`{}` uses `{i}` other than as `{i} / D`, `{i} % D` or `p[{i}]`",
                            first_line(text(src, enclosing_statement(n)))
                        ));
                        false
                    }
                    Ok(None) => true,
                    Err(e) => {
                        err = Some(e);
                        false
                    }
                }
            });
        }
        if let Some(e) = err {
            return Err(e);
        }
        if split.uses.iter().all(|(_, u)| matches!(u, Use::Flat(_))) {
            return Err(format!("the body never splits `{i}` by `/` or `%`"));
        }
        Ok(split)
    }

    /// What `n` is: a split of the index or the thread's own element, None for anything
    /// else; an error for a second divisor.
    fn classify(
        &mut self,
        src: &str,
        n: Node<'_>,
        i: &str,
        pointers: &BTreeMap<String, String>,
        quotients: &BTreeMap<String, String>,
    ) -> Result<Option<Use>, String> {
        match n.kind() {
            "binary_expression" => {
                let (Some(l), Some(op), Some(r)) = (
                    n.child_by_field_name("left"),
                    n.child_by_field_name("operator"),
                    n.child_by_field_name("right"),
                ) else {
                    return Ok(None);
                };
                if norm(text(src, l)) != i {
                    return Ok(None);
                }
                match text(src, op) {
                    "/" => self.divisor(src, r).map(|()| Some(Use::Quot)),
                    "%" => self.divisor(src, r).map(|()| Some(Use::Rem)),
                    "-" => Ok(self
                        .is_row_times_d(src, r, i, quotients)
                        .then_some(Use::Rem)),
                    _ => Ok(None),
                }
            }
            "subscript_expression" => {
                let p = n
                    .child_by_field_name("argument")
                    .map(|a| text(src, a))
                    .filter(|a| pointers.contains_key(*a));
                let own = n.child_by_field_name("indices").is_some_and(
                    |ix| matches!(named_children(ix).as_slice(), [o] if norm(text(src, *o)) == i),
                );
                Ok(p.filter(|_| own).map(|p| Use::Flat(p.to_string())))
            }
            _ => Ok(None),
        }
    }

    /// Records the divisor `r`; an error when an earlier split used another.
    fn divisor(&mut self, src: &str, r: Node<'_>) -> Result<(), String> {
        let d = norm(text(src, r));
        if self.divisor_norm.is_empty() {
            self.divisor = text(src, r).to_string();
            self.divisor_norm = d;
            return Ok(());
        }
        if self.divisor_norm != d {
            return Err(format!(
                "the index is split by both `{}` and `{}`; only one divisor is handled",
                self.divisor,
                text(src, r)
            ));
        }
        Ok(())
    }

    /// Whether `r` is `q * D` (either order) with `q` the quotient `(i / D)` or a local
    /// holding it, D the divisor of the split (recorded here if it is the first).
    fn is_row_times_d(
        &mut self,
        src: &str,
        r: Node<'_>,
        i: &str,
        quotients: &BTreeMap<String, String>,
    ) -> bool {
        let t = norm(text(src, r));
        let parts = split_top(&t, b'*');
        let [a, b] = parts.as_slice() else {
            return false;
        };
        let (a, b) = (strip_parens(&t[a.clone()]), strip_parens(&t[b.clone()]));
        let quot_by = |q: &str| -> Option<String> {
            let q = quotients.get(q).map_or(q, String::as_str);
            q.strip_prefix(&format!("{i}/"))
                .map(|d| strip_parens(d).to_string())
        };
        let d = match (quot_by(a), quot_by(b)) {
            (Some(d), _) if d == b => d,
            (_, Some(d)) if d == a => d,
            _ => return false,
        };
        if self.divisor_norm.is_empty() {
            self.divisor = d.clone();
            self.divisor_norm = d.clone();
        }
        self.divisor_norm == d
    }
}

/// Locals declared in the guarded body as `i / D` and never assigned again: name ->
/// their normalized value.
fn quotient_locals(src: &str, func: Node<'_>, shape: &Elementwise<'_>) -> BTreeMap<String, String> {
    let prefix = format!("{}/", shape.index);
    let mut out = BTreeMap::new();
    for s in shape.body.iter().filter(|s| s.kind() == "declaration") {
        let mut c = s.walk();
        for d in s.children_by_field_name("declarator", &mut c) {
            let (Some(name), Some(v)) = (
                d.child_by_field_name("declarator")
                    .filter(|n| n.kind() == "identifier"),
                d.child_by_field_name("value"),
            ) else {
                continue;
            };
            let v = norm(text(src, v));
            if v.starts_with(&prefix) {
                out.insert(text(src, name).to_string(), v);
            }
        }
    }
    let assigned = assigned_names(src, &[func]);
    out.retain(|name, _| !assigned.contains(name));
    out
}

/// The divisor must be the same in every thread: literals, scalar parameters never
/// assigned, and file-level names (`#define D 64`), no local of the kernel.
fn check_divisor(cx: &RewriteContext<'_>, func: Node<'_>, split: &Split) -> Result<(), String> {
    let src = cx.text;
    let mut locals = BTreeSet::new();
    walk(func, &mut |n| {
        if matches!(n.kind(), "init_declarator" | "declaration") {
            let d = n.child_by_field_name("declarator");
            locals.extend(
                d.filter(|d| d.kind() == "identifier")
                    .map(|d| text(src, d).to_string()),
            );
        }
        true
    });
    let assigned = assigned_names(src, &[func]);
    let pointer = |w: &str| {
        cx.kernel
            .params
            .iter()
            .any(|p| p.name == w && matches!(p.kind, ParamKind::Pointer { .. }))
    };
    let d = &split.divisor_norm;
    if d.contains('[') || d.contains('(') {
        return Err(format!(
            "the divisor `{}` is not a size (a call or a load)",
            split.divisor
        ));
    }
    for w in words(d) {
        if w.chars().next().is_some_and(|c| c.is_ascii_digit()) {
            continue;
        }
        if locals.contains(w) || assigned.contains(w) || pointer(w) {
            return Err(format!(
                "the divisor `{}` reads `{w}`, which may differ between threads",
                split.divisor
            ));
        }
    }
    Ok(())
}

/// The rows T: as the spec writes them and as the kernel reads them.
struct Rows {
    spec: String,
    code: String,
}

impl Rows {
    /// From the bound `T * D` (any order of the factors), or `n` where every case makes
    /// `n` a multiple of D (T = `n / D`).
    fn of(cx: &RewriteContext<'_>, shape: &Elementwise<'_>, split: &Split) -> Result<Rows, String> {
        let bound = norm(text(cx.text, shape.bound));
        let d = &split.divisor_norm;
        let factors: Vec<&str> = split_top(&bound, b'*')
            .into_iter()
            .map(|r| strip_parens(&bound[r]))
            .collect();
        if let Some(at) = factors.iter().position(|f| *f == d.as_str()) {
            let rest: Vec<&str> = [&factors[..at], &factors[at + 1..]].concat();
            if rest.is_empty() {
                return Err(format!("the bound `{bound}` is D itself: there is one row"));
            }
            let t = rest.join(" * ");
            return Ok(Rows {
                spec: t.clone(),
                code: t,
            });
        }
        // D a product whose factors the bound holds, with more (`N * C * H * R * W * R`
        // over `W * R`): the rows are the rest.
        let flat = size_locals::factors(&bound);
        if let Some(rest) = size_locals::without(&flat, &size_locals::factors(d)) {
            let t = rest.join(" * ");
            return Ok(Rows {
                spec: t.clone(),
                code: t,
            });
        }
        let paren = |s: &str| {
            if s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                s.to_string()
            } else {
                format!("({s})")
            }
        };
        let (ns, ds) = (per_case(cx, &bound), per_case(cx, d));
        let (Some(ns), Some(ds)) = (ns, ds) else {
            return Err(format!(
                "the bound `{bound}` is not `rows * {d}`, and the spec does not give both in every case"
            ));
        };
        if let Some((n, dv)) = ns
            .iter()
            .zip(&ds)
            .find(|(n, dv)| **dv == 0 || *n % *dv != 0)
        {
            return Err(format!(
                "the bound `{bound}` is not `rows * {d}`: a case has {bound} = {n}, {d} = {dv}"
            ));
        }
        let t = format!("{} / {}", paren(&bound), paren(d));
        Ok(Rows {
            spec: t.clone(),
            code: t,
        })
    }
}

/// The block widths to try: 128 and 256, at most D (in the timed case) rounded up to a
/// warp: a narrower case only verifies, with some threads idle.
fn block_widths(cx: &RewriteContext<'_>, split: &Split) -> Vec<u64> {
    let timed = per_case(cx, &split.divisor_norm).and_then(|v| v.first().copied());
    let cap = timed.map_or(u64::MAX, |d| d.div_ceil(32).max(1) * 32);
    let mut out: Vec<u64> = [128, 256].iter().map(|&b: &u64| b.min(cap)).collect();
    out.dedup();
    out
}

/// Names and forms of one candidate.
struct Layout<'a> {
    row: &'a str,
    col: &'a str,
    /// Guarded declarations of the row or the column that the new coordinates replace.
    cut: Vec<std::ops::Range<usize>>,
    /// Rows stride over the grid's y (some case has more rows than a grid's y holds).
    strided: bool,
    /// Rows a block takes along `threadIdx.y`.
    per_block: u64,
}

/// One candidate per block width: rows on `blockIdx.y`, or strided over a capped grid y
/// where some case has more than [`GRID_Y_MAX`] rows.
fn drafts(
    cx: &RewriteContext<'_>,
    shape: &Elementwise<'_>,
    split: &Split,
    rows: &Rows,
    widths: Vec<u64>,
) -> R {
    // Names of the kernel and of the file's macros (other kernels' locals are free).
    let def = cx.kernel.def_range.clone();
    let mut taken = code_names_outside(cx, &|n| {
        n.kind() != "translation_unit"
            && !n.kind().starts_with("preproc")
            && (n.end_byte() <= def.start || n.start_byte() >= def.end)
    });
    let func = kernel_function(cx).ok_or_else(|| not_applicable("no kernel definition"))?;
    let reuse = |u: Use, base: &str, taken: &mut BTreeSet<String>| {
        reusable(cx, func, shape, split, &u)
            .map_or_else(|| (fresh(base, taken), None), |(n, c)| (n, Some(c)))
    };
    let (row, row_cut) = reuse(Use::Quot, "row", &mut taken);
    let (col, col_cut) = reuse(Use::Rem, "col", &mut taken);
    let grid = spec_assignment(cx.kernel, "grid");
    let block = spec_assignment(cx.kernel, "block");
    let (Some(grid), Some(block)) = (grid, block) else {
        return Err(not_applicable(format!(
            "`{}`'s spec has no `grid = ...` or no `block = ...`",
            cx.kernel.name
        )));
    };
    let most = per_case(cx, &rows.spec).and_then(|v| v.into_iter().max());
    let cut: Vec<_> = row_cut.into_iter().chain(col_cut).collect();
    let launch = |bx: u64, by: u64| -> Result<Draft, String> {
        // More rows than a grid's y holds in some case: the rows stride over a capped y.
        let strided = most.is_some_and(|m| m.div_ceil(by) > GRID_Y_MAX);
        let lay = Layout {
            row: &row,
            col: &col,
            cut: cut.clone(),
            strided,
            per_block: by,
        };
        let code = emit(cx.text, shape, split, rows, &lay)?;
        let ys = match by {
            1 => rows.spec.clone(),
            _ => format!("cdiv({}, {by})", rows.spec),
        };
        let (y, how) = match (strided, by) {
            (true, _) => (
                format!("min({ys}, {GRID_Y_MAX})"),
                format!("rows strided over grid y <= {GRID_Y_MAX}"),
            ),
            (false, 1) => (ys, "a row per blockIdx.y".to_string()),
            (false, _) => (ys, format!("{by} rows per block")),
        };
        let shape_txt = match by {
            1 => bx.to_string(),
            _ => format!("({bx}, {by})"),
        };
        let edits = Edits::from_pairs([
            (shape.decl.start_byte()..shape.end, code),
            (
                grid.range.clone(),
                format!("(cdiv({}, {bx}), {y})", split.divisor_norm),
            ),
            (block.range.clone(), shape_txt.clone()),
        ]);
        let text = edits.apply(cx.text).map_err(|e| e.to_string())?;
        let label = format!("2-D launch, block {shape_txt}, {how}");
        Ok(Draft { label, text })
    };
    let (mut drafts, mut dropped) = (Vec::new(), Vec::new());
    for (bx, by) in block_shapes(&widths) {
        match launch(bx, by) {
            Ok(d) => drafts.push(d),
            Err(e) => dropped.push(e),
        }
    }
    let mut vectorized: Vec<Draft> = drafts
        .iter()
        .flat_map(|d| with_vector_rows(cx, d))
        .collect();
    // A vector width the blocks are too wide for (`VEC=4` in blocks of 128 over rows
    // of 256 leaves half the threads idle): also from a block narrow enough.
    let timed = per_case(cx, &split.divisor_norm).and_then(|v| v.first().copied());
    for (v, bx) in narrower_blocks(timed, &widths) {
        let tag = format!("then VEC={v} ");
        if let Ok(d) = launch(bx, rows_per_block(bx)) {
            vectorized.extend(
                with_vector_rows(cx, &d)
                    .into_iter()
                    .filter(|c| c.label.contains(&tag)),
            );
        }
    }
    drafts.extend(vectorized);
    finish(cx, drafts, dropped)
}

/// Threads a block should have: a block of fewer is paid for in block launches (one
/// row of 64 threads a block moved 83% of what 4 rows a block moved, a pixel shuffle
/// on an H200), and a multiprocessor holds at most 32 blocks.
const BLOCK_THREADS: u64 = 256;

/// Rows a block of `bx` threads along the row takes: enough for [`BLOCK_THREADS`]. Pure.
fn rows_per_block(bx: u64) -> u64 {
    (BLOCK_THREADS / bx.max(1)).max(1)
}

/// The launches to try for the widths: a row per block where the width makes a full
/// block, and rows per block where it does not (both for a width of 128, the width
/// under which one row a block begins to cost). Pure.
fn block_shapes(widths: &[u64]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &bx in widths {
        let by = rows_per_block(bx);
        if bx >= 128 || by == 1 {
            out.push((bx, 1));
        }
        if by > 1 {
            out.push((bx, by));
        }
    }
    out
}

/// For each vector width V (4 and 2): the block of D / V threads (case 0's D, rounded
/// up to a warp) where every width tried is wider than that. Pure.
fn narrower_blocks(timed: Option<u64>, widths: &[u64]) -> Vec<(u64, u64)> {
    let (Some(d), Some(&least)) = (timed, widths.iter().min()) else {
        return Vec::new();
    };
    [4u64, 2]
        .into_iter()
        .map(|v| (v, (d / v).div_ceil(32).max(1) * 32))
        .filter(|(_, bx)| *bx < least)
        .collect()
}

/// The 2-D launch `d` with `vectorize_rows` applied to it: the launch alone moves no more
/// bytes per access, and can time a little slower than the flat draft, so the search
/// would not keep it as a version to vectorize next; offered together, the step that
/// makes the columns a lane's own index is measured with what it is for.
fn with_vector_rows(cx: &RewriteContext<'_>, d: &Draft) -> Vec<Draft> {
    let none = std::collections::BTreeMap::new();
    let out = super::with_text(Lang::Cuda, &d.text, &cx.kernel.name, &none, |c| {
        super::vectorize_rows::vectorize_rows(c).ok()
    });
    out.flatten()
        .into_iter()
        .flatten()
        .map(|c| Draft {
            label: format!("{}, then {}", d.label, c.label),
            text: c.text,
        })
        .collect()
}

/// A guarded declaration `TY name = <the split>;` (`size_t t = i / D;`) whose name can
/// be the row (`Quot`) or the column (`Rem`) itself: one declarator of the index's type,
/// a name the kernel declares once and never assigns, followed by another guarded item.
/// The name and the range to drop (the statement up to the next item).
fn reusable(
    cx: &RewriteContext<'_>,
    func: Node<'_>,
    shape: &Elementwise<'_>,
    split: &Split,
    kind: &Use,
) -> Option<(String, std::ops::Range<usize>)> {
    let src = cx.text;
    let assigned = assigned_names(src, &[func]);
    shape.body.windows(2).find_map(|w| {
        let (s, next) = (w[0], w[1]);
        let ty = s.child_by_field_name("type").map(|t| text(src, t));
        if s.kind() != "declaration" || ty != Some(shape.index_ty.as_str()) {
            return None;
        }
        let [d] = named_children(s)
            .into_iter()
            .filter(|c| c.kind() == "init_declarator")
            .collect::<Vec<_>>()[..]
        else {
            return None;
        };
        let name = text(src, d.child_by_field_name("declarator")?);
        let value = d.child_by_field_name("value")?.byte_range();
        let split_here = split.uses.iter().any(|(r, u)| *r == value && u == kind);
        let once = declarations_of(src, func, name) == 1
            && !cx.kernel.params.iter().any(|p| p.name == name);
        (split_here && once && !assigned.contains(name))
            .then(|| (name.to_string(), s.start_byte()..next.start_byte()))
    })
}

/// How many declarators of the kernel declare `name`.
fn declarations_of(src: &str, func: Node<'_>, name: &str) -> usize {
    let mut count = 0;
    walk(func, &mut |n| {
        let d = n.child_by_field_name("declarator");
        if matches!(
            n.kind(),
            "init_declarator" | "declaration" | "parameter_declaration"
        ) && d.is_some_and(|d| d.kind() == "identifier" && text(src, d) == name)
        {
            count += 1;
        }
        true
    });
    count
}

/// The value of the spec expression `expr` in each case: the spec planned with it as
/// the grid's x (whose limit is 2^31 - 1), so sizes, `#define`s and file constants read
/// as the launch reads them; None if that does not plan.
fn per_case(cx: &RewriteContext<'_>, expr: &str) -> Option<Vec<u64>> {
    let grid = spec_assignment(cx.kernel, "grid")?;
    let text = Edits::from_pairs([(grid.range, format!("({expr}, 1)"))])
        .apply(cx.text)
        .ok()?;
    let doc = Document::new(Lang::Cuda, 0, &text);
    let model = syntax::analyze(Lang::Cuda, &text, doc.tree()?);
    let k = model.kernel(&cx.kernel.name)?;
    let plan = spec::analyze(k, &model.kernels, &EvalEnv::default()).plan?;
    plan.cases
        .iter()
        .map(|c| match c.launch {
            Launch::Cuda { grid, .. } => Some(grid[0]),
            Launch::Triton { .. } => None,
        })
        .collect()
}

/// The code from the index declaration to the end of the guarded body, on two
/// coordinates.
fn emit(
    src: &str,
    shape: &Elementwise<'_>,
    split: &Split,
    rows: &Rows,
    lay: &Layout<'_>,
) -> Result<String, String> {
    let nl = newline(src);
    let (row, col) = (lay.row, lay.col);
    let ty = &shape.index_ty;
    let d = &split.divisor;
    let dp = if d.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        d.clone()
    } else {
        format!("({d})")
    };
    let kept = split
        .uses
        .iter()
        .filter(|(r, _)| !lay.cut.iter().any(|c| c.start <= r.start && r.end <= c.end));
    let pairs = kept.map(|(r, u)| {
        let new = match u {
            Use::Quot => row.to_string(),
            Use::Rem => col.to_string(),
            Use::Flat(p) => format!("{p}[{row} * {dp} + {col}]"),
        };
        (r.clone(), new)
    });
    let pairs = pairs.chain(lay.cut.iter().map(|c| (c.clone(), String::new())));
    let span = shape.body_span();
    let body = Edits::from_pairs(pairs)
        .apply_within(src, span.clone())
        .map_err(|e| e.to_string())?;
    let ind = &shape.indent;
    let unit = &shape.unit;
    let in1 = format!("{ind}{unit}");
    let mut o = String::new();
    for c in &shape.between {
        o.push_str(&format!("{}{nl}{ind}", text(src, *c)));
    }
    o.push_str(&format!("{ty} {col} = {};{nl}", shape.init));
    let (first, step, bound) = match lay.per_block {
        1 => ("blockIdx.y".to_string(), "gridDim.y", String::new()),
        _ => (
            "blockIdx.y * blockDim.y + threadIdx.y".to_string(),
            "gridDim.y * blockDim.y",
            format!(" && {row} < {}", rows.code),
        ),
    };
    if lay.strided {
        let in2 = format!("{in1}{unit}");
        let body = reindent(&body, line_indent(src, span.start), &in2);
        o.push_str(&format!("{ind}if ({col} < {d}) {{{nl}"));
        o.push_str(&format!(
            "{in1}for ({ty} {row} = {first}; {row} < {}; {row} += {step}) {{{nl}",
            rows.code
        ));
        o.push_str(&format!("{in2}{body}{nl}{in1}}}{nl}{ind}}}"));
    } else {
        let body = reindent(&body, line_indent(src, span.start), &in1);
        o.push_str(&format!("{ind}{ty} {row} = {first};{nl}"));
        o.push_str(&format!(
            "{ind}if ({col} < {d}{bound}) {{{nl}{in1}{body}{nl}{ind}}}"
        ));
    }
    Ok(o)
}

#[cfg(test)]
mod tests;
