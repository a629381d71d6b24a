//! Requests for a session whose browser runs on another node, forwarded to
//! that node over its advertised address (docs/scale-out.md).
//!
//! A session's browser, and the files its pages downloaded, live on one
//! node; any node answers its cdpUrl and its downloads by passing the
//! request on, as it came, with the nodes' credential
//! (`peers::CREDENTIAL_HEADER`) and the public address the client used
//! (`peers::FORWARDED_BASE_HEADER`, so discovery answers point back through
//! the node the client talks to). A WebSocket upgrade is passed on too; the
//! two connections are then joined byte for byte, and when either side
//! closes (the session ended on its node, or the client left) both close.
//!
//! A forwarded request is never forwarded again: the node that receives it
//! answers from what it holds, so two nodes that disagree cannot bounce a
//! request between them.

use grid_core::error::ApiError;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, HOST};
use hyper::{HeaderMap, Request, Response, StatusCode, Version};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;

use super::respond::Resp;
use crate::app::App;
use crate::peers::{CREDENTIAL_HEADER, FORWARDED_BASE_HEADER};
use crate::store::sessions as store;
use crate::store::StoreError;

/// Headers of one hop only (RFC 9110 7.6.1), never passed on, but for an
/// upgrade's `connection` and `upgrade`.
const HOP_BY_HOP: [&str; 7] =
    ["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"];

/// Whether the request came from another node of the grid (it carries the
/// nodes' credential).
pub fn from_peer(app: &App, headers: &HeaderMap) -> bool {
    headers.get(CREDENTIAL_HEADER).is_some_and(|v| app.peers.admits(v.as_bytes()))
}

/// The public address the client used: the forwarding node's, on a request
/// another node passed on; this node's own otherwise.
pub fn public_base(app: &App, headers: &HeaderMap) -> String {
    let forwarded = headers.get(FORWARDED_BASE_HEADER).and_then(|v| v.to_str().ok());
    match forwarded {
        Some(base) if from_peer(app, headers) && (base.starts_with("http://") || base.starts_with("https://")) => {
            base.trim_end_matches('/').to_string()
        }
        _ => app.config.base_url.clone(),
    }
}

/// Where a session's browser, and the files its pages downloaded, are
/// served, as this request may reach them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    /// On this node: placed here, or leased before nodes were recorded.
    Here,
    /// On the node at this advertised address.
    At(String),
    /// On another node this request is not passed to: it advertises no
    /// address, or the request is already a forwarded one (never passed on
    /// twice).
    Unreachable,
}

/// A session's record as the transports need it: where it is served,
/// whether it is live and its token's hash. Each caller decides what an
/// ended session or a token it does not check means for it.
#[derive(Debug, Clone)]
pub struct Whereabouts {
    pub served: Served,
    pub live: bool,
    pub token_sha256: String,
}

/// Where `session_id` is served, from its record; `None` for an unknown
/// session.
pub async fn locate(app: &App, session_id: &str, headers: &HeaderMap) -> Result<Option<Whereabouts>, StoreError> {
    let id = session_id.to_string();
    let Some(route) = app.store.read(move |c| store::route(c, &id)).await? else { return Ok(None) };
    let served = served(&route, &app.config.node, from_peer(app, headers));
    Ok(Some(Whereabouts { served, live: route.live, token_sha256: route.token_sha256 }))
}

fn served(route: &store::Route, this_node: &str, forwarded: bool) -> Served {
    match &route.node {
        Some(node) if node != this_node => match &route.advertise_url {
            Some(url) if !forwarded => Served::At(url.clone()),
            _ => Served::Unreachable,
        },
        _ => Served::Here,
    }
}

/// Passes `req` on to the node at `to` and answers with its answer;
/// `unreachable` when that node cannot be reached.
pub async fn forward(app: &App, to: &str, req: Request<Incoming>, unreachable: ApiError) -> Result<Resp, ApiError> {
    let base = public_base(app, req.headers());
    match pass_on(app, to, &base, req).await {
        Ok(resp) => Ok(resp),
        Err(e) => {
            tracing::warn!(node = to, error = %e, "request for another node not passed on");
            Err(unreachable)
        }
    }
}

async fn pass_on(app: &App, to: &str, public_base: &str, mut req: Request<Incoming>) -> anyhow::Result<Resp> {
    let target = url::Url::parse(to)?;
    anyhow::ensure!(target.scheme() == "http", "only http:// advertised addresses are supported, not {to}");
    let host = target.host_str().ok_or_else(|| anyhow::anyhow!("no host in {to}"))?.to_string();
    let port = target.port_or_known_default().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port)).await?;
    stream.set_nodelay(true)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "forwarded connection ended");
        }
    });

    let upgrade = is_upgrade(req.headers());
    let client_side = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = format!("{}{path}", target.path().trim_end_matches('/')).parse()?;
    parts.version = Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers, upgrade);
    let authority = match target.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.clone(),
    };
    parts.headers.insert(HOST, HeaderValue::from_str(&authority)?);
    parts.headers.insert(HeaderName::from_static(CREDENTIAL_HEADER), HeaderValue::from_str(app.peers.credential())?);
    parts.headers.insert(HeaderName::from_static(FORWARDED_BASE_HEADER), HeaderValue::from_str(public_base)?);

    let mut resp = sender.send_request(Request::from_parts(parts, body)).await?;
    if let (StatusCode::SWITCHING_PROTOCOLS, Some(client_side)) = (resp.status(), client_side) {
        let node_side = hyper::upgrade::on(&mut resp);
        tokio::spawn(async move {
            let (Ok(client), Ok(node)) = tokio::join!(client_side, node_side) else { return };
            join(TokioIo::new(client), TokioIo::new(node)).await;
        });
    } else {
        strip_hop_by_hop(resp.headers_mut(), false);
    }
    let (parts, body) = resp.into_parts();
    Ok(Response::from_parts(parts, body.map_err(std::io::Error::other).boxed_unsync()))
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.get(hyper::header::UPGRADE).is_some()
}

fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    for name in HOP_BY_HOP {
        if keep_upgrade && (name == "connection" || name == "upgrade") {
            continue;
        }
        headers.remove(name);
    }
}

/// Copies bytes both ways until either side closes or fails; then both are
/// closed, so a session ended on its node cuts its client at once.
async fn join<A, B>(a: A, b: B)
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut a_read, mut a_write) = tokio::io::split(a);
    let (mut b_read, mut b_write) = tokio::io::split(b);
    tokio::select! {
        _ = tokio::io::copy(&mut a_read, &mut b_write) => {}
        _ = tokio::io::copy(&mut b_read, &mut a_write) => {}
    }
    let _ = a_write.shutdown().await;
    let _ = b_write.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_passed_on_only_to_another_node_with_an_address_and_only_once() {
        let route = |node: Option<&str>, url: Option<&str>| store::Route {
            token_sha256: "h".into(),
            live: true,
            node: node.map(str::to_string),
            advertise_url: url.map(str::to_string),
        };
        let there = route(Some("n2"), Some("http://n2:8080"));
        assert_eq!(served(&there, "n1", false), Served::At("http://n2:8080".into()));
        assert_eq!(served(&there, "n1", true), Served::Unreachable);
        assert_eq!(served(&route(Some("n2"), None), "n1", false), Served::Unreachable);
        assert_eq!(served(&route(Some("n1"), Some("http://n1:8080")), "n1", false), Served::Here);
        assert_eq!(served(&route(None, None), "n1", true), Served::Here);
    }

    #[test]
    fn hop_by_hop_headers_stay_on_their_hop() {
        let mut h = HeaderMap::new();
        for (k, v) in [("connection", "Upgrade"), ("upgrade", "websocket"), ("te", "trailers"), ("x-keep", "1")] {
            h.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        let mut upgrade = h.clone();
        strip_hop_by_hop(&mut upgrade, true);
        assert!(upgrade.contains_key("connection") && upgrade.contains_key("upgrade"));
        assert!(!upgrade.contains_key("te"));
        strip_hop_by_hop(&mut h, false);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-keep"));
    }

    #[tokio::test]
    async fn either_side_closing_closes_both() {
        use tokio::io::AsyncReadExt;
        let (client, client_far) = tokio::io::duplex(64);
        let (node, mut node_far) = tokio::io::duplex(64);
        let joined = tokio::spawn(join(client_far, node));
        let (mut client_read, mut client_write) = tokio::io::split(client);
        client_write.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        node_far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        // The node's side closes: the client reads the end.
        drop(node_far);
        joined.await.unwrap();
        let mut rest = vec![];
        assert_eq!(client_read.read_to_end(&mut rest).await.unwrap(), 0);
    }
}
