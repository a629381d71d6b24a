//! Grid status, health and OAuth protected-resource metadata.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueCounts {
    pub wait: u32,
    pub prioritized: u32,
    pub delayed: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GridStatus {
    pub queue: QueueCounts,
    pub workers: u32,
    pub sessions: u32,
    pub max_sessions: u32,
    /// The grid's live nodes (ours, beside the contract's figures; a
    /// count only: node names are the operator's, `grid-server node list`).
    /// Absent from an older server's answer, read as 0.
    #[serde(default)]
    pub nodes: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueDepth {
    pub depth: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub status: String,
}

/// OAuth 2.0 protected-resource metadata (RFC 9728): snake_case by that RFC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtectedResource {
    pub resource: String,
    pub authorization_servers: Vec<String>,
    pub scopes_supported: Vec<String>,
    pub bearer_methods_supported: Vec<String>,
}

pub const SCOPES_SUPPORTED: [&str; 5] = ["openid", "offline_access", "email", "profile", "grid.invoke"];
