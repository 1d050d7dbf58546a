//! The retiming rules: when a measurement is disturbed, which of several is kept, when
//! to measure again, and the loop that applies them to scripted measurements.

use std::cell::RefCell;

use futures::executor::block_on;

use super::*;
use crate::worker::protocol::ErrorKind;

/// A timing of `ms` whose p10..p90 span `spread` of it (p10 at 0 keeps the ratio exact).
fn spread_timing(label: &str, ms: f64, spread: f64) -> Timing {
    Timing {
        p10_ms: 0.0,
        p90_ms: spread * ms,
        median_interval_ms: None,
        ..crate::optimize::bench::tests::timing(label, ms)
    }
}

/// One measurement of a kernel and its reference, with their spreads.
fn report(kernel: (f64, f64), reference: (f64, f64), interpreter: bool) -> TimeReport {
    TimeReport {
        timings: vec![
            spread_timing("k", kernel.0, kernel.1),
            spread_timing("ref", reference.0, reference.1),
        ],
        interpreter,
    }
}

fn gpu(kernel_spread: f64, reference_spread: f64) -> TimeReport {
    report((0.025, kernel_spread), (0.05, reference_spread), false)
}

#[test]
fn the_spread_is_the_one_bench_prints() {
    let t = Timing {
        p10_ms: 0.024,
        p90_ms: 0.026,
        median_interval_ms: None,
        ..spread_timing("k", 0.025, 0.0)
    };
    assert!((t.spread() - 0.08).abs() < 1e-12);
    assert!((worst_spread(&[t]) - 0.08).abs() < 1e-12);
    assert_eq!(worst_spread(&[]), 0.0);
}

#[test]
fn undisturbed_timings_are_not_disturbed_and_disturbed_ones_are() {
    assert!(!disturbed(&gpu(0.07, 0.04).timings));
    assert!(disturbed(&gpu(0.53, 0.28).timings));
    assert!(!disturbed(&[]));
}

#[test]
fn one_wide_timing_disturbs_the_whole_measurement() {
    assert!(disturbed(&gpu(0.06, 1.2).timings));
    assert!(disturbed(&gpu(0.28, 0.05).timings));
}

#[test]
fn the_threshold_itself_is_not_disturbed_just_above_it_is() {
    let at = spread_timing("k", 1.0, DISTURBED_SPREAD);
    assert_eq!(at.spread(), DISTURBED_SPREAD);
    assert!(!disturbed(std::slice::from_ref(&at)));
    assert!(disturbed(&[spread_timing(
        "k",
        1.0,
        DISTURBED_SPREAD + 1e-9
    )]));
}

#[test]
fn a_zero_median_counts_as_no_spread() {
    assert!(!disturbed(&[spread_timing("k", 0.0, 5.0)]));
}

#[test]
fn the_steadiest_measurement_has_the_lowest_worst_spread() {
    // The first has the steadier kernel but a wide reference: the second is kept.
    let a = gpu(0.05, 0.60);
    let b = gpu(0.30, 0.30);
    let c = gpu(0.40, 0.10);
    let all = [&a, &b, &c].map(|r| r.timings.as_slice());
    assert_eq!(steadiest(all), Some(1));
}

#[test]
fn of_equally_steady_measurements_the_earliest_is_kept() {
    let (a, b) = (gpu(0.3, 0.1), gpu(0.1, 0.3));
    assert_eq!(
        steadiest([a.timings.as_slice(), b.timings.as_slice()]),
        Some(0)
    );
}

#[test]
fn a_single_measurement_is_the_steadiest_and_none_gives_none() {
    let a = gpu(0.9, 0.9);
    assert_eq!(steadiest([a.timings.as_slice()]), Some(0));
    assert_eq!(steadiest(std::iter::empty::<&[Timing]>()), None);
}

#[test]
fn only_a_disturbed_gpu_measurement_is_measured_again_at_most_twice_more() {
    assert!(!measure_again(&[]));
    assert!(!measure_again(&[gpu(0.07, 0.05)]));
    assert!(measure_again(&[gpu(0.53, 0.05)]));
    assert!(!measure_again(&[report((1.0, 0.9), (1.0, 0.9), true)]));
    assert!(measure_again(&[gpu(0.5, 0.5), gpu(0.4, 0.4)]));
    assert!(!measure_again(&[
        gpu(0.5, 0.5),
        gpu(0.4, 0.4),
        gpu(0.3, 0.3)
    ]));
    assert!(!measure_again(&[gpu(0.5, 0.5), gpu(0.06, 0.05)]));
}

/// Runs [`steadiest_of`] on `script` (one reply per call, in order): (its answer, how
/// many times it measured).
fn run(
    script: Vec<Result<TimeReport, WorkerError>>,
) -> (Result<(TimeReport, Measured), WorkerError>, usize) {
    let script = RefCell::new(script.into_iter());
    let calls = RefCell::new(0);
    let out = block_on(steadiest_of(|| {
        *calls.borrow_mut() += 1;
        let next = script
            .borrow_mut()
            .next()
            .expect("measured past the script");
        async move { next }
    }));
    (out, calls.into_inner())
}

fn lost() -> WorkerError {
    WorkerError {
        kind: ErrorKind::WorkerLost,
        message: "worker lost".into(),
        log: None,
    }
}

#[test]
fn a_steady_first_measurement_is_kept_alone() {
    let (out, calls) = run(vec![Ok(gpu(0.07, 0.04))]);
    let (kept, measured) = out.unwrap();
    assert_eq!((calls, measured.measurements), (1, 1));
    assert_eq!(kept, gpu(0.07, 0.04));
    assert_eq!(measured.note(), None);
}

#[test]
fn a_disturbed_measurement_is_retimed_until_steady_and_kept_whole() {
    let steady = report((0.0254, 0.07), (0.0250, 0.05), false);
    let script = vec![
        Ok(report((0.0522, 0.53), (0.1129, 0.9), false)),
        Ok(gpu(0.3, 0.3)),
        Ok(steady.clone()),
    ];
    let (out, calls) = run(script);
    let (kept, measured) = out.unwrap();
    assert_eq!(calls, 3);
    assert_eq!(kept, steady, "both timings from the one steady measurement");
    assert_eq!(measured.measurements, 3);
    assert_eq!(measured.spreads, vec![0.9, 0.3, 0.07]);
}

#[test]
fn retiming_stops_at_the_first_steady_measurement() {
    let (out, calls) = run(vec![Ok(gpu(0.5, 0.1)), Ok(gpu(0.06, 0.05))]);
    assert_eq!(calls, 2);
    assert_eq!(out.unwrap().0, gpu(0.06, 0.05));
}

#[test]
fn when_every_measurement_is_disturbed_the_steadiest_of_three_is_kept() {
    let script = vec![Ok(gpu(0.5, 0.5)), Ok(gpu(0.3, 0.3)), Ok(gpu(0.6, 0.6))];
    let (out, calls) = run(script);
    let (kept, measured) = out.unwrap();
    assert_eq!((calls, kept), (3, gpu(0.3, 0.3)));
    assert_eq!(measured.kept_spread(), Some(0.3));
}

#[test]
fn the_interpreter_is_never_retimed() {
    let cpu = report((1.0, 0.9), (2.0, 0.8), true);
    let (out, calls) = run(vec![Ok(cpu.clone())]);
    assert_eq!(calls, 1);
    assert_eq!(out.unwrap().0, cpu);
}

#[test]
fn a_failed_retime_keeps_what_was_measured_and_a_failed_first_is_the_error() {
    let (out, calls) = run(vec![Ok(gpu(0.5, 0.5)), Err(lost())]);
    let (kept, measured) = out.unwrap();
    assert_eq!((calls, kept, measured.measurements), (2, gpu(0.5, 0.5), 1));
    let (out, calls) = run(vec![Err(lost())]);
    assert_eq!((calls, out.unwrap_err()), (1, lost()));
}

#[test]
fn the_note_says_how_disturbed_how_often_and_what_was_kept() {
    assert_eq!(Measured::of(vec![0.07]).note(), None);
    assert_eq!(Measured::default().note(), None);
    assert_eq!(
        Measured::of(vec![0.53, 0.31, 0.06]).note().as_deref(),
        Some("timing was disturbed (spread 53%): measured 3 times, kept the steadiest (±6%)")
    );
    let still = Measured::of(vec![0.53, 0.31, 0.40]).note().unwrap();
    assert!(
        still.contains("kept the steadiest (±31%), still disturbed"),
        "{still}"
    );
}
