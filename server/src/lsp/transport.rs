//! The framing layer between the client's byte streams and tower-lsp's service. tower-lsp's
//! own transport stops serving at the first frame it cannot decode, and its frame buffer
//! keeps the capacity of the largest message for the server's lifetime (a 20 MB
//! document: 33 MB, issue #16). So the server reads and writes frames itself and hands
//! tower-lsp's `LspService` only messages that [`frame::Decoder`] has checked, as
//! tower-lsp's `Server::serve` would (the same concurrency, the same answers):
//!
//! ```text
//! input ─▶ reader task (Decoder) ─valid bodies─▶ serve_messages ─▶ LspService
//!               │ error replies                    │ answers, requests to the client
//!               ▼                                  ▼
//!            frames channel ◀──────────────────────┘
//!               │
//!               ▼
//!          writer task ─▶ output   (the only writer: whole frames, never interleaved)
//! ```
//!
//! Dropped frames are logged (tracing, stderr) and, for requests, answered through the
//! same writer as the service's own output.

use std::time::Duration;

use futures::{future, SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tower_lsp::jsonrpc::{Error, Id, Request, Response};
use tower_lsp::ClientSocket;
use tracing::{error, warn};

use super::frame::{self, Decoder, Event};

/// How long the input must pause before a body that is complete JSON but short of its
/// Content-Length is settled as a wrong length ([`Decoder::stalled`]).
pub const STALL: Duration = Duration::from_millis(250);
/// Checked messages waiting for the service.
const QUEUED_BODIES: usize = 16;
/// Requests the service runs at once (tower-lsp's `Server` default).
const MAX_CONCURRENCY: usize = 4;
/// Requests started and waiting for a turn (tower-lsp's `Server` queue).
const MESSAGE_QUEUE_SIZE: usize = 100;

/// The running tasks; [`Transport::finish`] ends them.
pub struct Transport {
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

/// Start the layer over `input` and `output`. Returns the checked messages and
/// the sender of whole frames to the output: [`serve_messages`] takes both.
pub fn start<I, O>(input: I, output: O) -> (mpsc::Receiver<Value>, mpsc::Sender<Vec<u8>>, Transport)
where
    I: AsyncRead + Unpin + Send + 'static,
    O: AsyncWrite + Unpin + Send + 'static,
{
    let (frames_tx, frames_rx) = mpsc::channel::<Vec<u8>>(64);
    let (bodies_tx, bodies_rx) = mpsc::channel::<Value>(QUEUED_BODIES);
    let reader = tokio::spawn(read_input(input, bodies_tx, frames_tx.clone()));
    let writer = tokio::spawn(write_output(output, frames_rx));
    (bodies_rx, frames_tx, Transport { reader, writer })
}

impl Transport {
    /// Stop reading input (the service has ended or must: drop [`serve_messages`] and the
    /// frame senders first), then let the writer send what it already holds, for at most
    /// `grace`.
    pub async fn finish(self, grace: Duration) {
        // The reader may be parked in a read that never returns (stdin).
        self.reader.abort();
        let _ = self.reader.await;
        if tokio::time::timeout(grace, self.writer).await.is_err() {
            warn!("output not flushed within {grace:?} of the end");
        }
    }
}

async fn read_input<I: AsyncRead + Unpin>(
    mut input: I,
    bodies: mpsc::Sender<Value>,
    replies: mpsc::Sender<Vec<u8>>,
) {
    let mut decoder = Decoder::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        while let Some(ev) = decoder.next_event() {
            if !deliver(ev, &bodies, &replies).await {
                return;
            }
        }
        let read = if decoder.may_stall() {
            match tokio::time::timeout(STALL, input.read(&mut chunk)).await {
                Ok(read) => read,
                Err(_) => {
                    if let Some(ev) = decoder.stalled() {
                        if !deliver(ev, &bodies, &replies).await {
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
    // Dropping `bodies` ends the service's input: it finishes what is running and stops.
}

/// Forward a message to the service, or log a rejection and queue its reply. False when
/// the service is gone.
async fn deliver(ev: Event, bodies: &mpsc::Sender<Value>, replies: &mpsc::Sender<Vec<u8>>) -> bool {
    match ev {
        Event::Message(message) => bodies.send(message).await.is_ok(),
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

/// Run tower-lsp's service over checked messages, as tower-lsp's `Server::serve`
/// does: requests (and notifications) go to `service`, at most [`MAX_CONCURRENCY`]
/// running at once, their answers and the server's requests to the client go out
/// through `frames`, and the client's answers go back to tower-lsp through `socket`.
/// Returns when `bodies` ends or the service stops (after `exit`).
pub async fn serve_messages<S>(
    mut bodies: mpsc::Receiver<Value>,
    frames: mpsc::Sender<Vec<u8>>,
    socket: ClientSocket,
    mut service: S,
) where
    S: tower::Service<Request, Response = Option<Response>> + Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::Future: Send,
{
    let (to_client, mut client_answers) = socket.split();
    let (to_client, to_client_abort) = futures::stream::abortable(to_client);
    let (mut tasks_tx, tasks_rx) = futures::channel::mpsc::channel(MESSAGE_QUEUE_SIZE);

    let answers = tasks_rx
        .buffer_unordered(MAX_CONCURRENCY)
        .filter_map(future::ready)
        .for_each({
            let frames = frames.clone();
            move |res: Response| {
                let frames = frames.clone();
                async move { send_json(&frames, &res).await }
            }
        });
    let requests_to_client = to_client.for_each({
        let frames = frames.clone();
        move |req: Request| {
            let frames = frames.clone();
            async move { send_json(&frames, &req).await }
        }
    });
    let read = async {
        while let Some(value) = bodies.recv().await {
            // The decoder parsed and checked it: one JSON-RPC object, a request,
            // notification or response. Moved (not copied) into tower-lsp's types.
            if value.get("method").is_some() {
                let id = value.get("id").cloned();
                match serde_json::from_value::<Request>(value) {
                    Ok(req) => {
                        if let Err(e) = future::poll_fn(|cx| service.poll_ready(cx)).await {
                            error!("the language service stopped: {}", e.into());
                            break;
                        }
                        let task = service.call(req);
                        let task = async move {
                            task.await.unwrap_or_else(|e| {
                                error!("a request failed: {}", e.into());
                                None
                            })
                        };
                        if tasks_tx.send(Box::pin(task)).await.is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        error!("dropped a message tower-lsp cannot read: {e}");
                        if let Some(id) = id.and_then(|id| serde_json::from_value::<Id>(id).ok()) {
                            let res = Response::from_error(id, Error::invalid_request());
                            send_json(&frames, &res).await;
                        }
                    }
                }
            } else {
                match serde_json::from_value::<Response>(value) {
                    Ok(res) => {
                        if client_answers.send(res).await.is_err() {
                            break;
                        }
                    }
                    Err(e) => error!("dropped an answer from the client: {e}"),
                }
            }
        }
        tasks_tx.close_channel();
        to_client_abort.abort();
    };
    // Once the client's end is closed, the answers still coming are sent for a short
    // while, then the loop ends even if a handler still waits: on the client's answer
    // to one of the server's own requests (`workspace/applyEdit` at the end of a job),
    // which cannot come any more, or on a job no one can see. Before, such a handler
    // kept the server running after the editor had quit.
    let read_then_grace = async {
        read.await;
        tokio::time::sleep(INPUT_CLOSED_GRACE).await;
    };
    let outputs = async {
        futures::join!(answers, requests_to_client);
    };
    futures::pin_mut!(read_then_grace, outputs);
    future::select(outputs, read_then_grace).await;
}

/// How long the answers in flight may still be sent after the client closed its end.
const INPUT_CLOSED_GRACE: Duration = Duration::from_secs(5);

/// `msg` as a frame for the writer (a closed writer means the client is gone: dropped).
async fn send_json<T: serde::Serialize>(frames: &mpsc::Sender<Vec<u8>>, msg: &T) {
    match serde_json::to_vec(msg) {
        Ok(body) => {
            let _ = frames.send(frame::encode(&body)).await;
        }
        Err(e) => error!("cannot encode a message for the client: {e}"),
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
