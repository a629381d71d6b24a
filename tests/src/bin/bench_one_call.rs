//! One-call captures against Browserless and against the machine's limit,
//! in one run, same local pages (each runs a little JavaScript), same
//! concurrency, same screenshot settings (800 x 600 PNG, ready at `load`).
//! Everything stays on 127.0.0.1.
//!
//!     bench_one_call [--items N] [--browsers B] [--pages P] [--timeout-secs S]
//!
//! Browserless is reached at `BROWSERLESS_URL` (default http://127.0.0.1:3999).
//!
//! Sides, each after a warm-up of one request per concurrent caller:
//! - `bare CDP loop`: B `chromium-headless-shell` processes started here, no
//!   grid, no queue, no metering, no sandbox of ours: C = B x P callers, each
//!   on its own DevTools connection, each page a fresh browser context
//!   (create, navigate, wait for `load`, screenshot, dispose), as the grid's
//!   items are. The machine's limit for this work.
//! - `grid /screenshot`: C callers of POST /screenshot (profile
//!   `native-headless-browser/v3`, the same headless shell), `grid-server
//!   --browsers B --pages-per-browser P`.
//! - `grid batch`: one `capture` batch of the N pages on the same server.
//! - `grid /pdf` and `browserless /chromium/pdf`: the same pages printed.
//! - `browserless /chromium/screenshot`: C callers (start it with
//!   `CONC=C bash ../shared/peers/browserless.sh`).
//!
//! Prints per side: pages per minute, p50 and p95 of a call's latency; then
//! the ratios the goals are stated in (docs/performance.md) and one JSON line.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use grid_tests::cdp::Cdp;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::Target;

struct Config {
    items: usize,
    browsers: u32,
    pages: u32,
    browserless: String,
    timeout: Duration,
}

fn parse_args() -> Config {
    use grid_tests::bench::{parse, positive};
    let f = parse(
        "bench_one_call",
        &[positive("--items", 200), positive("--browsers", 2), positive("--pages", 2), positive("--timeout-secs", 900)],
    );
    Config {
        items: f.get("--items") as usize,
        browsers: f.get("--browsers") as u32,
        pages: f.get("--pages") as u32,
        browserless: std::env::var("BROWSERLESS_URL").unwrap_or_else(|_| "http://127.0.0.1:3999".into()),
        timeout: Duration::from_secs(f.get("--timeout-secs")),
    }
}

/// One side's run: how many calls succeeded, in what time, each call's latency.
#[derive(Debug, Default)]
struct Run {
    ok: usize,
    seconds: f64,
    latencies: Vec<Duration>,
}

impl Run {
    fn per_minute(&self) -> f64 {
        self.ok as f64 * 60.0 / self.seconds.max(1e-9)
    }

    fn percentile(&self, p: f64) -> f64 {
        let mut l: Vec<f64> = self.latencies.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        if l.is_empty() {
            return f64::NAN;
        }
        l.sort_by(f64::total_cmp);
        l[((l.len() as f64 - 1.0) * p).round() as usize]
    }

    fn report(&self, name: &str, items: usize) -> Value {
        println!(
            "{name}: {}/{items} in {:.1} s = {:.0}/min, p50 {:.0} ms, p95 {:.0} ms",
            self.ok,
            self.seconds,
            self.per_minute(),
            self.percentile(0.5),
            self.percentile(0.95)
        );
        json!({"ok": self.ok, "seconds": self.seconds, "perMinute": self.per_minute(),
               "p50Ms": self.percentile(0.5), "p95Ms": self.percentile(0.95)})
    }
}

/// Runs `call` for every URL with `concurrency` callers; each caller gets
/// its index (its own connection, where it has one). `call` answers whether
/// the page came back whole.
async fn drive<S, F, Fut>(urls: &[String], concurrency: usize, deadline: Instant, mut state: Vec<S>, call: F) -> Run
where
    S: Send + 'static,
    F: Fn(S, String) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = (S, bool)> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let urls = Arc::new(urls.to_vec());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let Some(mut s) = state.pop() else { break };
        let (next, urls, call) = (next.clone(), urls.clone(), call.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(url) = urls.get(i) else { break };
                if Instant::now() >= deadline {
                    break;
                }
                let t = Instant::now();
                let (back, ok) = call(s, url.clone()).await;
                s = back;
                if ok {
                    done.push(t.elapsed());
                }
            }
            done
        }));
    }
    let mut run = Run::default();
    for t in tasks {
        run.latencies.extend(t.await.expect("a caller"));
    }
    run.seconds = started.elapsed().as_secs_f64();
    run.ok = run.latencies.len();
    run
}

/// A `chromium-headless-shell` of its own, on a free DevTools port.
struct Shell {
    child: Child,
    ws: String,
    _dir: tempfile::TempDir,
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_shell() -> Shell {
    let dir = tempfile::tempdir().expect("a profile dir");
    let port = grid_tests::server::free_port();
    let child = Command::new("chromium-headless-shell")
        .args([
            format!("--remote-debugging-port={port}"),
            format!("--user-data-dir={}", dir.path().display()),
            "--no-sandbox".into(),
            "--no-first-run".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "about:blank".into(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("chromium-headless-shell (Debian package chromium-headless-shell): {e}"));
    // Held from here, so the shell is killed and reaped on every way out.
    let mut shell = Shell { child, ws: String::new(), _dir: dir };
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let what = "chromium-headless-shell opening its DevTools port";
    shell.ws = grid_tests::wait::wait_for(what, Duration::from_secs(30), || async {
        grid_tests::cdp::ws_url(&http, &format!("http://127.0.0.1:{port}")).await
    })
    .await;
    shell
}

/// One page as the bare loop takes it: a fresh context, 800 x 600, `load`,
/// a PNG screenshot, the context disposed.
async fn bare_page(cdp: &mut Cdp, url: &str) -> Result<bool, String> {
    let context = cdp.call("Target.createBrowserContext", json!({}), None).await?;
    let context = context["browserContextId"].as_str().unwrap_or_default().to_string();
    let (_, session) = cdp.blank_page(Some(&context)).await?;
    let s = Some(session.as_str());
    cdp.call("Page.enable", json!({}), s).await?;
    cdp.call(
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 800, "height": 600, "deviceScaleFactor": 1, "mobile": false}),
        s,
    )
    .await?;
    cdp.call("Page.navigate", json!({"url": url}), s).await?;
    let loaded = cdp.wait_event("Page.loadEventFired", Duration::from_secs(30), |_| true).await.is_some();
    let shot = cdp.call("Page.captureScreenshot", json!({"format": "png"}), s).await?;
    cdp.call("Target.disposeBrowserContext", json!({"browserContextId": context}), None).await?;
    Ok(loaded && shot["data"].as_str().is_some_and(|d| d.starts_with("iVBORw0KGgo")))
}

fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(120)).build().unwrap()
}

/// POSTs `body(url)` to `endpoint`; whether the answer starts with `magic`.
async fn post_file(client: &reqwest::Client, endpoint: &str, key: Option<&str>, body: Value, magic: &[u8]) -> bool {
    let mut req = client.post(endpoint).json(&body);
    if let Some(key) = key {
        req = req.header("x-api-key", key);
    }
    match req.send().await {
        Ok(r) if r.status().is_success() => r.bytes().await.is_ok_and(|b| b.starts_with(magic)),
        Ok(r) => {
            eprintln!("{endpoint}: {} {}", r.status(), r.text().await.unwrap_or_default());
            false
        }
        Err(e) => {
            eprintln!("{endpoint}: {e}");
            false
        }
    }
}

const PNG: &[u8] = b"\x89PNG";
const PDF: &[u8] = b"%PDF-";

#[tokio::main]
async fn main() {
    let c = parse_args();
    let deadline = Instant::now() + c.timeout;
    let conc = (c.browsers * c.pages) as usize;
    let target = Target::start();
    let urls: Vec<String> = (0..c.items).map(|n| target.url(&format!("/js/{n}"))).collect();
    let warm: Vec<String> = (0..conc).map(|n| target.url(&format!("/js/warm{n}"))).collect();
    let mut out = json!({"items": c.items, "browsers": c.browsers, "pagesPerBrowser": c.pages, "concurrency": conc});

    // ----- the bare CDP loop -----
    let mut shells = Vec::new();
    for _ in 0..c.browsers {
        shells.push(start_shell().await);
    }
    let mut conns = Vec::new();
    for i in 0..conc {
        conns.push(Cdp::connect(&shells[i % shells.len()].ws).await.expect("a DevTools connection"));
    }
    let bare = |mut cdp: Cdp, url: String| async move {
        let ok = match bare_page(&mut cdp, &url).await {
            Ok(ok) => ok,
            Err(e) => {
                eprintln!("bare: {e}");
                false
            }
        };
        (cdp, ok)
    };
    let conns = drive(&warm, conc, deadline, conns, bare).await;
    let _ = conns;
    let mut conns = Vec::new();
    for i in 0..conc {
        conns.push(Cdp::connect(&shells[i % shells.len()].ws).await.expect("a DevTools connection"));
    }
    let bare_run = drive(&urls, conc, deadline, conns, bare).await;
    out["bareCdp"] = bare_run.report("bare CDP loop (headless shell)", c.items);
    drop(shells);

    // ----- the grid -----
    let server = GridServer::start(ServerOptions {
        workers: Some(conc as u32),
        // The server's default spare browser, as operators run it.
        spare_browsers: None,
        initial_credit_micros: Some(1_000_000_000),
        extra_args: vec![
            "--browsers".into(),
            c.browsers.to_string(),
            "--pages-per-browser".into(),
            c.pages.to_string(),
        ],
        ..Default::default()
    });
    let key = server.api_key().to_string();
    let client = http();
    let shot_endpoint = format!("{}/screenshot", server.base_url());
    let shot = {
        let (client, endpoint, key) = (client.clone(), shot_endpoint.clone(), key.clone());
        move |(), url: String| {
            let (client, endpoint, key) = (client.clone(), endpoint.clone(), key.clone());
            async move {
                let body = json!({"url": url, "profileId": "native-headless-browser/v3",
                                  "viewport": {"width": 800, "height": 600}});
                ((), post_file(&client, &endpoint, Some(&key), body, PNG).await)
            }
        }
    };
    drive(&warm, conc, deadline, vec![(); conc], shot.clone()).await;
    let one_call = drive(&urls, conc, deadline, vec![(); conc], shot).await;
    out["gridScreenshot"] = one_call.report("grid POST /screenshot", c.items);

    let started = Instant::now();
    let batch = server
        .submit_as(
            &key,
            &json!({"urls": urls, "script": "capture", "profileId": "native-headless-browser/v3",
                    "params": {"viewport": {"width": 800, "height": 600}}}),
        )
        .await;
    let done = server.wait_batch_done(&batch, deadline.saturating_duration_since(Instant::now())).await;
    let batch_run = Run {
        ok: done["counts"]["completed"].as_u64().unwrap_or(0) as usize,
        seconds: started.elapsed().as_secs_f64(),
        latencies: vec![],
    };
    println!(
        "grid batch: {}/{} in {:.1} s = {:.0}/min",
        batch_run.ok,
        c.items,
        batch_run.seconds,
        batch_run.per_minute()
    );
    out["gridBatch"] = json!({"ok": batch_run.ok, "seconds": batch_run.seconds, "perMinute": batch_run.per_minute()});

    let pdf_endpoint = format!("{}/pdf", server.base_url());
    let pdf = {
        let (client, endpoint, key) = (client.clone(), pdf_endpoint.clone(), key.clone());
        move |(), url: String| {
            let (client, endpoint, key) = (client.clone(), endpoint.clone(), key.clone());
            async move {
                let body = json!({"url": url, "profileId": "native-headless-browser/v3"});
                ((), post_file(&client, &endpoint, Some(&key), body, PDF).await)
            }
        }
    };
    let grid_pdf = drive(&urls, conc, deadline, vec![(); conc], pdf).await;
    out["gridPdf"] = grid_pdf.report("grid POST /pdf", c.items);
    drop(server);

    // ----- Browserless -----
    let base = c.browserless.trim_end_matches('/').to_string();
    let probe = client.get(format!("{base}/pressure?token=peer")).send().await;
    if !probe.is_ok_and(|r| r.status().is_success()) {
        eprintln!(
            "bench: Browserless not reachable at {base}; start it with CONC={conc} bash ../shared/peers/browserless.sh"
        );
        std::process::exit(1);
    }
    let bl = |path: &'static str, magic: &'static [u8]| {
        let (client, endpoint) = (client.clone(), format!("{base}{path}?token=peer"));
        move |(), url: String| {
            let (client, endpoint) = (client.clone(), endpoint.clone());
            async move {
                let mut body = json!({"url": url, "gotoOptions": {"waitUntil": "load"}});
                if magic == PNG {
                    body["options"] = json!({"type": "png"});
                    body["viewport"] = json!({"width": 800, "height": 600});
                }
                ((), post_file(&client, &endpoint, None, body, magic).await)
            }
        }
    };
    drive(&warm, conc, deadline, vec![(); conc], bl("/chromium/screenshot", PNG)).await;
    let bl_shot = drive(&urls, conc, deadline, vec![(); conc], bl("/chromium/screenshot", PNG)).await;
    out["browserlessScreenshot"] = bl_shot.report("browserless /chromium/screenshot", c.items);
    let bl_pdf = drive(&urls, conc, deadline, vec![(); conc], bl("/chromium/pdf", PDF)).await;
    out["browserlessPdf"] = bl_pdf.report("browserless /chromium/pdf", c.items);

    // ----- the goals' ratios -----
    let ratios = json!({
        "screenshotThroughputVsBrowserless": one_call.per_minute() / bl_shot.per_minute(),
        "screenshotP50VsBrowserless": one_call.percentile(0.5) / bl_shot.percentile(0.5),
        "pdfThroughputVsBrowserless": grid_pdf.per_minute() / bl_pdf.per_minute(),
        "pdfP50VsBrowserless": grid_pdf.percentile(0.5) / bl_pdf.percentile(0.5),
        "oneCallVsBareCdp": one_call.per_minute() / bare_run.per_minute(),
        "batchVsBareCdp": batch_run.per_minute() / bare_run.per_minute(),
    });
    for (name, v) in ratios.as_object().unwrap() {
        println!("ratio {name}: {:.2}", v.as_f64().unwrap_or(f64::NAN));
    }
    out["ratios"] = ratios;
    println!("{out}");
}
