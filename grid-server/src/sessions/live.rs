//! A live session as the transports reach it: its browser once it is up,
//! whether it ended, the MCP browser tools' tab and journal; and the hash
//! its token is stored and checked as.

use std::time::Duration;

use tokio::sync::watch;

use super::{journal, tools};
use crate::browser::cdp::Connection;
use crate::ids::sha256_hex;

/// A running session's browser, as its CDP endpoint serves it.
#[derive(Clone)]
pub struct Endpoint {
    pub cdp: Connection,
    pub version: headless_chrome::protocol::cdp::Browser::GetVersionReturnObject,
}

/// What the proxy needs to reach a live session.
#[derive(Clone)]
pub struct Live {
    pub token_sha256: String,
    /// The browser, once it is up and attested.
    pub endpoint: watch::Receiver<Option<Endpoint>>,
    /// Turns true when the session ends: every proxied connection closes.
    pub ended: watch::Receiver<bool>,
    /// The tab the MCP browser tools act on (`tools.rs`), gone with the session.
    pub tab: tools::Tab,
    /// What the session's pages logged and requested, followed from the
    /// first browser tool call (`journal.rs`).
    pub journal: journal::Journal,
    /// Whether the live view may send the page a person's input.
    pub take_over: bool,
}

impl Live {
    /// The session's browser once it is up, waiting at most `within`;
    /// `None` when the session ended first or the wait ran out.
    pub async fn ready(mut self, within: Duration) -> Option<Endpoint> {
        let wait = async {
            loop {
                if let Some(ep) = self.endpoint.borrow().clone() {
                    return Some(ep);
                }
                if *self.ended.borrow() {
                    return None;
                }
                tokio::select! {
                    r = self.endpoint.changed() => if r.is_err() { return None },
                    _ = self.ended.changed() => {}
                }
            }
        };
        tokio::time::timeout(within, wait).await.ok().flatten()
    }
}

/// A session's CDP address under the grid's public `base_url`, as a
/// lease answers it and its discovery serves it.
pub fn cdp_url(base_url: &str, session_id: &str, token: &str) -> String {
    format!("{base_url}/cdp/{session_id}/{token}")
}

/// The token's hash, as stored.
pub fn token_hash(token: &str) -> String {
    sha256_hex(token.as_bytes())
}
