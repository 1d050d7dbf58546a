//! Energy per call from NVML (issue #14, as Kernel Tuner reports it): the board's total
//! energy counter (`nvmlDeviceGetTotalEnergyConsumption`, millijoules, Volta and later)
//! read around a burst of back-to-back launches. `libnvidia-ml.so.1` is loaded at run
//! time, in the worker only; without it (or on a board without the counter) there is
//! no energy figure and nothing fails. The device is matched by PCI bus id, so
//! `CUDA_VISIBLE_DEVICES` cannot pair CUDA's device 0 with another board.

use std::ffi::{c_char, c_int, c_void, CString};

type Init = unsafe extern "C" fn() -> c_int;
type ByPci = unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> c_int;
type Energy = unsafe extern "C" fn(*mut c_void, *mut u64) -> c_int;

pub struct Nvml {
    _lib: libloading::Library,
    device: *mut c_void,
    energy: Energy,
}

// SAFETY: the handle is an opaque NVML device handle, valid for the process; NVML is
// thread-safe. The worker uses it from one thread anyway.
unsafe impl Send for Nvml {}

impl Nvml {
    /// NVML for the board at `pci_bus_id` (`0000:18:00.0`), or why not.
    pub fn open(pci_bus_id: &str) -> Result<Nvml, String> {
        // SAFETY: loading a system library by name; its initialisers are NVML's own.
        let lib = unsafe { libloading::Library::new("libnvidia-ml.so.1") }
            .map_err(|e| format!("NVML is not available ({e})"))?;
        // SAFETY: the symbols have these C signatures in every NVML since CUDA 9.
        let (init, by_pci, energy) = unsafe {
            let init: libloading::Symbol<Init> = lib
                .get(b"nvmlInit_v2\0")
                .map_err(|e| format!("NVML has no nvmlInit_v2 ({e})"))?;
            let by_pci: libloading::Symbol<ByPci> = lib
                .get(b"nvmlDeviceGetHandleByPciBusId_v2\0")
                .map_err(|e| format!("NVML has no nvmlDeviceGetHandleByPciBusId_v2 ({e})"))?;
            let energy: libloading::Symbol<Energy> = lib
                .get(b"nvmlDeviceGetTotalEnergyConsumption\0")
                .map_err(|e| format!("NVML has no energy counter ({e})"))?;
            (*init, *by_pci, *energy)
        };
        // SAFETY: plain C calls with valid pointers.
        let rc = unsafe { init() };
        if rc != 0 {
            return Err(format!("nvmlInit failed (NVML error {rc})"));
        }
        let id = CString::new(pci_bus_id).map_err(|_| "bad PCI bus id".to_string())?;
        let mut device = std::ptr::null_mut();
        // SAFETY: `id` is NUL-terminated; `device` is a valid out-pointer.
        let rc = unsafe { by_pci(id.as_ptr(), &mut device) };
        if rc != 0 {
            return Err(format!(
                "NVML does not know the board at {pci_bus_id} (NVML error {rc})"
            ));
        }
        let nvml = Nvml {
            _lib: lib,
            device,
            energy,
        };
        nvml.millijoules()?;
        Ok(nvml)
    }

    /// The board's energy counter since the driver loaded, in millijoules.
    pub fn millijoules(&self) -> Result<u64, String> {
        let mut mj = 0u64;
        // SAFETY: a handle from NVML and a valid out-pointer.
        let rc = unsafe { (self.energy)(self.device, &mut mj) };
        if rc != 0 {
            return Err(format!("the board has no energy counter (NVML error {rc})"));
        }
        Ok(mj)
    }
}

/// Joules per call from two counter readings around `calls` launches; None when the
/// counter did not move (too short a burst for its update period).
pub fn joules_per_call(before_mj: u64, after_mj: u64, calls: u64) -> Option<f64> {
    (after_mj > before_mj && calls > 0)
        .then(|| (after_mj - before_mj) as f64 / 1000.0 / calls as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn energy_per_call_from_two_readings() {
        assert_eq!(joules_per_call(1_000, 3_000, 1000), Some(0.002));
        assert_eq!(
            joules_per_call(5_000, 5_000, 1000),
            None,
            "the counter did not move"
        );
        assert_eq!(joules_per_call(5_000, 6_000, 0), None);
        // No NVML on a machine without the driver: a message, not a crash.
        if std::path::Path::new("/proc/driver/nvidia").exists() {
            return;
        }
        assert!(Nvml::open("0000:00:00.0").is_err());
    }
}
