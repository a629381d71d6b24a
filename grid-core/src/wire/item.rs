//! A capture item as GET /jobs/{jobId} shows it, and the answers of its
//! retry and artifact calls.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::item::ItemState;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CaptureItem {
    pub job_id: String,
    pub batch_id: String,
    pub url: String,
    pub state: ItemState,
    pub attempts_made: u32,
    pub failed_reason: Option<String>,
    /// kind → storage name; storage names are not downloadable.
    pub artifacts: BTreeMap<String, String>,
    pub script: String,
    pub profile_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemRetried {
    pub job_id: String,
    pub state: ItemState,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactUrl {
    pub url: String,
}
