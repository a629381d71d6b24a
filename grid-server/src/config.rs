//! The `serve` configuration, built once from the command line.

use std::path::PathBuf;
use std::time::Duration;

use grid_core::item::Backoff;

#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub data_dir: PathBuf,
    /// The server's public address, without a trailing slash.
    pub base_url: String,
    /// The OpenID issuer named in the protected-resource metadata.
    pub auth_url: Option<String>,
    pub settlement_interval: Duration,
    /// Lets captures reach loopback, private and link-local addresses.
    pub allow_private_networks: bool,
    /// Capture workers: how many items run at once.
    pub workers: usize,
    pub backoff: Backoff,
    /// How long a credential check may wait for the database.
    pub accounting_timeout: Duration,
    /// How long in-flight items may take to finish after SIGTERM.
    pub shutdown_grace: Duration,
    pub max_sessions: u32,
    /// Chromium processes of the browser pool; 0 runs no pool (browser
    /// scripts then fail terminally).
    pub browsers: usize,
    /// Items one Chromium runs at once.
    pub pages_per_browser: usize,
    /// The Chromium executable.
    pub chromium: std::path::PathBuf,
    /// How every browser is sandboxed.
    pub sandbox: crate::browser::sandbox::SandboxConfig,
}
