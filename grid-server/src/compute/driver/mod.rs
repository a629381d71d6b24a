//! The job driver: every change of an analytical job goes through here.
//!
//! `apply` is one write transaction: load the job, `grid_core::job::apply`
//! the event, execute the effects it returns for the transaction
//! (`execute_in_tx`: take or settle the money), store the machine with its
//! next due time (`due_at`, from `Job::next_due`). The machine returns its
//! effects split by when they happen (`job::Effects`), and each half has one
//! executor, an exhaustive `match` with no `_` arm, so a new effect does not
//! compile until its half executes it. `execute_after_commit` then carries
//! out the effects outside the database:
//! start an attempt (pull, make its scratch, create, start, then supervise
//! the container until it exits, evicting it when its scratch outgrows its
//! ephemeral storage), stop one by its recorded container name, publish a
//! log (and remove the container and its scratch), apply a replay. The
//! scheduler, attempt supervision, reconciliation, the due-time loop
//! (`due::DueTimes`) and the HTTP handlers all go through `step` (apply, then
//! execute). An attempt's `/tmp` is `scratch`: a directory on this node's
//! disk, made, measured and removed here.
//!
//! This file holds the driver, the transition (`create`, `transition`,
//! `execute_in_tx`, `settle`; `JobDriver::apply`, `step`, `submit`,
//! `cancel`, `retry`), both executors, the scheduler's pass and the due
//! times (`fire`, `DueTimes`). Its children hold further `impl JobDriver`
//! blocks: one attempt, from its start to its end, and its stops
//! (`attempt.rs`); reconciliation with the engine and with other nodes
//! (`reconcile.rs`); an ended attempt's log and scratch (`logs.rs`).
//!
//! **Times:** an event the engine reports carries the engine's time
//! (StartedAt, FinishedAt); a due event carries its due time, not the time
//! it fired, so a deadline fired late (after a restart) still ends the
//! attempt at its deadline; everything else takes the driver's clock.

mod attempt;
mod logs;
mod reconcile;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::store::Conn;
use futures_util::future::BoxFuture;
use grid_core::error::ApiError;
use grid_core::job::{self, AttemptCharge, Event, Outcome, OutsideEffect, TransitionError, TxEffect};
use grid_core::ledger::{self, EntryKind};
use grid_core::pricing;
use grid_core::time::Millis;
use grid_core::wire::job::{JobPhase, JobSubmission};
use tokio::sync::Notify;

use super::engine::{Engine, EngineError};
use super::scratch::Scratch;
use crate::clock::Clock;
use crate::due::DueTimes;
use crate::peers::Peers;
use crate::store::accounts::{self, Caller, Entry};
use crate::store::jobs::{self, JobError, JobRow};
use crate::store::{Store, StoreError, StoreResult};

/// What the grid gives analytical jobs at once.
#[derive(Debug, Clone, Copy)]
pub struct Capacity {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
}

/// What a driver is built from.
pub struct DriverParts {
    pub store: Store,
    pub engine: Arc<dyn Engine>,
    pub clock: Arc<dyn Clock>,
    pub logs_dir: PathBuf,
    /// Every attempt's `/tmp` on this node's disk.
    pub scratch: Scratch,
    pub capacity: Capacity,
    /// Wakes the due-time loop when a due time is set.
    pub due_wake: Arc<Notify>,
    /// This node's name: jobs it provisions run on its engine.
    pub node: Arc<str>,
    /// The other nodes: a stop for an attempt another node's engine runs
    /// is sent there.
    pub peers: Arc<Peers>,
}

/// A handle: clones share everything.
#[derive(Clone)]
pub struct JobDriver {
    store: Store,
    engine: Arc<dyn Engine>,
    clock: Arc<dyn Clock>,
    logs_dir: PathBuf,
    scratch: Arc<Scratch>,
    capacity: Capacity,
    due_wake: Arc<Notify>,
    node: Arc<str>,
    peers: Arc<Peers>,
    scheduler_wake: Arc<Notify>,
    /// Records and the engine's containers agree (set once reconciled).
    reconciled: Arc<AtomicBool>,
}

#[derive(Debug, thiserror::Error)]
pub enum AttemptError {
    #[error(transparent)]
    Job(#[from] JobError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("job scratch: {0}")]
    Scratch(#[from] std::io::Error),
}

/// `grid-<jobId>-<attempt>`.
pub fn container_name(job_id: &str, attempt: u32) -> String {
    format!("grid-{job_id}-{attempt}")
}

/// The attempt's container as recorded when it was created (its name
/// otherwise: a container not created yet is not found under it either).
pub fn recorded_container(row: &JobRow, attempt: u32) -> String {
    row.executors.get(&attempt).map_or_else(|| container_name(&row.id, attempt), |e| e.container_name.clone())
}

/// Applies `event` at `at` to the stored job and writes what follows from
/// it, all in `tx`: a retry's reservation (billed to `payer`, the job's own
/// key otherwise), the settlement of a finished reservation, the machine and
/// its next due time. Answers the job as saved and the effects outside the
/// database, for `JobDriver::execute_after_commit` once `tx` commits.
pub fn transition(
    tx: &Conn,
    id: &str,
    event: Event,
    at: Millis,
    payer: Option<&Caller>,
) -> Result<(JobRow, Vec<OutsideEffect>), JobError> {
    let row = jobs::load_for_step(tx, id)?.ok_or_else(|| StoreError::NotFound(format!("job {id}")))?;
    transition_row(tx, row, event, at, payer)
}

/// The machine's first step (`grid_core::job::submit`), in `tx`: stores the
/// job `caller` submitted with its first reservation, billed to `caller`.
/// Answers the job and whether it was created now: an `idempotencyKey`
/// already used answers its job (`false`, nothing reserved), or
/// IDEMPOTENCY_CONFLICT for another body.
pub fn create(
    tx: &Conn,
    caller: &Caller,
    sub: &JobSubmission,
    body: &serde_json::Value,
    image_digest: &str,
    at: Millis,
) -> Result<(JobRow, bool), JobError> {
    // The account first: its idempotency keys and its credit are checked
    // below, and every reservation of the account locks it first.
    accounts::lock_account(tx, &caller.account_id)?;
    if let Some((row, hash)) = jobs::find_by_idempotency_key(tx, &caller.account_id, &sub.idempotency_key)? {
        if hash != jobs::body_hash(sub) {
            return Err(TransitionError::Refused(ApiError::IdempotencyConflict).into());
        }
        return Ok((row, false));
    }
    let Outcome { job, effects } = job::submit(sub.retries, sub.running_deadline_seconds, at);
    let mut row = jobs::insert(tx, caller, sub, body, image_digest, &job, at)?;
    execute_in_tx(tx, &mut row, &effects.in_tx, at, Some(caller))?;
    row.job = job;
    jobs::save(tx, &row, at)?;
    Ok((row, true))
}

/// Load → apply → execute (in `tx`) → save.
fn transition_row(
    tx: &Conn,
    mut row: JobRow,
    event: Event,
    at: Millis,
    payer: Option<&Caller>,
) -> Result<(JobRow, Vec<OutsideEffect>), JobError> {
    let Outcome { job, effects } = job::apply(&row.job, event, at)?;
    let ended =
        |j: &grid_core::job::Job| j.current_attempt().and_then(|a| a.termination.as_ref()).map(|t| t.reason.clone());
    if let (None, Some(reason)) = (ended(&row.job), ended(&job)) {
        crate::metrics::get().job_attempts_ended.with_label_values(&[reason.as_str()]).inc();
    }
    execute_in_tx(tx, &mut row, &effects.in_tx, at, payer)?;
    row.job = job;
    jobs::save(tx, &row, at)?;
    Ok((row, effects.after_commit))
}

/// The one executor of the effects written in a transition's transaction:
/// the money. `row` is the job before the transition (a settlement prices
/// the attempt by the reservation it holds).
fn execute_in_tx(
    tx: &Conn,
    row: &mut JobRow,
    effects: &[TxEffect],
    at: Millis,
    payer: Option<&Caller>,
) -> Result<(), JobError> {
    for effect in effects {
        match effect {
            TxEffect::Reserve { .. } => {
                let amount = jobs::attempt_reservation(&row.submission()?);
                let owner =
                    Caller { account_id: row.account_id.clone(), key_id: row.key_id.clone(), ..Default::default() };
                row.reservations += 1;
                row.reserved_micros = amount;
                row.reservation_day = at.utc_day();
                accounts::reserve(tx, payer.unwrap_or(&owner), amount, &row.reservation_subject(), at)?;
            }
            TxEffect::Settle { charge } => settle(tx, row, *charge, at)?,
        }
    }
    Ok(())
}

/// Charges an attempt's run time (capped by the pricing rules) and releases
/// the rest of the open reservation.
fn settle(tx: &Conn, row: &JobRow, charge: Option<AttemptCharge>, at: Millis) -> StoreResult<()> {
    let used = charge.map_or(0, |c| {
        pricing::job_attempt_charge_micros(
            row.cpu_millis,
            row.memory_bytes,
            c.run_millis,
            row.job.running_deadline_seconds,
            row.reserved_micros,
        )
    });
    let (charged, released) = ledger::settle(row.reserved_micros, used);
    let subject = row.reservation_subject();
    for (kind, amount) in [(EntryKind::Charge, charged), (EntryKind::Release, released)] {
        if amount > 0 {
            let e = Entry {
                account_id: &row.account_id,
                key_id: row.key_id.as_deref(),
                kind,
                amount,
                subject: Some(&subject),
                reservation_day: Some(row.reservation_day),
            };
            accounts::append(tx, &e, at)?;
        }
    }
    Ok(())
}

impl JobDriver {
    pub fn new(p: DriverParts) -> JobDriver {
        JobDriver {
            store: p.store,
            engine: p.engine,
            clock: p.clock,
            logs_dir: p.logs_dir,
            scratch: Arc::new(p.scratch),
            capacity: p.capacity,
            due_wake: p.due_wake,
            node: p.node,
            peers: p.peers,
            scheduler_wake: Arc::new(Notify::new()),
            reconciled: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether job tracking has caught up with the engine since start.
    pub fn tracking_ready(&self) -> bool {
        self.reconciled.load(Ordering::Relaxed)
    }

    pub fn wake_scheduler(&self) {
        self.scheduler_wake.notify_one();
    }

    /// Resolves when `wake_scheduler` was called (since the last time).
    pub async fn scheduler_woken(&self) {
        self.scheduler_wake.notified().await
    }

    async fn load(&self, id: &str) -> Result<JobRow, StoreError> {
        let jid = id.to_string();
        self.store.read(move |c| jobs::load(c, &jid)).await?.ok_or_else(|| StoreError::NotFound(format!("job {id}")))
    }

    /// One write transaction (`transition`); nothing outside the database
    /// is done yet.
    pub async fn apply(
        &self,
        id: &str,
        event: Event,
        at: Millis,
        payer: Option<Caller>,
    ) -> Result<(JobRow, Vec<OutsideEffect>), JobError> {
        let jid = id.to_string();
        // Ordered by rows (docs/scale-out.md "Locking"): the step locks its
        // job's row, and a retry's reservation the account's.
        let (row, effects) = self.store.write_rows(move |tx| transition(tx, &jid, event, at, payer.as_ref())).await?;
        if row.job.next_due().is_some() {
            self.due_wake.notify_one();
        }
        Ok((row, effects))
    }

    /// POST /jobs: `create` in one transaction, refused with `refusal` (the
    /// reservation and the insert rolled back) when a new job was to be
    /// created; then the scheduler is woken. Answers the job and whether it
    /// was created now.
    pub async fn submit(
        &self,
        caller: &Caller,
        sub: JobSubmission,
        body: serde_json::Value,
        image_digest: String,
        refusal: Option<ApiError>,
    ) -> Result<(JobRow, bool), JobError> {
        let (caller, at) = (caller.clone(), self.clock.now());
        let (row, created) = self
            .store
            .write_rows(move |tx| match (create(tx, &caller, &sub, &body, &image_digest, at)?, refusal) {
                ((_, true), Some(refusal)) => Err(JobError::from(TransitionError::Refused(refusal))),
                (created, _) => Ok(created),
            })
            .await?;
        if created {
            tracing::info!(job = %row.id, "job accepted");
            self.after(&row, vec![]).await;
        }
        Ok((row, created))
    }

    /// `apply`, then `execute`. Answers the job as `apply` saved it.
    pub async fn step(&self, id: &str, event: Event, at: Millis) -> Result<JobRow, JobError> {
        self.step_as(id, event, at, None).await
    }

    async fn step_as(&self, id: &str, event: Event, at: Millis, payer: Option<Caller>) -> Result<JobRow, JobError> {
        let (row, effects) = self.apply(id, event, at, payer).await?;
        self.after(&row, effects).await;
        Ok(row)
    }

    /// Executes what a committed transition left to do; the scheduler looks
    /// again when the job holds no container (capacity freed, or queued).
    async fn after(&self, row: &JobRow, effects: Vec<OutsideEffect>) {
        self.execute_after_commit(row, effects).await;
        if !matches!(row.job.phase, JobPhase::Provisioning | JobPhase::Running) {
            self.wake_scheduler();
        }
    }

    /// POST /jobs/{id}/cancel: the container, if any, is stopped before this
    /// answers.
    pub async fn cancel(&self, id: &str) -> Result<JobRow, JobError> {
        self.step(id, Event::Cancel, self.clock.now()).await
    }

    /// POST /jobs/{id}/retry, the new reservation billed to `payer`.
    pub async fn retry(&self, id: &str, payer: &Caller) -> Result<JobRow, JobError> {
        self.step_as(id, Event::Retry, self.clock.now(), Some(payer.clone())).await
    }

    /// The one executor of the effects that follow a committed transition.
    /// Failures are logged: the transition stands, and what it left undone
    /// is picked up by the due-time loop (replays), by supervision (a
    /// recorded stop) or by reconciliation on the next start.
    fn execute_after_commit<'a>(&'a self, row: &'a JobRow, effects: Vec<OutsideEffect>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            for effect in effects {
                match effect {
                    OutsideEffect::StartContainer { attempt } => self.spawn_attempt(&row.id, attempt, None),
                    OutsideEffect::StopContainer { attempt } => self.stop_where_it_runs(row, attempt).await,
                    OutsideEffect::PublishLog { attempt } => self.publish(row, attempt).await,
                    OutsideEffect::ReplayDue => match self.step(&row.id, Event::Replay, self.clock.now()).await {
                        Ok(_) => tracing::info!(job = %row.id, "evicted attempt replayed"),
                        Err(e) => {
                            tracing::warn!(job = %row.id, error = %e, "replay not applied; its due time retries it")
                        }
                    },
                }
            }
        })
    }

    /// Moves accepted jobs into the queue and starts queued ones, higher
    /// priority first then older, while their requests fit the grid's
    /// capacity. Order is strict: a job that does not fit holds back the
    /// ones behind it, so large jobs are not starved by a stream of small
    /// ones.
    pub async fn schedule_once(&self) -> Result<(), JobError> {
        let accepted = self.store.read(|c| jobs::ids_in_phase(c, JobPhase::Accepted)).await?;
        for id in accepted {
            self.step(&id, Event::Enqueue, self.clock.now()).await?;
        }
        if !self.engine.available() || !self.tracking_ready() {
            return Ok(());
        }
        // A pass with nothing queued writes nothing: a read, not a write
        // transaction in the grid-wide order every second on every node
        // (docs/scale-out.md "Locking"). The write reads the queue again.
        if self.store.read(|c| jobs::ids_in_phase(c, JobPhase::Queued)).await?.is_empty() {
            return Ok(());
        }
        let (cap, now, node) = (self.capacity, self.clock.now(), self.node.clone());
        let provisioned = self
            .store
            // Ordered by rows: this node's row is locked while its capacity is
            // counted and spent, and each job's as it is placed (in queue
            // order, as every node's pass locks them); a job another node
            // placed meanwhile is no longer queued once its lock is ours.
            .write_rows(move |tx| {
                crate::store::nodes::lock(tx, &node)?;
                let (mut cpu, mut mem) = jobs::capacity_in_use(tx, &node)?;
                let mut provisioned = vec![];
                for id in jobs::ids_in_phase(tx, JobPhase::Queued)? {
                    let Some(mut row) = jobs::load_for_step(tx, &id)? else { continue };
                    if row.job.phase != JobPhase::Queued {
                        continue;
                    }
                    if cpu + row.cpu_millis > cap.cpu_millis || mem + row.memory_bytes > cap.memory_bytes {
                        break;
                    }
                    // Placed here: saved with the step.
                    row.node = Some(node.to_string());
                    match transition_row(tx, row, Event::Provision, now, None) {
                        Ok((row, effects)) => {
                            cpu += row.cpu_millis;
                            mem += row.memory_bytes;
                            provisioned.push((row, effects));
                        }
                        Err(JobError::Store(e)) => return Err(e),
                        Err(e) => tracing::error!(job = %id, error = %e, "could not provision"),
                    }
                }
                Ok(provisioned)
            })
            .await?;
        for (row, effects) in provisioned {
            self.execute_after_commit(&row, effects).await;
        }
        Ok(())
    }
    /// Applies the job's due event at its due time, if it is due by `now`,
    /// in one transaction with the check.
    async fn fire(&self, id: &str, now: Millis) -> Result<(), JobError> {
        let jid = id.to_string();
        let fired = self
            .store
            .write_rows(move |tx| {
                let row = jobs::load_for_step(tx, &jid)?.ok_or_else(|| StoreError::NotFound(format!("job {jid}")))?;
                match row.job.next_due() {
                    Some(due) if due.at <= now => transition_row(tx, row, due.event, due.at, None).map(Some),
                    // The stored due time was stale: saved again with the right one.
                    _ => {
                        jobs::save(tx, &row, now)?;
                        Ok(None)
                    }
                }
            })
            .await?;
        if let Some((row, effects)) = fired {
            tracing::info!(job = %id, phase = row.job.phase.as_str(), "due time fired");
            self.after(&row, effects).await;
        }
        Ok(())
    }
}

impl DueTimes for JobDriver {
    fn fire_due(&self, now: Millis) -> BoxFuture<'_, Option<Millis>> {
        Box::pin(async move {
            if !self.tracking_ready() {
                return None;
            }
            let due = match {
                let node = self.node.clone();
                self.store.read(move |c| jobs::due_ids(c, now, &node))
            }
            .await
            {
                Ok(ids) => ids,
                Err(e) => {
                    tracing::warn!(error = %e, "due jobs unreadable; trying again");
                    return None;
                }
            };
            for id in due {
                if let Err(e) = self.fire(&id, now).await {
                    tracing::warn!(job = %id, error = %e, "due event not applied; trying again");
                }
            }
            {
                let node = self.node.clone();
                self.store.read(move |c| jobs::next_due_after(c, now, &node))
            }
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "next due job unreadable");
                None
            })
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::attempt::record_executor;
    use super::*;
    use crate::capture::files;
    use crate::clock::VirtualClock;
    use crate::compute::engine::fake::FakeEngine;
    use grid_core::wire::job::TerminationReason;
    use grid_core::wire::job_record::Executor;
    use serde_json::json;

    const T0: Millis = Millis(1_800_000_000_000);
    /// The reservation (and the most an attempt is charged) of 500m and
    /// 256Mi for a 60 s deadline: 21,600 µ€/h × 60 s.
    const RESERVED_60S: i64 = 360;

    /// A job driver on node `n1` over a temp store, a virtual clock and the
    /// fake engine (also for the node takeover's tests, `nodes.rs`).
    pub(crate) struct Grid {
        _dir: tempfile::TempDir,
        pub(crate) store: Store,
        pub(crate) clock: Arc<VirtualClock>,
        engine: Arc<FakeEngine>,
        driver: JobDriver,
        pub(crate) caller: Caller,
    }

    impl Grid {
        pub(crate) fn new() -> Grid {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open(dir.path(), Duration::from_secs(5)).unwrap();
            let clock = Arc::new(VirtualClock::at(T0));
            let engine = FakeEngine::new(clock.clone());
            let caller = store
                .write_blocking(|tx| {
                    let id = accounts::create_account(tx, "t", 10_000_000, T0)?;
                    Ok::<_, StoreError>(Caller { account_id: id, ..Default::default() })
                })
                .unwrap();
            let driver = Grid::driver_on(&store, &clock, &engine, dir.path());
            Grid { _dir: dir, store, clock, engine, driver, caller }
        }

        /// Another driver on the same database and engine: what a restarted
        /// server (or another process) has, without the first one's tasks.
        fn driver_on(
            store: &Store,
            clock: &Arc<VirtualClock>,
            engine: &Arc<FakeEngine>,
            dir: &std::path::Path,
        ) -> JobDriver {
            JobDriver::new(DriverParts {
                store: store.clone(),
                engine: engine.clone(),
                clock: clock.clone(),
                logs_dir: dir.join("logs"),
                scratch: Scratch::new(dir.join("job-scratch")),
                capacity: Capacity { cpu_millis: 4_000, memory_bytes: 8 << 30 },
                due_wake: Arc::new(Notify::new()),
                node: "n1".into(),
                peers: Arc::new(Peers::new(store.clone(), "credential".into())),
            })
        }

        /// Another node's driver on the same store and engine.
        pub(crate) fn node_driver(&self, node: &str) -> JobDriver {
            JobDriver::new(DriverParts {
                store: self.store.clone(),
                engine: self.engine.clone(),
                clock: self.clock.clone(),
                logs_dir: self._dir.path().join("logs"),
                scratch: Scratch::new(self._dir.path().join("job-scratch")),
                capacity: Capacity { cpu_millis: 4_000, memory_bytes: 8 << 30 },
                due_wake: Arc::new(Notify::new()),
                node: node.into(),
                peers: Arc::new(Peers::new(self.store.clone(), "credential".into())),
            })
        }

        /// Where the attempt's scratch is (or was).
        fn scratch_of(&self, id: &str, attempt: u32) -> std::path::PathBuf {
            self._dir.path().join("job-scratch").join(format!("{id}-{attempt}"))
        }

        fn restarted(&self) -> JobDriver {
            Grid::driver_on(&self.store, &self.clock, &self.engine, self._dir.path())
        }

        /// POST /jobs of `command` with 500m, 256Mi, a 60 s deadline and `retries`.
        fn submit(&self, retries: u32) -> String {
            let body = crate::compute::test_job_body(
                &["sleep", "600"],
                retries,
                json!({}),
                &format!("k-{}", self.clock.now().0),
            );
            let sub = grid_core::validate::job::validate(&body).unwrap();
            let (caller, now) = (self.caller.clone(), self.clock.now());
            self.store
                .write_blocking(|tx| create(tx, &caller, &sub, &body, "127.0.0.1:5000/tools/busybox@sha256:ab", now))
                .unwrap()
                .0
                .id
        }

        pub(crate) fn row(&self, id: &str) -> JobRow {
            self.store.read_blocking(|c| jobs::load(c, id)).unwrap().unwrap()
        }

        fn due_at(&self, id: &str) -> Option<i64> {
            self.store
                .read_blocking(|c| c.query_row("SELECT due_at FROM jobs WHERE id = ?1", [id], |r| r.get(0)))
                .unwrap()
        }

        /// (kind, amount) of the job's ledger entries, in order.
        fn ledger(&self, id: &str) -> Vec<(String, i64)> {
            self.store
                .read_blocking(|c| {
                    c.query_map(
                        "SELECT kind, amount FROM ledger WHERE subject LIKE ?1 ORDER BY id",
                        [format!("{id}/%")],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                })
                .unwrap()
        }

        /// Polls the job (its attempt's tasks run on the runtime) until `done`.
        pub(crate) async fn until(&self, id: &str, what: &str, done: impl Fn(&JobRow) -> bool) -> JobRow {
            for _ in 0..2_000 {
                let row = self.row(id);
                if done(&row) {
                    return row;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            panic!("job {id} never {what}: {:?}", self.row(id).job)
        }

        async fn phase(&self, id: &str, phase: JobPhase) -> JobRow {
            self.until(id, phase.as_str(), |r| r.job.phase == phase).await
        }

        /// Submitted, scheduled and started by the driver.
        pub(crate) async fn running(&self, retries: u32) -> String {
            self.driver.reconcile().await.unwrap();
            let id = self.submit(retries);
            self.driver.schedule_once().await.unwrap();
            self.phase(&id, JobPhase::Running).await;
            id
        }

        /// Walked to RUNNING through `apply` alone, with its container
        /// started in the engine: a job whose supervising task is gone.
        async fn running_unsupervised(&self) -> String {
            let id = self.submit(0);
            let now = self.clock.now();
            for e in [Event::Enqueue, Event::Provision] {
                self.driver.apply(&id, e, now, None).await.unwrap();
            }
            let c = self.engine.run(&container_name(&id, 1), &id, 1);
            let executor =
                Executor { engine: "docker".into(), container_name: c.name.clone(), container_id: Some(c.id.clone()) };
            let jid = id.clone();
            self.store.write_blocking(move |tx| record_executor(tx, &jid, 1, executor, now)).unwrap();
            self.driver.apply(&id, Event::ContainerStarted, c.started_at.unwrap(), None).await.unwrap();
            id
        }
    }

    fn reason(row: &JobRow) -> TerminationReason {
        row.job.termination().expect("termination").reason.clone()
    }

    #[tokio::test]
    async fn provision_starts_the_container_and_stores_its_deadline_as_due() {
        let g = Grid::new();
        let id = g.running(0).await;
        let name = container_name(&id, 1);
        let c = g.engine.container(&name).expect("container created");
        assert!(c.running);
        assert_eq!(c.image, "127.0.0.1:5000/tools/busybox@sha256:ab");
        assert_eq!((c.job_id.as_str(), c.attempt), (id.as_str(), 1));
        let row = g.row(&id);
        assert_eq!(row.job.attempts[0].started_at, c.started_at);
        assert_eq!(row.executors[&1].container_name, name);
        assert_eq!(g.due_at(&id), Some(T0.plus_ms(60_000).0));
        // Nothing is due yet: the due pass fires nothing and names the deadline.
        assert_eq!(g.driver.fire_due(T0.plus_ms(59_999)).await, Some(T0.plus_ms(60_000)));
        assert_eq!(g.row(&id).job.phase, JobPhase::Running);
        assert!(g.engine.kills().is_empty());
    }

    #[tokio::test]
    async fn a_deadline_fired_late_stops_the_container_and_ends_timed_out_at_the_deadline() {
        let g = Grid::new();
        let id = g.running(0).await;
        let deadline = T0.plus_ms(60_000);
        // The due pass comes 30 s late; the kill is dated then.
        let now = g.clock.advance(90_000);
        g.driver.fire_due(now).await;
        assert_eq!(g.engine.kills(), vec![container_name(&id, 1)]);
        let row = g.phase(&id, JobPhase::TimedOut).await;
        assert_eq!(reason(&row), TerminationReason::RunningDeadlineExceeded);
        assert_eq!(row.job.termination().unwrap().exit_code, Some(137));
        let a = &row.job.attempts[0];
        assert_eq!((a.started_at, a.ended_at), (Some(T0), Some(deadline)));
        assert!(a.log_available);
        // Charged exactly the 60 s up to the deadline: all of the reservation.
        assert_eq!(g.ledger(&id), vec![("reserve".into(), RESERVED_60S), ("charge".into(), RESERVED_60S)]);
        assert_eq!(g.due_at(&id), None);
        // The container is removed after the commit that ended the attempt.
        for _ in 0..2_000 {
            if g.engine.container(&container_name(&id, 1)).unwrap().removed {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("the timed-out attempt's container was never removed");
    }

    #[tokio::test]
    async fn a_deadline_passed_while_the_server_was_away_ends_at_the_deadline_after_the_restart() {
        let g = Grid::new();
        let id = g.running_unsupervised().await;
        g.clock.advance(300_000);
        let driver = g.restarted();
        // Before reconciliation nothing fires: the engine's facts come first.
        assert_eq!(driver.fire_due(g.clock.now()).await, None);
        assert_eq!(g.row(&id).job.phase, JobPhase::Running);
        driver.reconcile().await.unwrap();
        driver.fire_due(g.clock.now()).await;
        let row = g.phase(&id, JobPhase::TimedOut).await;
        assert_eq!(row.job.attempts[0].ended_at, Some(T0.plus_ms(60_000)));
        assert_eq!(g.ledger(&id), vec![("reserve".into(), RESERVED_60S), ("charge".into(), RESERVED_60S)]);
    }

    #[tokio::test]
    async fn a_container_that_exits_is_published_and_charged_its_engine_run_time() {
        let g = Grid::new();
        let id = g.running(0).await;
        g.clock.advance(30_000);
        g.engine.exit(&container_name(&id, 1), 0);
        let row = g.phase(&id, JobPhase::Succeeded).await;
        assert_eq!(row.job.attempts[0].ended_at, Some(T0.plus_ms(30_000)));
        let logs = g.store.read_blocking(|c| jobs::logs(c, &id)).unwrap();
        assert_eq!(logs.len(), 1);
        let bytes = files::read_checked(&g._dir.path().join("logs"), &logs[0].storage_name, &logs[0].sha256).unwrap();
        assert_eq!(bytes, b"sleep 600");
        // 21,600 µ€/h × 30 s = 180 µ€; the rest is released.
        assert_eq!(g.ledger(&id), vec![("reserve".into(), 360), ("charge".into(), 180), ("release".into(), 180)]);
    }

    #[tokio::test]
    async fn cancel_stops_the_container_by_its_recorded_name_with_no_task_supervising_it() {
        let g = Grid::new();
        let id = g.running_unsupervised().await;
        let row = g.driver.cancel(&id).await.unwrap();
        assert!(row.job.cancel_requested);
        let name = container_name(&id, 1);
        assert_eq!(g.engine.kills(), vec![name.clone()]);
        assert!(!g.engine.container(&name).unwrap().running);
        // The exit is found when supervision resumes (here: on reconciliation).
        g.clock.advance(1_000);
        g.restarted().reconcile().await.unwrap();
        let row = g.phase(&id, JobPhase::Cancelled).await;
        assert_eq!(reason(&row), TerminationReason::Cancelled);
    }

    #[tokio::test]
    async fn cancel_while_supervised_ends_cancelled() {
        let g = Grid::new();
        let id = g.running(0).await;
        g.clock.advance(10_000);
        g.driver.cancel(&id).await.unwrap();
        let row = g.phase(&id, JobPhase::Cancelled).await;
        assert_eq!(row.job.attempts[0].ended_at, Some(T0.plus_ms(10_000)));
        assert_eq!(g.ledger(&id), vec![("reserve".into(), 360), ("charge".into(), 60), ("release".into(), 300)]);
    }

    #[tokio::test]
    async fn an_eviction_is_replayed_through_the_executor() {
        let g = Grid::new();
        let id = g.running(1).await;
        g.clock.advance(5_000);
        // Killed from outside the grid: the attempt is evicted, its replay applied at once.
        g.engine.exit(&container_name(&id, 1), 137);
        let row = g.until(&id, "replayed", |r| r.job.attempt_number() == 2).await;
        assert_eq!(row.job.phase, JobPhase::Queued);
        assert_eq!(row.job.attempts[0].termination.as_ref().unwrap().reason, TerminationReason::PlatformEvicted);
        assert_eq!(g.due_at(&id), None);
        // The replay holds the same reservation: nothing settled yet.
        assert_eq!(g.ledger(&id), vec![("reserve".into(), 360)]);
    }

    /// A dead node's attempt is taken over by another node: evicted (free),
    /// replayed within its retries; another node's running jobs are not
    /// this node's to take over, and their deadlines not its to fire.
    #[tokio::test]
    async fn a_dead_nodes_attempt_is_evicted_and_replayed_by_the_node_taking_over() {
        let g = Grid::new();
        let id = g.running(1).await;
        let other = g.node_driver("n2");
        assert_eq!(other.take_over("n3").await.unwrap(), 0);
        // The deadline is n1's to fire: n2 sees nothing due.
        assert_eq!(
            g.store.read(move |c| jobs::due_ids(c, Millis(i64::MAX), "n2")).await.unwrap(),
            Vec::<String>::new()
        );
        g.clock.advance(5_000);
        assert_eq!(other.take_over("n1").await.unwrap(), 1);
        let row = g.until(&id, "replayed", |r| r.job.attempt_number() == 2).await;
        assert_eq!(row.job.phase, JobPhase::Queued);
        assert_eq!(row.job.attempts[0].termination.as_ref().unwrap().reason, TerminationReason::PlatformEvicted);
        assert_eq!(g.ledger(&id), vec![("reserve".into(), 360)]);
    }

    #[tokio::test]
    async fn an_owed_replay_is_applied_by_the_due_pass_when_no_task_applied_it() {
        let g = Grid::new();
        g.driver.reconcile().await.unwrap();
        let id = g.submit(1);
        let now = g.clock.now();
        // Evicted while provisioning, then the process died before the replay.
        for e in [Event::Enqueue, Event::Provision, Event::Evicted] {
            g.driver.apply(&id, e, now, None).await.unwrap();
        }
        assert!(g.row(&id).job.replay_pending());
        assert_eq!(g.due_at(&id), Some(now.0));
        let later = g.clock.advance(7_000);
        assert_eq!(g.driver.fire_due(later).await, None);
        let row = g.row(&id);
        assert_eq!((row.job.phase, row.job.attempt_number()), (JobPhase::Queued, 2));
        // Applied at its due time.
        assert_eq!(row.job.phase_timestamps[&JobPhase::Queued], now);
        assert_eq!(g.due_at(&id), None);
    }

    #[tokio::test]
    async fn a_failed_start_is_a_free_platform_failure() {
        let g = Grid::new();
        g.driver.reconcile().await.unwrap();
        g.engine.fail_starts();
        let id = g.submit(0);
        g.driver.schedule_once().await.unwrap();
        let row = g.phase(&id, JobPhase::Failed).await;
        assert_eq!(reason(&row), TerminationReason::PlatformStartFailed);
        assert_eq!(g.ledger(&id), vec![("reserve".into(), 360), ("release".into(), 360)]);
        let c = g.engine.container(&container_name(&id, 1)).unwrap();
        assert!(c.removed);
        assert_eq!(c.scratch, g.scratch_of(&id, 1));
        assert!(!c.scratch.exists(), "the scratch of an attempt that never ran is removed");
    }

    #[tokio::test]
    async fn an_attempts_scratch_is_bound_for_its_container_and_removed_once_it_ends() {
        use std::os::unix::fs::MetadataExt;
        let g = Grid::new();
        let id = g.running(0).await;
        let c = g.engine.container(&container_name(&id, 1)).unwrap();
        assert_eq!(c.scratch, g.scratch_of(&id, 1));
        let m = std::fs::symlink_metadata(&c.scratch).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (65534, 65534, 0o700));
        std::fs::write(c.scratch.join("f"), b"data").unwrap();
        g.engine.exit(&c.name, 0);
        g.phase(&id, JobPhase::Succeeded).await;
        g.until(&id, "had its scratch removed", |_| !c.scratch.exists()).await;
    }

    /// The old writable-layer eviction, on the scratch: over 256Mi less the
    /// engine log's 32 MiB, the grid kills the container and the attempt
    /// ends PLATFORM_EVICTED (free), its scratch removed.
    #[tokio::test]
    async fn a_scratch_past_its_ephemeral_storage_evicts_the_attempt() {
        let g = Grid::new();
        let id = g.running(0).await;
        let container = g.engine.container(&container_name(&id, 1)).unwrap().id;
        let scratch = g.scratch_of(&id, 1);
        // 225 MiB of data (not a hole: blocks on disk), under a directory.
        std::fs::create_dir(scratch.join("d")).unwrap();
        let chunk = vec![1u8; 1024 * 1024];
        let mut f = std::fs::File::create(scratch.join("d/big")).unwrap();
        for _ in 0..225 {
            std::io::Write::write_all(&mut f, &chunk).unwrap();
        }
        f.sync_all().unwrap();
        drop(f);
        // Measured every 2 s.
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while g.row(&id).job.phase != JobPhase::Failed {
            assert!(std::time::Instant::now() < deadline, "never evicted: {:?}", g.row(&id).job);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(g.engine.kills(), vec![container]);
        assert_eq!(reason(&g.row(&id)), TerminationReason::PlatformEvicted);
        assert_eq!(g.ledger(&id), vec![("reserve".into(), 360), ("release".into(), 360)]);
        g.until(&id, "had its scratch removed", |_| !scratch.exists()).await;
    }

    /// A crash leaks no scratch: on start-up reconciliation every scratch
    /// but those of attempts still provisioning or running here goes.
    #[tokio::test]
    async fn reconciliation_removes_the_scratch_of_attempts_not_running() {
        let g = Grid::new();
        let id = g.running_unsupervised().await;
        let scratch = Scratch::new(g._dir.path().join("job-scratch"));
        let running = scratch.create(&id, 1, 1 << 20).unwrap();
        let older = scratch.create(&id, 0, 1 << 20).unwrap();
        let gone = scratch.create("cj_gone", 1, 1 << 20).unwrap();
        let stray = g._dir.path().join("job-scratch/stray");
        std::fs::create_dir(&stray).unwrap();
        g.restarted().reconcile().await.unwrap();
        assert!(running.exists(), "the running attempt's scratch was removed");
        assert!(!older.exists() && !gone.exists() && !stray.exists());
    }

    #[tokio::test]
    async fn retry_reserves_again_for_the_payer_in_the_transition() {
        let g = Grid::new();
        let id = g.running(0).await;
        g.clock.advance(1_000);
        g.engine.exit(&container_name(&id, 1), 3);
        g.phase(&id, JobPhase::Failed).await;
        let row = g.driver.retry(&id, &g.caller).await.unwrap();
        assert_eq!((row.job.phase, row.job.attempt_number(), row.reservations), (JobPhase::Queued, 2, 2));
        let r2: Vec<_> = g.ledger(&id).into_iter().skip(3).collect();
        assert_eq!(r2, vec![("reserve".into(), 360)]);
    }
}
