//! What a step verifies its candidates against (docs/optimizer.md, "Tensor cores and
//! the f32 tolerance"). Without a PyTorch reference in the spec, against the current
//! version: every output within the spec's tolerance of the current version's, as
//! always. With one (`reference = torch: ...`), against that reference on the same
//! inputs: the worker counts each case's and output buffer's elements outside the
//! tolerance (a [`Tally`]) for the candidate and, once per version and seed, for the
//! current version, and the candidate passes when it is no less accurate
//! ([`no_less_accurate`], pure): no more elements outside, and no larger worst
//! difference beyond the tolerance. NaN, guards, faults, written inputs, determinism and
//! the anti-cheat rules fail a candidate either way. [`Judge`] holds the run's choice;
//! [`Rule`] is one step's, with the current version's tallies in hand.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use crate::worker::pool::WorkerPool;
use crate::worker::protocol::{Op, OpResult, Tally, TorchMode, VerifyReport, Version, WorkerError};

/// The run's choice of reference, and the current versions' tallies measured so far.
pub struct Judge {
    /// The spec's PyTorch reference (eager), when candidates are judged against it.
    torch: Option<Version>,
    /// Tallies by version and seed.
    known: Mutex<HashMap<u64, Vec<Tally>>>,
}

/// One step's rule, resolved before its candidates are verified.
#[derive(Clone, Debug)]
pub enum Rule {
    /// Within the spec's tolerance of the current version.
    Current,
    /// No less accurate than the current version (`baseline`) against `reference`.
    Torch {
        reference: Box<Version>,
        baseline: Vec<Tally>,
    },
}

impl Judge {
    /// Candidates against the current version.
    pub fn current() -> Judge {
        Judge {
            torch: None,
            known: Mutex::new(HashMap::new()),
        }
    }

    /// Candidates against `reference` (a [`Version::torch_reference`]).
    pub fn against_torch(reference: Version) -> Judge {
        Judge {
            torch: Some(reference),
            known: Mutex::new(HashMap::new()),
        }
    }

    /// The run's judge for a kernel starting at `start`: against its spec's PyTorch
    /// reference when it has one (a `module.fn` reference is read next to `file`), else
    /// against the current version. The `String` says why a reference is not used.
    pub fn for_run(start: &Version, file: Option<&std::path::Path>) -> (Judge, Option<String>) {
        let Some(tr) = &start.plan.torch_reference else {
            return (Judge::current(), None);
        };
        let module = match (tr.as_ref(), file) {
            (crate::spec::TorchReference::Expr { .. }, _) => Ok(String::new()),
            (_, Some(f)) => crate::analysis::torch_module_source(f, tr),
            (_, None) => Err("the file is not on disk, and the module sits next to it".into()),
        };
        match module {
            Ok(m) => (
                Judge::against_torch(Version::torch_reference(start, TorchMode::Eager, m)),
                None,
            ),
            Err(why) => (
                Judge::current(),
                Some(format!(
                    "candidates are verified against the current version, not the PyTorch reference `{}`: {why}",
                    tr.describe()
                )),
            ),
        }
    }

    /// The rule for candidates made from `current`: against PyTorch when the run has a
    /// reference and `current` passes every check but the tolerance against it (its
    /// tallies measured once per version and seed), else against `current`. The
    /// `String` says why a run with a reference fell back.
    pub async fn rule(
        &self,
        pool: &WorkerPool,
        current: &Version,
        seed: u64,
        progress: &mut (dyn FnMut(&str) + Send),
    ) -> (Rule, Option<String>) {
        let Some(reference) = &self.torch else {
            return (Rule::Current, None);
        };
        let key = key_of(current, seed);
        let known = self.known.lock().ok().and_then(|k| k.get(&key).cloned());
        let tallies = match known {
            Some(t) => Ok(t),
            None => {
                let op = Op::verify_tally(current, reference, seed);
                let served = super::evaluate::request_requeued(pool, op, progress).await;
                let t = verdict(served.result).map(|r| r.tally);
                // A failure is asked again next step: it may be a lost worker.
                if let (Ok(t), Ok(mut k)) = (&t, self.known.lock()) {
                    k.insert(key, t.clone());
                }
                t
            }
        };
        match tallies {
            Ok(baseline) => (
                Rule::Torch {
                    reference: Box::new(reference.clone()),
                    baseline,
                },
                None,
            ),
            Err(why) => (
                Rule::Current,
                Some(format!(
                    "candidates verified against the current version: it does not pass against the PyTorch reference ({why})"
                )),
            ),
        }
    }

    /// Remembers `version`'s tallies on `seed` (a candidate's, when it is accepted).
    pub fn remember(&self, version: &Version, seed: u64, tally: Vec<Tally>) {
        if let Ok(mut k) = self.known.lock() {
            k.insert(key_of(version, seed), tally);
        }
    }

    /// `version`'s tallies on `seed`, when they were measured.
    pub fn tallies(&self, version: &Version, seed: u64) -> Option<Vec<Tally>> {
        let k = self.known.lock().ok()?;
        k.get(&key_of(version, seed)).cloned()
    }

    /// The compute-sanitizer run of `cand`: against the current version, or against
    /// itself where candidates are judged against PyTorch (the sanitizer judges memory,
    /// not values, and the native check against the current version would compare
    /// values within the tolerance).
    pub fn sanitize_op(&self, cand: &Version, current: &Version, seed: u64) -> Op {
        let against = if self.torch.is_some() { cand } else { current };
        Op::verify(cand, against, seed, true)
    }

    /// [`Judge::rule`] for `current`, then `cand` verified by it: (the worker that
    /// answered, the report or why it failed).
    pub async fn verify_on(
        &self,
        pool: &WorkerPool,
        current: &Version,
        cand: &Version,
        seed: u64,
        progress: &mut (dyn FnMut(&str) + Send),
    ) -> (Option<usize>, Result<VerifyReport, String>) {
        let (rule, _) = self.rule(pool, current, seed, progress).await;
        let op = rule.op(cand, current, seed);
        let served = super::evaluate::request_requeued(pool, op, progress).await;
        (served.worker, rule.verdict(served.result))
    }
}

impl Rule {
    /// The request that verifies `cand`.
    pub fn op(&self, cand: &Version, current: &Version, seed: u64) -> Op {
        match self {
            Rule::Current => Op::verify(cand, current, seed, false),
            Rule::Torch { reference, .. } => Op::verify_tally(cand, reference, seed),
        }
    }

    /// A verification's answer as a pass (the report) or the reason it failed.
    pub fn verdict(&self, result: Result<OpResult, WorkerError>) -> Result<VerifyReport, String> {
        let report = verdict(result)?;
        match self {
            Rule::Current => Ok(report),
            Rule::Torch {
                reference,
                baseline,
            } => match no_less_accurate(&report.tally, baseline) {
                Ok(()) => Ok(report),
                Err(why) => Err(format!(
                    "less accurate than the current version against the PyTorch reference `{}`: {why}",
                    reference
                        .plan
                        .torch_reference
                        .as_ref()
                        .map_or_else(String::new, |t| t.describe())
                )),
            },
        }
    }
}

/// A verification's answer as a pass (the report) or the reason it failed.
pub(super) fn verdict(result: Result<OpResult, WorkerError>) -> Result<VerifyReport, String> {
    match result {
        Ok(OpResult::Verify(r)) if r.passed => Ok(r),
        Ok(OpResult::Verify(r)) => Err(r.failure.map_or_else(
            || {
                if r.nondeterministic {
                    "gave different results on the same inputs".to_string()
                } else {
                    "failed verification".to_string()
                }
            },
            |f| f.message,
        )),
        Ok(_) => Err("unexpected worker reply".into()),
        Err(e) => Err(e.message),
    }
}

/// The rule: for every case and output buffer, the candidate has no more elements
/// outside the tolerance than the current version, and its worst difference is within
/// the tolerance or no larger than the current version's. A buffer the current
/// version's tallies lack counts as none outside. `Err` names the first that is worse.
pub fn no_less_accurate(candidate: &[Tally], current: &[Tally]) -> Result<(), String> {
    for c in candidate {
        let (outside, worst) = current
            .iter()
            .find(|t| t.case == c.case && t.buffer == c.buffer)
            .map_or((0, 0.0), |t| (t.outside, t.worst));
        let more = c.outside > outside;
        let further = c.outside > 0 && c.worst > worst.max(1.0);
        if more || further {
            return Err(format!(
                "case {}, `{}`: {} of {} elements outside the tolerance (the current version: {outside}), the worst {} (the current version's: {})",
                c.case,
                c.buffer,
                c.outside,
                c.elements,
                times_tolerance(c.worst),
                times_tolerance(if outside == 0 { 0.0 } else { worst }),
            ));
        }
    }
    Ok(())
}

/// The line an accepted step's checks get: the winner's and the current version's
/// elements outside the tolerance against PyTorch, over every case and trial.
pub fn accuracy_note(winner: &[Tally], current: Option<&[Tally]>) -> String {
    let total = |t: &[Tally]| t.iter().map(|t| t.outside).sum::<u64>();
    let elements: u64 = winner.iter().map(|t| t.elements).sum();
    let before = current.map_or_else(|| "not measured".to_string(), |c| total(c).to_string());
    format!(
        "verified against the PyTorch reference: {} of {elements} elements outside the tolerance (the current version: {before})",
        total(winner)
    )
}

/// `3.1× the tolerance`, or `within it`.
fn times_tolerance(worst: f64) -> String {
    if worst <= 1.0 {
        "within it".into()
    } else if worst >= 1e300 {
        "where the tolerance is 0".into()
    } else {
        format!("{worst:.3}× the tolerance")
    }
}

/// What identifies a version's tallies: its source, plan and options, and the seed.
fn key_of(v: &Version, seed: u64) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.source.hash(&mut h);
    serde_json::to_string(&v.plan)
        .unwrap_or_default()
        .hash(&mut h);
    v.options.hash(&mut h);
    seed.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(case: usize, buffer: &str, outside: u64, worst: f64) -> Tally {
        Tally {
            case,
            buffer: buffer.into(),
            outside,
            elements: 4096,
            worst,
        }
    }

    #[test]
    fn a_candidate_passes_with_no_more_elements_outside_and_no_larger_worst() {
        // The 3xTF32 matmul against the f64 product: none outside where the loop has 120.
        let loop_ = [t(0, "c", 120, 8.5), t(1, "c", 3, 2.0)];
        assert_eq!(
            no_less_accurate(&[t(0, "c", 0, 0.0), t(1, "c", 0, 0.0)], &loop_),
            Ok(())
        );
        // As many outside, each no further: passes (ties are not worse).
        assert_eq!(
            no_less_accurate(&[t(0, "c", 120, 8.5), t(1, "c", 2, 1.5)], &loop_),
            Ok(())
        );
        // Both within the tolerance everywhere: the old check against the reference.
        assert_eq!(
            no_less_accurate(&[t(0, "c", 0, 0.0)], &[t(0, "c", 0, 0.0)]),
            Ok(())
        );
    }

    #[test]
    fn more_elements_outside_in_any_case_fail_even_when_the_total_is_smaller() {
        // Plain TF32: millions outside.
        expect_test::expect!["case 0, `c`: 3205585 of 4096 elements outside the tolerance (the current version: 120), the worst 150.000× the tolerance (the current version's: 8.500× the tolerance)"]
            .assert_eq(&no_less_accurate(&[t(0, "c", 3_205_585, 150.0)], &[t(0, "c", 120, 8.5)]).unwrap_err());
        // Better on the large case, wrong on the edge of a small one: per case, not summed.
        let why = no_less_accurate(
            &[t(0, "c", 0, 0.0), t(1, "c", 45, 3.0)],
            &[t(0, "c", 120, 8.5), t(1, "c", 0, 0.0)],
        )
        .unwrap_err();
        expect_test::expect!["case 1, `c`: 45 of 4096 elements outside the tolerance (the current version: 0), the worst 3.000× the tolerance (the current version's: within it)"].assert_eq(&why);
    }

    #[test]
    fn fewer_elements_outside_but_one_far_off_fails() {
        // A wrong kernel with one garbage element where the current version has many
        // slightly outside: fewer, but further.
        let why = no_less_accurate(&[t(0, "c", 1, 1e6)], &[t(0, "c", 120, 8.5)]).unwrap_err();
        expect_test::expect!["case 0, `c`: 1 of 4096 elements outside the tolerance (the current version: 120), the worst 1000000.000× the tolerance (the current version's: 8.500× the tolerance)"].assert_eq(&why);
        // Where the tolerance is 0 (integers, atol 0 at a zero output).
        let why = no_less_accurate(&[t(0, "n", 1, 1e300)], &[t(0, "n", 2, 3.0)]).unwrap_err();
        assert!(why.contains("where the tolerance is 0"), "{why}");
    }

    #[test]
    fn a_buffer_or_case_the_current_version_lacks_counts_as_none_outside() {
        assert!(no_less_accurate(&[t(2, "c", 1, 1.5)], &[t(0, "c", 120, 8.5)]).is_err());
        assert!(no_less_accurate(&[t(0, "d", 1, 1.5)], &[t(0, "c", 120, 8.5)]).is_err());
        assert_eq!(no_less_accurate(&[t(2, "c", 0, 0.0)], &[]), Ok(()));
    }
}
