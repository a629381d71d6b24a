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

const FAULT: &str = "CREATE TRIGGER injected_fault BEFORE INSERT ON idempotency_keys \
                     BEGIN SELECT RAISE(ABORT, 'injected fault'); END;";

fn writable(server: &GridServer) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(server.db_path())
        .unwrap_or_else(|e| server.fail(&format!("open {}: {e}", server.db_path().display())));
    conn.busy_timeout(std::time::Duration::from_secs(10)).unwrap_or_else(|e| server.fail(&format!("{e}")));
    conn
}

fn count(server: &GridServer, sql: &str) -> i64 {
    server.read_db().query_row(sql, [], |r| r.get(0)).unwrap_or_else(|e| server.fail(&format!("{sql}: {e}")))
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
    let db = writable(&server);
    db.execute_batch(FAULT).unwrap_or_else(|e| server.fail(&format!("trigger: {e}")));

    let failed = server.post_idempotent(server.api_key(), "/sessions", &json!({}), &[b"lease-1"]).await;
    assert_eq!(failed.status, 500, "{failed}");
    assert_eq!(written(&server), before, "the failed lease left rows behind");
    assert_eq!(server.reservations(server.account_id()), vec![], "the failed lease kept a reservation");
    assert_eq!(server.get("/sessions").await.json, json!([]));
    assert_eq!(server.get("/grid").await.json["sessions"], json!(0));

    // Without the fault, the one slot is free for the next lease.
    db.execute_batch("DROP TRIGGER injected_fault").unwrap_or_else(|e| server.fail(&format!("drop trigger: {e}")));
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
    let db = writable(&server);
    db.execute_batch(FAULT).unwrap_or_else(|e| server.fail(&format!("trigger: {e}")));

    let body = json!({"urls": [target.url("/page/1"), target.url("/page/2")], "script": "fetch"});
    let failed = server.post_idempotent(server.api_key(), "/batches", &body, &[b"batch-1"]).await;
    assert_eq!(failed.status, 500, "{failed}");
    assert_eq!(written(&server), before, "the failed batch left rows behind");
    assert_eq!(server.reservations(server.account_id()), vec![]);
    assert_eq!(server.get("/grid/queue-depth").await.json["depth"], json!(0));
}
