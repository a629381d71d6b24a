//! The `grid` CLI end to end against a real server.

use serde_json::{json, Value};

use grid_tests::cli::{run_cli, CLI_TIMEOUT};
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::{CountingListener, Target};

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

#[test]
fn cli_refuses_bad_params_before_sending_anything() {
    // Nothing listens but a counter: a request would show.
    let listener = CountingListener::start();
    let url = format!("http://127.0.0.1:{}", listener.port());
    let env = [("GRID_URL", url.as_str()), ("GRID_API_KEY", "grid_unused")];
    let dir = tempfile::tempdir().unwrap();
    let params_file = dir.path().join("params.json");
    std::fs::write(&params_file, r#"{"format": "jpeg", "viewport": {"width": 50, "height": 300}}"#).unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["--param", "fulPage=true"], "params.fulPage: unknown parameter of capture"),
        (
            &["--params", params_file.to_str().unwrap()],
            "params.viewport.width: must be a whole number from 100 to 4096, got 50",
        ),
        (
            &["--script", "render-fetch", "--param", "format=webp"],
            "params.format: not a parameter of render-fetch; only capture takes it",
        ),
        (
            &["--script", "browser-fetch", "--param", r#"cookies=[{"name":"a","value":"1","domain":"other.example"}]"#],
            "params.cookies[0].domain: \"other.example\" is neither the item URL's host a.example",
        ),
    ];
    for (flags, problem) in cases {
        let mut args = vec!["batch", "submit", "https://a.example/"];
        args.extend_from_slice(flags);
        let out = run_cli(&args, &env, CLI_TIMEOUT);
        assert_eq!(out.code, Some(2), "{out}");
        assert!(
            out.stderr.contains("params refused, nothing sent") && out.stderr.contains(problem),
            "{problem}: {out}"
        );
    }
    assert_eq!(listener.count(), 0, "the CLI sent a request");
    // Checked by default only: a server newer than the CLI may know more.
    let unchecked = run_cli(
        &["batch", "submit", "https://a.example/", "--param", "fulPage=true", "--no-params-check"],
        &env,
        CLI_TIMEOUT,
    );
    assert_eq!(unchecked.code, Some(1), "{unchecked}");
    assert!(listener.count() > 0, "--no-params-check sends the batch");
}

#[tokio::test]
async fn cli_passes_a_params_file_and_pairs_to_the_items() {
    let target = Target::start();
    let server =
        GridServer::start(ServerOptions { extra_args: vec!["--browsers".into(), "1".into()], ..Default::default() });
    let file = server.log_path().with_file_name("params.json");
    std::fs::write(&file, r#"{"format": "jpeg", "quality": 90, "viewport": {"width": 400, "height": 200}}"#).unwrap();
    let out = server.cli(&[
        "batch",
        "submit",
        &target.url("/page/1"),
        "--params",
        file.to_str().unwrap(),
        "--param",
        "quality=40",
        "--wait",
        "--json",
    ]);
    assert!(out.success(), "{out}");
    let batch_id = find_batch_id(&out.json().unwrap_or_default()).unwrap_or_else(|| panic!("no batchId: {out}"));
    let batch = server.batch(&batch_id).await;
    let item = batch["jobs"][0]["jobId"].as_str().unwrap_or_else(|| panic!("{batch}")).to_string();
    let url = server.artifact_url(&item, "meta").await;
    let meta: Value =
        reqwest::Client::builder().no_proxy().build().unwrap().get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(meta["screenshot"]["format"], json!("jpeg"), "{meta}");
    assert_eq!(meta["screenshot"]["quality"], json!(40), "--param replaces the file's value: {meta}");
    assert_eq!(meta["files"]["screenshot"]["contentType"], json!("image/jpeg"), "{meta}");
    assert_eq!(
        (meta["files"]["screenshot"]["width"].clone(), meta["files"]["screenshot"]["height"].clone()),
        (json!(400), json!(200)),
        "{meta}"
    );
}
