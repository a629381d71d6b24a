-- Migration 15: an item's meta file is kept in the row of another of its
-- files (`meta_*`), not in a row of its own; read through the view
-- `item_files`. The same step as SQLite's 24_meta_beside.sqlite.sql,
-- which says why.
--
-- Measured with pg_stat_statements in bench/scale_out.sh (docs/scale-out.md,
-- "Capacity", the sixth session): the files' insert about 2 µs of
-- PostgreSQL's time per fetch item less.
--
-- The literals take the view's columns' collation ("C", from `artifacts`)
-- without a COLLATE of their own: with one, PostgreSQL kept a condition on
-- `kind` above the UNION ALL instead of pushing it into each branch (the
-- first branch then read every file of the item, not one).

ALTER TABLE artifacts ADD COLUMN meta_storage_name TEXT COLLATE "C";
ALTER TABLE artifacts ADD COLUMN meta_sha256 TEXT COLLATE "C";
ALTER TABLE artifacts ADD COLUMN meta_byte_length BIGINT;
ALTER TABLE artifacts ADD COLUMN meta_content BYTEA;
-- As `content`: a large meta is read in slices, uncompressed.
ALTER TABLE artifacts ALTER COLUMN meta_content SET STORAGE EXTERNAL;
CREATE VIEW item_files AS
SELECT item_id, kind, storage_name, sha256, byte_length, content_type, created_at, content
  FROM artifacts
UNION ALL
SELECT item_id, 'meta'::text, meta_storage_name, meta_sha256, meta_byte_length,
       'application/json'::text, created_at, meta_content
  FROM artifacts WHERE meta_sha256 IS NOT NULL
