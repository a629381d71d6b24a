//! The PostgreSQL backend: several grid nodes on one database
//! (`serve --database-url`, docs/scale-out.md).
//!
//! tokio-postgres with deadpool-postgres's pool and per-connection statement
//! cache. The store's closures are synchronous (one SQL text for both
//! backends, run on a blocking thread as SQLite's are), so each statement is
//! driven with `block_on` on a small runtime of the store's own: the
//! connections' I/O never waits on the server's runtime, and the admin
//! subcommands, which have none, use the same code. The capture queue's
//! commit threads, which run most statements, each drive a connection of
//! their own on their own thread instead (`OwnConnection`).
//!
//! Writes are ordered by one transaction-scoped advisory lock, in one of two
//! modes (`Order`, docs/scale-out.md "Locking"). Most write transactions
//! were written for SQLite's one writer and take it exclusively: what they
//! read and check cannot change under them, whichever node runs them. The
//! capture queue's hot path (claims, attempts' ends, submissions) locks the
//! rows it checks instead and takes it shared, so those transactions run at
//! once on every node and wait only for an exclusive one in flight. Reads
//! take no lock.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::error::Error;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};
use tokio_postgres::NoTls;

use super::migrations;
use super::sql::{numbered_placeholders, Conn, Dialect, Query, ReadConn, Row, Sql, Statement, Value};
use super::{Order, StoreError, StoreResult};

/// The advisory lock every write transaction takes, exclusively or shared
/// (`Order`; an arbitrary constant: "grid" in ASCII, 0x6772_6964), as the
/// literal `BEGIN_GRID` and `BEGIN_ROWS` are made of.
macro_rules! write_lock {
    () => {
        1735551332
    };
}
/// The session-level advisory lock held while the schema is migrated, so
/// nodes starting at once apply each step once.
const MIGRATE_LOCK: i64 = 0x6772_6964_6d69;

/// Connections of the pool (16): one per reader thread, and four for the
/// other writes (heartbeats, sessions, jobs, settlement), which then never
/// wait for a connection behind a burst of reads. Store calls run on
/// blocking threads, so more would only queue inside PostgreSQL. Each commit
/// thread has one more of its own (`OwnConnection`), and the listener of
/// other nodes' wake-ups one (`listen`): 19 per node, and five nodes times
/// this stay under PostgreSQL's default 100 connections.
const POOL_SIZE: usize = READERS + 4;
/// Group-commit transactions of the capture queue in flight at once on a
/// node (`capture/commits.rs`, `Order::Rows`), each through a connection of
/// its own: a claim and the ends before and after it do not wait on each
/// other's round trips. Two beat four in bench/scale_out.sh (three nodes:
/// 11,177 items/s against 10,051, and fewer items per group transaction
/// with four, so more statements per item). One made bigger groups and
/// cost less CPU per item on loopback (three nodes 13,333 / 15,152 / 15,267
/// items per CPU-second against 12,987 / 13,158 / 13,793), but a database
/// a round trip of about 2 ms away (a proxy delaying each direction by
/// 1 ms) ran one node at 5,441 / 5,410 items/s with one against 7,435 /
/// 7,097 with two: the claims then waited behind the ends' transactions.
pub const CONCURRENT_WRITERS: usize = 2;
/// Reader threads of `Store::read` (reads in flight at once): most of the
/// pool, leaving connections for writers.
pub const READERS: usize = 12;

pub struct Postgres {
    runtime: &'static tokio::runtime::Runtime,
    pool: Pool,
    /// How to connect: the listener's connection.
    config: Arc<tokio_postgres::Config>,
    /// How the commit threads' own connections connect.
    own: Arc<tokio_postgres::Config>,
}

impl Postgres {
    /// Connects to `url` (a `postgres://` URL or key=value string) and
    /// brings the schema up to date.
    pub fn open(url: &str, busy_timeout: Duration) -> StoreResult<Postgres> {
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|e| StoreError::Invalid(format!("--database-url is not a PostgreSQL URL: {e}")))?;
        // Migrations' "already exists, skipping" notices are not news.
        // A statement waiting on a lock past the busy timeout fails (55P03:
        // a busy store, as SQLite's busy timeout), and so does one running
        // past a generous multiple of it: the database did not answer.
        let ms = busy_timeout.as_millis().max(1);
        let options = format!(
            "-c client_min_messages=warning -c jit=off -c lock_timeout={ms} -c statement_timeout={}",
            ms.saturating_mul(20).max(30_000)
        );
        config.options(&options);
        config.application_name("grid-server");
        // A commit thread's own connection (`OwnConnection`) is opened
        // with this too, as the pool's are within its create timeout.
        config.connect_timeout(busy_timeout.max(Duration::from_secs(5)));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("grid-postgres")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Invalid(format!("cannot start the PostgreSQL runtime: {e}")))?;
        // The store lives as long as the process; a runtime dropped from
        // inside another one's context panics, so it is never dropped.
        let runtime: &'static tokio::runtime::Runtime = Box::leak(Box::new(runtime));
        // The pool's connections are read-only unless a transaction says
        // otherwise: reads run on them outside any transaction, so a write
        // a read ran would fail at the database (25006); every write
        // transaction begins READ WRITE (`BEGIN_GRID`, `BEGIN_ROWS`,
        // `migrate`).
        let mut pooled = config.clone();
        pooled.options(format!("{options} -c default_transaction_read_only=on"));
        let manager = Manager::from_config(pooled, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(busy_timeout))
            .create_timeout(Some(busy_timeout.max(Duration::from_secs(5))))
            .build()
            .map_err(|e| StoreError::Invalid(format!("PostgreSQL pool: {e}")))?;
        // The commit threads' connections run the capture queue's
        // statements, every one of which finds its rows through an index.
        // The planner's custom plans (a connection's first runs of each
        // statement, and every run after whenever they look cheaper than
        // the generic one) read the whole of `items` instead for an update
        // of many ids (`id = ANY($ids)`) while the table is small for its
        // statistics: counted with auto_explain in bench/scale_out.sh, 18
        // such reads at one node and 38 at three (625 ms of PostgreSQL's
        // time, up to 52 ms each); with this, 5 left, all of small tables
        // or the bench's own. A read of the whole table stays possible
        // where no index serves.
        let mut own = config.clone();
        own.options(format!("{options} -c enable_seqscan=off"));
        let store = Postgres { runtime, pool, config: Arc::new(config), own: Arc::new(own) };
        store.migrate()?;
        Ok(store)
    }

    /// Drives `f` on the store's runtime. From a blocking thread (where
    /// `Store::read`/`write` run closures) that is a plain `block_on`; the
    /// few calls made on a worker of the server's runtime (the start, the
    /// first-start account) first tell that runtime the thread will block.
    fn block_on<F: Future>(&self, f: F) -> F::Output {
        // The simulation's one thread runs a current-thread runtime, which
        // cannot block in place: `f` is polled on this thread in the store
        // runtime's context (its connections' tasks run on that runtime's
        // threads and wake this one), so the simulation still takes one
        // step at a time, its paused clock standing still meanwhile.
        #[cfg(test)]
        if crate::blocking::inline() {
            let _entered = self.runtime.enter();
            return crate::blocking::park_on(f);
        }
        match tokio::runtime::Handle::try_current() {
            Ok(_) => tokio::task::block_in_place(|| self.runtime.block_on(f)),
            Err(_) => self.runtime.block_on(f),
        }
    }

    fn client(&self) -> StoreResult<deadpool_postgres::Object> {
        self.block_on(self.pool.get()).map_err(|e| match e {
            deadpool_postgres::PoolError::Timeout(_) => StoreError::Busy,
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            other => StoreError::Database(other.to_string()),
        })
    }

    /// Brings the schema up to date (`migrations.rs`): under a session
    /// lock, so nodes starting at once migrate it once, the count in
    /// `schema_version` read and every pending step run in one read-write
    /// transaction with the new count.
    fn migrate(&self) -> StoreResult<()> {
        let client = self.client()?;
        self.block_on(async {
            client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATE_LOCK]).await?;
            let applied = async {
                client
                    .batch_execute(
                        "BEGIN READ WRITE; CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)",
                    )
                    .await?;
                let count: i64 = match client.query_opt("SELECT version FROM schema_version", &[]).await? {
                    Some(row) => row.get(0),
                    None => {
                        client.execute("INSERT INTO schema_version (version) VALUES (0)", &[]).await?;
                        0
                    }
                };
                let applied = migrations::applied(Dialect::Postgres, count)?;
                let (pending, latest) = (migrations::pending(Dialect::Postgres, applied), migrations::LATEST);
                // Written even with nothing pending: a count of the old list becomes this list's.
                let sql = if count == latest as i64 {
                    "COMMIT".to_string()
                } else {
                    format!("{pending}; UPDATE schema_version SET version = {latest}; COMMIT")
                };
                client.batch_execute(&sql).await?;
                if applied < latest {
                    migrations::log_ran(Dialect::Postgres, applied);
                }
                Ok(())
            }
            .await;
            if applied.is_err() {
                // The transaction may be open; the session lock is released below either way.
                let _ = client.batch_execute("ROLLBACK").await;
            }
            client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATE_LOCK]).await?;
            applied
        })
    }

    /// Runs `f` in one write transaction holding the write lock in the
    /// mode `order` asks for; commits only when it returns `Ok`.
    pub fn write<R, E: From<StoreError>>(&self, order: Order, f: impl FnOnce(&Conn) -> Result<R, E>) -> Result<R, E> {
        let client = self.client()?;
        let driver = Driver::Shared(self);
        let tx = Begun::begin(driver, &client, order);
        let conn = PgConn { driver, tx: Tx::Client(&client), pending: Some(&tx.pending) };
        let r = f(&conn)?;
        tx.commit().map_err(|e| E::from(e.into()))?;
        Ok(r)
    }

    /// Runs `f` on a connection of the pool, outside any transaction: each
    /// query is a read-only transaction of its own (the pool's connections
    /// default to read-only; `open`).
    pub fn read<R>(&self, f: impl FnOnce(&ReadConn) -> StoreResult<R>) -> StoreResult<R> {
        let client = self.client()?;
        f(&PgConn { driver: Driver::Shared(self), tx: Tx::Client(&client), pending: None })
    }

    /// NOTIFY `channel` with `payload`, outside any transaction
    /// (`Store::notify`): allowed on the pool's read-only connections, as
    /// it changes no table.
    pub fn notify(&self, channel: &str, payload: &str) -> StoreResult<()> {
        let client = self.client()?;
        self.block_on(client.execute("SELECT pg_notify($1, $2)", &[&channel, &payload]))?;
        Ok(())
    }

    /// Calls `on` with the payload of each notification sent on `channel`
    /// (`NOTIFY`, see `notify`), and with `None` each time the listening
    /// connection opened: what was sent while it was closed is lost, so the
    /// listener looks for itself then. The connection is one of its own,
    /// driven on the store's runtime; it is opened again, after a pause
    /// that grows while the database stays away, whenever it breaks. Stops
    /// when `stop` resolves.
    pub fn listen(
        &self,
        channel: &'static str,
        on: impl Fn(Option<&str>) + Send + Sync + 'static,
        stop: impl Future<Output = ()> + Send + 'static,
    ) {
        let config = self.config.clone();
        self.runtime.spawn(async move {
            let listening = async {
                let mut pause = RELISTEN_FIRST;
                loop {
                    match listen_once(&config, channel, &on).await {
                        // It listened, so the database was there: the next pause starts short.
                        Ok(()) => pause = RELISTEN_FIRST,
                        Err(e) => {
                            tracing::warn!(error = %e, channel, "listening for other nodes' notifications failed; trying again");
                            pause = (pause * 2).min(RELISTEN_MAX);
                        }
                    }
                    tokio::time::sleep(pause).await;
                }
            };
            tokio::select! {
                () = listening => {}
                () = stop => {}
            }
        });
    }

    /// A connection for the calling thread alone, driven on it (`OwnConnection`).
    pub fn own_connection(&self) -> StoreResult<OwnConnection> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Invalid(format!("cannot start a connection's runtime: {e}")))?;
        Ok(OwnConnection { runtime, config: self.own.clone(), open: None })
    }
}

/// A connection one thread owns and drives itself, on a runtime of its own
/// (current-thread): the connection's I/O runs inside the thread's own
/// `block_on`, so a statement's round trip wakes no other thread. A
/// connection of the pool is driven by the store's runtime thread, and each
/// statement costs two hand-overs between threads (the request to that
/// thread, the answer back). The capture queue's commit threads write
/// through one each (`capture/commits.rs`): nearly every statement of the
/// hot path is theirs. Opened at the first write, and again after it broke.
pub struct OwnConnection {
    runtime: tokio::runtime::Runtime,
    config: Arc<tokio_postgres::Config>,
    open: Option<Open>,
}

struct Open {
    client: tokio_postgres::Client,
    /// Statements prepared on this connection, by their SQL text.
    statements: RefCell<HashMap<String, tokio_postgres::Statement>>,
}

impl OwnConnection {
    /// `Postgres::write` on this connection.
    pub fn write<R, E: From<StoreError>>(
        &mut self,
        order: Order,
        f: impl FnOnce(&Conn) -> Result<R, E>,
    ) -> Result<R, E> {
        let OwnConnection { runtime: rt, config, open } = self;
        let open = reopen(rt, config, open).map_err(E::from)?;
        let driver = Driver::Own(rt);
        let tx = Begun::begin(driver, &open.client, order);
        let conn = PgConn { driver, tx: Tx::Own(&open.client, &open.statements), pending: Some(&tx.pending) };
        let r = f(&conn)?;
        tx.commit().map_err(|e| E::from(e.into()))?;
        Ok(r)
    }
}

// READ WRITE: the pool's connections default to read-only (`Postgres::open`).
const BEGIN_GRID: &str = concat!("BEGIN READ WRITE; SELECT pg_advisory_xact_lock(", write_lock!(), ")");
const BEGIN_ROWS: &str = concat!("BEGIN READ WRITE; SELECT pg_advisory_xact_lock_shared(", write_lock!(), ")");

/// A write transaction on a connection (the pool's or an `OwnConnection`):
/// rolled back when dropped uncommitted (its lock or its work failed, or
/// the work panicked), so the connection's next transaction starts clean,
/// whether it goes back to the pool or stays with its thread.
///
/// Its BEGIN is sent with its first statement, not alone before it
/// (`PgConn::run`), and on an `OwnConnection` the writes whose answers
/// nobody reads go with the next statement or with COMMIT (`Sql::send_all`):
/// each costs a transaction one round trip less. Against a database 2 ms
/// away that is 2 ms less per group commit, whose transactions bound a
/// node's rate there (docs/scale-out.md, "Capacity"). The work may so read
/// its clock before the write lock is held: earlier by the lock's wait,
/// which only a grid-ordered writer holding it causes (rare, and never a
/// capture's); times written by different nodes differ by their clocks
/// anyway, and nothing orders by them across nodes.
struct Begun<'a> {
    driver: Driver<'a>,
    pending: Pending<'a>,
    open: bool,
}

/// What a write transaction has not had answered yet.
struct Pending<'c> {
    client: &'c tokio_postgres::Client,
    /// BEGIN with the write lock, until it is sent.
    unsent: Cell<Option<&'static str>>,
    /// Sent by `send_all`, their answers not read yet. Each is polled with
    /// every statement after it: tokio-postgres hands a connection's
    /// answers out in order and waits while one is not taken.
    sent: RefCell<Vec<Sent<'c>>>,
}

type Sent<'c> = Pin<Box<dyn Future<Output = Result<(), tokio_postgres::Error>> + 'c>>;

impl<'c> Pending<'c> {
    /// What must be answered before a statement sent now: BEGIN, sent now
    /// (first) while it is unsent, and what `send_all` sent.
    fn ahead(&self) -> Vec<Sent<'c>> {
        let mut ahead: Vec<Sent<'c>> = self.begin().into_iter().collect();
        ahead.append(&mut self.sent.borrow_mut());
        ahead
    }

    /// BEGIN, to be sent first, while it is unsent; taken, it is sent.
    fn begin(&self) -> Option<Sent<'c>> {
        let (sql, client) = (self.unsent.take()?, self.client);
        Some(Box::pin(async move { client.batch_execute(sql).await }))
    }
}

/// Waits for every answer of `ahead`; the first failure is the one
/// answered (the statements after it failed as the transaction aborted).
async fn answered(ahead: Vec<Sent<'_>>) -> Result<(), tokio_postgres::Error> {
    futures_util::future::join_all(ahead).await.into_iter().collect()
}

impl<'a> Begun<'a> {
    /// BEGIN and the write lock in the mode `order` asks for, in one
    /// message (the simple query protocol runs both): tokio-postgres's
    /// `Transaction` sent BEGIN alone and waited for it, and under load
    /// each round trip waits for both ends to be scheduled. Nothing is sent
    /// yet: the first statement takes it along.
    fn begin(driver: Driver<'a>, client: &'a tokio_postgres::Client, order: Order) -> Self {
        let begin = match order {
            Order::Grid => BEGIN_GRID,
            Order::Rows => BEGIN_ROWS,
        };
        let pending = Pending { client, unsent: Cell::new(Some(begin)), sent: RefCell::default() };
        Begun { driver, pending, open: true }
    }

    /// COMMIT, sent with the answers still owed; nothing when no statement
    /// ran (BEGIN was never sent, so there is nothing to commit or to
    /// order). A write that failed fails the commit with its error:
    /// PostgreSQL ends an aborted transaction's COMMIT as a rollback,
    /// without an error of its own.
    fn commit(mut self) -> Result<(), tokio_postgres::Error> {
        self.open = false;
        if self.pending.unsent.get().is_some() {
            return Ok(());
        }
        let (ahead, client) = (self.pending.ahead(), self.pending.client);
        self.driver.block_on(async {
            let (ahead, commit) = futures_util::future::join(answered(ahead), client.batch_execute("COMMIT")).await;
            ahead.and(commit)
        })
    }
}

impl Drop for Begun<'_> {
    fn drop(&mut self) {
        // Guarded from the first statement on: should BEGIN pass and the
        // lock fail (a statement time-out), the aborted transaction is
        // still rolled back. Unsent, nothing began.
        if self.open && self.pending.unsent.get().is_none() {
            // Answers still owed are dropped (the connection discards them).
            self.pending.sent.borrow_mut().clear();
            // A connection that cannot roll back is broken: an own one is
            // reopened before its next write (`reopen`), the pool drops a
            // closed one.
            let _ = self.driver.block_on(self.pending.client.batch_execute("ROLLBACK"));
        }
    }
}

/// The pause before a broken listening connection is opened again, doubled
/// after each failed attempt up to `RELISTEN_MAX`.
const RELISTEN_FIRST: Duration = Duration::from_millis(500);
const RELISTEN_MAX: Duration = Duration::from_secs(30);

/// One listening connection, from its opening to its end: `LISTEN`, then
/// `on(None)`, then `on(Some(payload))` for each notification. `Ok` when
/// the connection closed after it listened, `Err` when it could not.
async fn listen_once(
    config: &tokio_postgres::Config,
    channel: &str,
    on: &impl Fn(Option<&str>),
) -> Result<(), tokio_postgres::Error> {
    use futures_util::StreamExt;
    let (client, mut connection) = config.connect(NoTls).await?;
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    // The connection's messages are read only here, so they are polled
    // while the LISTEN runs, and its answer arrives through them.
    let sql = format!("LISTEN {channel}");
    {
        let listen = client.batch_execute(&sql);
        tokio::pin!(listen);
        loop {
            tokio::select! {
                done = &mut listen => break done?,
                message = messages.next() => match message {
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(e),
                    None => return Ok(()),
                },
            }
        }
    }
    on(None);
    while let Some(message) = messages.next().await {
        if let tokio_postgres::AsyncMessage::Notification(n) = message? {
            on(Some(n.payload()));
        }
    }
    // Kept until here: a client dropped closes its connection.
    drop(client);
    Ok(())
}

/// `open`'s connection, opened first if there is none or it broke.
fn reopen<'a>(
    runtime: &tokio::runtime::Runtime,
    config: &tokio_postgres::Config,
    open: &'a mut Option<Open>,
) -> StoreResult<&'a mut Open> {
    if open.as_ref().is_some_and(|o| o.client.is_closed()) {
        *open = None;
    }
    if let Some(o) = open {
        return Ok(o);
    }
    let (client, connection) = runtime.block_on(config.connect(NoTls))?;
    // Polled whenever this thread waits on a statement.
    runtime.spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "a commit thread's PostgreSQL connection ended");
        }
    });
    Ok(open.insert(Open { client, statements: RefCell::default() }))
}

/// What drives a connection's futures: the store's runtime (the pool's
/// connections), or the thread's own (`OwnConnection`).
#[derive(Clone, Copy)]
enum Driver<'a> {
    Shared(&'a Postgres),
    Own(&'a tokio::runtime::Runtime),
}

impl Driver<'_> {
    fn block_on<F: Future>(&self, f: F) -> F::Output {
        match self {
            Driver::Shared(store) => store.block_on(f),
            Driver::Own(runtime) => runtime.block_on(f),
        }
    }
}

enum Tx<'a> {
    /// A connection of the pool: alone (a read), or inside the transaction
    /// `Postgres::write` began on it (`Begun`).
    Client(&'a deadpool_postgres::Object),
    /// An `OwnConnection`'s client, inside the transaction it began (`Begun`).
    Own(&'a tokio_postgres::Client, &'a RefCell<HashMap<String, tokio_postgres::Statement>>),
}

impl Tx<'_> {
    /// `sql` as prepared on an `OwnConnection` before, without a round trip.
    fn own_prepared(&self, sql: &str) -> Option<tokio_postgres::Statement> {
        match self {
            Tx::Client(_) => None,
            Tx::Own(_, statements) => statements.borrow().get(sql).cloned(),
        }
    }

    /// `sql` prepared once per connection: deadpool's cache for the pool's,
    /// the connection's own map for an `OwnConnection`.
    async fn prepared(&self, sql: &str) -> Result<tokio_postgres::Statement, tokio_postgres::Error> {
        match self {
            Tx::Client(c) => c.prepare_cached(sql).await,
            Tx::Own(t, statements) => {
                if let Some(s) = statements.borrow().get(sql) {
                    return Ok(s.clone());
                }
                let s = t.prepare(sql).await?;
                statements.borrow_mut().insert(sql.to_string(), s.clone());
                Ok(s)
            }
        }
    }

    async fn execute(
        &self,
        s: &tokio_postgres::Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, tokio_postgres::Error> {
        match self {
            Tx::Client(c) => c.execute(s, params).await,
            Tx::Own(t, _) => t.execute(s, params).await,
        }
    }

    async fn query(
        &self,
        s: &tokio_postgres::Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
        match self {
            Tx::Client(c) => c.query(s, params).await,
            Tx::Own(t, _) => t.query(s, params).await,
        }
    }
}

struct PgConn<'a, 'c> {
    driver: Driver<'a>,
    tx: Tx<'a>,
    /// What the write transaction has not had answered (`Begun`); `None`
    /// for a read.
    pending: Option<&'a Pending<'c>>,
}

impl PgConn<'_, '_> {
    /// Drives `op`, with what the transaction owes answers for ahead of it
    /// (`Pending::ahead`): all sent before any answer is awaited
    /// (tokio-postgres writes a request as soon as its future is first
    /// polled, and `join` polls those ahead first), so they share a round
    /// trip. Their failure is the one answered: `op` then failed as the
    /// transaction aborted, or never ran on a broken connection.
    fn run<T>(&self, op: impl Future<Output = Result<T, tokio_postgres::Error>>) -> Result<T, tokio_postgres::Error> {
        let ahead = self.pending.map(Pending::ahead).unwrap_or_default();
        self.driver.block_on(async {
            if ahead.is_empty() {
                return op.await;
            }
            let (ahead, done) = futures_util::future::join(answered(ahead), op).await;
            ahead.and(done)
        })
    }
}

fn refs(params: &[Value]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|v| v as &(dyn ToSql + Sync)).collect()
}

impl Query for PgConn<'_, '_> {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn query_values(&self, sql: &str, params: Vec<Value>) -> StoreResult<Vec<Row>> {
        let (sql, params) = (numbered_placeholders(sql), refs(&params));
        let rows = self.run(async { self.tx.query(&self.tx.prepared(&sql).await?, &params).await })?;
        rows.iter().map(row).collect()
    }

    /// Every statement prepared first (from the cache but the first time),
    /// then all sent before any answer is awaited: tokio-postgres writes a
    /// request as soon as its future is first polled, and `try_join_all`
    /// polls each once, in order, before it waits. The answers come back in
    /// that order; the first error is the one returned (PostgreSQL fails the
    /// statements after it as the transaction aborted).
    fn query_all(&self, statements: Vec<Statement>) -> StoreResult<Vec<Vec<Row>>> {
        let texts: Vec<String> = statements.iter().map(|(sql, _)| numbered_placeholders(sql)).collect();
        let answers = self.run(async {
            let mut prepared = Vec::with_capacity(texts.len());
            for sql in &texts {
                prepared.push(self.tx.prepared(sql).await?);
            }
            let queries = prepared
                .iter()
                .zip(&statements)
                .map(|(s, (_, params))| async move { self.tx.query(s, &refs(params)).await });
            futures_util::future::try_join_all(queries).await
        })?;
        answers.iter().map(|rows| rows.iter().map(row).collect()).collect()
    }
}

impl Sql for PgConn<'_, '_> {
    fn execute_values(&self, sql: &str, params: Vec<Value>) -> StoreResult<usize> {
        let (sql, params) = (numbered_placeholders(sql), refs(&params));
        let n = self.run(async { self.tx.execute(&self.tx.prepared(&sql).await?, &params).await })?;
        Ok(n as usize)
    }

    /// In a write transaction on an `OwnConnection` (the group commits'),
    /// each statement prepared there before is sent now, BEGIN ahead of
    /// them while unsent, and its answer read with the next statement's or
    /// COMMIT's (`Pending::sent`): their round trip is saved. Anything
    /// else runs at once (`query_all`): a read has no COMMIT to answer
    /// with, and the pool's statement cache cannot be read without
    /// awaiting it.
    fn send_all(&self, statements: Vec<Statement>) -> StoreResult<()> {
        let Some(pending) = self.pending.filter(|_| matches!(self.tx, Tx::Own(..))) else {
            return self.query_all(statements).map(drop);
        };
        let mut sends: Vec<Sent<'_>> = Vec::with_capacity(statements.len() + 1);
        sends.extend(pending.begin());
        for (sql, params) in statements {
            let sql = numbered_placeholders(sql);
            let statement = match self.tx.own_prepared(&sql) {
                Some(s) => s,
                // Its first time on this connection: prepared at once, with
                // what is owed ahead of it.
                None => {
                    pending.sent.borrow_mut().append(&mut sends);
                    self.run(self.tx.prepared(&sql))?
                }
            };
            let client = pending.client;
            sends.push(Box::pin(async move { client.execute_raw(&statement, params.iter()).await.map(drop) }));
        }
        // Each polled once, which sends it; an answer already there (an
        // error before sending: the connection closed) is answered now.
        let failed = self.driver.block_on(futures_util::future::poll_fn(|cx| {
            let mut failed = None;
            sends.retain_mut(|send| match send.as_mut().poll(cx) {
                std::task::Poll::Pending => true,
                std::task::Poll::Ready(r) => {
                    failed = failed.take().or(r.err());
                    false
                }
            });
            std::task::Poll::Ready(failed)
        }));
        pending.sent.borrow_mut().append(&mut sends);
        match failed {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// Reads every answer `send_all` left owed; the first failure is
    /// answered.
    fn flush(&self) -> StoreResult<()> {
        let Some(pending) = self.pending else { return Ok(()) };
        let sent = std::mem::take(&mut *pending.sent.borrow_mut());
        if sent.is_empty() {
            return Ok(());
        }
        Ok(self.driver.block_on(answered(sent))?)
    }
}

fn row(r: &tokio_postgres::Row) -> StoreResult<Row> {
    let values = r
        .columns()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let ty = c.type_();
            let v = match *ty {
                Type::INT8 => r.try_get::<_, Option<i64>>(i)?.map(Value::Int),
                Type::INT4 => r.try_get::<_, Option<i32>>(i)?.map(|v| Value::Int(v.into())),
                Type::INT2 => r.try_get::<_, Option<i16>>(i)?.map(|v| Value::Int(v.into())),
                Type::BOOL => r.try_get::<_, Option<bool>>(i)?.map(|v| Value::Int(v.into())),
                Type::FLOAT8 => r.try_get::<_, Option<f64>>(i)?.map(Value::Real),
                Type::FLOAT4 => r.try_get::<_, Option<f32>>(i)?.map(|v| Value::Real(v.into())),
                Type::BYTEA => r.try_get::<_, Option<Vec<u8>>>(i)?.map(Value::Blob),
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
                    r.try_get::<_, Option<String>>(i)?.map(Value::Text)
                }
                _ => {
                    return Err(StoreError::Invalid(format!(
                        "column {} is of type {ty}, which the store does not read (cast it in the query)",
                        c.name()
                    )))
                }
            };
            Ok(v.unwrap_or(Value::Null))
        })
        .collect::<StoreResult<Vec<_>>>()?;
    Ok(Row::new(values))
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.code() {
            // A lock not granted within lock_timeout, a query cancelled,
            // too many connections: the database did not answer in time.
            Some(c)
                if [SqlState::LOCK_NOT_AVAILABLE, SqlState::QUERY_CANCELED, SqlState::TOO_MANY_CONNECTIONS]
                    .contains(c) =>
            {
                StoreError::Busy
            }
            // Transactions that lock rows (`Order::Rows`) may meet in a
            // deadlock, which PostgreSQL ends by failing one of them: it
            // wrote nothing and can run again.
            Some(c) if [SqlState::T_R_DEADLOCK_DETECTED, SqlState::T_R_SERIALIZATION_FAILURE].contains(c) => {
                StoreError::Conflict
            }
            // A lost connection is a database that did not answer, too.
            None if e.is_closed() || e.source().is_some_and(|s| s.is::<std::io::Error>()) => StoreError::Busy,
            // tokio-postgres's Display says only "db error"; the server's
            // own message is what an operator needs in the log.
            _ => StoreError::Database(match e.as_db_error() {
                Some(db) => format!("{} ({}): {}", db.message(), db.code().code(), db.detail().unwrap_or("")),
                None => format!("{e}: {}", e.source().map(|s| s.to_string()).unwrap_or_default()),
            }),
        }
    }
}

impl ToSql for Value {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
                Type::BOOL => (*i != 0).to_sql(ty, out),
                Type::FLOAT8 => (*i as f64).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR => i.to_string().to_sql(ty, out),
                _ => Err(format!("an integer for a parameter of type {ty}").into()),
            },
            Value::Real(f) => match *ty {
                Type::FLOAT4 => (*f as f32).to_sql(ty, out),
                _ => f.to_sql(ty, out),
            },
            Value::Text(s) => s.to_sql(ty, out),
            Value::Blob(b) => b.to_sql(ty, out),
            Value::Array(items) => match ty.kind() {
                tokio_postgres::types::Kind::Array(_) => items.to_sql(ty, out),
                _ => Err(format!("an array for a parameter of type {ty}").into()),
            },
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// A database of its own for one unit test, on the PostgreSQL server
/// `GRID_TEST_DATABASE_URL` names (scripts/test.sh starts one and sets it),
/// dropped with it. Without that server the test fails and says so.
#[cfg(test)]
pub(crate) struct TestDatabase {
    admin: String,
    name: String,
    pub url: String,
}

#[cfg(test)]
impl TestDatabase {
    pub(crate) fn create() -> TestDatabase {
        let admin = std::env::var("GRID_TEST_DATABASE_URL").unwrap_or_else(|_| {
            panic!("GRID_TEST_DATABASE_URL is not set: this test needs PostgreSQL (scripts/postgres-env.sh starts one)")
        });
        let unique = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let name = format!("grid_unit_{}_{unique}", std::process::id());
        Self::admin(&admin, &format!("CREATE DATABASE {name}"));
        let (server, _) = admin.rsplit_once('/').unwrap_or_else(|| panic!("no database in {admin}"));
        let url = format!("{server}/{name}");
        TestDatabase { admin, name, url }
    }

    /// Runs `sql` on the database at `url`, on a thread of its own: tests
    /// call it from their runtime, too.
    pub(crate) fn admin(url: &str, sql: &str) {
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
                runtime.block_on(async {
                    let (client, connection) = tokio_postgres::connect(url, NoTls)
                        .await
                        .unwrap_or_else(|e| panic!("PostgreSQL at {url}: {e}"));
                    tokio::spawn(connection);
                    client.batch_execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
                });
            });
        });
    }
}

#[cfg(test)]
impl Drop for TestDatabase {
    fn drop(&mut self) {
        Self::admin(&self.admin, &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_begins_with_the_write_lock_in_either_order() {
        assert_eq!(write_lock!(), i64::from_be_bytes(*b"\0\0\0\0grid"));
        assert_eq!(BEGIN_GRID, "BEGIN READ WRITE; SELECT pg_advisory_xact_lock(1735551332)");
        assert_eq!(BEGIN_ROWS, "BEGIN READ WRITE; SELECT pg_advisory_xact_lock_shared(1735551332)");
    }

    /// The ends' and the claims' update of many items by id (`id =
    /// ANY($ids)`), as a custom plan makes it for its values on a table
    /// its statistics call small: through `items_pkey` on a commit thread's
    /// connection, where the pool's connection reads the whole table.
    #[test]
    fn on_postgres_a_commit_threads_update_of_many_ids_goes_through_the_index() {
        let db = TestDatabase::create();
        let store = crate::store::Store::connect(&db.url, Duration::from_secs(5)).unwrap();
        let ids: Vec<String> = (0..500).map(|i| format!("it_{i:05}")).collect();
        let sql = format!("EXPLAIN UPDATE items SET updated_at = 0 WHERE id = ANY('{{{}}}'::text[])", ids.join(","));
        let explain = |c: &ReadConn| Ok(c.query_map(&sql, (), |r| r.get::<String>(0))?.join("\n"));
        let own = store.writer().unwrap().write_ordered(Order::Rows, |tx: &Conn| explain(tx)).unwrap();
        assert!(own.contains("items_pkey") && !own.contains("Seq Scan"), "{own}");
        let pooled = store.read_blocking(explain).unwrap();
        assert!(pooled.contains("Seq Scan on items"), "the planner's default changed: {pooled}");
    }
}
