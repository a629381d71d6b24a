//! The runnable examples of `examples/` (examples/README.md), each run as a
//! user runs it, a child process against a live grid-server and a local
//! target page: the Rust SDK's binaries (a batch, a session driven with
//! headless_chrome, a one-call screenshot), Python Playwright, Node
//! Puppeteer, the MCP host configurations (each tried with the official
//! Python MCP SDK) and curl on the one-call routes. A tool an example needs
//! that is missing fails the test, naming it.
//!
//! Runs on: one store, because its subject is the examples as a user runs them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use image::GenericImageView;
use serde_json::Value;

use grid_tests::bins::{example_bin, scrub_env, workspace_root};
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::Target;

const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";
/// Longest one example may run: Chromium starting on a busy 2-core machine,
/// a session's launch and attestation, a few pages.
const EXAMPLE_WITHIN: Duration = Duration::from_secs(240);

fn examples_dir() -> PathBuf {
    workspace_root().join("examples")
}

/// A browser pool of one for the captures; sessions as the server's defaults.
fn opts() -> ServerOptions {
    ServerOptions { extra_args: vec!["--browsers".into(), "1".into()], ..Default::default() }
}

/// `program args` with a clean environment and the grid's address and key,
/// as a user's shell after `export GRID_URL=... GRID_API_KEY=...`.
fn example(server: &GridServer, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    scrub_env(&mut cmd);
    cmd.env("GRID_URL", server.base_url()).env("GRID_API_KEY", server.api_key());
    cmd
}

/// Runs `cmd` to its end (killed past [`EXAMPLE_WITHIN`]); fails the test
/// with its output unless it exits 0; returns its stdout.
async fn run(server: &GridServer, what: &str, cmd: Command) -> String {
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let out = match tokio::time::timeout(EXAMPLE_WITHIN, cmd.output()).await {
        Ok(out) => grid_tests::child::checked(server, what, out),
        Err(_) => server.fail(&format!("{what} did not end within {EXAMPLE_WITHIN:?}")),
    };
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Fails the test naming `tool` unless `cmd` runs and exits 0.
fn require(tool: &str, install: &str, cmd: &mut Command) {
    match cmd.output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!("{tool} is missing ({install}): {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => panic!("{tool} is missing ({install}): {e}"),
    }
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The session example printed its id, the page's title and its release,
/// and the grid lists no live session after it.
async fn assert_session_example(server: &GridServer, out: &str, title: &str) {
    let id = out
        .lines()
        .find_map(|l| l.strip_prefix("session "))
        .unwrap_or_else(|| server.fail(&format!("no `session ID` line: {out}")));
    assert!(out.lines().any(|l| l == format!("title: {title}")), "no `title: {title}` line: {out}");
    assert!(out.lines().any(|l| l == format!("released {id}")), "the session was not released: {out}");
    let live = server.get("/sessions").await;
    assert_eq!(live.json, serde_json::json!([]), "a session is still live after the example: {live}");
}

#[tokio::test]
async fn rust_sdk_examples_run_a_batch_a_one_call_screenshot_and_a_session_driven_by_headless_chrome() {
    let target = Target::start();
    let server = GridServer::start(opts());
    let dir = tempfile::tempdir().expect("tempdir");

    // batch: every item's state, then the first completed item's screenshot.
    let shot = dir.path().join("batch.png");
    let pages = [target.url("/page/1"), target.url("/page/2")];
    let mut cmd = example(&server, example_bin("batch"));
    cmd.arg("-o").arg(&shot).args(&pages);
    let out = run(&server, "the batch example", cmd).await;
    for page in &pages {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().nth(2) == Some(page.as_str()))
            .unwrap_or_else(|| server.fail(&format!("no line for {page}: {out}")));
        let mut words = line.split_whitespace();
        let (job_id, state) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        assert_eq!(state, "completed", "{out}");
        assert_eq!(server.item(job_id).await["state"], "completed", "{out}");
    }
    assert!(out.contains(&format!("screenshot: {}", shot.display())), "{out}");
    assert!(read(&shot).starts_with(PNG_MAGIC), "{} is no PNG", shot.display());

    // screenshot: one call, the file written.
    let file = dir.path().join("page.png");
    let mut cmd = example(&server, example_bin("screenshot"));
    cmd.arg(target.url("/page/3")).arg(&file);
    let out = run(&server, "the screenshot example", cmd).await;
    assert!(out.contains("image/png") && out.contains("charged 1000 micro-euros"), "{out}");
    let bytes = read(&file);
    assert!(bytes.starts_with(PNG_MAGIC), "{} is no PNG", file.display());
    let image = image::load_from_memory(&bytes).expect("a PNG that decodes");
    assert_eq!(image.dimensions().0, 1280, "the example's 1280 px viewport");
    assert!(target.hits("/page/3") >= 1);

    // session: leased, driven with headless_chrome through the cdpUrl, released.
    let mut cmd = example(&server, example_bin("session"));
    cmd.arg(target.url("/page/7"));
    let out = run(&server, "the session example", cmd).await;
    assert_session_example(&server, &out, "page 7").await;
    assert!(target.hits("/page/7") >= 1, "the target never saw the session's browser");
}

#[tokio::test]
async fn python_playwright_example_drives_a_leased_session() {
    require(
        "Python Playwright (PyPI package playwright)",
        "scripts/test.sh installs it: pip install playwright",
        Command::new("python3").args(["-c", "import playwright.sync_api"]),
    );
    let target = Target::start();
    let server = GridServer::start(opts());
    let mut cmd = example(&server, "python3");
    cmd.arg(examples_dir().join("python/playwright_session.py")).arg(target.url("/page/8"));
    let out = run(&server, "the Python Playwright example", cmd).await;
    assert_session_example(&server, &out, "page 8").await;
    assert!(target.hits("/page/8") >= 1, "the target never saw the session's browser");
}

#[tokio::test]
async fn node_puppeteer_example_drives_a_leased_session() {
    require("Node.js (node)", "scripts/test.sh installs Debian's nodejs", Command::new("node").arg("--version"));
    let modules = workspace_root().join("tests/clients/node_modules");
    assert!(
        modules.join("puppeteer-core").is_dir(),
        "Puppeteer (puppeteer-core) is missing from {}: scripts/test.sh installs it (npm install in tests/clients)",
        modules.display()
    );
    let target = Target::start();
    let server = GridServer::start(opts());
    let mut cmd = example(&server, "node");
    cmd.env("NODE_PATH", &modules).arg(examples_dir().join("node/puppeteer_session.mjs")).arg(target.url("/page/9"));
    let out = run(&server, "the Node Puppeteer example", cmd).await;
    assert_session_example(&server, &out, "page 9").await;
    assert!(target.hits("/page/9") >= 1, "the target never saw the session's browser");
}

/// Every string in `v`, depth first.
fn strings(v: &Value) -> Vec<&str> {
    match v {
        Value::String(s) => vec![s],
        Value::Array(a) => a.iter().flat_map(strings).collect(),
        Value::Object(o) => o.values().flat_map(strings).collect(),
        _ => Vec::new(),
    }
}

#[tokio::test]
async fn mcp_host_configurations_name_the_endpoint_and_each_connects_the_official_sdk() {
    require(
        "the Python MCP SDK (PyPI package mcp)",
        "scripts/test.sh installs it: pip install 'mcp>=2.3'",
        Command::new("python3").args(["-c", "from mcp import Client; import mcp.client.streamable_http"]),
    );
    let server = GridServer::start(ServerOptions::default());
    let dir = examples_dir().join("mcp");
    let configs = ["claude_desktop_config.json", "claude_code.mcp.json", "vscode.mcp.json", "cursor.mcp.json"];
    for name in configs {
        let path = dir.join(name);
        let text = String::from_utf8(read(&path)).expect("UTF-8");
        let config: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name} is not JSON: {e}"));
        let all = strings(&config);
        assert!(all.contains(&"http://127.0.0.1:8080/mcp"), "{name} does not name http://127.0.0.1:8080/mcp");
        assert!(
            all.iter().any(|s| s.contains("grid_YOUR_API_KEY") || s.contains("${input:grid-api-key}")),
            "{name} holds no placeholder key"
        );

        // The host's URL and header, this grid's address and key put in.
        let mut cmd = example(&server, "python3");
        cmd.arg(dir.join("try_config.py")).arg(&path);
        let out = run(&server, &format!("try_config.py {name}"), cmd).await;
        let seen: Value =
            serde_json::from_str(out.trim()).unwrap_or_else(|e| server.fail(&format!("{name}: {e}: {out}")));
        assert_eq!(seen["url"], format!("{}/mcp", server.base_url()), "{name}: {seen}");
        assert!(seen["tools"].as_u64().unwrap_or(0) >= 10, "{name}: {seen}");
        assert!(seen["grid_status"]["maxSessions"].is_u64(), "{name}: {seen}");
        let header = seen["headers"][0].as_str().unwrap_or("").to_ascii_lowercase();
        assert!(header == "authorization" || header == "x-api-key", "{name}: {seen}");
    }
}

#[tokio::test]
async fn curl_example_writes_a_screenshot_a_pdf_and_the_content() {
    require("curl", "scripts/test.sh installs Debian's curl", Command::new("curl").arg("--version"));
    let target = Target::start();
    let server = GridServer::start(opts());
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = example(&server, "bash");
    cmd.arg(examples_dir().join("curl/one_call.sh")).arg(target.url("/page/4")).arg(dir.path());
    let out = run(&server, "the curl example", cmd).await;
    for file in ["page.png", "page.pdf", "page.html"] {
        assert!(out.contains(&format!("{file}: ")) && out.contains("charged"), "no line for {file}: {out}");
    }
    assert!(read(&dir.path().join("page.png")).starts_with(PNG_MAGIC), "page.png is no PNG: {out}");
    assert!(read(&dir.path().join("page.pdf")).starts_with(b"%PDF-"), "page.pdf is no PDF: {out}");
    let html = String::from_utf8(read(&dir.path().join("page.html"))).expect("UTF-8 HTML");
    assert!(html.contains("<title>page 4</title>") && html.contains("<h1>page 4</h1>"), "{html}");
}
