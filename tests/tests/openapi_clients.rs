//! Clients generated from the live GET /openapi.json by the generators
//! people use, each installed by scripts/test.sh: openapi-python-client
//! (PyPI) generates a Python package whose named models are the document's
//! `components.schemas`, and a script calls the grid through it (API key in
//! `x-api-key`), its answers parsed into those types; openapi-typescript
//! (npm, tests/clients) generates TypeScript types, and the TypeScript
//! compiler (npm `typescript`, tests/clients) checks a file using them.
//! A generator that is missing fails the test, naming it.
//!
//! Runs on: one store, because its subject is generated clients.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use grid_tests::bins::workspace_root;
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::Target;

/// The document as the grid serves it, written to `dir/doc.json`.
async fn served_document(server: &GridServer, dir: &Path) -> PathBuf {
    let r = server.get_as(None, "/openapi.json").await;
    assert_eq!(r.status, 200, "{r}");
    let path = dir.join("doc.json");
    std::fs::write(&path, r.json.to_string()).expect("write doc.json");
    path
}

/// Runs `cmd` off the async runtime; fails the test with its output unless
/// it succeeds.
async fn run(server: &GridServer, what: &str, mut cmd: Command) -> Output {
    let out = tokio::task::spawn_blocking(move || cmd.output()).await.expect("join");
    grid_tests::child::checked(server, what, out)
}

/// The configuration docs/openapi.md gives Python users: answers of bytes
/// read as bytes (openapi-python-client reads only JSON, text and
/// application/octet-stream, and each answer as the first of its types it
/// reads).
const PYTHON_CONFIG: &str = "content_type_overrides:
  \"*/*\": application/octet-stream
  image/png: application/octet-stream
  image/jpeg: application/octet-stream
  image/webp: application/octet-stream
  application/pdf: application/octet-stream
";

/// What the script below does with the generated package `grid_api`:
/// reads the account and the grid's figures, submits a batch built from
/// the generated models, reads the batch and its item, and is refused
/// without a key; prints what each answer was parsed into.
const PYTHON_CALLS: &str = r#"
import json, sys, time
from grid_api import AuthenticatedClient, Client
from grid_api.api.account import get_account, get_grid_status
from grid_api.api.captures import get_batch, submit_batch
from grid_api.api.jobs import get_job
from grid_api.models import (
    Account, Batch, BatchCreated, BatchSubmission, BatchSubmissionParams, CaptureItem, FetchParams, GridStatus,
    UnauthorizedError,
)
from grid_api.models.batch_submission_script import BatchSubmissionScript

base_url, key, url = sys.argv[1:4]
client = AuthenticatedClient(
    base_url=base_url, token=key, prefix="", auth_header_name="x-api-key", raise_on_unexpected_status=True
)
out = {}
account = get_account.sync(client=client)
assert isinstance(account, Account), account
out["account"] = {"type": type(account).__name__, "availableMicros": account.available_micros,
                  "ledger": [type(e).__name__ for e in account.ledger]}
status = get_grid_status.sync(client=client)
assert isinstance(status, GridStatus), status
out["grid"] = {"type": type(status).__name__, "queue": type(status.queue).__name__, "workers": status.workers}
params = BatchSubmissionParams.from_dict(FetchParams(timeout_ms=10000).to_dict())
body = BatchSubmission(urls=[url], script=BatchSubmissionScript.FETCH, params=params)
created = submit_batch.sync(client=client, body=body)
assert isinstance(created, BatchCreated), created
out["created"] = {"type": type(created).__name__, "batchId": created.batch_id, "jobCount": created.job_count}
deadline = time.time() + 30
while True:
    batch = get_batch.sync(client=client, batch_id=created.batch_id)
    assert isinstance(batch, Batch), batch
    if batch.counts.completed + batch.counts.failed == batch.total or time.time() > deadline:
        break
    time.sleep(0.2)
item = get_job.sync(client=client, job_id=batch.jobs[0].job_id)
assert isinstance(item, CaptureItem), item
out["batch"] = {"type": type(batch).__name__, "item": type(batch.jobs[0]).__name__, "completed": batch.counts.completed}
out["item"] = {"type": type(item).__name__, "state": item.state.value, "script": item.script.value,
               "artifacts": sorted(item.artifacts.additional_properties)}
refused = get_account.sync_detailed(client=Client(base_url=base_url))
out["refused"] = {"status": int(refused.status_code), "type": type(refused.parsed).__name__,
                  "error": refused.parsed.error}
print(json.dumps(out))
"#;

#[tokio::test]
async fn a_generated_python_client_has_named_types_and_calls_the_grid() {
    let server = GridServer::start(ServerOptions::default());
    let target = Target::start();
    let work = tempfile::tempdir().expect("tempdir");
    let doc = served_document(&server, work.path()).await;
    let package = work.path().join("grid_api");
    let config = work.path().join("config.yaml");
    std::fs::write(&config, PYTHON_CONFIG).expect("config.yaml");
    // Its CLI through python3 (the interpreter scripts/test.sh installs it
    // for), whatever PATH holds.
    let mut generate = Command::new("python3");
    generate
        .args(["-m", "openapi_python_client", "generate", "--meta", "none", "--fail-on-warning", "--path"])
        .arg(&doc)
        .arg("--config")
        .arg(&config)
        .arg("--output-path")
        .arg(&package)
        .current_dir(work.path());
    let out = run(
        &server,
        "openapi-python-client (PyPI package openapi-python-client, installed by scripts/test.sh)",
        generate,
    )
    .await;
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(!log.contains("WARNING"), "openapi-python-client warned:\n{log}");
    // The document's named schemas are the package's model classes.
    let models = package.join("models");
    for model in [
        "batch_submission",
        "batch_created",
        "batch",
        "batch_item",
        "capture_item",
        "job",
        "job_submission",
        "job_attempt",
        "session",
        "session_lease",
        "session_request",
        "account",
        "ledger_entry",
        "grid_status",
        "error",
        "insufficient_credit_error",
        "unauthorized_error",
        "capture_params",
        "fetch_params",
    ] {
        assert!(models.join(format!("{model}.py")).is_file(), "no model {model} in {}", models.display());
    }
    // Named, shared types instead of one class per place a shape appears.
    let count = std::fs::read_dir(&models).expect("models").count();
    assert!(count < 250, "{count} model files");
    // A capture file and a session's file are read as bytes.
    for op in ["download", "download_session_file"] {
        let code = std::fs::read_to_string(package.join(format!("api/downloads/{op}.py"))).expect("a download call");
        assert!(code.contains("File(payload=BytesIO(response.content))"), "{op} does not read bytes:\n{code}");
    }
    let mut call = Command::new("python3");
    call.args(["-c", PYTHON_CALLS])
        .arg(server.base_url())
        .arg(server.api_key())
        .arg(target.url("/page/1"))
        .env("PYTHONPATH", work.path());
    let out = run(&server, "the generated Python client", call).await;
    let got: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        server.fail(&format!("the Python client printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
    });
    assert_eq!(got["account"]["type"], "Account", "{got}");
    assert!(got["account"]["availableMicros"].as_i64().is_some_and(|m| m > 0), "{got}");
    assert!(got["account"]["ledger"].as_array().is_some_and(|l| l.iter().all(|t| t == "LedgerEntry")), "{got}");
    assert_eq!(got["grid"]["type"], "GridStatus", "{got}");
    assert_eq!(got["grid"]["queue"], "QueueCounts", "{got}");
    assert_eq!(got["created"]["type"], "BatchCreated", "{got}");
    assert_eq!(got["created"]["jobCount"], 1, "{got}");
    assert_eq!(got["batch"]["type"], "Batch", "{got}");
    assert_eq!(got["batch"]["item"], "BatchItem", "{got}");
    assert_eq!(got["batch"]["completed"], 1, "{got}");
    assert_eq!(got["item"]["type"], "CaptureItem", "{got}");
    assert_eq!(got["item"]["state"], "completed", "{got}");
    assert_eq!(got["item"]["script"], "fetch", "{got}");
    assert_eq!(got["item"]["artifacts"], serde_json::json!(["body", "meta"]), "{got}");
    assert_eq!(got["refused"]["status"], 401, "{got}");
    assert_eq!(got["refused"]["type"], "UnauthorizedError", "{got}");
    assert_eq!(got["refused"]["error"], "unauthorized", "{got}");
    // The batch is the grid's, as the client said.
    let r = server.get(&format!("/batches/{}", got["created"]["batchId"].as_str().unwrap_or_default())).await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(target.hits("/page/1"), 1);
}

/// A file typed with the generated types: what the grid answers fits them,
/// and what it would refuse does not.
const TYPESCRIPT_USE: &str = r#"
import type { components, paths } from "./schema";

type Schemas = components["schemas"];
const params: Schemas["CaptureParams"] = { format: "jpeg", quality: 80, viewport: { width: 800, height: 600 } };
const submission: Schemas["BatchSubmission"] = { urls: ["https://example.com/"], script: "capture", params };
const created: paths["/batches"]["post"]["responses"][201]["content"]["application/json"] = { batchId: "bt_1", jobCount: 1 };
const named: Schemas["BatchCreated"] = created;
const lease: paths["/sessions"]["post"]["responses"][201]["content"]["application/json"] = {} as Schemas["SessionLease"];
const sessions: Schemas["Session"][] = [] as paths["/sessions"]["get"]["responses"][200]["content"]["application/json"];
const job: Schemas["Job"] | Schemas["CaptureItem"] = {} as paths["/jobs/{jobId}"]["get"]["responses"][200]["content"]["application/json"];
const refusal: Schemas["InsufficientCreditError"] = { error: "insufficient_credit", requiredMicros: 2, availableMicros: 1 };
const error: Schemas["Error"] = refusal;
// @ts-expect-error: a batch id is a string
const wrongId: Schemas["BatchCreated"] = { batchId: 1, jobCount: 1 };
// @ts-expect-error: the 402 of POST /batches is one of its refusals, not another's
const wrongError: Schemas["InsufficientCreditError"] = { error: "rate_limited", requiredMicros: 2, availableMicros: 1 };
// @ts-expect-error: no such script
const wrongScript: Schemas["BatchSubmission"] = { urls: ["https://example.com/"], script: "nope" };
export { submission, named, lease, sessions, job, error, wrongId, wrongError, wrongScript };
"#;

#[tokio::test]
async fn openapi_typescript_makes_named_types_that_type_check() {
    let server = GridServer::start(ServerOptions::default());
    let work = tempfile::tempdir().expect("tempdir");
    let doc = served_document(&server, work.path()).await;
    let bin = workspace_root().join("tests/clients/node_modules/.bin");
    let generator = bin.join("openapi-typescript");
    assert!(
        generator.exists(),
        "openapi-typescript is missing ({}): scripts/test.sh installs it (npm, tests/clients/package.json)",
        generator.display()
    );
    let schema = work.path().join("schema.d.ts");
    let mut generate = Command::new(&generator);
    // Members with a default are optional in a request (its default is
    // what the grid takes for them), not required as openapi-typescript
    // makes them by default.
    generate.arg(&doc).args(["--default-non-nullable", "false", "-o"]).arg(&schema).current_dir(work.path());
    run(&server, "openapi-typescript", generate).await;
    let types = std::fs::read_to_string(&schema).expect("schema.d.ts");
    assert!(types.contains("export interface components {"), "no components in schema.d.ts");
    for name in [
        "BatchSubmission",
        "BatchCreated",
        "Batch",
        "CaptureItem",
        "Job",
        "JobSubmission",
        "Session",
        "SessionLease",
        "SessionRequest",
        "Account",
        "GridStatus",
        "Error",
        "InsufficientCreditError",
    ] {
        assert!(types.contains(&format!("\n        {name}: {{")), "no type {name} in schema.d.ts");
    }
    // Operations refer to the named types.
    assert!(types.contains("components[\"schemas\"][\"BatchSubmission\"]"), "POST /batches' body is not named");
    assert!(!types.contains("/internal/"), "an /internal route is in the generated types");
    let compiler = bin.join("tsc");
    assert!(
        compiler.exists(),
        "the TypeScript compiler is missing ({}): scripts/test.sh installs it (npm typescript, tests/clients/package.json)",
        compiler.display()
    );
    std::fs::write(work.path().join("use.ts"), TYPESCRIPT_USE).expect("use.ts");
    let mut check = Command::new(&compiler);
    check
        .args(["--noEmit", "--strict", "--target", "es2022", "--module", "nodenext", "use.ts"])
        .current_dir(work.path());
    tokio::time::timeout(Duration::from_secs(120), run(&server, "tsc on the generated types", check))
        .await
        .unwrap_or_else(|_| server.fail("tsc took over 120 s"));
}
