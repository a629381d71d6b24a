//! The capture worker pool (docs/captures.md, "Workers"): workers start as
//! the queue grows, never more than the queue holds nor than
//! `--max-workers`, and none runs on a quiet grid. Watched through the
//! `grid_capture_workers` gauges, GET /grid's `workers` and what the target
//! saw in flight at once; nothing about speed is asserted.
//!
//! Runs on: both stores, because workers claim from the store's queue.

use std::time::{Duration, Instant};

use grid_tests::metrics::{scrape, value};
use grid_tests::server::{free_port, GridServer, ServerOptions};
use grid_tests::target::{Hold, Target};

const CEILING: u32 = 4;
const WAIT: Duration = Duration::from_secs(60);

/// This node's workers as the metrics show them: (busy, claimed, max).
async fn workers(port: u16) -> (u64, u64, u64) {
    let text = scrape(port).await;
    let series = |state: &str| {
        let name = format!("grid_capture_workers{{state=\"{state}\"}}");
        value(&text, &name).unwrap_or_else(|| panic!("no series {name} in:\n{text}")) as u64
    };
    (series("busy"), series("claimed"), series("max"))
}

async fn grid_workers(server: &GridServer) -> u64 {
    let r = server.get("/grid").await;
    assert_eq!(r.status, 200, "{r}");
    r.json["workers"].as_u64().unwrap_or_else(|| panic!("no workers in {r}"))
}

/// The most holds the target had in flight at one moment.
fn most_at_once(holds: &[Hold]) -> usize {
    holds.iter().map(|h| holds.iter().filter(|g| g.arrived <= h.arrived && h.overlaps(g)).count()).max().unwrap_or(0)
}

fn hold_urls(target: &Target, tag: &str, n: usize, ms: u64) -> Vec<String> {
    (0..n).map(|i| target.url(&format!("/hold/{tag}{i}?ms={ms}"))).collect()
}

#[tokio::test]
async fn workers_grow_with_the_queue_up_to_the_ceiling_and_none_run_when_idle() {
    let target = Target::start();
    let port = free_port();
    let server = GridServer::start(ServerOptions {
        workers: Some(CEILING),
        extra_args: vec!["--metrics-listen".into(), format!("127.0.0.1:{port}")],
        ..Default::default()
    });

    // A quiet grid runs no worker.
    assert_eq!(workers(port).await, (0, 0, u64::from(CEILING)));
    assert_eq!(grid_workers(&server).await, 0);

    // Two items: two workers, though four may run.
    let two = server.submit_fetch(&hold_urls(&target, "two-", 2, 3_000)).await;
    let deadline = Instant::now() + WAIT;
    while workers(port).await.0 < 2 {
        assert!(Instant::now() < deadline, "two items never had two workers: {:?}", workers(port).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(workers(port).await, (2, 0, u64::from(CEILING)));
    assert_eq!(grid_workers(&server).await, 2);
    server.wait_batch_done(&two, WAIT).await;
    assert_eq!(most_at_once(&target.holds()), 2);

    // Twelve items: the pool grows to the ceiling and no further.
    let many = server.submit_fetch(&hold_urls(&target, "many-", 12, 800)).await;
    let deadline = Instant::now() + WAIT;
    let mut most_busy = 0;
    loop {
        let (busy, _, _) = workers(port).await;
        assert!(busy <= u64::from(CEILING), "{busy} workers over a ceiling of {CEILING}");
        most_busy = most_busy.max(busy);
        let b = server.batch(&many).await;
        if b["counts"]["completed"].as_u64() == Some(12) {
            break;
        }
        assert!(Instant::now() < deadline, "batch not done: {b}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(most_busy, u64::from(CEILING), "the pool never reached its ceiling");
    let many_holds: Vec<Hold> = target.holds().into_iter().filter(|h| h.tag.starts_with("many-")).collect();
    assert_eq!(many_holds.len(), 12);
    assert_eq!(most_at_once(&many_holds), CEILING as usize, "the target saw another number in flight at once");

    // Idle again: the workers are gone and nothing is held for them.
    let deadline = Instant::now() + WAIT;
    while workers(port).await != (0, 0, u64::from(CEILING)) || grid_workers(&server).await != 0 {
        assert!(Instant::now() < deadline, "workers left on an idle grid: {:?}", workers(port).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
