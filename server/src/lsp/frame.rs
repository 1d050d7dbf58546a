//! The pure core of the framing layer in front of tower-lsp: LSP base-protocol frames
//! (`Content-Length: N\r\n\r\n` + a JSON body) read from a byte stream that may be
//! broken, and the check that a body is a JSON-RPC message tower-lsp can take.
//!
//! [`Decoder`] is fed bytes as they arrive and yields [`Event`]s: a valid message body to
//! forward, or a [`Rejection`] to log and (for requests) answer. It never stops: after
//! any bad frame it finds the next message and goes on. The rules, in order:
//!
//! - A header block must be `Name: value` lines ending in an empty line (CRLF or LF).
//!   Bytes that cannot start one are garbage: skipped up to the next `Content-Length`
//!   (any case), with one parse-error reply per run of garbage. So are bytes that run
//!   into a header (`{…}xyzContent-Length: 5` after a body): a rejected block with a
//!   `Content-Length` in it that does not start a line.
//! - A missing, non-numeric, negative or over-[`MAX_BODY`] Content-Length is never
//!   trusted, and nothing is allocated for it. If a JSON object or array follows, its
//!   extent is found by scanning brackets and strings (streaming, at most
//!   [`KEEP_FOR_ID`] bytes kept to read its `id`), and it is dropped with an error that
//!   carries its id. Anything else is not this frame's (most often it is the next
//!   header): the rejected block consumes nothing beyond its own blank line. So a 10^14
//!   length costs nothing and the next message is served at once.
//! - A body that is not one JSON value is checked against the JSON value that starts
//!   there: a value that ends before the Content-Length (length too long) or after it
//!   (too short) is dropped with its id, and reading resumes right after the value, so
//!   the next frame is intact. A body that is too long is noticed as soon as a
//!   non-blank byte follows the value, or when the input pauses ([`Decoder::stalled`]):
//!   a client that waits for its answer is not left waiting for bytes that never come.
//!   Otherwise the frame is dropped and reading resumes at the first `Content-Length`
//!   after its first byte in what arrived, or after it: a body cut short (even inside a
//!   string, or missing) gives way to the frame that came instead.
//! - A JSON body is forwarded only if tower-lsp can read it: an object with
//!   `"jsonrpc": "2.0"`, an integer or string `id`, a string `method`, or a response with
//!   `result` or a well-formed `error` ([`check_message`]). Anything else is an
//!   invalid request (-32600), answered with its id when the id is readable.
//! - A dropped body that does not parse (an error deep inside, or nesting past serde_json's
//!   limit of 128) is answered with the id of its top level when that reads as an object
//!   ([`top_level`] delimits the members' values without parsing them).
//! - A body of [`LIFT_FROM`] bytes or more gets a buffer of its own length, and its
//!   document texts are decoded in that buffer and moved into the message ([`lift`]);
//!   the events are the same as without it.

use serde_json::{json, Value};

/// Bodies above this are refused without being read into memory.
pub const MAX_BODY: usize = 64 << 20;
/// Bodies from this size on have their document texts lifted out ([`lift`]) rather than
/// parsed with the rest: the text is decoded in the frame's buffer and moved, not copied.
pub const LIFT_FROM: usize = 1 << 20;
/// A header block longer than this is garbage.
const MAX_HEADER: usize = 8 << 10;
/// An unframed JSON body (no usable Content-Length) is kept up to this size to read its
/// `id`; beyond it, it is scanned and discarded as it arrives, and answered with id null.
pub const KEEP_FOR_ID: usize = 1 << 20;
const HEADER: &[u8] = b"content-length";
/// Why bytes between frames are dropped.
const UNEXPECTED: &str = "unexpected bytes where a Content-Length header should be";

/// JSON-RPC: invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: the JSON sent is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;

#[derive(Debug, PartialEq)]
pub enum Event {
    /// A valid JSON-RPC message, parsed (the service takes it without parsing again).
    Message(Value),
    /// Bytes dropped: log it, and send [`Rejection::reply`] when there is one.
    Rejected(Rejection),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// [`PARSE_ERROR`] or [`INVALID_REQUEST`].
    pub code: i64,
    /// The message's id when it could be read, else null.
    pub id: Value,
    /// What was wrong, in words, for the log and the reply.
    pub reason: String,
    /// The dropped message was a response (the client answering the server): answering
    /// it would be an answer to an answer, so it is only logged.
    pub response: bool,
    /// The first bytes dropped, escaped, for the log.
    pub sample: String,
}

impl Rejection {
    fn new(code: i64, id: Value, reason: impl Into<String>, dropped: &[u8]) -> Self {
        Rejection {
            code,
            id,
            reason: reason.into(),
            response: false,
            sample: sample(dropped),
        }
    }

    /// The framed JSON-RPC error response to write back, if one is due.
    pub fn reply(&self) -> Option<Vec<u8>> {
        if self.response {
            return None;
        }
        let msg = json!({
            "jsonrpc": "2.0",
            "id": self.id,
            "error": {"code": self.code, "message": format!("kernel-lsp dropped a message: {}", self.reason)},
        });
        Some(encode(
            &serde_json::to_vec(&msg).expect("a JSON value serializes"),
        ))
    }
}

/// `body` framed with its Content-Length header.
pub fn encode(body: &[u8]) -> Vec<u8> {
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

/// Up to 80 bytes, with control and non-UTF-8 bytes escaped.
fn sample(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(80)];
    let mut s = cut.escape_ascii().to_string();
    if bytes.len() > cut.len() {
        s.push('…');
    }
    s
}

/// Decodes frames from a byte stream; see the module documentation for the rules.
pub struct Decoder {
    /// Bytes received and not consumed yet; starts at the current state's first byte.
    buf: Vec<u8>,
    state: State,
    /// A rejection was just reported: the garbage that may follow it (the rest of the
    /// same bad frame) gets no reply of its own.
    quiet: bool,
    /// Bodies of at least this many bytes go through [`Decoder::lifted`].
    lift_from: usize,
}

enum State {
    /// Between frames: whitespace, then a header block.
    Header,
    /// After a usable header: `len` body bytes.
    Body { len: usize, scan: Extent },
    /// After a header without a usable Content-Length (or none at all): the JSON value
    /// that follows is found and dropped.
    Unframed {
        why: String,
        scan: Extent,
        /// The value is still in `buf` from its first byte (not past [`KEEP_FOR_ID`]).
        kept: bool,
    },
    /// Skipping to the next `Content-Length`.
    Garbage,
}

enum Step {
    /// More bytes are needed.
    Wait,
    /// The state changed; run again.
    Again,
    Emit(Event),
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    pub fn new() -> Self {
        Decoder {
            buf: Vec::new(),
            state: State::Header,
            quiet: false,
            lift_from: LIFT_FROM,
        }
    }

    /// A decoder that lifts the texts of bodies from `lift_from` bytes on (tests run
    /// every body that way, to check that it decodes as the plain parse does).
    #[cfg(test)]
    pub fn lifting_from(lift_from: usize) -> Self {
        Decoder {
            lift_from,
            ..Decoder::new()
        }
    }

    /// Append bytes read from the input.
    pub fn push(&mut self, bytes: &[u8]) {
        let want = self.buf.len() + bytes.len();
        if let State::Body { len, .. } = self.state {
            if len >= LIFT_FROM && want > self.buf.capacity() {
                // Doubling, but never past a big body's length: left to `Vec`, the room
                // would reach up to twice the body. (Not all at once from the length: a
                // wrong length would hold that room for bytes that never come.)
                let room = (2 * self.buf.capacity()).min(len).max(want);
                self.buf.reserve_exact(room - self.buf.len());
            }
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next event, or None when more bytes are needed.
    pub fn next_event(&mut self) -> Option<Event> {
        loop {
            let step = match self.state {
                State::Header => self.header(),
                State::Body { .. } => self.body(false),
                State::Unframed { .. } => self.unframed(),
                State::Garbage => self.garbage(),
            };
            match step {
                Step::Wait => return None,
                Step::Again => {}
                Step::Emit(ev) => {
                    self.quiet = matches!(ev, Event::Rejected(_));
                    return Some(ev);
                }
            }
        }
    }

    /// True while a body is waiting on bytes that a valid frame would not need: complete
    /// JSON short of its Content-Length, or JSON still open past it. Only the input
    /// pausing ([`Decoder::stalled`]) can settle these.
    pub fn may_stall(&mut self) -> bool {
        match &mut self.state {
            State::Body { len, scan } => match scan.feed(&self.buf) {
                Scan::Closed(_) => self.buf.len() < *len,
                Scan::Open => self.buf.len() >= *len,
                _ => false,
            },
            _ => false,
        }
    }

    /// The input paused. A body that [`Decoder::may_stall`] is dropped now (its
    /// Content-Length is wrong: a client waiting for its answer must not wait for bytes
    /// that never come), and the event returned; [`Decoder::next_event`] goes on.
    pub fn stalled(&mut self) -> Option<Event> {
        if !self.may_stall() {
            return None;
        }
        match self.body(true) {
            Step::Emit(ev) => {
                self.quiet = true;
                Some(ev)
            }
            _ => None,
        }
    }

    /// The input ended: what was left unfinished, for the log.
    pub fn finish(&self) -> Option<String> {
        let rest = String::from_utf8_lossy(&self.buf);
        match self.state {
            State::Header if rest.trim().is_empty() => None,
            State::Garbage => None,
            _ => Some(format!(
                "the input ended inside a message: {}",
                sample(&self.buf)
            )),
        }
    }

    fn consume(&mut self, n: usize) {
        self.buf.drain(..n);
        // Give back the room of a big body once it is gone.
        if self.buf.capacity() > 1 << 20 && self.buf.len() < self.buf.capacity() / 4 {
            self.buf.shrink_to(self.buf.len().max(64 << 10));
        }
    }

    fn enter_garbage(&mut self, reason: &str) -> Step {
        let rej = Rejection::new(PARSE_ERROR, Value::Null, reason, &self.buf);
        // The first byte cannot start a frame here; skipping it guarantees progress.
        self.consume(1.min(self.buf.len()));
        self.state = State::Garbage;
        if self.quiet {
            Step::Again
        } else {
            Step::Emit(Event::Rejected(rej))
        }
    }

    fn header(&mut self) -> Step {
        let blank = self
            .buf
            .iter()
            .take_while(|b| b.is_ascii_whitespace())
            .count();
        self.consume(blank);
        let Some(&first) = self.buf.first() else {
            return Step::Wait;
        };
        if first == b'{' || first == b'[' {
            self.state = State::Unframed {
                why: "it has no Content-Length header".into(),
                scan: Extent::default(),
                kept: true,
            };
            return Step::Again;
        }
        let window = &self.buf[..self.buf.len().min(MAX_HEADER)];
        let Some((block, total)) = header_end(window) else {
            if !plausible_header(window) {
                return self
                    .enter_garbage("unexpected bytes where a Content-Length header should be");
            }
            if self.buf.len() >= MAX_HEADER {
                return self.enter_garbage("a header block longer than 8 KiB");
            }
            return Step::Wait;
        };
        if !plausible_header(&self.buf[..block]) {
            return self.enter_garbage(UNEXPECTED);
        }
        let length = content_length(&self.buf[..block]);
        if length.is_err() && glued_header(&self.buf[..block]) {
            // Bytes ran into the next header (the tail of a body, `{…}xyzContent-Length:
            // 5`, or of a string that looked like a header): they are garbage up to it,
            // and the frame that starts there is intact.
            return self.enter_garbage(UNEXPECTED);
        }
        self.consume(total);
        self.quiet = false;
        self.state = match length {
            Ok(len) => State::Body {
                len,
                scan: Extent::default(),
            },
            Err(why) => State::Unframed {
                why,
                scan: Extent::default(),
                kept: true,
            },
        };
        Step::Again
    }

    /// `settle`: the input paused; a complete JSON value short of the length is final.
    fn body(&mut self, settle: bool) -> Step {
        let State::Body { len, scan } = &mut self.state else {
            unreachable!("body() runs in the Body state")
        };
        let len = *len;
        let scan = scan.feed(&self.buf);
        if self.buf.len() >= len {
            if len >= self.lift_from {
                if let Some(message) = self.lifted(len) {
                    self.state = State::Header;
                    return Step::Emit(Event::Message(message));
                }
            }
            let body = &self.buf[..len];
            if let Ok(v) = serde_json::from_slice::<Value>(body) {
                let ev = match check_message(&v, body) {
                    Ok(()) => Event::Message(v),
                    Err(rej) => Event::Rejected(rej),
                };
                self.consume(len);
                self.state = State::Header;
                return Step::Emit(ev);
            }
            if scan == Scan::Open && !settle {
                // A value that runs past the length (too short): its end may be on its
                // way; the next header would break it, and so would a pause.
                return Step::Wait;
            }
        } else {
            let early = match scan {
                // A value ended, and a non-blank byte after it is inside this body.
                Scan::Closed(m) => settle || self.buf[m..].iter().any(|b| !b.is_ascii_whitespace()),
                // Not one JSON value, whatever comes next.
                Scan::Broken(_) => true,
                // Not an object or array (so not a valid message), and a header follows.
                Scan::Scalar => find_header(&self.buf).is_some(),
                Scan::Open => false,
            };
            if !early {
                return Step::Wait;
            }
        }
        Step::Emit(Event::Rejected(self.misframed(len, scan)))
    }

    /// The first `len` bytes, a whole body, as a message whose document texts were
    /// decoded in this buffer and moved into it ([`lift`]), the buffer taken with them.
    /// None, with nothing consumed, unless the body has such texts and is a valid
    /// message: every other body is read by the plain parse, which words its errors.
    fn lifted(&mut self, len: usize) -> Option<Value> {
        let body = &self.buf[..len];
        let texts = lift::texts(body);
        if texts.is_empty() || !texts.iter().all(|t| lift::valid(&body[t.inner()])) {
            return None;
        }
        let skeleton = lift::skeleton(body, &texts);
        let mut message = serde_json::from_slice::<Value>(&skeleton).ok()?;
        check_message(&message, &skeleton).ok()?;
        let rest = self.buf.split_off(len);
        let body = std::mem::replace(&mut self.buf, rest);
        for (text, s) in texts.iter().zip(lift::decode(body, &texts)) {
            // The skeleton has `""` there: the same keys, the last of duplicates kept.
            let slot = message.pointer_mut(&text.pointer);
            *slot.expect("the skeleton holds each lifted text's place") = Value::String(s);
        }
        Some(message)
    }

    /// The body under Content-Length `len` is not one JSON value: drop what the scan says
    /// belongs to it and resume after that.
    fn misframed(&mut self, len: usize, scan: Scan) -> Rejection {
        let avail = self.buf.len();
        let upto = match scan {
            Scan::Closed(m) => m,
            // Not an object or array: resume where a header may start inside it (at its
            // first byte when the body is missing and the next header came instead).
            Scan::Scalar => self.buf[..len.min(avail)]
                .iter()
                .position(|b| b.eq_ignore_ascii_case(&b'c'))
                .unwrap_or(len),
            // A value cut short: resume at a header inside what arrived (not only inside
            // the length: the length may cut that header in two).
            Scan::Broken(p) => self.next_header_within(p.min(avail), p.min(len)),
            _ => self.next_header_within(avail, len),
        }
        .min(avail);
        let dropped = &self.buf[..upto];
        let rej = match (scan, serde_json::from_slice::<Value>(dropped)) {
            (Scan::Closed(m), Ok(v)) if m != len => {
                let mut rej = Rejection::new(
                    INVALID_REQUEST,
                    readable_id(v.get("id")),
                    format!("its Content-Length is {len} but its JSON body is {m} bytes"),
                    dropped,
                );
                rej.response = is_response(&v);
                rej
            }
            _ => {
                let why = match (
                    scan,
                    serde_json::from_slice::<Value>(&self.buf[..len.min(avail)]),
                ) {
                    (_, Err(e)) if avail >= len => not_json(&e),
                    (Scan::Broken(p), _) => format!(
                        "the body is not JSON: unexpected byte `{}` at offset {p}",
                        [self.buf[p]].escape_ascii()
                    ),
                    _ => "the body is not JSON: more than one JSON value".into(),
                };
                // The error may be deep inside (nesting, a bad escape): a top level that
                // reads still names the request to answer.
                let top = top_level(dropped);
                let mut rej = Rejection::new(
                    PARSE_ERROR,
                    top.as_ref().map_or(Value::Null, |t| t.id.clone()),
                    why,
                    dropped,
                );
                rej.response = top.is_some_and(|t| t.response);
                rej
            }
        };
        self.consume(upto);
        self.state = State::Header;
        rej
    }

    /// Where the bytes to drop from a value that broke off stop: at the first
    /// `Content-Length` after its first byte and before `end`, else at `otherwise`. A
    /// value cut short (inside a string, the next header breaks it only at its line end)
    /// must not take the next frame's header with it.
    fn next_header_within(&self, end: usize, otherwise: usize) -> usize {
        let Some(within) = self.buf.get(1..end) else {
            return otherwise;
        };
        if let Some(p) = find_header(within) {
            return p + 1;
        }
        // The input paused inside that header: keep its start for the rest to follow.
        if end == self.buf.len() {
            let started = (1..HEADER.len().min(within.len() + 1))
                .rev()
                .find(|&n| within[within.len() - n..].eq_ignore_ascii_case(&HEADER[..n]));
            if let Some(n) = started {
                return end - n;
            }
        }
        otherwise
    }

    fn unframed(&mut self) -> Step {
        let State::Unframed { why, scan, kept } = &mut self.state else {
            unreachable!("unframed() runs in the Unframed state")
        };
        let scan_now = scan.feed(&self.buf);
        let why = why.clone();
        match scan_now {
            Scan::Open => {
                if *kept && self.buf.len() > KEEP_FOR_ID {
                    *kept = false;
                }
                if !*kept {
                    scan.pos = 0;
                    self.buf.clear();
                }
                Step::Wait
            }
            Scan::Closed(m) => {
                let kept = *kept;
                let dropped = &self.buf[..m];
                let parsed = if kept {
                    serde_json::from_slice::<Value>(dropped).ok()
                } else {
                    None
                };
                let top = match &parsed {
                    Some(v) => Some(TopLevel {
                        id: readable_id(v.get("id")),
                        response: is_response(v),
                    }),
                    // Not parsed (too deep, or an error inside): its top level may read.
                    None if kept => top_level(dropped),
                    None => None,
                };
                let mut rej = match &top {
                    Some(t) => Rejection::new(
                        INVALID_REQUEST,
                        t.id.clone(),
                        format!("{why}; its JSON body was not read"),
                        dropped,
                    ),
                    None => Rejection::new(
                        PARSE_ERROR,
                        Value::Null,
                        format!("{why}; what follows it was skipped"),
                        dropped,
                    ),
                };
                rej.response = top.is_some_and(|t| t.response);
                self.consume(m);
                self.state = State::Header;
                Step::Emit(Event::Rejected(rej))
            }
            Scan::Broken(p) => {
                let p = self.next_header_within(p, p);
                let rej = Rejection::new(
                    PARSE_ERROR,
                    Value::Null,
                    format!("{why}, and what follows is not JSON"),
                    &self.buf[..p],
                );
                self.consume(p);
                self.state = State::Header;
                Step::Emit(Event::Rejected(rej))
            }
            Scan::Scalar => {
                // Nothing of this frame follows its header (most likely the next header
                // does): consume nothing more, so the next frame is read intact.
                let rej = Rejection::new(
                    PARSE_ERROR,
                    Value::Null,
                    format!("{why}, and no JSON object follows it"),
                    &self.buf[..self.buf.len().min(80)],
                );
                self.state = State::Header;
                Step::Emit(Event::Rejected(rej))
            }
        }
    }

    fn garbage(&mut self) -> Step {
        match find_header(&self.buf) {
            Some(p) => {
                self.consume(p);
                self.state = State::Header;
                self.quiet = false;
                Step::Again
            }
            None => {
                // Keep a tail that may be the start of a split `Content-Length`.
                let keep = HEADER.len() - 1;
                self.consume(self.buf.len().saturating_sub(keep));
                Step::Wait
            }
        }
    }
}

/// The end of a header block: (length of its lines, length including the empty line).
fn header_end(buf: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while let Some(nl) = buf[i..].iter().position(|&b| b == b'\n') {
        let at = i + nl;
        match buf.get(at + 1) {
            Some(b'\n') => return Some((at, at + 2)),
            Some(b'\r') if buf.get(at + 2) == Some(&b'\n') => return Some((at, at + 3)),
            _ => i = at + 1,
        }
    }
    None
}

/// Every line is `Token: value`; a last, unfinished line is at least a token so far.
fn plausible_header(block: &[u8]) -> bool {
    let token = |b: &u8| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_';
    let mut lines = block.split(|&b| b == b'\n').peekable();
    while let Some(line) = lines.next() {
        let last = lines.peek().is_none();
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match line.iter().position(|&b| b == b':') {
            Some(colon) if colon > 0 && line[..colon].iter().all(token) => {}
            None if last && line.iter().all(token) => {}
            _ => return false,
        }
    }
    true
}

/// The Content-Length of a (plausible) header block, or why it cannot be used.
fn content_length(block: &[u8]) -> Result<usize, String> {
    let mut found: Option<usize> = None;
    for line in block.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        if !line[..colon].eq_ignore_ascii_case(HEADER) {
            continue;
        }
        let value = line[colon + 1..].trim_ascii();
        let shown = value.escape_ascii().to_string();
        if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
            return Err(format!("its Content-Length `{shown}` is not a length"));
        }
        let len = std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n <= MAX_BODY)
            .ok_or_else(|| format!("its Content-Length {shown} is above the 64 MiB limit"))?;
        if found.is_some_and(|f| f != len) {
            return Err("it has two different Content-Length headers".into());
        }
        found = Some(len);
    }
    found.ok_or_else(|| "it has no Content-Length header".into())
}

/// A `Content-Length` in the block that does not start a line: bytes ran into it.
fn glued_header(block: &[u8]) -> bool {
    let mut from = 0;
    while let Some(p) = find_header(&block[from..]) {
        let at = from + p;
        if at > 0 && block[at - 1] != b'\n' {
            return true;
        }
        from = at + 1;
    }
    false
}

/// The first `Content-Length`, in any case.
fn find_header(buf: &[u8]) -> Option<usize> {
    buf.windows(HEADER.len())
        .position(|w| w.eq_ignore_ascii_case(HEADER))
}

/// An `id` that can be answered: a string or a 64-bit integer.
fn readable_id(id: Option<&Value>) -> Value {
    match id {
        Some(id @ Value::String(_)) => id.clone(),
        Some(id @ Value::Number(n)) if n.is_i64() => id.clone(),
        _ => Value::Null,
    }
}

/// Why a body is not JSON, for the log and the reply.
fn not_json(e: &serde_json::Error) -> String {
    // serde_json stops at 128 nested arrays and objects (so does tower-lsp's reading):
    // say so in words rather than as "recursion limit exceeded".
    if e.to_string().starts_with("recursion limit exceeded") {
        "its JSON nests arrays and objects more than 127 levels deep, the most kernel-lsp reads"
            .into()
    } else {
        format!("the body is not JSON: {e}")
    }
}

/// What the top level of a body that does not parse says about it.
#[derive(Debug, PartialEq)]
struct TopLevel {
    /// The `id` as [`readable_id`] reads it.
    id: Value,
    /// It is a response ([`is_response`]): answering it would answer an answer.
    response: bool,
}

/// Read the top level of a JSON object without parsing its members' values: keys and
/// the `id` are parsed, every other value is only delimited (brackets and strings, as
/// [`Extent`] does), so an error or a nesting limit inside one does not hide the id.
/// None unless the whole top level is well formed (`{"key": value, …}` and nothing
/// after it but blanks).
fn top_level(body: &[u8]) -> Option<TopLevel> {
    let (members, end) = object_members(body, skip_blank(body, 0))?;
    if skip_blank(body, end) != body.len() {
        return None;
    }
    let (mut id, mut method, mut result) = (None, false, false);
    for m in &members {
        match m.key.as_str() {
            "id" => id = Some(serde_json::from_slice::<Value>(&body[m.value.clone()]).ok()?),
            "method" => method = true,
            "result" | "error" => result = true,
            _ => {}
        }
    }
    Some(TopLevel {
        id: readable_id(id.as_ref()),
        response: !method && result,
    })
}

/// The first non-blank byte at or after `i`.
fn skip_blank(body: &[u8], i: usize) -> usize {
    i + body[i.min(body.len())..]
        .iter()
        .take_while(|b| b.is_ascii_whitespace())
        .count()
}

/// One member of an object read by [`object_members`]: its key, parsed, and where its
/// value lies in the body, not parsed.
struct Member {
    key: String,
    value: std::ops::Range<usize>,
}

/// The members of the object that starts at `start` (keys parsed, values delimited by
/// [`value_end`]) and where it ends; None unless it is `{"key": value, …}`.
fn object_members(body: &[u8], start: usize) -> Option<(Vec<Member>, usize)> {
    if body.get(start) != Some(&b'{') {
        return None;
    }
    let mut members = Vec::new();
    let mut i = skip_blank(body, start + 1);
    if body.get(i) == Some(&b'}') {
        return Some((members, i + 1));
    }
    loop {
        let key_end = value_end(body, i).filter(|_| body[i] == b'"')?;
        let key: String = serde_json::from_slice(&body[i..key_end]).ok()?;
        i = skip_blank(body, key_end);
        if body.get(i) != Some(&b':') {
            return None;
        }
        let value = skip_blank(body, i + 1);
        let end = value_end(body, value)?;
        members.push(Member {
            key,
            value: value..end,
        });
        i = skip_blank(body, end);
        match body.get(i) {
            Some(b',') => i = skip_blank(body, i + 1),
            Some(b'}') => return Some((members, i + 1)),
            _ => return None,
        }
    }
}

/// Where each element of the array that starts at `start` lies; None unless it is
/// `[value, …]`.
fn array_elements(body: &[u8], start: usize) -> Option<Vec<std::ops::Range<usize>>> {
    if body.get(start) != Some(&b'[') {
        return None;
    }
    let mut elements = Vec::new();
    let mut i = skip_blank(body, start + 1);
    if body.get(i) == Some(&b']') {
        return Some(elements);
    }
    loop {
        let end = value_end(body, i)?;
        elements.push(i..end);
        i = skip_blank(body, end);
        match body.get(i) {
            Some(b',') => i = skip_blank(body, i + 1),
            Some(b']') => return Some(elements),
            _ => return None,
        }
    }
}

/// Where the JSON value that starts at `start` ends, by its delimiters only: an object
/// or array at its closing bracket (counting brackets outside strings, whatever else is
/// between them), a string at its closing quote, a number or literal at the first byte
/// that cannot be in one.
fn value_end(body: &[u8], start: usize) -> Option<usize> {
    let rest = &body[start..];
    let (mut depth, mut in_str, mut esc) = (0usize, false, false);
    for (k, &b) in rest.iter().enumerate() {
        if in_str {
            match b {
                _ if esc => esc = false,
                b'\\' => esc = true,
                b'"' => in_str = false,
                _ => {}
            }
            if !in_str && depth == 0 {
                return Some(start + k + 1);
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    return Some(start + k + 1);
                }
            }
            _ if depth > 0 => {}
            _ if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.') => {}
            _ => return (k > 0).then_some(start + k),
        }
    }
    // A literal or number at the very end; an open string or bracket never ends.
    (depth == 0 && !in_str && !rest.is_empty()).then_some(body.len())
}

fn is_response(v: &Value) -> bool {
    v.get("method").is_none() && (v.get("result").is_some() || v.get("error").is_some())
}

/// Whether a parsed body is a message tower-lsp can read (it stops serving on the first
/// one it cannot). `body` is the same message as bytes: the final check reads it with
/// tower-lsp's own types, which also catches duplicate keys.
pub fn check_message(v: &Value, body: &[u8]) -> Result<(), Rejection> {
    let reject = |code, id: Value, why: String| Err(Rejection::new(code, id, why, body));
    let Value::Object(o) = v else {
        let what = match v {
            Value::Array(_) => "an array (batches are not supported)",
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Object(_) => unreachable!("handled above"),
        };
        return reject(
            INVALID_REQUEST,
            Value::Null,
            format!("a message must be a JSON object, not {what}"),
        );
    };
    let id = readable_id(v.get("id"));
    match o.get("id") {
        None | Some(Value::String(_)) => {}
        Some(Value::Number(n)) if n.is_i64() => {}
        Some(Value::Null) if o.get("method").is_none() => {}
        Some(other) => {
            return reject(
                INVALID_REQUEST,
                Value::Null,
                format!("`id` must be an integer or a string, not {other}"),
            );
        }
    }
    match o.get("jsonrpc") {
        Some(Value::String(s)) if s == "2.0" => {}
        None => {
            return reject(
                INVALID_REQUEST,
                id,
                "it has no `\"jsonrpc\": \"2.0\"`".into(),
            )
        }
        Some(other) => {
            return reject(
                INVALID_REQUEST,
                id,
                format!("`jsonrpc` must be \"2.0\", not {other}"),
            )
        }
    }
    let typed = match o.get("method") {
        Some(Value::String(_)) => {
            serde_json::from_slice::<tower_lsp::jsonrpc::Request>(body).map(drop)
        }
        Some(other) => {
            return reject(
                INVALID_REQUEST,
                id,
                format!("`method` must be a string, not {other}"),
            )
        }
        None if o.contains_key("id") && is_response(v) => {
            let error_ok = o.get("error").is_none_or(|e| {
                e.get("code").is_some_and(|c| c.is_i64())
                    && e.get("message").is_some_and(Value::is_string)
            });
            if !error_ok {
                let mut rej = Rejection::new(
                    INVALID_REQUEST,
                    id,
                    "its `error` must be an object with an integer `code` and a string `message`",
                    body,
                );
                rej.response = true;
                return Err(rej);
            }
            serde_json::from_slice::<tower_lsp::jsonrpc::Response>(body).map(drop)
        }
        None => {
            return reject(
                INVALID_REQUEST,
                id,
                "it is neither a request (`method`) nor a response (`id` with `result` or `error`)"
                    .into(),
            );
        }
    };
    typed.map_err(|e| {
        let mut rej = Rejection::new(
            INVALID_REQUEST,
            id,
            format!("it is not a valid JSON-RPC message: {e}"),
            body,
        );
        rej.response = is_response(v);
        rej
    })
}

/// Where a JSON object or array that starts a byte run ends, found without parsing: it
/// follows brackets and strings only, so it runs over any length with O(1) memory, and
/// resumes where it stopped when more bytes come.
#[derive(Debug, Default, Clone)]
struct Extent {
    /// Next byte to look at.
    pos: usize,
    depth: usize,
    in_str: bool,
    esc: bool,
    started: bool,
    done: Option<Scan>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Scan {
    /// Not ended yet.
    Open,
    /// The value ends before this offset.
    Closed(usize),
    /// The byte at this offset cannot be in a JSON value here (e.g. the `C` of a header
    /// outside any string, or a raw line break inside a string).
    Broken(usize),
    /// The run does not start with `{` or `[`.
    Scalar,
}

impl Extent {
    fn feed(&mut self, buf: &[u8]) -> Scan {
        if let Some(done) = self.done {
            return done;
        }
        while let Some(&b) = buf.get(self.pos) {
            let at = self.pos;
            self.pos += 1;
            if self.in_str {
                match b {
                    _ if self.esc => self.esc = false,
                    b'\\' => self.esc = true,
                    b'"' => self.in_str = false,
                    0..=0x1f => return self.end(Scan::Broken(at)),
                    _ => {}
                }
                continue;
            }
            match b {
                b'{' | b'[' => {
                    self.started = true;
                    self.depth += 1;
                }
                b' ' | b'\t' | b'\r' | b'\n' => {}
                _ if !self.started => return self.end(Scan::Scalar),
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        return self.end(Scan::Closed(self.pos));
                    }
                }
                b'"' => self.in_str = true,
                // What may stand outside strings: separators, numbers, true/false/null.
                b','
                | b':'
                | b'0'..=b'9'
                | b'-'
                | b'+'
                | b'.'
                | b'e'
                | b'E'
                | b't'
                | b'r'
                | b'u'
                | b'f'
                | b'a'
                | b'l'
                | b's'
                | b'n' => {}
                _ => return self.end(Scan::Broken(at)),
            }
        }
        Scan::Open
    }

    fn end(&mut self, s: Scan) -> Scan {
        self.done = Some(s);
        s
    }
}

mod lift;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;
