//! Warm browsers: `--warm-browsers` per profile started ahead of a lease,
//! without network policy, set up and attested, so a plain lease does not
//! wait for a launch.

use std::sync::Arc;

use grid_core::catalog::Profile;
use grid_core::wire::session::{Attestation, SessionOverrides, SessionSubmission};

use super::attest::prepare;
use super::launch::{self, policy, upstream_for, LaunchManifest, ORDINARY};
use super::Sessions;
use crate::browser::process::BrowserProcess;

/// A browser started ahead of a lease, set up (its downloads go to its
/// folder, under the keeper) and attested: a lease it serves only adopts
/// its folder and stores it running.
pub(super) struct Warm {
    pub(super) browser: BrowserProcess,
    pub(super) folder_name: String,
    pub(super) attestation: Attestation,
}

/// Keeps `warm` started browsers per profile.
pub fn refill_warm(sessions: Arc<Sessions>) {
    if sessions.config.warm == 0 || sessions.config.disabled {
        return;
    }
    tokio::spawn(async move {
        let Ok(build) = sessions.build().cloned() else { return };
        for profile in Profile::LEASABLE {
            loop {
                let have = sessions.warm.lock().unwrap_or_else(|p| p.into_inner()).get(&profile).map_or(0, Vec::len);
                if have >= sessions.config.warm {
                    break;
                }
                let sub = SessionSubmission::default_for(profile);
                let upstream = upstream_for(&sessions.config, &sub);
                let mut manifest = LaunchManifest::new(profile, &build, ORDINARY, &SessionOverrides::default());
                manifest.upstream_proxy = upstream.as_ref().map(|u| u.proxy.server());
                let (policy, _) = policy(&sessions.config, false, upstream);
                let downloads = &sessions.downloads;
                let (folder_name, folder) = match downloads.create_warm() {
                    Ok(f) => f,
                    Err(e) => {
                        tracing::warn!(error = %e, "no download folder for a warm browser");
                        break;
                    }
                };
                let browser =
                    match launch::start(&sessions.config.sandbox, &build, &manifest, policy, folder.files()).await {
                        Ok(b) => b,
                        Err(e) => {
                            downloads.discard_warm(&folder_name);
                            tracing::warn!(error = %e, "warm browser did not start");
                            break;
                        }
                    };
                match prepare(&sessions, &browser, folder, &build, &manifest, &sub, false).await {
                    Ok((attestation, _)) => {
                        tracing::info!(profile = profile.as_str(), pid = browser.pid, "warm browser ready");
                        sessions.warm.lock().unwrap_or_else(|p| p.into_inner()).entry(profile).or_default().push(Warm {
                            browser,
                            folder_name,
                            attestation,
                        })
                    }
                    Err(e) => {
                        browser.stop();
                        downloads.discard_warm(&folder_name);
                        tracing::warn!(error = %e, "warm browser not set up");
                        break;
                    }
                }
            }
        }
    });
}

impl Sessions {
    pub(super) fn take_warm(&self, profile: Profile) -> Option<Warm> {
        self.warm.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&profile).and_then(Vec::pop)
    }
}

/// On shutdown: the warm browsers stopped, their folders discarded.
pub(super) fn stop_all(sessions: &Sessions) {
    let warm: Vec<Warm> =
        sessions.warm.lock().unwrap_or_else(|p| p.into_inner()).drain().flat_map(|(_, w)| w).collect();
    for w in warm {
        w.browser.stop();
        sessions.downloads.discard_warm(&w.folder_name);
    }
}
