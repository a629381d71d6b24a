//! The MCP tools: their list (input schemas from `grid_core::shapes`,
//! output schemas from `grid_core::reply_shapes`, annotations, what each
//! costs) and running one. Every tool is one `Call` run by `api::perform`
//! (so it is billed and refused exactly as its HTTP call; a browser tool is
//! `Call::BrowserTool`, which checks and drives the session wherever its
//! browser runs) except `get_capture`, which reads a finished capture's
//! files for the model to see (`api::captures::read_files`). Here, a tool's
//! arguments become a call and its reply becomes content; nothing else.
//!
//! A result carries the call's JSON body as text (the contract) and, when
//! the call succeeded, the same JSON as `structuredContent` fitting the
//! tool's `outputSchema`. A refusal is a tool error (`isError: true`) with
//! the error body as text and no `structuredContent` (clients check
//! `structuredContent` against `outputSchema`, which describes success).

use std::sync::Arc;

use base64::Engine;
use grid_core::browser_tools;
use grid_core::catalog::{ArtifactKind, Script};
use grid_core::error::ApiError;
use grid_core::pricing::{JOB_MICROS_PER_GIB_HOUR, JOB_MICROS_PER_VCPU_HOUR, SESSION_MICROS_PER_HOUR};
use grid_core::validate::list::{account_query_pairs, batch_list_query_pairs, query_pairs};
use grid_core::validate::one_call::OneCall;
use grid_core::{reply_shapes as replies, shapes};
use serde_json::{json, Map, Value};

use crate::api::captures::{read_files, ItemFile};
use crate::api::{self as calls, is_compute, Call, CapturedFile, JobLog, Reply, ReplyBody, ToolAnswer};
use crate::app::App;
use crate::store::accounts::Caller;

/// Largest screenshot `get_capture` returns as image content (decoded
/// bytes; its base64 is a third larger). A larger one comes back as its
/// download URL.
pub const MAX_INLINE_IMAGE_BYTES: u64 = 2 * 1024 * 1024;
/// Largest html, body or meta file `get_capture` embeds.
pub const MAX_INLINE_TEXT_BYTES: u64 = 512 * 1024;

fn inline_limit(kind: ArtifactKind) -> u64 {
    match kind {
        ArtifactKind::Screenshot | ArtifactKind::Pdf => MAX_INLINE_IMAGE_BYTES,
        _ => MAX_INLINE_TEXT_BYTES,
    }
}

/// What a tool does to the world, as MCP's tool annotations say it.
#[derive(Clone, Copy)]
struct Hints {
    read_only: bool,
    destructive: bool,
    idempotent: bool,
    /// Reaches outside the grid (the web, a registry).
    open_world: bool,
}

const READ: Hints = Hints { read_only: true, destructive: false, idempotent: true, open_world: false };

struct Tool {
    name: &'static str,
    title: &'static str,
    description: String,
    input: Value,
    output: Value,
    hints: Hints,
}

impl Tool {
    fn listed(&self) -> Value {
        json!({
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input,
            "outputSchema": self.output,
            "annotations": {
                "title": self.title,
                "readOnlyHint": self.hints.read_only,
                "destructiveHint": self.hints.destructive,
                "idempotentHint": self.hints.idempotent,
                "openWorldHint": self.hints.open_world
            }
        })
    }
}

/// The input schema of a tool that is not a request body of the API (its
/// arguments are path or query parameters).
fn arguments(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

fn id_argument(field: &str, description: &str) -> Value {
    arguments(json!({ field: {"type": "string", "minLength": 1, "description": description} }), &[field])
}

/// `6400` → `0.0064 €`.
fn euros(micros: u128) -> String {
    let whole = format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000);
    format!("{} €", whole.trim_end_matches('0').trim_end_matches('.'))
}

fn tools_table() -> Vec<Tool> {
    let job_id = "A capture item id (from get_batch) or an analytical job id (cj_...).";
    let prices: Vec<String> = Script::ALL.iter().map(|s| format!("{} {} µ€", s.as_str(), s.price_micros())).collect();
    let mut sessions_list = replies::object(json!({"sessions": {"type": "array", "items": replies::session_view()}}));
    sessions_list["description"] = json!("GET /sessions' array, as {sessions: [...]}");
    let mut contexts_list = replies::object(json!({"contexts": replies::context_list()}));
    contexts_list["description"] = json!("GET /contexts' array, as {contexts: [...]}");
    let mut tools = vec![
        Tool {
            name: "get_account",
            title: "Read your account",
            description: "Your credit, reserved amount, your key's daily-cap use and its reset time, and a page of \
                          your ledger (reservations, charges, releases, credit), newest first. Free."
                .into(),
            input: shapes::account_query(),
            output: replies::account_statement(),
            hints: READ,
        },
        Tool {
            name: "grid_status",
            title: "Grid status",
            description: "Queue figures, busy capture workers and session slots of the whole grid. Free.".into(),
            input: arguments(json!({}), &[]),
            output: replies::grid_status(),
            hints: READ,
        },
        Tool {
            name: "queue_depth",
            title: "Queue depth",
            description: "Capture items waiting, prioritised, delayed or active across the grid. Free.".into(),
            input: arguments(json!({}), &[]),
            output: replies::queue_depth(),
            hints: READ,
        },
        Tool {
            name: "submit_batch",
            title: "Submit a capture batch",
            description: format!(
                "Queues 1 to 1000 URLs, one capture item each, run by a script (default capture: screenshot, html \
                 and meta) under a browser profile. Costs the script's price per item, reserved now and charged \
                 when an item completes (released if it fails): {}. Refused with insufficient_credit or \
                 daily_cap_exceeded before anything is queued. params: every option of each script is in the \
                 input schema (dependentSchemas.params.oneOf, one branch per script); they are checked when each \
                 item runs, so a bad one fails the items, naming it. Poll get_batch, then get_capture.",
                prices.join(", ")
            ),
            input: shapes::new_batch(),
            output: replies::batch_created(),
            hints: Hints { read_only: false, destructive: false, idempotent: false, open_world: true },
        },
        Tool {
            name: "get_batch",
            title: "Read a batch",
            description: "Counts and items (ids and states) of a capture batch. Free.".into(),
            input: id_argument("batchId", "The batchId submit_batch answered."),
            output: replies::batch_view(),
            hints: READ,
        },
        Tool {
            name: "list_batches",
            title: "List capture batches",
            description: "Your capture batches, newest first, a page at a time, each with its counts by state \
                          (its items: get_batch). Free."
                .into(),
            input: shapes::batch_list_query(),
            output: replies::batch_list(),
            hints: READ,
        },
        Tool {
            name: "get_job",
            title: "Read a job",
            description: "A capture item (its state and published files) or an analytical job record. Free.".into(),
            input: id_argument("jobId", job_id),
            output: json!({"type": "object", "anyOf": [replies::capture_item(), replies::job_record()]}),
            hints: READ,
        },
        Tool {
            name: "get_capture",
            title: "See a capture",
            description: format!(
                "A finished capture item with its files for you to look at: the screenshot as an image, html, \
                 body and meta as embedded text. Files larger than {} (screenshot) or {} KiB (others) come back \
                 as a 15-minute download URL instead. Free.",
                format_args!("{} MiB", MAX_INLINE_IMAGE_BYTES / (1024 * 1024)),
                MAX_INLINE_TEXT_BYTES / 1024
            ),
            input: arguments(
                json!({
                    "jobId": {"type": "string", "minLength": 1, "description": "A capture item id (from get_batch)."},
                    "include": {
                        "type": "array",
                        "items": {"type": "string", "enum": ArtifactKind::ALL.map(ArtifactKind::as_str)},
                        "uniqueItems": true,
                        "default": ["screenshot", "meta"],
                        "description": "Which files to return."
                    }
                }),
                &["jobId"],
            ),
            output: capture_output(),
            hints: READ,
        },
        Tool {
            name: "retry_job",
            title: "Retry a job",
            description: format!(
                "Retries a failed capture item (free) or a FAILED/TIMED_OUT analytical job (costs a new \
                 reservation, as submit_compute_job: {} per vCPU-hour + {} per GiB-hour).",
                euros(JOB_MICROS_PER_VCPU_HOUR),
                euros(JOB_MICROS_PER_GIB_HOUR)
            ),
            input: id_argument("jobId", job_id),
            output: json!({"type": "object", "anyOf": [replies::item_retried(), replies::job_record()]}),
            hints: Hints { read_only: false, destructive: false, idempotent: false, open_world: true },
        },
        Tool {
            name: "get_artifact_url",
            title: "Download URL of a capture file",
            description: "A 15-minute download URL for one file of a finished capture item. Free.".into(),
            input: arguments(
                json!({
                    "jobId": {"type": "string", "minLength": 1, "description": "A capture item id."},
                    "kind": {"type": "string", "enum": ArtifactKind::ALL.map(ArtifactKind::as_str)}
                }),
                &["jobId", "kind"],
            ),
            output: replies::artifact_url(),
            hints: READ,
        },
        Tool {
            name: "submit_compute_job",
            title: "Submit an analytical job",
            description: format!(
                "Runs a container image from an admitted registry with a command and resource bounds. Costs \
                 {} per vCPU-hour + {} per GiB-hour of requested CPU and memory while it runs; one attempt's \
                 longest cost (runningDeadlineSeconds) is reserved at submission. Resending the same \
                 idempotencyKey and body returns the existing job.",
                euros(JOB_MICROS_PER_VCPU_HOUR),
                euros(JOB_MICROS_PER_GIB_HOUR)
            ),
            input: shapes::new_job(),
            output: replies::job_record(),
            hints: Hints { read_only: false, destructive: false, idempotent: true, open_world: true },
        },
        Tool {
            name: "list_jobs",
            title: "List analytical jobs",
            description: "Your analytical jobs, newest first, a page at a time. Free.".into(),
            input: shapes::job_list_query(),
            output: replies::job_list(),
            hints: READ,
        },
        Tool {
            name: "cancel_job",
            title: "Cancel a job",
            description: "Cancels an analytical job: its container is stopped and it reaches CANCELLED. Free; \
                          time already run is charged."
                .into(),
            input: id_argument("jobId", "An analytical job id (cj_...)."),
            output: replies::job_record(),
            hints: Hints { read_only: false, destructive: true, idempotent: true, open_world: false },
        },
        Tool {
            name: "get_job_artifacts",
            title: "List a job's files",
            description: "The published logs of an analytical job's attempts. Free.".into(),
            input: id_argument("jobId", "An analytical job id (cj_...)."),
            output: replies::job_artifacts(),
            hints: READ,
        },
        Tool {
            name: "get_job_logs",
            title: "Read a job's log",
            description: "stdout and stderr of an ended attempt (default: the current one), up to 1 MiB. Free.".into(),
            input: arguments(
                json!({
                    "jobId": {"type": "string", "minLength": 1, "description": "An analytical job id (cj_...)."},
                    "attempt": {"type": "integer", "minimum": 1}
                }),
                &["jobId"],
            ),
            output: replies::object(json!({
                "jobId": {"type": "string"},
                "attempt": {"type": "integer", "minimum": 1},
                "artifactId": {"type": "string"},
                "truncated": {"type": "boolean"},
                "log": {"type": "string"}
            })),
            hints: READ,
        },
        Tool {
            name: "lease_session",
            title: "Lease a browser session",
            description: format!(
                "Leases a remote Chromium for 1 to 240 minutes (default 30) and returns a CDP URL to connect \
                 to. Costs {} per hour of ready time; the whole lifetime is reserved now and the unused part \
                 released when it ends.",
                euros(SESSION_MICROS_PER_HOUR)
            ),
            input: shapes::new_session(),
            output: replies::session_lease(),
            hints: Hints { read_only: false, destructive: false, idempotent: false, open_world: true },
        },
        Tool {
            name: "list_sessions",
            title: "List browser sessions",
            description: "Your live sessions with their status and attestation (without their CDP URLs). Free.".into(),
            input: arguments(json!({}), &[]),
            output: sessions_list,
            hints: READ,
        },
        Tool {
            name: "release_session",
            title: "Release a browser session",
            description: "Ends a session at once; its CDP URL stops working and it is charged for the ready \
                          time so far. Free."
                .into(),
            input: id_argument("sessionId", "The sessionId lease_session answered."),
            output: replies::object(json!({"sessionId": {"type": "string"}, "released": {"const": true}})),
            hints: Hints { read_only: false, destructive: true, idempotent: true, open_world: false },
        },
        Tool {
            name: "list_session_downloads",
            title: "List a session's downloads",
            description: "The files your session's pages downloaded (name, size, a 15-minute download URL each), \
                          what the grid refused over the session's download limit, and until when the files are \
                          kept after the session ends. Free."
                .into(),
            input: id_argument("sessionId", "The sessionId lease_session answered."),
            output: replies::session_downloads(),
            hints: READ,
        },
        Tool {
            name: "get_session_recording",
            title: "Get a session's recording",
            description: "For a session leased with recording: true and since ended, a 15-minute URL of its \
                          replay page (one HTML file of the pages' screencast frames with a small player), its \
                          size, frame count, duration and whether it stopped at the session's bound. A live \
                          session's recording is not ready until it ends. Free."
                .into(),
            input: id_argument("sessionId", "The sessionId lease_session answered."),
            output: replies::session_recording(),
            hints: READ,
        },
        Tool {
            name: "create_context",
            title: "Create a browser context",
            description: "A persistent context of your account: lease_session with context {id, persist: true} \
                          starts the browser with its cookies and local storage and saves them back when the \
                          session ends, so a site signed in once stays signed in. Free."
                .into(),
            input: arguments(json!({}), &[]),
            output: replies::context_created(),
            hints: Hints { read_only: false, destructive: false, idempotent: false, open_world: false },
        },
        Tool {
            name: "list_contexts",
            title: "List browser contexts",
            description: "Your persistent contexts: size, when created, last used and saved, the session holding \
                          each. Free."
                .into(),
            input: arguments(json!({}), &[]),
            output: contexts_list,
            hints: READ,
        },
        Tool {
            name: "delete_context",
            title: "Delete a browser context",
            description: "Deletes a context and its saved cookies and storage; refused while a live session holds \
                          it. Free."
                .into(),
            input: id_argument("contextId", "The contextId create_context answered."),
            output: replies::object(json!({"contextId": {"type": "string"}, "deleted": {"const": true}})),
            hints: Hints { read_only: false, destructive: true, idempotent: true, open_world: false },
        },
    ];
    tools.extend(OneCall::ALL.map(one_call_tool));
    tools.extend(browser_tools::TOOLS.iter().map(|t| Tool {
        name: t.name,
        title: t.title,
        description: format!(
            "{} Drives a session you leased (lease_session), by its sessionId, through the same gate as a CDP \
             client; free beyond the session's own time.",
            t.description
        ),
        input: browser_tools::input_schema(t.name),
        output: browser_tools::output_schema(),
        hints: if t.read_only {
            Hints { read_only: true, destructive: false, idempotent: true, open_world: true }
        } else {
            Hints { read_only: false, destructive: false, idempotent: false, open_world: true }
        },
    }));
    tools
}

/// The tool name of a one-call capture.
/// The one-call capture a tool name names.
fn one_call_named(name: &str) -> Option<OneCall> {
    OneCall::ALL.into_iter().find(|c| one_call_name(*c) == name)
}

fn one_call_name(call: OneCall) -> &'static str {
    match call {
        OneCall::Screenshot => "capture_screenshot",
        OneCall::Pdf => "capture_pdf",
        OneCall::Content => "capture_content",
    }
}

/// POST /screenshot, /pdf or /content as a tool: the file comes back as
/// content (the screenshot as an image you see), its item in
/// `structuredContent`.
fn one_call_tool(call: OneCall) -> Tool {
    let script = call.script();
    let (title, what) = match call {
        OneCall::Screenshot => ("Screenshot a page", "the page's screenshot, returned as an image you can see"),
        OneCall::Pdf => {
            ("Print a page as PDF", "the page printed as a PDF, returned as an embedded application/pdf resource")
        }
        OneCall::Content => ("Read a page's HTML", "the page's HTML after its scripts ran, returned as embedded text"),
    };
    Tool {
        name: one_call_name(call),
        title,
        description: format!(
            "Opens one URL in the grid's browser and answers {what}, in one call (no batch to poll). Runs the {} \
             script: its options are in the input schema beside url. Costs {} µ€, reserved now, charged when it \
             succeeds, released if it fails; tried once. Files larger than {} KiB come back as a 15-minute \
             download URL instead.",
            script.as_str(),
            script.price_micros(),
            inline_limit(call.answers()) / 1024
        ),
        input: shapes::one_call_body(call),
        output: one_call_output(),
        hints: Hints { read_only: false, destructive: false, idempotent: false, open_world: true },
    }
}

fn one_call_output() -> Value {
    let mut out = replies::object(json!({
        "jobId": {"type": "string", "description": "The capture item that made the file (get_job, get_capture)."},
        "batchId": {"type": "string"},
        "chargedMicros": {"type": "integer", "minimum": 0},
        "contentType": {"type": "string"},
        "byteLength": {"type": "integer", "minimum": 0},
        "inline": {"type": "boolean", "description": "Whether the file is in this result's content."},
        "targetStatus": {"type": ["integer", "null"], "description": "The page's HTTP status."},
        "url": {"type": "string", "format": "uri", "description": "A download URL (15 minutes) for a file too large to inline."}
    }));
    // Only a file too large to inline has a URL.
    if let Some(Value::Array(required)) = out.get_mut("required") {
        required.retain(|r| r != "url");
    }
    out
}

fn capture_output() -> Value {
    let mut out = replies::capture_item();
    let file = json!({
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": ArtifactKind::ALL.map(ArtifactKind::as_str)},
            "present": {"type": "boolean", "description": "Whether the item has published this file."},
            "contentType": {"type": "string"},
            "byteLength": {"type": "integer", "minimum": 0},
            "inline": {"type": "boolean", "description": "Whether it is in this result's content."},
            "url": {"type": "string", "format": "uri", "description": "A download URL (15 minutes) for a file too large to inline."}
        },
        "required": ["kind", "present", "inline"]
    });
    out["properties"]["files"] = json!({"type": "array", "items": file});
    if let Some(Value::Array(required)) = out.get_mut("required") {
        required.push(json!("files"));
    }
    out
}

/// `tools/list`'s tools.
pub fn tools() -> Vec<Value> {
    tools_table().iter().map(Tool::listed).collect()
}

/// Why a tool's arguments make no call.
#[derive(Debug)]
pub enum ToolError {
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
        "list_batches" => Call::ListBatches(batch_list_query_pairs(args).map_err(ToolError::Refused)?),
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
        "list_session_downloads" => Call::SessionDownloads(string_arg(args, "sessionId")?),
        "get_session_recording" => Call::SessionRecording(string_arg(args, "sessionId")?),
        "create_context" => Call::CreateContext,
        "list_contexts" => Call::ListContexts,
        "delete_context" => Call::DeleteContext(string_arg(args, "contextId")?),
        other if browser_tools::is_browser_tool(other) => {
            Call::BrowserTool { tool: other.to_string(), arguments: args.clone() }
        }
        other => match one_call_named(other) {
            Some(call) => Call::OneCall { call, body: body() },
            None => return Err(ToolError::Params(format!("Unknown tool: {other}"))),
        },
    })
}

fn refusal(e: &ApiError) -> Value {
    json!({
        "content": [{"type": "text", "text": e.row().body().to_string()}],
        "isError": true,
    })
}

fn success(text: String, structured: Value, mut more: Vec<Value>) -> Value {
    let mut content = vec![json!({"type": "text", "text": text})];
    content.append(&mut more);
    json!({"content": content, "structuredContent": structured, "isError": false})
}

/// Runs a tool. `Err` is a JSON-RPC invalid-params error (unknown tool or
/// arguments that do not name the call); the call's own refusals come back
/// as a tool result with `isError: true`.
pub async fn call(app: &Arc<App>, caller: &Caller, name: &str, args: &Map<String, Value>) -> Result<Value, String> {
    if name == "get_capture" {
        return get_capture(app, caller, args).await;
    }
    let call = match to_call(name, args) {
        Ok(call) => call,
        Err(ToolError::Refused(e)) => return Ok(refusal(&e)),
        Err(ToolError::Params(message)) => return Err(message),
    };
    let released = match &call {
        Call::ReleaseSession(id) => Some(id.clone()),
        _ => None,
    };
    let deleted = match &call {
        Call::DeleteContext(id) => Some(id.clone()),
        _ => None,
    };
    let reply = match calls::perform(app, caller, call).await {
        Ok(r) if r.status < 400 => r,
        Ok(r) => {
            // Not produced today: every refusal is an ApiError.
            return Ok(json!({
                "content": [{"type": "text", "text": String::from_utf8_lossy(r.bytes())}],
                "isError": true,
            }));
        }
        Err(e) => return Ok(refusal(&e)),
    };
    if let Some(session_id) = released {
        let out = json!({"sessionId": session_id, "released": true});
        return Ok(success(out.to_string(), out, vec![]));
    }
    if let Some(context_id) = deleted {
        let out = json!({"contextId": context_id, "deleted": true});
        return Ok(success(out.to_string(), out, vec![]));
    }
    Ok(match reply.body {
        ReplyBody::BrowserTool(tool) => browser_tool_result(tool),
        ReplyBody::Log(log) => job_log_result(string_arg(args, "jobId").unwrap_or_default(), log),
        ReplyBody::File(file) => {
            let kind = one_call_named(name).map_or(ArtifactKind::Screenshot, OneCall::answers);
            one_call_result(app, caller, kind, file).await
        }
        ReplyBody::Json(body) => {
            let text = String::from_utf8_lossy(&body).into_owned();
            // GET /contexts' and GET /sessions' arrays, each under its name
            // (an output schema's root is an object).
            let listed = match name {
                "list_contexts" => Some("contexts"),
                "list_sessions" => Some("sessions"),
                _ => None,
            };
            match listed {
                Some(field) => {
                    let items: Value = serde_json::from_slice(&body).unwrap_or(json!([]));
                    success(text, json!({ field: items }), vec![])
                }
                None => success(text, serde_json::from_slice(&body).unwrap_or(json!({})), vec![]),
            }
        }
        ReplyBody::Empty => success(String::new(), json!({}), vec![]),
    })
}

/// `get_job_logs`: the log as text, and with its attempt's facts as
/// `structuredContent`.
fn job_log_result(job_id: String, log: JobLog) -> Value {
    let text = String::from_utf8_lossy(&log.text).into_owned();
    let structured = json!({
        "jobId": job_id,
        "attempt": log.attempt,
        "artifactId": log.artifact_id,
        "truncated": log.truncated,
        "log": text,
    });
    success(text, structured, vec![])
}

/// A one-call capture's file as content, within `inline_limit` (beyond it,
/// its download URL), and its item as `structuredContent`.
async fn one_call_result(app: &Arc<App>, caller: &Caller, kind: ArtifactKind, captured: CapturedFile) -> Value {
    let byte_length = captured.bytes.len();
    let file = ItemFile {
        kind,
        content_type: captured.content_type.clone(),
        byte_length: byte_length as u64,
        bytes: (byte_length as u64 <= inline_limit(kind)).then_some(captured.bytes),
    };
    let mut structured = json!({
        "jobId": captured.job_id,
        "batchId": captured.batch_id,
        "chargedMicros": captured.charged_micros,
        "contentType": captured.content_type,
        "byteLength": byte_length,
        "inline": file.bytes.is_some(),
        "targetStatus": captured.target_status,
    });
    let mut content = vec![];
    match content_block(app, &captured.job_id, &file) {
        Some(block) => content.push(block),
        None => {
            if let Some((note, url)) = too_large_to_inline(app, caller, &captured.job_id, &file).await {
                content.push(note);
                structured["url"] = json!(url);
            }
        }
    }
    success(structured.to_string(), structured, content)
}

/// A browser tool's answer as content (docs/mcp.md, "Browser tools"): the
/// tab's URL and title, the tool's value and the page's snapshot as text,
/// the same as `structuredContent`, a screenshot as an image.
fn browser_tool_result(tool: ToolAnswer) -> Value {
    let ToolAnswer { session_id, answer: a } = tool;
    let mut text = format!("URL: {}\nTitle: {}", a.url, a.title);
    let mut structured = json!({"sessionId": session_id, "url": a.url, "title": a.title});
    if let Some(result) = a.result {
        match &a.lines {
            Some(lines) => text.push_str(&format!("\n\n{lines}")),
            None => text.push_str(&format!("\nResult: {result}")),
        }
        // A large value is answered once, as text every client reads.
        if a.lines.is_some() || text.len() <= STRUCTURED_RESULT_MAX {
            structured["result"] = result;
        } else {
            structured["resultInText"] = json!(true);
        }
    }
    if let Some(cut) = a.cut {
        text.push_str(&format!(
            "\nResult (cut: its JSON is {} characters, longer than the {} MiB a tool answers; its start \
             follows. Evaluate a smaller part of it to read the rest):\n{}",
            cut.total_chars,
            browser_tools::MAX_RESULT_CHARS >> 20,
            cut.kept
        ));
        structured["resultCut"] = json!({"totalChars": cut.total_chars, "keptChars": cut.kept.chars().count()});
    }
    if let Some(snapshot) = &a.snapshot {
        text.push_str(&format!("\n\nPage snapshot:\n{snapshot}"));
        structured["snapshot"] = json!(snapshot);
    }
    let more = a
        .image
        .map(|png| {
            vec![json!({"type": "image", "mimeType": "image/png",
                        "data": base64::engine::general_purpose::STANDARD.encode(png)})]
        })
        .unwrap_or_default();
    success(text, structured, more)
}

/// The longest answer that carries a browser tool's value both as text and
/// as `structuredContent.result`; a longer value is sent once, as text
/// (`resultInText`), so an answer is never a large value twice.
const STRUCTURED_RESULT_MAX: usize = 1 << 20;

/// `get_capture`: the item (as get_job answers it) and the included files
/// as MCP content: the screenshot as an image, the others as embedded text
/// (or base64 `blob`, for a body that is not UTF-8), each bounded
/// (`inline_limit`); a larger one is named with a download URL.
async fn get_capture(app: &Arc<App>, caller: &Caller, args: &Map<String, Value>) -> Result<Value, String> {
    let id = match string_arg(args, "jobId") {
        Ok(id) => id,
        Err(ToolError::Params(m)) => return Err(m),
        Err(ToolError::Refused(e)) => return Ok(refusal(&e)),
    };
    let include = match args.get("include") {
        None | Some(Value::Null) => vec![ArtifactKind::Screenshot, ArtifactKind::Meta],
        Some(Value::Array(kinds)) => {
            let mut out = vec![];
            for k in kinds {
                match k.as_str().and_then(ArtifactKind::parse) {
                    Some(kind) if !out.contains(&kind) => out.push(kind),
                    Some(_) => {}
                    None => return Ok(refusal(&ApiError::BadArtifactKind)),
                }
            }
            out
        }
        Some(_) => return Err("arguments.include: must be an array of file kinds".into()),
    };
    // An analytical job has no capture files; answered as cancel and logs
    // answer a capture item id.
    if is_compute(&id) {
        return Ok(refusal(&ApiError::UnknownItemOrJob));
    }
    let item = match calls::perform(app, caller, Call::GetJob(id.clone())).await {
        Ok(r) => r,
        Err(e) => return Ok(refusal(&e)),
    };
    let files = match read_files(app, caller, &id, &include, inline_limit).await {
        Ok(f) => f,
        Err(e) => return Ok(refusal(&e)),
    };
    let mut structured: Value = serde_json::from_slice(item.bytes()).unwrap_or(json!({}));
    let mut listed = vec![];
    let mut content = vec![];
    for kind in include {
        let Some(file) = files.iter().find(|f| f.kind == kind) else {
            listed.push(json!({"kind": kind.as_str(), "present": false, "inline": false}));
            continue;
        };
        let mut entry = json!({
            "kind": kind.as_str(),
            "present": true,
            "contentType": file.content_type,
            "byteLength": file.byte_length,
            "inline": file.bytes.is_some(),
        });
        match content_block(app, &id, file) {
            Some(block) => content.push(block),
            None => {
                if let Some((note, url)) = too_large_to_inline(app, caller, &id, file).await {
                    content.push(note);
                    entry["url"] = json!(url);
                }
            }
        }
        listed.push(entry);
    }
    structured["files"] = Value::Array(listed);
    Ok(success(structured.to_string(), structured, content))
}

/// For a file too large to return inline: a text block naming its
/// 15-minute download URL, and the URL.
async fn too_large_to_inline(app: &Arc<App>, caller: &Caller, id: &str, file: &ItemFile) -> Option<(Value, String)> {
    let kind = file.kind;
    let url = calls::perform(app, caller, Call::ArtifactUrl { item: id.to_string(), kind: kind.as_str().into() })
        .await
        .ok()
        .and_then(|r: Reply| serde_json::from_slice::<Value>(r.bytes()).ok())
        .and_then(|v| v["url"].as_str().map(str::to_string))?;
    let note = json!({"type": "text", "text": format!(
        "{} is {} bytes, more than returned inline ({} bytes); download it within 15 minutes: {url}",
        kind.as_str(), file.byte_length, inline_limit(kind)
    )});
    Some((note, url))
}

/// A file as MCP content, or `None` when it was too large to read.
fn content_block(app: &App, id: &str, file: &ItemFile) -> Option<Value> {
    let bytes = file.bytes.as_ref()?;
    let b64 = || base64::engine::general_purpose::STANDARD.encode(bytes);
    let mime = file.content_type.split(';').next().unwrap_or("").trim().to_string();
    if file.kind == ArtifactKind::Screenshot {
        return Some(json!({"type": "image", "mimeType": mime, "data": b64()}));
    }
    // The API address that hands out this file's download URL: a stable
    // name for the resource (the download URL itself expires).
    let uri = format!("{}/artifacts/{id}/{}", app.config.base_url, file.kind.as_str());
    let resource = match std::str::from_utf8(bytes) {
        Ok(text) => json!({"uri": uri, "mimeType": mime, "text": text}),
        Err(_) => json!({"uri": uri, "mimeType": mime, "blob": b64()}),
    };
    Some(json!({"type": "resource", "resource": resource}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_is_listed_with_schemas_annotations_and_a_call() {
        let names: Vec<String> = tools().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
        for required in ["grid_status", "submit_batch", "lease_session", "submit_compute_job", "retry_job"] {
            assert!(names.contains(&required.to_string()), "{required} missing");
        }
        for t in tools() {
            let name = t["name"].as_str().unwrap();
            assert_eq!(t["inputSchema"]["type"], "object", "{name}");
            // Older clients (protocol 2025-06-18, 2025-11-25) require an
            // object at the root of an output schema.
            assert_eq!(t["outputSchema"]["type"], "object", "{name}");
            for hint in ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"] {
                assert!(t["annotations"][hint].is_boolean(), "{name} {hint}");
            }
            assert!(t["title"].is_string() && t["description"].as_str().unwrap().len() > 20, "{name}");
            // Some model APIs refuse a tool whose input schema composes at the top.
            for k in ["oneOf", "anyOf", "allOf"] {
                assert!(t["inputSchema"].get(k).is_none(), "{name} {k}");
            }
            if name == "get_capture" {
                continue;
            }
            // A browser tool drives a session: good arguments of its schema read.
            if browser_tools::is_browser_tool(name) {
                let good = json!({"sessionId": "ses_1", "url": "http://a.test/", "ref": "e1", "text": "x",
                                  "fields": [{"ref": "e1", "value": "x"}], "key": "Enter", "values": ["a"],
                                  "timeMs": 0, "expression": "1", "action": "list", "startRef": "e1", "endRef": "e2",
                                  "files": [{"name": "a.txt", "contentBase64": "aGk="}]});
                let mut args = good.as_object().cloned().unwrap_or_default();
                args.retain(|k, _| t["inputSchema"]["properties"].get(k).is_some());
                assert!(browser_tools::parse(name, &args).is_ok(), "{name}: {:?}", browser_tools::parse(name, &args));
                continue;
            }
            // Every other tool maps to a call (arguments aside).
            let mut args = Map::new();
            for f in t["inputSchema"]["required"].as_array().unwrap() {
                args.insert(f.as_str().unwrap().into(), json!("x"));
            }
            assert!(to_call(name, &args).is_ok(), "{name}");
        }
    }

    #[test]
    fn costs_are_in_the_descriptions_of_billable_tools() {
        let description = |name: &str| {
            tools().into_iter().find(|t| t["name"] == name).unwrap()["description"].as_str().unwrap().to_string()
        };
        assert!(description("submit_batch").contains("fetch 120 µ€"), "{}", description("submit_batch"));
        assert!(description("submit_batch").contains("capture 1000 µ€"));
        assert!(description("lease_session").contains("0.07 € per hour"), "{}", description("lease_session"));
        assert!(description("submit_compute_job").contains("0.04 € per vCPU-hour"));
        assert!(description("submit_compute_job").contains("0.0064 € per GiB-hour"));
        assert!(description("get_batch").ends_with("Free."));
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
    fn list_batches_arguments_become_query_pairs() {
        let args = json!({"limit": 5, "cursor": "c"});
        let Ok(Call::ListBatches(q)) = to_call("list_batches", args.as_object().unwrap()) else {
            panic!("list_batches is a ListBatches call");
        };
        assert_eq!(q, [("cursor".to_string(), "c".to_string()), ("limit".into(), "5".into())]);
        match to_call("list_batches", json!({"phase": "RUNNING"}).as_object().unwrap()) {
            Err(ToolError::Refused(ApiError::InvalidListQuery { detail })) => {
                assert_eq!(detail, ["phase: unknown parameter; one of limit, cursor"])
            }
            other => panic!("expected INVALID_LIST_QUERY, got {other:?}"),
        }
    }

    #[test]
    fn request_tools_publish_the_request_and_reply_shapes() {
        let tool = |name: &str| tools().into_iter().find(|t| t["name"] == name).unwrap();
        assert_eq!(tool("submit_batch")["inputSchema"], shapes::new_batch());
        assert_eq!(tool("submit_compute_job")["inputSchema"], shapes::new_job());
        assert_eq!(tool("lease_session")["inputSchema"], shapes::new_session());
        assert_eq!(tool("list_jobs")["inputSchema"], shapes::job_list_query());
        assert_eq!(tool("submit_batch")["outputSchema"], replies::batch_created());
        assert_eq!(tool("lease_session")["outputSchema"], replies::session_lease());
        assert_eq!(tool("list_jobs")["outputSchema"], replies::job_list());
        assert_eq!(tool("list_batches")["inputSchema"], shapes::batch_list_query());
        assert_eq!(tool("list_batches")["outputSchema"], replies::batch_list());
        assert_eq!(tool("list_session_downloads")["outputSchema"], replies::session_downloads());
        assert_eq!(tool("get_session_recording")["outputSchema"], replies::session_recording());
    }
}
