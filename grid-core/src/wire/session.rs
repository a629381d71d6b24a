//! Browser sessions (POST/GET/DELETE /sessions): the lease body and its
//! validated form. Response shapes are defined with the sessions endpoints.

use serde::{Deserialize, Serialize};

use crate::catalog::Profile;
use crate::session::SessionStatus;
use crate::time::Millis;

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

/// 201 answer of POST /sessions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionLease {
    pub session_id: String,
    /// Contains the session's access token; shown only here.
    pub cdp_url: String,
    pub expires_at: Millis,
    pub profile_id: String,
    pub attestation: Option<Attestation>,
    pub network_policy: Option<String>,
    pub network_attestation: Option<NetworkAttestation>,
}

/// An entry of GET /sessions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    pub session_id: String,
    pub status: SessionStatus,
    pub created_at: Millis,
    pub expires_at: Millis,
    pub profile_id: String,
    pub attestation: Option<Attestation>,
    pub network_policy: Option<String>,
    pub network_attestation: Option<NetworkAttestation>,
}

/// What the running browser is, as it reports itself and as launched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attestation {
    /// Equal to the requested profile.
    pub profile_id: String,
    /// `Browser` of the DevTools version endpoint, e.g. `Chrome/156.0.8078.73`.
    pub product: String,
    /// The version part of `product`.
    pub version: String,
    pub protocol_version: String,
    pub user_agent: String,
    /// `sha256:<hex>` of the browser executable that runs.
    pub image_digest: String,
    /// `headless`.
    pub mode: String,
    /// `navigator.language` read from inside the browser.
    pub locale: String,
    /// The IANA time zone `Intl` reports inside the browser.
    pub time_zone: String,
    pub window: Window,
    /// `sha256:<hex>` of the canonical JSON of the launch manifest.
    pub launch_manifest_hash: String,
    pub attested_at: Millis,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Window {
    pub width: u32,
    pub height: u32,
    pub device_scale_factor: f64,
}

/// Proof, gathered from inside the running session, that its network
/// policy is enforced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkAttestation {
    pub policy: String,
    /// `grid-egress-proxy`: every request of the browser goes through the
    /// grid's filtering proxy.
    pub enforced_by: String,
    pub probes: Vec<NetworkProbe>,
    pub attested_at: Millis,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkProbe {
    pub url: String,
    /// `refused` when the page could not reach the address.
    pub outcome: String,
    /// What the page saw (the fetch error).
    pub browser_result: String,
    /// What the grid's proxy decided for that request.
    pub proxy_decision: String,
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
