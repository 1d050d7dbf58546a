//! A tower layer around tower-lsp's `LspService` that makes its answers what the LSP
//! specification and an editor's user expect:
//!
//! - a request whose method starts with `$/` and is not implemented gets MethodNotFound
//!   (tower-lsp answers nothing, and the client waits forever); `$/` notifications are
//!   still ignored;
//! - `shutdown` and `exit` with `"params": null` are taken as having no params (tower-lsp
//!   refuses them with -32602 yet has already shut down);
//! - invalid-params errors from decoding say which method and what was wrong without
//!   Rust type names ("invalid params for textDocument/hover: missing field `position`");
//! - the `exit` notification is reported, with the exit code LSP asks for.

use std::task::{Context, Poll};

use futures::future::BoxFuture;
use serde_json::Value;
use tower_lsp::jsonrpc::{Error, ErrorCode, Request, Response};

/// The wrapped service; see the module documentation.
pub struct Conform<S> {
    inner: S,
    shutdown_seen: bool,
    /// Told the exit code (0 if `shutdown` came first) when `exit` arrives.
    exit_tx: Option<tokio::sync::oneshot::Sender<i32>>,
}

impl<S> Conform<S> {
    pub fn new(inner: S, exit_tx: Option<tokio::sync::oneshot::Sender<i32>>) -> Self {
        Conform {
            inner,
            shutdown_seen: false,
            exit_tx,
        }
    }
}

impl<S> tower::Service<Request> for Conform<S>
where
    S: tower::Service<Request, Response = Option<Response>>,
    S::Future: Send + 'static,
{
    type Response = Option<Response>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Option<Response>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let method = req.method().to_owned();
        let id = req.id().cloned();
        match method.as_str() {
            "shutdown" => self.shutdown_seen = true,
            "exit" => {
                if let Some(tx) = self.exit_tx.take() {
                    let _ = tx.send(if self.shutdown_seen { 0 } else { 1 });
                }
            }
            _ => {}
        }
        let fut = self.inner.call(without_null_params(req));
        Box::pin(async move {
            let answer = fut.await?;
            Ok(match (answer, id) {
                (None, Some(id)) if method.starts_with("$/") => {
                    let mut error = Error::method_not_found();
                    error.message = format!("kernel-lsp does not implement {method}").into();
                    error.data = Some(Value::from(method));
                    Some(Response::from_error(id, error))
                }
                (Some(answer), _) => Some(readable_params_error(&method, answer)),
                (answer, _) => answer,
            })
        })
    }
}

/// `shutdown` and `exit` take no params; `"params": null` says the same thing.
fn without_null_params(req: Request) -> Request {
    if !matches!(req.method(), "shutdown" | "exit") || req.params() != Some(&Value::Null) {
        return req;
    }
    let (method, id, _) = req.into_parts();
    let builder = Request::build(method);
    match id {
        Some(id) => builder.id(id).finish(),
        None => builder.finish(),
    }
}

/// An invalid-params error raised while decoding `method`'s params, rewritten for a
/// user; any other answer unchanged.
fn readable_params_error(method: &str, answer: Response) -> Response {
    match answer.error() {
        Some(e) if e.code == ErrorCode::InvalidParams && is_decode_error(&e.message) => {}
        _ => return answer,
    }
    let (id, body) = answer.into_parts();
    let mut error = body.expect_err("checked above: an error answer");
    error.message = format!(
        "invalid params for {method}: {}",
        readable_decode_error(&error.message)
    )
    .into();
    Response::from_error(id, error)
}

/// The messages tower-lsp's param decoding gives: serde's, and its own two.
fn is_decode_error(msg: &str) -> bool {
    const SERDE: [&str; 10] = [
        "invalid type: ",
        "invalid value: ",
        "invalid length ",
        "unknown variant ",
        "unknown field ",
        "missing field ",
        "duplicate field ",
        "data did not match any variant",
        "Missing params field",
        "Unexpected params",
    ];
    SERDE.iter().any(|p| msg.starts_with(p))
}

/// A serde decoding message in a user's words: what was expected, without the Rust
/// types the params happen to be decoded into (`expected struct HoverParams` → `expected
/// an object`). Quoted and backquoted text (the user's values, field names) is kept.
pub fn readable_decode_error(msg: &str) -> String {
    if msg == "Missing params field" {
        return "the request has no `params`".into();
    }
    if let Some(p) = msg.strip_prefix("Unexpected params: ") {
        return format!("it takes no params, got {p}");
    }
    if msg.starts_with("data did not match any variant of ") {
        return "the value matches none of the accepted forms".into();
    }
    // serde_derive's words for what a Rust type expects, longest first.
    const KINDS: [(&str, &str); 9] = [
        ("internally tagged enum ", "one of the accepted objects"),
        ("adjacently tagged enum ", "one of the accepted objects"),
        ("struct variant ", "an object"),
        ("tuple variant ", "an array"),
        ("newtype variant ", "a value"),
        ("tuple struct ", "an array"),
        ("unit struct ", "null"),
        ("struct ", "an object"),
        ("enum ", "one of the accepted values"),
    ];
    let mut out = String::new();
    let mut rest = msg;
    let mut quote: Option<char> = None;
    while let Some(c) = rest.chars().next() {
        if let Some(q) = quote {
            let n = if c == '\\' {
                rest.chars().take(2).map(char::len_utf8).sum()
            } else {
                c.len_utf8()
            };
            if c == q {
                quote = None;
            }
            out.push_str(&rest[..n]);
            rest = &rest[n..];
            continue;
        }
        if c == '"' || c == '`' {
            quote = Some(c);
        }
        let at_word = out.chars().last().is_none_or(|p| !p.is_alphanumeric());
        let kind = KINDS.iter().find(|(k, _)| at_word && rest.starts_with(k));
        if let Some((k, words)) = kind {
            let after = &rest[k.len()..];
            let name_len = after
                .find(|ch: char| {
                    !(ch.is_alphanumeric() || ch == '_' || ch == ':' || ch == '<' || ch == '>')
                })
                .unwrap_or(after.len());
            if after.starts_with(|ch: char| ch.is_ascii_uppercase()) {
                out.push_str(words);
                rest = &after[name_len..];
                continue;
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_errors_lose_their_rust_types_and_keep_the_detail() {
        for (msg, want) in [
            ("missing field `position`", "missing field `position`"),
            (
                r#"invalid type: string "x", expected struct HoverParams"#,
                r#"invalid type: string "x", expected an object"#,
            ),
            (
                r#"invalid type: string "struct Foo", expected struct TextDocumentIdentifier"#,
                r#"invalid type: string "struct Foo", expected an object"#,
            ),
            (
                "unknown variant `utf-7`, expected one of `utf-8`, `utf-16`",
                "unknown variant `utf-7`, expected one of `utf-8`, `utf-16`",
            ),
            (
                "invalid type: null, expected enum DiagnosticSeverity",
                "invalid type: null, expected one of the accepted values",
            ),
            (
                "invalid type: map, expected tuple struct Url",
                "invalid type: map, expected an array",
            ),
            (
                "invalid type: integer `5`, expected struct variant Foo::Bar",
                "invalid type: integer `5`, expected an object",
            ),
            (
                "data did not match any variant of untagged enum NumberOrString",
                "the value matches none of the accepted forms",
            ),
            ("Missing params field", "the request has no `params`"),
            ("Unexpected params: {}", "it takes no params, got {}"),
            // Plain words stay.
            (
                "invalid value: a struct of fields, expected a destructured thing",
                "invalid value: a struct of fields, expected a destructured thing",
            ),
        ] {
            assert_eq!(readable_decode_error(msg), want, "{msg}");
        }
    }

    #[test]
    fn only_decoding_errors_are_rewritten() {
        let ours = Response::from_error(
            1.into(),
            Error::invalid_params(
                "document file:///a.cu is not open; send textDocument/didOpen first",
            ),
        );
        assert_eq!(
            readable_params_error("textDocument/hover", ours.clone()),
            ours
        );
        let decoding = Response::from_error(
            1.into(),
            Error::invalid_params(r#"invalid type: string "x", expected struct HoverParams"#),
        );
        assert_eq!(
            readable_params_error("textDocument/hover", decoding)
                .error()
                .unwrap()
                .message,
            r#"invalid params for textDocument/hover: invalid type: string "x", expected an object"#
        );
    }

    #[test]
    fn null_params_of_shutdown_and_exit_are_dropped() {
        let req = Request::build("shutdown")
            .params(Value::Null)
            .id(3)
            .finish();
        assert_eq!(
            without_null_params(req),
            Request::build("shutdown").id(3).finish()
        );
        let req = Request::build("exit").params(Value::Null).finish();
        assert_eq!(without_null_params(req), Request::build("exit").finish());
        let other = Request::build("textDocument/hover")
            .params(Value::Null)
            .id(3)
            .finish();
        assert_eq!(without_null_params(other.clone()), other);
    }
}
