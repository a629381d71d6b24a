//! Starting and killing one Chromium process: the capture pool's browsers
//! and the sessions' browsers start the same way.
//!
//! **Invariants:**
//! - Every Chromium runs in a process group of its own, so killing the
//!   group takes its renderers, GPU and utility processes with it.
//! - Every Chromium gets `PR_SET_PDEATHSIG(SIGKILL)`, so it dies with the
//!   thread that started it. Browsers are started from the runtime's worker
//!   threads, which live as long as the server: they die with the server,
//!   even on SIGKILL.
//! - Each has a throwaway user-data dir, removed when the process is
//!   dropped.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// Longest Chromium may take to announce its DevTools endpoint.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running Chromium and its throwaway profile directory; dropping it
/// kills the whole process group.
pub struct BrowserProcess {
    pub child: Child,
    pub pid: i32,
    pub port: u16,
    /// `/devtools/browser/<id>`
    pub ws_path: String,
    // Held for its drop: removes the directory.
    _user_data_dir: tempfile::TempDir,
}

/// Proxy variables Chromium would otherwise take from the server's
/// environment on Linux: a browser reaches the network directly or through
/// the proxy its flags or browser context name (the grid's egress proxy).
pub const PROXY_VARIABLES: [&str; 8] =
    ["http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"];

fn command(executable: &Path, flags: &[String], env: &[(String, String)], user_data_dir: &Path) -> Command {
    let mut cmd = Command::new(executable);
    cmd.args(flags)
        .arg(format!("--user-data-dir={}", user_data_dir.display()))
        .arg("about:blank")
        .envs(env.iter().map(|(k, v)| (k, v)));
    for name in PROXY_VARIABLES {
        cmd.env_remove(name);
    }
    cmd
}

/// Starts `executable` with `flags` (which must include
/// `--remote-debugging-port=0`) and a fresh user-data dir under
/// `runtime_dir` named `{prefix}…`, and waits until its DevTools endpoint is
/// announced (the `DevToolsActivePort` file Chromium writes there).
pub async fn start(
    executable: &Path,
    flags: &[String],
    env: &[(String, String)],
    runtime_dir: &Path,
    prefix: &str,
) -> std::io::Result<BrowserProcess> {
    let user_data_dir = tempfile::Builder::new().prefix(prefix).tempdir_in(runtime_dir)?;
    let mut cmd = command(executable, flags, env, user_data_dir.path());
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).process_group(0).kill_on_drop(true);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let pid = child.id().unwrap_or(0) as i32;
    let port_file = user_data_dir.path().join("DevToolsActivePort");
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(&port_file) {
            let mut lines = text.lines();
            if let (Some(port), Some(path)) = (lines.next().and_then(|p| p.parse().ok()), lines.next()) {
                return Ok(BrowserProcess {
                    child,
                    pid,
                    port,
                    ws_path: path.to_string(),
                    _user_data_dir: user_data_dir,
                });
            }
        }
        if let Some(status) = child.try_wait()? {
            return Err(std::io::Error::other(format!("chromium exited during start: {status}")));
        }
        if started.elapsed() > START_TIMEOUT {
            kill_group(pid);
            return Err(std::io::Error::other(format!(
                "chromium did not open its DevTools port within {START_TIMEOUT:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

impl BrowserProcess {
    /// The browser's DevTools WebSocket.
    pub fn ws_url(&self) -> String {
        format!("ws://127.0.0.1:{}{}", self.port, self.ws_path)
    }

    /// Kills the browser and every process it started.
    pub fn stop(self) {
        drop(self);
    }

    /// Kills the process group now; the process is reaped on drop.
    pub fn kill(&self) {
        kill_group(self.pid);
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
        kill_group(self.pid);
        let _ = self.child.start_kill();
        // The user-data dir goes with its TempDir.
    }
}

fn kill_group(pid: i32) {
    if pid > 0 {
        // SAFETY: sends a signal to the process group this module created.
        unsafe {
            libc::killpg(pid, libc::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chromium_gets_no_proxy_variables_of_the_server() {
        let env = [("TZ".to_string(), "UTC".to_string())];
        let cmd = command(Path::new("/usr/bin/chromium"), &[], &env, Path::new("/tmp/u"));
        let envs: Vec<_> = cmd.as_std().get_envs().collect();
        for name in PROXY_VARIABLES {
            assert!(envs.contains(&(std::ffi::OsStr::new(name), None)), "{name} is not removed: {envs:?}");
        }
        assert!(envs.contains(&(std::ffi::OsStr::new("TZ"), Some(std::ffi::OsStr::new("UTC")))));
    }
}
