//! POST /sessions, GET /sessions, DELETE /sessions/{sessionId},
//! GET /sessions/{sessionId}/downloads.

use std::sync::Arc;

use grid_core::error::ApiError;
use grid_core::time::Millis;
use grid_core::validate;
use grid_core::wire::session::{SessionDownload, SessionDownloads, SessionLease};
use serde_json::Value;

use super::Reply;
use crate::app::App;
use crate::ids::{now, random_hex};
use crate::peers::Subject;
use crate::sessions::{self, token_hash};
use crate::store::accounts::Caller;
use crate::store::idempotency::{self, Answer, Created, Outcome};
use crate::store::nodes;
use crate::store::sessions::{self as store, SessionError};

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
    let key = idempotency_key.map(|k| idempotency::Key::new(k, "POST /sessions", &body));
    let token = random_hex(32);
    let (c, s, t) = (caller.clone(), sub.clone(), token.clone());
    let (base_url, node, lease) = (app.config.base_url.clone(), app.config.node.clone(), app.config.node_lease);
    let outcome = app
        .store
        .write(move |tx| -> Result<_, SessionError> {
            let now = now();
            idempotency::once(tx, &c.account_id, key.as_ref(), now, |tx| {
                let placement = store::Placement { me: &node, live_after: nodes::live_after(now, lease) };
                let row = store::lease(tx, &c, &s, &t, placement, now)?;
                let lease = SessionLease {
                    cdp_url: format!("{base_url}/cdp/{}/{t}", row.id),
                    session_id: row.id.clone(),
                    expires_at: row.session.expires_at,
                    profile_id: row.profile.as_str().to_string(),
                    attestation: None,
                    network_policy: row.network_policy.clone(),
                    network_attestation: None,
                };
                let answer = Answer::json(201, &lease)?;
                Ok(Created { subject: row.id.clone(), answer, value: row })
            })
        })
        .await?;
    Ok(match outcome {
        Outcome::Performed(row, answer) => {
            match row.node.as_deref() {
                Some(node) if node != app.config.node => {
                    // Placed on another node (this one's slots are taken):
                    // it starts the browser when told, or at its next
                    // reconciliation if the call fails.
                    let (app, id, node) = (app.clone(), row.id.clone(), node.to_string());
                    tokio::spawn(async move {
                        if let Err(e) = app.peers.sync(&node, Subject::Session(&id)).await {
                            tracing::warn!(session = %id, %node, error = %e, "the session's node was not told to start it; it does at its next reconciliation");
                        }
                    });
                }
                _ => sessions::spawn(app.clone(), row.id.clone(), token_hash(&token), sub),
            }
            tracing::info!(session = %row.id, profile = row.profile.as_str(), node = row.node.as_deref().unwrap_or("-"), "session leased");
            Reply::answer(answer, false)
        }
        // The first request started the browser; nothing more to do.
        Outcome::Replayed(answer) => Reply::answer(answer, true),
    })
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
    let row = app.store.read(move |c| store::load(c, &session_id)).await?;
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
        let Some(folder) = folders.open(&session_id)? else { return Ok((vec![], vec![])) };
        Ok::<_, std::io::Error>((folder.list()?, folder.refused()))
    })
    .await
    .map_err(|_| ApiError::Internal)?
    .map_err(|e| {
        tracing::error!(session = id, error = %e, "session downloads unreadable");
        ApiError::Internal
    })?;
    let (files, refused) = listed;
    let downloads: Vec<SessionDownload> = files
        .into_iter()
        .map(|f| SessionDownload {
            url: app.signer.session_download_url(id, &f.name, now),
            name: f.name,
            size_bytes: f.size,
            created_at: f.modified,
        })
        .collect();
    Ok(Reply::json(
        200,
        &SessionDownloads {
            total_bytes: downloads.iter().map(|d| d.size_bytes).sum(),
            downloads,
            limit_bytes: config.limit_bytes,
            refused,
            kept_until,
        },
    ))
}
