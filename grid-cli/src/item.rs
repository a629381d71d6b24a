//! `grid item show | retry`.

use std::process::ExitCode;

use clap::Subcommand;
use grid_client::endpoint;
use grid_client::error::ClientError;
use grid_core::wire::item::{CaptureItem, ItemRetried};

use crate::{output, Context};

#[derive(Debug, Subcommand)]
pub enum ItemCommand {
    /// Show a capture item (GET /jobs/{jobId}). An answer that is not a
    /// capture item (an analytical job) is shown as indented JSON.
    Show {
        /// The item id (a jobId of `grid batch show`).
        job_id: String,
    },
    /// Retry a failed capture item (POST /jobs/{jobId}/retry); prints its new state.
    Retry {
        /// The item id.
        job_id: String,
    },
}

pub async fn run(cx: &Context, command: ItemCommand) -> anyhow::Result<ExitCode> {
    match command {
        ItemCommand::Show { job_id } => show(cx, &job_id).await?,
        ItemCommand::Retry { job_id } => retry(cx, &job_id).await?,
    }
    Ok(ExitCode::SUCCESS)
}

async fn show(cx: &Context, job_id: &str) -> anyhow::Result<()> {
    let reply = cx.client.send_raw(&endpoint::item(job_id)).await?;
    if cx.json {
        return output::json_line(&reply);
    }
    match reply.decode::<CaptureItem>() {
        Ok(item) => output::lines(&item_lines(&item)),
        Err(ClientError::Decode { .. }) => {
            let json: serde_json::Value = reply.decode()?;
            output::lines(&[serde_json::to_string_pretty(&json)?])
        }
        Err(e) => Err(e.into()),
    }
}

async fn retry(cx: &Context, job_id: &str) -> anyhow::Result<()> {
    let reply = cx.client.send_raw(&endpoint::retry_item(job_id)).await?;
    if cx.json {
        return output::json_line(&reply);
    }
    let retried: ItemRetried = reply.decode()?;
    output::lines(&[format!("item {} retried: {}", retried.job_id, retried.state.as_str())])
}

fn item_lines(item: &CaptureItem) -> Vec<String> {
    let kinds: Vec<&str> = item.artifacts.keys().map(String::as_str).collect();
    output::key_values(&[
        ("jobId", item.job_id.clone()),
        ("batchId", item.batch_id.clone()),
        ("url", item.url.clone()),
        ("state", item.state.as_str().to_string()),
        ("attemptsMade", item.attempts_made.to_string()),
        ("failedReason", item.failed_reason.clone().unwrap_or_else(|| "-".into())),
        ("artifacts", if kinds.is_empty() { "-".into() } else { kinds.join(", ") }),
        ("script", item.script.clone()),
        ("profileId", item.profile_id.clone()),
    ])
}
