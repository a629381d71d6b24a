//! Which of a context's cookies a request sends, by the browser's rules
//! (RFC 6265 section 5.4, as Chromium applies them to a top-level
//! navigation): the host matches the cookie's domain (exactly for a
//! host-only cookie, the domain or a subdomain of it for a domain cookie,
//! written with a leading dot), the path path-matches, a Secure cookie
//! goes only over https, an expired one not at all; longer paths first.
//! A signed-in capture's `fetch` item asks this for every URL it requests,
//! each redirect's included (docs/captures.md, "Signed-in captures").
//!
//! The cookies are as DevTools' `Storage.getCookies` gives them: `name`,
//! `value`, `domain`, `path`, `expires` (seconds since the epoch, -1 for a
//! session cookie), `secure`, `session`.

use serde_json::Value;
use url::Url;

/// Whether `path` (a request's) path-matches `cookie_path`.
fn path_matches(path: &str, cookie_path: &str) -> bool {
    path == cookie_path
        || (path.starts_with(cookie_path) && (cookie_path.ends_with('/') || path[cookie_path.len()..].starts_with('/')))
}

/// Whether `host` domain-matches the cookie's `domain`.
fn domain_matches(host: &str, domain: &str) -> bool {
    let host = host.to_ascii_lowercase();
    let domain = domain.to_ascii_lowercase();
    match domain.strip_prefix('.') {
        Some(d) => host == d || host.ends_with(&format!(".{d}")),
        None => host == domain,
    }
}

/// The `Cookie` header `url` is sent with at `now_secs` (seconds since the
/// epoch), or `None` when no cookie applies.
pub fn header_for(cookies: &[Value], url: &Url, now_secs: f64) -> Option<String> {
    let host = url.host_str()?.trim_matches(['[', ']']);
    let path = if url.path().is_empty() { "/" } else { url.path() };
    let https = url.scheme() == "https";
    let mut sent: Vec<(&str, &str, usize)> = cookies
        .iter()
        .filter_map(|c| {
            let (name, value) = (c["name"].as_str()?, c["value"].as_str()?);
            let cookie_path = c["path"].as_str().unwrap_or("/");
            let secure = c["secure"].as_bool().unwrap_or(false);
            let session = c["session"].as_bool().unwrap_or(false);
            let expires = c["expires"].as_f64().unwrap_or(-1.0);
            let live = session || expires < 0.0 || expires > now_secs;
            (domain_matches(host, c["domain"].as_str()?)
                && path_matches(path, cookie_path)
                && (https || !secure)
                && live)
                .then_some((name, value, cookie_path.len()))
        })
        .collect();
    if sent.is_empty() {
        return None;
    }
    // Longer paths first; the sort is stable, so otherwise as stored.
    sent.sort_by_key(|c| std::cmp::Reverse(c.2));
    Some(sent.iter().map(|(n, v, _)| format!("{n}={v}")).collect::<Vec<_>>().join("; "))
}

/// The fields `Storage.setCookies` takes of a cookie as
/// `Storage.getCookies` gave it; a session cookie gets no expiry.
pub fn set_param(c: &Value) -> Value {
    let mut p = serde_json::Map::new();
    for k in [
        "name",
        "value",
        "domain",
        "path",
        "secure",
        "httpOnly",
        "sameSite",
        "priority",
        "sourceScheme",
        "sourcePort",
        "partitionKey",
    ] {
        if let Some(v) = c.get(k) {
            p.insert(k.into(), v.clone());
        }
    }
    if c["session"] != Value::Bool(true) {
        if let Some(v) = c.get("expires") {
            p.insert("expires".into(), v.clone());
        }
    }
    Value::Object(p)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn the_browsers_rules_pick_what_a_request_sends() {
        let cookies = vec![
            json!({"name": "host", "value": "1", "domain": "a.example", "path": "/", "expires": -1, "secure": false, "session": true}),
            json!({"name": "dom", "value": "2", "domain": ".a.example", "path": "/", "expires": 4e9, "secure": false, "session": false}),
            json!({"name": "deep", "value": "3", "domain": "a.example", "path": "/app", "expires": -1, "secure": false, "session": true}),
            json!({"name": "sec", "value": "4", "domain": "a.example", "path": "/", "expires": -1, "secure": true, "session": true}),
            json!({"name": "old", "value": "5", "domain": "a.example", "path": "/", "expires": 10.0, "secure": false, "session": false}),
        ];
        let now = 1_000.0;
        assert_eq!(header_for(&cookies, &url("http://a.example/"), now).as_deref(), Some("host=1; dom=2"));
        assert_eq!(
            header_for(&cookies, &url("https://a.example/app/x"), now).as_deref(),
            Some("deep=3; host=1; dom=2; sec=4")
        );
        // A path that only starts like the cookie's is not under it.
        assert_eq!(header_for(&cookies, &url("http://a.example/apple"), now).as_deref(), Some("host=1; dom=2"));
        // A subdomain gets the domain cookie only; another site nothing.
        assert_eq!(header_for(&cookies, &url("http://b.a.example/"), now).as_deref(), Some("dom=2"));
        assert_eq!(header_for(&cookies, &url("http://example.com/"), now), None);
        assert_eq!(header_for(&cookies, &url("http://xa.example/"), now), None);
        // Expired at 10 s: sent before, not after.
        assert!(header_for(&cookies, &url("http://a.example/"), 5.0).unwrap().contains("old=5"));
    }

    #[test]
    fn a_cookie_is_set_as_read_and_a_session_cookie_gets_no_expiry() {
        let session =
            json!({"name": "a", "value": "b", "domain": "x", "path": "/", "expires": -1, "session": true, "size": 2});
        assert_eq!(set_param(&session), json!({"name": "a", "value": "b", "domain": "x", "path": "/"}));
        let kept = json!({"name": "a", "value": "b", "expires": 5.0, "session": false});
        assert_eq!(set_param(&kept), json!({"name": "a", "value": "b", "expires": 5.0}));
    }

    #[test]
    fn path_match_follows_rfc_6265() {
        assert!(path_matches("/", "/"));
        assert!(path_matches("/a/b", "/a"));
        assert!(path_matches("/a/b", "/a/"));
        assert!(!path_matches("/ab", "/a"));
        assert!(!path_matches("/", "/a"));
    }
}
