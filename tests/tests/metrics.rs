//! Prometheus metrics on `--metrics-listen` (docs/operations.md): served
//! without credential on their own port and never on the API port; counters
//! move with real work (requests, capture attempts, an analytical job on the
//! real Docker Engine, a session's lease and release) and the gauges read the
//! database (queue, job phases, sessions, ledger).

use std::time::Duration;

use serde_json::json;

use grid_tests::http::{http_client, Resp};
use grid_tests::server::{free_port, GridServer};
use grid_tests::target::Target;
use grid_tests::FETCH_PRICE_MICROS;

async fn scrape(port: u16) -> String {
    let r = Resp::read(http_client().get(format!("http://127.0.0.1:{port}/metrics"))).await.expect("scrape");
    assert_eq!(r.status, 200, "{r}");
    assert!(r.header("content-type").is_some_and(|c| c.starts_with("text/plain")), "{r}");
    r.text
}

/// The value of one series, by its exact name and labels as rendered.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse().ok()))
}

#[tokio::test]
async fn metrics_count_real_work_on_their_own_port_only() {
    let target = Target::start();
    let port = free_port();
    grid_tests::jobs::check_compute_env();
    let mut opts = grid_tests::jobs::compute_options();
    opts.extra_args.extend(["--metrics-listen".to_string(), format!("127.0.0.1:{port}")]);
    let server = GridServer::start(opts);

    let batch = server.submit_fetch(&[target.url("/page/1"), target.url("/page/2")]).await;
    server.wait_batch_done(&batch, Duration::from_secs(60)).await;
    server.wait_settled(server.account_id(), 10_000_000 - 2 * FETCH_PRICE_MICROS, Duration::from_secs(30)).await;
    let unknown = server.get("/batches/bt_nope").await;
    assert_eq!(unknown.status, 404, "{unknown}");

    let text = scrape(port).await;
    let series = |s: &str| value(&text, s).unwrap_or_else(|| panic!("no series {s} in:\n{text}"));
    assert_eq!(series("grid_http_requests_total{method=\"POST\",route=\"/batches\",status=\"201\"}"), 1.0);
    assert_eq!(series("grid_http_requests_total{method=\"GET\",route=\"/batches/{batchId}\",status=\"404\"}"), 1.0);
    assert!(!text.contains("bt_nope") && !text.contains(&batch), "ids must not become label values");
    assert_eq!(series("grid_item_attempts_total{outcome=\"completed\",script=\"fetch\"}"), 2.0);
    assert_eq!(series("grid_item_attempt_duration_seconds_count{script=\"fetch\"}"), 2.0);
    assert_eq!(series("grid_queue_items{state=\"waiting\"}"), 0.0);
    assert_eq!(series("grid_ledger_micros{kind=\"charge\"}"), (2 * FETCH_PRICE_MICROS) as f64);
    assert!(series("grid_settlement_pass_duration_seconds_count") >= 1.0);
    assert!(text.contains("# TYPE grid_http_request_duration_seconds histogram"), "{text}");

    // An analytical job on the real engine.
    let job = grid_tests::jobs::submit_job(&server, &grid_tests::jobs::job_body(&["sh", "-c", "echo metered"])).await;
    let job_id = grid_tests::jobs::job_id(&job);
    let done = grid_tests::jobs::wait_finished(&server, &job_id).await;
    assert_eq!(done["phase"], json!("SUCCEEDED"), "{done}");
    let text = scrape(port).await;
    assert_eq!(value(&text, "grid_job_attempts_ended_total{reason=\"WORKLOAD_SUCCEEDED\"}"), Some(1.0), "{text}");
    assert_eq!(value(&text, "grid_jobs{phase=\"SUCCEEDED\"}"), Some(1.0), "{text}");
    assert!(!text.contains(&job_id), "ids must not become label values");

    // A session: lease to ready, then released.
    let lease = server.post("/sessions", &json!({})).await;
    assert_eq!(lease.status, 201, "{lease}");
    let id = lease.json["sessionId"].as_str().expect("sessionId").to_string();
    grid_tests::sessions::wait_running_as(&server, server.api_key(), &id).await;
    grid_tests::sessions::release(&server, &id).await;
    let text = scrape(port).await;
    assert_eq!(value(&text, "grid_session_lease_to_ready_seconds_count"), Some(1.0), "{text}");
    assert_eq!(value(&text, "grid_sessions_ended_total{cause=\"released\"}"), Some(1.0), "{text}");
    assert_eq!(value(&text, "grid_sessions{status=\"running\"}"), Some(0.0), "{text}");

    // Never on the API port; nothing but /metrics on the metrics port.
    let api = server.get_as(None, "/metrics").await;
    assert_eq!(api.status, 404, "{api}");
    let other = Resp::read(http_client().get(format!("http://127.0.0.1:{port}/grid"))).await.expect("request");
    assert_eq!(other.status, 404, "{other}");
}
