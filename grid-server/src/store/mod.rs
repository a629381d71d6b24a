//! The store: every durable record (accounts and the ledger, the capture
//! queue, jobs, sessions, published files) behind one seam. Store modules
//! (`accounts`, `items`, `jobs`, `sessions`, `idempotency`, `metrics`) write
//! their SQL once against `sql::Conn`; `sqlite` (the embedded default: one
//! file in the data dir) and `postgres` (several nodes on one database) run
//! it. Nothing outside this module knows which one does.
//!
//! All access goes through `Store::read` / `Store::write`, which run the
//! closure off the async runtime (a read on the store's reader threads, a
//! write on a blocking thread, in one transaction).

pub mod accounts;
mod checkpoints;
pub mod contexts;
#[cfg(test)]
pub mod faults;
pub mod idempotency;
pub mod items;
pub mod jobs;
pub mod metrics;
pub mod migrations;
pub mod nodes;
pub mod postgres;
mod readers;
pub mod retry;
pub mod sessions;
pub mod sql;
pub mod sqlite;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use grid_core::error::ApiError;

pub use sql::{Conn, Optional, ReadConn};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database stayed locked past the busy timeout, or did not answer.
    #[error("database busy")]
    Busy,
    #[error("database: {0}")]
    Database(String),
    /// A query that must answer one row answered none.
    #[error("no row")]
    NoRow,
    #[error("not found: {0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("store task failed: {0}")]
    Task(String),
    /// The transaction met a concurrent one that locks the same rows in
    /// another order (PostgreSQL failed it to end a deadlock): it wrote
    /// nothing and may run again.
    #[error("the transaction conflicted with a concurrent one")]
    Conflict,
}

/// What a write transaction is ordered against. SQLite has one writer, so
/// the two are the same there; on PostgreSQL (several nodes, several
/// writers per node) they are the two modes of the write lock
/// (`postgres.rs`, docs/scale-out.md "Locking").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// After every write in flight and before every write that follows, as
    /// on SQLite: for transactions that read, check and write without
    /// locking what they read. Most writes, none of them per item.
    Grid,
    /// Only against the transactions that touch the same rows, which this
    /// one locks before it checks them (a claim skips the items others
    /// hold, an end locks its items, a reservation its account): any number
    /// run at once. The capture queue's hot path.
    Rows,
}

/// What a caller of the API sees of a store failure: a busy database is the
/// contract's 503 `accounting_unavailable` (the account database did not
/// answer in time: nothing was done, resend); anything else is logged and
/// answered 500.
///
/// Each area's error converts beside its type and defers to this for the
/// store part (`accounts::ReserveError`, `items::ItemError`,
/// `sessions::SessionError`), with one difference the contract makes: on
/// analytical-job endpoints a busy store is `503 COMPUTE_UNAVAILABLE` with
/// `retry-after` ("the job store did not answer"), decided in
/// `From<jobs::JobError>`; their reads convert through `JobError` too.
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Busy | StoreError::Conflict => ApiError::AccountingUnavailable,
            other => {
                tracing::error!(error = %other, "store error");
                ApiError::Internal
            }
        }
    }
}

/// JSON text of a value stored in a column. Serializing our own types
/// cannot fail in practice (no maps with non-string keys); if it ever does,
/// the write fails rather than the process.
pub fn to_json<T: serde::Serialize>(value: &T) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Invalid(format!("not serializable as JSON: {e}")))
}

pub type StoreResult<T> = Result<T, StoreError>;

#[derive(Clone)]
pub struct Store {
    backend: Arc<Backend>,
    /// The threads reads run on, one per connection reads may hold at
    /// once: hundreds of concurrent requests queue here instead of each
    /// taking a thread and opening a connection of its own.
    readers: Arc<readers::Readers>,
    /// One simulated node's faults (`faults.rs`, `crate::sim`).
    #[cfg(test)]
    faults: Option<Arc<faults::Faults>>,
}

enum Backend {
    // Boxed: its connections and the checkpoint thread's handle make it
    // several times the size of the PostgreSQL pool's handle.
    Sqlite(Box<sqlite::Sqlite>),
    Postgres(postgres::Postgres),
}

impl Store {
    /// Opens (creating if needed) the SQLite store in `data_dir`, applying the schema.
    pub fn open(data_dir: &Path, busy_timeout: Duration) -> StoreResult<Store> {
        Ok(Store::new(Backend::Sqlite(Box::new(sqlite::Sqlite::open(data_dir, busy_timeout)?)), sqlite::READERS))
    }

    /// Connects to the PostgreSQL store at `url`, creating or migrating its
    /// schema (several nodes may start at once).
    pub fn connect(url: &str, busy_timeout: Duration) -> StoreResult<Store> {
        Ok(Store::new(Backend::Postgres(postgres::Postgres::open(url, busy_timeout)?), postgres::READERS))
    }

    fn new(backend: Backend, readers: usize) -> Store {
        Store {
            backend: Arc::new(backend),
            readers: Arc::new(readers::Readers::new(readers)),
            #[cfg(test)]
            faults: None,
        }
    }

    /// This store as one simulated node sees it: its writes meet `faults`,
    /// and once the node died its calls wait forever (`faults.rs`).
    #[cfg(test)]
    pub fn with_faults(&self, faults: Arc<faults::Faults>) -> Store {
        Store { faults: Some(faults), ..self.clone() }
    }

    /// Waits forever once this handle's simulated node died; at once
    /// otherwise (and always outside the simulation).
    #[cfg(test)]
    pub async fn alive(&self) {
        if let Some(faults) = &self.faults {
            faults.alive().await;
        }
    }

    /// Whether every published file (capture files, job logs) is kept in
    /// the database: on PostgreSQL, so any node serves any download and a
    /// dead node loses none. SQLite keeps small ones inline and the rest
    /// under the data dir.
    pub fn files_inline(&self) -> bool {
        match &*self.backend {
            Backend::Sqlite(_) => false,
            Backend::Postgres(_) => true,
        }
    }

    /// Runs `f` in one write transaction on a blocking thread. The
    /// transaction commits only when `f` returns `Ok`; any `Err` (a store
    /// error or a domain refusal half-way through) rolls back everything
    /// `f` wrote, so a failed write leaves nothing behind.
    pub async fn write<R, E, F>(&self, f: F) -> Result<R, E>
    where
        R: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnOnce(&Conn) -> Result<R, E> + Send + 'static,
    {
        self.write_off_runtime(Order::Grid, f).await
    }

    /// `write` ordered by its rows (`Order::Rows`): only for a transaction
    /// that locks every row it checks, or checks none (a heartbeat).
    pub async fn write_rows<R, E, F>(&self, f: F) -> Result<R, E>
    where
        R: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnOnce(&Conn) -> Result<R, E> + Send + 'static,
    {
        self.write_off_runtime(Order::Rows, f).await
    }

    /// `write_ordered` on a blocking thread.
    async fn write_off_runtime<R, E, F>(&self, order: Order, f: F) -> Result<R, E>
    where
        R: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnOnce(&Conn) -> Result<R, E> + Send + 'static,
    {
        #[cfg(test)]
        if crate::blocking::inline() {
            self.alive().await;
            let r = self.write_ordered(order, f);
            // A crash after the commit: the caller never learns it.
            self.alive().await;
            return r;
        }
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.write_ordered(order, f))
            .await
            .map_err(|e| E::from(StoreError::Task(e.to_string())))?
    }

    /// The same as `write`, for callers already off the async runtime.
    pub fn write_blocking<R, E: From<StoreError>>(&self, f: impl FnOnce(&Conn) -> Result<R, E>) -> Result<R, E> {
        self.write_ordered(Order::Grid, f)
    }

    /// `write_blocking` ordered as `order` says: `Order::Rows` only for a
    /// transaction that locks every row it checks (the capture queue's
    /// group commits, `capture/commits.rs`).
    pub fn write_ordered<R, E: From<StoreError>>(
        &self,
        order: Order,
        f: impl FnOnce(&Conn) -> Result<R, E>,
    ) -> Result<R, E> {
        #[cfg(test)]
        if let Some(faults) = &self.faults {
            return faults.write(|seamed| self.write_backend(order, |tx| seamed(tx)), f);
        }
        self.write_backend(order, f)
    }

    fn write_backend<R, E: From<StoreError>>(
        &self,
        order: Order,
        f: impl FnOnce(&Conn) -> Result<R, E>,
    ) -> Result<R, E> {
        match &*self.backend {
            Backend::Sqlite(db) => db.write(f),
            Backend::Postgres(db) => db.write(order, f),
        }
    }

    /// A writer for one thread's transactions (a commit thread's,
    /// `capture/commits.rs`): on PostgreSQL through a connection of its own
    /// that the thread drives itself (`postgres::OwnConnection`), on SQLite
    /// the store's one writer.
    pub fn writer(&self) -> StoreResult<Writer> {
        let own = match &*self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(db) => Some(db.own_connection()?),
        };
        Ok(Writer { store: self.clone(), own })
    }

    /// A writer through the store's own transactions (its faults too), for
    /// the simulation's group commits, which run on its one thread.
    #[cfg(test)]
    pub fn shared_writer(&self) -> Writer {
        Writer { store: self.clone(), own: None }
    }

    /// How many transactions the capture queue's group commits run at once
    /// (`capture/commits.rs`): one on SQLite, which has one writer; several
    /// on PostgreSQL, where their row locks let them (`Order::Rows`).
    pub fn concurrent_writers(&self) -> usize {
        match &*self.backend {
            Backend::Sqlite(_) => 1,
            Backend::Postgres(_) => postgres::CONCURRENT_WRITERS,
        }
    }

    /// Listens for what other nodes sharing this store `notify` on
    /// `channel` (PostgreSQL's LISTEN): `on` gets each notification's
    /// payload, and `None` whenever the listening connection (re)opened and
    /// may have missed some. Answers whether it listens: SQLite has no
    /// other nodes to hear. Stops when `stop` resolves.
    pub fn listen(
        &self,
        channel: &'static str,
        on: impl Fn(Option<&str>) + Send + Sync + 'static,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> bool {
        match &*self.backend {
            Backend::Sqlite(_) => false,
            Backend::Postgres(db) => {
                db.listen(channel, on, stop);
                true
            }
        }
    }

    /// Tells every node listening on `channel` (`listen`), this one too,
    /// with `payload`: PostgreSQL's NOTIFY, outside any transaction, so
    /// the caller sends it after what it announces has committed. Nothing on
    /// SQLite.
    pub async fn notify(&self, channel: &'static str, payload: String) -> StoreResult<()> {
        if let Backend::Sqlite(_) = &*self.backend {
            return Ok(());
        }
        let backend = self.backend.clone();
        // Not a read (`read` refuses writes), but as short: on a reader thread.
        let send = move || match &*backend {
            Backend::Postgres(db) => db.notify(channel, &payload),
            Backend::Sqlite(_) => Ok(()),
        };
        #[cfg(test)]
        if crate::blocking::inline() {
            return send();
        }
        self.readers.run(send).await
    }

    /// Runs `f` on a reader connection, on one of the store's reader
    /// threads (`readers.rs`).
    pub async fn read<R, F>(&self, f: F) -> StoreResult<R>
    where
        R: Send + 'static,
        F: FnOnce(&ReadConn) -> StoreResult<R> + Send + 'static,
    {
        #[cfg(test)]
        if crate::blocking::inline() {
            self.alive().await;
            return read_on(&self.backend, f);
        }
        let backend = self.backend.clone();
        self.readers.run(move || read_on(&backend, f)).await
    }

    /// Runs `f`, a read of a few rows found through a key (a record by its
    /// id, a key's caller, a setting), in one read transaction. On SQLite it
    /// runs on the calling thread: a WAL read of a few cached pages costs a
    /// few microseconds, less than handing it to a reader thread and back
    /// (two thread wake-ups, the largest cost of an API read, docs/limits.md),
    /// and blocks the async worker no longer than rendering its answer does.
    /// On PostgreSQL every read is a network round trip, so it goes to the
    /// reader threads like any other. Reads of many rows (lists, files,
    /// counts) use `read`.
    pub async fn lookup<R, F>(&self, f: F) -> StoreResult<R>
    where
        R: Send + 'static,
        F: FnOnce(&ReadConn) -> StoreResult<R> + Send + 'static,
    {
        #[cfg(test)]
        self.alive().await;
        match &*self.backend {
            Backend::Sqlite(db) => db.read(f),
            Backend::Postgres(_) => self.read(f).await,
        }
    }

    pub fn read_blocking<R>(&self, f: impl FnOnce(&ReadConn) -> StoreResult<R>) -> StoreResult<R> {
        read_on(&self.backend, f)
    }
}

/// One thread's writer (`Store::writer`).
pub struct Writer {
    store: Store,
    own: Option<postgres::OwnConnection>,
}

impl Writer {
    /// `Store::write_ordered` through this writer.
    pub fn write_ordered<R, E: From<StoreError>>(
        &mut self,
        order: Order,
        f: impl FnOnce(&Conn) -> Result<R, E>,
    ) -> Result<R, E> {
        match &mut self.own {
            Some(own) => own.write(order, f),
            None => self.store.write_ordered(order, f),
        }
    }
}

fn read_on<R>(backend: &Backend, f: impl FnOnce(&ReadConn) -> StoreResult<R>) -> StoreResult<R> {
    match backend {
        Backend::Sqlite(db) => db.read(f),
        Backend::Postgres(db) => db.read(f),
    }
}

pub fn setting(conn: &ReadConn, key: &str) -> StoreResult<Option<String>> {
    conn.query_row("SELECT value FROM settings WHERE key = ?1", [key], |r| r.get(0)).optional()
}

pub fn set_setting(conn: &Conn, key: &str, value: &str) -> StoreResult<()> {
    conn.execute(
        "INSERT INTO settings (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )?;
    Ok(())
}

/// A setting, created with `init` on first use (e.g. the signing secret).
pub fn setting_or_init(tx: &Conn, key: &str, init: impl FnOnce() -> String) -> StoreResult<String> {
    if let Some(v) = tx.query_row("SELECT value FROM settings WHERE key = ?1", [key], |r| r.get(0)).optional()? {
        return Ok(v);
    }
    let v = init();
    tx.execute("INSERT INTO settings (key, value) VALUES (?1, ?2)", (key, &v))?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::sqlite::{DATA_DIR_MODE, DB_FILE_MODE};
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    /// The defect of `Ok(Err(..))` writes: a closure that wrote its first
    /// step and then failed had that step committed.
    #[test]
    fn a_write_whose_second_step_fails_leaves_nothing() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::open(root.path(), Duration::from_secs(1)).unwrap();
        let failed: Result<(), StoreError> = store.write_blocking(|tx| {
            set_setting(tx, "first", "written")?;
            Err(StoreError::Invalid("second step refused".into()))
        });
        assert!(failed.is_err());
        assert_eq!(store.read_blocking(|c| setting(c, "first")).unwrap(), None);
        store.write_blocking(|tx| set_setting(tx, "first", "written")).unwrap();
        assert_eq!(store.read_blocking(|c| setting(c, "first")).unwrap().as_deref(), Some("written"));
    }

    /// A lookup on SQLite is read on the caller's thread (no hand-off), in
    /// a snapshot that sees every write committed before it started; a
    /// read still goes to a reader thread.
    #[tokio::test]
    async fn sqlite_lookups_run_on_the_calling_thread_and_see_committed_writes() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::open(root.path(), Duration::from_secs(1)).unwrap();
        store.write_blocking(|tx| set_setting(tx, "k", "v1")).unwrap();
        let caller = std::thread::current().id();
        let (seen, thread) = store.lookup(|c| Ok((setting(c, "k")?, std::thread::current().id()))).await.unwrap();
        assert_eq!((seen.as_deref(), thread), (Some("v1"), caller));
        store.write_blocking(|tx| set_setting(tx, "k", "v2")).unwrap();
        assert_eq!(store.lookup(|c| setting(c, "k")).await.unwrap().as_deref(), Some("v2"));
        let elsewhere = store.read(|_| Ok(std::thread::current().id())).await.unwrap();
        assert_ne!(elsewhere, caller, "a read runs on a reader thread");
    }

    /// Areas used to map store errors each on their own (a busy store was
    /// accounting_unavailable in captures, COMPUTE_UNAVAILABLE in jobs,
    /// unknown-session in one sessions path); the conversions beside the
    /// error types give each area the contract's answer.
    #[test]
    fn each_area_answers_store_failures_as_the_contract_says() {
        use grid_core::{item, job, session};

        use super::accounts::ReserveError;
        use super::items::ItemError;
        use super::jobs::JobError;
        use super::sessions::SessionError;

        let busy = || StoreError::Busy;
        let gone = || StoreError::NotFound("x".into());
        let broken = || StoreError::Invalid("x".into());
        // Captures, sessions, accounts: the only 503 they list.
        assert_eq!(ApiError::from(busy()), ApiError::AccountingUnavailable);
        assert_eq!(ApiError::from(ReserveError::Store(busy())), ApiError::AccountingUnavailable);
        assert_eq!(ApiError::from(ItemError::Store(busy())), ApiError::AccountingUnavailable);
        assert_eq!(ApiError::from(SessionError::Store(busy())), ApiError::AccountingUnavailable);
        // Analytical jobs: "the job store did not answer", with retry-after.
        let job_busy = ApiError::from(JobError::Store(busy()));
        assert_eq!((job_busy.status(), job_busy.retry_after_secs()), (503, Some(5)));
        assert_eq!(job_busy.body()["error"], "COMPUTE_UNAVAILABLE");
        // A row that is gone is the area's unknown-thing; other failures are 500.
        assert_eq!(ApiError::from(ItemError::Store(gone())), ApiError::UnknownItemOrJob);
        assert_eq!(ApiError::from(JobError::Store(gone())), ApiError::UnknownItemOrJob);
        assert_eq!(ApiError::from(SessionError::Store(gone())), ApiError::UnknownSession);
        assert_eq!(ApiError::from(gone()), ApiError::Internal);
        for e in [
            ApiError::from(broken()),
            ApiError::from(ReserveError::Store(broken())),
            ApiError::from(ItemError::Store(broken())),
            ApiError::from(JobError::Store(broken())),
            ApiError::from(SessionError::Store(broken())),
        ] {
            assert_eq!(e, ApiError::Internal);
        }
        // Refusals stand as they are.
        let refusal = || ApiError::InsufficientCredit { required_micros: 2, available_micros: 1 };
        assert_eq!(ApiError::from(ReserveError::Refused(refusal())), refusal());
        assert_eq!(ApiError::from(ItemError::Transition(item::TransitionError::Refused(refusal()))), refusal());
        assert_eq!(ApiError::from(JobError::Transition(job::TransitionError::Refused(refusal()))), refusal());
        assert_eq!(ApiError::from(SessionError::Transition(session::TransitionError::Refused(refusal()))), refusal());
        // A transition the machine no longer allows: per area, as the contract words it.
        let not_allowed = (
            ItemError::Transition(item::TransitionError::NotAllowed { state: "s", event: "e" }),
            JobError::Transition(job::TransitionError::NotAllowed { phase: "p", event: "e" }),
            SessionError::Transition(session::TransitionError::NotAllowed { status: "s", event: "e" }),
        );
        assert_eq!(ApiError::from(not_allowed.0), ApiError::Internal);
        assert_eq!(ApiError::from(not_allowed.1), ApiError::JobStateConflict);
        assert_eq!(ApiError::from(not_allowed.2), ApiError::UnknownSession);
        assert_eq!(ApiError::from(JobError::Transition(job::TransitionError::Inconsistent("x"))), ApiError::Internal);
    }

    /// What reads may not do: a write run as a query (`ReadConn` has no
    /// `execute`, but any SQL text goes through `query_values`), refused by
    /// the reader connection itself; the setting is not there after.
    fn a_write_through_a_reader_fails_at_the_database(store: &Store, refusal: &str) {
        for sql in [
            "INSERT INTO settings (key, value) VALUES ('planted', 'x') RETURNING key",
            "UPDATE settings SET value = 'x' RETURNING key",
            "DELETE FROM settings RETURNING key",
        ] {
            let refused = store.read_blocking(|c| c.query_values(sql, vec![])).unwrap_err().to_string();
            assert!(refused.contains(refusal), "{sql}: {refused}");
        }
        // Row locks are writes too (PostgreSQL's read-only transactions refuse them).
        if store.read_blocking(|c| Ok(c.dialect())).unwrap() == sql::Dialect::Postgres {
            let lock = "SELECT key FROM settings FOR UPDATE";
            let refused = store.read_blocking(|c| c.query_values(lock, vec![])).unwrap_err().to_string();
            assert!(refused.contains(refusal), "{refused}");
        }
        assert_eq!(store.read_blocking(|c| setting(c, "planted")).unwrap(), None);
        // The connections still serve reads, and writes go on through `write`.
        store.write_blocking(|tx| set_setting(tx, "k", "v")).unwrap();
        assert_eq!(store.read_blocking(|c| setting(c, "k")).unwrap().as_deref(), Some("v"));
    }

    #[test]
    fn a_write_through_a_sqlite_reader_fails_at_the_database() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::open(root.path(), Duration::from_secs(1)).unwrap();
        store.write_blocking(|tx| set_setting(tx, "k", "v0")).unwrap();
        a_write_through_a_reader_fails_at_the_database(&store, "attempt to write a readonly database");
    }

    #[test]
    fn a_write_through_a_postgres_reader_fails_at_the_database() {
        let db = postgres::TestDatabase::create();
        let store = Store::connect(&db.url, Duration::from_secs(5)).unwrap();
        store.write_blocking(|tx| set_setting(tx, "k", "v0")).unwrap();
        a_write_through_a_reader_fails_at_the_database(&store, "read-only transaction (25006)");
    }

    /// NOTIFY is no table write: it goes out on the pool's read-only
    /// connections, and a listener hears it.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_notification_goes_out_on_postgres_read_only_pool() {
        let db = postgres::TestDatabase::create();
        let store = Store::connect(&db.url, Duration::from_secs(5)).unwrap();
        let (heard_tx, mut heard) = tokio::sync::mpsc::unbounded_channel();
        let (_stop_tx, stop) = tokio::sync::oneshot::channel::<()>();
        assert!(store.listen("grid_test", move |p| drop(heard_tx.send(p.map(str::to_string))), async move {
            let _ = stop.await;
        }));
        // The first call says the listener (re)opened.
        assert_eq!(tokio::time::timeout(Duration::from_secs(10), heard.recv()).await.unwrap(), Some(None));
        store.notify("grid_test", "hello".into()).await.unwrap();
        let payload = tokio::time::timeout(Duration::from_secs(10), heard.recv()).await.unwrap();
        assert_eq!(payload, Some(Some("hello".to_string())));
    }

    #[test]
    fn a_new_data_dir_and_its_database_are_private_to_the_owner() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("new").join("data");
        let store = Store::open(&dir, Duration::from_secs(1)).unwrap();
        store.write_blocking(|tx| set_setting(tx, "k", "v")).unwrap();
        assert_eq!(mode(&dir), DATA_DIR_MODE);
        for name in ["grid.db", "grid.db-wal", "grid.db-shm"] {
            assert_eq!(mode(&dir.join(name)), DB_FILE_MODE, "{name}");
        }
    }

    #[test]
    fn an_existing_data_dir_with_open_modes_is_closed_on_open() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("data");
        drop(Store::open(&dir, Duration::from_secs(1)).unwrap());
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        for name in ["grid.db", "grid.db-wal", "grid.db-shm"] {
            let path = dir.join(name);
            std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        }
        let _store = Store::open(&dir, Duration::from_secs(1)).unwrap();
        assert_eq!(mode(&dir), DATA_DIR_MODE);
        for name in ["grid.db", "grid.db-wal", "grid.db-shm"] {
            assert_eq!(mode(&dir.join(name)), DB_FILE_MODE, "{name}");
        }
    }
}

/// A row's id drawn before its insert (a session's, a batch's) and its
/// upstream proxy's credentials sealed under it by the vault
/// (`vault::Purpose::ProxyCredentials`, which binds sealed bytes to their row).
#[derive(Clone)]
pub struct SealedProxy {
    pub id: String,
    pub bytes: Vec<u8>,
}
