//! Every refusal the API can give and its one row in the error table
//! (`ApiError::row`): status, `error` string, extra body fields and
//! `retry-after`, as the contract's Errors table states them. The server
//! renders a row in one place for HTTP and MCP alike; the SDK parses the
//! same bodies back.

use std::borrow::Cow;
use std::fmt;

use serde_json::{Map, Value};

/// Body text of the artifact-kind refusal; the contract fixes the whole body.
pub const BAD_ARTIFACT_KIND: &str = "kind must be screenshot|html|body|meta";
/// `reason` of the artifact-not-present refusal.
pub const NO_ARTIFACT_FAMILY: &str = "job has no complete published artifact family for this kind";
/// `detail` of the idempotency-key-reused refusal.
pub const IDEMPOTENCY_KEY_REUSED_DETAIL: &str =
    "Idempotency-Key: already used within 24 h for a different request (body or route); send a new key for a new request";
/// `retry-after` of COMPUTE_UNAVAILABLE: job tracking, the engine, the
/// registry or the job store is expected back within seconds.
pub const COMPUTE_RETRY_AFTER_SECS: u64 = 5;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    InvalidJobRequest {
        detail: Vec<String>,
    },
    InvalidImage {
        detail: String,
    },
    InvalidBatchBody {
        detail: Vec<String>,
    },
    InvalidSessionBody {
        detail: Vec<String>,
    },
    /// A one-call capture's body (POST /screenshot, /pdf, /content).
    InvalidCaptureBody {
        detail: Vec<String>,
    },
    InvalidListQuery {
        detail: Vec<String>,
    },
    InvalidListCursor,
    InvalidLogQuery {
        detail: Vec<String>,
    },
    BadArtifactKind,
    /// A request body that is not JSON at all, on an endpoint without a
    /// contract-named body error.
    InvalidBody {
        detail: Vec<String>,
    },
    /// An `Idempotency-Key` header that is not 1 to 255 printable ASCII
    /// characters, or sent more than once.
    InvalidIdempotencyKey {
        detail: Vec<String>,
    },

    Unauthorized,
    InsufficientCredit {
        required_micros: i64,
        available_micros: i64,
    },
    DailyCapExceeded {
        cap_micros: i64,
        used_micros: i64,
        required_micros: i64,
        resets_at: String,
    },
    Forbidden,
    AccountSuspended,

    UnknownItemOrJob,
    UnknownBatch,
    UnknownSession,
    /// A context id that is not the caller's (none such, deleted, or
    /// another account's): docs/sessions.md, "Contexts".
    UnknownContext,
    ArtifactNotPresent,
    LogsNotAvailable,
    /// A path no route serves (or serves only after a later release).
    RouteNotFound,
    MethodNotAllowed,
    /// A download URL whose signature is wrong or whose 15 minutes are over.
    DownloadLinkInvalid,
    /// A session download's signed URL whose file is gone (removed over the
    /// cap, past the session's grace) or is not a file the grid serves.
    SessionDownloadNotPresent,
    /// The caller's session was leased without `recording`, or its
    /// recording is gone (past the grace).
    RecordingNotPresent,

    OnlyFailedCanBeRetried,
    PublishedFailureImmutable,
    ProfileNotSelectable,
    JobNotRetryable,
    JobStateConflict,
    IdempotencyConflict,
    SessionLimitReached {
        max_sessions: u32,
    },
    /// A recording asked for before its page is written: the session is
    /// still live, or has just ended (docs/sessions.md, Recordings).
    RecordingNotReady {
        detail: String,
    },
    /// A lease or a delete of a context that a live session holds (one live
    /// session per context): names the session.
    ContextInUse {
        session_id: String,
    },
    /// A lease of a context whose saved state cannot be opened (unsealed
    /// and read): refused before anything is charged, the reason in
    /// `detail`, rather than a session that starts and is lost.
    ContextUnreadable {
        detail: String,
    },

    CapabilityNotAvailable {
        capability: String,
    },
    /// An `Idempotency-Key` already used (within 24 h, in the account) for a
    /// request with another body or route.
    IdempotencyKeyReused,

    NotImplemented {
        what: String,
    },
    AccountingUnavailable,
    /// Too many requests with this credential (docs/limits.md): 429 with
    /// `retry-after`.
    RateLimited {
        retry_after_secs: u64,
    },
    /// A request body over its endpoint's bound (docs/limits.md).
    BodyTooLarge {
        limit_bytes: u64,
    },
    /// A request body not sent in full within its time (docs/limits.md).
    BodyTooSlow {
        limit_secs: u64,
    },
    ComputeUnavailable {
        retry_after_secs: u64,
    },
    SessionsDisabled,
    /// A one-call capture's page could not be taken: the grid refused its
    /// destination or a parameter the page itself refused (422), or the
    /// target failed, timed out or its browser broke (502). `job_id` is its
    /// item, whose failure record says the same.
    CaptureRefused {
        reason: String,
        job_id: String,
    },
    CaptureFailed {
        reason: String,
        job_id: String,
    },
    /// An MCP browser tool the page, the session's CDP gate or the browser
    /// refused (a ref that is gone, a navigation that failed, a text that
    /// did not appear in time): `reason` says why. A tool's answer only,
    /// inside an MCP result (and between nodes); no published route gives it.
    BrowserToolFailed {
        reason: String,
    },
    /// Something failed inside the server; the body says no more than that.
    Internal,
}

/// One row of the error table: everything the API answers for a refusal.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorRow {
    pub status: u16,
    /// The body's `error` string.
    pub error: Cow<'static, str>,
    /// Body fields besides `error`, named as the contract names them, in order.
    pub extra: Vec<(&'static str, Value)>,
    /// The `retry-after` header in seconds, where the contract sets one.
    pub retry_after_secs: Option<u64>,
}

/// A row with no extra fields yet.
fn row(status: u16, error: impl Into<Cow<'static, str>>) -> ErrorRow {
    ErrorRow { status, error: error.into(), extra: vec![], retry_after_secs: None }
}

impl ErrorRow {
    fn with(mut self, field: &'static str, value: impl Into<Value>) -> ErrorRow {
        self.extra.push((field, value.into()));
        self
    }

    fn retry_after(mut self, secs: u64) -> ErrorRow {
        self.retry_after_secs = Some(secs);
        self
    }

    /// The JSON body: `{"error": ...}` and then the extra fields.
    pub fn body(&self) -> Value {
        let mut body = Map::new();
        body.insert("error".into(), Value::String(self.error.to_string()));
        for (field, value) in &self.extra {
            body.insert((*field).into(), value.clone());
        }
        Value::Object(body)
    }
}

impl ApiError {
    /// The error table, one row per refusal: status, `error` string, extra
    /// body fields and `retry-after`. HTTP (`respond::error` in the server)
    /// and MCP tool results both render from it; the SDK parses the same
    /// bodies back.
    pub fn row(&self) -> ErrorRow {
        use ApiError::*;
        match self {
            InvalidJobRequest { detail } => row(400, "INVALID_JOB_REQUEST").with("detail", detail.clone()),
            InvalidImage { detail } => row(400, "INVALID_IMAGE").with("detail", detail.clone()),
            InvalidBatchBody { detail } => row(400, "invalid batch body").with("detail", detail.clone()),
            InvalidSessionBody { detail } => row(400, "invalid session body").with("detail", detail.clone()),
            InvalidCaptureBody { detail } => row(400, "invalid capture body").with("detail", detail.clone()),
            InvalidListQuery { detail } => row(400, "INVALID_LIST_QUERY").with("detail", detail.clone()),
            InvalidListCursor => row(400, "INVALID_LIST_CURSOR"),
            InvalidLogQuery { detail } => row(400, "INVALID_LOG_QUERY").with("detail", detail.clone()),
            BadArtifactKind => row(400, BAD_ARTIFACT_KIND),
            InvalidBody { detail } => row(400, "invalid body").with("detail", detail.clone()),
            InvalidIdempotencyKey { detail } => row(400, "invalid idempotency key").with("detail", detail.clone()),
            Unauthorized => row(401, "unauthorized"),
            InsufficientCredit { required_micros, available_micros } => row(402, "insufficient_credit")
                .with("requiredMicros", *required_micros)
                .with("availableMicros", *available_micros),
            DailyCapExceeded { cap_micros, used_micros, required_micros, resets_at } => row(402, "daily_cap_exceeded")
                .with("capMicros", *cap_micros)
                .with("usedMicros", *used_micros)
                .with("requiredMicros", *required_micros)
                .with("resetsAt", resets_at.clone()),
            Forbidden => row(403, "forbidden"),
            AccountSuspended => row(403, "account_suspended"),
            UnknownItemOrJob => row(404, "unknown job"),
            UnknownBatch => row(404, "unknown batch"),
            UnknownSession => row(404, "unknown session"),
            UnknownContext => row(404, "unknown context"),
            ArtifactNotPresent => row(404, "artifact not present").with("reason", NO_ARTIFACT_FAMILY),
            LogsNotAvailable => row(404, "LOGS_NOT_AVAILABLE"),
            RouteNotFound => row(404, "not found"),
            DownloadLinkInvalid => row(404, "download link invalid or expired"),
            SessionDownloadNotPresent => row(404, "download not present"),
            RecordingNotPresent => row(404, "recording not present"),
            MethodNotAllowed => row(405, "method not allowed"),
            OnlyFailedCanBeRetried => row(409, "only failed jobs can be retried"),
            PublishedFailureImmutable => row(409, "published terminal failures are immutable and cannot be retried"),
            ProfileNotSelectable => row(409, "job browser profile is no longer selectable"),
            JobNotRetryable => row(409, "JOB_NOT_RETRYABLE"),
            JobStateConflict => row(409, "JOB_STATE_CONFLICT"),
            IdempotencyConflict => row(409, "IDEMPOTENCY_CONFLICT"),
            SessionLimitReached { max_sessions } => {
                row(409, format!("session limit reached: all {max_sessions} session slots are taken"))
            }
            RecordingNotReady { detail } => row(409, "recording not ready").with("detail", detail.clone()),
            ContextInUse { session_id } => row(409, "context in use").with("sessionId", session_id.clone()),
            ContextUnreadable { detail } => row(409, "context cannot be opened").with("detail", detail.clone()),
            CapabilityNotAvailable { capability } => {
                row(422, "CAPABILITY_NOT_AVAILABLE").with("capability", capability.clone())
            }
            IdempotencyKeyReused => {
                row(422, "idempotency key reused").with("detail", vec![IDEMPOTENCY_KEY_REUSED_DETAIL])
            }
            BodyTooSlow { limit_secs } => row(408, "body too slow").with("limitSecs", *limit_secs),
            BodyTooLarge { limit_bytes } => row(413, "body too large").with("limitBytes", *limit_bytes),
            RateLimited { retry_after_secs } => row(429, "rate_limited").retry_after(*retry_after_secs),
            Internal => row(500, "internal error"),
            NotImplemented { what } => row(501, "not implemented").with("detail", what.clone()),
            // The contract sets no retry-after here; a second is what a
            // timed-out credential check is worth waiting before a resend.
            AccountingUnavailable => row(503, "accounting_unavailable").retry_after(1),
            ComputeUnavailable { retry_after_secs } => row(503, "COMPUTE_UNAVAILABLE").retry_after(*retry_after_secs),
            SessionsDisabled => row(503, "sessions disabled"),
            CaptureRefused { reason, job_id } => {
                row(422, "capture refused").with("reason", reason.clone()).with("jobId", job_id.clone())
            }
            CaptureFailed { reason, job_id } => {
                row(502, "capture failed").with("reason", reason.clone()).with("jobId", job_id.clone())
            }
            BrowserToolFailed { reason } => row(422, "browser tool failed").with("reason", reason.clone()),
        }
    }

    pub fn status(&self) -> u16 {
        self.row().status
    }

    pub fn retry_after_secs(&self) -> Option<u64> {
        self.row().retry_after_secs
    }

    pub fn body(&self) -> Value {
        self.row().body()
    }

    /// 503 COMPUTE_UNAVAILABLE with the grid's `retry-after`.
    pub fn compute_unavailable() -> ApiError {
        ApiError::ComputeUnavailable { retry_after_secs: COMPUTE_RETRY_AFTER_SECS }
    }
}

/// The `error` string.
impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.row().error)
    }
}

impl std::error::Error for ApiError {}

/// One value of every variant (the error table's unit tests; the OpenAPI
/// document names each row's body after its variant).
pub(crate) fn every_variant() -> Vec<ApiError> {
    use ApiError::*;
    let d = || vec!["field: problem".to_string()];
    vec![
        InvalidJobRequest { detail: d() },
        InvalidImage { detail: "image: absent".into() },
        InvalidBatchBody { detail: d() },
        InvalidSessionBody { detail: d() },
        InvalidListQuery { detail: d() },
        InvalidListCursor,
        InvalidLogQuery { detail: d() },
        BadArtifactKind,
        InvalidBody { detail: d() },
        InvalidIdempotencyKey { detail: d() },
        Unauthorized,
        InsufficientCredit { required_micros: 2, available_micros: 1 },
        DailyCapExceeded { cap_micros: 3, used_micros: 2, required_micros: 2, resets_at: "t".into() },
        Forbidden,
        AccountSuspended,
        UnknownItemOrJob,
        UnknownBatch,
        UnknownSession,
        ArtifactNotPresent,
        LogsNotAvailable,
        RouteNotFound,
        MethodNotAllowed,
        DownloadLinkInvalid,
        SessionDownloadNotPresent,
        RecordingNotPresent,
        OnlyFailedCanBeRetried,
        PublishedFailureImmutable,
        ProfileNotSelectable,
        JobNotRetryable,
        JobStateConflict,
        IdempotencyConflict,
        SessionLimitReached { max_sessions: 4 },
        RecordingNotReady { detail: "the session is live".into() },
        CapabilityNotAvailable { capability: "x".into() },
        IdempotencyKeyReused,
        NotImplemented { what: "x".into() },
        AccountingUnavailable,
        RateLimited { retry_after_secs: 2 },
        BodyTooLarge { limit_bytes: 8 },
        BodyTooSlow { limit_secs: 60 },
        ComputeUnavailable { retry_after_secs: COMPUTE_RETRY_AFTER_SECS },
        SessionsDisabled,
        UnknownContext,
        ContextInUse { session_id: "ses_x".into() },
        ContextUnreadable { detail: "the context's state does not read".into() },
        InvalidCaptureBody { detail: d() },
        CaptureRefused { reason: "destination refused".into(), job_id: "job_x".into() },
        CaptureFailed { reason: "timeout".into(), job_id: "job_x".into() },
        BrowserToolFailed { reason: "ref e9 is gone: take a new snapshot".into() },
        Internal,
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The contract's Errors table (grid-interface.md), row by row: status,
    /// `error` string (a trailing `...` is a prefix) and the extra body
    /// fields it states. The 405/406 rows are MCP transport answers in
    /// JSON-RPC form, not `ApiError`s (`http/mcp.rs`).
    const CONTRACT: &[(u16, &str, &[&str])] = &[
        (400, "INVALID_JOB_REQUEST", &[]),
        (400, "INVALID_IMAGE", &[]),
        (400, "invalid batch body", &["detail"]),
        (400, "invalid session body", &["detail"]),
        (400, "INVALID_LIST_QUERY", &[]),
        (400, "INVALID_LIST_CURSOR", &[]),
        (400, "INVALID_LOG_QUERY", &[]),
        (400, "kind must be screenshot|html|body|meta", &[]),
        (401, "unauthorized", &[]),
        (402, "insufficient_credit", &["requiredMicros", "availableMicros"]),
        (402, "daily_cap_exceeded", &[]),
        (403, "forbidden", &[]),
        (403, "account_suspended", &[]),
        (404, "unknown job", &[]),
        (404, "unknown batch", &[]),
        (404, "unknown session", &[]),
        (404, "artifact not present", &["reason"]),
        (404, "LOGS_NOT_AVAILABLE", &[]),
        (409, "only failed jobs can be retried", &[]),
        (409, "published terminal failures are immutable and cannot be retried", &[]),
        (409, "job browser profile is no longer selectable", &[]),
        (409, "JOB_NOT_RETRYABLE", &[]),
        (409, "JOB_STATE_CONFLICT", &[]),
        (409, "IDEMPOTENCY_CONFLICT", &[]),
        (409, "session limit reached: ...", &[]),
        (422, "CAPABILITY_NOT_AVAILABLE", &["capability"]),
        (503, "accounting_unavailable", &[]),
        (503, "COMPUTE_UNAVAILABLE", &[]),
        (503, "sessions disabled", &[]),
    ];

    fn matches_contract(row: &ErrorRow, error: &str) -> bool {
        match error.strip_suffix("...") {
            Some(prefix) => row.error.starts_with(prefix),
            None => row.error == error,
        }
    }

    #[test]
    fn every_contract_error_is_one_row_with_its_status_string_and_fields() {
        let rows: Vec<ErrorRow> = every_variant().iter().map(ApiError::row).collect();
        for (status, error, fields) in CONTRACT {
            let found: Vec<&ErrorRow> = rows.iter().filter(|r| matches_contract(r, error)).collect();
            assert_eq!(found.len(), 1, "contract error {error:?}: rows {found:?}");
            let row = found[0];
            assert_eq!(row.status, *status, "{error}");
            let body = row.body();
            assert_eq!(body["error"], *row.error, "{error}");
            for field in *fields {
                assert!(body.get(*field).is_some(), "{error}: body {body} lacks {field}");
            }
        }
        // What the contract names beside the table: COMPUTE_UNAVAILABLE sets
        // retry-after; nothing else but accounting_unavailable does.
        for row in &rows {
            let expected = match &*row.error {
                "COMPUTE_UNAVAILABLE" => Some(COMPUTE_RETRY_AFTER_SECS),
                "accounting_unavailable" => Some(1),
                "rate_limited" => Some(2),
                _ => None,
            };
            assert_eq!(row.retry_after_secs, expected, "{}", row.error);
        }
        // The rows the contract does not list are ours (docs/), and none of
        // them reuses a contract string.
        let ours: Vec<&str> = rows
            .iter()
            .filter(|r| !CONTRACT.iter().any(|(_, e, _)| matches_contract(r, e)))
            .map(|r| &*r.error)
            .collect();
        assert_eq!(
            ours,
            [
                "invalid body",
                "invalid idempotency key",
                "not found",
                "method not allowed",
                "download link invalid or expired",
                "download not present",
                "recording not present",
                "recording not ready",
                "idempotency key reused",
                "not implemented",
                "rate_limited",
                "body too large",
                "body too slow",
                "unknown context",
                "context in use",
                "context cannot be opened",
                "invalid capture body",
                "capture refused",
                "capture failed",
                "browser tool failed",
                "internal error"
            ]
        );
    }

    /// The list above is the contract's: read the contract itself where the
    /// workspace has it beside it (`../shared/spec`, as ARCHITECTURE.md says).
    #[test]
    fn the_listed_rows_are_the_contracts_errors_table() {
        let spec = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/spec/grid-interface.md");
        let Ok(text) = std::fs::read_to_string(&spec) else {
            eprintln!("{} not present; the listed rows stand for it", spec.display());
            return;
        };
        let table = &text[text.find("\n## Errors").expect("## Errors")..];
        let mut from_spec = vec![];
        for line in table.lines().skip_while(|l| !l.starts_with("| Status")).skip(2) {
            if !line.starts_with('|') {
                break;
            }
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            let (status, error) = (cells[0].parse::<u16>().expect("status"), cells[1].replace("\\|", "|"));
            if !error.starts_with("(JSON-RPC") {
                from_spec.push((status, error));
            }
        }
        let listed: Vec<(u16, String)> = CONTRACT.iter().map(|(s, e, _)| (*s, e.to_string())).collect();
        assert_eq!(from_spec, listed);
    }

    #[test]
    fn artifact_kind_body_is_exact() {
        assert_eq!(ApiError::BadArtifactKind.body(), json!({"error": "kind must be screenshot|html|body|meta"}));
        assert_eq!(ApiError::BadArtifactKind.status(), 400);
    }

    #[test]
    fn insufficient_credit_carries_amounts() {
        let e = ApiError::InsufficientCredit { required_micros: 1200, available_micros: 5 };
        assert_eq!(e.status(), 402);
        assert_eq!(e.body(), json!({"error": "insufficient_credit", "requiredMicros": 1200, "availableMicros": 5}));
    }

    #[test]
    fn artifact_not_present_has_reason() {
        let b = ApiError::ArtifactNotPresent.body();
        assert_eq!(b["error"], "artifact not present");
        assert_eq!(b["reason"], NO_ARTIFACT_FAMILY);
    }

    #[test]
    fn session_limit_message_starts_as_contract_says() {
        let e = ApiError::SessionLimitReached { max_sessions: 4 };
        assert!(e.body()["error"].as_str().unwrap().starts_with("session limit reached: "));
        assert_eq!(e.status(), 409);
    }

    #[test]
    fn idempotency_key_reused_is_422_naming_the_header() {
        let e = ApiError::IdempotencyKeyReused;
        assert_eq!(e.status(), 422);
        assert_eq!(e.body(), json!({"error": "idempotency key reused", "detail": [IDEMPOTENCY_KEY_REUSED_DETAIL]}));
        assert!(IDEMPOTENCY_KEY_REUSED_DETAIL.starts_with("Idempotency-Key: "));
    }

    #[test]
    fn compute_unavailable_sets_retry_after() {
        let e = ApiError::ComputeUnavailable { retry_after_secs: 5 };
        assert_eq!((e.status(), e.retry_after_secs()), (503, Some(5)));
    }

    #[test]
    fn retry_conflict_messages_are_exact() {
        assert_eq!(ApiError::OnlyFailedCanBeRetried.body()["error"], "only failed jobs can be retried");
        assert_eq!(
            ApiError::PublishedFailureImmutable.body()["error"],
            "published terminal failures are immutable and cannot be retried"
        );
        assert_eq!(ApiError::ProfileNotSelectable.body()["error"], "job browser profile is no longer selectable");
    }
}
