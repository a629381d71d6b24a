//! The options of the browser scripts on real Chromium (docs/browser-captures.md,
//! "Parameters"): screenshot format and quality, viewport, clip and selector,
//! waitFor, hideSelectors, javascriptEnabled, userAgent, headers, cookies and
//! blockResourceTypes. Pages come from a local `Target` (`/options`, `/facts`,
//! `/js/{n}`), which also records what the browser sent it.
//!
//! Each test submits its items as separate batches at once (params belong to
//! a batch) and then waits for them, so one browser runs them side by side.
//!
//! Runs on: one store, because its subject is the browser scripts' options on a live page.

use std::time::Duration;

use image::{DynamicImage, GenericImageView, ImageFormat};
use serde_json::{json, Value};

use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::{browser_pages, Target};

/// Chromium on two cores is slow to start; items get generous deadlines.
const DONE: Duration = Duration::from_secs(180);

fn opts() -> ServerOptions {
    ServerOptions { extra_args: vec!["--browsers".into(), "1".into()], ..Default::default() }
}

/// Submits one single-URL batch per body; the item ids, in order.
async fn submit_each(server: &GridServer, bodies: &[Value]) -> Vec<String> {
    let mut ids = vec![];
    for body in bodies {
        let batch_id = server.submit_as(server.api_key(), body).await;
        let batch = server.batch(&batch_id).await;
        ids.push(batch["jobs"][0]["jobId"].as_str().unwrap_or_else(|| panic!("no jobId: {batch}")).to_string());
    }
    ids
}

/// Waits for the item and asserts it completed.
async fn completed(server: &GridServer, id: &str, what: &str) -> Value {
    let (item, seen) = server.wait_item_final(id, DONE).await;
    if item["state"] != json!("completed") {
        server.fail(&format!("{what}: expected completed, states seen {seen:?}: {item}"));
    }
    item
}

/// Waits for the item and asserts it failed after one attempt (terminal).
async fn failed_terminally(server: &GridServer, id: &str, what: &str) -> String {
    let (item, seen) = server.wait_item_final(id, DONE).await;
    if item["state"] != json!("failed") || item["attemptsMade"] != json!(1) {
        server.fail(&format!("{what}: expected a terminal failure, states seen {seen:?}: {item}"));
    }
    item["failedReason"].as_str().unwrap_or_default().to_string()
}

async fn bytes(server: &GridServer, item_id: &str, kind: &str) -> (Vec<u8>, String) {
    let url = server.artifact_url(item_id, kind).await;
    let r = reqwest::Client::builder().no_proxy().build().unwrap().get(&url).send().await.expect("download");
    assert_eq!(r.status(), 200, "download {kind} of {item_id}");
    let content_type = r.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    (r.bytes().await.expect("download body").to_vec(), content_type)
}

async fn text(server: &GridServer, item_id: &str, kind: &str) -> String {
    String::from_utf8(bytes(server, item_id, kind).await.0).expect("utf-8")
}

async fn meta(server: &GridServer, item_id: &str) -> Value {
    serde_json::from_slice(&bytes(server, item_id, "meta").await.0).expect("meta is JSON")
}

/// The screenshot decoded as `format`, after checking the served content
/// type and meta's description of it.
async fn screenshot(server: &GridServer, item_id: &str, format: ImageFormat) -> (DynamicImage, usize, Value) {
    let (data, content_type) = bytes(server, item_id, "screenshot").await;
    assert_eq!(image::guess_format(&data).ok(), Some(format), "{item_id}: {content_type}");
    assert_eq!(content_type, format.to_mime_type(), "{item_id}");
    let img = image::load_from_memory_with_format(&data, format)
        .unwrap_or_else(|e| panic!("{item_id}: screenshot does not decode as {format:?}: {e}"));
    let m = meta(server, item_id).await;
    let f = &m["files"]["screenshot"];
    assert_eq!(f["contentType"], json!(format.to_mime_type()), "{m}");
    assert_eq!(
        (f["width"].as_u64(), f["height"].as_u64()),
        (Some(img.width() as u64), Some(img.height() as u64)),
        "{m}"
    );
    assert_eq!(f["byteLength"], json!(data.len()), "{m}");
    (img, data.len(), m)
}

/// Red, green, blue of one pixel.
fn rgb(img: &DynamicImage, x: u32, y: u32) -> [u8; 3] {
    let p = img.get_pixel(x, y).0;
    [p[0], p[1], p[2]]
}

/// Whether two colours are within `tolerance` per channel (jpeg and webp
/// are lossy).
fn near(a: [u8; 3], b: [u8; 3], tolerance: u8) -> bool {
    a.iter().zip(b).all(|(x, y)| x.abs_diff(y) <= tolerance)
}

const RED: [u8; 3] = [255, 0, 0];
const WHITE: [u8; 3] = [255, 255, 255];
const BLUE: [u8; 3] = [0, 0, 255];

#[tokio::test]
async fn capture_formats_viewport_and_regions() {
    let target = Target::start();
    let server = GridServer::start(opts());
    let page = target.url("/options");
    let (bx, by, bw, bh) = browser_pages::BOX;
    let capture = |params: Value| json!({"urls": [page], "script": "capture", "params": params});
    let ids = submit_each(
        &server,
        &[
            capture(json!({"format": "jpeg", "quality": 95})),
            capture(json!({"format": "jpeg", "quality": 5})),
            capture(json!({"format": "webp", "quality": 90})),
            json!({"urls": [target.url("/facts")], "script": "capture",
                   "params": {"viewport": {"width": 500, "height": 300, "deviceScaleFactor": 2}}}),
            capture(json!({"selector": "#box"})),
            capture(json!({"clip": {"x": bx, "y": by - 20, "width": bw, "height": bh + 20}})),
            capture(json!({"selector": "#missing"})),
        ],
    )
    .await;
    for id in &ids[..6] {
        completed(&server, id, id).await;
    }

    // jpeg: the format asked for, at the profile's viewport; quality shows in the size.
    let (fine, fine_len, m) = screenshot(&server, &ids[0], ImageFormat::Jpeg).await;
    assert_eq!((fine.width(), fine.height()), (1366, 768));
    assert_eq!(m["screenshot"]["format"], json!("jpeg"), "{m}");
    assert_eq!(m["screenshot"]["quality"], json!(95), "{m}");
    assert_eq!(m["screenshot"]["region"], json!("viewport"), "{m}");
    assert!(near(rgb(&fine, 5, 5), RED, 40), "{:?}", rgb(&fine, 5, 5));
    let (coarse, coarse_len, _) = screenshot(&server, &ids[1], ImageFormat::Jpeg).await;
    assert_eq!((coarse.width(), coarse.height()), (1366, 768));
    assert!(coarse_len < fine_len, "quality 5 gave {coarse_len} bytes, quality 95 gave {fine_len}");
    let (webp, _, m) = screenshot(&server, &ids[2], ImageFormat::WebP).await;
    assert_eq!((webp.width(), webp.height()), (1366, 768));
    assert_eq!(m["screenshot"]["format"], json!("webp"), "{m}");

    // viewport: the page sees it and the image has its size times the scale.
    let (shot, _, m) = screenshot(&server, &ids[3], ImageFormat::Png).await;
    assert_eq!((shot.width(), shot.height()), (1000, 600));
    assert_eq!(m["viewport"], json!({"width": 500, "height": 300, "deviceScaleFactor": 2.0, "mobile": false}), "{m}");
    assert_eq!(m["profile"]["viewport"]["width"], json!(1366), "the profile's own viewport stays recorded: {m}");
    let html = text(&server, &ids[3], "html").await;
    let start = html.find("<pre id=\"facts\">").expect("facts") + 16;
    let facts: Value = serde_json::from_str(&html[start..start + html[start..].find("</pre>").unwrap()]).unwrap();
    assert_eq!((facts["innerWidth"].as_u64(), facts["innerHeight"].as_u64()), (Some(500), Some(300)), "{facts}");
    assert_eq!(facts["devicePixelRatio"], json!(2), "{facts}");

    // selector: the element's box, all blue; clip: the box and a white strip above it.
    let (shot, _, m) = screenshot(&server, &ids[4], ImageFormat::Png).await;
    assert_eq!((shot.width(), shot.height()), (bw, bh));
    for (x, y) in [(0, 0), (bw / 2, bh / 2), (bw - 1, bh - 1)] {
        assert_eq!(rgb(&shot, x, y), BLUE, "selector crop at ({x}, {y})");
    }
    assert_eq!(m["screenshot"]["region"], json!("selector"), "{m}");
    assert_eq!(m["screenshot"]["selector"], json!("#box"), "{m}");
    assert_eq!(
        m["screenshot"]["clip"],
        json!({"x": bx as f64, "y": by as f64, "width": bw as f64, "height": bh as f64})
    );
    let (shot, _, m) = screenshot(&server, &ids[5], ImageFormat::Png).await;
    assert_eq!((shot.width(), shot.height()), (bw, bh + 20));
    assert_eq!(rgb(&shot, bw / 2, 5), WHITE);
    assert_eq!(rgb(&shot, bw / 2, 20 + bh / 2), BLUE);
    assert_eq!(m["screenshot"]["region"], json!("clip"), "{m}");

    // A selector that matches nothing fails the item, naming the parameter.
    let reason = failed_terminally(&server, &ids[6], "selector #missing").await;
    assert_eq!(reason, "params.selector: no element matches \"#missing\"");
}

#[tokio::test]
async fn wait_for_hide_selectors_and_javascript() {
    let target = Target::start();
    let server = GridServer::start(opts());
    let late = target.url("/options?late=1500");
    let render = |url: &str, params: Value| json!({"urls": [url], "script": "render-fetch", "params": params});
    let page = target.url("/options");
    let ids = submit_each(
        &server,
        &[
            render(&late, json!({"waitFor": {"selector": "#late"}})),
            render(&late, json!({})),
            render(&page, json!({"waitFor": {"networkIdleMs": 300, "delayMs": 200}})),
            json!({"urls": [page], "script": "capture", "params": {"hideSelectors": ["#banner", ".absent"]}}),
            json!({"urls": [page], "script": "capture"}),
            render(&target.url("/js/5"), json!({"javascriptEnabled": false})),
            render(&page, json!({"waitFor": {"selector": "#never"}, "timeoutMs": 2000})),
        ],
    )
    .await;
    for id in &ids[..6] {
        completed(&server, id, id).await;
    }

    // waitFor.selector: the element the page adds 1.5 s after its script ran is
    // in the DOM; without it the item was done before.
    let html = text(&server, &ids[0], "html").await;
    assert!(html.contains(browser_pages::LATE_TEXT), "{html}");
    let m = meta(&server, &ids[0]).await;
    assert_eq!(m["waitFor"], json!({"selector": "#late", "networkIdleMs": null, "delayMs": null}), "{m}");
    assert!(m["readyMs"].as_u64() >= Some(1500), "{m}");
    assert!(!text(&server, &ids[1], "html").await.contains(browser_pages::LATE_TEXT));
    let m = meta(&server, &ids[1]).await;
    assert_eq!((m["waitFor"].clone(), m["readyMs"].clone()), (json!(null), m["loadedMs"].clone()), "{m}");
    // networkIdleMs then delayMs: at least their sum after the load.
    let m = meta(&server, &ids[2]).await;
    let (loaded, ready) = (m["loadedMs"].as_u64().unwrap_or(0), m["readyMs"].as_u64().unwrap_or(0));
    assert!(ready >= loaded + 500, "{m}");

    // hideSelectors: the banner's pixels are the page's white, counted in meta.
    let (hidden, _, m) = screenshot(&server, &ids[3], ImageFormat::Png).await;
    assert_eq!(rgb(&hidden, 10, 10), WHITE);
    assert_eq!(
        m["screenshot"]["hidden"],
        json!([{"selector": "#banner", "elements": 1}, {"selector": ".absent", "elements": 0}]),
        "{m}"
    );
    let (shown, _, _) = screenshot(&server, &ids[4], ImageFormat::Png).await;
    assert_eq!(rgb(&shown, 10, 10), RED);
    // The html file is the DOM before anything was hidden.
    assert!(!text(&server, &ids[3], "html").await.contains("display: none"));

    // javascriptEnabled false: what the page's script would write is absent.
    let html = text(&server, &ids[5], "html").await;
    assert!(html.contains("waiting") && !html.contains(&browser_pages::js_text("5")), "{html}");
    assert_eq!(meta(&server, &ids[5]).await["javascriptEnabled"], json!(false));

    // A selector that never appears: the budget runs out, transiently, naming the parameter.
    let (item, _) = server.wait_item_final(&ids[6], DONE).await;
    assert_eq!(item["state"], json!("failed"), "{item}");
    assert_eq!(item["attemptsMade"], json!(3), "{item}");
    assert_eq!(item["failedReason"], json!("params.waitFor.selector: no element matched \"#never\" within 2000 ms"));
}

#[tokio::test]
async fn request_options_reach_the_target_and_stay_in_their_item() {
    let target = Target::start();
    let server = GridServer::start(opts());
    // The image comes from another host of the same target (localhost), so
    // the target sees whether headers and cookies went there too.
    let other = format!("http://localhost:{}", target.addr().port());
    let page = target.url(&format!("/options?img=with-options&other={other}"));
    let ids = submit_each(
        &server,
        &[json!({"urls": [page], "script": "render-fetch", "params": {
            "userAgent": "GridTest/1.0 (capture options)",
            "headers": {"X-Grid-Test": "yes", "Authorization": "Bearer test-token"},
            "cookies": [{"name": "consent", "value": "granted"}],
        }})],
    )
    .await;
    completed(&server, &ids[0], "with request options").await;
    let mut later = submit_each(
        &server,
        &[
            json!({"urls": [target.url("/options?img=after")], "script": "browser-fetch"}),
            json!({"urls": [target.url("/options?img=blocked")], "script": "render-fetch",
                   "params": {"blockResourceTypes": ["image"]}}),
            json!({"urls": [page], "script": "browser-fetch", "params": {"cookies": [{"name": "a", "value": "1", "domain": "example.com"}]}}),
            json!({"urls": [page], "script": "render-fetch", "params": {"hideSelectors": ["#banner"], "headers": {"Host": "internal"}}}),
        ],
    )
    .await;
    let refused = later.pop().unwrap_or_default();
    let wrong_domain = later.pop().unwrap_or_default();
    for id in &later {
        completed(&server, id, id).await;
    }

    let pages = target.requests("/options");
    let first = &pages[0];
    assert_eq!(first.header("user-agent"), Some("GridTest/1.0 (capture options)"), "{first:?}");
    assert_eq!(first.header("x-grid-test"), Some("yes"), "{first:?}");
    assert_eq!(first.header("authorization"), Some("Bearer test-token"), "{first:?}");
    assert_eq!(first.header("cookie"), Some("consent=granted"), "{first:?}");
    // The image on the other host got the user agent (the browser's
    // identity) but neither the headers nor the host-only cookie.
    let image = target.requests("/img/with-options.png");
    assert_eq!(image.len(), 1, "{image:?}");
    assert_eq!(image[0].header("host"), Some(format!("localhost:{}", target.addr().port()).as_str()));
    assert_eq!(image[0].header("user-agent"), Some("GridTest/1.0 (capture options)"));
    assert_eq!((image[0].header("x-grid-test"), image[0].header("authorization")), (None, None), "{image:?}");
    assert_eq!(image[0].header("cookie"), None, "{image:?}");
    let m = meta(&server, &ids[0]).await;
    assert_eq!(m["browser"]["userAgent"], json!("GridTest/1.0 (capture options)"), "{m}");
    assert_eq!(
        m["request"]["cookies"],
        json!([{"name": "consent", "domain": "127.0.0.1", "hostOnly": true, "path": "/"}]),
        "{m}"
    );
    let mut names: Vec<&str> = m["request"]["headers"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    names.sort();
    assert_eq!(names, ["Authorization", "X-Grid-Test"], "{m}");
    assert!(
        !m.to_string().contains("test-token") && !m.to_string().contains("granted"),
        "values kept out of meta: {m}"
    );

    // The next items, in contexts of their own, carry none of it.
    assert_eq!(pages.len(), 3, "refused items never loaded their page");
    for next in &pages[1..] {
        assert_eq!((next.header("cookie"), next.header("x-grid-test")), (None, None), "{next:?}");
        assert_ne!(next.header("user-agent"), Some("GridTest/1.0 (capture options)"));
    }

    // blockResourceTypes: the image never reached the target and is listed.
    assert_eq!(target.hits("/img/blocked.png"), 0);
    assert_eq!(target.hits("/img/after.png"), 1, "the control page loaded its image");
    let m = meta(&server, &later[1]).await;
    let blocked = m["blockedRequests"].as_array().cloned().unwrap_or_default();
    assert!(
        blocked.iter().any(|b| b["url"].as_str().unwrap_or("").ends_with("/img/blocked.png")
            && b["reason"] == json!("blockResourceTypes: image")
            && b["resourceType"] == json!("Image")),
        "{m}"
    );
    assert_eq!(m["request"]["blockResourceTypes"], json!(["image"]), "{m}");

    // Options that cannot apply fail the item before the page, naming them.
    let reason = failed_terminally(&server, &wrong_domain, "cookie domain").await;
    assert!(reason.starts_with("params.cookies[0].domain: \"example.com\" is neither the item URL's host"), "{reason}");
    let reason = failed_terminally(&server, &refused, "misplaced and refused").await;
    assert!(
        reason.contains("params.hideSelectors: not a parameter of render-fetch; only capture takes it"),
        "{reason}"
    );
    assert!(reason.contains("params.headers.Host: a header the grid does not let a page set"), "{reason}");
}
