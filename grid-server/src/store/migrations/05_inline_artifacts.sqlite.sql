-- Migration 5: small published files are kept in the database itself.

-- The file's bytes when it is kept inline (storage names then start with
-- "db:"); NULL when it is a file under DATA_DIR/artifacts.
ALTER TABLE artifacts ADD COLUMN content BLOB;
