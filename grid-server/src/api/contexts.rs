//! POST /contexts, GET /contexts, DELETE /contexts/{contextId}: persistent
//! browser contexts (docs/sessions.md, "Contexts"). Another account's
//! context answers 404 exactly as one that does not exist
//! (`store::contexts`, by account in SQL). Created and deleted through the
//! session tasks' handle (`sessions::Sessions`), which owns contexts' rows.

use grid_core::error::ApiError;
use grid_core::wire::session::ContextCreated;

use super::Reply;
use crate::app::App;
use crate::store::accounts::Caller;
use crate::store::contexts as store;

fn enabled(app: &App) -> Result<(), ApiError> {
    if app.sessions.config.disabled {
        Err(ApiError::SessionsDisabled)
    } else {
        Ok(())
    }
}

pub async fn create(app: &App, caller: &Caller) -> Result<Reply, ApiError> {
    enabled(app)?;
    let context_id = app.sessions.create_context(&caller.account_id).await?;
    tracing::info!(context = %context_id, "context created");
    Ok(Reply::json(201, &ContextCreated { context_id }))
}

pub async fn list(app: &App, caller: &Caller) -> Result<Reply, ApiError> {
    enabled(app)?;
    let account = caller.account_id.clone();
    let rows = app.store.read(move |c| store::list(c, &account)).await?;
    Ok(Reply::json(200, &rows))
}

pub async fn delete(app: &App, caller: &Caller, id: &str) -> Result<Reply, ApiError> {
    enabled(app)?;
    app.sessions.delete_context(&caller.account_id, id).await?;
    tracing::info!(context = %id, "context deleted");
    Ok(Reply::no_content())
}
