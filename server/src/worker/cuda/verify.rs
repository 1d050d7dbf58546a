//! `Op::Verify` on the GPU (SPEC.md, "What the tool does with it": verify): the same fresh
//! host inputs to reference and candidate for every case and trial, poisoned outputs,
//! guard regions, comparison within tolerance, and a second candidate run on case 0 to
//! catch nondeterminism. Stops at the first failure and reports it in full.

use std::time::Instant;

use super::compare::{
    compare, element_name, first_unwritten, show, unravel, where_suffix, BadKind,
};
use super::driver::CuError;
use super::fill::{buffer_seed, fill_buffer, trial_seed, Rng};
use super::gpu::{
    alloc_buffers, buffer_args, case_device_bytes, err, kernel_args, Gpu, Guarded, Kernel,
};
use super::limits::LaunchPlan;
use crate::spec::{BenchPlan, Role};
use crate::worker::protocol::{
    ErrorKind, Failure, FailureKind, VerifyReport, Version, WorkerError,
};

/// Where we are, for failure records.
#[derive(Clone, Copy)]
struct At {
    case: usize,
    trial: u32,
    seed: u64,
}

impl At {
    fn failure(&self, kind: FailureKind, message: String) -> Failure {
        Failure {
            case: self.case,
            trial: self.trial,
            seed: self.seed,
            kind,
            buffer: None,
            index: None,
            expected: None,
            actual: None,
            max_abs_err: None,
            max_rel_err: None,
            message: format!(
                "{message} {}",
                where_suffix(self.case, self.trial, self.seed)
            ),
        }
    }
}

/// The buffers of candidate and reference must agree case by case (names, types, sizes,
/// roles): they get the same inputs and their outputs are compared element by element.
pub fn check_compatible(cand: &BenchPlan, refp: &BenchPlan) -> Result<(), String> {
    if cand.cases.len() != refp.cases.len() {
        return Err(format!(
            "the candidate has {} cases and the reference {}; both must come from the same spec",
            cand.cases.len(),
            refp.cases.len()
        ));
    }
    for (i, (a, b)) in cand.cases.iter().zip(&refp.cases).enumerate() {
        let key = |c| {
            buffer_args(c)
                .into_iter()
                .map(|(n, d, r, s, e, _)| (n.to_string(), d, r, s.to_vec(), e))
                .collect::<Vec<_>>()
        };
        let (ka, kb) = (key(a), key(b));
        if ka.len() != kb.len()
            || ka
                .iter()
                .zip(&kb)
                .any(|(x, y)| (x.1, x.2, &x.3, x.4) != (y.1, y.2, &y.3, y.4))
        {
            return Err(format!(
                "case {i}: the candidate's buffers ({}) differ from the reference's ({}) in number, \
                 type, shape or role",
                describe(&ka),
                describe(&kb)
            ));
        }
    }
    Ok(())
}

fn describe(k: &[(String, crate::spec::DType, Role, Vec<u64>, u64)]) -> String {
    k.iter()
        .map(|(n, d, r, s, _)| {
            let s: Vec<String> = s.iter().map(u64::to_string).collect();
            format!("{n}: {r} {d}[{}]", s.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

pub fn verify(
    gpu: &mut Gpu,
    cand: &Version,
    refv: &Version,
    seed: u64,
    progress: &mut dyn FnMut(&str),
) -> Result<VerifyReport, WorkerError> {
    let t0 = Instant::now();
    check_compatible(&cand.plan, &refv.plan).map_err(|m| err(ErrorKind::BadRequest, m))?;
    let cases = cand.plan.cases.len();
    let trials = cand.plan.trials.max(1);
    let mut report = VerifyReport {
        passed: true,
        cases,
        trials,
        seed,
        failure: None,
        nondeterministic: false,
        // Filled by the worker loop, which re-runs the request under compute-sanitizer.
        sanitizer: None,
        interpreter: false,
        elapsed_ms: 0.0,
    };
    for ci in 0..cases {
        let c_case = &cand.plan.cases[ci];
        let r_case = &refv.plan.cases[ci];
        progress(&format!("compiling case {}/{cases}", ci + 1));
        let (rk, _) = gpu.kernel(refv, ci).map_err(|mut e| {
            e.message = format!("reference: {}", e.message);
            e
        })?;
        let (ck, _) = gpu.kernel(cand, ci)?;
        let r_plan = gpu.prepare_launch(&refv.label, &rk, r_case)?;
        let c_plan = gpu.prepare_launch(&cand.label, &ck, c_case)?;
        let need = case_device_bytes(c_case) + case_device_bytes(r_case);
        gpu.check_memory(
            need,
            &format!("case {ci} (candidate and reference buffers)"),
        )?;
        let r_bufs =
            alloc_buffers(r_case).map_err(|e| gpu.fault(e, "allocating reference buffers"))?;
        let c_bufs =
            alloc_buffers(c_case).map_err(|e| gpu.fault(e, "allocating candidate buffers"))?;
        let mut r_args = kernel_args(&refv.label, r_case, &r_bufs)?;
        let mut c_args = kernel_args(&cand.label, c_case, &c_bufs)?;
        let (atol_rtol, compared): (Vec<(f64, f64)>, Vec<bool>) = c_bufs
            .iter()
            .map(|b| (cand.plan.tolerance(b.dtype), b.role != Role::In))
            .unzip();

        for t in 0..trials {
            progress(&format!(
                "verifying case {}/{cases}, trial {}/{trials}",
                ci + 1,
                t + 1
            ));
            let at = At {
                case: ci,
                trial: t,
                seed,
            };
            let ts = trial_seed(seed, ci, t);
            let inputs: Vec<Vec<u8>> = buffer_args(c_case)
                .iter()
                .enumerate()
                .map(|(i, (_, d, r, _, e, dist))| {
                    fill_buffer(*d, *r, dist, *e as usize, &mut Rng::new(buffer_seed(ts, i)))
                })
                .collect();

            // Reference first: if it fails, the candidate is not judged.
            let r_out = match run_once(gpu, &rk, &r_plan, &mut r_args, &r_bufs, &inputs) {
                Ok(o) => o,
                Err(e) => {
                    return Ok(fail(
                        report,
                        t0,
                        fault_failure(gpu, e, &rk, at, FailureKind::ReferenceFailed, "reference "),
                    ));
                }
            };
            if let Some(f) = reference_problem(&r_bufs, &r_out, at) {
                return Ok(fail(report, t0, f));
            }

            let c_out = match run_candidate(gpu, &ck, &c_plan, &mut c_args, &c_bufs, &inputs, at) {
                Ok(o) => o,
                Err(f) => return Ok(fail(report, t0, *f)),
            };
            for (i, b) in c_bufs.iter().enumerate() {
                if !compared[i] {
                    continue;
                }
                let (atol, rtol) = atol_rtol[i];
                let cmp = compare(b.dtype, &r_out[i].0, &c_out[i].0, atol, rtol);
                if let Some(bad) = cmp.first_bad {
                    let coords = unravel(bad.index as u64, &b.shape);
                    let got = if bad.unwritten {
                        "NaN (never written)".to_string()
                    } else {
                        show(bad.actual)
                    };
                    let mut f = at.failure(
                        if bad.kind == BadKind::Nan {
                            FailureKind::Nan
                        } else {
                            FailureKind::Mismatch
                        },
                        format!(
                            "{}: expected {}, got {got}",
                            element_name(&b.name, &coords),
                            show(bad.expected)
                        ),
                    );
                    f.buffer = Some(b.name.clone());
                    f.index = Some(coords);
                    f.expected = Some(bad.expected);
                    f.actual = Some(bad.actual);
                    f.max_abs_err = Some(cmp.max_abs_err);
                    f.max_rel_err = Some(cmp.max_rel_err);
                    return Ok(fail(report, t0, f));
                }
            }

            // Same inputs again: a correct kernel gives the same answer (within tolerance;
            // atomics may reorder float sums).
            if ci == 0 && t == 0 {
                progress("checking determinism");
                let again =
                    match run_candidate(gpu, &ck, &c_plan, &mut c_args, &c_bufs, &inputs, at) {
                        Ok(o) => o,
                        Err(f) => return Ok(fail(report, t0, *f)),
                    };
                report.nondeterministic = c_bufs.iter().enumerate().any(|(i, b)| {
                    compared[i]
                        && compare(
                            b.dtype,
                            &c_out[i].0,
                            &again[i].0,
                            atol_rtol[i].0,
                            atol_rtol[i].1,
                        )
                        .first_bad
                        .is_some()
                });
            }
        }
    }
    report.elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
    Ok(report)
}

fn fail(mut report: VerifyReport, t0: Instant, f: Failure) -> VerifyReport {
    report.passed = false;
    report.failure = Some(f);
    report.elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
    report
}

/// Every buffer's data as read back, with where its guard was overwritten, if anywhere.
type Readback = Vec<(Vec<u8>, Option<i64>)>;

/// Uploads `inputs` (poisoned `out`s included) with fresh guards, launches, waits, and
/// reads every buffer back with its guard verdict.
fn run_once(
    gpu: &Gpu,
    k: &Kernel,
    plan: &LaunchPlan,
    args: &mut [Vec<u8>],
    bufs: &[Guarded],
    inputs: &[Vec<u8>],
) -> Result<Readback, CuError> {
    for (b, data) in bufs.iter().zip(inputs) {
        b.upload(data)?;
    }
    gpu.launch_sync(k, plan, args)?;
    bufs.iter().map(Guarded::download).collect()
}

/// One candidate launch on `inputs`, as a failure when it faults or writes past a buffer.
fn run_candidate(
    gpu: &mut Gpu,
    k: &Kernel,
    plan: &LaunchPlan,
    args: &mut [Vec<u8>],
    bufs: &[Guarded],
    inputs: &[Vec<u8>],
    at: At,
) -> Result<Readback, Box<Failure>> {
    let out = run_once(gpu, k, plan, args, bufs, inputs)
        .map_err(|e| Box::new(fault_failure(gpu, e, k, at, FailureKind::Fault, "")))?;
    match guard_problem(bufs, &out, at, FailureKind::OutOfBounds, "") {
        Some(f) => Err(Box::new(f)),
        None => Ok(out),
    }
}

fn fault_failure(
    gpu: &mut Gpu,
    e: CuError,
    k: &Kernel,
    at: At,
    kind: FailureKind,
    who: &str,
) -> Failure {
    if e.is_sticky() {
        gpu.poisoned = true;
    }
    let what = if e.call == "cuLaunchKernel" || e.call == "cuStreamSynchronize" {
        format!(
            "{who}{} at launch of `{}` ({})",
            e.describe(),
            k.display,
            e.name()
        )
    } else {
        format!("{who}`{}`: {e}", k.display)
    };
    let tail = if e.is_sticky() {
        "; the CUDA context is lost and the worker restarts"
    } else {
        ""
    };
    at.failure(kind, format!("{what}{tail}"))
}

fn guard_problem(
    bufs: &[Guarded],
    out: &[(Vec<u8>, Option<i64>)],
    at: At,
    kind: FailureKind,
    who: &str,
) -> Option<Failure> {
    bufs.iter().zip(out).find_map(|(b, (_, bad))| {
        let idx = (*bad)?;
        let place = if idx < 0 {
            format!(
                "{} element{} before the start",
                -idx,
                if idx == -1 { "" } else { "s" }
            )
        } else {
            format!("element {idx}, past the end at {}", b.elems)
        };
        let mut f = at.failure(
            kind,
            format!("{who}out-of-bounds write to `{}`: {place}", b.name),
        );
        f.buffer = Some(b.name.clone());
        f.index = u64::try_from(idx).ok().map(|i| vec![i]);
        Some(f)
    })
}

/// A reference that wrote out of bounds or left an output unwritten cannot judge.
fn reference_problem(bufs: &[Guarded], out: &[(Vec<u8>, Option<i64>)], at: At) -> Option<Failure> {
    if let Some(f) = guard_problem(bufs, out, at, FailureKind::ReferenceFailed, "reference: ") {
        return Some(f);
    }
    bufs.iter().zip(out).find_map(|(b, (data, _))| {
        if b.role != Role::Out {
            return None;
        }
        let i = first_unwritten(b.dtype, data)?;
        let coords = unravel(i as u64, &b.shape);
        let mut f = at.failure(
            FailureKind::ReferenceFailed,
            format!(
                "reference left {} unwritten (still the NaN poison); fix the reference or its spec",
                element_name(&b.name, &coords)
            ),
        );
        f.buffer = Some(b.name.clone());
        f.index = Some(coords);
        Some(f)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Arg, Case, DType, Dist, Launch};
    use crate::syntax::Lang;

    fn plan(buffers: &[(&str, DType, Role, u64)], cases: usize) -> BenchPlan {
        let case = Case {
            sizes: vec![],
            args: buffers
                .iter()
                .map(|(n, d, r, e)| Arg::Buffer {
                    name: n.to_string(),
                    role: *r,
                    dtype: *d,
                    shape: vec![*e],
                    elems: *e,
                    bytes: e * d.size_bytes(),
                    dist: Dist::Ones,
                })
                .collect(),
            template_args: vec![],
            launch: Launch::Cuda {
                grid: [1, 1, 1],
                block: [32, 1, 1],
                smem: 0,
            },
            bytes: 0.0,
            flops: None,
        };
        BenchPlan {
            kernel: "k".into(),
            lang: Lang::Cuda,
            cases: vec![case; cases],
            tunables: vec![],
            defines: vec![],
            atol: None,
            rtol: None,
            reference: None,
            trials: 3,
        }
    }

    #[test]
    fn compatible_plans_and_mismatched_buffers() {
        let a = plan(
            &[
                ("x", DType::F32, Role::In, 8),
                ("y", DType::F32, Role::Out, 8),
            ],
            2,
        );
        assert!(check_compatible(&a, &a).is_ok());
        let b = plan(
            &[
                ("x", DType::F32, Role::In, 8),
                ("y", DType::F16, Role::Out, 8),
            ],
            2,
        );
        let e = check_compatible(&a, &b).unwrap_err();
        assert!(e.contains("y: out f16[8]"), "{e}");
        let c = plan(
            &[
                ("x", DType::F32, Role::In, 8),
                ("y", DType::F32, Role::Out, 8),
            ],
            1,
        );
        assert!(check_compatible(&a, &c).unwrap_err().contains("2 cases"));
    }
}
