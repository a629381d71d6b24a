//! POST /mcp: the grid's calls as MCP tools over stateless Streamable HTTP,
//! in both eras of the protocol.
//!
//! - Legacy (2024-11-05 to 2025-11-25): `initialize`, then requests; this
//!   server keeps nothing between them (no `mcp-session-id` is issued).
//! - Modern (2026-07-28): no handshake; every request carries its version
//!   in `params._meta` and in the `MCP-Protocol-Version` header, with
//!   `Mcp-Method` (and `Mcp-Name` for a tool call) mirrored in headers;
//!   `server/discover` tells the versions and capabilities.
//!
//! One JSON-RPC message per request, answered with one JSON body; nothing
//! is pushed. The tools themselves are in `mcp_tools.rs`.
//!
//! Hand-written rather than built on an MCP SDK (rmcp): see docs/mcp.md.

use std::sync::Arc;

use base64::Engine;
use grid_core::error::ApiError;
use hyper::body::Incoming;
use hyper::header::{
    HeaderMap, HeaderName, HeaderValue, ACCEPT, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_HEADERS,
    ALLOW, CONTENT_TYPE, ORIGIN, VARY, WWW_AUTHENTICATE,
};
use hyper::{Method, Request, StatusCode};
use serde_json::{json, Map, Value};

use super::auth;
use super::limits;
use super::mcp_tools;
use super::respond::{self, Resp};
use super::Edge;
use crate::app::App;
use crate::store::accounts::Caller;

/// Handshake-era versions this server answers `initialize` with, newest first.
pub const LEGACY_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// Per-request-metadata versions, newest first.
pub const MODERN_VERSIONS: [&str; 1] = ["2026-07-28"];

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
/// The transport-level errors of the Streamable HTTP transport.
const TRANSPORT_ERROR: i64 = -32000;
/// 2026-07-28: headers missing or not matching the body.
const HEADER_MISMATCH: i64 = -32020;
/// 2026-07-28: a protocol version this server does not speak.
const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
const VERSION_HEADER: &str = "mcp-protocol-version";
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";
/// How long a client may keep `tools/list` and `server/discover` answers:
/// they change only when the server is upgraded.
const LIST_TTL_MS: u64 = 60 * 60 * 1000;

fn supported_versions() -> Vec<&'static str> {
    MODERN_VERSIONS.iter().chain(LEGACY_VERSIONS.iter()).copied().collect()
}

fn rpc_error(status: u16, code: i64, message: &str, id: Value) -> Resp {
    respond::json(status, &json!({"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": id}))
}

fn rpc_result(id: Value, result: Value) -> Resp {
    respond::json(200, &json!({"jsonrpc": "2.0", "result": result, "id": id}))
}

fn unsupported_version(requested: &str, id: Value) -> Resp {
    respond::json(
        400,
        &json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": UNSUPPORTED_PROTOCOL_VERSION,
                "message": format!("Unsupported protocol version {requested}"),
                "data": {"supported": supported_versions(), "requested": requested}
            }
        }),
    )
}

fn accepted() -> Resp {
    let mut r = respond::bytes(StatusCode::ACCEPTED, "application/json", vec![]);
    r.headers_mut().remove(CONTENT_TYPE);
    r
}

/// The endpoint: the `Origin` check and CORS around everything else, so a
/// permitted page can read every answer, refusals included.
pub async fn handle(app: &Arc<App>, edge: &Edge, req: Request<Incoming>) -> Result<Resp, ApiError> {
    let origin = req.headers().get(ORIGIN).and_then(|v| v.to_str().ok()).map(str::to_string);
    if let Some(o) = &origin {
        if !origin_allowed(&app.config.mcp_origins, o) {
            // DNS rebinding: a page of another origin must not reach a grid
            // on the user's network. No JSON-RPC id: nothing was read.
            let body = json!({"jsonrpc": "2.0", "error": {"code": TRANSPORT_ERROR, "message": format!(
                "Forbidden: Origin {o} may not call this endpoint (the operator allows origins with --mcp-allow-origin)"
            )}});
            return Ok(respond::json(403, &body));
        }
    }
    if req.method() == Method::OPTIONS {
        return Ok(preflight(origin.as_deref(), req.headers()));
    }
    let mut r = match endpoint(app, edge, req).await {
        Ok(r) => r,
        Err(e) => respond::error(&e),
    };
    if let Some(o) = origin {
        cors(r.headers_mut(), &o);
    }
    Ok(r)
}

/// Whether a page of `origin` may call the endpoint (`allowed` holds
/// normalised origins, or `*`).
fn origin_allowed(allowed: &[String], origin: &str) -> bool {
    let origin = crate::config::origin(origin).unwrap_or_else(|_| origin.to_string());
    allowed.iter().any(|a| a == "*" || *a == origin)
}

fn cors(h: &mut HeaderMap, origin: &str) {
    if let Ok(v) = HeaderValue::from_str(origin) {
        h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    h.insert(VARY, HeaderValue::from_static("Origin"));
    h.insert(ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static("www-authenticate, mcp-protocol-version"));
}

/// A browser's CORS preflight (the origin, when sent, was allowed). GET and
/// DELETE are listed so a browser client gets this endpoint's 405 rather
/// than a CORS failure it cannot tell from a network error.
fn preflight(origin: Option<&str>, headers: &HeaderMap) -> Resp {
    let mut r = respond::bytes(StatusCode::NO_CONTENT, "application/json", vec![]);
    r.headers_mut().remove(CONTENT_TYPE);
    let h = r.headers_mut();
    // What the resource has (the route table); the CORS list below also
    // names GET and DELETE so a page gets their 405 rather than a CORS failure.
    if let Ok(v) = HeaderValue::from_str(&grid_core::routes::allow(grid_core::routes::Route::Mcp.template())) {
        h.insert(ALLOW, v);
    }
    if let Some(o) = origin {
        cors(h, o);
        h.insert(ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST, DELETE, OPTIONS"));
        // The client's own list: it includes Mcp-Param-* names no fixed list can.
        let asked = headers.get(ACCESS_CONTROL_REQUEST_HEADERS).cloned();
        h.insert(
            ACCESS_CONTROL_ALLOW_HEADERS,
            asked.unwrap_or(HeaderValue::from_static(
                "authorization, content-type, accept, x-api-key, mcp-protocol-version, mcp-method, mcp-name",
            )),
        );
        h.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
    }
    r
}

/// The 401 of the endpoint: the contract's body and challenge, and a
/// `hint` saying what credential to send (an API key works whether or not
/// the grid has a sign-in).
fn unauthorized(app: &App) -> Resp {
    let mut body = ApiError::Unauthorized.row().body();
    let base = &app.config.base_url;
    body["hint"] = json!(match &app.config.auth_url {
        None => "An API key is required: send it as `Authorization: Bearer grid_...` (or `x-api-key: grid_...`). \
                 This grid has no sign-in, so OAuth discovery finds no authorization server."
            .to_string(),
        Some(issuer) => format!(
            "Send an API key as `Authorization: Bearer grid_...` (or `x-api-key`), or a sign-in token from \
             {issuer} whose audience is {base}/mcp."
        ),
    });
    let mut r = respond::json(401, &body);
    let challenge = format!("Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\"");
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        r.headers_mut().insert(WWW_AUTHENTICATE, v);
    }
    r
}

async fn endpoint(app: &Arc<App>, edge: &Edge, req: Request<Incoming>) -> Result<Resp, ApiError> {
    if req.method() != Method::POST {
        let mut r = rpc_error(405, TRANSPORT_ERROR, "Method not allowed.", Value::Null);
        r.headers_mut().insert(ALLOW, HeaderValue::from_static("POST"));
        return Ok(r);
    }
    let audience = format!("{}/mcp", app.config.base_url);
    let caller = match auth::authenticate(app, &edge.keys, req.headers(), &audience).await {
        Ok(c) => c,
        Err(ApiError::Unauthorized) => return Ok(unauthorized(app)),
        Err(e) => return Err(e),
    };
    // One MCP message is one request of the caller's rate.
    edge.limits.rates.check(&caller)?;
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
    let headers = req.headers().clone();
    // Too large or too slow are the same refusals as on every endpoint
    // (docs/limits.md), whether the bound showed in the head or while reading.
    let body = match limits::read_body(req.into_body(), edge.limits.conn.body_read_timeout).await {
        Ok(b) => b,
        Err(e) => {
            return match e.past_bound(&edge.limits.conn) {
                Some(refusal) => Err(refusal),
                None => Ok(rpc_error(400, PARSE_ERROR, &format!("Parse error: body unreadable ({e})"), Value::Null)),
            }
        }
    };
    let message: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return Ok(rpc_error(400, PARSE_ERROR, &format!("Parse error: {e}"), Value::Null)),
    };
    // A repeated name (in a tool's arguments, say) is no message a reader
    // may take one way (RFC 7493): refused, named, as on every route.
    if let Some(pointer) = grid_core::validate::members::duplicate_member(&body) {
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        let why = grid_core::validate::members::problem(&pointer);
        return Ok(rpc_error(400, PARSE_ERROR, &format!("Parse error: {why}"), id));
    }
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
    let id = msg.get("id").cloned();
    let Some(method) = msg.get("method") else {
        // A response to a server request, which this server never sends:
        // taken and ignored. Anything else is no message.
        if msg.contains_key("result") || msg.contains_key("error") {
            return Ok(accepted());
        }
        return Ok(rpc_error(
            400,
            INVALID_REQUEST,
            "Invalid Request: a message has a method (request or notification), or a result or error (response)",
            id.unwrap_or(Value::Null),
        ));
    };
    // What JSON-RPC and MCP require of a request, refused as the document
    // at GET /openapi.json states it.
    let problem = if !method.is_string() {
        Some("method must be a string")
    } else if id.as_ref().is_some_and(|i| !(i.is_string() || i.is_number())) {
        Some("id must be a string or a number")
    } else if msg.get("params").is_some_and(|p| !p.is_object()) {
        Some("params must be an object")
    } else {
        None
    };
    if let Some(problem) = problem {
        let echo = id.filter(|i| i.is_string() || i.is_number()).unwrap_or(Value::Null);
        return Ok(rpc_error(400, INVALID_REQUEST, &format!("Invalid Request: {problem}"), echo));
    }
    let method = method.as_str().unwrap_or_default();
    let Some(id) = id else {
        // Notifications (initialized, cancelled, ...) need no answer, in
        // either era.
        return Ok(accepted());
    };
    let params = msg.get("params").cloned().unwrap_or(json!({}));
    match era(&headers, method, &params) {
        Err(refusal) => Ok(refusal.render(id)),
        Ok(Era::Legacy) => Ok(legacy(app, &caller, method, &params, id).await),
        Ok(Era::Modern) => Ok(modern(app, &caller, method, &params, id).await),
    }
}

#[derive(Debug, PartialEq)]
enum Era {
    Legacy,
    Modern,
}

/// Why a request's version or mirrored headers are refused (HTTP 400).
#[derive(Debug, PartialEq)]
enum VersionRefusal {
    Unsupported(String),
    Mismatch(String),
}

impl VersionRefusal {
    fn render(self, id: Value) -> Resp {
        match self {
            VersionRefusal::Unsupported(v) => unsupported_version(&v, id),
            VersionRefusal::Mismatch(m) => rpc_error(400, HEADER_MISMATCH, &format!("Header mismatch: {m}"), id),
        }
    }
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(HeaderName::from_bytes(name.as_bytes()).ok()?).and_then(|v| v.to_str().ok()).map(str::trim)
}

/// A mirrored header value, decoded from `=?base64?...?=` when so written.
fn decoded(value: &str) -> Option<String> {
    match value.strip_prefix("=?base64?").and_then(|v| v.strip_suffix("?=")) {
        Some(b64) => base64::engine::general_purpose::STANDARD.decode(b64).ok().and_then(|b| String::from_utf8(b).ok()),
        None => Some(value.to_string()),
    }
}

/// Which era a request speaks, from `params._meta`'s protocol version and
/// the `MCP-Protocol-Version` header, checking what each era requires of
/// the headers. A request without a `_meta` version is legacy (after
/// `initialize`, or a 2025-03-26 client that sends no header).
fn era(headers: &HeaderMap, method: &str, params: &Value) -> Result<Era, VersionRefusal> {
    let supported = supported_versions();
    let header_version = header(headers, VERSION_HEADER);
    if let Some(v) = header_version {
        if !supported.contains(&v) {
            return Err(VersionRefusal::Unsupported(v.to_string()));
        }
    }
    let Some(meta_version) = params.get("_meta").and_then(|m| m.get(META_VERSION)) else {
        return match header_version {
            Some(v) if MODERN_VERSIONS.contains(&v) && method != "initialize" => Err(VersionRefusal::Mismatch(
                format!("MCP-Protocol-Version {v} needs params._meta[\"{META_VERSION}\"] with the same version"),
            )),
            _ => Ok(Era::Legacy),
        };
    };
    let Some(meta_version) = meta_version.as_str() else {
        return Err(VersionRefusal::Mismatch(format!("params._meta[\"{META_VERSION}\"] must be a string")));
    };
    if !MODERN_VERSIONS.contains(&meta_version) {
        return Err(VersionRefusal::Unsupported(meta_version.to_string()));
    }
    if header_version != Some(meta_version) {
        return Err(VersionRefusal::Mismatch(format!(
            "MCP-Protocol-Version header {:?} does not match the body's {meta_version}",
            header_version.unwrap_or("(missing)")
        )));
    }
    match header(headers, METHOD_HEADER).and_then(decoded) {
        Some(m) if m == method => {}
        other => {
            return Err(VersionRefusal::Mismatch(format!(
                "Mcp-Method header {:?} does not match the body's method {method}",
                other.unwrap_or_else(|| "(missing)".into())
            )))
        }
    }
    if method == "tools/call" {
        let name = params.get("name").and_then(Value::as_str).unwrap_or("");
        match header(headers, NAME_HEADER).and_then(decoded) {
            Some(n) if n == name => {}
            other => {
                return Err(VersionRefusal::Mismatch(format!(
                    "Mcp-Name header {:?} does not match the body's tool name {name:?}",
                    other.unwrap_or_else(|| "(missing)".into())
                )))
            }
        }
    }
    Ok(Era::Modern)
}

fn server_info() -> Value {
    json!({"name": "grid", "title": "Grid", "version": env!("CARGO_PKG_VERSION")})
}

const INSTRUCTIONS: &str = "Grid runs capture batches (screenshots, html and fetches of web pages), analytical \
    container jobs and leased browser sessions, billed to your account. Billable tools (submit_batch, \
    submit_compute_job, retry_job of a job, lease_session) reserve credit like their HTTP calls and say what \
    they cost; get_account shows your balance. Nothing is pushed: poll get_batch or get_job, then look at a \
    finished capture with get_capture.";

fn capabilities() -> Value {
    json!({"tools": {"listChanged": false}})
}

fn initialize(params: &Value) -> Value {
    let asked = params["protocolVersion"].as_str().unwrap_or("");
    let version = LEGACY_VERSIONS.iter().find(|v| **v == asked).unwrap_or(&LEGACY_VERSIONS[0]);
    json!({
        "protocolVersion": version,
        "capabilities": capabilities(),
        "serverInfo": server_info(),
        "instructions": INSTRUCTIONS
    })
}

fn discover() -> Value {
    json!({
        "supportedVersions": supported_versions(),
        "capabilities": capabilities(),
        "instructions": INSTRUCTIONS,
        "ttlMs": LIST_TTL_MS,
        "cacheScope": "public"
    })
}

/// The arguments of a `tools/call`: `Err` is the JSON-RPC invalid-params
/// message.
fn tool_call(params: &Value) -> Result<(&str, Map<String, Value>), String> {
    let name = params["name"].as_str().ok_or("params.name: required string")?;
    let args = match params.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err("params.arguments: must be an object".into()),
    };
    Ok((name, args))
}

async fn legacy(app: &Arc<App>, caller: &Caller, method: &str, params: &Value, id: Value) -> Resp {
    match method {
        "initialize" => rpc_result(id, initialize(params)),
        "ping" => rpc_result(id, json!({})),
        "server/discover" => rpc_result(id, discover()),
        "tools/list" => rpc_result(id, json!({ "tools": mcp_tools::tools() })),
        "tools/call" => match tool_call(params) {
            Ok((name, args)) => match mcp_tools::call(app, caller, name, &args).await {
                Ok(result) => rpc_result(id, result),
                Err(message) => rpc_error(200, INVALID_PARAMS, &message, id),
            },
            Err(message) => rpc_error(200, INVALID_PARAMS, &message, id),
        },
        other => rpc_error(200, METHOD_NOT_FOUND, &format!("Method not found: {other}"), id),
    }
}

/// A 2026-07-28 request: every result says it is complete and names the
/// server; an unknown method is HTTP 404 (the revision's rule).
async fn modern(app: &Arc<App>, caller: &Caller, method: &str, params: &Value, id: Value) -> Resp {
    let complete = |mut result: Value| {
        result["resultType"] = json!("complete");
        result["_meta"] = json!({ META_SERVER_INFO: server_info() });
        result
    };
    match method {
        "server/discover" => rpc_result(id, complete(discover())),
        "tools/list" => {
            rpc_result(id, complete(json!({"tools": mcp_tools::tools(), "ttlMs": LIST_TTL_MS, "cacheScope": "public"})))
        }
        "tools/call" => match tool_call(params) {
            // The revision gives HTTP statuses to a missing method and to
            // version and header refusals only; a tool the server does not
            // have is an ordinary JSON-RPC error, as in the older versions.
            Ok((name, args)) => match mcp_tools::call(app, caller, name, &args).await {
                Ok(result) => rpc_result(id, complete(result)),
                Err(message) => rpc_error(200, INVALID_PARAMS, &message, id),
            },
            Err(message) => rpc_error(200, INVALID_PARAMS, &message, id),
        },
        other => rpc_error(404, METHOD_NOT_FOUND, &format!("Method not found: {other}"), id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn modern_params(extra: Value) -> Value {
        let mut p = json!({"_meta": {META_VERSION: "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}});
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        p
    }

    #[test]
    fn version_negotiation_echoes_known_and_offers_newest_legacy_otherwise() {
        assert_eq!(initialize(&json!({"protocolVersion": "2025-03-26"}))["protocolVersion"], "2025-03-26");
        assert_eq!(initialize(&json!({"protocolVersion": "1999-01-01"}))["protocolVersion"], LEGACY_VERSIONS[0]);
        // The modern revision has no handshake to negotiate it in.
        assert_eq!(initialize(&json!({"protocolVersion": "2026-07-28"}))["protocolVersion"], LEGACY_VERSIONS[0]);
    }

    #[test]
    fn eras_are_told_apart_and_their_headers_checked() {
        let none = HeaderMap::new();
        assert_eq!(era(&none, "tools/list", &json!({})), Ok(Era::Legacy));
        let legacy = headers(&[(VERSION_HEADER, "2025-06-18")]);
        assert_eq!(era(&legacy, "tools/list", &json!({})), Ok(Era::Legacy));
        assert_eq!(
            era(&headers(&[(VERSION_HEADER, "2024-01-01")]), "ping", &json!({})),
            Err(VersionRefusal::Unsupported("2024-01-01".into()))
        );
        let modern = headers(&[(VERSION_HEADER, "2026-07-28"), (METHOD_HEADER, "tools/list")]);
        assert_eq!(era(&modern, "tools/list", &modern_params(json!({}))), Ok(Era::Modern));
        // The header and the body must agree on version, method and tool name.
        assert!(matches!(era(&none, "tools/list", &modern_params(json!({}))), Err(VersionRefusal::Mismatch(_))));
        assert!(matches!(era(&modern, "server/discover", &modern_params(json!({}))), Err(VersionRefusal::Mismatch(_))));
        assert!(matches!(era(&modern, "tools/list", &json!({})), Err(VersionRefusal::Mismatch(_))));
        let call =
            headers(&[(VERSION_HEADER, "2026-07-28"), (METHOD_HEADER, "tools/call"), (NAME_HEADER, "grid_status")]);
        assert_eq!(era(&call, "tools/call", &modern_params(json!({"name": "grid_status"}))), Ok(Era::Modern));
        assert!(matches!(
            era(&call, "tools/call", &modern_params(json!({"name": "get_job"}))),
            Err(VersionRefusal::Mismatch(_))
        ));
        let encoded = headers(&[
            (VERSION_HEADER, "2026-07-28"),
            (METHOD_HEADER, "tools/call"),
            (NAME_HEADER, "=?base64?Z3JpZF9zdGF0dXM=?="),
        ]);
        assert_eq!(era(&encoded, "tools/call", &modern_params(json!({"name": "grid_status"}))), Ok(Era::Modern));
        let mut unknown = modern_params(json!({}));
        unknown["_meta"][META_VERSION] = json!("2027-01-01");
        let h = headers(&[(VERSION_HEADER, "2026-07-28"), (METHOD_HEADER, "tools/list")]);
        assert_eq!(era(&h, "tools/list", &unknown), Err(VersionRefusal::Unsupported("2027-01-01".into())));
    }

    #[test]
    fn origins_are_compared_as_browsers_write_them() {
        let allowed = vec!["http://localhost:6274".to_string()];
        assert!(origin_allowed(&allowed, "http://localhost:6274"));
        assert!(origin_allowed(&allowed, "HTTP://LOCALHOST:6274"));
        assert!(!origin_allowed(&allowed, "http://localhost:6275"));
        assert!(!origin_allowed(&allowed, "null"));
        assert!(!origin_allowed(&[], "http://localhost:6274"));
        assert!(origin_allowed(&["*".to_string()], "https://anything.example"));
    }
}
