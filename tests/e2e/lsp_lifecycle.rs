//! A document's lifecycle over the real binary: a file closed and reopened under
//! another language (VS Code's "change language mode"), opened twice without a close,
//! with edits and settings changes between. The server must survive every round and
//! answer each open from its own text, never from the closed one's.

use serde_json::{json, Value};

use crate::client::TestClient;

fn cuda(name: &str) -> String {
    format!("__global__ void {name}(float* y) {{ y[0] = 1.0f; }}\n")
}

fn triton(name: &str) -> String {
    format!("import triton\n@triton.jit\ndef {name}(y):\n    pass\n")
}

/// The names of the document's symbols (its kernels), as the editor's outline shows them.
async fn symbols(c: &mut TestClient, uri: &str) -> Vec<String> {
    let r = c
        .request(
            "textDocument/documentSymbol",
            json!({"textDocument": {"uri": uri}}),
        )
        .await;
    assert!(r["error"].is_null(), "documentSymbol failed: {r}");
    r["result"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| s["name"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}

async fn full_edit(c: &mut TestClient, uri: &str, version: i64, text: &str) {
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}),
    )
    .await;
}

async fn close(c: &mut TestClient, uri: &str) {
    c.notify(
        "textDocument/didClose",
        json!({"textDocument": {"uri": uri}}),
    )
    .await;
}

fn alive(c: &mut TestClient) -> bool {
    c.child()
        .map(|ch| ch.try_wait().ok().flatten().is_none())
        .unwrap_or(true)
}

#[tokio::test]
async fn reopening_a_file_under_another_language_never_crashes_or_shows_the_old_text() {
    let mut c = TestClient::spawn_binary(&[]);
    c.initialize(json!({"compileOnType": false}), &["utf-16"])
        .await;
    let uri = "file:///w/k.cu";
    for round in 0..100 {
        let (a, b) = (format!("cu{round}"), format!("py{round}"));
        c.open(uri, "cuda-cpp", &cuda(&a)).await;
        if round % 3 == 0 {
            // Ask while the first analysis may still run: the answer is this text's.
            assert_eq!(symbols(&mut c, uri).await, [a.as_str()], "round {round}");
        }
        close(&mut c, uri).await;
        c.open(uri, "python", &triton(&b)).await;
        match round % 4 {
            0 => full_edit(&mut c, uri, 2, &triton(&format!("{b}x"))).await,
            1 => {
                c.notify(
                    "workspace/didChangeConfiguration",
                    json!({"settings": {"compileOnType": false, "analysisBudgetMs": 2000 + round}}),
                )
                .await
            }
            2 => {
                // Opened again without a close, back under CUDA, then edited.
                c.open(uri, "cuda", &cuda(&format!("{a}y"))).await;
                full_edit(&mut c, uri, 2, &cuda(&format!("{a}z"))).await;
            }
            _ => {}
        }
        let want = match round % 4 {
            0 => format!("{b}x"),
            2 => format!("{a}z"),
            _ => b.clone(),
        };
        assert_eq!(symbols(&mut c, uri).await, [want], "round {round}");
        close(&mut c, uri).await;
        assert!(alive(&mut c), "the server died in round {round}");
    }
    // Still serving.
    c.open(uri, "python", &triton("last")).await;
    assert_eq!(symbols(&mut c, uri).await, ["last"]);
    let r = c.request("shutdown", Value::Null).await;
    assert!(r["error"].is_null(), "{r}");
    assert!(alive(&mut c));
}
