//! The capture worker pool (docs/captures.md, "Workers"): workers start as
//! the queue grows, never more than the queue holds nor than
//! `--max-workers`, and none runs on a quiet grid. Watched through the
//! `grid_capture_workers` gauges, GET /grid's `workers` and what the target
//! saw in flight at once; nothing about speed is asserted.
//!
//! Runs on: both stores, because workers claim from the store's queue.

use std::time::Duration;

use grid_tests::metrics::{scrape, value};
use grid_tests::server::{free_port, GridServer, ServerOptions};
use grid_tests::target::{Hold, Target};
use grid_tests::wait::{wait_for, Within};

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
    wait_for("two items having two workers", WAIT, || async {
        match workers(port).await {
            (busy, ..) if busy >= 2 => Ok(()),
            seen => Err(format!("{seen:?}")),
        }
    })
    .await;
    assert_eq!(workers(port).await, (2, 0, u64::from(CEILING)));
    assert_eq!(grid_workers(&server).await, 2);
    server.wait_batch_done(&two, WAIT).await;
    assert_eq!(most_at_once(&target.holds()), 2);

    // Twelve items: the pool grows to the ceiling and no further.
    let many = server.submit_fetch(&hold_urls(&target, "many-", 12, 800)).await;
    // Every 20 ms: the pool's size is sampled on the way.
    let most_busy = std::cell::Cell::new(0);
    wait_for("the batch done", Within::new(WAIT).every(Duration::from_millis(20)), || async {
        let (busy, _, _) = workers(port).await;
        assert!(busy <= u64::from(CEILING), "{busy} workers over a ceiling of {CEILING}");
        most_busy.set(most_busy.get().max(busy));
        let b = server.batch(&many).await;
        match b["counts"]["completed"].as_u64() == Some(12) {
            true => Ok(()),
            false => Err(b.to_string()),
        }
    })
    .await;
    let most_busy = most_busy.get();
    assert_eq!(most_busy, u64::from(CEILING), "the pool never reached its ceiling");
    let many_holds: Vec<Hold> = target.holds().into_iter().filter(|h| h.tag.starts_with("many-")).collect();
    assert_eq!(many_holds.len(), 12);
    assert_eq!(most_at_once(&many_holds), CEILING as usize, "the target saw another number in flight at once");

    // Idle again: the workers are gone and nothing is held for them.
    wait_for("no workers left on an idle grid", WAIT, || async {
        match (workers(port).await, grid_workers(&server).await) {
            (w, 0) if w == (0, 0, u64::from(CEILING)) => Ok(()),
            seen => Err(format!("{seen:?}")),
        }
    })
    .await;
}
