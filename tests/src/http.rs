//! Raw HTTP: a reqwest client that never uses a proxy or follows redirects,
//! and a response read whole for assertions.

use std::fmt;

use serde_json::Value;

/// No proxy (tests only talk to 127.0.0.1), no redirects (a test sees what
/// the server answered).
pub fn http_client() -> reqwest::Client {
    http_client_trusting(None)
}

/// [`http_client`] that also trusts the CA certificates of the PEM file `ca`.
pub fn http_client_trusting(ca: Option<&std::path::Path>) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        // Well under the server's keep-alive wait for a next request
        // (--header-read-timeout-secs): a test that blocks its runtime for
        // longer (a CLI or SDK client run as a child process) would otherwise
        // reuse a connection the server closed meanwhile, and fail sending.
        .pool_idle_timeout(std::time::Duration::from_secs(2))
        .timeout(std::time::Duration::from_secs(30));
    if let Some(ca) = ca {
        let pem = std::fs::read(ca).unwrap_or_else(|e| panic!("read CA {}: {e}", ca.display()));
        for cert in reqwest::Certificate::from_pem_bundle(&pem).unwrap_or_else(|e| panic!("CA {}: {e}", ca.display())) {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder.build().expect("reqwest client")
}

/// A whole response: status, headers, body text and the body parsed as JSON
/// (`Value::Null` when it is not JSON).
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
    pub json: Value,
}

impl Resp {
    pub async fn read(req: reqwest::RequestBuilder) -> Result<Resp, reqwest::Error> {
        let r = req.send().await?;
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().await?;
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok(Resp { status, headers, text, json })
    }

    /// The `error` field of a JSON error body ("" when absent).
    pub fn error(&self) -> &str {
        self.json["error"].as_str().unwrap_or("")
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl fmt::Display for Resp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let body: String = self.text.chars().take(2000).collect();
        write!(f, "{} {}", self.status, body)
    }
}

/// Asserts status and `error` string of a JSON error response.
#[track_caller]
pub fn assert_error(r: &Resp, status: u16, error: &str) {
    assert_eq!((r.status, r.error()), (status, error), "expected {status} {error:?}, got {r}");
    assert!(
        r.header("content-type").is_some_and(|ct| ct.starts_with("application/json")),
        "error response is not JSON: {:?} {r}",
        r.header("content-type")
    );
}
