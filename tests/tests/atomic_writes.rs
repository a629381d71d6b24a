//! A write whose second step fails leaves nothing (issue 9's `Ok(Err(..))`
//! defect: `Store::write` committed a closure that returned its failure as a
//! value, so a lease whose last step failed kept its first steps: a session
//! row holding a slot and a reservation holding credit, with the client told
//! 500 and no browser ever started).
//!
//! The fault is injected the way a real one arrives: the database refuses the
//! last statement of the transaction (a trigger on the Idempotency-Key
//! record, written after the session or batch and its reservation).
//!
//! Runs on: both stores, because a failed step must leave no row in either dialect.

use serde_json::{json, Value};

use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::stored::Table;
use grid_tests::target::Target;

/// The last statement of a submission: its Idempotency-Key record. The
/// fault is a trigger on it, in the store's own dialect
/// (`Stored::inject_insert_fault`).
const LAST_WRITTEN: Table = Table::IdempotencyKeys;

/// Everything a submission writes before its Idempotency-Key record.
fn written(server: &GridServer) -> Value {
    let stored = server.stored();
    json!({
        "sessions": stored.row_count(Table::Sessions),
        "batches": stored.row_count(Table::Batches),
        "items": stored.row_count(Table::Items),
        "ledger": stored.non_credit_ledger_entries(),
    })
}

#[tokio::test]
async fn a_lease_whose_last_step_fails_leaves_no_session_slot_or_reservation() {
    let server = GridServer::start(ServerOptions {
        extra_args: vec!["--max-sessions".into(), "1".into()],
        ..ServerOptions::default()
    });
    let before = written(&server);
    server.stored().inject_insert_fault(LAST_WRITTEN);

    let failed = server.post_idempotent(server.api_key(), "/sessions", &json!({}), &[b"lease-1"]).await;
    assert_eq!(failed.status, 500, "{failed}");
    assert_eq!(written(&server), before, "the failed lease left rows behind");
    assert_eq!(server.stored().reservations(server.account_id()), vec![], "the failed lease kept a reservation");
    assert_eq!(server.get("/sessions").await.json, json!([]));
    assert_eq!(server.get("/grid").await.json["sessions"], json!(0));

    // Without the fault, the one slot is free for the next lease.
    server.stored().remove_insert_fault(LAST_WRITTEN);
    let leased = server.post_idempotent(server.api_key(), "/sessions", &json!({}), &[b"lease-2"]).await;
    assert_eq!(leased.status, 201, "{leased}");
    let id = leased.json["sessionId"].as_str().unwrap_or_else(|| server.fail("no sessionId")).to_string();
    grid_tests::sessions::release(&server, &id).await;
}

#[tokio::test]
async fn a_batch_whose_last_step_fails_leaves_no_items_or_reservation() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let before = written(&server);
    server.stored().inject_insert_fault(LAST_WRITTEN);

    let body = json!({"urls": [target.url("/page/1"), target.url("/page/2")], "script": "fetch"});
    let failed = server.post_idempotent(server.api_key(), "/batches", &body, &[b"batch-1"]).await;
    assert_eq!(failed.status, 500, "{failed}");
    assert_eq!(written(&server), before, "the failed batch left rows behind");
    assert_eq!(server.stored().reservations(server.account_id()), vec![]);
    assert_eq!(server.get("/grid/queue-depth").await.json["depth"], json!(0));
}
