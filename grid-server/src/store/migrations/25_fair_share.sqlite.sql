-- Migration 21: accounts take turns in the capture queue (docs/limits.md,
-- "Fair share between accounts"). Each queued item carries a start tag of
-- start-time fair queuing: a batch's items are numbered on from the later
-- of the band's head (the lowest tag waiting there) and the last tag of the
-- account's own queued items, so an account with nothing queued starts at
-- the head and accounts with long queues interleave, one item each. The
-- queue is claimed by tag, then age; a retried item keeps its tag (its
-- place). Items stored before this step have tag 0: they come first, in
-- their order, as they would have.

ALTER TABLE items ADD COLUMN fair_tag INTEGER NOT NULL DEFAULT 0;
DROP INDEX IF EXISTS items_waiting;
CREATE INDEX IF NOT EXISTS items_waiting ON items (fair_tag, seq) WHERE state = 'waiting';
DROP INDEX IF EXISTS items_prioritized;
CREATE INDEX IF NOT EXISTS items_prioritized ON items (priority, fair_tag, seq) WHERE state = 'prioritized';
-- An account's last queued tag, read when it submits.
CREATE INDEX IF NOT EXISTS items_account_queued ON items (account_id, fair_tag) WHERE state IN ('waiting', 'prioritized');
