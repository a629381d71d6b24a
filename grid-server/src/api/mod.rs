//! Every call of the grid API, independent of how it arrived: the HTTP
//! router and the MCP tools both turn requests into a `Call`, and `perform`
//! is the one place that runs it, answering a transport-neutral `Reply`. So a tool is billed and refused exactly as
//! its HTTP call is.

mod account;
pub mod browser_tools;
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
/// response (`respond::reply`: the body, and the facts beside it as
/// headers), MCP as a tool result (its content and `structuredContent`).
/// No transport type appears here: every fact a transport renders is a
/// typed field.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub body: ReplyBody,
    /// A replay of the answer stored under the request's `Idempotency-Key`
    /// (the status and body are the first answer's, byte for byte).
    pub replayed: bool,
    /// Job tracking has not caught up with the engine since start: a job's
    /// phase may lag what its container did.
    pub compute_degraded: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ReplyBody {
    /// Serialized JSON.
    Json(Vec<u8>),
    /// An ended attempt's log (GET /jobs/{id}/logs).
    Log(JobLog),
    /// No body (204).
    Empty,
    /// A one-call capture's file (its screenshot, PDF or HTML) and the item
    /// that made it.
    File(CapturedFile),
    /// What a browser tool answered on a session's browser.
    BrowserTool(ToolAnswer),
}

/// A job attempt's log: UTF-8 text, up to the log bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLog {
    pub text: Vec<u8>,
    pub attempt: u32,
    pub artifact_id: String,
    /// The attempt wrote more than the log keeps.
    pub truncated: bool,
}

/// A one-call capture's file, of its own type, and its item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedFile {
    pub content_type: String,
    pub bytes: Vec<u8>,
    pub job_id: String,
    pub batch_id: String,
    pub charged_micros: i64,
    /// The page's HTTP status, when it had one.
    pub target_status: Option<u64>,
}

/// A browser tool's answer and the session it ran on.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolAnswer {
    pub session_id: String,
    pub answer: grid_core::browser_tools::Answer,
}

impl Reply {
    fn of(status: u16, body: ReplyBody) -> Reply {
        Reply { status, body, replayed: false, compute_degraded: false }
    }

    pub fn json<T: serde::Serialize>(status: u16, value: &T) -> Reply {
        // Most answers fit: growing from empty reallocated a record's body
        // four or five times (measured in docs/limits.md).
        let mut body = Vec::with_capacity(4096);
        if serde_json::to_writer(&mut body, value).is_err() {
            body = b"{}".to_vec();
        }
        Reply::of(status, ReplyBody::Json(body))
    }

    /// A submission's answer; a replay of a stored `Idempotency-Key` answer
    /// also says so.
    pub fn answer(answer: crate::store::idempotency::Answer, replayed: bool) -> Reply {
        Reply { replayed, ..Reply::of(answer.status, ReplyBody::Json(answer.body)) }
    }

    pub fn log(log: JobLog) -> Reply {
        Reply::of(200, ReplyBody::Log(log))
    }

    pub fn file(file: CapturedFile) -> Reply {
        Reply::of(200, ReplyBody::File(file))
    }

    pub fn browser_tool(answer: ToolAnswer) -> Reply {
        Reply::of(200, ReplyBody::BrowserTool(answer))
    }

    pub fn no_content() -> Reply {
        Reply::of(204, ReplyBody::Empty)
    }

    /// The body's bytes: JSON, a log's text or a file (empty for no
    /// content and for a browser tool's answer, which is typed).
    pub fn bytes(&self) -> &[u8] {
        match &self.body {
            ReplyBody::Json(b) => b,
            ReplyBody::Log(log) => &log.text,
            ReplyBody::File(file) => &file.bytes,
            ReplyBody::Empty | ReplyBody::BrowserTool(_) => &[],
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
    /// An MCP browser tool (`browser_navigate`, ...) on one of the caller's
    /// live sessions, its arguments as sent (the session's id among them).
    BrowserTool {
        tool: String,
        arguments: serde_json::Map<String, Value>,
    },
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
        Call::BrowserTool { tool, arguments } => browser_tools::run(app, caller, &tool, &arguments).await,
    }
}
