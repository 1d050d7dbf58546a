//! A scripted stand-in for a model endpoint: a plain HTTP/1.1 server on 127.0.0.1 that
//! answers requests with [`Scripted`] replies in order (status, headers, body, an
//! optional delay) and records every request it got. One connection per request
//! (`Connection: close`), `Content-Length` bodies, std threads only. Reusable by any
//! test that needs a model: build replies with [`Scripted::openai`] /
//! [`Scripted::anthropic`] or load answers from `tests/fixtures/llm/` with
//! [`Scripted::fixture`], point `ModelSettings::url` at [`ReplayServer::url`], then
//! assert on [`ReplayServer::requests`]. A request past the end of the script gets a
//! 500 that says so.

#![allow(dead_code)] // a toolkit: not every test uses every helper

use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};

/// One scripted answer.
#[derive(Clone, Debug)]
pub struct Scripted {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// Wait this long before answering (to test time-outs).
    pub delay: Duration,
}

impl Scripted {
    /// `status` with a JSON body.
    pub fn json(status: u16, body: &Value) -> Self {
        Scripted {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.to_string(),
            delay: Duration::ZERO,
        }
    }

    /// `status` with a plain-text body.
    pub fn text(status: u16, body: &str) -> Self {
        Scripted {
            status,
            headers: vec![("Content-Type".into(), "text/plain".into())],
            body: body.to_string(),
            delay: Duration::ZERO,
        }
    }

    /// An OpenAI chat completion whose message is `content`.
    pub fn openai(content: &str) -> Self {
        Scripted::json(
            200,
            &json!({
                "id": "chatcmpl-replay",
                "object": "chat.completion",
                "created": 1_741_570_283u64,
                "model": "replay",
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop"
                }],
                "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}
            }),
        )
    }

    /// An Anthropic message whose one text block is `text`.
    pub fn anthropic(text: &str) -> Self {
        Scripted::json(
            200,
            &json!({
                "id": "msg_replay",
                "type": "message",
                "role": "assistant",
                "model": "replay",
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": null,
                "usage": {"input_tokens": 100, "output_tokens": 50}
            }),
        )
    }

    /// A recorded answer: `tests/fixtures/llm/NAME`, a JSON file
    /// `{"status": 200, "headers": {"name": "value"}, "body": <JSON or a string>}`.
    pub fn fixture(name: &str) -> Self {
        let path = fixtures_dir().join(name);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read fixture {}: {e}", path.display()));
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("fixture {} is not JSON: {e}", path.display()));
        let status = v["status"].as_u64().unwrap_or(200) as u16;
        let headers = v["headers"]
            .as_object()
            .map(|h| {
                h.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let body = match &v["body"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        Scripted {
            status,
            headers,
            body,
            delay: Duration::ZERO,
        }
    }

    /// The text of a fixture's reply message (OpenAI or Anthropic body).
    pub fn fixture_text(name: &str) -> String {
        let body: Value = serde_json::from_str(&Scripted::fixture(name).body).unwrap();
        body["choices"][0]["message"]["content"]
            .as_str()
            .or_else(|| body["content"][0]["text"].as_str())
            .unwrap_or_else(|| panic!("fixture {name} has no reply text"))
            .to_string()
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/llm")
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Header names lowercased.
    pub headers: BTreeMap<String, String>,
    /// The body as JSON (`Value::Null` when it was not JSON).
    pub body: Value,
}

struct State {
    replies: Mutex<VecDeque<Scripted>>,
    requests: Mutex<Vec<Recorded>>,
    stop: AtomicBool,
}

pub struct ReplayServer {
    addr: SocketAddr,
    state: Arc<State>,
    accept: Option<JoinHandle<()>>,
}

impl ReplayServer {
    pub fn start(replies: Vec<Scripted>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(State {
            replies: Mutex::new(replies.into()),
            requests: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let s = state.clone();
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let s = s.clone();
                std::thread::spawn(move || serve(conn, &s));
            }
        });
        ReplayServer {
            addr,
            state,
            accept: Some(accept),
        }
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Scripted replies not served yet.
    pub fn remaining(&self) -> usize {
        self.state.replies.lock().unwrap().len()
    }
}

impl Drop for ReplayServer {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// A URL on 127.0.0.1 where nothing listens (a port bound, then released).
pub fn closed_port_url() -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    drop(l);
    format!("http://{addr}")
}

fn serve(mut conn: TcpStream, state: &State) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let Some(request) = read_request(&mut conn) else {
        return; // the wake-up connection, or a client that gave up
    };
    let reply = {
        // Record and take the reply under one lock, so replies follow arrival order.
        let mut replies = state.replies.lock().unwrap();
        let mut requests = state.requests.lock().unwrap();
        requests.push(request);
        replies.pop_front().unwrap_or_else(|| {
            Scripted::text(
                500,
                &format!(
                    "replay server: no scripted reply left for request {}",
                    requests.len()
                ),
            )
        })
    };
    std::thread::sleep(reply.delay);
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reason(reply.status),
        reply.body.len()
    );
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(reply.body.as_bytes());
    let _ = conn.flush();
}

fn read_request(conn: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split_whitespace();
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < header_end + length {
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body_bytes = &buf[header_end..buf.len().min(header_end + length)];
    let body = serde_json::from_slice(body_bytes).unwrap_or(Value::Null);
    Some(Recorded {
        method,
        path,
        headers,
        body,
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        307 => "Temporary Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    }
}
