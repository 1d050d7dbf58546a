//! The shared checking engine: turns a document's text and tree into findings (syntax
//! errors, spec errors, compiler messages) with byte ranges. The LSP layer and the
//! `check` command both call this and only differ in how they render a `Finding`.
//! Pure except for [`compile`], which runs NVRTC/ptxas and belongs on a blocking thread.

mod arange;
mod host_items;
mod stray_spec;
mod triton_globals;

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde::Serialize;

use crate::spec::{self, EvalEnv, SpecReport};
use crate::syntax::{self, ByteRange, FileModel, Lang};
use crate::toolchain::{self, CheckResult, KernelResources, MessageSeverity, Toolchain};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
    Information,
    Hint,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FindingSource {
    Syntax,
    Spec,
    Nvrtc,
    Nvcc,
    Ptxas,
    Limits,
}

impl FindingSource {
    pub fn label(self) -> &'static str {
        match self {
            FindingSource::Syntax => "syntax",
            FindingSource::Spec => "@bench",
            FindingSource::Nvrtc => "nvrtc",
            FindingSource::Nvcc => "nvcc",
            FindingSource::Ptxas => "ptxas",
            FindingSource::Limits => "kernel-lsp",
        }
    }
}

/// One thing to tell the author, anchored at a byte range of the document.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    pub range: ByteRange,
    pub severity: Severity,
    pub source: FindingSource,
    pub message: String,
}

/// Everything known about one version of a file without running a compiler.
#[derive(Debug)]
pub struct FileAnalysis {
    pub model: FileModel,
    /// One report per kernel, in `model.kernels` order.
    pub specs: Vec<SpecReport>,
    /// Set when only part of the checks ran, saying why: the file is past the size limit
    /// (syntax only), the parser gave up, or the time budget ran out.
    pub size_note: Option<String>,
}

/// Options for [`analyze`] that come from settings.
#[derive(Clone, Debug)]
pub struct AnalyzeOptions {
    pub env: EvalEnv,
    /// Past this many bytes only syntax is checked.
    pub max_file_bytes: usize,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        AnalyzeOptions {
            env: EvalEnv::default(),
            max_file_bytes: 2 * 1024 * 1024,
        }
    }
}

/// Spec reports of one document's kernels, keyed by what a report depends on, with
/// ranges stored relative to the kernel, so typing elsewhere in a file with hundreds of
/// kernels re-evaluates only the kernel whose spec or signature changed.
#[derive(Default)]
pub struct SpecCache {
    reports: HashMap<u64, SpecReport>,
    /// Kernel discovery's facts of each region of the document (`syntax::SyntaxCache`).
    syntax: syntax::SyntaxCache,
}

impl SpecCache {
    /// Forget kernel discovery's per-region facts (kept only while the document keeps
    /// its parse: a new whole parse cuts new regions), keeping the spec reports.
    pub fn drop_syntax(&mut self) {
        self.syntax = syntax::SyntaxCache::default();
    }

    fn report(
        &mut self,
        kernel: &syntax::Kernel,
        kernels: &[syntax::Kernel],
        file_key: u64,
        env: &EvalEnv,
        next: &mut HashMap<u64, SpecReport>,
    ) -> SpecReport {
        let anchor = kernel
            .spec
            .range
            .as_ref()
            .map_or(kernel.def_range.start, |r| {
                r.start.min(kernel.def_range.start)
            });
        let key = spec_key(kernel, anchor, file_key, env);
        let relative = match self
            .reports
            .remove(&key)
            .or_else(|| next.get(&key).cloned())
        {
            Some(r) => r,
            None => shift(spec::analyze(kernel, kernels, env), anchor, false),
        };
        let absolute = shift(relative.clone(), anchor, true);
        next.insert(key, relative);
        absolute
    }
}

/// What a kernel's spec report depends on: its spec lines, name and signature (with
/// positions relative to `anchor`), the other kernels' signatures (for `reference =`),
/// and the evaluation environment.
fn spec_key(k: &syntax::Kernel, anchor: usize, file_key: u64, env: &EvalEnv) -> u64 {
    let rel = |x: usize| x.saturating_sub(anchor);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    file_key.hash(&mut h);
    env.sms.hash(&mut h);
    k.name.hash(&mut h);
    (rel(k.name_range.start), rel(k.name_range.end)).hash(&mut h);
    k.lang.hash(&mut h);
    k.extern_c.hash(&mut h);
    k.template_params.hash(&mut h);
    for l in &k.spec.lines {
        (rel(l.offset), &l.text).hash(&mut h);
    }
    for p in &k.params {
        (&p.name, rel(p.range.start), rel(p.range.end)).hash(&mut h);
        hash_param_kind(&p.kind, &mut h);
    }
    h.finish()
}

fn hash_param_kind(kind: &syntax::ParamKind, h: &mut impl Hasher) {
    use syntax::ParamKind::*;
    match kind {
        Pointer { pointee, is_const } => (0u8, pointee, is_const).hash(h),
        Scalar { ty } => (1u8, ty).hash(h),
        TritonArg { annotation } => (2u8, annotation).hash(h),
        Constexpr => 3u8.hash(h),
        Other { ty } => (4u8, ty).hash(h),
    }
}

/// The kernels' names and parameters, which `reference = K` checks read.
fn file_key(kernels: &[syntax::Kernel]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for k in kernels {
        k.name.hash(&mut h);
        for p in &k.params {
            p.name.hash(&mut h);
            hash_param_kind(&p.kind, &mut h);
        }
    }
    h.finish()
}

fn shift(mut r: SpecReport, anchor: usize, to_absolute: bool) -> SpecReport {
    for d in &mut r.diagnostics {
        d.range = if to_absolute {
            d.range.start + anchor..d.range.end + anchor
        } else {
            d.range.start.saturating_sub(anchor)..d.range.end.saturating_sub(anchor)
        };
    }
    r
}

pub fn analyze(
    lang: Lang,
    text: &str,
    tree: Option<&tree_sitter::Tree>,
    opts: &AnalyzeOptions,
) -> FileAnalysis {
    analyze_cached(lang, text, tree, opts, &mut SpecCache::default())
}

/// [`analyze`], reusing the spec reports of kernels that did not change since the last
/// call with the same cache.
pub fn analyze_cached(
    lang: Lang,
    text: &str,
    tree: Option<&tree_sitter::Tree>,
    opts: &AnalyzeOptions,
    cache: &mut SpecCache,
) -> FileAnalysis {
    analyze_within(lang, text, tree, opts, cache, &mut || None)
}

/// [`analyze_cached`] that asks `stop` before each kernel's spec: when it answers with a
/// reason, the remaining kernels are left unchecked and the analysis carries a note
/// that says so (and why), which `findings` shows at the top of the file.
pub fn analyze_within(
    lang: Lang,
    text: &str,
    tree: Option<&tree_sitter::Tree>,
    opts: &AnalyzeOptions,
    cache: &mut SpecCache,
    stop: &mut dyn FnMut() -> Option<String>,
) -> FileAnalysis {
    let regions = tree.map(|t| vec![syntax::Region::whole(t, text.len())]);
    analyze_regions_within(lang, text, regions.as_deref(), opts, cache, stop)
}

/// The syntax-only check of a text past `maxFileBytes`, parsed in pieces
/// (`document::pieces`) so that no more than one piece's tree is held at a time: its
/// syntax errors and the note that nothing else was checked. `stop` ends the parse
/// early, with a note naming why.
pub fn syntax_only_in_pieces(
    lang: Lang,
    text: &str,
    opts: &AnalyzeOptions,
    stop: &mut dyn FnMut() -> Option<String>,
) -> FileAnalysis {
    let mut errors = Vec::new();
    let mut why = None;
    let finished = crate::document::pieces::parse_in_pieces(
        lang,
        text,
        &mut || {
            why = why.take().or_else(&mut *stop);
            why.is_some()
        },
        &mut |region| errors.extend(syntax::syntax_only(lang, text, &[region]).syntax_errors),
    );
    let mut note = format!(
        "this file is {}: past {} kernel-lsp checks syntax only (setting maxFileBytes)",
        human_bytes(text.len() as u64),
        human_bytes(opts.max_file_bytes as u64)
    );
    if !finished {
        let why = why.unwrap_or_else(|| "the parser gave up".into());
        note.push_str(&format!(
            "; {why} while parsing, so later syntax errors are not shown"
        ));
    }
    let mut model = empty_model(lang);
    model.syntax_errors = errors;
    FileAnalysis {
        model,
        specs: Vec::new(),
        size_note: Some(note),
    }
}

/// [`analyze_within`] of a document parsed as regions (`document::Forest`): kernel
/// discovery re-walks only the regions not seen by an earlier call with the same cache.
pub fn analyze_regions_within(
    lang: Lang,
    text: &str,
    regions: Option<&[syntax::Region]>,
    opts: &AnalyzeOptions,
    cache: &mut SpecCache,
    stop: &mut dyn FnMut() -> Option<String>,
) -> FileAnalysis {
    let Some(regions) = regions else {
        // The parser only gives up on cancellation or a time-out; say so rather than
        // showing an empty file as clean.
        return FileAnalysis {
            model: empty_model(lang),
            specs: Vec::new(),
            size_note: Some("the parser gave up on this file; no checks ran".into()),
        };
    };
    if text.len() > opts.max_file_bytes {
        let note = format!(
            "this file is {}: past {} kernel-lsp checks syntax only (setting maxFileBytes)",
            human_bytes(text.len() as u64),
            human_bytes(opts.max_file_bytes as u64)
        );
        // No kernel models and no device slice: a 20 MB file has 100,000 kernels, and
        // their models cost ten times the text (issue #16: at most 3 times).
        return FileAnalysis {
            model: syntax::syntax_only(lang, text, regions),
            specs: Vec::new(),
            size_note: Some(note),
        };
    }
    let model = syntax::analyze_regions(lang, text, regions, &mut cache.syntax);
    let fk = file_key(&model.kernels);
    let mut next = HashMap::with_capacity(model.kernels.len());
    let mut specs = Vec::with_capacity(model.kernels.len());
    let mut note = None;
    for (i, k) in model.kernels.iter().enumerate() {
        if let Some(why) = stop() {
            let left = model.kernels.len() - specs.len();
            note = Some(format!(
                "{why}; the @bench specs of {left} of {} kernels were not checked",
                model.kernels.len()
            ));
            break;
        }
        let mut report = cache.report(k, &model.kernels, fk, &opts.env, &mut next);
        // Depends on the kernel's body, which the cached report does not: run each time.
        arange::check(text, k, &mut report);
        triton_globals::check(text, &model.kernels, i, &mut report);
        stray_spec::check(text, &model.kernels, i, &mut report);
        specs.push(report);
    }
    if note.is_some() {
        // Keep what the unchecked kernels had: a later, complete run reuses it.
        next.extend(cache.reports.drain());
        let empty = || SpecReport {
            plan: None,
            diagnostics: Vec::new(),
        };
        specs.resize_with(model.kernels.len(), empty);
    }
    cache.reports = next;
    FileAnalysis {
        model,
        specs,
        size_note: note,
    }
}

/// A hint on a spec with buffers and a single case: with one (usually round) size, the
/// tail of the grid and the kernel's bounds checks are never verified (issue #10).
fn single_case_hint(kernel: &crate::syntax::Kernel, report: &SpecReport) -> Option<Finding> {
    let plan = report.plan.as_ref()?;
    let has_buffers = plan.cases.first().is_some_and(|c| {
        c.args
            .iter()
            .any(|a| matches!(a, crate::spec::Arg::Buffer { .. }))
    });
    if plan.cases.len() != 1 || !has_buffers {
        return None;
    }
    let line = kernel.spec.lines.first()?;
    let text = line.text.trim_end();
    let lead = text.len() - text.trim_start().len();
    Some(Finding {
        range: line.offset + lead..line.offset + text.len(),
        severity: Severity::Hint,
        source: FindingSource::Spec,
        message: "this spec has one case: give a size a second value that is not a multiple of the block (e.g. `n = 1 << 20, 4099`) so that tails and bounds checks are verified too".into(),
    })
}

fn empty_model(lang: Lang) -> FileModel {
    FileModel {
        lang,
        kernels: Vec::new(),
        device_slice: String::new(),
        syntax_errors: Vec::new(),
    }
}

impl FileAnalysis {
    /// Syntax and spec findings, in document order.
    pub fn findings(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        if let Some(note) = &self.size_note {
            out.push(Finding {
                range: 0..0,
                severity: Severity::Information,
                source: FindingSource::Limits,
                message: note.clone(),
            });
        }
        out.extend(self.model.syntax_errors.iter().map(|e| Finding {
            range: e.range.clone(),
            severity: Severity::Error,
            source: FindingSource::Syntax,
            message: e.message.clone(),
        }));
        for (kernel, report) in self.model.kernels.iter().zip(&self.specs) {
            out.extend(single_case_hint(kernel, report));
        }
        for report in &self.specs {
            out.extend(report.diagnostics.iter().map(|d| Finding {
                range: d.range.clone(),
                severity: match d.severity {
                    spec::Severity::Error => Severity::Error,
                    spec::Severity::Warning => Severity::Warning,
                    spec::Severity::Info => Severity::Information,
                },
                source: FindingSource::Spec,
                message: d.message.clone(),
            }));
        }
        out.sort_by_key(|f| (f.range.start, f.range.end));
        out
    }

    /// Findings that need the disk: a `reference = torch: module.fn` whose module is not a
    /// file next to `file`, or has no top-level `def fn`. On the reference's text.
    pub fn torch_module_findings(&self, file: &std::path::Path) -> Vec<Finding> {
        let mut out = Vec::new();
        for (k, report) in self.model.kernels.iter().zip(&self.specs) {
            let Some(r) = report
                .plan
                .as_ref()
                .and_then(|p| p.torch_reference.as_ref())
            else {
                continue;
            };
            if let (Err(message), Some(range)) =
                (torch_module_source(file, r), spec::torch_reference_span(k))
            {
                out.push(Finding {
                    range,
                    severity: Severity::Error,
                    source: FindingSource::Spec,
                    message,
                });
            }
        }
        out
    }

    /// The source a worker gets for one kernel. CUDA: the device slice with every
    /// other kernel that is not part of this kernel's unit blanked (lines kept, so
    /// compiler positions stay the author's), so one kernel's tunables or errors never
    /// break another's compile. Triton: the whole file (Python needs its imports).
    pub fn kernel_source(&self, kernel_name: &str, text: &str) -> String {
        if self.model.lang == Lang::Triton {
            return text.to_string();
        }
        let Some(kernel) = self.model.kernel(kernel_name) else {
            return self.model.device_slice.clone();
        };
        let mut bytes = self.model.device_slice.clone().into_bytes();
        let blank = |bytes: &mut Vec<u8>, range: std::ops::Range<usize>| {
            if let Some(span) = bytes.get_mut(range) {
                for b in span.iter_mut().filter(|b| **b != b'\n' && **b != b'\r') {
                    *b = b' ';
                }
            }
        };
        let mut blanked = Vec::new();
        for other in &self.model.kernels {
            let in_unit = kernel
                .unit_ranges
                .iter()
                .any(|r| r.start <= other.def_range.start && other.def_range.end <= r.end);
            if other.name == kernel.name || in_unit {
                continue;
            }
            blank(&mut bytes, other.def_range.clone());
            blanked.push(other.name.as_str());
        }
        // An explicit instantiation of a blanked template kernel (`template __global__
        // void reduce<256>(...);`) would name a template that is no longer there.
        for range in explicit_instantiations(&self.model.device_slice, &blanked) {
            blank(&mut bytes, range);
        }
        // Only ASCII bytes were written over whole characters' bytes, one for one.
        String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// What NVRTC needs besides the device slice: `-D` values of the kernels' current
    /// tunables (first writer wins when two kernels set the same name) and name
    /// expressions that instantiate template kernels with their spec's values, so that
    /// ptxas sees code for them.
    pub fn compile_inputs(&self) -> CompileInputs {
        let mut defines: BTreeMap<String, String> = BTreeMap::new();
        let mut name_expressions = Vec::new();
        for (kernel, report) in self.model.kernels.iter().zip(&self.specs) {
            let Some(plan) = &report.plan else { continue };
            for (name, value) in &plan.defines {
                defines.entry(name.clone()).or_insert_with(|| value.clone());
            }
            if !kernel.template_params.is_empty() {
                if let Some(expr) = plan.template_instance() {
                    name_expressions.push(expr);
                }
            }
        }
        CompileInputs {
            device_slice: self.model.device_slice.clone(),
            defines: defines.into_iter().collect(),
            name_expressions,
            project: toolchain::ProjectFlags::default(),
            headers: Vec::new(),
            file: None,
        }
    }
}

/// A snapshot of what one compile needs; cheap to move to a blocking thread.
#[derive(Clone, Debug, PartialEq)]
pub struct CompileInputs {
    pub device_slice: String,
    pub defines: Vec<(String, String)>,
    pub name_expressions: Vec<String>,
    /// The file's include folders and defines (its folder, compile_commands.json, the
    /// `cuda` settings); empty for a buffer with no file.
    pub project: toolchain::ProjectFlags,
    /// The project headers the file includes, as `(include name, device slice)`: their
    /// host code is blanked as the file's is, so a `common.h` full of host helpers
    /// compiles under NVRTC.
    pub headers: Vec<(String, String)>,
    /// The file on disk (its folder and name matter to nvcc); `None` for a buffer with
    /// no file, which NVRTC checks.
    pub file: Option<std::path::PathBuf>,
}

/// The text of a `reference = torch: module.fn`'s module (`module.py`, dots as folders,
/// next to `file`), which goes to the worker with the request; empty for an expression.
/// Err: what is missing and what to write, for a diagnostic on the reference.
pub fn torch_module_source(
    file: &std::path::Path,
    r: &spec::TorchReference,
) -> Result<String, String> {
    let spec::TorchReference::Function { module, function } = r else {
        return Ok(String::new());
    };
    let dir = file.parent().unwrap_or(std::path::Path::new("."));
    let rel = format!("{}.py", module.replace('.', "/"));
    let path = dir.join(&rel);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!("no module `{module}`: `{rel}` is not next to this file; create it with `def {function}(...)` returning the outputs, or write a torch expression (`reference = torch: torch.relu(x)`)")
        } else {
            format!("cannot read `{rel}` for the torch reference: {e}")
        }
    })?;
    // A top-level `def fn(` or `fn = ...` (an alias such as `fn = torch.relu`).
    let defined = text.lines().any(|l| {
        let l = l.strip_prefix("async ").unwrap_or(l);
        let head = l.strip_prefix("def ").unwrap_or(l);
        head.strip_prefix(function.as_str()).is_some_and(|after| {
            let after = after.trim_start();
            if l.starts_with("def ") {
                after.starts_with('(')
            } else {
                after.starts_with('=') && !after.starts_with("==")
            }
        })
    });
    if !defined {
        let defs: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("def ")?.split('(').next())
            .map(str::trim)
            .collect();
        let hint = spec::did_you_mean(function, defs.iter().copied());
        return Err(format!(
            "`{rel}` defines no function `{function}` at its top level; add `def {function}(...)` taking the inputs in parameter order and returning the outputs{hint}"
        ));
    }
    Ok(text)
}

/// The compile inputs of the file at `path`: its project flags ([`toolchain::project`])
/// and its project headers, each reduced to its device slice. Reads the disk.
pub fn with_project(
    mut inputs: CompileInputs,
    text: &str,
    path: &std::path::Path,
    include_paths: &[std::path::PathBuf],
    defines: &[String],
    tc: &Toolchain,
) -> CompileInputs {
    inputs = with_project_flags(inputs, path, include_paths, defines);
    let dirs = angle_include_dirs(&inputs.project, path);
    inputs.device_slice =
        restore_project_includes(text, &inputs.device_slice, &dirs, &tc.include_dirs);
    if tc.nvcc.is_none() {
        // nvcc reads the headers itself, host code and all; NVRTC gets their device
        // slices ([`compile`] collects them itself if nvcc fails and NVRTC stands in).
        inputs.headers = project_headers(&mut inputs, tc);
    }
    inputs
}

/// `inputs` with the project flags of the file at `path` (its folder,
/// compile_commands.json, the `cuda` settings): all a check that runs no compiler needs
/// ([`branches_only`]). Reads the disk.
pub fn with_project_flags(
    mut inputs: CompileInputs,
    path: &std::path::Path,
    include_paths: &[std::path::PathBuf],
    defines: &[String],
) -> CompileInputs {
    inputs.project = toolchain::project::flags_for_file(path, include_paths, defines);
    inputs.file = Some(path.to_path_buf());
    inputs
}

/// The project headers `inputs` includes, each reduced to its device slice, for NVRTC.
/// Reads the disk; empty for a buffer with no file. A header's macros that expand to
/// host code only (`DECL_CASE(q4_0);`, instantiating a host template) are blanked
/// where the file and the other headers invoke them, as the header's own invocations
/// are (`CompileInputs::device_slice` is updated).
fn project_headers(inputs: &mut CompileInputs, tc: &Toolchain) -> Vec<(String, String)> {
    let mut headers = header_slices(inputs, tc);
    let macros = headers.1;
    let names: Vec<&str> = macros.iter().map(String::as_str).collect();
    if !names.is_empty() {
        if let Some(s) = syntax::blank_macro_invocations(&inputs.device_slice, &names) {
            inputs.device_slice = s;
        }
        for (_, text) in headers.0.iter_mut() {
            if let Some(s) = syntax::blank_macro_invocations(text, &names) {
                *text = s;
            }
        }
    }
    headers.0
}

/// The project headers' device slices, and the names of the host macros they define.
fn header_slices(inputs: &CompileInputs, tc: &Toolchain) -> (Vec<(String, String)>, Vec<String>) {
    let Some(path) = &inputs.file else {
        return (Vec::new(), Vec::new());
    };
    let dir = path
        .parent()
        .map_or_else(|| std::path::PathBuf::from("."), |d| d.to_path_buf());
    let dirs = angle_include_dirs(&inputs.project, path);
    let macros = std::cell::RefCell::new(Vec::new());
    let slice = |t: &str| -> String {
        let mut parser = tree_sitter::Parser::new();
        if parser
            .set_language(&syntax::ts_language(Lang::Cuda))
            .is_err()
        {
            return t.to_string();
        }
        match syntax::parse_text(&mut parser, Lang::Cuda, t) {
            Some(tree) => {
                let model = syntax::analyze(Lang::Cuda, t, &tree);
                // A macro instantiating one of the header's kernels is device code.
                let kernels: Vec<&str> = model.kernels.iter().map(|k| k.name.as_str()).collect();
                macros.borrow_mut().extend(
                    syntax::host_macros(t, &tree)
                        .into_iter()
                        .filter(|(_, inst)| !inst.iter().any(|n| kernels.contains(&n.as_str())))
                        .map(|(m, _)| m),
                );
                restore_project_includes(t, &model.device_slice, &dirs, &tc.include_dirs)
            }
            None => t.to_string(),
        }
    };
    let headers = toolchain::project::collect_headers(
        &inputs.device_slice,
        &dir,
        &inputs.project.include_dirs,
        &tc.include_dirs,
        8 << 20,
        &slice,
    );
    (headers, macros.into_inner())
}

/// The folders nvcc searches for `#include <name>`: the project's (compile_commands.json,
/// the settings), not the including file's own folder.
fn angle_include_dirs(
    project: &toolchain::ProjectFlags,
    path: &std::path::Path,
) -> Vec<std::path::PathBuf> {
    let own = path.parent();
    let mut dirs = project.include_dirs.clone();
    if dirs.first().map(|d| d.as_path()) == own {
        dirs.remove(0);
    }
    dirs
}

/// The device slice blanks `#include <name>` unless `name` is a known device header
/// (`grammars/cuda/device_includes.txt`): most such includes are the host's. One that
/// names the project's own header, found in `dirs` and not under the CUDA folders, is put
/// back, as nvcc would read it (`system`: the CUDA folders): the CUDA samples include `<helper_math.h>` (device
/// operators on `float3`) from `-I Common`. Headers kernel-lsp stands in for
/// (`helper_cuda.h` and the rest of [`toolchain::compat::HOST_ONLY_HEADERS`]) stay blank.
/// `text` and `slice` have the same length; so does the result.
pub fn restore_project_includes(
    text: &str,
    slice: &str,
    dirs: &[std::path::PathBuf],
    system: &[std::path::PathBuf],
) -> String {
    if dirs.is_empty() || text.len() != slice.len() {
        return slice.to_string();
    }
    let mut out: Option<Vec<u8>> = None;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let range = at..at + line.len();
        at += line.len();
        let Some(name) = angle_include(line) else {
            continue;
        };
        if !slice[range.clone()].trim().is_empty()
            || toolchain::compat::HOST_ONLY_HEADERS.contains(&name)
            || syntax::is_host_library_header(name)
        {
            continue;
        }
        let found = dirs.iter().map(|d| d.join(name)).find(|p| p.is_file());
        if found.is_some_and(|p| !system.iter().any(|s| p.starts_with(s))) {
            out.get_or_insert_with(|| slice.as_bytes().to_vec())[range]
                .copy_from_slice(line.as_bytes());
        }
    }
    match out {
        Some(bytes) => String::from_utf8(bytes).unwrap_or_else(|_| slice.to_string()),
        None => slice.to_string(),
    }
}

/// `name` of a `#include <name>` line.
fn angle_include(line: &str) -> Option<&str> {
    let t = line.trim_start().strip_prefix('#')?.trim_start();
    let rest = t.strip_prefix("include")?.trim_start();
    let r = rest.strip_prefix('<')?;
    r.split('>').next().map(str::trim)
}

/// The outcome of compiling one version of a CUDA file.
#[derive(Clone, Debug, Default)]
pub struct CompileOutcome {
    pub findings: Vec<Finding>,
    pub resources: Vec<KernelResources>,
    pub note: Option<String>,
    /// The compiler read the whole file (it ran and did not stop at a fatal error), so
    /// it can overrule syntax errors ([`merge_findings`]).
    pub read_whole_file: bool,
    /// Byte ranges of `#if` branches the compile skipped under the file's defines
    /// (`syntax::branches`): syntax errors that start in them, or on the directive
    /// that opens one, are not shown.
    pub inactive: Vec<std::ops::Range<usize>>,
    /// Which compiler checked the file.
    pub checker: Checker,
}

/// The file's findings with the compiler's, where the compiler wins as in clangd: a
/// syntax error (tree-sitter's grammar has gaps; docs/compat.md) on lines where the
/// compiler, having read the whole file, found no error is dropped.
pub fn merge_findings(
    mut findings: Vec<Finding>,
    compile: Option<&CompileOutcome>,
    text: &str,
) -> Vec<Finding> {
    let Some(c) = compile else {
        return findings;
    };
    // An error in a skipped branch, or starting on the directive that opens one (the
    // grammar's error region often starts at the `#if`).
    let skipped = |at: usize| {
        c.inactive.iter().any(|r| {
            let on_directive = at < r.start
                && text
                    .get(at..r.start)
                    .is_some_and(|t| t.matches('\n').count() <= 1)
                && text[..at]
                    .rsplit('\n')
                    .next()
                    .is_some_and(|l| l.trim().is_empty())
                && text[at..].trim_start().starts_with('#');
            r.contains(&at) || on_directive
        })
    };
    findings.retain(|f| f.source != FindingSource::Syntax || !skipped(f.range.start));
    if c.read_whole_file {
        let line_of = |b: usize| text[..b.min(text.len())].matches('\n').count();
        let error_lines: Vec<(usize, usize)> = c
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .map(|f| (line_of(f.range.start), line_of(f.range.end)))
            .collect();
        findings.retain(|f| {
            if f.source != FindingSource::Syntax {
                return true;
            }
            let (a, b) = (line_of(f.range.start), line_of(f.range.end));
            error_lines.iter().any(|(s, e)| *s <= b && a <= *e)
        });
    }
    findings.extend(c.findings.iter().cloned());
    findings.sort_by_key(|f| (f.range.start, f.range.end));
    findings
}

/// Which compiler checked a file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Checker {
    #[default]
    Nvrtc,
    Nvcc,
}

/// Check the file: with nvcc when the toolchain has one and the file is on disk (the
/// whole file, as the project builds it), else NVRTC on the device slice; then ptxas
/// when found. Blocking: call it from `spawn_blocking` or a CLI thread. `text` is the
/// author's text, for mapping columns.
///
/// No false errors: with NVRTC alone, errors inside the file's headers mean the headers
/// hold code only nvcc reads (docs/project-setup.md), so the file gets one information
/// note saying so instead of errors; with nvcc, when a header was missing and stood in
/// for, errors on host-only lines and in headers are dropped.
pub fn compile(
    tc: &Toolchain,
    text: &str,
    inputs: &CompileInputs,
    program_name: &str,
) -> CompileOutcome {
    let mut outcome = compile_with(tc, text, inputs, program_name);
    outcome.inactive = inactive_branches(text, inputs);
    outcome
}

/// What a check that runs no compiler (`check --no-compile`) knows of a compile: the
/// `#if` branches the file's defines leave out ([`CompileOutcome::inactive`]), so that
/// [`merge_findings`] hides syntax errors there as after a compile. Pure.
pub fn branches_only(text: &str, inputs: &CompileInputs) -> CompileOutcome {
    CompileOutcome {
        inactive: inactive_branches(text, inputs),
        ..CompileOutcome::default()
    }
}

/// The `#if` branches a compile of `text` under the project's and the spec's defines
/// skips.
fn inactive_branches(text: &str, inputs: &CompileInputs) -> Vec<std::ops::Range<usize>> {
    let defines: Vec<String> = inputs
        .project
        .defines
        .iter()
        .chain(&inputs.defines)
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    syntax::branches::inactive_ranges(text, &defines)
}

fn compile_with(
    tc: &Toolchain,
    text: &str,
    inputs: &CompileInputs,
    program_name: &str,
) -> CompileOutcome {
    let mut fallback_note = None;
    if let (Some(nvcc), Some(file)) = (&tc.nvcc, &inputs.file) {
        match toolchain::check_file_with_nvcc(
            tc,
            nvcc,
            file,
            text,
            &inputs.defines,
            &inputs.project,
        ) {
            Ok(mut result) => {
                if !result.missing_headers.is_empty() {
                    drop_unjudged(&mut result, text, &inputs.device_slice);
                }
                let whole = !note_missing_device_headers(&mut result);
                return outcome_of(text, result, Checker::Nvcc, whole);
            }
            Err(e) => {
                fallback_note = Some(format!(
                    "nvcc could not check the file ({e}); checked with NVRTC"
                ));
            }
        }
    }
    if tc.nvrtc.is_err() {
        return CompileOutcome {
            note: fallback_note,
            ..CompileOutcome::default()
        };
    }
    // nvcc was found but could not run: NVRTC needs the headers nvcc would have read.
    let fallback = (tc.nvcc.is_some() && inputs.headers.is_empty()).then(|| {
        let mut own = inputs.clone();
        own.headers = project_headers(&mut own, tc);
        own
    });
    let inputs = fallback.as_ref().unwrap_or(inputs);
    let headers = inputs.headers.clone();
    let compile = |slice: &str, headers: &[(String, String)]| {
        toolchain::check_device_slice_with(
            tc,
            slice,
            program_name,
            &inputs.defines,
            &inputs.name_expressions,
            &inputs.project,
            headers,
        )
    };
    // Host items NVRTC stops at (in the file or its project headers) are blanked and
    // the file compiled again; errors those blanks cause are not the author's.
    let (mut result, blanked) = host_items::check(compile, inputs.device_slice.clone(), headers);
    host_items::drop_caused(&mut result, &blanked);
    host_items::note_blanked_libraries(&mut result, text, &inputs.device_slice);
    if inputs.device_slice != text {
        // NVRTC did not see the host code, so what only host code uses looks unused.
        result.messages.retain(|m| !m.message.contains("[#177-D]"));
    }
    let mut read_whole_file = !result.messages.iter().any(|m| {
        m.message.contains("catastrophic") || m.message.contains("Compilation terminated")
    }) && result.note.as_ref().is_none_or(|n| !n.contains("libnvrtc"));
    if let Some(first) = result
        .messages
        .iter()
        .find(|m| m.severity == MessageSeverity::Error && m.header.is_some())
        .cloned()
    {
        let header = first.header.clone().unwrap_or_default();
        let shown = std::path::Path::new(&header)
            .file_name()
            .map_or(header.clone(), |n| n.to_string_lossy().into_owned());
        let detail = first.message.lines().next().unwrap_or("").to_string();
        let mut note = first;
        note.severity = MessageSeverity::Note;
        note.header = None;
        note.message = format!(
            "not checked: `{shown}` holds code NVRTC cannot compile alone (first: {detail}). NVRTC sees only the device side of a file, and this file's headers need the project's full build. Install nvcc (the CUDA toolkit, or `pip install nvidia-cuda-nvcc` with g++) to check the file as the project builds it (docs/project-setup.md)"
        );
        // Warnings on the file's own lines (a missing include among them) stay.
        result
            .messages
            .retain(|m| m.severity != MessageSeverity::Error && m.header.is_none());
        result.messages.push(note);
        result.messages.sort_by_key(|m| (m.line, m.col_start));
        read_whole_file = false;
    }
    if note_missing_device_headers(&mut result) {
        read_whole_file = false;
    }
    let mut outcome = outcome_of(text, result, Checker::Nvrtc, read_whole_file);
    if let Some(n) = fallback_note {
        outcome.note = Some(match outcome.note {
            Some(o) => format!("{n}; {o}"),
            None => n,
        });
    }
    outcome
}

/// A CUDA library header the device code needs is not installed here (curand_kernel.h
/// without the curand wheel): errors that follow from it cannot be told from real ones,
/// so they and its warnings become one note; the missing-include warning stays. Returns
/// whether it did (nvcc and NVRTC alike).
fn note_missing_device_headers(result: &mut CheckResult) -> bool {
    let missing_device: Vec<String> = result
        .missing_headers
        .iter()
        // Host library headers (cublas_v2.h) have stand-ins that give device code what
        // it may use of them: their absence hides no device error.
        .filter(|h| {
            syntax::is_device_header(h)
                && !toolchain::compat::HOST_ONLY_HEADERS.contains(&h.as_str())
        })
        .cloned()
        .collect();
    if !missing_device.is_empty()
        && result
            .messages
            .iter()
            .any(|m| m.severity == MessageSeverity::Error)
    {
        let first = result
            .messages
            .iter()
            .find(|m| m.severity == MessageSeverity::Error)
            .cloned();
        // Warnings that follow from the missing header go too ("parsing restarts here").
        result.messages.retain(|m| {
            m.severity == MessageSeverity::Warning && m.message.starts_with("cannot open `")
        });
        if let Some(mut note) = first {
            let names: Vec<String> = missing_device.iter().map(|h| format!("`{h}`")).collect();
            note.severity = MessageSeverity::Note;
            note.header = None;
            note.message = format!(
                "not checked: {} is not installed here, and the file's device code uses it, so its errors cannot be told from real ones. Install the CUDA toolkit (or the pip wheel that carries the header, e.g. nvidia-curand-cu12 for curand_kernel.h), or add its folder to the `cuda.includePaths` setting (docs/project-setup.md)",
                names.join(", ")
            );
            result.messages.push(note);
            result.messages.sort_by_key(|m| (m.line, m.col_start));
        }
        true
    } else {
        false
    }
}

/// With nvcc, when a header was missing and stood in for: drops the errors that may be
/// about the stand-in rather than the code: on host-only lines (the device slice has
/// them blank), inside headers, and naming the missing library's identifiers.
fn drop_unjudged(result: &mut CheckResult, text: &str, device_slice: &str) {
    let slice: Vec<&str> = device_slice.split('\n').collect();
    let own: Vec<&str> = text.split('\n').collect();
    let host_only = |l: u32| {
        let l = l as usize;
        own.get(l).is_some_and(|t| !t.trim().is_empty())
            && slice.get(l).is_none_or(|t| t.trim().is_empty())
    };
    // `cublas_v2.h` missing: names such as `CUBLAS_COMPUTE_32F` or
    // `cublasLtCreate` are the header's, wherever they are used.
    let libs: Vec<String> = result
        .missing_headers
        .iter()
        .filter_map(|h| {
            let stem = h.rsplit('/').next().unwrap_or(h);
            let lib: String = stem
                .chars()
                .take_while(|c| c.is_ascii_alphabetic())
                .collect::<String>()
                .to_ascii_lowercase();
            (lib.len() >= 3).then_some(lib)
        })
        .collect();
    let names_missing_lib = |msg: &str| {
        msg.split('"').skip(1).step_by(2).any(|name| {
            let n = name.to_ascii_lowercase();
            libs.iter().any(|l| n.starts_with(l.as_str()))
        })
    };
    result.messages.retain(|m| {
        m.severity == MessageSeverity::Note
            || m.message.starts_with("cannot open `")
            || (m.header.is_none() && !host_only(m.line) && !names_missing_lib(&m.message))
    });
}

fn outcome_of(
    text: &str,
    result: CheckResult,
    checker: Checker,
    read_whole_file: bool,
) -> CompileOutcome {
    let line_starts = line_starts(text);
    let source = match checker {
        Checker::Nvrtc => FindingSource::Nvrtc,
        Checker::Nvcc => FindingSource::Nvcc,
    };
    let findings = result
        .messages
        .iter()
        .map(|m| {
            let line = m.line as usize;
            let (start, end) = match line_starts.get(line) {
                Some(&ls) => {
                    let le = line_starts.get(line + 1).map_or(text.len(), |&n| n);
                    let le = trim_eol(text, ls, le);
                    let s = (ls + m.col_start as usize).min(le);
                    let e = (ls + m.col_end as usize).clamp(s, le);
                    (s, e)
                }
                None => (text.len(), text.len()),
            };
            Finding {
                range: snap(text, start)..snap(text, end),
                severity: match m.severity {
                    MessageSeverity::Error => Severity::Error,
                    MessageSeverity::Warning => Severity::Warning,
                    MessageSeverity::Note => Severity::Information,
                },
                source,
                message: m.message.clone(),
            }
        })
        .collect();
    CompileOutcome {
        findings,
        resources: result.resources,
        note: result.note,
        read_whole_file,
        checker,
        inactive: Vec::new(),
    }
}

/// Resource usage reported by ptxas for a kernel, if it was compiled.
pub fn resources_for<'a>(
    resources: &'a [KernelResources],
    kernel: &syntax::Kernel,
) -> Option<&'a KernelResources> {
    resources
        .iter()
        .find(|r| toolchain::symbol_matches(&r.symbol, &kernel.name))
}

/// A short line for a hint: `32 regs · 1.0 KiB smem · 0 spills`.
pub fn resources_label(r: &KernelResources) -> String {
    let mut s = format!("{} regs", r.registers);
    if r.shared_bytes > 0 {
        s.push_str(&format!(" · {} smem", human_bytes(r.shared_bytes)));
    }
    let spills = r.spill_stores + r.spill_loads;
    if spills > 0 {
        s.push_str(&format!(
            " · {} B spilled ({} st / {} ld)",
            spills, r.spill_stores, r.spill_loads
        ));
    } else {
        s.push_str(" · 0 spills");
    }
    s
}

pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect()
}

fn trim_eol(text: &str, start: usize, mut end: usize) -> usize {
    let b = text.as_bytes();
    while end > start && (b[end - 1] == b'\n' || b[end - 1] == b'\r') {
        end -= 1;
    }
    end
}

fn snap(text: &str, mut i: usize) -> usize {
    i = i.min(text.len());
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Shared handle type: analyses are immutable once made and shared between handlers.
pub type SharedAnalysis = Arc<FileAnalysis>;

/// Byte ranges of the top-level explicit instantiations (`template __global__ void
/// k<128>(const float*, int);`, `extern template ...`) in `slice` that name one of
/// `names`, each from its `template` to its `;`.
fn explicit_instantiations(slice: &str, names: &[&str]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    if names.is_empty() {
        return out;
    }
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut offset = 0;
    for line in slice.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let start = offset + (line.len() - trimmed.len());
        offset += line.len();
        let rest = trimmed
            .strip_prefix("extern")
            .filter(|r| r.starts_with(char::is_whitespace))
            .map_or(trimmed, str::trim_start);
        let Some(after) = rest.strip_prefix("template") else {
            continue;
        };
        // `template <...>` begins a template definition, not an instantiation.
        if after.starts_with(ident) || after.trim_start().starts_with('<') {
            continue;
        }
        let Some(end) = slice[start..].find(';').map(|e| start + e + 1) else {
            continue;
        };
        let stmt = &slice[start..end];
        if stmt.contains('{') {
            continue;
        }
        let names_one = names.iter().any(|n| {
            stmt.match_indices(n).any(|(i, _)| {
                let before = stmt[..i].chars().next_back();
                let after = stmt[i + n.len()..].chars().next();
                !before.is_some_and(ident) && !after.is_some_and(ident)
            })
        });
        if names_one {
            out.push(start..end);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::Document;

    fn findings(text: &str, cache: Option<&mut SpecCache>) -> Vec<Finding> {
        let doc = Document::new(Lang::Cuda, 0, text);
        let opts = AnalyzeOptions::default();
        match cache {
            Some(c) => analyze_cached(Lang::Cuda, text, doc.tree(), &opts, c).findings(),
            None => analyze(Lang::Cuda, text, doc.tree(), &opts).findings(),
        }
    }

    #[test]
    fn angle_includes_of_project_headers_come_back_into_the_device_slice() {
        // The CUDA samples' layout: `-I Common`, `#include <helper_math.h>`.
        let root = std::env::temp_dir().join(format!("klsp-angle-{}", std::process::id()));
        let (common, cuda) = (root.join("Common"), root.join("cuda/include"));
        std::fs::create_dir_all(&common).unwrap();
        std::fs::create_dir_all(&cuda).unwrap();
        for h in ["helper_math.h", "helper_cuda.h"] {
            std::fs::write(common.join(h), "").unwrap();
        }
        std::fs::write(cuda.join("cuda_gl_interop.h"), "").unwrap();
        let text = "#include <vector>\n#include <helper_math.h>\n  #  include  <helper_cuda.h>\n#include <cuda_gl_interop.h>\n#include <missing.h>\n__global__ void k(float3 *v) { v[0] = v[0] + v[1]; }\n";
        let doc = Document::new(Lang::Cuda, 0, text);
        let slice = syntax::analyze(Lang::Cuda, text, doc.tree().unwrap()).device_slice;
        let dirs = [common.clone(), cuda.clone()];
        let restored = restore_project_includes(text, &slice, &dirs, std::slice::from_ref(&cuda));
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(restored.len(), text.len());
        let lines: Vec<&str> = restored.lines().collect();
        // The project's header is back; the host headers, the one kernel-lsp stands in
        // for, the CUDA folders' and an unknown one stay blank.
        assert_eq!(lines[1], "#include <helper_math.h>");
        for i in [0, 2, 3, 4] {
            assert!(lines[i].trim().is_empty(), "line {i}: {:?}", lines[i]);
        }
        assert!(lines[5].starts_with("__global__ void k"));
        assert_eq!(restore_project_includes(text, &slice, &[], &[]), slice);
    }

    #[test]
    fn cached_spec_reports_match_fresh_ones_after_edits() {
        let k = |name: &str, dtype: &str| {
            format!("// @bench n = 64\n// @bench x: in {dtype}[n]\n// @bench grid = 1; block = n\n__global__ void {name}(int n, const float* x) {{}}\n\n")
        };
        let v1 = format!("{}{}", k("a", "f33"), k("b", "f32"));
        // Text inserted above shifts every range; then the second kernel's spec breaks.
        let v2 = format!("// a new comment\n\n{v1}");
        let v3 = v2.replace(
            "// @bench grid = 1; block = n\n__global__ void b",
            "// @bench grid = 1; block = m\n__global__ void b",
        );
        let mut cache = SpecCache::default();
        for text in [&v1, &v2, &v3, &v1] {
            assert_eq!(
                findings(text, Some(&mut cache)),
                findings(text, None),
                "{text}"
            );
        }
        assert_eq!(findings(&v3, None).len(), 2, "one error per broken kernel");
    }

    #[test]
    fn a_kernels_source_blanks_the_other_kernels_and_keeps_lines() {
        let text = "__device__ float h(float v) { return v; }\n__global__ void a(float* x) { x[0] = h(1.f); }\n__global__ void b(float* x) { x[0] = BLOCK; }\nint main() { return 0; }\n";
        let doc = Document::new(Lang::Cuda, 0, text);
        let a = analyze(Lang::Cuda, text, doc.tree(), &AnalyzeOptions::default());
        let src = a.kernel_source("a", text);
        assert_eq!(src.len(), text.len());
        assert_eq!(src.lines().count(), text.lines().count());
        assert!(
            src.contains("__global__ void a(") && src.contains("__device__ float h("),
            "{src}"
        );
        assert!(!src.contains("BLOCK") && !src.contains("main"), "{src}");
    }

    /// A template kernel's explicit instantiation goes with it: compiling the other
    /// kernel must not meet `template __global__ void t<128>(...)` of a blanked `t`.
    /// Another kernel's instantiation, and template definitions, stay.
    #[test]
    fn explicit_instantiations_of_blanked_kernels_are_blanked_too() {
        let text = "template <int B>\n__global__ void t(float* x) { x[0] = B; }\ntemplate __global__ void t<128>(float*);\nextern template __global__ void t<64>(float*);\ntemplate <int C>\n__global__ void u(float* x) { x[0] = C; }\ntemplate __global__ void u<32>(float*);\n__global__ void tt(float* x) { x[0] = 1; }\n";
        let doc = Document::new(Lang::Cuda, 0, text);
        let a = analyze(Lang::Cuda, text, doc.tree(), &AnalyzeOptions::default());
        let src = a.kernel_source("u", text);
        assert_eq!(src.lines().count(), text.lines().count());
        assert!(!src.contains("t<128>") && !src.contains("t<64>"), "{src}");
        assert!(
            src.contains("template __global__ void u<32>(float*);"),
            "{src}"
        );
        assert!(src.contains("template <int C>"), "{src}");
        let src = a.kernel_source("tt", text);
        assert!(src.contains("void tt(") && !src.contains("u<32>"), "{src}");
        assert_eq!(
            explicit_instantiations("template<int B> void t();\n", &["t"]),
            Vec::<std::ops::Range<usize>>::new()
        );
    }
}
