//! The `fetch` script: one HTTP GET with the grid's own client; publishes
//! the body as received and a meta file describing the exchange.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use grid_core::catalog::ArtifactKind;
use grid_core::item::Failure;
use grid_core::validate::params;
use http::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, LOCATION, USER_AGENT as USER_AGENT_HEADER};
use http::StatusCode;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::Serialize;
use url::Url;

use super::files::FileContent;
use super::guard::{self, Resolver};
use crate::ids::{now, sha256_hex};
use crate::store::items::ItemRow;
use crate::upstream::{self, proxied_client, Upstream};

/// Bodies larger than this fail the item: the grid is not a bulk downloader.
pub const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;
const MAX_REDIRECTS: usize = 10;
pub const USER_AGENT: &str = concat!("grid-fetch/", env!("CARGO_PKG_VERSION"));

type Connector = hyper_rustls::HttpsConnector<HttpConnector<Resolver>>;

/// The fetch script's HTTP client: hyper-util's pooled client over rustls,
/// with the redirects followed here. reqwest wraps the same client in
/// layers of its own (a redirect policy that parses every request's URL
/// again, a retry layer, a timeout, a response URL parsed once more), paid
/// on every exchange at tens of thousands of items a second (measured in
/// docs/performance.md, "What makes a fetch item fast").
pub struct Fetcher {
    client: Client<Connector, Empty<Bytes>>,
    allow_private: bool,
}

impl Fetcher {
    /// Fails only if rustls cannot build a client configuration (its
    /// crypto provider); the server then does not start.
    ///
    /// Connections are pooled per host (by scheme, host and port), and as
    /// many are kept open to one host as workers may fetch from it at once
    /// (`max_workers`): at internet latency the pool's concurrency is the
    /// rate, and a connection set up again per item costs a round trip or
    /// two (and a TLS handshake). No proxy from the environment
    /// (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY) is ever used: through a proxy the
    /// target's name would be resolved by the proxy, never by the guard's
    /// resolver, and tenants' requests would reach wherever the operator's
    /// proxy can.
    pub fn new(allow_private: bool, max_workers: usize) -> Result<Fetcher, rustls::Error> {
        let mut http = HttpConnector::new_with_resolver(Resolver { public_only: !allow_private });
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(10)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_max_idle_per_host(max_workers.max(1))
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Ok(Fetcher { client, allow_private })
    }

    /// `cookies`: a signed-in capture's context's (`grid_core::cookies`
    /// picks what each request sends); empty for the others.
    /// Runs the item's exchange, through `upstream` when it has one.
    pub async fn run(
        &self,
        row: &ItemRow,
        upstream: Option<&Upstream>,
        cookies: &[serde_json::Value],
    ) -> Result<Vec<FileContent>, Failure> {
        let p = params::fetch(&row.params).map_err(Failure::Terminal)?;
        let url = Url::parse(&row.url).map_err(|e| Failure::Terminal(format!("url: {e}")))?;
        let started = Instant::now();
        let fetched_at = now();
        let x = match tokio::time::timeout(Duration::from_millis(p.timeout_ms), self.exchange(url, upstream, cookies))
            .await
        {
            Err(_) => return Err(Failure::Transient(format!("timed out after {} ms", p.timeout_ms))),
            Ok(r) => r?,
        };
        if x.status >= 500 || x.status == 429 {
            return Err(Failure::Transient(format!("target answered HTTP {}", x.status)));
        }
        let meta = Meta {
            attempt: row.item.attempts_made + 1,
            byte_length: x.body.len(),
            content_type: &x.content_type,
            duration_ms: started.elapsed().as_millis() as u64,
            fetched_at: fetched_at.to_iso(),
            final_url: x.final_url.as_str(),
            // One value per name, the last one received (as a JSON object).
            headers: x.headers.iter().map(|(k, v)| (k.as_str(), String::from_utf8_lossy(v.as_bytes()))).collect(),
            outcome: "success",
            profile_id: row.profile.as_str(),
            script: row.script.as_str(),
            sha256: sha256_hex(&x.body),
            status: x.status,
            upstream_proxy: upstream.map(|u| u.proxy.host_port()),
            url: &row.url,
        };
        let meta = FileContent::meta(&meta);
        Ok(vec![FileContent { kind: ArtifactKind::Body, content_type: x.content_type, bytes: x.body }, meta])
    }

    /// GETs `url`, following up to `MAX_REDIRECTS` redirects, and reads the
    /// body of the last answer. Every URL asked, the first and each
    /// redirect's, passes the guard's literal-host check first.
    async fn exchange(
        &self,
        mut url: Url,
        upstream: Option<&Upstream>,
        cookies: &[serde_json::Value],
    ) -> Result<Exchange, Failure> {
        let mut redirects = 0;
        // Through an upstream: a client of the item's own (no pool shared
        // with items that go straight out), its connector resolving and
        // guarding each destination before the upstream sees it.
        let proxied = match upstream {
            Some(u) => {
                let public_only = !self.allow_private;
                let resolve: upstream::Resolve = Arc::new(move |host: String, every: bool| {
                    Box::pin(async move { guard::resolve_for(&host, public_only, every).await })
                });
                Some(proxied_client(u.clone(), resolve).map_err(|e| Failure::Terminal(e.to_string()))?)
            }
            None => None,
        };
        let resp = loop {
            if !self.allow_private {
                guard::check_literal_host(&url).map_err(|r| Failure::Terminal(r.to_string()))?;
            }
            let credentials = take_credentials(&mut url);
            let uri: http::Uri = url.as_str().parse().map_err(|e| Failure::Terminal(format!("url: {e}")))?;
            let mut request = http::Request::new(Empty::new());
            *request.uri_mut() = uri;
            let headers = request.headers_mut();
            headers.insert(USER_AGENT_HEADER, HeaderValue::from_static(USER_AGENT));
            headers.insert(ACCEPT, HeaderValue::from_static("*/*"));
            if let Some(credentials) = credentials {
                headers.insert(AUTHORIZATION, credentials);
            }
            // A plain-HTTP request goes to an HTTP(S) upstream in absolute
            // form, its credentials beside it; never inside a tunnel, where
            // the target would read them.
            if let Some(authorization) = upstream.filter(|_| url.scheme() == "http").and_then(Upstream::authorization) {
                headers.insert(http::header::PROXY_AUTHORIZATION, authorization);
            }
            // The context's cookies for this URL, the first and each
            // redirect's, as a browser would send them.
            let now_secs = now().0 as f64 / 1000.0;
            if let Some(cookie) = grid_core::cookies::header_for(cookies, &url, now_secs) {
                let mut value = HeaderValue::from_str(&cookie)
                    .map_err(|_| Failure::Terminal("a context cookie is not a header value".into()))?;
                value.set_sensitive(true);
                headers.insert(http::header::COOKIE, value);
            }
            let resp = match &proxied {
                Some(client) => client.request(request).await,
                None => self.client.request(request).await,
            }
            .map_err(|e| classify(&e, &url))?;
            // An HTTP(S) upstream answers a request in absolute form itself
            // when it refuses the credentials: a refusal, not the target's answer.
            if let Some(u) = upstream.filter(|u| u.speaks_http() && url.scheme() == "http") {
                if resp.status() == StatusCode::PROXY_AUTHENTICATION_REQUIRED {
                    return Err(Failure::Terminal(u.refused_credentials().to_string()));
                }
            }
            let Some(next) = redirect_to(resp.status(), resp.headers().get(LOCATION), &url) else { break resp };
            if redirects == MAX_REDIRECTS {
                return Err(Failure::Terminal(format!("redirect refused: more than {MAX_REDIRECTS} redirects")));
            }
            redirects += 1;
            url = next;
        };
        let status = resp.status().as_u16();
        let (parts, mut body) = resp.into_parts();
        let headers = parts.headers;
        let content_type = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(ArtifactKind::Body.default_content_type())
            .to_string();
        let mut bytes = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| classify(&e, &url))?;
            if let Ok(chunk) = frame.into_data() {
                if bytes.len() + chunk.len() > MAX_BODY_BYTES {
                    return Err(Failure::Terminal(format!("body larger than {} MiB", MAX_BODY_BYTES / (1024 * 1024))));
                }
                bytes.extend_from_slice(&chunk);
            }
        }
        Ok(Exchange { status, final_url: url, content_type, headers, body: bytes })
    }
}

/// Takes a URL's credentials (`http://user:pass@host/`) out of it, as the
/// `Authorization: Basic` header they stand for (what browsers and curl
/// send): they never reach the request line or the published `finalUrl`.
fn take_credentials(url: &mut Url) -> Option<HeaderValue> {
    use base64::Engine;
    if url.username().is_empty() && url.password().is_none() {
        return None;
    }
    let decode = |s: &str| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned();
    let pair = format!("{}:{}", decode(url.username()), url.password().map(decode).unwrap_or_default());
    // Only a URL that cannot have credentials refuses these (not http(s)).
    let _ = url.set_username("");
    let _ = url.set_password(None);
    let mut value =
        HeaderValue::from_str(&format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// Where an answer redirects to: the statuses browsers follow (301, 302,
/// 303, 307, 308) with a `Location` that resolves against `from` to an
/// http or https URL. Any other answer, a redirect without a usable
/// `Location` included, is the exchange's last.
fn redirect_to(status: StatusCode, location: Option<&HeaderValue>, from: &Url) -> Option<Url> {
    let follows = matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308);
    let next = from.join(location.filter(|_| follows)?.to_str().ok()?).ok()?;
    matches!(next.scheme(), "http" | "https").then_some(next)
}

/// One HTTP exchange as received.
struct Exchange {
    status: u16,
    final_url: Url,
    content_type: String,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

/// The meta file of a fetched item (docs/captures.md), serialized as it
/// stands, members in name order (as a JSON object of serde_json's orders
/// them): written straight from the exchange, with no JSON tree between.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Meta<'a> {
    attempt: u32,
    byte_length: usize,
    content_type: &'a str,
    duration_ms: u64,
    fetched_at: String,
    final_url: &'a str,
    headers: BTreeMap<&'a str, Cow<'a, str>>,
    outcome: &'static str,
    profile_id: &'static str,
    script: &'static str,
    sha256: String,
    status: u16,
    /// `host:port` of the upstream proxy the exchange went through
    /// (docs/proxies.md); left out when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    upstream_proxy: Option<String>,
    url: &'a str,
}

/// Whether trying again can help: refused destinations cannot; names
/// that do not resolve, refused connections, timeouts and broken streams
/// (a request's error or its body's) can. A name that does not resolve
/// and a connection refused or reset are named as such (`url`'s host and
/// port), in the egress proxy's words (docs/captures.md).
fn classify(e: &(dyn std::error::Error + 'static), url: &Url) -> Failure {
    if let Some(refused) = guard::refused_in(e) {
        return Failure::Terminal(refused.to_string());
    }
    if let Some(why) = named_failure(e, url) {
        return Failure::Transient(why);
    }
    // An upstream proxy that refuses the credentials, or that the guard
    // refuses, refuses the next attempt too.
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(u) = err.downcast_ref::<upstream::UpstreamError>() {
            return match u {
                upstream::UpstreamError::Credentials { .. } | upstream::UpstreamError::Guarded { .. } => {
                    Failure::Terminal(u.to_string())
                }
                _ => Failure::Transient(format!("request failed: {u}")),
            };
        }
        cur = err.source();
    }
    Failure::Transient(format!("request failed: {}", source_chain(e)))
}

/// A name that does not resolve, or a connection refused or reset, found
/// among `e`'s sources.
fn named_failure(e: &(dyn std::error::Error + 'static), url: &Url) -> Option<String> {
    let target = format!("{}:{}", url.host_str().unwrap_or(""), url.port_or_known_default().unwrap_or(0));
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(dns) = err.downcast_ref::<guard::DoesNotResolve>() {
            return Some(dns.to_string());
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            return match io.kind() {
                ConnectionRefused => Some(format!("connection to {target} refused")),
                ConnectionReset | ConnectionAborted => Some(format!("connection to {target} reset")),
                _ => None,
            };
        }
        cur = err.source();
    }
    None
}

fn source_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        parts.push(s.to_string());
        cur = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn credentials_in_a_url_become_a_basic_authorization() {
        let mut url = Url::parse("http://us%20er:p%40ss@t.test:8080/a?b").unwrap();
        let header = take_credentials(&mut url).unwrap();
        // base64("us er:p@ss")
        assert_eq!(header.to_str().unwrap(), "Basic dXMgZXI6cEBzcw==");
        assert!(header.is_sensitive());
        assert_eq!(url.as_str(), "http://t.test:8080/a?b");
        let mut bare = Url::parse("http://t.test/").unwrap();
        assert!(take_credentials(&mut bare).is_none());
        let mut user_only = Url::parse("http://u@t.test/").unwrap();
        assert_eq!(take_credentials(&mut user_only).unwrap().to_str().unwrap(), "Basic dTo=");
    }

    #[test]
    fn redirects_followed_are_the_ones_browsers_follow_to_http_urls() {
        let from = Url::parse("http://t.test/a/b?q=1").unwrap();
        let to = |status: u16, location: &str| {
            redirect_to(StatusCode::from_u16(status).unwrap(), Some(&HeaderValue::from_str(location).unwrap()), &from)
                .map(String::from)
        };
        for status in [301, 302, 303, 307, 308] {
            assert_eq!(to(status, "/c").as_deref(), Some("http://t.test/c"), "{status}");
        }
        assert_eq!(to(302, "d").as_deref(), Some("http://t.test/a/d"));
        assert_eq!(to(302, "https://u.test/x").as_deref(), Some("https://u.test/x"));
        // Not a redirect browsers follow, not an http(s) URL, no Location.
        assert_eq!(to(300, "/c"), None);
        assert_eq!(to(304, "/c"), None);
        assert_eq!(to(200, "/c"), None);
        assert_eq!(to(302, "ftp://t.test/f"), None);
        assert_eq!(to(302, "file:///etc/passwd"), None);
        assert_eq!(redirect_to(StatusCode::FOUND, None, &from), None);
    }

    /// The meta file is written straight from the exchange; it must read
    /// exactly as the JSON object it used to be built as (members in name
    /// order, pretty-printed, the last of repeated headers).
    #[test]
    fn meta_is_the_json_object_it_describes() {
        let meta = Meta {
            attempt: 2,
            byte_length: 5,
            content_type: "text/html; charset=utf-8",
            duration_ms: 7,
            fetched_at: "2027-01-15T08:00:00.000Z".into(),
            final_url: "http://t/b",
            headers: [("content-type", "text/html; charset=utf-8"), ("x-a", "1"), ("x-a", "2 \"q\"")]
                .into_iter()
                .map(|(k, v)| (k, Cow::Borrowed(v)))
                .collect(),
            outcome: "success",
            profile_id: "desktop-1080p",
            script: "fetch",
            sha256: "ab".into(),
            status: 404,
            upstream_proxy: None,
            url: "http://t/a",
        };
        let expected = json!({
            "outcome": "success",
            "script": "fetch",
            "profileId": "desktop-1080p",
            "url": "http://t/a",
            "finalUrl": "http://t/b",
            "status": 404,
            "contentType": "text/html; charset=utf-8",
            "headers": {"content-type": "text/html; charset=utf-8", "x-a": "2 \"q\""},
            "byteLength": 5,
            "sha256": "ab",
            "fetchedAt": "2027-01-15T08:00:00.000Z",
            "durationMs": 7,
            "attempt": 2,
        });
        assert_eq!(FileContent::meta(&meta).bytes, FileContent::meta(&expected).bytes);
    }
}
