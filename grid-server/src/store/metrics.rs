//! What the metrics gauges read from the database at scrape time.

use super::sql::json_text;
use super::Conn;

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

pub fn snapshot(conn: &Conn) -> StoreResult<Snapshot> {
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
