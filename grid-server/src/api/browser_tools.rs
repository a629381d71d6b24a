//! The MCP browser tools as calls (docs/mcp.md, "Browser tools"): their
//! arguments read (`grid_core::browser_tools::parse`), the session checked
//! to be the caller's and live, and the tool run where the session's
//! browser is: on this node (`sessions::tools::run`, through the session's
//! CDP gate) or, on several nodes, on the node holding it
//! (`Peers::browser_tool`, `POST /internal/sessions/{id}/tool`), which
//! checks the session again and runs it there. Another account's session,
//! an ended one and one that never existed are the same refusal, and show
//! nothing of any page.

use std::sync::Arc;

use grid_core::browser_tools::{self, Answer};
use grid_core::error::ApiError;
use serde_json::{Map, Value};

use super::{Reply, ToolAnswer};
use crate::app::App;
use crate::sessions::tools::{self, ToolError};
use crate::store::accounts::Caller;
use crate::store::sessions as store;

/// `Call::BrowserTool`: the tool on the caller's session, wherever its
/// browser runs.
pub async fn run(app: &Arc<App>, caller: &Caller, name: &str, args: &Map<String, Value>) -> Result<Reply, ApiError> {
    run_for(app, &caller.account_id, name, args, Reach::AnyNode).await
}

/// The tool for another node's call (`Route::NodeSessionTool`), on behalf
/// of `account_id`: the browser runs here, or the session is unknown.
pub async fn run_here(
    app: &Arc<App>,
    account_id: &str,
    name: &str,
    args: &Map<String, Value>,
) -> Result<Reply, ApiError> {
    run_for(app, account_id, name, args, Reach::ThisNode).await
}

/// Where a tool may run.
#[derive(Clone, Copy, PartialEq)]
enum Reach {
    /// Here, or on the node holding the session's browser.
    AnyNode,
    /// Here only: another node asked, so the browser is here or the session
    /// is not to be reached.
    ThisNode,
}

async fn run_for(
    app: &Arc<App>,
    account_id: &str,
    name: &str,
    args: &Map<String, Value>,
    reach: Reach,
) -> Result<Reply, ApiError> {
    if !browser_tools::is_browser_tool(name) {
        return Err(ApiError::InvalidBody { detail: vec![format!("tool: {name} is not a browser tool")] });
    }
    let (session_id, tool) = browser_tools::parse(name, args).map_err(|detail| ApiError::InvalidBody { detail })?;
    let id = session_id.clone();
    let row = app.store.lookup(move |c| store::load(c, &id)).await?;
    let row = row.filter(|r| r.account_id == account_id && r.session.is_live()).ok_or(ApiError::UnknownSession)?;
    let answer = match app.sessions.live(&session_id) {
        Some(live) => tools::run(live, tool).await.map_err(|e| match e {
            ToolError::Gone => ApiError::UnknownSession,
            ToolError::Failed(reason) => ApiError::BrowserToolFailed { reason },
        })?,
        // Its browser runs on another node: driven there.
        None => match row.node.filter(|n| reach == Reach::AnyNode && *n != app.config.node) {
            Some(node) => on_node(app, &node, &session_id, account_id, name, args).await?,
            None => return Err(ApiError::UnknownSession),
        },
    };
    Ok(Reply::browser_tool(ToolAnswer { session_id, answer }))
}

/// The tool run by `node`, which holds the session's browser. Its refusal
/// is read back into the error it rendered from the error table: the
/// session unknown there, or the tool's failure with its reason; any other
/// (its store failed) is an internal error here. A node that cannot be
/// reached leaves the session unreachable: unknown, as for any session
/// this node cannot drive.
async fn on_node(
    app: &App,
    node: &str,
    session_id: &str,
    account_id: &str,
    name: &str,
    args: &Map<String, Value>,
) -> Result<Answer, ApiError> {
    let arguments = Value::Object(args.clone());
    match app.peers.browser_tool(node, session_id, account_id, name, &arguments).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(refusal)) => Err(read_back(&refusal).unwrap_or_else(|| {
            tracing::warn!(session = %session_id, %node, %refusal, "browser tool refused by the session's node");
            ApiError::Internal
        })),
        Err(e) => {
            tracing::warn!(session = %session_id, error = %e, "browser tool not run on the session's node");
            Err(ApiError::UnknownSession)
        }
    }
}

/// The refusals a tool's node gives for the tool itself, from their bodies.
fn read_back(body: &Value) -> Option<ApiError> {
    let failed = ApiError::BrowserToolFailed { reason: String::new() };
    match (body["error"].as_str(), body["reason"].as_str()) {
        _ if *body == ApiError::UnknownSession.body() => Some(ApiError::UnknownSession),
        (Some(error), Some(reason)) if error == failed.row().error => {
            Some(ApiError::BrowserToolFailed { reason: reason.to_string() })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_refusals_read_back_into_their_errors() {
        for e in [ApiError::UnknownSession, ApiError::BrowserToolFailed { reason: "ref e3 is gone".into() }] {
            assert_eq!(read_back(&e.body()), Some(e));
        }
        assert_eq!(read_back(&ApiError::Internal.body()), None);
    }
}
