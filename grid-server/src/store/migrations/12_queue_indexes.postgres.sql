-- Step 4: the queue's indexes hold only the items each finds (SQLite's
-- 12_queue_indexes.sqlite.sql says why).

DROP INDEX IF EXISTS items_queue;
DROP INDEX IF EXISTS items_delayed;
CREATE INDEX IF NOT EXISTS items_waiting ON items (seq) WHERE state = 'waiting';
CREATE INDEX IF NOT EXISTS items_prioritized ON items (priority, seq) WHERE state = 'prioritized';
CREATE INDEX IF NOT EXISTS items_delayed ON items (run_at) WHERE state = 'delayed';
CREATE INDEX IF NOT EXISTS items_active ON items (lease_node) WHERE state = 'active'
