//! Job scratch: each attempt's `/tmp`, a directory on the node's disk.
//!
//! ```text
//! job-scratch/                  root 0700, in the data dir beside logs/
//!   cj_…-1/                     65534:65534 0700: bound at the container's /tmp
//! ```
//!
//! The container's root filesystem is read-only; this directory is the one
//! place a job writes (`docker.rs`). It is disk, not memory: nothing in it
//! counts against the job's memory limit. Its bound is the grid's, not the
//! kernel's: the attempt's supervision (`JobDriver::supervise`) measures it
//! every 2 s (`usage`) and evicts the attempt over `docker::scratch_limit`.
//! It is made empty when the attempt's container is made and removed when
//! the attempt ends (and, for attempts no longer running, on start-up
//! reconciliation). Only the driver uses it.
//!
//! **Security:** everything below an attempt's directory is written by a
//! tenant's program, which may plant symlinks (to `/`, to a big file of the
//! host), hard links, FIFOs, directories it cannot read, or nest them
//! deeply. The grid never opens a file in it and never follows a link: the
//! walk opens directories only relative to their parent's fd with
//! `O_NOFOLLOW | O_DIRECTORY` and reads everything else with
//! `fstatat(AT_SYMLINK_NOFOLLOW)`; removal is `remove_dir_all`, which
//! neither follows nor races links. The walk holds one fd per level of
//! nesting, so it refuses to go deeper than [`MAX_DEPTH`]: such a tree is
//! reported, not measured, and the driver evicts it as over its storage.

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, Dir, FileType, Gid, Mode, OFlags, Uid};
use rustix::io::Errno;

/// The folder of every attempt's scratch, under the data dir.
pub const DIR: &str = "job-scratch";

/// The uid and gid of `docker::JOB_USER`, who owns an attempt's scratch.
pub const JOB_UID: u32 = 65534;
pub const JOB_GID: u32 = 65534;

/// Directories nested deeper than this below an attempt's scratch are not
/// walked (the walk holds an fd per level): the scratch is reported
/// [`Usage::TooDeep`].
pub const MAX_DEPTH: usize = 64;

/// What a walk found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// The scratch's blocks, all of them: no more than the walk's bound.
    Within(u64),
    /// The walk stopped once past its bound, at this many bytes.
    Over(u64),
    /// Directories nest deeper than [`MAX_DEPTH`]: not measured.
    TooDeep,
}

/// `{jobId}-{attempt}`, or `None` for a job id that could not be a folder
/// name (ids are the server's own, so never in practice).
fn folder_name(job_id: &str, attempt: u32) -> Option<String> {
    let plain =
        !job_id.is_empty() && job_id.len() <= 64 && job_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    plain.then(|| format!("{job_id}-{attempt}"))
}

/// `{jobId}-{attempt}` back to its parts.
fn parse_folder_name(name: &str) -> Option<(&str, u32)> {
    let (job, attempt) = name.rsplit_once('-')?;
    let attempt = attempt.parse().ok()?;
    (folder_name(job, attempt).as_deref() == Some(name)).then_some((job, attempt))
}

fn open_dir_at(dir: impl rustix::fd::AsFd, name: impl rustix::path::Arg) -> rustix::io::Result<OwnedFd> {
    rfs::openat(dir, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
}

/// Every attempt's scratch on this node.
#[derive(Debug, Clone)]
pub struct Scratch {
    root: PathBuf,
}

impl Scratch {
    /// Scratch folders under `root` (made when first needed), which is made
    /// absolute: the engine binds it by its path.
    pub fn new(root: PathBuf) -> Scratch {
        let root = std::path::absolute(&root).unwrap_or(root);
        Scratch { root }
    }

    /// The attempt's scratch, whether or not it exists.
    pub fn path(&self, job_id: &str, attempt: u32) -> Option<PathBuf> {
        Some(self.root.join(folder_name(job_id, attempt)?))
    }

    fn open_root(&self) -> std::io::Result<OwnedFd> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.root)?;
        let root = rfs::open(&self.root, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        rfs::fchmod(&root, Mode::from_raw_mode(0o700))?;
        Ok(root)
    }

    /// The attempt's scratch, made empty (whatever an earlier run of the
    /// attempt left there is removed first): mode 0700, owned by the job's
    /// uid and gid. Answers its path, to bind at the container's `/tmp`.
    pub fn create(&self, job_id: &str, attempt: u32) -> std::io::Result<PathBuf> {
        let name = folder_name(job_id, attempt)
            .ok_or_else(|| std::io::Error::other(format!("not a job id for a folder name: {job_id:?}")))?;
        let root = self.open_root()?;
        let path = self.root.join(&name);
        match std::fs::remove_dir_all(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        rfs::mkdirat(&root, name.as_str(), Mode::from_raw_mode(0o700))?;
        let dir = open_dir_at(&root, name.as_str())?;
        rfs::fchown(&dir, Some(Uid::from_raw(JOB_UID)), Some(Gid::from_raw(JOB_GID)))?;
        // Whatever the umask took off.
        rfs::fchmod(&dir, Mode::from_raw_mode(0o700))?;
        Ok(path)
    }

    /// Removes the attempt's scratch and everything in it; failures are
    /// only logged (start-up reconciliation removes what is left).
    pub fn remove(&self, job_id: &str, attempt: u32) {
        if let Some(name) = folder_name(job_id, attempt) {
            self.remove_folder(&name);
        }
    }

    fn remove_folder(&self, name: &str) {
        match std::fs::remove_dir_all(self.root.join(name)) {
            Ok(()) => tracing::debug!(folder = name, "job scratch removed"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(folder = name, error = %e, "job scratch not removed; the next start removes it")
            }
        }
    }

    /// Removes every scratch folder but those of the attempts `keep` names
    /// (by job id and attempt); a folder of no attempt at all goes too.
    pub fn remove_all_but(&self, keep: impl Fn(&str, u32) -> bool) {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                tracing::warn!(error = %e, "job scratch folders unreadable; none removed");
                return;
            }
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !parse_folder_name(&name).is_some_and(|(job, attempt)| keep(job, attempt)) {
                self.remove_folder(&name);
            }
        }
    }

    /// What the attempt's scratch takes on disk (`usage`).
    pub fn usage(&self, job_id: &str, attempt: u32, bound: u64) -> std::io::Result<Usage> {
        let path = self.path(job_id, attempt).ok_or_else(|| std::io::Error::other("not a job id"))?;
        usage(&path, bound)
    }
}

/// The disk blocks (`st_blocks` × 512) of the directory `dir` and of
/// everything below it, every inode counted once (a file with several hard
/// links, a directory met twice while the job renames it), whatever its
/// type: files, directories, symlinks (the link itself, never its target),
/// FIFOs and sockets. Nothing is followed and no file is opened: directories
/// are opened relative to their parent with `O_NOFOLLOW | O_DIRECTORY`,
/// everything else is `fstatat(AT_SYMLINK_NOFOLLOW)`. An entry that vanishes
/// or changes type while the walk reads it is skipped (the next walk sees
/// it). Stops once past `bound` (`Usage::Over`), and below `MAX_DEPTH`
/// levels of directories (`Usage::TooDeep`).
pub fn usage(dir: &Path, bound: u64) -> std::io::Result<Usage> {
    let root = rfs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    let blocks = |st: &rfs::Stat| (st.st_blocks as u64).saturating_mul(512);
    let id = |st: &rfs::Stat| (st.st_dev, st.st_ino);
    let st = rfs::fstat(&root)?;
    let mut total = blocks(&st);
    // Directories, and other inodes with more than one link.
    let mut seen = HashSet::from([id(&st)]);
    let mut stack = vec![Dir::new(root)?];
    loop {
        let depth = stack.len();
        let Some(top) = stack.last_mut() else { break };
        let entry = match top.read() {
            None => {
                stack.pop();
                continue;
            }
            Some(entry) => entry?,
        };
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let parent = top.fd()?;
        let st = match rfs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(e.into()),
        };
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            if st.st_nlink <= 1 || seen.insert(id(&st)) {
                total = total.saturating_add(blocks(&st));
            }
        } else {
            if depth > MAX_DEPTH {
                return Ok(Usage::TooDeep);
            }
            let child = match open_dir_at(parent, name) {
                Ok(fd) => fd,
                // Gone, or no longer a directory (a file or a symlink now).
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => continue,
                Err(e) => return Err(e.into()),
            };
            // The directory opened, which may not be the one listed.
            let st = rfs::fstat(&child)?;
            if !seen.insert(id(&st)) {
                continue;
            }
            total = total.saturating_add(blocks(&st));
            stack.push(Dir::new(child)?);
        }
        if total > bound {
            return Ok(Usage::Over(total));
        }
    }
    Ok(Usage::Within(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

    const MI: u64 = 1024 * 1024;

    fn blocks(p: &Path) -> u64 {
        std::fs::symlink_metadata(p).unwrap().blocks() * 512
    }

    /// `len` bytes of real data (not a hole): blocks on disk.
    fn write(p: &Path, len: usize) {
        std::fs::write(p, vec![7u8; len]).unwrap();
    }

    #[test]
    fn the_walk_counts_blocks_once_and_follows_no_link() {
        let tmp = tempfile::tempdir().unwrap();
        // A big file outside the scratch, and a directory outside with more.
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        write(&outside.join("big"), 8 * MI as usize);
        let scratch = tmp.path().join("scratch");
        std::fs::create_dir(&scratch).unwrap();
        write(&scratch.join("a"), 100_000);
        std::fs::create_dir_all(scratch.join("d/e")).unwrap();
        write(&scratch.join("d/e/b"), 300_000);
        // Three names, one inode: counted once.
        std::fs::hard_link(scratch.join("a"), scratch.join("d/a-again")).unwrap();
        std::fs::hard_link(scratch.join("a"), scratch.join("d/e/a-thrice")).unwrap();
        // Links out of the scratch: the links themselves, never what they reach.
        symlink(outside.join("big"), scratch.join("to-big")).unwrap();
        symlink(&outside, scratch.join("d/to-outside")).unwrap();
        symlink("/", scratch.join("d/e/to-root")).unwrap();
        // A FIFO: never opened (opening one would block).
        rustix::fs::mknodat(rustix::fs::CWD, scratch.join("fifo"), FileType::Fifo, Mode::from_raw_mode(0o600), 0)
            .unwrap();
        // A directory its owner may not read: the grid still measures it.
        std::fs::create_dir(scratch.join("locked")).unwrap();
        write(&scratch.join("locked/c"), 50_000);
        std::fs::set_permissions(scratch.join("locked"), std::fs::Permissions::from_mode(0o000)).unwrap();

        let expected: u64 =
            ["", "a", "d", "d/e", "d/e/b", "to-big", "d/to-outside", "d/e/to-root", "fifo", "locked", "locked/c"]
                .iter()
                .map(|p| blocks(&scratch.join(p)))
                .sum();
        assert!((450_000..2 * MI).contains(&expected), "{expected}");
        // Counting `a` once per name would add 200,000 bytes or more, following
        // `to-big` or `to-outside` 8 MiB, following `to-root` the whole host.
        assert_eq!(usage(&scratch, u64::MAX).unwrap(), Usage::Within(expected));

        // Past the bound the walk stops and says so.
        assert!(matches!(usage(&scratch, 200_000).unwrap(), Usage::Over(n) if n > 200_000));
        // The scratch itself must not be a link either.
        symlink(&scratch, tmp.path().join("link-to-scratch")).unwrap();
        let e = usage(&tmp.path().join("link-to-scratch"), u64::MAX).unwrap_err().raw_os_error();
        assert!(matches!(e, Some(libc::ENOTDIR | libc::ELOOP)), "{e:?}");
        std::fs::set_permissions(scratch.join("locked"), std::fs::Permissions::from_mode(0o700)).unwrap();
    }

    #[test]
    fn directories_nested_past_the_depth_bound_are_reported_not_walked() {
        let tmp = tempfile::tempdir().unwrap();
        let mut deep = tmp.path().to_path_buf();
        for _ in 0..MAX_DEPTH {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        assert!(matches!(usage(tmp.path(), u64::MAX).unwrap(), Usage::Within(_)));
        std::fs::create_dir(deep.join("d")).unwrap();
        assert_eq!(usage(tmp.path(), u64::MAX).unwrap(), Usage::TooDeep);
    }

    #[test]
    fn a_scratch_is_made_empty_for_the_job_user_and_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let s = Scratch::new(tmp.path().join(DIR));
        let p = s.create("cj_abc", 1).unwrap();
        assert_eq!(p, tmp.path().join(DIR).join("cj_abc-1"));
        let m = std::fs::symlink_metadata(&p).unwrap();
        assert!(m.is_dir());
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (JOB_UID, JOB_GID, 0o700));
        assert_eq!(std::fs::symlink_metadata(tmp.path().join(DIR)).unwrap().mode() & 0o7777, 0o700);
        // An earlier run's leftovers are gone; a link planted inside is removed, not followed.
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        write(&outside.join("keep"), 10);
        write(&p.join("old"), 10);
        symlink(&outside, p.join("to-outside")).unwrap();
        let again = s.create("cj_abc", 1).unwrap();
        assert_eq!(std::fs::read_dir(&again).unwrap().count(), 0);
        symlink(&outside, again.join("to-outside")).unwrap();
        s.create("cj_abc", 2).unwrap();
        s.create("cj_def", 1).unwrap();
        std::fs::create_dir(tmp.path().join(DIR).join("stray")).unwrap();
        s.remove("cj_abc", 1);
        assert!(!again.exists());
        assert!(outside.join("keep").exists(), "removal followed a link");
        s.remove_all_but(|job, attempt| (job, attempt) == ("cj_def", 1));
        let left: Vec<_> = std::fs::read_dir(tmp.path().join(DIR)).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["cj_def-1"]);
        assert!(s.create("../x", 1).is_err());
        assert_eq!(parse_folder_name("cj_def-12"), Some(("cj_def", 12)));
        assert_eq!(parse_folder_name("cj_def"), None);
    }
}
