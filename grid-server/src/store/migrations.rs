//! The store's schema as one list of steps, each with its body per
//! dialect side by side (`STEPS`). A step one dialect does not need has an
//! empty body there, saying why. Each step runs once, in order; a released
//! step is never edited, only followed by another.
//!
//! A database counts the steps it has applied: SQLite in `PRAGMA
//! user_version`, PostgreSQL in the one row of `schema_version`. Every
//! pending step runs in one transaction with the new count, so a database
//! holds either a count this list wrote (0, or at least `FIRST_COUNT`) or
//! one the two lists before it wrote: SQLite's 21 steps and PostgreSQL's
//! 16, numbered apart. Each of those was this list's non-empty bodies of
//! its dialect, in this order, so the old count `n` is the step holding the
//! `n`-th such body (`applied`), and the next open carries on from there.
//!
//! The bodies are the files of `migrations/`, named for the step they
//! belong to: `NN_name.sqlite.sql` and `NN_name.postgres.sql`, `NN` the
//! step's place in this list.

use super::sql::Dialect;
use super::{StoreError, StoreResult};

/// One step of the schema: its name, and what it runs on each dialect.
pub struct Step {
    pub name: &'static str,
    pub sqlite: Body,
    pub postgres: Body,
}

/// What a step runs on one dialect.
pub enum Body {
    Sql(&'static str),
    /// Nothing to run on this dialect, and why.
    Empty(&'static str),
}

use Body::{Empty, Sql};

/// PostgreSQL's first step was written after SQLite's ninth and holds it.
const IN_POSTGRES_FIRST: &str = "PostgreSQL's first step was written after this one and holds it";

/// Every step of the schema, in order.
pub const STEPS: &[Step] = &[
    Step {
        name: "base",
        sqlite: Sql(include_str!("migrations/01_base.sqlite.sql")),
        postgres: Sql(include_str!("migrations/01_base.postgres.sql")),
    },
    Step {
        name: "jobs",
        sqlite: Sql(include_str!("migrations/02_jobs.sqlite.sql")),
        postgres: Empty(IN_POSTGRES_FIRST),
    },
    Step {
        name: "identities",
        sqlite: Sql(include_str!("migrations/03_identities.sqlite.sql")),
        postgres: Empty(IN_POSTGRES_FIRST),
    },
    Step {
        name: "sessions",
        sqlite: Sql(include_str!("migrations/04_sessions.sqlite.sql")),
        postgres: Empty(IN_POSTGRES_FIRST),
    },
    Step {
        name: "inline_artifacts",
        sqlite: Sql(include_str!("migrations/05_inline_artifacts.sqlite.sql")),
        postgres: Empty(IN_POSTGRES_FIRST),
    },
    Step {
        name: "idempotency_keys",
        sqlite: Sql(include_str!("migrations/06_idempotency_keys.sqlite.sql")),
        postgres: Empty(IN_POSTGRES_FIRST),
    },
    Step {
        name: "due_times",
        sqlite: Sql(include_str!("migrations/07_due_times.sqlite.sql")),
        postgres: Empty(IN_POSTGRES_FIRST),
    },
    Step {
        name: "key_rate_limits",
        sqlite: Sql(include_str!("migrations/08_key_rate_limits.sqlite.sql")),
        postgres: Empty(IN_POSTGRES_FIRST),
    },
    Step {
        name: "inline_logs",
        sqlite: Sql(include_str!("migrations/09_inline_logs.sqlite.sql")),
        postgres: Empty(IN_POSTGRES_FIRST),
    },
    Step {
        name: "nodes",
        sqlite: Sql(include_str!("migrations/10_nodes.sqlite.sql")),
        postgres: Sql(include_str!("migrations/10_nodes.postgres.sql")),
    },
    Step {
        name: "placement",
        sqlite: Sql(include_str!("migrations/11_placement.sqlite.sql")),
        postgres: Sql(include_str!("migrations/11_placement.postgres.sql")),
    },
    Step {
        name: "queue_indexes",
        sqlite: Sql(include_str!("migrations/12_queue_indexes.sqlite.sql")),
        postgres: Sql(include_str!("migrations/12_queue_indexes.postgres.sql")),
    },
    Step {
        name: "daily_use_index",
        sqlite: Sql(include_str!("migrations/13_daily_use_index.sqlite.sql")),
        postgres: Sql(include_str!("migrations/13_daily_use_index.postgres.sql")),
    },
    Step {
        name: "balances",
        sqlite: Sql(include_str!("migrations/14_balances.sqlite.sql")),
        postgres: Sql(include_str!("migrations/14_balances.postgres.sql")),
    },
    Step {
        name: "attended_batches",
        sqlite: Sql(include_str!("migrations/15_attended_batches.sqlite.sql")),
        postgres: Sql(include_str!("migrations/15_attended_batches.postgres.sql")),
    },
    Step {
        name: "contexts",
        sqlite: Sql(include_str!("migrations/16_contexts.sqlite.sql")),
        postgres: Sql(include_str!("migrations/16_contexts.postgres.sql")),
    },
    Step {
        name: "proxies",
        sqlite: Sql(include_str!("migrations/17_proxies.sqlite.sql")),
        postgres: Sql(include_str!("migrations/17_proxies.postgres.sql")),
    },
    Step {
        name: "balance_shards",
        sqlite: Sql(include_str!("migrations/18_balance_shards.sqlite.sql")),
        postgres: Sql(include_str!("migrations/18_balance_shards.postgres.sql")),
    },
    Step {
        name: "batch_item_ranges",
        sqlite: Sql(include_str!("migrations/19_batch_item_ranges.sqlite.sql")),
        postgres: Empty("PostgreSQL dropped items_by_batch with the fewer_index_entries step, as its batches' ranges"),
    },
    Step {
        name: "hot_references",
        sqlite: Empty("SQLite's one writer checks a foreign key without locking the referenced row"),
        postgres: Sql(include_str!("migrations/20_hot_references.postgres.sql")),
    },
    Step {
        name: "fewer_index_entries",
        sqlite: Empty("SQLite keeps items' seq and the ledger's id in the rowid, which costs no index entry"),
        postgres: Sql(include_str!("migrations/21_fewer_index_entries.postgres.sql")),
    },
    Step {
        name: "byte_order_text",
        sqlite: Empty("SQLite's text columns compare as bytes (BINARY) from the start"),
        postgres: Sql(include_str!("migrations/22_byte_order_text.postgres.sql")),
    },
    Step {
        name: "items_fillfactor",
        sqlite: Empty("SQLite updates rows in place; it has no fillfactor"),
        postgres: Sql(include_str!("migrations/23_items_fillfactor.postgres.sql")),
    },
    Step {
        name: "meta_beside",
        sqlite: Sql(include_str!("migrations/24_meta_beside.sqlite.sql")),
        postgres: Sql(include_str!("migrations/24_meta_beside.postgres.sql")),
    },
    Step {
        name: "fair_share",
        sqlite: Sql(include_str!("migrations/25_fair_share.sqlite.sql")),
        postgres: Sql(include_str!("migrations/25_fair_share.postgres.sql")),
    },
];

/// The count a database holds once every step ran: `STEPS.len()`.
pub const LATEST: usize = STEPS.len();

/// The least count this list writes besides 0: every step the two lists
/// before it knew. Any count below it (and above 0) was written by them.
pub const FIRST_COUNT: usize = 25;
const _: () = assert!(LATEST >= FIRST_COUNT);

impl Step {
    pub fn body(&self, dialect: Dialect) -> &Body {
        match dialect {
            Dialect::Sqlite => &self.sqlite,
            Dialect::Postgres => &self.postgres,
        }
    }
}

/// How many of `STEPS` a database has applied, from the count it holds
/// (`user_version`, `schema_version`). A count of the old lists is
/// translated; one beyond this list is a newer server's database.
pub fn applied(dialect: Dialect, count: i64) -> StoreResult<usize> {
    let count = usize::try_from(count).map_err(|_| StoreError::Invalid(format!("schema count {count} is negative")))?;
    if count > LATEST {
        return Err(StoreError::Invalid(format!(
            "the database was written by a newer grid-server (schema {count}, this one knows {LATEST})"
        )));
    }
    if count == 0 || count >= FIRST_COUNT {
        return Ok(count);
    }
    // The old list's `count`-th step is this list's `count`-th non-empty body.
    let mut bodies = STEPS.iter().enumerate().filter(|(_, s)| matches!(s.body(dialect), Sql(_)));
    match bodies.nth(count - 1) {
        Some((i, _)) => Ok(i + 1),
        None => Err(StoreError::Invalid(format!("schema count {count} is not one this or an older server wrote"))),
    }
}

/// The SQL of every step after the first `applied`, for `dialect`, in
/// order: one batch, run in the transaction that writes the new count.
pub fn pending(dialect: Dialect, applied: usize) -> String {
    let mut sql = String::new();
    for step in &STEPS[applied.min(LATEST)..] {
        if let Sql(body) = step.body(dialect) {
            // Right after the body, as the old runners ran it: SQLite keeps a
            // statement's text as written, up to its semicolon.
            sql.push_str(body);
            sql.push_str(";\n");
        }
    }
    sql
}

/// Says which steps after the first `applied` ran on `dialect`: one line
/// naming them, and one per step with nothing to run there, saying why.
pub fn log_ran(dialect: Dialect, applied: usize) {
    let mut ran = vec![];
    for (i, step) in STEPS.iter().enumerate().skip(applied) {
        match step.body(dialect) {
            Sql(_) => ran.push(step.name),
            Empty(why) => tracing::debug!(step = i + 1, name = step.name, why, "schema step with nothing to run here"),
        }
    }
    tracing::info!(from = applied, to = LATEST, steps = %ran.join(", "), "schema migrated");
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::postgres::TestDatabase;
    use crate::store::Store;

    /// The old lists, as the non-empty bodies of each dialect in order:
    /// 21 on SQLite and 16 on PostgreSQL, what `user_version` and
    /// `schema_version` counted up to before this list.
    pub(crate) fn old_list(dialect: Dialect) -> Vec<&'static str> {
        STEPS
            .iter()
            .filter_map(|s| match s.body(dialect) {
                Sql(body) => Some(*body),
                Empty(_) => None,
            })
            .collect()
    }

    #[test]
    fn the_old_lists_are_the_non_empty_bodies_and_their_last_counts_translate_to_the_latest() {
        assert_eq!(old_list(Dialect::Sqlite).len(), 21);
        assert_eq!(old_list(Dialect::Postgres).len(), 16);
        // Both old lists' last counts are every step they knew: FIRST_COUNT.
        assert_eq!(applied(Dialect::Sqlite, 21).unwrap(), FIRST_COUNT);
        assert_eq!(applied(Dialect::Postgres, 16).unwrap(), FIRST_COUNT);
        // SQLite's old 19 (batch_item_ranges) is step 19; its 20 (meta_beside) step 24.
        assert_eq!(applied(Dialect::Sqlite, 19).unwrap(), 19);
        assert_eq!(applied(Dialect::Sqlite, 20).unwrap(), 24);
        // PostgreSQL's old 1 is the base, its 2 (nodes) step 10, its 11 (hot_references) step 20.
        assert_eq!(applied(Dialect::Postgres, 1).unwrap(), 1);
        assert_eq!(applied(Dialect::Postgres, 2).unwrap(), 10);
        assert_eq!(applied(Dialect::Postgres, 11).unwrap(), 20);
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            assert_eq!(applied(dialect, 0).unwrap(), 0);
            assert_eq!(applied(dialect, LATEST as i64).unwrap(), LATEST);
            let newer = applied(dialect, LATEST as i64 + 1).unwrap_err().to_string();
            assert!(newer.contains("newer grid-server"), "{newer}");
        }
    }

    #[test]
    fn every_step_has_a_name_of_its_own_and_every_empty_body_says_why() {
        let mut names: Vec<&str> = STEPS.iter().map(|s| s.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), LATEST, "two steps share a name");
        for step in STEPS {
            for body in [&step.sqlite, &step.postgres] {
                match body {
                    Sql(sql) => assert!(!sql.trim().is_empty(), "step {}: an empty SQL body", step.name),
                    Empty(why) => assert!(why.len() > 20, "step {}: say why it is empty", step.name),
                }
            }
            assert!(
                matches!(step.sqlite, Sql(_)) || matches!(step.postgres, Sql(_)),
                "step {}: runs nothing anywhere",
                step.name
            );
        }
    }

    /// The schema a database holds, one line per table, column, index,
    /// constraint and view, each with its whole definition, in name order:
    /// on SQLite `sqlite_master`'s text; on PostgreSQL the catalogs'
    /// (columns with type, nullability, default, collation and storage;
    /// tables with their storage options). Counts of applied steps are not
    /// in it: the old lists counted otherwise.
    pub(crate) fn schema_of(store: &Store) -> String {
        let lines = store
            .read_blocking(|c| {
                let queries: &[&str] = match c.dialect() {
                    Dialect::Sqlite => &[SQLITE_SCHEMA],
                    Dialect::Postgres => &POSTGRES_SCHEMA,
                };
                let mut lines = vec![];
                for q in queries {
                    lines.extend(c.query_map(q, (), |r| r.get::<String>(0))?);
                }
                Ok(lines)
            })
            .unwrap();
        lines.join("\n") + "\n"
    }

    const SQLITE_SCHEMA: &str = "SELECT type || ' ' || name || ' on ' || tbl_name || ': ' || coalesce(sql, '') \
         FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name";

    const POSTGRES_SCHEMA: [&str; 5] = [
        "SELECT 'relation ' || c.relname || ' kind ' || c.relkind::text \
           || coalesce(' with ' || array_to_string(c.reloptions, ','), '') \
         FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'v', 'p', 'S') \
         ORDER BY 1",
        "SELECT 'column ' || c.relname || '.' || a.attname || ' #' || a.attnum || ' ' \
           || format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END \
           || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '') \
           || coalesce(' collate ' || co.collname::text, '') || ' storage ' || a.attstorage::text \
         FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
         LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
         LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0 \
         WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'v', 'p') \
           AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1",
        "SELECT 'index ' || indexname || ': ' || indexdef FROM pg_indexes \
         WHERE schemaname = current_schema() ORDER BY 1",
        "SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ': ' || pg_get_constraintdef(oid) \
         FROM pg_constraint WHERE connamespace = current_schema()::regnamespace ORDER BY 1",
        "SELECT 'view ' || viewname || ': ' || definition FROM pg_views WHERE schemaname = current_schema() \
         ORDER BY 1",
    ];

    /// The schema every step reaches on `dialect`, as `schema_of` reads it:
    /// recorded from the two lists this one replaced, so a fresh database
    /// reaching it reaches the schema they did. A change of schema (a new
    /// step) records it anew: run the migration tests with
    /// `GRID_RECORD_SCHEMA=1` and read the difference in review.
    pub(crate) fn check_schema(dialect: Dialect, store: &Store) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(match dialect {
            Dialect::Sqlite => "src/store/migrated_schema.sqlite.txt",
            Dialect::Postgres => "src/store/migrated_schema.postgres.txt",
        });
        let found = schema_of(store);
        if std::env::var_os("GRID_RECORD_SCHEMA").is_some() {
            std::fs::write(&path, &found).unwrap();
        }
        let recorded = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (found_lines, recorded_lines): (Vec<&str>, Vec<&str>) =
            (found.lines().collect(), recorded.lines().collect());
        let missing: Vec<&&str> = recorded_lines.iter().filter(|l| !found_lines.contains(l)).collect();
        let extra: Vec<&&str> = found_lines.iter().filter(|l| !recorded_lines.contains(l)).collect();
        assert!(
            missing.is_empty() && extra.is_empty() && found == recorded,
            "{dialect:?}: the migrated schema differs from {}:\nrecorded, not found: {missing:#?}\nfound, not recorded: {extra:#?}",
            path.display()
        );
    }

    #[test]
    fn a_fresh_sqlite_database_reaches_the_recorded_schema() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Duration::from_secs(5)).unwrap();
        check_schema(Dialect::Sqlite, &store);
    }

    #[test]
    fn a_fresh_postgres_database_reaches_the_recorded_schema() {
        let db = TestDatabase::create();
        let store = Store::connect(&db.url, Duration::from_secs(5)).unwrap();
        check_schema(Dialect::Postgres, &store);
    }

    /// A SQLite database in `dir` as the old list left it at `count`: its
    /// first `count` steps, each run as the old runner ran it.
    fn sqlite_at_old_count(dir: &std::path::Path, count: usize) {
        let conn = rusqlite::Connection::open(dir.join(crate::store::sqlite::DB_FILE)).unwrap();
        for (i, sql) in old_list(Dialect::Sqlite).iter().take(count).enumerate() {
            let step = i + 1;
            conn.execute_batch(&format!("BEGIN IMMEDIATE; {sql}; PRAGMA user_version = {step}; COMMIT;")).unwrap();
        }
    }

    /// The same on PostgreSQL, counted in `schema_version`.
    fn postgres_at_old_count(url: &str, count: usize) {
        TestDatabase::admin(
            url,
            "CREATE TABLE schema_version (version BIGINT NOT NULL); INSERT INTO schema_version VALUES (0)",
        );
        for (i, sql) in old_list(Dialect::Postgres).iter().take(count).enumerate() {
            let step = i + 1;
            TestDatabase::admin(url, &format!("BEGIN; {sql}; UPDATE schema_version SET version = {step}; COMMIT;"));
        }
    }

    fn count_of(store: &Store) -> i64 {
        store
            .read_blocking(|c| {
                let sql = match c.dialect() {
                    Dialect::Sqlite => "PRAGMA user_version",
                    Dialect::Postgres => "SELECT version FROM schema_version",
                };
                c.query_row(sql, (), |r| r.get(0))
            })
            .unwrap()
    }

    #[test]
    fn a_sqlite_database_at_every_old_count_migrates_to_the_recorded_schema() {
        for count in 0..=old_list(Dialect::Sqlite).len() {
            let dir = tempfile::tempdir().unwrap();
            sqlite_at_old_count(dir.path(), count);
            let store = Store::open(dir.path(), Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("opening at old count {count}: {e}"));
            assert_eq!(count_of(&store), LATEST as i64, "from old count {count}");
            check_schema(Dialect::Sqlite, &store);
        }
    }

    #[test]
    fn a_postgres_database_at_old_counts_migrates_to_the_recorded_schema() {
        // Each count a database of its own: the base alone, the last step
        // both old lists shared, the first and last of PostgreSQL's own, the
        // one after them (0 is a fresh one's, the last count has its own test).
        for count in [1, 10, 11, 14, 15] {
            let db = TestDatabase::create();
            postgres_at_old_count(&db.url, count);
            let store = Store::connect(&db.url, Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("opening at old count {count}: {e}"));
            assert_eq!(count_of(&store), LATEST as i64, "from old count {count}");
            check_schema(Dialect::Postgres, &store);
        }
    }

    /// Every row of every table but the step count's, each as its debug
    /// text, sorted.
    fn rows_of(store: &Store) -> Vec<String> {
        store
            .read_blocking(|c| {
                let (tables, select): (&str, fn(&str) -> String) = match c.dialect() {
                    Dialect::Sqlite => {
                        ("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'", |t| {
                            format!("SELECT * FROM {t}")
                        })
                    }
                    Dialect::Postgres => (
                        "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() \
                         AND tablename <> 'schema_version'",
                        |t| format!("SELECT x::text FROM {t} x"),
                    ),
                };
                let mut rows = vec![];
                for t in c.query_map(tables, (), |r| r.get::<String>(0))? {
                    rows.extend(c.query_values(&select(&t), vec![])?.iter().map(|r| format!("{t}: {r:?}")));
                }
                rows.sort();
                Ok(rows)
            })
            .unwrap()
    }

    /// Accounts, keys, a batch of items with their reservation, and a
    /// setting, written by the store itself.
    fn some_data(store: &Store) {
        use crate::store::items::tests::{caller, submit};
        let c = caller(store, 10_000, Some(5_000));
        submit(store, &c, 3, None).unwrap();
        store.write_blocking(|tx| crate::store::set_setting(tx, "download_signing_secret", "ab12")).unwrap();
    }

    /// The database a server before this list left at its last count (the
    /// same schema as now: `check_schema` of both) opens with this one, its
    /// count this list's and not a row changed.
    fn reopens_unchanged(store: Store, old_count: usize, reopen: impl Fn() -> Store) {
        let dialect = store.read_blocking(|c| Ok(c.dialect())).unwrap();
        some_data(&store);
        let set_count = match dialect {
            Dialect::Sqlite => format!("PRAGMA user_version = {old_count}"),
            Dialect::Postgres => format!("UPDATE schema_version SET version = {old_count}"),
        };
        store.write_blocking(|tx| tx.execute(&set_count, ())).unwrap();
        assert_eq!(count_of(&store), old_count as i64);
        let before = rows_of(&store);
        assert!(before.len() > 10, "{before:#?}");
        drop(store);
        let store = reopen();
        assert_eq!(count_of(&store), LATEST as i64);
        assert_eq!(rows_of(&store), before);
        check_schema(dialect, &store);
    }

    #[test]
    fn a_sqlite_database_at_the_old_last_count_opens_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let open = || Store::open(dir.path(), Duration::from_secs(5)).unwrap();
        reopens_unchanged(open(), old_list(Dialect::Sqlite).len(), open);
    }

    #[test]
    fn a_postgres_database_at_the_old_last_count_opens_unchanged() {
        let db = TestDatabase::create();
        let open = || Store::connect(&db.url, Duration::from_secs(5)).unwrap();
        reopens_unchanged(open(), old_list(Dialect::Postgres).len(), open);
    }
}
