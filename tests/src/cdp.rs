//! A small Chrome DevTools Protocol client for the session tests and the
//! session bench: the way a lessee reaches a leased browser (HTTP discovery
//! on `{cdpUrl}/json/version`, then the WebSocket of its
//! `webSocketDebuggerUrl`), with page helpers over flattened target sessions.

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

pub struct Cdp {
    socket: Socket,
    next_id: u64,
}

impl Cdp {
    pub async fn connect(ws_url: &str) -> Result<Cdp, ConnectError> {
        match tokio_tungstenite::connect_async(ws_url).await {
            Ok((socket, _)) => Ok(Cdp { socket, next_id: 1 }),
            Err(tungstenite::Error::Http(resp)) => Err(ConnectError::Refused(resp.status().as_u16())),
            Err(e) => Err(ConnectError::Other(e.to_string())),
        }
    }

    /// Sends one command (to a flattened target session when `session` is
    /// set) and waits for its answer, skipping events.
    pub async fn call(&mut self, method: &str, params: Value, session: Option<&str>) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.socket.send(Message::Text(msg.to_string().into())).await.map_err(|e| format!("{method}: send: {e}"))?;
        let answer = tokio::time::timeout(CALL_TIMEOUT, async {
            while let Some(frame) = self.socket.next().await {
                let frame = frame.map_err(|e| format!("{method}: {e}"))?;
                let Message::Text(text) = frame else { continue };
                let v: Value = serde_json::from_str(&text).map_err(|e| format!("{method}: bad frame {e}"))?;
                if v["id"] == json!(id) {
                    if let Some(err) = v.get("error") {
                        return Err(format!("{method}: {err}"));
                    }
                    return Ok(v["result"].clone());
                }
            }
            Err(format!("{method}: connection closed"))
        })
        .await;
        answer.unwrap_or_else(|_| Err(format!("{method}: no answer within {CALL_TIMEOUT:?}")))
    }

    /// Opens `url` in a new page, attaches to it and waits until it has
    /// loaded; returns (targetId, sessionId).
    pub async fn open_page(&mut self, url: &str) -> Result<(String, String), String> {
        let target = self.call("Target.createTarget", json!({"url": url}), None).await?;
        let target_id = target["targetId"].as_str().ok_or_else(|| format!("no targetId: {target}"))?.to_string();
        let attached =
            self.call("Target.attachToTarget", json!({"targetId": target_id, "flatten": true}), None).await?;
        let session = attached["sessionId"].as_str().ok_or_else(|| format!("no sessionId: {attached}"))?.to_string();
        let deadline = Instant::now() + LOAD_TIMEOUT;
        loop {
            let state = self.evaluate(&session, "document.readyState + ' ' + location.href").await?;
            let state = state.as_str().unwrap_or_default().to_string();
            // about:blank is complete before the navigation has begun.
            if state.starts_with("complete ") && !state.ends_with(" about:blank") {
                return Ok((target_id, session));
            }
            if Instant::now() >= deadline {
                return Err(format!("{url} not loaded within {LOAD_TIMEOUT:?}: {state}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
