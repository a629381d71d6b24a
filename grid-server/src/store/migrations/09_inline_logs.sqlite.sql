-- Migration 9: a job log's bytes may be kept in the database, as small
-- capture files are (schema_v5). Every log is on PostgreSQL (several nodes
-- serve any log); SQLite keeps logs under DATA_DIR/logs and leaves this NULL.

ALTER TABLE job_logs ADD COLUMN content BLOB
