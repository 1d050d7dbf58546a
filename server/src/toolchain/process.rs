//! Running a helper program (ptxas, the python3 probe) with a time limit.
//!
//! std has no "wait with timeout", so the child is polled and killed at the deadline.
//! Its pipes are drained on threads so a chatty child cannot block on a full pipe.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::ToolError;

pub(crate) struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` to completion or kills it after `timeout`. `what` names it in errors.
pub(crate) fn run_with_timeout(
    mut cmd: Command,
    timeout: Duration,
    what: &str,
) -> Result<Finished, ToolError> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| ToolError::Io {
        what: format!("starting {what}"),
        reason: e.to_string(),
    })?;
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                kill(&mut child);
                return Err(ToolError::Timeout {
                    what: what.to_string(),
                    millis: timeout.as_millis() as u64,
                });
            }
            Ok(None) => thread::sleep(Duration::from_millis(5)),
            Err(e) => {
                kill(&mut child);
                return Err(ToolError::Io {
                    what: format!("waiting for {what}"),
                    reason: e.to_string(),
                });
            }
        }
    };
    Ok(Finished {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

fn kill(child: &mut Child) {
    // Already exited is fine; the point is that nothing outlives the deadline.
    let _ = child.kill();
    let _ = child.wait();
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        String::from_utf8_lossy(&buf).into_owned()
    })
}
