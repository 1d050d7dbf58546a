//! Disturbed timings, and measuring again: a GPU shared with other tenants, or whose
//! clocks move, is sometimes disturbed for a second or so, and a timing taken then has a
//! wide spread and absolute times that are off (the ratio of two versions timed
//! interleaved usually survives, not always). A disturbed measurement is requested
//! again, up to [`MAX_RETIMES`] more times, and the steadiest kept whole, so every
//! timing reported together still comes from one measurement. The rules are pure;
//! [`steadiest_of`] applies them to any way of measuring.

use std::future::Future;

use serde::Serialize;

use crate::worker::protocol::{TimeReport, Timing, WorkerError};

/// A measurement is disturbed when one of its timings has a spread ((p90 - p10) /
/// median, the `±` of `kernel-lsp bench`: [`Timing::spread`]) above this. On an H200
/// the same kernels read ±4-8% undisturbed and ±28-120% disturbed, minutes apart.
pub const DISTURBED_SPREAD: f64 = 0.20;

/// How many more times a disturbed measurement is requested.
pub const MAX_RETIMES: usize = 2;

/// The widest spread among one measurement's timings (0 for none).
pub fn worst_spread(timings: &[Timing]) -> f64 {
    timings.iter().map(Timing::spread).fold(0.0, f64::max)
}

/// Whether a measurement was disturbed: one of its timings is spread over more than
/// [`DISTURBED_SPREAD`] of its median.
pub fn disturbed(timings: &[Timing]) -> bool {
    worst_spread(timings) > DISTURBED_SPREAD
}

/// The steadiest of several measurements of one request (the lowest worst spread, the
/// earliest of equals): its index, `None` for none.
pub fn steadiest<'a>(measurements: impl IntoIterator<Item = &'a [Timing]>) -> Option<usize> {
    measurements
        .into_iter()
        .map(worst_spread)
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)
}

/// Whether to measure again after `taken` (in order): the last one is disturbed, the
/// retimes are not used up, and it is a GPU time (never on Triton's CPU interpreter).
pub fn measure_again(taken: &[TimeReport]) -> bool {
    taken.last().is_some_and(|last| {
        !last.interpreter && disturbed(&last.timings) && taken.len() <= MAX_RETIMES
    })
}

/// How a timing was measured: how many times, and each measurement's worst spread in
/// the order taken (the kept one is the lowest).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Measured {
    pub measurements: u32,
    #[serde(skip_serializing_if = "one_or_none")]
    pub spreads: Vec<f64>,
}

fn one_or_none(spreads: &[f64]) -> bool {
    spreads.len() < 2
}

impl Measured {
    pub fn of(spreads: Vec<f64>) -> Measured {
        Measured {
            measurements: spreads.len() as u32,
            spreads,
        }
    }

    /// The kept measurement's worst spread.
    pub fn kept_spread(&self) -> Option<f64> {
        self.spreads.iter().copied().min_by(f64::total_cmp)
    }

    /// One line for the user when it was measured more than once: "timing was disturbed
    /// (spread 53%): measured 3 times, kept the steadiest (±6%)".
    pub fn note(&self) -> Option<String> {
        let (first, kept) = (*self.spreads.first()?, self.kept_spread()?);
        if self.spreads.len() < 2 {
            return None;
        }
        let still = if kept > DISTURBED_SPREAD {
            ", still disturbed: its times may be off"
        } else {
            ""
        };
        Some(format!(
            "timing was disturbed (spread {:.0}%): measured {} times, kept the steadiest (±{:.0}%){still}",
            first * 100.0,
            self.spreads.len(),
            kept * 100.0
        ))
    }
}

/// Measures with `measure` until a measurement is not disturbed ([`measure_again`]) and
/// keeps the steadiest, whole: (its report, how it was measured). The first failure is
/// the error; a retime that fails ends the retiming with the measurements taken.
pub async fn steadiest_of<F, Fut>(mut measure: F) -> Result<(TimeReport, Measured), WorkerError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<TimeReport, WorkerError>>,
{
    let mut taken = vec![measure().await?];
    while measure_again(&taken) {
        match measure().await {
            Ok(report) => taken.push(report),
            Err(_) => break,
        }
    }
    let spreads = taken.iter().map(|r| worst_spread(&r.timings)).collect();
    let kept = steadiest(taken.iter().map(|r| r.timings.as_slice())).unwrap_or(0);
    Ok((taken.swap_remove(kept), Measured::of(spreads)))
}

#[cfg(test)]
mod tests;
