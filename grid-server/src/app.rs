//! The wiring of one running server: every subsystem, built once at start
//! by `main` and shared. Transports (`http`) and workers reach what they need
//! through it; no subsystem depends on a transport.

use std::sync::Arc;

use tokio::sync::Notify;

use crate::compute::Compute;
use crate::config::ServeConfig;
use crate::signing::Signer;
use crate::store::Store;

/// Every subsystem of the running server.
pub struct App {
    /// Requests per credential, connection and body bounds (http/limits.rs).
    pub limits: crate::http::limits::Limits,
    /// API keys that checked out, kept so a request need not look its key up.
    pub keys: crate::http::auth::KeyCache,
    /// The clock drivers read (the system clock here; a virtual one in tests).
    pub clock: Arc<dyn crate::clock::Clock>,
    /// Wakes the due-time loop (`due.rs`) when a driver set a due time sooner
    /// than its next pass.
    pub due_wake: Arc<Notify>,
    pub store: Store,
    pub config: ServeConfig,
    pub signer: Signer,
    pub tokens: crate::tokens::TokenVerifier,
    pub compute: Compute,
    pub sessions: crate::sessions::Sessions,
    /// Calls to the other nodes, and the credential they share.
    pub peers: Arc<crate::peers::Peers>,
    /// The capture item driver: every item state change goes through it.
    pub items: Arc<crate::capture::driver::ItemDriver>,
    /// Woken when items become claimable, so idle workers start at once.
    pub queue_ready: Arc<Notify>,
    /// This node's capture workers (busy, claimed ahead) for the metrics.
    pub workers: Arc<crate::capture::Workers>,
    pub artifacts_dir: std::path::PathBuf,
    /// The browser pool of the browser scripts; `None` with `--browsers 0`
    /// or without a Chromium executable.
    pub browsers: Option<Arc<crate::browser::pool::BrowserPool>>,
}
