//! The HTTP API: a hyper 1 server (HTTP/1.1 and HTTP/2, optionally over
//! TLS: `tls.rs`) and one router.

pub mod auth;
mod cdp;
mod console;
mod downloads;
mod forward;
pub mod limits;
mod logs;
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

use grid_core::routes::{self, Access, Resolved, Route};
use grid_core::validate::one_call::OneCall;

use crate::api::meta;
use crate::api::{self, Call};
use respond::Resp;

use crate::app::App;

/// What the transport holds of its own, beside the `App` whose calls it
/// carries: the request, body and connection bounds (`limits.rs`) and the
/// API keys that checked out (`auth.rs`). Built by `main` and handed to
/// `serve`; the API knows nothing of it.
pub struct Edge {
    pub limits: limits::Limits,
    pub keys: auth::KeyCache,
}

/// Serves until `shutdown` turns true, then lets open connections finish
/// (at most 10 s). With `tls`, each connection first completes a TLS
/// handshake. HTTP/1.1 and HTTP/2 are both spoken (over TLS as ALPN chose,
/// in the clear with HTTP/2 by prior knowledge); HTTP/1.1 connections may be
/// upgraded (CDP WebSockets). Connections over the bounds of
/// `edge.limits` are closed as they are accepted (docs/limits.md).
pub async fn serve(
    app: Arc<App>,
    edge: Arc<Edge>,
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
                let permit = match edge.limits.admit(peer.ip()) {
                    Ok(p) => p,
                    Err(cut) => {
                        crate::metrics::get().connections_cut.with_label_values(&[cut.label()]).inc();
                        tracing::debug!(%peer, reason = cut.label(), "connection refused");
                        continue;
                    }
                };
                let (app, edge, stop, tls) = (app.clone(), edge.clone(), shutdown.clone(), tls.clone());
                connections.spawn(async move {
                    let _counted = permit;
                    match tls {
                        None => serve_connection(app, edge, stream, stop).await,
                        Some(acceptor) => {
                            if let Some(stream) = tls::handshake(&acceptor, stream).await {
                                serve_connection(app, edge, stream, stop).await
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
async fn serve_connection<I>(app: Arc<App>, edge: Arc<Edge>, io: I, mut stop: watch::Receiver<bool>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let bounds = edge.limits.conn;
    let (tracker, activity) = limits::Tracker::new();
    let service = service_fn(move |req| {
        let (app, edge) = (app.clone(), edge.clone());
        // The request counts as in flight until its response is sent in
        // full (a streamed download included).
        let in_flight = tracker.begin();
        async move {
            let resp = route(&app, &edge, req).await;
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

async fn route(app: &Arc<App>, edge: &Edge, req: Request<Incoming>) -> Resp {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let started = std::time::Instant::now();
    let answered = match too_large(&req) {
        Some(e) => Err(e),
        None => dispatch(app, edge, req).await,
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
    // Fields are only evaluated when the debug log is on.
    tracing::debug!(%method, path = %loggable_path(&path), status = resp.status().as_u16(), ms = elapsed.as_millis() as u64, "request");
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
    routes::template_of(path).unwrap_or("other")
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

/// Every request is resolved through the one route table
/// (`grid_core::routes`), which GET /openapi.json describes operation for
/// operation: the `match` below is exhaustive over it, so a route is neither
/// served without being described nor described without being served.
async fn dispatch(app: &Arc<App>, edge: &Edge, req: Request<Incoming>) -> Result<Resp, ApiError> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    if let Some(r) = no_sign_in(app, &method, &path) {
        return Ok(r);
    }
    let (route, params): (Route, Vec<String>) = match routes::resolve(method.as_str(), &path) {
        Resolved::Route(route, params) => (route, params.into_iter().map(str::to_string).collect()),
        Resolved::WrongMethod { allow, routes } => return wrong_method(app, edge, req, &allow, &routes).await,
        Resolved::NotFound => return Err(ApiError::RouteNotFound),
    };
    let caller = match route.access() {
        Access::Credential => {
            let caller = auth::authenticate(app, &edge.keys, req.headers(), &app.config.base_url).await?;
            edge.limits.rates.check(&caller)?;
            Some(caller)
        }
        // The MCP endpoint checks its credential itself (its 401 carries a
        // challenge; Origin comes first); the others carry theirs in the URL
        // or need none.
        Access::Mcp | Access::Open | Access::SessionToken | Access::SignedUrl => None,
        // Not there for anyone but the grid's nodes.
        Access::Node if forward::from_peer(app, req.headers()) => None,
        Access::Node => return Err(ApiError::RouteNotFound),
    };
    // A session's files live on the node that ran its browser.
    if matches!(
        route,
        Route::SessionDownloads | Route::SessionDownload | Route::SessionRecording | Route::RecordingFile
    ) {
        let session = params.first().map(String::as_str).unwrap_or_default();
        // Unknown here, or unreadable: answered from what this node holds.
        let located = forward::locate(app, session, req.headers()).await.ok().flatten();
        if let Some(forward::Whereabouts { served: forward::Served::At(to), .. }) = located {
            let unreachable = match route {
                Route::SessionDownload => ApiError::SessionDownloadNotPresent,
                Route::RecordingFile => ApiError::RecordingNotPresent,
                _ => ApiError::UnknownSession,
            };
            return forward::forward(app, &to, req, unreachable).await;
        }
    }
    // Path parameters, in the template's order.
    let p = |i: usize| params.get(i).cloned().unwrap_or_default();
    let query = || pairs(req.uri().query());
    let call = match route {
        Route::Healthz => return Ok(respond::reply(meta::healthz())),
        Route::ProtectedResource => return Ok(respond::reply(meta::protected_resource(app, false))),
        Route::ProtectedResourceMcp => return Ok(respond::reply(meta::protected_resource(app, true))),
        Route::OpenApi => return Ok(respond::json(200, &grid_core::openapi::document(&app.config.base_url))),
        Route::Mcp | Route::McpPreflight => return mcp::handle(app, edge, req).await,
        Route::Download => return downloads::serve(app, &p(0), &p(1), req.uri().query()).await,
        Route::SessionDownload => return downloads::serve_session_file(app, &p(0), &p(1), req.uri().query()).await,
        Route::RecordingFile => return downloads::serve_recording(app, &p(0), req.uri().query()).await,
        Route::Console | Route::ConsoleScript | Route::ConsoleStyle => return Ok(console::serve(route)),
        Route::CdpSocket
        | Route::CdpVersion
        | Route::CdpTargets
        | Route::CdpTargetList
        | Route::CdpNewTarget
        | Route::CdpNewTargetGet
        | Route::CdpCloseTarget
        | Route::CdpActivateTarget
        | Route::CdpView
        | Route::CdpBrowserSocket
        | Route::CdpPageSocket => return cdp::handle(app, route, &params, req).await,
        Route::NodeSessionSync => {
            crate::sessions::task::sync(&app.sessions.driver, &p(0)).await?;
            return Ok(respond::reply(api::Reply::no_content()));
        }
        Route::NodeSessionTool => {
            let body =
                respond::json_body(req.into_body(), &edge.limits.conn, |detail| ApiError::InvalidBody { detail })
                    .await?;
            let (tool, account) =
                (body["tool"].as_str().unwrap_or_default(), body["accountId"].as_str().unwrap_or_default());
            let args = body["arguments"].as_object().cloned().unwrap_or_default();
            return api::browser_tools::run_here(app, account, tool, &args).await.map(respond::reply);
        }
        Route::NodeJobSync => {
            match app.compute.driver.sync(&p(0)).await {
                Ok(()) | Err(crate::store::StoreError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
            return Ok(respond::reply(api::Reply::no_content()));
        }
        Route::Account => Call::Account(query()),
        Route::GridStatus => Call::GridStatus,
        Route::QueueDepth => Call::QueueDepth,
        Route::ListBatches => Call::ListBatches(query()),
        Route::GetBatch => Call::Batch(p(0)),
        Route::ListJobs => Call::ListJobs(query()),
        Route::GetJob => Call::GetJob(p(0)),
        Route::RetryJob => Call::Retry(p(0)),
        Route::CancelJob => Call::Cancel(p(0)),
        Route::JobArtifacts => Call::JobArtifacts(p(0)),
        Route::JobLogs if query().iter().any(|(k, _)| k == "follow") => {
            let q = grid_core::validate::list::log_follow_query(&query())?;
            if q.follow {
                let caller = caller.as_ref().ok_or(ApiError::Internal)?;
                return logs::follow(app, caller, &p(0), q.attempt, req).await;
            }
            let rest = query().into_iter().filter(|(k, _)| k != "follow").collect();
            Call::JobLogs { id: p(0), query: rest }
        }
        Route::JobLogs => Call::JobLogs { id: p(0), query: query() },
        Route::ArtifactUrl => Call::ArtifactUrl { item: p(0), kind: p(1) },
        Route::ListSessions => Call::ListSessions,
        Route::ReleaseSession => Call::ReleaseSession(p(0)),
        Route::SessionDownloads => Call::SessionDownloads(p(0)),
        Route::SessionRecording => Call::SessionRecording(p(0)),
        Route::CreateContext => Call::CreateContext,
        Route::ListContexts => Call::ListContexts,
        Route::DeleteContext => Call::DeleteContext(p(0)),
        Route::SubmitBatch => Call::SubmitBatch {
            idempotency_key: respond::idempotency_key(req.headers())?,
            body: respond::json_body(req.into_body(), &edge.limits.conn, |detail| ApiError::InvalidBatchBody {
                detail,
            })
            .await?,
        },
        Route::SubmitJob => Call::SubmitJob(
            respond::json_body(req.into_body(), &edge.limits.conn, |detail| ApiError::InvalidJobRequest { detail })
                .await?,
        ),
        Route::Screenshot | Route::Pdf | Route::Content => {
            let call = match route {
                Route::Pdf => OneCall::Pdf,
                Route::Content => OneCall::Content,
                _ => OneCall::Screenshot,
            };
            Call::OneCall {
                call,
                body: respond::json_body(req.into_body(), &edge.limits.conn, |detail| ApiError::InvalidCaptureBody {
                    detail,
                })
                .await?,
            }
        }
        Route::LeaseSession => Call::LeaseSession {
            idempotency_key: respond::idempotency_key(req.headers())?,
            body: respond::json_body(req.into_body(), &edge.limits.conn, |detail| ApiError::InvalidSessionBody {
                detail,
            })
            .await?,
        },
    };
    // Every route that is a call takes a credential (`Route::access`; the
    // route tests hold each to its documented security).
    let caller = caller.ok_or(ApiError::Internal)?;
    api::perform(app, &caller, call).await.map(respond::reply)
}

/// A method the path's routes do not have: 405 with `Allow`. A caller of a
/// credentialed path is checked first, as on its routes; the MCP endpoint
/// answers in JSON-RPC form.
async fn wrong_method(
    app: &Arc<App>,
    edge: &Edge,
    req: Request<Incoming>,
    allow: &[&str],
    routes: &[Route],
) -> Result<Resp, ApiError> {
    let mut r = if routes.contains(&Route::Mcp) {
        mcp::handle(app, edge, req).await?
    } else {
        if routes.iter().any(|r| r.access() == Access::Credential) {
            let caller = auth::authenticate(app, &edge.keys, req.headers(), &app.config.base_url).await?;
            edge.limits.rates.check(&caller)?;
        }
        respond::error(&ApiError::MethodNotAllowed)
    };
    if r.status() == hyper::StatusCode::METHOD_NOT_ALLOWED {
        if let Ok(v) = hyper::header::HeaderValue::from_str(&allow.join(", ")) {
            r.headers_mut().insert(hyper::header::ALLOW, v);
        }
    }
    Ok(r)
}

/// With no sign-in configured, an OAuth client that finds no authorization
/// server in the metadata falls back to the grid's own origin; say there
/// what to use instead of a bare "not found". These paths are no routes:
/// they answer only "no".
fn no_sign_in(app: &App, method: &Method, path: &str) -> Option<Resp> {
    if app.config.auth_url.is_some() || !(path.starts_with("/.well-known/") || path.starts_with("/register")) {
        return None;
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method, segments.as_slice()) {
        (&Method::GET, [".well-known", "oauth-authorization-server" | "openid-configuration", ..])
        | (&Method::POST, ["register"]) => Some(respond::json(
            404,
            &serde_json::json!({
                "error": "no sign-in on this grid",
                "hint": "This grid has no authorization server: use an API key, sent as `Authorization: Bearer grid_...` or `x-api-key: grid_...`."
            }),
        )),
        _ => None,
    }
}

/// Decoded query pairs.
fn pairs(query: Option<&str>) -> Vec<(String, String)> {
    url::form_urlencoded::parse(query.unwrap_or("").as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_labels_carry_no_ids_or_tokens() {
        assert_eq!(route_label("/jobs/cj_123/logs"), "/jobs/{jobId}/logs");
        assert_eq!(route_label("/cdp/ses_1/secret-token/json/version"), "/cdp/{sessionId}/{token}/json/version");
        assert_eq!(
            route_label("/cdp/ses_1/secret-token/devtools/page/T1"),
            "/cdp/{sessionId}/{token}/devtools/page/{targetId}"
        );
        assert_eq!(route_label("/downloads/it_1/body"), "/downloads/{jobId}/{kind}");
        assert_eq!(route_label("/sessions/ses_1/downloads"), "/sessions/{sessionId}/downloads");
        assert_eq!(route_label("/downloads/sessions/ses_1/report.csv"), "/downloads/sessions/{sessionId}/{name}");
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
