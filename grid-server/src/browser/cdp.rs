//! One asynchronous DevTools connection per browser, multiplexing every
//! page on it (flattened target sessions).
//!
//! - A call is written to the socket the moment it is made, so several
//!   calls made before awaiting any are pipelined: the browser runs them in
//!   order on their session and answers them together.
//! - Answers are matched to callers by id; events are routed to the
//!   subscriber of their session.
//! - When the socket closes (the browser died) every waiting call fails
//!   with [`CdpError::Closed`] and every subscription ends.
//!
//! Typed calls use headless_chrome's generated protocol types (its
//! `Method` trait names the method and its answer); the transport is this
//! one because headless_chrome's is blocking, one round trip at a time.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::{SinkExt, StreamExt};
use headless_chrome::protocol::cdp::types::Method;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;

#[derive(Debug, Clone, thiserror::Error)]
pub enum CdpError {
    #[error("devtools connection to {0} failed: {1}")]
    Connect(String, String),
    #[error("devtools connection closed")]
    Closed,
    #[error("{0}: devtools answered an error: {1}")]
    Protocol(String, String),
    #[error("{0}: unexpected answer: {1}")]
    Decode(String, String),
}

/// An event of one target session.
#[derive(Debug)]
pub struct Event {
    pub method: String,
    pub params: Value,
}

type Reply = Result<Value, String>;

#[derive(Default)]
struct Routes {
    closed: bool,
    pending: HashMap<u64, oneshot::Sender<Reply>>,
    sessions: HashMap<String, mpsc::UnboundedSender<Event>>,
}

struct Shared {
    next_id: AtomicU64,
    routes: Mutex<Routes>,
}

/// A cheap handle; clones share the connection.
#[derive(Clone)]
pub struct Connection {
    out: mpsc::UnboundedSender<Message>,
    shared: Arc<Shared>,
    _tasks: Arc<Tasks>,
}

struct Tasks(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

impl Connection {
    pub async fn connect(ws_url: &str) -> Result<Connection, CdpError> {
        let (socket, _) = tokio_tungstenite::connect_async(ws_url)
            .await
            .map_err(|e| CdpError::Connect(ws_url.to_string(), e.to_string()))?;
        let (mut sink, mut stream) = socket.split();
        let shared = Arc::new(Shared { next_id: AtomicU64::new(1), routes: Mutex::new(Routes::default()) });
        let (out, mut outgoing) = mpsc::unbounded_channel::<Message>();
        let writer = tokio::spawn(async move {
            while let Some(msg) = outgoing.recv().await {
                if sink.send(msg).await.is_err() {
                    break;
                }
            }
            let _ = sink.close().await;
        });
        let routes = shared.clone();
        let reader = tokio::spawn(async move {
            while let Some(Ok(frame)) = stream.next().await {
                let Message::Text(text) = frame else { continue };
                let Ok(msg) = serde_json::from_str::<Value>(&text) else { continue };
                routes.route(msg);
            }
            routes.close();
        });
        Ok(Connection { out, shared, _tasks: Arc::new(Tasks(vec![writer, reader])) })
    }

    /// Sends `method` now (on a target session, or the browser's) and
    /// returns its answer's future. Dropping the future forgets the answer.
    pub fn send(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> impl Future<Output = Result<Value, CdpError>> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let sent = {
            let mut routes = self.shared.routes.lock().expect("routes lock");
            if routes.closed {
                false
            } else {
                routes.pending.insert(id, tx);
                let params = if params.is_null() { json!({}) } else { params };
                let mut msg = json!({"id": id, "method": method, "params": params});
                if let Some(s) = session {
                    msg["sessionId"] = json!(s);
                }
                self.out.send(Message::Text(msg.to_string().into())).is_ok()
            }
        };
        let method = method.to_string();
        async move {
            if !sent {
                return Err(CdpError::Closed);
            }
            match rx.await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(message)) => Err(CdpError::Protocol(method, message)),
                Err(_) => Err(CdpError::Closed),
            }
        }
    }

    /// A typed call; sent now, like [`Connection::send`].
    pub fn call<M: Method + Serialize>(
        &self,
        session: Option<&str>,
        method: M,
    ) -> impl Future<Output = Result<M::ReturnObject, CdpError>> {
        let params = serde_json::to_value(&method).unwrap_or(Value::Null);
        let answer = self.send(session, M::NAME, params);
        async move {
            let v = answer.await?;
            serde_json::from_value(v).map_err(|e| CdpError::Decode(M::NAME.to_string(), e.to_string()))
        }
    }

    /// Events of `session` from now on; ends when the connection closes or
    /// [`Connection::unsubscribe`] is called.
    pub fn subscribe(&self, session: &str) -> mpsc::UnboundedReceiver<Event> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut routes = self.shared.routes.lock().expect("routes lock");
        if !routes.closed {
            routes.sessions.insert(session.to_string(), tx);
        }
        rx
    }

    pub fn unsubscribe(&self, session: &str) {
        self.shared.routes.lock().expect("routes lock").sessions.remove(session);
    }

    pub fn is_closed(&self) -> bool {
        self.shared.routes.lock().map(|r| r.closed).unwrap_or(true)
    }

    /// Opens `url` in a fresh page, waits for it to finish loading (or
    /// fail), evaluates `expression` there (awaiting a promise) and closes
    /// the page. Callers bound the whole with their own timeout.
    pub async fn evaluate_in_page(&self, url: &str, expression: &str) -> Result<Value, CdpError> {
        let target = self.send(None, "Target.createTarget", json!({"url": url})).await?;
        let target_id = target["targetId"].as_str().unwrap_or_default().to_string();
        let result = async {
            let attached =
                self.send(None, "Target.attachToTarget", json!({"targetId": target_id, "flatten": true})).await?;
            let session = attached["sessionId"].as_str().unwrap_or_default().to_string();
            loop {
                let state = self
                    .send(
                        Some(&session),
                        "Runtime.evaluate",
                        json!({"expression": "[document.readyState, location.href]", "returnByValue": true}),
                    )
                    .await?;
                let value = &state["result"]["value"];
                // A new target's initial about:blank is `complete` before the
                // navigation to `url` has committed: wait for the page itself.
                let navigated = url == "about:blank" || value[1] != "about:blank";
                if value[0] == "complete" && navigated {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            let result = self
                .send(
                    Some(&session),
                    "Runtime.evaluate",
                    json!({"expression": expression, "awaitPromise": true, "returnByValue": true}),
                )
                .await?;
            if let Some(ex) = result.get("exceptionDetails") {
                return Err(CdpError::Protocol("Runtime.evaluate".into(), ex.to_string()));
            }
            Ok(result["result"]["value"].clone())
        }
        .await;
        let _ = self.send(None, "Target.closeTarget", json!({"targetId": target_id})).await;
        result
    }
}

impl Shared {
    fn route(&self, mut msg: Value) {
        let Ok(mut routes) = self.routes.lock() else { return };
        if let Some(id) = msg.get("id").and_then(Value::as_u64) {
            if let Some(tx) = routes.pending.remove(&id) {
                let reply = match msg.get_mut("error") {
                    Some(e) => Err(e
                        .get("message")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .unwrap_or_else(|| e.to_string())),
                    None => Ok(msg.get_mut("result").map(Value::take).unwrap_or(Value::Null)),
                };
                let _ = tx.send(reply);
            }
            return;
        }
        let session = msg.get("sessionId").and_then(Value::as_str).map(str::to_string);
        let method = msg.get("method").and_then(Value::as_str).map(str::to_string);
        let (Some(session), Some(method)) = (session, method) else { return };
        if let Some(tx) = routes.sessions.get(&session) {
            let event = Event { method, params: msg.get_mut("params").map(Value::take).unwrap_or(Value::Null) };
            if tx.send(event).is_err() {
                routes.sessions.remove(&session);
            }
        }
    }

    fn close(&self) {
        if let Ok(mut routes) = self.routes.lock() {
            routes.closed = true;
            routes.pending.clear();
            routes.sessions.clear();
        }
    }
}
