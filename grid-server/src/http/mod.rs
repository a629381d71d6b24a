//! The HTTP API: a hyper 1 server (HTTP/1.1 and HTTP/2, optionally over
//! TLS: `tls.rs`) and one router.

mod auth;
mod cdp;
mod downloads;
pub mod limits;
mod mcp;
mod mcp_tools;
pub mod respond;
pub mod tls;

use std::convert::Infallible;
use std::sync::Arc;

use grid_core::error::ApiError;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::api::meta;
use crate::api::{self, Call};
use respond::Resp;

use crate::app::App;

/// Serves until `shutdown` turns true, then lets open connections finish
/// (at most 10 s). With `tls`, each connection first completes a TLS
/// handshake. HTTP/1.1 and HTTP/2 are both spoken (over TLS as ALPN chose,
/// in the clear with HTTP/2 by prior knowledge); HTTP/1.1 connections may be
/// upgraded (CDP WebSockets). Connections over the bounds of
/// `app.limits` are closed as they are accepted (docs/limits.md).
pub async fn serve(
    app: Arc<App>,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = tokio::task::JoinSet::new();
    let mut backoff = crate::accept::Backoff::default();
    loop {
        while connections.try_join_next().is_some() {}
        tokio::select! {
            accepted = crate::accept::accept(&listener, &mut backoff, "api") => {
                let Some((stream, peer)) = accepted else { continue };
                let permit = match app.limits.admit(peer.ip()) {
                    Ok(p) => p,
                    Err(cut) => {
                        crate::metrics::get().connections_cut.with_label_values(&[cut.label()]).inc();
                        tracing::debug!(%peer, reason = cut.label(), "connection refused");
                        continue;
                    }
                };
                let (app, stop, tls) = (app.clone(), shutdown.clone(), tls.clone());
                connections.spawn(async move {
                    let _counted = permit;
                    match tls {
                        None => serve_connection(app, stream, stop).await,
                        Some(acceptor) => {
                            if let Some(stream) = tls::handshake(&acceptor, stream).await {
                                serve_connection(app, stream, stop).await
                            }
                        }
                    }
                });
            }
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(std::time::Duration::from_secs(10), drain).await.is_err() {
        tracing::warn!("open connections did not finish within 10 s");
    }
}

/// One connection, HTTP/1.1 or HTTP/2 (told apart by its first bytes), until
/// it ends, the server stops, or it goes without a request for too long.
async fn serve_connection<I>(app: Arc<App>, io: I, mut stop: watch::Receiver<bool>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let bounds = app.limits.conn;
    let (tracker, activity) = limits::Tracker::new();
    let service = service_fn(move |req| {
        let app = app.clone();
        // The request counts as in flight until its response is sent in
        // full (a streamed download included).
        let in_flight = tracker.begin();
        async move {
            let resp = route(&app, req).await;
            Ok::<_, Infallible>(resp.map(|body| {
                body.map_frame(move |frame| {
                    let _held = &in_flight;
                    frame
                })
                .boxed_unsync()
            }))
        }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // A client that does not send its request head in time is cut, so a
    // handful of slow connections cannot hold the server (docs/limits.md).
    builder.http1().timer(TokioTimer::new()).header_read_timeout(bounds.header_read_timeout);
    // Pings find HTTP/2 peers that went away with streams open; idle ones
    // are closed by the watchdog below.
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(H2_KEEP_ALIVE)
        .keep_alive_timeout(H2_KEEP_ALIVE)
        .max_concurrent_streams(H2_MAX_STREAMS);
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(conn);
    // Before a protocol is chosen (the first bytes) and on an HTTP/2
    // connection, hyper has no time-out of its own: a connection with
    // nothing in flight is ended here.
    let idle = limits::idle_out(activity, bounds.header_read_timeout, bounds.idle_timeout);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = async { let _ = stop.wait_for(|s| *s).await; } => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
        cut = idle => {
            crate::metrics::get().connections_cut.with_label_values(&[cut.label()]).inc();
            if cut == limits::Cut::Idle {
                // Nothing is in flight: an HTTP/2 client is told (GOAWAY);
                // one that does not take it is dropped after a while.
                conn.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(bounds.header_read_timeout, conn).await;
            }
            return;
        }
    };
    if let Err(e) = result {
        if e.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_timeout) {
            crate::metrics::get().connections_cut.with_label_values(&[limits::Cut::HeaderTimeout.label()]).inc();
        }
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// Interval of HTTP/2 pings, and how long a ping may go unanswered.
const H2_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(20);
/// Streams one HTTP/2 connection may have open at once.
const H2_MAX_STREAMS: u32 = 100;

async fn route(app: &Arc<App>, req: Request<Incoming>) -> Resp {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let started = std::time::Instant::now();
    let answered = match too_large(&req) {
        Some(e) => Err(e),
        None => dispatch(app, req).await,
    };
    let resp = match answered {
        Ok(r) => r,
        Err(e) => respond::error(&e),
    };
    let elapsed = started.elapsed();
    let m = crate::metrics::get();
    let route = route_label(&path);
    m.http_requests.with_label_values(&[route, method.as_str(), resp.status().as_str()]).inc();
    m.http_seconds.with_label_values(&[route]).observe(crate::metrics::secs(elapsed));
    let path = loggable_path(&path);
    tracing::debug!(%method, %path, status = resp.status().as_u16(), ms = elapsed.as_millis() as u64, "request");
    resp
}

/// A request whose declared length is over the bound is refused before its
/// body is read (one chunked without a length is cut while read).
fn too_large(req: &Request<Incoming>) -> Option<ApiError> {
    let declared = req.headers().get(hyper::header::CONTENT_LENGTH)?.to_str().ok()?.parse::<u64>().ok()?;
    (declared > limits::MAX_BODY_BYTES as u64)
        .then_some(ApiError::BodyTooLarge { limit_bytes: limits::MAX_BODY_BYTES as u64 })
}

/// A path as its route's template, the `route` label of the HTTP metrics:
/// ids and tokens never become label values (one series per route).
fn route_label(path: &str) -> &'static str {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["healthz"] => "/healthz",
        [".well-known", "oauth-protected-resource"] => "/.well-known/oauth-protected-resource",
        [".well-known", "oauth-protected-resource", "mcp"] => "/.well-known/oauth-protected-resource/mcp",
        ["openapi.json"] => "/openapi.json",
        ["downloads", _, _] => "/downloads/{jobId}/{kind}",
        ["cdp", ..] => "/cdp/{sessionId}/{token}/...",
        ["mcp"] => "/mcp",
        ["account"] => "/account",
        ["grid"] => "/grid",
        ["grid", "queue-depth"] => "/grid/queue-depth",
        ["batches"] => "/batches",
        ["batches", _] => "/batches/{batchId}",
        ["jobs"] => "/jobs",
        ["jobs", _] => "/jobs/{jobId}",
        ["jobs", _, "retry"] => "/jobs/{jobId}/retry",
        ["jobs", _, "cancel"] => "/jobs/{jobId}/cancel",
        ["jobs", _, "artifacts"] => "/jobs/{jobId}/artifacts",
        ["jobs", _, "logs"] => "/jobs/{jobId}/logs",
        ["artifacts", _, _] => "/artifacts/{jobId}/{kind}",
        ["sessions"] => "/sessions",
        ["sessions", _] => "/sessions/{sessionId}",
        ["sessions", _, "downloads"] => "/sessions/{sessionId}/downloads",
        _ => "other",
    }
}

/// A request path as it may appear in the log: a CDP path's session token
/// (its credential) is replaced by `<token>`. Query strings (download
/// signatures) are never logged.
fn loggable_path(path: &str) -> std::borrow::Cow<'_, str> {
    let mut segments: Vec<&str> = path.split('/').collect();
    match segments.as_slice() {
        ["", "cdp", _, _, ..] => {
            segments[3] = "<token>";
            segments.join("/").into()
        }
        _ => path.into(),
    }
}

async fn dispatch(app: &Arc<App>, req: Request<Incoming>) -> Result<Resp, ApiError> {
    let path = req.uri().path().to_string();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let method = req.method().clone();

    // Paths that need no credential.
    match (&method, segments.as_slice()) {
        (&Method::GET, ["healthz"]) => return Ok(respond::reply(meta::healthz())),
        (&Method::GET, [".well-known", "oauth-protected-resource"]) => {
            return Ok(respond::reply(meta::protected_resource(app, false)))
        }
        (&Method::GET, [".well-known", "oauth-protected-resource", "mcp"]) => {
            return Ok(respond::reply(meta::protected_resource(app, true)))
        }
        // With no sign-in configured, an OAuth client that finds no
        // authorization server in the metadata falls back to the grid's own
        // origin; say there what to use instead of a bare "route not found".
        (&Method::GET, [".well-known", "oauth-authorization-server" | "openid-configuration", ..])
        | (&Method::POST, ["register"])
            if app.config.auth_url.is_none() =>
        {
            return Ok(respond::json(
                404,
                &serde_json::json!({
                    "error": "no sign-in on this grid",
                    "hint": "This grid has no authorization server: use an API key, sent as `Authorization: Bearer grid_...` or `x-api-key: grid_...`."
                }),
            ));
        }
        (&Method::GET, ["downloads", item, kind]) => return downloads::serve(app, item, kind, req.uri().query()).await,
        // The session's token in the path is the credential of its CDP endpoint.
        (_, ["cdp", id, token, rest @ ..]) => {
            let (id, token, rest) =
                (id.to_string(), token.to_string(), rest.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
            return cdp::handle(app, &id, &token, &rest, req).await;
        }
        _ => {}
    }
    let caller = match (&method, segments.as_slice()) {
        (_, ["mcp"]) => return mcp::handle(app, req).await,
        _ if is_api_path(&segments) => {
            let caller = auth::authenticate(app, req.headers(), &app.config.base_url).await?;
            app.limits.rates.check(&caller)?;
            caller
        }
        _ => return Err(ApiError::RouteNotFound),
    };
    let query = || pairs(req.uri().query());
    let call = match (&method, segments.as_slice()) {
        (&Method::GET, ["account"]) => Call::Account(query()),
        (&Method::GET, ["grid"]) => Call::GridStatus,
        (&Method::GET, ["grid", "queue-depth"]) => Call::QueueDepth,
        (&Method::GET, ["batches", id]) => Call::Batch(id.to_string()),
        (&Method::GET, ["jobs"]) => Call::ListJobs(query()),
        (&Method::GET, ["jobs", id]) => Call::GetJob(id.to_string()),
        (&Method::POST, ["jobs", id, "retry"]) => Call::Retry(id.to_string()),
        (&Method::POST, ["jobs", id, "cancel"]) => Call::Cancel(id.to_string()),
        (&Method::GET, ["jobs", id, "artifacts"]) => Call::JobArtifacts(id.to_string()),
        (&Method::GET, ["jobs", id, "logs"]) => Call::JobLogs { id: id.to_string(), query: query() },
        (&Method::GET, ["artifacts", item, kind]) => {
            Call::ArtifactUrl { item: item.to_string(), kind: kind.to_string() }
        }
        (&Method::GET, ["sessions"]) => Call::ListSessions,
        (&Method::DELETE, ["sessions", id]) => Call::ReleaseSession(id.to_string()),
        (&Method::GET, ["sessions", id, "downloads"]) => Call::SessionDownloads(id.to_string()),
        (&Method::POST, ["batches"]) => Call::SubmitBatch {
            idempotency_key: respond::idempotency_key(req.headers())?,
            body: respond::json_body(req.into_body(), &app.limits.conn, |detail| ApiError::InvalidBatchBody { detail })
                .await?,
        },
        (&Method::POST, ["jobs"]) => Call::SubmitJob(
            respond::json_body(req.into_body(), &app.limits.conn, |detail| ApiError::InvalidJobRequest { detail })
                .await?,
        ),
        (&Method::POST, ["sessions"]) => Call::LeaseSession {
            idempotency_key: respond::idempotency_key(req.headers())?,
            body: respond::json_body(req.into_body(), &app.limits.conn, |detail| ApiError::InvalidSessionBody {
                detail,
            })
            .await?,
        },
        _ => return Err(ApiError::MethodNotAllowed),
    };
    api::perform(app, &caller, call).await.map(respond::reply)
}

/// Decoded query pairs.
fn pairs(query: Option<&str>) -> Vec<(String, String)> {
    url::form_urlencoded::parse(query.unwrap_or("").as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

/// Paths of the contract that need a credential; anything else is 404.
fn is_api_path(segments: &[&str]) -> bool {
    matches!(
        segments,
        ["account"]
            | ["grid"]
            | ["grid", "queue-depth"]
            | ["batches"]
            | ["batches", _]
            | ["jobs"]
            | ["jobs", _]
            | ["jobs", _, _]
            | ["artifacts", _, _]
            | ["sessions"]
            | ["sessions", _]
            | ["sessions", _, "downloads"]
            | ["mcp"]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_labels_carry_no_ids_or_tokens() {
        assert_eq!(route_label("/jobs/cj_123/logs"), "/jobs/{jobId}/logs");
        assert_eq!(route_label("/cdp/ses_1/secret-token/json/version"), "/cdp/{sessionId}/{token}/...");
        assert_eq!(route_label("/downloads/it_1/body"), "/downloads/{jobId}/{kind}");
        assert_eq!(route_label("/sessions/ses_1/downloads"), "/sessions/{sessionId}/downloads");
        assert_eq!(route_label("/no/such/route"), "other");
        assert_eq!(route_label("/"), "other");
    }

    #[test]
    fn logged_paths_hide_the_cdp_token() {
        assert_eq!(loggable_path("/cdp/ses_1/abcdef0123/json/version"), "/cdp/ses_1/<token>/json/version");
        assert_eq!(loggable_path("/cdp/ses_1/abcdef0123"), "/cdp/ses_1/<token>");
        assert_eq!(loggable_path("/cdp/ses_1"), "/cdp/ses_1");
        assert_eq!(loggable_path("/downloads/it_1/body"), "/downloads/it_1/body");
        assert_eq!(loggable_path("/jobs/cj_1/logs"), "/jobs/cj_1/logs");
    }
}
