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

use grid_core::netaddr::{self, Special};
use ipnet::IpNet;
use tokio::io::AsyncWriteExt;
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
/// Response header of a refusal (value `refused`), so a browser script can
/// tell the proxy's answer from the target's.
pub const REFUSED_HEADER: &str = "x-grid-egress";
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
                        let (policy, d, stopped) = (policy.clone(), d.clone(), stopped.clone());
                        tokio::spawn(async move {
                            let mut stopped = stopped;
                            tokio::select! {
                                _ = serve(client, policy.as_ref(), &d) => {}
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

async fn serve(mut client: TcpStream, policy: &dyn Policy, decisions: &Mutex<Vec<Decision>>) -> std::io::Result<()> {
    let (head, rest) = read_head(&mut client, MAX_HEAD).await?;
    let head_text = String::from_utf8_lossy(&head).to_string();
    let mut lines = head_text.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split_whitespace();
    let (method, target, version) =
        (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next().unwrap_or("HTTP/1.1"));
    let connect = method.eq_ignore_ascii_case("CONNECT");
    let (host, port, path) = if connect {
        let (h, p) = split_host_port(target, 443);
        (h, p, String::new())
    } else {
        let Ok(url) = url::Url::parse(target) else {
            return refuse(&mut client, "the grid's egress proxy", "it takes absolute http URLs and CONNECT").await;
        };
        let path = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_string(),
        };
        (
            url.host_str().unwrap_or("").trim_matches(['[', ']']).to_string(),
            url.port_or_known_default().unwrap_or(80),
            path,
        )
    };
    let host_key = host_key(&host);
    if let Some(HostRefusal { rule, reason }) = policy.refuse_host(&host_key) {
        let why = format!("{host_key}: {reason}");
        record(decisions, Decision { host: host.clone(), allowed: false, detail: format!("refused: {why}"), reason });
        return refuse(&mut client, rule, &why).await;
    }
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host.as_str(), port)).await.map(|a| a.collect()).unwrap_or_default(),
    };
    if addrs.is_empty() {
        // Not a policy matter: the browser's own lookup would have failed too.
        let detail = format!("allowed; {host} does not resolve");
        record(decisions, Decision { host: host.clone(), allowed: true, detail, reason: String::new() });
        return bad_gateway(&mut client, &format!("{host} does not resolve")).await;
    }
    let (allowed, refused) = netaddr::sort_out(&addrs, |a| a.ip(), |ip| policy.refuse_ip(ip));
    if allowed.is_empty() {
        let why = netaddr::not_public(&host, &refused);
        let (detail, reason) = (format!("refused: {why}"), format!("private network: {why}"));
        record(decisions, Decision { host: host.clone(), allowed: false, detail, reason });
        return refuse(&mut client, policy.address_rule(), &why).await;
    }
    if let Some(through) = policy.upstream() {
        let server = through.proxy.server();
        return match upstream::connect(through, allowed[0]).await {
            Ok(tunnel) => {
                let detail = format!("allowed: {} via upstream proxy {server}", allowed[0].ip());
                record(decisions, Decision { host: host.clone(), allowed: true, detail, reason: String::new() });
                relay(client, tunnel, connect, lines, (method, &path, version), &rest).await
            }
            Err(e) => {
                let detail = format!("allowed; {e}");
                record(decisions, Decision { host: host.clone(), allowed: true, detail, reason: String::new() });
                bad_gateway(&mut client, &e.to_string()).await
            }
        };
    }
    let upstream = match TcpStream::connect(&allowed[..]).await {
        Ok(s) => s,
        Err(e) => {
            record(
                decisions,
                Decision {
                    host: host.clone(),
                    allowed: true,
                    detail: format!("allowed; connect failed: {e}"),
                    reason: String::new(),
                },
            );
            return bad_gateway(&mut client, &e.to_string()).await;
        }
    };
    let detail = format!("allowed: {}", allowed[0].ip());
    record(decisions, Decision { host: host.clone(), allowed: true, detail, reason: String::new() });
    relay(client, Box::new(upstream), connect, lines, (method, &path, version), &rest).await
}

/// Joins the browser's connection to `upstream` (the destination, or a
/// tunnel to it): a CONNECT is answered 200, a plain request is sent on in
/// origin form.
async fn relay(
    mut client: TcpStream,
    mut upstream: Tunnel,
    connect: bool,
    lines: std::str::Split<'_, &str>,
    (method, path, version): (&str, &str, &str),
    rest: &[u8],
) -> std::io::Result<()> {
    if connect {
        client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await?;
    } else {
        let mut out = format!("{method} {path} {version}\r\n");
        for line in lines.filter(|l| !l.is_empty()) {
            let name = line.split(':').next().unwrap_or("").trim().to_ascii_lowercase();
            if !matches!(name.as_str(), "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive") {
                out.push_str(line);
                out.push_str("\r\n");
            }
        }
        // One request per tunnel keeps the policy check per destination.
        out.push_str("Connection: close\r\n\r\n");
        upstream.write_all(out.as_bytes()).await?;
    }
    upstream.write_all(rest).await?;
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    Ok(())
}

/// Reads an HTTP message head (up to and including the blank line) of at
/// most `max` bytes; returns the head and any bytes that came after it.
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

fn split_host_port(target: &str, default_port: u16) -> (String, u16) {
    match target.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => {
            (h.trim_matches(['[', ']']).to_string(), p.parse().unwrap_or(default_port))
        }
        _ => (target.trim_matches(['[', ']']).to_string(), default_port),
    }
}

/// The proxy's 403: `refused by {rule}: {why}`.
async fn refuse(client: &mut TcpStream, rule: &str, why: &str) -> std::io::Result<()> {
    let body = format!("{}\n", refusal_text(rule, why));
    let head = format!(
        "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\n{REFUSED_HEADER}: refused\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await?;
    client.write_all(body.as_bytes()).await
}

/// The text of a refusal page.
fn refusal_text(rule: &str, why: &str) -> String {
    format!("refused by {rule}: {why}")
}

async fn bad_gateway(client: &mut TcpStream, why: &str) -> std::io::Result<()> {
    let body = format!("{why}\n");
    let head = format!("HTTP/1.1 502 Bad Gateway\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    client.write_all(head.as_bytes()).await?;
    client.write_all(body.as_bytes()).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::browser::hosts::RequestRules;
    use tokio::io::AsyncReadExt;

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

    #[test]
    fn connect_targets_split_into_host_and_port() {
        assert_eq!(split_host_port("example.com:8443", 443), ("example.com".into(), 8443));
        assert_eq!(split_host_port("[::1]:443", 443), ("::1".into(), 443));
        assert_eq!(split_host_port("example.com", 443), ("example.com".into(), 443));
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
        let mut head = [0u8; 39];
        s.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 200 Connection Established\r\n\r\n");
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
        assert!(!answer.contains(REFUSED_HEADER), "{answer}");
    }
}
