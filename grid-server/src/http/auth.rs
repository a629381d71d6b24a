//! Credential checks. A check that cannot read the account database in time
//! answers 503 accounting_unavailable: nothing was done, resending is safe.

use grid_core::error::ApiError;
use hyper::HeaderMap;

use super::App;
use crate::store::accounts::{self, Caller};
use crate::store::StoreError;

pub async fn authenticate(app: &App, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()).map(str::to_owned) else {
        // Sign-in tokens (Authorization: Bearer) are checked once an OpenID
        // issuer is configured; until then a bearer token is no credential.
        return Err(ApiError::Unauthorized);
    };
    if !key.starts_with(accounts::KEY_PREFIX) {
        return Err(ApiError::Unauthorized);
    }
    let lookup = app.store.read(move |conn| accounts::caller_for_key(conn, &key));
    match tokio::time::timeout(app.config.accounting_timeout, lookup).await {
        Err(_) | Ok(Err(StoreError::Busy)) => Err(ApiError::AccountingUnavailable),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "credential check failed");
            Err(ApiError::AccountingUnavailable)
        }
        Ok(Ok(None)) => Err(ApiError::Unauthorized),
        Ok(Ok(Some(caller))) => Ok(caller),
    }
}
