//! Request limits of the API port (docs/limits.md): a rate per credential
//! (429 with retry-after; another key unaffected; MCP calls count), bounded
//! bodies (413, by declared length and while a chunked body is read), and
//! slow clients cut after the header-read time-out while others are served.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;

use grid_tests::http::{http_client, Resp};
use grid_tests::server::{GridServer, ServerOptions};

fn limited_server() -> GridServer {
    GridServer::start(ServerOptions {
        extra_args: vec!["--rate-limit-per-second".into(), "5".into(), "--rate-limit-burst".into(), "10".into()],
        ..ServerOptions::default()
    })
}

#[tokio::test]
async fn one_key_over_its_rate_gets_429_with_retry_after_and_another_key_is_unaffected() {
    let server = limited_server();
    let (_, other_key) = server.create_account("other", 1_000_000);
    let client = http_client();
    let url = format!("{}/grid", server.base_url());
    let send = |key: String| {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move { Resp::read(client.get(&url).header("x-api-key", key)).await.expect("request") })
    };
    // 200 concurrent clients on one key, and a few on another at the same time.
    let flood: Vec<_> = (0..200).map(|_| send(server.api_key().to_string())).collect();
    let calm: Vec<_> = (0..5).map(|_| send(other_key.clone())).collect();
    let mut limited = vec![];
    let mut served = 0;
    for r in flood {
        let r = r.await.expect("task");
        match r.status {
            200 => served += 1,
            429 => limited.push(r),
            other => panic!("unexpected {other}: {r}"),
        }
    }
    assert!((10..200).contains(&served), "the burst is served, the rest refused: {served} served");
    let first = &limited[0];
    assert_eq!(first.json["error"], json!("rate_limited"), "{first}");
    let retry_after: u64 =
        first.header("retry-after").and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{first}"));
    assert!(retry_after >= 1, "{first}");
    for r in calm {
        let r = r.await.expect("task");
        assert_eq!(r.status, 200, "another key is not limited by this one: {r}");
    }

    // An MCP message counts against the same key.
    let rpc = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let mcp = Resp::read(
        client
            .post(format!("{}/mcp", server.base_url()))
            .header("x-api-key", server.api_key())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(rpc.to_string()),
    )
    .await
    .expect("mcp");
    assert_eq!(mcp.status, 429, "{mcp}");

    // After retry-after, the key is served again.
    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    let again = server.get("/grid").await;
    assert_eq!(again.status, 200, "{again}");
}

/// Sends `head` (and then, from another thread, `body` until the server
/// stops reading) on a raw connection; answers the status line and body the
/// server sent. A client that keeps writing after the answer would see its
/// write fail; what matters is the answer.
fn raw_exchange(addr: &str, head: String, body: Option<Vec<u8>>) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(head.as_bytes()).expect("head");
    if let Some(body) = body {
        let mut w = s.try_clone().expect("clone");
        std::thread::spawn(move || {
            for chunk in body.chunks(64 * 1024) {
                if w.write_all(format!("{:x}\r\n", chunk.len()).as_bytes()).is_err()
                    || w.write_all(chunk).is_err()
                    || w.write_all(b"\r\n").is_err()
                {
                    return;
                }
            }
            let _ = w.write_all(b"0\r\n\r\n");
        });
    }
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let mut answer = vec![];
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        if answer.windows(4).any(|w| w == b"\r\n\r\n") && answer.ends_with(b"}") {
            break;
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn bodies_over_the_bound_are_413_declared_or_streamed() {
    let server = GridServer::start(ServerOptions::default());
    let addr = format!("127.0.0.1:{}", server.port());
    let key = server.api_key().to_string();
    let limit = 8 * 1024 * 1024;
    // Declared: refused from the head alone, before any body is sent.
    let head = format!(
        "POST /batches HTTP/1.1\r\nhost: grid\r\nx-api-key: {key}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        limit + 1
    );
    let declared = tokio::task::spawn_blocking({
        let addr = addr.clone();
        move || raw_exchange(&addr, head, None)
    })
    .await
    .expect("task");
    assert!(declared.starts_with("HTTP/1.1 413"), "{declared}");
    assert!(declared.contains(&format!("{{\"error\":\"body too large\",\"limitBytes\":{limit}}}")), "{declared}");

    // Chunked, no length announced: cut once the bound is passed.
    let head = format!(
        "POST /sessions HTTP/1.1\r\nhost: grid\r\nx-api-key: {key}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    let streamed =
        tokio::task::spawn_blocking(move || raw_exchange(&addr, head, Some(vec![b' '; limit + 1024 * 1024])))
            .await
            .expect("task");
    assert!(streamed.starts_with("HTTP/1.1 413"), "{streamed}");
    assert_eq!(server.get("/sessions").await.json, json!([]));
}

#[tokio::test]
async fn slow_clients_are_cut_after_the_header_timeout_while_others_are_served() {
    let server = GridServer::start(ServerOptions::default());
    let addr = format!("127.0.0.1:{}", server.port());
    // 100 connections that send their request head one byte at a time.
    let mut slow: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).expect("connect");
            s.write_all(b"G").expect("first byte");
            s.set_read_timeout(Some(Duration::from_millis(50))).expect("timeout");
            s
        })
        .collect();
    let started = Instant::now();
    // Meanwhile, ordinary requests are answered.
    for _ in 0..5 {
        let h = server.get_as(None, "/healthz").await;
        assert_eq!(h.status, 200, "{h}");
        let g = server.get("/grid").await;
        assert_eq!(g.status, 200, "{g}");
    }
    // Keep trickling until the server closes each slow connection.
    let mut open = slow.len();
    let mut closed = vec![false; slow.len()];
    while open > 0 && started.elapsed() < Duration::from_secs(60) {
        for (i, s) in slow.iter_mut().enumerate() {
            if closed[i] {
                continue;
            }
            let mut buf = [0u8; 512];
            let gone = match s.read(&mut buf) {
                Ok(_) => true, // EOF or an error answer: the server ended it
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                    s.write_all(b"E").is_err()
                }
                Err(_) => true,
            };
            if gone {
                closed[i] = true;
                open -= 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(open, 0, "{open} slow connections still open after {:?}", started.elapsed());
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "connections were cut before any header time-out could apply ({:?})",
        started.elapsed()
    );
    let h = server.get_as(None, "/healthz").await;
    assert_eq!(h.status, 200, "{h}");
}
