//! Fair share between accounts, in one run (docs/limits.md, "Fair share
//! between accounts"): account B's single `/content` of a page that takes
//! `--page-ms` to answer, timed `--calls` times one after another, alone,
//! then behind account A's burst (A keeps `--burst` calls of the same pages
//! in flight), then behind A's batch of `--batch` capture items. Prints B's
//! p50 and p95 in each, and their ratios to B alone: in turn, B waits about
//! one of A's items (the page's time plus a browser's start), where first in,
//! first out made it wait for A's whole queue.
//!
//!     bench_fair_share [--calls N] [--burst N] [--batch N] [--page-ms MS] [--spare-browsers N]
//!
//! `--spare-browsers` is the server's flag of that name (default 1; 0 shows
//! the pool without a spare: B waits for one of A's browsers to empty and a
//! new one to start).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use grid_tests::bench::{count, parse, positive};
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::Target;

fn percentile(samples: &[Duration], p: f64) -> f64 {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    ms.get(((ms.len().max(1) - 1) as f64 * p).round() as usize).copied().unwrap_or(f64::NAN)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(900)).build().expect("client")
}

/// One POST /content, timed; panics unless 200.
async fn content(http: &reqwest::Client, base: &str, key: &str, url: &str) -> Duration {
    let t = Instant::now();
    let r = http.post(format!("{base}/content")).header("x-api-key", key).json(&json!({"url": url})).send().await;
    let status = r.map(|r| r.status().as_u16()).unwrap_or_else(|e| panic!("POST /content {url}: {e}"));
    assert_eq!(status, 200, "POST /content {url}");
    t.elapsed()
}

/// B's calls, one after another; for each, also prints how long it waited
/// before its page was asked for (the pool's turn and a browser's start)
/// and how many of A's pages were asked for meanwhile.
async fn b_calls(
    server: &GridServer,
    key: &str,
    target: &Target,
    calls: usize,
    page_ms: u64,
    tag: &str,
) -> Vec<Duration> {
    let http = client();
    let mut out = Vec::with_capacity(calls);
    for i in 0..calls {
        let name = format!("b{tag}{i}");
        let sent = Instant::now();
        let before = target.holds().len();
        out.push(content(&http, &server.base_url(), key, &target.url(&format!("/hold/{name}?ms={page_ms}"))).await);
        let holds = target.holds();
        if let Some(place) = holds.iter().position(|h| h.tag == name) {
            let waited = holds[place].arrived.saturating_duration_since(sent);
            println!(
                "  {name}: {} ms in all, {} ms before its page was asked for, {} of A's pages asked for meanwhile",
                out[i].as_millis(),
                waited.as_millis(),
                place.saturating_sub(before)
            );
        }
    }
    out
}

#[tokio::main]
async fn main() {
    let f = parse(
        "bench_fair_share",
        &[
            positive("--calls", 10),
            positive("--burst", 48),
            positive("--batch", 150),
            positive("--page-ms", 1500),
            count("--spare-browsers", 1),
        ],
    );
    let spares = f.get("--spare-browsers");
    let (calls, burst, batch, page_ms) =
        (f.get("--calls") as usize, f.get("--burst") as usize, f.get("--batch") as usize, f.get("--page-ms"));
    let target = Target::start();
    let server = GridServer::start(ServerOptions {
        initial_credit_micros: Some(1_000_000_000),
        spare_browsers: Some(spares as u32),
        ..ServerOptions::default()
    });
    let (_, b_key) = server.create_account("b", 1_000_000_000);
    // A warm pool for B alone: its first call starts a browser either way.
    b_calls(&server, &b_key, &target, 1, 1, "warm").await;

    let alone = b_calls(&server, &b_key, &target, calls, page_ms, "alone").await;

    // A's burst: `burst` calls kept in flight until B is done.
    let stop = Arc::new(AtomicBool::new(false));
    let mut a_tasks = vec![];
    for n in 0..burst {
        let (stop, base, key, url) = (
            stop.clone(),
            server.base_url(),
            server.api_key().to_string(),
            target.url(&format!("/hold/a{n}?ms={page_ms}")),
        );
        a_tasks.push(tokio::spawn(async move {
            let http = client();
            while !stop.load(Ordering::Relaxed) {
                content(&http, &base, &key, &url).await;
            }
        }));
    }
    // B starts once A's burst fills the pool.
    while target.holds().iter().filter(|h| h.tag.starts_with('a')).count() < 8 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let behind_burst = b_calls(&server, &b_key, &target, calls, page_ms, "burst").await;
    stop.store(true, Ordering::Relaxed);
    for t in a_tasks {
        let _ = t.await;
    }

    let urls: Vec<String> = (0..batch).map(|i| target.url(&format!("/hold/c{i}?ms={page_ms}"))).collect();
    server.submit_as(server.api_key(), &json!({"urls": urls, "script": "capture"})).await;
    while target.holds().iter().filter(|h| h.tag.starts_with('c')).count() < 8 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let behind_batch = b_calls(&server, &b_key, &target, calls, page_ms, "batch").await;

    let (a50, a95) = (percentile(&alone, 0.5), percentile(&alone, 0.95));
    let (u50, u95) = (percentile(&behind_burst, 0.5), percentile(&behind_burst, 0.95));
    let (t50, t95) = (percentile(&behind_batch, 0.5), percentile(&behind_batch, 0.95));
    println!("B alone:               p50 {a50:.0} ms, p95 {a95:.0} ms ({calls} calls of {page_ms} ms pages, {spares} spare browsers)");
    println!("B behind A's burst:    p50 {u50:.0} ms, p95 {u95:.0} ms (A keeps {burst} calls in flight)");
    println!("B behind A's batch:    p50 {t50:.0} ms, p95 {t95:.0} ms ({batch} capture items)");
    println!("ratio to alone (p95):  burst {:.2}x, batch {:.2}x", u95 / a95, t95 / a95);
    println!(
        "{}",
        json!({"calls": calls, "pageMs": page_ms, "spareBrowsers": spares, "aloneP50Ms": a50, "aloneP95Ms": a95,
               "burstP50Ms": u50, "burstP95Ms": u95, "batchP50Ms": t50, "batchP95Ms": t95,
               "burstRatioP95": u95 / a95, "batchRatioP95": t95 / a95})
    );
}
