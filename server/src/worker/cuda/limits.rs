//! Checks a launch against the device's limits before launching (so the author reads "block
//! of 2048 threads is above the 1024 ..." instead of CUDA_ERROR_INVALID_VALUE), and the
//! order statistics of timed launches.
//!
//! Pure: a `DeviceInfo` and the kernel's attributes in, a verdict out.

use crate::worker::protocol::DeviceInfo;

/// What the driver says about one compiled kernel (`cuFuncGetAttribute`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelAttrs {
    pub registers: u32,
    pub static_smem: u64,
    /// The most threads per block this kernel can launch with (registers and
    /// `__launch_bounds__` included).
    pub max_threads: u32,
    /// Local memory per thread (register spills and local arrays), in bytes.
    pub local_bytes: u32,
}

/// How to launch once the checks pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchPlan {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub smem: u32,
    /// Static + dynamic shared memory is above the default per-block limit: the kernel
    /// must opt in with `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` first.
    pub needs_smem_opt_in: bool,
}

const AXES: [&str; 3] = ["x", "y", "z"];

/// Validates `grid`/`block`/`smem` of kernel `kernel` against `dev` and `attrs`. The error
/// says which limit, the numbers, and what to change.
pub fn check_launch(
    dev: &DeviceInfo,
    kernel: &str,
    grid: [u64; 3],
    block: [u64; 3],
    smem: u64,
    attrs: &KernelAttrs,
) -> Result<LaunchPlan, String> {
    let name = &dev.name;
    for i in 0..3 {
        if block[i] == 0 || grid[i] == 0 {
            return Err(format!(
                "`{kernel}`: launch of grid ({}, {}, {}) x block ({}, {}, {}) has a zero dimension; \
                 every grid and block dimension must be at least 1",
                grid[0], grid[1], grid[2], block[0], block[1], block[2]
            ));
        }
        if block[i] > u64::from(dev.max_block[i]) {
            return Err(format!(
                "`{kernel}`: block.{} = {} is above the {} of {name}; use a smaller block",
                AXES[i], block[i], dev.max_block[i]
            ));
        }
        if grid[i] > u64::from(dev.max_grid[i]) {
            return Err(format!(
                "`{kernel}`: grid.{} = {} is above the {} of {name}; launch fewer blocks \
                 (or loop inside the kernel)",
                AXES[i], grid[i], dev.max_grid[i]
            ));
        }
    }
    let threads = block[0] * block[1] * block[2];
    if threads > u64::from(dev.max_threads_per_block) {
        return Err(format!(
            "`{kernel}`: block of {threads} threads is above the {} threads per block of {name}; \
             use at most {} threads",
            dev.max_threads_per_block, dev.max_threads_per_block
        ));
    }
    let regs = u64::from(attrs.registers) * threads;
    if attrs.registers > 0 && regs > u64::from(dev.regs_per_block) {
        return Err(format!(
            "`{kernel}`: block of {threads} threads x {} registers = {regs} registers, above the \
             {} registers per block of {name}; use a smaller block, `__launch_bounds__({threads})` \
             or -maxrregcount",
            attrs.registers, dev.regs_per_block
        ));
    }
    if attrs.max_threads > 0 && threads > u64::from(attrs.max_threads) {
        return Err(format!(
            "`{kernel}`: block of {threads} threads, but this kernel can launch at most {} threads \
             per block ({} registers per thread, or its __launch_bounds__); use a smaller block",
            attrs.max_threads, attrs.registers
        ));
    }
    let total_smem = smem + attrs.static_smem;
    if total_smem > dev.smem_per_block_optin {
        return Err(format!(
            "`{kernel}`: {} bytes of shared memory ({smem} dynamic + {} static) is above the {} \
             bytes per block of {name} (with opt-in); use less shared memory",
            total_smem, attrs.static_smem, dev.smem_per_block_optin
        ));
    }
    Ok(LaunchPlan {
        grid: grid.map(|g| g as u32),
        block: block.map(|b| b as u32),
        smem: smem as u32,
        needs_smem_opt_in: total_smem > dev.smem_per_block,
    })
}

/// The 99% confidence interval of the median of `sorted` samples, free of any
/// assumption about their distribution: the order statistics at ranks
/// n/2 ∓ 2.576·√n/2 (a binomial's normal approximation), clamped to the samples. With
/// one sample or none there is no interval.
pub fn median_interval(sorted: &[f64]) -> Option<[f64; 2]> {
    let n = sorted.len();
    if n < 2 {
        return None;
    }
    let half = 2.576 * (n as f64).sqrt() / 2.0;
    let lo = ((n as f64 / 2.0 - half).floor().max(1.0) as usize).min(n) - 1;
    let hi = ((n as f64 / 2.0 + half).ceil() as usize).clamp(1, n) - 1;
    Some([sorted[lo], sorted[hi]])
}

/// Sorted-sample percentile with linear interpolation between ranks; `q` in [0, 1].
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let pos = q.clamp(0.0, 1.0) * (n - 1) as f64;
            let lo = pos.floor() as usize;
            let hi = pos.ceil() as usize;
            sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
        }
    }
}

/// (median, min, p10, p90) of `samples` in milliseconds.
pub fn summarize(samples: &[f64]) -> Summary {
    let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_by(f64::total_cmp);
    Summary {
        median: percentile(&s, 0.5),
        min: s.first().copied().unwrap_or(f64::NAN),
        p10: percentile(&s, 0.1),
        p90: percentile(&s, 0.9),
        median_interval: median_interval(&s),
    }
}

/// What a timing reports of its samples.
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub p10: f64,
    pub p90: f64,
    pub median_interval: Option<[f64; 2]>,
}

#[cfg(test)]
pub(crate) fn h100() -> DeviceInfo {
    DeviceInfo {
        name: "NVIDIA H100 80GB HBM3".into(),
        arch: "sm_90".into(),
        sms: 132,
        warp_size: 32,
        max_threads_per_block: 1024,
        max_block: [1024, 1024, 64],
        max_grid: [2_147_483_647, 65535, 65535],
        smem_per_block: 48 * 1024,
        smem_per_block_optin: 227 * 1024,
        smem_per_sm: 228 * 1024,
        regs_per_block: 65536,
        l2_bytes: 50 * 1024 * 1024,
        mem_bytes: 80 * 1024 * 1024 * 1024,
        ceilings: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAXPY: KernelAttrs = KernelAttrs {
        registers: 16,
        static_smem: 0,
        max_threads: 1024,
        local_bytes: 0,
    };

    #[test]
    fn ordinary_launch_passes() {
        let p = check_launch(&h100(), "saxpy", [4096, 1, 1], [256, 1, 1], 0, &SAXPY).unwrap();
        assert_eq!(p.grid, [4096, 1, 1]);
        assert_eq!(p.block, [256, 1, 1]);
        assert!(!p.needs_smem_opt_in);
    }

    #[test]
    fn block_of_2048_is_refused_with_the_limit() {
        let e = check_launch(&h100(), "saxpy", [1, 1, 1], [2048, 1, 1], 0, &SAXPY).unwrap_err();
        assert!(e.contains("block.x = 2048 is above the 1024"), "{e}");
        let e = check_launch(&h100(), "k", [1, 1, 1], [64, 32, 1], 0, &SAXPY).unwrap_err();
        assert!(
            e.contains("block of 2048 threads is above the 1024 threads per block"),
            "{e}"
        );
        let e = check_launch(&h100(), "k", [1, 1, 1], [1, 1, 65], 0, &SAXPY).unwrap_err();
        assert!(e.contains("block.z = 65"), "{e}");
    }

    #[test]
    fn grid_limits_and_zero_dimensions() {
        let e = check_launch(&h100(), "k", [1, 70000, 1], [32, 1, 1], 0, &SAXPY).unwrap_err();
        assert!(e.contains("grid.y = 70000 is above the 65535"), "{e}");
        let e = check_launch(&h100(), "k", [0, 1, 1], [32, 1, 1], 0, &SAXPY).unwrap_err();
        assert!(e.contains("zero dimension"), "{e}");
    }

    #[test]
    fn shared_memory_above_48k_opts_in_and_above_optin_is_refused() {
        let p = check_launch(&h100(), "k", [1, 1, 1], [256, 1, 1], 100 * 1024, &SAXPY).unwrap();
        assert!(p.needs_smem_opt_in);
        let attrs = KernelAttrs {
            static_smem: 40 * 1024,
            ..SAXPY
        };
        let p = check_launch(&h100(), "k", [1, 1, 1], [256, 1, 1], 16 * 1024, &attrs).unwrap();
        assert!(p.needs_smem_opt_in, "static + dynamic counts");
        let e = check_launch(&h100(), "k", [1, 1, 1], [256, 1, 1], 300 * 1024, &SAXPY).unwrap_err();
        assert!(e.contains("307200 bytes of shared memory"), "{e}");
        assert!(e.contains("232448 bytes per block"), "{e}");
    }

    #[test]
    fn registers_times_threads_above_the_register_file_is_refused() {
        let attrs = KernelAttrs {
            registers: 128,
            static_smem: 0,
            max_threads: 0,
            local_bytes: 0,
        };
        let e = check_launch(&h100(), "k", [1, 1, 1], [1024, 1, 1], 0, &attrs).unwrap_err();
        assert!(e.contains("1024 threads x 128 registers = 131072"), "{e}");
        let attrs = KernelAttrs {
            registers: 40,
            static_smem: 0,
            max_threads: 768,
            local_bytes: 0,
        };
        let e = check_launch(&h100(), "k", [1, 1, 1], [1024, 1, 1], 0, &attrs).unwrap_err();
        assert!(e.contains("at most 768 threads"), "{e}");
    }

    #[test]
    fn percentiles_interpolate() {
        let s = summarize(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!((s.median, s.min), (3.0, 1.0));
        assert!((s.p10 - 1.4).abs() < 1e-12 && (s.p90 - 4.6).abs() < 1e-12);
        assert_eq!(summarize(&[2.0]).median, 2.0);
        assert!(summarize(&[]).median.is_nan());
    }

    #[test]
    fn the_median_interval_narrows_with_more_samples() {
        // Five samples: the interval is every sample.
        assert_eq!(
            summarize(&[5.0, 1.0, 3.0, 2.0, 4.0]).median_interval,
            Some([1.0, 5.0])
        );
        assert_eq!(summarize(&[2.0]).median_interval, None);
        // 1000 evenly spread samples 0..999: ranks 459 and 541 (1-based), about ±4% of the range.
        let many: Vec<f64> = (0..1000).rev().map(f64::from).collect();
        let [lo, hi] = summarize(&many).median_interval.expect("1000 samples");
        assert_eq!((lo, hi), (458.0, 540.0));
    }
}
