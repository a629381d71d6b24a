//! Request limits of the API port (docs/limits.md): a rate per credential
//! (429 with retry-after; another key unaffected; MCP calls count; a key's
//! own rate from `key create`, seen through the SDK and the CLI), bounded
//! bodies (413, by declared length and while a chunked body is read; 408 for
//! a body trickled past its time), slow clients cut after the header-read
//! time-out while others are served (also connections that send nothing, or
//! trickle the HTTP/2 preface), and a bound on one address's connections.
//!
//! Runs on: both stores, because rates and daily caps are counted against store rows.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use grid_tests::http::{http_client, Resp};
use grid_tests::metrics::{scrape, value};
use grid_tests::server::{free_port, GridServer, ServerOptions};
use grid_tests::wait::{wait_for, wait_until, Within};

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
    let mcp = post_raw(&server, "/mcp", &rpc.to_string()).await;
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
/// What the server answers on `s`: read until the connection ends, or a
/// head and a JSON body (our error answers) are in, or `wait` passes
/// without a byte.
fn read_answer(s: &mut TcpStream, wait: Duration) -> String {
    s.set_read_timeout(Some(wait)).expect("timeout");
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
    read_answer(&mut s, Duration::from_secs(30))
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
    let streamed = tokio::task::spawn_blocking({
        let addr = addr.clone();
        move || raw_exchange(&addr, head, Some(vec![b' '; limit + 1024 * 1024]))
    })
    .await
    .expect("task");
    assert!(streamed.starts_with("HTTP/1.1 413"), "{streamed}");
    assert_eq!(server.get("/sessions").await.json, json!([]));

    // The MCP endpoint answers the same refusal, not a JSON-RPC parse error.
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: grid\r\nx-api-key: {key}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    let mcp = tokio::task::spawn_blocking(move || raw_exchange(&addr, head, Some(vec![b' '; limit + 1024 * 1024])))
        .await
        .expect("task");
    assert!(mcp.starts_with("HTTP/1.1 413"), "{mcp}");
    assert!(mcp.contains(&format!("{{\"error\":\"body too large\",\"limitBytes\":{limit}}}")), "{mcp}");
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
    // Keep trickling, a byte every 200 ms, until the server closes each
    // slow connection.
    let mut open = slow.len();
    let mut closed = vec![false; slow.len()];
    let within = Within::new(Duration::from_secs(60)).every(Duration::from_millis(200));
    wait_until("the server closing every slow connection", within, || {
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
        match open {
            0 => Ok(()),
            _ => Err(format!("{open} still open after {:?}", started.elapsed())),
        }
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "connections were cut before any header time-out could apply ({:?})",
        started.elapsed()
    );
    let h = server.get_as(None, "/healthz").await;
    assert_eq!(h.status, 200, "{h}");
}

/// GET /grid with `key` until it is refused (at most 20 requests): how many
/// were served first, and the refusal.
async fn until_refused(server: &GridServer, key: &str) -> (usize, Option<Resp>) {
    for served in 0..20 {
        let r = server.get_as(Some(key), "/grid").await;
        match r.status {
            200 => {}
            429 => return (served, Some(r)),
            _ => panic!("unexpected answer: {r}"),
        }
    }
    (20, None)
}

/// Exhausts `key`'s rate, then runs `call`, until `call` saw the refusal
/// (its answer, `Some`): a slow machine may let a request of the key's
/// sustained rate through between the two, so it tries a few times.
async fn refused_right_after_exhausting<T, F, Fut>(server: &GridServer, key: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..5 {
        let (_, refusal) = until_refused(server, key).await;
        assert!(refusal.is_some(), "the key was never refused");
        if let Some(seen) = call().await {
            return seen;
        }
    }
    panic!("never refused right after the key's rate was used up");
}

#[tokio::test]
async fn a_key_given_its_own_rate_at_key_create_is_held_to_it_over_http_mcp_sdk_and_cli() {
    let server = GridServer::start(ServerOptions::default());
    let low =
        server.admin(&["key", "create", "--account", server.account_id(), "--rate-per-second", "1", "--burst", "2"]);
    assert_eq!((&low["ratePerSecond"], &low["rateBurst"]), (&json!(1), &json!(2)), "key create shows its rate: {low}");
    let plain = server.admin(&["key", "create", "--account", server.account_id()]);
    assert_eq!(
        (&plain["ratePerSecond"], &plain["rateBurst"]),
        (&Value::Null, &Value::Null),
        "a key without its own rate has the server's: {plain}"
    );
    let zero = server.admin_raw(&["key", "create", "--account", server.account_id(), "--rate-per-second", "0"]);
    assert!(!zero.status.success(), "a rate of 0 is refused: {}", String::from_utf8_lossy(&zero.stderr));
    let low_key = low["apiKey"].as_str().expect("apiKey").to_string();

    // Its burst is served, then 429 with retry-after, far below the server's
    // default (1,000 at once).
    let (served, refusal) = until_refused(&server, &low_key).await;
    let refusal = refusal.expect("the low key is refused within 20 requests");
    assert!(served >= 2, "the key's burst of 2 is served first: {served}");
    assert_eq!(refusal.error(), "rate_limited", "{refusal}");
    let retry_after: u64 = refusal.header("retry-after").and_then(|v| v.parse().ok()).expect("retry-after");
    assert!(retry_after >= 1, "{refusal}");

    // Meanwhile the other keys of the same account have the server's rate.
    let client = http_client();
    let others: Vec<_> = (0..50)
        .map(|i| {
            let key =
                if i % 2 == 0 { server.api_key().to_string() } else { plain["apiKey"].as_str().expect("key").into() };
            let (client, url) = (client.clone(), format!("{}/grid", server.base_url()));
            tokio::spawn(async move { Resp::read(client.get(url).header("x-api-key", key)).await.expect("request") })
        })
        .collect();
    for r in others {
        let r = r.await.expect("task");
        assert_eq!(r.status, 200, "another key is not held to this key's rate: {r}");
    }

    // An MCP tool call is one request of the key.
    let rpc =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "grid_status", "arguments": {}}});
    let mcp = refused_right_after_exhausting(&server, &low_key, || {
        let (client, url, key, rpc) =
            (client.clone(), format!("{}/mcp", server.base_url()), low_key.clone(), rpc.clone());
        async move {
            let r = Resp::read(
                client
                    .post(url)
                    .header("x-api-key", key)
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .body(rpc.to_string()),
            )
            .await
            .expect("mcp");
            (r.status == 429).then_some(r)
        }
    })
    .await;
    assert_eq!(mcp.error(), "rate_limited", "{mcp}");
    assert!(mcp.header("retry-after").is_some(), "{mcp}");

    // The SDK's error says so, with the wait.
    let sdk = grid_client::GridClient::new(&server.base_url(), low_key.clone()).expect("client");
    let e = refused_right_after_exhausting(&server, &low_key, || {
        let sdk = sdk.clone();
        async move { sdk.grid_status().await.err() }
    })
    .await;
    assert!(e.is_rate_limited() && e.is_retryable(), "{e}");
    assert!(e.retry_after().is_some_and(|d| d >= Duration::from_secs(1)), "{e}");

    // The CLI prints what happened and what to do.
    let url = server.base_url();
    let out = refused_right_after_exhausting(&server, &low_key, || {
        let env = [("GRID_URL".to_string(), url.clone()), ("GRID_API_KEY".to_string(), low_key.clone())];
        async move {
            let out = tokio::task::spawn_blocking(move || {
                let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                grid_tests::cli::run_cli(&["status"], &env, grid_tests::cli::CLI_TIMEOUT)
            })
            .await
            .expect("cli");
            out.stderr.contains("429").then_some(out)
        }
    })
    .await;
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("error: 429 rate_limited"), "{}", out.stderr);
    assert!(out.stderr.contains("hint: this credential is over its request rate"), "{}", out.stderr);

    // After its retry-after the key is served again.
    let (_, refusal) = until_refused(&server, &low_key).await;
    let wait: u64 = refusal.and_then(|r| r.header("retry-after").and_then(|v| v.parse().ok())).expect("retry-after");
    tokio::time::sleep(Duration::from_secs(wait)).await;
    let again = server.get_as(Some(&low_key), "/grid").await;
    assert_eq!(again.status, 200, "{again}");
}

/// Sends `head`, then `body` one byte every 100 ms from another thread,
/// until the server answers; returns the answer.
fn trickle_body(addr: &str, head: String, body: Vec<u8>) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(head.as_bytes()).expect("head");
    let stop = Arc::new(AtomicBool::new(false));
    let mut w = s.try_clone().expect("clone");
    let writer = std::thread::spawn({
        let stop = stop.clone();
        move || {
            for b in body {
                if stop.load(Ordering::SeqCst) || w.write_all(&[b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    });
    let answer = read_answer(&mut s, Duration::from_secs(60));
    stop.store(true, Ordering::SeqCst);
    let _ = writer.join();
    answer
}

#[tokio::test]
async fn a_body_trickled_past_its_time_is_answered_408_while_others_are_served() {
    let server = GridServer::start(ServerOptions {
        extra_args: vec!["--body-read-timeout-secs".into(), "2".into()],
        ..ServerOptions::default()
    });
    let addr = format!("127.0.0.1:{}", server.port());
    let key = server.api_key().to_string();
    // 1,000 bytes at 10 a second would take 100 s.
    let trickles: Vec<_> = ["/batches", "/sessions", "/mcp"]
        .into_iter()
        .map(|path| {
            let head = format!(
                "POST {path} HTTP/1.1\r\nhost: grid\r\nx-api-key: {key}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: 1000\r\n\r\n"
            );
            let addr = addr.clone();
            (path, tokio::task::spawn_blocking(move || trickle_body(&addr, head, vec![b' '; 1000])))
        })
        .collect();
    // Meanwhile, ordinary requests are answered.
    for _ in 0..5 {
        let g = server.get("/grid").await;
        assert_eq!(g.status, 200, "{g}");
    }
    for (path, answer) in trickles {
        let answer = answer.await.expect("task");
        assert!(answer.starts_with("HTTP/1.1 408"), "{path}: {answer}");
        assert!(answer.contains(r#"{"error":"body too slow","limitSecs":2}"#), "{path}: {answer}");
    }
    assert_eq!(server.get("/sessions").await.json, json!([]), "nothing was leased");
}

/// Whether the server closed `s`: a read that ends (EOF) or fails other
/// than by the read time-out. Bytes the server sends (an HTTP/2 SETTINGS
/// frame) do not close it.
fn closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 512];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => false,
        Err(_) => true,
    }
}

#[tokio::test]
async fn connections_that_send_no_request_are_cut_whatever_protocol_they_start() {
    let server = GridServer::start(ServerOptions {
        extra_args: vec!["--header-read-timeout-secs".into(), "2".into()],
        ..ServerOptions::default()
    });
    let addr = format!("127.0.0.1:{}", server.port());
    let connect = || {
        let s = TcpStream::connect(&addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_millis(20))).expect("timeout");
        s
    };
    // Ten that send nothing, and ten that trickle the HTTP/2 preface (before
    // a protocol is chosen, and then in HTTP/2, hyper has no time-out).
    let mut silent: Vec<TcpStream> = (0..10).map(|_| connect()).collect();
    let mut preface: Vec<(TcpStream, usize)> = (0..10).map(|_| (connect(), 0)).collect();
    let started = Instant::now();
    for _ in 0..3 {
        let h = server.get_as(None, "/healthz").await;
        assert_eq!(h.status, 200, "{h}");
        let g = server.get("/grid").await;
        assert_eq!(g.status, 200, "{g}");
    }
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let mut open_silent = vec![true; silent.len()];
    let mut open_preface = vec![true; preface.len()];
    // The preface goes a byte every 200 ms.
    let within = Within::new(Duration::from_secs(60)).every(Duration::from_millis(200));
    wait_until("the server closing every connection without a request", within, || {
        for (i, s) in silent.iter_mut().enumerate() {
            if open_silent[i] && closed(s) {
                open_silent[i] = false;
            }
        }
        for (i, (s, sent)) in preface.iter_mut().enumerate() {
            if !open_preface[i] {
                continue;
            }
            if closed(s) || (*sent < PREFACE.len() && s.write_all(&PREFACE[*sent..*sent + 1]).is_err()) {
                open_preface[i] = false;
            } else {
                *sent = (*sent + 1).min(PREFACE.len());
            }
        }
        match open_silent.iter().chain(&open_preface).filter(|o| **o).count() {
            0 => Ok(()),
            still => Err(format!("{still} still open after {:?}", started.elapsed())),
        }
    })
    .await;
    assert!(started.elapsed() >= Duration::from_secs(1), "cut before any time-out could apply");
    let g = server.get("/grid").await;
    assert_eq!(g.status, 200, "{g}");
}

/// A connection to the server from `source` (a loopback address of its own,
/// so the server sees it as another peer than the test's other clients).
async fn connect_from(source: &str, port: u16) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind(format!("{source}:0").parse().expect("address")).expect("bind");
    socket.connect(format!("127.0.0.1:{port}").parse().expect("address")).await.expect("connect")
}

/// Sends a whole GET /healthz on `s` and reads what comes back until the
/// server closes the connection (or 30 s pass).
async fn healthz_on(mut s: tokio::net::TcpStream) -> String {
    let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nhost: grid\r\nconnection: close\r\n\r\n").await;
    let mut answer = vec![];
    let _ = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn one_address_holds_at_most_its_connections_while_others_are_served() {
    let metrics_port = free_port();
    let server = GridServer::start(ServerOptions {
        extra_args: vec![
            "--max-connections-per-peer".into(),
            "5".into(),
            "--metrics-listen".into(),
            format!("127.0.0.1:{metrics_port}"),
        ],
        ..ServerOptions::default()
    });
    let port = server.port();
    // Five connections from 127.0.0.2 that stop in the middle of their head.
    let mut held = vec![];
    for _ in 0..5 {
        let mut s = connect_from("127.0.0.2", port).await;
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: grid\r\n").await.expect("partial head");
        held.push(s);
    }
    // A sixth from the same address is closed unanswered.
    let sixth = healthz_on(connect_from("127.0.0.2", port).await).await;
    assert!(!sixth.contains("HTTP/1.1"), "a connection over the address's bound was served: {sixth}");
    // Another address is served meanwhile.
    let other = healthz_on(connect_from("127.0.0.3", port).await).await;
    assert!(other.starts_with("HTTP/1.1 200"), "{other}");
    let h = server.get_as(None, "/healthz").await;
    assert_eq!(h.status, 200, "{h}");

    // Once the held ones close, the address is served again.
    drop(held);
    wait_for("the address served again after its connections closed", Duration::from_secs(5), || async {
        let answered = healthz_on(connect_from("127.0.0.2", port).await).await;
        match answered.starts_with("HTTP/1.1 200") {
            true => Ok(()),
            false => Err(answered),
        }
    })
    .await;

    let text = scrape(metrics_port).await;
    assert!(
        value(&text, "grid_http_connections_cut_total{reason=\"max_connections_per_peer\"}").is_some_and(|v| v >= 1.0),
        "{text}"
    );
}

/// POST `raw` to `path` with the first-start key, as an MCP client sends
/// it (both `accept` types): the body exactly as given (a JSON builder would
/// drop a repeated member).
async fn post_raw(server: &GridServer, path: &str, raw: &str) -> Resp {
    Resp::read(
        http_client()
            .post(format!("{}{path}", server.base_url()))
            .header("x-api-key", server.api_key())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(raw.to_string()),
    )
    .await
    .unwrap_or_else(|e| server.fail(&format!("POST {path}: {e}")))
}

/// A member name twice in one object (RFC 7493) is refused with the
/// route's 400 naming it by its pointer, at any depth and on MCP, not read
/// as the last one: `{"ttlMinutes":1,"ttlMinutes":240}` leased 240 minutes.
#[tokio::test]
async fn bodies_with_a_repeated_member_name_are_refused_naming_it() {
    let server = GridServer::start(ServerOptions::default());
    let detail = |r: &Resp| r.json["detail"].as_array().map(|d| d.iter().map(|l| l.to_string()).collect::<String>());

    let r = post_raw(&server, "/sessions", r#"{"ttlMinutes":1,"ttlMinutes":240}"#).await;
    assert_eq!((r.status, r.json["error"].as_str()), (400, Some("invalid session body")), "{r}");
    assert!(detail(&r).is_some_and(|d| d.contains("/ttlMinutes")), "{r}");
    let sessions = server.get("/sessions").await.json;
    assert_eq!(sessions.as_array().map(Vec::len), Some(0), "no session leased: {sessions}");

    let batch = r#"{"urls":["http://127.0.0.1:9/"],"script":"fetch","params":{"headers":{"accept":"a","accept":"b"}}}"#;
    let r = post_raw(&server, "/batches", batch).await;
    assert_eq!((r.status, r.json["error"].as_str()), (400, Some("invalid batch body")), "{r}");
    assert!(detail(&r).is_some_and(|d| d.contains("/params/headers/accept")), "{r}");

    let rpc = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call",
                  "params":{"name":"lease_session","arguments":{"ttlMinutes":1,"ttlMinutes":240}}}"#;
    let r = post_raw(&server, "/mcp", rpc).await;
    assert_eq!(r.status, 400, "{r}");
    assert_eq!(r.json["error"]["code"], -32700, "{r}");
    let message = r.json["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("/params/arguments/ttlMinutes"), "{r}");
    assert_eq!(server.get("/sessions").await.json.as_array().map(Vec::len), Some(0));

    // The same bodies without the repeat are served.
    let r = post_raw(&server, "/sessions", r#"{"ttlMinutes":1}"#).await;
    assert_eq!(r.status, 201, "{r}");
}
