//! The browser profiles as versioned launch manifests.
//!
//! A profile names its [`Engine`]: the full Chromium serves the `/v2`
//! profiles, Chromium's headless shell `native-headless-browser/v3`. Every
//! pooled browser is launched with the flags and environment of
//! [`LAUNCH_FLAGS`] and [`LAUNCH_ENV`] (Chromium's own identity: en-US,
//! UTC); each item's page then gets its profile's overrides through CDP
//! `Emulation`/`Network` calls before it navigates. The manifest
//! of a profile is both halves; its SHA-256 (over the canonical JSON of
//! [`manifest_json`]) is recorded in every meta file, so a change to either
//! half is visible. Changing a manifest's values means a new profile
//! version (`/v3`), never an edit of `/v2`.

use grid_core::catalog::Profile;
use grid_core::validate::params::Viewport;
use serde_json::{json, Value};

use crate::ids::sha256_hex;

/// Flags every Chromium the grid starts gets, pooled or leased: headless,
/// no background traffic of its own (this machine's network is closed, and
/// a grid browser should only make the requests its page or lessee makes).
/// Chromium's own sandbox stays on: every browser runs as an unprivileged
/// uid inside the grid's sandbox (`sandbox.rs`), never with `--no-sandbox`.
pub const CHROMIUM_BASELINE: [&str; 8] = [
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
];

/// Flags every pooled Chromium gets on top of headless_chrome's defaults
/// (Puppeteer's list of `--disable-*` background features); the sandbox
/// adds the DevTools pipe, the user-data dir and the egress proxy.
pub const LAUNCH_FLAGS: &[&str] = &[
    CHROMIUM_BASELINE[0],
    CHROMIUM_BASELINE[1],
    CHROMIUM_BASELINE[2],
    CHROMIUM_BASELINE[3],
    CHROMIUM_BASELINE[4],
    CHROMIUM_BASELINE[5],
    CHROMIUM_BASELINE[6],
    CHROMIUM_BASELINE[7],
    "--lang=en-US",
    "--window-size=800,600",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
];

/// Environment of the Chromium process.
pub const LAUNCH_ENV: &[(&str, &str)] = &[("TZ", "UTC"), ("LANG", "en_US.UTF-8")];

/// Which Chromium build runs a profile's pages. Both are the same Chromium
/// release from the same Debian source; a pooled browser runs one engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Engine {
    /// The full browser (Debian `chromium`) in its headless mode: the
    /// browser's own layers (tabs, windows, extensions, the PDF viewer)
    /// without a display.
    Chromium,
    /// Chromium's headless shell (Debian `chromium-headless-shell`): the
    /// same Blink and V8 under a thin embedder without the browser's
    /// layers, so a fresh context and its renderer cost about a quarter of
    /// the CPU (docs/performance.md). A page sees no plugins, no PDF viewer,
    /// no `window.chrome`, and the `HeadlessChrome` brand.
    HeadlessShell,
}

impl Engine {
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Chromium => "chromium",
            Engine::HeadlessShell => "chromium-headless-shell",
        }
    }
}

/// The user agent a page sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserAgent {
    /// Chromium's own, e.g. `... HeadlessChrome/156.0.0.0 Safari/537.36`.
    Native,
    /// Chromium's own with `HeadlessChrome` written `Chrome`, the way the
    /// same build running with a window introduces itself.
    Desktop,
}

/// What a page of a profile looks like from inside.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Manifest {
    pub profile: Profile,
    pub engine: Engine,
    pub user_agent: UserAgent,
    /// `Accept-Language` and `navigator.languages`; `None`: Chromium's own
    /// (from `--lang`).
    pub accept_language: Option<&'static str>,
    /// `navigator.language` and the ICU default locale (Intl).
    pub locale: &'static str,
    /// IANA time zone of `Date` and `Intl`.
    pub timezone: &'static str,
    /// CSS viewport (`innerWidth` x `innerHeight`) and screenshot size at
    /// scale 1.
    pub viewport: (u32, u32),
    pub device_scale_factor: f64,
    /// Whether locale and time zone are CDP overrides (true) or the launch
    /// defaults (false).
    pub emulates_locale: bool,
}

pub const DESKTOP_BROWSER_NL_V2: Manifest = Manifest {
    profile: Profile::DesktopBrowserNl,
    engine: Engine::Chromium,
    user_agent: UserAgent::Desktop,
    accept_language: Some("nl-NL,nl"),
    locale: "nl-NL",
    timezone: "Europe/Amsterdam",
    viewport: (1366, 768),
    device_scale_factor: 1.0,
    emulates_locale: true,
};

/// Chromium's own headless identity. Its viewport is pinned to 800x600, the
/// nominal default window of headless Chromium: the window it actually
/// opens loses a version-dependent strip to emulated browser UI (780x437
/// inside an 800x600 window in 156), which would make screenshots change
/// size between Chromium releases.
pub const NATIVE_HEADLESS_BROWSER_V2: Manifest = Manifest {
    profile: Profile::NativeHeadlessBrowser,
    engine: Engine::Chromium,
    user_agent: UserAgent::Native,
    accept_language: None,
    locale: "en-US",
    timezone: "UTC",
    viewport: (800, 600),
    device_scale_factor: 1.0,
    emulates_locale: false,
};

/// `/v2`'s identity (Chromium's own: en-US, UTC, 800x600) from the headless
/// shell, whose own is what a page sees: its user agent names the full
/// version (`HeadlessChrome/156.0.8078.79`), its client hints the
/// `HeadlessChrome` brand, `navigator.languages` is `["en-US"]`
/// (`Accept-Language: en-US`).
pub const NATIVE_HEADLESS_BROWSER_V3: Manifest =
    Manifest { profile: Profile::NativeHeadlessShell, engine: Engine::HeadlessShell, ..NATIVE_HEADLESS_BROWSER_V2 };

pub fn manifest(profile: Profile) -> &'static Manifest {
    match profile {
        Profile::DesktopBrowserNl => &DESKTOP_BROWSER_NL_V2,
        Profile::NativeHeadlessBrowser => &NATIVE_HEADLESS_BROWSER_V2,
        Profile::NativeHeadlessShell => &NATIVE_HEADLESS_BROWSER_V3,
    }
}

impl Manifest {
    /// The profile's viewport, as the `viewport` parameter would write it.
    pub fn page_viewport(&self) -> Viewport {
        Viewport {
            width: self.viewport.0,
            height: self.viewport.1,
            device_scale_factor: self.device_scale_factor,
            mobile: false,
        }
    }

    /// The user agent string for a browser whose own is `native`.
    pub fn user_agent_for(&self, native: &str) -> String {
        match self.user_agent {
            UserAgent::Native => native.to_string(),
            UserAgent::Desktop => native.replace("HeadlessChrome/", "Chrome/"),
        }
    }
}

/// The manifest as documented JSON: launch half and page half.
pub fn manifest_json(m: &Manifest) -> Value {
    json!({
        "profileId": m.profile.as_str(),
        "launch": {
            "executable": format!("{} (Debian package)", m.engine.as_str()),
            "headlessMode": match m.engine { Engine::Chromium => "new", Engine::HeadlessShell => "shell" },
            "flags": LAUNCH_FLAGS,
            "env": LAUNCH_ENV.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        },
        "page": {
            "userAgent": match m.user_agent { UserAgent::Native => "chromium-native", UserAgent::Desktop => "chromium-native with HeadlessChrome/ written Chrome/" },
            "acceptLanguage": m.accept_language,
            "locale": m.locale,
            "timezone": m.timezone,
            "localeSource": if m.emulates_locale { "Emulation.setLocaleOverride, Emulation.setTimezoneOverride" } else { "launch (--lang, TZ)" },
            "viewport": {"width": m.viewport.0, "height": m.viewport.1, "deviceScaleFactor": m.device_scale_factor, "mobile": false},
        },
    })
}

/// SHA-256 of the manifest's canonical JSON (serde_json sorts object keys).
pub fn manifest_sha256(m: &Manifest) -> String {
    sha256_hex(manifest_json(m).to_string().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_profile_has_a_manifest_of_its_own() {
        for p in Profile::ALL {
            assert_eq!(manifest(p).profile, p);
        }
        let hashes: std::collections::HashSet<String> = Profile::ALL.map(|p| manifest_sha256(manifest(p))).into();
        assert_eq!(hashes.len(), Profile::ALL.len(), "every profile's manifest is its own");
        assert_eq!(manifest_sha256(&DESKTOP_BROWSER_NL_V2).len(), 64);
    }

    #[test]
    fn desktop_user_agent_drops_the_headless_marker() {
        let native = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/156.0.0.0 Safari/537.36";
        assert_eq!(
            DESKTOP_BROWSER_NL_V2.user_agent_for(native),
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0.0.0 Safari/537.36"
        );
        assert_eq!(NATIVE_HEADLESS_BROWSER_V2.user_agent_for(native), native);
    }
}
