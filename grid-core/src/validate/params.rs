//! Script parameters, checked when each item runs (not at submission): a bad
//! parameter fails its item with a published failure record.

use serde_json::{Map, Value};

use super::{json_type, whole_number};
use crate::catalog::Script;

/// The parameters each script takes: a member not listed for the item's
/// script is refused before its value is read, so these lists are the whole
/// vocabulary (`shapes::script_params` publishes one schema per script from
/// them, and `grid-core/tests/shapes.rs` holds the two together).
pub fn fields(script: Script) -> &'static [&'static str] {
    match script {
        Script::Fetch => &["timeoutMs"],
        Script::Capture => &["timeoutMs", "waitUntil", "fullPage"],
        Script::RenderFetch | Script::BrowserFetch => &["timeoutMs", "waitUntil", "allowedHosts"],
    }
}

/// Why a member is not a parameter of `script`: named for a parameter of
/// another script, so a misplaced one reads differently from a typo.
fn not_a_parameter(script: Script, field: &str) -> String {
    let takers: Vec<&str> =
        Script::ALL.into_iter().filter(|s| fields(*s).contains(&field)).map(Script::as_str).collect();
    match takers.as_slice() {
        [] => format!("params.{field}: unknown parameter of {}", script.as_str()),
        [one] => format!("params.{field}: not a parameter of {}; only {one} takes it", script.as_str()),
        [init @ .., last] => {
            format!(
                "params.{field}: not a parameter of {}; only {} and {last} take it",
                script.as_str(),
                init.join(", ")
            )
        }
    }
}

/// A whole number within `[min, max]` (`5000.0` is 5000, as JSON Schema's
/// `integer` reads it).
fn whole_in(v: &Value, min: u64, max: u64) -> Option<u64> {
    whole_number(v).and_then(|n| u64::try_from(n).ok()).filter(|n| (min..=max).contains(n))
}

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
        if !fields(Script::Fetch).contains(&k.as_str()) {
            problems.push(not_a_parameter(Script::Fetch, k));
            continue;
        }
        match k.as_str() {
            "timeoutMs" => match whole_in(v, MIN_TIMEOUT_MS, MAX_TIMEOUT_MS) {
                Some(n) => timeout_ms = n,
                None => problems.push(format!(
                    "params.timeoutMs: must be a whole number from {MIN_TIMEOUT_MS} to {MAX_TIMEOUT_MS}, got {}",
                    if v.is_number() { v.to_string() } else { json_type(v).to_string() }
                )),
            },
            other => problems.push(not_a_parameter(Script::Fetch, other)),
        }
    }
    if problems.is_empty() {
        Ok(FetchParams { timeout_ms })
    } else {
        Err(problems.join("; "))
    }
}

/// Budget bounds of the browser scripts' `timeoutMs` (navigation until the
/// wait condition is met). A browser needs longer than a bare GET.
pub const MIN_BROWSER_TIMEOUT_MS: u64 = 1_000;
pub const MAX_BROWSER_TIMEOUT_MS: u64 = 120_000;
/// Most entries `allowedHosts` may list.
pub const MAX_ALLOWED_HOSTS: usize = 100;

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

/// Parameters of the browser scripts (`capture`, `render-fetch`,
/// `browser-fetch`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowserParams {
    /// From navigation start until the wait condition is met.
    pub timeout_ms: u64,
    pub wait_until: WaitUntil,
    /// Hosts the page may reach besides the item URL's own host; `None`
    /// when not given (no host restriction). Lower case; an entry
    /// `*.example.com` matches every subdomain of example.com.
    pub allowed_hosts: Option<Vec<String>>,
    /// `capture` only: screenshot the whole page instead of the viewport.
    pub full_page: bool,
}

pub fn browser(script: Script, params: &Map<String, Value>) -> Result<BrowserParams, String> {
    let mut problems = vec![];
    let mut out = BrowserParams {
        timeout_ms: DEFAULT_TIMEOUT_MS,
        wait_until: WaitUntil::Load,
        allowed_hosts: None,
        full_page: false,
    };
    for (k, v) in params {
        if !fields(script).contains(&k.as_str()) {
            problems.push(not_a_parameter(script, k));
            continue;
        }
        match k.as_str() {
            "timeoutMs" => match whole_in(v, MIN_BROWSER_TIMEOUT_MS, MAX_BROWSER_TIMEOUT_MS) {
                Some(n) => out.timeout_ms = n,
                None => problems.push(format!(
                    "params.timeoutMs: must be a whole number from {MIN_BROWSER_TIMEOUT_MS} to {MAX_BROWSER_TIMEOUT_MS}, got {}",
                    if v.is_number() { v.to_string() } else { json_type(v).to_string() }
                )),
            },
            "waitUntil" => match v.as_str() {
                Some("load") => out.wait_until = WaitUntil::Load,
                Some("networkidle") => out.wait_until = WaitUntil::NetworkIdle,
                Some(other) => {
                    problems.push(format!("params.waitUntil: must be \"load\" or \"networkidle\", got \"{other}\""))
                }
                None => problems.push(format!(
                    "params.waitUntil: must be \"load\" or \"networkidle\", got {}",
                    json_type(v)
                )),
            },
            "allowedHosts" => match allowed_hosts(v) {
                Ok(hosts) => out.allowed_hosts = Some(hosts),
                Err(mut e) => problems.append(&mut e),
            },
            "fullPage" => match v.as_bool() {
                Some(b) => out.full_page = b,
                None => problems.push(format!("params.fullPage: must be a boolean, got {}", json_type(v))),
            },
            other => problems.push(not_a_parameter(script, other)),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems.join("; "))
    }
}

/// What `allowedHosts` entries look like, for a schema: a DNS name (or an
/// IPv4 address), optionally after `*.`, or a bracketed IPv6 address. The
/// DNS part is exactly what `is_host_pattern` accepts apart from the
/// 253-character limit; the bracketed part admits more than an IPv6 address,
/// which `is_host_pattern` then checks.
pub const HOST_NAME_PATTERN: &str =
    "^(\\*\\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$";
pub const HOST_IPV6_PATTERN: &str = "^\\[[0-9A-Fa-f:.]+\\]$";
/// Longest `allowedHosts` entry.
pub const MAX_HOST_CHARS: usize = 253;

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
    fn browser_defaults() {
        for script in [Script::Capture, Script::RenderFetch, Script::BrowserFetch] {
            assert_eq!(
                browser(script, &Map::new()),
                Ok(BrowserParams {
                    timeout_ms: 30_000,
                    wait_until: WaitUntil::Load,
                    allowed_hosts: None,
                    full_page: false
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
        assert!(browser(Script::Capture, &map(json!({"fullPage": true}))).unwrap().full_page);
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
}
