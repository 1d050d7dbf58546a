//! Why a step's row reads as it does, in words, for the CLI's table and the report:
//! a no-gain step kept the current version because its best candidate was slower (or
//! within the noise); an accepted candidate that is not the fastest won because the
//! faster one was within the noise and the first in the step's order wins
//! (`accept::pick`); steps that never ran are listed apart. Pure: records in, text out.

use super::headline::ratio;
use super::record::{Outcome, StepRecord};

/// The note under a step's row, if it needs one.
pub fn step_note(s: &StepRecord) -> Option<String> {
    match s.outcome {
        Outcome::NoGain if s.best_ms.is_some() || s.speedup != 1.0 => {
            let within = if s.speedup >= 1.0 {
                ", within the noise"
            } else {
                ""
            };
            Some(format!(
                "best candidate {} of current{within}, kept current",
                ratio(s.speedup)
            ))
        }
        Outcome::Accepted => {
            let accepted = s.accepted.as_deref()?;
            let ms_of = |label: &str| {
                s.candidates
                    .iter()
                    .find(|c| c.verified && c.label == label)
                    .and_then(|c| c.median_ms)
            };
            let mine = ms_of(accepted)?;
            let fastest = s
                .candidates
                .iter()
                .filter(|c| c.verified)
                .filter_map(|c| c.median_ms.map(|m| (c.label.as_str(), m)))
                .min_by(|a, b| a.1.total_cmp(&b.1))?;
            (fastest.0 != accepted && fastest.1 < mine)
                .then(|| format!("within the noise of {}: the first in order wins", fastest.0))
        }
        _ => None,
    }
}

/// "not applicable to this kernel (never ran): unroll, vectorize", or None.
pub fn never_ran(steps: &[StepRecord]) -> Option<String> {
    let mut ids: Vec<&str> = Vec::new();
    for s in steps.iter().filter(|s| s.outcome == Outcome::NotApplicable) {
        if !ids.contains(&s.strategy_id.as_str()) {
            ids.push(&s.strategy_id);
        }
    }
    (!ids.is_empty()).then(|| {
        format!(
            "not applicable to this kernel (never ran): {}",
            ids.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optimize::CandidateRecord;

    fn step(
        outcome: Outcome,
        speedup: f64,
        cands: &[(&str, f64)],
        accepted: Option<&str>,
    ) -> StepRecord {
        let json = serde_json::json!({
            "step": 1, "strategy_id": "tunable_sweep", "strategy": "Sweep", "rationale": "",
            "outcome": outcome, "candidates": [], "speedup": speedup, "cumulative": 1.0,
            "seed": 42, "source_hash": "", "interpreter": false,
        });
        let mut s: StepRecord = serde_json::from_value(json).unwrap();
        s.best_ms = cands.iter().map(|c| c.1).reduce(f64::min);
        s.accepted = accepted.map(str::to_string);
        s.candidates = cands
            .iter()
            .map(|(l, m)| CandidateRecord {
                label: l.to_string(),
                verified: true,
                median_ms: Some(*m),
                ..Default::default()
            })
            .collect();
        s
    }

    #[test]
    fn a_slower_best_candidate_reads_as_kept_current() {
        let s = step(Outcome::NoGain, 0.54, &[("BLOCK=64", 2.0)], None);
        assert_eq!(
            step_note(&s).unwrap(),
            "best candidate 0.54× of current, kept current"
        );
        let s = step(Outcome::NoGain, 1.01, &[("BLOCK=64", 2.0)], None);
        assert_eq!(
            step_note(&s).unwrap(),
            "best candidate 1.01× of current, within the noise, kept current"
        );
    }

    #[test]
    fn an_accepted_candidate_that_is_not_the_fastest_says_why() {
        let cands = [("BLOCK=1024", 11.04), ("BLOCK=2048", 7.74)];
        let s = step(Outcome::Accepted, 3.0, &cands, Some("BLOCK=1024"));
        assert_eq!(
            step_note(&s).unwrap(),
            "within the noise of BLOCK=2048: the first in order wins"
        );
        let s = step(Outcome::Accepted, 3.0, &cands, Some("BLOCK=2048"));
        assert_eq!(step_note(&s), None, "the fastest needs no note");
    }

    #[test]
    fn steps_that_never_ran_are_listed_once() {
        let na = |id: &str| {
            let mut s = step(Outcome::NotApplicable, 1.0, &[], None);
            s.strategy_id = id.into();
            s
        };
        let steps = [
            na("unroll"),
            step(Outcome::NoGain, 0.9, &[], None),
            na("vectorize"),
            na("unroll"),
        ];
        assert_eq!(
            never_ran(&steps).unwrap(),
            "not applicable to this kernel (never ran): unroll, vectorize"
        );
        assert_eq!(never_ran(&steps[1..2]), None);
    }
}
