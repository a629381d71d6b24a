//! `GridServer`: the real `grid-server` binary on a temp data dir and a
//! free port of 127.0.0.1, with raw HTTP helpers and admin subcommands.
//!
//! The server's stderr (its tracing log) goes to a file; when a test panics
//! while a `GridServer` is alive, its drop prints the log's last lines.

use std::cell::RefCell;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::bins::{grid_server_bin, scrub_env};
use crate::http::{http_client, http_client_trusting, Resp};
use crate::store::{cluster_url, test_store, Database, TestStore};
use crate::wait::{block_until, wait_for, wait_until, Within};

/// How long to wait for `{"event":"listening"}` after spawning.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `wait_settled` watches a settled account's ledger hold still.
/// Every charge and release is written by the transaction that ends its
/// work, so nothing is expected to move at all; this bounds how long a
/// late double charge goes unseen.
const SETTLED_HOLDS: Duration = Duration::from_secs(1);
/// Lines of server log shown with a failure.
const LOG_TAIL_LINES: usize = 60;

/// Flags for `grid-server serve`. `None` leaves the server's default.
/// The defaults here are the suite's short timings, not the server's.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Tests fetch from a `Target` on 127.0.0.1, so this is on by default.
    pub allow_private_networks: bool,
    pub workers: Option<u32>,
    pub retry_backoff_ms: Option<u64>,
    pub initial_credit_micros: Option<i64>,
    pub auth_url: Option<String>,
    pub accounting_timeout_ms: Option<u64>,
    /// `--warm-sessions`: 0 by default here, unlike the server's 1. A warm
    /// browser per profile is two idle Chromium processes per server; the
    /// suite runs many servers at once on a small machine, and most never
    /// lease a session. Tests about leasing set `Some(1)` or leave the
    /// server's default with `None`.
    pub warm_sessions: Option<u32>,
    /// `--spare-browsers`: 0 by default here, unlike the server's 1, for
    /// the same reason: a spare is one more Chromium started beside the
    /// first item's, in every test that runs a browser item. Tests about
    /// the spare leave the server's default with `None`.
    pub spare_browsers: Option<u32>,
    pub extra_args: Vec<String>,
    /// Variables set (`Some`) or removed (`None`) in the server's
    /// environment after the harness scrubbed it (see `bins::scrub_env`).
    pub env: Vec<(String, Option<String>)>,
    /// The server process's umask; inherited when `None`.
    pub umask: Option<u32>,
    /// The server process's RLIMIT_NOFILE (soft and hard); inherited when `None`.
    pub max_open_files: Option<u64>,
    /// Whether the server speaks HTTPS; plain HTTP by default.
    pub tls: Tls,
    /// On PostgreSQL whatever the run's store (multi-node tests): needs
    /// `GRID_TEST_DATABASE_URL`.
    pub postgres: bool,
    /// On PostgreSQL, the port of 127.0.0.1 the server reaches its database
    /// through (a `delay_proxy::DelayProxy` in front of the cluster) instead
    /// of the cluster's own; the harness's own reads go straight.
    pub database_port: Option<u16>,
}

/// How the server speaks HTTPS. With TLS on, `base_url()` is
/// `https://127.0.0.1:PORT` and the harness's own HTTP client, SDK, CLI and
/// CDP connections trust the CA ([`GridServer::ca_cert`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Tls {
    #[default]
    Off,
    /// `--tls-self-signed`; the CA is the `caCert` the listening event names.
    SelfSigned,
    /// `--tls-cert CERT --tls-key KEY`, trusted through the CA file `ca`.
    Files { cert: PathBuf, key: PathBuf, ca: PathBuf },
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            allow_private_networks: true,
            workers: None,
            retry_backoff_ms: Some(200),
            initial_credit_micros: None,
            auth_url: None,
            accounting_timeout_ms: None,
            warm_sessions: Some(0),
            spare_browsers: Some(0),
            extra_args: Vec::new(),
            env: Vec::new(),
            umask: None,
            max_open_files: None,
            tls: Tls::Off,
            postgres: false,
            database_port: None,
        }
    }
}

impl ServerOptions {
    fn serve_args(&self, port: u16, data_dir: &Path) -> Vec<String> {
        let mut args = vec![
            "serve".to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--data-dir".into(),
            data_dir.display().to_string(),
            "--base-url".into(),
            format!("{}://127.0.0.1:{port}", self.scheme()),
        ];
        let mut flag = |name: &str, value: Option<String>| {
            if let Some(v) = value {
                args.push(name.to_string());
                args.push(v);
            }
        };
        flag("--workers", self.workers.map(|v| v.to_string()));
        flag("--retry-backoff-ms", self.retry_backoff_ms.map(|v| v.to_string()));
        flag("--initial-credit-micros", self.initial_credit_micros.map(|v| v.to_string()));
        flag("--auth-url", self.auth_url.clone());
        flag("--accounting-timeout-ms", self.accounting_timeout_ms.map(|v| v.to_string()));
        flag("--warm-sessions", self.warm_sessions.map(|v| v.to_string()));
        flag("--spare-browsers", self.spare_browsers.map(|v| v.to_string()));
        if self.allow_private_networks {
            args.push("--allow-private-networks".into());
        }
        match &self.tls {
            Tls::Off => {}
            Tls::SelfSigned => args.push("--tls-self-signed".into()),
            Tls::Files { cert, key, .. } => {
                args.extend(["--tls-cert".into(), cert.display().to_string()]);
                args.extend(["--tls-key".into(), key.display().to_string()]);
            }
        }
        args.extend(self.extra_args.iter().cloned());
        args
    }

    fn scheme(&self) -> &'static str {
        if self.tls == Tls::Off {
            "http"
        } else {
            "https"
        }
    }
}

/// What the first start printed.
#[derive(Debug, Clone)]
pub struct FirstStart {
    pub account_id: String,
    pub key_id: String,
    pub api_key: String,
}

pub struct GridServer {
    opts: ServerOptions,
    bin: PathBuf,
    /// Holds the data dir and the log; removed on drop.
    root: tempfile::TempDir,
    /// The server's own PostgreSQL database when the run is on PostgreSQL
    /// (`store::test_store`) or the server asked for it; dropped after the
    /// server. Nodes that joined another's database hold none.
    database: Option<Database>,
    /// The PostgreSQL database the server runs on, its own or another node's.
    database_url: Option<String>,
    data_dir: PathBuf,
    log_path: PathBuf,
    port: u16,
    child: Option<Child>,
    first_start: FirstStart,
    /// Stdout lines of the current process after `listening`.
    stdout: Option<mpsc::Receiver<String>>,
    /// The CA the harness trusts when the server speaks HTTPS.
    ca_cert: Option<PathBuf>,
    http: reqwest::Client,
    tail_shown: AtomicBool,
}

/// The server gets SIGKILL when the thread that spawned it ends, so a test
/// process killed by a timeout leaves no server behind. `umask` and
/// `max_open_files` are set for the server process alone.
fn set_up_child(cmd: &mut Command, umask: Option<u32>, max_open_files: Option<u64>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl, umask and setrlimit are async-signal-safe; nothing else
    // runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if let Some(mask) = umask {
                libc::umask(mask as libc::mode_t);
            }
            if let Some(n) = max_open_files {
                let limit = libc::rlimit { rlim_cur: n as libc::rlim_t, rlim_max: n as libc::rlim_t };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Holds grid.db-shm's lock bytes (SQLite) or a psql session holding the
/// locks (PostgreSQL); dropping it releases them.
pub enum DbLock {
    Sqlite(#[allow(dead_code)] std::fs::File),
    Postgres(crate::store::PgLock),
}

/// Bytes of SQLite's unix WAL-index lock area: WAL_WRITE_LOCK at 120 up to
/// the last read-mark lock at 127 (UNIX_SHM_BASE + SQLITE_SHM_NLOCK).
const SHM_LOCK_START: i64 = 120;
const SHM_LOCK_LEN: i64 = 8;
/// WAL_WRITE_LOCK alone: the byte every write transaction takes.
const SHM_WRITE_LOCK_LEN: i64 = 1;

fn posix_lock(file: &std::fs::File, kind: libc::c_short, len: i64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed flock is a valid value; fcntl(F_SETLK) only reads it.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = SHM_LOCK_START;
    lock.l_len = len;
    // SAFETY: fd is open for the duration of the call; lock outlives it.
    let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &lock) };
    if r == -1 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A port of 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().unwrap().port()
}

enum StartError {
    /// The port was taken between picking and binding; try another.
    AddrInUse,
    Other(String),
}

impl GridServer {
    /// Spawns `grid-server serve` on a fresh data dir and waits for
    /// first-start and listening.
    pub fn start(opts: ServerOptions) -> GridServer {
        let database = match test_store() {
            TestStore::Postgres(admin_url) => Some(Database::create(&admin_url)),
            TestStore::Sqlite if opts.postgres => Some(Database::create(&cluster_url())),
            TestStore::Sqlite => None,
        };
        let database_url = database.as_ref().map(|d| d.url().to_string());
        let mut server = GridServer::unstarted(opts, grid_server_bin(), database, database_url);
        let mut last_error = String::new();
        for _ in 0..5 {
            server.port = free_port();
            match server.spawn(true) {
                Ok(Some(first)) => {
                    server.first_start = first;
                    return server;
                }
                Ok(None) => server.fail("first start on an empty data dir printed no first-start event"),
                Err(StartError::AddrInUse) => {
                    last_error = format!("port {} in use", server.port);
                    continue;
                }
                Err(StartError::Other(e)) => server.fail(&e),
            }
        }
        server.fail(&format!("could not start grid-server: {last_error}"))
    }

    /// A server not started yet, with a fresh data dir and log.
    fn unstarted(
        opts: ServerOptions,
        bin: PathBuf,
        database: Option<Database>,
        database_url: Option<String>,
    ) -> GridServer {
        let root = tempfile::Builder::new().prefix("grid-test-").tempdir().expect("tempdir");
        let data_dir = root.path().join("data");
        std::fs::create_dir(&data_dir).expect("create data dir");
        let log_path = root.path().join("server.log");
        GridServer {
            opts,
            bin,
            root,
            database,
            database_url,
            data_dir,
            log_path,
            port: 0,
            child: None,
            first_start: FirstStart { account_id: String::new(), key_id: String::new(), api_key: String::new() },
            stdout: None,
            ca_cert: None,
            http: http_client(),
            tail_shown: AtomicBool::new(false),
        }
    }

    /// Starts another node on this server's PostgreSQL database (a data dir
    /// of its own, the same accounts: no first start). `opts.extra_args`
    /// carries its `--node`.
    pub fn join(&self, opts: ServerOptions) -> GridServer {
        let database_url =
            self.database_url.clone().unwrap_or_else(|| self.fail("join: this server is not on PostgreSQL"));
        let mut server = GridServer::unstarted(opts, self.bin.clone(), None, Some(database_url));
        server.first_start = self.first_start.clone();
        // Nodes sharing a store share its vault key, as an operator copies it.
        let key = self.data_dir.join("vault.key");
        if let Err(e) = std::fs::copy(&key, server.data_dir.join("vault.key")) {
            self.fail(&format!("join: copying the first node's vault key {}: {e}", key.display()));
        }
        let mut last_error = String::new();
        for _ in 0..5 {
            server.port = free_port();
            match server.spawn(false) {
                Ok(_) => return server,
                Err(StartError::AddrInUse) => last_error = format!("port {} in use", server.port),
                Err(StartError::Other(e)) => server.fail(&e),
            }
        }
        server.fail(&format!("could not start another node: {last_error}"))
    }

    /// Spawns serve on the current data dir and port; returns the first-start
    /// event when one was printed.
    fn spawn(&mut self, first: bool) -> Result<Option<FirstStart>, StartError> {
        let mut log = OpenOptions::new().create(true).append(true).open(&self.log_path).expect("open server log");
        let mut args = self.opts.serve_args(self.port, &self.data_dir);
        // Every test server's clock can be moved forward (`advance_clock`).
        args.extend(["--clock-skew-file".to_string(), self.skew_path().display().to_string()]);
        writeln!(log, "===== harness: {} {}", self.bin.display(), args.join(" ")).ok();
        let mut cmd = Command::new(&self.bin);
        cmd.args(&args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::from(log));
        scrub_env(&mut cmd);
        self.store_env(&mut cmd);
        set_up_child(&mut cmd, self.opts.umask, self.opts.max_open_files);
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        for (name, value) in &self.opts.env {
            match value {
                Some(v) => cmd.env(name, v),
                None => cmd.env_remove(name),
            };
        }
        let mut child = cmd.spawn().map_err(|e| StartError::Other(format!("spawn {}: {e}", self.bin.display())))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        let log_path = self.log_path.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(mut f) = OpenOptions::new().append(true).open(&log_path) {
                    // One write per line: the server appends its stderr
                    // to the same file, and `writeln!` writes its pieces
                    // one by one, between which a line of the server's
                    // could land (the first-start key would then seem to
                    // be in the server's log).
                    let _ = f.write_all(format!("[stdout] {line}\n").as_bytes());
                }
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        self.child = Some(child);
        // Not a wait on a condition polled: the lines come through a
        // channel, each read with what is left of the start's time.
        let deadline = Instant::now() + START_TIMEOUT;
        let mut first_start = None;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
                    match v["event"].as_str() {
                        Some("first-start") => {
                            let field = |k: &str| {
                                v[k].as_str().map(str::to_string).ok_or_else(|| {
                                    StartError::Other(format!("first-start event without string {k}: {line}"))
                                })
                            };
                            first_start = Some(FirstStart {
                                account_id: field("accountId")?,
                                key_id: field("keyId")?,
                                api_key: field("apiKey")?,
                            });
                            if !first {
                                return Err(StartError::Other(format!("restart printed a first-start event: {line}")));
                            }
                        }
                        Some("listening") => {
                            let expected = format!("127.0.0.1:{}", self.port);
                            if v["addr"].as_str() != Some(expected.as_str()) {
                                return Err(StartError::Other(format!(
                                    "listening on {:?}, expected {expected}",
                                    v["addr"]
                                )));
                            }
                            self.ca_cert = match &self.opts.tls {
                                Tls::Off => None,
                                Tls::Files { ca, .. } => Some(ca.clone()),
                                Tls::SelfSigned => Some(v["caCert"].as_str().map(PathBuf::from).ok_or_else(|| {
                                    StartError::Other(format!("--tls-self-signed: no caCert in {line}"))
                                })?),
                            };
                            self.http = http_client_trusting(self.ca_cert.as_deref());
                            self.stdout = Some(rx);
                            return Ok(first_start);
                        }
                        _ => continue,
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    self.kill9();
                    return Err(StartError::Other(format!("no listening event within {START_TIMEOUT:?}")));
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.as_mut().and_then(|c| c.wait().ok());
                    self.child = None;
                    let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
                    let last_run = log.rsplit("===== harness:").next().unwrap_or("");
                    if last_run.contains("in use") || last_run.contains("AddrInUse") {
                        return Err(StartError::AddrInUse);
                    }
                    return Err(StartError::Other(format!("grid-server exited before listening: {status:?}")));
                }
            }
        }
    }

    pub fn base_url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.opts.scheme(), self.port)
    }

    /// The CA file trusted for this server's HTTPS (None for plain HTTP).
    pub fn ca_cert(&self) -> Option<&Path> {
        self.ca_cert.as_deref()
    }

    /// The harness's HTTP client for this server (trusting its CA).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The first-start account's key.
    pub fn api_key(&self) -> &str {
        &self.first_start.api_key
    }

    pub fn account_id(&self) -> &str {
        &self.first_start.account_id
    }

    pub fn key_id(&self) -> &str {
        &self.first_start.key_id
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    fn skew_path(&self) -> PathBuf {
        self.root.path().join("clock-skew")
    }

    fn skew_ms(&self) -> i64 {
        std::fs::read_to_string(self.skew_path()).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
    }

    /// The server's clock, in ms since the epoch: the wall clock plus what
    /// the test moved it forward by (`advance_clock`).
    pub fn now_ms(&self) -> i64 {
        crate::sessions::wall_ms() + self.skew_ms()
    }

    /// Moves the server's clock forward by `ms` (the hidden `serve
    /// --clock-skew-file`, read by the server every 20 ms), so a test
    /// reaches an expiry or a due time without waiting for it on the wall
    /// clock. Returns once a running server logged that it took the new
    /// skew (a stopped one reads it as it starts). The skew outlives
    /// restarts; the server's clock never goes back. Answers the server's
    /// new time.
    pub fn advance_clock(&self, ms: i64) -> i64 {
        assert!(ms >= 0, "the server's clock only moves forward");
        let skew = self.skew_ms() + ms;
        // Written whole, then renamed: the server never reads half a number.
        let tmp = self.root.path().join("clock-skew.tmp");
        std::fs::write(&tmp, skew.to_string()).expect("writing the clock skew");
        std::fs::rename(&tmp, self.skew_path()).expect("moving the clock skew in place");
        if self.child.is_some() && ms > 0 {
            let taken = format!("skew_ms={skew}");
            let what = format!("the server taking the clock skew {skew} ms");
            let within = Within::new(Duration::from_secs(10)).every(Duration::from_millis(10));
            block_until(&what, within, || match self.plain_log().split_whitespace().any(|w| w == taken) {
                true => Ok(()),
                false => Err("no such line in its log".to_string()),
            });
        }
        self.now_ms()
    }

    /// Moves the server's clock forward to `t` (ms since the epoch), if it
    /// is not there yet.
    pub fn advance_clock_to(&self, t: i64) -> i64 {
        self.advance_clock((t - self.now_ms()).max(0))
    }

    /// The server's PostgreSQL database, when the run is on PostgreSQL.
    pub fn database(&self) -> Option<&Database> {
        self.database.as_ref()
    }

    /// The PostgreSQL database the server runs on, its own or another
    /// node's; `None` on SQLite. (Its rows are read through `stored()`.)
    pub(crate) fn database_url(&self) -> Option<&str> {
        self.database_url.as_deref()
    }

    /// Points the server or an admin subcommand at the run's store: the
    /// server's own database on PostgreSQL (as `GRID_DATABASE_URL`, which
    /// `--database-url` reads), else grid.db in `--data-dir`.
    fn store_env(&self, cmd: &mut Command) {
        if let Some(url) = &self.database_url {
            let mut url = url::Url::parse(url).unwrap_or_else(|e| self.fail(&format!("database URL {url}: {e}")));
            if let Some(port) = self.opts.database_port {
                let _ = url.set_host(Some("127.0.0.1"));
                let _ = url.set_port(Some(port));
            }
            cmd.env("GRID_DATABASE_URL", url.as_str());
        }
    }

    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("grid.db")
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The server process's resident memory now (`VmRSS` of /proc/PID/status), in bytes.
    pub fn rss_bytes(&self) -> u64 {
        self.status_bytes("VmRSS")
    }

    /// The most resident memory the server process has had since it started
    /// (`VmHWM`, the high-water mark), in bytes: a peak between two looks
    /// is not missed.
    pub fn peak_rss_bytes(&self) -> u64 {
        self.status_bytes("VmHWM")
    }

    /// A `kB` field of the server's /proc/PID/status, in bytes.
    fn status_bytes(&self, field: &str) -> u64 {
        let pid = self.pid().unwrap_or_else(|| self.fail(&format!("{field}: server not running")));
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_else(|e| self.fail(&format!("read /proc/{pid}/status: {e}")));
        let kib = crate::host::status_number(&status, field)
            .unwrap_or_else(|| self.fail(&format!("no {field} in /proc/{pid}/status")));
        kib * 1024
    }

    /// SIGKILL and reap. No-op when not running.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.forget_process();
    }

    /// After the process ended: drop its stdout and the connections pooled to
    /// it (a reused keep-alive connection to a dead process fails the next
    /// request).
    fn forget_process(&mut self) {
        self.stdout = None;
        self.http = http_client_trusting(self.ca_cert.as_deref());
    }

    /// SIGTERM, then wait up to 20 s for the exit.
    pub fn sigterm(&mut self) -> ExitStatus {
        let Some(child) = self.child.as_mut() else { self.fail("sigterm: server not running") };
        // SAFETY: kill(2) on the pid of a child we have not reaped yet.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        // The child stays in `self.child` while waiting: one that outlives
        // the wait is killed as the failing test drops the server.
        let status =
            block_until("grid-server exiting on SIGTERM", Duration::from_secs(20), || match child.try_wait() {
                Ok(Some(status)) => Ok(status),
                Ok(None) => Err("still running".to_string()),
                Err(e) => panic!("waiting for grid-server: {e}"),
            });
        self.child = None;
        self.forget_process();
        status
    }

    /// Starts the server again on the same data dir and port. A running
    /// server is stopped with SIGTERM first.
    pub fn restart(&mut self) {
        if self.child.is_some() {
            self.sigterm();
        }
        // The old socket may linger a moment; retry while the port is busy.
        let what = format!("restart: port {} free", self.port);
        let within = Within::new(Duration::from_secs(10)).every(Duration::from_millis(200));
        block_until(&what, within, || match self.spawn(false) {
            Ok(_) => Ok(()),
            Err(StartError::AddrInUse) => Err("in use".to_string()),
            Err(StartError::Other(e)) => self.fail(&format!("restart: {e}")),
        });
    }

    /// Replaces the extra `serve` flags used by later `restart`s (for
    /// example another `--docker-host`).
    pub fn set_extra_args(&mut self, extra_args: Vec<String>) {
        self.opts.extra_args = extra_args;
    }

    /// Stdout lines printed since `listening` (drained).
    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout.as_ref().map(|rx| rx.try_iter().collect()).unwrap_or_default()
    }

    /// The last `n` lines of the server log (stderr plus stdout lines).
    /// The server log without its colours (the server writes ANSI escapes).
    pub fn plain_log(&self) -> String {
        let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let mut plain = String::with_capacity(log.len());
        let mut chars = log.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                // CSI: ESC [ parameters, ended by a letter.
                for e in chars.by_ref() {
                    if e.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                plain.push(c);
            }
        }
        plain
    }

    pub fn log_tail(&self, n: usize) -> String {
        let log = std::fs::read_to_string(&self.log_path).unwrap_or_else(|e| format!("(no log: {e})"));
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Panics with `msg` and the server log's tail.
    pub fn fail(&self, msg: &str) -> ! {
        self.tail_shown.store(true, Ordering::SeqCst);
        panic!(
            "{msg}\n----- last {LOG_TAIL_LINES} lines of grid-server log ({}) -----\n{}\n-----",
            self.log_path.display(),
            self.log_tail(LOG_TAIL_LINES)
        )
    }

    // ----- admin subcommands -----

    /// Runs `grid-server ARGS --data-dir DIR`; panics (with the log tail) on a
    /// non-zero exit; returns the JSON object it printed.
    pub fn admin(&self, args: &[&str]) -> Value {
        let out = self.admin_raw(args);
        if !out.status.success() {
            self.fail(&format!(
                "admin {args:?} failed: {}\nstdout: {}\nstderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let last = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
        serde_json::from_str(last)
            .unwrap_or_else(|e| self.fail(&format!("admin {args:?} printed no JSON object ({e}): {stdout}")))
    }

    pub fn admin_raw(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args).arg("--data-dir").arg(&self.data_dir).stdin(Stdio::null());
        scrub_env(&mut cmd);
        self.store_env(&mut cmd);
        cmd.output().unwrap_or_else(|e| self.fail(&format!("spawn admin {args:?}: {e}")))
    }

    /// `account show` of an account.
    pub fn account_show(&self, account_id: &str) -> Value {
        self.admin(&["account", "show", "--account", account_id])
    }

    /// What `key`'s account's reservations took, summed over the `reserve`
    /// entries of its ledger (GET /account, up to 100 of them): unlike
    /// `reservedMicros` it does not move when the work ends and is charged or
    /// released in the same transaction.
    pub async fn reserved_ever(&self, key: &str) -> i64 {
        let r = self.get_as(Some(key), "/account?kind=reserve&limit=100").await;
        let entries = r.json["ledger"].as_array().unwrap_or_else(|| self.fail(&format!("no ledger: {r}")));
        assert!(r.json["nextCursor"].is_null(), "more than 100 reservations: {r}");
        entries.iter().map(|e| e["amountMicros"].as_i64().unwrap_or_else(|| self.fail(&format!("{e}")))).sum()
    }

    /// A new account with `credit_micros` and one key: (accountId, apiKey).
    pub fn create_account(&self, name: &str, credit_micros: i64) -> (String, String) {
        let acc = self.admin(&["account", "create", "--name", name, "--credit-micros", &credit_micros.to_string()]);
        let account_id =
            acc["accountId"].as_str().unwrap_or_else(|| self.fail(&format!("no accountId: {acc}"))).to_string();
        let key = self.admin(&["key", "create", "--account", &account_id]);
        let api_key = key["apiKey"].as_str().unwrap_or_else(|| self.fail(&format!("no apiKey: {key}"))).to_string();
        (account_id, api_key)
    }

    /// Makes the account database unreadable until the returned guard is
    /// dropped: takes exclusive POSIX locks on the WAL index's lock bytes
    /// (grid.db-shm, bytes 120..128: the write, checkpoint, recovery and five
    /// read locks), so every read or write transaction of the server waits.
    ///
    /// `PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE;` on a second
    /// connection cannot do this: in WAL mode every open connection holds a
    /// SHARED lock on grid.db, and the server keeps idle connections open,
    /// so that EXCLUSIVE lock is never granted while the server runs.
    ///
    /// On PostgreSQL: a session holding every table the server reads in
    /// ACCESS EXCLUSIVE mode, and the grid-wide write lock.
    pub fn lock_db(&self) -> DbLock {
        match &self.database {
            Some(db) => DbLock::Postgres(db.lock(true)),
            None => self.lock_shm(SHM_LOCK_LEN),
        }
    }

    /// Makes every write transaction of the server fail (after its busy
    /// timeout, `accounting_timeout_ms`) until the returned guard is dropped,
    /// while reads go on: takes the WAL write lock (grid.db-shm byte 120)
    /// alone, as a long writer of another process would.
    ///
    /// On PostgreSQL: a session holding the grid-wide write lock every write
    /// transaction takes first.
    pub fn lock_db_writes(&self) -> DbLock {
        match &self.database {
            Some(db) => DbLock::Postgres(db.lock(false)),
            None => self.lock_shm(SHM_WRITE_LOCK_LEN),
        }
    }

    /// PostgreSQL only: a session holding the grid-wide write lock shared
    /// until the returned guard is dropped, so every write that takes it
    /// exclusively waits (and fails after its busy timeout) while writes
    /// ordered by their rows run.
    pub fn lock_db_exclusive_writes(&self) -> DbLock {
        match &self.database {
            Some(db) => DbLock::Postgres(db.lock_shared()),
            None => self.fail("lock_db_exclusive_writes: the grid-wide write lock is PostgreSQL's"),
        }
    }

    fn lock_shm(&self, len: i64) -> DbLock {
        let shm = self.data_dir.join("grid.db-shm");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&shm)
            .unwrap_or_else(|e| self.fail(&format!("open {}: {e}", shm.display())));
        let what = format!("a write lock on {}", shm.display());
        let within = Within::new(Duration::from_secs(10)).every(Duration::from_millis(1));
        block_until(&what, within, || {
            posix_lock(&file, libc::F_WRLCK as libc::c_short, len).map_err(|e| e.to_string())
        });
        DbLock::Sqlite(file)
    }

    // ----- raw HTTP -----

    /// Sends a request to the server; `key` None sends no credential.
    pub async fn request(&self, method: reqwest::Method, path: &str, key: Option<&str>, body: Option<&Value>) -> Resp {
        let url = if path.starts_with("http://") || path.starts_with("https://") {
            path.to_string()
        } else {
            format!("{}{}", self.base_url(), path)
        };
        let mut req = self.http.request(method.clone(), &url);
        if let Some(k) = key {
            req = req.header("x-api-key", k);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        match Resp::read(req).await {
            Ok(r) => r,
            Err(e) => self.fail(&format!("{method} {url}: {e}")),
        }
    }

    /// GET with the first-start key.
    pub async fn get(&self, path: &str) -> Resp {
        self.request(reqwest::Method::GET, path, Some(self.api_key()), None).await
    }

    /// POST a JSON body with the first-start key.
    pub async fn post(&self, path: &str, body: &Value) -> Resp {
        self.request(reqwest::Method::POST, path, Some(self.api_key()), Some(body)).await
    }

    pub async fn get_as(&self, key: Option<&str>, path: &str) -> Resp {
        self.request(reqwest::Method::GET, path, key, None).await
    }

    pub async fn post_as(&self, key: Option<&str>, path: &str, body: Option<&Value>) -> Resp {
        self.request(reqwest::Method::POST, path, key, body).await
    }

    /// One MCP tool call (a JSON-RPC `tools/call` on POST /mcp) with `key`:
    /// its `result` (the call must be answered 200).
    pub async fn mcp_tool_as(&self, key: &str, name: &str, arguments: Value) -> Value {
        let rpc = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                     "params": {"name": name, "arguments": arguments}});
        let r = Resp::read(
            self.http
                .post(format!("{}/mcp", self.base_url()))
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("x-api-key", key)
                .body(rpc.to_string()),
        )
        .await
        .unwrap_or_else(|e| self.fail(&format!("MCP request {name}: {e}")));
        if r.status != 200 {
            self.fail(&format!("MCP {name}: expected 200, got {r}"));
        }
        r.json["result"].clone()
    }

    /// POST a JSON body with `key` and an `Idempotency-Key` header for each
    /// of `idempotency_keys` (raw bytes, so a test can send bad ones).
    pub async fn post_idempotent(&self, key: &str, path: &str, body: &Value, idempotency_keys: &[&[u8]]) -> Resp {
        let url = format!("{}{}", self.base_url(), path);
        let mut req = self.http.post(&url).header("x-api-key", key).json(body);
        for k in idempotency_keys {
            let v = reqwest::header::HeaderValue::from_bytes(k)
                .unwrap_or_else(|e| self.fail(&format!("{k:?} cannot be a header value: {e}")));
            req = req.header("idempotency-key", v);
        }
        match Resp::read(req).await {
            Ok(r) => r,
            Err(e) => self.fail(&format!("POST {url}: {e}")),
        }
    }

    // ----- the grid's flows -----

    /// POST /batches with `key`; asserts 201 and returns the batchId.
    pub async fn submit_as(&self, key: &str, body: &Value) -> String {
        let r = self.post_as(Some(key), "/batches", Some(body)).await;
        if r.status != 201 {
            self.fail(&format!("POST /batches {body}: expected 201, got {r}"));
        }
        r.json["batchId"].as_str().unwrap_or_else(|| self.fail(&format!("201 without batchId: {r}"))).to_string()
    }

    /// A `fetch` batch of `urls` with the first-start key; returns the batchId.
    pub async fn submit_fetch(&self, urls: &[String]) -> String {
        self.submit_as(self.api_key(), &serde_json::json!({"urls": urls, "script": "fetch"})).await
    }

    /// A batch of one URL (`body`, with the first-start key); asserts it
    /// holds one item and returns that item's id.
    pub async fn submit_one(&self, body: &Value) -> String {
        let batch = self.batch(&self.submit_as(self.api_key(), body).await).await;
        match batch["jobs"].as_array().map(Vec::as_slice) {
            Some([item]) => {
                item["jobId"].as_str().unwrap_or_else(|| self.fail(&format!("no jobId: {batch}"))).to_string()
            }
            _ => self.fail(&format!("expected one item: {batch}")),
        }
    }

    /// `submit_one` of a `fetch` of `url`.
    pub async fn fetch_one(&self, url: &str) -> String {
        self.submit_one(&serde_json::json!({"urls": [url], "script": "fetch"})).await
    }

    /// GET /batches/{id} with `key`, asserting 200.
    pub async fn batch_as(&self, key: &str, batch_id: &str) -> Value {
        let r = self.get_as(Some(key), &format!("/batches/{batch_id}")).await;
        self.batch_answer(batch_id, r)
    }

    /// GET /batches/{id}'s answer `r`, asserting 200.
    fn batch_answer(&self, batch_id: &str, r: Resp) -> Value {
        if r.status != 200 {
            self.fail(&format!("GET /batches/{batch_id}: expected 200, got {r}"));
        }
        r.json
    }

    pub async fn batch(&self, batch_id: &str) -> Value {
        self.batch_as(self.api_key(), batch_id).await
    }

    /// Polls GET /batches/{id} until completed + failed == total. A 503
    /// `accounting_unavailable` is polled again, as the contract tells a
    /// client to: the server answers it when its database did not answer
    /// within the accounting time-out, which a loaded CI machine can stall
    /// past for a moment.
    pub async fn wait_batch_done_as(&self, key: &str, batch_id: &str, timeout: Duration) -> Value {
        wait_for(&format!("batch {batch_id} done"), timeout, || async {
            let r = self.get_as(Some(key), &format!("/batches/{batch_id}")).await;
            if r.status == 503 && r.error() == "accounting_unavailable" {
                return Err(r.to_string());
            }
            let b = self.batch_answer(batch_id, r);
            let count = |k: &str| b["counts"][k].as_u64().unwrap_or(0);
            match b["total"].as_u64() {
                Some(total) if count("completed") + count("failed") == total => Ok(b),
                _ => Err(format!("counts {}", b["counts"])),
            }
        })
        .await
    }

    pub async fn wait_batch_done(&self, batch_id: &str, timeout: Duration) -> Value {
        self.wait_batch_done_as(self.api_key(), batch_id, timeout).await
    }

    /// GET /jobs/{itemId} with the first-start key, asserting 200.
    pub async fn item(&self, item_id: &str) -> Value {
        let r = self.get(&format!("/jobs/{item_id}")).await;
        if r.status != 200 {
            self.fail(&format!("GET /jobs/{item_id}: expected 200, got {r}"));
        }
        r.json
    }

    /// Polls GET /jobs/{itemId} until `done(item)`; returns that item and every
    /// state seen on the way (in order, without repeats).
    pub async fn wait_item(
        &self,
        item_id: &str,
        timeout: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> (Value, Vec<String>) {
        let what = format!("item {item_id}");
        self.watch(&what, "state", timeout, Duration::from_millis(10), || self.item(item_id), done).await
    }

    /// Reads `read()` every `poll` until `done(value)`; returns that value and
    /// every `field` value seen on the way (in order, without repeats). Fails
    /// the test at `timeout`, naming what was seen.
    pub async fn watch<F, Fut>(
        &self,
        what: &str,
        field: &str,
        timeout: Duration,
        poll: Duration,
        mut read: F,
        done: impl Fn(&Value) -> bool,
    ) -> (Value, Vec<String>)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Value>,
    {
        let seen: RefCell<Vec<String>> = RefCell::default();
        let (seen_ref, done) = (&seen, &done);
        let value = wait_for(&format!("{what} done"), Within::new(timeout).every(poll), || {
            let reading = read();
            async move {
                let value = reading.await;
                let mut seen = seen_ref.borrow_mut();
                if let Some(s) = value[field].as_str() {
                    if seen.last().map(String::as_str) != Some(s) {
                        seen.push(s.to_string());
                    }
                }
                match done(&value) {
                    true => Ok(value),
                    false => Err(format!("{field} values seen {seen:?}; last {value}")),
                }
            }
        })
        .await;
        (value, seen.into_inner())
    }

    /// Waits until the item is completed or failed.
    pub async fn wait_item_final(&self, item_id: &str, timeout: Duration) -> (Value, Vec<String>) {
        self.wait_item(item_id, timeout, |i| matches!(i["state"].as_str(), Some("completed" | "failed"))).await
    }

    /// Polls `account show` until reservedMicros is 0 and creditMicros equals
    /// `expected_credit`; then checks that the ledger holds still for
    /// `SETTLED_HOLDS` (no late double charge: an attempt's end stored
    /// twice, a stale end of a node taken for dead).
    pub async fn wait_settled(&self, account_id: &str, expected_credit: i64, timeout: Duration) -> Value {
        let what = format!("account {account_id} settled to creditMicros {expected_credit}, reservedMicros 0");
        // Every 200 ms: each look runs `account show`, a process.
        let within = Within::new(timeout).every(Duration::from_millis(200));
        let acc = wait_until(&what, within, || {
            let acc = self.account_show(account_id);
            match acc["reservedMicros"].as_i64() == Some(0) && acc["creditMicros"].as_i64() == Some(expected_credit) {
                true => Ok(acc),
                false => Err(acc.to_string()),
            }
        })
        .await;
        tokio::time::sleep(SETTLED_HOLDS).await;
        let again = self.account_show(account_id);
        if again != acc {
            self.fail(&format!("ledger moved after settling: {acc} then {again}"));
        }
        acc
    }

    /// GET /artifacts/{item}/{kind} → the signed URL (asserting 200).
    pub async fn artifact_url(&self, item_id: &str, kind: &str) -> String {
        let r = self.get(&format!("/artifacts/{item_id}/{kind}")).await;
        if r.status != 200 {
            self.fail(&format!("GET /artifacts/{item_id}/{kind}: expected 200, got {r}"));
        }
        r.json["url"].as_str().unwrap_or_else(|| self.fail(&format!("no url: {r}"))).to_string()
    }

    /// Downloads a signed URL without any credential.
    pub async fn download(&self, url: &str) -> Resp {
        self.request(reqwest::Method::GET, url, None, None).await
    }

    // ----- the `grid` CLI -----

    /// Runs `grid ARGS` with GRID_URL and GRID_API_KEY of this server.
    /// With HTTPS, also GRID_CA_CERT.
    pub fn cli(&self, args: &[&str]) -> crate::cli::CliOutput {
        let url = self.base_url();
        let ca = self.ca_cert.as_ref().map(|p| p.display().to_string());
        let mut env = vec![("GRID_URL", url.as_str()), ("GRID_API_KEY", self.api_key())];
        if let Some(ca) = &ca {
            env.push(("GRID_CA_CERT", ca.as_str()));
        }
        crate::cli::run_cli(args, &env, crate::cli::CLI_TIMEOUT)
    }
}

impl GridServer {
    /// The typed SDK pointed at this server with the first-start key.
    /// With HTTPS, it trusts the server's CA.
    pub fn client(&self) -> grid_client::GridClient {
        let mut config = grid_client::ClientConfig::new(
            self.base_url(),
            grid_client::Credential::ApiKey(self.api_key().to_string()),
        );
        config.ca_cert = self.ca_cert.clone();
        grid_client::GridClient::from_config(config).unwrap_or_else(|e| self.fail(&format!("GridClient: {e}")))
    }
}

impl Drop for GridServer {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() && !self.tail_shown.load(Ordering::SeqCst) {
            eprintln!(
                "----- last {LOG_TAIL_LINES} lines of grid-server log ({}) -----\n{}\n-----",
                self.log_path.display(),
                self.log_tail(LOG_TAIL_LINES)
            );
        }
        if std::env::var_os("GRID_TEST_KEEP").is_some() {
            let root = std::mem::replace(&mut self.root, tempfile::tempdir().expect("tempdir"));
            eprintln!("GRID_TEST_KEEP: kept {}", root.keep().display());
        }
    }
}
