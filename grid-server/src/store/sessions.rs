//! Browser sessions: the lease record, its state machine and its money.

use super::sql::{Conn, Optional, ReadConn, Row};
use crate::params;
use grid_core::catalog::Profile;
use grid_core::error::ApiError;
use grid_core::ids;
use grid_core::ledger::{self, EntryKind};
use grid_core::pricing;
use grid_core::session::{self, Session, TransitionError};
use grid_core::time::Millis;
use grid_core::wire::session::{Attestation, NetworkAttestation, SessionSubmission, SessionView};

use super::accounts::{self, Caller, Entry, ReserveError};
use super::{to_json, SealedProxy, StoreError, StoreResult};
use crate::ids::{new_id, sha256_hex};

#[derive(Debug, Clone)]
pub struct SessionRow {
    pub id: String,
    pub account_id: String,
    pub key_id: Option<String>,
    pub profile: Profile,
    pub network_policy: Option<String>,
    pub session: Session,
    pub attestation: Option<Attestation>,
    pub network_attestation: Option<NetworkAttestation>,
    pub reserved_micros: i64,
    pub reservation_day: i64,
    /// The node running its browser (none: leased before nodes were recorded).
    pub node: Option<String>,
    /// SHA-256 of the token in its cdpUrl.
    pub token_sha256: String,
    /// What the lease asked for; `None` for sessions leased before it was
    /// stored (they were started by the node that leased them).
    pub submission: Option<SessionSubmission>,
    /// The lease's upstream proxy credentials, sealed by the vault
    /// (`vault::Purpose::ProxyCredentials`, this row's id as associated data).
    pub proxy_sealed: Option<Vec<u8>>,
}

impl SessionRow {
    pub fn view(&self) -> SessionView {
        SessionView {
            session_id: self.id.clone(),
            status: self.session.status,
            created_at: self.session.created_at,
            expires_at: self.session.expires_at,
            profile_id: self.profile.as_str().to_string(),
            attestation: self.attestation.clone(),
            network_policy: self.network_policy.clone(),
            network_attestation: self.network_attestation.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Transition(#[from] TransitionError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a caller sees of a session error: the machine's refusals (slots,
/// credit) stand; a transition the machine refuses is on a session that
/// already ended, which the contract answers `unknown session` ("no such
/// session, already ended, or another identity's"), as one that is gone;
/// other store failures as anywhere (`From<StoreError>`).
impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::Transition(TransitionError::Refused(api)) => api,
            SessionError::Transition(_) | SessionError::Store(StoreError::NotFound(_)) => ApiError::UnknownSession,
            SessionError::Store(s) => s.into(),
        }
    }
}

impl From<ReserveError> for SessionError {
    fn from(e: ReserveError) -> Self {
        match e {
            ReserveError::Refused(api) => SessionError::Transition(TransitionError::Refused(api)),
            ReserveError::Store(s) => SessionError::Store(s),
        }
    }
}

pub fn live_count(conn: &ReadConn) -> StoreResult<u32> {
    conn.query_row("SELECT COUNT(*) FROM sessions WHERE live = 1", (), |r| r.get(0))
}

/// Live sessions whose browser runs on `node` (or on no recorded node).
/// Where a lease may run its browser: on `me` while it has a free slot,
/// else on the live node (heartbeat at or after `live_after`, reachable at
/// an advertised address) with the most free slots.
#[derive(Debug, Clone, Copy)]
pub struct Placement<'a> {
    pub me: &'a str,
    pub live_after: Millis,
}

/// Locks the rows of the nodes `place` counts the slots of (on PostgreSQL;
/// SQLite has one writer), in name order, so that leases placing at once
/// count one after another and never both take a node's last slot. A
/// lease's only grid-wide wait: captures, jobs and other sessions' steps do
/// not lock node rows (a heartbeat writes its own row and waits for a lease
/// in flight).
pub fn lock_slots(conn: &Conn, p: Placement<'_>) -> StoreResult<()> {
    conn.lock_rows(
        "SELECT name FROM nodes WHERE name = ?1 OR (heartbeat_at >= ?2 AND advertise_url IS NOT NULL) ORDER BY name",
        (p.me, p.live_after.0),
        "FOR UPDATE",
    )
}

/// The node a new session's browser runs on, or `None` when every live
/// node's slots are taken. A session leased before nodes were recorded
/// counts against `me`.
pub fn place(conn: &ReadConn, p: Placement<'_>) -> StoreResult<Option<String>> {
    conn.query_row(
        "SELECT name FROM (
           SELECT n.name,
                  n.max_sessions - (SELECT COUNT(*) FROM sessions s
                                     WHERE s.live = 1 AND (s.node = n.name OR (s.node IS NULL AND n.name = ?1))) AS free,
                  CASE WHEN n.name = ?1 THEN 0 ELSE 1 END AS other
             FROM nodes n
            WHERE n.name = ?1 OR (n.heartbeat_at >= ?2 AND n.advertise_url IS NOT NULL)
         ) AS candidates
         WHERE free > 0 ORDER BY other, free DESC, name LIMIT 1",
        (p.me, p.live_after.0),
        |r| r.get(0),
    )
    .optional()
}

/// Stores a session just leased by `caller` (`grid_core::session::lease`'s
/// machine) on `node`, with its launch deadline as its first due time, so
/// a session whose task never runs is still lost on time. Its reservation
/// (`reserved_micros`, its whole lifetime) is the driver's, written by the
/// same transaction. Only the session driver calls this. `sealed` is the
/// lease's drawn id and its proxy credentials sealed under it, when it has any.
#[allow(clippy::too_many_arguments)]
pub fn insert(
    tx: &Conn,
    caller: &Caller,
    sub: &SessionSubmission,
    token: &str,
    node: &str,
    machine: &Session,
    now: Millis,
    sealed: Option<&SealedProxy>,
) -> StoreResult<SessionRow> {
    let id = sealed.map_or_else(|| new_id(ids::SESSION), |s| s.id.clone());
    tx.execute(
        "INSERT INTO sessions (id, account_id, key_id, profile_id, network_policy, token_sha256, machine,
                               reserved_micros, reservation_day, created_at, due_at, node, submission, proxy_sealed)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        params![
            id,
            caller.account_id,
            caller.key_id,
            sub.profile.as_str(),
            sub.network_policy,
            sha256_hex(token.as_bytes()),
            to_json(machine)?,
            pricing::session_reservation_micros(sub.ttl_minutes),
            now.utc_day(),
            now.0,
            session::next_due(machine).map(|d| d.at.0),
            node,
            to_json(sub)?,
            sealed.map(|s| s.bytes.clone())
        ],
    )?;
    load(tx, &id)?.ok_or_else(|| StoreError::Invalid(format!("session {id} not found right after its insert")))
}

/// Reserves a session's whole lifetime (`row.reserved_micros`) for `payer`.
pub fn reserve(tx: &Conn, row: &SessionRow, payer: &Caller, now: Millis) -> Result<(), ReserveError> {
    accounts::reserve(tx, payer, row.reserved_micros, &row.id, now)
}

/// How to reach a session's browser: its token's hash, whether it is live,
/// the node running it and that node's advertised address (none when the
/// node is gone or advertises none).
#[derive(Debug, Clone)]
pub struct Route {
    pub token_sha256: String,
    pub live: bool,
    pub node: Option<String>,
    pub advertise_url: Option<String>,
}

pub fn route(conn: &ReadConn, id: &str) -> StoreResult<Option<Route>> {
    conn.query_row(
        "SELECT s.token_sha256, s.live, s.node, n.advertise_url
           FROM sessions s LEFT JOIN nodes n ON n.name = s.node WHERE s.id = ?1",
        [id],
        |r| {
            let live: i64 = r.get(1)?;
            Ok(Route { token_sha256: r.get(0)?, live: live == 1, node: r.get(2)?, advertise_url: r.get(3)? })
        },
    )
    .optional()
}

/// Live sessions whose browser runs on `node`, as the node reconciles
/// what it runs with the records.
pub fn live_on(conn: &ReadConn, node: &str) -> StoreResult<Vec<SessionRow>> {
    let sql = format!("SELECT {COLUMNS} FROM sessions WHERE live = 1 AND node = ?1 ORDER BY seq");
    conn.query_map(&sql, [node], row)
}

const COLUMNS: &str = "id, account_id, key_id, profile_id, network_policy, machine, attestation,
     network_attestation, reserved_micros, reservation_day, node, token_sha256, submission, proxy_sealed";

fn row(r: &Row) -> StoreResult<SessionRow> {
    let json_err = |i: usize, e: serde_json::Error| StoreError::Invalid(format!("column {i}: {e}"));
    let profile: String = r.get(3)?;
    let machine: String = r.get(5)?;
    let att: Option<String> = r.get(6)?;
    let net: Option<String> = r.get(7)?;
    let submission: Option<String> = r.get(12)?;
    Ok(SessionRow {
        id: r.get(0)?,
        account_id: r.get(1)?,
        key_id: r.get(2)?,
        profile: Profile::parse(&profile).unwrap_or(Profile::DEFAULT),
        network_policy: r.get(4)?,
        session: serde_json::from_str(&machine).map_err(|e| json_err(5, e))?,
        attestation: att.map(|a| serde_json::from_str(&a)).transpose().map_err(|e| json_err(6, e))?,
        network_attestation: net.map(|a| serde_json::from_str(&a)).transpose().map_err(|e| json_err(7, e))?,
        reserved_micros: r.get(8)?,
        reservation_day: r.get(9)?,
        node: r.get(10)?,
        token_sha256: r.get(11)?,
        submission: submission.map(|s| serde_json::from_str(&s)).transpose().map_err(|e| json_err(12, e))?,
        proxy_sealed: r.get(13)?,
    })
}

pub fn load(conn: &ReadConn, id: &str) -> StoreResult<Option<SessionRow>> {
    load_locked(conn, id, "")
}

/// `load` for a step of the session's machine: on PostgreSQL the row stays
/// locked until the transaction ends, so two steps of one session (a
/// release through one node, its expiry fired by another) run one after
/// the other, each from what the other stored.
pub fn load_for_step(conn: &Conn, id: &str) -> StoreResult<Option<SessionRow>> {
    load_locked(conn, id, conn.row_lock("FOR UPDATE"))
}

fn load_locked(conn: &ReadConn, id: &str, lock: &str) -> StoreResult<Option<SessionRow>> {
    let sql = format!("SELECT {COLUMNS} FROM sessions WHERE id = ?1 {lock}");
    conn.query_row(&sql, [id], row).optional()
}

/// The caller's live sessions, oldest first.
pub fn live_of(conn: &ReadConn, account_id: &str) -> StoreResult<Vec<SessionRow>> {
    let sql = format!("SELECT {COLUMNS} FROM sessions WHERE live = 1 AND account_id = ?1 ORDER BY seq");
    Ok(conn.query_map(&sql, [account_id], row)?.into_iter().collect())
}

/// Live sessions whose browser runs on `node` (or on no recorded node:
/// leased before nodes were recorded).
pub fn live_ids(conn: &ReadConn, node: &str) -> StoreResult<Vec<String>> {
    conn.query_map("SELECT id FROM sessions WHERE live = 1 AND (node = ?1 OR node IS NULL)", [node], |r| r.get(0))
}

/// Live sessions due at or before `now`, soonest first.
pub fn due_ids(conn: &ReadConn, now: Millis, limit: usize) -> StoreResult<Vec<String>> {
    Ok(conn
        .query_map(
            "SELECT id FROM sessions WHERE due_at <= ?1 ORDER BY due_at LIMIT ?2",
            params![now.0, limit as i64],
            |r| r.get(0),
        )?
        .into_iter()
        .collect())
}

/// The earliest due time after `now`.
pub fn next_due_after(conn: &ReadConn, now: Millis) -> StoreResult<Option<Millis>> {
    let at: Option<i64> =
        conn.query_row("SELECT MIN(due_at) FROM sessions WHERE due_at > ?1", [now.0], |r| r.get(0))?;
    Ok(at.map(Millis))
}

/// Stores the machine, whether it is live and its next due time.
pub fn save(conn: &Conn, id: &str, machine: &Session) -> StoreResult<()> {
    conn.execute(
        "UPDATE sessions SET machine = ?2, live = ?3, due_at = ?4 WHERE id = ?1",
        params![id, to_json(machine)?, machine.is_live(), session::next_due(machine).map(|d| d.at.0)],
    )?;
    Ok(())
}

/// The ledger rows of a session's end: `ready_millis` of ready time charged,
/// the rest of the reservation released.
pub fn settle(conn: &Conn, r: &SessionRow, ready_millis: i64, now: Millis) -> StoreResult<()> {
    let used = pricing::session_charge_micros(ready_millis, r.reserved_micros);
    let (charged, released) = ledger::settle(r.reserved_micros, used);
    for (kind, amount) in [(EntryKind::Charge, charged), (EntryKind::Release, released)] {
        if amount > 0 {
            let e = Entry {
                account_id: &r.account_id,
                key_id: r.key_id.as_deref(),
                kind,
                amount,
                subject: Some(&r.id),
                reservation_day: Some(r.reservation_day),
            };
            accounts::append(conn, &e, now)?;
        }
    }
    Ok(())
}

pub fn set_attestation(
    conn: &Conn,
    id: &str,
    attestation: &Attestation,
    network: Option<&NetworkAttestation>,
) -> StoreResult<()> {
    conn.execute(
        "UPDATE sessions SET attestation = ?2, network_attestation = ?3 WHERE id = ?1",
        params![id, to_json(attestation)?, network.map(to_json).transpose()?],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use grid_core::wire::session::{SessionOverrides, Viewport};

    /// The `submission` column as leases have written it since it was
    /// added: rows already stored must still read back, and new rows keep
    /// the same shape.
    #[test]
    fn stored_submissions_keep_their_shape() {
        let bare = r#"{"profile":"desktop-browser-nl/v2","ttlMinutes":30,"networkPolicy":null,"overrides":{"viewport":null,"userAgent":null,"locale":null,"timezone":null}}"#;
        let full = r#"{"profile":"native-headless-browser/v2","ttlMinutes":240,"networkPolicy":"public-web-only/v1","overrides":{"viewport":{"width":390,"height":844,"deviceScaleFactor":3.0,"mobile":true},"userAgent":"UA/1","locale":"fr-CA","timezone":"America/Toronto"}}"#;
        let cases = [
            (
                bare,
                SessionSubmission {
                    profile: Profile::DesktopBrowserNl,
                    ttl_minutes: 30,
                    network_policy: None,
                    overrides: SessionOverrides::default(),
                    take_over: false,
                    recording: false,
                    context: None,
                    proxy: None,
                },
            ),
            (
                full,
                SessionSubmission {
                    profile: Profile::NativeHeadlessBrowser,
                    ttl_minutes: 240,
                    network_policy: Some("public-web-only/v1".into()),
                    overrides: SessionOverrides {
                        viewport: Some(Viewport { width: 390, height: 844, device_scale_factor: 3.0, mobile: true }),
                        user_agent: Some("UA/1".into()),
                        locale: Some("fr-CA".into()),
                        timezone: Some("America/Toronto".into()),
                    },
                    take_over: false,
                    recording: false,
                    context: None,
                    proxy: None,
                },
            ),
            (
                r#"{"profile":"desktop-browser-nl/v2","ttlMinutes":30,"networkPolicy":null,"overrides":{"viewport":null,"userAgent":null,"locale":null,"timezone":null},"takeOver":true}"#,
                SessionSubmission {
                    profile: Profile::DesktopBrowserNl,
                    ttl_minutes: 30,
                    network_policy: None,
                    overrides: SessionOverrides::default(),
                    take_over: true,
                    recording: false,
                    context: None,
                    proxy: None,
                },
            ),
            (
                r#"{"profile":"desktop-browser-nl/v2","ttlMinutes":30,"networkPolicy":null,"overrides":{"viewport":null,"userAgent":null,"locale":null,"timezone":null},"recording":true}"#,
                SessionSubmission {
                    profile: Profile::DesktopBrowserNl,
                    ttl_minutes: 30,
                    network_policy: None,
                    overrides: SessionOverrides::default(),
                    take_over: false,
                    recording: true,
                    context: None,
                    proxy: None,
                },
            ),
            (
                r#"{"profile":"desktop-browser-nl/v2","ttlMinutes":30,"networkPolicy":null,"overrides":{"viewport":null,"userAgent":null,"locale":null,"timezone":null},"context":{"id":"ctx_1","persist":true}}"#,
                SessionSubmission {
                    profile: Profile::DesktopBrowserNl,
                    ttl_minutes: 30,
                    network_policy: None,
                    overrides: SessionOverrides::default(),
                    take_over: false,
                    recording: false,
                    context: Some(grid_core::wire::session::SessionContext { id: "ctx_1".into(), persist: true }),
                    proxy: None,
                },
            ),
        ];
        for (stored, sub) in cases {
            assert_eq!(serde_json::from_str::<SessionSubmission>(stored).unwrap(), sub);
            assert_eq!(to_json(&sub).unwrap(), stored);
        }
    }

    #[test]
    fn a_stored_submission_naming_an_unknown_profile_is_refused_by_name() {
        let stored = r#"{"profile":"desktop-browser-nl/v1","ttlMinutes":30,"networkPolicy":null,"overrides":{"viewport":null,"userAgent":null,"locale":null,"timezone":null}}"#;
        let e = serde_json::from_str::<SessionSubmission>(stored).unwrap_err();
        assert!(e.to_string().contains("desktop-browser-nl/v1"), "{e}");
    }
}
