//! GET /openapi.json: the document is served without a credential and names
//! the grid's own address; every operation it describes is a route the
//! server answers and the server answers no method it does not describe;
//! and Schemathesis (PyPI package `schemathesis`, installed by
//! scripts/test.sh), driven by the live document against the live server,
//! finds no server error and no answer that contradicts the document.
//!
//! Runs on: one store, because its subject is the OpenAPI document and the answers' shapes.

use std::process::Command;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use grid_core::routes::{Access, Route};
use grid_tests::bins::workspace_root;
use grid_tests::http::{assert_error, Resp};
use grid_tests::server::{GridServer, ServerOptions, Tls};
use grid_tests::sessions;
use grid_tests::wait::wait_for;

const ACCEPT_BOTH: &str = "application/json, text/event-stream";

async fn document(server: &GridServer) -> Value {
    let r = server.get_as(None, "/openapi.json").await;
    assert_eq!(r.status, 200, "{r}");
    assert!(r.header("content-type").is_some_and(|t| t.starts_with("application/json")), "{r}");
    r.json
}

/// Every (method, path template) the document describes.
fn operations(doc: &Value) -> Vec<(String, String)> {
    let mut ops = vec![];
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            ops.push((method.to_ascii_uppercase(), path.clone()));
        }
    }
    ops
}

/// A path of `template` with each parameter filled in.
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(|s| match s {
            "{kind}" => "meta",
            s if s.starts_with('{') => "x1",
            s => s,
        })
        .collect::<Vec<_>>()
        .join("/")
}

async fn send(server: &GridServer, method: &str, path: &str) -> Resp {
    send_with(server, method, path, None).await
}

/// `send`, with the nodes' credential (`x-grid-node-credential`) when given.
async fn send_with(server: &GridServer, method: &str, path: &str, node_credential: Option<&str>) -> Resp {
    let method = Method::from_bytes(method.as_bytes()).expect("method");
    let url = format!("{}{path}", server.base_url());
    let mut req = server.http().request(method.clone(), &url).header("x-api-key", server.api_key());
    if let Some(c) = node_credential {
        req = req.header("x-grid-node-credential", c);
    }
    if path == "/mcp" {
        req = req.header("accept", ACCEPT_BOTH);
    }
    if method == Method::POST || method == Method::PUT {
        let body = if path == "/mcp" { json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}) } else { json!({}) };
        req = req.json(&body);
    }
    Resp::read(req).await.unwrap_or_else(|e| server.fail(&format!("{method} {path}: {e}")))
}

#[tokio::test]
async fn the_document_is_served_without_credential_and_names_the_grid() {
    let server = GridServer::start(ServerOptions::default());
    let doc = document(&server).await;
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["servers"], json!([{"url": server.base_url()}]));
    assert_eq!(
        doc["components"]["securitySchemes"]["apiKey"],
        json!({
            "type": "apiKey", "in": "header", "name": "x-api-key", "description": "An API key (`grid_...`)."
        })
    );
    assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
    // The contract's endpoints are all there, with their success answers.
    for (method, path, status) in [
        ("post", "/batches", "201"),
        ("get", "/batches/{batchId}", "200"),
        ("post", "/jobs", "202"),
        ("get", "/jobs", "200"),
        ("get", "/jobs/{jobId}", "200"),
        ("post", "/jobs/{jobId}/retry", "200"),
        ("post", "/jobs/{jobId}/cancel", "200"),
        ("get", "/jobs/{jobId}/artifacts", "200"),
        ("get", "/jobs/{jobId}/logs", "200"),
        ("get", "/artifacts/{jobId}/{kind}", "200"),
        ("post", "/sessions", "201"),
        ("get", "/sessions", "200"),
        ("delete", "/sessions/{sessionId}", "204"),
        ("get", "/sessions/{sessionId}/downloads", "200"),
        ("get", "/downloads/sessions/{sessionId}/{name}", "200"),
        ("post", "/mcp", "200"),
        ("get", "/.well-known/oauth-protected-resource", "200"),
        ("get", "/.well-known/oauth-protected-resource/mcp", "200"),
        ("get", "/grid", "200"),
        ("get", "/grid/queue-depth", "200"),
        ("get", "/healthz", "200"),
        ("get", "/account", "200"),
        ("get", "/openapi.json", "200"),
    ] {
        assert!(doc["paths"][path][method]["responses"][status].is_object(), "{method} {path} {status} missing");
    }
}

/// The document is valid OpenAPI 3.1 (and its schemas valid JSON Schema
/// 2020-12), as openapi-spec-validator (PyPI, installed by scripts/test.sh)
/// reads it.
#[tokio::test]
async fn the_document_is_valid_openapi_3_1() {
    let server = GridServer::start(ServerOptions::default());
    let doc = document(&server).await;
    let script = "import json, sys\n\
                  from openapi_spec_validator import validate\n\
                  from openapi_spec_validator.versions import consts, get_spec_version\n\
                  spec = json.load(sys.stdin)\n\
                  assert get_spec_version(spec) == consts.OPENAPIV31, get_spec_version(spec)\n\
                  validate(spec)\n\
                  print('valid')\n";
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| server.fail(&format!("python3 did not start: {e}")));
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(doc.to_string().as_bytes()).expect("write the document");
    }
    let out = child.wait_with_output().expect("python3");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && stdout.trim() == "valid",
        "openapi-spec-validator refused the document (is PyPI package openapi-spec-validator installed? scripts/test.sh installs it):\n{stdout}\n{stderr}"
    );
    // The validator is not vacuous: a document it must refuse is refused.
    let mut broken = doc.clone();
    broken["paths"]["/healthz"]["get"]["responses"] = json!({"200": {"content": {}}});
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3");
    {
        use std::io::Write;
        child.stdin.take().expect("stdin").write_all(broken.to_string().as_bytes()).expect("write");
    }
    assert!(!child.wait().expect("python3").success(), "a response without description passed the validator");
}

#[tokio::test]
async fn over_https_the_document_names_the_https_address() {
    let server = GridServer::start(ServerOptions { tls: Tls::SelfSigned, ..Default::default() });
    assert!(server.base_url().starts_with("https://"), "{}", server.base_url());
    let doc = document(&server).await;
    assert_eq!(doc["servers"][0]["url"], server.base_url());
}

/// The router and the document are one route table: each documented
/// operation is answered by its route (never the router's own 404 or 405),
/// any other method on a documented path is 405 with `Allow` naming exactly
/// the documented methods, and a path the document lacks is 404. The one
/// exception is the nodes' own routes (`/internal/...`, docs/scale-out.md):
/// left out of the document, and still answered with the nodes' credential.
#[tokio::test]
async fn every_documented_operation_is_routed_and_nothing_else_is() {
    let server = GridServer::start(ServerOptions {
        extra_args: vec!["--max-sessions".into(), "0".into()],
        ..Default::default()
    });
    let doc = document(&server).await;
    let ops = operations(&doc);
    assert!(ops.len() >= 30, "{ops:?}");
    for (method, template) in &ops {
        let path = concrete(template);
        let r = send(&server, method, &path).await;
        let routers_own = (r.status == 404 && r.error() == "not found") || r.status == 405;
        assert!(!routers_own, "{method} {template} (as {path}) is documented but not routed: {r}");
        let documented = &doc["paths"][template][method.to_ascii_lowercase()]["responses"];
        assert!(
            documented.get(r.status.to_string()).is_some(),
            "{method} {path}: status {} is not documented: {r}",
            r.status
        );
    }
    for (template, item) in doc["paths"].as_object().unwrap() {
        let mut documented: Vec<String> = item.as_object().unwrap().keys().map(|m| m.to_ascii_uppercase()).collect();
        documented.sort();
        let path = concrete(template);
        let r = send(&server, "PATCH", &path).await;
        assert_eq!(r.status, 405, "PATCH {path}: {r}");
        let mut allow: Vec<String> =
            r.header("allow").unwrap_or_default().split(',').map(|m| m.trim().to_string()).collect();
        allow.sort();
        assert_eq!(allow, documented, "PATCH {path}: Allow does not name the documented methods: {r}");
    }
    for path in
        ["/nope", "/jobs/x1/nope", "/grid/nope", "/batches/x1/x2", "/cdp/x1", "/cdp/x1/x2/json/nope", "/metrics"]
    {
        assert_error(&send(&server, "GET", path).await, 404, "not found");
    }
    // The nodes' routes, from the route table the router resolves through:
    // none is in the document, and each answers only the credential the
    // nodes share (kept in the store); an API key gets the router's 404.
    let internal: Vec<Route> = Route::ALL.into_iter().filter(|r| r.access() == Access::Node).collect();
    assert!(internal.len() >= 2, "{internal:?}");
    assert!(
        doc["paths"].as_object().unwrap().keys().all(|p| !p.starts_with("/internal")),
        "an /internal path is published"
    );
    let node_credential =
        server.stored().setting("node_credential").unwrap_or_else(|| server.fail("no node credential in the store"));
    for route in internal {
        let (method, template) = (route.method(), route.template());
        assert!(template.starts_with("/internal/"), "{route:?}: {template}");
        assert!(doc["paths"].get(template).is_none(), "{method} {template} is in the public document");
        assert!(!doc.to_string().contains(template), "{template} is named in the public document");
        let path = concrete(template);
        assert_error(&send(&server, method, &path).await, 404, "not found");
        let r = send_with(&server, method, &path, Some(&node_credential)).await;
        // A sync answers 204; a browser tool the tool's answer or its
        // refusal, a row of the error table (here, of its missing arguments).
        let answered = match route {
            Route::NodeSessionTool => r.status == 400 && r.json["error"] == "invalid body",
            _ => r.status == 204,
        };
        assert!(answered, "{method} {path} with the nodes' credential is not answered: {r}");
    }
}

/// Waits until POST /jobs reaches the registry check (the Docker engine
/// answered), so Schemathesis does not meet the grid's start-up 503.
async fn wait_for_compute(server: &GridServer) {
    let body = json!({
        "image": "127.0.0.1:5000/not-admitted:1",
        "command": ["true"],
        "resources": {
            "cpu": {"request": "250m", "limit": "250m"},
            "memory": {"request": "256Mi", "limit": "256Mi"},
            "ephemeralStorage": {"request": "256Mi", "limit": "256Mi"}
        },
        "runningDeadlineSeconds": 10,
        "capabilities": {"networkProfile": "none"},
        "env": {},
        "labels": {},
        "idempotencyKey": "openapi-compute-probe"
    });
    let what = "the Docker engine answering (scripts/compute-env.sh starts it)";
    let r = wait_for(what, Duration::from_secs(30), || async {
        let r = server.post("/jobs", &body).await;
        match r.status {
            400 => Ok(r),
            _ => Err(r.to_string()),
        }
    })
    .await;
    assert_error(&r, 400, "INVALID_IMAGE");
}

/// Schemathesis against the live server, every operation, every check
/// (`--checks all`: server errors, status codes, content types, headers and
/// bodies against the document, negative and positive data, undocumented
/// methods, authentication, stateful links), bounded by a fixed number of
/// examples per operation and a fixed seed, so a run is the same each time.
///
/// The grid is one where nothing it is asked to do can flood the machine:
/// no session slot (`--max-sessions 0`, so a lease is 409), no browser pool
/// (`--browsers 0`: capture items fail at once), one worker, no admitted
/// registry (no image resolves, so no container runs), private networks
/// refused, and credit and a rate limit that Schemathesis cannot exhaust
/// (a refusal for those would say nothing of the document).
#[tokio::test]
async fn schemathesis_finds_no_server_error_and_no_answer_contradicting_the_document() {
    let server = GridServer::start(ServerOptions {
        allow_private_networks: false,
        workers: Some(1),
        initial_credit_micros: Some(1_000_000_000_000_000),
        extra_args: [
            "--max-sessions",
            "0",
            "--browsers",
            "0",
            "--rate-limit-per-second",
            "1000000",
            "--rate-limit-burst",
            "1000000",
        ]
        .map(String::from)
        .to_vec(),
        ..Default::default()
    });
    wait_for_compute(&server).await;
    let doc = document(&server).await;
    let (report, output) = schemathesis(&server, "schemathesis.toml", &[], &[]);
    // The run was not vacuous: every operation was tested, in every phase
    // that generates requests, with requests in the thousands.
    // (Schemathesis 4.32 counts a document it loaded over HTTP one short of
    // the same document read from a file: 33 of 34.)
    let total = &report["operations"]["total"];
    let documented = operations(&doc).len() as u64;
    assert!(total.as_u64().is_some_and(|n| n + 1 >= documented && n <= documented), "{documented}: {output}");
    assert_eq!(report["operations"]["tested"], *total, "{output}");
    for phase in ["coverage", "fuzzing", "stateful"] {
        assert_eq!(report["phases"][phase]["status"], "success", "{phase}: {output}");
    }
    assert!(report["test_cases"]["generated"].as_u64().is_some_and(|n| n >= 1000), "{output}");
}

/// The run above reaches a session's CDP endpoint only with ids that do
/// not exist (no session slot). Here one real session (one browser) is
/// leased and Schemathesis drives every CDP operation with its id and
/// token (`tests/schemathesis/cdp.toml`): discovery, opening, activating
/// and closing pages, the live view, and the socket addresses without an
/// upgrade, against the document.
#[tokio::test]
async fn schemathesis_on_a_live_sessions_cdp_endpoint_agrees_with_the_document() {
    let server = GridServer::start(ServerOptions {
        extra_args: ["--rate-limit-per-second", "1000000", "--rate-limit-burst", "1000000"].map(String::from).to_vec(),
        ..Default::default()
    });
    let lease = sessions::lease_as(&server, server.api_key(), json!({"ttlMinutes": 5})).await;
    sessions::wait_running_as(&server, server.api_key(), &lease.id).await;
    let token = lease
        .cdp_url
        .rsplit('/')
        .next()
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| server.fail(&format!("no token in {}", lease.cdp_url)))
        .to_string();
    let doc = document(&server).await;
    let (report, output) = schemathesis(
        &server,
        "cdp.toml",
        &["--include-path-regex", "^/cdp/", "--phases", "coverage,fuzzing", "--max-examples", "5"],
        &[("GRID_SESSION_ID", &lease.id), ("GRID_SESSION_TOKEN", &token)],
    );
    let cdp_operations = operations(&doc).iter().filter(|(_, p)| p.starts_with("/cdp/")).count() as u64;
    assert!(cdp_operations >= 11, "{cdp_operations}");
    assert_eq!(report["operations"]["selected"].as_u64(), Some(cdp_operations), "{output}");
    assert_eq!(report["operations"]["tested"], report["operations"]["selected"], "{output}");
    // The session was there throughout: its discovery still answers (on a
    // new connection: the server may have closed the harness's idle pooled one).
    let url = format!("{}/cdp/{}/{token}/json/version", server.base_url(), lease.id);
    let r = reqwest::get(&url).await.unwrap_or_else(|e| server.fail(&format!("GET {url}: {e}")));
    assert_eq!(r.status(), 200, "{url}");
}

/// Runs Schemathesis' CLI with `tests/schemathesis/<config>` against the
/// grid's live document, with the grid's API key, every check, a fixed seed,
/// and `args` and `env` added; fails the test on any failure or error it
/// reports. Returns its JSON report and its output.
fn schemathesis(server: &GridServer, config: &str, args: &[&str], env: &[(&str, &str)]) -> (Value, String) {
    let work = tempfile::tempdir().expect("tempdir");
    let report_dir = work.path().join("report");
    let config = workspace_root().join("tests/schemathesis").join(config);
    // Its CLI through python3 (the interpreter scripts/test.sh installs it
    // for), whatever PATH holds.
    let mut cmd = Command::new("python3");
    cmd.current_dir(work.path())
        .args(["-c", "import sys; from schemathesis.cli import schemathesis; sys.argv[0] = 'schemathesis'; sys.exit(schemathesis())"])
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(format!("{}/openapi.json", server.base_url()))
        .args(["-H", &format!("x-api-key: {}", server.api_key())])
        // POST /mcp answers 406 without both types; other routes ignore it.
        .args(["-H", &format!("accept: {ACCEPT_BOTH}")])
        // One worker: with two, Python 3.11's `ast` module (which Hypothesis
        // calls to describe its strategies) shares its recursion counter
        // between threads and fails now and then with "SystemError: AST
        // constructor recursion depth mismatch", a crash of the tool that
        // the run reports as an error.
        .args(["--checks", "all", "--max-examples", "20", "--workers", "1", "--request-timeout", "30"])
        // Fixed, so a run is the same each time; GRID_SCHEMATHESIS_SEED
        // explores others by hand.
        .args(["--seed", &std::env::var("GRID_SCHEMATHESIS_SEED").unwrap_or_else(|_| "1".into())])
        .args(["--generation-database", "none", "--no-color", "--report", "json", "--report-dir"])
        .arg(&report_dir)
        .args(args)
        .envs(env.iter().copied());
    let out = cmd.output().unwrap_or_else(|e| {
        server.fail(&format!(
            "python3 did not start ({e}); Schemathesis is installed by scripts/test.sh (PyPI package schemathesis)"
        ))
    });
    let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let report = std::fs::read_dir(&report_dir)
        .ok()
        .and_then(|mut d| d.find_map(|e| e.ok().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json"))))
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .unwrap_or_else(|| {
            server.fail(&format!(
                "schemathesis wrote no JSON report ({}; is it installed? scripts/test.sh installs PyPI package schemathesis 4.x):\n{output}",
                out.status
            ))
        });
    let failures = report["failures"].as_array().map_or(0, Vec::len);
    let errors = report["errors"].as_array().map_or(0, Vec::len);
    if !out.status.success() || failures > 0 || errors > 0 || report["complete"] != true {
        server.fail(&format!(
            "schemathesis: {failures} failures, {errors} errors, exit {}:\n{output}\nfailures: {}\nerrors: {}",
            out.status,
            serde_json::to_string_pretty(&report["failures"]).unwrap_or_default(),
            serde_json::to_string_pretty(&report["errors"]).unwrap_or_default()
        ));
    }
    (report, output)
}
