//! A bounded, seeded fuzz run over the document lifecycle, in process: random opens
//! (CUDA or Python, with texts good and broken, BOM, CR-only, long comment runs),
//! ranged and whole edits, closes, reopens under the other language with and without a
//! close, settings changes, and every request the server answers on a document. What
//! must hold whatever the sequence:
//! - every request is answered, and never with an internal error (a caught panic);
//! - after a whole replacement, the outline is that text's kernels, never an older
//!   text's or a closed open's;
//! - after an open or a close is acknowledged, no diagnostics of another open arrive
//!   (each open's versions start at a number of their own, so a stale one is seen).
//!
//! `KERNEL_LSP_FUZZ_SEED` and `KERNEL_LSP_FUZZ_OPS` replay or lengthen a run.

use serde_json::{json, Value};

use crate::client::TestClient;

/// xorshift64*: a small seeded generator, so a failing run replays from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// A text of `lang` with kernels named after `tag`, and those names (in file order).
fn text(rng: &mut Rng, cuda: bool, tag: usize) -> (String, Vec<String>) {
    let n = 1 + rng.below(3);
    let names: Vec<String> = (0..n).map(|i| format!("k{tag}_{i}")).collect();
    let mut s = String::new();
    if rng.below(6) == 0 {
        s.push('\u{feff}');
    }
    if !cuda {
        s.push_str("import triton\nimport triton.language as tl\n\n");
    }
    for name in &names {
        let (c, spec) = if cuda {
            ("//", "block = 256")
        } else {
            ("#", "BLOCK = 256")
        };
        if rng.below(4) == 0 {
            for i in 0..(10 + rng.below(30)) {
                s.push_str(&format!("{c} @bench v{i} = {i}\n"));
            }
        }
        s.push_str(&format!(
            "{c} @bench n = 1000; x: in f32[n]; y: out f32[n]\n"
        ));
        s.push_str(&format!("{c} @bench grid = cdiv(n, 256); {spec}\n"));
        if cuda {
            s.push_str(&format!(
                "__global__ void {name}(int n, const float* x, float* y) {{\n    int i = blockIdx.x * blockDim.x + threadIdx.x; /* é 😀 */\n    if (i < n) y[i] = 2.0f * x[i];\n}}\n\n"
            ));
        } else {
            s.push_str(&format!(
                "@triton.jit\ndef {name}(x, y, n, BLOCK: tl.constexpr):\n    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # é 😀\n    tl.store(y + o, 2 * tl.load(x + o, mask=o < n), mask=o < n)\n\n"
            ));
        }
    }
    if rng.below(8) == 0 {
        s = s.replace('\n', "\r");
    }
    (s, names)
}

const SNIPPETS: &[&str] = &[
    "",
    "x",
    "(",
    ")",
    "{",
    "}",
    "\n",
    "\r\n",
    "# @bench n = ",
    "// @bench x: in f33[n]\n",
    "    ",
    "\"\"\"",
    "'",
    "/*",
    "*/",
    "@triton.jit\n",
    "__global__ ",
    "def ",
    "😀",
    "é",
    "\u{feff}",
    ";",
    ":\n    pass\n",
    "#",
    "\\\n",
];

/// The (line, UTF-16 column) of byte `at` of `s`, counting lines as the server does.
fn position(s: &str, at: usize) -> (usize, usize) {
    let before = &s[..at];
    let mut line = 0;
    let mut start = 0;
    let b = before.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if c == b'\n' || (c == b'\r' && b.get(i + 1) != Some(&b'\n')) {
            line += 1;
            start = i + 1;
        }
    }
    (line, before[start..].encode_utf16().count())
}

fn char_boundary(s: &str, mut at: usize) -> usize {
    at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

struct Doc {
    uri: &'static str,
    open: Option<(bool, i64)>, // (cuda, version)
    text: String,
}

/// A document, the count of notifications seen when its open or close was acknowledged,
/// and the open's versions (None after a close).
type Mark = (&'static str, usize, Option<(i64, i64)>);

struct Run {
    c: TestClient,
    rng: Rng,
    opens: usize,
    /// Whether the analysis budget lets every text finish (outlines are then checked).
    roomy: bool,
    /// Where the last acknowledged open or close of each document left the
    /// notifications, and the version range of that open (None after a close).
    marks: Vec<Mark>,
}

impl Run {
    async fn ask(&mut self, method: &str, params: Value) -> Value {
        let r = self.c.request(method, params).await;
        let msg = r["error"]["message"].as_str().unwrap_or("");
        assert!(
            !msg.contains("internal error"),
            "{method} hit a panic (seed {:#x}): {r}",
            self.rng.0
        );
        r
    }

    async fn outline(&mut self, uri: &str) -> Vec<String> {
        let r = self
            .ask(
                "textDocument/documentSymbol",
                json!({"textDocument": {"uri": uri}}),
            )
            .await;
        r["result"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s["name"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Acknowledge an open or a close: the outline request's answer comes after the
    /// server took the notification, so what arrives later is judged against it.
    async fn mark(&mut self, d: &Doc, versions: Option<(i64, i64)>) {
        self.outline(d.uri).await;
        let at = self.c.seen().count();
        self.marks.push((d.uri, at, versions));
    }

    async fn open(&mut self, d: &mut Doc, cuda: bool) -> Vec<String> {
        self.opens += 1;
        let (t, names) = text(&mut self.rng, cuda, self.opens);
        let version = self.opens as i64 * 1000;
        self.c
            .notify(
                "textDocument/didOpen",
                json!({"textDocument": {"uri": d.uri, "languageId": if cuda { "cuda-cpp" } else { "python" }, "version": version, "text": t}}),
            )
            .await;
        d.open = Some((cuda, version));
        d.text = t;
        self.mark(d, Some((version, version + 999))).await;
        names
    }

    async fn change(&mut self, d: &mut Doc) {
        let Some((cuda, v)) = d.open else { return };
        let v = v + 1;
        d.open = Some((cuda, v));
        if self.rng.below(4) == 0 {
            self.opens += 1;
            let (t, names) = text(&mut self.rng, cuda, self.opens);
            self.c
                .notify(
                    "textDocument/didChange",
                    json!({"textDocument": {"uri": d.uri, "version": v}, "contentChanges": [{"text": t}]}),
                )
                .await;
            d.text = t;
            let got = self.outline(d.uri).await;
            if self.roomy {
                assert_eq!(
                    got, names,
                    "outline after a whole replacement (seed {:#x})",
                    self.rng.0
                );
            }
            return;
        }
        let a = char_boundary(&d.text, self.rng.below(d.text.len() + 1));
        let b = char_boundary(&d.text, a + self.rng.below(12));
        let (s, e) = (position(&d.text, a), position(&d.text, b));
        let new = *self.rng.pick(SNIPPETS);
        // The server splits lines at a lone CR too; an edit between a CR and its LF
        // would mean a different text on each side, so none is made there.
        if d.text[..a].ends_with('\r') || d.text[..b].ends_with('\r') {
            return;
        }
        self.c
            .notify(
                "textDocument/didChange",
                json!({"textDocument": {"uri": d.uri, "version": v}, "contentChanges": [{
                    "range": {"start": {"line": s.0, "character": s.1}, "end": {"line": e.0, "character": e.1}},
                    "text": new}]}),
            )
            .await;
        d.text.replace_range(a..b, new);
    }

    async fn request_something(&mut self, d: &Doc) {
        let (line, character) = (self.rng.below(60), self.rng.below(80));
        let pos = json!({"line": line, "character": character});
        let td = json!({"uri": d.uri});
        match self.rng.below(5) {
            0 => self.ask("textDocument/hover", json!({"textDocument": td, "position": pos})).await,
            1 => self.ask("textDocument/inlayHint", json!({"textDocument": td, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 10_000, "character": 0}}})).await,
            2 => self.ask("textDocument/codeAction", json!({"textDocument": td, "range": {"start": pos, "end": pos}, "context": {"diagnostics": []}})).await,
            3 => self.ask("textDocument/codeLens", json!({"textDocument": td})).await,
            _ => self.ask("textDocument/documentSymbol", json!({"textDocument": td})).await,
        };
    }

    /// What the editor shows: after an open is acknowledged, no diagnostics of another
    /// open arrive; after a close is acknowledged, the last publish (if any) clears.
    fn check_publishes(&self) {
        let mut closed_last: std::collections::HashMap<usize, &Value> = Default::default();
        for (i, n) in self.c.seen().enumerate() {
            if n["method"] != "textDocument/publishDiagnostics" {
                continue;
            }
            let uri = n["params"]["uri"].as_str().unwrap_or("");
            let Some(mark) = self
                .marks
                .iter()
                .rposition(|(u, at, _)| *u == uri && *at <= i)
            else {
                continue;
            };
            match (self.marks[mark].2, n["params"]["version"].as_i64()) {
                (None, _) => {
                    closed_last.insert(mark, n);
                }
                (Some((lo, hi)), Some(v)) => assert!(
                    (lo..=hi).contains(&v),
                    "diagnostics of another open (versions {lo}..{hi}): {n}"
                ),
                (Some(_), None) => {}
            }
        }
        for n in closed_last.values() {
            let empty = n["params"]["diagnostics"]
                .as_array()
                .is_none_or(Vec::is_empty);
            assert!(
                empty,
                "a closed document's last publish shows diagnostics: {n}"
            );
        }
    }
}

#[tokio::test]
async fn random_lifecycles_never_crash_or_show_another_opens_results() {
    let seed = std::env::var("KERNEL_LSP_FUZZ_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15);
    let ops: usize = std::env::var("KERNEL_LSP_FUZZ_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500);
    eprintln!("lifecycle fuzz: seed {seed:#x}, {ops} operations");
    let mut c = TestClient::in_process();
    c.initialize(
        json!({"compileOnType": false, "analysisBudgetMs": 60_000}),
        &["utf-16", "utf-8"],
    )
    .await;
    let mut run = Run {
        c,
        rng: Rng(seed),
        opens: 0,
        roomy: true,
        marks: Vec::new(),
    };
    let mut docs = [
        Doc {
            uri: "file:///w/a.cu",
            open: None,
            text: String::new(),
        },
        Doc {
            uri: "file:///w/b.py",
            open: None,
            text: String::new(),
        },
    ];
    for _ in 0..ops {
        let d = &mut docs[run.rng.below(2)];
        match (run.rng.below(10), d.open) {
            (_, None) | (0, Some(_)) => {
                // Open, or open again without a close, under either language.
                let cuda = run.rng.below(2) == 0;
                let names = run.open(d, cuda).await;
                let got = run.outline(d.uri).await;
                if run.roomy {
                    assert_eq!(got, names, "outline after an open (seed {seed:#x})");
                }
            }
            (1, Some(_)) => {
                run.c
                    .notify(
                        "textDocument/didClose",
                        json!({"textDocument": {"uri": d.uri}}),
                    )
                    .await;
                d.open = None;
                run.mark(d, None).await;
            }
            (2, Some(_)) => {
                let budget = [1, 50, 60_000][run.rng.below(3)];
                run.roomy = budget == 60_000;
                run.c
                    .notify(
                        "workspace/didChangeConfiguration",
                        json!({"settings": {"compileOnType": false, "analysisBudgetMs": budget}}),
                    )
                    .await;
            }
            (3..=6, Some(_)) => run.change(d).await,
            _ => run.request_something(d).await,
        }
    }
    run.check_publishes();
}
