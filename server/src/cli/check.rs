//! `kernel-lsp check FILE...`: the editor's diagnostics, printed compiler-style
//! (`file:line:col: severity: message`) or as JSON. The CI entry point for kernel authors.

use std::path::PathBuf;
use std::process::ExitCode;

use serde::Serialize;

use crate::analysis::{self, AnalyzeOptions, Finding, Severity};
use crate::document::{Document, PositionEncoding};
use crate::spec::EvalEnv;
use crate::syntax::{self, Lang};
use crate::toolchain;

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Files to check (.cu, .cuh, headers with device code, or Python files with Triton
    /// kernels).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Print a JSON array instead of compiler-style lines.
    #[arg(long)]
    pub json: bool,
    /// Skip the NVRTC compile (syntax and @bench checks only).
    #[arg(long)]
    pub no_compile: bool,
    /// Target architecture for NVRTC and ptxas (default: the settings' `arch`, sm_90).
    #[arg(long)]
    pub arch: Option<String>,
    /// Path to libnvrtc (a file or the folder holding it).
    #[arg(long)]
    pub nvrtc: Option<PathBuf>,
    /// Settings as JSON, the shape editors send as initializationOptions (default:
    /// `.kernel-lsp/settings.json` at the workspace root of the first file, if it
    /// exists): include folders, defines, the nvcc and NVRTC paths.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Serialize)]
struct JsonFinding {
    file: String,
    /// 1-based, like compilers print.
    line: u32,
    column: u32,
    end_line: u32,
    end_column: u32,
    severity: Severity,
    source: &'static str,
    message: String,
}

/// 1-based line and column of a byte offset as compilers print them: the column counts
/// the line's bytes, and a byte-order mark before line 1 is not one (editors do not show
/// it, so a column that counted it would point 3 characters too far).
pub(crate) fn compiler_position(doc: &Document, offset: usize) -> (u32, u32) {
    let p = doc.position(offset, PositionEncoding::Utf8);
    let bom = match doc.text().starts_with('\u{feff}') && p.line == 0 {
        true => '\u{feff}'.len_utf8() as u32,
        false => 0,
    };
    (p.line + 1, p.col.saturating_sub(bom) + 1)
}

/// `file:line:col: error: message [source]`, for the errors `bench` and `optimize`
/// refuse to run with.
pub(crate) fn error_line(shown: &str, doc: &Document, f: &Finding) -> String {
    let (line, col) = compiler_position(doc, f.range.start);
    format!(
        "{shown}:{line}:{col}: error: {} [{}]\n",
        f.message,
        f.source.label()
    )
}

/// What went wrong reading one input file.
pub(crate) fn read_source(path: &PathBuf) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    if bytes.iter().take(8192).any(|&b| b == 0) {
        return Err("looks like a binary file (it contains NUL bytes); kernel-lsp checks CUDA and Triton source text".into());
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "is not UTF-8 text (invalid byte at offset {}); save it as UTF-8",
            e.utf8_error().valid_up_to()
        )
    })
}

/// Each kernel of the file for the summary line: its name, "(no @bench spec)" where it
/// has none, and its registers and spills where the compile reported them.
fn kernel_summaries(
    result: &analysis::FileAnalysis,
    resources: &[toolchain::KernelResources],
) -> Vec<String> {
    result
        .model
        .kernels
        .iter()
        .zip(&result.specs)
        .map(|(k, spec)| {
            let mut d = k.name.clone();
            if spec.plan.is_none() && k.spec.lines.is_empty() {
                d.push_str(" (no @bench spec)");
            }
            if let Some(r) = analysis::resources_for(resources, k) {
                d.push_str(&format!(": {}", analysis::resources_label(r)));
            }
            d
        })
        .collect()
}

/// A finding as JSON, at compiler line:column positions.
fn json_finding(shown: &str, doc: &Document, f: &Finding) -> JsonFinding {
    let (line, column) = compiler_position(doc, f.range.start);
    let (end_line, end_column) = compiler_position(doc, f.range.end);
    JsonFinding {
        file: shown.to_string(),
        line,
        column,
        end_line,
        end_column,
        severity: f.severity,
        source: f.source.label(),
        message: f.message.clone(),
    }
}

/// A finding as a compiler's line: `file:line:column: severity: message [source]`.
fn text_finding(shown: &str, doc: &Document, f: &Finding) -> String {
    let (line, column) = compiler_position(doc, f.range.start);
    let sev = match f.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Information => "info",
        Severity::Hint => "hint",
    };
    format!(
        "{shown}:{line}:{column}: {sev}: {} [{}]\n",
        f.message,
        f.source.label()
    )
}

pub fn run(args: &CheckArgs) -> ExitCode {
    let mut settings = match super::load_settings(args.config.as_deref(), &args.files[0]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if let Some(arch) = &args.arch {
        settings.arch = arch.clone();
    }
    if let Some(nvrtc) = &args.nvrtc {
        settings.nvrtc_path = Some(nvrtc.clone());
    }
    let opts = AnalyzeOptions {
        env: EvalEnv { sms: settings.sms },
        max_file_bytes: settings.max_file_bytes,
    };
    let mut tc = None;
    let mut errors = 0usize;
    let mut unreadable = false;
    let mut json_out = Vec::new();
    let mut text_out = String::new();

    for path in &args.files {
        let shown = path.display().to_string();
        // A `.h` header with device code is CUDA, as when the editor sends it.
        let lang = syntax::lang_for(&shown, None).or_else(|| {
            let text = read_source(path).ok()?;
            syntax::lang_for_text(&shown, None, &text)
        });
        let Some(lang) = lang else {
            eprintln!("{shown}: skipped: not a CUDA (.cu, .cuh) or Python file, nor a header with __global__ or __device__ code");
            continue;
        };
        let text = match read_source(path) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{shown}: error: {e}");
                unreadable = true;
                continue;
            }
        };
        if lang == Lang::Triton && !syntax::is_triton_source(&text) {
            eprintln!("{shown}: skipped: no @triton.jit kernels");
            continue;
        }
        // Past maxFileBytes only syntax is checked, in pieces, as the server does.
        let (doc, result) = if text.len() > opts.max_file_bytes {
            let doc = Document::unparsed(lang, 0, &text);
            (
                doc,
                analysis::syntax_only_in_pieces(lang, &text, &opts, &mut || None),
            )
        } else {
            let doc = Document::new(lang, 0, &text);
            let result = analysis::analyze(lang, &text, doc.tree(), &opts);
            (doc, result)
        };
        let mut findings: Vec<Finding> = result.findings();
        findings.extend(result.torch_module_findings(path));
        let mut resources = Vec::new();
        if lang == Lang::Cuda && !args.no_compile && result.size_note.is_none() {
            let tc = tc.get_or_insert_with(|| {
                let tc = toolchain::locate(&settings.toolchain());
                match (&tc.nvcc, &tc.nvrtc) {
                    (Some(nvcc), _) => eprintln!(
                        "note: checking with nvcc ({}), the project's flags and the whole file",
                        nvcc.display()
                    ),
                    (None, Err(e)) => eprintln!("note: compile checks skipped: {e}"),
                    (None, Ok(_)) => {}
                }
                tc
            });
            let name = path
                .file_name()
                .map_or("kernel.cu".into(), |n| n.to_string_lossy().to_string());
            let inputs = analysis::with_project(
                result.compile_inputs(),
                &text,
                path,
                &settings.cuda.include_paths,
                &settings.cuda.defines,
                tc,
            );
            let outcome = analysis::compile(tc, &text, &inputs, &name);
            if let Some(n) = outcome.note.as_ref().filter(|n| n.starts_with("nvcc")) {
                eprintln!("{shown}: note: {n}");
            }
            findings = analysis::merge_findings(findings, Some(&outcome), &text);
            resources = outcome.resources;
        } else if lang == Lang::Cuda && result.size_note.is_none() {
            // No compile, but the same rule for `#if` branches the defines leave out.
            let inputs = analysis::with_project_flags(
                result.compile_inputs(),
                path,
                &settings.cuda.include_paths,
                &settings.cuda.defines,
            );
            let outcome = analysis::branches_only(&text, &inputs);
            findings = analysis::merge_findings(findings, Some(&outcome), &text);
        }
        findings.sort_by_key(|f| (f.range.start, f.range.end));
        // One line per file on stderr, so a clean run still says what was checked.
        let kernels = kernel_summaries(&result, &resources);
        let count = |sev| findings.iter().filter(|f| f.severity == sev).count();
        eprintln!(
            "{shown}: {} kernel(s){}{}, {} error(s), {} warning(s)",
            kernels.len(),
            if kernels.is_empty() { "" } else { ": " },
            kernels.join("; "),
            count(Severity::Error),
            count(Severity::Warning)
        );
        for f in &findings {
            if f.severity == Severity::Error {
                errors += 1;
            }
            if args.json {
                json_out.push(json_finding(&shown, &doc, f));
            } else {
                text_out.push_str(&text_finding(&shown, &doc, f));
            }
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json_out).expect("findings serialize")
        );
    } else {
        print!("{text_out}");
    }
    if unreadable {
        ExitCode::from(2)
    } else if errors > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
