-- Migration 10: the nodes of a grid sharing one store (docs/scale-out.md),
-- and which node holds what. A node's row is its heartbeat; a node whose
-- heartbeat is older than the lease is dead and its work is taken over.

CREATE TABLE IF NOT EXISTS nodes (
    name          TEXT PRIMARY KEY,
    advertise_url TEXT,
    started_at    INTEGER NOT NULL,
    heartbeat_at  INTEGER NOT NULL,
    -- its session slots (--max-sessions): GET /grid sums them over live nodes
    max_sessions  INTEGER NOT NULL DEFAULT 0
);

-- The node running an active item and the item's fencing token: raised by
-- every claim, checked by the transaction that ends the attempt, so a node
-- whose claim was taken over cannot publish, change state or charge.
ALTER TABLE items ADD COLUMN lease_node TEXT;
ALTER TABLE items ADD COLUMN lease_token INTEGER NOT NULL DEFAULT 0;

-- The node running a session's browser.
ALTER TABLE sessions ADD COLUMN node TEXT;

-- The node whose Docker Engine runs a job's current attempt (set when it is
-- provisioned there).
ALTER TABLE jobs ADD COLUMN node TEXT
