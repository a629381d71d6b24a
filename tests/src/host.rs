//! What the host shows of the grid's processes, read from `/proc`: the
//! process tree under the server, command lines, listening TCP sockets and
//! which process holds them. Used by the isolation tests to check from the
//! outside what a browser exposes.
//!
//! Sockets are read per network namespace (`/proc/<pid>/net/tcp{,6}` is the
//! view of that process' namespace), so a listener in a browser's private
//! namespace is found as well as one on the host's loopback.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// TCP state LISTEN in `/proc/net/tcp`.
const TCP_LISTEN: &str = "0A";

/// A listening TCP socket.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Listener {
    pub port: u16,
    pub inode: u64,
    /// `ADDR` as `/proc/net/tcp*` writes it (hex), for messages.
    pub local: String,
}

/// Listening sockets in a `/proc/.../net/tcp` or `tcp6` table (missing or
/// unreadable file: none).
pub fn listeners_in(table: &Path) -> Vec<Listener> {
    let Ok(text) = std::fs::read_to_string(table) else { return vec![] };
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[3] != TCP_LISTEN {
                return None;
            }
            let (addr, port) = f[1].rsplit_once(':')?;
            Some(Listener {
                port: u16::from_str_radix(port, 16).ok()?,
                inode: f[9].parse().ok()?,
                local: addr.to_string(),
            })
        })
        .collect()
}

/// Listening sockets of the network namespace `proc_dir` (`/proc/self` or
/// `/proc/<pid>`) sees, IPv4 and IPv6.
pub fn listeners_of_namespace(proc_dir: &Path) -> Vec<Listener> {
    let mut all = listeners_in(&proc_dir.join("net/tcp"));
    all.extend(listeners_in(&proc_dir.join("net/tcp6")));
    all
}

/// The host's (this test process' namespace's) listening TCP sockets.
pub fn host_listeners() -> Vec<Listener> {
    listeners_of_namespace(Path::new("/proc/self"))
}

/// Every pid in /proc.
pub fn pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return vec![] };
    dir.flatten().filter_map(|e| e.file_name().to_string_lossy().parse().ok()).collect()
}

/// The parent pid from `/proc/<pid>/stat`.
pub fn parent(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Every living process below `root` (children, their children, ...).
pub fn descendants(root: i32) -> Vec<i32> {
    let parents: HashMap<i32, i32> = pids().into_iter().filter_map(|p| Some((p, parent(p)?))).collect();
    let mut found: BTreeSet<i32> = BTreeSet::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (child, _) in parents.iter().filter(|(_, parent)| **parent == p) {
            if found.insert(*child) {
                frontier.push(*child);
            }
        }
    }
    found.into_iter().collect()
}

/// Whether a process exists and is neither a zombie nor dead (state
/// `Z`/`X` in `/proc/PID/stat`).
pub fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])))
        .unwrap_or(false)
}

/// A process's `/proc/PID/status` (None when it is gone).
pub fn status(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status")).ok()
}

/// The fields of the `name:` line of a `/proc/PID/status` (or
/// `/proc/meminfo`) text: `Uid:\t0\t0\t0\t0` gives four; empty when the
/// line is missing.
pub fn status_fields<'a>(status: &'a str, name: &str) -> Vec<&'a str> {
    let prefix = format!("{name}:");
    status
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|rest| rest.split_whitespace().collect())
        .unwrap_or_default()
}

/// A `name:` line's first field as a number (`VmRSS:  123 kB` gives 123).
pub fn status_number(status: &str, name: &str) -> Option<u64> {
    status_fields(status, name).first()?.parse().ok()
}

/// The command line of a process (empty when it is gone).
pub fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
        })
        .unwrap_or_default()
}

/// The short command name (`/proc/<pid>/comm`).
pub fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|c| c.trim().to_string()).unwrap_or_default()
}

/// Whether a process is a Chromium (browser, zygote, renderer, utility, ...).
pub fn is_chromium(pid: i32) -> bool {
    let comm = comm(pid);
    let exe = cmdline(pid).into_iter().next().unwrap_or_default();
    let exe_name = Path::new(&exe).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    comm.starts_with("chrom") || exe_name.starts_with("chrom")
}

/// The browsers a server started: below `server`, the chromium processes
/// whose parent is bubblewrap (each browser runs in a sandbox of its own;
/// its zygotes and renderers descend from it, crashpad is its sibling).
pub fn browser_mains(server: i32) -> Vec<i32> {
    descendants(server)
        .into_iter()
        .filter(|p| comm(*p) == "chromium" && parent(*p).is_some_and(|parent| comm(parent) == "bwrap"))
        .collect()
}

/// Socket inodes a process holds open; Err when its fd table cannot be read.
pub fn socket_inodes(pid: i32) -> std::io::Result<HashSet<u64>> {
    let mut inodes = HashSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))?.flatten() {
        let Ok(link) = std::fs::read_link(entry.path()) else { continue };
        let link = link.to_string_lossy();
        if let Some(inode) = link.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')) {
            if let Ok(inode) = inode.parse() {
                inodes.insert(inode);
            }
        }
    }
    Ok(inodes)
}

/// Which process holds each socket inode, over every process whose fd table
/// can be read.
pub fn socket_owners() -> HashMap<u64, i32> {
    let mut owners = HashMap::new();
    for pid in pids() {
        if let Ok(inodes) = socket_inodes(pid) {
            for inode in inodes {
                owners.entry(inode).or_insert(pid);
            }
        }
    }
    owners
}

/// The listening TCP sockets a process holds, found in its own network
/// namespace and in the host's.
pub fn listeners_held_by(pid: i32) -> std::io::Result<Vec<Listener>> {
    let held = socket_inodes(pid)?;
    let mut tables = listeners_of_namespace(&PathBuf::from(format!("/proc/{pid}")));
    tables.extend(host_listeners());
    let mut found: Vec<Listener> = tables.into_iter().filter(|l| held.contains(&l.inode)).collect();
    found.sort();
    found.dedup();
    Ok(found)
}

/// Ports on the host's loopback held by `root` (the grid server) or a
/// process below it: what a browser of the grid could expose. Listeners of
/// other processes (other tests' targets and counters running at the same
/// time, services of the machine) are left alone, so probing cannot disturb
/// them.
pub fn ports_of_tree(root: i32) -> Vec<u16> {
    let mut tree: HashSet<i32> = descendants(root).into_iter().collect();
    tree.insert(root);
    let owners = socket_owners();
    let ports: BTreeSet<u16> = host_listeners()
        .into_iter()
        .filter(|l| owners.get(&l.inode).is_some_and(|pid| tree.contains(pid)))
        .map(|l| l.port)
        .collect();
    ports.into_iter().collect()
}

/// The real uid of a process (None when it is gone).
pub fn uid_of(pid: i32) -> Option<u32> {
    status(pid).and_then(|s| status_fields(&s, "Uid").first().and_then(|u| u.parse().ok()))
}

/// Every process whose real uid is `uid`, with its command name.
pub fn processes_of_uid(uid: u32) -> Vec<(i32, String)> {
    pids().into_iter().filter(|p| uid_of(*p) == Some(uid)).map(|p| (p, comm(p))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_listening_rows_only() {
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join("tcp");
        std::fs::write(
            &table,
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
             0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0\n\
             1: 0100007F:A2B4 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0 20 4 30 10 -1\n",
        )
        .unwrap();
        assert_eq!(listeners_in(&table), [Listener { port: 8080, inode: 4242, local: "0100007F".into() }]);
    }

    #[test]
    fn finds_its_own_listener_and_itself_below_its_parent() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let me = std::process::id() as i32;
        let held = listeners_held_by(me).unwrap();
        assert!(held.iter().any(|h| h.port == port), "{held:?}");
        let parent = parent(me).unwrap();
        assert!(descendants(parent).contains(&me));
        // Its own listener counts for its own tree and for no other.
        assert!(ports_of_tree(me).contains(&port));
        assert!(!ports_of_tree(i32::MAX).contains(&port));
    }
}
