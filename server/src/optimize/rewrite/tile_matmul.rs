//! `tile_matmul`: a 2-D kernel where each thread computes one output with a loop over
//! `k` that reads a row of A and a column of B becomes a shared-memory tiled kernel: the
//! block loads a tile of every such operand into shared memory cooperatively, once per
//! step of `k`, and every thread reads the tiles many times. Three kinds of candidates:
//! *tiles* (a T x T block, one output per thread, tile sizes swept), *register blocks*
//! (each thread computes RM x RN outputs from the same tiles, so every value read from
//! shared memory serves several outputs) and *staged* register blocks (the same with two
//! shared buffers: a thread loads its share of the next k step's tiles into registers in
//! an unrolled loop before computing the current step, and stores it into the other
//! buffer after, so the loads' latency hides behind the arithmetic; one barrier a step).
//! On an H100 at 1024³ f32 (2026-11-26, timed as the worker times), staged 8x4 outputs a
//! thread (128x64x16 tiles) took 1.22x cuBLAS's time, the unstaged adjacent 4x4 1.84x.
//!
//! **Matches** [`super::grid2d`]'s shape (a 1-D kernel splitting its flat index into row and
//! column is first made that shape by [`super::delinearize`]) whose guarded body is declarations (PRE), one
//! counted loop `for (int i = S; i < K; i++)` with uniform S and K, and statements after
//! it (POST). Each global load in the loop is classified by its index polynomial
//! ([`super::poly`]): *A-like* (moves with the row index and `i`, not the column), *B-like*
//! (column and `i`, not the row), or neither (left as it is). A load may name only the
//! row and column indices, the loop variable and what is the same in every thread of a
//! block ([`uniform`]): so a batched matmul on grid z tiles like a plain one, its batch
//! pointers (`const float* a = A + b * M * K;`, before the bounds check or inside it) or
//! offsets (`A[(b * M + row) * K + k]`) naming `blockIdx.z` and parameters; such
//! declarations inside the check are hoisted before the tiles. The loop body runs
//! for the same `i` in the same order as before, so every output is computed exactly as
//! the author wrote it (no reassociation).
//!
//! **Writes** one `__shared__` tile per distinct A-like or B-like load (padded by one),
//! filled by a loop over the tile's elements in which the author's row, column and loop
//! variable are redeclared for the element being loaded (so the load expression is the
//! author's text), guarded by the author's bounds on that operand; `__syncthreads()`; the
//! loop over the tile's `k` with the author's body, its A/B loads replaced by tile reads;
//! `__syncthreads()`. PRE and the loop body run in every thread (a thread past the edge
//! computes a value it never stores), so a global read in PRE (`float acc = bias[col];`,
//! `acc = c[row * n + col]` for `C += A @ B`) is written under the author's bounds
//! check, element 0 read past the edge; POST runs under the author's bounds check. With
//! several outputs per thread, each output gets its own copy of PRE's variables.
//! Launch: block (BX, BY), grid dims `cdiv(X, B)` rescaled to the outputs a block covers.
//! The block's shape is written into the code as literals (not read from `blockDim`): the
//! tiles are sized for it, so a later block-size sweep must not apply.
//!
//! **Refuses**: another shape; writes in PRE, or reads through a pointer PRE computes (a
//! thread past the edge could not read its element 0); writes or barriers in the loop,
//! `break`/`return` in it; a loop that is not counted with step 1 or whose bounds depend
//! on the thread; a load moving with both the row and the column; loads that name locals
//! that differ between the threads of a block (a batch from `threadIdx.z` or from the row:
//! a tile would mix batches); a bounds check with a condition on both indices at once; no A-like or B-like
//! load (nothing to share). Plain TF32 is never written: f32 operands in TF32 lose 13
//! bits of mantissa, which a spec's default f32 tolerance does not allow. A third kind of
//! candidate, 3xTF32 on the tensor cores with `cp.async` pipelines ([`mma`], params
//! `tensor_cores`: `[BM, BN]` blocks, `tensor_stages`), is closer to the exact product
//! than the author's f32 loop for a loop that is one float multiply-add, but adds the k
//! terms in another order, so it needs a spec that names a PyTorch reference (steps then
//! verify candidates against it: no less accurate than the current version) or whose
//! atol and rtol (both ≥ 1e-4) allow a result that differs from the loop's own rounding.

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::access::{collect_accesses, declare, declare_statement, index_of, Access, Scope};
use super::check::{current_plan, finish, not_applicable, require_lang, Draft, R};
use super::delinearize::then_on_2d_launch;
use super::edits::{Edit, Edits};
use super::elementwise::{thread_bound, ThreadBound};
use super::grid2d::{match_2d, Launch2d, Shape2d, SHAPE_2D};
use super::params::Params;
use super::poly::{poly, Poly, Renamed};
use super::tree::{
    code_names, first_line, fresh, kernel_function, line_indent, named_children, newline, reindent,
    text, walk, written_target,
};
use super::RewriteContext;
use crate::optimize::facts::elem_bytes;
use crate::spec::DType;
use crate::syntax::{Lang, ParamKind};
use uniform::Uniform;

const ID: &str = "tile_matmul";

const SHAPE_WORDS: &str = "is not a 2-D one-thread-per-output kernel";

/// A 1-D kernel splitting a flat index into a row and a column (`row = idx / n; col =
/// idx % n`) made a 2-D launch by `delinearize` first, then tiled (from the first such
/// launch: the tiles set their own). `why` is why the kernel is not the 2-D shape.
fn through_delinearize(cx: &RewriteContext<'_>, why: &str) -> R {
    let k = &cx.kernel.name;
    let head = format!("`{k}` {SHAPE_WORDS}: {why}; {ID} needs {SHAPE_2D} with a loop over k");
    match then_on_2d_launch(cx, tile_matmul, SHAPE_WORDS, true) {
        Ok(drafts) => finish(cx, drafts, Vec::new()),
        Err(Some(t)) => Err(not_applicable(format!(
            "{head}; as a 2-D launch (`delinearize`) it is refused too: {t}"
        ))),
        Err(None) => Err(not_applicable(head)),
    }
}

/// One candidate's geometry: block (bx, by), outputs per thread (rm, rn), tile depth tk.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    bx: u64,
    by: u64,
    rm: u64,
    rn: u64,
    tk: u64,
    /// Each thread's outputs are adjacent (`threadIdx.y * RM + p`) rather than a block
    /// apart, A's tile is stored transposed (`[TK][BM + 4]`), and full tiles run an
    /// unrolled k loop: each step reads a thread's A and B values as runs of adjacent
    /// floats.
    contiguous: bool,
    /// (Contiguous only.) Two shared buffers, filled through registers: each thread loads
    /// its share of the next k step's tiles into registers (an unrolled loop) before
    /// computing the current step from one buffer, and stores them into the other after
    /// it, so the global loads' latency hides behind the arithmetic; one barrier a step.
    staged: bool,
}

impl Geometry {
    fn bm(self) -> u64 {
        self.by * self.rm
    }
    fn bn(self) -> u64 {
        self.bx * self.rn
    }
    fn label(self) -> String {
        if self.rm == 1 && self.rn == 1 {
            format!(
                "{}x{} shared tiles, block ({}, {})",
                self.bm(),
                self.bn(),
                self.bx,
                self.by
            )
        } else {
            format!(
                "{}x{} register block per thread{}, {}x{}x{} tiles, block ({}, {})",
                self.rm,
                self.rn,
                match (self.contiguous, self.staged) {
                    (true, true) =>
                        " (adjacent outputs, A transposed, two buffers filled through registers)",
                    (true, false) => " (adjacent outputs, A transposed)",
                    _ => "",
                },
                self.bm(),
                self.bn(),
                self.tk,
                self.bx,
                self.by
            )
        }
    }
}

pub fn tile_matmul(cx: &RewriteContext<'_>) -> R {
    require_lang(cx, Lang::Cuda, ID)?;
    let plan = current_plan(cx)?;
    let p = Params(cx.params);
    let tiles = p.uints_or_none("tiles", &[16, 32], 4..=32)?;
    let blocks = p.uints_or_none("register_blocks", &[4, 8], 1..=8)?;
    let adjacent = p.uints_or_none("adjacent_blocks", &[4], 2..=8)?;
    let staged = p.pairs_or_none("staged_blocks", &[[8, 4], [4, 4]])?;
    if let Some([rm, rn]) = staged
        .iter()
        .find(|[rm, rn]| !(1..=8).contains(rm) || !(1..=8).contains(rn))
    {
        return Err(super::check::bad_param(
            "staged_blocks",
            format!("[{rm}, {rn}]: each thread's rows and columns must be 1 to 8"),
        ));
    }
    let tensor_tiles = p.pairs_or_none("tensor_cores", &[[128, 128], [128, 64], [64, 64]])?;
    let tensor_stages = p.uints("tensor_stages", &[0], 0..=8)?;
    let k = &cx.kernel.name;
    let src = cx.text;
    let func = kernel_function(cx)
        .ok_or_else(|| not_applicable(format!("`{k}`'s definition is not in the syntax tree")))?;
    let shape = match match_2d(src, func) {
        Ok(shape) => shape,
        Err(why) => return through_delinearize(cx, &why),
    };
    let na = |why: String| not_applicable(format!("`{k}` cannot be tiled: {why}"));
    let mm = analyze(cx, &shape).map_err(na)?;
    let launch = Launch2d::of(cx).map_err(na)?;
    let geometries = geometries(&mm, &tiles, &blocks, &adjacent, &staged);
    let mut names = code_names(cx);
    let mut drafts = Vec::new();
    let mut dropped = Vec::new();
    for g in geometries {
        let label = g.label();
        if g.bx * g.by > 1024 {
            dropped.push(format!("{label}: more than 1024 threads"));
            continue;
        }
        let mut e = Edits::new();
        match launch.edits(g.bx, g.by, g.bn(), g.bm()) {
            Ok(l) => {
                e.extend(l);
            }
            Err(why) => {
                dropped.push(format!("{label}: {why}"));
                continue;
            }
        }
        let mut local_names = names.clone();
        let code = match emit(cx, &shape, &mm, g, &mut local_names) {
            Ok(c) => c,
            Err(why) => {
                dropped.push(format!("{label}: {why}"));
                continue;
            }
        };
        e.extend([Edit::replace(
            shape.start..shape.end,
            format!("{}{code}", shape.prelude),
        )]);
        match e.apply(src) {
            Ok(text) => drafts.push(Draft { label, text }),
            Err(err) => dropped.push(format!("{label}: {err}")),
        }
    }
    // The tensor-core candidates (3xTF32), where the k loop is one multiply-add of floats.
    if !tensor_tiles.is_empty() {
        let verifiable =
            mma::reordering_verifiable(plan.tolerance(DType::F32), plan.torch_reference.is_some());
        match verifiable.and_then(|()| mma::mma_shape(src, &mm)) {
            Ok(ms) => {
                let tc = TensorCandidates {
                    shape: &shape,
                    mm: &mm,
                    ms: &ms,
                    launch: &launch,
                };
                for [bm, bn] in &tensor_tiles {
                    for stages in &tensor_stages {
                        match tc.draft(cx, *bm, *bn, *stages, &names) {
                            Ok(d) => drafts.push(d),
                            Err(why) => dropped.push(why),
                        }
                    }
                }
            }
            Err(why) => dropped.push(format!("3xTF32 tensor cores: {why}")),
        }
    }
    names.clear();
    finish(cx, drafts, dropped)
}

/// The candidates' geometries: a T x T tile for each of `tiles`; 16 x 16 threads with
/// r x r outputs a block apart for each of `blocks`, adjacent for each of `adjacent`; and
/// staged RM x RN blocks for each of `staged`, their k step halved until both buffers of
/// `mm`'s tiles fit the static shared memory.
fn geometries(
    mm: &Matmul<'_>,
    tiles: &[u64],
    blocks: &[u64],
    adjacent: &[u64],
    staged: &[[u64; 2]],
) -> Vec<Geometry> {
    let mut geometries: Vec<Geometry> = tiles
        .iter()
        .map(|t| Geometry {
            bx: *t,
            by: *t,
            rm: 1,
            rn: 1,
            tk: *t,
            contiguous: false,
            staged: false,
        })
        .collect();
    for (r, contiguous) in blocks
        .iter()
        .map(|r| (r, false))
        .chain(adjacent.iter().map(|r| (r, true)))
    {
        // 16 x 16 threads, r x r outputs each; a k-step that keeps each tile near 4 KiB.
        geometries.push(Geometry {
            bx: 16,
            by: 16,
            rm: *r,
            rn: *r,
            tk: (64 / r).clamp(4, 16),
            contiguous,
            staged: false,
        });
    }
    for [rm, rn] in staged {
        // 16 x 16 threads; a k step of 512 / (RM * RN) (8x4 outputs: 128x64x16 tiles; 4x4:
        // 64x64x32), halved until both buffers of every tile fit the 48 KiB a block may
        // declare statically.
        let mut g = Geometry {
            bx: 16,
            by: 16,
            rm: *rm,
            rn: *rn,
            tk: (512 / (rm * rn)).clamp(8, 32),
            contiguous: true,
            staged: true,
        };
        let bytes = |g: Geometry| -> u64 {
            mm.shared
                .iter()
                .map(|s| {
                    let rows = if s.operand == Operand::A {
                        g.bm()
                    } else {
                        g.bn()
                    };
                    // An unknown type counts as the widest (16 bytes).
                    2 * g.tk * (rows + 4) * elem_bytes(&s.ty).unwrap_or(16)
                })
                .sum()
        };
        while bytes(g) > 48 * 1024 && g.tk > 4 {
            g.tk /= 2;
        }
        geometries.push(g);
    }
    geometries
}

/// What every tensor-core candidate of one kernel shares.
struct TensorCandidates<'a, 't> {
    shape: &'a Shape2d<'t>,
    mm: &'a Matmul<'t>,
    ms: &'a mma::MmaShape,
    launch: &'a Launch2d,
}

impl TensorCandidates<'_, '_> {
    /// The candidate with `bm x bn` blocks and `stages` buffers (0: by the rule of
    /// [`mma::MmaTiles::of`]), or why not: its text, its launch (4 warps, the grid over
    /// blocks of outputs) and its dynamic shared memory in the spec.
    fn draft(
        &self,
        cx: &RewriteContext<'_>,
        bm: u64,
        bn: u64,
        stages: u64,
        names: &BTreeSet<String>,
    ) -> Result<Draft, String> {
        let src = cx.text;
        let (a, b) = (
            mma::layout(&self.mm.shared[self.ms.a]),
            mma::layout(&self.mm.shared[self.ms.b]),
        );
        let tiles = mma::MmaTiles::of(bm, bn, stages, (a.0, b.0))
            .map_err(|why| format!("3xTF32 tensor cores: {why}"))?;
        let label = tiles.label();
        let bytes = tiles.smem_bytes((a.0, b.0));
        if bytes > 227 * 1024 {
            return Err(format!(
                "{label}: {bytes} bytes of shared memory, more than a block may have"
            ));
        }
        if crate::optimize::edit::spec_assignment(cx.kernel, "smem").is_some() {
            return Err(format!("{label}: the spec already sets `smem`"));
        }
        let mut e = Edits::new();
        let threads = 32 * mma::MMA_WARPS;
        e.extend(
            self.launch
                .edits(threads, 1, bn, bm)
                .map_err(|why| format!("{label}: {why}"))?,
        );
        let mut local_names = names.clone();
        let code = mma::emit_mma(src, self.shape, self.mm, self.ms, tiles, &mut local_names);
        e.extend([Edit::replace(
            self.shape.start..self.shape.end,
            format!("{}{code}", self.shape.prelude),
        )]);
        let text = e.apply(src).map_err(|err| format!("{label}: {err}"))?;
        let doc = crate::document::Document::new(Lang::Cuda, 0, &text);
        let tree = doc
            .tree()
            .ok_or_else(|| format!("{label}: the parser gave up"))?;
        let model = crate::syntax::analyze(Lang::Cuda, &text, tree);
        let kernel = model
            .kernel(&cx.kernel.name)
            .ok_or_else(|| format!("{label}: the kernel is gone"))?;
        let text = crate::optimize::edit::set_spec_value(&text, kernel, "smem", &bytes.to_string());
        Ok(Draft { label, text })
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Operand {
    /// Moves with the row and `k`: tile `[BM][TK]`.
    A,
    /// Moves with the column and `k`: tile `[TK][BN]`.
    B,
}

/// One distinct shared operand: its load text, where it occurs, its element type, and
/// whether the load is coalesced along `k` (a row-major A, a column-major B) or along
/// the row/column.
pub(super) struct Shared<'t> {
    operand: Operand,
    text: String,
    nodes: Vec<Node<'t>>,
    ty: String,
    along_k: bool,
    /// The pointer the load reads through, and whether consecutive `k` (resp. rows of A,
    /// columns of B) are adjacent elements: a stride of exactly 1 in the index polynomial.
    buffer: String,
    unit_k: bool,
    unit_i: bool,
}

struct Matmul<'t> {
    /// PRE's declarations that are the same in every thread of a block (a batch's
    /// pointers `A + b * M * K`): written once, before the tiles' loads, which may name
    /// them.
    hoisted: Vec<Node<'t>>,
    pre: Vec<Node<'t>>,
    post: Vec<Node<'t>>,
    /// The k loop, its variable and type, its start and bound (texts).
    body: Node<'t>,
    var: String,
    var_ty: String,
    start: String,
    bound: String,
    shared: Vec<Shared<'t>>,
    /// Names PRE declares (each output gets its own copy).
    pre_names: BTreeSet<String>,
    /// The indices of PRE's global reads (`b[col]` in `float acc = b[col];`): every
    /// thread of a tile runs PRE, so each is written under the author's bounds check,
    /// reading element 0 where the output is out of bounds (see [`guarded_reads`]).
    pre_reads: Vec<Node<'t>>,
    /// The bounds check's conjuncts that name only the row, only the column, or neither.
    row_cond: Vec<String>,
    col_cond: Vec<String>,
}

/// The guarded body as PRE, the k loop and POST, with the loop's loads to share (see
/// the module doc), or why it is not a tileable matmul.
fn analyze<'t>(cx: &RewriteContext<'t>, shape: &Shape2d<'t>) -> Result<Matmul<'t>, String> {
    let src = cx.text;
    let stmts: Vec<Node> = shape
        .body
        .iter()
        .copied()
        .filter(|n| n.kind() != "comment")
        .collect();
    let li = stmts
        .iter()
        .position(|s| s.kind() == "for_statement")
        .ok_or("the guarded body has no `for` loop over k")?;
    let l = stmts[li];
    let (all_pre, post) = (stmts[..li].to_vec(), stmts[li + 1..].to_vec());
    let mut scope = Scope::of_kernel(cx, src);
    let (uni, hoisted, pre) = uniform_declarations(cx, shape, &all_pre, &mut scope)?;
    let pre_names = pre_declarations(src, &pre, &mut scope)?;
    check_around_the_loop(src, &all_pre, &post)?;
    let pre_reads = guarded_reads(&scope, &hoisted, &pre, &uni)?;
    let header = first_line(text(src, l)).to_string();
    let (var, var_ty, start, bound) = counted_loop(src, l, &header)?;
    let params: BTreeSet<&str> = cx.kernel.params.iter().map(|p| p.name.as_str()).collect();
    let uniform = |n: Node| {
        let mut ok = true;
        walk(n, &mut |x| {
            if x.kind() == "identifier" && !params.contains(text(src, x)) {
                ok = false;
            }
            if thread_bound(src, x).is_some() {
                ok = false;
            }
            ok
        });
        ok
    };
    if !uniform(start) || !uniform(bound) {
        return Err(format!(
            "the bounds of `{header}` name more than kernel parameters; every thread of a tile must run the same steps"
        ));
    }
    let body = l
        .child_by_field_name("body")
        .ok_or("the k loop has no body")?;
    check_k_body(src, body, &var)?;
    let mut acc = Vec::new();
    collect_accesses(&scope, body, &mut acc)?;
    if let Some(w) = acc.iter().find(|a| a.write) {
        return Err(format!(
            "`{}` writes global memory inside the k loop",
            first_line(text(src, w.node))
        ));
    }
    let shared = shared_loads(cx, shape, &acc, &var, &uni)?;
    // The bounds check, split into conjuncts on the row and on the column.
    let (row_cond, col_cond) = split_bounds(cx, shape)?;
    Ok(Matmul {
        hoisted,
        pre,
        post,
        body,
        var,
        var_ty,
        start: text(src, start).to_string(),
        bound: text(src, bound).to_string(),
        shared,
        pre_names,
        pre_reads,
        row_cond,
        col_cond,
    })
}

/// The names the same in every thread of a block (see [`uniform`]): the parameters, the
/// declarations before the bounds check and PRE's that qualify, those of PRE returned
/// apart (to be hoisted) from the rest of PRE; the aliases of the first two recorded in
/// `scope`.
#[allow(clippy::type_complexity)]
fn uniform_declarations<'t>(
    cx: &RewriteContext<'t>,
    shape: &Shape2d<'t>,
    all_pre: &[Node<'t>],
    scope: &mut Scope<'_, 't>,
) -> Result<(Uniform, Vec<Node<'t>>, Vec<Node<'t>>), String> {
    let src = cx.text;
    let assigned = uniform::assigned_names(src, &shape.body);
    let mut uni = Uniform::new(cx.kernel.params.iter().map(|p| p.name.as_str()));
    let mut err = None;
    for d in &shape.outer {
        uni.declare(src, *d, &assigned);
        declare_statement(scope, *d, &mut err);
    }
    let (hoisted, pre): (Vec<Node>, Vec<Node>) = all_pre
        .iter()
        .copied()
        .partition(|s| s.kind() == "declaration" && uni.declare(src, *s, &assigned));
    for d in &hoisted {
        declare_statement(scope, *d, &mut err);
    }
    err.map_or(Ok((uni, hoisted, pre)), Err)
}

/// The names PRE declares, each declaration recorded in `scope`; refuses PRE statements
/// other than declarations.
fn pre_declarations<'t>(
    src: &str,
    pre: &[Node<'t>],
    scope: &mut Scope<'_, 't>,
) -> Result<BTreeSet<String>, String> {
    let mut pre_names = BTreeSet::new();
    let mut err: Option<String> = None;
    for s in pre {
        if s.kind() != "declaration" {
            return Err(format!(
                "`{}` comes before the k loop; only declarations may",
                first_line(text(src, *s))
            ));
        }
        let ty = s
            .child_by_field_name("type")
            .map(|t| text(src, t).to_string());
        let mut c = s.walk();
        for d in s.children_by_field_name("declarator", &mut c) {
            declare(scope, d, ty.as_deref(), &mut err);
            let mut n = d;
            while let Some(inner) = n.child_by_field_name("declarator") {
                n = inner;
            }
            pre_names.insert(text(src, n).to_string());
        }
    }
    err.map_or(Ok(pre_names), Err)
}

/// Refuses a second loop or a collective in PRE or POST.
fn check_around_the_loop(src: &str, pre: &[Node<'_>], post: &[Node<'_>]) -> Result<(), String> {
    for s in post.iter().chain(pre) {
        let mut bad = None;
        walk(*s, &mut |n| {
            if matches!(
                n.kind(),
                "for_statement" | "while_statement" | "do_statement"
            ) {
                bad = Some(format!("`{}` is a second loop", first_line(text(src, n))));
            }
            if let Some(ThreadBound::Collective(f)) = thread_bound(src, n) {
                bad = Some(format!("the body calls `{f}`"));
            }
            bad.is_none()
        });
        if let Some(b) = bad {
            return Err(b);
        }
    }
    Ok(())
}

/// The indices of PRE's global reads, each of which the tiled code guards by the
/// author's bounds check (`b[(row < m && col < n) ? (col) : 0]`): a thread past the edge
/// reads element 0 of the same pointer instead, so the pointer must be one that is
/// valid in every thread (a parameter, or a declaration the same in the whole block).
/// Refuses writes, reads through `*p`, through a pointer PRE computes, and reads in the
/// hoisted declarations (they run before any bounds are known).
fn guarded_reads<'t>(
    scope: &Scope<'_, 't>,
    hoisted: &[Node<'t>],
    pre: &[Node<'t>],
    uni: &Uniform,
) -> Result<Vec<Node<'t>>, String> {
    let src = scope.src;
    let before_loop = |a: &Access| {
        format!(
            "`{}` {} global memory before the k loop",
            text(src, a.node),
            if a.write { "writes" } else { "reads" }
        )
    };
    let mut hoisted_acc = Vec::new();
    for s in hoisted {
        collect_accesses(scope, *s, &mut hoisted_acc)?;
    }
    if let Some(a) = hoisted_acc.first() {
        return Err(format!(
            "{} in a declaration the whole block shares; the tiles' loads come after it",
            before_loop(a)
        ));
    }
    let mut acc = Vec::new();
    for s in pre {
        collect_accesses(scope, *s, &mut acc)?;
    }
    let mut reads = Vec::new();
    for a in &acc {
        let base = a.node.child_by_field_name("argument");
        let index = (a.node.kind() == "subscript_expression")
            .then(|| index_of(a.node))
            .flatten();
        match (a.write, base, index) {
            (false, Some(b), Some(i)) if b.kind() == "identifier" && uni.contains(text(src, b)) => {
                reads.push(i)
            }
            _ => {
                return Err(format!(
                    "{}; only a read `p[i]` of a pointer every thread may read can be guarded by the bounds check",
                    before_loop(a)
                ))
            }
        }
    }
    Ok(reads)
}

/// The counted loop `for (T i = S; i < K; i++)` (`header` its first line): its
/// variable, type, start and bound.
fn counted_loop<'t>(
    src: &str,
    l: Node<'t>,
    header: &str,
) -> Result<(String, String, Node<'t>, Node<'t>), String> {
    let not_counted = || format!("`{header}` is not `for (int i = S; i < K; i++)`");
    let init = l
        .child_by_field_name("initializer")
        .ok_or_else(not_counted)?;
    let (var, var_ty, start) = if init.kind() == "declaration" {
        let mut c = init.walk();
        let ds: Vec<Node> = init.children_by_field_name("declarator", &mut c).collect();
        let [d] = ds.as_slice() else {
            return Err(not_counted());
        };
        let name = d
            .child_by_field_name("declarator")
            .ok_or_else(not_counted)?;
        let value = d.child_by_field_name("value").ok_or_else(not_counted)?;
        let ty = init
            .child_by_field_name("type")
            .map_or("int", |t| text(src, t))
            .to_string();
        (text(src, name).to_string(), ty, value)
    } else {
        return Err(format!(
            "{}; declare the loop variable in the loop",
            not_counted()
        ));
    };
    let cond = l.child_by_field_name("condition").ok_or_else(not_counted)?;
    let (cl, cop, cr) = (
        cond.child_by_field_name("left"),
        cond.child_by_field_name("operator").map(|o| text(src, o)),
        cond.child_by_field_name("right"),
    );
    let bound = match (cl, cop, cr) {
        (Some(a), Some("<"), Some(b)) if text(src, a) == var => b,
        (Some(a), Some(">"), Some(b)) if text(src, b) == var => a,
        _ => return Err(not_counted()),
    };
    let update = l.child_by_field_name("update").ok_or_else(not_counted)?;
    let u = text(src, update).replace(' ', "");
    if ![
        format!("{var}++"),
        format!("++{var}"),
        format!("{var}+=1"),
        format!("{var}={var}+1"),
    ]
    .contains(&u)
    {
        return Err(format!("`{header}` does not step by 1"));
    }
    Ok((var, var_ty, start, bound))
}

/// Refuses a k loop body that leaves the loop, calls a collective, reads a thread
/// index, assigns the loop variable `var` or declares shared memory.
fn check_k_body(src: &str, body: Node<'_>, var: &str) -> Result<(), String> {
    let mut bad = None;
    walk(body, &mut |n| {
        let t = text(src, n);
        match n.kind() {
            "return_statement" | "goto_statement" | "break_statement" => {
                bad = Some(format!("`{}` leaves the k loop", first_line(t)));
            }
            "continue_statement" => {
                let mut cur = n;
                let mut nested = false;
                while let Some(p) = cur.parent() {
                    if p.id() == body.id() {
                        break;
                    }
                    nested |= matches!(
                        p.kind(),
                        "for_statement" | "while_statement" | "do_statement"
                    );
                    cur = p;
                }
                if !nested {
                    // `continue` in the k loop skips to the next k: the same in the tile loop.
                }
            }
            "call_expression" | "field_expression" => match thread_bound(src, n) {
                Some(ThreadBound::Collective(f)) => bad = Some(format!("the k loop calls `{f}`")),
                Some(ThreadBound::Index(_)) if uniform::kept_position(src, n) != Some(true) => {
                    bad = Some(format!(
                        "the k loop reads `{t}`; in a tile it names another thread"
                    ))
                }
                Some(ThreadBound::Index(_)) => {}
                None => {}
            },
            "assignment_expression" | "update_expression" => {
                let target = written_target(n);
                if target.is_some_and(|x| x.kind() == "identifier" && text(src, x) == var) {
                    bad = Some(format!("`{t}` assigns the loop variable"));
                }
            }
            "declaration" if t.contains("__shared__") => {
                bad = Some("the k loop declares shared memory".into());
            }
            _ => {}
        }
        bad.is_none()
    });
    bad.map_or(Ok(()), Err)
}

/// The k loop's loads to share, from its accesses `acc`: each load that moves with k and
/// with exactly one of the row (A-like) and the column (B-like), loads of the same text
/// merged. Besides the indices and `var`, a load may name only what is the same in every
/// thread of a block (`uni`: a batch's offset or pointer); a load through a pointer that
/// is not is left as it is. Refuses a load moving with both, a direct load naming what
/// differs between threads, and a loop with nothing to share.
fn shared_loads<'t>(
    cx: &RewriteContext<'t>,
    shape: &Shape2d<'t>,
    acc: &[Access<'t>],
    var: &str,
    uni: &Uniform,
) -> Result<Vec<Shared<'t>>, String> {
    let src = cx.text;
    // Row, column and loop variable renamed, so a polynomial says what a load moves with.
    let names = Renamed(vec![
        (&shape.y.name, "$r"),
        (&shape.x.name, "$c"),
        (var, "$k"),
    ]);
    let indices = [shape.y.name.as_str(), shape.x.name.as_str(), var];
    let mut shared: Vec<Shared> = Vec::new();
    let mut left = Vec::new();
    for a in acc {
        let load = text(src, a.node);
        let foreign = foreign_name(src, a.node, &indices, uni);
        if let (Some(why), true) = (&foreign, a.parts.len() != 1) {
            left.push(format!(
                "`{load}` reads through a pointer that differs between threads ({why})"
            ));
            continue; // through an alias that is not the block's: leave it as it is
        }
        let p = a
            .parts
            .iter()
            .fold(Poly::default(), |s, x| s.add(&poly(src, *x, &names), 1));
        let Some(op) = operand_of(&p).map_err(|()| {
            format!("`{load}` moves with both the row and the column; no tile serves it")
        })?
        else {
            left.extend(foreign.map(|why| format!("`{load}` {why}")));
            left.extend(
                nonlinear(&p).map(|a| format!("`{load}` moves through `{a}`, not linearly")),
            );
            continue;
        };
        if let Some(why) = foreign {
            return Err(format!(
                "`{load}` {why}: it differs between the threads of a block, which share the load's tile (a tile would mix batches or rows); a tile load may name only the indices, the loop variable and what is the same in every thread of a block (parameters, `blockIdx.z`, names set from them)"
            ));
        }
        let ktext: String = load.split_whitespace().collect();
        match shared.iter_mut().find(|s| s.text == ktext) {
            Some(s) => s.nodes.push(a.node),
            None => shared.push(new_shared(cx, a, (op, &p), ktext, uni)?),
        }
    }
    if shared.is_empty() {
        let mut why = "no load in the k loop moves with k and only one of the row and the column; there is nothing to share".to_string();
        for l in left {
            why.push_str(&format!("; {l}"));
        }
        return Err(why);
    }
    Ok(shared)
}

/// Whether a load with index polynomial `p` (row `$r`, column `$c`, loop variable `$k`)
/// is A-like, B-like or neither (`Ok(None)`: it stays a global load); `Err` when it moves
/// with both the row and the column.
fn operand_of(p: &Poly) -> Result<Option<Operand>, ()> {
    let moves = |v: &str| p.linear_in(v).map(|c| !c.is_zero());
    let op = match (moves("$r"), moves("$c")) {
        (Some(true), Some(false)) => Operand::A,
        (Some(false), Some(true)) => Operand::B,
        (Some(true), Some(true)) => return Err(()),
        _ => return Ok(None),
    };
    // The same for every k: no tile needed.
    Ok((moves("$k") == Some(true)).then_some(op))
}

/// An opaque piece of `p` (a division, a remainder, a call) that holds the row, the column
/// or the loop variable, as written: where the load moves with it cannot be followed.
fn nonlinear(p: &Poly) -> Option<String> {
    let atoms = p.0.keys().flatten();
    let mut held = atoms.filter(|a| a.contains("{$"));
    held.next().map(|a| {
        let a = a.trim_start_matches('?');
        a.split('{').next().unwrap_or(a).to_string()
    })
}

/// The first thing `load` names that is neither one of `indices` nor the same in every
/// thread of a block, as a clause (`names `b`, which names `row``).
fn foreign_name(src: &str, load: Node<'_>, indices: &[&str], uni: &Uniform) -> Option<String> {
    let mut other = None;
    walk(load, &mut |x| {
        if other.is_some() {
            return false;
        }
        if let Some(kept) = uniform::kept_position(src, x) {
            if !kept {
                other = Some(format!("reads `{}`", text(src, x)));
            }
            return false;
        }
        if x.kind() == "identifier" {
            let t = text(src, x);
            if !indices.contains(&t) && !uni.contains(t) {
                other = Some(format!("names `{t}`, which {}", uni.why_not(t)));
            }
        }
        true
    });
    other
}

/// A new shared operand for load `a` (its operand and polynomial, its text `ktext`): its
/// element type (the local pointer's it reads through, else the buffer's) and layout.
fn new_shared<'t>(
    cx: &RewriteContext<'t>,
    a: &Access<'t>,
    (op, p): (Operand, &Poly),
    ktext: String,
    uni: &Uniform,
) -> Result<Shared<'t>, String> {
    let coef_k = p.linear_in("$k").and_then(|c| c.as_constant());
    let coef_i = p
        .linear_in(if op == Operand::A { "$r" } else { "$c" })
        .and_then(|c| c.as_constant());
    let through = a
        .node
        .child_by_field_name("argument")
        .and_then(|p| uni.pointee(text(cx.text, p)));
    let ty = cx
        .kernel
        .params
        .iter()
        .find_map(|q| match &q.kind {
            ParamKind::Pointer { pointee, .. } if q.name == a.buffer => Some(pointee.clone()),
            _ => None,
        })
        .ok_or("a load's buffer is not a pointer parameter")?;
    let ty = through.map_or(ty, str::to_string);
    Ok(Shared {
        operand: op,
        text: ktext,
        nodes: vec![a.node],
        ty,
        along_k: coef_k == Some(1) || coef_i != Some(1),
        buffer: a.buffer.clone(),
        unit_k: coef_k == Some(1),
        unit_i: coef_i == Some(1),
    })
}

/// The bounds check as conjuncts that hold for a row (naming no column) and for a column.
fn split_bounds(
    cx: &RewriteContext<'_>,
    shape: &Shape2d<'_>,
) -> Result<(Vec<String>, Vec<String>), String> {
    let doc = crate::document::Document::new(
        Lang::Cuda,
        0,
        &format!("bool f() {{ return {}; }}", shape.active),
    );
    let tree = doc.tree().ok_or("the bounds check does not parse")?;
    let src = doc.text();
    let mut ret = None;
    walk(tree.root_node(), &mut |n| {
        if n.kind() == "return_statement" && ret.is_none() {
            ret = named_children(n).into_iter().next();
        }
        ret.is_none()
    });
    let e = ret.ok_or("the bounds check does not parse")?;
    // `!(a || b)` is `!(a) && !(b)`.
    let mut conj: Vec<String> = Vec::new();
    fn split(src: &str, n: Node<'_>, neg: bool, out: &mut Vec<String>, depth: usize) {
        let mut n = n;
        if depth > 64 {
            // Too deep to split: one conjunct naming both indices, refused below.
            out.push(text(src, n).to_string());
            return;
        }
        while n.kind() == "parenthesized_expression" {
            match named_children(n).into_iter().next() {
                Some(c) => n = c,
                None => break,
            }
        }
        if n.kind() == "unary_expression"
            && n.child_by_field_name("operator").map(|o| text(src, o)) == Some("!")
        {
            if let Some(a) = n.child_by_field_name("argument") {
                return split(src, a, !neg, out, depth + 1);
            }
        }
        if n.kind() == "binary_expression" {
            let op = n.child_by_field_name("operator").map(|o| text(src, o));
            let joins = if neg { Some("||") } else { Some("&&") };
            if op == joins {
                if let (Some(l), Some(r)) = (
                    n.child_by_field_name("left"),
                    n.child_by_field_name("right"),
                ) {
                    split(src, l, neg, out, depth + 1);
                    split(src, r, neg, out, depth + 1);
                    return;
                }
            }
        }
        let t = text(src, n).to_string();
        out.push(if neg { format!("!({t})") } else { t });
    }
    split(src, e, false, &mut conj, 0);
    let mentions = |c: &str, name: &str| {
        c.split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
            .any(|w| w == name)
    };
    let (mut rows, mut cols) = (Vec::new(), Vec::new());
    for c in conj {
        let (r, col) = (mentions(&c, &shape.y.name), mentions(&c, &shape.x.name));
        match (r, col) {
            (true, true) => {
                return Err(format!(
                    "the bounds check `{c}` ties the row and the column together; a tile load could not be guarded"
                ))
            }
            (true, false) => rows.push(c),
            (false, true) => cols.push(c),
            (false, false) => {
                rows.push(c.clone());
                cols.push(c);
            }
        }
    }
    let _ = cx;
    Ok((rows, cols))
}

/// PRE's declarations that are the same in every thread of a block, as written, each
/// followed by a newline and `ind`.
fn hoisted_text(src: &str, mm: &Matmul<'_>, ind: &str) -> String {
    let nl = newline(src);
    mm.hoisted
        .iter()
        .map(|s| {
            let t = reindent(text(src, *s), line_indent(src, s.start_byte()), ind);
            format!("{t}{nl}{ind}")
        })
        .collect()
}

/// `text` of `n` with PRE's names suffixed and shared loads replaced.
fn rewrite_text(
    src: &str,
    n: Node<'_>,
    renames: &BTreeMap<String, String>,
    loads: &[(usize, String)],
) -> String {
    let mut e = Edits::new();
    let load_nodes: BTreeMap<usize, &String> = loads.iter().map(|(id, t)| (*id, t)).collect();
    walk(n, &mut |x| {
        if let Some(t) = load_nodes.get(&x.id()) {
            e.extend([Edit::replace(x.byte_range(), (*t).clone())]);
            return false;
        }
        if x.kind() == "identifier" {
            if let Some(r) = renames.get(text(src, x)) {
                e.extend([Edit::replace(x.byte_range(), r.clone())]);
            }
        }
        true
    });
    e.apply_within(src, n.byte_range())
        .unwrap_or_else(|_| text(src, n).to_string())
}

/// PRE's read indices under the author's bounds check `active`, with PRE's names
/// renamed (see [`guarded_reads`]): replacements for [`rewrite_text`].
fn guarded_indices(
    src: &str,
    mm: &Matmul<'_>,
    active: &str,
    renames: &BTreeMap<String, String>,
) -> Vec<(usize, String)> {
    mm.pre_reads
        .iter()
        .map(|i| {
            let index = rewrite_text(src, *i, renames, &[]);
            (i.id(), format!("({active}) ? ({index}) : 0"))
        })
        .collect()
}

/// The code of one tiled or register-blocked candidate (geometry `g`) that replaces the
/// kernel's index declarations and guarded body: the tiles, each output's coordinates,
/// PRE per output, the k loop with its cooperative loads, and POST under the bounds check.
fn emit(
    cx: &RewriteContext<'_>,
    shape: &Shape2d<'_>,
    mm: &Matmul<'_>,
    g: Geometry,
    names: &mut BTreeSet<String>,
) -> Result<String, String> {
    let w = Writer::new(cx.text, shape, mm, g, names);
    let mut o = w.tiles();
    o.push_str(&hoisted_text(cx.text, mm, &w.ind));
    o.push_str(&w.coordinates());
    o.push_str(&w.pre());
    let compute = w.compute(&w.k_steps());
    o.push_str(&w.k_loop(&compute, names));
    o.push_str(&w.post());
    Ok(o)
}

/// What every piece of one candidate's code shares: the text, its shape and matmul, the
/// geometry, the indents and the names the code declares.
struct Writer<'a, 't> {
    src: &'a str,
    nl: &'static str,
    ind: String,
    u: String,
    i1: String,
    i2: String,
    i3: String,
    shape: &'a Shape2d<'t>,
    mm: &'a Matmul<'t>,
    g: Geometry,
    /// Every thread's outputs, (p, q) for p < RM, q < RN.
    outputs: Vec<(u64, u64)>,
    /// One output a thread: the author's names stay as they are.
    single: bool,
    k0: String,
    kk: String,
    e: String,
    tile_names: Vec<String>,
    /// Staged tiles: the buffer a k step fills (it computes from `buf ^ 1`).
    buf: Option<String>,
}

impl<'a, 't> Writer<'a, 't> {
    fn new(
        src: &'a str,
        shape: &'a Shape2d<'t>,
        mm: &'a Matmul<'t>,
        g: Geometry,
        names: &mut BTreeSet<String>,
    ) -> Self {
        let ind = line_indent(src, shape.start).to_string();
        let u = shape.unit.clone();
        let outputs: Vec<(u64, u64)> = (0..g.rm)
            .flat_map(|p| (0..g.rn).map(move |q| (p, q)))
            .collect();
        let k0 = fresh("k0", names);
        let kk = fresh("kk", names);
        let e = fresh("e", names);
        let tile_names: Vec<String> = mm
            .shared
            .iter()
            .map(|s| {
                fresh(
                    if s.operand == Operand::A {
                        "a_tile"
                    } else {
                        "b_tile"
                    },
                    names,
                )
            })
            .collect();
        let i1 = format!("{ind}{u}");
        let i2 = format!("{i1}{u}");
        let i3 = format!("{i2}{u}");
        let buf = g.staged.then(|| fresh("buf", names));
        Writer {
            src,
            nl: newline(src),
            single: outputs.len() == 1,
            ind,
            u,
            i1,
            i2,
            i3,
            shape,
            mm,
            g,
            outputs,
            k0,
            kk,
            e,
            tile_names,
            buf,
        }
    }

    /// The row index of output row `p`.
    fn row_of(&self, p: u64) -> String {
        let row = &self.shape.y;
        if self.single {
            row.name.clone()
        } else {
            format!("{}_{p}", row.name)
        }
    }

    /// The column index of output column `q`.
    fn col_of(&self, q: u64) -> String {
        let col = &self.shape.x;
        if self.single {
            col.name.clone()
        } else {
            format!("{}_{q}", col.name)
        }
    }

    /// PRE's names for output (p, q): suffixed `_p_q` when a thread has several.
    fn renames(&self, p: u64, q: u64) -> BTreeMap<String, String> {
        let suffix = if self.single {
            String::new()
        } else {
            format!("_{p}_{q}")
        };
        self.mm
            .pre_names
            .iter()
            .map(|n| (n.clone(), format!("{n}{suffix}")))
            .collect()
    }

    /// The tile `t` a k step computes from.
    fn computing(&self, t: &str) -> String {
        match &self.buf {
            Some(b) => format!("{t}[{b} ^ 1]"),
            None => t.to_string(),
        }
    }

    /// The shared tiles' declarations, padded; two 16-byte aligned buffers each when
    /// staged.
    fn tiles(&self) -> String {
        let Writer { nl, ind, mm, g, .. } = self;
        let (bm, bn, tk) = (g.bm(), g.bn(), g.tk);
        let mut o = String::new();
        for (s, t) in mm.shared.iter().zip(&self.tile_names) {
            let dims = match (s.operand, g.contiguous) {
                (Operand::A, false) => format!("[{bm}][{tk} + 1]"),
                (Operand::B, false) => format!("[{tk}][{bn} + 1]"),
                // Rows padded by 4: the transposed fill hits distinct banks, and a thread's
                // RM (or RN) adjacent values stay 16-byte aligned.
                (Operand::A, true) => format!("[{tk}][{bm} + 4]"),
                (Operand::B, true) => format!("[{tk}][{bn} + 4]"),
            };
            if g.staged {
                // Two buffers; 16-byte aligned so a thread's adjacent values load as vectors.
                o.push_str(&format!(
                    "__shared__ __align__(16) {} {t}[2]{dims};{nl}{ind}",
                    s.ty
                ));
            } else {
                o.push_str(&format!("__shared__ {} {t}{dims};{nl}{ind}", s.ty));
            }
        }
        o
    }

    /// Each output's row and column declarations.
    fn coordinates(&self) -> String {
        let Writer { nl, ind, g, .. } = self;
        let (row, col) = (&self.shape.y, &self.shape.x);
        let (bm, bn) = (g.bm(), g.bn());
        let mut o = String::new();
        if self.single {
            o.push_str(&format!(
                "{} {} = blockIdx.y * {bm} + threadIdx.y;{nl}{ind}{} {} = blockIdx.x * {bn} + threadIdx.x;{nl}{ind}",
                row.ty, row.name, col.ty, col.name
            ));
        } else {
            for p in 0..g.rm {
                o.push_str(&format!(
                    "{} {} = blockIdx.y * {bm} + {};{nl}{ind}",
                    row.ty,
                    self.row_of(p),
                    owned(*g, "threadIdx.y", p, g.by, g.rm)
                ));
            }
            for q in 0..g.rn {
                o.push_str(&format!(
                    "{} {} = blockIdx.x * {bn} + {};{nl}{ind}",
                    col.ty,
                    self.col_of(q),
                    owned(*g, "threadIdx.x", q, g.bx, g.rn)
                ));
            }
        }
        o
    }

    /// PRE, once per output, with that output's names and indices.
    fn pre(&self) -> String {
        let Writer {
            src, nl, ind, mm, ..
        } = self;
        let (row, col) = (&self.shape.y, &self.shape.x);
        let mut o = String::new();
        for &(p, q) in &self.outputs {
            let renames = self.renames(p, q);
            let guarded = guarded_indices(src, mm, &self.shape.active, &renames);
            for s in &mm.pre {
                let mut t = rewrite_text(src, *s, &renames, &guarded);
                if !self.single {
                    // PRE may name the indices: give it this output's.
                    t = rename_words(
                        &t,
                        &[(&row.name, &self.row_of(p)), (&col.name, &self.col_of(q))],
                    );
                }
                o.push_str(&format!("{t}{nl}{ind}"));
            }
        }
        o
    }

    /// The k steps of one tile: the author's body per output, its tiled loads replaced
    /// by tile reads (and the author's loop variable declared where the body still
    /// names it outside those loads).
    fn k_steps(&self) -> String {
        let Writer {
            src,
            nl,
            i2,
            mm,
            k0,
            kk,
            ..
        } = self;
        let var = &mm.var;
        let tiled: BTreeSet<usize> = mm
            .shared
            .iter()
            .flat_map(|s| s.nodes.iter().map(|n| n.id()))
            .collect();
        let mut names_var = false;
        walk(mm.body, &mut |x| {
            if tiled.contains(&x.id()) {
                return false;
            }
            names_var |= x.kind() == "identifier" && text(src, x) == var.as_str();
            true
        });
        let mut inner = String::new();
        if names_var {
            inner.push_str(&format!("{i2}{} {var} = {k0} + {kk};{nl}", mm.var_ty));
        }
        for &(p, q) in &self.outputs {
            inner.push_str(&self.output_step(p, q));
        }
        inner
    }

    /// One k step of output (p, q): the author's loop body with its tiled loads read
    /// from the tiles, in a block that redeclares the author's indices as this output's
    /// where the body names them.
    fn output_step(&self, p: u64, q: u64) -> String {
        let Writer {
            src,
            nl,
            i2,
            i3,
            mm,
            g,
            kk,
            ..
        } = self;
        let (row, col) = (&self.shape.y, &self.shape.x);
        let mut loads = Vec::new();
        for (s, t) in mm.shared.iter().zip(&self.tile_names) {
            let t = self.computing(t);
            let slot = match (s.operand, g.contiguous) {
                (Operand::A, false) => {
                    format!("{t}[{}][{kk}]", owned(*g, "threadIdx.y", p, g.by, g.rm))
                }
                (Operand::A, true) => {
                    format!("{t}[{kk}][{}]", owned(*g, "threadIdx.y", p, g.by, g.rm))
                }
                (Operand::B, _) => {
                    format!("{t}[{kk}][{}]", owned(*g, "threadIdx.x", q, g.bx, g.rn))
                }
            };
            for n in &s.nodes {
                loads.push((n.id(), slot.clone()));
            }
        }
        let stmts: Vec<Node> = if mm.body.kind() == "compound_statement" {
            named_children(mm.body)
        } else {
            vec![mm.body]
        };
        let replaced: BTreeSet<usize> = loads.iter().map(|(id, _)| *id).collect();
        let uses_index = |n: Node| {
            let mut u = false;
            walk(n, &mut |x| {
                if replaced.contains(&x.id()) {
                    return false;
                }
                u |= x.kind() == "identifier"
                    && (text(src, x) == row.name || text(src, x) == col.name);
                true
            });
            u
        };
        let shadow = if self.single || !stmts.iter().any(|s| uses_index(*s)) {
            String::new()
        } else {
            format!(
                " {} {} = {}; {} {} = {};",
                row.ty,
                row.name,
                self.row_of(p),
                col.ty,
                col.name,
                self.col_of(q)
            )
        };
        let lines: Vec<String> = stmts
            .iter()
            .map(|st| {
                let t = rewrite_text(src, *st, &self.renames(p, q), &loads);
                reindent(&t, line_indent(src, st.start_byte()), i3)
            })
            .collect();
        let mut inner = String::new();
        if self.single && lines.len() == 1 && !lines[0].contains('\n') {
            inner.push_str(&format!("{i2}{}{nl}", lines[0]));
        } else {
            inner.push_str(&format!("{i2}{{{shadow}{nl}"));
            for l in &lines {
                inner.push_str(&format!("{i3}{l}{nl}"));
            }
            inner.push_str(&format!("{i2}}}{nl}"));
        }
        inner
    }

    /// One tile's k steps (`inner`) at the loop body's depth, bounded by the author's
    /// bound; with contiguous outputs a full tile runs them in an unrolled loop.
    fn compute(&self, inner: &str) -> String {
        let Writer {
            nl,
            u,
            i1,
            i2,
            mm,
            g,
            k0,
            kk,
            ..
        } = self;
        let tk = g.tk;
        let bounded = format!(
            "for (int {kk} = 0; {kk} < {tk} && {k0} + {kk} < {}; ++{kk}) {{{nl}",
            mm.bound
        );
        if g.contiguous {
            // A full tile runs an unrolled loop (the slots are then constants); the last,
            // partial one the bounded loop. Same steps in the same order either way.
            let deeper = deepen(inner, u);
            format!(
                "{i1}if ({k0} + {tk} <= {}) {{{nl}{i2}#pragma unroll{nl}{i2}for (int {kk} = 0; {kk} < {tk}; ++{kk}) {{{nl}{deeper}{i2}}}{nl}{i1}}} else {{{nl}{i2}{bounded}{deeper}{i2}}}{nl}{i1}}}{nl}",
                mm.bound
            )
        } else {
            format!("{i1}{bounded}{inner}{i1}}}{nl}")
        }
    }

    /// The loop over k tiles around `compute`: cooperative loads into the tiles, then the
    /// steps, between barriers; staged, each step fetches the next tile into registers,
    /// computes the one before from the other buffer, then fills it.
    fn k_loop(&self, compute: &str, names: &mut BTreeSet<String>) -> String {
        let Writer {
            nl,
            ind,
            u,
            i1,
            i2,
            mm,
            g,
            k0,
            ..
        } = self;
        let tk = g.tk;
        let k_fetch = match &self.buf {
            Some(_) => fresh("k_next", names),
            None => k0.clone(),
        };
        let j = match &self.buf {
            Some(_) => fresh("j", names),
            None => String::new(),
        };
        let (fetch, fill, staging) = self.cooperative_loads(&k_fetch, &j, names);
        match &self.buf {
            None => format!(
                "for ({} {k0} = {}; {k0} < {}; {k0} += {tk}) {{{nl}{fetch}{i1}__syncthreads();{nl}{compute}{i1}__syncthreads();{nl}{ind}}}",
                mm.var_ty, mm.start, mm.bound
            ),
            Some(b) => {
                // Step `k_next` fetches that tile into registers, computes the one before it
                // from the buffer filled a step earlier, then fills the other buffer. The
                // barrier ends the step: the buffer filled next was last read before it.
                let bound = &mm.bound;
                let past = if bound.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    format!("{bound} + {tk}")
                } else {
                    format!("({bound}) + {tk}")
                };
                format!(
                    "{staging}int {b} = 0;{nl}{ind}for ({ty} {k_fetch} = {start}; {k_fetch} < {past}; {k_fetch} += {tk}) {{{nl}{i1}if ({k_fetch} < {bound}) {{{nl}{fetch}{i1}}}{nl}{i1}if ({k_fetch} > {start}) {{{nl}{i2}{ty} {k0} = {k_fetch} - {tk};{nl}{}{i1}}}{nl}{i1}if ({k_fetch} < {bound}) {{{nl}{fill}{i1}}}{nl}{i1}__syncthreads();{nl}{i1}{b} ^= 1;{nl}{ind}}}",
                    deepen(compute, u),
                    ty = mm.var_ty,
                    start = mm.start,
                )
            }
        }
    }

    /// The cooperative loads, every thread of the block taking each element of each tile
    /// once, consecutive threads on consecutive addresses: (the fetch, the fill from
    /// registers, the registers' declarations); unstaged, the fetch stores into the tile
    /// and the other two are empty. `k_fetch` is the k tile fetched, `j` a staged
    /// thread's round.
    fn cooperative_loads(
        &self,
        k_fetch: &str,
        j: &str,
        names: &mut BTreeSet<String>,
    ) -> (String, String, String) {
        let Writer {
            src,
            nl,
            ind,
            i1,
            i2,
            i3,
            mm,
            g,
            k0,
            e,
            ..
        } = self;
        let (row, col) = (&self.shape.y, &self.shape.x);
        let (bm, bn, tk) = (g.bm(), g.bn(), g.tk);
        let var = &mm.var;
        let threads = g.bx * g.by;
        let mut fetch = String::new();
        let mut fill = String::new();
        let mut staging = String::new();
        for (s, t) in mm.shared.iter().zip(&self.tile_names) {
            let (rows_n, cond) = match s.operand {
                Operand::A => (bm, &mm.row_cond),
                Operand::B => (bn, &mm.col_cond),
            };
            let elems = rows_n * tk;
            // Consecutive threads take consecutive addresses: along k for a row-major A or a
            // column-major B, along the row or column otherwise.
            let (ix, kx) = if s.along_k {
                (format!("{e} / {tk}"), format!("{e} % {tk}"))
            } else {
                (format!("{e} % {rows_n}"), format!("{e} / {rows_n}"))
            };
            let filled = match &self.buf {
                Some(b) => format!("{t}[{b}]"),
                None => t.clone(),
            };
            let decl = match s.operand {
                Operand::A => format!("{} {} = blockIdx.y * {bm} + {ix};", row.ty, row.name),
                Operand::B => format!("{} {} = blockIdx.x * {bn} + {ix};", col.ty, col.name),
            };
            let slot = if s.operand == Operand::A && !g.contiguous {
                format!("{filled}[{ix}][{kx}]")
            } else {
                format!("{filled}[{kx}][{ix}]")
            };
            let mut guard: Vec<String> = cond.clone();
            guard.push(format!("{var} < {}", mm.bound));
            let load = s.nodes.first().map_or("", |n| text(src, *n));
            let first = format!("threadIdx.y * {} + threadIdx.x", g.bx);
            if self.buf.is_none() {
                fetch.push_str(&format!(
                    "{i1}for (int {e} = {first}; {e} < {elems}; {e} += {threads}) {{{nl}{i2}{decl}{nl}{i2}{} {var} = {k0} + {kx};{nl}{i2}if ({}) {slot} = {load};{nl}{i1}}}{nl}",
                    mm.var_ty,
                    guard.join(" && "),
                ));
                continue;
            }
            // Staged: `per` registers a thread; a last round past the tile's end is skipped.
            let per = elems.div_ceil(threads);
            let next = fresh(
                if s.operand == Operand::A {
                    "a_next"
                } else {
                    "b_next"
                },
                names,
            );
            staging.push_str(&format!("{} {next}[{per}] = {{}};{nl}{ind}", s.ty));
            let within = if elems % threads == 0 {
                String::new()
            } else {
                format!("{e} < {elems} && ")
            };
            let each = format!(
                "{i2}#pragma unroll{nl}{i2}for (int {j} = 0; {j} < {per}; ++{j}) {{{nl}{i3}int {e} = {first} + {j} * {threads};{nl}"
            );
            fetch.push_str(&format!(
                "{each}{i3}{}{nl}{i3}{} {var} = {k_fetch} + {kx};{nl}{i3}if ({within}{}) {next}[{j}] = {load};{nl}{i2}}}{nl}",
                reindent(&decl, "", i3),
                mm.var_ty,
                guard.join(" && "),
            ));
            let fill_if = if within.is_empty() {
                String::new()
            } else {
                format!("if ({e} < {elems}) ")
            };
            fill.push_str(&format!(
                "{each}{i3}{fill_if}{slot} = {next}[{j}];{nl}{i2}}}{nl}"
            ));
        }
        (fetch, fill, staging)
    }

    /// POST per output, under the author's bounds check (with this output's indices in
    /// its own block when a thread has several).
    fn post(&self) -> String {
        let Writer {
            src,
            nl,
            ind,
            i1,
            i2,
            mm,
            shape,
            ..
        } = self;
        let (row, col) = (&shape.y, &shape.x);
        let mut o = String::new();
        for &(p, q) in &self.outputs {
            if mm.post.is_empty() {
                continue;
            }
            let depth = if self.single { i1.clone() } else { i2.clone() };
            let body: Vec<String> = mm
                .post
                .iter()
                .map(|s| {
                    let t = rewrite_text(src, *s, &self.renames(p, q), &[]);
                    reindent(&t, line_indent(src, s.start_byte()), &depth)
                })
                .collect();
            let body = body.join(&format!("{nl}{depth}"));
            if self.single {
                o.push_str(&format!(
                    "{nl}{ind}if ({}) {{{nl}{i1}{body}{nl}{ind}}}",
                    shape.active
                ));
            } else {
                o.push_str(&format!(
                    "{nl}{ind}{{{nl}{i1}{} {} = {}; {} {} = {};{nl}{i1}if ({}) {{{nl}{i2}{body}{nl}{i1}}}{nl}{ind}}}",
                    row.ty,
                    row.name,
                    self.row_of(p),
                    col.ty,
                    col.name,
                    self.col_of(q),
                    shape.active
                ));
            }
        }
        o
    }
}

/// The offset of a thread's output `i` (of `r`) within its block, along an axis of `t`
/// threads: a block apart (`threadIdx.y + 16`), or adjacent (`threadIdx.y * 4 + 1`).
fn owned(g: Geometry, thread: &str, i: u64, t: u64, r: u64) -> String {
    match (g.contiguous, i) {
        (false, 0) => thread.to_string(),
        (false, i) => format!("{thread} + {}", i * t),
        (true, i) => format!("{thread} * {r} + {i}"),
    }
}

/// `s` one indent unit deeper: `u` before every line that is not blank.
fn deepen(s: &str, u: &str) -> String {
    s.split_inclusive('\n')
        .map(|l| {
            if l.trim().is_empty() {
                l.to_string()
            } else {
                format!("{u}{l}")
            }
        })
        .collect()
}

/// `s` with whole-word occurrences renamed (`row` -> `row_1`, not `rows`).
fn rename_words(s: &str, pairs: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let w = pairs
            .iter()
            .find(|(from, _)| *from == word.as_str())
            .map_or(word.as_str(), |(_, to)| to);
        out.push_str(w);
        word.clear();
    };
    for ch in s.chars() {
        if ch.is_ascii_alphanumeric() || ch == '_' {
            word.push(ch);
        } else {
            flush(&mut word, &mut out);
            out.push(ch);
        }
    }
    flush(&mut word, &mut out);
    out
}

mod mma;
mod uniform;

#[cfg(test)]
mod tests;
