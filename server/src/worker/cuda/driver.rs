//! The CUDA driver API as this backend uses it: a probe for `libcuda.so.1`, then cudarc's
//! raw bindings (`cudarc::driver::sys`, loaded at run time) behind small checked wrappers
//! and RAII handles.
//!
//! Why raw `sys` and not cudarc's safe API: kernels take heterogeneous arguments built
//! from a plan at run time (raw bytes per `ScalarTy`), memory needs guard regions and
//! offsets, and after a sticky fault every call fails, so we want to see each `CUresult`
//! ourselves. cudarc still saves us ~25 hand-written declarations and the library search.
//!
//! Invariant: nothing in `sys` is called before [`probe_libcuda`] succeeded, because
//! cudarc's lazy loader panics when the library is missing.

use std::ffi::{c_void, CStr, CString};
use std::ptr;

use cudarc::driver::sys::{
    self, CUcontext, CUdevice, CUdevice_attribute, CUdeviceptr, CUevent, CUfunction,
    CUfunction_attribute, CUmodule, CUresult, CUstream,
};

/// A failed driver call: which call, and the driver's code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CuError {
    pub call: &'static str,
    pub code: CUresult,
}

impl CuError {
    /// `CUDA_ERROR_ILLEGAL_ADDRESS`.
    pub fn name(&self) -> String {
        format!("{:?}", self.code)
    }

    /// After one of these the context is unusable (every later call fails): the worker
    /// must exit and be replaced.
    pub fn is_sticky(&self) -> bool {
        use CUresult::*;
        matches!(
            self.code,
            CUDA_ERROR_ILLEGAL_ADDRESS
                | CUDA_ERROR_MISALIGNED_ADDRESS
                | CUDA_ERROR_LAUNCH_FAILED
                | CUDA_ERROR_ASSERT
                | CUDA_ERROR_HARDWARE_STACK_ERROR
                | CUDA_ERROR_ILLEGAL_INSTRUCTION
                | CUDA_ERROR_INVALID_ADDRESS_SPACE
                | CUDA_ERROR_INVALID_PC
                | CUDA_ERROR_LAUNCH_TIMEOUT
                | CUDA_ERROR_ECC_UNCORRECTABLE
                | CUDA_ERROR_CONTEXT_IS_DESTROYED
        )
    }

    /// What the author should read: "illegal memory access".
    pub fn describe(&self) -> &'static str {
        use CUresult::*;
        match self.code {
            CUDA_ERROR_ILLEGAL_ADDRESS => "illegal memory access",
            CUDA_ERROR_MISALIGNED_ADDRESS => "misaligned memory access",
            CUDA_ERROR_LAUNCH_FAILED => "kernel exception (trap or unspecified launch failure)",
            CUDA_ERROR_ASSERT => "device-side assert failed",
            CUDA_ERROR_HARDWARE_STACK_ERROR => {
                "hardware stack error (stack overflow or deep recursion)"
            }
            CUDA_ERROR_ILLEGAL_INSTRUCTION => "illegal instruction",
            CUDA_ERROR_INVALID_ADDRESS_SPACE => "memory access in the wrong address space",
            CUDA_ERROR_INVALID_PC => "invalid program counter",
            CUDA_ERROR_LAUNCH_TIMEOUT => "kernel ran past the display watchdog",
            CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES => "too many resources requested for launch",
            CUDA_ERROR_INVALID_VALUE => "invalid launch argument",
            CUDA_ERROR_OUT_OF_MEMORY => "out of device memory",
            CUDA_ERROR_UNSUPPORTED_PTX_VERSION => {
                "PTX is newer than this driver supports (NVRTC is newer than the driver)"
            }
            CUDA_ERROR_NOT_FOUND => "symbol not found",
            _ => "CUDA error",
        }
    }
}

impl std::fmt::Display for CuError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} failed: {} ({})",
            self.call,
            self.describe(),
            self.name()
        )
    }
}

pub type CuResult<T> = Result<T, CuError>;

fn check(call: &'static str, code: CUresult) -> CuResult<()> {
    if code == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CuError { call, code })
    }
}

/// Whether the driver library can be opened. Loads and drops it; cudarc then opens its
/// own handle (the loader keeps one copy).
pub fn probe_libcuda() -> Result<(), String> {
    for name in ["libcuda.so.1", "libcuda.so"] {
        // SAFETY: opening libcuda runs only its own initialisers; no CUDA call is made.
        if unsafe { libloading::Library::new(name) }.is_ok() {
            return Ok(());
        }
    }
    Err("no CUDA driver: libcuda.so.1 not found; this worker cannot run CUDA kernels".into())
}

/// The driver, initialised, with device 0's primary context current on this thread.
pub struct Context {
    pub device: CUdevice,
    ctx: CUcontext,
    pub stream: CUstream,
    pub driver_version: i32,
}

impl Context {
    /// `cuInit`, device 0, primary context, one stream. Call only after [`probe_libcuda`].
    pub fn open() -> CuResult<Context> {
        // SAFETY: plain driver calls with valid out-pointers; libcuda is present.
        unsafe {
            check("cuInit", sys::cuInit(0))?;
            let mut version = 0;
            check("cuDriverGetVersion", sys::cuDriverGetVersion(&mut version))?;
            let mut count = 0;
            check("cuDeviceGetCount", sys::cuDeviceGetCount(&mut count))?;
            if count < 1 {
                return Err(CuError {
                    call: "cuDeviceGetCount",
                    code: CUresult::CUDA_ERROR_NO_DEVICE,
                });
            }
            let mut device = 0;
            check("cuDeviceGet", sys::cuDeviceGet(&mut device, 0))?;
            let mut ctx = ptr::null_mut();
            check(
                "cuDevicePrimaryCtxRetain",
                sys::cuDevicePrimaryCtxRetain(&mut ctx, device),
            )?;
            check("cuCtxSetCurrent", sys::cuCtxSetCurrent(ctx))?;
            let mut stream = ptr::null_mut();
            // A blocking stream (flags 0): it waits for legacy-stream work such as the
            // tail of a pageable cuMemcpyHtoD, and synchronous copies wait for it.
            check("cuStreamCreate", sys::cuStreamCreate(&mut stream, 0))?;
            Ok(Context {
                device,
                ctx,
                stream,
                driver_version: version,
            })
        }
    }

    /// Makes the context current on the calling thread (the loop may call from another
    /// thread than the one that opened it).
    pub fn make_current(&self) -> CuResult<()> {
        // SAFETY: ctx is a retained primary context.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.ctx) })
    }

    pub fn attr(&self, a: CUdevice_attribute) -> CuResult<i32> {
        let mut v = 0;
        // SAFETY: valid out-pointer and device.
        check("cuDeviceGetAttribute", unsafe {
            sys::cuDeviceGetAttribute(&mut v, a, self.device)
        })?;
        Ok(v)
    }

    pub fn name(&self) -> CuResult<String> {
        let mut buf = [0 as std::ffi::c_char; 256];
        // SAFETY: the buffer's length is passed; the driver NUL-terminates.
        check("cuDeviceGetName", unsafe {
            sys::cuDeviceGetName(buf.as_mut_ptr(), 255, self.device)
        })?;
        // SAFETY: NUL-terminated within the buffer (last byte is still 0).
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// `0000:18:00.0`, as NVML names the board.
    pub fn pci_bus_id(&self) -> CuResult<String> {
        let mut buf = [0 as std::ffi::c_char; 64];
        // SAFETY: the buffer's length is passed; the driver NUL-terminates.
        check("cuDeviceGetPCIBusId", unsafe {
            sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), 63, self.device)
        })?;
        // SAFETY: NUL-terminated within the buffer.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    pub fn total_mem(&self) -> CuResult<usize> {
        let mut b = 0;
        // SAFETY: valid out-pointer.
        check("cuDeviceTotalMem", unsafe {
            sys::cuDeviceTotalMem_v2(&mut b, self.device)
        })?;
        Ok(b)
    }

    pub fn free_mem(&self) -> CuResult<usize> {
        let (mut free, mut total) = (0, 0);
        // SAFETY: valid out-pointers.
        check("cuMemGetInfo", unsafe {
            sys::cuMemGetInfo_v2(&mut free, &mut total)
        })?;
        Ok(free)
    }

    pub fn sync(&self) -> CuResult<()> {
        // SAFETY: our stream.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(self.stream)
        })
    }
}

// SAFETY: driver handles are process-wide and the driver API is thread-safe; the backend
// calls `make_current` on whatever thread it runs before using them, so the worker loop
// may move the backend to another thread.
unsafe impl Send for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: handles we created; errors (e.g. after a sticky fault) are ignored
        // because the process is about to go on without them anyway.
        unsafe {
            let _ = sys::cuStreamDestroy_v2(self.stream);
            let _ = sys::cuDevicePrimaryCtxRelease_v2(self.device);
        }
    }
}

/// Device memory, freed on drop.
pub struct DeviceBuffer {
    pub ptr: CUdeviceptr,
    pub bytes: usize,
}

impl DeviceBuffer {
    pub fn alloc(bytes: usize) -> CuResult<DeviceBuffer> {
        let mut p = 0;
        // SAFETY: valid out-pointer; a zero-byte request is bumped to 1 (the driver
        // rejects 0).
        check("cuMemAlloc", unsafe {
            sys::cuMemAlloc_v2(&mut p, bytes.max(1))
        })?;
        Ok(DeviceBuffer { ptr: p, bytes })
    }

    /// Copies `data` to `self.ptr + offset` (synchronous).
    pub fn upload(&self, offset: usize, data: &[u8]) -> CuResult<()> {
        assert!(
            offset + data.len() <= self.bytes,
            "upload past the allocation"
        );
        // SAFETY: the range lies inside this allocation (checked above).
        check("cuMemcpyHtoD", unsafe {
            sys::cuMemcpyHtoD_v2(self.ptr + offset as u64, data.as_ptr().cast(), data.len())
        })
    }

    /// Copies the whole allocation back (synchronous; waits for prior work in the
    /// legacy stream semantics, so callers sync their stream first).
    #[cfg(test)]
    pub fn download(&self) -> CuResult<Vec<u8>> {
        let mut out = vec![0u8; self.bytes];
        // SAFETY: `out` has exactly `bytes` bytes.
        check("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.ptr, self.bytes)
        })?;
        Ok(out)
    }

    /// Copies `len` bytes from `self.ptr + offset` back (synchronous, as `download`).
    pub fn download_range(&self, offset: usize, len: usize) -> CuResult<Vec<u8>> {
        assert!(offset + len <= self.bytes, "download past the allocation");
        let mut out = vec![0u8; len];
        // SAFETY: the range lies inside this allocation (checked above); `out` has `len`
        // bytes.
        check("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.ptr + offset as u64, len)
        })?;
        Ok(out)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc; after a sticky fault this fails harmlessly.
        let _ = unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

/// A loaded module, unloaded on drop.
pub struct Module {
    raw: CUmodule,
}

impl Module {
    pub fn load_ptx(ptx: &str) -> CuResult<Module> {
        let image = CString::new(ptx).map_err(|_| CuError {
            call: "cuModuleLoadData",
            code: CUresult::CUDA_ERROR_INVALID_IMAGE,
        })?;
        let mut m = ptr::null_mut();
        // SAFETY: NUL-terminated PTX text, valid out-pointer.
        check("cuModuleLoadData", unsafe {
            sys::cuModuleLoadData(&mut m, image.as_ptr().cast())
        })?;
        Ok(Module { raw: m })
    }

    pub fn function(&self, name: &str) -> CuResult<CUfunction> {
        let c = CString::new(name).map_err(|_| CuError {
            call: "cuModuleGetFunction",
            code: CUresult::CUDA_ERROR_INVALID_VALUE,
        })?;
        let mut f = ptr::null_mut();
        // SAFETY: valid module and NUL-terminated name.
        check("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(&mut f, self.raw, c.as_ptr())
        })?;
        Ok(f)
    }
}

// SAFETY: see `Context`: a module handle is valid on any thread of the process.
unsafe impl Send for Module {}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: loaded by cuModuleLoadData.
        let _ = unsafe { sys::cuModuleUnload(self.raw) };
    }
}

pub fn func_attr(f: CUfunction, a: CUfunction_attribute) -> CuResult<i32> {
    let mut v = 0;
    // SAFETY: valid function handle and out-pointer.
    check("cuFuncGetAttribute", unsafe {
        sys::cuFuncGetAttribute(&mut v, a, f)
    })?;
    Ok(v)
}

pub fn set_max_dynamic_smem(f: CUfunction, bytes: u32) -> CuResult<()> {
    // SAFETY: valid function handle.
    check("cuFuncSetAttribute", unsafe {
        sys::cuFuncSetAttribute(
            f,
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
    })
}

/// Launches `f` on `stream`. `args` holds each kernel parameter's bytes, in order.
pub fn launch(
    f: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    smem: u32,
    stream: CUstream,
    args: &mut [Vec<u8>],
) -> CuResult<()> {
    let mut params: Vec<*mut c_void> = args.iter_mut().map(|a| a.as_mut_ptr().cast()).collect();
    // SAFETY: each pointer points at a live buffer holding one parameter's value, of the
    // size the kernel's signature expects (built from the plan's types); the driver copies
    // them before returning.
    check("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(
            f,
            grid[0],
            grid[1],
            grid[2],
            block[0],
            block[1],
            block[2],
            smem,
            stream,
            params.as_mut_ptr(),
            ptr::null_mut(),
        )
    })
}

pub fn memset_async(ptr: CUdeviceptr, value: u8, bytes: usize, stream: CUstream) -> CuResult<()> {
    // SAFETY: the caller passes a range inside one allocation.
    check("cuMemsetD8Async", unsafe {
        sys::cuMemsetD8Async(ptr, value, bytes, stream)
    })
}

pub fn copy_dtod_async(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CuResult<()> {
    // SAFETY: the caller passes ranges inside live allocations.
    check("cuMemcpyDtoDAsync", unsafe {
        sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, stream)
    })
}

/// A timing event, destroyed on drop.
pub struct Event {
    raw: CUevent,
}

impl Event {
    pub fn new() -> CuResult<Event> {
        let mut e = ptr::null_mut();
        // SAFETY: valid out-pointer; flags 0 = CU_EVENT_DEFAULT (timing enabled).
        check("cuEventCreate", unsafe { sys::cuEventCreate(&mut e, 0) })?;
        Ok(Event { raw: e })
    }

    pub fn record(&self, stream: CUstream) -> CuResult<()> {
        // SAFETY: valid event and stream.
        check("cuEventRecord", unsafe {
            sys::cuEventRecord(self.raw, stream)
        })
    }

    /// Milliseconds from `start` to `self`; both must have completed.
    pub fn since(&self, start: &Event) -> CuResult<f64> {
        let mut ms = 0f32;
        // SAFETY: valid events, valid out-pointer.
        check("cuEventElapsedTime", unsafe {
            sys::cuEventElapsedTime(&mut ms, start.raw, self.raw)
        })?;
        Ok(f64::from(ms))
    }
}

// SAFETY: see `Context`.
unsafe impl Send for Event {}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by cuEventCreate.
        let _ = unsafe { sys::cuEventDestroy_v2(self.raw) };
    }
}
