//! Analytical jobs: the record, its stored machine and due time, labels and
//! logs. Transitions of the machine (and the money they move) are the job
//! driver's (`compute::driver`), which loads and saves through here.

use std::collections::BTreeMap;

use super::sql::{Conn, Optional, ReadConn, Row};
use crate::params;
use grid_core::error::ApiError;
use grid_core::ids;
use grid_core::job::{Job, TransitionError};
use grid_core::pricing;
use grid_core::time::Millis;
use grid_core::wire::job::{JobPhase, JobSubmission};
use grid_core::wire::job_record::{Executor, JobArtifact, JobRecord, RecordParts, LOG_CONTENT_TYPE, LOG_KIND};
use serde_json::Value;

use super::accounts::{Caller, ReserveError};
use super::{to_json, StoreError, StoreResult};
use crate::ids::{new_id, sha256_hex};

#[derive(Debug, Clone)]
pub struct JobRow {
    pub id: String,
    pub account_id: String,
    pub key_id: Option<String>,
    pub body: Value,
    pub image_digest: String,
    pub priority: u32,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub job: Job,
    pub executors: BTreeMap<u32, Executor>,
    pub reservations: u32,
    pub reserved_micros: i64,
    pub reservation_day: i64,
    pub labels: BTreeMap<String, String>,
    pub created_at: Millis,
    /// The node whose engine runs (or ran) the current attempt, set when
    /// it is provisioned.
    pub node: Option<String>,
}

impl JobRow {
    /// The ledger subject of the job's current reservation.
    pub fn reservation_subject(&self) -> String {
        format!("{}/r{}", self.id, self.reservations)
    }

    /// The validated request, as it was accepted.
    pub fn submission(&self) -> Result<JobSubmission, StoreError> {
        grid_core::validate::job::validate(&self.body)
            .map_err(|e| StoreError::Invalid(format!("stored request of {} no longer validates: {e}", self.id)))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Transition(#[from] TransitionError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a caller of an analytical-job endpoint sees of a job error. The
/// machine's refusals stand (JOB_NOT_RETRYABLE, IDEMPOTENCY_CONFLICT,
/// credit). A transition the machine no longer allows means the record
/// changed under the call: JOB_STATE_CONFLICT, as the contract says for
/// cancel. A job that is gone is `unknown job`.
///
/// The one place an area answers a busy store differently: the contract
/// lists `503 COMPUTE_UNAVAILABLE` (with `retry-after`) on every
/// analytical-job endpoint for "the job store did not answer", where
/// captures and sessions answer `accounting_unavailable`
/// (`From<StoreError>`). Job endpoints' plain store reads convert through
/// `JobError` to get the same answer.
impl From<JobError> for ApiError {
    fn from(e: JobError) -> Self {
        match e {
            JobError::Transition(TransitionError::Refused(api)) => api,
            JobError::Transition(TransitionError::Inconsistent(why)) => {
                tracing::error!(error = %why, "stored job is inconsistent");
                ApiError::Internal
            }
            JobError::Transition(other) => {
                tracing::warn!(error = %other, "job changed under the call");
                ApiError::JobStateConflict
            }
            JobError::Store(StoreError::NotFound(_)) => ApiError::UnknownItemOrJob,
            JobError::Store(StoreError::Busy | StoreError::Conflict) => ApiError::compute_unavailable(),
            JobError::Store(s) => s.into(),
        }
    }
}

impl JobError {
    /// The store's failure, if that is what this is.
    pub fn store(&self) -> Option<&StoreError> {
        match self {
            JobError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ReserveError> for JobError {
    fn from(e: ReserveError) -> Self {
        match e {
            ReserveError::Refused(api) => JobError::Transition(TransitionError::Refused(api)),
            ReserveError::Store(s) => JobError::Store(s),
        }
    }
}

pub fn body_hash(sub: &JobSubmission) -> String {
    sha256_hex(grid_core::validate::job::canonical_body_hash_input(sub).as_bytes())
}

/// The reservation one attempt of this request holds.
pub fn attempt_reservation(sub: &JobSubmission) -> i64 {
    pricing::job_attempt_reservation_micros(
        sub.resources.cpu_millis.request,
        sub.resources.memory_bytes.request,
        sub.running_deadline_seconds,
    )
}

/// The job of an idempotency key, with its body hash.
pub fn find_by_idempotency_key(conn: &ReadConn, account_id: &str, key: &str) -> StoreResult<Option<(JobRow, String)>> {
    let found: Option<(String, String)> = conn
        .query_row(
            "SELECT id, body_hash FROM jobs WHERE account_id = ?1 AND idempotency_key = ?2",
            (account_id, key),
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    match found {
        Some((id, hash)) => Ok(load(conn, &id)?.map(|row| (row, hash))),
        None => Ok(None),
    }
}

/// Stores a job just accepted (`grid_core::job::submit`'s machine) for
/// `caller`; its reservation is the driver's, written by the same
/// transaction (`compute::driver`). Only the driver calls this.
pub fn insert(
    tx: &Conn,
    caller: &Caller,
    sub: &JobSubmission,
    body: &Value,
    image_digest: &str,
    machine: &Job,
    now: Millis,
) -> StoreResult<JobRow> {
    let id = new_id(ids::COMPUTE_JOB);
    tx.execute(
        "INSERT INTO jobs (id, account_id, key_id, idempotency_key, body_hash, request, image_digest, priority,
                           cpu_millis, memory_bytes, phase, machine, reservations, reserved_micros,
                           reservation_day, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 0, 0, ?13, ?14, ?14)",
        params![
            id,
            caller.account_id,
            caller.key_id,
            sub.idempotency_key,
            body_hash(sub),
            body.to_string(),
            image_digest,
            sub.priority,
            sub.resources.cpu_millis.request as i64,
            sub.resources.memory_bytes.request as i64,
            machine.phase.as_str(),
            to_json(machine)?,
            now.utc_day(),
            now.0
        ],
    )?;
    for (k, v) in &sub.labels {
        tx.execute("INSERT INTO job_labels (job_id, key, value) VALUES (?1, ?2, ?3)", (&id, k, v))?;
    }
    load(tx, &id)?.ok_or_else(|| StoreError::Invalid(format!("job {id} not found right after its insert")))
}

const JOB_COLUMNS: &str = "id, account_id, key_id, request, image_digest, priority, cpu_millis, memory_bytes, machine,
     executors, reservations, reserved_micros, reservation_day, created_at, node";

fn job_row(r: &Row) -> StoreResult<JobRow> {
    let bad = |i: usize, e: serde_json::Error| StoreError::Invalid(format!("column {i}: {e}"));
    let body: String = r.get(3)?;
    let machine: String = r.get(8)?;
    let executors: String = r.get(9)?;
    Ok(JobRow {
        id: r.get(0)?,
        account_id: r.get(1)?,
        key_id: r.get(2)?,
        body: serde_json::from_str(&body).map_err(|e| bad(3, e))?,
        image_digest: r.get(4)?,
        priority: r.get(5)?,
        cpu_millis: r.get::<i64>(6)? as u64,
        memory_bytes: r.get::<i64>(7)? as u64,
        job: serde_json::from_str(&machine).map_err(|e| bad(8, e))?,
        executors: serde_json::from_str(&executors).map_err(|e| bad(9, e))?,
        reservations: r.get(10)?,
        reserved_micros: r.get(11)?,
        reservation_day: r.get(12)?,
        labels: BTreeMap::new(),
        created_at: Millis(r.get(13)?),
        node: r.get(14)?,
    })
}

pub fn load(conn: &ReadConn, id: &str) -> StoreResult<Option<JobRow>> {
    load_locked(conn, id, "")
}

/// `load` for a step of the job's machine: on PostgreSQL the row stays
/// locked until the transaction ends, so two steps of one job (a cancel
/// through one node, its attempt's end on another, a due time fired by a
/// third) run one after the other, each from what the other stored.
pub fn load_for_step(conn: &Conn, id: &str) -> StoreResult<Option<JobRow>> {
    load_locked(conn, id, conn.row_lock("FOR UPDATE"))
}

fn load_locked(conn: &ReadConn, id: &str, lock: &str) -> StoreResult<Option<JobRow>> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1 {lock}");
    let Some(mut row) = conn.query_row(&sql, [id], job_row).optional()? else { return Ok(None) };
    row.labels = labels(conn, id)?;
    Ok(Some(row))
}

fn labels(conn: &ReadConn, id: &str) -> StoreResult<BTreeMap<String, String>> {
    Ok(conn
        .query_map("SELECT key, value FROM job_labels WHERE job_id = ?1", [id], |r| Ok((r.get(0)?, r.get(1)?)))?
        .into_iter()
        .collect())
}

/// The record of a job of this account, `None` when there is no such job
/// or it is another account's (whose jobs do not exist): GET /jobs/{id}'s
/// one statement. The job row, its labels and its logs come as rows of one
/// query, each part filtered by the account in SQL; only what the record
/// shows is read (not the stored request, which `load` parses).
pub fn owned_record(conn: &ReadConn, account_id: &str, id: &str) -> StoreResult<Option<JobRecord>> {
    enum Part {
        Job { image_digest: String, machine: String, executors: String, priority: u32, created_at: i64 },
        Label(String, String),
        Log(JobArtifact),
    }
    let parts = conn.query_map(
        // Every NULL typed: PostgreSQL types a UNION's columns pair by
        // pair, and two untyped NULLs would make text of a number column.
        "SELECT 0, j.image_digest, j.machine, j.executors, j.priority, j.created_at,
                CAST(NULL AS BIGINT), CAST(NULL AS BIGINT)
           FROM jobs j WHERE j.id = ?1 AND j.account_id = ?2
         UNION ALL
         SELECT 1, l.key, l.value, CAST(NULL AS TEXT), CAST(NULL AS BIGINT), CAST(NULL AS BIGINT),
                CAST(NULL AS BIGINT), CAST(NULL AS BIGINT)
           FROM job_labels l JOIN jobs j ON j.id = l.job_id WHERE l.job_id = ?1 AND j.account_id = ?2
         UNION ALL
         SELECT 2, g.artifact_id, CAST(NULL AS TEXT), CAST(NULL AS TEXT), g.attempt, g.byte_length, g.created_at,
                g.truncated
           FROM job_logs g JOIN jobs j ON j.id = g.job_id WHERE g.job_id = ?1 AND j.account_id = ?2",
        (id, account_id),
        |r| {
            Ok(match r.get::<i64>(0)? {
                0 => Part::Job {
                    image_digest: r.get(1)?,
                    machine: r.get(2)?,
                    executors: r.get(3)?,
                    priority: r.get(4)?,
                    created_at: r.get(5)?,
                },
                1 => Part::Label(r.get(1)?, r.get(2)?),
                _ => Part::Log(JobArtifact {
                    artifact_id: r.get(1)?,
                    kind: LOG_KIND.into(),
                    byte_length: r.get::<i64>(5)? as u64,
                    content_type: LOG_CONTENT_TYPE.into(),
                    created_at: Millis(r.get(6)?),
                    attempt: r.get(4)?,
                    truncated: r.get(7)?,
                }),
            })
        },
    )?;
    let (mut job_row, mut labels, mut logs) = (None, BTreeMap::new(), vec![]);
    for part in parts {
        match part {
            Part::Job { image_digest, machine, executors, priority, created_at } => {
                job_row = Some((image_digest, machine, executors, priority, created_at))
            }
            Part::Label(k, v) => {
                labels.insert(k, v);
            }
            Part::Log(artifact) => logs.push(artifact),
        }
    }
    let Some((image_digest, machine, executors, priority, created_at)) = job_row else { return Ok(None) };
    let bad = |what: &str, e: serde_json::Error| StoreError::Invalid(format!("{what} of job {id}: {e}"));
    let job: Job = serde_json::from_str(&machine).map_err(|e| bad("machine", e))?;
    let executors: BTreeMap<u32, Executor> = serde_json::from_str(&executors).map_err(|e| bad("executors", e))?;
    Ok(Some(JobRecord::build(RecordParts {
        job_id: id,
        image_digest: &image_digest,
        job: &job,
        executors: &executors,
        logs: &logs,
        labels: &labels,
        priority,
        created_at: Millis(created_at),
    })))
}

/// A job of this account, or `None` (another account's jobs do not exist).
pub fn load_owned(conn: &ReadConn, account_id: &str, id: &str) -> StoreResult<Option<JobRow>> {
    Ok(load(conn, id)?.filter(|r| r.account_id == account_id))
}

/// Stores the row's machine, executors, reservation and node with the
/// machine's next due time (`Job::next_due`), so it fires even if the
/// process that set it is gone. The one writer of a job after its insert;
/// only the driver calls it.
pub fn save(conn: &Conn, row: &JobRow, now: Millis) -> StoreResult<()> {
    let due_at = row.job.next_due().map(|d| d.at);
    conn.execute(
        "UPDATE jobs SET phase = ?2, machine = ?3, executors = ?4, reservations = ?5, reserved_micros = ?6,
                         reservation_day = ?7, due_at = ?8, updated_at = ?9, node = ?10
          WHERE id = ?1",
        params![
            row.id,
            row.job.phase.as_str(),
            to_json(&row.job)?,
            to_json(&row.executors)?,
            row.reservations,
            row.reserved_micros,
            row.reservation_day,
            due_at.map(|t| t.0),
            now.0,
            row.node
        ],
    )?;
    Ok(())
}

/// A stored log and where its bytes are.
#[derive(Debug, Clone)]
pub struct StoredLog {
    pub artifact: JobArtifact,
    /// `db:<job>/attempt-<n>` for a log kept in the database, else a path
    /// under the logs directory.
    pub storage_name: String,
    pub sha256: String,
    /// The bytes of a log kept in the database, when writing it (reads
    /// fetch them with `log_content`).
    pub inline: Option<Vec<u8>>,
}

pub fn insert_log(conn: &Conn, job_id: &str, log: &StoredLog) -> StoreResult<()> {
    conn.execute(
        "INSERT INTO job_logs
           (artifact_id, job_id, attempt, storage_name, sha256, byte_length, truncated, created_at, content)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
         ON CONFLICT (job_id, attempt) DO UPDATE SET
           artifact_id = excluded.artifact_id, storage_name = excluded.storage_name, sha256 = excluded.sha256,
           byte_length = excluded.byte_length, truncated = excluded.truncated, created_at = excluded.created_at,
           content = excluded.content",
        params![
            log.artifact.artifact_id,
            job_id,
            log.artifact.attempt,
            log.storage_name,
            log.sha256,
            log.artifact.byte_length as i64,
            log.artifact.truncated,
            log.artifact.created_at.0,
            log.inline
        ],
    )?;
    Ok(())
}

/// The bytes of a log kept in the database (`None` for one on disk).
pub fn log_content(conn: &ReadConn, artifact_id: &str) -> StoreResult<Option<Vec<u8>>> {
    Ok(conn
        .query_row("SELECT content FROM job_logs WHERE artifact_id = ?1", [artifact_id], |r| r.get(0))
        .optional()?
        .flatten())
}

pub fn logs(conn: &ReadConn, job_id: &str) -> StoreResult<Vec<StoredLog>> {
    Ok(conn
        .query_map(
            "SELECT artifact_id, attempt, storage_name, sha256, byte_length, truncated, created_at
               FROM job_logs WHERE job_id = ?1 ORDER BY attempt",
            [job_id],
            |r| {
                Ok(StoredLog {
                    artifact: JobArtifact {
                        artifact_id: r.get(0)?,
                        kind: LOG_KIND.into(),
                        byte_length: r.get::<i64>(4)? as u64,
                        content_type: LOG_CONTENT_TYPE.into(),
                        created_at: Millis(r.get(6)?),
                        attempt: r.get(1)?,
                        truncated: r.get(5)?,
                    },
                    storage_name: r.get(2)?,
                    sha256: r.get(3)?,
                    inline: None,
                })
            },
        )?
        .into_iter()
        .collect())
}

pub fn record_of(conn: &ReadConn, row: &JobRow) -> StoreResult<JobRecord> {
    let logs: Vec<JobArtifact> = logs(conn, &row.id)?.into_iter().map(|l| l.artifact).collect();
    Ok(JobRecord::build(RecordParts {
        job_id: &row.id,
        image_digest: &row.image_digest,
        job: &row.job,
        executors: &row.executors,
        logs: &logs,
        labels: &row.labels,
        priority: row.priority,
        created_at: row.created_at,
    }))
}

/// GET /jobs filters, already validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    pub phase: Option<JobPhase>,
    pub label: Option<(String, String)>,
}

/// Newest first, `limit` records with `seq` below `before`. Returns the
/// records and the `seq` to continue from when there are more.
pub fn list(
    conn: &ReadConn,
    account_id: &str,
    filter: &ListFilter,
    before: Option<i64>,
    limit: usize,
) -> StoreResult<(Vec<JobRecord>, Option<i64>)> {
    // One text for every filter: a filter left out is a NULL parameter
    // (cast, so PostgreSQL knows its type even when nothing else uses it).
    let sql = "SELECT j.seq, j.id FROM jobs j
                WHERE j.account_id = ?1 AND j.seq < ?2 AND (CAST(?3 AS TEXT) IS NULL OR j.phase = ?3)
                  AND (CAST(?4 AS TEXT) IS NULL
                       OR EXISTS (SELECT 1 FROM job_labels l WHERE l.job_id = j.id AND l.key = ?4 AND l.value = ?5))
                ORDER BY j.seq DESC LIMIT ?6";
    let (lk, lv) = filter.label.clone().unzip();
    let ids: Vec<(i64, String)> = conn
        .query_map(
            sql,
            params![
                account_id,
                before.unwrap_or(i64::MAX),
                filter.phase.map(JobPhase::as_str),
                lk,
                lv,
                limit as i64 + 1
            ],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?
        .into_iter()
        .collect();
    let more = ids.len() > limit;
    let mut out = Vec::with_capacity(limit);
    let mut last_seq = None;
    for (seq, id) in ids.into_iter().take(limit) {
        if let Some(row) = load(conn, &id)? {
            out.push(record_of(conn, &row)?);
            last_seq = Some(seq);
        }
    }
    Ok((out, if more { last_seq } else { None }))
}

/// Ids of jobs in a phase, in queue order (higher priority first, then older).
pub fn ids_in_phase(conn: &ReadConn, phase: JobPhase) -> StoreResult<Vec<String>> {
    Ok(conn
        .query_map("SELECT id FROM jobs WHERE phase = ?1 ORDER BY priority DESC, seq", [phase.as_str()], |r| r.get(0))?
        .into_iter()
        .collect())
}

/// Jobs in `phase` whose attempt `node` runs (or no recorded node: started
/// before nodes were recorded), highest priority first, then oldest.
pub fn ids_in_phase_on(conn: &ReadConn, phase: JobPhase, node: &str) -> StoreResult<Vec<String>> {
    conn.query_map(
        "SELECT id FROM jobs WHERE phase = ?1 AND (node = ?2 OR node IS NULL) ORDER BY priority DESC, seq",
        (phase.as_str(), node),
        |r| r.get(0),
    )
}

/// Jobs whose attempt `node` holds (a container, or its log to publish).
pub fn held_by(conn: &ReadConn, node: &str) -> StoreResult<Vec<(String, String)>> {
    conn.query_map(
        "SELECT id, phase FROM jobs WHERE node = ?1 AND phase IN ('PROVISIONING', 'RUNNING', 'PUBLISHING') ORDER BY seq",
        [node],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// The node whose engine runs (or last ran) the job's attempt.
pub fn node_of(conn: &ReadConn, id: &str) -> StoreResult<Option<String>> {
    Ok(conn
        .query_row("SELECT node FROM jobs WHERE id = ?1", [id], |r| r.get::<Option<String>>(0))
        .optional()?
        .flatten())
}

/// CPU millicores and memory bytes requested by jobs holding a container
/// on `node`'s engine.
pub fn capacity_in_use(conn: &ReadConn, node: &str) -> StoreResult<(u64, u64)> {
    let (cpu, mem): (i64, i64) = conn.query_row(
        "SELECT CAST(COALESCE(SUM(cpu_millis), 0) AS BIGINT), CAST(COALESCE(SUM(memory_bytes), 0) AS BIGINT) FROM jobs
          WHERE phase IN ('PROVISIONING', 'RUNNING') AND (node = ?1 OR node IS NULL)",
        [node],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok((cpu as u64, mem as u64))
}

/// Which due times a node fires: a running attempt's deadline only on the
/// node whose engine runs it (the kill goes to that engine); a replay
/// anywhere.
const DUE_ON_NODE: &str = "(node = ?2 OR node IS NULL OR phase NOT IN ('PROVISIONING', 'RUNNING', 'PUBLISHING'))";

/// Jobs due at or before `now` that `node` fires, earliest first.
pub fn due_ids(conn: &ReadConn, now: Millis, node: &str) -> StoreResult<Vec<String>> {
    conn.query_map(
        &format!("SELECT id FROM jobs WHERE due_at <= ?1 AND {DUE_ON_NODE} ORDER BY due_at"),
        (now.0, node),
        |r| r.get(0),
    )
}

/// The earliest due time after `now` that `node` fires.
pub fn next_due_after(conn: &ReadConn, now: Millis, node: &str) -> StoreResult<Option<Millis>> {
    let t: Option<i64> = conn.query_row(
        &format!("SELECT MIN(due_at) FROM jobs WHERE due_at > ?1 AND {DUE_ON_NODE}"),
        (now.0, node),
        |r| r.get(0),
    )?;
    Ok(t.map(Millis))
}

/// Jobs that may owe a due time but have none stored: running ones, and
/// failed ones whose reservation is still open (a replay owed).
pub fn undated_ids(conn: &ReadConn) -> StoreResult<Vec<String>> {
    let open = super::sql::json_text(conn.dialect(), "machine", "reservationOpen");
    Ok(conn
        .query_map(
            &format!(
                "SELECT id FROM jobs WHERE due_at IS NULL
                   AND (phase = 'RUNNING' OR (phase = 'FAILED' AND {open} = 'true'))"
            ),
            (),
            |r| r.get(0),
        )?
        .into_iter()
        .collect())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::store::Store;

    const T0: Millis = Millis(1_700_000_000_000);

    /// GET /jobs/{id}'s one statement answers what the driver's load and
    /// `record_of` build, labels, executors and logs included, and nothing
    /// for another account.
    #[test]
    fn the_owned_record_is_the_loaded_records_and_only_for_its_account() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Duration::from_secs(5)).unwrap();
        let body = crate::compute::test_job_body(&["true"], 0, json!({"team": "blue", "run": "7"}), "k1");
        let sub = grid_core::validate::job::validate(&body).unwrap();
        let (owner, other, id) = store
            .write_blocking(|tx| {
                let owner = super::super::accounts::create_account(tx, "owner", 10_000_000, T0)?;
                let other = super::super::accounts::create_account(tx, "other", 10_000_000, T0)?;
                let caller = Caller { account_id: owner.clone(), ..Default::default() };
                let digest = "127.0.0.1:5000/tools/busybox@sha256:ab";
                let (mut row, _) = crate::compute::driver::create(tx, &caller, &sub, &body, digest, T0)?;
                let executor = Executor {
                    engine: "docker".into(),
                    container_name: format!("grid-{}-1", row.id),
                    container_id: Some("c1".into()),
                };
                row.executors.insert(1, executor);
                save(tx, &row, T0)?;
                for attempt in [2, 1] {
                    let log = StoredLog {
                        artifact: JobArtifact {
                            artifact_id: format!("ja_{attempt}"),
                            kind: LOG_KIND.into(),
                            byte_length: 10 * u64::from(attempt),
                            content_type: LOG_CONTENT_TYPE.into(),
                            created_at: Millis(T0.0 + i64::from(attempt)),
                            attempt,
                            truncated: attempt == 2,
                        },
                        storage_name: format!("db:{}/attempt-{attempt}", row.id),
                        sha256: "00".into(),
                        inline: Some(vec![b'x'; 10 * attempt as usize]),
                    };
                    insert_log(tx, &row.id, &log)?;
                }
                Ok::<_, JobError>((owner, other, row.id))
            })
            .unwrap();
        let expected = store.read_blocking(|c| record_of(c, &load(c, &id)?.unwrap())).unwrap();
        assert_eq!(expected.labels.len(), 2);
        assert_eq!(expected.artifacts.len(), 2);
        let got = store.read_blocking(|c| owned_record(c, &owner, &id)).unwrap();
        assert_eq!(got, Some(expected));
        assert_eq!(store.read_blocking(|c| owned_record(c, &other, &id)).unwrap(), None);
        assert_eq!(store.read_blocking(|c| owned_record(c, &owner, "cj_none")).unwrap(), None);
    }
}
