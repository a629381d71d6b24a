//! Credentials, the unauthenticated endpoints, grid status, routing errors.
//!
//! Runs on: both stores, because keys are looked up in the store, and it holds the store locked.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use grid_tests::http::assert_error;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::wait::wait_for;

/// Authenticated endpoints of this release, with a body where they take one.
fn authenticated_calls() -> Vec<(Method, &'static str, Option<Value>)> {
    vec![
        (Method::GET, "/grid", None),
        (Method::GET, "/grid/queue-depth", None),
        (Method::POST, "/batches", Some(json!({"urls": ["http://127.0.0.1:9/x"], "script": "fetch"}))),
        (Method::GET, "/batches/bt_nope", None),
        (Method::GET, "/jobs/it_nope", None),
        (Method::POST, "/jobs/it_nope/retry", None),
        (Method::GET, "/artifacts/it_nope/body", None),
    ]
}

#[tokio::test]
async fn healthz_answers_ok_without_credential() {
    let server = GridServer::start(ServerOptions::default());
    let r = server.get_as(None, "/healthz").await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json, json!({"status": "ok"}), "{r}");
}

#[tokio::test]
async fn protected_resource_metadata_names_the_base_url() {
    let auth_url = "http://127.0.0.1:9/issuer";
    let server = GridServer::start(ServerOptions { auth_url: Some(auth_url.into()), ..Default::default() });
    let base = server.base_url();
    for (path, resource) in [
        ("/.well-known/oauth-protected-resource", base.clone()),
        ("/.well-known/oauth-protected-resource/mcp", format!("{base}/mcp")),
    ] {
        let r = server.get_as(None, path).await;
        assert_eq!(r.status, 200, "{path}: {r}");
        assert_eq!(r.json["resource"], json!(resource), "{path}: {r}");
        assert_eq!(r.json["authorization_servers"], json!([auth_url]), "{path}: {r}");
        assert_eq!(
            r.json["scopes_supported"],
            json!(["openid", "offline_access", "email", "profile", "grid.invoke"]),
            "{path}: {r}"
        );
        assert_eq!(r.json["bearer_methods_supported"], json!(["header"]), "{path}: {r}");
    }
}

#[tokio::test]
async fn missing_or_wrong_key_is_401_unauthorized_everywhere() {
    let server = GridServer::start(ServerOptions::default());
    for (method, path, body) in authenticated_calls() {
        let none = server.request(method.clone(), path, None, body.as_ref()).await;
        assert_error(&none, 401, "unauthorized");
        assert_eq!(none.json, json!({"error": "unauthorized"}), "{method} {path}");
        let wrong = server.request(method.clone(), path, Some("grid_not-a-real-key"), body.as_ref()).await;
        assert_error(&wrong, 401, "unauthorized");
    }
    // Nothing was queued by the refused submissions.
    let depth = server.get("/grid/queue-depth").await;
    assert_eq!(depth.json, json!({"depth": 0}), "{depth}");
}

#[tokio::test]
async fn first_start_key_works_and_account_has_default_credit() {
    let server = GridServer::start(ServerOptions::default());
    assert!(server.api_key().starts_with("grid_"), "{}", server.api_key());
    assert!(server.account_id().starts_with("acc_"), "{}", server.account_id());
    assert!(server.key_id().starts_with("key_"), "{}", server.key_id());
    let r = server.get("/grid").await;
    assert_eq!(r.status, 200, "{r}");
    let acc = server.account_show(server.account_id());
    assert_eq!(acc["accountId"], json!(server.account_id()), "{acc}");
    assert_eq!(acc["creditMicros"], json!(10_000_000), "{acc}");
    assert_eq!(acc["reservedMicros"], json!(0), "{acc}");
    assert_eq!(acc["availableMicros"], json!(10_000_000), "{acc}");
    assert_eq!(acc["suspended"], json!(false), "{acc}");
}

#[tokio::test]
async fn initial_credit_flag_sets_first_account_credit() {
    let server = GridServer::start(ServerOptions { initial_credit_micros: Some(4_321), ..Default::default() });
    let acc = server.account_show(server.account_id());
    assert_eq!(acc["creditMicros"], json!(4_321), "{acc}");
    assert_eq!(acc["availableMicros"], json!(4_321), "{acc}");
}

#[tokio::test]
async fn revoked_key_is_401() {
    let server = GridServer::start(ServerOptions::default());
    let key = server.admin(&["key", "create", "--account", server.account_id()]);
    let api_key = key["apiKey"].as_str().expect("apiKey").to_string();
    let key_id = key["keyId"].as_str().expect("keyId").to_string();
    assert!(api_key.starts_with("grid_") && key_id.starts_with("key_"), "{key}");
    let before = server.get_as(Some(&api_key), "/grid").await;
    assert_eq!(before.status, 200, "{before}");

    server.admin(&["key", "revoke", "--key-id", &key_id]);
    for (method, path, body) in authenticated_calls() {
        let r = server.request(method.clone(), path, Some(&api_key), body.as_ref()).await;
        assert_error(&r, 401, "unauthorized");
    }
    // The account's other key is untouched.
    let other = server.get("/grid").await;
    assert_eq!(other.status, 200, "{other}");
}

#[tokio::test]
async fn suspended_account_is_401_until_resumed() {
    let server = GridServer::start(ServerOptions::default());
    server.admin(&["account", "suspend", "--account", server.account_id()]);
    let acc = server.account_show(server.account_id());
    assert_eq!(acc["suspended"], json!(true), "{acc}");
    for (method, path, body) in authenticated_calls() {
        let r = server.request(method.clone(), path, Some(server.api_key()), body.as_ref()).await;
        assert_error(&r, 401, "unauthorized");
    }
    let depth_after = server.account_show(server.account_id());
    assert_eq!(depth_after["reservedMicros"], json!(0), "a suspended account's submission reserved: {depth_after}");

    server.admin(&["account", "resume", "--account", server.account_id()]);
    let r = server.get("/grid").await;
    assert_eq!(r.status, 200, "{r}");
}

#[tokio::test]
async fn locked_accounting_db_is_503_accounting_unavailable() {
    let server = GridServer::start(ServerOptions { accounting_timeout_ms: Some(300), ..Default::default() });
    assert_eq!(server.get("/grid").await.status, 200);

    let lock = server.lock_db();
    let started = Instant::now();
    let r = server.get("/grid").await;
    let took = started.elapsed();
    assert_error(&r, 503, "accounting_unavailable");
    assert!(took < Duration::from_secs(5), "503 took {took:?} with a 300 ms accounting timeout");
    let submit = server.post("/batches", &json!({"urls": ["http://127.0.0.1:9/x"], "script": "fetch"})).await;
    assert_error(&submit, 503, "accounting_unavailable");
    // Health says nothing about accounting.
    let health = server.get_as(None, "/healthz").await;
    assert_eq!(health.status, 200, "{health}");
    drop(lock);

    // Safe to resend: once the database answers, the same call works and the
    // refused submission left nothing behind.
    wait_for("GET /grid 200 after the lock was released", Duration::from_secs(10), || async {
        let r = server.get("/grid").await;
        match r.status {
            200 => Ok(()),
            _ => Err(r.to_string()),
        }
    })
    .await;
    let acc = server.account_show(server.account_id());
    assert_eq!(acc["reservedMicros"], json!(0), "{acc}");
}

#[tokio::test]
async fn grid_status_and_queue_depth_have_contract_shape() {
    let server = GridServer::start(ServerOptions::default());
    let r = server.get("/grid").await;
    assert_eq!(r.status, 200, "{r}");
    for field in ["wait", "prioritized", "delayed"] {
        assert!(r.json["queue"][field].is_u64(), "queue.{field} not an integer: {r}");
    }
    for field in ["workers", "sessions", "maxSessions", "nodes"] {
        assert!(r.json[field].is_u64(), "{field} not an integer: {r}");
    }
    let d = server.get("/grid/queue-depth").await;
    assert_eq!(d.status, 200, "{d}");
    assert_eq!(d.json, json!({"depth": 0}), "a quiet grid has depth 0: {d}");
}

#[tokio::test]
async fn unknown_path_is_404_json() {
    let server = GridServer::start(ServerOptions::default());
    for path in ["/nope", "/grid/nope", "/artifacts/x", "/batches/x/y"] {
        let r = server.get(path).await;
        assert_eq!(r.status, 404, "GET {path}: {r}");
        assert!(r.json["error"].is_string(), "GET {path}: not a JSON error: {r}");
    }
}

/// Contract paths of later releases are routed: until they are served they
/// answer 501 `not implemented`, never a 404 or 405 of the router.
#[tokio::test]
async fn later_release_endpoints_are_routed_and_501_until_served() {
    let server = GridServer::start(ServerOptions::default());
    let calls = [
        (Method::POST, "/jobs", Some(json!({}))),
        (Method::GET, "/jobs", None),
        (Method::POST, "/sessions", Some(json!({}))),
        (Method::GET, "/sessions", None),
        (Method::DELETE, "/sessions/ses_x", None),
        (Method::POST, "/mcp", Some(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))),
    ];
    let unknown_path = server.get("/no-such-route").await;
    assert_eq!(unknown_path.status, 404, "{unknown_path}");
    for (method, path, body) in calls {
        let r = server.request(method.clone(), path, Some(server.api_key()), body.as_ref()).await;
        if r.status == 501 {
            assert_error(&r, 501, "not implemented");
        } else {
            // Served: any contract answer (e.g. 404 unknown session), but not
            // the router's own 404 or 405.
            let router_404 = r.status == 404 && r.error() == unknown_path.error();
            assert!(!router_404 && r.status != 405, "{method} {path} is not routed: {r}");
        }
    }
    // Without a credential they are refused like every authenticated path.
    for path in ["/jobs", "/sessions"] {
        assert_error(&server.get_as(None, path).await, 401, "unauthorized");
    }
}
