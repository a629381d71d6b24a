//! The settlement pass: every interval, writes the heartbeat and turns the
//! debts servers before charges at the end left on finished items into
//! ledger entries (charges and releases); an item ending now is charged or
//! released by the transaction that ends it (`capture/driver.rs`). Settling
//! is idempotent: the ledger's unique index admits one charge or release
//! per item, so a pass interrupted by a crash is simply run again.
//!
//! On a grid of several nodes one node runs the passes (`leads`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::Clock;
use crate::store::{items, nodes, Store};

const BATCH: usize = 2_000;
/// Setting holding the time of the last pass: how long the server was
/// known to be alive, should it stop without warning.
pub const HEARTBEAT: &str = "settlement_heartbeat";
/// Setting naming the node that wrote `HEARTBEAT`: it tells only that node
/// how long it was alive.
pub const HEARTBEAT_NODE: &str = "settlement_heartbeat_node";

/// The last moment `node` is known to have been alive by its settlement
/// passes: `HEARTBEAT` when `node` wrote it (or nobody is named: a data dir
/// from before nodes).
pub fn last_pass_of(
    conn: &crate::store::Conn,
    node: &str,
) -> crate::store::StoreResult<Option<grid_core::time::Millis>> {
    let writer = crate::store::setting(conn, HEARTBEAT_NODE)?;
    if writer.is_some_and(|w| w != node) {
        return Ok(None);
    }
    Ok(crate::store::setting(conn, HEARTBEAT)?.and_then(|v| v.parse().ok()).map(grid_core::time::Millis))
}

/// What the settlement pass uses: the store, the clock, this node and the
/// grid's node lease (who leads), and how often it runs. Built by `main`.
pub struct Settlement {
    pub store: Store,
    pub clock: Arc<dyn Clock>,
    /// This node's name (`--node`).
    pub node: String,
    /// A node whose heartbeat is older than this is dead (`--node-lease-secs`).
    pub node_lease: Duration,
    /// Time between passes (`--settlement-interval-secs`).
    pub interval: Duration,
}

pub async fn run(app: Arc<Settlement>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(app.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => {}
        }
        if leads(&app).await {
            pass(&app).await;
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

/// Whether this node runs the settlement passes: of the live nodes, the
/// one whose name sorts first (one node, on SQLite: this one). A pass is
/// idempotent and each batch is one write transaction, so two nodes that
/// briefly both believe they lead (one just died, or just came back) only
/// repeat reads; the leader's death hands the passes on within the node
/// lease.
async fn leads(app: &Settlement) -> bool {
    let (me, live_after) = (app.node.clone(), nodes::live_after(app.clock.now(), app.node_lease));
    match app.store.read(move |c| nodes::leader(c, &me, live_after)).await {
        Ok(leader) => leader == app.node,
        // Settling twice is harmless; not settling is not.
        Err(_) => true,
    }
}

/// Settles everything due now.
pub async fn pass(app: &Settlement) {
    let started = std::time::Instant::now();
    pass_once(app).await;
    crate::metrics::get().settlement_seconds.observe(crate::metrics::secs(started.elapsed()));
}

async fn pass_once(app: &Settlement) {
    let (me, at) = (app.node.clone(), app.clock.now());
    let beat = move |tx: &crate::store::Conn| {
        crate::store::set_setting(tx, HEARTBEAT, &at.0.to_string())?;
        crate::store::set_setting(tx, HEARTBEAT_NODE, &me)
    };
    // Two settings written whole, nothing checked: no grid-wide order.
    if let Err(e) = app.store.write_rows(beat).await {
        tracing::warn!(error = %e, "heartbeat not stored");
    }
    loop {
        let now = app.clock.now();
        match app.store.write_rows(move |tx| items::settle_due(tx, now, BATCH)).await {
            Ok(n) if n == BATCH => continue,
            Ok(0) => return,
            Ok(n) => {
                tracing::info!(items = n, "settled");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "settlement pass failed; the next one tries again");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::VirtualClock;
    use crate::store::items::tests::{balance, caller, owe, store, submit, T};
    use grid_core::item::ItemState;
    use grid_core::item::Settlement as Owed;
    use grid_core::time::Millis;

    /// A pass writes the heartbeat at the clock's time under this node's
    /// name, and turns a finished item's old debt into one charge: a second
    /// pass (a crash and a rerun) charges nothing more.
    #[tokio::test]
    async fn a_pass_writes_the_heartbeat_and_settles_old_debts_once() {
        let (_dir, store) = store();
        let c = caller(&store, 10_000, None);
        submit(&store, &c, 1, None).unwrap();
        let reserved = balance(&store, &c);
        assert!(reserved.reserved_micros > 0);
        store
            .write_blocking(|tx| {
                let id: String = tx.query_row("SELECT id FROM items", (), |r| r.get(0))?;
                let mut row = items::load_item(tx, &id)?.unwrap();
                row.item.state = ItemState::Completed;
                row.item.billable = false;
                items::save_item(tx, &id, &row.item, T)?;
                owe(tx, &id, Owed::Charge)
            })
            .unwrap();
        let clock = Arc::new(VirtualClock::at(Millis(T.0 + 5_000)));
        let settlement = Settlement {
            store: store.clone(),
            clock: clock.clone(),
            node: "n1".into(),
            node_lease: Duration::from_secs(30),
            interval: Duration::from_secs(1),
        };
        pass(&settlement).await;
        let last = |node: &'static str| store.read_blocking(move |c| last_pass_of(c, node)).unwrap();
        assert_eq!(last("n1"), Some(Millis(T.0 + 5_000)));
        assert_eq!(last("n2"), None, "the heartbeat tells only the node that wrote it");
        let charged = balance(&store, &c);
        assert_eq!(charged.reserved_micros, 0, "the reservation is settled");
        assert_eq!(charged.credit_micros, 10_000 - reserved.reserved_micros, "charged the price");
        let charges = || {
            store
                .read_blocking(|c| {
                    c.query_row("SELECT COUNT(*) FROM ledger WHERE kind = 'charge'", (), |r| r.get::<i64>(0))
                })
                .unwrap()
        };
        assert_eq!(charges(), 1);
        clock.advance(1_000);
        pass(&settlement).await;
        assert_eq!(charges(), 1, "a debt is settled once");
        assert_eq!(balance(&store, &c), charged);
        assert_eq!(last("n1"), Some(Millis(T.0 + 6_000)), "each pass beats");
    }
}
