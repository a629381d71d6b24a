//! The web console (`{base_url}/console`, docs/console.md), and GET /batches,
//! the list it needed that the API lacked.
//!
//! The browser that renders the console is a grid session's Chromium (leased
//! by a third account, so its own lease and charge stay out of the accounts
//! under test), driven by Playwright from tests/clients/console.js. The
//! script gives a key, submits a batch and a job through the API, and
//! watches the console show them; leases a session in the console and
//! opens its live view; reads the charges chart; then gives a second
//! account's key. This test judges what it saw against the API.
//!
//! Runs on: one store, because its subject is the web console's page.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use grid_tests::http::{assert_error, http_client, Resp};
use grid_tests::jobs::{check_compute_env, compute_options, sh_job};
use grid_tests::server::GridServer;
use grid_tests::sessions::{lease_running_as, release_as};
use grid_tests::target::Target;

/// What a ledger subject's charge is for, as the console's chart sorts it.
fn kind_of(subject: &str) -> Option<&'static str> {
    match subject.split('_').next() {
        Some("it" | "bt") => Some("captures"),
        Some("cj") => Some("jobs"),
        Some("ses") => Some("sessions"),
        _ => None,
    }
}

/// The account's charges summed per kind, read through GET /account.
async fn charges_by_kind(server: &GridServer, key: &str) -> BTreeMap<&'static str, i64> {
    let mut sums = BTreeMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/account?kind=charge&limit=100&cursor={c}"),
            None => "/account?kind=charge&limit=100".to_string(),
        };
        let r = server.get_as(Some(key), &path).await;
        assert_eq!(r.status, 200, "{r}");
        for e in r.json["ledger"].as_array().unwrap() {
            if let Some(kind) = e["subject"].as_str().and_then(kind_of) {
                *sums.entry(kind).or_insert(0) += e["amountMicros"].as_i64().unwrap();
            }
        }
        match r.json["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return sums,
        }
    }
}

/// Runs `node console.js ARGS...` in tests/clients; its JSON.
async fn console_client(server: &GridServer, args: Vec<String>) -> Value {
    let dir = grid_tests::bins::workspace_root().join("tests/clients");
    for module in ["playwright-core", "axe-core"] {
        assert!(
            dir.join("node_modules").join(module).is_dir(),
            "{module} is missing from {}: scripts/test.sh installs it (npm install there)",
            dir.display()
        );
    }
    let mut cmd = Command::new("node");
    cmd.arg("console.js").args(args).current_dir(dir);
    let out = tokio::task::spawn_blocking(move || cmd.output()).await.unwrap();
    let out = grid_tests::child::checked(server, "Playwright (node console.js)", out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| server.fail(&format!("console.js: {e}: {stdout}")))
}

#[tokio::test]
async fn the_console_shows_an_accounts_work_live_and_nothing_of_anothers() {
    check_compute_env();
    let target = Target::start();
    let mut opts = compute_options();
    opts.extra_args.extend(["--max-sessions".into(), "3".into()]);
    let server = GridServer::start(opts);
    let key = server.api_key().to_string();
    let (_, other_key) = server.create_account("other", 50_000_000);
    let (_, viewer_key) = server.create_account("viewer", 50_000_000);

    // The page itself: served without credential, from the binary, under a
    // policy that allows only its own script and style.
    let page = Resp::read(http_client().get(format!("{}/console", server.base_url()))).await.expect("console");
    assert_eq!(page.status, 200, "{page}");
    assert_eq!(page.header("content-type"), Some("text/html; charset=utf-8"));
    let csp = page.header("content-security-policy").unwrap_or_default().to_string();
    for rule in ["default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"] {
        assert!(csp.contains(rule), "{rule} missing from {csp}");
    }
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"), "{csp}");
    assert!(!page.text.contains("<script>") && !page.text.contains("style="), "inline script or style: {}", page.text);
    for (asset, kind) in [("/console/console.js", "text/javascript"), ("/console/console.css", "text/css")] {
        let r = Resp::read(http_client().get(format!("{}{asset}", server.base_url()))).await.expect("asset");
        assert_eq!(r.status, 200, "{asset}: {r}");
        assert!(r.header("content-type").is_some_and(|t| t.starts_with(kind)), "{asset}: {r}");
    }

    // A PNG of each view: into a temporary folder, or with
    // GRID_CONSOLE_SHOTS=1 into docs/console/ (the pictures docs/console.md shows).
    let scratch = tempfile::tempdir().unwrap();
    let shots = match std::env::var("GRID_CONSOLE_SHOTS").as_deref() {
        Ok("1") => grid_tests::bins::workspace_root().join("docs/console"),
        _ => scratch.path().to_path_buf(),
    };
    std::fs::create_dir_all(&shots).unwrap();
    let urls: Vec<String> = (1..=3).map(|n| target.url(&format!("/page/{n}"))).collect();
    let job = sh_job("for i in 1 2 3 4 5 6; do echo tick $i; sleep 1; done; echo done");
    let plan = json!({"urls": urls, "job": job, "pageUrl": target.url("/color/00c000")});

    let (viewer, _cdp) = lease_running_as(&server, &viewer_key, json!({"ttlMinutes": 15})).await;
    let seen = console_client(
        &server,
        vec![
            viewer.cdp_url.clone(),
            server.base_url(),
            key.clone(),
            other_key.clone(),
            plan.to_string(),
            shots.display().to_string(),
        ],
    )
    .await;
    release_as(&server, &viewer_key, &viewer.id).await;
    let report = serde_json::to_string_pretty(&seen).unwrap();

    // Nothing went wrong in the page, and axe-core found nothing serious.
    assert_eq!(seen["errors"], json!([]), "console errors: {report}");
    assert_eq!(seen["violations"], json!([]), "accessibility: {report}");
    assert!(seen["loadMs"].as_u64().unwrap() < 2000, "the page took {} ms to load", seen["loadMs"]);
    // The key never left the tab's memory.
    assert_eq!(seen["keyInUrl"], false, "{report}");
    assert_eq!(seen["keyInStorage"], false, "{report}");
    assert_eq!(seen["keyAfterReload"], "", "{report}");

    // The batch filled up in the page, and its item's files opened.
    let batch_id = seen["batchId"].as_str().unwrap().to_string();
    assert_eq!(seen["batchCompleted"], json!({"completed": 3, "failed": 0}), "{report}");
    assert!(seen["screenshot"]["width"].as_u64().unwrap() > 0, "{report}");
    assert!(seen["screenshot"]["src"].as_str().unwrap().contains("/downloads/it_"), "{report}");
    let mut links: Vec<&str> = seen["itemLinks"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    links.sort_unstable();
    assert_eq!(links, ["html", "meta", "screenshot"], "{report}");

    // The job's log was followed while it ran, to its end.
    let job_id = seen["jobId"].as_str().unwrap().to_string();
    let running = &seen["logWhileRunning"];
    assert!(
        ["RUNNING", "PROVISIONING", "QUEUED", "ACCEPTED"].contains(&running["phase"].as_str().unwrap()),
        "{report}"
    );
    assert!(seen["logAtEnd"].as_str().unwrap().contains("tick 6\ndone"), "{report}");

    // The session: listed with its thumbnail, its live view showed its page,
    // and once released: its charge and recording.
    let session_id = seen["sessionId"].as_str().unwrap().to_string();
    assert!(seen["thumbnail"]["alt"].as_str().unwrap().contains("/color/00c000"), "{report}");
    assert!(seen["liveView"]["rgb"].is_array(), "{report}");
    // The lessee's Playwright, connected all along, was not disturbed by the
    // console's thumbnails.
    assert_eq!(seen["lesseeStillWorks"], true, "{report}");
    assert_eq!(seen["recordingLink"], true, "{report}");
    assert!(seen["endedCharge"].as_str().unwrap().ends_with('€'), "{report}");

    // The chart holds exactly the account's charges, per kind.
    let sums = charges_by_kind(&server, &key).await;
    for kind in ["captures", "jobs", "sessions"] {
        assert!(sums.get(kind).copied().unwrap_or(0) > 0, "no {kind} charge in the ledger: {sums:?}");
        assert_eq!(seen["chart"][kind].as_i64(), sums.get(kind).copied(), "{kind}: {report}");
    }
    // The ledger below it, ten entries a page: this account has more.
    assert_eq!(seen["ledgerRows"], 10, "{report}");
    assert_eq!(seen["ledgerOlder"], true, "{report}");
    assert!(seen["ledgerPage2Rows"].as_u64().unwrap() > 0, "{report}");
    assert!(seen["grid"]["sessions"].as_str().unwrap().ends_with("of 3"), "{report}");
    assert_eq!(seen["grid"]["nodes"], "1", "{report}");

    // The other account saw none of it.
    let other = &seen["other"];
    assert_eq!(other["chartRects"], 0, "{report}");
    assert_eq!(other["batches"], json!([]), "{report}");
    assert_eq!(other["jobs"], json!([]), "{report}");
    assert_eq!(other["sessions"], json!([]), "{report}");
    let text = other["text"].as_str().unwrap();
    for id in [&batch_id, &job_id, &session_id] {
        assert!(!text.contains(id.as_str()), "the other account's console shows {id}: {text}");
        assert!(!other["ledgerSubjects"].to_string().contains(id.as_str()), "{report}");
    }

    for view in ["account", "batches", "jobs", "sessions", "grid"] {
        let png = std::fs::read(shots.join(format!("{view}.png"))).unwrap_or_default();
        assert!(png.starts_with(b"\x89PNG"), "{view}.png was not written in {}", shots.display());
    }
}

/// GET /batches: the caller's own batches, newest first, paged by a cursor
/// bound to the caller; the same through MCP's `list_batches`, the SDK and
/// `grid batch list`.
#[tokio::test]
async fn batches_are_listed_newest_first_and_only_to_their_account() {
    let target = Target::start();
    let server = GridServer::start(Default::default());
    let key = server.api_key().to_string();
    let (_, other_key) = server.create_account("other", 50_000_000);
    let mut mine = vec![];
    for n in 1..=3 {
        mine.push(
            server.submit_as(&key, &json!({"urls": [target.url(&format!("/page/{n}"))], "script": "fetch"})).await,
        );
    }
    let theirs = server.submit_as(&other_key, &json!({"urls": [target.url("/page/9")], "script": "fetch"})).await;
    server.wait_batch_done(&mine[2], Duration::from_secs(60)).await;

    let first = server.get_as(Some(&key), "/batches?limit=2").await;
    assert_eq!(first.status, 200, "{first}");
    let ids = |r: &Resp| -> Vec<String> {
        r.json["batches"].as_array().unwrap().iter().map(|b| b["batchId"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(ids(&first), [mine[2].clone(), mine[1].clone()], "{first}");
    let newest = &first.json["batches"][0];
    assert_eq!(newest["script"], "fetch");
    assert_eq!(newest["total"], 1);
    assert_eq!(newest["counts"], json!({"waiting": 0, "active": 0, "completed": 1, "failed": 0}), "{first}");
    assert!(newest["createdAt"].as_str().unwrap().ends_with('Z'), "{first}");
    let cursor = first.json["nextCursor"].as_str().expect("a next page").to_string();
    let second = server.get_as(Some(&key), &format!("/batches?limit=2&cursor={cursor}")).await;
    assert_eq!(ids(&second), [mine[0].clone()], "{second}");
    assert_eq!(second.json["nextCursor"], Value::Null, "{second}");

    // Another account sees its own only, and cannot use this one's cursor.
    let other = server.get_as(Some(&other_key), "/batches").await;
    assert_eq!(ids(&other), std::slice::from_ref(&theirs), "{other}");
    assert_error(
        &server.get_as(Some(&other_key), &format!("/batches?cursor={cursor}")).await,
        400,
        "INVALID_LIST_CURSOR",
    );
    assert_error(&server.get_as(Some(&key), "/batches?limit=0").await, 400, "INVALID_LIST_QUERY");
    assert_error(&server.get_as(Some(&key), "/batches?phase=RUNNING").await, 400, "INVALID_LIST_QUERY");
    assert_error(&server.get_as(None, "/batches").await, 401, "unauthorized");

    // The MCP tool answers the same page.
    let tool = server.mcp_tool_as(&key, "list_batches", json!({"limit": 2})).await;
    assert_eq!(tool["isError"], false, "{tool}");
    assert_eq!(tool["structuredContent"]["batches"], first.json["batches"], "{tool}");

    // The SDK follows the cursor; the CLI prints a table.
    let all = server.client().recent_batches(10).await.expect("SDK");
    let sdk: Vec<&str> = all.iter().map(|b| b.batch_id.as_str()).collect();
    assert_eq!(sdk, [mine[2].as_str(), mine[1].as_str(), mine[0].as_str()]);
    let cli = server.cli(&["batch", "list", "--limit", "1", "--all"]);
    assert!(cli.success(), "{cli:?}");
    let lines: Vec<&str> = cli.stdout.lines().collect();
    assert!(lines[0].starts_with("BATCH"), "{}", cli.stdout);
    assert_eq!(lines.len(), 4, "{}", cli.stdout);
    assert!(lines[1].starts_with(&mine[2]) && lines[3].starts_with(&mine[0]), "{}", cli.stdout);
    assert!(!cli.stdout.contains(&theirs), "{}", cli.stdout);
}
