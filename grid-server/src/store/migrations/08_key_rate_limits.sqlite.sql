-- Migration 8: a request rate per API key (docs/limits.md), set at
-- `grid-server key create --rate-per-second N --burst N`. NULL: the server's
-- default (`serve --rate-limit-per-second` / `--rate-limit-burst`).

ALTER TABLE api_keys ADD COLUMN rate_per_second INTEGER;
ALTER TABLE api_keys ADD COLUMN rate_burst INTEGER
