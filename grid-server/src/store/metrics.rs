//! What the metrics gauges read from the database at scrape time: the
//! store's `GaugeSource` (`Gauges`), registered by `main`.

use grid_core::ledger::EntryKind;
use grid_core::wire::job::JobPhase;

use super::sql::json_text;
use super::ReadConn;

use super::StoreResult;

#[derive(Debug, Default)]
pub struct Snapshot {
    /// Capture items by queue state (waiting, prioritized, delayed, active).
    pub queue: Vec<(&'static str, i64)>,
    /// Analytical jobs by phase.
    pub jobs: Vec<(String, i64)>,
    /// Live sessions by status (pending, running).
    pub sessions: Vec<(&'static str, i64)>,
    /// Ledger totals by kind.
    pub ledger: Vec<(String, i64)>,
}

pub fn snapshot(conn: &ReadConn) -> StoreResult<Snapshot> {
    let (q, active) = super::items::queue_counts(conn)?;
    let queue = vec![
        ("waiting", i64::from(q.wait)),
        ("prioritized", i64::from(q.prioritized)),
        ("delayed", i64::from(q.delayed)),
        ("active", i64::from(active)),
    ];
    let pairs = |sql: &str| -> StoreResult<Vec<(String, i64)>> {
        Ok(conn.query_map(sql, (), |r| Ok((r.get(0)?, r.get(1)?)))?.into_iter().collect())
    };
    let jobs = pairs("SELECT phase, COUNT(*) FROM jobs GROUP BY phase")?;
    let status = json_text(conn.dialect(), "machine", "status");
    let live = pairs(&format!("SELECT {status}, COUNT(*) FROM sessions WHERE live = 1 GROUP BY 1"))?;
    let count = |status: &str| live.iter().find(|(s, _)| s == status).map_or(0, |(_, n)| *n);
    let sessions = vec![("pending", count("pending")), ("running", count("running"))];
    let ledger = pairs("SELECT kind, CAST(COALESCE(SUM(amount), 0) AS BIGINT) FROM balances GROUP BY kind")?;
    Ok(Snapshot { queue, jobs, sessions, ledger })
}

/// The store as a source of the metrics' gauges: on every scrape it reads
/// a `snapshot` and sets the queue, job, session and ledger gauges.
pub struct Gauges(pub super::Store);

impl crate::metrics::GaugeSource for Gauges {
    fn refresh(&self) -> futures_util::future::BoxFuture<'_, ()> {
        Box::pin(async move {
            let Ok(s) = self.0.read(snapshot).await else { return };
            let m = crate::metrics::get();
            for (state, n) in s.queue {
                m.queue.with_label_values(&[state]).set(n);
            }
            // Every phase and kind is set, at 0 when the database has none,
            // so a count that falls to nothing is not left at its last value.
            let count =
                |pairs: &[(String, i64)], key: &str| pairs.iter().find(|(k, _)| k == key).map_or(0, |(_, n)| *n);
            for phase in JobPhase::ALL.map(JobPhase::as_str) {
                m.jobs.with_label_values(&[phase]).set(count(&s.jobs, phase));
            }
            for (phase, n) in s.jobs.iter().filter(|(p, _)| !JobPhase::ALL.iter().any(|k| k.as_str() == p)) {
                m.jobs.with_label_values(&[phase]).set(*n);
            }
            for (status, n) in s.sessions {
                m.sessions.with_label_values(&[status]).set(n);
            }
            for kind in EntryKind::ALL.map(EntryKind::as_str) {
                m.ledger_micros.with_label_values(&[kind]).set(count(&s.ledger, kind));
            }
        })
    }
}
