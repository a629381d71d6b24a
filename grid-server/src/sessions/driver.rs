//! The session driver: the one place a session's machine moves and its
//! effects are executed.
//!
//! A step is one write transaction: load the session, apply the event
//! (`grid_core::session::apply`), write the settlement's ledger rows, store
//! the machine with its next due time (`grid_core::session::next_due`: the
//! expiry, and while pending the launch deadline). A refusal or a store
//! failure half-way rolls all of it back. The machine returns its effects
//! split by when they happen (`session::Effects`): `execute_in_tx` writes
//! the ones inside the transaction, and only after the commit does
//! `execute_after_commit` carry out the rest, so a browser is never stopped
//! for an end that was not stored. Each is one exhaustive `match` with no
//! `_` arm: a new effect does not compile until its half executes it.
//!
//! Everything that moves a session comes here: the session task (ready,
//! and its exit however it happens), DELETE /sessions/{id}, the due-time
//! loop (`due.rs`: expiries and launch deadlines, fired whichever task or
//! process is alive), recovery at start and shutdown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::store::Conn;
use futures_util::future::BoxFuture;
use grid_core::error::ApiError;
use grid_core::session::{self, Due, Effects, Event, OutsideEffect, SessionStatus, TransitionError, TxEffect};
use grid_core::time::Millis;
use grid_core::wire::session::{Attestation, NetworkAttestation};
use grid_core::wire::session::{SessionLease, SessionSubmission};
use tokio::sync::{mpsc, watch};

use super::live::{cdp_url, Endpoint, Live};
use crate::clock::Clock;
use crate::peers::{Peers, Subject};
use crate::store::accounts::Caller;
use crate::store::idempotency::{self, Answer, Created};
use crate::store::nodes::live_after;
use crate::store::sessions::{self as store, SessionError, SessionRow};
use crate::store::{Store, StoreError};

/// Due sessions fired in one pass before the loop is asked to come back at once.
const FIRE_BATCH: usize = 256;
/// First and longest wait between attempts to store a session task's loss.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// The browsers of this process's live sessions: what the CDP endpoint
/// reaches, and what `OutsideEffect::StopBrowser` stops.
#[derive(Default)]
pub struct Browsers {
    live: Mutex<HashMap<String, Handle>>,
    /// Browsers stopped by an executed `StopBrowser`.
    stopped: AtomicU64,
}

struct Handle {
    live: Live,
    end: watch::Sender<bool>,
}

impl Browsers {
    /// A session's browser from its lease on: the sender publishes the
    /// browser once running; the receiver turns true when it must stop.
    /// `None` when the session's browser is already registered here: one
    /// session task per session, whoever asks to start it (its lease on
    /// this node, a sync from the node that leased it, reconciliation).
    pub fn register(
        &self,
        id: &str,
        token_sha256: String,
        take_over: bool,
    ) -> Option<(watch::Sender<Option<Endpoint>>, watch::Receiver<bool>)> {
        let mut map = self.map();
        if map.contains_key(id) {
            return None;
        }
        let (endpoint, endpoint_rx) = watch::channel(None);
        let (end, ended) = watch::channel(false);
        let handle = Handle {
            live: Live {
                token_sha256,
                endpoint: endpoint_rx,
                ended: ended.clone(),
                tab: Default::default(),
                journal: Default::default(),
                take_over,
            },
            end,
        };
        map.insert(id.to_string(), handle);
        Some((endpoint, ended))
    }

    pub fn live(&self, id: &str) -> Option<Live> {
        self.map().get(id).map(|h| h.live.clone())
    }

    fn holds(&self, id: &str) -> bool {
        self.map().contains_key(id)
    }

    /// The sessions whose browsers run here now.
    fn held(&self) -> Vec<String> {
        self.map().keys().cloned().collect()
    }

    /// Stops the session's browser: the session task, which owns the
    /// process, kills its sandbox at once, and every open CDP connection
    /// closes. Idempotent.
    fn stop(&self, id: &str) {
        if let Some(h) = self.map().remove(id) {
            let _ = h.end.send(true);
            self.stopped.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[cfg(test)]
    fn stopped(&self) -> u64 {
        self.stopped.load(Ordering::Relaxed)
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Handle>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What one transaction did: the session as stored and the machine's
/// effects (those in `in_tx` already written by it).
struct Stepped {
    row: SessionRow,
    effects: Effects,
}

/// A session whose browser is to start on this node, registered (its CDP
/// endpoint answers from now on): for the session task (`super::run_starts`),
/// which launches the browser and publishes it on `endpoint`.
pub struct Start {
    pub row: SessionRow,
    pub endpoint: watch::Sender<Option<Endpoint>>,
    pub ended: watch::Receiver<bool>,
}

/// Where a lease's browser is reached: the grid's public URL and the
/// lease's token (stored only as its hash).
pub struct Reach {
    pub base_url: String,
    pub token: String,
}

impl Reach {
    /// POST /sessions's answer for the leased `row`. Built inside the
    /// lease's transaction, as the batch driver builds `BatchCreated`: a
    /// resend with the same Idempotency-Key replays it whole, the token
    /// included, which is kept nowhere else in clear.
    fn answer(&self, row: &SessionRow) -> SessionLease {
        let cdp_url = cdp_url(&self.base_url, &row.id, &self.token);
        SessionLease {
            live_view_url: format!("{cdp_url}/view"),
            cdp_url,
            session_id: row.id.clone(),
            expires_at: row.session.expires_at,
            profile_id: row.profile.as_str().to_string(),
            attestation: None,
            network_policy: row.network_policy.clone(),
            network_attestation: None,
        }
    }
}

pub struct SessionDriver {
    store: Store,
    clock: Arc<dyn Clock>,
    browsers: Browsers,
    /// This node: the browsers of sessions placed on it run here; another
    /// node's are started and stopped by asking that node.
    node: Arc<str>,
    peers: Arc<Peers>,
    /// Where `OutsideEffect::StartBrowser` sends a browser to start here.
    starts: mpsc::UnboundedSender<Start>,
    /// How long a node's heartbeat counts it live: a lease is placed only
    /// on live nodes.
    node_lease: Duration,
}

impl SessionDriver {
    /// The driver, and the starts it asks for, for whoever runs the session
    /// tasks to receive.
    pub fn new(
        store: Store,
        clock: Arc<dyn Clock>,
        node: &str,
        node_lease: Duration,
        peers: Arc<Peers>,
    ) -> (SessionDriver, mpsc::UnboundedReceiver<Start>) {
        let (starts, started) = mpsc::unbounded_channel();
        let browsers = Browsers::default();
        (SessionDriver { store, clock, browsers, node: node.into(), peers, starts, node_lease }, started)
    }

    /// POST /sessions for `caller`: the machine's first step
    /// (`grid_core::session::lease`) in one transaction, under the
    /// request's Idempotency-Key if it has one: a slot taken somewhere in
    /// the grid (`store::place`; none free is SESSION_LIMIT_REACHED), the
    /// session stored with its reservation, its answer (`Reach::answer`)
    /// sealed with the key. Once that commits the browser is started where
    /// the session was placed. A resend is answered the first answer and
    /// starts nothing.
    pub async fn lease(
        &self,
        caller: &Caller,
        sub: SessionSubmission,
        sealed: Option<crate::store::SealedProxy>,
        key: Option<idempotency::Key>,
        reach: Reach,
    ) -> Result<idempotency::Outcome<SessionRow>, SessionError> {
        let (caller, node, lease, clock) = (caller.clone(), self.node.clone(), self.node_lease, self.clock.clone());
        // Ordered by rows (docs/scale-out.md "Locking"): `create` locks the
        // account, then the nodes whose slots it counts.
        let outcome = self
            .store
            .write_rows(move |tx| -> Result<_, SessionError> {
                let at = clock.now();
                idempotency::once(tx, &caller.account_id, key.as_ref(), at, |tx| {
                    let placement = store::Placement { me: &node, live_after: live_after(at, lease) };
                    let stepped = create(tx, &caller, &sub, sealed.as_ref(), &reach.token, placement, at)?;
                    let answer = Answer::json(201, &reach.answer(&stepped.row))?;
                    Ok(Created { subject: stepped.row.id.clone(), answer, value: stepped })
                })
            })
            .await?;
        Ok(match outcome {
            idempotency::Outcome::Performed(stepped, answer) => {
                let row = stepped.row;
                tracing::info!(session = %row.id, profile = row.profile.as_str(), node = row.node.as_deref().unwrap_or("-"), "session leased");
                self.execute_after_commit(&row, &stepped.effects.after_commit).await;
                idempotency::Outcome::Performed(row, answer)
            }
            idempotency::Outcome::Replayed(answer) => idempotency::Outcome::Replayed(answer),
        })
    }

    pub fn now(&self) -> Millis {
        self.clock.now()
    }

    pub fn browsers(&self) -> &Browsers {
        &self.browsers
    }

    /// Applies `event` at `at` in one transaction, then executes its effects.
    pub async fn apply(&self, id: &str, event: Event, at: Millis) -> Result<SessionRow, SessionError> {
        self.transact(id, move |tx, row| step(tx, row, event, at)).await
    }

    /// The browser answered at `at` and was attested: running, with its
    /// attestation, in one transaction.
    pub async fn ready(
        &self,
        id: &str,
        at: Millis,
        attestation: Attestation,
        network: Option<NetworkAttestation>,
    ) -> Result<SessionRow, SessionError> {
        let row = self
            .transact(id, move |tx, row| {
                store::set_attestation(tx, &row.id, &attestation, network.as_ref())?;
                step(tx, row, Event::Ready, at)
            })
            .await?;
        let lease_to_ready = (at.0 - row.session.created_at.0).max(0) as f64 / 1000.0;
        crate::metrics::get().session_lease_to_ready_seconds.observe(lease_to_ready);
        Ok(row)
    }

    /// DELETE /sessions/{id} by `account_id`: another account's session is
    /// unknown, exactly like one that does not exist.
    pub async fn release(&self, account_id: &str, id: &str) -> Result<SessionRow, SessionError> {
        let (account, at) = (account_id.to_string(), self.now());
        let row = self
            .transact(id, move |tx, row| {
                if row.account_id != account {
                    return Err(TransitionError::Refused(ApiError::UnknownSession).into());
                }
                step(tx, row, Event::Release, at)
            })
            .await?;
        tracing::info!(session = %id, "session released");
        Ok(row)
    }

    /// The last word of a session task, however it ended (it returned, failed
    /// on the way, or panicked): unless an end already stopped its browser,
    /// the session is lost now. The loss time is fixed here, so a write
    /// that fails (the database busy) is retried until it is stored.
    pub async fn task_exited(&self, id: &str) {
        if !self.browsers.holds(id) {
            // An end stored by someone else already executed its StopBrowser.
            return;
        }
        let at = self.now();
        let mut wait = RETRY_FIRST;
        loop {
            match self.apply(id, Event::Lose, at).await {
                Ok(_) => {
                    tracing::warn!(session = %id, "session lost");
                    return;
                }
                // Ended meanwhile: that end executes its own StopBrowser.
                Err(SessionError::Transition(e)) => {
                    tracing::debug!(session = %id, error = %e, "session already ended");
                    return;
                }
                Err(SessionError::Store(StoreError::NotFound(_))) => return,
                Err(e) => {
                    tracing::error!(session = %id, error = %e, "the session's loss could not be stored; retrying");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(RETRY_MAX);
                }
            }
        }
    }

    /// On start: sessions left live by the last run lost their browser with
    /// it, at the latest at `last_alive` (its last settlement heartbeat: at
    /// most one settlement interval before it stopped). A deadline that fell
    /// while it was still alive ends the session as it would have
    /// (`grid_core::session::after_stop`).
    ///
    /// `node`'s sessions: this node's own at its start, a dead node's (with
    /// its last heartbeat) when it is taken over.
    pub async fn recover(&self, node: &str, last_alive: Option<Millis>) {
        let now = self.now();
        let alive = last_alive.unwrap_or(now).min(now);
        for id in self.live_ids(node).await {
            let ended = self
                .transact(&id, move |tx, row| {
                    let Due { at, event } = session::after_stop(&row.session, alive);
                    step(tx, row, event, at)
                })
                .await;
            match ended {
                Ok(row) => {
                    tracing::warn!(session = %id, ended = ?row.session.ended, "session of the previous run ended")
                }
                Err(e) => tracing::error!(session = %id, error = %e, "session of the previous run not ended"),
            }
        }
    }

    /// On shutdown: every live session is lost now, its browser stopped.
    pub async fn shutdown(&self, node: &str) {
        let at = self.now();
        for id in self.live_ids(node).await {
            if let Err(e) = self.apply(&id, Event::Lose, at).await {
                tracing::warn!(session = %id, error = %e, "session not ended at shutdown");
            }
        }
    }

    async fn live_ids(&self, node: &str) -> Vec<String> {
        let node = node.to_string();
        self.store.read(move |c| store::live_ids(c, &node)).await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "live sessions not read");
            vec![]
        })
    }

    /// Runs `f` on the loaded session in one write transaction, then
    /// executes the effects it returned.
    async fn transact<F>(&self, id: &str, f: F) -> Result<SessionRow, SessionError>
    where
        F: FnOnce(&Conn, SessionRow) -> Result<Stepped, SessionError> + Send + 'static,
    {
        let sid = id.to_string();
        // Ordered by rows: a step locks its session's row and checks nothing
        // else (its charge adds to the ledger's sums, which lock their own).
        let stepped = self
            .store
            .write_rows(move |tx| {
                let row =
                    store::load_for_step(tx, &sid)?.ok_or_else(|| StoreError::NotFound(format!("session {sid}")))?;
                f(tx, row)
            })
            .await?;
        self.execute_after_commit(&stepped.row, &stepped.effects.after_commit).await;
        if stepped.effects.in_tx.iter().any(|e| matches!(e, TxEffect::Settle { .. })) {
            if let Some(end) = stepped.row.session.ended {
                crate::metrics::get().sessions_ended.with_label_values(&[end.cause.as_str()]).inc();
            }
        }
        Ok(stepped.row)
    }

    /// The one executor of the effects that follow a committed step.
    async fn execute_after_commit(&self, row: &SessionRow, effects: &[OutsideEffect]) {
        for effect in effects {
            match effect {
                OutsideEffect::StartBrowser => self.start_browser(row),
                OutsideEffect::StopBrowser => self.stop_browser(row).await,
            }
        }
    }

    /// Starts a leased session's browser where it was placed: here, or on
    /// the node it was placed on (this one's slots were taken), which is
    /// told in the background and otherwise starts it at its next
    /// reconciliation.
    fn start_browser(&self, row: &SessionRow) {
        match row.node.as_deref() {
            Some(node) if node != &*self.node => {
                let (peers, id, node) = (self.peers.clone(), row.id.clone(), node.to_string());
                tokio::spawn(async move {
                    if let Err(e) = peers.sync(&node, Subject::Session(&id)).await {
                        tracing::warn!(session = %id, %node, error = %e, "the session's node was not told to start it; it does at its next reconciliation");
                    }
                });
            }
            _ => self.start_here(row.clone()),
        }
    }

    /// Registers the session's browser here and hands it to the session
    /// tasks to launch. A session already running here is left alone:
    /// whoever asks first (its lease on this node, a sync from the node
    /// that leased it, this node's reconciliation) starts it, once.
    pub fn start_here(&self, row: SessionRow) {
        let take_over = row.submission.as_ref().is_some_and(|s| s.take_over);
        let Some((endpoint, ended)) = self.browsers.register(&row.id, row.token_sha256.clone(), take_over) else {
            return;
        };
        if let Err(mpsc::error::SendError(start)) = self.starts.send(Start { row, endpoint, ended }) {
            // Nobody runs session tasks (the server is stopping): the
            // session is lost at its launch deadline.
            tracing::warn!(session = %start.row.id, "no session task runner; the browser was not started");
            self.browsers.stop(&start.row.id);
        }
    }

    /// Stops an ended session's browser where it runs: here, or on the node
    /// it was placed on, which is asked and answers once it stopped it (so
    /// a release through any node has cut every connection when it answers).
    /// A node that cannot be asked finds the end itself when it reconciles
    /// (`reconcile`, every heartbeat).
    async fn stop_browser(&self, row: &SessionRow) {
        match row.node.as_deref() {
            Some(node) if node != &*self.node && !self.browsers.holds(&row.id) => {
                if let Err(e) = self.peers.sync(node, Subject::Session(&row.id)).await {
                    tracing::warn!(session = %row.id, %node, error = %e, "the browser's node was not told of the end; it stops the browser when it reconciles");
                }
            }
            _ => self.browsers.stop(&row.id),
        }
    }

    /// Brings this node's browsers in line with the records: a browser whose
    /// session ended (through another node) is stopped; a session placed
    /// here that has no browser yet is answered with the rows to start
    /// (pending: leased through another node). A live session placed here
    /// whose task is gone cannot happen (the task's exit ends it), so only
    /// pending ones are started.
    pub async fn reconcile(&self) -> Result<Vec<SessionRow>, StoreError> {
        // Held before the read: a browser registered after it may belong to
        // a lease the read did not see yet, and must not be stopped for it.
        let held = self.browsers.held();
        let node = self.node.to_string();
        let live = self.store.read(move |c| store::live_on(c, &node)).await?;
        for id in held.iter().filter(|id| !live.iter().any(|r| &r.id == *id)) {
            tracing::info!(session = %id, "session ended elsewhere; stopping its browser");
            self.browsers.stop(id);
        }
        Ok(live
            .into_iter()
            .filter(|r| r.session.status == SessionStatus::Pending && !self.browsers.holds(&r.id))
            .collect())
    }

    /// One session brought in line with its record (a sync from another
    /// node): its browser stopped if it ended, the row answered if it is
    /// placed here and still to start.
    pub async fn sync_one(&self, id: &str) -> Result<Option<SessionRow>, StoreError> {
        let sid = id.to_string();
        let Some(row) = self.store.read(move |c| store::load(c, &sid)).await? else { return Ok(None) };
        if !row.session.is_live() {
            self.browsers.stop(id);
            return Ok(None);
        }
        let here = row.node.as_deref() == Some(&*self.node);
        Ok((here && row.session.status == SessionStatus::Pending && !self.browsers.holds(id)).then_some(row))
    }

    /// Fires one due session: its due event at its due time.
    async fn fire(&self, id: &str, now: Millis) {
        match self.transact(id, move |tx, row| fire(tx, row, now)).await {
            Ok(row) => {
                if let Some(ended) = row.session.ended {
                    tracing::info!(session = %id, cause = ended.cause.as_str(), at = %ended.at.to_iso(), "session ended at its due time");
                }
            }
            Err(e) => tracing::warn!(session = %id, error = %e, "due session not fired; the next pass tries again"),
        }
    }
}

impl crate::due::DueTimes for SessionDriver {
    fn fire_due(&self, now: Millis) -> BoxFuture<'_, Option<Millis>> {
        Box::pin(async move {
            let ids = match self.store.read(move |c| store::due_ids(c, now, FIRE_BATCH)).await {
                Ok(ids) => ids,
                Err(e) => {
                    tracing::warn!(error = %e, "due sessions not read");
                    return None;
                }
            };
            let more = ids.len() == FIRE_BATCH;
            for id in ids {
                self.fire(&id, now).await;
            }
            if more {
                return Some(now);
            }
            self.store.read(move |c| store::next_due_after(c, now)).await.ok().flatten()
        })
    }
}

/// The machine's first step (`grid_core::session::lease`) inside the
/// caller's transaction: a slot taken where `placement` finds one, the
/// session stored there, its reservation billed to `caller`.
fn create(
    tx: &Conn,
    caller: &Caller,
    sub: &SessionSubmission,
    sealed: Option<&crate::store::SealedProxy>,
    token: &str,
    placement: store::Placement<'_>,
    at: Millis,
) -> Result<Stepped, SessionError> {
    // The account first (its credit and its contexts are checked below, as
    // every reservation of the account locks it first), then the slots.
    crate::store::accounts::lock_account(tx, &caller.account_id)?;
    store::lock_slots(tx, placement)?;
    let Some(node) = store::place(tx, placement)? else {
        let max_sessions = crate::store::nodes::live_max_sessions(tx, placement.me, placement.live_after)?;
        return Err(TransitionError::Refused(ApiError::SessionLimitReached { max_sessions }).into());
    };
    let outcome = session::lease(at, sub.ttl_minutes);
    let row = store::insert(tx, caller, sub, token, &node, &outcome.session, at, sealed)?;
    if let Some(context) = &sub.context {
        crate::store::contexts::take(tx, &caller.account_id, &context.id, &row.id, at).map_err(|e| match e {
            crate::store::contexts::ContextError::Refused(api) => TransitionError::Refused(api).into(),
            crate::store::contexts::ContextError::Store(s) => SessionError::Store(s),
        })?;
    }
    execute_in_tx(tx, &row, &outcome.effects.in_tx, at, Some(caller))?;
    Ok(Stepped { row, effects: outcome.effects })
}

/// load → apply → execute → save (with its due time), inside the caller's
/// transaction.
fn step(tx: &Conn, mut row: SessionRow, event: Event, at: Millis) -> Result<Stepped, SessionError> {
    let outcome = session::apply(&row.session, event, at)?;
    execute_in_tx(tx, &row, &outcome.effects.in_tx, at, None)?;
    row.session = outcome.session;
    store::save(tx, &row.id, &row.session)?;
    Ok(Stepped { row, effects: outcome.effects })
}

/// The one executor of the effects written in a step's transaction. A
/// reservation is billed to `payer` (the leasing caller).
fn execute_in_tx(
    tx: &Conn,
    row: &SessionRow,
    effects: &[TxEffect],
    at: Millis,
    payer: Option<&Caller>,
) -> Result<(), SessionError> {
    for effect in effects {
        match effect {
            TxEffect::Reserve => {
                let payer = payer
                    .ok_or_else(|| StoreError::Invalid(format!("session {}: a reservation with no payer", row.id)))?;
                store::reserve(tx, row, payer, at)?;
            }
            TxEffect::Settle { ready_millis } => store::settle(tx, row, *ready_millis, at)?,
        }
    }
    Ok(())
}

/// The session's due event at its due time, when that is not after `now`.
/// A stored due time another step has since moved is only rewritten.
fn fire(tx: &Conn, row: SessionRow, now: Millis) -> Result<Stepped, SessionError> {
    match session::next_due(&row.session) {
        Some(Due { at, event }) if at <= now => step(tx, row, event, at),
        _ => {
            store::save(tx, &row.id, &row.session)?;
            Ok(Stepped { row, effects: Effects::default() })
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::clock::VirtualClock;
    use crate::due::DueTimes as _;
    use crate::store::accounts::{self, Caller};
    use grid_core::catalog::Profile;
    use grid_core::pricing::{session_charge_micros, session_reservation_micros};
    use grid_core::session::{EndCause, Ended, SessionStatus, LAUNCH_DEADLINE_MS};
    use grid_core::wire::session::SessionSubmission;

    pub(crate) const T0: Millis = Millis(1_800_000_000_000);
    const CREDIT: i64 = 1_000_000;

    struct World {
        _dir: tempfile::TempDir,
        store: Store,
        clock: Arc<VirtualClock>,
        driver: SessionDriver,
        caller: Caller,
        /// The browsers the driver asked to start here.
        starts: Mutex<mpsc::UnboundedReceiver<Start>>,
    }

    /// A temp store at `T0` on a virtual clock, with an account (and its
    /// key) and node `n1` offering four session slots (also for the
    /// session tasks' tests, `sessions/task.rs`).
    pub(crate) fn grid() -> (tempfile::TempDir, Store, Arc<VirtualClock>, Caller) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Duration::from_secs(1)).unwrap();
        let clock = Arc::new(VirtualClock::at(T0));
        let caller = store
            .write_blocking(|tx| {
                let id = accounts::create_account(tx, "t", CREDIT, T0)?;
                let k = accounts::create_key(tx, &id, None, false, Default::default(), T0)?;
                Ok::<_, StoreError>(Caller { account_id: id, key_id: Some(k.key_id), ..Default::default() })
            })
            .unwrap();
        store
            .write_blocking(|tx| {
                crate::store::nodes::register(
                    tx,
                    "n1",
                    None,
                    crate::store::nodes::Offer { sessions: 4, ..Default::default() },
                    T0,
                )
            })
            .unwrap();
        (dir, store, clock, caller)
    }

    fn world() -> World {
        let (dir, store, clock, caller) = grid();
        let peers = Arc::new(Peers::new(store.clone(), "credential".into()));
        let (driver, starts) = SessionDriver::new(store.clone(), clock.clone(), "n1", Duration::from_secs(30), peers);
        World { _dir: dir, store, clock, driver, caller, starts: Mutex::new(starts) }
    }

    impl World {
        fn submission(ttl_minutes: u32) -> SessionSubmission {
            SessionSubmission {
                profile: Profile::DEFAULT,
                ttl_minutes,
                network_policy: None,
                overrides: Default::default(),
                take_over: false,
                recording: false,
                context: None,
                proxy: None,
            }
        }

        /// POST /sessions now through the driver, its browser's start taken
        /// as the session tasks take it: the session and the signal that
        /// tells its task to stop.
        async fn lease(&self, ttl_minutes: u32) -> (String, watch::Receiver<bool>) {
            let sub = World::submission(ttl_minutes);
            let leased = self.driver.lease(&self.caller, sub, None, None, reach()).await.unwrap();
            let idempotency::Outcome::Performed(row, _) = leased else { panic!("a lease without a key replayed") };
            let start = self.starts.lock().unwrap().try_recv().expect("the lease started no browser");
            assert_eq!(start.row.id, row.id);
            (row.id, start.ended)
        }

        fn row(&self, id: &str) -> SessionRow {
            let id = id.to_string();
            self.store.read_blocking(move |c| store::load(c, &id)).unwrap().unwrap()
        }

        fn due_at(&self, id: &str) -> Option<i64> {
            let id = id.to_string();
            self.store
                .read_blocking(move |c| c.query_row("SELECT due_at FROM sessions WHERE id = ?1", [&id], |r| r.get(0)))
                .unwrap()
        }

        /// (credit, reserved) of the account.
        fn balance(&self) -> (i64, i64) {
            let a = self.caller.account_id.clone();
            let b = self.store.read_blocking(move |c| accounts::balance(c, &a)).unwrap();
            (b.credit_micros, b.reserved_micros)
        }
    }

    /// Where a lease of the tests is reached.
    pub(crate) fn reach() -> Reach {
        Reach { base_url: "ws://grid".into(), token: "token".into() }
    }

    #[tokio::test]
    async fn a_lease_reserves_its_lifetime_and_starts_its_browser_once_stored() {
        let w = world();
        let (id, ended) = w.lease(30).await;
        let row = w.row(&id);
        assert_eq!((row.session.status, row.node.as_deref()), (SessionStatus::Pending, Some("n1")));
        assert_eq!(row.reserved_micros, session_reservation_micros(30));
        assert_eq!(w.balance(), (CREDIT, session_reservation_micros(30)));
        assert_eq!(w.due_at(&id), Some(T0.plus_ms(LAUNCH_DEADLINE_MS).0));
        // Registered before the answer: its CDP endpoint finds it at once.
        assert!(w.driver.browsers().live(&id).is_some());
        assert!(!*ended.borrow());
    }

    #[tokio::test]
    async fn a_lease_with_no_free_slot_stores_nothing_and_starts_nothing() {
        let w = world();
        for _ in 0..4 {
            w.lease(30).await;
        }
        let reserved = w.balance().1;
        let refused = w.driver.lease(&w.caller, World::submission(30), None, None, reach()).await;
        assert!(
            matches!(
                refused,
                Err(SessionError::Transition(TransitionError::Refused(ApiError::SessionLimitReached {
                    max_sessions: 4
                })))
            ),
            "{:?}",
            refused.err()
        );
        assert_eq!(w.balance().1, reserved, "a refused lease reserved");
        assert!(w.starts.lock().unwrap().try_recv().is_err(), "a refused lease started a browser");
    }

    #[tokio::test]
    async fn expiry_fires_at_expires_at_with_the_ready_time_settled() {
        let w = world();
        let (id, ended) = w.lease(1).await;
        let expires = T0.plus_ms(60_000);
        // Pending: due at expiry already (a 1 minute lease expires before its launch deadline).
        assert_eq!(w.due_at(&id), Some(expires.0));
        w.driver.apply(&id, Event::Ready, T0.plus_ms(10_000)).await.unwrap();
        assert_eq!(w.due_at(&id), Some(expires.0));

        // Nothing is due a moment before; the loop is told when to come back.
        assert_eq!(w.driver.fire_due(expires.plus_ms(-1)).await, Some(expires));
        assert!(w.row(&id).session.is_live());
        // Noticed late: the session still ends at expiresAt, charged to it.
        w.clock.set(expires.plus_ms(400));
        assert_eq!(w.driver.fire_due(w.clock.now()).await, None);
        let row = w.row(&id);
        assert_eq!(row.session.ended, Some(Ended { cause: EndCause::Expired, at: expires }));
        assert_eq!(w.due_at(&id), None);
        let charge = session_charge_micros(50_000, session_reservation_micros(1));
        assert_eq!(w.balance(), (CREDIT - charge, 0));
        assert!(*ended.borrow(), "the browser was not stopped");
        assert_eq!(w.driver.browsers().stopped(), 1);
        // Fired once: another pass finds nothing and charges nothing more.
        assert_eq!(w.driver.fire_due(expires.plus_ms(60_000)).await, None);
        assert_eq!(w.balance(), (CREDIT - charge, 0));
    }

    #[tokio::test]
    async fn a_session_pending_past_its_launch_deadline_is_lost_and_releases_its_whole_reservation() {
        let w = world();
        let (id, ended) = w.lease(30).await;
        let deadline = T0.plus_ms(LAUNCH_DEADLINE_MS);
        assert_eq!(w.due_at(&id), Some(deadline.0));
        assert_eq!(w.balance(), (CREDIT, session_reservation_micros(30)));

        w.clock.set(deadline.plus_ms(250));
        w.driver.fire_due(w.clock.now()).await;
        let row = w.row(&id);
        assert_eq!(row.session.status, SessionStatus::Pending);
        assert_eq!(row.session.ended, Some(Ended { cause: EndCause::Lost, at: deadline }));
        assert_eq!(w.balance(), (CREDIT, 0));
        assert!(*ended.borrow());
        assert!(w.driver.browsers().live(&id).is_none(), "the CDP endpoint still reaches it");
        // The task that was still launching learns it too late to run it.
        let late = w.driver.apply(&id, Event::Ready, deadline.plus_ms(1_000)).await;
        assert!(matches!(late, Err(SessionError::Transition(_))), "{late:?}");
        // ... and its exit changes nothing.
        w.driver.task_exited(&id).await;
        assert_eq!(w.row(&id).session.ended, Some(Ended { cause: EndCause::Lost, at: deadline }));
    }

    #[tokio::test]
    async fn release_executes_stop_browser_once() {
        let w = world();
        let (id, ended) = w.lease(30).await;
        let (other, _other_ended) = w.lease(30).await;
        w.driver.apply(&id, Event::Ready, T0.plus_ms(5_000)).await.unwrap();
        w.clock.set(T0.plus_ms(65_000));
        // Another account's release is refused and stops nothing.
        let refused = w.driver.release("acc_other", &id).await;
        assert!(matches!(refused, Err(SessionError::Transition(TransitionError::Refused(ApiError::UnknownSession)))));
        assert!(!*ended.borrow());

        w.driver.release(&w.caller.account_id, &id).await.unwrap();
        assert!(*ended.borrow());
        assert_eq!(w.driver.browsers().stopped(), 1);
        assert_eq!(w.row(&id).session.ended, Some(Ended { cause: EndCause::Released, at: T0.plus_ms(65_000) }));
        // Releasing again, the task's exit and a later due pass stop nothing more.
        assert!(w.driver.release(&w.caller.account_id, &id).await.is_err());
        w.driver.task_exited(&id).await;
        w.driver.fire_due(T0.plus_ms(40 * 60_000)).await;
        assert_eq!(w.driver.browsers().stopped(), 2, "only the other session's launch deadline stopped one more");
        assert_eq!(w.row(&id).session.ended.map(|e| e.cause), Some(EndCause::Released));
        assert_eq!(w.row(&other).session.ended.map(|e| e.cause), Some(EndCause::Lost));
        let charge = session_charge_micros(60_000, session_reservation_micros(30));
        assert_eq!(w.balance(), (CREDIT - charge, 0));
    }

    #[tokio::test]
    async fn a_task_that_exits_without_an_end_loses_its_session_at_once() {
        let w = world();
        let (id, ended) = w.lease(30).await;
        w.clock.set(T0.plus_ms(2_000));
        w.driver.task_exited(&id).await;
        assert_eq!(w.row(&id).session.ended, Some(Ended { cause: EndCause::Lost, at: T0.plus_ms(2_000) }));
        assert_eq!(w.balance(), (CREDIT, 0));
        assert!(*ended.borrow());
        assert_eq!(w.due_at(&id), None);
    }

    #[tokio::test]
    async fn recovery_fires_what_fell_due_while_the_last_run_was_alive_and_loses_the_rest_at_its_heartbeat() {
        let w = world();
        let (expired, _) = w.lease(1).await;
        let (running, _) = w.lease(30).await;
        for id in [&expired, &running] {
            w.driver.apply(id, Event::Ready, T0.plus_ms(10_000)).await.unwrap();
        }
        // The last run's heartbeat was 70 s in, past the first one's expiry; restarted an hour later.
        w.clock.set(T0.plus_ms(3_600_000));
        w.driver.recover("n1", Some(T0.plus_ms(70_000))).await;
        assert_eq!(w.row(&expired).session.ended, Some(Ended { cause: EndCause::Expired, at: T0.plus_ms(60_000) }));
        assert_eq!(w.row(&running).session.ended, Some(Ended { cause: EndCause::Lost, at: T0.plus_ms(70_000) }));
        let charged = session_charge_micros(50_000, session_reservation_micros(1))
            + session_charge_micros(60_000, session_reservation_micros(30));
        assert_eq!(w.balance(), (CREDIT - charged, 0));
    }

    #[tokio::test]
    async fn a_failed_step_writes_nothing_and_stops_nothing() {
        let w = world();
        let (id, ended) = w.lease(30).await;
        // Expire before expiresAt is refused: no ledger row, no stop, the due time kept.
        let early = w.driver.apply(&id, Event::Expire, T0.plus_ms(1_000)).await;
        assert!(matches!(early, Err(SessionError::Transition(TransitionError::NotDue(_)))), "{early:?}");
        assert_eq!(w.balance(), (CREDIT, session_reservation_micros(30)));
        assert!(!*ended.borrow());
        assert_eq!(w.due_at(&id), Some(T0.plus_ms(LAUNCH_DEADLINE_MS).0));
    }
}
