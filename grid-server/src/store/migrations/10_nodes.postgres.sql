-- Step 2: the nodes of the grid and which node holds what (SQLite's
-- 10_nodes.sqlite.sql says what each column is for).

CREATE TABLE IF NOT EXISTS nodes (
    name          TEXT PRIMARY KEY,
    advertise_url TEXT,
    started_at    BIGINT NOT NULL,
    heartbeat_at  BIGINT NOT NULL,
    max_sessions  BIGINT NOT NULL DEFAULT 0
);

ALTER TABLE items ADD COLUMN IF NOT EXISTS lease_node TEXT;
ALTER TABLE items ADD COLUMN IF NOT EXISTS lease_token BIGINT NOT NULL DEFAULT 0;

ALTER TABLE sessions ADD COLUMN IF NOT EXISTS node TEXT;

ALTER TABLE jobs ADD COLUMN IF NOT EXISTS node TEXT;
