//! This node's calls to the other nodes of the grid, over their advertised
//! addresses (`--advertise-url`, docs/scale-out.md), and the credential that
//! lets a node in.
//!
//! The credential is a random secret kept in the store (created by the
//! first node that needs it), so every node sharing the database has it and
//! nothing else does: it is never an API key, and no API key or sign-in
//! token reaches the routes it guards (`Access::Node`). A node presents it
//! in `x-grid-node-credential` on every call and on every request it
//! forwards to the node running a session's browser.

use std::time::Duration;

use grid_core::browser_tools::Answer;

use crate::ids::sha256_hex;
use crate::store::{self, nodes, Store, StoreError};

/// The header carrying the nodes' credential.
pub const CREDENTIAL_HEADER: &str = "x-grid-node-credential";
/// On a forwarded CDP request: the public address the client used, so
/// discovery answers point back through the node the client talks to.
pub const FORWARDED_BASE_HEADER: &str = "x-grid-forwarded-base";
/// The setting holding the credential.
const CREDENTIAL_SETTING: &str = "node_credential";
/// Longest a call to another node may take (a job's container stop
/// included).
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest a browser tool run on another node may take: its longest wait
/// (`browser_wait_for`, 60 s) and a page's load after it.
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

/// What another node is asked to bring in line with its record.
#[derive(Debug, Clone, Copy)]
pub enum Subject<'a> {
    Session(&'a str),
    Job(&'a str),
}

impl Subject<'_> {
    fn path(&self) -> String {
        match self {
            Subject::Session(id) => format!("/internal/sessions/{id}/sync"),
            Subject::Job(id) => format!("/internal/jobs/{id}/sync"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("node {0} advertises no address (--advertise-url) or is gone")]
    NoAddress(String),
    #[error("node {node}: {source}")]
    Call { node: String, source: reqwest::Error },
    #[error("node {node} answered {status}")]
    Refused { node: String, status: u16 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub struct Peers {
    store: Store,
    client: reqwest::Client,
    credential: String,
    credential_sha256: String,
}

impl Peers {
    /// Reads (or creates) the credential the nodes share.
    pub async fn load(store: Store) -> Result<Peers, StoreError> {
        let credential =
            store.write(|tx| store::setting_or_init(tx, CREDENTIAL_SETTING, || crate::ids::random_hex(32))).await?;
        Ok(Peers::new(store, credential))
    }

    pub fn new(store: Store, credential: String) -> Peers {
        // Node-to-node traffic never goes through a proxy of the environment.
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(CALL_TIMEOUT)
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Peers { store, client, credential_sha256: sha256_hex(credential.as_bytes()), credential }
    }

    pub fn credential(&self) -> &str {
        &self.credential
    }

    /// Whether `presented` is the nodes' credential. Compared as hashes of
    /// equal length, so the time taken says nothing of the secret.
    pub fn admits(&self, presented: &[u8]) -> bool {
        sha256_hex(presented) == self.credential_sha256
    }

    /// The advertised address of `node`, if it has one.
    pub async fn address(&self, node: &str) -> Result<Option<String>, StoreError> {
        let name = node.to_string();
        self.store.read(move |c| nodes::advertise_url(c, &name)).await
    }

    /// Asks `node`, which runs the session's browser, to run an MCP browser
    /// tool on it for `account_id`: its answer, or the body of its refusal
    /// (an error table row, `ApiError::row`).
    pub async fn browser_tool(
        &self,
        node: &str,
        session_id: &str,
        account_id: &str,
        tool: &str,
        arguments: &serde_json::Value,
    ) -> Result<Result<Answer, serde_json::Value>, PeerError> {
        let base = self.address(node).await?.ok_or_else(|| PeerError::NoAddress(node.to_string()))?;
        let url = format!("{}/internal/sessions/{session_id}/tool", base.trim_end_matches('/'));
        let body = serde_json::json!({"tool": tool, "arguments": arguments, "accountId": account_id});
        let call = |source| PeerError::Call { node: node.to_string(), source };
        let answer = self
            .client
            .post(&url)
            .header(CREDENTIAL_HEADER, &self.credential)
            .json(&body)
            // A tool may wait for a page up to its own bound.
            .timeout(TOOL_TIMEOUT)
            .send()
            .await
            .map_err(call)?;
        let status = answer.status().as_u16();
        match status {
            200 => answer.json().await.map(Ok).map_err(call),
            400..=599 => match answer.json::<serde_json::Value>().await {
                Ok(refusal) if refusal["error"].is_string() => Ok(Err(refusal)),
                _ => Err(PeerError::Refused { node: node.to_string(), status }),
            },
            _ => Err(PeerError::Refused { node: node.to_string(), status }),
        }
    }

    /// Asks `node` to bring `subject` in line with its record, and waits
    /// for it to have done so.
    pub async fn sync(&self, node: &str, subject: Subject<'_>) -> Result<(), PeerError> {
        let base = self.address(node).await?.ok_or_else(|| PeerError::NoAddress(node.to_string()))?;
        let url = format!("{}{}", base.trim_end_matches('/'), subject.path());
        let answer = self
            .client
            .post(&url)
            .header(CREDENTIAL_HEADER, &self.credential)
            .send()
            .await
            .map_err(|source| PeerError::Call { node: node.to_string(), source })?;
        match answer.status().as_u16() {
            200..=299 => Ok(()),
            status => Err(PeerError::Refused { node: node.to_string(), status }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_shared_credential_is_admitted() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Duration::from_secs(1)).unwrap();
        let peers = Peers::new(store, "s3cret".into());
        assert!(peers.admits(b"s3cret"));
        assert!(!peers.admits(b"s3cre"));
        assert!(!peers.admits(b""));
    }

    #[tokio::test]
    async fn every_node_of_one_store_gets_the_same_credential() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Duration::from_secs(1)).unwrap();
        let a = Peers::load(store.clone()).await.unwrap();
        let b = Peers::load(store).await.unwrap();
        assert_eq!(a.credential(), b.credential());
        assert_eq!(a.credential().len(), 64);
    }
}
