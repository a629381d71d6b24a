//! Analytical jobs: the calls of POST/GET /jobs, cancel, retry, artifacts
//! and logs as [`Endpoint`] values, what they answer beyond the wire types
//! (a log with its headers), and [`JobBuilder`] for a [`NewJob`] body.
//!
//! ```
//! use grid_client::jobs::JobBuilder;
//!
//! let job = JobBuilder::new("127.0.0.1:5000/tools/busybox:1", ["sh", "-c", "echo hi"])
//!     .cpu("500m")
//!     .memory("256Mi")
//!     .deadline_seconds(60)
//!     .label("team", "x")
//!     .idempotency_key("build-42")
//!     .build();
//! assert_eq!(job.resources.cpu.limit, "500m");
//! ```

use std::collections::BTreeMap;

use bytes::Bytes;
use grid_core::wire::job::{JobPhase, NetworkProfile, NewCapabilities, NewJob, NewResources, QuantityBounds};
use grid_core::wire::job_record::{JobArtifacts, JobList, JobRecord};
use reqwest::Method;

use crate::endpoint::Endpoint;
use crate::error::ClientError;

/// `error` of the 404 answered while an attempt has no log yet.
pub const LOGS_NOT_AVAILABLE: &str = "LOGS_NOT_AVAILABLE";

/// POST /jobs.
pub fn submit_job(job: &NewJob) -> Endpoint<JobRecord> {
    Endpoint::new(Method::POST, &["jobs"], true).with_json(job)
}

/// GET /jobs/{jobId} for an analytical job.
pub fn job(job_id: &str) -> Endpoint<JobRecord> {
    Endpoint::new(Method::GET, &["jobs", job_id], true)
}

/// GET /jobs with the query's parameters.
pub fn list_jobs(query: &JobListQuery) -> Endpoint<JobList> {
    let mut endpoint = Endpoint::new(Method::GET, &["jobs"], true);
    if let Some(limit) = query.limit {
        endpoint = endpoint.with_query("limit", limit.to_string());
    }
    if let Some(phase) = query.phase {
        endpoint = endpoint.with_query("phase", phase.as_str());
    }
    if let Some((key, value)) = &query.label {
        endpoint = endpoint.with_query(format!("label.{key}"), value.clone());
    }
    if let Some(cursor) = &query.cursor {
        endpoint = endpoint.with_query("cursor", cursor.clone());
    }
    endpoint
}

/// POST /jobs/{jobId}/cancel (no body).
pub fn cancel_job(job_id: &str) -> Endpoint<JobRecord> {
    Endpoint::new(Method::POST, &["jobs", job_id, "cancel"], true)
}

/// POST /jobs/{jobId}/retry for an analytical job (no body).
pub fn retry_job(job_id: &str) -> Endpoint<JobRecord> {
    Endpoint::new(Method::POST, &["jobs", job_id, "retry"], true)
}

/// GET /jobs/{jobId}/artifacts.
pub fn job_artifacts(job_id: &str) -> Endpoint<JobArtifacts> {
    Endpoint::new(Method::GET, &["jobs", job_id, "artifacts"], true)
}

/// GET /jobs/{jobId}/logs[?attempt=N]. The answer is text, not JSON: perform
/// it with [`crate::GridClient::send_raw`] (or use
/// [`crate::GridClient::job_logs`]).
pub fn job_logs(job_id: &str, attempt: Option<u32>) -> Endpoint<Bytes> {
    let endpoint = Endpoint::new(Method::GET, &["jobs", job_id, "logs"], true);
    match attempt {
        Some(n) => endpoint.with_query("attempt", n.to_string()),
        None => endpoint,
    }
}

/// GET /jobs/{jobId}/logs?follow=true[&attempt=N]: the attempt's output as
/// it is written, a streamed text answer. Perform it with
/// [`crate::GridClient::follow_job_logs`].
pub fn follow_job_logs(job_id: &str, attempt: Option<u32>) -> Endpoint<Bytes> {
    let endpoint = job_logs(job_id, attempt);
    endpoint.with_query("follow", "true")
}

/// What [`crate::GridClient::follow_job_logs`] followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowedLog {
    /// `x-grid-attempt`: the attempt whose output was followed.
    pub attempt: u32,
    /// How many bytes of output came (at most 1 MiB, as the published log).
    pub byte_length: u64,
}

/// Parameters of GET /jobs; `None` leaves one out (the server's defaults:
/// 50 per page, every phase, no label filter, the first page).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobListQuery {
    pub limit: Option<u32>,
    pub phase: Option<JobPhase>,
    /// One `label.<key>=<value>` filter.
    pub label: Option<(String, String)>,
    /// The previous page's `nextCursor`.
    pub cursor: Option<String>,
}

/// An answer of POST /jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSubmitted {
    /// `true` for 202 (a new job), `false` for 200 (an idempotent resend:
    /// the existing record, nothing reserved).
    pub created: bool,
    pub record: JobRecord,
}

/// An attempt's log and the headers that describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLog {
    /// `x-grid-attempt`.
    pub attempt: u32,
    /// `x-grid-artifact-id`.
    pub artifact_id: String,
    /// `x-grid-logs-truncated`: the output passed 1 MiB and was cut.
    pub truncated: bool,
    /// stdout and stderr as written, up to 1 MiB.
    pub body: Bytes,
}

impl JobLog {
    /// Reads the log and its three headers from a 200 answer.
    pub fn from_reply(reply: &crate::RawReply) -> Result<JobLog, ClientError> {
        let header = |name: &str| -> Result<&str, ClientError> {
            reply.headers.get(name).and_then(|v| v.to_str().ok()).ok_or_else(|| ClientError::Decode {
                endpoint: reply.endpoint.clone(),
                cause: serde::de::Error::custom(format!("answer without a valid {name} header")),
            })
        };
        let attempt = header("x-grid-attempt")?.parse::<u32>().map_err(|e| ClientError::Decode {
            endpoint: reply.endpoint.clone(),
            cause: serde::de::Error::custom(format!("x-grid-attempt: {e}")),
        })?;
        let artifact_id = header("x-grid-artifact-id")?.to_string();
        let truncated = match header("x-grid-logs-truncated")? {
            "true" => true,
            "false" => false,
            other => {
                return Err(ClientError::Decode {
                    endpoint: reply.endpoint.clone(),
                    cause: serde::de::Error::custom(format!("x-grid-logs-truncated: {other:?} is not true or false")),
                })
            }
        };
        Ok(JobLog { attempt, artifact_id, truncated, body: reply.body.clone() })
    }
}

/// A fresh idempotency key: `key-` and a ULID (time-ordered, 80 random bits).
pub fn new_idempotency_key() -> String {
    format!("key-{}", ulid::Ulid::new().to_string().to_ascii_lowercase())
}

/// Builds a [`NewJob`]. Defaults: 250m CPU, 256Mi memory and 256Mi ephemeral
/// storage (each with request = limit), a 60 s running deadline, network
/// `none`, no env, labels, args, retries or priority, and a fresh
/// idempotency key ([`new_idempotency_key`]): set your own to resend safely.
#[derive(Debug, Clone)]
pub struct JobBuilder {
    job: NewJob,
}

impl JobBuilder {
    pub fn new<S: Into<String>>(image: impl Into<String>, command: impl IntoIterator<Item = S>) -> JobBuilder {
        JobBuilder {
            job: NewJob {
                image: image.into(),
                command: command.into_iter().map(Into::into).collect(),
                args: None,
                resources: NewResources {
                    cpu: QuantityBounds::new("250m", "250m"),
                    memory: QuantityBounds::new("256Mi", "256Mi"),
                    ephemeral_storage: QuantityBounds::new("256Mi", "256Mi"),
                },
                running_deadline_seconds: 60,
                retries: None,
                priority: None,
                capabilities: NewCapabilities::default(),
                env: BTreeMap::new(),
                labels: BTreeMap::new(),
                idempotency_key: new_idempotency_key(),
            },
        }
    }

    /// Arguments after the command (`args`).
    pub fn args<S: Into<String>>(mut self, args: impl IntoIterator<Item = S>) -> JobBuilder {
        self.job.args = Some(args.into_iter().map(Into::into).collect());
        self
    }

    /// CPU request and limit, both `quantity` (`"500m"`, `"2"`).
    pub fn cpu(self, quantity: &str) -> JobBuilder {
        self.cpu_bounds(quantity, quantity)
    }

    pub fn cpu_bounds(mut self, request: &str, limit: &str) -> JobBuilder {
        self.job.resources.cpu = QuantityBounds::new(request, limit);
        self
    }

    /// Memory request and limit, both `quantity` (`"256Mi"`, `"1Gi"`).
    pub fn memory(self, quantity: &str) -> JobBuilder {
        self.memory_bounds(quantity, quantity)
    }

    pub fn memory_bounds(mut self, request: &str, limit: &str) -> JobBuilder {
        self.job.resources.memory = QuantityBounds::new(request, limit);
        self
    }

    /// Ephemeral storage request and limit, both `quantity`.
    pub fn ephemeral_storage(mut self, quantity: &str) -> JobBuilder {
        self.job.resources.ephemeral_storage = QuantityBounds::new(quantity, quantity);
        self
    }

    /// `runningDeadlineSeconds`: the longest one attempt may run.
    pub fn deadline_seconds(mut self, seconds: u32) -> JobBuilder {
        self.job.running_deadline_seconds = seconds;
        self
    }

    /// Automatic replays of an attempt lost as PLATFORM_EVICTED.
    pub fn retries(mut self, retries: u32) -> JobBuilder {
        self.job.retries = Some(retries);
        self
    }

    /// 0 to 10, higher runs sooner.
    pub fn priority(mut self, priority: u32) -> JobBuilder {
        self.job.priority = Some(priority);
        self
    }

    pub fn network(mut self, profile: NetworkProfile) -> JobBuilder {
        self.job.capabilities.network_profile = profile.as_str().to_string();
        self
    }

    /// One environment variable; a later value of the same name replaces it.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> JobBuilder {
        self.job.env.insert(name.into(), value.into());
        self
    }

    /// One label; a later value of the same key replaces it.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> JobBuilder {
        self.job.labels.insert(key.into(), value.into());
        self
    }

    pub fn idempotency_key(mut self, key: impl Into<String>) -> JobBuilder {
        self.job.idempotency_key = key.into();
        self
    }

    pub fn build(self) -> NewJob {
        self.job
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use url::Url;

    use super::*;

    fn url_of<T>(endpoint: &Endpoint<T>) -> String {
        endpoint.url(&Url::parse("http://127.0.0.1:8080").unwrap()).unwrap().to_string()
    }

    #[test]
    fn paths_of_every_job_call() {
        let job_body = JobBuilder::new("r/x:1", ["true"]).build();
        assert_eq!(url_of(&submit_job(&job_body)), "http://127.0.0.1:8080/jobs");
        assert_eq!(submit_job(&job_body).method(), Method::POST);
        assert_eq!(url_of(&job("cj_1")), "http://127.0.0.1:8080/jobs/cj_1");
        assert_eq!(url_of(&cancel_job("cj_1")), "http://127.0.0.1:8080/jobs/cj_1/cancel");
        assert_eq!(url_of(&retry_job("cj_1")), "http://127.0.0.1:8080/jobs/cj_1/retry");
        assert_eq!(url_of(&job_artifacts("cj_1")), "http://127.0.0.1:8080/jobs/cj_1/artifacts");
        assert_eq!(url_of(&job_logs("cj_1", None)), "http://127.0.0.1:8080/jobs/cj_1/logs");
        assert_eq!(url_of(&job_logs("cj_1", Some(2))), "http://127.0.0.1:8080/jobs/cj_1/logs?attempt=2");
        assert_eq!(job_logs("cj_1", Some(2)).to_string(), "GET /jobs/cj_1/logs?attempt=2");
        assert_eq!(url_of(&follow_job_logs("cj_1", None)), "http://127.0.0.1:8080/jobs/cj_1/logs?follow=true");
        assert_eq!(
            url_of(&follow_job_logs("cj_1", Some(2))),
            "http://127.0.0.1:8080/jobs/cj_1/logs?attempt=2&follow=true"
        );
        assert_eq!(url_of(&job("a/b")), "http://127.0.0.1:8080/jobs/a%2Fb");
        for e in [cancel_job("j").method().clone(), retry_job("j").method().clone()] {
            assert_eq!(e, Method::POST);
        }
    }

    #[test]
    fn list_query_is_encoded() {
        assert_eq!(url_of(&list_jobs(&JobListQuery::default())), "http://127.0.0.1:8080/jobs");
        let q = JobListQuery {
            limit: Some(1),
            phase: Some(JobPhase::TimedOut),
            label: Some(("team".into(), "x y".into())),
            cursor: Some("a+b/c=".into()),
        };
        assert_eq!(
            url_of(&list_jobs(&q)),
            "http://127.0.0.1:8080/jobs?limit=1&phase=TIMED_OUT&label.team=x+y&cursor=a%2Bb%2Fc%3D"
        );
    }

    /// The query a fully populated `JobListQuery` sends names exactly the
    /// parameters of the list's one shape (`grid_core::shapes`) and passes
    /// the server's validator. A literal without `..Default`: a field added
    /// here does not compile until it is checked too.
    #[test]
    fn list_query_is_the_list_shape() {
        let q = JobListQuery {
            limit: Some(100),
            phase: Some(JobPhase::Running),
            label: Some(("team".into(), "data".into())),
            cursor: Some("c".into()),
        };
        let endpoint = list_jobs(&q);
        let sent: std::collections::BTreeSet<&str> =
            endpoint.query().iter().map(|(k, _)| if k.starts_with("label.") { "label" } else { k.as_str() }).collect();
        let shape = grid_core::shapes::job_list_query();
        let properties: std::collections::BTreeSet<&str> =
            shape["properties"].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(sent, properties);
        let parsed = grid_core::validate::list::list_query(endpoint.query()).unwrap();
        assert_eq!((parsed.limit, parsed.phase, parsed.label), (100, Some(JobPhase::Running), q.label.clone()));
    }

    #[test]
    fn builder_fills_the_contract_fields() {
        let job = JobBuilder::new("127.0.0.1:5000/tools/busybox:1", ["sh", "-c"])
            .args(["echo hi"])
            .cpu("500m")
            .memory_bounds("256Mi", "512Mi")
            .ephemeral_storage("1Gi")
            .deadline_seconds(5)
            .retries(1)
            .priority(3)
            .env("MY_VAR", "1")
            .label("team", "x")
            .network(NetworkProfile::PublicHttps)
            .idempotency_key("k1")
            .build();
        assert_eq!(
            serde_json::to_value(&job).unwrap(),
            json!({
                "image": "127.0.0.1:5000/tools/busybox:1",
                "command": ["sh", "-c"],
                "args": ["echo hi"],
                "resources": {
                    "cpu": {"request": "500m", "limit": "500m"},
                    "memory": {"request": "256Mi", "limit": "512Mi"},
                    "ephemeralStorage": {"request": "1Gi", "limit": "1Gi"},
                },
                "runningDeadlineSeconds": 5,
                "retries": 1,
                "priority": 3,
                "capabilities": {"networkProfile": "public-https"},
                "env": {"MY_VAR": "1"},
                "labels": {"team": "x"},
                "idempotencyKey": "k1",
            })
        );
    }

    #[test]
    fn default_keys_are_fresh_and_valid() {
        let a = JobBuilder::new("r/x:1", ["true"]).build().idempotency_key;
        let b = new_idempotency_key();
        assert_ne!(a, b);
        assert!(a.starts_with("key-") && (1..=128).contains(&a.len()), "{a}");
    }

    #[test]
    fn log_headers_are_read() {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("x-grid-attempt", "2".parse().unwrap());
        headers.insert("x-grid-artifact-id", "ca_1".parse().unwrap());
        headers.insert("x-grid-logs-truncated", "true".parse().unwrap());
        let reply = crate::RawReply {
            endpoint: "GET /jobs/cj_1/logs".into(),
            status: 200,
            headers: headers.clone(),
            body: Bytes::from_static(b"hi\n"),
        };
        assert_eq!(
            JobLog::from_reply(&reply).unwrap(),
            JobLog { attempt: 2, artifact_id: "ca_1".into(), truncated: true, body: Bytes::from_static(b"hi\n") }
        );
        headers.remove("x-grid-artifact-id");
        let reply = crate::RawReply { headers, ..reply };
        assert!(matches!(JobLog::from_reply(&reply), Err(ClientError::Decode { .. })));
    }
}
