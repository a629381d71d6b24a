//! `Idempotency-Key` on POST /batches and POST /sessions (docs/idempotency.md):
//! a resend answers the first answer byte for byte and reserves nothing
//! more, another body under the key is 422, keys belong to one account, bad
//! keys are 400, refusals are not remembered, concurrent resends create one
//! batch, a replayed lease gives the one session and its working cdpUrl, and
//! the SDK and the `grid` CLI send keys.
//!
//! Runs on: both stores, because keys are store rows, read back through grid_tests::stored.

use std::time::Duration;

use serde_json::{json, Value};

use grid_tests::cdp;
use grid_tests::http::{assert_error, http_client, Resp};
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::stored::Table;
use grid_tests::target::Target;
use grid_tests::wait::wait_for;
use grid_tests::FETCH_PRICE_MICROS;

const REPLAYED: &str = "idempotent-replayed";

/// A batch whose items go nowhere interesting: the test is about the submission.
fn fetch_batch(target: &Target, n: usize) -> Value {
    json!({"urls": (0..n).map(|i| target.url(&format!("/page/{i}"))).collect::<Vec<_>>(), "script": "fetch"})
}

fn assert_detail_names_header(r: &Resp) {
    let detail = r.json["detail"].as_array().unwrap_or_else(|| panic!("no detail array: {r}"));
    assert!(detail.iter().any(|d| d.as_str().is_some_and(|d| d.starts_with("Idempotency-Key: "))), "{r}");
}

#[tokio::test]
async fn batch_resend_answers_the_first_answer_and_reserves_once() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let body = fetch_batch(&target, 2);
    let first = server.post_idempotent(server.api_key(), "/batches", &body, &[b"batch-1"]).await;
    assert_eq!(first.status, 201, "{first}");
    assert_eq!(first.header(REPLAYED), None, "a first answer is no replay");
    let batch_id = first.json["batchId"].as_str().expect("batchId").to_string();

    // The same JSON value with its keys in another order is the same request.
    let reordered: Value = serde_json::from_str(&format!(
        r#"{{"script": "fetch", "urls": {}}}"#,
        serde_json::to_string(&body["urls"]).unwrap()
    ))
    .unwrap();
    for resend in [&body, &reordered] {
        let again = server.post_idempotent(server.api_key(), "/batches", resend, &[b"batch-1"]).await;
        assert_eq!((again.status, again.text.as_str()), (first.status, first.text.as_str()), "{again}");
        assert_eq!(again.header(REPLAYED), Some("true"), "{again}");
        assert!(again.header("content-type").is_some_and(|ct| ct.starts_with("application/json")), "{again}");
    }

    assert_eq!(server.stored().reservations(server.account_id()), vec![(2 * FETCH_PRICE_MICROS, batch_id.clone())]);
    assert_eq!(server.stored().row_count(Table::Batches), 1);
    assert_eq!(server.batch(&batch_id).await["total"], json!(2));
}

#[tokio::test]
async fn another_body_or_route_under_a_key_is_422() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let first = server.post_idempotent(server.api_key(), "/batches", &fetch_batch(&target, 1), &[b"k"]).await;
    assert_eq!(first.status, 201, "{first}");

    let other = server.post_idempotent(server.api_key(), "/batches", &fetch_batch(&target, 2), &[b"k"]).await;
    assert_error(&other, 422, "idempotency key reused");
    assert_detail_names_header(&other);
    // The key was spent on a batch: a lease under it is another request.
    let lease = server.post_idempotent(server.api_key(), "/sessions", &json!({}), &[b"k"]).await;
    assert_error(&lease, 422, "idempotency key reused");
    assert_detail_names_header(&lease);

    assert_eq!(server.stored().reservations(server.account_id()).len(), 1);
    assert_eq!(server.stored().row_count(Table::Sessions), 0);
    // The first answer is still there for the first request.
    let again = server.post_idempotent(server.api_key(), "/batches", &fetch_batch(&target, 1), &[b"k"]).await;
    assert_eq!(again.text, first.text);
}

#[tokio::test]
async fn the_same_key_in_another_account_is_another_key() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let (other_account, other_key) = server.create_account("other", 1_000_000);
    let body = fetch_batch(&target, 1);
    let mine = server.post_idempotent(server.api_key(), "/batches", &body, &[b"shared"]).await;
    let theirs = server.post_idempotent(&other_key, "/batches", &body, &[b"shared"]).await;
    assert_eq!((mine.status, theirs.status), (201, 201), "{mine} / {theirs}");
    assert_eq!(theirs.header(REPLAYED), None);
    assert_ne!(mine.json["batchId"], theirs.json["batchId"]);
    assert_eq!(server.stored().reservations(server.account_id()).len(), 1);
    assert_eq!(server.stored().reservations(&other_account).len(), 1);
    // Neither answer leaks into the other account: each resend gets its own.
    let theirs_again = server.post_idempotent(&other_key, "/batches", &body, &[b"shared"]).await;
    assert_eq!(theirs_again.text, theirs.text);
    // Another body under the key is refused in each account on its own.
    let mine_other = server.post_idempotent(server.api_key(), "/batches", &fetch_batch(&target, 2), &[b"shared"]).await;
    assert_error(&mine_other, 422, "idempotency key reused");
}

#[tokio::test]
async fn bad_keys_are_400_naming_the_header_and_do_nothing() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let long = vec![b'a'; 256];
    let longest = vec![b'b'; 255];
    let bad: [&[&[u8]]; 4] = [&[&long], &[b""], &["ü".as_bytes()], &[b"one", b"two"]];
    for keys in bad {
        for (path, body) in [("/batches", fetch_batch(&target, 1)), ("/sessions", json!({}))] {
            let r = server.post_idempotent(server.api_key(), path, &body, keys).await;
            assert_error(&r, 400, "invalid idempotency key");
            assert_detail_names_header(&r);
        }
    }
    assert!(server.stored().reservations(server.account_id()).is_empty());
    let r = server.post_idempotent(server.api_key(), "/batches", &fetch_batch(&target, 1), &[&longest]).await;
    assert_eq!(r.status, 201, "255 printable characters are a key: {r}");
    let r =
        server.post_idempotent(server.api_key(), "/batches", &fetch_batch(&target, 1), &[b" ~!key with spaces"]).await;
    assert_eq!(r.status, 201, "{r}");
}

#[tokio::test]
async fn a_refused_first_request_is_not_remembered() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let (account, key) = server.create_account("poor", 100);
    let body = fetch_batch(&target, 1);
    let refused = server.post_idempotent(&key, "/batches", &body, &[b"retry-me"]).await;
    assert_error(&refused, 402, "insufficient_credit");
    // Invalid bodies are not remembered either: the key is still free.
    let invalid = server.post_idempotent(&key, "/batches", &json!({"urls": []}), &[b"retry-me"]).await;
    assert_error(&invalid, 400, "invalid batch body");
    assert_eq!(server.stored().row_count(Table::IdempotencyKeys), 0);

    server.admin(&["account", "credit", "--account", &account, "--add-micros", "1000"]);
    let accepted = server.post_idempotent(&key, "/batches", &body, &[b"retry-me"]).await;
    assert_eq!(accepted.status, 201, "{accepted}");
    assert_eq!(accepted.header(REPLAYED), None);
    assert_eq!(server.stored().reservations(&account).len(), 1);
}

#[tokio::test]
async fn concurrent_resends_create_one_batch() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let body = fetch_batch(&target, 3);
    let sends = (0..8).map(|_| server.post_idempotent(server.api_key(), "/batches", &body, &[b"race"]));
    let answers = futures_util::future::join_all(sends).await;
    for a in &answers {
        assert_eq!((a.status, a.text.as_str()), (201, answers[0].text.as_str()), "{a}");
    }
    assert_eq!(answers.iter().filter(|a| a.header(REPLAYED).is_none()).count(), 1, "exactly one first answer");
    let batch_id = answers[0].json["batchId"].as_str().unwrap().to_string();
    assert_eq!(server.stored().reservations(server.account_id()), vec![(3 * FETCH_PRICE_MICROS, batch_id)]);
    assert_eq!(server.stored().row_count(Table::Batches), 1);
    assert_eq!(server.stored().row_count(Table::Items), 3);
}

#[tokio::test]
async fn a_lease_resend_gives_the_one_session_and_its_working_cdp_url() {
    let server = GridServer::start(ServerOptions {
        extra_args: vec!["--max-sessions".into(), "1".into()],
        ..Default::default()
    });
    let body = json!({"ttlMinutes": 2});
    let first = server.post_idempotent(server.api_key(), "/sessions", &body, &[b"lease-1"]).await;
    assert_eq!(first.status, 201, "{first}");
    let session_id = first.json["sessionId"].as_str().expect("sessionId").to_string();

    // The only slot is taken, by this very lease: the resend is answered,
    // not refused with 409.
    let again = server.post_idempotent(server.api_key(), "/sessions", &body, &[b"lease-1"]).await;
    assert_eq!((again.status, again.text.as_str()), (201, first.text.as_str()), "{again}");
    assert_eq!(again.header(REPLAYED), Some("true"));
    let another = server.post_idempotent(server.api_key(), "/sessions", &body, &[b"lease-2"]).await;
    assert_eq!(another.status, 409, "{another}");

    assert_eq!(server.stored().reservations(server.account_id()).len(), 1);
    assert_eq!(server.stored().row_count(Table::Sessions), 1);
    let listed = server.get("/sessions").await;
    assert_eq!(listed.json.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(server.get("/grid").await.json["sessions"], json!(1));

    // The replayed cdpUrl reaches the browser once it runs.
    wait_for("the session running", Duration::from_secs(60), || async {
        let list = server.get("/sessions").await.json;
        match list[0]["status"].as_str() {
            Some("running") => Ok(()),
            Some("pending") => Err(list.to_string()),
            _ => panic!("not running: {list}"),
        }
    })
    .await;
    let cdp_url = again.json["cdpUrl"].as_str().expect("cdpUrl");
    let version = cdp::json_version(&http_client(), cdp_url).await.unwrap_or_else(|e| server.fail(&e));
    assert!(version["webSocketDebuggerUrl"].is_string(), "{version}");

    let released =
        server.request(reqwest::Method::DELETE, &format!("/sessions/{session_id}"), Some(server.api_key()), None).await;
    assert_eq!(released.status, 204, "{released}");
    // Still the first answer after the session ended (its cdpUrl no longer works).
    let late = server.post_idempotent(server.api_key(), "/sessions", &body, &[b"lease-1"]).await;
    assert_eq!(late.text, first.text);
    assert!(cdp::json_version(&http_client(), cdp_url).await.is_err());
}

#[tokio::test]
async fn sdk_and_cli_send_keys() {
    use grid_core::wire::batch::NewBatch;

    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let client = server.client();
    let batch = NewBatch { urls: vec![target.url("/page/1")], script: Some("fetch".into()), ..NewBatch::default() };
    let first = client.submit_batch_with_key(&batch, "sdk-1").await.unwrap();
    let again = client.submit_batch_with_key(&batch, "sdk-1").await.unwrap();
    assert_eq!(first, again);
    let other = NewBatch { urls: vec![target.url("/page/2")], ..batch.clone() };
    let e = client.submit_batch_with_key(&other, "sdk-1").await.unwrap_err();
    assert_eq!((e.status(), e.error_code()), (Some(422), Some("idempotency key reused")));
    assert_eq!(server.stored().reservations(server.account_id()).len(), 1);

    let url = target.url("/page/3");
    let args = ["--json", "batch", "submit", "--script", "fetch", "--idempotency-key", "cli-1", url.as_str()];
    let (a, b) = (server.cli(&args), server.cli(&args));
    assert!(a.success() && b.success(), "{a}\n{b}");
    assert_eq!(a.json(), b.json());
    assert!(b.stderr.contains("already submitted with idempotency key \"cli-1\""), "{b}");
    // Without the flag, each run is a new batch under a fresh key.
    let fresh = ["--json", "batch", "submit", "--script", "fetch", url.as_str()];
    let (c, d) = (server.cli(&fresh), server.cli(&fresh));
    assert!(c.success() && d.success(), "{c}\n{d}");
    assert_ne!(c.json().unwrap()["batchId"], d.json().unwrap()["batchId"]);
    assert_eq!(server.stored().reservations(server.account_id()).len(), 4);
    assert_eq!(server.stored().row_count(Table::IdempotencyKeys), 4);
}
