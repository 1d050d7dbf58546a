//! Checking drafts before they become candidates, shared by every rewrite that edits
//! the `@bench` launch: the kernel's language, its current plan, and [`finish`], which
//! keeps only the drafts that change the text, parse with no new syntax error, still
//! define the kernel and whose spec still plans, so the step loop never sees a spec error
//! that a rewrite made. A draft that fails a check is dropped with its reason; when none
//! is left the rewrite is `NotApplicable` with every reason.

use super::{Candidate, RewriteContext, RewriteError};
use crate::document::Document;
use crate::spec::{self, BenchPlan, EvalEnv};
use crate::syntax::{self, Lang};

pub(super) type R = Result<Vec<Candidate>, RewriteError>;

pub(super) fn not_applicable(message: impl Into<String>) -> RewriteError {
    RewriteError::NotApplicable(message.into())
}

pub(super) fn bad_param(name: &str, message: impl Into<String>) -> RewriteError {
    RewriteError::BadParam {
        name: name.to_string(),
        message: message.into(),
    }
}

/// `NotApplicable` unless the kernel is written in `lang`.
pub(super) fn require_lang(
    cx: &RewriteContext<'_>,
    lang: Lang,
    id: &str,
) -> Result<(), RewriteError> {
    if cx.lang == lang && cx.kernel.lang == lang {
        return Ok(());
    }
    let (want, have) = match lang {
        Lang::Cuda => ("CUDA", "a Triton"),
        Lang::Triton => ("Triton", "a CUDA"),
    };
    Err(not_applicable(format!(
        "`{id}` rewrites {want} kernels; `{}` is {have} kernel",
        cx.kernel.name
    )))
}

/// The kernel's plan as it stands; a rewrite of a kernel whose spec does not plan could
/// not be checked, so that is `NotApplicable`.
pub(super) fn current_plan(cx: &RewriteContext<'_>) -> Result<BenchPlan, RewriteError> {
    let report = spec::analyze(cx.kernel, &cx.model.kernels, &EvalEnv::default());
    report.plan.ok_or_else(|| {
        not_applicable(if cx.kernel.spec.lines.is_empty() {
            format!(
                "`{}` has no @bench spec; add one (code action \"Insert @bench spec\") first",
                cx.kernel.name
            )
        } else {
            format!(
                "`{}`'s @bench spec has errors; fix them first (`kernel-lsp check` lists them)",
                cx.kernel.name
            )
        })
    })
}

/// The value of a loop bound or start in case `case`: an integer literal or a scalar
/// argument of the kernel.
pub(super) fn case_int(case: &spec::Case, e: &str) -> Option<i64> {
    let e = e.trim();
    super::poly::int_literal(e).or_else(|| {
        case.args.iter().find_map(|a| match a {
            spec::Arg::Scalar {
                name,
                value: spec::Value::Int(v),
                ..
            } if name == e => Some(*v),
            _ => None,
        })
    })
}

/// Why the constexpr `name` (now `value`) is a problem size and not a tiling choice, or
/// None: the spec ties it to a buffer's shape when setting it to twice its value changes
/// a buffer's dimensions (`HD = 64` that `q: in f16[BH, L, HD]` reads). Such a constexpr
/// spans a whole dimension (`tl.arange(0, HD)` with no mask), so sweeping it would change
/// the problem, not how it is tiled.
pub(super) fn sizes_a_buffer(
    cx: &RewriteContext<'_>,
    plan: &BenchPlan,
    name: &str,
    value: i64,
) -> Option<String> {
    let shapes = |p: &BenchPlan| -> Vec<(String, Vec<u64>)> {
        p.cases
            .iter()
            .flat_map(|c| c.args.iter())
            .filter_map(|a| match a {
                spec::Arg::Buffer { name, shape, .. } => Some((name.clone(), shape.clone())),
                _ => None,
            })
            .collect()
    };
    let overrides = [(name.to_string(), spec::Value::Int(value.checked_mul(2)?))].into();
    let other = spec::analyze_with(
        cx.kernel,
        &cx.model.kernels,
        &EvalEnv::default(),
        &overrides,
    );
    let (before, after) = (shapes(plan), shapes(other.plan.as_ref()?));
    let (buffer, _) = before.iter().zip(&after).find(|(b, a)| b.1 != a.1)?.0;
    Some(format!(
        "`{name}` is a problem size, not a block size: the shape of `{buffer}` changes with it"
    ))
}

/// `text` with several spec values set at once: `NAME = V` replaces the value of an
/// existing `NAME = ...` statement; names without one go on one new `@bench` line after
/// the block's last, with that line's comment prefix. (One value at a time is
/// `edit::set_spec_value`; setting several that way would move the offsets under the
/// later ones.)
pub(super) fn set_spec_values(
    text: &str,
    kernel: &crate::syntax::Kernel,
    values: &[(String, String)],
) -> Result<String, super::edits::EditError> {
    set_spec_statements(text, kernel, values, &[])
}

/// [`set_spec_values`], with `extra` statements (`tune NAME in [...]`) ending the new
/// `@bench` line.
pub(super) fn set_spec_statements(
    text: &str,
    kernel: &crate::syntax::Kernel,
    values: &[(String, String)],
    extra: &[String],
) -> Result<String, super::edits::EditError> {
    use super::edits::{Edit, Edits};
    let mut e = Edits::new();
    let mut new_line: Vec<String> = Vec::new();
    for (name, value) in values {
        match crate::optimize::edit::spec_assignment(kernel, name) {
            Some(a) => e.extend([Edit::replace(a.range, value.clone())]),
            None => new_line.push(format!("{name} = {value}")),
        }
    }
    new_line.extend(extra.iter().cloned());
    if let (Some(last), false) = (kernel.spec.lines.last(), new_line.is_empty()) {
        let line_start = text[..last.offset].rfind('\n').map_or(0, |i| i + 1);
        let line_end = text[last.offset..]
            .find('\n')
            .map_or(text.len(), |i| last.offset + i);
        let prefix = &text[line_start..last.offset];
        let nl = if text[..line_end].ends_with('\r') {
            "\r\n"
        } else {
            "\n"
        };
        let at = if text[..line_end].ends_with('\r') {
            line_end - 1
        } else {
            line_end
        };
        e.extend([Edit::insert(
            at,
            format!("{nl}{} {}", prefix.trim_end(), new_line.join("; ")),
        )]);
    }
    e.apply(text)
}

/// A candidate before [`finish`] has checked it.
pub(super) struct Draft {
    pub label: String,
    pub text: String,
}

/// The drafts that change the text, parse without new syntax errors and whose spec
/// plans, deduplicated; `dropped` holds reasons for candidates already given up on. When
/// nothing is left, `NotApplicable` says why each one went.
pub(super) fn finish(cx: &RewriteContext<'_>, drafts: Vec<Draft>, mut dropped: Vec<String>) -> R {
    let mut out: Vec<Candidate> = Vec::new();
    for d in drafts {
        if d.text == cx.text || out.iter().any(|c| c.text == d.text) {
            continue;
        }
        match still_plans(cx, &d.text) {
            Ok(()) => out.push(Candidate {
                label: d.label,
                text: d.text,
            }),
            Err(why) => dropped.push(format!("{}: {why}", d.label)),
        }
    }
    if out.is_empty() {
        dropped.dedup();
        return Err(not_applicable(if dropped.is_empty() {
            format!("nothing to change in `{}`", cx.kernel.name)
        } else {
            format!(
                "no usable candidate for `{}`: {}",
                cx.kernel.name,
                dropped.join("; ")
            )
        }));
    }
    Ok(out)
}

/// Does `text` parse as well as the original and does the kernel's spec still plan?
pub(super) fn still_plans(cx: &RewriteContext<'_>, text: &str) -> Result<(), String> {
    let doc = Document::new(cx.lang, 0, text);
    let tree = doc
        .tree()
        .ok_or("the parser gave up on the rewritten file")?;
    let model = syntax::analyze(cx.lang, text, tree);
    if model.syntax_errors.len() > cx.model.syntax_errors.len() {
        let first = model
            .syntax_errors
            .first()
            .map_or(String::new(), |e| e.message.clone());
        return Err(format!("the rewrite leaves a syntax error ({first})"));
    }
    let kernel = model
        .kernel(&cx.kernel.name)
        .ok_or("the kernel is no longer found in the rewritten file")?;
    let report = spec::analyze(kernel, &model.kernels, &EvalEnv::default());
    if report.plan.is_some() {
        return Ok(());
    }
    Err(report.diagnostics.first().map_or_else(
        || "the @bench spec no longer plans".to_string(),
        |d| format!("the @bench spec no longer plans: {}", d.message),
    ))
}

#[cfg(test)]
pub(super) mod testing {
    //! Running a rewrite on a fixture the way the step loop does, and showing the part of
    //! a candidate a reviewer needs: the kernel's spec lines and definition.

    use std::collections::BTreeMap;

    use crate::document::Document;
    use crate::optimize::rewrite::{apply, Candidate, RewriteContext, RewriteError};
    use crate::syntax::{self, Lang};

    /// The catalog steps whose facts hold for CUDA `kernel` in `text`, in the order a
    /// fresh policy ranks them.
    pub fn ranked_steps(text: &str, kernel: &str) -> Vec<String> {
        use crate::optimize::{catalog::Catalog, facts::static_facts, policy::Policy};
        let doc = Document::new(Lang::Cuda, 0, text);
        let tree = doc.tree().unwrap();
        let model = syntax::analyze(Lang::Cuda, text, tree);
        let k = model.kernel(kernel).unwrap();
        let f = static_facts(Lang::Cuda, text, tree, &model, k);
        let cat = Catalog::embedded();
        let arms = cat.applicable(Lang::Cuda, &f);
        let ranked = Policy::new().rank(&f, &arms, &Default::default());
        ranked.into_iter().map(|c| c.id).collect()
    }

    pub fn run(
        lang: Lang,
        src: &str,
        kernel: &str,
        id: &str,
        params: serde_json::Value,
    ) -> Result<Vec<Candidate>, RewriteError> {
        in_context(lang, src, kernel, params, |cx| apply(id, cx))
    }

    /// `f` on the context a rewrite of `kernel` in `src` gets (for tests of a rewrite's
    /// inner steps).
    pub fn in_context<T>(
        lang: Lang,
        src: &str,
        kernel: &str,
        params: serde_json::Value,
        f: impl FnOnce(&RewriteContext<'_>) -> T,
    ) -> T {
        let doc = Document::new(lang, 0, src);
        let tree = doc.tree().expect("the fixture parses");
        let model = syntax::analyze(lang, src, tree);
        let k = model.kernel(kernel).expect("the fixture has the kernel");
        let params: BTreeMap<String, serde_json::Value> = match params {
            serde_json::Value::Object(m) => m.into_iter().collect(),
            _ => BTreeMap::new(),
        };
        let cx = RewriteContext {
            lang,
            text: src,
            tree,
            model: &model,
            kernel: k,
            params: &params,
        };
        f(&cx)
    }

    /// A CUDA rewrite on a fixture.
    pub fn cuda(
        src: &str,
        kernel: &str,
        id: &str,
        params: serde_json::Value,
    ) -> Result<Vec<Candidate>, RewriteError> {
        run(Lang::Cuda, src, kernel, id, params)
    }

    /// A Triton rewrite on a fixture.
    pub fn triton(
        src: &str,
        kernel: &str,
        id: &str,
        params: serde_json::Value,
    ) -> Result<Vec<Candidate>, RewriteError> {
        run(Lang::Triton, src, kernel, id, params)
    }

    /// The candidate labelled `label`.
    pub fn find<'c>(out: &'c [Candidate], label: &str) -> &'c Candidate {
        out.iter()
            .find(|c| c.label == label)
            .unwrap_or_else(|| panic!("no candidate {label}; have {:?}", labels(out)))
    }

    /// An elementwise kernel with the early-return guard, locals, comments and index uses.
    pub const LEAKY_RELU: &str = "#include <cuda_fp16.h>\n// @bench n = 1000, 77\n// @bench x: in f32[n]; y: out f32[n]\n// @bench grid = cdiv(n, 128); block = 128\n__global__ void leaky(int n, const float* __restrict__ x, float* __restrict__ y) {\n    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n    // past the end\n    if (i >= n) return;\n    float v = x[i];\n    // keep small negatives\n    y[i] = v > 0.0f ? v : 1e-6f * i;\n}\n";

    pub fn labels(out: &[Candidate]) -> Vec<&str> {
        out.iter().map(|c| c.label.as_str()).collect()
    }

    /// The candidate's spec block and kernel definition, and a check that nothing outside
    /// them changed.
    pub fn show(lang: Lang, before: &str, c: &Candidate, kernel: &str) -> String {
        let region = |text: &str| {
            let doc = Document::new(lang, 0, text);
            let model = syntax::analyze(lang, text, doc.tree().expect("parses"));
            let k = model.kernel(kernel).expect("kernel");
            let start = k.spec.range.as_ref().map_or(k.def_range.start, |r| r.start);
            start..k.def_range.end
        };
        let (old, new) = (region(before), region(&c.text));
        assert_eq!(
            before[..old.start],
            c.text[..new.start],
            "text before the kernel changed"
        );
        assert_eq!(
            before[old.end..],
            c.text[new.end..],
            "text after the kernel changed"
        );
        c.text[new].to_string()
    }

    /// The first candidate of a CUDA rewrite on a fixture, as [`show`] shows it.
    pub fn first_shown(src: &str, kernel: &str, id: &str, params: serde_json::Value) -> String {
        let out = cuda(src, kernel, id, params).unwrap_or_else(|e| panic!("{kernel}: {e}"));
        show(Lang::Cuda, src, &out[0], kernel)
    }

    /// Each of `wants` is in `text`.
    pub fn assert_has(text: &str, wants: &[&str]) {
        for want in wants {
            assert!(text.contains(want), "{want}\n{text}");
        }
    }

    pub fn not_applicable(r: Result<Vec<Candidate>, RewriteError>) -> String {
        match r {
            Err(RewriteError::NotApplicable(m)) => m,
            other => panic!("expected NotApplicable, got {other:?}"),
        }
    }
}
