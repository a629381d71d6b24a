//! `grid context create | list | delete`: persistent browser contexts
//! (docs/sessions.md, "Contexts"); a lease starts from one with
//! `grid session lease --context ID [--persist]`.

use std::process::ExitCode;

use clap::Subcommand;
use grid_client::sessions as session_calls;
use grid_core::wire::session::{ContextCreated, ContextView};

use crate::{output, Context};

#[derive(Debug, Subcommand)]
pub enum ContextCommand {
    /// Create an empty context (POST /contexts); prints its id (with --json, the API's answer).
    ///   grid context create
    ///   grid session lease --context ctx_01J... --persist --wait
    Create,
    /// List your contexts, oldest first (GET /contexts): size of the saved state, created, last
    /// used, the session holding each.
    List,
    /// Delete a context and its saved state (DELETE /contexts/{contextId}); refused while a live
    /// session holds it. Prints nothing with --json.
    Delete {
        /// The context id.
        context_id: String,
    },
}

pub async fn run(cx: &Context, command: ContextCommand) -> anyhow::Result<ExitCode> {
    match command {
        ContextCommand::Create => {
            let reply = cx.client.send_raw(&session_calls::create_context()).await?;
            if cx.json {
                output::json_line(&reply)?;
            } else {
                let created: ContextCreated = reply.decode()?;
                output::lines(&[created.context_id])?;
            }
        }
        ContextCommand::List => {
            let reply = cx.client.send_raw(&session_calls::contexts()).await?;
            if cx.json {
                output::json_line(&reply)?;
            } else {
                let views: Vec<ContextView> = reply.decode()?;
                output::lines(&list_lines(&views))?;
            }
        }
        ContextCommand::Delete { context_id } => {
            cx.client.delete_context(&context_id).await?;
            if !cx.json {
                output::lines(&[format!("context {context_id} deleted")])?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn list_lines(views: &[ContextView]) -> Vec<String> {
    if views.is_empty() {
        return vec!["no contexts".into()];
    }
    let rows: Vec<Vec<String>> = views
        .iter()
        .map(|v| {
            vec![
                v.context_id.clone(),
                v.size_bytes.to_string(),
                v.created_at.to_iso(),
                v.last_used_at.map_or_else(|| "-".into(), |t| t.to_iso()),
                v.session_id.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    output::table(&["CONTEXT", "BYTES", "CREATED", "LAST USED", "SESSION"], &rows)
}

#[cfg(test)]
mod tests {
    use grid_core::time::Millis;

    use super::*;

    #[test]
    fn a_context_is_a_row_and_none_says_so() {
        assert_eq!(list_lines(&[]), ["no contexts"]);
        let v = ContextView {
            context_id: "ctx_1".into(),
            size_bytes: 42,
            created_at: Millis(0),
            last_used_at: None,
            saved_at: None,
            session_id: Some("ses_1".into()),
            last_save_refused: None,
        };
        let lines = list_lines(&[v]);
        assert!(lines[0].starts_with("CONTEXT"), "{lines:?}");
        assert!(lines[1].contains("ctx_1") && lines[1].contains("42") && lines[1].contains("ses_1"), "{lines:?}");
    }
}
