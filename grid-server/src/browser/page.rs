//! The page driver: one item on one browser, synchronous (it runs on a
//! blocking thread; headless_chrome's API is blocking).
//!
//! Steps: fresh browser context and page → profile overrides → request
//! rules (CDP `Fetch` interception) → navigate → wait for `load` (and
//! `networkIdle`) of the navigation's loader within the budget → read what
//! the script wants (screenshot, DOM, main document body) → dispose the
//! context. Every page-side fact worth keeping (main response, blocked and
//! failed requests, uncaught exceptions) is gathered from CDP events.

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use grid_core::validate::params::WaitUntil;
use headless_chrome::browser::tab::{RequestPausedDecision, Tab};
use headless_chrome::browser::transport::ConnectionClosed;
use headless_chrome::protocol::cdp::types::Event;
use headless_chrome::protocol::cdp::{Emulation, Fetch, Network, Page, Runtime, Target};
use serde_json::{json, Map, Value};

use super::hosts::{host_of, RequestRules};
use super::pool::Chromium;
use super::profiles::{Manifest, UserAgent};

/// Full-page screenshots stop at this height (CSS pixels).
pub const MAX_FULL_PAGE_HEIGHT: f64 = 16_384.0;
/// Most entries kept per list in meta (blocked/failed requests, errors).
const MAX_LISTED: usize = 200;

/// What one item asks of its page.
#[derive(Debug, Clone)]
pub struct PageSpec {
    pub url: String,
    pub manifest: &'static Manifest,
    pub wait_until: WaitUntil,
    /// From navigation start until the wait condition is met.
    pub timeout: Duration,
    pub rules: RequestRules,
    pub want: Want,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Want {
    pub screenshot: bool,
    pub full_page: bool,
    pub html: bool,
    pub body: bool,
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
    pub user_agent: String,
    pub blocked: Vec<Blocked>,
    pub failed_requests: Vec<Value>,
    pub page_errors: Vec<Value>,
    pub screenshot: Option<Vec<u8>>,
    pub html: Option<String>,
    pub body: Option<Vec<u8>>,
}

#[derive(Debug)]
pub enum PageError {
    /// The budget ran out (transient).
    Timeout(String),
    /// The navigation failed: refused connection, DNS, reset... (transient).
    Navigation(String),
    /// The main document was refused by the request rules (terminal).
    Refused(String),
    /// A CDP call failed without the browser looking broken (transient).
    Cdp(String),
    /// The browser is gone or not answering (transient; it is replaced).
    Browser(String),
}

/// Facts gathered from the page's events.
#[derive(Default)]
struct Seen {
    /// Lifecycle events of the main frame: (loaderId, name).
    lifecycle: Vec<(String, String)>,
    /// Main-frame document responses by loaderId.
    documents: HashMap<String, MainResponse>,
    /// Request URLs by requestId (to name failed requests).
    requests: HashMap<String, String>,
    failed: Vec<Value>,
    errors: Vec<Value>,
    blocked: Vec<Blocked>,
}

type Shared = Arc<(Mutex<Seen>, Condvar)>;

/// Disposes the item's browser context (closing its page) however the
/// item ends.
struct ContextGuard<'a> {
    chromium: &'a Chromium,
    context_id: String,
}

impl Drop for ContextGuard<'_> {
    fn drop(&mut self) {
        let id = self.context_id.clone();
        if let Err(e) = self.chromium.side.call_method_on_browser(Target::DisposeBrowserContext { browser_context_id: id }) {
            tracing::debug!(browser = %self.chromium.id, error = %e, "disposing a browser context failed");
        }
    }
}

fn classify(e: anyhow::Error, what: &str) -> PageError {
    if e.downcast_ref::<ConnectionClosed>().is_some() || e.downcast_ref::<headless_chrome::util::Timeout>().is_some() {
        PageError::Browser(format!("{what}: {e}"))
    } else {
        PageError::Cdp(format!("{what}: {e}"))
    }
}

pub fn run(chromium: &Chromium, spec: &PageSpec) -> Result<PageOutcome, PageError> {
    let context_id = chromium
        .side
        .call_method_on_browser(Target::CreateBrowserContext {
            dispose_on_detach: None,
            proxy_server: None,
            proxy_bypass_list: None,
            origins_with_universal_network_access: None,
        })
        .map_err(|e| classify(e, "Target.createBrowserContext"))?
        .browser_context_id;
    let _guard = ContextGuard { chromium, context_id: context_id.clone() };
    let (width, height) = spec.manifest.viewport;
    let target_id = chromium
        .side
        .call_method_on_browser(Target::CreateTarget {
            url: "about:blank".into(),
            left: None,
            top: None,
            width: Some(width),
            height: Some(height),
            window_state: None,
            browser_context_id: Some(context_id),
            enable_begin_frame_control: None,
            new_window: None,
            background: None,
            for_tab: None,
            hidden: None,
        })
        .map_err(|e| classify(e, "Target.createTarget"))?
        .target_id;
    // headless_chrome attaches to the new page on its event thread.
    let tab: Arc<Tab> = headless_chrome::util::Wait::new(Duration::from_secs(15), Duration::from_millis(5))
        .until(|| chromium.browser.get_tabs().lock().ok()?.iter().find(|t| *t.get_target_id() == target_id).cloned())
        .map_err(|_| PageError::Browser("the new page did not attach within 15 s".into()))?;
    let shared: Shared = Arc::default();
    let listener = tab
        .add_event_listener(Arc::new(listen(shared.clone(), target_id.clone())))
        .map_err(|e| classify(e, "listener"))?;
    let result = drive(chromium, spec, &tab, &target_id, &shared);
    let _ = tab.remove_event_listener(&listener);
    result
}

/// Records the events the outcome needs; runs on the page's event thread.
fn listen(shared: Shared, main_frame: String) -> impl Fn(&Event) + Send + Sync {
    move |event: &Event| {
        let (lock, changed) = &*shared;
        let Ok(mut seen) = lock.lock() else { return };
        match event {
            Event::PageLifecycleEvent(e) if e.params.frame_id == main_frame => {
                seen.lifecycle.push((e.params.loader_id.clone(), e.params.name.clone()));
            }
            Event::NetworkRequestWillBeSent(e) => {
                if seen.requests.len() < 10_000 {
                    seen.requests.insert(e.params.request_id.clone(), e.params.request.url.clone());
                }
            }
            Event::NetworkResponseReceived(e)
                if matches!(e.params.Type, Network::ResourceType::Document)
                    && e.params.frame_id.as_deref() == Some(main_frame.as_str()) =>
            {
                let r = &e.params.response;
                let headers = match serde_json::to_value(&r.headers) {
                    Ok(Value::Object(m)) => m,
                    _ => Map::new(),
                };
                let headers = headers.into_iter().map(|(k, v)| (k.to_ascii_lowercase(), v)).collect();
                seen.documents.insert(
                    e.params.loader_id.clone(),
                    MainResponse {
                        request_id: e.params.request_id.clone(),
                        url: r.url.clone(),
                        status: r.status,
                        status_text: r.status_text.clone(),
                        mime_type: r.mime_type.clone(),
                        headers,
                    },
                );
            }
            Event::NetworkLoadingFailed(e) => {
                let url = seen.requests.get(&e.params.request_id).cloned().unwrap_or_default();
                // Requests refused by the rules are listed as blocked instead.
                let refused = e.params.error_text.contains("ERR_BLOCKED_BY_CLIENT") && seen.blocked.iter().any(|b| b.url == url);
                if !refused && !e.params.canceled.unwrap_or(false) && seen.failed.len() < MAX_LISTED {
                    seen.failed.push(json!({"url": url, "resourceType": format!("{:?}", e.params.Type), "error": e.params.error_text}));
                }
            }
            Event::RuntimeExceptionThrown(e) if seen.errors.len() < MAX_LISTED => {
                let d = &e.params.exception_details;
                let message = d
                    .exception
                    .as_ref()
                    .and_then(|x| x.description.clone())
                    .unwrap_or_else(|| d.text.clone());
                seen.errors.push(json!({
                    "message": message.lines().next().unwrap_or(""),
                    "url": d.url,
                    "line": d.line_number + 1,
                    "column": d.column_number + 1,
                }));
            }
            _ => return,
        }
        changed.notify_all();
    }
}

fn drive(chromium: &Chromium, spec: &PageSpec, tab: &Arc<Tab>, main_frame: &str, shared: &Shared) -> Result<PageOutcome, PageError> {
    let m = spec.manifest;
    let buffer = if spec.want.body { Some(64 * 1024 * 1024) } else { None };
    tab.call_method(Network::Enable {
        max_total_buffer_size: buffer,
        max_resource_buffer_size: buffer.map(|b| b / 2),
        max_post_data_size: None,
        report_direct_socket_traffic: None,
        enable_durable_messages: None,
    })
    .map_err(|e| classify(e, "Network.enable"))?;
    tab.call_method(Runtime::Enable(None)).map_err(|e| classify(e, "Runtime.enable"))?;
    emulate(chromium, m, tab)?;
    if spec.rules.intercepts() {
        let rules = spec.rules.clone();
        let shared = shared.clone();
        let main_frame = main_frame.to_string();
        tab.enable_request_interception(Arc::new(move |_transport, _session, paused: Fetch::events::RequestPausedEvent| {
            let p = paused.params;
            match rules.check(&p.request.url) {
                Ok(()) => RequestPausedDecision::Continue(None),
                Err(refusal) => {
                    let host = url::Url::parse(&p.request.url).map(|u| host_of(&u)).unwrap_or_default();
                    let is_document = matches!(p.resource_Type, Network::ResourceType::Document);
                    if let Ok(mut seen) = shared.0.lock() {
                        if seen.blocked.len() < MAX_LISTED {
                            seen.blocked.push(Blocked {
                                url: p.request.url.clone(),
                                host,
                                resource_type: format!("{:?}", p.resource_Type),
                                reason: refusal.reason(),
                                main: is_document && p.frame_id == main_frame,
                            });
                        }
                    }
                    RequestPausedDecision::Fail(Fetch::FailRequest {
                        request_id: p.request_id,
                        error_reason: Network::ErrorReason::BlockedByClient,
                    })
                }
            }
        }))
        .map_err(|e| classify(e, "request interception"))?;
        let all = Fetch::RequestPattern { url_pattern: Some("*".into()), resource_Type: None, request_stage: None };
        tab.enable_fetch(Some(&[all]), None).map_err(|e| classify(e, "Fetch.enable"))?;
    }

    // Navigate on a helper thread: Page.navigate answers only once the main
    // document's response arrived, which may be never.
    let started = Instant::now();
    let deadline = started + spec.timeout;
    let budget_ms = spec.timeout.as_millis();
    let (tx, rx) = mpsc::channel();
    let nav_tab = tab.clone();
    let url = spec.url.clone();
    std::thread::Builder::new()
        .name("page-navigate".into())
        .spawn(move || {
            let _ = tx.send(nav_tab.call_method(Page::Navigate {
                url,
                referrer: None,
                transition_Type: None,
                frame_id: None,
                referrer_policy: None,
            }));
        })
        .map_err(|e| PageError::Cdp(format!("navigation thread: {e}")))?;
    let nav = match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        Ok(r) => r.map_err(|e| classify(e, "Page.navigate"))?,
        Err(_) => {
            let _ = tab.call_method(Page::StopLoading(None));
            return Err(PageError::Timeout(format!("no response for the main document within {budget_ms} ms")));
        }
    };
    if let Some(error_text) = nav.error_text {
        let seen = shared.0.lock().map_err(|_| PageError::Cdp("poisoned".into()))?;
        if let Some(b) = seen.blocked.iter().find(|b| b.main) {
            return Err(PageError::Refused(format!("main document {} refused: {}", b.url, b.reason)));
        }
        return Err(PageError::Navigation(format!("navigation failed: {error_text}")));
    }
    if nav.is_download == Some(true) {
        return Err(PageError::Refused("the URL answers with a download, not a page".into()));
    }
    let loader = nav.loader_id.ok_or_else(|| PageError::Navigation("navigation did not start a new document".into()))?;

    // Wait for the condition within the budget.
    let needed: &[&str] = match spec.wait_until {
        WaitUntil::Load => &["load"],
        WaitUntil::NetworkIdle => &["load", "networkIdle"],
    };
    let (lock, changed) = &**shared;
    let mut seen = lock.lock().map_err(|_| PageError::Cdp("poisoned".into()))?;
    loop {
        let done = needed.iter().all(|n| seen.lifecycle.iter().any(|(l, name)| *l == loader && name == n));
        if done {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let what = if spec.wait_until == WaitUntil::Load { "the load event" } else { "load and network idle" };
            drop(seen);
            let _ = tab.call_method(Page::StopLoading(None));
            return Err(PageError::Timeout(format!("page did not reach {what} within {budget_ms} ms")));
        }
        seen = changed.wait_timeout(seen, left).map_err(|_| PageError::Cdp("poisoned".into()))?.0;
    }
    let loaded_ms = started.elapsed().as_millis() as u64;
    let main = seen
        .documents
        .get(&loader)
        .cloned()
        .ok_or_else(|| PageError::Navigation("loaded without a main document response".into()))?;
    drop(seen);

    let facts = tab
        .evaluate("JSON.stringify([location.href, document.title, navigator.userAgent])", false)
        .map_err(|e| classify(e, "reading the page"))?;
    let (final_url, title, user_agent) = facts
        .value
        .as_ref()
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str::<(String, String, String)>(s).ok())
        .unwrap_or_else(|| (main.url.clone(), String::new(), String::new()));

    let html = if spec.want.html { Some(tab.get_content().map_err(|e| classify(e, "reading the DOM"))?) } else { None };
    let screenshot = if spec.want.screenshot { Some(screenshot(tab, spec.want.full_page)?) } else { None };
    let body = if spec.want.body {
        let b = tab
            .call_method(Network::GetResponseBody { request_id: main.request_id.clone() })
            .map_err(|e| classify(e, "Network.getResponseBody"))?;
        Some(if b.base_64_encoded {
            base64::prelude::BASE64_STANDARD.decode(b.body).map_err(|e| PageError::Cdp(format!("response body: {e}")))?
        } else {
            b.body.into_bytes()
        })
    } else {
        None
    };
    let seen = lock.lock().map_err(|_| PageError::Cdp("poisoned".into()))?;
    Ok(PageOutcome {
        main,
        final_url,
        title,
        loaded_ms,
        user_agent,
        blocked: seen.blocked.clone(),
        failed_requests: seen.failed.clone(),
        page_errors: seen.errors.clone(),
        screenshot,
        html,
        body,
    })
}

/// The profile's page half: viewport, locale, time zone, user agent.
fn emulate(chromium: &Chromium, m: &Manifest, tab: &Tab) -> Result<(), PageError> {
    let (width, height) = m.viewport;
    tab.call_method(Emulation::SetDeviceMetricsOverride {
        width,
        height,
        device_scale_factor: m.device_scale_factor,
        mobile: false,
        scale: None,
        screen_width: Some(width),
        screen_height: Some(height),
        position_x: None,
        position_y: None,
        dont_set_visible_size: None,
        screen_orientation: None,
        viewport: None,
        display_feature: None,
        device_posture: None,
    })
    .map_err(|e| classify(e, "Emulation.setDeviceMetricsOverride"))?;
    if m.emulates_locale {
        tab.call_method(Emulation::SetLocaleOverride { locale: Some(m.locale.to_string()) })
            .map_err(|e| classify(e, "Emulation.setLocaleOverride"))?;
        tab.call_method(Emulation::SetTimezoneOverride { timezone_id: m.timezone.to_string() })
            .map_err(|e| classify(e, "Emulation.setTimezoneOverride"))?;
    }
    if m.user_agent == UserAgent::Desktop || m.accept_language.is_some() {
        let ua = m.user_agent_for(&chromium.user_agent);
        let full_version = chromium.product.split('/').nth(1).unwrap_or("0").to_string();
        let major = full_version.split('.').next().unwrap_or("0").to_string();
        let brand = |name: &str, v: &str| Emulation::UserAgentBrandVersion { brand: name.to_string(), version: v.to_string() };
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
        tab.call_method(Network::SetUserAgentOverride {
            user_agent: ua,
            accept_language: m.accept_language.map(str::to_string),
            platform: None,
            user_agent_metadata: metadata,
        })
        .map_err(|e| classify(e, "Network.setUserAgentOverride"))?;
    }
    Ok(())
}

fn screenshot(tab: &Tab, full_page: bool) -> Result<Vec<u8>, PageError> {
    let clip = if full_page {
        let metrics = tab.call_method(Page::GetLayoutMetrics(None)).map_err(|e| classify(e, "Page.getLayoutMetrics"))?;
        let size = metrics.css_content_size;
        Some(Page::Viewport {
            x: 0.0,
            y: 0.0,
            width: size.width.max(1.0),
            height: size.height.clamp(1.0, MAX_FULL_PAGE_HEIGHT),
            scale: 1.0,
        })
    } else {
        None
    };
    let shot = tab
        .call_method(Page::CaptureScreenshot {
            format: Some(Page::CaptureScreenshotFormatOption::Png),
            quality: None,
            clip,
            from_surface: Some(true),
            capture_beyond_viewport: full_page.then_some(true),
            optimize_for_speed: None,
        })
        .map_err(|e| classify(e, "Page.captureScreenshot"))?;
    base64::prelude::BASE64_STANDARD.decode(shot.data).map_err(|e| PageError::Cdp(format!("screenshot: {e}")))
}
