//! A worker kept warm between commands: `kernel-lsp worker --listen PATH` serves the
//! worker protocol on a Unix socket, one client at a time, and keeps its backends (the
//! Python helper with torch and Triton loaded, the CUDA context) between clients;
//! `kernel-lsp worker --connect PATH` is the worker command a pool runs to use it (it
//! carries the protocol between its stdin/stdout and the socket). A CLI command then
//! starts in a fraction of a second instead of paying the helper's start (about 3 s on
//! a GPU machine) every time.

use std::io::{BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::serve::{serve, Backends, ServeExit};

/// Serve clients on `path` until a backend is poisoned or panics (the process's CUDA
/// state is gone: exit, like a stdio worker), or no client came for `idle_exit`.
pub fn listen(path: &Path, idle_exit: Option<Duration>) -> ExitCode {
    let listener = match bind(path) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("kernel-lsp worker --listen {}: {e}", path.display());
            return ExitCode::from(1);
        }
    };
    eprintln!(
        "kernel-lsp worker: listening on {} (use `kernel-lsp worker --connect {}` as a worker command)",
        path.display(),
        path.display()
    );
    let mut backends = Backends::default_backends();
    let mut idle_since = Instant::now();
    let code = loop {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if idle_exit.is_some_and(|limit| idle_since.elapsed() >= limit) {
                    eprintln!("kernel-lsp worker: no client for {idle_exit:?}; exiting");
                    break 0;
                }
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(e) => {
                eprintln!("kernel-lsp worker: accepting a client failed: {e}");
                break 1;
            }
        };
        // The client's stream blocks; only accepting polls.
        let _ = stream.set_nonblocking(false);
        let exit = match stream.try_clone() {
            Ok(reader) => serve(BufReader::new(reader), &stream, &mut backends),
            Err(e) => {
                eprintln!("kernel-lsp worker: the client's socket: {e}");
                ServeExit::ChannelClosed
            }
        };
        idle_since = Instant::now();
        match exit {
            // The client is done (EOF or `shutdown`) or gone: wait for the next one.
            ServeExit::Done | ServeExit::ChannelClosed => continue,
            ServeExit::Poisoned | ServeExit::Panicked => {
                eprintln!(
                    "kernel-lsp worker: exiting after a {} (a fresh `--listen` worker is needed)",
                    if exit == ServeExit::Poisoned {
                        "fault"
                    } else {
                        "panic"
                    }
                );
                break exit.code();
            }
        }
    };
    let _ = std::fs::remove_file(path);
    ExitCode::from(code)
}

/// Binds `path`, replacing a socket file nobody listens on; refuses when a worker
/// already listens there or the path is something else. Readable and writable by this
/// user only: a client runs code on this GPU.
fn bind(path: &Path) -> Result<UnixListener, String> {
    if path.exists() {
        let is_socket = std::fs::symlink_metadata(path).is_ok_and(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_socket()
        });
        if !is_socket {
            return Err("the path exists and is not a socket".into());
        }
        if UnixStream::connect(path).is_ok() {
            return Err("a worker already listens there".into());
        }
        std::fs::remove_file(path).map_err(|e| format!("removing the stale socket: {e}"))?;
    }
    let listener = UnixListener::bind(path).map_err(|e| format!("cannot listen there: {e}"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("setting the socket's permissions: {e}"))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("the socket: {e}"))?;
    Ok(listener)
}

/// Carry the protocol between stdin/stdout and the worker listening on `path`, until
/// either side ends. Exits 1 with a message when nobody listens there.
pub fn connect(path: &Path) -> ExitCode {
    let stream = match UnixStream::connect(path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "kernel-lsp worker --connect {}: no worker listens there ({e}); start one with `kernel-lsp worker --listen {}`",
                path.display(),
                path.display()
            );
            return ExitCode::from(1);
        }
    };
    let (mut to_worker, mut from_worker) = match stream.try_clone() {
        Ok(s) => (s, stream),
        Err(e) => {
            eprintln!("kernel-lsp worker --connect {}: {e}", path.display());
            return ExitCode::from(1);
        }
    };
    // Requests: stdin to the socket; at stdin's end the socket's writing half closes, so
    // the worker sees the end of its client.
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let _ = copy_flushing(&mut stdin, &mut to_worker);
        let _ = to_worker.shutdown(std::net::Shutdown::Write);
    });
    // Replies: the socket to stdout, until the worker closes it.
    let mut stdout = std::io::stdout().lock();
    match copy_flushing(&mut from_worker, &mut stdout) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kernel-lsp worker --connect {}: {e}", path.display());
            ExitCode::from(1)
        }
    }
}

/// Copies until EOF, flushing after every read (replies are lines a pool waits for).
fn copy_flushing(from: &mut impl Read, to: &mut impl Write) -> std::io::Result<()> {
    let mut buf = [0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
        to.flush()?;
    }
}
