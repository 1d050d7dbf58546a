//! `kernel-lsp bench FILE`: verify and time every kernel of a file that has a `@bench`
//! spec, on a worker. A kernel with `reference = R` is verified against R first, then
//! timed interleaved with R so the speedup is a side-by-side ratio (docs/spec.md, "What the
//! tool does with it"). Same analysis engine as `check`; the worker does all GPU work.

use std::path::PathBuf;
use std::process::ExitCode;

use serde::Serialize;

use crate::analysis::{self, AnalyzeOptions, FileAnalysis, Severity};
use crate::document::Document;
pub use crate::optimize::bench::TorchBars;
use crate::optimize::bench::{self, BenchFile, Measured, Reference, Verdict};
use crate::syntax::{self, Lang};
use crate::worker::pool::WorkerPool;
use crate::worker::protocol::{
    ErrorKind, HelloResult, TimeSettings, Timing, VerifyReport, Version, WorkerError,
};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// A CUDA (.cu, .cuh) or Triton (.py) file with `@bench` specs.
    pub file: PathBuf,
    /// Only this kernel (its reference still runs).
    #[arg(long, value_name = "K")]
    pub kernel: Option<String>,
    /// Print the reports as JSON.
    #[arg(long)]
    pub json: bool,
    /// The command that starts a worker, e.g. "ssh gpu-box kernel-lsp worker".
    #[arg(long, value_name = "CMD")]
    pub worker: Option<String>,
    /// Base seed for verification inputs (failures name the seed that replays them).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// CUDA: also run each verified kernel once under compute-sanitizer (memcheck,
    /// racecheck) on its smallest case; errors fail the verification.
    #[arg(long)]
    pub sanitize: bool,
}

/// What happened to one kernel.
#[derive(Debug, Serialize)]
pub struct KernelBench {
    pub kernel: String,
    /// "ok", "no_spec", "verify_failed", "error".
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<VerifyReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference_timing: Option<Timing>,
    /// Reference median over this kernel's median.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
    /// With `reference = torch: ...`: the reference timed eagerly and under torch.compile,
    /// interleaved with the kernel (compile is left out on Triton's CPU interpreter).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torch: Option<TorchBars>,
    /// Timed on Triton's CPU interpreter: results real, times not GPU times.
    #[serde(default)]
    pub interpreter: bool,
    /// When timed: `measurements` (more than 1 when the first was disturbed) and, then,
    /// each measurement's worst spread (`spreads`); the timings are the steadiest's.
    #[serde(flatten)]
    pub measured: Option<Measured>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<WorkerError>,
}

impl KernelBench {
    fn new(kernel: &str, status: &'static str) -> Self {
        KernelBench {
            kernel: kernel.to_string(),
            status,
            reference: None,
            verify: None,
            timing: None,
            reference_timing: None,
            speedup: None,
            torch: None,
            interpreter: false,
            measured: None,
            error: None,
        }
    }
}

#[derive(Debug, Serialize)]
struct BenchReport<'a> {
    file: String,
    seed: u64,
    hello: &'a HelloResult,
    kernels: &'a [KernelBench],
}

pub fn run(args: &BenchArgs) -> ExitCode {
    match run_inner(args) {
        Ok(code) => code,
        Err((code, message)) => {
            eprintln!("{message}");
            ExitCode::from(code)
        }
    }
}

fn run_inner(args: &BenchArgs) -> Result<ExitCode, (u8, String)> {
    let shown = args.file.display().to_string();
    let lang = syntax::lang_for(&shown, None).ok_or_else(|| {
        (
            2,
            format!("{shown}: error: not a CUDA (.cu, .cuh) or Python file"),
        )
    })?;
    let text =
        super::check::read_source(&args.file).map_err(|e| (2, format!("{shown}: error: {e}")))?;
    if lang == Lang::Triton && !syntax::is_triton_source(&text) {
        return Err((1, format!("{shown}: error: no @triton.jit kernels")));
    }
    let doc = Document::new(lang, 0, &text);
    let opts = AnalyzeOptions::default();
    let analysis = analysis::analyze(lang, &text, doc.tree(), &opts);
    refuse_errors(&shown, &args.file, &doc, &analysis)?;
    if let Some(k) = &args.kernel {
        if !analysis.model.kernels.iter().any(|x| &x.name == k) {
            let names: Vec<&str> = analysis
                .model
                .kernels
                .iter()
                .map(|k| k.name.as_str())
                .collect();
            return Err((
                2,
                format!(
                    "{shown}: error: no kernel `{k}`; the file has: {}",
                    names.join(", ")
                ),
            ));
        }
    }

    nothing_to_run(&shown, lang, &analysis, args.kernel.as_deref()).map_err(|e| (1, e))?;

    let config = super::device::pool_config(args.worker.as_deref()).map_err(|e| (2, e))?;
    let rt = super::device::runtime().map_err(|e| (2, e))?;
    let pool = WorkerPool::new(config);
    let outcome = rt.block_on(async {
        let out = bench(&pool, args, lang, &text, &doc, analysis, &shown).await;
        pool.shutdown().await;
        out
    });
    let (hello, reports) = outcome?;
    if args.json {
        let report = BenchReport {
            file: shown.clone(),
            seed: args.seed,
            hello: &hello,
            kernels: &reports,
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("reports serialize")
        );
    } else {
        print!("{}", table(&hello, &reports));
    }
    let failed = reports
        .iter()
        .any(|r| matches!(r.status, "verify_failed" | "error"));
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

async fn bench(
    pool: &WorkerPool,
    args: &BenchArgs,
    lang: Lang,
    text: &str,
    doc: &Document,
    mut analysis: FileAnalysis,
    shown: &str,
) -> Result<(HelloResult, Vec<KernelBench>), (u8, String)> {
    let hello = pool.connect().await.map_err(|e| {
        (
            1,
            format!("kernel-lsp bench: cannot start the worker: {}", e.message),
        )
    })?;
    let status = match lang {
        Lang::Cuda => &hello.cuda,
        Lang::Triton => &hello.triton,
    };
    if !status.available {
        let what = match lang {
            Lang::Cuda => "CUDA",
            Lang::Triton => "Triton",
        };
        return Err((
            1,
            format!(
                "kernel-lsp bench: {shown}: the worker cannot run {what} kernels: {}",
                status.message
            ),
        ));
    }
    // Specs may use `sms`: evaluate them for the device that runs them.
    let default = AnalyzeOptions::default();
    let env = bench::device_env(Some(&hello), default.env.sms);
    if env != default.env {
        let opts = AnalyzeOptions { env, ..default };
        analysis = analysis::analyze(lang, text, doc.tree(), &opts);
        refuse_errors(shown, &args.file, doc, &analysis)?;
    }
    let file = BenchFile {
        text,
        analysis: &analysis,
        path: Some(&args.file),
    };
    let mut reports = Vec::new();
    for (kernel, spec) in analysis.model.kernels.iter().zip(&analysis.specs) {
        if args.kernel.as_ref().is_some_and(|k| k != &kernel.name) {
            continue;
        }
        let report = match &spec.plan {
            Some(plan) => bench_one(pool, args, &file, file.version(&kernel.name, plan)).await,
            None => KernelBench::new(&kernel.name, "no_spec"),
        };
        reports.push(report);
    }
    Ok((hello, reports))
}

/// One kernel through the bench engine: its reference, verification, then timing.
async fn bench_one(
    pool: &WorkerPool,
    args: &BenchArgs,
    file: &BenchFile<'_>,
    candidate: Version,
) -> KernelBench {
    let name = candidate.label.clone();
    let mut report = KernelBench::new(&name, "ok");
    let reference = match file.reference(&candidate) {
        Ok(r) => r,
        Err(message) => {
            report.reference = candidate
                .plan
                .torch_reference
                .as_ref()
                .map(|t| format!("torch: {}", t.describe()));
            report.status = "error";
            report.error = Some(WorkerError {
                kind: ErrorKind::BadRequest,
                message,
                log: None,
            });
            return report;
        }
    };
    report.reference = reference.as_ref().map(Reference::name);
    if !args.json {
        match &report.reference {
            Some(r) => eprintln!("{name}: verifying against `{r}`..."),
            None => eprintln!("{name}: no reference: checking it against itself..."),
        }
    }
    let verdict = bench::verify(
        pool,
        &candidate,
        reference.as_ref(),
        args.seed,
        args.sanitize,
    )
    .await;
    // A fault or a hang fails the verification; other errors left it unjudged.
    let crashed = matches!(verdict, Verdict::Crashed(_));
    match verdict {
        Verdict::Passed(v) => report.verify = Some(v),
        Verdict::Failed(v) => {
            report.verify = Some(v);
            report.status = "verify_failed";
            return report;
        }
        Verdict::Crashed(e) | Verdict::Error(e) => {
            report.status = if crashed { "verify_failed" } else { "error" };
            report.error = Some(e);
            return report;
        }
    }
    if !args.json {
        eprintln!("{name}: timing...");
    }
    let settings = TimeSettings {
        energy: true,
        ..TimeSettings::default()
    };
    match bench::time(pool, vec![candidate], reference.as_ref(), settings).await {
        Ok(t) => {
            report.interpreter = t.interpreter;
            report.measured = Some(t.measured.clone());
            report.speedup = t.speedup(0);
            report.torch = t.bars(0);
            report.timing = t.kernels.into_iter().next();
            report.reference_timing = t.reference;
        }
        Err(e) => {
            report.status = "error";
            report.error = Some(e);
        }
    }
    report
}

/// Refuses a run in which no kernel would run: none in the file, none with a spec, or
/// the one named has none. Exit 0 would tell a script that something passed.
fn nothing_to_run(
    shown: &str,
    lang: Lang,
    analysis: &FileAnalysis,
    only: Option<&str>,
) -> Result<(), String> {
    let kernels = &analysis.model.kernels;
    let skeleton = "(the editor's \"Insert @bench spec\" code action writes a skeleton)";
    if kernels.is_empty() {
        let what = match lang {
            Lang::Cuda => "`__global__` functions",
            Lang::Triton => "`@triton.jit` functions",
        };
        return Err(format!(
            "{shown}: error: no kernels ({what}) in the file, so nothing was run"
        ));
    }
    match only {
        Some(k) if kernels.iter().any(|x| x.name == k && x.spec.lines.is_empty()) => Err(format!(
            "{shown}: error: `{k}` has no @bench spec, so nothing was run; add @bench lines above it {skeleton}"
        )),
        None if kernels.iter().all(|x| x.spec.lines.is_empty()) => {
            let names: Vec<&str> = kernels.iter().map(|k| k.name.as_str()).collect();
            Err(format!(
                "{shown}: error: no kernel has a @bench spec ({}), so nothing was run; add @bench lines above the one to run {skeleton}",
                names.join(", ")
            ))
        }
        _ => Ok(()),
    }
}

/// Prints the file's syntax and spec errors compiler-style and refuses to run.
fn refuse_errors(
    shown: &str,
    file: &std::path::Path,
    doc: &Document,
    analysis: &FileAnalysis,
) -> Result<(), (u8, String)> {
    let mut out = String::new();
    let mut findings = analysis.findings();
    findings.extend(analysis.torch_module_findings(file));
    findings.sort_by_key(|f| (f.range.start, f.range.end));
    for f in findings {
        if f.severity != Severity::Error {
            continue;
        }
        out.push_str(&super::check::error_line(shown, doc, &f));
    }
    if let Some(note) = &analysis.size_note {
        out.push_str(&format!("{shown}: error: {note}\n"));
    }
    if out.is_empty() {
        Ok(())
    } else {
        out.push_str("kernel-lsp bench: fix the errors above first; nothing was run");
        Err((1, out))
    }
}

/// "1.06× eager · 0.93× compile": how many times faster than PyTorch the kernel is.
pub fn torch_speedups(bars: &TorchBars) -> String {
    let mut parts = Vec::new();
    if let Some(s) = bars.speedup_eager {
        parts.push(format!("{} eager", crate::optimize::headline::ratio(s)));
    }
    if let Some(s) = bars.speedup_compile {
        parts.push(format!("{} compile", crate::optimize::headline::ratio(s)));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(" · ")
    }
}

/// The human-readable table, one row per kernel.
/// How a failure is introduced when the kernel ran against itself.
fn own_check(r: &KernelBench) -> &'static str {
    if r.reference.is_none() {
        " its own check (run against itself: no reference)"
    } else {
        ""
    }
}

pub fn table(hello: &HelloResult, reports: &[KernelBench]) -> String {
    let header = [
        "kernel",
        "time (ms)",
        "GB/s",
        "% copy",
        "TFLOP/s",
        "speedup",
        "verify",
    ];
    let mut rows: Vec<[String; 7]> = Vec::new();
    for r in reports {
        let dash = || "-".to_string();
        let verify = match (&r.verify, &r.error) {
            _ if r.status == "no_spec" => "no @bench spec".to_string(),
            (Some(v), _) if v.passed && r.reference.is_none() => format!(
                "self-check passed ({} cases × {} trials; no reference to compare with)",
                v.cases, v.trials
            ),
            (Some(v), _) if v.passed => {
                format!("passed ({} cases × {} trials)", v.cases, v.trials)
            }
            (Some(v), _) => format!(
                "FAILED{}: {}",
                own_check(r),
                v.failure
                    .as_ref()
                    .map_or("(no detail)", |f| f.message.as_str())
            ),
            (None, Some(e)) if r.status == "verify_failed" => {
                format!("FAILED{}: {}", own_check(r), e.message)
            }
            (None, Some(_)) => "error (below)".to_string(),
            (None, None) => "no reference".to_string(),
        };
        let mut row = [
            r.kernel.clone(),
            dash(),
            dash(),
            dash(),
            dash(),
            dash(),
            verify,
        ];
        if let Some(t) = &r.timing {
            row[1] = format!("{:.4} ± {:.0}%", t.median_ms, t.spread() * 100.0);
            // Energy per call (NVML), when the board reports it.
            if let Some(j) = t.energy_j {
                row[1].push_str(&if j >= 0.1 {
                    format!(" · {j:.2} J")
                } else {
                    format!(" · {:.2} mJ", j * 1e3)
                });
            }
            row[2] = format!("{:.1}", t.gbps);
            row[3] = t
                .frac_copy
                .map_or_else(dash, |f| format!("{:.0}%", f * 100.0));
            row[4] = t.tflops.map_or_else(dash, |f| format!("{f:.2}"));
        }
        if let Some(bars) = &r.torch {
            row[5] = torch_speedups(bars);
        } else if let (Some(s), Some(rf)) = (r.speedup, &r.reference) {
            row[5] = format!("{s:.2}× vs {rf}");
        }
        rows.push(row);
    }
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = String::new();
    if let Some(d) = &hello.device {
        out.push_str(&format!("{} ({}, {} SMs)\n", d.name, d.arch, d.sms));
    }
    out.push_str(&line(&header.map(String::from)));
    for row in &rows {
        out.push_str(&line(row));
    }
    for r in reports {
        let Some(e) = &r.error else { continue };
        if r.status == "error" {
            out.push_str(&format!("{}: error: {}\n", r.kernel, e.message));
        }
        if let Some(log) = &e.log {
            out.push_str(&format!("{}: log:\n{log}\n", r.kernel));
        }
    }
    for r in reports {
        if let Some(sz) = r.verify.as_ref().and_then(|v| v.sanitizer.as_ref()) {
            for line in sz.lines() {
                out.push_str(&format!("{}: compute-sanitizer {line}\n", r.kernel));
            }
        }
    }
    for r in reports {
        if let Some(bars) = &r.torch {
            let t = |t: &Option<Timing>| {
                t.as_ref()
                    .map_or("-".to_string(), |t| format!("{:.4} ms", t.median_ms))
            };
            out.push_str(&format!(
                "{}: PyTorch `{}`: eager {}, torch.compile {}{}\n",
                r.kernel,
                r.reference
                    .as_deref()
                    .unwrap_or("?")
                    .trim_start_matches("torch: "),
                t(&bars.eager),
                t(&bars.compile),
                bars.note
                    .as_ref()
                    .map_or(String::new(), |n| format!(" ({n})"))
            ));
        }
    }
    for r in reports {
        if let Some(note) = r.measured.as_ref().and_then(Measured::note) {
            out.push_str(&format!("{}: {note}\n", r.kernel));
        }
    }
    if reports.iter().any(|r| r.interpreter) {
        out.push_str(
            "note: interpreter timings: Triton ran on the CPU (TRITON_INTERPRET=1); results are verified for real, times are not GPU times\n",
        );
    }
    out
}
