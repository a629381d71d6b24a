//! Which requests a page may make: the `allowedHosts` parameter of
//! `render-fetch` and `browser-fetch`, and the private-network guard.
//!
//! Both are enforced twice:
//! - on every request the page makes (documents, frames, scripts, images,
//!   XHR/fetch, redirects) through CDP `Fetch` interception; a refused
//!   request fails with `net::ERR_BLOCKED_BY_CLIENT` and is listed in the
//!   item's meta under `blockedRequests`;
//! - at the network edge, by the item's own egress proxy (`crate::egress`,
//!   set as its browser context's proxy): it sees every connection,
//!   WebSockets included, and checks the addresses it resolved itself, so
//!   neither interception's blind spots nor a DNS answer that changes
//!   between the check and the connection get past the rules.

use std::net::IpAddr;

use grid_core::netaddr::{self, Special};

use crate::egress::{HostRefusal, Policy};
use url::Url;

/// How the proxy's refusals name the `allowedHosts` rule.
const ALLOWED_HOSTS_RULE: &str = "the item's allowedHosts";

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The host is neither the item URL's host nor in `allowedHosts`.
    HostNotAllowed,
    /// The host is, or resolves to, a non-public address: which, and the
    /// row of the special-purpose address table it falls in
    /// (`grid_core::netaddr::not_public`).
    PrivateNetwork(String),
}

impl Refusal {
    pub fn reason(&self) -> String {
        match self {
            Refusal::HostNotAllowed => "host not in allowedHosts".to_string(),
            Refusal::PrivateNetwork(detail) => format!("private network: {detail}"),
        }
    }
}

/// The request rules of one item.
#[derive(Debug, Clone)]
pub struct RequestRules {
    /// The item URL's host (always allowed) and the `allowedHosts` entries;
    /// `None`: no host restriction.
    pub allowed_hosts: Option<(String, Vec<String>)>,
    /// Refuse hosts that are or resolve to non-public addresses.
    pub guard_private: bool,
}

impl RequestRules {
    /// The grid's ordinary network access, for a whole browser: any host;
    /// public addresses only unless the operator allows private networks.
    pub fn ordinary(allow_private_networks: bool) -> RequestRules {
        RequestRules { allowed_hosts: None, guard_private: !allow_private_networks }
    }

    /// Whether the page needs request interception at all.
    pub fn intercepts(&self) -> bool {
        self.allowed_hosts.is_some() || self.guard_private
    }

    /// Decides one request. Resolves the host when the private guard is on
    /// and it is a name. Only http(s) and ws(s) URLs are checked; other
    /// schemes (data:, blob:) never reach the network.
    pub async fn check(&self, raw_url: &str) -> Result<(), Refusal> {
        let Ok(url) = Url::parse(raw_url) else { return Ok(()) };
        if !matches!(url.scheme(), "http" | "https" | "ws" | "wss") {
            return Ok(());
        }
        if !self.host_allowed(&host_of(&url)) {
            return Err(Refusal::HostNotAllowed);
        }
        if self.guard_private {
            check_public(&url).await?;
        }
        Ok(())
    }

    /// The `allowedHosts` half: `host` as [`host_of`] writes it.
    fn host_allowed(&self, host: &str) -> bool {
        match &self.allowed_hosts {
            Some((own, allowed)) => host == own || allowed.iter().any(|pattern| host_matches(pattern, host)),
            None => true,
        }
    }
}

/// The same rules at the network edge: an item's egress proxy refuses what
/// the per-request check would, for every connection its browser context
/// opens (WebSockets included, which CDP request interception never sees),
/// on the addresses the proxy itself resolved.
impl Policy for RequestRules {
    fn refuse_host(&self, host: &str) -> Option<HostRefusal> {
        (!self.host_allowed(host))
            .then(|| HostRefusal { rule: ALLOWED_HOSTS_RULE, reason: Refusal::HostNotAllowed.reason() })
    }

    fn refuse_ip(&self, ip: IpAddr) -> Option<Special> {
        if self.guard_private {
            netaddr::special_purpose(ip)
        } else {
            None
        }
    }

    fn address_rule(&self) -> &'static str {
        match self.allowed_hosts {
            None => "the grid's ordinary network access (its private-network guard)",
            Some(_) => "the grid's private-network guard",
        }
    }
}

/// A URL's host as `allowedHosts` entries write it: lower case, IPv6 in
/// brackets, no port.
pub fn host_of(url: &Url) -> String {
    match url.host() {
        Some(url::Host::Ipv6(v6)) => format!("[{v6}]"),
        Some(h) => h.to_string().to_ascii_lowercase(),
        None => String::new(),
    }
}

/// `pattern` is an exact host, or `*.suffix` matching any subdomain of
/// suffix (not suffix itself).
pub fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => {
            host.len() > suffix.len() + 1 && host.ends_with(suffix) && host[..host.len() - suffix.len()].ends_with('.')
        }
        None => pattern == host,
    }
}

/// Refuses a literal non-public IP, or a name of which any address is not
/// public (Chromium may connect to any of them), naming each such address's
/// row of the special-purpose table. A name that does not resolve is let
/// through: the browser's own lookup then fails the same way.
pub async fn check_public(url: &Url) -> Result<(), Refusal> {
    let port = url.port_or_known_default().unwrap_or(80);
    let (host, ips): (String, Vec<IpAddr>) = match url.host() {
        Some(url::Host::Ipv4(v4)) => (v4.to_string(), vec![v4.into()]),
        Some(url::Host::Ipv6(v6)) => (v6.to_string(), vec![v6.into()]),
        Some(url::Host::Domain(name)) => match tokio::net::lookup_host((name, port)).await {
            Ok(addrs) => (name.to_string(), addrs.map(|a| a.ip()).collect()),
            Err(_) => (name.to_string(), vec![]),
        },
        None => (String::new(), vec![]),
    };
    let (_, found) = netaddr::sort_out(&ips, |ip| ip, netaddr::special_purpose);
    if found.is_empty() {
        return Ok(());
    }
    Err(Refusal::PrivateNetwork(netaddr::not_public(&host, &found)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(own: &str, allowed: &[&str], guard_private: bool) -> RequestRules {
        RequestRules {
            allowed_hosts: Some((own.to_string(), allowed.iter().map(|s| s.to_string()).collect())),
            guard_private,
        }
    }

    #[tokio::test]
    async fn own_host_and_listed_hosts_pass_others_are_refused() {
        let r = rules("127.0.0.1", &["cdn.example", "*.img.example"], false);
        assert_eq!(r.check("http://127.0.0.1:9/a.js").await, Ok(()));
        assert_eq!(r.check("https://cdn.example/x").await, Ok(()));
        assert_eq!(r.check("https://a.b.img.example/x").await, Ok(()));
        assert_eq!(r.check("https://img.example/x").await, Err(Refusal::HostNotAllowed));
        assert_eq!(r.check("http://localhost:9/a.js").await, Err(Refusal::HostNotAllowed));
        assert_eq!(r.check("https://evilcdn.example/x").await, Err(Refusal::HostNotAllowed));
        assert_eq!(r.check("data:text/plain,hi").await, Ok(()));
    }

    #[tokio::test]
    async fn no_allowed_hosts_means_no_host_restriction() {
        let r = RequestRules { allowed_hosts: None, guard_private: false };
        assert!(!r.intercepts());
        assert_eq!(r.check("http://anything.example/").await, Ok(()));
    }

    #[tokio::test]
    async fn private_guard_refuses_literals_and_names_resolving_to_loopback() {
        let r = RequestRules { allowed_hosts: None, guard_private: true };
        assert!(matches!(r.check("http://127.0.0.1:8080/").await, Err(Refusal::PrivateNetwork(_))));
        assert!(matches!(r.check("http://[::1]/").await, Err(Refusal::PrivateNetwork(_))));
        assert!(matches!(r.check("http://169.254.169.254/latest").await, Err(Refusal::PrivateNetwork(_))));
        assert!(matches!(r.check("http://localhost:1/").await, Err(Refusal::PrivateNetwork(_))));
        assert!(matches!(r.check("ws://10.0.0.1/socket").await, Err(Refusal::PrivateNetwork(_))));
        assert_eq!(r.check("http://93.184.216.34/").await, Ok(()));
        assert_eq!(r.check("http://[2002:808:808::1]/").await, Ok(()));
    }

    #[tokio::test]
    async fn private_network_reasons_name_the_address_rule() {
        let r = RequestRules::ordinary(false);
        let reason = |url: &'static str| {
            let r = r.clone();
            async move { r.check(url).await.map_err(|e| e.reason()).expect_err(url) }
        };
        assert_eq!(
            reason("http://10.0.0.5/").await,
            "private network: 10.0.0.5 is not a public address: private-use (10.0.0.0/8, RFC 1918)"
        );
        assert_eq!(
            reason("http://[::ffff:7f00:1]/").await,
            "private network: ::ffff:127.0.0.1 is not a public address: \
             IPv4-mapped (::ffff:0:0/96, RFC 4291) embedding 127.0.0.1: loopback (127.0.0.0/8, RFC 1122)"
        );
        for url in ["http://[::7f00:1]/", "http://[2002:7f00:1::]/", "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/"] {
            assert!(reason(url).await.contains("embedding"), "{url}");
        }
        let named = reason("http://localhost:1/").await;
        assert!(named.starts_with("private network: localhost is not a public address: "), "{named}");
        assert!(named.contains("is loopback"), "{named}");
    }

    #[test]
    fn the_proxy_names_allowed_hosts_and_the_private_network_guard() {
        let r = rules("a.example", &[], true);
        assert_eq!(
            r.refuse_host("b.example"),
            Some(HostRefusal { rule: "the item's allowedHosts", reason: "host not in allowedHosts".into() })
        );
        assert_eq!(r.refuse_host("a.example"), None);
        assert_eq!(r.address_rule(), "the grid's private-network guard");
        assert_eq!(r.refuse_ip("10.0.0.1".parse().unwrap()).map(|s| s.name()), Some("private-use"));
        assert_eq!(rules("a.example", &[], false).refuse_ip("10.0.0.1".parse().unwrap()), None);
    }

    #[test]
    fn ipv6_hosts_are_bracketed() {
        assert_eq!(host_of(&Url::parse("http://[::1]:8080/").unwrap()), "[::1]");
        assert_eq!(host_of(&Url::parse("http://Example.COM/").unwrap()), "example.com");
        assert!(host_matches("*.example.com", "a.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
        assert!(!host_matches("*.example.com", "aexample.com"));
    }
}
