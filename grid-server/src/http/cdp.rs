//! The session's CDP endpoint: `{base}/cdp/{sessionId}/{token}/...`.
//!
//! The browser has no DevTools port: the grid holds its DevTools pipe and
//! serves the endpoint itself.
//! - HTTP discovery (`/json/version`, `/json/list`, `/json/new`,
//!   `/json/close/{id}`, `/json/activate/{id}`) is answered from the
//!   browser's own answers over the pipe, with addresses that point back
//!   through the grid.
//! - A WebSocket on `{cdpUrl}` or `/devtools/browser/...` is the browser
//!   target; one on `/devtools/page/{targetId}` is that page (the grid
//!   attaches to it and the client speaks to it without session ids). Each
//!   client command passes the CDP gate (`gate.rs`) and is relayed onto the
//!   pipe; answers and events come back.
//! - `{cdpUrl}/view` is a live view of the session's page for a person: a
//!   small page that watches it through a CDP screencast over this same
//!   endpoint (same token); discovery's `devtoolsFrontendUrl` points at it.
//! - Every connection closes when the session ends.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use grid_core::error::ApiError;
use grid_core::routes::Route;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, UPGRADE};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::forward::{self, Served};
use super::limits;
use super::respond::{self, Resp};
use crate::app::App;
use crate::browser::cdp::{ClientLink, CLIENT_BACKLOG_BYTES};
use crate::sessions::live::{cdp_url, token_hash, Endpoint, Live};
use crate::sessions::{self, gate};

/// How long a connection to a still-starting session waits for its browser.
const READY_WAIT: Duration = Duration::from_secs(30);
/// Longest a discovery answer may wait for the browser.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// One request to a session's endpoint: `route` is one of the router's CDP
/// routes, `params` its path parameters (session id, token, then the target
/// or browser id where the route has one).
pub async fn handle(app: &Arc<App>, route: Route, params: &[String], req: Request<Incoming>) -> Result<Resp, ApiError> {
    let (id, token) = match params {
        [id, token, ..] => (id.as_str(), token.as_str()),
        _ => return Err(ApiError::UnknownSession),
    };
    let target = params.get(2).cloned();
    let live = match app.sessions.live(id) {
        Some(live) => live,
        None => match locate(app, id, token, req.headers()).await? {
            Located::Here(live) => live,
            Located::At(node) => return forward::forward(app, &node, req, ApiError::UnknownSession).await,
        },
    };
    // Compared as hashes of equal length; the token itself is never stored.
    if token_hash(token) != live.token_sha256 {
        return Err(ApiError::UnknownSession);
    }
    let public_base = forward::public_base(app, req.headers());
    let is_upgrade =
        req.headers().get(UPGRADE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let socket = match route {
        Route::CdpView => return Ok(view_page(&public_base, live.take_over)),
        Route::CdpSocket | Route::CdpBrowserSocket => Some(None),
        Route::CdpPageSocket => Some(target.clone()),
        _ => None,
    };
    if socket.is_some() && !is_upgrade {
        return Err(ApiError::InvalidBody {
            detail: vec!["upgrade: this address takes a WebSocket (connect a CDP client to it)".into()],
        });
    }
    let endpoint = wait_ready(live.clone()).await?;
    if let Some(page) = socket {
        return upgrade(endpoint, page, req, live).await;
    }
    let public = cdp_url(&public_base, id, token);
    let query = req.uri().query().map(str::to_string);
    let answer =
        tokio::time::timeout(DISCOVERY_TIMEOUT, discovery(&endpoint, id, route, target.as_deref(), query, &public))
            .await
            .map_err(|_| ApiError::UnknownSession)??;
    Ok(respond::bytes(StatusCode::OK, "application/json; charset=UTF-8", answer.to_string().into_bytes()))
}

/// Where a session this node holds no browser for is served.
enum Located {
    /// Here after all: placed on this node and started just now (its
    /// lease came through another node whose call has not arrived yet).
    Here(Live),
    /// On the node at this advertised address.
    At(String),
}

/// Finds the browser of a session this node holds none for. Unknown,
/// ended, a wrong token, a node without an address, or a request another
/// node already forwarded (never passed on twice): unknown session.
async fn locate(app: &Arc<App>, id: &str, token: &str, headers: &hyper::HeaderMap) -> Result<Located, ApiError> {
    let found = forward::locate(app, id, headers).await?.ok_or(ApiError::UnknownSession)?;
    if !found.live || token_hash(token) != found.token_sha256 {
        return Err(ApiError::UnknownSession);
    }
    match found.served {
        Served::At(node) => Ok(Located::At(node)),
        Served::Unreachable => Err(ApiError::UnknownSession),
        Served::Here => {
            sessions::task::sync(&app.sessions.driver, id).await?;
            app.sessions.live(id).map(Located::Here).ok_or(ApiError::UnknownSession)
        }
    }
}

/// The live-view page (assets/view.html). Its address carries the
/// session's token, so it is never cached, never sent on as a referrer and
/// never framed; its script may talk only to this server.
/// The live view's page; `take_over` (the lease's `takeOver`) offers a
/// person the page's controls.
fn view_page(base_url: &str, take_over: bool) -> Resp {
    let ws_origin = ws_base(base_url);
    let csp = format!(
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; \
         connect-src 'self' {ws_origin}; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    );
    let html = VIEW_HTML.replace("data-take-over=\"false\"", &format!("data-take-over=\"{take_over}\""));
    let mut r = respond::bytes(StatusCode::OK, "text/html; charset=utf-8", html.into_bytes());
    let h = r.headers_mut();
    for (name, value) in [
        ("content-security-policy", csp.as_str()),
        ("referrer-policy", "no-referrer"),
        ("cache-control", "no-store"),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
    ] {
        if let Ok(v) = HeaderValue::from_str(value) {
            h.insert(name, v);
        }
    }
    r
}

const VIEW_HTML: &str = include_str!("assets/view.html");

async fn wait_ready(live: Live) -> Result<Endpoint, ApiError> {
    live.ready(READY_WAIT).await.ok_or(ApiError::UnknownSession)
}

fn ws_base(public_http: &str) -> String {
    if let Some(rest) = public_http.strip_prefix("https://") {
        format!("wss://{rest}")
    } else {
        format!("ws://{}", public_http.trim_start_matches("http://"))
    }
}

/// The `/json/...` answers, built from the browser's own.
async fn discovery(
    endpoint: &Endpoint,
    session_id: &str,
    route: Route,
    target: Option<&str>,
    query: Option<String>,
    public: &str,
) -> Result<Value, ApiError> {
    let cdp = &endpoint.cdp;
    let ws = ws_base(public);
    let gone = |_| ApiError::UnknownSession;
    let entry = |t: &Value| {
        let id = t["targetId"].as_str().unwrap_or_default();
        json!({
            "description": "",
            "devtoolsFrontendUrl": format!("{public}/view?target={id}"),
            "id": id,
            "title": t["title"],
            "type": t["type"],
            "url": t["url"],
            "webSocketDebuggerUrl": format!("{ws}/devtools/page/{id}"),
        })
    };
    match route {
        Route::CdpVersion => Ok(json!({
            "Browser": endpoint.version.product,
            "Protocol-Version": endpoint.version.protocol_version,
            "User-Agent": endpoint.version.user_agent,
            "V8-Version": endpoint.version.js_version,
            "WebKit-Version": endpoint.version.revision,
            "webSocketDebuggerUrl": format!("{ws}/devtools/browser/{session_id}"),
        })),
        Route::CdpTargets | Route::CdpTargetList => {
            let targets = cdp.send(None, "Target.getTargets", json!({})).await.map_err(gone)?;
            let list: Vec<Value> = targets["targetInfos"]
                .as_array()
                .map(|all| all.iter().filter(|t| t["type"] != "browser").map(entry).collect())
                .unwrap_or_default();
            Ok(Value::Array(list))
        }
        Route::CdpNewTarget | Route::CdpNewTargetGet => {
            let url = query
                .map(|q| {
                    url::form_urlencoded::parse(q.as_bytes())
                        .map(|(k, v)| if v.is_empty() { k } else { v })
                        .collect::<String>()
                })
                .filter(|u| !u.is_empty())
                .unwrap_or_else(|| "about:blank".into());
            let mut command = json!({"method": "Target.createTarget", "params": {"url": url}});
            gate::check(&mut command)
                .map_err(|why| ApiError::InvalidBody { detail: vec![format!("{}: {why}", gate::REFUSED)] })?;
            let created = cdp.send(None, "Target.createTarget", command["params"].clone()).await.map_err(gone)?;
            let info =
                cdp.send(None, "Target.getTargetInfo", json!({"targetId": created["targetId"]})).await.map_err(gone)?;
            Ok(entry(&info["targetInfo"]))
        }
        Route::CdpCloseTarget => {
            cdp.send(None, "Target.closeTarget", json!({"targetId": target})).await.map_err(gone)?;
            Ok(json!("Target is closing"))
        }
        Route::CdpActivateTarget => {
            cdp.send(None, "Target.activateTarget", json!({"targetId": target})).await.map_err(gone)?;
            Ok(json!("Target activated"))
        }
        _ => Err(ApiError::UnknownSession),
    }
}

async fn upgrade(
    endpoint: Endpoint,
    page: Option<String>,
    mut req: Request<Incoming>,
    live: Live,
) -> Result<Resp, ApiError> {
    let key =
        req.headers().get("sec-websocket-key").map(|v| v.as_bytes().to_vec()).ok_or(ApiError::InvalidBody {
            detail: vec!["sec-websocket-key: required for a WebSocket upgrade".into()],
        })?;
    // A page endpoint speaks to that page: attach before answering, so an
    // unknown target is refused like an unknown path.
    let link = endpoint.cdp.link_client();
    let page_session = match page {
        None => None,
        Some(target) => {
            let attached = endpoint
                .cdp
                .send(None, "Target.attachToTarget", json!({"targetId": target, "flatten": true}))
                .await
                .map_err(|_| ApiError::UnknownSession)?;
            let session = attached["sessionId"].as_str().unwrap_or_default().to_string();
            link.claim(&session);
            Some(session)
        }
    };
    let mut resp = Response::new(respond::empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    resp.headers_mut().insert(UPGRADE, HeaderValue::from_static("websocket"));
    resp.headers_mut().insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(accept) = HeaderValue::from_str(&derive_accept_key(&key)) {
        resp.headers_mut().insert("sec-websocket-accept", accept);
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else { return };
        let socket = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        relay(socket, link, page_session, live).await;
    });
    Ok(resp)
}

/// Moves messages between one client and the browser until either side
/// closes or the session ends.
async fn relay<S>(mut socket: WebSocketStream<S>, mut link: ClientLink, page_session: Option<String>, live: Live)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut ended = live.ended;
    loop {
        tokio::select! {
            frame = socket.next() => {
                let text = match frame {
                    Some(Ok(Message::Text(t))) => t.to_string(),
                    Some(Ok(Message::Binary(b))) => String::from_utf8_lossy(&b).into_owned(),
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                };
                let mut msg = match parse_command(&text) {
                    Ok(msg) => msg,
                    Err(answer) => {
                        if socket.send(Message::Text(answer.to_string().into())).await.is_err() { break }
                        continue;
                    }
                };
                if let (Some(session), None) = (&page_session, msg.get("sessionId")) {
                    msg["sessionId"] = json!(session);
                }
                if let Err(why) = gate::check(&mut msg) {
                    tracing::info!(method = msg["method"].as_str().unwrap_or_default(), why, "CDP gate refused a command");
                    let mut answer = gate::refusal(&msg, &why);
                    strip_session(&mut answer, page_session.as_deref());
                    if socket.send(Message::Text(answer.to_string().into())).await.is_err() { break }
                    continue;
                }
                if link.send(msg).is_err() {
                    break;
                }
            }
            out = link.recv() => {
                let Some(text) = out else { break };
                let text = match page_session.as_deref() {
                    None => text,
                    Some(session) => {
                        let Ok(mut msg) = serde_json::from_str::<Value>(&text) else { continue };
                        // A page client hears only its page.
                        if msg.get("sessionId").and_then(Value::as_str) != Some(session) && msg.get("id").is_none() {
                            continue;
                        }
                        strip_session(&mut msg, Some(session));
                        msg.to_string()
                    }
                };
                // A client that does not read blocks this write; it is given
                // up once the client falls too far behind.
                let sent = tokio::select! {
                    sent = socket.send(Message::Text(text.into())) => sent.is_ok(),
                    _ = link.cut() => false,
                };
                if !sent {
                    break;
                }
            }
            _ = async { let _ = ended.wait_for(|e| *e).await; } => {
                tracing::debug!("session ended; closing its CDP connection");
                break;
            }
        }
    }
    if link.cut_off() {
        crate::metrics::get().connections_cut.with_label_values(&[limits::Cut::CdpBacklog.label()]).inc();
        // Said to a client that reads again; one that never does is not
        // waited for.
        let why = format!("the client fell more than {} MiB behind the browser's messages", CLIENT_BACKLOG_BYTES >> 20);
        let reason = CloseFrame { code: CloseCode::Policy, reason: why.into() };
        let _ = tokio::time::timeout(CLOSE_GRACE, socket.close(Some(reason))).await;
        return;
    }
    let _ = socket.close(None).await;
}

/// How long a cut-off client's close frame may take to be written.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// A client's message as a command object, or the JSON-RPC error answer
/// for one that is not JSON (-32700) or not an object (-32600).
fn parse_command(text: &str) -> Result<Value, Value> {
    let error = |code: i32, message: &str| json!({"id": Value::Null, "error": {"code": code, "message": message}});
    match serde_json::from_str::<Value>(text) {
        Ok(msg) if msg.is_object() => Ok(msg),
        Ok(_) => Err(error(-32600, "message is not a JSON object")),
        Err(_) => Err(error(-32700, "message is not JSON")),
    }
}

fn strip_session(msg: &mut Value, session: Option<&str>) {
    if let (Some(session), Some(obj)) = (session, msg.as_object_mut()) {
        if obj.get("sessionId").and_then(Value::as_str) == Some(session) {
            obj.remove("sessionId");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn websocket_base_follows_the_public_scheme() {
        assert_eq!(ws_base("http://127.0.0.1:8080/cdp/s/t"), "ws://127.0.0.1:8080/cdp/s/t");
        assert_eq!(ws_base("https://grid.example/cdp/s/t"), "wss://grid.example/cdp/s/t");
    }

    #[test]
    fn only_json_objects_are_relayed_as_commands() {
        assert_eq!(parse_command(r#"{"id": 1, "method": "Browser.getVersion"}"#).unwrap()["id"], 1);
        assert_eq!(parse_command("[]").unwrap_err()["error"]["code"], -32600);
        assert_eq!(parse_command("5").unwrap_err()["error"]["code"], -32600);
        assert_eq!(parse_command("{nope").unwrap_err()["error"]["code"], -32700);
    }

    #[test]
    fn a_page_clients_session_id_is_removed_and_others_are_kept() {
        let mut own = json!({"id": 1, "sessionId": "P", "result": {}});
        strip_session(&mut own, Some("P"));
        assert_eq!(own, json!({"id": 1, "result": {}}));
        let mut other = json!({"method": "X", "sessionId": "Q"});
        strip_session(&mut other, Some("P"));
        assert_eq!(other["sessionId"], "Q");
    }
}
