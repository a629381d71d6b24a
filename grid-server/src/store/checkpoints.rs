//! WAL checkpoints of the SQLite store, off the writer's path.
//!
//! SQLite's own checkpoint runs inside the commit that crosses its threshold
//! (every 1,000 WAL pages): that writer waits while the pages are copied
//! into the database file and both files are fsynced, several milliseconds
//! under the capture queue's load. The capture queue's claims go through
//! the same writer, so every checkpoint left the workers without items
//! (measured in docs/performance.md, "What makes a fetch item fast").
//!
//! Here a thread of its own copies pages with a connection of its own
//! (`PASSIVE`: beside the writer, never blocking it) each time the writer
//! has added `Thresholds::pass` pages to the WAL. SQLite starts the WAL over
//! only when a checkpoint caught up with the last commit, which never
//! happens beside a writer that commits every millisecond. So once a pass
//! finds the WAL at `Thresholds::restart` pages, the writer's next commit
//! catches up itself: only the pages committed during that pass are left
//! to copy, and the commit after it starts the WAL over. Should the thread
//! fall behind anyway, the writer copies the pages itself past
//! `Thresholds::limit`, as SQLite's own checkpoint would have: the WAL
//! stays bounded.

use std::cell::Cell;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

use super::StoreResult;

/// When checkpoints run, in WAL pages.
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    /// Pages written between two passes.
    pub pass: u32,
    /// The WAL's size at which, once a pass found it, the writer's next
    /// commit copies what that pass left, so the WAL starts over.
    pub restart: u32,
    /// The WAL's size past which the writer checkpoints itself.
    pub limit: u32,
}

impl Thresholds {
    /// A pass per 1,000 pages (SQLite's own interval); the WAL starts over
    /// past 16 MiB and never grows much past 64 MiB (4 KiB pages).
    pub const DEFAULT: Thresholds = Thresholds { pass: 1_000, restart: 4_000, limit: 16_000 };
}

thread_local! {
    /// The WAL's size in pages after this thread's last commit, set by
    /// `note_frames` (SQLite calls it in the committing thread) and taken
    /// by the writer right after it commits.
    static FRAMES: Cell<u32> = const { Cell::new(0) };
}

/// The writer connection's WAL hook. It replaces SQLite's automatic
/// checkpoint, which is itself such a hook.
fn note_frames(_: &rusqlite::hooks::Wal, frames: std::os::raw::c_int) -> rusqlite::Result<()> {
    FRAMES.with(|f| f.set(u32::try_from(frames).unwrap_or(0)));
    Ok(())
}

/// Installs the hook on the writer connection: from now on it no longer
/// checkpoints on its own.
pub fn hook(writer: &Connection) {
    writer.wal_hook(Some(note_frames));
}

/// The WAL's size in pages after the commit this thread just made; 0 when
/// it wrote nothing.
pub fn frames_of_last_commit() -> u32 {
    FRAMES.with(|f| f.replace(0))
}

pub struct Checkpointer {
    at: Thresholds,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// Told each time a pass begins and ends (`Checkpointer::begun`,
    /// `Checkpointer::settle`).
    passed: Condvar,
}

#[derive(Default)]
struct State {
    /// A pass is wanted and not yet begun.
    wanted: bool,
    /// A pass is running.
    running: bool,
    /// The WAL's size, in pages, that the last pass copied up to.
    copied: u32,
    /// The last pass found the WAL large: the writer catches up.
    catch_up: bool,
    stop: bool,
}

impl Checkpointer {
    /// Starts the thread with a connection of its own to the database at
    /// `path`.
    pub fn start(path: &Path, busy_timeout: Duration, at: Thresholds) -> StoreResult<Checkpointer> {
        let conn = super::sqlite::connect(path, busy_timeout)?;
        let shared = Arc::new(Shared::default());
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("grid-checkpoint".into())
            .spawn(move || run(&conn, &theirs, at.restart))
            .map_err(|e| super::StoreError::Task(format!("starting the checkpoint thread: {e}")))?;
        Ok(Checkpointer { at, shared, thread: Some(thread) })
    }

    /// Told by the writer, holding the writer connection, after each commit
    /// that wrote to the WAL: `frames` is the WAL's size in pages since it
    /// last started over.
    pub fn committed(&self, writer: &Connection, frames: u32) {
        let catch_up = {
            let mut state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            if frames < state.copied {
                // The WAL started over since that pass.
                state.copied = 0;
            }
            if frames >= self.at.limit || (state.catch_up && !state.running) {
                state.catch_up = false;
                true
            } else {
                if !state.running && !state.wanted && frames >= state.copied + self.at.pass {
                    state.wanted = true;
                    self.shared.wake.notify_one();
                }
                false
            }
        };
        // What is left to copy: the pages committed since the thread's last
        // pass, or, past the limit, whatever the thread did not get to (it
        // is busy while a pass runs; then the next commit tries again). No
        // commit comes in between, so the next one starts the WAL over.
        if catch_up {
            if let Err(e) = passive(writer) {
                tracing::warn!(error = %e, frames, "the writer's WAL checkpoint failed");
            }
        }
    }
}

/// For tests: the order of a test's commits and the thread's passes made
/// certain, whatever the machine's scheduling.
#[cfg(test)]
impl Checkpointer {
    /// Waits until a pass wanted has begun; answers whether one runs: a
    /// commit after this is one that pass does not copy.
    pub fn begun(&self) -> bool {
        self.wait_while(|state| state.wanted).running
    }

    /// Waits until no pass is wanted or running.
    pub fn settle(&self) {
        drop(self.wait_while(|state| state.wanted || state.running));
    }

    fn wait_while(&self, busy: impl Fn(&State) -> bool) -> std::sync::MutexGuard<'_, State> {
        let mut state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        while busy(&state) {
            state = self.shared.passed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        state
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner()).stop = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(conn: &Connection, shared: &Shared, restart: u32) {
    loop {
        {
            let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            while !state.wanted && !state.stop {
                state = shared.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            if state.stop {
                return;
            }
            state.wanted = false;
            state.running = true;
            shared.passed.notify_all();
        }
        let copied = passive(conn);
        let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        state.running = false;
        shared.passed.notify_all();
        match copied {
            Ok((wal, copied)) => {
                state.copied = copied;
                state.catch_up = wal >= restart;
            }
            Err(e) => tracing::warn!(error = %e, "WAL checkpoint failed; the next commit asks again"),
        }
    }
}

/// `PRAGMA wal_checkpoint(PASSIVE)`: copies every page no reader still
/// needs from the WAL, without waiting for anyone; answers the WAL's size
/// and how much of it is copied, in pages.
fn passive(conn: &Connection) -> rusqlite::Result<(u32, u32)> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        let pages = |i| r.get::<_, i64>(i).map(|n| u32::try_from(n).unwrap_or(0));
        Ok((pages(1)?, pages(2)?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sql::Row;
    use crate::store::sqlite::{Sqlite, DB_FILE};

    /// The WAL file's length in pages: the most it ever held (SQLite reuses
    /// the file from its start rather than shrinking it).
    fn wal_pages(dir: &tempfile::TempDir) -> u64 {
        std::fs::metadata(dir.path().join(format!("{DB_FILE}-wal"))).unwrap().len() / (4096 + 24)
    }

    /// Steady commits, as the capture queue's: the WAL starts over again
    /// and again instead of growing with everything written. Without the
    /// writer catching up after a pass it would hold every page written,
    /// over 12,000 (the limit is out of reach here).
    ///
    /// The order is made certain (`begun`, `settle`): a pass begins before
    /// the next commit, which it so does not copy (it never catches up on
    /// its own), and ends before the commit after that, so the WAL's size
    /// depends on the thresholds, not on how late a loaded machine runs the
    /// thread (without these waits it reached 6,034 pages once, under a
    /// whole test suite on two cores).
    #[test]
    fn the_wal_starts_over_under_steady_commits() {
        let dir = tempfile::tempdir().unwrap();
        let at = Thresholds { pass: 20, restart: 80, limit: u32::MAX };
        let db = Sqlite::open_with(dir.path(), Duration::from_secs(5), at).unwrap();
        db.write(|c| c.execute("CREATE TABLE t (b BLOB)", ())).unwrap();
        // A few new pages per commit (the blob overflows into three),
        // 4,000 commits back to back.
        let mut in_flight = false;
        for _ in 0..4_000 {
            db.write(|c| c.execute("INSERT INTO t VALUES (zeroblob(3 * 4000))", ())).unwrap();
            if in_flight {
                db.checkpoints.settle();
            }
            in_flight = db.checkpoints.begun();
        }
        let pages = wal_pages(&dir);
        assert!(pages < 1_000, "the WAL grew to {pages} pages");
        let rows = db.read(|c| c.query_row("SELECT count(*) FROM t", (), |r: &Row| r.get::<i64>(0))).unwrap();
        assert_eq!(rows, 4_000);
    }

    /// No commit checkpoints by itself below the limit: with no pass
    /// wanted, 1,500 one-page commits stay in the WAL, where SQLite's own
    /// checkpoint would have copied them at 1,000 and started over.
    #[test]
    fn commits_leave_the_copying_to_the_thread() {
        let dir = tempfile::tempdir().unwrap();
        let never = Thresholds { pass: u32::MAX / 2, restart: u32::MAX, limit: u32::MAX };
        let db = Sqlite::open_with(dir.path(), Duration::from_secs(5), never).unwrap();
        db.write(|c| c.execute("CREATE TABLE t (b BLOB)", ())).unwrap();
        for _ in 0..1_500 {
            db.write(|c| c.execute("INSERT INTO t VALUES (zeroblob(4000))", ())).unwrap();
        }
        let pages = wal_pages(&dir);
        assert!(pages >= 1_500, "the WAL holds {pages} pages");
    }

    /// With the thread never asked, the writer still bounds the WAL: past
    /// the limit it copies the pages itself.
    #[test]
    fn past_the_limit_the_writer_checkpoints_itself() {
        let dir = tempfile::tempdir().unwrap();
        let at = Thresholds { pass: u32::MAX / 2, restart: u32::MAX, limit: 100 };
        let db = Sqlite::open_with(dir.path(), Duration::from_secs(5), at).unwrap();
        db.write(|c| c.execute("CREATE TABLE t (b BLOB)", ())).unwrap();
        // The WAL file keeps the size of its largest pass: the schema's
        // migration at open may have made it larger than the limit already.
        let migrated = wal_pages(&dir);
        for _ in 0..1_000 {
            db.write(|c| c.execute("INSERT INTO t VALUES (zeroblob(4000))", ())).unwrap();
        }
        let pages = wal_pages(&dir);
        assert!(pages <= migrated.max(110), "the WAL grew to {pages} pages (the migration left {migrated})");
    }
}
