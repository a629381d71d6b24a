-- Migration 13: every text column compares as bytes (COLLATE "C"), as
-- SQLite's columns do (its BINARY collation).
--
-- A column without a collation of its own takes the database's, which is
-- whatever the operator's cluster was made with (en_US.UTF-8, C.UTF-8):
-- each comparison then goes through the C library's strcoll on copies of
-- both strings. Every key of the hot tables is text (ids, kinds, account
-- ids), and an item is compared in about ten index searches and inserts on
-- its way through the queue: in bench/scale_out.sh on a C.UTF-8 cluster,
-- PostgreSQL spent about a tenth of its CPU per item less on a cluster
-- made with the C locale (docs/scale-out.md, "Collation"). Byte order is
-- also the order SQLite sorts in, so pages and ranges of ids (a batch's
-- items, store::items::batch_view) come in one order on either store.
--
-- Each table is altered once, all its text columns together, so its
-- indexes are rebuilt once; the rows are not rewritten (the type stays
-- text). Tables made by later steps declare COLLATE "C" on their text
-- columns; tests/tests/schema_parity.rs fails on any that does not.

DO $$
DECLARE
    t record;
BEGIN
    FOR t IN
        SELECT c.table_name,
               string_agg(format('ALTER COLUMN %I TYPE text COLLATE "C"', c.column_name), ', ') AS alters
          FROM information_schema.columns c
          JOIN information_schema.tables tb
            ON tb.table_schema = c.table_schema AND tb.table_name = c.table_name
         WHERE c.table_schema = current_schema()
           AND tb.table_type = 'BASE TABLE'
           AND c.data_type = 'text'
           AND c.collation_name IS DISTINCT FROM 'C'
         GROUP BY c.table_name
    LOOP
        EXECUTE format('ALTER TABLE %I %s', t.table_name, t.alters);
    END LOOP;
END
$$
