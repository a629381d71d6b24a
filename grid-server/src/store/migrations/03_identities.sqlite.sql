-- Migration 3: sign-in identities and internal credentials.

-- An OpenID identity (issuer + subject) acting for an account.
CREATE TABLE IF NOT EXISTS identities (
    issuer     TEXT NOT NULL,
    subject    TEXT NOT NULL,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (issuer, subject)
);

-- An internal key is the grid operator's own integration billed to a
-- customer account: a suspension refuses its billable calls with 403
-- account_suspended instead of refusing the key itself.
ALTER TABLE api_keys ADD COLUMN internal INTEGER NOT NULL DEFAULT 0;
