//! Upstream proxies (docs/proxies.md): the `proxy` member of a lease and of a
//! batch, and its validated form. The grid's egress proxy checks every
//! destination first and sends only what it allows through the upstream.

use std::fmt;

use serde::{Deserialize, Serialize};

/// `proxy` of POST /sessions and POST /batches as a client sends it.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewProxy {
    /// `http://host:port`, `https://host:port` or `socks5://host:port`.
    pub server: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

/// Never prints the password.
impl fmt::Debug for NewProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewProxy")
            .field("server", &self.server)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// How the grid speaks to an upstream proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProxyScheme {
    /// HTTP CONNECT over plain TCP.
    Http,
    /// HTTP CONNECT inside TLS to the proxy.
    Https,
    /// SOCKS5 (RFC 1928), username/password (RFC 1929) when given.
    Socks5,
}

impl ProxyScheme {
    pub const ALL: [ProxyScheme; 3] = [ProxyScheme::Http, ProxyScheme::Https, ProxyScheme::Socks5];

    pub fn as_str(self) -> &'static str {
        match self {
            ProxyScheme::Http => "http",
            ProxyScheme::Https => "https",
            ProxyScheme::Socks5 => "socks5",
        }
    }

    pub fn parse(s: &str) -> Option<ProxyScheme> {
        ProxyScheme::ALL.into_iter().find(|p| p.as_str() == s)
    }

    pub fn default_port(self) -> u16 {
        match self {
            ProxyScheme::Http => 80,
            ProxyScheme::Https => 443,
            ProxyScheme::Socks5 => 1080,
        }
    }
}

/// The proxy's credentials. Never serialized with the proxy: the server
/// seals them with its vault; `Debug` shows the user name only.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyCredentials {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for ProxyCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyCredentials").field("username", &self.username).field("password", &"<redacted>").finish()
    }
}

impl ProxyCredentials {
    /// `username` NUL `password`: what the server seals (a user name has no NUL).
    pub fn to_sealable(&self) -> Vec<u8> {
        let mut v = self.username.as_bytes().to_vec();
        v.push(0);
        v.extend_from_slice(self.password.as_bytes());
        v
    }

    pub fn from_sealable(bytes: &[u8]) -> Option<ProxyCredentials> {
        let text = std::str::from_utf8(bytes).ok()?;
        let (username, password) = text.split_once('\0')?;
        Some(ProxyCredentials { username: username.into(), password: password.into() })
    }
}

/// A validated upstream proxy. Serialized (in a stored submission, in
/// answers) as its scheme, host and port only: `credentials` is skipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamProxy {
    pub scheme: ProxyScheme,
    /// Lower case; an IPv6 address without brackets.
    pub host: String,
    pub port: u16,
    #[serde(skip)]
    pub credentials: Option<ProxyCredentials>,
}

impl UpstreamProxy {
    /// `host:port` (IPv6 in brackets): what answers and attestations show.
    pub fn host_port(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// `scheme://host:port`, without credentials.
    pub fn server(&self) -> String {
        format!("{}://{}", self.scheme.as_str(), self.host_port())
    }
}
