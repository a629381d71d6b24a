-- Grid's embedded store. Every change to this file is a new migration step in
-- store/mod.rs; never edit a released step.

CREATE TABLE IF NOT EXISTS settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS accounts (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    suspended  INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS api_keys (
    id               TEXT PRIMARY KEY,
    account_id       TEXT NOT NULL REFERENCES accounts(id),
    secret_sha256    TEXT NOT NULL UNIQUE,
    daily_cap_micros INTEGER,
    revoked_at       INTEGER,
    created_at       INTEGER NOT NULL
);

-- Append-only: rows are inserted, never updated or deleted. Every balance is
-- a sum over it (grid_core::ledger::Balance).
CREATE TABLE IF NOT EXISTS ledger (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id      TEXT NOT NULL REFERENCES accounts(id),
    key_id          TEXT,
    kind            TEXT NOT NULL CHECK (kind IN ('credit', 'reserve', 'charge', 'release')),
    amount          INTEGER NOT NULL CHECK (amount >= 0),
    -- what the entry is for: a batch id for a reservation, an item id for its settlement
    subject         TEXT,
    -- UTC day (days since epoch) of the reservation an entry belongs to: the daily cap's window
    reservation_day INTEGER,
    created_at      INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS ledger_by_account ON ledger (account_id, kind, amount);
CREATE INDEX IF NOT EXISTS ledger_by_key_day ON ledger (key_id, reservation_day, kind, amount);
-- An item is settled at most once, whatever crashes or restarts happen.
CREATE UNIQUE INDEX IF NOT EXISTS ledger_settles_once ON ledger (subject, kind) WHERE kind IN ('charge', 'release');

CREATE TABLE IF NOT EXISTS batches (
    id         TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    key_id     TEXT,
    script     TEXT NOT NULL,
    profile_id TEXT NOT NULL,
    params     TEXT NOT NULL,
    priority   INTEGER,
    item_count INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS items (
    seq               INTEGER PRIMARY KEY AUTOINCREMENT,
    id                TEXT NOT NULL UNIQUE,
    batch_id          TEXT NOT NULL REFERENCES batches(id),
    account_id        TEXT NOT NULL,
    key_id            TEXT,
    url               TEXT NOT NULL,
    script            TEXT NOT NULL,
    profile_id        TEXT NOT NULL,
    priority          INTEGER,
    price_micros      INTEGER NOT NULL,
    reservation_day   INTEGER NOT NULL,
    state             TEXT NOT NULL,
    attempts_made     INTEGER NOT NULL DEFAULT 0,
    failed_reason     TEXT,
    failure_published INTEGER NOT NULL DEFAULT 0,
    run_at            INTEGER,
    billable          INTEGER NOT NULL DEFAULT 1,
    -- 'charge' or 'release' once owed; cleared by the settlement pass
    settlement_due    TEXT,
    updated_at        INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS items_by_batch ON items (batch_id, id);
-- Claim order: no priority first (NULLs sort first), then lower priority, then age.
CREATE INDEX IF NOT EXISTS items_queue ON items (state, priority, seq);
CREATE INDEX IF NOT EXISTS items_delayed ON items (state, run_at);
CREATE INDEX IF NOT EXISTS items_settlement ON items (settlement_due) WHERE settlement_due IS NOT NULL;

-- Published files. A family (all kinds of one item) is inserted in the same
-- transaction that completes or finally fails the item, so it is whole or absent.
CREATE TABLE IF NOT EXISTS artifacts (
    item_id      TEXT NOT NULL REFERENCES items(id),
    kind         TEXT NOT NULL,
    storage_name TEXT NOT NULL,
    sha256       TEXT NOT NULL,
    byte_length  INTEGER NOT NULL,
    content_type TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (item_id, kind)
);
