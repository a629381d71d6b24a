//! A minimal Chrome DevTools Protocol client over the browser's WebSocket,
//! enough for the grid to look inside a session's browser: open a blank
//! page, evaluate an expression, close the page.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub struct Cdp {
    socket: Socket,
    next_id: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum CdpError {
    #[error("devtools connection: {0}")]
    Socket(String),
    #[error("devtools answered an error: {0}")]
    Protocol(String),
    #[error("devtools did not answer within {0:?}")]
    Timeout(Duration),
}

impl Cdp {
    pub async fn connect(ws_url: &str) -> Result<Cdp, CdpError> {
        let (socket, _) = tokio_tungstenite::connect_async(ws_url).await.map_err(|e| CdpError::Socket(e.to_string()))?;
        Ok(Cdp { socket, next_id: 1 })
    }

    /// Sends one command and waits for its answer, skipping events.
    pub async fn call(&mut self, method: &str, params: Value, session: Option<&str>) -> Result<Value, CdpError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.socket.send(Message::Text(msg.to_string().into())).await.map_err(|e| CdpError::Socket(e.to_string()))?;
        let limit = Duration::from_secs(20);
        tokio::time::timeout(limit, async {
            while let Some(frame) = self.socket.next().await {
                let frame = frame.map_err(|e| CdpError::Socket(e.to_string()))?;
                let Message::Text(text) = frame else { continue };
                let v: Value = serde_json::from_str(&text).map_err(|e| CdpError::Protocol(e.to_string()))?;
                if v["id"] == json!(id) {
                    if let Some(err) = v.get("error") {
                        return Err(CdpError::Protocol(err.to_string()));
                    }
                    return Ok(v["result"].clone());
                }
            }
            Err(CdpError::Socket("closed".into()))
        })
        .await
        .map_err(|_| CdpError::Timeout(limit))?
    }

    /// Evaluates `expression` (awaiting a promise) in a fresh blank page and
    /// returns its value; the page is closed afterwards.
    pub async fn evaluate_in_blank_page(&mut self, expression: &str) -> Result<Value, CdpError> {
        self.evaluate_in_page("about:blank", expression).await
    }

    /// Opens `url` in a fresh page, waits for it to finish loading (or fail),
    /// evaluates `expression` there and closes the page.
    pub async fn evaluate_in_page(&mut self, url: &str, expression: &str) -> Result<Value, CdpError> {
        let target = self.call("Target.createTarget", json!({"url": url}), None).await?;
        let target_id = target["targetId"].as_str().unwrap_or_default().to_string();
        let attached = self.call("Target.attachToTarget", json!({"targetId": target_id, "flatten": true}), None).await?;
        let session = attached["sessionId"].as_str().unwrap_or_default().to_string();
        for _ in 0..100 {
            let state = self
                .call(
                    "Runtime.evaluate",
                    json!({"expression": "[document.readyState, location.href]", "returnByValue": true}),
                    Some(&session),
                )
                .await?;
            let value = &state["result"]["value"];
            // A new target's initial about:blank is `complete` before the
            // navigation to `url` has committed: wait for the page itself.
            let navigated = url == "about:blank" || value[1] != "about:blank";
            if value[0] == "complete" && navigated {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let result = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "awaitPromise": true, "returnByValue": true}),
                Some(&session),
            )
            .await;
        let _ = self.call("Target.closeTarget", json!({"targetId": target_id}), None).await;
        let result = result?;
        if let Some(ex) = result.get("exceptionDetails") {
            return Err(CdpError::Protocol(ex.to_string()));
        }
        Ok(result["result"]["value"].clone())
    }
}
