//! `public-web-only/v1`: every request of a session's browser goes through
//! this filtering proxy (Chromium runs with `--proxy-server` and
//! `--proxy-bypass-list=<-loopback>`). The proxy resolves the destination
//! itself and refuses any that is not a public address, so neither a page
//! nor the lessee's CDP commands can reach private, loopback, link-local or
//! metadata addresses. Each session gets its own proxy, whose decisions are
//! the evidence for the session's network attestation.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use grid_core::netaddr::is_public;
use ipnet::IpNet;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const MAX_HEAD: usize = 32 * 1024;
/// Opening words of the page a refused request gets.
pub const REFUSAL_TEXT: &str = "refused by the grid's network policy public-web-only/v1";
const KEPT_DECISIONS: usize = 200;

/// Which addresses count as public. Tests on a closed machine name extra
/// ranges to treat as public (`--session-treat-as-public`); operators leave it empty.
#[derive(Debug, Clone, Default)]
pub struct EgressPolicy {
    pub treat_as_public: Vec<IpNet>,
}

impl EgressPolicy {
    pub fn allows(&self, ip: IpAddr) -> bool {
        is_public(ip) || self.treat_as_public.iter().any(|n| n.contains(&ip))
    }
}

/// One decision of the proxy: the destination and what was done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub host: String,
    pub allowed: bool,
    pub detail: String,
}

pub struct EgressProxy {
    pub port: u16,
    decisions: Arc<Mutex<Vec<Decision>>>,
    stop: watch::Sender<bool>,
}

impl EgressProxy {
    pub async fn start(policy: Arc<EgressPolicy>) -> std::io::Result<EgressProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let decisions = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = watch::channel(false);
        let d = decisions.clone();
        tokio::spawn(async move {
            let mut stopped_accept = stopped.clone();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((client, _)) = accepted else { continue };
                        let (policy, d, stopped) = (policy.clone(), d.clone(), stopped.clone());
                        tokio::spawn(async move {
                            let mut stopped = stopped;
                            tokio::select! {
                                _ = serve(client, &policy, &d) => {}
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

async fn serve(mut client: TcpStream, policy: &EgressPolicy, decisions: &Mutex<Vec<Decision>>) -> std::io::Result<()> {
    let (head, rest) = super::read_head(&mut client, MAX_HEAD).await?;
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
            return refuse(&mut client, "the proxy takes absolute http URLs and CONNECT").await;
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
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host.as_str(), port)).await.map(|a| a.collect()).unwrap_or_default(),
    };
    let allowed: Vec<SocketAddr> = addrs.iter().copied().filter(|a| policy.allows(a.ip())).collect();
    if allowed.is_empty() {
        let shown = addrs.iter().map(|a| a.ip().to_string()).collect::<Vec<_>>().join(", ");
        let detail = if addrs.is_empty() {
            format!("refused: {host} does not resolve")
        } else {
            format!("refused: {host} resolves to non-public {shown}")
        };
        record(decisions, Decision { host: host.clone(), allowed: false, detail: detail.clone() });
        return refuse(&mut client, &detail).await;
    }
    let mut upstream = match TcpStream::connect(&allowed[..]).await {
        Ok(s) => s,
        Err(e) => {
            record(
                decisions,
                Decision { host: host.clone(), allowed: true, detail: format!("allowed; connect failed: {e}") },
            );
            return bad_gateway(&mut client, &e.to_string()).await;
        }
    };
    record(decisions, Decision { host: host.clone(), allowed: true, detail: format!("allowed: {}", allowed[0].ip()) });
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
    upstream.write_all(&rest).await?;
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    Ok(())
}

fn split_host_port(target: &str, default_port: u16) -> (String, u16) {
    match target.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => {
            (h.trim_matches(['[', ']']).to_string(), p.parse().unwrap_or(default_port))
        }
        _ => (target.trim_matches(['[', ']']).to_string(), default_port),
    }
}

async fn refuse(client: &mut TcpStream, why: &str) -> std::io::Result<()> {
    let body = format!("{REFUSAL_TEXT}: {why}\n");
    let head = format!(
        "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await?;
    client.write_all(body.as_bytes()).await
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
    use tokio::io::AsyncReadExt;

    #[test]
    fn treat_as_public_widens_only_the_named_ranges() {
        let p = EgressPolicy { treat_as_public: vec!["127.0.0.1/32".parse().unwrap()] };
        assert!(p.allows("127.0.0.1".parse().unwrap()));
        assert!(!p.allows("127.0.0.2".parse().unwrap()));
        assert!(!p.allows("169.254.169.254".parse().unwrap()));
        assert!(p.allows("93.184.216.34".parse().unwrap()));
        assert!(!EgressPolicy::default().allows("127.0.0.1".parse().unwrap()));
    }

    #[test]
    fn connect_targets_split_into_host_and_port() {
        assert_eq!(split_host_port("example.com:8443", 443), ("example.com".into(), 8443));
        assert_eq!(split_host_port("[::1]:443", 443), ("::1".into(), 443));
        assert_eq!(split_host_port("example.com", 443), ("example.com".into(), 443));
    }

    #[tokio::test]
    async fn private_destinations_are_refused_and_recorded() {
        let proxy = EgressProxy::start(Arc::new(EgressPolicy::default())).await.unwrap();
        let mut s = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        s.write_all(b"GET http://169.254.169.254/latest HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        let d = proxy.decision_for("169.254.169.254").expect("recorded");
        assert!(!d.allowed && d.detail.contains("non-public"), "{d:?}");
    }
}
