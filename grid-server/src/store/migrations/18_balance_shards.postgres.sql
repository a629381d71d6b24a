-- Migration 10: an account's sum per kind of ledger entry is kept in
-- several rows, its shards (`shard`), summed when read. The transactions
-- that end attempts run at once on every node (docs/scale-out.md
-- "Locking"), and each adds its charges to the account's sums: with one
-- row per account and kind, they queued on that row's lock until each
-- committed. A connection adds to a shard of its own, its backend's pid
-- modulo 64 (store::accounts::add_to_balances).

ALTER TABLE balances ADD COLUMN shard BIGINT NOT NULL DEFAULT 0;
ALTER TABLE balances ALTER COLUMN shard DROP DEFAULT;
ALTER TABLE balances DROP CONSTRAINT balances_pkey;
ALTER TABLE balances ADD PRIMARY KEY (account_id, kind, shard)
