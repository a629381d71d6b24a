-- Migration 19: a batch's items are read as a range of the index on their
-- id, not through an index of their own. A batch's item ids are made one
-- after the other (ids::ordered_ids: one ULID, each next one above it), so
-- its first and last id (`first_item`, `last_item`) bound its items and no
-- other item falls between them; a batch made before this step may share
-- its range with items made in the same milliseconds, which the reads
-- filter out by `batch_id`. `items_by_batch` cost an entry per item on
-- insert here, and on PostgreSQL one more for each non-HOT update (each
-- claim and end) as well (21_fewer_index_entries.postgres.sql).

ALTER TABLE batches ADD COLUMN first_item TEXT;
ALTER TABLE batches ADD COLUMN last_item TEXT;
UPDATE batches SET first_item = (SELECT MIN(id) FROM items WHERE batch_id = batches.id),
                   last_item = (SELECT MAX(id) FROM items WHERE batch_id = batches.id);
DROP INDEX IF EXISTS items_by_batch
