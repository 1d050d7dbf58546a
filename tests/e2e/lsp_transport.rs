//! The server's stdio transport against broken clients, as an editor sees it: every
//! class of malformed frame gets its error answer (with the request's id when it can be
//! read) and the server goes on answering; `$/` requests, `shutdown` with null params and
//! invalid params get the answers the LSP specification asks for.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::client::TestClient;

const SAXPY: &str = r#"// @bench n = 1 << 20
// @bench x: in f32[n]
// @bench y: inout f32[n]
// @bench a = 2.0
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#;
const URI: &str = "file:///w/saxpy.cu";

/// A request with id 100, as an editor would send it; the malformed frames wrap it.
const SYMBOLS_100: &str = r#"{"jsonrpc":"2.0","id":100,"method":"textDocument/documentSymbol","params":{"textDocument":{"uri":"file:///w/saxpy.cu"}}}"#;

const ANSWER: Duration = Duration::from_secs(10);

fn framed(len: &str, body: &[u8]) -> Vec<u8> {
    [format!("Content-Length: {len}\r\n\r\n").as_bytes(), body].concat()
}

fn exact(body: &[u8]) -> Vec<u8> {
    framed(&body.len().to_string(), body)
}

/// The binary over stdio, initialized, with SAXPY open.
async fn session() -> TestClient {
    let mut c = TestClient::spawn_binary(&[]);
    c.initialize(json!({"compileOnType": false}), &["utf-16"])
        .await;
    c.open(URI, "cuda", SAXPY).await;
    let _ = c.diagnostics(URI, Some(1)).await;
    c
}

/// A valid request after the damage: answered with the document's kernel.
async fn still_serving(c: &mut TestClient, what: &str) {
    let r = c
        .request(
            "textDocument/documentSymbol",
            json!({"textDocument": {"uri": URI}}),
        )
        .await;
    assert_eq!(r["result"][0]["name"], "saxpy", "{what}: {r}");
}

/// `shutdown` then `exit` end the server with status 0.
async fn clean_exit(c: &mut TestClient, what: &str) {
    let r = c.request("shutdown", Value::Null).await;
    assert_eq!(r["result"], Value::Null, "{what}: {r}");
    c.notify("exit", Value::Null).await;
    let status = tokio::time::timeout(ANSWER, c.child().unwrap().wait())
        .await
        .unwrap_or_else(|_| panic!("{what}: no exit after `exit`"))
        .unwrap();
    assert!(status.success(), "{what}: {status}");
}

/// `(code, id)` of an error answer, after checking it says what happened.
fn error_of(answer: &Value, what: &str) -> (i64, Value) {
    let msg = answer["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: not an error: {answer}"));
    assert!(
        msg.starts_with("kernel-lsp dropped a message: "),
        "{what}: {answer}"
    );
    (
        answer["error"]["code"].as_i64().unwrap(),
        answer["id"].clone(),
    )
}

/// Each malformed frame and a valid request right behind it, in one write: the one
/// error answer expected (code, id), and the valid request's answer. Then the server
/// still serves and exits cleanly. A fresh server per case, so one failure cannot hide
/// behind another.
#[tokio::test]
async fn every_malformed_frame_is_answered_and_the_server_keeps_serving() {
    let body = SYMBOLS_100.as_bytes();
    let n = body.len();
    let bad_utf8 = [
        &br#"{"jsonrpc":"2.0","id":100,"method":"x","params":""#[..],
        &[0xff, 0xfe],
        b"\"}",
    ]
    .concat();
    let cases: Vec<(&str, Vec<u8>, i64, Value)> = vec![
        ("an array body", exact(b"[]"), -32600, Value::Null),
        ("a null body", exact(b"null"), -32600, Value::Null),
        ("a number body", exact(b"5"), -32600, Value::Null),
        // The top level reads, so the answer carries the id (issue #28).
        ("invalid UTF-8", exact(&bad_utf8), -32700, json!(100)),
        (
            "not JSON",
            exact(b"{\"jsonrpc\": \"2.0\", \"id\": 100,"),
            -32700,
            Value::Null,
        ),
        (
            "a float id",
            exact(&SYMBOLS_100.replace("\"id\":100", "\"id\":1.5").into_bytes()),
            -32600,
            Value::Null,
        ),
        (
            "an object id",
            exact(
                &SYMBOLS_100
                    .replace("\"id\":100", "\"id\":{\"n\":1}")
                    .into_bytes(),
            ),
            -32600,
            Value::Null,
        ),
        (
            "no jsonrpc",
            exact(&SYMBOLS_100.replace("\"jsonrpc\":\"2.0\",", "").into_bytes()),
            -32600,
            json!(100),
        ),
        (
            "a length 3 short",
            framed(&(n - 3).to_string(), body),
            -32600,
            json!(100),
        ),
        (
            "a length 3 long",
            framed(&(n + 3).to_string(), body),
            -32600,
            json!(100),
        ),
        (
            "a non-numeric length",
            framed("abc", body),
            -32600,
            json!(100),
        ),
        ("a negative length", framed("-5", body), -32600, json!(100)),
        (
            "no Content-Length",
            [
                b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n",
                body,
            ]
            .concat(),
            -32600,
            json!(100),
        ),
        ("no header at all", body.to_vec(), -32600, json!(100)),
        (
            "garbage",
            b"\x00\x01hello, server\r\n\r\n".to_vec(),
            -32700,
            Value::Null,
        ),
        // Issue #28: a rejected header with no body after it consumed the next request.
        (
            "a non-numeric length and no body",
            b"Content-Length: abc\r\n\r\n".to_vec(),
            -32700,
            Value::Null,
        ),
        (
            "a negative length and no body",
            b"Content-Length: -1\r\n\r\n".to_vec(),
            -32700,
            Value::Null,
        ),
        (
            "a huge length and no body",
            b"Content-Length: 100000000000000\r\n\r\n".to_vec(),
            -32700,
            Value::Null,
        ),
        (
            "no Content-Length and no body",
            b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n".to_vec(),
            -32700,
            Value::Null,
        ),
        // Issue #28: bytes after a body ran into the next header and lost its frame.
        (
            "trailing bytes after a body",
            [
                exact(br#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#),
                b"xyz".to_vec(),
            ]
            .concat(),
            -32700,
            Value::Null,
        ),
        // Found by the frame fuzz run: a body cut short inside a string took the next
        // frame's header with it.
        (
            "a body cut inside a string",
            framed(&n.to_string(), &body[..body.len() / 2]),
            -32700,
            Value::Null,
        ),
        // Issue #28: nesting past serde_json's limit was answered with id null.
        (
            "a request nested 127 deep",
            exact(
                SYMBOLS_100
                    .replace(
                        r#""params":{"#,
                        &format!(
                            r#""params":{{"deep":{}{},"#,
                            "[".repeat(127),
                            "]".repeat(127)
                        ),
                    )
                    .as_bytes(),
            ),
            -32700,
            json!(100),
        ),
    ];
    let valid = exact(SYMBOLS_100.replace("\"id\":100", "\"id\":200").as_bytes());
    for (what, bytes, code, id) in cases {
        let mut c = session().await;
        c.send_raw(&[bytes, valid.clone()].concat()).await;
        let mut errors = Vec::new();
        loop {
            let answer = c.next_answer(ANSWER).await;
            if answer["id"] == 200 {
                assert_eq!(answer["result"][0]["name"], "saxpy", "{what}: {answer}");
                break;
            }
            errors.push(error_of(&answer, what));
        }
        assert_eq!(errors, vec![(code, id)], "{what}");
        still_serving(&mut c, what).await;
        clean_exit(&mut c, what).await;
    }
}

#[tokio::test]
async fn a_length_too_long_is_answered_while_the_client_waits() {
    // The client sends a frame whose length is 3 bytes too long and waits for its
    // answer: nothing more arrives, yet the answer must come, and soon.
    let mut c = session().await;
    let started = Instant::now();
    c.send_raw(&framed(
        &(SYMBOLS_100.len() + 3).to_string(),
        SYMBOLS_100.as_bytes(),
    ))
    .await;
    let answer = c.next_answer(ANSWER).await;
    let took = started.elapsed();
    assert_eq!(
        error_of(&answer, "too long"),
        (-32600, json!(100)),
        "{answer}"
    );
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    still_serving(&mut c, "after a length too long").await;
    clean_exit(&mut c, "after a length too long").await;
}

#[tokio::test]
async fn a_huge_content_length_does_not_wedge_the_server() {
    let mut c = session().await;
    let started = Instant::now();
    c.send_raw(&framed("100000000000000", SYMBOLS_100.as_bytes()))
        .await;
    let answer = c.next_answer(ANSWER).await;
    assert_eq!(error_of(&answer, "10^14"), (-32600, json!(100)), "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("64 MiB"),
        "{answer}"
    );
    still_serving(&mut c, "after a 10^14 length").await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "served again after {took:?}");
    clean_exit(&mut c, "after a 10^14 length").await;
}

#[tokio::test]
async fn bad_frames_among_many_requests_never_split_an_answer() {
    // One write: 50 valid requests, each followed by a malformed frame. Every answer
    // must arrive whole (the client parses each), 50 results and 50 errors.
    let mut c = session().await;
    let mut bytes = Vec::new();
    for i in 0..50 {
        let req = SYMBOLS_100.replace("\"id\":100", &format!("\"id\":{}", 1000 + i));
        bytes.extend(exact(req.as_bytes()));
        bytes.extend(exact(b"[]"));
    }
    c.send_raw(&bytes).await;
    let (mut results, mut errors) = (0, 0);
    while results + errors < 100 {
        let a = c.next_answer(ANSWER).await;
        if a["result"][0]["name"] == "saxpy" {
            results += 1;
        } else {
            assert_eq!(error_of(&a, "interleaved"), (-32600, Value::Null), "{a}");
            errors += 1;
        }
    }
    assert_eq!((results, errors), (50, 50));
    clean_exit(&mut c, "after 100 frames").await;
}

#[tokio::test]
async fn dollar_requests_get_method_not_found_and_dollar_notifications_nothing() {
    let mut c = session().await;
    let r = c.request("$/kernelLsp/unknown", json!({})).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
    // A `$/` notification is ignored: the next answer is the next request's.
    c.notify("$/kernelLsp/unknown", json!({})).await;
    let next = c
        .send_request(
            "textDocument/documentSymbol",
            json!({"textDocument": {"uri": URI}}),
        )
        .await;
    let a = c.next_answer(ANSWER).await;
    assert_eq!(a["id"], json!(next), "{a}");
    assert_eq!(a["result"][0]["name"], "saxpy", "{a}");
    clean_exit(&mut c, "after $/ messages").await;
}

#[tokio::test]
async fn shutdown_and_exit_with_null_params_end_cleanly() {
    let mut c = session().await;
    c.send_raw(&exact(
        br#"{"jsonrpc":"2.0","id":7,"method":"shutdown","params":null}"#,
    ))
    .await;
    let a = c.next_answer(ANSWER).await;
    assert_eq!(a, json!({"jsonrpc": "2.0", "id": 7, "result": null}));
    c.send_raw(&exact(
        br#"{"jsonrpc":"2.0","method":"exit","params":null}"#,
    ))
    .await;
    let status = tokio::time::timeout(ANSWER, c.child().unwrap().wait())
        .await
        .expect("exits after `exit`")
        .unwrap();
    assert!(status.success(), "exit status after shutdown: {status}");
}

#[tokio::test]
async fn invalid_params_are_explained_without_rust_types() {
    let mut c = session().await;
    let r = c
        .request("textDocument/hover", json!({"textDocument": {"uri": URI}}))
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(
        r["error"]["message"],
        "invalid params for textDocument/hover: missing field `position`"
    );
    let r = c.request("textDocument/hover", json!("x")).await;
    assert_eq!(
        r["error"]["message"],
        r#"invalid params for textDocument/hover: invalid type: string "x", expected an object"#
    );
    // The server's own invalid-params answers are left as they are.
    let r = c
        .request("textDocument/hover", json!({"textDocument": {"uri": "file:///nope.cu"}, "position": {"line": 0, "character": 0}}))
        .await;
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("document file:///nope.cu is not open"),
        "{r}"
    );
    clean_exit(&mut c, "after invalid params").await;
}

#[tokio::test]
async fn dropped_frames_are_logged_on_stderr() {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_kernel-lsp"));
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn kernel-lsp");
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let mut c = TestClient::from_parts(Box::new(stdout), Box::new(stdin), Some(child));
    c.initialize(json!({"compileOnType": false}), &["utf-16"])
        .await;
    c.send_raw(&framed("abc", SYMBOLS_100.as_bytes())).await;
    let _ = c.next_answer(ANSWER).await;
    clean_exit(&mut c, "logging").await;
    let mut log = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut log)
        .await
        .unwrap();
    assert!(
        log.contains("dropped a message from the client: its Content-Length `abc` is not a length"),
        "{log}"
    );
}
