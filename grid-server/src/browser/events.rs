//! What a page's DevTools events tell the item: lifecycle of the main
//! frame, its document responses, failed and refused requests, uncaught
//! exceptions, JavaScript dialogs, a crashed renderer. Pure bookkeeping over the events' JSON
//! (only the fields needed are read, so a field a newer Chromium adds or
//! changes elsewhere cannot make an event unreadable).

use std::collections::{HashMap, HashSet};

use serde_json::{json, Map, Value};

use super::hosts::host_of;
use super::page::{Blocked, MainResponse};
use crate::egress::{self, Decision, REFUSED_HEADER};

/// Most entries kept per list in meta (blocked/failed requests, errors).
pub const MAX_LISTED: usize = 200;
/// Most JavaScript dialogs listed in meta, and the most characters of a
/// dialog's message kept: a page that opens one in a loop must not grow
/// the item's meta without bound.
pub const MAX_DIALOGS: usize = 20;
pub const MAX_DIALOG_MESSAGE: usize = 1000;
/// Most requests remembered to name failed and refused ones.
const MAX_REQUESTS: usize = 10_000;
/// `reason` of a request the egress proxy refused by its response.
pub const PROXY_REFUSAL: &str = "private network: refused by the grid's egress proxy";

/// Facts gathered from one page's events.
#[derive(Default)]
pub struct Seen {
    /// Lifecycle events of the main frame: (loaderId, name).
    pub lifecycle: Vec<(String, String)>,
    /// Main-frame document responses by loaderId.
    pub documents: HashMap<String, MainResponse>,
    /// Request URLs and resource types by requestId (to name failed and
    /// refused requests).
    pub requests: HashMap<String, (String, String)>,
    pub failed: Vec<Value>,
    pub errors: Vec<Value>,
    pub blocked: Vec<Blocked>,
    /// JavaScript dialogs the page opened, as answered (`dialog_accepted`).
    pub dialogs: Vec<Value>,
    /// Why the page's renderer went away, if it did.
    pub crashed: Option<String>,
    /// Requests started and not yet finished or failed (`waitFor.networkIdleMs`).
    pub in_flight: HashSet<String>,
    /// Requests started, finished or failed so far: a change means the
    /// network was not quiet.
    pub network_activity: u64,
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// How a capture answers a JavaScript dialog of type `kind` (alert,
/// confirm, prompt, beforeunload): as a page left to itself would go on,
/// never waiting for a person. An alert only has OK; a confirm or prompt is
/// dismissed (Cancel: `false`, `null`), as Playwright does with no dialog
/// listener, so a page asking "delete this?" is never told yes by the
/// grid; a `beforeunload` is accepted, so a navigation never waits on it.
pub fn dialog_accepted(kind: &str) -> bool {
    matches!(kind, "alert" | "beforeunload")
}

impl Seen {
    /// Records one event of the page whose main frame is `main_frame`.
    pub fn record(&mut self, method: &str, p: &Value, main_frame: &str) {
        match method {
            "Page.lifecycleEvent" if p["frameId"] == main_frame => {
                self.lifecycle.push((text(&p["loaderId"]), text(&p["name"])));
            }
            "Network.requestWillBeSent" => {
                let id = text(&p["requestId"]);
                self.network_activity += 1;
                if self.in_flight.len() < MAX_REQUESTS {
                    self.in_flight.insert(id.clone());
                }
                if self.requests.len() < MAX_REQUESTS {
                    self.requests.insert(id, (text(&p["request"]["url"]), text(&p["type"])));
                }
            }
            "Network.loadingFinished" => {
                self.network_activity += 1;
                self.in_flight.remove(&text(&p["requestId"]));
            }
            "Network.webSocketCreated" if self.requests.len() < MAX_REQUESTS => {
                self.requests.insert(text(&p["requestId"]), (text(&p["url"]), "WebSocket".into()));
            }
            "Network.responseReceived" => {
                let r = &p["response"];
                let headers: Map<String, Value> = r["headers"]
                    .as_object()
                    .map(|h| h.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.clone())).collect())
                    .unwrap_or_default();
                let main = p["type"] == "Document" && p["frameId"] == main_frame;
                if headers.get(REFUSED_HEADER).is_some_and(|v| v == "refused") {
                    self.block(text(&r["url"]), text(&p["type"]), PROXY_REFUSAL.into(), main);
                }
                if main {
                    let status = r["status"].as_u64().or_else(|| r["status"].as_f64().map(|f| f as u64)).unwrap_or(0);
                    self.documents.insert(
                        text(&p["loaderId"]),
                        MainResponse {
                            request_id: text(&p["requestId"]),
                            url: text(&r["url"]),
                            status: status as u32,
                            status_text: text(&r["statusText"]),
                            mime_type: text(&r["mimeType"]),
                            headers,
                        },
                    );
                }
            }
            "Network.loadingFailed" => {
                self.network_activity += 1;
                self.in_flight.remove(&text(&p["requestId"]));
                let url = self.requests.get(&text(&p["requestId"])).map(|(url, _)| url.clone()).unwrap_or_default();
                let error = text(&p["errorText"]);
                // Requests refused by the rules are listed as blocked instead.
                let refused = error.contains("ERR_BLOCKED_BY_CLIENT") && self.blocked.iter().any(|b| b.url == url);
                if !refused && p["canceled"] != true && self.failed.len() < MAX_LISTED {
                    self.failed.push(json!({"url": url, "resourceType": p["type"], "error": error}));
                }
            }
            "Runtime.exceptionThrown" if self.errors.len() < MAX_LISTED => {
                let d = &p["exceptionDetails"];
                let message = d["exception"]["description"].as_str().or(d["text"].as_str()).unwrap_or_default();
                self.errors.push(json!({
                    "message": message.lines().next().unwrap_or(""),
                    "url": text(&d["url"]),
                    "line": d["lineNumber"].as_u64().unwrap_or(0) + 1,
                    "column": d["columnNumber"].as_u64().unwrap_or(0) + 1,
                }));
            }
            "Page.javascriptDialogOpening" if self.dialogs.len() < MAX_DIALOGS => {
                let kind = text(&p["type"]);
                let message: String = text(&p["message"]).chars().take(MAX_DIALOG_MESSAGE).collect();
                let answer = if dialog_accepted(&kind) { "accepted" } else { "dismissed" };
                self.dialogs.push(json!({"type": kind, "message": message, "answer": answer}));
            }
            "Inspector.targetCrashed" => self.crashed = Some("the page's renderer crashed".into()),
            "Inspector.detached" => self.crashed = Some(format!("the page was detached: {}", text(&p["reason"]))),
            _ => {}
        }
    }

    /// Lists a refused request (up to [`MAX_LISTED`]).
    pub fn block(&mut self, url: String, resource_type: String, reason: String, main: bool) {
        if self.blocked.len() < MAX_LISTED {
            let host = url::Url::parse(&url).map(|u| host_of(&u)).unwrap_or_default();
            self.blocked.push(Blocked { url, host, resource_type, reason, main });
        }
    }

    /// Lists what the egress proxy refused that interception did not (a
    /// WebSocket, a name that resolved differently for the proxy): every
    /// request the page made to a refused host and not listed yet.
    pub fn list_refusals(&mut self, decisions: &[Decision]) {
        for d in decisions.iter().filter(|d| !d.allowed) {
            let host = egress::host_key(&d.host);
            let mut requests: Vec<(String, String)> = self
                .requests
                .values()
                .filter(|(url, _)| url::Url::parse(url).is_ok_and(|u| host_of(&u) == host))
                .filter(|(url, _)| !self.blocked.iter().any(|b| b.url == *url))
                .cloned()
                .collect();
            requests.sort();
            requests.dedup();
            for (url, resource_type) in requests {
                self.block(url, resource_type, d.reason.clone(), false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAIN: &str = "F1";

    fn response(request: &str, loader: &str, url: &str, kind: &str, frame: &str, headers: Value) -> Value {
        json!({"requestId": request, "loaderId": loader, "type": kind, "frameId": frame,
               "response": {"url": url, "status": 200, "statusText": "OK", "mimeType": "text/html", "headers": headers}})
    }

    #[test]
    fn main_frame_lifecycle_and_document_are_kept_others_are_not() {
        let mut seen = Seen::default();
        seen.record("Page.lifecycleEvent", &json!({"frameId": MAIN, "loaderId": "L1", "name": "load"}), MAIN);
        seen.record("Page.lifecycleEvent", &json!({"frameId": "child", "loaderId": "L2", "name": "load"}), MAIN);
        let headers = json!({"Content-Type": "text/html"});
        seen.record("Network.responseReceived", &response("R1", "L1", "http://a/", "Document", MAIN, headers), MAIN);
        seen.record(
            "Network.responseReceived",
            &response("R2", "L2", "http://a/f", "Document", "child", json!({})),
            MAIN,
        );
        assert_eq!(seen.lifecycle, [("L1".to_string(), "load".to_string())]);
        assert_eq!(seen.documents.len(), 1);
        let doc = &seen.documents["L1"];
        assert_eq!((doc.request_id.as_str(), doc.status), ("R1", 200));
        assert_eq!(doc.headers["content-type"], json!("text/html"), "header names are lower-cased");
        assert!(seen.blocked.is_empty());
    }

    #[test]
    fn a_proxy_refusal_response_is_listed_as_blocked() {
        let mut seen = Seen::default();
        let refused = json!({"X-Grid-Egress": "refused"});
        seen.record(
            "Network.responseReceived",
            &response("R1", "L1", "http://b.example/x.js", "Script", MAIN, refused),
            MAIN,
        );
        assert_eq!(seen.blocked.len(), 1);
        let b = &seen.blocked[0];
        assert_eq!(
            (b.host.as_str(), b.resource_type.as_str(), b.reason.as_str(), b.main),
            ("b.example", "Script", PROXY_REFUSAL, false)
        );
    }

    #[test]
    fn failures_of_refused_or_cancelled_requests_are_not_listed_as_failed() {
        let mut seen = Seen::default();
        for (id, url) in [("1", "http://a/ok.css"), ("2", "http://b/x.js"), ("3", "http://a/gone.png")] {
            seen.record(
                "Network.requestWillBeSent",
                &json!({"requestId": id, "type": "Other", "request": {"url": url}}),
                MAIN,
            );
        }
        seen.block("http://b/x.js".into(), "Script".into(), "host not in allowedHosts".into(), false);
        let failed = |id: &str, error: &str, canceled: bool| json!({"requestId": id, "type": "Stylesheet", "errorText": error, "canceled": canceled});
        seen.record("Network.loadingFailed", &failed("1", "net::ERR_CONNECTION_REFUSED", false), MAIN);
        seen.record("Network.loadingFailed", &failed("2", "net::ERR_BLOCKED_BY_CLIENT", false), MAIN);
        seen.record("Network.loadingFailed", &failed("3", "net::ERR_ABORTED", true), MAIN);
        assert_eq!(
            seen.failed,
            [json!({"url": "http://a/ok.css", "resourceType": "Stylesheet", "error": "net::ERR_CONNECTION_REFUSED"})]
        );
    }

    #[test]
    fn exceptions_keep_their_first_line_and_one_based_positions() {
        let mut seen = Seen::default();
        let details = json!({"exceptionDetails": {"text": "Uncaught", "url": "http://a/", "lineNumber": 2, "columnNumber": 8,
                                                   "exception": {"description": "Error: boom\n    at http://a/:3:9"}}});
        seen.record("Runtime.exceptionThrown", &details, MAIN);
        assert_eq!(seen.errors, [json!({"message": "Error: boom", "url": "http://a/", "line": 3, "column": 9})]);
    }

    #[test]
    fn dialogs_are_listed_bounded_with_their_answer() {
        let mut seen = Seen::default();
        let long = "y".repeat(MAX_DIALOG_MESSAGE + 5);
        for kind in ["alert", "confirm", "prompt", "beforeunload"] {
            seen.record(
                "Page.javascriptDialogOpening",
                &json!({"type": kind, "message": long, "url": "http://a/"}),
                MAIN,
            );
        }
        let answers: Vec<_> = seen.dialogs.iter().map(|d| (d["type"].clone(), d["answer"].clone())).collect();
        assert_eq!(
            answers,
            [("alert", "accepted"), ("confirm", "dismissed"), ("prompt", "dismissed"), ("beforeunload", "accepted")]
                .map(|(t, a)| (json!(t), json!(a)))
        );
        assert_eq!(seen.dialogs[0]["message"].as_str().unwrap().len(), MAX_DIALOG_MESSAGE);
        for _ in 0..2 * MAX_DIALOGS {
            seen.record("Page.javascriptDialogOpening", &json!({"type": "alert", "message": "again"}), MAIN);
        }
        assert_eq!(seen.dialogs.len(), MAX_DIALOGS);
    }

    #[test]
    fn a_crash_is_remembered() {
        let mut seen = Seen::default();
        seen.record("Inspector.targetCrashed", &json!({}), MAIN);
        assert_eq!(seen.crashed.as_deref(), Some("the page's renderer crashed"));
    }

    #[test]
    fn proxy_refusals_list_the_pages_requests_to_that_host_once() {
        let mut seen = Seen::default();
        seen.record("Network.webSocketCreated", &json!({"requestId": "9", "url": "ws://LocalHost:7/probe"}), MAIN);
        seen.record(
            "Network.requestWillBeSent",
            &json!({"requestId": "1", "type": "Image", "request": {"url": "http://a/i.png"}}),
            MAIN,
        );
        let refused = |host: &str| Decision {
            host: host.into(),
            allowed: false,
            detail: format!("refused: {host}: host not in allowedHosts"),
            reason: "host not in allowedHosts".into(),
            failure: None,
        };
        let allowed = Decision {
            host: "a".into(),
            allowed: true,
            detail: "allowed: 127.0.0.1".into(),
            reason: String::new(),
            failure: None,
        };
        let decisions = [refused("localhost"), refused("localhost"), allowed];
        seen.list_refusals(&decisions);
        seen.list_refusals(&decisions);
        assert_eq!(seen.blocked.len(), 1, "listed once");
        let b = &seen.blocked[0];
        assert_eq!(b.url, "ws://LocalHost:7/probe");
        assert_eq!(
            (b.host.as_str(), b.resource_type.as_str(), b.reason.as_str()),
            ("localhost", "WebSocket", "host not in allowedHosts")
        );
    }

    #[test]
    fn requests_in_flight_are_counted_until_they_end() {
        let mut seen = Seen::default();
        let sent = |id: &str| json!({"requestId": id, "type": "Image", "request": {"url": "http://a/i.png"}});
        seen.record("Network.requestWillBeSent", &sent("1"), MAIN);
        seen.record("Network.requestWillBeSent", &sent("2"), MAIN);
        // A redirect is sent again under the same id.
        seen.record("Network.requestWillBeSent", &sent("2"), MAIN);
        assert_eq!(seen.in_flight.len(), 2);
        seen.record("Network.loadingFinished", &json!({"requestId": "1"}), MAIN);
        let activity = seen.network_activity;
        seen.record("Network.loadingFailed", &json!({"requestId": "2", "errorText": "net::ERR_FAILED"}), MAIN);
        assert!(seen.in_flight.is_empty());
        assert_eq!(seen.network_activity, activity + 1);
    }
}
