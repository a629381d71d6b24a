-- Migration 11: what placing work on any node of a grid needs
-- (docs/scale-out.md).

-- A session's whole submission (profile, TTL, network policy, overrides)
-- as JSON, so the node that runs its browser can start it from the record
-- alone when another node leased it.
ALTER TABLE sessions ADD COLUMN submission TEXT;

-- Each node's Docker Engine capacity (--compute-cpu-millis,
-- --compute-memory-bytes): a job request larger than every live node's is
-- refused at submission.
ALTER TABLE nodes ADD COLUMN compute_cpu_millis INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN compute_memory_bytes INTEGER NOT NULL DEFAULT 0
