//! Starting and stopping one session's Chromium. A session owns its whole
//! browser, and the lessee opens pages itself, so the profile is applied at
//! launch (flags and environment), not per page.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::browser::process::{self, BrowserProcess};
use crate::browser::profiles::{self, UserAgent};
use crate::browser::sandbox::SandboxConfig;
use crate::egress::Policy;
use crate::ids::sha256_hex;
use grid_core::catalog::Profile;
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
}

impl LaunchManifest {
    pub fn new(profile: Profile, build: &BrowserBuild, network: &'static str) -> LaunchManifest {
        let m = profiles::manifest(profile);
        let mut flags: Vec<String> =
            profiles::CHROMIUM_BASELINE.iter().chain(SESSION_FLAGS).map(|f| f.to_string()).collect();
        flags.push(format!("--lang={}", m.locale));
        if let Some(al) = m.accept_language {
            flags.push(format!("--accept-lang={al}"));
        }
        flags.push(format!("--window-size={},{}", m.viewport.0, m.viewport.1));
        flags.push(format!("--force-device-scale-factor={}", m.device_scale_factor));
        if m.user_agent == UserAgent::Desktop {
            flags.push(format!(
                "--user-agent=Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{}.0.0.0 Safari/537.36",
                build.major
            ));
        }
        let env = vec![
            ("TZ".into(), m.timezone.to_string()),
            ("LANG".into(), format!("{}.UTF-8", m.locale.replace('-', "_"))),
        ];
        LaunchManifest { profile, flags, env, network }
    }

    /// Canonical JSON (keys sorted) of what the launch depends on.
    pub fn canonical(&self) -> Value {
        json!({"profileId": self.profile.as_str(), "flags": self.flags, "env": self.env, "network": self.network, "sandbox": "grid-sandbox/v1"})
    }

    pub fn hash(&self) -> String {
        format!("sha256:{}", sha256_hex(self.canonical().to_string().as_bytes()))
    }
}

/// Starts a session's Chromium in its sandbox, behind an egress proxy under
/// `policy`, and waits for its first DevTools answer.
pub async fn start(
    sandbox: &SandboxConfig,
    build: &BrowserBuild,
    manifest: &LaunchManifest,
    policy: Arc<dyn Policy>,
) -> std::io::Result<BrowserProcess> {
    process::start(sandbox, &build.executable, &manifest.flags, &manifest.env, policy).await
}
