//! The worker protocol: JSON lines on the worker's stdin/stdout. One request per line,
//! one final reply per request (zero or more `progress` lines may come before it), each
//! carrying the request's `id`. Requests carry source text and evaluated plans, never
//! local paths, so the same worker runs behind `ssh`, `srun` or `kubectl exec`.
//! Documented for users in docs/worker-protocol.md; `PROTOCOL_VERSION` changes when a
//! message changes incompatibly.
//!
//! Pure data: serde types only. The worker side (`worker::serve`) and the server side
//! (`worker::pool`) both use them.

use serde::{Deserialize, Serialize};

use crate::spec::BenchPlan;
use crate::syntax::Lang;

pub const PROTOCOL_VERSION: u32 = 1;

/// A request line. `time_limit_ms` bounds the whole request inside the worker; the pool
/// also enforces it from outside (a worker that overruns is killed and replaced).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_ms: Option<u64>,
    #[serde(flatten)]
    pub op: Op,
}

// One `Op` exists per request in flight (a handful), so an inline `Version` costs nothing
// worth a box at every construction site.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Device description, measured ceilings and which backends work.
    Hello,
    /// Compile one version (CUDA: NVRTC for the device's own arch; Triton: first launch).
    Compile {
        version: Version,
    },
    /// Run `candidate` and `reference` on the same fresh inputs for every case and trial
    /// and compare (docs/spec.md, "verify").
    Verify {
        candidate: Box<Version>,
        reference: Box<Version>,
        /// Base seed; trial `t` of case `c` uses a seed derived from (seed, c, t) and the
        /// report names it, so a failure replays exactly.
        seed: u64,
        /// Also run the candidate once under compute-sanitizer (memcheck, racecheck).
        #[serde(default)]
        sanitize: bool,
        /// Only these cases (indices into the plan's cases; case 0 keeps its determinism
        /// check), so one candidate's cases can run on several workers. None: all.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cases: Option<Vec<usize>>,
        /// Count the elements outside the tolerance per case and buffer (the report's
        /// `tally`) instead of failing on them; every other check still fails. Asked only
        /// with a PyTorch reference (the optimizer's rule, docs/optimizer.md).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        tally: bool,
    },
    /// Time every version on case 0, interleaved in this one process.
    Time {
        versions: Vec<Version>,
        #[serde(default)]
        settings: TimeSettings,
    },
    Shutdown,
}

impl Op {
    /// `verify`: `candidate` against `reference` on the inputs of `seed`.
    pub fn verify(candidate: &Version, reference: &Version, seed: u64, sanitize: bool) -> Op {
        Op::Verify {
            candidate: Box::new(candidate.clone()),
            reference: Box::new(reference.clone()),
            seed,
            sanitize,
            cases: None,
            tally: false,
        }
    }

    /// [`Op::verify`] against a PyTorch reference, counting the elements outside the
    /// tolerance instead of failing on them.
    pub fn verify_tally(candidate: &Version, reference: &Version, seed: u64) -> Op {
        Op::Verify {
            candidate: Box::new(candidate.clone()),
            reference: Box::new(reference.clone()),
            seed,
            sanitize: false,
            cases: None,
            tally: true,
        }
    }

    /// [`Op::verify`] of case `case` alone (no compute-sanitizer run).
    pub fn verify_case(candidate: &Version, reference: &Version, seed: u64, case: usize) -> Op {
        Op::Verify {
            candidate: Box::new(candidate.clone()),
            reference: Box::new(reference.clone()),
            seed,
            sanitize: false,
            cases: Some(vec![case]),
            tally: false,
        }
    }

    /// The versions a request carries (none for `hello` and `shutdown`).
    pub fn versions(&self) -> Vec<&Version> {
        match self {
            Op::Compile { version } => vec![version],
            Op::Verify {
                candidate,
                reference,
                ..
            } => vec![candidate.as_ref(), reference.as_ref()],
            Op::Time { versions, .. } => versions.iter().collect(),
            Op::Hello | Op::Shutdown => Vec::new(),
        }
    }

    /// [`Op::versions`], to change them in place.
    pub fn versions_mut(&mut self) -> Vec<&mut Version> {
        match self {
            Op::Compile { version } => vec![version],
            Op::Verify {
                candidate,
                reference,
                ..
            } => vec![candidate.as_mut(), reference.as_mut()],
            Op::Time { versions, .. } => versions.iter_mut().collect(),
            Op::Hello | Op::Shutdown => Vec::new(),
        }
    }
}

/// One version of a kernel, complete enough to run with nothing else.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Version {
    /// Shown in reports: "baseline", "candidate", "reference", "BLOCK=256".
    pub label: String,
    pub lang: Lang,
    /// CUDA: the file's device slice (host code blanked, lines kept). Triton: the whole
    /// Python module text.
    pub source: String,
    /// The evaluated spec of this version. Buffers (shapes, dtypes, roles) must agree
    /// between versions compared with each other; launches may differ.
    pub plan: BenchPlan,
    /// Extra compiler options (CUDA: `--use_fast_math`, `-maxrregcount=64`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// Set: this is not a kernel but the plan's PyTorch reference (`reference = torch:
    /// ...`), run in this mode on the kernel's device with the same inputs; `source` is then
    /// the text of the reference's module (`module.fn`), or empty for an expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch: Option<TorchMode>,
    /// Set by the worker, never by the client: this CUDA version compiled for the worker's
    /// GPU, so the Python helper can launch it beside a PyTorch reference (issue #17).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda: Option<Box<CudaBinary>>,
}

/// A CUDA version compiled to PTX for the worker's device: the distinct modules and, per
/// case, which module and entry symbol it launches (template kernels have one instance
/// per set of template arguments).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaBinary {
    pub modules: Vec<String>,
    /// One per case: (index into `modules`, the kernel's lowered symbol).
    pub cases: Vec<(usize, String)>,
}

/// How a PyTorch reference runs: as written, or through `torch.compile` (compiled once
/// per shape, on the first call, outside the timing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TorchMode {
    Eager,
    Compile,
}

impl TorchMode {
    /// The label of the version in reports: "torch eager", "torch.compile".
    pub fn label(self) -> &'static str {
        match self {
            TorchMode::Eager => "torch eager",
            TorchMode::Compile => "torch.compile",
        }
    }
}

impl Version {
    /// The PyTorch reference of `kernel`'s plan, in `mode`. `module_source`: the text of
    /// the reference's module for `module.fn` (read by the edge that knows the file).
    pub fn torch_reference(kernel: &Version, mode: TorchMode, module_source: String) -> Version {
        Version {
            label: mode.label().to_string(),
            lang: kernel.lang,
            source: module_source,
            plan: kernel.plan.clone(),
            options: Vec::new(),
            torch: Some(mode),
            cuda: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimeSettings {
    /// Warm-up time before measuring, per version.
    pub warmup_ms: f64,
    /// Measured time budget per version (at least `min_reps` launches).
    pub rep_ms: f64,
    pub min_reps: u32,
    /// Flush L2 (write a buffer larger than L2) before every timed launch.
    pub flush_l2: bool,
    /// Also measure joules per call with NVML, in a burst of launches after the timing
    /// (about 0.3 s per version; `bench` asks for it, optimization steps do not).
    #[serde(default)]
    pub energy: bool,
}

impl Default for TimeSettings {
    fn default() -> Self {
        TimeSettings {
            warmup_ms: 25.0,
            rep_ms: 100.0,
            min_reps: 10,
            flush_l2: true,
            energy: false,
        }
    }
}

/// A reply line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub id: u64,
    #[serde(flatten)]
    pub body: ReplyBody,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ReplyBody {
    /// Not final: what the request is doing now ("compiling", "verifying case 2/3").
    Progress {
        stage: String,
    },
    Ok {
        result: Box<OpResult>,
    },
    Error {
        error: WorkerError,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OpResult {
    Hello(HelloResult),
    Compile(CompileReport),
    Verify(VerifyReport),
    Time(TimeReport),
    Shutdown,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerError {
    pub kind: ErrorKind,
    /// What happened, where, and what to do: shown to the author as is.
    pub message: String,
    /// Compiler log or tool output, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Malformed request or a plan the worker cannot run.
    BadRequest,
    /// No CUDA driver / no GPU (CUDA requests) on this worker.
    NoDevice,
    /// NVRTC missing, or python/torch/triton missing for Triton requests.
    NoBackend,
    /// The version did not compile; `log` has the compiler output.
    CompileFailed,
    /// Launch geometry or memory past the device's limits, checked before launching.
    LimitExceeded,
    /// The kernel faulted (illegal address, misaligned access, trap). The CUDA context
    /// is gone: the worker exits after replying and the pool starts a new one.
    Fault,
    /// The request ran past its time limit (reported by the pool when it had to kill).
    Timeout,
    /// The worker process died or spoke garbage (reported by the pool).
    WorkerLost,
    Internal,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HelloResult {
    pub protocol: u32,
    pub worker_version: String,
    /// None when no CUDA device could be opened (`cuda.message` says why).
    pub device: Option<DeviceInfo>,
    pub cuda: BackendStatus,
    pub triton: BackendStatus,
    /// Where this worker's Triton keeps compiled kernels, as `host:path`. Workers that
    /// say the same (and have GPUs of the same architecture) load each other's compiled candidates
    /// from it instead of compiling them again, so the primary can time them cheaply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_cache: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackendStatus {
    pub available: bool,
    /// Version string when available, the reason when not.
    pub message: String,
    /// Triton only: kernels run in Triton's CPU interpreter (`TRITON_INTERPRET=1`);
    /// results are real, timings are interpreter timings.
    #[serde(default)]
    pub interpreter: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub name: String,
    /// `sm_90` for compute capability 9.0.
    pub arch: String,
    pub sms: u32,
    pub warp_size: u32,
    pub max_threads_per_block: u32,
    pub max_block: [u32; 3],
    pub max_grid: [u32; 3],
    pub smem_per_block: u64,
    /// With `cudaFuncSetAttribute` opt-in.
    pub smem_per_block_optin: u64,
    pub smem_per_sm: u64,
    pub regs_per_block: u32,
    pub l2_bytes: u64,
    pub mem_bytes: u64,
    /// Measured once at worker start.
    pub ceilings: Option<Ceilings>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ceilings {
    /// Device-to-device copy, bytes read + written per second, in GB/s.
    pub copy_gbps: f64,
    /// FP32 FMA rate (2 FLOP per FMA), in TFLOP/s.
    pub fma_tflops: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompileReport {
    pub log: String,
    pub compile_ms: f64,
    /// Served from the worker's cache (same source, options, arch).
    pub cached: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registers: Option<u32>,
    /// Local memory per thread in bytes (spills and local arrays), from the driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_bytes: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VerifyReport {
    pub passed: bool,
    pub cases: usize,
    pub trials: u32,
    pub seed: u64,
    /// The first failure, with everything needed to replay it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// The candidate gave different results on the same inputs beyond tolerance.
    #[serde(default)]
    pub nondeterministic: bool,
    /// compute-sanitizer output when `sanitize` was asked and it found something.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sanitizer: Option<String>,
    /// Triton interpreter run (CPU).
    #[serde(default)]
    pub interpreter: bool,
    pub elapsed_ms: f64,
    /// With `tally` asked: each case's and output buffer's elements outside the
    /// tolerance, over its trials.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tally: Vec<Tally>,
}

/// How far one output buffer of one case is from the reference, over the case's trials.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    pub case: usize,
    pub buffer: String,
    /// Elements outside `atol + rtol·|reference|`.
    pub outside: u64,
    /// Elements compared.
    pub elements: u64,
    /// The largest difference in units of that tolerance (0 when none is outside; capped
    /// at 1e300, which a difference where the tolerance is 0 also gets).
    pub worst: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub case: usize,
    pub trial: u32,
    pub seed: u64,
    pub kind: FailureKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer: Option<String>,
    /// First bad element as coordinates in the buffer's shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_abs_err: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rel_err: Option<f64>,
    /// One line for the author: "y[4097]: expected 1.5, got NaN (case 1, seed 0x2a)".
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Values differ beyond tolerance.
    Mismatch,
    /// NaN where the reference has a number (an unwritten `out` element stays NaN).
    Nan,
    /// A guard element past the end of a buffer changed: an out-of-bounds write.
    OutOfBounds,
    /// The candidate faulted; `message` has the CUDA error.
    Fault,
    /// The candidate did not finish within the time limit.
    Timeout,
    /// The reference itself failed (faulted, or gave NaN); the candidate was not judged.
    ReferenceFailed,
    /// compute-sanitizer (memcheck or racecheck) reported errors in the candidate's run.
    Sanitizer,
    /// The candidate changed an `in` buffer.
    InputWritten,
    /// Two runs of the candidate on the same inputs differ beyond the tolerance.
    Nondeterministic,
    /// One of the anti-cheat checks (docs/verification.md): the output did not follow
    /// the inputs, equals an input, or is constant where the reference's is not. The
    /// message names the check.
    Cheat,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimeReport {
    /// One per requested version, in request order.
    pub timings: Vec<Timing>,
    /// Triton interpreter timings (CPU): not comparable to GPU numbers.
    #[serde(default)]
    pub interpreter: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub label: String,
    pub median_ms: f64,
    pub min_ms: f64,
    /// 10th and 90th percentiles; (p90 - p10) / median is the spread.
    pub p10_ms: f64,
    pub p90_ms: f64,
    /// The 99% confidence interval of the median (order statistics; no assumption
    /// about the samples' distribution). Absent from workers older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_interval_ms: Option<[f64; 2]>,
    pub reps: u32,
    /// Case 0's bytes / median time.
    pub gbps: f64,
    /// `gbps` over the measured copy ceiling, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frac_copy: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tflops: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frac_fma: Option<f64>,
    /// Energy per call in joules (NVML's board counter around a burst of launches),
    /// when asked for and available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_j: Option<f64>,
}

impl Timing {
    pub fn spread(&self) -> f64 {
        if self.median_ms > 0.0 {
            (self.p90_ms - self.p10_ms) / self.median_ms
        } else {
            0.0
        }
    }
}

/// The op's name on the wire (`"compile"`), for messages on both sides of the protocol.
pub fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Hello => "hello",
        Op::Compile { .. } => "compile",
        Op::Verify { .. } => "verify",
        Op::Time { .. } => "time",
        Op::Shutdown => "shutdown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_and_reply_lines_are_flat_json() {
        let req = Request {
            id: 7,
            time_limit_ms: Some(1000),
            op: Op::Hello,
        };
        assert_eq!(
            serde_json::to_string(&req).unwrap(),
            r#"{"id":7,"time_limit_ms":1000,"op":"hello"}"#
        );
        let back: Request = serde_json::from_str(r#"{"id":7,"op":"shutdown"}"#).unwrap();
        assert_eq!(back.op, Op::Shutdown);
        let reply = Reply {
            id: 7,
            body: ReplyBody::Error {
                error: WorkerError {
                    kind: ErrorKind::NoDevice,
                    message: "no CUDA driver".into(),
                    log: None,
                },
            },
        };
        assert_eq!(
            serde_json::to_string(&reply).unwrap(),
            r#"{"id":7,"status":"error","error":{"kind":"no_device","message":"no CUDA driver"}}"#
        );
        let progress: Reply =
            serde_json::from_str(r#"{"id":7,"status":"progress","stage":"compiling"}"#).unwrap();
        assert_eq!(
            progress.body,
            ReplyBody::Progress {
                stage: "compiling".into()
            }
        );
    }
}
