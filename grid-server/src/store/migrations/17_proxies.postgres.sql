-- Migration 9 (after 8, contexts): upstream proxies (docs/proxies.md). A
-- session's or a batch's proxy credentials, sealed by the vault
-- (`vault::Purpose::ProxyCredentials`, the row's id as associated data);
-- never in clear. The proxy's scheme, host and port are stored with the
-- submission (a session's `submission`, a batch's `proxy`).
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS proxy_sealed BYTEA;
ALTER TABLE batches ADD COLUMN IF NOT EXISTS proxy TEXT;
ALTER TABLE batches ADD COLUMN IF NOT EXISTS proxy_sealed BYTEA;
