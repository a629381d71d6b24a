//! Operator subcommands: accounts, credit and keys. They open the same
//! store as a running `serve` (the SQLite file in its data dir, which WAL
//! mode lets several processes share, or its --database-url) and print JSON.

use std::time::Duration;

use serde_json::{json, Value};

use crate::ids::now;
use crate::store::{accounts, Store, StoreError, StoreResult};

/// How long an admin command waits for a busy database.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The JSON an admin command prints.
fn view<T: serde::Serialize>(value: T) -> StoreResult<Value> {
    serde_json::to_value(value).map_err(|e| StoreError::Invalid(format!("not serializable as JSON: {e}")))
}

pub fn account_create(store: &Store, name: &str, credit_micros: i64) -> StoreResult<Value> {
    store.write_blocking(|tx| {
        let id = accounts::create_account(tx, name, credit_micros, now())?;
        view(accounts::account(tx, &id)?)
    })
}

pub fn account_show(store: &Store, account_id: &str) -> StoreResult<Value> {
    store.read_blocking(|c| view(accounts::account(c, account_id)?))
}

pub fn account_suspend(store: &Store, account_id: &str, suspended: bool) -> StoreResult<Value> {
    store.write_blocking(|tx| {
        accounts::set_suspended(tx, account_id, suspended)?;
        view(accounts::account(tx, account_id)?)
    })
}

pub fn account_credit(store: &Store, account_id: &str, add_micros: i64) -> StoreResult<Value> {
    store.write_blocking(|tx| {
        accounts::add_credit(tx, account_id, add_micros, now())?;
        view(accounts::account(tx, account_id)?)
    })
}

pub fn key_create(
    store: &Store,
    account_id: &str,
    daily_cap_micros: Option<i64>,
    internal: bool,
    rate: accounts::KeyRate,
) -> StoreResult<Value> {
    store.write_blocking(|tx| {
        let key = accounts::create_key(tx, account_id, daily_cap_micros, internal, rate, now())?;
        view(key)
    })
}

pub fn key_revoke(store: &Store, key_id: &str) -> StoreResult<Value> {
    store.write_blocking(|tx| {
        accounts::revoke_key(tx, key_id, now())?;
        Ok(json!({ "keyId": key_id, "revoked": true }))
    })
}

/// On first start with an empty store: one account and one key, printed once.
pub fn first_start(store: &Store, initial_credit_micros: i64) -> StoreResult<Option<accounts::NewKey>> {
    store.write_blocking(|tx| {
        if accounts::count_accounts(tx)? > 0 {
            return Ok(None);
        }
        let id = accounts::create_account(tx, "default", initial_credit_micros, now())?;
        Ok(Some(accounts::create_key(tx, &id, None, false, Default::default(), now())?))
    })
}

pub fn identity_link(store: &Store, issuer: &str, subject: &str, account_id: &str) -> StoreResult<Value> {
    store.write_blocking(|tx| {
        accounts::link_identity(tx, issuer, subject, account_id, now())?;
        Ok(json!({ "issuer": issuer, "subject": subject, "accountId": account_id }))
    })
}

pub fn identity_unlink(store: &Store, issuer: &str, subject: &str) -> StoreResult<Value> {
    store.write_blocking(|tx| {
        accounts::unlink_identity(tx, issuer, subject)?;
        Ok(json!({ "issuer": issuer, "subject": subject, "unlinked": true }))
    })
}

/// The nodes sharing the store, live or dead by `lease`: `{"nodes": [...]}`.
pub fn node_list(store: &Store, lease: Duration) -> StoreResult<Value> {
    let live_after = crate::store::nodes::live_after(now(), lease);
    store.read_blocking(|c| Ok(json!({ "nodes": view(crate::store::nodes::list(c, live_after)?)? })))
}
