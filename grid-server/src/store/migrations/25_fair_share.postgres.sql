-- Step 16: accounts take turns in the capture queue (SQLite's
-- 25_fair_share.sqlite.sql says how). A column with a constant default is
-- added without rewriting the table.

ALTER TABLE items ADD COLUMN IF NOT EXISTS fair_tag BIGINT NOT NULL DEFAULT 0;
DROP INDEX IF EXISTS items_waiting;
CREATE INDEX IF NOT EXISTS items_waiting ON items (fair_tag, seq) WHERE state = 'waiting';
DROP INDEX IF EXISTS items_prioritized;
CREATE INDEX IF NOT EXISTS items_prioritized ON items (priority, fair_tag, seq) WHERE state = 'prioritized';
CREATE INDEX IF NOT EXISTS items_account_queued ON items (account_id, fair_tag) WHERE state IN ('waiting', 'prioritized')
