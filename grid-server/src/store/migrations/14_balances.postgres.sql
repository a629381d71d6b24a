-- Migration 6: each account's sum per kind of ledger entry, kept by the
-- statements that append to the ledger (store::accounts::append_all), in
-- the same transaction. A balance was a sum over every entry of the
-- account, read again by every reservation: with a charge per item, each
-- submission and each balance read grew with the account's history. The
-- index that served those sums, on (account_id, kind, amount), gives way to
-- one that reads an account's ledger newest first (GET /account's pages),
-- which sorted the whole of it for every page.

CREATE TABLE IF NOT EXISTS balances (
    account_id TEXT NOT NULL,
    kind       TEXT NOT NULL,
    amount     BIGINT NOT NULL,
    PRIMARY KEY (account_id, kind)
);
INSERT INTO balances (account_id, kind, amount)
    SELECT account_id, kind, CAST(SUM(amount) AS BIGINT) FROM ledger GROUP BY account_id, kind;
DROP INDEX IF EXISTS ledger_by_account;
CREATE INDEX IF NOT EXISTS ledger_pages ON ledger (account_id, id)
