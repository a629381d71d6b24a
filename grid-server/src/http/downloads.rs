//! Serves signed download URLs (made by `crate::signing`): no credential,
//! 15 minutes from issue, every file checked against its SHA-256.

use grid_core::catalog::ArtifactKind;
use grid_core::error::ApiError;
use hyper::StatusCode;

use super::captures::store_error;
use super::respond::{self, Resp};
use super::App;
use crate::ids::now;
use crate::store::items;

fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

pub async fn serve(app: &App, item: &str, kind: &str, query: Option<&str>) -> Result<Resp, ApiError> {
    let query = query.unwrap_or("");
    let expires = query_param(query, "expires").and_then(|s| s.parse::<i64>().ok());
    let sig = query_param(query, "sig");
    let (Some(expires), Some(sig)) = (expires, sig) else { return Err(ApiError::DownloadLinkInvalid) };
    if !app.signer.download_valid(item, kind, expires, sig, now()) {
        return Err(ApiError::DownloadLinkInvalid);
    }
    let kind = ArtifactKind::parse(kind).ok_or(ApiError::DownloadLinkInvalid)?;
    let item_id = item.to_string();
    let file = app
        .store
        .read(move |c| items::published_file(c, &item_id, kind))
        .await
        .map_err(store_error)?
        .ok_or(ApiError::ArtifactNotPresent)?;
    let root = app.artifacts_dir.clone();
    let (data, file) = tokio::task::spawn_blocking(move || (crate::capture::files::read_published(&root, &file), file))
        .await
        .map_err(|_| ApiError::Internal)?;
    let data = data.map_err(|e| {
        tracing::error!(file = %file.storage_name, error = %e, "published file unreadable or corrupt");
        ApiError::Internal
    })?;
    Ok(respond::bytes(StatusCode::OK, &file.content_type, data))
}
