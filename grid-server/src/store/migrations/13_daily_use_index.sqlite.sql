-- Migration 13: a key's daily use (store::accounts::daily_use) sums only
-- its reservations and their releases, so charges, one per completed item
-- and most of the ledger, need no entry in the index that finds them.

DROP INDEX IF EXISTS ledger_by_key_day;
CREATE INDEX IF NOT EXISTS ledger_by_key_day ON ledger (key_id, reservation_day, kind, amount)
    WHERE kind IN ('reserve', 'release')
