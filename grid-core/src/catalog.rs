//! The grid's fixed vocabularies: scripts, browser profiles, file kinds and
//! network policies, with their wire names and prices.

use serde::{Deserialize, Serialize};

/// A capture script: what an item does with its URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Script {
    Capture,
    Fetch,
    BrowserFetch,
    RenderFetch,
}

impl Script {
    pub const ALL: [Script; 4] = [Script::Capture, Script::Fetch, Script::BrowserFetch, Script::RenderFetch];
    /// The script of a batch that names none.
    pub const DEFAULT: Script = Script::Capture;

    pub fn as_str(self) -> &'static str {
        match self {
            Script::Capture => "capture",
            Script::Fetch => "fetch",
            Script::BrowserFetch => "browser-fetch",
            Script::RenderFetch => "render-fetch",
        }
    }

    pub fn parse(s: &str) -> Option<Script> {
        Script::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// Contract price per item, in micro-euros (reserved at submission,
    /// charged once when the item's files are published).
    pub fn price_micros(self) -> i64 {
        match self {
            Script::Fetch => 120,
            Script::BrowserFetch => 800,
            Script::RenderFetch => 800,
            Script::Capture => 1_000,
        }
    }

    /// The file kinds a completed item of this script publishes.
    pub fn success_kinds(self) -> &'static [ArtifactKind] {
        match self {
            Script::Capture => &[ArtifactKind::Screenshot, ArtifactKind::Html, ArtifactKind::Meta],
            Script::RenderFetch => &[ArtifactKind::Html, ArtifactKind::Meta],
            Script::Fetch | Script::BrowserFetch => &[ArtifactKind::Body, ArtifactKind::Meta],
        }
    }

    /// Whether the script takes the `allowedHosts` parameter.
    pub fn takes_allowed_hosts(self) -> bool {
        matches!(self, Script::BrowserFetch | Script::RenderFetch)
    }

    pub fn needs_browser(self) -> bool {
        !matches!(self, Script::Fetch)
    }
}

/// A browser profile id, versioned as part of its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Profile {
    DesktopBrowserNl,
    NativeHeadlessBrowser,
    /// `native-headless-browser/v3`: Chromium's own headless identity, as
    /// `/v2`, from Chromium's headless shell instead of the full browser in
    /// headless mode (docs/browser-captures.md). Captures only.
    NativeHeadlessShell,
}

impl Profile {
    /// Every profile a capture item may name.
    pub const ALL: [Profile; 3] =
        [Profile::DesktopBrowserNl, Profile::NativeHeadlessBrowser, Profile::NativeHeadlessShell];
    /// The profiles a session may lease: the contract's two. The headless
    /// shell is a capture engine; a lessee gets the full browser.
    pub const LEASABLE: [Profile; 2] = [Profile::DesktopBrowserNl, Profile::NativeHeadlessBrowser];
    pub const DEFAULT: Profile = Profile::DesktopBrowserNl;

    pub fn as_str(self) -> &'static str {
        match self {
            Profile::DesktopBrowserNl => "desktop-browser-nl/v2",
            Profile::NativeHeadlessBrowser => "native-headless-browser/v2",
            Profile::NativeHeadlessShell => "native-headless-browser/v3",
        }
    }

    pub fn parse(s: &str) -> Option<Profile> {
        Profile::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

impl Serialize for Profile {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Profile {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Profile::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("unknown profile {s}")))
    }
}

/// A file kind of a capture item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArtifactKind {
    Screenshot,
    Html,
    Body,
    Meta,
}

impl ArtifactKind {
    pub const ALL: [ArtifactKind; 4] =
        [ArtifactKind::Screenshot, ArtifactKind::Html, ArtifactKind::Body, ArtifactKind::Meta];

    pub fn as_str(self) -> &'static str {
        match self {
            ArtifactKind::Screenshot => "screenshot",
            ArtifactKind::Html => "html",
            ArtifactKind::Body => "body",
            ArtifactKind::Meta => "meta",
        }
    }

    pub fn parse(s: &str) -> Option<ArtifactKind> {
        ArtifactKind::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// Content type a download of this kind is served with, when the body's
    /// own type is not known.
    pub fn default_content_type(self) -> &'static str {
        match self {
            ArtifactKind::Screenshot => "image/png",
            ArtifactKind::Html => "text/html; charset=utf-8",
            ArtifactKind::Body => "application/octet-stream",
            ArtifactKind::Meta => "application/json",
        }
    }
}

/// The one network policy a session may request.
pub const PUBLIC_WEB_ONLY_V1: &str = "public-web-only/v1";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in Script::ALL {
            assert_eq!(Script::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), serde_json::json!(s.as_str()));
        }
        for p in Profile::ALL {
            assert_eq!(Profile::parse(p.as_str()), Some(p));
        }
        for k in ArtifactKind::ALL {
            assert_eq!(ArtifactKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(Script::parse("Capture"), None);
        assert_eq!(Profile::parse("desktop-browser-nl/v1"), None);
    }

    #[test]
    fn contract_prices() {
        assert_eq!(Script::Fetch.price_micros(), 120);
        assert_eq!(Script::BrowserFetch.price_micros(), 800);
        assert_eq!(Script::RenderFetch.price_micros(), 800);
        assert_eq!(Script::Capture.price_micros(), 1_000);
    }

    #[test]
    fn every_success_family_has_meta() {
        for s in Script::ALL {
            assert!(s.success_kinds().contains(&ArtifactKind::Meta));
        }
    }
}
