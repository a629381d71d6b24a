//! A seeded, deterministic simulation of the three drivers together (in the
//! manner of TigerBeetle's VOPR and FoundationDB's simulation testing): on a
//! virtual clock, over a real SQLite store in a temp dir, a seed draws a run
//! of operations (batches submitted, items claimed and ended, retried; jobs
//! submitted, scheduled, exited, cancelled, retried; sessions leased, made
//! ready, released, lost; time passing and due times fired; a failing
//! commit; a crash and restart of the item and session drivers, with the
//! claims of the dead process ending late). After every operation the
//! invariants of the money and the machines are read back from the store
//! (`check`). Every operation is driven until the drivers are quiet before
//! the next is drawn, so a seed is one run: a failure names its seed, and
//! `GRID_SIM_SEED=<n>` runs that seed alone.
//!
//! What it does not cover yet: a crash of the job driver (its attempt
//! tasks outlive a driver dropped in-process), PostgreSQL, several nodes.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use grid_core::catalog::{Profile, Script};
use grid_core::item::{Backoff, Failure};
use grid_core::ledger::Balance;
use grid_core::session::Event as SessionEvent;
use grid_core::time::Millis;
use grid_core::wire::batch::BatchSubmission;
use grid_core::wire::job::JobPhase;
use grid_core::wire::session::SessionSubmission;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::sync::{mpsc, Notify};

use crate::capture::driver::{AttemptEnd, ItemDriver, Wake};
use crate::clock::{Clock, VirtualClock};
use crate::compute::driver::{container_name, Capacity, DriverParts, JobDriver};
use crate::compute::engine::fake::FakeEngine;
use crate::compute::scratch::Scratch;
use crate::due::DueTimes;
use crate::peers::Peers;
use crate::sessions::driver::{SessionDriver, Start};
use crate::store::accounts::{self, Caller};
use crate::store::items::{ItemError, ItemRow};
use crate::store::sql::Row;
use crate::store::{Store, StoreError};

const T0: Millis = Millis(1_800_000_000_000);
const NODE: &str = "n1";
const CREDIT: i64 = 50_000_000;
/// Operations per seed.
const STEPS: usize = 60;

/// One simulated grid: the store and the three drivers on one clock.
struct Sim {
    /// The store's directory, removed with the simulation.
    _dir: tempfile::TempDir,
    store: Store,
    clock: Arc<VirtualClock>,
    caller: Caller,
    items: ItemDriver,
    sessions: SessionDriver,
    starts: mpsc::UnboundedReceiver<Start>,
    engine: Arc<FakeEngine>,
    jobs: JobDriver,
    /// What the simulation made, in the order it made it (ids are random;
    /// choices are made by position, so a seed is one run).
    item_ids: Vec<String>,
    job_ids: Vec<String>,
    session_ids: Vec<String>,
    /// Claims held by a process that crashed: their ends arrive late.
    orphaned: Vec<Arc<ItemRow>>,
    /// Items whose claim ended in an earlier operation, and the claims
    /// taken since the item's last end: at most one may store an end.
    ended_under: HashSet<(String, i64)>,
    log: Vec<String>,
}

fn starts_and_driver(store: &Store, clock: &Arc<VirtualClock>) -> (SessionDriver, mpsc::UnboundedReceiver<Start>) {
    let peers = Arc::new(Peers::new(store.clone(), "credential".into()));
    SessionDriver::new(store.clone(), clock.clone(), NODE, Duration::from_secs(30), peers)
}

fn item_driver(store: &Store, clock: &Arc<VirtualClock>) -> ItemDriver {
    let wake = Wake::default();
    ItemDriver::start(store.clone(), clock.clone(), Backoff { base_ms: 1_000 }, wake, NODE).unwrap()
}

impl Sim {
    async fn new() -> Sim {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Duration::from_secs(5)).unwrap();
        let clock = Arc::new(VirtualClock::at(T0));
        let caller = store
            .write_blocking(|tx| {
                let id = accounts::create_account(tx, "sim", CREDIT, T0)?;
                let k = accounts::create_key(tx, &id, None, false, Default::default(), T0)?;
                let offer = crate::store::nodes::Offer { sessions: 3, ..Default::default() };
                crate::store::nodes::register(tx, NODE, None, offer, T0)?;
                Ok::<_, StoreError>(Caller { account_id: id, key_id: Some(k.key_id), ..Default::default() })
            })
            .unwrap();
        let engine = FakeEngine::new(clock.clone());
        let jobs = JobDriver::new(DriverParts {
            store: store.clone(),
            engine: engine.clone(),
            clock: clock.clone(),
            logs_dir: dir.path().join("logs"),
            scratch: Scratch::new(dir.path().join("job-scratch")),
            capacity: Capacity { cpu_millis: 1_000, memory_bytes: 1 << 30 },
            due_wake: Arc::new(Notify::new()),
            node: NODE.into(),
            peers: Arc::new(Peers::new(store.clone(), "credential".into())),
        });
        let (sessions, starts) = starts_and_driver(&store, &clock);
        let items = item_driver(&store, &clock);
        // Tracking caught up with the (empty) engine: the scheduler starts.
        jobs.reconcile().await.unwrap();
        Sim {
            _dir: dir,
            store,
            clock,
            caller,
            items,
            sessions,
            starts,
            engine,
            jobs,
            item_ids: vec![],
            job_ids: vec![],
            session_ids: vec![],
            orphaned: vec![],
            ended_under: HashSet::new(),
            log: vec![],
        }
    }

    fn now(&self) -> Millis {
        self.clock.now()
    }

    fn pick<'a>(rng: &mut StdRng, ids: &'a [String]) -> Option<&'a String> {
        (!ids.is_empty()).then(|| &ids[rng.random_range(0..ids.len())])
    }

    /// One operation drawn by `rng`, driven until the drivers are quiet.
    async fn step(&mut self, rng: &mut StdRng) {
        let op = rng.random_range(0..100);
        match op {
            0..=9 => self.submit_batch(rng).await,
            10..=27 => self.claim_and_end(rng).await,
            28..=31 => {
                if let Some(id) = Sim::pick(rng, &self.item_ids).cloned() {
                    let r = self.items.retry(&self.caller.account_id, &id).await;
                    self.log.push(format!("retry item {id}: {}", r.is_ok()));
                }
            }
            32..=41 => self.pass_time(rng).await,
            42..=44 => self.failing_commit(rng).await,
            45..=47 => self.crash_and_restart().await,
            48..=53 => self.lease(rng).await,
            54..=61 => self.move_session(rng).await,
            62..=67 => self.submit_job(rng).await,
            68..=83 => self.move_job(rng).await,
            84..=88 => self.job_end_on_a_failing_store(rng).await,
            _ => self.end_orphans(rng).await,
        }
    }

    async fn submit_batch(&mut self, rng: &mut StdRng) {
        let n = rng.random_range(1..=4);
        let sub = BatchSubmission {
            urls: (0..n).map(|i| format!("http://t/{i}")).collect(),
            script: if rng.random_bool(0.5) { Script::Fetch } else { Script::Capture },
            profile: Profile::DEFAULT,
            params: Default::default(),
            priority: rng.random_bool(0.3).then_some(rng.random_range(1..5)),
            context: None,
            proxy: None,
        };
        match self.items.submit(&self.caller, sub, None, None).await {
            Ok(crate::store::idempotency::Outcome::Performed(created, _)) => {
                let batch = created.batch_id.clone();
                let mut ids = self
                    .store
                    .read(move |c| {
                        c.query_map("SELECT id FROM items WHERE batch_id = ?1 ORDER BY seq", [&batch], |r: &Row| {
                            r.get::<String>(0)
                        })
                    })
                    .await
                    .unwrap();
                self.log.push(format!("batch {} of {n}", created.batch_id));
                self.item_ids.append(&mut ids);
            }
            other => self.log.push(format!("batch refused: {:?}", other.err())),
        }
    }

    /// Claims a few items and ends each: success, a transient or a terminal
    /// failure; some claims are kept unended (their attempt still runs).
    async fn claim_and_end(&mut self, rng: &mut StdRng) {
        let claims = self.items.claim_batch(rng.random_range(1..=3), usize::MAX).await.unwrap();
        for claim in claims {
            let claim = Arc::new(claim);
            if rng.random_bool(0.15) {
                // Still running when the process crashes, if it does.
                self.orphaned.push(claim);
                continue;
            }
            self.end(claim, rng).await;
        }
    }

    async fn end(&mut self, claim: Arc<ItemRow>, rng: &mut StdRng) {
        let end = match rng.random_range(0..3) {
            0 => AttemptEnd::Succeeded(vec![]),
            1 => AttemptEnd::Failed(Failure::Transient("sim: timeout".into())),
            _ => AttemptEnd::Failed(Failure::Terminal("sim: 404".into())),
        };
        let r = self.items.finish(&claim, end).await;
        self.log.push(format!(
            "end {} (token {}): {:?}",
            claim.id,
            claim.lease_token,
            r.as_ref().map(|o| o.item.state)
        ));
        match r {
            Ok(_) => {
                assert!(
                    self.ended_under.insert((claim.id.clone(), claim.lease_token)),
                    "item {} stored two ends under one claim (token {})",
                    claim.id,
                    claim.lease_token
                );
            }
            Err(ItemError::LeaseLost(_)) => {}
            Err(e) => panic!("end of {} not stored: {e}", claim.id),
        }
    }

    /// The ends of claims of a crashed process, arriving late.
    async fn end_orphans(&mut self, rng: &mut StdRng) {
        let orphans = std::mem::take(&mut self.orphaned);
        for claim in orphans {
            self.end(claim, rng).await;
        }
    }

    /// Time passes; every driver fires what fell due, as the due loop does.
    async fn pass_time(&mut self, rng: &mut StdRng) {
        let ms = [500, 2_000, 30_000, 120_000, 1_900_000][rng.random_range(0..5)];
        let now = self.clock.advance(ms);
        self.fire(now).await;
        self.log.push(format!("+{ms} ms, due fired"));
        self.check_due_fired(now).await;
    }

    async fn fire(&self, now: Millis) {
        // A pass fires a bounded number; loop as the due loop does when
        // asked to come back at once.
        for _ in 0..16 {
            let again =
                [self.items.fire_due(now).await, self.jobs.fire_due(now).await, self.sessions.fire_due(now).await];
            if !again.iter().any(|t| t.is_some_and(|t| t <= now)) {
                break;
            }
        }
        self.quiet_jobs().await;
    }

    /// A commit that fails: every ledger write is refused for one
    /// operation (a submission, a lease, a release), which must store
    /// nothing at all.
    async fn failing_commit(&mut self, rng: &mut StdRng) {
        self.fail_ledger_writes(true).await;
        let before = self.snapshot().await;
        let what = rng.random_range(0..3);
        match what {
            0 => self.submit_batch(rng).await,
            1 => self.lease(rng).await,
            _ => self.submit_job(rng).await,
        }
        self.fail_ledger_writes(false).await;
        assert_eq!(self.snapshot().await, before, "a failed commit left writes behind (operation {what})");
        self.log.push(format!("failing commit of operation {what}: nothing stored"));
    }

    /// From `on` until called again with `false`, every ledger write fails
    /// (a trigger aborts it): a commit that fails.
    async fn fail_ledger_writes(&self, on: bool) {
        let sql = if on {
            "CREATE TRIGGER sim_fault BEFORE INSERT ON ledger BEGIN SELECT RAISE(ABORT, 'sim: injected'); END"
        } else {
            "DROP TRIGGER sim_fault"
        };
        self.store.write(move |tx| tx.execute(sql, ())).await.unwrap();
    }

    /// A running job's container exits while the store refuses the
    /// settlement its end writes: the end is stored once the store takes
    /// writes again (the driver tries again), not left for a restart.
    async fn job_end_on_a_failing_store(&mut self, rng: &mut StdRng) {
        let Some((id, attempt)) = self.running_jobs().await.into_iter().next() else { return };
        self.fail_ledger_writes(true).await;
        self.engine.exit(&container_name(&id, attempt), [0, 1][rng.random_range(0..2)]);
        // Its supervising task stores the exit (no ledger write) and starts
        // publishing, whose settlement the store refuses.
        for _ in 0..5_000 {
            if self.job(&id).await.job.phase != JobPhase::Running {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.fail_ledger_writes(false).await;
        self.quiet_jobs().await;
        let phase = self.job(&id).await.job.phase;
        assert!(phase.is_finished() || phase == JobPhase::Queued, "job {id} stuck in {}", phase.as_str());
        self.log.push(format!("job {id}: ended on a failing store, stored as {}", phase.as_str()));
    }

    async fn running_jobs(&self) -> Vec<(String, u32)> {
        self.store.read(running_jobs_in).await.unwrap()
    }

    /// Counts of every table a submission writes.
    async fn snapshot(&self) -> Vec<i64> {
        self.store
            .read(|c| {
                ["batches", "items", "jobs", "sessions", "ledger", "idempotency_keys"]
                    .iter()
                    .map(|t| c.query_row(&format!("SELECT COUNT(*) FROM {t}"), (), |r: &Row| r.get::<i64>(0)))
                    .collect()
            })
            .await
            .unwrap()
    }

    /// The process dies: its item and session drivers are gone (their
    /// claims orphaned, their browsers with them) and new ones start on
    /// the same store, recovering what the dead one left.
    async fn crash_and_restart(&mut self) {
        let last_alive = self.now();
        self.clock.advance(1_000);
        self.items = item_driver(&self.store, &self.clock);
        let (sessions, starts) = starts_and_driver(&self.store, &self.clock);
        (self.sessions, self.starts) = (sessions, starts);
        let requeued = self.items.recover().await.unwrap();
        self.sessions.recover(NODE, Some(last_alive)).await;
        self.log.push(format!("crash and restart: {requeued} items requeued"));
    }

    async fn lease(&mut self, rng: &mut StdRng) {
        let sub = SessionSubmission {
            profile: Profile::DEFAULT,
            ttl_minutes: [1, 5, 30][rng.random_range(0..3)],
            network_policy: None,
            overrides: Default::default(),
            take_over: false,
            recording: false,
            context: None,
            proxy: None,
        };
        match self
            .sessions
            .lease(&self.caller, sub, None, None, "t".into(), crate::sessions::driver::tests::lease_answer)
            .await
        {
            Ok(crate::store::idempotency::Outcome::Performed(row, _)) => {
                let start = self.starts.try_recv().expect("a lease placed here started no browser");
                assert_eq!(start.row.id, row.id);
                self.log.push(format!("lease {}", row.id));
                self.session_ids.push(row.id);
            }
            other => self.log.push(format!("lease refused: {:?}", other.err())),
        }
    }

    async fn move_session(&mut self, rng: &mut StdRng) {
        let Some(id) = Sim::pick(rng, &self.session_ids).cloned() else { return };
        let r = match rng.random_range(0..3) {
            0 => self.sessions.apply(&id, SessionEvent::Ready, self.now()).await.map(|_| "ready"),
            1 => self.sessions.release(&self.caller.account_id, &id).await.map(|_| "released"),
            _ => {
                self.sessions.task_exited(&id).await;
                Ok("task exited")
            }
        };
        self.log.push(format!("session {id}: {:?}", r.map_err(|e| e.to_string())));
    }

    async fn submit_job(&mut self, rng: &mut StdRng) {
        let body = crate::compute::test_job_body(
            &["true"],
            rng.random_range(0..2),
            json!({}),
            &format!("k{}", rng.random_range(0..1_000_000)),
        );
        let sub = grid_core::validate::job::validate(&body).unwrap();
        let digest = "127.0.0.1:5000/tools/busybox@sha256:ab".to_string();
        match self.jobs.submit(&self.caller, sub, body, digest, None).await {
            Ok((row, true)) => {
                self.log.push(format!("job {}", row.id));
                self.job_ids.push(row.id);
            }
            other => self.log.push(format!("job not created: {:?}", other.map(|(_, c)| c).map_err(|e| e.to_string()))),
        }
    }

    async fn move_job(&mut self, rng: &mut StdRng) {
        let what = rng.random_range(0..4);
        if what == 0 {
            self.jobs.schedule_once().await.unwrap();
            self.quiet_jobs().await;
            self.log.push("schedule".into());
            return;
        }
        let Some(id) = Sim::pick(rng, &self.job_ids).cloned() else { return };
        let r = match what {
            1 => {
                let row = self.job(&id).await;
                if row.job.phase == JobPhase::Running {
                    let code = [0, 1, 137][rng.random_range(0..3)];
                    self.engine.exit(&container_name(&id, row.job.attempt_number()), code);
                    format!("exit {code}")
                } else {
                    "not running".into()
                }
            }
            2 => format!("cancel: {:?}", self.jobs.cancel(&id).await.map(|r| r.job.phase).map_err(|e| e.to_string())),
            _ => format!(
                "retry: {:?}",
                self.jobs.retry(&id, &self.caller).await.map(|r| r.job.phase).map_err(|e| e.to_string())
            ),
        };
        self.quiet_jobs().await;
        self.log.push(format!("job {id}: {r}"));
    }

    async fn job(&self, id: &str) -> crate::store::jobs::JobRow {
        let id = id.to_string();
        self.store.read(move |c| crate::store::jobs::load(c, &id)).await.unwrap().unwrap()
    }

    /// Waits until no job is between two of its steps (an attempt's task
    /// starting a container, storing its exit or publishing its log): a
    /// condition, not a time. The phases are read in one snapshot, so a
    /// step committed between two reads cannot hide a busy job.
    async fn quiet_jobs(&self) {
        for _ in 0..5_000 {
            let (busy, running) = self
                .store
                .read(|c| {
                    let busy: i64 = c.query_row(
                        "SELECT COUNT(*) FROM jobs WHERE phase IN ('PROVISIONING', 'PUBLISHING')",
                        (),
                        |r: &Row| r.get(0),
                    )?;
                    Ok((busy, running_jobs_in(c)?))
                })
                .await
                .unwrap();
            // A container of a RUNNING job that has exited: its supervising
            // task is about to store the end.
            let exited = running.iter().any(|(id, attempt)| {
                self.engine.container(&container_name(id, *attempt)).is_some_and(|c| !c.running && !c.removed)
            });
            if busy == 0 && !exited {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let jobs: Vec<(String, String)> = self
            .store
            .read(|c| c.query_map("SELECT id, phase FROM jobs", (), |r: &Row| Ok((r.get(0)?, r.get(1)?))))
            .await
            .unwrap();
        let containers: Vec<String> = jobs
            .iter()
            .flat_map(|(id, _)| (1..4).map(move |a| (id.clone(), a)))
            .filter_map(|(id, a)| self.engine.container(&container_name(&id, a)))
            .map(|c| format!("{} running={} removed={} exit={}", c.name, c.running, c.removed, c.exit_code))
            .collect();
        panic!("the job driver never went quiet: jobs {jobs:?}, containers {containers:?}");
    }

    /// After a pass at `now`: nothing due by `now` is left unfired.
    async fn check_due_fired(&self, now: Millis) {
        let left: Vec<String> = self
            .store
            .read(move |c| {
                let mut left = c.query_map(
                    "SELECT 'session ' || id FROM sessions WHERE live = 1 AND due_at <= ?1
                     UNION ALL SELECT 'job ' || id FROM jobs WHERE due_at <= ?1
                     UNION ALL SELECT 'item ' || id FROM items WHERE state = 'delayed' AND run_at <= ?1",
                    [now.0],
                    |r: &Row| r.get::<String>(0),
                )?;
                left.sort();
                Ok(left)
            })
            .await
            .unwrap();
        assert!(left.is_empty(), "due by {} and not fired: {left:?}", now.0);
    }

    /// The invariants, read back from the store after every operation.
    async fn check(&self) {
        let account = self.caller.account_id.clone();
        let problems = self.store.read(move |c| Ok(invariants(c, &account))).await.unwrap();
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}

/// (id, attempt) of every RUNNING job, oldest first.
fn running_jobs_in(c: &crate::store::Conn) -> Result<Vec<(String, u32)>, StoreError> {
    let ids = c.query_map("SELECT id FROM jobs WHERE phase = 'RUNNING' ORDER BY created_at, id", (), |r: &Row| {
        r.get::<String>(0)
    })?;
    let mut running = vec![];
    for id in ids {
        if let Some(row) = crate::store::jobs::load(c, &id)? {
            running.push((id, row.job.attempt_number()));
        }
    }
    Ok(running)
}

/// Every way the stored state can be wrong that this checks, as sentences.
fn invariants(c: &crate::store::Conn, account: &str) -> Vec<String> {
    let mut problems = vec![];
    let q = |sql: &str| -> Vec<(String, i64, i64)> {
        c.query_map(sql, (), |r: &Row| Ok((r.get::<String>(0)?, r.get::<i64>(1)?, r.get::<i64>(2)?))).unwrap()
    };
    // The balances kept beside the ledger are its sums.
    let kept = accounts::balance(c, account).unwrap();
    let sums: BTreeMap<String, i64> = c
        .query_map(
            "SELECT kind, CAST(SUM(amount) AS BIGINT) FROM ledger WHERE account_id = ?1 GROUP BY kind",
            [account],
            |r: &Row| Ok((r.get::<String>(0)?, r.get::<i64>(1)?)),
        )
        .unwrap()
        .into_iter()
        .collect();
    let folded = Balance::fold(sums.iter().map(|(k, v)| (grid_core::ledger::EntryKind::parse(k).unwrap(), *v)));
    if (kept.credit_micros, kept.reserved_micros) != (folded.credit_micros, folded.reserved_micros) {
        problems.push(format!("balances {kept:?} are not the ledger's sums {folded:?}"));
    }
    if kept.reserved_micros < 0 || kept.credit_micros < 0 {
        problems.push(format!("a negative balance: {kept:?}"));
    }
    // Items: a batch reserves each item's price once; an item settles at
    // most once, exactly its price, and exactly when it stops being billable.
    for (batch, reserved, owed) in q("SELECT b.id,
              (SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) FROM ledger WHERE subject = b.id AND kind = 'reserve'),
              (SELECT CAST(SUM(price_micros) AS BIGINT) FROM items WHERE batch_id = b.id)
         FROM batches b")
    {
        if reserved != owed {
            problems.push(format!("batch {batch}: reserved {reserved}, its items cost {owed}"));
        }
    }
    for (item, entries, amount) in q("SELECT i.id, COUNT(l.id), CAST(COALESCE(SUM(l.amount), 0) AS BIGINT)
         FROM items i LEFT JOIN ledger l ON l.subject = i.id AND l.kind IN ('charge', 'release')
         GROUP BY i.id, i.billable, i.price_micros
         HAVING NOT ((i.billable = 1 AND COUNT(l.id) = 0) OR (i.billable = 0 AND COUNT(l.id) = 1 AND SUM(l.amount) = i.price_micros))")
    {
        problems.push(format!("item {item}: {entries} settlement entries of {amount} in all, against its billable flag and price"));
    }
    for (item, attempts, _) in q("SELECT id, attempts_made, 0 FROM items WHERE attempts_made > 3") {
        problems.push(format!("item {item} made {attempts} attempts"));
    }
    for (item, _, _) in q("SELECT id, 0, 0 FROM items WHERE state = 'active' AND lease_node IS NULL") {
        problems.push(format!("item {item} is active with no holder"));
    }
    // Sessions: the lease reserved its lifetime once; an ended session
    // settled it exactly, a live one not at all.
    let sessions = c
        .query_map(
            "SELECT s.id, s.live, s.reserved_micros,
                    (SELECT COUNT(*) FROM ledger WHERE subject = s.id AND kind = 'reserve'),
                    (SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) FROM ledger WHERE subject = s.id AND kind = 'reserve'),
                    (SELECT COUNT(*) FROM ledger WHERE subject = s.id AND kind IN ('charge', 'release')),
                    (SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) FROM ledger WHERE subject = s.id AND kind IN ('charge', 'release'))
               FROM sessions s",
            (),
            |r: &Row| {
                Ok((
                    r.get::<String>(0)?,
                    r.get::<i64>(1)? == 1,
                    r.get::<i64>(2)?,
                    (r.get::<i64>(3)?, r.get::<i64>(4)?),
                    (r.get::<i64>(5)?, r.get::<i64>(6)?),
                ))
            },
        )
        .unwrap();
    for (session, live, reserved, reserve, settled) in sessions {
        if reserve != (1, reserved) {
            problems.push(format!("session {session}: reserve entries {reserve:?} against its reservation {reserved}"));
        }
        if live && settled.0 != 0 {
            problems.push(format!("session {session}: live but settled {settled:?}"));
        }
        if !live && (settled.1 != reserved || settled.0 > 2) {
            problems.push(format!("session {session}: ended, settled {settled:?} of {reserved}"));
        }
    }
    // Jobs: each reservation r1..rN taken once; every closed one settled
    // exactly, the open one (if any) not at all.
    let jobs = c.query_map("SELECT id FROM jobs", (), |r: &Row| r.get::<String>(0)).unwrap();
    for id in jobs {
        let row = crate::store::jobs::load(c, &id).unwrap().unwrap();
        for r in 1..=row.reservations {
            let subject = format!("{id}/r{r}");
            let sums: BTreeMap<String, (i64, i64)> = c
                .query_map(
                    "SELECT kind, COUNT(*), CAST(SUM(amount) AS BIGINT) FROM ledger WHERE subject = ?1 GROUP BY kind",
                    [&subject],
                    |r: &Row| Ok((r.get::<String>(0)?, (r.get::<i64>(1)?, r.get::<i64>(2)?))),
                )
                .unwrap()
                .into_iter()
                .collect();
            let reserve = sums.get("reserve").copied().unwrap_or_default();
            let settled =
                ["charge", "release"].iter().filter_map(|k| sums.get(*k)).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
            let open = r == row.reservations && row.job.reservation_open;
            if reserve.0 != 1 {
                problems.push(format!("job {subject}: {} reserve entries", reserve.0));
            }
            if open && settled.0 != 0 {
                problems.push(format!("job {subject}: open but settled {settled:?}"));
            }
            if !open && (settled.1 != reserve.1 || settled.0 > 2) {
                problems.push(format!("job {subject}: closed, settled {settled:?} of {reserve:?}"));
            }
        }
    }
    problems
}

/// Runs one seed: `STEPS` operations with the invariants checked after
/// each, on a runtime of its own (dropped with the seed, so no task of one
/// seed outlives it into the next). Panics naming the seed and the
/// operations so far.
fn run_seed(seed: u64) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut sim = Sim::new().await;
        for step in 0..STEPS {
            let outcome = futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
                sim.step(&mut rng).await;
                sim.check().await;
            }))
            .await;
            if let Err(panic) = outcome {
                let tail = sim.log.iter().rev().take(12).rev().cloned().collect::<Vec<_>>().join("\n  ");
                panic!(
                    "seed {seed} failed at step {step} (GRID_SIM_SEED={seed} runs it alone): {}\n  last operations:\n  {tail}",
                    panic_text(&*panic)
                );
            }
        }
        if std::env::var("GRID_SIM_LOG").is_ok() {
            eprintln!("seed {seed}:\n  {}", sim.log.join("\n  "));
        }
    });
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// The seeds a run covers: `GRID_SIM_SEED` alone, else `GRID_SIM_SEEDS`
/// (default 200) from 0.
fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("GRID_SIM_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![seed];
    }
    let n = std::env::var("GRID_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    (0..n).collect()
}

/// The planted bug is a process-wide switch: the two simulations never run
/// at once, so `cargo test` (one process for every test, unlike nextest's
/// process per test) does not see the plant in the clean run.
static ONE_SIMULATION_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn the_three_drivers_keep_the_invariants_on_every_seed() {
    let _alone = ONE_SIMULATION_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for seed in seeds() {
        run_seed(seed);
    }
}

/// The simulation finds a planted bug (an item's settlement written twice,
/// `PLANTED_DOUBLE_SETTLEMENT`) on some seed, and names it.
#[test]
fn a_planted_double_settlement_fails_on_a_seed() {
    use std::sync::atomic::Ordering;
    /// Takes the plant out however the test ends.
    struct Unplant;
    impl Drop for Unplant {
        fn drop(&mut self) {
            crate::capture::driver::PLANTED_DOUBLE_SETTLEMENT.store(false, Ordering::SeqCst);
        }
    }
    let _alone = ONE_SIMULATION_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let _unplant = Unplant;
    crate::capture::driver::PLANTED_DOUBLE_SETTLEMENT.store(true, Ordering::SeqCst);
    let failed =
        (0..20).find_map(|seed| std::panic::catch_unwind(|| run_seed(seed)).err().map(|p| (seed, panic_text(&*p))));
    let (seed, why) = failed.expect("no seed found the planted double settlement");
    assert!(why.contains(&format!("seed {seed} failed")), "{why}");
    assert!(why.contains("settlement entries"), "the failure does not name the double settlement: {why}");
}
