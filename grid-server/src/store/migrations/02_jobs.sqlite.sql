-- Migration 2: analytical jobs.

CREATE TABLE IF NOT EXISTS jobs (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    account_id      TEXT NOT NULL REFERENCES accounts(id),
    key_id          TEXT,
    idempotency_key TEXT NOT NULL,
    -- SHA-256 of the canonical validated request: same key + same hash = same job
    body_hash       TEXT NOT NULL,
    -- the request body as sent, validated again when the job is run
    request         TEXT NOT NULL,
    image_digest    TEXT NOT NULL,
    priority        INTEGER NOT NULL,
    cpu_millis      INTEGER NOT NULL,
    memory_bytes    INTEGER NOT NULL,
    phase           TEXT NOT NULL,
    -- grid_core::job::Job as JSON: the state machine
    machine         TEXT NOT NULL,
    -- attempt number -> grid_core::wire::job_record::Executor
    executors       TEXT NOT NULL DEFAULT '{}',
    -- how many reservations the job has taken; the open one is the ledger subject "<id>/r<n>"
    reservations    INTEGER NOT NULL DEFAULT 1,
    reserved_micros INTEGER NOT NULL,
    reservation_day INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    UNIQUE (account_id, idempotency_key)
);
CREATE INDEX IF NOT EXISTS jobs_by_account ON jobs (account_id, seq);
CREATE INDEX IF NOT EXISTS jobs_by_phase ON jobs (phase, priority, seq);

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
    attempt      INTEGER NOT NULL,
    storage_name TEXT NOT NULL,
    sha256       TEXT NOT NULL,
    byte_length  INTEGER NOT NULL,
    truncated    INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    UNIQUE (job_id, attempt)
);
