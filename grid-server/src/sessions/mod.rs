//! Leased browser sessions: one Chromium per lease, reached through the
//! grid's CDP proxy with a per-session token. This module holds the
//! sessions' handle (`Sessions`) and its start and end; the rest lives in
//! modules named for what they hold:
//!
//! - `driver.rs`: every move of a session (the session machine, its
//!   settlement and its next due time in one transaction), then its
//!   effects. A lease is the machine's first step through it; its
//!   `StartBrowser` effect hands the browser to the session tasks.
//!   Expiries and launch deadlines are fired from the stored due time by
//!   the due-time loop, not by the task; however the task ends, its
//!   session ends.
//! - `task.rs`: the session task, launch to loss: it launches (or takes a
//!   warm) browser, attests it, marks it running (the meter starts at the
//!   browser's first ready moment) and watches it for loss.
//! - `warm.rs`: browsers started and attested ahead of a lease.
//! - `attest.rs`: a started browser set up and its attestation read from
//!   inside; `launch.rs`: the launch with the profile, the lease's
//!   overrides and its network.
//! - `contexts.rs`: a lease's persistent context: its state loaded before
//!   the lessee connects, its save points, its save at a `persist`
//!   session's end, and the wait of the next lease for that save;
//!   `context_state.rs`: that state read from and written into a browser.
//! - `downloads.rs`, `keeper.rs`: a session's download folder on the host
//!   and the grid's own DevTools session that fills and bounds it (and
//!   applies a lease's viewport to every page); `recorder.rs`: a lease's
//!   recording, a replay page kept beside those files.
//! - `live.rs`: a live session as the transports reach it; `gate.rs`,
//!   `tools.rs`, `journal.rs`: the CDP gate and the MCP browser tools.

pub mod attest;
pub mod context_state;
pub mod contexts;
pub mod downloads;
pub mod driver;
pub mod gate;
pub mod journal;
pub mod keeper;
pub mod launch;
pub mod live;
pub mod recorder;
pub mod task;
pub mod tools;
pub mod warm;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use grid_core::catalog::Profile;
use grid_core::error::ApiError;
use grid_core::time::Millis;
use grid_core::wire::proxy::UpstreamProxy;
use tokio::sync::mpsc;

use crate::browser::sandbox::SandboxConfig;
use crate::clock::Clock;
use crate::egress::EgressPolicy;
use crate::peers::Peers;
use crate::store::Store;
use crate::vault::Vault;
use contexts::SaveWaits;
use downloads::{DownloadConfig, Downloads};
use driver::SessionDriver;
use launch::BrowserBuild;
use live::Live;
use warm::Warm;

#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub chromium: PathBuf,
    pub disabled: bool,
    /// Browsers kept started per profile (without network policy), so a
    /// lease does not wait for a launch.
    pub warm: usize,
    pub egress: EgressPolicy,
    /// A non-public address the network attestation must find refused.
    pub probe_url: String,
    pub sandbox: SandboxConfig,
    /// The grid's ordinary network access (sessions without a policy):
    /// private networks too when set.
    pub allow_private_networks: bool,
    /// Where session downloads are kept (`DATA_DIR`), their limit and grace.
    pub data_dir: PathBuf,
    pub downloads: DownloadConfig,
    /// The bounds of a session's recording (`recorder.rs`).
    pub recording: grid_core::recording::Bounds,
    /// Bound of a context's sealed state (`context_state.rs`).
    pub context_max_bytes: u64,
    /// How often a live `persist` session's context gets a save point
    /// (`contexts::SavePoints`); none when `None`.
    pub context_save_every: Option<Duration>,
    /// The grid's default upstream proxy (`--upstream-proxy`, credentials
    /// included) for leases that name none (docs/proxies.md).
    pub upstream_proxy: Option<UpstreamProxy>,
}

/// The session tasks' handle: everything they use (their configuration,
/// the driver, the download folders, the warm browsers), built once by
/// `main` and shared with the transports.
pub struct Sessions {
    pub config: SessionConfig,
    /// This node's name (`--node`): its sessions are those recovery and
    /// shutdown end.
    node: String,
    /// Every move of a session and every effect of one.
    pub driver: Arc<SessionDriver>,
    /// The browsers the driver asks to start, until `run_starts` takes them.
    starts: Mutex<Option<mpsc::UnboundedReceiver<driver::Start>>>,
    /// Every session's download folder.
    pub downloads: Arc<Downloads>,
    build: OnceLock<Result<BrowserBuild, String>>,
    warm: Mutex<HashMap<Profile, Vec<Warm>>>,
    /// The recordings of this process's sessions, each writing its page
    /// once its browser is gone: shutdown waits for them.
    recorders: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Where contexts' states are loaded from and saved back to.
    store: Store,
    /// Seals and opens contexts' states, opens a lease's sealed proxy
    /// credentials.
    vault: Arc<Vault>,
    /// The leases waiting for a context's last session to save it.
    saves: SaveWaits,
}

impl Sessions {
    pub fn new(
        config: SessionConfig,
        store: Store,
        clock: Arc<dyn Clock>,
        node: &str,
        node_lease: Duration,
        peers: Arc<Peers>,
        vault: Arc<Vault>,
    ) -> Sessions {
        let (driver, starts) = SessionDriver::new(store.clone(), clock, node, node_lease, peers);
        Sessions {
            node: node.into(),
            downloads: Arc::new(Downloads::new(&config.data_dir, config.downloads)),
            config,
            driver: Arc::new(driver),
            starts: Mutex::new(Some(starts)),
            build: OnceLock::new(),
            warm: Mutex::new(HashMap::new()),
            recorders: Mutex::new(Vec::new()),
            store,
            vault,
            saves: SaveWaits::default(),
        }
    }

    fn build(&self) -> Result<&BrowserBuild, ApiError> {
        self.build
            .get_or_init(|| BrowserBuild::inspect(&self.config.chromium).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| {
                tracing::error!(chromium = %self.config.chromium.display(), error = %e, "browser unavailable");
                ApiError::Internal
            })
    }

    fn take_starts(&self) -> Option<mpsc::UnboundedReceiver<driver::Start>> {
        self.starts.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// A live session's browser in this process, as its CDP endpoint serves it.
    pub fn live(&self, id: &str) -> Option<Live> {
        self.driver.browsers().live(id)
    }
}

/// On start: sessions left live by the last run end (see
/// `SessionDriver::recover`); `last_alive` is its last settlement heartbeat.
pub async fn recover(sessions: &Sessions, last_alive: Option<Millis>) {
    sessions.driver.recover(&sessions.node, last_alive).await;
}

/// On shutdown: every live session is lost now, its browser stopped; the
/// warm browsers are stopped too.
pub async fn shutdown(sessions: &Sessions) {
    sessions.driver.shutdown(&sessions.node).await;
    warm::stop_all(sessions);
    // Their browsers stopped, the recordings write their pages.
    recorder::written(sessions).await;
}
