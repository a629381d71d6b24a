//! Typed async SDK for the Grid API.
//!
//! ```no_run
//! # async fn demo() -> Result<(), grid_client::error::ClientError> {
//! use grid_client::GridClient;
//! use grid_core::wire::batch::NewBatch;
//!
//! let client = GridClient::new("http://127.0.0.1:8080", "my-api-key")?;
//! let created = client
//!     .submit_batch(&NewBatch { urls: vec!["https://example.com/".into()], ..NewBatch::default() })
//!     .await?;
//! let done = client
//!     .wait_batch(&created.batch_id, std::time::Duration::from_secs(2), |view| {
//!         eprintln!("{}/{}", view.counts.completed + view.counts.failed, view.total)
//!     })
//!     .await?;
//! # let _ = done; Ok(()) }
//! ```
//!
//! **API Boundary:** request and answer shapes are grid-core's
//! (`grid_core::wire`); this crate adds no wire types of its own. Every call
//! is an [`endpoint::Endpoint`] value; the methods of [`GridClient`] are
//! one-liners over [`GridClient::send`].

pub mod captures;
pub mod endpoint;
pub mod error;
pub mod jobs;
pub mod sessions;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use grid_core::catalog::ArtifactKind;
use grid_core::validate::one_call::OneCall;
use grid_core::wire::batch::{BatchCreated, BatchList, BatchSummary, BatchView, NewBatch};
use grid_core::wire::grid::{GridStatus, Health, ProtectedResource, QueueDepth};
use grid_core::wire::item::{ArtifactUrl, CaptureItem, ItemRetried};
use grid_core::wire::job::NewJob;
use grid_core::wire::job_record::{JobArtifacts, JobList, JobRecord};
use grid_core::wire::session::{NewSession, SessionDownloads, SessionLease, SessionRecording, SessionView};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use reqwest::Method;
use serde::de::DeserializeOwned;
use url::Url;

use crate::endpoint::Endpoint;
use crate::error::ClientError;
use crate::jobs::{JobListQuery, JobLog, JobSubmitted};

/// How a client proves who it is. Debug output never shows the secret.
#[derive(Clone, Default)]
pub enum Credential {
    /// No credential: only `/healthz` and `/.well-known/...` answer 200.
    #[default]
    None,
    /// Sent as `x-api-key: <key>`.
    ApiKey(String),
    /// Sent as `Authorization: Bearer <token>`.
    BearerToken(String),
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::None => f.write_str("None"),
            Credential::ApiKey(_) => f.write_str("ApiKey(<redacted>)"),
            Credential::BearerToken(_) => f.write_str("BearerToken(<redacted>)"),
        }
    }
}

/// Everything a [`GridClient`] is built from. [`ClientConfig::new`] fills in
/// the defaults.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The server's address, `http` or `https`, optionally with a path prefix.
    pub base_url: String,
    pub credential: Credential,
    /// Time limit of one API call, from sending to the end of the answer.
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// Time limit of one [`GridClient::download`].
    pub download_timeout: Duration,
    /// A PEM file of CA certificates trusted besides the built-in roots: a
    /// grid serving a self-signed certificate (`DATA_DIR/tls/ca.pem` of
    /// `grid-server serve --tls-self-signed`) or one under a private CA.
    pub ca_cert: Option<PathBuf>,
}

/// The variable [`ClientConfig::new`] reads [`ClientConfig::ca_cert`] from.
pub const CA_CERT_ENV: &str = "GRID_CA_CERT";

impl ClientConfig {
    /// The defaults; [`ClientConfig::ca_cert`] is `GRID_CA_CERT` when that
    /// is set and not empty.
    pub fn new(base_url: impl Into<String>, credential: Credential) -> ClientConfig {
        ClientConfig {
            base_url: base_url.into(),
            credential,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            download_timeout: Duration::from_secs(300),
            ca_cert: std::env::var_os(CA_CERT_ENV).filter(|v| !v.is_empty()).map(PathBuf::from),
        }
    }

    /// Trusts the CA certificates of this PEM file (besides the built-in roots).
    pub fn with_ca_cert(mut self, path: impl Into<PathBuf>) -> ClientConfig {
        self.ca_cert = Some(path.into());
        self
    }
}

/// A successful (2xx) answer, undecoded.
#[derive(Debug, Clone)]
pub struct RawReply {
    /// The call, as `GET /batches/b1`.
    pub endpoint: String,
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl RawReply {
    /// Whether the server answered from a stored `Idempotency-Key` (header
    /// `Idempotent-Replayed: true`): the first request's answer, again.
    pub fn replayed(&self) -> bool {
        self.headers
            .get(grid_core::idempotency::REPLAYED_HEADER)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
    }

    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, ClientError> {
        serde_json::from_slice(&self.body)
            .map_err(|cause| ClientError::Decode { endpoint: self.endpoint.clone(), cause })
    }
}

/// A client of one Grid server with one credential. Cheap to clone (the
/// connection pool is shared).
#[derive(Clone)]
pub struct GridClient {
    http: reqwest::Client,
    base: Url,
    auth: Option<(HeaderName, HeaderValue)>,
    timeout: Duration,
    download_timeout: Duration,
}

impl fmt::Debug for GridClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GridClient")
            .field("base", &self.base.as_str())
            .field("auth", &self.auth.as_ref().map(|(name, _)| name.as_str()))
            .finish()
    }
}

/// How many times [`GridClient::send_raw_resending`] resends a call with an
/// idempotency key that got no answer.
pub const RESENDS: u32 = 4;
const RESEND_FIRST_PAUSE: Duration = Duration::from_millis(500);

/// How many polls in a row [`GridClient::wait_batch`] lets fail with a
/// retryable error before giving up.
const WAIT_RETRIES: u32 = 5;

/// Rides out short outages while polling: up to [`WAIT_RETRIES`] retryable
/// errors in a row, each waited out for its `retry-after` (or the poll
/// interval).
struct Outages {
    in_a_row: u32,
}

impl Outages {
    fn new() -> Outages {
        Outages { in_a_row: 0 }
    }

    /// After a good answer.
    fn reset(&mut self) {
        self.in_a_row = 0;
    }

    /// Waits out a retryable error, or hands the error back.
    async fn wait_out(&mut self, e: ClientError, poll_interval: Duration) -> Result<(), ClientError> {
        if e.is_retryable() && self.in_a_row < WAIT_RETRIES {
            self.in_a_row += 1;
            tokio::time::sleep(e.retry_after().unwrap_or(poll_interval)).await;
            Ok(())
        } else {
            Err(e)
        }
    }
}

impl GridClient {
    /// A client that sends `x-api-key: <api_key>`.
    pub fn new(base_url: &str, api_key: impl Into<String>) -> Result<GridClient, ClientError> {
        GridClient::from_config(ClientConfig::new(base_url, Credential::ApiKey(api_key.into())))
    }

    /// A client that sends `Authorization: Bearer <token>`.
    pub fn with_bearer_token(base_url: &str, token: impl Into<String>) -> Result<GridClient, ClientError> {
        GridClient::from_config(ClientConfig::new(base_url, Credential::BearerToken(token.into())))
    }

    /// A client without credential.
    pub fn anonymous(base_url: &str) -> Result<GridClient, ClientError> {
        GridClient::from_config(ClientConfig::new(base_url, Credential::None))
    }

    pub fn from_config(config: ClientConfig) -> Result<GridClient, ClientError> {
        let base = Url::parse(&config.base_url)
            .map_err(|e| ClientError::InvalidInput(format!("base URL {:?}: {e}", config.base_url)))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(ClientError::InvalidInput(format!("base URL {:?}: not an http(s) URL", config.base_url)));
        }
        if base.query().is_some() || base.fragment().is_some() {
            return Err(ClientError::InvalidInput(format!(
                "base URL {:?}: must not have a query or fragment",
                config.base_url
            )));
        }
        let auth = match config.credential {
            Credential::None => None,
            Credential::ApiKey(key) => Some((HeaderName::from_static("x-api-key"), secret_header(&key, "API key")?)),
            Credential::BearerToken(token) => {
                Some((AUTHORIZATION, secret_header(&format!("Bearer {token}"), "bearer token")?))
            }
        };
        let mut http = reqwest::Client::builder()
            .user_agent(concat!("grid-client/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(config.connect_timeout);
        if let Some(path) = &config.ca_cert {
            for cert in ca_certificates(path)? {
                http = http.add_root_certificate(cert);
            }
        }
        let http = http.build()?;
        Ok(GridClient { http, base, auth, timeout: config.timeout, download_timeout: config.download_timeout })
    }

    pub fn base_url(&self) -> &Url {
        &self.base
    }

    /// Performs `endpoint` and decodes its answer.
    pub async fn send<T: DeserializeOwned>(&self, endpoint: &Endpoint<T>) -> Result<T, ClientError> {
        self.send_raw(endpoint).await?.decode()
    }

    /// Performs `endpoint` and returns its 2xx answer undecoded; any other
    /// status is [`ClientError::Api`].
    pub async fn send_raw<T>(&self, endpoint: &Endpoint<T>) -> Result<RawReply, ClientError> {
        self.send_raw_within(endpoint, self.timeout).await
    }

    /// [`GridClient::send_raw`] within `timeout`.
    async fn send_raw_within<T>(&self, endpoint: &Endpoint<T>, timeout: Duration) -> Result<RawReply, ClientError> {
        let url = endpoint.url(&self.base)?;
        let mut request =
            self.http.request(endpoint.method().clone(), url).timeout(timeout).header(ACCEPT, "application/json");
        if endpoint.sends_credential() {
            if let Some((name, value)) = &self.auth {
                request = request.header(name, value.clone());
            }
        }
        if let Some(key) = endpoint.idempotency_key() {
            let value = HeaderValue::from_str(key).map_err(|_| {
                ClientError::InvalidInput("idempotency key contains characters a header cannot carry".into())
            })?;
            request = request.header(grid_core::idempotency::HEADER, value);
        }
        if let Some(body) = endpoint.body() {
            request = request.header(CONTENT_TYPE, "application/json").body(body.to_vec());
        } else if endpoint.method() == Method::POST {
            // Said explicitly: some proxies answer 411 to a POST without it.
            request = request.header(CONTENT_LENGTH, "0");
        }
        let response = request.send().await?;
        read_answer(endpoint.to_string(), response).await
    }

    /// [`GridClient::send_raw`], resending a call that carries an
    /// `Idempotency-Key` ([`Endpoint::with_idempotency_key`]) when it got no
    /// answer (connection refused or broken, timeout) or a retryable 503: up
    /// to [`RESENDS`] more times, each after the answer's `retry-after` or a
    /// growing pause (0.5, 1, 2, 4 s). Any transport error counts, also an
    /// answer that broke off: the key makes this safe, since a first request
    /// that did arrive is answered again, never performed twice. A call
    /// without a key is sent once.
    pub async fn send_raw_resending<T>(&self, endpoint: &Endpoint<T>) -> Result<RawReply, ClientError> {
        let mut pause = RESEND_FIRST_PAUSE;
        let mut resends = 0;
        loop {
            match self.send_raw(endpoint).await {
                Err(e) if endpoint.idempotency_key().is_some() && resendable(&e) && resends < RESENDS => {
                    resends += 1;
                    tokio::time::sleep(e.retry_after().unwrap_or(pause)).await;
                    pause *= 2;
                }
                other => return other,
            }
        }
    }

    /// GET /healthz.
    pub async fn health(&self) -> Result<Health, ClientError> {
        self.send(&endpoint::health()).await
    }

    /// GET /account: the caller's balance, daily-cap use and one ledger page.
    pub async fn account(
        &self,
        query: &endpoint::LedgerQuery,
    ) -> Result<grid_core::wire::account::AccountStatement, ClientError> {
        self.send(&endpoint::account(query)).await
    }

    /// GET /grid.
    pub async fn grid_status(&self) -> Result<GridStatus, ClientError> {
        self.send(&endpoint::grid_status()).await
    }

    /// GET /grid/queue-depth.
    pub async fn queue_depth(&self) -> Result<QueueDepth, ClientError> {
        self.send(&endpoint::queue_depth()).await
    }

    /// GET /.well-known/oauth-protected-resource, or `.../mcp` when `mcp`.
    pub async fn protected_resource(&self, mcp: bool) -> Result<ProtectedResource, ClientError> {
        self.send(&endpoint::protected_resource(mcp)).await
    }

    /// POST /batches.
    pub async fn submit_batch(&self, batch: &NewBatch) -> Result<BatchCreated, ClientError> {
        self.send(&endpoint::submit_batch(batch)).await
    }

    /// POST /batches with an `Idempotency-Key`, resent with that key on
    /// connection errors ([`GridClient::send_raw_resending`]). Submitting
    /// the same batch with the same key again (within 24 h) answers the
    /// first batch and reserves nothing more; another batch with that key
    /// is refused with 422 `idempotency key reused`.
    pub async fn submit_batch_with_key(&self, batch: &NewBatch, key: &str) -> Result<BatchCreated, ClientError> {
        self.send_raw_resending(&endpoint::submit_batch(batch).with_idempotency_key(key)).await?.decode()
    }

    /// POST /screenshot: the page's screenshot, `options` being the
    /// `capture` script's parameters (`format`, `fullPage`, `viewport`, ...).
    /// Waits up to the download time limit: a page may take its `timeoutMs`.
    pub async fn screenshot(
        &self,
        url: &str,
        options: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<captures::Captured, ClientError> {
        self.capture_one(OneCall::Screenshot, url, options).await
    }

    /// POST /pdf: the page printed, `options` being the `pdf` script's
    /// parameters (`format` as the paper, `landscape`, `margin`, ...).
    pub async fn pdf(
        &self,
        url: &str,
        options: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<captures::Captured, ClientError> {
        self.capture_one(OneCall::Pdf, url, options).await
    }

    /// POST /content: the page's DOM after its scripts ran, `options` being
    /// the `render-fetch` script's parameters.
    pub async fn content(
        &self,
        url: &str,
        options: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<captures::Captured, ClientError> {
        self.capture_one(OneCall::Content, url, options).await
    }

    /// One of the one-call captures.
    pub async fn capture_one(
        &self,
        call: OneCall,
        url: &str,
        options: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<captures::Captured, ClientError> {
        let reply = self.send_raw_within(&captures::one_call(call, url, options), self.download_timeout).await?;
        captures::Captured::from_reply(reply)
    }

    /// GET /batches: one page of the caller's batches, newest first.
    pub async fn list_batches(&self, limit: Option<usize>, cursor: Option<&str>) -> Result<BatchList, ClientError> {
        self.send(&endpoint::list_batches(limit, cursor)).await
    }

    /// GET /batches, following `nextCursor` until `max` batches or the last
    /// page; newest first.
    pub async fn recent_batches(&self, max: usize) -> Result<Vec<BatchSummary>, ClientError> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        while all.len() < max {
            let page = self.list_batches(Some((max - all.len()).min(100)), cursor.as_deref()).await?;
            all.extend(page.batches);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        Ok(all)
    }

    /// GET /batches/{batchId}.
    pub async fn batch(&self, batch_id: &str) -> Result<BatchView, ClientError> {
        self.send(&endpoint::batch(batch_id)).await
    }

    /// GET /jobs/{jobId} for a capture item.
    pub async fn item(&self, job_id: &str) -> Result<CaptureItem, ClientError> {
        self.send(&endpoint::item(job_id)).await
    }

    /// POST /jobs/{jobId}/retry for a capture item.
    pub async fn retry_item(&self, job_id: &str) -> Result<ItemRetried, ClientError> {
        self.send(&endpoint::retry_item(job_id)).await
    }

    /// GET /artifacts/{jobId}/{kind}: a download URL valid for 15 minutes.
    pub async fn artifact_url(&self, job_id: &str, kind: ArtifactKind) -> Result<ArtifactUrl, ClientError> {
        self.send(&endpoint::artifact_url(job_id, kind)).await
    }

    /// A plain GET of a signed download URL, without credential (the URL is
    /// the credential). A non-2xx answer is [`ClientError::Api`]. The URL is
    /// kept out of transport error messages, since it holds a secret.
    pub async fn download(&self, url: &str) -> Result<Bytes, ClientError> {
        let parsed = Url::parse(url).map_err(|e| ClientError::InvalidInput(format!("download URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ClientError::InvalidInput("download URL: not an http(s) URL".into()));
        }
        let response = self
            .http
            .get(parsed)
            .timeout(self.download_timeout)
            .send()
            .await
            .map_err(|e| ClientError::Transport(e.without_url()))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.bytes().await.map_err(|e| ClientError::Transport(e.without_url()))?;
        if !(200..300).contains(&status) {
            return Err(ClientError::from_answer(status, &headers, &body));
        }
        Ok(body)
    }

    /// Asks for the download URL of `kind`, then downloads it.
    pub async fn download_artifact(&self, job_id: &str, kind: ArtifactKind) -> Result<Bytes, ClientError> {
        let ArtifactUrl { url } = self.artifact_url(job_id, kind).await?;
        self.download(&url).await
    }

    /// Polls GET /batches/{batchId} every `poll_interval` until
    /// `counts.completed + counts.failed == total`, calling `on_progress` with
    /// every view read (the last one included) and returning the last one.
    ///
    /// A retryable error ([`ClientError::is_retryable`]) is tolerated up to
    /// five polls in a row, waiting its `retry-after` when it has one; any
    /// other error ends the wait. There is no overall time limit: wrap the
    /// future in `tokio::time::timeout` for one.
    pub async fn wait_batch(
        &self,
        batch_id: &str,
        poll_interval: Duration,
        mut on_progress: impl FnMut(&BatchView),
    ) -> Result<BatchView, ClientError> {
        let endpoint = endpoint::batch(batch_id);
        let mut outages = Outages::new();
        loop {
            match self.send(&endpoint).await {
                Ok(view) => {
                    outages.reset();
                    on_progress(&view);
                    if view.is_done() {
                        return Ok(view);
                    }
                    tokio::time::sleep(poll_interval).await;
                }
                Err(e) => outages.wait_out(e, poll_interval).await?,
            }
        }
    }
}

/// Analytical jobs (module [`jobs`]).
impl GridClient {
    /// POST /jobs: 202 with a new record (`created`), or 200 with the
    /// existing one when the idempotency key was used with the same body.
    pub async fn submit_job(&self, job: &NewJob) -> Result<JobSubmitted, ClientError> {
        let reply = self.send_raw(&jobs::submit_job(job)).await?;
        Ok(JobSubmitted { created: reply.status == 202, record: reply.decode()? })
    }

    /// GET /jobs/{jobId} for an analytical job.
    pub async fn job(&self, job_id: &str) -> Result<JobRecord, ClientError> {
        self.send(&jobs::job(job_id)).await
    }

    /// GET /jobs: one page.
    pub async fn list_jobs(&self, query: &JobListQuery) -> Result<JobList, ClientError> {
        self.send(&jobs::list_jobs(query)).await
    }

    /// GET /jobs, following `nextCursor` from `query`'s page to the last one;
    /// every record, newest first.
    pub async fn list_all_jobs(&self, query: &JobListQuery) -> Result<Vec<JobRecord>, ClientError> {
        let mut query = query.clone();
        let mut all = Vec::new();
        loop {
            let page = self.list_jobs(&query).await?;
            all.extend(page.jobs);
            match page.next_cursor {
                Some(cursor) => query.cursor = Some(cursor),
                None => return Ok(all),
            }
        }
    }

    /// POST /jobs/{jobId}/cancel.
    pub async fn cancel_job(&self, job_id: &str) -> Result<JobRecord, ClientError> {
        self.send(&jobs::cancel_job(job_id)).await
    }

    /// POST /jobs/{jobId}/retry for an analytical job: a new attempt with a
    /// new reservation.
    pub async fn retry_job(&self, job_id: &str) -> Result<JobRecord, ClientError> {
        self.send(&jobs::retry_job(job_id)).await
    }

    /// GET /jobs/{jobId}/artifacts.
    pub async fn job_artifacts(&self, job_id: &str) -> Result<JobArtifacts, ClientError> {
        self.send(&jobs::job_artifacts(job_id)).await
    }

    /// GET /jobs/{jobId}/logs: the log of `attempt` (default the current
    /// one) with its `x-grid-*` headers.
    pub async fn job_logs(&self, job_id: &str, attempt: Option<u32>) -> Result<JobLog, ClientError> {
        JobLog::from_reply(&self.send_raw(&jobs::job_logs(job_id, attempt)).await?)
    }

    /// GET /jobs/{jobId}/logs?follow=true: follows `attempt` (default the
    /// current one) as it runs, calling `on_output` with each piece of its
    /// stdout and stderr as the server sends it, until the attempt ends (the
    /// server waits for a queued job's attempt to start). The pieces
    /// together are the attempt's published log. An answer that breaks off
    /// before its end is [`ClientError::Transport`]; the client's request
    /// timeout does not apply (a running attempt is followed as long as it
    /// runs): wrap the future in `tokio::time::timeout` for a limit.
    pub async fn follow_job_logs(
        &self,
        job_id: &str,
        attempt: Option<u32>,
        mut on_output: impl FnMut(&[u8]),
    ) -> Result<jobs::FollowedLog, ClientError> {
        let endpoint = jobs::follow_job_logs(job_id, attempt);
        let mut request = self.http.get(endpoint.url(&self.base)?).header(ACCEPT, "text/plain");
        if let Some((name, value)) = &self.auth {
            request = request.header(name, value.clone());
        }
        let mut response = request.send().await?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            return Err(ClientError::from_answer(status, &headers, &body));
        }
        let attempt = response
            .headers()
            .get("x-grid-attempt")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u32>().ok())
            .ok_or_else(|| ClientError::Decode {
                endpoint: endpoint.to_string(),
                cause: serde::de::Error::custom("answer without a valid x-grid-attempt header"),
            })?;
        let mut byte_length = 0u64;
        while let Some(chunk) = response.chunk().await? {
            byte_length += chunk.len() as u64;
            on_output(&chunk);
        }
        Ok(jobs::FollowedLog { attempt, byte_length })
    }

    /// Polls GET /jobs/{jobId}/logs every `poll_interval` until the log is
    /// published and returns it. While the answer is 404 LOGS_NOT_AVAILABLE
    /// it keeps polling as long as the job can still produce that log; once
    /// the job is finished without it (an attempt that never started a
    /// container has no log) that 404 is returned. Retryable errors are
    /// tolerated as in [`GridClient::wait_batch`]. No overall time limit.
    pub async fn wait_job_log(
        &self,
        job_id: &str,
        attempt: Option<u32>,
        poll_interval: Duration,
    ) -> Result<JobLog, ClientError> {
        let mut outages = Outages::new();
        loop {
            let outcome = match self.job_logs(job_id, attempt).await {
                Ok(log) => return Ok(log),
                Err(e) if e.is_not_found() && e.error_code() == Some(jobs::LOGS_NOT_AVAILABLE) => {
                    match self.job(job_id).await {
                        Ok(record) if log_will_not_come(&record, attempt) => return Err(e),
                        Ok(_) => Ok(()),
                        Err(other) => Err(other),
                    }
                }
                Err(e) => Err(e),
            };
            match outcome {
                Ok(()) => {
                    outages.reset();
                    tokio::time::sleep(poll_interval).await;
                }
                Err(e) => outages.wait_out(e, poll_interval).await?,
            }
        }
    }
}

/// Browser sessions (module [`sessions`]).
impl GridClient {
    /// POST /sessions: 201 with the cdpUrl (shown only here); the session is
    /// `pending` until its browser runs.
    pub async fn lease_session(&self, session: &NewSession) -> Result<SessionLease, ClientError> {
        self.send(&sessions::lease_session(session)).await
    }

    /// POST /sessions with an `Idempotency-Key`, resent with that key on
    /// connection errors ([`GridClient::send_raw_resending`]). Leasing again
    /// with the same key and body (within 24 h) answers the first lease,
    /// cdpUrl included, and takes no second slot or reservation.
    pub async fn lease_session_with_key(&self, session: &NewSession, key: &str) -> Result<SessionLease, ClientError> {
        self.send_raw_resending(&sessions::lease_session(session).with_idempotency_key(key)).await?.decode()
    }

    /// GET /sessions: the caller's live sessions (pending or running), oldest
    /// first, without cdpUrl.
    pub async fn sessions(&self) -> Result<Vec<SessionView>, ClientError> {
        self.send(&sessions::sessions()).await
    }

    /// DELETE /sessions/{sessionId}: ends the session (204); its cdpUrl stops
    /// working at once.
    pub async fn release_session(&self, session_id: &str) -> Result<(), ClientError> {
        self.send_raw(&sessions::release_session(session_id)).await.map(|_| ())
    }

    /// POST /contexts: a new persistent browser context; lease with
    /// `NewSession { context: Some(NewSessionContext { id, persist }) }`.
    pub async fn create_context(&self) -> Result<grid_core::wire::session::ContextCreated, ClientError> {
        self.send(&sessions::create_context()).await
    }

    /// GET /contexts: the caller's contexts, oldest first.
    pub async fn list_contexts(&self) -> Result<Vec<grid_core::wire::session::ContextView>, ClientError> {
        self.send(&sessions::contexts()).await
    }

    /// DELETE /contexts/{contextId}: the context and its saved state (204);
    /// 409 while a live session holds it.
    pub async fn delete_context(&self, context_id: &str) -> Result<(), ClientError> {
        self.send_raw(&sessions::delete_context(context_id)).await.map(|_| ())
    }

    /// GET /sessions/{sessionId}/downloads: the files the session's pages
    /// downloaded, each with a signed URL (15 minutes) for
    /// [`GridClient::download`]; listed while the session runs and for the
    /// grid's grace after it ends.
    pub async fn session_downloads(&self, session_id: &str) -> Result<SessionDownloads, ClientError> {
        self.send(&sessions::session_downloads(session_id)).await
    }

    /// GET /sessions/{sessionId}/recording: for a session leased with
    /// `recording` that has ended, a signed URL (15 minutes) of its replay
    /// page for [`GridClient::download`], with its size, frames and whether
    /// it was truncated at the session's bound. A live session answers 409
    /// `recording not ready`; one leased without recording, 404
    /// `recording not present`.
    pub async fn session_recording(&self, session_id: &str) -> Result<SessionRecording, ClientError> {
        self.send(&sessions::session_recording(session_id)).await
    }

    /// Polls GET /sessions every `poll_interval` until the session is
    /// `running` and returns that entry (its attestation filled); `None` when
    /// the session is no longer listed (it ended before running: released,
    /// expired or lost). Retryable errors are tolerated as in
    /// [`GridClient::wait_batch`]. No overall time limit.
    pub async fn wait_session_running(
        &self,
        session_id: &str,
        poll_interval: Duration,
    ) -> Result<Option<SessionView>, ClientError> {
        let mut outages = Outages::new();
        loop {
            match self.sessions().await {
                Ok(list) => {
                    outages.reset();
                    match list.into_iter().find(|s| s.session_id == session_id) {
                        None => return Ok(None),
                        Some(s) if s.status == grid_core::session::SessionStatus::Running => return Ok(Some(s)),
                        Some(_) => tokio::time::sleep(poll_interval).await,
                    }
                }
                Err(e) => outages.wait_out(e, poll_interval).await?,
            }
        }
    }
}

/// Whether a log that is not available now never will be: the attempt asked
/// for (or the current one) ended without one, or does not exist while the
/// job is finished (only a manual retry could make it).
fn log_will_not_come(record: &JobRecord, attempt: Option<u32>) -> bool {
    let wanted = attempt.unwrap_or(record.attempt);
    match record.attempts.iter().find(|a| a.attempt == wanted) {
        Some(a) => a.phase.is_finished() && !a.logs.available,
        None => record.phase.is_finished(),
    }
}

/// Whether a call with an idempotency key may be sent again after `e`.
fn resendable(e: &ClientError) -> bool {
    matches!(e, ClientError::Transport(_)) || e.is_retryable()
}

/// The certificates of a PEM file; refused when there is none.
fn ca_certificates(path: &Path) -> Result<Vec<reqwest::Certificate>, ClientError> {
    let what = || format!("CA certificate {}", path.display());
    let pem = std::fs::read(path).map_err(|e| ClientError::InvalidInput(format!("{}: cannot read it: {e}", what())))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|e| ClientError::InvalidInput(format!("{}: not PEM: {e}", what())))?;
    if certs.is_empty() {
        return Err(ClientError::InvalidInput(format!(
            "{}: no certificate (-----BEGIN CERTIFICATE-----) in it",
            what()
        )));
    }
    Ok(certs)
}

fn secret_header(value: &str, what: &str) -> Result<HeaderValue, ClientError> {
    let mut header = HeaderValue::from_str(value)
        .map_err(|_| ClientError::InvalidInput(format!("{what} contains characters a header cannot carry")))?;
    header.set_sensitive(true);
    Ok(header)
}

async fn read_answer(endpoint: String, response: reqwest::Response) -> Result<RawReply, ClientError> {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.bytes().await?;
    if !(200..300).contains(&status) {
        return Err(ClientError::from_answer(status, &headers, &body));
    }
    Ok(RawReply { endpoint, status, headers, body })
}

#[cfg(test)]
mod tests;
