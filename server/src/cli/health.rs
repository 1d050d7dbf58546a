//! `kernel-lsp health`: one report of what a kernel author's setup can do, for the
//! editors' health checks (`:checkhealth kernel_lsp`, the VS Code status item) and for a
//! person at a terminal. It checks the binary's version, NVRTC and ptxas (found the way
//! the language server finds them), one worker (started? its GPU, the CUDA and Triton
//! backends) and each configured LLM endpoint (TCP reachability of its base URL and
//! whether its API-key variable is set; the key's value is never read out or sent).
//!
//! The checks are pure functions from what was found to a [`HealthReport`]; only
//! [`run`] does I/O. Exit status: 0 when the server can serve (a missing GPU, NVRTC or
//! LLM is a warning or an error line, not a failure), 1 only when the worker cannot be
//! started at all, 2 for a usage error (an unreadable `--config`).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use crate::cli::device::{runtime, settings_pool_config};
use crate::settings::{ModelSettings, Provider, Settings, Workers};
use crate::toolchain::{self, Toolchain};
use crate::worker::pool::{WorkerPool, WorkerStatus};
use crate::worker::protocol::{HelloResult, WorkerError};

/// How long the TCP connect to an LLM endpoint may take (name lookup included).
const CONNECT_LIMIT: Duration = Duration::from_secs(3);

#[derive(clap::Args, Debug)]
pub struct HealthArgs {
    /// Print the report as one JSON object (the shape editors read).
    #[arg(long)]
    pub json: bool,
    /// The command that starts a worker, e.g. "ssh gpu-box kernel-lsp worker".
    /// Default: this binary's `worker` subcommand.
    #[arg(long, value_name = "CMD")]
    pub worker: Option<String>,
    /// The pool to check: a count, `all` or worker commands separated by `;` (default:
    /// the `workers` setting). Every worker is started and listed.
    #[arg(long, value_name = "N|all|CMDS")]
    pub workers: Option<Workers>,
    /// Settings as JSON, in the shape of the language server's initializationOptions
    /// (toolchain paths, `arch`, `llm.strategy` / `llm.coder`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// How bad a finding is. `Warn`: a feature is off but the server serves; `Error`: a
/// configured feature cannot work (or, for the worker, nothing on a GPU can).
/// Ordered by severity, so `max` gives the worse of two.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warn,
    Error,
}

impl Level {
    fn label(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
}

/// One finding: `ok` is `level == Ok`, kept as a bool so clients need not know levels.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Check {
    pub ok: bool,
    pub level: Level,
    /// What was found and, when not ok, what to do.
    pub message: String,
}

impl Check {
    fn new(level: Level, message: impl Into<String>) -> Self {
        Check {
            ok: level == Level::Ok,
            level,
            message: message.into(),
        }
    }
}

/// The GPU a worker sees.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeviceSummary {
    pub name: String,
    pub arch: String,
    pub sms: u32,
}

/// The worker finding: started or not, and its GPU (None: no GPU, see `cuda`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkerCheck {
    #[serde(flatten)]
    pub check: Check,
    pub device: Option<DeviceSummary>,
}

/// One configured LLM endpoint.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmCheck {
    /// `strategy` or `coder`.
    pub role: &'static str,
    #[serde(flatten)]
    pub check: Check,
    pub url: String,
    pub model: String,
    /// The *name* of the variable that holds the key; its value is never reported.
    pub key_env: String,
    pub key_set: bool,
}

/// The whole report; its JSON form is the stable interface editors read:
/// `{version, config, nvrtc, ptxas, nvcc, headers, ncu, worker, cuda, triton, llm: [..]}`,
/// each finding
/// with `ok`, `level` and `message`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HealthReport {
    pub version: String,
    pub config: Check,
    pub nvrtc: Check,
    pub ptxas: Check,
    /// nvcc, the ground truth for whole-file checks of `.cu` files (issue #11).
    pub nvcc: Check,
    /// The CUDA headers, CCCL and the rest that NVRTC checks need.
    pub headers: Check,
    /// Nsight Compute, for `kernel-lsp profile` and profile facts.
    pub ncu: Check,
    pub worker: WorkerCheck,
    /// Every worker of the pool (one line each in the text when there are several).
    pub workers: Vec<PoolWorkerCheck>,
    pub cuda: Check,
    pub triton: Check,
    pub llm: Vec<LlmCheck>,
}

/// One worker of the pool: alive with its GPU, or why it did not start.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PoolWorkerCheck {
    #[serde(flatten)]
    pub check: Check,
    #[serde(flatten)]
    pub status: WorkerStatus,
}

/// A check per worker from `connect_all`'s answers and the pool's status.
pub fn pool_worker_checks(
    hellos: &[Result<HelloResult, WorkerError>],
    status: Vec<WorkerStatus>,
) -> Vec<PoolWorkerCheck> {
    status
        .into_iter()
        .zip(hellos)
        .map(|(st, hello)| {
            let pin = st
                .gpu
                .as_ref()
                .map_or(String::new(), |g| format!(", CUDA_VISIBLE_DEVICES={g}"));
            let check = match hello {
                Ok(h) => Check::new(
                    Level::Ok,
                    format!(
                        "worker {} (`{}`{pin}): alive; {}",
                        st.index + 1,
                        st.command,
                        h.device.as_ref().map_or_else(
                            || format!("no GPU: {}", h.cuda.message),
                            |d| format!("GPU {} ({})", d.name, d.arch)
                        )
                    ),
                ),
                Err(e) => Check::new(
                    Level::Error,
                    format!(
                        "worker {} (`{}`{pin}): down: {}",
                        st.index + 1,
                        st.command,
                        e.message
                    ),
                ),
            };
            PoolWorkerCheck { check, status: st }
        })
        .collect()
}

impl HealthReport {
    /// 1 only when no worker could start: then nothing can be verified or timed.
    pub fn exit_code(&self) -> u8 {
        if self.worker.check.ok {
            0
        } else {
            1
        }
    }
}

pub fn run(args: &HealthArgs) -> ExitCode {
    let (settings, config) = match read_config(args.config.as_deref()) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("kernel-lsp health: {e}");
            return ExitCode::from(2);
        }
    };
    let pool_config =
        match settings_pool_config(&settings, args.worker.as_deref(), args.workers.as_ref()) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("kernel-lsp health: {e}");
                return ExitCode::from(2);
            }
        };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kernel-lsp health: {e}");
            return ExitCode::from(2);
        }
    };
    let endpoints = endpoints(&settings);
    let toolchain_settings = settings.toolchain();
    let nvcc_off = !toolchain_settings.use_nvcc
        || std::env::var_os("KERNEL_LSP_NVCC").is_some_and(|v| v == "none");
    let (tc, hello, reach) = rt.block_on(async {
        let tc = tokio::task::spawn_blocking(move || {
            let tc = toolchain::locate(&toolchain_settings);
            let ptxas_version = tc.ptxas.as_deref().and_then(ptxas_version);
            (tc, ptxas_version)
        });
        let worker = async {
            let pool = WorkerPool::new(pool_config);
            let hellos = pool.connect_all().await;
            let status = pool.status();
            pool.shutdown().await;
            // The primary's hello, else the first that started, else the first error.
            let hello = match hellos.iter().find(|h| h.is_ok()) {
                Some(h) => h.clone(),
                None => hellos[0].clone(),
            };
            (hello, pool_worker_checks(&hellos, status))
        };
        let reach = futures::future::join_all(
            endpoints
                .iter()
                .map(|(_, m)| reachable(m.base_url().to_string())),
        );
        let (tc, hello, reach) = tokio::join!(tc, worker, reach);
        let tc = tc.unwrap_or_else(|e| {
            (
                Toolchain::unavailable(format!("the search thread failed: {e}")),
                None,
            )
        });
        (tc, hello, reach)
    });
    // A name lookup stuck past its limit must not keep the process alive.
    rt.shutdown_timeout(Duration::from_millis(100));

    let (hello, workers) = hello;
    let (worker, cuda, triton) = worker_checks(&hello);
    let llm = endpoints
        .iter()
        .zip(reach)
        .map(|((role, m), reach)| {
            let key_set = std::env::var(m.key_env()).is_ok_and(|k| !k.trim().is_empty());
            llm_check(role, m, &reach, key_set)
        })
        .collect();
    let report = HealthReport {
        version: env!("CARGO_PKG_VERSION").to_string(),
        config,
        nvrtc: nvrtc_check(&tc.0),
        ptxas: ptxas_check(&tc.0, tc.1.as_deref()),
        nvcc: with_tests_nvcc(nvcc_check(&tc.0, nvcc_off), tests_nvcc().as_deref()),
        headers: headers_check(&tc.0),
        ncu: ncu_check(crate::toolchain::ncu::locate(None).as_deref()),
        worker,
        workers,
        cuda,
        triton,
        llm,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("the report serializes")
        );
    } else {
        print!("{}", render_text(&report));
    }
    ExitCode::from(report.exit_code())
}

/// Reads `--config` with the same parsing the language server applies to its
/// initializationOptions. Fields of the wrong type are named in the `config` finding.
fn read_config(path: Option<&std::path::Path>) -> Result<(Settings, Check), String> {
    let Some(path) = path else {
        return Ok((
            Settings::default(),
            Check::new(
                Level::Ok,
                "no --config: default settings (the editor's settings are not seen)",
            ),
        ));
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--config {}: cannot read it: {e}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        format!(
            "--config {}: not JSON ({e}); write the settings object the editor sends",
            path.display()
        )
    })?;
    let (settings, bad) = Settings::from_json(&value);
    let check = match bad {
        Some(msg) => Check::new(Level::Warn, format!("{}: {msg}", path.display())),
        None => Check::new(Level::Ok, format!("settings from {}", path.display())),
    };
    Ok((settings, check))
}

/// The configured endpoints with their role, strategy first.
fn endpoints(settings: &Settings) -> Vec<(&'static str, ModelSettings)> {
    let mut out = Vec::new();
    if let Some(m) = &settings.llm.strategy {
        out.push(("strategy", m.clone()));
    }
    if let Some(m) = &settings.llm.coder {
        out.push(("coder", m.clone()));
    }
    out
}

/// `Release 12.8, V12.8.93` from `ptxas --version`, or None when it does not answer
/// within 10 s (the path alone is still reported).
fn ptxas_version(path: &std::path::Path) -> Option<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let out = std::process::Command::new(path)
            .arg("--version")
            .stdin(std::process::Stdio::null())
            .output();
        let _ = tx.send(out);
    });
    let out = rx.recv_timeout(Duration::from_secs(10)).ok()?.ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.contains("release"))
        .map(|l| l.trim().to_string())
}

/// Connects to the URL's host and port (no request is sent, so no key either).
async fn reachable(base_url: String) -> Result<(), String> {
    let url =
        reqwest::Url::parse(&base_url).map_err(|e| format!("{base_url:?} is not a URL: {e}"))?;
    let host = url
        .host_str()
        .ok_or_else(|| format!("{base_url:?} has no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = url
        .port_or_known_default()
        .ok_or_else(|| format!("{base_url:?} has no port and no known default for its scheme"))?;
    match tokio::time::timeout(
        CONNECT_LIMIT,
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("cannot connect to {host}:{port}: {e}")),
        Err(_) => Err(format!(
            "no connection to {host}:{port} within {} s",
            CONNECT_LIMIT.as_secs()
        )),
    }
}

fn is_loopback(base_url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(base_url) else {
        return false;
    };
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The NVRTC finding: its version and path, or why it is missing and what to install.
pub fn nvrtc_check(tc: &Toolchain) -> Check {
    match &tc.nvrtc {
        Ok(n) => {
            let (major, minor) = n.version();
            Check::new(
                Level::Ok,
                format!("NVRTC {major}.{minor} at {}", n.path().display()),
            )
        }
        Err(e) => Check::new(
            Level::Warn,
            format!("{e}. Without it kernels are parsed and specs checked, but not compiled"),
        ),
    }
}

/// The nvcc finding: whole-file checks with the project's flags when nvcc is found;
/// otherwise NVRTC checks each file's device side, and the finding says what to install.
pub fn nvcc_check(tc: &Toolchain, off: bool) -> Check {
    if let Some(p) = &tc.nvcc {
        return Check::new(
            Level::Ok,
            format!(
                "nvcc at {}: .cu files are checked whole, as the project builds them (compile_commands.json's flags)",
                p.display()
            ),
        );
    }
    if off {
        return Check::new(
            Level::Ok,
            "off (KERNEL_LSP_NVCC=none or kernel-lsp.cuda.useNvcc = false): NVRTC checks the device side of each file",
        );
    }
    let setting = tc
        .notes
        .iter()
        .find(|n| n.contains("nvccPath"))
        .map(|n| format!("{n}. "))
        .unwrap_or_default();
    Check::new(
        Level::Warn,
        format!(
            "{setting}nvcc not found, so .cu files are checked with NVRTC alone: their device side, with host code blanked; a file whose headers need the project's full build gets a \"not checked\" note instead of errors. Install the CUDA toolkit, or `pip install nvidia-cuda-nvcc nvidia-nvvm nvidia-cuda-crt nvidia-cuda-runtime nvidia-cuda-cccl` (CUDA 13) with g++, or set kernel-lsp.nvccPath"
        ),
    )
}

/// The nvcc that `tests/setup.sh` installs for this repository's tests, when there is
/// one under the current folder's workspace root.
fn tests_nvcc() -> Option<PathBuf> {
    let cwd = std::env::current_dir().ok()?;
    let root = crate::toolchain::project::workspace_root(&cwd.join("x"));
    let p = root.join(".tools/nvcc/nvidia/cu13/bin/nvcc");
    p.is_file().then_some(p)
}

/// An nvcc finding that did not find nvcc, when the tests' own nvcc is there: why the
/// search passed it by (it is kept for the tests that ask for it, so every other check
/// runs as on a machine without nvcc) and how to use it.
fn with_tests_nvcc(check: Check, tests_nvcc: Option<&Path>) -> Check {
    let Some(p) = tests_nvcc.filter(|_| !check.message.starts_with("nvcc at ")) else {
        return check;
    };
    let use_it = format!(
        "; tests/setup.sh installed one for the tests at {} (outside the search on purpose: only the tests that ask for nvcc use it); to check with it, set KERNEL_LSP_NVCC={} or kernel-lsp.cuda.nvccPath",
        p.display(),
        p.display()
    );
    Check::new(check.level, format!("{}{use_it}", check.message))
}

/// The headers finding: where the CUDA headers and CCCL come from, and what is missing
/// (the CUDA headers, CCCL for cooperative groups and `cuda/std`, `crt/mma.h` for WMMA),
/// with what to install.
pub fn headers_check(tc: &Toolchain) -> Check {
    let missing: Vec<&String> = tc
        .notes
        .iter()
        .filter(|n| n.contains("not found") && !n.starts_with("ptxas"))
        .collect();
    if tc.include_dirs.is_empty() && missing.is_empty() {
        return Check::new(
            Level::Warn,
            "no CUDA headers found (NVRTC was not found either)",
        );
    }
    let found: Vec<String> = tc
        .include_dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect();
    let mut message = format!("CUDA headers from {}", found.join(", "));
    if missing.is_empty() {
        return Check::new(Level::Ok, message);
    }
    for m in missing {
        message.push_str("; ");
        message.push_str(m);
    }
    Check::new(Level::Warn, message)
}

/// The Nsight Compute finding (a missing ncu is a warning: profiles are optional).
pub fn ncu_check(ncu: Option<&std::path::Path>) -> Check {
    match ncu {
        Some(p) => Check::new(Level::Ok, format!("ncu at {} (`kernel-lsp profile` works on this machine)", p.display())),
        None => Check::new(
            Level::Warn,
            "ncu (Nsight Compute) not found, so no profiles: `kernel-lsp profile` refuses and the strategy decides from timings and the roofline. Install Nsight Compute (part of the CUDA toolkit), put ncu on PATH, or set KERNEL_LSP_NCU",
        ),
    }
}

/// The ptxas finding; `version` is the `release` line of `ptxas --version`.
pub fn ptxas_check(tc: &Toolchain, version: Option<&str>) -> Check {
    match &tc.ptxas {
        Some(p) => Check::new(
            Level::Ok,
            match version {
                Some(v) => format!("ptxas at {} ({v})", p.display()),
                None => format!("ptxas at {}", p.display()),
            },
        ),
        None => {
            let why = tc
                .notes
                .iter()
                .find(|n| n.starts_with("ptxas not found"))
                .cloned()
                .unwrap_or_else(|| {
                    "ptxas not found, so no register or spill counts. Install the \
                     nvidia-cuda-nvcc-cu12 wheel or the CUDA toolkit, or set \
                     kernel-lsp.ptxasPath"
                        .into()
                });
            Check::new(Level::Warn, why)
        }
    }
}

/// The worker, CUDA and Triton findings from the worker's `hello` (or why it failed).
pub fn worker_checks(hello: &Result<HelloResult, WorkerError>) -> (WorkerCheck, Check, Check) {
    let h = match hello {
        Ok(h) => h,
        Err(e) => {
            let worker = WorkerCheck {
                check: Check::new(
                    Level::Error,
                    format!(
                        "the worker did not start, so nothing can be verified or timed: {}",
                        e.message
                    ),
                ),
                device: None,
            };
            let skipped = || Check::new(Level::Error, "not checked: the worker did not start");
            return (worker, skipped(), skipped());
        }
    };
    let device = h.device.as_ref().map(|d| DeviceSummary {
        name: d.name.clone(),
        arch: d.arch.clone(),
        sms: d.sms,
    });
    let started = format!(
        "started (kernel-lsp {}, protocol {})",
        h.worker_version, h.protocol
    );
    let worker_msg = match &device {
        Some(d) => format!("{started}; GPU {} ({}, {} SMs)", d.name, d.arch, d.sms),
        None => format!("{started}; no GPU: {}", h.cuda.message),
    };
    let cuda = if h.cuda.available {
        Check::new(Level::Ok, format!("CUDA backend: {}", h.cuda.message))
    } else {
        Check::new(
            Level::Warn,
            format!(
                "CUDA backend unavailable: {}. Kernels are still parsed and compiled; to \
                 benchmark and optimize, run where a GPU is or set `worker` to a command \
                 that starts one there (e.g. \"ssh gpu-box kernel-lsp worker\")",
                h.cuda.message
            ),
        )
    };
    let triton = match (h.triton.available, h.triton.interpreter) {
        (true, false) => Check::new(Level::Ok, format!("Triton backend: {}", h.triton.message)),
        (true, true) => Check::new(
            Level::Warn,
            format!(
                "Triton backend on the CPU interpreter ({}): results are real, timings are \
                 not GPU timings",
                h.triton.message
            ),
        ),
        (false, _) => Check::new(
            Level::Warn,
            format!("Triton backend unavailable: {}", h.triton.message),
        ),
    };
    (
        WorkerCheck {
            check: Check::new(Level::Ok, worker_msg),
            device,
        },
        cuda,
        triton,
    )
}

/// One endpoint's finding from its reachability and whether its key variable is set.
pub fn llm_check(
    role: &'static str,
    m: &ModelSettings,
    reach: &Result<(), String>,
    key_set: bool,
) -> LlmCheck {
    let url = m.base_url().to_string();
    let key_env = m.key_env().to_string();
    let mut level = Level::Ok;
    let mut parts = vec![format!("{} `{}` at {url}", m.provider, m.model)];
    match reach {
        Ok(()) => parts.push("reachable".into()),
        Err(e) => {
            level = Level::Error;
            parts.push(format!(
                "not reachable: {e}; start the server or fix `llm.{role}.url`"
            ));
        }
    }
    if key_set {
        parts.push(format!("key variable ${key_env} is set"));
    } else if m.provider == Provider::Anthropic {
        level = Level::Error;
        parts.push(format!(
            "key variable ${key_env} is not set; export it where kernel-lsp starts, or set \
             `llm.{role}.apiKeyEnv` to the variable that holds the key"
        ));
    } else if is_loopback(&url) {
        parts.push(format!(
            "key variable ${key_env} is not set (fine for a local server)"
        ));
    } else {
        level = level.max(Level::Warn);
        parts.push(format!(
            "key variable ${key_env} is not set; a hosted API will refuse the calls: \
             export it, or set `llm.{role}.apiKeyEnv`"
        ));
    }
    LlmCheck {
        role,
        check: Check::new(level, parts.join("; ")),
        url,
        model: m.model.clone(),
        key_env,
        key_set,
    }
}

/// The terminal form: the version, then one `ok`/`warn`/`error` line per check.
pub fn render_text(r: &HealthReport) -> String {
    let mut s = format!("kernel-lsp {}\n", r.version);
    let mut line = |name: &str, c: &Check| {
        s.push_str(&format!("{:<5} {name}: {}\n", c.level.label(), c.message));
    };
    line("config", &r.config);
    line("nvrtc", &r.nvrtc);
    line("ptxas", &r.ptxas);
    line("nvcc", &r.nvcc);
    line("headers", &r.headers);
    line("ncu", &r.ncu);
    line("worker", &r.worker.check);
    if r.workers.len() > 1 {
        for w in &r.workers {
            line(&format!("worker.{}", w.status.index + 1), &w.check);
        }
    }
    line("cuda", &r.cuda);
    line("triton", &r.triton);
    if r.llm.is_empty() {
        line(
            "llm",
            &Check::new(
                Level::Ok,
                "none configured: the embedded policy and rewrites do the work",
            ),
        );
    }
    for l in &r.llm {
        line(&format!("llm.{}", l.role), &l.check);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::protocol::{BackendStatus, DeviceInfo, ErrorKind};
    use expect_test::expect;

    fn hello(device: bool) -> HelloResult {
        HelloResult {
            protocol: 1,
            worker_version: "0.1.0".into(),
            device: device.then(|| DeviceInfo {
                name: "NVIDIA H100 80GB HBM3".into(),
                arch: "sm_90".into(),
                sms: 132,
                warp_size: 32,
                max_threads_per_block: 1024,
                max_block: [1024, 1024, 64],
                max_grid: [2147483647, 65535, 65535],
                smem_per_block: 48 << 10,
                smem_per_block_optin: 227 << 10,
                smem_per_sm: 228 << 10,
                regs_per_block: 65536,
                l2_bytes: 50 << 20,
                mem_bytes: 80 << 30,
                ceilings: None,
            }),
            cuda: BackendStatus {
                available: device,
                message: if device {
                    "driver 12.8".into()
                } else {
                    "no CUDA driver: libcuda.so.1 not found".into()
                },
                interpreter: false,
            },
            triton: BackendStatus {
                available: false,
                message: "cannot import torch".into(),
                interpreter: false,
            },
            compile_cache: None,
        }
    }

    #[test]
    fn no_gpu_is_a_started_worker_and_a_cuda_warning() {
        let (w, cuda, triton) = worker_checks(&Ok(hello(false)));
        assert!(w.check.ok);
        assert_eq!(w.device, None);
        expect!["started (kernel-lsp 0.1.0, protocol 1); no GPU: no CUDA driver: libcuda.so.1 not found"]
            .assert_eq(&w.check.message);
        assert_eq!(cuda.level, Level::Warn);
        assert!(
            cuda.message.contains("ssh gpu-box kernel-lsp worker"),
            "{}",
            cuda.message
        );
        assert_eq!(triton.level, Level::Warn);
    }

    #[test]
    fn a_worker_that_cannot_start_fails_the_report() {
        let err = WorkerError {
            kind: ErrorKind::WorkerLost,
            message: "cannot start `nope worker`: No such file or directory".into(),
            log: None,
        };
        let (w, cuda, _) = worker_checks(&Err(err));
        assert_eq!(w.check.level, Level::Error);
        expect!["the worker did not start, so nothing can be verified or timed: cannot start `nope worker`: No such file or directory"]
            .assert_eq(&w.check.message);
        assert!(!cuda.ok);
    }

    #[test]
    fn llm_findings_name_the_key_variable_never_its_value() {
        let mut m = ModelSettings::new(Provider::Anthropic, "claude");
        m.api_key_env = Some("MY_KEY".into());
        let c = llm_check("coder", &m, &Err("connection refused".into()), false);
        assert_eq!(c.check.level, Level::Error);
        expect!["anthropic `claude` at https://api.anthropic.com; not reachable: connection refused; start the server or fix `llm.coder.url`; key variable $MY_KEY is not set; export it where kernel-lsp starts, or set `llm.coder.apiKeyEnv` to the variable that holds the key"]
            .assert_eq(&c.check.message);

        let mut local = ModelSettings::new(Provider::OpenAi, "qwen");
        local.url = Some("http://localhost:11434/v1/".into());
        let c = llm_check("strategy", &local, &Ok(()), false);
        assert!(c.check.ok, "{}", c.check.message);
        assert_eq!(c.url, "http://localhost:11434/v1");

        let hosted = ModelSettings::new(Provider::OpenAi, "gpt-4o");
        let c = llm_check("strategy", &hosted, &Ok(()), false);
        assert_eq!(c.check.level, Level::Warn);
        assert_eq!(c.key_env, "OPENAI_API_KEY");
    }

    #[test]
    fn nvcc_and_headers_say_what_checks_files_and_what_to_install() {
        let mut tc = Toolchain::unavailable("test".into());
        tc.include_dirs = vec!["/cuda/include".into()];
        tc.notes = vec![
            "CCCL headers (nv/target) not found, so cooperative_groups.h and <cuda/std/...> will not compile. Install the nvidia-cuda-cccl-cu12 wheel".into(),
            "ptxas not found, so no register or spill counts".into(),
        ];
        let h = headers_check(&tc);
        assert_eq!(h.level, Level::Warn);
        assert!(
            h.message
                .starts_with("CUDA headers from /cuda/include; CCCL headers (nv/target) not found")
                && h.message.ends_with("nvidia-cuda-cccl-cu12 wheel"),
            "{}",
            h.message
        );
        let n = nvcc_check(&tc, false);
        assert_eq!(n.level, Level::Warn);
        assert!(
            n.message
                .starts_with("nvcc not found, so .cu files are checked with NVRTC alone"),
            "{}",
            n.message
        );
        assert!(
            n.message.contains("pip install nvidia-cuda-nvcc"),
            "{}",
            n.message
        );
        assert_eq!(nvcc_check(&tc, true).level, Level::Ok);
        // The tests' nvcc (tests/setup.sh) is not searched; the finding says so.
        let tests = Path::new("/repo/.tools/nvcc/nvidia/cu13/bin/nvcc");
        let t = with_tests_nvcc(nvcc_check(&tc, true), Some(tests));
        expect_test::expect!["off (KERNEL_LSP_NVCC=none or kernel-lsp.cuda.useNvcc = false): NVRTC checks the device side of each file; tests/setup.sh installed one for the tests at /repo/.tools/nvcc/nvidia/cu13/bin/nvcc (outside the search on purpose: only the tests that ask for nvcc use it); to check with it, set KERNEL_LSP_NVCC=/repo/.tools/nvcc/nvidia/cu13/bin/nvcc or kernel-lsp.cuda.nvccPath"].assert_eq(&t.message);
        tc.nvcc = Some("/cuda/bin/nvcc".into());
        tc.notes.remove(0);
        assert!(nvcc_check(&tc, false)
            .message
            .starts_with("nvcc at /cuda/bin/nvcc: .cu files are checked whole"));
        assert_eq!(
            headers_check(&tc),
            Check::new(Level::Ok, "CUDA headers from /cuda/include")
        );
    }

    #[test]
    fn text_has_one_levelled_line_per_check() {
        let (worker, cuda, triton) = worker_checks(&Ok(hello(true)));
        let tc = Toolchain::unavailable("test".into());
        let report = HealthReport {
            version: "0.1.0".into(),
            config: Check::new(Level::Ok, "defaults"),
            nvrtc: nvrtc_check(&tc),
            ptxas: ptxas_check(&tc, None),
            nvcc: nvcc_check(&tc, false),
            headers: headers_check(&tc),
            ncu: ncu_check(None),
            worker,
            workers: Vec::new(),
            cuda,
            triton,
            llm: vec![],
        };
        assert_eq!(report.exit_code(), 0);
        expect![[r#"
            kernel-lsp 0.1.0
            ok    config: defaults
            warn  nvrtc: locating NVRTC: test. Without it kernels are parsed and specs checked, but not compiled
            warn  ptxas: ptxas not found, so no register or spill counts. Install the nvidia-cuda-nvcc-cu12 wheel or the CUDA toolkit, or set kernel-lsp.ptxasPath
            warn  nvcc: nvcc not found, so .cu files are checked with NVRTC alone: their device side, with host code blanked; a file whose headers need the project's full build gets a "not checked" note instead of errors. Install the CUDA toolkit, or `pip install nvidia-cuda-nvcc nvidia-nvvm nvidia-cuda-crt nvidia-cuda-runtime nvidia-cuda-cccl` (CUDA 13) with g++, or set kernel-lsp.nvccPath
            warn  headers: no CUDA headers found (NVRTC was not found either)
            warn  ncu: ncu (Nsight Compute) not found, so no profiles: `kernel-lsp profile` refuses and the strategy decides from timings and the roofline. Install Nsight Compute (part of the CUDA toolkit), put ncu on PATH, or set KERNEL_LSP_NCU
            ok    worker: started (kernel-lsp 0.1.0, protocol 1); GPU NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)
            ok    cuda: CUDA backend: driver 12.8
            warn  triton: Triton backend unavailable: cannot import torch
            ok    llm: none configured: the embedded policy and rewrites do the work
        "#]]
        .assert_eq(&render_text(&report));
    }
}
