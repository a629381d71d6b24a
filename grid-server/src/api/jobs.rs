//! Analytical jobs: POST/GET /jobs, GET /jobs/{id}, cancel, retry,
//! artifacts and logs.

use grid_core::error::ApiError;
use grid_core::validate;
use grid_core::validate::list::{list_query, log_query};
use grid_core::wire::job::{JobPhase, NetworkProfile};
use grid_core::wire::job_record::JobArtifacts;
use serde_json::Value;

use super::{JobLog, Reply};
use crate::app::App;
use crate::compute::registry::ResolveError;
use crate::ids::now;
use crate::store::accounts::Caller;
use crate::store::jobs::{self, JobError, JobRow, ListFilter};
use crate::store::nodes;

fn with_degraded(app: &App, r: Reply) -> Reply {
    Reply { compute_degraded: !app.compute.tracking_ready(), ..r }
}

async fn owned(app: &App, caller: &Caller, id: &str) -> Result<JobRow, ApiError> {
    let (account, id) = (caller.account_id.clone(), id.to_string());
    app.store
        .lookup(move |c| jobs::load_owned(c, &account, &id))
        .await
        .map_err(JobError::from)?
        .ok_or(ApiError::UnknownItemOrJob)
}

async fn record(app: &App, row: JobRow, status: u16) -> Result<Reply, ApiError> {
    let r = app.store.lookup(move |c| jobs::record_of(c, &row)).await.map_err(JobError::from)?;
    Ok(with_degraded(app, Reply::json(status, &r)))
}

pub async fn submit(app: &App, caller: &Caller, body: Value) -> Result<Reply, ApiError> {
    let sub = validate::job::validate(&body)?;
    if sub.network_profile == NetworkProfile::PublicHttps && !app.compute.config.public_https {
        return Err(ApiError::CapabilityNotAvailable { capability: "networkProfile:public-https".into() });
    }
    // Larger than every live node's engine: refused, but only after the
    // credit check (below), so a body the account cannot afford is 402
    // whatever its size.
    let (me, live_after) = (app.config.node.clone(), nodes::live_after(now(), app.config.node_lease));
    let (cpu, memory) = (sub.resources.cpu_millis.request, sub.resources.memory_bytes.request);
    let fits =
        app.store.read(move |c| nodes::job_fits(c, &me, live_after, cpu, memory)).await.map_err(JobError::from)?;
    let too_big = fits.err().map(|(max_cpu, max_memory)| {
        let mut detail = vec![];
        if cpu > max_cpu {
            detail.push(format!("resources.cpu.request: more than the grid's capacity of {max_cpu}m"));
        }
        if memory > max_memory {
            detail.push(format!("resources.memory.request: more than the grid's capacity of {max_memory} bytes"));
        }
        if detail.is_empty() {
            detail.push(format!(
                "resources: no node has both {cpu}m of CPU and {memory} bytes of memory (the largest offer {max_cpu}m and {max_memory} bytes)"
            ));
        }
        ApiError::InvalidJobRequest { detail }
    });
    // An idempotent resend is answered from the store, whatever the engine
    // or registry are doing.
    let (account, key, hash) = (caller.account_id.clone(), sub.idempotency_key.clone(), jobs::body_hash(&sub));
    let existing =
        app.store.read(move |c| jobs::find_by_idempotency_key(c, &account, &key)).await.map_err(JobError::from)?;
    if let Some(row) = existing {
        if row.1 != hash {
            return Err(ApiError::IdempotencyConflict);
        }
        return record(app, row.0, 200).await;
    }
    app.compute.available()?;
    let digest = app.compute.registries.resolve(&sub.image_ref).await.map_err(|e| match e {
        ResolveError::Invalid(detail) => ApiError::InvalidImage { detail },
        ResolveError::Unavailable(why) => {
            tracing::warn!(%why, "registry unavailable");
            ApiError::compute_unavailable()
        }
    })?;
    // The reservation is taken first (the account can afford it); a request
    // no node can hold is then refused, the reservation rolled back with
    // the insert.
    let (row, created) = app.compute.driver.submit(caller, sub, body, digest, too_big).await?;
    record(app, row, if created { 202 } else { 200 }).await
}

pub async fn get(app: &App, caller: &Caller, id: &str) -> Result<Reply, ApiError> {
    let (account, id) = (caller.account_id.clone(), id.to_string());
    let r = app
        .store
        .lookup(move |c| jobs::owned_record(c, &account, &id))
        .await
        .map_err(JobError::from)?
        .ok_or(ApiError::UnknownItemOrJob)?;
    Ok(with_degraded(app, Reply::json(200, &r)))
}

pub async fn list(app: &App, caller: &Caller, query: &[(String, String)]) -> Result<Reply, ApiError> {
    let q = list_query(query)?;
    let filter = ListFilter { phase: q.phase, label: q.label.clone() };
    let scope = format!("{}|{:?}|{:?}", caller.account_id, filter.phase, filter.label);
    let before = match &q.cursor {
        Some(c) => Some(app.signer.open_cursor(&scope, c).ok_or(ApiError::InvalidListCursor)?),
        None => None,
    };
    let (account, limit) = (caller.account_id.clone(), q.limit);
    let f = filter.clone();
    let (records, next) =
        app.store.read(move |c| jobs::list(c, &account, &f, before, limit)).await.map_err(JobError::from)?;
    let next_cursor = next.map(|seq| app.signer.seal_cursor(&scope, seq));
    Ok(Reply::json(200, &grid_core::wire::job_record::JobList { jobs: records, next_cursor }))
}

pub async fn cancel(app: &App, caller: &Caller, id: &str) -> Result<Reply, ApiError> {
    owned(app, caller, id).await?;
    let row = app.compute.driver.cancel(id).await?;
    record(app, row, 200).await
}

pub async fn retry(app: &App, caller: &Caller, id: &str) -> Result<Reply, ApiError> {
    owned(app, caller, id).await?;
    let row = app.compute.driver.retry(id, caller).await?;
    record(app, row, 200).await
}

pub async fn artifacts(app: &App, caller: &Caller, id: &str) -> Result<Reply, ApiError> {
    let row = owned(app, caller, id).await?;
    let logs = app.store.read(move |c| jobs::logs(c, &row.id)).await.map_err(JobError::from)?;
    Ok(Reply::json(200, &JobArtifacts { artifacts: logs.into_iter().map(|l| l.artifact).collect() }))
}

pub async fn logs(app: &App, caller: &Caller, id: &str, query: &[(String, String)]) -> Result<Reply, ApiError> {
    let attempt = log_query(query)?;
    let row = owned(app, caller, id).await?;
    let attempt = attempt.unwrap_or(row.job.attempt_number());
    let logs = app.store.read(move |c| jobs::logs(c, &row.id)).await.map_err(JobError::from)?;
    let log = logs.into_iter().find(|l| l.artifact.attempt == attempt).ok_or(ApiError::LogsNotAvailable)?;
    let data = app.compute.driver.read_log(&log).await.map_err(JobError::from)?.map_err(|e| {
        tracing::error!(log = %log.storage_name, error = %e, "log unreadable or failed its integrity check");
        ApiError::compute_unavailable()
    })?;
    Ok(Reply::log(JobLog {
        text: data,
        attempt,
        artifact_id: log.artifact.artifact_id.clone(),
        truncated: log.artifact.truncated,
    }))
}

/// Where a follow of a job's log (`GET /jobs/{id}/logs?follow=true`)
/// starts. The stream itself is the transport's (`http::follow`), fed by
/// `compute::driver::JobDriver::follow`.
#[derive(Debug)]
pub enum Follow {
    /// The attempt has ended: its published log, answered as without
    /// `follow` (or its refusal, 404 LOGS_NOT_AVAILABLE).
    Ended(Reply),
    /// The attempt runs: `node` is the node whose engine runs its
    /// container (`None`: this one, or a job from before nodes were
    /// recorded).
    Running { job_id: String, attempt: u32, container: String, node: Option<String> },
}

/// How often a follow reads the job while its attempt has not started or
/// its log is being published.
const FOLLOW_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// Where a follow of `id`'s log starts: an `attempt` other than the
/// current one is answered as without `follow`; the current one is waited
/// for while the job is accepted, queued or provisioning (and while its log
/// is being published), then streamed while it runs, or answered with its
/// published log once it has ended.
pub async fn follow(app: &App, caller: &Caller, id: &str, attempt: Option<u32>) -> Result<Follow, ApiError> {
    let row = owned(app, caller, id).await?;
    let by_attempt = |n: u32| vec![("attempt".to_string(), n.to_string())];
    if let Some(n) = attempt.filter(|n| *n != row.job.attempt_number()) {
        return Ok(Follow::Ended(logs(app, caller, id, &by_attempt(n)).await?));
    }
    let me = app.config.node.clone();
    let mut row = row;
    loop {
        let n = row.job.attempt_number();
        match row.job.phase {
            JobPhase::Accepted | JobPhase::Queued | JobPhase::Provisioning | JobPhase::Publishing => {}
            JobPhase::Running => {
                let node = row.node.clone().filter(|node| *node != me);
                let container = crate::compute::driver::recorded_container(&row, n);
                return Ok(Follow::Running { job_id: row.id, attempt: n, container, node });
            }
            JobPhase::Succeeded | JobPhase::Failed | JobPhase::TimedOut | JobPhase::Cancelled => {
                return Ok(Follow::Ended(logs(app, caller, id, &by_attempt(n.max(1))).await?));
            }
        }
        if attempt.is_some_and(|a| a != n) {
            // The attempt asked for ended meanwhile and another began.
            return Ok(Follow::Ended(logs(app, caller, id, &by_attempt(attempt.unwrap_or(n))).await?));
        }
        tokio::time::sleep(FOLLOW_WAIT).await;
        row = owned(app, caller, id).await?;
    }
}
