//! Capture batches, items, item retry and artifact URLs.

use grid_core::catalog::ArtifactKind;
use grid_core::error::ApiError;
use grid_core::validate;
use serde_json::Value;

use super::Reply;
use crate::app::App;
use crate::capture::files::{self, Checked};
use crate::ids::now;
use crate::store::accounts::Caller;
use crate::store::idempotency::{self, Outcome};
use crate::store::items;

pub async fn submit_batch(
    app: &App,
    caller: &Caller,
    body: Value,
    idempotency_key: Option<String>,
) -> Result<Reply, ApiError> {
    let submission = validate::batch::validate(&body)?;
    let key = idempotency_key.map(|k| idempotency::Key::new(k, "POST /batches", &body));
    Ok(match app.items.submit(caller, submission, key).await? {
        Outcome::Performed(_, answer) => Reply::answer(answer, false),
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
