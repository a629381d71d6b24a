//! Capture batches, items, item retry and artifact URLs.

use grid_core::catalog::ArtifactKind;
use grid_core::error::ApiError;
use grid_core::validate;
use serde_json::Value;

use super::Reply;
use crate::app::App;
use crate::ids::now;
use crate::store::accounts::Caller;
use crate::store::idempotency::{self, Answer, Created, Outcome};
use crate::store::items;

pub async fn submit_batch(
    app: &App,
    caller: &Caller,
    body: Value,
    idempotency_key: Option<String>,
) -> Result<Reply, ApiError> {
    let submission = validate::batch::validate(&body)?;
    let key = idempotency_key.map(|k| idempotency::Key::new(k, "POST /batches", &body));
    let caller = caller.clone();
    let outcome = app
        .store
        // A refusal rolls the transaction back: nothing is queued.
        .write(move |tx| -> Result<_, ApiError> {
            let now = now();
            idempotency::once(tx, &caller.account_id, key.as_ref(), now, |tx| {
                let created = items::submit_batch(tx, &caller, &submission, now)?;
                let answer = Answer::json(201, &created)?;
                Ok(Created { subject: created.batch_id.clone(), answer, value: created })
            })
        })
        .await?;
    Ok(match outcome {
        Outcome::Performed(created, answer) => {
            app.queue_ready.notify_waiters();
            tracing::info!(batch = %created.batch_id, items = created.job_count, "batch queued");
            Reply::answer(answer, false)
        }
        Outcome::Replayed(answer) => Reply::answer(answer, true),
    })
}

pub async fn batch(app: &App, caller: &Caller, id: &str) -> Result<Reply, ApiError> {
    let (account, id) = (caller.account_id.clone(), id.to_string());
    let view = app.store.read(move |c| items::batch_view(c, &account, &id)).await?;
    view.map(|v| Reply::json(200, &v)).ok_or(ApiError::UnknownBatch)
}

pub async fn item(app: &App, caller: &Caller, id: &str) -> Result<Reply, ApiError> {
    let (account, id) = (caller.account_id.clone(), id.to_string());
    let view = app.store.read(move |c| items::item_view(c, &account, &id)).await?;
    view.map(|v| Reply::json(200, &v)).ok_or(ApiError::UnknownJob)
}

pub async fn retry(app: &App, caller: &Caller, id: &str) -> Result<Reply, ApiError> {
    let retried = app.items.retry(&caller.account_id, id).await?;
    Ok(Reply::json(200, &retried))
}

pub async fn artifact_url(app: &App, caller: &Caller, id: &str, kind: &str) -> Result<Reply, ApiError> {
    let kind = ArtifactKind::parse(kind).ok_or(ApiError::BadArtifactKind)?;
    let (account, item_id) = (caller.account_id.clone(), id.to_string());
    app.store.read(move |c| Ok(items::check_artifact(c, &account, &item_id, kind))).await??;
    let url = app.signer.download_url(id, kind, now());
    Ok(Reply::json(200, &grid_core::wire::item::ArtifactUrl { url }))
}
