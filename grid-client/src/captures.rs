//! One-call captures: POST /screenshot, /pdf and /content as [`Endpoint`]
//! values, and the file they answer ([`Captured`]). The options are the
//! parameters of the script each route runs (`capture`, `pdf`,
//! `render-fetch`), the same map a batch's `params` is, sent flat beside
//! `url` (docs/one-call.md).
//!
//! ```no_run
//! # async fn demo() -> Result<(), grid_client::error::ClientError> {
//! use grid_client::GridClient;
//! use serde_json::json;
//!
//! let client = GridClient::new("http://127.0.0.1:8080", "my-api-key")?;
//! let options = json!({"fullPage": true, "format": "jpeg"});
//! let shot = client.screenshot("https://example.com/", options.as_object().unwrap()).await?;
//! std::fs::write("page.jpeg", &shot.bytes).unwrap();
//! println!("{} charged {} micro-euros", shot.job_id, shot.charged_micros);
//! # Ok(()) }
//! ```

use bytes::Bytes;
use grid_core::validate::one_call::OneCall;
use reqwest::Method;
use serde_json::{Map, Value};

use crate::endpoint::Endpoint;
use crate::error::ClientError;
use crate::RawReply;

/// POST /screenshot, /pdf or /content for `url` with `options` beside it.
pub fn one_call(call: OneCall, url: &str, options: &Map<String, Value>) -> Endpoint<()> {
    let mut body = options.clone();
    body.insert("url".into(), Value::String(url.to_string()));
    Endpoint::new(Method::POST, &[call.path().trim_start_matches('/')], true).with_json(&Value::Object(body))
}

/// A one-call capture's file and the item that made it (find it in the
/// ledger, or fetch its other files through GET /artifacts).
#[derive(Debug, Clone)]
pub struct Captured {
    pub bytes: Bytes,
    /// `image/png`, `image/jpeg`, `image/webp`, `application/pdf` or `text/html`.
    pub content_type: String,
    /// The capture item (`x-grid-job-id`).
    pub job_id: String,
    /// Its batch of one (`x-grid-batch-id`).
    pub batch_id: String,
    /// What the ledger charged for it (`x-grid-charged-micros`).
    pub charged_micros: i64,
    /// The page's HTTP status (`x-grid-target-status`).
    pub target_status: Option<u16>,
}

impl Captured {
    pub(crate) fn from_reply(reply: RawReply) -> Result<Captured, ClientError> {
        let header = |name: &str| reply.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let missing =
            |name: &str| ClientError::InvalidInput(format!("{}: the answer has no {name} header", reply.endpoint));
        Ok(Captured {
            content_type: header("content-type").unwrap_or_default(),
            job_id: header("x-grid-job-id").ok_or_else(|| missing("x-grid-job-id"))?,
            batch_id: header("x-grid-batch-id").ok_or_else(|| missing("x-grid-batch-id"))?,
            charged_micros: header("x-grid-charged-micros").and_then(|v| v.parse().ok()).unwrap_or(0),
            target_status: header("x-grid-target-status").and_then(|v| v.parse().ok()),
            bytes: reply.body,
        })
    }
}
