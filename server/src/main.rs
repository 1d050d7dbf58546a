//! The `kernel-lsp` binary: `serve` (the default) speaks LSP on stdio; `check` prints
//! the diagnostics an editor would get; `bench` and `device` run on a worker; `worker` is
//! the GPU worker process itself. Logs go to stderr, never stdout (the LSP channel).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "kernel-lsp",
    version,
    about = "A language server that makes GPU kernels faster and proves it"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the Language Server Protocol on stdin/stdout (the default).
    Serve,
    /// Check kernel files: syntax, @bench specs and NVRTC compile, printed compiler-style.
    /// Exits 1 when any error is found, 2 when a file cannot be read.
    Check(kernel_lsp::cli::check::CheckArgs),
    /// Verify and time the kernels of a file that have a @bench spec, on a worker.
    /// Exits 1 when a verification fails or the worker cannot run the file's language.
    Bench(kernel_lsp::cli::bench::BenchArgs),
    /// Optimize one kernel step by step (verified and timed through a worker); print a
    /// table per step, append to `.kernel-lsp/` history, and with --apply write the best
    /// verified version back (backup kept).
    Optimize(kernel_lsp::cli::optimize::OptimizeArgs),
    /// Write a version a recorded optimize run made (default: the last run's best) into
    /// the file, with a backup, with no new search.
    Apply(kernel_lsp::cli::apply::ApplyArgs),
    /// Profile one kernel with Nsight Compute (`ncu`) on this machine: a table of
    /// throughput, occupancy, stalls and access metrics, and a one-line diagnosis.
    Profile(kernel_lsp::cli::profile::ProfileArgs),
    /// Write a kernel's optimization history as an HTML page with an SVG chart of the
    /// time per step and the table of every attempt.
    Report(kernel_lsp::cli::report::ReportArgs),
    /// Run COMMAND (a script, a test) and write a @bench spec for every Triton kernel it
    /// launches, from the launches themselves: `capture [--apply] -- python train.py`.
    Capture(kernel_lsp::cli::capture::CaptureArgs),
    /// Write a spec'd kernel skeleton (and its PyTorch reference) from a KernelBench-format
    /// problem: `Model` with `forward`, `get_inputs()`, `get_init_inputs()`.
    #[command(name = "import-kernelbench")]
    ImportKernelbench(kernel_lsp::cli::kernelbench::ImportArgs),
    /// Start one worker and print its GPU, measured ceilings and backend status.
    /// Exits 1 when the worker has no GPU.
    Device(kernel_lsp::cli::device::DeviceArgs),
    /// Check the setup for an editor's health check: version, NVRTC, ptxas, the worker
    /// (GPU, CUDA and Triton backends) and the configured LLM endpoints. Exits 1 only
    /// when the worker cannot start.
    Health(kernel_lsp::cli::health::HealthArgs),
    /// Run a GPU worker: JSON lines on stdin/stdout (docs/worker-protocol.md). Started
    /// by the server, locally or as `ssh HOST kernel-lsp worker`.
    Worker(WorkerArgs),
}

#[derive(clap::Args)]
struct WorkerArgs {
    /// Keep one worker running and serve it on this Unix socket, one client at a time:
    /// its Python helper and CUDA context stay warm between clients (a worker kept warm
    /// between CLI commands). Clients use `--connect PATH` as their worker command.
    #[arg(long, value_name = "PATH", conflicts_with = "connect")]
    listen: Option<std::path::PathBuf>,
    /// With --listen: exit after this many seconds without a client.
    #[arg(long, value_name = "SECS", requires = "listen")]
    idle_exit: Option<u64>,
    /// Be the worker listening on this Unix socket (`--listen`): carry the protocol
    /// between stdin/stdout and it.
    #[arg(long, value_name = "PATH")]
    connect: Option<std::path::PathBuf>,
    /// With --listen: the worker command to keep (default: this binary's `worker`).
    #[arg(last = true, value_name = "COMMAND", requires = "listen")]
    command: Vec<String>,
}

fn worker(args: WorkerArgs) -> std::process::ExitCode {
    #[cfg(unix)]
    {
        use kernel_lsp::worker::listen;
        if let Some(path) = &args.listen {
            let idle = args.idle_exit.map(std::time::Duration::from_secs);
            return listen::listen(path, idle, &args.command);
        }
        if let Some(path) = &args.connect {
            return listen::connect(path);
        }
    }
    #[cfg(not(unix))]
    if args.listen.is_some() || args.connect.is_some() {
        eprintln!("kernel-lsp worker: --listen and --connect need Unix sockets");
        return std::process::ExitCode::from(1);
    }
    kernel_lsp::worker::serve::run()
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KERNEL_LSP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_ansi(false)
        .init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("kernel-lsp: cannot start the async runtime: {e}");
                    return ExitCode::from(2);
                }
            };
            let code = rt.block_on(kernel_lsp::lsp::serve_stdio());
            // tokio's stdin reader is a blocking thread stuck in read(); waiting for it
            // would keep the process alive after `exit` until the client closes stdin.
            rt.shutdown_background();
            ExitCode::from(code as u8)
        }
        Command::Check(args) => kernel_lsp::cli::check::run(&args),
        Command::Bench(args) => kernel_lsp::cli::bench::run(&args),
        Command::Optimize(args) => kernel_lsp::cli::optimize::run(&args),
        Command::Report(args) => kernel_lsp::cli::report::run(&args),
        Command::Apply(args) => kernel_lsp::cli::apply::run(&args),
        Command::Profile(args) => kernel_lsp::cli::profile::run(&args),
        Command::Device(args) => kernel_lsp::cli::device::run(&args),
        Command::Capture(args) => kernel_lsp::cli::capture::run(&args),
        Command::ImportKernelbench(args) => kernel_lsp::cli::kernelbench::run(&args),
        Command::Health(args) => kernel_lsp::cli::health::run(&args),
        Command::Worker(args) => worker(args),
    }
}
