//! Debian's squid (`/usr/sbin/squid`, Debian package `squid`), run by a
//! test as the upstream proxy users actually have: its configuration is
//! Debian's as shipped (`/etc/squid/squid.conf`, which includes
//! `/etc/squid/conf.d/*.conf`), with exactly these changes:
//!
//! - `http_port 3128` becomes `http_port 127.0.0.1:<a free port>`;
//! - `coredump_dir /var/spool/squid` becomes `coredump_dir <temp dir>`;
//! - `pid_filename`, `cache_log` and `access_log` are added, pointing into
//!   the temp dir (the shipped file leaves them at their built-in defaults
//!   under /run and /var/log/squid).
//!
//! Every `acl` and `http_access` rule is untouched: localhost may use the
//! proxy, ports outside `Safe_ports` are refused, and CONNECT is allowed to
//! port 443 only (so a plain-HTTP target on another port can only be
//! reached in absolute form, as browsers send it).

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const SQUID: &str = "/usr/sbin/squid";
const SHIPPED_CONF: &str = "/etc/squid/squid.conf";
const START_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Squid {
    port: u16,
    child: Child,
    dir: tempfile::TempDir,
}

impl Squid {
    /// Starts squid in the foreground (`-N`) and waits until it listens;
    /// fails the test, saying how to get it, when squid is not installed.
    pub fn start() -> Squid {
        assert!(
            Path::new(SQUID).exists() && Path::new(SHIPPED_CONF).exists(),
            "Debian's squid is not installed ({SQUID}, {SHIPPED_CONF}): install the Debian package squid \
             (scripts/test.sh does: need_pkg squid)"
        );
        let dir = tempfile::tempdir().expect("squid: a temp dir");
        // Run as root, squid drops to its own user (proxy), which writes the logs.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).expect("squid: chmod temp dir");
        let port = crate::server::free_port();
        let conf = dir.path().join("squid.conf");
        std::fs::write(&conf, config(port, dir.path())).expect("squid: write its configuration");
        let child = Command::new(SQUID)
            .arg("-N")
            .arg("-f")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(dir.path().join("stderr.log")).expect("squid: stderr file")))
            .spawn()
            .unwrap_or_else(|e| panic!("squid: cannot start {SQUID}: {e}"));
        let mut squid = Squid { port, child, dir };
        squid.wait_listening();
        squid
    }

    fn wait_listening(&mut self) {
        crate::wait::block_until("squid listening", START_TIMEOUT, || {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("squid exited ({status}) before listening:\n{}", self.logs());
            }
            Err(format!("no listener\n{}", self.logs()))
        })
    }

    /// `http://127.0.0.1:<port>`, for a `proxy.server`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Squid's access log so far (one line a request: `... GET http://... `).
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.path("access.log")).unwrap_or_default()
    }

    /// Its stderr, cache log and access log, for a failure message.
    pub fn logs(&self) -> String {
        let read = |name: &str| std::fs::read_to_string(self.path(name)).unwrap_or_default();
        format!(
            "--- squid stderr\n{}\n--- cache.log\n{}\n--- access.log\n{}",
            read("stderr.log"),
            read("cache.log"),
            read("access.log")
        )
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for Squid {
    fn drop(&mut self) {
        // SIGKILL: squid's own shutdown waits `shutdown_lifetime` (30 s).
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Debian's shipped configuration with the port and paths moved (see the
/// module's comment); nothing else changed.
fn config(port: u16, dir: &Path) -> String {
    let shipped = std::fs::read_to_string(SHIPPED_CONF).expect("squid: read the shipped configuration");
    let mut moved_port = false;
    let mut out: Vec<String> = shipped
        .lines()
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.first() {
                Some(&"http_port") => {
                    moved_port = true;
                    format!("http_port 127.0.0.1:{port}")
                }
                Some(&"coredump_dir") => format!("coredump_dir {}", dir.display()),
                _ => line.to_string(),
            }
        })
        .collect();
    assert!(moved_port, "squid: {SHIPPED_CONF} has no http_port line to move");
    out.push(format!("pid_filename {}", dir.join("squid.pid").display()));
    out.push(format!("cache_log stdio:{}", dir.join("cache.log").display()));
    out.push(format!("access_log stdio:{} squid", dir.join("access.log").display()));
    out.join("\n") + "\n"
}
