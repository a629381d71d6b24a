//! GET /account: the caller's own account, as the caller may see it.

use serde::{Deserialize, Serialize};

use crate::ledger::EntryKind;
use crate::time::Millis;

/// An account's standing: what `grid-server account show` prints and GET
/// /account begins with (the same type, so the two cannot disagree).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountView {
    pub account_id: String,
    pub name: String,
    /// Credit granted minus credit charged.
    pub credit_micros: i64,
    /// Credit held by reservations not yet charged or released.
    pub reserved_micros: i64,
    /// What new work may reserve: credit minus reserved.
    pub available_micros: i64,
    pub suspended: bool,
}

/// The caller's balance, today's use of their key's daily cap and one page of
/// their ledger, newest entry first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountStatement {
    #[serde(flatten)]
    pub account: AccountView,
    /// The calling API key's daily cap; `null` for a sign-in token.
    pub daily_cap: Option<DailyCapUse>,
    pub ledger: Vec<LedgerLine>,
    /// Opaque; pass as `cursor` for the next (older) page. `null` on the last.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DailyCapUse {
    /// The key's cap; `null` when the key has none.
    pub cap_micros: Option<i64>,
    /// Reserved today (UTC) by this key, less what was released of it.
    pub used_micros: i64,
    /// When today's use starts again from 0 (the next 00:00 UTC).
    pub resets_at: Millis,
}

/// One ledger entry of the account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerLine {
    pub kind: EntryKind,
    pub amount_micros: i64,
    /// What the entry is for: a batch, capture item, job reservation
    /// (`cj_…/rN`) or session id; `null` for credit.
    pub subject: Option<String>,
    /// The API key whose call the entry belongs to, if any.
    pub key_id: Option<String>,
    pub created_at: Millis,
}
