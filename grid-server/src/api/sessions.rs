//! POST /sessions, GET /sessions, DELETE /sessions/{sessionId},
//! GET /sessions/{sessionId}/downloads, GET /sessions/{sessionId}/recording.

use std::sync::Arc;

use grid_core::error::ApiError;
use grid_core::time::Millis;
use grid_core::validate;
use grid_core::wire::session::{SessionDownload, SessionDownloads, SessionRecording};
use serde_json::Value;

use super::Reply;
use crate::app::App;
use crate::ids::{new_id, now, random_hex};
use crate::sessions::downloads::{Folder, Recording};
use crate::sessions::driver::Reach;
use crate::store::accounts::Caller;
use crate::store::idempotency::{self, Outcome};
use crate::store::sessions as store;
use crate::upstream;
use crate::vault::Purpose;
use grid_core::ids;
use grid_core::wire::proxy::UpstreamProxy;

fn enabled(app: &App) -> Result<(), ApiError> {
    if app.sessions.config.disabled {
        Err(ApiError::SessionsDisabled)
    } else {
        Ok(())
    }
}

pub async fn lease(
    app: &Arc<App>,
    caller: &Caller,
    body: Value,
    idempotency_key: Option<String>,
) -> Result<Reply, ApiError> {
    enabled(app)?;
    let sub = validate::session::validate(&body)?;
    if let Some(c) = &sub.context {
        app.sessions.wait_for_save(&c.id).await?;
        // Opened now, so a state that cannot be is refused before anything
        // is reserved, not found by the session's start after a 201.
        if let Err(detail) = app.sessions.check_context(&caller.account_id, &c.id).await {
            tracing::warn!(context = %c.id, detail, "a lease of a context that cannot be opened refused");
            return Err(ApiError::ContextUnreadable { detail });
        }
    }
    let sealed = match &sub.proxy {
        Some(proxy) => {
            if let Some(problem) = upstream::refusal("proxy", proxy, app.config.allow_private_networks).await {
                return Err(ApiError::InvalidSessionBody { detail: vec![problem] });
            }
            seal_proxy(app, caller, ids::SESSION, proxy)?
        }
        None => None,
    };
    let key = idempotency_key.map(|k| idempotency::Key::new(k, "POST /sessions", &body));
    let reach = Reach { base_url: app.config.base_url.clone(), token: random_hex(32) };
    Ok(match app.sessions.driver.lease(caller, sub, sealed, key, reach).await? {
        Outcome::Performed(_, answer) => Reply::answer(answer, false),
        // The first request started the browser; nothing more to do.
        Outcome::Replayed(answer) => Reply::answer(answer, true),
    })
}

/// A row id drawn for a submission naming a proxy with credentials, and
/// the credentials sealed under it (never stored in clear).
pub fn seal_proxy(
    app: &App,
    caller: &Caller,
    prefix: &str,
    proxy: &UpstreamProxy,
) -> Result<Option<crate::store::SealedProxy>, ApiError> {
    let Some(credentials) = &proxy.credentials else { return Ok(None) };
    let id = new_id(prefix);
    let bytes = app
        .vault
        .seal(&caller.account_id, Purpose::ProxyCredentials, &id, &credentials.to_sealable())
        .map_err(|e| {
            tracing::error!(error = %e, "proxy credentials not sealed");
            ApiError::Internal
        })?;
    Ok(Some(crate::store::SealedProxy { id, bytes }))
}

pub async fn list(app: &App, caller: &Caller) -> Result<Reply, ApiError> {
    enabled(app)?;
    let account = caller.account_id.clone();
    let rows = app.store.read(move |c| store::live_of(c, &account)).await?;
    Ok(Reply::json(200, &rows.iter().map(|r| r.view()).collect::<Vec<_>>()))
}

pub async fn release(app: &App, caller: &Caller, id: &str) -> Result<Reply, ApiError> {
    enabled(app)?;
    app.sessions.driver.release(&caller.account_id, id).await?;
    Ok(Reply::no_content())
}

/// When a session's downloads go: its end plus the grace; `None` while it
/// is live.
pub fn kept_until(row: &store::SessionRow, grace: std::time::Duration) -> Option<Millis> {
    row.session.ended.map(|e| e.at.plus_ms(grace.as_millis() as i64))
}

/// GET /sessions/{sessionId}/downloads: the caller's own session, live or
/// ended within the grace; another identity's, or one past its grace,
/// answers 404 as one that does not exist.
pub async fn downloads(app: &App, caller: &Caller, id: &str) -> Result<Reply, ApiError> {
    enabled(app)?;
    let session_id = id.to_string();
    let row = app.store.lookup(move |c| store::load(c, &session_id)).await?;
    let row = row.filter(|r| r.account_id == caller.account_id).ok_or(ApiError::UnknownSession)?;
    let config = app.sessions.downloads.config;
    let kept_until = kept_until(&row, config.grace);
    let now = now();
    if kept_until.is_some_and(|t| t <= now) {
        return Err(ApiError::UnknownSession);
    }
    let folders = app.sessions.downloads.clone();
    let session_id = id.to_string();
    let listed = tokio::task::spawn_blocking(move || {
        let Some(folder) = folders.open(&session_id)? else { return Ok((vec![], vec![], vec![], None)) };
        let recording = folder.recording()?.map(|r| (r.size, r.modified));
        Ok::<_, std::io::Error>((folder.list()?, folder.refused(), folder.suggested(), recording))
    })
    .await
    .map_err(|_| ApiError::Internal)?
    .map_err(|e| {
        tracing::error!(session = id, error = %e, "session downloads unreadable");
        ApiError::Internal
    })?;
    let (files, refused, suggested, recording) = listed;
    let mut downloads: Vec<SessionDownload> = files
        .into_iter()
        .map(|f| SessionDownload {
            url: app.signer.session_download_url(id, &f.name, now),
            suggested_name: Folder::suggested_name(&suggested, &f.name),
            name: f.name,
            size_bytes: f.size,
            created_at: f.modified,
            recording: false,
        })
        .collect();
    let total_bytes = downloads.iter().map(|d| d.size_bytes).sum();
    // The grid's own file, last (written when the session ended), marked.
    if let Some((size, modified)) = recording {
        downloads.push(SessionDownload {
            name: grid_core::recording::NAME.into(),
            size_bytes: size,
            created_at: modified,
            url: app.signer.recording_url(id, now).0,
            suggested_name: None,
            recording: true,
        });
    }
    Ok(Reply::json(
        200,
        &SessionDownloads { total_bytes, downloads, limit_bytes: config.limit_bytes, refused, kept_until },
    ))
}

/// How long after its session's end a recording's page may still be being
/// written (409); past it, a missing page is 404 recording not present.
const RECORDING_WRITTEN_WITHIN_MS: i64 = 60_000;

/// GET /sessions/{sessionId}/recording: a signed URL to the replay page of
/// the caller's session, once the session has ended and its page is
/// written. Another identity's session answers 404 as one that does not
/// exist; a session leased without recording, or past its grace, 404
/// recording not present; a live one, 409 recording not ready.
pub async fn recording(app: &App, caller: &Caller, id: &str) -> Result<Reply, ApiError> {
    enabled(app)?;
    let session_id = id.to_string();
    let row = app.store.lookup(move |c| store::load(c, &session_id)).await?;
    let row = row.filter(|r| r.account_id == caller.account_id).ok_or(ApiError::UnknownSession)?;
    if !row.submission.as_ref().is_some_and(|s| s.recording) {
        return Err(ApiError::RecordingNotPresent);
    }
    let kept_until = kept_until(&row, app.sessions.downloads.config.grace);
    let now = now();
    match kept_until {
        None => {
            return Err(ApiError::RecordingNotReady {
                detail:
                    "the session is live: its recording is written when it ends (release it, or wait for its expiry)"
                        .into(),
            })
        }
        Some(t) if t <= now => return Err(ApiError::RecordingNotPresent),
        Some(_) => {}
    }
    let (folders, session_id) = (app.sessions.downloads.clone(), id.to_string());
    let found = tokio::task::spawn_blocking(move || match folders.open(&session_id)? {
        Some(folder) => folder.recording(),
        None => Ok(None),
    })
    .await
    .map_err(|_| ApiError::Internal)?
    .map_err(|e| {
        tracing::error!(session = id, error = %e, "session recording unreadable");
        ApiError::Internal
    })?;
    let Some(Recording { size, facts, .. }) = found else {
        // Written when the browser is gone, within moments of the end; a
        // page still missing long after was never written (its server
        // stopped abruptly while the session ran).
        let ended = row.session.ended.map_or(now, |e| e.at);
        if now.0.saturating_sub(ended.0) > RECORDING_WRITTEN_WITHIN_MS {
            return Err(ApiError::RecordingNotPresent);
        }
        return Err(ApiError::RecordingNotReady {
            detail: "the session has ended; its recording is still being written: ask again in a moment".into(),
        });
    };
    let (url, expires_at) = app.signer.recording_url(id, now);
    Ok(Reply::json(
        200,
        &SessionRecording {
            url,
            expires_at,
            name: grid_core::recording::NAME.into(),
            size_bytes: size,
            frames: facts.frames,
            duration_ms: facts.duration_ms,
            truncated: facts.truncated,
            kept_until,
        },
    ))
}
