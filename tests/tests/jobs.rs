//! Analytical jobs end to end: the real grid-server running containers on the
//! real Docker Engine from the local registry (scripts/compute-env.sh
//! prepares both). Each test starts its own server; containers are named per
//! job, so tests share the engine and run in parallel. Every test waits for
//! its jobs to finish, so no container is left behind.
//!
//! Runs on: both stores, because jobs, attempts and their due times are store rows.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use grid_tests::http::assert_error;
use grid_tests::jobs::*;
use grid_tests::server::GridServer;
use grid_tests::stored::Table;
use grid_tests::wait::{wait_for, wait_until};
use grid_tests::DEFAULT_INITIAL_CREDIT_MICROS as INITIAL;

const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

fn attempt(record: &Value, n: usize) -> &Value {
    &record["attempts"][n - 1]
}

/// GET /jobs/{id}/logs[?query] with the first-start key.
async fn logs(server: &GridServer, id: &str, query: &str) -> grid_tests::http::Resp {
    server.get(&format!("/jobs/{id}/logs{query}")).await
}

fn phase_order(record: &Value) -> Vec<String> {
    let ts = record["phaseTimestamps"].as_object().unwrap_or_else(|| panic!("no phaseTimestamps: {record}"));
    let mut phases: Vec<(i64, usize, String)> = ts
        .iter()
        .map(|(p, t)| {
            let rank = ["ACCEPTED", "QUEUED", "PROVISIONING", "RUNNING", "PUBLISHING"]
                .iter()
                .position(|x| x == p)
                .unwrap_or(9);
            (millis(t), rank, p.clone())
        })
        .collect();
    phases.sort();
    phases.into_iter().map(|(_, _, p)| p).collect()
}

// ----- outcomes from the real engine -----

#[tokio::test]
async fn job_that_prints_hi_succeeds_with_its_log_and_headers() {
    let server = start_compute_server();
    let mut body = sh_job("echo $GREETING");
    body["env"] = json!({"GREETING": "hi"});
    body["labels"] = json!({"team": "x"});
    let created = submit_job(&server, &body).await;
    let id = job_id(&created);
    assert!(id.starts_with("cj_"), "{created}");
    assert_eq!(created["executor"], Value::Null, "{created}");
    assert_eq!(created["attempts"], json!([]), "{created}");
    assert_eq!(created["termination"], Value::Null, "{created}");
    assert_eq!(
        created["logs"],
        json!({"available": false, "artifactId": null, "byteLength": null, "contentType": null})
    );

    let done = wait_finished(&server, &id).await;
    assert_eq!(done["phase"], "SUCCEEDED", "{done}");
    assert_eq!(done["attempt"], 1, "{done}");
    assert_eq!(done["termination"], json!({"class": "workload", "exitCode": 0, "reason": "WORKLOAD_SUCCEEDED"}));
    let digest = done["imageDigest"].as_str().unwrap();
    let hex = digest.strip_prefix("127.0.0.1:5000/tools/busybox@sha256:").unwrap_or_else(|| panic!("{digest}"));
    assert!(hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()), "{digest}");
    assert_eq!(done["labels"], json!({"team": "x"}));
    // Every phase, in order of time (engine start and finish sit between the grid's own).
    assert_eq!(
        phase_order(&done),
        ["ACCEPTED", "QUEUED", "PROVISIONING", "RUNNING", "PUBLISHING", "SUCCEEDED"],
        "{done}"
    );

    let a1 = attempt(&done, 1);
    assert_eq!(a1["attempt"], 1);
    assert_eq!(a1["phase"], "SUCCEEDED");
    assert_eq!(a1["funding"], "reservation");
    assert_eq!(a1["executor"]["engine"], "docker");
    assert_eq!(a1["executor"]["containerName"], format!("grid-{id}-1"));
    assert_eq!(done["executor"], a1["executor"]);
    assert_eq!(a1["logs"]["available"], true);
    assert_eq!(a1["logs"]["byteLength"], 3);
    assert_eq!(a1["logs"]["contentType"], "text/plain");
    assert_eq!(a1["logsTruncated"], false);
    assert_eq!(done["logs"], a1["logs"]);
    assert_eq!(done["logsTruncated"], false);
    let artifact_id = a1["logs"]["artifactId"].as_str().unwrap().to_string();
    assert!(artifact_id.starts_with("ca_"), "{artifact_id}");

    for query in ["", "?attempt=1"] {
        let log = logs(&server, &id, query).await;
        assert_eq!(log.status, 200, "{log}");
        assert_eq!(log.text, "hi\n");
        assert!(log.header("content-type").is_some_and(|c| c.starts_with("text/plain")), "{:?}", log.headers);
        assert_eq!(log.header("x-grid-attempt"), Some("1"));
        assert_eq!(log.header("x-grid-artifact-id"), Some(artifact_id.as_str()));
        assert_eq!(log.header("x-grid-logs-truncated"), Some("false"));
    }
    let arts = server.get(&format!("/jobs/{id}/artifacts")).await;
    assert_eq!(arts.status, 200, "{arts}");
    let list = arts.json["artifacts"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{arts}");
    assert_eq!(list[0]["artifactId"], artifact_id.as_str());
    assert_eq!(list[0]["kind"], "log");
    assert_eq!(list[0]["byteLength"], 3);
    assert_eq!(list[0]["contentType"], "text/plain");
    assert_eq!(list[0]["attempt"], 1);
    millis(&list[0]["createdAt"]);

    // Tracking has caught up: no degraded header; the container is removed.
    let r = server.get(&format!("/jobs/{id}")).await;
    assert_eq!(r.header("x-grid-compute-degraded"), None, "{:?}", r.headers);
    wait_container_removed(&id, 1).await;
    // A SUCCEEDED job is not retryable; cancel leaves it unchanged.
    assert_error(&server.post(&format!("/jobs/{id}/retry"), &json!({})).await, 409, "JOB_NOT_RETRYABLE");
    let c = server.post(&format!("/jobs/{id}/cancel"), &json!({})).await;
    assert_eq!((c.status, c.json["phase"].as_str()), (200, Some("SUCCEEDED")), "{c}");
}

#[tokio::test]
async fn non_zero_exit_is_workload_failed_with_its_exit_code() {
    let server = start_compute_server();
    let id = job_id(&submit_job(&server, &sh_job("echo oops >&2; exit 3")).await);
    let done = wait_finished(&server, &id).await;
    assert_eq!(done["phase"], "FAILED", "{done}");
    assert_eq!(done["termination"], json!({"class": "workload", "exitCode": 3, "reason": "WORKLOAD_FAILED"}));
    assert_eq!(attempt(&done, 1)["termination"], done["termination"]);
    let log = logs(&server, &id, "").await;
    assert_eq!((log.status, log.text.as_str()), (200, "oops\n"), "stderr is in the log: {log}");
}

#[tokio::test]
async fn memory_overrun_of_its_own_limit_is_platform_oom() {
    let server = start_compute_server();
    // tail keeps the whole newline-free stream in memory: past 256Mi the kernel kills it.
    let id = job_id(&submit_job(&server, &sh_job("head -c 400m /dev/zero | tail")).await);
    let done = wait_finished(&server, &id).await;
    assert_eq!(done["phase"], "FAILED", "{done}");
    assert_eq!(done["termination"], json!({"class": "workload", "exitCode": 137, "reason": "PLATFORM_OOM"}));
}

#[tokio::test]
async fn deadline_stops_the_container_as_timed_out_charged_for_the_deadline() {
    let server = start_compute_server();
    let mut body = job_body(&["sleep", "30"]);
    body["runningDeadlineSeconds"] = json!(2);
    let id = job_id(&submit_job(&server, &body).await);
    let done = wait_finished(&server, &id).await;
    assert_eq!(done["phase"], "TIMED_OUT", "{done}");
    assert_eq!(
        done["termination"],
        json!({"class": "workload", "exitCode": 137, "reason": "RUNNING_DEADLINE_EXCEEDED"})
    );
    let run = run_millis(attempt(&done, 1));
    assert!((1_900..10_000).contains(&run), "stopped {run} ms after start, deadline 2 s: {done}");
    // Reservation: 21,600 µ€/h × 2 s = 12 µ€; the charge is capped there.
    let reserved = rate_micros(500, 256 * MI, 2_000);
    assert_eq!(reserved, 12);
    let charge = expected_charge(attempt(&done, 1), 500, 256 * MI, 2);
    assert_eq!(charge, 12, "run {run} ms");
    server.wait_settled(server.account_id(), INITIAL - charge, SETTLE_TIMEOUT).await;
    let subject = format!("{id}/r1");
    assert_eq!(
        server.stored().job_ledger(&id),
        vec![("reserve".into(), 12, subject.clone()), ("charge".into(), 12, subject)]
    );
}

#[tokio::test]
async fn cancel_while_running_ends_cancelled_and_charges_the_run() {
    let server = start_compute_server();
    let id = job_id(&submit_job(&server, &job_body(&["sleep", "30"])).await);
    wait_running(&server, &id).await;
    let c = server.post(&format!("/jobs/{id}/cancel"), &json!({})).await;
    assert_eq!(c.status, 200, "{c}");
    assert_eq!(c.json["cancelRequested"], true, "{c}");
    let done = wait_finished(&server, &id).await;
    assert_eq!(done["phase"], "CANCELLED", "{done}");
    assert_eq!(done["termination"], json!({"class": "cancelled", "exitCode": 137, "reason": "CANCELLED"}));
    assert_eq!(done["logs"]["available"], true, "an attempt whose container started has a log: {done}");
    let run = run_millis(attempt(&done, 1));
    assert!(run < 20_000, "cancel did not stop the container: ran {run} ms");

    // Already cancelled: unchanged, 200. Not retryable.
    let again = server.post(&format!("/jobs/{id}/cancel"), &json!({})).await;
    assert_eq!((again.status, again.json["phase"].as_str()), (200, Some("CANCELLED")), "{again}");
    assert_error(&server.post(&format!("/jobs/{id}/retry"), &json!({})).await, 409, "JOB_NOT_RETRYABLE");

    let charge = expected_charge(attempt(&done, 1), 500, 256 * MI, 60);
    server.wait_settled(server.account_id(), INITIAL - charge, SETTLE_TIMEOUT).await;
    wait_container_removed(&id, 1).await;
}

#[tokio::test]
async fn eviction_with_retries_1_is_replayed_free_and_only_the_replay_is_charged() {
    let server = start_compute_server();
    let mut body = job_body(&["sleep", "4"]);
    body["retries"] = json!(1);
    let id = job_id(&submit_job(&server, &body).await);
    wait_running(&server, &id).await;
    let containers = running_containers(&id, 1);
    assert_eq!(containers.len(), 1, "container grid-{id}-1 not running: {containers:?}");
    let kill = docker(&["kill", &containers[0]]);
    assert!(kill.status.success(), "docker kill: {}", String::from_utf8_lossy(&kill.stderr));

    let (done, _) = wait_job(&server, &id, JOB_TIMEOUT, |r| r["attempt"] == 2 && is_finished(r)).await;
    assert_eq!(done["phase"], "SUCCEEDED", "{done}");
    let (a1, a2) = (attempt(&done, 1), attempt(&done, 2));
    assert_eq!(a1["phase"], "FAILED", "{done}");
    assert_eq!(a1["funding"], "reservation");
    assert_eq!(a1["termination"], json!({"class": "platform", "exitCode": null, "reason": "PLATFORM_EVICTED"}));
    assert_eq!(a2["funding"], "replay");
    assert_eq!(a2["termination"], json!({"class": "workload", "exitCode": 0, "reason": "WORKLOAD_SUCCEEDED"}));
    assert_eq!(a2["executor"]["containerName"], format!("grid-{id}-2"));
    assert!(run_millis(a2) >= 4_000 - ENGINE_CLOCK_SLACK_MS, "the replay ran the whole command: {a2}");

    // One reservation; the evicted attempt is free, the replay is charged from it.
    let charge = expected_charge(a2, 500, 256 * MI, 60);
    server.wait_settled(server.account_id(), INITIAL - charge, SETTLE_TIMEOUT).await;
    assert_eq!(server.stored().job_ledger(&id), settled_once(&id, DEFAULT_RESERVATION, charge));
    wait_container_removed(&id, 2).await;
}

#[tokio::test]
async fn retry_of_a_failed_job_runs_a_new_attempt_on_a_new_reservation() {
    let server = start_compute_server();
    let acc = server.account_id().to_string();
    let id = job_id(&submit_job(&server, &sh_job("echo run; sleep 1; exit 1")).await);
    let first = wait_finished(&server, &id).await;
    assert_eq!(first["phase"], "FAILED", "{first}");
    let c1 = expected_charge(attempt(&first, 1), 500, 256 * MI, 60);
    server.wait_settled(&acc, INITIAL - c1, SETTLE_TIMEOUT).await;

    let r = server.post(&format!("/jobs/{id}/retry"), &json!({})).await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json["attempt"], 2, "{r}");
    assert_eq!(r.json["phase"], "QUEUED", "{r}");
    assert_eq!(r.json["termination"], Value::Null, "{r}");
    assert_eq!(attempt(&r.json, 2)["funding"], "reservation", "{r}");
    let account = server.account_show(&acc);
    let still_running = !is_finished(&job(&server, &id).await);
    if still_running {
        assert_eq!(account["reservedMicros"], DEFAULT_RESERVATION, "retry holds a new reservation: {account}");
    }

    let second = wait_finished(&server, &id).await;
    assert_eq!(second["termination"], json!({"class": "workload", "exitCode": 1, "reason": "WORKLOAD_FAILED"}));
    let c2 = expected_charge(attempt(&second, 2), 500, 256 * MI, 60);
    server.wait_settled(&acc, INITIAL - c1 - c2, SETTLE_TIMEOUT).await;
    let (s1, s2) = (format!("{id}/r1"), format!("{id}/r2"));
    assert_eq!(
        server.stored().job_ledger(&id),
        vec![
            ("reserve".into(), DEFAULT_RESERVATION, s1.clone()),
            ("charge".into(), c1, s1.clone()),
            ("release".into(), DEFAULT_RESERVATION - c1, s1),
            ("reserve".into(), DEFAULT_RESERVATION, s2.clone()),
            ("charge".into(), c2, s2.clone()),
            ("release".into(), DEFAULT_RESERVATION - c2, s2),
        ]
    );
    // Both attempts keep their own log; the default is the current attempt's.
    let (l1, l2, l) =
        (logs(&server, &id, "?attempt=1").await, logs(&server, &id, "?attempt=2").await, logs(&server, &id, "").await);
    assert_eq!((l1.status, l1.text.as_str(), l1.header("x-grid-attempt")), (200, "run\n", Some("1")), "{l1}");
    assert_eq!((l2.status, l2.text.as_str(), l2.header("x-grid-attempt")), (200, "run\n", Some("2")), "{l2}");
    assert_ne!(l1.header("x-grid-artifact-id"), l2.header("x-grid-artifact-id"));
    assert_eq!(l.header("x-grid-artifact-id"), l2.header("x-grid-artifact-id"));
    let arts = server.get(&format!("/jobs/{id}/artifacts")).await;
    assert_eq!(arts.json["artifacts"].as_array().map(Vec::len), Some(2), "{arts}");
}

#[tokio::test]
async fn charge_is_exact_on_requested_cpu_and_memory_for_the_engine_run_time() {
    let server = start_compute_server();
    let acc = server.account_id().to_string();
    // Requests below the limits: the price follows the requests.
    let mut body = job_body(&["sleep", "1"]);
    body["resources"]["cpu"] = json!({"request": "1", "limit": "2"});
    body["resources"]["memory"] = json!({"request": "1Gi", "limit": "2Gi"});
    body["runningDeadlineSeconds"] = json!(30);
    // (40,000 + 6,400) µ€/h × 30 s = 386.67 → 387.
    let reservation = rate_micros(1_000, GI, 30_000);
    assert_eq!(reservation, 387);
    let id = job_id(&submit_job(&server, &body).await);
    let account = server.account_show(&acc);
    if !is_finished(&job(&server, &id).await) {
        assert_eq!(account["reservedMicros"], reservation, "{account}");
    }
    let done = wait_finished(&server, &id).await;
    assert_eq!(done["phase"], "SUCCEEDED", "{done}");
    let a1 = attempt(&done, 1);
    let run = run_millis(a1);
    assert!(run >= 1_000 - ENGINE_CLOCK_SLACK_MS, "sleep 1 ran {run} ms by the engine's clock");
    assert_eq!(millis(&a1["startedAt"]), millis(&a1["phaseTimestamps"]["RUNNING"]));
    assert_eq!(millis(&a1["endedAt"]), millis(&a1["phaseTimestamps"]["PUBLISHING"]));
    let charge = expected_charge(a1, 1_000, GI, 30);
    // About 12.9 µ€ per second; charging the limits would double it.
    assert!((12..=40).contains(&charge), "charge {charge} for {run} ms");
    server.wait_settled(&acc, INITIAL - charge, SETTLE_TIMEOUT).await;
    assert_eq!(server.stored().job_ledger(&id), settled_once(&id, reservation, charge));
}

#[tokio::test]
async fn log_is_cut_at_one_mebibyte_and_flagged() {
    let server = start_compute_server();
    let id = job_id(&submit_job(&server, &sh_job("head -c 2000000 /dev/zero | tr '\\0' a")).await);
    let done = wait_finished(&server, &id).await;
    assert_eq!(done["phase"], "SUCCEEDED", "{done}");
    assert_eq!(done["logsTruncated"], true, "{done}");
    assert_eq!(done["logs"]["byteLength"], 1_048_576, "{done}");
    let log = logs(&server, &id, "").await;
    assert_eq!(log.status, 200);
    assert_eq!(log.text.len(), 1_048_576);
    assert!(log.text.bytes().all(|b| b == b'a'));
    assert_eq!(log.header("x-grid-logs-truncated"), Some("true"));
    let arts = server.get(&format!("/jobs/{id}/artifacts")).await;
    assert_eq!(arts.json["artifacts"][0]["truncated"], true, "{arts}");
    assert_eq!(arts.json["artifacts"][0]["byteLength"], 1_048_576, "{arts}");
}

#[tokio::test]
async fn corrupted_log_file_answers_503_compute_unavailable() {
    let server = start_compute_server();
    let id = job_id(&submit_job(&server, &sh_job("echo hi")).await);
    assert_eq!(wait_finished(&server, &id).await["phase"], "SUCCEEDED");
    // The log is a file under the data dir on SQLite, bytes in the database
    // on PostgreSQL (any node serves it); either is checked on every read.
    let path = server.database().is_none().then(|| log_file(&server, &id, 1));
    let set_log = |bytes: Option<&[u8]>| match &path {
        None => server.stored().overwrite_job_log(&id, 1, bytes),
        Some(path) => match bytes {
            Some(b) => std::fs::write(path, b).unwrap(),
            None => std::fs::remove_file(path).unwrap(),
        },
    };
    let original = b"hi\n";
    assert_eq!(logs(&server, &id, "").await.text.as_bytes(), original);
    for corrupt in [&b"ho\n"[..], b"", b"hi\nmore"] {
        set_log(Some(corrupt));
        let r = logs(&server, &id, "").await;
        assert_error(&r, 503, "COMPUTE_UNAVAILABLE");
        assert_eq!(r.header("retry-after"), Some("5"), "{:?}", r.headers);
    }
    set_log(None);
    assert_error(&logs(&server, &id, "").await, 503, "COMPUTE_UNAVAILABLE");
    // Checked on every read: the right bytes serve again.
    set_log(Some(original));
    let r = logs(&server, &id, "").await;
    assert_eq!((r.status, r.text.as_str()), (200, "hi\n"), "{r}");
}

// ----- idempotency, listing, refusals -----

#[tokio::test]
async fn idempotent_resend_returns_the_same_job_and_reserves_nothing_more() {
    let server = start_compute_server();
    let acc = server.account_id().to_string();
    let body = sh_job("sleep 1; echo once");
    let id = job_id(&submit_job(&server, &body).await);

    let again = server.post("/jobs", &body).await;
    assert_eq!(again.status, 200, "{again}");
    assert_eq!(again.json["jobId"], id.as_str());
    // The same request written differently: quantities, defaults, key order.
    let mut same = json!({
        "idempotencyKey": body["idempotencyKey"],
        "labels": {}, "env": {},
        "capabilities": {"networkProfile": "none"},
        "retries": 0, "priority": 0, "args": [],
        "runningDeadlineSeconds": 60,
        "resources": {
            "ephemeralStorage": {"limit": "256Mi", "request": "256Mi"},
            "memory": {"limit": "256Mi", "request": "256Mi"},
            "cpu": {"limit": "0.5", "request": "500m"},
        },
        "command": body["command"],
        "image": IMAGE,
    });
    let r = server.post("/jobs", &same).await;
    assert_eq!((r.status, r.json["jobId"].as_str()), (200, Some(id.as_str())), "{r}");
    same["command"] = json!(["sh", "-c", "echo other"]);
    assert_error(&server.post("/jobs", &same).await, 409, "IDEMPOTENCY_CONFLICT");
    let mut bigger = body.clone();
    bigger["runningDeadlineSeconds"] = json!(61);
    assert_error(&server.post("/jobs", &bigger).await, 409, "IDEMPOTENCY_CONFLICT");

    let done = wait_finished(&server, &id).await;
    let after = server.post("/jobs", &body).await;
    assert_eq!((after.status, after.json["phase"].as_str()), (200, Some("SUCCEEDED")), "{after}");
    let charge = expected_charge(attempt(&done, 1), 500, 256 * MI, 60);
    server.wait_settled(&acc, INITIAL - charge, SETTLE_TIMEOUT).await;
    let reserves: Vec<_> = server.stored().job_ledger(&id).into_iter().filter(|e| e.0 == "reserve").collect();
    assert_eq!(reserves, vec![("reserve".into(), DEFAULT_RESERVATION, format!("{id}/r1"))]);
    let list = server.get("/jobs").await;
    assert_eq!(list.json["jobs"].as_array().map(Vec::len), Some(1), "one job only: {list}");
}

#[tokio::test]
async fn listing_pages_newest_first_with_cursor_phase_and_label_filters() {
    let server = start_compute_server();
    let mut submitted = vec![];
    for (script, team) in [("true", "a"), ("true", "b"), ("exit 1", "a")] {
        let mut body = sh_job(script);
        body["labels"] = json!({"team": team});
        submitted.push(job_id(&submit_job(&server, &body).await));
    }
    for id in &submitted {
        wait_finished(&server, id).await;
    }
    let (a, b, c) = (&submitted[0], &submitted[1], &submitted[2]);
    let ids = |r: &grid_tests::http::Resp| -> Vec<String> {
        r.json["jobs"].as_array().unwrap_or_else(|| panic!("{r}")).iter().map(job_id).collect()
    };
    let all = server.get("/jobs").await;
    assert_eq!(all.status, 200, "{all}");
    assert_eq!(ids(&all), vec![c.clone(), b.clone(), a.clone()]);
    assert_eq!(all.json["nextCursor"], Value::Null);

    // limit=1 pages through all three.
    let mut seen = vec![];
    let mut cursors = vec![];
    let mut path = "/jobs?limit=1".to_string();
    loop {
        let page = server.get(&path).await;
        assert_eq!(page.status, 200, "{page}");
        assert_eq!(page.json["jobs"].as_array().map(Vec::len), Some(1), "{page}");
        seen.extend(ids(&page));
        match page.json["nextCursor"].as_str() {
            Some(cur) => {
                cursors.push(cur.to_string());
                path = format!("/jobs?limit=1&cursor={}", urlencode(cur));
            }
            None => break,
        }
        assert!(seen.len() <= 3, "paging does not end: {seen:?}");
    }
    assert_eq!(seen, vec![c.clone(), b.clone(), a.clone()]);

    assert_eq!(ids(&server.get("/jobs?phase=FAILED").await), vec![c.clone()]);
    assert_eq!(ids(&server.get("/jobs?phase=SUCCEEDED").await), vec![b.clone(), a.clone()]);
    assert_eq!(ids(&server.get("/jobs?phase=RUNNING").await), Vec::<String>::new());
    assert_eq!(ids(&server.get("/jobs?label.team=a").await), vec![c.clone(), a.clone()]);
    assert_eq!(ids(&server.get("/jobs?label.team=a&phase=SUCCEEDED").await), vec![a.clone()]);
    let first = server.get("/jobs?label.team=a&limit=1").await;
    assert_eq!(ids(&first), vec![c.clone()]);
    let label_cursor = first.json["nextCursor"].as_str().unwrap().to_string();
    let second = server.get(&format!("/jobs?label.team=a&limit=1&cursor={}", urlencode(&label_cursor))).await;
    assert_eq!((ids(&second), second.json["nextCursor"].clone()), (vec![a.clone()], Value::Null));

    // Cursors: edited, of another query, of another account, or made up.
    let mut tampered = cursors[0].clone().into_bytes();
    let i = tampered.len() / 2;
    tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    for bad in [tampered.as_str(), label_cursor.as_str(), "abc", ""] {
        let r = server.get(&format!("/jobs?limit=1&cursor={}", urlencode(bad))).await;
        assert_error(&r, 400, "INVALID_LIST_CURSOR");
    }
    let (_, other_key) = server.create_account("other", 1_000_000);
    let r = server.get_as(Some(&other_key), &format!("/jobs?limit=1&cursor={}", urlencode(&cursors[0]))).await;
    assert_error(&r, 400, "INVALID_LIST_CURSOR");
    let theirs = server.get_as(Some(&other_key), "/jobs").await;
    assert_eq!(theirs.json, json!({"jobs": [], "nextCursor": null}), "{theirs}");

    for bad in [
        "foo=1",
        "label.team=a&label.x=b",
        "limit=0",
        "limit=101",
        "limit=x",
        "phase=RUN",
        "label.Team=a",
        "phase=FAILED&phase=FAILED",
    ] {
        assert_error(&server.get(&format!("/jobs?{bad}")).await, 400, "INVALID_LIST_QUERY");
    }
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[tokio::test]
async fn invalid_requests_are_refused_by_field_and_reserve_nothing() {
    let server = start_compute_server();
    let acc = server.account_id().to_string();
    // Wait until the engine is connected, so the refusals below are the validators'.
    let ok = submit_job(&server, &sh_job("true")).await;
    wait_finished(&server, &job_id(&ok)).await;
    let before = server.account_show(&acc);

    let mut body = job_body(&[]);
    body["resources"]["cpu"] = json!({"request": "100m", "limit": "100m"});
    body["resources"]["memory"] = json!({"request": "1Gi", "limit": "100Gi"});
    body["resources"]["ephemeralStorage"] = json!({"request": "1Gi", "limit": "512Mi"});
    body["env"] = json!({"GRID_X": "1", "PATH": "/x", "ok_lower": "1"});
    body["labels"] = json!({"Team": "x"});
    body["retries"] = json!(4);
    body["priority"] = json!(11);
    body["runningDeadlineSeconds"] = json!(0);
    body["foo"] = json!(1);
    let r = server.post("/jobs", &body).await;
    assert_error(&r, 400, "INVALID_JOB_REQUEST");
    let detail: Vec<String> = r.json["detail"]
        .as_array()
        .unwrap_or_else(|| panic!("no detail: {r}"))
        .iter()
        .map(|d| d.as_str().unwrap().to_string())
        .collect();
    for field in [
        "command",
        "resources.cpu",
        "resources.memory",
        "resources.ephemeralStorage",
        "env.GRID_X",
        "env.PATH",
        "env.ok_lower",
        "labels",
        "retries",
        "priority",
        "runningDeadlineSeconds",
        "foo",
    ] {
        assert!(detail.iter().any(|d| d.starts_with(field)), "no problem named {field:?} in {detail:?}");
    }
    let mut no_image = job_body(&["true"]);
    no_image.as_object_mut().unwrap().remove("image");
    let r = server.post("/jobs", &no_image).await;
    assert_error(&r, 400, "INVALID_JOB_REQUEST");
    assert!(r.text.contains("image"), "{r}");
    let r = server.request(reqwest::Method::POST, "/jobs", Some(server.api_key()), None).await;
    assert_error(&r, 400, "INVALID_JOB_REQUEST");

    for image in [
        "127.0.0.1:5000/other/busybox:1",
        "127.0.0.1:5000/toolsx/busybox:1",
        "busybox:1",
        "127.0.0.1:5000/tools/busybox:no-such-tag",
        "127.0.0.1:5000/tools/no-such-image:1",
    ] {
        let mut b = job_body(&["true"]);
        b["image"] = json!(image);
        let r = server.post("/jobs", &b).await;
        assert_error(&r, 400, "INVALID_IMAGE");
        assert!(r.json["detail"].as_str().is_some_and(|d| !d.is_empty()), "{image}: {r}");
    }

    let mut https = job_body(&["true"]);
    https["capabilities"] = json!({"networkProfile": "public-https"});
    let r = server.post("/jobs", &https).await;
    assert_error(&r, 422, "CAPABILITY_NOT_AVAILABLE");
    assert_eq!(r.json["capability"], "networkProfile:public-https", "{r}");

    assert_eq!(server.account_show(&acc), before, "a refusal moved money");
    assert_eq!(server.get("/jobs").await.json["jobs"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn reservation_above_credit_is_402_and_creates_no_job() {
    let server = start_compute_server();
    let (acc, key) = server.create_account("poor", 100);
    let r = post_job_as(&server, &key, &job_body(&["true"])).await;
    assert_error(&r, 402, "insufficient_credit");
    assert_eq!(r.json, json!({"error": "insufficient_credit", "requiredMicros": 360, "availableMicros": 100}));
    assert_eq!(server.get_as(Some(&key), "/jobs").await.json, json!({"jobs": [], "nextCursor": null}));
    let show = server.account_show(&acc);
    assert_eq!((show["creditMicros"].as_i64(), show["reservedMicros"].as_i64()), (Some(100), Some(0)), "{show}");

    // 10 s fits: 21,600 µ€/h × 10 s = 60 µ€.
    let mut small = job_body(&["true"]);
    small["runningDeadlineSeconds"] = json!(10);
    let id = job_id(&submit_job_as(&server, &key, &small).await);
    let show = server.account_show(&acc);
    assert_eq!(show["creditMicros"].as_i64(), Some(100), "{show}");
    let r = wait_finished_as(&server, &key, &id).await;
    assert_eq!(r["phase"], "SUCCEEDED", "{r}");
}

async fn wait_finished_as(server: &GridServer, key: &str, id: &str) -> Value {
    let r = wait_for(&format!("job {id} finished"), JOB_TIMEOUT, || async {
        let r = job_as(server, key, id).await;
        match is_finished(&r) {
            true => Ok(r),
            false => Err(r.to_string()),
        }
    })
    .await;
    wait_container_removed(id, 1).await;
    r
}

#[tokio::test]
async fn another_accounts_job_is_unknown_everywhere() {
    let server = start_compute_server();
    let id = job_id(&submit_job(&server, &sh_job("echo mine")).await);
    assert_eq!(wait_finished(&server, &id).await["phase"], "SUCCEEDED");
    let (_, other) = server.create_account("other", 1_000_000);
    let k = Some(other.as_str());
    for r in [
        server.get_as(k, &format!("/jobs/{id}")).await,
        server.post_as(k, &format!("/jobs/{id}/cancel"), None).await,
        server.post_as(k, &format!("/jobs/{id}/retry"), None).await,
        server.get_as(k, &format!("/jobs/{id}/artifacts")).await,
        server.get_as(k, &format!("/jobs/{id}/logs")).await,
        server.get_as(k, "/jobs/cj_doesnotexist").await,
    ] {
        assert_error(&r, 404, "unknown job");
    }
    assert_eq!(server.get_as(k, "/jobs").await.json, json!({"jobs": [], "nextCursor": null}));
    let mine = logs(&server, &id, "").await;
    assert_eq!((mine.status, mine.text.as_str()), (200, "mine\n"));
}

#[tokio::test]
async fn logs_are_not_available_before_the_attempt_ends_and_bad_log_queries_are_400() {
    let server = start_compute_server();
    let id = job_id(&submit_job(&server, &job_body(&["sleep", "30"])).await);
    assert_error(&logs(&server, &id, "").await, 404, "LOGS_NOT_AVAILABLE");
    wait_running(&server, &id).await;
    for q in ["", "?attempt=1", "?attempt=2"] {
        assert_error(&logs(&server, &id, q).await, 404, "LOGS_NOT_AVAILABLE");
    }
    for q in
        ["?attempt=0", "?attempt=-1", "?attempt=x", "?attempt=1.5", "?attempt=1&attempt=1", "?foo=1", "?attempt=1&x=2"]
    {
        assert_error(&logs(&server, &id, q).await, 400, "INVALID_LOG_QUERY");
    }
    server.post(&format!("/jobs/{id}/cancel"), &json!({})).await;
    assert_eq!(wait_finished(&server, &id).await["phase"], "CANCELLED");
    let r = logs(&server, &id, "?attempt=1").await;
    assert_eq!((r.status, r.header("x-grid-attempt")), (200, Some("1")), "{r}");
    assert_error(&logs(&server, &id, "?attempt=2").await, 404, "LOGS_NOT_AVAILABLE");
}

#[tokio::test]
async fn docker_unreachable_answers_503_and_reads_are_served_from_the_store_flagged_degraded() {
    let mut server = start_compute_server();
    let acc = server.account_id().to_string();
    let body = sh_job("echo stored");
    let id = job_id(&submit_job(&server, &body).await);
    let done = wait_finished(&server, &id).await;
    assert_eq!(done["phase"], "SUCCEEDED");
    let charge = expected_charge(attempt(&done, 1), 500, 256 * MI, 60);
    server.wait_settled(&acc, INITIAL - charge, SETTLE_TIMEOUT).await;

    server.kill9();
    server.set_extra_args(vec![
        "--admit-registry".into(),
        ADMITTED.into(),
        "--docker-host".into(),
        "unix:///nonexistent.sock".into(),
    ]);
    server.restart();

    let r = server.post("/jobs", &sh_job("echo new")).await;
    assert_error(&r, 503, "COMPUTE_UNAVAILABLE");
    assert_eq!(r.header("retry-after"), Some("5"), "{:?}", r.headers);
    let got = server.get(&format!("/jobs/{id}")).await;
    assert_eq!(got.status, 200, "{got}");
    assert_eq!(got.header("x-grid-compute-degraded"), Some("reconciler-unready"), "{:?}", got.headers);
    assert_eq!(got.json["phase"], "SUCCEEDED");
    // A resend is answered from the store; logs, artifacts and the list too.
    let resend = server.post("/jobs", &body).await;
    assert_eq!((resend.status, resend.json["jobId"].as_str()), (200, Some(id.as_str())), "{resend}");
    let log = logs(&server, &id, "").await;
    assert_eq!((log.status, log.text.as_str()), (200, "stored\n"), "{log}");
    assert_eq!(server.get("/jobs").await.json["jobs"].as_array().map(Vec::len), Some(1));
    // Still degraded a few health checks later; the refusal reserved nothing.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let again = server.get(&format!("/jobs/{id}")).await;
    assert_eq!(again.header("x-grid-compute-degraded"), Some("reconciler-unready"));
    let r = server.post("/jobs", &sh_job("echo new")).await;
    assert_error(&r, 503, "COMPUTE_UNAVAILABLE");
    let show = server.account_show(&acc);
    assert_eq!(
        (show["creditMicros"].as_i64(), show["reservedMicros"].as_i64()),
        (Some(INITIAL - charge), Some(0)),
        "{show}"
    );
}

#[tokio::test]
async fn kill_9_while_running_then_restart_finishes_the_job_with_its_log_charged_once() {
    let mut server = start_compute_server();
    let acc = server.account_id().to_string();
    let id = job_id(&submit_job(&server, &sh_job("echo before; sleep 5; echo after")).await);
    wait_running(&server, &id).await;
    server.kill9();
    assert_eq!(running_containers(&id, 1).len(), 1, "the container keeps running while the server is away");
    server.restart();
    let done = wait_finished(&server, &id).await;
    assert_eq!(done["phase"], "SUCCEEDED", "{done}");
    assert_eq!(done["attempts"].as_array().map(Vec::len), Some(1), "{done}");
    assert_eq!(done["termination"], json!({"class": "workload", "exitCode": 0, "reason": "WORKLOAD_SUCCEEDED"}));
    let log = logs(&server, &id, "").await;
    assert_eq!((log.status, log.text.as_str()), (200, "before\nafter\n"), "{log}");
    let run = run_millis(attempt(&done, 1));
    assert!(run >= 5_000 - ENGINE_CLOCK_SLACK_MS, "run time from the engine's clock: {run} ms");
    let charge = expected_charge(attempt(&done, 1), 500, 256 * MI, 60);
    server.wait_settled(&acc, INITIAL - charge, SETTLE_TIMEOUT).await;
    assert_eq!(server.stored().job_ledger(&id), settled_once(&id, DEFAULT_RESERVATION, charge));
    wait_container_removed(&id, 1).await;
}

// ----- SDK and CLI -----

#[tokio::test]
async fn sdk_submits_resends_follows_the_log_and_lists() {
    use grid_client::jobs::{JobBuilder, JobListQuery};
    let server = start_compute_server();
    let client = server.client();
    let new_job = JobBuilder::new(IMAGE, ["sh", "-c", "echo sdk"])
        .cpu("500m")
        .memory("256Mi")
        .deadline_seconds(30)
        .label("via", "sdk")
        .idempotency_key(unique_key("sdk"))
        .build();
    let submitted = wait_for("submit_job answered other than retryable", Duration::from_secs(20), || async {
        match client.submit_job(&new_job).await {
            Err(e) if e.is_retryable() => Err(e.to_string()),
            other => Ok(other),
        }
    })
    .await
    .unwrap_or_else(|e| server.fail(&format!("submit_job: {e}")));
    assert!(submitted.created);
    let id = submitted.record.job_id.clone();
    let resent = client.submit_job(&new_job).await.unwrap();
    assert!(!resent.created);
    assert_eq!(resent.record.job_id, id);

    let log = tokio::time::timeout(JOB_TIMEOUT, client.wait_job_log(&id, None, Duration::from_millis(100)))
        .await
        .expect("log within the timeout")
        .unwrap_or_else(|e| server.fail(&format!("wait_job_log: {e}")));
    assert_eq!((&log.body[..], log.attempt, log.truncated), (&b"sdk\n"[..], 1, false));
    let record = client.job(&id).await.unwrap();
    assert_eq!(record.logs.artifact_id.as_deref(), Some(log.artifact_id.as_str()));
    assert_eq!(record.phase.as_str(), "SUCCEEDED");
    let listed = client
        .list_all_jobs(&JobListQuery {
            limit: Some(1),
            label: Some(("via".into(), "sdk".into())),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.iter().map(|r| r.job_id.clone()).collect::<Vec<_>>(), vec![id.clone()]);
    assert_eq!(client.job_artifacts(&id).await.unwrap().artifacts.len(), 1);
    let e = client.retry_job(&id).await.unwrap_err();
    assert_eq!((e.status(), e.error_code()), (Some(409), Some("JOB_NOT_RETRYABLE")), "{e}");
    let e = client.job_logs(&id, Some(2)).await.unwrap_err();
    assert_eq!((e.status(), e.error_code()), (Some(404), Some("LOGS_NOT_AVAILABLE")), "{e}");
    wait_container_removed(&id, 1).await;
}

#[tokio::test]
async fn cli_job_submit_then_logs_follow_prints_hi() {
    let server = start_compute_server();
    // The engine connection comes up just after start.
    wait_finished(&server, &job_id(&submit_job(&server, &sh_job("true")).await)).await;
    let key = unique_key("cli");
    let submit = [
        "job",
        "submit",
        "--image",
        IMAGE,
        "--cpu",
        "500m",
        "--memory",
        "256Mi",
        "--deadline",
        "60",
        "--label",
        "team=x",
        "--idempotency-key",
        &key,
        "--",
        "sh",
        "-c",
        "echo hi",
    ];
    let out = server.cli(&submit);
    assert!(out.success(), "{out}");
    let id = out.stdout.trim().to_string();
    assert!(id.starts_with("cj_") && !id.contains(char::is_whitespace), "{out}");

    let follow = server.cli(&["job", "logs", &id, "--follow", "--poll-interval", "0.2", "--timeout", "90"]);
    assert!(follow.success(), "{follow}");
    assert_eq!(follow.stdout, "hi\n", "{follow}");

    let again = server.cli(&submit);
    assert!(again.success(), "{again}");
    assert_eq!(again.stdout.trim(), id, "same key, same job: {again}");
    let show = server.cli(&["job", "show", &id, "--json"]);
    assert!(show.success(), "{show}");
    assert_eq!(show.json().unwrap()["phase"], "SUCCEEDED", "{show}");
    let human = server.cli(&["job", "show", &id]);
    assert!(human.success() && human.stdout.contains("WORKLOAD_SUCCEEDED"), "{human}");
    let list = server.cli(&["job", "list", "--phase", "SUCCEEDED", "--label", "team=x", "--limit", "1", "--all"]);
    assert!(list.success(), "{list}");
    assert!(list.stdout.lines().any(|l| l.starts_with(&id)), "{list}");
    assert_eq!(list.stdout.lines().count(), 2, "header and one job: {list}");
    let arts = server.cli(&["job", "artifacts", &id]);
    assert!(arts.success() && arts.stdout.contains(" log "), "{arts}");
    wait_container_removed(&id, 1).await;
}

#[tokio::test]
async fn cli_job_cancel_and_retry() {
    let server = start_compute_server();
    let sleeper = job_id(&submit_job(&server, &job_body(&["sleep", "30"])).await);
    wait_running(&server, &sleeper).await;
    let cancel = server.cli(&["job", "cancel", &sleeper]);
    assert!(cancel.success(), "{cancel}");
    assert!(cancel.stdout.contains(&format!("job {sleeper} cancel requested")), "{cancel}");
    assert_eq!(wait_finished(&server, &sleeper).await["phase"], "CANCELLED");
    let refused = server.cli(&["job", "retry", &sleeper]);
    assert_eq!(refused.code, Some(1), "{refused}");
    assert!(refused.stderr.contains("409 JOB_NOT_RETRYABLE"), "{refused}");

    let failing = job_id(&submit_job(&server, &sh_job("echo fail; exit 2")).await);
    assert_eq!(wait_finished(&server, &failing).await["phase"], "FAILED");
    let retry = server.cli(&["job", "retry", &failing, "--json"]);
    assert!(retry.success(), "{retry}");
    assert_eq!(retry.json().unwrap()["attempt"], 2, "{retry}");
    let (done, _) = wait_job(&server, &failing, JOB_TIMEOUT, |r| r["attempt"] == 2 && is_finished(r)).await;
    assert_eq!(done["phase"], "FAILED");
    wait_container_removed(&failing, 2).await;
    let first = server.cli(&["job", "logs", &failing, "--attempt", "1"]);
    assert_eq!((first.code, first.stdout.as_str()), (Some(0), "fail\n"), "{first}");
    let missing = server.cli(&["job", "logs", &failing, "--attempt", "3"]);
    assert!(missing.code == Some(1) && missing.stderr.contains("404 LOGS_NOT_AVAILABLE"), "{missing}");
}

/// A job printing more than its whole ephemeral storage (256Mi): the
/// engine's log of its container is capped within that storage (json-file,
/// two files of 16 MiB, docs/jobs.md), so the host never holds more; the
/// job is not evicted for its output, and its published log is the usual
/// 1 MiB, flagged truncated.
#[tokio::test]
async fn the_engine_log_of_a_container_is_capped_within_its_ephemeral_storage() {
    const OUTPUT: u64 = 320_000_000;
    const BUDGET: u64 = 32 * MI;
    /// One message (at most 16 KiB) may overshoot a file's size before it rotates.
    const SLACK: u64 = 64 * 1024;
    let server = start_compute_server();
    let script = format!("head -c {OUTPUT} /dev/zero | tr '\\0' a; echo; sleep 2");
    let id = job_id(&submit_job(&server, &sh_job(&script)).await);
    wait_running(&server, &id).await;
    let containers = running_containers(&id, 1);
    assert_eq!(containers.len(), 1, "container grid-{id}-1 not running: {containers:?}");
    let out = docker(&["inspect", "--format", "{{json .HostConfig.LogConfig}}\n{{.LogPath}}", &containers[0]]);
    assert!(out.status.success(), "docker inspect: {}", String::from_utf8_lossy(&out.stderr));
    let out = String::from_utf8_lossy(&out.stdout).to_string();
    let (config, log_path) = out.trim().split_once('\n').unwrap_or_else(|| panic!("docker inspect printed {out}"));
    let config: Value = serde_json::from_str(config).unwrap_or_else(|e| panic!("LogConfig {config}: {e}"));
    assert_eq!(
        config,
        json!({"Type": "json-file", "Config": {"max-size": (BUDGET / 2).to_string(), "max-file": "2"}}),
        "HostConfig.LogConfig"
    );

    // The engine's files on the host, measured while the job prints.
    let on_host = || -> u64 {
        [log_path.to_string(), format!("{log_path}.1"), format!("{log_path}.2")]
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum()
    };
    // The log's size on the host, sampled while the job runs.
    let most = std::cell::Cell::new(0);
    let done = wait_for(&format!("job {id} finished"), JOB_TIMEOUT, || async {
        most.set(most.get().max(on_host()));
        let record = job(&server, &id).await;
        match is_finished(&record) {
            true => Ok(record),
            false => Err(record.to_string()),
        }
    })
    .await;
    let most = most.get();
    assert!(most > BUDGET / 2, "the engine's log never reached one file ({most} bytes): the output was not logged");
    assert!(most <= BUDGET + SLACK, "the engine kept {most} bytes of log on the host, more than {BUDGET}");

    assert_eq!(done["phase"], "SUCCEEDED", "output to the log is not ephemeral storage of the layer: {done}");
    assert_eq!(done["logsTruncated"], true, "{done}");
    assert_eq!(done["logs"]["byteLength"], 1_048_576, "{done}");
    let log = logs(&server, &id, "").await;
    assert_eq!((log.status, log.text.len()), (200, 1_048_576));
    assert!(log.text.bytes().all(|b| b == b'a'));
    wait_container_removed(&id, 1).await;
}

// ----- containment -----

/// `Name:\tA\tB…` of a /proc/PID/status: the fields after the name.
fn status_fields<'a>(status: &'a str, name: &str) -> Vec<&'a str> {
    let fields = grid_tests::host::status_fields(status, name);
    assert!(!fields.is_empty(), "no {name}: line in /proc/PID/status:\n{status}");
    fields
}

/// The attempt's scratch on the host: its container's `/tmp`.
fn scratch_dir(server: &GridServer, id: &str, attempt: u32) -> std::path::PathBuf {
    server.data_dir().join("job-scratch").join(format!("{id}-{attempt}"))
}

/// Waits until the attempt's scratch is gone from the host (removed just
/// after the commit that ends the attempt).
async fn wait_scratch_removed(server: &GridServer, id: &str, attempt: u32) {
    let dir = scratch_dir(server, id, attempt);
    let what = format!("the scratch {} of job {id} removed with its attempt", dir.display());
    wait_until(&what, Duration::from_secs(20), || match std::fs::symlink_metadata(&dir) {
        Ok(_) => Err("still there".to_string()),
        Err(_) => Ok(()),
    })
    .await;
}

/// `docker inspect --format FORMAT container`, trimmed; panics on failure.
fn inspect(container: &str, format: &str) -> String {
    let out = docker(&["inspect", "--format", format, container]);
    assert!(out.status.success(), "docker inspect {container}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A job container runs as the Kubernetes "restricted" Pod Security Standard
/// asks: seen from the host, its process is not root (uid and gid, all four
/// fields), holds no capability, cannot gain privileges, runs under the
/// engine's seccomp filter when the engine has one; its root filesystem is
/// read-only, its `/tmp` the attempt's scratch directory on the node's
/// disk (the job user's, 0700), no tmpfs. Before: uid 0 on the host, the
/// default capability set less three, a writable root.
#[tokio::test]
async fn a_job_container_runs_as_non_root_with_no_capabilities_on_a_read_only_root() {
    let server = start_compute_server();
    let id = job_id(&submit_job(&server, &job_body(&["sleep", "60"])).await);
    wait_running(&server, &id).await;
    let containers = running_containers(&id, 1);
    assert_eq!(containers.len(), 1, "container grid-{id}-1 not running: {containers:?}");
    let container = &containers[0];

    // The container's first process (the job's `sleep`), as the host's kernel sees it.
    let pid = wait_until(&format!("a process in container {container} of job {id}"), Duration::from_secs(20), || {
        let pid = inspect(container, "{{.State.Pid}}");
        match pid.parse::<u32>() {
            Ok(p) if p > 0 => Ok(p),
            _ => Err(format!("State.Pid {pid}")),
        }
    })
    .await;
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).unwrap_or_else(|e| server.fail(&format!("read {path}: {e}")));
    assert_eq!(status_fields(&status, "Name"), ["sleep"], "State.Pid is not the job's process:\n{status}");
    for name in ["Uid", "Gid"] {
        let ids = status_fields(&status, name);
        assert_eq!(ids.len(), 4, "{name}: real, effective, saved, filesystem:\n{status}");
        assert!(ids.iter().all(|i| *i != "0"), "the job's process runs with {name} {ids:?} on the host (0 is root)");
    }
    for name in ["CapEff", "CapPrm", "CapBnd", "CapAmb"] {
        assert_eq!(status_fields(&status, name), ["0000000000000000"], "{name}: every capability dropped:\n{status}");
    }
    assert_eq!(status_fields(&status, "NoNewPrivs"), ["1"], "no privilege escalation:\n{status}");
    let engine_security = docker(&["info", "--format", "{{json .SecurityOptions}}"]);
    assert!(engine_security.status.success(), "docker info: {}", String::from_utf8_lossy(&engine_security.stderr));
    if String::from_utf8_lossy(&engine_security.stdout).contains("name=seccomp") {
        assert_eq!(status_fields(&status, "Seccomp"), ["2"], "the engine's seccomp filter applies:\n{status}");
    }

    let host = inspect(container, "{{json .HostConfig.ReadonlyRootfs}} {{json .HostConfig.SecurityOpt}}");
    assert_eq!(host, r#"true ["no-new-privileges:true"]"#, "ReadonlyRootfs and SecurityOpt (no profile unconfined)");
    let mounts =
        inspect(container, "{{json .HostConfig.Tmpfs}} {{json .HostConfig.Binds}} {{json .HostConfig.Mounts}}");
    let mounts =
        mounts.strip_prefix("null null ").unwrap_or_else(|| panic!("a tmpfs or a bind besides Mounts: {mounts}"));
    let mounts: Value = serde_json::from_str(mounts).unwrap_or_else(|e| panic!("HostConfig.Mounts {mounts}: {e}"));
    let scratch = scratch_dir(&server, &id, 1);
    assert_eq!(
        mounts,
        json!([{"Type": "bind", "Source": scratch.to_str().unwrap(), "Target": "/tmp"}]),
        "HostConfig.Mounts: the scratch, read-write, at /tmp"
    );
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(&scratch).unwrap_or_else(|e| server.fail(&format!("{}: {e}", scratch.display())));
    assert!(m.is_dir(), "{}", scratch.display());
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (65534, 65534, 0o700), "the scratch's owner and mode");

    let c = server.post(&format!("/jobs/{id}/cancel"), &json!({})).await;
    assert_eq!(c.status, 200, "{c}");
    assert_eq!(wait_finished(&server, &id).await["phase"], "CANCELLED");
    wait_scratch_removed(&server, &id, 1).await;
}

/// The only place a job writes is its `/tmp`, on the node's disk and
/// bounded by its ephemeral storage less the engine log's share: writing
/// there works (as the job's non-root user); writing to `/` fails with the
/// kernel's "Read-only file system" in the job's log; what `/tmp` holds is
/// disk, not memory: a job of 256Mi memory keeps 300 MiB there. Each
/// attempt's scratch is gone once the attempt ends. Before (a tmpfs at
/// `/tmp`, its pages charged to the job's memory): the 300 MiB job was
/// OOM-killed. Writing past the bound:
/// `a_job_writing_past_its_ephemeral_storage_as_fast_as_it_can_gets_no_more_than_its_bound`.
#[tokio::test]
async fn a_job_writes_only_to_its_tmp_which_its_ephemeral_storage_bounds() {
    let server = start_compute_server();
    let tmp = job_id(&submit_job(&server, &sh_job("echo data > /tmp/f && cat /tmp/f && id -u")).await);
    let root = job_id(&submit_job(&server, &job_body(&["touch", "/x"])).await);
    // 1Gi of storage, 256Mi of memory: 300 MiB in /tmp (more than the memory limit) is disk.
    let mut big = sh_job("dd if=/dev/zero of=/tmp/big bs=1M count=300 2>/dev/null && wc -c < /tmp/big");
    big["resources"]["ephemeralStorage"] = json!({"request": "1Gi", "limit": "1Gi"});
    let big = job_id(&submit_job(&server, &big).await);

    let done = wait_finished(&server, &tmp).await;
    let log = logs(&server, &tmp, "").await;
    assert_eq!(done["phase"], "SUCCEEDED", "writing to /tmp must work; log {log}: {done}");
    let (data, uid) = log.text.split_once('\n').unwrap_or_else(|| panic!("log of {tmp}: {log}"));
    assert_eq!(data, "data", "{log}");
    assert_ne!(uid.trim(), "0", "the job runs as root: {log}");

    let done = wait_finished(&server, &root).await;
    assert_eq!(done["phase"], "FAILED", "writing to / must fail: {done}");
    assert_eq!(done["termination"], json!({"class": "workload", "exitCode": 1, "reason": "WORKLOAD_FAILED"}));
    let log = logs(&server, &root, "").await;
    assert_eq!(log.status, 200, "{log}");
    assert!(log.text.contains("Read-only file system"), "the log says why: {log}");

    let done = wait_finished(&server, &big).await;
    let log = logs(&server, &big, "").await;
    assert_eq!(done["phase"], "SUCCEEDED", "300 MiB in /tmp with 256Mi of memory; log {log}: {done}");
    assert_eq!(log.text.trim(), (300 * MI).to_string(), "{log}");

    for id in [&tmp, &root, &big] {
        wait_scratch_removed(&server, id, 1).await;
    }
}

/// Bytes on disk (`st_blocks` × 512) of everything under `dir` on `dir`'s
/// own filesystem: a scratch mounted below it is counted as its image file,
/// not twice. Entries vanishing meanwhile are skipped.
fn disk_bytes_on_one_device(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(top) = std::fs::symlink_metadata(dir) else { return 0 };
    let (device, mut total, mut stack) = (top.dev(), 0, vec![dir.to_path_buf()]);
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = entry.path().symlink_metadata() else { continue };
            if m.dev() != device {
                continue;
            }
            total += m.blocks() * 512;
            if m.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    total
}

/// A job writing past its ephemeral storage (256Mi: 224 MiB for `/tmp`, the
/// engine's log keeps 32 MiB), as fast as it can and again after each
/// refusal, is refused by the kernel at the bound: every write past it fails
/// with "No space left on device", the host never holds more than the bound
/// for it (sampled from the host throughout), and the job ends as its
/// program chooses (here exit 1: WORKLOAD_FAILED). Before (a folder on the
/// host's disk measured every 2 s): nothing refused a write, the job wrote
/// what it could in up to 2 s past the bound before it was evicted.
#[tokio::test]
async fn a_job_writing_past_its_ephemeral_storage_as_fast_as_it_can_gets_no_more_than_its_bound() {
    let server = start_compute_server();
    let bound = 224 * MI;
    // New 64 MiB files until 20 writes were refused; then what dd said and what /tmp holds.
    let script = "i=0; n=0; while [ $n -lt 20 ]; do \
                  out=$(dd if=/dev/zero of=/tmp/f$i bs=1M count=64 2>&1) || n=$((n+1)); i=$((i+1)); done; \
                  echo \"$out\"; echo \"refused $n of $i\"; du -sk /tmp; exit 1";
    let id = job_id(&submit_job(&server, &sh_job(script)).await);
    let root = server.data_dir().join("job-scratch");
    let (stop, peak) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(disk_bytes_on_one_device(&root), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let done = wait_finished(&server, &id).await;
    stop.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    let log = logs(&server, &id, "").await;
    let peak = peak.load(Ordering::Relaxed);
    assert!(peak <= bound, "the host held {} MiB for a /tmp bound of 224 MiB; log {log}", peak / MI);
    assert_eq!(done["termination"], json!({"class": "workload", "exitCode": 1, "reason": "WORKLOAD_FAILED"}), "{log}");
    assert!(log.text.contains("No space left on device"), "the write past the bound is refused: {log}");
    assert!(log.text.contains("refused 20 of"), "{log}");
    let held_kib: u64 = log.text.lines().last().and_then(|l| l.split_whitespace().next()?.parse().ok()).unwrap_or(0);
    assert!(held_kib > 0 && held_kib * 1024 <= bound, "/tmp held {held_kib} KiB for a bound of 224 MiB: {log}");
    wait_scratch_removed(&server, &id, 1).await;
    assert_eq!(disk_bytes_on_one_device(&server.data_dir().join("job-scratch")) / MI, 0, "the image went with it");
}

// ----- regressions -----

/// Regression: the running deadline was an in-memory sleep of the task
/// supervising the attempt. With the server killed, nothing fired; after the
/// restart it fired at "now", so the attempt ended (and was dated) long
/// after its deadline. The deadline is now a durable due time, fired at the
/// deadline itself by whichever process is alive.
#[tokio::test]
async fn job_deadline_passed_while_the_server_was_down_ends_timed_out_at_the_deadline() {
    const DEADLINE_SECS: i64 = 5;
    let mut server = start_compute_server();
    let acc = server.account_id().to_string();
    let mut body = job_body(&["sleep", "60"]);
    body["runningDeadlineSeconds"] = json!(DEADLINE_SECS);
    let id = job_id(&submit_job(&server, &body).await);
    let running = wait_running(&server, &id).await;
    server.kill9();
    let phase = server.stored().job_phase(&id).unwrap_or_default();
    assert_eq!(phase, "RUNNING", "the deadline must still be ahead when the server dies");
    let started = millis(&attempt(&running, 1)["startedAt"]);
    let deadline = started + DEADLINE_SECS * 1_000;
    // Stay away until well past the deadline, so an end dated at the restart
    // cannot pass for one dated at the deadline.
    while chrono::Utc::now().timestamp_millis() < deadline + 3_000 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(running_containers(&id, 1).len(), 1, "the container runs on past its deadline while the server is away");
    server.restart();

    let done = wait_finished(&server, &id).await;
    assert_eq!(done["phase"], "TIMED_OUT", "{done}");
    assert_eq!(
        done["termination"],
        json!({"class": "workload", "exitCode": 137, "reason": "RUNNING_DEADLINE_EXCEEDED"})
    );
    let a1 = attempt(&done, 1);
    assert_eq!(millis(&a1["startedAt"]), started, "{done}");
    // Both ends are the engine's StartedAt (kept to the millisecond) plus the deadline.
    let ended = millis(&a1["endedAt"]);
    assert!((ended - deadline).abs() <= 1, "attempt ended {} ms after its deadline: {done}", ended - deadline);
    // Charged for exactly the deadline's run time, once.
    let charge = rate_micros(500, 256 * MI, DEADLINE_SECS * 1_000);
    server.wait_settled(&acc, INITIAL - charge, SETTLE_TIMEOUT).await;
    let subject = format!("{id}/r1");
    assert_eq!(
        server.stored().job_ledger(&id),
        vec![("reserve".into(), charge, subject.clone()), ("charge".into(), charge, subject)],
        "the reservation is the deadline's price and all of it is charged"
    );
}

/// A request no node's engine can hold is refused 400 naming the resource,
/// nothing reserved; but credit comes first: an account that cannot afford
/// the (contract-valid) body hears 402, whatever its size.
#[tokio::test]
async fn a_request_larger_than_every_node_is_400_but_credit_is_checked_first() {
    check_compute_env();
    let mut opts = compute_options();
    opts.extra_args.extend(["--compute-cpu-millis".to_string(), "500".to_string()]);
    let server = GridServer::start(opts);
    let mut body = job_body(&["true"]);
    body["resources"]["cpu"] = json!({"request": "1000m", "limit": "1000m"});
    let r = post_job_as(&server, server.api_key(), &body).await;
    assert_error(&r, 400, "INVALID_JOB_REQUEST");
    assert_eq!(r.json["detail"], json!(["resources.cpu.request: more than the grid's capacity of 500m"]), "{r}");
    assert_eq!(server.account_show(server.account_id())["reservedMicros"], json!(0));
    assert_eq!(server.stored().row_count(Table::Jobs), 0);

    let (_, poor) = server.create_account("poor", 1);
    body["idempotencyKey"] = json!(unique_key("poor"));
    assert_error(&post_job_as(&server, &poor, &body).await, 402, "insufficient_credit");
}
