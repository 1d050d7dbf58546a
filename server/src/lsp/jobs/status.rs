//! What the server knows about each kernel from its jobs (not from the text): the last
//! timing and speedups, a verification failure or win, a rewrite waiting to be applied,
//! the running job's cancel flag and the last profile; and how diagnostics, code lenses
//! and inlay hints show it.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tower_lsp::lsp_types::*;

use crate::document::Document;
use crate::optimize;
use crate::syntax::Kernel;
use crate::worker::protocol::Timing;

/// What the server knows about one kernel from jobs (not from the text).
#[derive(Clone, Debug, Default)]
pub(in crate::lsp) struct KernelStatus {
    /// The last timing of the version in the editor, and its speedup over the baseline.
    pub timing: Option<Timing>,
    pub speedup: Option<f64>,
    /// With `reference = torch: ...`: the speedups over PyTorch eager and torch.compile,
    /// and the setting that picks which the hint shows.
    pub torch: Option<(Option<f64>, Option<f64>, crate::settings::HintSpeedupVs)>,
    pub registers: Option<u32>,
    /// The last verification failure: (message, buffer).
    pub failure: Option<(String, Option<String>)>,
    /// The last win, as an information diagnostic.
    pub win: Option<String>,
    /// A verified rewrite waiting for the author (`applyMode = "offer"`).
    pub pending: Option<Pending>,
    /// Set while a job runs on this kernel; setting it to true cancels the job.
    pub running: Option<Arc<AtomicBool>>,
    /// The region text the last bench measured (benchOnSave skips unchanged kernels).
    pub benched_region: Option<String>,
    /// The last Nsight Compute profile, and the region text it was taken of.
    pub profile: Option<(crate::profile::Profile, String)>,
}

#[derive(Clone, Debug)]
pub(in crate::lsp) struct Pending {
    /// The kernel's region when the job started, and the verified replacement.
    pub start_region: String,
    pub new_region: String,
    pub speedup: f64,
    pub label: String,
}

/// Job diagnostics for one kernel: a verification failure (error, with the spec line of
/// the failing buffer as related information) or the last win (information).
pub(in crate::lsp) fn job_diagnostics(
    doc: &Document,
    kernel: &Kernel,
    status: &KernelStatus,
    uri: &Url,
    enc: crate::document::PositionEncoding,
) -> Vec<Diagnostic> {
    let range = crate::lsp::convert::lsp_range(doc, &kernel.name_range, enc);
    let mut out = Vec::new();
    if let Some((msg, buffer)) = &status.failure {
        let related = buffer.as_ref().and_then(|b| {
            let line = kernel.spec.lines.iter().find(|l| {
                l.text.split(';').any(|seg| {
                    seg.trim_start()
                        .strip_prefix(b.as_str())
                        .is_some_and(|r| r.trim_start().starts_with(':'))
                })
            })?;
            let start = line.offset;
            let r = crate::lsp::convert::lsp_range(
                doc,
                &(start..start + line.text.trim_end().len()),
                enc,
            );
            Some(vec![DiagnosticRelatedInformation {
                location: Location {
                    uri: uri.clone(),
                    range: r,
                },
                message: format!("`{b}` is declared here"),
            }])
        });
        out.push(Diagnostic {
            range,
            severity: Some(DiagnosticSeverity::ERROR),
            source: Some("kernel-lsp".into()),
            code: Some(NumberOrString::String("verify".into())),
            message: format!("`{}` fails verification: {msg}", kernel.name),
            related_information: related,
            ..Default::default()
        });
    } else if let Some(w) = &status.win {
        out.push(Diagnostic {
            range,
            severity: Some(DiagnosticSeverity::INFORMATION),
            source: Some("kernel-lsp".into()),
            code: Some(NumberOrString::String("verified".into())),
            message: w.clone(),
            ..Default::default()
        });
    }
    out
}

/// The inlay hint text after a benchmark: `0.27 ms · 1.10× · 92% BW · 32 regs`.
pub(in crate::lsp) fn timing_label(s: &KernelStatus) -> Option<String> {
    let t = s.timing.as_ref()?;
    let mut parts = vec![if t.median_ms >= 0.1 {
        format!("{:.2} ms", t.median_ms)
    } else {
        format!("{:.1} µs", t.median_ms * 1000.0)
    }];
    if let Some((eager, compile, vs)) = s.torch {
        use crate::settings::HintSpeedupVs;
        let eager = eager.map(|e| format!("{} eager", optimize::headline::ratio(e)));
        let compile = compile.map(|c| format!("{} compile", optimize::headline::ratio(c)));
        match vs {
            HintSpeedupVs::All => parts.extend(eager.into_iter().chain(compile)),
            HintSpeedupVs::Eager => parts.extend(eager),
            HintSpeedupVs::Compile => parts.extend(compile.or(eager)),
        }
    } else if let Some(sp) = s.speedup {
        parts.push(format!("{sp:.2}×"));
    }
    if let Some(f) = t.frac_copy {
        parts.push(format!("{:.0}% BW", f * 100.0));
    }
    if let Some(r) = s.registers {
        parts.push(format!("{r} regs"));
    }
    Some(parts.join(" · "))
}

#[cfg(test)]
mod hint_tests {
    use super::{timing_label, KernelStatus};
    use crate::settings::HintSpeedupVs;
    use crate::worker::protocol::Timing;

    fn status(torch: Option<(Option<f64>, Option<f64>, HintSpeedupVs)>) -> KernelStatus {
        KernelStatus {
            timing: Some(Timing {
                label: "k".into(),
                median_ms: 0.058,
                min_ms: 0.05,
                p10_ms: 0.05,
                p90_ms: 0.06,
                median_interval_ms: None,
                reps: 100,
                gbps: 1.0,
                frac_copy: None,
                tflops: None,
                frac_fma: None,
                energy_j: None,
            }),
            speedup: Some(1.06),
            torch,
            ..Default::default()
        }
    }

    #[test]
    fn the_hint_compares_with_what_the_setting_picks() {
        let both = |vs| status(Some((Some(1.06), Some(0.93), vs)));
        assert_eq!(
            timing_label(&both(HintSpeedupVs::All)).unwrap(),
            "58.0 µs · 1.06× eager · 0.93× compile"
        );
        assert_eq!(
            timing_label(&both(HintSpeedupVs::Eager)).unwrap(),
            "58.0 µs · 1.06× eager"
        );
        assert_eq!(
            timing_label(&both(HintSpeedupVs::Compile)).unwrap(),
            "58.0 µs · 0.93× compile"
        );
        // torch.compile not timed (CPU interpreter): eager stands in.
        let eager_only = status(Some((Some(1.06), None, HintSpeedupVs::Compile)));
        assert_eq!(timing_label(&eager_only).unwrap(), "58.0 µs · 1.06× eager");
        // A kernel or baseline reference: the plain speedup.
        assert_eq!(timing_label(&status(None)).unwrap(), "58.0 µs · 1.06×");
        // On the interpreter a kernel is thousands of times slower than eager: the
        // ratio keeps two significant digits instead of reading 0.00×.
        let slow = status(Some((Some(0.0042), None, HintSpeedupVs::All)));
        assert_eq!(timing_label(&slow).unwrap(), "58.0 µs · 0.0042× eager");
    }
}
