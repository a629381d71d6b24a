//! Session recordings (issue 29, Recordings): a session leased with
//! `"recording": true` is driven by Playwright through three local pages of
//! different solid colours, released, and its replay page (one HTML file)
//! fetched through the signed URL GET /sessions/{id}/recording gives; the
//! page is opened in a headless Chromium (another grid session) whose
//! player is stepped frame by frame, and its frames are also decoded here:
//! both see the three pages in order. The answer is 409 while the session
//! is live, 404 for another account and for a session leased without
//! recording; a tiny bound truncates the recording and the page says so;
//! `grid session recording ID -o FILE` writes the page.
//!
//! Every test starts its own grid-server (and so its own browsers).
//!
//! Runs on: both stores, because a recording is a store row that survives a restart.

use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use grid_tests::http::assert_error;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::sessions::{lease_as, release, release_as, wait_running_as};
use grid_tests::target::Target;
use grid_tests::wait::wait_for;
use serde_json::{json, Value};

/// Longest a released session's replay page may take to be written.
const WRITTEN_WITHIN: Duration = Duration::from_secs(30);
/// How long each page is shown in the recorded scene: a few of the
/// recording's frame intervals (200 ms), so each page's picture is kept.
const DWELL_MS: &str = "800";
/// The three pages' colours, in the order they are opened.
const COLOURS: [(&str, [u8; 3]); 3] = [("ff0000", [255, 0, 0]), ("00c000", [0, 192, 0]), ("0000ff", [0, 0, 255])];

fn opts(warm: Option<u32>, extra: &[&str]) -> ServerOptions {
    ServerOptions {
        warm_sessions: warm,
        extra_args: extra.iter().map(|s| s.to_string()).collect(),
        ..ServerOptions::default()
    }
}

/// Runs `node recording.js MODE ARGS...` in tests/clients; its JSON.
async fn client(server: &GridServer, args: &[String]) -> Value {
    let dir = grid_tests::bins::clients_dir(&["playwright-core"]);
    let mut cmd = Command::new("node");
    cmd.arg("recording.js").args(args).current_dir(dir);
    let out = tokio::task::spawn_blocking(move || cmd.output()).await.unwrap();
    let what = format!("Playwright (node recording.js {})", args.first().map_or("", String::as_str));
    let out = grid_tests::child::checked(server, &what, out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| server.fail(&format!("{what}: {e}: {stdout}")))
}

/// Leases a session with `body` and waits until it runs; returns (id, cdpUrl).
async fn running(server: &GridServer, body: Value) -> (String, String) {
    let lease = lease_as(server, server.api_key(), body).await;
    wait_running_as(server, server.api_key(), &lease.id).await;
    (lease.id, lease.cdp_url)
}

/// Playwright shows the three colour pages in the session.
async fn drive_colours(server: &GridServer, target: &Target, cdp_url: &str) {
    let mut args = vec!["drive".to_string(), cdp_url.to_string(), DWELL_MS.to_string()];
    args.extend(COLOURS.iter().map(|(hex, _)| target.url(&format!("/color/{hex}"))));
    let driven = client(server, &args).await;
    assert_eq!(driven["visited"].as_array().map(Vec::len), Some(3), "{driven}");
}

/// Polls GET /sessions/{id}/recording until 200 (409 while the page is
/// being written); the answer.
async fn wait_recording(server: &GridServer, id: &str) -> Value {
    wait_for(&format!("GET /sessions/{id}/recording 200"), WRITTEN_WITHIN, || async {
        let r = server.get(&format!("/sessions/{id}/recording")).await;
        match r.status {
            200 => Ok(r.json),
            409 => {
                assert_error(&r, 409, "recording not ready");
                Err(r.to_string())
            }
            _ => server.fail(&format!("GET /sessions/{id}/recording: expected 200, got {r}")),
        }
    })
    .await
}

/// The frames of a replay page: (ms, url, jpeg bytes).
fn frames_of(html: &str) -> Vec<(i64, String, Vec<u8>)> {
    let start = html.find("const FRAMES = [").expect("a frame list") + "const FRAMES = ".len();
    let end = html.find("];\nconst INFO").expect("the frame list's end") + 1;
    let list = html[start..end].replace(",\n]", "]");
    let frames: Vec<(i64, String, String)> = serde_json::from_str(&list).expect("frames as JSON");
    frames
        .into_iter()
        .map(|(t, url, b64)| (t, url, base64::engine::general_purpose::STANDARD.decode(b64).expect("base64")))
        .collect()
}

/// The middle pixel of a JPEG frame.
fn middle_of(jpeg: &[u8]) -> [u8; 3] {
    let img = image::load_from_memory_with_format(jpeg, image::ImageFormat::Jpeg).expect("a JPEG frame").to_rgb8();
    img.get_pixel(img.width() / 2, img.height() / 2).0
}

/// Which of [`COLOURS`] an RGB pixel is (JPEG moves colours a little).
fn colour_of(rgb: [u8; 3]) -> Option<&'static str> {
    COLOURS
        .iter()
        .find(|(_, c)| c.iter().zip(rgb).all(|(a, b)| (*a as i32 - b as i32).abs() <= 40))
        .map(|(hex, _)| *hex)
}

/// The colours in the order they appear, each run of one counted once.
fn runs(colours: impl IntoIterator<Item = Option<&'static str>>) -> Vec<&'static str> {
    let mut out: Vec<&str> = vec![];
    for c in colours.into_iter().flatten() {
        if out.last() != Some(&c) {
            out.push(c);
        }
    }
    out
}

/// A page that repaints on every animation frame and then stops changing
/// has its last picture recorded: the recorder paces its acks of a busy
/// page's frames (docs/sessions.md, Recordings), and the paint that came
/// while a frame was unacked must still reach the recording.
#[tokio::test]
async fn a_page_that_stops_changing_has_its_last_picture_recorded() {
    let server = GridServer::start(opts(None, &[]));
    for frames in ["120", "121"] {
        let (id, cdp_url) = running(&server, json!({"ttlMinutes": 10, "recording": true})).await;
        let settled =
            client(&server, &["settle".to_string(), cdp_url, frames.to_string(), "#00c000".to_string()]).await;
        assert_eq!(settled["painted"], json!(frames.parse::<u64>().unwrap()), "{settled}");
        release(&server, &id).await;
        let answer = wait_recording(&server, &id).await;
        let html = server.download(answer["url"].as_str().unwrap()).await.text;
        let frames_kept = frames_of(&html);
        let (_, _, last) = frames_kept.last().unwrap_or_else(|| panic!("no frame: {answer}"));
        let p = middle_of(last);
        assert_eq!(
            colour_of(p),
            Some("00c000"),
            "the last frame of {} is {p:?}, not the final green",
            frames_kept.len()
        );
    }
}

#[tokio::test]
async fn a_recorded_session_plays_back_its_three_pages() {
    let target = Target::start();
    // The server's own --warm-sessions (1): a recording lease takes a warm
    // browser, which is recorded from its lease on.
    let server = GridServer::start(opts(None, &[]));
    let (id, cdp_url) = running(&server, json!({"ttlMinutes": 10, "recording": true})).await;

    // Live: not ready, and said so.
    let live = server.get(&format!("/sessions/{id}/recording")).await;
    assert_error(&live, 409, "recording not ready");
    assert!(live.json["detail"].as_str().unwrap_or("").contains("live"), "{live}");

    drive_colours(&server, &target, &cdp_url).await;
    release(&server, &id).await;
    let answer = wait_recording(&server, &id).await;
    assert_eq!(answer["name"], "recording.html", "{answer}");
    assert_eq!(answer["truncated"], false, "{answer}");
    assert!(answer["frames"].as_u64().unwrap_or(0) >= 3, "{answer}");
    assert!(answer["keptUntil"].is_string() && answer["expiresAt"].is_string(), "{answer}");
    let url = answer["url"].as_str().unwrap().to_string();
    assert!(url.starts_with(&format!("{}/recordings/{id}?expires=", server.base_url())), "{url}");

    // Another account's key: 404 as a session that does not exist.
    let (_, other_key) = server.create_account("other", 1_000_000);
    assert_error(&server.get_as(Some(&other_key), &format!("/sessions/{id}/recording")).await, 404, "unknown session");
    let unknown = server.get("/sessions/ses_01NOSUCHSESSION0000000000/recording").await;
    assert_error(&unknown, 404, "unknown session");
    assert_error(&server.get_as(None, &format!("/sessions/{id}/recording")).await, 401, "unauthorized");

    // Listed with the session's downloads, marked as the recording.
    let listing = server.get(&format!("/sessions/{id}/downloads")).await;
    assert_eq!(listing.status, 200, "{listing}");
    let listed = listing.json["downloads"].as_array().cloned().unwrap_or_default();
    assert_eq!(listed.len(), 1, "{listing}");
    assert_eq!(listed[0]["name"], "recording.html", "{listing}");
    assert_eq!(listed[0]["recording"], true, "{listing}");
    assert_eq!(listed[0]["sizeBytes"], answer["sizeBytes"], "{listing}");
    assert_eq!(listing.json["totalBytes"], 0, "the recording is bounded on its own: {listing}");

    // The signed URL needs no credential; the page is served sandboxed.
    let r = server.http().get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let headers = r.headers().clone();
    let html = r.text().await.unwrap();
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    let csp = headers["content-security-policy"].to_str().unwrap();
    for directive in ["sandbox allow-scripts", "default-src 'none'", "img-src data:"] {
        assert!(csp.contains(directive), "{csp}");
    }
    assert!(!csp.contains("allow-same-origin"), "{csp}");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(html.len() as u64, answer["sizeBytes"].as_u64().unwrap());
    assert_error(&server.download(&url.replace("sig=", "sig=00")).await, 404, "download link invalid or expired");

    // Its frames, decoded here: the three pages in order, each frame
    // labelled with its page's URL.
    let frames = frames_of(&html);
    assert_eq!(frames.len() as u64, answer["frames"].as_u64().unwrap());
    assert!(frames.windows(2).all(|w| w[0].0 <= w[1].0), "frame times only grow");
    let mut decoded = vec![];
    for (_, frame_url, jpeg) in &frames {
        let colour = colour_of(middle_of(jpeg));
        if let Some(hex) = colour {
            assert!(frame_url.ends_with(&format!("/color/{hex}")), "a {hex} frame labelled {frame_url}");
        }
        decoded.push(colour);
    }
    assert_eq!(
        runs(decoded),
        ["ff0000", "00c000", "0000ff"],
        "frames: {:?}",
        frames.iter().map(|f| &f.1).collect::<Vec<_>>()
    );

    // Opened in a headless Chromium (a second session, leased without
    // recording), its player stepped frame by frame: the same three pages.
    let (viewer, viewer_cdp) = running(&server, json!({"ttlMinutes": 10})).await;
    let played = client(&server, &["play".to_string(), viewer_cdp, url.clone()]).await;
    assert_eq!(played["frames"], answer["frames"], "{played}");
    assert_eq!(played["info"]["truncated"], false, "{played}");
    assert_eq!(played["note"], "", "{played}");
    assert_eq!(played["played"], true, "Play ran to the last frame: {played}");
    let samples = played["samples"].as_array().cloned().unwrap_or_default();
    let seen = runs(samples.iter().map(|s| {
        let rgb: Vec<u8> =
            s["rgb"].as_array().into_iter().flatten().filter_map(|v| v.as_u64()).map(|v| v as u8).collect();
        colour_of([rgb[0], rgb[1], rgb[2]])
    }));
    assert_eq!(seen, ["ff0000", "00c000", "0000ff"], "{played}");
    let n = samples.len();
    assert_eq!(samples[n - 1]["count"], format!("{n} / {n}"), "{played}");
    assert!(samples[n - 1]["url"].as_str().unwrap_or("").ends_with("/color/0000ff"), "{played}");

    // A session leased without recording has none.
    assert_error(&server.get(&format!("/sessions/{viewer}/recording")).await, 404, "recording not present");
    release(&server, &viewer).await;
    assert_error(&server.get(&format!("/sessions/{viewer}/recording")).await, 404, "recording not present");

    // The CLI writes the page.
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("session.html");
    let cli = server.cli(&["session", "recording", &id, "-o", &file.display().to_string()]);
    assert!(cli.success(), "{cli:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), html, "the CLI writes the served page");
    let cli = server.cli(&["session", "recording", &viewer]);
    assert!(!cli.success() && cli.stderr.contains("recording not present"), "{cli:?}");

    // The MCP tool answers the same.
    let result = server.mcp_tool_as(server.api_key(), "get_session_recording", json!({"sessionId": id})).await;
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["structuredContent"]["frames"], answer["frames"], "{result}");
}

#[tokio::test]
async fn a_recording_past_its_bound_stops_and_says_it_was_truncated() {
    let target = Target::start();
    // A bound of a few kilobytes: a solid-colour frame takes about 7 kB
    // (base64 JPEG), so one or two are kept, not the three pages.
    let server = GridServer::start(opts(Some(0), &["--session-recording-max-bytes", "12000"]));
    let (id, cdp_url) = running(&server, json!({"ttlMinutes": 10, "recording": true})).await;
    drive_colours(&server, &target, &cdp_url).await;
    // Released by another account: refused, and the recording stays the owner's.
    let (_, other_key) = server.create_account("other", 1_000_000);
    assert_error(&release_as(&server, &other_key, &id).await, 404, "unknown session");
    release(&server, &id).await;
    let answer = wait_recording(&server, &id).await;
    assert_eq!(answer["truncated"], true, "{answer}");
    let frames = answer["frames"].as_u64().unwrap_or(0);
    assert!((1..3).contains(&frames), "kept frames up to the bound, then stopped: {answer}");
    let html = server.download(answer["url"].as_str().unwrap()).await;
    assert_eq!(html.status, 200, "{html}");
    let text = html.text.clone();
    assert_eq!(frames_of(&text).len() as u64, frames);
    assert!(text.contains("\"truncated\":true"), "the page knows it was truncated");
    assert!(text.contains("Truncated: recording stopped at the session's bound"), "and says so");
}

/// A server stopped with SIGTERM ends its sessions and writes their
/// recordings before it exits: the next run serves the page.
#[tokio::test]
async fn a_server_stopped_with_sigterm_writes_its_sessions_recordings() {
    let target = Target::start();
    let mut server = GridServer::start(opts(Some(0), &[]));
    let (id, cdp_url) = running(&server, json!({"ttlMinutes": 10, "recording": true})).await;
    let args = vec!["drive".to_string(), cdp_url, DWELL_MS.to_string(), target.url("/color/0000ff")];
    client(&server, &args).await;
    let status = server.sigterm();
    assert!(status.success(), "{status:?}");
    assert!(
        server.data_dir().join("session-downloads").join(&id).join("recording.html").is_file(),
        "the page was written before the server exited"
    );
    server.restart();
    let answer = wait_recording(&server, &id).await;
    assert!(answer["frames"].as_u64().unwrap_or(0) >= 1, "{answer}");
    let page = server.download(answer["url"].as_str().unwrap()).await;
    assert_eq!(page.status, 200, "{page}");
    let decoded: Vec<Option<&str>> =
        frames_of(&page.text).iter().map(|(_, _, jpeg)| colour_of(middle_of(jpeg))).collect();
    assert_eq!(runs(decoded), ["0000ff"], "the blue page was recorded");
}
