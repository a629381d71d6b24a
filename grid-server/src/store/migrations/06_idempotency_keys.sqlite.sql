-- Migration 6: Idempotency-Key of POST /batches and POST /sessions (docs/idempotency.md).

-- One row per key and account, inserted in the transaction that created the
-- batch or session (and took its reservation), so neither exists without the
-- other. Refused requests write no row.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    account_id     TEXT NOT NULL REFERENCES accounts(id),
    -- SHA-256 of the header value; the key itself is not stored, since it
    -- is what unseals `response`
    key_sha256     TEXT NOT NULL,
    -- SHA-256 of the route and the canonical JSON body of the first request
    request_sha256 TEXT NOT NULL,
    -- the batch or session the first request created
    subject        TEXT NOT NULL,
    status         INTEGER NOT NULL,
    -- the first answer's body: nonce || AES-256-GCM ciphertext, under a key
    -- derived from the Idempotency-Key and the account (a lease answer holds
    -- the session's cdpUrl token)
    response       BLOB NOT NULL,
    created_at     INTEGER NOT NULL,
    -- ignored from this instant on, and purged by later submissions
    expires_at     INTEGER NOT NULL,
    PRIMARY KEY (account_id, key_sha256)
);
CREATE INDEX IF NOT EXISTS idempotency_keys_expiry ON idempotency_keys (expires_at);
