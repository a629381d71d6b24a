//! The `grid` CLI end to end against a real server.

use serde_json::{json, Value};

use grid_tests::cli::{run_cli, CLI_TIMEOUT};
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::Target;

/// The batchId in the CLI's JSON output, wherever it sits.
fn find_batch_id(v: &Value) -> Option<String> {
    match v {
        Value::Object(o) => {
            o.get("batchId").and_then(Value::as_str).map(str::to_string).or_else(|| o.values().find_map(find_batch_id))
        }
        Value::Array(a) => a.iter().find_map(find_batch_id),
        _ => None,
    }
}

#[tokio::test]
async fn batch_submit_wait_json_runs_a_batch_end_to_end() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let urls: Vec<String> = (0..25).map(|i| target.url(&format!("/page/{i}"))).collect();
    let file = server.log_path().with_file_name("urls.txt");
    std::fs::write(&file, urls.join("\n") + "\n").unwrap();

    let out = server.cli(&["batch", "submit", file.to_str().unwrap(), "--script", "fetch", "--wait", "--json"]);
    assert!(out.success(), "{out}");
    let printed = out.json().unwrap_or_else(|| panic!("--json printed no JSON: {out}"));
    let batch_id = find_batch_id(&printed).unwrap_or_else(|| panic!("no batchId in output: {out}"));
    if let Some(counts) = printed.get("counts") {
        assert_eq!(counts["completed"], json!(25), "{out}");
    }

    // --wait returned only once the batch was done.
    let batch = server.batch(&batch_id).await;
    assert_eq!(batch["total"], json!(25), "{batch}");
    assert_eq!(batch["counts"]["completed"], json!(25), "{batch}");
    for i in [0, 24] {
        assert_eq!(target.hits(&format!("/page/{i}")), 1);
    }
}

#[tokio::test]
async fn cli_without_a_key_fails_and_queues_nothing() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let file = server.log_path().with_file_name("urls.txt");
    std::fs::write(&file, target.url("/page/1") + "\n").unwrap();
    let url = server.base_url();
    let out = run_cli(
        &["batch", "submit", file.to_str().unwrap(), "--script", "fetch", "--json"],
        &[("GRID_URL", url.as_str())],
        CLI_TIMEOUT,
    );
    assert!(!out.success() && out.code.is_some(), "{out}");
    let wrong = run_cli(
        &["batch", "submit", file.to_str().unwrap(), "--script", "fetch", "--json"],
        &[("GRID_URL", url.as_str()), ("GRID_API_KEY", "grid_wrong")],
        CLI_TIMEOUT,
    );
    assert!(!wrong.success() && wrong.code.is_some(), "{wrong}");
    assert!(
        wrong.stderr.contains("unauthorized") || wrong.stdout.contains("unauthorized"),
        "the 401 is not reported: {wrong}"
    );
    let depth = server.get("/grid/queue-depth").await;
    assert_eq!(depth.json, json!({"depth": 0}), "{depth}");
    assert_eq!(target.total_hits(), 0);
}
