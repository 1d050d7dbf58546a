//! The embedded coder: deterministic rewrites of one kernel, each a pure function from
//! the file text (and its tree-sitter tree) to candidate file texts. A rewrite edits only
//! the kernel unit (the kernel and the device helpers it calls) and, where the launch
//! changes, the kernel's `@bench` lines; everything else, formatting and comments of
//! untouched code included, stays byte for byte. A sweep returns several candidates;
//! the step loop verifies and times them as a batch and keeps the best. No I/O here: a
//! candidate is only text until the worker has compiled, verified and timed it.
//!
//! The rewrite ids are what `prompts/strategies.toml` names in `rewrite = "..."`.
//!
//! Layout: one rewrite per file, named by its id (`block_size.rs`, `vectorize.rs`, ...),
//! each with its doc paragraph (what it matches, what it refuses, what launch it writes)
//! and its fixture tests. What they share: `edits.rs` (the one edit builder and splice
//! applier, which refuses overlapping edits), `params.rs` (the one parameter parser),
//! `check.rs` (drafts to candidates: still parses, still plans), `unit.rs` (the kernel
//! unit's nodes and the check of code-only rewrites), `tree.rs` (tree-sitter helpers),
//! `spec_expr.rs` (grid and block expression text), `bound_blocks.rs` (the
//! `__launch_bounds__` every large-block CUDA candidate gets), `elementwise.rs` (the 1-D
//! one-element-per-thread shape) and `lane_split.rs` (index splits the lanes of a
//! vector share).

mod access;
mod author_quotes;
mod block_coarsen;
mod block_dim;
mod block_reduce;
mod block_size;
mod bound_blocks;
mod check;
mod chunk_loops;
mod coarsen;
mod cooperative_rows;
mod delinearize;
mod edits;
mod elementwise;
mod fast_math;
mod grid2d;
mod grid_covers;
mod grid_stride;
mod grid_total;
mod guard_first;
mod inline_calls;
mod interleave;
mod lane_split;
mod launch_bounds;
mod maxnreg;
mod module_constants;
mod params;
mod plain_loads;
mod poly;
mod privatize_atomics;
mod register_sums;
mod remap_lanes;
mod restrict_const;
mod size_locals;
mod spec_expr;
mod split_loop;
mod stage_rows;
mod stream_loads;
mod tile_matmul;
mod transpose_tile;
mod tree;
mod triton_autotune;
mod triton_block;
mod triton_configs;
mod triton_hoist_reduce;
mod triton_launch;
mod triton_loops;
mod triton_online;
mod triton_persistent_dot;
mod triton_program_tile;
mod triton_row_tile;
mod triton_split_loop;
mod triton_swizzle;
mod tunable_sweep;
mod uniform_exit;
mod unit;
mod unroll;
mod vector_loops;
mod vectorize;
mod vectorize_groups;
mod vectorize_rows;
mod width_names;

use std::collections::BTreeMap;

use crate::syntax::{FileModel, Kernel, Lang};

/// Everything a rewrite may look at. `params` are the catalog step's parameters.
pub struct RewriteContext<'a> {
    pub lang: Lang,
    /// The whole file.
    pub text: &'a str,
    pub tree: &'a tree_sitter::Tree,
    pub model: &'a FileModel,
    pub kernel: &'a Kernel,
    pub params: &'a BTreeMap<String, serde_json::Value>,
}

/// One candidate: the whole new file text, and a short label for tables ("BLOCK=512",
/// "block=(32, 8)", "__restrict__ on a, b, c").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub label: String,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewriteError {
    /// The kernel has nothing this rewrite can change; the message says why, for the
    /// author ("every pointer parameter is already `__restrict__`").
    #[error("{0}")]
    NotApplicable(String),
    #[error("unknown embedded rewrite `{0}`; known: {known}", known = ids().collect::<Vec<_>>().join(", "))]
    Unknown(String),
    /// A catalog parameter has the wrong type or value.
    #[error("parameter `{name}`: {message}")]
    BadParam { name: String, message: String },
}

/// A rewrite: candidates for one kernel, or why none.
pub type Apply = fn(&RewriteContext<'_>) -> Result<Vec<Candidate>, RewriteError>;

/// The registry: every embedded rewrite, by the id `prompts/strategies.toml` names in
/// `rewrite = "..."`. Adding a rewrite is its own file (whose `//!` paragraph starts with
/// its id in backticks) and one line here; `registry_matches_the_files` checks both.
pub const REGISTRY: &[(&str, Apply)] = &[
    ("tunable_sweep", tunable_sweep::tunable_sweep),
    ("block_size", block_size::block_size),
    ("restrict_const", restrict_const::restrict_const),
    ("launch_bounds", launch_bounds::launch_bounds),
    ("unroll", unroll::unroll),
    ("vectorize", vectorize::vectorize),
    ("grid_stride", grid_stride::grid_stride),
    ("fast_math", fast_math::fast_math),
    ("maxnreg", maxnreg::maxnreg),
    ("triton_block", triton_block::block),
    ("triton_num_warps", triton_launch::num_warps),
    ("triton_num_stages", triton_launch::num_stages),
    ("cooperative_rows", cooperative_rows::cooperative_rows),
    ("privatize_atomics", privatize_atomics::privatize_atomics),
    ("transpose_tile", transpose_tile::transpose_tile),
    ("tile_matmul", tile_matmul::tile_matmul),
    ("triton_swizzle", triton_swizzle::triton_swizzle),
    ("triton_configs", triton_configs::triton_configs),
    (
        "triton_persistent_dot",
        triton_persistent_dot::triton_persistent_dot,
    ),
    ("coarsen", coarsen::coarsen),
    ("block_reduce", block_reduce::block_reduce),
    ("remap_lanes", remap_lanes::remap_lanes),
    ("block_coarsen", block_coarsen::block_coarsen),
    ("triton_autotune", triton_autotune::triton_autotune),
    ("split_loop", split_loop::split_loop),
    ("triton_online", triton_online::triton_online),
    ("triton_row_tile", triton_row_tile::triton_row_tile),
    ("triton_split_loop", triton_split_loop::triton_split_loop),
    (
        "triton_hoist_reduce",
        triton_hoist_reduce::triton_hoist_reduce,
    ),
    (
        "triton_program_tile",
        triton_program_tile::triton_program_tile,
    ),
    ("interleave", interleave::interleave),
    ("vectorize_rows", vectorize_rows::vectorize_rows),
    ("vectorize_groups", vectorize_groups::vectorize_groups),
    ("stream_loads", stream_loads::stream_loads),
    ("stage_rows", stage_rows::stage_rows),
    ("grid_total", grid_total::grid_total),
    ("vector_loops", vector_loops::vector_loops),
    ("delinearize", delinearize::delinearize),
];

/// Every embedded rewrite id, in registry order.
pub fn ids() -> impl Iterator<Item = &'static str> {
    REGISTRY.iter().map(|(id, _)| *id)
}

/// Run one embedded rewrite. `Ok` always holds at least one candidate whose text differs
/// from `cx.text`; a CUDA candidate launching blocks of more than 256 threads carries a
/// `__launch_bounds__` that covers them ([`bound_blocks`]).
pub fn apply(id: &str, cx: &RewriteContext<'_>) -> Result<Vec<Candidate>, RewriteError> {
    let Some((_, run)) = REGISTRY.iter().find(|(known, _)| *known == id) else {
        return Err(RewriteError::Unknown(id.to_string()));
    };
    let direct = run_or_retry(cx, *run, id);
    let out = match (direct, with_calls_inlined(cx, *run, id)) {
        (Ok(mut d), Some(more)) => {
            d.extend(more);
            d
        }
        (Err(RewriteError::NotApplicable(_)), Some(more)) => more,
        (direct, _) => direct?,
    };
    let names = width_names::width_names(cx);
    let mut seen = std::collections::BTreeSet::new();
    let out: Vec<Candidate> = out
        .into_iter()
        .filter(|c| c.text != cx.text && seen.insert(c.text.clone()))
        .filter_map(|c| {
            let text = width_names::follow_block(cx, &names, &c.text)?;
            Some(Candidate {
                text: bound_blocks::bound_blocks(cx.lang, &text, &cx.kernel.name, cx.params),
                label: c.label,
            })
        })
        .collect();
    if out.is_empty() {
        return Err(RewriteError::NotApplicable(format!(
            "`{id}` would not change `{}`",
            cx.kernel.name
        )));
    }
    Ok(out)
}

/// `run` on the kernel, or on a normalized form of it where it refuses the kernel as
/// written ([`retry_normalized`]).
fn run_or_retry(
    cx: &RewriteContext<'_>,
    run: Apply,
    id: &str,
) -> Result<Vec<Candidate>, RewriteError> {
    match run(cx) {
        Err(RewriteError::NotApplicable(why)) => retry_normalized(cx, run, id)
            .ok_or_else(|| RewriteError::NotApplicable(width_reason(cx, run, &why).unwrap_or(why))),
        out => out,
    }
}

/// Rewrites that read the kernel's own loops: also run where the kernel's calls of
/// helpers holding statements are written out ([`inline_calls`]).
const READ_LOOPS: &[&str] = &[
    "split_loop",
    "cooperative_rows",
    "vector_loops",
    "interleave",
    "grid_total",
];

/// The candidates of `run` on the kernel with its helper calls written out; None when it
/// calls none, `run` does not read loops, or refuses that text too.
fn with_calls_inlined(cx: &RewriteContext<'_>, run: Apply, id: &str) -> Option<Vec<Candidate>> {
    if cx.lang != Lang::Cuda || !READ_LOOPS.contains(&id) {
        return None;
    }
    let text = inline_calls::inlined_calls(cx)?;
    let out = with_text(cx.lang, &text, &cx.kernel.name, cx.params, |c| {
        run_or_retry(c, run, id).ok()
    })??;
    let named = |c: Candidate| Candidate {
        label: format!("{}, helper calls written out", c.label),
        ..c
    };
    Some(out.into_iter().map(named).collect())
}

/// The names that mean `blockDim.x` in a CUDA kernel (`#define BLOCK 256` with `block =
/// BLOCK`, see [`width_names`]), for the static facts to read as the rewrites do.
pub fn block_width_names(
    text: &str,
    tree: &tree_sitter::Tree,
    model: &FileModel,
    kernel: &Kernel,
) -> Vec<String> {
    let cx = RewriteContext {
        lang: Lang::Cuda,
        text,
        tree,
        model,
        kernel,
        params: &BTreeMap::new(),
    };
    width_names::width_names(&cx)
        .into_iter()
        .filter(|w| w.axis == 0)
        .map(|w| w.name)
        .collect()
}

/// Why `run` refuses the kernel with its block width's names read as `blockDim`
/// ([`width_names`]): the author wrote `BLOCK` for `blockDim.x`, so a refusal of the
/// index as written would name the wrong cause. Its quotes of the kernel are the
/// author's text ([`author_quotes`]: `BLOCK / 2`, not `blockDim.x / 2`), save those
/// that `first`, the refusal of the author's text, has too. None when the kernel has no
/// such name.
fn width_reason(cx: &RewriteContext<'_>, run: Apply, first: &str) -> Option<String> {
    if width_names::width_names(cx).is_empty() {
        return None;
    }
    let (text, edits) = block_dim::block_dim_form(cx)?;
    let (out, kernel) = with_text(cx.lang, &text, &cx.kernel.name, cx.params, |c| {
        (run(c), tree::kernel_function(c).map(|f| f.byte_range()))
    })?;
    let Err(RewriteError::NotApplicable(why)) = out else {
        return None;
    };
    let Some(kernel) = kernel else {
        return Some(why);
    };
    let normalized = author_quotes::Normalized {
        author: cx.text,
        normalized: &text,
        kernel,
        edits: &edits,
    };
    Some(author_quotes::in_author_words(&why, first, &normalized))
}

/// Rewrites whose subject is the loads' cache hints: never retried on a text whose hints
/// were dropped.
const ABOUT_HINTS: &[&str] = &["stream_loads"];

/// A rewrite of the kernel's text into a form more rewrites read, computing the same
/// values.
#[derive(Clone, Copy, PartialEq)]
enum Normalize {
    /// Load intrinsics written as plain loads ([`plain_loads`]).
    Plain,
    /// Indices that count blocks of a constant equal to the block width written with
    /// `blockDim` ([`block_dim`]).
    BlockDim,
    /// A grid-stride loop over a grid that covers its bound written as a bounds check
    /// ([`grid_covers`]).
    Cover,
    /// The declarations between the thread index and its bounds check moved out of the
    /// way ([`guard_first`]).
    Moved,
    /// The parts of the bounds check that are the same in every thread of a block moved
    /// to an early exit before the index ([`uniform_exit`]).
    Exit,
    /// Sums a loop keeps in a global element held in a register ([`register_sums`]).
    Registers,
    /// Triton loops over chunk indices written over offsets ([`chunk_loops`]).
    Offsets,
    /// Triton module-level constants the kernel reads written as its `tl.constexpr`
    /// parameters, set by the spec ([`module_constants`]).
    Constants,
}

impl Normalize {
    /// The CUDA forms, in the order a sequence of them applies: each may make the next
    /// one's shape (a grid-stride loop becomes a check the declarations can move into,
    /// which an exit can then be split from).
    const CUDA: [Normalize; 6] = [
        Normalize::Registers,
        Normalize::Plain,
        Normalize::BlockDim,
        Normalize::Cover,
        Normalize::Moved,
        Normalize::Exit,
    ];

    /// The normalized text; None when it has nothing to change.
    fn apply(self, cx: &RewriteContext<'_>) -> Option<String> {
        match self {
            Normalize::Plain => plain_loads::plain_loads(cx),
            Normalize::BlockDim => block_dim::block_dim_written(cx),
            Normalize::Cover => grid_covers::covered_loop(cx),
            Normalize::Moved => guard_first::moved_inside_guard(cx),
            Normalize::Exit => uniform_exit::uniform_exit(cx),
            Normalize::Registers => register_sums::in_registers(cx),
            Normalize::Offsets => chunk_loops::offset_loops(cx),
            Normalize::Constants => module_constants::constants_as_params(cx),
        }
    }
}

/// The sequences of normalizations a refused rewrite is retried on, in order, each
/// applied to the text the one before it wrote: for CUDA every nonempty subset of
/// [`Normalize::CUDA`] in that order, fewer first; for Triton the chunk loops, the
/// module constants, then both.
fn retries(lang: Lang) -> Vec<Vec<Normalize>> {
    if lang == Lang::Triton {
        return vec![
            vec![Normalize::Offsets],
            vec![Normalize::Constants],
            vec![Normalize::Offsets, Normalize::Constants],
        ];
    }
    let all = Normalize::CUDA;
    let mut out: Vec<Vec<Normalize>> = (1u32..1 << all.len())
        .map(|mask| {
            (0..all.len())
                .filter(|b| mask & (1 << b) != 0)
                .map(|b| all[b])
                .collect()
        })
        .collect();
    out.sort_by_key(Vec::len);
    out
}

/// `run` again on the kernel in a normalized form, when one exists and `run` takes it:
/// the first of [`retries`] that gives candidates. A rewrite about cache hints
/// ([`ABOUT_HINTS`]) is never retried with its hints dropped. Each form is computed once
/// on the author's text; a sequence whose first form changes nothing is skipped.
fn retry_normalized(cx: &RewriteContext<'_>, run: Apply, id: &str) -> Option<Vec<Candidate>> {
    let about_hints = ABOUT_HINTS.contains(&id);
    let mut first: Vec<(Normalize, Option<String>)> = Vec::new();
    retries(cx.lang)
        .into_iter()
        .filter(|steps| !(about_hints && steps.contains(&Normalize::Plain)))
        .find_map(|steps| {
            let (head, rest) = steps.split_first()?;
            let once = match first.iter().find(|(n, _)| n == head) {
                Some((_, t)) => t.clone(),
                None => {
                    let t = head.apply(cx);
                    first.push((*head, t.clone()));
                    t
                }
            }?;
            let text = if rest.is_empty() {
                once
            } else {
                with_text(cx.lang, &once, &cx.kernel.name, cx.params, |c| {
                    normalized(c, rest)
                })??
            };
            with_text(cx.lang, &text, &cx.kernel.name, cx.params, |c| run(c).ok()).flatten()
        })
}

/// The kernel's text after each of `steps` in turn; None when one has nothing to change.
fn normalized(cx: &RewriteContext<'_>, steps: &[Normalize]) -> Option<String> {
    let (first, rest) = steps.split_first()?;
    let text = first.apply(cx)?;
    if rest.is_empty() {
        return Some(text);
    }
    with_text(cx.lang, &text, &cx.kernel.name, cx.params, |c| {
        normalized(c, rest)
    })
    .flatten()
}

/// `f` on a context for `text`, parsed anew, and its kernel `kernel`; None when the text
/// does not parse or has no such kernel.
pub(super) fn with_text<T>(
    lang: Lang,
    text: &str,
    kernel: &str,
    params: &BTreeMap<String, serde_json::Value>,
    f: impl FnOnce(&RewriteContext<'_>) -> T,
) -> Option<T> {
    let doc = crate::document::Document::new(lang, 0, text);
    let tree = doc.tree()?;
    let model = crate::syntax::analyze(lang, text, tree);
    let kernel = model.kernel(kernel)?;
    Some(f(&RewriteContext {
        lang,
        text,
        tree,
        model: &model,
        kernel,
        params,
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// The rewrite ids a file's `//!` paragraph opens with: the backticked words before
    /// its first `:` (`` `triton_num_warps` and `triton_num_stages`: ... ``).
    fn ids_of_file(first_line: &str) -> Vec<String> {
        let Some(head) = first_line
            .strip_prefix("//! `")
            .and_then(|_| first_line.split_once(':'))
            .map(|(h, _)| h)
        else {
            return Vec::new();
        };
        head.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    }

    /// The catalog's params for each step are what its rewrite reads: a key the rewrite
    /// cannot parse makes the step "not applicable" on every kernel (it did for
    /// `tile_matmul`'s `tensor_cores` once its values became pairs).
    #[test]
    fn every_catalog_steps_params_are_accepted_by_its_rewrite_on_the_examples() {
        use crate::syntax::Lang;
        let catalog = crate::optimize::catalog::Catalog::embedded();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let mut bad = Vec::new();
        let mut tried = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let lang = match p.extension().and_then(|x| x.to_str()) {
                Some("cu") => Lang::Cuda,
                Some("py") => Lang::Triton,
                _ => continue,
            };
            let src = std::fs::read_to_string(&p).unwrap();
            let doc = crate::document::Document::new(lang, 0, &src);
            let model = crate::syntax::analyze(lang, &src, doc.tree().expect("parses"));
            for k in &model.kernels {
                for s in catalog.strategies.iter().filter(|s| s.lang.contains(&lang)) {
                    let Some(rw) = &s.rewrite else { continue };
                    let params = serde_json::Value::Object(s.params.clone().into_iter().collect());
                    tried += 1;
                    if let Err(e) = super::check::testing::run(lang, &src, &k.name, rw, params) {
                        let e = e.to_string();
                        if e.contains("parameter `") {
                            bad.push(format!("{} on {}: {e}", s.id, k.name));
                        }
                    }
                }
            }
        }
        assert!(tried > 100, "only {tried} (step, kernel) pairs");
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    /// Kernels that write their block width as a name (`#define THREADS 256`, a
    /// `constexpr`) and that rewrites refuse: the refusal the dispatcher gives (it reads
    /// the name as `blockDim` to find the cause) quotes the kernel as the author wrote it.
    #[test]
    fn refusals_of_kernels_with_width_names_quote_the_authors_text() {
        use crate::syntax::Lang;
        let src = include_str!("../../../../tests/fixtures/rewrites/geometry/width_refusals.cu");
        let why = |kernel: &str, id: &str| -> String {
            let params = std::collections::BTreeMap::new();
            let out = super::with_text(Lang::Cuda, src, kernel, &params, |cx| super::apply(id, cx));
            match out.expect("the fixture's kernel") {
                Err(super::RewriteError::NotApplicable(why)) => why,
                other => panic!("{kernel} {id}: {other:?}"),
            }
        };
        let tree = "`for (int s = THREADS / 2; s > 0; s >>= 1)`";
        for id in ["unroll", "interleave", "vector_loops"] {
            let got = why("tree_sum", id);
            assert!(
                got.contains(tree) && !got.contains("blockDim"),
                "{id}: {got}"
            );
        }
        let got = why("strided_histogram", "unroll");
        assert!(
            got.contains("`for (int i = blockIdx.x * kBlock + threadIdx.x; i < n; i += kBlock * gridDim.x)` is not counted (the step `kBlock * gridDim.x` is not"),
            "{got}"
        );
        // A loop head over two lines, quoted on one.
        let got = why("strided_scale", "unroll");
        assert!(
            got.contains("`for (int i = blockIdx.x * THREADS + threadIdx.x; i < n; i += THREADS * gridDim.x)`"),
            "{got}"
        );
        // The shape a rewrite asks for is its own text, not the kernel's.
        let got = why("strided_histogram", "block_reduce");
        assert!(
            got.ends_with("no index `int i = blockIdx.x * blockDim.x + threadIdx.x;`"),
            "{got}"
        );
        // Where the author wrote `blockDim.x`, the quote keeps it.
        let got = why("tree_sum_odd", "unroll");
        assert!(
            got.contains("`for (int s = blockDim.x / 2; s > 0; s >>= 1)`"),
            "{got}"
        );
    }

    #[test]
    fn registry_matches_the_files() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/optimize/rewrite");
        let mut in_files = BTreeSet::new();
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_none_or(|x| x != "rs") || p.ends_with("mod.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            in_files.extend(ids_of_file(text.lines().next().unwrap_or("")));
        }
        let registered: BTreeSet<String> = super::ids().map(str::to_string).collect();
        assert_eq!(
            registered.len(),
            super::REGISTRY.len(),
            "an id is registered twice"
        );
        assert_eq!(in_files, registered);
        assert_eq!(
            ids_of_file("//! `triton_num_warps` and `triton_num_stages`: the spec's"),
            ["triton_num_warps", "triton_num_stages"]
        );
        assert!(
            ids_of_file("//! The 1-D elementwise shape that `vectorize`, `grid_stride`").is_empty()
        );
    }
}
