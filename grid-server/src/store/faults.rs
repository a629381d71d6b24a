//! The simulation's seam in the store (`crate::sim`, tests only): faults a
//! node's store handle meets on its next writes, the death of the node
//! they crash, and bugs planted in the SQL it runs, so the simulation can
//! show it finds them without a bug in production code.
//!
//! A handle with faults (`Store::with_faults`) is one simulated node's:
//! once that node crashed, each of its calls into the store waits forever
//! (as a dead process makes none), so nothing it still had in flight
//! reaches the store, and its after-commit effects never run.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use tokio::sync::Notify;

use super::sql::{Dialect, Query, Row, Sql, Statement, Value};
use super::{StoreError, StoreResult};

/// What the next write transaction of a node meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The database stays locked past the busy timeout: nothing runs.
    Busy,
    /// The transaction runs, and its commit fails: nothing is written.
    FailedCommit,
    /// The process dies while the transaction (a group commit's, when the
    /// capture queue's) runs: nothing is written, the node is dead.
    CrashInCommit,
    /// The process dies once the transaction committed and before the
    /// caller learns it: what it wrote stays, no after-commit effect runs.
    CrashAfterCommit,
}

/// A bug planted in the SQL a node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plant {
    /// An attempt's end is stored whatever claim holds the item now: the
    /// fencing token's condition of `items::save_ends` always holds.
    SkipFence,
    /// A release is added to the account's balances twice.
    DoubleRelease,
}

#[derive(Default)]
pub struct Faults {
    armed: Mutex<VecDeque<Fault>>,
    plants: Mutex<Vec<Plant>>,
    dead: AtomicBool,
    died: Notify,
}

impl Faults {
    /// The next writes meet `faults`, one each, in order.
    pub fn arm(&self, faults: impl IntoIterator<Item = Fault>) {
        self.armed.lock().unwrap().extend(faults);
    }

    /// Faults armed and not met yet, dropped.
    pub fn disarm(&self) -> usize {
        std::mem::take(&mut *self.armed.lock().unwrap()).len()
    }

    pub fn plant(&self, plant: Plant) {
        self.plants.lock().unwrap().push(plant);
    }

    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// Resolves once the node died (at once if it has).
    pub async fn died(&self) {
        loop {
            let notified = self.died.notified();
            if self.is_dead() {
                return;
            }
            notified.await;
        }
    }

    /// Waits forever once the node died: what a dead process's calls do.
    pub async fn alive(&self) {
        if self.is_dead() {
            std::future::pending::<()>().await;
        }
    }

    fn die(&self) {
        self.dead.store(true, Ordering::SeqCst);
        self.died.notify_waiters();
    }

    /// One write transaction through `write` (the backend's), meeting the
    /// next armed fault, its SQL through the plants.
    pub(super) fn write<R, E: From<StoreError>>(
        &self,
        write: impl FnOnce(&mut dyn FnMut(&super::Conn) -> Result<R, E>) -> Result<R, E>,
        f: impl FnOnce(&super::Conn) -> Result<R, E>,
    ) -> Result<R, E> {
        assert!(!self.is_dead(), "sim: a dead node's write reached the store");
        let fault = self.armed.lock().unwrap().pop_front();
        let plants = self.plants.lock().unwrap().clone();
        let mut f = Some(f);
        let mut seamed = |tx: &super::Conn| {
            let f = f.take().expect("a transaction's work runs once");
            let r = f(&Planted { inner: tx, plants: &plants })?;
            match fault {
                Some(Fault::FailedCommit) => Err(StoreError::Database("sim: the commit failed".into()).into()),
                Some(Fault::CrashInCommit) => {
                    self.die();
                    Err(StoreError::Task("sim: the process died in the commit".into()).into())
                }
                _ => Ok(r),
            }
        };
        match fault {
            Some(Fault::Busy) => Err(StoreError::Busy.into()),
            Some(Fault::CrashAfterCommit) => {
                let r = write(&mut seamed);
                self.die();
                r
            }
            _ => write(&mut seamed),
        }
    }
}

/// A transaction's connection with `plants` applied to its statements.
struct Planted<'a, 'c> {
    inner: &'a super::Conn<'c>,
    plants: &'a [Plant],
}

const FENCE: &str = "AND lease_token = ?8";
const NO_FENCE: &str = "AND (lease_token = ?8 OR 1 = 1)";

impl Planted<'_, '_> {
    /// The statements to run for `sql`: itself, rewritten, perhaps twice.
    fn rewrite(&self, sql: &str, params: &[Value]) -> (String, usize) {
        let mut sql = sql.to_string();
        let mut times = 1;
        for plant in self.plants {
            match plant {
                Plant::SkipFence => sql = sql.replace(FENCE, NO_FENCE),
                Plant::DoubleRelease => {
                    if sql.trim_start().starts_with("INSERT INTO balances")
                        && params.get(1) == Some(&Value::Text("release".into()))
                    {
                        times = 2;
                    }
                }
            }
        }
        (sql, times)
    }

    fn statements(&self, statements: Vec<Statement>) -> Vec<(String, Vec<Value>)> {
        let mut out = vec![];
        for (sql, params) in statements {
            let (sql, times) = self.rewrite(sql, &params);
            for _ in 0..times {
                out.push((sql.clone(), params.clone()));
            }
        }
        out
    }
}

impl Sql for Planted<'_, '_> {
    fn execute_values(&self, sql: &str, params: Vec<Value>) -> StoreResult<usize> {
        let mut changed = 0;
        for (sql, params) in self.statements(vec![(sql, params)]) {
            changed = self.inner.execute_values(&sql, params)?;
        }
        Ok(changed)
    }

    fn send_all(&self, statements: Vec<Statement>) -> StoreResult<()> {
        let owned = self.statements(statements);
        self.inner.send_all(owned.iter().map(|(s, p)| (s.as_str(), p.clone())).collect())
    }

    fn flush(&self) -> StoreResult<()> {
        self.inner.flush()
    }
}

impl Query for Planted<'_, '_> {
    fn dialect(&self) -> Dialect {
        self.inner.dialect()
    }

    fn query_values(&self, sql: &str, params: Vec<Value>) -> StoreResult<Vec<Row>> {
        let mut rows = vec![];
        for (sql, params) in self.statements(vec![(sql, params)]) {
            rows = self.inner.query_values(&sql, params)?;
        }
        Ok(rows)
    }

    fn query_all(&self, statements: Vec<Statement>) -> StoreResult<Vec<Vec<Row>>> {
        // A doubled statement answers once: each runs alone then.
        if statements.iter().any(|(sql, params)| self.rewrite(sql, params).1 > 1) {
            return statements.into_iter().map(|(sql, params)| self.query_values(sql, params)).collect();
        }
        let owned = self.statements(statements);
        self.inner.query_all(owned.iter().map(|(s, p)| (s.as_str(), p.clone())).collect())
    }
}
