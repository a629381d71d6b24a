//! The `fetch` script: one HTTP GET with the grid's own client; publishes
//! the body as received and a meta file describing the exchange.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use grid_core::catalog::ArtifactKind;
use grid_core::item::Failure;
use grid_core::validate::params;
use serde::Serialize;
use url::Url;

use super::files::FileContent;
use super::guard::{self, PublicOnlyResolver};
use crate::ids::{now, sha256_hex};
use crate::store::items::ItemRow;

/// Bodies larger than this fail the item: the grid is not a bulk downloader.
pub const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;
const MAX_REDIRECTS: usize = 10;
pub const USER_AGENT: &str = concat!("grid-fetch/", env!("CARGO_PKG_VERSION"));

pub struct Fetcher {
    client: reqwest::Client,
    allow_private: bool,
}

impl Fetcher {
    /// Fails only if reqwest cannot build a client (its TLS backend); the
    /// server then does not start.
    ///
    /// Connections are pooled per host (reqwest's pool is keyed by scheme,
    /// host and port), and as many are kept open to one host as workers
    /// may fetch from it at once (`max_workers`): at internet latency the
    /// pool's concurrency is the rate, and a connection set up again per
    /// item costs a round trip or two (and a TLS handshake).
    pub fn new(allow_private: bool, max_workers: usize) -> Result<Fetcher, reqwest::Error> {
        let policy = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
            }
            if !allow_private {
                if let Err(refused) = guard::check_literal_host(attempt.url()) {
                    return attempt.error(refused);
                }
            }
            attempt.follow()
        });
        // No proxy from the environment (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY):
        // through a proxy the target's name is resolved by the proxy, never
        // by the guard's resolver, and tenants' requests would reach wherever
        // the operator's proxy can.
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .user_agent(USER_AGENT)
            .redirect(policy)
            .connect_timeout(Duration::from_secs(10))
            .pool_max_idle_per_host(max_workers.max(1))
            .pool_idle_timeout(Duration::from_secs(90));
        if !allow_private {
            builder = builder.dns_resolver(std::sync::Arc::new(PublicOnlyResolver));
        }
        Ok(Fetcher { client: builder.build()?, allow_private })
    }

    pub async fn run(&self, row: &ItemRow) -> Result<Vec<FileContent>, Failure> {
        let p = params::fetch(&row.params).map_err(Failure::Terminal)?;
        let url = Url::parse(&row.url).map_err(|e| Failure::Terminal(format!("url: {e}")))?;
        if !self.allow_private {
            guard::check_literal_host(&url).map_err(|r| Failure::Terminal(r.to_string()))?;
        }
        let started = Instant::now();
        let fetched_at = now();
        let x = match tokio::time::timeout(Duration::from_millis(p.timeout_ms), self.exchange(url)).await {
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
            final_url: &x.final_url,
            // One value per name, the last one received (as a JSON object).
            headers: x.headers.iter().map(|(k, v)| (k.as_str(), String::from_utf8_lossy(v.as_bytes()))).collect(),
            outcome: "success",
            profile_id: row.profile.as_str(),
            script: "fetch",
            sha256: sha256_hex(&x.body),
            status: x.status,
            url: &row.url,
        };
        let meta = FileContent::meta(&meta);
        Ok(vec![FileContent { kind: ArtifactKind::Body, content_type: x.content_type, bytes: x.body }, meta])
    }

    async fn exchange(&self, url: Url) -> Result<Exchange, Failure> {
        let mut resp = self.client.get(url).send().await.map_err(classify)?;
        let status = resp.status().as_u16();
        let final_url = resp.url().to_string();
        let headers = std::mem::take(resp.headers_mut());
        let content_type = headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(ArtifactKind::Body.default_content_type())
            .to_string();
        let mut body = Vec::new();
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(classify)?;
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(Failure::Terminal(format!("body larger than {} MiB", MAX_BODY_BYTES / (1024 * 1024))));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Exchange { status, final_url, content_type, headers, body })
    }
}

/// One HTTP exchange as received.
struct Exchange {
    status: u16,
    final_url: String,
    content_type: String,
    headers: reqwest::header::HeaderMap,
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
    url: &'a str,
}

/// Whether trying again can help: refused destinations and redirect loops
/// cannot; timeouts, refused connections and broken streams can.
fn classify(e: reqwest::Error) -> Failure {
    if let Some(refused) = guard::refused_in(&e) {
        return Failure::Terminal(refused.to_string());
    }
    if e.is_redirect() {
        return Failure::Terminal(format!("redirect refused: {}", source_chain(&e)));
    }
    if e.is_timeout() {
        return Failure::Transient("timed out".into());
    }
    Failure::Transient(format!("request failed: {}", source_chain(&e)))
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
