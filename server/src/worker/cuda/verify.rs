//! `Op::Verify` on the GPU (docs/spec.md, "What the tool does with it": verify; every check is
//! described in docs/verification.md). For every case and trial the candidate gets the
//! reference's inputs, generated on the device from the trial's seed; its `out` buffers
//! are poisoned before every launch and every buffer sits between guards of its own.
//! After the launch the device scans the results: guards, `in` buffers unchanged, the
//! comparison with the reference's outputs within tolerance, and the anti-cheat rules
//! (`compare.rs`). Case 0 runs at least two input sets at the same addresses and a second
//! run of its first input set, which must agree within tolerance. The reference's
//! outputs are computed once per (case, seed) and kept on the device (`refcache.rs`), so
//! the candidates of a step share them. Only failures copy values to the host. Stops at
//! the first failure and reports it in full.

use std::time::Instant;

use std::sync::Arc;

use super::compare::{
    constant_where_reference_varies, element_name, equal_where_reference_differs, first_unwritten,
    show, stale_results, unravel, where_suffix,
};
use super::devgen::{Collected, DevHelpers, Slot, Stats};
use super::driver::{self, CuError, DeviceBuffer};
use super::fill::{buffer_seed, decode, elem_size, poison_elem, trial_seed};
use super::gpu::{
    alloc_buffers, buffer_args, case_device_bytes, err, kernel_args, Gpu, Guarded, Kernel,
};
use super::limits::LaunchPlan;
use super::refcache::{ref_key, RefOutputs};
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
    only: Option<&[usize]>,
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
        tally: Vec::new(),
    };
    let h = gpu.helpers()?;
    // A kernel checked against itself (no reference to compare with): what its first
    // run does wrong is its own failure, not a reference's.
    let own = cand.source == refv.source && cand.plan == refv.plan && cand.options == refv.options;
    for ci in 0..cases {
        if only.is_some_and(|o| !o.contains(&ci)) {
            continue;
        }
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
        // Case 0 always sees two input sets at the same addresses: a kernel that keeps
        // results between launches is caught even when the spec asks for one trial.
        let runs = if ci == 0 { trials.max(2) } else { trials };
        let keys_of =
            |ts: u64| -> Vec<u64> { (0..c_case.args.len()).map(|i| buffer_seed(ts, i)).collect() };
        let cached: Vec<Option<Arc<RefOutputs>>> = (0..runs)
            .map(|t| {
                gpu.ref_cache
                    .get(&ref_key(refv, ci, trial_seed(seed, ci, t)))
            })
            .collect();
        let need = case_device_bytes(c_case)
            + if cached.iter().all(Option::is_some) {
                0
            } else {
                2 * case_device_bytes(r_case)
            };
        gpu.check_memory(
            need,
            &format!("case {ci} (candidate and reference buffers)"),
        )?;
        let c_bufs =
            alloc_buffers(c_case).map_err(|e| gpu.fault(e, "allocating candidate buffers"))?;
        let mut c_args = kernel_args(&cand.label, c_case, &c_bufs)?;
        let mut r_bufs: Option<(Vec<Guarded>, Vec<Vec<u8>>)> = None;
        let mut previous: Option<Arc<RefOutputs>> = None;

        for (t, hit) in (0..runs).zip(cached) {
            progress(&format!(
                "verifying case {}/{cases}, trial {}/{runs}",
                ci + 1,
                t + 1
            ));
            let at = At {
                case: ci,
                trial: t,
                seed,
            };
            let ts = trial_seed(seed, ci, t);
            let keys = keys_of(ts);

            let reference = match hit {
                Some(r) => r,
                None => {
                    if r_bufs.is_none() {
                        let bufs = alloc_buffers(r_case)
                            .map_err(|e| gpu.fault(e, "allocating reference buffers"))?;
                        let args = kernel_args(&refv.label, r_case, &bufs)?;
                        r_bufs = Some((bufs, args));
                    }
                    let (bufs, args) = r_bufs.as_mut().expect("allocated just above");
                    match run_reference(gpu, &h, &rk, &r_plan, args, bufs, &keys, at, own)? {
                        Ok(out) => {
                            let out = Arc::new(out);
                            let budget = gpu.ref_cache_budget();
                            gpu.ref_cache
                                .insert(ref_key(refv, ci, ts), out.clone(), budget);
                            out
                        }
                        Err(f) => return Ok(fail(report, t0, *f)),
                    }
                }
            };

            if let Err(e) = run(gpu, &h, &ck, &c_plan, &mut c_args, &c_bufs, &keys) {
                return Ok(fail(
                    report,
                    t0,
                    fault_failure(gpu, e, &ck, at, FailureKind::Fault, ""),
                ));
            }
            if let Some(f) = judge(
                gpu,
                &h,
                cand,
                &c_bufs,
                &keys,
                &reference,
                previous.as_deref(),
                at,
            )? {
                return Ok(fail(report, t0, f));
            }

            // The same inputs again: a correct kernel gives the same answer within
            // tolerance (atomics may reorder float sums, nothing more).
            if ci == 0 && t == 0 {
                progress("checking determinism");
                match rerun_agrees(gpu, &h, cand, &ck, &c_plan, &mut c_args, &c_bufs, &keys, at)? {
                    Ok(()) => {}
                    Err(f) => {
                        report.nondeterministic = f.kind == FailureKind::Nondeterministic;
                        return Ok(fail(report, t0, *f));
                    }
                }
            }
            previous = Some(reference);
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

/// Device failures of our own helpers are internal errors, never the candidate's fault.
fn helper_error(gpu: &mut Gpu, e: CuError) -> WorkerError {
    gpu.fault(e, "kernel-lsp's verification helpers")
}

/// Fills every buffer from `keys` (inputs, poison, guards), waits, launches `k`, waits.
/// An error from the launch or the wait after it is the kernel's.
fn run(
    gpu: &mut Gpu,
    h: &DevHelpers,
    k: &Kernel,
    plan: &LaunchPlan,
    args: &mut [Vec<u8>],
    bufs: &[Guarded],
    keys: &[u64],
) -> Result<(), CuError> {
    let stream = gpu.ctx.stream;
    let prepared = bufs
        .iter()
        .enumerate()
        .try_for_each(|(i, b)| b.prepare(h, stream, keys[i]))
        .and_then(|()| gpu.ctx.sync());
    if let Err(e) = prepared {
        // Not the kernel's doing; reported as such by the caller's wording.
        return Err(CuError {
            call: "klsp_fill",
            code: e.code,
        });
    }
    gpu.launch_sync(k, plan, args)
}

/// Runs the reference on the trial's inputs and keeps a copy of what it wrote. The outer
/// `Err` is the worker's own failure; the inner one a reference that cannot judge.
#[allow(clippy::too_many_arguments)]
fn run_reference(
    gpu: &mut Gpu,
    h: &DevHelpers,
    k: &Kernel,
    plan: &LaunchPlan,
    args: &mut [Vec<u8>],
    bufs: &[Guarded],
    keys: &[u64],
    at: At,
    own: bool,
) -> Result<Result<RefOutputs, Box<Failure>>, WorkerError> {
    // The failure's kind when the kernel is its own reference; otherwise the
    // reference failed and the candidate was not judged.
    let kind = |own_kind: FailureKind| {
        if own {
            own_kind
        } else {
            FailureKind::ReferenceFailed
        }
    };
    if let Err(e) = run(gpu, h, k, plan, args, bufs, keys) {
        let who = if own { "" } else { "reference " };
        return Ok(Err(Box::new(fault_failure(
            gpu,
            e,
            k,
            at,
            kind(FailureKind::Fault),
            who,
        ))));
    }
    let stream = gpu.ctx.stream;
    let queued = (|| -> Result<_, CuError> {
        let mut guards = Vec::new();
        let mut unwritten = Vec::new();
        for (i, b) in bufs.iter().enumerate() {
            guards.push(b.check_guards(h, stream, keys[i])?);
            // Float outputs only: an integer poison cannot be told from a result.
            unwritten.push(if b.role == Role::Out && b.dtype.is_float() {
                Some(b.check_unchanged(h, stream, keys[i])?)
            } else {
                None
            });
        }
        let got = h.collect(|| gpu.ctx.sync())?;
        Ok((guards, unwritten, got))
    })();
    let (guards, unwritten, got) = queued.map_err(|e| helper_error(gpu, e))?;
    for (b, g) in bufs.iter().zip(&guards) {
        if let Some(oob) = b.out_of_bounds(g, &got) {
            let mut f = at.failure(
                kind(FailureKind::OutOfBounds),
                format!(
                    "{}out-of-bounds write {}",
                    if own { "" } else { "reference: " },
                    oob.describe(&b.name, b.elems as u64, elem_size(b.dtype) as u64)
                ),
            );
            f.buffer = Some(b.name.clone());
            if own {
                let first = oob.first_element(b.elems as u64, elem_size(b.dtype) as u64);
                f.index = u64::try_from(first).ok().map(|i| vec![i]);
            }
            return Ok(Err(Box::new(f)));
        }
    }
    for (b, slot) in bufs.iter().zip(&unwritten) {
        let Some(slot) = slot else { continue };
        if got.get(*slot).bit_equal == 0 {
            continue;
        }
        // Rare: find the first unwritten element on the host to name it.
        let data = b
            .download_data()
            .map_err(|e| gpu.fault(e, "reading the reference's output"))?;
        let i = first_unwritten(b.dtype, &data).unwrap_or(0);
        let coords = unravel(i as u64, &b.shape);
        let mut f = at.failure(
            kind(FailureKind::Nan),
            if own {
                format!(
                    "`{}` left {} unwritten (still the NaN poison): an `out` buffer must be written whole; write `inout` in the spec if the kernel keeps what was there",
                    k.display,
                    element_name(&b.name, &coords)
                )
            } else {
                format!(
                    "reference left {} unwritten (still the NaN poison); fix the reference or its spec",
                    element_name(&b.name, &coords)
                )
            },
        );
        f.buffer = Some(b.name.clone());
        f.index = Some(coords);
        return Ok(Err(Box::new(f)));
    }
    let copies = copy_outputs(gpu, bufs);
    match copies {
        Ok(bufs) => Ok(Ok(RefOutputs { bufs })),
        Err(e) => Err(gpu.fault(e, "keeping the reference's outputs")),
    }
}

/// A device copy of every buffer a kernel writes (`None` for `in` buffers), synced.
fn copy_outputs(gpu: &Gpu, bufs: &[Guarded]) -> Result<Vec<Option<DeviceBuffer>>, CuError> {
    let stream = gpu.ctx.stream;
    let mut out = Vec::new();
    for b in bufs {
        if b.role == Role::In {
            out.push(None);
            continue;
        }
        let copy = DeviceBuffer::alloc(b.data_bytes())?;
        driver::copy_dtod_async(copy.ptr, b.data_ptr(), b.data_bytes(), stream)?;
        out.push(Some(copy));
    }
    gpu.ctx.sync()?;
    Ok(out)
}

/// What one buffer of the candidate is checked with, as queued slots.
struct Scans {
    guards: super::gpu::GuardSlots,
    /// `in`: still the generated input. `inout`: the candidate's and the reference's
    /// results against the initial contents (a no-op passing within tolerance).
    unchanged: Option<Slot>,
    ref_unchanged: Option<Slot>,
    /// `out`/`inout`: against the reference's result, and against the previous input
    /// set's reference result.
    against_ref: Option<Slot>,
    against_previous: Option<Slot>,
    /// `out`/`inout`: bit for bit against each `in` buffer of the same type and at least
    /// the same length: (input index, candidate slot, reference slot).
    against_inputs: Vec<(usize, Slot, Slot)>,
}

/// Checks the candidate's buffers after a launch. `Ok(Some)` is the first failure.
#[allow(clippy::too_many_arguments)]
fn judge(
    gpu: &mut Gpu,
    h: &DevHelpers,
    cand: &Version,
    bufs: &[Guarded],
    keys: &[u64],
    reference: &RefOutputs,
    previous: Option<&RefOutputs>,
    at: At,
) -> Result<Option<Failure>, WorkerError> {
    let stream = gpu.ctx.stream;
    let queued = (|| -> Result<(Vec<Scans>, Collected), CuError> {
        let mut scans = Vec::new();
        for (i, b) in bufs.iter().enumerate() {
            let n = b.elems as u64;
            let (atol, rtol) = cand.plan.tolerance(b.dtype);
            let mut s = Scans {
                guards: b.check_guards(h, stream, keys[i])?,
                unchanged: None,
                ref_unchanged: None,
                against_ref: None,
                against_previous: None,
                against_inputs: Vec::new(),
            };
            if b.role != Role::Out {
                s.unchanged = Some(b.check_unchanged(h, stream, keys[i])?);
            }
            if let Some(Some(r)) = reference.bufs.get(i) {
                if b.role == Role::InOut {
                    s.ref_unchanged = Some(h.matches(stream, r.ptr, n, b.dtype, &b.fill, keys[i])?);
                }
                s.against_ref =
                    Some(h.compare(stream, r.ptr, b.data_ptr(), n, b.dtype, atol, rtol)?);
                if let Some(Some(p)) = previous.and_then(|p| p.bufs.get(i)) {
                    s.against_previous =
                        Some(h.compare(stream, p.ptr, b.data_ptr(), n, b.dtype, atol, rtol)?);
                }
                for (j, inp) in bufs.iter().enumerate() {
                    let fits = inp.role == Role::In && inp.dtype == b.dtype && inp.elems >= b.elems;
                    // Each pair takes two slots; leave room for the other buffers' scans.
                    if fits && bufs.len() * 8 + 2 * s.against_inputs.len() < super::devgen::SLOTS {
                        let c =
                            h.compare(stream, inp.data_ptr(), b.data_ptr(), n, b.dtype, 0.0, 0.0)?;
                        let r = h.compare(stream, inp.data_ptr(), r.ptr, n, b.dtype, 0.0, 0.0)?;
                        s.against_inputs.push((j, c, r));
                    }
                }
            }
            scans.push(s);
        }
        let got = h.collect(|| gpu.ctx.sync())?;
        Ok((scans, got))
    })();
    let (scans, got) = queued.map_err(|e| helper_error(gpu, e))?;
    let name = &cand.plan.kernel;

    // Out-of-bounds writes first: they explain any mismatch that follows.
    for (b, s) in bufs.iter().zip(&scans) {
        if let Some(oob) = b.out_of_bounds(&s.guards, &got) {
            let mut f = at.failure(
                FailureKind::OutOfBounds,
                format!(
                    "out-of-bounds write {}",
                    oob.describe(&b.name, b.elems as u64, elem_size(b.dtype) as u64)
                ),
            );
            f.buffer = Some(b.name.clone());
            let first = oob.first_element(b.elems as u64, elem_size(b.dtype) as u64);
            f.index = u64::try_from(first).ok().map(|i| vec![i]);
            return Ok(Some(f));
        }
    }
    for (i, (b, s)) in bufs.iter().zip(&scans).enumerate() {
        if b.role != Role::In {
            continue;
        }
        let st = got.get(s.unchanged.expect("queued for every in buffer"));
        if st.bad == 0 {
            continue;
        }
        let idx = st.first_bad.unwrap_or(0);
        let now = element_value(gpu, b, idx)?;
        let was = decode(b.dtype, &fill_element(b, keys[i], idx)).as_f64();
        let coords = unravel(idx, &b.shape);
        let mut f = at.failure(
            FailureKind::InputWritten,
            format!(
                "wrote into the input buffer `{}`: {} element{} changed, first {}: was {}, now {}; \
                 an `in` buffer must be left as it is (make it `inout` in the spec if the kernel updates it)",
                b.name,
                st.bad,
                if st.bad == 1 { "" } else { "s" },
                element_name(&b.name, &coords),
                show(was),
                show(now)
            ),
        );
        f.buffer = Some(b.name.clone());
        f.index = Some(coords);
        f.expected = Some(was);
        f.actual = Some(now);
        return Ok(Some(f));
    }
    for (i, (b, s)) in bufs.iter().zip(&scans).enumerate() {
        let Some(slot) = s.against_ref else { continue };
        let st = got.get(slot);
        let n = b.elems as u64;
        if st.bad > 0 {
            let prev = s.against_previous.map(|p| got.get(p).bad);
            let r = reference.bufs[i]
                .as_ref()
                .expect("compared buffers are kept");
            return Ok(Some(mismatch(
                gpu,
                name,
                b,
                r,
                &st,
                stale_results(true, prev),
                at,
            )?));
        }
        if constant_where_reference_varies(n, st.b_same, st.a_same) {
            let v = element_value(gpu, b, 0)?;
            let mut f = at.failure(
                FailureKind::Cheat,
                format!(
                    "anti-cheat (constant output): every element of `{}` is {} while the reference's vary; \
                     it passed the comparison only because the tolerance (atol {}, rtol {}) is wider than the values",
                    b.name,
                    show(v),
                    show(cand.plan.tolerance(b.dtype).0),
                    show(cand.plan.tolerance(b.dtype).1)
                ),
            );
            f.buffer = Some(b.name.clone());
            return Ok(Some(f));
        }
        if let (Some(c), Some(r)) = (s.unchanged, s.ref_unchanged) {
            if equal_where_reference_differs(n, got.get(c).bit_equal, got.get(r).bit_equal) {
                let mut f = at.failure(
                    FailureKind::Cheat,
                    format!(
                        "anti-cheat (output unchanged): `{}` still holds its initial values while the reference changes them; \
                         it passed only within the tolerance",
                        b.name
                    ),
                );
                f.buffer = Some(b.name.clone());
                return Ok(Some(f));
            }
        }
        for (j, c, r) in &s.against_inputs {
            if equal_where_reference_differs(n, got.get(*c).bit_equal, got.get(*r).bit_equal) {
                let mut f = at.failure(
                    FailureKind::Cheat,
                    format!(
                        "anti-cheat (output copies an input): `{}` is a copy of the input `{}` while the reference's is not; \
                         it passed only within the tolerance",
                        b.name, bufs[*j].name
                    ),
                );
                f.buffer = Some(b.name.clone());
                return Ok(Some(f));
            }
        }
    }
    Ok(None)
}

/// The bytes `prepare(key)` wrote at element `i` of `b`.
fn fill_element(b: &Guarded, key: u64, i: u64) -> Vec<u8> {
    let bits = super::fill::element_bits(b.dtype, &b.fill, key, i);
    bits.to_le_bytes()[..elem_size(b.dtype)].to_vec()
}

fn element_value(gpu: &mut Gpu, b: &Guarded, i: u64) -> Result<f64, WorkerError> {
    let bytes = b
        .element(i)
        .map_err(|e| gpu.fault(e, "reading a result back"))?;
    Ok(decode(b.dtype, &bytes).as_f64())
}

/// The failure for a comparison that found `st.bad` elements outside tolerance.
fn mismatch(
    gpu: &mut Gpu,
    kernel: &str,
    b: &Guarded,
    reference: &DeviceBuffer,
    st: &Stats,
    stale: bool,
    at: At,
) -> Result<Failure, WorkerError> {
    let idx = st.first_bad.unwrap_or(0);
    let es = elem_size(b.dtype);
    let got_bytes = b
        .element(idx)
        .map_err(|e| gpu.fault(e, "reading the candidate's result"))?;
    let exp_bytes = reference
        .download_range(idx as usize * es, es)
        .map_err(|e| gpu.fault(e, "reading the reference's result"))?;
    let (expected, actual) = (
        decode(b.dtype, &exp_bytes).as_f64(),
        decode(b.dtype, &got_bytes).as_f64(),
    );
    let unwritten = b.dtype.is_float() && got_bytes == poison_elem(b.dtype);
    let coords = unravel(idx, &b.shape);
    let got = if unwritten {
        "NaN (never written)".to_string()
    } else {
        show(actual)
    };
    let more = if st.bad > 1 {
        format!(
            "; {} elements differ, max abs err {}, max rel err {}",
            st.bad,
            show(st.max_abs),
            show(st.max_rel)
        )
    } else {
        String::new()
    };
    let message = if stale {
        format!(
            "anti-cheat (outputs follow inputs): `{}` still holds the results for the previous inputs after they changed \
             ({}: expected {}, got {got}); `{kernel}` must not reuse results between launches",
            b.name,
            element_name(&b.name, &coords),
            show(expected)
        )
    } else {
        format!(
            "{}: expected {}, got {got}{more}",
            element_name(&b.name, &coords),
            show(expected)
        )
    };
    let kind = if stale {
        FailureKind::Cheat
    } else if actual.is_nan() && !expected.is_nan() {
        FailureKind::Nan
    } else {
        FailureKind::Mismatch
    };
    let mut f = at.failure(kind, message);
    f.buffer = Some(b.name.clone());
    f.index = Some(coords);
    f.expected = Some(expected);
    f.actual = Some(actual);
    f.max_abs_err = Some(st.max_abs);
    f.max_rel_err = Some(st.max_rel);
    Ok(f)
}

/// Runs the candidate again on the same inputs and compares with the first run (kept in
/// a copy). `Ok(Err)` is a failure for the author.
#[allow(clippy::too_many_arguments)]
fn rerun_agrees(
    gpu: &mut Gpu,
    h: &DevHelpers,
    cand: &Version,
    k: &Kernel,
    plan: &LaunchPlan,
    args: &mut [Vec<u8>],
    bufs: &[Guarded],
    keys: &[u64],
    at: At,
) -> Result<Result<(), Box<Failure>>, WorkerError> {
    let stream = gpu.ctx.stream;
    let first = copy_outputs(gpu, bufs)
        .map_err(|e| gpu.fault(e, "keeping the candidate's first results"))?;
    if let Err(e) = run(gpu, h, k, plan, args, bufs, keys) {
        return Ok(Err(Box::new(fault_failure(
            gpu,
            e,
            k,
            at,
            FailureKind::Fault,
            "",
        ))));
    }
    let queued = (|| -> Result<(Vec<Option<Slot>>, Collected), CuError> {
        let mut slots = Vec::new();
        for (b, f) in bufs.iter().zip(&first) {
            slots.push(match f {
                Some(f) => {
                    let (atol, rtol) = cand.plan.tolerance(b.dtype);
                    Some(h.compare(
                        stream,
                        f.ptr,
                        b.data_ptr(),
                        b.elems as u64,
                        b.dtype,
                        atol,
                        rtol,
                    )?)
                }
                None => None,
            });
        }
        let got = h.collect(|| gpu.ctx.sync())?;
        Ok((slots, got))
    })();
    let (slots, got) = queued.map_err(|e| helper_error(gpu, e))?;
    for ((b, f), slot) in bufs.iter().zip(&first).zip(&slots) {
        let (Some(f), Some(slot)) = (f, slot) else {
            continue;
        };
        let st = got.get(*slot);
        if st.bad == 0 {
            continue;
        }
        let idx = st.first_bad.unwrap_or(0);
        let es = elem_size(b.dtype);
        let a = f
            .download_range(idx as usize * es, es)
            .map_err(|e| gpu.fault(e, "reading the first run's result"))?;
        let a = decode(b.dtype, &a).as_f64();
        let c = element_value(gpu, b, idx)?;
        let coords = unravel(idx, &b.shape);
        let mut fl = at.failure(
            FailureKind::Nondeterministic,
            format!(
                "nondeterministic: two runs on the same inputs differ beyond the tolerance at {}: {} then {} \
                 ({} element{}, max abs diff {}); results must not depend on timing or scheduling",
                element_name(&b.name, &coords),
                show(a),
                show(c),
                st.bad,
                if st.bad == 1 { "" } else { "s" },
                show(st.max_abs)
            ),
        );
        fl.buffer = Some(b.name.clone());
        fl.index = Some(coords);
        fl.expected = Some(a);
        fl.actual = Some(c);
        return Ok(Err(Box::new(fl)));
    }
    Ok(Ok(()))
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
    } else if e.call == "klsp_fill" {
        format!(
            "kernel-lsp's input generation failed before `{}` ran: {}",
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
            torch_reference: None,
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
