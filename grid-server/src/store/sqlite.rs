//! The SQLite backend: one database file in the data dir, WAL mode, shared
//! by `serve` and the admin subcommands running as other processes. One
//! writer connection (SQLite allows one writer at a time anyway) and a small
//! pool of readers; every call runs on the caller's (blocking) thread.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, ErrorCode, OpenFlags};

use super::checkpoints::{self, Checkpointer, Thresholds};
use super::migrations;
use super::sql::{Conn, Dialect, Query, ReadConn, Row, Sql, Value};
use super::{StoreError, StoreResult};

pub const DB_FILE: &str = "grid.db";

/// Reader connections kept open (WAL lets them read while the writer
/// commits), and the reader threads `Store::read` runs reads on. Each
/// connection keeps its parsed schema and prepared statements, so a read
/// costs only its queries; opening one per read parsed the whole schema
/// each time.
pub const READERS: usize = 4;

pub struct Sqlite {
    path: PathBuf,
    writer: Mutex<Connection>,
    /// Copies the WAL into the database file beside the writer.
    pub(super) checkpoints: Checkpointer,
    readers: Mutex<Vec<Connection>>,
    busy_timeout: Duration,
}

impl Sqlite {
    /// Opens (creating if needed) the database in `data_dir`, applying the schema.
    pub fn open(data_dir: &Path, busy_timeout: Duration) -> StoreResult<Sqlite> {
        Sqlite::open_with(data_dir, busy_timeout, Thresholds::DEFAULT)
    }

    /// `open`, with checkpoints at other sizes of the WAL (tests).
    pub(super) fn open_with(data_dir: &Path, busy_timeout: Duration, at: Thresholds) -> StoreResult<Sqlite> {
        let path = data_dir.join(DB_FILE);
        owner_only(data_dir, &path).map_err(|e| {
            StoreError::Invalid(format!("cannot make data dir {} private to its owner: {e}", data_dir.display()))
        })?;
        let mut writer = connect(&path, busy_timeout)?;
        migrate(&mut writer)?;
        checkpoints::hook(&writer);
        let writer = Mutex::new(writer);
        let checkpoints = Checkpointer::start(&path, busy_timeout, at)?;
        Ok(Sqlite { path, writer, checkpoints, readers: Mutex::new(vec![]), busy_timeout })
    }

    /// Runs `f` in one write transaction; commits only when it returns `Ok`.
    pub fn write<R, E: From<StoreError>>(&self, f: impl FnOnce(&Conn) -> Result<R, E>) -> Result<R, E> {
        let mut conn = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        // IMMEDIATE takes the write lock up front, so a busy database fails
        // here (after the busy timeout) instead of half-way through.
        let tx =
            conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(|e| E::from(e.into()))?;
        // Dropping an uncommitted transaction rolls it back.
        let r = f(&*tx)?;
        tx.commit().map_err(|e| E::from(e.into()))?;
        let frames = checkpoints::frames_of_last_commit();
        if frames > 0 {
            self.checkpoints.committed(&conn, frames);
        }
        Ok(r)
    }

    /// Runs `f` in one read transaction on a reader connection, which
    /// refuses writes (`reader`).
    pub fn read<R>(&self, f: impl FnOnce(&ReadConn) -> StoreResult<R>) -> StoreResult<R> {
        let pooled = self.readers.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let conn = match pooled {
            Some(c) => c,
            None => reader(&self.path, self.busy_timeout)?,
        };
        let r = read_snapshot(&conn, f);
        // One left inside a transaction (its end failed) is not reused.
        if !conn.is_autocommit() {
            return r;
        }
        let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        // Callers reading on threads of their own (`read_blocking`) may
        // hold some beyond the reader threads': keep a few spare for them.
        if readers.len() < 2 * READERS {
            readers.push(conn);
        }
        r
    }
}

/// Runs `f` in one read transaction: its queries see one snapshot, and the
/// WAL's read lock (a lock and an unlock of the `-shm` file each) is taken
/// once for all of them rather than once per query.
fn read_snapshot<R>(conn: &Connection, f: impl FnOnce(&ReadConn) -> StoreResult<R>) -> StoreResult<R> {
    conn.prepare_cached("BEGIN")?.execute([])?;
    let r = f(conn);
    // Ending a read transaction writes nothing: what `f` read stands even
    // if this fails (the caller then drops the connection).
    if let Err(e) = conn.prepare_cached("ROLLBACK").and_then(|mut end| end.execute([])) {
        tracing::warn!(error = %e, "ending a read transaction failed");
    }
    r
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Busy,
            _ => StoreError::Database(e.to_string()),
        }
    }
}

impl Sql for Connection {
    fn execute_values(&self, sql: &str, params: Vec<Value>) -> StoreResult<usize> {
        // Cached like queries: parsing a statement cost more than running it
        // on the capture hot path (a claim, an attempt's end, a settlement).
        Ok(self.prepare_cached(sql)?.execute(rusqlite::params_from_iter(params.iter()))?)
    }
}

impl Query for Connection {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn query_values(&self, sql: &str, params: Vec<Value>) -> StoreResult<Vec<Row>> {
        let mut stmt = self.prepare_cached(sql)?;
        let columns = stmt.column_count();
        let mut rows = stmt.query(rusqlite::params_from_iter(params.iter()))?;
        let mut out = vec![];
        while let Some(r) = rows.next()? {
            let values = (0..columns).map(|i| r.get_ref(i).map(value)).collect::<Result<Vec<_>, _>>()?;
            out.push(Row::new(values));
        }
        Ok(out)
    }
}

fn value(v: ValueRef) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Real(f) => Value::Real(f),
        ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
    }
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Int(i) => ValueRef::Integer(*i),
            Value::Real(f) => ValueRef::Real(*f),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
            Value::Array(_) => {
                return Err(rusqlite::Error::ToSqlConversionFailure("SQLite has no array parameters".into()));
            }
        }))
    }
}

/// Mode of the data dir: it holds the database (key hashes, the signing
/// secret) and tenants' files.
pub const DATA_DIR_MODE: u32 = 0o700;
/// Mode of the database and its WAL, shared-memory and journal files.
pub const DB_FILE_MODE: u32 = 0o600;

/// Creates the data dir when absent and sets its mode with chmod (the umask
/// does not matter; an existing one is closed again on every start): it
/// holds the SQLite database, tenants' files and the TLS key, and on
/// PostgreSQL a node's scratch and TLS key. Blocking.
pub fn private_dir(data_dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(DATA_DIR_MODE).create(data_dir)?;
    std::fs::set_permissions(data_dir, std::fs::Permissions::from_mode(DATA_DIR_MODE))
}

/// Creates the data dir (and the database file, empty) when absent and sets
/// their modes with chmod, so the umask does not matter and an existing data
/// dir is brought back to them on every open. SQLite creates `-wal` and
/// `-shm` with the database file's mode; ones left by an earlier run are
/// set here too. Blocking.
fn owner_only(data_dir: &Path, db: &Path) -> std::io::Result<()> {
    use std::fs::Permissions;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    private_dir(data_dir)?;
    std::fs::OpenOptions::new().create(true).append(true).mode(DB_FILE_MODE).open(db)?;
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let file = PathBuf::from(format!("{}{suffix}", db.display()));
        match std::fs::metadata(&file) {
            Ok(m) if m.permissions().mode() & 0o777 != DB_FILE_MODE => {
                std::fs::set_permissions(&file, Permissions::from_mode(DB_FILE_MODE))?
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Prepared statements kept per connection (rusqlite's default is 16, fewer
/// than the store's distinct statements).
const STATEMENT_CACHE: usize = 256;

pub(super) fn connect(path: &Path, busy_timeout: Duration) -> StoreResult<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(busy_timeout)?;
    // Every statement of the store modules fits, so none is parsed twice.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // WAL lets readers go on while one writer commits; NORMAL sync is durable
    // across process crashes (the WAL is fsynced at checkpoints).
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // A statement that may fail halfway inside a larger transaction (a
    // multi-row insert with a unique index) keeps a journal of its own to
    // undo just itself; in a file that is a temp file opened, written and
    // closed per transaction, for bytes nobody reads after a commit.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    Ok(conn)
}

/// A reader connection: `query_only`, so SQLite refuses any write through
/// it (SQLITE_READONLY), whatever SQL a read runs.
fn reader(path: &Path, busy_timeout: Duration) -> StoreResult<Connection> {
    let conn = connect(path, busy_timeout)?;
    conn.pragma_update(None, "query_only", "ON")?;
    Ok(conn)
}

/// Brings the schema up to date (`migrations.rs`): the count in
/// `user_version` read and every pending step run in one transaction,
/// which takes the write lock first, so two processes opening the
/// database at once (`serve` and an admin subcommand) migrate it once.
fn migrate(conn: &mut Connection) -> StoreResult<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let count: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let applied = migrations::applied(Dialect::Sqlite, count)?;
    if applied < migrations::LATEST {
        tx.execute_batch(&migrations::pending(Dialect::Sqlite, applied))?;
    }
    // Written even with nothing pending: a count of the old list becomes this list's.
    if count != migrations::LATEST as i64 {
        tx.pragma_update(None, "user_version", migrations::LATEST as i64)?;
    }
    tx.commit()?;
    if applied < migrations::LATEST {
        migrations::log_ran(Dialect::Sqlite, applied);
    }
    Ok(())
}
