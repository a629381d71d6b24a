//! One call, one file: `GridClient::screenshot` (POST /screenshot) answers
//! the page's screenshot itself, no batch and no polling.
//!
//! ```sh
//! export GRID_URL=http://127.0.0.1:8080 GRID_API_KEY=grid_...
//! cargo run -p grid-examples --bin screenshot -- https://example.com/ page.png
//! ```
//!
//! Takes 1280x800 at scale 1, full page. Prints `FILE: N bytes, content-type,
//! item jobId, charged M micro-euros`. Options are the `capture` script's
//! (docs/one-call.md); `GridClient::pdf` and `GridClient::content` work alike.

use std::error::Error;

use grid_client::{ClientConfig, Credential, GridClient};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(page), Some(out)) = (args.next(), args.next()) else {
        return Err("usage: screenshot URL FILE".into());
    };

    let url = std::env::var("GRID_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let key = std::env::var("GRID_API_KEY").map_err(|_| "set GRID_API_KEY to your API key")?;
    let client = GridClient::from_config(ClientConfig::new(url, Credential::ApiKey(key)))?;

    let options = json!({"viewport": {"width": 1280, "height": 800}, "fullPage": true});
    let options = options.as_object().ok_or("options are a JSON object")?;
    let shot = client.screenshot(&page, options).await?;
    std::fs::write(&out, &shot.bytes)?;
    println!(
        "{out}: {} bytes, {}, item {}, charged {} micro-euros",
        shot.bytes.len(),
        shot.content_type,
        shot.job_id,
        shot.charged_micros
    );
    Ok(())
}
