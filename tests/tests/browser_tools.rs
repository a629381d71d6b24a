//! The MCP browser tools (docs/mcp.md, "Browser tools"): an agent with only
//! the MCP endpoint leases a browser and drives it by snapshot refs. A
//! scripted agent (tests/mcp/agent.py, the official Python MCP SDK, no
//! model) signs in to a local site, shops through five pages, reads a value,
//! takes a screenshot it sees, uploads a file it holds, drags and drops,
//! reads the console and the requests, opens and closes a tab, and is refused what a
//! CDP client is refused; another account gets not-found on every tool; a
//! CDP client and the tools drive one session at once.
//!
//! Runs on: one store, because its subject is the browser tools on a live page.

use std::process::Command;

use base64::Engine as _;
use serde_json::{json, Value};

use grid_tests::bins::{clients_dir, workspace_root};
use grid_tests::child::run_json;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::sessions::{lease_as, lease_running, release, wait_running_as};
use grid_tests::target::Target;

const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

fn python(server: &GridServer, script: &str, args: &[&str]) -> Value {
    let path = workspace_root().join("tests/mcp").join(script);
    let what = format!("{script} (python3 with the MCP SDK: PyPI package mcp)");
    run_json(server, &what, Command::new("python3").arg(&path).args(args))
}

#[tokio::test]
async fn a_scripted_agent_signs_in_and_orders_through_snapshot_refs_in_both_eras() {
    let server = GridServer::start(ServerOptions::default());
    let target = Target::start();
    let site = format!("http://{}", target.addr());
    let mcp = format!("{}/mcp", server.base_url());
    for mode in ["legacy", "auto"] {
        let out = python(&server, "agent.py", &[&mcp, server.api_key(), mode, &site]);
        assert_eq!(out["signedIn"], "Home", "{mode}: {out}");
        assert_eq!(out["cartTitle"], "Cart", "{mode}: {out}");
        let done = out["doneUrl"].as_str().unwrap_or_default();
        assert!(done.contains("/shop/done?qty=3&note=ring+twice"), "{mode}: {done}");
        let snapshot = out["doneSnapshot"].as_str().unwrap_or_default();
        assert!(snapshot.contains("- heading \"Order placed: 3 teapots\" [level=1] [ref=e"), "{mode}: {snapshot}");
        assert_eq!(out["evaluated"], "Note: ring twice", "{mode}");
        assert_eq!(out["screenshotType"], json!(["image/png"]), "{mode}");
        let png =
            base64::engine::general_purpose::STANDARD.decode(out["screenshot"].as_str().unwrap_or_default()).unwrap();
        assert!(png.starts_with(PNG_MAGIC), "{mode}: not a PNG");
        assert_eq!(out["backTitle"], "Cart", "{mode}: {out}");
        // The file the agent sent reached the page, bytes, name and type.
        assert_eq!(out["chosen"], "Chosen: receipt.txt (12 bytes, text/plain): paid in full", "{mode}: {out}");
        // The page's console, in order, and the errors alone.
        let console = out["console"]["messages"].as_array().unwrap_or_else(|| panic!("{mode}: {out}"));
        let texts: Vec<&str> = console.iter().filter_map(|m| m["text"].as_str()).collect();
        assert!(texts.starts_with(&["extras ready 3", "grid test error"]), "{mode}: {texts:?}");
        assert_eq!(console[1]["type"], "error", "{mode}");
        assert!(out["consoleText"].as_str().unwrap().contains("[ERROR] grid test error"), "{mode}: {out}");
        let errors = out["consoleErrors"]["messages"].as_array().unwrap();
        assert!(errors.iter().all(|m| m["type"] == "error") && !errors.is_empty(), "{mode}: {errors:?}");
        // The page's own requests: its document and its fetch, answered.
        let requests = out["network"]["requests"].as_array().unwrap_or_else(|| panic!("{mode}: {out}"));
        let find = |path: &str| requests.iter().find(|r| r["url"].as_str().unwrap_or_default().ends_with(path));
        let document = find("/shop/extras").unwrap_or_else(|| panic!("{mode}: {requests:?}"));
        assert_eq!((document["resourceType"].clone(), document["status"].clone()), (json!("Document"), json!(200)));
        let ping = find("/page/extras-ping").unwrap_or_else(|| panic!("{mode}: {requests:?}"));
        assert_eq!(
            (ping["method"].clone(), ping["resourceType"].clone(), ping["status"].clone()),
            (json!("GET"), json!("Fetch"), json!(200))
        );
        assert!(out["networkText"].as_str().unwrap().contains("/page/extras-ping => [200]"), "{mode}: {out}");
        assert!(target.hits("/page/extras-ping") >= 1);
        let tabs = out["tabsAfterNew"].as_array().unwrap();
        assert_eq!(tabs.len(), 2, "{mode}: {out}");
        assert_eq!((tabs[1]["current"].clone(), tabs[1]["title"].clone()), (json!(true), json!("page 3")), "{mode}");
        assert_eq!(out["tabsAfterClose"].as_array().map(Vec::len), Some(1), "{mode}: {out}");
        assert!(out["fileRefused"].as_str().unwrap().contains("refused by the grid"), "{mode}: {out}");
        assert!(out["staleRef"].as_str().unwrap().contains("e999999 is not on the page any more"), "{mode}: {out}");
        assert!(out["badArguments"].as_str().unwrap().contains("ref: required"), "{mode}: {out}");
        assert!(out["afterRelease"].as_str().unwrap().contains("unknown session"), "{mode}: {out}");
        // The pages were reached by the session's browser, through its network path.
        assert!(target.hits("/shop/done") >= 1);
    }
    // Tool calls cost nothing beyond the sessions' own time: only lease
    // reservations were taken.
    let account = server.get_as(Some(server.api_key()), "/account?kind=reserve").await;
    for e in account.json["ledger"].as_array().unwrap() {
        assert!(e["subject"].as_str().unwrap().starts_with("ses_"), "a reservation for something else: {e}");
    }
}

#[tokio::test]
async fn another_accounts_session_is_unknown_to_every_tool_and_a_cdp_client_drives_beside_the_tools() {
    let server = GridServer::start(ServerOptions::default());
    let target = Target::start();
    let (lease, mut cdp) = lease_running(&server, json!({"ttlMinutes": 5})).await;
    let (_, stranger) = server.create_account("stranger", 10_000_000);
    let mcp = format!("{}/mcp", server.base_url());
    let calls: Vec<Value> = grid_core::browser_tools::TOOLS
        .iter()
        .map(|t| {
            json!([t.name, {"sessionId": lease.id, "url": target.url("/page/1"), "ref": "e1", "text": "x",
                                 "expression": "document.cookie", "key": "Enter", "values": ["a"], "action": "list",
                                 "fields": [{"ref": "e1", "value": "x"}], "startRef": "e1", "endRef": "e2",
                                 "files": [{"name": "a.txt", "contentBase64": "aGk="}]}])
        })
        .collect();
    // Arguments a tool does not take are refused first: strip them per tool.
    let calls: Vec<Value> = calls
        .into_iter()
        .map(|c| {
            let name = c[0].as_str().unwrap().to_string();
            let schema = grid_core::browser_tools::input_schema(&name);
            let mut args = c[1].as_object().unwrap().clone();
            args.retain(|k, _| schema["properties"].get(k).is_some());
            json!([name, args])
        })
        .collect();
    let out = python(&server, "client.py", &[&mcp, &stranger, "auto", &Value::Array(calls).to_string()]);
    for call in out["calls"].as_array().unwrap() {
        assert_eq!(call["isError"], true, "{call}");
        assert_eq!(call["text"], r#"{"error":"unknown session"}"#, "{call}");
    }
    assert_eq!(target.hits("/page/1"), 0, "a stranger's tool reached no page");

    // The lessee's CDP client and the tools at once: the client opens a page,
    // the tools read and change it, the client sees the change.
    let (_, page) = cdp.open_page(&target.url("/shop/signin")).await.expect("the CDP client opens a page");
    let out = python(
        &server,
        "client.py",
        &[
            &mcp,
            server.api_key(),
            "legacy",
            &json!([["browser_snapshot", {"sessionId": lease.id}],
                    ["browser_evaluate", {"sessionId": lease.id, "expression": "document.getElementById('user').value = 'set by a tool'"}]])
            .to_string(),
        ],
    );
    let snapshot = out["calls"][0]["structured"]["snapshot"].as_str().unwrap_or_else(|| panic!("{out}"));
    assert!(snapshot.contains("textbox \"User name\""), "{snapshot}");
    assert_eq!(out["calls"][1]["isError"], false, "{out}");
    let seen = cdp.evaluate(&page, "document.getElementById('user').value").await.expect("the client still drives");
    assert_eq!(seen, "set by a tool");
    release(&server, &lease.id).await;
}

/// Playwright keeps its page while the tools drive it: each tool call
/// attaches to the page and detaches again, and a client that heard of
/// those detachments (`Target.detachedFromTarget`, its target's id) took
/// its own page for closed (docs/sessions.md, "Live view").
#[tokio::test]
async fn a_playwright_client_keeps_its_page_while_the_tools_drive_it() {
    let server = GridServer::start(ServerOptions::default());
    let target = Target::start();
    let lease = lease_as(&server, server.api_key(), json!({"ttlMinutes": 5})).await;
    wait_running_as(&server, server.api_key(), &lease.id).await;
    let dir = clients_dir(&["playwright-core", "@modelcontextprotocol/sdk"]);
    let mcp = format!("{}/mcp", server.base_url());
    let page = target.url("/shop/signin");
    let mut both = Command::new("node");
    both.args(["playwright_beside_tools.mjs", &lease.cdp_url, &mcp, server.api_key(), &lease.id, &page])
        .current_dir(&dir);
    let out = run_json(&server, "playwright_beside_tools.mjs (node)", &mut both);
    assert_eq!(out["closed"], false, "Playwright took its page for closed: {out}");
    assert_eq!(out["typed"], "typed by a tool", "{out}");
    assert_eq!(out["screenshotTypes"], json!(["image/png"]), "{out}");
    assert_eq!(out["title"], "Sign in", "{out}");
    // The session's first tab and the client's own: the tools opened none.
    assert_eq!(out["pages"], json!(["about:blank", page]), "{out}");
    assert!(target.hits("/shop/signin") >= 1);
    release(&server, &lease.id).await;
}

/// The same kind of task with the official TypeScript SDK, both its clients.
#[tokio::test]
async fn the_typescript_sdks_drive_a_session_through_the_tools() {
    let server = GridServer::start(ServerOptions::default());
    let target = Target::start();
    let site = format!("http://{}", target.addr());
    let mcp = format!("{}/mcp", server.base_url());
    let dir = clients_dir(&["@modelcontextprotocol/sdk", "@modelcontextprotocol/client"]);
    for (sdk, mode) in [("v1", "legacy"), ("v2", "auto")] {
        let mut agent = Command::new("node");
        agent.args(["mcp_agent.mjs", &mcp, server.api_key(), sdk, mode, &site]).current_dir(&dir);
        let out = run_json(&server, &format!("mcp_agent.mjs {sdk} (node)"), &mut agent);
        assert_eq!(out["signedIn"], "Home", "{sdk}: {out}");
        assert!(out["doneUrl"].as_str().unwrap().contains("/shop/done?qty=2&note=leave+at+door"), "{sdk}: {out}");
        assert!(out["doneSnapshot"].as_str().unwrap().contains("heading \"Order placed: 2 teapots\""), "{sdk}: {out}");
        assert_eq!(out["screenshot"], json!(["image/png"]), "{sdk}");
        assert_eq!(out["evaluated"], "/shop/done", "{sdk}");
        assert_eq!(out["chosen"], "Chosen: note.csv (7 bytes, text/csv): a,b\n1,2", "{sdk}: {out}");
        assert_eq!(out["console"]["messages"][0]["text"], "grid test error", "{sdk}: {out}");
        let opened = out["tabsAfterNew"].as_array().unwrap();
        assert_eq!(
            (opened.len(), opened[1]["title"].clone(), opened[1]["current"].clone()),
            (2, json!("page 2"), json!(true)),
            "{sdk}: {out}"
        );
        let left = out["tabsAfterClose"].as_array().unwrap();
        assert_eq!((left.len(), left[0]["title"].clone()), (1, json!("Extras")), "{sdk}: {out}");
        assert!(out["afterRelease"].as_str().unwrap().contains("unknown session"), "{sdk}: {out}");
    }
}

/// The grid's snapshot names what Playwright MCP's names: Playwright MCP
/// (the field's reference, run as its users run it, on stdio) reads a page
/// through a session's cdpUrl, the grid's `browser_snapshot` reads the same
/// page on another session, and every element an agent acts on (headings,
/// fields, buttons, links, choices) is there in both, with the same role
/// and name.
#[tokio::test]
async fn snapshots_name_the_elements_playwright_mcp_names() {
    let server = GridServer::start(ServerOptions::default());
    let target = Target::start();
    let dir = clients_dir(&["@playwright/mcp"]);
    let roles = ["heading", "textbox", "button", "link", "combobox", "checkbox", "region"];
    let named = |snapshot: &str| -> std::collections::BTreeSet<(String, String)> {
        // Playwright writes its snapshot as YAML, quoting a line that holds
        // `: ` ('heading "Cart: 2"'); the grid writes every line bare.
        let line = regex::Regex::new(r#"- '?(\w+) "((?:[^"\\]|\\.)*)""#).unwrap();
        line.captures_iter(snapshot)
            .map(|c| (c[1].to_string(), c[2].to_string()))
            .filter(|(role, _)| roles.contains(&role.as_str()))
            .collect()
    };
    let mcp = format!("{}/mcp", server.base_url());
    for page in ["/shop/signin", "/shop/product?user=ada", "/shop/cart?qty=2", "/shop/extras"] {
        let theirs_lease = lease_as(&server, server.api_key(), json!({"ttlMinutes": 5})).await;
        let out_dir = tempfile::tempdir().unwrap();
        let mut pw = Command::new("node");
        pw.arg("playwright_mcp_snapshot.mjs")
            .args([&theirs_lease.cdp_url, &target.url(page), "1"])
            .arg(out_dir.path())
            .current_dir(&dir);
        let theirs = run_json(&server, "playwright_mcp_snapshot.mjs (node, @playwright/mcp)", &mut pw);
        release(&server, &theirs_lease.id).await;
        let mine_lease = lease_as(&server, server.api_key(), json!({"ttlMinutes": 5})).await;
        let calls = json!([["browser_navigate", {"sessionId": mine_lease.id, "url": target.url(page)}]]);
        let out = python(&server, "client.py", &[&mcp, server.api_key(), "auto", &calls.to_string()]);
        let mine = out["calls"][0]["structured"]["snapshot"].as_str().unwrap_or_else(|| panic!("{out}")).to_string();
        release(&server, &mine_lease.id).await;
        let theirs = theirs["snapshot"].as_str().unwrap_or_default();
        let (a, b) = (named(&mine), named(theirs));
        assert!(!b.is_empty(), "{page}: Playwright MCP named nothing:\n{theirs}");
        assert_eq!(a, b, "{page}: the grid's snapshot:\n{mine}\n\nPlaywright MCP's:\n{theirs}");
    }
}
