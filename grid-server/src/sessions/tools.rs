//! The MCP browser tools on a session's browser (docs/mcp.md, "Browser
//! tools"): navigate, read the page as an accessibility snapshot with refs,
//! click, type, fill forms, press keys, select options, hover, wait, take a
//! screenshot, evaluate, manage tabs.
//!
//! A tool speaks to the browser exactly as a lessee's CDP connection does:
//! over a `ClientLink` of the browser's pipe, every command through the CDP
//! gate (`gate.rs`), so a tool can do nothing a CDP client could not (no
//! `file:` URL, no host path) and the session's network policy applies to
//! every request its pages make. A tool call attaches to the session's
//! current tab for its duration and detaches when done (dropping the link),
//! so CDP clients and tools drive one session side by side.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use grid_core::browser_tools::{BrowserTool, Ref, TabAction};
use serde_json::{json, Value};

use super::{gate, Live};
use crate::browser::cdp::ClientLink;

/// Longest one command may take to answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a page may take to load after an action that navigates.
const LOAD_TIMEOUT: Duration = Duration::from_secs(20);
/// How long after an action a navigation may still start: a click's
/// handler may navigate a moment later.
const NAVIGATION_GRACE: Duration = Duration::from_millis(250);
/// Longest `browser_wait_for` waits for a text when given no time.
const TEXT_WAIT: Duration = Duration::from_secs(30);
/// Events kept while a command waits (the rest are dropped, oldest first).
const MAX_EVENTS: usize = 1_000;
/// How long a tool waits for a session's browser that is still starting.
const READY_WAIT: Duration = Duration::from_secs(30);

/// The tab a session's tools act on (its target id), kept with the
/// session's live handle; a tab that closed falls back to the first page.
#[derive(Clone, Default)]
pub struct Tab(Arc<Mutex<Option<String>>>);

impl Tab {
    fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, target: &str) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(target.to_string());
    }
}

/// What a tool answers: the current tab's URL and title after it, and what
/// the tool itself reads.
#[derive(Debug, Default)]
pub struct Answer {
    pub url: String,
    pub title: String,
    pub snapshot: Option<String>,
    pub result: Option<Value>,
    /// A PNG (`browser_take_screenshot`).
    pub image: Option<Vec<u8>>,
}

/// Why a tool did not do what it was asked.
#[derive(Debug)]
pub enum ToolError {
    /// The session ended (or its browser went away) meanwhile.
    Gone,
    /// The page, the gate or the browser refused it: the message says why.
    Failed(String),
}

impl From<String> for ToolError {
    fn from(s: String) -> ToolError {
        ToolError::Failed(s)
    }
}

/// Runs `tool` on the session's browser, once it is up.
pub async fn run(live: Live, tool: BrowserTool) -> Result<Answer, ToolError> {
    let tabs = live.tab.clone();
    let endpoint = live.ready(READY_WAIT).await.ok_or(ToolError::Gone)?;
    let mut c = Client { link: endpoint.cdp.link_client(), next: 1, events: VecDeque::new() };
    let page = current_tab(&mut c, &tabs).await?;
    if let BrowserTool::Tabs { action } = &tool {
        return tab_action(&mut c, &tabs, &page, action).await;
    }
    let ps = c.attach(&page).await?;
    let s = Some(ps.as_str());
    c.call(s, "Page.enable", json!({})).await?;
    // Only what the action causes counts for `settle`.
    c.events.clear();
    let mut answer = Answer::default();
    let mut snapshot_after = true;
    match tool {
        BrowserTool::Navigate { url } => {
            let nav = c.call(s, "Page.navigate", json!({"url": url})).await?;
            if let Some(error) = nav["errorText"].as_str().filter(|e| !e.is_empty()) {
                return Err(ToolError::Failed(format!("navigating to {url} failed: {error}")));
            }
            // A new document (a loader id) fires load; a same-document
            // navigation (a fragment) has none to wait for.
            if !nav["loaderId"].is_null() {
                c.load_event(s).await?;
            }
        }
        BrowserTool::NavigateBack => {
            let history = c.call(s, "Page.getNavigationHistory", json!({})).await?;
            let current = history["currentIndex"].as_i64().unwrap_or(0);
            let Some(entry) = history["entries"].get((current - 1).max(0) as usize).filter(|_| current > 0) else {
                return Err(ToolError::Failed("there is no previous page in this tab".into()));
            };
            c.call(s, "Page.navigateToHistoryEntry", json!({"entryId": entry["id"]})).await?;
            c.loaded(s).await?;
        }
        BrowserTool::Snapshot => {}
        BrowserTool::Click { target, double } => {
            let (x, y) = c.centre(s, &target).await?;
            c.mouse(s, "mouseMoved", x, y, 0).await?;
            for count in 1..=if double { 2 } else { 1 } {
                c.mouse(s, "mousePressed", x, y, count).await?;
                c.mouse(s, "mouseReleased", x, y, count).await?;
            }
            c.settle(s).await?;
        }
        BrowserTool::Hover { target } => {
            let (x, y) = c.centre(s, &target).await?;
            c.mouse(s, "mouseMoved", x, y, 0).await?;
        }
        BrowserTool::Type { target, text, submit } => {
            c.call(s, "DOM.focus", json!({"backendNodeId": target.backend_node_id}))
                .await
                .map_err(|e| gone_ref(&target, e))?;
            if !text.is_empty() {
                c.call(s, "Input.insertText", json!({"text": text})).await?;
            }
            if submit {
                c.key(s, "Enter").await?;
            }
            c.settle(s).await?;
        }
        BrowserTool::FillForm { fields } => {
            for (target, value) in &fields {
                let outcome = c.call_on(s, target, FILL_JS, json!([value])).await?;
                if let Some(problem) = outcome.as_str() {
                    return Err(ToolError::Failed(format!("{}: {problem}", target.text)));
                }
            }
            c.settle(s).await?;
        }
        BrowserTool::PressKey { key } => {
            c.key(s, &key).await?;
            c.settle(s).await?;
        }
        BrowserTool::SelectOption { target, values } => {
            let outcome = c.call_on(s, &target, SELECT_JS, json!([values])).await?;
            if let Some(problem) = outcome.as_str() {
                return Err(ToolError::Failed(format!("{}: {problem}", target.text)));
            }
            c.settle(s).await?;
        }
        BrowserTool::WaitFor { text, text_gone, time_ms } => {
            if let Some(ms) = time_ms {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            let limit = time_ms.map_or(TEXT_WAIT, |ms| Duration::from_millis(ms).max(Duration::from_secs(1)));
            for (wanted, present) in [(text, true), (text_gone, false)] {
                if let Some(t) = wanted {
                    c.wait_text(s, &t, present, limit).await?;
                }
            }
        }
        BrowserTool::TakeScreenshot { full_page } => {
            let mut params = json!({"format": "png"});
            if full_page {
                let m = c.call(s, "Page.getLayoutMetrics", json!({})).await?;
                let size = &m["cssContentSize"];
                params["captureBeyondViewport"] = json!(true);
                params["clip"] = json!({"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1});
            }
            let shot = c.call(s, "Page.captureScreenshot", params).await?;
            let png = base64::engine::general_purpose::STANDARD
                .decode(shot["data"].as_str().unwrap_or_default())
                .map_err(|e| ToolError::Failed(format!("the screenshot: {e}")))?;
            answer.image = Some(png);
            snapshot_after = false;
        }
        BrowserTool::Evaluate { expression } => {
            let r = c
                .call(
                    s,
                    "Runtime.evaluate",
                    json!({"expression": expression, "awaitPromise": true, "returnByValue": true}),
                )
                .await?;
            if let Some(ex) = r.get("exceptionDetails") {
                let text = ex["exception"]["description"].as_str().or(ex["text"].as_str()).unwrap_or("an exception");
                return Err(ToolError::Failed(format!("the expression threw: {text}")));
            }
            answer.result = Some(r["result"]["value"].clone());
            snapshot_after = false;
        }
        BrowserTool::Tabs { .. } => {}
    }
    let (url, title) = c.location(s).await?;
    answer.url = url;
    answer.title = title;
    if snapshot_after {
        answer.snapshot = Some(c.snapshot(s).await?);
    }
    Ok(answer)
}

/// The page targets of the browser, oldest first (Chromium lists the
/// newest first): a tab keeps its index while newer ones open.
async fn pages(c: &mut Client) -> Result<Vec<Value>, ToolError> {
    let all = c.call(None, "Target.getTargets", json!({})).await?;
    let mut pages: Vec<Value> =
        all["targetInfos"].as_array().into_iter().flatten().filter(|t| t["type"] == "page").cloned().collect();
    pages.reverse();
    Ok(pages)
}

/// The tab the session's tools act on: the one selected last, or the first
/// page showing something (a CDP client's page, say), or the first page (a
/// new blank one when there is none).
async fn current_tab(c: &mut Client, tabs: &Tab) -> Result<String, ToolError> {
    let pages = pages(c).await?;
    let selected = tabs.get();
    if let Some(t) = selected.filter(|t| pages.iter().any(|p| p["targetId"] == t.as_str())) {
        return Ok(t);
    }
    let showing = pages.iter().find(|p| p["url"] != "about:blank").or(pages.first());
    let target = match showing {
        Some(p) => p["targetId"].as_str().unwrap_or_default().to_string(),
        None => {
            let created = c.call(None, "Target.createTarget", json!({"url": "about:blank"})).await?;
            created["targetId"].as_str().unwrap_or_default().to_string()
        }
    };
    tabs.set(&target);
    Ok(target)
}

async fn tab_action(c: &mut Client, tabs: &Tab, current: &str, action: &TabAction) -> Result<Answer, ToolError> {
    let chosen = match action {
        TabAction::List => current.to_string(),
        TabAction::New { url } => {
            let url = url.clone().unwrap_or_else(|| "about:blank".into());
            let created = c.call(None, "Target.createTarget", json!({"url": url})).await?;
            created["targetId"].as_str().unwrap_or_default().to_string()
        }
        TabAction::Select { index } => {
            let pages = pages(c).await?;
            let p = pages.get(*index).ok_or_else(|| {
                ToolError::Failed(format!("there is no tab {index}; the session has {} (from 0)", pages.len()))
            })?;
            p["targetId"].as_str().unwrap_or_default().to_string()
        }
        TabAction::Close { index } => {
            let pages = pages(c).await?;
            let close = match index {
                Some(i) => pages.get(*i).and_then(|p| p["targetId"].as_str()).map(str::to_string).ok_or_else(|| {
                    ToolError::Failed(format!("there is no tab {i}; the session has {} (from 0)", pages.len()))
                })?,
                None => current.to_string(),
            };
            c.call(None, "Target.closeTarget", json!({"targetId": close})).await?;
            let left = pages.iter().filter_map(|p| p["targetId"].as_str()).find(|t| *t != close).map(str::to_string);
            match left {
                Some(t) => t,
                None => {
                    let created = c.call(None, "Target.createTarget", json!({"url": "about:blank"})).await?;
                    created["targetId"].as_str().unwrap_or_default().to_string()
                }
            }
        }
    };
    tabs.set(&chosen);
    let _ = c.call(None, "Target.activateTarget", json!({"targetId": chosen})).await;
    let ps = c.attach(&chosen).await?;
    let s = Some(ps.as_str());
    c.call(s, "Page.enable", json!({})).await?;
    if let TabAction::New { url: Some(url) } = action {
        // A new tab starts on about:blank, complete before its navigation
        // has committed: wait for the page asked for.
        if url != "about:blank" {
            c.off_blank(s).await?;
        }
        c.loaded(s).await?;
    }
    let (url, title) = c.location(s).await?;
    let list: Vec<Value> = pages(c)
        .await?
        .iter()
        .enumerate()
        .map(|(i, p)| {
            // The browser's target list learns a new page's title a moment
            // late: the current tab's is read from the page itself.
            let current = p["targetId"] == chosen.as_str();
            let (u, t) = if current { (json!(url), json!(title)) } else { (p["url"].clone(), p["title"].clone()) };
            json!({"index": i, "url": u, "title": t, "current": current})
        })
        .collect();
    let snapshot = if matches!(action, TabAction::List) { None } else { Some(c.snapshot(s).await?) };
    Ok(Answer { url, title, snapshot, result: Some(Value::Array(list)), image: None })
}

/// A ref the browser no longer knows.
fn gone_ref(target: &Ref, e: ToolError) -> ToolError {
    match e {
        ToolError::Failed(_) => ToolError::Failed(format!(
            "{} is not on the page any more (or is not an element); take a new snapshot with browser_snapshot",
            target.text
        )),
        gone => gone,
    }
}

/// Sets a form field's value as a person would leave it, firing input and
/// change; answers a problem as a string, or nothing.
const FILL_JS: &str = "function (value) {
  const el = this;
  if (!(el instanceof Element)) return 'not an element';
  const tag = el.tagName;
  el.scrollIntoView({block: 'center'});
  el.focus();
  if (tag === 'INPUT' && (el.type === 'checkbox' || el.type === 'radio')) {
    const want = value === 'true' || value === 'on' || value === 'checked';
    if (el.checked !== want) el.click();
    return null;
  }
  if (tag === 'SELECT') {
    const o = Array.from(el.options).find(o => o.value === value || o.label === value || o.text === value);
    if (!o) return 'no option ' + JSON.stringify(value);
    el.value = o.value;
  } else if (tag === 'INPUT' || tag === 'TEXTAREA') {
    const proto = tag === 'INPUT' ? HTMLInputElement.prototype : HTMLTextAreaElement.prototype;
    Object.getOwnPropertyDescriptor(proto, 'value').set.call(el, value);
  } else if (el.isContentEditable) {
    el.textContent = value;
  } else {
    return 'a ' + tag.toLowerCase() + ' element takes no value';
  }
  el.dispatchEvent(new Event('input', {bubbles: true}));
  el.dispatchEvent(new Event('change', {bubbles: true}));
  return null;
}";

/// Selects the options of a `<select>` whose value or label is listed.
const SELECT_JS: &str = "function (values) {
  const el = this;
  if (!(el instanceof HTMLSelectElement)) return 'not a select element';
  const chosen = Array.from(el.options).filter(o => values.includes(o.value) || values.includes(o.label));
  if (chosen.length === 0) return 'no option among ' + JSON.stringify(values);
  if (!el.multiple && chosen.length > 1) return 'selects one option; ' + chosen.length + ' match';
  for (const o of el.options) o.selected = chosen.includes(o);
  el.dispatchEvent(new Event('input', {bubbles: true}));
  el.dispatchEvent(new Event('change', {bubbles: true}));
  return null;
}";

/// A named key's DevTools key code and the text it types.
fn named_key(key: &str) -> Option<(i64, &'static str)> {
    Some(match key {
        "Enter" => (13, "\r"),
        "Tab" => (9, ""),
        "Escape" => (27, ""),
        "Backspace" => (8, ""),
        "Delete" => (46, ""),
        "ArrowUp" => (38, ""),
        "ArrowDown" => (40, ""),
        "ArrowLeft" => (37, ""),
        "ArrowRight" => (39, ""),
        "Home" => (36, ""),
        "End" => (35, ""),
        "PageUp" => (33, ""),
        "PageDown" => (34, ""),
        " " | "Space" => (32, " "),
        _ => return None,
    })
}

/// A tool's CDP connection: a lessee's, relayed on the browser's pipe.
struct Client {
    link: ClientLink,
    next: u64,
    /// Events of the attached tab, kept while commands wait.
    events: VecDeque<Value>,
}

impl Client {
    /// Sends one command through the gate and waits for its answer.
    async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<Value, ToolError> {
        let id = self.next;
        self.next += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        gate::check(&mut msg).map_err(|why| ToolError::Failed(format!("{}: {why}", gate::REFUSED)))?;
        self.link.send(msg).map_err(|_| ToolError::Gone)?;
        let events = &mut self.events;
        let incoming = &mut self.link.incoming;
        let answer = tokio::time::timeout(CALL_TIMEOUT, async {
            while let Some(text) = incoming.recv().await {
                let Ok(v) = serde_json::from_str::<Value>(&text) else { continue };
                if v["id"] == json!(id) {
                    if let Some(err) = v.get("error") {
                        let message = err["message"].as_str().unwrap_or("an error").to_string();
                        return Err(ToolError::Failed(format!("{method}: {message}")));
                    }
                    return Ok(v["result"].clone());
                }
                if v.get("method").is_some() {
                    if events.len() == MAX_EVENTS {
                        events.pop_front();
                    }
                    events.push_back(v);
                }
            }
            Err(ToolError::Gone)
        })
        .await;
        answer.unwrap_or_else(|_| Err(ToolError::Failed(format!("{method}: no answer within {CALL_TIMEOUT:?}"))))
    }

    async fn attach(&mut self, target: &str) -> Result<String, ToolError> {
        let attached = self.call(None, "Target.attachToTarget", json!({"targetId": target, "flatten": true})).await?;
        attached["sessionId"].as_str().map(str::to_string).ok_or_else(|| ToolError::Failed("the tab went away".into()))
    }

    async fn location(&mut self, s: Option<&str>) -> Result<(String, String), ToolError> {
        let r = self
            .call(
                s,
                "Runtime.evaluate",
                json!({"expression": "[location.href, document.title]", "returnByValue": true}),
            )
            .await?;
        let v = &r["result"]["value"];
        Ok((v[0].as_str().unwrap_or_default().to_string(), v[1].as_str().unwrap_or_default().to_string()))
    }

    async fn snapshot(&mut self, s: Option<&str>) -> Result<String, ToolError> {
        let tree = self.call(s, "Accessibility.getFullAXTree", json!({})).await?;
        Ok(grid_core::snapshot::write(tree["nodes"].as_array().map(Vec::as_slice).unwrap_or_default()))
    }

    /// Waits until the tab's document is complete (after a navigation).
    async fn loaded(&mut self, s: Option<&str>) -> Result<(), ToolError> {
        let complete = |v: &Value| v == "complete";
        let late = || format!("the page did not finish loading within {LOAD_TIMEOUT:?}");
        self.poll(s, "document.readyState", complete, LOAD_TIMEOUT, Duration::from_millis(50), late).await
    }

    /// Evaluates `expression` in the tab every `every` until its value
    /// satisfies `done`; fails with `late()` past `within`.
    async fn poll(
        &mut self,
        s: Option<&str>,
        expression: &str,
        done: impl Fn(&Value) -> bool,
        within: Duration,
        every: Duration,
        late: impl Fn() -> String,
    ) -> Result<(), ToolError> {
        let deadline = Instant::now() + within;
        loop {
            let r = self.call(s, "Runtime.evaluate", json!({"expression": expression, "returnByValue": true})).await?;
            if done(&r["result"]["value"]) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(ToolError::Failed(late()));
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Waits for the tab's next load event (the previous document's
    /// `readyState` would answer too early).
    async fn load_event(&mut self, s: Option<&str>) -> Result<(), ToolError> {
        let deadline = Instant::now() + LOAD_TIMEOUT;
        let fired = |e: &VecDeque<Value>| e.iter().any(|v| v["method"] == "Page.loadEventFired");
        while !fired(&self.events) {
            if Instant::now() >= deadline {
                return Err(ToolError::Failed(format!("the page did not finish loading within {LOAD_TIMEOUT:?}")));
            }
            // An answer comes after the events before it.
            self.call(s, "Runtime.evaluate", json!({"expression": "1", "returnByValue": true})).await?;
            if !fired(&self.events) {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
        self.events.clear();
        Ok(())
    }

    /// Waits until the tab has left its initial about:blank.
    async fn off_blank(&mut self, s: Option<&str>) -> Result<(), ToolError> {
        let away = |v: &Value| v != "about:blank";
        let late = || format!("the new tab did not start loading within {LOAD_TIMEOUT:?}");
        self.poll(s, "location.href", away, LOAD_TIMEOUT, Duration::from_millis(50), late).await
    }

    /// After an action: if the tab starts navigating within a moment, waits
    /// for the new page to load.
    async fn settle(&mut self, s: Option<&str>) -> Result<(), ToolError> {
        let started = |v: &Value| {
            matches!(
                v["method"].as_str(),
                Some("Page.frameRequestedNavigation" | "Page.frameStartedLoading" | "Page.frameNavigated")
            )
        };
        let mut navigating = self.events.iter().any(started);
        let deadline = Instant::now() + NAVIGATION_GRACE;
        while !navigating && Instant::now() < deadline {
            // A cheap command: its answer comes after any event the action caused.
            self.call(s, "Runtime.evaluate", json!({"expression": "1", "returnByValue": true})).await?;
            navigating = self.events.iter().any(started);
            if !navigating {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
        self.events.clear();
        if navigating {
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.loaded(s).await?;
        }
        Ok(())
    }

    /// The middle of the element `target`, scrolled into view, in viewport
    /// coordinates.
    async fn centre(&mut self, s: Option<&str>, target: &Ref) -> Result<(f64, f64), ToolError> {
        let node = json!({"backendNodeId": target.backend_node_id});
        let _ = self.call(s, "DOM.scrollIntoViewIfNeeded", node.clone()).await.map_err(|e| gone_ref(target, e))?;
        let quads = self.call(s, "DOM.getContentQuads", node).await.map_err(|e| gone_ref(target, e))?;
        let q: Vec<f64> = quads["quads"][0].as_array().into_iter().flatten().filter_map(Value::as_f64).collect();
        if q.len() != 8 {
            return Err(ToolError::Failed(format!("{} is not visible on the page", target.text)));
        }
        Ok(((q[0] + q[2] + q[4] + q[6]) / 4.0, (q[1] + q[3] + q[5] + q[7]) / 4.0))
    }

    async fn mouse(&mut self, s: Option<&str>, kind: &str, x: f64, y: f64, count: u32) -> Result<(), ToolError> {
        let mut params = json!({"type": kind, "x": x, "y": y});
        if kind != "mouseMoved" {
            params["button"] = json!("left");
            params["clickCount"] = json!(count);
        }
        self.call(s, "Input.dispatchMouseEvent", params).await.map(drop)
    }

    async fn key(&mut self, s: Option<&str>, key: &str) -> Result<(), ToolError> {
        let (code, text) = match named_key(key) {
            Some((code, text)) => (code, text.to_string()),
            None if key.chars().count() == 1 => (key.to_ascii_uppercase().chars().next().map_or(0, |c| c as i64), key.to_string()),
            None => return Err(ToolError::Failed(format!("key: unknown key {key:?}; a character, or Enter, Tab, Escape, Backspace, Delete, ArrowUp, ArrowDown, ArrowLeft, ArrowRight, Home, End, PageUp, PageDown"))),
        };
        let name = if key == "Space" { " " } else { key };
        let mut down = json!({"type": if text.is_empty() { "rawKeyDown" } else { "keyDown" }, "key": name,
                              "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code});
        if !text.is_empty() {
            down["text"] = json!(text);
        }
        self.call(s, "Input.dispatchKeyEvent", down).await?;
        self.call(s, "Input.dispatchKeyEvent", json!({"type": "keyUp", "key": name, "windowsVirtualKeyCode": code}))
            .await
            .map(drop)
    }

    /// Calls `function` with `this` the element `target`; its value.
    async fn call_on(
        &mut self,
        s: Option<&str>,
        target: &Ref,
        function: &str,
        args: Value,
    ) -> Result<Value, ToolError> {
        let resolved = self
            .call(s, "DOM.resolveNode", json!({"backendNodeId": target.backend_node_id}))
            .await
            .map_err(|e| gone_ref(target, e))?;
        let object = resolved["object"]["objectId"].clone();
        let arguments: Vec<Value> = args.as_array().into_iter().flatten().map(|a| json!({"value": a})).collect();
        let r = self
            .call(
                s,
                "Runtime.callFunctionOn",
                json!({"objectId": object, "functionDeclaration": function, "arguments": arguments, "returnByValue": true, "awaitPromise": true}),
            )
            .await?;
        if let Some(ex) = r.get("exceptionDetails") {
            return Err(ToolError::Failed(format!("{}: {}", target.text, ex["text"].as_str().unwrap_or("failed"))));
        }
        Ok(r["result"]["value"].clone())
    }

    /// Waits until the tab's text has (`present`) or lacks `text`.
    async fn wait_text(
        &mut self,
        s: Option<&str>,
        text: &str,
        present: bool,
        limit: Duration,
    ) -> Result<(), ToolError> {
        let expression = format!(
            "!!document.body && document.body.innerText.includes({})",
            serde_json::to_string(text).unwrap_or_default()
        );
        let what = if present { "appear" } else { "disappear" };
        let late = || format!("{text:?} did not {what} within {limit:?}");
        let reached = |v: &Value| v.as_bool() == Some(present);
        self.poll(s, &expression, reached, limit, Duration::from_millis(100), late).await
    }
}
