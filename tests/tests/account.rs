//! GET /account (docs/account.md): the caller's balance as `grid-server
//! account show` prints it, their key's daily-cap use, and their own ledger,
//! newest first, paged with a cursor that works only for them; through HTTP,
//! the SDK, the `grid` CLI and the MCP tool.
//!
//! Runs on: both stores, because the ledger and balances are store reads.

use std::time::Duration;

use serde_json::{json, Value};

use grid_client::endpoint::LedgerQuery;
use grid_tests::http::assert_error;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::Target;
use grid_tests::FETCH_PRICE_MICROS;

const CREDIT: i64 = 1_000_000;
const CAP: i64 = 500_000;

/// An account with credit and a key with a daily cap; a two-item fetch batch
/// run to the end and settled.
async fn settled_account(server: &GridServer, target: &Target) -> (String, String, String) {
    let acc = server.admin(&["account", "create", "--name", "statement", "--credit-micros", &CREDIT.to_string()]);
    let account = acc["accountId"].as_str().unwrap_or_else(|| server.fail("no accountId")).to_string();
    let key = server.admin(&["key", "create", "--account", &account, "--daily-cap-micros", &CAP.to_string()]);
    let key = key["apiKey"].as_str().unwrap_or_else(|| server.fail("no apiKey")).to_string();
    let body = json!({"urls": [target.url("/page/1"), target.url("/page/2")], "script": "fetch"});
    let batch = server.submit_as(&key, &body).await;
    server.wait_batch_done_as(&key, &batch, Duration::from_secs(60)).await;
    server.wait_settled(&account, CREDIT - 2 * FETCH_PRICE_MICROS, Duration::from_secs(30)).await;
    (account, key, batch)
}

#[tokio::test]
async fn the_statement_matches_account_show_and_lists_the_callers_own_ledger() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let (account, key, batch) = settled_account(&server, &target).await;

    let r = server.get_as(Some(&key), "/account").await;
    assert_eq!(r.status, 200, "{r}");
    let shown = server.account_show(&account);
    for field in ["accountId", "creditMicros", "reservedMicros", "availableMicros", "suspended"] {
        assert_eq!(r.json[field], shown[field], "{field}: {r} vs account show {shown}");
    }
    assert_eq!(r.json["creditMicros"], json!(CREDIT - 2 * FETCH_PRICE_MICROS));
    assert_eq!(r.json["reservedMicros"], json!(0));
    let cap = &r.json["dailyCap"];
    assert_eq!(cap["capMicros"], json!(CAP), "{r}");
    // Reserved today, less what was released: the two charged items.
    assert_eq!(cap["usedMicros"], json!(2 * FETCH_PRICE_MICROS), "{r}");
    assert!(cap["resetsAt"].as_str().is_some_and(|t| t.ends_with("T00:00:00.000Z")), "{r}");

    // Newest first: two charges (one per item), the batch's reservation, the credit.
    let ledger = r.json["ledger"].as_array().unwrap_or_else(|| server.fail(&format!("no ledger: {r}")));
    let kinds: Vec<&str> = ledger.iter().map(|l| l["kind"].as_str().unwrap_or("")).collect();
    assert_eq!(kinds, ["charge", "charge", "reserve", "credit"], "{r}");
    assert_eq!(ledger[2]["subject"], json!(batch));
    assert_eq!(ledger[2]["amountMicros"], json!(2 * FETCH_PRICE_MICROS));
    let batch_view = server.batch_as(&key, &batch).await;
    let items: Vec<Value> = batch_view["jobs"].as_array().cloned().unwrap_or_default();
    for charge in &ledger[..2] {
        assert_eq!(charge["amountMicros"], json!(FETCH_PRICE_MICROS));
        assert!(items.iter().any(|i| i["jobId"] == charge["subject"]), "charge of no item of the batch: {charge}");
    }
    assert_eq!(r.json["nextCursor"], Value::Null);

    // Another account's statement shows none of this.
    let other = server.get("/account").await;
    assert_eq!(other.status, 200, "{other}");
    assert_ne!(other.json["accountId"], json!(account));
    let theirs = other.json["ledger"].as_array().cloned().unwrap_or_default();
    assert!(theirs.iter().all(|l| l["subject"] != json!(batch)), "{other}");
}

#[tokio::test]
async fn the_ledger_pages_with_a_cursor_that_only_its_caller_can_use() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let (_, key, _) = settled_account(&server, &target).await;

    let mut seen = vec![];
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/account?limit=1&cursor={c}"),
            None => "/account?limit=1".to_string(),
        };
        let page = server.get_as(Some(&key), &path).await;
        assert_eq!(page.status, 200, "{page}");
        let lines = page.json["ledger"].as_array().cloned().unwrap_or_default();
        assert!(lines.len() <= 1, "{page}");
        seen.extend(lines.into_iter().map(|l| l["kind"].as_str().unwrap_or("").to_string()));
        match page.json["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
        assert!(seen.len() < 10, "paging does not end: {seen:?}");
    }
    assert_eq!(seen, ["charge", "charge", "reserve", "credit"]);

    let first = server.get_as(Some(&key), "/account?limit=1").await;
    let c = first.json["nextCursor"].as_str().unwrap_or_else(|| server.fail("no cursor")).to_string();
    // The first-start account cannot page through this account's ledger.
    let stolen = server.get(&format!("/account?limit=1&cursor={c}")).await;
    assert_error(&stolen, 400, "INVALID_LIST_CURSOR");

    let charges = server.get_as(Some(&key), "/account?kind=charge").await;
    let kinds: Vec<&str> =
        charges.json["ledger"].as_array().unwrap().iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["charge", "charge"], "{charges}");

    for (query, field) in [("limit=0", "limit:"), ("kind=refund", "kind:"), ("phase=RUNNING", "phase:")] {
        let bad = server.get_as(Some(&key), &format!("/account?{query}")).await;
        assert_eq!(bad.status, 400, "{bad}");
        let detail = bad.json["detail"].as_array().cloned().unwrap_or_default();
        assert!(detail.iter().any(|d| d.as_str().is_some_and(|d| d.starts_with(field))), "{query}: {bad}");
    }
    let anonymous = server.get_as(None, "/account").await;
    assert_eq!(anonymous.status, 401, "{anonymous}");
}

#[tokio::test]
async fn sdk_cli_and_mcp_read_the_same_statement() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let (account, key, _) = settled_account(&server, &target).await;
    let http = server.get_as(Some(&key), "/account").await.json;

    let sdk = grid_client::GridClient::new(&server.base_url(), &key)
        .unwrap_or_else(|e| server.fail(&format!("SDK client: {e}")))
        .account(&LedgerQuery::default())
        .await
        .unwrap_or_else(|e| server.fail(&format!("SDK account: {e}")));
    assert_eq!(serde_json::to_value(&sdk).unwrap(), http);

    let url = server.base_url();
    let cli = |args: &[&str]| {
        grid_tests::cli::run_cli(
            args,
            &[("GRID_URL", url.as_str()), ("GRID_API_KEY", key.as_str())],
            grid_tests::cli::CLI_TIMEOUT,
        )
    };
    let json_out = cli(&["account", "--json"]);
    assert!(json_out.success(), "{json_out:?}");
    assert_eq!(json_out.json(), Some(http.clone()));
    let text = cli(&["account", "--kind", "charge"]);
    assert!(text.success(), "{text:?}");
    assert!(text.stdout.contains(&account), "{}", text.stdout);
    assert!(text.stdout.contains("0.999760 EUR"), "credit in euros: {}", text.stdout);
    assert_eq!(text.stdout.matches("charge").count(), 2, "{}", text.stdout);

    let rpc = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                     "params": {"name": "get_account", "arguments": {"limit": 2}}});
    let r = grid_tests::http::Resp::read(
        grid_tests::http::http_client()
            .post(format!("{url}/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("x-api-key", &key)
            .body(rpc.to_string()),
    )
    .await
    .unwrap_or_else(|e| server.fail(&format!("MCP request: {e}")));
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json["result"]["isError"], json!(false), "{r}");
    let text = r.json["result"]["content"][0]["text"].as_str().unwrap_or_else(|| server.fail(&format!("{r}")));
    let tool: Value = serde_json::from_str(text).unwrap_or_else(|e| server.fail(&format!("tool text {e}: {text}")));
    assert_eq!(tool["creditMicros"], http["creditMicros"]);
    assert_eq!(tool["ledger"].as_array().map(Vec::len), Some(2), "{tool}");
    assert!(tool["nextCursor"].is_string(), "{tool}");
}
