//! The one place where API errors and values become HTTP responses.

use bytes::Bytes;
use grid_core::error::ApiError;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Response, StatusCode};
use serde::Serialize;
use serde_json::Value;

use super::limits::{read_body, ConnConfig};
use crate::api::{Reply, ReplyBody};

/// A response body: whole (`full`) or streamed (a published file, see
/// `downloads.rs`); a streamed body that fails mid-way ends the connection.
pub type Body = UnsyncBoxBody<Bytes, std::io::Error>;
pub type Resp = Response<Body>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed_unsync()
}

pub fn empty() -> Body {
    full(Bytes::new())
}

pub fn json<T: Serialize>(status: u16, value: &T) -> Resp {
    let body = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    let mut r = Response::new(full(body));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// The one rendering of a refusal, from its row of the error table; MCP
/// tool results are made from this response too.
pub fn error(e: &ApiError) -> Resp {
    let row = e.row();
    let mut r = json(row.status, &row.body());
    if let Some(secs) = row.retry_after_secs {
        r.headers_mut().insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    r
}

/// A call's reply as an HTTP response.
pub fn reply(reply: Reply) -> Resp {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = match reply.body {
        ReplyBody::Json(b) => bytes(status, "application/json", b),
        ReplyBody::Text(b) => bytes(status, "text/plain; charset=utf-8", b),
        ReplyBody::Empty => bytes(status, "application/json", vec![]),
        ReplyBody::File { content_type, bytes: b } => bytes(status, &content_type, b),
    };
    for (name, value) in reply.headers {
        if let Ok(v) = HeaderValue::from_str(&value) {
            r.headers_mut().insert(name, v);
        }
    }
    r
}

pub fn bytes(status: StatusCode, content_type: &str, body: Vec<u8>) -> Resp {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    if let Ok(v) = HeaderValue::from_str(content_type) {
        r.headers_mut().insert(CONTENT_TYPE, v);
    }
    r
}

/// The `Idempotency-Key` header of a submission, checked.
pub fn idempotency_key(headers: &hyper::HeaderMap) -> Result<Option<String>, ApiError> {
    let values: Vec<&[u8]> = headers.get_all(grid_core::idempotency::HEADER).iter().map(|v| v.as_bytes()).collect();
    grid_core::idempotency::parse_key(&values)
}

/// Reads a JSON body within the bounds of `limits` (too large: 413; too
/// slow: 408). `refuse` builds the endpoint's own 400 from a problem list,
/// so a malformed body gets the same error code as an invalid one.
pub async fn json_body(
    body: Incoming,
    limits: &ConnConfig,
    refuse: impl Fn(Vec<String>) -> ApiError,
) -> Result<Value, ApiError> {
    let collected = read_body(body, limits.body_read_timeout)
        .await
        .map_err(|e| e.refusal(limits, |e| refuse(vec![format!("body: could not be read ({e})")])))?;
    if collected.is_empty() {
        return Err(refuse(vec!["body: is empty; send a JSON object".into()]));
    }
    let body: Value =
        serde_json::from_slice(&collected).map_err(|e| refuse(vec![format!("body: not valid JSON ({e})")]))?;
    match grid_core::validate::members::duplicate_member(&collected) {
        Some(pointer) => Err(refuse(vec![grid_core::validate::members::problem(&pointer)])),
        None => Ok(body),
    }
}
