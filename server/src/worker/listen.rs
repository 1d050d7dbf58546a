//! A worker kept warm between commands: `kernel-lsp worker --listen PATH` keeps one
//! stdio worker running (this binary's `worker`, or the command after `--`) and serves
//! it on a Unix socket, one client at a time; `kernel-lsp worker --connect PATH` is the
//! worker command a pool runs to use it (it carries the protocol between its
//! stdin/stdout and the socket). The worker's Python helper and CUDA context stay up
//! between clients, so a CLI command starts in a fraction of a second instead of paying
//! the helper's start (about 3 s on a GPU machine) every time.
//!
//! The listener stands where a pool would: a client that goes away while its request
//! runs (a pool's time limit, a cancel, a killed command) gets the worker killed and a
//! fresh one started, as a pool kills a stdio worker; a worker that exits (after a
//! fault) is started again for the next client. A client's `shutdown` ends that client
//! only.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::protocol::{ErrorKind, OpResult, Reply, ReplyBody};
use super::serve::{error_reply, write_reply};

/// The worker the listener keeps.
struct Kept {
    child: Arc<Mutex<Child>>,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
}

impl Kept {
    /// Starts `command` and asks it `hello` (which starts its backends), so it is warm
    /// before a client comes.
    fn start(command: &[String]) -> Result<Kept, String> {
        let (program, args) = command.split_first().ok_or("an empty worker command")?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        // Its own process group, stopped as a pool stops its workers (`kill_group`):
        // SIGTERM first, so an `srun` can cancel its step, then SIGKILL for the whole
        // group (a Python helper, a shell's children).
        cmd.process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("starting `{}`: {e}", command.join(" ")))?;
        let to = child.stdin.take().ok_or("no stdin")?;
        let from = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut kept = Kept {
            child: Arc::new(Mutex::new(child)),
            to,
            from,
        };
        let hello = format!("{{\"id\":{},\"op\":\"hello\"}}\n", u64::MAX);
        let warm = kept
            .to
            .write_all(hello.as_bytes())
            .and_then(|()| kept.to.flush())
            .map_err(|e| e.to_string())
            .and_then(|()| loop {
                let mut line = String::new();
                match kept.from.read_line(&mut line) {
                    Ok(0) => break Err("it exited".to_string()),
                    Ok(_) if is_final(&line, u64::MAX) => break Ok(()),
                    Ok(_) => {}
                    Err(e) => break Err(e.to_string()),
                }
            });
        if let Err(e) = warm {
            kept.kill();
            return Err(format!("the worker did not answer `hello`: {e}"));
        }
        Ok(kept)
    }

    fn kill(&mut self) {
        if let Ok(mut c) = self.child.lock() {
            stop(&mut c);
            let _ = c.wait();
        }
    }

    /// How the worker ended ("exit status: 3", "signal: 9"), once it has.
    fn ended(&mut self) -> String {
        self.child.lock().map_or_else(
            |_| "unknown".into(),
            |mut c| c.wait().map_or_else(|e| e.to_string(), |s| s.to_string()),
        )
    }

    fn exited(&self) -> bool {
        self.child
            .lock()
            .map_or(true, |mut c| !matches!(c.try_wait(), Ok(None)))
    }
}

/// Stops a kept worker's process group (see [`Kept::start`]), unless it has ended.
fn stop(child: &mut Child) {
    if matches!(child.try_wait(), Ok(None)) {
        super::pool::kill_group(child.id());
    }
}

/// Whether `line` is the final reply (not progress) to request `id`.
fn is_final(line: &str, id: u64) -> bool {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
        return false;
    };
    v.get("id").and_then(|i| i.as_u64()) == Some(id)
        && v.get("status").and_then(|s| s.as_str()) != Some("progress")
}

/// How serving one client ended.
enum Ended {
    /// EOF or `shutdown` between requests: the worker is idle and kept.
    Done,
    /// The client went away during a request, or the worker ended: start a fresh one.
    Replace,
}

/// Serve clients on `path` with one kept worker (`command`, else this binary's
/// `worker`) until no client came for `idle_exit`.
pub fn listen(path: &Path, idle_exit: Option<Duration>, command: &[String]) -> ExitCode {
    let command: Vec<String> = if command.is_empty() {
        let exe = std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "kernel-lsp".into());
        vec![exe, "worker".into()]
    } else {
        command.to_vec()
    };
    let listener = match bind(path) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("kernel-lsp worker --listen {}: {e}", path.display());
            return ExitCode::from(1);
        }
    };
    let mut kept = match Kept::start(&command) {
        Ok(k) => Some(k),
        Err(e) => {
            eprintln!("kernel-lsp worker --listen {}: {e}", path.display());
            let _ = std::fs::remove_file(path);
            return ExitCode::from(1);
        }
    };
    eprintln!(
        "kernel-lsp worker: listening on {} (use `kernel-lsp worker --connect {}` as a worker command)",
        path.display(),
        path.display()
    );
    let mut idle_since = Instant::now();
    // A client that came while the last one was leaving: served next.
    let handed: Arc<Mutex<Option<UnixStream>>> = Arc::new(Mutex::new(None));
    let code = loop {
        // A worker that ended (a fault) or was replaced is started again before the
        // next client, so that client finds it warm.
        if kept.as_ref().is_none_or(Kept::exited) {
            if let Some(mut k) = kept.take() {
                k.kill();
            }
            match Kept::start(&command) {
                Ok(k) => kept = Some(k),
                Err(e) => {
                    eprintln!("kernel-lsp worker: {e}; exiting");
                    break 1;
                }
            }
        }
        let waiting = handed.lock().ok().and_then(|mut h| h.take());
        let stream = match waiting.map_or_else(|| listener.accept().map(|(s, _)| s), Ok) {
            Ok(s) => s,
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
        let _ = stream.set_nonblocking(false);
        // Meanwhile, another client waits a moment for this one to leave (a pool that
        // replaces its worker, or a command that starts as the last one ends), then is
        // refused rather than left waiting.
        let stop = Arc::new(AtomicBool::new(false));
        let refuser = listener.try_clone().ok().map(|l| {
            let (stop, handed) = (stop.clone(), handed.clone());
            std::thread::spawn(move || refuse_while_busy(&l, &stop, &handed))
        });
        let ended = serve_client(stream, &mut kept, &command);
        stop.store(true, Ordering::SeqCst);
        if let Some(r) = refuser {
            let _ = r.join();
        }
        if let Ended::Replace = ended {
            if let Some(mut k) = kept.take() {
                k.kill();
            }
        }
        idle_since = Instant::now();
    };
    if let Some(mut k) = kept.take() {
        k.kill();
    }
    let _ = std::fs::remove_file(path);
    ExitCode::from(code)
}

/// Carries one client's requests to the kept worker and its replies back.
fn serve_client(stream: UnixStream, kept: &mut Option<Kept>, command: &[String]) -> Ended {
    let ended = carry(&stream, kept, command);
    // Ends the client's reader thread too, and tells the client it is done.
    let _ = stream.shutdown(std::net::Shutdown::Both);
    ended
}

fn carry(stream: &UnixStream, kept: &mut Option<Kept>, command: &[String]) -> Ended {
    let Ok(reader) = stream.try_clone() else {
        return Ended::Done;
    };
    let Some(worker) = kept.as_mut() else {
        return Ended::Replace;
    };
    // The worker the reader thread kills when the client leaves mid-request (it follows
    // a replacement).
    let current: Arc<Mutex<Arc<Mutex<Child>>>> = Arc::new(Mutex::new(worker.child.clone()));
    // The client's lines come through a thread that always reads, so a client that
    // goes away while its request runs is seen at once: it kills the worker (the
    // request can no longer be answered; a hung kernel is stopped).
    let busy = Arc::new(Mutex::new(false));
    let gone = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    {
        let (busy, gone, current) = (busy.clone(), gone.clone(), current.clone());
        std::thread::spawn(move || {
            let mut input = BufReader::new(reader);
            loop {
                let mut line = String::new();
                match input.read_line(&mut line) {
                    Ok(n) if n > 0 => {
                        if tx.send(line).is_err() {
                            return;
                        }
                    }
                    _ => break,
                }
            }
            if let Ok(b) = busy.lock() {
                if *b {
                    gone.store(true, Ordering::SeqCst);
                    if let Some(child) = current.lock().ok().map(|c| c.clone()) {
                        if let Ok(mut c) = child.lock() {
                            stop(&mut c);
                        }
                    }
                }
            }
        });
    }
    let mut client_out = stream;
    while let Ok(mut line) = rx.recv() {
        if line.trim().is_empty() {
            continue;
        }
        let request: Option<serde_json::Value> = serde_json::from_str(&line).ok();
        let id = request
            .as_ref()
            .and_then(|v| v.get("id"))
            .and_then(|i| i.as_u64())
            .unwrap_or(0);
        // `shutdown` ends this client, not the worker the next client will use.
        if request
            .as_ref()
            .and_then(|v| v.get("op"))
            .and_then(|o| o.as_str())
            == Some("shutdown")
        {
            let reply = Reply {
                id,
                body: ReplyBody::Ok {
                    result: Box::new(OpResult::Shutdown),
                },
            };
            let _ = write_reply(&mut client_out, &reply);
            return Ended::Done;
        }
        if !line.ends_with('\n') {
            line.push('\n');
        }
        if let Ok(mut b) = busy.lock() {
            *b = true;
        }
        let Some(worker) = kept.as_mut() else {
            return Ended::Replace;
        };
        if worker
            .to
            .write_all(line.as_bytes())
            .and_then(|()| worker.to.flush())
            .is_err()
        {
            return Ended::Replace;
        }
        let finished = loop {
            let mut reply = String::new();
            match worker.from.read_line(&mut reply) {
                // The worker ended mid-request (a crash, or killed because the client
                // left): the client sees its worker end, as with a stdio worker, and
                // the next client gets a fresh worker.
                Ok(0) | Err(_) => break false,
                Ok(_) => {}
            }
            if client_out
                .write_all(reply.as_bytes())
                .and_then(|()| client_out.flush())
                .is_err()
            {
                gone.store(true, Ordering::SeqCst);
            }
            if is_final(&reply, id) {
                break true;
            }
        };
        if let Ok(mut b) = busy.lock() {
            *b = false;
        }
        if gone.load(Ordering::SeqCst) {
            return Ended::Replace;
        }
        if !finished {
            // The worker died under a client that is still there: answer the request
            // as lost and go on with a fresh worker, as a pool replaces a stdio worker.
            let status = worker.ended();
            let restarted = Kept::start(command);
            let message = format!(
                "the worker this listener keeps exited during the request ({status}); {}",
                match &restarted {
                    Ok(_) => "a fresh one was started".to_string(),
                    Err(e) => format!("starting a fresh one failed: {e}"),
                }
            );
            let _ = write_reply(
                &mut client_out,
                &error_reply(id, ErrorKind::WorkerLost, message),
            );
            match restarted {
                Ok(fresh) => {
                    if let Ok(mut c) = current.lock() {
                        *c = fresh.child.clone();
                    }
                    if let Some(mut old) = kept.replace(fresh) {
                        old.kill();
                    }
                }
                Err(_) => return Ended::Replace,
            }
        }
    }
    Ended::Done
}

/// How long a client that connects while another is served waits for that one to leave
/// before it is refused.
const HANDOVER_WAIT: Duration = Duration::from_secs(5);

/// Until `stop`: a client that connects waits up to [`HANDOVER_WAIT`] for the one being
/// served to leave, and is then put in `handed` (served next) or, when that one is still
/// there, answered with an error to its first request and closed (the kept worker
/// serves one client at a time). The wait covers a pool that replaces its worker
/// process, and a command that starts as the last one ends, while the listener has not
/// yet seen the last client go.
fn refuse_while_busy(
    listener: &UnixListener,
    stop: &AtomicBool,
    handed: &Mutex<Option<UnixStream>>,
) {
    while !stop.load(Ordering::SeqCst) {
        let Ok((extra, _)) = listener.accept() else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let t0 = Instant::now();
        while !stop.load(Ordering::SeqCst) && t0.elapsed() < HANDOVER_WAIT {
            std::thread::sleep(Duration::from_millis(20));
        }
        if stop.load(Ordering::SeqCst) {
            if let Ok(mut h) = handed.lock() {
                *h = Some(extra);
            }
            return;
        }
        let _ = extra.set_nonblocking(false);
        let _ = extra.set_read_timeout(Some(Duration::from_secs(5)));
        let mut line = String::new();
        let Ok(reader) = extra.try_clone() else {
            continue;
        };
        let _ = BufReader::new(reader).read_line(&mut line);
        let id = serde_json::from_str::<serde_json::Value>(&line)
            .ok()
            .and_then(|v| v.get("id").and_then(|i| i.as_u64()))
            .unwrap_or(0);
        let reply = error_reply(
            id,
            ErrorKind::BadRequest,
            "this listening worker is serving another client (a `--listen` worker serves one \
             client at a time; start one listener per worker of a pool)"
                .into(),
        );
        let _ = write_reply(&mut &extra, &reply);
    }
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
    // the listener sees its client leave.
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let _ = copy_flushing(&mut stdin, &mut to_worker);
        let _ = to_worker.shutdown(std::net::Shutdown::Write);
    });
    // Replies: the socket to stdout, until the listener closes it.
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
