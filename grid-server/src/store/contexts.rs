//! Persistent browser contexts (docs/sessions.md, "Contexts"): the rows of
//! `contexts`, their sealed state and the session holding each.
//!
//! A context belongs to one account: every function here that a caller
//! reaches takes the account and answers `UnknownContext` for another
//! account's context, exactly as for one that does not exist. The state is
//! stored only as the vault sealed it (`vault.rs`); this module never sees
//! it in clear.
//!
//! One live session per context: the lease's transaction sets `holder`
//! (`take`), and the session's end clears it once the state is saved back
//! or dropped (`finish`, fenced on the holder, so a save that comes after
//! another lease took the context over stores nothing).

use grid_core::error::ApiError;
use grid_core::ids;
use grid_core::time::Millis;
use grid_core::wire::session::ContextView;

use super::sql::{Conn, Optional, ReadConn, Row};
use super::{StoreError, StoreResult};
use crate::ids::new_id;
use crate::params;

/// A refusal of a context call, or the store failing under it.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error(transparent)]
    Refused(ApiError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<ContextError> for ApiError {
    fn from(e: ContextError) -> Self {
        match e {
            ContextError::Refused(api) => api,
            ContextError::Store(s) => s.into(),
        }
    }
}

/// A new empty context of `account`; its id.
pub fn create(tx: &Conn, account: &str, now: Millis) -> StoreResult<String> {
    let id = new_id(ids::CONTEXT);
    tx.execute("INSERT INTO contexts (id, account_id, created_at) VALUES (?1, ?2, ?3)", params![id, account, now.0])?;
    Ok(id)
}

/// The columns of a view; the holder only while its session is live.
const VIEW: &str = "c.id, c.size_bytes, c.created_at, c.last_used_at, c.saved_at,
     CASE WHEN s.live = 1 THEN c.holder END, c.last_save_refused
     FROM contexts c LEFT JOIN sessions s ON s.id = c.holder";

fn view(r: &Row) -> StoreResult<ContextView> {
    let size: i64 = r.get(1)?;
    Ok(ContextView {
        context_id: r.get(0)?,
        size_bytes: size.max(0) as u64,
        created_at: Millis(r.get(2)?),
        last_used_at: r.get::<Option<i64>>(3)?.map(Millis),
        saved_at: r.get::<Option<i64>>(4)?.map(Millis),
        session_id: r.get(5)?,
        last_save_refused: r.get(6)?,
    })
}

/// GET /contexts: `account`'s contexts, oldest first.
pub fn list(conn: &ReadConn, account: &str) -> StoreResult<Vec<ContextView>> {
    let sql = format!("SELECT {VIEW} WHERE c.account_id = ?1 ORDER BY c.created_at, c.id");
    conn.query_map(&sql, [account], view)
}

/// Whether `id` is one of `account`'s contexts.
pub fn owned(conn: &ReadConn, account: &str, id: &str) -> StoreResult<bool> {
    Ok(conn
        .query_row("SELECT 1 FROM contexts WHERE id = ?1 AND account_id = ?2", [id, account], |r| r.get::<i64>(0))
        .optional()?
        .is_some())
}

/// Who holds a context: the session, and whether it is live.
struct Holder {
    account: String,
    session: Option<String>,
    live: bool,
}

fn holder(conn: &ReadConn, id: &str) -> StoreResult<Option<Holder>> {
    conn.query_row(
        "SELECT c.account_id, c.holder, COALESCE(s.live, 0)
           FROM contexts c LEFT JOIN sessions s ON s.id = c.holder WHERE c.id = ?1",
        [id],
        |r| {
            let live: i64 = r.get(2)?;
            Ok(Holder { account: r.get(0)?, session: r.get(1)?, live: live == 1 })
        },
    )
    .optional()
}

/// `account`'s context `id`, refused when it is none of its own or a live
/// session holds it.
fn free_of(conn: &ReadConn, account: &str, id: &str) -> Result<Holder, ContextError> {
    let h =
        holder(conn, id)?.filter(|h| h.account == account).ok_or(ContextError::Refused(ApiError::UnknownContext))?;
    match &h.session {
        Some(session) if h.live => Err(ContextError::Refused(ApiError::ContextInUse { session_id: session.clone() })),
        _ => Ok(h),
    }
}

/// DELETE /contexts/{id}: the row and its state gone in one statement.
/// The account's row is locked first, as a lease's (`take`), so a lease
/// and a delete of one context run one after the other.
pub fn delete(tx: &Conn, account: &str, id: &str) -> Result<(), ContextError> {
    super::accounts::lock_account(tx, account)?;
    free_of(tx, account, id)?;
    tx.execute("DELETE FROM contexts WHERE id = ?1", [id])?;
    Ok(())
}

/// Inside a lease's transaction: session `session` holds `account`'s
/// context `id` from now on. A holder whose session ended but did not
/// finish (its save never came: its node died) is taken over.
pub fn take(tx: &Conn, account: &str, id: &str, session: &str, now: Millis) -> Result<(), ContextError> {
    let h = free_of(tx, account, id)?;
    if let Some(old) = h.session {
        tracing::warn!(context = id, session = %old, "the context's last session never finished saving; taken over");
    }
    tx.execute("UPDATE contexts SET holder = ?1, last_used_at = ?2 WHERE id = ?3", params![session, now.0, id])?;
    Ok(())
}

/// The session that holds `id` and has ended, while its save is owed
/// (a lease waits a little for it, so it starts from what it saved).
pub fn saving(conn: &ReadConn, id: &str) -> StoreResult<Option<String>> {
    Ok(holder(conn, id)?.and_then(|h| h.session.filter(|_| !h.live)))
}

/// The sealed state of `id` (none saved yet: `None`), for the session
/// holding it.
pub fn sealed_state(conn: &ReadConn, id: &str) -> StoreResult<Option<Vec<u8>>> {
    Ok(conn.query_row("SELECT state FROM contexts WHERE id = ?1", [id], |r| r.get(0)).optional()?.flatten())
}

/// How a session's end left its context.
#[derive(Debug, Clone)]
pub enum Finish {
    /// Read-only, or nothing could be read: the state is kept as it was.
    Keep,
    /// The state saved back, sealed.
    Save(Vec<u8>),
    /// The save refused (over the bound): the state kept, the reason shown.
    Refused(String),
}

/// The end of session `session` on context `id`: its state saved back or
/// kept, and the context free again. Nothing happens unless `session`
/// still holds it. Whether anything was stored.
pub fn finish(tx: &Conn, id: &str, session: &str, how: &Finish, now: Millis) -> StoreResult<bool> {
    store(tx, id, session, how, now, "holder = NULL")
}

/// A save point of session `session` on context `id` while it lives
/// (`--context-save-every-secs`): stored as `finish` stores a save or a
/// refusal, but the session keeps the context. Nothing happens unless
/// `session` still holds it. Whether anything was stored.
pub fn save_point(tx: &Conn, id: &str, session: &str, how: &Finish, now: Millis) -> StoreResult<bool> {
    store(tx, id, session, how, now, "holder = holder")
}

/// A save point that read the state the context already holds: `savedAt`
/// moves to `now` (the moment that read began), so it still says as of when
/// the stored state is known current; a context never saved stays so.
/// Whether `session` still holds `id`.
pub fn save_point_unchanged(tx: &Conn, id: &str, session: &str, now: Millis) -> StoreResult<bool> {
    let n = tx.execute(
        "UPDATE contexts SET saved_at = CASE WHEN saved_at IS NOT NULL AND saved_at < ?1 THEN ?1 ELSE saved_at END
          WHERE id = ?2 AND holder = ?3",
        params![now.0, id, session],
    )?;
    Ok(n == 1)
}

/// `how` stored for `session`'s hold on `id`, the holder set as `holder`
/// says (a constant assignment of this module's).
fn store(tx: &Conn, id: &str, session: &str, how: &Finish, now: Millis, holder: &str) -> StoreResult<bool> {
    let n = match how {
        Finish::Keep => {
            tx.execute(&format!("UPDATE contexts SET {holder} WHERE id = ?1 AND holder = ?2"), [id, session])?
        }
        Finish::Save(sealed) => tx.execute(
            &format!(
                "UPDATE contexts SET {holder}, state = ?1, size_bytes = ?2, saved_at = ?3, last_save_refused = NULL
                  WHERE id = ?4 AND holder = ?5"
            ),
            params![sealed, sealed.len() as i64, now.0, id, session],
        )?,
        Finish::Refused(why) => tx.execute(
            &format!("UPDATE contexts SET {holder}, last_save_refused = ?1 WHERE id = ?2 AND holder = ?3"),
            params![why, id, session],
        )?,
    };
    Ok(n == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    fn store() -> (tempfile::TempDir, Store, String) {
        let (dir, store, _clock, caller) = crate::sessions::driver::tests::grid();
        (dir, store, caller.account_id)
    }

    #[test]
    fn another_accounts_context_is_unknown_and_a_holder_is_fenced() {
        let (_dir, store, account) = store();
        let id = store.write_blocking(|tx| create(tx, &account, Millis(1))).unwrap();
        let listed = store.read_blocking(|c| list(c, &account)).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].size_bytes, listed[0].session_id.clone()), (0, None));
        match store.write_blocking(|tx| delete(tx, "acc_other", &id)) {
            Err(ContextError::Refused(ApiError::UnknownContext)) => {}
            other => panic!("{other:?}"),
        }
        // A holder (with no live session row) finishes once; a stale one
        // stores nothing.
        store.write_blocking(|tx| take(tx, &account, &id, "ses_1", Millis(2))).unwrap();
        assert_eq!(store.read_blocking(|c| saving(c, &id)).unwrap(), Some("ses_1".into()));
        // A save point stores under the holder and keeps it the holder.
        let point = Finish::Save(vec![9]);
        assert!(!store.write_blocking(|tx| save_point(tx, &id, "ses_0", &point, Millis(3))).unwrap(), "not the holder");
        assert!(store.write_blocking(|tx| save_point(tx, &id, "ses_1", &point, Millis(3))).unwrap());
        assert_eq!(store.read_blocking(|c| sealed_state(c, &id)).unwrap(), Some(vec![9]));
        let held = store.read_blocking(|c| list(c, &account)).unwrap().remove(0);
        assert_eq!((held.size_bytes, held.saved_at), (1, Some(Millis(3))));
        assert_eq!(store.read_blocking(|c| holder(c, &id)).unwrap().and_then(|h| h.session), Some("ses_1".into()));
        let save = Finish::Save(vec![1, 2]);
        assert!(!store.write_blocking(|tx| finish(tx, &id, "ses_0", &save, Millis(3))).unwrap(), "not the holder");
        assert!(store.write_blocking(|tx| finish(tx, &id, "ses_1", &save, Millis(3))).unwrap());
        assert_eq!(store.read_blocking(|c| sealed_state(c, &id)).unwrap(), Some(vec![1, 2]));
        assert_eq!(store.read_blocking(|c| saving(c, &id)).unwrap(), None);
        let got = store.read_blocking(|c| list(c, &account)).unwrap().remove(0);
        assert_eq!((got.size_bytes, got.saved_at, got.last_used_at), (2, Some(Millis(3)), Some(Millis(2))));
        store.write_blocking(|tx| delete(tx, &account, &id)).unwrap();
        assert!(store.read_blocking(|c| list(c, &account)).unwrap().is_empty());
    }
}
