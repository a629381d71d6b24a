//! The session's CDP endpoint: `{base}/cdp/{sessionId}/{token}/...`.
//!
//! HTTP discovery (`/json/version`, `/json/list`, ...) is fetched from the
//! browser and its addresses rewritten to point back through the grid; a
//! WebSocket upgrade is passed to the browser's DevTools socket byte for
//! byte (the browser answers the client's own handshake key). Every proxied
//! connection closes when the session ends. The browser's DevTools port
//! listens on 127.0.0.1 only and is never handed out.

use std::time::Duration;

use grid_core::error::ApiError;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, UPGRADE};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::{token_hash, Live};
use crate::http::respond::{self, Resp};
use crate::http::App;

/// How long a connection to a still-starting session waits for its browser.
const READY_WAIT: Duration = Duration::from_secs(30);

pub async fn handle(app: &App, id: &str, token: &str, rest: &[&str], req: Request<Incoming>) -> Result<Resp, ApiError> {
    let live = app.sessions.live(id).ok_or(ApiError::UnknownSession)?;
    // Compared as hashes of equal length; the token itself is never stored.
    if token_hash(token) != live.token_sha256 {
        return Err(ApiError::UnknownSession);
    }
    let (port, browser_path) = wait_ready(live.clone()).await?;
    let public = format!("{}/cdp/{id}/{token}", app.config.base_url);
    let is_upgrade =
        req.headers().get(UPGRADE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let path = if rest.is_empty() { browser_path } else { format!("/{}", rest.join("/")) };
    if is_upgrade {
        return upgrade(port, &path, req, live).await;
    }
    discovery(port, &path, req, &public).await
}

async fn wait_ready(mut live: Live) -> Result<(u16, String), ApiError> {
    let wait = async {
        loop {
            if let Some(ep) = live.endpoint.borrow().clone() {
                return Ok(ep);
            }
            if *live.ended.borrow() {
                return Err(ApiError::UnknownSession);
            }
            tokio::select! {
                r = live.endpoint.changed() => if r.is_err() { return Err(ApiError::UnknownSession) },
                _ = live.ended.changed() => {}
            }
        }
    };
    tokio::time::timeout(READY_WAIT, wait).await.map_err(|_| ApiError::UnknownSession)?
}

fn ws_base(public_http: &str) -> String {
    if let Some(rest) = public_http.strip_prefix("https://") {
        format!("wss://{rest}")
    } else {
        format!("ws://{}", public_http.trim_start_matches("http://"))
    }
}

async fn discovery(port: u16, path: &str, req: Request<Incoming>, public: &str) -> Result<Resp, ApiError> {
    let query = req.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
    let url = format!("http://127.0.0.1:{port}{path}{query}");
    // The browser is on loopback: never through a proxy from the environment.
    let client = reqwest::Client::builder().no_proxy().build().map_err(|_| ApiError::Internal)?;
    let upstream = client.request(req.method().clone(), &url).send().await.map_err(|_| ApiError::UnknownSession)?;
    let status = upstream.status();
    let content_type = upstream
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    let body = upstream.text().await.map_err(|_| ApiError::UnknownSession)?;
    let host = public.split_once("://").map_or(public, |(_, h)| h);
    let body = body
        .replace(&format!("ws://127.0.0.1:{port}/"), &format!("{}/", ws_base(public)))
        .replace(&format!("127.0.0.1:{port}/"), &format!("{host}/"));
    Ok(respond::bytes(
        StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY),
        &content_type,
        body.into_bytes(),
    ))
}

async fn upgrade(port: u16, path: &str, mut req: Request<Incoming>, live: Live) -> Result<Resp, ApiError> {
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let key = header("sec-websocket-key")
        .ok_or(ApiError::InvalidBody { detail: vec!["sec-websocket-key: required for a WebSocket upgrade".into()] })?;
    let mut handshake = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: {}\r\n",
        header("sec-websocket-version").unwrap_or_else(|| "13".into())
    );
    for name in ["sec-websocket-extensions", "sec-websocket-protocol"] {
        if let Some(v) = header(name) {
            handshake.push_str(&format!("{name}: {v}\r\n"));
        }
    }
    // No Origin: DevTools refuses origins it was not told to allow, and the
    // grid's token, not the origin, is the credential here.
    handshake.push_str("\r\n");
    let mut upstream = TcpStream::connect(("127.0.0.1", port)).await.map_err(|_| ApiError::UnknownSession)?;
    upstream.write_all(handshake.as_bytes()).await.map_err(|_| ApiError::UnknownSession)?;
    let (head, leftover) =
        crate::egress::read_head(&mut upstream, 16 * 1024).await.map_err(|_| ApiError::UnknownSession)?;
    let head = String::from_utf8_lossy(&head).to_string();
    if !head.starts_with("HTTP/1.1 101") {
        tracing::warn!(answer = head.lines().next().unwrap_or(""), "browser refused the WebSocket upgrade");
        return Err(ApiError::UnknownSession);
    }
    let mut resp = Response::new(respond::empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    resp.headers_mut().insert(UPGRADE, HeaderValue::from_static("websocket"));
    resp.headers_mut().insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    for line in head.lines().skip(1) {
        if let Some((name, value)) = line.split_once(':') {
            let lower = name.trim().to_ascii_lowercase();
            if lower.starts_with("sec-websocket-") {
                if let (Ok(n), Ok(v)) =
                    (hyper::header::HeaderName::from_bytes(lower.as_bytes()), HeaderValue::from_str(value.trim()))
                {
                    resp.headers_mut().insert(n, v);
                }
            }
        }
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    let mut ended = live.ended;
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else { return };
        let mut client = TokioIo::new(upgraded);
        if !leftover.is_empty() && client.write_all(&leftover).await.is_err() {
            return;
        }
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
            _ = async { let _ = ended.wait_for(|e| *e).await; } => tracing::debug!("session ended; closing its CDP connection"),
        }
    });
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn websocket_base_follows_the_public_scheme() {
        assert_eq!(ws_base("http://127.0.0.1:8080/cdp/s/t"), "ws://127.0.0.1:8080/cdp/s/t");
        assert_eq!(ws_base("https://grid.example/cdp/s/t"), "wss://grid.example/cdp/s/t");
    }
}
