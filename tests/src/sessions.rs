//! Leasing browser sessions the way a lessee does: POST /sessions, wait
//! until GET /sessions says running, connect a CDP client through the
//! cdpUrl, DELETE to release.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::bins::workspace_root;
use crate::cdp::{self, Cdp};
use crate::http::Resp;
use crate::server::GridServer;
use crate::target::Target;

/// Now on the wall clock, in ms since the epoch: the grid's timestamps
/// (`expiresAt`, `savedAt`, ...) are the same machine's clock.
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock after 1970").as_millis() as i64
}

/// An RFC 3339 timestamp of an answer, in ms since the epoch.
pub fn iso_ms(v: &Value) -> i64 {
    let s = v.as_str().unwrap_or_else(|| panic!("not a timestamp: {v}"));
    chrono::DateTime::parse_from_rfc3339(s).unwrap_or_else(|e| panic!("{s}: {e}")).timestamp_millis()
}

/// Longest a lease may stay pending (a cold Chromium start plus attestation
/// on a busy 2-core machine).
pub const RUNNING_WITHIN: Duration = Duration::from_secs(60);

/// A lease as POST /sessions answered it.
#[derive(Debug, Clone)]
pub struct Lease {
    pub id: String,
    pub cdp_url: String,
    pub answer: Value,
}

/// POST /sessions with `key`; fails the test unless 201 with the creation
/// answer's shape: an id, a cdpUrl through this server, no attestation yet.
pub async fn lease_as(server: &GridServer, key: &str, body: Value) -> Lease {
    let r = server.post_as(Some(key), "/sessions", Some(&body)).await;
    if r.status != 201 {
        server.fail(&format!("POST /sessions {body}: expected 201, got {r}"));
    }
    let field = |k: &str| {
        r.json[k].as_str().map(str::to_string).unwrap_or_else(|| server.fail(&format!("no {k} in the lease: {r}")))
    };
    let lease = Lease { id: field("sessionId"), cdp_url: field("cdpUrl"), answer: r.json.clone() };
    assert!(lease.cdp_url.starts_with(&format!("{}/cdp/{}/", server.base_url(), lease.id)), "{r}");
    // The live view's address, with the same token.
    assert_eq!(field("liveViewUrl"), format!("{}/view", lease.cdp_url), "{r}");
    assert_eq!(r.json["attestation"], Value::Null, "{r}");
    assert_eq!(r.json["networkAttestation"], Value::Null, "{r}");
    lease
}

/// Polls GET /sessions with `key` until the session is running; returns its
/// entry and the moment the answer saying so was read. The list never shows
/// a cdpUrl, nor an attestation while pending.
pub async fn wait_running_as(server: &GridServer, key: &str, id: &str) -> (Value, Instant) {
    crate::wait::wait_for(&format!("session {id} running"), RUNNING_WITHIN, || async {
        let r = server.get_as(Some(key), "/sessions").await;
        let seen = Instant::now();
        // A read that found the store too slow (a test's short
        // --accounting-timeout-ms on a busy machine) is retried, as the
        // contract tells clients to.
        if r.status == 503 && r.json["error"] == "accounting_unavailable" {
            return Err(format!("GET /sessions: {r}"));
        }
        if r.status != 200 {
            server.fail(&format!("GET /sessions: expected 200, got {r}"));
        }
        let listed = r.json.as_array().and_then(|l| l.iter().find(|s| s["sessionId"] == id)).cloned();
        if let Some(s) = &listed {
            assert!(s.get("cdpUrl").is_none(), "GET /sessions shows the cdpUrl: {s}");
        }
        match listed {
            Some(s) if s["status"] == "running" => Ok((s, seen)),
            Some(s) if s["status"] == "pending" => {
                assert_eq!(s["attestation"], Value::Null, "{s}");
                Err(s.to_string())
            }
            Some(s) => server.fail(&format!("session {id}: unexpected status: {s}")),
            None => server.fail(&format!("session {id} ended before it ran: {r}")),
        }
    })
    .await
}

/// Leases with `key`, waits until running and connects a CDP client.
pub async fn lease_running_as(server: &GridServer, key: &str, body: Value) -> (Lease, Cdp) {
    let lease = lease_as(server, key, body).await;
    wait_running_as(server, key, &lease.id).await;
    let cdp = connect(server, &lease.cdp_url).await;
    (lease, cdp)
}

/// [`lease_running_as`] with the first-start key.
pub async fn lease_running(server: &GridServer, body: Value) -> (Lease, Cdp) {
    lease_running_as(server, server.api_key(), body).await
}

/// Connects a CDP client the way a lessee does: discovery, then the socket.
pub async fn connect(server: &GridServer, cdp_url: &str) -> Cdp {
    let ws = cdp::ws_url(server.http(), cdp_url).await.unwrap_or_else(|e| server.fail(&format!("discovery: {e}")));
    Cdp::connect_trusting(&ws, server.ca_cert()).await.unwrap_or_else(|e| server.fail(&format!("connect {ws}: {e:?}")))
}

/// DELETE /sessions/{id} with `key`.
pub async fn release_as(server: &GridServer, key: &str, id: &str) -> Resp {
    server.request(reqwest::Method::DELETE, &format!("/sessions/{id}"), Some(key), None).await
}

/// Releases with the first-start key, asserting 204.
pub async fn release(server: &GridServer, id: &str) {
    let r = release_as(server, server.api_key(), id).await;
    if r.status != 204 {
        server.fail(&format!("DELETE /sessions/{id}: expected 204, got {r}"));
    }
}

/// Puppeteer opens each `/download-page/{name}?n={bytes}` of `target` in the
/// session and clicks its link.
pub async fn click_downloads(server: &GridServer, target: &Target, cdp_url: &str, files: &[(&str, usize)]) {
    let dir = workspace_root().join("tests/clients");
    assert!(
        dir.join("node_modules/puppeteer-core").is_dir(),
        "Puppeteer is missing from {}: scripts/test.sh installs it (npm install there)",
        dir.display()
    );
    let mut cmd = Command::new("node");
    cmd.arg("session_downloads.js").arg(cdp_url).current_dir(dir);
    for (name, bytes) in files {
        cmd.arg(target.url(&format!("/download-page/{name}?n={bytes}")));
    }
    let out = tokio::task::spawn_blocking(move || cmd.output()).await.unwrap();
    crate::child::checked(server, "Puppeteer (node session_downloads.js)", out);
}
