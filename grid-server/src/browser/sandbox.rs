//! The jail every Chromium runs in, pooled or leased.
//!
//! A browser is a stranger's code runner: a session lessee has its whole
//! DevTools protocol, a capture item's page runs the target's scripts. So
//! each browser is started through bubblewrap as follows, and the grid keeps
//! the only ways in and out:
//!
//! - **Its own unprivileged uid** (one per live browser, from
//!   `--browser-uid-base`), dropped to before bubblewrap runs, with
//!   Chromium's own sandbox on (no `--no-sandbox`).
//! - **Its own mount namespace**: the system (`/usr` and a short list of
//!   `/etc` entries) read-only; a private, size-bounded tmpfs for `/tmp` and
//!   for the home [`HOME`] that holds the profile and [`DOWNLOADS`]. The
//!   server's data dir, other browsers' homes and the rest of the host's
//!   files are not in it. Nothing written survives the browser, except in a
//!   session's download folder: the one writable host folder, handed to the
//!   browser's uid and bound at [`DOWNLOADS`], which the grid reads without
//!   following links (`sessions::downloads`). bubblewrap resolves a bind's
//!   source path as the browser's uid, which may not pass the data dir, so
//!   the folder is first bound at a portal of that uid ([`PORTALS`]), a
//!   path it may pass, and the portal is unmounted once the browser runs.
//! - **Its own network namespace** holding only a loopback interface. The
//!   one way out is the egress proxy: the grid binds its listener *inside*
//!   the namespace (a thread of the server enters it with `setns`, binds,
//!   and leaves), and serves it from the server's own namespace. So
//!   `direct://` contexts, WebRTC and raw sockets have nowhere to go.
//! - **Its own pid, IPC, UTS and cgroup namespaces**; it dies with the
//!   server (`--die-with-parent`) and with its process group.
//! - **Bounded consumption**: every writable filesystem is a size-bounded
//!   tmpfs (`/tmp`, the home, `/dev/shm`; the rest of `/dev` read-only), and
//!   the browser runs in a cgroup of its own (`cgroup.rs`: memory, files
//!   included, tasks, an equal CPU weight). On a host without cgroups its
//!   uid gets `RLIMIT_NPROC` instead and a watchdog kills the browser when
//!   its processes' resident memory passes the bound.
//! - **DevTools over a pipe** (`--remote-debugging-pipe`, fds 3 and 4): no
//!   TCP port another process could reach.
//!
//! The start is two-phase: bubblewrap reports the sandbox's pid on an info
//! fd and waits on a block fd; the grid binds the proxy listener in the new
//! network namespace, then releases the block fd and Chromium starts.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use tokio::process::{Child, Command};

use super::cgroup::{self, BrowserCgroup};

/// The browser's home inside the sandbox: profile, downloads, caches.
pub const HOME: &str = "/home/grid";
/// Where a lessee may let the browser save downloads.
pub const DOWNLOADS: &str = "/home/grid/downloads";
/// The port the browser-wide egress proxy listens on inside every sandbox
/// (each has a loopback of its own, so one number serves all).
pub const PROXY_PORT: u16 = 3128;

/// The `/etc` entries a browser reads (fonts, TLS roots, the dynamic
/// linker's cache, time zones); the rest of `/etc` stays out.
const ETC_ENTRIES: &[&str] = &[
    "/etc/fonts",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/mime.types",
    // Debian's `chromium` wrapper script reads its flags from here.
    "/etc/chromium.d",
    "/etc/chromium",
];

/// fds the sandboxed command sees: Chromium's DevTools pipe (it reads
/// commands from 3 and writes answers to 4), then bubblewrap's two.
const FD_CDP_IN: RawFd = 3;
const FD_CDP_OUT: RawFd = 4;
const FD_INFO: RawFd = 5;
const FD_BLOCK: RawFd = 6;
/// Where a session's download folder is bound on the host while its
/// browser starts, one portal per browser uid (`PORTALS/{uid}`); only the
/// portal itself is open to that uid.
pub const PORTALS: &str = "/run/grid-download-portals";

#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// The bubblewrap executable (Debian: /usr/bin/bwrap).
    pub bwrap: PathBuf,
    /// First uid handed to browsers; each live browser has its own.
    pub uid_base: u32,
    pub uid_count: u32,
    /// Size bound of the browser's home, of its /tmp and of its /dev/shm, each.
    pub disk_mib: u64,
    /// What one browser may consume (memory, files in its tmpfs included, and tasks).
    pub limits: cgroup::Limits,
    /// Where browsers' cgroups are made (found once at start).
    pub cgroups: Arc<cgroup::Host>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            bwrap: PathBuf::from("/usr/bin/bwrap"),
            uid_base: 200_000,
            uid_count: 4096,
            disk_mib: 512,
            limits: cgroup::Limits::default(),
            cgroups: Arc::new(cgroup::Host::Unavailable("not looked for".into())),
        }
    }
}

/// A sandbox's network namespace and uid, held as long as its browser
/// lives; dropping it frees the uid (the process is killed by its owner,
/// [`crate::browser::process::BrowserProcess`]).
pub struct Jail {
    netns: File,
    // Dropped before the uid: a portal is unmounted, and the cgroup emptied
    // and removed, before the uid is free (see `Drop`).
    portal: Option<Portal>,
    bound: Option<Bound>,
    uid: Option<UidLease>,
}

impl Drop for Jail {
    fn drop(&mut self) {
        self.portal = None;
        let uid = self.uid.take();
        match self.bound.take() {
            // The uid is held until its cgroup is gone.
            Some(Bound::Cgroup(group)) => group.remove_then(uid),
            Some(Bound::Watchdog(task)) => task.abort(),
            None => {}
        }
    }
}

/// How the browser's consumption is held: its cgroup, or on a host without
/// one the watchdog of its uid's resident memory (aborted on drop).
enum Bound {
    Cgroup(BrowserCgroup),
    Watchdog(tokio::task::JoinHandle<()>),
}

/// A download folder bound at its browser uid's portal; unmounted on drop.
struct Portal(PathBuf);

impl Portal {
    fn open(uid: u32, folder: &OwnedFd) -> std::io::Result<Portal> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        std::fs::DirBuilder::new().recursive(true).mode(0o711).create(PORTALS)?;
        std::fs::set_permissions(PORTALS, std::fs::Permissions::from_mode(0o711))?;
        let path = Path::new(PORTALS).join(uid.to_string());
        // Left mounted by an earlier holder of this uid that died while its browser started.
        let _ = rustix::mount::unmount(&path, rustix::mount::UnmountFlags::DETACH);
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        rustix::mount::mount_bind(format!("/proc/self/fd/{}", folder.as_raw_fd()), &path)?;
        Ok(Portal(path))
    }
}

impl Drop for Portal {
    fn drop(&mut self) {
        if let Err(e) = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH) {
            tracing::warn!(portal = %self.0.display(), error = %e, "download portal not unmounted");
        }
    }
}

/// What [`start`] hands over besides the jail.
pub struct Spawned {
    pub child: Child,
    /// The (outer) pid of bubblewrap, leader of the process group.
    pub pid: i32,
    /// We write DevTools commands here; Chromium reads them on fd 3.
    pub to_browser: OwnedFd,
    /// Chromium writes answers and events to fd 4; we read them here.
    pub from_browser: OwnedFd,
    /// The egress proxy's listener, bound inside the sandbox on [`PROXY_PORT`].
    pub proxy_listener: tokio::net::TcpListener,
    /// The last lines the sandbox wrote to stderr, for start errors.
    pub stderr_tail: StderrTail,
}

/// The last lines a browser wrote to stderr (D-Bus complaints left out:
/// a sandbox has no bus, and Chromium says so many times).
#[derive(Clone, Default)]
pub struct StderrTail(std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>);

impl StderrTail {
    const KEPT: usize = 8;

    fn follow(stderr: Option<tokio::process::ChildStderr>) -> StderrTail {
        let tail = StderrTail::default();
        if let Some(stderr) = stderr {
            let lines = tail.0.clone();
            tokio::spawn(async move {
                use tokio::io::AsyncBufReadExt;
                let mut reader = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    if line.contains("dbus") || line.contains("DBus") {
                        continue;
                    }
                    let mut kept = lines.lock().unwrap_or_else(|p| p.into_inner());
                    if kept.len() == Self::KEPT {
                        kept.pop_front();
                    }
                    kept.push_back(line);
                }
            });
        }
        tail
    }

    pub fn text(&self) -> String {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect::<Vec<_>>().join(" | ")
    }
}

impl Jail {
    /// Binds `127.0.0.1:port` inside the browser's network namespace (0:
    /// any free port); the listener is served from the server's side.
    pub fn listen(&self, port: u16) -> std::io::Result<tokio::net::TcpListener> {
        let listener = bind_in_netns(self.netns.as_raw_fd(), port)?;
        listener.set_nonblocking(true)?;
        tokio::net::TcpListener::from_std(listener)
    }

    pub fn uid(&self) -> u32 {
        self.uid.as_ref().map_or(0, |u| u.0)
    }

    /// Unmounts the download folder's portal: call once the browser runs
    /// (its sandbox has its own bind of the folder by then).
    pub fn close_portal(&mut self) {
        self.portal = None;
    }
}

/// Starts `executable` with `flags` in a new sandbox, binds the egress
/// proxy's listener ([`PROXY_PORT`]) inside it before the executable runs,
/// and returns both. `downloads`, an open directory of the host, becomes
/// [`DOWNLOADS`] (instead of a folder of the home's tmpfs) and is given to
/// the browser's uid first.
pub async fn start(
    config: &SandboxConfig,
    executable: &Path,
    flags: &[String],
    env: &[(String, String)],
    downloads: Option<&OwnedFd>,
) -> std::io::Result<(Jail, Spawned)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(std::io::Error::other(
            "the browser sandbox needs grid-server to run as root (it starts each browser as a uid of its own \
             and binds its egress proxy inside the browser's network namespace)",
        ));
    }
    if !config.bwrap.is_file() {
        return Err(std::io::Error::other(format!(
            "bubblewrap not found at {} (Debian package bubblewrap; --bwrap PATH)",
            config.bwrap.display()
        )));
    }
    let uid = UidLease::take(config)?;
    let cgroup = config.cgroups.create(uid.0, config.limits)?;
    // Without a cgroup, the task bound is the uid's: each browser has a uid of its own.
    let nproc = if cgroup.is_none() { Some(config.limits.pids) } else { None };
    let portal = match downloads {
        Some(dir) => {
            rustix::fs::fchown(dir, Some(rustix::fs::Uid::from_raw(uid.0)), Some(rustix::fs::Gid::from_raw(uid.0)))?;
            Some(Portal::open(uid.0, dir)?)
        }
        None => None,
    };
    let (cdp_in_child, cdp_in) = pipe()?; // child reads, we write
    let (cdp_out, cdp_out_child) = pipe()?; // child writes, we read
    let (info_read, info_child) = pipe()?;
    let (block_child, block_write) = pipe()?;
    let mut cmd = Command::new("/usr/bin/setpriv");
    cmd.arg(format!("--reuid={}", uid.0))
        .arg(format!("--regid={}", uid.0))
        .arg("--clear-groups")
        .arg("--")
        .arg(&config.bwrap)
        .args(bwrap_args(config, env, portal.as_ref().map(|p| p.0.as_path())))
        .arg("--")
        .arg(executable)
        .args(flags)
        .arg("--remote-debugging-pipe")
        .arg(format!("--user-data-dir={HOME}/profile"))
        .arg("about:blank")
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let fds = [
        (cdp_in_child.as_raw_fd(), FD_CDP_IN),
        (cdp_out_child.as_raw_fd(), FD_CDP_OUT),
        (info_child.as_raw_fd(), FD_INFO),
        (block_child.as_raw_fd(), FD_BLOCK),
    ];
    // SAFETY: only async-signal-safe calls (prctl, dup2) between fork and
    // exec. Every source fd is >= 10 (see `pipe`), so no dup2 clobbers a
    // source still to be copied; dup2 clears CLOEXEC on the copy.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if let Some(n) = nproc {
                let limit = libc::rlimit { rlim_cur: n, rlim_max: n };
                if libc::setrlimit(libc::RLIMIT_NPROC, &limit) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for (from, to) in fds {
                if libc::dup2(from, to) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    drop((cdp_in_child, cdp_out_child, info_child, block_child));
    let stderr_tail = StderrTail::follow(child.stderr.take());
    let pid = child.id().unwrap_or(0) as i32;
    let sandbox_pid = match tokio::task::spawn_blocking(move || read_child_pid(info_read)).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            kill_group(pid);
            let status = child.try_wait().ok().flatten();
            return Err(std::io::Error::other(format!(
                "bubblewrap did not start the sandbox ({e}); exit: {status:?}; stderr: {}",
                stderr_tail.text()
            )));
        }
        Err(e) => return Err(std::io::Error::other(e.to_string())),
    };
    let bound = match cgroup {
        Some(group) => {
            // Before the block fd is released: everything the browser forks is inside.
            if let Err(e) = group.add(sandbox_pid) {
                kill_group(pid);
                return Err(e);
            }
            Bound::Cgroup(group)
        }
        None => Bound::Watchdog(tokio::spawn(watch_memory(uid.0, config.limits.memory_mib * 1024 * 1024, pid))),
    };
    let jail =
        Jail { netns: File::open(format!("/proc/{sandbox_pid}/ns/net"))?, portal, bound: Some(bound), uid: Some(uid) };
    let listener = match jail.listen(PROXY_PORT) {
        Ok(l) => l,
        Err(e) => {
            kill_group(pid);
            return Err(std::io::Error::other(format!("binding the egress proxy inside the sandbox: {e}")));
        }
    };
    // Lets bubblewrap exec the browser.
    // SAFETY: writes one byte from a valid buffer to an fd we own.
    unsafe { libc::write(block_write.as_raw_fd(), b"x".as_ptr().cast(), 1) };
    drop(block_write);
    Ok((jail, Spawned { child, pid, to_browser: cdp_in, from_browser: cdp_out, proxy_listener: listener, stderr_tail }))
}

fn bwrap_args(config: &SandboxConfig, env: &[(String, String)], downloads: Option<&Path>) -> Vec<String> {
    let size = (config.disk_mib * 1024 * 1024).to_string();
    let mut a: Vec<String> = [
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "grid-browser",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/sbin",
        "/sbin",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for entry in ETC_ENTRIES.iter().filter(|e| Path::new(e).exists()) {
        a.extend(["--ro-bind".into(), entry.to_string(), entry.to_string()]);
    }
    if Path::new("/var/cache/fontconfig").is_dir() {
        a.extend(["--ro-bind".into(), "/var/cache/fontconfig".into(), "/var/cache/fontconfig".into()]);
    }
    // /dev's own tmpfs (bubblewrap's, unbounded) is made read-only once /dev/shm, where Chromium
    // keeps its shared memory, is a bounded tmpfs of its own.
    for dir in ["/tmp", HOME, "/dev/shm"] {
        a.extend(["--size".into(), size.clone(), "--perms".into(), "0700".into(), "--tmpfs".into(), dir.into()]);
    }
    a.extend(["--remount-ro".into(), "/dev".into()]);
    if let Some(folder) = downloads {
        a.extend(["--bind".into(), folder.display().to_string(), DOWNLOADS.into()]);
    } else {
        a.extend(["--dir".into(), DOWNLOADS.into()]);
    }
    // bubblewrap's root is a tmpfs of its own, unbounded and owned by the browser's uid: read-only
    // once every mount point is in place (the tmpfs and binds above stay as they are).
    a.extend(["--remount-ro".into(), "/".into()]);
    a.extend(["--info-fd".into(), FD_INFO.to_string(), "--block-fd".into(), FD_BLOCK.to_string()]);
    a.extend(["--clearenv".into()]);
    let base = [("HOME", HOME), ("TMPDIR", "/tmp"), ("PATH", "/usr/bin:/bin")];
    for (k, v) in base.iter().map(|(k, v)| (k.to_string(), v.to_string())).chain(env.iter().cloned()) {
        a.extend(["--setenv".into(), k, v]);
    }
    a
}

/// A pipe whose two ends are CLOEXEC and numbered 10 or above; returns
/// (read end, write end).
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let high = |fd: RawFd| -> std::io::Result<OwnedFd> {
        // SAFETY: fd is ours; F_DUPFD_CLOEXEC returns a new fd >= 10.
        let moved = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
        // SAFETY: fd is ours and closed once.
        unsafe { libc::close(fd) };
        if moved < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: moved is a fresh fd we own.
        Ok(unsafe { OwnedFd::from_raw_fd(moved) })
    };
    Ok((high(fds[0])?, high(fds[1])?))
}

/// bubblewrap's info fd carries `{"child-pid": N, ...}`.
fn read_child_pid(fd: OwnedFd) -> std::io::Result<i32> {
    let mut text = String::new();
    File::from(fd).read_to_string(&mut text)?;
    let v: serde_json::Value = serde_json::from_str(text.trim()).map_err(|e| std::io::Error::other(e.to_string()))?;
    v["child-pid"].as_i64().map(|p| p as i32).ok_or_else(|| std::io::Error::other(format!("no child-pid in {text:?}")))
}

/// Binds 127.0.0.1:`port` in the network namespace `netns` from a thread
/// of its own (setns moves only the calling thread). bubblewrap brings the
/// namespace's loopback up just after reporting its pid; until then the
/// address does not exist, so the bind is retried briefly.
fn bind_in_netns(netns: RawFd, port: u16) -> std::io::Result<std::net::TcpListener> {
    let handle = std::thread::spawn(move || {
        // SAFETY: netns is an open namespace fd; this thread ends right after.
        if unsafe { libc::setns(netns, libc::CLONE_NEWNET) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match std::net::TcpListener::bind(("127.0.0.1", port)) {
                Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                other => return other,
            }
        }
    });
    handle.join().map_err(|_| std::io::Error::other("netns thread panicked"))?
}

/// On a host without cgroups: kills the browser's process group (`group`)
/// once the resident memory of the processes running as `uid` passes
/// `limit` bytes, checked every second. Coarser than a cgroup (files in the
/// tmpfs are bounded by their sizes, not counted here, and a burst between
/// two checks passes), which is why the server warns at start.
async fn watch_memory(uid: u32, limit: u64, group: i32) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tick.tick().await;
        let used = tokio::task::spawn_blocking(move || resident_bytes_of(uid)).await.unwrap_or(0);
        if used > limit {
            tracing::warn!(uid, used, limit, "a browser passed its memory bound; killing it");
            kill_group(group);
            return;
        }
    }
}

/// The summed `VmRSS` of every process whose real uid is `uid`.
fn resident_bytes_of(uid: u32) -> u64 {
    processes_of(uid).iter().map(|(_, status)| status_kib(status, "VmRSS:") * 1024).sum()
}

/// Every process whose real uid is `uid`: its pid and its `status`.
fn processes_of(uid: u32) -> Vec<(i32, String)> {
    let Ok(procs) = std::fs::read_dir("/proc") else { return vec![] };
    let mut found = vec![];
    for entry in procs.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
        let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
        let real_uid = field("Uid:").and_then(|u| u.split_whitespace().next()).and_then(|u| u.parse::<u32>().ok());
        if real_uid == Some(uid) {
            found.push((pid, status));
        }
    }
    found
}

fn status_kib(status: &str, name: &str) -> u64 {
    let value = status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    value.and_then(|v| v.trim_end_matches("kB").trim().parse::<u64>().ok()).unwrap_or(0)
}

/// Kills every process running as browser uid `uid` and waits (briefly)
/// until none is left: what a browser leaves when it ends, however it
/// ended (its cgroup OOM-killed, a crash, its server killed), the
/// sandbox's own init process included, which runs outside the browser's
/// cgroup. Called only by a holder of the uid's lease, so no live
/// browser's process is ever touched. How many were killed.
fn reap(uid: u32) -> usize {
    let mut killed = 0;
    for _ in 0..100 {
        let left = processes_of(uid);
        if left.is_empty() {
            break;
        }
        for (pid, _) in &left {
            // SAFETY: a signal to a process of a browser uid this server holds.
            if unsafe { libc::kill(*pid, libc::SIGKILL) } == 0 {
                killed += 1;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    if killed > 0 {
        tracing::info!(uid, killed, "processes left under a browser uid reaped");
    }
    killed
}

/// Reaps what dead holders left under every browser uid that no live
/// browser on this host holds (each uid's lease taken and given back), at
/// a server's start: a server killed with its browsers leaves nothing
/// running once any server starts again.
pub fn reap_free_uids(config: &SandboxConfig) {
    let range = config.uid_base..config.uid_base.saturating_add(config.uid_count);
    let mut uids: Vec<u32> = vec![];
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        // The directory's owner is the process's effective uid, the same as
        // its real one for a browser (no setuid file in the sandbox runs).
        let Ok(meta) = entry.metadata() else { continue };
        let uid = std::os::unix::fs::MetadataExt::uid(&meta);
        if range.contains(&uid) && !uids.contains(&uid) && entry.file_name().to_str().is_some_and(is_pid) {
            uids.push(uid);
        }
    }
    for uid in uids {
        drop(UidLease::try_one(Path::new(UID_LOCKS), uid));
    }
}

fn is_pid(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit())
}

pub(crate) fn kill_group(pid: i32) {
    if pid > 0 {
        // SAFETY: sends a signal to a process group this server created.
        unsafe {
            libc::killpg(pid, libc::SIGKILL);
        }
    }
}

/// Where uid leases are held, host-wide: one lock file per uid, locked
/// (flock) by the process whose browser runs as it. A lock dies with its
/// holder, so a crashed server frees its uids, and several servers on one
/// host never hand out the same uid.
const UID_LOCKS: &str = "/run/grid-browser-uids";

/// A uid no other live browser on this host runs as, held until dropped.
/// Taking it and giving it back reap whatever runs as it ([`reap`]): a
/// uid is never handed to a browser with another's processes still under
/// it, and an ended browser leaves none.
struct UidLease(u32, #[allow(dead_code)] File);

impl Drop for UidLease {
    fn drop(&mut self) {
        reap(self.0);
    }
}

impl UidLease {
    fn take(config: &SandboxConfig) -> std::io::Result<UidLease> {
        Self::take_in(Path::new(UID_LOCKS), config)
    }

    fn take_in(dir: &Path, config: &SandboxConfig) -> std::io::Result<UidLease> {
        for uid in config.uid_base..config.uid_base.saturating_add(config.uid_count) {
            if let Some(lease) = Self::try_one(dir, uid)? {
                return Ok(lease);
            }
        }
        Err(std::io::Error::other(format!("all {} browser uids are in use", config.uid_count)))
    }

    /// `uid`'s lease when no live browser holds it, with whatever a dead
    /// holder left under it reaped.
    fn try_one(dir: &Path, uid: u32) -> std::io::Result<Option<UidLease>> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(dir.join(format!("{uid}.lock")))?;
        // SAFETY: flock on an fd we own; non-blocking.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Ok(None);
        }
        reap(uid);
        Ok(Some(UidLease(uid, file)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_browsers_never_share_a_uid_and_a_freed_uid_is_reused() {
        let dir = tempfile::tempdir().unwrap();
        let config = SandboxConfig { uid_base: 7_000_000, uid_count: 2, ..Default::default() };
        let a = UidLease::take_in(dir.path(), &config).unwrap();
        let b = UidLease::take_in(dir.path(), &config).unwrap();
        assert_ne!(a.0, b.0);
        assert!(UidLease::take_in(dir.path(), &config).is_err(), "only two uids in the range");
        let freed = a.0;
        drop(a);
        assert_eq!(UidLease::take_in(dir.path(), &config).unwrap().0, freed);
    }

    #[test]
    fn the_sandbox_sees_no_data_dir_and_gets_a_clean_environment() {
        let args = bwrap_args(&SandboxConfig::default(), &[("TZ".into(), "UTC".into())], None);
        let joined = args.join(" ");
        assert!(joined.contains("--unshare-all") && joined.contains("--die-with-parent"), "{joined}");
        assert!(joined.contains("--clearenv") && joined.contains("--setenv TZ UTC"), "{joined}");
        // The server's environment (proxy variables, database URLs) stays out.
        let set: Vec<&String> = args.windows(2).filter(|w| w[0] == "--setenv").map(|w| &w[1]).collect();
        assert_eq!(set, ["HOME", "TMPDIR", "PATH", "TZ"], "{joined}");
        // Only the system and fixed /etc entries are bound from the host.
        let binds: Vec<&String> = args.windows(2).filter(|w| w[0] == "--ro-bind").map(|w| &w[1]).collect();
        for b in binds {
            assert!(b == "/usr" || b.starts_with("/etc/") || b == "/var/cache/fontconfig", "unexpected bind {b}");
        }
        assert!(!joined.contains("--bind"), "nothing is bound writable: {joined}");
        // A session's download folder (through its portal) is the one
        // writable bind, over the home's tmpfs.
        let portal = Path::new(PORTALS).join("200001");
        let session = bwrap_args(&SandboxConfig::default(), &[], Some(&portal)).join(" ");
        assert!(session.contains(&format!("--bind {PORTALS}/200001 {DOWNLOADS}")), "{session}");
        assert!(session.find("--tmpfs /home/grid") < session.find("--bind "), "{session}");
        assert_eq!(session.matches("--bind").count(), 1, "{session}");
        // Every writable filesystem is bounded: /dev/shm is a sized tmpfs of its own, the rest of
        // /dev (bubblewrap's unbounded tmpfs) read-only after it.
        for dir in ["/tmp", "/home/grid", "/dev/shm"] {
            assert!(joined.contains(&format!("--size 536870912 --perms 0700 --tmpfs {dir}")), "{dir}: {joined}");
        }
        assert!(joined.find("--tmpfs /dev/shm") < joined.find("--remount-ro /dev"), "{joined}");
        assert!(joined.find("--dev /dev") < joined.find("--tmpfs /dev/shm"), "{joined}");
        // The sandbox's own root is read-only after every mount point is made.
        let root_ro = joined.find("--remount-ro / ").expect("the root is remounted read-only");
        assert!(joined.rfind("--tmpfs ").unwrap() < root_ro && joined.rfind("--dir ").unwrap() < root_ro, "{joined}");
    }
}
