//! The CUDA backend of the worker: compiles versions with NVRTC for the device's own
//! architecture, loads them with the driver API (cudarc, loaded at run time), and runs
//! `Compile`, `Verify` and `Time` (docs/spec.md, "What the tool does with it").
//!
//! - [`CudaBackend`]: the [`Backend`] implementation; opens the GPU lazily.
//! - `driver`: checked wrappers over the driver calls; `gpu`: the opened device, module
//!   cache, guarded buffers; `verify`, `time`: the two measurements.
//! - `fill`, `compare`, `limits`: the pure parts (inputs, comparison, launch limits),
//!   tested without a GPU.
//!
//! Invariants: `CudaBackend::new` touches nothing; `libcuda.so.1` is probed with
//! libloading before any cudarc call (cudarc panics when it is missing), and every
//! entry into the driver runs under `catch_unwind`. After a sticky fault (illegal
//! address, trap) [`CudaBackend::poisoned`] is true and every later request is refused:
//! the loop exits and the pool starts a fresh worker.

mod compare;
mod devgen;
mod driver;
mod fill;
mod gpu;
mod limits;
mod nvml;
mod refcache;
mod time;
mod verify;

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::backend::Backend;
use super::protocol::{
    BackendStatus, CompileReport, CudaBinary, DeviceInfo, ErrorKind, Op, OpResult, Version,
    WorkerError,
};
use crate::syntax::Lang;
use gpu::{err, Gpu};

enum State {
    NotOpened,
    Unavailable(String),
    Ready(Box<Gpu>),
}

/// Runs CUDA versions on device 0 of this machine.
pub struct CudaBackend {
    state: State,
}

impl Default for CudaBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl CudaBackend {
    /// Cheap: the driver is opened on the first `status`, `device` or `run`.
    pub fn new() -> Self {
        CudaBackend {
            state: State::NotOpened,
        }
    }

    fn open(&mut self) {
        if !matches!(self.state, State::NotOpened) {
            return;
        }
        self.state = match driver::probe_libcuda() {
            Err(why) => State::Unavailable(why),
            Ok(()) => match catch_unwind(Gpu::open) {
                Ok(Ok(g)) => State::Ready(Box::new(g)),
                Ok(Err(e)) => State::Unavailable(format!(
                    "the CUDA driver is installed but no GPU could be opened: {e}; check nvidia-smi \
                     and CUDA_VISIBLE_DEVICES"
                )),
                Err(p) => State::Unavailable(format!(
                    "the CUDA driver could not be loaded ({}); this worker cannot run CUDA kernels",
                    panic_text(&p)
                )),
            },
        };
    }

    fn gpu(&mut self) -> Result<&mut Gpu, WorkerError> {
        self.open();
        match &mut self.state {
            State::Ready(g) if g.poisoned => Err(err(
                ErrorKind::Fault,
                "the CUDA context was lost to an earlier fault; this worker must be restarted",
            )),
            State::Ready(g) => Ok(g),
            State::Unavailable(why) => Err(err(ErrorKind::NoDevice, why.clone())),
            State::NotOpened => Err(err(ErrorKind::Internal, "the CUDA backend was not opened")),
        }
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

fn cuda_only(v: &Version) -> Result<(), WorkerError> {
    if v.lang != Lang::Cuda || v.plan.lang != Lang::Cuda {
        return Err(err(
            ErrorKind::BadRequest,
            format!(
                "`{}` is not a CUDA version; the Triton backend runs it",
                v.label
            ),
        ));
    }
    Ok(())
}

fn run_op(gpu: &mut Gpu, op: &Op, progress: &mut dyn FnMut(&str)) -> Result<OpResult, WorkerError> {
    gpu.ctx
        .make_current()
        .map_err(|e| gpu.fault(e, "making the CUDA context current"))?;
    match op {
        Op::Compile { version } => {
            cuda_only(version)?;
            progress(&format!("compiling {}", version.label));
            let (k, cached) = gpu.kernel(version, 0)?;
            Ok(OpResult::Compile(CompileReport {
                log: k.log.clone(),
                compile_ms: if cached { 0.0 } else { k.compile_ms },
                cached,
                registers: Some(k.attrs.registers),
                local_bytes: Some(k.attrs.local_bytes),
            }))
        }
        // `sanitize` is the worker loop's job (a child worker under compute-sanitizer).
        Op::Verify {
            candidate,
            reference,
            seed,
            cases,
            ..
        } => {
            cuda_only(candidate)?;
            cuda_only(reference)?;
            verify::verify(gpu, candidate, reference, *seed, cases.as_deref(), progress)
                .map(OpResult::Verify)
        }
        Op::Time { versions, settings } => {
            for v in versions {
                cuda_only(v)?;
            }
            time::time(gpu, versions, settings, progress).map(OpResult::Time)
        }
        Op::Hello | Op::Shutdown => Err(err(
            ErrorKind::BadRequest,
            "hello and shutdown are answered by the worker loop, not the CUDA backend",
        )),
    }
}

impl Backend for CudaBackend {
    fn status(&mut self) -> BackendStatus {
        self.open();
        match &self.state {
            State::Ready(g) => match &g.toolchain.nvrtc {
                Ok(n) => {
                    let (ma, mi) = n.version();
                    BackendStatus {
                        available: !g.poisoned,
                        message: if g.poisoned {
                            "the CUDA context was lost to a fault; restart the worker".into()
                        } else {
                            format!(
                                "{} ({}), CUDA driver {}, NVRTC {ma}.{mi}",
                                g.info.name,
                                g.info.arch,
                                g.driver_version()
                            )
                        },
                        interpreter: false,
                    }
                }
                Err(e) => BackendStatus {
                    available: false,
                    message: format!(
                        "{} ({}) found, but kernels cannot be compiled: {e}",
                        g.info.name, g.info.arch
                    ),
                    interpreter: false,
                },
            },
            State::Unavailable(why) => BackendStatus {
                available: false,
                message: why.clone(),
                interpreter: false,
            },
            State::NotOpened => BackendStatus {
                available: false,
                message: "the CUDA backend was not opened".into(),
                interpreter: false,
            },
        }
    }

    fn device(&mut self) -> Option<DeviceInfo> {
        let g = self.gpu().ok()?;
        if g.ctx.make_current().is_err() {
            return Some(g.info.clone());
        }
        // The ceilings are measured here the first time (a few hundred milliseconds).
        match catch_unwind(AssertUnwindSafe(|| g.ceilings())) {
            Ok(_) => {}
            Err(p) => tracing::warn!("measuring ceilings panicked: {}", panic_text(&p)),
        }
        Some(g.info.clone())
    }

    fn run(&mut self, op: &Op, progress: &mut dyn FnMut(&str)) -> Result<OpResult, WorkerError> {
        let gpu = self.gpu()?;
        match catch_unwind(AssertUnwindSafe(|| run_op(gpu, op, progress))) {
            Ok(r) => r,
            Err(p) => {
                // Unknown state inside the driver wrapper: do not trust the context.
                gpu.poisoned = true;
                Err(err(
                    ErrorKind::Internal,
                    format!("the CUDA backend panicked: {}", panic_text(&p)),
                ))
            }
        }
    }

    fn poisoned(&self) -> bool {
        matches!(&self.state, State::Ready(g) if g.poisoned)
    }

    fn cuda_binary(
        &mut self,
        v: &Version,
        progress: &mut dyn FnMut(&str),
    ) -> Result<CudaBinary, WorkerError> {
        cuda_only(v)?;
        let gpu = self.gpu()?;
        let compile = |gpu: &mut Gpu, progress: &mut dyn FnMut(&str)| {
            gpu.ctx
                .make_current()
                .map_err(|e| gpu.fault(e, "making the CUDA context current"))?;
            progress(&format!("compiling {}", v.label));
            let mut bin = CudaBinary {
                modules: Vec::new(),
                cases: Vec::new(),
            };
            for case in 0..v.plan.cases.len() {
                let (k, _) = gpu.kernel(v, case)?;
                let index = match bin.modules.iter().position(|m| *m == k.ptx) {
                    Some(i) => i,
                    None => {
                        bin.modules.push(k.ptx.clone());
                        bin.modules.len() - 1
                    }
                };
                bin.cases.push((index, k.lowered.clone()));
            }
            Ok(bin)
        };
        match catch_unwind(AssertUnwindSafe(|| compile(gpu, progress))) {
            Ok(r) => r,
            Err(p) => {
                gpu.poisoned = true;
                Err(err(
                    ErrorKind::Internal,
                    format!("the CUDA backend panicked: {}", panic_text(&p)),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has_libcuda() -> bool {
        driver::probe_libcuda().is_ok()
    }

    #[test]
    fn backend_can_move_to_another_thread() {
        fn is_send<T: Send>() {}
        is_send::<CudaBackend>();
    }

    #[test]
    fn new_is_cheap_and_status_without_libcuda_says_why() {
        let mut b = CudaBackend::new();
        assert!(matches!(b.state, State::NotOpened));
        assert!(!b.poisoned());
        if has_libcuda() {
            {
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "SKIP new_is_cheap_and_status_without_libcuda_says_why: this machine has libcuda");
            }
            return;
        }
        let s = b.status();
        assert!(!s.available);
        assert_eq!(
            s.message,
            "no CUDA driver: libcuda.so.1 not found; this worker cannot run CUDA kernels"
        );
        assert!(b.device().is_none());
        let op = Op::Time {
            versions: vec![],
            settings: Default::default(),
        };
        let e = b.run(&op, &mut |_| {}).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NoDevice);
        assert!(e.message.contains("libcuda.so.1 not found"));
        assert!(!b.poisoned());
    }
}
