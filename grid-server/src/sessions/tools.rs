//! The MCP browser tools on a session's browser (docs/mcp.md, "Browser
//! tools"): navigate, read the page as an accessibility snapshot with refs,
//! click, type, fill forms, press keys, select options, hover, drag, upload
//! files, wait, take a screenshot, evaluate, manage tabs, read the console
//! and the network requests (kept by the session's journal, `journal.rs`).
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
use grid_core::browser_tools::{Answer, BrowserTool, Cut, Ref, TabAction, MAX_RESULT_CHARS};
use serde_json::{json, Value};

use super::gate;
use super::live::Live;
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
/// Also the order the tools list tabs in: the order they were first seen
/// (Chromium's target list has no stable order).
#[derive(Clone, Default)]
pub struct Tab(Arc<Mutex<TabState>>);

#[derive(Default)]
struct TabState {
    current: Option<String>,
    order: Vec<String>,
}

impl Tab {
    fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).current.clone()
    }

    fn set(&self, target: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).current = Some(target.to_string());
    }

    /// `pages` in the order first seen: the known ones keep their places,
    /// the others follow (Chromium lists the newest first: reversed).
    fn ordered(&self, mut pages: Vec<Value>) -> Vec<Value> {
        let mut state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let id = |p: &Value| p["targetId"].as_str().unwrap_or_default().to_string();
        state.order.retain(|t| pages.iter().any(|p| id(p) == *t));
        for p in pages.iter().rev() {
            if !state.order.contains(&id(p)) {
                state.order.push(id(p));
            }
        }
        pages.sort_by_key(|p| state.order.iter().position(|t| *t == id(p)));
        pages
    }

    /// Places a tab the tools just opened last.
    fn opened(&self, target: &str) {
        let mut state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        state.order.retain(|t| t != target);
        state.order.push(target.to_string());
    }
}

/// Measures a value's JSON in the page itself, so that a large one never
/// leaves the browser whole: the value when its JSON fits `limit`, else
/// that JSON's start and length.
const BOUNDED_JS: &str = "function (limit) {
  let text;
  try { text = JSON.stringify(this); } catch (e) { return {whole: true, value: this}; }
  if (text === undefined || text.length <= limit) return {whole: true, value: this};
  return {whole: false, kept: text.slice(0, limit), total: text.length};
}";

/// The grid's handles to a value being measured, released after.
const TOOL_OBJECTS: &str = "grid-tool";

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
    let journal = live.journal.clone();
    let endpoint = live.ready(READY_WAIT).await.ok_or(ToolError::Gone)?;
    journal.follow(&endpoint.cdp).await;
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
            match c.evaluate_bounded(s, &expression).await? {
                Ok(value) => answer.result = Some(value),
                Err(cut) => answer.cut = Some(cut),
            }
            snapshot_after = false;
        }
        BrowserTool::Drag { start, end } => {
            c.drag(s, &start, &end).await?;
            c.settle(s).await?;
        }
        BrowserTool::FileUpload { target, files } => {
            let files: Vec<Value> = files
                .iter()
                .map(|f| {
                    json!({"name": f.name, "type": f.mime_type,
                           "b64": base64::engine::general_purpose::STANDARD.encode(&f.content)})
                })
                .collect();
            let outcome = c.call_on(s, &target, UPLOAD_JS, json!([files])).await?;
            if let Some(problem) = outcome.as_str() {
                return Err(ToolError::Failed(format!("{}: {problem}", target.text)));
            }
            c.settle(s).await?;
        }
        BrowserTool::ConsoleMessages { only_errors } => {
            let (messages, dropped) = journal.messages(&page, only_errors);
            answer.lines = Some(listing(&messages, dropped, "messages", |m| {
                let at = match (m["url"].as_str(), m["line"].as_i64()) {
                    (Some(u), Some(l)) => format!(" @ {u}:{l}"),
                    (Some(u), None) => format!(" @ {u}"),
                    _ => String::new(),
                };
                format!(
                    "[{}] {}{at}",
                    m["type"].as_str().unwrap_or("log").to_uppercase(),
                    m["text"].as_str().unwrap_or_default()
                )
            }));
            answer.result = Some(json!({"messages": messages, "dropped": dropped}));
            snapshot_after = false;
        }
        BrowserTool::NetworkRequests => {
            let (requests, dropped) = journal.requests(&page);
            answer.lines = Some(listing(&requests, dropped, "requests", |r| {
                let outcome = match (r["status"].as_i64(), r["failure"].as_str()) {
                    (_, Some(why)) => format!("failed: {why}"),
                    (Some(status), None) => format!("[{status}] {}", r["statusText"].as_str().unwrap_or_default()),
                    (None, None) => "(no answer yet)".into(),
                };
                format!(
                    "[{}] {} => {}",
                    r["method"].as_str().unwrap_or("GET"),
                    r["url"].as_str().unwrap_or_default(),
                    outcome.trim_end()
                )
            }));
            answer.result = Some(json!({"requests": requests, "dropped": dropped}));
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

/// The page targets of the browser, oldest first: a tab keeps its index
/// while newer ones open.
async fn pages(c: &mut Client, tabs: &Tab) -> Result<Vec<Value>, ToolError> {
    let all = c.call(None, "Target.getTargets", json!({})).await?;
    let pages: Vec<Value> =
        all["targetInfos"].as_array().into_iter().flatten().filter(|t| t["type"] == "page").cloned().collect();
    Ok(tabs.ordered(pages))
}

/// The tab the session's tools act on: the one selected last, or the first
/// page showing something (a CDP client's page, say), or the first page (a
/// new blank one when there is none).
async fn current_tab(c: &mut Client, tabs: &Tab) -> Result<String, ToolError> {
    let pages = pages(c, tabs).await?;
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
            let target = created["targetId"].as_str().unwrap_or_default().to_string();
            tabs.opened(&target);
            target
        }
        TabAction::Select { index } => {
            let pages = pages(c, tabs).await?;
            let p = pages.get(*index).ok_or_else(|| {
                ToolError::Failed(format!("there is no tab {index}; the session has {} (from 0)", pages.len()))
            })?;
            p["targetId"].as_str().unwrap_or_default().to_string()
        }
        TabAction::Close { index } => {
            let pages = pages(c, tabs).await?;
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
    let list: Vec<Value> = pages(c, tabs)
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
    Ok(Answer { url, title, snapshot, result: Some(Value::Array(list)), image: None, lines: None, cut: None })
}

/// Entries as one line each, oldest first, saying how many were dropped.
fn listing(entries: &[Value], dropped: u64, what: &str, line: impl Fn(&Value) -> String) -> String {
    let mut out = if entries.is_empty() { format!("No {what}.") } else { String::new() };
    if dropped > 0 {
        out.push_str(&format!("({dropped} older {what} dropped)\n"));
    }
    let lines: Vec<String> = entries.iter().map(line).collect();
    out.push_str(&lines.join("\n"));
    out
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

/// Gives a file input (the element, the input a label names, or the one
/// inside the element) the files sent, as if a person chose them.
const UPLOAD_JS: &str = "function (files) {
  const el = this;
  if (!(el instanceof Element)) return 'not an element';
  const input = el instanceof HTMLLabelElement ? el.control
    : (el instanceof HTMLInputElement ? el : el.querySelector('input[type=file]'));
  if (!(input instanceof HTMLInputElement) || input.type !== 'file') return 'not a file input (<input type=file>), nor a label or element holding one';
  if (input.disabled) return 'the file input is disabled';
  if (!input.multiple && files.length > 1) return 'the file input takes one file; ' + files.length + ' were given';
  const dt = new DataTransfer();
  for (const f of files) {
    const bin = atob(f.b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    dt.items.add(new File([bytes], f.name, {type: f.type}));
  }
  input.files = dt.files;
  input.dispatchEvent(new Event('input', {bubbles: true}));
  input.dispatchEvent(new Event('change', {bubbles: true}));
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
        let link = &mut self.link;
        let answer = tokio::time::timeout(CALL_TIMEOUT, async {
            while let Some(text) = link.recv().await {
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

    /// Presses the mouse on `start`, moves it onto `end` and releases it.
    /// An HTML drag the page starts is intercepted (`Input.setInterceptDrags`)
    /// and dropped on `end` with its data, as Chromium would on a screen.
    async fn drag(&mut self, s: Option<&str>, start: &Ref, end: &Ref) -> Result<(), ToolError> {
        let (x0, y0) = self.centre(s, start).await?;
        self.call(s, "Input.setInterceptDrags", json!({"enabled": true})).await?;
        let dragged = async {
            self.mouse(s, "mouseMoved", x0, y0, 0).await?;
            self.mouse(s, "mousePressed", x0, y0, 1).await?;
            // A few pixels first: pages start a drag past a threshold.
            self.pressed_move(s, x0 + 5.0, y0 + 5.0).await?;
            let (x1, y1) = self.centre(s, end).await?;
            for step in 1..=4 {
                let f = f64::from(step) / 4.0;
                self.pressed_move(s, x0 + (x1 - x0) * f, y0 + (y1 - y0) * f).await?;
            }
            // An answer comes after the events before it: the intercepted
            // drag, if the page started one, is in by now.
            self.call(s, "Runtime.evaluate", json!({"expression": "1", "returnByValue": true})).await?;
            let data = self
                .events
                .iter()
                .rev()
                .find(|e| e["method"] == "Input.dragIntercepted")
                .map(|e| e["params"]["data"].clone());
            if let Some(data) = data {
                for kind in ["dragEnter", "dragOver", "drop"] {
                    self.call(
                        s,
                        "Input.dispatchDragEvent",
                        json!({"type": kind, "x": x1, "y": y1, "data": data.clone()}),
                    )
                    .await?;
                }
            }
            self.mouse(s, "mouseReleased", x1, y1, 1).await
        }
        .await;
        let _ = self.call(s, "Input.setInterceptDrags", json!({"enabled": false})).await;
        dragged
    }

    async fn pressed_move(&mut self, s: Option<&str>, x: f64, y: f64) -> Result<(), ToolError> {
        self.call(
            s,
            "Input.dispatchMouseEvent",
            json!({"type": "mouseMoved", "x": x, "y": y, "button": "left", "buttons": 1}),
        )
        .await
        .map(drop)
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

    /// Evaluates `expression` (awaiting a promise) and reads its value
    /// bounded to [`MAX_RESULT_CHARS`] of JSON: an object is measured in
    /// the page (`BOUNDED_JS`) and comes back whole or cut; a string comes
    /// with the evaluation's answer (the pipe's own bound holds it) and is
    /// cut here.
    async fn evaluate_bounded(&mut self, s: Option<&str>, expression: &str) -> Result<Result<Value, Cut>, ToolError> {
        let r = self
            .call(
                s,
                "Runtime.evaluate",
                json!({"expression": expression, "awaitPromise": true, "returnByValue": false, "objectGroup": TOOL_OBJECTS}),
            )
            .await?;
        if let Some(ex) = r.get("exceptionDetails") {
            let text = ex["exception"]["description"].as_str().or(ex["text"].as_str()).unwrap_or("an exception");
            return Err(ToolError::Failed(format!("the expression threw: {text}")));
        }
        let Some(object) = r["result"]["objectId"].as_str().map(str::to_string) else {
            return Ok(bound(r["result"]["value"].clone()));
        };
        let measured = self
            .call(
                s,
                "Runtime.callFunctionOn",
                json!({"objectId": object, "functionDeclaration": BOUNDED_JS,
                       "arguments": [{"value": MAX_RESULT_CHARS}], "returnByValue": true}),
            )
            .await;
        self.call(s, "Runtime.releaseObjectGroup", json!({"objectGroup": TOOL_OBJECTS})).await?;
        let measured = measured?;
        if let Some(ex) = measured.get("exceptionDetails") {
            let text = ex["exception"]["description"].as_str().or(ex["text"].as_str()).unwrap_or("an exception");
            return Err(ToolError::Failed(format!("the value cannot be read: {text}")));
        }
        let v = &measured["result"]["value"];
        if v["whole"] == json!(true) {
            return Ok(bound(v["value"].clone()));
        }
        let total_chars = v["total"].as_u64().unwrap_or_default() as usize;
        Ok(Err(Cut { total_chars, kept: v["kept"].as_str().unwrap_or_default().to_string() }))
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

/// `value` when its JSON fits [`MAX_RESULT_CHARS`], else its JSON's start.
fn bound(value: Value) -> Result<Value, Cut> {
    let text = value.to_string();
    if text.len() <= MAX_RESULT_CHARS {
        return Ok(value);
    }
    let mut end = MAX_RESULT_CHARS;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Err(Cut { total_chars: text.chars().count(), kept: text[..end].to_string() })
}
