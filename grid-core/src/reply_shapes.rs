//! The JSON Schema of each successful answer of the API (the `wire` types
//! as they serialize): the MCP tools publish them as their `outputSchema`,
//! and their `structuredContent` is the call's JSON, so an MCP client can
//! check what it got. `grid-core/tests/reply_shapes.rs` serializes each wire
//! type with every field set and holds it to its schema: no field missing
//! from a schema, none in a schema that the type does not write.
//!
//! Every field a type always writes is `required`. The objects stay open
//! (no `additionalProperties: false`), so a client holding an older copy of
//! a schema still accepts an answer with a field added later.

use serde_json::{json, Map, Value};

use crate::catalog::{ArtifactKind, Profile, Script};
use crate::item::ItemState;
use crate::ledger::EntryKind;
use crate::wire::grid::SCOPES_SUPPORTED;
use crate::wire::job::JobPhase;

/// The answers' shapes that have a name: each whole answer, and the parts
/// that recur in several answers or stand for one thing a client holds
/// (a ledger entry, an attempt, an attestation). The OpenAPI document
/// publishes them as `components.schemas` and refers to them wherever the
/// same schema appears (a nullable part as `anyOf` of it and null); names
/// are what a generated client calls its types.
pub fn named() -> Vec<(&'static str, Value)> {
    vec![
        ("GridStatus", grid_status()),
        ("QueueCounts", queue_counts()),
        ("QueueDepth", queue_depth()),
        ("Account", account_statement()),
        ("DailyCap", daily_cap()),
        ("LedgerEntry", ledger_entry()),
        ("LedgerEntryKind", ledger_entry_kind()),
        ("Health", health()),
        ("ProtectedResourceMetadata", protected_resource()),
        ("BatchCreated", batch_created()),
        ("Batch", batch_view()),
        ("BatchCounts", batch_counts()),
        ("BatchItem", batch_item()),
        ("BatchSummary", batch_summary()),
        ("BatchList", batch_list()),
        ("CaptureItem", capture_item()),
        ("ItemState", item_state()),
        ("ItemRetried", item_retried()),
        ("ArtifactUrl", artifact_url()),
        ("Job", job_record()),
        ("JobPhase", phase()),
        ("PhaseTimestamps", phase_timestamps()),
        ("JobAttempt", job_attempt()),
        ("JobTermination", job_termination()),
        ("JobExecutor", job_executor()),
        ("JobLogsInfo", job_logs()),
        ("JobArtifact", job_artifact()),
        ("JobList", job_list()),
        ("JobArtifactList", job_artifacts()),
        ("SessionLease", session_lease()),
        ("Session", session_view()),
        ("SessionAttestation", attestation()),
        ("BrowserWindow", browser_window()),
        ("SessionOverrides", session_overrides()),
        ("NetworkAttestation", network_attestation()),
        ("NetworkProbe", network_probe()),
        ("SessionDownloads", session_downloads()),
        ("SessionDownload", session_download()),
        ("SessionRecording", session_recording()),
        ("RefusedDownload", refused_download()),
        ("AttestedContext", attested_context()),
        ("ContextCreated", context_created()),
        ("Context", context_view()),
        ("ContextList", context_list()),
    ]
}

/// GET /grid (`wire::grid::GridStatus`).
pub fn grid_status() -> Value {
    object(json!({
        "queue": queue_counts(),
        "workers": count(),
        "sessions": count(),
        "maxSessions": count(),
        "nodes": count()
    }))
}

fn queue_counts() -> Value {
    object(json!({"wait": count(), "prioritized": count(), "delayed": count()}))
}

/// GET /grid/queue-depth (`wire::grid::QueueDepth`).
pub fn queue_depth() -> Value {
    object(json!({"depth": count()}))
}

/// GET /account (`wire::account::AccountStatement`).
pub fn account_statement() -> Value {
    object(json!({
        "accountId": string(),
        "name": string(),
        "creditMicros": integer(),
        "reservedMicros": integer(),
        "availableMicros": integer(),
        "suspended": {"type": "boolean"},
        "dailyCap": nullable(daily_cap()),
        "ledger": array(ledger_entry()),
        "nextCursor": nullable(string())
    }))
}

fn daily_cap() -> Value {
    object(json!({"capMicros": nullable(integer()), "usedMicros": integer(), "resetsAt": time()}))
}

fn ledger_entry() -> Value {
    object(json!({
        "kind": ledger_entry_kind(),
        "amountMicros": integer(),
        "subject": nullable(string()),
        "keyId": nullable(string()),
        "createdAt": time()
    }))
}

fn ledger_entry_kind() -> Value {
    one_of_strings(EntryKind::ALL.map(EntryKind::as_str))
}

/// GET /healthz (`wire::grid::Health`).
pub fn health() -> Value {
    object(json!({"status": one_of_strings(["ok"])}))
}

/// GET /.well-known/oauth-protected-resource[/mcp]
/// (`wire::grid::ProtectedResource`, RFC 9728).
pub fn protected_resource() -> Value {
    object(json!({
        "resource": {"type": "string", "format": "uri", "description": "The audience a sign-in token must name."},
        "authorization_servers": {
            "type": "array",
            "items": {"type": "string", "format": "uri"},
            "description": "The grid's sign-in issuer; empty on a grid without sign-in (use an API key)."
        },
        "scopes_supported": array(one_of_strings(SCOPES_SUPPORTED)),
        "bearer_methods_supported": array(one_of_strings(["header"]))
    }))
}

/// POST /batches (`wire::batch::BatchCreated`).
pub fn batch_created() -> Value {
    object(json!({"batchId": string(), "jobCount": count()}))
}

/// GET /batches/{id} (`wire::batch::BatchView`).
pub fn batch_view() -> Value {
    object(json!({
        "batchId": string(),
        "counts": batch_counts(),
        "total": count(),
        "jobs": array(batch_item())
    }))
}

/// One batch of GET /batches (`wire::batch::BatchSummary`).
pub fn batch_summary() -> Value {
    object(json!({
        "batchId": string(),
        "createdAt": time(),
        "script": string(),
        "profileId": string(),
        "counts": batch_counts(),
        "total": count()
    }))
}

/// GET /batches (`wire::batch::BatchList`).
pub fn batch_list() -> Value {
    object(json!({"batches": array(batch_summary()), "nextCursor": nullable(string())}))
}

fn batch_counts() -> Value {
    object(json!({"waiting": count(), "active": count(), "completed": count(), "failed": count()}))
}

/// One item of GET /batches/{id}.
fn batch_item() -> Value {
    let states = ["waiting", "active", "completed", "failed"];
    let mut job = object(json!({
        "jobId": string(),
        "url": string(),
        "state": one_of_strings(states),
        "failedReason": string()
    }));
    // Written only for a failed item.
    job["required"] = json!(["jobId", "url", "state"]);
    job
}

/// GET /jobs/{id} of a capture item (`wire::item::CaptureItem`).
pub fn capture_item() -> Value {
    object(json!({
        "jobId": string(),
        "batchId": string(),
        "url": string(),
        "state": item_state(),
        "attemptsMade": count(),
        "failedReason": nullable(string()),
        "artifacts": {
            "type": "object",
            "propertyNames": {"enum": ArtifactKind::ALL.map(ArtifactKind::as_str)},
            "additionalProperties": string(),
            "description": "kind → storage name of each published file (not a download address: see get_artifact_url)."
        },
        "script": one_of_strings(Script::ALL.map(Script::as_str)),
        "profileId": one_of_strings(Profile::ALL.map(Profile::as_str))
    }))
}

/// POST /jobs/{id}/retry of a capture item (`wire::item::ItemRetried`).
pub fn item_retried() -> Value {
    object(json!({"jobId": string(), "state": item_state()}))
}

/// GET /artifacts/{id}/{kind} (`wire::item::ArtifactUrl`).
pub fn artifact_url() -> Value {
    object(json!({"url": {"type": "string", "format": "uri", "description": "Downloads the file for 15 minutes."}}))
}

/// An analytical job's record (`wire::job_record::JobRecord`).
pub fn job_record() -> Value {
    object(json!({
        "jobId": string(),
        "attempt": count(),
        "imageDigest": string(),
        "phase": phase(),
        "phaseTimestamps": phase_timestamps(),
        "executor": nullable(job_executor()),
        "attempts": array(job_attempt()),
        "termination": nullable(job_termination()),
        "logsTruncated": {"type": "boolean"},
        "logs": job_logs(),
        "artifacts": array(job_artifact()),
        "labels": {"type": "object", "additionalProperties": string()},
        "priority": count(),
        "retries": count(),
        "runningDeadlineSeconds": count(),
        "cancelRequested": {"type": "boolean"},
        "createdAt": time()
    }))
}

fn job_executor() -> Value {
    object(json!({"engine": string(), "containerName": string(), "containerId": nullable(string())}))
}

fn job_termination() -> Value {
    object(json!({
        "class": one_of_strings(["workload", "cancelled", "platform"]),
        "exitCode": nullable(integer()),
        "reason": string()
    }))
}

fn job_logs() -> Value {
    object(json!({
        "available": {"type": "boolean"},
        "artifactId": nullable(string()),
        "byteLength": nullable(count()),
        "contentType": nullable(string())
    }))
}

fn job_attempt() -> Value {
    object(json!({
        "attempt": count(),
        "phase": phase(),
        "phaseTimestamps": phase_timestamps(),
        "funding": one_of_strings(["reservation", "replay"]),
        "startedAt": nullable(time()),
        "endedAt": nullable(time()),
        "termination": nullable(job_termination()),
        "executor": nullable(job_executor()),
        "logs": job_logs(),
        "logsTruncated": {"type": "boolean"}
    }))
}

/// GET /jobs (`wire::job_record::JobList`).
pub fn job_list() -> Value {
    object(json!({"jobs": array(job_record()), "nextCursor": nullable(string())}))
}

/// GET /jobs/{id}/artifacts (`wire::job_record::JobArtifacts`).
pub fn job_artifacts() -> Value {
    object(json!({"artifacts": array(job_artifact())}))
}

/// POST /sessions (`wire::session::SessionLease`).
pub fn session_lease() -> Value {
    object(json!({
        "sessionId": string(),
        "cdpUrl": {"type": "string", "format": "uri", "description": "Connect a CDP client here; the token in it is the credential."},
        "liveViewUrl": {"type": "string", "format": "uri", "description": "A page a person opens in any browser to watch the session (the same token: keep it as secret as cdpUrl)."},
        "expiresAt": time(),
        "profileId": string(),
        "attestation": nullable(attestation()),
        "networkPolicy": nullable(string()),
        "networkAttestation": nullable(network_attestation())
    }))
}

/// One entry of GET /sessions (`wire::session::SessionView`).
pub fn session_view() -> Value {
    object(json!({
        "sessionId": string(),
        "status": one_of_strings(["pending", "running"]),
        "createdAt": time(),
        "expiresAt": time(),
        "profileId": string(),
        "attestation": nullable(attestation()),
        "networkPolicy": nullable(string()),
        "networkAttestation": nullable(network_attestation())
    }))
}

/// GET /sessions: the caller's live sessions (`Vec<wire::session::SessionView>`).
pub fn session_list() -> Value {
    array(session_view())
}

/// GET /sessions/{id}/downloads (`wire::session::SessionDownloads`).
pub fn session_downloads() -> Value {
    object(json!({
        "downloads": array(session_download()),
        "totalBytes": count(),
        "limitBytes": count(),
        "refused": array(refused_download()),
        "keptUntil": nullable(time())
    }))
}

fn session_download() -> Value {
    object(json!({
        "name": string(),
        "sizeBytes": count(),
        "createdAt": time(),
        "url": {"type": "string", "format": "uri", "description": "Downloads the file for 15 minutes."},
        "suggestedName": nullable(string()),
        "recording": {"type": "boolean", "description": "True for the session's recording (recording.html, written by the grid): its url opens the replay page."}
    }))
}

/// GET /sessions/{id}/recording (`wire::session::SessionRecording`).
pub fn session_recording() -> Value {
    object(json!({
        "url": {"type": "string", "format": "uri", "description": "Opens the replay page without credential for 15 minutes."},
        "expiresAt": time(),
        "name": string(),
        "sizeBytes": count(),
        "frames": count(),
        "durationMs": count(),
        "truncated": {"type": "boolean"},
        "keptUntil": nullable(time())
    }))
}

fn refused_download() -> Value {
    object(json!({"name": string(), "reason": string(), "at": time()}))
}

fn job_artifact() -> Value {
    object(json!({
        "artifactId": string(),
        "kind": string(),
        "byteLength": count(),
        "contentType": string(),
        "createdAt": time(),
        "attempt": count(),
        "truncated": {"type": "boolean"}
    }))
}

fn attestation() -> Value {
    object(json!({
        "profileId": string(),
        "product": string(),
        "version": string(),
        "protocolVersion": string(),
        "userAgent": string(),
        "imageDigest": string(),
        "mode": string(),
        "locale": string(),
        "timeZone": string(),
        "window": browser_window(),
        "overrides": nullable(session_overrides()),
        "context": nullable(attested_context()),
        "launchManifestHash": string(),
        "upstreamProxy": nullable(string()),
        "attestedAt": time()
    }))
}

/// The context a session's browser started from (`wire::session::AttestedContext`).
fn attested_context() -> Value {
    object(json!({"contextId": string(), "stateSha256": string(), "persist": {"type": "boolean"}}))
}

/// POST /contexts (`wire::session::ContextCreated`).
pub fn context_created() -> Value {
    object(json!({"contextId": string()}))
}

/// An entry of GET /contexts (`wire::session::ContextView`).
pub fn context_view() -> Value {
    object(json!({
        "contextId": string(),
        "sizeBytes": count(),
        "createdAt": time(),
        "lastUsedAt": nullable(time()),
        "savedAt": nullable(time()),
        "sessionId": nullable(string()),
        "lastSaveRefused": nullable(string())
    }))
}

/// GET /contexts: the caller's contexts, oldest first.
pub fn context_list() -> Value {
    array(context_view())
}

/// A page's size as the browser was set up: the profile's window, or a
/// lease's viewport.
fn browser_window() -> Value {
    object(json!({
        "width": count(),
        "height": count(),
        "deviceScaleFactor": {"type": "number"},
        "mobile": {"type": "boolean"}
    }))
}

fn session_overrides() -> Value {
    object(json!({
        "viewport": nullable(browser_window()),
        "userAgent": nullable(string()),
        "locale": nullable(string()),
        "timezone": nullable(string())
    }))
}

fn network_attestation() -> Value {
    object(json!({
        "policy": string(),
        "enforcedBy": string(),
        "probes": array(network_probe()),
        "attestedAt": time()
    }))
}

fn network_probe() -> Value {
    object(json!({
        "url": string(),
        "outcome": string(),
        "browserResult": string(),
        "proxyDecision": string()
    }))
}

/// An object whose every property is written.
pub fn object(properties: Value) -> Value {
    let required: Vec<String> = properties.as_object().map(|p| p.keys().cloned().collect()).unwrap_or_default();
    json!({"type": "object", "properties": properties, "required": required})
}

fn string() -> Value {
    json!({"type": "string"})
}

fn integer() -> Value {
    json!({"type": "integer"})
}

fn count() -> Value {
    json!({"type": "integer", "minimum": 0})
}

fn time() -> Value {
    json!({"type": "string", "format": "date-time"})
}

fn array(items: Value) -> Value {
    json!({"type": "array", "items": items})
}

fn one_of_strings<const N: usize>(values: [&str; N]) -> Value {
    json!({"type": "string", "enum": values.to_vec()})
}

/// `schema` or null. A schema with a single `type` gets `[type, "null"]`
/// (an `enum` list then gains null as well).
pub fn nullable(mut schema: Value) -> Value {
    if let Some(Value::String(t)) = schema.get("type").cloned() {
        schema["type"] = json!([t, "null"]);
    }
    if let Some(Value::Array(members)) = schema.get_mut("enum") {
        members.push(Value::Null);
    }
    schema
}

fn item_state() -> Value {
    one_of_strings(ItemState::ALL.map(ItemState::as_str))
}

fn phase() -> Value {
    one_of_strings(JobPhase::ALL.map(JobPhase::as_str))
}

fn phase_timestamps() -> Value {
    let mut m = Map::new();
    m.insert("type".into(), json!("object"));
    m.insert("propertyNames".into(), json!({"enum": JobPhase::ALL.map(JobPhase::as_str)}));
    m.insert("additionalProperties".into(), time());
    Value::Object(m)
}
