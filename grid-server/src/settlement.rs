//! Old debts: servers before charges at the end (issue 12) left a debt on
//! each finished item (`items.settlement_due`) for a later pass to turn into
//! its ledger entry. No server writes one now (an item ending is charged or
//! released by the transaction that ends it, `capture/driver.rs`), so what
//! an upgraded database holds is settled once, when `serve` opens the store,
//! before it serves. Settling is idempotent: the ledger's unique index
//! admits one charge or release per item, and on PostgreSQL each batch
//! locks the debts it takes, skipping those another node starting at once
//! holds; a start interrupted half-way settles the rest at the next.

use grid_core::time::Millis;

use crate::store::{items, Store, StoreResult};

/// Debts settled per write transaction.
const BATCH: usize = 2_000;

/// Settles every debt an older server left; answers how many.
pub async fn settle_old_debts(store: &Store, now: Millis) -> StoreResult<usize> {
    let mut settled = 0;
    loop {
        let n = store.write_rows(move |tx| items::settle_due(tx, now, BATCH)).await?;
        settled += n;
        if n < BATCH {
            if settled > 0 {
                tracing::info!(items = settled, "settled the debts an older server left");
            }
            return Ok(settled);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::items::tests::{balance, caller, owe, store, submit, T};
    use grid_core::item::ItemState;
    use grid_core::item::Settlement as Owed;

    /// A finished item's old debt becomes one charge; settling again (a
    /// start interrupted and run again) charges nothing more.
    #[tokio::test]
    async fn old_debts_are_settled_once() {
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
        assert_eq!(settle_old_debts(&store, Millis(T.0 + 5_000)).await.unwrap(), 1);
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
        assert_eq!(settle_old_debts(&store, Millis(T.0 + 6_000)).await.unwrap(), 0);
        assert_eq!(charges(), 1, "a debt is settled once");
        assert_eq!(balance(&store, &c), charged);
    }
}
