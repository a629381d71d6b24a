//! The one error type of the SDK.
//!
//! A refusal by the API (any non-2xx answer) becomes [`ClientError::Api`],
//! parsed from the contract's `{"error": ...}` body; everything else is a
//! transport failure, an answer that does not decode, or input the SDK cannot
//! turn into a request.

use std::fmt::Write as _;
use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};
use serde_json::Value;

/// How much of a non-JSON error body is kept in [`ClientError::Api::body`].
const MAX_TEXT_BODY: usize = 2_000;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The API answered with a status of 300 or more.
    #[error("{}", api_summary(*.status, .error, .body, *.retry_after_secs))]
    Api {
        status: u16,
        /// The body's `error` string; for a body without one, the status's
        /// canonical reason (for example "Bad Gateway").
        error: String,
        /// The whole body as JSON: the contract's object with its extra
        /// fields (`detail`, `reason`, `requiredMicros`, ...), a JSON string
        /// holding the text of a non-JSON body, or null for an empty body.
        body: Value,
        /// The `retry-after` header in seconds, when the answer set one.
        retry_after_secs: Option<u64>,
    },
    /// The request did not get an answer: connection refused, timeout, TLS, or
    /// the body broke off.
    #[error(transparent)]
    Transport(#[from] reqwest::Error),
    /// A 2xx answer whose body is not the expected shape.
    #[error("unexpected answer to {endpoint}: {cause}")]
    Decode { endpoint: String, cause: serde_json::Error },
    /// Input the SDK refuses before sending anything: a base URL that is not
    /// http(s), a credential that cannot be a header value, a path id of `.`,
    /// `..` or nothing (URLs cannot carry those as one segment).
    #[error("invalid input: {0}")]
    InvalidInput(String),
}

impl ClientError {
    /// Builds the error for a non-2xx answer.
    pub fn from_answer(status: u16, headers: &HeaderMap, body: &[u8]) -> ClientError {
        let retry_after_secs =
            headers.get(RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
        let canonical = || {
            reqwest::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("error").to_string()
        };
        let (error, body) = match serde_json::from_slice::<Value>(body) {
            Ok(json) => {
                let error = match json.get("error") {
                    Some(Value::String(s)) => s.clone(),
                    // JSON-RPC form: {"error": {"code", "message"}}.
                    Some(Value::Object(o)) => {
                        o.get("message").and_then(Value::as_str).map(str::to_string).unwrap_or_else(canonical)
                    }
                    _ => canonical(),
                };
                (error, json)
            }
            Err(_) if body.is_empty() => (canonical(), Value::Null),
            Err(_) => {
                let text = String::from_utf8_lossy(body);
                let text: String = text.chars().take(MAX_TEXT_BODY).collect();
                (canonical(), Value::String(text))
            }
        };
        ClientError::Api { status, error, body, retry_after_secs }
    }

    /// The HTTP status of an API refusal.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The `error` string of an API refusal (`"unknown batch"`, `"insufficient_credit"`, ...).
    pub fn error_code(&self) -> Option<&str> {
        match self {
            ClientError::Api { error, .. } => Some(error),
            _ => None,
        }
    }

    /// The whole body of an API refusal.
    pub fn body(&self) -> Option<&Value> {
        match self {
            ClientError::Api { body, .. } => Some(body),
            _ => None,
        }
    }

    /// The body's `detail`: each entry of a `detail` array, or a single
    /// `detail` string; empty when there is none.
    pub fn detail(&self) -> Vec<String> {
        match self.body().and_then(|b| b.get("detail")) {
            Some(Value::Array(items)) => items.iter().map(value_text).collect(),
            Some(Value::String(s)) => vec![s.clone()],
            _ => Vec::new(),
        }
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ClientError::Api { retry_after_secs, .. } => retry_after_secs.map(Duration::from_secs),
            _ => None,
        }
    }

    pub fn is_status(&self, wanted: u16) -> bool {
        self.status() == Some(wanted)
    }

    pub fn is_not_found(&self) -> bool {
        self.is_status(404)
    }

    pub fn is_unauthorized(&self) -> bool {
        self.is_status(401)
    }

    pub fn is_forbidden(&self) -> bool {
        self.is_status(403)
    }

    pub fn is_conflict(&self) -> bool {
        self.is_status(409)
    }

    /// Over the credential's request rate (`429 rate_limited`): nothing was
    /// done; [`ClientError::retry_after`] says when the next request will be
    /// served (docs/limits.md).
    pub fn is_rate_limited(&self) -> bool {
        matches!(self, ClientError::Api { status: 429, .. })
    }

    /// Whether resending the same request later can succeed: the contract's
    /// `accounting_unavailable` and `COMPUTE_UNAVAILABLE` (both "safe to
    /// resend"), a rate limit, and a connection that could not be made or
    /// timed out.
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Api { status: 503, error, .. } => {
                error == "accounting_unavailable" || error == "COMPUTE_UNAVAILABLE"
            }
            ClientError::Api { status: 429, .. } => true,
            ClientError::Transport(e) => e.is_connect() || e.is_timeout(),
            _ => false,
        }
    }
}

/// `<status> <error>[: <detail; ...>][: <reason>][ (<field>=<value>, ...)][ (retry after Ns)]`
fn api_summary(status: u16, error: &str, body: &Value, retry_after_secs: Option<u64>) -> String {
    let mut out = format!("{status} {error}");
    match body {
        Value::Object(fields) => {
            match fields.get("detail") {
                Some(Value::Array(items)) if !items.is_empty() => {
                    let items: Vec<String> = items.iter().map(value_text).collect();
                    let _ = write!(out, ": {}", items.join("; "));
                }
                Some(Value::Array(_)) | None => {}
                Some(other) => {
                    let _ = write!(out, ": {}", value_text(other));
                }
            }
            if let Some(reason) = fields.get("reason") {
                let _ = write!(out, ": {}", value_text(reason));
            }
            let extra: Vec<String> = fields
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "error" | "detail" | "reason"))
                .map(|(k, v)| format!("{k}={}", value_text(v)))
                .collect();
            if !extra.is_empty() {
                let _ = write!(out, " ({})", extra.join(", "));
            }
        }
        Value::String(text) if !text.trim().is_empty() => {
            let first_line = text.trim().lines().next().unwrap_or_default();
            let _ = write!(out, ": {first_line}");
        }
        _ => {}
    }
    if let Some(secs) = retry_after_secs {
        let _ = write!(out, " (retry after {secs}s)");
    }
    out
}

/// A JSON value as text: strings without quotes, anything else as compact JSON.
fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;
    use serde_json::json;

    use super::*;

    fn answer(status: u16, body: &str) -> ClientError {
        ClientError::from_answer(status, &HeaderMap::new(), body.as_bytes())
    }

    #[test]
    fn contract_body_is_parsed() {
        let e = answer(404, r#"{"error":"unknown batch"}"#);
        assert!(e.is_not_found());
        assert_eq!(e.error_code(), Some("unknown batch"));
        assert_eq!(e.body(), Some(&json!({"error": "unknown batch"})));
        assert_eq!(e.to_string(), "404 unknown batch");
    }

    #[test]
    fn detail_array_is_listed() {
        let e = answer(400, r#"{"error":"invalid batch body","detail":["urls: must not be empty","unknown field x"]}"#);
        assert_eq!(e.detail(), vec!["urls: must not be empty", "unknown field x"]);
        assert_eq!(e.to_string(), "400 invalid batch body: urls: must not be empty; unknown field x");
    }

    #[test]
    fn reason_and_extra_fields_are_shown() {
        let e = answer(
            404,
            r#"{"error":"artifact not present","reason":"job has no complete published artifact family for this kind"}"#,
        );
        assert_eq!(
            e.to_string(),
            "404 artifact not present: job has no complete published artifact family for this kind"
        );
        let e = answer(402, r#"{"error":"insufficient_credit","requiredMicros":1200,"availableMicros":5}"#);
        assert_eq!(e.to_string(), "402 insufficient_credit (availableMicros=5, requiredMicros=1200)");
    }

    #[test]
    fn retry_after_is_kept() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("5"));
        let e = ClientError::from_answer(503, &headers, br#"{"error":"COMPUTE_UNAVAILABLE"}"#);
        assert_eq!(e.retry_after(), Some(Duration::from_secs(5)));
        assert!(e.is_retryable());
        assert_eq!(e.to_string(), "503 COMPUTE_UNAVAILABLE (retry after 5s)");
    }

    #[test]
    fn a_rate_limit_is_retryable_after_its_retry_after() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("2"));
        let e = ClientError::from_answer(429, &headers, br#"{"error":"rate_limited"}"#);
        assert!(e.is_rate_limited() && e.is_retryable());
        assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(e.to_string(), "429 rate_limited (retry after 2s)");
        assert!(!answer(413, r#"{"error":"body too large","limitBytes":8}"#).is_retryable());
    }

    #[test]
    fn non_json_body_keeps_its_text() {
        let e = answer(502, "<html>bad gateway</html>\nmore");
        assert_eq!(e.error_code(), Some("Bad Gateway"));
        assert_eq!(e.body(), Some(&json!("<html>bad gateway</html>\nmore")));
        assert_eq!(e.to_string(), "502 Bad Gateway: <html>bad gateway</html>");
        assert!(!e.is_retryable());
    }

    #[test]
    fn empty_body_is_null() {
        let e = answer(405, "");
        assert_eq!(e.body(), Some(&Value::Null));
        assert_eq!(e.to_string(), "405 Method Not Allowed");
    }

    #[test]
    fn json_rpc_error_uses_its_message() {
        let e = answer(405, r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Method not allowed."},"id":null}"#);
        assert_eq!(e.error_code(), Some("Method not allowed."));
    }

    #[test]
    fn session_limit_message_is_whole() {
        let e = answer(409, r#"{"error":"session limit reached: all 4 session slots are taken"}"#);
        assert!(e.is_conflict());
        assert_eq!(e.to_string(), "409 session limit reached: all 4 session slots are taken");
    }
}
