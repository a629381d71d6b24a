-- Migration 8: persistent browser contexts (docs/sessions.md, "Contexts").
-- `state` is the saved state sealed by the vault (vault.rs, purpose
-- context-state, row = the context's id), never in clear; `size_bytes` its
-- length. `holder` is the session that leased the context: set by the
-- lease's transaction, cleared once that session's end has saved (or
-- dropped) its state; a live holder refuses another lease (409).
CREATE TABLE IF NOT EXISTS contexts (
    id                TEXT PRIMARY KEY,
    account_id        TEXT NOT NULL REFERENCES accounts(id),
    created_at        BIGINT NOT NULL,
    last_used_at      BIGINT,
    saved_at          BIGINT,
    state             BYTEA,
    size_bytes        BIGINT NOT NULL DEFAULT 0,
    holder            TEXT,
    last_save_refused TEXT
);
CREATE INDEX IF NOT EXISTS contexts_account ON contexts (account_id, created_at);
-- A signed-in capture's batch names the context whose cookies its items
-- send (docs/captures.md, "Signed-in captures"); read-only.
ALTER TABLE batches ADD COLUMN IF NOT EXISTS context_id TEXT;
