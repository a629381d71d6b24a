//! Leases a browser session with the SDK and drives it with a Rust CDP
//! crate, headless_chrome, through the session's cdpUrl: discovery at
//! `{cdpUrl}/json/version`, then `Browser::connect` on the
//! `webSocketDebuggerUrl` it names (the grid points it back through itself).
//!
//! ```sh
//! export GRID_URL=http://127.0.0.1:8080 GRID_API_KEY=grid_...
//! cargo run -p grid-examples --bin session -- https://example.com/
//! ```
//!
//! Prints the session id, then `title: ...` of the page, and releases the
//! session however the browser part ended. For a grid serving HTTPS, build
//! headless_chrome with its `rustls-tls-webpki-roots` feature and connect with
//! `Browser::connect_with_root_cert` (the default build speaks `ws://` only).

use std::error::Error;
use std::time::Duration;

use grid_client::{ClientConfig, Credential, GridClient};
use grid_core::wire::session::NewSession;
use headless_chrome::Browser;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let page = std::env::args().nth(1).ok_or("usage: session URL")?;

    let url = std::env::var("GRID_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let key = std::env::var("GRID_API_KEY").map_err(|_| "set GRID_API_KEY to your API key")?;
    let client = GridClient::from_config(ClientConfig::new(url, Credential::ApiKey(key)))?;

    // Billed for the time the browser is ready, up to ttlMinutes; released below.
    let lease = client.lease_session(&NewSession { ttl_minutes: Some(5), ..NewSession::default() }).await?;
    println!("session {}", lease.session_id);
    let driven = drive(&client, &lease.session_id, &lease.cdp_url, page).await;
    client.release_session(&lease.session_id).await?;
    println!("released {}", lease.session_id);
    driven
}

async fn drive(client: &GridClient, session_id: &str, cdp_url: &str, page: String) -> Result<(), Box<dyn Error>> {
    client.wait_session_running(session_id, Duration::from_millis(250)).await?.ok_or("the session ended early")?;

    // Discovery needs no credential: the cdpUrl's token is one. A plain GET.
    let version: serde_json::Value =
        serde_json::from_slice(&client.download(&format!("{cdp_url}/json/version")).await?)?;
    let ws = version["webSocketDebuggerUrl"].as_str().ok_or("no webSocketDebuggerUrl")?.to_string();

    // headless_chrome blocks: run it off the async runtime.
    let title = tokio::task::spawn_blocking(move || -> Result<String, Box<dyn Error + Send + Sync>> {
        let browser = Browser::connect(ws)?;
        let tab = browser.new_tab()?;
        tab.navigate_to(&page)?.wait_until_navigated()?;
        let title = tab.get_title()?;
        tab.close(false)?;
        Ok(title)
    })
    .await?
    .map_err(|e| -> Box<dyn Error> { e })?;
    println!("title: {title}");
    Ok(())
}
