-- Migration 4: browser sessions.

CREATE TABLE IF NOT EXISTS sessions (
    seq                 INTEGER PRIMARY KEY AUTOINCREMENT,
    id                  TEXT NOT NULL UNIQUE,
    account_id          TEXT NOT NULL REFERENCES accounts(id),
    key_id              TEXT,
    profile_id          TEXT NOT NULL,
    network_policy      TEXT,
    -- SHA-256 of the access token in the cdpUrl; the token itself is never stored
    token_sha256        TEXT NOT NULL,
    -- grid_core::session::Session as JSON: the state machine
    machine             TEXT NOT NULL,
    live                INTEGER NOT NULL DEFAULT 1,
    attestation         TEXT,
    network_attestation TEXT,
    reserved_micros     INTEGER NOT NULL,
    reservation_day     INTEGER NOT NULL,
    created_at          INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_live ON sessions (live, account_id);
