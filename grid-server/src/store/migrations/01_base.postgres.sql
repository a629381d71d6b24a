-- Grid's PostgreSQL store, step 1: the same tables as SQLite's steps 1 to 8
-- (01_base.sqlite.sql .. 08_key_rate_limits.sqlite.sql; see them for what each
-- column holds). Integers are BIGINT and booleans BIGINT 0/1, as SQLite
-- stores them, so one SQL text serves both. Every change is a new step in
-- store/postgres.rs; never edit a released step.

CREATE TABLE IF NOT EXISTS settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS accounts (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    suspended  BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS api_keys (
    id               TEXT PRIMARY KEY,
    account_id       TEXT NOT NULL REFERENCES accounts(id),
    secret_sha256    TEXT NOT NULL UNIQUE,
    daily_cap_micros BIGINT,
    revoked_at       BIGINT,
    created_at       BIGINT NOT NULL,
    internal         BIGINT NOT NULL DEFAULT 0,
    rate_per_second  BIGINT,
    rate_burst       BIGINT
);

CREATE TABLE IF NOT EXISTS ledger (
    id              BIGSERIAL PRIMARY KEY,
    account_id      TEXT NOT NULL REFERENCES accounts(id),
    key_id          TEXT,
    kind            TEXT NOT NULL CHECK (kind IN ('credit', 'reserve', 'charge', 'release')),
    amount          BIGINT NOT NULL CHECK (amount >= 0),
    subject         TEXT,
    reservation_day BIGINT,
    created_at      BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS ledger_by_account ON ledger (account_id, kind, amount);
CREATE INDEX IF NOT EXISTS ledger_by_key_day ON ledger (key_id, reservation_day, kind, amount);
CREATE UNIQUE INDEX IF NOT EXISTS ledger_settles_once ON ledger (subject, kind) WHERE kind IN ('charge', 'release');

CREATE TABLE IF NOT EXISTS batches (
    id         TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    key_id     TEXT,
    script     TEXT NOT NULL,
    profile_id TEXT NOT NULL,
    params     TEXT NOT NULL,
    priority   BIGINT,
    item_count BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS items (
    seq               BIGSERIAL PRIMARY KEY,
    id                TEXT NOT NULL UNIQUE,
    batch_id          TEXT NOT NULL REFERENCES batches(id),
    account_id        TEXT NOT NULL,
    key_id            TEXT,
    url               TEXT NOT NULL,
    script            TEXT NOT NULL,
    profile_id        TEXT NOT NULL,
    priority          BIGINT,
    price_micros      BIGINT NOT NULL,
    reservation_day   BIGINT NOT NULL,
    state             TEXT NOT NULL,
    attempts_made     BIGINT NOT NULL DEFAULT 0,
    failed_reason     TEXT,
    failure_published BIGINT NOT NULL DEFAULT 0,
    run_at            BIGINT,
    billable          BIGINT NOT NULL DEFAULT 1,
    settlement_due    TEXT,
    updated_at        BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS items_by_batch ON items (batch_id, id);
CREATE INDEX IF NOT EXISTS items_queue ON items (state, priority, seq);
CREATE INDEX IF NOT EXISTS items_delayed ON items (state, run_at);
CREATE INDEX IF NOT EXISTS items_settlement ON items (settlement_due) WHERE settlement_due IS NOT NULL;

-- Every published file is kept inline (`content`, storage names "db:..."):
-- any node serves any download and a dead node loses no file.
CREATE TABLE IF NOT EXISTS artifacts (
    item_id      TEXT NOT NULL REFERENCES items(id),
    kind         TEXT NOT NULL,
    storage_name TEXT NOT NULL,
    sha256       TEXT NOT NULL,
    byte_length  BIGINT NOT NULL,
    content_type TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    content      BYTEA,
    PRIMARY KEY (item_id, kind)
);
-- Uncompressed out-of-line storage: a download reads a large file in
-- slices (substr), which then costs the slice, not the whole value.
ALTER TABLE artifacts ALTER COLUMN content SET STORAGE EXTERNAL;

CREATE TABLE IF NOT EXISTS jobs (
    seq             BIGSERIAL PRIMARY KEY,
    id              TEXT NOT NULL UNIQUE,
    account_id      TEXT NOT NULL REFERENCES accounts(id),
    key_id          TEXT,
    idempotency_key TEXT NOT NULL,
    body_hash       TEXT NOT NULL,
    request         TEXT NOT NULL,
    image_digest    TEXT NOT NULL,
    priority        BIGINT NOT NULL,
    cpu_millis      BIGINT NOT NULL,
    memory_bytes    BIGINT NOT NULL,
    phase           TEXT NOT NULL,
    machine         TEXT NOT NULL,
    executors       TEXT NOT NULL DEFAULT '{}',
    reservations    BIGINT NOT NULL DEFAULT 1,
    reserved_micros BIGINT NOT NULL,
    reservation_day BIGINT NOT NULL,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    due_at          BIGINT,
    UNIQUE (account_id, idempotency_key)
);
CREATE INDEX IF NOT EXISTS jobs_by_account ON jobs (account_id, seq);
CREATE INDEX IF NOT EXISTS jobs_by_phase ON jobs (phase, priority, seq);
CREATE INDEX IF NOT EXISTS jobs_due ON jobs (due_at) WHERE due_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS job_labels (
    job_id TEXT NOT NULL REFERENCES jobs(id),
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    PRIMARY KEY (job_id, key)
);
CREATE INDEX IF NOT EXISTS job_labels_by_pair ON job_labels (key, value, job_id);

CREATE TABLE IF NOT EXISTS job_logs (
    artifact_id  TEXT PRIMARY KEY,
    job_id       TEXT NOT NULL REFERENCES jobs(id),
    attempt      BIGINT NOT NULL,
    storage_name TEXT NOT NULL,
    sha256       TEXT NOT NULL,
    byte_length  BIGINT NOT NULL,
    truncated    BIGINT NOT NULL,
    created_at   BIGINT NOT NULL,
    -- the log's bytes (every node serves any log); NULL: a file in a node's data dir
    content      BYTEA,
    UNIQUE (job_id, attempt)
);

CREATE TABLE IF NOT EXISTS identities (
    issuer     TEXT NOT NULL,
    subject    TEXT NOT NULL,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    created_at BIGINT NOT NULL,
    PRIMARY KEY (issuer, subject)
);

CREATE TABLE IF NOT EXISTS sessions (
    seq                 BIGSERIAL PRIMARY KEY,
    id                  TEXT NOT NULL UNIQUE,
    account_id          TEXT NOT NULL REFERENCES accounts(id),
    key_id              TEXT,
    profile_id          TEXT NOT NULL,
    network_policy      TEXT,
    token_sha256        TEXT NOT NULL,
    machine             TEXT NOT NULL,
    live                BIGINT NOT NULL DEFAULT 1,
    attestation         TEXT,
    network_attestation TEXT,
    reserved_micros     BIGINT NOT NULL,
    reservation_day     BIGINT NOT NULL,
    created_at          BIGINT NOT NULL,
    due_at              BIGINT
);
CREATE INDEX IF NOT EXISTS sessions_live ON sessions (live, account_id);
CREATE INDEX IF NOT EXISTS sessions_due ON sessions (due_at) WHERE due_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS idempotency_keys (
    account_id     TEXT NOT NULL REFERENCES accounts(id),
    key_sha256     TEXT NOT NULL,
    request_sha256 TEXT NOT NULL,
    subject        TEXT NOT NULL,
    status         BIGINT NOT NULL,
    response       BYTEA NOT NULL,
    created_at     BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    PRIMARY KEY (account_id, key_sha256)
);
CREATE INDEX IF NOT EXISTS idempotency_keys_expiry ON idempotency_keys (expires_at);
