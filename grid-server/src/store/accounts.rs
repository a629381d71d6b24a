//! Accounts, API keys and the credit ledger.

use std::collections::BTreeMap;

use super::sql::{Conn, Dialect, ManyRows, Optional, ReadConn, Row, Statement};
use grid_core::error::ApiError;
use grid_core::ids;
use grid_core::ledger::{Balance, DailyUse, EntryKind};
use grid_core::time::Millis;
use grid_core::wire::account::AccountView;
use serde::Serialize;

use super::{StoreError, StoreResult};
use crate::ids::{new_id, random_hex, sha256_hex};
use crate::params;

/// Prefix of every API key, so leaked keys are easy to recognise and scan for.
pub const KEY_PREFIX: &str = "grid_";

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewKey {
    pub key_id: String,
    pub account_id: String,
    /// Shown once; only its hash is stored.
    pub api_key: String,
    pub daily_cap_micros: Option<i64>,
    pub internal: bool,
    /// The key's own request rate; `null`: the server's default.
    pub rate_per_second: Option<u32>,
    pub rate_burst: Option<u32>,
}

/// A key's own request rate (docs/limits.md), kept with the key; a `None`
/// field is the server's default (`serve --rate-limit-per-second`,
/// `--rate-limit-burst`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyRate {
    pub per_second: Option<u32>,
    pub burst: Option<u32>,
}

/// Who a request acts for, once its credential checked out.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    pub account_id: String,
    /// The API key used; `None` for a sign-in token.
    pub key_id: Option<String>,
    pub daily_cap_micros: Option<i64>,
    /// An internal key whose account is suspended: reads work, billable
    /// calls answer 403 account_suspended.
    pub suspended_internal: bool,
    /// The key's own rate, if it has one (a sign-in token has none).
    pub rate: KeyRate,
}

pub fn create_account(conn: &Conn, name: &str, credit_micros: i64, now: Millis) -> StoreResult<String> {
    if credit_micros < 0 {
        return Err(StoreError::Invalid("credit must not be negative".into()));
    }
    let id = new_id(ids::ACCOUNT);
    conn.execute("INSERT INTO accounts (id, name, created_at) VALUES (?1, ?2, ?3)", (&id, name, now.0))?;
    if credit_micros > 0 {
        append(conn, &Entry::credit(&id, credit_micros), now)?;
    }
    Ok(id)
}

pub fn account(conn: &ReadConn, account_id: &str) -> StoreResult<AccountView> {
    let (name, suspended): (String, bool) = conn
        .query_row("SELECT name, suspended FROM accounts WHERE id = ?1", [account_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("account {account_id}")))?;
    let b = balance(conn, account_id)?;
    Ok(AccountView {
        account_id: account_id.to_string(),
        name,
        credit_micros: b.credit_micros,
        reserved_micros: b.reserved_micros,
        available_micros: b.available_micros(),
        suspended,
    })
}

/// A page of an account's ledger, newest first, read through `ledger_pages`
/// (account, id): as many entries as the page holds, however long the
/// ledger (schema step 14, `balances`). A page of one kind skips the other kinds' entries
/// on its way.
pub(crate) const LEDGER_PAGE: &str = "SELECT id, kind, amount, subject, key_id, created_at FROM ledger
     WHERE account_id = ?1 AND id < ?2 AND (CAST(?3 AS TEXT) IS NULL OR kind = ?3)
     ORDER BY id DESC LIMIT ?4";

/// One page of an account's ledger, newest first: entries with an id below
/// `before` (all when `None`), of `kind` when given. Answers the entries and,
/// when more remain, the id to continue before.
pub fn ledger_page(
    conn: &ReadConn,
    account_id: &str,
    kind: Option<EntryKind>,
    before: Option<i64>,
    limit: usize,
) -> StoreResult<(Vec<grid_core::wire::account::LedgerLine>, Option<i64>)> {
    let rows = conn.query_map(
        LEDGER_PAGE,
        crate::params![account_id, before.unwrap_or(i64::MAX), kind.map(EntryKind::as_str), limit as i64 + 1],
        |r| {
            Ok((
                r.get::<i64>(0)?,
                r.get::<String>(1)?,
                r.get::<i64>(2)?,
                r.get::<Option<String>>(3)?,
                r.get::<Option<String>>(4)?,
                r.get::<i64>(5)?,
            ))
        },
    )?;
    let mut lines = vec![];
    let mut last_id = None;
    for row in rows {
        let (id, kind, amount, subject, key_id, created_at) = row;
        if lines.len() == limit {
            return Ok((lines, last_id));
        }
        let kind = EntryKind::parse(&kind).ok_or_else(|| StoreError::Invalid(format!("ledger kind {kind}")))?;
        lines.push(grid_core::wire::account::LedgerLine {
            kind,
            amount_micros: amount,
            subject,
            key_id,
            created_at: Millis(created_at),
        });
        last_id = Some(id);
    }
    Ok((lines, None))
}

pub fn count_accounts(conn: &ReadConn) -> StoreResult<i64> {
    conn.query_row("SELECT COUNT(*) FROM accounts", (), |r| r.get(0))
}

pub fn set_suspended(conn: &Conn, account_id: &str, suspended: bool) -> StoreResult<()> {
    let n = conn.execute("UPDATE accounts SET suspended = ?2 WHERE id = ?1", (account_id, suspended))?;
    if n == 0 {
        return Err(StoreError::NotFound(format!("account {account_id}")));
    }
    credentials_changed(conn)
}

pub fn add_credit(conn: &Conn, account_id: &str, micros: i64, now: Millis) -> StoreResult<()> {
    if micros <= 0 {
        return Err(StoreError::Invalid("--add-micros must be a positive number".into()));
    }
    account(conn, account_id)?;
    append(conn, &Entry::credit(account_id, micros), now)
}

pub fn create_key(
    conn: &Conn,
    account_id: &str,
    daily_cap_micros: Option<i64>,
    internal: bool,
    rate: KeyRate,
    now: Millis,
) -> StoreResult<NewKey> {
    account(conn, account_id)?;
    if daily_cap_micros.is_some_and(|c| c < 0) {
        return Err(StoreError::Invalid("--daily-cap-micros must not be negative".into()));
    }
    if rate.per_second == Some(0) || rate.burst == Some(0) {
        return Err(StoreError::Invalid("--rate-per-second and --burst must be at least 1".into()));
    }
    let key_id = new_id(ids::KEY);
    let api_key = format!("{KEY_PREFIX}{}", random_hex(24));
    conn.execute(
        "INSERT INTO api_keys
           (id, account_id, secret_sha256, daily_cap_micros, internal, rate_per_second, rate_burst, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        (&key_id, account_id, key_hash(&api_key), daily_cap_micros, internal, rate.per_second, rate.burst, now.0),
    )?;
    Ok(NewKey {
        key_id,
        account_id: account_id.to_string(),
        api_key,
        daily_cap_micros,
        internal,
        rate_per_second: rate.per_second,
        rate_burst: rate.burst,
    })
}

pub fn revoke_key(conn: &Conn, key_id: &str, now: Millis) -> StoreResult<()> {
    let n = conn.execute("UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?2) WHERE id = ?1", (key_id, now.0))?;
    if n == 0 {
        return Err(StoreError::NotFound(format!("key {key_id}")));
    }
    credentials_changed(conn)
}

/// The setting whose value changes with every change that can refuse a key
/// that was accepted before (a revocation, a suspension or its end).
const CREDENTIALS_GENERATION: &str = "credentials_generation";

/// Marks, in the transaction that makes it, a change to what a checked key
/// may do: servers holding checked keys in memory (`http::auth::KeyCache`)
/// read the generation on every request and drop what they hold when it
/// differs, whichever process or node made the change.
fn credentials_changed(conn: &Conn) -> StoreResult<()> {
    super::set_setting(conn, CREDENTIALS_GENERATION, &random_hex(8))
}

/// The current credentials generation (empty before the first change).
pub fn credentials_generation(conn: &ReadConn) -> StoreResult<String> {
    Ok(super::setting(conn, CREDENTIALS_GENERATION)?.unwrap_or_default())
}

/// What is stored of a key: its SHA-256, in hex.
pub fn key_hash(api_key: &str) -> String {
    sha256_hex(api_key.as_bytes())
}

/// The caller behind the API key of this hash (`key_hash`), if the key
/// exists and is not revoked, and its account is not suspended (an internal
/// key of a suspended account still identifies, marked `suspended_internal`).
/// Unknown, revoked and suspended look alike to the caller (401), so nothing
/// here tells them apart.
pub fn caller_for_key_hash(conn: &ReadConn, hash: &str) -> StoreResult<Option<Caller>> {
    let found = conn
        .query_row(
            "SELECT k.id, k.account_id, k.daily_cap_micros, k.internal, a.suspended, k.rate_per_second, k.rate_burst
               FROM api_keys k JOIN accounts a ON a.id = k.account_id
              WHERE k.secret_sha256 = ?1 AND k.revoked_at IS NULL",
            [hash],
            |r| {
                let caller = Caller {
                    key_id: Some(r.get(0)?),
                    account_id: r.get(1)?,
                    daily_cap_micros: r.get(2)?,
                    suspended_internal: false,
                    rate: KeyRate { per_second: r.get(5)?, burst: r.get(6)? },
                };
                Ok((caller, r.get::<bool>(3)?, r.get::<bool>(4)?))
            },
        )
        .optional()?;
    Ok(match found {
        Some((caller, _, false)) => Some(caller),
        Some((caller, true, true)) => Some(Caller { suspended_internal: true, ..caller }),
        _ => None,
    })
}

/// The account a sign-in identity acts for, and whether it is suspended.
pub fn account_for_identity(conn: &ReadConn, issuer: &str, subject: &str) -> StoreResult<Option<(String, bool)>> {
    conn.query_row(
        "SELECT a.id, a.suspended FROM identities i JOIN accounts a ON a.id = i.account_id
              WHERE i.issuer = ?1 AND i.subject = ?2",
        (issuer, subject),
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .optional()
}

pub fn link_identity(conn: &Conn, issuer: &str, subject: &str, account_id: &str, now: Millis) -> StoreResult<()> {
    account(conn, account_id)?;
    conn.execute(
        "INSERT INTO identities (issuer, subject, account_id, created_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (issuer, subject) DO UPDATE SET account_id = excluded.account_id",
        (issuer, subject, account_id, now.0),
    )?;
    Ok(())
}

pub fn unlink_identity(conn: &Conn, issuer: &str, subject: &str) -> StoreResult<()> {
    let n = conn.execute("DELETE FROM identities WHERE issuer = ?1 AND subject = ?2", (issuer, subject))?;
    if n == 0 {
        return Err(StoreError::NotFound(format!("identity {issuer} {subject}")));
    }
    Ok(())
}

/// Locks the account's row until the transaction ends, on PostgreSQL: what
/// a transaction checks of one account before it writes (credit and daily
/// use before a reservation, an Idempotency-Key before its request) stays
/// as read while it writes, whatever runs at once for other accounts,
/// which never wait on it. `FOR NO KEY UPDATE`, so the ledger rows other
/// transactions insert for the account (a foreign key's `KEY SHARE`) do
/// not wait either. Nothing on SQLite, which has one writer.
pub fn lock_account(conn: &Conn, account_id: &str) -> StoreResult<()> {
    conn.lock_rows(LOCK_ACCOUNT, [account_id], LOCK_ACCOUNT_CLAUSE)
}

const LOCK_ACCOUNT: &str = "SELECT 1 FROM accounts WHERE id = ?1";
const LOCK_ACCOUNT_CLAUSE: &str = "FOR NO KEY UPDATE";

/// The account's sums per kind of entry, as `append_all` keeps them: a few
/// rows (a kind's shards are summed by `Balance::fold`), however long the
/// account's ledger.
pub(crate) const BALANCE: &str = "SELECT kind, amount FROM balances WHERE account_id = ?1";

pub fn balance(conn: &ReadConn, account_id: &str) -> StoreResult<Balance> {
    balance_of(&conn.query_values(BALANCE, params![account_id])?)
}

/// `BALANCE`'s rows folded.
fn balance_of(rows: &[Row]) -> StoreResult<Balance> {
    let mut entries = vec![];
    for r in rows {
        let kind: String = r.get(0)?;
        let kind = EntryKind::parse(&kind).ok_or_else(|| StoreError::Invalid(format!("ledger kind {kind}")))?;
        entries.push((kind, r.get::<i64>(1)?));
    }
    Ok(Balance::fold(entries))
}

/// A key's use of a day: its reservations of that day less what was
/// released of them. The `kind` filter lets it read `ledger_by_key_day`,
/// which holds no charges (schema step 13, `daily_use_index`).
pub(crate) const DAILY_USE: &str =
    "SELECT CAST(COALESCE(SUM(CASE kind WHEN 'reserve' THEN amount WHEN 'release' THEN -amount ELSE 0 END), 0) AS BIGINT)
       FROM ledger WHERE key_id = ?1 AND reservation_day = ?2 AND kind IN ('reserve', 'release')";

/// What the key's reservations made on `day` still hold or were charged.
pub fn daily_use(conn: &ReadConn, key_id: &str, day: i64) -> StoreResult<DailyUse> {
    daily_use_of(&conn.query_values(DAILY_USE, params![key_id, day])?)
}

/// `DAILY_USE`'s one row read.
fn daily_use_of(rows: &[Row]) -> StoreResult<DailyUse> {
    Ok(DailyUse { used_micros: rows.first().ok_or(StoreError::NoRow)?.get(0)? })
}

/// Checks credit and the daily cap, then takes the reservation, all inside
/// the caller's transaction so that nothing else can spend the same credit:
/// the account is locked first (`lock_account`).
///
/// The lock and both reads are sent together, one round trip: PostgreSQL
/// runs them in order, and each read's snapshot is taken when it starts,
/// so after the lock is held (`Sql::query_all`).
pub fn reserve(conn: &Conn, caller: &Caller, micros: i64, subject: &str, now: Millis) -> Result<(), ReserveError> {
    // `lock_account`'s statement: a row lock on PostgreSQL, none on SQLite.
    let lock = conn.lock_rows_sql(LOCK_ACCOUNT, LOCK_ACCOUNT_CLAUSE);
    let mut reads: Vec<Statement> = Vec::with_capacity(3);
    if let Some(lock) = &lock {
        reads.push((lock, params![caller.account_id]));
    }
    reads.push((BALANCE, params![caller.account_id]));
    if let Some(key_id) = &caller.key_id {
        reads.push((DAILY_USE, params![key_id, now.utc_day()]));
    }
    let mut answers = conn.query_all(reads)?.into_iter().skip(usize::from(lock.is_some()));
    balance_of(&answers.next().unwrap_or_default())?.check_reservation(micros)?;
    if let Some(rows) = answers.next() {
        daily_use_of(&rows)?.check(caller.daily_cap_micros, micros, now)?;
    }
    let entry = Entry {
        account_id: &caller.account_id,
        key_id: caller.key_id.as_deref(),
        kind: EntryKind::Reserve,
        amount: micros,
        subject: Some(subject),
        reservation_day: Some(now.utc_day()),
    };
    append(conn, &entry, now)?;
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum ReserveError {
    #[error(transparent)]
    Refused(#[from] ApiError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A refused reservation (credit, daily cap, a reused Idempotency-Key) is
/// the caller's answer as it stands; a store failure is as anywhere
/// (`From<StoreError>`). A refusal rolls the write back: nothing is queued.
impl From<ReserveError> for ApiError {
    fn from(e: ReserveError) -> Self {
        match e {
            ReserveError::Refused(api) => api,
            ReserveError::Store(s) => s.into(),
        }
    }
}

/// One row of the ledger.
pub struct Entry<'a> {
    pub account_id: &'a str,
    pub key_id: Option<&'a str>,
    pub kind: EntryKind,
    pub amount: i64,
    /// A batch id for a reservation, an item id for its settlement.
    pub subject: Option<&'a str>,
    /// UTC day of the reservation the entry belongs to (the daily cap's window).
    pub reservation_day: Option<i64>,
}

impl<'a> Entry<'a> {
    pub fn credit(account_id: &'a str, amount: i64) -> Entry<'a> {
        Entry { account_id, key_id: None, kind: EntryKind::Credit, amount, subject: None, reservation_day: None }
    }
}

/// Appends one ledger entry. A settlement that already exists is not written
/// again (the unique index makes settling idempotent).
pub fn append(conn: &Conn, e: &Entry, now: Millis) -> StoreResult<()> {
    append_all(conn, std::slice::from_ref(e), now)
}

/// Appends ledger entries in one statement, as `append` does each (the
/// old debts are settled many at once), and adds them to their accounts'
/// `balances` in the same transaction: one row per account and kind, not
/// one per entry.
pub fn append_all(conn: &Conn, entries: &[Entry], now: Millis) -> StoreResult<()> {
    append_all_with(conn, vec![], entries, Settling::Idempotent, now)
}

/// Whether an append can meet a settlement the ledger already holds (the
/// unique index `ledger_settles_once`: one charge and one release per
/// subject).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settling {
    /// It can (the pass over older debts, a job's or a session's
    /// settlement written again): such an entry is skipped (`ON CONFLICT DO
    /// NOTHING`), and the sums take only the entries the insert answers it
    /// wrote.
    Idempotent,
    /// It cannot: the entries are the settlements of capture ends that
    /// passed their claims' fence in this transaction, each owed once (the
    /// item machine clears `billable` in the same write). Should a
    /// duplicate reach the ledger anyway, the unique index fails the
    /// transaction instead of skipping the entry: a bug shows.
    Fenced,
}

/// `append_all`, with `alongside` (statements whose answers the entries
/// do not need: an end's files) sent before the ledger's inserts in the
/// same round trip (`query_all`), and `settling` saying whether an entry
/// can already be in the ledger.
///
/// Entries that cannot (fenced settlements, and entries of other kinds,
/// which no unique index covers) are plain inserts, and their sums follow
/// in the same round trip. Before, every append was an `ON CONFLICT`
/// insert: on PostgreSQL that made each row a speculative insertion (the
/// unique index probed before the heap insert, and one more WAL record to
/// confirm it), about a third of a ledger row's cost, and the sums waited
/// for its answer in a round trip of their own. Entries that can be in the
/// ledger already still are, and their sums take only what was written.
pub fn append_all_with(
    conn: &Conn,
    alongside: Vec<Statement>,
    entries: &[Entry],
    settling: Settling,
    now: Millis,
) -> StoreResult<()> {
    const HEAD: &str = "INSERT INTO ledger (account_id, key_id, kind, amount, subject, reservation_day, created_at)";
    const TYPES: &[&str] = &["text", "text", "text", "bigint", "text", "bigint", "bigint"];
    static SKIPPING: ManyRows = ManyRows::new(
        HEAD,
        TYPES,
        "ON CONFLICT (subject, kind) WHERE kind IN ('charge', 'release') DO NOTHING RETURNING account_id, kind, amount",
    );
    static PLAIN: ManyRows = ManyRows::new(HEAD, TYPES, "");
    let mut values = Vec::with_capacity(entries.len() * 7);
    for e in entries {
        values.extend(crate::params![
            e.account_id,
            e.key_id,
            e.kind.as_str(),
            e.amount,
            e.subject,
            e.reservation_day,
            now.0
        ]);
    }
    let settles = |e: &Entry| matches!(e.kind, EntryKind::Charge | EntryKind::Release);
    let first = alongside.len();
    let mut statements = alongside;
    if settling == Settling::Idempotent && entries.iter().any(settles) {
        statements.extend(SKIPPING.statements(conn.dialect(), values));
        let answers = conn.query_all(statements)?;
        let written = answers[first..]
            .iter()
            .flatten()
            .map(|r: &Row| Ok((r.get::<String>(0)?, r.get::<String>(1)?, r.get::<i64>(2)?)))
            .collect::<StoreResult<Vec<_>>>()?;
        let sums = sums_of(written.iter().map(|(account_id, kind, amount)| (&**account_id, &**kind, *amount)));
        conn.query_all(add_to_balances(conn.dialect(), &sums))?;
    } else {
        statements.extend(PLAIN.statements(conn.dialect(), values));
        let sums = sums_of(entries.iter().map(|e| (e.account_id, e.kind.as_str(), e.amount)));
        statements.extend(add_to_balances(conn.dialect(), &sums));
        // Nothing read back: on PostgreSQL answered with the commit.
        conn.send_all(statements)?;
    }
    Ok(())
}

/// Entries (`account_id`, kind, amount) summed per account and kind, in
/// that order.
fn sums_of<'a>(entries: impl Iterator<Item = (&'a str, &'a str, i64)>) -> BTreeMap<(&'a str, &'a str), i64> {
    let mut sums: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    for (account_id, kind, amount) in entries {
        *sums.entry((account_id, kind)).or_default() += amount;
    }
    sums
}

/// The statements that add `sums` to their accounts' sums: one per account
/// and kind, in that order, so transactions adding to the same rows take
/// their locks in one order.
///
/// On PostgreSQL each connection adds to a shard of the sum of its own
/// (its backend's pid modulo 64, schema step 18, `balance_shards`): a transaction holds at
/// most one row per account and kind, and transactions running at once on
/// other connections seldom hold the same one, so ends charging one
/// account do not queue on its sums. SQLite's one writer keeps one row.
fn add_to_balances<'a>(dialect: Dialect, sums: &BTreeMap<(&'a str, &'a str), i64>) -> Vec<Statement<'a>> {
    let sql = match dialect {
        Dialect::Sqlite => {
            "INSERT INTO balances (account_id, kind, shard, amount) VALUES (?1, ?2, 0, ?3)
             ON CONFLICT (account_id, kind, shard) DO UPDATE SET amount = balances.amount + excluded.amount"
        }
        Dialect::Postgres => {
            "INSERT INTO balances (account_id, kind, shard, amount) VALUES (?1, ?2, pg_backend_pid() % 64, ?3)
             ON CONFLICT (account_id, kind, shard) DO UPDATE SET amount = balances.amount + excluded.amount"
        }
    };
    sums.iter().map(|((account_id, kind), amount)| (sql, crate::params![*account_id, *kind, *amount])).collect()
}
