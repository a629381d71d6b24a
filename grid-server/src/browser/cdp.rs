//! One asynchronous DevTools connection per browser, over the browser's
//! DevTools pipe (`--remote-debugging-pipe`: NUL-terminated JSON messages;
//! the browser has no DevTools port), multiplexing every page on it
//! (flattened target sessions) and every lessee connection relayed to it.
//!
//! - A call is written the moment it is made, so several calls made before
//!   awaiting any are pipelined: the browser runs them in order on their
//!   session and answers them together.
//! - Answers are matched to callers by id; events are routed to the
//!   subscriber of their session.
//! - A [`ClientLink`] is a lessee's connection relayed onto the same pipe:
//!   its message ids are renumbered on the way in and restored on the way
//!   out, and it receives the events of the target sessions it attached
//!   (and, while nobody claims a session, every event the grid itself does
//!   not subscribe to).
//! - When the pipe closes (the browser died) every waiting call fails with
//!   [`CdpError::Closed`] and every subscription and client link ends.
//! - What the server holds for a browser is bounded in bytes, whatever the
//!   browser or a client does: one message of the browser at most
//!   [`MAX_BROWSER_MESSAGE`] (a longer one is dropped as it is read, and the
//!   call it answers fails), and a client at most [`CLIENT_BACKLOG_BYTES`]
//!   behind (then it is cut off: [`ClientLink::cut_off`]).
//!
//! Typed calls use headless_chrome's generated protocol types (its
//! `Method` trait names the method and its answer); the transport is this
//! one because headless_chrome's is blocking, one round trip at a time.

use std::collections::HashMap;
use std::future::Future;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use headless_chrome::protocol::cdp::types::Method;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

#[derive(Debug, Clone, thiserror::Error)]
pub enum CdpError {
    #[error("devtools connection closed")]
    Closed,
    #[error("{0}: devtools answered an error: {1}")]
    Protocol(String, String),
    #[error("{0}: unexpected answer: {1}")]
    Decode(String, String),
}

/// The longest message the browser may write on its pipe. A longer one (a
/// page's value of hundreds of megabytes returned by value, say) is dropped
/// as it is read, never held whole: the command it answers fails with
/// [`TOO_LARGE`]. Large enough for any screenshot Chromium takes (its
/// surfaces stop at 16,384 pixels a side), PDFs and snapshots.
pub const MAX_BROWSER_MESSAGE: usize = 256 << 20;

/// The error of a command whose answer passed [`MAX_BROWSER_MESSAGE`].
pub const TOO_LARGE: &str = "the browser's answer is larger than the grid relays (256 MiB); ask for less";

/// An event of one target session.
#[derive(Debug)]
pub struct Event {
    pub method: String,
    pub params: Value,
}

type Reply = Result<Value, String>;

/// Who waits for the answer of an id written to the pipe, and what it
/// was sent for.
enum Waiter {
    Grid(oneshot::Sender<Reply>, Sent),
    /// A client link, and the id it used.
    Client(u64, Value, Sent),
}

impl Waiter {
    fn sent(&self) -> &Sent {
        match self {
            Waiter::Grid(_, sent) | Waiter::Client(_, _, sent) => sent,
        }
    }
}

/// What a command written to the pipe was about, besides its reply.
struct Sent {
    /// The target session it was sent on (none: the browser's). A session
    /// that detaches before answering never answers: its commands are
    /// failed when it detaches.
    session: Option<String>,
    /// The target a browser-level `Target.attachToTarget` attaches: the
    /// browser announces the new session with a browser-level
    /// `Target.attachedToTarget`, which only the attacher may see (any
    /// other client would take it for a target of its own: Playwright
    /// fails with "Duplicate target").
    attaching: Option<String>,
}

impl Sent {
    fn new(session: Option<&str>, method: &str, params: &Value) -> Sent {
        let attaching = match (session, method) {
            (None, "Target.attachToTarget") => params["targetId"].as_str().map(str::to_string),
            _ => None,
        };
        Sent { session: session.map(str::to_string), attaching }
    }
}

#[derive(Default)]
struct Routes {
    closed: bool,
    pending: HashMap<u64, Waiter>,
    /// The grid's own subscriptions, by target session.
    sessions: HashMap<String, mpsc::UnboundedSender<Event>>,
    clients: HashMap<u64, ClientQueue>,
    /// Target sessions a client attached, by session id.
    owners: HashMap<String, u64>,
    /// Targets being attached at the browser's level, and by whom (a
    /// client, or the grid: `None`), until the browser announces it.
    attaching: HashMap<String, Option<u64>>,
    /// Target sessions the grid attached at the browser's level, from its
    /// attach's answer until they detach, and those of a client gone that
    /// the grid detaches for it: their announcement (when it comes after
    /// the answer), their events and their detachment are shown to no
    /// client.
    grid_owned: std::collections::HashSet<String>,
}

struct Shared {
    next_id: AtomicU64,
    routes: Mutex<Routes>,
}

/// A cheap handle; clones share the connection.
#[derive(Clone)]
pub struct Connection {
    out: mpsc::UnboundedSender<String>,
    shared: Arc<Shared>,
    _tasks: Arc<Tasks>,
}

/// Bytes of messages a relayed client may fall behind by before it is cut
/// off: the browser is never slowed by a client, and a client that stops
/// reading must not grow the server's memory without bound. Counted in
/// bytes, not messages: one unread answer may be hundreds of megabytes. A
/// message larger than the whole bound still goes to a client that has
/// read everything before it (a full-page screenshot), so the most held for
/// one client is this plus one message.
pub const CLIENT_BACKLOG_BYTES: usize = 64 << 20;

/// The sending half of a client's messages, with what it holds unread.
struct ClientQueue {
    tx: mpsc::UnboundedSender<String>,
    backlog: Arc<Backlog>,
}

/// Bytes queued for a client and not yet taken, and whether it was cut
/// off for falling too far behind.
#[derive(Default)]
struct Backlog {
    bytes: AtomicUsize,
    cut: AtomicBool,
    cut_signal: tokio::sync::Notify,
}

/// A lessee's connection relayed onto the browser's pipe; dropping it
/// forgets its pending answers and sessions.
pub struct ClientLink {
    id: u64,
    conn: Connection,
    /// Messages for the client, as the browser wrote them (ids restored);
    /// ends when the browser is gone or the client fell too far behind.
    incoming: mpsc::UnboundedReceiver<String>,
    backlog: Arc<Backlog>,
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
    /// Speaks DevTools over the browser's pipe: we write commands to
    /// `to_browser`, the browser writes answers and events to `from_browser`.
    pub fn over_pipe(to_browser: OwnedFd, from_browser: OwnedFd) -> std::io::Result<Connection> {
        for fd in [&to_browser, &from_browser] {
            // SAFETY: F_GETFL/F_SETFL on an fd we own.
            unsafe {
                let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
                libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
        }
        let mut sink = tokio::net::unix::pipe::Sender::from_owned_fd(to_browser)?;
        let mut stream = tokio::net::unix::pipe::Receiver::from_owned_fd(from_browser)?;
        let shared = Arc::new(Shared { next_id: AtomicU64::new(1), routes: Mutex::new(Routes::default()) });
        let (out, mut outgoing) = mpsc::unbounded_channel::<String>();
        let writer = tokio::spawn(async move {
            while let Some(msg) = outgoing.recv().await {
                let mut frame = msg.into_bytes();
                frame.push(0);
                if sink.write_all(&frame).await.is_err() {
                    break;
                }
            }
        });
        let routes = shared.clone();
        let reader = tokio::spawn(async move {
            let mut frames = Frames::default();
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                let n = match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                frames.push(&chunk[..n], |frame| match frame {
                    Frame::Whole(bytes) => {
                        if let Ok(msg) = serde_json::from_slice::<Value>(bytes) {
                            routes.route(msg);
                        }
                    }
                    Frame::TooLarge(Some(id)) => routes.fail(id, TOO_LARGE),
                    Frame::TooLarge(None) => {}
                });
            }
            routes.close();
        });
        Ok(Connection { out, shared, _tasks: Arc::new(Tasks(vec![writer, reader])) })
    }

    /// Opens a relay for one lessee connection.
    pub fn link_client(&self) -> ClientLink {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, incoming) = mpsc::unbounded_channel();
        let backlog = Arc::new(Backlog::default());
        let mut routes = self.shared.routes.lock().unwrap_or_else(|p| p.into_inner());
        if !routes.closed {
            routes.clients.insert(id, ClientQueue { tx, backlog: backlog.clone() });
        }
        ClientLink { id, conn: self.clone(), incoming, backlog }
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
            let mut routes = self.shared.routes.lock().unwrap_or_else(|p| p.into_inner());
            if routes.closed {
                false
            } else {
                let params = if params.is_null() { json!({}) } else { params };
                let sent = Sent::new(session, method, &params);
                if let Some(target) = &sent.attaching {
                    routes.attaching.insert(target.clone(), None);
                }
                routes.pending.insert(id, Waiter::Grid(tx, sent));
                let mut msg = json!({"id": id, "method": method, "params": params});
                if let Some(s) = session {
                    msg["sessionId"] = json!(s);
                }
                self.out.send(msg.to_string()).is_ok()
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
        let mut routes = self.shared.routes.lock().unwrap_or_else(|p| p.into_inner());
        if !routes.closed {
            routes.sessions.insert(session.to_string(), tx);
        }
        rx
    }

    pub fn unsubscribe(&self, session: &str) {
        self.shared.routes.lock().unwrap_or_else(|p| p.into_inner()).sessions.remove(session);
    }

    pub fn is_closed(&self) -> bool {
        self.shared.routes.lock().map(|r| r.closed).unwrap_or(true)
    }

    /// Evaluates `expression` on the page of `session` (awaiting a
    /// promise): its value, or the exception it threw as an error.
    pub async fn evaluate(&self, session: &str, expression: &str) -> Result<Value, CdpError> {
        let result = self
            .send(
                Some(session),
                "Runtime.evaluate",
                json!({"expression": expression, "awaitPromise": true, "returnByValue": true}),
            )
            .await?;
        if let Some(ex) = result.get("exceptionDetails") {
            return Err(CdpError::Protocol("Runtime.evaluate".into(), ex.to_string()));
        }
        Ok(result["result"]["value"].clone())
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
            self.evaluate(&session, expression).await
        }
        .await;
        let _ = self.send(None, "Target.closeTarget", json!({"targetId": target_id})).await;
        result
    }
}

impl ClientLink {
    /// Relays one message of the client (a JSON object with `id` and
    /// `method`) to the browser under an id of the connection's own.
    pub fn send(&self, mut msg: Value) -> Result<(), CdpError> {
        let id = self.conn.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let mut routes = self.conn.shared.routes.lock().unwrap_or_else(|p| p.into_inner());
        if routes.closed {
            return Err(CdpError::Closed);
        }
        let theirs = msg.get("id").cloned().unwrap_or(Value::Null);
        let method = msg.get("method").and_then(Value::as_str).unwrap_or_default();
        let sent = Sent::new(msg.get("sessionId").and_then(Value::as_str), method, &msg["params"]);
        if let Some(target) = &sent.attaching {
            routes.attaching.insert(target.clone(), Some(self.id));
        }
        routes.pending.insert(id, Waiter::Client(self.id, theirs, sent));
        msg["id"] = json!(id);
        self.conn.out.send(msg.to_string()).map_err(|_| CdpError::Closed)
    }
}

impl ClientLink {
    /// The next message for the client; `None` once the browser is gone or
    /// the client was cut off ([`ClientLink::cut_off`] tells which).
    pub async fn recv(&mut self) -> Option<String> {
        let text = self.incoming.recv().await?;
        self.backlog.bytes.fetch_sub(text.len(), Ordering::Relaxed);
        Some(text)
    }

    /// Whether the client was cut off for falling more than
    /// [`CLIENT_BACKLOG_BYTES`] behind.
    pub fn cut_off(&self) -> bool {
        self.backlog.cut.load(Ordering::Acquire)
    }

    /// Resolves once the client is cut off: a relay blocked on writing to a
    /// client that does not read gives up then instead of waiting for it.
    pub async fn cut(&self) {
        loop {
            let signal = self.backlog.cut_signal.notified();
            tokio::pin!(signal);
            signal.as_mut().enable();
            if self.cut_off() {
                return;
            }
            signal.await;
        }
    }

    /// Routes the events of target session `session` to this client.
    pub fn claim(&self, session: &str) {
        self.conn.shared.routes.lock().unwrap_or_else(|p| p.into_inner()).owners.insert(session.to_string(), self.id);
    }
}

impl Drop for ClientLink {
    /// Forgets the client and detaches the target sessions it held, as the
    /// browser does when a DevTools client disconnects; the last client
    /// also takes its browser-wide auto-attach and discovery with it.
    fn drop(&mut self) {
        let (owned, last) = {
            let Ok(mut routes) = self.conn.shared.routes.lock() else { return };
            routes.clients.remove(&self.id);
            routes.pending.retain(|_, w| !matches!(w, Waiter::Client(c, _, _) if *c == self.id));
            routes.attaching.retain(|_, attacher| *attacher != Some(self.id));
            let owned: Vec<String> =
                routes.owners.iter().filter(|(_, o)| **o == self.id).map(|(s, _)| s.clone()).collect();
            routes.owners.retain(|_, owner| *owner != self.id);
            // The grid detaches them now: what they still say, their
            // detachment included, is no other client's news (an MCP tool's
            // link leaves the lessee's page so; Playwright would take a
            // detachment it heard for its page's end).
            routes.grid_owned.extend(owned.iter().cloned());
            (owned, routes.clients.is_empty())
        };
        // Written now; nobody waits for the answers.
        for session in owned {
            drop(self.conn.send(None, "Target.detachFromTarget", json!({"sessionId": session})));
        }
        if last {
            drop(self.conn.send(
                None,
                "Target.setAutoAttach",
                json!({"autoAttach": false, "waitForDebuggerOnStart": false, "flatten": true}),
            ));
            drop(self.conn.send(None, "Target.setDiscoverTargets", json!({"discover": false})));
        }
    }
}

impl Routes {
    /// Answers every command sent on target session `session` with an
    /// error: the session detached, and the browser answers none of them.
    fn fail_pending_on(&mut self, session: &str) {
        let ids: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, w)| w.sent().session.as_deref() == Some(session))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            match self.pending.remove(&id) {
                Some(Waiter::Grid(tx, _)) => {
                    let _ = tx.send(Err(format!("the target session {session} detached before answering")));
                }
                Some(Waiter::Client(client, theirs, _)) => {
                    // What the browser answers a command sent to a session it no longer has.
                    let error =
                        json!({"id": theirs, "error": {"code": -32001, "message": "Session with given id not found."}});
                    self.deliver(client, error.to_string());
                }
                None => {}
            }
        }
    }

    /// Queues `text` for `client`; a client that would fall more than
    /// [`CLIENT_BACKLOG_BYTES`] behind is cut off instead (its relay sees
    /// the end of its messages and closes with the reason), and what it
    /// had not read is dropped with its link.
    fn deliver(&mut self, client: u64, text: String) {
        let Some(queue) = self.clients.get(&client) else { return };
        let len = text.len();
        let held = queue.backlog.bytes.load(Ordering::Relaxed);
        if held > 0 && held + len > CLIENT_BACKLOG_BYTES {
            tracing::warn!(held, bound = CLIENT_BACKLOG_BYTES, "a CDP client stopped reading; disconnecting it");
            queue.backlog.cut.store(true, Ordering::Release);
            queue.backlog.cut_signal.notify_waiters();
            self.clients.remove(&client);
            return;
        }
        queue.backlog.bytes.fetch_add(len, Ordering::Relaxed);
        if queue.tx.send(text).is_err() {
            self.clients.remove(&client);
        }
    }

    /// Fails the command the browser answered with `id` with `message`, as
    /// if the browser had (its answer was dropped).
    fn fail_answer(&mut self, id: u64, message: &str) {
        match self.pending.remove(&id) {
            Some(Waiter::Grid(tx, _)) => {
                let _ = tx.send(Err(message.to_string()));
            }
            Some(Waiter::Client(client, theirs, _)) => {
                let error = json!({"id": theirs, "error": {"code": -32000, "message": message}});
                self.deliver(client, error.to_string());
            }
            None => {}
        }
    }
}

/// One message read off the pipe, or the id of one dropped as too large
/// (`None`: too large and with no id at its head, an event).
enum Frame<'a> {
    Whole(&'a [u8]),
    TooLarge(Option<u64>),
}

/// Splits the browser's pipe into NUL-terminated messages, holding at most
/// [`MAX_BROWSER_MESSAGE`] of any one: past it the message's bytes are
/// skipped up to its end, and only its id is kept (Chromium writes an
/// answer's `id` first).
#[derive(Default)]
struct Frames {
    buf: Vec<u8>,
    /// Skipping the rest of a message too large to hold, whose id this is.
    skipping: Option<Option<u64>>,
}

impl Frames {
    fn push(&mut self, mut chunk: &[u8], mut each: impl FnMut(Frame)) {
        while !chunk.is_empty() {
            let end = chunk.iter().position(|b| *b == 0);
            if let Some(id) = self.skipping {
                match end {
                    Some(end) => {
                        self.skipping = None;
                        each(Frame::TooLarge(id));
                        chunk = &chunk[end + 1..];
                    }
                    None => return,
                }
                continue;
            }
            match end {
                Some(end) => {
                    if self.buf.is_empty() {
                        each(Frame::Whole(&chunk[..end]));
                    } else {
                        self.buf.extend_from_slice(&chunk[..end]);
                        each(Frame::Whole(&self.buf));
                        self.buf.clear();
                    }
                    chunk = &chunk[end + 1..];
                }
                None => {
                    if self.buf.len() + chunk.len() > MAX_BROWSER_MESSAGE {
                        self.buf.extend_from_slice(&chunk[..chunk.len().min(64)]);
                        self.skipping = Some(leading_id(&self.buf));
                        tracing::warn!(bound = MAX_BROWSER_MESSAGE, "a browser message too large to relay; dropped");
                        self.buf = Vec::new();
                    } else {
                        self.buf.extend_from_slice(chunk);
                    }
                    return;
                }
            }
        }
    }
}

/// The id at the head of an answer (`{"id":12,...`), if it has one there.
fn leading_id(head: &[u8]) -> Option<u64> {
    let rest = head.strip_prefix(b"{\"id\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

impl Shared {
    fn fail(&self, id: u64, message: &str) {
        if let Ok(mut routes) = self.routes.lock() {
            routes.fail_answer(id, message);
        }
    }

    fn route(&self, mut msg: Value) {
        let Ok(mut routes) = self.routes.lock() else { return };
        if let Some(id) = msg.get("id").and_then(Value::as_u64) {
            let Some(waiter) = routes.pending.remove(&id) else { return };
            // An attach answered: the session is the attacher's from now on
            // (a client's below, the grid's here), and its announcement, when
            // it comes, is the attacher's alone.
            let child = msg["result"]["sessionId"].as_str().map(str::to_string);
            if let Some(target) = &waiter.sent().attaching {
                routes.attaching.remove(target);
                if let (Waiter::Grid(..), Some(child)) = (&waiter, &child) {
                    routes.grid_owned.insert(child.clone());
                }
            }
            match waiter {
                Waiter::Grid(tx, _) => {
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
                Waiter::Client(client, theirs, _) => {
                    // A session the client attached is the client's.
                    if let Some(session) = child {
                        routes.owners.insert(session, client);
                    }
                    msg["id"] = theirs;
                    routes.deliver(client, msg.to_string());
                }
            }
            return;
        }
        // A target session gone: what was sent on it is never answered,
        // and it is nobody's any more. Its detachment is news to its
        // attacher alone, as its announcement was: another client reads a
        // detachment by its target (Playwright takes its page for closed),
        // and the grid's own sessions come and go on the lessee's pages.
        let mut detached_owner = None;
        if msg["method"] == "Target.detachedFromTarget" {
            if let Some(child) = msg["params"]["sessionId"].as_str() {
                routes.fail_pending_on(child);
                if routes.grid_owned.remove(child) && msg.get("sessionId").is_none() {
                    return;
                }
                detached_owner = routes.owners.remove(child);
            }
        }
        let session = msg.get("sessionId").and_then(Value::as_str).map(str::to_string);
        if let Some(tx) = session.as_ref().and_then(|s| routes.sessions.get(s)) {
            let method = msg.get("method").and_then(Value::as_str).unwrap_or_default().to_string();
            let event = Event { method, params: msg.get_mut("params").map(Value::take).unwrap_or(Value::Null) };
            if tx.send(event).is_err() {
                if let Some(s) = &session {
                    routes.sessions.remove(s);
                }
            }
            return;
        }
        // The grid's own, unsubscribed (a gone client's, being detached): nobody's.
        if session.as_ref().is_some_and(|s| routes.grid_owned.contains(s)) {
            return;
        }
        // Not the grid's: the owning client's, or every client's.
        let mut owner = session.as_ref().and_then(|s| routes.owners.get(s)).copied().or(detached_owner);
        if msg["method"] == "Target.attachedToTarget" {
            let child = msg["params"]["sessionId"].as_str().unwrap_or_default().to_string();
            if session.is_none() {
                // A browser-level attach's announcement: the attacher's alone.
                let target = msg["params"]["targetInfo"]["targetId"].as_str().unwrap_or_default();
                // Whose the session is, once its attach was answered;
                // else who is attaching the target (the announcement came
                // first). In that order: the grid and a client may attach
                // one page at once, and the target names both.
                let attacher = if routes.grid_owned.contains(&child) {
                    Some(None)
                } else if let Some(client) = routes.owners.get(&child) {
                    Some(Some(*client))
                } else {
                    routes.attaching.remove(target)
                };
                match attacher {
                    Some(None) => return,
                    Some(Some(client)) => owner = Some(client),
                    None => {}
                }
            }
            if let Some(owner) = owner {
                routes.owners.insert(child, owner);
            }
        }
        let text = msg.to_string();
        match owner {
            Some(client) => routes.deliver(client, text),
            None => {
                let all: Vec<u64> = routes.clients.keys().copied().collect();
                for client in all {
                    routes.deliver(client, text.clone());
                }
            }
        }
    }

    fn close(&self) {
        if let Ok(mut routes) = self.routes.lock() {
            routes.closed = true;
            routes.pending.clear();
            routes.sessions.clear();
            routes.clients.clear();
            routes.owners.clear();
            routes.attaching.clear();
            routes.grid_owned.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::os::fd::FromRawFd;

    /// A connection whose "browser" is this test: returns the connection,
    /// the commands it writes and a writer for the browser's messages.
    fn fake_browser() -> (Connection, BufReader<std::fs::File>, std::fs::File) {
        let pipe = || {
            let mut fds = [0; 2];
            // SAFETY: pipe2 fills two fresh fds, each owned once below.
            assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
        };
        let (commands_read, commands_write) = pipe();
        let (answers_read, answers_write) = pipe();
        let conn = Connection::over_pipe(commands_write, answers_read).unwrap();
        (conn, BufReader::new(std::fs::File::from(commands_read)), std::fs::File::from(answers_write))
    }

    fn next_command(r: &mut BufReader<std::fs::File>) -> Value {
        let mut frame = Vec::new();
        r.read_until(0, &mut frame).unwrap();
        frame.pop();
        serde_json::from_slice(&frame).unwrap()
    }

    fn write(w: &mut std::fs::File, msg: Value) {
        w.write_all(format!("{msg}\0").as_bytes()).unwrap();
    }

    async fn recv(link: &mut ClientLink) -> Value {
        let text = tokio::time::timeout(std::time::Duration::from_secs(5), link.recv()).await.unwrap().unwrap();
        serde_json::from_str(&text).unwrap()
    }

    // The fake browser blocks on its pipes: the connection's tasks need a thread of their own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn client_ids_are_renumbered_on_the_pipe_and_restored_for_the_client() {
        let (conn, mut commands, mut browser) = fake_browser();
        let mut a = conn.link_client();
        let mut b = conn.link_client();
        a.send(json!({"id": 1, "method": "Target.attachToTarget", "params": {"targetId": "T"}})).unwrap();
        b.send(json!({"id": 1, "method": "Browser.getVersion"})).unwrap();
        let (first, second) = (next_command(&mut commands), next_command(&mut commands));
        assert_ne!(first["id"], second["id"], "two clients' id 1 must differ on the pipe");
        write(&mut browser, json!({"id": second["id"], "result": {"product": "Chrome/1"}}));
        write(&mut browser, json!({"id": first["id"], "result": {"sessionId": "S-A"}}));
        assert_eq!(recv(&mut b).await, json!({"id": 1, "result": {"product": "Chrome/1"}}));
        assert_eq!(recv(&mut a).await, json!({"id": 1, "result": {"sessionId": "S-A"}}));
        // Events of a's session go to a only; unowned events to everyone.
        write(&mut browser, json!({"method": "Page.loadEventFired", "sessionId": "S-A", "params": {}}));
        write(&mut browser, json!({"method": "Target.targetCreated", "params": {}}));
        assert_eq!(recv(&mut a).await["method"], "Page.loadEventFired");
        assert_eq!(recv(&mut a).await["method"], "Target.targetCreated");
        assert_eq!(recv(&mut b).await["method"], "Target.targetCreated", "b never sees a's session");
    }

    fn attached(session: &str, target: &str) -> Value {
        json!({"method": "Target.attachedToTarget",
               "params": {"sessionId": session, "targetInfo": {"targetId": target, "type": "page"}}})
    }

    /// A browser-level attach is announced at the browser's level: only the
    /// attacher sees it (another client, Playwright, would take the target
    /// for its own and fail with "Duplicate target"), whether the
    /// announcement comes before the reply or after it; the grid's own
    /// attaches are shown to no client.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_browser_level_attach_is_announced_to_its_attacher_alone() {
        let (conn, mut commands, mut browser) = fake_browser();
        let mut a = conn.link_client();
        let mut b = conn.link_client();
        // a attaches T: announcement first, then the reply.
        a.send(json!({"id": 1, "method": "Target.attachToTarget", "params": {"targetId": "T", "flatten": true}}))
            .unwrap();
        let sent = next_command(&mut commands);
        write(&mut browser, attached("S-A", "T"));
        write(&mut browser, json!({"id": sent["id"], "result": {"sessionId": "S-A"}}));
        // The grid attaches U: the reply first, then the announcement.
        let grid = conn.send(None, "Target.attachToTarget", json!({"targetId": "U", "flatten": true}));
        let sent = next_command(&mut commands);
        write(&mut browser, json!({"id": sent["id"], "result": {"sessionId": "S-G"}}));
        write(&mut browser, attached("S-G", "U"));
        assert_eq!(grid.await.unwrap()["sessionId"], "S-G");
        // A target nobody attached (a client's auto-attach) is everyone's news.
        write(&mut browser, attached("S-X", "X"));
        assert_eq!(recv(&mut a).await["params"]["sessionId"], "S-A");
        assert_eq!(recv(&mut a).await, json!({"id": 1, "result": {"sessionId": "S-A"}}));
        assert_eq!(recv(&mut a).await["params"]["sessionId"], "S-X", "a never sees the grid's S-G");
        assert_eq!(recv(&mut b).await["params"]["sessionId"], "S-X", "b sees neither S-A nor S-G");
    }

    /// A session's detachment goes where its announcement went: to the
    /// client that attached it, to no client for the grid's own (Playwright
    /// reads a detachment by its target and takes its page for closed when
    /// the grid's save point or an MCP tool leaves the page), and to every
    /// client for a session nobody attached explicitly.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_detachment_is_news_to_the_attacher_alone() {
        let (conn, mut commands, mut browser) = fake_browser();
        let mut a = conn.link_client();
        let mut b = conn.link_client();
        let grid = conn.send(None, "Target.attachToTarget", json!({"targetId": "T", "flatten": true}));
        let sent = next_command(&mut commands);
        write(&mut browser, json!({"id": sent["id"], "result": {"sessionId": "S-G"}}));
        write(&mut browser, attached("S-G", "T"));
        assert_eq!(grid.await.unwrap()["sessionId"], "S-G");
        a.send(json!({"id": 1, "method": "Target.attachToTarget", "params": {"targetId": "T", "flatten": true}}))
            .unwrap();
        let sent = next_command(&mut commands);
        write(&mut browser, json!({"id": sent["id"], "result": {"sessionId": "S-A"}}));
        write(&mut browser, attached("S-A", "T"));
        write(&mut browser, detached_event("S-G"));
        write(&mut browser, detached_event("S-A"));
        write(&mut browser, detached_event("S-X"));
        assert_eq!(recv(&mut a).await, json!({"id": 1, "result": {"sessionId": "S-A"}}));
        assert_eq!(recv(&mut a).await["params"]["sessionId"], "S-A", "a's own announcement");
        assert_eq!(recv(&mut a).await["params"]["sessionId"], "S-A", "a never sees the grid's S-G leave");
        assert_eq!(recv(&mut a).await["params"]["sessionId"], "S-X");
        assert_eq!(recv(&mut b).await["params"]["sessionId"], "S-X", "b sees neither S-G nor S-A leave");
    }

    /// A client that goes away leaves its sessions to the grid, which
    /// detaches them: their last events and their detachment reach no other
    /// client (the MCP tools' link leaves the lessee's page so, after every
    /// tool call, and Playwright read the detachment as its page's end).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_gone_clients_sessions_leave_without_telling_the_others() {
        let (conn, mut commands, mut browser) = fake_browser();
        let mut a = conn.link_client();
        let tool = conn.link_client();
        tool.send(json!({"id": 1, "method": "Target.attachToTarget", "params": {"targetId": "T", "flatten": true}}))
            .unwrap();
        let sent = next_command(&mut commands);
        write(&mut browser, json!({"id": sent["id"], "result": {"sessionId": "S-T"}}));
        write(&mut browser, attached("S-T", "T"));
        // Both written before the link drops: a's pipe keeps their order.
        write(&mut browser, json!({"method": "Runtime.enable.ack", "params": {}, "sessionId": "S-T"}));
        write(&mut browser, detached_event("S-X"));
        assert_eq!(recv(&mut a).await["params"]["sessionId"], "S-X", "a hears nothing of the tool's session");
        drop(tool);
        let detach = next_command(&mut commands);
        assert_eq!(
            (detach["method"].clone(), detach["params"]["sessionId"].clone()),
            (json!("Target.detachFromTarget"), json!("S-T"))
        );
        write(&mut browser, json!({"method": "Runtime.consoleAPICalled", "params": {}, "sessionId": "S-T"}));
        write(&mut browser, detached_event("S-T"));
        write(&mut browser, detached_event("S-Y"));
        assert_eq!(
            recv(&mut a).await["params"]["sessionId"],
            "S-Y",
            "a hears neither the gone session's event nor its end"
        );
    }

    fn detached_event(session: &str) -> Value {
        json!({"method": "Target.detachedFromTarget", "params": {"sessionId": session, "targetId": "T"}})
    }

    /// A target session that detaches before it answers never answers:
    /// what the grid and the clients sent on it fails when it detaches
    /// instead of waiting forever.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn commands_on_a_session_that_detaches_fail_instead_of_waiting_forever() {
        let (conn, mut commands, mut browser) = fake_browser();
        let mut a = conn.link_client();
        let grid = conn.send(Some("S-1"), "Runtime.enable", Value::Null);
        next_command(&mut commands);
        a.send(json!({"id": 7, "method": "Page.enable", "sessionId": "S-1"})).unwrap();
        next_command(&mut commands);
        let other = conn.send(Some("S-2"), "Runtime.enable", Value::Null);
        let on_other = next_command(&mut commands);
        write(&mut browser, json!({"method": "Target.detachedFromTarget", "params": {"sessionId": "S-1"}}));
        assert!(matches!(grid.await, Err(CdpError::Protocol(_, m)) if m.contains("detached")));
        let answer = recv(&mut a).await;
        assert_eq!((answer["id"].clone(), answer["error"]["code"].clone()), (json!(7), json!(-32001)));
        write(&mut browser, json!({"id": on_other["id"], "result": {}}));
        assert_eq!(other.await.unwrap(), json!({}), "another session's commands are answered as before");
    }

    // The fake browser blocks on its pipes: the connection's tasks need a thread of their own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_stops_reading_is_cut_off_by_bytes_not_buffered_forever() {
        let (conn, _commands, mut browser) = fake_browser();
        let mut slow = conn.link_client();
        let mut reader = conn.link_client();
        // One message larger than the whole bound goes to a client that is
        // not behind; 1 MiB messages then fill the bound.
        let big = "x".repeat(CLIENT_BACKLOG_BYTES + 1);
        let mb = "y".repeat(1 << 20);
        let writer = std::thread::spawn(move || {
            write(&mut browser, json!({"method": "Big.event", "params": {"v": big}}));
            for _ in 0..(CLIENT_BACKLOG_BYTES >> 20) * 2 {
                write(&mut browser, json!({"method": "Network.dataReceived", "params": {"v": mb}}));
            }
            write(&mut browser, json!({"method": "Last.event", "params": {}}));
            browser
        });
        // A client that reads gets everything, the last one included.
        let mut last = Value::Null;
        while last["method"] != "Last.event" {
            last = recv(&mut reader).await;
        }
        let _browser = writer.join().unwrap();
        assert!(slow.cut_off(), "the client that never read is cut off");
        let mut held = 0;
        loop {
            match tokio::time::timeout(std::time::Duration::from_secs(5), slow.recv()).await {
                Ok(Some(text)) => held += text.len(),
                Ok(None) => break,
                Err(_) => panic!("the link neither delivered nor ended after {held} bytes"),
            }
        }
        assert!(held > CLIENT_BACKLOG_BYTES, "the one large message was delivered: {held}");
        assert!(held <= 2 * CLIENT_BACKLOG_BYTES + 1024, "at most the bound past one message: {held}");
        tokio::time::timeout(std::time::Duration::from_secs(5), slow.cut()).await.unwrap();
    }

    /// An answer longer than the bound is skipped as it is read, and the
    /// command it answered fails; what follows on the pipe is read as
    /// before.
    #[test]
    fn a_browser_message_past_the_bound_is_skipped_and_its_command_named() {
        let mut frames = Frames::default();
        let mut seen = vec![];
        let mut record = |f: Frame| {
            seen.push(match f {
                Frame::Whole(b) => String::from_utf8_lossy(b).into_owned(),
                Frame::TooLarge(id) => format!("too large: {id:?}"),
            })
        };
        frames.push(b"{\"id\":1}\0{\"id\":42,\"result\":\"", &mut record);
        let block = vec![b'z'; 1 << 20];
        for _ in 0..(MAX_BROWSER_MESSAGE >> 20) + 1 {
            frames.push(&block, &mut record);
        }
        assert!(frames.buf.capacity() < 2 << 20, "the skipped message is not held");
        frames.push(b"\"}\0{\"method\":\"A\"", &mut record);
        frames.push(b"}\0{\"method\":\"B\"}\0", &mut record);
        assert_eq!(seen, ["{\"id\":1}", "too large: Some(42)", "{\"method\":\"A\"}", "{\"method\":\"B\"}"]);
    }

    // The fake browser blocks on its pipes: the connection's tasks need a thread of their own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_grids_calls_and_clients_share_the_pipe_and_fail_when_it_closes() {
        let (conn, mut commands, browser) = fake_browser();
        let call = conn.send(None, "Browser.getVersion", Value::Null);
        let sent = next_command(&mut commands);
        assert_eq!(sent["method"], "Browser.getVersion");
        let mut link = conn.link_client();
        drop(browser);
        assert!(matches!(call.await, Err(CdpError::Closed)));
        let end = tokio::time::timeout(std::time::Duration::from_secs(5), link.recv()).await.unwrap();
        assert!(end.is_none(), "the client's messages end with the browser");
    }
}
