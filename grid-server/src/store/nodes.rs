//! The nodes of a grid sharing one store: each node's row is its
//! heartbeat (docs/scale-out.md).

use grid_core::time::Millis;

use super::sql::{Conn, ReadConn};
use super::StoreResult;

/// The oldest heartbeat of a live node at `now`: older is dead.
pub fn live_after(now: Millis, lease: std::time::Duration) -> Millis {
    now.plus_ms(-i64::try_from(lease.as_millis()).unwrap_or(i64::MAX))
}

/// A node as `grid-server node list` shows it.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeView {
    pub name: String,
    pub advertise_url: Option<String>,
    pub started_at: Millis,
    pub heartbeat_at: Millis,
    /// Whether its heartbeat is within the lease.
    pub live: bool,
    /// Capture items it is running.
    pub active_items: i64,
    /// Live sessions whose browser it runs.
    pub live_sessions: i64,
    /// Job attempts its engine runs (provisioning, running or publishing).
    pub running_jobs: i64,
}

/// What a node offers the grid.
#[derive(Debug, Clone, Copy, Default)]
pub struct Offer {
    /// Session slots (`--max-sessions`; 0 with sessions disabled).
    pub sessions: u32,
    /// Its Docker Engine's capacity for analytical jobs.
    pub cpu_millis: u64,
    pub memory_bytes: u64,
}

/// Registers a starting node (again, after a restart), alive now.
pub fn register(conn: &Conn, name: &str, advertise_url: Option<&str>, offer: Offer, now: Millis) -> StoreResult<()> {
    conn.execute(
        "INSERT INTO nodes (name, advertise_url, started_at, heartbeat_at, max_sessions, compute_cpu_millis,
                            compute_memory_bytes)
         VALUES (?1, ?2, ?3, ?3, ?4, ?5, ?6)
         ON CONFLICT (name) DO UPDATE SET advertise_url = excluded.advertise_url,
           started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at,
           max_sessions = excluded.max_sessions, compute_cpu_millis = excluded.compute_cpu_millis,
           compute_memory_bytes = excluded.compute_memory_bytes",
        crate::params![
            name,
            advertise_url,
            now.0,
            offer.sessions,
            i64::try_from(offer.cpu_millis).unwrap_or(i64::MAX),
            i64::try_from(offer.memory_bytes).unwrap_or(i64::MAX)
        ],
    )?;
    Ok(())
}

/// Locks `name`'s row until the transaction ends (on PostgreSQL; SQLite
/// has one writer): the node's job scheduler holds it while it counts the
/// capacity in use on the node and places jobs there, so two passes never
/// both place on capacity one of them took. A heartbeat waits for it.
pub fn lock(conn: &Conn, name: &str) -> StoreResult<()> {
    conn.lock_rows("SELECT name FROM nodes WHERE name = ?1", [name], "FOR UPDATE")
}

/// Whether some live node's engine (heartbeat at or after `live_after`;
/// `me` always counts) could hold a job requesting `cpu_millis` and
/// `memory_bytes`; when none could, the largest capacities offered, for the
/// refusal's detail.
pub fn job_fits(
    conn: &ReadConn,
    me: &str,
    live_after: Millis,
    cpu_millis: u64,
    memory_bytes: u64,
) -> StoreResult<Result<(), (u64, u64)>> {
    let (fits, cpu, memory): (i64, Option<i64>, Option<i64>) = conn.query_row(
        "SELECT COUNT(CASE WHEN compute_cpu_millis >= ?3 AND compute_memory_bytes >= ?4 THEN 1 END),
                MAX(compute_cpu_millis), MAX(compute_memory_bytes)
           FROM nodes WHERE heartbeat_at >= ?2 OR name = ?1",
        crate::params![
            me,
            live_after.0,
            i64::try_from(cpu_millis).unwrap_or(i64::MAX),
            i64::try_from(memory_bytes).unwrap_or(i64::MAX)
        ],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    let largest = |v: Option<i64>| v.and_then(|v| u64::try_from(v).ok()).unwrap_or(0);
    Ok(if fits > 0 { Ok(()) } else { Err((largest(cpu), largest(memory))) })
}

/// Session slots summed over live nodes (heartbeat at or after
/// `live_after`), `me` counted whatever its heartbeat says.
pub fn live_max_sessions(conn: &ReadConn, me: &str, live_after: Millis) -> StoreResult<u32> {
    conn.query_row(
        "SELECT CAST(COALESCE(SUM(max_sessions), 0) AS BIGINT) FROM nodes WHERE heartbeat_at >= ?2 OR name = ?1",
        (me, live_after.0),
        |r| r.get(0),
    )
}

/// The node's last heartbeat, if it has a row.
pub fn heartbeat_of(conn: &ReadConn, name: &str) -> StoreResult<Option<Millis>> {
    use super::sql::Optional;
    Ok(conn.query_row("SELECT heartbeat_at FROM nodes WHERE name = ?1", [name], |r| r.get(0)).optional()?.map(Millis))
}

/// Records that the node is alive at `now`; `false` when it has no row,
/// i.e. another node took it for dead and took its work over.
pub fn heartbeat(conn: &Conn, name: &str, now: Millis) -> StoreResult<bool> {
    Ok(conn.execute("UPDATE nodes SET heartbeat_at = ?2 WHERE name = ?1", (name, now.0))? == 1)
}

/// Other nodes whose heartbeat is older than `before`, with that heartbeat.
pub fn dead(conn: &ReadConn, me: &str, before: Millis) -> StoreResult<Vec<(String, Millis)>> {
    conn.query_map(
        "SELECT name, heartbeat_at FROM nodes WHERE heartbeat_at < ?2 AND name <> ?1 ORDER BY name",
        (me, before.0),
        |r| Ok((r.get(0)?, Millis(r.get(1)?))),
    )
}

/// Forgets a node whose work was taken over.
pub fn remove(conn: &Conn, name: &str) -> StoreResult<()> {
    conn.execute("DELETE FROM nodes WHERE name = ?1", [name])?;
    Ok(())
}

/// Every node known, live ones (heartbeat at or after `live_after`) marked.
pub fn list(conn: &ReadConn, live_after: Millis) -> StoreResult<Vec<NodeView>> {
    conn.query_map(
        "SELECT n.name, n.advertise_url, n.started_at, n.heartbeat_at,
                (SELECT COUNT(*) FROM items i WHERE i.state = 'active' AND i.lease_node = n.name),
                (SELECT COUNT(*) FROM sessions s WHERE s.live = 1 AND s.node = n.name),
                (SELECT COUNT(*) FROM jobs j WHERE j.node = n.name
                    AND j.phase IN ('PROVISIONING', 'RUNNING', 'PUBLISHING'))
           FROM nodes n ORDER BY n.name",
        (),
        |r| {
            let heartbeat_at = Millis(r.get(3)?);
            Ok(NodeView {
                name: r.get(0)?,
                advertise_url: r.get(1)?,
                started_at: Millis(r.get(2)?),
                heartbeat_at,
                live: heartbeat_at >= live_after,
                active_items: r.get(4)?,
                live_sessions: r.get(5)?,
                running_jobs: r.get(6)?,
            })
        },
    )
}

/// Where the other nodes reach `node` (`--advertise-url`), if it is known
/// and advertises an address.
pub fn advertise_url(conn: &ReadConn, node: &str) -> StoreResult<Option<String>> {
    use super::sql::Optional;
    Ok(conn
        .query_row("SELECT advertise_url FROM nodes WHERE name = ?1", [node], |r| r.get::<Option<String>>(0))
        .optional()?
        .flatten())
}
