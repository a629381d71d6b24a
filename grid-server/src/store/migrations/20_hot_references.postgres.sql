-- Migration 11: the capture queue's hot inserts check no foreign key.
-- PostgreSQL checks a reference by reading the referenced row and locking
-- it (FOR KEY SHARE), once per inserted row: every file of an item (two per
-- fetch item) locked its item's row again, every ledger entry its account's,
-- every item its batch's. Measured in bench/scale_out.sh, the checks were
-- about a tenth of PostgreSQL's CPU per item. The rows they referenced are
-- never deleted (no statement deletes an item, a batch or an account), and
-- each is written by the transaction that inserts the referring rows or an
-- earlier one, so the references hold by construction. SQLite keeps its
-- declared references: there a check is an index probe in the same process,
-- and writes nothing (tests/tests/schema_parity.rs allows the difference).

ALTER TABLE artifacts DROP CONSTRAINT IF EXISTS artifacts_item_id_fkey;
ALTER TABLE ledger DROP CONSTRAINT IF EXISTS ledger_account_id_fkey;
ALTER TABLE items DROP CONSTRAINT IF EXISTS items_batch_id_fkey
