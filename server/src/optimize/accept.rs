//! A step's acceptance decision from its batch's timings alone: pure, with no worker,
//! clock or file behind it, so every branch is unit-tested on made-up timings. The
//! step loop (`step`) does the I/O the decision asks for (re-timing contenders on the
//! primary worker, checking drift from the run's start) and feeds the answers back.
//!
//! The rule: a candidate's [`gain`] is its speedup over the current version timed beside
//! it on the same device, and it is faster when that beats the noise: the uncertainty of
//! the two medians ([`noise`]), never less than 2%. Among
//! candidates within the noise of the fastest, the first in the step's order wins
//! ([`pick`]). With several workers each worker's best that is faster on its own device
//! is a contender; when the best was timed off the primary, or a contender timed
//! elsewhere could win, the contenders are re-timed side by side on the primary and that
//! measurement decides ([`plan`], then [`decide`]).

use crate::worker::protocol::Timing;

/// A timed candidate against the version it came from, timed side by side.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gain {
    /// base median / candidate median.
    pub speedup: f64,
    /// How far the speedup may be from 1 by chance alone ([`noise`]).
    pub noise: f64,
}

/// The least noise a speedup must beat, however tight the timings: what two timings
/// of the same kernel may differ by in one run.
pub const NOISE_FLOOR: f64 = 0.02;

impl Gain {
    /// The acceptance rule: faster by more than the measured noise.
    pub fn faster(&self) -> bool {
        self.speedup > 1.0 + self.noise
    }
}

/// The acceptance rule's measurement, one pure function for every caller (the CLI's
/// optimize and tune, the editor's actions).
pub fn gain(base: &Timing, candidate: &Timing) -> Gain {
    Gain {
        speedup: base.median_ms / candidate.median_ms.max(1e-12),
        noise: noise(base, candidate),
    }
}

/// The noise of a ratio of two medians: their relative uncertainties ([`uncertainty`])
/// added in quadrature, at least [`NOISE_FLOOR`]. The spread of single launches is not
/// the noise: over hundreds of interleaved launches a kernel whose launches spread by
/// 8% has a median known to a fraction of a percent, and a steady 3% gain is real.
pub fn noise(base: &Timing, candidate: &Timing) -> f64 {
    NOISE_FLOOR.max(uncertainty(base).hypot(uncertainty(candidate)))
}

/// The relative half-width of a timing's 99% interval for its median. A timing without
/// one (an older worker) estimates it from its p10-p90 spread as for normal samples:
/// σ = spread / 2.563, the median's standard error 1.2533 σ / √reps, times 2.576.
pub fn uncertainty(t: &Timing) -> f64 {
    let median = t.median_ms.max(1e-12);
    match t.median_interval_ms {
        Some([lo, hi]) => ((hi - lo) / 2.0 / median).max(0.0),
        None => 2.576 * 1.2533 * t.spread() / 2.563 / f64::from(t.reps.max(1)).sqrt(),
    }
}

/// The best of `gains` (candidate index, gain; in the step's order): the highest
/// speedup, except that candidates within the timing noise of it are not told apart by
/// these timings, so the first of them in the step's order wins (if it is faster than
/// the current version whenever the best is). The answer then does not hang on which
/// worker timed which candidate, or on a run's luck.
pub fn pick(gains: &[(usize, Gain)]) -> Option<(usize, Gain)> {
    let mut top: Option<(usize, Gain)> = None;
    for &(i, g) in gains {
        if top.is_none_or(|(_, tg)| g.speedup > tg.speedup) {
            top = Some((i, g));
        }
    }
    let (_, tg) = top?;
    gains
        .iter()
        .find(|(_, g)| {
            g.speedup * (1.0 + g.noise.max(tg.noise)) >= tg.speedup && (g.faster() || !tg.faster())
        })
        .copied()
        .or(top)
}

/// Each timing worker's best candidate by [`pick`]'s rule among those it timed
/// (`timed_on[i]` for `gains`' candidate `i`), in the step's order.
pub fn best_per_worker(gains: &[(usize, Gain)], timed_on: &[Option<usize>]) -> Vec<(usize, Gain)> {
    let mut workers: Vec<Option<usize>> = Vec::new();
    for w in timed_on {
        if !workers.contains(w) {
            workers.push(*w);
        }
    }
    let mut out: Vec<(usize, Gain)> = workers
        .iter()
        .filter_map(|w| {
            let mine: Vec<(usize, Gain)> = gains
                .iter()
                .filter(|(i, _)| timed_on.get(*i) == Some(w))
                .copied()
                .collect();
            pick(&mine)
        })
        .collect();
    out.sort_by_key(|(i, _)| *i);
    out
}

/// One verified and timed candidate of a batch, as the decision sees it.
#[derive(Clone, Debug)]
pub struct Timed {
    pub label: String,
    /// The current version, timed in the same request as the candidate.
    pub base: Timing,
    pub timing: Timing,
    /// The worker that timed it; 0 is the primary. None: timed on whichever worker was
    /// free, after a lost worker's candidates came back; it counts as the primary's.
    pub worker: Option<usize>,
    /// That worker in words ("worker 2 (NVIDIA H200, GPU 1)"), for the step's checks.
    pub worker_name: String,
    /// Its GPU is the primary's model, so speedups measured on the two compare.
    pub same_model: bool,
}

impl Timed {
    fn gain(&self) -> Gain {
        gain(&self.base, &self.timing)
    }

    fn off_primary(&self) -> bool {
        self.worker.is_some_and(|w| w != 0)
    }
}

fn gains(timed: &[Timed]) -> Vec<(usize, Gain)> {
    timed.iter().map(Timed::gain).enumerate().collect()
}

/// What a batch's timings call for before anything is decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The best candidate as timed, and its gain.
    pub top: usize,
    pub measured: Gain,
    /// Each worker's best that is faster on its own device, in the step's order.
    pub contenders: Vec<(usize, Gain)>,
    /// The contenders are re-timed side by side on the primary before one is chosen.
    pub retime: bool,
    /// The best is checked against the run's starting version (it is faster, and the
    /// current version is not the start): differences within tolerance must not pile up
    /// across steps.
    pub check_drift: bool,
}

/// The plan for `timed` (None when nothing was timed). `moved_from_start`: the current
/// version is not the run's starting version.
pub fn plan(timed: &[Timed], moved_from_start: bool) -> Option<Plan> {
    let gains = gains(timed);
    let (top, measured) = pick(&gains)?;
    let timed_on: Vec<Option<usize>> = timed.iter().map(|t| t.worker).collect();
    let contenders: Vec<(usize, Gain)> = best_per_worker(&gains, &timed_on)
        .into_iter()
        .filter(|(_, g)| g.faster())
        .collect();
    // No re-timing when the best was timed on the primary and every contender timed
    // elsewhere, on the same GPU model, is slower beyond the noise: it could not win on
    // the primary either.
    let could_win = |j: usize, gj: Gain| {
        !timed[j].same_model
            || gj.speedup * (1.0 + gj.noise.max(measured.noise)) >= measured.speedup
    };
    let retime = measured.faster()
        && (timed[top].off_primary()
            || contenders
                .iter()
                .any(|&(j, gj)| timed[j].off_primary() && could_win(j, gj)));
    Some(Plan {
        top,
        measured,
        contenders,
        retime,
        check_drift: measured.faster() && moved_from_start,
    })
}

/// The progress line for a re-timing: the contenders with their own speedups.
pub fn retime_message(timed: &[Timed], plan: &Plan) -> String {
    let what: Vec<String> = plan
        .contenders
        .iter()
        .map(|&(j, gj)| {
            format!(
                "`{}` ({:.2}x on {})",
                timed[j].label, gj.speedup, timed[j].worker_name
            )
        })
        .collect();
    format!(
        "re-timing {} against the current version on the primary worker",
        what.join(", ")
    )
}

/// The primary's answer to the plan's re-timing.
#[derive(Clone, Debug)]
pub enum Retimed {
    /// The plan asked for none.
    NotAsked,
    /// The primary could not time them: why.
    Failed(String),
    /// The current version and one timing per contender (in the plan's order), from one
    /// request on the primary.
    Timed { base: Timing, timings: Vec<Timing> },
}

/// The step's winner by the timings; it is accepted when [`Decision::faster`] (and the
/// checks after it pass).
#[derive(Clone, Debug)]
pub struct Decision {
    /// Index of the winner among the batch's timed candidates.
    pub winner: usize,
    pub gain: Gain,
    /// The two timings that gave `gain`: the current version's and the winner's.
    pub base: Timing,
    pub timing: Timing,
    /// What the re-timing said, one line per contender, for the step's `checks`.
    pub checks: Vec<String>,
    /// The winner is not the candidate whose drift was checked beside the re-timing, and
    /// it needs its own check.
    pub recheck_drift: bool,
}

impl Decision {
    pub fn faster(&self) -> bool {
        self.gain.faster()
    }
}

/// The decision for `timed` under `plan`, given the primary's re-timing. `primary` names
/// the primary worker for the checks.
pub fn decide(timed: &[Timed], plan: &Plan, retimed: Retimed, primary: &str) -> Decision {
    let top = &timed[plan.top];
    let mut d = Decision {
        winner: plan.top,
        gain: plan.measured,
        base: top.base.clone(),
        timing: top.timing.clone(),
        checks: Vec::new(),
        recheck_drift: false,
    };
    match retimed {
        Retimed::NotAsked => {}
        Retimed::Failed(e) => d.checks.push(format!(
            "`{}`: re-timing on the primary worker failed ({e}); the {:.2}x timed on {} decides",
            top.label, plan.measured.speedup, top.worker_name
        )),
        Retimed::Timed { base, timings } => {
            let gains: Vec<(usize, Gain)> = plan
                .contenders
                .iter()
                .zip(&timings)
                .map(|(&(j, _), t)| (j, gain(&base, t)))
                .collect();
            for (&(j, own), (_, again)) in plan.contenders.iter().zip(&gains) {
                d.checks.push(format!(
                    "`{}`: {:.2}x timed on {}; re-timed on {primary}: {:.2}x",
                    timed[j].label, own.speedup, timed[j].worker_name, again.speedup
                ));
            }
            let decide: Vec<(usize, Gain, Timing, Timing)> = gains
                .iter()
                .zip(&timings)
                .map(|(&(j, gj), t)| (j, gj, base.clone(), t.clone()))
                .collect();
            if let Some((k, gk, b, t)) = after_retiming(timed, &gains, decide) {
                (d.winner, d.gain, d.base, d.timing) = (k, gk, b, t);
            }
        }
    }
    d.recheck_drift = d.winner != plan.top && plan.check_drift && d.gain.faster();
    d
}

/// The winner once the contenders were re-timed side by side on the primary: they
/// decide. When none of them is faster there, the step's speedup is the best the
/// primary measured, as on one worker: the re-timed ones and the other candidates it
/// timed; but a faster one among those it timed earlier does not overrule the
/// re-timing (measurements of two requests disagree: the re-timing stands).
fn after_retiming(
    timed: &[Timed],
    retimed_gains: &[(usize, Gain)],
    mut decide: Vec<(usize, Gain, Timing, Timing)>,
) -> Option<(usize, Gain, Timing, Timing)> {
    let retimed = pick(retimed_gains);
    if retimed.is_none_or(|(_, gk)| !gk.faster()) {
        for (j, t) in timed.iter().enumerate() {
            if !t.off_primary() && !decide.iter().any(|d| d.0 == j) {
                decide.push((j, t.gain(), t.base.clone(), t.timing.clone()));
            }
        }
    }
    decide.sort_by_key(|d| d.0);
    let pairs: Vec<(usize, Gain)> = decide.iter().map(|d| (d.0, d.1)).collect();
    let chosen = match pick(&pairs) {
        Some((_, gk)) if gk.faster() && retimed.is_none_or(|(_, r)| !r.faster()) => retimed,
        other => other,
    };
    let (k, gk) = chosen?;
    decide
        .into_iter()
        .find(|d| d.0 == k)
        .map(|(_, _, b, t)| (k, gk, b, t))
}

#[cfg(test)]
pub(super) mod testing {
    use crate::worker::protocol::Timing;

    /// A made-up timing: its median, p10 and p90 (the minimum is the p10).
    pub fn timing(median: f64, p10: f64, p90: f64) -> Timing {
        Timing {
            label: "t".into(),
            median_ms: median,
            min_ms: p10,
            p10_ms: p10,
            p90_ms: p90,
            median_interval_ms: None,
            reps: 20,
            gbps: 0.0,
            frac_copy: None,
            tflops: None,
            frac_fma: None,
            energy_j: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timing with a tight spread (0.4%), so the 2% floor is the noise.
    fn t(ms: f64) -> Timing {
        spread(ms, 0.002)
    }

    /// A timing whose p10 and p90 lie `half` of the median below and above it.
    fn spread(ms: f64, half: f64) -> Timing {
        testing::timing(ms, ms * (1.0 - half), ms * (1.0 + half))
    }

    /// Candidate `label` timed at `ms` beside a current version at 1 ms on `worker`.
    fn on(label: &str, ms: f64, worker: Option<usize>) -> Timed {
        Timed {
            label: label.into(),
            base: t(1.0),
            timing: t(ms),
            worker,
            worker_name: worker.map_or_else(String::new, |w| format!("worker {}", w + 1)),
            same_model: true,
        }
    }

    fn primary(label: &str, ms: f64) -> Timed {
        on(label, ms, Some(0))
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn one_worker_the_fastest_beyond_the_noise_wins_without_re_timing() {
        let timed = [primary("a", 0.9), primary("b", 0.8)];
        let plan = plan(&timed, false).unwrap();
        assert_eq!((plan.top, plan.retime, plan.check_drift), (1, false, false));
        assert_eq!(plan.contenders.len(), 1, "one worker, one contender");
        let d = decide(&timed, &plan, Retimed::NotAsked, "worker 1");
        assert_eq!(d.winner, 1);
        assert!(d.faster() && close(d.gain.speedup, 1.25));
        assert!(d.checks.is_empty() && !d.recheck_drift);
        assert_eq!((d.base.median_ms, d.timing.median_ms), (1.0, 0.8));
    }

    #[test]
    fn ties_within_the_noise_go_to_the_first_candidate() {
        // 1.25x and 1.26x are one speed within 2%: the first in the step's order wins.
        let timed = [primary("a", 0.9), primary("b", 0.8), primary("c", 0.794)];
        let d = decide(&timed, &plan(&timed, false).unwrap(), Retimed::NotAsked, "");
        assert_eq!(d.winner, 1);
        // Beyond the noise, a later one wins.
        let timed = [primary("a", 0.8), primary("b", 0.7)];
        assert_eq!(plan(&timed, false).unwrap().top, 1);
        // A tied candidate that is not itself faster does not take a faster one's place.
        let timed = [primary("a", 0.99), primary("b", 0.975)];
        let p = plan(&timed, false).unwrap();
        assert_eq!(p.top, 1);
        assert!(p.measured.faster());
    }

    /// A timing of `ms` whose median's 99% interval is ±`half` of it.
    fn known_to(ms: f64, half: f64, launch_spread: f64) -> Timing {
        let mut t = spread(ms, launch_spread);
        t.median_interval_ms = Some([ms * (1.0 - half), ms * (1.0 + half)]);
        t
    }

    #[test]
    fn the_noise_threshold_is_two_percent_or_the_medians_uncertainty() {
        // Tight timings: the 2% floor decides.
        let slow = [primary("a", 1.0 / 1.019)];
        let d = decide(&slow, &plan(&slow, true).unwrap(), Retimed::NotAsked, "");
        assert!(!d.faster(), "1.9% is noise");
        let fast = [primary("a", 1.0 / 1.021)];
        assert!(plan(&fast, true).unwrap().measured.faster(), "2.1% is not");
        // Launches that spread by 8% over hundreds of rounds: the medians are known to
        // ±0.3%, and a steady 3% gain is a gain.
        let g = gain(&known_to(1.0, 0.003, 0.04), &known_to(0.97, 0.003, 0.04));
        assert_eq!(g.noise, NOISE_FLOOR);
        assert!(g.faster(), "3% with medians known to 0.3%");
        // Medians known only to ±3% and ±4%: 5% in quadrature, and 4% is not enough.
        let (base, loose) = (known_to(1.0, 0.03, 0.1), known_to(0.96, 0.04, 0.1));
        let g = gain(&base, &loose);
        assert!(close(g.noise, 0.05));
        assert!(!g.faster(), "1.04x within 5% noise");
        assert!(
            gain(&base, &known_to(0.9, 0.04, 0.1)).faster(),
            "1.11x beats it"
        );
        // Without an interval (an older worker) the spread and the reps estimate it:
        // 20 launches spread by ±15% give the median about ±8.5%, ±12% for the ratio.
        let mut noisy = primary("a", 0.8);
        noisy.base = spread(1.0, 0.15);
        noisy.timing = spread(0.8, 0.15);
        let p = plan(&[noisy], true).unwrap();
        assert!(
            (p.measured.noise - 0.1195).abs() < 1e-3,
            "{}",
            p.measured.noise
        );
        assert!(p.measured.faster(), "1.25x beats 12% noise");
        let mut noisier = primary("a", 0.9);
        noisier.base = spread(1.0, 0.15);
        noisier.timing = spread(0.9, 0.15);
        assert!(
            !plan(&[noisier], true).unwrap().measured.faster(),
            "1.11x does not"
        );
    }

    #[test]
    fn nothing_faster_is_no_gain_and_asks_for_no_check() {
        let timed = [primary("a", 0.99), on("b", 1.2, Some(1))];
        let p = plan(&timed, true).unwrap();
        assert!(!p.measured.faster());
        assert!(p.contenders.is_empty() && !p.retime && !p.check_drift);
        let d = decide(&timed, &p, Retimed::NotAsked, "");
        assert!(!d.faster() && !d.recheck_drift);
        // Nothing timed: nothing to decide.
        assert!(plan(&[], true).is_none());
    }

    #[test]
    fn the_best_timed_off_the_primary_is_re_timed_there_and_that_decides() {
        let timed = [primary("a", 1.0 / 1.1), on("b", 1.0 / 1.5, Some(1))];
        let p = plan(&timed, true).unwrap();
        assert_eq!((p.top, p.retime, p.check_drift), (1, true, true));
        assert_eq!(p.contenders.iter().map(|c| c.0).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(
            retime_message(&timed, &p),
            "re-timing `a` (1.10x on worker 1), `b` (1.50x on worker 2) against the current version on the primary worker"
        );
        // On the primary, `b` is only 1.05x: `a` wins, and its drift is checked too.
        let retimed = Retimed::Timed {
            base: t(1.0),
            timings: vec![t(0.9), t(1.0 / 1.05)],
        };
        let d = decide(&timed, &p, retimed, "worker 1 (GPU 0)");
        assert_eq!(d.winner, 0);
        assert!(d.faster() && close(d.gain.speedup, 1.0 / 0.9));
        assert!(
            d.recheck_drift,
            "another winner than the one checked beside"
        );
        assert_eq!(
            d.checks,
            [
                "`a`: 1.10x timed on worker 1; re-timed on worker 1 (GPU 0): 1.11x",
                "`b`: 1.50x timed on worker 2; re-timed on worker 1 (GPU 0): 1.05x",
            ]
        );
        // The re-timing confirms `b`: no second drift check.
        let retimed = Retimed::Timed {
            base: t(1.0),
            timings: vec![t(0.9), t(0.7)],
        };
        let d = decide(&timed, &p, retimed, "");
        assert_eq!(d.winner, 1);
        assert!(!d.recheck_drift);
        // From the run's start, no drift is checked at all.
        assert!(!plan(&timed, false).unwrap().check_drift);
    }

    #[test]
    fn a_contender_elsewhere_is_re_timed_only_when_it_could_win() {
        // The best on the primary; worker 2's best, on the same GPU model, is slower
        // beyond the noise: it could not win on the primary either.
        let timed = [primary("a", 1.0 / 1.5), on("b", 1.0 / 1.2, Some(1))];
        let p = plan(&timed, true).unwrap();
        assert_eq!((p.top, p.retime), (0, false));
        // Within the noise of the best, it could.
        let timed = [primary("a", 0.8), on("b", 0.794, Some(1))];
        let p = plan(&timed, true).unwrap();
        assert_eq!((p.top, p.retime), (0, true));
        // On another GPU model its speedup says nothing about the primary's: re-timed.
        let mut other = on("b", 1.0 / 1.2, Some(1));
        other.same_model = false;
        let p = plan(&[primary("a", 1.0 / 1.5), other], true).unwrap();
        assert!(p.retime);
    }

    #[test]
    fn when_no_re_timed_contender_is_faster_the_primarys_own_timings_give_the_speedup() {
        // `a` was timed late after its worker was lost (it counts as the primary's) at
        // 1.04x with its median known to ±5%; `b` (primary) and `c` (worker 2) are the
        // contenders.
        let mut a = on("a", 1.0 / 1.04, None);
        a.timing = known_to(1.0 / 1.04, 0.05, 0.1);
        let timed = [a, primary("b", 1.0 / 1.1), on("c", 1.0 / 1.5, Some(1))];
        let p = plan(&timed, true).unwrap();
        assert_eq!(p.contenders.iter().map(|c| c.0).collect::<Vec<_>>(), [1, 2]);
        assert!(p.retime);
        let retimed = Retimed::Timed {
            base: t(1.0),
            timings: vec![t(1.0 / 0.99), t(1.0 / 0.98)],
        };
        let d = decide(&timed, &p, retimed, "");
        assert_eq!(d.winner, 0, "the best the primary measured");
        assert!(!d.faster() && close(d.gain.speedup, 1.04));
        assert_eq!(d.timing.median_ms, timed[0].timing.median_ms);
    }

    #[test]
    fn an_earlier_faster_timing_on_the_primary_does_not_overrule_the_re_timing() {
        // `b` ties `a` on the primary (so it is no contender) and is faster there; the
        // contenders `a` and `c` are not faster when re-timed: the re-timing stands.
        let timed = [
            primary("a", 1.0 / 1.1),
            primary("b", 1.0 / 1.09),
            on("c", 1.0 / 1.5, Some(1)),
        ];
        let p = plan(&timed, true).unwrap();
        assert_eq!(p.contenders.iter().map(|c| c.0).collect::<Vec<_>>(), [0, 2]);
        let retimed = Retimed::Timed {
            base: t(2.0),
            timings: vec![t(2.0), t(2.0 / 1.01)],
        };
        let d = decide(&timed, &p, retimed, "");
        assert_eq!(d.winner, 0);
        assert!(!d.faster());
        assert_eq!(d.base.median_ms, 2.0, "measured in the re-timing");
    }

    #[test]
    fn a_failed_re_timing_leaves_the_first_measurement_to_decide() {
        let timed = [primary("a", 1.0 / 1.1), on("b", 1.0 / 1.5, Some(1))];
        let p = plan(&timed, true).unwrap();
        let d = decide(&timed, &p, Retimed::Failed("worker lost".into()), "");
        assert_eq!(d.winner, 1);
        assert!(d.faster() && !d.recheck_drift);
        assert_eq!(
            d.checks,
            ["`b`: re-timing on the primary worker failed (worker lost); the 1.50x timed on worker 2 decides"]
        );
    }

    #[test]
    fn a_lost_workers_candidates_timed_late_count_as_the_primarys() {
        // Put back by a lost worker and timed on whichever worker was free: not "off the
        // primary", so the best of them needs no re-timing.
        let timed = [primary("a", 0.9), on("b", 0.7, None)];
        let p = plan(&timed, false).unwrap();
        assert_eq!((p.top, p.retime), (1, false));
        assert_eq!(p.contenders.len(), 2, "each timing group has its best");
        let d = decide(&timed, &p, Retimed::NotAsked, "");
        assert_eq!(d.winner, 1);
    }

    #[test]
    fn each_worker_has_its_own_best_by_the_same_rule() {
        let g = |s: f64| Gain {
            speedup: s,
            noise: 0.02,
        };
        let gains = [(0, g(1.25)), (1, g(3.3)), (2, g(1.26)), (3, g(2.8))];
        let on = [Some(0), Some(1), Some(0), Some(1)];
        let best: Vec<usize> = best_per_worker(&gains, &on).iter().map(|b| b.0).collect();
        assert_eq!(best, [0, 1]);
    }
}
