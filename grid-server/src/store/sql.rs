//! The seam between the store's SQL and the database that runs it.
//!
//! Store modules write each statement once against [`Sql`]: placeholders
//! `?1`..`?N`, integers as `i64` (booleans as 0/1), text as `String`, bytes
//! as `Vec<u8>`, in the SQL both SQLite and PostgreSQL accept (upserts with
//! `ON CONFLICT`, sums cast to `BIGINT`, `NULLS FIRST` spelled out).
//! `sqlite.rs` and `postgres.rs` run it; nothing above this module knows
//! which one does. The few statements the two dialects cannot share ask
//! [`Sql::dialect`].

use std::sync::OnceLock;

use super::{StoreError, StoreResult};

/// One value crossing the seam, in either direction.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
    /// PostgreSQL only: an array parameter (`= ANY(?1)`, `unnest`), so one
    /// statement serves any number of rows (`ManyRows`, `items::ForRows`). SQLite
    /// has no arrays and refuses one.
    Array(Vec<Value>),
}

/// The two databases a store can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// One statement and its parameters, for `Sql::query_all`.
pub type Statement<'a> = (&'a str, Vec<Value>);

/// What reads may do on a connection of either backend: query. Reads get
/// only this (`ReadConn`, `Store::read`), and their connections refuse
/// writes at the database too (SQLite's `query_only`, PostgreSQL's
/// `default_transaction_read_only`).
pub trait Query {
    fn dialect(&self) -> Dialect;
    /// Runs one query; answers every row.
    fn query_values(&self, sql: &str, params: Vec<Value>) -> StoreResult<Vec<Row>>;
    /// Runs `statements` in order, each as `query_values`; answers each
    /// one's rows. PostgreSQL is sent them all before the first answer is
    /// read (pipelined: one round trip, where one each took as many); SQLite
    /// runs them one after the other, each a function call.
    fn query_all(&self, statements: Vec<Statement>) -> StoreResult<Vec<Vec<Row>>> {
        statements.into_iter().map(|(sql, params)| self.query_values(sql, params)).collect()
    }
}

/// A write transaction of either backend: it queries and writes.
pub trait Sql: Query {
    /// Runs one statement; answers the number of rows it changed.
    fn execute_values(&self, sql: &str, params: Vec<Value>) -> StoreResult<usize>;
    /// Runs `statements` whose answers nobody reads (writes without
    /// `RETURNING`). PostgreSQL's group commits send them at once and read
    /// their answers with the next statement's or the commit's, one round
    /// trip less (`postgres::PgConn`): a failure of theirs is answered
    /// there, or by `flush`. Elsewhere, as here, they run at once.
    fn send_all(&self, statements: Vec<Statement>) -> StoreResult<()> {
        self.query_all(statements).map(drop)
    }
    /// Reads what `send_all` left unanswered; its first failure, if any.
    fn flush(&self) -> StoreResult<()> {
        Ok(())
    }
}

/// What reads take: a reader connection (`Store::read`, `Store::lookup`),
/// which has no way to write. A write transaction is one too (`&Conn`
/// coerces to `&ReadConn`), so a read function serves both.
pub type ReadConn<'a> = dyn Query + 'a;

/// What writes take: the open write transaction (`Store::write`).
pub type Conn<'a> = dyn Sql + 'a;

/// A write transaction reads as a reader does (`query_row`, `query_map`).
impl<'a> std::ops::Deref for Conn<'a> {
    type Target = ReadConn<'a>;

    fn deref(&self) -> &ReadConn<'a> {
        self
    }
}

impl ReadConn<'_> {
    /// The first row of a query through `f`; `StoreError::NoRow` when there
    /// is none (see [`Optional`]).
    pub fn query_row<T>(
        &self,
        sql: &str,
        params: impl Params,
        f: impl FnOnce(&Row) -> StoreResult<T>,
    ) -> StoreResult<T> {
        match self.query_values(sql, params.values())?.first() {
            Some(row) => f(row),
            None => Err(StoreError::NoRow),
        }
    }

    /// Every row of a query through `f`.
    pub fn query_map<T>(
        &self,
        sql: &str,
        params: impl Params,
        f: impl FnMut(&Row) -> StoreResult<T>,
    ) -> StoreResult<Vec<T>> {
        self.query_values(sql, params.values())?.iter().map(f).collect()
    }
}

impl Conn<'_> {
    /// `clause`, a row-locking clause (`FOR UPDATE`, `FOR UPDATE SKIP
    /// LOCKED`), on PostgreSQL, where transactions ordered by their rows
    /// (`Order::Rows`) run at once and lock what they check before they
    /// check it; nothing on SQLite, whose one writer needs no row locks (and
    /// which has no such clause).
    pub fn row_lock(&self, clause: &'static str) -> &'static str {
        match self.dialect() {
            Dialect::Postgres => clause,
            Dialect::Sqlite => "",
        }
    }

    /// Locks the rows `select` reads with `clause` until the transaction
    /// ends, on PostgreSQL (`row_lock`); reads nothing on SQLite, whose one
    /// writer needs no row locks.
    pub fn lock_rows(&self, select: &str, params: impl Params, clause: &'static str) -> StoreResult<()> {
        if let Some(sql) = self.lock_rows_sql(select, clause) {
            self.query_values(&sql, params.values())?;
        }
        Ok(())
    }

    /// The statement `lock_rows` runs, for a caller that sends it with
    /// others (`query_all`); none on SQLite.
    pub fn lock_rows_sql(&self, select: &str, clause: &'static str) -> Option<String> {
        let lock = self.row_lock(clause);
        (!lock.is_empty()).then(|| format!("{select} {lock}"))
    }

    pub fn execute(&self, sql: &str, params: impl Params) -> StoreResult<usize> {
        self.execute_values(sql, params.values())
    }
}

/// `query_row(..).optional()`: no row is `None`, other errors stand.
pub trait Optional<T> {
    fn optional(self) -> StoreResult<Option<T>>;
}

impl<T> Optional<T> for StoreResult<T> {
    fn optional(self) -> StoreResult<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(StoreError::NoRow) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// One row of a query's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    values: Vec<Value>,
}

impl Row {
    pub fn new(values: Vec<Value>) -> Row {
        Row { values }
    }

    /// Column `i` as `T`; a missing column or a value of another type is
    /// `StoreError::Invalid` naming the column.
    pub fn get<T: FromValue>(&self, i: usize) -> StoreResult<T> {
        let v = self.values.get(i).ok_or_else(|| StoreError::Invalid(format!("no column {i}")))?;
        T::from_value(v).map_err(|e| StoreError::Invalid(format!("column {i}: {e}")))
    }

    /// Column `i` as `T`, moved out of the row (which keeps NULL there):
    /// text and bytes without a copy, for rows read by the thousand.
    pub fn take<T: FromValue>(&mut self, i: usize) -> StoreResult<T> {
        let v = self.values.get_mut(i).ok_or_else(|| StoreError::Invalid(format!("no column {i}")))?;
        T::from_owned(std::mem::replace(v, Value::Null)).map_err(|e| StoreError::Invalid(format!("column {i}: {e}")))
    }
}

/// A Rust value as a parameter.
pub trait ToValue {
    fn to_value(&self) -> Value;
}

/// A column's value as a Rust value.
pub trait FromValue: Sized {
    fn from_value(v: &Value) -> Result<Self, String>;

    /// The same from a value the caller gives up.
    fn from_owned(v: Value) -> Result<Self, String> {
        Self::from_value(&v)
    }
}

impl ToValue for Value {
    fn to_value(&self) -> Value {
        self.clone()
    }
}

impl ToValue for i64 {
    fn to_value(&self) -> Value {
        Value::Int(*self)
    }
}

macro_rules! widen_to_value {
    ($($t:ty),*) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> Value {
                Value::Int(i64::from(*self))
            }
        }
    )*};
}
widen_to_value!(i32, u32, u16, u8, bool);

impl ToValue for u64 {
    fn to_value(&self) -> Value {
        Value::Int(i64::try_from(*self).unwrap_or(i64::MAX))
    }
}

impl ToValue for usize {
    fn to_value(&self) -> Value {
        Value::Int(i64::try_from(*self).unwrap_or(i64::MAX))
    }
}

impl ToValue for f64 {
    fn to_value(&self) -> Value {
        Value::Real(*self)
    }
}

impl ToValue for str {
    fn to_value(&self) -> Value {
        Value::Text(self.to_string())
    }
}

impl ToValue for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
}

impl ToValue for [u8] {
    fn to_value(&self) -> Value {
        Value::Blob(self.to_vec())
    }
}

impl ToValue for Vec<u8> {
    fn to_value(&self) -> Value {
        Value::Blob(self.clone())
    }
}

impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}

impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Value {
        match self {
            Some(v) => v.to_value(),
            None => Value::Null,
        }
    }
}

impl FromValue for Value {
    fn from_value(v: &Value) -> Result<Self, String> {
        Ok(v.clone())
    }
}

impl FromValue for i64 {
    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Int(i) => Ok(*i),
            other => Err(format!("expected an integer, found {other:?}")),
        }
    }
}

macro_rules! narrow_from_value {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            fn from_value(v: &Value) -> Result<Self, String> {
                let i = i64::from_value(v)?;
                <$t>::try_from(i).map_err(|_| format!("{i} out of range for {}", stringify!($t)))
            }
        }
    )*};
}
narrow_from_value!(i32, u32, u16, u8, u64, usize);

impl FromValue for bool {
    fn from_value(v: &Value) -> Result<Self, String> {
        Ok(i64::from_value(v)? != 0)
    }
}

impl FromValue for f64 {
    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Real(f) => Ok(*f),
            Value::Int(i) => Ok(*i as f64),
            other => Err(format!("expected a number, found {other:?}")),
        }
    }
}

impl FromValue for String {
    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Text(s) => Ok(s.clone()),
            other => Err(format!("expected text, found {other:?}")),
        }
    }

    fn from_owned(v: Value) -> Result<Self, String> {
        match v {
            Value::Text(s) => Ok(s),
            other => Err(format!("expected text, found {other:?}")),
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Blob(b) => Ok(b.clone()),
            Value::Text(s) => Ok(s.as_bytes().to_vec()),
            other => Err(format!("expected bytes, found {other:?}")),
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }

    fn from_owned(v: Value) -> Result<Self, String> {
        match v {
            Value::Null => Ok(None),
            v => T::from_owned(v).map(Some),
        }
    }
}

/// The parameters of one statement: `()`, a tuple, an array, or
/// [`params!`](crate::params) for a list of mixed types.
pub trait Params {
    fn values(self) -> Vec<Value>;
}

impl Params for () {
    fn values(self) -> Vec<Value> {
        vec![]
    }
}

impl Params for Vec<Value> {
    fn values(self) -> Vec<Value> {
        self
    }
}

impl<T: ToValue, const N: usize> Params for [T; N] {
    fn values(self) -> Vec<Value> {
        self.iter().map(ToValue::to_value).collect()
    }
}

impl<T: ToValue> Params for &[T] {
    fn values(self) -> Vec<Value> {
        self.iter().map(ToValue::to_value).collect()
    }
}

macro_rules! tuple_params {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: ToValue),+> Params for ($($name,)+) {
            fn values(self) -> Vec<Value> {
                vec![$(self.$idx.to_value()),+]
            }
        }
    };
}
tuple_params!(A 0);
tuple_params!(A 0, B 1);
tuple_params!(A 0, B 1, C 2);
tuple_params!(A 0, B 1, C 2, D 3);
tuple_params!(A 0, B 1, C 2, D 3, E 4);
tuple_params!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_params!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_params!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_params!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_params!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_params!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_params!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);

/// Parameters of mixed types beyond a tuple's reach, as `Vec<Value>`.
#[macro_export]
macro_rules! params {
    ($($v:expr),* $(,)?) => {
        vec![$($crate::store::sql::ToValue::to_value(&$v)),*]
    };
}

/// An expression for the text of a top-level member of a JSON text column
/// (`true`/`false` for booleans): one of the few things the dialects spell
/// differently.
pub fn json_text(dialect: Dialect, column: &str, member: &str) -> String {
    match dialect {
        Dialect::Sqlite => format!(
            "(CASE json_type({column}, '$.{member}') WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' \
             ELSE json_extract({column}, '$.{member}') END)"
        ),
        Dialect::Postgres => format!("(CAST({column} AS JSONB) ->> '{member}')"),
    }
}

/// The statement in PostgreSQL's placeholder spelling: `?N` becomes `$N`
/// outside quoted strings and identifiers.
pub fn numbered_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quote: Option<char> = None;
    for c in sql.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (None, '\'' | '"') => quote = Some(c),
            (None, '?') => {
                out.push('$');
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

/// `?first, ?first+1, ...`: `n` numbered placeholders.
pub fn placeholders(first: usize, n: usize) -> String {
    (first..first + n).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", ")
}

/// `(?1, ..., ?width), (?width+1, ...), ...`: the `VALUES` of a multi-row
/// insert of `n` rows of `width` columns, numbered in row order.
pub fn value_rows(n: usize, width: usize) -> String {
    (0..n).map(|i| format!("({})", placeholders(i * width + 1, width))).collect::<Vec<_>>().join(", ")
}

/// The sizes `chunks` cuts lists into.
pub const CHUNKS: [usize; 4] = [128, 32, 8, 1];

/// `items` in chunks of a few fixed sizes (`CHUNKS`), so that a few
/// statements, each prepared once, serve lists of any length.
pub fn chunks<T>(items: &[T]) -> impl Iterator<Item = &[T]> {
    let mut rest = items;
    chunk_lens(items.len()).map(move |n| {
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        chunk
    })
}

/// The lengths of the chunks `chunks` cuts `n` items into, largest first.
pub fn chunk_lens(mut n: usize) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        let len = CHUNKS.into_iter().find(|&c| c <= n)?;
        n -= len;
        Some(len)
    })
}

/// The text of a statement for a chunk of `n` items (`n` one of `CHUNKS`),
/// built once per process: a chunk of 128 files is a thousand placeholders.
pub fn chunk_sql(texts: &'static OnceLock<[String; 4]>, n: usize, build: impl Fn(usize) -> String) -> &'static str {
    let texts = texts.get_or_init(|| CHUNKS.map(build));
    let i = CHUNKS.iter().position(|&c| c == n).unwrap_or(CHUNKS.len() - 1);
    &texts[i]
}

/// A multi-row insert of one shape, `INSERT INTO table (columns) <rows>
/// <tail>`, written once for both stores. SQLite is sent multi-row `VALUES`
/// in chunks (`CHUNKS`, each text built once); PostgreSQL one statement
/// whatever the count, each column's values one array parameter
/// (`SELECT * FROM unnest(?1::text[], ...)`), so a statement's own cost (its
/// bind, its executor's start, its answer sent back) is paid once per
/// insert, not once per chunk: a group of 127 ends took 13 statements per
/// table in chunks.
pub struct ManyRows {
    /// `INSERT INTO table (columns)`.
    head: &'static str,
    /// PostgreSQL's type of each column, in order (`text`, `bigint`, ...).
    types: &'static [&'static str],
    /// What follows the rows (`ON CONFLICT ...`, `RETURNING ...`), if anything.
    tail: &'static str,
    sqlite: OnceLock<[String; 4]>,
    postgres: OnceLock<String>,
}

impl ManyRows {
    pub const fn new(head: &'static str, types: &'static [&'static str], tail: &'static str) -> ManyRows {
        ManyRows { head, types, tail, sqlite: OnceLock::new(), postgres: OnceLock::new() }
    }

    /// The statements that insert `values`: rows of `types.len()` values
    /// each, one after the other.
    pub fn statements(&'static self, dialect: Dialect, values: Vec<Value>) -> Vec<Statement<'static>> {
        let width = self.types.len();
        match dialect {
            Dialect::Sqlite => {
                // Each chunk takes its rows' values from `values`, moved
                // (an end's files carry their bytes), not copied.
                let rows = values.len() / width;
                let mut values = values.into_iter();
                chunk_lens(rows)
                    .map(|len| {
                        let sql = chunk_sql(&self.sqlite, len, |n| {
                            format!("{} VALUES {} {}", self.head, value_rows(n, width), self.tail)
                        });
                        (sql, values.by_ref().take(len * width).collect())
                    })
                    .collect()
            }
            Dialect::Postgres => {
                if values.is_empty() {
                    return vec![];
                }
                let sql = self.postgres.get_or_init(|| {
                    let arrays: Vec<String> =
                        self.types.iter().enumerate().map(|(i, ty)| format!("?{}::{ty}[]", i + 1)).collect();
                    format!("{} SELECT * FROM unnest({}) {}", self.head, arrays.join(", "), self.tail)
                });
                let mut columns: Vec<Vec<Value>> = vec![Vec::with_capacity(values.len() / width); width];
                for (i, v) in values.into_iter().enumerate() {
                    columns[i % width].push(v);
                }
                vec![(sql.as_str(), columns.into_iter().map(Value::Array).collect())]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_rows_keep_their_values_in_order_on_both_stores() {
        static ROWS: ManyRows = ManyRows::new("INSERT INTO t (a, b)", &["bigint", "text"], "");
        let values: Vec<Value> = (0..130i64).flat_map(|i| [Value::Int(i), Value::Text(format!("r{i}"))]).collect();
        // SQLite: chunks of 128, 1 and 1 rows, each its rows' values in order.
        let sqlite = ROWS.statements(Dialect::Sqlite, values.clone());
        assert_eq!(sqlite.iter().map(|(_, v)| v.len() / 2).collect::<Vec<_>>(), vec![128, 1, 1]);
        assert_eq!(sqlite.iter().flat_map(|(_, v)| v.clone()).collect::<Vec<_>>(), values);
        assert_eq!(sqlite[2].0, "INSERT INTO t (a, b) VALUES (?1, ?2) ");
        // PostgreSQL: one statement, one array per column.
        let postgres = ROWS.statements(Dialect::Postgres, values);
        assert_eq!(postgres.len(), 1);
        assert_eq!(postgres[0].0, "INSERT INTO t (a, b) SELECT * FROM unnest(?1::bigint[], ?2::text[]) ");
        let [Value::Array(a), Value::Array(b)] = &postgres[0].1[..] else { panic!("{:?}", postgres[0].1) };
        assert_eq!((a.len(), &a[129], &b[0]), (130, &Value::Int(129), &Value::Text("r0".into())));
    }

    #[test]
    fn value_rows_number_placeholders_row_by_row() {
        assert_eq!(value_rows(2, 3), "(?1, ?2, ?3), (?4, ?5, ?6)");
        assert_eq!(value_rows(1, 1), "(?1)");
    }

    #[test]
    fn chunks_cover_a_list_in_the_fixed_sizes_and_in_order() {
        let items: Vec<usize> = (0..301).collect();
        let sizes: Vec<usize> = chunks(&items).map(<[usize]>::len).collect();
        assert_eq!(sizes, [128, 128, 32, 8, 1, 1, 1, 1, 1]);
        assert_eq!(chunks(&items).flatten().copied().collect::<Vec<_>>(), items);
        assert_eq!(chunks::<u8>(&[]).count(), 0);
        static TEXTS: OnceLock<[String; 4]> = OnceLock::new();
        assert_eq!(chunk_sql(&TEXTS, 8, |n| placeholders(3, n)), "?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10");
    }

    #[test]
    fn placeholders_are_renumbered_outside_quotes_only() {
        assert_eq!(
            numbered_placeholders("SELECT a FROM t WHERE b = ?1 AND c = '?2' AND d = ?12"),
            "SELECT a FROM t WHERE b = $1 AND c = '?2' AND d = $12"
        );
    }

    #[test]
    fn values_convert_both_ways_and_name_mismatches() {
        let row = Row::new(vec![Value::Int(3), Value::Null, Value::Text("x".into()), Value::Int(1)]);
        assert_eq!(row.get::<i64>(0).unwrap(), 3);
        assert_eq!(row.get::<Option<String>>(1).unwrap(), None);
        assert_eq!(row.get::<String>(2).unwrap(), "x");
        assert!(row.get::<bool>(3).unwrap());
        let wrong = row.get::<i64>(2).unwrap_err().to_string();
        assert!(wrong.contains("column 2"), "{wrong}");
        assert!(row.get::<i64>(9).is_err());
        assert_eq!(
            (1i64, "a", None::<i64>, true).values(),
            vec![Value::Int(1), Value::Text("a".into()), Value::Null, Value::Int(1)]
        );
    }
}
