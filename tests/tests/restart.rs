//! Crash and graceful restarts on the same data dir: nothing lost, nothing
//! charged twice, credentials and published files survive.
//!
//! Runs on: both stores, because what survives a restart is what the store kept.

use std::time::Duration;

use serde_json::json;

use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::{page_html, Target};
use grid_tests::wait::wait_for;
use grid_tests::{DEFAULT_INITIAL_CREDIT_MICROS, FETCH_PRICE_MICROS};

/// Submits `n` slow fetches, waits until some (not all) completed, stops the
/// server with `stop`, restarts it and checks every item completes and is
/// charged exactly once.
async fn interrupt_mid_batch(stop: impl FnOnce(&mut GridServer)) {
    let target = Target::start();
    let mut server = GridServer::start(ServerOptions { workers: Some(2), ..Default::default() });
    let n = 30;
    let urls: Vec<String> = (0..n).map(|i| target.url(&format!("/slow?ms=400&i={i}"))).collect();
    let batch_id = server.submit_fetch(&urls).await;

    let completed_before = wait_for("progress before the stop", Duration::from_secs(60), || async {
        let b = server.batch(&batch_id).await;
        match b["counts"]["completed"].as_u64().unwrap_or(0) {
            done if done >= 3 => Ok(done),
            _ => Err(b["counts"].to_string()),
        }
    })
    .await;
    assert!(completed_before < n, "batch finished before it could be interrupted");
    stop(&mut server);
    server.restart();

    let done = server.wait_batch_done(&batch_id, Duration::from_secs(120)).await;
    assert_eq!(done["counts"], json!({"waiting": 0, "active": 0, "completed": n, "failed": 0}), "{}", done["counts"]);
    assert_eq!(done["total"], json!(n));
    assert!(target.hits("/slow") >= n, "fewer fetches than items: {}", target.hits("/slow"));
    for job in done["jobs"].as_array().unwrap() {
        let item = server.item(job["jobId"].as_str().unwrap()).await;
        assert_eq!(item["state"], json!("completed"), "{item}");
        let mut kinds: Vec<&str> =
            item["artifacts"].as_object().expect("artifacts").keys().map(String::as_str).collect();
        kinds.sort();
        assert_eq!(kinds, ["body", "meta"], "{item}");
    }
    let expected = DEFAULT_INITIAL_CREDIT_MICROS - FETCH_PRICE_MICROS * n as i64;
    server.wait_settled(server.account_id(), expected, Duration::from_secs(30)).await;
}

#[tokio::test]
async fn kill9_mid_batch_loses_nothing_and_charges_once() {
    interrupt_mid_batch(|server| server.kill9()).await;
}

#[tokio::test]
async fn sigterm_mid_batch_loses_nothing_and_charges_once() {
    interrupt_mid_batch(|server| {
        let status = server.sigterm();
        assert!(status.success(), "graceful shutdown exited {status}");
    })
    .await;
}

#[tokio::test]
async fn data_keys_and_download_urls_survive_a_restart() {
    let target = Target::start();
    let mut server = GridServer::start(ServerOptions::default());
    let (other_account, other_key) = server.create_account("second", 500_000);
    let batch_id = server.submit_fetch(&[target.url("/page/1"), target.url("/page/2")]).await;
    let before = server.wait_batch_done(&batch_id, Duration::from_secs(60)).await;
    let item_id = before["jobs"][0]["jobId"].as_str().unwrap().to_string();
    let url = server.artifact_url(&item_id, "body").await;

    let status = server.sigterm();
    assert!(status.success(), "graceful shutdown exited {status}");
    server.restart(); // asserts no second first-start event

    let after = server.batch(&batch_id).await;
    assert_eq!(after, before, "batch view changed across the restart");
    let body = server.download(&url).await;
    assert_eq!(body.status, 200, "a download URL issued before the restart: {body}");
    let page = before["jobs"][0]["url"].as_str().unwrap().rsplit('/').next().unwrap().to_string();
    assert_eq!(body.text, page_html(&page));
    let r = server.get_as(Some(&other_key), "/grid").await;
    assert_eq!(r.status, 200, "a key created before the restart: {r}");
    let acc = server.account_show(&other_account);
    assert_eq!(acc["creditMicros"], json!(500_000), "{acc}");
    server
        .wait_settled(
            server.account_id(),
            DEFAULT_INITIAL_CREDIT_MICROS - 2 * FETCH_PRICE_MICROS,
            Duration::from_secs(30),
        )
        .await;
}

#[tokio::test]
async fn store_is_grid_db_in_wal_mode() {
    let server = GridServer::start(ServerOptions::default());
    let mode = server.stored().journal_mode();
    assert_eq!(mode.to_lowercase(), "wal");
}
