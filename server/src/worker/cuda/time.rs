//! `Op::Time` on the GPU (docs/spec.md, "What the tool does with it": time and roofline): case 0
//! only, inputs made once on the device, a warm-up per version, then interleaved rounds (each timed
//! launch after an L2 flush, bracketed by events) until every version has spent its
//! budget and reached `min_reps`.
//!
//! `inout` buffers are not re-uploaded between launches: a kernel that updates them in
//! place sees drifting values across repetitions. That changes the numbers, not the
//! memory traffic, so the timing stays representative; correctness is `verify`'s job.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::driver::{self, CuError, Event};
use super::fill::{buffer_seed, trial_seed};
use super::gpu::{
    alloc_buffers, buffer_args, case_device_bytes, err, kernel_args, Gpu, Guarded, Kernel,
};
use super::limits::{summarize, LaunchPlan};
use crate::worker::protocol::{
    Ceilings, ErrorKind, TimeReport, TimeSettings, Timing, Version, WorkerError,
};

/// Hard stops so a host loop never runs away, whatever the settings say.
const MAX_REPS: usize = 100_000;
const MAX_WARMUP_LAUNCHES: usize = 10_000;

struct Prepared {
    kernel: Arc<Kernel>,
    plan: LaunchPlan,
    /// Point into `sets` in `time`, which outlives every launch.
    args: Vec<Vec<u8>>,
}

pub fn time(
    gpu: &mut Gpu,
    versions: &[Version],
    settings: &TimeSettings,
    progress: &mut dyn FnMut(&str),
) -> Result<TimeReport, WorkerError> {
    if versions.is_empty() {
        return Err(err(ErrorKind::BadRequest, "time: no versions given"));
    }
    progress("measuring device ceilings");
    let ceilings = gpu.ceilings();

    // Versions whose case-0 buffers are the same (usually all of them) share one set of
    // device buffers, so N versions do not need N times the memory.
    let mut layouts: Vec<Vec<(String, crate::spec::DType, crate::spec::Role, u64)>> = Vec::new();
    let mut sets: Vec<Vec<Guarded>> = Vec::new();
    let mut prepared = Vec::with_capacity(versions.len());
    for v in versions {
        progress(&format!("compiling {}", v.label));
        let c = v.plan.cases.first().ok_or_else(|| {
            err(
                ErrorKind::BadRequest,
                format!("`{}` has no case to time", v.label),
            )
        })?;
        let (k, _) = gpu.kernel(v, 0)?;
        let plan = gpu.prepare_launch(&v.label, &k, c)?;
        let layout: Vec<_> = buffer_args(c)
            .into_iter()
            .map(|(n, d, r, _, e, _)| (n.to_string(), d, r, e))
            .collect();
        let set = match layouts.iter().position(|l| *l == layout) {
            Some(i) => i,
            None => {
                gpu.check_memory(case_device_bytes(c), &format!("timing `{}`", v.label))?;
                let bufs =
                    alloc_buffers(c).map_err(|e| gpu.fault(e, "allocating buffers for timing"))?;
                // Inputs made on the device, from the same generator as verification.
                let h = gpu.helpers()?;
                let ts = trial_seed(0, 0, 0);
                let stream = gpu.ctx.stream;
                bufs.iter()
                    .enumerate()
                    .try_for_each(|(i, b)| b.prepare(&h, stream, buffer_seed(ts, i)))
                    .and_then(|()| gpu.ctx.sync())
                    .map_err(|e| gpu.fault(e, "making inputs for timing"))?;
                layouts.push(layout);
                sets.push(bufs);
                sets.len() - 1
            }
        };
        let args = kernel_args(&v.label, c, &sets[set])?;
        prepared.push(Prepared {
            kernel: k,
            plan,
            args,
        });
    }

    warm_up(gpu, versions, &mut prepared, settings, progress)?;

    progress("timing");
    let n = versions.len();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut spent = vec![0.0f64; n];
    let events: Vec<(Event, Event)> = (0..n)
        .map(|_| Ok((Event::new()?, Event::new()?)))
        .collect::<Result<_, CuError>>()
        .map_err(|e| gpu.fault(e, "creating timing events"))?;
    let wall_cap = Duration::from_secs_f64(
        120.0 + 4.0 * n as f64 * (settings.rep_ms.max(0.0) + settings.warmup_ms.max(0.0)) / 1e3,
    );
    let started = Instant::now();
    let stream = gpu.ctx.stream;
    let mut round: u32 = 0;
    loop {
        // Rotate who goes first so no version always follows the same neighbour.
        for j in 0..n {
            let i = (j + round as usize) % n;
            let p = &mut prepared[i];
            let step = (|| -> Result<(), CuError> {
                if settings.flush_l2 {
                    gpu.flush_l2(round)?;
                }
                events[i].0.record(stream)?;
                driver::launch(
                    p.kernel.func,
                    p.plan.grid,
                    p.plan.block,
                    p.plan.smem,
                    stream,
                    &mut p.args,
                )?;
                events[i].1.record(stream)
            })();
            if let Err(e) = step {
                return Err(fault(gpu, e, &versions[i], &p.kernel));
            }
        }
        if let Err(e) = gpu.ctx.sync() {
            return Err(fault(gpu, e, &versions[0], &prepared[0].kernel));
        }
        for i in 0..n {
            let ms = events[i]
                .1
                .since(&events[i].0)
                .map_err(|e| gpu.fault(e, "reading timing events"))?;
            samples[i].push(ms);
            spent[i] += ms;
        }
        round += 1;
        let reps = samples[0].len();
        // The budget is wall time (flushes, launches and syncs included), as in
        // triton.testing.do_bench: counting kernel time alone made a 9 us kernel take
        // thousands of flushed rounds per request.
        let wall_budget_ms = settings.rep_ms * n as f64;
        let enough = reps >= settings.min_reps.max(1) as usize
            && (started.elapsed().as_secs_f64() * 1e3 >= wall_budget_ms
                || spent.iter().all(|s| *s >= settings.rep_ms));
        if enough || reps >= MAX_REPS || started.elapsed() >= wall_cap {
            break;
        }
    }

    let energy = if settings.energy {
        measure_energy(gpu, versions, &mut prepared, progress)?
    } else {
        vec![None; n]
    };

    let timings = versions
        .iter()
        .zip(&samples)
        .zip(energy)
        .map(|((v, s), energy_j)| timing_of(v, s, energy_j, ceilings.as_ref()))
        .collect();
    Ok(TimeReport {
        timings,
        interpreter: false,
    })
}

/// A launch error while timing `v`, with the worker restart said when the context is lost.
fn fault(gpu: &mut Gpu, e: CuError, v: &Version, k: &Kernel) -> WorkerError {
    let mut w = gpu.fault(e, &format!("`{}` ({}) while timing", v.label, k.display));
    if e.is_sticky() {
        w.message = format!(
            "{} at launch of `{}` while timing `{}` ({}); the CUDA context is lost and the worker restarts",
            e.describe(),
            k.display,
            v.label,
            e.name()
        );
    }
    w
}

/// Joules per call of each version: NVML's board counter around a burst of back-to-back
/// launches (no flushes: they would be counted too), long enough for the counter to move
/// several times. `None` for a version, or all, when NVML cannot say.
fn measure_energy(
    gpu: &mut Gpu,
    versions: &[Version],
    prepared: &mut [Prepared],
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Option<f64>>, WorkerError> {
    let mut energy: Vec<Option<f64>> = vec![None; versions.len()];
    let nvml = gpu
        .ctx
        .pci_bus_id()
        .map_err(|e| e.name())
        .and_then(|id| super::nvml::Nvml::open(&id));
    let nvml = match nvml {
        Ok(nvml) => nvml,
        Err(why) => {
            progress(&format!("no energy figure: {why}"));
            return Ok(energy);
        }
    };
    let stream = gpu.ctx.stream;
    for (i, (v, p)) in versions.iter().zip(prepared.iter_mut()).enumerate() {
        progress(&format!("measuring the energy of {}", v.label));
        let burst = Duration::from_millis(300);
        let before = nvml.millijoules();
        let t = Instant::now();
        let mut calls = 0u64;
        while t.elapsed() < burst && calls < 1_000_000 {
            for _ in 0..8 {
                let (grid, block, smem) = (p.plan.grid, p.plan.block, p.plan.smem);
                if let Err(e) =
                    driver::launch(p.kernel.func, grid, block, smem, stream, &mut p.args)
                {
                    return Err(fault(gpu, e, v, &p.kernel));
                }
            }
            calls += 8;
            if let Err(e) = gpu.ctx.sync() {
                return Err(fault(gpu, e, v, &p.kernel));
            }
        }
        if let (Ok(b), Ok(a)) = (before, nvml.millijoules()) {
            energy[i] = super::nvml::joules_per_call(b, a, calls);
        }
    }
    Ok(energy)
}

/// A version's timing from its samples: the median and its interval, the spread, and
/// what the median means against the device's ceilings.
fn timing_of(
    v: &Version,
    samples: &[f64],
    energy_j: Option<f64>,
    ceilings: Option<&Ceilings>,
) -> Timing {
    let sum = summarize(samples);
    let c0 = &v.plan.cases[0];
    let secs = sum.median * 1e-3;
    let gbps = if secs > 0.0 {
        c0.bytes / secs / 1e9
    } else {
        0.0
    };
    let tflops = c0.flops.filter(|_| secs > 0.0).map(|f| f / secs / 1e12);
    Timing {
        label: v.label.clone(),
        median_ms: sum.median,
        min_ms: sum.min,
        p10_ms: sum.p10,
        p90_ms: sum.p90,
        median_interval_ms: sum.median_interval,
        reps: samples.len() as u32,
        gbps,
        frac_copy: ceilings
            .filter(|c| c.copy_gbps > 0.0)
            .map(|c| gbps / c.copy_gbps),
        tflops,
        frac_fma: match (tflops, ceilings) {
            (Some(t), Some(c)) if c.fma_tflops > 0.0 => Some(t / c.fma_tflops),
            _ => None,
        },
        energy_j,
    }
}

/// Warm-up of each version for `settings.warmup_ms`: caches, clocks, lazy module loading.
fn warm_up(
    gpu: &mut Gpu,
    versions: &[Version],
    prepared: &mut [Prepared],
    settings: &TimeSettings,
    progress: &mut dyn FnMut(&str),
) -> Result<(), WorkerError> {
    for (v, p) in versions.iter().zip(prepared.iter_mut()) {
        progress(&format!("warming up {}", v.label));
        let start = Instant::now();
        let budget = Duration::from_secs_f64(settings.warmup_ms.max(0.0) / 1e3);
        for n in 0.. {
            if let Err(e) = gpu.launch_sync(&p.kernel, &p.plan, &mut p.args) {
                return Err(fault(gpu, e, v, &p.kernel));
            }
            if start.elapsed() >= budget || n + 1 >= MAX_WARMUP_LAUNCHES {
                break;
            }
        }
    }
    Ok(())
}
