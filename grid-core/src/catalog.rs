//! The grid's fixed vocabularies: scripts, browser profiles, file kinds and
//! network policies, with their wire names and prices.
//!
//! The scripts are one table, `Script::row`: per script its name, the
//! parameter groups it takes, what it needs to run, the files it publishes
//! and its price. Validation (`validate::params`), the schemas (`shapes`,
//! and through them the OpenAPI document), the CLI's help and the runners
//! read the row, so a new script is one row plus its runner, and the
//! compiler names what else must learn of it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A capture script: what an item does with its URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Script {
    Capture,
    Fetch,
    BrowserFetch,
    RenderFetch,
    /// The page printed as a PDF (Chromium's print to PDF), beside the
    /// contract's four (docs/browser-captures.md).
    Pdf,
}

/// One row of the script table: everything the grid knows of a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptRow {
    /// The wire name (`script` of POST /batches, meta, the metrics' label).
    pub name: &'static str,
    /// The parameter groups its `params` may hold (`validate::params::PARAMS`
    /// names each parameter's group); any other parameter fails the item.
    pub params: &'static [ParamGroup],
    /// What it runs on.
    pub needs: Needs,
    /// The file kinds a completed item publishes, meta last.
    pub publishes: &'static [ArtifactKind],
    /// Contract price per item, in micro-euros (reserved at submission,
    /// charged once when the item's files are published).
    pub price_micros: i64,
}

/// A group of script parameters (docs/browser-captures.md's params table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParamGroup {
    /// `timeoutMs` as the budget of one HTTP request (`fetch`).
    Request,
    /// What loads a page in the browser: `timeoutMs` (navigation until
    /// ready), `waitUntil`, `javascriptEnabled`, `userAgent`, `headers`,
    /// `cookies`, `blockResourceTypes`.
    Page,
    /// `allowedHosts`: the hosts the page may reach.
    AllowedHosts,
    /// The rendered page: `viewport`, `waitFor`.
    Rendering,
    /// The screenshot: `fullPage`, `format`, `quality`, `clip`, `selector`,
    /// `hideSelectors`.
    Screenshot,
    /// The printed page: `format` (the paper), `landscape`,
    /// `printBackground`, `margin`, `scale`, `pageRanges`.
    Pdf,
}

/// What a script runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// One HTTP request from the server itself, no browser
    /// (`grid-server/src/capture/fetch.rs`).
    Http,
    /// A page of the account's pooled browser
    /// (`grid-server/src/capture/scripts.rs`), which reads off it the files
    /// the row publishes: the screenshot, the DOM serialised after the
    /// page's scripts ran (html), the main document's body as received.
    Browser,
}

impl Script {
    pub const ALL: [Script; 5] =
        [Script::Capture, Script::Fetch, Script::BrowserFetch, Script::RenderFetch, Script::Pdf];
    /// The script of a batch that names none.
    pub const DEFAULT: Script = Script::Capture;

    /// The script table, one row per script.
    pub const fn row(self) -> ScriptRow {
        use ArtifactKind::{Body, Html, Meta, Pdf, Screenshot};
        use ParamGroup::{AllowedHosts, Page, Rendering, Request};
        match self {
            Script::Capture => ScriptRow {
                name: "capture",
                params: &[Page, Rendering, ParamGroup::Screenshot],
                needs: Needs::Browser,
                publishes: &[Screenshot, Html, Meta],
                price_micros: 1_000,
            },
            Script::Fetch => ScriptRow {
                name: "fetch",
                params: &[Request],
                needs: Needs::Http,
                publishes: &[Body, Meta],
                price_micros: 120,
            },
            Script::BrowserFetch => ScriptRow {
                name: "browser-fetch",
                params: &[Page, AllowedHosts],
                needs: Needs::Browser,
                publishes: &[Body, Meta],
                price_micros: 800,
            },
            Script::RenderFetch => ScriptRow {
                name: "render-fetch",
                params: &[Page, AllowedHosts, Rendering],
                needs: Needs::Browser,
                publishes: &[Html, Meta],
                price_micros: 800,
            },
            // Not in the contract: priced as `capture`, a page rendered and
            // printed (docs/metering.md).
            Script::Pdf => ScriptRow {
                name: "pdf",
                params: &[Page, Rendering, ParamGroup::Pdf],
                needs: Needs::Browser,
                publishes: &[Pdf, Meta],
                price_micros: 1_000,
            },
        }
    }

    pub fn as_str(self) -> &'static str {
        self.row().name
    }

    pub fn parse(s: &str) -> Option<Script> {
        Script::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// Contract price per item, in micro-euros (the row's `price_micros`).
    pub fn price_micros(self) -> i64 {
        self.row().price_micros
    }

    /// Whether the script runs in a browser (the row's `needs`).
    pub fn needs_browser(self) -> bool {
        match self.row().needs {
            Needs::Http => false,
            Needs::Browser => true,
        }
    }

    /// Whether the script's `params` may hold the parameters of `group`.
    pub fn takes(self, group: ParamGroup) -> bool {
        self.row().params.contains(&group)
    }
}

impl fmt::Display for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown script name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownScript;

impl FromStr for Script {
    type Err = UnknownScript;

    fn from_str(s: &str) -> Result<Script, UnknownScript> {
        Script::parse(s).ok_or(UnknownScript)
    }
}

impl Serialize for Script {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Script {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Script::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("unknown script {s}")))
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
    /// The `pdf` script's document.
    Pdf,
}

impl ArtifactKind {
    pub const ALL: [ArtifactKind; 5] =
        [ArtifactKind::Screenshot, ArtifactKind::Html, ArtifactKind::Body, ArtifactKind::Meta, ArtifactKind::Pdf];

    pub fn as_str(self) -> &'static str {
        match self {
            ArtifactKind::Screenshot => "screenshot",
            ArtifactKind::Html => "html",
            ArtifactKind::Body => "body",
            ArtifactKind::Meta => "meta",
            ArtifactKind::Pdf => "pdf",
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
            ArtifactKind::Pdf => "application/pdf",
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
            assert_eq!(s.to_string().parse::<Script>(), Ok(s));
            assert_eq!(serde_json::to_value(s).unwrap(), serde_json::json!(s.as_str()));
            assert_eq!(serde_json::from_value::<Script>(serde_json::json!(s.as_str())).unwrap(), s);
        }
        for p in Profile::ALL {
            assert_eq!(Profile::parse(p.as_str()), Some(p));
        }
        for k in ArtifactKind::ALL {
            assert_eq!(ArtifactKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(Script::parse("Capture"), None);
        assert_eq!("capture ".parse::<Script>(), Err(UnknownScript));
        assert!(serde_json::from_value::<Script>(serde_json::json!("render_fetch")).is_err());
        assert_eq!(Profile::parse("desktop-browser-nl/v1"), None);
    }

    #[test]
    fn contract_prices() {
        assert_eq!(Script::Fetch.price_micros(), 120);
        assert_eq!(Script::BrowserFetch.price_micros(), 800);
        assert_eq!(Script::RenderFetch.price_micros(), 800);
        assert_eq!(Script::Capture.price_micros(), 1_000);
        // Not in the contract: a printed page costs what a screenshot does.
        assert_eq!(Script::Pdf.price_micros(), 1_000);
    }

    /// Every row of the script table agrees with itself: names unique, the
    /// files it publishes are what its runner reads, its parameter groups
    /// fit what it runs on.
    #[test]
    fn script_rows_are_consistent() {
        let names: std::collections::BTreeSet<&str> = Script::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(names.len(), Script::ALL.len(), "script names are unique");
        for s in Script::ALL {
            let row = s.row();
            let publishes = |k| row.publishes.contains(&k);
            assert!(!row.name.is_empty() && row.price_micros > 0, "{s}");
            assert_eq!(row.publishes.last(), Some(&ArtifactKind::Meta), "{s}: meta, last");
            let mut kinds = row.publishes.to_vec();
            kinds.sort();
            kinds.dedup();
            assert_eq!(kinds.len(), row.publishes.len(), "{s}: no kind twice");
            let mut groups = row.params.to_vec();
            groups.dedup();
            assert_eq!(groups.len(), row.params.len(), "{s}: no group twice");
            match row.needs {
                Needs::Http => {
                    assert!(!publishes(ArtifactKind::Screenshot) && !publishes(ArtifactKind::Html), "{s}: no page");
                    assert_eq!(row.params, [ParamGroup::Request], "{s}");
                }
                Needs::Browser => {
                    let (screenshot, html, pdf) = (
                        publishes(ArtifactKind::Screenshot),
                        publishes(ArtifactKind::Html),
                        publishes(ArtifactKind::Pdf),
                    );
                    assert!(s.takes(ParamGroup::Page) && !s.takes(ParamGroup::Request), "{s}");
                    assert_eq!(s.takes(ParamGroup::Screenshot), screenshot, "{s}");
                    assert_eq!(s.takes(ParamGroup::Pdf), pdf, "{s}");
                    assert_eq!(s.takes(ParamGroup::Rendering), screenshot || html || pdf, "{s}");
                }
            }
        }
        assert!(Script::ALL.contains(&Script::DEFAULT));
    }
}
