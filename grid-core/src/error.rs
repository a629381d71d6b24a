//! Every refusal the API can give, with its one mapping to an HTTP status and
//! a JSON body. The server turns an `ApiError` into a response in exactly one
//! place; the SDK parses the same bodies back.

use serde_json::{json, Map, Value};

/// Body text of the artifact-kind refusal; the contract fixes the whole body.
pub const BAD_ARTIFACT_KIND: &str = "kind must be screenshot|html|body|meta";
/// `reason` of the artifact-not-present refusal.
pub const NO_ARTIFACT_FAMILY: &str = "job has no complete published artifact family for this kind";
/// `detail` of the idempotency-key-reused refusal.
pub const IDEMPOTENCY_KEY_REUSED_DETAIL: &str =
    "Idempotency-Key: already used within 24 h for a different request (body or route); send a new key for a new request";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("INVALID_JOB_REQUEST")]
    InvalidJobRequest { detail: Vec<String> },
    #[error("INVALID_IMAGE")]
    InvalidImage { detail: String },
    #[error("invalid batch body")]
    InvalidBatchBody { detail: Vec<String> },
    #[error("invalid session body")]
    InvalidSessionBody { detail: Vec<String> },
    #[error("INVALID_LIST_QUERY")]
    InvalidListQuery { detail: Vec<String> },
    #[error("INVALID_LIST_CURSOR")]
    InvalidListCursor,
    #[error("INVALID_LOG_QUERY")]
    InvalidLogQuery { detail: Vec<String> },
    #[error("{}", BAD_ARTIFACT_KIND)]
    BadArtifactKind,
    /// A request body that is not JSON at all, on an endpoint without a
    /// contract-named body error.
    #[error("invalid body")]
    InvalidBody { detail: Vec<String> },
    /// An `Idempotency-Key` header that is not 1 to 255 printable ASCII
    /// characters, or sent more than once.
    #[error("invalid idempotency key")]
    InvalidIdempotencyKey { detail: Vec<String> },

    #[error("unauthorized")]
    Unauthorized,
    #[error("insufficient_credit")]
    InsufficientCredit { required_micros: i64, available_micros: i64 },
    #[error("daily_cap_exceeded")]
    DailyCapExceeded { cap_micros: i64, used_micros: i64, required_micros: i64, resets_at: String },
    #[error("forbidden")]
    Forbidden,
    #[error("account_suspended")]
    AccountSuspended,

    #[error("unknown job")]
    UnknownJob,
    #[error("unknown batch")]
    UnknownBatch,
    #[error("unknown session")]
    UnknownSession,
    #[error("artifact not present")]
    ArtifactNotPresent,
    #[error("LOGS_NOT_AVAILABLE")]
    LogsNotAvailable,
    /// A path no route serves (or serves only after a later release).
    #[error("not found")]
    RouteNotFound,
    #[error("method not allowed")]
    MethodNotAllowed,
    /// A download URL whose signature is wrong or whose 15 minutes are over.
    #[error("download link invalid or expired")]
    DownloadLinkInvalid,

    #[error("only failed jobs can be retried")]
    OnlyFailedCanBeRetried,
    #[error("published terminal failures are immutable and cannot be retried")]
    PublishedFailureImmutable,
    #[error("job browser profile is no longer selectable")]
    ProfileNotSelectable,
    #[error("JOB_NOT_RETRYABLE")]
    JobNotRetryable,
    #[error("JOB_STATE_CONFLICT")]
    JobStateConflict,
    #[error("IDEMPOTENCY_CONFLICT")]
    IdempotencyConflict,
    #[error("session limit reached: all {max_sessions} session slots are taken")]
    SessionLimitReached { max_sessions: u32 },

    #[error("CAPABILITY_NOT_AVAILABLE")]
    CapabilityNotAvailable { capability: String },
    /// An `Idempotency-Key` already used (within 24 h, in the account) for a
    /// request with another body or route.
    #[error("idempotency key reused")]
    IdempotencyKeyReused,

    #[error("not implemented")]
    NotImplemented { what: String },
    #[error("accounting_unavailable")]
    AccountingUnavailable,
    #[error("COMPUTE_UNAVAILABLE")]
    ComputeUnavailable { retry_after_secs: u64 },
    #[error("sessions disabled")]
    SessionsDisabled,
    /// Something failed inside the server; the body says no more than that.
    #[error("internal error")]
    Internal,
}

impl ApiError {
    pub fn status(&self) -> u16 {
        use ApiError::*;
        match self {
            InvalidJobRequest { .. }
            | InvalidImage { .. }
            | InvalidBatchBody { .. }
            | InvalidSessionBody { .. }
            | InvalidListQuery { .. }
            | InvalidListCursor
            | InvalidLogQuery { .. }
            | BadArtifactKind
            | InvalidBody { .. }
            | InvalidIdempotencyKey { .. } => 400,
            Unauthorized => 401,
            InsufficientCredit { .. } | DailyCapExceeded { .. } => 402,
            Forbidden | AccountSuspended => 403,
            UnknownJob | UnknownBatch | UnknownSession | ArtifactNotPresent | LogsNotAvailable | RouteNotFound
            | DownloadLinkInvalid => 404,
            MethodNotAllowed => 405,
            OnlyFailedCanBeRetried
            | PublishedFailureImmutable
            | ProfileNotSelectable
            | JobNotRetryable
            | JobStateConflict
            | IdempotencyConflict
            | SessionLimitReached { .. } => 409,
            CapabilityNotAvailable { .. } | IdempotencyKeyReused => 422,
            NotImplemented { .. } => 501,
            AccountingUnavailable | ComputeUnavailable { .. } | SessionsDisabled => 503,
            Internal => 500,
        }
    }

    /// The `retry-after` header value in seconds, where the contract sets one.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            ApiError::ComputeUnavailable { retry_after_secs } => Some(*retry_after_secs),
            ApiError::AccountingUnavailable => Some(1),
            _ => None,
        }
    }

    /// The JSON body: `{"error": ...}` plus the extra fields the contract states.
    pub fn body(&self) -> Value {
        use ApiError::*;
        let mut body = Map::new();
        body.insert("error".into(), json!(self.to_string()));
        let mut put = |k: &str, v: Value| {
            body.insert(k.into(), v);
        };
        match self {
            InvalidJobRequest { detail }
            | InvalidBatchBody { detail }
            | InvalidSessionBody { detail }
            | InvalidListQuery { detail }
            | InvalidLogQuery { detail }
            | InvalidBody { detail }
            | InvalidIdempotencyKey { detail } => put("detail", json!(detail)),
            InvalidImage { detail } => put("detail", json!(detail)),
            InsufficientCredit { required_micros, available_micros } => {
                put("requiredMicros", json!(required_micros));
                put("availableMicros", json!(available_micros));
            }
            DailyCapExceeded { cap_micros, used_micros, required_micros, resets_at } => {
                put("capMicros", json!(cap_micros));
                put("usedMicros", json!(used_micros));
                put("requiredMicros", json!(required_micros));
                put("resetsAt", json!(resets_at));
            }
            ArtifactNotPresent => put("reason", json!(NO_ARTIFACT_FAMILY)),
            CapabilityNotAvailable { capability } => put("capability", json!(capability)),
            NotImplemented { what } => put("detail", json!(what)),
            IdempotencyKeyReused => put("detail", json!([IDEMPOTENCY_KEY_REUSED_DETAIL])),
            _ => {}
        }
        Value::Object(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
