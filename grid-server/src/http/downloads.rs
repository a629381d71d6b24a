//! Serves signed download URLs (made by `crate::signing`): no credential,
//! 15 minutes from issue, every file checked against its SHA-256.
//!
//! Every download carries headers that keep a captured page inert on the
//! grid's origin (see `protect`).
//!
//! A file kept on disk is checked by reading it in chunks, then streamed
//! from the same open file in chunks with its `Content-Length`: a download
//! holds one chunk in memory, not the file.

use bytes::{Bytes, BytesMut};
use grid_core::catalog::ArtifactKind;
use grid_core::error::ApiError;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::{
    HeaderMap, HeaderValue, CONTENT_DISPOSITION, CONTENT_LENGTH, CONTENT_SECURITY_POLICY, CONTENT_TYPE,
    REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
};
use hyper::{Response, StatusCode};
use tokio::io::AsyncReadExt;

use super::respond::{self, Body, Resp};
use crate::app::App;
use crate::capture::files::{self, Checked, READ_CHUNK};
use crate::ids::now;
use crate::store::{items, Store};

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
        .read(move |c| items::published_file(c, &item_id, kind, files::INLINE_MAX_BYTES))
        .await?
        .ok_or(ApiError::ArtifactNotPresent)?;
    let (storage_name, content_type, length) = (file.storage_name.clone(), file.content_type.clone(), file.byte_length);
    let body = if file.inline.is_none() && files::in_database(&file.storage_name) {
        let item_id = item.to_string();
        if !app.store.read(move |c| items::file_intact(c, &item_id, kind)).await? {
            tracing::error!(file = %storage_name, "published file failed its checksum");
            return Err(ApiError::Internal);
        }
        stream_stored(app.store.clone(), item.to_string(), kind, length as u64)
    } else {
        let root = app.artifacts_dir.clone();
        let checked = tokio::task::spawn_blocking(move || files::open_published(&root, file))
            .await
            .map_err(|_| ApiError::Internal)?
            .map_err(|e| {
                tracing::error!(file = %storage_name, error = %e, "published file unreadable or corrupt");
                ApiError::Internal
            })?;
        match checked {
            Checked::Inline(bytes) => respond::full(bytes),
            Checked::OnDisk(file) => stream_file(tokio::fs::File::from_std(file), length as u64),
        }
    };
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::OK;
    if let Ok(v) = HeaderValue::from_str(&content_type) {
        r.headers_mut().insert(CONTENT_TYPE, v);
    }
    r.headers_mut().insert(CONTENT_LENGTH, HeaderValue::from(length));
    protect(r.headers_mut(), item, kind, &content_type);
    Ok(r)
}

/// Captured pages and bodies are the tenant's targets' content served from
/// the grid's own origin. `sandbox` gives a page that is opened anyway a
/// unique origin with no scripts; `nosniff` keeps browsers to the stored
/// content type; `no-referrer` keeps the signed URL out of requests a page
/// makes. Html and body are attachments, so a browser saves them instead of
/// rendering them.
fn protect(headers: &mut HeaderMap, item: &str, kind: ArtifactKind, content_type: &str) {
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static("sandbox"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    if matches!(kind, ArtifactKind::Html | ArtifactKind::Body) {
        let disposition = format!("attachment; filename=\"{}\"", attachment_name(item, kind, content_type));
        if let Ok(v) = HeaderValue::from_str(&disposition) {
            headers.insert(CONTENT_DISPOSITION, v);
        }
    }
}

/// `{item}.html` for html; `{item}-body.{extension of its content type}` for
/// a body (`bin` when the type is not one of a few common ones). Only
/// letters, digits, `_` and `-` of the item id are kept, so the name needs
/// no escaping.
fn attachment_name(item: &str, kind: ArtifactKind, content_type: &str) -> String {
    let item: String = item.chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-')).collect();
    if kind == ArtifactKind::Html {
        return format!("{item}.html");
    }
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let extension = match essence.as_str() {
        "text/html" | "application/xhtml+xml" => "html",
        "text/plain" => "txt",
        "text/css" => "css",
        "text/csv" => "csv",
        "application/json" => "json",
        "application/xml" | "text/xml" => "xml",
        "application/javascript" | "text/javascript" => "js",
        "application/pdf" => "pdf",
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/svg+xml" => "svg",
        _ => "bin",
    };
    format!("{item}-body.{extension}")
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

/// A large file kept in the database (PostgreSQL), `READ_CHUNK` at a time,
/// each slice one query; ending early fails the body as `stream_file` does.
fn stream_stored(store: Store, item: String, kind: ArtifactKind, length: u64) -> Body {
    let chunks = futures_util::stream::try_unfold(0u64, move |offset| {
        let (store, item) = (store.clone(), item.clone());
        async move {
            if offset >= length {
                return Ok(None);
            }
            let want = READ_CHUNK.min((length - offset) as usize);
            let slice = store
                .read(move |c| items::file_slice(c, &item, kind, offset, want))
                .await
                .map_err(std::io::Error::other)?
                .unwrap_or_default();
            if slice.is_empty() {
                return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "published file ended early"));
            }
            let n = slice.len() as u64;
            Ok(Some((Frame::data(Bytes::from(slice)), offset + n)))
        }
    });
    StreamBody::new(chunks).boxed_unsync()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_and_bodies_are_named_attachments_and_every_kind_is_sandboxed() {
        let mut h = HeaderMap::new();
        protect(&mut h, "it_01AB", ArtifactKind::Html, "text/html; charset=utf-8");
        assert_eq!(h[CONTENT_DISPOSITION], "attachment; filename=\"it_01AB.html\"");
        assert_eq!(h[CONTENT_SECURITY_POLICY], "sandbox");
        assert_eq!(h[X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(h[REFERRER_POLICY], "no-referrer");
        for (content_type, name) in [
            ("text/html; charset=UTF-8", "it_01AB-body.html"),
            ("Application/JSON", "it_01AB-body.json"),
            ("application/octet-stream", "it_01AB-body.bin"),
            ("", "it_01AB-body.bin"),
        ] {
            let mut h = HeaderMap::new();
            protect(&mut h, "it_01AB", ArtifactKind::Body, content_type);
            assert_eq!(h[CONTENT_DISPOSITION], format!("attachment; filename=\"{name}\"").as_str(), "{content_type}");
        }
        for kind in [ArtifactKind::Meta, ArtifactKind::Screenshot] {
            let mut h = HeaderMap::new();
            protect(&mut h, "it_01AB", kind, kind.default_content_type());
            assert!(h.get(CONTENT_DISPOSITION).is_none(), "{kind:?}");
            assert_eq!(h[CONTENT_SECURITY_POLICY], "sandbox");
            assert_eq!(h[X_CONTENT_TYPE_OPTIONS], "nosniff");
        }
    }

    #[test]
    fn attachment_names_keep_only_safe_characters() {
        assert_eq!(attachment_name("it_1\"; x=\r\n/..", ArtifactKind::Html, ""), "it_1x.html");
    }
}
