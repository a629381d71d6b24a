//! `grid status` and `grid health`.

use std::process::ExitCode;

use grid_client::endpoint;
use grid_core::wire::grid::{GridStatus, Health, QueueDepth};

use crate::{output, Context};

/// GET /grid and GET /grid/queue-depth. With --json: two lines, the two
/// answers in that order.
pub async fn status(cx: &Context) -> anyhow::Result<ExitCode> {
    let (grid, depth) = (endpoint::grid_status(), endpoint::queue_depth());
    let (grid, depth) = tokio::try_join!(cx.client.send_raw(&grid), cx.client.send_raw(&depth))?;
    if cx.json {
        output::json_line(&grid)?;
        output::json_line(&depth)?;
        return Ok(ExitCode::SUCCESS);
    }
    let grid: GridStatus = grid.decode()?;
    let depth: QueueDepth = depth.decode()?;
    output::lines(&output::key_values(&[
        (
            "queue",
            format!(
                "{} waiting, {} prioritized, {} delayed",
                grid.queue.wait, grid.queue.prioritized, grid.queue.delayed
            ),
        ),
        ("depth", depth.depth.to_string()),
        ("workers", grid.workers.to_string()),
        ("sessions", format!("{} of {}", grid.sessions, grid.max_sessions)),
        ("nodes", grid.nodes.to_string()),
    ]))?;
    Ok(ExitCode::SUCCESS)
}

/// GET /healthz. Prints `ok` (with --json, the answer); any other answer is an error.
pub async fn health(cx: &Context) -> anyhow::Result<ExitCode> {
    let reply = cx.client.send_raw(&endpoint::health()).await?;
    if cx.json {
        output::json_line(&reply)?;
    } else {
        let health: Health = reply.decode()?;
        output::lines(&[health.status])?;
    }
    Ok(ExitCode::SUCCESS)
}
