//! Browser sessions: the calls of POST/GET/DELETE /sessions as [`Endpoint`]
//! values. The answers are grid-core's wire types
//! ([`SessionLease`], [`SessionView`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), grid_client::error::ClientError> {
//! use std::time::Duration;
//! use grid_client::GridClient;
//! use grid_core::wire::session::NewSession;
//!
//! let client = GridClient::new("http://127.0.0.1:8080", "my-api-key")?;
//! let lease = client.lease_session(&NewSession { ttl_minutes: Some(10), ..NewSession::default() }).await?;
//! // Connect a CDP client to lease.cdp_url once the session runs.
//! if let Some(running) = client.wait_session_running(&lease.session_id, Duration::from_millis(250)).await? {
//!     println!("{} runs {}", running.session_id, running.attestation.map(|a| a.product).unwrap_or_default());
//! }
//! client.release_session(&lease.session_id).await?;
//! # Ok(()) }
//! ```

use bytes::Bytes;
use grid_core::wire::session::{
    ContextCreated, ContextView, NewSession, SessionDownloads, SessionLease, SessionRecording, SessionView,
};
use reqwest::Method;

use crate::endpoint::Endpoint;

/// `error` of the 404 answered for a session that does not exist, has
/// ended, or is another identity's.
pub const UNKNOWN_SESSION: &str = "unknown session";

/// POST /sessions.
pub fn lease_session(session: &NewSession) -> Endpoint<SessionLease> {
    Endpoint::new(Method::POST, &["sessions"], true).with_json(session)
}

/// GET /sessions: the caller's live sessions, oldest first.
pub fn sessions() -> Endpoint<Vec<SessionView>> {
    Endpoint::new(Method::GET, &["sessions"], true)
}

/// DELETE /sessions/{sessionId}. The answer is 204 without a body: perform
/// it with [`crate::GridClient::send_raw`] (or use
/// [`crate::GridClient::release_session`]).
pub fn release_session(session_id: &str) -> Endpoint<Bytes> {
    Endpoint::new(Method::DELETE, &["sessions", session_id], true)
}

/// GET /sessions/{sessionId}/downloads.
pub fn session_downloads(session_id: &str) -> Endpoint<SessionDownloads> {
    Endpoint::new(Method::GET, &["sessions", session_id, "downloads"], true)
}

/// GET /sessions/{sessionId}/recording.
pub fn session_recording(session_id: &str) -> Endpoint<SessionRecording> {
    Endpoint::new(Method::GET, &["sessions", session_id, "recording"], true)
}

/// `error` of the 409 answered for a recording asked for while its session
/// is live (or its page is still being written).
pub const RECORDING_NOT_READY: &str = "recording not ready";
/// `error` of the 404 answered for a session leased without recording.
pub const RECORDING_NOT_PRESENT: &str = "recording not present";
/// `error` of the 404 answered for a context that does not exist, was
/// deleted, or is another account's.
pub const UNKNOWN_CONTEXT: &str = "unknown context";

/// POST /contexts: a new persistent browser context (docs/sessions.md,
/// "Contexts"); a lease names it in `NewSession::context`.
pub fn create_context() -> Endpoint<ContextCreated> {
    Endpoint::new(Method::POST, &["contexts"], true).with_json(&serde_json::json!({}))
}

/// GET /contexts: the caller's contexts, oldest first.
pub fn contexts() -> Endpoint<Vec<ContextView>> {
    Endpoint::new(Method::GET, &["contexts"], true)
}

/// DELETE /contexts/{contextId}: 204 without a body (see
/// [`crate::GridClient::delete_context`]).
pub fn delete_context(context_id: &str) -> Endpoint<Bytes> {
    Endpoint::new(Method::DELETE, &["contexts", context_id], true)
}

#[cfg(test)]
mod tests {
    use grid_core::wire::proxy::NewProxy;
    use grid_core::wire::session::NewViewport;
    use url::Url;

    use super::*;

    #[test]
    fn session_calls() {
        let base = Url::parse("http://127.0.0.1:8080/").unwrap();
        let lease = lease_session(&NewSession::default());
        assert_eq!(lease.to_string(), "POST /sessions");
        assert_eq!(lease.body().unwrap(), b"{}");
        let full = lease_session(&NewSession {
            profile_id: Some("native-headless-browser/v2".into()),
            ttl_minutes: Some(2),
            network: Some("public-web-only/v1".into()),
            viewport: Some(NewViewport { width: 390, height: 844, device_scale_factor: None, mobile: Some(true) }),
            user_agent: Some("Agent/1".into()),
            locale: Some("fr-CA".into()),
            timezone: Some("America/Toronto".into()),
            take_over: None,
            recording: Some(true),
            context: None,
            proxy: Some(NewProxy {
                server: "socks5://proxy.example:1080".into(),
                username: Some("u".into()),
                password: Some("pw".into()),
            }),
        });
        assert_eq!(
            std::str::from_utf8(full.body().unwrap()).unwrap(),
            r#"{"profileId":"native-headless-browser/v2","ttlMinutes":2,"network":"public-web-only/v1","viewport":{"width":390,"height":844,"mobile":true},"userAgent":"Agent/1","locale":"fr-CA","timezone":"America/Toronto","proxy":{"server":"socks5://proxy.example:1080","username":"u","password":"pw"},"recording":true}"#
        );
        assert_eq!(session_downloads("gs_1").to_string(), "GET /sessions/gs_1/downloads");
        assert!(session_downloads("gs_1").sends_credential());
        assert_eq!(session_recording("gs_1").to_string(), "GET /sessions/gs_1/recording");
        assert!(session_recording("gs_1").sends_credential());
        assert_eq!(sessions().url(&base).unwrap().as_str(), "http://127.0.0.1:8080/sessions");
        assert_eq!(release_session("gs_1").to_string(), "DELETE /sessions/gs_1");
        assert_eq!(release_session("a/b").url(&base).unwrap().as_str(), "http://127.0.0.1:8080/sessions/a%2Fb");
        assert!(lease.sends_credential() && sessions().sends_credential() && release_session("s").sends_credential());
        let with_context = lease_session(&NewSession {
            context: Some(grid_core::wire::session::NewSessionContext { id: "ctx_1".into(), persist: Some(true) }),
            ..NewSession::default()
        });
        assert_eq!(with_context.body().unwrap(), br#"{"context":{"id":"ctx_1","persist":true}}"#);
        assert_eq!(create_context().to_string(), "POST /contexts");
        assert_eq!(contexts().to_string(), "GET /contexts");
        assert_eq!(delete_context("ctx_1").to_string(), "DELETE /contexts/ctx_1");
        assert!(create_context().sends_credential() && contexts().sends_credential());
    }
}
