//! `kernel-lsp.bench` and benchOnSave: the editor's front end over the one bench engine
//! (`crate::optimize::bench`, which `kernel-lsp bench` uses too). The reference is the
//! spec's (`reference = K` or `torch: ...`), else the pinned baseline, pinned on the first
//! bench that passes its own check. The result goes to the kernel's status (hint, lens,
//! diagnostics) and a message.

use serde_json::Value;
use tower_lsp::lsp_types::*;

use crate::analysis::AnalyzeOptions;
use crate::document::Document;
use crate::optimize::bench::{self, BenchFile, Reference};
use crate::optimize::evaluate;
use crate::spec::{BenchPlan, EvalEnv};
use crate::worker::protocol::Version;

use super::{load, message, region, status_for, store, Backend, Snapshot, Target};

impl Backend {
    pub(super) async fn bench_job(
        &self,
        uri: &Url,
        snap: Snapshot,
        token: Option<NumberOrString>,
    ) -> std::result::Result<Value, String> {
        let name = snap.kernel.name.clone();
        let (guard, reporter) = self
            .start_job(uri, &name, format!("Benchmark {name}"), token)
            .await?;
        reporter.report("starting the worker").await;
        let pool = self.pool_for(snap.lang).await?;
        let env = bench::device_env(pool.hello().as_ref(), snap.settings.sms);
        let doc = Document::new(snap.lang, 0, &snap.text);
        let opts = AnalyzeOptions {
            env: env.clone(),
            ..AnalyzeOptions::default()
        };
        let analysis = crate::analysis::analyze(snap.lang, &snap.text, doc.tree(), &opts);
        let file = BenchFile {
            text: &snap.text,
            analysis: &analysis,
            path: snap.file.as_deref(),
        };
        let cand = file.kernel(&name)?;
        let region_text = snap.text[region(&snap.kernel)].to_string();
        // The spec's reference, else the pinned baseline (pinned below, once the kernel
        // passes its own check, when there is none: docs/spec.md, "the version recorded
        // when it was first benchmarked").
        let reference = match file.reference(&cand)? {
            Some(r) => Some(r),
            None => baseline(&snap, &name, &env)?,
        };
        let label = reference.as_ref().map(|r| r.version().label.clone());
        reporter
            .report(&match &label {
                Some(l) => format!("verifying against {l}"),
                None => "checking it against itself (no reference yet)".to_string(),
            })
            .await;
        let seed = snap.settings.verify.seed;
        let verdict = bench::verify(&pool, &cand, reference.as_ref(), seed, false).await;
        if let Some((msg, buffer)) = verdict.failure() {
            {
                let mut st = self.state();
                if let Some(k) = status_for(&mut st, uri, &snap) {
                    k.failure = Some((msg.clone(), buffer));
                    k.win = None;
                    k.timing = None;
                    k.benched_region = Some(region_text);
                }
            }
            drop(guard);
            let text = match &label {
                Some(l) => format!("`{name}` fails verification against {l}: {msg}"),
                None => format!(
                    "`{name}` fails its own check (run against itself; it is not pinned as the baseline): {msg}"
                ),
            };
            reporter.end(&text).await;
            return Ok(message("failed", text));
        }
        let pinned_now = match (&reference, &snap.file) {
            (None, Some(f)) => {
                store(f, "baseline", &name, &snap.text)?;
                true
            }
            _ => false,
        };
        reporter.report("timing").await;
        let settings = Default::default();
        let timed = bench::time(&pool, vec![cand.clone()], reference.as_ref(), settings)
            .await
            .map_err(|e| e.message)?;
        let timing = timed
            .kernels
            .first()
            .cloned()
            .ok_or("the worker returned no timing")?;
        let speedup = timed.speedup(0);
        let registers = bench::registers(&pool, &cand).await;
        let outcome = Outcome {
            name: &name,
            against: label.as_deref(),
            plan: &cand.plan,
            median_ms: timing.median_ms,
            speedup,
            pinned_now,
            interpreter: timed.interpreter,
        };
        let (verified, mut text) = (outcome.verified(), outcome.message());
        if let Some(note) = timed.measured.note() {
            text.push_str(&format!(" ({note})"));
        }
        {
            let mut st = self.state();
            if let Some(k) = status_for(&mut st, uri, &snap) {
                k.failure = None;
                k.timing = Some(timing);
                k.speedup = speedup;
                k.torch = timed.bars(0).map(|b| {
                    (
                        b.speedup_eager,
                        b.speedup_compile,
                        snap.settings.hint_speedup_vs,
                    )
                });
                k.registers = registers;
                k.benched_region = Some(region_text.clone());
                if reference.is_some() {
                    k.win = speedup
                        .filter(|s| *s > 1.0)
                        .map(|s| format!("{verified}{s:.2}× faster than the baseline"));
                }
            }
        }
        if let (Some(f), true) = (&snap.file, reference.is_some()) {
            let _ = store(f, "verified", &name, &region_text);
        }
        drop(guard);
        reporter.end(&text).await;
        Ok(message("ok", text))
    }

    /// benchOnSave: re-verify and re-time kernels whose region changed since their last
    /// bench, in the background.
    pub(in crate::lsp) fn bench_on_save(&self, uri: &Url) {
        let targets: Vec<String> = {
            let st = self.state();
            if !st.settings.bench_on_save {
                return;
            }
            let Some(open) = st.docs.get(uri) else { return };
            open.analysis
                .model
                .kernels
                .iter()
                .zip(&open.analysis.specs)
                .filter(|(_, s)| s.plan.is_some())
                .filter(|(k, _)| {
                    let now = &open.doc.text()[region(k)];
                    st.kernels
                        .get(&(uri.clone(), k.name.clone()))
                        .and_then(|s| s.benched_region.as_deref())
                        != Some(now)
                })
                .map(|(k, _)| k.name.clone())
                .collect()
        };
        for name in targets {
            let this = self.clone();
            let uri = uri.clone();
            tokio::spawn(async move {
                let t = Target {
                    uri: uri.clone(),
                    kernel: Some(name),
                    position: None,
                    command: None,
                };
                let Ok(snap) = this.snapshot(&t) else {
                    return;
                };
                let _ = this.bench_job(&uri, snap, None).await;
                this.publish(uri).await;
                let _ = this.client.inlay_hint_refresh().await;
                let _ = this.client.code_lens_refresh().await;
            });
        }
    }
}

/// The kernel's pinned baseline as a reference, when it has one.
fn baseline(
    snap: &Snapshot,
    name: &str,
    env: &EvalEnv,
) -> std::result::Result<Option<Reference>, String> {
    let Some(base) = snap.file.as_ref().and_then(|f| load(f, "baseline", name)) else {
        return Ok(None);
    };
    match evaluate::plan(snap.lang, &base, name, env) {
        Ok(p) => Ok(Some(Reference::Baseline(Version {
            label: "baseline".into(),
            ..p.version
        }))),
        Err(e) => Err(format!(
            "the pinned baseline of `{name}` no longer plans ({e}); pin the current version again"
        )),
    }
}

/// What a passed bench shows the author.
struct Outcome<'a> {
    name: &'a str,
    /// The reference's label; None: checked against itself.
    against: Option<&'a str>,
    plan: &'a BenchPlan,
    median_ms: f64,
    speedup: Option<f64>,
    pinned_now: bool,
    interpreter: bool,
}

impl Outcome<'_> {
    /// "verified against baseline (2 case(s) × 3 trials), ".
    fn verified(&self) -> String {
        let how = self.against.map_or_else(
            || "checked against itself".to_string(),
            |l| format!("verified against {l}"),
        );
        format!(
            "{how} ({} case(s) × {} trials), ",
            self.plan.cases.len(),
            self.plan.trials
        )
    }

    /// The job's message: the verification, the time, the speedup and what happened.
    fn message(&self) -> String {
        let mut text = format!(
            "`{}`: {}{:.4} ms",
            self.name,
            self.verified(),
            self.median_ms
        );
        if let Some(s) = self.speedup {
            text.push_str(&format!(", {s:.2}× vs {}", self.against.unwrap_or("")));
        }
        if self.pinned_now {
            text.push_str(" (pinned as the baseline)");
        }
        if self.interpreter {
            text.push_str(" (Triton CPU interpreter: not GPU time)");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::Outcome;
    use crate::syntax::Lang;

    #[test]
    fn the_message_says_what_the_kernel_was_checked_against_and_how_fast_it_is() {
        let src = "// @bench n = 1000, 17\n// @bench x: out f32[n]\n// @bench grid = cdiv(n, 256); block = 256\nextern \"C\" __global__ void k(int n, float* x) {}\n";
        let env = crate::spec::EvalEnv::default();
        let plan = crate::optimize::evaluate::plan(Lang::Cuda, src, "k", &env)
            .expect("the fixture plans")
            .version
            .plan;
        let first = Outcome {
            name: "k",
            against: None,
            plan: &plan,
            median_ms: 0.12345,
            speedup: None,
            pinned_now: true,
            interpreter: true,
        };
        assert_eq!(
            first.message(),
            "`k`: checked against itself (2 case(s) × 3 trials), 0.1235 ms (pinned as the baseline) (Triton CPU interpreter: not GPU time)"
        );
        let again = Outcome {
            against: Some("torch eager"),
            speedup: Some(1.5),
            pinned_now: false,
            interpreter: false,
            ..first
        };
        assert_eq!(
            again.message(),
            "`k`: verified against torch eager (2 case(s) × 3 trials), 0.1235 ms, 1.50× vs torch eager"
        );
        assert_eq!(
            again.verified(),
            "verified against torch eager (2 case(s) × 3 trials), "
        );
    }
}
