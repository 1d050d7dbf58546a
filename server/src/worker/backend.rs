//! The seam between the worker's request loop and its backends. A backend runs one
//! language's versions (CUDA through cudarc, Triton through a Python helper); the loop
//! (`worker::serve`) picks the backend by `Version::lang` and writes the replies.

use super::protocol::{
    BackendStatus, CudaBinary, DeviceInfo, ErrorKind, Op, OpResult, Version, WorkerError,
};

pub trait Backend {
    /// Whether this backend can run anything, and why not. Cheap after the first call.
    fn status(&mut self) -> BackendStatus;
    /// Begin a slow start-up (a helper process's imports) without waiting for it, so it
    /// runs beside the other backend's; `status` or the first request waits for it.
    fn prestart(&mut self) {}
    /// The device this backend runs on, with ceilings measured once, if it has one.
    fn device(&mut self) -> Option<DeviceInfo> {
        None
    }
    /// Run `Compile`, `Verify` or `Time` (never `Hello`/`Shutdown`, which the loop
    /// answers). `progress` reports the current stage ("verifying case 2/3").
    fn run(&mut self, op: &Op, progress: &mut dyn FnMut(&str)) -> Result<OpResult, WorkerError>;
    /// After a fault the context is unusable: the loop replies, then exits so the pool
    /// starts a fresh worker.
    fn poisoned(&self) -> bool {
        false
    }
    /// CUDA only: `v` compiled for this backend's device, every case's instance, as PTX
    /// for the Python helper to launch beside a PyTorch reference (issue #17).
    fn cuda_binary(
        &mut self,
        v: &Version,
        _progress: &mut dyn FnMut(&str),
    ) -> Result<CudaBinary, WorkerError> {
        Err(WorkerError {
            kind: ErrorKind::NoBackend,
            message: format!("`{}`: this backend does not compile CUDA", v.label),
            log: None,
        })
    }
}
