//! Reservations, settlement, insufficient credit and the per-key daily cap.
//!
//! Runs on: both stores, because reservations and the ledger are store writes.

use std::time::Duration;

use serde_json::{json, Value};

use grid_tests::http::assert_error;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::Target;
use grid_tests::{DEFAULT_INITIAL_CREDIT_MICROS, FETCH_PRICE_MICROS};

const SETTLE: Duration = Duration::from_secs(30);

fn fetch_body(urls: &[String]) -> Value {
    json!({"urls": urls, "script": "fetch"})
}

#[tokio::test]
async fn submission_reserves_price_per_item_and_settlement_charges_completions() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let acc = server.account_id().to_string();
    let urls: Vec<String> = (0..3).map(|i| target.url(&format!("/slow?ms=2500&i={i}"))).collect();
    let batch_id = server.submit_fetch(&urls).await;

    let held = server.account_show(&acc);
    assert_eq!(held["reservedMicros"], json!(3 * FETCH_PRICE_MICROS), "{held}");
    assert_eq!(held["creditMicros"], json!(DEFAULT_INITIAL_CREDIT_MICROS), "{held}");
    assert_eq!(held["availableMicros"], json!(DEFAULT_INITIAL_CREDIT_MICROS - 3 * FETCH_PRICE_MICROS), "{held}");

    server.wait_batch_done(&batch_id, Duration::from_secs(60)).await;
    let settled = server.wait_settled(&acc, DEFAULT_INITIAL_CREDIT_MICROS - 3 * FETCH_PRICE_MICROS, SETTLE).await;
    assert_eq!(settled["availableMicros"], settled["creditMicros"], "{settled}");
}

#[tokio::test]
async fn failed_items_are_released_and_cost_nothing() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let acc = server.account_id().to_string();
    // 4 complete; 2 fail transiently three times (released); 1 fails on a bad param.
    let mut urls: Vec<String> = (0..4).map(|i| target.url(&format!("/page/{i}"))).collect();
    urls.push(target.url("/status/503"));
    urls.push(target.url("/status/502"));
    let mixed = server.submit_fetch(&urls).await;
    let bad_param = server
        .submit_as(
            server.api_key(),
            &json!({"urls": [target.url("/page/9")], "script": "fetch", "params": {"nope": 1}}),
        )
        .await;
    // A capture item: released if it fails, 1,000 µ€ if the grid has browsers.
    let capture = server.submit_as(server.api_key(), &json!({"urls": [target.url("/page/8")]})).await;

    let done = server.wait_batch_done(&mixed, Duration::from_secs(60)).await;
    assert_eq!(done["counts"]["completed"], json!(4), "{done}");
    assert_eq!(done["counts"]["failed"], json!(2), "{done}");
    server.wait_batch_done(&bad_param, Duration::from_secs(60)).await;
    let capture = server.wait_batch_done(&capture, Duration::from_secs(120)).await;
    // A grid with a browser pool completes the capture item (1,000 µ€).
    let capture_charge = 1_000 * capture["counts"]["completed"].as_i64().unwrap();

    let expected = DEFAULT_INITIAL_CREDIT_MICROS - 4 * FETCH_PRICE_MICROS - capture_charge;
    let settled = server.wait_settled(&acc, expected, SETTLE).await;
    assert_eq!(settled["availableMicros"], json!(expected), "{settled}");
}

#[tokio::test]
async fn capture_batch_reserves_its_script_price() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let (acc, key) = server.create_account("small", 2_500);
    // Two capture items need 2,000 µ€; a third would need 3,000.
    let three = server
        .post_as(
            Some(&key),
            "/batches",
            Some(&json!({"urls": [target.url("/page/1"), target.url("/page/2"), target.url("/page/3")]})),
        )
        .await;
    assert_error(&three, 402, "insufficient_credit");
    assert_eq!(three.json["requiredMicros"], json!(3_000), "{three}");
    assert_eq!(three.json["availableMicros"], json!(2_500), "{three}");
    let four = vec![target.url("/page/1"); 4];
    for (script, price) in [("browser-fetch", 800), ("render-fetch", 800)] {
        let r = server.post_as(Some(&key), "/batches", Some(&json!({"urls": four, "script": script}))).await;
        assert_error(&r, 402, "insufficient_credit");
        assert_eq!(r.json["requiredMicros"], json!(4 * price), "{script}: {r}");
    }
    let show = server.account_show(&acc);
    assert_eq!(show["reservedMicros"], json!(0), "{show}");
}

#[tokio::test]
async fn insufficient_credit_is_402_and_queues_nothing() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let (acc, key) = server.create_account("poor", 1_000);
    let nine: Vec<String> = (0..9).map(|i| target.url(&format!("/page/{i}"))).collect();

    let r = server.post_as(Some(&key), "/batches", Some(&fetch_body(&nine))).await;
    assert_error(&r, 402, "insufficient_credit");
    assert_eq!(
        r.json,
        json!({"error": "insufficient_credit", "requiredMicros": 1_080, "availableMicros": 1_000}),
        "{r}"
    );
    let depth = server.get_as(Some(&key), "/grid/queue-depth").await;
    assert_eq!(depth.json, json!({"depth": 0}), "a refused batch queued work: {depth}");
    let grid = server.get_as(Some(&key), "/grid").await;
    assert_eq!(grid.json["queue"], json!({"wait": 0, "prioritized": 0, "delayed": 0}), "{grid}");
    let show = server.account_show(&acc);
    assert_eq!(show["reservedMicros"], json!(0), "{show}");
    assert_eq!(show["creditMicros"], json!(1_000), "{show}");

    // Eight fit (960); then only 40 remain available.
    let eight = server.submit_as(&key, &fetch_body(&nine[..8])).await;
    let one_more = server.post_as(Some(&key), "/batches", Some(&fetch_body(&nine[8..]))).await;
    assert_error(&one_more, 402, "insufficient_credit");
    assert_eq!(one_more.json["requiredMicros"], json!(120), "{one_more}");
    assert_eq!(one_more.json["availableMicros"], json!(40), "{one_more}");

    server.wait_batch_done_as(&key, &eight, Duration::from_secs(60)).await;
    server.wait_settled(&acc, 40, SETTLE).await;
    assert_eq!(target.hits("/page/8"), 0, "the refused item ran");

    // Credit added by the operator is available at once.
    server.admin(&["account", "credit", "--account", &acc, "--add-micros", "1000"]);
    let show = server.account_show(&acc);
    assert_eq!(show["creditMicros"], json!(1_040), "{show}");
    let r = server.post_as(Some(&key), "/batches", Some(&fetch_body(&nine[8..]))).await;
    assert_eq!(r.status, 201, "{r}");
}

#[tokio::test]
async fn zero_credit_account_is_402() {
    let server = GridServer::start(ServerOptions::default());
    let (_acc, key) = server.create_account("empty", 0);
    let r = server.post_as(Some(&key), "/batches", Some(&fetch_body(&["http://127.0.0.1:9/a".to_string()]))).await;
    assert_error(&r, 402, "insufficient_credit");
    assert_eq!(r.json["requiredMicros"], json!(120), "{r}");
    assert_eq!(r.json["availableMicros"], json!(0), "{r}");
}

#[tokio::test]
async fn daily_cap_is_402_daily_cap_exceeded() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let key = server.admin(&["key", "create", "--account", server.account_id(), "--daily-cap-micros", "300"]);
    let capped = key["apiKey"].as_str().expect("apiKey").to_string();

    let two = server.submit_as(&capped, &fetch_body(&[target.url("/page/1"), target.url("/page/2")])).await;
    let r = server.post_as(Some(&capped), "/batches", Some(&fetch_body(&[target.url("/page/3")]))).await;
    assert_error(&r, 402, "daily_cap_exceeded");
    assert_eq!(r.json["capMicros"], json!(300), "{r}");
    assert_eq!(r.json["usedMicros"], json!(240), "{r}");
    assert_eq!(r.json["requiredMicros"], json!(120), "{r}");
    let resets_at = r.json["resetsAt"].as_str().unwrap_or_else(|| panic!("no resetsAt: {r}"));
    let resets =
        chrono::DateTime::parse_from_rfc3339(resets_at).unwrap_or_else(|e| panic!("resetsAt {resets_at}: {e}"));
    let resets = resets.with_timezone(&chrono::Utc);
    let now = chrono::Utc::now();
    assert!(
        resets > now && resets - now <= chrono::Duration::hours(24),
        "resetsAt {resets_at} is not the next midnight"
    );
    assert_eq!(resets.time(), chrono::NaiveTime::MIN, "resetsAt {resets_at} is not 00:00 UTC");

    server.wait_batch_done_as(&capped, &two, Duration::from_secs(60)).await;
    // Still capped after the charge, and nothing of the refused batch ran.
    let r = server.post_as(Some(&capped), "/batches", Some(&fetch_body(&[target.url("/page/3")]))).await;
    assert_error(&r, 402, "daily_cap_exceeded");
    assert_eq!(target.hits("/page/3"), 0);
    // The cap is the key's: the account's first key is unaffected.
    let r = server.post("/batches", &fetch_body(&[target.url("/page/4")])).await;
    assert_eq!(r.status, 201, "{r}");
}
