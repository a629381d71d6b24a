//! Upstream proxies (docs/proxies.md): the client side of the proxy a lease,
//! a batch or the operator (`--upstream-proxy`) names. The grid's own checks
//! come first (the egress proxy's policy, the fetch script's guard); what
//! they allow is sent through the upstream, to the address the grid resolved
//! and checked, never to a name the upstream would resolve again.
//!
//! - `http://` and `https://` (TLS to the proxy, webpki roots and the
//!   operator's `--upstream-proxy-ca`): as browsers speak to a proxy. HTTP
//!   CONNECT to `ip:port` for https targets (and WebSockets);
//!   plain-HTTP requests in absolute form (`GET http://host:port/path`),
//!   which the proxy resolves again, so the grid first checks every address
//!   the name resolves to. `Proxy-Authorization: Basic` when credentials
//!   are given.
//! - `socks5://`: RFC 1928, the target as an IP address, username/password
//!   authentication (RFC 1929) when credentials are given. Written here (a
//!   hundred lines with their tests) rather than taken from a crate: the
//!   grid needs the one CONNECT command with an address already resolved.
//!
//! The proxy's own address passes the private-network guard unless the grid
//! runs with `--allow-private-networks`. Credentials never appear in an
//! error, a log line or an answer: errors name the proxy as
//! `scheme://host:port`.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};

use base64::Engine;
use grid_core::netaddr;
use grid_core::wire::proxy::{ProxyCredentials, ProxyScheme, UpstreamProxy};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long reaching the proxy and its handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest answer head a CONNECT may get.
const MAX_CONNECT_ANSWER: usize = 16 * 1024;

/// A byte stream to a target through an upstream (TCP, or TLS to an
/// `https://` proxy).
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}
pub type Tunnel = Box<dyn Stream>;

/// An upstream proxy as the grid uses it: the proxy (with its credentials,
/// opened from the vault) and whether its address may be a private one.
/// `Debug` shows no password (`ProxyCredentials`'s own).
#[derive(Debug, Clone)]
pub struct Upstream {
    pub proxy: UpstreamProxy,
    pub allow_private: bool,
}

/// Why a connection through an upstream failed. Its text names the proxy
/// by `scheme://host:port` only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// The proxy's own address is one the grid may not reach.
    #[error("upstream proxy {server} refused by the grid's private-network guard: {why}")]
    Guarded { server: String, why: String },
    #[error("upstream proxy {server} could not be reached: {why}")]
    Unreachable { server: String, why: String },
    #[error("upstream proxy {server} refused the credentials: {why}")]
    Credentials { server: String, why: String },
    #[error("upstream proxy {server} did not open a tunnel to {target}: {why}")]
    Tunnel { server: String, target: String, why: String },
}

/// The proxy's addresses the grid may connect to: every address it
/// resolves to, only the public ones unless `allow_private`.
pub async fn resolve(proxy: &UpstreamProxy, allow_private: bool) -> Result<Vec<SocketAddr>, UpstreamError> {
    let server = proxy.server();
    let addrs: Vec<SocketAddr> = match proxy.host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, proxy.port)],
        Err(_) => tokio::net::lookup_host((proxy.host.as_str(), proxy.port))
            .await
            .map_err(|e| UpstreamError::Unreachable { server: server.clone(), why: format!("does not resolve: {e}") })?
            .collect(),
    };
    if allow_private {
        return Ok(addrs);
    }
    let (allowed, refused) = netaddr::sort_out(&addrs, |a| a.ip(), netaddr::special_purpose);
    if allowed.is_empty() {
        return Err(UpstreamError::Guarded { server, why: netaddr::not_public(&proxy.host, &refused) });
    }
    Ok(allowed)
}

/// The problem a request naming `proxy` at `field` gets when the grid may
/// not reach the proxy (its address guarded, or no address at all):
/// `proxy.server: ...`, for a 400.
pub async fn refusal(field: &str, proxy: &UpstreamProxy, allow_private: bool) -> Option<String> {
    let why = match resolve(proxy, allow_private).await {
        Ok(addrs) if !addrs.is_empty() => return None,
        Ok(_) => "does not resolve".to_string(),
        Err(UpstreamError::Guarded { why, .. }) => format!(
            "refused by the grid's private-network guard (the grid runs without --allow-private-networks): {why}"
        ),
        Err(e) => e.to_string(),
    };
    Some(format!("{field}.server: {why}"))
}

impl Upstream {
    /// An HTTP(S) proxy, which takes plain-HTTP requests in absolute form.
    pub fn speaks_http(&self) -> bool {
        matches!(self.proxy.scheme, ProxyScheme::Http | ProxyScheme::Https)
    }

    /// `Proxy-Authorization: Basic ...` for requests sent to an HTTP(S)
    /// proxy in absolute form, when it has credentials.
    pub fn authorization(&self) -> Option<http::HeaderValue> {
        let c = self.proxy.credentials.as_ref()?;
        let mut value = http::HeaderValue::from_str(&basic(c)).ok()?;
        value.set_sensitive(true);
        Some(value)
    }
}

impl Upstream {
    /// The error of a 407 answer to a request sent in absolute form: the
    /// proxy's refusal of the credentials, as CONNECT's 407 says it.
    pub fn refused_credentials(&self) -> UpstreamError {
        let why =
            if self.proxy.credentials.is_some() { "wrong user name or password" } else { "it asks for credentials" };
        UpstreamError::Credentials { server: self.proxy.server(), why: format!("HTTP 407 ({why})") }
    }
}

fn basic(c: &ProxyCredentials) -> String {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", c.username, c.password)))
}

/// A connection to the proxy itself (TCP, TLS to an `https://` one), its
/// address passed by the guard: what plain-HTTP requests are sent on in
/// absolute form.
pub async fn open(upstream: &Upstream) -> Result<Tunnel, UpstreamError> {
    let server = upstream.proxy.server();
    tokio::time::timeout(HANDSHAKE_TIMEOUT, reach(upstream)).await.unwrap_or_else(|_| {
        Err(UpstreamError::Unreachable { server, why: format!("no connection within {HANDSHAKE_TIMEOUT:?}") })
    })
}

async fn reach(upstream: &Upstream) -> Result<Tunnel, UpstreamError> {
    let proxy = &upstream.proxy;
    let unreachable = |why: String| UpstreamError::Unreachable { server: proxy.server(), why };
    let addrs = resolve(proxy, upstream.allow_private).await?;
    let tcp = TcpStream::connect(&addrs[..]).await.map_err(|e| unreachable(e.to_string()))?;
    let _ = tcp.set_nodelay(true);
    Ok(match proxy.scheme {
        ProxyScheme::Https => Box::new(tls(tcp, &proxy.host).await.map_err(|e| unreachable(format!("TLS: {e}")))?),
        ProxyScheme::Http | ProxyScheme::Socks5 => Box::new(tcp),
    })
}

/// A tunnel to `target` (an address the grid resolved and checked) through
/// `upstream`.
pub async fn connect(upstream: &Upstream, target: SocketAddr) -> Result<Tunnel, UpstreamError> {
    let proxy = &upstream.proxy;
    let server = proxy.server();
    let unreachable = |why: String| UpstreamError::Unreachable { server: server.clone(), why };
    let work = async {
        let mut stream = reach(upstream).await?;
        let credentials = proxy.credentials.as_ref();
        let handshake = match proxy.scheme {
            ProxyScheme::Http | ProxyScheme::Https => http_connect(&mut stream, target, credentials).await,
            ProxyScheme::Socks5 => socks5_connect(&mut stream, target, credentials).await,
        };
        handshake.map_err(|h| h.into_error(&server, target))?;
        Ok(stream)
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, work)
        .await
        .unwrap_or_else(|_| Err(unreachable(format!("no tunnel within {HANDSHAKE_TIMEOUT:?}"))))
}

async fn tls(tcp: TcpStream, host: &str) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let config = match PROXY_TLS.get() {
        Some(config) => config.clone(),
        None => {
            let public = Arc::new(proxy_tls(rustls::RootCertStore::empty()).map_err(std::io::Error::other)?);
            PROXY_TLS.get_or_init(|| public).clone()
        }
    };
    let name = rustls_pki_types::ServerName::try_from(host.to_string()).map_err(std::io::Error::other)?;
    tokio_rustls::TlsConnector::from(config).connect(name, tcp).await
}

/// TLS to https:// proxies, one configuration for the process: with the
/// certificate authorities the operator named (`trust_proxy_authorities`,
/// at start, before any connection), else the public ones alone, made at
/// the first connection.
static PROXY_TLS: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();

/// Trusts the certificate authorities of `pem` (`--upstream-proxy-ca`), beside
/// the webpki roots, for TLS to https:// proxies, for the rest of the
/// process. Fails, saying why, on a file with no certificate or one rustls
/// cannot use as a root; called once, at start.
pub fn trust_proxy_authorities(pem: &[u8]) -> Result<(), String> {
    use rustls_pki_types::pem::PemObject;
    let certs = rustls_pki_types::CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM file of certificates: {e}"))?;
    if certs.is_empty() {
        return Err("holds no certificate (PEM, -----BEGIN CERTIFICATE-----)".into());
    }
    let mut roots = rustls::RootCertStore::empty();
    for (i, cert) in certs.into_iter().enumerate() {
        roots.add(cert).map_err(|e| format!("certificate {} is not a usable authority: {e}", i + 1))?;
    }
    let config = proxy_tls(roots).map_err(|e| e.to_string())?;
    PROXY_TLS.set(Arc::new(config)).map_err(|_| "proxy authorities were set already".to_string())
}

/// The client side of TLS to a proxy: the webpki roots and `extra`.
fn proxy_tls(mut extra: rustls::RootCertStore) -> Result<rustls::ClientConfig, rustls::Error> {
    extra.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(extra)
        .with_no_client_auth())
}

/// How a handshake failed, before it is named with its proxy.
#[derive(Debug, PartialEq, Eq)]
pub enum Handshake {
    Io(String),
    Credentials(String),
    Tunnel(String),
}

impl Handshake {
    fn into_error(self, server: &str, target: SocketAddr) -> UpstreamError {
        let server = server.to_string();
        match self {
            Handshake::Io(why) => UpstreamError::Unreachable { server, why },
            Handshake::Credentials(why) => UpstreamError::Credentials { server, why },
            Handshake::Tunnel(why) => UpstreamError::Tunnel { server, target: target.to_string(), why },
        }
    }
}

impl From<std::io::Error> for Handshake {
    fn from(e: std::io::Error) -> Self {
        Handshake::Io(e.to_string())
    }
}

/// `CONNECT ip:port` on `s`, the answer read up to its blank line and no
/// further (the tunnel's bytes follow it).
pub async fn http_connect<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    target: SocketAddr,
    credentials: Option<&ProxyCredentials>,
) -> Result<(), Handshake> {
    let mut request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(c) = credentials {
        request.push_str(&format!("Proxy-Authorization: {}\r\n", basic(c)));
    }
    request.push_str("\r\n");
    s.write_all(request.as_bytes()).await?;
    let mut head = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).await? == 0 {
            return Err(Handshake::Io("the proxy closed the connection before answering CONNECT".into()));
        }
        head.push(byte[0]);
        if head.len() > MAX_CONNECT_ANSWER {
            return Err(Handshake::Tunnel("its answer to CONNECT is too long".into()));
        }
    }
    let status_line = String::from_utf8_lossy(&head).lines().next().unwrap_or("").to_string();
    let mut parts = status_line.splitn(3, ' ');
    let (version, code) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !version.starts_with("HTTP/1.") {
        return Err(Handshake::Tunnel(format!("its answer to CONNECT is not HTTP: {status_line:.80}")));
    }
    match code {
        c if c.starts_with('2') => Ok(()),
        "407" => Err(Handshake::Credentials(format!(
            "{} ({})",
            status_line.trim(),
            if credentials.is_some() { "wrong user name or password" } else { "it asks for credentials" }
        ))),
        _ => Err(Handshake::Tunnel(status_line.trim().to_string())),
    }
}

/// The SOCKS5 CONNECT command (RFC 1928) to `target`, after the
/// username/password sub-negotiation (RFC 1929) when `credentials`.
pub async fn socks5_connect<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    target: SocketAddr,
    credentials: Option<&ProxyCredentials>,
) -> Result<(), Handshake> {
    const NO_AUTH: u8 = 0x00;
    const USER_PASS: u8 = 0x02;
    let greeting: &[u8] = if credentials.is_some() { &[5, 2, NO_AUTH, USER_PASS] } else { &[5, 1, NO_AUTH] };
    s.write_all(greeting).await?;
    let mut choice = [0u8; 2];
    s.read_exact(&mut choice).await?;
    if choice[0] != 5 {
        return Err(Handshake::Tunnel(format!("it does not speak SOCKS5 (version byte {})", choice[0])));
    }
    match (choice[1], credentials) {
        (NO_AUTH, _) => {}
        (USER_PASS, Some(c)) => {
            let (user, pass) = (c.username.as_bytes(), c.password.as_bytes());
            let mut sub = vec![1, user.len() as u8];
            sub.extend_from_slice(user);
            sub.push(pass.len() as u8);
            sub.extend_from_slice(pass);
            s.write_all(&sub).await?;
            let mut status = [0u8; 2];
            s.read_exact(&mut status).await?;
            if status[1] != 0 {
                return Err(Handshake::Credentials(format!(
                    "SOCKS5 username/password authentication failed (status {})",
                    status[1]
                )));
            }
        }
        (USER_PASS, None) | (0xFF, None) => {
            return Err(Handshake::Credentials("it asks for a user name and password".into()));
        }
        (0xFF, Some(_)) => {
            return Err(Handshake::Credentials("it accepts neither no authentication nor username/password".into()))
        }
        (other, _) => {
            return Err(Handshake::Tunnel(format!("it chose an authentication method not offered ({other})")))
        }
    }
    let mut request = vec![5, 1, 0];
    match target.ip() {
        IpAddr::V4(v4) => {
            request.push(1);
            request.extend_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            request.push(4);
            request.extend_from_slice(&v6.octets());
        }
    }
    request.extend_from_slice(&target.port().to_be_bytes());
    s.write_all(&request).await?;
    let mut reply = [0u8; 4];
    s.read_exact(&mut reply).await?;
    if reply[1] != 0 {
        return Err(Handshake::Tunnel(format!("SOCKS5 reply {}: {}", reply[1], socks5_reply(reply[1]))));
    }
    // The bound address, which the grid does not use.
    let rest = match reply[3] {
        1 => 4 + 2,
        4 => 16 + 2,
        3 => {
            let mut len = [0u8; 1];
            s.read_exact(&mut len).await?;
            len[0] as usize + 2
        }
        other => return Err(Handshake::Tunnel(format!("SOCKS5 reply with an unknown address type {other}"))),
    };
    let mut bound = vec![0u8; rest];
    s.read_exact(&mut bound).await?;
    Ok(())
}

/// RFC 1928's reply field.
fn socks5_reply(code: u8) -> &'static str {
    match code {
        1 => "general SOCKS server failure",
        2 => "connection not allowed by ruleset",
        3 => "network unreachable",
        4 => "host unreachable",
        5 => "connection refused",
        6 => "TTL expired",
        7 => "command not supported",
        8 => "address type not supported",
        _ => "unassigned",
    }
}

/// The fetch script's client for an item with an upstream (`capture::fetch`):
/// every https connection a tunnel through `upstream` to an address
/// `capture::guard::resolve` allowed (TLS to the target over it); every
/// plain-HTTP one, through an HTTP(S) upstream, a connection to the proxy
/// itself, marked proxied so that hyper sends requests on it in absolute
/// form (the caller adds [`Upstream::authorization`]), once every address
/// the name resolves to passed the guard.
pub fn proxied_client(
    upstream: Upstream,
    resolve: Resolve,
) -> Result<Client<ProxiedConnector, Empty<Bytes>>, rustls::Error> {
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())?
        .https_or_http()
        .enable_http1()
        .wrap_connector(Tunnels { upstream: Arc::new(upstream), resolve });
    Ok(Client::builder(TokioExecutor::new()).pool_max_idle_per_host(0).build(connector))
}

pub type ProxiedConnector = hyper_rustls::HttpsConnector<Tunnels>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Connects through an upstream proxy, the destination resolved and
/// guarded here first.
#[derive(Clone)]
pub struct Tunnels {
    upstream: Arc<Upstream>,
    resolve: Resolve,
}

/// How a destination's name becomes the addresses the grid may connect to
/// (the fetch script's guard, `capture::guard::resolve`); `every` (the
/// second argument): refused unless every address the name resolves to
/// is allowed.
pub type Resolve =
    Arc<dyn Fn(String, bool) -> Pin<Box<dyn Future<Output = Result<Vec<SocketAddr>, BoxError>> + Send>> + Send + Sync>;

impl tower_service::Service<http::Uri> for Tunnels {
    type Response = TunnelIo;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<TunnelIo, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let (upstream, resolve) = (self.upstream.clone(), self.resolve.clone());
        Box::pin(async move {
            let host = uri.host().ok_or("the URL has no host")?.trim_matches(['[', ']']).to_string();
            let https = uri.scheme_str() == Some("https");
            let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
            let by_name = !https && upstream.speaks_http();
            let addrs = resolve(host.clone(), by_name).await?;
            let mut target = *addrs.first().ok_or_else(|| format!("{host} does not resolve"))?;
            target.set_port(port);
            let tunnel = if by_name { open(&upstream).await? } else { connect(&upstream, target).await? };
            Ok(TunnelIo(TokioIo::new(tunnel), by_name))
        })
    }
}

/// A tunnel as hyper's client drives it; `.1`: a connection to an HTTP(S)
/// proxy itself (requests go on it in absolute form).
pub struct TunnelIo(TokioIo<Tunnel>, bool);

impl Connection for TunnelIo {
    fn connected(&self) -> Connected {
        Connected::new().proxy(self.1)
    }
}

impl hyper::rt::Read for TunnelIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for TunnelIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::duplex;

    /// What `--upstream-proxy-ca` refuses, and why (each case fails before
    /// the process-wide setting is made).
    #[test]
    fn proxy_authorities_must_be_pem_certificates_rustls_can_use() {
        let no_cert = trust_proxy_authorities(b"not a certificate\n").unwrap_err();
        assert!(no_cert.starts_with("holds no certificate"), "{no_cert}");
        let key_only = trust_proxy_authorities(b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n");
        assert!(key_only.unwrap_err().starts_with("holds no certificate"));
        let garbage = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let bad = trust_proxy_authorities(garbage).unwrap_err();
        assert!(bad.starts_with("certificate 1 is not a usable authority"), "{bad}");
    }

    fn creds() -> ProxyCredentials {
        ProxyCredentials { username: "alice".into(), password: "s3cret".into() }
    }

    fn target() -> SocketAddr {
        "10.1.2.3:8080".parse().unwrap()
    }

    /// Runs a handshake against a proxy side that has its whole `answer`
    /// written ahead (the client reads it step by step) and then reads what
    /// the client sent, `expect_len` bytes.
    async fn against(expect_len: usize, answer: Vec<u8>, client: bool) -> (Result<(), Handshake>, Vec<u8>) {
        let (mut a, mut b) = duplex(4096);
        let proxy = tokio::spawn(async move {
            b.write_all(&answer).await.unwrap();
            let mut got = vec![0u8; expect_len];
            let _ = b.read_exact(&mut got).await;
            got
        });
        let result = if client {
            http_connect(&mut a, target(), Some(&creds())).await
        } else {
            socks5_connect(&mut a, target(), Some(&creds())).await
        };
        (result, proxy.await.unwrap())
    }

    #[tokio::test]
    async fn connect_sends_basic_credentials_and_takes_a_2xx_without_reading_past_its_head() {
        let expect = "CONNECT 10.1.2.3:8080 HTTP/1.1\r\nHost: 10.1.2.3:8080\r\n\
                      Proxy-Authorization: Basic YWxpY2U6czNjcmV0\r\n\r\n";
        let (mut a, mut b) = duplex(4096);
        let proxy = tokio::spawn(async move {
            let mut got = vec![0u8; expect.len()];
            b.read_exact(&mut got).await.unwrap();
            b.write_all(b"HTTP/1.1 200 Connection established\r\n\r\ntunnel bytes").await.unwrap();
            String::from_utf8(got).unwrap()
        });
        http_connect(&mut a, target(), Some(&creds())).await.unwrap();
        assert_eq!(proxy.await.unwrap(), expect);
        let mut rest = [0u8; 12];
        a.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"tunnel bytes");
    }

    #[tokio::test]
    async fn connect_tells_refused_credentials_from_a_refused_tunnel() {
        let head_len = "CONNECT 10.1.2.3:8080 HTTP/1.1\r\nHost: 10.1.2.3:8080\r\n\
                        Proxy-Authorization: Basic YWxpY2U6czNjcmV0\r\n\r\n"
            .len();
        let (r, _) = against(head_len, b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n".to_vec(), true).await;
        assert_eq!(
            r,
            Err(Handshake::Credentials(
                "HTTP/1.1 407 Proxy Authentication Required (wrong user name or password)".into()
            ))
        );
        let (r, _) = against(head_len, b"HTTP/1.1 403 Forbidden\r\n\r\n".to_vec(), true).await;
        assert_eq!(r, Err(Handshake::Tunnel("HTTP/1.1 403 Forbidden".into())));
        let (r, _) = against(head_len, b"SSH-2.0-x\r\n\r\n".to_vec(), true).await;
        assert!(matches!(r, Err(Handshake::Tunnel(w)) if w.contains("not HTTP")));
    }

    #[tokio::test]
    async fn socks5_offers_username_password_and_connects_to_the_address_given() {
        // Greeting, sub-negotiation, request, as RFC 1928 and 1929 lay them out.
        let mut expect = vec![5, 2, 0, 2];
        expect.extend_from_slice(&[1, 5]);
        expect.extend_from_slice(b"alice");
        expect.push(6);
        expect.extend_from_slice(b"s3cret");
        expect.extend_from_slice(&[5, 1, 0, 1, 10, 1, 2, 3, 0x1f, 0x90]);
        let answer = [&[5u8, 2][..], &[1, 0], &[5, 0, 0, 1, 127, 0, 0, 1, 0, 80]].concat();
        let (r, got) = against(expect.len(), answer, false).await;
        assert_eq!(r, Ok(()));
        assert_eq!(got, expect);
    }

    #[tokio::test]
    async fn socks5_names_a_refused_login_and_a_refused_connection() {
        let login = [&[5u8, 2][..], &[1, 1]].concat();
        let (r, _) = against(4 + 2 + 5 + 1 + 6, login, false).await;
        assert_eq!(r, Err(Handshake::Credentials("SOCKS5 username/password authentication failed (status 1)".into())));
        let refused = [&[5u8, 0][..], &[5, 5, 0, 1, 0, 0, 0, 0, 0, 0]].concat();
        let (r, _) = against(4 + 10, refused, false).await;
        assert_eq!(r, Err(Handshake::Tunnel("SOCKS5 reply 5: connection refused".into())));
        let none = vec![5u8, 0xFF];
        let (r, _) = against(4, none, false).await;
        assert!(matches!(r, Err(Handshake::Credentials(_))), "{r:?}");
    }

    #[tokio::test]
    async fn a_loopback_proxy_is_guarded_unless_private_networks_are_allowed_and_errors_hide_credentials() {
        let proxy = grid_core::validate::proxy::parse_url("http://bob:hunter2@127.0.0.1:9").unwrap();
        let e = resolve(&proxy, false).await.unwrap_err();
        assert!(matches!(&e, UpstreamError::Guarded { .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.starts_with("upstream proxy http://127.0.0.1:9 refused by the grid's private-network guard: "));
        assert!(!text.contains("hunter2") && !text.contains("bob"), "{text}");
        assert_eq!(resolve(&proxy, true).await.unwrap(), vec!["127.0.0.1:9".parse().unwrap()]);
    }
}
