//! From parsed statements and the kernel's signature to a `BenchPlan` or diagnostics.
//!
//! Order of work: collect statements (duplicates, misplaced names), check them against the
//! parameters, resolve names (undefined, cycles), decide the number of cases, then
//! evaluate every named value per case in dependency order and build each case. Statement
//! order in the spec never matters (docs/spec.md's Triton example uses `BLOCK` before it is
//! defined). Interpretation choices where docs/spec.md is silent:
//! - A kernel parameter's name wins over a setting keyword: in a kernel with a parameter
//!   `bytes`, `bytes = n` gives that parameter its value.
//! - `NAME = V` for a tuned name need not be one of the listed values (it is just the
//!   plain-run value); a tuned name takes one value, not one per case.
//! - `atol`, `rtol` and `trials` take one value for all cases.
//! - A spec name that nothing reads gets a warning; `~ DIST` on an `out` buffer gets a
//!   warning (out buffers are poisoned, not filled).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::ctype::{pointee_dtype, scalar_ty};
use super::expr::{eval, name_values, EvalError, Expr, ExprKind, Scope};
use super::parser::{parse_lines, DistSpec, Name, Stmt, StmtKind};
use super::plan::*;
use super::torch_ref;
use super::{did_you_mean, EvalEnv, Severity, SpecDiagnostic, SpecReport};
use crate::syntax::{ByteRange, Kernel, Lang, Param, ParamKind, SpecLine};

pub(crate) const DIST_LIST: &str =
    "use uniform(lo, hi), normal(mean, std), randint(lo, hi), zeros, ones or arange";
const BUILTINS: [&str; 2] = ["sms", "warp"];
/// Names with a meaning of their own (unless the kernel has a parameter of that name).
const CUDA_LAUNCH: [&str; 3] = ["grid", "block", "smem"];
const TRITON_LAUNCH: [&str; 3] = ["grid", "num_warps", "num_stages"];
const SETTINGS: [&str; 6] = ["atol", "rtol", "trials", "flops", "bytes", "reference"];
/// A buffer above this many bytes is an error (docs/spec.md, "Expressions").
const MAX_BUFFER_BYTES: u64 = 4 << 30;
const MAX_TRIALS: i64 = 1000;

/// Where a named value comes from.
#[derive(Clone, Debug)]
enum Source<'a> {
    /// `NAME = E[, E...]`: one expression per case, or one for all.
    Exprs(&'a [Expr]),
    /// A tunable's first listed value, or an override.
    Const(Value),
}

#[derive(Clone, Debug)]
struct Node<'a> {
    name: String,
    /// The defining name's span (`None` for overrides of names the spec never wrote).
    span: Option<ByteRange>,
    src: Source<'a>,
}

/// A value during evaluation: a number, or a `(x, y, z)` tuple for grid/block.
#[derive(Clone, Debug, PartialEq)]
enum EvalVal {
    Num(Value),
    Tuple(Vec<(Value, ByteRange)>),
}

struct Ctx<'a> {
    kernel: &'a Kernel,
    lines: &'a [SpecLine],
    diags: Vec<SpecDiagnostic>,
    /// (start, end, severity) of every diagnostic, to report each cause once.
    reported: HashSet<(usize, usize, Severity)>,
    /// Work done, in items visited (statements, names, nodes, diagnostics, candidates
    /// compared). Every pass charges what it iterates over, so a test can check that the
    /// checker stays linear in the size of the spec (`spec::tests::linear_work`).
    work: u64,
}

impl Ctx<'_> {
    fn charge(&mut self, items: usize) {
        self.work += items as u64;
    }
    fn push(&mut self, severity: Severity, range: ByteRange, message: String) {
        self.charge(1);
        // The same cause seen in several cases is reported once (the first case's message).
        if !self.reported.insert((range.start, range.end, severity)) {
            return;
        }
        self.diags.push(SpecDiagnostic {
            range,
            severity,
            message,
        });
    }
    fn error(&mut self, range: ByteRange, message: impl Into<String>) {
        self.push(Severity::Error, range, message.into());
    }
    fn warn(&mut self, range: ByteRange, message: impl Into<String>) {
        self.push(Severity::Warning, range, message.into());
    }
    fn prefix(&self) -> &'static str {
        match self.kernel.lang {
            Lang::Cuda => "// @bench",
            Lang::Triton => "# @bench",
        }
    }
    /// The first @bench line's statement text, for errors tied to no statement.
    fn first_line(&self) -> ByteRange {
        match self.lines.first() {
            Some(l) => {
                let trimmed = l.text.trim_end();
                let lead = trimmed.len() - trimmed.trim_start().len();
                l.offset + lead..l.offset + trimmed.len().max(lead)
            }
            None => self.kernel.name_range.clone(),
        }
    }
    /// 1-based document line of a span, for "already defined on line N".
    fn line_of(&self, span: &ByteRange) -> u32 {
        line_at(self.lines, span.start).map_or(0, |l| l.line + 1)
    }
}

/// The spec line that holds byte `at` (the last one starting at or before it); spec lines
/// are in document order, so this is a binary search.
fn line_at(lines: &[SpecLine], at: usize) -> Option<&SpecLine> {
    let i = lines.partition_point(|l| l.offset <= at);
    lines.get(i.checked_sub(1)?)
}

fn text_of(lines: &[SpecLine], span: &ByteRange) -> String {
    match line_at(lines, span.start) {
        Some(l) if span.end <= l.offset + l.text.len() => l
            .text
            .get(span.start - l.offset..span.end - l.offset)
            .unwrap_or("")
            .to_string(),
        _ => String::new(),
    }
}

fn list_span(values: &[Expr]) -> ByteRange {
    match (values.first(), values.last()) {
        (Some(a), Some(b)) => a.span.start..b.span.end,
        _ => 0..0,
    }
}

fn is_launch_keyword(lang: Lang, name: &str) -> bool {
    match lang {
        Lang::Cuda => CUDA_LAUNCH.contains(&name),
        Lang::Triton => TRITON_LAUNCH.contains(&name),
    }
}

fn describe_param(p: &Param) -> String {
    match &p.kind {
        ParamKind::Pointer { pointee, .. } => format!("`{pointee}*`"),
        ParamKind::Scalar { ty } => format!("`{ty}`"),
        ParamKind::TritonArg {
            annotation: Some(a),
        } => format!("`{a}`"),
        ParamKind::TritonArg { annotation: None } => "untyped".to_string(),
        ParamKind::Constexpr => "`tl.constexpr`".to_string(),
        ParamKind::Other { ty } => format!("`{ty}`"),
    }
}

/// Role guess shared with the skeleton: const pointers are read; names like `out`, `y`,
/// `c`, `dst` are written; other CUDA non-const pointers are `inout` (correct whether or
/// not the kernel reads them); other Triton pointers are `in`.
pub(crate) fn guess_role(lang: Lang, name: &str, is_const: bool) -> Role {
    if is_const {
        return Role::In;
    }
    let base = name
        .strip_suffix("_ptr")
        .unwrap_or(name)
        .to_ascii_lowercase();
    let outish = base.split('_').any(|w| {
        matches!(
            w,
            "out" | "output" | "y" | "c" | "o" | "dst" | "res" | "result"
        ) || w.starts_with("out")
    });
    match (outish, lang) {
        (true, _) => Role::Out,
        (false, Lang::Cuda) => Role::InOut,
        (false, Lang::Triton) => Role::In,
    }
}

pub(crate) fn analyze(
    kernel: &Kernel,
    kernels: &[Kernel],
    env: &EvalEnv,
    overrides: &BTreeMap<String, Value>,
) -> SpecReport {
    analyze_measured(kernel, kernels, env, overrides).0
}

/// [`analyze`], and the work it did (items visited; see `Ctx::work`).
pub(crate) fn analyze_measured(
    kernel: &Kernel,
    kernels: &[Kernel],
    env: &EvalEnv,
    overrides: &BTreeMap<String, Value>,
) -> (SpecReport, u64) {
    let lines = &kernel.spec.lines;
    if lines.is_empty() {
        let empty = SpecReport {
            plan: None,
            diagnostics: Vec::new(),
        };
        return (empty, 0);
    }
    let mut cx = Ctx {
        kernel,
        lines,
        diags: Vec::new(),
        reported: HashSet::new(),
        work: 0,
    };
    let plan = build(&mut cx, kernels, env, overrides);
    let has_error = cx.diags.iter().any(|d| d.severity == Severity::Error);
    cx.diags.sort_by_key(|d| (d.range.start, d.range.end));
    let report = SpecReport {
        plan: if has_error { None } else { plan },
        diagnostics: cx.diags,
    };
    (report, cx.work)
}

struct BufferSpec<'a> {
    name: &'a Name,
    role: Role,
    dtype: DType,
    dtype_span: &'a ByteRange,
    dims: &'a [Expr],
    shape_span: &'a ByteRange,
    dist: Option<&'a DistSpec>,
    /// The pointer's vector width (`float4*` -> 4); 1 for Triton and scalar pointees.
    width: u64,
}

struct TuneSpec<'a> {
    name: &'a Name,
    values: Vec<Value>,
    kind: TunableKind,
}

/// Names whose statement failed: their uses fail silently instead of cascading.
type Broken = HashSet<String>;

/// Pass 1's result: what the statements declare, checked against the signature.
struct Decls<'a> {
    /// `NAME = E[, E...]` statements that passed their checks, in spec order.
    defs: Vec<(&'a Name, &'a [Expr])>,
    def_index: HashMap<&'a str, usize>,
    buffers: Vec<BufferSpec<'a>>,
    buffer_index: HashMap<&'a str, usize>,
    tunes: Vec<TuneSpec<'a>>,
    tune_index: HashMap<&'a str, usize>,
    reference: Option<(&'a Name, &'a [Expr])>,
    /// `reference = torch: ...`: its text and span (issue #17).
    torch_reference: Option<(&'a str, &'a ByteRange)>,
    /// Triton parameters given as `NAME = None` (issue #32: optional pointers).
    nones: Vec<&'a str>,
}

impl<'a> Decls<'a> {
    fn def_of(&self, n: &str) -> Option<&'a [Expr]> {
        self.def_index.get(n).map(|&i| self.defs[i].1)
    }
    fn buffer(&self, n: &str) -> Option<&BufferSpec<'a>> {
        self.buffer_index.get(n).map(|&i| &self.buffers[i])
    }
    fn is_tuned(&self, n: &str) -> bool {
        self.tune_index.contains_key(n)
    }
}

/// The named values of the spec (definitions, tunables, overrides) and how they depend
/// on each other.
struct Graph<'a> {
    nodes: Vec<Node<'a>>,
    index: HashMap<String, usize>,
    /// Per node, the nodes its expressions read.
    deps: Vec<Vec<usize>>,
    /// Names read somewhere that have no value (undefined, broken, or a tuple used as a
    /// number): they evaluate to a silent error.
    unknown: HashSet<String>,
    /// Every name read by some expression.
    used: HashSet<String>,
}

impl<'a> Graph<'a> {
    fn get(&self, name: &str) -> Option<&Node<'a>> {
        self.index.get(name).map(|&i| &self.nodes[i])
    }
    fn has(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }
}

/// One evaluated case: every name's value (or a silent error).
type CaseEnv = HashMap<String, Result<EvalVal, ()>>;

/// The passes, in order. Each pass reports what it finds and leaves names it could not
/// settle in `broken` (or `Graph::unknown`), so later passes stay quiet about them and
/// only independent causes add diagnostics, as a compiler reports every independent
/// error at once. The plan is still withheld (in `analyze`) when there is any error.
fn build(
    cx: &mut Ctx<'_>,
    kernels: &[Kernel],
    env: &EvalEnv,
    overrides: &BTreeMap<String, Value>,
) -> Option<BenchPlan> {
    let kernel = cx.kernel;
    let (stmts, errors) = parse_lines(cx.lines);
    let mut broken = Broken::new();
    for e in errors {
        cx.charge(1);
        if let Some(n) = e.name {
            broken.insert(n);
        }
        cx.error(e.error.span, e.error.message);
    }
    let params: HashMap<&str, &Param> =
        kernel.params.iter().map(|p| (p.name.as_str(), p)).collect();

    let mut decls = collect_statements(cx, &stmts, &params, &mut broken);
    collect_tunes(cx, &stmts, &params, env, &mut decls, &mut broken);
    let mut graph = value_graph(cx, &decls, overrides, &params);
    resolve_names(cx, &decls, &mut graph, &params, &broken);
    check_missing_values(cx, &decls, &graph, &params, &broken);
    let (torch_reference, torch_uses) = check_torch_reference(cx, kernels, &decls);
    check_unused(cx, &decls, &graph, &params, &torch_uses);
    let reference = decls
        .reference
        .and_then(|(name, values)| check_reference(cx, kernels, name, values));
    let (order, cyclic) = topo_order(cx, &graph);
    let n_cases = case_count(cx, &graph);
    let (cases, case_envs) =
        evaluate_cases(cx, env, &decls, &graph, &params, &order, &cyclic, n_cases);
    let settings = plan_settings(cx, &decls, &graph, &params, &case_envs)?;
    Some(BenchPlan {
        kernel: kernel.name.clone(),
        lang: kernel.lang,
        cases: cases?,
        tunables: settings.tunables,
        defines: settings.defines,
        atol: settings.atol,
        rtol: settings.rtol,
        reference,
        torch_reference: torch_reference.map(Box::new),
        trials: settings.trials,
    })
}

/// Pass 1: definitions and buffers. Built-in names, duplicates, values given to
/// pointers, launch settings of the other language, lists where one value belongs, and
/// each buffer line against its parameter.
/// `NAME = None`: the whole value is the name `None`.
fn is_none(values: &[Expr]) -> bool {
    matches!(values, [e] if matches!(&e.kind, ExprKind::Name(n) if n == "None"))
}

/// `NAME = None` is for a Triton kernel parameter (it is passed as `None`); anywhere else
/// it is an error that says so.
fn none_allowed(cx: &mut Ctx<'_>, params: &HashMap<&str, &Param>, name: &Name) -> bool {
    let triton_param = params
        .get(name.text.as_str())
        .is_some_and(|p| matches!(p.kind, ParamKind::TritonArg { .. } | ParamKind::Constexpr));
    if !triton_param {
        cx.error(
            name.span.clone(),
            format!(
                "`{} = None` passes None to a Triton kernel parameter; `{}` is not one",
                name.text, name.text
            ),
        );
    }
    triton_param
}

fn collect_statements<'a>(
    cx: &mut Ctx<'_>,
    stmts: &'a [Stmt],
    params: &HashMap<&str, &Param>,
    broken: &mut Broken,
) -> Decls<'a> {
    let lang = cx.kernel.lang;
    let mut decls = Decls {
        defs: Vec::new(),
        def_index: HashMap::new(),
        buffers: Vec::new(),
        buffer_index: HashMap::new(),
        tunes: Vec::new(),
        tune_index: HashMap::new(),
        reference: None,
        torch_reference: None,
        nones: Vec::new(),
    };
    let mut seen: HashMap<&str, ByteRange> = HashMap::new();
    for Stmt { kind, .. } in stmts {
        cx.charge(1);
        let name = match kind {
            StmtKind::Assign { name, .. }
            | StmtKind::Buffer { name, .. }
            | StmtKind::TorchReference { name, .. } => name,
            StmtKind::Tune { .. } => continue,
        };
        if BUILTINS.contains(&name.text.as_str()) {
            let what = if name.text == "sms" {
                "the device's multiprocessor count"
            } else {
                "32, the warp size"
            };
            cx.error(
                name.span.clone(),
                format!(
                    "`{}` is built in ({what}) and cannot be redefined; pick another name",
                    name.text
                ),
            );
            continue;
        }
        if let Some(prev) = seen.get(name.text.as_str()) {
            let line = cx.line_of(prev);
            cx.error(
                name.span.clone(),
                match kind {
                    StmtKind::Assign { .. } if !is_keyword(lang, &name.text) => format!(
                        "`{0}` is already given on line {line}; give each name one statement (several cases: `{0} = 1024, 4099`)",
                        name.text
                    ),
                    _ => format!("`{}` is already given on line {line}; remove one of the two", name.text),
                },
            );
            broken.insert(name.text.clone());
            continue;
        }
        seen.insert(&name.text, name.span.clone());
        match kind {
            StmtKind::Assign { name, values } if is_none(values) => {
                if none_allowed(cx, params, name) {
                    decls.nones.push(&name.text);
                } else {
                    broken.insert(name.text.clone());
                }
            }
            StmtKind::Assign { name, values } => {
                if let Some(values) = check_assign(cx, params, name, values, broken) {
                    if name.text == "reference" && !params.contains_key("reference") {
                        decls.reference = Some((name, values));
                    } else {
                        decls.def_index.insert(&name.text, decls.defs.len());
                        decls.defs.push((name, values));
                    }
                }
            }
            StmtKind::Buffer {
                name,
                role,
                dtype,
                dtype_span,
                dims,
                shape_span,
                dist,
            } => {
                let spec = BufferSpec {
                    name,
                    role: *role,
                    dtype: *dtype,
                    dtype_span,
                    dims,
                    shape_span,
                    dist: dist.as_ref(),
                    width: 1,
                };
                if let Some(spec) = check_buffer(cx, params, spec) {
                    decls.buffer_index.insert(&name.text, decls.buffers.len());
                    decls.buffers.push(spec);
                } else {
                    broken.insert(name.text.clone());
                }
            }
            StmtKind::TorchReference { text, span, .. } => {
                decls.torch_reference = Some((text, span))
            }
            StmtKind::Tune { .. } => {}
        }
    }
    decls
}

/// One `NAME = E[, E...]` statement against the signature and the launch settings;
/// `Some(values)` when it defines a value (or names the reference).
fn check_assign<'a>(
    cx: &mut Ctx<'_>,
    params: &HashMap<&str, &Param>,
    name: &Name,
    values: &'a [Expr],
    broken: &mut Broken,
) -> Option<&'a [Expr]> {
    let lang = cx.kernel.lang;
    let param = params.get(name.text.as_str()).copied();
    if name.text == "reference" && param.is_none() {
        return Some(values);
    }
    if let Some(p) = param {
        if let ParamKind::Pointer { pointee, is_const } = &p.kind {
            let (dt, _) = pointee_dtype(pointee).unwrap_or((DType::F32, 1));
            let role = guess_role(lang, &p.name, *is_const);
            cx.error(
                name.span.clone(),
                format!("`{0}` is a pointer (`{pointee}*`); describe it as a buffer: `{0}: {role} {dt}[n]`", name.text),
            );
            broken.insert(name.text.clone());
            return None;
        }
    } else if lang == Lang::Cuda && (name.text == "num_warps" || name.text == "num_stages") {
        cx.error(
            name.span.clone(),
            format!(
                "`{}` is a Triton launch setting; a CUDA kernel takes `block = ...`",
                name.text
            ),
        );
        return None;
    } else if lang == Lang::Triton && (name.text == "block" || name.text == "smem") {
        let msg = if name.text == "block" {
            "`block` is a CUDA launch setting; a Triton kernel takes `num_warps = ...`"
        } else {
            "`smem` is a CUDA launch setting; Triton sizes shared memory itself"
        };
        cx.error(name.span.clone(), msg);
        return None;
    }
    if values.len() > 1
        && ["atol", "rtol", "trials"].contains(&name.text.as_str())
        && param.is_none()
    {
        cx.error(
            list_span(values),
            format!("`{}` takes one value for all cases", name.text),
        );
        broken.insert(name.text.clone());
        return None;
    }
    let launch_dims = param.is_none() && (name.text == "grid" || name.text == "block");
    if let Some(t) = values
        .iter()
        .find(|e| matches!(e.kind, ExprKind::Tuple(_)))
        .filter(|_| !launch_dims)
    {
        cx.error(
            t.span.clone(),
            "a tuple `(x, y, z)` is only allowed as the whole value of `grid` or `block`",
        );
        broken.insert(name.text.clone());
        return None;
    }
    Some(values)
}

/// Pass 2: `tune NAME in [...]` lines: duplicates, what may be tuned, constant values,
/// and a tuned name given one value per case.
fn collect_tunes<'a>(
    cx: &mut Ctx<'_>,
    stmts: &'a [Stmt],
    params: &HashMap<&str, &Param>,
    env: &EvalEnv,
    decls: &mut Decls<'a>,
    broken: &mut Broken,
) {
    let kernel = cx.kernel;
    let is_template = |n: &str| kernel.template_params.iter().any(|t| t == n);
    for Stmt { kind, .. } in stmts {
        cx.charge(1);
        let StmtKind::Tune { name, values, .. } = kind else {
            continue;
        };
        if decls.is_tuned(&name.text) {
            let line = cx.line_of(&name.span);
            cx.error(
                name.span.clone(),
                format!(
                    "`{}` is already tuned on line {line}; merge the lists",
                    name.text
                ),
            );
            continue;
        }
        let Some(kind) = tunable_kind(cx, params, &is_template, name) else {
            broken.insert(name.text.clone());
            continue;
        };
        let mut vals = Vec::new();
        let scope = ConstScope {
            lines: cx.lines,
            env,
        };
        for v in values {
            cx.charge(1);
            let mut names = Vec::new();
            v.names(&mut names);
            if let Some((n, span)) = names.iter().find(|(n, _)| !BUILTINS.contains(&n.as_str())) {
                cx.error(
                    span.clone(),
                    format!("tune values must be constants (numbers, `sms`, `warp`); `{n}` is not"),
                );
                continue;
            }
            match eval(v, &scope) {
                Ok(x) => vals.push(x),
                Err(EvalError::Diag { span, message }) => cx.error(span, message),
                Err(EvalError::Silent) => {}
            }
        }
        if vals.len() != values.len() {
            broken.insert(name.text.clone());
            continue;
        }
        if let Some(d) = decls.def_of(&name.text) {
            if d.len() > 1 {
                cx.error(
                    list_span(d),
                    format!("`{0}` is tuned, so it takes one value for all cases; list alternatives in `tune {0} in [...]`", name.text),
                );
                broken.insert(name.text.clone());
            }
        }
        decls.tune_index.insert(&name.text, decls.tunes.len());
        decls.tunes.push(TuneSpec {
            name,
            values: vals,
            kind,
        });
    }
}

/// Pass 3: the named values: definitions, then tunables without a definition (at their
/// first value), then overrides, which replace a value or add a settable parameter.
fn value_graph<'a>(
    cx: &mut Ctx<'_>,
    decls: &Decls<'a>,
    overrides: &BTreeMap<String, Value>,
    params: &HashMap<&str, &Param>,
) -> Graph<'a> {
    let kernel = cx.kernel;
    let mut nodes: Vec<Node<'a>> = decls
        .defs
        .iter()
        .map(|(n, v)| Node {
            name: n.text.clone(),
            span: Some(n.span.clone()),
            src: Source::Exprs(v),
        })
        .collect();
    for t in &decls.tunes {
        cx.charge(1);
        if !decls.def_index.contains_key(t.name.text.as_str()) {
            let first = t.values.first().copied().unwrap_or(Value::Int(0));
            nodes.push(Node {
                name: t.name.text.clone(),
                span: Some(t.name.span.clone()),
                src: Source::Const(first),
            });
        }
    }
    // An autotuned Triton kernel runs one config: values the spec does not give come
    // from the first of its `@triton.autotune` configs (constexpr parameters,
    // num_warps, num_stages), as the author listed them.
    if let Some(first) = kernel.autotune.as_ref().and_then(|a| a.configs.first()) {
        for (name, v) in first {
            cx.charge(1);
            let usable = name == "num_warps"
                || name == "num_stages"
                || params
                    .get(name.as_str())
                    .is_some_and(|p| p.kind == ParamKind::Constexpr);
            let defined = nodes.iter().any(|n| &n.name == name);
            if usable && !defined {
                nodes.push(Node {
                    name: name.clone(),
                    span: None,
                    src: Source::Const(Value::Int(*v)),
                });
            }
        }
    }
    // Then a Triton parameter's own default (`BLOCK: tl.constexpr = 512`,
    // `eps: float = 1e-5`): what a launch that leaves it out runs with.
    for p in &kernel.params {
        cx.charge(1);
        let Some(v) = p.default.as_deref().and_then(python_number) else {
            continue;
        };
        let settable = matches!(p.kind, ParamKind::Constexpr | ParamKind::TritonArg { .. });
        if settable && decls.buffer(&p.name).is_none() && !nodes.iter().any(|n| n.name == p.name) {
            nodes.push(Node {
                name: p.name.clone(),
                span: None,
                src: Source::Const(v),
            });
        }
    }
    // Then the file's integer constants above the kernel (`#define THREADS 256`,
    // `constexpr int BLOCK = 128;`, Python's `BLOCK = 1024`): the launch may name them
    // as the code does.
    for (name, v) in &kernel.constants {
        cx.charge(1);
        let taken = params.contains_key(name.as_str())
            || kernel.template_params.contains(name)
            || decls.buffer(name).is_some()
            || nodes.iter().any(|n| &n.name == name);
        if !taken {
            nodes.push(Node {
                name: name.clone(),
                span: None,
                src: Source::Const(Value::Int(*v)),
            });
        }
    }
    let mut index: HashMap<String, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.clone(), i))
        .collect();
    cx.charge(nodes.len());
    for (name, v) in overrides {
        cx.charge(1);
        if let Some(&i) = index.get(name) {
            nodes[i].src = Source::Const(*v);
            continue;
        }
        let settable = match params.get(name.as_str()) {
            Some(p) => matches!(
                p.kind,
                ParamKind::Scalar { .. } | ParamKind::TritonArg { .. } | ParamKind::Constexpr
            ),
            None => kernel.template_params.contains(name),
        };
        if settable && decls.buffer(name).is_none() {
            index.insert(name.clone(), nodes.len());
            nodes.push(Node {
                name: name.clone(),
                span: None,
                src: Source::Const(*v),
            });
        } else {
            let span = cx.first_line();
            cx.error(span, format!("override `{name}` does not name a size variable, tunable or scalar parameter of `{}`", kernel.name));
        }
    }
    let deps = vec![Vec::new(); nodes.len()];
    Graph {
        nodes,
        index,
        deps,
        unknown: HashSet::new(),
        used: HashSet::new(),
    }
}

/// Whether a Triton parameter the spec gives no value is left out of the launch: it has a
/// default (that is no number, else that is its value), or a `@triton.heuristics`
/// decorator computes it.
fn left_out(kernel: &Kernel, p: &Param, graph: &Graph<'_>) -> bool {
    !graph.has(&p.name) && (p.default.is_some() || kernel.heuristics.contains(&p.name))
}

/// A Python number literal as a parameter default: an integer as
/// [`crate::syntax::python_int`] reads it (`True`/`False` too), else a finite float
/// (`1e-5`, `2.0`, `-.5`). None for anything else (`None`, a name, an expression).
fn python_number(text: &str) -> Option<Value> {
    if let Some(v) = crate::syntax::python_int(text) {
        return Some(Value::Int(v));
    }
    let t = text.trim();
    let digits = t.strip_prefix('-').unwrap_or(t).trim();
    let looks_float = digits.starts_with(|c: char| c.is_ascii_digit() || c == '.')
        && digits
            .chars()
            .all(|c| c.is_ascii_digit() || "._eE+-".contains(c));
    match t.replace(['_', ' '], "").parse::<f64>() {
        Ok(v) if looks_float && v.is_finite() => Some(Value::Float(v)),
        _ => None,
    }
}

/// Undefined names get a "did you mean" for at most this many distinct names per spec:
/// each suggestion compares against every defined name, so this keeps a spec with
/// thousands of undefined names linear.
const MAX_SUGGESTIONS: usize = 16;

/// Pass 4: every name an expression reads must resolve. Records the dependency edges,
/// the names read, and the unknown names (which then evaluate silently).
fn resolve_names(
    cx: &mut Ctx<'_>,
    decls: &Decls<'_>,
    graph: &mut Graph<'_>,
    params: &HashMap<&str, &Param>,
    broken: &Broken,
) {
    let mut all_exprs: Vec<(Option<usize>, &Expr)> = Vec::new();
    for (i, n) in graph.nodes.iter().enumerate() {
        if let Source::Exprs(v) = &n.src {
            all_exprs.extend(v.iter().map(|e| (Some(i), e)));
        }
    }
    for b in &decls.buffers {
        all_exprs.extend(b.dims.iter().map(|e| (None, e)));
        if let Some(d) = b.dist {
            all_exprs.extend(d.args.iter().map(|e| (None, e)));
        }
    }
    let tuple_valued: Vec<bool> = graph
        .nodes
        .iter()
        .map(|n| matches!(&n.src, Source::Exprs(v) if v.iter().any(|e| matches!(e.kind, ExprKind::Tuple(_)))))
        .collect();
    let known: Vec<&str> = graph
        .nodes
        .iter()
        .map(|n| n.name.as_str())
        .chain(BUILTINS)
        .collect();
    let mut hints: HashMap<String, String> = HashMap::new();
    for (owner, e) in &all_exprs {
        let mut names = Vec::new();
        e.names(&mut names);
        for (n, span) in names {
            cx.charge(1);
            graph.used.insert(n.clone());
            if let Some(&j) = graph.index.get(&n) {
                if let Some(o) = owner {
                    graph.deps[*o].push(j);
                }
                if tuple_valued[j] {
                    cx.error(
                        span,
                        format!("`{n}` is a tuple `(x, y, z)`; to use one part here, name it: `bx = 256; {n} = (bx, 1)`"),
                    );
                    graph.unknown.insert(n);
                }
                continue;
            }
            if BUILTINS.contains(&n.as_str()) {
                continue;
            }
            graph.unknown.insert(n.clone());
            if broken.contains(&n) {
                continue;
            }
            let msg = if decls.buffer(&n).is_some()
                || params
                    .get(n.as_str())
                    .is_some_and(|p| matches!(p.kind, ParamKind::Pointer { .. }))
            {
                format!("`{n}` is a buffer, not a number; use the size variable of its shape")
            } else {
                let hint = match hints.get(&n) {
                    Some(h) => h.clone(),
                    None if hints.len() < MAX_SUGGESTIONS => {
                        cx.charge(known.len());
                        let h = did_you_mean(&n, known.iter().copied());
                        hints.insert(n.clone(), h.clone());
                        h
                    }
                    None => String::new(),
                };
                format!(
                    "`{n}` is not defined; define it with `{} {n} = ...`{hint}",
                    cx.prefix()
                )
            };
            cx.error(span, msg);
        }
    }
}

/// Pass 5: every parameter and template parameter needs a value, and a CUDA launch a
/// grid and a block.
fn check_missing_values(
    cx: &mut Ctx<'_>,
    decls: &Decls<'_>,
    graph: &Graph<'_>,
    params: &HashMap<&str, &Param>,
    broken: &Broken,
) {
    let kernel = cx.kernel;
    let lang = kernel.lang;
    let size_hint = if graph.has("n") {
        "n".to_string()
    } else {
        graph
            .nodes
            .iter()
            .find(|n| !params.contains_key(n.name.as_str()) && !is_keyword(lang, &n.name))
            .map_or("n".to_string(), |n| n.name.clone())
    };
    for p in &kernel.params {
        cx.charge(1);
        let has_node = graph.has(&p.name)
            || broken.contains(&p.name)
            || decls.nones.contains(&p.name.as_str());
        let has_buf = decls.buffer(&p.name).is_some() || broken.contains(&p.name);
        let pre = cx.prefix();
        match &p.kind {
            ParamKind::Pointer { pointee, is_const } if !has_buf => {
                let role = guess_role(lang, &p.name, *is_const);
                let msg = match pointee_dtype(pointee) {
                    Some((dt, _)) => format!(
                        "parameter `{0}` has no value in the @bench spec; add a line like `{pre} {0}: {role} {dt}[{size_hint}]`",
                        p.name
                    ),
                    None => format!(
                        "parameter `{}` is `{pointee}*`, which matches no @bench element type ({}); this kernel cannot be benchmarked as written",
                        p.name,
                        DType::ALL.map(DType::name).join(", ")
                    ),
                };
                cx.error(p.range.clone(), msg);
            }
            ParamKind::Scalar { ty } => {
                if scalar_ty(ty).is_none() {
                    cx.error(p.range.clone(), format!("parameter `{}` has type `{ty}`, which @bench cannot pass yet; pass a pointer or a plain C number type", p.name));
                } else if !has_node {
                    cx.error(p.range.clone(), format!("parameter `{0}` has no value in the @bench spec; add a line like `{pre} {0} = ...`", p.name));
                }
            }
            // A Triton parameter with a default, or one a `@triton.heuristics`
            // computes, may be left out of the launch.
            ParamKind::TritonArg { .. } | ParamKind::Constexpr if left_out(kernel, p, graph) => {}
            ParamKind::TritonArg { .. } if !has_node && !has_buf => {
                let msg = if p.name.to_ascii_lowercase().ends_with("ptr") {
                    let role = guess_role(lang, &p.name, false);
                    format!("parameter `{0}` has no value in the @bench spec; add a line like `{pre} {0}: {role} f32[{size_hint}]`", p.name)
                } else {
                    format!(
                        "parameter `{0}` has no value in the @bench spec; add `{pre} {0} = ...` for a number or `{pre} {0}: in f32[{size_hint}]` for a tensor",
                        p.name
                    )
                };
                cx.error(p.range.clone(), msg);
            }
            ParamKind::Constexpr if !has_node => {
                let autotuned = match &cx.kernel.autotune {
                    Some(a) if a.configs.is_empty() => "; the @triton.autotune configs are not a list of `triton.Config({...})` written in the decorator, so they cannot give it",
                    Some(_) => "; the @triton.autotune configs do not give it",
                    None => "",
                };
                cx.error(p.range.clone(), format!("parameter `{0}` has no value in the @bench spec; add `{pre} {0} = 1024` or `{pre} tune {0} in [...]`{autotuned}", p.name));
            }
            ParamKind::Other { ty } => {
                cx.error(p.range.clone(), format!("parameter `{}` has type `{ty}`, which @bench cannot pass; only pointers and plain numbers can be benchmarked", p.name));
            }
            _ => {}
        }
    }
    for t in &kernel.template_params {
        cx.charge(1);
        if !graph.has(t) && !broken.contains(t) {
            let msg = if names_a_type(kernel, t) {
                format!("template parameter `{t}` is a type (the element type of a parameter), and @bench gives template arguments as numbers only; benchmark the kernel written for one type (`float` for `{t}`), or an `extern \"C\"` kernel that calls this one with the types written out")
            } else {
                format!("template parameter `{t}` has no value in the @bench spec; add `// @bench {t} = 256` or `// @bench tune {t} in [...]`")
            };
            cx.error(kernel.name_range.clone(), msg);
        }
    }
    for required in ["grid", "block"] {
        if required == "block" && lang == Lang::Triton {
            continue;
        }
        if !graph.has(required) && !broken.contains(required) && !params.contains_key(required) {
            let example = if required == "grid" {
                "grid = cdiv(n, 256)"
            } else {
                "block = 256"
            };
            let span = cx.first_line();
            cx.error(
                span,
                format!(
                    "the spec has no `{required}`; add `{} {example}`",
                    cx.prefix()
                ),
            );
        }
    }
}

/// Pass 5b: `reference = torch: ...` (issue #17) against the spec's buffers, numbers and
/// the file's other kernels. Returns the reference and the size names it reads (before
/// unused names: a name only the reference reads is used).
fn check_torch_reference(
    cx: &mut Ctx<'_>,
    kernels: &[Kernel],
    decls: &Decls<'_>,
) -> (Option<TorchReference>, Vec<String>) {
    let Some((text, span)) = decls.torch_reference else {
        return (None, Vec::new());
    };
    let kernel = cx.kernel;
    let lang = kernel.lang;
    cx.charge(decls.buffers.len() + decls.defs.len() + kernel.params.len());
    let mut bufs: Vec<(&str, Role)> = decls
        .buffers
        .iter()
        .map(|b| (b.name.text.as_str(), b.role))
        .collect();
    let order: HashMap<&str, usize> = kernel
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| (p.name.as_str(), i))
        .collect();
    bufs.sort_by_key(|(n, _)| order.get(n).copied());
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let numbers: Vec<&str> = decls
        .defs
        .iter()
        .map(|(n, _)| n.text.as_str())
        .filter(|n| !is_keyword(lang, n))
        .chain(decls.tunes.iter().map(|t| t.name.text.as_str()))
        .chain(
            kernel
                .params
                .iter()
                .filter(|p| !matches!(p.kind, ParamKind::Pointer { .. }))
                .map(|p| p.name.as_str()),
        )
        .filter(|n| !decls.buffer_index.contains_key(n))
        .filter(|n| seen.insert(n))
        .collect();
    let scope = torch_ref::Scope {
        buffers: bufs,
        numbers,
        kernels: kernels
            .iter()
            .map(|k| k.name.as_str())
            .filter(|k| *k != kernel.name)
            .collect(),
        kernel: &kernel.name,
    };
    match torch_ref::check(text, span, &scope) {
        Ok((r, used)) => (Some(r), used),
        Err(problems) => {
            for (s, m) in problems {
                cx.error(s, m);
            }
            (None, Vec::new())
        }
    }
}

/// Pass 6: a size variable that nothing reads is a warning.
fn check_unused(
    cx: &mut Ctx<'_>,
    decls: &Decls<'_>,
    graph: &Graph<'_>,
    params: &HashMap<&str, &Param>,
    torch_uses: &[String],
) {
    let kernel = cx.kernel;
    for (n, _) in &decls.defs {
        cx.charge(1);
        let special = params.contains_key(n.text.as_str())
            || is_keyword(kernel.lang, &n.text)
            || kernel.template_params.contains(&n.text)
            || decls.is_tuned(&n.text);
        if !special && !graph.used.contains(&n.text) && !torch_uses.contains(&n.text) {
            cx.warn(
                n.span.clone(),
                format!(
                    "`{}` is never used; use it in a shape or launch expression, or remove it",
                    n.text
                ),
            );
        }
    }
}

/// A spec has at most this many cases: each is verified on the GPU for every trial, and
/// evaluation costs cases × names.
const MAX_CASES: usize = 64;

/// Pass 8: the number of cases: the length of the value lists longer than one, which
/// must agree.
fn case_count(cx: &mut Ctx<'_>, graph: &Graph<'_>) -> usize {
    let mut cases_n: Option<(usize, &str)> = None;
    for n in &graph.nodes {
        cx.charge(1);
        let Source::Exprs(v) = &n.src else { continue };
        if v.len() <= 1 {
            continue;
        }
        match cases_n {
            None => {
                if v.len() > MAX_CASES {
                    cx.error(
                        list_span(v),
                        format!("`{}` has {} values; a spec has at most {MAX_CASES} cases (every case is verified on every run)", n.name, v.len()),
                    );
                }
                cases_n = Some((v.len(), &n.name));
            }
            Some((k, first)) if k != v.len() => {
                cx.error(
                    list_span(v),
                    format!("`{}` has {} values but `{first}` has {k}; give 1 value (used in every case) or {k}", n.name, v.len()),
                );
            }
            Some(_) => {}
        }
    }
    cases_n.map_or(1, |(k, _)| k.min(MAX_CASES))
}

/// Pass 9: evaluate every name in dependency order, per case, and build each case.
/// Names that failed (unknown, broken, cyclic) evaluate to a silent error.
#[allow(clippy::too_many_arguments)]
fn evaluate_cases(
    cx: &mut Ctx<'_>,
    env: &EvalEnv,
    decls: &Decls<'_>,
    graph: &Graph<'_>,
    params: &HashMap<&str, &Param>,
    order: &[usize],
    cyclic: &[bool],
    n_cases: usize,
) -> (Option<Vec<Case>>, Vec<CaseEnv>) {
    let sms = i64::try_from(env.sms).unwrap_or(i64::MAX);
    let mut cases = Vec::new();
    let mut case_envs: Vec<CaseEnv> = Vec::new();
    for ci in 0..n_cases {
        let mut vals = CaseEnv::new();
        vals.insert("sms".into(), Ok(EvalVal::Num(Value::Int(sms))));
        vals.insert("warp".into(), Ok(EvalVal::Num(Value::Int(32))));
        for n in &graph.unknown {
            cx.charge(1);
            vals.insert(n.clone(), Err(()));
        }
        for &i in order {
            cx.charge(1);
            let node = &graph.nodes[i];
            let result = if cyclic[i] {
                Err(())
            } else {
                match &node.src {
                    Source::Const(v) => Ok(EvalVal::Num(*v)),
                    Source::Exprs(v) => match v.get(ci).or(v.last()) {
                        Some(e) => eval_top(cx, e, &vals, &node.name),
                        None => Err(()),
                    },
                }
            };
            vals.insert(node.name.clone(), result);
        }
        let case = build_case(cx, ci, graph, &vals, decls, params);
        cases.push(case);
        case_envs.push(vals);
    }
    // Plan-level checks still run when a case failed, so every cause shows at once.
    (cases.into_iter().collect(), case_envs)
}

/// The plan's values that are not per case.
struct PlanSettings {
    atol: Option<f64>,
    rtol: Option<f64>,
    trials: u32,
    tunables: Vec<Tunable>,
    defines: Vec<(String, String)>,
}

/// Pass 10: tolerances, trials and tunables, from case 0 (blaming the expression that
/// gave them); a tuned name must have the same value in every case.
fn plan_settings(
    cx: &mut Ctx<'_>,
    decls: &Decls<'_>,
    graph: &Graph<'_>,
    params: &HashMap<&str, &Param>,
    case_envs: &[CaseEnv],
) -> Option<PlanSettings> {
    let env0 = case_envs.first()?;
    let num = |name: &str| match env0.get(name) {
        Some(Ok(EvalVal::Num(v))) => Some(*v),
        _ => None,
    };
    let first_line = cx.first_line();
    let span_of = |name: &str| match graph.get(name) {
        Some(Node {
            src: Source::Exprs(v),
            ..
        }) => v.first().map_or(first_line.clone(), |e| e.span.clone()),
        Some(Node { span: Some(s), .. }) => s.clone(),
        _ => first_line.clone(),
    };
    let tol = |cx: &mut Ctx<'_>, name: &str| -> Option<f64> {
        if params.contains_key(name) {
            return None;
        }
        let v = num(name)?.as_f64();
        if v < 0.0 {
            cx.error(
                span_of(name),
                format!("`{name}` is {v:?}; a tolerance must be zero or positive"),
            );
        }
        Some(v)
    };
    let atol = tol(cx, "atol");
    let rtol = tol(cx, "rtol");
    let mut trials = 3u32;
    if !params.contains_key("trials") {
        match num("trials") {
            Some(Value::Int(t)) if (1..=MAX_TRIALS).contains(&t) => trials = t as u32,
            Some(v) => cx.error(
                span_of("trials"),
                format!("`trials` is {v}; write a whole number from 1 to {MAX_TRIALS}"),
            ),
            None => {}
        }
    }
    let mut tunables = Vec::new();
    let mut defines = Vec::new();
    for t in &decls.tunes {
        cx.charge(1);
        let Some(current) = num(&t.name.text) else {
            continue;
        };
        // A tuned name given several values was reported as such already.
        let listed = matches!(graph.get(&t.name.text), Some(Node { src: Source::Exprs(v), .. }) if v.len() > 1);
        for (ci, e) in case_envs.iter().enumerate().skip(1).filter(|_| !listed) {
            cx.charge(1);
            if !matches!(e.get(&t.name.text), Some(Ok(EvalVal::Num(v))) if *v == current) {
                cx.error(span_of(&t.name.text), format!("`{}` is tuned, so it must have the same value in every case (case {ci} differs)", t.name.text));
                break;
            }
        }
        if t.kind == TunableKind::Define {
            defines.push((t.name.text.clone(), current.to_string()));
        }
        tunables.push(Tunable {
            name: t.name.text.clone(),
            values: t.values.clone(),
            current,
            kind: t.kind,
        });
    }
    Some(PlanSettings {
        atol,
        rtol,
        trials,
        tunables,
        defines,
    })
}

fn is_keyword(lang: Lang, name: &str) -> bool {
    is_launch_keyword(lang, name) || SETTINGS.contains(&name) || name == "block" || name == "smem"
}

struct ConstScope<'a> {
    lines: &'a [SpecLine],
    env: &'a EvalEnv,
}

impl Scope for ConstScope<'_> {
    fn lookup(&self, name: &str) -> Option<Result<Value, ()>> {
        match name {
            "sms" => Some(Ok(Value::Int(
                i64::try_from(self.env.sms).unwrap_or(i64::MAX),
            ))),
            "warp" => Some(Ok(Value::Int(32))),
            _ => None,
        }
    }
    fn text(&self, span: &ByteRange) -> String {
        text_of(self.lines, span)
    }
}

struct CaseScope<'a> {
    lines: &'a [SpecLine],
    vals: &'a HashMap<String, Result<EvalVal, ()>>,
}

impl Scope for CaseScope<'_> {
    fn lookup(&self, name: &str) -> Option<Result<Value, ()>> {
        match self.vals.get(name)? {
            Ok(EvalVal::Num(v)) => Some(Ok(*v)),
            _ => Some(Err(())),
        }
    }
    fn text(&self, span: &ByteRange) -> String {
        text_of(self.lines, span)
    }
}

fn eval_top(
    cx: &mut Ctx<'_>,
    e: &Expr,
    vals: &HashMap<String, Result<EvalVal, ()>>,
    name: &str,
) -> Result<EvalVal, ()> {
    let scope = CaseScope {
        lines: cx.lines,
        vals,
    };
    let report = |cx: &mut Ctx<'_>, r: EvalError| {
        if let EvalError::Diag { span, message } = r {
            cx.error(span, message);
        }
    };
    if let ExprKind::Tuple(items) = &e.kind {
        if name != "grid" && name != "block" {
            cx.error(
                e.span.clone(),
                "a tuple `(x, y, z)` is only allowed as the whole value of `grid` or `block`",
            );
            return Err(());
        }
        if items.len() > 3 {
            cx.error(
                e.span.clone(),
                format!(
                    "`{name}` has at most 3 dimensions (x, y, z), but {} are given",
                    items.len()
                ),
            );
            return Err(());
        }
        let mut out = Vec::new();
        for it in items {
            match eval(it, &scope) {
                Ok(v) => out.push((v, it.span.clone())),
                Err(r) => {
                    report(cx, r);
                    return Err(());
                }
            }
        }
        return Ok(EvalVal::Tuple(out));
    }
    match eval(e, &scope) {
        Ok(v) => Ok(EvalVal::Num(v)),
        Err(r) => {
            report(cx, r);
            Err(())
        }
    }
}

fn check_buffer<'a>(
    cx: &mut Ctx<'_>,
    params: &HashMap<&str, &Param>,
    mut spec: BufferSpec<'a>,
) -> Option<BufferSpec<'a>> {
    let kernel = cx.kernel;
    let n = &spec.name.text;
    let Some(p) = params.get(n.as_str()) else {
        let hint = did_you_mean(n, kernel.params.iter().map(|p| p.name.as_str()));
        cx.error(spec.name.span.clone(), format!("`{n}` is not a parameter of `{}`; a buffer line describes a pointer parameter{hint}", kernel.name));
        return None;
    };
    match &p.kind {
        ParamKind::Pointer { pointee, .. } => {
            match pointee_dtype(pointee) {
                Some((dt, width)) if dt == spec.dtype => spec.width = width,
                Some((dt, _)) => {
                    cx.error(spec.dtype_span.clone(), format!("`{n}` is `{pointee}*` in the signature but the spec says {}; write {dt}", spec.dtype));
                    return None;
                }
                None => {
                    let list = DType::ALL
                        .iter()
                        .map(|d| d.name())
                        .collect::<Vec<_>>()
                        .join(", ");
                    cx.error(
                        spec.dtype_span.clone(),
                        format!(
                            "`{n}` is `{pointee}*`, which matches no @bench element type ({list})"
                        ),
                    );
                    return None;
                }
            }
        }
        ParamKind::TritonArg { .. } => {}
        ParamKind::Scalar { .. } | ParamKind::Constexpr => {
            cx.error(
                spec.name.span.clone(),
                format!(
                    "`{n}` is {}, a scalar, not a pointer; give it a value: `{n} = ...`",
                    describe_param(p)
                ),
            );
            return None;
        }
        ParamKind::Other { ty } => {
            cx.error(spec.name.span.clone(), format!("`{n}` is `{ty}`, which @bench cannot pass as a buffer; only pointer parameters can be"));
            return None;
        }
    }
    if let Some(d) = spec.dist {
        let (arity, usage) = match d.name.text.as_str() {
            "uniform" => (2, "uniform(lo, hi)"),
            "normal" => (2, "normal(mean, std)"),
            "randint" => (2, "randint(lo, hi)"),
            "zeros" | "ones" | "arange" => (0, ""),
            other => {
                let hint = did_you_mean(
                    other,
                    ["uniform", "normal", "randint", "zeros", "ones", "arange"].into_iter(),
                );
                cx.error(
                    d.name.span.clone(),
                    format!("`{other}` is not a distribution; {DIST_LIST}{hint}"),
                );
                return None;
            }
        };
        if d.args.len() != arity {
            let msg = if arity == 0 {
                format!(
                    "`{}` takes no arguments; write `~ {}`",
                    d.name.text, d.name.text
                )
            } else {
                format!("`{}` takes {arity} arguments: `{usage}`", d.name.text)
            };
            cx.error(d.span.clone(), msg);
            return None;
        }
        let fractional = matches!(d.name.text.as_str(), "uniform" | "normal");
        if fractional && !spec.dtype.is_float() {
            cx.error(
                d.name.span.clone(),
                format!("`{}` gives fractional values, but `{n}` is {}; use randint(lo, hi), zeros, ones or arange", d.name.text, spec.dtype),
            );
            return None;
        }
        if d.name.text == "arange" && spec.dtype == DType::Bool {
            cx.error(
                d.name.span.clone(),
                format!("`arange` does not fit bool; use randint(0, 2), zeros or ones for `{n}`"),
            );
            return None;
        }
        if spec.role == Role::Out {
            cx.warn(
                d.span.clone(),
                format!("`{n}` is `out`, so it is poisoned before every launch and `~ {}` is unused; write `inout` if the kernel reads it", d.name.text),
            );
        }
    }
    Some(spec)
}

fn tunable_kind(
    cx: &mut Ctx<'_>,
    params: &HashMap<&str, &Param>,
    is_template: &dyn Fn(&str) -> bool,
    name: &Name,
) -> Option<TunableKind> {
    let n = name.text.as_str();
    let kernel = cx.kernel;
    if BUILTINS.contains(&n) {
        cx.error(
            name.span.clone(),
            format!("`{n}` is built in and cannot be tuned"),
        );
        return None;
    }
    match kernel.lang {
        Lang::Cuda => {
            if let Some(p) = params.get(n) {
                cx.error(
                    name.span.clone(),
                    format!("`{n}` is a runtime parameter of `{}`; tune compile-time values: a template parameter or a `-D` macro name", kernel.name),
                );
                let _ = p;
                return None;
            }
            if is_template(n) {
                return Some(TunableKind::TemplateParam);
            }
            if is_keyword(Lang::Cuda, n) || n == "num_warps" || n == "num_stages" {
                cx.error(
                    name.span.clone(),
                    format!("`{n}` cannot be tuned directly; tune a name and use it: `tune BLOCK in [128, 256]; block = BLOCK`"),
                );
                return None;
            }
            Some(TunableKind::Define)
        }
        Lang::Triton => match (n, params.get(n).map(|p| &p.kind)) {
            (_, Some(ParamKind::Constexpr)) => Some(TunableKind::Constexpr),
            ("num_warps", None) => Some(TunableKind::NumWarps),
            ("num_stages", None) => Some(TunableKind::NumStages),
            _ => {
                let constexprs: Vec<&str> = kernel
                    .params
                    .iter()
                    .filter(|p| p.kind == ParamKind::Constexpr)
                    .map(|p| p.name.as_str())
                    .collect();
                let hint = did_you_mean(
                    n,
                    constexprs
                        .iter()
                        .copied()
                        .chain(["num_warps", "num_stages"]),
                );
                cx.error(
                    name.span.clone(),
                    format!("`{n}` cannot be tuned: a Triton tunable is a tl.constexpr parameter of `{}`, num_warps or num_stages{hint}", kernel.name),
                );
                None
            }
        },
    }
}

fn check_reference(
    cx: &mut Ctx<'_>,
    kernels: &[Kernel],
    name: &Name,
    values: &[Expr],
) -> Option<String> {
    let kernel = cx.kernel;
    let target = match values {
        [e] => e.as_name().map(|n| (n.to_string(), e.span.clone())),
        _ => None,
    };
    let Some((target, span)) = target else {
        cx.error(
            list_span(values),
            "write `reference = KERNEL`, the name of another kernel in this file",
        );
        let _ = name;
        return None;
    };
    if target == kernel.name {
        cx.error(span, "a kernel cannot be its own reference; name another kernel, or remove the line to compare against the recorded baseline");
        return None;
    }
    let Some(other) = kernels.iter().find(|k| k.name == target) else {
        let others: Vec<&str> = kernels
            .iter()
            .map(|k| k.name.as_str())
            .filter(|k| *k != kernel.name)
            .collect();
        let hint = did_you_mean(&target, others.iter().copied());
        let list = if others.is_empty() {
            "this file has no other kernel".to_string()
        } else {
            format!("kernels here: {}", others.join(", "))
        };
        cx.error(
            span,
            format!("`{target}` is not a kernel in this file; {list}{hint}"),
        );
        return None;
    };
    let names = |k: &Kernel| {
        k.params
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if other.params.len() != kernel.params.len()
        || other
            .params
            .iter()
            .zip(&kernel.params)
            .any(|(a, b)| a.name != b.name)
    {
        cx.error(
            span,
            format!(
                "`{target}` cannot be the reference: its parameters ({}) differ from `{}`'s ({})",
                names(other),
                kernel.name,
                names(kernel)
            ),
        );
        return None;
    }
    for (a, b) in kernel.params.iter().zip(&other.params) {
        let same = match (&a.kind, &b.kind) {
            // A naive oracle may drop `const`; the element type must agree.
            (ParamKind::Pointer { pointee: x, .. }, ParamKind::Pointer { pointee: y, .. }) => {
                x == y
            }
            (ParamKind::TritonArg { .. }, ParamKind::TritonArg { .. }) => true,
            (x, y) => x == y,
        };
        if !same {
            cx.error(
                span,
                format!("`{target}` cannot be the reference: parameter `{}` is {} here but {} in `{target}`", a.name, describe_param(a), describe_param(b)),
            );
            return None;
        }
    }
    Some(target)
}

/// Evaluation order (dependencies first) and which nodes are caught in a cycle. Tarjan's
/// strongly connected components, with an explicit stack (a chain of thousands of names
/// must not overflow the thread stack), in time linear in names and uses: components
/// come out dependencies first, which is the evaluation order. Each cycle (a component
/// of several names, or a name that reads itself) is reported once, at the first of its
/// names the search reached, with one path around it.
fn topo_order(cx: &mut Ctx<'_>, graph: &Graph<'_>) -> (Vec<usize>, Vec<bool>) {
    const UNSEEN: usize = usize::MAX;
    let (nodes, deps) = (&graph.nodes, &graph.deps);
    let n = nodes.len();
    let mut index = vec![UNSEEN; n];
    let mut low = vec![0usize; n];
    let mut on_stack = vec![false; n];
    let mut stack: Vec<usize> = Vec::new();
    let mut next = 0usize;
    let mut order = Vec::with_capacity(n);
    let mut cyclic = vec![false; n];
    let mut component = vec![UNSEEN; n];
    for root in 0..n {
        if index[root] != UNSEEN {
            continue;
        }
        let mut calls: Vec<(usize, usize)> = vec![(root, 0)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(top) = calls.last_mut() {
            let (v, k) = *top;
            cx.charge(1);
            if let Some(&w) = deps[v].get(k) {
                top.1 += 1;
                if index[w] == UNSEEN {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    calls.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            calls.pop();
            if let Some(&(u, _)) = calls.last() {
                low[u] = low[u].min(low[v]);
            }
            if low[v] != index[v] {
                continue;
            }
            let at = stack.iter().rposition(|&x| x == v).unwrap_or(0);
            let members: Vec<usize> = stack.drain(at..).collect();
            for &x in &members {
                on_stack[x] = false;
                component[x] = v;
            }
            if members.len() > 1 || deps[v].contains(&v) {
                for &x in &members {
                    cyclic[x] = true;
                }
                report_cycle(cx, graph, v, &component);
            }
            order.extend(members);
        }
    }
    (order, cyclic)
}

/// Names shown in a cycle's message before it is shortened.
const CYCLE_PATH_SHOWN: usize = 12;

/// The error for the cycle through `start`: a shortest path from `start` back to itself
/// inside its component (breadth-first, linear in the component's size).
fn report_cycle(cx: &mut Ctx<'_>, graph: &Graph<'_>, start: usize, component: &[usize]) {
    let (nodes, deps) = (&graph.nodes, &graph.deps);
    let name = &nodes[start].name;
    let span = nodes[start].span.clone().unwrap_or_else(|| cx.first_line());
    if deps[start].contains(&start) {
        let msg = format!(
            "`{name}` is defined in terms of itself; give `{name}` a value that does not use it"
        );
        cx.error(span, msg);
        return;
    }
    let mut parent: HashMap<usize, usize> = HashMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    let mut last = start;
    'search: while let Some(v) = queue.pop_front() {
        for &w in &deps[v] {
            cx.charge(1);
            if component[w] != start {
                continue;
            }
            if w == start {
                last = v;
                break 'search;
            }
            if let std::collections::hash_map::Entry::Vacant(e) = parent.entry(w) {
                e.insert(v);
                queue.push_back(w);
            }
        }
    }
    let mut path = vec![start];
    let mut v = last;
    while v != start {
        path.push(v);
        v = parent.get(&v).copied().unwrap_or(start);
    }
    path[1..].reverse();
    path.push(start);
    let mut names: Vec<&str> = path.iter().map(|&x| nodes[x].name.as_str()).collect();
    if names.len() > CYCLE_PATH_SHOWN {
        let tail = names.split_off(names.len() - CYCLE_PATH_SHOWN / 2);
        names.truncate(CYCLE_PATH_SHOWN / 2);
        names.push("…");
        names.extend(tail);
    }
    cx.error(
        span,
        format!(
            "`{name}` depends on itself: {}; give one of them a value directly",
            names.join(" → ")
        ),
    );
}

/// The expression that produced `name`'s value in case `ci` (for diagnostics).
fn source_span(cx: &Ctx<'_>, graph: &Graph<'_>, name: &str, ci: usize) -> ByteRange {
    match graph.get(name) {
        Some(Node {
            src: Source::Exprs(v),
            ..
        }) => v
            .get(ci)
            .or(v.last())
            .map_or_else(|| cx.first_line(), |e| e.span.clone()),
        Some(Node { span: Some(s), .. }) => s.clone(),
        _ => cx.first_line(),
    }
}

/// One case of the spec: the sizes, every kernel argument, the launch and the roofline
/// counts, evaluated with case `ci`'s values. Errors go to `cx` at the spec line that
/// causes them; `None` when any piece failed.
fn build_case(
    cx: &mut Ctx<'_>,
    ci: usize,
    graph: &Graph<'_>,
    vals: &CaseEnv,
    decls: &Decls<'_>,
    params: &HashMap<&str, &Param>,
) -> Option<Case> {
    let kernel = cx.kernel;
    cx.charge(graph.nodes.len() + kernel.params.len());
    let at = CaseAt { ci, graph, vals };
    let sizes = case_sizes(kernel, &at, params);
    let (args, total_bytes, args_ok) = kernel_args(cx, &at, decls);
    let template_args = template_args(kernel, &at);
    let launch = match kernel.lang {
        Lang::Cuda => cuda_launch(cx, &at)?,
        Lang::Triton => triton_launch(cx, &at)?,
    };
    let bytes = roofline_count(cx, &at, params, "bytes")?.unwrap_or(total_bytes);
    let flops = roofline_count(cx, &at, params, "flops")?;
    let template_args = template_args?;
    args_ok.then_some(Case {
        sizes,
        args,
        template_args,
        launch,
        bytes,
        flops,
    })
}

/// Where a case's pieces are read from: its index, the value graph and its values.
struct CaseAt<'g, 'a> {
    ci: usize,
    graph: &'g Graph<'a>,
    vals: &'g CaseEnv,
}

impl CaseAt<'_, '_> {
    fn num(&self, name: &str) -> Option<Value> {
        match self.vals.get(name) {
            Some(Ok(EvalVal::Num(v))) => Some(*v),
            _ => None,
        }
    }
    /// The expression that gave `name` its value in this case.
    fn span(&self, cx: &Ctx<'_>, name: &str) -> ByteRange {
        source_span(cx, self.graph, name, self.ci)
    }
}

/// The size variables of the case: named values that are no parameter, keyword or
/// template parameter.
fn case_sizes(
    kernel: &Kernel,
    at: &CaseAt<'_, '_>,
    params: &HashMap<&str, &Param>,
) -> Vec<(String, Value)> {
    at.graph
        .nodes
        .iter()
        .filter(|n| {
            !params.contains_key(n.name.as_str())
                && !is_keyword(kernel.lang, &n.name)
                && !kernel.template_params.contains(&n.name)
        })
        .filter_map(|n| at.num(&n.name).map(|v| (n.name.clone(), v)))
        .collect()
}

/// Every kernel parameter's argument in signature order, the bytes the buffers move,
/// and whether every parameter got one.
fn kernel_args(cx: &mut Ctx<'_>, at: &CaseAt<'_, '_>, decls: &Decls<'_>) -> (Vec<Arg>, f64, bool) {
    let kernel = cx.kernel;
    let mut args = Vec::new();
    let mut total_bytes = 0f64;
    let mut ok = true;
    let scope = CaseScope {
        lines: cx.lines,
        vals: at.vals,
    };
    for p in &kernel.params {
        if let Some(b) = decls.buffer(&p.name) {
            match buffer_arg(cx, at.ci, p, b, &scope) {
                Some((arg, moved)) => {
                    total_bytes += moved;
                    args.push(arg);
                }
                None => ok = false,
            }
        } else if decls.nones.contains(&p.name.as_str()) {
            args.push(Arg::None {
                name: p.name.clone(),
            });
        } else if left_out(kernel, p, at.graph) {
            // A Triton parameter with a default that is no number (`ACT: tl.constexpr =
            // None`) and no value in the spec is left out of the launch: it runs with
            // its default.
        } else {
            let span = at.span(cx, &p.name);
            match at.num(&p.name).and_then(|v| scalar_arg(cx, p, v, span)) {
                Some(arg) => args.push(arg),
                None => ok = false,
            }
        }
    }
    (args, total_bytes, ok)
}

/// A buffer's argument for case `ci` and the bytes it moves (twice for `inout`): its
/// shape evaluated, bounded (4 GiB, the vector width of its C type) and its
/// distribution. `None` after reporting why.
fn buffer_arg(
    cx: &mut Ctx<'_>,
    ci: usize,
    p: &Param,
    b: &BufferSpec<'_>,
    scope: &CaseScope<'_>,
) -> Option<(Arg, f64)> {
    let shape = buffer_shape(cx, b, scope)?;
    let elems = shape.iter().try_fold(1u64, |a, d| a.checked_mul(*d));
    let bytes = elems.and_then(|e| e.checked_mul(b.dtype.size_bytes()));
    let (Some(elems), Some(bytes)) = (elems, bytes) else {
        cx.error(
            b.shape_span.clone(),
            format!(
                "`{}` has more elements than fit in 64 bits; a buffer may be at most 4 GiB",
                p.name
            ),
        );
        return None;
    };
    if bytes > MAX_BUFFER_BYTES {
        cx.error(
            b.shape_span.clone(),
            format!(
                "`{}` is {} ({elems} elements of {}) in case {ci}; a buffer may be at most 4 GiB",
                p.name,
                human_bytes(bytes as f64),
                b.dtype
            ),
        );
        return None;
    }
    if b.width > 1 && elems % b.width != 0 {
        let pointee = match &p.kind {
            ParamKind::Pointer { pointee, .. } => pointee.as_str(),
            _ => "",
        };
        cx.error(
            b.shape_span.clone(),
            format!(
                "`{}` is `{pointee}*`, so its element count must be a multiple of {}, but it is {elems} in case {ci}",
                p.name, b.width
            ),
        );
        return None;
    }
    let dist = eval_dist(cx, b, scope)?;
    let moved = bytes as f64 * if b.role == Role::InOut { 2.0 } else { 1.0 };
    let arg = Arg::Buffer {
        name: p.name.clone(),
        role: b.role,
        dtype: b.dtype,
        shape,
        elems,
        bytes,
        dist,
    };
    Some((arg, moved))
}

/// A buffer's shape: each dimension a positive integer, every failing one reported.
fn buffer_shape(cx: &mut Ctx<'_>, b: &BufferSpec<'_>, scope: &CaseScope<'_>) -> Option<Vec<u64>> {
    let mut shape = Vec::new();
    for d in b.dims {
        let text = text_of(cx.lines, &d.span);
        match eval(d, scope) {
            Ok(Value::Int(v)) if v > 0 => shape.push(v as u64),
            Ok(Value::Int(v)) => cx.error(
                d.span.clone(),
                format!(
                    "shape dimension `{text}` is {v}{}; sizes must be positive",
                    name_values(d, scope)
                ),
            ),
            Ok(v) => cx.error(
                d.span.clone(),
                format!("shape dimension `{text}` is {v}; it must be an integer"),
            ),
            Err(EvalError::Diag { span, message }) => cx.error(span, message),
            Err(EvalError::Silent) => {}
        }
    }
    (shape.len() == b.dims.len()).then_some(shape)
}

/// A scalar parameter's argument: a C scalar converted to its type (range checked), a
/// Triton argument by its annotation, or a `tl.constexpr`. `None` after reporting why
/// (or silently for parameters that take no scalar).
fn scalar_arg(cx: &mut Ctx<'_>, p: &Param, value: Value, span: ByteRange) -> Option<Arg> {
    let name = p.name.clone();
    match &p.kind {
        ParamKind::Scalar { ty: cty } => {
            let ty = scalar_ty(cty)?;
            match convert_scalar(value, ty) {
                Ok(value) => Some(Arg::Scalar { name, value, ty }),
                Err(why) => {
                    cx.error(span, format!("`{}` is `{cty}`, but {why}", p.name));
                    None
                }
            }
        }
        ParamKind::TritonArg { annotation } => {
            let ann = annotation.as_deref().unwrap_or("");
            let value = match value {
                Value::Float(f) if ann.contains("int") => {
                    cx.error(
                        span,
                        format!(
                            "`{}` is annotated `{ann}`, but {f:?} is not an integer",
                            p.name
                        ),
                    );
                    return None;
                }
                Value::Int(i) if ann.contains("float") => Value::Float(i as f64),
                v => v,
            };
            let ty = if matches!(value, Value::Int(_)) {
                ScalarTy::I64
            } else {
                ScalarTy::F64
            };
            Some(Arg::Scalar { name, value, ty })
        }
        ParamKind::Constexpr => Some(Arg::Constexpr { name, value }),
        ParamKind::Pointer { .. } | ParamKind::Other { .. } => None,
    }
}

/// The template parameters' values, in declaration order; `None` when one has none.
fn template_args(kernel: &Kernel, at: &CaseAt<'_, '_>) -> Option<Vec<Arg>> {
    kernel
        .template_params
        .iter()
        .map(|t| {
            at.num(t).map(|value| Arg::Constexpr {
                name: t.clone(),
                value,
            })
        })
        .collect()
}

/// A CUDA launch: grid, block and dynamic shared memory, checked against CUDA's limits.
fn cuda_launch(cx: &mut Ctx<'_>, at: &CaseAt<'_, '_>) -> Option<Launch> {
    let grid = dims3(cx, at.graph, at.vals, "grid", at.ci);
    let block = dims3(cx, at.graph, at.vals, "block", at.ci);
    let smem = match at.vals.get("smem") {
        None => Some(0),
        Some(Ok(EvalVal::Num(Value::Int(v)))) if *v >= 0 => Some(*v as u64),
        Some(Ok(EvalVal::Num(v))) => {
            cx.error(
                at.span(cx, "smem"),
                format!("`smem` is {v}; it is a byte count, zero or more"),
            );
            None
        }
        Some(_) => None,
    };
    if let Some(b) = block {
        let threads = b[0] * b[1] * b[2];
        if threads > 1024 || b[2] > 64 {
            cx.error(
                at.span(cx, "block"),
                format!("`block` is ({}, {}, {}) = {threads} threads; CUDA allows at most 1024 per block (and z <= 64)", b[0], b[1], b[2]),
            );
        }
    }
    if let Some(g) = grid {
        if g[0] > (1 << 31) - 1 || g[1] > 65535 || g[2] > 65535 {
            cx.error(
                at.span(cx, "grid"),
                format!(
                    "`grid` is ({}, {}, {}); CUDA allows x <= 2147483647 and y, z <= 65535",
                    g[0], g[1], g[2]
                ),
            );
        }
    }
    Some(Launch::Cuda {
        grid: grid?,
        block: block?,
        smem: smem?,
    })
}

/// A Triton launch: the grid, and `num_warps` / `num_stages` when given.
fn triton_launch(cx: &mut Ctx<'_>, at: &CaseAt<'_, '_>) -> Option<Launch> {
    let grid = dims_n(cx, at.graph, at.vals, "grid", at.ci);
    let num_warps = launch_option(
        cx,
        at,
        "num_warps",
        |v| (1..=64).contains(&v) && (v as u64).is_power_of_two(),
        "it must be a power of two from 1 to 64",
    );
    let num_stages = launch_option(
        cx,
        at,
        "num_stages",
        |v| (1..=16).contains(&v),
        "it must be a whole number from 1 to 16",
    );
    Some(Launch::Triton {
        grid: grid?,
        num_warps: num_warps.ok()?,
        num_stages: num_stages.ok()?,
    })
}

/// An optional integer launch option: absent, valid by `check`, or an error that
/// states `rule`.
fn launch_option(
    cx: &mut Ctx<'_>,
    at: &CaseAt<'_, '_>,
    name: &str,
    check: fn(i64) -> bool,
    rule: &str,
) -> Result<Option<u64>, ()> {
    match at.vals.get(name) {
        None => Ok(None),
        Some(Ok(EvalVal::Num(Value::Int(v)))) if check(*v) => Ok(Some(*v as u64)),
        Some(Ok(EvalVal::Num(v))) => {
            cx.error(at.span(cx, name), format!("`{name}` is {v}; {rule}"));
            Err(())
        }
        Some(_) => Err(()),
    }
}

/// `bytes` or `flops`: `Some(None)` when not given (or a kernel parameter of that
/// name), `None` after reporting a negative value.
fn roofline_count(
    cx: &mut Ctx<'_>,
    at: &CaseAt<'_, '_>,
    params: &HashMap<&str, &Param>,
    name: &str,
) -> Option<Option<f64>> {
    if params.contains_key(name) {
        return Some(None);
    }
    match at.vals.get(name) {
        None => Some(None),
        Some(Ok(EvalVal::Num(v))) if v.as_f64() >= 0.0 => Some(Some(v.as_f64())),
        Some(Ok(EvalVal::Num(v))) => {
            cx.error(
                at.span(cx, name),
                format!("`{name}` is {v}; it must be zero or more"),
            );
            None
        }
        Some(_) => None,
    }
}

fn convert_scalar(v: Value, ty: ScalarTy) -> Result<Value, String> {
    match (v, ty.int_range()) {
        (Value::Float(f), Some(_)) => Err(format!("{f:?} is not an integer")),
        (Value::Int(i), Some((lo, hi))) => {
            if (lo..=hi).contains(&(i as i128)) {
                Ok(Value::Int(i))
            } else {
                Err(format!("{i} does not fit (the range is {lo}..={hi})"))
            }
        }
        (v, None) => Ok(Value::Float(v.as_f64())),
    }
}

fn positive(cx: &mut Ctx<'_>, name: &str, v: Value, span: ByteRange) -> Option<u64> {
    match v {
        Value::Int(i) if i > 0 => Some(i as u64),
        v => {
            let text = text_of(cx.lines, &span);
            cx.error(
                span,
                format!("`{name}` dimension `{text}` is {v}; launch dimensions must be positive integers"),
            );
            None
        }
    }
}

fn dims_n(
    cx: &mut Ctx<'_>,
    graph: &Graph<'_>,
    vals: &CaseEnv,
    name: &str,
    ci: usize,
) -> Option<Vec<u64>> {
    match vals.get(name)? {
        Ok(EvalVal::Num(v)) => {
            let span = source_span(cx, graph, name, ci);
            Some(vec![positive(cx, name, *v, span)?])
        }
        Ok(EvalVal::Tuple(items)) => {
            let mut out = Vec::new();
            for (v, span) in items {
                out.push(positive(cx, name, *v, span.clone()));
            }
            out.into_iter().collect()
        }
        Err(()) => None,
    }
}

fn dims3(
    cx: &mut Ctx<'_>,
    graph: &Graph<'_>,
    vals: &CaseEnv,
    name: &str,
    ci: usize,
) -> Option<[u64; 3]> {
    let v = dims_n(cx, graph, vals, name, ci)?;
    let mut out = [1u64; 3];
    for (o, d) in out.iter_mut().zip(v) {
        *o = d;
    }
    Some(out)
}

fn eval_dist(cx: &mut Ctx<'_>, b: &BufferSpec<'_>, scope: &CaseScope<'_>) -> Option<Dist> {
    let Some(d) = b.dist else {
        return Some(if b.dtype.is_float() {
            Dist::Uniform { lo: -1.0, hi: 1.0 }
        } else if b.dtype == DType::Bool {
            Dist::RandInt { lo: 0, hi: 2 }
        } else {
            Dist::RandInt { lo: 0, hi: 100 }
        });
    };
    let mut args = Vec::new();
    for a in &d.args {
        match eval(a, scope) {
            Ok(v) => args.push(v),
            Err(EvalError::Diag { span, message }) => {
                cx.error(span, message);
                return None;
            }
            Err(EvalError::Silent) => return None,
        }
    }
    let text = text_of(cx.lines, &d.span);
    let dist = match (d.name.text.as_str(), args.as_slice()) {
        ("uniform", [lo, hi]) => {
            if lo.as_f64() > hi.as_f64() {
                cx.error(
                    d.span.clone(),
                    format!("`{text}` needs lo <= hi, but lo is {lo} and hi is {hi}"),
                );
                return None;
            }
            Dist::Uniform {
                lo: lo.as_f64(),
                hi: hi.as_f64(),
            }
        }
        ("normal", [mean, std]) => {
            if std.as_f64() < 0.0 {
                cx.error(
                    d.args[1].span.clone(),
                    format!("the standard deviation in `{text}` is {std}; it must be zero or more"),
                );
                return None;
            }
            Dist::Normal {
                mean: mean.as_f64(),
                std: std.as_f64(),
            }
        }
        ("randint", [lo, hi]) => {
            let (Value::Int(lo), Value::Int(hi)) = (*lo, *hi) else {
                cx.error(d.span.clone(), format!("`{text}` needs integer bounds"));
                return None;
            };
            if lo >= hi {
                cx.error(d.span.clone(), format!("`{text}` is half-open, so hi must be greater than lo (lo is {lo}, hi is {hi})"));
                return None;
            }
            if let Some((min, max)) = b.dtype.int_range() {
                if lo < min || hi - 1 > max {
                    cx.error(
                        d.span.clone(),
                        format!(
                            "`{text}` gives values outside what {} holds ({min}..={max})",
                            b.dtype
                        ),
                    );
                    return None;
                }
            }
            Dist::RandInt { lo, hi }
        }
        ("zeros", []) => Dist::Zeros,
        ("ones", []) => Dist::Ones,
        ("arange", []) => Dist::Arange,
        // Arity and names were checked with the statement.
        _ => return None,
    };
    Some(dist)
}

/// Whether the template parameter `t` is a parameter's type or element type (`const T*
/// x`, `T alpha`): a type, where the spec gives numbers.
fn names_a_type(kernel: &Kernel, t: &str) -> bool {
    kernel.params.iter().any(|p| {
        let ty = match &p.kind {
            ParamKind::Pointer { pointee, .. } => pointee.as_str(),
            ParamKind::Scalar { ty } => ty.as_str(),
            _ => return false,
        };
        ty.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|w| w == t)
    })
}
