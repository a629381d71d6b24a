//! POST /sessions, GET /sessions, DELETE /sessions/{sessionId}.

use std::sync::Arc;

use grid_core::error::ApiError;
use grid_core::validate;
use grid_core::wire::session::SessionLease;
use serde_json::Value;

use super::Reply;
use crate::app::App;
use crate::ids::{now, random_hex};
use crate::sessions::{self, token_hash};
use crate::store::accounts::Caller;
use crate::store::idempotency::{self, Answer, Created, Outcome};
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
    let (c, s, t, max) = (caller.clone(), sub.clone(), token.clone(), app.sessions.config.max_sessions);
    let (base_url, node) = (app.config.base_url.clone(), app.config.node.clone());
    let outcome = app
        .store
        .write(move |tx| -> Result<_, SessionError> {
            let now = now();
            idempotency::once(tx, &c.account_id, key.as_ref(), now, |tx| {
                let row = store::lease(tx, &c, &s, &t, max, &node, now)?;
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
            sessions::spawn(app.clone(), row.id.clone(), token_hash(&token), sub);
            tracing::info!(session = %row.id, profile = row.profile.as_str(), "session leased");
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
