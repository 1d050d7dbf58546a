//! The run's one number. When a run ends, its best version and its start are timed
//! once more, side by side on the primary worker; that time and the speedup it gives
//! ([`Headline`]) are what the CLI's table, `--json`, the history (and so `report`) and
//! the editor print for the run. Per-step speedups are measured against the version each
//! step started from, in different timings, so their product is not printed as the
//! run's result. Also [`ratio`], how every `×` figure is written.

use serde::{Deserialize, Serialize};

use crate::worker::pool::WorkerPool;
use crate::worker::protocol::Version;

/// The end-of-run timing of the answer against the start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Headline {
    /// The run (its start, ms since the Unix epoch), as in its steps' records.
    pub run: u64,
    /// The answer's version in the run's tree (0: the start itself, nothing was faster).
    pub best_node: usize,
    pub start_ms: f64,
    pub best_ms: f64,
    /// `start_ms / best_ms`, 1.0 when the answer is the start.
    pub speedup: f64,
    /// Timed on Triton's CPU interpreter: not GPU times.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interpreter: bool,
}

impl Headline {
    /// The headline of two medians from one side-by-side timing.
    pub fn from_times(run: u64, best_node: usize, start_ms: f64, best_ms: f64) -> Headline {
        let speedup = if best_node == 0 || best_ms <= 0.0 {
            1.0
        } else {
            start_ms / best_ms
        };
        Headline {
            run,
            best_node,
            start_ms,
            best_ms: if best_node == 0 { start_ms } else { best_ms },
            speedup,
            interpreter: false,
        }
    }

    /// One line: "best v2: 0.0123 ms against the start's 0.0456 ms, 3.71× (timed side
    /// by side at the end of the run)".
    pub fn describe(&self) -> String {
        if self.best_node == 0 {
            return format!(
                "no version beat the start; the start takes {:.4} ms",
                self.start_ms
            );
        }
        format!(
            "best v{}: {:.4} ms against the start's {:.4} ms, {} (timed side by side at the end of the run)",
            self.best_node,
            self.best_ms,
            self.start_ms,
            ratio(self.speedup)
        )
    }
}

/// A ratio as `2.25×`, with enough digits that a small one still says something:
/// `0.0042×` rather than `0.00×`.
pub fn ratio(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    if x == 0.0 || x.abs() >= 0.095 {
        return format!("{x:.2}×");
    }
    // Two significant digits.
    let digits = (1 - x.abs().log10().floor() as i32).clamp(2, 12) as usize;
    format!("{x:.digits$}×")
}

/// Times `start` and the answer (`best`, version `best_node`; None when the answer is
/// the start) side by side on the primary worker.
pub async fn measure(
    pool: &WorkerPool,
    run: u64,
    start: &Version,
    best: Option<(usize, &Version)>,
    interpreter: bool,
) -> Result<Headline, String> {
    let others: Vec<Version> = best.iter().map(|(_, v)| (*v).clone()).collect();
    let (base, timed) = super::evaluate::retime_on_primary(pool, start, &others).await?;
    let (node, best_ms) = match (best, timed.first()) {
        (Some((id, _)), Some(t)) => (id, t.median_ms),
        _ => (0, base.median_ms),
    };
    let mut h = Headline::from_times(run, node, base.median_ms, best_ms);
    h.interpreter = interpreter;
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speedup_is_start_over_best_of_one_timing() {
        let h = Headline::from_times(7, 3, 4.0, 1.6);
        assert_eq!(h.speedup, 2.5);
        assert_eq!(
            h.describe(),
            "best v3: 1.6000 ms against the start's 4.0000 ms, 2.50× (timed side by side at the end of the run)"
        );
    }

    #[test]
    fn an_answer_that_is_the_start_is_one_times() {
        let h = Headline::from_times(7, 0, 4.0, 3.0);
        assert_eq!((h.speedup, h.best_ms), (1.0, 4.0));
        assert_eq!(
            h.describe(),
            "no version beat the start; the start takes 4.0000 ms"
        );
    }

    #[test]
    fn small_ratios_keep_two_significant_digits() {
        assert_eq!(ratio(2.254), "2.25×");
        assert_eq!(ratio(0.54), "0.54×");
        assert_eq!(ratio(0.0042), "0.0042×");
        assert_eq!(ratio(0.00042), "0.00042×");
        assert_eq!(ratio(0.0), "0.00×");
        assert_eq!(ratio(f64::NAN), "-");
    }
}
