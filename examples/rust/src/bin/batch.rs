//! Submits a capture batch with the SDK, waits for it, prints each item's
//! state and saves the first completed item's screenshot.
//!
//! ```sh
//! export GRID_URL=http://127.0.0.1:8080 GRID_API_KEY=grid_...
//! cargo run -p grid-examples --bin batch -- -o shot.png https://example.com/ https://example.org/
//! ```
//!
//! Prints one line per item (`jobId state url`, and the reason of a failure),
//! then `screenshot: FILE (N bytes) from jobId`. `GRID_CA_CERT` names a CA to
//! trust for a grid serving HTTPS under its own certificate.

use std::error::Error;
use std::time::Duration;

use grid_client::{ClientConfig, Credential, GridClient};
use grid_core::catalog::ArtifactKind;
use grid_core::wire::batch::{BatchJobState, NewBatch};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let usage = "usage: batch -o FILE URL...";
    let mut args = std::env::args().skip(1);
    let (mut out, mut urls) = (None, Vec::new());
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-o" | "--screenshot" => out = Some(args.next().ok_or(usage)?),
            _ => urls.push(arg),
        }
    }
    let out = out.ok_or(usage)?;
    if urls.is_empty() {
        return Err(usage.into());
    }

    let url = std::env::var("GRID_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let key = std::env::var("GRID_API_KEY").map_err(|_| "set GRID_API_KEY to your API key")?;
    let client = GridClient::from_config(ClientConfig::new(url, Credential::ApiKey(key)))?;

    // The `capture` script (the default): a screenshot, the rendered HTML and a meta file per URL.
    let batch = NewBatch { urls, script: Some("capture".into()), ..NewBatch::default() };
    let created = client.submit_batch(&batch).await?;
    eprintln!("batch {} with {} items", created.batch_id, created.job_count);

    let done = client
        .wait_batch(&created.batch_id, Duration::from_millis(500), |view| {
            eprintln!("{}/{} done", view.counts.completed + view.counts.failed, view.total)
        })
        .await?;
    for job in &done.jobs {
        let state = serde_json::to_value(job.state)?;
        let reason = job.failed_reason.as_deref().unwrap_or("");
        println!("{} {} {} {reason}", job.job_id, state.as_str().unwrap_or("?"), job.url);
    }

    let first = done.jobs.iter().find(|j| j.state == BatchJobState::Completed).ok_or("no item completed")?;
    let png = client.download_artifact(&first.job_id, ArtifactKind::Screenshot).await?;
    std::fs::write(&out, &png)?;
    println!("screenshot: {out} ({} bytes) from {}", png.len(), first.job_id);
    Ok(())
}
