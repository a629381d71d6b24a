//! Which store the servers of a test run use: `GRID_TEST_STORE=sqlite` (the
//! default: grid.db in each server's data dir) or `postgres`, where
//! `GRID_TEST_DATABASE_URL` names a throwaway cluster (scripts/test.sh starts
//! one with scripts/postgres-env.sh) and each `GridServer` gets a database
//! of its own, dropped with it. The suite runs once per store.

use std::process::{Command, Stdio};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestStore {
    Sqlite,
    /// The cluster's admin URL (its `postgres` database).
    Postgres(String),
}

/// The store this test run asks for; panics saying what is missing when
/// PostgreSQL is asked for and no cluster is named.
pub fn test_store() -> TestStore {
    match std::env::var("GRID_TEST_STORE").as_deref() {
        Err(_) | Ok("") | Ok("sqlite") => TestStore::Sqlite,
        Ok("postgres") => match std::env::var("GRID_TEST_DATABASE_URL") {
            Ok(url) if !url.is_empty() => TestStore::Postgres(url),
            _ => panic!(
                "GRID_TEST_STORE=postgres but GRID_TEST_DATABASE_URL is not set: start a cluster with \
                 scripts/postgres-env.sh (scripts/test.sh does) and export the URL it prints"
            ),
        },
        Ok(other) => panic!("GRID_TEST_STORE={other}: expected sqlite or postgres"),
    }
}

/// The run's PostgreSQL cluster (its admin URL), for tests that need one
/// whatever the run's store (several nodes on one database); panics saying
/// what is missing.
pub fn cluster_url() -> String {
    match std::env::var("GRID_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "this test needs PostgreSQL: GRID_TEST_DATABASE_URL is not set (start a cluster with \
             scripts/postgres-env.sh, as scripts/test.sh does, and export the URL it prints)"
        ),
    }
}

/// Whether this run's servers are on PostgreSQL.
pub fn on_postgres() -> bool {
    matches!(test_store(), TestStore::Postgres(_))
}

/// A database of its own in the run's cluster, dropped (with any
/// connection still open to it) when this is dropped.
pub struct Database {
    admin_url: String,
    name: String,
    url: String,
}

impl Database {
    pub fn create(admin_url: &str) -> Database {
        let name = format!("grid_{}", rand::random::<u64>());
        let mut url = url::Url::parse(admin_url)
            .unwrap_or_else(|e| panic!("GRID_TEST_DATABASE_URL {admin_url} is not a URL: {e}"));
        url.set_path(&name);
        psql(admin_url, &format!("CREATE DATABASE {name}"));
        Database { admin_url: admin_url.to_string(), name, url: url.to_string() }
    }

    /// What `grid-server --database-url` takes.
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// Runs SQL in the database at `url` with psql; answers its rows as text,
/// `None` for NULL. Panics with psql's error. For `stored`, the one place
/// with SQL that reads or changes the grid's rows.
pub(crate) fn psql_rows(url: &str, sql: &str) -> Vec<crate::stored::Row> {
    psql(url, sql).lines().map(|l| l.split(FIELD_SEP).map(|f| (f != NULL).then(|| f.to_string())).collect()).collect()
}

/// The advisory lock every write transaction of a PostgreSQL store takes
/// first (grid-server's store/postgres.rs).
const WRITE_LOCK: i64 = 0x6772_6964;

impl Database {
    /// A psql session holding the grid-wide write lock and, with `tables`,
    /// every table in ACCESS EXCLUSIVE mode (so reads wait too), until the
    /// returned guard is dropped.
    pub fn lock(&self, tables: bool) -> PgLock {
        let mut script = format!("BEGIN;\nSELECT pg_advisory_xact_lock({WRITE_LOCK});\n");
        if tables {
            script.push_str(
                "LOCK TABLE accounts, api_keys, identities, ledger, batches, items, artifacts, jobs, sessions, \
                 settings, idempotency_keys IN ACCESS EXCLUSIVE MODE;\n",
            );
        }
        self.hold(script)
    }

    /// A psql session holding the grid-wide write lock shared, as a write
    /// ordered by its rows does: writes that take it exclusively wait until
    /// the guard is dropped, those ordered by rows do not.
    pub fn lock_shared(&self) -> PgLock {
        self.hold(format!("BEGIN;\nSELECT pg_advisory_xact_lock_shared({WRITE_LOCK});\n"))
    }

    /// Runs `script` (which takes locks in a transaction left open) in a psql
    /// session kept until the guard is dropped.
    fn hold(&self, mut script: String) -> PgLock {
        use std::io::{BufRead, Write};
        let mut child = Command::new("psql")
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", &self.url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("psql could not be run: {e}"));
        script.push_str("\\echo locked\n");
        let mut stdin = child.stdin.take().expect("piped stdin");
        stdin.write_all(script.as_bytes()).expect("write to psql");
        stdin.flush().expect("flush psql");
        let mut lines = std::io::BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        loop {
            match lines.next() {
                Some(Ok(l)) if l.trim() == "locked" => break,
                Some(Ok(_)) => continue,
                other => panic!("psql did not take the locks: {other:?}"),
            }
        }
        PgLock { child, _stdin: stdin }
    }
}

/// A psql session holding locks; killing it ends its transaction.
pub struct PgLock {
    child: std::process::Child,
    _stdin: std::process::ChildStdin,
}

impl Drop for PgLock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args(["-X", "-q", "-d", &self.admin_url, "-c"])
            .arg(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name))
            .stdin(Stdio::null())
            .output();
    }
}

/// How psql prints fields apart and NULL, so neither is mistaken for data.
const FIELD_SEP: char = '\u{1f}';
const NULL: &str = "\u{1e}NULL";

/// `psql -At` of one command; panics with what failed.
fn psql(url: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql])
        .arg("-F")
        .arg(FIELD_SEP.to_string())
        .args(["-P", &format!("null={NULL}")])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("psql (Debian package postgresql-client) could not be run: {e}"));
    if !out.status.success() {
        panic!("psql {sql:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}
