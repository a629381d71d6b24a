-- Migration 12: fewer index entries per item. Index entries were about a
-- third of PostgreSQL's CPU per fetch item (perf, bench/scale_out.sh), and
-- three of them found a row that another index finds as well:
--
-- * `items` was found by `seq` (its primary key) and by `id` (unique). The
--   claims and the ends now find an item by its `id`, which becomes the
--   primary key; `seq` keeps only the queue's partial indexes, which order
--   by it. An item's insert and each of its non-HOT updates (its claim and
--   its end) wrote an entry to the index on `seq`.
-- * `ledger` was found by `id` (its primary key) and by `(account_id, id)`
--   (`ledger_pages`, the account's pages). The pages' index becomes the
--   primary key; no statement finds an entry by its id alone.
-- * `items_by_batch` found a batch's items, which are now read as a range
--   of the items' primary key (SQLite's 19_batch_item_ranges.sqlite.sql
--   says how): it cost an entry per insert, claim and end.
--
-- SQLite keeps both keys of the first two: there `seq` and the ledger's
-- `id` are the rowid, which costs no index (tests/tests/schema_parity.rs
-- allows the difference).

ALTER TABLE items DROP CONSTRAINT items_pkey;
ALTER TABLE items DROP CONSTRAINT items_id_key;
ALTER TABLE items ADD CONSTRAINT items_pkey PRIMARY KEY (id);

CREATE UNIQUE INDEX ledger_account_entries ON ledger (account_id, id);
ALTER TABLE ledger DROP CONSTRAINT ledger_pkey;
ALTER TABLE ledger ADD CONSTRAINT ledger_pkey PRIMARY KEY USING INDEX ledger_account_entries;
DROP INDEX IF EXISTS ledger_pages;

ALTER TABLE batches ADD COLUMN first_item TEXT;
ALTER TABLE batches ADD COLUMN last_item TEXT;
UPDATE batches b SET first_item = r.first_item, last_item = r.last_item
  FROM (SELECT batch_id, MIN(id) AS first_item, MAX(id) AS last_item FROM items GROUP BY batch_id) AS r
 WHERE r.batch_id = b.id;
DROP INDEX IF EXISTS items_by_batch
