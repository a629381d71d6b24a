//! Fetch throughput of the grid against a plain HTTP client, same URLs, same
//! concurrency, same run. Everything stays on 127.0.0.1.
//!
//!     bench_fetch [--items N] [--workers W] [--delay-ms D] [--grid-workers G] [--timeout-secs S]
//!
//! Starts a local target and `grid-server serve --allow-private-networks
//! --max-workers G` (G defaults to W; GRID_SERVER_BIN, else target/debug/grid-server;
//! the bench scripts point it at the release build), submits N fetch URLs
//! in batches of 1,000 and times them until every batch is done. Then
//! fetches the same N URLs with reqwest, W at a time. Prints both rates and
//! grid/baseline.
//!
//! With `--delay-ms 0` the URLs are `/page/{n}` (answered at once); with D > 0
//! they are `/slow?ms=D&n={n}`, answered after D ms: a target at internet
//! latency, where concurrency rather than CPU bounds the rate.
//!
//! Every item must end completed (the bench fails otherwise), and the ledger
//! must hold exactly one charge per item: the grid's figure is for durable,
//! checked, metered items.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use grid_tests::bench::{count, cpu_ticks, ticks_per_second, FetchConfig};
use grid_tests::http::http_client;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::Target;

/// Items per POST /batches.
const BATCH: usize = 1000;

#[tokio::main]
async fn main() {
    let (config, flags) =
        FetchConfig::parse("bench_fetch", 2000, &[count("--grid-workers", 0), count("--delay-ms", 0)]);
    let grid_workers = match flags.get("--grid-workers") as u32 {
        0 => config.workers,
        g => g,
    };
    let delay_ms = flags.get("--delay-ms");
    let deadline = Instant::now() + config.timeout;
    let target = Target::start();
    let urls: Vec<String> = (0..config.items)
        .map(|n| match delay_ms {
            0 => target.url(&format!("/page/{n}")),
            d => target.url(&format!("/slow?ms={d}&n={n}")),
        })
        .collect();

    let server = GridServer::start(ServerOptions {
        workers: Some(grid_workers),
        initial_credit_micros: Some(1_000_000_000),
        ..Default::default()
    });
    eprintln!(
        "bench: grid-server on {}, {} items, {} workers, target delay {} ms",
        server.base_url(),
        config.items,
        grid_workers,
        delay_ms
    );

    let me = std::process::id();
    let grid_pid = server.pid().unwrap_or_else(|| server.fail("bench: the grid-server has no pid"));
    let (grid_cpu_before, bench_cpu_before) = (cpu_ticks(grid_pid), cpu_ticks(me));
    let grid_started = Instant::now();
    let mut batches = Vec::new();
    for chunk in urls.chunks(BATCH) {
        batches.push(server.submit_fetch(chunk).await);
    }
    let submitted = grid_started.elapsed();
    // Batches finish about in the order they were queued (claims follow the
    // queue), so only the oldest unfinished one is polled: polling all of
    // them (1,000 items each) every 50 ms took a good share of the CPU the
    // grid was being measured on.
    let (mut completed, mut failed) = (0, 0);
    let mut pending = batches.iter();
    let mut current = pending.next();
    while let Some(id) = current {
        let b = server.batch(id).await;
        let c = b["counts"]["completed"].as_u64().unwrap_or(0);
        let f = b["counts"]["failed"].as_u64().unwrap_or(0);
        if Some(c + f) == b["total"].as_u64() {
            completed += c;
            failed += f;
            current = pending.next();
            continue;
        }
        if Instant::now() >= deadline {
            server.fail(&format!("bench: grid did not finish {} items within {:?}", config.items, config.timeout));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let grid_elapsed = grid_started.elapsed();
    let grid_rate = config.items as f64 / grid_elapsed.as_secs_f64();
    let per_item = |ticks: u64| ticks as f64 / ticks_per_second() * 1e6 / config.items as f64;
    let grid_cpu = per_item(cpu_ticks(grid_pid).saturating_sub(grid_cpu_before));
    let bench_cpu = per_item(cpu_ticks(me).saturating_sub(bench_cpu_before));
    println!(
        "grid:     {} items in {:.2} s = {:.1} items/s ({} completed, {} failed, {} workers)",
        config.items,
        grid_elapsed.as_secs_f64(),
        grid_rate,
        completed,
        failed,
        grid_workers
    );
    println!("grid:     every batch submitted after {:.2} s", submitted.as_secs_f64());
    println!("grid:     CPU per item {grid_cpu:.0} µs in grid-server, {bench_cpu:.0} µs in the target and bench");
    if failed > 0 {
        server.fail(&format!("bench: {failed} items failed"));
    }
    let charges = wait_charged(&server, config.items, deadline).await;
    println!("grid:     ledger holds {charges} charges, one per item");
    drop(server);

    let client = http_client();
    let next = Arc::new(AtomicUsize::new(0));
    let ok = Arc::new(AtomicUsize::new(0));
    let urls = Arc::new(urls);
    let base_cpu_before = cpu_ticks(me);
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
    let base_cpu = per_item(cpu_ticks(me).saturating_sub(base_cpu_before));
    println!(
        "baseline: {} items in {:.2} s = {:.1} items/s ({} ok, reqwest, {} concurrent)",
        config.items,
        base_elapsed.as_secs_f64(),
        base_rate,
        ok.load(Ordering::Relaxed),
        config.workers
    );
    println!("baseline: CPU per item {base_cpu:.0} µs in the target and the loop");
    println!("ratio grid/baseline: {:.3}", grid_rate / base_rate);
    println!(
        "{}",
        json!({
            "items": config.items,
            "workers": config.workers,
            "gridWorkers": grid_workers,
            "delayMs": delay_ms,
            "gridSeconds": grid_elapsed.as_secs_f64(),
            "gridSubmittedSeconds": submitted.as_secs_f64(),
            "gridItemsPerSecond": grid_rate,
            "gridCompleted": completed,
            "gridFailed": failed,
            "gridCharges": charges,
            "gridCpuMicrosPerItem": grid_cpu,
            "gridBenchCpuMicrosPerItem": bench_cpu,
            "baselineCpuMicrosPerItem": base_cpu,
            "baselineSeconds": base_elapsed.as_secs_f64(),
            "baselineItemsPerSecond": base_rate,
            "ratio": grid_rate / base_rate,
        })
    );
}

/// Waits (outside the timed part) until the items' charges are in the
/// ledger (written with their ends), and checks there is exactly one per
/// item.
async fn wait_charged(server: &GridServer, items: usize, deadline: Instant) -> usize {
    let sql =
        "SELECT CAST(COUNT(*) AS BIGINT), CAST(COUNT(DISTINCT subject) AS BIGINT) FROM ledger WHERE kind = 'charge'";
    loop {
        let row = server.query(sql).remove(0);
        let n = |i: usize| row[i].as_deref().and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
        let (charges, subjects) = (n(0), n(1));
        if charges != subjects {
            server.fail(&format!("bench: {charges} charges for {subjects} items"));
        }
        if charges == items {
            return charges;
        }
        if charges > items || Instant::now() >= deadline {
            server.fail(&format!("bench: {charges} charges for {items} items"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
