//! The MCP endpoint: the official Python MCP SDK's streamable HTTP client
//! (installed by scripts/test.sh) against the real server, and raw HTTP
//! checks of the contract's exact transport answers.

use std::process::Command;

use reqwest::Method;
use serde_json::{json, Value};

use grid_tests::bins::workspace_root;
use grid_tests::http::{http_client, Resp};
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::Target;

const ACCEPT_BOTH: &str = "application/json, text/event-stream";

/// Runs tests/mcp/client.py; panics with its stderr when it fails.
fn sdk_client(server: &GridServer, key: &str, calls: Value) -> Value {
    let script = workspace_root().join("tests/mcp/client.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(format!("{}/mcp", server.base_url()))
        .arg(key)
        .arg(calls.to_string())
        .output()
        .expect("python3 must be installed (scripts/test.sh installs the mcp package)");
    if !out.status.success() {
        server.fail(&format!(
            "MCP SDK client failed (is the Python `mcp` package installed? scripts/test.sh installs it):\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout).expect("client prints JSON")
}

async fn rpc(server: &GridServer, key: Option<&str>, accept: Option<&str>, body: &str) -> Resp {
    let mut req = http_client()
        .post(format!("{}/mcp", server.base_url()))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(k) = key {
        req = req.header("x-api-key", k);
    }
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    Resp::read(req).await.expect("request")
}

#[tokio::test]
async fn sdk_client_initializes_lists_tools_and_calls_billable_tools_billed_as_their_calls() {
    // Settlement far away, so every reservation is still held when we look.
    let opts = ServerOptions { settlement_interval_secs: Some(600), ..Default::default() };
    let server = GridServer::start(opts);
    let target = Target::start();
    let urls = vec![target.url("/page/1"), target.url("/page/2")];
    let out = sdk_client(
        &server,
        server.api_key(),
        json!([
            ["grid_status", {}],
            ["submit_batch", {"urls": urls, "script": "fetch"}],
            ["submit_batch", {"urls": []}],
            ["retry_job", {"jobId": "it_doesnotexist"}],
        ]),
    );
    assert_eq!(out["serverName"], "grid", "{out}");
    assert_eq!(out["protocolVersion"], "2025-11-25", "{out}");
    let tools: Vec<&str> = out["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    for t in ["grid_status", "submit_batch", "lease_session", "submit_compute_job", "retry_job", "get_job", "list_jobs"]
    {
        assert!(tools.contains(&t), "tool {t} missing from {tools:?}");
    }
    assert_eq!(out["schemas"]["submit_batch"]["properties"]["urls"]["maxItems"], 1000, "{out}");
    let calls = out["calls"].as_array().unwrap();
    let status: Value = serde_json::from_str(calls[0]["text"].as_str().unwrap()).unwrap();
    assert_eq!((calls[0]["isError"].clone(), status["maxSessions"].clone()), (json!(false), json!(4)), "{out}");
    let created: Value = serde_json::from_str(calls[1]["text"].as_str().unwrap()).unwrap();
    assert_eq!(calls[1]["isError"], false, "{out}");
    assert_eq!(created["jobCount"], 2, "{out}");
    let refused: Value = serde_json::from_str(calls[2]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        (calls[2]["isError"].clone(), refused["error"].clone()),
        (json!(true), json!("invalid batch body")),
        "{out}"
    );
    let unknown: Value = serde_json::from_str(calls[3]["text"].as_str().unwrap()).unwrap();
    assert_eq!((calls[3]["isError"].clone(), unknown["error"].clone()), (json!(true), json!("unknown job")), "{out}");

    // Billed exactly as POST /batches: two fetch items reserved, nothing else.
    let account = server.account_show(server.account_id());
    assert_eq!(account["reservedMicros"], 240, "{account}");
    // And the batch is a real one of this account.
    let batch = server.get(&format!("/batches/{}", created["batchId"].as_str().unwrap())).await;
    assert_eq!((batch.status, batch.json["total"].clone()), (200, json!(2)), "{batch}");
}

#[tokio::test]
async fn tool_refusals_arrive_as_tool_errors_and_reserve_nothing() {
    let server = GridServer::start(ServerOptions::default());
    let (poor, poor_key) = server.create_account("poor", 100);
    let out = sdk_client(
        &server,
        &poor_key,
        json!([["submit_batch", {"urls": ["http://127.0.0.1:9/x"], "script": "fetch"}]]),
    );
    let call = &out["calls"][0];
    let body: Value = serde_json::from_str(call["text"].as_str().unwrap()).unwrap();
    assert_eq!(call["isError"], true, "{out}");
    assert_eq!(body, json!({"error": "insufficient_credit", "requiredMicros": 120, "availableMicros": 100}));
    assert_eq!(server.account_show(&poor)["reservedMicros"], 0);
}

#[tokio::test]
async fn transport_answers_are_exactly_the_contracts() {
    let server = GridServer::start(ServerOptions::default());
    let key = server.api_key().to_string();
    let url = format!("{}/mcp", server.base_url());

    for method in [Method::GET, Method::DELETE] {
        let r = Resp::read(http_client().request(method.clone(), &url).header("x-api-key", &key)).await.unwrap();
        assert_eq!(r.status, 405, "{method} {r}");
        assert_eq!(
            r.json,
            json!({"jsonrpc": "2.0", "error": {"code": -32000, "message": "Method not allowed."}, "id": null})
        );
    }

    let r = rpc(&server, None, Some(ACCEPT_BOTH), r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).await;
    assert_eq!((r.status, r.error()), (401, "unauthorized"), "{r}");
    let challenge =
        format!("Bearer resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"", server.base_url());
    assert_eq!(r.header("www-authenticate"), Some(challenge.as_str()), "{r}");

    for accept in [None, Some("application/json"), Some("text/event-stream")] {
        let r = rpc(&server, Some(&key), accept, r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).await;
        assert_eq!(r.status, 406, "accept {accept:?}: {r}");
        assert_eq!(r.json["error"]["code"], -32000);
        let msg = r.json["error"]["message"].as_str().unwrap();
        assert!(msg.contains("application/json") && msg.contains("text/event-stream"), "{msg}");
    }

    let r = rpc(&server, Some(&key), Some(ACCEPT_BOTH), r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#).await;
    assert_eq!((r.status, r.json.clone()), (200, json!({"jsonrpc": "2.0", "id": 7, "result": {}})), "{r}");
    assert!(r.header("mcp-session-id").is_none(), "no session is ever issued");

    let r =
        rpc(&server, Some(&key), Some(ACCEPT_BOTH), r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
    assert_eq!((r.status, r.text.as_str()), (202, ""), "{r}");

    let r = rpc(&server, Some(&key), Some(ACCEPT_BOTH), r#"{"jsonrpc":"2.0","id":8,"method":"resources/nope"}"#).await;
    assert_eq!(
        (r.status, r.json["error"]["code"].clone(), r.json["id"].clone()),
        (200, json!(-32601), json!(8)),
        "{r}"
    );

    let r = rpc(&server, Some(&key), Some(ACCEPT_BOTH), "{not json").await;
    assert_eq!((r.status, r.json["error"]["code"].clone()), (400, json!(-32700)), "{r}");

    let r = rpc(
        &server,
        Some(&key),
        Some(ACCEPT_BOTH),
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"nope"}}"#,
    )
    .await;
    assert_eq!((r.status, r.json["error"]["code"].clone()), (200, json!(-32602)), "{r}");

    let r = rpc(&server, Some(&key), Some(ACCEPT_BOTH), r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"get_batch","arguments":{"batchId":"bt_nope"}}}"#).await;
    let result = &r.json["result"];
    assert_eq!(result["isError"], true, "{r}");
    assert_eq!(result["content"][0]["text"], r#"{"error":"unknown batch"}"#, "{r}");
}

#[tokio::test]
async fn protected_resource_metadata_names_the_mcp_resource() {
    let opts = ServerOptions { auth_url: Some("http://127.0.0.1:9/issuer".into()), ..Default::default() };
    let server = GridServer::start(opts);
    let r = server.get_as(None, "/.well-known/oauth-protected-resource/mcp").await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(
        r.json,
        json!({
            "resource": format!("{}/mcp", server.base_url()),
            "authorization_servers": ["http://127.0.0.1:9/issuer"],
            "scopes_supported": ["openid", "offline_access", "email", "profile", "grid.invoke"],
            "bearer_methods_supported": ["header"]
        })
    );
}

#[tokio::test]
async fn every_billable_tool_reserves_what_its_call_reserves() {
    let opts = ServerOptions {
        settlement_interval_secs: Some(600),
        extra_args: vec!["--admit-registry".into(), "127.0.0.1:5000/tools".into()],
        ..Default::default()
    };
    let server = GridServer::start(opts);
    // A capture item that fails for good on transient errors is retryable.
    let batch = server.submit_fetch(&["http://127.0.0.1:9/refused".to_string()]).await;
    let item = server.batch_as(server.api_key(), &batch).await["jobs"][0]["jobId"].as_str().unwrap().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while server.get(&format!("/jobs/{item}")).await.json["state"] != "failed" {
        assert!(std::time::Instant::now() < deadline, "item never failed");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let job = json!({
        "image": "127.0.0.1:5000/tools/busybox:1",
        "command": ["sh", "-c", "sleep 30"],
        "resources": {"cpu": {"request": "500m", "limit": "500m"}, "memory": {"request": "256Mi", "limit": "256Mi"},
                      "ephemeralStorage": {"request": "256Mi", "limit": "256Mi"}},
        "runningDeadlineSeconds": 60,
        "capabilities": {"networkProfile": "none"},
        "env": {}, "labels": {}, "idempotencyKey": "mcp-billing"
    });
    let out = sdk_client(
        &server,
        server.api_key(),
        json!([
            ["lease_session", {"ttlMinutes": 1}],
            ["submit_compute_job", job],
            ["retry_job", {"jobId": item}],
        ]),
    );
    let calls = out["calls"].as_array().unwrap();
    for c in calls {
        assert_eq!(c["isError"], false, "{out}");
    }
    let lease: Value = serde_json::from_str(calls[0]["text"].as_str().unwrap()).unwrap();
    assert!(lease["cdpUrl"].as_str().unwrap().contains("/cdp/"), "{lease}");
    let record: Value = serde_json::from_str(calls[1]["text"].as_str().unwrap()).unwrap();
    assert_eq!(record["phase"], "ACCEPTED", "{record}");
    let retried: Value = serde_json::from_str(calls[2]["text"].as_str().unwrap()).unwrap();
    assert_eq!(retried, json!({"jobId": item, "state": "waiting"}));
    // Held now: the fetch item's 120 (not yet settled), a 1-minute session
    // (70,000 µ€/h → 1,167 µ€) and one job attempt (500m + 256Mi for 60 s → 360 µ€).
    // The retry is free.
    let account = server.account_show(server.account_id());
    assert_eq!(account["reservedMicros"], 120 + 1_167 + 360, "{account}");
    // Leave no container behind.
    let job_id = record["jobId"].as_str().unwrap();
    let _ = server.post(&format!("/jobs/{job_id}/cancel"), &json!({})).await;
    let ended = grid_tests::jobs::wait_finished(&server, job_id).await;
    assert_eq!(ended["phase"], "CANCELLED", "{ended}");
}
