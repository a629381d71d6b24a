//! Browser isolation: the attacks a session lessee (one ordinary lease, a
//! CDP client on the cdpUrl) could make on the host and on other tenants,
//! replayed through the real grid.
//!
//! Each test asserts the outcome (nothing read, nothing written, no
//! connection made) and, where the grid's CDP gate applies, that the command
//! was answered with a CDP error whose message starts with
//! `refused by the grid`. A test collects every finding before it fails, so
//! one run shows every way an attack got through.
//!
//! What the tests rely on (the isolation design of the session browsers):
//! - a session browser sees neither the server's data dir nor the host's
//!   /tmp, and its home is a private `/home/grid` with downloads in
//!   `/home/grid/downloads`;
//! - its only way out is the grid's egress proxy;
//! - no Chromium of the grid listens on TCP (DevTools over a pipe);
//! - a pooled capture browser serves one account at a time.
//!
//! Every test starts its own grid-server (and so its own browsers).
//!
//! Runs on: one store, because its subject is the host and the network, as a hostile lessee tries them.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use grid_tests::cdp::{refused, Answer, Cdp};
use grid_tests::host;
use grid_tests::random_secret;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::sessions::{lease_running, lease_running_as, release};
use grid_tests::target::{CountingListener, Target};
use grid_tests::wait::{wait_for, wait_until};

const POLICY: &str = "public-web-only/v1";
/// The session's own folders, as the browser sees them.
const SESSION_HOME: &str = "/home/grid";
const SESSION_DOWNLOADS: &str = "/home/grid/downloads";
/// Longest a page opened by a test may take to settle (it may well show an
/// error page instead: that is for the test to judge).
const SETTLE: Duration = Duration::from_secs(10);
/// How long a test waits after its last attempt before it looks at the
/// outcome, so that a late load, download or connection is seen.
const AFTERMATH: Duration = Duration::from_secs(3);
/// Capture items on a busy two-core machine.
const ITEMS_DONE: Duration = Duration::from_secs(180);

/// Everything that went wrong in one test, reported together.
struct Findings(Vec<String>);

impl Findings {
    fn new() -> Findings {
        Findings(Vec::new())
    }

    fn check(&mut self, r: Result<(), String>) {
        if let Err(e) = r {
            self.0.push(e);
        }
    }

    fn add(&mut self, finding: String) {
        self.0.push(finding);
    }

    /// Fails the test (with the server's log tail) when anything was found.
    fn finish(self, server: &GridServer, what: &str) {
        if !self.0.is_empty() {
            server.fail(&format!("{what}: {} finding(s):\n- {}", self.0.len(), self.0.join("\n- ")));
        }
    }
}

/// Sends a command; a connection problem fails the test.
/// A call the browser carried out (after the gate, possibly rewritten).
fn accepted(what: &str, answer: &Answer) -> Result<(), String> {
    match answer {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("{what}: refused, though the grid rewrites the folder: {e}")),
    }
}

async fn send(server: &GridServer, cdp: &mut Cdp, method: &str, params: Value, session: Option<&str>) -> Answer {
    cdp.send(method, params, session).await.unwrap_or_else(|e| server.fail(&e))
}

/// Evaluates in a page; an exception or a failed call reads as its text.
async fn eval_text(cdp: &mut Cdp, session: &str, expression: &str) -> String {
    match cdp.evaluate(session, expression).await {
        Ok(Value::String(s)) => s,
        Ok(v) => v.to_string(),
        Err(e) => format!("(evaluate failed: {e})"),
    }
}

/// Every page and frame of the browser, dumped (URL, HTML and the pierced
/// DOM) as a CDP client can read them.
async fn dump_all_pages(cdp: &mut Cdp) -> Vec<String> {
    let targets = cdp.call("Target.getTargets", json!({}), None).await.unwrap_or_else(|e| json!({"error": e}));
    let mut dumps = vec![];
    for t in targets["targetInfos"].as_array().cloned().unwrap_or_default() {
        if !matches!(t["type"].as_str(), Some("page" | "iframe")) {
            continue;
        }
        let Some(id) = t["targetId"].as_str() else { continue };
        match cdp.attach(id).await {
            Ok(session) => dumps.push(format!("{} {}", t["url"], cdp.page_dump(&session).await)),
            Err(e) => dumps.push(format!("{} (attach failed: {e})", t["url"])),
        }
    }
    dumps
}

/// A finding for every dump that shows `secret`.
fn secret_shown(findings: &mut Findings, how: &str, secret: &str, dumps: &[String]) {
    for d in dumps.iter().filter(|d| d.contains(secret)) {
        let start = d.find(secret).unwrap_or(0).saturating_sub(200);
        let excerpt: String = d[start..].chars().take(400).collect();
        findings.add(format!("{how}: the secret was read: …{excerpt}…"));
    }
}

/// A marker file with a random secret in the server's data dir; returns
/// (path, secret).
fn plant_marker(server: &GridServer, name: &str) -> (std::path::PathBuf, String) {
    let secret = random_secret(name);
    let path = server.data_dir().join(format!("{name}.txt"));
    std::fs::write(&path, format!("{secret}\n")).unwrap_or_else(|e| server.fail(&format!("write marker: {e}")));
    (path, secret)
}

// ----- 1. file: URLs -----

#[tokio::test]
async fn file_urls_are_refused_and_a_host_file_is_never_read() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let (marker, secret) = plant_marker(&server, "file-marker");
    let marker_url = format!("file://{}", marker.display());
    let db_url = format!("file://{}", server.db_path().display());
    let (_, mut cdp) = lease_running(&server, json!({"ttlMinutes": 5})).await;
    let mut f = Findings::new();
    // A file the browser cannot show is downloaded instead; keep it out of the host.
    send(&server, &mut cdp, "Browser.setDownloadBehavior", json!({"behavior": "deny"}), None).await.ok();
    let (_, page) = cdp.blank_page(None).await.unwrap_or_else(|e| server.fail(&e));

    // The forms the gate names: refused.
    let must_refuse = [
        ("Page.navigate", json!({"url": db_url}), true),
        ("Page.navigate", json!({"url": marker_url}), true),
        ("Page.navigate", json!({"url": format!("view-source:{marker_url}")}), true),
        ("Target.createTarget", json!({"url": "file:///etc/passwd"}), false),
        ("Target.createTarget", json!({"url": marker_url}), false),
        ("Target.createTarget", json!({"url": format!("view-source:{marker_url}")}), false),
    ];
    for (method, params, on_page) in must_refuse {
        let what = format!("{method} {params}");
        let answer = send(&server, &mut cdp, method, params, on_page.then_some(page.as_str())).await;
        f.check(refused(&what, &answer));
        if answer.is_ok() && on_page {
            cdp.settle(&page, SETTLE).await;
            secret_shown(&mut f, &what, &secret, &[cdp.page_dump(&page).await]);
        }
    }
    // Other spellings of the same file: refused or not, nothing is read.
    let path = marker.display().to_string();
    for url in [
        format!("FILE://{path}"),
        format!("file:{path}"),
        format!("file://localhost{path}"),
        format!(" file://{path}"),
        format!("file://{}", path.replacen('/', "//", 1)),
    ] {
        let (_, p) = cdp.blank_page(None).await.unwrap_or_else(|e| server.fail(&e));
        if send(&server, &mut cdp, "Page.navigate", json!({"url": url}), Some(&p)).await.is_ok() {
            cdp.settle(&p, SETTLE).await;
        }
        send(&server, &mut cdp, "Target.createTarget", json!({"url": url}), None).await.ok();
    }
    // DevTools' own resource loader (source maps), then the stream it opened.
    let frame = cdp.call("Page.getFrameTree", json!({}), Some(&page)).await.unwrap_or_else(|e| server.fail(&e));
    let params = json!({
        "frameId": frame["frameTree"]["frame"]["id"],
        "url": marker_url,
        "options": {"disableCache": true, "includeCredentials": false},
    });
    let loaded = send(&server, &mut cdp, "Network.loadNetworkResource", params, Some(&page)).await;
    let mut read = format!("{loaded:?}");
    if let Some(stream) = loaded.as_ref().ok().and_then(|r| r["resource"]["stream"].as_str()) {
        read.push_str(&format!("{:?}", send(&server, &mut cdp, "IO.read", json!({"handle": stream}), None).await));
    }
    secret_shown(&mut f, "Network.loadNetworkResource of file://… + IO.read", &secret, &[read]);
    // From inside pages (a blank one and one of a local target): fetch, an
    // iframe, window.open and a plain navigation.
    let (_, web) = cdp.open_page(&target.url("/page/file-probe")).await.unwrap_or_else(|e| server.fail(&e));
    for p in [page.clone(), web] {
        let u = serde_json::to_string(&marker_url).unwrap();
        let fetched = eval_text(&mut cdp, &p, &format!("fetch({u}).then(r => r.text(), e => 'error ' + e)")).await;
        secret_shown(&mut f, "fetch('file://…') from a page", &secret, &[fetched]);
        let xhr = eval_text(
            &mut cdp,
            &p,
            &format!(
                "new Promise(ok => {{ const x = new XMLHttpRequest(); x.onload = () => ok(x.responseText); \
                 x.onerror = () => ok('error'); try {{ x.open('GET', {u}); x.send(); }} catch (e) {{ ok('error ' + e); }} }})"
            ),
        )
        .await;
        secret_shown(&mut f, "XMLHttpRequest of file://… from a page", &secret, &[xhr]);
        eval_text(
            &mut cdp,
            &p,
            &format!(
                "(() => {{ const i = document.createElement('iframe'); i.src = {u}; document.body.appendChild(i); \
                 window.open({u}); return 'ok'; }})()"
            ),
        )
        .await;
    }
    eval_text(&mut cdp, &page, &format!("location.href = {}; 'ok'", serde_json::to_string(&marker_url).unwrap())).await;
    tokio::time::sleep(AFTERMATH).await;
    // Whatever any page or frame of the browser shows now.
    secret_shown(&mut f, "a page or frame of the session", &secret, &dump_all_pages(&mut cdp).await);
    f.finish(&server, "file: URLs");
}

// ----- 2. file inputs -----

/// Replaces the page's body with one fresh `<input type=file id=f>`.
const NEW_FILE_INPUT: &str = "(() => { document.body.innerHTML = '<input type=file id=f multiple>'; return 'ok'; })()";
/// What the page can read of the input's files: `name:contents` per file.
const READ_FILE_INPUT: &str = "(async () => { const out = []; for (const f of document.getElementById('f').files) { \
     try { out.push(f.name + ':' + await f.text()); } catch (e) { out.push(f.name + ': error ' + e); } } \
     return out.join('\\n'); })()";

/// How a lessee names the input to `DOM.setFileInputFiles`.
#[derive(Clone, Copy, Debug)]
enum InputRef {
    /// A remote object (`Runtime.evaluate` without returnByValue).
    Object,
    /// A DOM agent node id (`DOM.getDocument` + `DOM.querySelector`).
    Node,
    /// A backend node id (`DOM.describeNode`).
    BackendNode,
}

/// Puts a fresh file input on the page and calls `DOM.setFileInputFiles`
/// with `files`; returns the answer and what the page then reads.
async fn set_file_input(
    server: &GridServer,
    cdp: &mut Cdp,
    page: &str,
    how: InputRef,
    files: &[&str],
) -> (Answer, String) {
    eval_text(cdp, page, NEW_FILE_INPUT).await;
    let object = cdp
        .call("Runtime.evaluate", json!({"expression": "document.getElementById('f')"}), Some(page))
        .await
        .unwrap_or_else(|e| server.fail(&e));
    let object_id = object["result"]["objectId"].as_str().unwrap_or_else(|| server.fail(&format!("{object}")));
    let mut params = json!({"files": files});
    match how {
        InputRef::Object => params["objectId"] = json!(object_id),
        InputRef::Node => {
            let doc = cdp.call("DOM.getDocument", json!({}), Some(page)).await.unwrap_or_else(|e| server.fail(&e));
            let node = cdp
                .call("DOM.querySelector", json!({"nodeId": doc["root"]["nodeId"], "selector": "#f"}), Some(page))
                .await
                .unwrap_or_else(|e| server.fail(&e));
            params["nodeId"] = node["nodeId"].clone();
        }
        InputRef::BackendNode => {
            let node = cdp
                .call("DOM.describeNode", json!({"objectId": object_id}), Some(page))
                .await
                .unwrap_or_else(|e| server.fail(&e));
            params["backendNodeId"] = node["node"]["backendNodeId"].clone();
        }
    }
    let answer = send(server, cdp, "DOM.setFileInputFiles", params, Some(page)).await;
    let read = eval_text(cdp, page, READ_FILE_INPUT).await;
    (answer, read)
}

#[tokio::test]
async fn a_file_input_given_a_host_path_yields_nothing() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let (marker, secret) = plant_marker(&server, "input-marker");
    let path = marker.display().to_string();
    let (_, mut cdp) = lease_running(&server, json!({"ttlMinutes": 5})).await;
    let (_, page) = cdp.open_page(&target.url("/page/file-input")).await.unwrap_or_else(|e| server.fail(&e));
    let mut f = Findings::new();

    // The host path itself, however the input is named: refused.
    for how in [InputRef::Object, InputRef::Node, InputRef::BackendNode] {
        let (answer, read) = set_file_input(&server, &mut cdp, &page, how, &[&path]).await;
        f.check(refused(&format!("DOM.setFileInputFiles by {how:?} with {path}"), &answer));
        secret_shown(&mut f, &format!("DOM.setFileInputFiles by {how:?} + FileReader"), &secret, &[read]);
    }
    // Paths that start inside the session's home but lead out of it: refused
    // or not, the file is not there to read.
    let escapes = [
        format!("{SESSION_HOME}/../..{path}"),
        format!("{SESSION_DOWNLOADS}/../../..{path}"),
        format!("{SESSION_HOME}/./../../{}", path.trim_start_matches('/')),
    ];
    for escape in &escapes {
        let (_, read) = set_file_input(&server, &mut cdp, &page, InputRef::Object, &[escape.as_str()]).await;
        secret_shown(&mut f, &format!("DOM.setFileInputFiles with {escape} + FileReader"), &secret, &[read]);
    }
    // Several files at once, one of them the host's.
    let (answer, read) =
        set_file_input(&server, &mut cdp, &page, InputRef::Object, &[&format!("{SESSION_HOME}/x"), &path]).await;
    f.check(refused("DOM.setFileInputFiles with a session path and a host path", &answer));
    secret_shown(&mut f, "DOM.setFileInputFiles with two files + FileReader", &secret, &[read]);
    f.finish(&server, "file inputs");
}

// ----- 3. downloads -----

/// A grid whose browsers write to the host creates the session folders
/// there (Chromium makes a download path's directories, even on the way to
/// `/home/grid/downloads/../..`); this removes them again when they are
/// empty and were not there before the test.
struct HostHomeCleanup {
    existed: bool,
}

impl HostHomeCleanup {
    fn new() -> HostHomeCleanup {
        HostHomeCleanup { existed: Path::new(SESSION_HOME).exists() }
    }
}

impl Drop for HostHomeCleanup {
    fn drop(&mut self) {
        if !self.existed {
            let _ = std::fs::remove_dir(SESSION_DOWNLOADS);
            let _ = std::fs::remove_dir(SESSION_HOME);
        }
    }
}

/// Every file below `dir` (recursively).
fn files_below(dir: &Path) -> Vec<String> {
    let mut found = vec![];
    let Ok(entries) = std::fs::read_dir(dir) else { return found };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            found.extend(files_below(&p));
        } else {
            found.push(p.display().to_string());
        }
    }
    found
}

/// Waits until the target served `path` at least once (bounded), then a
/// moment longer for the browser to finish writing whatever it got.
async fn served_then_settled(target: &Target, path: &str) -> bool {
    // Not a wait that fails: a page never asked for is a finding the
    // caller reports with the others.
    let deadline = Instant::now() + Duration::from_secs(30);
    while target.hits(path) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(AFTERMATH).await;
    target.hits(path) > 0
}

#[tokio::test]
async fn a_download_outside_the_session_folder_stays_in_the_session_and_writes_nothing_on_the_host() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let host_dir = tempfile::Builder::new().prefix("grid-download-").tempdir().expect("tempdir");
    let _cleanup = HostHomeCleanup::new();
    let dir = host_dir.path().display().to_string();
    let (_, mut cdp) = lease_running(&server, json!({"ttlMinutes": 5})).await;
    let mut f = Findings::new();

    let browser_calls = [
        json!({"behavior": "allow", "downloadPath": dir, "eventsEnabled": true}),
        json!({"behavior": "allowAndName", "downloadPath": dir}),
        json!({"behavior": "allow", "downloadPath": format!("{dir}/../{}", host_dir.path().file_name().unwrap().to_string_lossy())}),
    ];
    // The gate rewrites a folder outside the session's to the session's own
    // (CDP clients set one on connect), so these are accepted, not refused.
    for params in browser_calls {
        let answer = send(&server, &mut cdp, "Browser.setDownloadBehavior", params.clone(), None).await;
        f.check(accepted(&format!("Browser.setDownloadBehavior {params}"), &answer));
    }
    // The same for a context of the lessee's own.
    let context = cdp.call("Target.createBrowserContext", json!({}), None).await.unwrap_or_else(|e| server.fail(&e));
    let context_id = context["browserContextId"].as_str().unwrap_or_else(|| server.fail(&format!("{context}")));
    let params = json!({"behavior": "allow", "downloadPath": dir, "browserContextId": context_id});
    let answer = send(&server, &mut cdp, "Browser.setDownloadBehavior", params.clone(), None).await;
    f.check(accepted(&format!("Browser.setDownloadBehavior {params}"), &answer));
    let (_, page) = cdp.blank_page(None).await.unwrap_or_else(|e| server.fail(&e));
    let params = json!({"behavior": "allow", "downloadPath": dir});
    let answer = send(&server, &mut cdp, "Page.setDownloadBehavior", params.clone(), Some(&page)).await;
    f.check(accepted(&format!("Page.setDownloadBehavior {params}"), &answer));
    // A path that starts in the session folder and leads out to the host dir.
    let escape = format!("{SESSION_DOWNLOADS}/../../..{dir}");
    send(&server, &mut cdp, "Browser.setDownloadBehavior", json!({"behavior": "allow", "downloadPath": escape}), None)
        .await
        .ok();

    // Once more with progress events, so the download below is seen.
    let params = json!({"behavior": "allow", "downloadPath": dir, "eventsEnabled": true});
    let answer = send(&server, &mut cdp, "Browser.setDownloadBehavior", params.clone(), None).await;
    f.check(accepted(&format!("Browser.setDownloadBehavior {params}"), &answer));

    // Download anyway, in the default context and in the lessee's own.
    let (_, in_context) = cdp.blank_page(Some(context_id)).await.unwrap_or_else(|e| server.fail(&e));
    for (p, name) in [(&page, "default.bin"), (&in_context, "context.bin")] {
        let url = target.url(&format!("/download/{name}"));
        send(&server, &mut cdp, "Page.navigate", json!({"url": url}), Some(p)).await.ok();
        if !served_then_settled(&target, &format!("/download/{name}")).await {
            f.add(format!("the browser never asked for {url}: the attempt proves nothing"));
        }
    }
    // The download happened, inside the session: its progress events (asked
    // for with the host dir above) report it completed.
    let completed =
        cdp.wait_event("Browser.downloadProgress", Duration::from_secs(15), |p| p["state"] == "completed").await;
    if completed.is_none() {
        f.add("no download completed: the rewrite to the session's folder proves nothing".to_string());
    }
    let written = files_below(host_dir.path());
    if !written.is_empty() {
        f.add(format!("the session wrote into the host dir {dir}: {written:?}"));
    }
    f.finish(&server, "downloads");
}

// ----- 4. network policy -----

/// Tries to reach `listener` from page `p`: a navigation, a fetch and a
/// WebSocket, each to 127.0.0.1, localhost and 0.0.0.0.
async fn reach_for(cdp: &mut Cdp, p: &str, listener: &CountingListener) {
    let port = listener.port();
    for host in ["127.0.0.1", "localhost", "0.0.0.0"] {
        let base = format!("http://{host}:{port}");
        let js = format!(
            "Promise.all([\
               fetch('{base}/fetch', {{mode: 'no-cors'}}).then(() => 'fetched', e => 'fetch error ' + e),\
               new Promise(ok => {{ try {{ const w = new WebSocket('ws://{host}:{port}/ws'); \
                 w.onopen = () => ok('ws open'); w.onerror = () => ok('ws error'); setTimeout(() => ok('ws timeout'), 3000); \
               }} catch (e) {{ ok('ws throws ' + e); }} }}),\
             ]).then(r => r.join(', '))"
        );
        eval_text(cdp, p, &js).await;
        cdp.send("Page.navigate", json!({"url": format!("{base}/navigate")}), Some(p)).await.ok();
        cdp.settle(p, SETTLE).await;
    }
}

#[tokio::test]
async fn a_policy_session_cannot_reach_a_loopback_listener_even_with_a_direct_context() {
    let listener = CountingListener::start();
    // The harness' --allow-private-networks (for captures) must not weaken
    // the policy; no range is treated as public.
    let server = GridServer::start(ServerOptions::default());
    let (_, mut cdp) = lease_running(&server, json!({"network": POLICY, "ttlMinutes": 5})).await;
    let mut f = Findings::new();

    for params in [
        json!({"proxyServer": "direct://"}),
        json!({"proxyServer": "direct://", "proxyBypassList": "*"}),
        json!({"proxyBypassList": "<-loopback>"}),
        json!({"proxyServer": format!("http://127.0.0.1:{}", listener.port())}),
    ] {
        let what = format!("Target.createBrowserContext {params}");
        let answer = send(&server, &mut cdp, "Target.createBrowserContext", params, None).await;
        f.check(refused(&what, &answer));
        if let Ok(ctx) = answer {
            let id = ctx["browserContextId"].as_str().unwrap_or_default().to_string();
            match cdp.blank_page(Some(&id)).await {
                Ok((_, p)) => reach_for(&mut cdp, &p, &listener).await,
                Err(e) => f.add(format!("{what}: a page in it: {e}")),
            }
        }
    }
    // A plain context of the lessee's own, and the default context.
    let ctx = cdp.call("Target.createBrowserContext", json!({}), None).await.unwrap_or_else(|e| server.fail(&e));
    let (_, in_context) = cdp
        .blank_page(ctx["browserContextId"].as_str())
        .await
        .unwrap_or_else(|e| server.fail(&format!("a page in a plain context: {e}")));
    reach_for(&mut cdp, &in_context, &listener).await;
    let (_, in_default) = cdp.blank_page(None).await.unwrap_or_else(|e| server.fail(&e));
    reach_for(&mut cdp, &in_default, &listener).await;
    // A new page opened straight at the listener.
    let url = format!("http://127.0.0.1:{}/created", listener.port());
    send(&server, &mut cdp, "Target.createTarget", json!({"url": url}), None).await.ok();

    tokio::time::sleep(AFTERMATH).await;
    let reached = listener.count();
    if reached != 0 {
        f.add(format!("the loopback listener accepted {reached} connection(s) from a {POLICY} session"));
    }
    f.finish(&server, "network policy");
}

/// The control for the test above: the same kind of browser, without a
/// policy, on a grid that allows private networks, does load a local page,
/// so "zero connections" there is the policy's doing.
#[tokio::test]
async fn control_a_session_without_policy_loads_a_local_page() {
    let target = Target::start();
    let listener = CountingListener::start();
    let server = GridServer::start(ServerOptions::default());
    let (lease, mut cdp) = lease_running(&server, json!({"ttlMinutes": 5})).await;
    let (_, page) = cdp.open_page(&target.url("/page/control")).await.unwrap_or_else(|e| server.fail(&e));
    let title = cdp.evaluate(&page, "document.title").await.unwrap_or_else(|e| server.fail(&e));
    assert_eq!(title, "page control");
    assert!(target.hits("/page/control") >= 1);
    let (_, p) = cdp.blank_page(None).await.unwrap_or_else(|e| server.fail(&e));
    send(
        &server,
        &mut cdp,
        "Page.navigate",
        json!({"url": format!("http://127.0.0.1:{}/", listener.port())}),
        Some(&p),
    )
    .await
    .unwrap_or_else(|e| server.fail(&format!("navigating to the counting listener: {e}")));
    wait_until("a session without policy reaching the counting listener", SETTLE, || match listener.count() {
        0 => Err("no connection".to_string()),
        _ => Ok(()),
    })
    .await;
    release(&server, &lease.id).await;
}

// ----- 5. other browsers' DevTools -----

/// In page `p`: navigates to `http://127.0.0.1:{port}/json/version`, reads
/// it, fetches `/json/list` from there (same origin) and tries a DevTools
/// WebSocket; returns everything it read.
async fn probe_devtools_port(cdp: &mut Cdp, p: &str, port: u16) -> String {
    let base = format!("http://127.0.0.1:{port}");
    let mut seen = String::new();
    if let Err(e) = cdp.send("Page.navigate", json!({"url": format!("{base}/json/version")}), Some(p)).await {
        return format!("navigate: {e}");
    }
    let state = cdp.settle(p, SETTLE).await;
    seen.push_str(&format!("[{state}] "));
    let version = eval_text(cdp, p, "document.body ? document.body.innerText : ''").await;
    seen.push_str(&version);
    let ws = serde_json::from_str::<Value>(&version)
        .ok()
        .and_then(|v| v["webSocketDebuggerUrl"].as_str().map(str::to_string))
        .unwrap_or_else(|| format!("ws://127.0.0.1:{port}/devtools/browser"));
    let js = format!(
        "Promise.all([\
           fetch('{base}/json/list').then(r => r.text(), e => 'fetch error ' + e),\
           new Promise(ok => {{ let w; try {{ w = new WebSocket({ws}); }} catch (e) {{ ok('ws throws ' + e); return; }}\
             const t = setTimeout(() => ok('ws timeout'), 3000);\
             w.onerror = () => {{ clearTimeout(t); ok('ws error'); }};\
             w.onopen = () => w.send(JSON.stringify({{id: 1, method: 'Target.getTargets'}}));\
             w.onmessage = m => {{ clearTimeout(t); ok('ws message ' + m.data); w.close(); }};\
           }}),\
         ]).then(r => r.join('\\n'))",
        ws = serde_json::to_string(&ws).unwrap()
    );
    seen.push('\n');
    seen.push_str(&eval_text(cdp, p, &js).await);
    seen
}

/// Every `"webSocketDebuggerUrl": "…"` value in `text`.
fn debugger_urls(text: &str) -> Vec<String> {
    let key = "\"webSocketDebuggerUrl\"";
    let mut found = vec![];
    let mut rest = text;
    while let Some(i) = rest.find(key) {
        rest = &rest[i + key.len()..];
        let value = rest.trim_start().trim_start_matches(':').trim_start();
        let value = value.strip_prefix('"').unwrap_or(value);
        found.push(value.split('"').next().unwrap_or("").to_string());
    }
    found
}

#[tokio::test]
async fn another_browsers_devtools_are_unreachable_from_a_session() {
    let target = Target::start();
    let server =
        GridServer::start(ServerOptions { extra_args: vec!["--browsers".into(), "1".into()], ..Default::default() });
    let server_pid = server.pid().expect("server pid") as i32;
    let (_, victim_key) = server.create_account("victim", 10_000_000);
    let mut f = Findings::new();

    // The victim: a capture item held open, and session B on a page whose
    // URL carries a secret.
    let capture_secret = random_secret("capture");
    let capture_path = format!("/hold/{capture_secret}");
    let batch = json!({
        "urls": [target.url(&format!("{capture_path}?ms=60000"))],
        "script": "capture",
        "params": {"timeoutMs": 120000},
    });
    server.submit_as(&victim_key, &batch).await;
    let secret = random_secret("session-b");
    let (_, mut cdp_b) = lease_running_as(&server, &victim_key, json!({"ttlMinutes": 5})).await;
    cdp_b.open_page(&target.url(&format!("/page/b?secret={secret}"))).await.unwrap_or_else(|e| server.fail(&e));
    // The attacker: session A.
    let (lease_a, mut cdp) = lease_running(&server, json!({"ttlMinutes": 5})).await;
    wait_until("the capture browser asking for its page", ITEMS_DONE, || match target.hits(&capture_path) {
        0 => Err("no request".to_string()),
        _ => Ok(()),
    })
    .await;
    let secrets = [secret.as_str(), capture_secret.as_str()];

    // (a) A's own targets.
    let targets = cdp.call("Target.getTargets", json!({}), None).await.unwrap_or_else(|e| server.fail(&e));
    for s in secrets {
        if targets.to_string().contains(s) {
            f.add(format!("Target.getTargets of session A lists another tenant's page: {targets}"));
        }
    }

    // (b) Every port on the host's loopback that the grid's processes
    // listen on, probed from a page of A.
    let ports = host::ports_of_tree(server_pid);
    let ours = format!("ws://127.0.0.1:{}/cdp/{}/", server.port(), lease_a.id);
    let (_, page) = cdp.blank_page(None).await.unwrap_or_else(|e| server.fail(&e));
    let probing = Instant::now();
    for port in &ports {
        let seen = tokio::time::timeout(Duration::from_secs(40), probe_devtools_port(&mut cdp, &page, *port))
            .await
            .unwrap_or_else(|_| "(probe took over 40 s)".into());
        for s in secrets {
            if seen.contains(s) {
                f.add(format!("port {port} answered session A with another tenant's URL: {seen}"));
            }
        }
        for url in debugger_urls(&seen).into_iter().filter(|u| !u.starts_with(&ours)) {
            f.add(format!("port {port} handed session A a DevTools endpoint not behind its cdpUrl: {url}"));
        }
    }
    eprintln!("probed {} port(s) {ports:?} in {:?}", ports.len(), probing.elapsed());

    // (c) No Chromium of the grid has a DevTools port or any listening socket.
    let chromiums: Vec<i32> = host::descendants(server_pid).into_iter().filter(|p| host::is_chromium(*p)).collect();
    if chromiums.is_empty() {
        f.add("no Chromium process found below the server: nothing to check".into());
    }
    for pid in &chromiums {
        let args = host::cmdline(*pid);
        if let Some(flag) = args.iter().find(|a| a.starts_with("--remote-debugging-port")) {
            f.add(format!("Chromium {pid} runs with {flag}"));
        }
        match host::listeners_held_by(*pid) {
            Ok(held) if held.is_empty() => {}
            Ok(held) => f.add(format!("Chromium {pid} ({}) listens on TCP: {held:?}", host::comm(*pid))),
            // A renderer or helper that exited meanwhile has nothing to show.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // A browser under another uid, when the tests do not run as root:
            // its command line (above) and the probes of (b) still apply.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                eprintln!("note: the sockets of Chromium {pid} cannot be read by this user ({e}); not checked")
            }
            Err(e) => f.add(format!("cannot read the sockets of Chromium {pid}: {e}")),
        }
    }
    f.finish(&server, "other browsers' DevTools");
}

// ----- 6. nothing survives a session -----

/// The cookie and localStorage of the page's origin, as the page sees them.
const READ_STORAGE: &str = "JSON.stringify([document.cookie, localStorage.getItem('grid_keep')])";

#[tokio::test]
async fn nothing_survives_the_session() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions {
        extra_args: vec!["--max-sessions".into(), "1".into()],
        ..Default::default()
    });
    let secret = random_secret("keep");
    // Its own random name: a file name shown in an error must not read as the secret.
    let name = format!("{}.txt", random_secret("download"));
    let in_session = format!("{SESSION_DOWNLOADS}/{name}");
    let _cleanup = HostHomeCleanup::new();
    let origin_page = target.url("/page/keep");

    let (lease, mut cdp) = lease_running(&server, json!({"ttlMinutes": 5})).await;
    let (_, page) = cdp.open_page(&origin_page).await.unwrap_or_else(|e| server.fail(&e));
    let set = format!(
        "document.cookie = 'grid_keep={secret}; max-age=86400; path=/'; localStorage.setItem('grid_keep', '{secret}'); {READ_STORAGE}"
    );
    let stored = eval_text(&mut cdp, &page, &set).await;
    assert!(stored.matches(&secret).count() == 2, "session A could not set its cookie and localStorage: {stored}");
    // A download into the session's own folder: allowed, and readable back.
    let params = json!({"behavior": "allow", "downloadPath": SESSION_DOWNLOADS, "eventsEnabled": true});
    cdp.call("Browser.setDownloadBehavior", params, None)
        .await
        .unwrap_or_else(|e| server.fail(&format!("a download into {SESSION_DOWNLOADS} must be allowed: {e}")));
    let url = target.url(&format!("/download/{name}?body={secret}"));
    cdp.call("Page.navigate", json!({"url": url}), Some(&page)).await.unwrap_or_else(|e| server.fail(&e));
    let done = cdp
        .wait_event("Browser.downloadProgress", Duration::from_secs(30), |p| {
            matches!(p["state"].as_str(), Some("completed" | "canceled"))
        })
        .await;
    match done {
        Some(e) if e["params"]["state"] == "completed" => {}
        other => server.fail(&format!("the download into {SESSION_DOWNLOADS} did not complete: {other:?}")),
    }
    let (_, page) = cdp.open_page(&target.url("/page/reader")).await.unwrap_or_else(|e| server.fail(&e));
    let (answer, read) = set_file_input(&server, &mut cdp, &page, InputRef::Object, &[&in_session]).await;
    if answer.is_err() || !read.contains(&secret) {
        server.fail(&format!("session A cannot read back its own download {in_session}: {answer:?} {read}"));
    }
    release(&server, &lease.id).await;

    // The next lease (same profile, the only slot).
    let (lease, mut cdp) = lease_running(&server, json!({"ttlMinutes": 5})).await;
    let mut f = Findings::new();
    let (_, page) = cdp.open_page(&origin_page).await.unwrap_or_else(|e| server.fail(&e));
    let storage = eval_text(&mut cdp, &page, READ_STORAGE).await;
    secret_shown(&mut f, "the next session's cookie or localStorage", &secret, &[storage]);
    let (_, read) = set_file_input(&server, &mut cdp, &page, InputRef::Object, &[&in_session]).await;
    secret_shown(&mut f, &format!("the next session reading {in_session}"), &secret, &[read]);
    release(&server, &lease.id).await;

    // A grid that kept session downloads on the host leaves them there
    // (the test removes what it made).
    let on_host = Path::new(&in_session);
    if on_host.exists() {
        f.add(format!("the session's download is on the host at {in_session}"));
        let _ = std::fs::remove_file(on_host);
    }
    f.finish(&server, "leftovers of a session");
}

// ----- 7. capture browsers and accounts -----

#[tokio::test]
async fn a_capture_browser_serves_one_account_at_a_time() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions {
        extra_args: vec!["--browsers".into(), "2".into(), "--pages-per-browser".into(), "4".into()],
        ..Default::default()
    });
    let (_, other_key) = server.create_account("other", 10_000_000);
    let urls = |who: &str| -> Vec<String> { (0..3).map(|i| target.url(&format!("/hold/{who}{i}?ms=8000"))).collect() };
    let body = |who: &str| json!({"urls": urls(who), "script": "capture", "params": {"timeoutMs": 60000}});
    // Submitted together, so both accounts' items want the pool at once.
    let (body_a, body_b) = (body("a"), body("b"));
    let (a, b) = tokio::join!(server.submit_as(server.api_key(), &body_a), server.submit_as(&other_key, &body_b));
    let (done_a, done_b) = tokio::join!(
        server.wait_batch_done_as(server.api_key(), &a, ITEMS_DONE),
        server.wait_batch_done_as(&other_key, &b, ITEMS_DONE)
    );

    // Which browser instance ran each page (meta `browser.instance`), and
    // when the target held that page's request open.
    let mut instance_of: HashMap<String, String> = HashMap::new();
    for (key, batch) in [(server.api_key().to_string(), done_a), (other_key.clone(), done_b)] {
        for job in batch["jobs"].as_array().cloned().unwrap_or_default() {
            let id = job["jobId"].as_str().unwrap_or_default().to_string();
            let item = server.get_as(Some(&key), &format!("/jobs/{id}")).await.json;
            if item["state"] != "completed" {
                server.fail(&format!("capture item {id} did not complete: {item}"));
            }
            let r = server.get_as(Some(&key), &format!("/artifacts/{id}/meta")).await;
            let url = r.json["url"].as_str().unwrap_or_else(|| server.fail(&format!("meta of {id}: {r}"))).to_string();
            let meta: Value = serde_json::from_str(&server.download(&url).await.text)
                .unwrap_or_else(|e| server.fail(&format!("meta of {id} is not JSON: {e}")));
            let instance = meta["browser"]["instance"]
                .as_str()
                .unwrap_or_else(|| server.fail(&format!("meta no longer names the browser instance: {meta}")));
            let tag = meta["url"].as_str().and_then(|u| u.split("/hold/").nth(1)).and_then(|t| t.split('?').next());
            let tag = tag.unwrap_or_else(|| server.fail(&format!("meta url: {meta}")));
            instance_of.insert(tag.to_string(), instance.to_string());
        }
    }
    let holds = target.holds();
    let mut f = Findings::new();
    for x in holds.iter().filter(|h| h.tag.starts_with('a')) {
        for y in holds.iter().filter(|h| h.tag.starts_with('b')) {
            if let (Some(ix), Some(iy)) = (instance_of.get(&x.tag), instance_of.get(&y.tag)) {
                if ix == iy && x.overlaps(y) {
                    f.add(format!("browser {ix} had pages of both accounts open at once: {} and {}", x.tag, y.tag));
                }
            }
        }
    }
    f.finish(&server, "capture browsers shared across accounts");
}

/// Every path below `dir`, relative to it.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = vec![];
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            out.push(path.strip_prefix(dir).unwrap_or(&path).display().to_string());
            if path.is_dir() {
                todo.push(path);
            }
        }
    }
    out
}

#[tokio::test]
async fn a_crashed_session_leaves_no_profile_on_the_host() {
    let server = GridServer::start(ServerOptions::default());
    // A leftover of older versions, which kept profiles under the data dir.
    let legacy = server.data_dir().join("run/session-old/Default");
    std::fs::create_dir_all(&legacy).expect("legacy profile dir");
    let mut server = server;
    server.restart();
    assert!(!server.data_dir().join("run").exists(), "the old profile folders are not removed on start");

    let (lease, mut cdp) = lease_running(&server, json!({"ttlMinutes": 5})).await;
    // The browser writes its profile (cookies, storage) while it runs.
    cdp.call(
        "Storage.setCookies",
        json!({"cookies": [{"name": "k", "value": "v", "url": "http://example.test/"}]}),
        None,
    )
    .await
    .unwrap_or_else(|e| server.fail(&e));
    let browsers = host::browser_mains(server.pid().expect("server pid") as i32);
    assert_eq!(browsers.len(), 1, "one session browser below the server: {browsers:?}");
    // SAFETY: kill(2) on the session's browser, found below the server.
    unsafe {
        libc::kill(browsers[0], libc::SIGKILL);
    }
    wait_for("the session ended as lost", Duration::from_secs(30), || async {
        let list = server.get("/sessions").await.json;
        match list.as_array().is_some_and(|l| l.iter().any(|s| s["sessionId"] == lease.id)) {
            true => Err(list.to_string()),
            false => Ok(()),
        }
    })
    .await;
    // Its download folder stays for the grace (docs/sessions.md), with
    // nothing in it: the profile never was.
    let downloads = server.data_dir().join("session-downloads").join(&lease.id).join("files");
    assert!(tree(&downloads).is_empty(), "the crashed session left files in its download folder");
    let left: Vec<String> = tree(server.data_dir())
        .into_iter()
        .filter(|p| !p.starts_with("grid.db") && !p.starts_with("artifacts") && !p.starts_with("logs"))
        .filter(|p| !p.starts_with("session-downloads"))
        // The grid's own master key (docs/security.md, Secrets at rest).
        .filter(|p| p.as_str() != "vault.key")
        .collect();
    assert!(left.is_empty(), "the crashed session left files in the data dir: {left:?}");
}
