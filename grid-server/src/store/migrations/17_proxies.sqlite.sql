-- Migration 17 (after 16, contexts): upstream proxies (docs/proxies.md). A
-- session's or a batch's proxy credentials, sealed by the vault
-- (`vault::Purpose::ProxyCredentials`, the row's id as associated data);
-- never in clear. The proxy's scheme, host and port are stored with the
-- submission (a session's `submission`, a batch's `proxy`).
ALTER TABLE sessions ADD COLUMN proxy_sealed BLOB;
ALTER TABLE batches ADD COLUMN proxy TEXT;
ALTER TABLE batches ADD COLUMN proxy_sealed BLOB;
