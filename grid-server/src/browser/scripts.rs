//! The browser scripts: `capture` (screenshot + html + meta),
//! `render-fetch` (html + meta) and `browser-fetch` (body + meta).
//!
//! Failure classes follow the `fetch` script: bad params and a main
//! document refused by the private-network guard are terminal; timeouts,
//! failed navigations, HTTP 5xx/429 and browser trouble are transient.
//! An item whose page does not finish within its budget plus
//! [`COLLECT_ALLOWANCE`] is taken as a hung browser: the browser is killed
//! (failing every item on it transiently) and replaced.

use std::sync::Arc;
use std::time::{Duration, Instant};

use grid_core::catalog::{ArtifactKind, Script};
use grid_core::item::Failure;
use grid_core::validate::params;
use serde_json::{json, Value};
use url::Url;

use super::hosts::{host_of, RequestRules};
use super::page::{self, PageError, PageOutcome, PageSpec, Want};
use super::pool::BrowserPool;
use super::profiles::{manifest, manifest_sha256};
use crate::capture::files::FileContent;
use crate::capture::guard;
use crate::ids::{now, sha256_hex};
use crate::store::items::ItemRow;

/// Time an item may take beyond its `timeoutMs` for setting up the page and
/// reading screenshot, DOM and body, before its browser counts as hung.
pub const COLLECT_ALLOWANCE: Duration = Duration::from_secs(30);

pub async fn run(pool: &Arc<BrowserPool>, row: &ItemRow) -> Result<Vec<FileContent>, Failure> {
    let script = row.script;
    let p = params::browser(script, &row.params).map_err(Failure::Terminal)?;
    let url = Url::parse(&row.url).map_err(|e| Failure::Terminal(format!("url: {e}")))?;
    let guard_private = !pool.config.allow_private_networks;
    if guard_private {
        guard::check_literal_host(&url).map_err(|r| Failure::Terminal(r.to_string()))?;
    }
    let m = manifest(row.profile);
    let spec = PageSpec {
        url: row.url.clone(),
        manifest: m,
        wait_until: p.wait_until,
        timeout: Duration::from_millis(p.timeout_ms),
        rules: RequestRules { allowed_hosts: p.allowed_hosts.clone().map(|a| (host_of(&url), a)), guard_private },
        want: Want {
            screenshot: script == Script::Capture,
            full_page: p.full_page,
            html: matches!(script, Script::Capture | Script::RenderFetch),
            body: script == Script::BrowserFetch,
        },
    };
    let started = Instant::now();
    let fetched_at = now();
    let lease = pool.acquire(&row.account_id).await.map_err(Failure::Transient)?;
    let chromium = lease.chromium.clone();
    let browser_id = chromium.id.clone();
    let product = chromium.process.version.product.clone();
    let hard_limit = spec.timeout + COLLECT_ALLOWANCE;
    let outcome = match tokio::time::timeout(hard_limit, page::run(&chromium, &spec)).await {
        Ok(r) => r,
        Err(_) => {
            lease.chromium.condemn("an item exceeded its budget by the collect allowance");
            return Err(Failure::Transient(format!(
                "browser {browser_id} did not finish the page within {} ms; it was replaced",
                hard_limit.as_millis()
            )));
        }
    };
    let out = match outcome {
        Ok(o) => o,
        Err(PageError::Refused(reason)) => return Err(Failure::Terminal(reason)),
        Err(PageError::Timeout(reason) | PageError::Navigation(reason) | PageError::Cdp(reason)) => {
            return Err(Failure::Transient(reason))
        }
        Err(PageError::Browser(reason)) => {
            lease.chromium.condemn(&reason);
            return Err(Failure::Transient(format!("browser {browser_id} failed: {reason}")));
        }
    };
    drop(lease);
    if out.main.status >= 500 || out.main.status == 429 {
        return Err(Failure::Transient(format!("target answered HTTP {}", out.main.status)));
    }
    Ok(files(row, &p, out, Meta { started, fetched_at, browser_id, product }))
}

struct Meta {
    started: Instant,
    fetched_at: grid_core::time::Millis,
    browser_id: String,
    product: String,
}

/// The item's files; meta last.
fn files(row: &ItemRow, p: &params::BrowserParams, out: PageOutcome, info: Meta) -> Vec<FileContent> {
    let m = manifest(row.profile);
    let content_type = out
        .main
        .headers
        .get("content-type")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| out.main.mime_type.clone());
    let mut files = vec![];
    let mut described = serde_json::Map::new();
    let mut add = |kind: ArtifactKind, content_type: String, bytes: Vec<u8>, extra: Value| {
        let mut d = json!({"byteLength": bytes.len(), "sha256": sha256_hex(&bytes), "contentType": content_type});
        if let (Some(d), Some(extra)) = (d.as_object_mut(), extra.as_object()) {
            d.extend(extra.clone());
        }
        described.insert(kind.as_str().to_string(), d);
        files.push(FileContent { kind, content_type, bytes });
    };
    if let Some(png) = out.screenshot {
        let size = png_size(&png).map(|(w, h)| json!({"width": w, "height": h})).unwrap_or(json!({}));
        add(ArtifactKind::Screenshot, "image/png".into(), png, size);
    }
    if let Some(html) = out.html {
        add(ArtifactKind::Html, ArtifactKind::Html.default_content_type().into(), html.into_bytes(), json!({}));
    }
    let mut body_facts = json!({});
    if let Some(body) = out.body {
        body_facts = json!({"byteLength": body.len(), "sha256": sha256_hex(&body)});
        add(ArtifactKind::Body, content_type.clone(), body, json!({}));
    }
    let blocked: Vec<Value> = out
        .blocked
        .iter()
        .map(|b| json!({"url": b.url, "host": b.host, "resourceType": b.resource_type, "reason": b.reason}))
        .collect();
    let (w, h) = m.viewport;
    let mut meta = json!({
        "outcome": "success",
        "script": row.script.as_str(),
        "profileId": row.profile.as_str(),
        "url": row.url,
        "finalUrl": out.final_url,
        "status": out.main.status,
        "statusText": out.main.status_text,
        "contentType": content_type,
        "headers": out.main.headers,
        "title": out.title,
        "waitUntil": p.wait_until.as_str(),
        "timeoutMs": p.timeout_ms,
        "loadedMs": out.loaded_ms,
        "allowedHosts": p.allowed_hosts,
        "blockedRequests": blocked,
        "failedRequests": out.failed_requests,
        "pageErrors": out.page_errors,
        "browser": {"product": info.product, "userAgent": out.user_agent, "instance": info.browser_id},
        "profile": {
            "id": row.profile.as_str(),
            "manifestSha256": manifest_sha256(m),
            "locale": m.locale,
            "timezone": m.timezone,
            "viewport": {"width": w, "height": h, "deviceScaleFactor": m.device_scale_factor},
        },
        "files": described,
        "fetchedAt": info.fetched_at.to_iso(),
        "durationMs": info.started.elapsed().as_millis() as u64,
        "attempt": row.item.attempts_made + 1,
    });
    if let (Some(meta), Some(extra)) = (meta.as_object_mut(), body_facts.as_object()) {
        meta.extend(extra.clone());
    }
    files.push(FileContent::meta(&meta));
    files
}

/// Width and height from a PNG's IHDR chunk.
pub fn png_size(png: &[u8]) -> Option<(u32, u32)> {
    if png.len() < 24 || &png[..8] != b"\x89PNG\r\n\x1a\n" || &png[12..16] != b"IHDR" {
        return None;
    }
    Some((u32::from_be_bytes(png[16..20].try_into().ok()?), u32::from_be_bytes(png[20..24].try_into().ok()?)))
}
