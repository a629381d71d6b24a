//! Session downloads (issue 14 §3): a page of a leased session downloads a
//! file, clicked by Puppeteer (tests/clients) through the cdpUrl; the file
//! is listed by GET /sessions/{id}/downloads with its size and a signed
//! URL that serves its exact bytes without a credential, to its owner only;
//! links planted in the session's folder are neither listed nor served; a
//! download past the session's limit is cancelled and the listing says so;
//! the files go once the session's end plus the grace has passed, also
//! across a restart; `grid session downloads` lists and fetches.
//!
//! Every test starts its own grid-server (and so its own browsers).
//!
//! Runs on: both stores, because downloads are store rows kept across a crash.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use grid_tests::http::assert_error;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::sessions::{click_downloads, lease_as, release, wait_running_as};
use grid_tests::target::{pattern_bytes, Target};
use grid_tests::wait::{wait_for, wait_until};
use serde_json::{json, Value};

/// Longest a clicked download may take to be listed.
const LISTED_WITHIN: Duration = Duration::from_secs(30);
/// Longest past the grace a folder may stay (the sweep runs every 5 s).
const SWEPT_WITHIN: Duration = Duration::from_secs(40);

fn opts(extra: &[&str]) -> ServerOptions {
    ServerOptions { extra_args: extra.iter().map(|s| s.to_string()).collect(), ..ServerOptions::default() }
}

/// Leases a session and waits until it runs; returns (id, cdpUrl).
async fn running_session(server: &GridServer) -> (String, String) {
    let lease = lease_as(server, server.api_key(), json!({"ttlMinutes": 10})).await;
    wait_running_as(server, server.api_key(), &lease.id).await;
    (lease.id, lease.cdp_url)
}

/// GET /sessions/{id}/downloads with `key`, asserting 200.
async fn listing_as(server: &GridServer, key: &str, id: &str) -> Value {
    let r = server.get_as(Some(key), &format!("/sessions/{id}/downloads")).await;
    if r.status != 200 {
        server.fail(&format!("GET /sessions/{id}/downloads: expected 200, got {r}"));
    }
    r.json
}

async fn listing(server: &GridServer, id: &str) -> Value {
    listing_as(server, server.api_key(), id).await
}

fn entry<'a>(listing: &'a Value, name: &str) -> Option<&'a Value> {
    listing["downloads"].as_array()?.iter().find(|d| d["name"] == name)
}

fn names(listing: &Value) -> Vec<String> {
    listing["downloads"].as_array().into_iter().flatten().filter_map(|d| d["name"].as_str().map(String::from)).collect()
}

/// Polls the listing until `name` is listed with `bytes`; returns the listing.
async fn wait_listed(server: &GridServer, id: &str, name: &str, bytes: usize) -> Value {
    wait_for(&format!("{name} ({bytes} bytes) listed"), LISTED_WITHIN, || async {
        let l = listing(server, id).await;
        match entry(&l, name).is_some_and(|d| d["sizeBytes"] == bytes) {
            true => Ok(l),
            false => Err(l.to_string()),
        }
    })
    .await
}

/// Fetches a signed URL without a credential: (status, headers, bytes).
/// The `list_session_downloads` MCP tool's result for `key`.
async fn mcp_list_downloads(server: &GridServer, key: &str, id: &str) -> Value {
    server.mcp_tool_as(key, "list_session_downloads", json!({"sessionId": id})).await
}

async fn fetch(server: &GridServer, url: &str) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let r = server.http().get(url).send().await.unwrap_or_else(|e| server.fail(&format!("GET {url}: {e}")));
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    (status, headers, r.bytes().await.map(|b| b.to_vec()).unwrap_or_default())
}

fn folder(server: &GridServer, id: &str) -> PathBuf {
    server.data_dir().join("session-downloads").join(id)
}

/// Waits until the session's folder is gone, its file's URL answers 404
/// `download not present` and its listing 404 `unknown session`.
async fn wait_swept(server: &GridServer, id: &str, url: &str) {
    let what = format!("{} gone after the grace", folder(server, id).display());
    wait_until(&what, SWEPT_WITHIN, || match folder(server, id).exists() {
        true => Err("still there".to_string()),
        false => Ok(()),
    })
    .await;
    let gone = server.download(url).await;
    assert_error(&gone, 404, "download not present");
    let r = server.get_as(Some(server.api_key()), &format!("/sessions/{id}/downloads")).await;
    assert_error(&r, 404, "unknown session");
}

#[tokio::test]
async fn a_clicked_download_is_listed_served_to_its_owner_and_gone_after_the_grace() {
    let target = Target::start();
    // The server's own --warm-sessions (1): the lease may take a warm
    // browser, whose folder becomes the session's.
    let server =
        GridServer::start(ServerOptions { warm_sessions: None, ..opts(&["--session-download-grace-secs", "4"]) });
    let (id, cdp_url) = running_session(&server).await;
    let empty = listing(&server, &id).await;
    assert_eq!(empty["downloads"], json!([]), "{empty}");
    assert_eq!(empty["keptUntil"], Value::Null, "a live session's files have no end yet: {empty}");
    assert_eq!(empty["limitBytes"], 100 * 1024 * 1024, "{empty}");

    let size = 123_457;
    click_downloads(&server, &target, &cdp_url, &[("report.csv", size)]).await;
    let l = wait_listed(&server, &id, "report.csv", size).await;
    assert_eq!(target.hits("/attachment/report.csv"), 1);
    assert_eq!(l["totalBytes"], size, "{l}");
    assert_eq!(l["refused"], json!([]), "{l}");
    let file = entry(&l, "report.csv").unwrap().clone();
    assert!(chrono::DateTime::parse_from_rfc3339(file["createdAt"].as_str().unwrap_or("")).is_ok(), "{file}");
    // Saved under the name it suggested (Puppeteer leaves the browser's default).
    assert_eq!(file["suggestedName"], "report.csv", "{file}");
    let url = file["url"].as_str().unwrap().to_string();
    assert!(url.starts_with(&format!("{}/downloads/sessions/{id}/report.csv?expires=", server.base_url())), "{url}");

    // The signed URL needs no credential and serves the exact bytes, as an attachment kept inert.
    let (status, headers, bytes) = fetch(&server, &url).await;
    assert_eq!(status, 200);
    assert!(bytes == pattern_bytes(size), "the served file differs from what the page downloaded");
    assert_eq!(headers["content-length"], size.to_string().as_str());
    assert_eq!(headers["content-type"], "application/octet-stream");
    assert_eq!(headers["content-disposition"], "attachment; filename=\"report.csv\"; filename*=UTF-8''report.csv");
    assert_eq!(headers["content-security-policy"], "sandbox");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    // A signature is for its session, name and expiry.
    let tampered = url.replace("sig=", "sig=00");
    assert_error(&server.download(&tampered).await, 404, "download link invalid or expired");
    let renamed = url.replace("/report.csv?", "/other.csv?");
    assert_error(&server.download(&renamed).await, 404, "download link invalid or expired");

    // Another account's key: 404 as for a session that does not exist.
    let (_, other_key) = server.create_account("other", 1_000_000);
    let r = server.get_as(Some(&other_key), &format!("/sessions/{id}/downloads")).await;
    assert_error(&r, 404, "unknown session");
    let r = server.get_as(Some(&other_key), "/sessions/ses_01NOSUCHSESSION0000000000/downloads").await;
    assert_error(&r, 404, "unknown session");
    assert_error(&server.get_as(None, &format!("/sessions/{id}/downloads")).await, 401, "unauthorized");

    // The CLI lists, and fetches a file into a folder, byte for byte.
    let cli = server.cli(&["session", "downloads", &id]);
    assert!(cli.success(), "{cli:?}");
    assert!(cli.stdout.contains("report.csv") && cli.stdout.contains(&size.to_string()), "{}", cli.stdout);
    let out_dir = tempfile::tempdir().unwrap();
    let dir_arg = out_dir.path().display().to_string();
    let cli = server.cli(&["session", "downloads", &id, "report.csv", "-o", &dir_arg]);
    assert!(cli.success(), "{cli:?}");
    assert!(std::fs::read(out_dir.path().join("report.csv")).unwrap() == pattern_bytes(size));
    let cli = server.cli(&["session", "downloads", &id, "nothing.csv"]);
    assert!(!cli.success() && cli.stderr.contains("no download named \"nothing.csv\""), "{cli:?}");
    let cli = server.cli(&["--json", "session", "downloads", &id]);
    assert!(cli.success(), "{cli:?}");
    let printed: Value = serde_json::from_str(cli.stdout.trim()).unwrap_or_else(|e| server.fail(&format!("{e}")));
    assert_eq!(names(&printed), ["report.csv"]);

    // The MCP tool lists the same files, as structuredContent; another
    // account's key gets the HTTP call's refusal as a tool error.
    let tool = mcp_list_downloads(&server, server.api_key(), &id).await;
    assert_eq!(tool["isError"], false, "{tool}");
    let structured = &tool["structuredContent"];
    assert_eq!(names(structured), ["report.csv"], "{tool}");
    assert_eq!(structured["totalBytes"], size, "{tool}");
    assert_eq!(entry(structured, "report.csv").unwrap()["sizeBytes"], size, "{tool}");
    let refused = mcp_list_downloads(&server, &other_key, &id).await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(refused["content"][0]["text"].as_str().unwrap_or("").contains("unknown session"), "{refused}");

    // Released: still listed and served during the grace, with its end.
    release(&server, &id).await;
    let after = listing(&server, &id).await;
    assert_eq!(names(&after), ["report.csv"], "{after}");
    assert!(after["keptUntil"].is_string(), "{after}");
    let (status, _, bytes) = fetch(&server, &url).await;
    assert!(status == 200 && bytes == pattern_bytes(size), "served during the grace: {status}");

    // After the grace: the folder is removed, the URL and the listing answer 404.
    wait_swept(&server, &id, &url).await;
}

/// Playwright makes a context of its own whose downloads the browser saves
/// under their guid (`allowAndName`): the listing names the file by that
/// guid and gives the name the download suggested as `suggestedName`.
#[tokio::test]
async fn a_playwright_download_is_listed_under_its_guid_with_its_suggested_name() {
    let target = Target::start();
    let server = GridServer::start(opts(&[]));
    let (id, cdp_url) = running_session(&server).await;
    let size = 54_321;
    let dir = grid_tests::bins::workspace_root().join("tests/clients");
    assert!(
        dir.join("node_modules/playwright-core").is_dir(),
        "Playwright is missing from {}: scripts/test.sh installs it (npm install there)",
        dir.display()
    );
    let mut cmd = std::process::Command::new("node");
    cmd.arg("playwright_downloads.js")
        .arg(&cdp_url)
        .arg(target.url(&format!("/download-page/quarterly-report.csv?n={size}")))
        .current_dir(dir);
    let out = tokio::task::spawn_blocking(move || cmd.output()).await.unwrap();
    let out = grid_tests::child::checked(&server, "Playwright (node playwright_downloads.js)", out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let printed: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| server.fail(&format!("{e}: {stdout}")));
    assert_eq!(printed, json!({"suggested": ["quarterly-report.csv"], "failures": [null]}));

    let (l, file) = wait_for("Playwright's download listed", LISTED_WITHIN, || async {
        let l = listing(&server, &id).await;
        let found = l["downloads"].as_array().into_iter().flatten().find(|d| d["sizeBytes"] == size).cloned();
        match found {
            Some(file) => Ok((l, file)),
            None => Err(l.to_string()),
        }
    })
    .await;
    assert_eq!(l["downloads"].as_array().unwrap().len(), 1, "{l}");
    assert_eq!(file["suggestedName"], "quarterly-report.csv", "{file}");
    let saved = file["name"].as_str().unwrap();
    assert_ne!(saved, "quarterly-report.csv", "Playwright's file is saved under its guid: {file}");
    let (status, _, bytes) = fetch(&server, file["url"].as_str().unwrap()).await;
    assert!(status == 200 && bytes == pattern_bytes(size), "the guid-named file serves the download: {status}");
    // The MCP tool lists the same field.
    let tool = mcp_list_downloads(&server, server.api_key(), &id).await;
    assert_eq!(entry(&tool["structuredContent"], saved).unwrap()["suggestedName"], "quarterly-report.csv", "{tool}");
}

/// The host reads the folder a stranger's browser writes: symlinks and hard
/// links planted there (to the data dir's database, to /etc/passwd, to a
/// file of the data dir) are neither listed nor served, even in place of a
/// file whose signed URL was already handed out.
#[tokio::test]
async fn links_planted_in_the_download_folder_are_neither_listed_nor_served() {
    let target = Target::start();
    let server = GridServer::start(opts(&[]));
    let (id, cdp_url) = running_session(&server).await;
    click_downloads(&server, &target, &cdp_url, &[("real.txt", 2_000), ("second.txt", 3_000)]).await;
    wait_listed(&server, &id, "real.txt", 2_000).await;
    let l = wait_listed(&server, &id, "second.txt", 3_000).await;
    let real_url = entry(&l, "real.txt").unwrap()["url"].as_str().unwrap().to_string();
    let second_url = entry(&l, "second.txt").unwrap()["url"].as_str().unwrap().to_string();

    let files = folder(&server, &id).join("files");
    let browser_uid = std::fs::metadata(&files).unwrap().uid();
    assert_ne!(browser_uid, 0, "the folder belongs to the browser's uid");
    let data = server.data_dir().to_path_buf();
    // A file of the data dir the browser's uid owns (so ownership alone would not stop it).
    let secret = data.join("secret.txt");
    std::fs::write(&secret, b"host secret").unwrap();
    std::os::unix::fs::chown(&secret, Some(browser_uid), Some(browser_uid)).unwrap();
    let plant = |name: &str, to: &Path| {
        std::os::unix::fs::symlink(to, files.join(name)).unwrap();
        std::os::unix::fs::lchown(files.join(name), Some(browser_uid), Some(browser_uid)).unwrap();
    };
    // The store's file on SQLite; on PostgreSQL the data dir holds no
    // database, so a root's file of the data dir instead.
    let db = server.db_path();
    let host_file = if db.exists() {
        db
    } else {
        let other = data.join("host-only.bin");
        std::fs::write(&other, b"host only").unwrap();
        other
    };
    plant("grid.db", &host_file);
    plant("passwd", Path::new("/etc/passwd"));
    plant("secret-symlink.txt", &secret);
    std::fs::hard_link(&secret, files.join("secret-hardlink.txt")).unwrap();
    std::fs::hard_link(&host_file, files.join("db-hardlink")).unwrap();

    let l = listing(&server, &id).await;
    assert_eq!(names(&l), ["real.txt", "second.txt"], "planted links listed: {l}");
    assert_eq!(l["totalBytes"], 5_000, "{l}");

    // A handed-out URL whose file was swapped for a symlink serves nothing.
    std::fs::remove_file(files.join("real.txt")).unwrap();
    plant("real.txt", Path::new("/etc/passwd"));
    let (status, _, bytes) = fetch(&server, &real_url).await;
    assert_eq!(status, 404, "a symlink in place of a listed file was served: {}", String::from_utf8_lossy(&bytes));
    assert_error(&server.download(&real_url).await, 404, "download not present");
    // A file that gained a second link (to a path outside the folder) serves nothing either.
    let (status, _, _) = fetch(&server, &second_url).await;
    assert_eq!(status, 200, "served before it has a second link");
    std::fs::hard_link(files.join("second.txt"), data.join("second-elsewhere.txt")).unwrap();
    assert_error(&server.download(&second_url).await, 404, "download not present");
    let l = listing(&server, &id).await;
    assert_eq!(names(&l), Vec::<String>::new(), "{l}");
    let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
    assert!(!log.contains("host secret"), "the secret reached the log");
}

#[tokio::test]
async fn a_download_past_the_sessions_limit_is_cancelled_and_the_listing_says_so() {
    let target = Target::start();
    let server = GridServer::start(opts(&["--session-download-limit-mib", "1"]));
    let (id, cdp_url) = running_session(&server).await;
    click_downloads(&server, &target, &cdp_url, &[("first.bin", 600_000)]).await;
    wait_listed(&server, &id, "first.bin", 600_000).await;
    // 600,000 + 700,000 bytes is more than 1 MiB.
    click_downloads(&server, &target, &cdp_url, &[("second.bin", 700_000)]).await;
    let l = wait_for("second.bin refused", LISTED_WITHIN, || async {
        let l = listing(&server, &id).await;
        match l["refused"].as_array().is_some_and(|r| r.iter().any(|r| r["name"] == "second.bin")) {
            true => Ok(l),
            false => Err(l.to_string()),
        }
    })
    .await;
    assert_eq!(target.hits("/attachment/second.bin"), 1);
    assert_eq!(l["limitBytes"], 1024 * 1024, "{l}");
    let refused = l["refused"].as_array().unwrap().iter().find(|r| r["name"] == "second.bin").unwrap();
    let reason = refused["reason"].as_str().unwrap_or("");
    assert!(reason.contains("limit of 1048576"), "{refused}");
    assert!(reason.starts_with("cancelled") || reason.starts_with("removed"), "{refused}");
    // What stays is within the limit, on disk too, whatever the browser managed to write first.
    let l = wait_for("the folder within its limit", LISTED_WITHIN, || async {
        let l = listing(&server, &id).await;
        let on_disk: u64 = std::fs::read_dir(folder(&server, &id).join("files"))
            .unwrap()
            .filter_map(|e| e.ok()?.metadata().ok())
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .sum();
        match names(&l) == ["first.bin"] && on_disk <= 1024 * 1024 {
            true => Ok(l),
            false => Err(format!("{on_disk} bytes on disk: {l}")),
        }
    })
    .await;
    assert_eq!(l["totalBytes"], 600_000, "{l}");
    // The CLI shows the refusal.
    let cli = server.cli(&["session", "downloads", &id]);
    assert!(cli.success() && cli.stdout.contains("refused second.bin:"), "{cli:?}");
}

/// The grace is kept across restarts: files of a session that ended with a
/// killed server are still listed after the restart (a long grace), and
/// removed by a later run once the grace has passed (a short one), with no
/// process of the first run left to do it.
#[tokio::test]
async fn files_outlive_a_restart_within_the_grace_and_are_removed_after_it() {
    let target = Target::start();
    let mut server = GridServer::start(opts(&["--session-download-grace-secs", "600"]));
    let (id, cdp_url) = running_session(&server).await;
    click_downloads(&server, &target, &cdp_url, &[("kept.bin", 4_321)]).await;
    wait_listed(&server, &id, "kept.bin", 4_321).await;

    // Killed with the session live: the next start ends it (lost) and keeps its files for the grace.
    server.kill9();
    server.restart();
    let l = listing(&server, &id).await;
    assert_eq!(names(&l), ["kept.bin"], "{l}");
    assert!(l["keptUntil"].is_string(), "the session ended with the restart: {l}");
    let url = entry(&l, "kept.bin").unwrap()["url"].as_str().unwrap().to_string();
    let (status, _, bytes) = fetch(&server, &url).await;
    assert!(status == 200 && bytes == pattern_bytes(4_321), "served after the restart: {status}");

    // A later run with a grace already over removes them.
    server.sigterm();
    server.set_extra_args(vec!["--session-download-grace-secs".into(), "1".into()]);
    server.restart();
    wait_swept(&server, &id, &url).await;
}
