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
pub async fn run(app: Arc<Node>, mut shutdown: watch::Receiver<bool>) {
    let config = &app.config;
    let mut tick = tokio::time::interval((config.lease / 3).max(Duration::from_millis(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        beat(&app).await;
        take_over(&app).await;
        // What another node decided for work running here, should its
        // call not have arrived.
        crate::sessions::reconcile(&app.sessions).await;
        if let Err(e) = app.jobs.stop_recorded().await {
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

async fn beat(app: &Node) {
    let config = &app.config;
    let (name, now) = (config.name.clone(), app.clock.now());
    match app.store.write(move |tx| nodes::heartbeat(tx, &name, now)).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(node = %config.name, "this node was taken for dead and its work taken over; registering again");
            if let Err(e) = register(&app.store, config, now).await {
                tracing::error!(error = %e, "node not registered again");
            }
        }
        Err(e) => tracing::warn!(error = %e, "heartbeat not written; the next one tries again"),
    }
}

async fn take_over(app: &Node) {
    let before = nodes::live_after(app.clock.now(), app.config.lease);
    let me = app.config.name.clone();
    let dead = match app.store.read(move |c| nodes::dead(c, &me, before)).await {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "dead nodes not read");
            return;
        }
    };
    for (node, last_heartbeat) in dead {
        let items = match app.items.recover_node(&node).await {
            Ok(n) => n,
            Err(e) => {
                tracing::error!(%node, error = %e, "items of a dead node not taken over; the next pass tries again");
                continue;
            }
        };
        app.sessions.recover(&node, Some(last_heartbeat)).await;
        let jobs = match app.jobs.take_over(&node).await {
            Ok(n) => n,
            Err(e) => {
                tracing::error!(%node, error = %e, "jobs of a dead node not taken over; the next pass tries again");
                continue;
            }
        };
        let name = node.clone();
        if let Err(e) = app.store.write(move |tx| nodes::remove(tx, &name)).await {
            tracing::warn!(%node, error = %e, "dead node not removed; the next pass takes it over again");
        }
        tracing::warn!(%node, last_heartbeat = %last_heartbeat.to_iso(), items, jobs, "took over a dead node's work");
    }
}
