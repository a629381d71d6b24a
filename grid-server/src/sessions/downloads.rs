//! Session downloads on the host: one folder per session under
//! `DATA_DIR/session-downloads`, read without trusting what is in it.
//!
//! ```text
//! session-downloads/            root 0700
//!   ses_…/                      root 0700, never in a browser's world
//!     refused.json              what the grid cancelled or removed, and why
//!     recording.part            a recording's frames so far (`recorder.rs`)
//!     recording.html            its replay page, written whole at the end,
//!     recording.json            and what it holds
//!     files/                    the browser's uid, 0700: bound at /home/grid/downloads
//! ```
//!
//! **Security:** `files/` is written by a stranger's browser (a page that
//! downloads, a lessee with the whole DevTools protocol, in the worst case
//! a browser process taken over). Whatever it plants there, the grid only
//! ever opens a file of it relative to the held directory fd with `openat2`
//! (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
//! RESOLVE_NO_XDEV`, plus `O_NOFOLLOW`), then checks the open file itself
//! (`fstat`): a regular file, one link, owned by the uid the folder was
//! handed to. A symlink, a hard link to a file elsewhere, a FIFO or a
//! device is neither listed nor served. Names are listed only when they are
//! plain text (UTF-8, no control or direction-changing characters, no
//! leading dot). Nothing reads the folder through `/proc/PID/root`.
//!
//! Files stay for the grid's grace after the session ends; the sweep
//! (`Sweep`, on the due-time loop) removes a folder once its session's
//! stored end plus the grace has passed, whichever process is alive then.

use std::collections::HashSet;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use grid_core::time::Millis;
use grid_core::wire::session::RefusedDownload;
use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::store::{sessions as store, Store};

/// The folder of all session downloads, under the data dir.
pub const DIR: &str = "session-downloads";
/// The browser's part of a session's folder.
const FILES: &str = "files";
/// The grid's record of refused downloads, beside `files`.
const REFUSED: &str = "refused.json";
/// Folders of warm browsers not yet leased start with this.
const WARM_PREFIX: &str = "warm-";
/// Chromium's name for a download still arriving.
const PARTIAL_SUFFIX: &str = ".crdownload";
/// Entries kept in `refused.json`; older ones are dropped.
const MAX_REFUSED: usize = 100;
/// The grid's record of the names pages suggested for their downloads
/// (`Browser.downloadWillBegin`), by download guid, beside `files`.
const SUGGESTED: &str = "suggested.json";
/// Entries kept in `suggested.json`; older ones are dropped.
const MAX_SUGGESTED: usize = 1000;
/// A recording's frame list while the session runs, beside `files`.
const RECORDING_PART: &str = "recording.part";
/// What the replay page holds, beside it.
const RECORDING_FACTS: &str = "recording.json";
/// How often the sweep looks for folders past their grace.
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
pub struct DownloadConfig {
    /// What one session's files may take together.
    pub limit_bytes: u64,
    /// How long a session's files stay after it ends.
    pub grace: Duration,
}

/// Every session's download folder.
pub struct Downloads {
    root: PathBuf,
    pub config: DownloadConfig,
    /// Folders of this process's warm browsers: the sweep leaves them.
    warm: Mutex<HashSet<String>>,
}

/// A file as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub size: u64,
    /// Its last write: when the download completed.
    pub modified: Millis,
}

/// One session's folder, held open: renaming it (a warm browser's folder
/// becoming a session's) does not change what these fds reach.
pub struct Folder {
    /// The grid's own directory (`ses_…`).
    dir: OwnedFd,
    /// The browser's (`files`).
    files: OwnedFd,
    /// Serializes writes of the grid's records (`refused.json`,
    /// `suggested.json`).
    refused_lock: Mutex<()>,
}

/// How files of the folder are opened: nothing but the name itself, never
/// through a link.
fn resolve() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_XDEV
}

/// `name` under `dir`, never through a symlink; `openat` with `O_NOFOLLOW`
/// where the kernel has no `openat2` (a single name, so the same guarantee).
fn open_beneath(dir: impl AsFd, name: &str, flags: OFlags) -> rustix::io::Result<OwnedFd> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(Errno::INVAL);
    }
    match rfs::openat2(&dir, name, flags, Mode::empty(), resolve()) {
        Err(Errno::NOSYS) => rfs::openat(&dir, name, flags, Mode::empty()),
        other => other,
    }
}

fn open_dir(dir: impl AsFd, name: &str) -> rustix::io::Result<OwnedFd> {
    open_beneath(dir, name, OFlags::RDONLY | OFlags::DIRECTORY)
}

/// A session id or warm folder name: letters, digits, `_` and `-`.
fn is_folder_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether a file name is shown: plain text a terminal, a JSON reader and a
/// `Content-Disposition` can all take (the last after escaping), not a
/// hidden file and not a download still arriving.
pub fn listable(name: &str) -> bool {
    let direction =
        |c: char| matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}');
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && !name.ends_with(PARTIAL_SUFFIX)
        && !name.contains('/')
        && !name.chars().any(|c| c.is_control() || direction(c))
}

/// What a session's replay page holds (`recording.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordingFacts {
    pub frames: u64,
    pub duration_ms: u64,
    pub truncated: bool,
}

/// A session's replay page, open.
pub struct Recording {
    pub file: File,
    pub size: u64,
    /// When it was written: the session's end.
    pub modified: Millis,
    pub facts: RecordingFacts,
}

/// Bytes of a folder's files, see [`Folder::usage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Every regular file, downloads still arriving included.
    pub all: u64,
    /// Without the files of downloads in flight.
    pub settled: u64,
}

/// How much earlier than a download's start its file's last write may
/// read: file times come from the kernel's coarse clock.
const FILE_TIME_SLACK_MS: i64 = 1_000;

/// The bytes of `files` that belong to no download in flight: not a
/// partial file, nor a file under the final name of a download in
/// `arriving` written since it began (Chromium renames a finished download
/// before its `completed` event arrives). An older file of the same name
/// stays counted: Chromium gives the new download another name.
fn settled_bytes(files: &[(String, u64, Millis)], arriving: &[(&str, Millis)]) -> u64 {
    files
        .iter()
        .filter(|(name, _, modified)| {
            !name.ends_with(PARTIAL_SUFFIX)
                && !arriving.iter().any(|(n, began)| n == name && modified.0 + FILE_TIME_SLACK_MS >= began.0)
        })
        .map(|(_, size, _)| size)
        .sum()
}

fn millis(secs: i64, nanos: u64) -> Millis {
    Millis(secs.saturating_mul(1000).saturating_add((nanos / 1_000_000) as i64))
}

impl Downloads {
    pub fn new(data_dir: &std::path::Path, config: DownloadConfig) -> Downloads {
        Downloads { root: data_dir.join(DIR), config, warm: Mutex::new(HashSet::new()) }
    }

    fn root(&self) -> std::io::Result<OwnedFd> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.root)?;
        Ok(File::open(&self.root)?.into())
    }

    /// A fresh, empty folder `name` (its `files` still root's: the sandbox
    /// hands it to the browser's uid).
    pub fn create(&self, name: &str) -> std::io::Result<Folder> {
        if !is_folder_name(name) {
            return Err(std::io::Error::other(format!("not a folder name: {name:?}")));
        }
        let root = self.root()?;
        rfs::mkdirat(&root, name, Mode::from_raw_mode(0o700))?;
        let dir = open_dir(&root, name)?;
        rfs::mkdirat(&dir, FILES, Mode::from_raw_mode(0o700))?;
        let files = open_dir(&dir, FILES)?;
        Ok(Folder { dir, files, refused_lock: Mutex::new(()) })
    }

    /// A folder for a warm browser: the sweep leaves it while this process
    /// holds it. Returns its name and the folder.
    pub fn create_warm(&self) -> std::io::Result<(String, Folder)> {
        let name = format!("{WARM_PREFIX}{}", crate::ids::random_hex(8));
        // Known before it exists, so a sweep never finds it unknown.
        self.warm.lock().unwrap_or_else(|p| p.into_inner()).insert(name.clone());
        match self.create(&name) {
            Ok(folder) => Ok((name, folder)),
            Err(e) => {
                self.forget_warm(&name);
                Err(e)
            }
        }
    }

    fn forget_warm(&self, name: &str) {
        self.warm.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
    }

    /// A warm browser's folder becomes session `id`'s.
    pub fn adopt(&self, warm: &str, id: &str) -> std::io::Result<()> {
        if !is_folder_name(id) {
            return Err(std::io::Error::other(format!("not a session id: {id:?}")));
        }
        let root = self.root()?;
        let renamed = rfs::renameat(&root, warm, &root, id);
        self.forget_warm(warm);
        Ok(renamed?)
    }

    /// A warm browser's folder, its browser stopped unleased.
    pub fn discard_warm(&self, name: &str) {
        self.forget_warm(name);
        self.remove(name);
    }

    /// Session `id`'s folder, if it has one.
    pub fn open(&self, id: &str) -> std::io::Result<Option<Folder>> {
        if !is_folder_name(id) {
            return Ok(None);
        }
        let root = match File::open(&self.root) {
            Ok(f) => OwnedFd::from(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let dir = match open_dir(&root, id) {
            Ok(d) => d,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let files = open_dir(&dir, FILES)?;
        Ok(Some(Folder { dir, files, refused_lock: Mutex::new(()) }))
    }

    /// Removes folder `name` and everything in it (`remove_dir_all` neither
    /// follows nor races links planted inside).
    pub fn remove(&self, name: &str) {
        if !is_folder_name(name) {
            return;
        }
        match std::fs::remove_dir_all(self.root.join(name)) {
            Ok(()) => tracing::debug!(folder = name, "session downloads removed"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(folder = name, error = %e, "session downloads not removed; the next sweep tries again")
            }
        }
    }

    /// The folder names present.
    fn names(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.root) else { return vec![] };
        entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect()
    }
}

impl Folder {
    /// The browser's part, to bind into its sandbox.
    pub fn files(&self) -> &OwnedFd {
        &self.files
    }

    /// The uid the folder was handed to; 0 while it was not.
    fn owner(&self) -> std::io::Result<u32> {
        Ok(rfs::fstat(&self.files)?.st_uid)
    }

    /// `name` opened for reading if it is a file the grid serves: a
    /// regular file with one link, owned by the folder's uid.
    fn open_checked(&self, name: &str, owner: u32) -> std::io::Result<Option<(File, rfs::Stat)>> {
        if owner == 0 || !listable(name) {
            return Ok(None);
        }
        // NONBLOCK: opening a FIFO planted here must not hang.
        let fd = match open_beneath(&self.files, name, OFlags::RDONLY | OFlags::NONBLOCK) {
            Ok(fd) => fd,
            // A symlink (LOOP, or XDEV/ELOOP through openat2), gone, or not openable.
            Err(Errno::LOOP | Errno::NOENT | Errno::XDEV | Errno::NXIO | Errno::ACCESS | Errno::PERM) => {
                return Ok(None)
            }
            Err(e) => return Err(e.into()),
        };
        let st = rfs::fstat(&fd)?;
        let regular = FileType::from_raw_mode(st.st_mode) == FileType::RegularFile;
        if !regular || st.st_nlink != 1 || st.st_uid != owner {
            return Ok(None);
        }
        Ok(Some((File::from(fd), st)))
    }

    /// The files a listing shows, oldest first.
    pub fn list(&self) -> std::io::Result<Vec<Entry>> {
        let owner = self.owner()?;
        let mut out = vec![];
        for entry in rfs::Dir::read_from(&self.files)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().to_str() else { continue };
            if let Some((_, st)) = self.open_checked(name, owner)? {
                out.push(Entry {
                    name: name.to_string(),
                    size: st.st_size.max(0) as u64,
                    modified: millis(st.st_mtime, st.st_mtime_nsec),
                });
            }
        }
        out.sort_by(|a, b| (a.modified, &a.name).cmp(&(b.modified, &b.name)));
        Ok(out)
    }

    /// File `name`, open, with its size and last write, if it is served.
    pub fn open_file(&self, name: &str) -> std::io::Result<Option<(File, u64, Millis)>> {
        let owner = self.owner()?;
        Ok(self
            .open_checked(name, owner)?
            .map(|(f, st)| (f, st.st_size.max(0) as u64, millis(st.st_mtime, st.st_mtime_nsec))))
    }

    /// Every regular file of the folder (listed or not, arriving or not)
    /// with its size and last write, as `lstat` sees it.
    fn regular_files(&self) -> std::io::Result<Vec<(String, u64, Millis)>> {
        let mut out = vec![];
        for entry in rfs::Dir::read_from(&self.files)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().to_str() else { continue };
            if name == "." || name == ".." {
                continue;
            }
            let Ok(st) = rfs::statat(&self.files, name, AtFlags::SYMLINK_NOFOLLOW) else { continue };
            if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile {
                out.push((name.to_string(), st.st_size.max(0) as u64, millis(st.st_mtime, st.st_mtime_nsec)));
            }
        }
        Ok(out)
    }

    /// What the folder's files take: all of them, and those of no download
    /// in `arriving` (name and start of each download in flight).
    pub fn usage(&self, arriving: &[(&str, Millis)]) -> std::io::Result<Usage> {
        let files = self.regular_files()?;
        Ok(Usage { all: files.iter().map(|(_, s, _)| s).sum(), settled: settled_bytes(&files, arriving) })
    }

    /// Removes the newest files until the folder's files take at most
    /// `limit` bytes; answers what was removed.
    pub fn enforce(&self, limit: u64, now: Millis) -> std::io::Result<Vec<RefusedDownload>> {
        let mut files = self.regular_files()?;
        let mut total: u64 = files.iter().map(|(_, s, _)| s).sum();
        if total <= limit {
            return Ok(vec![]);
        }
        files.sort_by(|a, b| (b.2, &b.0).cmp(&(a.2, &a.0)));
        let mut removed = vec![];
        for (name, size, _) in files {
            if total <= limit {
                break;
            }
            match rfs::unlinkat(&self.files, name.as_str(), AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => return Err(e.into()),
            }
            let reason =
                format!("removed: the session's files took {total} bytes, more than its limit of {limit} bytes");
            total = total.saturating_sub(size);
            let shown = if listable(&name) { name } else { "(a file with an unlisted name)".to_string() };
            let refused = RefusedDownload { name: shown, reason, at: now };
            self.add_refused(refused.clone())?;
            removed.push(refused);
        }
        Ok(removed)
    }

    /// What the grid refused, oldest first.
    pub fn refused(&self) -> Vec<RefusedDownload> {
        let Ok(fd) = open_beneath(&self.dir, REFUSED, OFlags::RDONLY) else { return vec![] };
        serde_json::from_reader(std::io::BufReader::new(File::from(fd))).unwrap_or_default()
    }

    /// Records a refusal (written whole, then renamed into place).
    pub fn add_refused(&self, refused: RefusedDownload) -> std::io::Result<()> {
        let _held = self.refused_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut all = self.refused();
        all.push(refused);
        if all.len() > MAX_REFUSED {
            all.drain(..all.len() - MAX_REFUSED);
        }
        self.write_record(REFUSED, &all)
    }

    /// The names pages suggested for their downloads, oldest first:
    /// (download guid, suggested file name).
    pub fn suggested(&self) -> Vec<(String, String)> {
        let Ok(fd) = open_beneath(&self.dir, SUGGESTED, OFlags::RDONLY) else { return vec![] };
        serde_json::from_reader(std::io::BufReader::new(File::from(fd))).unwrap_or_default()
    }

    /// Records the name a page suggested for download `guid`.
    pub fn add_suggested(&self, guid: &str, name: &str) -> std::io::Result<()> {
        let _held = self.refused_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut all = self.suggested();
        all.retain(|(g, _)| g != guid);
        all.push((guid.to_string(), name.to_string()));
        if all.len() > MAX_SUGGESTED {
            all.drain(..all.len() - MAX_SUGGESTED);
        }
        self.write_record(SUGGESTED, &all)
    }

    /// The name the page suggested for the file listed as `file`: a file
    /// saved under its download's guid (Playwright asks the browser for
    /// that) has its download's suggested name; one saved under a name
    /// that was suggested has that name; else none is known.
    pub fn suggested_name(suggested: &[(String, String)], file: &str) -> Option<String> {
        suggested
            .iter()
            .find(|(guid, _)| guid == file)
            .or_else(|| suggested.iter().find(|(_, name)| name == file))
            .map(|(_, name)| name.clone())
            .filter(|name| !name.is_empty())
    }

    /// A fresh, empty frame list for the session's recording, in the grid's
    /// own part of the folder (never the browser's).
    pub fn recording_part(&self) -> std::io::Result<File> {
        self.create(RECORDING_PART)
    }

    /// A file of the grid's own in the folder, created empty (or emptied),
    /// private, never through a link.
    fn create(&self, name: &str) -> std::io::Result<File> {
        let fd = rfs::openat(
            &self.dir,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        Ok(File::from(fd))
    }

    /// The replay page written whole (`head`, the frame list so far,
    /// `tail`), synced and renamed into place with its facts beside it; the
    /// frame list goes.
    pub fn finish_recording(&self, head: &str, tail: &str, facts: RecordingFacts) -> std::io::Result<()> {
        use std::io::Write;
        let tmp = format!("{}.tmp", grid_core::recording::NAME);
        let mut page = std::io::BufWriter::new(self.create(&tmp)?);
        page.write_all(head.as_bytes())?;
        match rfs::openat(&self.dir, RECORDING_PART, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
        {
            Ok(part) => {
                std::io::copy(&mut File::from(part), &mut page)?;
            }
            Err(Errno::NOENT) => {}
            Err(e) => return Err(e.into()),
        }
        page.write_all(tail.as_bytes())?;
        page.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        self.write_record(RECORDING_FACTS, &facts)?;
        rfs::renameat(&self.dir, tmp.as_str(), &self.dir, grid_core::recording::NAME)?;
        match rfs::unlinkat(&self.dir, RECORDING_PART, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The session's replay page, once written.
    pub fn recording(&self) -> std::io::Result<Option<Recording>> {
        let fd = match open_beneath(&self.dir, grid_core::recording::NAME, OFlags::RDONLY) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let st = rfs::fstat(&fd)?;
        let Ok(facts_fd) = open_beneath(&self.dir, RECORDING_FACTS, OFlags::RDONLY) else { return Ok(None) };
        let facts: RecordingFacts =
            serde_json::from_reader(std::io::BufReader::new(File::from(facts_fd))).map_err(std::io::Error::other)?;
        Ok(Some(Recording {
            file: File::from(fd),
            size: st.st_size.max(0) as u64,
            modified: millis(st.st_mtime, st.st_mtime_nsec),
            facts,
        }))
    }

    /// Writes one of the grid's records whole, then renames it into place.
    fn write_record<T: serde::Serialize>(&self, name: &str, value: &T) -> std::io::Result<()> {
        let tmp = format!("{name}.tmp");
        let mut file = self.create(&tmp)?;
        serde_json::to_writer(&mut file, value).map_err(std::io::Error::other)?;
        rfs::renameat(&self.dir, tmp.as_str(), &self.dir, name)?;
        Ok(())
    }
}

/// Removes download folders whose time is over: a session's once its stored
/// end plus the grace has passed, a folder of no session at all, a warm
/// browser's this process does not hold (left by an earlier run). Driven by
/// the due-time loop, at most every [`SWEEP_EVERY`].
pub struct Sweep {
    pub downloads: Arc<Downloads>,
    pub store: Store,
    next: Mutex<Millis>,
}

impl Sweep {
    pub fn new(downloads: Arc<Downloads>, store: Store) -> Sweep {
        Sweep { downloads, store, next: Mutex::new(Millis(0)) }
    }

    /// One pass over every folder.
    pub async fn sweep(&self, now: Millis) {
        let grace = self.downloads.config.grace.as_millis() as i64;
        for name in self.downloads.names() {
            if name.starts_with(WARM_PREFIX) {
                let held = self.downloads.warm.lock().unwrap_or_else(|p| p.into_inner()).contains(&name);
                if !held {
                    self.downloads.remove(&name);
                }
                continue;
            }
            let id = name.clone();
            let row = match self.store.read(move |c| store::load(c, &id)).await {
                Ok(row) => row,
                Err(e) => {
                    tracing::debug!(error = %e, "download sweep: store busy; next pass");
                    return;
                }
            };
            let over = match row {
                None => true,
                Some(r) => r.session.ended.is_some_and(|e| e.at.0.saturating_add(grace) <= now.0),
            };
            if over {
                self.downloads.remove(&name);
            }
        }
    }
}

impl crate::due::DueTimes for Sweep {
    fn fire_due(&self, now: Millis) -> BoxFuture<'_, Option<Millis>> {
        Box::pin(async move {
            let due = *self.next.lock().unwrap_or_else(|p| p.into_inner());
            if now < due {
                return Some(due);
            }
            self.sweep(now).await;
            let next = now.plus_ms(SWEEP_EVERY.as_millis() as i64);
            *self.next.lock().unwrap_or_else(|p| p.into_inner()) = next;
            Some(next)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    const UID: u32 = 4_242_424;

    /// A folder as a browser of uid [`UID`] would have it (tests run as root).
    fn folder(dir: &std::path::Path) -> (Downloads, Folder) {
        let d = Downloads::new(dir, DownloadConfig { limit_bytes: 100, grace: Duration::from_secs(1) });
        let f = d.create("ses_1").unwrap();
        rfs::fchown(f.files(), Some(rfs::Uid::from_raw(UID)), None).unwrap();
        (d, f)
    }

    fn write(dir: &std::path::Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let p = dir.join(DIR).join("ses_1").join(FILES).join(name);
        std::fs::write(&p, bytes).unwrap();
        std::os::unix::fs::chown(&p, Some(UID), None).unwrap();
        p
    }

    #[test]
    fn files_of_downloads_in_flight_are_not_settled() {
        let f = |name: &str, size: u64, at: i64| (name.to_string(), size, Millis(at));
        let files = [
            f("old.bin", 100, 1_000),
            f("first.bin.crdownload", 600, 50_000),
            f("done.bin", 30, 50_000),
            f("again.bin", 7, 1_000),
        ];
        assert_eq!(settled_bytes(&files, &[]), 137);
        // done.bin finished (renamed) but its completed event is not in yet;
        // again.bin is older than the download of that name, which Chromium
        // writes under another name.
        assert_eq!(settled_bytes(&files, &[("done.bin", Millis(40_000)), ("again.bin", Millis(40_000))]), 107);
        // A file time a little behind the download's start is still its own.
        assert_eq!(settled_bytes(&files, &[("done.bin", Millis(50_500))]), 107);
    }

    #[test]
    fn only_the_browsers_own_plain_files_are_listed_and_opened() {
        let tmp = tempfile::tempdir().unwrap();
        let (_d, f) = folder(tmp.path());
        write(tmp.path(), "report.csv", b"a,b\n");
        write(tmp.path(), "big.bin.crdownload", b"partial");
        write(tmp.path(), ".hidden", b"x");
        write(tmp.path(), "evil\u{202e}fdp.exe", b"x");
        let files = tmp.path().join(DIR).join("ses_1").join(FILES);
        // A host file reached through a symlink, a hard link, a file of another owner, a FIFO, a folder.
        let secret = tmp.path().join("grid.db");
        std::fs::write(&secret, b"secret").unwrap();
        symlink(&secret, files.join("link.db")).unwrap();
        symlink("/etc/passwd", files.join("passwd")).unwrap();
        let linked = write(tmp.path(), "twice.txt", b"twice");
        std::fs::hard_link(&linked, tmp.path().join("elsewhere")).unwrap();
        std::fs::write(files.join("roots.txt"), b"root's").unwrap();
        rustix::fs::mkfifoat(rustix::fs::CWD, files.join("fifo"), Mode::from_raw_mode(0o666)).unwrap();
        std::os::unix::fs::chown(files.join("fifo"), Some(UID), None).unwrap();
        std::fs::create_dir(files.join("sub")).unwrap();
        let listed: Vec<String> = f.list().unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(listed, ["report.csv"]);
        for name in ["link.db", "passwd", "twice.txt", "roots.txt", "fifo", "sub", "../grid.db", "/etc/passwd", ".."] {
            assert!(f.open_file(name).unwrap().is_none(), "{name} must not be served");
        }
        let (_, size, _) = f.open_file("report.csv").unwrap().unwrap();
        assert_eq!(size, 4);
        // A listed file swapped for a symlink after listing is not served.
        std::fs::remove_file(files.join("report.csv")).unwrap();
        symlink(&secret, files.join("report.csv")).unwrap();
        assert!(f.open_file("report.csv").unwrap().is_none());
    }

    #[test]
    fn suggested_names_are_found_by_guid_or_by_the_name_saved() {
        let dir = tempfile::tempdir().unwrap();
        let (_, folder) = folder(dir.path());
        assert!(folder.suggested().is_empty());
        folder.add_suggested("0b5c-guid", "report.csv").unwrap();
        folder.add_suggested("1d7e-guid", "photo.png").unwrap();
        folder.add_suggested("0b5c-guid", "report.csv").unwrap();
        let s = folder.suggested();
        assert_eq!(
            s,
            vec![("1d7e-guid".to_string(), "photo.png".to_string()), ("0b5c-guid".into(), "report.csv".into())]
        );
        assert_eq!(Folder::suggested_name(&s, "0b5c-guid").as_deref(), Some("report.csv"));
        assert_eq!(Folder::suggested_name(&s, "photo.png").as_deref(), Some("photo.png"));
        assert_eq!(Folder::suggested_name(&s, "other.txt"), None);
    }

    #[test]
    fn a_folder_never_handed_to_a_browser_lists_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let d = Downloads::new(tmp.path(), DownloadConfig { limit_bytes: 100, grace: Duration::from_secs(1) });
        let f = d.create("ses_2").unwrap();
        std::fs::write(tmp.path().join(DIR).join("ses_2").join(FILES).join("x.txt"), b"root wrote this").unwrap();
        assert!(f.list().unwrap().is_empty());
        let mode = std::fs::metadata(tmp.path().join(DIR)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn the_newest_files_go_first_when_the_folder_is_over_its_limit() {
        let tmp = tempfile::tempdir().unwrap();
        let (_d, f) = folder(tmp.path());
        for (name, age) in [("old.bin", 30), ("mid.bin", 20), ("new.bin", 10)] {
            let p = write(tmp.path(), name, &[0u8; 40]);
            let t = std::time::SystemTime::now() - Duration::from_secs(age);
            File::options().write(true).open(&p).unwrap().set_modified(t).unwrap();
        }
        assert_eq!(f.usage(&[]).unwrap().all, 120);
        let removed = f.enforce(100, Millis(5)).unwrap();
        assert_eq!(removed.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["new.bin"]);
        let listed: Vec<String> = f.list().unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(listed, ["old.bin", "mid.bin"]);
        assert_eq!(f.refused(), removed, "the refusal is recorded for the listing");
        assert!(f.enforce(100, Millis(6)).unwrap().is_empty());
    }

    #[test]
    fn a_recording_is_written_whole_beside_the_files_and_read_back() {
        let tmp = tempfile::tempdir().unwrap();
        let (_d, f) = folder(tmp.path());
        assert!(f.recording().unwrap().is_none());
        {
            use std::io::Write;
            let mut part = f.recording_part().unwrap();
            part.write_all(b"[1,\"u\",\"AA==\"],\n").unwrap();
        }
        // Not served before it is whole.
        assert!(f.recording().unwrap().is_none());
        let facts = RecordingFacts { frames: 1, duration_ms: 0, truncated: true };
        f.finish_recording("<head>", "<tail>", facts).unwrap();
        let mut r = f.recording().unwrap().unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut r.file, &mut text).unwrap();
        assert_eq!(text, "<head>[1,\"u\",\"AA==\"],\n<tail>");
        assert_eq!((r.size, r.facts), (text.len() as u64, facts));
        let grid_dir = tmp.path().join(DIR).join("ses_1");
        assert!(!grid_dir.join(RECORDING_PART).exists());
        assert!(grid_dir.join(grid_core::recording::NAME).exists());
        // Not in the browser's part of the folder, nor listed with its files.
        assert!(f.list().unwrap().is_empty());
    }

    #[test]
    fn a_warm_folder_becomes_a_sessions_and_names_are_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let d = Downloads::new(tmp.path(), DownloadConfig { limit_bytes: 100, grace: Duration::from_secs(1) });
        let (name, _f) = d.create_warm().unwrap();
        assert!(d.warm.lock().unwrap().contains(&name));
        d.adopt(&name, "ses_3").unwrap();
        assert!(d.open("ses_3").unwrap().is_some());
        assert!(d.warm.lock().unwrap().is_empty());
        assert!(d.open("../data").unwrap().is_none());
        assert!(d.create("a/b").is_err());
        assert!(listable("Rapport Q1 (2).pdf") && listable("données.csv"));
        for bad in ["", ".x", "a\nb", "a\u{1b}[31m", "x.crdownload", "a/b", "\u{2066}x"] {
            assert!(!listable(bad), "{bad:?}");
        }
    }
}
