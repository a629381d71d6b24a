//! Several real grid-server nodes on one PostgreSQL database (issue 10,
//! docs/scale-out.md): a batch submitted through one node is run by all,
//! every item exactly once; a killed node's items are taken over; a paused
//! node whose items were taken over cannot publish or charge them (fencing).
//!
//! These tests need PostgreSQL whatever the run's store
//! (`GRID_TEST_DATABASE_URL`, which scripts/test.sh exports for both passes).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use grid_core::catalog::Script;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::Target;
use serde_json::{json, Value};

/// Credit of the first account: every test's items many times over.
const CREDIT: i64 = 50_000_000;

fn node(name: &str, lease_secs: u32, workers: u32) -> ServerOptions {
    ServerOptions {
        postgres: true,
        initial_credit_micros: Some(CREDIT),
        workers: Some(workers),
        extra_args: vec!["--node".into(), name.into(), "--node-lease-secs".into(), lease_secs.to_string()],
        ..ServerOptions::default()
    }
}

/// How many items of the batch each node holds or held last (its claim).
fn items_by_node(server: &GridServer, batch_id: &str) -> BTreeMap<String, i64> {
    server
        .query(&format!("SELECT lease_node, COUNT(*) FROM items WHERE batch_id = '{batch_id}' GROUP BY lease_node"))
        .into_iter()
        .map(|r| (r[0].clone().unwrap_or_default(), r[1].as_deref().unwrap_or("0").parse().unwrap()))
        .collect()
}

/// (charges, releases, distinct charged subjects) of the batch's items.
fn settlements(server: &GridServer, batch_id: &str) -> (i64, i64, i64) {
    let n = |sql: String| server.query_value(&sql).and_then(|v| v.parse::<i64>().ok()).unwrap_or(-1);
    let of_batch = format!("subject IN (SELECT id FROM items WHERE batch_id = '{batch_id}')");
    (
        n(format!("SELECT COUNT(*) FROM ledger WHERE kind = 'charge' AND {of_batch}")),
        n(format!("SELECT COUNT(*) FROM ledger WHERE kind = 'release' AND {of_batch}")),
        n(format!("SELECT COUNT(DISTINCT subject) FROM ledger WHERE kind = 'charge' AND {of_batch}")),
    )
}

fn signal(server: &GridServer, sig: i32) {
    let pid = server.pid().unwrap_or_else(|| server.fail("no process to signal"));
    // SAFETY: kill(2) on the pid of a child this test spawned.
    let rc = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig})");
}

#[tokio::test]
async fn a_batch_through_one_node_is_run_by_all_three_each_item_once() {
    const N: usize = 1000;
    let target = Target::start();
    let n1 = GridServer::start(node("n1", 15, 8));
    let slots = n1.get("/grid").await.json["maxSessions"].as_u64().unwrap_or(0);
    assert!(slots > 0, "a node has session slots");
    let n2 = n1.join(node("n2", 15, 8));
    let n3 = n1.join(node("n3", 15, 8));
    // GET /grid through any node reports the whole grid.
    for n in [&n1, &n2, &n3] {
        assert_eq!(n.get("/grid").await.json["maxSessions"], json!(3 * slots));
    }
    // Each item takes 30 ms at the target, so the batch outlasts the idle
    // poll of the nodes that did not take the submission.
    let urls: Vec<String> = (0..N).map(|i| target.url(&format!("/slow?ms=30&i={i}"))).collect();
    let batch = n1.submit_fetch(&urls).await;
    let done = n1.wait_batch_done(&batch, Duration::from_secs(240)).await;
    assert_eq!(done["counts"]["completed"], json!(N), "{}", done["counts"]);

    let by_node = items_by_node(&n1, &batch);
    assert_eq!(by_node.values().sum::<i64>(), N as i64, "{by_node:?}");
    for name in ["n1", "n2", "n3"] {
        assert!(by_node.get(name).copied().unwrap_or(0) > 0, "{name} ran no item: {by_node:?}");
    }
    // Every item fetched once: the target saw exactly N fetches.
    assert_eq!(target.hits("/slow"), N as u64);
    // Charged once each; the ledger balances to the micro-euro.
    let price = Script::Fetch.price_micros();
    n1.wait_settled(n1.account_id(), CREDIT - price * N as i64, Duration::from_secs(60)).await;
    assert_eq!(settlements(&n1, &batch), (N as i64, 0, N as i64));
    // Any node answers for the account: the batch read through n2 and n3.
    for other in [&n2, &n3] {
        assert_eq!(other.batch(&batch).await["counts"]["completed"], json!(N));
    }
    let list = n1.admin(&["node", "list"]);
    let names: Vec<&str> = list["nodes"].as_array().unwrap().iter().filter_map(|n| n["name"].as_str()).collect();
    assert_eq!(names, ["n1", "n2", "n3"], "{list}");
    assert!(list["nodes"].as_array().unwrap().iter().all(|n| n["live"] == json!(true)), "{list}");
}

#[tokio::test]
async fn a_killed_nodes_items_are_taken_over_and_charged_once() {
    const N: usize = 120;
    const LEASE_SECS: u32 = 3;
    let target = Target::start();
    let n1 = GridServer::start(node("n1", LEASE_SECS, 6));
    let mut n2 = n1.join(node("n2", LEASE_SECS, 6));
    let n3 = n1.join(node("n3", LEASE_SECS, 6));
    let urls: Vec<String> = (0..N).map(|i| target.url(&format!("/slow?ms=800&i={i}"))).collect();
    let batch = n1.submit_fetch(&urls).await;
    // Kill n2 while it holds items.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let held: i64 = n1
            .query_value("SELECT COUNT(*) FROM items WHERE state = 'active' AND lease_node = 'n2'")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if held > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "n2 never claimed an item");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    n2.kill9();
    let killed = Instant::now();
    let done = n1.wait_batch_done(&batch, Duration::from_secs(120)).await;
    assert_eq!(done["counts"]["completed"], json!(N), "{}", done["counts"]);
    // Taken over well within the 60 s.
    assert!(killed.elapsed() < Duration::from_secs(60), "the batch took {:?} after the kill", killed.elapsed());
    let price = Script::Fetch.price_micros();
    n1.wait_settled(n1.account_id(), CREDIT - price * N as i64, Duration::from_secs(60)).await;
    assert_eq!(settlements(&n1, &batch), (N as i64, 0, N as i64));
    // The interrupted attempts were not counted: every item took one attempt.
    assert_eq!(
        n1.query_value(&format!("SELECT COUNT(*) FROM items WHERE batch_id = '{batch}' AND attempts_made <> 1")),
        Some("0".into())
    );
    let list = n1.admin(&["node", "list", "--node-lease-secs", &LEASE_SECS.to_string()]);
    let names: Vec<&str> = list["nodes"].as_array().unwrap().iter().filter_map(|n| n["name"].as_str()).collect();
    assert!(!names.contains(&"n2"), "the dead node was taken over and removed: {list}");
    let log = std::fs::read_to_string(n1.log_path()).unwrap_or_default()
        + &std::fs::read_to_string(n3.log_path()).unwrap_or_default();
    assert!(log.contains("took over a dead node's work"), "no takeover logged");
}

/// A node paused past its lease (SIGSTOP) is taken for dead; another node
/// claims its items again. The paused node resumes while that other node is
/// still running one of them: its own attempt at that item ends and is
/// refused by the fencing token, so it neither publishes, nor changes the
/// state, nor charges; the live claim's end is the one that counts, once.
#[tokio::test]
async fn a_paused_node_cannot_publish_or_charge_items_taken_over() {
    const N: usize = 4;
    const LEASE_SECS: u32 = 2;
    let target = Target::start();
    // n1 takes no part in the first claims: its one worker is busy with a
    // long item submitted first.
    let n1 = GridServer::start(node("n1", LEASE_SECS, 1));
    let blocker = n1.submit_fetch(&[target.url("/slow?ms=1500&blocker")]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n2 = n1.join(node("n2", LEASE_SECS, 8));
    let urls: Vec<String> = (0..N).map(|i| target.url(&format!("/slow?ms=3000&i={i}"))).collect();
    let batch = n1.submit_fetch(&urls).await;
    let held_by = |node: &str| -> Vec<String> {
        n1.query(&format!(
            "SELECT id FROM items WHERE batch_id = '{batch}' AND state = 'active' AND lease_node = '{node}' ORDER BY id"
        ))
        .into_iter()
        .filter_map(|r| r[0].clone())
        .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let taken = loop {
        let held = held_by("n2");
        if held.len() == N {
            break held;
        }
        assert!(Instant::now() < deadline, "n2 never claimed the batch: {held:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    signal(&n2, libc::SIGSTOP);
    // n1 takes n2 for dead after the lease and claims one of its items again.
    let deadline = Instant::now() + Duration::from_secs(30);
    let retaken = loop {
        if let Some(id) = held_by("n1").into_iter().find(|id| taken.contains(id)) {
            break id;
        }
        assert!(Instant::now() < deadline, "n1 never took n2's items over");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // n2 resumes while n1 runs that item: n2's fetches were answered while
    // it was stopped, so its attempts end at once, under stale tokens.
    signal(&n2, libc::SIGCONT);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = std::fs::read_to_string(n2.log_path()).unwrap_or_default();
        if log.matches("attempt end dropped").count() >= N {
            break;
        }
        assert!(Instant::now() < deadline, "n2 did not report its fenced attempts:\n{}", n2.log_tail(40));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let done = n1.wait_batch_done(&batch, Duration::from_secs(120)).await;
    n1.wait_batch_done(&blocker, Duration::from_secs(30)).await;
    assert_eq!(done["counts"]["completed"], json!(N), "{}", done["counts"]);
    // Exactly one charge per item and one attempt counted each. The item
    // n1 claimed again ended under n1's claim; the others were claimed
    // again by whichever node was free, n2 too once it registered again.
    let price = Script::Fetch.price_micros();
    n1.wait_settled(n1.account_id(), CREDIT - price * (N as i64 + 1), Duration::from_secs(60)).await;
    assert_eq!(settlements(&n1, &batch), (N as i64, 0, N as i64));
    assert_eq!(n1.query_value(&format!("SELECT lease_node FROM items WHERE id = '{retaken}'")), Some("n1".to_string()));
    assert_eq!(items_by_node(&n1, &batch).values().sum::<i64>(), N as i64);
    assert_eq!(
        n1.query_value(&format!("SELECT COUNT(*) FROM items WHERE batch_id = '{batch}' AND attempts_made <> 1")),
        Some("0".into())
    );
    let log = std::fs::read_to_string(n2.log_path()).unwrap_or_default();
    assert!(log.contains("taken for dead"), "n2 did not register again");
}

/// A node whose engine admits the test registry, or (`engine` false) one
/// without an engine, which never provisions a job.
fn with_engine(name: &str, lease_secs: u32, engine: bool) -> ServerOptions {
    let mut o = node(name, lease_secs, 2);
    o.extra_args.extend(["--admit-registry".to_string(), grid_tests::jobs::ADMITTED.to_string()]);
    if !engine {
        o.extra_args.extend(["--docker-host".to_string(), "unix:///nonexistent/docker.sock".to_string()]);
    }
    o
}

/// A job whose attempt runs on a node that dies is taken over: the attempt
/// ends as evicted (a platform reason, free) and is replayed within its
/// retries on a node with an engine; only the replay is charged.
#[tokio::test]
async fn a_job_on_a_killed_node_is_replayed_on_another_and_only_the_replay_is_charged() {
    use grid_tests::jobs::{
        all_containers, check_compute_env, docker, job_body, job_id, job_ledger, settled_once, submit_job, wait_job,
        wait_running, DEFAULT_RESERVATION, JOB_TIMEOUT,
    };
    check_compute_env();
    let with_engine = |name: &str, engine: bool| with_engine(name, 3, engine);
    let n1 = GridServer::start(with_engine("n1", false));
    let mut n2 = n1.join(with_engine("n2", true));
    let mut body = job_body(&["sleep", "4"]);
    body["retries"] = json!(1);
    // Submitted through the node with an engine (a node without one answers
    // 503 COMPUTE_UNAVAILABLE), read through the one without.
    let id = job_id(&submit_job(&n2, &body).await);
    wait_running(&n1, &id).await;
    assert_eq!(n1.query_value(&format!("SELECT node FROM jobs WHERE id = '{id}'")), Some("n2".to_string()));
    n2.kill9();
    // The dead node's container dies with its machine.
    for c in all_containers(&id, 1) {
        docker(&["rm", "-f", &c]);
    }
    let n3 = n1.join(with_engine("n3", true));
    let (done, _) = wait_job(&n1, &id, JOB_TIMEOUT, |r| r["attempt"] == 2 && r["phase"] == "SUCCEEDED").await;
    let (a1, a2) = (&done["attempts"][0], &done["attempts"][1]);
    assert_eq!(a1["termination"], json!({"class": "platform", "exitCode": null, "reason": "PLATFORM_EVICTED"}));
    assert_eq!(a2["funding"], "replay");
    assert_eq!(a2["termination"]["reason"], "WORKLOAD_SUCCEEDED", "{done}");
    assert_eq!(n1.query_value(&format!("SELECT node FROM jobs WHERE id = '{id}'")), Some("n3".to_string()));
    // One reservation: the evicted attempt free, the replay charged from it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let ledger = loop {
        let l = job_ledger(&n1, &id);
        if l.len() == 3 || Instant::now() >= deadline {
            break l;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let charge = ledger.iter().find(|e| e.0 == "charge").map(|e| e.1).unwrap_or(-1);
    assert!(charge > 0, "the replay is charged: {ledger:?}");
    assert_eq!(ledger, settled_once(&id, DEFAULT_RESERVATION, charge));
    drop(n3);
}

/// A node's slots for the session tests: one, so leases spill over.
fn one_slot(name: &str, lease_secs: u32) -> ServerOptions {
    let mut o = node(name, lease_secs, 1);
    o.extra_args.extend(["--max-sessions".to_string(), "1".to_string()]);
    o
}

/// The node whose browser runs the session.
fn session_node(server: &GridServer, id: &str) -> Option<String> {
    server.query_value(&format!("SELECT node FROM sessions WHERE id = '{id}'"))
}

/// Sessions across nodes: a lease through one node runs where a slot is
/// free; its cdpUrl (discovery and WebSocket, Puppeteer too) and its
/// downloads work through every node; a release through any node cuts
/// every connection; 409 only when every live node is full; a session on a
/// killed node ends as lost, settled to its reservation.
#[tokio::test]
async fn sessions_are_leased_driven_and_released_through_any_node() {
    use grid_tests::cdp as cdp_client;
    use grid_tests::http::assert_error;
    use grid_tests::sessions::{click_downloads, connect, lease_as, release, wait_running_as};
    use grid_tests::target::pattern_bytes;

    const LEASE_SECS: u32 = 3;
    let target = Target::start();
    let n1 = GridServer::start(one_slot("n1", LEASE_SECS));
    let mut n2 = n1.join(one_slot("n2", LEASE_SECS));
    let n3 = n1.join(one_slot("n3", LEASE_SECS));
    let key = n1.api_key().to_string();
    assert_eq!(n2.get("/grid").await.json["maxSessions"], json!(3));
    let through = |url: &str, from: &GridServer, to: &GridServer| url.replacen(&from.base_url(), &to.base_url(), 1);

    // A: leased through n1, which has a slot: its browser runs on n1.
    let a = lease_as(&n1, &key, json!({"ttlMinutes": 10})).await;
    assert_eq!(session_node(&n1, &a.id).as_deref(), Some("n1"));
    wait_running_as(&n2, &key, &a.id).await;
    // Driven through n2: discovery answers point back through n2, and a
    // real CDP client (Puppeteer) clicks a download there.
    let a_via_n2 = through(&a.cdp_url, &n1, &n2);
    let ws = cdp_client::ws_url(n2.http(), &a_via_n2).await.unwrap_or_else(|e| n2.fail(&e));
    assert!(ws.starts_with(&format!("ws://127.0.0.1:{}/cdp/{}/", n2.port(), a.id)), "{ws}");
    click_downloads(&n2, &target, &a_via_n2, &[("report.csv", 1500)]).await;
    // Its download is listed and served through n3 (the file is on n1).
    let deadline = Instant::now() + Duration::from_secs(30);
    let listed = loop {
        let r = n3.get(&format!("/sessions/{}/downloads", a.id)).await;
        assert_eq!(r.status, 200, "{r}");
        if r.json["downloads"][0]["sizeBytes"] == json!(1500) {
            break r.json;
        }
        assert!(Instant::now() < deadline, "the download was not listed through n3: {r}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let url = listed["downloads"][0]["url"].as_str().unwrap_or_default().to_string();
    let file_via_n3 = through(&url, &n1, &n3);
    assert!(file_via_n3.starts_with(&n3.base_url()), "{file_via_n3}");
    let got = n3.http().get(&file_via_n3).send().await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.bytes().await.unwrap().to_vec(), pattern_bytes(1500));
    // A CDP connection to A through n2 stays open for the release below.
    let mut a_conn = connect(&n2, &a_via_n2).await;
    a_conn.call("Browser.getVersion", json!({}), None).await.unwrap_or_else(|e| n2.fail(&e));

    // B: n1 is full, so B runs on n2 (the most free slots, then the name);
    // its cdpUrl as leased (n1's address) reaches it through n1.
    let b = lease_as(&n1, &key, json!({"ttlMinutes": 10})).await;
    assert_eq!(session_node(&n1, &b.id).as_deref(), Some("n2"));
    wait_running_as(&n3, &key, &b.id).await;
    let mut b_conn = connect(&n1, &b.cdp_url).await;
    let (_, page) = b_conn.blank_page(None).await.unwrap_or_else(|e| n1.fail(&e));
    assert_eq!(b_conn.evaluate(&page, "6 * 7").await.unwrap_or_else(|e| n1.fail(&e)), json!(42));
    // C: through n2 (full): on n3. Then every node is full: 409 grid-wide.
    let c = lease_as(&n2, &key, json!({"ttlMinutes": 10})).await;
    assert_eq!(session_node(&n1, &c.id).as_deref(), Some("n3"));
    for n in [&n1, &n2, &n3] {
        let r = n.post("/sessions", &json!({"ttlMinutes": 10})).await;
        assert_error(&r, 409, "session limit reached: all 3 session slots are taken");
    }

    // Released through n3: the connection through n2 to n1's browser is cut
    // by the time the release answers (a grace for the close to travel).
    release(&n3, &a.id).await;
    assert!(a_conn.closes_within(Duration::from_secs(5)).await, "the release through n3 did not cut A's connection");
    let r = n2.get(&format!("{}/json/version", a_via_n2.replacen(&n2.base_url(), "", 1))).await;
    assert_error(&r, 404, "unknown session");
    // n1's slot is free again: the next lease through n3 (full) runs there.
    let d = lease_as(&n3, &key, json!({"ttlMinutes": 10})).await;
    assert_eq!(session_node(&n1, &d.id).as_deref(), Some("n1"));

    // n2 dies with B's browser: B ends as lost within the 60 s, its
    // connection through n1 is cut, and its reservation is settled.
    n2.kill9();
    let killed = Instant::now();
    assert!(b_conn.closes_within(Duration::from_secs(10)).await, "B's connection outlived its node");
    loop {
        let live: Vec<Value> = n1.get("/sessions").await.json.as_array().cloned().unwrap_or_default();
        if !live.iter().any(|s| s["sessionId"] == json!(b.id)) {
            break;
        }
        assert!(killed.elapsed() < Duration::from_secs(60), "B still live {:?} after its node died", killed.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let reserved = n1.query_value(&format!("SELECT reserved_micros FROM sessions WHERE id = '{}'", b.id));
    let settled = n1.query_value(&format!(
        "SELECT CAST(SUM(amount) AS BIGINT) FROM ledger WHERE subject = '{}' AND kind IN ('charge', 'release')",
        b.id
    ));
    assert_eq!(settled, reserved, "B's reservation is charged and released exactly");
    let machine = n1.query_value(&format!("SELECT machine FROM sessions WHERE id = '{}'", b.id)).unwrap_or_default();
    assert!(machine.contains("\"lost\""), "B ended as lost: {machine}");
    drop((c, d, n3));
}

/// A cancel through a node other than the one whose engine runs the job's
/// attempt stops the container there, at once: the job ends CANCELLED by
/// the kill, not at its deadline.
#[tokio::test]
async fn a_job_cancelled_through_another_node_is_stopped_on_the_engine_running_it() {
    use grid_tests::jobs::{
        check_compute_env, job_body, job_id, submit_job, wait_container_removed, wait_finished, wait_running,
    };
    check_compute_env();
    let n1 = GridServer::start(with_engine("n1", 15, false));
    let n2 = n1.join(with_engine("n2", 15, true));
    let id = job_id(&submit_job(&n2, &job_body(&["sleep", "60"])).await);
    wait_running(&n1, &id).await;
    assert_eq!(n1.query_value(&format!("SELECT node FROM jobs WHERE id = '{id}'")), Some("n2".to_string()));
    // The operator's view says which node runs it.
    let list = n1.admin(&["node", "list"]);
    let held: Vec<(String, i64)> = list["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| (n["name"].as_str().unwrap_or_default().to_string(), n["runningJobs"].as_i64().unwrap_or(-1)))
        .collect();
    assert_eq!(held, [("n1".to_string(), 0), ("n2".to_string(), 1)], "{list}");
    let c = n1.post(&format!("/jobs/{id}/cancel"), &json!({})).await;
    assert_eq!((c.status, &c.json["cancelRequested"]), (200, &json!(true)), "{c}");
    let done = wait_finished(&n1, &id).await;
    assert_eq!(done["phase"], "CANCELLED", "{done}");
    assert_eq!(done["termination"], json!({"class": "cancelled", "exitCode": 137, "reason": "CANCELLED"}), "{done}");
    let run = grid_tests::jobs::run_millis(&done["attempts"][0]);
    assert!(run < 20_000, "the cancel through n1 did not stop n2's container: it ran {run} ms");
    wait_container_removed(&n2, &id, 1).await;
}

/// A 100-URL capture batch through one node is run by the browsers of all
/// three, every item once (one attempt, one charge, its screenshot
/// published and served through any node).
#[tokio::test]
async fn a_capture_batch_through_one_node_is_run_by_all_three() {
    const N: usize = 100;
    let target = Target::start();
    let capture_node = |name: &str| {
        let mut o = node(name, 15, 2);
        o.extra_args.extend(["--browsers".to_string(), "1".to_string()]);
        o
    };
    let n1 = GridServer::start(capture_node("n1"));
    let n2 = n1.join(capture_node("n2"));
    let n3 = n1.join(capture_node("n3"));
    let urls: Vec<String> = (0..N).map(|i| target.url(&format!("/page/{i}"))).collect();
    let batch = n1.submit_as(n1.api_key(), &json!({"urls": urls, "script": "capture"})).await;
    let done = n1.wait_batch_done(&batch, Duration::from_secs(600)).await;
    assert_eq!(done["counts"]["completed"], json!(N), "{}", done["counts"]);
    let by_node = items_by_node(&n1, &batch);
    assert_eq!(by_node.values().sum::<i64>(), N as i64, "{by_node:?}");
    for name in ["n1", "n2", "n3"] {
        assert!(by_node.get(name).copied().unwrap_or(0) > 0, "{name} ran no capture: {by_node:?}");
    }
    for i in 0..N {
        assert_eq!(target.hits(&format!("/page/{i}")), 1, "/page/{i} loaded other than once");
    }
    assert_eq!(
        n1.query_value(&format!("SELECT COUNT(*) FROM items WHERE batch_id = '{batch}' AND attempts_made <> 1")),
        Some("0".into())
    );
    let price = Script::Capture.price_micros();
    n1.wait_settled(n1.account_id(), CREDIT - price * N as i64, Duration::from_secs(60)).await;
    assert_eq!(settlements(&n1, &batch), (N as i64, 0, N as i64));
    // A screenshot an item ran on n2 published, served through n3.
    let on_n2 = n1
        .query_value(&format!("SELECT id FROM items WHERE batch_id = '{batch}' AND lease_node = 'n2' LIMIT 1"))
        .unwrap_or_else(|| n1.fail("no item of n2"));
    let url = n3.artifact_url(&on_n2, "screenshot").await;
    assert!(url.starts_with(&n3.base_url()), "{url}");
    let png = n3.http().get(&url).send().await.unwrap_or_else(|e| n3.fail(&format!("GET {url}: {e}")));
    assert_eq!(png.status(), 200);
    assert!(png.bytes().await.unwrap().starts_with(b"\x89PNG"), "not a PNG");
    drop(n2);
}
