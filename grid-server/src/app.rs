//! The wiring of one running server, built once at start by `main` and
//! shared by the program's top: the transports (`http`) and the API's
//! dispatch (`api`) reach what they need through it. The runners below them
//! (the worker pool, the session tasks, the node's heartbeat, the engine's
//! health loop) get handles of their own from
//! `main` instead, and no module below the top names `App`.

use std::sync::Arc;

use tokio::sync::Notify;

use crate::compute::Compute;
use crate::config::ServeConfig;
use crate::signing::Signer;
use crate::store::Store;

/// Every subsystem of the running server.
pub struct App {
    /// The clock drivers read (the system clock here; a virtual one in tests).
    pub clock: Arc<dyn crate::clock::Clock>,
    /// Wakes the due-time loop (`due.rs`) when a driver set a due time sooner
    /// than its next pass.
    pub due_wake: Arc<Notify>,
    pub store: Store,
    pub config: ServeConfig,
    pub signer: Signer,
    pub tokens: crate::tokens::TokenVerifier,
    pub compute: Arc<Compute>,
    pub sessions: Arc<crate::sessions::Sessions>,
    /// Calls to the other nodes, and the credential they share.
    pub peers: Arc<crate::peers::Peers>,
    /// The capture item driver: every item state change goes through it.
    pub items: Arc<crate::capture::driver::ItemDriver>,
    /// The worker pool, which one-call captures run their attempt beside.
    pub runner: Arc<crate::capture::Runner>,
    pub artifacts_dir: std::path::PathBuf,
    /// Secrets at rest, sealed per account (`vault.rs`).
    pub vault: Arc<crate::vault::Vault>,
}
