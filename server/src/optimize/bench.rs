//! The one bench engine, shared by `kernel-lsp bench`, the editor's Benchmark job and the
//! PyTorch columns of `kernel-lsp optimize`: what a kernel is compared with (another
//! kernel of the file, a `torch:` expression or module function, or the caller's pinned
//! baseline), its verification, and one interleaved timing from which the speedups and
//! the eager/compile columns come. The kernel under test defines the inputs: a
//! `reference = K` runs on them (`BenchPlan::for_reference`), never on K's own
//! distributions. Plain data in, typed reports out; the front ends only format. Talks to
//! GPUs only through a `WorkerPool`; reads a file only for a `torch:` module next to the
//! kernel's file.

use std::path::Path;

use serde::Serialize;

use crate::analysis::{self, FileAnalysis};
use crate::spec::{BenchPlan, EvalEnv, TorchReference};
use crate::syntax::Lang;
use crate::worker::pool::WorkerPool;
use crate::worker::protocol::{
    ErrorKind, HelloResult, Op, OpResult, TimeSettings, Timing, TorchMode, VerifyReport, Version,
    WorkerError,
};

/// Why torch.compile has no column on Triton's CPU interpreter.
pub const NO_COMPILE_ON_INTERPRETER: &str =
    "torch.compile is not timed on Triton's CPU interpreter";

/// The file a kernel is benchmarked in: its text, that text's analysis, and its path when
/// it is on disk (a `torch:` module is read next to it).
#[derive(Clone, Copy)]
pub struct BenchFile<'a> {
    pub text: &'a str,
    pub analysis: &'a FileAnalysis,
    pub path: Option<&'a Path>,
}

/// What a kernel is verified and timed against.
#[derive(Clone, Debug, PartialEq)]
pub enum Reference {
    /// `reference = K`: another kernel of the file, on this kernel's inputs.
    Kernel(Version),
    /// `reference = torch: ...`: PyTorch on the kernel's inputs; `eager` is verified
    /// against, and timed with torch.compile beside it where that means something.
    Torch { describe: String, eager: Version },
    /// The version the caller pinned (the editor's baseline).
    Baseline(Version),
}

impl Reference {
    /// The version the kernel is verified against.
    pub fn version(&self) -> &Version {
        match self {
            Reference::Kernel(v) | Reference::Baseline(v) => v,
            Reference::Torch { eager, .. } => eager,
        }
    }

    /// How reports name it: `ref_kernel`, `torch: torch.relu(x)`, `baseline`.
    pub fn name(&self) -> String {
        match self {
            Reference::Torch { describe, .. } => format!("torch: {describe}"),
            other => other.version().label.clone(),
        }
    }

    /// The versions timed beside the kernels, in order: the reference, or PyTorch in each
    /// of `modes`.
    fn timed(&self, modes: &[TorchMode]) -> Vec<Version> {
        match self {
            Reference::Torch { eager, .. } => modes
                .iter()
                .map(|m| Version {
                    label: m.label().to_string(),
                    torch: Some(*m),
                    ..eager.clone()
                })
                .collect(),
            other => vec![other.version().clone()],
        }
    }
}

impl<'a> BenchFile<'a> {
    /// Kernel `name` under `plan`, labelled with its name.
    pub fn version(&self, name: &str, plan: &BenchPlan) -> Version {
        Version {
            torch: None,
            label: name.to_string(),
            lang: self.analysis.model.lang,
            source: self.analysis.kernel_source(name, self.text),
            plan: plan.clone(),
            options: Vec::new(),
            cuda: None,
        }
    }

    /// Kernel `name` as its spec plans it; `Err` says why it cannot run.
    pub fn kernel(&self, name: &str) -> Result<Version, String> {
        let planned = super::evaluate::plan_in(self.analysis, self.text, name)?;
        Ok(Version {
            label: name.to_string(),
            ..planned.version
        })
    }

    /// The evaluated spec of kernel `name`, when it has one.
    fn plan_of(&self, name: &str) -> Option<&'a BenchPlan> {
        let a = self.analysis;
        let i = a.model.kernels.iter().position(|k| k.name == name)?;
        a.specs.get(i)?.plan.as_ref()
    }

    /// What `kernel` is compared with, from its spec's `reference`: another kernel (with
    /// its own launch, on `kernel`'s inputs), PyTorch, or none (the caller decides:
    /// itself, or a pinned baseline). `Err`: why the reference cannot run.
    pub fn reference(&self, kernel: &Version) -> Result<Option<Reference>, String> {
        if let Some(r) = &kernel.plan.reference {
            let plan = kernel.plan.for_reference(r, self.plan_of(r));
            return Ok(Some(Reference::Kernel(self.version(r, &plan))));
        }
        torch_reference(kernel, self.path).transpose()
    }
}

/// `kernel`'s `reference = torch: ...`, when its spec has one. `Err`: the module function
/// cannot be read (missing, undefined, or no file on disk to find it next to).
pub fn torch_reference(kernel: &Version, file: Option<&Path>) -> Option<Result<Reference, String>> {
    let tr = kernel.plan.torch_reference.as_deref()?;
    let module = match (file, tr) {
        (Some(f), _) => analysis::torch_module_source(f, tr),
        (None, TorchReference::Expr { .. }) => Ok(String::new()),
        (None, _) => Err("`reference = torch: module.fn` needs the file on disk (the module sits next to it); save the file first".into()),
    };
    Some(module.map(|m| Reference::Torch {
        describe: tr.describe(),
        eager: Version::torch_reference(kernel, TorchMode::Eager, m),
    }))
}

/// The spec environment of the device that runs the kernels (`sms`), else `fallback`'s.
pub fn device_env(hello: Option<&HelloResult>, fallback: u64) -> EvalEnv {
    let sms = hello
        .and_then(|h| h.device.as_ref())
        .map(|d| u64::from(d.sms))
        .filter(|s| *s > 0);
    EvalEnv {
        sms: sms.unwrap_or(fallback),
    }
}

/// How a verification ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Passed(VerifyReport),
    /// Wrong results (the report names the first bad element), or nondeterministic ones.
    Failed(VerifyReport),
    /// The kernel faulted or hung: a verification failure with no report.
    Crashed(WorkerError),
    /// The run could not be judged (compile error, worker lost, bad request).
    Error(WorkerError),
}

impl Verdict {
    /// Reads the worker's answer to a verify request.
    pub fn from_reply(reply: Result<OpResult, WorkerError>) -> Verdict {
        match reply {
            Ok(OpResult::Verify(v)) if v.passed => Verdict::Passed(v),
            Ok(OpResult::Verify(v)) => Verdict::Failed(v),
            Ok(other) => Verdict::Error(unexpected("verify", &other)),
            Err(e) if matches!(e.kind, ErrorKind::Fault | ErrorKind::Timeout) => {
                Verdict::Crashed(e)
            }
            Err(e) => Verdict::Error(e),
        }
    }

    /// Why it did not pass, and the buffer at fault when one is named; `None` when it
    /// passed.
    pub fn failure(&self) -> Option<(String, Option<String>)> {
        match self {
            Verdict::Passed(_) => None,
            Verdict::Failed(v) => Some(match &v.failure {
                Some(f) => (f.message.clone(), f.buffer.clone()),
                None if v.nondeterministic => {
                    ("gives different results on the same inputs".into(), None)
                }
                None => ("failed verification".into(), None),
            }),
            Verdict::Crashed(e) | Verdict::Error(e) => Some((e.message.clone(), None)),
        }
    }
}

/// Verifies `kernel` against `reference`, or, with none, against itself: no result can
/// be judged then, but out-of-bounds writes, writes into `in` buffers, `out` elements
/// left unwritten, faults, hangs and results that change from run to run are caught.
pub async fn verify(
    pool: &WorkerPool,
    kernel: &Version,
    reference: Option<&Reference>,
    seed: u64,
    sanitize: bool,
) -> Verdict {
    let against = reference.map_or(kernel, Reference::version);
    let reply = pool
        .request(Op::verify(kernel, against, seed, sanitize), None)
        .await;
    Verdict::from_reply(reply)
}

/// The PyTorch modes timed beside a kernel, and why one is missing: torch.compile is
/// left out on Triton's CPU interpreter, where no time is a GPU time.
pub fn torch_modes(lang: Lang, interpreter: bool) -> (Vec<TorchMode>, Option<&'static str>) {
    if lang == Lang::Triton && interpreter {
        (vec![TorchMode::Eager], Some(NO_COMPILE_ON_INTERPRETER))
    } else {
        (vec![TorchMode::Eager, TorchMode::Compile], None)
    }
}

/// How many times faster the kernel is than the reference: the ratio of medians.
pub fn speedup(kernel: &Timing, reference: Option<&Timing>) -> Option<f64> {
    let r = reference?;
    (kernel.median_ms > 0.0).then(|| r.median_ms / kernel.median_ms)
}

/// PyTorch's timings in one interleaved measurement.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TorchTimes {
    pub eager: Option<Timing>,
    pub compile: Option<Timing>,
    /// Why a column is missing.
    pub note: Option<&'static str>,
}

/// One interleaved timing of kernels and what they are compared with.
#[derive(Clone, Debug, PartialEq)]
pub struct Timed {
    /// One per kernel version, in request order.
    pub kernels: Vec<Timing>,
    /// A kernel or baseline reference.
    pub reference: Option<Timing>,
    /// PyTorch, with `reference = torch: ...`.
    pub torch: Option<TorchTimes>,
    /// Timed on Triton's CPU interpreter: results real, times not GPU times.
    pub interpreter: bool,
    /// How many times it was measured (more than once when disturbed: [`steadiest_of`]).
    pub measured: Measured,
}

/// The kernel against PyTorch: the reference's timings and the speedups (reference
/// median over the kernel's).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TorchBars {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eager: Option<Timing>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compile: Option<Timing>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup_eager: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup_compile: Option<f64>,
    /// Why a column is missing ("torch.compile is not timed on the CPU interpreter").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Timed {
    /// Splits the timings of a request built by [`time`]: `kernels` versions first, then
    /// the reference's (one, or one per PyTorch mode in `modes`).
    pub fn split(
        timings: Vec<Timing>,
        kernels: usize,
        reference: Option<&Reference>,
        modes: (&[TorchMode], Option<&'static str>),
        interpreter: bool,
    ) -> Timed {
        let measured = Measured::of(vec![worst_spread(&timings)]);
        let mut it = timings.into_iter();
        let kernel_timings: Vec<Timing> = it.by_ref().take(kernels).collect();
        let (mut reference_timing, mut torch) = (None, None);
        match reference {
            Some(Reference::Torch { .. }) => {
                let mut t = TorchTimes {
                    note: modes.1,
                    ..TorchTimes::default()
                };
                for (mode, timing) in modes.0.iter().zip(it) {
                    match mode {
                        TorchMode::Eager => t.eager = Some(timing),
                        TorchMode::Compile => t.compile = Some(timing),
                    }
                }
                torch = Some(t);
            }
            Some(_) => reference_timing = it.next(),
            None => {}
        }
        Timed {
            kernels: kernel_timings,
            reference: reference_timing,
            torch,
            interpreter,
            measured,
        }
    }

    /// Kernel `i`'s speedup over the reference (over PyTorch eager for a torch one).
    pub fn speedup(&self, i: usize) -> Option<f64> {
        let k = self.kernels.get(i)?;
        match &self.torch {
            Some(t) => speedup(k, t.eager.as_ref()),
            None => speedup(k, self.reference.as_ref()),
        }
    }

    /// Kernel `i` against PyTorch, with `reference = torch: ...`.
    pub fn bars(&self, i: usize) -> Option<TorchBars> {
        let t = self.torch.as_ref()?;
        let k = self.kernels.get(i);
        let over = |r: &Option<Timing>| k.and_then(|k| speedup(k, r.as_ref()));
        Some(TorchBars {
            speedup_eager: over(&t.eager),
            speedup_compile: over(&t.compile),
            eager: t.eager.clone(),
            compile: t.compile.clone(),
            note: t.note.map(String::from),
        })
    }
}

/// Times `kernels` and the reference interleaved in one request (PyTorch eager, and
/// torch.compile where [`torch_modes`] says so); a disturbed measurement is requested
/// again and the steadiest kept whole ([`steadiest_of`]).
pub async fn time(
    pool: &WorkerPool,
    kernels: Vec<Version>,
    reference: Option<&Reference>,
    settings: TimeSettings,
) -> Result<Timed, WorkerError> {
    let lang = kernels.first().map_or(Lang::Cuda, |v| v.lang);
    let interpreter = pool.hello().is_some_and(|h| h.triton.interpreter);
    let (modes, note) = torch_modes(lang, interpreter);
    let n = kernels.len();
    let mut versions = kernels;
    versions.extend(reference.map_or_else(Vec::new, |r| r.timed(&modes)));
    let measure = || async {
        let op = Op::Time {
            versions: versions.clone(),
            settings: settings.clone(),
        };
        match pool.request(op, None).await? {
            OpResult::Time(t) => Ok(t),
            other => Err(unexpected("time", &other)),
        }
    };
    let (t, measured) = steadiest_of(measure).await?;
    let timed = Timed::split(t.timings, n, reference, (&modes, note), t.interpreter);
    Ok(Timed { measured, ..timed })
}

/// The registers per thread the compiler gives a CUDA kernel (`None` for Triton, or
/// when the compile fails: the bench itself reports that).
pub async fn registers(pool: &WorkerPool, kernel: &Version) -> Option<u32> {
    if kernel.lang != Lang::Cuda {
        return None;
    }
    let op = Op::Compile {
        version: kernel.clone(),
    };
    match pool.request(op, None).await {
        Ok(OpResult::Compile(c)) => c.registers,
        _ => None,
    }
}

fn unexpected(op: &str, got: &OpResult) -> WorkerError {
    WorkerError {
        kind: ErrorKind::WorkerLost,
        message: format!("the worker answered `{op}` with another kind of result: {got:?}"),
        log: None,
    }
}

mod columns;
pub use columns::{torch_columns, TorchColumns};
mod steady;
pub use steady::{
    disturbed, steadiest, steadiest_of, worst_spread, Measured, DISTURBED_SPREAD, MAX_RETIMES,
};

#[cfg(test)]
mod tests;
