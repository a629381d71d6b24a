//! GET /account: the caller's balance, their key's daily-cap use and a page
//! of their own ledger (docs/account.md).

use grid_core::error::ApiError;
use grid_core::validate::list::account_query;
use grid_core::wire::account::{AccountStatement, DailyCapUse};

use super::Reply;
use crate::app::App;
use crate::ids::now;
use crate::store::accounts::{self, Caller};

pub async fn statement(app: &App, caller: &Caller, query: &[(String, String)]) -> Result<Reply, ApiError> {
    let q = account_query(query)?;
    // A cursor is good only for the account (and filter) it was issued for.
    let scope = format!("account|{}|{:?}", caller.account_id, q.kind);
    let before = match &q.cursor {
        Some(c) => Some(app.signer.open_cursor(&scope, c).ok_or(ApiError::InvalidListCursor)?),
        None => None,
    };
    let caller = caller.clone();
    let now = now();
    let (view, cap_use, (ledger, next)) = app
        .store
        .read(move |c| {
            let view = accounts::account(c, &caller.account_id)?;
            let cap_use = match &caller.key_id {
                Some(key) => Some(DailyCapUse {
                    cap_micros: caller.daily_cap_micros,
                    used_micros: accounts::daily_use(c, key, now.utc_day())?.used_micros,
                    resets_at: now.next_utc_midnight(),
                }),
                None => None,
            };
            let page = accounts::ledger_page(c, &caller.account_id, q.kind, before, q.limit)?;
            Ok((view, cap_use, page))
        })
        .await
        .map_err(ApiError::from)?;
    Ok(Reply::json(
        200,
        &AccountStatement {
            account: view,
            daily_cap: cap_use,
            ledger,
            next_cursor: next.map(|id| app.signer.seal_cursor(&scope, id)),
        },
    ))
}
