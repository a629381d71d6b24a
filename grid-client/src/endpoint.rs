//! Every call of the API as a value: method, path, whether it carries the
//! credential, and its body. [`crate::GridClient::send`] performs one and
//! decodes the answer into `T`; [`crate::GridClient::send_raw`] keeps the
//! answer's bytes (the CLI's `--json` prints them as they came).
//!
//! Ids in paths are percent-encoded as one segment each: everything except
//! the unreserved characters `A-Z a-z 0-9 - . _ ~` is escaped, so an id can
//! never add a segment, a query or a fragment.

use std::fmt;
use std::marker::PhantomData;

use grid_core::catalog::ArtifactKind;
use grid_core::wire::batch::{BatchCreated, BatchList, BatchView, NewBatch};
use grid_core::wire::grid::{GridStatus, Health, ProtectedResource, QueueDepth};
use grid_core::wire::item::{ArtifactUrl, CaptureItem, ItemRetried};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::Method;
use url::Url;

use crate::error::ClientError;

/// Characters escaped in a path segment: all but RFC 3986's unreserved set.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// One call of the API whose successful answer decodes as `T`.
#[derive(Debug, Clone)]
pub struct Endpoint<T> {
    method: Method,
    segments: Vec<String>,
    credential: bool,
    /// Query pairs, encoded by [`Endpoint::url`]; empty for most calls.
    query: Vec<(String, String)>,
    body: Option<Vec<u8>>,
    /// Why the call cannot be sent, found while building it (a body that
    /// does not serialize); `path` reports it, so nothing is sent.
    refused: Option<String>,
    /// Sent as the `Idempotency-Key` header (POST /batches, POST /sessions).
    idempotency_key: Option<String>,
    answer: PhantomData<fn() -> T>,
}

impl<T> Endpoint<T> {
    pub(crate) fn new(method: Method, segments: &[&str], credential: bool) -> Endpoint<T> {
        Endpoint {
            method,
            segments: segments.iter().map(|s| s.to_string()).collect(),
            credential,
            query: Vec::new(),
            body: None,
            refused: None,
            idempotency_key: None,
            answer: PhantomData,
        }
    }

    /// The same call with `body` as its JSON body. Our request types have
    /// only string keys and plain values, so this does not fail in
    /// practice; if it does, the call is refused before sending.
    pub(crate) fn with_json<B: serde::Serialize>(mut self, body: &B) -> Endpoint<T> {
        match serde_json::to_vec(body) {
            Ok(bytes) => self.body = Some(bytes),
            Err(e) => self.refused = Some(format!("the request body does not serialize: {e}")),
        }
        self
    }

    /// The same call with one more query pair (kept in order, encoded by `url`).
    pub(crate) fn with_query(mut self, name: impl Into<String>, value: impl Into<String>) -> Endpoint<T> {
        self.query.push((name.into(), value.into()));
        self
    }

    /// The same call with an `Idempotency-Key` header (POST /batches and
    /// POST /sessions honour it; docs/idempotency.md): sent again with the
    /// same key and body, it is answered with the first answer and does
    /// nothing more. [`crate::GridClient::send_raw_resending`] resends such
    /// a call on connection errors. Use
    /// [`crate::jobs::new_idempotency_key`] for a fresh one.
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Endpoint<T> {
        self.idempotency_key = Some(key.into());
        self
    }

    /// The `Idempotency-Key` the call carries, if any.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }

    /// The query pairs, in order.
    pub fn query(&self) -> &[(String, String)] {
        &self.query
    }

    pub fn method(&self) -> &Method {
        &self.method
    }

    /// Whether the call carries the credential (all but `/healthz` and the
    /// two `/.well-known/...` paths).
    pub fn sends_credential(&self) -> bool {
        self.credential
    }

    /// The JSON body, if the call has one.
    pub fn body(&self) -> Option<&[u8]> {
        self.body.as_deref()
    }

    /// The encoded path, relative to the base URL: `/batches/a%2Fb`.
    pub fn path(&self) -> Result<String, ClientError> {
        if let Some(why) = &self.refused {
            return Err(ClientError::InvalidInput(why.clone()));
        }
        let mut path = String::new();
        for segment in &self.segments {
            // A URL parser resolves `.` and `..` (also when escaped as
            // `%2E`), and an empty segment would address another route.
            if segment.is_empty() || segment == "." || segment == ".." {
                return Err(ClientError::InvalidInput(format!("{segment:?} cannot be used as an id in a path")));
            }
            path.push('/');
            path.extend(utf8_percent_encode(segment, SEGMENT));
        }
        Ok(path)
    }

    /// The full URL under `base`; a path in `base` (`https://host/grid/`) is kept as a prefix.
    pub fn url(&self, base: &Url) -> Result<Url, ClientError> {
        let path = self.path()?;
        let mut url = base.clone();
        let full = format!("{}{}", base.path().trim_end_matches('/'), path);
        url.set_path(&full);
        url.set_query(None);
        url.set_fragment(None);
        if !self.query.is_empty() {
            url.query_pairs_mut().extend_pairs(&self.query);
        }
        Ok(url)
    }
}

/// `GET /batches/a%2Fb` (with `?query` when it has one), for messages.
impl<T> fmt::Display for Endpoint<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.path() {
            Ok(path) => write!(f, "{} {}", self.method, path)?,
            Err(_) => write!(f, "{} /{}", self.method, self.segments.join("/"))?,
        }
        if !self.query.is_empty() {
            let query: String = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(&self.query).finish();
            write!(f, "?{query}")?;
        }
        Ok(())
    }
}

/// GET /healthz (no credential).
pub fn health() -> Endpoint<Health> {
    Endpoint::new(Method::GET, &["healthz"], false)
}

/// Parameters of GET /account; `None` leaves one out (50 entries per page,
/// every kind, the newest page).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerQuery {
    pub limit: Option<u32>,
    pub kind: Option<grid_core::ledger::EntryKind>,
    /// The previous page's `nextCursor`.
    pub cursor: Option<String>,
}

/// GET /account: the caller's balance, daily-cap use and a ledger page.
pub fn account(query: &LedgerQuery) -> Endpoint<grid_core::wire::account::AccountStatement> {
    let mut endpoint = Endpoint::new(Method::GET, &["account"], true);
    if let Some(limit) = query.limit {
        endpoint = endpoint.with_query("limit", limit.to_string());
    }
    if let Some(kind) = query.kind {
        endpoint = endpoint.with_query("kind", kind.as_str());
    }
    if let Some(cursor) = &query.cursor {
        endpoint = endpoint.with_query("cursor", cursor.clone());
    }
    endpoint
}

/// GET /grid.
pub fn grid_status() -> Endpoint<GridStatus> {
    Endpoint::new(Method::GET, &["grid"], true)
}

/// GET /grid/queue-depth.
pub fn queue_depth() -> Endpoint<QueueDepth> {
    Endpoint::new(Method::GET, &["grid", "queue-depth"], true)
}

/// GET /.well-known/oauth-protected-resource, or `.../mcp` when `mcp` (no credential).
pub fn protected_resource(mcp: bool) -> Endpoint<ProtectedResource> {
    let mut segments = vec![".well-known", "oauth-protected-resource"];
    if mcp {
        segments.push("mcp");
    }
    Endpoint::new(Method::GET, &segments, false)
}

/// POST /batches.
pub fn submit_batch(batch: &NewBatch) -> Endpoint<BatchCreated> {
    Endpoint::new(Method::POST, &["batches"], true).with_json(batch)
}

/// GET /batches: one page of the caller's batches, newest first; `cursor`
/// is the previous page's `nextCursor`.
pub fn list_batches(limit: Option<usize>, cursor: Option<&str>) -> Endpoint<BatchList> {
    let mut endpoint = Endpoint::new(Method::GET, &["batches"], true);
    if let Some(limit) = limit {
        endpoint = endpoint.with_query("limit", limit.to_string());
    }
    if let Some(cursor) = cursor {
        endpoint = endpoint.with_query("cursor", cursor.to_string());
    }
    endpoint
}

/// GET /batches/{batchId}.
pub fn batch(batch_id: &str) -> Endpoint<BatchView> {
    Endpoint::new(Method::GET, &["batches", batch_id], true)
}

/// GET /jobs/{jobId} for a capture item.
pub fn item(job_id: &str) -> Endpoint<CaptureItem> {
    Endpoint::new(Method::GET, &["jobs", job_id], true)
}

/// POST /jobs/{jobId}/retry for a capture item (no body).
pub fn retry_item(job_id: &str) -> Endpoint<ItemRetried> {
    Endpoint::new(Method::POST, &["jobs", job_id, "retry"], true)
}

/// GET /artifacts/{jobId}/{kind}.
pub fn artifact_url(job_id: &str, kind: ArtifactKind) -> Endpoint<ArtifactUrl> {
    Endpoint::new(Method::GET, &["artifacts", job_id, kind.as_str()], true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url_of<T>(base: &str, endpoint: &Endpoint<T>) -> String {
        endpoint.url(&Url::parse(base).unwrap()).unwrap().to_string()
    }

    #[test]
    fn paths_of_every_call() {
        let base = "http://127.0.0.1:8080";
        assert_eq!(url_of(base, &health()), "http://127.0.0.1:8080/healthz");
        assert_eq!(url_of(base, &grid_status()), "http://127.0.0.1:8080/grid");
        assert_eq!(url_of(base, &queue_depth()), "http://127.0.0.1:8080/grid/queue-depth");
        assert_eq!(
            url_of(base, &protected_resource(false)),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource"
        );
        assert_eq!(
            url_of(base, &protected_resource(true)),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(url_of(base, &submit_batch(&NewBatch::default())), "http://127.0.0.1:8080/batches");
        assert_eq!(url_of(base, &batch("b1")), "http://127.0.0.1:8080/batches/b1");
        assert_eq!(url_of(base, &item("j1")), "http://127.0.0.1:8080/jobs/j1");
        assert_eq!(url_of(base, &retry_item("j1")), "http://127.0.0.1:8080/jobs/j1/retry");
        assert_eq!(
            url_of(base, &artifact_url("j1", ArtifactKind::Screenshot)),
            "http://127.0.0.1:8080/artifacts/j1/screenshot"
        );
    }

    /// A body that cannot be JSON refuses the call before anything is
    /// sent, instead of panicking while the call is built.
    #[test]
    fn a_body_that_does_not_serialize_refuses_the_call() {
        let keys_not_strings: std::collections::BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
        let endpoint: Endpoint<BatchCreated> =
            Endpoint::new(Method::POST, &["batches"], true).with_json(&keys_not_strings);
        assert!(endpoint.body().is_none());
        match endpoint.path() {
            Err(ClientError::InvalidInput(why)) => assert!(why.contains("does not serialize"), "{why}"),
            other => panic!("expected InvalidInput, got {other:?}"),
        }
        assert_eq!(submit_batch(&NewBatch::default()).path().unwrap(), "/batches");
    }

    #[test]
    fn credential_only_where_the_contract_wants_it() {
        assert!(!health().sends_credential());
        assert!(!protected_resource(false).sends_credential());
        assert!(!protected_resource(true).sends_credential());
        assert!(grid_status().sends_credential());
        assert!(batch("b").sends_credential());
        assert!(retry_item("j").sends_credential());
    }

    #[test]
    fn ids_are_one_encoded_segment() {
        assert_eq!(batch("a/b").path().unwrap(), "/batches/a%2Fb");
        assert_eq!(batch("a b?c#d").path().unwrap(), "/batches/a%20b%3Fc%23d");
        assert_eq!(batch("100%").path().unwrap(), "/batches/100%25");
        assert_eq!(batch(r"a\b").path().unwrap(), "/batches/a%5Cb");
        assert_eq!(batch("ü").path().unwrap(), "/batches/%C3%BC");
        assert_eq!(batch("01J-x_y.z~").path().unwrap(), "/batches/01J-x_y.z~");
        assert_eq!(url_of("http://h", &retry_item("../../grid")), "http://h/jobs/..%2F..%2Fgrid/retry");
    }

    #[test]
    fn dot_and_empty_ids_are_refused() {
        for id in ["", ".", ".."] {
            assert!(matches!(item(id).path(), Err(ClientError::InvalidInput(_))), "{id:?}");
        }
        assert_eq!(item("..").to_string(), "GET /jobs/..");
    }

    #[test]
    fn base_path_is_a_prefix() {
        assert_eq!(url_of("https://h/api/", &batch("b")), "https://h/api/batches/b");
        assert_eq!(url_of("https://h/api", &batch("b")), "https://h/api/batches/b");
        assert_eq!(url_of("https://h/", &batch("b")), "https://h/batches/b");
    }

    #[test]
    fn idempotency_key_is_carried_not_required() {
        let plain = submit_batch(&NewBatch::default());
        assert_eq!(plain.idempotency_key(), None);
        let keyed = plain.with_idempotency_key("k-1");
        assert_eq!(keyed.idempotency_key(), Some("k-1"));
        assert_eq!(keyed.to_string(), "POST /batches");
    }

    #[test]
    fn batch_list_takes_limit_and_cursor() {
        let base = "http://127.0.0.1:8080";
        assert_eq!(url_of(base, &list_batches(None, None)), "http://127.0.0.1:8080/batches");
        assert_eq!(
            url_of(base, &list_batches(Some(5), Some("bt_1.ab"))),
            "http://127.0.0.1:8080/batches?limit=5&cursor=bt_1.ab"
        );
    }

    #[test]
    fn batch_body_leaves_out_defaults() {
        let body = NewBatch { urls: vec!["https://example.com/".into()], ..NewBatch::default() };
        let endpoint = submit_batch(&body);
        assert_eq!(endpoint.to_string(), "POST /batches");
        assert_eq!(endpoint.body().unwrap(), br#"{"urls":["https://example.com/"]}"#);
    }
}
