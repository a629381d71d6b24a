-- Step 3: a session's whole submission as JSON (SQLite's
-- schema_v11_session_submissions.sql says why).
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS submission TEXT;
