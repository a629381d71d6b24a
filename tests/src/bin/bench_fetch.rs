//! Fetch throughput of the grid against a plain HTTP client, same URLs, same
//! concurrency, same run. Everything stays on 127.0.0.1.
//!
//!     bench_fetch [--items N] [--workers W] [--delay-ms D] [--grid-workers G] [--rounds R] [--timeout-secs S]
//!
//! Starts a local target and `grid-server serve --allow-private-networks
//! --max-workers G` (G defaults to W; GRID_SERVER_BIN, else target/debug/grid-server;
//! the bench scripts point it at the release build), submits N fetch URLs
//! in batches of 1,000 and times them until every batch is done. Then
//! fetches the same N URLs with reqwest, W at a time. Prints both rates and
//! grid/baseline. With R rounds (default 3) it does so R times, alternating,
//! each grid round on a fresh server, and sums up with the medians: on a
//! shared machine single runs move by 10 to 20 %, more than most changes
//! being measured.
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

use grid_tests::bench::{count, cpu_ticks, positive, ticks_per_second, FetchConfig};
use grid_tests::http::http_client;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::Target;

/// Items per POST /batches.
const BATCH: usize = 1000;

/// One round's figures.
struct Round {
    grid_seconds: f64,
    submitted_seconds: f64,
    grid_rate: f64,
    grid_cpu: f64,
    bench_cpu: f64,
    charges: usize,
    base_seconds: f64,
    base_rate: f64,
    base_cpu: f64,
}

#[tokio::main]
async fn main() {
    let (config, flags) = FetchConfig::parse(
        "bench_fetch",
        2000,
        &[count("--grid-workers", 0), count("--delay-ms", 0), positive("--rounds", 3)],
    );
    let grid_workers = match flags.get("--grid-workers") as u32 {
        0 => config.workers,
        g => g,
    };
    let delay_ms = flags.get("--delay-ms");
    let rounds = flags.get("--rounds") as usize;
    let deadline = Instant::now() + config.timeout;
    let target = Target::start();
    let urls: Vec<String> = (0..config.items)
        .map(|n| match delay_ms {
            0 => target.url(&format!("/page/{n}")),
            d => target.url(&format!("/slow?ms={d}&n={n}")),
        })
        .collect();
    let urls = Arc::new(urls);
    eprintln!(
        "bench: {} items, {} grid workers, {} concurrent in the loop, target delay {} ms, {} rounds",
        config.items, grid_workers, config.workers, delay_ms, rounds
    );

    let mut all = Vec::new();
    for round in 1..=rounds {
        let r = run_round(&config, grid_workers, &urls, deadline).await;
        println!(
            "round {round}: grid {:.1} items/s ({:.0} µs grid-server CPU, {:.0} µs target and bench per item; \
             every batch submitted after {:.2} s), loop {:.1} items/s ({:.0} µs per item), ratio {:.3}",
            r.grid_rate,
            r.grid_cpu,
            r.bench_cpu,
            r.submitted_seconds,
            r.base_rate,
            r.base_cpu,
            r.grid_rate / r.base_rate
        );
        all.push(r);
    }
    let med = |f: &dyn Fn(&Round) -> f64| median(all.iter().map(f).collect());
    let (grid_rate, base_rate, ratio) =
        (med(&|r| r.grid_rate), med(&|r| r.base_rate), med(&|r| r.grid_rate / r.base_rate));
    let (grid_cpu, bench_cpu, base_cpu) = (med(&|r| r.grid_cpu), med(&|r| r.bench_cpu), med(&|r| r.base_cpu));
    println!(
        "grid:     {grid_rate:.1} items/s, median of {rounds} ({} completed and charged once each round)",
        config.items
    );
    println!("grid:     CPU per item {grid_cpu:.0} µs in grid-server, {bench_cpu:.0} µs in the target and bench");
    println!(
        "baseline: {base_rate:.1} items/s (reqwest, {} concurrent), CPU per item {base_cpu:.0} µs",
        config.workers
    );
    println!("ratio grid/baseline: {ratio:.3} (median of the rounds' ratios)");
    println!(
        "{}",
        json!({
            "items": config.items,
            "workers": config.workers,
            "gridWorkers": grid_workers,
            "delayMs": delay_ms,
            "rounds": rounds,
            "gridSeconds": all.iter().map(|r| r.grid_seconds).collect::<Vec<_>>(),
            "gridSubmittedSeconds": all.iter().map(|r| r.submitted_seconds).collect::<Vec<_>>(),
            "gridCharges": all.iter().map(|r| r.charges).collect::<Vec<_>>(),
            "gridItemsPerSecond": grid_rate,
            "gridCpuMicrosPerItem": grid_cpu,
            "gridBenchCpuMicrosPerItem": bench_cpu,
            "baselineSeconds": all.iter().map(|r| r.base_seconds).collect::<Vec<_>>(),
            "baselineItemsPerSecond": base_rate,
            "baselineCpuMicrosPerItem": base_cpu,
            "ratio": ratio,
            "ratios": all.iter().map(|r| r.grid_rate / r.base_rate).collect::<Vec<_>>(),
        })
    );
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// How long to wait before polling again, with `done` of `items` finished
/// after `elapsed`: 50 ms, or less once the rest is expected sooner (at the
/// rate so far), at least 2 ms. The grid's time is taken at the poll that
/// sees the last item finished, the loop's at its last answer: polling only
/// every 50 ms added 25 ms on average to a run of about a second.
fn poll_pause(items: u64, done: u64, elapsed: Duration) -> Duration {
    let most = Duration::from_millis(50);
    if done == 0 {
        return most;
    }
    let rest = elapsed.mul_f64(items.saturating_sub(done) as f64 / done as f64);
    rest.clamp(Duration::from_millis(2), most)
}

/// The grid on a fresh server, then the loop, over the same URLs.
async fn run_round(config: &FetchConfig, grid_workers: u32, urls: &Arc<Vec<String>>, deadline: Instant) -> Round {
    let server = GridServer::start(ServerOptions {
        workers: Some(grid_workers),
        // The server's default spare browser, as operators run it.
        spare_browsers: None,
        initial_credit_micros: Some(1_000_000_000),
        ..Default::default()
    });
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
        tokio::time::sleep(poll_pause(config.items as u64, completed + failed + c + f, grid_started.elapsed())).await;
    }
    let grid_elapsed = grid_started.elapsed();
    let grid_rate = config.items as f64 / grid_elapsed.as_secs_f64();
    let per_item = |ticks: u64| ticks as f64 / ticks_per_second() * 1e6 / config.items as f64;
    let grid_cpu = per_item(cpu_ticks(grid_pid).saturating_sub(grid_cpu_before));
    let bench_cpu = per_item(cpu_ticks(me).saturating_sub(bench_cpu_before));
    if failed > 0 || completed != config.items as u64 {
        server.fail(&format!("bench: {completed} of {} items completed, {failed} failed", config.items));
    }
    let charges = wait_charged(&server, config.items, deadline).await;
    drop(server);

    let client = http_client();
    let next = Arc::new(AtomicUsize::new(0));
    let ok = Arc::new(AtomicUsize::new(0));
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
    // The loop's rate counts only items it fetched whole, as the grid's
    // counts only completed ones.
    let fetched = ok.load(Ordering::Relaxed);
    assert_eq!(fetched, config.items, "bench: the loop fetched {fetched} of {} items", config.items);
    let base_rate = config.items as f64 / base_elapsed.as_secs_f64();
    let base_cpu = per_item(cpu_ticks(me).saturating_sub(base_cpu_before));
    Round {
        grid_seconds: grid_elapsed.as_secs_f64(),
        submitted_seconds: submitted.as_secs_f64(),
        grid_rate,
        grid_cpu,
        bench_cpu,
        charges,
        base_seconds: base_elapsed.as_secs_f64(),
        base_rate,
        base_cpu,
    }
}

/// Waits (outside the timed part) until the items' charges are in the
/// ledger (written with their ends), and checks there is exactly one per
/// item.
async fn wait_charged(server: &GridServer, items: usize, deadline: Instant) -> usize {
    loop {
        let settled = server.stored().settlements();
        let n = |v: i64| usize::try_from(v).unwrap_or(0);
        let (charges, subjects) = (n(settled.charges), n(settled.charged_subjects));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_sooner_as_the_last_items_are_expected() {
        let ms = Duration::from_millis;
        // Nothing finished yet, or far from done: the usual 50 ms.
        assert_eq!(poll_pause(40_000, 0, ms(100)), ms(50));
        assert_eq!(poll_pause(40_000, 20_000, ms(500)), ms(50));
        // 1,000 left at 40 items a millisecond: 25 ms.
        assert_eq!(poll_pause(40_000, 39_000, ms(975)), ms(25));
        // Nearly done: never under 2 ms.
        assert_eq!(poll_pause(40_000, 39_999, ms(1_000)), ms(2));
    }
}
