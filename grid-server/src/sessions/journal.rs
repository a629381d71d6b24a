//! What a session's pages logged and requested, for the MCP tools
//! `browser_console_messages` and `browser_network_requests` (docs/mcp.md).
//!
//! A tool call attaches to its tab only for its own duration, so what a
//! page does between calls would be lost: the journal follows every page
//! of the browser from the first browser tool call on the session (a
//! session driven only over CDP pays nothing for it). Like the keeper
//! (`keeper.rs`) it is the grid's own DevTools session on the browser
//! (`Target.attachToBrowserTarget`, then `Target.setAutoAttach`), whose
//! events no lessee receives; on each page it enables only what it reads
//! (Runtime, Log, Network, Page events), which changes nothing the page or
//! a lessee sees. Each tab keeps what its current document did, as
//! Playwright MCP does: a new document (a top-level navigation) starts a
//! new log. Bounded per tab, oldest dropped first.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::sync::{mpsc, OnceCell};

use crate::browser::cdp::{Connection, Event};

/// Console messages kept per tab.
const MAX_MESSAGES: usize = 500;
/// Requests kept per tab.
const MAX_REQUESTS: usize = 500;
/// Longest text or URL kept of one entry, in characters.
const MAX_TEXT_CHARS: usize = 2_000;
/// Longest the pages open now are waited for: a page closing meanwhile
/// (an attestation's, a client's) never answers the commands sent to it.
const ENABLE_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);
/// Longest a tool waits for the journal to start following; past it the
/// tool goes on (the browser is then not answering it either).
const FOLLOW_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// One session's journal, kept with its live handle.
#[derive(Clone, Default)]
pub struct Journal(Arc<Inner>);

#[derive(Default)]
struct Inner {
    tabs: Mutex<HashMap<String, TabLog>>,
    /// Set once the journal follows the browser's pages.
    following: OnceCell<()>,
}

#[derive(Default)]
struct TabLog {
    messages: VecDeque<Value>,
    requests: VecDeque<Request>,
    dropped_messages: u64,
    dropped_requests: u64,
}

struct Request {
    id: String,
    loader: String,
    entry: Value,
}

impl Journal {
    /// Follows the browser's pages from now on, once per session: answers
    /// when the pages open now are followed, so what a tool does next is
    /// recorded.
    pub async fn follow(&self, cdp: &Connection) {
        let inner = self.0.clone();
        self.0
            .following
            .get_or_init(|| async move {
                match tokio::time::timeout(FOLLOW_WITHIN, start(cdp, inner)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::debug!(error = %e, "the journal could not follow the session's pages"),
                    Err(_) => tracing::warn!("the journal did not start following the session's pages in time"),
                }
            })
            .await;
    }

    /// The tab's console messages, oldest first (the errors only with
    /// `only_errors`), and how many older ones were dropped.
    pub fn messages(&self, tab: &str, only_errors: bool) -> (Vec<Value>, u64) {
        let tabs = self.0.tabs.lock().unwrap_or_else(|p| p.into_inner());
        let Some(log) = tabs.get(tab) else { return (vec![], 0) };
        let kept = log.messages.iter().filter(|m| !only_errors || m["type"] == "error").cloned().collect();
        (kept, log.dropped_messages)
    }

    /// The tab's requests, oldest first, and how many older ones were dropped.
    pub fn requests(&self, tab: &str) -> (Vec<Value>, u64) {
        let tabs = self.0.tabs.lock().unwrap_or_else(|p| p.into_inner());
        let Some(log) = tabs.get(tab) else { return (vec![], 0) };
        (log.requests.iter().map(|r| r.entry.clone()).collect(), log.dropped_requests)
    }
}

/// Attaches the grid's session to the browser, follows the pages open now,
/// then follows the rest in a task of its own until the browser is gone.
async fn start(cdp: &Connection, inner: Arc<Inner>) -> Result<(), crate::browser::cdp::CdpError> {
    let attached = cdp.send(None, "Target.attachToBrowserTarget", json!({})).await?;
    let browser = attached["sessionId"].as_str().unwrap_or_default().to_string();
    let mut events = cdp.subscribe(&browser);
    cdp.send(
        Some(&browser),
        "Target.setAutoAttach",
        json!({"autoAttach": true, "waitForDebuggerOnStart": false, "flatten": true}),
    )
    .await?;
    let (page_events, mut from_pages) = mpsc::unbounded_channel::<(String, Event)>();
    let mut sessions: HashMap<String, String> = HashMap::new();
    // The pages open now were announced before setAutoAttach answered:
    // follow them before answering.
    let mut enabling = vec![];
    while let Ok(e) = events.try_recv() {
        enabling.extend(on_browser_event(cdp, &inner, &mut sessions, &page_events, &e).into_iter().flatten());
    }
    let _ = tokio::time::timeout(ENABLE_WITHIN, futures_util::future::join_all(enabling)).await;
    let cdp = cdp.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                e = events.recv() => match e {
                    Some(e) => drop(on_browser_event(&cdp, &inner, &mut sessions, &page_events, &e)),
                    None => break,
                },
                Some((tab, e)) = from_pages.recv() => record(&inner, &tab, &e),
            }
        }
    });
    Ok(())
}

type Pending =
    Vec<std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, crate::browser::cdp::CdpError>> + Send>>>;

/// A page attached or gone; for a page attached, the commands that enable
/// its events (sent already; awaiting them is optional).
fn on_browser_event(
    cdp: &Connection,
    inner: &Inner,
    sessions: &mut HashMap<String, String>,
    page_events: &mpsc::UnboundedSender<(String, Event)>,
    e: &Event,
) -> Option<Pending> {
    match e.method.as_str() {
        "Target.attachedToTarget" if e.params["targetInfo"]["type"] == "page" => {
            let session = e.params["sessionId"].as_str()?.to_string();
            let tab = e.params["targetInfo"]["targetId"].as_str()?.to_string();
            let mut from_page = cdp.subscribe(&session);
            let to_journal = page_events.clone();
            let t = tab.clone();
            tokio::spawn(async move {
                while let Some(e) = from_page.recv().await {
                    if to_journal.send((t.clone(), e)).is_err() {
                        break;
                    }
                }
            });
            sessions.insert(session.clone(), tab);
            let enabled: Pending = ["Runtime.enable", "Log.enable", "Network.enable", "Page.enable"]
                .into_iter()
                .map(|m| Box::pin(cdp.send(Some(&session), m, json!({}))) as _)
                .collect();
            Some(enabled)
        }
        "Target.detachedFromTarget" => {
            let session = e.params["sessionId"].as_str()?;
            cdp.unsubscribe(session);
            if let Some(tab) = sessions.remove(session) {
                inner.tabs.lock().unwrap_or_else(|p| p.into_inner()).remove(&tab);
            }
            None
        }
        _ => None,
    }
}

/// Keeps what one page event says of its tab.
fn record(inner: &Inner, tab: &str, e: &Event) {
    let mut tabs = inner.tabs.lock().unwrap_or_else(|p| p.into_inner());
    let log = tabs.entry(tab.to_string()).or_default();
    let p = &e.params;
    match e.method.as_str() {
        "Runtime.consoleAPICalled" => {
            let text: Vec<String> = p["args"].as_array().into_iter().flatten().map(remote_text).collect();
            let frame = &p["stackTrace"]["callFrames"][0];
            log.message(
                console_type(p["type"].as_str().unwrap_or("log")),
                &text.join(" "),
                &frame["url"],
                &frame["lineNumber"],
            );
        }
        "Runtime.exceptionThrown" => {
            let ex = &p["exceptionDetails"];
            let text = ex["exception"]["description"].as_str().or(ex["text"].as_str()).unwrap_or("an uncaught error");
            log.message("error", text, &ex["url"], &ex["lineNumber"]);
        }
        "Log.entryAdded" => {
            let entry = &p["entry"];
            let kind = match entry["level"].as_str() {
                Some("error") => "error",
                Some("warning") => "warning",
                Some("verbose") => "debug",
                _ => "info",
            };
            log.message(kind, entry["text"].as_str().unwrap_or_default(), &entry["url"], &entry["lineNumber"]);
        }
        "Page.frameNavigated" if p["frame"]["parentId"].is_null() => {
            // A new document: what the old one did is no longer the page's.
            let loader = p["frame"]["loaderId"].as_str().unwrap_or_default();
            log.messages.clear();
            log.requests.retain(|r| r.loader == loader);
            log.dropped_messages = 0;
            log.dropped_requests = 0;
        }
        "Network.requestWillBeSent" => {
            let id = p["requestId"].as_str().unwrap_or_default();
            if let Some(redirect) = p.get("redirectResponse") {
                log.answered(id, json!({"status": redirect["status"], "statusText": redirect["statusText"]}));
            }
            let request = &p["request"];
            let entry = json!({
                "method": request["method"],
                "url": clip(request["url"].as_str().unwrap_or_default()),
                "resourceType": p["type"].as_str().unwrap_or("Other"),
            });
            log.request(id, p["loaderId"].as_str().unwrap_or_default(), entry);
        }
        "Network.responseReceived" => {
            let r = &p["response"];
            log.answered(
                p["requestId"].as_str().unwrap_or_default(),
                json!({"status": r["status"], "statusText": r["statusText"], "mimeType": r["mimeType"]}),
            );
        }
        "Network.loadingFailed" => {
            let why = if p["canceled"] == true { "canceled" } else { p["errorText"].as_str().unwrap_or("failed") };
            let mut failure = json!({"failure": why});
            if let Some(blocked) = p["blockedReason"].as_str() {
                failure["blockedReason"] = json!(blocked);
            }
            log.answered(p["requestId"].as_str().unwrap_or_default(), failure);
        }
        _ => {}
    }
}

impl TabLog {
    fn message(&mut self, kind: &str, text: &str, url: &Value, line: &Value) {
        let mut m = json!({"type": kind, "text": clip(text)});
        if let Some(url) = url.as_str().filter(|u| !u.is_empty()) {
            m["url"] = json!(clip(url));
            if let Some(line) = line.as_i64() {
                // DevTools counts lines from 0; people from 1.
                m["line"] = json!(line + 1);
            }
        }
        if self.messages.len() == MAX_MESSAGES {
            self.messages.pop_front();
            self.dropped_messages += 1;
        }
        self.messages.push_back(m);
    }

    fn request(&mut self, id: &str, loader: &str, entry: Value) {
        if self.requests.len() == MAX_REQUESTS {
            self.requests.pop_front();
            self.dropped_requests += 1;
        }
        self.requests.push_back(Request { id: id.to_string(), loader: loader.to_string(), entry });
    }

    /// Adds what the answer said to the latest request of `id` (a
    /// redirect's hops share one id).
    fn answered(&mut self, id: &str, fields: Value) {
        let Some(r) = self.requests.iter_mut().rev().find(|r| r.id == id) else { return };
        for (k, v) in fields.as_object().into_iter().flatten() {
            if !v.is_null() && v != "" {
                r.entry[k] = v.clone();
            }
        }
    }
}

/// The console call types, as Playwright names them (`warn` is `warning`).
fn console_type(t: &str) -> &str {
    match t {
        "warning" | "warn" => "warning",
        "assert" => "error",
        other => other,
    }
}

/// A console argument as text: a string as itself, a value as JSON, an
/// object as DevTools describes it.
fn remote_text(arg: &Value) -> String {
    match &arg["value"] {
        Value::String(s) => s.clone(),
        Value::Null => arg["unserializableValue"]
            .as_str()
            .or(arg["description"].as_str())
            .unwrap_or(if arg["type"] == "undefined" { "undefined" } else { "null" })
            .to_string(),
        v => v.to_string(),
    }
}

fn clip(s: &str) -> String {
    match s.char_indices().nth(MAX_TEXT_CHARS) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(method: &str, params: Value) -> Event {
        Event { method: method.into(), params }
    }

    #[test]
    fn a_tab_keeps_its_documents_messages_and_requests_within_bounds() {
        let inner = Inner::default();
        let j = Journal(Arc::new(Inner::default()));
        record(
            &inner,
            "T",
            &event(
                "Runtime.consoleAPICalled",
                json!({"type": "warn", "args": [{"type": "string", "value": "low"}, {"type": "number", "value": 3}, {"type": "object", "description": "Object"}], "stackTrace": {"callFrames": [{"url": "http://a/x.js", "lineNumber": 9}]}}),
            ),
        );
        record(
            &inner,
            "T",
            &event(
                "Runtime.exceptionThrown",
                json!({"exceptionDetails": {"text": "Uncaught", "exception": {"description": "Error: boom"}}}),
            ),
        );
        record(
            &inner,
            "T",
            &event(
                "Network.requestWillBeSent",
                json!({"requestId": "1", "loaderId": "L1", "type": "Document", "request": {"method": "GET", "url": "http://a/"}}),
            ),
        );
        record(
            &inner,
            "T",
            &event(
                "Network.requestWillBeSent",
                json!({"requestId": "1", "loaderId": "L1", "type": "Document", "request": {"method": "GET", "url": "http://a/next"}, "redirectResponse": {"status": 302, "statusText": "Found"}}),
            ),
        );
        record(
            &inner,
            "T",
            &event(
                "Network.responseReceived",
                json!({"requestId": "1", "response": {"status": 200, "statusText": "", "mimeType": "text/html"}}),
            ),
        );
        record(
            &inner,
            "T",
            &event(
                "Network.requestWillBeSent",
                json!({"requestId": "2", "loaderId": "L1", "type": "Image", "request": {"method": "GET", "url": "http://a/i.png"}}),
            ),
        );
        record(
            &inner,
            "T",
            &event(
                "Network.loadingFailed",
                json!({"requestId": "2", "errorText": "net::ERR_TUNNEL_CONNECTION_FAILED"}),
            ),
        );
        *j.0.tabs.lock().unwrap() = std::mem::take(&mut *inner.tabs.lock().unwrap());
        let (m, _) = j.messages("T", false);
        assert_eq!(m[0], json!({"type": "warning", "text": "low 3 Object", "url": "http://a/x.js", "line": 10}));
        assert_eq!(m[1]["text"], "Error: boom");
        assert_eq!(j.messages("T", true).0.len(), 1);
        let (r, _) = j.requests("T");
        assert_eq!(
            r[0],
            json!({"method": "GET", "url": "http://a/", "resourceType": "Document", "status": 302, "statusText": "Found"})
        );
        assert_eq!(r[1]["status"], 200);
        assert_eq!(r[1]["mimeType"], "text/html");
        assert_eq!(r[2]["failure"], "net::ERR_TUNNEL_CONNECTION_FAILED");
        assert!(j.messages("other", false).0.is_empty());

        // A new document: the old one's messages and requests go.
        let inner = j.0.clone();
        record(
            &inner,
            "T",
            &event(
                "Network.requestWillBeSent",
                json!({"requestId": "9", "loaderId": "L2", "type": "Document", "request": {"method": "GET", "url": "http://b/"}}),
            ),
        );
        record(
            &inner,
            "T",
            &event("Page.frameNavigated", json!({"frame": {"id": "F", "loaderId": "L2", "url": "http://b/"}})),
        );
        assert!(j.messages("T", false).0.is_empty());
        assert_eq!(j.requests("T").0.iter().map(|r| r["url"].clone()).collect::<Vec<_>>(), [json!("http://b/")]);
        // A child frame's navigation keeps them.
        record(
            &inner,
            "T",
            &event("Page.frameNavigated", json!({"frame": {"id": "C", "parentId": "F", "loaderId": "L3"}})),
        );
        assert_eq!(j.requests("T").0.len(), 1);

        for i in 0..MAX_MESSAGES + 5 {
            record(
                &inner,
                "T",
                &event(
                    "Runtime.consoleAPICalled",
                    json!({"type": "log", "args": [{"type": "string", "value": format!("m{i}")}]}),
                ),
            );
        }
        let (m, dropped) = j.messages("T", false);
        assert_eq!((m.len(), dropped), (MAX_MESSAGES, 5));
        assert_eq!(m[0]["text"], "m5");
        let long = "x".repeat(MAX_TEXT_CHARS + 10);
        assert_eq!(clip(&long).chars().count(), MAX_TEXT_CHARS + 1);
    }
}
