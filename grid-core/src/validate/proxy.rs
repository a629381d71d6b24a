//! `proxy` of a lease and of a batch (`wire::proxy`), and the URL form an
//! operator's `--upstream-proxy` and the CLI's `--proxy` take
//! (`scheme://user:password@host:port`). Whether the proxy's address is one
//! the grid may reach is the server's check (it resolves the name).

use serde_json::{Map, Value};

use super::{json_type, Problems};
use crate::wire::proxy::{ProxyCredentials, ProxyScheme, UpstreamProxy};

/// The members of `proxy`.
pub const FIELDS: &[&str] = &["server", "username", "password"];
/// RFC 1929 carries each in one length byte; HTTP proxies take the same.
pub const MAX_CREDENTIAL_BYTES: usize = 255;
pub const MAX_SERVER_CHARS: usize = 2048;
/// `server`: the schemes taken, then a host and an optional port.
pub const SERVER_PATTERN: &str =
    "^(http|https|socks5)://([A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)*\\.?|\\[[0-9A-Fa-f:.]+\\])(:[0-9]{1,5})?/?$";

/// `proxy` at `field` (`proxy`): every problem named `proxy.<member>`.
pub fn validate(p: &mut Problems, field: &str, v: &Value) -> Option<UpstreamProxy> {
    let Some(obj) = v.as_object() else {
        p.push(field, format!("must be an object {{server, username, password}}, got {}", json_type(v)));
        return None;
    };
    let before = p.len();
    for k in obj.keys().filter(|k| !FIELDS.contains(&k.as_str())) {
        p.push(&format!("{field}.{k}"), "unknown field");
    }
    let server = match obj.get("server") {
        None => {
            p.push(
                &format!("{field}.server"),
                "is required: http://host:port, https://host:port or socks5://host:port",
            );
            None
        }
        Some(Value::String(s)) => match parse_server(s, false) {
            Ok(proxy) => Some(proxy),
            Err(why) => {
                p.push(&format!("{field}.server"), why);
                None
            }
        },
        Some(v) => {
            p.push(&format!("{field}.server"), format!("must be a string, got {}", json_type(v)));
            None
        }
    };
    let username = credential(p, field, obj, "username");
    let password = credential(p, field, obj, "password");
    if password.is_some() && username.is_none() && !obj.contains_key("username") {
        p.push(&format!("{field}.password"), format!("needs {field}.username"));
    }
    if p.len() > before {
        return None;
    }
    let mut proxy = server?;
    proxy.credentials = username.map(|username| ProxyCredentials { username, password: password.unwrap_or_default() });
    Some(proxy)
}

fn credential(p: &mut Problems, field: &str, obj: &Map<String, Value>, member: &str) -> Option<String> {
    let name = format!("{field}.{member}");
    match obj.get(member)? {
        Value::String(s) if s.len() > MAX_CREDENTIAL_BYTES => {
            p.push(&name, format!("must be at most {MAX_CREDENTIAL_BYTES} bytes, got {}", s.len()));
            None
        }
        Value::String(s) if s.chars().any(|c| c.is_ascii_control()) => {
            p.push(&name, "must not contain control characters");
            None
        }
        Value::String(s) if member == "username" && s.is_empty() => {
            p.push(&name, "must not be empty (leave it out for a proxy without credentials)");
            None
        }
        Value::String(s) => Some(s.clone()),
        v => {
            p.push(&name, format!("must be a string, got {}", json_type(v)));
            None
        }
    }
}

/// An operator's `--upstream-proxy` or the CLI's `--proxy`:
/// `scheme://[user[:password]@]host[:port]`, the credentials
/// percent-decoded. The error never repeats the URL (it may hold a password).
pub fn parse_url(s: &str) -> Result<UpstreamProxy, String> {
    parse_server(s, true)
}

/// `server`; credentials in it only when `credentials_allowed`.
fn parse_server(s: &str, credentials_allowed: bool) -> Result<UpstreamProxy, String> {
    const SHAPE: &str = "http://host:port, https://host:port or socks5://host:port";
    if s.len() > MAX_SERVER_CHARS {
        return Err(format!("must be at most {MAX_SERVER_CHARS} characters"));
    }
    let Some((scheme, rest)) = s.split_once("://") else {
        return Err(format!("must be a proxy URL: {SHAPE}"));
    };
    let Some(scheme) = ProxyScheme::parse(scheme) else {
        return Err(format!("scheme must be http, https or socks5 ({SHAPE})"));
    };
    // The authority alone (SERVER_PATTERN), before the URL parser forgives.
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('@') && !credentials_allowed {
        return Err("must not hold credentials: give them as username and password".into());
    }
    if authority.is_empty() || authority.contains(['/', '?', '#']) || authority.chars().any(char::is_whitespace) {
        return Err(format!("must be a scheme, a host and an optional port, with no path, query or fragment: {SHAPE}"));
    }
    let url = url::Url::parse(s).map_err(|e| format!("is not a URL ({e}): {SHAPE}"))?;
    if url.path() != "/" && !url.path().is_empty() || url.query().is_some() || url.fragment().is_some() {
        return Err(format!("must have no path, query or fragment: {SHAPE}"));
    }
    let Some(host) = url.host_str().filter(|h| !h.is_empty()) else {
        return Err(format!("must name a host: {SHAPE}"));
    };
    let has_credentials = !url.username().is_empty() || url.password().is_some();
    if has_credentials && !credentials_allowed {
        return Err("must not hold credentials: give them as username and password".into());
    }
    let credentials = if has_credentials {
        let decode =
            |s: &str| percent_decode(s).ok_or_else(|| "has credentials that are not percent-encoded UTF-8".to_string());
        let username = decode(url.username())?;
        if username.is_empty() {
            return Err("has a password but no user name".into());
        }
        Some(ProxyCredentials { username, password: decode(url.password().unwrap_or(""))? })
    } else {
        None
    };
    // `url` knows http's and https's default ports only.
    let port = url.port().unwrap_or(scheme.default_port());
    Ok(UpstreamProxy { scheme, host: host.trim_matches(['[', ']']).to_ascii_lowercase(), port, credentials })
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(v: Value) -> Result<UpstreamProxy, Vec<String>> {
        let mut p = Problems::default();
        match validate(&mut p, "proxy", &v) {
            Some(proxy) if p.is_empty() => Ok(proxy),
            _ => Err(p.into_vec()),
        }
    }

    #[test]
    fn each_scheme_is_taken_with_its_default_port() {
        for (server, scheme, port) in [
            ("http://proxy.example:3128", ProxyScheme::Http, 3128),
            ("http://Proxy.Example", ProxyScheme::Http, 80),
            ("https://proxy.example", ProxyScheme::Https, 443),
            ("socks5://10.1.2.3", ProxyScheme::Socks5, 1080),
            ("socks5://[::1]:9050/", ProxyScheme::Socks5, 9050),
        ] {
            let p = check(json!({"server": server})).unwrap();
            assert_eq!((p.scheme, p.port, p.credentials), (scheme, port, None), "{server}");
        }
        let p = check(json!({"server": "socks5://[::1]:9050"})).unwrap();
        assert_eq!(
            (p.host.as_str(), p.host_port(), p.server()),
            ("::1", "[::1]:9050".into(), "socks5://[::1]:9050".into())
        );
        assert_eq!(check(json!({"server": "http://Proxy.Example"})).unwrap().host, "proxy.example");
    }

    #[test]
    fn credentials_are_kept_apart_and_never_serialized() {
        let p = check(json!({"server": "http://p:1", "username": "u", "password": "s3cret"})).unwrap();
        assert_eq!(p.credentials, Some(ProxyCredentials { username: "u".into(), password: "s3cret".into() }));
        let stored = serde_json::to_string(&p).unwrap();
        assert_eq!(stored, r#"{"scheme":"http","host":"p","port":1}"#);
        assert!(!format!("{p:?}").contains("s3cret"));
        let creds = p.credentials.unwrap();
        assert_eq!(ProxyCredentials::from_sealable(&creds.to_sealable()), Some(creds));
        // A user name alone: an empty password.
        let p = check(json!({"server": "socks5://p:1", "username": "u"})).unwrap();
        assert_eq!(p.credentials.unwrap().password, "");
    }

    #[test]
    fn every_bad_member_is_named() {
        let err = |v: Value| check(v).unwrap_err();
        assert_eq!(err(json!("http://p:1")), ["proxy: must be an object {server, username, password}, got a string"]);
        assert_eq!(
            err(json!({"username": "u"})),
            ["proxy.server: is required: http://host:port, https://host:port or socks5://host:port"]
        );
        assert_eq!(
            err(json!({"server": "ftp://p:1"})),
            ["proxy.server: scheme must be http, https or socks5 (http://host:port, https://host:port or socks5://host:port)"]
        );
        assert_eq!(
            err(json!({"server": "http://u:pw@p:1"})),
            ["proxy.server: must not hold credentials: give them as username and password"]
        );
        assert!(err(json!({"server": "http://p:1/path"}))[0].starts_with("proxy.server: must be a scheme, a host"));
        assert!(err(json!({"server": "p:1"}))[0].starts_with("proxy.server: "));
        assert_eq!(err(json!({"server": 5})), ["proxy.server: must be a string, got a number"]);
        assert_eq!(err(json!({"server": "http://p:1", "password": "x"})), ["proxy.password: needs proxy.username"]);
        assert_eq!(
            err(json!({"server": "http://p:1", "username": "u", "password": "x".repeat(256)})),
            ["proxy.password: must be at most 255 bytes, got 256"]
        );
        assert_eq!(err(json!({"server": "http://p:1", "username": ""}))[0].split(':').next(), Some("proxy.username"));
        assert_eq!(err(json!({"server": "http://p:1", "user": "u"})), ["proxy.user: unknown field"]);
    }

    #[test]
    fn an_operator_url_may_hold_percent_encoded_credentials_and_its_error_never_repeats_it() {
        let p = parse_url("socks5://us%40er:p%3Ass@127.0.0.1:1081").unwrap();
        assert_eq!(p.credentials, Some(ProxyCredentials { username: "us@er".into(), password: "p:ss".into() }));
        assert_eq!(p.server(), "socks5://127.0.0.1:1081");
        let e = parse_url("gopher://user:hunter2@h:1").unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
        assert!(parse_url("http://:pw@h:1").is_err());
    }
}
