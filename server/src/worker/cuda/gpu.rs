//! One opened GPU: the context, the device description and ceilings, the NVRTC toolchain,
//! the cache of loaded modules, guarded buffers and checked launches. `verify` and `time`
//! are built on these.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::{
    CUdevice_attribute as DA, CUfunction, CUfunction_attribute as FA, CUstream,
};
use sha2::{Digest, Sha256};

use super::devgen::{Collected, DevHelpers, Slot};
use super::driver::{self, Context, CuError, CuResult, DeviceBuffer, Event, Module};
use super::fill::{
    elem_size, guard_bytes, guard_keys, scalar_bytes, Fill, GuardDamage, OutOfBounds,
};
use super::limits::{check_launch, KernelAttrs, LaunchPlan};
use super::refcache::RefCache;
use crate::spec::{Arg, Case, DType, Launch, Role};
use crate::toolchain::{self, CompileRequest, Toolchain, ToolchainSettings};
use crate::worker::protocol::{Ceilings, DeviceInfo, ErrorKind, Version, WorkerError};

/// Loaded modules kept at most; past it the cache starts over (an optimize session makes
/// many candidates, each a module of a few hundred KiB of device memory).
const MODULE_CACHE_MAX: usize = 256;

pub fn err(kind: ErrorKind, message: impl Into<String>) -> WorkerError {
    WorkerError {
        kind,
        message: message.into(),
        log: None,
    }
}

/// A kernel ready to launch. Holds its module alive.
pub struct Kernel {
    _module: Module,
    pub func: CUfunction,
    /// The source-level name (`reduce<256>`), for messages.
    pub display: String,
    pub attrs: KernelAttrs,
    pub log: String,
    pub compile_ms: f64,
    /// The PTX the module was loaded from and the kernel's symbol in it.
    pub ptx: String,
    pub lowered: String,
}

// SAFETY: a CUfunction is a process-wide driver handle; the driver API is thread-safe and
// the backend makes its context current on the calling thread before every use.
unsafe impl Send for Kernel {}
// SAFETY: as above; the handle is only passed by value to driver calls.
unsafe impl Sync for Kernel {}

pub struct Gpu {
    pub info: DeviceInfo,
    pub toolchain: Toolchain,
    modules: HashMap<[u8; 32], Arc<Kernel>>,
    /// A sticky fault happened: every later call would fail.
    pub poisoned: bool,
    flush: Option<DeviceBuffer>,
    ceilings_tried: bool,
    /// `helpers.cu`, compiled on first use.
    helpers: Option<Arc<DevHelpers>>,
    /// Reference outputs reused across the candidates of a step.
    pub ref_cache: RefCache,
    /// Last field on purpose: fields drop in order, and modules and buffers must be
    /// freed while the context still exists (compute-sanitizer flagged
    /// `cuModuleUnload` after the context was released).
    pub ctx: Context,
}

impl Gpu {
    pub fn open() -> CuResult<Gpu> {
        let ctx = Context::open()?;
        let i = |a| ctx.attr(a).map(|v| v.max(0) as u32);
        let major = i(DA::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = i(DA::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let info = DeviceInfo {
            name: ctx.name()?,
            arch: format!("sm_{major}{minor}"),
            sms: i(DA::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            warp_size: i(DA::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
            max_threads_per_block: i(DA::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            max_block: [
                i(DA::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                i(DA::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                i(DA::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
            ],
            max_grid: [
                i(DA::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                i(DA::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                i(DA::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ],
            smem_per_block: i(DA::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?.into(),
            smem_per_block_optin: i(DA::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
                .into(),
            smem_per_sm: i(DA::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?.into(),
            regs_per_block: i(DA::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK)?,
            l2_bytes: i(DA::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?.into(),
            mem_bytes: ctx.total_mem()? as u64,
            ceilings: None,
        };
        let toolchain = toolchain::locate(&ToolchainSettings {
            arch: info.arch.clone(),
            // The worker JIT-compiles with NVRTC; nvcc is the editor's checker.
            use_nvcc: false,
            ..ToolchainSettings::default()
        });
        Ok(Gpu {
            ctx,
            info,
            toolchain,
            modules: HashMap::new(),
            poisoned: false,
            flush: None,
            ceilings_tried: false,
            helpers: None,
            ref_cache: RefCache::default(),
        })
    }

    /// Driver version as `13.0`.
    pub fn driver_version(&self) -> String {
        let v = self.ctx.driver_version;
        format!("{}.{}", v / 1000, (v % 1000) / 10)
    }

    /// Turns a driver error into the worker error the author sees, marking the context
    /// dead when the error is sticky.
    pub fn fault(&mut self, e: CuError, what: &str) -> WorkerError {
        if e.is_sticky() {
            self.poisoned = true;
        }
        let kind = match e.code {
            _ if e.is_sticky() => ErrorKind::Fault,
            cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY
            | cudarc::driver::sys::CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES => {
                ErrorKind::LimitExceeded
            }
            _ => ErrorKind::Internal,
        };
        err(kind, format!("{what}: {e}"))
    }

    /// The verification helpers, compiled and loaded on first use.
    pub fn helpers(&mut self) -> Result<Arc<DevHelpers>, WorkerError> {
        if let Some(h) = &self.helpers {
            return Ok(h.clone());
        }
        let nvrtc = match &self.toolchain.nvrtc {
            Ok(n) => n.clone(),
            Err(e) => return Err(err(ErrorKind::NoBackend, e.to_string())),
        };
        let h = Arc::new(
            DevHelpers::load(&nvrtc, &self.info.arch, self.info.sms)
                .map_err(|m| err(ErrorKind::Internal, m))?,
        );
        self.helpers = Some(h.clone());
        Ok(h)
    }

    /// Bytes the reference cache may hold: a quarter of the free memory, at most 4 GiB.
    pub fn ref_cache_budget(&self) -> u64 {
        let free = self.ctx.free_mem().unwrap_or(0) as u64;
        (free / 4).min(4 << 30)
    }

    // ---- compiling --------------------------------------------------------------------

    /// Compiles (or finds in the cache) the kernel of `v` instantiated for case `case`.
    /// Returns the kernel and whether it came from the cache.
    pub fn kernel(&mut self, v: &Version, case: usize) -> Result<(Arc<Kernel>, bool), WorkerError> {
        let c = v.plan.cases.get(case).ok_or_else(|| {
            err(
                ErrorKind::BadRequest,
                format!("`{}` has no case {case}", v.label),
            )
        })?;
        let name_expr = instance_name(&v.plan.kernel, c);
        let nvrtc = match &self.toolchain.nvrtc {
            Ok(n) => n.clone(),
            Err(e) => return Err(err(ErrorKind::NoBackend, e.to_string())),
        };
        // The editor's compile options (toolchain::project_options: the prelude of nvcc's
        // implicit includes, C++17), so a kernel compiles here as it does in the editor.
        let mut options = toolchain::project_options(
            &self.info.arch,
            &self.toolchain.include_dirs,
            &v.plan.defines,
            None,
        )
        .map_err(|e| err(ErrorKind::BadRequest, format!("`{}`: {e}", v.label)))?;
        options.extend(v.options.iter().cloned());

        let mut h = Sha256::new();
        for part in [v.source.as_str(), &self.info.arch, &name_expr] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        for o in &options {
            h.update((o.len() as u64).to_le_bytes());
            h.update(o.as_bytes());
        }
        let key: [u8; 32] = h.finalize().into();
        if let Some(k) = self.modules.get(&key) {
            return Ok((k.clone(), true));
        }

        let t0 = Instant::now();
        let request = |exprs: Vec<String>| CompileRequest {
            source: v.source.clone(),
            program_name: format!("{}.cu", v.plan.kernel),
            options: options.clone(),
            name_expressions: exprs,
            headers: Vec::new(),
        };
        let include_dirs = self.toolchain.include_dirs.clone();
        let compile = |r: &CompileRequest| toolchain::compat::compile(&nvrtc, r, &include_dirs).0;
        let mut out = compile(&request(vec![name_expr.clone()]));
        if !out.success && c.template_args.is_empty() {
            // A plain kernel needs no name expression to exist (extern "C" is its own
            // symbol); if the expression itself is what NVRTC rejects (a kernel inside a
            // namespace), compiling without it tells the two failures apart.
            let plain = compile(&request(Vec::new()));
            if plain.success {
                out = plain;
            }
        }
        let compile_ms = t0.elapsed().as_secs_f64() * 1e3;
        let ptx = match out.ptx {
            Some(p) if out.success => p,
            _ => {
                let first = out
                    .messages
                    .iter()
                    .find(|m| m.severity == toolchain::MessageSeverity::Error)
                    .map(|m| format!(" (line {}: {})", m.line + 1, m.message))
                    .unwrap_or_default();
                return Err(WorkerError {
                    kind: ErrorKind::CompileFailed,
                    message: format!("`{}` ({name_expr}) did not compile{first}", v.label),
                    log: Some(out.log),
                });
            }
        };
        // extern "C" kernels lower to themselves; NVRTC may still list them.
        let lowered = out
            .lowered_names
            .iter()
            .find(|(e, _)| *e == name_expr)
            .map(|(_, l)| l.clone())
            .unwrap_or_else(|| name_expr.clone());
        let module = Module::load_ptx(&ptx).map_err(|e| {
            let mut w = self.fault(e, &format!("loading the PTX of `{}`", v.label));
            if e.code == cudarc::driver::sys::CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION {
                let (ma, mi) = nvrtc.version();
                w.message.push_str(&format!(
                    "; NVRTC {ma}.{mi} at {} is newer than driver {}: point kernel-lsp.nvrtcPath \
                     at an NVRTC no newer than the driver",
                    nvrtc.path().display(),
                    self.driver_version()
                ));
            }
            w.kind = if w.kind == ErrorKind::Fault {
                ErrorKind::Fault
            } else {
                ErrorKind::CompileFailed
            };
            w.log = Some(out.log.clone());
            w
        })?;
        let func = module.function(&lowered).map_err(|e| WorkerError {
            kind: ErrorKind::CompileFailed,
            message: format!(
                "`{}`: kernel `{name_expr}` (symbol `{lowered}`) is not in the compiled module ({})",
                v.label,
                e.name()
            ),
            log: Some(out.log.clone()),
        })?;
        let attr = |a| driver::func_attr(func, a).map(|x| x.max(0) as u32);
        let attrs = (|| -> CuResult<KernelAttrs> {
            Ok(KernelAttrs {
                registers: attr(FA::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
                static_smem: attr(FA::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?.into(),
                max_threads: attr(FA::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
                local_bytes: attr(FA::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
            })
        })()
        .map_err(|e| self.fault(e, "reading kernel attributes"))?;
        let k = Arc::new(Kernel {
            _module: module,
            func,
            display: name_expr,
            attrs,
            log: out.log,
            compile_ms,
            ptx,
            lowered,
        });
        if self.modules.len() >= MODULE_CACHE_MAX {
            self.modules.clear();
        }
        self.modules.insert(key, k.clone());
        Ok((k, false))
    }

    // ---- launching --------------------------------------------------------------------

    /// Checks case `c`'s launch of `k` against the device, opting in to large dynamic
    /// shared memory when needed. `LimitExceeded` names the limit.
    pub fn prepare_launch(
        &mut self,
        label: &str,
        k: &Kernel,
        c: &Case,
    ) -> Result<LaunchPlan, WorkerError> {
        let Launch::Cuda { grid, block, smem } = &c.launch else {
            return Err(err(
                ErrorKind::BadRequest,
                format!("`{label}`: a CUDA version needs a CUDA launch (grid, block)"),
            ));
        };
        let plan = check_launch(&self.info, &k.display, *grid, *block, *smem, &k.attrs)
            .map_err(|m| err(ErrorKind::LimitExceeded, m))?;
        if plan.needs_smem_opt_in {
            driver::set_max_dynamic_smem(k.func, plan.smem).map_err(|e| {
                let mut w = self.fault(
                    e,
                    &format!(
                        "`{}`: opting in to {} bytes of dynamic shared memory",
                        k.display, plan.smem
                    ),
                );
                if w.kind == ErrorKind::Internal {
                    w.kind = ErrorKind::LimitExceeded;
                }
                w
            })?;
        }
        Ok(plan)
    }

    /// Launches and waits. The error is the driver's, for the caller to word.
    pub fn launch_sync(&self, k: &Kernel, plan: &LaunchPlan, args: &mut [Vec<u8>]) -> CuResult<()> {
        driver::launch(
            k.func,
            plan.grid,
            plan.block,
            plan.smem,
            self.ctx.stream,
            args,
        )?;
        self.ctx.sync()
    }

    /// Fails with `LimitExceeded` when `bytes` more device memory would not fit.
    pub fn check_memory(&mut self, bytes: u64, what: &str) -> Result<(), WorkerError> {
        let free = self
            .ctx
            .free_mem()
            .map_err(|e| self.fault(e, "cuMemGetInfo"))? as u64;
        if bytes > free {
            return Err(err(
                ErrorKind::LimitExceeded,
                format!(
                    "{what} needs {} of device memory but {} has {} free; use smaller sizes",
                    human_bytes(bytes as f64),
                    self.info.name,
                    human_bytes(free as f64)
                ),
            ));
        }
        Ok(())
    }

    // ---- L2 flush and ceilings ----------------------------------------------------------

    /// Queues a write of twice the L2 size, evicting whatever the last launch left there.
    pub fn flush_l2(&mut self, round: u32) -> CuResult<()> {
        if self.flush.is_none() {
            let bytes = (2 * self.info.l2_bytes).max(8 << 20) as usize;
            self.flush = Some(DeviceBuffer::alloc(bytes)?);
        }
        let f = self.flush.as_ref().expect("allocated just above");
        driver::memset_async(f.ptr, (round % 251) as u8, f.bytes, self.ctx.stream)
    }

    /// Measures the copy and FMA ceilings once; later calls return the first result.
    pub fn ceilings(&mut self) -> Option<Ceilings> {
        if !self.ceilings_tried && !self.poisoned {
            self.ceilings_tried = true;
            let copy = self.measure_copy_gbps();
            let fma = self.measure_fma_tflops();
            match (copy, fma) {
                (Ok(copy_gbps), Ok(fma_tflops)) => {
                    self.info.ceilings = Some(Ceilings {
                        copy_gbps,
                        fma_tflops,
                    })
                }
                (c, f) => tracing::warn!(
                    copy = ?c.err(),
                    fma = ?f.err(),
                    "could not measure the device's ceilings; roofline fractions are left out"
                ),
            }
        }
        self.info.ceilings.clone()
    }

    fn measure_copy_gbps(&mut self) -> Result<f64, String> {
        let free = self.ctx.free_mem().map_err(|e| e.to_string())?;
        let bytes = (free / 8).clamp(1 << 20, 512 << 20) & !0xfff;
        let a = DeviceBuffer::alloc(bytes).map_err(|e| e.to_string())?;
        let b = DeviceBuffer::alloc(bytes).map_err(|e| e.to_string())?;
        let s = self.ctx.stream;
        let run = || -> CuResult<Vec<f64>> {
            driver::memset_async(a.ptr, 1, bytes, s)?;
            for _ in 0..2 {
                driver::copy_dtod_async(b.ptr, a.ptr, bytes, s)?;
            }
            let mut times = Vec::new();
            for _ in 0..10 {
                let (e0, e1) = (Event::new()?, Event::new()?);
                e0.record(s)?;
                driver::copy_dtod_async(b.ptr, a.ptr, bytes, s)?;
                e1.record(s)?;
                self.ctx.sync()?;
                times.push(e1.since(&e0)?);
            }
            Ok(times)
        };
        let times = run().map_err(|e| e.to_string())?;
        let median = super::limits::summarize(&times).median;
        if median.is_finite() && median > 0.0 {
            Ok(2.0 * bytes as f64 / (median * 1e-3) / 1e9)
        } else {
            Err("copy timing gave no usable number".into())
        }
    }

    fn measure_fma_tflops(&mut self) -> Result<f64, String> {
        let v = fma_version(&self.info);
        let (k, _) = self.kernel(&v, 0).map_err(|e| e.message)?;
        let grid = self.info.sms.max(1) * 8;
        let block = 256u32;
        let iters = 512i32;
        let out =
            DeviceBuffer::alloc(grid as usize * block as usize * 4).map_err(|e| e.to_string())?;
        let mut args = vec![
            out.ptr.to_le_bytes().to_vec(),
            0.999_9f32.to_le_bytes().to_vec(),
            1e-4f32.to_le_bytes().to_vec(),
            iters.to_le_bytes().to_vec(),
        ];
        let plan = LaunchPlan {
            grid: [grid, 1, 1],
            block: [block, 1, 1],
            smem: 0,
            needs_smem_opt_in: false,
        };
        let s = self.ctx.stream;
        let run = |args: &mut [Vec<u8>]| -> CuResult<f64> {
            self.launch_sync(&k, &plan, args)?;
            let mut best = f64::INFINITY;
            for _ in 0..5 {
                let (e0, e1) = (Event::new()?, Event::new()?);
                e0.record(s)?;
                driver::launch(k.func, plan.grid, plan.block, 0, s, args)?;
                e1.record(s)?;
                self.ctx.sync()?;
                best = best.min(e1.since(&e0)?);
            }
            Ok(best)
        };
        let ms = match run(&mut args) {
            Ok(ms) => ms,
            Err(e) => {
                if e.is_sticky() {
                    self.poisoned = true;
                }
                return Err(e.to_string());
            }
        };
        let flops = f64::from(grid) * f64::from(block) * f64::from(iters) * 64.0 * 8.0 * 2.0;
        if ms.is_finite() && ms > 0.0 {
            Ok(flops / (ms * 1e-3) / 1e12)
        } else {
            Err("FMA timing gave no usable number".into())
        }
    }
}

/// `reduce<256, 4>` for a template kernel's case, else the kernel's own name (which NVRTC
/// lowers to the mangled symbol, or to itself for `extern "C"`).
pub fn instance_name(kernel: &str, c: &Case) -> String {
    if c.template_args.is_empty() {
        return kernel.to_string();
    }
    let args: Vec<String> = c
        .template_args
        .iter()
        .map(|a| match a {
            Arg::Constexpr { value, .. } | Arg::Scalar { value, .. } => value.to_string(),
            Arg::Buffer { name, .. } | Arg::None { name } => name.clone(),
        })
        .collect();
    format!("{kernel}<{}>", args.join(", "))
}

/// The FMA-rate probe: eight independent FMA chains per thread, 64 steps unrolled per
/// loop trip; `b` and `c` are parameters so nothing folds at compile time, and the final
/// store is conditional so the chains stay live without writing memory.
const FMA_SOURCE: &str = r#"
extern "C" __global__ void klsp_fma_ceiling(float* out, float b, float c, int iters) {
    float a0 = threadIdx.x * 1e-3f, a1 = a0 + 1.0f, a2 = a0 + 2.0f, a3 = a0 + 3.0f;
    float a4 = a0 + 4.0f, a5 = a0 + 5.0f, a6 = a0 + 6.0f, a7 = a0 + 7.0f;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int j = 0; j < 64; ++j) {
            a0 = fmaf(a0, b, c); a1 = fmaf(a1, b, c); a2 = fmaf(a2, b, c); a3 = fmaf(a3, b, c);
            a4 = fmaf(a4, b, c); a5 = fmaf(a5, b, c); a6 = fmaf(a6, b, c); a7 = fmaf(a7, b, c);
        }
    }
    float s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
    if (s == -12345.0f) out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"#;

fn fma_version(info: &DeviceInfo) -> Version {
    use crate::spec::BenchPlan;
    Version {
        torch: None,
        label: "fma-ceiling".into(),
        lang: crate::syntax::Lang::Cuda,
        source: FMA_SOURCE.into(),
        plan: BenchPlan {
            kernel: "klsp_fma_ceiling".into(),
            lang: crate::syntax::Lang::Cuda,
            cases: vec![Case {
                sizes: vec![],
                args: vec![],
                template_args: vec![],
                launch: Launch::Cuda {
                    grid: [u64::from(info.sms.max(1)) * 8, 1, 1],
                    block: [256, 1, 1],
                    smem: 0,
                },
                bytes: 0.0,
                flops: Some(0.0),
            }],
            tunables: vec![],
            defines: vec![],
            atol: None,
            rtol: None,
            reference: None,
            torch_reference: None,
            trials: 1,
        },
        options: vec![],
        cuda: None,
    }
}

/// `1.5 GiB`.
fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.1} {}", UNITS[i])
}

// ---- guarded buffers ----------------------------------------------------------------

/// Whether buffers get guard regions. The compute-sanitizer child worker sets
/// `KERNEL_LSP_EXACT_BUFFERS=1`: there every buffer is allocated at its exact size, so
/// that memcheck sees any access past its end (a guard would be "inside" the allocation).
pub fn exact_buffers() -> bool {
    std::env::var_os("KERNEL_LSP_EXACT_BUFFERS").is_some_and(|v| v == "1")
}

/// One buffer argument on the device: `[guard | data | guard]`, the kernel seeing `data`.
/// Guards hold bytes from their own streams (`fill::guard_keys`), different for every
/// buffer, case and trial.
pub struct Guarded {
    pub name: String,
    pub dtype: DType,
    pub role: Role,
    pub shape: Vec<u64>,
    pub elems: usize,
    pub guard: usize,
    /// How `prepare` fills the data: the spec's distribution, or poison for `out`.
    pub fill: Fill,
    pub mem: DeviceBuffer,
}

/// The two guard scans of one buffer, queued by [`Guarded::check_guards`].
pub struct GuardSlots {
    front: Option<Slot>,
    back: Option<Slot>,
}

impl Guarded {
    pub fn data_ptr(&self) -> u64 {
        self.mem.ptr + self.guard as u64
    }

    pub fn data_bytes(&self) -> usize {
        self.elems * elem_size(self.dtype)
    }

    /// Queues the fill of the data (inputs from `key`, or poison) and of both guards.
    pub fn prepare(&self, h: &DevHelpers, stream: CUstream, key: u64) -> CuResult<()> {
        h.fill(
            stream,
            self.data_ptr(),
            self.elems as u64,
            self.dtype,
            &self.fill,
            key,
        )?;
        if self.guard > 0 {
            let (front, back) = guard_keys(key);
            h.guard_fill(stream, self.mem.ptr, self.guard as u64, front)?;
            let end = self.data_ptr() + self.data_bytes() as u64;
            h.guard_fill(stream, end, self.guard as u64, back)?;
        }
        Ok(())
    }

    /// Queues the scans of both guards against the bytes `prepare(key)` wrote.
    pub fn check_guards(&self, h: &DevHelpers, stream: CUstream, key: u64) -> CuResult<GuardSlots> {
        if self.guard == 0 {
            return Ok(GuardSlots {
                front: None,
                back: None,
            });
        }
        let (front, back) = guard_keys(key);
        let end = self.data_ptr() + self.data_bytes() as u64;
        Ok(GuardSlots {
            front: Some(h.guard_check(stream, self.mem.ptr, self.guard as u64, front)?),
            back: Some(h.guard_check(stream, end, self.guard as u64, back)?),
        })
    }

    /// The out-of-bounds write the collected guard scans show, if any.
    pub fn out_of_bounds(&self, slots: &GuardSlots, got: &Collected) -> Option<OutOfBounds> {
        let damage = |s: Option<Slot>| {
            let st = got.get(s?);
            (st.bad > 0).then(|| GuardDamage {
                bytes: st.bad,
                first: st.first_bad.unwrap_or(0),
                end: st.end_bad,
            })
        };
        OutOfBounds::from_guards(damage(slots.front), damage(slots.back), self.guard as u64)
    }

    /// Queues the check that the data still holds what `prepare(key)` wrote (an `in`
    /// buffer after the launch).
    pub fn check_unchanged(&self, h: &DevHelpers, stream: CUstream, key: u64) -> CuResult<Slot> {
        h.matches(
            stream,
            self.data_ptr(),
            self.elems as u64,
            self.dtype,
            &self.fill,
            key,
        )
    }

    /// The bytes of element `i` (synchronous).
    pub fn element(&self, i: u64) -> CuResult<Vec<u8>> {
        let es = elem_size(self.dtype);
        self.mem.download_range(self.guard + i as usize * es, es)
    }

    /// The whole data region (synchronous): only where a failure must be described.
    pub fn download_data(&self) -> CuResult<Vec<u8>> {
        self.mem.download_range(self.guard, self.data_bytes())
    }
}

/// The buffer arguments of a case, in parameter order.
/// One buffer argument: name, dtype, role, shape, elements, distribution.
pub type BufferSpec<'a> = (&'a str, DType, Role, &'a [u64], u64, &'a crate::spec::Dist);

pub fn buffer_args(c: &Case) -> Vec<BufferSpec<'_>> {
    c.args
        .iter()
        .filter_map(|a| match a {
            Arg::Buffer {
                name,
                role,
                dtype,
                shape,
                elems,
                dist,
                ..
            } => Some((name.as_str(), *dtype, *role, shape.as_slice(), *elems, dist)),
            _ => None,
        })
        .collect()
}

/// Guard bytes on each side of a buffer of `dtype` (none in the sanitizer's child).
fn guard_len(dtype: DType) -> usize {
    if exact_buffers() {
        0
    } else {
        guard_bytes(dtype)
    }
}

/// Device bytes (with guards) that `c`'s buffers take.
pub fn case_device_bytes(c: &Case) -> u64 {
    buffer_args(c)
        .iter()
        .map(|(_, d, _, _, elems, _)| elems * d.size_bytes() + 2 * guard_len(*d) as u64)
        .sum()
}

/// Allocates every buffer argument of `c` with guards (contents undefined until
/// `prepare`).
pub fn alloc_buffers(c: &Case) -> CuResult<Vec<Guarded>> {
    buffer_args(c)
        .into_iter()
        .map(|(name, dtype, role, shape, elems, dist)| {
            let guard = guard_len(dtype);
            let elems = elems as usize;
            Ok(Guarded {
                name: name.to_string(),
                dtype,
                role,
                shape: shape.to_vec(),
                elems,
                guard,
                fill: Fill::of(role, dist),
                mem: DeviceBuffer::alloc(2 * guard + elems * elem_size(dtype))?,
            })
        })
        .collect()
}

/// The kernel's parameter bytes for case `c`: buffers as device pointers (in the order
/// of `bufs`, which follows the parameters), scalars by their C type.
pub fn kernel_args(label: &str, c: &Case, bufs: &[Guarded]) -> Result<Vec<Vec<u8>>, WorkerError> {
    let mut next = bufs.iter();
    c.args
        .iter()
        .map(|a| match a {
            Arg::Buffer { name, .. } => next
                .next()
                .map(|b| b.data_ptr().to_le_bytes().to_vec())
                .ok_or_else(|| err(ErrorKind::Internal, format!("`{label}`: no device buffer for `{name}`"))),
            Arg::Scalar { value, ty, .. } => Ok(scalar_bytes(*ty, *value)),
            Arg::Constexpr { name, .. } | Arg::None { name } => Err(err(
                ErrorKind::BadRequest,
                format!("`{label}`: `{name}` is a Triton constexpr or None; a CUDA kernel takes buffers and scalars"),
            )),
        })
        .collect()
}
