//! Serves signed download URLs (made by `crate::signing`): no credential,
//! 15 minutes from issue, every file checked against its SHA-256.
//!
//! A file kept on disk is checked by reading it in chunks, then streamed
//! from the same open file in chunks with its `Content-Length`: a download
//! holds one chunk in memory, not the file.

use bytes::{Bytes, BytesMut};
use grid_core::catalog::ArtifactKind;
use grid_core::error::ApiError;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use tokio::io::AsyncReadExt;

use super::captures::store_error;
use super::respond::{self, Body, Resp};
use super::App;
use crate::capture::files::{self, Checked, READ_CHUNK};
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
    let (storage_name, content_type, length) = (file.storage_name.clone(), file.content_type.clone(), file.byte_length);
    let checked = tokio::task::spawn_blocking(move || files::open_published(&root, file))
        .await
        .map_err(|_| ApiError::Internal)?
        .map_err(|e| {
            tracing::error!(file = %storage_name, error = %e, "published file unreadable or corrupt");
            ApiError::Internal
        })?;
    let body = match checked {
        Checked::Inline(bytes) => respond::full(bytes),
        Checked::OnDisk(file) => stream_file(tokio::fs::File::from_std(file), length as u64),
    };
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::OK;
    if let Ok(v) = HeaderValue::from_str(&content_type) {
        r.headers_mut().insert(CONTENT_TYPE, v);
    }
    r.headers_mut().insert(CONTENT_LENGTH, HeaderValue::from(length));
    Ok(r)
}

/// The first `length` bytes of `file`, `READ_CHUNK` at a time. A file that
/// ends early fails the body, which ends the connection: the client sees a
/// response shorter than its `Content-Length`, never a short file as whole.
fn stream_file(file: tokio::fs::File, length: u64) -> Body {
    let chunks = futures_util::stream::try_unfold((file, length), |(mut file, left)| async move {
        if left == 0 {
            return Ok(None);
        }
        let mut buf = BytesMut::with_capacity(READ_CHUNK.min(left as usize));
        let n = file.read_buf(&mut buf).await? as u64;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "published file ended early"));
        }
        let chunk: Bytes = buf.freeze();
        let chunk = if n > left { chunk.slice(..left as usize) } else { chunk };
        Ok(Some((Frame::data(chunk), (file, left.saturating_sub(n)))))
    });
    StreamBody::new(chunks).boxed_unsync()
}
