//! The frame decoder over bytes: every malformed-frame class, each followed by a valid
//! message that must come out intact.

use super::*;

const HOVER: &str = r#"{"jsonrpc":"2.0","id":7,"method":"textDocument/hover","params":{}}"#;
const NEXT: &str = r#"{"jsonrpc":"2.0","id":8,"method":"shutdown"}"#;

fn frame_with(len: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!("Content-Length: {len}\r\n\r\n").into_bytes();
    out.extend_from_slice(body);
    out
}

/// The rendering of a message event carrying `body`.
fn msg(body: &str) -> String {
    let v: Value = serde_json::from_str(body).expect("a test message is JSON");
    format!("msg {v}")
}

fn frame(body: &str) -> Vec<u8> {
    encode(body.as_bytes())
}

/// Events as one line each: `msg <body>` (as JSON, keys sorted), or
/// `err <code> id=<id> [no reply]: <reason>`.
fn render(ev: &Event) -> String {
    match ev {
        Event::Message(v) => format!("msg {v}"),
        Event::Rejected(r) => format!(
            "err {} id={}{}: {}",
            r.code,
            r.id,
            if r.reply().is_none() { " no reply" } else { "" },
            r.reason
        ),
    }
}

fn drain(d: &mut Decoder, out: &mut Vec<String>) {
    while let Some(ev) = d.next_event() {
        out.push(render(&ev));
    }
}

/// Feed `chunks` one by one, draining after each.
fn decode(chunks: &[&[u8]]) -> Vec<String> {
    let mut d = Decoder::new();
    let mut out = Vec::new();
    for c in chunks {
        d.push(c);
        drain(&mut d, &mut out);
    }
    out
}

/// The same stream decoded whole, byte by byte, and split at every offset: the events
/// must not depend on how reads cut it (checks the decoder waits where it must).
fn decode_all_ways(stream: &[u8]) -> Vec<String> {
    let whole = decode(&[stream]);
    let bytes: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(decode(&bytes), whole, "byte by byte");
    for cut in 1..stream.len() {
        let (a, b) = stream.split_at(cut);
        assert_eq!(decode(&[a, b]), whole, "split at {cut}");
    }
    whole
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn valid_frames_pass_through_however_they_are_split() {
    let stream = cat(&[&frame(HOVER), &frame(NEXT)]);
    assert_eq!(decode_all_ways(&stream), vec![msg(HOVER), msg(NEXT)]);
}

#[test]
fn lf_headers_other_headers_and_any_case_are_accepted() {
    let stream = cat(&[
        format!(
            "content-length: {}\nContent-Type: application/vscode-jsonrpc; charset=utf-8\n\n",
            HOVER.len()
        )
        .as_bytes(),
        HOVER.as_bytes(),
        b"\r\n",
        &frame(NEXT),
    ]);
    assert_eq!(decode_all_ways(&stream), vec![msg(HOVER), msg(NEXT)]);
}

#[test]
fn bodies_that_are_not_request_objects_are_invalid_requests() {
    for (body, want) in [
        ("[]", "err -32600 id=null: a message must be a JSON object, not an array (batches are not supported)"),
        ("null", "err -32600 id=null: a message must be a JSON object, not null"),
        ("5", "err -32600 id=null: a message must be a JSON object, not a number"),
        (r#"{"jsonrpc":"2.0","id":1.5,"method":"initialize"}"#, "err -32600 id=null: `id` must be an integer or a string, not 1.5"),
        (r#"{"jsonrpc":"2.0","id":{"a":1},"method":"initialize"}"#, r#"err -32600 id=null: `id` must be an integer or a string, not {"a":1}"#),
        (r#"{"jsonrpc":"2.0","id":null,"method":"initialize"}"#, "err -32600 id=null: `id` must be an integer or a string, not null"),
        (r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"x"}"#, "err -32600 id=null: `id` must be an integer or a string, not 18446744073709551615"),
        (r#"{"id":3,"method":"initialize"}"#, r#"err -32600 id=3: it has no `"jsonrpc": "2.0"`"#),
        (r#"{"jsonrpc":"1.0","id":"a","method":"x"}"#, r#"err -32600 id="a": `jsonrpc` must be "2.0", not "1.0""#),
        (r#"{"jsonrpc":"2.0","id":4,"method":5}"#, "err -32600 id=4: `method` must be a string, not 5"),
        (r#"{"jsonrpc":"2.0","id":4}"#, "err -32600 id=4: it is neither a request (`method`) nor a response (`id` with `result` or `error`)"),
        (r#"{"jsonrpc":"2.0","id":4,"id":5,"method":"x"}"#, "err -32600 id=5: it is not a valid JSON-RPC message: duplicate field `id` at line 1 column 28"),
        // A malformed response is logged, not answered.
        (r#"{"jsonrpc":"2.0","id":4,"error":{"code":"x"}}"#, "err -32600 id=4 no reply: its `error` must be an object with an integer `code` and a string `message`"),
    ] {
        let stream = cat(&[&frame(body), &frame(NEXT)]);
        assert_eq!(decode_all_ways(&stream), vec![want.to_string(), msg(NEXT)], "{body}");
    }
}

#[test]
fn responses_and_notifications_pass() {
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"result":null}"#,
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"no"}}"#,
        r#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":"s","method":"shutdown","params":null}"#,
        // A header's text inside a string is just text.
        r#"{"jsonrpc":"2.0","method":"x","params":{"t":"Content-Length: 5 {"}}"#,
    ] {
        assert_eq!(decode(&[&frame(body)]), vec![msg(body)]);
    }
}

#[test]
fn bodies_that_are_not_json_are_parse_errors() {
    let bad_utf8 = cat(&[
        b"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":\"",
        &[0xff, 0xfe],
        b"\"}",
    ]);
    for body in [&b"{\"jsonrpc\":}"[..], b"hello", b"", &bad_utf8] {
        let stream = cat(&[&frame_with(&body.len().to_string(), body), &frame(NEXT)]);
        let got = decode_all_ways(&stream);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got[0].starts_with("err -32700 id=null: the body is not JSON: "),
            "{got:?}"
        );
        assert_eq!(got[1], msg(NEXT));
    }
}

#[test]
fn a_length_a_few_bytes_short_drops_the_message_with_its_id_and_keeps_the_next() {
    let short = HOVER.len() - 3;
    let stream = cat(&[
        &frame_with(&short.to_string(), HOVER.as_bytes()),
        &frame(NEXT),
    ]);
    assert_eq!(
        decode_all_ways(&stream),
        vec![
            format!(
                "err -32600 id=7: its Content-Length is {short} but its JSON body is {} bytes",
                HOVER.len()
            ),
            msg(NEXT)
        ]
    );
}

#[test]
fn a_length_a_few_bytes_long_drops_the_message_with_its_id_and_keeps_the_next() {
    let long = HOVER.len() + 3;
    let stream = cat(&[
        &frame_with(&long.to_string(), HOVER.as_bytes()),
        &frame(NEXT),
    ]);
    let want = vec![
        format!(
            "err -32600 id=7: its Content-Length is {long} but its JSON body is {} bytes",
            HOVER.len()
        ),
        msg(NEXT),
    ];
    assert_eq!(decode_all_ways(&stream), want);
    // Far too long: the next frame settles it as soon as it starts arriving.
    let stream = cat(&[&frame_with("60000000", HOVER.as_bytes()), &frame(NEXT)]);
    assert_eq!(decode_all_ways(&stream)[1], want[1]);
}

#[test]
fn a_length_too_long_with_nothing_after_is_settled_when_the_input_pauses() {
    let long = HOVER.len() + 3;
    let mut d = Decoder::new();
    d.push(&frame_with(&long.to_string(), HOVER.as_bytes()));
    assert_eq!(d.next_event(), None, "waits for the 3 missing bytes");
    assert!(d.may_stall());
    let ev = d.stalled().expect("the pause settles it");
    assert_eq!(
        render(&ev),
        format!(
            "err -32600 id=7: its Content-Length is {long} but its JSON body is {} bytes",
            HOVER.len()
        )
    );
    assert!(!d.may_stall());
    d.push(&frame(NEXT));
    assert_eq!(d.next_event().map(|e| render(&e)), Some(msg(NEXT)));
    // A length too short whose tail never comes: the body is open JSON, settled by a
    // pause as not JSON; the next frame is then read normally.
    let mut d = Decoder::new();
    let short = HOVER.len() - 3;
    d.push(&frame_with(&short.to_string(), &HOVER.as_bytes()[..short]));
    assert_eq!(d.next_event(), None, "the value's end may still come");
    let ev = d
        .stalled()
        .map(|e| render(&e))
        .expect("the pause settles it");
    assert!(
        ev.starts_with("err -32700 id=null: the body is not JSON: EOF while parsing"),
        "{ev}"
    );
    d.push(&frame(NEXT));
    assert_eq!(d.next_event().map(|e| render(&e)), Some(msg(NEXT)));
    // An incomplete body is not settled by a pause: the rest may still be on its way.
    let mut d = Decoder::new();
    d.push(&frame(HOVER)[..40]);
    assert_eq!(d.next_event(), None);
    assert!(!d.may_stall());
    assert_eq!(d.stalled(), None);
    d.push(&frame(HOVER)[40..]);
    assert_eq!(d.next_event().map(|e| render(&e)), Some(msg(HOVER)));
}

#[test]
fn unusable_lengths_drop_the_message_with_its_id() {
    for (header, why) in [
        (
            "Content-Length: abc\r\n\r\n",
            "its Content-Length `abc` is not a length",
        ),
        (
            "Content-Length: -5\r\n\r\n",
            "its Content-Length `-5` is not a length",
        ),
        (
            "Content-Length: \r\n\r\n",
            "its Content-Length `` is not a length",
        ),
        (
            "Content-Type: application/json\r\n\r\n",
            "it has no Content-Length header",
        ),
        ("", "it has no Content-Length header"),
        (
            "Content-Length: 100000000000000\r\n\r\n",
            "its Content-Length 100000000000000 is above the 64 MiB limit",
        ),
        (
            "Content-Length: 99999999999999999999999\r\n\r\n",
            "its Content-Length 99999999999999999999999 is above the 64 MiB limit",
        ),
        (
            "Content-Length: 3\r\ncontent-length: 4\r\n\r\n",
            "it has two different Content-Length headers",
        ),
    ] {
        let stream = cat(&[header.as_bytes(), HOVER.as_bytes(), &frame(NEXT)]);
        assert_eq!(
            decode_all_ways(&stream),
            vec![
                format!("err -32600 id=7: {why}; its JSON body was not read"),
                msg(NEXT)
            ],
            "{header:?}"
        );
    }
}

#[test]
fn an_unusable_length_before_a_non_object_skips_to_the_next_header() {
    let stream = cat(&[b"Content-Length: x\r\n\r\nhello world", &frame(NEXT)]);
    assert_eq!(
        decode_all_ways(&stream),
        vec![
            "err -32700 id=null: its Content-Length `x` is not a length, and no JSON object follows it".to_string(),
            msg(NEXT)
        ]
    );
    // A truncated object, then the next frame: its header breaks the object.
    let stream = cat(&[
        b"Content-Length: x\r\n\r\n{\"id\": 3, \"a\": [1, ",
        &frame(NEXT),
    ]);
    assert_eq!(
        decode_all_ways(&stream),
        vec![
            "err -32700 id=null: its Content-Length `x` is not a length, and what follows is not JSON".to_string(),
            msg(NEXT)
        ]
    );
}

#[test]
fn a_huge_unframed_body_is_scanned_without_being_kept() {
    let mut d = Decoder::new();
    d.push(b"Content-Length: 100000000000000\r\n\r\n{\"id\": 9, \"text\": \"");
    let chunk = vec![b'x'; 64 << 10];
    let mut peak = 0;
    for _ in 0..(3 * KEEP_FOR_ID / chunk.len()) {
        d.push(&chunk);
        assert_eq!(d.next_event(), None);
        peak = peak.max(d.buf.len());
    }
    assert!(peak <= KEEP_FOR_ID + chunk.len(), "kept {peak} bytes");
    d.push(b"\"}");
    d.push(&frame(NEXT));
    let ev = d.next_event().map(|e| render(&e)).unwrap();
    assert_eq!(
        ev,
        "err -32700 id=null: its Content-Length 100000000000000 is above the 64 MiB limit; what follows it was skipped"
    );
    assert_eq!(d.next_event().map(|e| render(&e)), Some(msg(NEXT)));
}

#[test]
fn garbage_between_frames_gets_one_parse_error_and_is_skipped() {
    let stream = cat(&[
        &frame(HOVER),
        b"garbage \x00\xff and more garbage",
        &frame(NEXT),
    ]);
    assert_eq!(
        decode_all_ways(&stream),
        vec![
            msg(HOVER),
            "err -32700 id=null: unexpected bytes where a Content-Length header should be"
                .to_string(),
            msg(NEXT)
        ]
    );
    // A header line without its colon, and a header block that never ends.
    let stream = cat(&[b"Content-Length 12\r\n\r\n", &frame(NEXT)]);
    assert_eq!(decode_all_ways(&stream)[1], msg(NEXT));
    let endless = cat(&[b"X-Pad: ", &vec![b'a'; MAX_HEADER], &frame(NEXT)]);
    assert_eq!(
        decode(&[&endless]),
        vec![
            "err -32700 id=null: a header block longer than 8 KiB".to_string(),
            msg(NEXT)
        ]
    );
}

#[test]
fn an_empty_body_is_a_parse_error() {
    let stream = cat(&[b"Content-Length: 0\r\n\r\n", &frame(NEXT)]);
    assert_eq!(
        decode_all_ways(&stream),
        vec![
            "err -32700 id=null: the body is not JSON: EOF while parsing a value at line 1 column 0".to_string(),
            msg(NEXT)
        ]
    );
}

#[test]
fn a_body_of_garbage_with_a_length_too_long_resumes_at_the_next_header() {
    let stream = cat(&[b"Content-Length: 10\r\n\r\nnull", &frame(NEXT)]);
    let got = decode_all_ways(&stream);
    assert_eq!(got[1..], [msg(NEXT)], "{got:?}");
    assert!(
        got[0].starts_with("err -32700 id=null: the body is not JSON"),
        "{got:?}"
    );
}

#[test]
fn replies_are_framed_json_rpc_errors() {
    let rej = Rejection::new(INVALID_REQUEST, json!(7), "why", b"");
    let reply = rej.reply().unwrap();
    let text = String::from_utf8(reply).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert_eq!(head, format!("Content-Length: {}", body.len()));
    let v: Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        v,
        json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32600, "message": "kernel-lsp dropped a message: why"}})
    );
}

#[test]
fn the_end_of_input_inside_a_message_is_reported() {
    let mut d = Decoder::new();
    d.push(&frame(HOVER)[..30]);
    assert_eq!(d.next_event(), None);
    assert!(d
        .finish()
        .unwrap()
        .starts_with("the input ended inside a message"));
    let mut d = Decoder::new();
    d.push(&frame(HOVER));
    d.push(b"\r\n");
    assert!(d.next_event().is_some());
    assert_eq!(d.next_event(), None);
    assert_eq!(d.finish(), None);
}

/// Issue #28: a header block whose Content-Length is rejected, with no body after it,
/// consumes nothing beyond its own blank line: the next frame is served.
#[test]
fn a_rejected_header_with_no_body_keeps_the_next_frame() {
    for (header, why) in [
        (
            "Content-Length: abc\r\n\r\n",
            "its Content-Length `abc` is not a length",
        ),
        (
            "Content-Length: -1\r\n\r\n",
            "its Content-Length `-1` is not a length",
        ),
        (
            "Content-Length: 100000000000000\r\n\r\n",
            "its Content-Length 100000000000000 is above the 64 MiB limit",
        ),
        (
            "Content-Type: application/json\r\n\r\n",
            "it has no Content-Length header",
        ),
        // Blank lines between the two frames change nothing.
        (
            "Content-Length: abc\r\n\r\n\r\n\n",
            "its Content-Length `abc` is not a length",
        ),
    ] {
        for next in [
            frame(NEXT),
            frame_with(&NEXT.len().to_string(), NEXT.as_bytes()),
        ] {
            let stream = cat(&[header.as_bytes(), &next]);
            assert_eq!(
                decode_all_ways(&stream),
                vec![
                    format!("err -32700 id=null: {why}, and no JSON object follows it"),
                    msg(NEXT)
                ],
                "{header:?}"
            );
        }
    }
    // Two rejected headers in a row, then a valid frame.
    let stream = cat(&[
        b"Content-Length: x\r\n\r\nContent-Length: y\r\n\r\n",
        &frame(NEXT),
    ]);
    let got = decode_all_ways(&stream);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[2], msg(NEXT));
}

/// Issue #28: bytes after a well-framed body are discarded up to the next
/// Content-Length, even when they run straight into its name.
#[test]
fn trailing_bytes_after_a_body_are_skipped_up_to_the_next_header() {
    let garbage = "err -32700 id=null: unexpected bytes where a Content-Length header should be";
    for trailing in [&b"xyz"[..], b"123", b"x-y_z", b"xyz: 1 ", b"\r\nxyz", b"}"] {
        let stream = cat(&[&frame(HOVER), trailing, &frame(NEXT)]);
        assert_eq!(
            decode_all_ways(&stream),
            vec![msg(HOVER), garbage.to_string(), msg(NEXT)],
            "{:?}",
            trailing.escape_ascii().to_string()
        );
    }
    // The same bytes inside a frame whose length covers them: one answer, with the id.
    let body = cat(&[HOVER.as_bytes(), b"xyz"]);
    let stream = cat(&[&frame_with(&body.len().to_string(), &body), &frame(NEXT)]);
    assert_eq!(
        decode_all_ways(&stream),
        vec![
            format!(
                "err -32600 id=7: its Content-Length is {} but its JSON body is {} bytes",
                body.len(),
                HOVER.len()
            ),
            msg(NEXT)
        ]
    );
    // A frame that puts Content-Type first is still a frame.
    let stream = cat(&[
        &frame(HOVER),
        format!(
            "Content-Type: application/vscode-jsonrpc\r\nContent-Length: {}\r\n\r\n{NEXT}",
            NEXT.len()
        )
        .as_bytes(),
    ]);
    assert_eq!(decode_all_ways(&stream), vec![msg(HOVER), msg(NEXT)]);
}

/// `{"jsonrpc":"2.0","id":<id>,"method":"x","params":` + `[` × depth + `]` × depth + `}`.
fn nested(id: &str, depth: usize) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"x","params":{}{}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    )
}

/// Issue #28: a body that cannot be parsed, but whose top level can be read, is
/// answered with its id: nesting past serde_json's limit, or a syntax error inside a
/// nested value.
#[test]
fn a_parse_error_below_a_readable_top_level_keeps_the_id() {
    let deep = "err -32700 id=9: its JSON nests arrays and objects more than 127 levels deep, the most kernel-lsp reads";
    // Just under the limit: a valid message.
    let ok = nested("9", 126);
    assert_eq!(decode(&[&frame(&ok)]), vec![msg(&ok)]);
    for depth in [127, 128, 1000] {
        let body = nested("9", depth);
        let stream = cat(&[&frame(&body), &frame(NEXT)]);
        assert_eq!(
            decode(&[&stream]),
            vec![deep.to_string(), msg(NEXT)],
            "{depth}"
        );
        // Unframed (no header), and with a length 3 too long: the same id.
        let stream = cat(&[body.as_bytes(), &frame(NEXT)]);
        let got = decode(&[&stream]);
        assert!(
            got[0].starts_with("err -32600 id=9: it has no Content-Length header"),
            "{got:?}"
        );
        assert_eq!(got[1], msg(NEXT));
        let stream = cat(&[
            &frame_with(&(body.len() + 3).to_string(), body.as_bytes()),
            &frame(NEXT),
        ]);
        let got = decode(&[&stream]);
        assert_eq!(got[0], deep, "{depth}");
        assert_eq!(got[1], msg(NEXT));
    }
    let stream = cat(&[&frame(&nested("\"s\"", 127)), &frame(NEXT)]);
    assert_eq!(
        decode_all_ways(&stream)[0],
        deep.replace("id=9", "id=\"s\"")
    );
    // A syntax error inside params, or a bad escape in a string there.
    for body in [
        r#"{"jsonrpc":"2.0","id":9,"method":"x","params":{"a":tru}}"#,
        r#"{"jsonrpc":"2.0","method":"x","params":{"a":"\q"},"id":9}"#,
        r#"{"jsonrpc":"2.0","id":9,"method":"x","params":[1,,2]}"#,
    ] {
        let got = decode_all_ways(&cat(&[&frame(body), &frame(NEXT)]));
        assert!(
            got[0].starts_with("err -32700 id=9: the body is not JSON: "),
            "{body}: {got:?}"
        );
        assert_eq!(got[1], msg(NEXT));
    }
    // A top level that cannot be read keeps id null.
    for body in [
        r#"{"jsonrpc":"2.0","id":9 "method":"x"}"#,
        r#"{"jsonrpc":"2.0","id":9.5,"method":"x","params":[}"#,
        r#"{"jsonrpc":"2.0","id":{"id":9},"method":"x","params":[}"#,
        r#"{"jsonrpc":"2.0",id:9,"method":"x","params":[}"#,
    ] {
        let got = decode(&[&cat(&[&frame(body), &frame(NEXT)])]);
        assert!(
            got[0].starts_with("err -32700 id=null: "),
            "{body}: {got:?}"
        );
        assert_eq!(got[1], msg(NEXT));
    }
    // A response nested too deep is logged, not answered.
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":4,"result":{}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let got = decode(&[&frame(&body)]);
    assert!(got[0].starts_with("err -32700 id=4 no reply: "), "{got:?}");
}

/// Found by the fuzz run: a body cut short, or missing, under a header for all of it,
/// must not take the next frame (or its header) with it.
#[test]
fn a_body_cut_short_keeps_the_next_frame() {
    let full = r#"{"jsonrpc":"2.0","id":3,"method":"x","params":"abcdef"}"#;
    for cut in [0, 1, 20, full.find("abc").unwrap(), full.len() - 2] {
        let stream = cat(&[
            &frame_with(&full.len().to_string(), &full.as_bytes()[..cut]),
            &frame(NEXT),
        ]);
        // However reads split it (the reason may differ: how much of the body came).
        let ways = (1..stream.len())
            .map(|at| decode(&[&stream[..at], &stream[at..]]))
            .chain([
                decode(&[&stream]),
                decode(&stream.chunks(1).collect::<Vec<_>>()),
            ]);
        for got in ways {
            assert_eq!(got.last(), Some(&msg(NEXT)), "cut at {cut}: {got:?}");
            assert_eq!(got.len(), 2, "cut at {cut}: {got:?}");
        }
    }
}

/// Found by the fuzz run: the input pauses while a body cut inside a string runs past
/// its length, and the length cuts the next header in two.
#[test]
fn a_pause_inside_a_cut_body_keeps_the_next_header() {
    let full = r#"{"jsonrpc":"2.0","id":3,"method":"x","params":"abcdef"}"#;
    let cut = full.find("abc").unwrap();
    let next = frame(NEXT);
    let head = full.len() - cut;
    assert!(
        head < 14,
        "the length ends inside the next `Content-Length`"
    );
    let mut d = Decoder::new();
    d.push(&frame_with(
        &full.len().to_string(),
        &full.as_bytes()[..cut],
    ));
    d.push(&next[..head + 4]);
    assert_eq!(d.next_event(), None);
    let ev = d.stalled().map(|e| render(&e));
    assert!(ev.is_some_and(|e| e.starts_with("err -32700 id=null")));
    d.push(&next[head + 4..]);
    let mut out = Vec::new();
    drain(&mut d, &mut out);
    assert_eq!(out, vec![msg(NEXT)]);
}
