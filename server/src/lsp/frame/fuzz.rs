//! A bounded fuzz run over the frame decoder (issue #28), part of the ordinary test
//! suite: seeded streams of valid frames mixed with every kind of damage (malformed and
//! oversized headers, headers with no body, truncated bodies, wrong lengths, trailing
//! and binary garbage, unframed JSON, nesting past the parser's limit), fed in random
//! chunks with random input pauses. The invariants:
//!
//! - the decoder never panics and always makes progress;
//! - every valid request is answered exactly once, with its id, whatever came before
//!   it, and delivered intact and in order unless the damage before it carries header
//!   text of its own (then it may be refused, with its id); a request nested too deep
//!   is refused once, with its id;
//! - every error reply is itself a valid frame;
//! - the buffer stays bounded by the largest frame, not by the stream.
//!
//! `KERNEL_LSP_FUZZ_CASES` (default [`CASES`]) and `KERNEL_LSP_FUZZ_SEED` run it longer
//! or from another seed; a failure names its seed and case, and `KERNEL_LSP_FUZZ_CASE`
//! replays that one case.

use super::*;

/// Streams per run: about 2 s in a debug build on one core.
const CASES: u64 = 1500;
/// Ids of the requests that must be served are at least this; garbage uses smaller ones.
const VALID_IDS: i64 = 1_000_000;

/// xorshift64*: small, seeded, and the same on every machine.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// Bodies that are JSON but not a message, or not JSON at all.
const NOT_MESSAGES: &[&[u8]] = &[
    b"[]",
    b"null",
    b"5",
    b"\"s\"",
    b"{}",
    b"{\"jsonrpc\":}",
    b"hello",
    b"",
    br#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#,
    br#"{"jsonrpc":"2.0","id":4,"id":5,"method":"x"}"#,
    br#"{"jsonrpc":"2.0","id":4,"error":{"code":"x"}}"#,
];

/// What a piece of the stream must produce.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    /// A valid message: delivered once, as this value.
    Served(Value),
    /// A request that must be refused with its id (nested past the limit).
    Refused(Value),
    /// Damage: anything but a panic, a second answer to one id, or an unbounded buffer.
    Anything,
}

struct Piece {
    bytes: Vec<u8>,
    expect: Expect,
    /// For the failure message.
    what: &'static str,
}

/// Damage: bytes with no promise attached but the invariants.
fn damage(bytes: impl Into<Vec<u8>>, what: &'static str) -> Piece {
    Piece {
        bytes: bytes.into(),
        expect: Expect::Anything,
        what,
    }
}

/// A random JSON value for `params`, nested at most `depth` deep: strings with escapes,
/// non-ASCII text and header-like text, numbers, literals.
fn value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth == 0 { 4 } else { 6 }) {
        0 => json!(rng.below(1000) as i64 - 500),
        1 => json!(*rng.pick(&[
            "",
            "x",
            "line\nbreak \"quoted\" \\ back",
            "naïve ∑ 🚀",
            "Content-Length: 5\r\n\r\n{",
            "}]\"",
        ])),
        2 => json!(*rng.pick(&[true, false])),
        3 => Value::Null,
        4 => Value::Array((0..rng.below(4)).map(|_| value(rng, depth - 1)).collect()),
        _ => Value::Object(
            (0..rng.below(4))
                .map(|i| (format!("k{i}"), value(rng, depth - 1)))
                .collect(),
        ),
    }
}

/// `body` framed with a header block in one of the shapes clients write.
fn framed(rng: &mut Rng, body: &[u8]) -> Vec<u8> {
    let eol = if rng.chance(80) { "\r\n" } else { "\n" };
    let name = *rng.pick(&["Content-Length", "content-length", "CONTENT-LENGTH"]);
    let len = body.len();
    let head = match rng.below(4) {
        0 => format!(
            "Content-Type: application/vscode-jsonrpc; charset=utf-8{eol}{name}: {len}{eol}{eol}"
        ),
        1 => format!("{name}: {len}{eol}Content-Type: application/vscode-jsonrpc{eol}{eol}"),
        _ => format!("{name}: {len}{eol}{eol}"),
    };
    [head.as_bytes(), body].concat()
}

/// A message as bytes.
fn body_of(msg: &Value) -> Vec<u8> {
    serde_json::to_vec(msg).expect("a JSON value serializes")
}

struct Gen {
    rng: Rng,
    next_id: i64,
}

impl Gen {
    fn valid_id(&mut self) -> Value {
        self.next_id += 1;
        if self.rng.chance(20) {
            json!(format!("r{}", self.next_id))
        } else {
            json!(self.next_id)
        }
    }

    /// An id that garbage may carry: never one of the valid ones.
    fn garbage_id(&mut self) -> Value {
        json!(self.rng.below(VALID_IDS as usize) as i64)
    }

    fn request(&mut self, id: Value) -> Value {
        let depth = self.rng.below(5);
        let params = match self.rng.chance(30) {
            true => self.sync_params(depth),
            false => value(&mut self.rng, depth),
        };
        let mut msg = json!({"jsonrpc": "2.0", "id": id, "method": "textDocument/hover"});
        if self.rng.chance(80) {
            msg["params"] = params;
        }
        msg
    }

    /// Params shaped as `didOpen`'s or `didChange`'s, whose texts the decoder may lift.
    fn sync_params(&mut self, depth: usize) -> Value {
        let mut text = || match value(&mut self.rng, 0) {
            Value::Null => value(&mut self.rng, depth),
            v => v,
        };
        let doc = json!({"uri": "file:///w/k.cu", "version": 3, "text": text()});
        let changes: Vec<Value> = (0..3).map(|_| json!({"text": text()})).collect();
        match self.rng.below(3) {
            0 => json!({"textDocument": doc}),
            1 => json!({"textDocument": doc, "contentChanges": changes}),
            _ => json!({"contentChanges": changes}),
        }
    }

    fn piece(&mut self) -> Piece {
        let rng = &mut self.rng;
        match rng.below(20) {
            0..=5 => {
                let id = self.valid_id();
                let msg = self.request(id);
                let bytes = framed(&mut self.rng, &body_of(&msg));
                Piece {
                    bytes,
                    expect: Expect::Served(msg),
                    what: "a valid request",
                }
            }
            6 => {
                // Unique, so that one lost to damage cannot pass for another.
                let id = self.valid_id();
                let msg = if self.rng.chance(50) {
                    json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": id}})
                } else {
                    json!({"jsonrpc": "2.0", "id": id, "result": null})
                };
                let bytes = framed(&mut self.rng, &body_of(&msg));
                Piece {
                    bytes,
                    expect: Expect::Served(msg),
                    what: "a notification or response",
                }
            }
            7 => {
                // A valid request followed by trailing bytes.
                let id = self.valid_id();
                let msg = self.request(id);
                let mut bytes = framed(&mut self.rng, &body_of(&msg));
                let tail =
                    *self
                        .rng
                        .pick(&[&b"xyz"[..], b"123", b"}", b"\r\nxyz", b"xyz: 1 ", b"\0\xff"]);
                bytes.extend_from_slice(tail);
                Piece {
                    bytes,
                    expect: Expect::Served(msg),
                    what: "a request with trailing bytes",
                }
            }
            8 => {
                // Nested past serde_json's limit: refused, with the id.
                let id = self.valid_id();
                let depth = 127 + self.rng.below(400);
                let body = format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"x","params":{}{}}}"#,
                    "[".repeat(depth),
                    "]".repeat(depth)
                );
                let bytes = framed(&mut self.rng, body.as_bytes());
                Piece {
                    bytes,
                    expect: Expect::Refused(id),
                    what: "a request nested too deep",
                }
            }
            9 => {
                // A rejected header, with or without a JSON body after it.
                let len = *rng.pick(&[
                    "abc",
                    "-1",
                    "",
                    "1e3",
                    "100000000000000",
                    "99999999999999999999999",
                ]);
                let mut bytes = if rng.chance(20) {
                    b"Content-Type: application/json\r\n\r\n".to_vec()
                } else {
                    format!("Content-Length: {len}\r\n\r\n").into_bytes()
                };
                if self.rng.chance(50) {
                    let id = self.garbage_id();
                    let msg = self.request(id);
                    bytes.extend(body_of(&msg));
                }
                damage(bytes, "a rejected header")
            }
            10 => {
                // A body cut short (possibly to nothing) under a header for all of it.
                let id = self.garbage_id();
                let body = body_of(&self.request(id));
                let cut = self.rng.below(body.len());
                let mut bytes = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
                bytes.extend_from_slice(&body[..cut]);
                damage(bytes, "a truncated body")
            }
            11 => {
                // A length a little or a lot off.
                let id = self.garbage_id();
                let body = body_of(&self.request(id));
                let delta = *self.rng.pick(&[1usize, 2, 3, 10, 1000, 60_000_000]);
                let len = if self.rng.chance(50) {
                    body.len() + delta
                } else {
                    body.len().saturating_sub(delta)
                };
                let mut bytes = format!("Content-Length: {len}\r\n\r\n").into_bytes();
                bytes.extend(body);
                damage(bytes, "a wrong length")
            }
            12 => {
                // Random bytes, binary or printable.
                let n = 1 + self.rng.below(40);
                let printable = self.rng.chance(50);
                let bytes: Vec<u8> = (0..n)
                    .map(|_| {
                        let b = self.rng.next() as u8;
                        if printable {
                            b' ' + b % 95
                        } else {
                            b
                        }
                    })
                    .collect();
                damage(bytes, "random bytes")
            }
            13 => {
                // JSON with no header at all, complete or not.
                let id = self.garbage_id();
                let mut bytes = body_of(&self.request(id));
                if self.rng.chance(30) {
                    bytes.truncate(self.rng.below(bytes.len()));
                }
                damage(bytes, "unframed JSON")
            }
            14 => {
                // A huge length over a big body: scanned and dropped as it arrives.
                let id = self.garbage_id();
                let text = "x".repeat(self.rng.below(200_000));
                let body =
                    body_of(&json!({"jsonrpc": "2.0", "id": id, "method": "x", "params": text}));
                let bytes = [b"Content-Length: 100000000000000\r\n\r\n".as_slice(), &body].concat();
                damage(bytes, "a huge length")
            }
            15 => {
                // A header block that never ends, or one with odd lines.
                let bytes = match self.rng.below(3) {
                    0 => [
                        b"X-Pad: ".as_slice(),
                        &vec![b'a'; MAX_HEADER + self.rng.below(100)],
                    ]
                    .concat(),
                    1 => b"Content-Length 12\r\n\r\n".to_vec(),
                    _ => b"Content-Length: 3\r\ncontent-length: 4\r\n\r\n".to_vec(),
                };
                damage(bytes, "a bad header block")
            }
            16 => {
                // A body that is JSON but not a message, or not JSON at all.
                let body = self.rng.pick(NOT_MESSAGES);
                let bytes = framed(&mut self.rng, body);
                damage(bytes, "a body that is not a message")
            }
            17 => Piece {
                bytes: self
                    .rng
                    .pick(&[&b"\r\n"[..], b"\n\n", b"   ", b"\t"])
                    .to_vec(),
                expect: Expect::Anything,
                what: "blank bytes",
            },
            _ => {
                // Two frames interleaved: the second's header inside the first's body.
                let id = self.garbage_id();
                let body = body_of(&self.request(id));
                let at = self.rng.below(body.len());
                let id2 = self.garbage_id();
                let inner = framed(
                    &mut self.rng,
                    &body_of(&json!({"jsonrpc": "2.0", "id": id2, "method": "x"})),
                );
                let mut bytes = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
                bytes.extend_from_slice(&body[..at]);
                bytes.extend(inner);
                bytes.extend_from_slice(&body[at..]);
                damage(bytes, "interleaved frames")
            }
        }
    }
}

/// The id an event answers: a delivered request's, or a rejection that is answered.
fn answered_id(ev: &Event) -> Option<Value> {
    match ev {
        Event::Message(v) if v.get("method").is_some() => v.get("id").cloned(),
        Event::Message(_) => None,
        Event::Rejected(r) => r.reply().map(|_| r.id.clone()).filter(|id| !id.is_null()),
    }
}

/// An id [`Gen::valid_id`] makes: never in garbage.
fn is_request_id(id: &Value) -> bool {
    match id {
        Value::Number(n) => n.as_i64().is_some_and(|n| n > VALID_IDS),
        Value::String(s) => s.starts_with('r'),
        _ => false,
    }
}

/// One stream: generate, decode in random chunks with random pauses, check.
fn run_case(seed: u64, case: u64) {
    let mut gen = Gen {
        rng: Rng::new(seed ^ case.wrapping_mul(0xD1B5_4A32_D192_ED03)),
        next_id: VALID_IDS,
    };
    let n = 1 + gen.rng.below(12);
    let mut pieces: Vec<Piece> = (0..n).map(|_| gen.piece()).collect();
    // A last valid request: whatever came before, it is served.
    let id = gen.valid_id();
    let last = gen.request(id);
    pieces.push(Piece {
        bytes: framed(&mut gen.rng, &body_of(&last)),
        expect: Expect::Served(last),
        what: "the last request",
    });
    check_stream(&pieces, &mut gen.rng, &format!("seed {seed} case {case}"));
}

/// Decode the pieces as one stream, in chunks and with pauses drawn from `rng`, and
/// check the invariants of the module documentation.
fn check_stream(pieces: &[Piece], rng: &mut Rng, label: &str) {
    let stream: Vec<u8> = pieces
        .iter()
        .flat_map(|p| p.bytes.iter().copied())
        .collect();
    let largest = pieces.iter().map(|p| p.bytes.len()).max().unwrap_or(0);
    let story = || {
        let kinds: Vec<&str> = pieces.iter().map(|p| p.what).collect();
        format!("{label}: {kinds:?}\nstream: {}", sample_long(&stream))
    };

    let plan = schedule(rng, stream.len());
    let bounded = |d: &Decoder, chunk_max: usize| {
        let bound = largest.max(KEEP_FOR_ID) + chunk_max + MAX_HEADER;
        assert!(
            d.buf.len() <= bound,
            "buffer {} > {bound}\n{}",
            d.buf.len(),
            story()
        );
        assert!(
            d.buf.capacity() <= 4 * bound,
            "capacity {} > 4 × {bound}\n{}",
            d.buf.capacity(),
            story()
        );
    };
    let events = feed(Decoder::new(), &stream, &plan, bounded);
    // The decoder that lifts every body's document texts (frame/lift.rs) says the same.
    let lifted = feed(Decoder::lifting_from(0), &stream, &plan, bounded);
    assert!(
        events == lifted,
        "lifting changed the events:\n{events:#?}\n{lifted:#?}\n{}",
        story()
    );

    // Each answered id once; replies are frames a client can read.
    let mut seen = std::collections::HashSet::new();
    for ev in &events {
        // Garbage may repeat its ids; the requests' own are unique.
        if let Some(id) = answered_id(ev).filter(is_request_id) {
            assert!(
                seen.insert(id.to_string()),
                "id {id} answered twice: {events:?}\n{}",
                story()
            );
        }
        if let Event::Rejected(r) = ev {
            if let Some(reply) = r.reply() {
                let mut check = Decoder::new();
                check.push(&reply);
                assert!(
                    matches!(check.next_event(), Some(Event::Message(_))),
                    "reply is not a frame: {r:?}"
                );
            }
        }
    }
    // Every valid request answered once, with its id; delivered intact and in order
    // unless the damage before it carries header text of its own (a frame cut inside a
    // string that reads `Content-Length: 5`): no reader can tell that from a header, so
    // there the request may be refused instead, but still with its id.
    let delivered: Vec<&Value> = events
        .iter()
        .filter_map(|ev| match ev {
            Event::Message(v) => Some(v),
            _ => None,
        })
        .collect();
    let answers_to = |id: &Value| {
        events
            .iter()
            .filter(|ev| answered_id(ev).as_ref() == Some(id))
            .count()
    };
    let mut from = 0;
    let mut decoy = false;
    for p in pieces {
        match &p.expect {
            Expect::Served(msg) => {
                let id = msg.get("id").filter(|_| msg.get("method").is_some());
                if let Some(id) = id {
                    assert_eq!(
                        answers_to(id),
                        1,
                        "{} {msg}: {events:#?}\n{}",
                        p.what,
                        story()
                    );
                }
                match delivered[from..].iter().position(|v| *v == msg) {
                    Some(k) => from += k + 1,
                    None if decoy => {}
                    None => panic!(
                        "{} was not delivered (or not in order): {msg}\nevents: {events:#?}\n{}",
                        p.what,
                        story()
                    ),
                }
                decoy = false;
            }
            Expect::Refused(id) => {
                assert_eq!(
                    answers_to(id),
                    1,
                    "{} with id {id}: {events:#?}\n{}",
                    p.what,
                    story()
                );
                decoy = false;
            }
            Expect::Anything => decoy |= p.bytes.get(1..).and_then(find_header).is_some(),
        }
    }
    // No valid id is served by a message that is not the one sent.
    for v in &delivered {
        if let Some(id) = v
            .get("id")
            .and_then(Value::as_i64)
            .filter(|&id| id > VALID_IDS)
        {
            assert!(
                pieces
                    .iter()
                    .any(|p| matches!(&p.expect, Expect::Served(m) if m == *v)),
                "a message with id {id} that was not sent: {v}\n{}",
                story()
            );
        }
    }
}

/// How a stream is fed: each chunk's size, and whether the input pauses after it.
fn schedule(rng: &mut Rng, len: usize) -> Vec<(usize, bool)> {
    let mut plan = Vec::new();
    let mut at = 0;
    while at < len {
        let size = match rng.below(4) {
            0 => 1,
            1 => 1 + rng.below(16),
            2 => 1 + rng.below(4096),
            _ => 64 << 10,
        }
        .min(len - at);
        plan.push((size, rng.chance(10)));
        at += size;
    }
    plan
}

/// The events of `stream` fed to `d` by `plan`; `check` sees the decoder after each
/// chunk, with the largest chunk so far. Panics when the decoder makes no progress.
fn feed(
    mut d: Decoder,
    stream: &[u8],
    plan: &[(usize, bool)],
    check: impl Fn(&Decoder, usize),
) -> Vec<Event> {
    let mut events = Vec::new();
    let (mut at, mut chunk_max) = (0, 0);
    for &(size, pause) in plan {
        chunk_max = chunk_max.max(size);
        d.push(&stream[at..at + size]);
        at += size;
        while let Some(ev) = d.next_event() {
            events.push(ev);
            assert!(
                events.len() <= stream.len() + 16,
                "no progress: more events than bytes"
            );
        }
        // The input may pause here; a pause never drops a valid frame.
        if pause {
            events.extend(d.stalled());
            events.extend(std::iter::from_fn(|| d.next_event()));
        }
        check(&d, chunk_max);
    }
    let _ = d.finish();
    events
}

/// Up to 2000 bytes of the stream, escaped, for a failure message.
fn sample_long(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(2000)];
    let mut s = cut.escape_ascii().to_string();
    if bytes.len() > cut.len() {
        s.push_str(&format!("… ({} bytes)", bytes.len()));
    }
    s
}

/// The failures of issue #28 and those the fuzz run found, each followed by a valid
/// request, through the same checks, under 200 chunkings each.
#[test]
fn fuzz_regressions() {
    let request = |id: i64| json!({"jsonrpc": "2.0", "id": id, "method": "textDocument/hover"});
    let served = |id: i64| Piece {
        bytes: encode(&body_of(&request(id))),
        expect: Expect::Served(request(id)),
        what: "a valid request",
    };
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":{},"method":"x","params":{}{}}}"#,
        VALID_IDS + 9,
        "[".repeat(127),
        "]".repeat(127)
    );
    let cut = br#"{"jsonrpc":"2.0","id":3,"method":"x","params":"abc"#;
    let cases: Vec<Vec<Piece>> = vec![
        vec![
            damage(b"Content-Length: abc\r\n\r\n", "a header with no body"),
            served(VALID_IDS + 1),
        ],
        vec![
            damage(b"Content-Length: -1\r\n\r\n", "a header with no body"),
            served(VALID_IDS + 1),
        ],
        vec![
            damage(
                b"Content-Length: 100000000000000\r\n\r\n",
                "a header with no body",
            ),
            served(VALID_IDS + 1),
        ],
        vec![
            damage(b"Content-Type: text/plain\r\n\r\n", "a header with no body"),
            served(VALID_IDS + 1),
        ],
        vec![
            served(VALID_IDS + 1),
            damage(b"xyz", "trailing bytes"),
            served(VALID_IDS + 2),
        ],
        vec![
            Piece {
                bytes: encode(deep.as_bytes()),
                expect: Expect::Refused(json!(VALID_IDS + 9)),
                what: "a request nested 127 deep",
            },
            served(VALID_IDS + 1),
        ],
        vec![
            damage(
                [b"Content-Length: 60\r\n\r\n".as_slice(), cut].concat(),
                "a body cut in a string",
            ),
            served(VALID_IDS + 1),
        ],
        vec![
            damage(b"Content-Length: 60\r\n\r\n", "a missing body"),
            served(VALID_IDS + 1),
        ],
    ];
    for (k, pieces) in cases.iter().enumerate() {
        let mut rng = Rng::new(k as u64);
        for round in 0..200 {
            check_stream(pieces, &mut rng, &format!("regression {k} round {round}"));
        }
    }
}

#[test]
fn fuzz_frames_bounded() {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let seed = env("KERNEL_LSP_FUZZ_SEED").unwrap_or(0x6b65_726e_656c);
    let cases = env("KERNEL_LSP_FUZZ_CASES").unwrap_or(CASES);
    let started = std::time::Instant::now();
    let only = env("KERNEL_LSP_FUZZ_CASE");
    for case in only.map_or(0..cases, |c| c..c + 1) {
        run_case(seed, case);
    }
    eprintln!(
        "fuzz_frames_bounded: {cases} streams from seed {seed} in {:?}",
        started.elapsed()
    );
}
