//! The analytical job record as GET /jobs/{jobId} shows it, built from the
//! job's state machine and what the server stored beside it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::job::{Funding, Job};
use crate::time::Millis;
use crate::wire::job::{JobPhase, Termination};

pub const LOG_CONTENT_TYPE: &str = "text/plain";
pub const LOG_KIND: &str = "log";

/// Where an attempt ran. Docker is the only engine today.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Executor {
    /// `docker`.
    pub engine: String,
    /// The container's name, `grid-<jobId>-<attempt>`.
    pub container_name: String,
    /// The container's id once created.
    pub container_id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogsInfo {
    pub available: bool,
    pub artifact_id: Option<String>,
    pub byte_length: Option<u64>,
    pub content_type: Option<String>,
}

/// A published file of a job (today: one log per finished attempt).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobArtifact {
    pub artifact_id: String,
    pub kind: String,
    pub byte_length: u64,
    pub content_type: String,
    pub created_at: Millis,
    /// The attempt whose log this is.
    pub attempt: u32,
    /// Output passed 1 MiB and was cut.
    pub truncated: bool,
}

impl JobArtifact {
    fn logs_info(a: Option<&JobArtifact>) -> LogsInfo {
        match a {
            Some(a) => LogsInfo {
                available: true,
                artifact_id: Some(a.artifact_id.clone()),
                byte_length: Some(a.byte_length),
                content_type: Some(a.content_type.clone()),
            },
            None => LogsInfo::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptRecord {
    pub attempt: u32,
    pub phase: JobPhase,
    pub phase_timestamps: BTreeMap<JobPhase, Millis>,
    /// `reservation` (its own reservation) or `replay` (after an eviction, free).
    pub funding: Funding,
    /// Container start, as the engine reports it.
    pub started_at: Option<Millis>,
    /// When the attempt's end was decided (container exit, loss or stop).
    pub ended_at: Option<Millis>,
    pub termination: Option<Termination>,
    pub executor: Option<Executor>,
    pub logs: LogsInfo,
    pub logs_truncated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRecord {
    pub job_id: String,
    pub attempt: u32,
    pub image_digest: String,
    pub phase: JobPhase,
    pub phase_timestamps: BTreeMap<JobPhase, Millis>,
    pub executor: Option<Executor>,
    pub attempts: Vec<AttemptRecord>,
    pub termination: Option<Termination>,
    pub logs_truncated: bool,
    pub logs: LogsInfo,
    pub artifacts: Vec<JobArtifact>,
    pub labels: BTreeMap<String, String>,
    pub priority: u32,
    pub retries: u32,
    pub running_deadline_seconds: u32,
    pub cancel_requested: bool,
    pub created_at: Millis,
}

/// What the server stored beside the machine.
pub struct RecordParts<'a> {
    pub job_id: &'a str,
    pub image_digest: &'a str,
    pub job: &'a Job,
    /// Executor per attempt number.
    pub executors: &'a BTreeMap<u32, Executor>,
    /// Published logs, any order.
    pub logs: &'a [JobArtifact],
    pub labels: &'a BTreeMap<String, String>,
    pub priority: u32,
    pub created_at: Millis,
}

impl JobRecord {
    pub fn build(p: RecordParts) -> JobRecord {
        let log_of = |n: u32| p.logs.iter().find(|l| l.attempt == n);
        let attempts: Vec<AttemptRecord> = p
            .job
            .attempts
            .iter()
            .map(|a| AttemptRecord {
                attempt: a.number,
                phase: a.phase,
                phase_timestamps: a.phase_timestamps.clone(),
                funding: a.funding,
                started_at: a.started_at,
                ended_at: a.ended_at,
                termination: a.termination.clone(),
                executor: p.executors.get(&a.number).cloned(),
                logs: JobArtifact::logs_info(log_of(a.number)),
                logs_truncated: log_of(a.number).is_some_and(|l| l.truncated),
            })
            .collect();
        let current = attempts.last();
        let mut artifacts = p.logs.to_vec();
        artifacts.sort_by_key(|a| a.attempt);
        JobRecord {
            job_id: p.job_id.to_string(),
            attempt: p.job.attempt_number(),
            image_digest: p.image_digest.to_string(),
            phase: p.job.phase,
            phase_timestamps: p.job.phase_timestamps.clone(),
            executor: current.and_then(|a| a.executor.clone()),
            termination: p.job.termination().cloned(),
            logs_truncated: current.is_some_and(|a| a.logs_truncated),
            logs: current.map(|a| a.logs.clone()).unwrap_or_default(),
            attempts,
            artifacts,
            labels: p.labels.clone(),
            priority: p.priority,
            retries: p.job.retries,
            running_deadline_seconds: p.job.running_deadline_seconds,
            cancel_requested: p.job.cancel_requested,
            created_at: p.created_at,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobList {
    pub jobs: Vec<JobRecord>,
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobArtifacts {
    pub artifacts: Vec<JobArtifact>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{apply, Event};
    use serde_json::json;

    #[test]
    fn new_job_record_has_the_contract_defaults() {
        let t = Millis(1_000);
        let job = Job::new(0, 60, t);
        let r = JobRecord::build(RecordParts {
            job_id: "cj_1",
            image_digest: "r/x@sha256:ab",
            job: &job,
            executors: &BTreeMap::new(),
            logs: &[],
            labels: &BTreeMap::new(),
            priority: 0,
            created_at: t,
        });
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["attempt"], 0);
        assert_eq!(v["phase"], "ACCEPTED");
        assert_eq!(v["executor"], json!(null));
        assert_eq!(v["attempts"], json!([]));
        assert_eq!(v["termination"], json!(null));
        assert_eq!(v["logsTruncated"], false);
        assert_eq!(v["logs"], json!({"available": false, "artifactId": null, "byteLength": null, "contentType": null}));
        assert_eq!(v["artifacts"], json!([]));
        assert_eq!(v["phaseTimestamps"], json!({"ACCEPTED": "1970-01-01T00:00:01.000Z"}));
    }

    #[test]
    fn current_attempt_log_shows_on_the_record() {
        let t = Millis(0);
        let mut job = Job::new(0, 60, t);
        for e in [
            Event::Enqueue,
            Event::Provision,
            Event::ContainerStarted,
            Event::ContainerExited { exit_code: 0, oom_killed: false },
        ] {
            job = apply(&job, e, t).unwrap().job;
        }
        job = apply(&job, Event::Published { log_available: true }, t).unwrap().job;
        let log = JobArtifact {
            artifact_id: "ca_1".into(),
            kind: LOG_KIND.into(),
            byte_length: 3,
            content_type: LOG_CONTENT_TYPE.into(),
            created_at: t,
            attempt: 1,
            truncated: true,
        };
        let r = JobRecord::build(RecordParts {
            job_id: "cj_1",
            image_digest: "d",
            job: &job,
            executors: &BTreeMap::new(),
            logs: std::slice::from_ref(&log),
            labels: &BTreeMap::new(),
            priority: 0,
            created_at: t,
        });
        assert!(r.logs.available && r.logs_truncated);
        assert_eq!(r.logs.artifact_id.as_deref(), Some("ca_1"));
        assert_eq!(r.attempts[0].logs.byte_length, Some(3));
        assert_eq!(r.artifacts, vec![log]);
    }
}
