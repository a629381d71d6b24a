//! Turning command-line input into request fields: URL lists, `--param`
//! pairs and `--params` files, durations. Nothing here judges URLs or
//! params (the server does; `batch.rs` asks its validator first).

use std::io::{self, Read};
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use grid_core::wire::proxy::NewProxy;
use serde_json::{Map, Value};

/// Whether an argument is a URL rather than a file name.
pub fn looks_like_url(arg: &str) -> bool {
    let lower = arg.get(..8).unwrap_or(arg).to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

/// The URLs of `args` in order: an http(s) URL is itself; `-` is stdin; any
/// other argument is a file with one URL per line.
pub fn collect_urls(args: &[String]) -> anyhow::Result<Vec<String>> {
    let mut urls = Vec::new();
    for arg in args {
        if looks_like_url(arg) {
            urls.push(arg.clone());
        } else if arg == "-" {
            let mut text = String::new();
            io::stdin().read_to_string(&mut text).context("cannot read URLs from stdin")?;
            urls.extend(urls_in(&text));
        } else {
            let text = std::fs::read_to_string(arg).with_context(|| format!("cannot read {arg}"))?;
            urls.extend(urls_in(&text));
        }
    }
    Ok(urls)
}

/// The lines of a URL list, trimmed, without blank lines and `#` comments.
pub fn urls_in(text: &str) -> Vec<String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    text.lines().map(str::trim).filter(|line| !line.is_empty() && !line.starts_with('#')).map(str::to_string).collect()
}

/// `key=value`: the value is taken as JSON when it parses as JSON (`3`,
/// `true`, `["a.example"]`, `"quoted"`), otherwise as a plain string.
pub fn parse_param(arg: &str) -> Result<(String, Value), String> {
    let (key, value) = arg.split_once('=').ok_or_else(|| format!("{arg:?} is not key=value"))?;
    if key.is_empty() {
        return Err(format!("{arg:?} has an empty key"));
    }
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
    Ok((key.to_string(), value))
}

/// The `params` object: the `--params` file's object, then the `--param`
/// pairs on top (a later key replaces an earlier one); `None` when neither
/// was given.
pub fn params_object(file: Option<&Path>, pairs: Vec<(String, Value)>) -> anyhow::Result<Option<Map<String, Value>>> {
    let mut params = match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(map)) => Some(map),
                Ok(_) => anyhow::bail!("{}: the params file must hold one JSON object", path.display()),
                Err(e) => anyhow::bail!("{}: not JSON: {e}", path.display()),
            }
        }
        None => None,
    };
    if !pairs.is_empty() {
        params.get_or_insert_with(Map::new).extend(pairs);
    }
    Ok(params)
}

/// Seconds, fractions allowed: `2`, `0.5`.
pub fn parse_seconds(arg: &str) -> Result<Duration, String> {
    let secs: f64 = arg.parse().map_err(|_| format!("{arg:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{arg:?} is not a non-negative number of seconds"))
}

/// `--proxy URL`, kept out of `Debug` (it may hold a password).
#[derive(Clone)]
pub struct ProxyArg(pub String);

impl std::fmt::Debug for ProxyArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProxyArg(<redacted>)")
    }
}

impl std::str::FromStr for ProxyArg {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(ProxyArg(s.to_string()))
    }
}

/// Where `--proxy`'s credentials come from when its URL holds none.
pub const PROXY_USERNAME_ENV: &str = "GRID_PROXY_USERNAME";
pub const PROXY_PASSWORD_ENV: &str = "GRID_PROXY_PASSWORD";

/// `--proxy URL` as a request's `proxy`: `scheme://[user:password@]host:port`,
/// the credentials from the URL, else from `GRID_PROXY_USERNAME` and
/// `GRID_PROXY_PASSWORD` (`env` reads them). The error never repeats the URL.
pub fn proxy(arg: &ProxyArg, env: impl Fn(&str) -> Option<String>) -> Result<NewProxy, String> {
    let parsed = grid_core::validate::proxy::parse_url(&arg.0).map_err(|why| format!("--proxy: {why}"))?;
    let server = parsed.server();
    let (username, password) = match parsed.credentials {
        Some(c) => (Some(c.username), Some(c.password)),
        None => (env(PROXY_USERNAME_ENV), env(PROXY_PASSWORD_ENV)),
    };
    Ok(NewProxy { server, username, password })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn url_or_file() {
        assert!(looks_like_url("https://example.com/"));
        assert!(looks_like_url("HTTP://EXAMPLE.COM"));
        assert!(!looks_like_url("urls.txt"));
        assert!(!looks_like_url("-"));
        assert!(!looks_like_url("ftp://x"));
        assert!(!looks_like_url("ü"));
    }

    #[test]
    fn url_lists_skip_blanks_and_comments() {
        let text = "\u{feff}https://a.example/\r\n\n  # a comment\n   https://b.example/#frag  \n#x\n";
        assert_eq!(urls_in(text), vec!["https://a.example/", "https://b.example/#frag"]);
    }

    #[test]
    fn files_and_urls_keep_their_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("urls.txt");
        std::fs::write(&file, "https://b.example/\nhttps://c.example/\n").unwrap();
        let args = vec!["https://a.example/".to_string(), file.display().to_string(), "https://d.example/".into()];
        assert_eq!(
            collect_urls(&args).unwrap(),
            vec!["https://a.example/", "https://b.example/", "https://c.example/", "https://d.example/"]
        );
        let missing = collect_urls(&[dir.path().join("nope").display().to_string()]).unwrap_err();
        assert!(format!("{missing:#}").starts_with("cannot read "));
    }

    #[test]
    fn params_are_json_or_text() {
        assert_eq!(parse_param("allowedHosts=[\"a.example\"]").unwrap(), ("allowedHosts".into(), json!(["a.example"])));
        assert_eq!(parse_param("n=3").unwrap(), ("n".into(), json!(3)));
        assert_eq!(parse_param("s=\"3\"").unwrap(), ("s".into(), json!("3")));
        assert_eq!(parse_param("s=hello world").unwrap(), ("s".into(), json!("hello world")));
        assert_eq!(parse_param("s=a=b").unwrap(), ("s".into(), json!("a=b")));
        assert_eq!(parse_param("s=").unwrap(), ("s".into(), json!("")));
        assert!(parse_param("novalue").is_err());
        assert!(parse_param("=x").is_err());
        let params = params_object(None, vec![("a".into(), json!(1)), ("a".into(), json!(2))]).unwrap().unwrap();
        assert_eq!(Value::Object(params), json!({"a": 2}));
        assert_eq!(params_object(None, Vec::new()).unwrap(), None);
    }

    #[test]
    fn params_file_then_pairs() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("params.json");
        std::fs::write(&file, r#"{"format": "jpeg", "quality": 90, "viewport": {"width": 500, "height": 300}}"#)
            .unwrap();
        let params = params_object(Some(&file), vec![("quality".into(), json!(40))]).unwrap().unwrap();
        assert_eq!(
            Value::Object(params),
            json!({"format": "jpeg", "quality": 40, "viewport": {"width": 500, "height": 300}})
        );
        std::fs::write(&file, "[1]").unwrap();
        let e = params_object(Some(&file), vec![]).unwrap_err().to_string();
        assert!(e.ends_with("the params file must hold one JSON object"), "{e}");
        std::fs::write(&file, "{format: jpeg}").unwrap();
        assert!(params_object(Some(&file), vec![]).unwrap_err().to_string().contains("not JSON"));
        assert!(params_object(Some(&dir.path().join("nope")), vec![]).is_err());
    }

    #[test]
    fn proxy_credentials_come_from_the_url_else_the_environment() {
        let none = |_: &str| None;
        let p = proxy(&ProxyArg("socks5://u%40x:p%3Aw@10.0.0.1:1080".into()), none).unwrap();
        assert_eq!(
            (p.server.as_str(), p.username.as_deref(), p.password.as_deref()),
            ("socks5://10.0.0.1:1080", Some("u@x"), Some("p:w"))
        );
        let env = |k: &str| Some(if k == PROXY_USERNAME_ENV { "eu" } else { "ep" }.to_string());
        let p = proxy(&ProxyArg("http://h:3128".into()), env).unwrap();
        assert_eq!((p.username.as_deref(), p.password.as_deref()), (Some("eu"), Some("ep")));
        let e = proxy(&ProxyArg("ftp://u:hunter2@h".into()), none).unwrap_err();
        assert!(e.starts_with("--proxy: ") && !e.contains("hunter2"), "{e}");
        assert!(!format!("{:?}", ProxyArg("http://u:hunter2@h".into())).contains("hunter2"));
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("0.5").unwrap(), Duration::from_millis(500));
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("soon").is_err());
    }
}
