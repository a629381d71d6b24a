//! What one browser may consume, bounded by the kernel: a control group per
//! browser (memory, tasks, an equal CPU weight).
//!
//! A lessee drives their browser with the whole DevTools protocol and a
//! capture page runs a stranger's scripts, so either can allocate without
//! end, open hundreds of targets or fill a tmpfs. Each browser therefore
//! runs in a cgroup of its own, `grid-browsers/uid-{uid}` below the server's
//! own cgroup, created before the browser runs (the sandbox's first process
//! is moved in while bubblewrap waits on its block fd, so everything the
//! browser forks is inside):
//!
//! - **memory**: `--browser-memory-mib` (default 2048), swap included.
//!   tmpfs pages (the sandbox's `/tmp`, home and `/dev/shm`) are charged to
//!   the cgroup that wrote them, so a browser's files count too. Past the
//!   bound the kernel's OOM killer picks inside this cgroup only (Chromium
//!   makes its renderers the likeliest victims): a tab or the browser dies,
//!   never another tenant's browser or the server.
//! - **tasks**: `--browser-pids` (default 1024) threads and processes; a
//!   fork or thread bomb stops there.
//! - **CPU**: every browser's cgroup gets the same weight (cgroup v1
//!   `cpu.shares` 1024, v2 `cpu.weight` 100), so under contention each busy
//!   browser gets an equal share whatever number of threads it spins; their
//!   parent weighs as much as one busy thread per core does outside it.
//!
//! Hosts differ: a pure cgroup v2 host (the unified hierarchy at
//! `/sys/fs/cgroup`) uses v2's files; a v1 or hybrid host uses the v1
//! hierarchies of the three controllers. On v2 a cgroup with processes may
//! not hand controllers to children, so when the server's own cgroup is not
//! the root the server first moves itself into a leaf `grid-server` beside
//! `grid-browsers` (as container entrypoints do). Where none of this can be
//! made (no controllers, a read-only cgroupfs), [`Host::detect`] says why,
//! the server warns once at start, and browsers run with the fallback of
//! `sandbox.rs`: a per-uid task limit (`RLIMIT_NPROC`) and the tmpfs sizes.

use std::path::{Path, PathBuf};

/// The bounds of one browser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub memory_mib: u64,
    pub pids: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { memory_mib: 2048, pids: 1024 }
    }
}

const PARENT: &str = "grid-browsers";
/// cgroup v1's default `cpu.shares` and v2's default `cpu.weight`.
const V1_CPU_SHARES: &str = "1024";
const V2_CPU_WEIGHT: &str = "100";

/// Where browsers' cgroups are made on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// The unified hierarchy: `parent` is the `grid-browsers` cgroup, with
    /// memory, pids and cpu enabled for its children.
    V2 { parent: PathBuf },
    /// One `grid-browsers` cgroup in each controller's v1 hierarchy.
    V1 { memory: PathBuf, pids: PathBuf, cpu: PathBuf },
    /// No cgroup can be made here; the reason, for the start-up warning.
    Unavailable(String),
}

impl Host {
    /// Finds the cgroup hierarchies of this host and makes the
    /// `grid-browsers` parents (the server must run as root).
    pub fn detect() -> Host {
        let own = match std::fs::read_to_string("/proc/self/cgroup") {
            Ok(text) => text,
            Err(e) => return Host::Unavailable(format!("reading /proc/self/cgroup: {e}")),
        };
        let root = Path::new("/sys/fs/cgroup");
        let result =
            if root.join("cgroup.controllers").is_file() { Self::v2(root, &own) } else { Self::v1(root, &own) };
        result.unwrap_or_else(Host::Unavailable)
    }

    fn v1(root: &Path, own: &str) -> Result<Host, String> {
        let parent = |controller: &str| -> Result<PathBuf, String> {
            let mount = root.join(controller);
            if !mount.join("cgroup.procs").is_file() {
                return Err(format!("no cgroup v1 {controller} hierarchy at {}", mount.display()));
            }
            let dir = below(&mount, v1_path(own, controller).as_deref().unwrap_or("/")).join(PARENT);
            make_dir(&dir)?;
            Ok(dir)
        };
        let (memory, pids, cpu) = (parent("memory")?, parent("pids")?, parent("cpu")?);
        // Children account hierarchically (the default on current kernels; older ones need it said).
        let _ = std::fs::write(memory.join("memory.use_hierarchy"), "1");
        write(&cpu.join("cpu.shares"), &(cores() * 1024).min(262_144).to_string())?;
        Ok(Host::V1 { memory, pids, cpu })
    }

    fn v2(root: &Path, own: &str) -> Result<Host, String> {
        let path = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("/");
        let mine = below(root, path);
        let needed = ["memory", "pids", "cpu"];
        let available = std::fs::read_to_string(mine.join("cgroup.controllers")).map_err(|e| e.to_string())?;
        if let Some(missing) = needed.iter().find(|c| !available.split_whitespace().any(|a| a == **c)) {
            return Err(format!("the {missing} controller is not delegated to {}", mine.display()));
        }
        if mine != root {
            // No processes in a cgroup that hands controllers down: the server moves to a leaf.
            let leaf = mine.join("grid-server");
            make_dir(&leaf)?;
            let procs = std::fs::read_to_string(mine.join("cgroup.procs")).map_err(|e| e.to_string())?;
            for pid in procs.split_whitespace() {
                // Other processes of the cgroup (a shell that started us) move along; one that exits meanwhile is fine.
                let _ = std::fs::write(leaf.join("cgroup.procs"), pid);
            }
        }
        write(&mine.join("cgroup.subtree_control"), "+memory +pids +cpu")?;
        let parent = mine.join(PARENT);
        make_dir(&parent)?;
        write(&parent.join("cgroup.subtree_control"), "+memory +pids +cpu")?;
        write(&parent.join("cpu.weight"), &(cores() * 100).min(10_000).to_string())?;
        Ok(Host::V2 { parent })
    }

    /// How browsers are bounded here, for the start-up log line.
    pub fn describe(&self) -> String {
        match self {
            Host::V2 { parent } => format!("cgroup v2 under {}", parent.display()),
            Host::V1 { memory, .. } => format!("cgroup v1 (memory, pids, cpu) under {}", memory.display()),
            Host::Unavailable(why) => format!("no cgroups ({why})"),
        }
    }

    /// Makes (or takes over) the cgroup of the browser running as `uid`
    /// and sets `limits`; `None` where the host has no cgroups.
    pub fn create(&self, uid: u32, limits: Limits) -> std::io::Result<Option<BrowserCgroup>> {
        let name = format!("uid-{uid}");
        let bytes = (limits.memory_mib * 1024 * 1024).to_string();
        let (dirs, settings): (Vec<PathBuf>, Vec<(PathBuf, String)>) = match self {
            Host::Unavailable(_) => return Ok(None),
            Host::V2 { parent } => {
                let dir = parent.join(&name);
                let settings = vec![
                    (dir.join("memory.max"), bytes),
                    (dir.join("memory.swap.max"), "0".into()),
                    (dir.join("pids.max"), limits.pids.to_string()),
                    (dir.join("cpu.weight"), V2_CPU_WEIGHT.into()),
                ];
                (vec![dir], settings)
            }
            Host::V1 { memory, pids, cpu } => {
                let (m, p, c) = (memory.join(&name), pids.join(&name), cpu.join(&name));
                let settings = vec![
                    (m.join("memory.limit_in_bytes"), bytes.clone()),
                    // Swap too, where the kernel accounts it (memsw may not be below the limit: set after).
                    (m.join("memory.memsw.limit_in_bytes"), bytes),
                    (p.join("pids.max"), limits.pids.to_string()),
                    (c.join("cpu.shares"), V1_CPU_SHARES.into()),
                ];
                (vec![m, p, c], settings)
            }
        };
        let group = BrowserCgroup { dirs };
        for dir in &group.dirs {
            match std::fs::create_dir(dir) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                other => other?,
            }
        }
        // Left by an earlier holder of this uid whose processes were still exiting.
        group.kill_all();
        // cgroup v1 refuses a swap bound below the memory bound and a memory bound above the swap
        // bound: try the swap bound first (it fails when lowering both), then set both in order.
        if let Some((file, value)) = settings.iter().find(|(f, _)| is_swap_file(f)) {
            let _ = std::fs::write(file, value);
        }
        for (file, value) in settings {
            match std::fs::write(&file, &value) {
                // memsw and swap.max exist only where swap is accounted.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && is_swap_file(&file) => {}
                Err(e) => return Err(std::io::Error::other(format!("writing {value} to {}: {e}", file.display()))),
                Ok(()) => {}
            }
        }
        Ok(Some(group))
    }
}

/// One browser's cgroup (a directory per hierarchy); dropping it kills
/// what is left inside and removes it.
#[derive(Debug)]
pub struct BrowserCgroup {
    dirs: Vec<PathBuf>,
}

impl BrowserCgroup {
    /// Moves process `pid` (and the children it forks from now on) in.
    pub fn add(&self, pid: i32) -> std::io::Result<()> {
        for dir in &self.dirs {
            std::fs::write(dir.join("cgroup.procs"), pid.to_string())
                .map_err(|e| std::io::Error::other(format!("moving pid {pid} into {}: {e}", dir.display())))?;
        }
        Ok(())
    }

    fn kill_all(&self) {
        for dir in &self.dirs {
            if std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
                continue;
            }
            let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) else { continue };
            for pid in procs.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
                // SAFETY: kill has no memory preconditions; the pid is in a cgroup only browsers join.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }

    /// Kills what is left inside and removes the cgroup from a thread that
    /// tries for a few seconds (a cgroup is busy while its killed processes
    /// still exit), dropping `held` once it is gone: the browser's uid, so
    /// no next browser of that uid takes over a cgroup being removed.
    pub fn remove_then<T: Send + 'static>(mut self, held: T) {
        self.kill_all();
        let dirs = std::mem::take(&mut self.dirs);
        let remove = move || {
            for _ in 0..250 {
                let busy = dirs.iter().filter(|dir| std::fs::remove_dir(dir).is_err() && dir.exists()).count();
                if busy == 0 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            // One left anyway is taken over by the next browser of the uid (`Host::create`).
            drop(held);
        };
        if let Err(e) = std::thread::Builder::new().name("grid-cgroup-rm".into()).spawn(remove) {
            tracing::warn!(error = %e, "no thread to remove a browser's cgroup; the next browser of its uid takes it over");
        }
    }
}

impl Drop for BrowserCgroup {
    /// Without [`BrowserCgroup::remove_then`]: what is left inside is killed
    /// and the cgroup removed if it already can be.
    fn drop(&mut self) {
        self.kill_all();
        for dir in &self.dirs {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// The browsers together weigh as much as this many busy threads outside
/// them (one per core): a busy server does not starve its browsers, nor
/// they the server; among themselves each browser weighs the same.
fn cores() -> u64 {
    std::thread::available_parallelism().map(|n| n.get() as u64).unwrap_or(1)
}

fn is_swap_file(file: &Path) -> bool {
    file.file_name().is_some_and(|n| n == "memory.memsw.limit_in_bytes" || n == "memory.swap.max")
}

/// The server's own cgroup in one v1 hierarchy, from `/proc/self/cgroup`
/// lines such as `4:memory:/some/path` (or `3:cpu,cpuacct:/`).
fn v1_path(own: &str, controller: &str) -> Option<String> {
    own.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == controller).then(|| path.to_string())
    })
}

/// `mount` joined with a cgroup path; the mount itself when that path is not
/// there (a cgroup namespace shows the server's cgroup as `/`).
fn below(mount: &Path, path: &str) -> PathBuf {
    let joined = mount.join(path.trim_start_matches('/'));
    if joined.is_dir() {
        joined
    } else {
        mount.to_path_buf()
    }
}

fn make_dir(dir: &Path) -> Result<(), String> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(format!("creating {}: {e}", dir.display())),
        _ => Ok(()),
    }
}

fn write(file: &Path, value: &str) -> Result<(), String> {
    std::fs::write(file, value).map_err(|e| format!("writing {value:?} to {}: {e}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_v1_cgroup_is_read_per_controller() {
        let own = "12:pids:/a/b\n4:memory:/process_api/x\n3:cpu,cpuacct:/\n0::/\n";
        assert_eq!(v1_path(own, "memory").as_deref(), Some("/process_api/x"));
        assert_eq!(v1_path(own, "pids").as_deref(), Some("/a/b"));
        assert_eq!(v1_path(own, "cpu").as_deref(), Some("/"));
        assert_eq!(v1_path(own, "blkio"), None);
    }

    #[test]
    fn a_path_missing_under_the_mount_means_a_cgroup_namespace() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        assert_eq!(below(dir.path(), "/a/b"), dir.path().join("a/b"));
        assert_eq!(below(dir.path(), "/elsewhere"), dir.path());
        assert_eq!(below(dir.path(), "/"), dir.path());
    }

    #[test]
    fn limits_are_written_per_hierarchy_and_the_cgroup_goes_on_drop() {
        // A v1 layout in a temp dir (plain files stand in for the kernel's).
        let dir = tempfile::tempdir().unwrap();
        let parents: Vec<PathBuf> = ["memory", "pids", "cpu"].iter().map(|c| dir.path().join(c)).collect();
        for p in &parents {
            std::fs::create_dir_all(p).unwrap();
        }
        let host = Host::V1 { memory: parents[0].clone(), pids: parents[1].clone(), cpu: parents[2].clone() };
        let group = host.create(200_001, Limits { memory_mib: 512, pids: 64 }).unwrap().unwrap();
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(&parents[0].join("uid-200001/memory.limit_in_bytes")), (512u64 << 20).to_string());
        assert_eq!(read(&parents[0].join("uid-200001/memory.memsw.limit_in_bytes")), (512u64 << 20).to_string());
        assert_eq!(read(&parents[1].join("uid-200001/pids.max")), "64");
        assert_eq!(read(&parents[2].join("uid-200001/cpu.shares")), "1024");
        assert!(Host::Unavailable("none".into()).create(1, Limits::default()).unwrap().is_none());
        drop(group);
        // A real cgroupfs removes a cgroup's files with it; here rmdir fails on the
        // plain files, which is the "still busy" path: the next holder takes it over.
        let again = host.create(200_001, Limits { memory_mib: 256, pids: 32 }).unwrap().unwrap();
        assert_eq!(read(&parents[1].join("uid-200001/pids.max")), "32");
        drop(again);
    }
}
