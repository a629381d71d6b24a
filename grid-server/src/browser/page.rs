//! The page driver: one item on one browser, asynchronous, over the
//! browser's shared DevTools connection (`cdp.rs`).
//!
//! Steps: fresh browser context and page → setup (domains, profile
//! overrides, request interception) sent as one pipelined burst → navigate
//! → wait for `load` (and `networkIdle`) of the navigation's loader within
//! the budget → read what the script wants (facts and DOM, screenshot, main
//! document body), again pipelined → dispose the context. Every page-side
//! fact worth keeping (main response, blocked and failed requests, uncaught
//! exceptions, JavaScript dialogs) is gathered from the page's events, which
//! are handled whenever the driver waits, so paused requests and dialogs
//! are always answered.
//!
//! Events are read by `events.rs`; commands use headless_chrome's typed
//! protocol structs.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use grid_core::validate::params::{self, BrowserParams, Clip, Region, Viewport, WaitFor, WaitUntil};
use headless_chrome::protocol::cdp::types::Method;
use headless_chrome::protocol::cdp::{Emulation, Fetch, Network, Page, Runtime, Target};
use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use super::cdp::{CdpError, Connection, Event};
use super::events::Seen;
use super::hosts::RequestRules;
use super::pool::Chromium;
use super::profiles::{Manifest, UserAgent};
use crate::egress::EgressProxy;
use crate::upstream::Upstream;

/// Longest disposing an item's context may take before the item moves on
/// (a browser that slow is caught by the next item's watchdog).
const DISPOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Chromium's response-body buffers for `browser-fetch` (total, per resource).
const BODY_BUFFERS: (u64, u64) = (64 * 1024 * 1024, 32 * 1024 * 1024);
/// The DOM as `html` serves it: doctype + `<html>` element.
const HTML_EXPRESSION: &str = "(document.doctype ? new XMLSerializer().serializeToString(document.doctype) : '') + \
     (document.documentElement ? document.documentElement.outerHTML : '')";

/// Between two looks for `waitFor.selector`.
const SELECTOR_POLL: Duration = Duration::from_millis(100);

/// What one item asks of its page.
#[derive(Debug, Clone)]
pub struct PageSpec {
    pub url: String,
    /// The item URL's host as `host_of` writes it: `headers` go only to it.
    pub host: String,
    pub manifest: &'static Manifest,
    /// The profile's, or the `viewport` parameter.
    pub viewport: Viewport,
    /// The item's checked parameters (options its script does not take keep
    /// their defaults).
    pub params: BrowserParams,
    pub rules: RequestRules,
    pub want: Want,
    /// A signed-in capture's context's cookies (`Storage.setCookies`
    /// fields), set in the item's own browser context: nothing the page
    /// sets reaches the context.
    pub context_cookies: Vec<Value>,
    /// The batch's (or the grid's default) upstream proxy: the context gets
    /// an egress proxy of its own that checks `rules` and then sends
    /// through it (docs/proxies.md).
    pub upstream: Option<Upstream>,
}

impl PageSpec {
    /// From navigation start until the page is ready.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.params.timeout_ms)
    }

    /// Whether the page's requests are paused for a decision: the request
    /// rules, extra headers and blocked resource types all need one.
    fn intercepts(&self) -> bool {
        self.rules.intercepts() || !self.params.headers.is_empty() || !self.params.block_resource_types.is_empty()
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Want {
    pub screenshot: bool,
    pub html: bool,
    pub body: bool,
    pub pdf: bool,
}

/// A screenshot and what it shows.
#[derive(Debug)]
pub struct Shot {
    pub bytes: Vec<u8>,
    /// The page rectangle captured (CSS pixels from the document's top
    /// left); `None`: the viewport.
    pub clip: Option<Clip>,
    /// Elements hidden per `hideSelectors` entry.
    pub hidden: Vec<u64>,
}

/// The main document's response as the browser received it.
#[derive(Debug, Clone)]
pub struct MainResponse {
    pub request_id: String,
    pub url: String,
    pub status: u32,
    pub status_text: String,
    pub mime_type: String,
    pub headers: Map<String, Value>,
}

/// A request refused by the item's rules.
#[derive(Debug, Clone)]
pub struct Blocked {
    pub url: String,
    pub host: String,
    pub resource_type: String,
    pub reason: String,
    /// The main document itself (or a redirect of it).
    pub main: bool,
}

#[derive(Debug)]
pub struct PageOutcome {
    pub main: MainResponse,
    pub final_url: String,
    pub title: String,
    /// Navigation start until the wait condition was met.
    pub loaded_ms: u64,
    /// Navigation start until `waitFor` was met too (`loaded_ms` without one).
    pub ready_ms: u64,
    pub user_agent: String,
    pub blocked: Vec<Blocked>,
    pub failed_requests: Vec<Value>,
    pub page_errors: Vec<Value>,
    /// JavaScript dialogs the page opened, each answered at once.
    pub dialogs: Vec<Value>,
    pub screenshot: Option<Shot>,
    pub html: Option<String>,
    pub body: Option<Vec<u8>>,
    pub pdf: Option<Vec<u8>>,
}

#[derive(Debug)]
pub enum PageError {
    /// The budget ran out (transient).
    Timeout(String),
    /// The navigation failed: refused connection, DNS, reset, a crashed
    /// renderer... (transient).
    Navigation(String),
    /// The main document was refused by the request rules (terminal).
    Refused(String),
    /// A CDP call failed without the browser looking broken (transient).
    Cdp(String),
    /// The browser is gone or not answering (transient; it is replaced).
    Browser(String),
    /// A parameter the page cannot apply: a selector it cannot parse or
    /// that matches nothing (terminal; the reason names the parameter).
    Param(String),
}

fn classify(e: CdpError, what: &str) -> PageError {
    match e {
        CdpError::Closed => PageError::Browser(format!("{what}: {e}")),
        CdpError::Protocol(..) | CdpError::Decode(..) => PageError::Cdp(format!("{what}: {e}")),
    }
}

/// How long each step of an item took, logged at debug level
/// (`RUST_LOG=grid_server::browser=debug`) to see where an item's time goes.
struct Steps {
    last: Instant,
    took: Vec<(&'static str, u64)>,
}

impl Steps {
    fn new() -> Steps {
        Steps { last: Instant::now(), took: Vec::with_capacity(8) }
    }

    fn mark(&mut self, step: &'static str) {
        let now = Instant::now();
        self.took.push((step, (now - self.last).as_millis() as u64));
        self.last = now;
    }
}

impl std::fmt::Display for Steps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (step, ms)) in self.took.iter().enumerate() {
            write!(f, "{}{step}={ms}ms", if i == 0 { "" } else { " " })?;
        }
        Ok(())
    }
}

/// Chromium's print of the page as `pdf` options ask: the paper's portrait
/// sides and margins in inches, the page's own CSS page size ignored (the
/// options decide, as Puppeteer's do by default).
fn print_to_pdf(pdf: &params::PdfOptions) -> Page::PrintToPDF {
    let (width, height) = pdf.paper_inches;
    let [top, right, bottom, left] = pdf.margin_inches;
    Page::PrintToPDF {
        landscape: Some(pdf.landscape),
        display_header_footer: Some(false),
        print_background: Some(pdf.print_background),
        scale: Some(pdf.scale),
        paper_width: Some(width),
        paper_height: Some(height),
        margin_top: Some(top),
        margin_bottom: Some(bottom),
        margin_left: Some(left),
        margin_right: Some(right),
        page_ranges: None,
        header_template: None,
        footer_template: None,
        prefer_css_page_size: Some(false),
        transfer_mode: None,
        generate_tagged_pdf: None,
        generate_document_outline: None,
    }
}

/// The egress proxy's refusal of `url`'s host, if it refused it: a refused
/// CONNECT reaches the page only as a failed tunnel.
fn proxy_refusal(egress: Option<&EgressProxy>, url: &str) -> Option<String> {
    let host = url::Url::parse(url).ok()?.host_str()?.trim_matches(['[', ']']).to_string();
    let decision = egress?.decision_for(&host)?;
    (!decision.allowed).then_some(decision.reason)
}

/// Why the egress proxy could not carry a request to `url`'s host (the name
/// did not resolve, the connection was refused ...), if its latest
/// decision about the host says so.
fn failed_tunnel(egress: &EgressProxy, url: &str) -> Option<String> {
    let host = url::Url::parse(url).ok()?.host_str()?.trim_matches(['[', ']']).to_string();
    egress.decision_for(&host)?.failure
}

/// Runs one item's page in a fresh browser context, disposed afterwards.
pub async fn run(chromium: &Chromium, spec: &PageSpec) -> Result<PageOutcome, PageError> {
    let cdp = &chromium.process.cdp;
    let mut steps = Steps::new();
    // The item's rules at the network edge, and its upstream proxy behind
    // them: its context's own proxy.
    let egress = if spec.rules.intercepts() || spec.upstream.is_some() {
        // Bound inside the browser's sandbox, like the browser-wide proxy.
        let policy = crate::egress::routed(Arc::new(spec.rules.clone()), spec.upstream.clone());
        let proxy = chromium
            .process
            .listen()
            .and_then(|listener| EgressProxy::serve(listener, policy))
            .map_err(|e| PageError::Cdp(format!("starting the item's egress proxy: {e}")))?;
        Some(Arc::new(proxy))
    } else {
        None
    };
    let context_id = cdp
        .call(
            None,
            Target::CreateBrowserContext {
                dispose_on_detach: None,
                proxy_server: egress.as_ref().map(|p| format!("http://127.0.0.1:{}", p.port)),
                // Chromium sends loopback requests around a proxy unless told not to.
                proxy_bypass_list: egress.as_ref().map(|_| "<-loopback>".to_string()),
                origins_with_universal_network_access: None,
            },
        )
        .await
        .map_err(|e| classify(e, "Target.createBrowserContext"))?
        .browser_context_id;
    steps.mark("context");
    let result = open(chromium, spec, &context_id, egress, &mut steps).await;
    let dispose = cdp.call(None, Target::DisposeBrowserContext { browser_context_id: context_id });
    match tokio::time::timeout(DISPOSE_TIMEOUT, dispose).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::debug!(browser = %chromium.id, error = %e, "disposing a browser context failed"),
        Err(_) => tracing::warn!(browser = %chromium.id, "disposing a browser context took over {DISPOSE_TIMEOUT:?}"),
    }
    steps.mark("dispose");
    tracing::debug!(browser = %chromium.id, url = %spec.url, ok = result.is_ok(), "page steps: {steps}");
    result
}

async fn open(
    chromium: &Chromium,
    spec: &PageSpec,
    context_id: &str,
    egress: Option<Arc<EgressProxy>>,
    steps: &mut Steps,
) -> Result<PageOutcome, PageError> {
    let cdp = &chromium.process.cdp;
    let (width, height) = (spec.viewport.width, spec.viewport.height);
    let target_id = cdp
        .call(
            None,
            Target::CreateTarget {
                url: "about:blank".into(),
                left: None,
                top: None,
                width: Some(width),
                height: Some(height),
                window_state: None,
                browser_context_id: Some(context_id.to_string()),
                enable_begin_frame_control: None,
                new_window: None,
                background: None,
                for_tab: None,
                hidden: None,
            },
        )
        .await
        .map_err(|e| classify(e, "Target.createTarget"))?
        .target_id;
    steps.mark("target");
    let session = cdp
        .call(None, Target::AttachToTarget { target_id: target_id.clone(), flatten: Some(true) })
        .await
        .map_err(|e| classify(e, "Target.attachToTarget"))?
        .session_id;
    steps.mark("attach");
    let events = cdp.subscribe(&session);
    let mut page = PageDriver {
        cdp: cdp.clone(),
        session,
        context_id: context_id.to_string(),
        main_frame: target_id,
        events,
        rules: spec.rules.clone(),
        header_host: spec.host.clone(),
        headers: spec.params.headers.clone(),
        block: spec.params.block_resource_types.clone(),
        egress,
        seen: Seen::default(),
    };
    let result = page.drive(chromium, spec, steps).await;
    cdp.unsubscribe(&page.session);
    result
}

type Answer = Pin<Box<dyn Future<Output = Result<(), PageError>> + Send>>;

struct PageDriver {
    cdp: Connection,
    session: String,
    /// The item's own browser context.
    context_id: String,
    /// The page's target id is its main frame's id.
    main_frame: String,
    events: mpsc::UnboundedReceiver<Event>,
    rules: RequestRules,
    /// `headers` go only with requests to this host (the item URL's).
    header_host: String,
    headers: Vec<(String, String)>,
    block: Vec<params::ResourceType>,
    /// The item's egress proxy, when it has rules.
    egress: Option<Arc<EgressProxy>>,
    seen: Seen,
}

impl PageDriver {
    /// Sends a typed command on the page's session now; its answer, named.
    fn call<M: Method + Serialize>(&self, method: M) -> impl Future<Output = Result<M::ReturnObject, PageError>> {
        let answer = self.cdp.call(Some(&self.session), method);
        async move { answer.await.map_err(|e| classify(e, M::NAME)) }
    }

    /// Like [`PageDriver::call`], for commands whose answer is only success.
    fn command<M: Method + Serialize + 'static>(&self, method: M) -> Answer
    where
        M::ReturnObject: Send,
    {
        let answer = self.call(method);
        Box::pin(async move { answer.await.map(drop) })
    }

    /// One item's page, phase by phase: setup, navigate, wait until ready,
    /// collect; each phase's end is a step of the item's timing.
    async fn drive(
        &mut self,
        chromium: &Chromium,
        spec: &PageSpec,
        steps: &mut Steps,
    ) -> Result<PageOutcome, PageError> {
        self.setup(chromium, spec).await?;
        steps.mark("setup");
        // Navigate. Page.navigate answers once the main document's response
        // arrived (which may be never), so it races the budget.
        let started = Instant::now();
        let deadline = started + spec.timeout();
        let budget_ms = spec.timeout().as_millis();
        let loader = self.navigate(spec, deadline, budget_ms, steps).await.map_err(|e| {
            // A CONNECT the egress proxy could not carry reaches the page only as
            // a failed tunnel; its decision says why.
            match (e, failed_tunnel(self.egress.as_deref().unwrap_or(&chromium.process.egress), &spec.url)) {
                (PageError::Navigation(_), Some(why)) => PageError::Navigation(why),
                (e, _) => e,
            }
        })?;
        let (main, loaded_ms, ready_ms) = self.wait_ready(spec, &loader, started, deadline, budget_ms, steps).await?;
        self.collect(spec, main, loaded_ms, ready_ms, steps).await
    }

    /// Setup: the page's domains, its emulation, the item's cookies and
    /// interception, asked for in one burst the page answers in order.
    async fn setup(&mut self, chromium: &Chromium, spec: &PageSpec) -> Result<(), PageError> {
        let mut setup = vec![
            self.command(Page::Enable { enable_file_chooser_opened_event: None }),
            self.command(Page::SetLifecycleEventsEnabled { enabled: true }),
            self.command(Network::Enable {
                max_total_buffer_size: spec.want.body.then_some(BODY_BUFFERS.0 as u32),
                max_resource_buffer_size: spec.want.body.then_some(BODY_BUFFERS.1 as u32),
                max_post_data_size: None,
                report_direct_socket_traffic: None,
                enable_durable_messages: None,
            }),
            self.command(Runtime::Enable(None)),
        ];
        setup.extend(self.emulation(chromium, spec));
        if !spec.params.javascript_enabled {
            setup.push(self.command(Emulation::SetScriptExecutionDisabled { value: true }));
        }
        if !spec.params.cookies.is_empty() {
            // Set in the item's own context, which is disposed after the item.
            let cookies = cookies_json(&spec.params.cookies, &spec.url);
            let answer = self.cdp.send(
                None,
                "Storage.setCookies",
                json!({"cookies": cookies, "browserContextId": self.context_id}),
            );
            setup.push(Box::pin(async move {
                answer.await.map(drop).map_err(|e| match e {
                    CdpError::Protocol(_, message) => {
                        PageError::Param(format!("params.cookies: Chromium refused them: {message}"))
                    }
                    e => classify(e, "Storage.setCookies"),
                })
            }));
        }
        if !spec.context_cookies.is_empty() {
            let answer = self.cdp.send(
                None,
                "Storage.setCookies",
                json!({"cookies": spec.context_cookies, "browserContextId": self.context_id}),
            );
            setup.push(Box::pin(async move { answer.await.map(drop).map_err(|e| classify(e, "Storage.setCookies")) }));
        }
        if spec.intercepts() {
            let all = Fetch::RequestPattern { url_pattern: Some("*".into()), resource_Type: None, request_stage: None };
            setup.push(self.command(Fetch::Enable { patterns: Some(vec![all]), handle_auth_requests: None }));
        }
        futures_util::future::try_join_all(setup).await?;
        Ok(())
    }

    /// Navigates to the item's URL within the budget; answers the loader of
    /// the new main document, or how the navigation failed.
    async fn navigate(
        &mut self,
        spec: &PageSpec,
        deadline: Instant,
        budget_ms: u128,
        steps: &mut Steps,
    ) -> Result<String, PageError> {
        let navigate = self.call(Page::Navigate {
            url: spec.url.clone(),
            referrer: None,
            transition_Type: None,
            frame_id: None,
            referrer_policy: None,
        });
        let nav = match self.pump(navigate, deadline).await? {
            Some(answer) => answer?,
            None => {
                self.stop_loading();
                return Err(PageError::Timeout(format!("no response for the main document within {budget_ms} ms")));
            }
        };
        steps.mark("navigate");
        if let Some(error_text) = nav.error_text {
            if let Some(refused) = self.main_refused() {
                return Err(refused);
            }
            if let Some(refusal) = proxy_refusal(self.egress.as_deref(), &spec.url) {
                return Err(PageError::Refused(format!("main document {} refused: {refusal}", spec.url)));
            }
            return Err(PageError::Navigation(format!("navigation failed: {error_text}")));
        }
        if nav.is_download == Some(true) {
            return Err(PageError::Refused("the URL answers with a download, not a page".into()));
        }
        nav.loader_id.ok_or_else(|| PageError::Navigation("navigation did not start a new document".into()))
    }

    /// Waits within the budget for the item's condition (`waitUntil`, then
    /// `waitFor`) on the document `loader` loads; answers its main response
    /// and when it loaded and was ready (ms since `started`).
    async fn wait_ready(
        &mut self,
        spec: &PageSpec,
        loader: &str,
        started: Instant,
        deadline: Instant,
        budget_ms: u128,
        steps: &mut Steps,
    ) -> Result<(MainResponse, u64, u64), PageError> {
        // Wait for the condition within the budget.
        let needed: &[&str] = match spec.params.wait_until {
            WaitUntil::Load => &["load"],
            WaitUntil::NetworkIdle => &["load", "networkIdle"],
        };
        let reached =
            |seen: &Seen| needed.iter().all(|n| seen.lifecycle.iter().any(|(l, name)| l == loader && name == n));
        if !self.wait_for(reached, deadline).await? {
            let what =
                if spec.params.wait_until == WaitUntil::Load { "the load event" } else { "load and network idle" };
            self.stop_loading();
            return Err(PageError::Timeout(format!("page did not reach {what} within {budget_ms} ms")));
        }
        let loaded_ms = started.elapsed().as_millis() as u64;
        steps.mark("load");
        let main = self
            .seen
            .documents
            .get(loader)
            .cloned()
            .ok_or_else(|| PageError::Navigation("loaded without a main document response".into()))?;
        // The egress proxy's refusal loads as a 403 page of its own.
        if let Some(refused) = self.main_refused() {
            return Err(refused);
        }
        // Ready when loaded, unless `waitFor` asks for more: the same
        // instant then, not a second reading of the clock a millisecond on.
        let ready_ms = match &spec.params.wait_for {
            None => loaded_ms,
            Some(wait_for) => {
                self.wait_for_more(wait_for, deadline, budget_ms).await?;
                if let Some(refused) = self.main_refused() {
                    return Err(refused);
                }
                started.elapsed().as_millis() as u64
            }
        };
        steps.mark("ready");
        Ok((main, loaded_ms, ready_ms))
    }

    /// Collects what the item wants off the ready page: its facts and DOM,
    /// screenshot and body.
    async fn collect(
        &mut self,
        spec: &PageSpec,
        main: MainResponse,
        loaded_ms: u64,
        ready_ms: u64,
        steps: &mut Steps,
    ) -> Result<PageOutcome, PageError> {
        // Collect: facts and DOM, screenshot and body in one burst. The
        // item's watchdog (capture/scripts.rs) bounds this phase.
        let html = if spec.want.html { HTML_EXPRESSION } else { "null" };
        let facts = self.call(evaluate(format!("[location.href, document.title, navigator.userAgent, {html}]")));
        let screenshot = spec.want.screenshot.then(|| self.screenshot(&spec.params.screenshot, spec.viewport));
        let body = spec.want.body.then(|| self.call(Network::GetResponseBody { request_id: main.request_id.clone() }));
        let pdf = spec.want.pdf.then(|| self.call(print_to_pdf(&spec.params.pdf)));
        let far = Instant::now() + Duration::from_secs(24 * 3600);
        let collected = self
            .pump(
                async move {
                    let screenshot = async {
                        match screenshot {
                            Some(s) => s.await.map(Some),
                            None => Ok(None),
                        }
                    };
                    let body = async {
                        match body {
                            Some(b) => b.await.map(Some),
                            None => Ok(None),
                        }
                    };
                    let pdf = async {
                        match pdf {
                            Some(p) => p.await.map(Some),
                            None => Ok(None),
                        }
                    };
                    tokio::join!(facts, screenshot, body, pdf)
                },
                far,
            )
            .await?;
        let Some((facts, screenshot, body, pdf)) = collected else {
            return Err(PageError::Timeout("collecting the page's files took a day".into()));
        };
        steps.mark("collect");
        let facts = facts?;
        if let Some(ex) = facts.exception_details {
            return Err(PageError::Cdp(format!("reading the page: {}", ex.text)));
        }
        let values = facts.result.value.unwrap_or(Value::Null);
        let text = |i: usize| values.get(i).and_then(Value::as_str).map(str::to_string);
        let final_url = text(0).unwrap_or_else(|| main.url.clone());
        let html = if spec.want.html {
            Some(text(3).ok_or_else(|| PageError::Cdp("reading the DOM: no document".into()))?)
        } else {
            None
        };
        let body = match body? {
            Some(b) if b.base_64_encoded => Some(
                base64::prelude::BASE64_STANDARD
                    .decode(b.body)
                    .map_err(|e| PageError::Cdp(format!("response body: {e}")))?,
            ),
            Some(b) => Some(b.body.into_bytes()),
            None => None,
        };
        let pdf = match pdf? {
            Some(p) => Some(
                base64::prelude::BASE64_STANDARD.decode(p.data).map_err(|e| PageError::Cdp(format!("the PDF: {e}")))?,
            ),
            None => None,
        };
        self.list_proxy_refusals();
        Ok(PageOutcome {
            main,
            final_url,
            title: text(1).unwrap_or_default(),
            loaded_ms,
            ready_ms,
            user_agent: text(2).unwrap_or_default(),
            blocked: std::mem::take(&mut self.seen.blocked),
            failed_requests: std::mem::take(&mut self.seen.failed),
            page_errors: std::mem::take(&mut self.seen.errors),
            dialogs: std::mem::take(&mut self.seen.dialogs),
            screenshot: screenshot?,
            html,
            body,
            pdf,
        })
    }

    /// Awaits `fut` while handling the page's events; `None` at `deadline`.
    async fn pump<F: Future>(&mut self, fut: F, deadline: Instant) -> Result<Option<F::Output>, PageError> {
        tokio::pin!(fut);
        loop {
            tokio::select! {
                biased;
                out = &mut fut => return Ok(Some(out)),
                event = self.events.recv() => self.handle(event).await?,
                _ = tokio::time::sleep_until(deadline.into()) => return Ok(None),
            }
        }
    }

    /// Handles events until `reached` holds (true) or `deadline` (false).
    async fn wait_for(&mut self, reached: impl Fn(&Seen) -> bool, deadline: Instant) -> Result<bool, PageError> {
        while !reached(&self.seen) {
            tokio::select! {
                event = self.events.recv() => self.handle(event).await?,
                _ = tokio::time::sleep_until(deadline.into()) => return Ok(false),
            }
        }
        Ok(true)
    }

    /// The main document was refused, by interception or by the egress
    /// proxy (both are listed as blocked with `main`).
    fn main_refused(&self) -> Option<PageError> {
        let b = self.seen.blocked.iter().find(|b| b.main)?;
        Some(PageError::Refused(format!("main document {} refused: {}", b.url, b.reason)))
    }

    /// Lists what the egress proxy refused that interception did not.
    fn list_proxy_refusals(&mut self) {
        if let Some(egress) = &self.egress {
            self.seen.list_refusals(&egress.decisions());
        }
    }

    fn stop_loading(&self) {
        // Sent now; the answer does not matter.
        drop(self.cdp.send(Some(&self.session), "Page.stopLoading", json!({})));
    }

    /// Records what the outcome needs and answers paused requests. `None`
    /// (the connection closed) and a crashed renderer end the item.
    async fn handle(&mut self, event: Option<Event>) -> Result<(), PageError> {
        let Some(Event { method, params }) = event else {
            return Err(PageError::Browser("devtools connection closed".into()));
        };
        match method.as_str() {
            "Fetch.requestPaused" => self.decide(&params).await,
            "Page.javascriptDialogOpening" => {
                self.answer_dialog(&params);
                self.seen.record(&method, &params, &self.main_frame);
            }
            _ => self.seen.record(&method, &params, &self.main_frame),
        }
        match &self.seen.crashed {
            Some(why) => Err(PageError::Navigation(why.clone())),
            None => Ok(()),
        }
    }

    /// Answers a JavaScript dialog at once (`events::dialog_accepted`): an
    /// open dialog holds the page's script, its load event and every
    /// evaluation, so the item would wait out its budget.
    fn answer_dialog(&self, p: &Value) {
        let accept = super::events::dialog_accepted(p["type"].as_str().unwrap_or_default());
        // Sent now; the answer does not matter (a dialog the page closed
        // meanwhile is no error worth ending the item for).
        drop(self.cdp.send(Some(&self.session), "Page.handleJavaScriptDialog", json!({"accept": accept})));
    }

    /// Lets a paused request go on (with the item's `headers` when it goes
    /// to the item URL's host) or fails it (and lists it) by the item's
    /// blocked resource types and request rules.
    async fn decide(&mut self, p: &Value) {
        let url = p["request"]["url"].as_str().unwrap_or_default().to_string();
        let request_id = p["requestId"].clone();
        let resource_type = p["resourceType"].as_str().unwrap_or_default().to_string();
        let blocked_type = self.block.iter().find(|t| t.devtools_name() == resource_type);
        let refusal = match blocked_type {
            Some(t) => Err(format!("blockResourceTypes: {}", t.as_str())),
            None => self.rules.check(&url).await.map_err(|r| r.reason()),
        };
        let (method, params) = match refusal {
            Ok(()) => {
                let mut params = json!({"requestId": request_id});
                if !self.headers.is_empty()
                    && url::Url::parse(&url).is_ok_and(|u| super::hosts::host_of(&u) == self.header_host)
                {
                    params["headers"] = with_headers(&p["request"]["headers"], &self.headers);
                }
                ("Fetch.continueRequest", params)
            }
            Err(reason) => {
                let main = resource_type == "Document" && p["frameId"] == self.main_frame.as_str();
                self.seen.block(url, resource_type, reason, main);
                ("Fetch.failRequest", json!({"requestId": request_id, "errorReason": "BlockedByClient"}))
            }
        };
        // Sent now; the answer does not matter.
        drop(self.cdp.send(Some(&self.session), method, params));
    }

    /// `waitFor`, after the wait condition: the selector, then network
    /// quiet, then the delay, all before `deadline` (navigation start +
    /// `timeoutMs`). Running out of time is transient, like the load wait.
    async fn wait_for_more(&mut self, w: &WaitFor, deadline: Instant, budget_ms: u128) -> Result<(), PageError> {
        if let Some(selector) = &w.selector {
            let expression = format!(
                "(() => {{ try {{ return document.querySelector({}) !== null; }} catch (e) {{ return 'invalid'; }} }})()",
                js_string(selector)
            );
            loop {
                let look = self.call(evaluate(expression.clone()));
                let Some(answer) = self.pump(look, deadline).await? else {
                    return Err(PageError::Timeout(format!(
                        "params.waitFor.selector: no element matched {selector:?} within {budget_ms} ms"
                    )));
                };
                match answer?.result.value {
                    Some(Value::Bool(true)) => break,
                    Some(Value::String(_)) => {
                        return Err(PageError::Param(format!(
                            "params.waitFor.selector: {selector:?} is not a valid CSS selector"
                        )))
                    }
                    _ => {}
                }
                if self.pump(tokio::time::sleep(SELECTOR_POLL), deadline).await?.is_none() {
                    return Err(PageError::Timeout(format!(
                        "params.waitFor.selector: no element matched {selector:?} within {budget_ms} ms"
                    )));
                }
            }
        }
        if let Some(quiet_ms) = w.network_idle_ms {
            let quiet = Duration::from_millis(quiet_ms);
            let not_idle = || {
                PageError::Timeout(format!(
                    "params.waitFor.networkIdleMs: the page's network was not idle for {quiet_ms} ms within {budget_ms} ms"
                ))
            };
            loop {
                if !self.wait_for(|s| s.in_flight.is_empty(), deadline).await? {
                    return Err(not_idle());
                }
                let quiet_until = Instant::now() + quiet;
                if quiet_until > deadline {
                    return Err(not_idle());
                }
                let mark = self.seen.network_activity;
                // Quiet until then, or a request started or ended: look again.
                if !self.wait_for(|s| s.network_activity != mark, quiet_until).await? {
                    break;
                }
            }
        }
        if let Some(delay_ms) = w.delay_ms {
            let until = Instant::now() + Duration::from_millis(delay_ms);
            if until > deadline {
                return Err(PageError::Timeout(format!(
                    "params.waitFor.delayMs: {delay_ms} ms more did not fit in timeoutMs ({budget_ms} ms)"
                )));
            }
            self.pump(tokio::time::sleep_until(until.into()), deadline).await?;
        }
        Ok(())
    }

    /// The profile's page half (viewport, locale, time zone, user agent),
    /// with the item's `viewport` and `userAgent` in place of the profile's.
    fn emulation(&self, chromium: &Chromium, spec: &PageSpec) -> Vec<Answer> {
        let m = spec.manifest;
        let v = spec.viewport;
        let mut calls = vec![self.command(Emulation::SetDeviceMetricsOverride {
            width: v.width,
            height: v.height,
            device_scale_factor: v.device_scale_factor,
            mobile: v.mobile,
            scale: None,
            screen_width: Some(v.width),
            screen_height: Some(v.height),
            position_x: None,
            position_y: None,
            dont_set_visible_size: None,
            screen_orientation: None,
            viewport: None,
            display_feature: None,
            device_posture: None,
        })];
        if m.emulates_locale {
            calls.push(self.command(Emulation::SetLocaleOverride { locale: Some(m.locale.to_string()) }));
            calls.push(self.command(Emulation::SetTimezoneOverride { timezone_id: m.timezone.to_string() }));
        }
        if let Some(ua) = &spec.params.user_agent {
            // The tenant's string, without client hints of the profile's
            // browser: they would contradict it.
            calls.push(self.command(Network::SetUserAgentOverride {
                user_agent: ua.clone(),
                accept_language: m.accept_language.map(str::to_string),
                platform: None,
                user_agent_metadata: None,
            }));
        } else if m.user_agent == UserAgent::Desktop || m.accept_language.is_some() {
            let ua = m.user_agent_for(&chromium.process.version.user_agent);
            let full_version = chromium.process.version.product.split('/').nth(1).unwrap_or("0").to_string();
            let major = full_version.split('.').next().unwrap_or("0").to_string();
            let brand = |name: &str, v: &str| Emulation::UserAgentBrandVersion {
                brand: name.to_string(),
                version: v.to_string(),
            };
            let metadata = (m.user_agent == UserAgent::Desktop).then(|| Emulation::UserAgentMetadata {
                brands: Some(vec![brand("Chromium", &major), brand("Not=A?Brand", "24")]),
                full_version_list: Some(vec![brand("Chromium", &full_version), brand("Not=A?Brand", "24.0.0.0")]),
                full_version: None,
                platform: "Linux".into(),
                platform_version: String::new(),
                architecture: "x86".into(),
                model: String::new(),
                mobile: false,
                bitness: Some("64".into()),
                wow_64: Some(false),
                form_factors: None,
            });
            calls.push(self.command(Network::SetUserAgentOverride {
                user_agent: ua,
                accept_language: m.accept_language.map(str::to_string),
                platform: None,
                user_agent_metadata: metadata,
            }));
        }
        calls
    }

    /// The screenshot `shot` asks for: `hideSelectors` applied and the
    /// `selector` element's box read first (one evaluation, answered
    /// before the capture is sent), then the capture of the region.
    fn screenshot(
        &self,
        shot: &params::Screenshot,
        viewport: Viewport,
    ) -> impl Future<Output = Result<Shot, PageError>> {
        let prepare = (!shot.hide_selectors.is_empty() || matches!(shot.region, Region::Selector(_))).then(|| {
            let selector = match &shot.region {
                Region::Selector(s) => js_string(s),
                _ => "null".into(),
            };
            let hide: Vec<String> = shot.hide_selectors.iter().map(|s| js_string(s)).collect();
            self.call(evaluate(format!(
                "(() => {{ const hide = [{}]; const counts = []; \
                   for (let i = 0; i < hide.length; i++) {{ let els; \
                     try {{ els = document.querySelectorAll(hide[i]); }} catch (e) {{ return {{badHide: i}}; }} \
                     for (const el of els) el.style.setProperty('display', 'none', 'important'); \
                     counts.push(els.length); }} \
                   const sel = {selector}; if (sel === null) return {{counts}}; \
                   let el; try {{ el = document.querySelector(sel); }} catch (e) {{ return {{counts, badSelector: true}}; }} \
                   if (!el) return {{counts, box: null}}; \
                   const r = el.getBoundingClientRect(); \
                   return {{counts, box: [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]}}; }})()",
                hide.join(", ")
            )))
        });
        let metrics = (shot.region == Region::FullPage).then(|| self.call(Page::GetLayoutMetrics(None)));
        let cdp = self.cdp.clone();
        let session = self.session.clone();
        let shot = shot.clone();
        async move {
            let mut hidden = vec![];
            let mut element = None;
            if let Some(prepare) = prepare {
                let answer = prepare.await?;
                if let Some(ex) = answer.exception_details {
                    return Err(PageError::Cdp(format!("preparing the screenshot: {}", ex.text)));
                }
                let v = answer.result.value.unwrap_or(Value::Null);
                if let Some(i) = v["badHide"].as_u64() {
                    let s = shot.hide_selectors.get(i as usize).map(String::as_str).unwrap_or_default();
                    return Err(PageError::Param(format!(
                        "params.hideSelectors[{i}]: {s:?} is not a valid CSS selector"
                    )));
                }
                hidden =
                    v["counts"].as_array().map(|c| c.iter().filter_map(Value::as_u64).collect()).unwrap_or_default();
                if let Region::Selector(s) = &shot.region {
                    if v["badSelector"] == true {
                        return Err(PageError::Param(format!("params.selector: {s:?} is not a valid CSS selector")));
                    }
                    let b: Vec<f64> =
                        v["box"].as_array().map(|b| b.iter().filter_map(Value::as_f64).collect()).unwrap_or_default();
                    let [x, y, width, height] = b[..] else {
                        return Err(PageError::Param(format!("params.selector: no element matches {s:?}")));
                    };
                    if width < 1.0 || height < 1.0 {
                        return Err(PageError::Param(format!(
                            "params.selector: the element matching {s:?} has no size ({width} x {height}); it is not rendered"
                        )));
                    }
                    element = Some(Clip { x: x.max(0.0), y: y.max(0.0), width, height });
                }
            }
            let clip = match (&shot.region, metrics) {
                (Region::FullPage, Some(metrics)) => {
                    let size = metrics.await?.css_content_size;
                    Some(Clip { x: 0.0, y: 0.0, width: size.width, height: size.height })
                }
                (Region::Clip(c), _) => Some(*c),
                (Region::Selector(_), _) => element,
                _ => None,
            }
            .map(|c| bounded(c, viewport.device_scale_factor));
            let format = match shot.format {
                params::ImageFormat::Png => Page::CaptureScreenshotFormatOption::Png,
                params::ImageFormat::Jpeg => Page::CaptureScreenshotFormatOption::Jpeg,
                params::ImageFormat::Webp => Page::CaptureScreenshotFormatOption::Webp,
            };
            let captured = cdp
                .call(
                    Some(&session),
                    Page::CaptureScreenshot {
                        format: Some(format),
                        quality: shot.quality.map(u32::from),
                        clip: clip.map(|c| Page::Viewport {
                            x: c.x,
                            y: c.y,
                            width: c.width,
                            height: c.height,
                            scale: 1.0,
                        }),
                        from_surface: Some(true),
                        capture_beyond_viewport: clip.is_some().then_some(true),
                        optimize_for_speed: None,
                    },
                )
                .await
                .map_err(|e| classify(e, "Page.captureScreenshot"))?;
            let bytes = base64::prelude::BASE64_STANDARD
                .decode(captured.data)
                .map_err(|e| PageError::Cdp(format!("screenshot: {e}")))?;
            Ok(Shot { bytes, clip, hidden })
        }
    }
}

/// A region cut to what a screenshot may be: each side at most
/// [`params::MAX_CAPTURE_EXTENT`], at most [`params::MAX_SCREENSHOT_PIXELS`]
/// image pixels (the height gives way), at least one pixel.
fn bounded(c: Clip, device_scale_factor: f64) -> Clip {
    let width = c.width.clamp(1.0, params::MAX_CAPTURE_EXTENT);
    let pixels_per_css_row = width * device_scale_factor * device_scale_factor;
    let tallest = (params::MAX_SCREENSHOT_PIXELS / pixels_per_css_row).floor().min(params::MAX_CAPTURE_EXTENT);
    Clip { x: c.x, y: c.y, width, height: c.height.clamp(1.0, tallest.max(1.0)) }
}

/// A JavaScript string literal of `s` (JSON's, which JavaScript reads the same).
fn js_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// A quiet evaluation in the page's main world, by value.
fn evaluate(expression: String) -> Runtime::Evaluate {
    Runtime::Evaluate {
        expression,
        object_group: None,
        include_command_line_api: None,
        silent: Some(true),
        context_id: None,
        return_by_value: Some(true),
        generate_preview: None,
        user_gesture: None,
        await_promise: None,
        throw_on_side_effect: None,
        timeout: None,
        disable_breaks: None,
        repl_mode: None,
        allow_unsafe_eval_blocked_by_csp: None,
        unique_context_id: None,
        serialization_options: None,
    }
}

/// A paused request's headers with `extra` added, replacing any of the
/// same name (case-insensitive), as `Fetch.continueRequest` takes them.
fn with_headers(request: &Value, extra: &[(String, String)]) -> Value {
    let mut out: Vec<Value> = request
        .as_object()
        .map(|h| {
            h.iter()
                .filter(|(name, _)| !extra.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)))
                .map(|(name, value)| json!({"name": name, "value": value.as_str().unwrap_or_default()}))
                .collect()
        })
        .unwrap_or_default();
    out.extend(extra.iter().map(|(name, value)| json!({"name": name, "value": value})));
    Value::Array(out)
}

/// `Storage.setCookies` entries: a cookie without `domain` is a host-only
/// cookie of the item URL; every cookie's path defaults to `/`.
fn cookies_json(cookies: &[params::Cookie], url: &str) -> Vec<Value> {
    cookies
        .iter()
        .map(|c| {
            let mut v = json!({
                "name": c.name,
                "value": c.value,
                "path": c.path.as_deref().unwrap_or("/"),
                "secure": c.secure,
                "httpOnly": c.http_only,
            });
            match &c.domain {
                Some(domain) => v["domain"] = json!(domain),
                None => v["url"] = json!(url),
            }
            if let Some(same_site) = c.same_site {
                v["sameSite"] = json!(same_site.as_str());
            }
            v
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_headers_replace_same_named_ones() {
        let request = json!({"Accept": "*/*", "x-test": "old", "User-Agent": "UA"});
        let merged = with_headers(&request, &[("X-Test".into(), "new".into()), ("Authorization".into(), "b".into())]);
        let mut pairs: Vec<(String, String)> = merged
            .as_array()
            .unwrap()
            .iter()
            .map(|h| (h["name"].as_str().unwrap().to_string(), h["value"].as_str().unwrap().to_string()))
            .collect();
        pairs.sort();
        assert_eq!(
            pairs,
            [("Accept", "*/*"), ("Authorization", "b"), ("User-Agent", "UA"), ("X-Test", "new")]
                .map(|(a, b)| (a.to_string(), b.to_string()))
        );
    }

    #[test]
    fn regions_are_bounded_by_side_and_pixels() {
        let tall = bounded(Clip { x: 0.0, y: 0.0, width: 1366.0, height: 100_000.0 }, 1.0);
        assert_eq!((tall.width, tall.height), (1366.0, params::MAX_CAPTURE_EXTENT));
        let dense = bounded(Clip { x: 0.0, y: 0.0, width: 2000.0, height: 16_000.0 }, 2.0);
        assert_eq!(dense.height, (params::MAX_SCREENSHOT_PIXELS / 8000.0).floor());
        assert!(dense.width * dense.height * 4.0 <= params::MAX_SCREENSHOT_PIXELS);
        let empty = bounded(Clip { x: 5.0, y: 6.0, width: 0.0, height: 0.0 }, 1.0);
        assert_eq!((empty.x, empty.y, empty.width, empty.height), (5.0, 6.0, 1.0, 1.0));
    }

    #[test]
    fn cookies_are_host_only_unless_a_domain_is_given() {
        let c = |domain: Option<&str>| params::Cookie {
            name: "a".into(),
            value: "1".into(),
            domain: domain.map(str::to_string),
            path: None,
            secure: false,
            http_only: true,
            same_site: Some(params::SameSite::Lax),
        };
        let v = cookies_json(&[c(None), c(Some("example.com"))], "http://www.example.com/x/y");
        assert_eq!(v[0]["url"], json!("http://www.example.com/x/y"));
        assert_eq!(v[0].get("domain"), None);
        assert_eq!(v[0]["path"], json!("/"));
        assert_eq!(v[1]["domain"], json!("example.com"));
        assert_eq!(v[1].get("url"), None);
        assert_eq!((v[1]["httpOnly"].clone(), v[1]["sameSite"].clone()), (json!(true), json!("Lax")));
    }

    #[test]
    fn selectors_become_javascript_strings() {
        assert_eq!(js_string("a[title=\"x\"]\\n"), r#""a[title=\"x\"]\\n""#);
    }
}
