//! Health, grid status and OAuth protected-resource metadata.

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
    // The whole grid: every node's busy workers (each holds one active
    // item), every live session, and the slots of every live node.
    let (me, live_after) =
        (app.config.node.clone(), crate::store::nodes::live_after(app.clock.now(), app.config.node_lease));
    let (queue, active, sessions, max_sessions, nodes) = app
        .store
        .read(move |c| {
            let (queue, active) = items::queue_counts(c)?;
            let sessions = crate::store::sessions::live_count(c)?;
            let max_sessions = crate::store::nodes::live_max_sessions(c, &me, live_after)?;
            let nodes = crate::store::nodes::list(c, live_after)?.iter().filter(|n| n.live).count() as u32;
            Ok((queue, active, sessions, max_sessions, nodes))
        })
        .await?;
    Ok(Reply::json(200, &GridStatus { queue, workers: active, sessions, max_sessions, nodes }))
}

pub async fn queue_depth(app: &App) -> Result<Reply, ApiError> {
    let (q, active) = app.store.read(items::queue_counts).await?;
    // The grid has no paused state; the contract counts it for completeness.
    Ok(Reply::json(200, &QueueDepth { depth: q.wait + q.prioritized + q.delayed + active }))
}
