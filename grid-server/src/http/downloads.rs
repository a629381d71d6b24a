//! Serves signed download URLs (made by `crate::signing`): no credential,
//! 15 minutes from issue. A capture's files are checked against their
//! SHA-256; a session's downloads (`/downloads/sessions/{sessionId}/{name}`) are
//! opened only as `sessions::downloads` allows (no link followed, one link,
//! the browser's own), and only until the session's grace is over.
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

/// Until when a session's files are kept: `None` when there is no such
/// session, `Some(None)` while it is live.
async fn files_kept_until(app: &App, session: &str) -> Result<Option<Option<grid_core::time::Millis>>, ApiError> {
    let id = session.to_string();
    let row = app.store.read(move |c| crate::store::sessions::load(c, &id)).await?;
    let grace = app.sessions.downloads.config.grace;
    Ok(row.map(|r| crate::api::sessions::kept_until(&r, grace)))
}

/// One file of a session's downloads; `encoded` is its name as the URL's
/// last path segment carries it.
pub async fn serve_session_file(
    app: &App,
    session: &str,
    encoded: &str,
    query: Option<&str>,
) -> Result<Resp, ApiError> {
    let query = query.unwrap_or("");
    let expires = query_param(query, "expires").and_then(|s| s.parse::<i64>().ok());
    let sig = query_param(query, "sig");
    let (Some(expires), Some(sig)) = (expires, sig) else { return Err(ApiError::DownloadLinkInvalid) };
    let name =
        percent_encoding::percent_decode_str(encoded).decode_utf8().map_err(|_| ApiError::DownloadLinkInvalid)?;
    let name = name.into_owned();
    let now = now();
    if !app.signer.session_download_valid(session, &name, expires, sig, now) {
        return Err(ApiError::DownloadLinkInvalid);
    }
    // A live session's files are served; an ended one's until its grace.
    let gone = match files_kept_until(app, session).await? {
        None => true,
        Some(kept) => kept.is_some_and(|t| t <= now),
    };
    if gone {
        return Err(ApiError::SessionDownloadNotPresent);
    }
    let (folders, id, wanted) = (app.sessions.downloads.clone(), session.to_string(), name.clone());
    let opened = tokio::task::spawn_blocking(move || match folders.open(&id)? {
        Some(folder) => folder.open_file(&wanted),
        None => Ok(None),
    })
    .await
    .map_err(|_| ApiError::Internal)?
    .map_err(|e| {
        tracing::error!(session, error = %e, "session download unreadable");
        ApiError::Internal
    })?;
    let (file, length, _) = opened.ok_or(ApiError::SessionDownloadNotPresent)?;
    let mut r = Response::new(stream_file(tokio::fs::File::from_std(file), length));
    *r.status_mut() = StatusCode::OK;
    let headers = r.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static("sandbox"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    if let Ok(v) = HeaderValue::from_str(&session_disposition(&name)) {
        headers.insert(CONTENT_DISPOSITION, v);
    }
    Ok(r)
}

/// What a replay page may do when opened from the grid's origin: run its
/// own inline player and show its frames (data: images), nothing else. The
/// `sandbox` gives it a unique origin: it reaches no cookie, storage or API
/// of the grid's, and loads nothing from anywhere.
pub const RECORDING_CSP: &str = "sandbox allow-scripts; default-src 'none'; img-src data:; \
     style-src 'unsafe-inline'; script-src 'unsafe-inline'; base-uri 'none'; form-action 'none'";

/// A session's replay page (`/recordings/{sessionId}`), by the URL GET
/// /sessions/{sessionId}/recording gave, until the session's grace is over.
pub async fn serve_recording(app: &App, session: &str, query: Option<&str>) -> Result<Resp, ApiError> {
    let query = query.unwrap_or("");
    let expires = query_param(query, "expires").and_then(|s| s.parse::<i64>().ok());
    let sig = query_param(query, "sig");
    let (Some(expires), Some(sig)) = (expires, sig) else { return Err(ApiError::DownloadLinkInvalid) };
    let now = now();
    if !app.signer.recording_valid(session, expires, sig, now) {
        return Err(ApiError::DownloadLinkInvalid);
    }
    // A recording is served once its session has ended, until its grace.
    let gone = files_kept_until(app, session).await?.flatten().is_none_or(|t| t <= now);
    if gone {
        return Err(ApiError::RecordingNotPresent);
    }
    let (folders, id) = (app.sessions.downloads.clone(), session.to_string());
    let opened = tokio::task::spawn_blocking(move || match folders.open(&id)? {
        Some(folder) => folder.recording(),
        None => Ok(None),
    })
    .await
    .map_err(|_| ApiError::Internal)?
    .map_err(|e| {
        tracing::error!(session, error = %e, "session recording unreadable");
        ApiError::Internal
    })?;
    let recording = opened.ok_or(ApiError::RecordingNotPresent)?;
    let length = recording.size;
    let mut r = Response::new(stream_file(tokio::fs::File::from_std(recording.file), length));
    *r.status_mut() = StatusCode::OK;
    let headers = r.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(RECORDING_CSP));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(CONTENT_DISPOSITION, HeaderValue::from_static("inline; filename=\"recording.html\""));
    Ok(r)
}

/// `attachment` with the file's name twice (RFC 6266): `filename` in plain
/// ASCII (every other byte, quote and backslash written `_`) for old
/// clients, `filename*` percent-encoded UTF-8 for the rest. Nothing of the
/// name reaches the header unescaped.
fn session_disposition(name: &str) -> String {
    let ascii: String =
        name.chars().map(|c| if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' { c } else { '_' }).collect();
    const ATTR_CHAR: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'!')
        .remove(b'#')
        .remove(b'$')
        .remove(b'&')
        .remove(b'+')
        .remove(b'-')
        .remove(b'.')
        .remove(b'^')
        .remove(b'_')
        .remove(b'`')
        .remove(b'|')
        .remove(b'~');
    let encoded = percent_encoding::utf8_percent_encode(name, ATTR_CHAR);
    format!("attachment; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
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
    fn session_file_names_are_escaped_in_the_disposition() {
        assert_eq!(
            session_disposition("report.csv"),
            "attachment; filename=\"report.csv\"; filename*=UTF-8''report.csv"
        );
        assert_eq!(
            session_disposition("Q1 \"x\"\\é.pdf"),
            "attachment; filename=\"Q1 _x___.pdf\"; filename*=UTF-8''Q1%20%22x%22%5C%C3%A9.pdf"
        );
        for name in ["a\r\nSet-Cookie: x=1", "\u{202e}fdp.exe", "ÿ\u{0}"] {
            assert!(HeaderValue::from_str(&session_disposition(name)).is_ok(), "{name:?}");
            assert!(!session_disposition(name).contains(['\r', '\n']), "{name:?}");
        }
    }

    #[test]
    fn attachment_names_keep_only_safe_characters() {
        assert_eq!(attachment_name("it_1\"; x=\r\n/..", ArtifactKind::Html, ""), "it_1x.html");
    }
}
