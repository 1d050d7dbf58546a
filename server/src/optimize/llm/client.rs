//! The HTTP edge to one model endpoint: OpenAI-compatible chat completions (OpenAI,
//! vLLM, Ollama, llama.cpp) or the Anthropic Messages API. One [`LlmClient::chat`] is one
//! system + user exchange with a time limit per HTTP call, and retries with exponential
//! backoff (deterministic jitter) after 429, 5xx and connection errors, honouring
//! `Retry-After` up to a cap. A timed-out call is not retried: a model that ran out the
//! whole limit once will most likely do it again, and the step has waited long enough.
//!
//! The API key is read from the environment variable the settings name, held only as a
//! header value marked sensitive, never logged or Debug-printed, and sent only to the
//! configured endpoint: redirects are not followed. The wire formats (request body,
//! response parsing) are pure functions, tested without a server. [`Budget`] counts the
//! calls of one optimization step; it is spent by the callers (`Strategist`, `LlmCoder`),
//! one unit per `chat`, however many retries that chat took.

use std::time::{Duration, Instant};

use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{json, Value};

use crate::settings::{ModelSettings, Provider};

/// The Anthropic API version this client speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Token counts, when the endpoint reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
}

/// A model's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub text: String,
    pub usage: Usage,
    /// The model stopped at `maxTokens` (`finish_reason: length`, `stop_reason:
    /// max_tokens`): the text is cut off.
    pub truncated: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("cannot reach the model endpoint {url}: {cause}; check the `url` setting and that the server is running")]
    Unreachable { url: String, cause: String },
    #[error("the model endpoint {url} did not answer within {ms} ms; raise `timeoutMs` or use a faster model")]
    Timeout { url: String, ms: u64 },
    #[error("the model endpoint {url} still answered 429 (rate limited) after {retries} retries; wait a minute, or lower `llm.callsPerStep`")]
    RateLimited { url: String, retries: u32 },
    #[error("the model endpoint {url} answered HTTP {status}{}: {body}", http_hint(.status))]
    Http {
        url: String,
        status: u16,
        /// The first 300 characters of the answer, on one line.
        body: String,
    },
    #[error("the answer from {url} is not {format} JSON: {what}")]
    BadResponse {
        url: String,
        format: &'static str,
        what: String,
    },
    #[error("the API key variable `{var}` is not set; export it where kernel-lsp starts, or set `apiKeyEnv` to the variable that holds the key")]
    MissingKey { var: String },
    #[error("this step's budget of {limit} model calls is spent; raise `llm.callsPerStep` to allow more")]
    BudgetExhausted { limit: u32 },
    #[error("invalid model settings: {0}")]
    Config(String),
}

fn http_hint(status: &u16) -> &'static str {
    match status {
        401 | 403 => " (check the API key)",
        404 => " (check `url` and `model`)",
        _ => "",
    }
}

/// The calls one optimization step may still make, and the tokens it used.
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    limit: u32,
    used: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Estimated cost in USD of the calls whose model has a price set.
    pub cost_usd: Option<f64>,
}

impl Budget {
    pub fn new(calls: u32) -> Self {
        Budget {
            limit: calls,
            used: 0,
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: None,
        }
    }

    /// Take one call, or say the budget is spent.
    pub fn spend(&mut self) -> Result<(), LlmError> {
        if self.used >= self.limit {
            return Err(LlmError::BudgetExhausted { limit: self.limit });
        }
        self.used += 1;
        Ok(())
    }

    /// Add a reply's token counts.
    pub fn record(&mut self, usage: &Usage) {
        self.input_tokens += usage.input_tokens.unwrap_or(0);
        self.output_tokens += usage.output_tokens.unwrap_or(0);
    }

    /// Add the estimated cost of one reply.
    pub fn add_cost(&mut self, usd: Option<f64>) {
        if let Some(c) = usd {
            *self.cost_usd.get_or_insert(0.0) += c;
        }
    }

    pub fn used(&self) -> u32 {
        self.used
    }

    pub fn remaining(&self) -> u32 {
        self.limit.saturating_sub(self.used)
    }
}

/// Waits between retries. `Retry-After` from the server wins over the exponential
/// delay, up to `retry_after_cap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Delay before the first retry; doubled for each next one.
    pub base: Duration,
    /// Most an exponential delay grows to (before jitter).
    pub cap: Duration,
    /// Most a `Retry-After` is honoured for.
    pub retry_after_cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(500),
            cap: Duration::from_secs(8),
            retry_after_cap: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// The delay before retry `attempt` (0-based): `base * 2^attempt` capped, plus up to
    /// a quarter more of jitter drawn deterministically from `seed` and `attempt`, so
    /// two clients with different seeds do not retry in lockstep, and a test run is
    /// repeatable.
    pub fn delay(&self, attempt: u32, seed: u64) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32 << attempt.min(20))
            .min(self.cap);
        let quarter = (exp.as_millis() as u64) / 4;
        let jitter = splitmix64(seed ^ u64::from(attempt)) % (quarter + 1);
        exp + Duration::from_millis(jitter)
    }
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The key as the header that carries it, marked sensitive (hyper and reqwest then
/// keep it out of their own debug output). Never printed.
struct KeyHeader {
    name: HeaderName,
    value: HeaderValue,
}

/// One model endpoint.
pub struct LlmClient {
    http: reqwest::Client,
    provider: Provider,
    endpoint: String,
    model: String,
    key: Option<KeyHeader>,
    key_env: String,
    timeout: Duration,
    max_retries: u32,
    max_tokens: u32,
    temperature: f64,
    /// USD per million input and output tokens, when the settings give them.
    price: Option<(f64, f64)>,
    backoff: Backoff,
    seed: u64,
}

impl std::fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmClient")
            .field("provider", &self.provider)
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field(
                "key",
                &match self.key {
                    Some(_) => format!("<from ${}>", self.key_env),
                    None => "none".to_string(),
                },
            )
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .finish_non_exhaustive()
    }
}

impl LlmClient {
    /// A client for `settings`; reads the key from its environment variable now.
    pub fn new(settings: &ModelSettings) -> Result<Self, LlmError> {
        if settings.model.trim().is_empty() {
            return Err(LlmError::Config(
                "`model` is empty; name the model the endpoint serves".into(),
            ));
        }
        let base = settings.base_url();
        let url = reqwest::Url::parse(base)
            .map_err(|e| LlmError::Config(format!("`url` {base:?} is not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(LlmError::Config(format!(
                "`url` {base:?} must start with http:// or https://"
            )));
        }
        let endpoint = endpoint(settings.provider, base);
        let key_env = settings.key_env().to_string();
        let key = match std::env::var(&key_env) {
            Ok(k) if !k.trim().is_empty() => Some(key_header(settings.provider, k.trim())?),
            _ if settings.provider == Provider::Anthropic => {
                return Err(LlmError::MissingKey { var: key_env });
            }
            // OpenAI-compatible local servers (Ollama, llama.cpp, vLLM) need no key.
            _ => None,
        };
        let timeout = Duration::from_millis(settings.timeout_ms.max(1));
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            // A redirect could carry the key to another host.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("kernel-lsp/", env!("CARGO_PKG_VERSION")));
        if is_loopback(&url) {
            // A proxy from the environment cannot reach this machine's own server.
            builder = builder.no_proxy();
        }
        let http = builder
            .build()
            .map_err(|e| LlmError::Config(format!("cannot set up HTTP: {}", error_chain(&e))))?;
        let seed = splitmix64(
            endpoint
                .bytes()
                .fold(0u64, |h, b| h.wrapping_mul(0x100_0000_01b3) ^ u64::from(b)),
        );
        Ok(LlmClient {
            http,
            provider: settings.provider,
            endpoint,
            model: settings.model.clone(),
            key,
            key_env,
            timeout,
            max_retries: settings.max_retries,
            max_tokens: settings.max_tokens,
            temperature: settings.temperature,
            price: match (settings.price_in, settings.price_out) {
                (None, None) => None,
                (i, o) => Some((i.unwrap_or(0.0), o.unwrap_or(0.0))),
            },
            backoff: Backoff::default(),
            seed,
        })
    }

    /// Replace the retry delays (tests use milliseconds).
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The URL every request goes to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The model name.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// `model at endpoint`, for messages.
    pub fn label(&self) -> String {
        format!("{} at {}", self.model, self.endpoint)
    }

    /// The estimated cost of a reply in USD, when the model has a price.
    pub fn cost(&self, usage: &Usage) -> Option<f64> {
        let (i, o) = self.price?;
        Some(
            (usage.input_tokens.unwrap_or(0) as f64 * i
                + usage.output_tokens.unwrap_or(0) as f64 * o)
                / 1e6,
        )
    }

    /// The configured sampling temperature.
    pub fn temperature(&self) -> f64 {
        self.temperature
    }

    /// One exchange: the system and user messages in, the model's text out.
    pub async fn chat(&self, system: &str, user: &str) -> Result<Reply, LlmError> {
        self.chat_at(system, user, self.temperature).await
    }

    /// [`LlmClient::chat`] at another temperature (samples of one step).
    pub async fn chat_at(
        &self,
        system: &str,
        user: &str,
        temperature: f64,
    ) -> Result<Reply, LlmError> {
        let body = request_body(
            self.provider,
            &self.model,
            system,
            user,
            self.max_tokens,
            temperature,
        );
        let mut attempt: u32 = 0;
        loop {
            let started = Instant::now();
            let outcome = self.send_once(&body).await;
            let elapsed_ms = started.elapsed().as_millis() as u64;
            let last = attempt >= self.max_retries;
            let wait = match outcome {
                Ok((status, retry_after, bytes)) => {
                    tracing::debug!(
                        model = %self.model, endpoint = %self.endpoint, attempt, status,
                        elapsed_ms, "model call answered"
                    );
                    match status {
                        200..=299 => {
                            return parse_response(self.provider, &bytes).map_err(|what| {
                                LlmError::BadResponse {
                                    url: self.endpoint.clone(),
                                    format: wire_name(self.provider),
                                    what,
                                }
                            });
                        }
                        429 if last => {
                            return Err(LlmError::RateLimited {
                                url: self.endpoint.clone(),
                                retries: self.max_retries,
                            })
                        }
                        429 | 500..=599 if !last => retry_after
                            .map(|d| d.min(self.backoff.retry_after_cap))
                            .unwrap_or_else(|| self.backoff.delay(attempt, self.seed)),
                        _ => {
                            return Err(LlmError::Http {
                                url: self.endpoint.clone(),
                                status,
                                body: body_excerpt(&bytes),
                            })
                        }
                    }
                }
                Err(e) if e.is_timeout() => {
                    return Err(LlmError::Timeout {
                        url: self.endpoint.clone(),
                        ms: self.timeout.as_millis() as u64,
                    })
                }
                Err(e) => {
                    let cause = error_chain(&e);
                    tracing::debug!(
                        model = %self.model, endpoint = %self.endpoint, attempt, %cause,
                        "model call failed"
                    );
                    if last {
                        let cause = if self.max_retries > 0 {
                            format!("{cause} (after {} retries)", self.max_retries)
                        } else {
                            cause
                        };
                        return Err(LlmError::Unreachable {
                            url: self.endpoint.clone(),
                            cause,
                        });
                    }
                    self.backoff.delay(attempt, self.seed)
                }
            };
            tracing::warn!(
                model = %self.model, endpoint = %self.endpoint, attempt,
                wait_ms = wait.as_millis() as u64, "retrying the model call"
            );
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    /// One HTTP call: status, `Retry-After` and the whole body, or the transport error.
    async fn send_once(
        &self,
        body: &Value,
    ) -> Result<(u16, Option<Duration>, Vec<u8>), reqwest::Error> {
        let mut req = self.http.post(&self.endpoint).json(body);
        if let Some(k) = &self.key {
            req = req.header(k.name.clone(), k.value.clone());
        }
        if self.provider == Provider::Anthropic {
            req = req.header("anthropic-version", ANTHROPIC_VERSION);
        }
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let bytes = resp.bytes().await?;
        Ok((status, retry_after, bytes.to_vec()))
    }
}

fn key_header(provider: Provider, key: &str) -> Result<KeyHeader, LlmError> {
    let (name, text) = match provider {
        Provider::OpenAi => (reqwest::header::AUTHORIZATION, format!("Bearer {key}")),
        Provider::Anthropic => (HeaderName::from_static("x-api-key"), key.to_string()),
    };
    // The message must not echo the key.
    let mut value = HeaderValue::from_str(&text).map_err(|_| {
        LlmError::Config("the API key holds characters an HTTP header cannot carry".into())
    })?;
    value.set_sensitive(true);
    Ok(KeyHeader { name, value })
}

fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The URL requests go to: `{base}/chat/completions` (OpenAI) or `{base}/v1/messages`
/// (Anthropic; a base that already ends in `/v1` is not given a second one).
pub fn endpoint(provider: Provider, base: &str) -> String {
    let base = base.trim_end_matches('/');
    match provider {
        Provider::OpenAi => format!("{base}/chat/completions"),
        Provider::Anthropic if base.ends_with("/v1") => format!("{base}/messages"),
        Provider::Anthropic => format!("{base}/v1/messages"),
    }
}

fn wire_name(provider: Provider) -> &'static str {
    match provider {
        Provider::OpenAi => "OpenAI chat-completion",
        Provider::Anthropic => "Anthropic Messages",
    }
}

/// The request body for one exchange.
pub fn request_body(
    provider: Provider,
    model: &str,
    system: &str,
    user: &str,
    max_tokens: u32,
    temperature: f64,
) -> Value {
    match provider {
        Provider::OpenAi => {
            let mut messages = Vec::new();
            if !system.is_empty() {
                messages.push(json!({"role": "system", "content": system}));
            }
            messages.push(json!({"role": "user", "content": user}));
            json!({
                "model": model,
                "messages": messages,
                "max_tokens": max_tokens,
                "temperature": temperature,
                "stream": false,
            })
        }
        Provider::Anthropic => {
            let mut body = json!({
                "model": model,
                "max_tokens": max_tokens,
                "temperature": temperature,
                "messages": [{"role": "user", "content": user}],
            });
            if !system.is_empty() {
                body["system"] = json!(system);
            }
            body
        }
    }
}

/// Parse a 2xx answer. The error says what was missing.
pub fn parse_response(provider: Provider, body: &[u8]) -> Result<Reply, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        format!(
            "the body does not parse as JSON ({e}); it starts {:?}",
            body_excerpt(body)
        )
    })?;
    if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
        let msg = err
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| err.to_string(), str::to_string);
        return Err(format!("it holds an error instead of a reply: {msg}"));
    }
    let u64_at = |path: &[&str]| {
        let mut x = &v;
        for p in path {
            x = x.get(p)?;
        }
        x.as_u64()
    };
    match provider {
        Provider::OpenAi => {
            let choice = v
                .get("choices")
                .and_then(Value::as_array)
                .ok_or("there is no `choices` array")?
                .first()
                .ok_or("`choices` is empty")?;
            let text = choice
                .get("message")
                .ok_or("`choices[0]` has no `message`")?
                .get("content")
                .and_then(Value::as_str)
                .ok_or("`choices[0].message.content` is not a string")?;
            Ok(Reply {
                text: text.to_string(),
                usage: Usage {
                    input_tokens: u64_at(&["usage", "prompt_tokens"]),
                    output_tokens: u64_at(&["usage", "completion_tokens"]),
                },
                truncated: choice.get("finish_reason").and_then(Value::as_str) == Some("length"),
            })
        }
        Provider::Anthropic => {
            let blocks = v
                .get("content")
                .and_then(Value::as_array)
                .ok_or("there is no `content` array")?;
            let texts: Vec<&str> = blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            if texts.is_empty() {
                return Err("`content` has no block of type `text`".into());
            }
            Ok(Reply {
                text: texts.join(""),
                usage: Usage {
                    input_tokens: u64_at(&["usage", "input_tokens"]),
                    output_tokens: u64_at(&["usage", "output_tokens"]),
                },
                truncated: v.get("stop_reason").and_then(Value::as_str) == Some("max_tokens"),
            })
        }
    }
}

/// The first 300 characters of a body, on one line.
fn body_excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let one_line: String = text
        .chars()
        .take(300)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().count() > 300 {
        format!("{}…", one_line.trim_end())
    } else {
        one_line.trim().to_string()
    }
}

/// An error and its causes, `a: b: c` (reqwest's own message alone says little).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !out.contains(&s_text) {
            out.push_str(": ");
            out.push_str(&s_text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    #[test]
    fn request_bodies() {
        let openai = request_body(Provider::OpenAi, "qwen", "S", "U", 100, 0.2);
        expect![[r#"{"max_tokens":100,"messages":[{"content":"S","role":"system"},{"content":"U","role":"user"}],"model":"qwen","stream":false,"temperature":0.2}"#]]
            .assert_eq(&openai.to_string());
        let anthropic = request_body(Provider::Anthropic, "claude", "S", "U", 100, 0.2);
        expect![[r#"{"max_tokens":100,"messages":[{"content":"U","role":"user"}],"model":"claude","system":"S","temperature":0.2}"#]]
            .assert_eq(&anthropic.to_string());
        let no_system = request_body(Provider::OpenAi, "m", "", "U", 1, 0.0);
        assert_eq!(no_system["messages"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn endpoints() {
        assert_eq!(
            endpoint(Provider::OpenAi, "http://localhost:11434/v1/"),
            "http://localhost:11434/v1/chat/completions"
        );
        assert_eq!(
            endpoint(Provider::Anthropic, "https://api.anthropic.com"),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(
            endpoint(Provider::Anthropic, "https://proxy.example/v1"),
            "https://proxy.example/v1/messages"
        );
    }

    #[test]
    fn responses_parse_or_say_what_is_missing() {
        let ok = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":7}}"#;
        let r = parse_response(Provider::OpenAi, ok).unwrap();
        assert_eq!(r.text, "hi");
        assert!(r.truncated);
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: Some(5),
                output_tokens: Some(7)
            }
        );
        let ok = br#"{"content":[{"type":"text","text":"a"},{"type":"tool_use","id":"x"},{"type":"text","text":"b"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":4}}"#;
        let r = parse_response(Provider::Anthropic, ok).unwrap();
        assert_eq!((r.text.as_str(), r.truncated), ("ab", false));
        let bad = |p, b: &str| parse_response(p, b.as_bytes()).unwrap_err();
        expect![[r#"the body does not parse as JSON (expected value at line 1 column 1); it starts "<html>oops</html>""#]]
            .assert_eq(&bad(Provider::OpenAi, "<html>oops</html>"));
        expect!["there is no `choices` array"]
            .assert_eq(&bad(Provider::OpenAi, r#"{"content":[]}"#));
        expect!["`choices` is empty"].assert_eq(&bad(Provider::OpenAi, r#"{"choices":[]}"#));
        expect!["`choices[0].message.content` is not a string"].assert_eq(&bad(
            Provider::OpenAi,
            r#"{"choices":[{"message":{"content":null}}]}"#,
        ));
        expect!["there is no `content` array"]
            .assert_eq(&bad(Provider::Anthropic, r#"{"choices":[]}"#));
        expect!["`content` has no block of type `text`"].assert_eq(&bad(
            Provider::Anthropic,
            r#"{"content":[{"type":"tool_use"}]}"#,
        ));
        expect!["it holds an error instead of a reply: model not loaded"].assert_eq(&bad(
            Provider::OpenAi,
            r#"{"error":{"message":"model not loaded"}}"#,
        ));
    }

    #[test]
    fn backoff_doubles_caps_and_jitters_deterministically() {
        let b = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_millis(1000),
            retry_after_cap: Duration::from_secs(30),
        };
        let ms = |a| b.delay(a, 7).as_millis() as u64;
        for (attempt, exp) in [
            (0, 100),
            (1, 200),
            (2, 400),
            (3, 800),
            (4, 1000),
            (30, 1000),
        ] {
            let d = ms(attempt);
            assert!(d >= exp && d <= exp + exp / 4, "attempt {attempt}: {d} ms");
        }
        assert_eq!(ms(2), ms(2));
    }

    #[test]
    fn budget_counts_calls_and_tokens() {
        let mut b = Budget::new(2);
        assert!(b.spend().is_ok() && b.spend().is_ok());
        b.record(&Usage {
            input_tokens: Some(10),
            output_tokens: None,
        });
        assert_eq!((b.used(), b.remaining(), b.input_tokens), (2, 0, 10));
        expect![
            "this step's budget of 2 model calls is spent; raise `llm.callsPerStep` to allow more"
        ]
        .assert_eq(&b.spend().unwrap_err().to_string());
    }

    #[test]
    fn the_key_never_shows_in_debug_output() {
        let var = "KERNEL_LSP_UNIT_TEST_KEY_DEBUG";
        std::env::set_var(var, "sk-secret-123");
        let mut s = ModelSettings::new(Provider::OpenAi, "m");
        s.api_key_env = Some(var.into());
        let c = LlmClient::new(&s).unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("sk-secret"), "{shown}");
        assert!(
            shown.contains("<from $KERNEL_LSP_UNIT_TEST_KEY_DEBUG>"),
            "{shown}"
        );
    }

    #[test]
    fn settings_errors() {
        let mut s = ModelSettings::new(Provider::Anthropic, "claude");
        s.api_key_env = Some("KERNEL_LSP_UNIT_TEST_KEY_UNSET".into());
        expect!["the API key variable `KERNEL_LSP_UNIT_TEST_KEY_UNSET` is not set; export it where kernel-lsp starts, or set `apiKeyEnv` to the variable that holds the key"]
            .assert_eq(&LlmClient::new(&s).unwrap_err().to_string());
        s.provider = Provider::OpenAi;
        assert!(LlmClient::new(&s).is_ok(), "openai needs no key");
        s.url = Some("localhost:11434".into());
        expect![[
            r#"invalid model settings: `url` "localhost:11434" must start with http:// or https://"#
        ]]
        .assert_eq(&LlmClient::new(&s).unwrap_err().to_string());
        s.url = Some("http://localhost:11434/v1".into());
        s.model = " ".into();
        expect!["invalid model settings: `model` is empty; name the model the endpoint serves"]
            .assert_eq(&LlmClient::new(&s).unwrap_err().to_string());
    }
}
