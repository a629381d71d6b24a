-- Migration 11: a session's whole submission (profile, TTL, network policy,
-- overrides) as JSON, so the node that runs its browser can start it from
-- the record alone when another node leased it (docs/scale-out.md).
ALTER TABLE sessions ADD COLUMN submission TEXT
