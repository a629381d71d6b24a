//! Fetch throughput of one grid node on SQLite, one on PostgreSQL and three
//! on one PostgreSQL database, same machine, same URLs, same run (issue 10).
//! Everything stays on 127.0.0.1.
//!
//!     bench_scale_out [--items N] [--workers W] [--timeout-secs S]
//!
//! Needs GRID_TEST_DATABASE_URL (a throwaway cluster: bench/scale_out.sh
//! starts one). Each node runs W workers. Besides items/s it prints the CPU
//! the grid's processes and PostgreSQL's used per item (user + system time
//! from /proc, fetch included): what claiming, running and publishing one
//! item costs on each store.

use std::time::{Duration, Instant};

use serde_json::json;

use grid_tests::bench::{cpu_ticks, ticks_per_second, FetchConfig};
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::Target;

/// Every PostgreSQL process (its backends do the store's work).
fn postgres_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return vec![] };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "postgres"))
        .collect()
}

struct Run {
    label: &'static str,
    seconds: f64,
    completed: u64,
    grid_cpu_us_per_item: f64,
    db_cpu_us_per_item: f64,
}

async fn run(label: &'static str, nodes: usize, postgres: bool, urls: &[String], config: &FetchConfig) -> Run {
    let opts = |name: String| ServerOptions {
        postgres,
        workers: Some(config.workers),
        initial_credit_micros: Some(1_000_000_000),
        extra_args: vec!["--node".into(), name],
        ..Default::default()
    };
    let first = GridServer::start(opts("n1".into()));
    let others: Vec<GridServer> = (2..=nodes).map(|i| first.join(opts(format!("n{i}")))).collect();
    let grid_pids: Vec<u32> = std::iter::once(&first).chain(&others).filter_map(|s| s.pid()).collect();
    let db_pids = if postgres { postgres_pids() } else { vec![] };
    let grid_before: u64 = grid_pids.iter().map(|p| cpu_ticks(*p)).sum();
    let db_before: u64 = db_pids.iter().map(|p| cpu_ticks(*p)).sum();
    let started = Instant::now();
    let deadline = started + config.timeout;
    let mut pending = Vec::new();
    for chunk in urls.chunks(1000) {
        pending.push(first.submit_fetch(chunk).await);
    }
    let mut completed = 0;
    while !pending.is_empty() {
        let mut still = Vec::new();
        for id in pending {
            let b = first.batch(&id).await;
            let (c, f) = (b["counts"]["completed"].as_u64().unwrap_or(0), b["counts"]["failed"].as_u64().unwrap_or(0));
            if Some(c + f) == b["total"].as_u64() {
                completed += c;
            } else {
                still.push(id);
            }
        }
        pending = still;
        if !pending.is_empty() {
            if Instant::now() >= deadline {
                first.fail(&format!("bench: {label} did not finish within {:?}", config.timeout));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let hz = ticks_per_second();
    let per_item = |ticks: u64| ticks as f64 / hz * 1e6 / urls.len() as f64;
    let grid_cpu = grid_pids.iter().map(|p| cpu_ticks(*p)).sum::<u64>().saturating_sub(grid_before);
    let db_cpu = db_pids.iter().map(|p| cpu_ticks(*p)).sum::<u64>().saturating_sub(db_before);
    drop(others);
    drop(first);
    Run { label, seconds, completed, grid_cpu_us_per_item: per_item(grid_cpu), db_cpu_us_per_item: per_item(db_cpu) }
}

#[tokio::main]
async fn main() {
    let (config, _) = FetchConfig::parse("bench_scale_out", 5000, &[]);
    let target = Target::start();
    let urls: Vec<String> = (0..config.items).map(|n| target.url(&format!("/page/{n}"))).collect();
    eprintln!("bench: {} fetch items, {} workers per node", config.items, config.workers);
    let mut runs = Vec::new();
    for (label, nodes, postgres) in
        [("1 node, SQLite", 1, false), ("1 node, PostgreSQL", 1, true), ("3 nodes, PostgreSQL", 3, true)]
    {
        let r = run(label, nodes, postgres, &urls, &config).await;
        println!(
            "{:<22} {:>7.1} items/s ({} of {} in {:.2} s); CPU per item: grid {:.0} µs, PostgreSQL {:.0} µs",
            r.label,
            config.items as f64 / r.seconds,
            r.completed,
            config.items,
            r.seconds,
            r.grid_cpu_us_per_item,
            r.db_cpu_us_per_item
        );
        runs.push(r);
    }
    let base = config.items as f64 / runs[0].seconds;
    for r in &runs[1..] {
        println!("ratio {} / 1 node SQLite: {:.3}", r.label, config.items as f64 / r.seconds / base);
    }
    println!(
        "{}",
        json!({
            "items": config.items,
            "workersPerNode": config.workers,
            "runs": runs.iter().map(|r| json!({
                "label": r.label,
                "itemsPerSecond": config.items as f64 / r.seconds,
                "completed": r.completed,
                "gridCpuMicrosPerItem": r.grid_cpu_us_per_item,
                "postgresCpuMicrosPerItem": r.db_cpu_us_per_item,
            })).collect::<Vec<_>>(),
        })
    );
}
