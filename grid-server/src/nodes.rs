//! This node among the nodes sharing one store (docs/scale-out.md): its
//! heartbeat, and the takeover of nodes whose heartbeat stopped.
//!
//! A node is dead when its heartbeat is older than the lease. Whichever
//! live node sees that first takes its work over, each part through its
//! driver: its active capture items go back to the queue (the interrupted
//! attempt not counted; the fencing token keeps a node that was only paused
//! from publishing or charging them), its live sessions end as lost at its
//! last heartbeat, its job attempts end as evicted (free, replayed within
//! their retries). Then its row is removed; a node that finds its own row
//! gone was taken for dead and registers again.
//!
//! Each heartbeat also brings what runs here in line with what other nodes
//! decided for it (a session released or a job cancelled through another
//! node), in case their call (`peers.rs`) did not arrive.

use std::sync::Arc;
use std::time::Duration;

use grid_core::time::Millis;
use tokio::sync::watch;

use crate::capture::driver::ItemDriver;
use crate::clock::Clock;
use crate::compute::driver::JobDriver;
use crate::sessions::driver::SessionDriver;
use crate::store::{nodes, Store, StoreError};

/// How this node takes part in the grid.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub name: String,
    /// Where the other nodes reach this one.
    pub advertise_url: Option<String>,
    /// A node whose heartbeat is older than this is dead.
    pub lease: Duration,
    /// What it offers: session slots and engine capacity.
    pub offer: nodes::Offer,
}

/// The node's name when `--node` is not given: the host's name.
pub fn default_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "local".to_string())
}

/// Registers the node, alive now.
pub async fn register(store: &Store, config: &NodeConfig, now: Millis) -> Result<(), StoreError> {
    let (name, url, offer) = (config.name.clone(), config.advertise_url.clone(), config.offer);
    store.write(move |tx| nodes::register(tx, &name, url.as_deref(), offer, now)).await
}

/// What the heartbeat and the takeover use: the store and the clock, and
/// the three drivers a dead node's work goes back through. Built by `main`.
pub struct Node {
    pub config: NodeConfig,
    pub store: Store,
    pub clock: Arc<dyn Clock>,
    pub items: Arc<ItemDriver>,
    pub sessions: Arc<SessionDriver>,
    pub jobs: JobDriver,
}

/// Beats every third of the lease and takes over dead nodes, until shutdown.
pub async fn run(this_node: Arc<Node>, mut shutdown: watch::Receiver<bool>) {
    let config = &this_node.config;
    let mut tick = tokio::time::interval((config.lease / 3).max(Duration::from_millis(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        beat(&this_node).await;
        take_over(&this_node).await;
        // What another node decided for work running here, should its
        // call not have arrived.
        crate::sessions::task::reconcile(&this_node.sessions).await;
        if let Err(e) = this_node.jobs.stop_recorded().await {
            tracing::warn!(error = %e, "recorded job stops not checked; the next heartbeat tries again");
        }
    }
}

/// This node's last heartbeat before it registers again (a restart): how
/// long it is known to have been alive.
pub async fn last_heartbeat(store: &Store, config: &NodeConfig) -> Result<Option<Millis>, StoreError> {
    let name = config.name.clone();
    store.read(move |c| nodes::heartbeat_of(c, &name)).await
}

pub(crate) async fn beat(this_node: &Node) {
    let config = &this_node.config;
    let (name, now) = (config.name.clone(), this_node.clock.now());
    // One row written, nothing checked: no grid-wide order, so a heartbeat
    // never waits for the capture queue's transactions in flight.
    match this_node.store.write_rows(move |tx| nodes::heartbeat(tx, &name, now)).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(node = %config.name, "this node was taken for dead and its work taken over; registering again");
            if let Err(e) = register(&this_node.store, config, now).await {
                tracing::error!(error = %e, "node not registered again");
            }
        }
        Err(e) => tracing::warn!(error = %e, "heartbeat not written; the next one tries again"),
    }
}

pub(crate) async fn take_over(this_node: &Node) {
    let before = nodes::live_after(this_node.clock.now(), this_node.config.lease);
    let me = this_node.config.name.clone();
    let dead = match this_node.store.read(move |c| nodes::dead(c, &me, before)).await {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "dead nodes not read");
            return;
        }
    };
    for (node, last_heartbeat) in dead {
        let items = match this_node.items.recover_node(&node).await {
            Ok(n) => n,
            Err(e) => {
                tracing::error!(%node, error = %e, "items of a dead node not taken over; the next pass tries again");
                continue;
            }
        };
        this_node.sessions.recover(&node, Some(last_heartbeat)).await;
        let jobs = match this_node.jobs.take_over(&node).await {
            Ok(n) => n,
            Err(e) => {
                tracing::error!(%node, error = %e, "jobs of a dead node not taken over; the next pass tries again");
                continue;
            }
        };
        let name = node.clone();
        if let Err(e) = this_node.store.write(move |tx| nodes::remove(tx, &name)).await {
            tracing::warn!(%node, error = %e, "dead node not removed; the next pass takes it over again");
        }
        tracing::warn!(%node, last_heartbeat = %last_heartbeat.to_iso(), items, jobs, "took over a dead node's work");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::driver::Wake;
    use crate::compute::driver::tests::Grid;
    use crate::peers::Peers;
    use grid_core::item::{Backoff, ItemState};
    use grid_core::session::{EndCause, Event as SessionEvent, SessionStatus};
    use grid_core::wire::job::{JobPhase, TerminationReason};
    use grid_core::wire::session::SessionSubmission;

    const LEASE: Duration = Duration::from_secs(30);

    fn item_driver(g: &Grid, node: &str) -> Arc<ItemDriver> {
        let wake = Wake::default();
        Arc::new(ItemDriver::start(g.store.clone(), g.clock.clone(), Backoff { base_ms: 1_000 }, wake, node).unwrap())
    }

    fn session_driver(g: &Grid, node: &str) -> Arc<SessionDriver> {
        let peers = Arc::new(Peers::new(g.store.clone(), "credential".into()));
        // The browsers a lease asks for are not started here.
        Arc::new(SessionDriver::new(g.store.clone(), g.clock.clone(), node, LEASE, peers).0)
    }

    fn node(g: &Grid, name: &str) -> Node {
        Node {
            config: NodeConfig { name: name.into(), advertise_url: None, lease: LEASE, offer: Default::default() },
            store: g.store.clone(),
            clock: g.clock.clone(),
            items: item_driver(g, name),
            sessions: session_driver(g, name),
            jobs: g.node_driver(name),
        }
    }

    /// A node whose heartbeat is older than the lease is taken over by the
    /// next live node's pass: its claimed item back in the queue with the
    /// attempt uncounted, its running session lost at its last heartbeat,
    /// its job attempt evicted (free, replayed), its row removed. A node
    /// whose heartbeat is within the lease is left alone.
    #[tokio::test]
    async fn a_dead_nodes_items_sessions_and_jobs_are_taken_over_and_its_row_removed() {
        let g = Grid::new();
        let job = g.running(1).await;
        let t0 = g.clock.now();
        let offer = nodes::Offer { sessions: 2, ..Default::default() };
        g.store
            .write_blocking(move |tx| {
                nodes::register(tx, "n1", None, offer, t0)?;
                nodes::register(tx, "n2", None, Default::default(), t0)
            })
            .unwrap();
        // n1's work: a claimed item and a running session.
        let n1 = node(&g, "n1");
        crate::store::items::tests::submit(&g.store, &g.caller, 2, None).unwrap();
        let claimed = n1.items.claim_batch(1, usize::MAX).await.unwrap();
        assert_eq!(claimed.len(), 1);
        let item = claimed[0].id.clone();
        let sub = SessionSubmission {
            ttl_minutes: 30,
            ..SessionSubmission::default_for(grid_core::catalog::Profile::DEFAULT)
        };
        let leased =
            n1.sessions.lease(&g.caller, sub, None, None, crate::sessions::driver::tests::reach()).await.unwrap();
        let crate::store::idempotency::Outcome::Performed(session, _) = leased else { panic!("replayed") };
        n1.sessions.apply(&session.id, SessionEvent::Ready, t0.plus_ms(1_000)).await.unwrap();
        // n1's last heartbeat.
        let last = t0.plus_ms(2_000);
        assert!(g.store.write_blocking(move |tx| nodes::heartbeat(tx, "n1", last)).unwrap());

        // Within the lease: n2's pass leaves n1 alone.
        let n2 = node(&g, "n2");
        g.clock.advance(20_000);
        beat(&n2).await;
        take_over(&n2).await;
        let held = g.store.read_blocking(move |c| nodes::heartbeat_of(c, "n1")).unwrap();
        assert_eq!(held, Some(last), "a live node is not taken over");

        // Past the lease: n1 is dead.
        g.clock.advance(13_000);
        beat(&n2).await;
        take_over(&n2).await;
        let id = item.clone();
        let row = g.store.read_blocking(move |c| crate::store::items::load_item(c, &id)).unwrap().unwrap();
        assert_eq!(row.item.state, ItemState::Waiting, "the item is back in the queue");
        assert_eq!(row.item.attempts_made, 0, "the interrupted attempt is not counted");
        let id = session.id.clone();
        let s = g.store.read_blocking(move |c| crate::store::sessions::load(c, &id)).unwrap().unwrap();
        assert_eq!(s.session.status, SessionStatus::Running, "it ran until lost");
        let ended = s.session.ended.expect("ended");
        assert_eq!((ended.cause, ended.at), (EndCause::Lost, last), "lost at its node's last heartbeat");
        let j = g.until(&job, "replayed", |r| r.job.attempt_number() == 2).await;
        assert_eq!(j.job.phase, JobPhase::Queued);
        assert_eq!(j.job.attempts[0].termination.as_ref().unwrap().reason, TerminationReason::PlatformEvicted);
        let (dead, me) =
            g.store.read_blocking(|c| Ok((nodes::heartbeat_of(c, "n1")?, nodes::heartbeat_of(c, "n2")?))).unwrap();
        assert_eq!(dead, None, "the dead node's row is removed");
        assert_eq!(me, Some(g.clock.now()), "the live node beat at its clock's time");
    }

    /// A node that finds its own row gone (taken for dead while paused)
    /// registers again on its next beat.
    #[tokio::test]
    async fn a_node_taken_for_dead_registers_again_on_its_next_beat() {
        let g = Grid::new();
        let n2 = node(&g, "n2");
        let t0 = g.clock.now();
        register(&g.store, &n2.config, t0).await.unwrap();
        g.store.write_blocking(|tx| nodes::remove(tx, "n2")).unwrap();
        g.clock.advance(5_000);
        beat(&n2).await;
        let beat_at = g.store.read_blocking(|c| nodes::heartbeat_of(c, "n2")).unwrap();
        assert_eq!(beat_at, Some(t0.plus_ms(5_000)));
    }
}
