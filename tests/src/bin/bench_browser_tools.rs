//! What an MCP browser tool adds over the same CDP command sent directly,
//! in one run: a leased session, one page; `--calls N` times
//! `Runtime.evaluate("1 + 1")` on a CDP client of the session, then N times
//! the `browser_evaluate` tool (raw JSON-RPC `tools/call` over HTTP, as an
//! MCP client sends it) with the same expression; then `browser_snapshot`
//! of a page of `--elements` buttons, and Playwright MCP's snapshot of the
//! same page (on another session of the same grid, through its cdpUrl:
//! the same Chromium). Prints p50 and p95 of each, the tool's added time
//! (p50 goal: under 20 ms, docs/mcp.md) and the snapshots' ratios.
//!
//!     bench_browser_tools [--calls N] [--elements E]

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use grid_tests::bench::{parse, positive};
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::sessions::lease_running;
use grid_tests::target::Target;

fn percentile(samples: &[Duration], p: f64) -> f64 {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    ms.get(((ms.len().max(1) - 1) as f64 * p).round() as usize).copied().unwrap_or(f64::NAN)
}

async fn tool(http: &reqwest::Client, url: &str, key: &str, id: u64, name: &str, args: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args}});
    let r = http
        .post(url)
        .header("x-api-key", key)
        .header("accept", "application/json, text/event-stream")
        .json(&body)
        .send()
        .await
        .expect("tools/call");
    let v: Value = r.json().await.expect("a JSON-RPC answer");
    assert_eq!(v["result"]["isError"], false, "{name}: {v}");
    v
}

#[tokio::main]
async fn main() {
    let f = parse("bench_browser_tools", &[positive("--calls", 200), positive("--elements", 1000)]);
    let (calls, elements) = (f.get("--calls") as usize, f.get("--elements") as usize);
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let (lease, mut cdp) = lease_running(&server, json!({"ttlMinutes": 10})).await;
    let (_, page) = cdp.open_page(&target.url("/page/1")).await.expect("a page");
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let mcp = format!("{}/mcp", server.base_url());
    let key = server.api_key().to_string();

    let mut direct = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        let v = cdp.evaluate(&page, "1 + 1").await.expect("Runtime.evaluate");
        direct.push(t.elapsed());
        assert_eq!(v, json!(2));
    }
    let mut through_tool = Vec::with_capacity(calls);
    for i in 0..calls {
        let t = Instant::now();
        let v = tool(
            &http,
            &mcp,
            &key,
            i as u64,
            "browser_evaluate",
            json!({"sessionId": lease.id, "expression": "1 + 1"}),
        )
        .await;
        through_tool.push(t.elapsed());
        assert_eq!(v["result"]["structuredContent"]["result"], json!(2));
    }
    let (d50, d95, t50, t95) = (
        percentile(&direct, 0.5),
        percentile(&direct, 0.95),
        percentile(&through_tool, 0.5),
        percentile(&through_tool, 0.95),
    );
    println!("direct CDP Runtime.evaluate: p50 {d50:.2} ms, p95 {d95:.2} ms ({calls} calls)");
    println!("browser_evaluate tool:       p50 {t50:.2} ms, p95 {t95:.2} ms ({calls} calls)");
    println!("added by the tool: p50 {:.2} ms, p95 {:.2} ms", t50 - d50, t95 - d95);

    // A page of `elements` buttons; its snapshot, by the grid's tool and by
    // Playwright MCP (on a session of its own, through its cdpUrl).
    let buttons = target.url(&format!("/buttons/{elements}"));
    tool(&http, &mcp, &key, 9_999, "browser_navigate", json!({"sessionId": lease.id, "url": buttons})).await;
    let mut snapshots = vec![];
    let mut size = 0;
    for i in 0..ROUNDS {
        let t = Instant::now();
        let v = tool(&http, &mcp, &key, 10_000 + i, "browser_snapshot", json!({"sessionId": lease.id})).await;
        snapshots.push(t.elapsed());
        size = v["result"]["structuredContent"]["snapshot"].as_str().map_or(0, str::len);
    }
    let grid_p50 = percentile(&snapshots, 0.5);
    println!(
        "grid browser_snapshot of {elements} buttons:    p50 {grid_p50:.1} ms, {size} bytes ({:.1} bytes per element)",
        size as f64 / elements as f64
    );
    let (pw_p50, pw_size) = playwright_mcp(&server, &buttons).await;
    println!(
        "Playwright MCP browser_snapshot, same page: p50 {pw_p50:.1} ms, {pw_size} bytes ({:.1} bytes per element)",
        pw_size as f64 / elements as f64
    );
    println!(
        "grid against Playwright MCP: {:.2}x the time, {:.2}x the bytes",
        grid_p50 / pw_p50,
        size as f64 / pw_size as f64
    );
    println!(
        "{}",
        json!({"calls": calls, "directP50Ms": d50, "directP95Ms": d95, "toolP50Ms": t50, "toolP95Ms": t95,
               "addedP50Ms": t50 - d50, "addedP95Ms": t95 - d95, "elements": elements,
               "snapshotP50Ms": grid_p50, "snapshotBytes": size,
               "playwrightMcpSnapshotP50Ms": pw_p50, "playwrightMcpSnapshotBytes": pw_size})
    );
}

/// Snapshots taken of each page, by each side.
const ROUNDS: u64 = 10;

/// Playwright MCP's snapshot of `url` on a session of its own: its p50 in
/// milliseconds (timed by its MCP client) and its size.
async fn playwright_mcp(server: &GridServer, url: &str) -> (f64, usize) {
    let lease = grid_tests::sessions::lease_as(server, server.api_key(), json!({"ttlMinutes": 10})).await;
    let dir = grid_tests::bins::workspace_root().join("tests/clients");
    let out = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new("node");
    cmd.arg("playwright_mcp_snapshot.mjs")
        .args([lease.cdp_url.as_str(), url, &ROUNDS.to_string()])
        .arg(out.path())
        .current_dir(&dir);
    let v = grid_tests::child::run_json(server, "playwright_mcp_snapshot.mjs (node, @playwright/mcp)", &mut cmd);
    let ms: Vec<Duration> = v["ms"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_f64)
        .map(|m| Duration::from_secs_f64(m / 1000.0))
        .collect();
    grid_tests::sessions::release(server, &lease.id).await;
    (percentile(&ms, 0.5), v["bytes"].as_u64().unwrap_or(0) as usize)
}
