//! Keeps captures off loopback, private and link-local networks: checked
//! after DNS resolution (so a public name pointing at 127.0.0.1 is refused)
//! and again on every redirect. `--allow-private-networks` lifts it.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use grid_core::netaddr::is_public;
use hyper_util::client::legacy::connect::dns::Name;
use url::Url;

/// The error a refused destination surfaces as, found again by walking the
/// request error's sources.
#[derive(Debug, thiserror::Error)]
#[error("destination refused: {0} is not a public address (the grid does not fetch from private networks)")]
pub struct DestinationRefused(pub String);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The fetch client's resolver: the system's, dropping non-public
/// addresses (and failing when none is left) unless private networks are
/// allowed. Literal IP hosts never reach it (`check_literal_host`).
#[derive(Debug, Clone, Copy)]
pub struct Resolver {
    pub public_only: bool,
}

impl tower_service::Service<Name> for Resolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let (host, public_only) = (name.as_str().to_string(), self.public_only);
        Box::pin(async move { resolve(&host, public_only).await.map(Vec::into_iter) })
    }
}

async fn resolve(host: &str, public_only: bool) -> Result<Vec<SocketAddr>, BoxError> {
    let all: Vec<SocketAddr> = tokio::net::lookup_host((host, 0)).await?.collect();
    if !public_only {
        return Ok(all);
    }
    let public: Vec<SocketAddr> = all.iter().copied().filter(|a| is_public(a.ip())).collect();
    if public.is_empty() && !all.is_empty() {
        let shown = all.iter().map(|a| a.ip().to_string()).collect::<Vec<_>>().join(", ");
        return Err(Box::new(DestinationRefused(format!("{host} ({shown})"))));
    }
    Ok(public)
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
        let err = resolve("localhost", true).await.expect_err("refused");
        assert!(refused_in(err.as_ref()).is_some(), "{err}");
        assert!(!resolve("localhost", false).await.unwrap().is_empty());
    }
}
