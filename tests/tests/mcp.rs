//! The MCP endpoint, driven by the clients people use: the official Python
//! MCP SDK (tests/mcp/client.py), the official TypeScript SDK clients v1
//! and v2 and the MCP Inspector CLI (tests/clients, installed by
//! scripts/test.sh), in the handshake era and in 2026-07-28; and raw HTTP
//! checks of the contract's exact transport answers.
//!
//! Runs on: one store, because its subject is the MCP protocol as real clients speak it.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use base64::Engine;
use reqwest::Method;
use serde_json::{json, Value};

use grid_tests::bins::workspace_root;
use grid_tests::http::{http_client, Resp};
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::Target;
use grid_tests::wait::wait_for;

const ACCEPT_BOTH: &str = "application/json, text/event-stream";
const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

fn clients_dir() -> PathBuf {
    workspace_root().join("tests/clients")
}

use grid_tests::child::run_json;

/// The official Python SDK (tests/mcp/client.py): `mode` is `legacy`,
/// `auto` or `2026-07-28`; the key goes in `x-api-key`.
fn python_client(server: &GridServer, key: &str, mode: &str, calls: Value) -> Value {
    let script = workspace_root().join("tests/mcp/client.py");
    run_json(
        server,
        "the Python MCP SDK client (package mcp, installed by scripts/test.sh)",
        Command::new("python3")
            .arg(&script)
            .arg(format!("{}/mcp", server.base_url()))
            .arg(key)
            .arg(mode)
            .arg(calls.to_string()),
    )
}

/// The official TypeScript SDK (tests/clients/mcp_client.mjs): `sdk` is
/// `v1` (@modelcontextprotocol/sdk) or `v2` (@modelcontextprotocol/client);
/// the key goes in `Authorization: Bearer`.
fn ts_client(server: &GridServer, key: &str, sdk: &str, mode: &str, calls: Value) -> Value {
    let dir = clients_dir();
    assert!(
        dir.join("node_modules/@modelcontextprotocol/sdk").is_dir()
            && dir.join("node_modules/@modelcontextprotocol/client").is_dir(),
        "the TypeScript MCP SDK clients are missing from {}: scripts/test.sh installs them (npm install there)",
        dir.display()
    );
    run_json(
        server,
        &format!("the TypeScript MCP SDK client {sdk} (npm, installed by scripts/test.sh)"),
        Command::new("node")
            .arg("mcp_client.mjs")
            .arg(format!("{}/mcp", server.base_url()))
            .arg(key)
            .arg(sdk)
            .arg(mode)
            .arg(calls.to_string())
            .current_dir(&dir),
    )
}

/// The MCP Inspector's CLI mode against the server, with the key as a
/// bearer token; its own exit status and outputs.
fn inspector(server: &GridServer, key: &str, args: &[&str]) -> std::process::Output {
    let bin = clients_dir().join("node_modules/.bin/inspector");
    assert!(bin.exists(), "the MCP Inspector is missing ({}): scripts/test.sh installs it", bin.display());
    let home = tempfile::tempdir().expect("a home for the Inspector's catalog");
    Command::new(&bin)
        .arg("--cli")
        .arg(format!("{}/mcp", server.base_url()))
        .args(["--header", &format!("Authorization: Bearer {key}"), "--format", "json"])
        .args(args)
        // The Inspector keeps a catalog and OAuth state under HOME.
        .env("HOME", home.path())
        .output()
        .unwrap_or_else(|e| server.fail(&format!("the MCP Inspector did not start: {e}")))
}

/// The Inspector's JSON answer. It exits 5 when the tool answered a tool
/// error (`isError: true`), 0 otherwise; anything else fails the test.
fn inspector_json(server: &GridServer, key: &str, args: &[&str]) -> Value {
    let out = inspector(server, key, args);
    if !matches!(out.status.code(), Some(0 | 5)) {
        server.fail(&format!(
            "the MCP Inspector {args:?} failed ({}):\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| server.fail(&format!("Inspector printed no JSON: {e}")))
}

async fn rpc(server: &GridServer, key: Option<&str>, accept: Option<&str>, body: &str) -> Resp {
    rpc_with(server, key, accept, &[], body).await
}

async fn rpc_with(
    server: &GridServer,
    key: Option<&str>,
    accept: Option<&str>,
    headers: &[(&str, &str)],
    body: &str,
) -> Resp {
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
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    Resp::read(req).await.expect("request")
}

/// Every tool a client listed has a title, an output schema and the four
/// annotations.
fn assert_tools_described(out: &Value, who: &str) {
    let listed = out["listed"].as_object().unwrap_or_else(|| panic!("{who}: no tools listed: {out}"));
    assert!(listed.len() >= 17, "{who}: {listed:?}");
    for (name, t) in listed {
        assert_eq!(t["hasOutputSchema"], true, "{who}: {name} has no outputSchema");
        assert!(t["title"].is_string(), "{who}: {name} has no title");
        for hint in ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"] {
            assert!(t["annotations"][hint].is_boolean(), "{who}: {name} lacks {hint}: {t}");
        }
    }
    assert_eq!(listed["grid_status"]["annotations"]["readOnlyHint"], true, "{who}");
    assert_eq!(listed["release_session"]["annotations"]["destructiveHint"], true, "{who}");
    assert_eq!(listed["submit_batch"]["annotations"]["readOnlyHint"], false, "{who}");
}

#[tokio::test]
async fn sdk_client_initializes_lists_tools_and_calls_billable_tools_billed_as_their_calls() {
    let server = GridServer::start(ServerOptions::default());
    let target = Target::start();
    let urls = vec![target.url("/page/1"), target.url("/page/2")];
    let out = python_client(
        &server,
        server.api_key(),
        "legacy",
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

    // Billed exactly as POST /batches: two fetch items reserved, nothing else
    // (the items may have been charged since: the ledger's reservations).
    assert_eq!(server.reserved_ever(server.api_key()).await, 240);
    // And the batch is a real one of this account.
    let batch = server.get(&format!("/batches/{}", created["batchId"].as_str().unwrap())).await;
    assert_eq!((batch.status, batch.json["total"].clone()), (200, json!(2)), "{batch}");
}

#[tokio::test]
async fn tool_refusals_arrive_as_tool_errors_and_reserve_nothing() {
    let server = GridServer::start(ServerOptions::default());
    let (poor, poor_key) = server.create_account("poor", 100);
    let out = python_client(
        &server,
        &poor_key,
        "legacy",
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
        extra_args: vec!["--admit-registry".into(), "127.0.0.1:5000/tools".into()],
        ..Default::default()
    };
    let server = GridServer::start(opts);
    // A capture item that fails for good on transient errors is retryable.
    let batch = server.submit_fetch(&["http://127.0.0.1:9/refused".to_string()]).await;
    let item = server.batch_as(server.api_key(), &batch).await["jobs"][0]["jobId"].as_str().unwrap().to_string();
    wait_for(&format!("item {item} failed"), Duration::from_secs(30), || async {
        match server.get(&format!("/jobs/{item}")).await.json {
            i if i["state"] == "failed" => Ok(()),
            i => Err(i.to_string()),
        }
    })
    .await;
    let job = json!({
        "image": "127.0.0.1:5000/tools/busybox:1",
        "command": ["sh", "-c", "sleep 30"],
        "resources": {"cpu": {"request": "500m", "limit": "500m"}, "memory": {"request": "256Mi", "limit": "256Mi"},
                      "ephemeralStorage": {"request": "256Mi", "limit": "256Mi"}},
        "runningDeadlineSeconds": 60,
        "capabilities": {"networkProfile": "none"},
        "env": {}, "labels": {}, "idempotencyKey": "mcp-billing"
    });
    let out = python_client(
        &server,
        server.api_key(),
        "legacy",
        json!([
            ["lease_session", {"ttlMinutes": 1}],
            ["submit_compute_job", job],
            ["retry_job", {"jobId": item}],
        ]),
    );
    let calls = out["calls"].as_array().unwrap();
    for c in calls {
        assert_eq!(c["isError"], false, "{out}");
        // structuredContent is the call's JSON (and fit the outputSchema:
        // the SDK checked it).
        assert_eq!(c["structured"], serde_json::from_str::<Value>(c["text"].as_str().unwrap()).unwrap(), "{c}");
    }
    let lease: Value = serde_json::from_str(calls[0]["text"].as_str().unwrap()).unwrap();
    assert!(lease["cdpUrl"].as_str().unwrap().contains("/cdp/"), "{lease}");
    let record: Value = serde_json::from_str(calls[1]["text"].as_str().unwrap()).unwrap();
    assert_eq!(record["phase"], "ACCEPTED", "{record}");
    let retried: Value = serde_json::from_str(calls[2]["text"].as_str().unwrap()).unwrap();
    assert_eq!(retried, json!({"jobId": item, "state": "waiting"}));
    // Held now: a 1-minute session (70,000 µ€/h → 1,167 µ€) and one job
    // attempt (500m + 256Mi for 60 s → 360 µ€). The fetch item's 120 was
    // released when it failed, and the retry is free.
    let account = server.account_show(server.account_id());
    assert_eq!(account["reservedMicros"], 1_167 + 360, "{account}");
    assert_eq!(server.reserved_ever(server.api_key()).await, 120 + 1_167 + 360);
    // Releasing answers a short JSON text, not an empty one.
    let session_id = lease["sessionId"].as_str().unwrap();
    let out = python_client(&server, server.api_key(), "auto", json!([["release_session", {"sessionId": session_id}]]));
    let released = &out["calls"][0];
    let expected = json!({"sessionId": session_id, "released": true});
    assert_eq!(
        (released["isError"].clone(), released["structured"].clone()),
        (json!(false), expected.clone()),
        "{out}"
    );
    assert_eq!(serde_json::from_str::<Value>(released["text"].as_str().unwrap()).unwrap(), expected);
    // Leave no container behind.
    let job_id = record["jobId"].as_str().unwrap();
    let _ = server.post(&format!("/jobs/{job_id}/cancel"), &json!({})).await;
    let ended = grid_tests::jobs::wait_finished(&server, job_id).await;
    assert_eq!(ended["phase"], "CANCELLED", "{ended}");
}

/// A client run as a given key with a list of calls.
type Client<'a> = dyn Fn(&str, Value) -> Value + 'a;

/// The SDK clients people embed, each in the protocol era it speaks:
/// initialize (or server/discover), tools/list with output schemas and
/// annotations, a paid call billed as POST /batches, and refusals arriving
/// as tool errors without structured content.
#[tokio::test]
async fn every_sdk_client_lists_described_tools_and_pays_and_is_refused_like_the_http_api() {
    let opts = ServerOptions::default();
    let server = GridServer::start(opts);
    let target = Target::start();
    let (poor, poor_key) = server.create_account("poor", 100);
    let clients: [(&str, &Client, &str); 5] = [
        ("python legacy", &|k: &str, c| python_client(&server, k, "legacy", c), "2025-11-25"),
        ("python auto", &|k: &str, c| python_client(&server, k, "auto", c), "2026-07-28"),
        ("typescript v1", &|k: &str, c| ts_client(&server, k, "v1", "legacy", c), "2025-11-25"),
        ("typescript v2 auto", &|k: &str, c| ts_client(&server, k, "v2", "auto", c), "2026-07-28"),
        ("typescript v2 pinned", &|k: &str, c| ts_client(&server, k, "v2", "2026-07-28", c), "2026-07-28"),
    ];
    for (i, (who, client, version)) in clients.iter().enumerate() {
        let url = target.url(&format!("/page/{i}"));
        let out = client(
            server.api_key(),
            json!([
                ["submit_batch", {"urls": [url], "script": "fetch", "params": {"timeoutMs": 5000}}],
                ["submit_batch", {"urls": []}],
                ["get_batch", {"batchId": "bt_nope"}],
            ]),
        );
        assert_eq!(out["protocolVersion"], *version, "{who}: {out}");
        assert_tools_described(&out, who);
        let paid = &out["calls"][0];
        assert_eq!(paid["isError"], false, "{who}: {out}");
        assert_eq!(paid["structured"]["jobCount"], 1, "{who}: {out}");
        assert!(paid["structured"]["batchId"].as_str().unwrap().starts_with("bt_"), "{who}: {out}");
        for (n, error) in [(1, "invalid batch body"), (2, "unknown batch")] {
            let refused = &out["calls"][n];
            assert_eq!(refused["isError"], true, "{who}: {out}");
            assert!(refused["structured"].is_null(), "{who}: a refusal carries no structuredContent: {out}");
            let body: Value = serde_json::from_str(refused["text"].as_str().unwrap()).unwrap();
            assert_eq!(body["error"], error, "{who}: {out}");
        }
        // Refused for credit before anything is queued, as POST /batches is.
        let out = client(&poor_key, json!([["submit_batch", {"urls": [target.url("/page/x")], "script": "capture"}]]));
        let body: Value = serde_json::from_str(out["calls"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(
            body,
            json!({"error": "insufficient_credit", "requiredMicros": 1000, "availableMicros": 100}),
            "{who}"
        );
    }
    // One fetch item (120 µ€) per client, reserved exactly as POST /batches.
    assert_eq!(server.reserved_ever(server.api_key()).await, 120 * clients.len() as i64);
    assert_eq!(server.account_show(&poor)["reservedMicros"], 0);
}

/// A finished capture of a local page seen through get_capture: the
/// screenshot as image content that decodes as a PNG, html and meta as
/// embedded text resources; by every client, and by the Inspector CLI,
/// which writes the decoded image to a file.
#[tokio::test]
async fn get_capture_returns_the_screenshot_as_png_image_content_to_every_client() {
    let opts = ServerOptions { extra_args: vec!["--browsers".into(), "1".into()], ..Default::default() };
    let server = GridServer::start(opts);
    let target = Target::start();
    let batch =
        server.submit_as(server.api_key(), &json!({"urls": [target.url("/page/7")], "script": "capture"})).await;
    let item = server.batch(&batch).await["jobs"][0]["jobId"].as_str().unwrap().to_string();
    let (done, seen) = server.wait_item_final(&item, Duration::from_secs(120)).await;
    if done["state"] != "completed" {
        server.fail(&format!("the capture did not complete (states {seen:?}): {done}"));
    }
    let call = json!([
        ["get_capture", {"jobId": item, "include": ["screenshot", "html", "meta"]}],
        ["get_capture", {"jobId": "it_nope"}],
        ["get_capture", {"jobId": item, "include": ["gif"]}],
        ["capture_screenshot", {"url": target.url("/page/8"), "viewport": {"width": 400, "height": 300}}],
        ["capture_content", {"url": target.url("/js/9")}],
        ["capture_screenshot", {"url": target.url("/page/8"), "quality": 500}],
    ]);
    let outs = [
        ("python auto", python_client(&server, server.api_key(), "auto", call.clone())),
        ("python legacy", python_client(&server, server.api_key(), "legacy", call.clone())),
        ("typescript v1", ts_client(&server, server.api_key(), "v1", "legacy", call.clone())),
        ("typescript v2", ts_client(&server, server.api_key(), "v2", "auto", call.clone())),
    ];
    for (who, out) in &outs {
        let seen = &out["calls"][0];
        assert_eq!(seen["isError"], false, "{who}: {out}");
        let images = seen["images"].as_array().unwrap();
        assert_eq!(images.len(), 1, "{who}: {out}");
        assert_eq!(images[0]["mimeType"], "image/png", "{who}");
        let png = base64::engine::general_purpose::STANDARD.decode(images[0]["data"].as_str().unwrap()).unwrap();
        assert!(png.starts_with(PNG_MAGIC), "{who}: the image is not a PNG");
        assert!(png.len() > 1000, "{who}: {} bytes", png.len());
        let resources = seen["resources"].as_array().unwrap();
        let html = resources.iter().find(|r| r["uri"].as_str().unwrap().ends_with("/html")).expect("html resource");
        assert!(html["text"].as_str().unwrap().contains("page 7"), "{who}: {html}");
        assert_eq!(html["uri"], format!("{}/artifacts/{item}/html", server.base_url()));
        let meta = resources.iter().find(|r| r["uri"].as_str().unwrap().ends_with("/meta")).expect("meta resource");
        assert_eq!(meta["mimeType"], "application/json", "{who}: {meta}");
        serde_json::from_str::<Value>(meta["text"].as_str().unwrap()).expect("meta is JSON");
        let structured = &seen["structured"];
        assert_eq!(
            (structured["jobId"].as_str(), structured["state"].as_str()),
            (Some(item.as_str()), Some("completed"))
        );
        let files = structured["files"].as_array().unwrap();
        assert_eq!(files.len(), 3, "{who}: {structured}");
        for f in files {
            assert_eq!((f["present"].clone(), f["inline"].clone()), (json!(true), json!(true)), "{who}: {f}");
        }
        assert_eq!(files[0]["byteLength"], png.len(), "{who}");
        let unknown: Value = serde_json::from_str(out["calls"][1]["text"].as_str().unwrap()).unwrap();
        assert_eq!((out["calls"][1]["isError"].clone(), unknown), (json!(true), json!({"error": "unknown job"})));
        let bad: Value = serde_json::from_str(out["calls"][2]["text"].as_str().unwrap()).unwrap();
        assert_eq!(bad, json!({"error": "kind must be screenshot|html|body|meta"}), "{who}");
        // One-call captures: the screenshot as an image of the viewport asked
        // for, the rendered HTML as text, the item and its charge structured.
        let shot = &out["calls"][3];
        assert_eq!(shot["isError"], false, "{who}: {out}");
        let images = shot["images"].as_array().unwrap();
        assert_eq!(images[0]["mimeType"], "image/png", "{who}: {shot}");
        let png = base64::engine::general_purpose::STANDARD.decode(images[0]["data"].as_str().unwrap()).unwrap();
        assert!(png.starts_with(PNG_MAGIC), "{who}");
        let size =
            (u32::from_be_bytes(png[16..20].try_into().unwrap()), u32::from_be_bytes(png[20..24].try_into().unwrap()));
        assert_eq!(size, (400, 300), "{who}");
        assert_eq!(shot["structured"]["chargedMicros"], 1_000, "{who}: {shot}");
        assert_eq!(shot["structured"]["inline"], true, "{who}: {shot}");
        let made = shot["structured"]["jobId"].as_str().unwrap();
        assert_eq!(server.item(made).await["state"], "completed", "{who}");
        let content = &out["calls"][4];
        let html = content["resources"][0]["text"].as_str().unwrap_or_else(|| panic!("{who}: {content}"));
        assert!(html.contains(&grid_tests::target::browser_pages::js_text("9")), "{who}: {html}");
        let refused: Value = serde_json::from_str(out["calls"][5]["text"].as_str().unwrap()).unwrap();
        assert_eq!(
            (out["calls"][5]["isError"].clone(), refused["error"].clone()),
            (json!(true), json!("invalid capture body")),
            "{who}"
        );
    }

    // The Inspector CLI, in both eras, gets the same image block.
    for era in ["legacy", "modern"] {
        let args = json!({"jobId": item, "include": ["screenshot"]}).to_string();
        let out = inspector_json(
            &server,
            server.api_key(),
            &["--protocol-era", era, "--method", "tools/call", "--tool-name", "get_capture", "--tool-args-json", &args],
        );
        let content = out["result"]["content"].as_array().unwrap_or_else(|| panic!("Inspector {era}: {out}"));
        let image = content.iter().find(|c| c["type"] == "image").unwrap_or_else(|| panic!("Inspector {era}: {out}"));
        assert_eq!(image["mimeType"], "image/png", "Inspector {era}");
        let png = base64::engine::general_purpose::STANDARD.decode(image["data"].as_str().unwrap()).unwrap();
        assert!(png.starts_with(PNG_MAGIC), "Inspector {era}: not a PNG ({} bytes)", png.len());
    }
}

/// A file over get_capture's inline bound is named with a download URL
/// instead of sent: the tool stays bounded, the file stays reachable.
#[tokio::test]
async fn get_capture_names_a_file_too_large_to_inline_with_its_download_url() {
    let server = GridServer::start(ServerOptions::default());
    let target = Target::start();
    // A fetch body of 600,000 bytes: more than the 512 KiB text bound.
    let batch = server.submit_fetch(&[target.url("/bytes/600000")]).await;
    let item = server.batch(&batch).await["jobs"][0]["jobId"].as_str().unwrap().to_string();
    let (done, _) = server.wait_item_final(&item, Duration::from_secs(60)).await;
    assert_eq!(done["state"], "completed", "{done}");
    let out = python_client(
        &server,
        server.api_key(),
        "auto",
        json!([["get_capture", {"jobId": item, "include": ["body", "meta", "screenshot"]}]]),
    );
    let seen = &out["calls"][0];
    let files = seen["structured"]["files"].as_array().unwrap();
    let body = &files[0];
    assert_eq!(
        (body["kind"].as_str(), body["inline"].clone(), body["byteLength"].clone()),
        (Some("body"), json!(false), json!(600_000))
    );
    let url = body["url"].as_str().expect("a download URL");
    assert!(seen["text"].as_str().unwrap().contains(url), "{out}");
    // The meta is small and inline; a fetch has no screenshot.
    assert_eq!((files[1]["inline"].clone(), files[2]["present"].clone()), (json!(true), json!(false)), "{out}");
    assert_eq!(seen["resources"].as_array().unwrap().len(), 1, "{out}");
    let downloaded = http_client().get(url).send().await.unwrap().bytes().await.unwrap();
    assert_eq!(downloaded.to_vec(), grid_tests::target::pattern_bytes(600_000));
}

/// The MCP Inspector's CLI: tools/list passes its strict schema check (no
/// error-severity portability finding), a paid call and a refusal, in both
/// protocol eras.
#[tokio::test]
async fn inspector_cli_lists_checks_schemas_calls_and_is_refused() {
    let opts = ServerOptions::default();
    let server = GridServer::start(opts);
    let target = Target::start();
    let key = server.api_key().to_string();
    for era in ["legacy", "modern"] {
        let listed = inspector_json(&server, &key, &["--protocol-era", era, "--method", "tools/list", "--strict"]);
        let tools = listed["result"]["tools"].as_array().unwrap_or_else(|| panic!("{era}: {listed}"));
        assert!(tools.len() >= 17, "{era}: {listed}");
        for t in tools {
            assert!(t["outputSchema"].is_object() && t["annotations"].is_object(), "{era}: {t}");
        }
        let args = json!({"urls": [target.url(&format!("/page/{era}"))], "script": "fetch"}).to_string();
        let paid = inspector_json(
            &server,
            &key,
            &[
                "--protocol-era",
                era,
                "--method",
                "tools/call",
                "--tool-name",
                "submit_batch",
                "--tool-args-json",
                &args,
            ],
        );
        assert_eq!(paid["result"]["isError"], false, "{era}: {paid}");
        assert_eq!(paid["result"]["structuredContent"]["jobCount"], 1, "{era}: {paid}");
        // One run: its exit code and its JSON are both checked.
        let refused = inspector(
            &server,
            &key,
            &[
                "--protocol-era",
                era,
                "--method",
                "tools/call",
                "--tool-name",
                "get_job",
                "--tool-args-json",
                r#"{"jobId":"it_nope"}"#,
            ],
        );
        assert_eq!(refused.status.code(), Some(5), "{era}: a tool error is the Inspector's exit 5");
        let refused: Value = serde_json::from_slice(&refused.stdout)
            .unwrap_or_else(|e| server.fail(&format!("Inspector printed no JSON: {e}")));
        assert_eq!(refused["result"]["isError"], true, "{era}: {refused}");
        assert_eq!(refused["result"]["content"][0]["text"], r#"{"error":"unknown job"}"#, "{era}");
    }
    assert_eq!(server.reserved_ever(server.api_key()).await, 240);
}

/// 2026-07-28 over raw HTTP: server/discover, the headers each request must
/// mirror, an unsupported version, an unknown method.
#[tokio::test]
async fn the_stateless_revision_is_spoken_beside_the_handshake() {
    let server = GridServer::start(ServerOptions::default());
    let key = server.api_key().to_string();
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;
    let modern = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "server/discover")];
    let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{{{meta}}}}}"#);
    let r = rpc_with(&server, Some(&key), Some(ACCEPT_BOTH), &modern, &body).await;
    assert_eq!(r.status, 200, "{r}");
    let result = &r.json["result"];
    assert_eq!(result["resultType"], "complete");
    assert_eq!(
        result["supportedVersions"],
        json!(["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"])
    );
    assert_eq!(result["capabilities"]["tools"], json!({"listChanged": false}));
    assert_eq!(result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "grid");
    assert!(result["ttlMs"].as_u64().is_some() && result["cacheScope"] == "public", "{r}");

    // The version header must be there and agree with the body.
    let r = rpc_with(&server, Some(&key), Some(ACCEPT_BOTH), &[("mcp-method", "server/discover")], &body).await;
    assert_eq!((r.status, r.json["error"]["code"].clone()), (400, json!(-32020)), "{r}");
    let r = rpc_with(&server, Some(&key), Some(ACCEPT_BOTH), &[("mcp-protocol-version", "2026-07-28")], &body).await;
    assert_eq!((r.status, r.json["error"]["code"].clone()), (400, json!(-32020)), "missing Mcp-Method: {r}");
    // A tool call names its tool in Mcp-Name.
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"grid_status","arguments":{{}},{meta}}}}}"#
    );
    let headers = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", "queue_depth")];
    let r = rpc_with(&server, Some(&key), Some(ACCEPT_BOTH), &headers, &call).await;
    assert_eq!((r.status, r.json["error"]["code"].clone()), (400, json!(-32020)), "{r}");
    let headers = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", "grid_status")];
    let r = rpc_with(&server, Some(&key), Some(ACCEPT_BOTH), &headers, &call).await;
    assert_eq!((r.status, r.json["result"]["resultType"].clone()), (200, json!("complete")), "{r}");
    assert_eq!(r.json["result"]["structuredContent"]["maxSessions"], 4, "{r}");

    // An unknown tool is a JSON-RPC error, as in the older versions.
    let unknown = format!(r#"{{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{{"name":"nope",{meta}}}}}"#);
    let headers = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", "nope")];
    let r = rpc_with(&server, Some(&key), Some(ACCEPT_BOTH), &headers, &unknown).await;
    assert_eq!(
        (r.status, r.json["error"]["code"].clone(), r.json["id"].clone()),
        (200, json!(-32602), json!(6)),
        "{r}"
    );

    // An unknown method is 404 in this revision (200 in the older ones).
    let nope = format!(r#"{{"jsonrpc":"2.0","id":3,"method":"prompts/list","params":{{{meta}}}}}"#);
    let headers = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "prompts/list")];
    let r = rpc_with(&server, Some(&key), Some(ACCEPT_BOTH), &headers, &nope).await;
    assert_eq!((r.status, r.json["error"]["code"].clone()), (404, json!(-32601)), "{r}");

    // A version this server does not speak: 400, naming the ones it does.
    for (header, meta_version) in [("2099-01-01", "2099-01-01"), ("1999-01-01", "")] {
        let body = if meta_version.is_empty() {
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#.to_string()
        } else {
            format!(
                r#"{{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{{"_meta":{{"io.modelcontextprotocol/protocolVersion":"{meta_version}"}}}}}}"#
            )
        };
        let headers = [("mcp-protocol-version", header), ("mcp-method", "tools/list")];
        let r = rpc_with(&server, Some(&key), Some(ACCEPT_BOTH), &headers, &body).await;
        assert_eq!(
            (r.status, r.json["error"]["code"].clone(), r.json["id"].clone()),
            (400, json!(-32022), json!(4)),
            "{r}"
        );
        assert_eq!(r.json["error"]["data"]["requested"], header, "{r}");
        assert!(r.json["error"]["data"]["supported"].as_array().unwrap().contains(&json!("2025-06-18")), "{r}");
    }
    // The handshake still answers, with the newest handshake-era version.
    let init = r#"{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"protocolVersion":"2026-07-28","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let r = rpc(&server, Some(&key), Some(ACCEPT_BOTH), init).await;
    assert_eq!(r.json["result"]["protocolVersion"], "2025-11-25", "{r}");
}

/// An API key as `Authorization: Bearer`; the 401 says a key is needed; the
/// OAuth paths a client falls back to, on a grid with no sign-in, say so too.
#[tokio::test]
async fn bearer_api_keys_work_and_a_grid_without_sign_in_says_to_use_one() {
    let server = GridServer::start(ServerOptions::default());
    let key = server.api_key().to_string();
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let with = |auth: String| {
        http_client()
            .post(format!("{}/mcp", server.base_url()))
            .header("content-type", "application/json")
            .header("accept", ACCEPT_BOTH)
            .header("authorization", auth)
            .body(ping)
    };
    let r = Resp::read(with(format!("Bearer {key}"))).await.unwrap();
    assert_eq!((r.status, r.json["result"].clone()), (200, json!({})), "{r}");
    // The whole API takes it too.
    let r = Resp::read(http_client().get(format!("{}/grid", server.base_url())).bearer_auth(&key)).await.unwrap();
    assert_eq!(r.status, 200, "{r}");
    for wrong in [format!("Bearer {key}0"), "Bearer grid_0".to_string(), "Bearer eyJnot.a.token".to_string()] {
        let r = Resp::read(with(wrong.clone())).await.unwrap();
        assert_eq!((r.status, r.error()), (401, "unauthorized"), "{wrong}: {r}");
        assert!(r.json["hint"].as_str().unwrap().contains("An API key is required"), "{r}");
    }
    let r = server.get_as(None, "/.well-known/oauth-protected-resource/mcp").await;
    assert_eq!((r.status, r.json["authorization_servers"].clone()), (200, json!([])), "{r}");
    for path in ["/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"] {
        let r = server.get_as(None, path).await;
        assert_eq!((r.status, r.error()), (404, "no sign-in on this grid"), "{path}: {r}");
        assert!(r.json["hint"].as_str().unwrap().contains("API key"), "{r}");
    }
    let r = server.post_as(None, "/register", Some(&json!({"redirect_uris": ["http://127.0.0.1/cb"]}))).await;
    assert_eq!((r.status, r.error()), (404, "no sign-in on this grid"), "{r}");
}

/// DNS rebinding: a page's Origin must be allowed; allowed origins get CORS
/// answers (preflight included); programs, which send no Origin, pass.
#[tokio::test]
async fn origins_are_checked_and_allowed_ones_get_cors() {
    let allowed = "http://localhost:6274";
    let opts = ServerOptions { extra_args: vec!["--mcp-allow-origin".into(), allowed.into()], ..Default::default() };
    let server = GridServer::start(opts);
    let key = server.api_key().to_string();
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let r = rpc_with(&server, Some(&key), Some(ACCEPT_BOTH), &[("origin", "http://evil.example")], ping).await;
    assert_eq!(r.status, 403, "{r}");
    assert!(r.json.get("id").is_none() && r.json["error"]["code"] == -32000, "{r}");
    let r = rpc_with(&server, Some(&key), Some(ACCEPT_BOTH), &[("origin", allowed)], ping).await;
    assert_eq!((r.status, r.header("access-control-allow-origin")), (200, Some(allowed)), "{r}");
    // A refusal is readable by the page too.
    let r = rpc_with(&server, None, Some(ACCEPT_BOTH), &[("origin", allowed)], ping).await;
    assert_eq!((r.status, r.header("access-control-allow-origin")), (401, Some(allowed)), "{r}");
    assert!(r.header("access-control-expose-headers").unwrap().contains("www-authenticate"), "{r}");
    let preflight = http_client()
        .request(Method::OPTIONS, format!("{}/mcp", server.base_url()))
        .header("origin", allowed)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "authorization, content-type, mcp-protocol-version");
    let r = Resp::read(preflight).await.unwrap();
    assert_eq!(r.status, 204, "{r}");
    assert_eq!(r.header("access-control-allow-origin"), Some(allowed));
    assert!(r.header("access-control-allow-methods").unwrap().contains("POST"), "{r}");
    assert!(r.header("access-control-allow-headers").unwrap().contains("mcp-protocol-version"), "{r}");
    let preflight = http_client()
        .request(Method::OPTIONS, format!("{}/mcp", server.base_url()))
        .header("origin", "http://evil.example")
        .header("access-control-request-method", "POST");
    assert_eq!(Resp::read(preflight).await.unwrap().status, 403);
    // Without the flag, no page origin is let through.
    let plain = GridServer::start(ServerOptions::default());
    let r = rpc_with(&plain, Some(plain.api_key()), Some(ACCEPT_BOTH), &[("origin", allowed)], ping).await;
    assert_eq!(r.status, 403, "{r}");
    let r = rpc_with(&plain, Some(plain.api_key()), Some(ACCEPT_BOTH), &[], ping).await;
    assert_eq!(r.status, 200, "{r}");
}
