-- Step 3: what placing work on any node needs (SQLite's
-- 11_placement.sqlite.sql says what each column is for).
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS submission TEXT;
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS compute_cpu_millis BIGINT NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS compute_memory_bytes BIGINT NOT NULL DEFAULT 0;
