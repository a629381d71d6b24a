//! Schema parity of the two stores (issue 26): the migration steps
//! (grid-server/src/store/migrations.rs, each with a SQLite body,
//! migrations/NN_step.sqlite.sql, counted in `PRAGMA user_version`, and a
//! PostgreSQL one, NN_step.postgres.sql, counted in `schema_version`) must
//! end in the same schema
//! on both, since one SQL text of the store modules serves both.
//!
//! A real grid-server is started on each store (each migrates at open) and
//! its schema read back from the database: on SQLite from `sqlite_master`
//! and the `pragma_table_info`, `pragma_index_list`, `pragma_index_info` and
//! `pragma_foreign_key_list` functions; on PostgreSQL from
//! `information_schema.columns` and the catalogs `pg_constraint` and
//! `pg_index`. Each schema is flattened into facts, one per line, keyed by
//! what they are about:
//!
//! - `table T`
//! - `column T.C`: normalized type, nullability, position in the primary
//!   key, default
//! - `primary key T (C, ..)`, `unique T (C, ..)`: constraints, whatever the
//!   name of the index behind them
//! - `foreign key T (C, ..)`: the referenced table and columns, ON UPDATE
//!   and ON DELETE actions
//! - `index I`: table, columns in order, unique or not, and the partial
//!   index's WHERE, normalized (indexes made by CREATE INDEX; those behind a
//!   constraint are the constraint's fact)
//! - `view V`: its columns in order (`sqlite_master` and
//!   `pragma_table_info`; `information_schema.tables` and `.columns`)
//!
//! Every fact on one side only, and every fact whose value differs, is
//! printed at once; the test fails unless each is in `ALLOWED`.
//!
//! The dialect differences that are not differences, applied as the facts
//! are read (see `sqlite_type`, `postgres_type`, `sqlite_facts`, `postgres_facts` and
//! `predicate`):
//!
//! 1. Types by SQLite's affinity: INTEGER is PostgreSQL's BIGINT (both 64
//!    bits; PostgreSQL's INTEGER and SMALLINT are narrower and stay apart);
//!    TEXT is TEXT, VARCHAR or CHAR; BLOB is BYTEA; REAL is REAL or DOUBLE
//!    PRECISION. Booleans are integers 0/1 on both (migrations/01_base.postgres.sql).
//! 2. SQLite's `INTEGER PRIMARY KEY AUTOINCREMENT` (the rowid, never
//!    reused) is PostgreSQL's BIGSERIAL: both read as default `serial`. An
//!    INTEGER PRIMARY KEY without AUTOINCREMENT (ids of deleted rows reused)
//!    reads as `rowid` and differs.
//! 3. A primary-key column is NOT NULL on SQLite too: SQLite lets NULL into
//!    a non-INTEGER primary key of a rowid table (a documented quirk kept for
//!    compatibility), PostgreSQL never; the store never writes one.
//! 4. Casts PostgreSQL adds when it prints a default or an index predicate
//!    (`'{}'::text`) are dropped, its `x = ANY (ARRAY[a, b])` is read as
//!    `x IN (a, b)`, and whitespace and enclosing parentheses do not count.
//! 5. Tables of SQLite's own (`sqlite_%`: `sqlite_sequence`, AUTOINCREMENT's
//!    counters) are not the store's and are not read; nor are `WITHOUT
//!    ROWID` (a SQLite storage choice) and PostgreSQL's column storage modes.
//!
//! Not compared: CHECK constraints (SQLite keeps them only in the CREATE
//! TABLE text), column order (ALTER TABLE appends on SQLite while
//! PostgreSQL's first step declares later columns inline; the store names
//! every column) and index sort order. Collations are checked on their own:
//! every text column of PostgreSQL's compares as bytes (`COLLATE "C"`), as
//! every one of SQLite's does.
//!
//! Needs both stores, so it runs in scripts/test.sh's first pass only
//! (SQLite, with `GRID_TEST_DATABASE_URL` set).
//!
//! Runs on: one store, because it compares both stores in either pass.

use std::collections::{BTreeMap, BTreeSet};

use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::store::on_postgres;
use grid_tests::stored::Row;

/// Differences that are allowed: (the difference as printed, why). Every
/// entry must still be found, so the list does not outlive its reason.
/// A real drift that needs a migration to fix would be listed here with a
/// reason starting "DRIFT:".
const ALLOWED: &[(&str, &str)] = &[
    (
        "table schema_version: postgres only",
        "PostgreSQL's count of applied migration steps (store/migrations.rs); SQLite's is PRAGMA user_version",
    ),
    // Schema step 20, PostgreSQL's only (`hot_references`): there each
    // check locked the referenced row, once per file, charge and item.
    ("foreign key artifacts (item_id): sqlite only", "not checked on PostgreSQL's hot inserts (schema step 20, `hot_references`)"),
    ("foreign key items (batch_id): sqlite only", "not checked on PostgreSQL's hot inserts (schema step 20, `hot_references`)"),
    ("foreign key ledger (account_id): sqlite only", "not checked on PostgreSQL's hot inserts (schema step 20, `hot_references`)"),
    // Schema step 21, PostgreSQL's only (`fewer_index_entries`): one
    // index fewer on each of `items` and `ledger`, whose keys SQLite keeps
    // in the rowid.
    ("column items.id: sqlite `text not null`, postgres `text not null primary key #1`", WHY_ITEMS),
    ("column items.seq: sqlite `integer not null primary key #1 default serial`, postgres `integer not null default serial`", WHY_ITEMS),
    ("primary key items (id): postgres only", WHY_ITEMS),
    ("primary key items (seq): sqlite only", WHY_ITEMS),
    ("unique items (id): sqlite only", WHY_ITEMS),
    ("column ledger.account_id: sqlite `text not null`, postgres `text not null primary key #1`", WHY_LEDGER),
    ("column ledger.id: sqlite `integer not null primary key #1 default serial`, postgres `integer not null primary key #2 default serial`", WHY_LEDGER),
    ("index ledger_pages: sqlite only", WHY_LEDGER),
    ("primary key ledger (account_id, id): postgres only", WHY_LEDGER),
    ("primary key ledger (id): sqlite only", WHY_LEDGER),
];

const WHY_ITEMS: &str = "PostgreSQL finds an item by its id (schema step 21: no index entry per write for seq); on SQLite seq is the rowid, which costs none";
const WHY_LEDGER: &str = "PostgreSQL's ledger is keyed by the pages' index (schema step 21: one index where there were two); on SQLite id is the rowid and ledger_pages the one index";

/// A schema as facts: what each is about -> its value.
type Facts = BTreeMap<String, String>;

fn text(row: &[Option<String>], i: usize) -> String {
    row[i].clone().unwrap_or_default()
}

/// SQLite's declared type by its affinity rules (sqlite.org/datatype3.html,
/// 3.1), booleans aside.
fn sqlite_type(declared: &str) -> String {
    let t = declared.to_ascii_uppercase();
    if t == "BOOLEAN" || t == "BOOL" {
        "boolean"
    } else if t.contains("INT") {
        "integer"
    } else if t.contains("CHAR") || t.contains("CLOB") || t.contains("TEXT") {
        "text"
    } else if t.is_empty() || t.contains("BLOB") {
        "blob"
    } else if t.contains("REAL") || t.contains("FLOA") || t.contains("DOUB") {
        "real"
    } else {
        "numeric"
    }
    .to_string()
}

/// PostgreSQL's `information_schema.columns.data_type` in the same terms.
fn postgres_type(data_type: &str) -> String {
    match data_type {
        "bigint" => "integer",
        // Narrower than SQLite's 64-bit INTEGER: a value the SQLite store
        // keeps would overflow.
        "integer" => "integer (32 bits)",
        "smallint" => "integer (16 bits)",
        "text" | "character varying" | "character" => "text",
        "bytea" => "blob",
        "real" | "double precision" => "real",
        "numeric" => "numeric",
        "boolean" => "boolean",
        other => other,
    }
    .to_string()
}

/// Drops the casts PostgreSQL prints (`'{}'::text`, `'a'::character varying`).
fn strip_casts(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("::") {
        out.push_str(&rest[..at]);
        rest = &rest[at + 2..];
        let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        rest = &rest[end..];
        for tail in [" varying", " precision"] {
            if let Some(r) = rest.strip_prefix(tail) {
                rest = r;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Whether `s` is one parenthesized expression: `(a) AND (b)` is not.
fn enclosed(s: &str) -> bool {
    if !(s.starts_with('(') && s.ends_with(')')) {
        return false;
    }
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 && i != s.len() - 1 {
                    return false;
                }
            }
            _ => {}
        }
    }
    true
}

/// A default or a partial index's WHERE, in one spelling for both stores.
fn predicate(s: &str) -> String {
    let s = strip_casts(s).replace("= ANY (ARRAY[", "IN (").replace("])", ")");
    // Whitespace outside string literals does not count.
    let mut out = String::new();
    let mut quoted = false;
    for c in s.chars() {
        if c == '\'' {
            quoted = !quoted;
        }
        if quoted || !c.is_whitespace() {
            out.push(c);
        } else if !out.ends_with(' ') {
            out.push(' ');
        }
    }
    // One spelling of spaces around punctuation: none.
    let mut s = out.trim().replace("( ", "(").replace(" )", ")").replace(", ", ",").replace(" ,", ",");
    while enclosed(&s) {
        s = s[1..s.len() - 1].trim().to_string();
    }
    s
}

fn column_fact(ty: &str, not_null: bool, pk: usize, default: Option<&str>) -> String {
    let mut v = format!("{ty} {}", if not_null { "not null" } else { "null" });
    if pk > 0 {
        v.push_str(&format!(" primary key #{pk}"));
    }
    if let Some(d) = default {
        v.push_str(&format!(" default {d}"));
    }
    v
}

fn sqlite_facts(server: &GridServer) -> Facts {
    let stored = server.stored();
    let mut facts = Facts::new();
    let tables: Vec<Row> = stored
        .catalog("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name");
    for table in &tables {
        let (t, create) = (text(table, 0), text(table, 1));
        facts.insert(format!("table {t}"), String::new());
        let autoincrement = create.to_ascii_uppercase().contains("AUTOINCREMENT");
        let columns = stored.catalog(&format!(
            "SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info('{t}') ORDER BY cid"
        ));
        let pk_columns = columns.iter().filter(|c| text(c, 4) != "0").count();
        let mut pk: BTreeMap<usize, String> = BTreeMap::new();
        for c in &columns {
            let name = text(c, 0);
            let ty = sqlite_type(&text(c, 1));
            let pk_pos: usize = text(c, 4).parse().expect("pk position");
            // Rule 3: a primary-key column is NOT NULL.
            let not_null = text(c, 2) == "1" || pk_pos > 0;
            let mut default = c[3].as_deref().map(predicate);
            // Rule 2: the rowid.
            if pk_pos == 1 && pk_columns == 1 && text(c, 1).eq_ignore_ascii_case("INTEGER") {
                default = Some(if autoincrement { "serial" } else { "rowid" }.to_string());
            }
            if pk_pos > 0 {
                pk.insert(pk_pos, name.clone());
            }
            facts.insert(format!("column {t}.{name}"), column_fact(&ty, not_null, pk_pos, default.as_deref()));
        }
        if !pk.is_empty() {
            facts.insert(
                format!("primary key {t} ({})", pk.into_values().collect::<Vec<_>>().join(", ")),
                String::new(),
            );
        }
        for index in stored.catalog(&format!("SELECT name, \"unique\", origin, partial FROM pragma_index_list('{t}')"))
        {
            let name = text(&index, 0);
            let columns: Vec<String> = stored
                .catalog(&format!("SELECT name FROM pragma_index_info('{name}') ORDER BY seqno"))
                .iter()
                .map(|r| r[0].clone().unwrap_or_else(|| "<expression>".to_string()))
                .collect();
            let columns = columns.join(", ");
            match text(&index, 2).as_str() {
                // The index behind the primary key: its fact is above.
                "pk" => {}
                "u" => {
                    facts.insert(format!("unique {t} ({columns})"), String::new());
                }
                _ => {
                    let rows = stored.catalog(&format!("SELECT sql FROM sqlite_master WHERE name = '{name}'"));
                    let sql = rows
                        .first()
                        .map(|r| text(r, 0))
                        .unwrap_or_else(|| server.fail(&format!("index {name}: not in sqlite_master")));
                    let upper = sql.to_ascii_uppercase();
                    let mut v = format!("on {t} ({columns})");
                    if text(&index, 1) == "1" {
                        v.push_str(" unique");
                    }
                    if text(&index, 3) == "1" {
                        let at = upper.find(" WHERE ").or_else(|| upper.find("\nWHERE ")).expect("partial index WHERE");
                        v.push_str(&format!(" where {}", predicate(&sql[at + 7..])));
                    }
                    facts.insert(format!("index {name}"), v);
                }
            }
        }
        let mut fks: BTreeMap<String, (Vec<String>, String, Vec<String>, String)> = BTreeMap::new();
        for fk in stored.catalog(&format!(
            "SELECT id, \"table\", \"from\", \"to\", on_update, on_delete FROM pragma_foreign_key_list('{t}') ORDER BY id, seq"
        )) {
            let e = fks.entry(text(&fk, 0)).or_insert_with(|| {
                (Vec::new(), text(&fk, 1), Vec::new(), format!("on update {} on delete {}", text(&fk, 4), text(&fk, 5)))
            });
            e.0.push(text(&fk, 2));
            // NULL: the referenced table's primary key (one column here).
            e.2.push(fk[3].clone().unwrap_or_else(|| "<primary key>".to_string()));
        }
        for (from, to_table, to, actions) in fks.into_values() {
            facts.insert(
                format!("foreign key {t} ({})", from.join(", ")),
                format!("references {to_table} ({}) {actions}", to.join(", ")),
            );
        }
    }
    // Views, with their columns in order.
    for view in stored.catalog("SELECT name FROM sqlite_master WHERE type = 'view' ORDER BY name") {
        let v = text(&view, 0);
        let columns: Vec<String> = stored
            .catalog(&format!("SELECT name FROM pragma_table_info('{v}') ORDER BY cid"))
            .iter()
            .map(|r| text(r, 0))
            .collect();
        facts.insert(format!("view {v}"), format!("({})", columns.join(", ")));
    }
    facts
}

fn postgres_facts(server: &GridServer) -> Facts {
    let stored = server.stored();
    let mut facts = Facts::new();
    for table in stored.catalog(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'",
    ) {
        facts.insert(format!("table {}", text(&table, 0)), String::new());
    }
    // Constraints, with their columns in key order.
    let cols = |rel: &str, keys: &str| {
        format!(
            "(SELECT string_agg(a.attname, ', ' ORDER BY k.ord) FROM unnest(c.{keys}) WITH ORDINALITY AS k(att, ord) \
             JOIN pg_attribute a ON a.attrelid = c.{rel} AND a.attnum = k.att)"
        )
    };
    let constraints = stored.catalog(&format!(
        "SELECT c.contype, c.conrelid::regclass::text, {}, c.confrelid::regclass::text, {}, c.confupdtype, c.confdeltype \
         FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace \
         WHERE n.nspname = 'public' AND c.contype IN ('p', 'u', 'f')",
        cols("conrelid", "conkey"),
        cols("confrelid", "confkey"),
    ));
    let action = |code: &str| match code {
        "a" => "NO ACTION",
        "r" => "RESTRICT",
        "c" => "CASCADE",
        "n" => "SET NULL",
        "d" => "SET DEFAULT",
        _ => "?",
    };
    let mut pk: BTreeMap<(String, String), usize> = BTreeMap::new();
    for c in &constraints {
        let (t, columns) = (text(c, 1), text(c, 2));
        match text(c, 0).as_str() {
            "p" => {
                for (i, col) in columns.split(", ").enumerate() {
                    pk.insert((t.clone(), col.to_string()), i + 1);
                }
                facts.insert(format!("primary key {t} ({columns})"), String::new());
            }
            "u" => {
                facts.insert(format!("unique {t} ({columns})"), String::new());
            }
            _ => {
                facts.insert(
                    format!("foreign key {t} ({columns})"),
                    format!(
                        "references {} ({}) on update {} on delete {}",
                        text(c, 3),
                        text(c, 4),
                        action(&text(c, 5)),
                        action(&text(c, 6))
                    ),
                );
            }
        }
    }
    for c in stored.catalog(
        "SELECT c.table_name, c.column_name, c.data_type, c.is_nullable, c.column_default \
         FROM information_schema.columns c JOIN information_schema.tables t \
           ON t.table_schema = c.table_schema AND t.table_name = c.table_name \
         WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE'",
    ) {
        let (t, name) = (text(&c, 0), text(&c, 1));
        let pk_pos = pk.get(&(t.clone(), name.clone())).copied().unwrap_or(0);
        // Rule 2: BIGSERIAL.
        let default =
            c[4].as_deref().map(|d| if d.starts_with("nextval(") { "serial".to_string() } else { predicate(d) });
        facts.insert(
            format!("column {t}.{name}"),
            column_fact(&postgres_type(&text(&c, 2)), text(&c, 3) == "NO", pk_pos, default.as_deref()),
        );
    }
    // Views, with their columns in order.
    for v in stored.catalog(
        "SELECT t.table_name, string_agg(c.column_name, ', ' ORDER BY c.ordinal_position) \
         FROM information_schema.tables t JOIN information_schema.columns c \
           ON c.table_schema = t.table_schema AND c.table_name = t.table_name \
         WHERE t.table_schema = 'public' AND t.table_type = 'VIEW' GROUP BY t.table_name",
    ) {
        facts.insert(format!("view {}", text(&v, 0)), format!("({})", text(&v, 1)));
    }
    // Indexes not behind a constraint.
    for i in stored.catalog(
        "SELECT t.relname, i.relname, x.indisunique, \
         (SELECT string_agg(pg_get_indexdef(x.indexrelid, k, true), ', ' ORDER BY k) \
          FROM generate_series(1, x.indnkeyatts) AS k), \
         pg_get_expr(x.indpred, x.indrelid, true) \
         FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid \
         JOIN pg_namespace n ON n.oid = t.relnamespace \
         WHERE n.nspname = 'public' AND NOT EXISTS (SELECT 1 FROM pg_constraint c \
           WHERE c.conindid = x.indexrelid AND c.conrelid = x.indrelid AND c.contype IN ('p', 'u', 'x'))",
    ) {
        let mut v = format!("on {} ({})", text(&i, 0), text(&i, 3));
        if text(&i, 2) == "t" {
            v.push_str(" unique");
        }
        if let Some(pred) = &i[4] {
            v.push_str(&format!(" where {}", predicate(pred)));
        }
        facts.insert(format!("index {}", text(&i, 1)), v);
    }
    facts
}

/// The table a fact is about.
fn table_of<'a>(key: &'a str, value: &'a str) -> &'a str {
    let name = |s: &'a str| s.split([' ', '.']).next().unwrap_or(s);
    for prefix in ["table ", "column ", "primary key ", "unique ", "foreign key "] {
        if let Some(rest) = key.strip_prefix(prefix) {
            return name(rest);
        }
    }
    value.strip_prefix("on ").map(name).unwrap_or(key)
}

/// Every difference between the two, as one line each. A table on one side
/// only is one difference, not one per column, key and index of it.
fn differences(sqlite: &Facts, postgres: &Facts) -> Vec<String> {
    let keys: BTreeSet<&String> = sqlite.keys().chain(postgres.keys()).collect();
    let mut out = Vec::new();
    for key in keys {
        let value = sqlite.get(key).or(postgres.get(key)).map(String::as_str).unwrap_or_default();
        let table = format!("table {}", table_of(key, value));
        if *key != table && sqlite.contains_key(&table) != postgres.contains_key(&table) {
            continue;
        }
        match (sqlite.get(key), postgres.get(key)) {
            (Some(_), None) => out.push(format!("{key}: sqlite only")),
            (None, Some(_)) => out.push(format!("{key}: postgres only")),
            (Some(a), Some(b)) if a != b => out.push(format!("{key}: sqlite `{a}`, postgres `{b}`")),
            _ => {}
        }
    }
    out
}

#[test]
fn sqlite_and_postgres_migrate_to_the_same_schema() {
    assert!(
        !on_postgres(),
        "schema_parity compares SQLite with PostgreSQL: run it with GRID_TEST_STORE unset and \
         GRID_TEST_DATABASE_URL set (scripts/test.sh's first pass)"
    );
    let sqlite = GridServer::start(ServerOptions::default());
    let postgres = GridServer::start(ServerOptions { postgres: true, ..ServerOptions::default() });
    let (lite, pg) = (sqlite_facts(&sqlite), postgres_facts(&postgres));
    // The reading itself: tables, columns, keys and indexes were found.
    for (store, facts) in [("sqlite", &lite), ("postgres", &pg)] {
        for (kind, least) in [
            ("table ", 15),
            ("column ", 100),
            ("primary key ", 15),
            ("unique ", 3),
            ("foreign key ", 9),
            ("index ", 15),
            ("view ", 1),
        ] {
            let n = facts.keys().filter(|k| k.starts_with(kind)).count();
            assert!(n >= least, "{store}: {n} facts `{kind}..`, expected at least {least}: {facts:#?}");
        }
    }
    // Text compares as bytes on either store: SQLite's BINARY, PostgreSQL's
    // "C" (schema step 22), whatever the database's own collation.
    let by_locale = postgres.stored().catalog(
        "SELECT table_name || '.' || column_name || ' ' || coalesce(collation_name, '(the database''s)') \
         FROM information_schema.columns WHERE table_schema = 'public' AND data_type = 'text' \
         AND coalesce(collation_name, '') <> 'C' ORDER BY 1",
    );
    assert!(
        by_locale.is_empty(),
        "text columns on PostgreSQL that do not compare as bytes (declare them COLLATE \"C\"): {by_locale:?}"
    );
    let found = differences(&lite, &pg);
    let allowed: BTreeSet<&str> = ALLOWED.iter().map(|(d, _)| *d).collect();
    let unexpected: Vec<&String> = found.iter().filter(|d| !allowed.contains(d.as_str())).collect();
    let stale: Vec<&str> = allowed.iter().filter(|a| !found.iter().any(|d| d == *a)).copied().collect();
    assert!(
        unexpected.is_empty() && stale.is_empty(),
        "the schemas after migration differ.\n\ndifferences not in ALLOWED ({}):\n{}\n\nentries of ALLOWED no longer \
         found ({}):\n{}\n\n(every difference found: {found:#?})",
        unexpected.len(),
        unexpected.iter().map(|d| format!("  {d}")).collect::<Vec<_>>().join("\n"),
        stale.len(),
        stale.iter().map(|d| format!("  {d}")).collect::<Vec<_>>().join("\n"),
    );
}

#[test]
fn predicates_read_the_same_in_either_spelling() {
    assert_eq!(
        predicate("(kind = ANY (ARRAY['charge'::text, 'release'::text]))"),
        predicate("kind IN ('charge', 'release')")
    );
    assert_eq!(predicate("state = 'waiting'::text"), predicate("state = 'waiting'"));
    assert_eq!(predicate("'{}'::text"), "'{}'");
    assert_eq!(predicate("settlement_due IS NOT NULL"), "settlement_due IS NOT NULL");
    assert_ne!(predicate("(a) AND (b)"), "a) AND (b");
    assert_eq!(predicate("'a  b'::character varying"), "'a  b'");
}
