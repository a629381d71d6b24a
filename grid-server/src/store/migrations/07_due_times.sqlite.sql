-- Migration 7: durable due times. A row's next deadline (job running
-- deadline or replay, session expiry or launch deadline), written by the
-- machine's driver with the state it follows from and fired by the tick
-- loop (due.rs) of whichever process is alive. NULL: nothing is due.

ALTER TABLE jobs ADD COLUMN due_at INTEGER;
CREATE INDEX IF NOT EXISTS jobs_due ON jobs (due_at) WHERE due_at IS NOT NULL;

ALTER TABLE sessions ADD COLUMN due_at INTEGER;
CREATE INDEX IF NOT EXISTS sessions_due ON sessions (due_at) WHERE due_at IS NOT NULL
