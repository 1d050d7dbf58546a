//! A minimal LSP client for tests: frames JSON-RPC over any async byte stream, answers
//! the server's own requests, and keeps notifications so tests can wait for them.
//! `in_process` runs the real backend (and its framing layer) over an in-memory duplex; `spawn_binary` runs the
//! built `kernel-lsp` over stdio.

use std::collections::VecDeque;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

pub struct TestClient {
    writer: Box<dyn AsyncWrite + Unpin + Send>,
    reader: BufReader<Box<dyn AsyncRead + Unpin + Send>>,
    next_id: i64,
    /// Notifications received and not yet taken by a test.
    pub notifications: VecDeque<Value>,
    /// Answers that arrived while waiting for another request's.
    answers: std::collections::HashMap<u64, Value>,
    _child: Option<tokio::process::Child>,
}

pub const TIMEOUT: Duration = Duration::from_secs(20);

impl TestClient {
    /// The backend in this process, over an in-memory pipe.
    pub fn in_process() -> Self {
        let (client_end, server_end) = tokio::io::duplex(1 << 20);
        let (server_read, server_write) = tokio::io::split(server_end);
        tokio::spawn(kernel_lsp::lsp::serve(server_read, server_write));
        let (r, w) = tokio::io::split(client_end);
        TestClient::from_parts(Box::new(r), Box::new(w), None)
    }

    /// The built binary, over stdio, with extra environment variables.
    pub fn spawn_binary(env: &[(&str, &str)]) -> Self {
        Self::spawn_program(env!("CARGO_BIN_EXE_kernel-lsp"), env)
    }

    /// `program` (a kernel-lsp binary, e.g. the GPU machine's copy) over stdio.
    pub fn spawn_program(program: &str, env: &[(&str, &str)]) -> Self {
        let mut cmd = tokio::process::Command::new(program);
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn kernel-lsp");
        let stdin = child.stdin.take().expect("stdin piped");
        let stdout = child.stdout.take().expect("stdout piped");
        TestClient::from_parts(Box::new(stdout), Box::new(stdin), Some(child))
    }

    pub fn from_parts(
        r: Box<dyn AsyncRead + Unpin + Send>,
        w: Box<dyn AsyncWrite + Unpin + Send>,
        child: Option<tokio::process::Child>,
    ) -> Self {
        TestClient {
            writer: w,
            reader: BufReader::new(r),
            next_id: 1,
            notifications: VecDeque::new(),
            answers: std::collections::HashMap::new(),
            _child: child,
        }
    }

    /// The next message from the server, with nothing answered: a server request stays
    /// unanswered, as with an editor that quits before it replies.
    pub async fn next_unanswered(&mut self, limit: Duration) -> Value {
        tokio::time::timeout(limit, self.recv())
            .await
            .unwrap_or_else(|_| panic!("no message within {limit:?}"))
            .expect("server closed the connection")
    }

    /// Closes both ends of the connection, as an editor that quits does, and hands back
    /// the server's process.
    pub fn close(self) -> Option<tokio::process::Child> {
        let TestClient { _child, .. } = self;
        _child
    }

    pub fn child(&mut self) -> Option<&mut tokio::process::Child> {
        self._child.as_mut()
    }

    /// Write bytes as they are, as a broken client would.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.unwrap();
        self.writer.flush().await.unwrap();
    }

    /// The next answer (a message without `method`), whatever its id; notifications and
    /// the server's requests are handled on the way.
    pub async fn next_answer(&mut self, limit: Duration) -> Value {
        let fut = async {
            loop {
                let msg = self.pump_one().await.expect("server closed the connection");
                if !msg.is_null() {
                    return msg;
                }
            }
        };
        tokio::time::timeout(limit, fut)
            .await
            .unwrap_or_else(|_| panic!("no answer within {limit:?}"))
    }

    async fn send(&mut self, msg: &Value) {
        let body = serde_json::to_vec(msg).unwrap();
        let head = format!("Content-Length: {}\r\n\r\n", body.len());
        self.writer.write_all(head.as_bytes()).await.unwrap();
        self.writer.write_all(&body).await.unwrap();
        self.writer.flush().await.unwrap();
    }

    /// Read one message; None at end of stream.
    async fn recv(&mut self) -> Option<Value> {
        let mut len = None;
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line).await.ok()? == 0 {
                return None;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some(v) = line.strip_prefix("Content-Length:") {
                len = v.trim().parse::<usize>().ok();
            }
        }
        let mut buf = vec![0u8; len?];
        self.reader.read_exact(&mut buf).await.ok()?;
        serde_json::from_slice(&buf).ok()
    }

    /// Handle one incoming message: keep notifications, answer server requests.
    async fn pump_one(&mut self) -> Option<Value> {
        let msg = self.recv().await?;
        if msg.get("method").is_some() {
            if let Some(id) = msg.get("id").cloned() {
                // A server->client request (inlayHint/refresh, progress create): null.
                // This client applies no edits, and says so.
                let result = if msg["method"] == "workspace/applyEdit" {
                    json!({"applied": false, "failureReason": "the test client applies no edits"})
                } else {
                    Value::Null
                };
                self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
                    .await;
            }
            self.notifications.push_back(msg.clone());
            return Some(Value::Null);
        }
        Some(msg)
    }

    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&message(Some(id), method, params)).await;
        let fut = async {
            loop {
                let msg = self.pump_one().await.expect("server closed the connection");
                if msg.get("id") == Some(&json!(id)) {
                    return msg;
                }
            }
        };
        tokio::time::timeout(TIMEOUT, fut)
            .await
            .unwrap_or_else(|_| panic!("no answer to {method}"))
    }

    /// `workspace/executeCommand` for a job (a bench, a fix): its answer may take as long
    /// as the job, so it is awaited for up to 240 s rather than a request's 20.
    pub async fn execute(&mut self, params: Value) -> Value {
        let id = self.send_request("workspace/executeCommand", params).await;
        self.response(id, Duration::from_secs(240)).await
    }

    /// Send a request without waiting; `response` waits for its answer.
    pub async fn send_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id as u64;
        self.next_id += 1;
        self.send(&message(Some(id as i64), method, params)).await;
        id
    }

    /// The answer to request `id`; answers to other requests that arrive first are kept.
    pub async fn response(&mut self, id: u64, limit: Duration) -> Value {
        let fut = async {
            loop {
                if let Some(r) = self.answers.remove(&id) {
                    return r;
                }
                let msg = self.pump_one().await.expect("server closed the connection");
                if let Some(got) = msg.get("id").and_then(Value::as_u64) {
                    self.answers.insert(got, msg);
                }
            }
        };
        tokio::time::timeout(limit, fut)
            .await
            .unwrap_or_else(|_| panic!("no answer to request {id}"))
    }

    /// Notifications received so far (not taken).
    pub fn seen(&self) -> impl Iterator<Item = &Value> {
        self.notifications.iter()
    }

    pub async fn notify(&mut self, method: &str, params: Value) {
        self.send(&message(None, method, params)).await;
    }

    /// Wait for a notification matching `pred` and take it; others stay queued.
    pub async fn wait_for(&mut self, what: &str, mut pred: impl FnMut(&Value) -> bool) -> Value {
        let fut = async {
            loop {
                if let Some(i) = self.notifications.iter().position(&mut pred) {
                    return self.notifications.remove(i).expect("index from position");
                }
                self.pump_one().await.expect("server closed the connection");
            }
        };
        tokio::time::timeout(TIMEOUT, fut)
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
    }

    /// The next diagnostics published for `uri` at `version` (or any version).
    pub async fn diagnostics(&mut self, uri: &str, version: Option<i64>) -> Vec<Value> {
        let n = self
            .wait_for("publishDiagnostics", |n| {
                n["method"] == "textDocument/publishDiagnostics"
                    && n["params"]["uri"] == uri
                    && version.is_none_or(|v| n["params"]["version"] == v)
            })
            .await;
        n["params"]["diagnostics"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    pub async fn initialize(&mut self, init_options: Value, encodings: &[&str]) -> Value {
        let resp = self
            .request(
                "initialize",
                json!({
                    "processId": null,
                    "rootUri": null,
                    "capabilities": {"general": {"positionEncodings": encodings}},
                    "initializationOptions": init_options,
                }),
            )
            .await;
        self.notify("initialized", json!({})).await;
        resp
    }

    pub async fn open(&mut self, uri: &str, language_id: &str, text: &str) {
        self.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": language_id, "version": 1, "text": text}}),
        )
        .await;
    }

    /// One ranged edit: replace (line, col)..(line, col) with `text`.
    pub async fn edit(
        &mut self,
        uri: &str,
        version: i64,
        start: (u32, u32),
        end: (u32, u32),
        text: &str,
    ) {
        self.notify(
            "textDocument/didChange",
            json!({
                "textDocument": {"uri": uri, "version": version},
                "contentChanges": [{
                    "range": {"start": {"line": start.0, "character": start.1}, "end": {"line": end.0, "character": end.1}},
                    "text": text
                }]
            }),
        )
        .await;
    }
}

/// A JSON-RPC message; `null` params are left out, as editors do (`shutdown`, `exit`).
fn message(id: Option<i64>, method: &str, params: Value) -> Value {
    let mut m = json!({"jsonrpc": "2.0", "method": method});
    if let Some(id) = id {
        m["id"] = json!(id);
    }
    if !params.is_null() {
        m["params"] = params;
    }
    m
}

/// Render diagnostics as `line:col-line:col severity [source] message` lines (1-based
/// severity numbers as LSP sends them), sorted, for snapshots.
pub fn render_diagnostics(diags: &[Value]) -> String {
    let mut lines: Vec<String> = diags
        .iter()
        .map(|d| {
            let r = &d["range"];
            format!(
                "{}:{}-{}:{} sev{} [{}] {}",
                r["start"]["line"],
                r["start"]["character"],
                r["end"]["line"],
                r["end"]["character"],
                d["severity"],
                d["source"].as_str().unwrap_or(""),
                d["message"].as_str().unwrap_or("")
            )
        })
        .collect();
    lines.sort();
    lines.join("\n")
}

/// Resident memory of process `pid` in MB (Linux `/proc`; NaN elsewhere), for the
/// benchmarks' memory targets.
#[allow(dead_code)] // used by server/benches, not by every includer
pub fn rss_mb(pid: u32) -> f64 {
    status_mb(pid, "VmRSS:")
}

/// The process's peak resident memory so far, in MB (NaN if unreadable). Read by
/// `server/benches/big_documents.rs`, which includes this file.
#[allow(dead_code)]
pub fn peak_mb(pid: u32) -> f64 {
    status_mb(pid, "VmHWM:")
}

fn status_mb(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}
