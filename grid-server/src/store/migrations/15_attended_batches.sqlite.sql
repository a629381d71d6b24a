-- Migration 15: a batch made by a one-call capture (POST /screenshot, /pdf,
-- /content) is attended: its caller waits for its one item, which is tried
-- once and fails, released, instead of going back to the queue when its
-- node stops (grid_core::item, `attended`).
ALTER TABLE batches ADD COLUMN attended INTEGER NOT NULL DEFAULT 0;
