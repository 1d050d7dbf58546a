//! Lifting reads texts exactly as serde_json does, and the decoder that lifts yields the
//! events of the one that does not.

use serde_json::{json, Value};

use super::super::{Decoder, Event};
use super::*;

/// Pieces of string contents as a client may write them, some of which serde_json refuses.
const PIECES: &[&str] = &[
    "a",
    "__global__ void k() {}",
    "naïve ∑ 🚀",
    "\\n",
    "\\r\\n",
    "\\t",
    "\\\"",
    "\\\\",
    "\\/",
    "\\b\\f",
    "\\u00e9",
    "\\u00E9",
    "\\u2211",
    "\\ud83d\\ude80",
    "\\uD83D\\uDE80",
    "\\u0000",
    // Refused: a lone or reversed surrogate, a bad escape, short hex, control bytes.
    "\\ud83d",
    "\\ud83dx",
    "\\ud83d\\n",
    "\\ude80",
    "\\ud83d\\u0041",
    "\\x",
    "\\u12",
    "\\uZZZZ",
    "\u{1}",
    "\t",
];

fn rng(seed: &mut u64) -> usize {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    (*seed >> 8) as usize
}

/// What serde_json makes of `raw` as a string's contents, and what lifting makes of it.
fn both(raw: &[u8]) -> (Option<String>, Option<String>) {
    let quoted = [b"\"", raw, b"\""].concat();
    let serde = serde_json::from_slice::<String>(&quoted).ok();
    let lifted = valid(raw).then(|| {
        let text = Text {
            pointer: String::new(),
            raw: 0..quoted.len(),
        };
        decode(quoted.clone(), &[text]).remove(0)
    });
    (serde, lifted)
}

#[test]
fn strings_decode_as_serde_json_reads_them() {
    let mut seed = 0x2545_F491_4F6C_DD1D_u64;
    for case in 0..5000 {
        let n = rng(&mut seed) % 6;
        let mut raw: Vec<u8> = (0..n)
            .flat_map(|_| PIECES[rng(&mut seed) % PIECES.len()].bytes())
            .collect();
        if case % 7 == 0 {
            // Not UTF-8.
            raw.push(0xff);
        }
        let (serde, lifted) = both(&raw);
        assert_eq!(
            serde,
            lifted,
            "contents {:?}",
            raw.escape_ascii().to_string()
        );
    }
}

#[test]
fn texts_are_found_where_serde_json_keeps_them() {
    let body = br#"{"jsonrpc":"2.0","method":"m","params":{"textDocument":{"uri":"u","text":"a\nb","version":1}}}"#;
    let found = texts(body);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].pointer, "/params/textDocument/text");
    assert_eq!(&body[found[0].raw.clone()], br#""a\nb""#);

    // The last of duplicate keys, as serde_json keeps; changes that are not objects, or
    // whose text is not a string, have none.
    let body = br#"{"params":{"contentChanges":[{"text":"x","text":"y"},3,{"text":4},{"range":{},"text":"z"}]},"params":{"contentChanges":[{"text":"w"}]}}"#;
    let found = texts(body);
    let got: Vec<(&str, &[u8])> = found
        .iter()
        .map(|t| (t.pointer.as_str(), &body[t.raw.clone()]))
        .collect();
    assert_eq!(got, [("/params/contentChanges/0/text", &b"\"w\""[..])]);

    let body = br#"{"params":{"contentChanges":[{"text":"x","text":"y"},3,{"text":4},{"range":{},"text":"z"}]}}"#;
    let pointers: Vec<String> = texts(body).into_iter().map(|t| t.pointer).collect();
    assert_eq!(
        pointers,
        [
            "/params/contentChanges/0/text",
            "/params/contentChanges/3/text"
        ]
    );
    for not_a_message in [
        &b"[1]"[..],
        b"{\"params\": [\"text\"]}",
        b"{\"params\": {",
        b"",
    ] {
        assert!(texts(not_a_message).is_empty());
    }
}

fn frame(body: &[u8]) -> Vec<u8> {
    super::super::encode(body)
}

/// Every event of `bytes`, pushed whole, by `decoder`.
fn events(mut decoder: Decoder, bytes: &[u8]) -> Vec<Event> {
    decoder.push(bytes);
    std::iter::from_fn(|| decoder.next_event()).collect()
}

#[test]
fn a_decoder_that_lifts_gives_the_same_events() {
    let text = "__global__ void k(float* y) {\n\ty[0] = 1.0f; // \"naïve\" ∑ 🚀 \\\n}\n\r\n";
    let change = |t: &str| {
        json!({"jsonrpc": "2.0", "method": "textDocument/didChange",
        "params": {"textDocument": {"uri": "file:///w/k.cu", "version": 2},
                   "contentChanges": [{"text": t}, {"range": {"start": {"line": 0, "character": 1}, "end": {"line": 0, "character": 2}}, "text": "é"}]}})
    };
    let open = json!({"jsonrpc": "2.0", "method": "textDocument/didOpen",
        "params": {"textDocument": {"uri": "file:///w/k.cu", "languageId": "cuda", "version": 1, "text": text}}});
    let mut bodies: Vec<Vec<u8>> = vec![
        serde_json::to_vec(&open).unwrap(),
        serde_json::to_vec(&change(text)).unwrap(),
        serde_json::to_vec(&change("")).unwrap(),
    ];
    let raw = |s: &str| s.as_bytes().to_vec();
    bodies.extend([
        // Escapes serde_json would not write, and ones it refuses.
        raw(r#"{"jsonrpc":"2.0","method":"textDocument/didOpen","params":{"textDocument":{"uri":"file:///a.cu","languageId":"cuda","version":1,"text":"\u00e9\/\ud83d\ude80\b"}}}"#),
        raw(r#"{"jsonrpc":"2.0","method":"textDocument/didOpen","params":{"textDocument":{"uri":"file:///a.cu","languageId":"cuda","version":1,"text":"\ud83d"}}}"#),
        raw(r#"{"jsonrpc":"2.0","method":"textDocument/didOpen","params":{"textDocument":{"uri":"file:///a.cu","languageId":"cuda","version":1,"text":"\x"}}}"#),
        // Duplicate keys, a request with an id, an invalid message, one not JSON.
        raw(r#"{"jsonrpc":"2.0","method":"textDocument/didOpen","params":{"textDocument":{"text":"a","text":"b"},"textDocument":{"uri":"file:///a.cu","text":"c"}}}"#),
        raw(r#"{"jsonrpc":"2.0","id":7,"method":"x","params":{"textDocument":{"text":"a"}}}"#),
        raw(r#"{"jsonrpc":"1.0","id":8,"method":"x","params":{"textDocument":{"text":"a"}}}"#),
        raw(r#"{"jsonrpc":"2.0","id":9,"method":"x","method":"y","params":{"textDocument":{"text":"a"}}}"#),
        raw(r#"{"jsonrpc":"2.0","id":10,"method":"x","params":{"textDocument":{"text":"a"}},}"#),
    ]);
    for body in &bodies {
        let bytes = [
            frame(body),
            frame(br#"{"jsonrpc":"2.0","id":1,"method":"shutdown"}"#),
        ]
        .concat();
        let plain = events(Decoder::new(), &bytes);
        let lifted = events(Decoder::lifting_from(0), &bytes);
        assert_eq!(plain, lifted, "{}", String::from_utf8_lossy(body));
        assert_eq!(plain.len(), 2);
    }
}

#[test]
fn the_largest_text_is_the_frame_buffer_not_a_copy() {
    let text = "x\n".repeat(50_000);
    let body = serde_json::to_vec(&json!({"jsonrpc": "2.0", "method": "textDocument/didOpen",
        "params": {"textDocument": {"uri": "file:///w/k.cu", "languageId": "cuda", "version": 1, "text": text}}}))
    .unwrap();
    let mut decoder = Decoder::lifting_from(0);
    decoder.push(&frame(&body));
    // The header is drained in place: the body then starts the same allocation.
    let at = decoder.buf.as_ptr();
    let first = decoder.next_event();
    let Some(Event::Message(message)) = first else {
        panic!("no message: {first:?}");
    };
    let got = message
        .pointer("/params/textDocument/text")
        .and_then(Value::as_str);
    assert_eq!(got, Some(text.as_str()));
    assert_eq!(got.map(str::as_ptr), Some(at), "the text was copied");
}
