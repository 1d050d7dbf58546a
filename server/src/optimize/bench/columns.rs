//! An optimize run against PyTorch: the start and the run's accepted versions timed
//! together with PyTorch eager and torch.compile in one interleaved measurement, for a
//! kernel whose spec says `reference = torch: ...` (the bench engine's columns, one row
//! per version). Which versions fit in one measurement is [`chosen`], a pure rule.

use std::path::Path;

use serde::Serialize;

use super::{time, torch_reference, Measured};
use crate::optimize::evaluate;
use crate::spec::EvalEnv;
use crate::syntax::Lang;
use crate::worker::pool::WorkerPool;
use crate::worker::protocol::Version;

/// At most this many versions are timed together, so a long run's table stays one
/// interleaved measurement.
pub const MAX_TIMED: usize = 16;

/// The optimizer's PyTorch columns: the start and every accepted version next to PyTorch.
#[derive(Debug, Default, PartialEq, Serialize)]
pub struct TorchColumns {
    pub reference: String,
    /// (version, its time, × eager, × compile): "start", then each accepted version
    /// (`v2`), the answer labelled `best (v3)`.
    pub rows: Vec<(String, f64, Option<f64>, Option<f64>)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eager_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compile_ms: Option<f64>,
    /// Why the columns are missing or partial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// When timed: how many times (more than once when disturbed), as `kernel-lsp bench`.
    #[serde(flatten)]
    pub measured: Option<Measured>,
}

/// The accepted versions (node id, text) timed beside the start: all of them, or the
/// answer (`best`) and the most recent others up to [`MAX_TIMED`]; and how many were
/// left out.
pub fn chosen(accepted: &[(usize, String)], best: usize) -> (Vec<&(usize, String)>, usize) {
    let newest_first = accepted.iter().enumerate().rev();
    let mut keep: Vec<usize> = accepted
        .iter()
        .position(|(id, _)| *id == best)
        .into_iter()
        .collect();
    for (i, _) in newest_first {
        if keep.len() >= MAX_TIMED {
            break;
        }
        if !keep.contains(&i) {
            keep.push(i);
        }
    }
    keep.sort_unstable();
    let out: Vec<&(usize, String)> = keep.iter().map(|i| &accepted[*i]).collect();
    let dropped = accepted.len() - out.len();
    (out, dropped)
}

/// The run's versions as `kernel` of `lang`, planned on the device's `env`: the start,
/// then each chosen accepted version (`v3`, the answer `best (v3)`).
fn versions(
    lang: Lang,
    kernel: &str,
    env: &EvalEnv,
    start: Version,
    chosen: &[&(usize, String)],
    best: usize,
) -> Vec<Version> {
    let mut out = vec![Version {
        label: "start".into(),
        ..start
    }];
    for (id, text) in chosen {
        if let Ok(p) = evaluate::plan(lang, text, kernel, env) {
            let label = if *id == best {
                format!("best (v{id})")
            } else {
                format!("v{id}")
            };
            out.push(Version { label, ..p.version });
        }
    }
    out
}

/// With `reference = torch: ...` in `kernel`'s spec in `start` (the file `file`'s text):
/// one interleaved timing of the start, the `accepted` versions (node id and text; `best`:
/// the answer's id) and PyTorch. `None` for a kernel without a PyTorch reference.
pub async fn torch_columns(
    pool: &WorkerPool,
    lang: Lang,
    file: &Path,
    start: &str,
    accepted: &[(usize, String)],
    best: usize,
    kernel: &str,
) -> Option<TorchColumns> {
    let env = super::device_env(pool.hello().as_ref(), EvalEnv::default().sms);
    let v0 = evaluate::plan(lang, start, kernel, &env).ok()?.version;
    let reference = torch_reference(&v0, Some(file))?;
    let mut cols = TorchColumns {
        reference: v0.plan.torch_reference.as_ref()?.describe(),
        ..TorchColumns::default()
    };
    let reference = match reference {
        Ok(r) => r,
        Err(e) => {
            cols.note = Some(e);
            return Some(cols);
        }
    };
    let (chosen, dropped) = chosen(accepted, best);
    let dropped = (dropped > 0).then(|| format!(
        "{dropped} earlier accepted versions are not in this table (at most {MAX_TIMED} are timed together)"
    ));
    let kernels = versions(lang, kernel, &env, v0, &chosen, best);
    match time(pool, kernels, Some(&reference), Default::default()).await {
        Ok(t) => {
            cols.measured = Some(t.measured.clone());
            let torch = t.torch.clone().unwrap_or_default();
            cols.eager_ms = torch.eager.as_ref().map(|e| e.median_ms);
            cols.compile_ms = torch.compile.as_ref().map(|c| c.median_ms);
            cols.note = match (torch.note, dropped) {
                (Some(why), Some(n)) => Some(format!("{why}; {n}")),
                (why, n) => why.map(String::from).or(n),
            };
            for (i, k) in t.kernels.iter().enumerate() {
                let bars = t.bars(i).unwrap_or_default();
                let row = (
                    k.label.clone(),
                    k.median_ms,
                    bars.speedup_eager,
                    bars.speedup_compile,
                );
                cols.rows.push(row);
            }
        }
        Err(e) => {
            cols.note = Some(format!("timing against PyTorch failed: {}", e.message));
        }
    }
    Some(cols)
}
