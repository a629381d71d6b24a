//! Hardening of the server's own surface: secrets at rest (modes of the data
//! dir and database), no secret in the log at any level, outbound capture
//! requests that ignore proxy variables, and an accept loop that backs off
//! when the process runs out of file descriptors.
//!
//! Runs on: both stores, because secrets at rest differ per store.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::wait::{wait_for, wait_until};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display())).permissions().mode() & 0o777
}

#[track_caller]
fn assert_owner_only(server: &GridServer) {
    let dir = server.data_dir();
    assert_eq!(mode(dir), 0o700, "data dir {}", dir.display());
    if server.database().is_some() {
        // On PostgreSQL the data dir holds no database.
        return;
    }
    for name in ["grid.db", "grid.db-wal", "grid.db-shm"] {
        assert_eq!(mode(&dir.join(name)), 0o600, "{name}");
    }
}

/// The data dir is 0700 and the database (which holds the key hashes and the
/// download signing secret) with its WAL and shared memory 0600, whatever the
/// umask; modes loosened while the server was stopped are closed again on
/// the next start.
#[tokio::test]
async fn data_dir_and_database_are_private_to_the_owner_whatever_the_umask() {
    let mut server = GridServer::start(ServerOptions { umask: Some(0), ..Default::default() });
    assert_owner_only(&server);

    server.sigterm();
    let dir = server.data_dir().to_path_buf();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    for name in ["grid.db", "grid.db-wal", "grid.db-shm"] {
        let path = dir.join(name);
        std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    server.restart();
    assert_owner_only(&server);
    assert_eq!(server.get("/grid").await.status, 200);
}

/// The part of `url` after `name=` up to the next `&`.
fn query_value(url: &str, name: &str) -> String {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    query.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')).unwrap_or("").to_string()
}

/// With `RUST_LOG=trace` (every target, every level) the log holds no
/// credential: not the API key a caller sends, not the bearer token, not a
/// session's cdpUrl token (used for discovery and the WebSocket), not a
/// download signature, not the signing secret; and the first-start key is
/// only in the first-start line on stdout, not in the log on stderr.
#[tokio::test]
async fn a_trace_level_log_holds_no_key_token_or_signature() {
    use grid_tests::target::Target;
    use serde_json::json;
    use std::time::Duration;

    let target = Target::start();
    let mut server = GridServer::start(ServerOptions {
        env: vec![("RUST_LOG".into(), Some("trace".into()))],
        extra_args: vec!["--browsers".into(), "1".into()],
        ..Default::default()
    });
    let (_, key) = server.create_account("logged", 5_000_000);

    let batch = server.submit_as(&key, &json!({"urls": [target.url("/page/1")], "script": "fetch"})).await;
    let done = server.wait_batch_done_as(&key, &batch, Duration::from_secs(60)).await;
    let item = done["jobs"][0]["jobId"].as_str().unwrap().to_string();
    let r = server.get_as(Some(&key), &format!("/artifacts/{item}/body")).await;
    assert_eq!(r.status, 200, "{r}");
    let download_url = r.json["url"].as_str().unwrap().to_string();
    let sig = query_value(&download_url, "sig");
    assert!(sig.len() >= 32, "{download_url}");
    assert_eq!(server.download(&download_url).await.status, 200);

    let bearer = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJncmlkLWxvZy10ZXN0In0.c2lnbmF0dXJlLW5vdC1sb2dnZWQ";
    let r = grid_tests::http::Resp::read(
        grid_tests::http::http_client().get(format!("{}/grid", server.base_url())).bearer_auth(bearer),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 401, "{r}");

    let r = server.post_as(Some(&key), "/sessions", Some(&json!({"ttlMinutes": 5}))).await;
    assert_eq!(r.status, 201, "{r}");
    let session = r.json["sessionId"].as_str().unwrap().to_string();
    let cdp_url = r.json["cdpUrl"].as_str().unwrap().to_string();
    let token = cdp_url.rsplit('/').next().unwrap().to_string();
    assert!(token.len() >= 32, "{cdp_url}");
    wait_for(&format!("session {session} running"), Duration::from_secs(60), || async {
        let list = server.get_as(Some(&key), "/sessions").await.json;
        let status = list
            .as_array()
            .and_then(|l| l.iter().find(|s| s["sessionId"] == session.as_str()))
            .map(|s| s["status"].as_str().unwrap_or("").to_string());
        match status.as_deref() {
            Some("running") => Ok(()),
            Some("pending") => Err("pending".to_string()),
            other => server.fail(&format!("session {session} not running: {other:?}")),
        }
    })
    .await;
    let http = grid_tests::http::http_client();
    let ws = grid_tests::cdp::ws_url(&http, &cdp_url).await.unwrap_or_else(|e| server.fail(&format!("discovery: {e}")));
    let mut cdp = grid_tests::cdp::Cdp::connect(&ws).await.unwrap_or_else(|e| server.fail(&format!("connect: {e:?}")));
    let version = cdp.call("Browser.getVersion", json!({}), None).await.unwrap_or_else(|e| server.fail(&e));
    assert!(version["product"].is_string(), "{version}");
    let r = server.request(reqwest::Method::DELETE, &format!("/sessions/{session}"), Some(&key), None).await;
    assert_eq!(r.status, 204, "{r}");

    let secret = server
        .stored()
        .setting("download_signing_secret")
        .unwrap_or_else(|| server.fail("no download signing secret stored"));
    server.sigterm();
    let log = std::fs::read_to_string(server.log_path()).unwrap();
    assert!(log.lines().any(|l| l.contains("TRACE")), "the log is not at trace level");
    for (what, secret) in [
        ("API key", key.as_str()),
        ("bearer token", bearer),
        ("cdpUrl token", token.as_str()),
        ("download signature", sig.as_str()),
        ("signing secret", secret.as_str()),
    ] {
        if let Some(line) = log.lines().find(|l| l.contains(secret)) {
            panic!("the log holds the {what}: {line}");
        }
    }
    let first_key = server.api_key();
    if let Some(line) = log.lines().find(|l| l.contains(first_key) && !l.starts_with("[stdout] ")) {
        panic!("the log (stderr) holds the first-start API key: {line}");
    }
}

/// A TCP listener on 127.0.0.1 that counts the connections it accepts (and
/// closes them): the proxy named in the server's proxy variables.
struct CountingListener {
    port: u16,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl CountingListener {
    fn start() -> CountingListener {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().unwrap().port();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(conn);
            }
        });
        CountingListener { port, accepted }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The server's environment naming this listener as every kind of proxy,
    /// with no exceptions.
    fn proxy_env(&self) -> Vec<(String, Option<String>)> {
        let url = format!("http://127.0.0.1:{}", self.port);
        let mut env: Vec<(String, Option<String>)> =
            ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"]
                .into_iter()
                .map(|name| (name.to_string(), Some(url.clone())))
                .collect();
        env.extend(["NO_PROXY", "no_proxy"].map(|name| (name.to_string(), None)));
        env
    }
}

/// Submits a `fetch` of `url` and waits for the item's end.
async fn fetch_item(server: &GridServer, url: &str) -> serde_json::Value {
    let batch = server.submit_fetch(&[url.to_string()]).await;
    let item_id = server.batch(&batch).await["jobs"][0]["jobId"].as_str().unwrap().to_string();
    server.wait_item_final(&item_id, std::time::Duration::from_secs(60)).await.0
}

/// With proxy variables in the server's environment, a `fetch` of a name
/// that resolves to loopback is still refused by the private-network guard
/// (through a proxy the guard's resolver would never see the name), and
/// nothing reaches the proxy.
#[tokio::test]
async fn fetch_ignores_proxy_variables_so_the_guard_still_refuses_private_names() {
    let proxy = CountingListener::start();
    let target = grid_tests::target::Target::start();
    let server = GridServer::start(ServerOptions {
        allow_private_networks: false,
        env: proxy.proxy_env(),
        ..Default::default()
    });
    let item = fetch_item(&server, &format!("http://localhost:{}/page/1", target.addr().port())).await;
    assert_eq!(item["state"], "failed", "{item}");
    assert_eq!(item["attemptsMade"], 1, "{item}");
    let reason = item["failedReason"].as_str().unwrap_or("");
    assert!(reason.contains("destination refused"), "{item}");
    assert_eq!(proxy.accepted(), 0, "the fetch went to the proxy from the environment");
    assert_eq!(target.total_hits(), 0);
}

/// Where private networks are allowed, a `fetch` goes to the target
/// directly, not through the proxy of the server's environment.
#[tokio::test]
async fn fetch_goes_direct_despite_proxy_variables() {
    let proxy = CountingListener::start();
    let target = grid_tests::target::Target::start();
    let server = GridServer::start(ServerOptions { env: proxy.proxy_env(), ..Default::default() });
    let item = fetch_item(&server, &format!("http://localhost:{}/page/1", target.addr().port())).await;
    assert_eq!(item["state"], "completed", "{item}");
    assert_eq!(target.hits("/page/1"), 1);
    assert_eq!(proxy.accepted(), 0, "the fetch went to the proxy from the environment");
}

/// Out of file descriptors, the accept loop pauses (10 ms doubling up to
/// 1 s) with one warning per pause instead of spinning with a warning per
/// try; once the connections close it accepts again.
#[tokio::test]
async fn accept_backs_off_when_out_of_file_descriptors_and_recovers() {
    use std::time::Duration;
    /// The server uses about 20 descriptors when idle.
    const MAX_OPEN_FILES: u64 = 64;
    const CONNECTIONS: usize = 150;
    const HELD: Duration = Duration::from_secs(2);
    /// Pauses of 10, 20, 40, … ms fit 9 tries in 2 s; spinning makes thousands.
    const MOST_WARNINGS: usize = 20;
    let warnings = |log: &str| log.lines().filter(|l| l.contains("accept failed")).count();

    let server = GridServer::start(ServerOptions { max_open_files: Some(MAX_OPEN_FILES), ..Default::default() });
    let addr = format!("127.0.0.1:{}", server.port());
    let mut held = Vec::new();
    for _ in 0..CONNECTIONS {
        held.push(std::net::TcpStream::connect(&addr).unwrap_or_else(|e| server.fail(&format!("connect: {e}"))));
    }
    let what = format!("{CONNECTIONS} open connections exhausting {MAX_OPEN_FILES} descriptors");
    wait_until(&what, Duration::from_secs(10), || {
        match warnings(&std::fs::read_to_string(server.log_path()).unwrap()) {
            0 => Err("no accept warning in the log".to_string()),
            _ => Ok(()),
        }
    })
    .await;
    let before = warnings(&std::fs::read_to_string(server.log_path()).unwrap());
    tokio::time::sleep(HELD).await;
    let during = warnings(&std::fs::read_to_string(server.log_path()).unwrap()) - before;
    assert!(during < MOST_WARNINGS, "{during} accept warnings in {HELD:?} out of descriptors");

    drop(held);
    let client = grid_tests::http::http_client();
    let url = format!("{}/healthz", server.base_url());
    wait_for("/healthz 200 after the connections closed", Duration::from_secs(15), || async {
        match client.get(&url).timeout(Duration::from_secs(2)).send().await {
            Ok(r) if r.status() == 200 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let log = std::fs::read_to_string(server.log_path()).unwrap();
    assert!(log.contains("accepting connections again"), "no recovery line in the log");
}
