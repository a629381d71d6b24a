-- Migration 18: an account's sum per kind of ledger entry is kept in
-- several rows, its shards (`shard`), summed when read. On PostgreSQL the
-- transactions that end attempts run at once on every node, and each adds
-- its charges to the account's sums: with one row per account and kind,
-- they queued on that row's lock until each committed. A writer adds to a
-- shard of its own choosing (store::accounts::add_to_balances); SQLite's
-- one writer keeps shard 0. The primary key changes, so the table is made
-- anew.

CREATE TABLE balances_sharded (
    account_id TEXT NOT NULL,
    kind       TEXT NOT NULL,
    amount     INTEGER NOT NULL,
    shard      INTEGER NOT NULL,
    PRIMARY KEY (account_id, kind, shard)
) WITHOUT ROWID;
INSERT INTO balances_sharded (account_id, kind, amount, shard) SELECT account_id, kind, amount, 0 FROM balances;
DROP TABLE balances;
ALTER TABLE balances_sharded RENAME TO balances
