//! POST /batches, GET /batches (the caller's recent batches) and GET
//! /batches/{batchId}.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::catalog::{Profile, Script};
use crate::item::ItemState;
use crate::time::Millis;
use crate::wire::proxy::{NewProxy, UpstreamProxy};

/// What a client sends to POST /batches. Optional fields left out take the
/// contract's defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewBatch {
    pub urls: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// A persistent context whose cookies the items send (docs/captures.md,
    /// "Signed-in captures"); read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// An upstream proxy for the batch's fetch and browser items
    /// (docs/proxies.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<NewProxy>,
}

/// A batch body that passed validation, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchSubmission {
    pub urls: Vec<String>,
    pub script: Script,
    pub profile: Profile,
    pub params: Map<String, Value>,
    pub priority: Option<u32>,
    /// The context whose cookies the items send, read-only.
    pub context: Option<String>,
    /// The proxy the batch named, its credentials included (the server
    /// stores them only sealed).
    pub proxy: Option<UpstreamProxy>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchCreated {
    pub batch_id: String,
    pub job_count: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchCounts {
    pub waiting: u32,
    pub active: u32,
    pub completed: u32,
    pub failed: u32,
}

impl BatchCounts {
    pub fn add(&mut self, state: BatchJobState) {
        match state {
            BatchJobState::Waiting => self.waiting += 1,
            BatchJobState::Active => self.active += 1,
            BatchJobState::Completed => self.completed += 1,
            BatchJobState::Failed => self.failed += 1,
        }
    }
}

/// An item's state as the batch view shows it: prioritized and delayed items
/// are still waiting from the batch's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BatchJobState {
    Waiting,
    Active,
    Completed,
    Failed,
}

impl From<ItemState> for BatchJobState {
    fn from(s: ItemState) -> Self {
        match s {
            ItemState::Waiting | ItemState::Prioritized | ItemState::Delayed => BatchJobState::Waiting,
            ItemState::Active => BatchJobState::Active,
            ItemState::Completed => BatchJobState::Completed,
            ItemState::Failed => BatchJobState::Failed,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchJob {
    pub job_id: String,
    pub url: String,
    pub state: BatchJobState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchView {
    pub batch_id: String,
    pub counts: BatchCounts,
    pub total: u32,
    pub jobs: Vec<BatchJob>,
}

impl BatchView {
    /// Builds the view from items already sorted by jobId; counts are derived
    /// so they can never disagree with the list.
    pub fn from_jobs(batch_id: String, jobs: Vec<BatchJob>) -> BatchView {
        let mut counts = BatchCounts::default();
        for j in &jobs {
            counts.add(j.state);
        }
        BatchView { batch_id, counts, total: jobs.len() as u32, jobs }
    }

    pub fn is_done(&self) -> bool {
        self.counts.completed + self.counts.failed == self.total
    }
}

/// One batch of GET /batches: what it ran and how far it got, without its
/// items (GET /batches/{batchId} has them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchSummary {
    pub batch_id: String,
    pub created_at: Millis,
    pub script: String,
    pub profile_id: String,
    pub counts: BatchCounts,
    pub total: u32,
}

/// GET /batches: a page of the caller's batches, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchList {
    pub batches: Vec<BatchSummary>,
    /// Opaque; pass as `cursor` for the next (older) page. `null` on the last.
    pub next_cursor: Option<String>,
}
