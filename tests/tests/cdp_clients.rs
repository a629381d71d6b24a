//! Real CDP clients users have (Playwright, Puppeteer; npm packages in
//! tests/clients, installed by scripts/test.sh) drive a leased session
//! through its cdpUrl: the grid's relay onto the browser's DevTools pipe,
//! its discovery answers and its CDP gate, as those clients see them.
//!
//! Runs on: one store, because its subject is the CDP relay and gate as real clients see them.

use std::path::PathBuf;
use std::process::Command;

use grid_tests::bins::workspace_root;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::sessions::{lease_as, wait_running_as};
use grid_tests::target::Target;
use serde_json::{json, Value};

fn clients_dir() -> PathBuf {
    workspace_root().join("tests/clients")
}

#[tokio::test]
async fn playwright_and_puppeteer_drive_a_session_through_its_cdp_url() {
    let dir = clients_dir();
    assert!(
        dir.join("node_modules/playwright-core").is_dir() && dir.join("node_modules/puppeteer-core").is_dir(),
        "Playwright and Puppeteer are missing from {}: scripts/test.sh installs them (npm install there)",
        dir.display()
    );
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let lease = lease_as(&server, server.api_key(), json!({"ttlMinutes": 5})).await;
    wait_running_as(&server, server.api_key(), &lease.id).await;
    let cdp_url = lease.cdp_url;
    let page = target.url("/page/5");
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node").arg("cdp_clients.js").arg(&cdp_url).arg(&page).current_dir(dir).output()
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| server.fail(&format!("node did not run: {e}")));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "clients failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| server.fail(&format!("{e}: {stdout}")));
    let pw = &seen["playwright"];
    assert_eq!(pw["title"], "page 5", "{seen}");
    assert_eq!(pw["freshTitle"], "page 5", "a new context did not load: {seen}");
    assert!(pw["screenshotBytes"].as_u64().unwrap_or(0) > 1000, "{seen}");
    let refusal = pw["fileNavigation"].as_str().unwrap_or("");
    assert!(refusal.contains("refused by the grid: url: file:"), "file: navigation not refused by the gate: {seen}");
    assert_eq!(seen["puppeteer"], json!({"title": "page 5", "text": "page 5"}));
    assert!(target.hits("/page/5") >= 3, "the target saw {} requests", target.hits("/page/5"));
}

/// The README's simplest form: Puppeteer's `browserWSEndpoint` is the cdpUrl
/// itself (ws:// for http://), connected the moment the lease is answered,
/// without waiting for the session to run (a cold browser takes seconds to
/// start): the endpoint holds the connection until the browser is ready.
#[tokio::test]
async fn puppeteer_connects_with_the_cdp_url_itself_while_the_session_is_pending() {
    let dir = clients_dir();
    assert!(
        dir.join("node_modules/puppeteer-core").is_dir(),
        "Puppeteer is missing from {}: scripts/test.sh installs it (npm install there)",
        dir.display()
    );
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let lease = lease_as(&server, server.api_key(), json!({"ttlMinutes": 5})).await;
    let (cdp_url, page) = (lease.cdp_url.clone(), target.url("/page/6"));
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node").arg("cdp_clients.js").arg(&cdp_url).arg(&page).arg("simplest").current_dir(dir).output()
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| server.fail(&format!("node did not run: {e}")));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "Puppeteer failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| server.fail(&format!("{e}: {stdout}")));
    assert_eq!(seen["puppeteer"]["title"], "page 6", "{seen}");
}
