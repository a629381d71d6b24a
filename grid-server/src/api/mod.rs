//! Every call of the grid API, independent of how it arrived: the HTTP
//! router and the MCP tools both turn requests into a `Call`, and `perform`
//! is the one place that runs it, answering a transport-neutral `Reply`. So a tool is billed and refused exactly as
//! its HTTP call is.

mod account;
pub mod captures;
pub mod contexts;
pub mod jobs;
pub mod meta;
pub mod sessions;

use std::sync::Arc;

use grid_core::error::ApiError;
use grid_core::ids::{job_id_kind, JobIdKind};
use serde_json::Value;

use crate::app::App;
use crate::store::accounts::Caller;

pub type Query = Vec<(String, String)>;

/// What a call answers, whatever carried it: `http` renders it as a
/// response (`respond::reply`), MCP as a tool result. No transport type
/// appears here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub body: ReplyBody,
    /// Extra headers of the HTTP answer (lower-case names): facts about the
    /// answer that are not part of its body.
    pub headers: Vec<(&'static str, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyBody {
    /// Serialized JSON.
    Json(Vec<u8>),
    /// UTF-8 text (a job's log).
    Text(Vec<u8>),
    /// No body (204).
    Empty,
    /// A file of its own type (a one-call capture's screenshot, PDF or HTML).
    File { content_type: String, bytes: Vec<u8> },
}

impl Reply {
    pub fn json<T: serde::Serialize>(status: u16, value: &T) -> Reply {
        // Most answers fit: growing from empty reallocated a record's body
        // four or five times (measured in docs/limits.md).
        let mut body = Vec::with_capacity(4096);
        if serde_json::to_writer(&mut body, value).is_err() {
            body = b"{}".to_vec();
        }
        Reply { status, body: ReplyBody::Json(body), headers: vec![] }
    }

    /// A submission's answer; a replay of a stored `Idempotency-Key` answer
    /// also says so (the status and body are the first answer's, byte for
    /// byte).
    pub fn answer(answer: crate::store::idempotency::Answer, replayed: bool) -> Reply {
        let r = Reply { status: answer.status, body: ReplyBody::Json(answer.body), headers: vec![] };
        if replayed {
            r.header(grid_core::idempotency::REPLAYED_HEADER, "true")
        } else {
            r
        }
    }

    pub fn text(body: Vec<u8>) -> Reply {
        Reply { status: 200, body: ReplyBody::Text(body), headers: vec![] }
    }

    pub fn no_content() -> Reply {
        Reply { status: 204, body: ReplyBody::Empty, headers: vec![] }
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }

    /// The value of one of the answer's extra headers (`name` lower case).
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    /// The body's bytes (empty for no content).
    pub fn bytes(&self) -> &[u8] {
        match &self.body {
            ReplyBody::Json(b) | ReplyBody::Text(b) => b,
            ReplyBody::File { bytes, .. } => bytes,
            ReplyBody::Empty => &[],
        }
    }
}

#[derive(Debug, Clone)]
pub enum Call {
    /// GET /account: the caller's own balance and ledger.
    Account(Query),
    GridStatus,
    QueueDepth,
    /// POST /batches, with its `Idempotency-Key` header if one was sent.
    SubmitBatch {
        body: Value,
        idempotency_key: Option<String>,
    },
    /// GET /batches: the caller's recent batches.
    ListBatches(Query),
    Batch(String),
    /// GET /jobs/{id}: a capture item or an analytical job.
    GetJob(String),
    /// POST /jobs/{id}/retry: a capture item or an analytical job.
    Retry(String),
    ArtifactUrl {
        item: String,
        kind: String,
    },
    SubmitJob(Value),
    ListJobs(Query),
    Cancel(String),
    JobArtifacts(String),
    JobLogs {
        id: String,
        query: Query,
    },
    /// POST /screenshot, /pdf or /content.
    #[allow(clippy::enum_variant_names)] // the one-call captures' own name (docs/one-call.md)
    OneCall {
        call: grid_core::validate::one_call::OneCall,
        body: Value,
    },
    /// POST /sessions, with its `Idempotency-Key` header if one was sent.
    LeaseSession {
        body: Value,
        idempotency_key: Option<String>,
    },
    ListSessions,
    ReleaseSession(String),
    /// GET /sessions/{sessionId}/downloads.
    SessionDownloads(String),
    /// GET /sessions/{sessionId}/recording.
    SessionRecording(String),
    CreateContext,
    ListContexts,
    DeleteContext(String),
}

impl Call {
    /// Whether the call takes a reservation (and so is refused for a
    /// suspended internal credential).
    pub fn is_billable(&self) -> bool {
        match self {
            Call::SubmitBatch { .. } | Call::SubmitJob(_) | Call::LeaseSession { .. } | Call::OneCall { .. } => true,
            Call::Retry(id) => is_compute(id),
            _ => false,
        }
    }
}

pub fn is_compute(id: &str) -> bool {
    job_id_kind(id) == JobIdKind::ComputeJob
}

pub async fn perform(app: &Arc<App>, caller: &Caller, call: Call) -> Result<Reply, ApiError> {
    if caller.suspended_internal && call.is_billable() {
        return Err(ApiError::AccountSuspended);
    }
    match call {
        Call::Account(query) => account::statement(app, caller, &query).await,
        Call::GridStatus => meta::grid_status(app).await,
        Call::QueueDepth => meta::queue_depth(app).await,
        Call::SubmitBatch { body, idempotency_key } => captures::submit_batch(app, caller, body, idempotency_key).await,
        Call::ListBatches(query) => captures::list_batches(app, caller, &query).await,
        Call::Batch(id) => captures::batch(app, caller, &id).await,
        Call::OneCall { call, body } => captures::one_call(app, caller, call, body).await,
        Call::GetJob(id) if is_compute(&id) => jobs::get(app, caller, &id).await,
        Call::GetJob(id) => captures::item(app, caller, &id).await,
        Call::Retry(id) if is_compute(&id) => jobs::retry(app, caller, &id).await,
        Call::Retry(id) => captures::retry(app, caller, &id).await,
        Call::ArtifactUrl { item, kind } => captures::artifact_url(app, caller, &item, &kind).await,
        Call::SubmitJob(body) => jobs::submit(app, caller, body).await,
        Call::ListJobs(query) => jobs::list(app, caller, &query).await,
        // Capture items cannot be cancelled and have no job artifacts or logs.
        Call::Cancel(id) if is_compute(&id) => jobs::cancel(app, caller, &id).await,
        Call::JobArtifacts(id) if is_compute(&id) => jobs::artifacts(app, caller, &id).await,
        Call::JobLogs { id, query } if is_compute(&id) => jobs::logs(app, caller, &id, &query).await,
        Call::Cancel(_) | Call::JobArtifacts(_) | Call::JobLogs { .. } => Err(ApiError::UnknownItemOrJob),
        Call::LeaseSession { body, idempotency_key } => sessions::lease(app, caller, body, idempotency_key).await,
        Call::ListSessions => sessions::list(app, caller).await,
        Call::ReleaseSession(id) => sessions::release(app, caller, &id).await,
        Call::SessionDownloads(id) => sessions::downloads(app, caller, &id).await,
        Call::SessionRecording(id) => sessions::recording(app, caller, &id).await,
        Call::CreateContext => contexts::create(app, caller).await,
        Call::ListContexts => contexts::list(app, caller).await,
        Call::DeleteContext(id) => contexts::delete(app, caller, &id).await,
    }
}
