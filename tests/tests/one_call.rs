//! One-call captures (docs/one-call.md): POST /screenshot, /pdf and /content
//! answer the file itself, run on real Chromium, metered as one capture item
//! (reserved, charged on success, released on failure), through raw HTTP,
//! the SDK and the CLI; the `pdf` script in batches; every refusal as JSON.
//!
//! Runs on: both stores, because a one-call capture is an item claimed in the store.

use std::time::Duration;

use image::{GenericImageView, ImageFormat};
use serde_json::{json, Value};

use grid_tests::http::{assert_error, Resp};
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::{browser_pages, Target};
use grid_tests::wait::wait_until;

/// Chromium on two cores is slow to start; the first page may take long.
const DONE: Duration = Duration::from_secs(180);

fn opts() -> ServerOptions {
    ServerOptions { extra_args: vec!["--browsers".into(), "1".into()], ..Default::default() }
}

/// A one-call answer, its body kept as bytes.
struct File {
    status: u16,
    content_type: String,
    headers: reqwest::header::HeaderMap,
    bytes: Vec<u8>,
}

impl File {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or(Value::Null)
    }
}

async fn post_file(server: &GridServer, key: Option<&str>, path: &str, body: &Value) -> File {
    let client = reqwest::Client::builder().no_proxy().timeout(DONE).build().unwrap();
    let mut req = client.post(format!("{}{path}", server.base_url())).json(body);
    if let Some(key) = key {
        req = req.header("x-api-key", key);
    }
    let r = req.send().await.unwrap_or_else(|e| server.fail(&format!("POST {path}: {e}")));
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let bytes = r.bytes().await.expect("answer body").to_vec();
    File { status, content_type, headers, bytes }
}

async fn credit(server: &GridServer, key: &str) -> i64 {
    let r = server.get_as(Some(key), "/account").await;
    r.json["creditMicros"].as_i64().unwrap_or_else(|| server.fail(&format!("no creditMicros: {r}")))
}

/// The answer is the item's file, the item completed and charged its price.
async fn completed_item(server: &GridServer, f: &File, price: i64) -> Value {
    assert_eq!(f.status, 200, "{}: {}", f.content_type, String::from_utf8_lossy(&f.bytes));
    assert_eq!(f.header("x-grid-charged-micros"), price.to_string());
    assert!(!f.header("x-grid-batch-id").is_empty());
    let item = server.item(f.header("x-grid-job-id")).await;
    assert_eq!(item["state"], json!("completed"), "{item}");
    assert_eq!(item["attemptsMade"], json!(1), "{item}");
    item
}

/// A page calling `alert()` while it loads (issue 50: "page did not reach
/// the load event") answers 200 on /screenshot and /content, the content
/// holding what the page wrote after the dialog; a `confirm()` is
/// dismissed, and the item's meta lists it.
#[tokio::test]
async fn pages_opening_dialogs_answer_their_file() {
    let target = Target::start();
    let server = GridServer::start(opts());
    let key = server.api_key().to_string();
    let alert = target.url("/dialog/alert");
    let f = post_file(&server, Some(&key), "/screenshot", &json!({"url": alert, "timeoutMs": 15000})).await;
    completed_item(&server, &f, 1_000).await;
    assert_eq!(f.content_type, "image/png");
    let f = post_file(&server, Some(&key), "/content", &json!({"url": alert, "timeoutMs": 15000})).await;
    completed_item(&server, &f, 800).await;
    let html = String::from_utf8(f.bytes.clone()).expect("UTF-8");
    assert!(html.contains(&browser_pages::dialog_text("undefined")), "{html}");

    let confirm = target.url("/dialog/confirm");
    let f = post_file(&server, Some(&key), "/content", &json!({"url": confirm, "timeoutMs": 15000})).await;
    completed_item(&server, &f, 800).await;
    let html = String::from_utf8(f.bytes.clone()).expect("UTF-8");
    assert!(html.contains(&browser_pages::dialog_text("false")), "{html}");
    let meta = server.download(&server.artifact_url(f.header("x-grid-job-id"), "meta").await).await;
    assert_eq!(
        meta.json["dialogs"],
        json!([{"type": "confirm", "message": "a dialog confirm", "answer": "dismissed"}]),
        "{meta}"
    );

    // A page with a beforeunload handler that leaves once loaded.
    let leaving = json!({"url": target.url("/dialog/beforeunload"), "timeoutMs": 15000, "waitFor": {"selector": "h1"}});
    let f = post_file(&server, Some(&key), "/content", &leaving).await;
    completed_item(&server, &f, 800).await;
    assert!(String::from_utf8_lossy(&f.bytes).contains("page left"));
}

#[tokio::test]
async fn screenshot_pdf_and_content_answer_the_file_and_charge_one_item() {
    let target = Target::start();
    let server = GridServer::start(opts());
    let key = server.api_key().to_string();
    let before = credit(&server, &key).await;
    let page = target.url("/options");

    // viewport: an image of exactly that size at scale 1.
    let f =
        post_file(&server, Some(&key), "/screenshot", &json!({"url": page, "viewport": {"width": 640, "height": 480}}))
            .await;
    completed_item(&server, &f, 1_000).await;
    assert_eq!(f.content_type, "image/png");
    assert_eq!(f.header("x-grid-target-status"), "200");
    let img = image::load_from_memory_with_format(&f.bytes, ImageFormat::Png).expect("a PNG");
    assert_eq!((img.width(), img.height()), (640, 480));
    let p = img.get_pixel(5, 5).0;
    assert_eq!([p[0], p[1], p[2]], [255, 0, 0], "the page's red banner");
    // The same file is the item's published screenshot.
    let url = server.artifact_url(f.header("x-grid-job-id"), "screenshot").await;
    assert_eq!(server.download(&url).await.status, 200);

    // format jpeg; selector clips to the element.
    let f = post_file(&server, Some(&key), "/screenshot", &json!({"url": page, "format": "jpeg", "quality": 90})).await;
    completed_item(&server, &f, 1_000).await;
    assert_eq!(f.content_type, "image/jpeg");
    assert_eq!(image::guess_format(&f.bytes).ok(), Some(ImageFormat::Jpeg));
    let (_, _, bw, bh) = browser_pages::BOX;
    let f = post_file(&server, Some(&key), "/screenshot", &json!({"url": page, "selector": "#box"})).await;
    completed_item(&server, &f, 1_000).await;
    let img = image::load_from_memory(&f.bytes).expect("an image");
    assert_eq!((img.width(), img.height()), (bw, bh));

    // PDF: A4 landscape, a real PDF whose page is A4 turned.
    let f = post_file(
        &server,
        Some(&key),
        "/pdf",
        &json!({"url": page, "format": "A4", "landscape": true, "printBackground": true}),
    )
    .await;
    let item = completed_item(&server, &f, 1_000).await;
    assert_eq!(f.content_type, "application/pdf");
    assert!(f.bytes.starts_with(b"%PDF-"), "not a PDF: {:?}", &f.bytes[..f.bytes.len().min(16)]);
    let (w, h) = pdf_page_points(&f.bytes).unwrap_or_else(|| panic!("no MediaBox in the PDF"));
    assert!((w - 842.0).abs() < 2.0 && (h - 595.0).abs() < 2.0, "A4 landscape is 842 x 595 pt, got {w} x {h}");
    assert_eq!(item["script"], json!("pdf"), "{item}");

    // Content: the DOM after the page's script ran.
    let f = post_file(&server, Some(&key), "/content", &json!({"url": target.url("/options")})).await;
    completed_item(&server, &f, 800).await;
    assert!(f.content_type.starts_with("text/html"), "{}", f.content_type);
    let html = String::from_utf8(f.bytes.clone()).expect("UTF-8");
    assert!(html.contains(browser_pages::OPTIONS_JS_TEXT), "{html}");

    // What Browserless users pass: the user agent, extra headers and cookies
    // reach the page's server; the page sees the user agent too.
    let f = post_file(
        &server,
        Some(&key),
        "/content",
        &json!({"url": target.url("/facts"), "userAgent": "grid-one-call/1.0", "headers": {"x-probe": "seen"},
                "cookies": [{"name": "session", "value": "abc"}], "timeoutMs": 20000}),
    )
    .await;
    completed_item(&server, &f, 800).await;
    let seen = target.requests("/facts").pop().expect("the page was asked for");
    assert_eq!(seen.header("user-agent"), Some("grid-one-call/1.0"), "{seen:?}");
    assert_eq!(seen.header("x-probe"), Some("seen"), "{seen:?}");
    assert_eq!(seen.header("cookie"), Some("session=abc"), "{seen:?}");
    assert!(String::from_utf8_lossy(&f.bytes).contains("grid-one-call/1.0"), "the page's navigator.userAgent");

    // Exactly six items were charged (four at 1,000, two at 800), nothing is left reserved.
    let after = server.get_as(Some(&key), "/account").await;
    assert_eq!(after.json["creditMicros"].as_i64(), Some(before - 4 * 1_000 - 2 * 800), "{after}");
    assert_eq!(after.json["reservedMicros"], json!(0), "{after}");
}

/// The first page's MediaBox in points, from the PDF's text.
fn pdf_page_points(pdf: &[u8]) -> Option<(f64, f64)> {
    let text = String::from_utf8_lossy(pdf);
    let at = text.find("/MediaBox")?;
    let open = at + text[at..].find('[')? + 1;
    let close = open + text[open..].find(']')?;
    let n: Vec<f64> = text[open..close].split_whitespace().filter_map(|s| s.parse().ok()).collect();
    match n[..] {
        [x0, y0, x1, y1] => Some((x1 - x0, y1 - y0)),
        _ => None,
    }
}

#[tokio::test]
async fn refusals_are_json_and_failures_release_the_reservation() {
    let target = Target::start();
    let server = GridServer::start(opts());
    let key = server.api_key().to_string();
    let before = credit(&server, &key).await;
    let page = target.url("/page/1");
    let refused = |f: &File| Resp {
        status: f.status,
        headers: f.headers.clone(),
        text: String::from_utf8_lossy(&f.bytes).into_owned(),
        json: f.json(),
    };

    // Bad bodies: 400 naming every field, nothing reserved.
    let f = post_file(
        &server,
        Some(&key),
        "/screenshot",
        &json!({"url": page, "bogus": 1, "quality": 500, "landscape": true, "viewport": {"width": 10}}),
    )
    .await;
    let r = refused(&f);
    assert_error(&r, 400, "invalid capture body");
    let detail = r.json["detail"].to_string();
    for part in [
        "bogus: unknown field",
        "quality: must be a whole number",
        "landscape: not a parameter of capture",
        "viewport.",
    ] {
        assert!(detail.contains(part), "{part} in {detail}");
    }
    let r = refused(&post_file(&server, Some(&key), "/pdf", &json!({"format": "A9"})).await);
    assert_error(&r, 400, "invalid capture body");
    assert!(r.json["detail"].to_string().contains("url: is required"), "{r}");
    assert!(r.json["detail"].to_string().contains("format: must be one of"), "{r}");
    let r = refused(&post_file(&server, Some(&key), "/content", &json!({"url": "file:///etc/passwd"})).await);
    assert_error(&r, 400, "invalid capture body");
    let r = server.request(reqwest::Method::POST, "/screenshot", Some(&key), None).await;
    assert_eq!(r.status, 400, "{r}");

    // No credential: 401.
    let r = refused(&post_file(&server, None, "/screenshot", &json!({"url": page})).await);
    assert_error(&r, 401, "unauthorized");

    // Too little credit: 402, nothing runs.
    let (_, poor) = server.create_account("poor", 500);
    let hits = target.hits("/page/1");
    let r = refused(&post_file(&server, Some(&poor), "/screenshot", &json!({"url": page})).await);
    assert_error(&r, 402, "insufficient_credit");
    assert_eq!(r.json["requiredMicros"], json!(1_000), "{r}");
    assert_eq!(target.hits("/page/1"), hits, "a refused call reaches no page");

    // A target that fails: 502 with the reason and the item, released.
    let f = post_file(&server, Some(&key), "/screenshot", &json!({"url": target.url("/status/500")})).await;
    let r = refused(&f);
    assert_error(&r, 502, "capture failed");
    assert!(r.json["reason"].as_str().is_some_and(|s| s.contains("500")), "{r}");
    let item = server.item(r.json["jobId"].as_str().expect("jobId")).await;
    assert_eq!(
        (item["state"].clone(), item["attemptsMade"].clone()),
        (json!("failed"), json!(1)),
        "tried once: {item}"
    );

    // A target that never answers: a JSON error within the budget, never a hang.
    let f =
        post_file(&server, Some(&key), "/screenshot", &json!({"url": target.url("/hang"), "timeoutMs": 1000})).await;
    let r = refused(&f);
    assert_error(&r, 502, "capture failed");
    assert!(r.json["reason"].as_str().is_some_and(|s| s.contains("1000")), "{r}");

    // A selector the page lacks: the page refused a parameter (422).
    let f = post_file(&server, Some(&key), "/screenshot", &json!({"url": page, "selector": "#missing"})).await;
    let r = refused(&f);
    assert_error(&r, 422, "capture refused");
    assert!(r.json["reason"].as_str().is_some_and(|s| s.contains("#missing")), "{r}");

    // Every failure released its reservation: nothing was charged.
    let after = server.get_as(Some(&key), "/account").await;
    assert_eq!(after.json["creditMicros"].as_i64(), Some(before), "{after}");
    assert_eq!(after.json["reservedMicros"], json!(0), "{after}");

    // Too many calls with one credential: 429 with retry-after, as every route.
    let limited = GridServer::start(ServerOptions {
        extra_args: vec!["--rate-limit-per-second".into(), "1".into(), "--rate-limit-burst".into(), "1".into()],
        ..Default::default()
    });
    let mut statuses = vec![];
    for _ in 0..5 {
        let f = post_file(&limited, Some(limited.api_key()), "/screenshot", &json!({"bogus": 1})).await;
        if f.status == 429 {
            assert_error(&refused(&f), 429, "rate_limited");
            assert!(!f.header("retry-after").is_empty());
        }
        statuses.push(f.status);
    }
    assert!(statuses.contains(&429) && statuses[0] == 400, "{statuses:?}");
    drop(limited);

    // The private-network guard: a loopback URL is refused before anything runs.
    let guarded = GridServer::start(ServerOptions { allow_private_networks: false, ..opts() });
    let hits = target.total_hits();
    for path in ["/screenshot", "/pdf", "/content"] {
        let r = refused(&post_file(&guarded, Some(guarded.api_key()), path, &json!({"url": page})).await);
        assert_error(&r, 400, "invalid capture body");
        assert!(r.json["detail"].to_string().contains("url: destination refused"), "{r}");
    }
    // A name that resolves to loopback is refused by the browser's egress.
    let by_name = page.replace("127.0.0.1", "localhost");
    let r = refused(&post_file(&guarded, Some(guarded.api_key()), "/screenshot", &json!({"url": by_name})).await);
    assert_error(&r, 422, "capture refused");
    assert_eq!(target.total_hits(), hits, "the guarded grid reached no local page");
}

#[tokio::test]
async fn the_sdk_and_the_cli_take_one_call_captures_and_batches_print_pdfs() {
    let target = Target::start();
    let server = GridServer::start(opts());
    let page = target.url("/options");

    // SDK.
    let client = server.client();
    let options = json!({"viewport": {"width": 800, "height": 600}, "format": "webp"});
    let shot = client.screenshot(&page, options.as_object().unwrap()).await.expect("screenshot");
    assert_eq!(shot.content_type, "image/webp");
    assert_eq!(shot.charged_micros, 1_000);
    let img = image::load_from_memory_with_format(&shot.bytes, ImageFormat::WebP).expect("webp");
    assert_eq!((img.width(), img.height()), (800, 600));
    let pdf = client.pdf(&page, json!({"format": "Letter"}).as_object().unwrap()).await.expect("pdf");
    assert!(pdf.bytes.starts_with(b"%PDF-"));
    let content = client.content(&page, &Default::default()).await.expect("content");
    assert!(String::from_utf8_lossy(&content.bytes).contains(browser_pages::OPTIONS_JS_TEXT));
    let e = client.screenshot(&page, json!({"fullpage": true}).as_object().unwrap()).await.unwrap_err();
    assert!(e.to_string().contains("invalid capture body"), "{e}");

    // CLI.
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("page.png");
    let out = server.cli(&[
        "shot",
        &page,
        "-o",
        png.to_str().unwrap(),
        "--param",
        "viewport={\"width\": 300, \"height\": 200}",
    ]);
    assert!(out.success(), "{out:?}");
    let img = image::open(&png).expect("the CLI wrote a PNG");
    assert_eq!((img.width(), img.height()), (300, 200));
    assert!(out.stderr.contains("charged 1000 micro-euros"), "{out:?}");
    let pdf_path = dir.path().join("page.pdf");
    let out = server.cli(&["pdf", &page, "-o", pdf_path.to_str().unwrap(), "--param", "format=A4", "--json"]);
    assert!(out.success(), "{out:?}");
    assert!(std::fs::read(&pdf_path).unwrap().starts_with(b"%PDF-"));
    let summary: Value = serde_json::from_str(out.stdout.trim()).expect("a JSON summary");
    assert_eq!(summary["contentType"], json!("application/pdf"), "{summary}");
    let out = server.cli(&["content", &page]);
    assert!(out.success() && out.stdout.contains(browser_pages::OPTIONS_JS_TEXT), "{out:?}");
    // Options are checked before anything is sent.
    let out = server.cli(&["shot", &page, "--param", "landscape=true"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("landscape: not a parameter of capture"), "{out:?}");

    // The pdf script in a batch: one PDF per item.
    let batch = server
        .submit_as(
            server.api_key(),
            &json!({"urls": [page, target.url("/page/2")], "script": "pdf", "params": {"format": "A5"}}),
        )
        .await;
    let done = server.wait_batch_done(&batch, DONE).await;
    assert_eq!(done["counts"]["completed"], json!(2), "{done}");
    let id = done["jobs"][0]["jobId"].as_str().unwrap().to_string();
    let url = server.artifact_url(&id, "pdf").await;
    let r = reqwest::Client::builder().no_proxy().build().unwrap().get(&url).send().await.unwrap();
    assert_eq!(r.headers()["content-type"], "application/pdf");
    let bytes = r.bytes().await.unwrap();
    let (w, h) = pdf_page_points(&bytes).expect("MediaBox");
    assert!((w - 420.0).abs() < 2.0 && (h - 595.0).abs() < 2.0, "A5 is 420 x 595 pt, got {w} x {h}");
}

/// A one-call capture whose node is killed mid-attempt is not run again
/// with nobody to answer: the restarted node fails its item (the recovery
/// that puts a batch's items back in the queue) and releases its
/// reservation; nothing is charged and the page is not asked for again.
#[tokio::test]
async fn a_one_call_capture_cut_by_a_crash_fails_released_instead_of_running_unattended() {
    let target = Target::start();
    let mut server = GridServer::start(opts());
    let key = server.api_key().to_string();
    let before = credit(&server, &key).await;
    let (base, page) = (server.base_url(), target.url("/gate/crash"));
    let call = tokio::spawn({
        let key = key.clone();
        async move {
            let client = reqwest::Client::builder().no_proxy().build().unwrap();
            client
                .post(format!("{base}/screenshot"))
                .header("x-api-key", key)
                .json(&json!({"url": page, "timeoutMs": 120000}))
                .send()
                .await
        }
    });
    // The browser has asked for the page: the attempt is under way.
    wait_until("the page asked for", DONE, || match target.hits("/gate/crash") {
        0 => Err("no request".to_string()),
        _ => Ok(()),
    })
    .await;
    server.kill9();
    assert!(call.await.unwrap().is_err(), "the caller's connection died with the node");
    server.restart();
    let reserves = server.get_as(Some(&key), "/account?kind=reserve").await;
    let batch = reserves.json["ledger"][0]["subject"].as_str().unwrap_or_else(|| panic!("{reserves}")).to_string();
    let view = server.batch(&batch).await;
    let id = view["jobs"][0]["jobId"].as_str().unwrap().to_string();
    let (item, seen) = server.wait_item_final(&id, DONE).await;
    assert_eq!(item["state"], json!("failed"), "states {seen:?}: {item}");
    assert!(item["failedReason"].as_str().is_some_and(|r| r.contains("stopped before it ended")), "{item}");
    let after = server.get_as(Some(&key), "/account").await;
    assert_eq!(after.json["creditMicros"].as_i64(), Some(before), "nothing charged: {after}");
    assert_eq!(after.json["reservedMicros"], json!(0), "{after}");
    // Opening the gate now would answer any attempt still waiting: none is.
    target.open_gate();
    let r = server.post_as(Some(&key), &format!("/jobs/{id}/retry"), None).await;
    assert_error(&r, 409, "published terminal failures are immutable and cannot be retried");
    assert_eq!(target.hits("/gate/crash"), 1, "the page was asked for once, by the attempt the crash cut");
}

/// A name that does not resolve and a port nothing listens on are named
/// as such (the egress proxy's reasons, docs/captures.md), for http and
/// https, on a one-call /content and on batch items of the fetch and
/// capture scripts: never as "target answered HTTP 502", the egress proxy's
/// own answer blamed on the site.
#[tokio::test]
async fn names_that_do_not_resolve_and_refused_ports_are_named_not_blamed_on_the_target() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let server = GridServer::start(opts());
    let key = server.api_key().to_string();
    let cases = [
        ("http://nothing.invalid/".to_string(), "nothing.invalid does not resolve (DNS: ".to_string()),
        ("https://nothing.invalid/".to_string(), "nothing.invalid does not resolve (DNS: ".to_string()),
        (format!("http://127.0.0.1:{port}/"), format!("connection to 127.0.0.1:{port} refused")),
        (format!("https://127.0.0.1:{port}/"), format!("connection to 127.0.0.1:{port} refused")),
    ];
    for (url, why) in &cases {
        let f = post_file(&server, Some(&key), "/content", &json!({"url": url})).await;
        let r = Resp {
            status: f.status,
            headers: f.headers.clone(),
            text: String::from_utf8_lossy(&f.bytes).into_owned(),
            json: f.json(),
        };
        assert_error(&r, 502, "capture failed");
        let reason = r.json["reason"].as_str().unwrap_or_default();
        assert!(reason.contains(why.as_str()) && !reason.contains("HTTP 502"), "{url}: {r}");
    }
    for script in ["fetch", "capture"] {
        let urls: Vec<&str> = cases.iter().map(|(u, _)| u.as_str()).collect();
        let id = server.submit_as(&key, &json!({"urls": urls, "script": script})).await;
        let done = server.wait_batch_done(&id, DONE).await;
        assert_eq!(done["counts"]["failed"], json!(cases.len()), "{script}: {done}");
        for (url, why) in &cases {
            let job = done["jobs"].as_array().into_iter().flatten().find(|j| j["url"] == json!(url));
            let reason = job.map(|j| j["failedReason"].as_str().unwrap_or_default()).unwrap_or_default();
            assert!(reason.contains(why.as_str()) && !reason.contains("HTTP 502"), "{script} {url}: {done}");
        }
    }
}
