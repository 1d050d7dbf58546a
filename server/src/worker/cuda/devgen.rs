//! The device side of verification: `helpers.cu` compiled once per worker with NVRTC and
//! launched on the worker's stream. It fills buffers from the counter-based generator
//! (`fill::element_bits` is its CPU twin), writes and checks guard bytes, and compares
//! two buffers, so that inputs are never made on the host and outputs never cross PCIe
//! unless a failure needs a value (issue #10: "fast at real sizes").
//!
//! Scans report into `Stats` slots in one small device array: queue several with
//! [`DevHelpers::compare`], [`DevHelpers::matches`] and [`DevHelpers::guard_check`],
//! then [`DevHelpers::collect`] waits once and reads them all back.

use std::sync::atomic::{AtomicUsize, Ordering};

use cudarc::driver::sys::{CUdeviceptr, CUfunction, CUstream};

use super::driver::{self, CuResult, DeviceBuffer, Module};
use super::fill::{dtype_code, Fill};
use crate::spec::DType;
use crate::toolchain::{CompileRequest, Nvrtc};

/// The helpers' source (data, not code: see its header).
pub const HELPERS_SOURCE: &str = include_str!("helpers.cu");

/// NVRTC options for the helpers on `arch` (`sm_90`): no FMA contraction, so
/// `lo + (hi - lo) * u` rounds as the CPU twin does.
pub fn helper_options(arch: &str) -> Vec<String> {
    let digits = arch
        .trim_start_matches("sm_")
        .trim_start_matches("compute_");
    vec![
        format!("--gpu-architecture=compute_{digits}"),
        "--fmad=false".into(),
        "-std=c++17".into(),
    ]
}

/// Bytes of one `KlspStats` (eight u64).
const STATS_BYTES: usize = 64;
/// Scans that can be queued between two `collect`s.
pub const SLOTS: usize = 128;
const BLOCK: u32 = 256;

/// What one scan found (see `KlspStats` in `helpers.cu`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    /// Elements outside tolerance (`compare`), differing (`matches`), or changed guard
    /// bytes (`guard_check`).
    pub bad: u64,
    pub first_bad: Option<u64>,
    /// One past the last bad element.
    pub end_bad: u64,
    pub max_abs: f64,
    pub max_rel: f64,
    /// Elements bit for bit equal in both buffers (`matches`: equal to the fill).
    pub bit_equal: u64,
    /// Elements of the first buffer equal to its element 0 (constant when == n).
    pub a_same: u64,
    /// Elements of the second buffer equal to its element 0.
    pub b_same: u64,
}

impl Stats {
    fn from_bytes(b: &[u8]) -> Stats {
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        Stats {
            bad: w(0),
            first_bad: Some(w(1)).filter(|f| *f != u64::MAX),
            end_bad: w(2),
            max_abs: f64::from_bits(w(3)),
            max_rel: f64::from_bits(w(4)),
            bit_equal: w(5),
            a_same: w(6),
            b_same: w(7),
        }
    }

    /// The starting value of a slot: zeros, except `first_bad` (a minimum) at ~0.
    fn initial() -> [u8; STATS_BYTES] {
        let mut b = [0u8; STATS_BYTES];
        b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        b
    }
}

/// A queued scan's place in the stats array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot(usize);

pub struct DevHelpers {
    _module: Module,
    fill: CUfunction,
    guard_fill: CUfunction,
    compare: CUfunction,
    matches: CUfunction,
    guard_check: CUfunction,
    stats: DeviceBuffer,
    used: AtomicUsize,
    max_blocks: u32,
}

// SAFETY: CUfunction and the module are process-wide driver handles (see `gpu::Kernel`);
// the slot counter is atomic.
unsafe impl Send for DevHelpers {}
// SAFETY: as above.
unsafe impl Sync for DevHelpers {}

impl DevHelpers {
    /// Compiles and loads the helpers. `Err` is a message for the author (NVRTC's log
    /// included): without the helpers nothing can be verified.
    pub fn load(nvrtc: &Nvrtc, arch: &str, sms: u32) -> Result<DevHelpers, String> {
        let out = nvrtc.compile(&CompileRequest {
            source: HELPERS_SOURCE.to_string(),
            program_name: "kernel_lsp_helpers.cu".into(),
            options: helper_options(arch),
            name_expressions: Vec::new(),
            headers: Vec::new(),
        });
        let ptx = match out.ptx {
            Some(p) if out.success => p,
            _ => {
                return Err(format!(
                    "kernel-lsp's verification helpers did not compile with NVRTC for {arch}: {}",
                    out.log.trim()
                ))
            }
        };
        let module = Module::load_ptx(&ptx)
            .map_err(|e| format!("loading kernel-lsp's verification helpers: {e}"))?;
        let f = |name: &str| {
            module
                .function(name)
                .map_err(|e| format!("verification helper `{name}`: {e}"))
        };
        let stats = DeviceBuffer::alloc(SLOTS * STATS_BYTES)
            .map_err(|e| format!("allocating verification statistics: {e}"))?;
        let h = DevHelpers {
            fill: f("klsp_fill")?,
            guard_fill: f("klsp_guard_fill")?,
            compare: f("klsp_compare")?,
            matches: f("klsp_match")?,
            guard_check: f("klsp_guard_check")?,
            _module: module,
            stats,
            used: AtomicUsize::new(0),
            max_blocks: sms.max(1) * 8,
        };
        h.reset_slots()
            .map_err(|e| format!("initialising verification statistics: {e}"))?;
        Ok(h)
    }

    fn reset_slots(&self) -> CuResult<()> {
        let init: Vec<u8> = (0..SLOTS).flat_map(|_| Stats::initial()).collect();
        self.stats.upload(0, &init)?;
        self.used.store(0, Ordering::Relaxed);
        Ok(())
    }

    fn grid(&self, n: u64) -> [u32; 3] {
        let blocks = n
            .div_ceil(u64::from(BLOCK))
            .clamp(1, u64::from(self.max_blocks));
        [blocks as u32, 1, 1]
    }

    fn launch(
        &self,
        f: CUfunction,
        n: u64,
        stream: CUstream,
        args: &mut [Vec<u8>],
    ) -> CuResult<()> {
        if n == 0 {
            return Ok(());
        }
        driver::launch(f, self.grid(n), [BLOCK, 1, 1], 0, stream, args)
    }

    fn next_slot(&self) -> CuResult<(Slot, CUdeviceptr)> {
        let i = self.used.fetch_add(1, Ordering::Relaxed);
        if i >= SLOTS {
            // A caller bug (too many scans between collects), reported as the driver's
            // "invalid value" so that it surfaces as an internal error, never a panic.
            return Err(driver::CuError {
                call: "klsp stats slot",
                code: cudarc::driver::sys::CUresult::CUDA_ERROR_INVALID_VALUE,
            });
        }
        Ok((Slot(i), self.stats.ptr + (i * STATS_BYTES) as u64))
    }

    /// Fills `n` elements at `ptr` as `fill` says, from stream `key`.
    pub fn fill(
        &self,
        stream: CUstream,
        ptr: CUdeviceptr,
        n: u64,
        dtype: DType,
        fill: &Fill,
        key: u64,
    ) -> CuResult<()> {
        let mut args = fill_args(ptr, n, dtype, fill, key);
        self.launch(self.fill, n, stream, &mut args)
    }

    /// Writes `bytes` guard bytes at `ptr` from stream `key`.
    pub fn guard_fill(
        &self,
        stream: CUstream,
        ptr: CUdeviceptr,
        bytes: u64,
        key: u64,
    ) -> CuResult<()> {
        let mut args = vec![le(ptr), le(bytes), le(key)];
        self.launch(self.guard_fill, bytes, stream, &mut args)
    }

    /// Queues the comparison of `actual` with `expected` (n elements of `dtype`).
    #[allow(clippy::too_many_arguments)]
    pub fn compare(
        &self,
        stream: CUstream,
        expected: CUdeviceptr,
        actual: CUdeviceptr,
        n: u64,
        dtype: DType,
        atol: f64,
        rtol: f64,
    ) -> CuResult<Slot> {
        let (slot, out) = self.next_slot()?;
        let exact = i32::from(atol == 0.0 && rtol == 0.0);
        let mut args = vec![
            le(expected),
            le(actual),
            le(n),
            dtype_code(dtype).to_le_bytes().to_vec(),
            atol.to_le_bytes().to_vec(),
            rtol.to_le_bytes().to_vec(),
            exact.to_le_bytes().to_vec(),
            le(out),
        ];
        self.launch(self.compare, n, stream, &mut args)?;
        Ok(slot)
    }

    /// Queues the check of `n` elements at `ptr` against what `fill` from `key` writes.
    pub fn matches(
        &self,
        stream: CUstream,
        ptr: CUdeviceptr,
        n: u64,
        dtype: DType,
        fill: &Fill,
        key: u64,
    ) -> CuResult<Slot> {
        let (slot, out) = self.next_slot()?;
        let mut args = fill_args(ptr, n, dtype, fill, key);
        args.push(le(out));
        self.launch(self.matches, n, stream, &mut args)?;
        Ok(slot)
    }

    /// Queues the check of `bytes` guard bytes at `ptr` against stream `key`.
    pub fn guard_check(
        &self,
        stream: CUstream,
        ptr: CUdeviceptr,
        bytes: u64,
        key: u64,
    ) -> CuResult<Slot> {
        let (slot, out) = self.next_slot()?;
        let mut args = vec![le(ptr), le(bytes), le(key), le(out)];
        self.launch(self.guard_check, bytes, stream, &mut args)?;
        Ok(slot)
    }

    /// Waits for `stream`, reads every queued slot back and frees them all. Index the
    /// result with [`Collected::get`].
    pub fn collect(&self, sync: impl FnOnce() -> CuResult<()>) -> CuResult<Collected> {
        sync()?;
        let used = self.used.load(Ordering::Relaxed).min(SLOTS);
        let bytes = if used == 0 {
            Vec::new()
        } else {
            self.stats.download_range(0, used * STATS_BYTES)?
        };
        self.reset_slots()?;
        Ok(Collected(
            bytes
                .chunks_exact(STATS_BYTES)
                .map(Stats::from_bytes)
                .collect(),
        ))
    }
}

/// The stats of the scans queued before a [`DevHelpers::collect`].
pub struct Collected(Vec<Stats>);

impl Collected {
    pub fn get(&self, s: Slot) -> Stats {
        self.0.get(s.0).copied().unwrap_or_default()
    }
}

fn le(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

fn fill_args(ptr: CUdeviceptr, n: u64, dtype: DType, fill: &Fill, key: u64) -> Vec<Vec<u8>> {
    vec![
        le(ptr),
        le(n),
        dtype_code(dtype).to_le_bytes().to_vec(),
        (fill.code as i32).to_le_bytes().to_vec(),
        fill.p1.to_le_bytes().to_vec(),
        fill.p2.to_le_bytes().to_vec(),
        fill.ilo.to_le_bytes().to_vec(),
        le(fill.ispan),
        le(key),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_decode_and_the_slot_start() {
        let init = Stats::initial();
        let s = Stats::from_bytes(&init);
        assert_eq!(s, Stats::default());
        let mut b = init;
        b[0..8].copy_from_slice(&3u64.to_le_bytes());
        b[8..16].copy_from_slice(&17u64.to_le_bytes());
        b[24..32].copy_from_slice(&0.5f64.to_bits().to_le_bytes());
        let s = Stats::from_bytes(&b);
        assert_eq!((s.bad, s.first_bad, s.max_abs), (3, Some(17), 0.5));
    }

    /// On a GPU: `klsp_fill`, `klsp_guard_fill`, `klsp_guard_check` and `klsp_compare`
    /// give what their CPU twins in `fill.rs` and `compare.rs` give. Skipped (visibly)
    /// without a CUDA driver; `KERNEL_LSP_REQUIRE_GPU=1` makes that a failure.
    #[test]
    fn gpu_device_helpers_match_their_cpu_twins() {
        use crate::spec::{Dist, Role};
        use crate::worker::cuda::compare::compare as cpu_compare;
        use crate::worker::cuda::fill::{decode, elem_size, fill_host, guard_damage, guard_fill};
        use crate::worker::cuda::gpu::Gpu;
        if driver::probe_libcuda().is_err() {
            assert!(
                std::env::var_os("KERNEL_LSP_REQUIRE_GPU").is_none(),
                "KERNEL_LSP_REQUIRE_GPU is set but there is no CUDA driver"
            );
            eprintln!("SKIP gpu_device_helpers_match_their_cpu_twins: no CUDA driver");
            return;
        }
        let mut gpu = Gpu::open().expect("open the GPU");
        let h = gpu.helpers().expect("compile the helpers");
        let stream = gpu.ctx.stream;
        let n = 10_007u64;
        let dists = [
            Dist::Uniform { lo: -2.0, hi: 3.0 },
            Dist::Normal {
                mean: 1.0,
                std: 2.0,
            },
            Dist::RandInt { lo: -7, hi: 300 },
            Dist::Zeros,
            Dist::Ones,
            Dist::Arange,
        ];
        for dtype in DType::ALL {
            let es = elem_size(dtype);
            for (role, dist) in dists
                .iter()
                .map(|d| (Role::In, d))
                .chain([(Role::Out, &Dist::Ones)])
            {
                let fill = Fill::of(role, dist);
                let buf = DeviceBuffer::alloc(n as usize * es).unwrap();
                h.fill(stream, buf.ptr, n, dtype, &fill, 0x5eed).unwrap();
                gpu.ctx.sync().unwrap();
                let got = buf.download().unwrap();
                let want = fill_host(dtype, &fill, 0x5eed, n as usize);
                // What `in` buffers are checked with after a launch: the fill matches
                // itself (negative integers included).
                let slot = h.matches(stream, buf.ptr, n, dtype, &fill, 0x5eed).unwrap();
                let st = h.collect(|| gpu.ctx.sync()).unwrap().get(slot);
                assert_eq!(
                    st.bad, 0,
                    "{dtype} {dist:?} {role:?}: klsp_match finds the fill changed"
                );
                if matches!(dist, Dist::Normal { .. }) && role == Role::In {
                    // ln and cos may differ in the last place: nearly every element
                    // equal, the rest within rounding.
                    let off = got
                        .chunks_exact(es)
                        .zip(want.chunks_exact(es))
                        .filter(|(a, b)| {
                            let (x, y) = (decode(dtype, a).as_f64(), decode(dtype, b).as_f64());
                            (x - y).abs() > 1e-6 * y.abs().max(1.0)
                        })
                        .count();
                    assert!(
                        off * 1000 <= n as usize,
                        "{dtype} normal: {off} elements differ"
                    );
                } else {
                    assert!(
                        got == want,
                        "{dtype} {dist:?} {role:?}: device and CPU twin differ"
                    );
                }
            }
        }
        // Guards: the same bytes, and the same damage found.
        let g = DeviceBuffer::alloc(4096).unwrap();
        h.guard_fill(stream, g.ptr, 4096, 99).unwrap();
        gpu.ctx.sync().unwrap();
        let mut bytes = g.download().unwrap();
        assert_eq!(bytes, guard_fill(99, 4096));
        bytes[100] ^= 1;
        bytes[3000] ^= 0x80;
        g.upload(0, &bytes).unwrap();
        let slot = h.guard_check(stream, g.ptr, 4096, 99).unwrap();
        let st = h.collect(|| gpu.ctx.sync()).unwrap().get(slot);
        let d = guard_damage(&bytes, 99).unwrap();
        assert_eq!(
            (st.bad, st.first_bad, st.end_bad),
            (d.bytes, Some(d.first), d.end)
        );
        // Comparison: the same first bad element and maximum errors as the CPU's.
        let a: Vec<f32> = (0..n).map(|i| (i as f32).sin()).collect();
        let mut b = a.clone();
        b[17] += 1e-3;
        b[4000] = f32::NAN;
        b[9000] *= 1.5;
        let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let (da, db) = (
            DeviceBuffer::alloc(n as usize * 4).unwrap(),
            DeviceBuffer::alloc(n as usize * 4).unwrap(),
        );
        da.upload(0, &bytes(&a)).unwrap();
        db.upload(0, &bytes(&b)).unwrap();
        let slot = h
            .compare(stream, da.ptr, db.ptr, n, DType::F32, 1e-5, 1e-4)
            .unwrap();
        let st = h.collect(|| gpu.ctx.sync()).unwrap().get(slot);
        let cpu = cpu_compare(DType::F32, &bytes(&a), &bytes(&b), 1e-5, 1e-4);
        assert_eq!(st.first_bad, cpu.first_bad.map(|f| f.index as u64));
        assert_eq!(st.bad, 3);
        assert_eq!((st.max_abs, st.max_rel), (cpu.max_abs_err, cpu.max_rel_err));
        assert_eq!(st.bit_equal, n - 3);
    }

    /// NVRTC (the pip wheel in CI) compiles the helpers for the architectures the worker
    /// meets, and every helper is in the PTX.
    #[test]
    fn the_helpers_compile_with_nvrtc() {
        use crate::toolchain::{locate, ToolchainSettings};
        let tc = locate(&ToolchainSettings::default());
        let nvrtc = match &tc.nvrtc {
            Ok(n) => n.clone(),
            Err(e) => {
                assert!(
                    std::env::var("KERNEL_LSP_REQUIRE_TOOLS").map_or(true, |v| v != "1"),
                    "NVRTC missing: {e}"
                );
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIP the_helpers_compile_with_nvrtc: {e}"
                );
                return;
            }
        };
        for arch in ["sm_80", "sm_90"] {
            let out = nvrtc.compile(&CompileRequest {
                source: HELPERS_SOURCE.to_string(),
                program_name: "kernel_lsp_helpers.cu".into(),
                options: helper_options(arch),
                name_expressions: Vec::new(),
                headers: Vec::new(),
            });
            assert!(out.success, "{arch}: {}", out.log);
            let ptx = out.ptx.expect("PTX");
            for f in [
                "klsp_fill",
                "klsp_guard_fill",
                "klsp_compare",
                "klsp_match",
                "klsp_guard_check",
            ] {
                assert!(ptx.contains(&format!(".entry {f}(")), "{arch}: no {f}");
            }
        }
    }

    #[test]
    fn helper_options_name_the_virtual_architecture() {
        assert_eq!(helper_options("sm_90")[0], "--gpu-architecture=compute_90");
        assert!(helper_options("sm_80").contains(&"--fmad=false".to_string()));
    }
}
