//! Persistent browser contexts (issue 29, docs/sessions.md "Contexts"):
//! Playwright signs in to a local site (a cookie and a localStorage value)
//! in a session leased with `context: {id, persist: true}`; released, a
//! new lease with the context finds both, a lease without it starts clean,
//! `persist: false` writes nothing back, a second live session on the
//! context is 409 naming the first, another account's context is 404 on
//! every route, a state over the bound is refused and the state before
//! kept, and no byte of the state is in clear under the data dir (nor, on
//! PostgreSQL, in the table). On PostgreSQL the context saved through one
//! node is loaded by a session on another.
//!
//! Runs on: both stores, because a context's sealed state is a store row.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use grid_tests::http::Resp;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::sessions::{iso_ms, lease_as, release_as, wait_running_as};
use grid_tests::target::Target;
use grid_tests::wait::wait_for;
use serde_json::{json, Value};

/// The bound the tests run the grid with (`--context-max-kib`): a sign-in
/// fits many times, the filler below does not.
const MAX_KIB: u64 = 64;
const FILLER_BYTES: u64 = 200 * 1024;

fn clients_dir() -> PathBuf {
    grid_tests::bins::clients_dir(&["playwright-core"])
}

fn options() -> ServerOptions {
    ServerOptions { extra_args: vec!["--context-max-kib".into(), MAX_KIB.to_string()], ..ServerOptions::default() }
}

/// `options()` with a save point every second a live `persist` session's state changed.
fn saving_every_second() -> ServerOptions {
    let mut opts = options();
    opts.extra_args.extend(["--context-save-every-secs".into(), "1".into()]);
    opts
}

/// Runs tests/clients/contexts.js on the session's cdpUrl: what the page
/// saw of the sign-in.
async fn playwright(server: &GridServer, cdp_url: &str, page: &str, mode: &[&str]) -> Value {
    let mut cmd = Command::new("node");
    cmd.arg("contexts.js").arg(cdp_url).arg(page).args(mode).current_dir(clients_dir());
    grid_tests::child::run_json(server, &format!("contexts.js {mode:?}"), &mut cmd)
}

async fn create_context(server: &GridServer, key: &str) -> String {
    let r = server.post_as(Some(key), "/contexts", Some(&json!({}))).await;
    assert_eq!(r.status, 201, "{r}");
    let id = r.json["contextId"].as_str().unwrap_or_else(|| server.fail(&format!("no contextId: {r}"))).to_string();
    assert!(id.starts_with("ctx_"), "{id}");
    id
}

async fn contexts_of(server: &GridServer, key: &str) -> Vec<Value> {
    let r = server.get_as(Some(key), "/contexts").await;
    assert_eq!(r.status, 200, "{r}");
    r.json.as_array().cloned().unwrap_or_else(|| server.fail(&format!("GET /contexts is no list: {r}")))
}

async fn context_of(server: &GridServer, key: &str, id: &str) -> Value {
    contexts_of(server, key)
        .await
        .into_iter()
        .find(|c| c["contextId"] == id)
        .unwrap_or_else(|| server.fail(&format!("context {id} not listed")))
}

async fn delete_context(server: &GridServer, key: &str, id: &str) -> Resp {
    server.request(reqwest::Method::DELETE, &format!("/contexts/{id}"), Some(key), None).await
}

/// A session leased through `server` with `body`, running; its cdpUrl and
/// its attestation.
async fn running(server: &GridServer, key: &str, body: Value) -> (String, String, Value) {
    let lease = lease_as(server, key, body).await;
    let (entry, _) = wait_running_as(server, key, &lease.id).await;
    (lease.id, lease.cdp_url, entry["attestation"].clone())
}

async fn release(server: &GridServer, key: &str, id: &str) {
    let r = release_as(server, key, id).await;
    assert_eq!(r.status, 204, "{r}");
}

/// Waits until `probe` holds for the context's entry.
async fn wait_context(server: &GridServer, key: &str, id: &str, what: &str, probe: impl Fn(&Value) -> bool) -> Value {
    wait_for(&format!("context {id}: {what}"), Duration::from_secs(60), || async {
        let c = context_of(server, key, id).await;
        match probe(&c) {
            true => Ok(c),
            false => Err(c.to_string()),
        }
    })
    .await
}

/// Files under `dir` holding `needle`, found by reading every regular file.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let (path, Ok(kind)) = (e.path(), e.file_type()) else { continue };
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                if let Ok(bytes) = std::fs::read(&path) {
                    if bytes.windows(needle.len()).any(|w| w == needle) {
                        found.push(path);
                    }
                }
            }
        }
    }
    found
}

fn canary() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("canary{nanos:x}{}", std::process::id())
}

/// The whole story on one grid (`second` is where the later leases go: the
/// same server on SQLite, another node on PostgreSQL).
async fn contexts_keep_a_sign_in(first: &GridServer, second: &GridServer, target: &Target) {
    let key = first.api_key().to_string();
    let page = target.url("/page/1");
    let id = create_context(first, &key).await;
    let fresh = context_of(first, &key, &id).await;
    assert_eq!((fresh["sizeBytes"].clone(), fresh["sessionId"].clone()), (json!(0), Value::Null), "{fresh}");
    assert_eq!(fresh["lastUsedAt"], Value::Null, "{fresh}");

    // Signed in through the first node, in a session that persists.
    let secret = canary();
    let persist = json!({"ttlMinutes": 10, "context": {"id": id, "persist": true}});
    let (a, a_url, attested) = running(first, &key, persist.clone()).await;
    assert_eq!(attested["context"]["contextId"], json!(id), "{attested}");
    let empty_digest = attested["context"]["stateSha256"].clone();
    assert!(empty_digest.as_str().is_some_and(|d| d.starts_with("sha256:")), "{attested}");
    let signed_in = playwright(first, &a_url, &page, &["signin", &secret]).await;
    assert_eq!(signed_in["user"], json!(secret), "{signed_in}");
    // Held while it lives: a second lease and a delete are refused, naming it.
    let r = first.post_as(Some(&key), "/sessions", Some(&persist)).await;
    assert_eq!(
        (r.status, r.json["error"].clone(), r.json["sessionId"].clone()),
        (409, json!("context in use"), json!(a)),
        "{r}"
    );
    let r = delete_context(first, &key, &id).await;
    assert_eq!((r.status, r.json["sessionId"].clone()), (409, json!(a)), "{r}");
    assert_eq!(context_of(first, &key, &id).await["sessionId"], json!(a));
    release(first, &key, &a).await;

    // Leased again (on the second node): the sign-in is there.
    let (b, b_url, attested) = running(second, &key, persist.clone()).await;
    if !std::ptr::eq(first, second) {
        let (on_a, on_b) = (first.stored().session(&a).node, second.stored().session(&b).node);
        assert_ne!(on_a, on_b, "both sessions ran on one node");
    }
    assert_ne!(attested["context"]["stateSha256"], empty_digest, "the digest names the state loaded: {attested}");
    assert!(!attested.to_string().contains(&secret), "the attestation shows the state: {attested}");
    let seen = playwright(second, &b_url, &page, &["check"]).await;
    assert_eq!(seen["user"], json!(secret), "localStorage not restored: {seen}");
    assert!(
        seen["cookie"].as_str().unwrap_or("").contains(&format!("grid_signin={secret}")),
        "cookie not restored: {seen}"
    );
    release(second, &key, &b).await;
    let saved =
        wait_context(first, &key, &id, "a save", |c| c["sessionId"].is_null() && c["savedAt"].is_string()).await;
    assert!(saved["sizeBytes"].as_u64().unwrap_or(0) > 0, "{saved}");
    assert!(saved["lastUsedAt"].is_string(), "{saved}");

    // A session without the context starts clean.
    let (c, c_url, attested) = running(second, &key, json!({"ttlMinutes": 10})).await;
    assert_eq!(attested["context"], Value::Null, "{attested}");
    let clean = playwright(second, &c_url, &page, &["check"]).await;
    assert_eq!((clean["user"].clone(), clean["cookie"].clone()), (Value::Null, json!("")), "{clean}");
    release(second, &key, &c).await;

    // persist: false reads the state and writes nothing back.
    let read_only = json!({"ttlMinutes": 10, "context": {"id": id, "persist": false}});
    let (d, d_url, attested) = running(first, &key, read_only).await;
    assert_eq!(attested["context"]["persist"], json!(false), "{attested}");
    let changed = playwright(first, &d_url, &page, &["signin", "someone-else"]).await;
    assert_eq!(changed["user"], json!("someone-else"), "{changed}");
    release(first, &key, &d).await;
    // (With a viewport too: the grid's own DevTools session then holds
    // every new page until it is set up, the state's page included.)
    let with_viewport = json!({"ttlMinutes": 10, "viewport": {"width": 800, "height": 600},
                               "context": {"id": id, "persist": false}});
    let (e, e_url, _) = running(second, &key, with_viewport).await;
    let seen = playwright(second, &e_url, &page, &["check"]).await;
    assert_eq!(seen["user"], json!(secret), "persist: false wrote back: {seen}");
    release(second, &key, &e).await;

    // A state over the bound: refused with its reason, the state before kept.
    let (f, f_url, _) = running(first, &key, persist.clone()).await;
    playwright(first, &f_url, &page, &["fill", &FILLER_BYTES.to_string()]).await;
    release(first, &key, &f).await;
    let refused =
        wait_context(first, &key, &id, "a refusal", |c| c["sessionId"].is_null() && c["lastSaveRefused"].is_string())
            .await;
    assert!(refused["lastSaveRefused"].as_str().unwrap_or("").contains("bound"), "{refused}");
    assert_eq!(refused["sizeBytes"], saved["sizeBytes"], "{refused}");
    let (g, g_url, _) = running(second, &key, persist.clone()).await;
    let seen = playwright(second, &g_url, &page, &["check"]).await;
    assert_eq!(seen["user"], json!(secret), "the state before the refusal is gone: {seen}");
    release(second, &key, &g).await;

    // Another account: 404 on every context route and on a lease.
    let (_, other) = first.create_account("other", 50_000_000);
    assert!(contexts_of(first, &other).await.is_empty());
    let r = delete_context(first, &other, &id).await;
    assert_eq!((r.status, r.json["error"].clone()), (404, json!("unknown context")), "{r}");
    let r = first.post_as(Some(&other), "/sessions", Some(&persist)).await;
    assert_eq!((r.status, r.json["error"].clone()), (404, json!("unknown context")), "{r}");
    let r = delete_context(first, &key, "ctx_01NOSUCHCONTEXT").await;
    assert_eq!(r.status, 404, "{r}");

    // Nothing of the state in clear: not under either data dir, not in the
    // table (on PostgreSQL, where the data dirs hold no table).
    for server in [first, second] {
        let found = files_holding(server.data_dir(), secret.as_bytes());
        assert!(found.is_empty(), "the canary is in clear in {found:?}");
    }
    let dump = first.stored().contexts_dump();
    assert!(dump.windows(id.len()).any(|w| w == id.as_bytes()), "the dump holds the context");
    assert!(!dump.windows(secret.len()).any(|w| w == secret.as_bytes()), "the canary is in clear in the table");

    // Deleted with its state; gone for its account too.
    assert_eq!(delete_context(first, &key, &id).await.status, 204);
    assert!(contexts_of(first, &key).await.iter().all(|c| c["contextId"] != id));
    let r = first.post_as(Some(&key), "/sessions", Some(&persist)).await;
    assert_eq!(r.status, 404, "{r}");
}

/// A browser lost in the middle of a session (here crashed by its lessee)
/// keeps what its last save point read: a sign-in made after the lease and
/// saved by a save point, while the session still held the context, is
/// there in the next session. Before save points, only an end saved, and a
/// lost browser took the whole session's sign-in with it.
#[tokio::test]
async fn a_save_point_keeps_a_sign_in_when_the_browser_is_lost() {
    let target = Target::start();
    let server = GridServer::start(saving_every_second());
    let key = server.api_key().to_string();
    let page = target.url("/page/1");
    let id = create_context(&server, &key).await;
    let persist = json!({"ttlMinutes": 10, "context": {"id": id, "persist": true}});
    let (a, a_url, _) = running(&server, &key, persist.clone()).await;
    let secret = sign_in_until_a_save_point_then_crash(&server, &key, &id, (&a, &a_url), &page).await;

    let (b, b_url, _) = running(&server, &key, persist).await;
    let seen = playwright(&server, &b_url, &page, &["check"]).await;
    assert_eq!(seen["user"], json!(secret), "localStorage of the save point not restored: {seen}");
    assert!(
        seen["cookie"].as_str().unwrap_or("").contains(&format!("grid_signin={secret}")),
        "cookie of the save point not restored: {seen}"
    );
    release(&server, &key, &b).await;
}

/// Signs in on `page` in `session` (its id and cdpUrl) with a secret of
/// its own, waits for a save point holding the sign-in, then crashes the
/// browser (`Browser.crash`, as a lost browser) and waits until the
/// context is free; answers the secret.
async fn sign_in_until_a_save_point_then_crash(
    server: &GridServer,
    key: &str,
    id: &str,
    (session, cdp_url): (&str, &str),
    page: &str,
) -> String {
    let secret = canary();
    let signed_in = playwright(server, cdp_url, page, &["signin-open", &secret]).await;
    assert_eq!(signed_in["user"], json!(secret), "{signed_in}");
    // A save point that began once the sign-in was in the browser, stored
    // while the session still holds the context. (One that began before
    // the script ended may have stored the sign-in already; the next one
    // finds the state unchanged and only moves `savedAt` on.)
    let settled_at = signed_in["settledAt"].as_i64().unwrap_or_else(|| panic!("no settledAt: {signed_in}"));
    let saved = wait_context(server, key, id, "a save point after the sign-in", |c| {
        c["sessionId"] == json!(session) && c["savedAt"].is_string() && iso_ms(&c["savedAt"]) > settled_at
    })
    .await;
    assert!(saved["sizeBytes"].as_u64().unwrap_or(0) > 0, "{saved}");
    let crashed = playwright(server, cdp_url, "-", &["crash"]).await;
    assert_eq!(crashed["crashed"], json!(true), "{crashed}");
    wait_context(server, key, id, "the lost session letting the context go", |c| c["sessionId"].is_null()).await;
    secret
}

/// IndexedDB is kept as `localStorage` is: a database holding values JSON
/// does not carry (a Date, bytes, a Map, a Set, a BigInt, NaN, undefined, a
/// Blob, a File) comes back in the next session with its version, stores,
/// key path, index and generated keys; a database past half the context's
/// bound (a site's large cache) is left out whole and the rest is saved; a
/// save point keeps the databases the state held (it reads no script's
/// storage), so they outlive a lost browser; a session without the context
/// has no database.
#[tokio::test]
async fn a_context_keeps_indexeddb_databases_whole() {
    let target = Target::start();
    let server = GridServer::start(saving_every_second());
    let key = server.api_key().to_string();
    let page = target.url("/page/1");
    let id = create_context(&server, &key).await;
    let persist = json!({"ttlMinutes": 10, "context": {"id": id, "persist": true}});
    let (a, a_url, _) = running(&server, &key, persist.clone()).await;
    let secret = canary();
    playwright(&server, &a_url, &page, &["idb-write", &secret]).await;
    let over_half = (MAX_KIB * 1024 / 2 + 1).to_string();
    playwright(&server, &a_url, &page, &["idb-fill", &over_half]).await;
    release(&server, &key, &a).await;
    let saved =
        wait_context(&server, &key, &id, "the save", |c| c["sessionId"].is_null() && c["savedAt"].is_string()).await;
    assert_eq!(saved["lastSaveRefused"], Value::Null, "{saved}");

    let (b, b_url, _) = running(&server, &key, persist.clone()).await;
    let seen = playwright(&server, &b_url, &page, &["idb-check"]).await;
    assert_databases_whole(&seen, &secret);
    // A save point of another change, then the browser lost: the databases stay.
    sign_in_until_a_save_point_then_crash(&server, &key, &id, (&b, &b_url), &page).await;

    let (c, c_url, _) = running(&server, &key, json!({"ttlMinutes": 10, "context": {"id": id}})).await;
    let seen = playwright(&server, &c_url, &page, &["idb-check"]).await;
    assert_databases_whole(&seen, &secret);
    release(&server, &key, &c).await;

    let (d, d_url, _) = running(&server, &key, json!({"ttlMinutes": 10})).await;
    let clean = playwright(&server, &d_url, &page, &["idb-check"]).await;
    assert_eq!(clean["databases"], json!([]), "{clean}");
    release(&server, &key, &d).await;
}

/// Every localStorage key comes back after a `persist` session (issue 50):
/// keys named like members of Storage or Object (`length`, `key`,
/// `getItem`, `__proto__`, ...) were dropped by the end's save, which read
/// the storage as an object's entries, while save points kept them.
#[tokio::test]
async fn every_local_storage_key_comes_back_after_a_persist_session() {
    let target = Target::start();
    let server = GridServer::start(options());
    let key = server.api_key().to_string();
    let page = target.url("/page/1");
    let id = create_context(&server, &key).await;
    let persist = json!({"ttlMinutes": 10, "context": {"id": id, "persist": true}});
    let names = [
        "length",
        "key",
        "getItem",
        "setItem",
        "removeItem",
        "clear",
        "constructor",
        "toString",
        "__proto__",
        "hasOwnProperty",
        "valueOf",
        "grid_user",
        "plain",
    ];
    let mut pairs: Vec<(String, String)> = names.iter().map(|n| (n.to_string(), format!("value of {n}"))).collect();
    let (a, a_url, _) = running(&server, &key, persist.clone()).await;
    let set = serde_json::to_string(&pairs).unwrap();
    playwright(&server, &a_url, &page, &["keys", &set]).await;
    release(&server, &key, &a).await;
    let saved =
        wait_context(&server, &key, &id, "the save", |c| c["sessionId"].is_null() && c["savedAt"].is_string()).await;
    assert_eq!(saved["lastSaveRefused"], Value::Null, "{saved}");

    let (b, b_url, _) = running(&server, &key, persist).await;
    let seen = playwright(&server, &b_url, &page, &["keys-check"]).await;
    let mut back: Vec<(String, String)> = serde_json::from_value(seen["pairs"].clone())
        .unwrap_or_else(|e| server.fail(&format!("keys-check answered {seen}: {e}")));
    back.sort();
    pairs.sort();
    assert_eq!(back, pairs, "{seen}");
    release(&server, &key, &b).await;
}

/// A context's state is bounded as it is read (issue 50): 40 origins of
/// 4.5 MB of localStorage each (180 MB, the default bound is 10 MiB) are
/// refused with the reason on the context, the state before kept, and the
/// server never grows by 200 MiB doing it (it read and sealed the whole
/// state first: 900 MB); another session on the context still runs.
#[tokio::test]
async fn a_state_far_over_the_bound_is_refused_without_the_server_holding_it() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let key = server.api_key().to_string();
    let id = create_context(&server, &key).await;
    let persist = json!({"ttlMinutes": 10, "context": {"id": id, "persist": true}});
    let (a, a_url, _) = running(&server, &key, persist.clone()).await;
    let filled = playwright(&server, &a_url, "-", &["fill-origins", "40", "4500000"]).await;
    assert_eq!(filled["origins"], json!(40), "{filled}");
    let before = server.rss_bytes();
    release(&server, &key, &a).await;
    let refused =
        wait_context(&server, &key, &id, "a refusal", |c| c["sessionId"].is_null() && c["lastSaveRefused"].is_string())
            .await;
    let grown = server.peak_rss_bytes().saturating_sub(before);
    eprintln!("the server grew by {} MiB saving the context: {refused}", grown >> 20);
    assert!(grown < 200 * 1024 * 1024, "the server grew by {} MiB saving the context", grown >> 20);
    assert!(refused["lastSaveRefused"].as_str().unwrap_or("").contains("bound"), "{refused}");
    assert_eq!(refused["sizeBytes"], json!(0), "the state before (none) is kept: {refused}");

    let (b, b_url, _) = running(&server, &key, persist).await;
    let seen = playwright(&server, &b_url, &target.url("/page/1"), &["check"]).await;
    assert_eq!(seen["user"], Value::Null, "{seen}");
    release(&server, &key, &b).await;
}

/// What tests/clients/contexts.js `idb-check` read is what `idb-write` wrote.
fn assert_databases_whole(seen: &Value, secret: &str) {
    assert_eq!(seen["databases"], json!(["grid_app@3"]), "{seen}");
    assert_eq!(seen["stores"], json!(["files", "tokens"]), "{seen}");
    assert_eq!((seen["keyPath"].clone(), seen["indexes"].clone()), (json!("id"), json!(["by_user"])), "{seen}");
    assert_eq!((seen["user"].clone(), seen["byUser"].clone()), (json!(secret), json!(1)), "{seen}");
    assert_eq!(seen["at"], json!(1_700_000_000_000_i64), "a Date: {seen}");
    assert_eq!(seen["bytes"], json!([1, 2, 255]), "a Uint8Array: {seen}");
    assert_eq!(seen["list"], json!([1, "two", null, true]), "{seen}");
    assert_eq!((seen["map"].clone(), seen["set"].clone()), (json!([["k", 1]]), json!(["s"])), "{seen}");
    assert_eq!(
        (seen["big"].clone(), seen["nan"].clone(), seen["undef"].clone()),
        (json!("12"), json!(true), json!(true))
    );
    assert_eq!(seen["fileKeys"], json!([1, 2]), "the generated keys: {seen}");
    assert_eq!(seen["blob"], json!(["text/plain", "hello blob"]), "{seen}");
    assert_eq!(seen["file"], json!(["note.csv", "text/csv", 1_600_000_000_000_i64, "a,b"]), "{seen}");
}

#[tokio::test]
async fn a_context_keeps_a_sign_in_across_sessions() {
    let target = Target::start();
    let server = GridServer::start(options());
    contexts_keep_a_sign_in(&server, &server, &target).await;
}

/// Two nodes on one PostgreSQL database: saved through one node, loaded by
/// a session on the other (each lease runs on the node it came through:
/// both have free slots). Needs PostgreSQL whatever the run's store
/// (`GRID_TEST_DATABASE_URL`), as tests/scale_out.rs does.
#[tokio::test]
async fn a_context_saved_through_one_node_is_loaded_on_another() {
    let target = Target::start();
    let node = |name: &str| ServerOptions {
        postgres: true,
        extra_args: [options().extra_args, vec!["--node".into(), name.into()]].concat(),
        ..ServerOptions::default()
    };
    let n1 = GridServer::start(node("n1"));
    let n2 = n1.join(node("n2"));
    contexts_keep_a_sign_in(&n1, &n2, &target).await;
}

/// A tool call on POST /mcp with the first-start key: its result.
async fn mcp_tool(server: &GridServer, name: &str, arguments: Value) -> Value {
    server.mcp_tool_as(server.api_key(), name, arguments).await
}

/// The same calls through the SDK, the CLI and the MCP tools; the lease's
/// `--context` flag reaches the API (an unknown context is its 404).
#[tokio::test]
async fn contexts_through_the_sdk_the_cli_and_mcp() {
    let server = GridServer::start(options());
    let client = server.client();
    let by_sdk = client.create_context().await.unwrap().context_id;
    assert!(client.list_contexts().await.unwrap().iter().any(|c| c.context_id == by_sdk));

    let created = server.cli(&["context", "create"]);
    assert!(created.success(), "{created}");
    let by_cli = created.stdout.trim().to_string();
    assert!(by_cli.starts_with("ctx_"), "{created}");
    let listed = server.cli(&["--json", "context", "list"]);
    let ids: Vec<Value> = listed.json().and_then(|l| l.as_array().cloned()).unwrap_or_default();
    let ids: Vec<&str> = ids.iter().filter_map(|c| c["contextId"].as_str()).collect();
    assert_eq!(ids, [by_sdk.as_str(), by_cli.as_str()], "{listed}");
    let table = server.cli(&["context", "list"]);
    assert!(table.success() && table.stdout.contains(&by_cli), "{table}");
    let lease = server.cli(&["session", "lease", "--context", "ctx_01NOSUCHCONTEXT", "--persist"]);
    assert!(!lease.success() && lease.stderr.contains("unknown context"), "{lease}");
    let deleted = server.cli(&["context", "delete", &by_cli]);
    assert!(deleted.success(), "{deleted}");
    let again = server.cli(&["context", "delete", &by_cli]);
    assert!(!again.success() && again.stderr.contains("unknown context"), "{again}");

    let made = mcp_tool(&server, "create_context", json!({})).await;
    let by_mcp = made["structuredContent"]["contextId"].as_str().unwrap_or_else(|| server.fail(&format!("{made}")));
    let listed = mcp_tool(&server, "list_contexts", json!({})).await;
    let ids: Vec<&str> = listed["structuredContent"]["contexts"]
        .as_array()
        .map(|l| l.iter().filter_map(|c| c["contextId"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, [by_sdk.as_str(), by_mcp], "{listed}");
    let gone = mcp_tool(&server, "delete_context", json!({"contextId": by_mcp})).await;
    assert_eq!(gone["structuredContent"], json!({"contextId": by_mcp, "deleted": true}), "{gone}");
    let again = mcp_tool(&server, "delete_context", json!({"contextId": by_mcp})).await;
    assert_eq!(again["isError"], json!(true), "{again}");
    assert!(again["content"][0]["text"].as_str().unwrap_or("").contains("unknown context"), "{again}");
    let lease = mcp_tool(&server, "lease_session", json!({"context": {"id": by_mcp, "persist": true}})).await;
    assert!(lease["content"][0]["text"].as_str().unwrap_or("").contains("unknown context"), "{lease}");
    client.delete_context(&by_sdk).await.unwrap();
    assert!(client.list_contexts().await.unwrap().is_empty());
}

/// The `Cookie` header of each request `target` saw on `path`.
fn cookies_seen(target: &Target, path: &str) -> Vec<Option<String>> {
    target.requests(path).iter().map(|r| r.header("cookie").map(str::to_string)).collect()
}

/// Signed-in captures: a `fetch` batch naming a context sends its cookies
/// by the browser's rules, the first URL's and each redirect's (here a
/// host-only cookie of 127.0.0.1: sent there, not to `localhost`); a
/// browser item's page and a one-call capture's send them too; a batch
/// without it sends none;
/// another account's context is 404.
#[tokio::test]
async fn a_fetch_batch_naming_a_context_sends_its_cookies_by_the_browsers_rules() {
    let target = Target::start();
    let server = GridServer::start(options());
    let key = server.api_key().to_string();
    let id = create_context(&server, &key).await;
    let secret = canary();
    let persist = json!({"ttlMinutes": 10, "context": {"id": id, "persist": true}});
    let (s, url, _) = running(&server, &key, persist).await;
    playwright(&server, &url, &target.url("/page/1"), &["signin", &secret]).await;
    release(&server, &key, &s).await;
    wait_context(&server, &key, &id, "a save", |c| c["sessionId"].is_null() && c["savedAt"].is_string()).await;

    let port = target.addr().port();
    let urls = [
        format!("http://127.0.0.1:{port}/page/2"),
        format!("http://localhost:{port}/redirect?to=http://127.0.0.1:{port}/page/3"),
        format!("http://127.0.0.1:{port}/redirect?to=http://localhost:{port}/page/4"),
    ];
    let batch = server.submit_as(&key, &json!({"urls": urls, "script": "fetch", "context": id})).await;
    let done = server.wait_batch_done(&batch, Duration::from_secs(60)).await;
    assert_eq!(done["counts"]["completed"], json!(3), "{done}");
    let signed = Some(format!("grid_signin={secret}"));
    assert_eq!(cookies_seen(&target, "/page/2"), std::slice::from_ref(&signed));
    assert_eq!(cookies_seen(&target, "/page/3"), std::slice::from_ref(&signed), "the redirect's 127.0.0.1 hop");
    assert_eq!(cookies_seen(&target, "/page/4"), [None], "a host-only cookie went to another host");
    let redirects = cookies_seen(&target, "/redirect");
    assert!(redirects.contains(&None) && redirects.contains(&signed), "{redirects:?}");

    // A browser item starts its own browser context with them.
    let rendered = server
        .submit_as(&key, &json!({"urls": [target.url("/page/7")], "script": "render-fetch", "context": id}))
        .await;
    let done = server.wait_batch_done(&rendered, Duration::from_secs(90)).await;
    assert_eq!(done["counts"]["completed"], json!(1), "{done}");
    assert_eq!(cookies_seen(&target, "/page/7"), std::slice::from_ref(&signed), "the browser item's request");

    // A one-call capture too.
    let r = server.post_as(Some(&key), "/content", Some(&json!({"url": target.url("/page/8"), "context": id}))).await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(cookies_seen(&target, "/page/8"), std::slice::from_ref(&signed), "the one-call capture's request");

    // Without the context, nothing.
    let plain = server.submit_as(&key, &json!({"urls": [target.url("/page/5")], "script": "fetch"})).await;
    server.wait_batch_done(&plain, Duration::from_secs(60)).await;
    assert_eq!(cookies_seen(&target, "/page/5"), [None]);
    // Another account's context is unknown; a malformed id is a bad body.
    let (_, other) = server.create_account("other", 50_000_000);
    let body = json!({"urls": [target.url("/page/6")], "script": "fetch", "context": id});
    let r = server.post_as(Some(&other), "/batches", Some(&body)).await;
    assert_eq!((r.status, r.json["error"].clone()), (404, json!("unknown context")), "{r}");
    let r = server.post_as(Some(&other), "/content", Some(&json!({"url": target.url("/page/6"), "context": id}))).await;
    assert_eq!((r.status, r.json["error"].clone()), (404, json!("unknown context")), "{r}");
    let r = server.post_as(Some(&key), "/batches", Some(&json!({"urls": [target.url("/")], "context": "x"}))).await;
    assert_eq!(r.status, 400, "{r}");
    assert_eq!(target.hits("/page/6"), 0);
    // Read-only: the context is as the session left it.
    assert!(context_of(&server, &key, &id).await["lastUsedAt"].is_string());
}

/// A lease of a context whose saved state cannot be opened (damaged at
/// rest) is refused at once: 409 `context cannot be opened` naming why,
/// nothing reserved or charged and no session made, instead of a 201 whose
/// session is lost a moment later. The context itself can still be deleted.
#[tokio::test]
async fn a_lease_of_a_context_that_cannot_be_opened_is_refused_charging_nothing() {
    let server = GridServer::start(options());
    let key = server.api_key().to_string();
    let id = create_context(&server, &key).await;
    server.stored().break_context_state(&id);
    let before = server.get_as(Some(&key), "/account").await.json;
    let r = server.post_as(Some(&key), "/sessions", Some(&json!({"context": {"id": id, "persist": true}}))).await;
    assert_eq!(r.status, 409, "{r}");
    assert_eq!(r.json["error"], "context cannot be opened", "{r}");
    assert!(r.json["detail"].as_str().is_some_and(|d| d.contains("context's state")), "{r}");
    let after = server.get_as(Some(&key), "/account").await.json;
    assert_eq!(
        (&after["creditMicros"], &after["reservedMicros"]),
        (&before["creditMicros"], &before["reservedMicros"]),
        "nothing reserved or charged"
    );
    let sessions = server.get_as(Some(&key), "/sessions").await.json;
    assert_eq!(sessions.as_array().map(Vec::len), Some(0), "no session made: {sessions}");
    assert_eq!(delete_context(&server, &key, &id).await.status, 204);
}
