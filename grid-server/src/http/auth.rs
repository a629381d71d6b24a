//! Credential checks: an API key (`x-api-key`, or `Authorization: Bearer`
//! with the key, since many MCP clients can set only a bearer token), or
//! `Authorization: Bearer` with a sign-in token. A key is told from a token
//! by its `grid_` prefix (a JWT starts with `eyJ`). A check that cannot read
//! the account database in time answers 503 accounting_unavailable: nothing
//! was done, resending is safe.

use grid_core::error::ApiError;
use hyper::HeaderMap;

use crate::app::App;
use crate::store::accounts::{self, Caller};
use crate::store::{Conn, StoreError, StoreResult};

/// `audience` is the resource the request is for: the base URL, or the
/// base URL + `/mcp` on the MCP endpoint.
pub async fn authenticate(app: &App, headers: &HeaderMap, audience: &str) -> Result<Caller, ApiError> {
    if let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        if !key.starts_with(accounts::KEY_PREFIX) {
            return Err(ApiError::Unauthorized);
        }
        return key_caller(app, key).await;
    }
    let bearer = headers
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    let Some(token) = bearer else { return Err(ApiError::Unauthorized) };
    if token.starts_with(accounts::KEY_PREFIX) {
        return key_caller(app, token).await;
    }
    let identity = app.tokens.verify(token, audience).await.map_err(|e| {
        tracing::info!(error = %e, "bearer token refused");
        ApiError::Unauthorized
    })?;
    let (issuer, subject) = (identity.issuer.clone(), identity.subject.clone());
    match lookup(app, move |c| accounts::account_for_identity(c, &issuer, &subject)).await? {
        // A valid sign-in with no account, or a suspended one: accept the
        // invitation first, or use a key.
        None | Some((_, true)) => Err(ApiError::Forbidden),
        Some((account_id, false)) => Ok(Caller { account_id, ..Default::default() }),
    }
}

async fn key_caller(app: &App, key: &str) -> Result<Caller, ApiError> {
    let key = key.to_string();
    lookup(app, move |c| accounts::caller_for_key(c, &key)).await?.ok_or(ApiError::Unauthorized)
}

/// Reads the account database within the accounting deadline.
async fn lookup<R: Send + 'static>(
    app: &App,
    f: impl FnOnce(&Conn) -> StoreResult<R> + Send + 'static,
) -> Result<R, ApiError> {
    match tokio::time::timeout(app.config.accounting_timeout, app.store.read(f)).await {
        Err(_) | Ok(Err(StoreError::Busy)) => {
            crate::metrics::get().credential_timeouts.inc();
            Err(ApiError::AccountingUnavailable)
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "credential check failed");
            Err(ApiError::AccountingUnavailable)
        }
        Ok(Ok(r)) => Ok(r),
    }
}
