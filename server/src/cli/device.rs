//! `kernel-lsp device`: start one worker and print what it sees: the GPU (name, arch,
//! SMs, memory, L2, shared-memory limits), the measured ceilings, and whether the CUDA
//! and Triton backends work (and why not). Exits 1 when the worker has no GPU or cannot
//! be started.

use std::process::ExitCode;

use crate::analysis::human_bytes;
use crate::settings::{Settings, Workers};
use crate::worker::pool::{self, PoolConfig, WorkerPool};
use crate::worker::protocol::{BackendStatus, HelloResult};

#[derive(clap::Args, Debug)]
pub struct DeviceArgs {
    /// The command that starts a worker, e.g. "ssh gpu-box kernel-lsp worker".
    /// Default: this binary's `worker` subcommand.
    #[arg(long, value_name = "CMD")]
    pub worker: Option<String>,
    /// Print the worker's `hello` reply as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Builds the pool config for a `--worker` flag (shared by `bench`).
pub(crate) fn pool_config(worker: Option<&str>) -> Result<PoolConfig, String> {
    let mut config = PoolConfig::default();
    if let Some(cmd) = worker {
        config.command = pool::split_command(cmd).map_err(|e| format!("--worker: {e}"))?;
    }
    Ok(config)
}

/// The pool of a command that reads settings (`optimize`, `health`): the settings'
/// `worker`, `workers` and `python`, as the editor reads them, with `--worker` and
/// `--workers` on top.
pub(crate) fn settings_pool_config(
    settings: &Settings,
    worker: Option<&str>,
    workers: Option<&Workers>,
) -> Result<PoolConfig, String> {
    let mut s = settings.clone();
    if let Some(w) = worker {
        pool::split_command(w).map_err(|e| format!("--worker: {e}"))?;
        s.worker = Some(w.to_string());
    }
    if let Some(w) = workers {
        s.workers = w.clone();
    }
    PoolConfig::from_settings(&s, &pool::visible_gpus())
}

/// A current-thread runtime for a CLI command.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

pub fn run(args: &DeviceArgs) -> ExitCode {
    let config = match pool_config(args.worker.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kernel-lsp device: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kernel-lsp device: {e}");
            return ExitCode::from(2);
        }
    };
    let hello = rt.block_on(async {
        let pool = WorkerPool::new(config);
        let hello = pool.connect().await;
        pool.shutdown().await;
        hello
    });
    let hello = match hello {
        Ok(h) => h,
        Err(e) => {
            eprintln!("kernel-lsp device: {}", e.message);
            return ExitCode::from(1);
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&hello).expect("hello serializes")
        );
    } else {
        print!("{}", describe(&hello));
    }
    if hello.device.is_some() {
        ExitCode::SUCCESS
    } else {
        if !args.json {
            eprintln!(
                "kernel-lsp device: no GPU on this worker: {}",
                hello.cuda.message
            );
        }
        ExitCode::from(1)
    }
}

/// The human-readable report.
pub fn describe(hello: &HelloResult) -> String {
    let mut s = String::new();
    match &hello.device {
        Some(d) => {
            s.push_str(&format!(
                "device:   {} ({}, {} SMs)\n",
                d.name, d.arch, d.sms
            ));
            s.push_str(&format!(
                "memory:   {} global, {} L2\n",
                human_bytes(d.mem_bytes),
                human_bytes(d.l2_bytes)
            ));
            s.push_str(&format!(
                "shared:   {} per block ({} opt-in), {} per SM\n",
                human_bytes(d.smem_per_block),
                human_bytes(d.smem_per_block_optin),
                human_bytes(d.smem_per_sm)
            ));
            s.push_str(&format!(
                "limits:   {} threads/block, block {:?}, grid {:?}, {} regs/block, warp {}\n",
                d.max_threads_per_block, d.max_block, d.max_grid, d.regs_per_block, d.warp_size
            ));
            match &d.ceilings {
                Some(c) => s.push_str(&format!(
                    "ceilings: {:.0} GB/s copy, {:.1} TFLOP/s FP32 FMA (measured)\n",
                    c.copy_gbps, c.fma_tflops
                )),
                None => s.push_str("ceilings: not measured\n"),
            }
        }
        None => s.push_str("device:   none\n"),
    }
    s.push_str(&format!("cuda:     {}\n", status_line(&hello.cuda)));
    s.push_str(&format!("triton:   {}\n", status_line(&hello.triton)));
    s.push_str(&format!(
        "worker:   kernel-lsp {}, protocol {}\n",
        hello.worker_version, hello.protocol
    ));
    s
}

fn status_line(s: &BackendStatus) -> String {
    match (s.available, s.interpreter) {
        (true, true) => format!("available ({}; CPU interpreter)", s.message),
        (true, false) => format!("available ({})", s.message),
        (false, _) => format!("unavailable: {}", s.message),
    }
}
