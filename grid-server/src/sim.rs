//! A seeded, deterministic simulation of the grid's drivers (in the manner
//! of TigerBeetle's VOPR and FoundationDB's simulation testing): the item,
//! session and job drivers of two nodes sharing one store, on one thread,
//! on a paused clock, with every id drawn from the seed.
//!
//! A seed draws a run of operations (batches submitted, under
//! idempotency keys too, and resent; one-call items; items claimed and
//! ended, left running, retried; jobs submitted, scheduled, exited,
//! cancelled, retried; sessions leased (on contexts too), made ready,
//! released, lost; contexts made and deleted; time passing, heartbeats,
//! takeovers of dead nodes and due times fired) and faults met by the
//! store through its seam (`store::faults`): a busy database, a failed
//! commit, a crash inside a (group) commit and a crash between a commit and
//! its after-commit effects, each killing the whole node, its job driver
//! too, restarted later or taken over by the other. After every operation
//! the invariants of the money and the machines are read back from the
//! store (`invariants`); at the end every node is healed and the grid run
//! until idle, and everything due must have fired and every reservation
//! resolved (`drain`).
//!
//! Deterministic: one thread (`blocking::inline_on_this_thread`: the
//! store's transactions, the group commits and the job driver's file work
//! run on it), a current-thread runtime on paused time, the virtual clock,
//! seeded ids (`ids::seeded`). The same seed writes the same log, byte for
//! byte, a digest of the store after every step included. A failure prints
//! the command that replays its seed.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use grid_core::catalog::{Profile, Script};
use grid_core::item::{Backoff, Failure};
use grid_core::ledger::Balance;
use grid_core::session::Event as SessionEvent;
use grid_core::time::Millis;
use grid_core::wire::batch::BatchSubmission;
use grid_core::wire::job::JobPhase;
use grid_core::wire::session::{SessionContext, SessionSubmission};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use sha2::Digest;
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
use crate::store::faults::{Fault, Faults, Plant};
use crate::store::idempotency::{self, Outcome};
use crate::store::items::{ItemError, ItemRow};
use crate::store::sql::Row;
use crate::store::{Store, StoreError};

const T0: Millis = Millis(1_800_000_000_000);
const NODES: [&str; 2] = ["n1", "n2"];
const CREDIT: i64 = 50_000_000;
/// A node whose heartbeat is older than this is dead (taken over).
const NODE_LEASE: Duration = Duration::from_secs(15);
/// Operations per seed.
const STEPS: usize = 60;
/// Seeds of the normal test run.
const SEEDS: u64 = 300;

/// One simulated node: the drivers of one process, on its own handle of
/// the shared store (its faults, its death).
struct Node {
    name: &'static str,
    faults: Arc<Faults>,
    store: Store,
    items: Arc<ItemDriver>,
    sessions: Arc<SessionDriver>,
    _starts: mpsc::UnboundedReceiver<Start>,
    jobs: JobDriver,
}

impl Node {
    /// The process starts (again): registers, then recovers what its last
    /// run left (items requeued, sessions ended at its last heartbeat, job
    /// attempts reconciled with its engine, which outlived it).
    async fn start(
        base: &Store,
        clock: &Arc<VirtualClock>,
        name: &'static str,
        engine: &Arc<FakeEngine>,
        dir: &std::path::Path,
    ) -> (Node, String) {
        let faults = Arc::new(Faults::default());
        let store = base.with_faults(faults.clone());
        let now = clock.now();
        let last = store.read(move |c| crate::store::nodes::heartbeat_of(c, name)).await.unwrap();
        let offer = crate::store::nodes::Offer { sessions: 3, ..Default::default() };
        store.write(move |tx| crate::store::nodes::register(tx, name, None, offer, now)).await.unwrap();
        let clock_dyn: Arc<dyn Clock> = clock.clone();
        let items =
            ItemDriver::start(store.clone(), clock_dyn.clone(), Backoff { base_ms: 1_000 }, Wake::default(), name);
        let items = Arc::new(items.unwrap());
        let peers = Arc::new(Peers::new(store.clone(), "credential".into()));
        let (sessions, starts) =
            SessionDriver::new(store.clone(), clock_dyn.clone(), name, Duration::from_secs(30), peers.clone());
        let jobs = JobDriver::new(DriverParts {
            store: store.clone(),
            engine: engine.clone(),
            clock: clock_dyn,
            logs_dir: dir.join("logs"),
            scratch: Scratch::new(dir.join("job-scratch")),
            capacity: Capacity { cpu_millis: 1_000, memory_bytes: 1 << 30 },
            due_wake: Arc::new(Notify::new()),
            node: name.into(),
            peers,
        });
        let requeued = items.recover().await.unwrap();
        sessions.recover(name, last).await;
        jobs.reconcile().await.unwrap();
        let node = Node { name, faults, store, items, sessions: Arc::new(sessions), _starts: starts, jobs };
        (node, format!("{name} started: {requeued} items requeued"))
    }

    fn alive(&self) -> bool {
        !self.faults.is_dead()
    }

    /// The node as its heartbeat and takeover see it (`crate::nodes`).
    fn grid_node(&self, clock: &Arc<VirtualClock>) -> crate::nodes::Node {
        crate::nodes::Node {
            config: crate::nodes::NodeConfig {
                name: self.name.into(),
                advertise_url: None,
                lease: NODE_LEASE,
                offer: crate::store::nodes::Offer { sessions: 3, ..Default::default() },
            },
            store: self.store.clone(),
            clock: clock.clone(),
            items: self.items.clone(),
            sessions: self.sessions.clone(),
            jobs: self.jobs.clone(),
        }
    }
}

/// `call` on a node that may die meanwhile: `None` once it died (its caller
/// never hears back, as from a dead process).
async fn on<T>(faults: &Faults, call: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        r = call => Some(r),
        () = faults.died() => None,
    }
}

/// The store a run is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum On {
    /// SQLite in a temp dir.
    Sqlite,
    /// A database of its own on the run's PostgreSQL cluster
    /// (`GRID_TEST_DATABASE_URL`), the same two nodes sharing it.
    Postgres,
}

/// One simulated grid: the store, two nodes, one clock, one seed.
struct Sim {
    dir: tempfile::TempDir,
    base: Store,
    clock: Arc<VirtualClock>,
    caller: Caller,
    nodes: Vec<Node>,
    engines: Vec<Arc<FakeEngine>>,
    rng: StdRng,
    /// Submissions under an idempotency key: the key, the body, the batch.
    keyed: Vec<(String, BatchSubmission, String)>,
    /// Claims held by a process that crashed or paused: their ends arrive late.
    orphaned: Vec<Arc<ItemRow>>,
    /// (item, token) of every end stored: at most one per claim.
    ended_under: HashSet<(String, i64)>,
    /// The session each context was leased with.
    log: Vec<String>,
    /// The PostgreSQL database of a run on it, dropped after the store.
    _database: Option<crate::store::postgres::TestDatabase>,
}

impl Sim {
    async fn new(seed: u64, clock: Arc<VirtualClock>, on: On) -> Sim {
        let dir = tempfile::tempdir().unwrap();
        let (base, database) = match on {
            On::Sqlite => (Store::open(dir.path(), Duration::from_secs(5)).unwrap(), None),
            On::Postgres => {
                let database = crate::store::postgres::TestDatabase::create();
                (Store::connect(&database.url, Duration::from_secs(5)).unwrap(), Some(database))
            }
        };
        let caller = base
            .write(|tx| {
                let id = accounts::create_account(tx, "sim", CREDIT, T0)?;
                let k = accounts::create_key(tx, &id, None, false, Default::default(), T0)?;
                Ok::<_, StoreError>(Caller { account_id: id, key_id: Some(k.key_id), ..Default::default() })
            })
            .await
            .unwrap();
        let engines: Vec<Arc<FakeEngine>> = NODES.iter().map(|_| FakeEngine::new(clock.clone())).collect();
        let mut sim = Sim {
            dir,
            base,
            clock,
            caller,
            nodes: vec![],
            engines,
            rng: StdRng::seed_from_u64(seed),
            keyed: vec![],
            orphaned: vec![],
            ended_under: HashSet::new(),
            log: vec![],
            _database: database,
        };
        for i in 0..NODES.len() {
            let node = sim.start_node(i).await;
            sim.nodes.push(node);
        }
        sim
    }

    async fn start_node(&mut self, i: usize) -> Node {
        let dir = self.dir.path().join(NODES[i]);
        let (node, said) = Node::start(&self.base, &self.clock, NODES[i], &self.engines[i], &dir).await;
        self.log.push(said);
        node
    }

    fn now(&self) -> Millis {
        self.clock.now()
    }

    fn live(&self) -> Vec<usize> {
        (0..self.nodes.len()).filter(|&i| self.nodes[i].alive()).collect()
    }

    /// A live node drawn by the seed (one is restarted if none is).
    async fn any_live(&mut self) -> usize {
        let live = self.live();
        if live.is_empty() {
            self.restart(0).await;
            return 0;
        }
        live[self.rng.random_range(0..live.len())]
    }

    async fn restart(&mut self, i: usize) {
        let node = self.start_node(i).await;
        self.nodes[i] = node;
    }

    /// Every id in `table`, in the order made (chosen by position: a seed is one run).
    async fn ids(&self, sql: &'static str) -> Vec<String> {
        self.base.read(move |c| c.query_map(sql, (), |r: &Row| r.get::<String>(0))).await.unwrap()
    }

    async fn pick(&mut self, sql: &'static str) -> Option<String> {
        let ids = self.ids(sql).await;
        (!ids.is_empty()).then(|| ids[self.rng.random_range(0..ids.len())].clone())
    }

    /// One operation drawn by the seed, driven until the drivers are quiet.
    async fn step(&mut self) {
        let op = self.rng.random_range(0..100);
        match op {
            0..=7 => self.submit_batch().await,
            8..=9 => self.resend_keyed().await,
            10..=23 => self.claim_and_end().await,
            24..=26 => self.one_call().await,
            27..=28 => self.retry_item().await,
            29..=35 => self.pass_time().await,
            36..=37 => self.pause().await,
            38..=41 => self.faulty_write().await,
            42..=46 => self.crash().await,
            47..=48 => self.restart_dead().await,
            49 => self.pause().await,
            50..=55 => self.lease().await,
            56..=62 => self.move_session().await,
            63..=65 => self.context().await,
            66..=71 => self.submit_job().await,
            72..=86 => self.move_job().await,
            87..=89 => self.job_end_on_a_busy_store().await,
            _ => self.end_orphans().await,
        }
        self.quiet().await;
    }

    fn submission(&mut self) -> BatchSubmission {
        let n = self.rng.random_range(1..=4);
        BatchSubmission {
            urls: (0..n).map(|i| format!("http://t/{i}")).collect(),
            script: if self.rng.random_bool(0.5) { Script::Fetch } else { Script::Capture },
            profile: Profile::DEFAULT,
            params: Default::default(),
            priority: self.rng.random_bool(0.3).then(|| self.rng.random_range(1..5)),
            context: None,
            proxy: None,
        }
    }

    fn key(value: &str, sub: &BatchSubmission) -> idempotency::Key {
        idempotency::Key::new(
            value.into(),
            "POST /batches",
            &json!({ "urls": sub.urls, "script": sub.script.as_str() }),
        )
    }

    /// POST /batches on a node, under an idempotency key a third of the time.
    async fn submit_batch(&mut self) {
        let i = self.any_live().await;
        let sub = self.submission();
        let key = self.rng.random_bool(0.3).then(|| format!("key-{}", self.rng.random_range(0..1_000_000)));
        let node = &self.nodes[i];
        let r = on(
            &node.faults,
            node.items.submit(&self.caller, sub.clone(), None, key.as_ref().map(|k| Sim::key(k, &sub))),
        )
        .await;
        match r {
            Some(Ok(Outcome::Performed(created, _))) => {
                self.log.push(format!("{}: batch {} of {}", NODES[i], created.batch_id, sub.urls.len()));
                if let Some(key) = key {
                    self.keyed.push((key, sub, created.batch_id));
                }
            }
            Some(Ok(Outcome::Replayed(_))) => panic!("a new key was answered as a replay"),
            Some(Err(e)) => self.log.push(format!("{}: batch refused: {e}", NODES[i])),
            None => self.log.push(format!("{}: died submitting a batch", NODES[i])),
        }
    }

    /// A keyed submission sent again, through any node: answered the first
    /// answer, nothing queued.
    async fn resend_keyed(&mut self) {
        if self.keyed.is_empty() {
            return;
        }
        let (key, sub, batch) = self.keyed[self.rng.random_range(0..self.keyed.len())].clone();
        let i = self.any_live().await;
        let before = self.snapshot().await;
        let node = &self.nodes[i];
        let r = on(&node.faults, node.items.submit(&self.caller, sub.clone(), None, Some(Sim::key(&key, &sub)))).await;
        match r {
            Some(Ok(Outcome::Replayed(answer))) => {
                let body = String::from_utf8_lossy(&answer.body).to_string();
                assert!(body.contains(&batch), "the resend of {key} answered {body}, not batch {batch}");
                assert_eq!(self.snapshot().await, before, "the resend of {key} wrote something");
                self.log.push(format!("{}: resend of {key}: batch {batch} again", NODES[i]));
            }
            Some(Ok(Outcome::Performed(created, _))) => {
                panic!("the resend of {key} made batch {} (first {batch})", created.batch_id)
            }
            Some(Err(e)) => self.log.push(format!("{}: resend of {key} refused: {e}", NODES[i])),
            None => self.log.push(format!("{}: died on a resend", NODES[i])),
        }
    }

    /// Claims a few items on a node and ends them at once, in one group
    /// commit with a claim of more; some claims are kept unended (their
    /// attempt still runs, and ends late if its node dies).
    async fn claim_and_end(&mut self) {
        let i = self.any_live().await;
        let n = self.rng.random_range(1..=3);
        let node = &self.nodes[i];
        let Some(claims) = on(&node.faults, node.items.claim_batch(n, usize::MAX)).await else {
            self.log.push(format!("{}: died claiming", NODES[i]));
            return;
        };
        let claims = match claims {
            Ok(c) => c,
            Err(e) => return self.log.push(format!("{}: claim failed: {e}", NODES[i])),
        };
        let mut ends = vec![];
        for claim in claims {
            let claim = Arc::new(claim);
            if self.rng.random_bool(0.15) {
                self.log
                    .push(format!("{}: {} claimed (token {}), left running", NODES[i], claim.id, claim.lease_token));
                self.orphaned.push(claim);
                continue;
            }
            let end = self.attempt_end();
            ends.push((claim, end));
        }
        let more = self.rng.random_range(0..=2);
        self.end_all(i, ends, more).await;
    }

    fn attempt_end(&mut self) -> AttemptEnd {
        match self.rng.random_range(0..3) {
            0 => AttemptEnd::Succeeded(vec![]),
            1 => AttemptEnd::Failed(Failure::Transient("sim: timeout".into())),
            _ => AttemptEnd::Failed(Failure::Terminal("sim: 404".into())),
        }
    }

    /// Ends `ends` on node `i` at once, beside a claim of `more` items (one
    /// group commit when they meet): each end checked against the fence.
    async fn end_all(&mut self, i: usize, ends: Vec<(Arc<ItemRow>, AttemptEnd)>, more: usize) {
        let mut stale = vec![];
        for (claim, _) in &ends {
            stale.push(self.stale(claim).await);
        }
        let node = &self.nodes[i];
        let finishes =
            futures_util::future::join_all(ends.iter().map(|(claim, end)| node.items.finish(claim, end.clone())));
        let claim_more = async {
            if more == 0 {
                return Ok(vec![]);
            }
            node.items.claim_batch(more, usize::MAX).await
        };
        let Some((answers, claimed)) = on(&node.faults, futures_util::future::join(finishes, claim_more)).await else {
            self.log.push(format!("{}: died ending {} attempts", NODES[i], ends.len()));
            self.orphaned.extend(ends.into_iter().map(|(c, _)| c));
            return;
        };
        for (((claim, _), answer), stale) in ends.iter().zip(answers).zip(stale) {
            self.log.push(format!(
                "{}: end {} (token {}): {:?}",
                NODES[i],
                claim.id,
                claim.lease_token,
                answer.as_ref().map(|o| o.item.state).map_err(|e| e.to_string())
            ));
            match answer {
                Ok(_) => {
                    assert!(
                        stale.is_none(),
                        "the end of {} was stored under a stale claim: {}",
                        claim.id,
                        stale.unwrap()
                    );
                    assert!(
                        self.ended_under.insert((claim.id.clone(), claim.lease_token)),
                        "item {} stored two ends under one claim (token {})",
                        claim.id,
                        claim.lease_token
                    );
                }
                Err(ItemError::LeaseLost(_)) => {}
                Err(ItemError::Store(_)) => {}
                Err(e) => panic!("end of {} not stored: {e}", claim.id),
            }
        }
        match claimed {
            Ok(claimed) => {
                for claim in claimed {
                    self.log.push(format!("{}: {} claimed (token {})", NODES[i], claim.id, claim.lease_token));
                    self.orphaned.push(Arc::new(claim));
                }
            }
            Err(e) => self.log.push(format!("{}: claim failed: {e}", NODES[i])),
        }
    }

    /// Why `claim` no longer holds its item, read before its end is sent
    /// (`None`: it still does, so its end may be stored).
    async fn stale(&self, claim: &ItemRow) -> Option<String> {
        let (id, token) = (claim.id.clone(), claim.lease_token);
        let stored: (String, i64) = self
            .base
            .read(move |c| {
                c.query_row("SELECT state, lease_token FROM items WHERE id = ?1", [&id], |r: &Row| {
                    Ok((r.get(0)?, r.get(1)?))
                })
            })
            .await
            .unwrap();
        (stored != ("active".to_string(), token)).then(|| format!("the item is {} under token {}", stored.0, stored.1))
    }

    /// The ends of claims of a crashed or paused process, arriving late
    /// through a live node.
    async fn end_orphans(&mut self) {
        let orphans = std::mem::take(&mut self.orphaned);
        let ends = orphans.into_iter().map(|claim| (claim, self.attempt_end())).collect();
        let i = self.any_live().await;
        self.end_all(i, ends, 0).await;
    }

    /// A one-call capture (POST /screenshot): its item reserved and claimed
    /// by the node in one transaction, run and ended by its caller.
    async fn one_call(&mut self) {
        let i = self.any_live().await;
        let mut sub = self.submission();
        sub.urls.truncate(1);
        sub.script = Script::Capture;
        let node = &self.nodes[i];
        let claim = match on(&node.faults, node.items.take_attended(&self.caller, sub)).await {
            Some(Ok(claim)) => claim,
            Some(Err(e)) => return self.log.push(format!("{}: one-call refused: {e}", NODES[i])),
            None => return self.log.push(format!("{}: died taking a one-call item", NODES[i])),
        };
        self.log.push(format!("{}: one-call {} (token {})", NODES[i], claim.id, claim.lease_token));
        let end = self.attempt_end();
        self.end_all(i, vec![(claim, end)], 0).await;
    }

    async fn retry_item(&mut self) {
        let Some(id) = self.pick("SELECT id FROM items ORDER BY seq").await else { return };
        let i = self.any_live().await;
        let node = &self.nodes[i];
        let r = on(&node.faults, node.items.retry(&self.caller.account_id, &id)).await;
        self.log.push(format!("{}: retry {id}: {:?}", NODES[i], r.map(|r| r.map(drop).map_err(|e| e.to_string()))));
    }

    /// Time passes: every live node beats, takes over the dead ones and
    /// fires what fell due, as its heartbeat and due loops do.
    async fn pass_time(&mut self) {
        let ms = [500, 2_000, 30_000, 120_000, 1_900_000][self.rng.random_range(0..5)];
        let now = self.clock.advance(ms);
        self.log.push(format!("+{ms} ms"));
        self.heartbeats().await;
        self.fire(now).await;
        if self.live().len() == self.nodes.len() {
            self.check_due_fired(now).await;
        }
    }

    async fn heartbeats(&mut self) {
        for i in self.live() {
            let grid_node = self.nodes[i].grid_node(&self.clock);
            on(&self.nodes[i].faults, crate::nodes::beat(&grid_node)).await;
        }
        for i in self.live() {
            let grid_node = self.nodes[i].grid_node(&self.clock);
            let before = self.nodes_registered().await;
            on(&self.nodes[i].faults, crate::nodes::take_over(&grid_node)).await;
            let after = self.nodes_registered().await;
            if before != after {
                self.log.push(format!("{} took over: nodes {before:?} -> {after:?}", NODES[i]));
            }
        }
    }

    async fn nodes_registered(&self) -> Vec<String> {
        self.ids("SELECT name FROM nodes ORDER BY name").await
    }

    async fn fire(&self, now: Millis) {
        for i in self.live() {
            let node = &self.nodes[i];
            // A pass fires a bounded number; loop as the due loop does when
            // asked to come back at once.
            for _ in 0..16 {
                let fired = on(&node.faults, async {
                    [node.items.fire_due(now).await, node.jobs.fire_due(now).await, node.sessions.fire_due(now).await]
                })
                .await;
                let Some(again) = fired else { break };
                if !again.iter().any(|t| t.is_some_and(|t| t <= now)) {
                    break;
                }
            }
        }
    }

    /// A write on a node meets a busy database or a failed commit: it must
    /// store nothing at all (or, an attempt's end, be stored once the store
    /// takes writes again).
    async fn faulty_write(&mut self) {
        let i = self.any_live().await;
        let fault = [Fault::Busy, Fault::FailedCommit][self.rng.random_range(0..2)];
        let what = self.rng.random_range(0..4);
        let before = self.snapshot().await;
        self.nodes[i].faults.arm([fault]);
        match what {
            0 => self.submit_batch().await,
            1 => self.lease().await,
            2 => self.submit_job().await,
            _ => self.claim_and_end().await,
        }
        let unmet = self.nodes[i].faults.disarm();
        if what < 3 && unmet == 0 {
            assert_eq!(self.snapshot().await, before, "a {fault:?} left writes behind (operation {what})");
        }
        self.log.push(format!(
            "{}: {fault:?} on operation {what} ({})",
            NODES[i],
            if unmet == 0 { "met" } else { "not met" }
        ));
    }

    /// A node crashes inside a write: during its transaction (a group
    /// commit's, when the capture queue's), or between its commit and its
    /// after-commit effects. The whole process is gone, its job driver
    /// too; it restarts later, or the other node takes it over.
    async fn crash(&mut self) {
        let i = self.any_live().await;
        let fault = [Fault::CrashInCommit, Fault::CrashAfterCommit][self.rng.random_range(0..2)];
        self.nodes[i].faults.arm([fault]);
        match self.rng.random_range(0..5) {
            0 => self.submit_batch().await,
            1 => self.lease().await,
            2 => self.move_job().await,
            3 => self.one_call().await,
            _ => self.claim_and_end().await,
        }
        let died = !self.nodes[i].alive();
        self.nodes[i].faults.disarm();
        self.log.push(format!("{}: {fault:?} {}", NODES[i], if died { "killed it" } else { "not met" }));
    }

    /// A node stops for longer than the lease without dying (a long GC,
    /// a frozen VM): the other takes it for dead and takes its work over,
    /// and claims it; the paused node's claims end late and must be
    /// refused by their fence.
    async fn pause(&mut self) {
        let live = self.live();
        if live.len() < 2 {
            return;
        }
        let (paused, other) = (live[0], live[1]);
        let now = self.clock.advance(NODE_LEASE.as_millis() as i64 + 1_000);
        let grid_node = self.nodes[other].grid_node(&self.clock);
        on(&self.nodes[other].faults, crate::nodes::beat(&grid_node)).await;
        on(&self.nodes[other].faults, crate::nodes::take_over(&grid_node)).await;
        self.log.push(format!(
            "{} paused; {} took it over: nodes {:?}",
            NODES[paused],
            NODES[other],
            self.nodes_registered().await
        ));
        self.fire(now).await;
        self.end_all(other, vec![], 16).await;
        // The paused node wakes and reports what its workers finished.
        let orphans = std::mem::take(&mut self.orphaned);
        let ends = orphans.into_iter().map(|claim| (claim, self.attempt_end())).collect();
        self.end_all(paused, ends, 0).await;
    }

    async fn restart_dead(&mut self) {
        let dead: Vec<usize> = (0..self.nodes.len()).filter(|&i| !self.nodes[i].alive()).collect();
        if let Some(&i) = dead.first() {
            self.restart(i).await;
        }
    }

    async fn lease(&mut self) {
        let i = self.any_live().await;
        let context = match self.rng.random_bool(0.3) {
            true => self.pick("SELECT id FROM contexts ORDER BY id").await,
            false => None,
        };
        let sub = SessionSubmission {
            profile: Profile::DEFAULT,
            ttl_minutes: [1, 5, 30][self.rng.random_range(0..3)],
            network_policy: None,
            overrides: Default::default(),
            take_over: false,
            recording: false,
            context: context.map(|id| SessionContext { id, persist: true }),
            proxy: None,
        };
        let node = &self.nodes[i];
        let lease = node.sessions.lease(&self.caller, sub, None, None, crate::sessions::driver::tests::reach());
        match on(&node.faults, lease).await {
            Some(Ok(Outcome::Performed(row, _))) => {
                self.log.push(format!("{}: lease {} on {:?}", NODES[i], row.id, row.node))
            }
            Some(other) => {
                self.log.push(format!("{}: lease refused: {:?}", NODES[i], other.err().map(|e| e.to_string())))
            }
            None => self.log.push(format!("{}: died leasing", NODES[i])),
        }
    }

    async fn move_session(&mut self) {
        let Some(id) = self.pick("SELECT id FROM sessions ORDER BY id").await else { return };
        let i = self.any_live().await;
        let what = self.rng.random_range(0..3);
        let (node, now, account) = (&self.nodes[i], self.now(), self.caller.account_id.clone());
        let r = on(&node.faults, async {
            match what {
                0 => node.sessions.apply(&id, SessionEvent::Ready, now).await.map(|_| "ready"),
                1 => node.sessions.release(&account, &id).await.map(|_| "released"),
                _ => {
                    node.sessions.task_exited(&id).await;
                    Ok("task exited")
                }
            }
        })
        .await;
        self.log.push(format!("{}: session {id}: {:?}", NODES[i], r.map(|r| r.map_err(|e| e.to_string()))));
    }

    /// POST /contexts or DELETE /contexts/{id} (refused while a live
    /// session holds it); a context an ended session held is finished.
    async fn context(&mut self) {
        let i = self.any_live().await;
        let (account, now) = (self.caller.account_id.clone(), self.now());
        let what = self.rng.random_range(0..3);
        let target = self.pick("SELECT id FROM contexts ORDER BY id").await;
        let node = &self.nodes[i];
        let r = on(
            &node.faults,
            node.store.write(move |tx| -> Result<Result<String, String>, StoreError> {
                Ok(match (what, target) {
                    (0, Some(id)) => match crate::store::contexts::delete(tx, &account, &id) {
                        Ok(()) => Ok(format!("deleted {id}")),
                        Err(crate::store::contexts::ContextError::Store(e)) => return Err(e),
                        Err(refused) => Err(format!("{id}: {refused:?}")),
                    },
                    (1, Some(id)) => {
                        // A session task's last word: its ended session's
                        // context freed.
                        let holder: Option<String> =
                            tx.query_row("SELECT holder FROM contexts WHERE id = ?1", [&id], |r: &Row| r.get(0))?;
                        let Some(session) = holder else { return Ok(Ok(format!("{id} free"))) };
                        let live: i64 =
                            tx.query_row("SELECT live FROM sessions WHERE id = ?1", [&session], |r: &Row| r.get(0))?;
                        if live == 1 {
                            return Ok(Ok(format!("{id} held by live {session}")));
                        }
                        let done = crate::store::contexts::finish(
                            tx,
                            &id,
                            &session,
                            &crate::store::contexts::Finish::Keep,
                            now,
                        )?;
                        Ok(format!("{id} finished by {session}: {done}"))
                    }
                    _ => Ok(format!("created {}", crate::store::contexts::create(tx, &account, now)?)),
                })
            }),
        )
        .await;
        self.log.push(format!("{}: context: {r:?}", NODES[i]));
    }

    async fn submit_job(&mut self) {
        let i = self.any_live().await;
        let retries = self.rng.random_range(0..2);
        let key = format!("k{}", self.rng.random_range(0..1_000_000));
        let body = crate::compute::test_job_body(&["true"], retries, json!({}), &key);
        let sub = grid_core::validate::job::validate(&body).unwrap();
        let digest = "127.0.0.1:5000/tools/busybox@sha256:ab".to_string();
        let node = &self.nodes[i];
        match on(&node.faults, node.jobs.submit(&self.caller, sub, body, digest, None)).await {
            Some(Ok((row, created))) => self.log.push(format!("{}: job {} (new: {created})", NODES[i], row.id)),
            Some(Err(e)) => self.log.push(format!("{}: job not created: {e}", NODES[i])),
            None => self.log.push(format!("{}: died submitting a job", NODES[i])),
        }
    }

    async fn move_job(&mut self) {
        let i = self.any_live().await;
        let what = self.rng.random_range(0..4);
        if what == 0 {
            let node = &self.nodes[i];
            let r = on(&node.faults, node.jobs.schedule_once()).await;
            self.log.push(format!("{}: schedule: {:?}", NODES[i], r.map(|r| r.map_err(|e| e.to_string()))));
            return;
        }
        let Some(id) = self.pick("SELECT id FROM jobs ORDER BY seq").await else { return };
        let r = match what {
            1 => self.exit_container(&id).await,
            2 => {
                let node = &self.nodes[i];
                let r = on(&node.faults, node.jobs.cancel(&id)).await;
                format!("cancel: {:?}", r.map(|r| r.map(|r| r.job.phase).map_err(|e| e.to_string())))
            }
            _ => {
                let node = &self.nodes[i];
                let r = on(&node.faults, node.jobs.retry(&id, &self.caller)).await;
                format!("retry: {:?}", r.map(|r| r.map(|r| r.job.phase).map_err(|e| e.to_string())))
            }
        };
        self.log.push(format!("{}: job {id}: {r}", NODES[i]));
    }

    /// The container of a running job exits (its code drawn by the seed),
    /// on the engine of the node that runs it.
    async fn exit_container(&mut self, id: &str) -> String {
        let row = self.job(id).await;
        let Some(i) = row.node.as_deref().and_then(|n| NODES.iter().position(|m| *m == n)) else {
            return "on no node".into();
        };
        let name = container_name(id, row.job.attempt_number());
        let running = self.engines[i].container(&name).is_some_and(|c| c.running && !c.removed);
        if row.job.phase != JobPhase::Running || !running {
            return format!("{} ({})", row.job.phase.as_str(), if running { "running" } else { "no container" });
        }
        let code = [0, 1, 137][self.rng.random_range(0..3)];
        self.engines[i].exit(&name, code);
        format!("exit {code}")
    }

    /// A running job's container exits while its node's store is busy for
    /// a while: the end is stored once it takes writes again.
    async fn job_end_on_a_busy_store(&mut self) {
        let Some((id, _)) = self.running_jobs().await.into_iter().next() else { return };
        let row = self.job(&id).await;
        let Some(i) = row.node.as_deref().and_then(|n| NODES.iter().position(|m| *m == n)) else { return };
        if !self.nodes[i].alive() {
            return;
        }
        let n = self.rng.random_range(1..=4);
        self.nodes[i].faults.arm(std::iter::repeat_n(Fault::Busy, n));
        let r = self.exit_container(&id).await;
        self.quiet().await;
        self.nodes[i].faults.disarm();
        self.quiet().await;
        let phase = self.job(&id).await.job.phase;
        if self.nodes[i].alive() {
            assert!(phase.is_finished() || phase == JobPhase::Queued, "job {id} stuck in {} after {r}", phase.as_str());
        }
        self.log.push(format!("{}: job {id}: {r} on a busy store ({n}), stored as {}", NODES[i], phase.as_str()));
    }

    async fn job(&self, id: &str) -> crate::store::jobs::JobRow {
        let id = id.to_string();
        self.base.read(move |c| crate::store::jobs::load(c, &id)).await.unwrap().unwrap()
    }

    async fn running_jobs(&self) -> Vec<(String, u32)> {
        self.base.read(running_jobs_in).await.unwrap()
    }

    /// Counts of every table a submission writes.
    async fn snapshot(&self) -> Vec<i64> {
        self.base
            .read(|c| {
                ["batches", "items", "jobs", "sessions", "ledger", "idempotency_keys", "contexts"]
                    .iter()
                    .map(|t| c.query_row(&format!("SELECT COUNT(*) FROM {t}"), (), |r: &Row| r.get::<i64>(0)))
                    .collect()
            })
            .await
            .unwrap()
    }

    /// Runs every task until none can move before a while of (paused) time
    /// has passed and no job of a live node is between two of its steps: a
    /// condition, not a time.
    async fn quiet(&self) {
        for _ in 0..2_000 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let live: Vec<&str> = self.live().into_iter().map(|i| NODES[i]).collect();
            let busy = self
                .base
                .read(move |c| {
                    let rows = c.query_map(
                        "SELECT id, phase, node FROM jobs WHERE phase IN ('PROVISIONING', 'RUNNING', 'PUBLISHING') ORDER BY seq",
                        (),
                        |r: &Row| Ok((r.get::<String>(0)?, r.get::<String>(1)?, r.get::<Option<String>>(2)?)),
                    )?;
                    let mut busy = vec![];
                    for (id, phase, node) in rows {
                        let Some(node) = node.filter(|n| live.contains(&n.as_str())) else { continue };
                        let attempt = crate::store::jobs::load(c, &id)?.map(|r| r.job.attempt_number()).unwrap_or(0);
                        busy.push((id, phase, node, attempt));
                    }
                    Ok(busy)
                })
                .await
                .unwrap();
            let moving = busy.iter().any(|(id, phase, node, attempt)| {
                let i = NODES.iter().position(|n| n == node).unwrap();
                // A container of a RUNNING job that has exited: its
                // supervising task is about to store the end.
                phase != "RUNNING"
                    || self.engines[i]
                        .container(&container_name(id, *attempt))
                        .is_some_and(|c| !c.running && !c.removed)
            });
            if !moving {
                return;
            }
        }
        panic!("the drivers never went quiet");
    }

    /// After a pass at `now`: nothing due by `now` is left unfired.
    async fn check_due_fired(&self, now: Millis) {
        let left: Vec<String> = self
            .base
            .read(move |c| {
                c.query_map(
                    "SELECT 'session ' || id FROM sessions WHERE live = 1 AND due_at <= ?1
                     UNION ALL SELECT 'job ' || id FROM jobs WHERE due_at <= ?1
                     UNION ALL SELECT 'item ' || id FROM items WHERE state = 'delayed' AND run_at <= ?1
                     ORDER BY 1",
                    [now.0],
                    |r: &Row| r.get::<String>(0),
                )
            })
            .await
            .unwrap();
        assert!(left.is_empty(), "due by {} and not fired: {left:?}", now.0);
    }

    /// The invariants, read back from the store after every operation.
    async fn check(&self) {
        let account = self.caller.account_id.clone();
        let problems = self.base.read(move |c| Ok(invariants(c, &account))).await.unwrap();
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    /// A digest of what the store holds, for the log: two runs of a seed
    /// that store anything differently write different logs.
    async fn digest(&self) -> String {
        let tables = ["items", "batches", "jobs", "sessions", "ledger", "contexts", "idempotency_keys", "nodes"];
        let rows = self
            .base
            .read(move |c| {
                tables.iter().map(|t| c.query_values(&format!("SELECT * FROM {t} ORDER BY 1"), vec![])).collect()
            })
            .await
            .unwrap();
        let rows: Vec<Vec<Row>> = rows;
        let each = rows.iter().map(|rows| hex::encode(&sha2::Sha256::digest(format!("{rows:?}").as_bytes())[..3]));
        tables.iter().zip(each).map(|(t, h)| format!("{t} {h}")).collect::<Vec<_>>().join(", ")
    }

    /// The end of a run: faults healed, dead nodes restarted, late ends
    /// delivered, then the grid run until idle (time passing, every item
    /// claimed and succeeding, every container exiting, jobs scheduled).
    /// Then nothing may be left to do and nothing reserved.
    async fn drain(&mut self) {
        for i in 0..self.nodes.len() {
            self.nodes[i].faults.disarm();
            if !self.nodes[i].alive() {
                self.restart(i).await;
            }
        }
        self.end_orphans().await;
        for _ in 0..20 {
            let now = self.clock.advance(2_000_000);
            self.heartbeats().await;
            self.fire(now).await;
            for i in 0..self.nodes.len() {
                loop {
                    let claims = self.nodes[i].items.claim_batch(8, usize::MAX).await.unwrap();
                    if claims.is_empty() {
                        break;
                    }
                    let ends = claims.into_iter().map(|c| (Arc::new(c), AttemptEnd::Succeeded(vec![]))).collect();
                    self.end_all(i, ends, 0).await;
                }
                self.nodes[i].jobs.schedule_once().await.unwrap();
                self.quiet().await;
            }
            for (id, _) in self.running_jobs().await {
                let row = self.job(&id).await;
                let i = NODES.iter().position(|n| Some(*n) == row.node.as_deref()).unwrap();
                let name = container_name(&id, row.job.attempt_number());
                if self.engines[i].container(&name).is_some_and(|c| c.running && !c.removed) {
                    self.engines[i].exit(&name, 0);
                    // One end at a time: the supervising tasks' order is
                    // then the seed's, whatever branch their `select!`
                    // (randomly) polls first.
                    self.quiet().await;
                }
            }
            self.quiet().await;
            if self.undone().await.is_empty() {
                break;
            }
        }
        let undone = self.undone().await;
        assert!(undone.is_empty(), "liveness: left undone at the end: {undone:?}");
        let account = self.caller.account_id.clone();
        let balance = self.base.read(move |c| accounts::balance(c, &account)).await.unwrap();
        assert_eq!(balance.reserved_micros, 0, "liveness: reservations left unresolved: {balance:?}");
        self.log.push(format!("drained: credit {} left", balance.credit_micros));
    }

    /// What is still to do: items not ended, jobs not finished, sessions live.
    async fn undone(&self) -> Vec<String> {
        self.base
            .read(|c| {
                c.query_map(
                    "SELECT 'item ' || id || ' ' || state FROM items WHERE state IN ('queued', 'active', 'delayed')
                     UNION ALL SELECT 'job ' || id || ' ' || phase FROM jobs
                       WHERE phase NOT IN ('SUCCEEDED', 'FAILED', 'TIMED_OUT', 'CANCELLED')
                     UNION ALL SELECT 'session ' || id FROM sessions WHERE live = 1
                     ORDER BY 1",
                    (),
                    |r: &Row| r.get::<String>(0),
                )
            })
            .await
            .unwrap()
    }
}

/// (id, attempt) of every RUNNING job, oldest first.
fn running_jobs_in(c: &crate::store::ReadConn) -> Result<Vec<(String, u32)>, StoreError> {
    let ids =
        c.query_map("SELECT id FROM jobs WHERE phase = 'RUNNING' ORDER BY seq", (), |r: &Row| r.get::<String>(0))?;
    let mut running = vec![];
    for id in ids {
        if let Some(row) = crate::store::jobs::load(c, &id)? {
            running.push((id, row.job.attempt_number()));
        }
    }
    Ok(running)
}

/// Every way the stored state can be wrong that this checks, as sentences.
fn invariants(c: &crate::store::ReadConn, account: &str) -> Vec<String> {
    let mut problems = vec![];
    let q = |sql: &str| -> Vec<(String, i64, i64)> {
        c.query_map(sql, (), |r: &Row| Ok((r.get::<String>(0)?, r.get::<i64>(1)?, r.get::<i64>(2)?))).unwrap()
    };
    // The balances kept beside the ledger are its sums.
    let kept = accounts::balance(c, account).unwrap();
    let sums: std::collections::BTreeMap<String, i64> = c
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
         FROM batches b ORDER BY b.id")
    {
        if reserved != owed {
            problems.push(format!("batch {batch}: reserved {reserved}, its items cost {owed}"));
        }
    }
    for (item, entries, amount) in q("SELECT i.id, COUNT(l.id), CAST(COALESCE(SUM(l.amount), 0) AS BIGINT)
         FROM items i LEFT JOIN ledger l ON l.subject = i.id AND l.kind IN ('charge', 'release')
         GROUP BY i.id, i.billable, i.price_micros
         HAVING NOT ((i.billable = 1 AND COUNT(l.id) = 0) OR (i.billable = 0 AND COUNT(l.id) = 1 AND SUM(l.amount) = i.price_micros))
         ORDER BY i.id")
    {
        problems.push(format!("item {item}: {entries} settlement entries of {amount} in all, against its billable flag and price"));
    }
    for (item, attempts, _) in q("SELECT id, attempts_made, 0 FROM items WHERE attempts_made > 3 ORDER BY id") {
        problems.push(format!("item {item} made {attempts} attempts"));
    }
    for (item, _, _) in q("SELECT id, 0, 0 FROM items WHERE state = 'active' AND lease_node IS NULL ORDER BY id") {
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
               FROM sessions s ORDER BY s.id",
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
    // Contexts: one live session at most holds each, and a live session
    // leased on a context holds it.
    for (context, holders, _) in q("SELECT c.id,
              (SELECT COUNT(*) FROM sessions s WHERE s.live = 1 AND s.id = c.holder), 0
         FROM contexts c WHERE c.holder IS NOT NULL ORDER BY c.id")
    {
        if holders > 1 {
            problems.push(format!("context {context}: held by {holders} live sessions"));
        }
    }
    // Jobs: each reservation r1..rN taken once; every closed one settled
    // exactly, the open one (if any) not at all.
    let jobs = c.query_map("SELECT id FROM jobs ORDER BY seq", (), |r: &Row| r.get::<String>(0)).unwrap();
    for id in jobs {
        let row = crate::store::jobs::load(c, &id).unwrap().unwrap();
        for r in 1..=row.reservations {
            let subject = format!("{id}/r{r}");
            let sums: std::collections::BTreeMap<String, (i64, i64)> = c
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

/// How a run of one seed went: its log, or where it failed.
struct Run {
    log: Vec<String>,
    failure: Option<String>,
}

/// Runs one seed: `STEPS` operations with the invariants checked after
/// each, then the drain; on one thread (this one), a current-thread
/// runtime on paused time of its own (dropped with the seed, and every
/// task of it, a dead node's too), with `plants` in every node's SQL.
fn run_seed(seed: u64, plants: &[Plant]) -> Run {
    run_seed_on(seed, plants, On::Sqlite)
}

fn run_seed_on(seed: u64, plants: &[Plant], on: On) -> Run {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    let _inline = crate::blocking::inline_on_this_thread();
    let clock = Arc::new(VirtualClock::at(T0));
    // The ids' own stream, apart from the operations'.
    let _ids = crate::ids::seeded::on_this_thread(seed ^ 0x05ee_d1d5, clock.clone());
    rt.block_on(async {
        let mut sim = Sim::new(seed, clock.clone(), on).await;
        for plant in plants {
            for node in &sim.nodes {
                node.faults.plant(*plant);
            }
        }
        let mut failure = None;
        for step in 0..=STEPS {
            let outcome = futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
                if step == STEPS {
                    sim.drain().await;
                } else {
                    sim.step().await;
                }
                sim.check().await;
            }))
            .await;
            if let Err(panic) = outcome {
                failure = Some(format!("step {step}: {}", panic_text(&*panic)));
                break;
            }
            let digest = sim.digest().await;
            sim.log.push(format!("step {step}: store {digest}"));
        }
        Run { log: std::mem::take(&mut sim.log), failure }
    })
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// The command that runs `seed` alone, printing its log.
fn replay_command(seed: u64, test: &str) -> String {
    format!("GRID_SIM_SEED={seed} GRID_SIM_LOG=1 cargo nextest run -p grid-server --no-capture sim::{test}")
}

/// Panics naming the seed, the step, the last operations and the command
/// that replays it, if `run` failed.
fn assert_passed(seed: u64, run: &Run, test: &str) {
    if std::env::var("GRID_SIM_LOG").is_ok() {
        eprintln!("seed {seed}:\n  {}", run.log.join("\n  "));
    }
    if let Some(failure) = &run.failure {
        let tail = run.log.iter().rev().take(16).rev().cloned().collect::<Vec<_>>().join("\n  ");
        panic!(
            "seed {seed} failed at {failure}\n  last operations:\n  {tail}\n  replay: {}",
            replay_command(seed, test)
        );
    }
}

/// The seeds a run covers: `GRID_SIM_SEED` alone, else `GRID_SIM_SEEDS`
/// (default `default`) from 0.
fn seeds(default: u64) -> Vec<u64> {
    if let Some(seed) = std::env::var("GRID_SIM_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![seed];
    }
    let n = std::env::var("GRID_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    (0..n).collect()
}

/// The first seed of `0..n` on which `plant` is caught, and why.
fn caught(plant: Plant, n: u64) -> Option<(u64, String)> {
    let found = (0..n).find_map(|seed| run_seed(seed, &[plant]).failure.map(|f| (seed, f)));
    if let Some((seed, why)) = &found {
        eprintln!("{plant:?} caught by seed {seed}: {why}");
    }
    found
}

/// Runs shard `shard` of the seeds (those equal to it modulo `SHARDS`), so
/// the test runner spreads them over the machine's cores.
fn run_shard(shard: u64, test: &str) {
    let started = std::time::Instant::now();
    let seeds: Vec<u64> = seeds(SEEDS).into_iter().filter(|s| s % SHARDS == shard).collect();
    for &seed in &seeds {
        assert_passed(seed, &run_seed(seed, &[]), test);
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!("{} seeds in {secs:.1} s ({:.1} seeds/s)", seeds.len(), seeds.len() as f64 / secs);
}

/// Test runners run tests at once, each of these on a quarter of the seeds.
const SHARDS: u64 = 4;

#[test]
fn seeds_0_mod_4_keep_the_invariants_and_end_with_nothing_owed() {
    run_shard(0, "seeds_0_mod_4_keep_the_invariants_and_end_with_nothing_owed");
}

#[test]
fn seeds_1_mod_4_keep_the_invariants_and_end_with_nothing_owed() {
    run_shard(1, "seeds_1_mod_4_keep_the_invariants_and_end_with_nothing_owed");
}

#[test]
fn seeds_2_mod_4_keep_the_invariants_and_end_with_nothing_owed() {
    run_shard(2, "seeds_2_mod_4_keep_the_invariants_and_end_with_nothing_owed");
}

#[test]
fn seeds_3_mod_4_keep_the_invariants_and_end_with_nothing_owed() {
    run_shard(3, "seeds_3_mod_4_keep_the_invariants_and_end_with_nothing_owed");
}

/// The same seed twice: the same log, byte for byte (a digest of the store
/// after every step included).
#[test]
fn a_seed_replays_byte_for_byte() {
    replays((0..8).chain([1234]), On::Sqlite, "a_seed_replays_byte_for_byte");
}

/// Runs each seed twice on `on` and compares the logs.
fn replays(seeds: impl Iterator<Item = u64>, on: On, test: &str) {
    for seed in seeds {
        let [first, second] = [(); 2].map(|()| run_seed_on(seed, &[], on));
        assert_passed(seed, &first, test);
        let (first, second) = (first.log.join("\n"), second.log.join("\n"));
        assert!(first.len() > 1_000, "a short log: {first}");
        assert!(first == second, "seed {seed} ran two ways:\n{first}\n---\n{second}");
    }
}

/// A fence skipped (an attempt's end stored whatever claim holds the item
/// now, planted through the store's seam) is caught on some seed, by name.
#[test]
fn a_planted_skipped_fence_is_caught() {
    let (seed, why) = caught(Plant::SkipFence, 100).expect("no seed caught the skipped fence");
    assert!(why.contains("stored under a stale claim"), "seed {seed} failed otherwise: {why}");
}

/// A release added to the balances twice (planted through the store's
/// seam) is caught on some seed, by name.
#[test]
fn a_planted_double_release_is_caught() {
    let (seed, why) = caught(Plant::DoubleRelease, 20).expect("no seed caught the double release");
    assert!(why.contains("are not the ledger's sums"), "seed {seed} failed otherwise: {why}");
}

/// Seeds on PostgreSQL: fewer than on SQLite (each run makes a database of
/// its own, and every statement is a round trip), the same operations,
/// faults and checks, so the drivers' other dialect meets them too.
const POSTGRES_SEEDS: u64 = 12;

#[test]
fn on_postgres_seeds_keep_the_invariants_and_end_with_nothing_owed() {
    let test = "on_postgres_seeds_keep_the_invariants_and_end_with_nothing_owed";
    for seed in seeds(POSTGRES_SEEDS) {
        assert_passed(seed, &run_seed_on(seed, &[], On::Postgres), test);
    }
}

/// On PostgreSQL too, the same seed twice writes the same log, byte for byte.
#[test]
fn on_postgres_a_seed_replays_byte_for_byte() {
    replays([0, 1234].into_iter(), On::Postgres, "on_postgres_a_seed_replays_byte_for_byte");
}

/// The planted double release is caught on PostgreSQL as on SQLite.
#[test]
fn on_postgres_a_planted_double_release_is_caught() {
    let found = (0..POSTGRES_SEEDS)
        .find_map(|seed| run_seed_on(seed, &[Plant::DoubleRelease], On::Postgres).failure.map(|f| (seed, f)));
    let (seed, why) = found.expect("no seed caught the double release on PostgreSQL");
    assert!(why.contains("are not the ledger's sums"), "seed {seed} failed otherwise: {why}");
}
