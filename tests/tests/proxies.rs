//! Upstream proxies (issue 29, docs/proxies.md): a lease (and the grid's
//! `--upstream-proxy` default) sends its browser's allowed traffic through
//! an HTTP, HTTPS (under a CA of the test's own, which the operator names
//! with `--upstream-proxy-ca`) or SOCKS5 proxy started here on 127.0.0.1,
//! which counts what passed through it and the credentials it was given.
//! The grid's own checks come first (a target the network policy refuses
//! never reaches the proxy), the proxy's address passes the private-network
//! guard, and the password is nowhere: not in the server's log, not in an
//! answer, not in clear under the data dir.
//!
//! Every test starts its own grid-server (and so its own browsers).
//!
//! Runs on: one store, because its subject is upstream proxies on the network path.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::sessions::{lease_running, release, wait_running_as};
use grid_tests::squid::Squid;
use grid_tests::target::Target;
use grid_tests::wait::wait_until;

const USER: &str = "proxy-user";
/// The password every test proxy takes: a canary searched for everywhere.
const CANARY: &str = "pw-canary-5b1f0c9e77a4";

/// What a test proxy saw.
#[derive(Debug, Default, Clone)]
struct Seen {
    /// Connections accepted.
    connections: usize,
    /// Tunnels opened (after a good login), by target `ip:port`.
    tunnels: Vec<String>,
    /// Plain-HTTP requests carried in absolute form (after a good login),
    /// by their URL's `host:port`.
    forwarded: Vec<String>,
    /// Logins offered: (user, password).
    logins: Vec<(String, String)>,
    /// Logins refused.
    refused: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Http,
    /// `Http` inside TLS, its certificate (for 127.0.0.1) signed by a CA
    /// made for the proxy.
    Https,
    Socks5,
}

/// A proxy on 127.0.0.1 that takes `USER`/`CANARY` only.
struct TestProxy {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
    /// An `Https` proxy's CA certificate (PEM), the file an operator trusts.
    ca_pem: Option<String>,
}

impl Drop for TestProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Seen {
    /// Whether `target` (`ip:port`) was reached, by a tunnel or a request
    /// carried in absolute form.
    fn reached(&self, target: &str) -> bool {
        self.tunnels.iter().chain(&self.forwarded).any(|t| t == target)
    }
}

impl TestProxy {
    async fn start(kind: Kind) -> TestProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let s = seen.clone();
        let (ca_pem, tls) = match kind {
            Kind::Https => {
                let (ca_pem, acceptor) = tls_acceptor();
                (Some(ca_pem), Some(acceptor))
            }
            Kind::Http | Kind::Socks5 => (None, None),
        };
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                s.lock().unwrap().connections += 1;
                let (s, tls) = (s.clone(), tls.clone());
                tokio::spawn(async move {
                    let _ = match (kind, tls) {
                        // A handshake the grid gave up on is a refusal too.
                        (_, Some(tls)) => match tls.accept(client).await {
                            Ok(client) => http_proxy(client, &s).await,
                            Err(_) => {
                                s.lock().unwrap().refused += 1;
                                Ok(())
                            }
                        },
                        (Kind::Socks5, None) => socks5_proxy(client, &s).await,
                        (_, None) => http_proxy(client, &s).await,
                    };
                });
            }
        });
        TestProxy { addr, seen, task, ca_pem }
    }

    fn server(&self, kind: Kind) -> String {
        let scheme = match kind {
            Kind::Http => "http",
            Kind::Https => "https",
            Kind::Socks5 => "socks5",
        };
        format!("{scheme}://{}", self.addr)
    }

    fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone()
    }
}

fn good(user: &str, pass: &str) -> bool {
    user == USER && pass == CANARY
}

/// A CA made here and a TLS acceptor for 127.0.0.1 under it: the CA's
/// certificate as PEM, for `--upstream-proxy-ca`.
fn tls_acceptor() -> (String, tokio_rustls::TlsAcceptor) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name.push(DnType::CommonName, "grid test proxy CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::default();
    leaf.subject_alt_names = vec![SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into())];
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf_cert.der().clone()], key)
        .unwrap();
    (ca_cert.pem(), tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// CONNECT, and plain-HTTP requests in absolute form (`GET http://...`),
/// as browsers send them; `Proxy-Authorization: Basic` checked.
async fn http_proxy<S>(mut client: S, seen: &Mutex<Seen>) -> std::io::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if client.read(&mut byte).await? == 0 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let target = head.split_whitespace().nth(1).unwrap_or("").to_string();
    // Header names are case-insensitive (hyper's client writes them in lower case).
    let auth = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        let value = value.trim();
        (name.eq_ignore_ascii_case("proxy-authorization") && value.starts_with("Basic ")).then(|| &value[6..])
    });
    let auth = auth.map(|t| {
        use base64::Engine;
        let plain = base64::engine::general_purpose::STANDARD.decode(t.trim()).unwrap_or_default();
        let plain = String::from_utf8_lossy(&plain).to_string();
        let (u, p) = plain.split_once(':').unwrap_or((&plain, ""));
        (u.to_string(), p.to_string())
    });
    if let Some(login) = &auth {
        seen.lock().unwrap().logins.push(login.clone());
    }
    if !auth.as_ref().is_some_and(|(u, p)| good(u, p)) {
        seen.lock().unwrap().refused += 1;
        return client.write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n").await;
    }
    if let Some(url) = target.strip_prefix("http://") {
        // Absolute form: sent on in origin form, one request a connection.
        let (authority, path) = url.split_once('/').map(|(a, p)| (a, format!("/{p}"))).unwrap_or((url, "/".into()));
        let mut upstream = TcpStream::connect(authority).await?;
        seen.lock().unwrap().forwarded.push(authority.to_string());
        let origin_form = head.replacen(&target, &path, 1);
        upstream.write_all(origin_form.as_bytes()).await?;
        return tokio::io::copy_bidirectional(&mut client, &mut upstream).await.map(|_| ());
    }
    if !head.starts_with("CONNECT ") {
        seen.lock().unwrap().refused += 1;
        return client.write_all(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n").await;
    }
    let mut upstream = TcpStream::connect(&target).await?;
    seen.lock().unwrap().tunnels.push(target);
    client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await.map(|_| ())
}

/// RFC 1928 with RFC 1929 username/password required; IPv4 CONNECT only.
async fn socks5_proxy(mut client: TcpStream, seen: &Mutex<Seen>) -> std::io::Result<()> {
    let mut greeting = [0u8; 2];
    client.read_exact(&mut greeting).await?;
    let mut methods = vec![0u8; greeting[1] as usize];
    client.read_exact(&mut methods).await?;
    if !methods.contains(&2) {
        seen.lock().unwrap().refused += 1;
        return client.write_all(&[5, 0xFF]).await;
    }
    client.write_all(&[5, 2]).await?;
    let mut ver_len = [0u8; 2];
    client.read_exact(&mut ver_len).await?;
    let mut user = vec![0u8; ver_len[1] as usize];
    client.read_exact(&mut user).await?;
    let mut plen = [0u8; 1];
    client.read_exact(&mut plen).await?;
    let mut pass = vec![0u8; plen[0] as usize];
    client.read_exact(&mut pass).await?;
    let (user, pass) = (String::from_utf8_lossy(&user).to_string(), String::from_utf8_lossy(&pass).to_string());
    seen.lock().unwrap().logins.push((user.clone(), pass.clone()));
    if !good(&user, &pass) {
        seen.lock().unwrap().refused += 1;
        return client.write_all(&[1, 1]).await;
    }
    client.write_all(&[1, 0]).await?;
    let mut request = [0u8; 10];
    client.read_exact(&mut request).await?;
    assert_eq!(&request[..4], &[5, 1, 0, 1], "an IPv4 CONNECT");
    let ip = std::net::Ipv4Addr::new(request[4], request[5], request[6], request[7]);
    let target = SocketAddr::from((ip, u16::from_be_bytes([request[8], request[9]])));
    let mut upstream = TcpStream::connect(target).await?;
    seen.lock().unwrap().tunnels.push(target.to_string());
    client.write_all(&[5, 0, 0, 1, 127, 0, 0, 1, 0, 0]).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await.map(|_| ())
}

fn proxy_body(server: &str, password: &str) -> Value {
    json!({"ttlMinutes": 5, "proxy": {"server": server, "username": USER, "password": password}})
}

/// The page's text once it loaded (or whatever it shows).
async fn page_text(server: &GridServer, cdp: &mut grid_tests::cdp::Cdp, url: &str) -> String {
    let target = cdp.call("Target.createTarget", json!({"url": url}), None).await.unwrap_or_else(|e| server.fail(&e));
    let id = target["targetId"].as_str().unwrap_or_default().to_string();
    let session = cdp.attach(&id).await.unwrap_or_else(|e| server.fail(&e));
    cdp.settle(&session, Duration::from_secs(20)).await;
    let text = cdp.evaluate(&session, "document.body ? document.body.innerText : ''").await;
    text.map(|v| v.as_str().unwrap_or_default().to_string()).unwrap_or_else(|e| e)
}

/// Every file under `dir` holding `needle` in clear.
fn files_holding(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    found.push(path.display().to_string());
                }
            }
        }
    }
    found
}

/// The password is in no answer given, nowhere in the log, and nowhere in
/// clear under the data dir.
async fn assert_canary_nowhere(server: &GridServer, answers: &[&Value]) {
    for a in answers {
        assert!(!a.to_string().contains(CANARY), "an answer shows the password: {a}");
    }
    let listed = server.get("/sessions").await;
    assert!(!listed.json.to_string().contains(CANARY), "GET /sessions shows the password: {listed}");
    let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
    assert!(!log.contains(CANARY), "the server's log holds the password");
    let found = files_holding(server.data_dir(), CANARY);
    assert!(found.is_empty(), "the password is in clear in {found:?}");
}

/// A session leased with `kind`'s proxy loads a local page through it; the
/// proxy saw the credentials and the target's address, the attestation
/// names the proxy's host:port, and the password is nowhere.
async fn a_session_loads_a_page_through(kind: Kind) {
    let proxy = TestProxy::start(kind).await;
    let target = Target::start();
    let ca = tempfile::tempdir().unwrap();
    let mut options = ServerOptions::default();
    if let Some(pem) = &proxy.ca_pem {
        let path = ca.path().join("proxy-ca.pem");
        std::fs::write(&path, pem).unwrap();
        options.extra_args = vec!["--upstream-proxy-ca".into(), path.display().to_string()];
    }
    let server = GridServer::start(options);
    let (lease, mut cdp) = lease_running(&server, proxy_body(&proxy.server(kind), CANARY)).await;
    let text = page_text(&server, &mut cdp, &target.url("/page/7")).await;
    assert!(text.contains("page 7"), "the page did not load through the proxy: {text}");
    assert_eq!(target.hits("/page/7"), 1);
    let seen = proxy.seen();
    // As a browser speaks to a proxy: a plain-HTTP page in absolute form
    // to an HTTP(S) proxy, a SOCKS5 tunnel otherwise.
    let carried = if kind == Kind::Socks5 { &seen.tunnels } else { &seen.forwarded };
    assert!(carried.contains(&target.addr().to_string()), "{seen:?}");
    assert!(seen.logins.iter().all(|l| good(&l.0, &l.1)) && !seen.logins.is_empty(), "{seen:?}");
    assert_eq!(seen.refused, 0, "{seen:?}");

    let (view, _) = wait_running_as(&server, server.api_key(), &lease.id).await;
    assert_eq!(view["attestation"]["upstreamProxy"], json!(proxy.addr.to_string()), "{view}");
    assert_canary_nowhere(&server, &[&lease.answer, &view]).await;
    release(&server, &lease.id).await;
    assert_canary_nowhere(&server, &[]).await;
}

#[tokio::test]
async fn a_session_loads_a_page_through_an_http_proxy() {
    a_session_loads_a_page_through(Kind::Http).await;
}

#[tokio::test]
async fn a_session_loads_a_page_through_a_socks5_proxy() {
    a_session_loads_a_page_through(Kind::Socks5).await;
}

/// TLS to the proxy, its certificate checked against the CA the operator
/// named (`--upstream-proxy-ca`).
#[tokio::test]
async fn a_session_loads_a_page_through_an_https_proxy_under_the_operators_ca() {
    a_session_loads_a_page_through(Kind::Https).await;
}

/// Without the operator's CA, the public roots do not know the proxy's
/// issuer: the page names the proxy and TLS, and the proxy opens no tunnel.
/// A batch's `fetch` item fails the same way, its reason naming both.
#[tokio::test]
async fn an_https_proxy_under_an_unknown_ca_fails_naming_tls() {
    let proxy = TestProxy::start(Kind::Https).await;
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let (_lease, mut cdp) = lease_running(&server, proxy_body(&proxy.server(Kind::Https), CANARY)).await;
    let text = page_text(&server, &mut cdp, &target.url("/page/3")).await;
    let why = format!("upstream proxy https://{} could not be reached: TLS: invalid peer certificate", proxy.addr);
    assert!(text.contains(&why), "the page shows: {text}");
    let body = json!({"urls": [target.url("/page/4")], "script": "fetch",
                      "proxy": {"server": proxy.server(Kind::Https), "username": USER, "password": CANARY}});
    let id = server.submit_as(server.api_key(), &body).await;
    let failed = server.wait_batch_done(&id, Duration::from_secs(90)).await;
    assert_eq!(failed["counts"]["failed"], 1, "{failed}");
    let reason = failed["jobs"][0]["failedReason"].as_str().unwrap_or_default();
    assert!(reason.contains(&why), "{failed}");
    assert_eq!(target.hits("/page/3") + target.hits("/page/4"), 0);
    let seen = proxy.seen();
    assert!(
        seen.tunnels.is_empty() && seen.forwarded.is_empty() && seen.logins.is_empty() && seen.refused >= 2,
        "{seen:?}"
    );
}

/// A `--upstream-proxy-ca` the grid cannot use stops it at start, naming
/// the flag, the file and why.
#[test]
fn an_unusable_upstream_proxy_ca_stops_the_server_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let port = grid_tests::server::free_port();
    let start = |ca: &Path| {
        let mut cmd = std::process::Command::new(grid_tests::bins::grid_server_bin());
        grid_tests::bins::scrub_env(&mut cmd);
        let out = cmd
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
            .arg(dir.path().join("data"))
            .arg("--upstream-proxy-ca")
            .arg(ca)
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let missing = dir.path().join("missing.pem");
    let stderr = start(&missing);
    assert!(stderr.contains(&format!("--upstream-proxy-ca {}: cannot read it", missing.display())), "{stderr}");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let stderr = start(&empty);
    assert!(stderr.contains(&format!("--upstream-proxy-ca {}: holds no certificate", empty.display())), "{stderr}");
}

#[tokio::test]
async fn wrong_credentials_fail_the_page_with_a_clear_reason() {
    let proxy = TestProxy::start(Kind::Http).await;
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let (_lease, mut cdp) = lease_running(&server, proxy_body(&proxy.server(Kind::Http), "not-the-password")).await;
    let text = page_text(&server, &mut cdp, &target.url("/page/1")).await;
    let why = format!("upstream proxy http://{} refused the credentials", proxy.addr);
    assert!(text.contains(&why), "the page shows: {text}");
    assert_eq!(target.hits("/page/1"), 0);
    let seen = proxy.seen();
    assert!(seen.refused >= 1 && seen.tunnels.is_empty() && seen.forwarded.is_empty(), "{seen:?}");
    assert_eq!(seen.logins[0], (USER.to_string(), "not-the-password".to_string()));
}

#[tokio::test]
async fn a_proxy_on_a_private_address_needs_allow_private_networks() {
    let proxy = TestProxy::start(Kind::Socks5).await;
    let server = GridServer::start(ServerOptions { allow_private_networks: false, ..ServerOptions::default() });
    let r = server.post("/sessions", &proxy_body(&proxy.server(Kind::Socks5), CANARY)).await;
    assert_eq!(r.status, 400, "{r}");
    let detail = r.json["detail"].to_string();
    assert!(detail.contains("proxy.server: refused by the grid's private-network guard"), "{r}");
    assert!(detail.contains("127.0.0.1 is not a public address: loopback"), "{r}");
    assert_eq!(proxy.seen().connections, 0);
    // A bad body names each bad member.
    let r = server.post("/sessions", &json!({"proxy": {"server": "ftp://x", "password": "p", "port": 1}})).await;
    assert_eq!(r.status, 400, "{r}");
    let detail = r.json["detail"].to_string();
    for field in ["proxy.server", "proxy.password", "proxy.port"] {
        assert!(detail.contains(field), "{field} not named: {r}");
    }
    assert_canary_nowhere(&server, &[&r.json]).await;
}

#[tokio::test]
async fn a_target_the_network_policy_refuses_never_reaches_the_proxy() {
    let proxy = TestProxy::start(Kind::Http).await;
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let mut body = proxy_body(&proxy.server(Kind::Http), CANARY);
    body["network"] = json!("public-web-only/v1");
    let (lease, mut cdp) = lease_running(&server, body).await;
    let text = page_text(&server, &mut cdp, &target.url("/page/2")).await;
    assert!(text.contains("refused by the grid's network policy public-web-only/v1"), "{text}");
    assert_eq!(target.hits("/page/2"), 0);
    // Neither the page nor the attestation's probe reached the proxy.
    let seen = proxy.seen();
    assert_eq!((seen.connections, seen.tunnels.len(), seen.forwarded.len()), (0, 0, 0), "{seen:?}");
    let (view, _) = wait_running_as(&server, server.api_key(), &lease.id).await;
    assert_eq!(view["networkAttestation"]["probes"][0]["outcome"], "refused", "{view}");
    assert_eq!(view["attestation"]["upstreamProxy"], json!(proxy.addr.to_string()), "{view}");
}

#[tokio::test]
async fn the_operators_upstream_proxy_serves_leases_that_name_none() {
    let proxy = TestProxy::start(Kind::Socks5).await;
    let other = TestProxy::start(Kind::Http).await;
    let target = Target::start();
    let default = format!("socks5://{USER}:{CANARY}@{}", proxy.addr);
    // From the environment, as docs/proxies.md advises (a command line is
    // visible to every user of the machine, and the harness logs it).
    let server = GridServer::start(ServerOptions {
        env: vec![("GRID_UPSTREAM_PROXY".into(), Some(default))],
        ..ServerOptions::default()
    });
    let (lease, mut cdp) = lease_running(&server, json!({"ttlMinutes": 5})).await;
    let text = page_text(&server, &mut cdp, &target.url("/page/3")).await;
    assert!(text.contains("page 3"), "{text}");
    wait_until("the default proxy's tunnel", Duration::from_secs(20), || {
        proxy.seen().reached(&target.addr().to_string()).then_some(()).ok_or_else(|| "not reached".to_string())
    })
    .await;
    let (view, _) = wait_running_as(&server, server.api_key(), &lease.id).await;
    assert_eq!(view["attestation"]["upstreamProxy"], json!(proxy.addr.to_string()), "{view}");

    // A lease's own proxy takes precedence over the default (another
    // target, so the first page's late requests, its favicon, do not count).
    let second = Target::start();
    let (_, mut cdp) = lease_running(&server, proxy_body(&other.server(Kind::Http), CANARY)).await;
    let text = page_text(&server, &mut cdp, &second.url("/page/4")).await;
    assert!(text.contains("page 4"), "{text}");
    assert!(other.seen().reached(&second.addr().to_string()), "{:?}", other.seen());
    assert!(!proxy.seen().reached(&second.addr().to_string()), "{:?}", proxy.seen());
    assert_canary_nowhere(&server, &[&lease.answer, &view]).await;
}

#[tokio::test]
async fn a_batchs_fetch_and_capture_items_go_through_its_proxy() {
    let http = TestProxy::start(Kind::Http).await;
    let socks = TestProxy::start(Kind::Socks5).await;
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let key = server.api_key().to_string();
    let proxy = |p: &TestProxy, kind: Kind, password: &str| json!({"server": p.server(kind), "username": USER, "password": password});
    let within = Duration::from_secs(90);

    let fetch = json!({"urls": [target.url("/page/5")], "script": "fetch", "proxy": proxy(&http, Kind::Http, CANARY)});
    let id = server.submit_as(&key, &fetch).await;
    let fetched = server.wait_batch_done(&id, within).await;
    assert_eq!(fetched["counts"]["completed"], 1, "{fetched}");
    assert!(http.seen().forwarded.contains(&target.addr().to_string()), "{:?}", http.seen());
    assert_eq!(target.hits("/page/5"), 1);
    // Its meta names the proxy, host and port only.
    let item = fetched["jobs"][0]["jobId"].as_str().unwrap_or_default().to_string();
    let meta = server.download(&server.artifact_url(&item, "meta").await).await;
    assert_eq!(meta.json["upstreamProxy"], json!(http.addr.to_string()), "{}", meta.text);
    assert!(!meta.text.contains(CANARY), "{}", meta.text);

    let capture =
        json!({"urls": [target.url("/page/6")], "script": "capture", "proxy": proxy(&socks, Kind::Socks5, CANARY)});
    let id = server.submit_as(&key, &capture).await;
    let captured = server.wait_batch_done(&id, within).await;
    assert_eq!(captured["counts"]["completed"], 1, "{captured}");
    assert!(socks.seen().reached(&target.addr().to_string()), "{:?}", socks.seen());
    assert_eq!(target.hits("/page/6"), 1);

    // Wrong credentials: the item fails, naming the proxy and why, at once.
    let wrong = json!({"urls": [target.url("/page/8")], "script": "fetch", "proxy": proxy(&http, Kind::Http, "wrong")});
    let id = server.submit_as(&key, &wrong).await;
    let failed = server.wait_batch_done(&id, within).await;
    assert_eq!(failed["counts"]["failed"], 1, "{failed}");
    let reason = failed["jobs"][0]["failedReason"].as_str().unwrap_or_default();
    assert!(reason.contains(&format!("upstream proxy http://{} refused the credentials", http.addr)), "{failed}");
    assert_eq!(target.hits("/page/8"), 0);

    // The guard on the proxy's address holds for batches too.
    let guarded = GridServer::start(ServerOptions { allow_private_networks: false, ..ServerOptions::default() });
    let r = guarded.post("/batches", &fetch).await;
    assert_eq!(r.status, 400, "{r}");
    assert!(r.json["detail"].to_string().contains("proxy.server: refused by the grid's private-network guard"), "{r}");
    assert_canary_nowhere(&server, &[&fetched, &captured, &failed]).await;
    assert_canary_nowhere(&guarded, &[&r.json]).await;
}

/// A lease placed on another node: that node reads the proxy and opens its
/// sealed credentials from the shared store (PostgreSQL), and the page
/// driven through the first node loads through the proxy.
#[tokio::test]
async fn a_session_placed_on_another_node_opens_its_proxy_from_the_store() {
    let proxy = TestProxy::start(Kind::Socks5).await;
    let target = Target::start();
    let node = |name: &str| ServerOptions {
        postgres: true,
        extra_args: vec!["--node".into(), name.into(), "--max-sessions".into(), "1".into()],
        ..ServerOptions::default()
    };
    let n1 = GridServer::start(node("n1"));
    let n2 = n1.join(node("n2"));
    // n1's one slot taken, the proxied lease runs on n2.
    let (_filler, _) = lease_running(&n1, json!({"ttlMinutes": 5})).await;
    let (lease, mut cdp) = lease_running(&n1, proxy_body(&proxy.server(Kind::Socks5), CANARY)).await;
    assert_eq!(n1.stored().session(&lease.id).node.as_deref(), Some("n2"));
    let text = page_text(&n1, &mut cdp, &target.url("/page/9")).await;
    assert!(text.contains("page 9"), "{text}");
    let seen = proxy.seen();
    assert!(seen.reached(&target.addr().to_string()), "{seen:?}");
    assert!(seen.logins.iter().all(|l| good(&l.0, &l.1)) && !seen.logins.is_empty(), "{seen:?}");
    let log = std::fs::read_to_string(n2.log_path()).unwrap_or_default();
    assert!(!log.contains(CANARY), "n2's log holds the password");
    assert_canary_nowhere(&n1, &[&lease.answer]).await;
}

/// The CLI's `--proxy` (credentials from the environment) and the MCP lease
/// tool's `proxy` argument lease sessions whose pages go through the proxy.
#[tokio::test]
async fn the_cli_and_the_mcp_lease_tool_name_a_proxy() {
    use grid_tests::cli::{run_cli, CLI_TIMEOUT};
    use grid_tests::sessions::connect;
    let proxy = TestProxy::start(Kind::Http).await;
    let (via_cli, via_mcp) = (Target::start(), Target::start());
    let server = GridServer::start(ServerOptions::default());
    let url = server.base_url();
    let server_url = proxy.server(Kind::Http);
    let out = run_cli(
        &["session", "lease", "--ttl", "5", "--proxy", &server_url, "--json"],
        &[
            ("GRID_URL", url.as_str()),
            ("GRID_API_KEY", server.api_key()),
            ("GRID_PROXY_USERNAME", USER),
            ("GRID_PROXY_PASSWORD", CANARY),
        ],
        CLI_TIMEOUT,
    );
    assert!(out.success(), "{out}");
    let lease = out.json().unwrap_or_else(|| server.fail(&format!("no JSON: {out}")));
    assert!(!out.stdout.contains(CANARY) && !out.stderr.contains(CANARY), "{out}");
    let id = lease["sessionId"].as_str().unwrap_or_default().to_string();
    wait_running_as(&server, server.api_key(), &id).await;
    let mut cdp = connect(&server, lease["cdpUrl"].as_str().unwrap_or_default()).await;
    let text = page_text(&server, &mut cdp, &via_cli.url("/page/10")).await;
    assert!(text.contains("page 10"), "{text}");
    assert!(proxy.seen().reached(&via_cli.addr().to_string()), "{:?}", proxy.seen());

    let r = server.mcp_tool_as(server.api_key(), "lease_session", proxy_body(&server_url, CANARY)).await;
    assert_eq!(r["isError"], json!(false), "{r}");
    let text = r["content"][0]["text"].as_str().unwrap_or_default();
    let leased: Value = serde_json::from_str(text).unwrap_or_else(|e| server.fail(&format!("{e}: {r}")));
    let id = leased["sessionId"].as_str().unwrap_or_default().to_string();
    wait_running_as(&server, server.api_key(), &id).await;
    let mut cdp = connect(&server, leased["cdpUrl"].as_str().unwrap_or_default()).await;
    let text = page_text(&server, &mut cdp, &via_mcp.url("/page/11")).await;
    assert!(text.contains("page 11"), "{text}");
    assert!(proxy.seen().reached(&via_mcp.addr().to_string()), "{:?}", proxy.seen());
    assert_canary_nowhere(&server, &[&lease, &r]).await;
}

/// A default upstream the guard refuses (127.0.0.1 without
/// `--allow-private-networks`) stops the server at start, naming the flag
/// and the rule, and never repeating the password.
#[test]
fn a_guarded_default_upstream_stops_the_server_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let port = grid_tests::server::free_port();
    let mut cmd = std::process::Command::new(grid_tests::bins::grid_server_bin());
    grid_tests::bins::scrub_env(&mut cmd);
    let out = cmd
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(dir.path())
        .env("GRID_UPSTREAM_PROXY", format!("http://{USER}:{CANARY}@127.0.0.1:9"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "--upstream-proxy: upstream proxy http://127.0.0.1:9 refused by the grid's private-network guard"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains(CANARY) && !String::from_utf8_lossy(&out.stdout).contains(CANARY), "{stderr}");
    // A bad URL is refused without repeating it either.
    let mut cmd = std::process::Command::new(grid_tests::bins::grid_server_bin());
    grid_tests::bins::scrub_env(&mut cmd);
    let out = cmd
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(dir.path())
        .env("GRID_UPSTREAM_PROXY", format!("ftp://{USER}:{CANARY}@127.0.0.1:9"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("--upstream-proxy scheme must be"), "{stderr}");
    assert!(!stderr.contains(CANARY), "{stderr}");
}

/// Debian's squid with its shipped configuration (tests/src/squid.rs:
/// CONNECT to port 443 only) carries a session's http page, a `fetch`
/// item and a `capture` item to a plain-HTTP target on another port: the
/// grid sends them in absolute form, as browsers do, not as CONNECT (which
/// squid answers 403).
#[tokio::test]
async fn debians_squid_as_shipped_carries_sessions_fetch_and_capture_items() {
    let squid = Squid::start();
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let proxy = json!({"server": squid.url()});
    let (lease, mut cdp) = lease_running(&server, json!({"ttlMinutes": 5, "proxy": proxy})).await;
    let text = page_text(&server, &mut cdp, &target.url("/page/21")).await;
    assert!(text.contains("page 21"), "the page did not load through squid: {text}\n{}", squid.logs());
    release(&server, &lease.id).await;

    let within = Duration::from_secs(90);
    for (script, page) in [("fetch", "/page/22"), ("capture", "/page/23")] {
        let body = json!({"urls": [target.url(page)], "script": script, "proxy": proxy});
        let id = server.submit_as(server.api_key(), &body).await;
        let done = server.wait_batch_done(&id, within).await;
        assert_eq!(done["counts"]["completed"], 1, "{script}: {done}\n{}", squid.logs());
    }
    // Each went through squid, in absolute form, and reached the target.
    for page in ["/page/21", "/page/22", "/page/23"] {
        let line = format!("GET {}", target.url(page));
        wait_until(&format!("squid's access log line {line}"), Duration::from_secs(20), || {
            squid.access_log().contains(&line).then_some(()).ok_or_else(|| squid.access_log())
        })
        .await;
        assert_eq!(target.hits(page), 1, "{page}");
    }
    assert!(!squid.access_log().contains(" CONNECT "), "{}", squid.logs());
}
