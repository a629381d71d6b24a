//! Browser sessions (POST/GET/DELETE /sessions): the lease body and its
//! validated form. Response shapes are defined with the sessions endpoints.

use serde::{Deserialize, Serialize};

use crate::catalog::Profile;

/// What a client sends to POST /sessions; `{}` is a valid body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSession {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_minutes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
}

/// A session body that passed validation, defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSubmission {
    pub profile: Profile,
    pub ttl_minutes: u32,
    /// The requested network policy (`public-web-only/v1`), or none.
    pub network_policy: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn empty_session_body_is_an_empty_object() {
        assert_eq!(serde_json::to_value(NewSession::default()).unwrap(), json!({}));
        let full = NewSession {
            profile_id: Some("native-headless-browser/v2".into()),
            ttl_minutes: Some(5),
            network: Some("public-web-only/v1".into()),
        };
        let v = serde_json::to_value(&full).unwrap();
        assert_eq!(
            v,
            json!({"profileId": "native-headless-browser/v2", "ttlMinutes": 5, "network": "public-web-only/v1"})
        );
        assert_eq!(serde_json::from_value::<NewSession>(v).unwrap(), full);
    }
}
