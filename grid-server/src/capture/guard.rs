//! Keeps captures off loopback, private and link-local networks: checked
//! after DNS resolution (so a public name pointing at 127.0.0.1 is refused)
//! and again on every redirect. `--allow-private-networks` lifts it.

use std::net::{IpAddr, SocketAddr};

use grid_core::netaddr::is_public;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::Url;

/// The error a refused destination surfaces as, found again by walking the
/// request error's sources.
#[derive(Debug, thiserror::Error)]
#[error("destination refused: {0} is not a public address (the grid does not fetch from private networks)")]
pub struct DestinationRefused(pub String);

/// A resolver that drops non-public addresses and fails when none is left.
pub struct PublicOnlyResolver;

impl Resolve for PublicOnlyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<SocketAddr> = all.iter().copied().filter(|a| is_public(a.ip())).collect();
            if public.is_empty() && !all.is_empty() {
                let shown = all.iter().map(|a| a.ip().to_string()).collect::<Vec<_>>().join(", ");
                return Err(Box::new(DestinationRefused(format!("{host} ({shown})"))) as _);
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

/// Refuses a URL whose host is a literal non-public IP (such hosts never
/// reach the resolver).
pub fn check_literal_host(url: &Url) -> Result<(), DestinationRefused> {
    let ip: Option<IpAddr> = match url.host() {
        Some(url::Host::Ipv4(v4)) => Some(v4.into()),
        Some(url::Host::Ipv6(v6)) => Some(v6.into()),
        _ => None,
    };
    match ip {
        Some(ip) if !is_public(ip) => Err(DestinationRefused(ip.to_string())),
        _ => Ok(()),
    }
}

/// Finds a `DestinationRefused` among an error's sources.
pub fn refused_in<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a DestinationRefused> {
    let mut cur: Option<&'a (dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(r) = e.downcast_ref::<DestinationRefused>() {
            return Some(r);
        }
        cur = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_private_hosts_are_refused() {
        for u in ["http://127.0.0.1:8080/", "http://[::1]/", "http://10.0.0.1/", "http://169.254.169.254/latest"] {
            assert!(check_literal_host(&Url::parse(u).unwrap()).is_err(), "{u}");
        }
        assert!(check_literal_host(&Url::parse("http://93.184.216.34/").unwrap()).is_ok());
        assert!(check_literal_host(&Url::parse("http://example.test/").unwrap()).is_ok());
    }

    #[tokio::test]
    async fn resolver_refuses_names_that_resolve_to_loopback() {
        let err = PublicOnlyResolver.resolve("localhost".parse().unwrap()).await.err().expect("refused");
        assert!(refused_in(err.as_ref()).is_some(), "{err}");
    }
}
