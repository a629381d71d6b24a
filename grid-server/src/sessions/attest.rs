//! A started browser set up (its downloads into its folder, the lease's
//! viewport on its pages) and attested from inside: the browser's own
//! account of itself, and for a session with a network policy, proof that
//! a private address is refused.

use std::sync::Arc;
use std::time::Duration;

use grid_core::catalog::{Profile, PUBLIC_WEB_ONLY_V1};
use grid_core::wire::session::{
    Attestation, NetworkAttestation, NetworkProbe, SessionOverrides, SessionSubmission, Window,
};

use super::downloads::Folder;
use super::keeper;
use super::launch::{BrowserBuild, LaunchManifest};
use super::Sessions;
use crate::browser::cdp::Connection;
use crate::browser::process::BrowserProcess;
use crate::egress;
use crate::ids::now;

/// Sets a started browser up (its downloads go to `folder`, its pages get
/// the session's viewport) and attests it, within `ATTEST_TIMEOUT`.
pub(super) async fn prepare(
    sessions: &Sessions,
    browser: &BrowserProcess,
    folder: Folder,
    build: &BrowserBuild,
    manifest: &LaunchManifest,
    sub: &SessionSubmission,
    public_web_only: bool,
) -> Result<(Attestation, Option<NetworkAttestation>), String> {
    let limit = sessions.downloads.config.limit_bytes;
    let facts = tokio::time::timeout(ATTEST_TIMEOUT, async {
        keeper::start(&browser.cdp, Arc::new(folder), limit, sub.overrides.viewport)
            .await
            .map_err(|e| format!("setting the browser up: {e}"))?;
        attest(browser, build, manifest, sub.profile, public_web_only, &sessions.config.probe_url).await
    })
    .await
    .unwrap_or_else(|_| Err(format!("no answer within {ATTEST_TIMEOUT:?}")));
    facts.map_err(|e| format!("attestation failed: {e}"))
}

/// Longest reading a fresh browser's attestation may take.
pub(super) const ATTEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads the browser's own account of itself, and for a session with a
/// network policy, proof from inside that a private address is refused.
async fn attest(
    browser: &BrowserProcess,
    build: &BrowserBuild,
    manifest: &LaunchManifest,
    profile: Profile,
    public_web_only: bool,
    probe_url: &str,
) -> Result<(Attestation, Option<NetworkAttestation>), String> {
    let cdp: &Connection = &browser.cdp;
    let inside = cdp
        .evaluate_in_page(
            "about:blank",
            "({language: navigator.language, timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone, \
              width: window.outerWidth, height: window.outerHeight, dpr: window.devicePixelRatio, \
              touch: navigator.maxTouchPoints})",
        )
        .await
        .map_err(|e| e.to_string())?;
    let version = &browser.version;
    let product = version.product.clone();
    let attestation = Attestation {
        profile_id: profile.as_str().to_string(),
        version: product.split('/').nth(1).unwrap_or("").to_string(),
        product,
        protocol_version: version.protocol_version.clone(),
        user_agent: version.user_agent.clone(),
        image_digest: build.digest.clone(),
        mode: "headless".into(),
        locale: inside["language"].as_str().unwrap_or("").to_string(),
        time_zone: inside["timeZone"].as_str().unwrap_or("").to_string(),
        window: Window {
            width: inside["width"].as_u64().unwrap_or(0) as u32,
            height: inside["height"].as_u64().unwrap_or(0) as u32,
            device_scale_factor: inside["dpr"].as_f64().unwrap_or(0.0),
            mobile: inside["touch"].as_u64().unwrap_or(0) > 0,
        },
        overrides: Some(manifest.overrides.clone()).filter(|o: &SessionOverrides| !o.is_empty()),
        context: None,
        launch_manifest_hash: manifest.hash(),
        upstream_proxy: manifest
            .upstream_proxy
            .as_ref()
            .map(|s| s.split_once("://").map_or(s.as_str(), |(_, hp)| hp).to_string()),
        attested_at: now(),
    };
    let network = if !public_web_only {
        None
    } else {
        // The page itself opens the address; what it shows is the grid
        // proxy's refusal (or a network error), never the target.
        let seen = cdp
            .evaluate_in_page(probe_url, "(document.body ? document.body.innerText : '').slice(0, 300)")
            .await
            .map_err(|e| e.to_string())?;
        let seen = seen.as_str().unwrap_or("").trim().to_string();
        let host = url::Url::parse(probe_url)
            .ok()
            .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_string()))
            .unwrap_or_default();
        let decision = browser.egress.decision_for(&host);
        let refused = seen.contains(egress::REFUSAL_TEXT) && decision.as_ref().is_some_and(|d| !d.allowed);
        Some(NetworkAttestation {
            policy: PUBLIC_WEB_ONLY_V1.into(),
            enforced_by: "grid-egress-proxy".into(),
            probes: vec![NetworkProbe {
                url: probe_url.to_string(),
                outcome: if refused { "refused".into() } else { "reached".into() },
                browser_result: seen,
                proxy_decision: decision.map_or_else(|| "not seen by the proxy".into(), |d| d.detail),
            }],
            attested_at: now(),
        })
    };
    Ok((attestation, network))
}
