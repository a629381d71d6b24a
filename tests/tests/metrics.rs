//! Prometheus metrics on `--metrics-listen` (docs/operations.md): served
//! without credential on their own port and never on the API port; counters
//! move with real work (requests, capture attempts, an analytical job on the
//! real Docker Engine, a session's lease and release) and the gauges read the
//! database (queue, job phases, sessions, ledger).
//!
//! Runs on: one store, because its subject is the metrics endpoint.

use std::time::Duration;

use serde_json::json;

use grid_tests::http::{http_client, Resp};
use grid_tests::metrics::{scrape, value};
use grid_tests::server::{free_port, GridServer};
use grid_tests::target::Target;
use grid_tests::FETCH_PRICE_MICROS;

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

/// Every family is there before anything happened, with a zero series for
/// each label value known up front: job phases, docker calls, the reasons a
/// connection is cut, every script and item outcome, every route's latency;
/// and the build and the process.
#[tokio::test]
async fn a_fresh_servers_metrics_have_every_family_with_zero_series_build_info_and_the_process() {
    use grid_core::catalog::Script;
    use grid_core::routes::Route;
    use grid_core::wire::job::JobPhase;

    let port = free_port();
    let mut opts = grid_tests::server::ServerOptions::default();
    opts.extra_args.extend(["--metrics-listen".to_string(), format!("127.0.0.1:{port}")]);
    let server = GridServer::start(opts);
    let text = scrape(port).await;
    let zero = |series: String| {
        assert_eq!(value(&text, &format!("{series} ")), Some(0.0), "{series} at 0 in:\n{text}");
    };

    // `grid_http_requests_total` alone waits for its first request: its
    // `status` is only known once answered (docs/operations.md).
    for family in [
        "grid_http_request_duration_seconds histogram",
        "grid_http_connections_cut_total counter",
        "grid_item_attempts_total counter",
        "grid_item_attempt_duration_seconds histogram",
        "grid_job_attempts_ended_total counter",
        "grid_sessions_ended_total counter",
        "grid_session_lease_to_ready_seconds histogram",
        "grid_browser_starts_total counter",
        "grid_browser_kills_total counter",
        "grid_docker_errors_total counter",
        "grid_registry_errors_total counter",
        "grid_credential_check_timeouts_total counter",
        "grid_queue_announcements_total counter",
        "grid_queue_items gauge",
        "grid_jobs gauge",
        "grid_sessions gauge",
        "grid_capture_workers gauge",
        "grid_ledger_micros gauge",
        "grid_build_info gauge",
        "process_cpu_seconds_total counter",
        "process_resident_memory_bytes gauge",
        "process_virtual_memory_bytes gauge",
        "process_open_fds gauge",
        "process_max_fds gauge",
        "process_start_time_seconds gauge",
    ] {
        assert!(text.contains(&format!("# TYPE {family}\n")), "# TYPE {family} in:\n{text}");
    }
    for phase in JobPhase::ALL {
        zero(format!("grid_jobs{{phase=\"{}\"}}", phase.as_str()));
    }
    for call in ["pull", "create", "start", "inspect", "kill", "logs"] {
        zero(format!("grid_docker_errors_total{{call=\"{call}\"}}"));
    }
    for reason in ["max_connections", "max_connections_per_peer", "no_request", "idle", "header_timeout"] {
        zero(format!("grid_http_connections_cut_total{{reason=\"{reason}\"}}"));
    }
    for script in Script::ALL.map(Script::as_str) {
        zero(format!("grid_item_attempt_duration_seconds_count{{script=\"{script}\"}}"));
        for outcome in ["completed", "delayed", "failed"] {
            zero(format!("grid_item_attempts_total{{outcome=\"{outcome}\",script=\"{script}\"}}"));
        }
    }
    for reason in ["WORKLOAD_SUCCEEDED", "WORKLOAD_FAILED", "PLATFORM_OOM", "PLATFORM_EVICTED", "PLATFORM_LOST"] {
        zero(format!("grid_job_attempts_ended_total{{reason=\"{reason}\"}}"));
    }
    for cause in ["released", "expired", "lost"] {
        zero(format!("grid_sessions_ended_total{{cause=\"{cause}\"}}"));
    }
    for kind in ["charge", "release", "reserve"] {
        zero(format!("grid_ledger_micros{{kind=\"{kind}\"}}"));
    }
    // Every route but the metrics' own scrape (not an API route) has its latency series.
    for route in Route::ALL {
        let series = format!("grid_http_request_duration_seconds_count{{route=\"{}\"}}", route.template());
        assert!(value(&text, &format!("{series} ")).is_some(), "{series} in:\n{text}");
    }
    zero("grid_browser_starts_total{use=\"capture\"}".to_string());
    zero("grid_registry_errors_total".to_string());

    let build =
        text.lines().find(|l| l.starts_with("grid_build_info{")).unwrap_or_else(|| panic!("no build_info:\n{text}"));
    assert!(build.ends_with("} 1"), "{build}");
    assert!(build.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))), "{build}");
    assert!(build.contains("commit=\""), "{build}");
    assert!(value(&text, "process_resident_memory_bytes ").is_some_and(|b| b > 0.0), "{text}");
    assert!(value(&text, "process_open_fds ").is_some_and(|n| n > 0.0), "{text}");
    assert!(value(&text, "process_cpu_seconds_total ").is_some(), "{text}");
    drop(server);
}
