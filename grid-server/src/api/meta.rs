//! Health, grid status and OAuth protected-resource metadata.

use std::sync::atomic::Ordering;

use grid_core::error::ApiError;
use grid_core::wire::grid::{GridStatus, Health, ProtectedResource, QueueDepth, SCOPES_SUPPORTED};

use super::Reply;
use crate::app::App;
use crate::store::items;

pub fn healthz() -> Reply {
    Reply::json(200, &Health { status: "ok".into() })
}

pub fn protected_resource(app: &App, mcp: bool) -> Reply {
    let base = &app.config.base_url;
    Reply::json(
        200,
        &ProtectedResource {
            resource: if mcp { format!("{base}/mcp") } else { base.clone() },
            authorization_servers: app.config.auth_url.iter().cloned().collect(),
            scopes_supported: SCOPES_SUPPORTED.iter().map(|s| s.to_string()).collect(),
            bearer_methods_supported: vec!["header".into()],
        },
    )
}

pub async fn grid_status(app: &App) -> Result<Reply, ApiError> {
    let (queue, _active) = app.store.read(items::queue_counts).await?;
    Ok(Reply::json(
        200,
        &GridStatus {
            queue,
            workers: app.busy_workers.load(Ordering::Relaxed),
            sessions: app.store.read(crate::store::sessions::live_count).await?,
            max_sessions: app.config.max_sessions,
        },
    ))
}

pub async fn queue_depth(app: &App) -> Result<Reply, ApiError> {
    let (q, active) = app.store.read(items::queue_counts).await?;
    // The grid has no paused state; the contract counts it for completeness.
    Ok(Reply::json(200, &QueueDepth { depth: q.wait + q.prioritized + q.delayed + active }))
}
