//! Starting and stopping one session's Chromium. A session owns its whole
//! browser, and the lessee opens pages itself, so the profile, and the
//! lease's overrides of it, are applied at launch (flags and environment),
//! not per page: they hold for every page, context, popup and worker. Only
//! an overridden viewport is also applied per page (`keeper.rs`): a window
//! size is not a page size, and mobile emulation has no flag.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::browser::hosts::RequestRules;
use crate::browser::process::{self, BrowserProcess};
use crate::browser::profiles::{self, UserAgent};
use crate::browser::sandbox::SandboxConfig;
use crate::egress::{self, Policy};
use crate::ids::sha256_hex;
use crate::store::sessions::SessionRow;
use crate::upstream::Upstream;
use crate::vault::{Purpose, Vault};
use grid_core::catalog::{Profile, PUBLIC_WEB_ONLY_V1};
use grid_core::wire::proxy::ProxyCredentials;
use grid_core::wire::session::{SessionOverrides, SessionSubmission};

use super::SessionConfig;
use serde_json::{json, Value};

/// Flags of every session browser on top of the grid's Chromium baseline
/// (the sandbox adds the DevTools pipe and the egress proxy).
pub const SESSION_FLAGS: &[&str] = &["--force-webrtc-ip-handling-policy=disable_non_proxied_udp"];

/// Facts about the installed browser, read once.
#[derive(Debug, Clone)]
pub struct BrowserBuild {
    pub executable: PathBuf,
    /// `sha256:<hex>` of the executable's bytes (symlinks resolved).
    pub digest: String,
    /// Major version, for the desktop user agent.
    pub major: String,
}

impl BrowserBuild {
    pub fn inspect(executable: &Path) -> std::io::Result<BrowserBuild> {
        let out = std::process::Command::new(executable).arg("--version").output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let major = text
            .split_whitespace()
            .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()))
            .and_then(|v| v.split('.').next())
            .unwrap_or("0")
            .to_string();
        let real = std::fs::canonicalize(executable)?;
        // The Debian `chromium` command is a wrapper script: hash the binary it runs when there is one.
        let binary = real.parent().map(|d| d.join("chromium")).filter(|p| p.is_file() && *p != real);
        let bytes = std::fs::read(binary.as_ref().unwrap_or(&real))?;
        Ok(BrowserBuild {
            executable: executable.to_path_buf(),
            digest: format!("sha256:{}", sha256_hex(&bytes)),
            major,
        })
    }
}

/// The launch manifest of a session: what makes its browser this profile.
#[derive(Debug, Clone)]
pub struct LaunchManifest {
    pub profile: Profile,
    pub flags: Vec<String>,
    pub env: Vec<(String, String)>,
    /// The browser-wide egress policy: `public-web-only/v1` or `ordinary`.
    pub network: &'static str,
    /// What the lease asked for instead of the profile's (in the flags and
    /// environment above, and for the viewport also applied per page).
    pub overrides: SessionOverrides,
    /// `scheme://host:port` of the upstream proxy behind the egress proxy
    /// (docs/proxies.md), never its credentials; set after `new`.
    pub upstream_proxy: Option<String>,
}

impl LaunchManifest {
    pub fn new(
        profile: Profile,
        build: &BrowserBuild,
        network: &'static str,
        overrides: &SessionOverrides,
    ) -> LaunchManifest {
        let m = profiles::manifest(profile);
        let mut flags: Vec<String> =
            profiles::CHROMIUM_BASELINE.iter().chain(SESSION_FLAGS).map(|f| f.to_string()).collect();
        let locale = overrides.locale.as_deref().unwrap_or(m.locale);
        flags.push(format!("--lang={locale}"));
        match (&overrides.locale, m.accept_language) {
            // The tag, then its language alone (fr-CA: fr-CA,fr), as browsers send it.
            (Some(l), _) => match l.split_once('-') {
                Some((language, _)) => flags.push(format!("--accept-lang={l},{language}")),
                None => flags.push(format!("--accept-lang={l}")),
            },
            (None, Some(al)) => flags.push(format!("--accept-lang={al}")),
            (None, None) => {}
        }
        let (width, height, scale) = match overrides.viewport {
            Some(v) => (v.width, v.height, v.device_scale_factor),
            None => (m.viewport.0, m.viewport.1, m.device_scale_factor),
        };
        flags.push(format!("--window-size={width},{height}"));
        flags.push(format!("--force-device-scale-factor={scale}"));
        match (&overrides.user_agent, m.user_agent) {
            (Some(ua), _) => flags.push(format!("--user-agent={ua}")),
            (None, UserAgent::Desktop) => flags.push(format!(
                "--user-agent=Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{}.0.0.0 Safari/537.36",
                build.major
            )),
            (None, UserAgent::Native) => {}
        }
        let env = vec![
            ("TZ".into(), overrides.timezone.as_deref().unwrap_or(m.timezone).to_string()),
            ("LANG".into(), format!("{}.UTF-8", locale.replace('-', "_"))),
        ];
        LaunchManifest { profile, flags, env, network, overrides: overrides.clone(), upstream_proxy: None }
    }

    /// Canonical JSON (keys sorted) of what the launch depends on. The
    /// per-page viewport is part of it: two launches with the same flags
    /// but another page viewport are other manifests.
    pub fn canonical(&self) -> Value {
        let mut v = json!({"profileId": self.profile.as_str(), "flags": self.flags, "env": self.env, "network": self.network, "sandbox": "grid-sandbox/v1"});
        if let Some(viewport) = self.overrides.viewport {
            v["pageViewport"] = json!(viewport);
        }
        if let Some(proxy) = &self.upstream_proxy {
            v["upstreamProxy"] = json!(proxy);
        }
        v
    }

    pub fn hash(&self) -> String {
        format!("sha256:{}", sha256_hex(self.canonical().to_string().as_bytes()))
    }
}

/// Starts a session's Chromium in its sandbox, behind an egress proxy under
/// `policy`, saving downloads in `downloads` (its folder's `files`), and
/// waits for its first DevTools answer.
pub async fn start(
    sandbox: &SandboxConfig,
    build: &BrowserBuild,
    manifest: &LaunchManifest,
    policy: Arc<dyn Policy>,
    downloads: &std::os::fd::OwnedFd,
) -> std::io::Result<BrowserProcess> {
    process::start(sandbox, &build.executable, &manifest.flags, &manifest.env, policy, Some(downloads)).await
}

/// Whether the session asked for `public-web-only/v1`.
pub(super) fn wants_policy(sub: &SessionSubmission) -> bool {
    sub.network_policy.as_deref() == Some(PUBLIC_WEB_ONLY_V1)
}

/// Name of the grid's ordinary network access in launch manifests.
pub(super) const ORDINARY: &str = "ordinary";

/// The browser-wide egress policy of a session and its name, its allowed
/// traffic sent through `upstream` when there is one.
pub(super) fn policy(
    config: &SessionConfig,
    public_web_only: bool,
    upstream: Option<Upstream>,
) -> (Arc<dyn Policy>, &'static str) {
    let (policy, name): (Arc<dyn Policy>, _) = if public_web_only {
        (Arc::new(config.egress.clone()), PUBLIC_WEB_ONLY_V1)
    } else {
        (Arc::new(RequestRules::ordinary(config.allow_private_networks)), ORDINARY)
    };
    (egress::routed(policy, upstream), name)
}

/// The upstream proxy of a session: the lease's, else the grid's default
/// (docs/proxies.md, precedence).
pub(super) fn upstream_for(config: &SessionConfig, sub: &SessionSubmission) -> Option<Upstream> {
    let proxy = sub.proxy.clone().or_else(|| config.upstream_proxy.clone())?;
    Some(Upstream { proxy, allow_private: config.allow_private_networks })
}

/// The submission with its proxy's credentials opened from the row's sealed
/// column (they are never in the stored submission).
pub(super) fn with_credentials(
    vault: &Vault,
    row: &SessionRow,
    mut sub: SessionSubmission,
) -> Result<SessionSubmission, String> {
    if let (Some(proxy), Some(sealed)) = (sub.proxy.as_mut(), row.proxy_sealed.as_ref()) {
        let plain = vault
            .open(&row.account_id, Purpose::ProxyCredentials, &row.id, sealed)
            .map_err(|e| format!("the proxy's credentials could not be opened: {e}"))?;
        proxy.credentials = Some(
            ProxyCredentials::from_sealable(&plain)
                .ok_or("the proxy's sealed credentials are not a user and password")?,
        );
    }
    Ok(sub)
}

#[cfg(test)]
mod tests {
    use super::*;
    use grid_core::wire::session::Viewport;

    fn build() -> BrowserBuild {
        BrowserBuild { executable: PathBuf::from("/usr/bin/chromium"), digest: "sha256:x".into(), major: "156".into() }
    }

    #[test]
    fn overrides_replace_the_profiles_flags_and_environment() {
        let plain = LaunchManifest::new(Profile::DesktopBrowserNl, &build(), "ordinary", &SessionOverrides::default());
        assert!(plain.flags.contains(&"--lang=nl-NL".to_string()), "{:?}", plain.flags);
        assert!(plain.flags.contains(&"--window-size=1366,768".to_string()));
        assert!(plain.env.contains(&("TZ".into(), "Europe/Amsterdam".into())));
        let overrides = SessionOverrides {
            viewport: Some(Viewport { width: 1280, height: 720, device_scale_factor: 2.0, mobile: false }),
            user_agent: Some("Agent/1 (x)".into()),
            locale: Some("fr-CA".into()),
            timezone: Some("America/Toronto".into()),
        };
        let m = LaunchManifest::new(Profile::DesktopBrowserNl, &build(), "ordinary", &overrides);
        for flag in [
            "--lang=fr-CA",
            "--accept-lang=fr-CA,fr",
            "--window-size=1280,720",
            "--force-device-scale-factor=2",
            "--user-agent=Agent/1 (x)",
        ] {
            assert!(m.flags.contains(&flag.to_string()), "{flag} in {:?}", m.flags);
        }
        assert_eq!(m.flags.iter().filter(|f| f.starts_with("--user-agent=")).count(), 1);
        assert_eq!(m.env, vec![("TZ".into(), "America/Toronto".into()), ("LANG".into(), "fr_CA.UTF-8".into())]);
        assert_ne!(m.hash(), plain.hash());
        // The page viewport alone changes the manifest too.
        let mobile = SessionOverrides {
            viewport: Some(Viewport { mobile: true, ..overrides.viewport.unwrap() }),
            ..overrides.clone()
        };
        assert_ne!(LaunchManifest::new(Profile::DesktopBrowserNl, &build(), "ordinary", &mobile).hash(), m.hash());
    }
}
