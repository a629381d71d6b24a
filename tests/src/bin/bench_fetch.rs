//! Fetch throughput of the grid against a plain HTTP client, same URLs, same
//! concurrency, same run. Everything stays on 127.0.0.1.
//!
//!     bench_fetch [--items N] [--workers W] [--timeout-secs S]
//!
//! Starts a local target and `grid-server serve --allow-private-networks
//! --workers W` (GRID_SERVER_BIN, else target/debug/grid-server; the bench
//! script points it at the release build), submits N fetch URLs in batches
//! of 1,000 and times them until every batch is done. Then fetches the same
//! N URLs with reqwest, W at a time. Prints both rates and grid/baseline.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use grid_tests::bench::positive;
use grid_tests::http::http_client;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::Target;

struct Config {
    items: usize,
    workers: u32,
    timeout: Duration,
}

#[tokio::main]
async fn main() {
    let flags = grid_tests::bench::parse(
        "bench_fetch",
        &[positive("--items", 2000), positive("--workers", 16), positive("--timeout-secs", 600)],
    );
    let config = Config {
        items: flags.get("--items") as usize,
        workers: flags.get("--workers") as u32,
        timeout: Duration::from_secs(flags.get("--timeout-secs")),
    };
    let deadline = Instant::now() + config.timeout;
    let target = Target::start();
    let urls: Vec<String> = (0..config.items).map(|n| target.url(&format!("/page/{n}"))).collect();

    let server = GridServer::start(ServerOptions {
        workers: Some(config.workers),
        initial_credit_micros: Some(1_000_000_000),
        ..Default::default()
    });
    eprintln!("bench: grid-server on {}, {} items, {} workers", server.base_url(), config.items, config.workers);

    let grid_started = Instant::now();
    let mut batches = Vec::new();
    for chunk in urls.chunks(1000) {
        batches.push(server.submit_fetch(chunk).await);
    }
    let mut completed = 0;
    let mut failed = 0;
    let mut pending = batches.clone();
    while !pending.is_empty() {
        let mut still = Vec::new();
        for id in pending {
            let b = server.batch(&id).await;
            let c = b["counts"]["completed"].as_u64().unwrap_or(0);
            let f = b["counts"]["failed"].as_u64().unwrap_or(0);
            if Some(c + f) == b["total"].as_u64() {
                completed += c;
                failed += f;
            } else {
                still.push(id);
            }
        }
        pending = still;
        if !pending.is_empty() {
            if Instant::now() >= deadline {
                server.fail(&format!("bench: grid did not finish {} items within {:?}", config.items, config.timeout));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let grid_elapsed = grid_started.elapsed();
    let grid_rate = config.items as f64 / grid_elapsed.as_secs_f64();
    println!(
        "grid:     {} items in {:.2} s = {:.1} items/s ({} completed, {} failed)",
        config.items,
        grid_elapsed.as_secs_f64(),
        grid_rate,
        completed,
        failed
    );
    drop(server);

    let client = http_client();
    let next = Arc::new(AtomicUsize::new(0));
    let ok = Arc::new(AtomicUsize::new(0));
    let urls = Arc::new(urls);
    let base_started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..config.workers {
        let (client, next, ok, urls) = (client.clone(), next.clone(), ok.clone(), urls.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(url) = urls.get(i) else { break };
                if Instant::now() >= deadline {
                    break;
                }
                if let Ok(r) = client.get(url).send().await {
                    if r.status().is_success() && r.bytes().await.is_ok() {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("baseline task");
    }
    let base_elapsed = base_started.elapsed();
    let base_rate = config.items as f64 / base_elapsed.as_secs_f64();
    println!(
        "baseline: {} items in {:.2} s = {:.1} items/s ({} ok, reqwest, {} concurrent)",
        config.items,
        base_elapsed.as_secs_f64(),
        base_rate,
        ok.load(Ordering::Relaxed),
        config.workers
    );
    println!("ratio grid/baseline: {:.3}", grid_rate / base_rate);
    println!(
        "{}",
        json!({
            "items": config.items,
            "workers": config.workers,
            "gridSeconds": grid_elapsed.as_secs_f64(),
            "gridItemsPerSecond": grid_rate,
            "gridCompleted": completed,
            "gridFailed": failed,
            "baselineSeconds": base_elapsed.as_secs_f64(),
            "baselineItemsPerSecond": base_rate,
            "ratio": grid_rate / base_rate,
        })
    );
}
