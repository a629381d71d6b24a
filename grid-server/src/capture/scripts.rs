//! The browser scripts: `capture` (screenshot + html + meta),
//! `render-fetch` (html + meta) and `browser-fetch` (body + meta), run for
//! a capture item on a page of the browser pool (`crate::browser`).
//!
//! Failure classes follow the `fetch` script: bad params and a main
//! document refused by the private-network guard are terminal; timeouts,
//! failed navigations, HTTP 5xx/429 and browser trouble are transient.
//! An item whose page does not finish within its budget plus
//! [`COLLECT_ALLOWANCE`] is taken as a hung browser: the browser is killed
//! (failing every item on it transiently) and replaced.

use std::sync::Arc;
use std::time::{Duration, Instant};

use grid_core::catalog::{ArtifactKind, Needs, Script};
use grid_core::item::Failure;
use grid_core::validate::params::{self, Region};
use serde_json::{json, Value};
use url::Url;

use super::files::FileContent;
use super::guard;
use crate::browser::hosts::{host_of, RequestRules};
use crate::browser::page::{self, PageError, PageOutcome, PageSpec, Want};
use crate::browser::pool::BrowserPool;
use crate::browser::profiles::{manifest, manifest_sha256};
use crate::ids::{now, sha256_hex};
use crate::store::items::ItemRow;
use crate::upstream::Upstream;

/// Time an item may take beyond its `timeoutMs` for setting up the page and
/// reading screenshot, DOM and body, before its browser counts as hung.
pub const COLLECT_ALLOWANCE: Duration = Duration::from_secs(30);

/// `context_cookies`: a signed-in capture's context's cookies (as
/// `Storage.getCookies` gave them); empty for the others.
pub async fn run(
    pool: &Arc<BrowserPool>,
    row: &ItemRow,
    upstream: Option<Upstream>,
    context_cookies: &[serde_json::Value],
) -> Result<Vec<FileContent>, Failure> {
    let script = row.script;
    let p = params::browser(script, &row.params).map_err(Failure::Terminal)?;
    let url = Url::parse(&row.url).map_err(|e| Failure::Terminal(format!("url: {e}")))?;
    let guard_private = !pool.config.allow_private_networks;
    if guard_private {
        guard::check_literal_host(&url).map_err(|r| Failure::Terminal(r.to_string()))?;
    }
    let host = host_of(&url);
    p.check_for_host(&host).map_err(Failure::Terminal)?;
    let m = manifest(row.profile);
    let spec = PageSpec {
        url: row.url.clone(),
        host: host.clone(),
        manifest: m,
        viewport: p.viewport.unwrap_or_else(|| m.page_viewport()),
        rules: RequestRules { allowed_hosts: p.allowed_hosts.clone().map(|a| (host, a)), guard_private },
        want: want(script),
        params: p.clone(),
        context_cookies: context_cookies.iter().map(grid_core::cookies::set_param).collect(),
        upstream,
    };
    let started = Instant::now();
    let fetched_at = now();
    let lease = pool.acquire(&row.account_id, m.engine).await.map_err(Failure::Transient)?;
    let chromium = lease.chromium.clone();
    let browser_id = chromium.id.clone();
    let product = chromium.process.version.product.clone();
    let hard_limit = spec.timeout() + pool.config.collect_allowance;
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
        Err(PageError::Refused(reason) | PageError::Param(reason)) => return Err(Failure::Terminal(reason)),
        Err(PageError::Timeout(reason) | PageError::Navigation(reason) | PageError::Cdp(reason)) => {
            return Err(Failure::Transient(reason))
        }
        Err(PageError::Browser(reason)) => {
            lease.chromium.condemn(&reason);
            return Err(Failure::Transient(format!("browser {browser_id} failed: {reason}")));
        }
    };
    drop(lease);
    if let Some(why) = egress_failure(&out.main.headers) {
        return Err(Failure::Transient(why));
    }
    if out.main.status >= 500 || out.main.status == 429 {
        return Err(Failure::Transient(format!("target answered HTTP {}", out.main.status)));
    }
    Ok(files(row, &spec, out, Meta { started, fetched_at, browser_id, product }))
}

/// The egress proxy's own failure, when the main document is its answer
/// (marked `x-grid-egress: failed`, a mark it strips from every other
/// answer): the reason it gives, not the status it answered with.
fn egress_failure(headers: &serde_json::Map<String, Value>) -> Option<String> {
    let mark = headers.get(crate::egress::REFUSED_HEADER)?.as_str()?;
    (mark == "failed").then(|| {
        let why = headers.get(crate::egress::REASON_HEADER).and_then(Value::as_str);
        why.unwrap_or("the grid's egress proxy could not reach the target").to_string()
    })
}

/// What the page is read for: the files the script's row (`Script::row`)
/// publishes.
fn want(script: Script) -> Want {
    let row = script.row();
    let reads = |kind| row.publishes.contains(&kind);
    match row.needs {
        Needs::Browser => Want {
            screenshot: reads(ArtifactKind::Screenshot),
            html: reads(ArtifactKind::Html),
            body: reads(ArtifactKind::Body),
            pdf: reads(ArtifactKind::Pdf),
        },
        // Not run here (capture/fetch.rs runs it); nothing to read.
        Needs::Http => Want::default(),
    }
}

struct Meta {
    started: Instant,
    fetched_at: grid_core::time::Millis,
    browser_id: String,
    product: String,
}

/// The item's files; meta last.
fn files(row: &ItemRow, spec: &PageSpec, out: PageOutcome, info: Meta) -> Vec<FileContent> {
    let m = spec.manifest;
    let p = &spec.params;
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
    let mut screenshot = Value::Null;
    if let Some(shot) = out.screenshot {
        let s = &p.screenshot;
        let size = image_size(&shot.bytes).map(|(w, h)| json!({"width": w, "height": h})).unwrap_or(json!({}));
        add(ArtifactKind::Screenshot, s.format.content_type().into(), shot.bytes, size);
        let hidden: Vec<Value> = s
            .hide_selectors
            .iter()
            .zip(shot.hidden.iter().chain(std::iter::repeat(&0)))
            .map(|(selector, n)| json!({"selector": selector, "elements": n}))
            .collect();
        screenshot = json!({
            "format": s.format.as_str(),
            "quality": s.quality,
            "region": s.region.as_str(),
            "selector": match &s.region { Region::Selector(sel) => Some(sel), _ => None },
            "clip": shot.clip.map(|c| json!({"x": c.x, "y": c.y, "width": c.width, "height": c.height})),
            "hidden": hidden,
        });
    }
    if let Some(html) = out.html {
        add(ArtifactKind::Html, ArtifactKind::Html.default_content_type().into(), html.into_bytes(), json!({}));
    }
    let mut body_facts = json!({});
    if let Some(body) = out.body {
        body_facts = json!({"byteLength": body.len(), "sha256": sha256_hex(&body)});
        add(ArtifactKind::Body, content_type.clone(), body, json!({}));
    }
    let mut pdf = Value::Null;
    if let Some(document) = out.pdf {
        let o = &p.pdf;
        let [top, right, bottom, left] = o.margin_inches;
        pdf = json!({
            "format": o.paper,
            "landscape": o.landscape,
            "printBackground": o.print_background,
            "scale": o.scale,
            "marginInches": {"top": top, "right": right, "bottom": bottom, "left": left},
        });
        add(ArtifactKind::Pdf, ArtifactKind::Pdf.default_content_type().into(), document, json!({}));
    }
    let blocked: Vec<Value> = out
        .blocked
        .iter()
        .map(|b| json!({"url": b.url, "host": b.host, "resourceType": b.resource_type, "reason": b.reason}))
        .collect();
    let (w, h) = m.viewport;
    let v = spec.viewport;
    let wait_for = p
        .wait_for
        .as_ref()
        .map(|w| json!({"selector": w.selector, "networkIdleMs": w.network_idle_ms, "delayMs": w.delay_ms}));
    // Header and cookie values are the tenant's secrets: only names are kept.
    let request = json!({
        "userAgent": p.user_agent,
        "headers": p.headers.iter().map(|(name, _)| name).collect::<Vec<_>>(),
        "cookies": p.cookies.iter().map(|c| json!({
            "name": c.name,
            "domain": c.domain.as_deref().unwrap_or(&spec.host),
            "hostOnly": c.domain.is_none(),
            "path": c.path.as_deref().unwrap_or("/"),
        })).collect::<Vec<_>>(),
        "blockResourceTypes": p.block_resource_types.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
    });
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
        "waitFor": wait_for,
        "readyMs": out.ready_ms,
        "viewport": {"width": v.width, "height": v.height, "deviceScaleFactor": v.device_scale_factor, "mobile": v.mobile},
        "javascriptEnabled": p.javascript_enabled,
        "request": request,
        "allowedHosts": p.allowed_hosts,
        "blockedRequests": blocked,
        "failedRequests": out.failed_requests,
        "pageErrors": out.page_errors,
        "dialogs": out.dialogs,
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
    if !screenshot.is_null() {
        meta["screenshot"] = screenshot;
    }
    if !pdf.is_null() {
        meta["pdf"] = pdf;
    }
    files.push(FileContent::meta(&meta));
    files
}

/// Width and height of a PNG, JPEG or WebP image, from its header.
pub fn image_size(image: &[u8]) -> Option<(u32, u32)> {
    png_size(image).or_else(|| jpeg_size(image)).or_else(|| webp_size(image))
}

/// Width and height from a PNG's IHDR chunk.
pub fn png_size(png: &[u8]) -> Option<(u32, u32)> {
    if png.len() < 24 || &png[..8] != b"\x89PNG\r\n\x1a\n" || &png[12..16] != b"IHDR" {
        return None;
    }
    Some((u32::from_be_bytes(png[16..20].try_into().ok()?), u32::from_be_bytes(png[20..24].try_into().ok()?)))
}

/// Width and height from a JPEG's first start-of-frame segment.
fn jpeg_size(jpeg: &[u8]) -> Option<(u32, u32)> {
    let be16 = |at: usize| Some(u16::from_be_bytes(jpeg.get(at..at + 2)?.try_into().ok()?) as u32);
    if jpeg.get(..2)? != [0xff, 0xd8] {
        return None;
    }
    let mut at = 2;
    loop {
        if *jpeg.get(at)? != 0xff {
            return None;
        }
        let marker = *jpeg.get(at + 1)?;
        match marker {
            // Fill bytes before a marker.
            0xff => at += 1,
            // Markers without a length.
            0x01 | 0xd0..=0xd7 => at += 2,
            // Start of frame (not DHT, JPG, DAC): length, precision, height, width.
            0xc0..=0xcf if !matches!(marker, 0xc4 | 0xc8 | 0xcc) => {
                return Some((be16(at + 7)?, be16(at + 5)?));
            }
            _ => at += 2 + be16(at + 2)? as usize,
        }
    }
}

/// Width and height from a WebP's first chunk (lossy, lossless or extended).
fn webp_size(webp: &[u8]) -> Option<(u32, u32)> {
    if webp.get(..4)? != b"RIFF" || webp.get(8..12)? != b"WEBP" {
        return None;
    }
    let le =
        |at: usize, n: usize| webp.get(at..at + n).map(|b| b.iter().rev().fold(0u32, |acc, x| acc << 8 | *x as u32));
    match webp.get(12..16)? {
        b"VP8X" => Some((le(24, 3)? + 1, le(27, 3)? + 1)),
        b"VP8 " if webp.get(23..26)? == [0x9d, 0x01, 0x2a] => Some((le(26, 2)? & 0x3fff, le(28, 2)? & 0x3fff)),
        b"VP8L" if *webp.get(20)? == 0x2f => {
            let bits = le(21, 4)?;
            Some(((bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_read_from_png_jpeg_and_webp_headers() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        png.extend(1366u32.to_be_bytes());
        png.extend(768u32.to_be_bytes());
        assert_eq!(image_size(&png), Some((1366, 768)));

        // SOI, an APP0 segment of 16 bytes, then SOF0 with height 300 and width 500.
        let mut jpeg = vec![0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10];
        jpeg.extend([0u8; 14]);
        jpeg.extend([0xff, 0xc0, 0x00, 0x11, 0x08, 0x01, 0x2c, 0x01, 0xf4, 0x03]);
        assert_eq!(image_size(&jpeg), Some((500, 300)));

        let riff = |chunk: &[u8], data: &[u8]| {
            let mut v = b"RIFF\0\0\0\0WEBP".to_vec();
            v.extend(chunk);
            v.extend([0u8; 4]);
            v.extend(data);
            v
        };
        // Lossy: frame tag, start code, 14-bit width and height.
        let lossy = riff(b"VP8 ", &[0, 0, 0, 0x9d, 0x01, 0x2a, 0xe8, 0x03, 0x58, 0x02]);
        assert_eq!(image_size(&lossy), Some((1000, 600)));
        // Lossless: signature, then width-1 and height-1 in 14 bits each.
        let bits: u32 = (120 - 1) | ((80 - 1) << 14);
        let mut data = vec![0x2f];
        data.extend(bits.to_le_bytes());
        assert_eq!(image_size(&riff(b"VP8L", &data)), Some((120, 80)));
        // Extended: flags, reserved, 24-bit width-1 and height-1.
        let extended = riff(b"VP8X", &[0, 0, 0, 0, 0xff, 0x04, 0, 0xff, 0x02, 0]);
        assert_eq!(image_size(&extended), Some((1280, 768)));
        assert_eq!(image_size(b"GIF89a"), None);
    }
}
