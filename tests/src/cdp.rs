//! A small Chrome DevTools Protocol client for the session tests and the
//! session bench: the way a lessee reaches a leased browser (HTTP discovery
//! on `{cdpUrl}/json/version`, then the WebSocket of its
//! `webSocketDebuggerUrl`), with page helpers over flattened target sessions.
//!
//! [`Cdp::send`] keeps a CDP error answer apart from a broken connection, so
//! a test can tell "the grid refused this command" ([`refused`]) from "the
//! command could not be sent"; events that arrive while a command waits are
//! kept for [`Cdp::wait_event`].

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::{self, Message};

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Longest one CDP command may take to answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest a page may take to reach `document.readyState == "complete"`.
const LOAD_TIMEOUT: Duration = Duration::from_secs(20);

/// `{cdp_url}/json/version` as JSON; Err carries the status and body of a
/// non-200 answer (`404 {"error":"unknown session"}`).
pub async fn json_version(http: &reqwest::Client, cdp_url: &str) -> Result<Value, String> {
    let r = http.get(format!("{cdp_url}/json/version")).send().await.map_err(|e| format!("GET json/version: {e}"))?;
    let status = r.status().as_u16();
    let text = r.text().await.map_err(|e| format!("json/version body: {e}"))?;
    if status != 200 {
        return Err(format!("{status} {text}"));
    }
    serde_json::from_str(&text).map_err(|e| format!("json/version is not JSON ({e}): {text}"))
}

/// The `webSocketDebuggerUrl` of `{cdp_url}/json/version`.
pub async fn ws_url(http: &reqwest::Client, cdp_url: &str) -> Result<String, String> {
    let v = json_version(http, cdp_url).await?;
    v["webSocketDebuggerUrl"].as_str().map(str::to_string).ok_or_else(|| format!("no webSocketDebuggerUrl in {v}"))
}

/// How a WebSocket connection attempt ended.
#[derive(Debug)]
pub enum ConnectError {
    /// The server answered the upgrade with this HTTP status instead of 101.
    Refused(u16),
    Other(String),
}

/// The start of the message of a CDP error answer with which the grid's CDP
/// gate refuses a command (`{"code":-32000,"message":"refused by the grid: <reason>"}`).
pub const GATE_REFUSAL: &str = "refused by the grid";

/// Events kept for [`Cdp::wait_event`]; older ones are dropped.
const EVENTS_KEPT: usize = 4_096;

/// The answer to one command: its `result`, or its `error` object.
pub type Answer = Result<Value, Value>;

/// Ok when `answer` is a CDP error whose message starts with
/// [`GATE_REFUSAL`]; otherwise Err describing what came instead.
pub fn refused(what: &str, answer: &Answer) -> Result<(), String> {
    match answer {
        Err(e) if e["message"].as_str().is_some_and(|m| m.starts_with(GATE_REFUSAL)) => Ok(()),
        Err(e) => Err(format!("{what}: answered with an error that is not the grid's refusal: {e}")),
        Ok(r) => Err(format!("{what}: not refused, the browser answered {r}")),
    }
}

pub struct Cdp {
    socket: Socket,
    next_id: u64,
    events: VecDeque<Value>,
}

impl Cdp {
    pub async fn connect(ws_url: &str) -> Result<Cdp, ConnectError> {
        Cdp::connect_trusting(ws_url, None).await
    }

    /// [`Cdp::connect`]; a `wss://` URL is verified against the CA
    /// certificates of the PEM file `ca` (and nothing else) when given.
    pub async fn connect_trusting(ws_url: &str, ca: Option<&Path>) -> Result<Cdp, ConnectError> {
        let connector = match ca {
            None => None,
            Some(ca) => Some(tokio_tungstenite::Connector::Rustls(rustls_trusting(ca).map_err(ConnectError::Other)?)),
        };
        match tokio_tungstenite::connect_async_tls_with_config(ws_url, None, false, connector).await {
            Ok((socket, _)) => Ok(Cdp { socket, next_id: 1, events: VecDeque::new() }),
            Err(tungstenite::Error::Http(resp)) => Err(ConnectError::Refused(resp.status().as_u16())),
            Err(e) => Err(ConnectError::Other(e.to_string())),
        }
    }

    /// Sends one command (to a flattened target session when `session` is
    /// set) and waits for its answer, keeping events; a CDP error answer is
    /// an Err.
    pub async fn call(&mut self, method: &str, params: Value, session: Option<&str>) -> Result<Value, String> {
        self.send(method, params, session).await?.map_err(|err| format!("{method}: {err}"))
    }

    /// Sends one command and waits for its answer: Ok(Ok(result)) or
    /// Ok(Err(error object)); the outer Err is a connection problem or no
    /// answer within the call timeout.
    pub async fn send(&mut self, method: &str, params: Value, session: Option<&str>) -> Result<Answer, String> {
        let id = self.post(method, params, session).await?;
        let (socket, events) = (&mut self.socket, &mut self.events);
        let answer = tokio::time::timeout(CALL_TIMEOUT, async {
            while let Some(frame) = socket.next().await {
                let frame = frame.map_err(|e| format!("{method}: {e}"))?;
                let Message::Text(text) = frame else { continue };
                let v: Value = serde_json::from_str(&text).map_err(|e| format!("{method}: bad frame {e}"))?;
                if v["id"] == json!(id) {
                    if let Some(err) = v.get("error") {
                        return Ok(Err(err.clone()));
                    }
                    return Ok(Ok(v["result"].clone()));
                }
                if v.get("method").is_some() {
                    keep_event(events, v);
                }
            }
            Err(format!("{method}: connection closed"))
        })
        .await;
        answer.unwrap_or_else(|_| Err(format!("{method}: no answer within {CALL_TIMEOUT:?}")))
    }

    /// Writes one command and does not wait for its answer (a client that
    /// never reads); returns its id.
    pub async fn post(&mut self, method: &str, params: Value, session: Option<&str>) -> Result<u64, String> {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.socket.send(Message::Text(msg.to_string().into())).await.map_err(|e| format!("{method}: send: {e}"))?;
        Ok(id)
    }

    /// Reads everything the server still sends, up to the connection's end,
    /// within `within`: the close frame's code and reason if one came (a
    /// connection cut mid-message ends without one: `None`).
    pub async fn read_to_end(&mut self, within: Duration) -> Result<Option<(u16, String)>, String> {
        let socket = &mut self.socket;
        let end = tokio::time::timeout(within, async {
            while let Some(frame) = socket.next().await {
                match frame {
                    Ok(Message::Close(Some(frame))) => return Some((u16::from(frame.code), frame.reason.to_string())),
                    Ok(_) => {}
                    Err(_) => return None,
                }
            }
            None
        })
        .await;
        end.map_err(|_| format!("the connection did not end within {within:?}"))
    }

    /// The first event (kept or arriving within `within`) named `method`
    /// for which `matches` holds; it is taken out of the kept events.
    pub async fn wait_event(
        &mut self,
        method: &str,
        within: Duration,
        matches: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        let wanted = |v: &Value| v["method"] == method && matches(&v["params"]);
        if let Some(i) = self.events.iter().position(wanted) {
            return self.events.remove(i);
        }
        let (socket, events) = (&mut self.socket, &mut self.events);
        tokio::time::timeout(within, async {
            while let Some(Ok(frame)) = socket.next().await {
                let Message::Text(text) = frame else { continue };
                let Ok(v) = serde_json::from_str::<Value>(&text) else { continue };
                if wanted(&v) {
                    return Some(v);
                }
                if v.get("method").is_some() {
                    keep_event(events, v);
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
    }

    /// `Target.attachToTarget` (flattened); returns the sessionId.
    pub async fn attach(&mut self, target_id: &str) -> Result<String, String> {
        let attached =
            self.call("Target.attachToTarget", json!({"targetId": target_id, "flatten": true}), None).await?;
        attached["sessionId"].as_str().map(str::to_string).ok_or_else(|| format!("no sessionId: {attached}"))
    }

    /// A new page on `about:blank` (in `context` when given), attached;
    /// returns (targetId, sessionId).
    pub async fn blank_page(&mut self, context: Option<&str>) -> Result<(String, String), String> {
        let mut params = json!({"url": "about:blank"});
        if let Some(c) = context {
            params["browserContextId"] = json!(c);
        }
        let target = self.call("Target.createTarget", params, None).await?;
        let target_id = target["targetId"].as_str().ok_or_else(|| format!("no targetId: {target}"))?.to_string();
        let session = self.attach(&target_id).await?;
        Ok((target_id, session))
    }

    /// Waits (at most `within`) until the page's document is complete and
    /// no longer the initial `about:blank`; returns `readyState location.href` as last seen. Never an error: a
    /// page that does not load is for the caller to judge by what it shows.
    pub async fn settle(&mut self, session: &str, within: Duration) -> String {
        // A bounded look, not a wait that fails: at the bound it answers
        // what it saw.
        let deadline = Instant::now() + within;
        let mut last = String::new();
        loop {
            if let Ok(v) = self.evaluate(session, "document.readyState + ' ' + location.href").await {
                last = v.as_str().unwrap_or_default().to_string();
                if last.starts_with("complete ") && !last.ends_with(" about:blank") {
                    return last;
                }
            }
            if Instant::now() >= deadline {
                return last;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Everything a CDP client can read of a page: its URL and the whole
    /// DOM including frames and shadow roots (`DOM.getDocument` with
    /// `pierce`), as one string. An error reads as its text.
    pub async fn page_dump(&mut self, session: &str) -> String {
        let href = self.evaluate(session, "location.href").await.unwrap_or_else(|e| json!(e));
        let dom = match self.call("DOM.getDocument", json!({"depth": -1, "pierce": true}), Some(session)).await {
            Ok(d) => d.to_string(),
            Err(e) => e,
        };
        let text = self
            .evaluate(session, "document.documentElement ? document.documentElement.outerHTML : ''")
            .await
            .unwrap_or_else(|e| json!(e));
        format!("{href} {text} {dom}")
    }

    /// Opens `url` in a new page, attaches to it and waits until it has
    /// loaded (failing the test after 20 s); returns (targetId, sessionId),
    /// or the error of a CDP call.
    pub async fn open_page(&mut self, url: &str) -> Result<(String, String), String> {
        let target = self.call("Target.createTarget", json!({"url": url}), None).await?;
        let target_id = target["targetId"].as_str().ok_or_else(|| format!("no targetId: {target}"))?.to_string();
        let session = self.attach(&target_id).await?;
        // The probe's future borrows the connection, so it is lent through a
        // lock. A failed evaluation ends the wait with its error.
        let conn = tokio::sync::Mutex::new(&mut *self);
        let loaded = crate::wait::wait_for(&format!("{url} loaded"), LOAD_TIMEOUT, || async {
            let state = match conn.lock().await.evaluate(&session, "document.readyState + ' ' + location.href").await {
                Ok(state) => state.as_str().unwrap_or_default().to_string(),
                Err(e) => return Ok(Err(e)),
            };
            // about:blank is complete before the navigation has begun.
            match state.starts_with("complete ") && !state.ends_with(" about:blank") {
                true => Ok(Ok(())),
                false => Err(state),
            }
        })
        .await;
        loaded.map(|()| (target_id, session))
    }

    /// `Runtime.evaluate` in a page session, by value; an exception is an Err.
    pub async fn evaluate(&mut self, session: &str, expression: &str) -> Result<Value, String> {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
                Some(session),
            )
            .await?;
        if let Some(ex) = r.get("exceptionDetails") {
            return Err(format!("{expression}: {ex}"));
        }
        Ok(r["result"]["value"].clone())
    }

    /// Reads frames until the connection ends; true when it ended (close
    /// frame, error or end of stream) within `limit`.
    pub async fn closes_within(&mut self, limit: Duration) -> bool {
        tokio::time::timeout(limit, async {
            loop {
                match self.socket.next().await {
                    None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                    Some(Ok(_)) => continue,
                }
            }
        })
        .await
        .is_ok()
    }
}

/// A rustls client configuration (ring provider) trusting only the CA
/// certificates of the PEM file `ca`.
pub fn rustls_trusting(ca: &Path) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| format!("CA {}: {e}", ca.display()))? {
        roots.add(cert.map_err(|e| format!("CA {}: {e}", ca.display()))?).map_err(|e| format!("CA: {e}"))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

fn keep_event(events: &mut VecDeque<Value>, event: Value) {
    if events.len() >= EVENTS_KEPT {
        events.pop_front();
    }
    events.push_back(event);
}
