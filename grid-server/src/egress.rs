//! The filtering proxy between every browser and the network. A browser's
//! sandbox has no network but its own loopback (`browser::sandbox`); the
//! proxy's listener is bound inside it and is the browser's only way out.
//! Chromium runs with `--proxy-server` and `--proxy-bypass-list=<-loopback>`
//! so every request goes through it; the proxy resolves the destination
//! itself and refuses what its [`Policy`] refuses, whatever DNS answers the
//! browser would have got.
//!
//! - Every browser has one for the whole browser: `public-web-only/v1` for a
//!   session with that policy (its decisions are the evidence for the
//!   session's network attestation), else the grid's ordinary access (the
//!   private-network guard unless `--allow-private-networks`).
//! - A capture item with request rules gets one more for its browser
//!   context, behind the per-request checks of `browser/hosts.rs` (which
//!   list refusals in meta); it closes their DNS-rebinding window.
//!
//! A refused plain-HTTP request gets a 403 carrying [`REFUSED_HEADER`]; a
//! refused CONNECT gets the same 403, which Chromium reports as a failed
//! tunnel. Its text names the rule that refused and what it found:
//! `refused by <rule>: <why>`, the rule being the policy's
//! ([`Policy::address_rule`], e.g. `the grid's network policy
//! public-web-only/v1`) or a host rule's (`the item's allowedHosts`), and an
//! address's why the row of `grid_core::netaddr`'s special-purpose table it
//! falls in (`10.0.0.5 is not a public address: private-use (10.0.0.0/8,
//! RFC 1918)`).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use grid_core::netaddr::{self, Special};
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use ipnet::IpNet;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::upstream::{self, Tunnel, Upstream};

const MAX_HEAD: usize = 32 * 1024;
/// How refusals name `public-web-only/v1`.
pub const PUBLIC_WEB_ONLY_RULE: &str = "the grid's network policy public-web-only/v1";
/// Opening words of the page a request refused under `public-web-only/v1`
/// gets (the session's network attestation looks for them). Other policies'
/// refusals open `refused by ` and their own rule's name.
pub const REFUSAL_TEXT: &str = "refused by the grid's network policy public-web-only/v1";
/// Response header of the proxy's own answers, so a browser script can
/// tell them from the target's: `refused` (a policy's 403) or `failed` (a
/// 502 or 504: the name did not resolve, the connection was refused,
/// reset or timed out, the upstream proxy failed). Stripped from every
/// answer that comes from further on, so only the grid sets it.
pub const REFUSED_HEADER: &str = "x-grid-egress";
/// Response header of the proxy's own answers: the reason, as its body
/// says it (`nothing.invalid does not resolve (DNS: ...)`,
/// `connection to 127.0.0.1:9 refused`, `refused by ...`).
pub const REASON_HEADER: &str = "x-grid-egress-reason";
const KEPT_DECISIONS: usize = 200;

/// What a proxy lets through: a host rule checked on the name the browser
/// asked for, then an address rule checked on every address the proxy
/// resolved (it connects only to allowed ones).
pub trait Policy: Send + Sync + 'static {
    /// Why `host` (lower case, IPv6 in brackets) is refused, if it is.
    fn refuse_host(&self, host: &str) -> Option<HostRefusal>;
    /// The special-purpose row of an address the policy refuses; `None`:
    /// the proxy may connect to it.
    fn refuse_ip(&self, ip: IpAddr) -> Option<Special>;
    /// How refusals name the rule [`Policy::refuse_ip`] applies.
    fn address_rule(&self) -> &'static str;
    /// The upstream proxy allowed traffic goes through (docs/proxies.md);
    /// `None`: straight to the destination.
    fn upstream(&self) -> Option<&Upstream> {
        None
    }
}

/// A policy whose allowed traffic goes through an upstream proxy: its
/// checks are `inner`'s, made before anything reaches the upstream.
pub struct Routed {
    pub inner: Arc<dyn Policy>,
    pub upstream: Upstream,
}

impl Policy for Routed {
    fn refuse_host(&self, host: &str) -> Option<HostRefusal> {
        self.inner.refuse_host(host)
    }

    fn refuse_ip(&self, ip: IpAddr) -> Option<Special> {
        self.inner.refuse_ip(ip)
    }

    fn address_rule(&self) -> &'static str {
        self.inner.address_rule()
    }

    fn upstream(&self) -> Option<&Upstream> {
        Some(&self.upstream)
    }
}

/// `policy`, through `upstream` when there is one.
pub fn routed(policy: Arc<dyn Policy>, upstream: Option<Upstream>) -> Arc<dyn Policy> {
    match upstream {
        Some(upstream) => Arc::new(Routed { inner: policy, upstream }),
        None => policy,
    }
}

/// A host refused by a policy's host rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRefusal {
    /// The rule, as refusals name it (`the item's allowedHosts`).
    pub rule: &'static str,
    /// Why, in the words capture meta uses for `blockedRequests`.
    pub reason: String,
}

/// `public-web-only/v1`: any host, public addresses only. Tests on a closed
/// machine name extra ranges to treat as public (`--session-treat-as-public`);
/// operators leave it empty.
#[derive(Debug, Clone, Default)]
pub struct EgressPolicy {
    pub treat_as_public: Vec<IpNet>,
}

impl Policy for EgressPolicy {
    fn refuse_host(&self, _host: &str) -> Option<HostRefusal> {
        None
    }

    fn refuse_ip(&self, ip: IpAddr) -> Option<Special> {
        if self.treat_as_public.iter().any(|n| n.contains(&ip)) {
            return None;
        }
        netaddr::special_purpose(ip)
    }

    fn address_rule(&self) -> &'static str {
        PUBLIC_WEB_ONLY_RULE
    }
}

/// One decision of the proxy: the destination and what was done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub host: String,
    pub allowed: bool,
    /// What was done, for the session attestation (`refused: ...`, `allowed: ...`).
    pub detail: String,
    /// Why a refusal, in the words capture meta uses for `blockedRequests`;
    /// empty when allowed.
    pub reason: String,
    /// Why an allowed request could not be carried (`Failed`'s text).
    pub failure: Option<String>,
}

pub struct EgressProxy {
    pub port: u16,
    decisions: Arc<Mutex<Vec<Decision>>>,
    stop: watch::Sender<bool>,
}

impl EgressProxy {
    /// Serves `listener` (bound by the caller: inside a browser's sandbox,
    /// see `browser::sandbox`) under `policy` until dropped.
    pub fn serve(listener: TcpListener, policy: Arc<dyn Policy>) -> std::io::Result<EgressProxy> {
        let port = listener.local_addr()?.port();
        let decisions = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = watch::channel(false);
        let d = decisions.clone();
        tokio::spawn(async move {
            let mut stopped_accept = stopped.clone();
            let mut backoff = crate::accept::Backoff::default();
            loop {
                tokio::select! {
                    accepted = crate::accept::accept(&listener, &mut backoff, "egress proxy") => {
                        let Some((client, _)) = accepted else { continue };
                        let _ = client.set_nodelay(true);
                        let served = Served { policy: policy.clone(), decisions: d.clone(), stopped: stopped.clone() };
                        let mut stopped = stopped.clone();
                        tokio::spawn(async move {
                            tokio::select! {
                                _ = serve(client, served) => {}
                                _ = stopped.changed() => {}
                            }
                        });
                    }
                    _ = stopped_accept.changed() => return,
                }
            }
        });
        Ok(EgressProxy { port, decisions, stop })
    }

    /// Every decision kept (the latest 200), oldest first.
    pub fn decisions(&self) -> Vec<Decision> {
        self.decisions.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The latest decision about `host`, if the proxy saw it.
    pub fn decision_for(&self, host: &str) -> Option<Decision> {
        self.decisions.lock().unwrap_or_else(|p| p.into_inner()).iter().rev().find(|d| d.host == host).cloned()
    }
}

impl Drop for EgressProxy {
    /// Closes the listener and every tunnel it opened.
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

fn record(decisions: &Mutex<Vec<Decision>>, d: Decision) {
    let mut all = decisions.lock().unwrap_or_else(|p| p.into_inner());
    if all.len() >= KEPT_DECISIONS {
        all.remove(0);
    }
    all.push(d);
}

/// What every request of one browser connection is served with.
#[derive(Clone)]
struct Served {
    policy: Arc<dyn Policy>,
    decisions: Arc<Mutex<Vec<Decision>>>,
    stopped: watch::Receiver<bool>,
}

type Body = BoxBody<Bytes, hyper::Error>;

/// Serves one browser connection, request by request: HTTP/1.1 keep-alive
/// carries many requests, each possibly to another host, so each one is
/// checked on its own (a CONNECT turns the connection into its tunnel).
async fn serve(client: TcpStream, served: Served) {
    let service = hyper::service::service_fn(move |req| {
        let served = served.clone();
        async move { Ok::<_, std::convert::Infallible>(handle(req, &served).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .max_buf_size(MAX_HEAD.max(8192))
        .serve_connection(TokioIo::new(client), service)
        .with_upgrades()
        .await;
}

/// Where a request goes: `host` (no brackets), port, and whether it is a
/// CONNECT.
fn destination(req: &Request<Incoming>) -> Option<(String, u16, bool)> {
    let connect = req.method() == Method::CONNECT;
    let authority = req.uri().authority()?;
    if !connect && req.uri().scheme_str() != Some("http") {
        return None;
    }
    let default = if connect { 443 } else { 80 };
    let host = authority.host().trim_matches(['[', ']']).to_string();
    Some((host, authority.port_u16().unwrap_or(default), connect))
}

async fn handle(req: Request<Incoming>, served: &Served) -> Response<Body> {
    let Some((host, port, connect)) = destination(&req) else {
        return refuse("the grid's egress proxy", "it takes absolute http URLs and CONNECT");
    };
    let policy = served.policy.as_ref();
    let decisions = served.decisions.as_ref();
    // Through an HTTP(S) upstream a plain-HTTP request goes in absolute
    // form, naming the host: the upstream resolves it again, so every
    // address the grid resolved must pass (docs/proxies.md).
    let by_name = !connect && policy.upstream().is_some_and(Upstream::speaks_http);
    let allowed = match check(policy, decisions, &host, port, by_name).await {
        Ok(allowed) => allowed,
        Err(answer) => return answer,
    };
    let through = policy.upstream();
    let via = through.map(|u| format!(" via upstream proxy {}", u.proxy.server())).unwrap_or_default();
    let opened = match (through, by_name) {
        (Some(u), true) => upstream::open(u).await.map_err(|e| Failed::Upstream(e.to_string())),
        (Some(u), false) => upstream::connect(u, allowed[0]).await.map_err(|e| Failed::Upstream(e.to_string())),
        (None, _) => connect_direct(&allowed).await,
    };
    let tunnel = match opened {
        Ok(t) => t,
        Err(failed) => {
            let why = failed.to_string();
            let detail = format!("allowed; {why}");
            record(decisions, Decision { host, allowed: true, detail, reason: String::new(), failure: Some(why) });
            return fail(&failed);
        }
    };
    let detail = format!("allowed: {}{via}", allowed[0].ip());
    record(decisions, Decision { host: host.clone(), allowed: true, detail, reason: String::new(), failure: None });
    if connect {
        return open_tunnel(req, tunnel, served.stopped.clone());
    }
    let proxied = if by_name { through } else { None };
    forward(req, tunnel, proxied, served.stopped.clone()).await.unwrap_or_else(|failed| {
        let why = failed.to_string();
        record(
            decisions,
            Decision {
                host,
                allowed: true,
                detail: format!("allowed; {why}"),
                reason: String::new(),
                failure: Some(why),
            },
        );
        fail(&failed)
    })
}

/// Applies `policy` to `host:port`: the addresses the proxy may connect
/// to, or the answer refusing (or failing) the request. `every`: all
/// addresses `host` resolves to must be allowed, not just one (the
/// request is sent on by name, and whoever resolves it again may pick any).
async fn check(
    policy: &dyn Policy,
    decisions: &Mutex<Vec<Decision>>,
    host: &str,
    port: u16,
    every: bool,
) -> Result<Vec<SocketAddr>, Response<Body>> {
    let host_key = host_key(host);
    if let Some(HostRefusal { rule, reason }) = policy.refuse_host(&host_key) {
        let why = format!("{host_key}: {reason}");
        let detail = format!("refused: {why}");
        record(decisions, Decision { host: host.into(), allowed: false, detail, reason, failure: None });
        return Err(refuse(rule, &why));
    }
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((host, port))).await {
            Ok(Ok(a)) => a.collect(),
            Ok(Err(e)) => return Err(unresolved(decisions, host, &e.to_string())),
            Err(_) => return Err(unresolved(decisions, host, "no answer within 10 s")),
        },
    };
    if addrs.is_empty() {
        return Err(unresolved(decisions, host, "no address"));
    }
    let (allowed, refused) = netaddr::sort_out(&addrs, |a| a.ip(), |ip| policy.refuse_ip(ip));
    if allowed.is_empty() || (every && !refused.is_empty()) {
        let why = netaddr::not_public(host, &refused);
        let (detail, reason) = (format!("refused: {why}"), format!("private network: {why}"));
        record(decisions, Decision { host: host.into(), allowed: false, detail, reason, failure: None });
        return Err(refuse(policy.address_rule(), &why));
    }
    Ok(allowed)
}

/// A name that does not resolve: not a policy matter (the browser's own
/// lookup would have failed too), the egress proxy's own failure.
fn unresolved(decisions: &Mutex<Vec<Decision>>, host: &str, why: &str) -> Response<Body> {
    let failed = Failed::Dns(host.to_string(), why.to_string());
    let text = failed.to_string();
    let detail = format!("allowed; {text}");
    record(
        decisions,
        Decision { host: host.into(), allowed: true, detail, reason: String::new(), failure: Some(text) },
    );
    fail(&failed)
}

/// How long resolving a name or opening a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the egress proxy could not carry a request it allowed: its own
/// failures, answered 502 (504 for a timeout) with [`REFUSED_HEADER`]
/// `failed` and the text in [`REASON_HEADER`] (docs/captures.md).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failed {
    #[error("{0} does not resolve (DNS: {1})")]
    Dns(String, String),
    #[error("connection to {0} refused")]
    Refused(String),
    #[error("connection to {0} reset")]
    Reset(String),
    #[error("connection to {0} timed out")]
    Timeout(String),
    #[error("connection to {0} failed: {1}")]
    Other(String, String),
    /// The upstream proxy's failure, as `upstream::UpstreamError` says it.
    #[error("{0}")]
    Upstream(String),
}

impl Failed {
    /// `e`, met connecting to (or talking with) `target`.
    fn io(target: String, e: &std::io::Error) -> Failed {
        use std::io::ErrorKind::*;
        match e.kind() {
            ConnectionRefused => Failed::Refused(target),
            ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => Failed::Reset(target),
            TimedOut => Failed::Timeout(target),
            _ => Failed::Other(target, e.to_string()),
        }
    }
}

async fn connect_direct(allowed: &[SocketAddr]) -> Result<Tunnel, Failed> {
    let target = allowed[0].to_string();
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(allowed)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(Box::new(s))
        }
        Ok(Err(e)) => Err(Failed::io(target, &e)),
        Err(_) => Err(Failed::Timeout(target)),
    }
}

/// Answers a CONNECT 200 and joins the connection, once hyper hands it
/// over, to `tunnel` (the destination, or a tunnel to it).
fn open_tunnel(req: Request<Incoming>, mut tunnel: Tunnel, mut stopped: watch::Receiver<bool>) -> Response<Body> {
    let upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else { return };
        let mut client = TokioIo::new(upgraded);
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut client, &mut tunnel) => {}
            _ = stopped.changed() => {}
        }
    });
    let mut answer = Response::new(empty());
    answer.extensions_mut().insert(hyper::ext::ReasonPhrase::from_static(b"Connection Established"));
    answer
}

/// Headers that belong to one hop, never sent on (RFC 9110 7.6.1), and the
/// grid's own marks, which only the egress proxy sets.
const HOP_BY_HOP: [&str; 10] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    REASON_HEADER,
];

fn strip(headers: &mut http::HeaderMap) {
    for name in HOP_BY_HOP.iter().chain(std::iter::once(&REFUSED_HEADER)) {
        headers.remove(*name);
    }
}

/// Sends one plain-HTTP request on `tunnel` and answers what came back:
/// in origin form to the destination, in absolute form (with its
/// credentials) to `proxied`, an HTTP(S) upstream, whose 407 is its own
/// refusal of them.
async fn forward(
    req: Request<Incoming>,
    tunnel: Tunnel,
    proxied: Option<&Upstream>,
    mut stopped: watch::Receiver<bool>,
) -> Result<Response<Body>, Failed> {
    let by_name = proxied.is_some();
    let authorization = proxied.and_then(Upstream::authorization);
    let (mut parts, body) = req.into_parts();
    let target = parts.uri.authority().map(|a| a.to_string()).unwrap_or_default();
    strip(&mut parts.headers);
    if !parts.headers.contains_key(http::header::HOST) {
        if let Ok(host) = http::HeaderValue::from_str(&target) {
            parts.headers.insert(http::header::HOST, host);
        }
    }
    if let Some(a) = authorization {
        parts.headers.insert(http::header::PROXY_AUTHORIZATION, a);
    }
    if !by_name {
        let origin = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        parts.uri = origin.parse().map_err(|_| Failed::Other(target.clone(), "a bad request target".into()))?;
    }
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .title_case_headers(true)
        .handshake(TokioIo::new(tunnel))
        .await
        .map_err(|e| hyper_failure(target.clone(), &e))?;
    // The connection carries this one request, then closes.
    tokio::spawn(async move {
        tokio::select! {
            _ = conn => {}
            _ = stopped.changed() => {}
        }
    });
    let answer = sender.send_request(Request::from_parts(parts, body)).await.map_err(|e| hyper_failure(target, &e))?;
    if let Some(u) = proxied.filter(|_| answer.status() == StatusCode::PROXY_AUTHENTICATION_REQUIRED) {
        return Err(Failed::Upstream(u.refused_credentials().to_string()));
    }
    let (mut parts, body) = answer.into_parts();
    strip(&mut parts.headers);
    Ok(Response::from_parts(parts, body.boxed()))
}

/// A request that failed on its way: reset, closed, or another I/O error.
fn hyper_failure(target: String, e: &hyper::Error) -> Failed {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Failed::io(target, io);
        }
        cur = err.source();
    }
    if e.is_incomplete_message() || e.is_canceled() {
        return Failed::Reset(target);
    }
    Failed::Other(target, e.to_string())
}

fn empty() -> Body {
    Empty::<Bytes>::new().map_err(|never| match never {}).boxed()
}

fn full(text: String) -> Body {
    Full::new(Bytes::from(text)).map_err(|never| match never {}).boxed()
}

/// Reads an HTTP message head (up to and including the blank line) of at
/// most `max` bytes; returns the head and any bytes that came after it.
#[cfg(test)]
pub(crate) async fn read_head(s: &mut tokio::net::TcpStream, max: usize) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((buf, rest));
        }
        if buf.len() > max {
            return Err(std::io::Error::other("message head too large"));
        }
    }
}

/// A host as rules write it: lower case, IPv6 in brackets (`host` comes
/// without them).
pub fn host_key(host: &str) -> String {
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => format!("[{v6}]"),
        _ => host.to_ascii_lowercase(),
    }
}

/// The proxy's own answer: `status`, marked with [`REFUSED_HEADER`]
/// (`mark`) and [`REASON_HEADER`] (the text, which is the body too), and
/// the connection closed after it.
fn own_answer(status: StatusCode, mark: &'static str, text: &str) -> Response<Body> {
    let mut answer = Response::new(full(format!("{text}\n")));
    *answer.status_mut() = status;
    let headers = answer.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain"));
    headers.insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    headers.insert(REFUSED_HEADER, http::HeaderValue::from_static(mark));
    // A header value holds visible ASCII only.
    let visible: String = text.chars().map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' }).collect();
    if let Ok(v) = http::HeaderValue::from_str(&visible) {
        headers.insert(REASON_HEADER, v);
    }
    answer
}

/// The proxy's 403: `refused by {rule}: {why}`.
fn refuse(rule: &str, why: &str) -> Response<Body> {
    own_answer(StatusCode::FORBIDDEN, "refused", &refusal_text(rule, why))
}

/// The text of a refusal page.
fn refusal_text(rule: &str, why: &str) -> String {
    format!("refused by {rule}: {why}")
}

/// The proxy's own failure: 502, or 504 for a timeout.
fn fail(failed: &Failed) -> Response<Body> {
    let status = match failed {
        Failed::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::BAD_GATEWAY,
    };
    own_answer(status, "failed", &failed.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::browser::hosts::RequestRules;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn start(policy: Arc<dyn Policy>) -> EgressProxy {
        EgressProxy::serve(TcpListener::bind("127.0.0.1:0").await.unwrap(), policy).unwrap()
    }

    /// What the proxy answers a request written in full.
    async fn ask(proxy: &EgressProxy, request: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[test]
    fn treat_as_public_widens_only_the_named_ranges() {
        let p = EgressPolicy { treat_as_public: vec!["127.0.0.1/32".parse().unwrap()] };
        let allows = |p: &EgressPolicy, ip: &str| p.refuse_ip(ip.parse().unwrap()).is_none();
        assert!(allows(&p, "127.0.0.1"));
        assert!(!allows(&p, "127.0.0.2"));
        assert!(!allows(&p, "169.254.169.254"));
        assert!(allows(&p, "93.184.216.34"));
        assert!(!allows(&EgressPolicy::default(), "127.0.0.1"));
        assert!(!allows(&EgressPolicy::default(), "::ffff:0:7f00:1"));
        assert!(allows(&EgressPolicy::default(), "2002:808:808::1"));
    }

    #[test]
    fn a_public_web_only_refusal_opens_with_the_text_the_attestation_looks_for() {
        assert!(refusal_text(EgressPolicy::default().address_rule(), "x").starts_with(REFUSAL_TEXT));
        assert!(!refusal_text(RequestRules::ordinary(false).address_rule(), "x").contains("public-web-only"));
    }

    #[tokio::test]
    async fn private_destinations_are_refused_and_recorded_naming_policy_and_address_rule() {
        let proxy = start(Arc::new(EgressPolicy::default())).await;
        let answer = ask(&proxy, "GET http://169.254.169.254/latest HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert!(answer.contains(&format!("{REFUSED_HEADER}: refused")), "{answer}");
        let why = "169.254.169.254 is not a public address: link-local (169.254.0.0/16, RFC 3927)";
        assert!(answer.ends_with(&format!("\r\n\r\n{REFUSAL_TEXT}: {why}\n")), "{answer}");
        let d = proxy.decision_for("169.254.169.254").expect("recorded");
        assert!(!d.allowed, "{d:?}");
        assert_eq!((d.detail, d.reason), (format!("refused: {why}"), format!("private network: {why}")));

        // A name is refused with every address it resolved to.
        let answer = ask(&proxy, "CONNECT localhost:443 HTTP/1.1\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert!(answer.contains(&format!("{REFUSAL_TEXT}: localhost is not a public address: ")), "{answer}");
        assert!(answer.contains("127.0.0.1 is loopback (127.0.0.0/8, RFC 1122)"), "{answer}");
    }

    #[tokio::test]
    async fn ipv6_spellings_of_private_ipv4_are_refused_by_their_embedded_address() {
        let proxy = start(Arc::new(EgressPolicy::default())).await;
        for (target, why) in [
            ("[::ffff:0:7f00:1]:80", "IPv4-translated (::ffff:0:0:0/96, RFC 2765) embedding 127.0.0.1: loopback"),
            ("[2002:a00:1::1]:443", "6to4 (2002::/16, RFC 3056) embedding 10.0.0.1: private-use (10.0.0.0/8"),
            ("[64:ff9b::a9fe:a9fe]:80", "NAT64 well-known prefix (64:ff9b::/96, RFC 6052) embedding 169.254.169.254"),
        ] {
            let answer = ask(&proxy, &format!("CONNECT {target} HTTP/1.1\r\n\r\n")).await;
            assert!(answer.starts_with("HTTP/1.1 403") && answer.contains(why), "{target}: {answer}");
        }
    }

    #[tokio::test]
    async fn the_grid_s_ordinary_access_names_itself_not_public_web_only() {
        let proxy = start(Arc::new(RequestRules::ordinary(false))).await;
        let answer = ask(&proxy, "GET http://10.0.0.5/ HTTP/1.1\r\nHost: 10.0.0.5\r\n\r\n").await;
        let shown = "refused by the grid's ordinary network access (its private-network guard): \
                     10.0.0.5 is not a public address: private-use (10.0.0.0/8, RFC 1918)";
        assert!(answer.starts_with("HTTP/1.1 403") && answer.contains(shown), "{answer}");
        assert!(!answer.contains("public-web-only"), "{answer}");
    }

    /// Refuses every host but one, whatever its address.
    struct OnlyHost(&'static str);

    impl Policy for OnlyHost {
        fn refuse_host(&self, host: &str) -> Option<HostRefusal> {
            (host != self.0).then(|| HostRefusal { rule: "the test's host rule", reason: "is not allowed".into() })
        }

        fn refuse_ip(&self, _ip: IpAddr) -> Option<Special> {
            None
        }

        fn address_rule(&self) -> &'static str {
            "no address rule"
        }
    }

    #[tokio::test]
    async fn host_rule_refuses_connect_before_resolving_and_allowed_hosts_are_tunnelled() {
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up_port = upstream.local_addr().unwrap().port();
        let proxy = start(Arc::new(OnlyHost("127.0.0.1"))).await;
        let mut s = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        s.write_all(format!("CONNECT LocalHost:{up_port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert!(answer.ends_with("refused by the test's host rule: localhost: is not allowed\n"), "{answer}");
        let d = proxy.decision_for("LocalHost").expect("recorded");
        assert!(!d.allowed && d.detail.contains("localhost: is not allowed") && d.reason == "is not allowed", "{d:?}");

        tunnel_carries_a_ping(&proxy, &format!("127.0.0.1:{up_port}"), &upstream).await;
    }

    /// CONNECTs to `authority` through `proxy`, which must answer 200 and
    /// relay what follows to the connection `arriving` accepts.
    async fn tunnel_carries_a_ping(proxy: &EgressProxy, authority: &str, arriving: &TcpListener) {
        let mut s = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        s.write_all(format!("CONNECT {authority} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
        let (mut inside, _) = arriving.accept().await.unwrap();
        let (head, _) = read_head(&mut s, MAX_HEAD).await.unwrap();
        assert!(head.starts_with(b"HTTP/1.1 200 Connection Established\r\n"), "{}", String::from_utf8_lossy(&head));
        s.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        inside.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
    }

    /// An upstream on 127.0.0.1 that answers every CONNECT 200 and relays to
    /// the address asked for; returns its port and the CONNECT lines it saw.
    async fn connect_upstream() -> (u16, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = listener.accept().await {
                let s = s.clone();
                tokio::spawn(async move {
                    let (head, _) = read_head(&mut c, MAX_HEAD).await.unwrap();
                    let line = String::from_utf8_lossy(&head).lines().next().unwrap_or("").to_string();
                    s.lock().unwrap().push(line.clone());
                    let target = line.split_whitespace().nth(1).unwrap_or("").to_string();
                    let mut up = TcpStream::connect(target).await.unwrap();
                    c.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut c, &mut up).await;
                });
            }
        });
        (port, seen)
    }

    #[tokio::test]
    async fn routed_traffic_is_checked_first_and_reaches_the_upstream_as_the_checked_address() {
        let (up_port, seen) = connect_upstream().await;
        let origin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin_port = origin.local_addr().unwrap().port();
        let upstream = Upstream {
            proxy: grid_core::validate::proxy::parse_url(&format!("http://127.0.0.1:{up_port}")).unwrap(),
            allow_private: true,
        };
        let proxy = start(routed(Arc::new(OnlyHost("localhost")), Some(upstream))).await;

        // Refused by the host rule: the upstream sees nothing.
        let answer = ask(&proxy, "CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert!(seen.lock().unwrap().is_empty());

        // Allowed: the upstream is asked for the address the proxy resolved, not the name.
        tunnel_carries_a_ping(&proxy, &format!("localhost:{origin_port}"), &origin).await;
        let line = seen.lock().unwrap()[0].clone();
        assert!(line == format!("CONNECT 127.0.0.1:{origin_port} HTTP/1.1") || line.contains("[::1]"), "{line}");
        let d = proxy.decision_for("localhost").unwrap();
        assert!(d.allowed && d.detail.ends_with(&format!("via upstream proxy http://127.0.0.1:{up_port}")), "{d:?}");
    }

    #[tokio::test]
    async fn a_name_that_does_not_resolve_is_a_bad_gateway_not_a_refusal() {
        let proxy = start(Arc::new(EgressPolicy::default())).await;
        let mut s = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        s.write_all(b"GET http://no-such-host.invalid/ HTTP/1.1\r\nHost: no-such-host.invalid\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
        assert!(answer.contains(&format!("{REFUSED_HEADER}: failed\r\n")), "{answer}");
        assert!(answer.contains(&format!("{REASON_HEADER}: no-such-host.invalid does not resolve (DNS: ")), "{answer}");
        let d = proxy.decision_for("no-such-host.invalid").unwrap();
        assert!(d.allowed && d.failure.unwrap().starts_with("no-such-host.invalid does not resolve"));
    }

    #[tokio::test]
    async fn a_refused_connection_is_named_as_such() {
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let proxy = start(Arc::new(OnlyHost("127.0.0.1"))).await;
        let answer = ask(&proxy, &format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: x\r\n\r\n")).await;
        assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
        assert!(answer.contains(&format!("{REASON_HEADER}: connection to 127.0.0.1:{port} refused\r\n")), "{answer}");
        let answer = ask(&proxy, &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n")).await;
        assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
        let d = proxy.decision_for("127.0.0.1").unwrap();
        assert_eq!(d.failure, Some(format!("connection to 127.0.0.1:{port} refused")));
    }

    /// A server on 127.0.0.1 that answers every request of a connection
    /// (kept alive) `ok`, and keeps each request head it read.
    async fn keep_alive_origin() -> (u16, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = listener.accept().await {
                let s = s.clone();
                tokio::spawn(async move {
                    let mut rest = Vec::new();
                    loop {
                        let mut buf = rest.clone();
                        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                            let mut chunk = [0u8; 4096];
                            match c.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                        rest = buf.split_off(end);
                        s.lock().unwrap().push(String::from_utf8_lossy(&buf).to_string());
                        let answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nx-grid-egress: refused\r\n\r\nok";
                        if c.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (port, seen)
    }

    /// Reads one answer with a `Content-Length` body off `s`.
    async fn read_answer(s: &mut TcpStream) -> String {
        let (head, mut body) = read_head(s, MAX_HEAD).await.unwrap();
        let head = String::from_utf8_lossy(&head).to_string();
        let len: usize = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(|v| v.trim().parse().unwrap()))
            .unwrap_or(0);
        while body.len() < len {
            let mut chunk = [0u8; 4096];
            let n = s.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed mid-body: {head}");
            body.extend_from_slice(&chunk[..n]);
        }
        format!("{head}{}", String::from_utf8_lossy(&body))
    }

    #[tokio::test]
    async fn every_request_of_a_kept_alive_connection_is_checked() {
        let (port, seen) = keep_alive_origin().await;
        let proxy = start(Arc::new(OnlyHost("127.0.0.1"))).await;
        let mut s = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        let first = format!("GET http://127.0.0.1:{port}/a HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
        s.write_all(first.as_bytes()).await.unwrap();
        let answer = read_answer(&mut s).await;
        assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"), "{answer}");
        // The target's own x-grid-egress is not passed on: only the grid sets it.
        assert!(!answer.to_ascii_lowercase().contains(REFUSED_HEADER), "{answer}");
        // Same connection, another host: checked, refused, never relayed.
        let second = format!("GET http://localhost:{port}/b HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n");
        s.write_all(second.as_bytes()).await.unwrap();
        let answer = read_answer(&mut s).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert!(answer.ends_with("refused by the test's host rule: localhost: is not allowed\n"), "{answer}");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert!(seen[0].starts_with("GET /a HTTP/1.1\r\n"), "{seen:?}");
    }

    #[tokio::test]
    async fn plain_http_goes_to_an_http_upstream_in_absolute_form_with_its_credentials() {
        let (up_port, seen) = keep_alive_origin().await;
        let upstream = Upstream {
            proxy: grid_core::validate::proxy::parse_url(&format!("http://u:p@127.0.0.1:{up_port}")).unwrap(),
            allow_private: true,
        };
        let proxy = start(routed(Arc::new(OnlyHost("localhost")), Some(upstream))).await;
        let mut s = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        let request =
            "GET http://localhost:8080/x?y HTTP/1.1\r\nHost: localhost:8080\r\nProxy-Connection: keep-alive\r\n\r\n";
        s.write_all(request.as_bytes()).await.unwrap();
        let answer = read_answer(&mut s).await;
        assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"), "{answer}");
        let seen = seen.lock().unwrap().clone();
        assert!(seen[0].starts_with("GET http://localhost:8080/x?y HTTP/1.1\r\n"), "{seen:?}");
        // base64("u:p")
        assert!(seen[0].contains("\r\nProxy-Authorization: Basic dTpw\r\n"), "{seen:?}");
        assert!(seen[0].contains("\r\nHost: localhost:8080\r\n") && !seen[0].contains("Proxy-Connection"), "{seen:?}");
    }
}
