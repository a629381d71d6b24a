//! Script parameters, checked when each item runs (not at submission): a bad
//! parameter fails its item with a published failure record.

use serde_json::{Map, Value};

use super::{json_type, whole_number};
use crate::catalog::{Needs, ParamGroup, Script};

pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
pub const MIN_TIMEOUT_MS: u64 = 100;
pub const MAX_TIMEOUT_MS: u64 = 120_000;

/// Parameters of the `fetch` script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchParams {
    /// Whole-request budget: connect, redirects, headers and body.
    pub timeout_ms: u64,
}

pub fn fetch(params: &Map<String, Value>) -> Result<FetchParams, String> {
    let mut problems = vec![];
    let mut timeout_ms = DEFAULT_TIMEOUT_MS;
    for (k, v) in params {
        match k.as_str() {
            // 5000.0 is the integer 5000, as JSON Schema (and the schema of
            // params, `shapes::script_params`) counts it.
            "timeoutMs" => match whole_number(v).filter(|n| *n >= 0).map(|n| n as u64) {
                Some(n) if (MIN_TIMEOUT_MS..=MAX_TIMEOUT_MS).contains(&n) => timeout_ms = n,
                _ => problems.push(format!(
                    "params.timeoutMs: must be a whole number from {MIN_TIMEOUT_MS} to {MAX_TIMEOUT_MS}, got {}",
                    if v.is_number() { v.to_string() } else { json_type(v).to_string() }
                )),
            },
            other => problems.push(
                misplaced(other, Script::Fetch)
                    .unwrap_or_else(|| format!("params.{other}: unknown parameter of fetch")),
            ),
        }
    }
    if problems.is_empty() {
        Ok(FetchParams { timeout_ms })
    } else {
        Err(problems.join("; "))
    }
}

/// Budget bounds of the browser scripts' `timeoutMs` (navigation until the
/// page is ready: wait condition, then `waitFor`). A browser needs longer
/// than a bare GET.
pub const MIN_BROWSER_TIMEOUT_MS: u64 = 1_000;
pub const MAX_BROWSER_TIMEOUT_MS: u64 = 120_000;
/// Most entries `allowedHosts` may list.
pub const MAX_ALLOWED_HOSTS: usize = 100;

/// `quality` bounds and the quality a jpeg or webp screenshot gets without one.
pub const MIN_QUALITY: u64 = 0;
pub const MAX_QUALITY: u64 = 100;
pub const DEFAULT_QUALITY: u8 = 80;
/// `viewport.width` and `viewport.height` bounds, CSS pixels.
pub const MIN_VIEWPORT_SIZE: u64 = 100;
pub const MAX_VIEWPORT_SIZE: u64 = 4_096;
/// `viewport.deviceScaleFactor` bounds.
pub const MIN_DEVICE_SCALE_FACTOR: f64 = 0.5;
pub const MAX_DEVICE_SCALE_FACTOR: f64 = 4.0;
/// Longest side of any screenshot region (a full page, a clip, an
/// element), CSS pixels; also the bound of `clip.x` and `clip.y`.
pub const MAX_CAPTURE_EXTENT: f64 = 16_384.0;
/// Most image pixels a screenshot may have (width x height x
/// deviceScaleFactor²): a full page of the default profile (1366 x 16384)
/// fits, a 4096 x 4096 viewport at scale 2 does not.
pub const MAX_SCREENSHOT_PIXELS: f64 = 25_000_000.0;
/// Longest CSS selector (`selector`, `waitFor.selector`, `hideSelectors`), in characters.
pub const MAX_SELECTOR_CHARS: usize = 1_024;
/// Most entries of `hideSelectors`.
pub const MAX_HIDE_SELECTORS: usize = 50;
/// `waitFor.networkIdleMs` bounds; `waitFor.delayMs` bounds.
pub const MIN_NETWORK_IDLE_MS: u64 = 100;
pub const MAX_NETWORK_IDLE_MS: u64 = 30_000;
pub const MIN_DELAY_MS: u64 = 1;
pub const MAX_DELAY_MS: u64 = 30_000;
/// Longest `userAgent`, in characters.
pub const MAX_USER_AGENT_CHARS: usize = 512;
/// `headers`: most entries, longest name and value, most bytes of names and values together.
pub const MAX_HEADERS: usize = 32;
pub const MAX_HEADER_NAME_CHARS: usize = 128;
pub const MAX_HEADER_VALUE_CHARS: usize = 4_096;
pub const MAX_HEADERS_BYTES: usize = 16_384;
/// `cookies`: most entries, longest name, value and path, most bytes of names and values together.
pub const MAX_COOKIES: usize = 50;
pub const MAX_COOKIE_NAME_CHARS: usize = 256;
pub const MAX_COOKIE_VALUE_CHARS: usize = 4_096;
pub const MAX_COOKIE_PATH_CHARS: usize = 1_024;
pub const MAX_COOKIES_BYTES: usize = 16_384;
/// Fields of a `cookies` entry.
pub const COOKIE_FIELDS: &[&str] = &["name", "value", "domain", "path", "secure", "httpOnly", "sameSite"];
/// Fields of `viewport`, `clip` and `waitFor`.
pub const VIEWPORT_FIELDS: &[&str] = &["width", "height", "deviceScaleFactor", "mobile"];
pub const CLIP_FIELDS: &[&str] = &["x", "y", "width", "height"];
pub const WAIT_FOR_FIELDS: &[&str] = &["selector", "networkIdleMs", "delayMs"];
/// Request headers `headers` may not set, lower case: hop-by-hop headers and
/// those that say where a request goes or how long it is (the proxy and the
/// network stack own them), and two that have parameters of their own.
pub const REFUSED_HEADERS: &[&str] = &[
    "connection",
    "content-length",
    "cookie",
    "expect",
    "host",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
];
/// Any header whose lower-case name starts with this is refused too.
pub const REFUSED_HEADER_PREFIX: &str = "proxy-";

/// The `pdf` script's paper sizes (`format`), as Puppeteer and Browserless
/// name them, each width x height in inches (portrait).
pub const PAPER_FORMATS: &[(&str, f64, f64)] = &[
    ("Letter", 8.5, 11.0),
    ("Legal", 8.5, 14.0),
    ("Tabloid", 11.0, 17.0),
    ("Ledger", 17.0, 11.0),
    ("A0", 33.1, 46.8),
    ("A1", 23.4, 33.1),
    ("A2", 16.54, 23.4),
    ("A3", 11.7, 16.54),
    ("A4", 8.27, 11.7),
    ("A5", 5.83, 8.27),
    ("A6", 4.13, 5.83),
];
/// The paper without `format`: Puppeteer's default.
pub const DEFAULT_PAPER: &str = "Letter";
/// `scale` bounds (Chromium's print scale) and its default.
pub const MIN_PDF_SCALE: f64 = 0.1;
pub const MAX_PDF_SCALE: f64 = 2.0;
/// Fields of `margin`; each a length: a number of CSS pixels, or a string
/// of a number and a unit (`MARGIN_PATTERN`).
pub const MARGIN_FIELDS: &[&str] = &["top", "right", "bottom", "left"];
/// Largest margin, in inches (a quarter of A0's short side is beyond any
/// page's use).
pub const MAX_MARGIN_INCHES: f64 = 10.0;
/// A margin written with its unit: `10px`, `1.5cm`, `12mm`, `0.5in`.
pub const MARGIN_PATTERN: &str = "^[0-9]{1,4}(\\.[0-9]{1,4})?(px|in|cm|mm)$";

/// The rules below that code checks, as JSON Schema patterns (ECMA-262 and
/// the regex crate read them alike) for the schema of params
/// (`shapes::script_params`); `grid-core/tests/shapes.rs` holds each to the
/// code on a corpus and on generated strings.
///
/// A CSS selector: not blank, no control character.
pub const SELECTOR_PATTERN: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\u0000-\\u0020\\u007f-\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000][^\\u0000-\\u001f\\u007f-\\u009f]*$";
/// Printable ASCII, space included; and with something besides spaces.
pub const PRINTABLE_PATTERN: &str = "^[ -~]*$";
pub const NOT_BLANK_PRINTABLE_PATTERN: &str = "^[ -~]*[!-~][ -~]*$";
/// A header or cookie name: an HTTP token.
pub const TOKEN_PATTERN: &str = "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$";
/// A cookie value or path character: printable ASCII but `;`.
pub const COOKIE_TEXT_PATTERN: &str = "^[ -:<-~]*$";
pub const COOKIE_PATH_PATTERN: &str = "^/[ -:<-~]*$";
/// A DNS name or IPv4 address: labels of letters, digits and inner hyphens,
/// at most 63 characters each (`MAX_HOST_CHARS` in all).
pub const HOST_NAME_PATTERN: &str =
    "^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$";
/// `allowedHosts` also takes `*.` before a name, and a bracketed IPv6 address.
pub const HOST_PATTERN_PATTERN: &str =
    "^(\\*\\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$";
pub const HOST_IPV6_PATTERN: &str = "^\\[[0-9A-Fa-f:.]+\\]$";
/// Longest host name or host pattern.
pub const MAX_HOST_CHARS: usize = 253;

/// Every script parameter and its group (`catalog::ParamGroup`); a script
/// takes the parameters of the groups its row lists (`Script::row`).
/// `timeoutMs` is in two groups, with other bounds: a request's budget
/// (`fetch`) and a page's.
pub const PARAMS: &[(&str, ParamGroup)] = &[
    ("timeoutMs", ParamGroup::Request),
    ("timeoutMs", ParamGroup::Page),
    ("waitUntil", ParamGroup::Page),
    ("allowedHosts", ParamGroup::AllowedHosts),
    ("fullPage", ParamGroup::Screenshot),
    ("format", ParamGroup::Screenshot),
    ("quality", ParamGroup::Screenshot),
    ("clip", ParamGroup::Screenshot),
    ("selector", ParamGroup::Screenshot),
    ("hideSelectors", ParamGroup::Screenshot),
    ("viewport", ParamGroup::Rendering),
    ("waitFor", ParamGroup::Rendering),
    ("javascriptEnabled", ParamGroup::Page),
    ("userAgent", ParamGroup::Page),
    ("headers", ParamGroup::Page),
    ("cookies", ParamGroup::Page),
    ("blockResourceTypes", ParamGroup::Page),
    ("format", ParamGroup::Pdf),
    ("landscape", ParamGroup::Pdf),
    ("printBackground", ParamGroup::Pdf),
    ("margin", ParamGroup::Pdf),
    ("scale", ParamGroup::Pdf),
];

/// The parameters `script` takes, each with its group.
pub fn params_of(script: Script) -> impl Iterator<Item = (&'static str, ParamGroup)> {
    PARAMS.iter().copied().filter(move |(_, group)| script.takes(*group))
}

/// The parameter names `script` takes.
pub fn names(script: Script) -> Vec<&'static str> {
    params_of(script).map(|(name, _)| name).collect()
}

/// Checks `params` of `script` as the item would, without running it: what
/// the CLI asks before sending a batch.
pub fn check(script: Script, params: &Map<String, Value>) -> Result<(), String> {
    match script.row().needs {
        Needs::Http => fetch(params).map(drop),
        Needs::Browser => browser(script, params).map(drop),
    }
}

/// Checks `params` for an item of `script` at `url`: [`check`], then what
/// needs the URL (a cookie's domain). A URL that does not parse is left to
/// the batch's own validation.
pub fn check_item(script: Script, params: &Map<String, Value>, url: &str) -> Result<(), String> {
    match script.row().needs {
        Needs::Http => fetch(params).map(drop),
        Needs::Browser => {
            let p = browser(script, params)?;
            match url::Url::parse(url).ok().as_ref().and_then(url::Url::host) {
                Some(url::Host::Ipv6(v6)) => p.check_for_host(&format!("[{v6}]")),
                Some(host) => p.check_for_host(&host.to_string().to_ascii_lowercase()),
                None => Ok(()),
            }
        }
    }
}

/// The groups of the parameter `name`: none when no script takes it.
fn groups_of(name: &str) -> impl Iterator<Item = ParamGroup> + '_ {
    PARAMS.iter().filter(move |(n, _)| *n == name).map(|(_, group)| *group)
}

/// "params.x: not a parameter of capture; only browser-fetch and
/// render-fetch take it", or `None` when no script takes `name`.
fn misplaced(name: &str, script: Script) -> Option<String> {
    let takers: Vec<&str> =
        Script::ALL.into_iter().filter(|s| groups_of(name).any(|g| s.takes(g))).map(Script::as_str).collect();
    let list = match takers.as_slice() {
        [one] => format!("{one} takes"),
        [init @ .., last] => format!("{} and {last} take", init.join(", ")),
        [] => return None,
    };
    Some(format!("params.{name}: not a parameter of {}; only {list} it", script.as_str()))
}

/// When a browser script considers the page loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitUntil {
    /// The main document's `load` event.
    Load,
    /// `load`, then no network connection for 500 ms (Chromium's
    /// `networkIdle` lifecycle event).
    NetworkIdle,
}

impl WaitUntil {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitUntil::Load => "load",
            WaitUntil::NetworkIdle => "networkidle",
        }
    }
}

/// Image format of a `capture` screenshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    Png,
    Jpeg,
    Webp,
}

impl ImageFormat {
    pub const ALL: [ImageFormat; 3] = [ImageFormat::Png, ImageFormat::Jpeg, ImageFormat::Webp];

    pub fn as_str(self) -> &'static str {
        match self {
            ImageFormat::Png => "png",
            ImageFormat::Jpeg => "jpeg",
            ImageFormat::Webp => "webp",
        }
    }

    /// The screenshot file's content type.
    pub fn content_type(self) -> &'static str {
        match self {
            ImageFormat::Png => "image/png",
            ImageFormat::Jpeg => "image/jpeg",
            ImageFormat::Webp => "image/webp",
        }
    }
}

/// The page's viewport when `viewport` replaces the profile's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Viewport {
    pub width: u32,
    pub height: u32,
    pub device_scale_factor: f64,
    /// Mobile emulation: the page's `<meta name="viewport">` is honoured,
    /// scrollbars overlay the page.
    pub mobile: bool,
}

/// A rectangle of the page in CSS pixels, from the document's top left.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clip {
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
}

/// What a `capture` screenshot shows.
#[derive(Debug, Clone, PartialEq)]
pub enum Region {
    /// The viewport (default).
    Viewport,
    /// `fullPage`: the whole page, viewport wide.
    FullPage,
    /// `clip`: a rectangle of the page.
    Clip(Clip),
    /// `selector`: the box of the first element matching a CSS selector.
    Selector(String),
}

impl Region {
    pub fn as_str(&self) -> &'static str {
        match self {
            Region::Viewport => "viewport",
            Region::FullPage => "fullPage",
            Region::Clip(_) => "clip",
            Region::Selector(_) => "selector",
        }
    }
}

/// `capture`'s screenshot options.
#[derive(Debug, Clone, PartialEq)]
pub struct Screenshot {
    pub format: ImageFormat,
    /// `None` for png; jpeg and webp always have one.
    pub quality: Option<u8>,
    pub region: Region,
    /// Elements hidden (`display: none`) before the screenshot is taken.
    pub hide_selectors: Vec<String>,
}

impl Default for Screenshot {
    fn default() -> Screenshot {
        Screenshot { format: ImageFormat::Png, quality: None, region: Region::Viewport, hide_selectors: vec![] }
    }
}

/// The `pdf` script's print options.
#[derive(Debug, Clone, PartialEq)]
pub struct PdfOptions {
    /// The paper's name (`PAPER_FORMATS`).
    pub paper: &'static str,
    /// Width x height of the paper in inches, portrait (Chromium turns it
    /// for `landscape`).
    pub paper_inches: (f64, f64),
    pub landscape: bool,
    /// Print background colours and images (CSS backgrounds).
    pub print_background: bool,
    /// Top, right, bottom, left, in inches.
    pub margin_inches: [f64; 4],
    pub scale: f64,
}

impl Default for PdfOptions {
    fn default() -> PdfOptions {
        // `DEFAULT_PAPER`'s row of `PAPER_FORMATS` (a unit test holds them equal).
        PdfOptions {
            paper: DEFAULT_PAPER,
            paper_inches: (8.5, 11.0),
            landscape: false,
            print_background: false,
            margin_inches: [0.0; 4],
            scale: 1.0,
        }
    }
}

/// A paper of `PAPER_FORMATS` by its name, exactly as written there (as
/// every enumerated name of the params is taken).
pub fn paper(name: &str) -> Option<(&'static str, f64, f64)> {
    PAPER_FORMATS.iter().copied().find(|(n, _, _)| *n == name)
}

/// Every name `paper` takes.
pub fn paper_names() -> Vec<&'static str> {
    PAPER_FORMATS.iter().map(|(n, _, _)| *n).collect()
}

/// A margin in inches: a number is CSS pixels (96 to the inch); a string
/// carries its unit.
fn margin_inches(v: &Value) -> Option<f64> {
    let inches = match v {
        Value::Number(n) => n.as_f64()? / 96.0,
        Value::String(s) => {
            if !is_margin_text(s) {
                return None;
            }
            let (number, unit) = s.split_at(s.len() - 2);
            let n: f64 = number.parse().ok()?;
            match unit {
                "px" => n / 96.0,
                "in" => n,
                "cm" => n / 2.54,
                "mm" => n / 25.4,
                _ => return None,
            }
        }
        _ => return None,
    };
    (0.0..=MAX_MARGIN_INCHES).contains(&inches).then_some(inches)
}

/// `MARGIN_PATTERN`, checked by hand: one to four digits, optionally a dot
/// and one to four digits, then a unit.
fn is_margin_text(s: &str) -> bool {
    let Some(number) = ["px", "in", "cm", "mm"].iter().find_map(|u| s.strip_suffix(u)) else { return false };
    let (whole, fraction) = match number.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (number, None),
    };
    let digits = |d: &str| (1..=4).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_digit());
    digits(whole) && fraction.is_none_or(digits)
}

fn pdf_margin(p: &mut Found, v: &Value) -> Option<[f64; 4]> {
    let obj = p.object(v, MARGIN_FIELDS, "an object {top, right, bottom, left} of lengths")?;
    let mut out = [0.0; 4];
    let mut ok = true;
    for (i, field) in MARGIN_FIELDS.iter().enumerate() {
        if let Some(m) = obj.get(*field) {
            match margin_inches(m) {
                Some(inches) => out[i] = inches,
                None => {
                    ok = false;
                    p.push_at(
                        format!(".{field}"),
                        format!(
                            "must be a number of CSS pixels or a length such as \"1cm\" (px, in, cm, mm), at most {MAX_MARGIN_INCHES} in, got {}",
                            shown(m)
                        ),
                    );
                }
            }
        }
    }
    ok.then_some(out)
}

/// What the page must also show after its wait condition: checked in this
/// order, all within `timeoutMs` from navigation start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WaitFor {
    /// An element matching this CSS selector exists.
    pub selector: Option<String>,
    /// No request of the page in flight for this long.
    pub network_idle_ms: Option<u64>,
    /// Then this long, whatever happens.
    pub delay_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SameSite {
    Strict,
    Lax,
    None,
}

impl SameSite {
    pub const ALL: [SameSite; 3] = [SameSite::Strict, SameSite::Lax, SameSite::None];

    pub fn as_str(self) -> &'static str {
        match self {
            SameSite::Strict => "Strict",
            SameSite::Lax => "Lax",
            SameSite::None => "None",
        }
    }
}

/// One entry of `cookies`: set in the item's own browser context before it
/// navigates, gone with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cookie {
    pub name: String,
    pub value: String,
    /// A domain cookie (sent to the domain and its subdomains), lower case,
    /// without a leading dot; `None`: a host-only cookie of the item URL's host.
    pub domain: Option<String>,
    pub path: Option<String>,
    pub secure: bool,
    pub http_only: bool,
    pub same_site: Option<SameSite>,
}

/// Kinds of request `blockResourceTypes` can refuse (DevTools resource
/// types; the page's own documents are not among them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceType {
    Image,
    Media,
    Font,
    Stylesheet,
    Script,
    Xhr,
    Fetch,
    EventSource,
    Manifest,
    TextTrack,
    Ping,
    Prefetch,
    Other,
}

impl ResourceType {
    pub const ALL: [ResourceType; 13] = [
        ResourceType::Image,
        ResourceType::Media,
        ResourceType::Font,
        ResourceType::Stylesheet,
        ResourceType::Script,
        ResourceType::Xhr,
        ResourceType::Fetch,
        ResourceType::EventSource,
        ResourceType::Manifest,
        ResourceType::TextTrack,
        ResourceType::Ping,
        ResourceType::Prefetch,
        ResourceType::Other,
    ];

    /// The parameter's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceType::Image => "image",
            ResourceType::Media => "media",
            ResourceType::Font => "font",
            ResourceType::Stylesheet => "stylesheet",
            ResourceType::Script => "script",
            ResourceType::Xhr => "xhr",
            ResourceType::Fetch => "fetch",
            ResourceType::EventSource => "eventsource",
            ResourceType::Manifest => "manifest",
            ResourceType::TextTrack => "texttrack",
            ResourceType::Ping => "ping",
            ResourceType::Prefetch => "prefetch",
            ResourceType::Other => "other",
        }
    }

    /// DevTools' name (`Network.ResourceType`), as paused requests carry it.
    pub fn devtools_name(self) -> &'static str {
        match self {
            ResourceType::Image => "Image",
            ResourceType::Media => "Media",
            ResourceType::Font => "Font",
            ResourceType::Stylesheet => "Stylesheet",
            ResourceType::Script => "Script",
            ResourceType::Xhr => "XHR",
            ResourceType::Fetch => "Fetch",
            ResourceType::EventSource => "EventSource",
            ResourceType::Manifest => "Manifest",
            ResourceType::TextTrack => "TextTrack",
            ResourceType::Ping => "Ping",
            ResourceType::Prefetch => "Prefetch",
            ResourceType::Other => "Other",
        }
    }

    /// Names are exact (`image`, not `Image`), as the schema's enum lists them.
    pub fn parse(s: &str) -> Option<ResourceType> {
        ResourceType::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// Parameters of the browser scripts (`capture`, `render-fetch`,
/// `browser-fetch`). Options a script does not take keep their defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct BrowserParams {
    /// From navigation start until the page is ready (wait condition, then `waitFor`).
    pub timeout_ms: u64,
    pub wait_until: WaitUntil,
    /// Hosts the page may reach besides the item URL's own host; `None`
    /// when not given (no host restriction). Lower case; an entry
    /// `*.example.com` matches every subdomain of example.com.
    pub allowed_hosts: Option<Vec<String>>,
    /// `capture` only.
    pub screenshot: Screenshot,
    /// `pdf` only.
    pub pdf: PdfOptions,
    /// `None`: the profile's.
    pub viewport: Option<Viewport>,
    pub wait_for: Option<WaitFor>,
    pub javascript_enabled: bool,
    /// `None`: the profile's.
    pub user_agent: Option<String>,
    /// Extra request headers (name as given, value), sent with the requests
    /// to the item URL's host.
    pub headers: Vec<(String, String)>,
    pub cookies: Vec<Cookie>,
    pub block_resource_types: Vec<ResourceType>,
}

impl Default for BrowserParams {
    fn default() -> BrowserParams {
        BrowserParams {
            timeout_ms: DEFAULT_TIMEOUT_MS,
            wait_until: WaitUntil::Load,
            allowed_hosts: None,
            screenshot: Screenshot::default(),
            pdf: PdfOptions::default(),
            viewport: None,
            wait_for: None,
            javascript_enabled: true,
            user_agent: None,
            headers: vec![],
            cookies: vec![],
            block_resource_types: vec![],
        }
    }
}

impl BrowserParams {
    /// The checks that need the item's URL: a cookie's `domain` must be the
    /// URL's host or a parent of it (`host` as the URL writes it, lower case).
    pub fn check_for_host(&self, host: &str) -> Result<(), String> {
        let problems = self.host_problems(host);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }

    /// `check_for_host`'s problems, one each.
    pub fn host_problems(&self, host: &str) -> Vec<String> {
        self
            .cookies
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let domain = c.domain.as_deref()?;
                (!domain_matches(domain, host)).then(|| {
                    format!("params.cookies[{i}].domain: \"{domain}\" is neither the item URL's host {host} nor a parent domain of it")
                })
            })
            .collect()
    }
}

/// Whether a cookie of `domain` is sent to `host` (RFC 6265 domain-match).
pub fn domain_matches(domain: &str, host: &str) -> bool {
    host == domain
        || (host.len() > domain.len()
            && host.ends_with(domain)
            && host.as_bytes()[host.len() - domain.len() - 1] == b'.'
            && host.parse::<std::net::IpAddr>().is_err())
}

pub fn browser(script: Script, params: &Map<String, Value>) -> Result<BrowserParams, String> {
    browser_problems(script, params).map_err(|problems| problems.join("; "))
}

/// `browser`, each problem on its own (`params.name: ...`).
pub fn browser_problems(script: Script, params: &Map<String, Value>) -> Result<BrowserParams, Vec<String>> {
    let mut problems = vec![];
    let mut out = BrowserParams::default();
    let mut format_given = false;
    let mut quality = None;
    let mut regions: Vec<Region> = vec![];
    for (k, v) in params {
        if !groups_of(k).any(|g| script.takes(g)) {
            problems.push(
                misplaced(k, script).unwrap_or_else(|| format!("params.{k}: unknown parameter of {}", script.as_str())),
            );
            continue;
        }
        let mut p = Found { problems: &mut problems, name: k };
        match k.as_str() {
            "timeoutMs" => {
                if let Some(n) = p.int(v, MIN_BROWSER_TIMEOUT_MS, MAX_BROWSER_TIMEOUT_MS) {
                    out.timeout_ms = n;
                }
            }
            "waitUntil" => match v.as_str() {
                Some("load") => out.wait_until = WaitUntil::Load,
                Some("networkidle") => out.wait_until = WaitUntil::NetworkIdle,
                Some(other) => p.push(format!("must be \"load\" or \"networkidle\", got \"{other}\"")),
                None => p.push(format!("must be \"load\" or \"networkidle\", got {}", json_type(v))),
            },
            "allowedHosts" => match allowed_hosts(v) {
                Ok(hosts) => out.allowed_hosts = Some(hosts),
                Err(mut e) => problems.append(&mut e),
            },
            "fullPage" => match v.as_bool() {
                Some(true) => regions.push(Region::FullPage),
                Some(false) => {}
                None => p.push(format!("must be a boolean, got {}", json_type(v))),
            },
            "format" if script.takes(ParamGroup::Pdf) => {
                let names = paper_names();
                match v.as_str().and_then(paper) {
                    Some((name, w, h)) => {
                        out.pdf.paper = name;
                        out.pdf.paper_inches = (w, h);
                    }
                    None => p.push(format!("must be one of {}, got {}", quoted(&names), shown(v))),
                }
            }
            "landscape" => out.pdf.landscape = p.bool_at("", v).unwrap_or_default(),
            "printBackground" => out.pdf.print_background = p.bool_at("", v).unwrap_or_default(),
            "margin" => out.pdf.margin_inches = pdf_margin(&mut p, v).unwrap_or_default(),
            "scale" => {
                if let Some(n) = p.number_at("", v, MIN_PDF_SCALE, MAX_PDF_SCALE) {
                    out.pdf.scale = n;
                }
            }
            "format" => {
                let names = ImageFormat::ALL.map(ImageFormat::as_str);
                match v.as_str().and_then(|s| ImageFormat::ALL.into_iter().find(|f| f.as_str() == s)) {
                    Some(f) => {
                        out.screenshot.format = f;
                        format_given = true;
                    }
                    None => p.push(format!("must be one of {}, got {}", quoted(&names), shown(v))),
                }
            }
            "quality" => quality = p.int(v, MIN_QUALITY, MAX_QUALITY).map(|q| q as u8),
            "clip" => {
                if let Some(c) = clip(&mut p, v) {
                    regions.push(Region::Clip(c));
                }
            }
            "selector" => {
                if let Some(s) = selector(&mut p, v) {
                    regions.push(Region::Selector(s));
                }
            }
            "hideSelectors" => out.screenshot.hide_selectors = hide_selectors(&mut p, v),
            "viewport" => out.viewport = viewport(&mut p, v),
            "waitFor" => out.wait_for = wait_for(&mut p, v),
            "javascriptEnabled" => match v.as_bool() {
                Some(b) => out.javascript_enabled = b,
                None => p.push(format!("must be a boolean, got {}", json_type(v))),
            },
            "userAgent" => out.user_agent = user_agent(&mut p, v),
            "headers" => out.headers = headers(&mut p, v),
            "cookies" => out.cookies = cookies(&mut p, v),
            "blockResourceTypes" => out.block_resource_types = resource_types(&mut p, v),
            _ => problems.push(format!("params.{k}: unknown parameter of {}", script.as_str())),
        }
    }
    // Choices that depend on each other.
    // Named in one order whatever the order of the object's keys.
    regions.sort_by_key(|r| ["fullPage", "clip", "selector"].iter().position(|n| *n == r.as_str()));
    if regions.len() > 1 {
        let given: Vec<&str> = regions.iter().map(Region::as_str).collect();
        problems.push(format!(
            "params.{}: cannot be combined with {}; give one of fullPage, clip and selector",
            given[1], given[0]
        ));
    }
    if let Some(region) = regions.into_iter().next() {
        out.screenshot.region = region;
    }
    match (out.screenshot.format, quality) {
        (ImageFormat::Png, Some(_)) => problems.push(format!(
            "params.quality: only jpeg and webp take a quality; format is png{}",
            if format_given { "" } else { " (the default)" }
        )),
        (ImageFormat::Png, None) => {}
        (_, q) => out.screenshot.quality = Some(q.unwrap_or(DEFAULT_QUALITY)),
    }
    let dsf = out.viewport.map_or(1.0, |v| v.device_scale_factor);
    if let Region::Clip(c) = &out.screenshot.region {
        let pixels = c.width * c.height * dsf * dsf;
        if pixels > MAX_SCREENSHOT_PIXELS {
            problems.push(format!(
                "params.clip: {} x {} at scale {dsf} is {pixels} image pixels, more than {MAX_SCREENSHOT_PIXELS}",
                c.width, c.height
            ));
        }
    }
    let [top, right, bottom, left] = out.pdf.margin_inches;
    let (paper_w, paper_h) = match out.pdf.paper_inches {
        (w, h) if out.pdf.landscape => (h, w),
        sides => sides,
    };
    if top + bottom >= paper_h || left + right >= paper_w {
        problems.push(format!(
            "params.margin: leaves no room to print on {} {} paper ({paper_w} x {paper_h} in)",
            out.pdf.paper,
            if out.pdf.landscape { "landscape" } else { "portrait" }
        ));
    }
    if let Some(w) = &out.wait_for {
        for (field, ms) in [("networkIdleMs", w.network_idle_ms), ("delayMs", w.delay_ms)] {
            if ms.is_some_and(|ms| ms >= out.timeout_ms) {
                problems.push(format!(
                    "params.waitFor.{field}: must be less than timeoutMs ({}), which bounds the whole wait",
                    out.timeout_ms
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// Problems of one parameter, each prefixed with its name.
struct Found<'a> {
    problems: &'a mut Vec<String>,
    name: &'a str,
}

impl Found<'_> {
    fn push(&mut self, msg: impl std::fmt::Display) {
        self.problems.push(format!("params.{}: {msg}", self.name));
    }

    /// A problem of a part: `params.name.field` or `params.name[3]`.
    fn push_at(&mut self, at: impl std::fmt::Display, msg: impl std::fmt::Display) {
        self.problems.push(format!("params.{}{at}: {msg}", self.name));
    }

    fn int(&mut self, v: &Value, min: u64, max: u64) -> Option<u64> {
        self.int_at("", v, min, max)
    }

    fn int_at(&mut self, at: &str, v: &Value, min: u64, max: u64) -> Option<u64> {
        match whole_number(v) {
            Some(n) if n >= 0 && (min..=max).contains(&(n as u64)) => Some(n as u64),
            _ => {
                self.push_at(at, format!("must be a whole number from {min} to {max}, got {}", shown(v)));
                None
            }
        }
    }

    fn number_at(&mut self, at: &str, v: &Value, min: f64, max: f64) -> Option<f64> {
        match v.as_f64() {
            Some(n) if (min..=max).contains(&n) => Some(n),
            _ => {
                self.push_at(at, format!("must be a number from {min} to {max}, got {}", shown(v)));
                None
            }
        }
    }

    fn bool_at(&mut self, at: &str, v: &Value) -> Option<bool> {
        let b = v.as_bool();
        if b.is_none() {
            self.push_at(at, format!("must be a boolean, got {}", json_type(v)));
        }
        b
    }

    /// An object with only `fields`; `None` (and a problem) otherwise.
    fn object<'v>(&mut self, v: &'v Value, fields: &[&str], what: &str) -> Option<&'v Map<String, Value>> {
        self.object_at("", v, fields, what)
    }

    fn object_at<'v>(&mut self, at: &str, v: &'v Value, fields: &[&str], what: &str) -> Option<&'v Map<String, Value>> {
        let Some(obj) = v.as_object() else {
            self.push_at(at, format!("must be {what}, got {}", json_type(v)));
            return None;
        };
        let unknown: Vec<&String> = obj.keys().filter(|k| !fields.contains(&k.as_str())).collect();
        for k in &unknown {
            self.push_at(format!("{at}.{k}"), format!("unknown field (fields: {})", fields.join(", ")));
        }
        unknown.is_empty().then_some(obj)
    }
}

/// A number as written, anything else by its type.
fn shown(v: &Value) -> String {
    match v {
        Value::Number(_) => v.to_string(),
        Value::String(s) if s.chars().count() <= 40 => format!("\"{s}\""),
        _ => json_type(v).to_string(),
    }
}

fn quoted(names: &[&str]) -> String {
    names.iter().map(|n| format!("\"{n}\"")).collect::<Vec<_>>().join(", ")
}

/// Printable ASCII (space included), nothing else.
fn printable(s: &str) -> bool {
    s.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// A header or cookie name: an HTTP token.
fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn clip(p: &mut Found, v: &Value) -> Option<Clip> {
    let obj = p.object(v, CLIP_FIELDS, "an object {x, y, width, height} in CSS pixels")?;
    let mut get = |field: &str, min: f64| match obj.get(field) {
        Some(n) => p.number_at(&format!(".{field}"), n, min, MAX_CAPTURE_EXTENT),
        None => {
            p.push_at(format!(".{field}"), "missing");
            None
        }
    };
    let (x, y, width, height) = (get("x", 0.0), get("y", 0.0), get("width", 1.0), get("height", 1.0));
    Some(Clip { x: x?, y: y?, width: width?, height: height? })
}

/// A CSS selector as far as the grid can tell without a page: the page
/// itself refuses one it cannot parse, and the item then fails naming it.
fn selector_text(p: &mut Found, at: &str, v: &Value) -> Option<String> {
    let Some(s) = v.as_str() else {
        p.push_at(at, format!("must be a CSS selector string, got {}", json_type(v)));
        return None;
    };
    if s.trim().is_empty() {
        p.push_at(at, "must be a CSS selector, got an empty string");
    } else if s.chars().count() > MAX_SELECTOR_CHARS {
        p.push_at(at, format!("at most {MAX_SELECTOR_CHARS} characters, got {}", s.chars().count()));
    } else if s.chars().any(char::is_control) {
        p.push_at(at, "must not contain control characters");
    } else {
        return Some(s.to_string());
    }
    None
}

fn selector(p: &mut Found, v: &Value) -> Option<String> {
    selector_text(p, "", v)
}

fn hide_selectors(p: &mut Found, v: &Value) -> Vec<String> {
    let Some(items) = v.as_array() else {
        p.push(format!("must be an array of CSS selectors, got {}", json_type(v)));
        return vec![];
    };
    if items.len() > MAX_HIDE_SELECTORS {
        p.push(format!("at most {MAX_HIDE_SELECTORS} entries, got {}", items.len()));
        return vec![];
    }
    items.iter().enumerate().filter_map(|(i, item)| selector_text(p, &format!("[{i}]"), item)).collect()
}

fn viewport(p: &mut Found, v: &Value) -> Option<Viewport> {
    let obj = p.object(v, VIEWPORT_FIELDS, "an object {width, height, deviceScaleFactor, mobile}")?;
    let mut size = |field: &str| match obj.get(field) {
        Some(n) => p.int_at(&format!(".{field}"), n, MIN_VIEWPORT_SIZE, MAX_VIEWPORT_SIZE),
        None => {
            p.push_at(format!(".{field}"), "missing");
            None
        }
    };
    let (width, height) = (size("width"), size("height"));
    let dsf = match obj.get("deviceScaleFactor") {
        Some(n) => p.number_at(".deviceScaleFactor", n, MIN_DEVICE_SCALE_FACTOR, MAX_DEVICE_SCALE_FACTOR),
        None => Some(1.0),
    };
    let mobile = match obj.get("mobile") {
        Some(b) => p.bool_at(".mobile", b),
        None => Some(false),
    };
    let (width, height, dsf, mobile) = (width?, height?, dsf?, mobile?);
    let pixels = (width * height) as f64 * dsf * dsf;
    if pixels > MAX_SCREENSHOT_PIXELS {
        p.push(format!(
            "{width} x {height} at scale {dsf} is {pixels} image pixels, more than {MAX_SCREENSHOT_PIXELS}"
        ));
        return None;
    }
    Some(Viewport { width: width as u32, height: height as u32, device_scale_factor: dsf, mobile })
}

fn wait_for(p: &mut Found, v: &Value) -> Option<WaitFor> {
    let obj = p.object(v, WAIT_FOR_FIELDS, "an object {selector, networkIdleMs, delayMs}")?;
    if obj.is_empty() {
        p.push("give at least one of selector, networkIdleMs and delayMs");
        return None;
    }
    let mut w = WaitFor::default();
    let mut ok = true;
    if let Some(s) = obj.get("selector") {
        w.selector = selector_text(p, ".selector", s);
        ok &= w.selector.is_some();
    }
    if let Some(n) = obj.get("networkIdleMs") {
        w.network_idle_ms = p.int_at(".networkIdleMs", n, MIN_NETWORK_IDLE_MS, MAX_NETWORK_IDLE_MS);
        ok &= w.network_idle_ms.is_some();
    }
    if let Some(n) = obj.get("delayMs") {
        w.delay_ms = p.int_at(".delayMs", n, MIN_DELAY_MS, MAX_DELAY_MS);
        ok &= w.delay_ms.is_some();
    }
    ok.then_some(w)
}

fn user_agent(p: &mut Found, v: &Value) -> Option<String> {
    let Some(s) = v.as_str() else {
        p.push(format!("must be a string, got {}", json_type(v)));
        return None;
    };
    if s.trim().is_empty() || s.chars().count() > MAX_USER_AGENT_CHARS {
        p.push(format!("must be 1 to {MAX_USER_AGENT_CHARS} characters, got {}", s.chars().count()));
    } else if !printable(s) {
        p.push("must be printable ASCII (no line breaks or control characters)");
    } else {
        return Some(s.to_string());
    }
    None
}

fn headers(p: &mut Found, v: &Value) -> Vec<(String, String)> {
    let Some(obj) = v.as_object() else {
        p.push(format!("must be an object of header names to string values, got {}", json_type(v)));
        return vec![];
    };
    if obj.len() > MAX_HEADERS {
        p.push(format!("at most {MAX_HEADERS} headers, got {}", obj.len()));
        return vec![];
    }
    let mut out: Vec<(String, String)> = vec![];
    let mut bytes = 0;
    for (name, value) in obj {
        let at = format!(".{name}");
        let lower = name.to_ascii_lowercase();
        if !is_token(name) || name.len() > MAX_HEADER_NAME_CHARS {
            p.push_at(
                &at,
                format!("not a header name (1 to {MAX_HEADER_NAME_CHARS} letters, digits and !#$%&'*+-.^_`|~)"),
            );
            continue;
        }
        if lower == "cookie" {
            p.push_at(&at, "cannot be set here; use the cookies parameter");
            continue;
        }
        if lower == "user-agent" {
            p.push_at(&at, "cannot be set here; use the userAgent parameter");
            continue;
        }
        if REFUSED_HEADERS.contains(&lower.as_str()) || lower.starts_with(REFUSED_HEADER_PREFIX) {
            p.push_at(
                &at,
                "a header the grid does not let a page set (hop-by-hop, Host, Proxy-*, Content-Length, Expect)",
            );
            continue;
        }
        if out.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            p.push_at(&at, "given twice (header names are case-insensitive)");
            continue;
        }
        let Some(value) = value.as_str() else {
            p.push_at(&at, format!("must be a string, got {}", json_type(value)));
            continue;
        };
        if value.chars().count() > MAX_HEADER_VALUE_CHARS {
            p.push_at(
                &at,
                format!("value of at most {MAX_HEADER_VALUE_CHARS} characters, got {}", value.chars().count()),
            );
            continue;
        }
        if !printable(value) {
            p.push_at(&at, "value must be printable ASCII (no line breaks or control characters)");
            continue;
        }
        bytes += name.len() + value.len();
        out.push((name.clone(), value.to_string()));
    }
    if bytes > MAX_HEADERS_BYTES {
        p.push(format!("names and values together at most {MAX_HEADERS_BYTES} bytes, got {bytes}"));
    }
    out
}

fn cookies(p: &mut Found, v: &Value) -> Vec<Cookie> {
    let Some(items) = v.as_array() else {
        p.push(format!("must be an array of {{name, value, ...}} objects, got {}", json_type(v)));
        return vec![];
    };
    if items.len() > MAX_COOKIES {
        p.push(format!("at most {MAX_COOKIES} cookies, got {}", items.len()));
        return vec![];
    }
    let mut out = vec![];
    let mut bytes = 0;
    for (i, item) in items.iter().enumerate() {
        let at = format!("[{i}]");
        if let Some(c) = cookie(p, &at, item) {
            bytes += c.name.len() + c.value.len();
            out.push(c);
        }
    }
    if bytes > MAX_COOKIES_BYTES {
        p.push(format!("names and values together at most {MAX_COOKIES_BYTES} bytes, got {bytes}"));
    }
    out
}

fn cookie(p: &mut Found, at: &str, v: &Value) -> Option<Cookie> {
    let obj = p.object_at(at, v, COOKIE_FIELDS, "an object {name, value, domain, path, secure, httpOnly, sameSite}")?;
    let mut ok = true;
    let mut text = |p: &mut Found, field: &str, required: bool| -> Option<String> {
        match obj.get(field) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                p.push_at(format!("{at}.{field}"), format!("must be a string, got {}", json_type(other)));
                ok = false;
                None
            }
            None if required => {
                p.push_at(format!("{at}.{field}"), "missing");
                ok = false;
                None
            }
            None => None,
        }
    };
    let name = text(p, "name", true);
    let value = text(p, "value", true);
    let domain = text(p, "domain", false);
    let path = text(p, "path", false);
    let same_site = text(p, "sameSite", false);
    let flag = |p: &mut Found, field: &str| match obj.get(field) {
        Some(b) => p.bool_at(&format!("{at}.{field}"), b),
        None => Some(false),
    };
    let (secure, http_only) = (flag(p, "secure"), flag(p, "httpOnly"));
    if let Some(n) = &name {
        if !is_token(n) || n.chars().count() > MAX_COOKIE_NAME_CHARS {
            p.push_at(
                format!("{at}.name"),
                format!("not a cookie name (1 to {MAX_COOKIE_NAME_CHARS} letters, digits and !#$%&'*+-.^_`|~)"),
            );
            ok = false;
        }
    }
    if let Some(v) = &value {
        if v.chars().count() > MAX_COOKIE_VALUE_CHARS || !printable(v) || v.contains(';') {
            p.push_at(
                format!("{at}.value"),
                format!("must be at most {MAX_COOKIE_VALUE_CHARS} printable ASCII characters without ';'"),
            );
            ok = false;
        }
    }
    let domain = domain.and_then(|d| {
        let d = d.strip_prefix('.').unwrap_or(&d).to_ascii_lowercase();
        if d.starts_with("*.") || d.starts_with('[') || !is_host_pattern(&d) {
            p.push_at(format!("{at}.domain"), format!("\"{d}\" is not a domain name"));
            ok = false;
            None
        } else {
            Some(d)
        }
    });
    if let Some(path) = &path {
        if !path.starts_with('/')
            || path.chars().count() > MAX_COOKIE_PATH_CHARS
            || !printable(path)
            || path.contains(';')
        {
            p.push_at(
                format!("{at}.path"),
                format!(
                    "must start with / and be at most {MAX_COOKIE_PATH_CHARS} printable ASCII characters without ';'"
                ),
            );
            ok = false;
        }
    }
    let same_site = match same_site.as_deref() {
        None => None,
        Some(s) => match SameSite::ALL.into_iter().find(|x| x.as_str() == s) {
            Some(x) => Some(x),
            None => {
                p.push_at(format!("{at}.sameSite"), format!("must be \"Strict\", \"Lax\" or \"None\", got \"{s}\""));
                ok = false;
                None
            }
        },
    };
    let (secure, http_only) = (secure?, http_only?);
    if !ok {
        return None;
    }
    let name = name?;
    // Cookies a browser drops without a word: refused here, so the item does
    // not run without them unnoticed.
    if same_site == Some(SameSite::None) && !secure {
        p.push_at(format!("{at}.sameSite"), "\"None\" needs secure: true (browsers drop the cookie otherwise)");
        return None;
    }
    if name.starts_with("__Secure-") && !secure {
        p.push_at(format!("{at}.secure"), "a __Secure- cookie needs secure: true");
        return None;
    }
    if name.starts_with("__Host-") && (!secure || domain.is_some() || path.as_deref().is_some_and(|p| p != "/")) {
        p.push_at(format!("{at}.name"), "a __Host- cookie needs secure: true, no domain and path /");
        return None;
    }
    Some(Cookie { name, value: value?, domain, path, secure, http_only, same_site })
}

fn resource_types(p: &mut Found, v: &Value) -> Vec<ResourceType> {
    let Some(items) = v.as_array() else {
        p.push(format!("must be an array of resource types, got {}", json_type(v)));
        return vec![];
    };
    let mut out = vec![];
    for (i, item) in items.iter().enumerate() {
        match item.as_str().and_then(ResourceType::parse) {
            Some(t) if !out.contains(&t) => out.push(t),
            Some(t) => p.push_at(format!("[{i}]"), format!("\"{}\" is listed twice", t.as_str())),
            None => p.push_at(
                format!("[{i}]"),
                format!("must be one of {}, got {}", quoted(&ResourceType::ALL.map(ResourceType::as_str)), shown(item)),
            ),
        }
    }
    out
}

/// `allowedHosts`: an array of bare host names (no scheme, port or path),
/// each optionally starting with `*.`.
fn allowed_hosts(v: &Value) -> Result<Vec<String>, Vec<String>> {
    let Some(items) = v.as_array() else {
        return Err(vec![format!("params.allowedHosts: must be an array of host names, got {}", json_type(v))]);
    };
    if items.len() > MAX_ALLOWED_HOSTS {
        return Err(vec![format!("params.allowedHosts: at most {MAX_ALLOWED_HOSTS} entries, got {}", items.len())]);
    }
    let mut hosts = vec![];
    let mut problems = vec![];
    for (i, item) in items.iter().enumerate() {
        match item.as_str() {
            Some(h) if is_host_pattern(h) => hosts.push(h.to_ascii_lowercase()),
            Some(h) => problems.push(format!(
                "params.allowedHosts[{i}]: \"{h}\" is not a host name (write example.com or *.example.com, without scheme, port or path)"
            )),
            None => problems.push(format!("params.allowedHosts[{i}]: must be a string, got {}", json_type(item))),
        }
    }
    if problems.is_empty() {
        Ok(hosts)
    } else {
        Err(problems)
    }
}

/// A DNS name, an IPv4 address or a bracketed IPv6 address, optionally
/// prefixed by `*.` (a DNS name then follows).
fn is_host_pattern(h: &str) -> bool {
    if h.len() > MAX_HOST_CHARS {
        return false;
    }
    if let Some(inner) = h.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return inner.parse::<std::net::Ipv6Addr>().is_ok();
    }
    let name = h.strip_prefix("*.").unwrap_or(h);
    !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn defaults_and_bounds() {
        assert_eq!(fetch(&Map::new()), Ok(FetchParams { timeout_ms: 30_000 }));
        assert_eq!(fetch(&map(json!({"timeoutMs": 100}))), Ok(FetchParams { timeout_ms: 100 }));
        assert!(fetch(&map(json!({"timeoutMs": 99}))).unwrap_err().starts_with("params.timeoutMs"));
        assert!(fetch(&map(json!({"timeoutMs": "5"}))).unwrap_err().contains("a string"));
    }

    #[test]
    fn unknown_and_misplaced_params_are_named() {
        let e = fetch(&map(json!({"allowedHosts": ["a"], "bogus": 1}))).unwrap_err();
        assert!(e.contains("params.allowedHosts: not a parameter of fetch"), "{e}");
        assert!(e.contains("params.bogus: unknown parameter of fetch"), "{e}");
    }

    #[test]
    fn the_default_paper_is_its_row_of_the_table() {
        let d = PdfOptions::default();
        assert_eq!(paper(DEFAULT_PAPER), Some((d.paper, d.paper_inches.0, d.paper_inches.1)));
    }

    #[test]
    fn pdf_options_are_read_and_checked() {
        let p = browser(
            Script::Pdf,
            &map(json!({"format": "A4", "landscape": true, "printBackground": true,
                        "margin": {"top": "1cm", "bottom": 96, "left": "10mm"}, "scale": 0.5})),
        )
        .unwrap();
        assert_eq!(p.pdf.paper, "A4");
        assert_eq!(p.pdf.paper_inches, (8.27, 11.7), "the sheet, which Chromium turns");
        assert!(p.pdf.landscape && p.pdf.print_background);
        let [top, right, bottom, left] = p.pdf.margin_inches;
        assert!((top - 1.0 / 2.54).abs() < 1e-9 && right == 0.0 && bottom == 1.0 && (left - 10.0 / 25.4).abs() < 1e-9);
        assert_eq!(p.pdf.scale, 0.5);
        let e = browser(
            Script::Pdf,
            &map(json!({"format": "png", "scale": 3, "margin": {"top": "1 cm", "side": 1}, "fullPage": true})),
        )
        .unwrap_err();
        for part in [
            "params.format: must be one of \"Letter\"",
            "params.scale: must be a number from 0.1 to 2",
            "params.margin.side: unknown field",
            "params.fullPage: not a parameter of pdf; only capture takes it",
        ] {
            assert!(e.contains(part), "{part} in {e}");
        }
        let e =
            browser(Script::Pdf, &map(json!({"format": "A6", "margin": {"left": "3in", "right": "2in"}}))).unwrap_err();
        assert!(e.contains("params.margin: leaves no room to print on A6 portrait paper"), "{e}");
        // The screenshot's format stays the screenshot's.
        assert!(browser(Script::Capture, &map(json!({"format": "A4"}))).is_err());
        assert!(browser(Script::Capture, &map(json!({"landscape": true}))).unwrap_err().contains("only pdf takes it"));
    }

    #[test]
    fn browser_defaults() {
        for script in [Script::Capture, Script::RenderFetch, Script::BrowserFetch] {
            assert_eq!(
                browser(script, &Map::new()),
                Ok(BrowserParams {
                    timeout_ms: 30_000,
                    wait_until: WaitUntil::Load,
                    allowed_hosts: None,
                    screenshot: Screenshot {
                        format: ImageFormat::Png,
                        quality: None,
                        region: Region::Viewport,
                        hide_selectors: vec![]
                    },
                    pdf: PdfOptions {
                        paper: "Letter",
                        paper_inches: (8.5, 11.0),
                        landscape: false,
                        print_background: false,
                        margin_inches: [0.0; 4],
                        scale: 1.0,
                    },
                    viewport: None,
                    wait_for: None,
                    javascript_enabled: true,
                    user_agent: None,
                    headers: vec![],
                    cookies: vec![],
                    block_resource_types: vec![],
                })
            );
        }
    }

    #[test]
    fn browser_params_are_read() {
        let p = browser(
            Script::RenderFetch,
            &map(json!({"timeoutMs": 5000, "waitUntil": "networkidle", "allowedHosts": ["Example.com", "*.cdn.example", "127.0.0.1", "[::1]"]})),
        )
        .unwrap();
        assert_eq!(p.timeout_ms, 5000);
        assert_eq!(p.wait_until, WaitUntil::NetworkIdle);
        assert_eq!(
            p.allowed_hosts,
            Some(vec!["example.com".to_string(), "*.cdn.example".into(), "127.0.0.1".into(), "[::1]".into()])
        );
        assert_eq!(
            browser(Script::BrowserFetch, &map(json!({"allowedHosts": []}))).unwrap().allowed_hosts,
            Some(vec![])
        );
        assert_eq!(
            browser(Script::Capture, &map(json!({"fullPage": true}))).unwrap().screenshot.region,
            Region::FullPage
        );
    }

    #[test]
    fn browser_params_problems_are_named() {
        let e = browser(
            Script::Capture,
            &map(json!({"allowedHosts": ["a.example"], "timeoutMs": 999, "waitUntil": "idle", "x": 1})),
        )
        .unwrap_err();
        assert!(e.contains("params.allowedHosts: not a parameter of capture"), "{e}");
        assert!(e.contains("params.timeoutMs: must be a whole number from 1000 to 120000, got 999"), "{e}");
        assert!(e.contains("params.waitUntil: must be \"load\" or \"networkidle\", got \"idle\""), "{e}");
        assert!(e.contains("params.x: unknown parameter of capture"), "{e}");
        let e = browser(
            Script::RenderFetch,
            &map(json!({"allowedHosts": ["http://a.example/", 7, "a.example:80"], "fullPage": true})),
        )
        .unwrap_err();
        assert!(e.contains("params.allowedHosts[0]: \"http://a.example/\" is not a host name"), "{e}");
        assert!(e.contains("params.allowedHosts[1]: must be a string, got a number"), "{e}");
        assert!(e.contains("params.allowedHosts[2]: \"a.example:80\" is not a host name"), "{e}");
        assert!(e.contains("params.fullPage: not a parameter of render-fetch; only capture takes it"), "{e}");
        let e =
            browser(Script::BrowserFetch, &map(json!({"allowedHosts": "a.example", "timeoutMs": 120001}))).unwrap_err();
        assert!(e.contains("params.allowedHosts: must be an array of host names, got a string"), "{e}");
        assert!(e.contains("got 120001"), "{e}");
    }

    fn refused(script: Script, params: Value) -> String {
        browser(script, &map(params.clone())).expect_err(&format!("{params} should be refused"))
    }

    fn read(script: Script, params: Value) -> BrowserParams {
        browser(script, &map(params.clone())).unwrap_or_else(|e| panic!("{params}: {e}"))
    }

    #[test]
    fn every_option_is_read() {
        let p = read(
            Script::Capture,
            json!({
                "format": "jpeg", "quality": 35, "selector": "#box", "hideSelectors": [".cookie", "#banner"],
                "viewport": {"width": 500, "height": 300, "deviceScaleFactor": 2, "mobile": true},
                "waitFor": {"selector": "#late", "networkIdleMs": 500, "delayMs": 250},
                "javascriptEnabled": false, "userAgent": "GridTest/1.0",
                "headers": {"X-Test": "yes", "Authorization": "Bearer abc"},
                "cookies": [{"name": "consent", "value": "1", "domain": ".Example.com", "path": "/a", "secure": true,
                             "httpOnly": true, "sameSite": "Lax"}],
                "blockResourceTypes": ["image", "font"]
            }),
        );
        assert_eq!(
            p.screenshot,
            Screenshot {
                format: ImageFormat::Jpeg,
                quality: Some(35),
                region: Region::Selector("#box".into()),
                hide_selectors: vec![".cookie".into(), "#banner".into()]
            }
        );
        assert_eq!(p.viewport, Some(Viewport { width: 500, height: 300, device_scale_factor: 2.0, mobile: true }));
        assert_eq!(
            p.wait_for,
            Some(WaitFor { selector: Some("#late".into()), network_idle_ms: Some(500), delay_ms: Some(250) })
        );
        assert!(!p.javascript_enabled);
        assert_eq!(p.user_agent.as_deref(), Some("GridTest/1.0"));
        assert_eq!(p.headers.len(), 2);
        assert!(p.headers.contains(&("X-Test".to_string(), "yes".to_string())), "{:?}", p.headers);
        assert_eq!(
            p.cookies,
            [Cookie {
                name: "consent".into(),
                value: "1".into(),
                domain: Some("example.com".into()),
                path: Some("/a".into()),
                secure: true,
                http_only: true,
                same_site: Some(SameSite::Lax)
            }]
        );
        assert_eq!(p.block_resource_types, [ResourceType::Image, ResourceType::Font]);

        let clip = read(Script::Capture, json!({"clip": {"x": 0, "y": 10.5, "width": 120, "height": 80}}));
        assert_eq!(clip.screenshot.region, Region::Clip(Clip { x: 0.0, y: 10.5, width: 120.0, height: 80.0 }));
        let webp = read(Script::Capture, json!({"format": "webp"}));
        assert_eq!((webp.screenshot.format, webp.screenshot.quality), (ImageFormat::Webp, Some(DEFAULT_QUALITY)));
        assert_eq!(read(Script::Capture, json!({"format": "png"})).screenshot.quality, None);
        let v = read(Script::RenderFetch, json!({"viewport": {"width": 100, "height": 4096}}));
        assert_eq!(v.viewport, Some(Viewport { width: 100, height: 4096, device_scale_factor: 1.0, mobile: false }));
        assert_eq!(read(Script::RenderFetch, json!({"waitFor": {"delayMs": 1}})).wait_for.unwrap().delay_ms, Some(1));
        let cookie = &read(Script::BrowserFetch, json!({"cookies": [{"name": "a", "value": ""}]})).cookies[0];
        assert_eq!((cookie.domain.as_ref(), cookie.path.as_ref(), cookie.secure), (None, None, false));
    }

    /// Names are taken as the schema lists them, as every enum of the API.
    #[test]
    fn enumerated_names_are_exact() {
        let e = refused(
            Script::Capture,
            json!({"blockResourceTypes": ["Font"], "cookies": [{"name": "a", "value": "1", "sameSite": "lax"}]}),
        );
        assert!(e.contains("params.blockResourceTypes[0]: must be one of \"image\""), "{e}");
        assert!(e.contains("params.cookies[0].sameSite: must be \"Strict\", \"Lax\" or \"None\", got \"lax\""), "{e}");
    }

    #[test]
    fn each_script_takes_what_applies_to_it() {
        assert_eq!(names(Script::Fetch), ["timeoutMs"]);
        let capture = names(Script::Capture);
        let render = names(Script::RenderFetch);
        let browser_fetch = names(Script::BrowserFetch);
        for n in ["format", "quality", "clip", "selector", "hideSelectors", "fullPage"] {
            assert!(capture.contains(&n) && !render.contains(&n) && !browser_fetch.contains(&n), "{n}");
        }
        for n in ["viewport", "waitFor"] {
            assert!(capture.contains(&n) && render.contains(&n) && !browser_fetch.contains(&n), "{n}");
        }
        for n in
            ["javascriptEnabled", "userAgent", "headers", "cookies", "blockResourceTypes", "timeoutMs", "waitUntil"]
        {
            assert!(capture.contains(&n) && render.contains(&n) && browser_fetch.contains(&n), "{n}");
        }
        assert!(!capture.contains(&"allowedHosts") && render.contains(&"allowedHosts"));
        let e = refused(Script::RenderFetch, json!({"format": "jpeg", "selector": "#a"}));
        assert!(e.contains("params.format: not a parameter of render-fetch; only capture and pdf take it"), "{e}");
        assert!(e.contains("params.selector: not a parameter of render-fetch; only capture takes it"), "{e}");
        let e = refused(Script::BrowserFetch, json!({"waitFor": {"delayMs": 5}}));
        assert!(
            e.contains("params.waitFor: not a parameter of browser-fetch; only capture, render-fetch and pdf take it"),
            "{e}"
        );
        let e = fetch(&map(json!({"userAgent": "x", "headers": {}}))).unwrap_err();
        assert!(
            e.contains(
                "params.userAgent: not a parameter of fetch; only capture, browser-fetch, render-fetch and pdf take it"
            ),
            "{e}"
        );
        // check() is the validator the item runs.
        assert!(check(Script::Fetch, &map(json!({"timeoutMs": 500}))).is_ok());
        assert!(check(Script::Capture, &map(json!({"fulPage": true})))
            .unwrap_err()
            .contains("params.fulPage: unknown parameter of capture"));
    }

    #[test]
    fn screenshot_problems_are_named() {
        let e = refused(Script::Capture, json!({"format": "gif", "quality": 101}));
        assert!(e.contains("params.format: must be one of \"png\", \"jpeg\", \"webp\", got \"gif\""), "{e}");
        assert!(e.contains("params.quality: must be a whole number from 0 to 100, got 101"), "{e}");
        let e = refused(Script::Capture, json!({"quality": 50}));
        assert!(e.contains("params.quality: only jpeg and webp take a quality; format is png (the default)"), "{e}");
        let e = refused(Script::Capture, json!({"format": "png", "quality": 50}));
        assert!(e.ends_with("format is png"), "{e}");
        let e = refused(Script::Capture, json!({"fullPage": true, "clip": {"x": 0, "y": 0, "width": 5, "height": 5}}));
        assert!(e.contains("params.clip: cannot be combined with fullPage"), "{e}");
        let e = refused(Script::Capture, json!({"clip": {"x": 0, "y": 0, "width": 5, "height": 5}, "selector": "a"}));
        assert!(e.contains("params.selector: cannot be combined with clip"), "{e}");
        assert!(
            read(Script::Capture, json!({"fullPage": false, "selector": "a"})).screenshot.region
                == Region::Selector("a".into())
        );
        let e = refused(Script::Capture, json!({"clip": {"x": -1, "y": 0, "width": 0, "height": 5, "z": 1}}));
        assert!(e.contains("params.clip.z: unknown field"), "{e}");
        let e = refused(Script::Capture, json!({"clip": {"x": -1, "y": "0", "width": 0}}));
        assert!(e.contains("params.clip.x: must be a number from 0 to 16384, got -1"), "{e}");
        assert!(e.contains("params.clip.y: must be a number from 0 to 16384, got \"0\""), "{e}");
        assert!(e.contains("params.clip.width: must be a number from 1 to 16384, got 0"), "{e}");
        assert!(e.contains("params.clip.height: missing"), "{e}");
        let e = refused(Script::Capture, json!({"clip": {"x": 0, "y": 0, "width": 16384, "height": 16384}}));
        assert!(e.contains("params.clip: 16384 x 16384 at scale 1 is"), "{e}");
        let e = refused(Script::Capture, json!({"selector": "", "hideSelectors": ["ok", 3, "a\nb"]}));
        assert!(e.contains("params.selector: must be a CSS selector, got an empty string"), "{e}");
        assert!(e.contains("params.hideSelectors[1]: must be a CSS selector string, got a number"), "{e}");
        assert!(e.contains("params.hideSelectors[2]: must not contain control characters"), "{e}");
        let long = "a".repeat(MAX_SELECTOR_CHARS + 1);
        assert!(
            refused(Script::Capture, json!({"selector": long})).contains("params.selector: at most 1024 characters")
        );
        let many: Vec<String> = (0..=MAX_HIDE_SELECTORS).map(|i| format!("#b{i}")).collect();
        assert!(refused(Script::Capture, json!({"hideSelectors": many}))
            .contains("params.hideSelectors: at most 50 entries"));
    }

    #[test]
    fn viewport_and_wait_for_problems_are_named() {
        let e = refused(
            Script::RenderFetch,
            json!({"viewport": {"width": 99, "height": 4097, "deviceScaleFactor": 5, "mobile": 1}}),
        );
        assert!(e.contains("params.viewport.width: must be a whole number from 100 to 4096, got 99"), "{e}");
        assert!(e.contains("params.viewport.height: must be a whole number from 100 to 4096, got 4097"), "{e}");
        assert!(e.contains("params.viewport.deviceScaleFactor: must be a number from 0.5 to 4, got 5"), "{e}");
        assert!(e.contains("params.viewport.mobile: must be a boolean, got a number"), "{e}");
        let e =
            refused(Script::RenderFetch, json!({"viewport": {"width": 4096, "height": 4096, "deviceScaleFactor": 2}}));
        assert!(e.contains("params.viewport: 4096 x 4096 at scale 2 is 67108864 image pixels"), "{e}");
        assert!(refused(Script::RenderFetch, json!({"viewport": {"width": 500}}))
            .contains("params.viewport.height: missing"));
        assert!(refused(Script::RenderFetch, json!({"viewport": [500, 300]}))
            .contains("params.viewport: must be an object"));
        let e = refused(Script::RenderFetch, json!({"waitFor": {}}));
        assert!(e.contains("params.waitFor: give at least one of selector, networkIdleMs and delayMs"), "{e}");
        let e = refused(Script::RenderFetch, json!({"waitFor": {"selctor": "#a"}}));
        assert!(e.contains("params.waitFor.selctor: unknown field"), "{e}");
        let e =
            refused(Script::RenderFetch, json!({"waitFor": {"networkIdleMs": 99, "delayMs": 30001, "selector": 1}}));
        assert!(e.contains("params.waitFor.networkIdleMs: must be a whole number from 100 to 30000, got 99"), "{e}");
        assert!(e.contains("params.waitFor.delayMs: must be a whole number from 1 to 30000, got 30001"), "{e}");
        assert!(e.contains("params.waitFor.selector: must be a CSS selector string, got a number"), "{e}");
        let e = refused(Script::RenderFetch, json!({"timeoutMs": 5000, "waitFor": {"delayMs": 5000}}));
        assert!(e.contains("params.waitFor.delayMs: must be less than timeoutMs (5000)"), "{e}");
    }

    #[test]
    fn request_option_problems_are_named() {
        let e = refused(Script::BrowserFetch, json!({"javascriptEnabled": "no", "userAgent": "a\r\nX-Evil: 1"}));
        assert!(e.contains("params.javascriptEnabled: must be a boolean, got a string"), "{e}");
        assert!(e.contains("params.userAgent: must be printable ASCII"), "{e}");
        assert!(refused(Script::BrowserFetch, json!({"userAgent": "x".repeat(513)}))
            .contains("params.userAgent: must be 1 to 512 characters"));
        let e = refused(
            Script::BrowserFetch,
            json!({"headers": {"Host": "a", "Proxy-Authorization": "b", "Connection": "c", "transfer-encoding": "d",
                               "Cookie": "e", "User-Agent": "f", "Bad Name": "g", "X-Ok": 1, "X-Crlf": "a\r\nb"}}),
        );
        for name in ["Host", "Proxy-Authorization", "Connection", "transfer-encoding"] {
            assert!(
                e.contains(&format!("params.headers.{name}: a header the grid does not let a page set")),
                "{name}: {e}"
            );
        }
        assert!(e.contains("params.headers.Cookie: cannot be set here; use the cookies parameter"), "{e}");
        assert!(e.contains("params.headers.User-Agent: cannot be set here; use the userAgent parameter"), "{e}");
        assert!(e.contains("params.headers.Bad Name: not a header name"), "{e}");
        assert!(e.contains("params.headers.X-Ok: must be a string, got a number"), "{e}");
        assert!(e.contains("params.headers.X-Crlf: value must be printable ASCII"), "{e}");
        let e = refused(Script::BrowserFetch, json!({"headers": {"X-A": "1", "x-a": "2"}}));
        assert!(e.contains("given twice"), "{e}");
        let many: Map<String, Value> = (0..=MAX_HEADERS).map(|i| (format!("X-{i}"), json!("v"))).collect();
        assert!(refused(Script::BrowserFetch, json!({"headers": many}))
            .contains("params.headers: at most 32 headers, got 33"));
        let big: Map<String, Value> = (0..5).map(|i| (format!("X-{i}"), json!("v".repeat(4000)))).collect();
        assert!(refused(Script::BrowserFetch, json!({"headers": big}))
            .contains("params.headers: names and values together at most 16384 bytes"));

        let e = refused(
            Script::RenderFetch,
            json!({"cookies": [{"name": "a b", "value": "x;y", "domain": "*.example.com", "path": "a", "sameSite": "strictest", "secure": "yes", "extra": 1},
                               {"value": "1"}, "c=1"]}),
        );
        assert!(e.contains("params.cookies[0].extra: unknown field"), "{e}");
        assert!(e.contains("params.cookies[1].name: missing"), "{e}");
        assert!(e.contains("params.cookies[2]: must be an object"), "{e}");
        let e = refused(
            Script::RenderFetch,
            json!({"cookies": [{"name": "a b", "value": "x;y", "domain": "*.example.com", "path": "a", "sameSite": "strictest", "secure": "yes"}]}),
        );
        for field in ["name", "value", "domain", "path", "sameSite", "secure"] {
            assert!(e.contains(&format!("params.cookies[0].{field}: ")), "{field}: {e}");
        }
        let e = refused(
            Script::RenderFetch,
            json!({"cookies": [{"name": "a", "value": "1", "sameSite": "None"}, {"name": "__Secure-a", "value": "1"},
                               {"name": "__Host-a", "value": "1", "secure": true, "domain": "a.example"}]}),
        );
        assert!(e.contains("params.cookies[0].sameSite: \"None\" needs secure: true"), "{e}");
        assert!(e.contains("params.cookies[1].secure: a __Secure- cookie needs secure: true"), "{e}");
        assert!(e.contains("params.cookies[2].name: a __Host- cookie needs secure: true, no domain and path /"), "{e}");
        let ok =
            json!({"cookies": [{"name": "__Host-a", "value": "1", "secure": true, "sameSite": "None", "path": "/"}]});
        assert_eq!(read(Script::RenderFetch, ok).cookies[0].same_site, Some(SameSite::None));
        let many: Vec<Value> = (0..=MAX_COOKIES).map(|i| json!({"name": format!("c{i}"), "value": "1"})).collect();
        assert!(refused(Script::RenderFetch, json!({"cookies": many}))
            .contains("params.cookies: at most 50 cookies, got 51"));

        let e = refused(Script::Capture, json!({"blockResourceTypes": ["image", "document", "image", 3]}));
        assert!(e.contains("params.blockResourceTypes[1]: must be one of \"image\""), "{e}");
        assert!(e.contains("got \"document\""), "{e}");
        assert!(e.contains("params.blockResourceTypes[2]: \"image\" is listed twice"), "{e}");
        assert!(e.contains("params.blockResourceTypes[3]: must be one of"), "{e}");
        assert!(refused(Script::Capture, json!({"blockResourceTypes": "image"}))
            .contains("params.blockResourceTypes: must be an array"));
    }

    #[test]
    fn items_are_checked_against_their_url() {
        let params = map(json!({"cookies": [{"name": "a", "value": "1", "domain": "example.com"}]}));
        assert!(check_item(Script::Capture, &params, "https://WWW.Example.com/x").is_ok());
        let e = check_item(Script::Capture, &params, "https://example.org/").unwrap_err();
        assert!(e.starts_with("params.cookies[0].domain"), "{e}");
        assert!(check_item(Script::Capture, &params, "not a url").is_ok());
        assert!(check_item(Script::Fetch, &map(json!({"timeoutMs": 1})), "https://a.example/").is_err());
    }

    #[test]
    fn cookie_domains_must_cover_the_item_host() {
        let p = read(
            Script::RenderFetch,
            json!({"cookies": [{"name": "a", "value": "1", "domain": "example.com"}, {"name": "b", "value": "1"},
                               {"name": "c", "value": "1", "domain": "other.example"}]}),
        );
        let e = p.check_for_host("www.example.com").unwrap_err();
        assert!(!e.contains("cookies[0]") && !e.contains("cookies[1]"), "{e}");
        assert!(
            e.contains("params.cookies[2].domain: \"other.example\" is neither the item URL's host www.example.com"),
            "{e}"
        );
        assert!(domain_matches("example.com", "example.com"));
        assert!(domain_matches("example.com", "a.b.example.com"));
        assert!(!domain_matches("example.com", "badexample.com"));
        assert!(!domain_matches("0.1", "127.0.0.1"), "no parent domains of an IP address");
        assert!(read(Script::RenderFetch, json!({"cookies": [{"name": "a", "value": "1"}]}))
            .check_for_host("127.0.0.1")
            .is_ok());
    }
}
