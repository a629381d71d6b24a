//! A write whose second step fails leaves nothing (issue 9's `Ok(Err(..))`
//! defect: `Store::write` committed a closure that returned its failure as a
//! value, so a lease whose last step failed kept its first steps: a session
//! row holding a slot and a reservation holding credit, with the client told
//! 500 and no browser ever started).
//!
//! The fault is injected the way a real one arrives: the database refuses the
//! last statement of the transaction (a trigger on the Idempotency-Key
//! record, written after the session or batch and its reservation).

use serde_json::{json, Value};

use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::Target;

/// A fault on the last statement of a submission (its Idempotency-Key
/// record), injected as a trigger in the store's own dialect.
fn inject_fault(server: &GridServer) {
    if server.database().is_some() {
        server.execute(
            "CREATE FUNCTION injected_fault() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'injected fault'; END $$; \
             CREATE TRIGGER injected_fault BEFORE INSERT ON idempotency_keys \
             FOR EACH ROW EXECUTE FUNCTION injected_fault();",
        );
    } else {
        server.execute(
            "CREATE TRIGGER injected_fault BEFORE INSERT ON idempotency_keys \
             BEGIN SELECT RAISE(ABORT, 'injected fault'); END;",
        );
    }
}

fn remove_fault(server: &GridServer) {
    match server.database() {
        Some(_) => server.execute("DROP TRIGGER injected_fault ON idempotency_keys"),
        None => server.execute("DROP TRIGGER injected_fault"),
    }
}

fn count(server: &GridServer, sql: &str) -> i64 {
    let n = server.query_value(sql);
    n.as_deref().and_then(|n| n.parse().ok()).unwrap_or_else(|| server.fail(&format!("{sql}: {n:?}")))
}

/// Everything a submission writes before its Idempotency-Key record.
fn written(server: &GridServer) -> Value {
    json!({
        "sessions": count(server, "SELECT COUNT(*) FROM sessions"),
        "batches": count(server, "SELECT COUNT(*) FROM batches"),
        "items": count(server, "SELECT COUNT(*) FROM items"),
        "ledger": count(server, "SELECT COUNT(*) FROM ledger WHERE kind != 'credit'"),
    })
}

#[tokio::test]
async fn a_lease_whose_last_step_fails_leaves_no_session_slot_or_reservation() {
    let server = GridServer::start(ServerOptions {
        extra_args: vec!["--max-sessions".into(), "1".into()],
        ..ServerOptions::default()
    });
    let before = written(&server);
    inject_fault(&server);

    let failed = server.post_idempotent(server.api_key(), "/sessions", &json!({}), &[b"lease-1"]).await;
    assert_eq!(failed.status, 500, "{failed}");
    assert_eq!(written(&server), before, "the failed lease left rows behind");
    assert_eq!(server.reservations(server.account_id()), vec![], "the failed lease kept a reservation");
    assert_eq!(server.get("/sessions").await.json, json!([]));
    assert_eq!(server.get("/grid").await.json["sessions"], json!(0));

    // Without the fault, the one slot is free for the next lease.
    remove_fault(&server);
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
    inject_fault(&server);

    let body = json!({"urls": [target.url("/page/1"), target.url("/page/2")], "script": "fetch"});
    let failed = server.post_idempotent(server.api_key(), "/batches", &body, &[b"batch-1"]).await;
    assert_eq!(failed.status, 500, "{failed}");
    assert_eq!(written(&server), before, "the failed batch left rows behind");
    assert_eq!(server.reservations(server.account_id()), vec![]);
    assert_eq!(server.get("/grid/queue-depth").await.json["depth"], json!(0));
}
