//! The `serve` configuration, built once from the command line.

use std::path::PathBuf;
use std::time::Duration;

use grid_core::item::Backoff;

#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// This node's name among the nodes sharing the store (`--node`).
    pub node: String,
    /// A node whose heartbeat is older than this is dead (`--node-lease-secs`).
    pub node_lease: std::time::Duration,
    pub data_dir: PathBuf,
    /// The server's public address, without a trailing slash.
    pub base_url: String,
    /// The OpenID issuer named in the protected-resource metadata.
    pub auth_url: Option<String>,
    /// Lets captures reach loopback, private and link-local addresses.
    pub allow_private_networks: bool,
    /// The ceiling of this node's capture workers (`--max-workers`): how
    /// many items may run at once. Workers start on demand up to it.
    pub max_workers: usize,
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
    /// Pool pages one account may hold at once on this node (0: no cap
    /// beyond its turn).
    pub max_pages_per_account: usize,
    /// Pool browsers kept started for accounts holding none.
    pub spare_browsers: usize,
    /// Time an item may take beyond its `timeoutMs` before its browser
    /// counts as hung (`capture::scripts::COLLECT_ALLOWANCE`; shorter only in tests).
    pub collect_allowance: std::time::Duration,
    /// The Chromium executable.
    pub chromium: std::path::PathBuf,
    pub headless_shell: std::path::PathBuf,
    /// How every browser is sandboxed.
    pub sandbox: crate::browser::sandbox::SandboxConfig,
    /// Browser origins (`scheme://host[:port]`, as `origin` below writes
    /// them) whose pages may call POST /mcp; `*` lets any. A request without
    /// an `Origin` header is not from a page and is not checked.
    pub mcp_origins: Vec<String>,
}

/// An `Origin` as the `Origin` header writes it: lower-case scheme and
/// host, the port only when it is not the scheme's default, no path. `*`
/// stays `*`.
pub fn origin(s: &str) -> Result<String, String> {
    if s == "*" {
        return Ok(s.into());
    }
    let u = url::Url::parse(s).map_err(|e| format!("{s:?} is not an origin ({e}); write scheme://host[:port]"))?;
    let bare = u.path() == "/" && u.query().is_none() && u.fragment().is_none() && u.username().is_empty();
    if !bare {
        return Err(format!("{s:?} is not an origin: write scheme://host[:port], without a path"));
    }
    match u.origin() {
        url::Origin::Tuple(..) => Ok(u.origin().ascii_serialization()),
        url::Origin::Opaque(_) => Err(format!("{s:?} is not an origin: write scheme://host[:port]")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_written_as_browsers_send_them() {
        assert_eq!(origin("HTTPS://App.Example:443").unwrap(), "https://app.example");
        assert_eq!(origin("http://localhost:6274/").unwrap(), "http://localhost:6274");
        assert_eq!(origin("*").unwrap(), "*");
        assert!(origin("https://app.example/path").is_err());
        assert!(origin("app.example").is_err());
        assert!(origin("file:///x").is_err());
    }
}
