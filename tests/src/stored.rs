//! What a server's store holds, read beside the running server (or after it
//! died), and the few faults a test plants in it: `server.stored()`.
//!
//! This is the one place in tests/ with SQL that reads or changes the grid's
//! rows (store.rs's `Database::lock` holds tables and reads nothing).
//! A black-box test asks a named reader (`stored().job_node(id)`,
//! `stored().row_count(Table::Items)`) for what the API does not show, so a
//! change of the schema is one edit here and each query is written once for
//! both stores: SQLite (grid.db in the data dir, opened beside the server)
//! and PostgreSQL (the server's database, with psql). tidy.rs's
//! `black_box_tests_hold_no_sql_text` keeps SQL text out of tests/tests;
//! the raw `rows`/`execute` below are private to this module.
//!
//! `catalog` is the exception: schema_parity.rs reads each store's schema
//! from its catalogs, and only from them (checked).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::server::GridServer;

/// One row as the store answers it: each value as text, `None` for NULL.
pub type Row = Vec<Option<String>>;

/// One ledger entry: (kind, amount in µ€, subject).
pub type LedgerEntry = (String, i64, String);

/// The store's tables a test counts or plants a fault in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Sessions,
    Batches,
    Items,
    Jobs,
    IdempotencyKeys,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::Sessions => "sessions",
            Table::Batches => "batches",
            Table::Items => "items",
            Table::Jobs => "jobs",
            Table::IdempotencyKeys => "idempotency_keys",
        }
    }
}

/// A session's row: its machine (the session's state, JSON), whether it is
/// live, its next due time (ms), the node running its browser, and what its
/// lease reserved.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSession {
    pub machine: Value,
    pub live: bool,
    pub due_at: Option<i64>,
    pub node: Option<String>,
    pub reserved_micros: i64,
}

/// Ledger entries of a set of subjects: how many charges and releases, and
/// how many distinct subjects were charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settlements {
    pub charges: i64,
    pub releases: i64,
    pub charged_subjects: i64,
}

/// The grid-server connections to a PostgreSQL database: how many are
/// running a statement, how many are inside a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConnections {
    pub running: i64,
    pub in_transaction: i64,
}

impl GridServer {
    /// The server's store, read (or rigged) beside it: on PostgreSQL the
    /// database it runs on (its own or, for a node that joined, another's),
    /// else its grid.db.
    pub fn stored(&self) -> Stored<'_> {
        Stored { server: self }
    }
}

/// A server's store; see the module's doc.
pub struct Stored<'a> {
    server: &'a GridServer,
}

/// `s` as an SQL string literal.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The grid-server backends listening for the nodes' wake-ups: the last
/// statement such a connection ran is its `LISTEN`.
const LISTENING: &str = "FROM pg_stat_activity WHERE datname = current_database() \
                         AND application_name = 'grid-server' AND query LIKE 'LISTEN %'";

impl Stored<'_> {
    // ----- counts -----

    /// Rows of `table`.
    pub fn row_count(&self, table: Table) -> i64 {
        self.number(&format!("SELECT COUNT(*) FROM {}", table.name()))
    }

    /// Ledger entries other than credits: what the store's writes (leases,
    /// submissions, settlement) have added to the ledger.
    pub fn non_credit_ledger_entries(&self) -> i64 {
        self.number("SELECT COUNT(*) FROM ledger WHERE kind != 'credit'")
    }

    // ----- the ledger -----

    /// The reservations taken for `account_id`, in order: (amount, subject).
    pub fn reservations(&self, account_id: &str) -> Vec<(i64, String)> {
        let sql = format!(
            "SELECT amount, subject FROM ledger WHERE account_id = {} AND kind = 'reserve' ORDER BY id",
            quoted(account_id)
        );
        self.rows(&sql)
            .into_iter()
            .map(|r| match r.as_slice() {
                [Some(amount), Some(subject)] => (self.parse(amount, "an amount"), subject.clone()),
                other => self.server.fail(&format!("ledger row {other:?}")),
            })
            .collect()
    }

    /// The ledger entries whose subject is one of the job's reservations
    /// (`<jobId>/r<n>`), in insertion order.
    pub fn job_ledger(&self, job_id: &str) -> Vec<LedgerEntry> {
        let sql = format!(
            "SELECT kind, amount, subject FROM ledger WHERE subject LIKE {} ORDER BY id",
            quoted(&format!("{job_id}/%"))
        );
        self.rows(&sql)
            .into_iter()
            .map(|r| match r.as_slice() {
                [Some(kind), Some(amount), Some(subject)] => {
                    (kind.clone(), self.parse(amount, "an amount"), subject.clone())
                }
                other => self.server.fail(&format!("ledger row {other:?}")),
            })
            .collect()
    }

    /// The charges and releases of the batch's items.
    pub fn batch_settlements(&self, batch_id: &str) -> Settlements {
        self.settlements_where(&format!("subject IN (SELECT id FROM items WHERE batch_id = {})", quoted(batch_id)))
    }

    /// The charges and releases of the whole ledger.
    pub fn settlements(&self) -> Settlements {
        self.settlements_where("1 = 1")
    }

    fn settlements_where(&self, condition: &str) -> Settlements {
        let sql = format!(
            "SELECT COALESCE(SUM(CASE WHEN kind = 'charge' THEN 1 ELSE 0 END), 0), \
             COALESCE(SUM(CASE WHEN kind = 'release' THEN 1 ELSE 0 END), 0), \
             COUNT(DISTINCT CASE WHEN kind = 'charge' THEN subject END) FROM ledger WHERE {condition}"
        );
        match self.numbers(&sql).as_slice() {
            &[charges, releases, charged_subjects] => Settlements { charges, releases, charged_subjects },
            other => self.server.fail(&format!("{sql}: {other:?}")),
        }
    }

    /// The charges and releases of the account's items, of every batch of it.
    pub fn account_item_settlements(&self, account_id: &str) -> Settlements {
        self.settlements_where(&format!("subject IN (SELECT id FROM items WHERE account_id = {})", quoted(account_id)))
    }

    /// The account's ledger entries summed per kind (`credit`, `reserve`,
    /// `charge`, `release`), from the entries themselves, not the sums the
    /// store keeps beside them (which `account show` reads).
    pub fn ledger_sums(&self, account_id: &str) -> BTreeMap<String, i64> {
        let sql = format!(
            "SELECT kind, CAST(SUM(amount) AS BIGINT) FROM ledger WHERE account_id = {} GROUP BY kind",
            quoted(account_id)
        );
        self.rows(&sql)
            .into_iter()
            .map(|r| match r.as_slice() {
                [Some(kind), Some(sum)] => (kind.clone(), self.parse(sum, "a sum")),
                other => self.server.fail(&format!("ledger sum row {other:?}")),
            })
            .collect()
    }

    /// What was charged and released of the reservation whose subject is
    /// `subject`, summed; `None` before either.
    pub fn charged_and_released(&self, subject: &str) -> Option<i64> {
        let sql = format!(
            "SELECT CAST(SUM(amount) AS BIGINT) FROM ledger WHERE subject = {} AND kind IN ('charge', 'release')",
            quoted(subject)
        );
        self.value(&sql).map(|v| self.parse(&v, "a sum"))
    }

    // ----- batches and items -----

    /// How many items of the batch each node holds or held last (its
    /// claim); "" for items never claimed.
    pub fn items_by_node(&self, batch_id: &str) -> BTreeMap<String, i64> {
        self.counts_by_node(&format!("batch_id = {}", quoted(batch_id)))
    }

    /// How many items each node holds or held last, over every batch.
    pub fn items_by_node_everywhere(&self) -> BTreeMap<String, i64> {
        self.counts_by_node("1 = 1")
    }

    /// How many items are in each state (`completed`, `active`, ...), over
    /// every batch.
    pub fn items_by_state(&self) -> BTreeMap<String, i64> {
        self.rows("SELECT state, COUNT(*) FROM items GROUP BY state")
            .into_iter()
            .map(|r| (r[0].clone().unwrap_or_default(), self.parse(r[1].as_deref().unwrap_or("0"), "a count")))
            .collect()
    }

    /// How many items counted other than one attempt, over every batch.
    pub fn items_attempted_other_than_once_anywhere(&self) -> i64 {
        self.number("SELECT COUNT(*) FROM items WHERE attempts_made <> 1")
    }

    /// How many items each node holds now (active under its claim), over
    /// every batch.
    pub fn active_items_by_node_everywhere(&self) -> BTreeMap<String, i64> {
        self.counts_by_node("state = 'active'")
    }

    /// How many items still owe the ledger a charge or a release (ended,
    /// left for the settlement pass).
    pub fn items_owing_settlement(&self) -> i64 {
        self.number("SELECT COUNT(*) FROM items WHERE settlement_due IS NOT NULL")
    }

    /// When an item last changed (its machine's `updated_at`, ms since the
    /// epoch by the server's clock), over every batch; `None` with no item.
    /// The settlement pass leaves it as the attempt's end wrote it.
    pub fn last_item_change_ms(&self) -> Option<i64> {
        self.value("SELECT MAX(updated_at) FROM items").map(|v| self.parse(&v, "a time"))
    }

    /// How many batches had their items run by more than one node.
    pub fn batches_run_by_several_nodes(&self) -> i64 {
        self.number(
            "SELECT COUNT(*) FROM (SELECT batch_id FROM items GROUP BY batch_id \
             HAVING COUNT(DISTINCT lease_node) > 1) AS split",
        )
    }

    /// How many items of the batch each node holds now (active under its claim).
    pub fn active_items_by_node(&self, batch_id: &str) -> BTreeMap<String, i64> {
        self.counts_by_node(&format!("batch_id = {} AND state = 'active'", quoted(batch_id)))
    }

    fn counts_by_node(&self, condition: &str) -> BTreeMap<String, i64> {
        self.rows(&format!("SELECT lease_node, COUNT(*) FROM items WHERE {condition} GROUP BY lease_node"))
            .into_iter()
            .map(|r| (r[0].clone().unwrap_or_default(), self.parse(r[1].as_deref().unwrap_or("0"), "a count")))
            .collect()
    }

    /// The items of the batch `node` holds now, by id.
    pub fn active_items_held_by(&self, batch_id: &str, node: &str) -> Vec<String> {
        let sql = format!(
            "SELECT id FROM items WHERE batch_id = {} AND state = 'active' AND lease_node = {} ORDER BY id",
            quoted(batch_id),
            quoted(node)
        );
        self.rows(&sql).into_iter().filter_map(|r| r[0].clone()).collect()
    }

    /// An item of the batch `node` holds or held last, if any.
    pub fn an_item_claimed_by(&self, batch_id: &str, node: &str) -> Option<String> {
        let sql = format!(
            "SELECT id FROM items WHERE batch_id = {} AND lease_node = {} LIMIT 1",
            quoted(batch_id),
            quoted(node)
        );
        self.rows(&sql).into_iter().next().and_then(|r| r.into_iter().next().flatten())
    }

    /// The node that holds or held the item last.
    pub fn item_lease_node(&self, item_id: &str) -> Option<String> {
        self.value(&format!("SELECT lease_node FROM items WHERE id = {}", quoted(item_id)))
    }

    /// How many items of the batch counted other than one attempt.
    pub fn items_attempted_other_than_once(&self, batch_id: &str) -> i64 {
        self.number(&format!("SELECT COUNT(*) FROM items WHERE batch_id = {} AND attempts_made <> 1", quoted(batch_id)))
    }

    // ----- jobs -----

    /// The job's phase as stored (`RUNNING`, ...).
    pub fn job_phase(&self, job_id: &str) -> Option<String> {
        self.value(&format!("SELECT phase FROM jobs WHERE id = {}", quoted(job_id)))
    }

    /// The node whose engine runs (or ran) the job's attempt.
    pub fn job_node(&self, job_id: &str) -> Option<String> {
        self.value(&format!("SELECT node FROM jobs WHERE id = {}", quoted(job_id)))
    }

    // ----- sessions -----

    /// The session's row; fails unless there is exactly one.
    pub fn session(&self, id: &str) -> StoredSession {
        let rows = self.rows(&format!(
            "SELECT machine, live, due_at, node, reserved_micros FROM sessions WHERE id = {}",
            quoted(id)
        ));
        let [row] = rows.as_slice() else { self.server.fail(&format!("session {id} in the store: {rows:?}")) };
        let [Some(machine), Some(live), due_at, node, Some(reserved)] = row.as_slice() else {
            self.server.fail(&format!("session {id} row {row:?}"))
        };
        StoredSession {
            machine: serde_json::from_str(machine)
                .unwrap_or_else(|e| self.server.fail(&format!("machine {machine}: {e}"))),
            live: live == "1",
            due_at: due_at.as_deref().map(|d| self.parse(d, "due_at ms")),
            node: node.clone(),
            reserved_micros: self.parse(reserved, "reserved_micros"),
        }
    }

    // ----- contexts -----

    /// Every row of `contexts` as text, the sealed state as the bytes it
    /// holds (decoded from hex): what a dump of the table would show.
    pub fn contexts_dump(&self) -> Vec<u8> {
        let state = if self.on_postgres() { "encode(state, 'hex')" } else { "hex(state)" };
        let rows =
            self.rows(&format!("SELECT id, account_id, holder, last_save_refused, {state} FROM contexts ORDER BY id"));
        let mut out = vec![];
        for row in rows {
            for (i, v) in row.into_iter().enumerate() {
                let v = v.unwrap_or_default();
                if i == 4 {
                    let digits = v.as_bytes();
                    out.extend(
                        digits.chunks(2).filter_map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok()),
                    );
                } else {
                    out.extend(v.into_bytes());
                }
                out.push(b'\t');
            }
            out.push(b'\n');
        }
        out
    }

    /// Overwrites context `id`'s sealed state with bytes that open under no
    /// key (a planted fault: a state damaged at rest).
    pub fn break_context_state(&self, id: &str) {
        let bytes = if self.on_postgres() { "'\\x00ff00ff'::bytea" } else { "X'00FF00FF'" };
        self.execute(&format!("UPDATE contexts SET state = {bytes} WHERE id = {}", quoted(id)));
    }

    // ----- settings and nodes -----

    /// The value of a server setting (`node_credential`,
    /// `download_signing_secret`, `vault_key_check`, ...); `None` when unset.
    pub fn setting(&self, key: &str) -> Option<String> {
        let rows = self.rows(&format!("SELECT value FROM settings WHERE key = {}", quoted(key)));
        rows.into_iter().next().and_then(|r| r.into_iter().next().flatten())
    }

    /// The last heartbeat (ms) any node recorded; `None` with no node.
    pub fn last_node_heartbeat(&self) -> Option<i64> {
        self.value("SELECT MAX(heartbeat_at) FROM nodes").map(|v| self.parse(&v, "heartbeat_at ms"))
    }

    // ----- the database itself -----

    /// SQLite's journal mode of grid.db (`wal`, ...); SQLite only.
    pub fn journal_mode(&self) -> String {
        self.sqlite_only("journal_mode");
        self.value("PRAGMA journal_mode").unwrap_or_default()
    }

    /// The grid-server connections to the server's PostgreSQL database,
    /// told apart by their application name (so every node on it counts);
    /// PostgreSQL only.
    pub fn server_connections(&self) -> ServerConnections {
        self.postgres_only("server_connections reads pg_stat_activity");
        let sql = "SELECT COUNT(*) FILTER (WHERE state = 'active'), COUNT(*) FILTER (WHERE xact_start IS NOT NULL) \
                   FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'grid-server'";
        match self.numbers(sql).as_slice() {
            &[running, in_transaction] => ServerConnections { running, in_transaction },
            other => self.server.fail(&format!("{sql}: {other:?}")),
        }
    }

    // ----- PostgreSQL's own counters (scale_out.rs) -----

    /// Refreshes the planner's statistics of `table` now (`ANALYZE`), as
    /// autovacuum would: a test takes them while a queue is short.
    pub fn analyze(&self, table: Table) {
        self.postgres_only("analyze takes PostgreSQL's statistics");
        self.execute(&format!("ANALYZE {}", table.name()));
    }

    /// Ends every grid-server connection listening for the nodes' wake-ups
    /// (the last statement it ran is its `LISTEN`), as a restarted
    /// database or a cut network would; answers how many it ended.
    pub fn cut_listening_connections(&self) -> i64 {
        self.postgres_only("cut_listening_connections ends PostgreSQL backends");
        self.number(&format!("SELECT COUNT(*) FILTER (WHERE pg_terminate_backend(pid)) {LISTENING}"))
    }

    /// The grid-server connections listening for the nodes' wake-ups.
    pub fn listening_connections(&self) -> i64 {
        self.postgres_only("listening_connections reads pg_stat_activity");
        self.number(&format!("SELECT COUNT(*) {LISTENING}"))
    }

    /// Connections of grid-server processes to the database: a killed
    /// node's count falls to 0 once its backends exited, each having
    /// reported its statistics.
    pub fn server_backends(&self) -> i64 {
        self.postgres_only("server_backends reads pg_stat_activity");
        self.number(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'grid-server'",
        )
    }

    /// Index entries PostgreSQL read from `index` (`idx_tup_read` of
    /// pg_stat_user_indexes: every entry a scan returned, dead ones
    /// included), as reported by backends that exited or reported since.
    pub fn index_entries_read(&self, index: &str) -> i64 {
        self.postgres_only("index_entries_read reads pg_stat_user_indexes");
        self.number(&format!(
            "SELECT COALESCE(SUM(idx_tup_read), 0) FROM pg_stat_user_indexes WHERE indexrelname = {}",
            quoted(index)
        ))
    }

    // ----- faults a test plants -----

    /// Makes every INSERT into `table` fail ("injected fault") until
    /// `remove_insert_fault`: a trigger in the store's own dialect, so the
    /// fault arrives as a real one does, the database refusing the statement
    /// (and the server's transaction with it).
    pub fn inject_insert_fault(&self, table: Table) {
        let t = table.name();
        if self.on_postgres() {
            self.execute(&format!(
                "CREATE OR REPLACE FUNCTION injected_fault() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN RAISE EXCEPTION 'injected fault'; END $$; \
                 CREATE TRIGGER injected_fault BEFORE INSERT ON {t} \
                 FOR EACH ROW EXECUTE FUNCTION injected_fault();"
            ));
        } else {
            self.execute(&format!(
                "CREATE TRIGGER injected_fault BEFORE INSERT ON {t} \
                 BEGIN SELECT RAISE(ABORT, 'injected fault'); END;"
            ));
        }
    }

    /// Removes the fault `inject_insert_fault` planted on `table`.
    pub fn remove_insert_fault(&self, table: Table) {
        if self.on_postgres() {
            self.execute(&format!("DROP TRIGGER injected_fault ON {}", table.name()));
        } else {
            self.execute("DROP TRIGGER injected_fault");
        }
    }

    /// Overwrites the stored bytes of an item's artifact kept in the
    /// database (its storage name `db:...`): a tampered file. A meta may
    /// be kept in the row of another of its item's files (`meta_content`,
    /// schema step 20) or in a row of its own.
    pub fn overwrite_artifact(&self, item_id: &str, kind: &str, bytes: &[u8]) {
        let (bytes, item_id) = (self.bytes(bytes), quoted(item_id));
        let mut sql =
            format!("UPDATE artifacts SET content = {bytes} WHERE item_id = {item_id} AND kind = {};", quoted(kind));
        if kind == "meta" {
            sql += &format!(
                "UPDATE artifacts SET meta_content = {bytes} WHERE item_id = {item_id} AND meta_sha256 IS NOT NULL;"
            );
        }
        self.execute(&sql);
    }

    /// Overwrites the log of a job's attempt kept in the database (on
    /// PostgreSQL; SQLite keeps it in a file), `None` removing its bytes.
    pub fn overwrite_job_log(&self, job_id: &str, attempt: u32, bytes: Option<&[u8]>) {
        let value = bytes.map_or("NULL".to_string(), |b| self.bytes(b));
        self.execute(&format!(
            "UPDATE job_logs SET content = {value} WHERE job_id = {} AND attempt = {attempt}",
            quoted(job_id)
        ));
    }

    // ----- the catalogs (schema_parity.rs) -----

    /// Rows of a query on the store's own catalogs (SQLite's `sqlite_master`
    /// and `pragma_*` functions, PostgreSQL's `information_schema` and
    /// `pg_*`): one SELECT, every FROM and JOIN naming a catalog; fails
    /// otherwise. Grid data is read through the named readers above.
    pub fn catalog(&self, sql: &str) -> Vec<Row> {
        if let Err(e) = reads_catalogs_only(sql) {
            self.server.fail(&format!("catalog: {e}: {sql}"));
        }
        self.rows(sql)
    }

    // ----- the raw reads and writes, on either store -----

    fn on_postgres(&self) -> bool {
        self.server.database_url().is_some()
    }

    fn postgres_only(&self, what: &str) {
        if !self.on_postgres() {
            self.server.fail(&format!("{what}: this test needs PostgreSQL"));
        }
    }

    fn sqlite_only(&self, what: &str) {
        if self.on_postgres() {
            self.server.fail(&format!(
                "{what} reads grid.db: this test is SQLite-only (scripts/test.sh leaves it out of the PostgreSQL run)"
            ));
        }
    }

    /// `bytes` as a literal of the store's dialect.
    fn bytes(&self, bytes: &[u8]) -> String {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        if self.on_postgres() {
            format!("decode('{hex}', 'hex')")
        } else {
            format!("X'{hex}'")
        }
    }

    /// Rows of a query; on SQLite through a read-only connection beside the
    /// server (waiting up to 10 s for its writer).
    fn rows(&self, sql: &str) -> Vec<Row> {
        if let Some(url) = self.server.database_url() {
            return crate::store::psql_rows(url, sql);
        }
        let conn = self.open_sqlite(rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY);
        let mut stmt = conn.prepare(sql).unwrap_or_else(|e| self.server.fail(&format!("{sql}: {e}")));
        let columns = stmt.column_count();
        let rows = stmt
            .query_map([], |r| {
                (0..columns)
                    .map(|i| {
                        Ok(match r.get_ref(i)? {
                            rusqlite::types::ValueRef::Null => None,
                            rusqlite::types::ValueRef::Integer(n) => Some(n.to_string()),
                            rusqlite::types::ValueRef::Real(f) => Some(f.to_string()),
                            rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
                                Some(String::from_utf8_lossy(t).into_owned())
                            }
                        })
                    })
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .unwrap_or_else(|e| self.server.fail(&format!("{sql}: {e}")));
        rows.collect::<Result<_, _>>().unwrap_or_else(|e| self.server.fail(&format!("{sql}: {e}")))
    }

    /// Runs statements (a planted fault, say); fails with the database's error.
    fn execute(&self, sql: &str) {
        if let Some(url) = self.server.database_url() {
            crate::store::psql_rows(url, sql);
            return;
        }
        let conn = self.open_sqlite(rusqlite::OpenFlags::default());
        conn.execute_batch(sql).unwrap_or_else(|e| self.server.fail(&format!("{sql}: {e}")));
    }

    fn open_sqlite(&self, flags: rusqlite::OpenFlags) -> rusqlite::Connection {
        let path = self.server.db_path();
        let conn = rusqlite::Connection::open_with_flags(&path, flags)
            .unwrap_or_else(|e| self.server.fail(&format!("open {}: {e}", path.display())));
        conn.busy_timeout(Duration::from_secs(10)).unwrap_or_else(|e| self.server.fail(&format!("busy timeout: {e}")));
        conn
    }

    /// The one value of a query; fails when there is no row.
    fn value(&self, sql: &str) -> Option<String> {
        let rows = self.rows(sql);
        let row = rows.first().unwrap_or_else(|| self.server.fail(&format!("{sql}: no row")));
        row.first().cloned().flatten()
    }

    /// The one value of a query, a number; fails otherwise.
    fn number(&self, sql: &str) -> i64 {
        let n = self.value(sql);
        n.as_deref().and_then(|n| n.parse().ok()).unwrap_or_else(|| self.server.fail(&format!("{sql}: {n:?}")))
    }

    /// The values of the first row of a query, numbers; fails otherwise.
    fn numbers(&self, sql: &str) -> Vec<i64> {
        let rows = self.rows(sql);
        let row = rows.first().unwrap_or_else(|| self.server.fail(&format!("{sql}: no row")));
        row.iter()
            .map(|v| {
                v.as_deref()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| self.server.fail(&format!("{sql}: {row:?}")))
            })
            .collect()
    }

    fn parse(&self, v: &str, what: &str) -> i64 {
        v.parse().unwrap_or_else(|_| self.server.fail(&format!("not {what}: {v:?}")))
    }
}

/// Relations of the stores' catalogs a FROM or JOIN may name (as the start
/// of the name: `pragma_table_info('t')`, `pg_constraint`), and the
/// set-returning functions the catalog queries unfold arrays with.
const CATALOGS: &[&str] =
    &["sqlite_master", "pragma_", "information_schema.", "pg_", "unnest(", "generate_series(", "(select"];

/// Whether `sql` is one SELECT whose every FROM and JOIN names a catalog.
fn reads_catalogs_only(sql: &str) -> Result<(), String> {
    let lower = sql.to_ascii_lowercase();
    let words: Vec<&str> = lower.split_whitespace().collect();
    if words.first() != Some(&"select") || lower.trim_end().trim_end_matches(';').contains(';') {
        return Err("not one SELECT".to_string());
    }
    for pair in words.windows(2) {
        if matches!(pair[0], "from" | "join") && !CATALOGS.iter().any(|c| pair[1].starts_with(c)) {
            return Err(format!("{} is not a catalog", pair[1]));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_queries_name_catalogs_only() {
        for ok in [
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name",
            "SELECT name FROM pragma_index_info('i') ORDER BY seqno",
            "SELECT t.relname FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid \
             WHERE NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)",
            "SELECT (SELECT string_agg(a.attname, ', ') FROM unnest(c.conkey) WITH ORDINALITY AS k(att, ord) \
             JOIN pg_attribute a ON a.attnum = k.att) FROM pg_constraint c",
            "select table_name from information_schema.tables",
        ] {
            assert_eq!(reads_catalogs_only(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("SELECT COUNT(*) FROM items", "items is not a catalog"),
            ("SELECT name FROM sqlite_master JOIN sessions ON 1 = 1", "sessions is not a catalog"),
            ("UPDATE settings SET value = 'x'", "not one SELECT"),
            ("SELECT 1 FROM pg_class; DELETE FROM ledger", "not one SELECT"),
        ] {
            assert_eq!(reads_catalogs_only(bad), Err(why.to_string()), "{bad}");
        }
    }

    #[test]
    fn quoted_doubles_single_quotes() {
        assert_eq!(quoted("it's"), "'it''s'");
        assert_eq!(quoted("b-1"), "'b-1'");
    }
}
