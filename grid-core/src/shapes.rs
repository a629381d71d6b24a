//! The JSON Schema of each request: the one definition of its shape (field
//! names, which are required, bounds, enums, patterns, defaults) that the
//! MCP tools publish as their input schemas and an API description can
//! reuse. Bounds and vocabularies are the validators' constants and the
//! catalog's lists, not copies of them; `grid-core/tests/shapes.rs` proves,
//! driven by these schemas, that each agrees with its wire type (`wire::*`,
//! what the SDK sends) and its validator (`validate::*`, what the server
//! accepts) on every field, bound and enum.
//!
//! Keywords are JSON Schema 2020-12. A quantity string (`"250m"`, `"1Gi"`)
//! also carries its bounds as `x-minimum` and `x-maximum` (quantity strings;
//! numeric `minimum` cannot bound a string) and its grammar as `format`
//! `cpu-quantity` or `byte-quantity` (`validate::quantity`).

use serde_json::{json, Value};

use crate::catalog::{Profile, Script, PUBLIC_WEB_ONLY_V1};
use crate::validate::quantity::{format_bytes, format_cpu_millis, BYTE_QUANTITY_PATTERN, CPU_QUANTITY_PATTERN};
use crate::validate::{batch, job, list, session};
use crate::wire::job::{JobPhase, NetworkProfile};

/// The body of POST /batches (`wire::batch::NewBatch`). `params` is an
/// object whose members depend on `script`, checked when each item runs
/// (docs/captures.md, docs/browser-captures.md); a schema per script is not
/// written yet.
pub fn new_batch() -> Value {
    object(
        json!({
            "urls": {
                "type": "array",
                // An http(s) scheme and the start of a host: no pattern can
                // say all the URL standard's parser accepts (it takes
                // `http:a.example` and `http:\\a.example`), but every URL it
                // refuses for want of a host fails this; the server parses the rest.
                "items": {"type": "string", "format": "uri", "pattern": "^[hH][tT][tT][pP][sS]?:[/\\\\]*[^/\\\\?#]"},
                "minItems": batch::MIN_URLS,
                "maxItems": batch::MAX_URLS,
                "description": "Absolute http or https URLs, one capture item each."
            },
            "script": {
                "type": "string",
                "enum": Script::ALL.map(Script::as_str),
                "default": Script::DEFAULT.as_str()
            },
            "profileId": profile_id(),
            "params": {
                "type": "object",
                "default": {},
                "description": "Script parameters, checked when each item runs: which ones each script takes is in docs/captures.md and docs/browser-captures.md."
            },
            "priority": {
                "type": "integer",
                "minimum": batch::MIN_PRIORITY,
                "maximum": batch::MAX_PRIORITY,
                "description": "Lower runs sooner; items without priority run first."
            }
        }),
        &["urls"],
    )
}

/// The body of POST /jobs (`wire::job::NewJob`).
pub fn new_job() -> Value {
    let strings =
        |min: usize, max: usize| json!({"type": "array", "items": no_nul_string(), "minItems": min, "maxItems": max});
    let mut args = strings(0, job::MAX_ARGS);
    args["default"] = json!([]);
    let reserved = job::RESERVED_ENV_PREFIXES
        .iter()
        .map(|prefix| json!({"pattern": format!("^{prefix}")}))
        .chain([json!({"enum": job::RESERVED_ENV_NAMES})])
        .collect::<Vec<_>>();
    object(
        json!({
            "image": {
                "type": "string",
                "minLength": 1,
                "description": "[registry/]repository[:tag][@sha256:digest] in a repository admitted on the grid's registry."
            },
            "command": strings(job::MIN_COMMAND, job::MAX_COMMAND),
            "args": args,
            "resources": object(
                json!({
                    "cpu": quantity(Quantity::Cpu, job::MIN_CPU_MILLIS, job::MAX_CPU_MILLIS),
                    "memory": quantity(Quantity::Bytes, job::MIN_MEMORY_BYTES, job::MAX_MEMORY_BYTES),
                    "ephemeralStorage": quantity(
                        Quantity::Bytes,
                        job::MIN_EPHEMERAL_STORAGE_BYTES,
                        job::MAX_EPHEMERAL_STORAGE_BYTES
                    )
                }),
                &["cpu", "memory", "ephemeralStorage"],
            ),
            "runningDeadlineSeconds": {
                "type": "integer",
                "minimum": job::MIN_RUNNING_DEADLINE_SECONDS,
                "maximum": job::MAX_RUNNING_DEADLINE_SECONDS
            },
            "retries": {"type": "integer", "minimum": job::MIN_RETRIES, "maximum": job::MAX_RETRIES, "default": 0},
            "priority": {
                "type": "integer",
                "minimum": job::MIN_PRIORITY,
                "maximum": job::MAX_PRIORITY,
                "default": 0,
                "description": "Higher runs sooner."
            },
            "capabilities": object(
                json!({"networkProfile": {"type": "string", "enum": NetworkProfile::ALL.map(NetworkProfile::as_str)}}),
                &["networkProfile"],
            ),
            "env": {
                "type": "object",
                "maxProperties": job::MAX_ENV,
                "propertyNames": {"pattern": job::ENV_NAME_PATTERN, "not": {"anyOf": reserved}},
                "additionalProperties": no_nul_string()
            },
            "labels": {
                "type": "object",
                "maxProperties": job::MAX_LABELS,
                "propertyNames": {"pattern": job::LABEL_PATTERN},
                "additionalProperties": label_value()
            },
            "idempotencyKey": {
                "type": "string",
                "minLength": job::MIN_IDEMPOTENCY_KEY_CHARS,
                "maxLength": job::MAX_IDEMPOTENCY_KEY_CHARS
            }
        }),
        &["image", "command", "resources", "runningDeadlineSeconds", "capabilities", "env", "labels", "idempotencyKey"],
    )
}

/// The body of POST /sessions (`wire::session::NewSession`).
pub fn new_session() -> Value {
    object(
        json!({
            "profileId": profile_id(),
            "ttlMinutes": {
                "type": "integer",
                "minimum": session::MIN_TTL_MINUTES,
                "maximum": session::MAX_TTL_MINUTES,
                "default": session::DEFAULT_TTL_MINUTES
            },
            "network": {
                "type": "string",
                "enum": [PUBLIC_WEB_ONLY_V1],
                "description": "Leave out for the grid's ordinary network access."
            }
        }),
        &[],
    )
}

/// The parameters of GET /jobs as one object (`label` holds the one
/// `label.<key>` filter as `{key: value}`); `validate::list::query_pairs`
/// turns it into the query the call reads.
pub fn job_list_query() -> Value {
    object(
        json!({
            "limit": {"type": "integer", "minimum": list::MIN_LIMIT, "maximum": list::MAX_LIMIT, "default": list::DEFAULT_LIMIT},
            "cursor": {"type": "string", "description": "nextCursor of the previous page"},
            "phase": {"type": "string", "enum": JobPhase::ALL.map(JobPhase::as_str)},
            "label": {
                "type": "object",
                "maxProperties": list::MAX_LABEL_FILTERS,
                "propertyNames": {"pattern": job::LABEL_PATTERN},
                "additionalProperties": label_value(),
                "description": "one label filter, {key: value}"
            }
        }),
        &[],
    )
}

/// GET /account's parameters (the `get_account` tool's arguments).
pub fn account_query() -> Value {
    object(
        json!({
            "limit": {"type": "integer", "minimum": list::MIN_LIMIT, "maximum": list::MAX_LIMIT, "default": list::DEFAULT_LIMIT},
            "cursor": {"type": "string", "description": "nextCursor of the previous page"},
            "kind": {"type": "string", "enum": crate::ledger::EntryKind::ALL.map(crate::ledger::EntryKind::as_str)}
        }),
        &[],
    )
}

/// An object with exactly these properties: the validators refuse any
/// other member (the contract: "Other fields are refused").
fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

fn profile_id() -> Value {
    json!({"type": "string", "enum": Profile::ALL.map(Profile::as_str), "default": Profile::DEFAULT.as_str()})
}

/// A string a process can receive: no NUL character.
fn no_nul_string() -> Value {
    json!({"type": "string", "pattern": "^[^\\u0000]*$"})
}

/// A label value: empty, or what a label key may be.
fn label_value() -> Value {
    let rule = job::LABEL_PATTERN.trim_start_matches('^').trim_end_matches('$');
    json!({"type": "string", "pattern": format!("^({rule})?$")})
}

#[derive(Clone, Copy)]
enum Quantity {
    Cpu,
    Bytes,
}

/// `{request, limit}` of one resource, both within `[min, max]`.
fn quantity(kind: Quantity, min: u64, max: u64) -> Value {
    let (format, pattern, min, max) = match kind {
        Quantity::Cpu => ("cpu-quantity", CPU_QUANTITY_PATTERN, format_cpu_millis(min), format_cpu_millis(max)),
        Quantity::Bytes => ("byte-quantity", BYTE_QUANTITY_PATTERN, format_bytes(min), format_bytes(max)),
    };
    let bound = json!({"type": "string", "format": format, "pattern": pattern, "x-minimum": min, "x-maximum": max});
    let mut o = object(json!({"request": bound, "limit": bound}), &["request", "limit"]);
    o["description"] = json!(format!("Quantities from {min} to {max}; request no more than limit."));
    o
}
