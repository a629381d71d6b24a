//! Browser scripts on real Chromium (/usr/bin/chromium, Debian package
//! `chromium`): `capture`, `render-fetch`, `browser-fetch`, both profiles,
//! allowedHosts, wait rules, failure classes, browser replacement and
//! prices. Pages come from a local `Target` on 127.0.0.1.
//!
//! Runs on: one store, because its subject is Chromium: pages, profiles, browser replacement.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::{browser_pages, Target};
use grid_tests::wait::wait_until;
use grid_tests::DEFAULT_INITIAL_CREDIT_MICROS;

/// Chromium on two cores is slow to start; items get generous deadlines.
const DONE: Duration = Duration::from_secs(120);
const CAPTURE_PRICE_MICROS: i64 = 1_000;
const BROWSER_FETCH_PRICE_MICROS: i64 = 800;
const RENDER_FETCH_PRICE_MICROS: i64 = 800;

/// One browser per test server: several tests run at once on a small machine.
fn opts() -> ServerOptions {
    ServerOptions {
        retry_backoff_ms: Some(300),
        extra_args: vec!["--browsers".into(), "1".into()],
        ..Default::default()
    }
}

/// [`opts`] without the pool's spare browser (the harness's default, said
/// here because the tests count on it), so the item's browser is the
/// server's one Chromium.
fn no_spare() -> ServerOptions {
    ServerOptions { spare_browsers: Some(0), ..opts() }
}

/// Runs one item to its end and asserts it completed.
async fn completed(server: &GridServer, body: Value) -> (String, Value) {
    let id = server.submit_one(&body).await;
    let (item, seen) = server.wait_item_final(&id, DONE).await;
    if item["state"] != json!("completed") {
        server.fail(&format!("{body}: expected completed, states seen {seen:?}: {item}"));
    }
    (id, item)
}

async fn bytes(server: &GridServer, item_id: &str, kind: &str) -> Vec<u8> {
    let url = server.artifact_url(item_id, kind).await;
    let r = reqwest::Client::builder().no_proxy().build().unwrap().get(&url).send().await.expect("download");
    assert_eq!(r.status(), 200, "download {kind} of {item_id}");
    r.bytes().await.expect("download body").to_vec()
}

async fn text(server: &GridServer, item_id: &str, kind: &str) -> String {
    String::from_utf8(bytes(server, item_id, kind).await).expect("utf-8")
}

async fn meta(server: &GridServer, item_id: &str) -> Value {
    serde_json::from_slice(&bytes(server, item_id, "meta").await).expect("meta is JSON")
}

/// Width and height from a PNG's IHDR chunk (signature, length, "IHDR", w, h).
fn png_size(png: &[u8]) -> (u32, u32) {
    assert!(png.len() > 24, "PNG of {} bytes", png.len());
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&png[12..16], b"IHDR", "first chunk is not IHDR");
    (u32::from_be_bytes(png[16..20].try_into().unwrap()), u32::from_be_bytes(png[20..24].try_into().unwrap()))
}

/// A completed render-fetch of `/facts` under `profile`: its item id.
async fn facts_item(server: &GridServer, target: &Target, profile: &str) -> String {
    completed(server, json!({"urls": [target.url("/facts")], "script": "render-fetch", "profileId": profile})).await.0
}

/// The JSON the `/facts` page printed into `<pre id="facts">`.
fn facts_from(html: &str) -> Value {
    let start = html.find("<pre id=\"facts\">").unwrap_or_else(|| panic!("no facts element in {html}")) + 16;
    let end = start + html[start..].find("</pre>").expect("closing pre");
    serde_json::from_str(&html[start..end].replace("&amp;", "&")).unwrap_or_else(|e| panic!("facts JSON: {e}: {html}"))
}

#[tokio::test]
async fn render_fetch_sees_javascript_content_that_fetch_does_not() {
    let target = Target::start();
    let server = GridServer::start(opts());
    let url = target.url("/js/7");
    let (rendered, item) = completed(&server, json!({"urls": [url], "script": "render-fetch"})).await;
    assert_eq!(item["attemptsMade"], json!(1), "{item}");
    let mut kinds: Vec<&String> = item["artifacts"].as_object().expect("artifacts").keys().collect();
    kinds.sort();
    assert_eq!(kinds, ["html", "meta"], "{item}");
    let html = text(&server, &rendered, "html").await;
    assert!(html.contains(&browser_pages::js_text("7")), "rendered DOM lacks the script's text: {html}");

    let (fetched, _) = completed(&server, json!({"urls": [url], "script": "fetch"})).await;
    let body = text(&server, &fetched, "body").await;
    assert_eq!(body, browser_pages::js("7"));
    assert!(!body.contains(&browser_pages::js_text("7")), "{body}");

    let m = meta(&server, &rendered).await;
    assert_eq!(m["outcome"], json!("success"), "{m}");
    assert_eq!(m["script"], json!("render-fetch"), "{m}");
    assert_eq!(m["status"], json!(200), "{m}");
    assert_eq!(m["title"], json!("js 7"), "{m}");
    assert_eq!(m["finalUrl"], json!(url), "{m}");
    assert_eq!(m["waitUntil"], json!("load"), "{m}");
    assert_eq!(m["files"]["html"]["byteLength"], json!(html.len()), "{m}");
    assert_eq!(m["blockedRequests"], json!([]), "{m}");
}

#[tokio::test]
async fn disallowed_host_is_blocked_and_listed_in_meta() {
    let target = Target::start();
    let server = GridServer::start(opts());
    // localhost and 127.0.0.1 are different hosts to allowedHosts.
    let other = format!("http://localhost:{}", target.addr().port());
    let url = target.url(&format!("/cross?other={other}"));

    let (blocked, _) =
        completed(&server, json!({"urls": [url], "script": "render-fetch", "params": {"allowedHosts": []}})).await;
    assert_eq!(target.hits("/pixel.png"), 0, "the blocked image reached the target");
    assert_eq!(target.hits("/cross.js"), 0, "the blocked script reached the target");
    let m = meta(&server, &blocked).await;
    let listed = m["blockedRequests"].as_array().unwrap_or_else(|| panic!("no blockedRequests: {m}"));
    let mut urls: Vec<&str> = listed.iter().filter_map(|b| b["url"].as_str()).collect();
    urls.sort();
    assert_eq!(urls, [format!("{other}/cross.js"), format!("{other}/pixel.png")], "{m}");
    for b in listed {
        assert_eq!(b["host"], json!("localhost"), "{m}");
        assert_eq!(b["reason"], json!("host not in allowedHosts"), "{m}");
    }
    assert_eq!(m["allowedHosts"], json!([]), "{m}");

    // browser-fetch: the same rules; the body is the document as received.
    let (raw, _) =
        completed(&server, json!({"urls": [url], "script": "browser-fetch", "params": {"allowedHosts": []}})).await;
    assert_eq!(text(&server, &raw, "body").await, browser_pages::cross(&other));
    let m = meta(&server, &raw).await;
    assert_eq!(m["blockedRequests"].as_array().map(Vec::len), Some(2), "{m}");
    assert_eq!(target.hits("/pixel.png"), 0);

    // Listing the host lets the page reach it.
    let (allowed, _) =
        completed(&server, json!({"urls": [url], "script": "render-fetch", "params": {"allowedHosts": ["localhost"]}}))
            .await;
    let m = meta(&server, &allowed).await;
    assert_eq!(m["blockedRequests"], json!([]), "{m}");
    assert_eq!(target.hits("/pixel.png"), 1);
    assert_eq!(target.hits("/cross.js"), 1);
}

/// Counts TCP connections accepted on a fresh 127.0.0.1 port.
async fn counting_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            drop(stream);
        }
    });
    (port, count)
}

/// Request interception never sees WebSockets: the item's egress proxy
/// refuses them at the network edge.
#[tokio::test]
async fn websocket_to_a_host_outside_allowed_hosts_is_refused_at_the_edge() {
    let target = Target::start();
    let server = GridServer::start(opts());
    let (port, reached) = counting_listener().await;
    let ws = format!("ws://localhost:{port}/probe");
    let url = target.url(&format!("/websocket?to={ws}"));

    let (refused, _) =
        completed(&server, json!({"urls": [url], "script": "render-fetch", "params": {"allowedHosts": []}})).await;
    assert_eq!(reached.load(Ordering::SeqCst), 0, "the WebSocket reached a host outside allowedHosts");
    assert!(text(&server, &refused, "html").await.contains("<p id=\"ws\">error</p>"), "the page saw no refusal");
    let m = meta(&server, &refused).await;
    let listed = m["blockedRequests"].as_array().unwrap_or_else(|| panic!("no blockedRequests: {m}"));
    assert!(
        listed.iter().any(|b| b["url"] == json!(ws)
            && b["host"] == json!("localhost")
            && b["resourceType"] == json!("WebSocket")
            && b["reason"] == json!("host not in allowedHosts")),
        "{m}"
    );

    // Listed, the host is reached through the same proxy.
    completed(&server, json!({"urls": [url], "script": "render-fetch", "params": {"allowedHosts": ["localhost"]}}))
        .await;
    wait_until("the allowed WebSocket getting through", Duration::from_secs(10), || {
        match reached.load(Ordering::SeqCst) {
            0 => Err("not reached".to_string()),
            _ => Ok(()),
        }
    })
    .await;
    assert_eq!(reached.load(Ordering::SeqCst), 1, "an allowed WebSocket did not get through");
}

#[tokio::test]
async fn never_finishing_page_times_out_is_delayed_retried_then_failed() {
    let target = Target::start();
    let server = GridServer::start(opts());
    let body = |path: &str| json!({"urls": [target.url(path)], "script": "capture", "params": {"timeoutMs": 1500}});
    let never_loads = server.submit_one(&body("/never-loads")).await;
    let hang = server.submit_one(&body("/hang")).await;
    // Both run at once; watch both so neither's delayed state is missed.
    let (a, b) = tokio::join!(server.wait_item_final(&never_loads, DONE), server.wait_item_final(&hang, DONE));
    let expected = [
        (never_loads, a, "page did not reach the load event within 1500 ms"),
        (hang, b, "no response for the main document within 1500 ms"),
    ];
    for (id, (item, seen), reason) in expected {
        assert_eq!(item["state"], json!("failed"), "states seen {seen:?}: {item}");
        assert_eq!(item["attemptsMade"], json!(3), "{item}");
        assert!(seen.iter().any(|s| s == "delayed"), "never observed delayed; states seen {seen:?}");
        let failed_reason = item["failedReason"].as_str().unwrap_or("");
        assert!(failed_reason.contains(reason), "failedReason {failed_reason:?} lacks {reason:?}");
        // Transient: no failure record is published, so it can be retried.
        let r = server.get(&format!("/artifacts/{id}/meta")).await;
        assert_eq!(r.status, 404, "{r}");
    }
    assert_eq!(target.hits("/never-loads"), 3);
    // Three attempts at /hang, plus three from /never-loads' image.
    assert_eq!(target.hits("/hang"), 6);
    server.wait_settled(server.account_id(), DEFAULT_INITIAL_CREDIT_MICROS, Duration::from_secs(30)).await;
}

#[tokio::test]
async fn capture_png_has_the_profile_viewport_size() {
    let target = Target::start();
    let server = GridServer::start(opts());
    for (profile, size) in [
        ("desktop-browser-nl/v2", (1366, 768)),
        ("native-headless-browser/v2", (800, 600)),
        ("native-headless-browser/v3", (800, 600)),
    ] {
        let (id, item) =
            completed(&server, json!({"urls": [target.url("/js/3")], "script": "capture", "profileId": profile})).await;
        let mut kinds: Vec<&String> = item["artifacts"].as_object().expect("artifacts").keys().collect();
        kinds.sort();
        assert_eq!(kinds, ["html", "meta", "screenshot"], "{item}");
        let png = bytes(&server, &id, "screenshot").await;
        assert_eq!(png_size(&png), size, "{profile}");
        let html = text(&server, &id, "html").await;
        assert!(html.contains(&browser_pages::js_text("3")), "{profile}: {html}");
        let m = meta(&server, &id).await;
        assert_eq!(m["profileId"], json!(profile), "{m}");
        assert_eq!(m["files"]["screenshot"]["width"], json!(size.0), "{m}");
        assert_eq!(m["files"]["screenshot"]["byteLength"], json!(png.len()), "{m}");
        assert_eq!(m["profile"]["viewport"]["width"], json!(size.0), "{m}");
    }
    // fullPage: the screenshot keeps the viewport's width and covers the page.
    let (id, _) = completed(
        &server,
        json!({"urls": [target.url("/js/4")], "script": "capture", "profileId": "native-headless-browser/v2", "params": {"fullPage": true}}),
    )
    .await;
    let (w, h) = png_size(&bytes(&server, &id, "screenshot").await);
    assert_eq!(w, 800);
    assert!(h >= 1, "{h}");
}

#[tokio::test]
async fn profile_facts_are_read_from_inside_the_page() {
    let target = Target::start();
    let server = GridServer::start(opts());
    let nl = facts_item(&server, &target, "desktop-browser-nl/v2").await;
    let f = facts_from(&text(&server, &nl, "html").await);
    assert_eq!(f["language"], json!("nl-NL"), "{f}");
    assert_eq!(f["languages"][0], json!("nl-NL"), "{f}");
    assert_eq!(f["timeZone"], json!("Europe/Amsterdam"), "{f}");
    assert_eq!(f["locale"], json!("nl-NL"), "{f}");
    assert_eq!((f["innerWidth"].as_u64(), f["innerHeight"].as_u64()), (Some(1366), Some(768)), "{f}");
    assert_eq!(f["devicePixelRatio"], json!(1), "{f}");
    let ua = f["userAgent"].as_str().unwrap_or("");
    assert!(ua.contains(" Chrome/") && !ua.contains("Headless"), "{ua}");

    let native = facts_item(&server, &target, "native-headless-browser/v2").await;
    let f = facts_from(&text(&server, &native, "html").await);
    assert_eq!(f["language"], json!("en-US"), "{f}");
    assert_eq!(f["timeZone"], json!("UTC"), "{f}");
    assert_eq!((f["innerWidth"].as_u64(), f["innerHeight"].as_u64()), (Some(800), Some(600)), "{f}");
    assert!(f["userAgent"].as_str().unwrap_or("").contains("HeadlessChrome/"), "{f}");
    let m = meta(&server, &native).await;
    assert_eq!(m["browser"]["userAgent"], f["userAgent"], "{m}");
    assert_ne!(m["profile"]["manifestSha256"], meta(&server, &nl).await["profile"]["manifestSha256"]);
}

/// `native-headless-browser/v3` runs on Chromium's headless shell, a
/// browser of its own (never one running `/v2` pages), with `/v2`'s
/// identity as the shell shows it and every rule of the full browser: the
/// item's allowedHosts, the refusal of WebSockets at the edge, the private
/// network guard.
#[tokio::test]
async fn the_headless_shell_profile_runs_on_a_shell_of_its_own_under_the_same_rules() {
    const SHELL: &str = "native-headless-browser/v3";
    let target = Target::start();
    let server = GridServer::start(opts());
    let v2 = facts_item(&server, &target, "native-headless-browser/v2").await;
    let v3 = facts_item(&server, &target, SHELL).await;
    let (m2, m3) = (meta(&server, &v2).await, meta(&server, &v3).await);
    let product = m3["browser"]["product"].as_str().unwrap_or("");
    assert!(product.starts_with("HeadlessChrome/"), "the shell names itself HeadlessChrome: {m3}");
    assert!(m2["browser"]["product"].as_str().unwrap_or("").starts_with("Chrome/"), "{m2}");
    assert_ne!(m2["browser"]["instance"], m3["browser"]["instance"], "one browser ran both engines");
    assert_ne!(m2["profile"]["manifestSha256"], m3["profile"]["manifestSha256"]);
    assert_eq!(m3["profileId"], json!(SHELL), "{m3}");
    let f = facts_from(&text(&server, &v3, "html").await);
    assert_eq!(f["language"], json!("en-US"), "{f}");
    assert_eq!(f["timeZone"], json!("UTC"), "{f}");
    assert_eq!((f["innerWidth"].as_u64(), f["innerHeight"].as_u64()), (Some(800), Some(600)), "{f}");
    let ua = f["userAgent"].as_str().unwrap_or("");
    let version = product.trim_start_matches("HeadlessChrome/");
    assert!(ua.contains(&format!("HeadlessChrome/{version} ")), "the shell's own user agent: {ua}");
    assert_eq!(m3["browser"]["userAgent"], json!(ua), "{m3}");

    // allowedHosts: the image and the script of another host never leave.
    let other = format!("http://localhost:{}", target.addr().port());
    let (blocked, _) = completed(
        &server,
        json!({"urls": [target.url(&format!("/cross?other={other}"))], "script": "render-fetch", "profileId": SHELL, "params": {"allowedHosts": []}}),
    )
    .await;
    assert_eq!((target.hits("/pixel.png"), target.hits("/cross.js")), (0, 0), "a blocked request reached the target");
    assert_eq!(meta(&server, &blocked).await["blockedRequests"].as_array().map(Vec::len), Some(2));
    // WebSockets are refused at the edge.
    let (port, reached) = counting_listener().await;
    let ws = format!("ws://localhost:{port}/probe");
    let (refused, _) = completed(
        &server,
        json!({"urls": [target.url(&format!("/websocket?to={ws}"))], "script": "render-fetch", "profileId": SHELL, "params": {"allowedHosts": []}}),
    )
    .await;
    assert!(text(&server, &refused, "html").await.contains("<p id=\"ws\">error</p>"), "the page saw no refusal");
    assert_eq!(reached.load(Ordering::SeqCst), 0, "the WebSocket reached a host outside allowedHosts");

    // The private network guard.
    let guarded = GridServer::start(ServerOptions { allow_private_networks: false, ..opts() });
    let name = format!("http://localhost:{}/page/2", target.addr().port());
    let id = guarded.submit_one(&json!({"urls": [name], "script": "browser-fetch", "profileId": SHELL})).await;
    let (item, _) = guarded.wait_item_final(&id, DONE).await;
    assert_eq!(item["state"], json!("failed"), "{item}");
    assert!(item["failedReason"].as_str().unwrap_or("").contains("private network"), "{item}");
    assert_eq!(target.hits("/page/2"), 0, "a refused page reached the target");
}

/// Chromium's own sandbox is on inside the grid's, for both engines: no
/// process runs with `--no-sandbox`, and every renderer of a page being
/// loaded runs under a seccomp filter in user, network and pid namespaces
/// other than its browser's.
#[tokio::test]
async fn both_engines_run_their_renderers_in_chromiums_own_sandbox() {
    use grid_tests::host;
    let target = Target::start();
    let server = GridServer::start(ServerOptions { extra_args: vec!["--browsers".into(), "2".into()], ..opts() });
    for (i, profile) in ["native-headless-browser/v2", "native-headless-browser/v3"].iter().enumerate() {
        let url = target.url(&format!("/slow?ms=6000&i={i}"));
        server.submit_one(&json!({"urls": [url], "script": "render-fetch", "profileId": profile})).await;
    }
    // Both pages are being loaded once the target has both requests.
    wait_until("the browsers requesting both pages", DONE, || match target.hits("/slow") {
        2.. => Ok(()),
        n => Err(format!("{n} requests")),
    })
    .await;
    let chromium: Vec<i32> = host::descendants(server.pid().expect("server pid") as i32)
        .into_iter()
        .filter(|p| host::is_chromium(*p))
        .collect();
    let namespace = |pid: i32, ns: &str| std::fs::read_link(format!("/proc/{pid}/ns/{ns}")).ok();
    let mut engines_seen = std::collections::BTreeSet::new();
    // A zygote's children rewrite their command line as one string.
    let line = |pid: i32| host::cmdline(pid).join(" ");
    for pid in &chromium {
        let args = line(*pid);
        assert!(!args.contains(" --no-sandbox"), "{pid} runs without Chromium's sandbox: {args}");
        if !args.contains(" --type=renderer") {
            continue;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        assert!(status.lines().any(|l| l == "Seccomp:\t2"), "renderer {pid} has no seccomp filter: {args}");
        // Its browser: the nearest ancestor that is a Chromium without --type.
        let mut up = host::parent(*pid);
        while let Some(p) = up.filter(|p| line(*p).contains(" --type=")) {
            up = host::parent(p);
        }
        let browser = up.expect("a renderer's browser");
        for ns in ["user", "net", "pid"] {
            assert_ne!(
                namespace(*pid, ns),
                namespace(browser, ns),
                "renderer {pid} shares its browser's {ns} namespace"
            );
        }
        engines_seen.insert(args.contains("headless-shell"));
    }
    assert_eq!(engines_seen.len(), 2, "no renderer of both engines among {chromium:?}");
}

/// Pages that open JavaScript dialogs while they load (issue 50) are
/// captured by every browser script on the first attempt, each dialog
/// answered as docs/browser-captures.md says (an alert accepted, a confirm
/// and a prompt dismissed) and listed in meta; a page whose `beforeunload`
/// handler asks to stay still leaves when it navigates itself.
#[tokio::test]
async fn pages_opening_dialogs_complete_on_the_first_attempt_with_them_in_meta() {
    let target = Target::start();
    let server = GridServer::start(opts());
    let within = |url: String, script: &str| json!({"urls": [url], "script": script, "params": {"timeoutMs": 15000}});
    for (kind, script, answer) in [
        ("alert", "capture", "accepted"),
        ("confirm", "render-fetch", "dismissed"),
        ("prompt", "browser-fetch", "dismissed"),
    ] {
        let (id, item) = completed(&server, within(target.url(&format!("/dialog/{kind}")), script)).await;
        assert_eq!(item["attemptsMade"], json!(1), "{item}");
        let m = meta(&server, &id).await;
        assert_eq!(
            m["dialogs"],
            json!([{"type": kind, "message": format!("a dialog {kind}"), "answer": answer}]),
            "{script}: {m}"
        );
    }
    let (id, _) = completed(&server, within(target.url("/dialog/confirm"), "render-fetch")).await;
    let html = text(&server, &id, "html").await;
    assert!(html.contains(&browser_pages::dialog_text("false")), "the confirm was not dismissed: {html}");
    let (id, _) = completed(&server, within(target.url("/dialog/prompt"), "capture")).await;
    let html = text(&server, &id, "html").await;
    assert!(html.contains(&browser_pages::dialog_text("null")), "the prompt was not dismissed: {html}");

    // beforeunload: the page leaves for /page/left, which the wait finds.
    let body = json!({"urls": [target.url("/dialog/beforeunload")], "script": "render-fetch",
                      "params": {"timeoutMs": 15000, "waitFor": {"selector": "h1"}}});
    let (id, item) = completed(&server, body).await;
    assert_eq!(item["attemptsMade"], json!(1), "{item}");
    assert!(text(&server, &id, "html").await.contains("page left"), "the page did not leave");
}

#[tokio::test]
async fn page_errors_and_http_errors_are_recorded_in_meta() {
    let target = Target::start();
    let server = GridServer::start(opts());
    let (id, _) = completed(&server, json!({"urls": [target.url("/throws")], "script": "render-fetch"})).await;
    let m = meta(&server, &id).await;
    let errors = m["pageErrors"].as_array().unwrap_or_else(|| panic!("no pageErrors: {m}"));
    assert_eq!(errors.len(), 1, "{m}");
    assert!(errors[0]["message"].as_str().unwrap_or("").contains("grid test error"), "{m}");

    let (id, item) = completed(&server, json!({"urls": [target.url("/status/404")], "script": "browser-fetch"})).await;
    assert_eq!(item["attemptsMade"], json!(1), "{item}");
    let m = meta(&server, &id).await;
    assert_eq!(m["status"], json!(404), "{m}");
    assert_eq!(text(&server, &id, "body").await, "status 404\n");

    // 5xx is transient, as for fetch.
    let id = server.submit_one(&json!({"urls": [target.url("/status/503")], "script": "render-fetch"})).await;
    let (item, _) = server.wait_item_final(&id, DONE).await;
    assert_eq!(item["state"], json!("failed"), "{item}");
    assert_eq!(item["attemptsMade"], json!(3), "{item}");
    assert_eq!(item["failedReason"], json!("target answered HTTP 503"), "{item}");
}

#[tokio::test]
async fn bad_browser_params_fail_the_item_with_a_published_record() {
    let target = Target::start();
    let server = GridServer::start(opts());
    let body = json!({
        "urls": [target.url("/page/1")],
        "script": "capture",
        "params": {"allowedHosts": ["a.example"], "waitUntil": "idle"}
    });
    let id = server.submit_one(&body).await;
    let (item, _) = server.wait_item_final(&id, DONE).await;
    assert_eq!(item["state"], json!("failed"), "{item}");
    assert_eq!(item["attemptsMade"], json!(1), "{item}");
    let reason = item["failedReason"].as_str().unwrap_or("");
    assert!(reason.contains("params.allowedHosts: not a parameter of capture"), "{reason}");
    assert!(reason.contains("params.waitUntil"), "{reason}");
    let m = meta(&server, &id).await;
    assert_eq!(m["outcome"], json!("failure"), "{m}");
    assert_eq!(target.hits("/page/1"), 0);
}

#[tokio::test]
async fn private_network_guard_applies_to_the_browser() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions { allow_private_networks: false, ..opts() });
    // A literal loopback address is refused before the browser starts.
    let literal = server.submit_one(&json!({"urls": [target.url("/page/1")], "script": "render-fetch"})).await;
    // A name resolving to loopback is refused by the browser's request check.
    let name = format!("http://localhost:{}/page/2", target.addr().port());
    let named = server.submit_one(&json!({"urls": [name], "script": "browser-fetch"})).await;
    // Each names the rule that applied: the address and its special-purpose row.
    let literal_reasons: &[&str] =
        &["destination refused: 127.0.0.1 is not a public address: loopback (127.0.0.0/8, RFC 1122)"];
    let named_reasons: &[&str] = &["private network: localhost is not a public address: ", " is loopback ("];
    for (id, reasons) in [(literal, literal_reasons), (named, named_reasons)] {
        let (item, _) = server.wait_item_final(&id, DONE).await;
        assert_eq!(item["state"], json!("failed"), "{item}");
        assert_eq!(item["attemptsMade"], json!(1), "{item}");
        let got = item["failedReason"].as_str().unwrap_or("");
        for reason in reasons {
            assert!(got.contains(reason), "failedReason {got:?} lacks {reason:?}");
        }
        assert_eq!(meta(&server, &id).await["outcome"], json!("failure"));
    }
    assert_eq!(target.total_hits(), 0, "a refused page reached the target");
}

/// Pids of the Chromium main processes the server started.
fn chromium_children(server_pid: u32) -> Vec<i32> {
    grid_tests::host::browser_mains(server_pid as i32)
}

#[tokio::test]
async fn crashed_browser_is_replaced_and_its_item_retried() {
    let target = Target::start();
    let server = GridServer::start(no_spare());
    let id = server.submit_one(&json!({"urls": [target.url("/slow?ms=4000")], "script": "render-fetch"})).await;
    // Once the browser asked for the page, kill it.
    wait_until("the browser requesting the page", DONE, || match target.hits("/slow") {
        0 => Err("no request".to_string()),
        _ => Ok(()),
    })
    .await;
    let browsers = chromium_children(server.pid().expect("server pid"));
    assert_eq!(browsers.len(), 1, "expected one Chromium child of the server: {browsers:?}");
    // SAFETY: kill(2) on a process this test found as the server's child.
    unsafe {
        libc::kill(browsers[0], libc::SIGKILL);
    }
    let (item, seen) = server.wait_item_final(&id, DONE).await;
    assert_eq!(item["state"], json!("completed"), "states seen {seen:?}: {item}");
    assert_eq!(item["attemptsMade"], json!(2), "{item}");
    assert!(seen.iter().any(|s| s == "delayed"), "states seen {seen:?}");
    assert_eq!(target.hits("/slow"), 2);
    let now = chromium_children(server.pid().unwrap());
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now[0], browsers[0], "the browser was not replaced");
}

#[tokio::test]
async fn browser_items_are_charged_their_contract_price_once() {
    let target = Target::start();
    let server = GridServer::start(opts());
    for script in ["capture", "render-fetch", "browser-fetch"] {
        completed(&server, json!({"urls": [target.url("/page/9")], "script": script})).await;
    }
    server
        .wait_settled(
            server.account_id(),
            DEFAULT_INITIAL_CREDIT_MICROS
                - CAPTURE_PRICE_MICROS
                - RENDER_FETCH_PRICE_MICROS
                - BROWSER_FETCH_PRICE_MICROS,
            Duration::from_secs(30),
        )
        .await;
}

#[tokio::test]
async fn hung_browser_is_killed_and_replaced() {
    const ALLOWANCE_MS: u64 = 8_000;
    let target = Target::start();
    // The allowance past an item's budget before its browser counts as hung
    // is 30 s; a test-only bound shortens it, with room for the replacement
    // browser's page on a busy 2-core machine.
    let mut options = no_spare();
    options.extra_args.extend(["--collect-allowance-ms".into(), ALLOWANCE_MS.to_string()]);
    let server = GridServer::start(options);
    completed(&server, json!({"urls": [target.url("/page/1")], "script": "render-fetch"})).await;
    let browsers = chromium_children(server.pid().expect("server pid"));
    assert_eq!(browsers.len(), 1, "{browsers:?}");
    // A stopped process keeps its sockets open and answers nothing: a hang.
    // SAFETY: kill(2) on a process this test found as the server's child.
    unsafe {
        libc::kill(browsers[0], libc::SIGSTOP);
    }
    let started = Instant::now();
    let id = server
        .submit_one(
            // Short, so the watchdog (budget + allowance) fires soon.
            &json!({"urls": [target.url("/page/2")], "script": "render-fetch", "params": {"timeoutMs": 5000}}),
        )
        .await;
    let (item, seen) = server.wait_item_final(&id, DONE).await;
    assert_eq!(item["state"], json!("completed"), "states seen {seen:?}: {item}");
    assert_eq!(item["attemptsMade"], json!(2), "{item}");
    assert!(seen.iter().any(|s| s == "delayed"), "states seen {seen:?}");
    // The watchdog waits for the budget plus the collect allowance.
    let watchdog = Duration::from_millis(5_000 + ALLOWANCE_MS);
    assert!(started.elapsed() >= watchdog, "replaced after only {:?}", started.elapsed());
    let now = chromium_children(server.pid().unwrap());
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now[0], browsers[0], "the hung browser was not replaced");
    assert!(server.log_tail(200).contains("killing browser"), "no kill logged");
}
