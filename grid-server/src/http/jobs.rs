//! Analytical jobs: POST/GET /jobs, GET /jobs/{id}, cancel, retry,
//! artifacts and logs.

use grid_core::error::ApiError;
use grid_core::job::{Effect, Event};
use grid_core::validate;
use grid_core::validate::list::{list_query, log_query};
use grid_core::wire::job::NetworkProfile;
use grid_core::wire::job_record::JobArtifacts;
use hyper::header::HeaderValue;
use hyper::StatusCode;
use serde_json::Value;

use super::respond::{self, Resp};
use crate::app::App;
use crate::compute::registry::ResolveError;
use crate::ids::now;
use crate::store::accounts::Caller;
use crate::store::jobs::{self, JobError, JobRow, ListFilter};

/// Header set while job tracking has not caught up with the engine.
const DEGRADED: &str = "x-grid-compute-degraded";

fn with_degraded(app: &App, mut r: Resp) -> Resp {
    if !app.compute.tracking_ready() {
        r.headers_mut().insert(DEGRADED, HeaderValue::from_static("reconciler-unready"));
    }
    r
}

async fn owned(app: &App, caller: &Caller, id: &str) -> Result<JobRow, ApiError> {
    let (account, id) = (caller.account_id.clone(), id.to_string());
    app.store
        .read(move |c| jobs::load_owned(c, &account, &id))
        .await
        .map_err(JobError::from)?
        .ok_or(ApiError::UnknownJob)
}

async fn record(app: &App, row: JobRow, status: u16) -> Result<Resp, ApiError> {
    let r = app.store.read(move |c| jobs::record_of(c, &row)).await.map_err(JobError::from)?;
    Ok(with_degraded(app, respond::json(status, &r)))
}

pub async fn submit(app: &App, caller: &Caller, body: Value) -> Result<Resp, ApiError> {
    let sub = validate::job::validate(&body)?;
    if sub.network_profile == NetworkProfile::PublicHttps && !app.compute.config.public_https {
        return Err(ApiError::CapabilityNotAvailable { capability: "networkProfile:public-https".into() });
    }
    let cfg = &app.compute.config;
    let mut too_big = vec![];
    if sub.resources.cpu_millis.request > cfg.cpu_millis {
        too_big.push(format!("resources.cpu.request: more than the grid's capacity of {}m", cfg.cpu_millis));
    }
    if sub.resources.memory_bytes.request > cfg.memory_bytes {
        too_big.push(format!("resources.memory.request: more than the grid's capacity of {} bytes", cfg.memory_bytes));
    }
    if !too_big.is_empty() {
        return Err(ApiError::InvalidJobRequest { detail: too_big });
    }
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
    let caller = caller.clone();
    let (row, created) = app.store.write(move |tx| jobs::submit(tx, &caller, &sub, &body, &digest, now())).await?;
    if created {
        tracing::info!(job = %row.id, "job accepted");
        app.compute.wake.notify_one();
    }
    record(app, row, if created { 202 } else { 200 }).await
}

pub async fn get(app: &App, caller: &Caller, id: &str) -> Result<Resp, ApiError> {
    let row = owned(app, caller, id).await?;
    record(app, row, 200).await
}

pub async fn list(app: &App, caller: &Caller, query: &[(String, String)]) -> Result<Resp, ApiError> {
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
    Ok(respond::json(200, &grid_core::wire::job_record::JobList { jobs: records, next_cursor }))
}

pub async fn cancel(app: &App, caller: &Caller, id: &str) -> Result<Resp, ApiError> {
    owned(app, caller, id).await?;
    let jid = id.to_string();
    let (row, fx) = app.store.write(move |tx| jobs::transition(tx, &jid, Event::Cancel, now(), None)).await?;
    if fx.iter().any(|e| matches!(e, Effect::StopContainer { .. })) {
        app.compute.signal_stop(id);
    }
    record(app, row, 200).await
}

pub async fn retry(app: &App, caller: &Caller, id: &str) -> Result<Resp, ApiError> {
    owned(app, caller, id).await?;
    let (jid, c) = (id.to_string(), caller.clone());
    let (row, _) = app.store.write(move |tx| jobs::transition(tx, &jid, Event::Retry, now(), Some(&c))).await?;
    app.compute.wake.notify_one();
    record(app, row, 200).await
}

pub async fn artifacts(app: &App, caller: &Caller, id: &str) -> Result<Resp, ApiError> {
    let row = owned(app, caller, id).await?;
    let logs = app.store.read(move |c| jobs::logs(c, &row.id)).await.map_err(JobError::from)?;
    Ok(respond::json(200, &JobArtifacts { artifacts: logs.into_iter().map(|l| l.artifact).collect() }))
}

pub async fn logs(app: &App, caller: &Caller, id: &str, query: &[(String, String)]) -> Result<Resp, ApiError> {
    let attempt = log_query(query)?;
    let row = owned(app, caller, id).await?;
    let attempt = attempt.unwrap_or(row.job.attempt_number());
    let logs = app.store.read(move |c| jobs::logs(c, &row.id)).await.map_err(JobError::from)?;
    let log = logs.into_iter().find(|l| l.artifact.attempt == attempt).ok_or(ApiError::LogsNotAvailable)?;
    let (root, name, sha) = (app.compute.logs_dir.clone(), log.storage_name.clone(), log.sha256.clone());
    let data = tokio::task::spawn_blocking(move || crate::capture::files::read_checked(&root, &name, &sha))
        .await
        .map_err(|_| ApiError::compute_unavailable())?
        .map_err(|e| {
            tracing::error!(log = %log.storage_name, error = %e, "log unreadable or failed its integrity check");
            ApiError::compute_unavailable()
        })?;
    let mut r = respond::bytes(StatusCode::OK, "text/plain; charset=utf-8", data);
    let h = r.headers_mut();
    h.insert("x-grid-attempt", HeaderValue::from(attempt));
    if let Ok(v) = HeaderValue::from_str(&log.artifact.artifact_id) {
        h.insert("x-grid-artifact-id", v);
    }
    h.insert("x-grid-logs-truncated", HeaderValue::from_static(if log.artifact.truncated { "true" } else { "false" }));
    Ok(r)
}

/// Decoded query pairs.
pub fn pairs(query: Option<&str>) -> Vec<(String, String)> {
    url::form_urlencoded::parse(query.unwrap_or("").as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}
