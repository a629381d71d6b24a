-- Migration 12: the queue's indexes hold only the items each finds. The
-- indexes on (state, priority, seq) and (state, run_at) held every item, so
-- each claim and each attempt's end moved two entries in each of them (out
-- of one state's range, into another's); partial indexes per state are
-- written only when an item enters or leaves that state, and finished
-- items, most of the table, are in none of them.

DROP INDEX IF EXISTS items_queue;
DROP INDEX IF EXISTS items_delayed;
-- Claim order: no priority first, oldest first (a waiting item never has a
-- priority); then lower priority, oldest first.
CREATE INDEX IF NOT EXISTS items_waiting ON items (seq) WHERE state = 'waiting';
CREATE INDEX IF NOT EXISTS items_prioritized ON items (priority, seq) WHERE state = 'prioritized';
-- Delayed items by due time; active items by the node holding them.
CREATE INDEX IF NOT EXISTS items_delayed ON items (run_at) WHERE state = 'delayed';
CREATE INDEX IF NOT EXISTS items_active ON items (lease_node) WHERE state = 'active'
