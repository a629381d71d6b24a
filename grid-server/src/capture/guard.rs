//! Keeps captures off loopback, private and link-local networks (every
//! non-public address of `grid_core::netaddr`'s special-purpose table):
//! checked after DNS resolution (so a public name pointing at 127.0.0.1 is
//! refused) and again on every redirect. `--allow-private-networks` lifts it.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use grid_core::netaddr;
use hyper_util::client::legacy::connect::dns::Name;
use url::Url;

/// The error a refused destination surfaces as, found again by walking the
/// request error's sources. It holds the destination and the rule that
/// applied (`grid_core::netaddr::not_public`): `127.0.0.1 is not a public
/// address: loopback (127.0.0.0/8, RFC 1122)`.
#[derive(Debug, thiserror::Error)]
#[error(
    "destination refused: {0}; the grid does not fetch from private networks unless started with \
     --allow-private-networks"
)]
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

pub async fn resolve(host: &str, public_only: bool) -> Result<Vec<SocketAddr>, BoxError> {
    resolve_for(host, public_only, false).await
}

/// [`resolve`], and with `every` refused unless every address `host`
/// resolves to is public: for a request sent on by name to an upstream
/// proxy, which resolves it again and may pick any of them.
pub async fn resolve_for(host: &str, public_only: bool, every: bool) -> Result<Vec<SocketAddr>, BoxError> {
    let unresolved = |why: String| Box::new(DoesNotResolve { host: host.to_string(), why });
    let all: Vec<SocketAddr> =
        tokio::net::lookup_host((host, 0)).await.map_err(|e| unresolved(e.to_string()))?.collect();
    if all.is_empty() {
        return Err(unresolved("no address".into()));
    }
    if !public_only {
        return Ok(all);
    }
    let (public, refused) = netaddr::sort_out(&all, |a| a.ip(), netaddr::special_purpose);
    if (public.is_empty() || every) && !refused.is_empty() {
        return Err(Box::new(DestinationRefused(netaddr::not_public(host, &refused))));
    }
    Ok(public)
}

/// A name the system's resolver gave no address for; the same words as
/// the egress proxy's (`egress::Failed::Dns`).
#[derive(Debug, thiserror::Error)]
#[error("{host} does not resolve (DNS: {why})")]
pub struct DoesNotResolve {
    pub host: String,
    pub why: String,
}

/// Refuses a URL whose host is a literal non-public IP (such hosts never
/// reach the resolver).
pub fn check_literal_host(url: &Url) -> Result<(), DestinationRefused> {
    let ip: Option<IpAddr> = match url.host() {
        Some(url::Host::Ipv4(v4)) => Some(v4.into()),
        Some(url::Host::Ipv6(v6)) => Some(v6.into()),
        _ => None,
    };
    match ip.and_then(|ip| Some((ip, netaddr::special_purpose(ip)?))) {
        Some((ip, special)) => Err(DestinationRefused(netaddr::not_public(&ip.to_string(), &[(ip, special)]))),
        None => Ok(()),
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
        assert!(check_literal_host(&Url::parse("http://[2606:4700::1111]/").unwrap()).is_ok());
        assert!(check_literal_host(&Url::parse("http://example.test/").unwrap()).is_ok());
    }

    #[test]
    fn a_refusal_names_the_address_rule_and_the_flag_that_lifts_the_guard() {
        let refused = |u: &str| check_literal_host(&Url::parse(u).unwrap()).expect_err(u).to_string();
        assert_eq!(
            refused("http://127.0.0.1:8080/"),
            "destination refused: 127.0.0.1 is not a public address: loopback (127.0.0.0/8, RFC 1122); \
             the grid does not fetch from private networks unless started with --allow-private-networks"
        );
        assert!(refused("http://[2002:7f00:1::]/").starts_with(
            "destination refused: 2002:7f00:1:: is not a public address: \
             6to4 (2002::/16, RFC 3056) embedding 127.0.0.1: loopback (127.0.0.0/8, RFC 1122);"
        ));
        for u in ["http://[::ffff:0:7f00:1]/", "http://[::7f00:1]/", "http://[64:ff9b::a00:1]/"] {
            assert!(refused(u).contains("embedding"), "{u}");
        }
    }

    #[tokio::test]
    async fn resolver_refuses_names_that_resolve_to_loopback() {
        let err = resolve("localhost", true).await.expect_err("refused");
        assert!(refused_in(err.as_ref()).is_some(), "{err}");
        let text = err.to_string();
        assert!(text.starts_with("destination refused: localhost is not a public address: "), "{text}");
        assert!(text.contains("127.0.0.1 is loopback (127.0.0.0/8, RFC 1122)"), "{text}");
        assert!(!resolve("localhost", false).await.unwrap().is_empty());
    }
}
