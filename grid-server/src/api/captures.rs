//! Capture batches, items, item retry and artifact URLs.

use grid_core::catalog::ArtifactKind;
use grid_core::error::ApiError;
use grid_core::validate;
use serde_json::Value;

use grid_core::item::Failure;
use grid_core::validate::one_call::OneCall;

use super::{CapturedFile, Reply};
use crate::app::App;
use crate::capture::files::{self, Checked};
use crate::capture::{self, Attended};
use crate::ids::now;
use crate::store::accounts::Caller;
use crate::store::idempotency::{self, Outcome};
use crate::store::items;
use crate::upstream;

pub async fn submit_batch(
    app: &App,
    caller: &Caller,
    body: Value,
    idempotency_key: Option<String>,
) -> Result<Reply, ApiError> {
    let submission = validate::batch::validate(&body)?;
    check_context(app, caller, &submission).await?;
    let sealed = match &submission.proxy {
        Some(proxy) => {
            if let Some(problem) = upstream::refusal("proxy", proxy, app.config.allow_private_networks).await {
                return Err(ApiError::InvalidBatchBody { detail: vec![problem] });
            }
            super::sessions::seal_proxy(app, caller, grid_core::ids::BATCH, proxy)?
        }
        None => None,
    };
    let key = idempotency_key.map(|k| idempotency::Key::new(k, "POST /batches", &body));
    Ok(match app.items.submit(caller, submission, sealed, key).await? {
        Outcome::Performed(_, answer) => Reply::answer(answer, false),
        Outcome::Replayed(answer) => Reply::answer(answer, true),
    })
}

/// A signed-in capture's context must be the caller's: another account's
/// is unknown, as one that does not exist.
async fn check_context(
    app: &App,
    caller: &Caller,
    submission: &grid_core::wire::batch::BatchSubmission,
) -> Result<(), ApiError> {
    let Some(context) = &submission.context else { return Ok(()) };
    let (account, id) = (caller.account_id.clone(), context.clone());
    if app.store.lookup(move |c| crate::store::contexts::owned(c, &account, &id)).await? {
        Ok(())
    } else {
        Err(ApiError::UnknownContext)
    }
}

/// POST /screenshot, /pdf or /content: a batch of the body's one URL whose
/// item this node claims at once (`ItemDriver::take_attended`: the
/// reservation, and a 402 before anything runs), runs on the browser pool
/// and ends before the answer; the answer is the file itself, the item's
/// ids and charge in headers. The attempt runs on a task of its own, so a
/// caller who hangs up does not leave the item active: it still ends (and
/// is charged if it completed, docs/one-call.md).
pub async fn one_call(app: &App, caller: &Caller, call: OneCall, body: Value) -> Result<Reply, ApiError> {
    let submission = validate::one_call::validate(call, &body)?;
    check_context(app, caller, &submission).await?;
    if app.runner.browsers.is_none() {
        // As the contract answers a job asking for what no node has.
        return Err(ApiError::CapabilityNotAvailable { capability: "browser".into() });
    }
    if !app.config.allow_private_networks {
        let url = url::Url::parse(&submission.urls[0]).map_err(|_| ApiError::Internal)?;
        if let Err(refused) = crate::capture::guard::check_literal_host(&url) {
            return Err(ApiError::InvalidCaptureBody { detail: vec![format!("url: {refused}")] });
        }
    }
    let claim = app.items.take_attended(caller, submission).await?;
    let (job_id, batch_id) = (claim.id.clone(), claim.batch_id.clone());
    let runner = app.runner.clone();
    let attempt = tokio::spawn(async move { capture::run_attended(&runner, claim, call.answers()).await });
    let ended = attempt.await.map_err(|e| {
        tracing::error!(item = %job_id, error = %e, "a one-call capture's task failed");
        ApiError::Internal
    })??;
    match ended {
        Attended::Completed { file, target_status, charged_micros } => Ok(Reply::file(CapturedFile {
            content_type: file.content_type,
            bytes: file.bytes,
            job_id,
            batch_id,
            charged_micros,
            target_status,
        })),
        Attended::Failed(Failure::Terminal(reason)) => Err(ApiError::CaptureRefused { reason, job_id }),
        Attended::Failed(Failure::Transient(reason)) => Err(ApiError::CaptureFailed { reason, job_id }),
    }
}

pub async fn batch(app: &App, caller: &Caller, id: &str) -> Result<Reply, ApiError> {
    let (account, id) = (caller.account_id.clone(), id.to_string());
    let view = app.store.read(move |c| items::batch_view(c, &account, &id)).await?;
    view.map(|v| Reply::json(200, &v)).ok_or(ApiError::UnknownBatch)
}

/// GET /batches: a page of the caller's own batches (the store filters by
/// account in SQL), the cursor bound to the caller.
pub async fn list_batches(app: &App, caller: &Caller, query: &[(String, String)]) -> Result<Reply, ApiError> {
    let q = validate::list::batch_list_query(query)?;
    let scope = format!("batches|{}", caller.account_id);
    let before = match &q.cursor {
        Some(c) => Some(app.signer.open_id_cursor(&scope, c).ok_or(ApiError::InvalidListCursor)?),
        None => None,
    };
    let (account, limit) = (caller.account_id.clone(), q.limit);
    let (batches, next) = app.store.read(move |c| items::list_batches(c, &account, before.as_deref(), limit)).await?;
    let next_cursor = next.map(|id| app.signer.seal_id_cursor(&scope, &id));
    Ok(Reply::json(200, &grid_core::wire::batch::BatchList { batches, next_cursor }))
}

pub async fn item(app: &App, caller: &Caller, id: &str) -> Result<Reply, ApiError> {
    let (account, id) = (caller.account_id.clone(), id.to_string());
    let view = app.store.lookup(move |c| items::item_view(c, &account, &id)).await?;
    view.map(|v| Reply::json(200, &v)).ok_or(ApiError::UnknownItemOrJob)
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

/// One published file of a capture item, read for a caller who wants its
/// bytes (the MCP `get_capture` tool): `bytes` is `None` when the file is
/// larger than the reader's limit, so nothing that large is loaded.
#[derive(Debug, Clone)]
pub struct ItemFile {
    pub kind: ArtifactKind,
    pub content_type: String,
    pub byte_length: u64,
    pub bytes: Option<Vec<u8>>,
}

/// The caller's item's published files of `kinds` (a kind the item has not
/// published is left out), each checked against its SHA-256 as a download
/// is. Another account's item, or none, is `UnknownItemOrJob`.
pub async fn read_files(
    app: &App,
    caller: &Caller,
    id: &str,
    kinds: &[ArtifactKind],
    limit: fn(ArtifactKind) -> u64,
) -> Result<Vec<ItemFile>, ApiError> {
    let (account, item_id, wanted) = (caller.account_id.clone(), id.to_string(), kinds.to_vec());
    let published = app
        .store
        .read(move |c| {
            if items::item_view(c, &account, &item_id)?.is_none() {
                return Ok(None);
            }
            let mut found = vec![];
            for kind in wanted {
                if let Some(f) =
                    items::published_file(c, &item_id, kind, usize::try_from(limit(kind)).unwrap_or(usize::MAX))?
                {
                    found.push(f);
                }
            }
            Ok(Some(found))
        })
        .await?
        .ok_or(ApiError::UnknownItemOrJob)?;
    let root = app.artifacts_dir.clone();
    tokio::task::spawn_blocking(move || {
        published
            .into_iter()
            .map(|f| {
                let length = u64::try_from(f.byte_length).unwrap_or(u64::MAX);
                let (kind, content_type, name) = (f.kind, f.content_type.clone(), f.storage_name.clone());
                let bytes = if length > limit(kind) {
                    None
                } else {
                    let checked = files::open_published(&root, f).map_err(|e| {
                        tracing::error!(file = %name, error = %e, "published file unreadable or corrupt");
                        ApiError::Internal
                    })?;
                    Some(match checked {
                        Checked::Inline(b) => b,
                        Checked::OnDisk(mut file) => {
                            let mut b = Vec::with_capacity(length as usize);
                            std::io::Read::read_to_end(&mut file, &mut b).map_err(|e| {
                                tracing::error!(file = %name, error = %e, "published file unreadable");
                                ApiError::Internal
                            })?;
                            b
                        }
                    })
                };
                Ok(ItemFile { kind, content_type, byte_length: length, bytes })
            })
            .collect::<Result<Vec<_>, ApiError>>()
    })
    .await
    .map_err(|_| ApiError::Internal)?
}
