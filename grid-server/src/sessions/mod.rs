//! Leased browser sessions: one Chromium per lease, reached through the
//! grid's CDP proxy with a per-session token.
//!
//! A lease takes a slot and its reservation in one transaction (store::
//! sessions::lease), then a task of its own launches (or takes a warm)
//! browser, attests it from inside, marks it running (the meter starts at
//! the browser's first ready moment) and watches it until release, expiry
//! or loss. Every end goes through the session state machine, which settles
//! the ready time in the same transaction.

pub mod gate;
pub mod launch;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use grid_core::catalog::{Profile, PUBLIC_WEB_ONLY_V1};
use grid_core::error::ApiError;
use grid_core::session::Event;
use grid_core::time::Millis;
use grid_core::wire::session::{Attestation, NetworkAttestation, NetworkProbe, SessionSubmission, Window};
use tokio::sync::watch;
use tracing::Instrument;

use crate::app::App;
use crate::browser::cdp::Connection;
use crate::browser::hosts::RequestRules;
use crate::browser::process::BrowserProcess;
use crate::browser::sandbox::SandboxConfig;
use crate::egress::{self, EgressPolicy, Policy};
use crate::ids::{now, sha256_hex};
use crate::store::sessions as store;
use launch::{BrowserBuild, LaunchManifest};

#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub chromium: PathBuf,
    pub max_sessions: u32,
    pub disabled: bool,
    /// Browsers kept started per profile (without network policy), so a
    /// lease does not wait for a launch.
    pub warm: usize,
    pub egress: EgressPolicy,
    /// A non-public address the network attestation must find refused.
    pub probe_url: String,
    pub sandbox: SandboxConfig,
    /// The grid's ordinary network access (sessions without a policy):
    /// private networks too when set.
    pub allow_private_networks: bool,
}

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
}

struct Handle {
    live: Live,
    end: watch::Sender<bool>,
}

pub struct Sessions {
    pub config: SessionConfig,
    build: OnceLock<Result<BrowserBuild, String>>,
    live: Mutex<HashMap<String, Handle>>,
    warm: Mutex<HashMap<Profile, Vec<BrowserProcess>>>,
}

impl Sessions {
    pub fn new(config: SessionConfig) -> Sessions {
        Sessions { config, build: OnceLock::new(), live: Mutex::new(HashMap::new()), warm: Mutex::new(HashMap::new()) }
    }

    fn build(&self) -> Result<&BrowserBuild, ApiError> {
        self.build
            .get_or_init(|| BrowserBuild::inspect(&self.config.chromium).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| {
                tracing::error!(chromium = %self.config.chromium.display(), error = %e, "browser unavailable");
                ApiError::Internal
            })
    }

    pub fn live(&self, id: &str) -> Option<Live> {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).get(id).map(|h| h.live.clone())
    }

    fn register(&self, id: &str, token_sha256: String) -> (watch::Sender<Option<Endpoint>>, watch::Receiver<bool>) {
        let (endpoint, endpoint_rx) = watch::channel(None);
        let (end, ended) = watch::channel(false);
        let handle = Handle { live: Live { token_sha256, endpoint: endpoint_rx, ended: ended.clone() }, end };
        self.live.lock().unwrap_or_else(|p| p.into_inner()).insert(id.to_string(), handle);
        (endpoint, ended)
    }

    /// Ends the session's browser and closes its connections.
    pub fn signal_end(&self, id: &str) {
        if let Some(h) = self.live.lock().unwrap_or_else(|p| p.into_inner()).remove(id) {
            let _ = h.end.send(true);
        }
    }

    fn take_warm(&self, profile: Profile) -> Option<BrowserProcess> {
        self.warm.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&profile).and_then(Vec::pop)
    }
}

/// Whether the session asked for `public-web-only/v1`.
fn wants_policy(sub: &SessionSubmission) -> bool {
    sub.network_policy.as_deref() == Some(PUBLIC_WEB_ONLY_V1)
}

/// Name of the grid's ordinary network access in launch manifests.
const ORDINARY: &str = "ordinary";

/// The browser-wide egress policy of a session and its name.
fn policy(config: &SessionConfig, public_web_only: bool) -> (Arc<dyn Policy>, &'static str) {
    if public_web_only {
        (Arc::new(config.egress.clone()), PUBLIC_WEB_ONLY_V1)
    } else {
        (Arc::new(RequestRules::ordinary(config.allow_private_networks)), ORDINARY)
    }
}

/// Starts the session task for a freshly leased session.
pub fn spawn(app: Arc<App>, id: String, token_sha256: String, sub: SessionSubmission) {
    let (endpoint, ended) = app.sessions.register(&id, token_sha256);
    let span = tracing::info_span!("session", id = %id);
    tokio::spawn(
        async move {
            if let Err(e) = run(&app, &id, &sub, endpoint, ended).await {
                tracing::warn!(error = %e, "session ended with an error");
            }
            app.sessions.signal_end(&id);
            refill_warm(app.clone());
        }
        .instrument(span),
    );
}

async fn run(
    app: &Arc<App>,
    id: &str,
    sub: &SessionSubmission,
    endpoint: watch::Sender<Option<Endpoint>>,
    mut ended: watch::Receiver<bool>,
) -> Result<(), String> {
    let build = app.sessions.build().map_err(|e| e.to_string())?.clone();
    let public_web_only = wants_policy(sub);
    let (policy, network) = policy(&app.sessions.config, public_web_only);
    let manifest = LaunchManifest::new(sub.profile, &build, network);
    let warm = if public_web_only { None } else { app.sessions.take_warm(sub.profile) };
    let browser = match warm {
        Some(b) => Ok(b),
        None => launch::start(&app.sessions.config.sandbox, &build, &manifest, policy).await,
    };
    let mut browser = match browser {
        Ok(b) => b,
        Err(e) => {
            end(app, id, Event::Lose, now()).await;
            return Err(format!("browser did not start: {e}"));
        }
    };
    let ready_at = now();
    let facts = tokio::time::timeout(
        ATTEST_TIMEOUT,
        attest(&browser, &build, &manifest, sub.profile, public_web_only, &app.sessions.config.probe_url),
    )
    .await
    .unwrap_or_else(|_| Err(format!("no answer within {ATTEST_TIMEOUT:?}")));
    let (attestation, network) = match facts {
        Ok(f) => f,
        Err(e) => {
            browser.stop();
            end(app, id, Event::Lose, now()).await;
            return Err(format!("attestation failed: {e}"));
        }
    };
    if network.as_ref().is_some_and(|n| n.probes.iter().any(|p| p.outcome != "refused")) {
        browser.stop();
        end(app, id, Event::Lose, now()).await;
        return Err("network policy not enforced: the probe was reached".into());
    }
    let sid = id.to_string();
    let stored = app
        .store
        .write(move |tx| {
            let r = store::transition(tx, &sid, Event::Ready, ready_at)?;
            store::set_attestation(tx, &sid, &attestation, network.as_ref())?;
            Ok::<_, store::SessionError>(r)
        })
        .await;
    let expires_at = match stored {
        Ok((row, _)) => row.session.expires_at,
        // Released or expired while starting.
        Err(store::SessionError::Transition(_)) => {
            browser.stop();
            return Ok(());
        }
        Err(e) => {
            browser.stop();
            end(app, id, Event::Lose, now()).await;
            return Err(format!("the running state could not be stored: {e}"));
        }
    };
    let _ = endpoint.send(Some(Endpoint { cdp: browser.cdp.clone(), version: browser.version.clone() }));
    tracing::info!(pid = browser.pid, uid = browser.uid(), "session running");
    let until_expiry = Duration::from_millis((expires_at.0 - now().0).max(0) as u64);
    tokio::select! {
        status = browser.child.wait() => {
            tracing::warn!(?status, "session browser exited; session lost");
            end(app, id, Event::Lose, now()).await;
        }
        _ = tokio::time::sleep(until_expiry) => {
            end(app, id, Event::Expire, now().max(expires_at)).await;
        }
        // Released through the API: the transition already settled.
        _ = ended.changed() => {}
    }
    browser.stop();
    Ok(())
}

/// Ends a session through its state machine (which settles it).
async fn end(app: &App, id: &str, event: Event, at: Millis) {
    let sid = id.to_string();
    match app.store.write(move |tx| store::transition(tx, &sid, event, at)).await {
        Ok(_) => tracing::info!(?event, "session ended"),
        Err(store::SessionError::Transition(e)) => tracing::debug!(error = %e, "session already ended"),
        Err(e) => tracing::error!(error = %e, "session end could not be stored"),
    }
    app.sessions.signal_end(id);
}

/// Longest reading a fresh browser's attestation may take.
const ATTEST_TIMEOUT: Duration = Duration::from_secs(30);

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
              width: window.outerWidth, height: window.outerHeight, dpr: window.devicePixelRatio})",
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
        },
        launch_manifest_hash: manifest.hash(),
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

/// Keeps `warm` started browsers per profile.
pub fn refill_warm(app: Arc<App>) {
    if app.sessions.config.warm == 0 || app.sessions.config.disabled {
        return;
    }
    tokio::spawn(async move {
        let Ok(build) = app.sessions.build().cloned() else { return };
        for profile in Profile::ALL {
            loop {
                let have =
                    app.sessions.warm.lock().unwrap_or_else(|p| p.into_inner()).get(&profile).map_or(0, Vec::len);
                if have >= app.sessions.config.warm {
                    break;
                }
                let manifest = LaunchManifest::new(profile, &build, ORDINARY);
                let (policy, _) = policy(&app.sessions.config, false);
                match launch::start(&app.sessions.config.sandbox, &build, &manifest, policy).await {
                    Ok(b) => {
                        app.sessions.warm.lock().unwrap_or_else(|p| p.into_inner()).entry(profile).or_default().push(b)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "warm browser did not start");
                        break;
                    }
                }
            }
        }
    });
}

/// On start: sessions left live by the last run lost their browser with it.
/// They are settled up to the last settlement heartbeat (at most one
/// settlement interval after the server stopped), not up to now.
pub async fn recover(app: &App, last_alive: Option<Millis>) {
    let at = last_alive.unwrap_or_else(now).min(now());
    let ids = app.store.read(store::live_ids).await.unwrap_or_default();
    for id in ids {
        end(app, &id, Event::Lose, at).await;
        tracing::warn!(session = %id, "session lost with the previous run");
    }
}

/// On shutdown: every live session is lost now, its browser stopped.
pub async fn shutdown(app: &App) {
    let ids = app.store.read(store::live_ids).await.unwrap_or_default();
    for id in ids {
        end(app, &id, Event::Lose, now()).await;
    }
    for (_, browsers) in app.sessions.warm.lock().unwrap_or_else(|p| p.into_inner()).drain() {
        for b in browsers {
            b.stop();
        }
    }
}

/// The token's hash, as stored.
pub fn token_hash(token: &str) -> String {
    sha256_hex(token.as_bytes())
}
