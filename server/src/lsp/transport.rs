//! The framing layer between the client's byte streams and tower-lsp. tower-lsp stops
//! serving at the first frame it cannot decode, so it only ever sees frames that
//! [`frame::Decoder`] has checked:
//!
//! ```text
//! input ─▶ reader task (Decoder) ─valid frames─▶ duplex ─▶ tower-lsp Server
//!               │ error replies                                   │ its frames
//!               ▼                                                 ▼
//!            frames channel ◀──────────── forwarder task ◀──── duplex
//!               │
//!               ▼
//!          writer task ─▶ output   (the only writer: whole frames, never interleaved)
//! ```
//!
//! Dropped frames are logged (tracing, stderr) and, for requests, answered through the
//! same writer as tower-lsp's own output.

use std::time::Duration;

use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{error, warn};

use super::frame::{self, Decoder, Event};

/// How long the input must pause before a body that is complete JSON but short of its
/// Content-Length is settled as a wrong length ([`Decoder::stalled`]).
pub const STALL: Duration = Duration::from_millis(250);
/// Bytes the in-memory pipes hold before their writer waits.
const PIPE: usize = 1 << 16;

/// The running tasks; [`Transport::finish`] ends them.
pub struct Transport {
    reader: JoinHandle<()>,
    forwarder: JoinHandle<()>,
    writer: JoinHandle<()>,
}

/// Start the layer over `input` and `output`. Returns the pipe ends tower-lsp reads
/// from and writes to (`Server::new(to_server, from_server, socket)`).
pub fn start<I, O>(input: I, output: O) -> (DuplexStream, DuplexStream, Transport)
where
    I: AsyncRead + Unpin + Send + 'static,
    O: AsyncWrite + Unpin + Send + 'static,
{
    let (frames_tx, frames_rx) = mpsc::channel::<Vec<u8>>(64);
    let (to_server_w, to_server_r) = tokio::io::duplex(PIPE);
    let (from_server_w, from_server_r) = tokio::io::duplex(PIPE);
    let reader = tokio::spawn(read_input(input, to_server_w, frames_tx.clone()));
    let forwarder = tokio::spawn(forward_server_output(from_server_r, frames_tx));
    let writer = tokio::spawn(write_output(output, frames_rx));
    (
        to_server_r,
        from_server_w,
        Transport {
            reader,
            forwarder,
            writer,
        },
    )
}

impl Transport {
    /// Stop reading input (tower-lsp has ended or must: drop its pipe ends first), then
    /// let the writer send what it already holds, for at most `grace`.
    pub async fn finish(self, grace: Duration) {
        // The reader may be parked in a read that never returns (stdin).
        self.reader.abort();
        let drained = async {
            let _ = self.forwarder.await;
            let _ = self.writer.await;
        };
        if tokio::time::timeout(grace, drained).await.is_err() {
            warn!("output not flushed within {grace:?} of the end");
        }
    }
}

async fn read_input<I: AsyncRead + Unpin>(
    mut input: I,
    mut to_server: DuplexStream,
    replies: mpsc::Sender<Vec<u8>>,
) {
    let mut decoder = Decoder::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        while let Some(ev) = decoder.next_event() {
            if !deliver(ev, &mut to_server, &replies).await {
                return;
            }
        }
        let read = if decoder.may_stall() {
            match tokio::time::timeout(STALL, input.read(&mut chunk)).await {
                Ok(read) => read,
                Err(_) => {
                    if let Some(ev) = decoder.stalled() {
                        if !deliver(ev, &mut to_server, &replies).await {
                            return;
                        }
                    }
                    continue;
                }
            }
        } else {
            input.read(&mut chunk).await
        };
        match read {
            Ok(0) => break,
            Ok(n) => decoder.push(&chunk[..n]),
            Err(e) => {
                error!("cannot read the client's input: {e}");
                break;
            }
        }
    }
    if let Some(why) = decoder.finish() {
        warn!("{why}");
    }
    // Dropping `to_server` ends tower-lsp's input: it finishes what is running and stops.
}

/// Forward a message to tower-lsp, or log a rejection and queue its reply. False when
/// tower-lsp is gone.
async fn deliver(ev: Event, to_server: &mut DuplexStream, replies: &mpsc::Sender<Vec<u8>>) -> bool {
    match ev {
        Event::Message(body) => {
            let framed = frame::encode(&body);
            to_server.write_all(&framed).await.is_ok()
        }
        Event::Rejected(r) => {
            error!(
                code = r.code,
                id = %r.id,
                "dropped a message from the client: {}; it began with: {}",
                r.reason,
                r.sample
            );
            match r.reply() {
                Some(reply) => replies.send(reply).await.is_ok(),
                None => true,
            }
        }
    }
}

/// tower-lsp's output, cut into whole frames for the writer. Its frames are well
/// formed (`Content-Length: N\r\n\r\n` + N bytes), so a plain reader does.
async fn forward_server_output(from_server: DuplexStream, frames: mpsc::Sender<Vec<u8>>) {
    let mut r = BufReader::new(from_server);
    loop {
        let mut framed = Vec::new();
        let mut len = None;
        loop {
            let start = framed.len();
            match r.read_until(b'\n', &mut framed).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let line = framed[start..].trim_ascii();
            if line.is_empty() {
                break;
            }
            if let Some(v) = std::str::from_utf8(line)
                .ok()
                .and_then(|l| l.strip_prefix("Content-Length:"))
            {
                len = v.trim().parse::<usize>().ok();
            }
        }
        let Some(len) = len else {
            error!("tower-lsp wrote a frame without a Content-Length; output stopped");
            return;
        };
        let head = framed.len();
        framed.resize(head + len, 0);
        if r.read_exact(&mut framed[head..]).await.is_err() || frames.send(framed).await.is_err() {
            return;
        }
    }
}

/// The one writer of the output: whole frames, in the order they were queued.
async fn write_output<O: AsyncWrite + Unpin>(mut output: O, mut frames: mpsc::Receiver<Vec<u8>>) {
    while let Some(framed) = frames.recv().await {
        if let Err(e) = async {
            output.write_all(&framed).await?;
            output.flush().await
        }
        .await
        {
            error!("cannot write to the client: {e}");
            return;
        }
    }
}
