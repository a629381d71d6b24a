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

/// GET /grid (`wire::grid::GridStatus`).
pub fn grid_status() -> Value {
    object(json!({
        "queue": object(json!({"wait": count(), "prioritized": count(), "delayed": count()})),
        "workers": count(),
        "sessions": count(),
        "maxSessions": count()
    }))
}

/// GET /grid/queue-depth (`wire::grid::QueueDepth`).
pub fn queue_depth() -> Value {
    object(json!({"depth": count()}))
}

/// GET /account (`wire::account::AccountStatement`).
pub fn account_statement() -> Value {
    let mut cap = object(json!({"capMicros": nullable(integer()), "usedMicros": integer(), "resetsAt": time()}));
    cap["type"] = json!(["object", "null"]);
    object(json!({
        "accountId": string(),
        "name": string(),
        "creditMicros": integer(),
        "reservedMicros": integer(),
        "availableMicros": integer(),
        "suspended": {"type": "boolean"},
        "dailyCap": cap,
        "ledger": array(object(json!({
            "kind": one_of_strings(EntryKind::ALL.map(EntryKind::as_str)),
            "amountMicros": integer(),
            "subject": nullable(string()),
            "keyId": nullable(string()),
            "createdAt": time()
        }))),
        "nextCursor": nullable(string())
    }))
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
    let states = ["waiting", "active", "completed", "failed"];
    let mut job = object(json!({
        "jobId": string(),
        "url": string(),
        "state": one_of_strings(states),
        "failedReason": string()
    }));
    // Written only for a failed item.
    job["required"] = json!(["jobId", "url", "state"]);
    object(json!({
        "batchId": string(),
        "counts": object(json!({"waiting": count(), "active": count(), "completed": count(), "failed": count()})),
        "total": count(),
        "jobs": array(job)
    }))
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
    let mut executor =
        object(json!({"engine": string(), "containerName": string(), "containerId": nullable(string())}));
    executor["type"] = json!(["object", "null"]);
    let mut termination = object(json!({
        "class": one_of_strings(["workload", "cancelled", "platform"]),
        "exitCode": nullable(integer()),
        "reason": string()
    }));
    termination["type"] = json!(["object", "null"]);
    let logs = object(json!({
        "available": {"type": "boolean"},
        "artifactId": nullable(string()),
        "byteLength": nullable(count()),
        "contentType": nullable(string())
    }));
    let attempt = object(json!({
        "attempt": count(),
        "phase": phase(),
        "phaseTimestamps": phase_timestamps(),
        "funding": one_of_strings(["reservation", "replay"]),
        "startedAt": nullable(time()),
        "endedAt": nullable(time()),
        "termination": termination,
        "executor": executor,
        "logs": logs,
        "logsTruncated": {"type": "boolean"}
    }));
    object(json!({
        "jobId": string(),
        "attempt": count(),
        "imageDigest": string(),
        "phase": phase(),
        "phaseTimestamps": phase_timestamps(),
        "executor": executor,
        "attempts": array(attempt),
        "termination": termination,
        "logsTruncated": {"type": "boolean"},
        "logs": logs,
        "artifacts": array(job_artifact()),
        "labels": {"type": "object", "additionalProperties": string()},
        "priority": count(),
        "retries": count(),
        "runningDeadlineSeconds": count(),
        "cancelRequested": {"type": "boolean"},
        "createdAt": time()
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
        "expiresAt": time(),
        "profileId": string(),
        "attestation": attestation(),
        "networkPolicy": nullable(string()),
        "networkAttestation": network_attestation()
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
        "attestation": attestation(),
        "networkPolicy": nullable(string()),
        "networkAttestation": network_attestation()
    }))
}

/// GET /sessions: the caller's live sessions (`Vec<wire::session::SessionView>`).
pub fn session_list() -> Value {
    array(session_view())
}

/// GET /sessions/{id}/downloads (`wire::session::SessionDownloads`).
pub fn session_downloads() -> Value {
    object(json!({
        "downloads": array(object(json!({
            "name": string(),
            "sizeBytes": count(),
            "createdAt": time(),
            "url": {"type": "string", "format": "uri", "description": "Downloads the file for 15 minutes."},
            "suggestedName": nullable(string())
        }))),
        "totalBytes": count(),
        "limitBytes": count(),
        "refused": array(object(json!({"name": string(), "reason": string(), "at": time()}))),
        "keptUntil": nullable(time())
    }))
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
    let mut a = object(json!({
        "profileId": string(),
        "product": string(),
        "version": string(),
        "protocolVersion": string(),
        "userAgent": string(),
        "imageDigest": string(),
        "mode": string(),
        "locale": string(),
        "timeZone": string(),
        "window": object(json!({
            "width": count(),
            "height": count(),
            "deviceScaleFactor": {"type": "number"},
            "mobile": {"type": "boolean"}
        })),
        "overrides": nullable(object(json!({
            "viewport": nullable(object(json!({
                "width": count(),
                "height": count(),
                "deviceScaleFactor": {"type": "number"},
                "mobile": {"type": "boolean"}
            }))),
            "userAgent": nullable(string()),
            "locale": nullable(string()),
            "timezone": nullable(string())
        }))),
        "launchManifestHash": string(),
        "attestedAt": time()
    }));
    a["type"] = json!(["object", "null"]);
    a
}

fn network_attestation() -> Value {
    let mut a = object(json!({
        "policy": string(),
        "enforcedBy": string(),
        "probes": array(object(json!({
            "url": string(),
            "outcome": string(),
            "browserResult": string(),
            "proxyDecision": string()
        }))),
        "attestedAt": time()
    }));
    a["type"] = json!(["object", "null"]);
    a
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
