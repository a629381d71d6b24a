//! Capture batches, their items (the durable queue) and published files.
//!
//! Plain SQL over the caller's connection. An item's state changes only
//! through the item driver (`capture/driver.rs`): it loads the item here,
//! asks `grid_core::item::apply` and saves the result and its effects here.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use super::sql::{
    chunk_sql, chunks, placeholders, Conn, Dialect, ManyRows, Optional, ReadConn, Row, Statement, ToValue,
    Value as SqlValue,
};
use super::to_json;
use crate::params;
use grid_core::catalog::{ArtifactKind, Profile, Script};
use grid_core::error::ApiError;
use grid_core::ids;
use grid_core::item::{Item, ItemState, Settlement, TransitionError};
use grid_core::ledger::EntryKind;
use grid_core::time::Millis;
use grid_core::wire::batch::{BatchCounts, BatchJob, BatchJobState, BatchSubmission, BatchSummary, BatchView};
use grid_core::wire::grid::QueueCounts;
use grid_core::wire::item::CaptureItem;
use grid_core::wire::proxy::UpstreamProxy;
use serde_json::{Map, Value};

use super::accounts::{self, Caller, Entry, ReserveError};
use super::{StoreError, StoreResult};
use crate::ids::ordered_ids;

/// An item with what a worker needs to run it.
#[derive(Debug, Clone)]
pub struct ItemRow {
    pub id: String,
    pub batch_id: String,
    pub account_id: String,
    pub url: String,
    pub script: Script,
    pub profile: Profile,
    pub params: Map<String, Value>,
    pub item: Item,
    /// The item's fencing token: raised by every claim; an attempt's end is
    /// stored only under the token its claim got (`ItemError::LeaseLost`).
    pub lease_token: i64,
    /// Who pays and how much: the key that submitted it, its price and the
    /// UTC day of its reservation, for the charge or release its end writes.
    pub key_id: Option<String>,
    pub price_micros: i64,
    pub reservation_day: i64,
    /// The item's row (`items.seq`, SQLite's rowid): the claim and the end
    /// find it by this, one seek, where the `id` takes two (its index, then
    /// the row).
    pub seq: i64,
    /// The persistent context whose cookies the item sends (its batch's
    /// `context`; docs/captures.md, "Signed-in captures").
    pub context_id: Option<String>,
    /// The batch's upstream proxy (scheme, host, port; the worker opens the
    /// credentials from `proxy_sealed` with the vault).
    pub proxy: Option<UpstreamProxy>,
    pub proxy_sealed: Option<Vec<u8>>,
}

/// A file written to the artifact store and checked, ready to publish.
#[derive(Debug, Clone)]
pub struct PublishedFile {
    pub kind: ArtifactKind,
    /// Where the bytes are: `db:<item>/<kind>` for a file kept inline, else
    /// a path under the artifacts directory.
    pub storage_name: String,
    /// The bytes of a file kept inline in the database.
    pub inline: Option<Vec<u8>>,
    pub sha256: String,
    pub byte_length: i64,
    pub content_type: String,
}

/// The rows of a batch `caller` submitted, each item in `item`'s state (the
/// machine's first step), in the batch's order: what `insert_batch` stores.
/// Not stored yet, so their `seq` is 0 and their `lease_token` the first.
pub fn new_rows(batch_id: &str, caller: &Caller, sub: &BatchSubmission, item: &Item, now: Millis) -> Vec<ItemRow> {
    let ids = ordered_ids(ids::ITEM, sub.urls.len());
    ids.into_iter()
        .zip(&sub.urls)
        .map(|(id, url)| ItemRow {
            id,
            batch_id: batch_id.to_string(),
            account_id: caller.account_id.clone(),
            url: url.clone(),
            script: sub.script,
            profile: sub.profile,
            params: sub.params.clone(),
            item: item.clone(),
            lease_token: 0,
            key_id: caller.key_id.clone(),
            price_micros: sub.script.price_micros(),
            reservation_day: now.utc_day(),
            seq: 0,
            context_id: sub.context.clone(),
            proxy: sub.proxy.clone(),
            proxy_sealed: None,
        })
        .collect()
}

/// Stores a batch and its items (`new_rows`, all in one state). Only the
/// item driver calls this; its reservation is the driver's, written by the
/// same transaction, so on a refusal nothing is queued.
pub fn insert_batch(
    tx: &Conn,
    caller: &Caller,
    sub: &BatchSubmission,
    batch_id: &str,
    rows: &[ItemRow],
    now: Millis,
    proxy_sealed: Option<&[u8]>,
) -> StoreResult<()> {
    let params = Value::Object(sub.params.clone()).to_string();
    // Scheme, host and port only: the credentials are in `proxy_sealed`.
    let proxy = sub.proxy.as_ref().map(to_json).transpose()?;
    // A batch's items are all made by the same first step.
    let attended = rows.first().is_some_and(|r| r.item.attended);
    // The batch and its items in one round trip (`query_all`): neither
    // reads anything back.
    let insert_sql: String;
    let mut statements: Vec<Statement> = vec![(
        "INSERT INTO batches (id, account_id, key_id, script, profile_id, params, priority, item_count, created_at,
                              attended, context_id, proxy, proxy_sealed, first_item, last_item)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        params![
            batch_id,
            caller.account_id,
            caller.key_id,
            sub.script.as_str(),
            sub.profile.as_str(),
            params,
            sub.priority,
            rows.len() as i64,
            now.0,
            attended,
            sub.context,
            proxy,
            proxy_sealed.map(<[u8]>::to_vec),
            rows.first().map(|r| r.id.as_str()),
            rows.last().map(|r| r.id.as_str())
        ],
    )];
    let state = rows.first().map_or(ItemState::queued(sub.priority), |r| r.item.state);
    // An attended batch's one item is claimed at once: it never waits in
    // the queue, so it takes no turn.
    let fair_base = match attended {
        true => None,
        false => Some((
            fair_base_sql(sub.priority),
            match sub.priority {
                None => params![caller.account_id],
                Some(p) => params![caller.account_id, p],
            },
        )),
    };
    // What the batch's items share, in the columns' order after id and url.
    let shared = params![
        batch_id,
        caller.account_id,
        caller.key_id,
        sub.script.as_str(),
        sub.profile.as_str(),
        sub.priority,
        sub.script.price_micros(),
        now.utc_day(),
        state.as_str(),
        now.0
    ];
    match tx.dialect() {
        // One statement: what differs from item to item (id, url) as
        // arrays, what the items share once. `seq`, the queue's order, is
        // one value of the sequence per batch, its items numbered from it
        // in their order (`SEQ_PER_BATCH` apart): the default took one per
        // row, which cost about as much as the row's heap insert (each a
        // lock and a buffer of the sequence). A later batch still comes
        // later: every number drawn before this step is below the first
        // one drawn after it times `SEQ_PER_BATCH`.
        Dialect::Postgres => {
            let (ids, urls) = rows.iter().map(|r| (r.id.to_value(), r.url.to_value())).unzip();
            let mut values = vec![SqlValue::Array(ids), SqlValue::Array(urls)];
            values.extend(shared);
            values.push(SEQ_PER_BATCH.to_value());
            // The turn's base is read by the statement itself, once: no
            // round trip more.
            let base = match &fair_base {
                // The account and the priority as the insert binds them.
                Some((sql, _)) => format!("({})", sql.replace("?1", "?4").replace("?2", "?8")),
                None => "0".to_string(),
            };
            insert_sql = format!(
                "INSERT INTO items (seq, id, url, batch_id, account_id, key_id, script, profile_id, priority,
                                    price_micros, reservation_day, state, updated_at, fair_tag)
                 SELECT (SELECT nextval('items_seq_seq')) * ?13 + u.n, u.id, u.url,
                        ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, b.base + u.n
                   FROM unnest(?1::text[], ?2::text[]) WITH ORDINALITY AS u(id, url, n),
                        (SELECT {base} AS base) AS b"
            );
            statements.push((&insert_sql, values));
        }
        // Many rows per statement (`ManyRows`), in the batch's order (their
        // `seq`, the rowid, is the queue's order).
        Dialect::Sqlite => {
            static ITEMS: ManyRows = ManyRows::new(
                "INSERT INTO items (id, url, batch_id, account_id, key_id, script, profile_id, priority,
                                    price_micros, reservation_day, state, updated_at, fair_tag)",
                &[
                    "text", "text", "text", "text", "text", "text", "text", "bigint", "bigint", "bigint", "text",
                    "bigint", "bigint",
                ],
                "",
            );
            // A read on this connection, in this transaction: no round trip.
            let base: i64 = match &fair_base {
                Some((sql, params)) => tx.query_row(sql, params.clone(), |r| r.get(0))?,
                None => 0,
            };
            let mut values = Vec::with_capacity(rows.len() * 13);
            for (n, row) in rows.iter().enumerate() {
                values.extend(params![row.id, row.url]);
                values.extend(shared.iter().cloned());
                values.push((base + n as i64 + 1).to_value());
            }
            statements.extend(ITEMS.statements(tx.dialect(), values));
        }
    }
    tx.query_all(statements)?;
    Ok(())
}

/// The start tag a batch's items are numbered on from (`fair_tag`, start-time
/// fair queuing): the later of the head of the band the batch joins (its
/// lowest waiting tag) and the last tag of the account's own queued items;
/// 0 for an empty queue. So an account with nothing queued joins at the
/// head, and accounts with long queues interleave, one item each, however
/// long the first one's queue is. `?1` the account, `?2` the priority (none:
/// the band without). Over the account's items of either band: an account
/// queueing in both bands waits its turn in each behind its longer queue.
fn fair_base_sql(priority: Option<u32>) -> String {
    let sql = match priority {
        None => {
            "SELECT COALESCE(MAX(t), 0) FROM (
               SELECT COALESCE((SELECT MIN(fair_tag) FROM items WHERE state = 'waiting'), IN_FLIGHT) AS t
               UNION ALL
               SELECT MAX(fair_tag) FROM items WHERE account_id = ?1 AND state IN ('waiting', 'prioritized')
             ) AS bases"
        }
        Some(_) => {
            "SELECT COALESCE(MAX(t), 0) FROM (
               SELECT COALESCE((SELECT MIN(fair_tag) FROM items WHERE state = 'prioritized' AND priority = ?2),
                               IN_FLIGHT) AS t
               UNION ALL
               SELECT MAX(fair_tag) FROM items WHERE account_id = ?1 AND state IN ('waiting', 'prioritized')
             ) AS bases"
        }
    };
    sql.replace("IN_FLIGHT", IN_FLIGHT)
}

/// An empty band's head: the last tag in flight (claimed, or waiting out a
/// retry's backoff), so a batch joining an empty queue comes after the
/// retries that keep their places, never before them. Each state read
/// through its own partial index.
const IN_FLIGHT: &str = "(SELECT MAX(m) FROM (SELECT MAX(fair_tag) AS m FROM items WHERE state = 'active'
                                              UNION ALL
                                              SELECT MAX(fair_tag) FROM items WHERE state = 'delayed') AS f)";

/// How far apart PostgreSQL numbers the `seq` of consecutive batches
/// (`insert_batch`): more than a batch's items (at most 1,000,
/// `grid_core::validate::batch`), and 2^43 batches before an i64 runs out.
const SEQ_PER_BATCH: i64 = 1 << 20;
const _: () = assert!(grid_core::validate::batch::MAX_URLS < SEQ_PER_BATCH as usize);

/// A batch's first and last item id (`batches.first_item`, `last_item`):
/// its items are the items' ids in that range (`ids::ordered_ids`; a batch
/// stored before schema step 19 (`batch_item_ranges`; PostgreSQL's 21, `fewer_index_entries`) may share its range with
/// other batches' items, so every read also filters by `batch_id`).
type ItemRange = (Option<String>, Option<String>);

pub fn batch_view(conn: &ReadConn, account_id: &str, batch_id: &str) -> StoreResult<Option<BatchView>> {
    let range: Option<ItemRange> = conn
        .query_row(
            "SELECT first_item, last_item FROM batches WHERE id = ?1 AND account_id = ?2",
            (batch_id, account_id),
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((first, last)) = range else {
        return Ok(None);
    };
    let jobs = conn.query_map(
        "SELECT id, url, state, failed_reason FROM items WHERE id BETWEEN ?2 AND ?3 AND batch_id = ?1 ORDER BY id",
        (batch_id, first, last),
        |r| {
            let state: String = r.get(2)?;
            let state = ItemState::parse(&state).unwrap_or(ItemState::Waiting);
            let failed = state == ItemState::Failed;
            Ok(BatchJob {
                job_id: r.get(0)?,
                url: r.get(1)?,
                state: state.into(),
                failed_reason: if failed { r.get(3)? } else { None },
            })
        },
    )?;
    Ok(Some(BatchView::from_jobs(batch_id.to_string(), jobs)))
}

/// GET /batches: the account's batches newest first (ids are time-ordered),
/// `limit` of them with an id below `before`, each with its counts by
/// state. Returns them and the id to continue from when there are more.
pub fn list_batches(
    conn: &ReadConn,
    account_id: &str,
    before: Option<&str>,
    limit: usize,
) -> StoreResult<(Vec<BatchSummary>, Option<String>)> {
    // Ids are ASCII, so any id sorts below "~".
    let rows: Vec<(String, i64, String, String, ItemRange)> = conn.query_map(
        "SELECT id, created_at, script, profile_id, first_item, last_item FROM batches
          WHERE account_id = ?1 AND id < ?2 ORDER BY id DESC LIMIT ?3",
        params![account_id, before.unwrap_or("~"), limit as i64 + 1],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, (r.get(4)?, r.get(5)?))),
    )?;
    let more = rows.len() > limit;
    let mut out = Vec::with_capacity(limit);
    for (batch_id, created_at, script, profile_id, (first, last)) in rows.into_iter().take(limit) {
        let states: Vec<(String, i64)> = conn.query_map(
            "SELECT state, COUNT(*) FROM items WHERE id BETWEEN ?2 AND ?3 AND batch_id = ?1 GROUP BY state",
            (batch_id.as_str(), first, last),
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let mut counts = BatchCounts::default();
        let mut total = 0;
        for (state, n) in states {
            let n = n as u32;
            match BatchJobState::from(ItemState::parse(&state).unwrap_or(ItemState::Waiting)) {
                BatchJobState::Waiting => counts.waiting += n,
                BatchJobState::Active => counts.active += n,
                BatchJobState::Completed => counts.completed += n,
                BatchJobState::Failed => counts.failed += n,
            }
            total += n;
        }
        out.push(BatchSummary { batch_id, created_at: Millis(created_at), script, profile_id, counts, total });
    }
    let next = if more { out.last().map(|b| b.batch_id.clone()) } else { None };
    Ok((out, next))
}

/// The columns `item_row` reads, of `items i JOIN batches b`.
macro_rules! item_columns {
    () => {
        "i.id, i.batch_id, i.account_id, i.url, i.script, i.profile_id, b.params, i.state, i.priority,
         i.attempts_made, i.failed_reason, i.failure_published, i.run_at, i.billable, i.lease_token,
         i.key_id, i.price_micros, i.reservation_day, i.seq, b.attended, b.context_id, b.proxy, b.proxy_sealed"
    };
}

fn item_row(r: &Row) -> StoreResult<ItemRow> {
    item_row_owned(r.clone())
}

/// `item_row` for a row the caller gives up: its text moves into the item.
fn item_row_owned(mut r: Row) -> StoreResult<ItemRow> {
    let bad = |i: usize, what: &str| StoreError::Invalid(format!("column {i}: bad {what}"));
    let script: String = r.take(4)?;
    let profile: String = r.take(5)?;
    let params: String = r.take(6)?;
    let state: String = r.take(7)?;
    let proxy: Option<String> = r.take(21)?;
    Ok(ItemRow {
        id: r.take(0)?,
        batch_id: r.take(1)?,
        account_id: r.take(2)?,
        url: r.take(3)?,
        script: Script::parse(&script).ok_or_else(|| bad(4, "script"))?,
        profile: Profile::parse(&profile).ok_or_else(|| bad(5, "profile"))?,
        params: serde_json::from_str(&params).map_err(|_| bad(6, "params"))?,
        item: Item {
            state: ItemState::parse(&state).ok_or_else(|| bad(7, "state"))?,
            priority: r.get(8)?,
            attempts_made: r.get(9)?,
            failed_reason: r.take(10)?,
            failure_published: r.get(11)?,
            run_at: r.get::<Option<i64>>(12)?.map(Millis),
            billable: r.get(13)?,
            attended: r.get(19)?,
        },
        lease_token: r.get(14)?,
        key_id: r.take(15)?,
        price_micros: r.get(16)?,
        reservation_day: r.get(17)?,
        seq: r.get(18)?,
        context_id: r.take(20)?,
        proxy: proxy.map(|p| serde_json::from_str(&p)).transpose().map_err(|_| bad(21, "proxy"))?,
        proxy_sealed: r.take(22)?,
    })
}

const LOAD_ITEM: &str =
    concat!("SELECT ", item_columns!(), " FROM items i JOIN batches b ON b.id = i.batch_id WHERE i.id = ?1");

pub fn load_item(conn: &ReadConn, id: &str) -> StoreResult<Option<ItemRow>> {
    conn.query_row(LOAD_ITEM, [id], item_row).optional()
}

/// `load_item`, the item's row locked until the transaction ends (on
/// PostgreSQL; SQLite's one writer needs no lock): for a step that checks
/// the item's state and runs at once with other transactions
/// (`Order::Rows`).
pub fn load_item_for_step(conn: &Conn, id: &str) -> StoreResult<Option<ItemRow>> {
    let sql = format!("{LOAD_ITEM} {}", conn.row_lock("FOR UPDATE OF i"));
    conn.query_row(&sql, [id], item_row).optional()
}

/// Stores an item's machine state.
pub fn save_item(conn: &Conn, id: &str, it: &Item, now: Millis) -> StoreResult<()> {
    static SQL: OnceLock<String> = OnceLock::new();
    let sql = SQL.get_or_init(|| format!("UPDATE items SET {MACHINE_COLUMNS} WHERE id = ?8"));
    let mut values = machine_values(it, now);
    values.push(id.to_value());
    conn.execute(sql, values)?;
    Ok(())
}

/// The columns the item machine owns, as assignments of `?1` to `?7` in the
/// order of [`machine_values`]: a single save, claims and ends write them
/// alike.
const MACHINE_COLUMNS: &str = "state = ?1, attempts_made = ?2, failed_reason = ?3, failure_published = ?4, \
                               run_at = ?5, billable = ?6, updated_at = ?7";

fn machine_values(it: &Item, now: Millis) -> Vec<super::sql::Value> {
    params![
        it.state.as_str(),
        it.attempts_made,
        it.failed_reason,
        it.failure_published,
        it.run_at.map(|t| t.0),
        it.billable,
        now.0
    ]
}

/// Stores claims: for each of `claims` (as this transaction read them), the
/// machine state `it` they all share (as `save_item`) and `node` as the
/// holder under a new fencing token, one above the token read: each item's
/// own token is raised by one, as when claimed alone. One statement for the
/// whole batch on PostgreSQL, a few on SQLite (`ForRows`), sent together
/// (`query_all`). Answers the new tokens, in order.
pub fn take_lease(conn: &Conn, claims: &[&ItemRow], it: &Item, node: &str, now: Millis) -> StoreResult<Vec<i64>> {
    static CLAIM: ForRows = ForRows::new(
        "UPDATE items SET MACHINE_COLUMNS, lease_node = ?8, lease_token = lease_token + 1 WHERE ROWS RETURNING seq",
    );
    let mut values = machine_values(it, now);
    values.push(node.to_value());
    let taken: usize = conn.query_all(CLAIM.statements(conn.dialect(), values, claims))?.iter().map(Vec::len).sum();
    if taken != claims.len() {
        return Err(StoreError::Invalid("an item changed under its claim".into()));
    }
    Ok(claims.iter().map(|row| row.lease_token + 1).collect())
}

/// Stores how attempts ended, under their claims' fence: for the items of
/// `claims` still active under `lease_token` (the token their claims got),
/// the machine state `it` they all share. Answers the seqs stored; an item
/// whose claim was taken over (recovered, perhaps claimed again) is not.
///
/// The fence and the write are one statement (one per chunk on SQLite),
/// and the update locks each row it changes (PostgreSQL checks the fence
/// again on a row it had to wait for), so no other transaction can come
/// between the check and the change; and since only a claim (which raises the
/// token) or a recovery (which ends `active`) writes an active item, a row
/// that passes the fence is the row its claim stored. No read of the fences
/// comes first: it would lock every row once more.
///
/// The state is compared as `state || ''` so that no planner takes the
/// fence for the predicate of `items_active` and reads that index instead
/// of the rows' key: PostgreSQL then read every entry it held, each item
/// ended since the last vacuum included (a bitmap scan never marks an entry
/// dead), so an end's cost grew with the items run before it (measured:
/// ends took 27 µs per item in a run of 40,000, claims 9).
pub fn save_ends(conn: &Conn, claims: &[&ItemRow], lease_token: i64, it: &Item, now: Millis) -> StoreResult<Vec<i64>> {
    static END: ForRows = ForRows::new(
        "UPDATE items SET MACHINE_COLUMNS WHERE ROWS AND lease_token = ?8 AND state || '' = 'active' RETURNING seq",
    );
    let mut values = machine_values(it, now);
    values.push(lease_token.to_value());
    conn.query_all(END.statements(conn.dialect(), values, claims))?.iter().flatten().map(|r| r.get::<i64>(0)).collect()
}

/// An update of many items, `ROWS` in its text standing for the items',
/// their keys bound after its other values (and `MACHINE_COLUMNS` for
/// those `machine_values` binds). On SQLite by `seq`, the rowid
/// (one seek, where the `id` took two: its index, then the row), in chunks
/// (`seq IN (...)`, `CHUNKS`). On PostgreSQL by `id`, the primary key since
/// schema step 21, `fewer_index_entries` (`seq` has no index of its own there: each of an item's
/// insert and two non-HOT updates wrote an entry to it, and index entries
/// were a third of PostgreSQL's CPU per item), all in one statement (`id =
/// ANY(array)`), whose own cost is then paid once (`ManyRows` says what it
/// is).
struct ForRows {
    template: &'static str,
    sqlite: OnceLock<[String; 4]>,
    postgres: OnceLock<String>,
}

impl ForRows {
    const fn new(template: &'static str) -> ForRows {
        ForRows { template, sqlite: OnceLock::new(), postgres: OnceLock::new() }
    }

    fn statements(
        &'static self,
        dialect: Dialect,
        values: Vec<super::sql::Value>,
        rows: &[&ItemRow],
    ) -> Vec<Statement<'static>> {
        let text = |rows: &str| self.template.replace("MACHINE_COLUMNS", MACHINE_COLUMNS).replace("ROWS", rows);
        let first = values.len() + 1;
        match dialect {
            Dialect::Sqlite => chunks(rows)
                .map(|chunk| {
                    let sql =
                        chunk_sql(&self.sqlite, chunk.len(), |n| text(&format!("seq IN ({})", placeholders(first, n))));
                    let mut values = values.clone();
                    values.extend(chunk.iter().map(|row| row.seq.to_value()));
                    (sql, values)
                })
                .collect(),
            Dialect::Postgres => {
                let sql = self.postgres.get_or_init(|| text(&format!("id = ANY(?{first})")));
                let mut values = values;
                values.push(SqlValue::Array(rows.iter().map(|row| row.id.to_value()).collect()));
                vec![(sql.as_str(), values)]
            }
        }
    }
}

/// The statements that publish checked files, each with its item's id:
/// those of many items in one statement (`ManyRows`), for the caller to
/// send with others (`query_all`: an end's ledger entries).
///
/// An item's meta rides in the row of the item's first other file
/// (`meta_*`, migration 20; read back through `item_files`), so a fetch
/// item's body and meta are one row, not two. A meta with no other file
/// of its item beside it, or of another content type than the view
/// writes, is a row of its own.
pub fn file_inserts(dialect: Dialect, files: &[(&str, Cow<PublishedFile>)], now: Millis) -> Vec<Statement<'static>> {
    static FILES: ManyRows = ManyRows::new(
        "INSERT INTO artifacts (item_id, kind, storage_name, sha256, byte_length, content_type, content, created_at, \
                                meta_storage_name, meta_sha256, meta_byte_length, meta_content)",
        &["text", "text", "text", "text", "bigint", "text", "bytea", "bigint", "text", "text", "bigint", "bytea"],
        "",
    );
    // The content type `item_files` gives a meta kept in another file's row
    // (migrations/24_meta_beside.sqlite.sql); a meta of any other is a row of its own.
    let meta_type = ArtifactKind::Meta.default_content_type();
    let rides = |f: &PublishedFile| f.kind == ArtifactKind::Meta && f.content_type == meta_type;
    // The meta that may ride in another row, by its item.
    let mut riders: HashMap<&str, usize> = HashMap::new();
    for (i, (id, f)) in files.iter().enumerate() {
        if rides(f) {
            riders.entry(*id).or_insert(i);
        }
    }
    // Each row: a file and the meta riding in it; then the metas left.
    let mut carried = vec![false; files.len()];
    let mut rows: Vec<(&str, &PublishedFile, Option<&PublishedFile>)> = Vec::with_capacity(files.len());
    for (id, f) in files.iter().filter(|(_, f)| f.kind != ArtifactKind::Meta) {
        let meta = riders.remove(id).map(|i| {
            carried[i] = true;
            files[i].1.as_ref()
        });
        rows.push((id, f, meta));
    }
    for (i, (id, f)) in files.iter().enumerate() {
        if f.kind == ArtifactKind::Meta && !carried[i] {
            rows.push((id, f, None));
        }
    }
    let mut values = Vec::with_capacity(files.len() * 12);
    for (id, f, meta) in rows {
        values.extend(params![
            id,
            f.kind.as_str(),
            f.storage_name,
            f.sha256,
            f.byte_length,
            f.content_type,
            f.inline,
            now.0,
            meta.map(|m| &m.storage_name),
            meta.map(|m| &m.sha256),
            meta.map(|m| m.byte_length),
            meta.and_then(|m| m.inline.as_ref())
        ]);
    }
    FILES.statements(dialect, values)
}

#[derive(Debug, thiserror::Error)]
pub enum ItemError {
    #[error(transparent)]
    Transition(#[from] TransitionError),
    /// The attempt's claim is no longer the item's: the item was taken over
    /// (its node was taken for dead) and claimed again, or recovered. The
    /// attempt's end is dropped: it publishes, changes and charges nothing.
    #[error("the claim on item {0} was taken over")]
    LeaseLost(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<ReserveError> for ItemError {
    fn from(e: ReserveError) -> Self {
        match e {
            ReserveError::Refused(api) => ItemError::Transition(TransitionError::Refused(api)),
            ReserveError::Store(s) => ItemError::Store(s),
        }
    }
}

/// What a caller sees of a capture item's error: the machine's refusals
/// (the contract's three retry conflicts, unknown job) as they are; a
/// transition the machine does not allow from an API call is a bug,
/// logged and answered 500; an item that is gone is `unknown job`; other
/// store failures as anywhere (`From<StoreError>`: busy is
/// `accounting_unavailable`, the only 503 of the capture endpoints).
impl From<ItemError> for ApiError {
    fn from(e: ItemError) -> Self {
        match e {
            ItemError::Transition(TransitionError::Refused(api)) => api,
            ItemError::Transition(other) => {
                tracing::error!(error = %other, "unexpected item transition");
                ApiError::Internal
            }
            ItemError::LeaseLost(_) => ApiError::Internal,
            ItemError::Store(StoreError::NotFound(_)) => ApiError::UnknownItemOrJob,
            ItemError::Store(s) => s.into(),
        }
    }
}

/// The head of the queue: up to `LIMIT_N` claimable items in contract
/// order, those without a priority first (a `waiting` item never has a
/// priority: an invariant of the item machine), then the lowest priority;
/// within each, accounts in turn (their items' start tags, `fair_tag`:
/// `FAIR_BASE`), each account's oldest first. Each band is one read of its own partial index
/// (`items_waiting`, `items_prioritized`) for at most `LIMIT_N` rows, each
/// row read (and on PostgreSQL locked) as the band finds it; only those
/// candidates are sorted, and joined to their batches. No band's row is
/// looked up a second time: on PostgreSQL that took an index's probe and a
/// heap fetch more per item (the band's read had locked the row already),
/// on SQLite a seek by rowid.
///
/// The limit is written into the statement (`queue_head`), not bound: SQLite
/// plans with a bound LIMIT's value and prepares the statement again each
/// time that value changes, which cost more than the claim itself.
const QUEUE_HEAD: &str = concat!(
    "SELECT ",
    item_columns!(),
    "
  FROM (SELECT 0 AS band, * FROM (SELECT BAND_COLUMNS FROM items WHERE state = 'waiting'
                                   ORDER BY fair_tag, seq LIMIT LIMIT_N LOCK) AS unprioritized
        UNION ALL
        SELECT 1 AS band, * FROM (SELECT BAND_COLUMNS FROM items WHERE state = 'prioritized'
                                   ORDER BY priority, fair_tag, seq LIMIT LIMIT_N LOCK) AS prioritized) AS i
  JOIN batches b ON b.id = i.batch_id
 ORDER BY i.band, i.priority, i.fair_tag, i.seq
 LIMIT LIMIT_N"
);

/// The columns of `items` that `item_columns!` reads, as each band of
/// `QUEUE_HEAD` selects them.
const BAND_COLUMNS: &str = "id, batch_id, account_id, url, script, profile_id, state, priority, attempts_made, \
                            failed_reason, failure_published, run_at, billable, lease_token, key_id, price_micros, \
                            reservation_day, seq, fair_tag";

/// Up to `limit` items at the head of the queue, in the contract's order:
/// items without a priority first, then lower priority, then age.
/// Reads `limit` rounded up to a multiple of 16 (so a few dozen statements
/// serve every limit) and answers the first `limit`.
///
/// On PostgreSQL the rows are locked as they are read, skipping those
/// another transaction holds (a concurrent claim, on this node or another):
/// claims running at once take disjoint heads of the queue, each the first
/// free items in order, and never wait on each other.
///
/// On PostgreSQL sorting is turned off for this one statement (`SET LOCAL
/// enable_sort` off before it and on again after it), so each band is read
/// in its index's order and stops at the limit. The planner estimates a band's
/// size from the table's statistics, which a queue outruns: analyzed while
/// the queue was short, it took a backlog for a few rows and read every
/// claimable item, sorted them and kept the first (measured: 5,763 rows read
/// for a claim of 176, so a claim cost grew with the backlog).
pub fn queue_head(conn: &Conn, limit: usize) -> StoreResult<Vec<ItemRow>> {
    Ok(due_and_head(conn, None, limit)?.1)
}

/// `due_delayed` at `now` (none without it) and `queue_head`, read together:
/// on PostgreSQL in one round trip (`query_all`), which a claim saves when
/// nothing is due, as is usual. The head is read before the due items are
/// woken, so a caller that wakes some reads the head again.
pub fn due_and_head(conn: &Conn, now: Option<Millis>, limit: usize) -> StoreResult<(Vec<String>, Vec<ItemRow>)> {
    let head = queue_head_sql(limit, conn.row_lock("FOR UPDATE SKIP LOCKED"));
    let due = due_delayed_sql(conn);
    let mut statements: Vec<Statement> = Vec::with_capacity(4);
    if let Some(now) = now {
        statements.push((&due, vec![SqlValue::Int(now.0)]));
    }
    match conn.dialect() {
        Dialect::Sqlite => statements.push((&head, vec![])),
        Dialect::Postgres => statements.extend([
            ("SET LOCAL enable_sort = off", vec![]),
            (&head, vec![]),
            ("SET LOCAL enable_sort = on", vec![]),
        ]),
    }
    let mut answers = conn.query_all(statements)?.into_iter();
    let due = match now {
        Some(_) => answers.next().unwrap_or_default().iter().map(|r| r.get(0)).collect::<StoreResult<_>>()?,
        None => Vec::new(),
    };
    let rows = match conn.dialect() {
        Dialect::Sqlite => answers.next(),
        Dialect::Postgres => answers.nth(1),
    };
    let head = rows.unwrap_or_default().into_iter().take(limit).map(item_row_owned).collect::<StoreResult<_>>()?;
    Ok((due, head))
}

fn queue_head_sql(limit: usize, lock: &str) -> String {
    let rounded = if limit <= 16 { limit.max(1) } else { limit.next_multiple_of(16) };
    QUEUE_HEAD.replace("BAND_COLUMNS", BAND_COLUMNS).replace("LIMIT_N", &rounded.to_string()).replace("LOCK", lock)
}

/// Delayed items whose backoff has passed by `now` (a range of
/// `items_delayed`); on PostgreSQL locked, skipping those a concurrent
/// transaction is waking already.
pub fn due_delayed(conn: &Conn, now: Millis) -> StoreResult<Vec<String>> {
    conn.query_map(&due_delayed_sql(conn), [now.0], |r| r.get(0))
}

fn due_delayed_sql(conn: &Conn) -> String {
    let lock = conn.row_lock("FOR UPDATE SKIP LOCKED");
    format!("SELECT id FROM items WHERE state = 'delayed' AND run_at <= ?1 {lock}")
}

/// When the earliest delayed item becomes due, if any.
pub fn next_wake(conn: &ReadConn) -> StoreResult<Option<Millis>> {
    let t: Option<i64> = conn.query_row("SELECT MIN(run_at) FROM items WHERE state = 'delayed'", (), |r| r.get(0))?;
    Ok(t.map(Millis))
}

/// Active items `node` holds (or that no node holds: claimed before nodes
/// were recorded): those its workers were running when it stopped or died.
pub fn active_ids(conn: &ReadConn, node: &str) -> StoreResult<Vec<String>> {
    conn.query_map(
        "SELECT id FROM items WHERE state = 'active' AND (lease_node = ?1 OR lease_node IS NULL)",
        [node],
        |r| r.get(0),
    )
}

pub fn item_view(conn: &ReadConn, account_id: &str, id: &str) -> StoreResult<Option<CaptureItem>> {
    let Some(row) = load_item(conn, id)?.filter(|r| r.account_id == account_id) else { return Ok(None) };
    let artifacts: BTreeMap<String, String> = conn
        .query_map("SELECT kind, storage_name FROM item_files WHERE item_id = ?1", [id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .into_iter()
        .collect();
    Ok(Some(CaptureItem {
        job_id: row.id,
        batch_id: row.batch_id,
        url: row.url,
        state: row.item.state,
        attempts_made: row.item.attempts_made,
        failed_reason: row.item.failed_reason,
        artifacts,
        script: row.script.as_str().to_string(),
        profile_id: row.profile.as_str().to_string(),
    }))
}

/// Whether an item the account owns has a published file of this kind:
/// refused `UnknownItemOrJob` for another account's (or no) item,
/// `ArtifactNotPresent` when the item has no such file.
pub fn check_artifact(conn: &ReadConn, account_id: &str, id: &str, kind: ArtifactKind) -> Result<(), ItemError> {
    let owned = load_item(conn, id)?.is_some_and(|r| r.account_id == account_id);
    if !owned {
        return Err(TransitionError::Refused(ApiError::UnknownItemOrJob).into());
    }
    let present: Option<i64> = conn
        .query_row("SELECT 1 FROM item_files WHERE item_id = ?1 AND kind = ?2", (id, kind.as_str()), |r| r.get(0))
        .optional()?;
    present.map(|_| ()).ok_or(TransitionError::Refused(ApiError::ArtifactNotPresent).into())
}

/// A published file with its bytes when it is kept in the database and is
/// at most `load_max` bytes long; a larger one kept there is read in slices
/// (`file_slice`), so a download never holds a whole large file.
pub fn published_file(
    conn: &ReadConn,
    id: &str,
    kind: ArtifactKind,
    load_max: usize,
) -> StoreResult<Option<PublishedFile>> {
    conn.query_row(
        "SELECT storage_name, sha256, byte_length, content_type,
                    CASE WHEN byte_length <= ?3 THEN content END
               FROM item_files WHERE item_id = ?1 AND kind = ?2",
        (id, kind.as_str(), load_max),
        |r| {
            Ok(PublishedFile {
                kind,
                storage_name: r.get(0)?,
                sha256: r.get(1)?,
                byte_length: r.get(2)?,
                content_type: r.get(3)?,
                inline: r.get(4)?,
            })
        },
    )
    .optional()
}

/// `len` bytes from `offset` of a file kept in the database (fewer at its
/// end); `None` when there is no such file.
pub fn file_slice(
    conn: &ReadConn,
    id: &str,
    kind: ArtifactKind,
    offset: u64,
    len: usize,
) -> StoreResult<Option<Vec<u8>>> {
    Ok(conn
        .query_row(
            "SELECT substr(content, ?3, ?4) FROM item_files WHERE item_id = ?1 AND kind = ?2",
            (id, kind.as_str(), offset.saturating_add(1), len),
            |r| r.get(0),
        )
        .optional()?
        .flatten())
}

/// Whether a large file kept in the database still has its SHA-256,
/// checked where it lives instead of by reading it out (PostgreSQL only:
/// SQLite keeps large files on disk).
pub fn file_intact(conn: &ReadConn, id: &str, kind: ArtifactKind) -> StoreResult<bool> {
    let same: Option<i64> = conn
        .query_row(
            "SELECT 1 FROM item_files
              WHERE item_id = ?1 AND kind = ?2 AND encode(sha256(content), 'hex') = sha256
                AND length(content) = byte_length",
            (id, kind.as_str()),
            |r| r.get(0),
        )
        .optional()?;
    Ok(same.is_some())
}

/// Grid-wide queue figures: each state counted on its own partial index.
pub fn queue_counts(conn: &ReadConn) -> StoreResult<(QueueCounts, u32)> {
    let rows = conn.query_map(
        "SELECT 'waiting', COUNT(*) FROM items WHERE state = 'waiting'
         UNION ALL SELECT 'prioritized', COUNT(*) FROM items WHERE state = 'prioritized'
         UNION ALL SELECT 'delayed', COUNT(*) FROM items WHERE state = 'delayed'
         UNION ALL SELECT 'active', COUNT(*) FROM items WHERE state = 'active'",
        (),
        |r| Ok((r.get::<String>(0)?, r.get::<u32>(1)?)),
    )?;
    let mut counts = QueueCounts::default();
    let mut active = 0;
    for (state, n) in rows {
        match state.as_str() {
            "waiting" => counts.wait = n,
            "prioritized" => counts.prioritized = n,
            "delayed" => counts.delayed = n,
            _ => active = n,
        }
    }
    Ok((counts, active))
}

/// The ledger entry a finished item owes: its charge or the release of its
/// reservation, with the item as its subject (the ledger's unique index
/// admits one per item). Written by the transaction that ends the item.
pub fn settlement(row: &ItemRow, owed: Settlement) -> Entry<'_> {
    item_entry(&row.id, &row.account_id, row.key_id.as_deref(), owed, row.price_micros, row.reservation_day)
}

/// An item's charge or release, whoever writes it: the end's transaction
/// ([`settlement`]) or the pass over older debts ([`settle_due`]).
fn item_entry<'a>(
    id: &'a str,
    account_id: &'a str,
    key_id: Option<&'a str>,
    owed: Settlement,
    price_micros: i64,
    reservation_day: i64,
) -> Entry<'a> {
    Entry {
        account_id,
        key_id,
        kind: match owed {
            Settlement::Charge => EntryKind::Charge,
            Settlement::Release => EntryKind::Release,
        },
        amount: price_micros,
        subject: Some(id),
        reservation_day: Some(reservation_day),
    }
}

/// Settles old debts (`settlement::settle_old_debts`), those a server before this one left in the
/// items' `settlement_due` (it wrote the entry in a later pass, not with the
/// end): writes the ledger entry each owes and clears the debt, in one
/// transaction. Returns how many items it settled. Entries are written up
/// to 128 at a time (two statements per chunk, not two per item).
/// The debts `settle_due` takes (`LOCK`: the row lock, PostgreSQL's only).
const SETTLE_DUE: &str = "SELECT id, account_id, key_id, settlement_due, price_micros, reservation_day
                            FROM items WHERE settlement_due IS NOT NULL ORDER BY settlement_due LIMIT ?1 LOCK";

pub fn settle_due(conn: &Conn, now: Millis, limit: usize) -> StoreResult<usize> {
    // Locked on PostgreSQL (skipping any a concurrent pass holds), so each
    // debt is settled and cleared by one transaction. In the order of
    // `items_settlement`, so that PostgreSQL reads that index whatever its
    // statistics say: without them (a table not analyzed yet, as after a
    // burst of submissions) it took every item for a debt and scanned the
    // whole table for the first few, on every pass of every node (bench/
    // scale_out.sh: 845 pages a pass for 22,000 items, none of them owing).
    let sql = SETTLE_DUE.replace("LOCK", conn.row_lock("FOR UPDATE SKIP LOCKED"));
    let due: Vec<(String, String, Option<String>, String, i64, i64)> = conn
        .query_map(&sql, [limit as i64], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))?;
    static CLEAR: OnceLock<[String; 4]> = OnceLock::new();
    for chunk in chunks(&due) {
        let entries: Vec<Entry> = chunk
            .iter()
            .map(|(id, account_id, key_id, due, price, day)| {
                let owed = if due == Settlement::Charge.as_str() { Settlement::Charge } else { Settlement::Release };
                item_entry(id, account_id, key_id.as_deref(), owed, *price, *day)
            })
            .collect();
        accounts::append_all(conn, &entries, now)?;
        let sql = chunk_sql(&CLEAR, chunk.len(), |n| {
            format!("UPDATE items SET settlement_due = NULL WHERE id IN ({})", placeholders(1, n))
        });
        conn.execute(sql, chunk.iter().map(|d| d.0.as_str()).collect::<Vec<_>>().as_slice())?;
    }
    Ok(due.len())
}

/// Fixtures shared with the item driver's tests: a temp-dir store, accounts
/// and batches.
#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::store::Store;
    use std::time::Duration;

    pub(crate) const T: Millis = Millis(1_800_000_000_000);

    pub(crate) fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Duration::from_secs(1)).unwrap();
        (dir, store)
    }

    pub(crate) fn caller(store: &Store, credit: i64, cap: Option<i64>) -> Caller {
        store
            .write_blocking(|tx| {
                let id = accounts::create_account(tx, "t", credit, T)?;
                let k = accounts::create_key(tx, &id, cap, false, Default::default(), T)?;
                Ok::<_, StoreError>(Caller {
                    account_id: id,
                    key_id: Some(k.key_id),
                    daily_cap_micros: cap,
                    ..Default::default()
                })
            })
            .unwrap()
    }

    fn submission(n: usize, priority: Option<u32>) -> BatchSubmission {
        BatchSubmission {
            urls: (0..n).map(|i| format!("http://t/{i}")).collect(),
            script: Script::Fetch,
            profile: Profile::DEFAULT,
            params: Map::new(),
            priority,
            context: None,
            proxy: None,
        }
    }

    pub(crate) fn submit(
        store: &Store,
        c: &Caller,
        n: usize,
        priority: Option<u32>,
    ) -> Result<grid_core::wire::batch::BatchCreated, ItemError> {
        let (c, sub) = (c.clone(), submission(n, priority));
        // A refusal rolls the transaction back, as the driver's does.
        store.write_blocking(move |tx| crate::capture::driver::create_batch(tx, &c, &sub, T))
    }

    /// A claim must not sort the queue: with tens of thousands of waiting
    /// items that made every claim O(n) (measured in docs/performance.md).
    /// Nor may the queue's figures (GET /grid, metrics) read the whole
    /// table.
    #[test]
    fn claims_counts_and_account_reads_use_their_indexes_instead_of_the_table() {
        let (_dir, store) = store();
        let plan = |sql: String| -> Vec<String> {
            store.read_blocking(|c| c.query_map(&format!("EXPLAIN QUERY PLAN {sql}"), (), |r| r.get(3))).unwrap()
        };
        let head = plan(queue_head_sql(64, ""));
        // Each band reads its own index in order, never the whole table.
        assert!(head.iter().any(|l| l.contains("USING INDEX items_waiting")), "{head:?}");
        assert!(head.iter().any(|l| l.contains("USING INDEX items_prioritized")), "{head:?}");
        assert!(head.iter().all(|l| !l.starts_with("SCAN items") || l.contains("INDEX items_")), "{head:?}");
        // One sort, of the candidates; none inside either band. Candidates
        // are not looked up again; only their batches are.
        assert_eq!(head.iter().filter(|l| l.contains("TEMP B-TREE")).count(), 1, "{head:?}");
        assert!(head.iter().all(|l| !l.starts_with("SEARCH items") && !l.starts_with("SEARCH i ")), "{head:?}");
        assert!(head.iter().any(|l| l.starts_with("SEARCH b USING INDEX")), "{head:?}");
        // A key's daily use reads the index that holds no charges; a ledger
        // page reads the account's entries newest first, with no sort; a
        // balance reads the account's sums, never the ledger.
        let daily = plan(crate::store::accounts::DAILY_USE.replace("?1", "'k'").replace("?2", "1"));
        assert!(daily.iter().all(|l| l.contains("ledger_by_key_day")), "{daily:?}");
        let page = plan(
            crate::store::accounts::LEDGER_PAGE
                .replace("?1", "'a'")
                .replace("?2", "99")
                .replace("?3", "NULL")
                .replace("?4", "21"),
        );
        assert_eq!(page, vec!["SEARCH ledger USING INDEX ledger_pages (account_id=? AND id<?)".to_string()]);
        let balance = plan(crate::store::accounts::BALANCE.replace("?1", "'a'"));
        assert!(balance.iter().all(|l| l.contains("balances") && !l.contains("ledger")), "{balance:?}");
        // A batch's items are a range of the items' key: no index of their
        // own (schema step 19), and no read of other batches' items.
        let batch = plan(
            "SELECT id, url, state, failed_reason FROM items WHERE id BETWEEN 'a' AND 'b' AND batch_id = 'x' ORDER BY id"
                .into(),
        );
        assert_eq!(batch, vec!["SEARCH items USING INDEX sqlite_autoindex_items_1 (id>? AND id<?)".to_string()]);
        let counts = plan("SELECT COUNT(*) FROM items WHERE state = 'active'".into());
        assert!(counts.iter().all(|l| l.contains("items_active")), "{counts:?}");
        let due = plan("SELECT id FROM items WHERE state = 'delayed' AND run_at <= 5".into());
        assert!(due.iter().all(|l| l.contains("items_delayed")), "{due:?}");
        let debts = plan(SETTLE_DUE.replace("?1", "10").replace("LOCK", ""));
        assert_eq!(debts, vec!["SEARCH items USING INDEX items_settlement (settlement_due>?)".to_string()]);
    }

    fn next(store: &Store) -> Option<String> {
        store.write_blocking(|tx| queue_head(tx, 1)).unwrap().pop().map(|r| r.id)
    }

    /// The accounts of the queue's head, in claim order.
    fn head_accounts(store: &Store, n: usize) -> Vec<String> {
        store.write_blocking(move |tx| queue_head(tx, n)).unwrap().into_iter().map(|r| r.account_id).collect()
    }

    /// A long batch of one account and a short one of another submitted
    /// after it: the other account's items come in turn, one for one, not
    /// after the whole long batch; each account's own items keep their
    /// order, and a third account with nothing queued joins at the head.
    #[test]
    fn accounts_take_turns_at_the_head_of_the_queue() {
        let (_dir, store) = store();
        let a = caller(&store, 10_000_000, None);
        let b = caller(&store, 10_000_000, None);
        let c = caller(&store, 10_000_000, None);
        submit(&store, &a, 150, None).unwrap();
        submit(&store, &b, 3, None).unwrap();
        let (ta, tb) = (a.account_id.clone(), b.account_id.clone());
        // B's first comes right after the head item A's queue had (its tag
        // 1: B's are numbered on from it), then one for one.
        assert_eq!(head_accounts(&store, 7), [&ta, &ta, &tb, &ta, &tb, &ta, &tb].map(String::clone));
        // A's items stay in their batch's order among themselves.
        let urls: Vec<String> = store
            .write_blocking(|tx| queue_head(tx, 20))
            .unwrap()
            .into_iter()
            .filter(|r| r.account_id == ta)
            .map(|r| r.url)
            .collect();
        assert_eq!(urls[..4], ["http://t/0", "http://t/1", "http://t/2", "http://t/3"].map(String::from));
        submit(&store, &c, 1, None).unwrap();
        // After the head item and the one item of each account at its turn.
        let head = head_accounts(&store, 4);
        assert_eq!(head[3], c.account_id, "an account with nothing queued joins at the head: {head:?}");
        // The priority band keeps its contract order (after every item
        // without one), accounts in turn within a priority.
        submit(&store, &a, 5, Some(1)).unwrap();
        submit(&store, &b, 1, Some(1)).unwrap();
        let all = store.write_blocking(|tx| queue_head(tx, 200)).unwrap();
        let prioritized: Vec<&str> =
            all.iter().filter(|r| r.item.priority.is_some()).map(|r| r.account_id.as_str()).collect();
        assert_eq!(prioritized[..3], [ta.as_str(), ta.as_str(), tb.as_str()], "{prioritized:?}");
        assert!(all[..all.len() - 6].iter().all(|r| r.item.priority.is_none()), "no priority first");
    }

    /// The turn's base is two reads of indexes, never of the whole table.
    #[test]
    fn a_submissions_turn_is_read_from_indexes() {
        let (_dir, store) = store();
        for (priority, band) in [(None, "items_waiting"), (Some(3), "items_prioritized")] {
            let sql = fair_base_sql(priority).replace("?1", "'a'").replace("?2", "3");
            let plan: Vec<String> = store
                .read_blocking(move |c| c.query_map(&format!("EXPLAIN QUERY PLAN {sql}"), (), |r| r.get(3)))
                .unwrap();
            assert!(plan.iter().any(|l| l.contains(band)), "{plan:?}");
            assert!(plan.iter().any(|l| l.contains("items_account_queued")), "{plan:?}");
            assert!(plan.iter().all(|l| !l.starts_with("SCAN items") || l.contains("USING INDEX")), "{plan:?}");
            for in_flight in ["items_active", "items_delayed"] {
                assert!(plan.iter().any(|l| l.contains(in_flight)), "{plan:?}");
            }
        }
    }

    pub(crate) fn balance(store: &Store, c: &Caller) -> grid_core::ledger::Balance {
        let id = c.account_id.clone();
        store.read_blocking(move |conn| accounts::balance(conn, &id)).unwrap()
    }

    /// The balances `append_all` keeps are the ledger's sums per account and
    /// kind: entries of several accounts and kinds in one statement, and a
    /// settlement written twice (ignored by the ledger, so not added twice).
    #[test]
    fn balances_are_the_ledgers_sums_even_when_a_settlement_is_written_twice() {
        let (_d, s) = store();
        let (a, b) = (caller(&s, 10_000, None), caller(&s, 5_000, None));
        let (ka, kb) = (a.key_id.as_deref(), b.key_id.as_deref());
        fn entry<'a>(
            account_id: &'a str,
            key_id: Option<&'a str>,
            kind: EntryKind,
            amount: i64,
            subject: &'a str,
        ) -> accounts::Entry<'a> {
            accounts::Entry { account_id, key_id, kind, amount, subject: Some(subject), reservation_day: Some(1) }
        }
        let (ida, idb) = (a.account_id.as_str(), b.account_id.as_str());
        let first = [
            entry(ida, ka, EntryKind::Reserve, 300, "bt_a"),
            entry(idb, kb, EntryKind::Reserve, 200, "bt_b"),
            entry(ida, ka, EntryKind::Charge, 120, "it_1"),
            entry(ida, ka, EntryKind::Charge, 120, "it_2"),
            entry(idb, kb, EntryKind::Release, 200, "it_3"),
        ];
        s.write_blocking(|tx| accounts::append_all(tx, &first, T)).unwrap();
        // it_2's charge again, beside a new release: the charge is not written twice.
        let again = [entry(ida, ka, EntryKind::Charge, 120, "it_2"), entry(ida, ka, EntryKind::Release, 60, "it_4")];
        s.write_blocking(|tx| accounts::append_all(tx, &again, T)).unwrap();
        let sums = |sql: &str| -> Vec<(String, String, i64)> {
            s.read_blocking(|c| c.query_map(sql, (), |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))).unwrap()
        };
        assert_eq!(
            sums("SELECT account_id, kind, CAST(SUM(amount) AS BIGINT) FROM balances GROUP BY 1, 2 ORDER BY 1, 2"),
            sums("SELECT account_id, kind, CAST(SUM(amount) AS BIGINT) FROM ledger GROUP BY account_id, kind ORDER BY 1, 2")
        );
        // a: 10,000 credited, 240 charged; 300 reserved, less the 240 charged
        // and 60 released. b: 200 reserved and released.
        assert_eq!((balance(&s, &a).credit_micros, balance(&s, &a).reserved_micros), (10_000 - 240, 300 - 60 - 240));
        assert_eq!((balance(&s, &b).credit_micros, balance(&s, &b).reserved_micros), (5_000, 0));
    }

    /// An end's settlements are plain inserts (`Settling::Fenced`): their
    /// sums are kept as the idempotent path keeps them, and a settlement
    /// already in the ledger fails the whole transaction (the unique index)
    /// instead of being skipped, so a double charge cannot pass unseen.
    #[test]
    fn fenced_settlements_are_summed_and_a_duplicate_fails_the_transaction() {
        let (_d, s) = store();
        let c = caller(&s, 10_000, None);
        let entry = |kind, amount, subject| accounts::Entry {
            account_id: &c.account_id,
            key_id: c.key_id.as_deref(),
            kind,
            amount,
            subject: Some(subject),
            reservation_day: Some(1),
        };
        let fenced = |entries: &[accounts::Entry]| {
            s.write_blocking(|tx| accounts::append_all_with(tx, vec![], entries, accounts::Settling::Fenced, T))
        };
        fenced(&[
            entry(EntryKind::Reserve, 300, "bt_a"),
            entry(EntryKind::Charge, 120, "it_1"),
            entry(EntryKind::Release, 180, "it_2"),
        ])
        .unwrap();
        assert_eq!((balance(&s, &c).credit_micros, balance(&s, &c).reserved_micros), (10_000 - 120, 0));
        // it_1's charge again, beside a new reservation: neither is written.
        let again = fenced(&[entry(EntryKind::Reserve, 50, "bt_b"), entry(EntryKind::Charge, 120, "it_1")]);
        assert!(again.is_err(), "a second charge of one item was written: {again:?}");
        assert_eq!((balance(&s, &c).credit_micros, balance(&s, &c).reserved_micros), (10_000 - 120, 0));
        let rows: i64 = s.read_blocking(|c| c.query_row("SELECT COUNT(*) FROM ledger", (), |r| r.get(0))).unwrap();
        assert_eq!(rows, 4, "the credit and the first three entries, nothing of the failed transaction");
    }

    #[test]
    fn refused_batch_queues_and_reserves_nothing() {
        let (_d, s) = store();
        let c = caller(&s, 1_000, None);
        match submit(&s, &c, 9, None) {
            Err(ItemError::Transition(TransitionError::Refused(ApiError::InsufficientCredit {
                required_micros,
                available_micros,
            }))) => {
                assert_eq!((required_micros, available_micros), (1_080, 1_000));
            }
            other => panic!("expected insufficient credit, got {other:?}"),
        }
        assert!(next(&s).is_none());
        assert_eq!(balance(&s, &c).reserved_micros, 0);
        let capped = caller(&s, 1_000_000, Some(240));
        submit(&s, &capped, 2, None).unwrap();
        assert!(matches!(
            submit(&s, &capped, 1, None),
            Err(ItemError::Transition(TransitionError::Refused(ApiError::DailyCapExceeded { .. })))
        ));
    }

    /// A debt as a server before charges at the end wrote it, for the pass.
    pub(crate) fn owe(tx: &Conn, id: &str, owed: Settlement) -> StoreResult<()> {
        tx.execute("UPDATE items SET settlement_due = ?1 WHERE id = ?2", params![owed.as_str(), id])?;
        Ok(())
    }

    #[test]
    fn settlement_charges_once_even_when_run_twice() {
        let (_d, s) = store();
        let c = caller(&s, 10_000, None);
        submit(&s, &c, 2, None).unwrap();
        let (a, b) = s
            .read_blocking(|c| {
                let ids: Vec<String> = c.query_map("SELECT id FROM items", (), |r| r.get(0))?.into_iter().collect();
                Ok((ids[0].clone(), ids[1].clone()))
            })
            .unwrap();
        let (a2, b2) = (a.clone(), b.clone());
        s.write_blocking(move |tx| {
            for (id, owed) in [(a2, Settlement::Charge), (b2, Settlement::Release)] {
                let mut row = load_item(tx, &id)?.unwrap();
                row.item.state = if owed == Settlement::Charge { ItemState::Completed } else { ItemState::Failed };
                row.item.billable = false;
                save_item(tx, &id, &row.item, T)?;
                owe(tx, &id, owed)?;
            }
            Ok::<_, StoreError>(())
        })
        .unwrap();
        assert_eq!(s.write_blocking(|tx| settle_due(tx, T, 100)).unwrap(), 2);
        assert_eq!(s.write_blocking(|tx| settle_due(tx, T, 100)).unwrap(), 0);
        // Even a settlement written again by hand is absorbed by the unique index.
        s.write_blocking(|tx| {
            let e = Entry {
                account_id: &c.account_id,
                key_id: None,
                kind: EntryKind::Charge,
                amount: 120,
                subject: Some(&a),
                reservation_day: None,
            };
            accounts::append(tx, &e, T)
        })
        .unwrap();
        let bal = balance(&s, &c);
        assert_eq!((bal.credit_micros, bal.reserved_micros), (10_000 - 120, 0));
    }

    /// The pass writes its entries in chunks of several statements' worth:
    /// each item still gets exactly one entry, at its price.
    #[test]
    fn settlement_in_chunks_writes_one_entry_per_item() {
        let (_d, s) = store();
        let c = caller(&s, 1_000_000, None);
        let n = 2 * 128 + 7;
        submit(&s, &c, n, None).unwrap();
        s.write_blocking(|tx| {
            let ids: Vec<String> = tx.query_map("SELECT id FROM items", (), |r| r.get(0))?;
            for (i, id) in ids.iter().enumerate() {
                let mut row = load_item(tx, id)?.unwrap();
                let owed = if i % 3 == 0 { Settlement::Release } else { Settlement::Charge };
                row.item.billable = false;
                save_item(tx, id, &row.item, T)?;
                owe(tx, id, owed)?;
            }
            Ok::<_, StoreError>(())
        })
        .unwrap();
        assert_eq!(s.write_blocking(|tx| settle_due(tx, T, n - 5)).unwrap(), n - 5);
        assert_eq!(s.write_blocking(|tx| settle_due(tx, T, n)).unwrap(), 5);
        assert_eq!(s.write_blocking(|tx| settle_due(tx, T, n)).unwrap(), 0);
        let per_item: Vec<(String, i64, i64)> = s
            .read_blocking(|conn| {
                conn.query_map(
                    "SELECT subject, CAST(COUNT(*) AS BIGINT), CAST(SUM(amount) AS BIGINT) FROM ledger
                      WHERE kind IN ('charge', 'release') GROUP BY subject",
                    (),
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
            })
            .unwrap();
        assert_eq!(per_item.len(), n);
        assert!(per_item.iter().all(|(_, entries, amount)| (*entries, *amount) == (1, 120)), "{per_item:?}");
        let bal = balance(&s, &c);
        let released = n.div_ceil(3) as i64;
        assert_eq!((bal.credit_micros, bal.reserved_micros), (1_000_000 - 120 * (n as i64 - released), 0));
    }

    /// A batch stored before schema step 19 made its ids with a ULID
    /// generator that drew new random bits each millisecond, so other
    /// batches' items may fall between its first and last id: its view and
    /// its counts still hold only its own items.
    #[test]
    fn a_batch_whose_range_holds_other_items_lists_only_its_own() {
        let (_d, s) = store();
        let c = caller(&s, 100_000, None);
        let a = submit(&s, &c, 3, None).unwrap().batch_id;
        let b = submit(&s, &c, 2, None).unwrap().batch_id;
        // `a`'s range widened to hold `b`'s items too.
        let (wa, wb) = (a.clone(), b.clone());
        s.write_blocking(move |tx| {
            tx.execute(
                "UPDATE batches SET first_item = (SELECT MIN(id) FROM items), last_item = (SELECT MAX(id) FROM items)
                  WHERE id = ?1",
                [&wa],
            )?;
            let n: i64 = tx.query_row(
                "SELECT COUNT(*) FROM items i JOIN batches a ON a.id = ?1
                  WHERE i.batch_id = ?2 AND i.id BETWEEN a.first_item AND a.last_item",
                (&wa, &wb),
                |r| r.get(0),
            )?;
            assert_eq!(n, 2, "the widened range holds the other batch's items");
            StoreResult::Ok(())
        })
        .unwrap();
        let (account, batch) = (c.account_id.clone(), a.clone());
        let view = s.read_blocking(move |conn| batch_view(conn, &account, &batch)).unwrap().unwrap();
        assert_eq!((view.total, view.jobs.len()), (3, 3));
        let account = c.account_id.clone();
        let (listed, _) = s.read_blocking(move |conn| list_batches(conn, &account, None, 10)).unwrap();
        // Two batches made in one millisecond list in either order.
        let totals: BTreeMap<String, u32> = listed.into_iter().map(|b| (b.batch_id, b.total)).collect();
        assert_eq!(totals, BTreeMap::from([(a, 3), (b, 2)]));
    }

    /// A meta rides in its item's other file's row (schema step 20) and
    /// reads back through `item_files` as a file of its own; a meta with
    /// no other file, or of another content type, is a row of its own.
    #[test]
    fn a_meta_rides_in_its_items_other_file_and_reads_back_whole() {
        let (_d, s) = store();
        let c = caller(&s, 10_000, None);
        submit(&s, &c, 3, None).unwrap();
        let ids: Vec<String> = s.write_blocking(|tx| queue_head(tx, 3)).unwrap().into_iter().map(|r| r.id).collect();
        let file = |id: &str, kind: ArtifactKind, content_type: &str, bytes: &[u8]| PublishedFile {
            kind,
            storage_name: format!("db:{id}/{}", kind.as_str()),
            inline: Some(bytes.to_vec()),
            sha256: crate::ids::sha256_hex(bytes),
            byte_length: bytes.len() as i64,
            content_type: content_type.into(),
        };
        let json = ArtifactKind::Meta.default_content_type();
        let (a, b, d) = (ids[0].clone(), ids[1].clone(), ids[2].clone());
        // The meta before its carrier, and the items' files interleaved.
        let files = vec![
            file(&a, ArtifactKind::Meta, json, b"{\"a\":1}"),
            file(&b, ArtifactKind::Meta, json, b"{\"b\":2}"),
            file(&d, ArtifactKind::Html, "text/html", b"<p>d</p>"),
            file(&a, ArtifactKind::Body, "application/octet-stream", b"body of a"),
            file(&d, ArtifactKind::Meta, "text/plain", b"not json"),
        ];
        let owned = files.clone();
        let ids3 = [a.clone(), b.clone(), d.clone()];
        s.write_blocking(move |tx| {
            let publish: Vec<(&str, Cow<PublishedFile>)> = owned
                .iter()
                .zip([&ids3[0], &ids3[1], &ids3[2], &ids3[0], &ids3[2]])
                .map(|(f, id)| (id.as_str(), Cow::Borrowed(f)))
                .collect();
            tx.query_all(file_inserts(tx.dialect(), &publish, T))?;
            StoreResult::Ok(())
        })
        .unwrap();
        let rows: i64 = s.read_blocking(|c| c.query_row("SELECT COUNT(*) FROM artifacts", (), |r| r.get(0))).unwrap();
        assert_eq!(rows, 4, "a's meta rides with its body; b's and d's are rows of their own");
        for (id, f) in [&a, &b, &d, &a, &d].into_iter().zip(&files) {
            let (id, kind) = (id.clone(), f.kind);
            let read = s.read_blocking(move |c| published_file(c, &id, kind, 1 << 20)).unwrap().unwrap();
            let got = (read.storage_name, read.sha256, read.byte_length, read.content_type, read.inline);
            let want =
                (f.storage_name.clone(), f.sha256.clone(), f.byte_length, f.content_type.clone(), f.inline.clone());
            assert_eq!(got, want);
        }
        let (account, id) = (c.account_id.clone(), a.clone());
        let view = s.read_blocking(move |c| item_view(c, &account, &id)).unwrap().unwrap();
        assert_eq!(view.artifacts.keys().collect::<Vec<_>>(), ["body", "meta"]);
        let id = a.clone();
        let slice = s.read_blocking(move |c| file_slice(c, &id, ArtifactKind::Meta, 1, 3)).unwrap();
        assert_eq!(slice.as_deref(), Some(&b"\"a\""[..]));
        // The riding meta is found on the artifacts' key, not by a scan.
        let plan: Vec<String> = s
            .read_blocking(|c| {
                c.query_map(
                    "EXPLAIN QUERY PLAN SELECT sha256 FROM item_files WHERE item_id = 'x' AND kind = 'meta'",
                    (),
                    |r| r.get(3),
                )
            })
            .unwrap();
        assert!(plan.iter().all(|l| !l.starts_with("SCAN artifacts")), "{plan:?}");
    }

    #[test]
    fn other_accounts_see_nothing() {
        let (_d, s) = store();
        let owner = caller(&s, 10_000, None);
        let other = caller(&s, 10_000, None);
        let created = submit(&s, &owner, 1, None).unwrap();
        let (bid, oid) = (created.batch_id.clone(), other.account_id.clone());
        assert!(s.read_blocking(move |c| batch_view(c, &oid, &bid)).unwrap().is_none());
        let item = next(&s).unwrap();
        let oid = other.account_id.clone();
        let iid = item.clone();
        assert!(s.read_blocking(move |c| item_view(c, &oid, &iid)).unwrap().is_none());
        let oid = other.account_id.clone();
        let r = s.read_blocking(move |c| Ok(check_artifact(c, &oid, &item, ArtifactKind::Meta))).unwrap();
        assert_eq!(ApiError::from(r.unwrap_err()), ApiError::UnknownItemOrJob);
    }
}
