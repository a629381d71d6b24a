//! POST /mcp: the grid's calls as MCP tools over stateless Streamable HTTP.
//!
//! One JSON-RPC message per request, answered with one JSON body; no
//! session (`mcp-session-id`) is ever issued and nothing is pushed. Each tool
//! becomes a `Call` and runs through `api::perform`, so it is billed and
//! refused exactly as its HTTP call; the call's JSON body comes back as the
//! tool's text, with `isError: true` when its status is 400 or more.
//!
//! Hand-written rather than built on an MCP SDK: the contract fixes the
//! 401/405/406 answers to the byte, the transport is JSON-only and
//! stateless, and every tool must run as the authenticated caller through
//! the same code as the HTTP API; the protocol surface this needs (initialize,
//! ping, tools/list, tools/call, notifications) is small. See docs/mcp.md.

use std::sync::Arc;

use grid_core::catalog::ArtifactKind;
use grid_core::error::ApiError;
use grid_core::shapes;
use grid_core::validate::list::{account_query_pairs, query_pairs};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ACCEPT, ALLOW, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::{Method, Request, StatusCode};
use serde_json::{json, Map, Value};

use super::auth;
use super::respond::{self, Resp};
use crate::api::{self as calls, Call};
use crate::app::App;
use crate::store::accounts::Caller;

/// Protocol versions this server speaks, newest first.
pub const PROTOCOL_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
/// The transport-level errors of the Streamable HTTP transport.
const TRANSPORT_ERROR: i64 = -32000;

fn rpc_error(status: u16, code: i64, message: &str, id: Value) -> Resp {
    respond::json(status, &json!({"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": id}))
}

fn rpc_result(id: Value, result: Value) -> Resp {
    respond::json(200, &json!({"jsonrpc": "2.0", "result": result, "id": id}))
}

fn accepted() -> Resp {
    let mut r = respond::bytes(StatusCode::ACCEPTED, "application/json", vec![]);
    r.headers_mut().remove(CONTENT_TYPE);
    r
}

pub async fn handle(app: &Arc<App>, req: Request<Incoming>) -> Result<Resp, ApiError> {
    if req.method() != Method::POST {
        let mut r = rpc_error(405, TRANSPORT_ERROR, "Method not allowed.", Value::Null);
        r.headers_mut().insert(ALLOW, HeaderValue::from_static("POST"));
        return Ok(r);
    }
    let audience = format!("{}/mcp", app.config.base_url);
    let caller = match auth::authenticate(app, req.headers(), &audience).await {
        Ok(c) => c,
        Err(ApiError::Unauthorized) => {
            let mut r = respond::error(&ApiError::Unauthorized);
            let challenge = format!(
                "Bearer resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
                app.config.base_url
            );
            if let Ok(v) = HeaderValue::from_str(&challenge) {
                r.headers_mut().insert(WWW_AUTHENTICATE, v);
            }
            return Ok(r);
        }
        Err(e) => return Err(e),
    };
    let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !(accept.contains("application/json") && accept.contains("text/event-stream")) {
        return Ok(rpc_error(
            406,
            TRANSPORT_ERROR,
            "Not Acceptable: Client must accept both application/json and text/event-stream",
            Value::Null,
        ));
    }
    let content_type = req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !content_type.starts_with("application/json") {
        return Ok(rpc_error(
            415,
            TRANSPORT_ERROR,
            "Unsupported Media Type: Content-Type must be application/json",
            Value::Null,
        ));
    }
    let body = match http_body_util::Limited::new(req.into_body(), respond::MAX_BODY_BYTES).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(rpc_error(400, PARSE_ERROR, "Parse error: body unreadable or too large", Value::Null)),
    };
    let message: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return Ok(rpc_error(400, PARSE_ERROR, &format!("Parse error: {e}"), Value::Null)),
    };
    let Value::Object(msg) = message else {
        return Ok(rpc_error(
            400,
            INVALID_REQUEST,
            "Invalid Request: send one JSON-RPC message (no batches)",
            Value::Null,
        ));
    };
    if msg.get("jsonrpc") != Some(&json!("2.0")) {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        return Ok(rpc_error(400, INVALID_REQUEST, "Invalid Request: jsonrpc must be \"2.0\"", id));
    }
    let Some(method) = msg.get("method").and_then(Value::as_str) else {
        // A response to a server request, which this server never sends.
        return Ok(accepted());
    };
    let Some(id) = msg.get("id").cloned() else {
        // Notifications (initialized, cancelled, ...) need no answer.
        return Ok(accepted());
    };
    let params = msg.get("params").cloned().unwrap_or(json!({}));
    Ok(match method {
        "initialize" => rpc_result(id, initialize(&params)),
        "ping" => rpc_result(id, json!({})),
        "tools/list" => rpc_result(id, json!({ "tools": tools() })),
        "tools/call" => match call_tool(app, &caller, &params).await {
            Ok(result) => rpc_result(id, result),
            Err(message) => rpc_error(200, INVALID_PARAMS, &message, id),
        },
        other => rpc_error(200, METHOD_NOT_FOUND, &format!("Method not found: {other}"), id),
    })
}

fn initialize(params: &Value) -> Value {
    let asked = params["protocolVersion"].as_str().unwrap_or("");
    let version = PROTOCOL_VERSIONS.iter().find(|v| **v == asked).unwrap_or(&PROTOCOL_VERSIONS[0]);
    json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": {"name": "grid", "title": "Grid", "version": env!("CARGO_PKG_VERSION")},
        "instructions": "Grid runs capture batches, analytical container jobs and leased browser sessions. \
                         Billable tools (submit_batch, submit_compute_job, retry_job, lease_session) reserve credit \
                         like their HTTP calls. Poll get_batch / get_job for progress; nothing is pushed."
    })
}

/// Runs a tool. `Err` is a JSON-RPC invalid-params error (unknown tool or
/// arguments that do not name the call); the call's own refusals come back
/// as a tool result with `isError: true`.
async fn call_tool(app: &Arc<App>, caller: &Caller, params: &Value) -> Result<Value, String> {
    let name = params["name"].as_str().ok_or("params.name: required string")?;
    let args = match params.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err("params.arguments: must be an object".into()),
    };
    let answer = match to_call(name, &args) {
        Ok(call) => calls::perform(app, caller, call).await,
        Err(ToolError::Refused(e)) => Err(e),
        Err(ToolError::Params(message)) => return Err(message),
    };
    let (status, body) = match answer {
        Ok(r) => (r.status, r.bytes().to_vec()),
        Err(e) => (e.status(), serde_json::to_vec(&e.body()).unwrap_or_default()),
    };
    Ok(json!({
        "content": [{"type": "text", "text": String::from_utf8_lossy(&body)}],
        "isError": status >= 400,
    }))
}

/// Why a tool's arguments make no call.
#[derive(Debug)]
enum ToolError {
    /// They do not name the call (unknown tool, missing id): a JSON-RPC
    /// invalid-params error.
    Params(String),
    /// The call's own validation refuses them: a tool error, as the HTTP
    /// call would answer.
    Refused(ApiError),
}

fn string_arg(args: &Map<String, Value>, field: &str) -> Result<String, ToolError> {
    match args.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(ToolError::Params(format!("arguments.{field}: required non-empty string"))),
    }
}

fn to_call(name: &str, args: &Map<String, Value>) -> Result<Call, ToolError> {
    let body = || Value::Object(args.clone());
    Ok(match name {
        "get_account" => Call::Account(account_query_pairs(args).map_err(ToolError::Refused)?),
        "grid_status" => Call::GridStatus,
        "queue_depth" => Call::QueueDepth,
        // Tools take no Idempotency-Key (docs/idempotency.md).
        "submit_batch" => Call::SubmitBatch { body: body(), idempotency_key: None },
        "get_batch" => Call::Batch(string_arg(args, "batchId")?),
        "get_job" => Call::GetJob(string_arg(args, "jobId")?),
        "retry_job" => Call::Retry(string_arg(args, "jobId")?),
        "get_artifact_url" => Call::ArtifactUrl { item: string_arg(args, "jobId")?, kind: string_arg(args, "kind")? },
        "submit_compute_job" => Call::SubmitJob(body()),
        "list_jobs" => Call::ListJobs(query_pairs(args).map_err(ToolError::Refused)?),
        "cancel_job" => Call::Cancel(string_arg(args, "jobId")?),
        "get_job_artifacts" => Call::JobArtifacts(string_arg(args, "jobId")?),
        "get_job_logs" => {
            let mut query = vec![];
            if let Some(a) = args.get("attempt") {
                query.push(("attempt".to_string(), a.as_u64().map_or_else(|| a.to_string(), |n| n.to_string())));
            }
            Call::JobLogs { id: string_arg(args, "jobId")?, query }
        }
        "lease_session" => Call::LeaseSession { body: body(), idempotency_key: None },
        "list_sessions" => Call::ListSessions,
        "release_session" => Call::ReleaseSession(string_arg(args, "sessionId")?),
        other => return Err(ToolError::Params(format!("Unknown tool: {other}"))),
    })
}

fn tool(name: &str, title: &str, description: &str, input_schema: Value) -> Value {
    json!({"name": name, "title": title, "description": description, "inputSchema": input_schema})
}

/// The input schema of a tool that is not a request body of the API (its
/// arguments are path or query parameters).
fn arguments(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

fn id_tool(name: &str, title: &str, description: &str, field: &str) -> Value {
    tool(name, title, description, arguments(json!({ field: {"type": "string", "minLength": 1} }), &[field]))
}

/// The tool list. A tool that submits a request body publishes that
/// request's schema from `grid_core::shapes`, the one definition the
/// validators are tested against; only the ids of the other tools are
/// described here.
pub fn tools() -> Vec<Value> {
    vec![
        tool(
            "get_account",
            "Read your account",
            "Your credit, reserved amount, your key's daily-cap use and its reset time, and a page of your ledger \
             (reservations, charges, releases, credit), newest first, each with the batch, item, job or session it belongs to. Free.",
            shapes::account_query(),
        ),
        tool("grid_status", "Grid status", "Queue figures, busy capture workers and session slots of the whole grid. Free.", arguments(json!({}), &[])),
        tool("queue_depth", "Queue depth", "Capture items waiting, prioritised, delayed or active across the grid. Free.", arguments(json!({}), &[])),
        tool(
            "submit_batch",
            "Submit a capture batch",
            "Queues 1 to 1000 URLs, one item each, run by a script under a browser profile. Reserves the script's price per item (fetch 120 µ€, browser-fetch and render-fetch 800 µ€, capture 1000 µ€); charged when an item's files are published.",
            shapes::new_batch(),
        ),
        id_tool("get_batch", "Read a batch", "Counts and items (with states) of a capture batch. Free.", "batchId"),
        id_tool("get_job", "Read a job", "A capture item (by its id) or an analytical job record (cj_ id). Free.", "jobId"),
        id_tool(
            "retry_job",
            "Retry a job",
            "Retries a failed capture item (free) or a FAILED/TIMED_OUT analytical job (new reservation as for submit_compute_job).",
            "jobId",
        ),
        tool(
            "get_artifact_url",
            "Download URL of a capture file",
            "A 15-minute download URL for one file of a finished capture item. Free.",
            arguments(
                json!({"jobId": {"type": "string", "minLength": 1}, "kind": {"type": "string", "enum": ArtifactKind::ALL.map(ArtifactKind::as_str)}}),
                &["jobId", "kind"],
            ),
        ),
        tool(
            "submit_compute_job",
            "Submit an analytical job",
            "Runs a container image from an admitted registry with a command and resource bounds. Reserves one attempt's longest cost: (vCPU × 0.04 € + GiB × 0.0064 €) per hour × runningDeadlineSeconds on requested CPU and memory.",
            shapes::new_job(),
        ),
        tool("list_jobs", "List analytical jobs", "The caller's analytical jobs, newest first. Free.", shapes::job_list_query()),
        id_tool("cancel_job", "Cancel a job", "Cancels an analytical job; it reaches CANCELLED once its container stopped. Free.", "jobId"),
        id_tool("get_job_artifacts", "List a job's files", "The published logs of an analytical job's attempts. Free.", "jobId"),
        tool(
            "get_job_logs",
            "Read a job's log",
            "stdout and stderr of an ended attempt (default: the current one), up to 1 MiB. Free.",
            arguments(json!({"jobId": {"type": "string", "minLength": 1}, "attempt": {"type": "integer", "minimum": 1}}), &["jobId"]),
        ),
        tool(
            "lease_session",
            "Lease a browser session",
            "Leases a remote Chromium for 1 to 240 minutes and returns a one-time CDP URL. Reserves the whole lifetime at 0.07 € per hour; charged for ready time only.",
            shapes::new_session(),
        ),
        tool("list_sessions", "List browser sessions", "The caller's live sessions (without their CDP URLs). Free.", arguments(json!({}), &[])),
        id_tool("release_session", "Release a browser session", "Ends a session at once; its CDP URL stops working. Free.", "sessionId"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_tools_are_listed_with_object_schemas() {
        let names: Vec<String> = tools().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
        for required in ["grid_status", "submit_batch", "lease_session", "submit_compute_job", "retry_job"] {
            assert!(names.contains(&required.to_string()), "{required} missing");
        }
        for t in tools() {
            assert_eq!(t["inputSchema"]["type"], "object", "{}", t["name"]);
            // Every tool maps to a call (arguments aside).
            let name = t["name"].as_str().unwrap();
            let mut args = Map::new();
            for f in t["inputSchema"]["required"].as_array().unwrap() {
                args.insert(f.as_str().unwrap().into(), json!("x"));
            }
            assert!(to_call(name, &args).is_ok(), "{name}");
        }
    }

    #[test]
    fn version_negotiation_echoes_known_and_offers_newest_otherwise() {
        assert_eq!(initialize(&json!({"protocolVersion": "2025-03-26"}))["protocolVersion"], "2025-03-26");
        assert_eq!(initialize(&json!({"protocolVersion": "1999-01-01"}))["protocolVersion"], PROTOCOL_VERSIONS[0]);
    }

    #[test]
    fn list_jobs_arguments_become_query_pairs() {
        let args = json!({"limit": 5, "phase": "RUNNING", "label": {"team": "x"}});
        let Ok(Call::ListJobs(q)) = to_call("list_jobs", args.as_object().unwrap()) else {
            panic!("list_jobs is a ListJobs call");
        };
        assert!(q.contains(&("limit".into(), "5".into())));
        assert!(q.contains(&("label.team".into(), "x".into())));
        // A wrong type is the call's own refusal (a tool error), not a
        // JSON-RPC error: the schema says integer, "5" is not one.
        let args = json!({"limit": "5"});
        match to_call("list_jobs", args.as_object().unwrap()) {
            Err(ToolError::Refused(ApiError::InvalidListQuery { detail })) => {
                assert_eq!(detail, ["limit: must be a whole number from 1 to 100, got a string"])
            }
            other => panic!("expected INVALID_LIST_QUERY, got {other:?}"),
        }
    }

    #[test]
    fn request_tools_publish_the_request_shapes() {
        let schema = |name: &str| tools().into_iter().find(|t| t["name"] == name).unwrap()["inputSchema"].clone();
        assert_eq!(schema("submit_batch"), shapes::new_batch());
        assert_eq!(schema("submit_compute_job"), shapes::new_job());
        assert_eq!(schema("lease_session"), shapes::new_session());
        assert_eq!(schema("list_jobs"), shapes::job_list_query());
    }
}
