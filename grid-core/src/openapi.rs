//! The OpenAPI 3.1 document of the API, served at GET /openapi.json.
//!
//! Nothing in it is written twice: the paths are the router's own route
//! table (`routes::Route::ALL`, one operation per route), request bodies
//! and query parameters are the request schemas (`shapes`), answers are the
//! answer schemas (`reply_shapes`, held to the wire types by
//! `tests/reply_shapes.rs`), and every refusal is rendered from its row of
//! the error table (`ApiError::row`: status, `error` string, extra fields,
//! `retry-after`). What is written here is which refusals each route can
//! give (the contract's per-endpoint lists, with the rows docs/ added) and
//! the prose. docs/openapi.md says what the document leaves out.
//!
//! Shared shapes are named: the schemas `shapes::named` and
//! `reply_shapes::named` name, the CDP and MCP bodies below and every
//! row of the error table are `components.schemas`, and each place of the
//! document whose schema is one of them (or it or null) refers to it
//! (`replace`). Nothing is named per route, so an operation that
//! reuses a shape refers to its name without more.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::catalog::ArtifactKind;
use crate::error::{every_variant, ApiError};
use crate::idempotency;
use crate::reply_shapes as replies;
use crate::routes::{Access, Route};
use crate::shapes;
use crate::validate::one_call::OneCall;
use crate::validate::params::ImageFormat;

/// The OpenAPI version the document is written in.
pub const OPENAPI_VERSION: &str = "3.1.0";

/// The whole document, for a grid whose public address is `base_url`.
pub fn document(base_url: &str) -> Value {
    let mut doc = inline_document(base_url);
    let named = named_schemas();
    let names = Names::new(&named);
    replace_children(&mut doc, &names);
    let mut schemas = Map::new();
    for (name, schema) in &named {
        let mut body = schema.clone();
        replace_children(&mut body, &names);
        schemas.insert(name.clone(), body);
    }
    doc["components"]["schemas"] = Value::Object(schemas);
    doc
}

/// Whether a route is in the document: the nodes' calls to each other
/// (`Access::Node`, `/internal/...`) are no client's, so they are left out
/// of it (docs/scale-out.md says what they do); the router still answers them.
pub fn published(route: Route) -> bool {
    route.access() != Access::Node
}

/// The document with every schema written out where it is used.
fn inline_document(base_url: &str) -> Value {
    let mut paths: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
    for route in Route::ALL.into_iter().filter(|r| published(*r)) {
        paths.entry(route.template()).or_default().insert(route.method().to_ascii_lowercase(), operation(route));
    }
    json!({
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "Grid API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "A remote-browser grid: capture batches, analytical container jobs and leased browser \
                sessions, metered against the account's credit, and an MCP endpoint exposing the same calls as \
                tools. Money is in integer micro-euros. Error bodies are `{\"error\": ...}` with the extra fields \
                each error names."
        },
        "servers": [{"url": base_url}],
        "security": credential(),
        "tags": TAGS.iter().map(|(name, description)| json!({"name": name, "description": description})).collect::<Vec<_>>(),
        "paths": paths,
        "components": {
            // Answers to requests no operation describes: kept here so a
            // client knows their bodies too.
            "responses": {
                "RouteNotFound": unrouted(&ApiError::RouteNotFound, "A path no route has."),
                "MethodNotAllowed": unrouted(
                    &ApiError::MethodNotAllowed,
                    "A method the path's routes do not have; `Allow` lists those they have. (POST /mcp's other methods answer in JSON-RPC form.)"
                )
            },
            "securitySchemes": {
                "apiKey": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "x-api-key",
                    "description": "An API key (`grid_...`)."
                },
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API key, or an access token from the grid's sign-in whose audience is the \
                        grid's address (`{base_url}/mcp` for POST /mcp)."
                }
            }
        }
    })
}

/// The schemas the document names, by name: the request and answer shapes
/// that have one, the CDP bodies and MCP answers (not the MCP request body:
/// openapi-python-client 0.29 fails on a named `oneOf` of objects), the file kinds, and one per
/// refusal of the error table (`{Variant}Error`, e.g.
/// `InsufficientCreditError`), plus `Error`, what every refusal's body is.
fn named_schemas() -> Vec<(String, Value)> {
    let mut named = shapes::named();
    named.extend(replies::named().into_iter().map(|(name, schema)| (name.to_string(), schema)));
    named.extend(
        [
            ("ArtifactKind", path_parameter("kind")["schema"].clone()),
            ("CdpVersion", cdp::version()),
            ("CdpTarget", cdp::target()),
            ("JsonRpcAnswer", mcp::rpc_answer()),
            ("JsonRpcError", mcp::rpc_error()),
            ("JsonRpcErrorObject", mcp::rpc_error_object()),
            ("Error", error_shape()),
        ]
        .map(|(name, schema)| (name.to_string(), schema)),
    );
    named.extend(
        every_variant()
            .iter()
            .filter(|e| !matches!(e, ApiError::NotImplemented { .. } | ApiError::BrowserToolFailed { .. }))
            .map(|e| (error_name(e), error_schema(e))),
    );
    named
}

/// The named schemas, and each one's nullable form where it has one.
struct Names<'a> {
    named: Vec<(&'a str, &'a Value, Option<Value>)>,
}

impl<'a> Names<'a> {
    fn new(named: &'a [(String, Value)]) -> Names<'a> {
        let nullable = |schema: &Value| {
            schema.get("type").is_some_and(Value::is_string).then(|| replies::nullable(schema.clone()))
        };
        Names { named: named.iter().map(|(name, schema)| (name.as_str(), schema, nullable(schema))).collect() }
    }
}

fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// Replaces `v`, if it is a named schema, with a reference to it, or if it
/// is a named one or null (`reply_shapes::nullable`) with `anyOf` of the
/// reference and null; else does so within it.
fn replace(v: &mut Value, names: &Names) {
    if v.is_object() {
        if let Some((name, _, _)) = names.named.iter().find(|(_, schema, _)| *schema == v) {
            *v = reference(name);
            return;
        }
        if let Some((name, _, _)) = names.named.iter().find(|(_, _, nullable)| nullable.as_ref() == Some(v)) {
            *v = json!({"anyOf": [reference(name), {"type": "null"}]});
            return;
        }
    }
    replace_children(v, names);
}

fn replace_children(v: &mut Value, names: &Names) {
    match v {
        Value::Object(members) => members.values_mut().for_each(|m| replace(m, names)),
        Value::Array(items) => items.iter_mut().for_each(|i| replace(i, names)),
        _ => {}
    }
}

const TAGS: [(&str, &str); 9] = [
    ("meta", "Health, OAuth protected-resource metadata and this document; no credential."),
    ("account", "The caller's own account and the grid's state."),
    ("captures", "Capture batches of 1 to 1,000 URLs; each URL is an item with published files."),
    ("jobs", "Analytical container jobs (ids start with `cj_`); GET /jobs/{jobId} and retry also take capture items."),
    ("sessions", "Leased remote browsers, reached over CDP at the lease's `cdpUrl`."),
    ("mcp", "The grid's calls as MCP tools (stateless Streamable HTTP)."),
    ("downloads", "Published capture files and a session's downloaded files behind short-lived signed URLs; the signature is the credential."),
    ("cdp", "A session's DevTools endpoint; the token in the path is the credential."),
    ("console", "The web console (docs/console.md): a page and its two assets, served from the binary with no credential; the page calls this API with the key a person gives it."),
];

/// A response object of the error table's row, for `components.responses`.
fn unrouted(e: &ApiError, description: &str) -> Value {
    let row = e.row();
    json!({
        "description": format!("{} {}: {description}", row.status, row.error),
        "content": {"application/json": {"schema": error_schema(e)}}
    })
}

/// The security requirement of a credentialed route: an API key in
/// `x-api-key`, or a bearer token (key or sign-in token).
fn credential() -> Value {
    json!([{"apiKey": []}, {"bearer": []}])
}

/// One operation as the document states it.
struct Operation {
    id: &'static str,
    tag: &'static str,
    summary: &'static str,
    description: Option<String>,
    /// Query and header parameters (path parameters come from the template).
    parameters: Vec<Value>,
    /// The JSON request body's schema.
    body: Option<Value>,
    /// What the route answers besides the refusals of the error table.
    answers: Vec<Answer>,
    /// The refusals of this route beyond those every route of its access
    /// kind can give (`common_errors`).
    errors: Vec<ApiError>,
}

/// One answer: a status, its content types and their schemas, and headers.
struct Answer {
    status: u16,
    description: String,
    content: Vec<(&'static str, Value)>,
    /// Header name, its schema and whether the answer always carries it.
    headers: Vec<(&'static str, Value, bool)>,
    /// OpenAPI links: operations the answer's ids lead to.
    links: Vec<(&'static str, Value)>,
}

impl Answer {
    fn json(status: u16, description: &str, schema: Value) -> Answer {
        Answer {
            status,
            description: description.into(),
            content: vec![("application/json", schema)],
            headers: vec![],
            links: vec![],
        }
    }

    fn empty(status: u16, description: &str) -> Answer {
        Answer { status, description: description.into(), content: vec![], headers: vec![], links: vec![] }
    }

    fn with_content(status: u16, description: &str, content_type: &'static str, schema: Value) -> Answer {
        Answer {
            status,
            description: description.into(),
            content: vec![(content_type, schema)],
            headers: vec![],
            links: vec![],
        }
    }

    /// Bytes of any of `content_types`.
    fn files(status: u16, description: &str, content_types: Vec<(&'static str, Value)>) -> Answer {
        Answer { status, description: description.into(), content: content_types, headers: vec![], links: vec![] }
    }

    fn header(mut self, name: &'static str, schema: Value, always: bool) -> Answer {
        self.headers.push((name, schema, always));
        self
    }

    /// A link to `operation_id`, whose `parameter` is the answer's value at
    /// `pointer` (a JSON pointer into the body); `fixed` are constant
    /// parameters.
    fn link(
        mut self,
        name: &'static str,
        operation_id: &str,
        parameter: &str,
        pointer: &str,
        fixed: &[(&str, &str)],
    ) -> Answer {
        let mut parameters = serde_json::Map::new();
        parameters.insert(parameter.into(), json!(format!("$response.body#{pointer}")));
        for (k, v) in fixed {
            parameters.insert((*k).into(), json!(v));
        }
        self.links.push((name, json!({"operationId": operation_id, "parameters": parameters})));
        self
    }

    /// A refusal, from its row of the error table.
    fn refusal(e: &ApiError) -> Answer {
        let row = e.row();
        let description = match e {
            ApiError::SessionLimitReached { .. } => "session limit reached: ...".into(),
            _ => row.error.to_string(),
        };
        let answer = Answer::json(row.status, &description, error_schema(e));
        match row.retry_after_secs {
            Some(_) => answer.header("retry-after", json!({"type": "integer", "minimum": 0}), true),
            None => answer,
        }
    }
}

/// What every refusal's body is: an object whose `error` says what was
/// refused, with the fields its row of the error table adds.
fn error_shape() -> Value {
    json!({
        "type": "object",
        "properties": {"error": {"type": "string"}},
        "required": ["error"],
        "description": "The body of every refusal: `error` says what was refused; some refusals add fields \
            (each refusal's own schema, `{Variant}Error`, names them)."
    })
}

/// The name of a refusal's schema: its variant's name and `Error`
/// (`InsufficientCreditError`).
fn error_name(e: &ApiError) -> String {
    let debug = format!("{e:?}");
    let variant: String = debug.chars().take_while(char::is_ascii_alphanumeric).collect();
    format!("{variant}Error")
}

/// The schema of a refusal's body: its `error` string and its extra fields,
/// typed as the row writes them.
fn error_schema(e: &ApiError) -> Value {
    let row = e.row();
    // The one `error` that carries a figure: the contract fixes its start.
    let error = match e {
        ApiError::SessionLimitReached { .. } => json!({"type": "string", "pattern": "^session limit reached: "}),
        _ => json!({"type": "string", "const": row.error}),
    };
    let mut properties = Map::new();
    properties.insert("error".into(), error);
    let mut required = vec!["error".to_string()];
    for (field, value) in &row.extra {
        let schema = match value {
            Value::Array(_) => json!({"type": "array", "items": {"type": "string"}}),
            Value::Number(_) => json!({"type": "integer"}),
            Value::String(_) if *field == "resetsAt" => json!({"type": "string", "format": "date-time"}),
            Value::String(_) => json!({"type": "string"}),
            other => json!({"type": json_type(other)}),
        };
        properties.insert((*field).into(), schema);
        required.push((*field).into());
    }
    json!({"type": "object", "properties": properties, "required": required})
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Refusals every route of an access kind can give. Any request whose
/// declared length is over the bound is refused before it is routed.
fn common_errors(access: Access) -> Vec<ApiError> {
    let mut errors = vec![ApiError::BodyTooLarge { limit_bytes: 0 }];
    match access {
        Access::Open => {}
        Access::Credential => errors.extend([
            ApiError::Unauthorized,
            ApiError::Forbidden,
            ApiError::RateLimited { retry_after_secs: 1 },
            ApiError::AccountingUnavailable,
            ApiError::Internal,
        ]),
        // Its 401 is its own (`mcp_answers`).
        Access::Mcp => errors.extend([
            ApiError::Forbidden,
            ApiError::RateLimited { retry_after_secs: 1 },
            ApiError::AccountingUnavailable,
            ApiError::Internal,
        ]),
        Access::SessionToken => errors.push(ApiError::UnknownSession),
        Access::SignedUrl => errors.extend([ApiError::DownloadLinkInvalid, ApiError::Internal]),
        // Without the nodes' credential the route is not there.
        Access::Node => errors.extend([ApiError::RouteNotFound, ApiError::Internal]),
    }
    errors
}

/// The refusals a billable call adds: the reservation's.
fn billing_errors() -> [ApiError; 3] {
    [
        ApiError::InsufficientCredit { required_micros: 0, available_micros: 0 },
        ApiError::DailyCapExceeded { cap_micros: 0, used_micros: 0, required_micros: 0, resets_at: String::new() },
        ApiError::AccountSuspended,
    ]
}

fn detail() -> Vec<String> {
    vec![]
}

fn operation(route: Route) -> Value {
    let op = describe(route);
    let mut parameters: Vec<Value> = route.parameters().into_iter().map(path_parameter).collect();
    parameters.extend(op.parameters);
    let mut answers = op.answers;
    // A body is read within a time (docs/limits.md).
    let slow = op.body.is_some().then_some(ApiError::BodyTooSlow { limit_secs: 0 });
    answers
        .extend(op.errors.iter().chain(common_errors(route.access()).iter()).chain(slow.iter()).map(Answer::refusal));
    let mut o = json!({
        "operationId": op.id,
        "tags": [op.tag],
        "summary": op.summary,
        "responses": responses(answers),
    });
    if let Some(d) = op.description {
        o["description"] = json!(d);
    }
    if !parameters.is_empty() {
        o["parameters"] = json!(parameters);
    }
    if let Some(schema) = op.body {
        o["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": schema}}});
    }
    match route.access() {
        // Not published (`published`).
        Access::Credential | Access::Mcp | Access::Node => {}
        // Open, or the credential is in the address itself.
        Access::Open | Access::SessionToken | Access::SignedUrl => o["security"] = json!([]),
    }
    o
}

/// Answers grouped by status: several answers of one status become one
/// response whose schema is any of theirs, with the headers they carry (a
/// header is required when every answer of the status carries it).
fn responses(answers: Vec<Answer>) -> Value {
    let mut by_status: BTreeMap<u16, Vec<Answer>> = BTreeMap::new();
    for a in answers {
        by_status.entry(a.status).or_default().push(a);
    }
    let mut out = Map::new();
    for (status, group) in by_status {
        let mut descriptions: Vec<String> = vec![];
        let mut content: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
        let mut headers: BTreeMap<&str, (Value, usize)> = BTreeMap::new();
        let mut links = Map::new();
        for a in &group {
            for (name, link) in &a.links {
                links.insert((*name).into(), link.clone());
            }
            if !descriptions.contains(&a.description) {
                descriptions.push(a.description.clone());
            }
            for (media, schema) in &a.content {
                let schemas = content.entry(media).or_default();
                if !schemas.contains(schema) {
                    schemas.push(schema.clone());
                }
            }
            for (name, schema, always) in &a.headers {
                let entry = headers.entry(name).or_insert((schema.clone(), 0));
                if *always {
                    entry.1 += 1;
                }
            }
        }
        let mut r = json!({"description": descriptions.join("; ")});
        if !content.is_empty() {
            let content: Map<String, Value> = content
                .into_iter()
                .map(|(media, mut schemas)| {
                    let schema = if schemas.len() == 1 { schemas.remove(0) } else { json!({"anyOf": schemas}) };
                    (media.to_string(), json!({"schema": schema}))
                })
                .collect();
            r["content"] = Value::Object(content);
        }
        if !headers.is_empty() {
            let headers: Map<String, Value> = headers
                .into_iter()
                .map(|(name, (schema, always))| {
                    (name.to_string(), json!({"schema": schema, "required": always == group.len()}))
                })
                .collect();
            r["headers"] = Value::Object(headers);
        }
        if !links.is_empty() {
            r["links"] = Value::Object(links);
        }
        out.insert(status.to_string(), r);
    }
    Value::Object(out)
}

/// A file's bytes.
fn binary() -> Value {
    json!({"type": "string", "format": "binary"})
}

/// The content types a capture item's files are served with, from the file
/// kinds: a screenshot's formats, html's type, meta's JSON, and a body's
/// default type and any other (a body is served as its target sent it).
fn capture_file_types() -> Vec<(&'static str, Value)> {
    let mut types = vec![];
    for kind in ArtifactKind::ALL {
        let essence = |t: &'static str| t.split(';').next().unwrap_or(t).trim();
        match kind {
            ArtifactKind::Screenshot => types.extend(ImageFormat::ALL.map(|f| (f.content_type(), binary()))),
            ArtifactKind::Html => types.push((essence(kind.default_content_type()), json!({"type": "string"}))),
            ArtifactKind::Meta => types.push((essence(kind.default_content_type()), json!({"type": "object"}))),
            ArtifactKind::Body => types.extend([(essence(kind.default_content_type()), binary()), ("*/*", binary())]),
            ArtifactKind::Pdf => types.push((kind.default_content_type(), binary())),
        }
    }
    types
}

fn path_parameter(name: &str) -> Value {
    let (schema, description) = match name {
        "jobId" => (json!({"type": "string"}), "A capture item id, or an analytical job id (`cj_...`)."),
        "batchId" => (json!({"type": "string"}), "The id POST /batches returned."),
        "sessionId" => (json!({"type": "string"}), "The session's id."),
        "token" => (json!({"type": "string"}), "The session's access token, as in its `cdpUrl`."),
        "kind" => (json!({"type": "string", "enum": ArtifactKind::ALL.map(ArtifactKind::as_str)}), "A file kind."),
        "name" => {
            (json!({"type": "string"}), "The file's name as the browser saved it, percent-encoded as one segment.")
        }
        "targetId" => (json!({"type": "string"}), "A DevTools target id, as discovery lists it."),
        "browserId" => (json!({"type": "string"}), "Any value: the browser target is the session's one browser."),
        _ => (json!({"type": "string"}), ""),
    };
    json!({"name": name, "in": "path", "required": true, "schema": schema, "description": description})
}

/// Query parameters from the properties of a parameters schema (`shapes`).
fn query_parameters(schema: &Value, names: &[&str]) -> Vec<Value> {
    names
        .iter()
        .map(|name| {
            let mut p = json!({"name": name, "in": "query", "required": false, "schema": schema["properties"][name]});
            if let Some(d) = schema["properties"][name].get("description") {
                p["description"] = d.clone();
            }
            p
        })
        .collect()
}

fn idempotency_key_header() -> Value {
    json!({
        "name": idempotency::HEADER,
        "in": "header",
        "required": false,
        "description": "Makes the submission safe to resend: within 24 h, the same key with the same body is \
            answered with the first answer (and `Idempotent-Replayed: true`) and does nothing more \
            (docs/idempotency.md).",
        // Printable ASCII; HTTP drops spaces at either end of a value.
        "schema": {
            "type": "string",
            "pattern": format!("^[\\x21-\\x7e]([\\x20-\\x7e]{{0,{}}}[\\x21-\\x7e])?$", idempotency::MAX_KEY_CHARS - 2)
        }
    })
}

fn replayed_header(a: Answer) -> Answer {
    a.header(idempotency::REPLAYED_HEADER, json!({"type": "string", "enum": ["true"]}), false)
}

/// `x-grid-compute-degraded` on a job record read while job tracking
/// catches up.
fn degraded_header(a: Answer) -> Answer {
    a.header("x-grid-compute-degraded", json!({"type": "string", "enum": ["reconciler-unready"]}), false)
}

/// The calls a job's record leads to.
fn job_links(a: Answer) -> Answer {
    a.link("GetJob", "getJob", "jobId", "/jobId", &[])
        .link("CancelJob", "cancelJob", "jobId", "/jobId", &[])
        .link("RetryJob", "retryJob", "jobId", "/jobId", &[])
        .link("ListJobArtifacts", "listJobArtifacts", "jobId", "/jobId", &[])
        .link("GetJobLogs", "getJobLogs", "jobId", "/jobId", &[])
}

fn any_of(schemas: Vec<Value>) -> Value {
    json!({"anyOf": schemas})
}

/// POST /screenshot, /pdf and /content: the file in the answer's body, the
/// item that made it in its headers (docs/one-call.md).
fn one_call(call: OneCall, id: &'static str, summary: &'static str) -> Operation {
    let script = call.script();
    let (content_type, what) = match call {
        OneCall::Screenshot => {
            ("image/png", "The screenshot: image/png, or image/jpeg or image/webp as `format` asks.")
        }
        OneCall::Pdf => ("application/pdf", "The PDF document."),
        OneCall::Content => ("text/html", "The page's DOM serialised after its scripts ran (UTF-8)."),
    };
    let file = Answer::with_content(200, what, content_type, json!({"type": "string", "format": "binary"}))
        .header("x-grid-job-id", json!({"type": "string"}), true)
        .header("x-grid-batch-id", json!({"type": "string"}), true)
        .header("x-grid-charged-micros", json!({"type": "string", "pattern": "^[0-9]+$"}), true)
        .header("x-grid-target-status", json!({"type": "string", "pattern": "^[0-9]{3}$"}), false);
    Operation {
        id,
        tag: "captures",
        summary,
        description: Some(format!(
            "Runs the `{}` script on one URL at once and answers its file; metered as one capture item ({} \
             micro-euros reserved, charged on success, released on failure) and tried once. The body takes the \
             script's parameters beside `url` (docs/one-call.md).",
            script.as_str(),
            script.price_micros()
        )),
        parameters: vec![],
        body: Some(shapes::one_call_body(call)),
        answers: vec![file],
        errors: [
            vec![
                ApiError::InvalidCaptureBody { detail: detail() },
                ApiError::CaptureRefused { reason: String::new(), job_id: String::new() },
                ApiError::CaptureFailed { reason: String::new(), job_id: String::new() },
                ApiError::CapabilityNotAvailable { capability: String::new() },
                ApiError::UnknownContext,
            ],
            billing_errors().to_vec(),
        ]
        .concat(),
    }
}

fn describe(route: Route) -> Operation {
    use Route::*;
    let op = |id, tag, summary| Operation {
        id,
        tag,
        summary,
        description: None,
        parameters: vec![],
        body: None,
        answers: vec![],
        errors: vec![],
    };
    match route {
        Healthz => Operation {
            description: Some("`{\"status\": \"ok\"}` while the API serves; says nothing of captures, sessions or jobs.".into()),
            answers: vec![Answer::json(200, "The API serves.", replies::health())],
            ..op("getHealth", "meta", "Health check")
        },
        ProtectedResource => Operation {
            answers: vec![Answer::json(200, "Protected-resource metadata (RFC 9728).", replies::protected_resource())],
            ..op("getProtectedResource", "meta", "OAuth protected-resource metadata of the API")
        },
        ProtectedResourceMcp => Operation {
            answers: vec![Answer::json(200, "Protected-resource metadata (RFC 9728).", replies::protected_resource())],
            ..op("getProtectedResourceMcp", "meta", "OAuth protected-resource metadata of the MCP endpoint")
        },
        OpenApi => Operation {
            answers: vec![Answer::json(200, "An OpenAPI 3.1 document.", json!({"type": "object", "required": ["openapi", "paths"]}))],
            ..op("getOpenApi", "meta", "This document")
        },
        Account => Operation {
            description: Some("The caller's credit, reserved amount, its key's daily-cap use and a page of the account's ledger, newest first (docs/account.md).".into()),
            parameters: query_parameters(&shapes::account_query(), &["limit", "cursor", "kind"]),
            answers: vec![Answer::json(200, "The account's statement.", replies::account_statement())],
            errors: vec![ApiError::InvalidListQuery { detail: detail() }, ApiError::InvalidListCursor],
            ..op("getAccount", "account", "The caller's balance and ledger")
        },
        GridStatus => Operation {
            description: Some("`nodes` (ours) is the number of live nodes of the grid (docs/scale-out.md); the other figures are the contract's.".into()),
            answers: vec![Answer::json(200, "Figures of the whole grid.", replies::grid_status())],
            ..op("getGridStatus", "account", "Queue, workers, sessions and nodes of the grid")
        },
        QueueDepth => Operation {
            answers: vec![Answer::json(200, "Capture items waiting, prioritised, delayed or active.", replies::queue_depth())],
            ..op("getQueueDepth", "account", "The capture queue's depth")
        },
        SubmitBatch => Operation {
            description: Some("Reserves each item's script price; on 402 and 403 account_suspended nothing is queued. `params` are checked when each item runs (docs/captures.md, docs/browser-captures.md).".into()),
            parameters: vec![idempotency_key_header()],
            body: Some(shapes::new_batch()),
            answers: vec![replayed_header(
                Answer::json(201, "The batch, one item per URL.", replies::batch_created())
                    .link("GetBatch", "getBatch", "batchId", "/batchId", &[]),
            )],
            errors: [
                vec![
                    ApiError::InvalidBatchBody { detail: detail() },
                    ApiError::InvalidIdempotencyKey { detail: detail() },
                    ApiError::IdempotencyKeyReused,
                    ApiError::UnknownContext,
                ],
                billing_errors().to_vec(),
            ]
            .concat(),
            ..op("submitBatch", "captures", "Submit a capture batch")
        },
        ListBatches => Operation {
            description: Some("The caller's batches, newest first, each with its counts by state (the items themselves: GET /batches/{batchId}). One-call captures are batches of one URL and are listed too.".into()),
            parameters: query_parameters(&shapes::batch_list_query(), &["limit", "cursor"]),
            answers: vec![Answer::json(200, "A page of the caller's batches.", replies::batch_list())
                .link("GetFirstBatch", "getBatch", "batchId", "/batches/0/batchId", &[])],
            errors: vec![ApiError::InvalidListQuery { detail: detail() }, ApiError::InvalidListCursor],
            ..op("listBatches", "captures", "The caller's recent batches")
        },
        GetBatch => Operation {
            answers: vec![Answer::json(200, "The batch's counts and items, sorted by jobId.", replies::batch_view())
                .link("GetFirstItem", "getJob", "jobId", "/jobs/0/jobId", &[])
                .link("RetryFirstItem", "retryJob", "jobId", "/jobs/0/jobId", &[])
                .link("GetFirstItemMeta", "getArtifactUrl", "jobId", "/jobs/0/jobId", &[("kind", "meta")])],
            errors: vec![ApiError::UnknownBatch],
            ..op("getBatch", "captures", "A batch and its items")
        },
        SubmitJob => Operation {
            description: Some("Reserves one attempt's longest cost. An `idempotencyKey` already used with the same body answers 200 with that job and reserves nothing.".into()),
            body: Some(shapes::new_job()),
            answers: vec![
                job_links(degraded_header(Answer::json(202, "The new job (phase ACCEPTED).", replies::job_record()))),
                job_links(degraded_header(Answer::json(200, "The existing job of this idempotencyKey.", replies::job_record()))),
            ],
            errors: [
                vec![
                    ApiError::InvalidJobRequest { detail: detail() },
                    ApiError::InvalidImage { detail: String::new() },
                    ApiError::IdempotencyConflict,
                    ApiError::CapabilityNotAvailable { capability: String::new() },
                    ApiError::compute_unavailable(),
                ],
                billing_errors().to_vec(),
            ]
            .concat(),
            ..op("submitJob", "jobs", "Submit an analytical job")
        },
        ListJobs => Operation {
            description: Some("Newest first; capture items are not listed. One label filter may be given as `label.<key>=<value>` (a lower-case key and value), which this document cannot name as a parameter.".into()),
            parameters: query_parameters(&shapes::job_list_query(), &["limit", "cursor", "phase"]),
            answers: vec![Answer::json(200, "A page of job records.", replies::job_list())],
            errors: vec![
                ApiError::InvalidListQuery { detail: detail() },
                ApiError::InvalidListCursor,
                ApiError::compute_unavailable(),
            ],
            ..op("listJobs", "jobs", "List analytical jobs")
        },
        GetJob => Operation {
            answers: vec![degraded_header(Answer::json(
                200,
                "A capture item, or an analytical job's record.",
                any_of(vec![replies::capture_item(), replies::job_record()]),
            ))],
            errors: vec![ApiError::UnknownItemOrJob, ApiError::compute_unavailable()],
            ..op("getJob", "jobs", "A capture item or an analytical job")
        },
        RetryJob => Operation {
            description: Some("A capture item can be retried only while failed with no published failure record (free). An analytical job in a retryable state gets a new attempt and a new reservation.".into()),
            answers: vec![degraded_header(Answer::json(
                200,
                "The item's new state, or the job's record with a new attempt queued.",
                any_of(vec![replies::item_retried(), replies::job_record()]),
            ))],
            errors: [
                vec![
                    ApiError::UnknownItemOrJob,
                    ApiError::OnlyFailedCanBeRetried,
                    ApiError::PublishedFailureImmutable,
                    ApiError::ProfileNotSelectable,
                    ApiError::JobNotRetryable,
                    ApiError::JobStateConflict,
                    ApiError::compute_unavailable(),
                ],
                billing_errors().to_vec(),
            ]
            .concat(),
            ..op("retryJob", "jobs", "Retry a failed capture item or analytical job")
        },
        CancelJob => Operation {
            description: Some("The job reaches CANCELLED once its container has stopped; a finished job is answered unchanged. A capture item id is an unknown job.".into()),
            answers: vec![degraded_header(Answer::json(200, "The job's record.", replies::job_record()))],
            errors: vec![ApiError::UnknownItemOrJob, ApiError::JobStateConflict, ApiError::compute_unavailable()],
            ..op("cancelJob", "jobs", "Cancel an analytical job")
        },
        JobArtifacts => Operation {
            answers: vec![Answer::json(200, "The job's published files.", replies::job_artifacts())],
            errors: vec![ApiError::UnknownItemOrJob, ApiError::compute_unavailable()],
            ..op("listJobArtifacts", "jobs", "An analytical job's artifacts")
        },
        JobLogs => {
            let attempt = json!({
                "name": "attempt",
                "in": "query",
                "required": false,
                "description": "An earlier attempt; default the current one.",
                "schema": {"type": "integer", "minimum": 1, "maximum": u32::MAX}
            });
            let follow = json!({
                "name": "follow",
                "in": "query",
                "required": false,
                "description": "true: stream the attempt's output as it is written (chunked text/plain), ending when the attempt ends; waits for a queued job's attempt to start. A streamed answer has no x-grid-artifact-id or x-grid-logs-truncated (the log is published at the end).",
                "schema": {"type": "boolean"}
            });
            let text = Answer::with_content(200, "The attempt's stdout and stderr, up to 1 MiB.", "text/plain", json!({"type": "string"}))
                .header("x-grid-attempt", json!({"type": "string", "pattern": "^[1-9][0-9]*$"}), true)
                .header("x-grid-artifact-id", json!({"type": "string"}), false)
                .header("x-grid-logs-truncated", json!({"type": "string", "enum": ["true", "false"]}), false);
            Operation {
                description: Some("A log is published once its attempt has ended; with follow=true, a running attempt's output is streamed as it is written.".into()),
                parameters: vec![attempt, follow],
                answers: vec![text],
                errors: vec![
                    ApiError::InvalidLogQuery { detail: detail() },
                    ApiError::UnknownItemOrJob,
                    ApiError::LogsNotAvailable,
                    ApiError::compute_unavailable(),
                ],
                ..op("getJobLogs", "jobs", "An attempt's log")
            }
        }
        ArtifactUrl => Operation {
            description: Some("Given once the item's whole file set is published and checked.".into()),
            answers: vec![Answer::json(200, "A URL that downloads the file without credential for 15 minutes.", replies::artifact_url())],
            errors: vec![ApiError::BadArtifactKind, ApiError::UnknownItemOrJob, ApiError::ArtifactNotPresent],
            ..op("getArtifactUrl", "captures", "A download URL of a capture item's file")
        },
        LeaseSession => Operation {
            description: Some("Reserves the whole lifetime; the meter runs from the first ready moment. Poll GET /sessions until the attestation is filled, then connect a CDP client to `cdpUrl`.".into()),
            parameters: vec![idempotency_key_header()],
            body: Some(shapes::new_session()),
            answers: vec![replayed_header(
                Answer::json(201, "The lease (attestation null).", replies::session_lease())
                    .link("ReleaseSession", "releaseSession", "sessionId", "/sessionId", &[])
                    .link("ListSessionDownloads", "listSessionDownloads", "sessionId", "/sessionId", &[]),
            )],
            errors: [
                vec![
                    ApiError::InvalidSessionBody { detail: detail() },
                    ApiError::InvalidIdempotencyKey { detail: detail() },
                    ApiError::IdempotencyKeyReused,
                    ApiError::SessionLimitReached { max_sessions: 0 },
                    ApiError::UnknownContext,
                    ApiError::ContextInUse { session_id: String::new() },
                    ApiError::ContextUnreadable { detail: String::new() },
                    ApiError::SessionsDisabled,
                ],
                billing_errors().to_vec(),
            ]
            .concat(),
            ..op("leaseSession", "sessions", "Lease a browser session")
        },
        ListSessions => Operation {
            answers: vec![Answer::json(200, "The caller's live sessions (without cdpUrl).", replies::session_list())
                .link("ReleaseFirstSession", "releaseSession", "sessionId", "/0/sessionId", &[])],
            errors: vec![ApiError::SessionsDisabled],
            ..op("listSessions", "sessions", "The caller's live sessions")
        },
        ReleaseSession => Operation {
            answers: vec![Answer::empty(204, "Released: the cdpUrl stops working and the session is settled.")],
            errors: vec![ApiError::UnknownSession, ApiError::SessionsDisabled],
            ..op("releaseSession", "sessions", "Release a session")
        },
        SessionDownloads => Operation {
            description: Some("The files the session's pages downloaded, oldest first, each with a URL that fetches it without credential for 15 minutes; what the grid cancelled or removed over the session's limit; until when the files are kept (null while the session is live, then its end plus the grace). A session past its grace answers 404 unknown session (docs/sessions.md).".into()),
            answers: vec![Answer::json(200, "The session's downloads.", replies::session_downloads())],
            errors: vec![ApiError::UnknownSession, ApiError::SessionsDisabled],
            ..op("listSessionDownloads", "sessions", "A session's downloaded files")
        },
        SessionRecording => Operation {
            description: Some("The replay page of a session leased with `recording: true`, once the session has ended: a URL that opens it without credential for 15 minutes, its size, frame count and duration, and whether recording stopped at the session's bound. A live session (or one whose page is still being written) answers 409 recording not ready; a session leased without recording, or past its grace, 404 recording not present; another account's, 404 unknown session (docs/sessions.md, Recordings).".into()),
            answers: vec![Answer::json(200, "The recording's signed URL.", replies::session_recording())],
            errors: vec![
                ApiError::UnknownSession,
                ApiError::RecordingNotPresent,
                ApiError::RecordingNotReady { detail: "the session is live".into() },
                ApiError::SessionsDisabled,
            ],
            ..op("getSessionRecording", "sessions", "A session's recording")
        },
        CreateContext => Operation {
            description: Some("An empty persistent context of the caller's: a lease naming it (`context: {id, persist}`) starts its browser with the cookies and local storage the context holds, and a `persist: true` session saves them back when it ends (docs/sessions.md, Contexts).".into()),
            answers: vec![Answer::json(201, "The new context.", replies::context_created())
                .link("DeleteContext", "deleteContext", "contextId", "/contextId", &[])],
            errors: vec![ApiError::SessionsDisabled],
            ..op("createContext", "sessions", "Create a persistent browser context")
        },
        ListContexts => Operation {
            answers: vec![Answer::json(200, "The caller's contexts, oldest first.", replies::context_list())],
            errors: vec![ApiError::SessionsDisabled],
            ..op("listContexts", "sessions", "The caller's persistent contexts")
        },
        DeleteContext => Operation {
            answers: vec![Answer::empty(204, "Deleted with its saved state.")],
            errors: vec![
                ApiError::UnknownContext,
                ApiError::ContextInUse { session_id: String::new() },
                ApiError::SessionsDisabled,
            ],
            ..op("deleteContext", "sessions", "Delete a persistent context and its state")
        },
        Screenshot => one_call(OneCall::Screenshot, "takeScreenshot", "A page's screenshot, in one call"),
        Pdf => one_call(OneCall::Pdf, "printPdf", "A page printed as a PDF, in one call"),
        Content => one_call(OneCall::Content, "getContent", "A page's rendered HTML, in one call"),
        Mcp => Operation {
            description: Some(
                "One JSON-RPC 2.0 message per request, answered with one JSON body; no `mcp-session-id` is kept. \
                 `accept` must list both application/json and text/event-stream, `content-type` must be \
                 application/json. Handshake-era versions (2024-11-05 to 2025-11-25) and the 2026-07-28 revision \
                 (its version in `MCP-Protocol-Version` and `params._meta`, `Mcp-Method` and `Mcp-Name` mirrored \
                 in headers) are both spoken. A tool's own refusals (for example 402 insufficient_credit) arrive \
                 inside a 200 answer with `isError: true`. GET and DELETE answer 405 (docs/mcp.md)."
                    .into(),
            ),
            body: Some(mcp::message()),
            answers: mcp::answers(),
            ..op("mcp", "mcp", "MCP (Streamable HTTP, stateless)")
        },
        McpPreflight => Operation {
            description: Some(
                "A browser's CORS preflight of POST /mcp; a page's Origin must be one the operator allowed \
                 (`--mcp-allow-origin`), and then the answer carries the CORS headers (docs/mcp.md)."
                    .into(),
            ),
            answers: vec![
                Answer::empty(204, "The methods and headers a page may use.")
                    .header("allow", json!({"type": "string"}), true),
                Answer::json(403, "a page of an origin the operator did not allow (JSON-RPC error)", mcp::rpc_error()),
            ],
            ..op("mcpPreflight", "mcp", "CORS preflight of the MCP endpoint")
        },
        Download => Operation {
            description: Some("The address GET /artifacts/{jobId}/{kind} gave; served with the content type the file was stored with, checked against its SHA-256.".into()),
            parameters: vec![
                json!({"name": "expires", "in": "query", "required": true, "schema": {"type": "integer"}, "description": "When the URL stops working (Unix seconds)."}),
                json!({"name": "sig", "in": "query", "required": true, "schema": {"type": "string"}, "description": "The URL's signature."}),
            ],
            answers: vec![Answer::files(
                200,
                "The file, with the content type it was stored with: a screenshot is image/png, image/jpeg or \
                 image/webp (its format), html text/html, meta application/json, and a body the type its \
                 target sent (application/octet-stream when it sent none).",
                capture_file_types(),
            )],
            errors: vec![ApiError::ArtifactNotPresent],
            ..op("download", "downloads", "Download a published file")
        },
        SessionDownload => Operation {
            description: Some("The address GET /sessions/{sessionId}/downloads gave: the file's exact bytes as an attachment, until the session's grace is over.".into()),
            parameters: vec![
                json!({"name": "expires", "in": "query", "required": true, "schema": {"type": "integer"}, "description": "When the URL stops working (Unix seconds)."}),
                json!({"name": "sig", "in": "query", "required": true, "schema": {"type": "string"}, "description": "The URL's signature."}),
            ],
            answers: vec![Answer::with_content(200, "The file.", "application/octet-stream", binary())
                .header("content-disposition", json!({"type": "string"}), true)],
            errors: vec![ApiError::SessionDownloadNotPresent],
            ..op("downloadSessionFile", "downloads", "Download a file of a session's downloads")
        },
        RecordingFile => Operation {
            description: Some("The address GET /sessions/{sessionId}/recording gave: the self-contained replay page (text/html), served under a sandboxing Content-Security-Policy, until the session's grace is over.".into()),
            parameters: vec![
                json!({"name": "expires", "in": "query", "required": true, "schema": {"type": "integer"}, "description": "When the URL stops working (Unix seconds)."}),
                json!({"name": "sig", "in": "query", "required": true, "schema": {"type": "string"}, "description": "The URL's signature."}),
            ],
            answers: vec![Answer::with_content(200, "The replay page.", "text/html", json!({"type": "string"}))
                .header("content-security-policy", json!({"type": "string"}), true)],
            errors: vec![ApiError::RecordingNotPresent],
            ..op("downloadSessionRecording", "downloads", "Open a session's replay page")
        },
        Console => Operation {
            description: Some("An HTML page, not an API call: the web console, which asks for an API key and shows the account, batches, jobs, sessions and the grid through this API. Served from the binary under a Content-Security-Policy that allows only its own script and style (docs/console.md).".into()),
            answers: vec![Answer::with_content(200, "The console's page.", "text/html", json!({"type": "string"}))
                .header("content-security-policy", json!({"type": "string"}), true)],
            ..op("getConsole", "console", "The web console")
        },
        ConsoleScript => Operation {
            answers: vec![Answer::with_content(200, "The console's script.", "text/javascript", json!({"type": "string"}))],
            ..op("getConsoleScript", "console", "The web console's script")
        },
        ConsoleStyle => Operation {
            answers: vec![Answer::with_content(200, "The console's style sheet.", "text/css", json!({"type": "string"}))],
            ..op("getConsoleStyle", "console", "The web console's style sheet")
        },
        // Not published (`published`): described for the exhaustive match only.
        NodeSessionSync => Operation {
            description: Some("Asks the node running the session's browser to bring it in line with its record: start a session another node leased for it, stop one another node ended.".into()),
            answers: vec![Answer::empty(204, "In line with the record.")],
            ..op("nodeSessionSync", "internal", "Bring a session's browser in line with its record")
        },
        NodeSessionTool => Operation {
            description: Some("Runs an MCP browser tool on the session's browser, which runs on this node, for a call another node received (`{tool, arguments, accountId}`); answers the tool's result.".into()),
            answers: vec![Answer::json(200, "The tool's MCP result.", json!({"type": "object"}))],
            ..op("nodeSessionTool", "internal", "Run a browser tool on a session's browser")
        },
        NodeJobSync => Operation {
            description: Some("Asks the node whose engine runs the job's attempt to bring its container in line with the record: stop one another node cancelled.".into()),
            answers: vec![Answer::empty(204, "In line with the record.")],
            ..op("nodeJobSync", "internal", "Bring a job's container in line with its record")
        },
        CdpSocket => cdp::socket(op("cdpConnect", "cdp", "WebSocket to the browser target (the cdpUrl itself)")),
        CdpBrowserSocket => cdp::socket(op("cdpBrowserSocket", "cdp", "WebSocket to the browser target")),
        CdpPageSocket => cdp::socket(op("cdpPageSocket", "cdp", "WebSocket to one page")),
        CdpVersion => Operation {
            answers: vec![Answer::json(200, "The browser's version, with a webSocketDebuggerUrl through the grid.", cdp::version())],
            ..op("cdpVersion", "cdp", "DevTools discovery: version")
        },
        CdpTargets => Operation {
            answers: vec![Answer::json(200, "The session's pages.", json!({"type": "array", "items": cdp::target()}))],
            ..op("cdpTargets", "cdp", "DevTools discovery: targets")
        },
        CdpTargetList => Operation {
            answers: vec![Answer::json(200, "The session's pages.", json!({"type": "array", "items": cdp::target()}))],
            ..op("cdpTargetList", "cdp", "DevTools discovery: targets")
        },
        CdpNewTarget => cdp::new_target(op("cdpNewTarget", "cdp", "Open a page")),
        CdpNewTargetGet => cdp::new_target(op("cdpNewTargetGet", "cdp", "Open a page (older clients)")),
        CdpCloseTarget => Operation {
            answers: vec![Answer::json(200, "The page is closing.", json!({"type": "string"}))],
            ..op("cdpCloseTarget", "cdp", "Close a page")
        },
        CdpActivateTarget => Operation {
            answers: vec![Answer::json(200, "The page is activated.", json!({"type": "string"}))],
            ..op("cdpActivateTarget", "cdp", "Bring a page to front")
        },
        CdpView => Operation {
            description: Some("A page that watches the session's page through a CDP screencast over this endpoint; never cached, framed or sent as a referrer.".into()),
            answers: vec![Answer::with_content(200, "The live view page.", "text/html", json!({"type": "string"}))],
            ..op("cdpView", "cdp", "Live view of the session")
        },
    }
}

mod cdp {
    use serde_json::{json, Value};

    use super::{Answer, Operation};
    use crate::error::ApiError;

    pub(super) fn socket(op: Operation) -> Operation {
        Operation {
            description: Some(
                "A WebSocket upgrade (HTTP/1.1); every command passes the grid's CDP gate. Waits for a pending \
                 session's browser (up to 30 s)."
                    .into(),
            ),
            answers: vec![Answer::empty(101, "Switching to the WebSocket.")],
            errors: vec![ApiError::InvalidBody { detail: vec![] }],
            ..op
        }
    }

    pub(super) fn new_target(op: Operation) -> Operation {
        Operation {
            description: Some(
                "The query string is the page's URL (default about:blank), checked by the CDP gate.".into(),
            ),
            answers: vec![Answer::json(200, "The new page.", target())],
            errors: vec![ApiError::InvalidBody { detail: vec![] }],
            ..op
        }
    }

    pub(super) fn version() -> Value {
        let s = || json!({"type": "string"});
        json!({
            "type": "object",
            "properties": {
                "Browser": s(), "Protocol-Version": s(), "User-Agent": s(), "V8-Version": s(), "WebKit-Version": s(),
                "webSocketDebuggerUrl": {"type": "string", "format": "uri"}
            },
            "required": ["Browser", "Protocol-Version", "webSocketDebuggerUrl"]
        })
    }

    pub(super) fn target() -> Value {
        let s = || json!({"type": "string"});
        json!({
            "type": "object",
            "properties": {
                "description": s(), "devtoolsFrontendUrl": s(), "id": s(), "title": s(), "type": s(), "url": s(),
                "webSocketDebuggerUrl": {"type": "string", "format": "uri"}
            },
            "required": ["id", "type", "url", "webSocketDebuggerUrl"]
        })
    }
}

mod mcp {
    use serde_json::{json, Value};

    use super::Answer;
    use crate::error::ApiError;

    /// A request's id (MCP's `RequestId`); a response's may also be null
    /// (after a parse error).
    fn id() -> Value {
        json!({"type": ["string", "number"]})
    }

    fn response_id() -> Value {
        json!({"type": ["string", "number", "null"]})
    }

    /// What a client may send: a request or notification, or a response
    /// to a server request (answered 202 and ignored, whatever it holds: this
    /// server sends no requests). The server refuses with 400 exactly what
    /// this schema does not admit.
    pub(super) fn message() -> Value {
        let jsonrpc = json!({"type": "string", "enum": ["2.0"]});
        json!({
            "oneOf": [
                {
                    "type": "object",
                    "description": "A request (with id) or a notification (without).",
                    "properties": {
                        "jsonrpc": jsonrpc,
                        "id": id(),
                        "method": {"type": "string", "description": "initialize, ping, server/discover, tools/list, tools/call, notifications/..."},
                        "params": {"type": "object"}
                    },
                    "required": ["jsonrpc", "method"]
                },
                {
                    "type": "object",
                    "description": "A response to a server request: taken and ignored.",
                    "properties": {"jsonrpc": jsonrpc},
                    "required": ["jsonrpc"],
                    "anyOf": [{"required": ["result"]}, {"required": ["error"]}],
                    "not": {"required": ["method"]}
                }
            ]
        })
    }

    pub(super) fn rpc_error_object() -> Value {
        json!({
            "type": "object",
            "properties": {"code": {"type": "integer"}, "message": {"type": "string"}, "data": {}},
            "required": ["code", "message"]
        })
    }

    /// A JSON-RPC error answer.
    pub(super) fn rpc_error() -> Value {
        json!({
            "type": "object",
            "properties": {
                "jsonrpc": {"type": "string", "enum": ["2.0"]},
                "id": response_id(),
                "error": rpc_error_object()
            },
            "required": ["jsonrpc", "error"]
        })
    }

    pub(super) fn rpc_answer() -> Value {
        json!({
            "type": "object",
            "properties": {
                "jsonrpc": {"type": "string", "enum": ["2.0"]},
                "id": response_id(),
                "result": {"type": "object"},
                "error": rpc_error_object()
            },
            "required": ["jsonrpc", "id"],
            "oneOf": [{"required": ["result"]}, {"required": ["error"]}]
        })
    }

    pub(super) fn answers() -> Vec<Answer> {
        let mut unauthorized = Answer::refusal(&ApiError::Unauthorized);
        unauthorized.description =
            "unauthorized: no credential or a refused one; `hint` says what to send, `WWW-Authenticate` points at the protected-resource metadata".into();
        if let Some((_, schema)) = unauthorized.content.first_mut() {
            schema["properties"]["hint"] = json!({"type": "string"});
        }
        vec![
            Answer::json(
                200,
                "The JSON-RPC answer: a result, or an error (unknown method, invalid params).",
                rpc_answer(),
            ),
            Answer::empty(202, "A notification or a response: accepted, nothing to answer."),
            Answer::json(
                400,
                "JSON-RPC parse error, invalid request, unsupported protocol version or headers not matching the body",
                rpc_error(),
            ),
            unauthorized.header("www-authenticate", json!({"type": "string"}), true),
            Answer::json(403, "a page of an origin the operator did not allow (JSON-RPC error)", rpc_error()),
            Answer::json(404, "2026-07-28: an unknown method (JSON-RPC error)", rpc_error()),
            Answer::json(406, "accept lacks application/json or text/event-stream (JSON-RPC error)", rpc_error()),
            Answer::json(415, "content-type is not application/json (JSON-RPC error)", rpc_error()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `v` with every reference of `doc` replaced by what it names (and
    /// `anyOf` of one and null by `nullable` of it): the document as it was
    /// before `name_shared`.
    fn resolved(doc: &Value, v: &Value) -> Value {
        let target = |r: &Value| {
            let name = r["$ref"].as_str()?.strip_prefix("#/components/schemas/")?;
            Some(resolved(doc, doc["components"]["schemas"].get(name).unwrap_or_else(|| panic!("no schema {name}"))))
        };
        match v {
            Value::Object(m) if m.len() == 1 && m.contains_key("$ref") => target(v).expect("a schema reference"),
            Value::Object(m)
                if m.len() == 1
                    && v["anyOf"].as_array().is_some_and(|a| a.len() == 2 && a[1] == json!({"type": "null"})) =>
            {
                replies::nullable(target(&v["anyOf"][0]).expect("a schema reference"))
            }
            Value::Object(m) => Value::Object(m.iter().map(|(k, x)| (k.clone(), resolved(doc, x))).collect()),
            Value::Array(items) => Value::Array(items.iter().map(|x| resolved(doc, x)).collect()),
            other => other.clone(),
        }
    }

    /// The document with its references resolved and without its named schemas.
    fn inlined(base_url: &str) -> Value {
        let doc = document(base_url);
        let mut out = resolved(&doc, &doc);
        out["components"].as_object_mut().unwrap().remove("schemas");
        out
    }

    #[test]
    fn every_route_is_one_operation_and_every_operation_a_route() {
        let doc = document("https://grid.example");
        let mut described = vec![];
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, _) in item.as_object().unwrap() {
                described.push((method.to_ascii_uppercase(), path.clone()));
            }
        }
        let mut routed: Vec<(String, String)> = Route::ALL
            .iter()
            .filter(|r| published(**r))
            .map(|r| (r.method().to_string(), r.template().to_string()))
            .collect();
        described.sort();
        routed.sort();
        assert_eq!(described, routed);
    }

    /// The nodes' calls to each other are no client's: none is in the
    /// document, nor their credential.
    #[test]
    fn the_nodes_internal_routes_are_left_out() {
        let doc = document("http://g");
        let internal: Vec<Route> = Route::ALL.into_iter().filter(|r| r.access() == Access::Node).collect();
        assert!(internal.len() >= 2, "{internal:?}");
        for route in internal {
            assert!(route.template().starts_with("/internal/"), "{route:?}");
            assert!(doc["paths"].get(route.template()).is_none(), "{route:?} is published");
        }
        assert!(doc["paths"].as_object().unwrap().keys().all(|p| !p.starts_with("/internal")));
        let text = doc.to_string();
        assert!(!text.contains("x-grid-node-credential") && !text.contains("nodeCredential"));
    }

    /// Naming loses nothing: with every reference resolved, the document is
    /// the one written out in full.
    #[test]
    fn named_schemas_stand_for_exactly_what_they_replaced() {
        let mut inline = inline_document("http://g");
        inline["components"].as_object_mut().unwrap().remove("schemas");
        assert_eq!(inlined("http://g"), inline);
    }

    /// Every named schema is used by some operation (a name that stopped
    /// matching its uses would be caught here), names are unique and valid
    /// component keys, and the shapes a client handles most have the names
    /// their types take.
    #[test]
    fn shared_shapes_are_named_and_referred_to() {
        let doc = document("http://g");
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let named = named_schemas();
        assert_eq!(schemas.len(), named.len(), "a name given twice");
        let mut used = doc.clone();
        used["components"].as_object_mut().unwrap().remove("schemas");
        let mut text = used.to_string();
        // Named parts of named schemas count as used through them.
        for body in schemas.values() {
            text.push_str(&body.to_string());
        }
        for (name, schema) in schemas {
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)), "{name} is no component key");
            let reference = format!("\"#/components/schemas/{name}\"");
            // `Error` is the shape every refusal's own schema has.
            assert!(name == "Error" || text.contains(&reference), "{name} is never referred to");
            assert!(schema.is_object(), "{name}");
        }
        for name in [
            "BatchSubmission",
            "BatchCreated",
            "Batch",
            "BatchItem",
            "CaptureItem",
            "Job",
            "JobSubmission",
            "JobAttempt",
            "JobList",
            "Session",
            "SessionLease",
            "SessionRequest",
            "SessionAttestation",
            "Account",
            "LedgerEntry",
            "GridStatus",
            "Error",
            "InsufficientCreditError",
            "UnauthorizedError",
            "CaptureParams",
            "FetchParams",
            "CaptureViewport",
            "Cookie",
            "CdpTarget",
            "JsonRpcError",
        ] {
            assert!(schemas.contains_key(name), "no schema {name}");
        }
        let op = |path: &str, method: &str| doc["paths"][path][method].clone();
        let body = |path: &str| op(path, "post")["requestBody"]["content"]["application/json"]["schema"].clone();
        let answer = |path: &str, method: &str, status: &str| {
            op(path, method)["responses"][status]["content"]["application/json"]["schema"].clone()
        };
        assert_eq!(body("/batches"), reference("BatchSubmission"));
        assert_eq!(body("/jobs"), reference("JobSubmission"));
        assert_eq!(body("/sessions"), reference("SessionRequest"));
        assert_eq!(answer("/batches", "post", "201"), reference("BatchCreated"));
        assert_eq!(answer("/batches/{batchId}", "get", "200"), reference("Batch"));
        assert_eq!(answer("/sessions", "post", "201"), reference("SessionLease"));
        assert_eq!(answer("/sessions", "get", "200"), json!({"type": "array", "items": reference("Session")}));
        assert_eq!(answer("/account", "get", "200"), reference("Account"));
        assert_eq!(answer("/grid", "get", "200"), reference("GridStatus"));
        assert_eq!(answer("/jobs", "post", "202"), reference("Job"));
        assert_eq!(
            answer("/jobs/{jobId}", "get", "200"),
            json!({"anyOf": [reference("CaptureItem"), reference("Job")]})
        );
        assert_eq!(
            answer("/batches", "post", "402"),
            json!({"anyOf": [reference("InsufficientCreditError"), reference("DailyCapExceededError")]})
        );
        assert_eq!(answer("/grid", "get", "401"), reference("UnauthorizedError"));
        // A nullable part is `anyOf` of its name and null.
        assert_eq!(
            schemas["Job"]["properties"]["termination"],
            json!({"anyOf": [reference("JobTermination"), {"type": "null"}]})
        );
        assert_eq!(schemas["Account"]["properties"]["ledger"]["items"], reference("LedgerEntry"));
        let refusal = &schemas["InsufficientCreditError"];
        assert_eq!(refusal["properties"]["error"], json!({"type": "string", "const": "insufficient_credit"}));
        assert_eq!(refusal["required"], json!(["error", "requiredMicros", "availableMicros"]));
    }

    /// A capture item's file is served with the type it was stored with:
    /// each is listed, with a schema of bytes (text for html, an object for
    /// meta); a session's file is bytes.
    #[test]
    fn downloads_list_their_real_content_types() {
        let doc = document("http://g");
        let content = &doc["paths"]["/downloads/{jobId}/{kind}"]["get"]["responses"]["200"]["content"];
        let mut types: Vec<&str> = content.as_object().unwrap().keys().map(String::as_str).collect();
        types.sort();
        assert_eq!(
            types,
            [
                "*/*",
                "application/json",
                "application/octet-stream",
                "application/pdf",
                "image/jpeg",
                "image/png",
                "image/webp",
                "text/html"
            ]
        );
        for t in ["image/png", "image/jpeg", "image/webp", "application/pdf", "application/octet-stream", "*/*"] {
            assert_eq!(content[t]["schema"], json!({"type": "string", "format": "binary"}), "{t}");
        }
        assert_eq!(content["text/html"]["schema"], json!({"type": "string"}));
        let session = &doc["paths"]["/downloads/sessions/{sessionId}/{name}"]["get"]["responses"]["200"]["content"];
        assert_eq!(session, &json!({"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}));
        let logs = &doc["paths"]["/jobs/{jobId}/logs"]["get"]["responses"]["200"]["content"];
        assert_eq!(logs, &json!({"text/plain": {"schema": {"type": "string"}}}));
    }

    /// A link names an operation of the document and only its parameters.
    #[test]
    fn links_lead_to_operations_and_their_parameters() {
        let doc = document("http://g");
        let mut params: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for item in doc["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                let names = op["parameters"]
                    .as_array()
                    .map_or(vec![], |ps| ps.iter().map(|p| p["name"].as_str().unwrap().to_string()).collect());
                params.insert(op["operationId"].as_str().unwrap().to_string(), names);
            }
        }
        let mut count = 0;
        for item in doc["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                for response in op["responses"].as_object().unwrap().values() {
                    for (name, link) in response.get("links").and_then(Value::as_object).into_iter().flatten() {
                        let target = link["operationId"].as_str().unwrap();
                        let names = params.get(target).unwrap_or_else(|| panic!("{name}: no operation {target}"));
                        for p in link["parameters"].as_object().unwrap().keys() {
                            assert!(names.contains(p), "{name}: {target} has no parameter {p}");
                        }
                        count += 1;
                    }
                }
            }
        }
        assert!(count >= 10, "{count} links");
    }

    #[test]
    fn the_servers_url_is_the_grids_address() {
        assert_eq!(document("https://grid.example:8443")["servers"], json!([{"url": "https://grid.example:8443"}]));
        assert_eq!(document("https://g")["openapi"], "3.1.0");
    }

    #[test]
    fn operation_ids_are_unique() {
        let doc = document("http://g");
        let mut ids = std::collections::BTreeSet::new();
        for item in doc["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                let id = op["operationId"].as_str().unwrap().to_string();
                assert!(ids.insert(id.clone()), "{id} twice");
            }
        }
    }

    /// Every refusal of the error table is some route's documented answer,
    /// with its status and `error` string (NotImplemented is no route's, a
    /// browser tool's failure only an MCP result's; the router's own 404 and
    /// 405 answer what no route has).
    #[test]
    fn every_row_of_the_error_table_is_documented_where_it_can_happen() {
        let doc = inlined("http://g");
        for e in crate::error::every_variant() {
            let row = e.row();
            match e {
                ApiError::NotImplemented { .. } | ApiError::BrowserToolFailed { .. } => continue,
                ApiError::RouteNotFound | ApiError::MethodNotAllowed => {
                    let all = doc["components"]["responses"].to_string();
                    assert!(all.contains(&format!("\"{}\"", row.error)), "{} is not in components", row.error);
                    continue;
                }
                _ => {}
            }
            let probe = match e {
                ApiError::SessionLimitReached { .. } => "^session limit reached: ".to_string(),
                _ => row.error.to_string(),
            };
            let found = doc["paths"].as_object().unwrap().values().any(|item| {
                item.as_object().unwrap().values().any(|op| {
                    op["responses"]
                        .get(row.status.to_string())
                        .is_some_and(|r| r.to_string().contains(&serde_json::to_string(&probe).unwrap()))
                })
            });
            assert!(found, "{} {} is no route's answer", row.status, row.error);
        }
    }

    #[test]
    fn contract_refusals_are_on_their_routes() {
        let doc = inlined("http://g");
        let has = |path: &str, method: &str, status: u16, error: &str| {
            let r = &doc["paths"][path][method]["responses"][status.to_string()];
            assert!(r.to_string().contains(&format!("\"{error}\"")), "{method} {path} lacks {status} {error}: {r}");
        };
        has("/batches", "post", 400, "invalid batch body");
        has("/batches", "post", 402, "insufficient_credit");
        has("/jobs", "post", 422, "CAPABILITY_NOT_AVAILABLE");
        has("/jobs", "get", 400, "INVALID_LIST_CURSOR");
        has("/jobs/{jobId}/logs", "get", 404, "LOGS_NOT_AVAILABLE");
        has("/artifacts/{jobId}/{kind}", "get", 400, "kind must be screenshot|html|body|meta");
        has("/artifacts/{jobId}/{kind}", "get", 404, "artifact not present");
        has("/sessions", "post", 503, "sessions disabled");
        has("/sessions/{sessionId}", "delete", 404, "unknown session");
        has("/sessions/{sessionId}/downloads", "get", 404, "unknown session");
        has("/downloads/sessions/{sessionId}/{name}", "get", 404, "download not present");
        has("/downloads/sessions/{sessionId}/{name}", "get", 404, "download link invalid or expired");
        has("/grid", "get", 401, "unauthorized");
        has("/grid", "get", 429, "rate_limited");
        // The extra fields of a row are required members of its body.
        let credit = &doc["paths"]["/batches"]["post"]["responses"]["402"]["content"]["application/json"]["schema"];
        assert!(credit.to_string().contains("\"requiredMicros\""), "{credit}");
        // COMPUTE_UNAVAILABLE and accounting_unavailable both set retry-after.
        assert_eq!(doc["paths"]["/jobs"]["post"]["responses"]["503"]["headers"]["retry-after"]["required"], true);
        // sessions disabled does not.
        assert_eq!(doc["paths"]["/sessions"]["post"]["responses"]["503"]["headers"]["retry-after"]["required"], false);
    }

    #[test]
    fn credentials_are_required_except_where_the_contract_says() {
        let doc = document("http://g");
        for route in Route::ALL.into_iter().filter(|r| published(*r)) {
            let op = &doc["paths"][route.template()][route.method().to_ascii_lowercase()];
            let open = op.get("security") == Some(&json!([]));
            assert_eq!(open, !matches!(route.access(), Access::Credential | Access::Mcp), "{route:?}");
            assert_eq!(op["responses"].get("401").is_some(), !open, "{route:?}");
        }
        assert_eq!(doc["security"], json!([{"apiKey": []}, {"bearer": []}]));
    }

    #[test]
    fn bodies_and_parameters_are_the_request_schemas() {
        let doc = inlined("http://g");
        let body =
            |path: &str| doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"].clone();
        assert_eq!(body("/batches"), shapes::new_batch());
        assert_eq!(body("/jobs"), shapes::new_job());
        assert_eq!(body("/sessions"), shapes::new_session());
        let limit = doc["paths"]["/jobs"]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "limit")
            .unwrap()["schema"]
            .clone();
        assert_eq!(limit, shapes::job_list_query()["properties"]["limit"]);
    }
}
