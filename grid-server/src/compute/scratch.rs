//! Job scratch: each attempt's `/tmp`, a directory on the node's disk.
//!
//! ```text
//! job-scratch/                  root 0700, in the data dir beside logs/
//!   cj_…-1.img                  root 0600: a sparse ext4 image of the bound
//!   cj_…-1/                     the image mounted; its root 65534:65534 0700,
//!                               bound at the container's /tmp
//! ```
//!
//! The container's root filesystem is read-only; this directory is the one
//! place a job writes (`docker.rs`). It is disk, not memory: nothing in it
//! counts against the job's memory limit. Its bound is the kernel's: a
//! filesystem of `docker::scratch_limit` bytes (`filesystem`), so a write
//! past it fails with ENOSPC. The attempt's supervision
//! (`JobDriver::supervise`) also measures it every 2 s (`usage`) and evicts
//! the attempt over the bound: the only bound where no filesystem can be
//! made (no loop device), and for plain `Scratch::new` folders.
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
    /// Each attempt's scratch a filesystem of its own, of its bound
    /// ([`Scratch::bounded`]); else a plain folder, bounded by the watch alone.
    filesystems: bool,
}

impl Scratch {
    /// Scratch folders under `root` (made when first needed), which is made
    /// absolute: the engine binds it by its path. Plain folders, bounded by
    /// the driver's watch alone (the simulated grid's).
    pub fn new(root: PathBuf) -> Scratch {
        let root = std::path::absolute(&root).unwrap_or(root);
        Scratch { root, filesystems: false }
    }

    /// [`Scratch::new`] whose every attempt's scratch is a filesystem of
    /// its bound's size (`filesystem`), so the kernel refuses what a job
    /// writes past it: the server's.
    pub fn bounded(root: PathBuf) -> Scratch {
        Scratch { filesystems: true, ..Scratch::new(root) }
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
    /// uid and gid; for a bounded `Scratch` a filesystem of `bound` bytes.
    /// Answers its path, to bind at the container's `/tmp`.
    pub fn create(&self, job_id: &str, attempt: u32, bound: u64) -> std::io::Result<PathBuf> {
        let name = folder_name(job_id, attempt)
            .ok_or_else(|| std::io::Error::other(format!("not a job id for a folder name: {job_id:?}")))?;
        let root = self.open_root()?;
        let path = self.root.join(&name);
        self.remove_folder(&name);
        rfs::mkdirat(&root, name.as_str(), Mode::from_raw_mode(0o700))?;
        if self.filesystems {
            if let Err(e) = filesystem::mount(&self.root, &name, bound) {
                // The watch still bounds it, as on a host without loop devices.
                tracing::warn!(folder = %name, error = %e, "job scratch is a plain folder: its bound is the 2 s watch, not the kernel's");
                self.remove_folder(&name);
                rfs::mkdirat(&root, name.as_str(), Mode::from_raw_mode(0o700))?;
            }
        }
        // The mounted filesystem's root when there is one.
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

    /// Removes a scratch folder: its filesystem unmounted first (lazily:
    /// a container not yet gone keeps it until it goes), then the folder
    /// and the filesystem's image.
    fn remove_folder(&self, name: &str) {
        let path = self.root.join(name);
        filesystem::unmount(&path);
        match std::fs::remove_dir_all(&path) {
            Ok(()) => tracing::debug!(folder = name, "job scratch removed"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(folder = name, error = %e, "job scratch not removed; the next start removes it")
            }
        }
        match std::fs::remove_file(filesystem::image(&self.root, name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(folder = name, error = %e, "job scratch image not removed; the next start removes it")
            }
            _ => {}
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
            // An image goes with its folder (`remove_folder`).
            let folder = name.strip_suffix(filesystem::IMAGE_SUFFIX).unwrap_or(&name);
            if !parse_folder_name(folder).is_some_and(|(job, attempt)| keep(job, attempt)) {
                self.remove_folder(folder);
            }
        }
    }

    /// What the attempt's scratch takes on disk (`usage`).
    pub fn usage(&self, job_id: &str, attempt: u32, bound: u64) -> std::io::Result<Usage> {
        let path = self.path(job_id, attempt).ok_or_else(|| std::io::Error::other("not a job id"))?;
        usage(&path, bound)
    }
}

/// An attempt's scratch as a filesystem of its own: ext4 in a sparse image
/// file of the scratch's bound beside its folder (`{folder}.img`, root's,
/// 0600), loop-mounted on the folder (`nosuid`, `nodev`). The kernel
/// refuses a write past the bound (`ENOSPC`) and the image never takes
/// more of the host's disk than its size; on disk, not in memory, so
/// nothing of it counts against the job's memory limit (a tmpfs would).
/// No journal (nothing of a scratch outlives its attempt), no blocks
/// reserved for root (the job is not root). A few percent of the bound go
/// to the filesystem's own metadata.
mod filesystem {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    pub const IMAGE_SUFFIX: &str = ".img";

    pub fn image(root: &Path, folder: &str) -> PathBuf {
        root.join(format!("{folder}{IMAGE_SUFFIX}"))
    }

    /// The first of `candidates` that exists: the server's `PATH` may lack
    /// the `sbin` folders.
    fn program(candidates: &[&str]) -> std::io::Result<PathBuf> {
        candidates.iter().map(PathBuf::from).find(|p| p.is_file()).ok_or_else(|| {
            std::io::Error::other(format!("{} not found (Debian packages e2fsprogs and mount)", candidates[0]))
        })
    }

    fn run(program: &Path, args: &[&std::ffi::OsStr]) -> std::io::Result<()> {
        let out = Command::new(program).args(args).env_clear().output()?;
        if out.status.success() {
            return Ok(());
        }
        Err(std::io::Error::other(format!(
            "{} failed ({}): {}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }

    /// Makes `root/folder` (an empty folder) a filesystem of `bound` bytes.
    pub fn mount(root: &Path, folder: &str, bound: u64) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let (image, dir) = (image(root, folder), root.join(folder));
        let file = std::fs::OpenOptions::new().create_new(true).write(true).mode(0o600).open(&image)?;
        // Sparse: blocks are taken only as the job writes.
        file.set_len(bound)?;
        drop(file);
        let mkfs = program(&["/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"])?;
        let options = "root_owner=65534:65534,lazy_itable_init=1,nodiscard";
        let args = ["-q", "-F", "-m", "0", "-O", "^has_journal", "-E", options];
        let mut argv: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
        argv.push(image.as_os_str());
        run(&mkfs, &argv)?;
        let mount = program(&["/usr/bin/mount", "/bin/mount"])?;
        let opts = std::ffi::OsStr::new("loop,nosuid,nodev,noatime");
        run(&mount, &["-o".as_ref(), opts, image.as_os_str(), dir.as_os_str()])?;
        // mkfs's lost+found (root's) would be the job's to see; it is not needed.
        let _ = std::fs::remove_dir(dir.join("lost+found"));
        Ok(())
    }

    /// Lazily unmounts what is mounted on `dir`, if anything; the loop
    /// device goes once the last user of the filesystem has (autoclear).
    pub fn unmount(dir: &Path) {
        match rustix::mount::unmount(dir, rustix::mount::UnmountFlags::DETACH | rustix::mount::UnmountFlags::NOFOLLOW) {
            // EINVAL: not a mount point (a plain folder, or none); ENOENT: no folder.
            Ok(()) | Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "job scratch not unmounted"),
        }
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
        let p = s.create("cj_abc", 1, MI).unwrap();
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
        let again = s.create("cj_abc", 1, MI).unwrap();
        assert_eq!(std::fs::read_dir(&again).unwrap().count(), 0);
        symlink(&outside, again.join("to-outside")).unwrap();
        s.create("cj_abc", 2, MI).unwrap();
        s.create("cj_def", 1, MI).unwrap();
        std::fs::create_dir(tmp.path().join(DIR).join("stray")).unwrap();
        s.remove("cj_abc", 1);
        assert!(!again.exists());
        assert!(outside.join("keep").exists(), "removal followed a link");
        s.remove_all_but(|job, attempt| (job, attempt) == ("cj_def", 1));
        let left: Vec<_> = std::fs::read_dir(tmp.path().join(DIR)).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["cj_def-1"]);
        assert!(s.create("../x", 1, MI).is_err());
        assert_eq!(parse_folder_name("cj_def-12"), Some(("cj_def", 12)));
        assert_eq!(parse_folder_name("cj_def"), None);
    }

    /// A bounded scratch is a filesystem of its bound: a write past it
    /// fails with ENOSPC, the image takes no more than the bound, and
    /// removal unmounts it and takes the image too. Needs root (mount).
    #[test]
    fn a_bounded_scratch_refuses_writes_past_its_bound() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: mounting a scratch needs root");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let s = Scratch::bounded(tmp.path().join(DIR));
        let p = s.create("cj_fs", 1, 16 * MI).unwrap();
        let m = std::fs::symlink_metadata(&p).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (JOB_UID, JOB_GID, 0o700));
        assert_eq!(std::fs::read_dir(&p).unwrap().count(), 0, "an empty /tmp, no lost+found");
        let mut f = std::fs::File::create(p.join("big")).unwrap();
        let chunk = vec![1u8; 1024 * 1024];
        let refused = (0..64).find_map(|_| std::io::Write::write_all(&mut f, &chunk).err());
        let refused = refused.or_else(|| f.sync_all().err());
        assert_eq!(refused.map(|e| e.raw_os_error()), Some(Some(libc::ENOSPC)));
        drop(f);
        let image = tmp.path().join(DIR).join("cj_fs-1.img");
        assert!(blocks(&image) <= 16 * MI, "the image took {} bytes", blocks(&image));
        s.remove_all_but(|_, _| false);
        assert_eq!(std::fs::read_dir(tmp.path().join(DIR)).unwrap().count(), 0, "folder and image removed");
    }
}
