//! HTTPS and HTTP/2 (docs/tls.md): `--tls-self-signed` and
//! `--tls-cert`/`--tls-key`, with the clients users have: curl trusting the
//! generated CA, the SDK and the `grid` CLI with GRID_CA_CERT, a CDP client
//! over the wss cdpUrl, and Playwright/Puppeteer with NODE_EXTRA_CA_CERTS.
//!
//! Runs on: one store, because its subject is TLS and certificates.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use grid_core::catalog::ArtifactKind;
use grid_core::wire::batch::NewBatch;
use grid_tests::bins::{grid_server_bin, scrub_env, workspace_root};
use grid_tests::cdp::{self, Cdp};
use grid_tests::cli::run_cli;
use grid_tests::server::{GridServer, ServerOptions, Tls};
use grid_tests::sessions::{lease_as, wait_running_as};
use grid_tests::target::{page_html, Target};
use serde_json::{json, Value};

const DONE: Duration = Duration::from_secs(120);

fn self_signed() -> ServerOptions {
    ServerOptions { tls: Tls::SelfSigned, ..ServerOptions::default() }
}

/// curl's `%{http_version} %{http_code}` and the body of one request, or its
/// exit code and stderr when it failed.
fn curl(args: &[&str]) -> Result<(String, String), String> {
    let body = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new("curl")
        .args(["-sS", "--noproxy", "*", "--max-time", "30", "-o"])
        .arg(body.path())
        .args(["-w", "%{http_version} %{http_code}"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("curl runs (Debian package curl)");
    if !out.status.success() {
        return Err(format!("curl {args:?}: {} {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    Ok((String::from_utf8_lossy(&out.stdout).into_owned(), std::fs::read_to_string(body.path()).unwrap()))
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).permissions().mode() & 0o777
}

#[tokio::test]
async fn curl_trusting_the_generated_ca_speaks_http2_and_every_address_is_https() {
    // At trace level, so the HTTP/2 and TLS layers' own logging is seen too.
    let server =
        GridServer::start(ServerOptions { env: vec![("RUST_LOG".into(), Some("trace".into()))], ..self_signed() });
    let (_, api_key) = server.create_account("curl", 1_000_000);
    let base = server.base_url();
    assert!(base.starts_with("https://127.0.0.1:"), "{base}");
    let tls_dir = server.data_dir().join("tls");
    let ca = server.ca_cert().expect("the listening event names the CA").to_path_buf();
    assert_eq!(ca, tls_dir.join("ca.pem"), "caCert of the listening event");
    assert_eq!(mode(&tls_dir), 0o700);
    for f in ["ca.pem", "ca-key.pem", "server.pem", "server-key.pem"] {
        assert_eq!(mode(&tls_dir.join(f)), 0o600, "{f}");
    }
    assert!(
        std::fs::read_to_string(server.log_path()).unwrap().contains(&ca.display().to_string()),
        "CA not in the log"
    );

    let cacert = ca.to_str().unwrap();
    let (version, body) = curl(&["--cacert", cacert, &format!("{base}/healthz")]).unwrap();
    assert_eq!(version, "2 200", "ALPN did not choose HTTP/2: {body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), json!({"status": "ok"}));
    let key = format!("x-api-key: {api_key}");
    let (version, body) = curl(&["--cacert", cacert, "-H", &key, &format!("{base}/grid")]).unwrap();
    assert_eq!(version, "2 200", "{body}");
    assert!(serde_json::from_str::<Value>(&body).unwrap()["queue"].is_object(), "{body}");
    let (version, body) = curl(&["--cacert", cacert, &format!("{base}/grid")]).unwrap();
    assert_eq!(version, "2 401", "{body}");
    let (version, _) = curl(&["--cacert", cacert, "--http1.1", &format!("{base}/healthz")]).unwrap();
    assert_eq!(version, "1.1 200");
    // The name the certificate was made for, not just the address.
    let localhost = base.replace("127.0.0.1", "localhost");
    assert_eq!(curl(&["--cacert", cacert, &format!("{localhost}/healthz")]).unwrap().0, "2 200");
    // Without the CA the certificate is not trusted (curl's exit 60).
    let untrusted = curl(&[&format!("{base}/healthz")]).unwrap_err();
    assert!(untrusted.contains("60") || untrusted.contains("certificate"), "{untrusted}");

    let (_, body) = curl(&["--cacert", cacert, &format!("{base}/.well-known/oauth-protected-resource/mcp")]).unwrap();
    let metadata: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(metadata["resource"], json!(format!("{base}/mcp")), "{metadata}");
    let r = server.post_as(None, "/mcp", Some(&json!({}))).await;
    assert_eq!(r.status, 401, "{r}");
    let challenge = r.header("www-authenticate").unwrap_or_default().to_string();
    assert!(challenge.contains(&format!("{base}/.well-known/oauth-protected-resource/mcp")), "{challenge}");
    let log = std::fs::read_to_string(server.log_path()).unwrap();
    assert!(log.contains("h2::hpack::decoder"), "no HTTP/2 trace in the log: was it on?");
    assert!(!log.contains(&api_key), "the API key sent over HTTP/2 is in the trace log");
}

#[tokio::test]
async fn sdk_and_cli_trusting_grid_ca_cert_submit_and_download_over_https() {
    let target = Target::start();
    let server = GridServer::start(self_signed());
    let base = server.base_url();

    // The SDK.
    let client = server.client();
    let urls: Vec<String> = (0..2).map(|n| target.url(&format!("/page/{n}"))).collect();
    let created = client
        .submit_batch(&NewBatch { urls, script: Some("fetch".into()), ..Default::default() })
        .await
        .unwrap_or_else(|e| server.fail(&format!("submit_batch over https: {e}")));
    let view = tokio::time::timeout(DONE, client.wait_batch(&created.batch_id, Duration::from_millis(100), |_| {}))
        .await
        .unwrap_or_else(|_| server.fail("wait_batch timed out"))
        .unwrap_or_else(|e| server.fail(&format!("wait_batch: {e}")));
    assert_eq!(view.counts.completed, 2, "{view:?}");
    let job = &view.jobs[0];
    let url = client.artifact_url(&job.job_id, ArtifactKind::Body).await.unwrap().url;
    assert!(url.starts_with(&format!("{base}/downloads/")), "download URL is not https: {url}");
    let body = client.download(&url).await.unwrap_or_else(|e| server.fail(&format!("download over https: {e}")));
    let n = job.url.rsplit('/').next().unwrap();
    assert_eq!(String::from_utf8_lossy(&body), page_html(n));
    // The same download streamed over HTTP/2.
    let (version, streamed) = curl(&["--cacert", server.ca_cert().unwrap().to_str().unwrap(), &url]).unwrap();
    assert_eq!((version.as_str(), streamed.as_str()), ("2 200", page_html(n).as_str()));
    let plain = grid_client::GridClient::new(&base, server.api_key()).unwrap();
    let refused = plain.grid_status().await;
    assert!(
        matches!(refused, Err(grid_client::error::ClientError::Transport(_))),
        "a client without the CA trusted the server: {refused:?}"
    );

    // The CLI (GridServer::cli sets GRID_CA_CERT).
    let file = server.log_path().with_file_name("urls.txt");
    std::fs::write(&file, target.url("/page/7") + "\n").unwrap();
    let out = server.cli(&["batch", "submit", file.to_str().unwrap(), "--script", "fetch", "--wait", "--json"]);
    assert!(out.success(), "{out}");
    let job_id = out.stdout.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find_map(|v| {
        v["jobs"].as_array().and_then(|jobs| jobs.first()).and_then(|j| j["jobId"].as_str()).map(str::to_string)
    });
    let job_id = job_id.unwrap_or_else(|| panic!("no jobs[0].jobId in the CLI's output: {out}"));
    let saved = server.log_path().with_file_name("page7.html");
    let out = server.cli(&["artifact", "get", &job_id, "body", "-o", saved.to_str().unwrap()]);
    assert!(out.success(), "{out}");
    assert_eq!(std::fs::read_to_string(&saved).unwrap(), page_html("7"));
    let without_ca = run_cli(
        &["status", "--json"],
        &[("GRID_URL", base.as_str()), ("GRID_API_KEY", server.api_key())],
        Duration::from_secs(60),
    );
    assert!(
        !without_ca.success() && without_ca.code.is_some(),
        "the CLI trusted the server without the CA: {without_ca}"
    );
    // The hint names what to set: the CA, not the URL (which was right).
    let hint = without_ca.stderr.lines().find(|l| l.starts_with("hint: ")).unwrap_or_default();
    assert!(hint.contains("GRID_CA_CERT") && hint.contains("--ca-cert"), "{without_ca}");
    assert!(!hint.contains("GRID_URL"), "{without_ca}");
}

#[tokio::test]
async fn a_cdp_client_connects_through_the_wss_cdp_url() {
    let target = Target::start();
    let server = GridServer::start(self_signed());
    let lease = lease_as(&server, server.api_key(), json!({"ttlMinutes": 5})).await;
    wait_running_as(&server, server.api_key(), &lease.id).await;
    assert!(lease.cdp_url.starts_with("https://"), "{}", lease.cdp_url);
    let version = cdp::json_version(server.http(), &lease.cdp_url).await.unwrap_or_else(|e| server.fail(&e));
    let ws = version["webSocketDebuggerUrl"].as_str().unwrap_or_default().to_string();
    let expected = lease.cdp_url.replacen("https://", "wss://", 1);
    assert!(ws.starts_with(&expected), "discovery over https gave {ws}, expected under {expected}");
    let mut cdp = Cdp::connect_trusting(&ws, server.ca_cert())
        .await
        .unwrap_or_else(|e| server.fail(&format!("connect {ws}: {e:?}")));
    let (_, page) = cdp.open_page(&target.url("/page/4")).await.unwrap_or_else(|e| server.fail(&e));
    let heading = cdp.evaluate(&page, "document.querySelector('h1').textContent").await.unwrap();
    assert_eq!(heading, json!("page 4"));
    // The same socket without trusting the CA does not open.
    assert!(Cdp::connect(&ws).await.is_err(), "wss connected without the CA");
}

#[tokio::test]
async fn playwright_and_puppeteer_connect_over_wss_with_node_extra_ca_certs() {
    let dir = workspace_root().join("tests/clients");
    assert!(
        dir.join("node_modules/playwright-core").is_dir() && dir.join("node_modules/puppeteer-core").is_dir(),
        "Playwright and Puppeteer are missing from {}: scripts/test.sh installs them (npm install there)",
        dir.display()
    );
    let target = Target::start();
    let server = GridServer::start(self_signed());
    let lease = lease_as(&server, server.api_key(), json!({"ttlMinutes": 5})).await;
    wait_running_as(&server, server.api_key(), &lease.id).await;
    let (cdp_url, page, ca) = (lease.cdp_url, target.url("/page/6"), server.ca_cert().unwrap().to_path_buf());
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new("node");
        cmd.arg("cdp_clients.js").arg(&cdp_url).arg(&page).current_dir(dir).env("NODE_EXTRA_CA_CERTS", &ca);
        scrub_env(&mut cmd);
        cmd.output()
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| server.fail(&format!("node did not run: {e}")));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "clients failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| server.fail(&format!("{e}: {stdout}")));
    assert_eq!(seen["playwright"]["title"], "page 6", "{seen}");
    assert_eq!(seen["puppeteer"], json!({"title": "page 6", "text": "page 6"}));
}

#[tokio::test]
async fn a_restart_keeps_the_ca_and_the_server_certificate() {
    let mut server = GridServer::start(self_signed());
    let tls_dir = server.data_dir().join("tls");
    let read = |f: &str| std::fs::read(tls_dir.join(f)).unwrap();
    let (ca, ca_key, leaf) = (read("ca.pem"), read("ca-key.pem"), read("server.pem"));
    let first_ca_path = server.ca_cert().unwrap().to_path_buf();
    server.restart();
    assert_eq!(server.ca_cert(), Some(first_ca_path.as_path()));
    assert_eq!(read("ca.pem"), ca, "the CA changed on restart");
    assert_eq!(read("ca-key.pem"), ca_key);
    assert_eq!(read("server.pem"), leaf, "the server certificate was made again though nothing changed");
    // A client that trusted the CA before the restart still does.
    let (version, _) =
        curl(&["--cacert", first_ca_path.to_str().unwrap(), &format!("{}/healthz", server.base_url())]).unwrap();
    assert_eq!(version, "2 200");
}

/// `grid-server serve` on `data_dir` with `extra` flags, expected to exit
/// (within 20 s) instead of serving: its status, stdout and stderr.
fn serve_expecting_exit(data_dir: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(grid_server_bin());
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--browsers", "0", "--data-dir"])
        .arg(data_dir)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    scrub_env(&mut cmd);
    let mut child = cmd.spawn().expect("spawn grid-server");
    // A time limit, not a wait that fails: at the limit the server is
    // killed and what it printed goes to the caller to judge.
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn operator_certificate_files_serve_and_a_bad_key_stops_the_start_naming_the_flag() {
    // A certificate and key of the operator's: here, the ones another grid made.
    let maker = GridServer::start(self_signed());
    let files = tempfile::tempdir().unwrap();
    let copy = |from: &str, to: &str| -> PathBuf {
        let dest = files.path().join(to);
        std::fs::copy(maker.data_dir().join("tls").join(from), &dest).unwrap();
        dest
    };
    let (cert, key, ca, other_key) = (
        copy("server.pem", "cert.pem"),
        copy("server-key.pem", "key.pem"),
        copy("ca.pem", "ca.pem"),
        copy("ca-key.pem", "other-key.pem"),
    );
    let garbage = files.path().join("garbage.pem");
    std::fs::write(&garbage, "not a key\n").unwrap();

    let server = GridServer::start(ServerOptions {
        tls: Tls::Files { cert: cert.clone(), key: key.clone(), ca: ca.clone() },
        ..ServerOptions::default()
    });
    assert!(!server.data_dir().join("tls").exists(), "--tls-cert made a self-signed set too");
    let (version, _) = curl(&["--cacert", ca.to_str().unwrap(), &format!("{}/healthz", server.base_url())]).unwrap();
    assert_eq!(version, "2 200");

    let data = tempfile::tempdir().unwrap();
    let arg = |p: &Path| p.to_str().unwrap().to_string();
    let cases: [(&[String], &str, &str); 4] = [
        (&["--tls-cert".into(), arg(&cert), "--tls-key".into(), arg(&other_key)], "--tls-key", "does not belong"),
        (&["--tls-cert".into(), arg(&cert), "--tls-key".into(), arg(&garbage)], "--tls-key", "no private key"),
        (
            &["--tls-cert".into(), arg(&cert), "--tls-key".into(), arg(&files.path().join("none.pem"))],
            "--tls-key",
            "cannot read",
        ),
        (&["--tls-cert".into(), arg(&key), "--tls-key".into(), arg(&key)], "--tls-cert", "no certificate"),
    ];
    for (flags, flag, why) in cases {
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let (code, stdout, stderr) = serve_expecting_exit(data.path(), &flags);
        assert!(code.is_some_and(|c| c != 0), "{flags:?}: exited {code:?}\n{stdout}\n{stderr}");
        let said =
            stderr.lines().find(|l| l.contains(flag)).unwrap_or_else(|| panic!("{flags:?}: no {flag} in {stderr}"));
        assert!(said.contains(why), "{flags:?}: {said}");
        assert!(!stdout.contains("listening") && !stdout.contains("first-start"), "{flags:?}: {stdout}");
        assert!(!data.path().join("grid.db").exists(), "{flags:?}: a refused start opened the store");
    }
}
