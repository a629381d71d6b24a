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

/// Set on a reply while job tracking has not caught up with the engine.
const COMPUTE_DEGRADED: &str = "x-grid-compute-degraded";
/// A job log's attempt, its artifact and whether it was cut.
const LOG_ATTEMPT: &str = "x-grid-attempt";
const LOG_ARTIFACT_ID: &str = "x-grid-artifact-id";
const LOG_TRUNCATED: &str = "x-grid-logs-truncated";
/// A one-call capture's item, batch, charge and the page's status.
const CAPTURE_JOB_ID: &str = "x-grid-job-id";
const CAPTURE_BATCH_ID: &str = "x-grid-batch-id";
const CAPTURE_CHARGED: &str = "x-grid-charged-micros";
const CAPTURE_TARGET_STATUS: &str = "x-grid-target-status";

/// A call's reply as an HTTP response: its body, and the facts beside the
/// body as headers.
pub fn reply(reply: Reply) -> Resp {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut headers: Vec<(&'static str, String)> = vec![];
    let mut r = match reply.body {
        ReplyBody::Json(b) => bytes(status, "application/json", b),
        ReplyBody::Empty => bytes(status, "application/json", vec![]),
        ReplyBody::Log(log) => {
            headers.extend([
                (LOG_ATTEMPT, log.attempt.to_string()),
                (LOG_ARTIFACT_ID, log.artifact_id),
                (LOG_TRUNCATED, log.truncated.to_string()),
            ]);
            bytes(status, "text/plain; charset=utf-8", log.text)
        }
        ReplyBody::File(file) => {
            headers.extend([
                (CAPTURE_JOB_ID, file.job_id),
                (CAPTURE_BATCH_ID, file.batch_id),
                (CAPTURE_CHARGED, file.charged_micros.to_string()),
            ]);
            headers.extend(file.target_status.map(|s| (CAPTURE_TARGET_STATUS, s.to_string())));
            bytes(status, &file.content_type, file.bytes)
        }
        // Answered over HTTP to the node that asked for it only
        // (`Route::NodeSessionTool`), which reads it back.
        ReplyBody::BrowserTool(tool) => {
            bytes(status, "application/json", serde_json::to_vec(&tool.answer).unwrap_or_else(|_| b"{}".to_vec()))
        }
    };
    if reply.replayed {
        headers.push((grid_core::idempotency::REPLAYED_HEADER, "true".into()));
    }
    if reply.compute_degraded {
        headers.push((COMPUTE_DEGRADED, "reconciler-unready".into()));
    }
    for (name, value) in headers {
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
