//! From parsed statements and the kernel's signature to a `BenchPlan` or diagnostics.
//!
//! Order of work: collect statements (duplicates, misplaced names), check them against the
//! parameters, resolve names (undefined, cycles), decide the number of cases, then
//! evaluate every named value per case in dependency order and build each case. Statement
//! order in the spec never matters (SPEC.md's Triton example uses `BLOCK` before it is
//! defined). Interpretation choices where SPEC.md is silent:
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
/// A buffer above this many bytes is an error (SPEC.md, "Expressions").
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
}

impl Ctx<'_> {
    fn push(&mut self, severity: Severity, range: ByteRange, message: String) {
        // The same cause seen in several cases is reported once (the first case's message).
        if self
            .diags
            .iter()
            .any(|d| d.range == range && d.severity == severity)
        {
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
        self.lines
            .iter()
            .rev()
            .find(|l| l.offset <= span.start)
            .map_or(0, |l| l.line + 1)
    }
}

fn text_of(lines: &[SpecLine], span: &ByteRange) -> String {
    for l in lines {
        if span.start >= l.offset && span.end <= l.offset + l.text.len() {
            return l
                .text
                .get(span.start - l.offset..span.end - l.offset)
                .unwrap_or("")
                .to_string();
        }
    }
    String::new()
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
    let lines = &kernel.spec.lines;
    if lines.is_empty() {
        return SpecReport {
            plan: None,
            diagnostics: Vec::new(),
        };
    }
    let mut cx = Ctx {
        kernel,
        lines,
        diags: Vec::new(),
    };
    let plan = build(&mut cx, kernels, env, overrides);
    let has_error = cx.diags.iter().any(|d| d.severity == Severity::Error);
    cx.diags.sort_by_key(|d| (d.range.start, d.range.end));
    SpecReport {
        plan: if has_error { None } else { plan },
        diagnostics: cx.diags,
    }
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

fn build(
    cx: &mut Ctx<'_>,
    kernels: &[Kernel],
    env: &EvalEnv,
    overrides: &BTreeMap<String, Value>,
) -> Option<BenchPlan> {
    let kernel = cx.kernel;
    let lang = kernel.lang;
    let (stmts, errors) = parse_lines(cx.lines);
    // Names whose statement failed: their uses fail silently instead of cascading.
    let mut broken: HashSet<String> = HashSet::new();
    for e in errors {
        if let Some(n) = e.name {
            broken.insert(n);
        }
        cx.error(e.error.span, e.error.message);
    }
    let params: HashMap<&str, &Param> =
        kernel.params.iter().map(|p| (p.name.as_str(), p)).collect();
    let is_template = |n: &str| kernel.template_params.iter().any(|t| t == n);

    // ---- Collect statements -----------------------------------------------------------
    let mut defs: Vec<(&Name, &[Expr])> = Vec::new();
    let mut buffers: Vec<BufferSpec<'_>> = Vec::new();
    let mut tunes: Vec<TuneSpec<'_>> = Vec::new();
    let mut reference: Option<(&Name, &[Expr])> = None;
    let mut torch_reference: Option<(&str, &ByteRange)> = None;
    let mut seen: HashMap<String, ByteRange> = HashMap::new();
    for Stmt { kind, .. } in &stmts {
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
        if let Some(prev) = seen.get(&name.text) {
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
        seen.insert(name.text.clone(), name.span.clone());
        match kind {
            StmtKind::Assign { name, values } => {
                let param = params.get(name.text.as_str()).copied();
                if name.text == "reference" && param.is_none() {
                    reference = Some((name, values));
                    continue;
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
                        continue;
                    }
                } else if lang == Lang::Cuda
                    && (name.text == "num_warps" || name.text == "num_stages")
                {
                    cx.error(
                        name.span.clone(),
                        format!(
                            "`{}` is a Triton launch setting; a CUDA kernel takes `block = ...`",
                            name.text
                        ),
                    );
                    continue;
                } else if lang == Lang::Triton && (name.text == "block" || name.text == "smem") {
                    let msg = if name.text == "block" {
                        "`block` is a CUDA launch setting; a Triton kernel takes `num_warps = ...`"
                    } else {
                        "`smem` is a CUDA launch setting; Triton sizes shared memory itself"
                    };
                    cx.error(name.span.clone(), msg);
                    continue;
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
                    continue;
                }
                let launch_dims = param.is_none() && (name.text == "grid" || name.text == "block");
                if let Some(t) = values
                    .iter()
                    .find(|e| matches!(e.kind, ExprKind::Tuple(_)))
                    .filter(|_| !launch_dims)
                {
                    cx.error(t.span.clone(), "a tuple `(x, y, z)` is only allowed as the whole value of `grid` or `block`");
                    broken.insert(name.text.clone());
                    continue;
                }
                defs.push((name, values));
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
                if let Some(spec) = check_buffer(cx, &params, spec) {
                    buffers.push(spec);
                } else {
                    broken.insert(name.text.clone());
                }
            }
            StmtKind::TorchReference { text, span, .. } => torch_reference = Some((text, span)),
            StmtKind::Tune { .. } => {}
        }
    }
    let def_of = |n: &str| defs.iter().find(|(d, _)| d.text == n).map(|(_, v)| *v);

    for Stmt { kind, .. } in &stmts {
        let StmtKind::Tune { name, values, .. } = kind else {
            continue;
        };
        if tunes.iter().any(|t| t.name.text == name.text) {
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
        let Some(kind) = tunable_kind(cx, &params, &is_template, name) else {
            broken.insert(name.text.clone());
            continue;
        };
        let mut vals = Vec::new();
        let scope = ConstScope {
            lines: cx.lines,
            env,
        };
        for v in values {
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
        if let Some(d) = def_of(&name.text) {
            if d.len() > 1 {
                cx.error(
                    list_span(d),
                    format!("`{0}` is tuned, so it takes one value for all cases; list alternatives in `tune {0} in [...]`", name.text),
                );
                broken.insert(name.text.clone());
            }
        }
        tunes.push(TuneSpec {
            name,
            values: vals,
            kind,
        });
    }

    // ---- The graph of named values ------------------------------------------------------
    let mut nodes: Vec<Node<'_>> = defs
        .iter()
        .map(|(n, v)| Node {
            name: n.text.clone(),
            span: Some(n.span.clone()),
            src: Source::Exprs(v),
        })
        .collect();
    for t in &tunes {
        if !nodes.iter().any(|n| n.name == t.name.text) {
            let first = t.values.first().copied().unwrap_or(Value::Int(0));
            nodes.push(Node {
                name: t.name.text.clone(),
                span: Some(t.name.span.clone()),
                src: Source::Const(first),
            });
        }
    }
    for (name, v) in overrides {
        if let Some(n) = nodes.iter_mut().find(|n| &n.name == name) {
            n.src = Source::Const(*v);
            continue;
        }
        let settable = match params.get(name.as_str()) {
            Some(p) => matches!(
                p.kind,
                ParamKind::Scalar { .. } | ParamKind::TritonArg { .. } | ParamKind::Constexpr
            ),
            None => is_template(name),
        };
        if settable && !buffers.iter().any(|b| &b.name.text == name) {
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
    let index: HashMap<String, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.clone(), i))
        .collect();
    let tuple_valued = |n: &str| {
        index.get(n).is_some_and(|&i| matches!(&nodes[i].src, Source::Exprs(v) if v.iter().any(|e| matches!(e.kind, ExprKind::Tuple(_)))))
    };

    // ---- Names: every use must resolve --------------------------------------------------
    let mut uses: Vec<(String, ByteRange)> = Vec::new();
    let mut node_deps: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut unknown: HashSet<String> = HashSet::new();
    let mut all_exprs: Vec<(Option<usize>, &Expr)> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        if let Source::Exprs(v) = &n.src {
            all_exprs.extend(v.iter().map(|e| (Some(i), e)));
        }
    }
    for b in &buffers {
        all_exprs.extend(b.dims.iter().map(|e| (None, e)));
        if let Some(d) = b.dist {
            all_exprs.extend(d.args.iter().map(|e| (None, e)));
        }
    }
    let known: Vec<&str> = nodes
        .iter()
        .map(|n| n.name.as_str())
        .chain(BUILTINS)
        .collect();
    for (owner, e) in &all_exprs {
        let mut names = Vec::new();
        e.names(&mut names);
        for (n, span) in names {
            uses.push((n.clone(), span.clone()));
            if let Some(&j) = index.get(&n) {
                if let Some(o) = owner {
                    node_deps[*o].push(j);
                }
                if tuple_valued(&n) {
                    cx.error(
                        span,
                        format!("`{n}` is a tuple `(x, y, z)`; to use one part here, name it: `bx = 256; {n} = (bx, 1)`"),
                    );
                    unknown.insert(n);
                }
                continue;
            }
            if BUILTINS.contains(&n.as_str()) {
                continue;
            }
            unknown.insert(n.clone());
            if broken.contains(&n) {
                continue;
            }
            let msg = if buffers.iter().any(|b| b.name.text == n)
                || params
                    .get(n.as_str())
                    .is_some_and(|p| matches!(p.kind, ParamKind::Pointer { .. }))
            {
                format!("`{n}` is a buffer, not a number; use the size variable of its shape")
            } else {
                let hint = did_you_mean(&n, known.iter().copied());
                format!(
                    "`{n}` is not defined; define it with `{} {n} = ...`{hint}",
                    cx.prefix()
                )
            };
            cx.error(span, msg);
        }
    }

    // ---- Missing values -----------------------------------------------------------------
    let size_hint = if index.contains_key("n") {
        "n".to_string()
    } else {
        nodes
            .iter()
            .find(|n| !params.contains_key(n.name.as_str()) && !is_keyword(lang, &n.name))
            .map_or("n".to_string(), |n| n.name.clone())
    };
    for p in &kernel.params {
        let has_node = index.contains_key(&p.name) || broken.contains(&p.name);
        let has_buf = buffers.iter().any(|b| b.name.text == p.name) || broken.contains(&p.name);
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
                cx.error(p.range.clone(), format!("parameter `{0}` has no value in the @bench spec; add `{pre} {0} = 1024` or `{pre} tune {0} in [...]`", p.name));
            }
            ParamKind::Other { ty } => {
                cx.error(p.range.clone(), format!("parameter `{}` has type `{ty}`, which @bench cannot pass; only pointers and plain numbers can be benchmarked", p.name));
            }
            _ => {}
        }
    }
    for t in &kernel.template_params {
        if !index.contains_key(t) && !broken.contains(t) {
            cx.error(
                kernel.name_range.clone(),
                format!("template parameter `{t}` has no value in the @bench spec; add `// @bench {t} = 256` or `// @bench tune {t} in [...]`"),
            );
        }
    }
    for required in ["grid", "block"] {
        if required == "block" && lang == Lang::Triton {
            continue;
        }
        if !index.contains_key(required)
            && !broken.contains(required)
            && !params.contains_key(required)
        {
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

    // ---- PyTorch reference (before unused names: it may read sizes) ---------------------
    let mut torch_uses: Vec<String> = Vec::new();
    let torch_reference = torch_reference.and_then(|(text, span)| {
        let mut bufs: Vec<(&str, Role)> = buffers
            .iter()
            .map(|b| (b.name.text.as_str(), b.role))
            .collect();
        let order = |n: &str| kernel.params.iter().position(|p| p.name == n);
        bufs.sort_by_key(|(n, _)| order(n));
        let scope = torch_ref::Scope {
            buffers: bufs,
            numbers: defs
                .iter()
                .map(|(n, _)| n.text.as_str())
                .filter(|n| !is_keyword(lang, n))
                .chain(tunes.iter().map(|t| t.name.text.as_str()))
                .chain(
                    kernel
                        .params
                        .iter()
                        .filter(|p| !matches!(p.kind, ParamKind::Pointer { .. }))
                        .map(|p| p.name.as_str()),
                )
                .filter(|n| !buffers.iter().any(|b| b.name.text == *n))
                .fold(Vec::new(), |mut v, n| {
                    if !v.contains(&n) {
                        v.push(n);
                    }
                    v
                }),
            kernels: kernels
                .iter()
                .map(|k| k.name.as_str())
                .filter(|k| *k != kernel.name)
                .collect(),
            kernel: &kernel.name,
        };
        match torch_ref::check(text, span, &scope) {
            Ok((r, used)) => {
                torch_uses = used;
                Some(r)
            }
            Err(problems) => {
                for (s, m) in problems {
                    cx.error(s, m);
                }
                None
            }
        }
    });

    // ---- Unused names -------------------------------------------------------------------
    for (n, _) in &defs {
        let special = params.contains_key(n.text.as_str())
            || is_keyword(lang, &n.text)
            || is_template(&n.text)
            || tunes.iter().any(|t| t.name.text == n.text);
        if !special && !uses.iter().any(|(u, _)| *u == n.text) && !torch_uses.contains(&n.text) {
            cx.warn(
                n.span.clone(),
                format!(
                    "`{}` is never used; use it in a shape or launch expression, or remove it",
                    n.text
                ),
            );
        }
    }

    // ---- Reference ----------------------------------------------------------------------
    let reference = reference.and_then(|(name, values)| check_reference(cx, kernels, name, values));

    // ---- Cycles and evaluation order ----------------------------------------------------
    let (order, cyclic) = topo_order(cx, &nodes, &node_deps);

    // ---- Number of cases ----------------------------------------------------------------
    let mut cases_n: Option<(usize, &str)> = None;
    for n in &nodes {
        let Source::Exprs(v) = &n.src else { continue };
        if v.len() <= 1 {
            continue;
        }
        match cases_n {
            None => cases_n = Some((v.len(), &n.name)),
            Some((k, first)) if k != v.len() => {
                cx.error(
                    list_span(v),
                    format!("`{}` has {} values but `{first}` has {k}; give 1 value (used in every case) or {k}", n.name, v.len()),
                );
            }
            Some(_) => {}
        }
    }
    let n_cases = cases_n.map_or(1, |(k, _)| k);
    // Evaluate even when the layers above found errors: names that failed evaluate to a
    // silent error, so only independent causes (a division by zero on another line) add
    // diagnostics, as a compiler reports every independent error at once. The plan is
    // still withheld (in `check`) when there is any error.

    // ---- Evaluate every case --------------------------------------------------------------
    let sms = i64::try_from(env.sms).unwrap_or(i64::MAX);
    let mut cases = Vec::new();
    let mut case_envs: Vec<HashMap<String, Result<EvalVal, ()>>> = Vec::new();
    for ci in 0..n_cases {
        let mut vals: HashMap<String, Result<EvalVal, ()>> = HashMap::new();
        vals.insert("sms".into(), Ok(EvalVal::Num(Value::Int(sms))));
        vals.insert("warp".into(), Ok(EvalVal::Num(Value::Int(32))));
        for n in &unknown {
            vals.insert(n.clone(), Err(()));
        }
        for &i in &order {
            let node = &nodes[i];
            let result = if cyclic.contains(&i) {
                Err(())
            } else {
                match &node.src {
                    Source::Const(v) => Ok(EvalVal::Num(*v)),
                    Source::Exprs(v) => {
                        let e = v.get(ci).or(v.last());
                        match e {
                            Some(e) => eval_top(cx, e, &vals, &node.name),
                            None => Err(()),
                        }
                    }
                }
            };
            vals.insert(node.name.clone(), result);
        }
        let case = build_case(cx, ci, &nodes, &vals, &buffers, &tunes, &params);
        cases.push(case);
        case_envs.push(vals);
    }
    // Plan-level checks still run when a case failed, so every cause shows at once.
    let cases: Option<Vec<Case>> = cases.into_iter().collect();

    // ---- Plan-level values ----------------------------------------------------------------
    let env0 = case_envs.first()?;
    let num = |name: &str| match env0.get(name) {
        Some(Ok(EvalVal::Num(v))) => Some(*v),
        _ => None,
    };
    // Plan-level values come from case 0; blame the expression that gave them.
    let first_line = cx.first_line();
    let span_of = |name: &str| match index.get(name).map(|&i| &nodes[i]) {
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
    for t in &tunes {
        let Some(current) = num(&t.name.text) else {
            continue;
        };
        // A tuned name given several values was reported as such already.
        let listed = index
            .get(t.name.text.as_str())
            .is_some_and(|&i| matches!(&nodes[i].src, Source::Exprs(v) if v.len() > 1));
        for (ci, e) in case_envs.iter().enumerate().skip(1).filter(|_| !listed) {
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
    Some(BenchPlan {
        kernel: kernel.name.clone(),
        lang,
        cases: cases?,
        tunables,
        defines,
        atol,
        rtol,
        reference,
        torch_reference: torch_reference.map(Box::new),
        trials,
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

/// Evaluation order (dependencies first) and the nodes caught in a cycle, which are
/// reported once per cycle, naming it.
fn topo_order(
    cx: &mut Ctx<'_>,
    nodes: &[Node<'_>],
    deps: &[Vec<usize>],
) -> (Vec<usize>, HashSet<usize>) {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let mut mark = vec![Mark::New; nodes.len()];
    let mut order = Vec::new();
    let mut cyclic = HashSet::new();
    // An explicit stack: a chain of thousands of names must not overflow the thread stack.
    for root in 0..nodes.len() {
        if mark[root] != Mark::New {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        mark[root] = Mark::Open;
        while let Some(top) = stack.last_mut() {
            let (v, k) = *top;
            if let Some(&w) = deps[v].get(k) {
                top.1 += 1;
                match mark[w] {
                    Mark::New => {
                        mark[w] = Mark::Open;
                        stack.push((w, 0));
                    }
                    Mark::Open => {
                        let start = stack.iter().position(|(x, _)| *x == w).unwrap_or(0);
                        let members: Vec<usize> = stack[start..].iter().map(|(x, _)| *x).collect();
                        let mut path: Vec<&str> =
                            members.iter().map(|&x| nodes[x].name.as_str()).collect();
                        path.push(&nodes[w].name);
                        cyclic.extend(members.iter().copied());
                        let span = nodes[w].span.clone().unwrap_or_else(|| cx.first_line());
                        let msg = if members.len() == 1 {
                            format!("`{0}` is defined in terms of itself; give `{0}` a value that does not use it", nodes[w].name)
                        } else {
                            format!(
                                "`{}` depends on itself: {}; give one of them a value directly",
                                nodes[w].name,
                                path.join(" → ")
                            )
                        };
                        cx.error(span, msg);
                    }
                    Mark::Done => {}
                }
            } else {
                mark[v] = Mark::Done;
                order.push(v);
                stack.pop();
            }
        }
    }
    (order, cyclic)
}

/// The expression that produced `name`'s value in case `ci` (for diagnostics).
fn source_span(cx: &Ctx<'_>, nodes: &[Node<'_>], name: &str, ci: usize) -> ByteRange {
    match nodes.iter().find(|n| n.name == name) {
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

fn build_case(
    cx: &mut Ctx<'_>,
    ci: usize,
    nodes: &[Node<'_>],
    vals: &HashMap<String, Result<EvalVal, ()>>,
    buffers: &[BufferSpec<'_>],
    tunes: &[TuneSpec<'_>],
    params: &HashMap<&str, &Param>,
) -> Option<Case> {
    let kernel = cx.kernel;
    let lang = kernel.lang;
    let scope = CaseScope {
        lines: cx.lines,
        vals,
    };
    let num = |name: &str| match vals.get(name) {
        Some(Ok(EvalVal::Num(v))) => Some(*v),
        _ => None,
    };
    let mut ok = true;
    let sizes: Vec<(String, Value)> = nodes
        .iter()
        .filter(|n| {
            !params.contains_key(n.name.as_str())
                && !is_keyword(lang, &n.name)
                && !kernel.template_params.contains(&n.name)
        })
        .filter_map(|n| num(&n.name).map(|v| (n.name.clone(), v)))
        .collect();

    let mut args = Vec::new();
    let mut total_bytes = 0f64;
    for p in &kernel.params {
        if let Some(b) = buffers.iter().find(|b| b.name.text == p.name) {
            let mut shape = Vec::new();
            for d in b.dims {
                let text = text_of(cx.lines, &d.span);
                match eval(d, &scope) {
                    Ok(Value::Int(v)) if v > 0 => shape.push(v as u64),
                    Ok(Value::Int(v)) => {
                        cx.error(
                            d.span.clone(),
                            format!(
                                "shape dimension `{text}` is {v}{}; sizes must be positive",
                                name_values(d, &scope)
                            ),
                        );
                        ok = false;
                    }
                    Ok(v) => {
                        cx.error(
                            d.span.clone(),
                            format!("shape dimension `{text}` is {v}; it must be an integer"),
                        );
                        ok = false;
                    }
                    Err(EvalError::Diag { span, message }) => {
                        cx.error(span, message);
                        ok = false;
                    }
                    Err(EvalError::Silent) => ok = false,
                }
            }
            if shape.len() != b.dims.len() {
                continue;
            }
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
                ok = false;
                continue;
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
                ok = false;
                continue;
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
                ok = false;
                continue;
            }
            let Some(dist) = eval_dist(cx, b, &scope) else {
                ok = false;
                continue;
            };
            total_bytes += bytes as f64 * if b.role == Role::InOut { 2.0 } else { 1.0 };
            args.push(Arg::Buffer {
                name: p.name.clone(),
                role: b.role,
                dtype: b.dtype,
                shape,
                elems,
                bytes,
                dist,
            });
            continue;
        }
        let Some(value) = num(&p.name) else {
            ok = false;
            continue;
        };
        let span = source_span(cx, nodes, &p.name, ci);
        match &p.kind {
            ParamKind::Scalar { ty: cty } => {
                let Some(ty) = scalar_ty(cty) else {
                    ok = false;
                    continue;
                };
                match convert_scalar(value, ty) {
                    Ok(v) => args.push(Arg::Scalar {
                        name: p.name.clone(),
                        value: v,
                        ty,
                    }),
                    Err(why) => {
                        cx.error(span, format!("`{}` is `{cty}`, but {why}", p.name));
                        ok = false;
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
                        ok = false;
                        continue;
                    }
                    Value::Int(i) if ann.contains("float") => Value::Float(i as f64),
                    v => v,
                };
                let ty = if matches!(value, Value::Int(_)) {
                    ScalarTy::I64
                } else {
                    ScalarTy::F64
                };
                args.push(Arg::Scalar {
                    name: p.name.clone(),
                    value,
                    ty,
                });
            }
            ParamKind::Constexpr => args.push(Arg::Constexpr {
                name: p.name.clone(),
                value,
            }),
            ParamKind::Pointer { .. } | ParamKind::Other { .. } => ok = false,
        }
    }
    let mut template_args = Vec::new();
    for t in &kernel.template_params {
        match num(t) {
            Some(value) => template_args.push(Arg::Constexpr {
                name: t.clone(),
                value,
            }),
            None => ok = false,
        }
    }
    let _ = tunes;

    let launch = match lang {
        Lang::Cuda => {
            let grid = dims3(cx, nodes, vals, "grid", ci);
            let block = dims3(cx, nodes, vals, "block", ci);
            let smem = match vals.get("smem") {
                None => Some(0),
                Some(Ok(EvalVal::Num(Value::Int(v)))) if *v >= 0 => Some(*v as u64),
                Some(Ok(EvalVal::Num(v))) => {
                    cx.error(
                        source_span(cx, nodes, "smem", ci),
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
                        source_span(cx, nodes, "block", ci),
                        format!("`block` is ({}, {}, {}) = {threads} threads; CUDA allows at most 1024 per block (and z <= 64)", b[0], b[1], b[2]),
                    );
                }
            }
            if let Some(g) = grid {
                if g[0] > (1 << 31) - 1 || g[1] > 65535 || g[2] > 65535 {
                    cx.error(
                        source_span(cx, nodes, "grid", ci),
                        format!(
                            "`grid` is ({}, {}, {}); CUDA allows x <= 2147483647 and y, z <= 65535",
                            g[0], g[1], g[2]
                        ),
                    );
                }
            }
            match (grid, block, smem) {
                (Some(grid), Some(block), Some(smem)) => Launch::Cuda { grid, block, smem },
                _ => return None,
            }
        }
        Lang::Triton => {
            let grid = dims_n(cx, nodes, vals, "grid", ci);
            let mut opt =
                |name: &str, check: fn(i64) -> bool, rule: &str| -> Result<Option<u64>, ()> {
                    match vals.get(name) {
                        None => Ok(None),
                        Some(Ok(EvalVal::Num(Value::Int(v)))) if check(*v) => Ok(Some(*v as u64)),
                        Some(Ok(EvalVal::Num(v))) => {
                            cx.error(
                                source_span(cx, nodes, name, ci),
                                format!("`{name}` is {v}; {rule}"),
                            );
                            Err(())
                        }
                        Some(_) => Err(()),
                    }
                };
            let num_warps = opt(
                "num_warps",
                |v| (1..=64).contains(&v) && (v as u64).is_power_of_two(),
                "it must be a power of two from 1 to 64",
            );
            let num_stages = opt(
                "num_stages",
                |v| (1..=16).contains(&v),
                "it must be a whole number from 1 to 16",
            );
            match (grid, num_warps, num_stages) {
                (Some(grid), Ok(num_warps), Ok(num_stages)) => Launch::Triton {
                    grid,
                    num_warps,
                    num_stages,
                },
                _ => return None,
            }
        }
    };
    let nonneg = |cx: &mut Ctx<'_>, name: &str| -> Option<Option<f64>> {
        if params.contains_key(name) {
            return Some(None);
        }
        match vals.get(name) {
            None => Some(None),
            Some(Ok(EvalVal::Num(v))) if v.as_f64() >= 0.0 => Some(Some(v.as_f64())),
            Some(Ok(EvalVal::Num(v))) => {
                cx.error(
                    source_span(cx, nodes, name, ci),
                    format!("`{name}` is {v}; it must be zero or more"),
                );
                None
            }
            Some(_) => None,
        }
    };
    let bytes = nonneg(cx, "bytes")?.unwrap_or(total_bytes);
    let flops = nonneg(cx, "flops")?;
    ok.then_some(Case {
        sizes,
        args,
        template_args,
        launch,
        bytes,
        flops,
    })
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
    nodes: &[Node<'_>],
    vals: &HashMap<String, Result<EvalVal, ()>>,
    name: &str,
    ci: usize,
) -> Option<Vec<u64>> {
    match vals.get(name)? {
        Ok(EvalVal::Num(v)) => {
            let span = source_span(cx, nodes, name, ci);
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
    nodes: &[Node<'_>],
    vals: &HashMap<String, Result<EvalVal, ()>>,
    name: &str,
    ci: usize,
) -> Option<[u64; 3]> {
    let v = dims_n(cx, nodes, vals, name, ci)?;
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
