//! What a persistent context adds to a lease, in one run: a context is
//! filled with about `--mib` MiB of state (localStorage of four local
//! origins, written by a `persist: true` session), then `--leases` rounds
//! of one lease without a context and one with it (`persist: false`), each
//! timed from POST /sessions until GET /sessions says running (the state
//! is loaded before that), then released. Prints p50 and p95 of each, the
//! added p50 and the ratio (docs/sessions.md, Contexts).
//!
//!     bench_contexts [--leases N] [--mib M]

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use grid_tests::bench::{parse, positive};
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::sessions::{connect, lease_as, release, wait_running_as};
use grid_tests::target::Target;

/// Local origins the state is spread over (one origin's localStorage is
/// bounded by Chromium).
const ORIGINS: usize = 4;

fn percentile(samples: &[Duration], p: f64) -> f64 {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    ms.get(((ms.len().max(1) - 1) as f64 * p).round() as usize).copied().unwrap_or(f64::NAN)
}

/// POST /sessions until running: the time, and the session id.
async fn timed_lease(server: &GridServer, body: Value) -> (Duration, String) {
    let t = Instant::now();
    let lease = lease_as(server, server.api_key(), body).await;
    let (_, seen) = wait_running_as(server, server.api_key(), &lease.id).await;
    (seen - t, lease.id)
}

async fn context_entry(server: &GridServer, id: &str) -> Value {
    let listed = server.get("/contexts").await.json;
    listed.as_array().and_then(|l| l.iter().find(|c| c["contextId"] == id).cloned()).unwrap_or(Value::Null)
}

#[tokio::main]
async fn main() {
    let f = parse("bench_contexts", &[positive("--leases", 10), positive("--mib", 5)]);
    let (leases, mib) = (f.get("--leases") as usize, f.get("--mib"));
    let targets: Vec<Target> = (0..ORIGINS).map(|_| Target::start()).collect();
    let bound_kib = (mib * 1024 * 2).max(16 * 1024);
    let server = GridServer::start(ServerOptions {
        extra_args: vec!["--context-max-kib".into(), bound_kib.to_string()],
        ..ServerOptions::default()
    });

    // The context, filled by one persist session.
    let created = server.post("/contexts", &json!({})).await;
    let id = created.json["contextId"].as_str().expect("a contextId").to_string();
    let lease = lease_as(&server, server.api_key(), json!({"context": {"id": id, "persist": true}})).await;
    wait_running_as(&server, server.api_key(), &lease.id).await;
    let mut cdp = connect(&server, &lease.cdp_url).await;
    let per_origin = (mib * 1024 * 1024) as usize / ORIGINS;
    for t in &targets {
        let (_, page) = cdp.open_page(&t.url("/page/1")).await.expect("a page");
        let fill =
            format!("localStorage.setItem('filler', 'x'.repeat({per_origin})); localStorage.getItem('filler').length");
        assert_eq!(cdp.evaluate(&page, &fill).await.expect("filled"), json!(per_origin));
    }
    drop(cdp);
    release(&server, &lease.id).await;
    let saved = grid_tests::wait::wait_for("the context saved", Duration::from_secs(120), || async {
        let c = context_entry(&server, &id).await;
        if c["sessionId"].is_null() && c["savedAt"].is_string() {
            return Ok(c);
        }
        assert!(c["lastSaveRefused"].is_null(), "the fill was refused: {c}");
        Err(c.to_string())
    })
    .await;
    let size = saved["sizeBytes"].as_u64().unwrap_or(0);
    println!("context {id}: {size} bytes sealed");

    let (mut without, mut with) = (Vec::with_capacity(leases), Vec::with_capacity(leases));
    for _ in 0..leases {
        let (t, s) = timed_lease(&server, json!({})).await;
        without.push(t);
        release(&server, &s).await;
        let (t, s) = timed_lease(&server, json!({"context": {"id": id, "persist": false}})).await;
        with.push(t);
        release(&server, &s).await;
    }
    let (w50, w95, c50, c95) =
        (percentile(&without, 0.5), percentile(&without, 0.95), percentile(&with, 0.5), percentile(&with, 0.95));
    println!("lease to running without a context: p50 {w50:.0} ms, p95 {w95:.0} ms ({leases} leases)");
    println!("lease to running with a {size}-byte context: p50 {c50:.0} ms, p95 {c95:.0} ms ({leases} leases)");
    println!("added by the context: p50 {:.0} ms; ratio {:.2}", c50 - w50, c50 / w50);
    println!(
        "{}",
        json!({"leases": leases, "contextBytes": size, "withoutP50Ms": w50, "withoutP95Ms": w95,
               "withP50Ms": c50, "withP95Ms": c95, "addedP50Ms": c50 - w50, "ratioP50": c50 / w50})
    );
}
