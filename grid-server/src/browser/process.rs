//! Starting and killing one Chromium: the capture pool's browsers and the
//! sessions' browsers start the same way, each in a sandbox of its own
//! (`sandbox.rs`) with its egress proxy and its DevTools pipe.
//!
//! **Invariants:**
//! - Every Chromium runs in a process group of its own, so killing the
//!   group takes the sandbox and everything in it; the sandbox's processes
//!   also die with bubblewrap (`--die-with-parent`, pid namespace).
//! - Every Chromium gets `PR_SET_PDEATHSIG(SIGKILL)`, so it dies with the
//!   thread that started it. Browsers are started from the runtime's worker
//!   threads, which live as long as the server: they die with the server,
//!   even on SIGKILL.
//! - A browser's profile lives in its sandbox's tmpfs: nothing of it is
//!   left on the host when the browser is gone, however it ended.
//! - A browser's only way to the network is its egress proxy, which lives
//!   exactly as long as this value.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use headless_chrome::protocol::cdp::Browser as CdpBrowser;
use tokio::process::Child;

use super::cdp::Connection;
use super::sandbox::{self, Jail, SandboxConfig, Spawned, PROXY_PORT};
use crate::egress::{EgressProxy, Policy};

/// Longest a fresh browser may take to answer its first DevTools call.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running, sandboxed Chromium; dropping it kills the whole sandbox.
pub struct BrowserProcess {
    pub child: Child,
    pub pid: i32,
    /// The DevTools connection over the browser's pipe.
    pub cdp: Connection,
    /// The browser-wide egress proxy (its decisions are the evidence of a
    /// session's network attestation).
    pub egress: EgressProxy,
    /// `Browser.getVersion` as the browser answered it at start.
    pub version: CdpBrowser::GetVersionReturnObject,
    jail: Jail,
}

/// Starts `executable` with `flags` in a new sandbox whose only way out is
/// an egress proxy under `policy`, and waits for its first DevTools answer.
/// `downloads`: a host folder the browser saves downloads in (sessions;
/// see `sandbox::start`).
pub async fn start(
    sandbox_config: &SandboxConfig,
    executable: &Path,
    flags: &[String],
    env: &[(String, String)],
    policy: Arc<dyn Policy>,
    downloads: Option<&std::os::fd::OwnedFd>,
) -> std::io::Result<BrowserProcess> {
    let mut flags = flags.to_vec();
    // Loopback too: Chromium bypasses proxies for it unless told.
    flags.push(format!("--proxy-server=http://127.0.0.1:{PROXY_PORT}"));
    flags.push("--proxy-bypass-list=<-loopback>".into());
    let (jail, spawned) = sandbox::start(sandbox_config, executable, &flags, env, downloads).await?;
    let Spawned { mut child, pid, to_browser, from_browser, proxy_listener, stderr_tail } = spawned;
    let egress = EgressProxy::serve(proxy_listener, policy)?;
    let cdp = Connection::over_pipe(to_browser, from_browser)?;
    let version = match tokio::time::timeout(START_TIMEOUT, cdp.call(None, CdpBrowser::GetVersion(None))).await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            sandbox::kill_group(pid);
            let status = child.try_wait().ok().flatten();
            return Err(std::io::Error::other(format!(
                "chromium did not answer Browser.getVersion: {e} (exit: {status:?}; stderr: {})",
                stderr_tail.text()
            )));
        }
        Err(_) => {
            sandbox::kill_group(pid);
            return Err(std::io::Error::other(format!(
                "chromium did not answer within {START_TIMEOUT:?} (stderr: {})",
                stderr_tail.text()
            )));
        }
    };
    let mut jail = jail;
    jail.close_portal();
    Ok(BrowserProcess { child, pid, cdp, egress, version, jail })
}

impl BrowserProcess {
    /// Binds `127.0.0.1:0` inside the browser's network namespace, for an
    /// egress proxy of one browser context.
    pub fn listen(&self) -> std::io::Result<tokio::net::TcpListener> {
        self.jail.listen(0)
    }

    /// The uid the browser runs as.
    pub fn uid(&self) -> u32 {
        self.jail.uid()
    }

    /// Kills the browser and every process it started.
    pub fn stop(self) {
        drop(self);
    }

    /// Kills the process group now; the process is reaped on drop.
    pub fn kill(&self) {
        sandbox::kill_group(self.pid);
    }

    /// Running and not a zombie.
    pub fn alive(&self) -> bool {
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            // The state follows the parenthesised command name.
            Ok(stat) => {
                stat.rsplit_once(')').map(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])).unwrap_or(false)
            }
            Err(_) => false,
        }
    }
}

impl Drop for BrowserProcess {
    fn drop(&mut self) {
        sandbox::kill_group(self.pid);
        let _ = self.child.start_kill();
    }
}
