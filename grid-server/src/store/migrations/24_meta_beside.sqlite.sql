-- Migration 20: an item's meta file is kept in the row of another of its
-- files (`meta_*`), not in a row of its own. Every script publishes a meta
-- beside its other files (a fetch item: body and meta), so this halves the
-- rows, and the primary-key entries, a fetch item's end writes. A meta
-- whose item has no other file, or whose content type is not
-- application/json, keeps a row of its own (`kind` 'meta'), as every meta
-- published before this step does.
--
-- The files are read through `item_files`, which lists each riding meta
-- as a row of its own, so the readers see one file per row on either
-- layout. The view's second branch is found by `item_id` on the primary
-- key, as the first branch is by (`item_id`, `kind`).

ALTER TABLE artifacts ADD COLUMN meta_storage_name TEXT;
ALTER TABLE artifacts ADD COLUMN meta_sha256 TEXT;
ALTER TABLE artifacts ADD COLUMN meta_byte_length INTEGER;
ALTER TABLE artifacts ADD COLUMN meta_content BLOB;
CREATE VIEW item_files AS
SELECT item_id, kind, storage_name, sha256, byte_length, content_type, created_at, content
  FROM artifacts
UNION ALL
SELECT item_id, 'meta', meta_storage_name, meta_sha256, meta_byte_length, 'application/json', created_at, meta_content
  FROM artifacts WHERE meta_sha256 IS NOT NULL
