//! Browser sessions (POST/GET/DELETE /sessions): the lease body and its
//! validated form. Response shapes are defined with the sessions endpoints.

use serde::{Deserialize, Serialize};

use crate::catalog::Profile;
use crate::session::SessionStatus;
use crate::time::Millis;
use crate::wire::proxy::{NewProxy, UpstreamProxy};

/// What a client sends to POST /sessions; `{}` is a valid body. The last
/// four fields override the profile's (docs/sessions.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSession {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_minutes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub viewport: Option<NewViewport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    /// A BCP 47 language tag (`fr-CA`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locale: Option<String>,
    /// An IANA time zone name (`America/Toronto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Whether a person at the live view may take over the page (mouse,
    /// keyboard, scroll); default false: the view only watches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub take_over: Option<bool>,
    /// An upstream proxy the browser's allowed traffic goes through
    /// (docs/proxies.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<NewProxy>,
    /// Whether the session's pages are recorded as a replay page
    /// (docs/sessions.md, Recordings); default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recording: Option<bool>,
    /// A persistent context the browser starts from (docs/sessions.md,
    /// "Contexts").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<NewSessionContext>,
}

/// `context` of POST /sessions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSessionContext {
    /// A context of the caller's (POST /contexts).
    pub id: String,
    /// Whether the session's state is saved back to the context when it
    /// ends; default false: the context is used read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persist: Option<bool>,
}

/// `viewport` of POST /sessions: the page's size in CSS pixels.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewViewport {
    pub width: u32,
    pub height: u32,
    /// Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_scale_factor: Option<f64>,
    /// Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mobile: Option<bool>,
}

/// A session body that passed validation, defaults applied. Stored as JSON
/// with the lease (the `submission` column of `sessions`): a change to its
/// shape must still read the rows already stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSubmission {
    pub profile: Profile,
    pub ttl_minutes: u32,
    /// The requested network policy (`public-web-only/v1`), or none.
    pub network_policy: Option<String>,
    pub overrides: SessionOverrides,
    /// The live view may send the page a person's input (`takeOver`).
    /// Stored leases before it read as false; written only when true, so
    /// the rows of every other lease keep their shape.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub take_over: bool,
    /// The upstream proxy the lease named: its scheme, host and port are
    /// stored here, its credentials only sealed (the `proxy_sealed` column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<UpstreamProxy>,
    /// The session's pages are recorded (`recording`). Stored leases
    /// before it read as false; written only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recording: bool,
    /// The context the browser starts from, and whether its end saves it
    /// back. Written only when asked for, like `take_over`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<SessionContext>,
}

/// A validated `context` of a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionContext {
    pub id: String,
    pub persist: bool,
}

impl SessionSubmission {
    /// A submission that asks for nothing but `profile`: no network policy,
    /// no overrides, and no TTL (only a lease reads it; a browser's set-up
    /// does not). Warm browsers are prepared from it, and a session leased
    /// before submissions were stored starts from it (with its recorded
    /// network policy).
    pub fn default_for(profile: Profile) -> SessionSubmission {
        SessionSubmission {
            profile,
            ttl_minutes: 0,
            network_policy: None,
            overrides: SessionOverrides::default(),
            take_over: false,
            recording: false,
            context: None,
            proxy: None,
        }
    }
}

/// What a session asked for instead of its profile's; each `None` keeps the
/// profile's. Echoed in the attestation as asked.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionOverrides {
    pub viewport: Option<Viewport>,
    pub user_agent: Option<String>,
    pub locale: Option<String>,
    pub timezone: Option<String>,
}

impl SessionOverrides {
    pub fn is_empty(&self) -> bool {
        *self == SessionOverrides::default()
    }
}

/// A validated viewport, defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Viewport {
    pub width: u32,
    pub height: u32,
    pub device_scale_factor: f64,
    pub mobile: bool,
}

/// 201 answer of POST /sessions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionLease {
    pub session_id: String,
    /// Contains the session's access token; shown only here.
    pub cdp_url: String,
    /// The live view a person opens in any browser to watch the session
    /// (`{cdpUrl}/view`: the same token, so as secret as the cdpUrl).
    #[serde(default)]
    pub live_view_url: String,
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
    /// The overrides the lease asked for (null: none), each also visible in
    /// what was read from inside (`userAgent`, `locale`, `timeZone`, `window`).
    #[serde(default)]
    pub overrides: Option<SessionOverrides>,
    /// The persistent context the browser started from (null: none): its
    /// id and a digest of the state loaded, never the state.
    #[serde(default)]
    pub context: Option<AttestedContext>,
    /// `sha256:<hex>` of the canonical JSON of the launch manifest.
    pub launch_manifest_hash: String,
    /// `host:port` of the upstream proxy the browser's allowed traffic goes
    /// through (the lease's, or the grid's `--upstream-proxy`); null: none.
    /// Never its credentials (docs/proxies.md).
    #[serde(default)]
    pub upstream_proxy: Option<String>,
    pub attested_at: Millis,
}

/// `context` of an attestation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttestedContext {
    pub context_id: String,
    /// `sha256:<hex>` of the state as loaded (its plain JSON); the digest
    /// of an empty state when the context had none saved yet.
    pub state_sha256: String,
    /// Whether the session's end saves its state back to the context.
    pub persist: bool,
}

/// POST /contexts's 201 answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextCreated {
    pub context_id: String,
}

/// An entry of GET /contexts (docs/sessions.md, "Contexts").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextView {
    pub context_id: String,
    /// Bytes of the saved state as stored (sealed); 0 before a first save.
    pub size_bytes: u64,
    pub created_at: Millis,
    /// The last lease that started from it (null: never used).
    pub last_used_at: Option<Millis>,
    /// The last time a session saved its state into it (null: never).
    pub saved_at: Option<Millis>,
    /// The live session holding it now (null: free).
    pub session_id: Option<String>,
    /// Why the last save was refused (the state kept is the one before),
    /// null when the last save was stored.
    pub last_save_refused: Option<String>,
}

/// A page of the session as it measures itself.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Window {
    /// `outerWidth` and `outerHeight`.
    pub width: u32,
    pub height: u32,
    pub device_scale_factor: f64,
    /// Touch input emulated (`navigator.maxTouchPoints` above 0): a mobile
    /// viewport.
    #[serde(default)]
    pub mobile: bool,
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

/// GET /sessions/{sessionId}/downloads: the files the session's pages
/// downloaded, oldest first (docs/sessions.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionDownloads {
    pub downloads: Vec<SessionDownload>,
    /// What the browser's listed downloads take together (the recording,
    /// listed with them but bounded on its own, is not counted).
    pub total_bytes: u64,
    /// The session's download cap: downloads that would pass it are
    /// cancelled, files found past it removed.
    pub limit_bytes: u64,
    /// Downloads the grid cancelled or removed, and why.
    pub refused: Vec<RefusedDownload>,
    /// When the files are removed: null while the session is live, its end
    /// plus the grid's grace afterwards.
    pub kept_until: Option<Millis>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionDownload {
    /// The file's name as the browser saved it.
    pub name: String,
    pub size_bytes: u64,
    pub created_at: Millis,
    /// Downloads the file without a credential, for 15 minutes from issue.
    pub url: String,
    /// The name the page suggested for the download (its
    /// `Content-Disposition` or link's name), when the grid saw it begin:
    /// a file a client saved under the download's guid (Playwright) is
    /// listed under that guid, and this is its real name. Null when unknown.
    #[serde(default)]
    pub suggested_name: Option<String>,
    /// True for the session's recording (`recording.html`, written by the
    /// grid, not the browser: its `url` is the replay page's); false for
    /// the browser's downloads.
    #[serde(default)]
    pub recording: bool,
}

/// GET /sessions/{sessionId}/recording: the session's replay page
/// (docs/sessions.md, Recordings).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecording {
    /// The replay page without a credential, for 15 minutes from issue.
    pub url: String,
    /// When `url` stops working.
    pub expires_at: Millis,
    /// `recording.html`.
    pub name: String,
    pub size_bytes: u64,
    /// Frames the page holds.
    pub frames: u64,
    /// From the first frame to the last, in milliseconds.
    pub duration_ms: u64,
    /// Recording stopped at the session's bound; the page says so too.
    pub truncated: bool,
    /// When the file is removed: the session's end plus the grid's grace.
    pub kept_until: Option<Millis>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RefusedDownload {
    /// The name the page suggested (or the file's, when one was removed).
    pub name: String,
    pub reason: String,
    pub at: Millis,
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
            viewport: Some(NewViewport { width: 390, height: 844, device_scale_factor: Some(3.0), mobile: Some(true) }),
            user_agent: Some("Agent/1".into()),
            locale: Some("fr-CA".into()),
            timezone: Some("America/Toronto".into()),
            take_over: Some(true),
            recording: Some(true),
            context: Some(NewSessionContext { id: "ctx_1".into(), persist: Some(true) }),
            proxy: None,
        };
        let v = serde_json::to_value(&full).unwrap();
        assert_eq!(
            v,
            json!({"profileId": "native-headless-browser/v2", "ttlMinutes": 5, "network": "public-web-only/v1",
                   "viewport": {"width": 390, "height": 844, "deviceScaleFactor": 3.0, "mobile": true},
                   "userAgent": "Agent/1", "locale": "fr-CA", "timezone": "America/Toronto", "takeOver": true,
                   "recording": true,
                   "context": {"id": "ctx_1", "persist": true}})
        );
        assert_eq!(serde_json::from_value::<NewSession>(v).unwrap(), full);
    }
}
