//! The `grid` CLI end to end against a real server.
//!
//! Runs on: one store, because its subject is the CLI's arguments and output.

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

/// Errors say what to do: a missing key, a refused key and a server that
/// does not answer each name the setting to change, in one `error:` line and
/// one `hint:` line.
#[tokio::test]
async fn errors_say_what_to_do() {
    let server = GridServer::start(ServerOptions::default());
    let url = server.base_url();
    let none = run_cli(&["status"], &[("GRID_URL", url.as_str())], CLI_TIMEOUT);
    assert_eq!(none.code, Some(1), "{none}");
    assert!(none.stderr.contains("401"), "{none}");
    assert!(none.stderr.contains("hint: no API key was sent: set GRID_API_KEY or pass --api-key"), "{none}");

    let wrong = run_cli(&["status"], &[("GRID_URL", url.as_str()), ("GRID_API_KEY", "grid_wrong")], CLI_TIMEOUT);
    assert_eq!(wrong.code, Some(1), "{wrong}");
    assert!(wrong.stderr.contains("hint: the API key (GRID_API_KEY or --api-key) was refused"), "{wrong}");

    // Nothing listens on this port (a fresh free one).
    let dead = format!("http://127.0.0.1:{}", grid_tests::server::free_port());
    let down = run_cli(&["status"], &[("GRID_URL", dead.as_str()), ("GRID_API_KEY", "grid_x")], CLI_TIMEOUT);
    assert_eq!(down.code, Some(1), "{down}");
    let lines: Vec<&str> = down.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "one error line and one hint: {down}");
    assert!(lines[0].starts_with(&format!("error: the grid at {dead} did not answer: ")), "{down}");
    assert!(lines[1].starts_with("hint: is the server running there?"), "{down}");
}

/// A batch whose items hit the private-network guard points at the server
/// flag that lifts it.
#[tokio::test]
async fn a_private_address_refusal_hints_at_the_server_flag() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions { allow_private_networks: false, ..ServerOptions::default() });
    let file = server.log_path().with_file_name("urls.txt");
    std::fs::write(&file, target.url("/page/1") + "\n").unwrap();
    let out = server.cli(&["batch", "submit", file.to_str().unwrap(), "--script", "fetch", "--wait"]);
    assert_eq!(out.code, Some(3), "the item fails: {out}");
    assert!(out.stdout.contains("is not a public address"), "{out}");
    assert!(out.stdout.contains("--allow-private-networks"), "{out}");
    assert_eq!(target.total_hits(), 0);
}

#[test]
fn shell_completions_are_printed_for_bash_zsh_and_fish() {
    for (shell, marker) in [("bash", "complete -F _grid"), ("zsh", "#compdef grid"), ("fish", "complete -c grid")] {
        let out = run_cli(&["completion", shell], &[], CLI_TIMEOUT);
        assert!(out.success(), "{shell}: {out}");
        assert!(out.stdout.contains(marker), "{shell}: no `{marker}` in the script");
        // The script knows the commands.
        assert!(out.stdout.contains("session") && out.stdout.contains("batch"), "{shell}");
    }
    let bad = run_cli(&["completion", "cmd.exe"], &[], CLI_TIMEOUT);
    assert_eq!(bad.code, Some(2), "{bad}");
}

/// Runs `grid ARGS` under a pseudo-terminal (util-linux `script`), as a
/// person at a terminal does; answers its exit code and what the terminal
/// showed.
fn at_a_terminal(server: &GridServer, args: &[&str]) -> (Option<i32>, String) {
    let bin = grid_tests::bins::grid_cli_bin();
    let quoted: Vec<String> = std::iter::once(bin.display().to_string())
        .chain(args.iter().map(|a| a.to_string()))
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect();
    let out = std::process::Command::new("script")
        .args(["-qec", &quoted.join(" "), "/dev/null"])
        .env("GRID_URL", server.base_url())
        .env("GRID_API_KEY", server.api_key())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("util-linux `script` is needed to run the CLI under a terminal: {e}"));
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A binary file is not written to a terminal unless asked (`-o -`); to a
/// pipe it is written.
#[tokio::test]
async fn binary_files_are_not_written_to_a_terminal() {
    let target = Target::start();
    let server = GridServer::start(ServerOptions::default());
    let batch = server.submit_fetch(&[target.url("/bytes/4096")]).await;
    let view = server.wait_batch_done(&batch, std::time::Duration::from_secs(60)).await;
    let item = view["jobs"][0]["jobId"].as_str().expect("an item").to_string();

    let (code, shown) = at_a_terminal(&server, &["artifact", "get", &item, "body"]);
    assert_eq!(code, Some(1), "{shown}");
    assert!(shown.contains("is binary (4096 bytes); not writing it to the terminal: pass -o FILE"), "{shown}");
    let (forced, _) = at_a_terminal(&server, &["artifact", "get", &item, "body", "-o", "-"]);
    assert_eq!(forced, Some(0));

    // Not a terminal (a pipe): written, no refusal.
    let piped = server.cli(&["artifact", "get", &item, "body"]);
    assert!(piped.success() && !piped.stderr.contains("binary"), "{piped}");
}

/// Named contexts, as kubectl's: set one with a key file, use it, and every
/// command reaches that grid with that key without GRID_URL or GRID_API_KEY;
/// an environment variable still wins over the context.
#[tokio::test]
async fn config_contexts_pick_the_grid_and_key_and_env_wins() {
    let server = GridServer::start(ServerOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("grid").join("config.toml");
    let key_file = dir.path().join("prod.key");
    std::fs::write(&key_file, format!("{}\n", server.api_key())).unwrap();
    let cfg = config.to_str().unwrap().to_string();
    let grid = |args: &[&str], extra: &[(&str, &str)]| {
        let mut env = vec![("GRID_CONFIG", cfg.as_str())];
        env.extend_from_slice(extra);
        run_cli(args, &env, CLI_TIMEOUT)
    };
    let url = server.base_url();
    let set = grid(&["config", "set-context", "prod", "--url", &url, "--key-file", key_file.to_str().unwrap()], &[]);
    assert!(set.success(), "{set}");
    let other = grid(&["config", "set-context", "down", "--url", "http://127.0.0.1:9"], &[]);
    assert!(other.success(), "{other}");
    // The first context set is the current one.
    let listed = grid(&["config", "get-contexts"], &[]);
    assert!(listed.success(), "{listed}");
    let current: Vec<&str> = listed.stdout.lines().filter(|l| l.starts_with('*')).collect();
    assert_eq!(current.len(), 1, "{listed}");
    assert!(current[0].contains("prod") && current[0].contains(&url), "{listed}");

    let status = grid(&["status", "--json"], &[]);
    assert!(status.success(), "the context's grid and key: {status}");
    let account = grid(&["account", "--json"], &[]);
    assert_eq!(account.json().map(|a| a["accountId"].clone()), Some(json!(server.account_id())), "{account}");

    // The environment wins over the context.
    let dead = format!("http://127.0.0.1:{}", grid_tests::server::free_port());
    let env_wins = grid(&["status"], &[("GRID_URL", dead.as_str())]);
    assert!(env_wins.stderr.contains(&dead), "{env_wins}");

    let switched = grid(&["config", "use-context", "down"], &[]);
    assert!(switched.success(), "{switched}");
    let down = grid(&["status"], &[]);
    assert!(!down.success() && down.stderr.contains("http://127.0.0.1:9"), "{down}");
    let missing = grid(&["config", "use-context", "nope"], &[]);
    assert_eq!(missing.code, Some(1), "{missing}");
    assert!(missing.stderr.contains("no context nope"), "{missing}");
}

/// `--output yaml` prints the same answers as `--output json`, as YAML
/// documents (read back with PyYAML, installed by scripts/test.sh).
#[tokio::test]
async fn yaml_output_is_the_json_answer_as_yaml() {
    let server = GridServer::start(ServerOptions::default());
    let json_out = server.cli(&["account", "--output", "json"]);
    assert!(json_out.success(), "{json_out}");
    let yaml_out = server.cli(&["account", "--output", "yaml"]);
    assert!(yaml_out.success(), "{yaml_out}");
    assert!(yaml_out.stdout.starts_with("---\n"), "{yaml_out}");
    let read = std::process::Command::new("python3")
        .args(["-c", "import sys, json, yaml; print(json.dumps(list(yaml.safe_load_all(sys.stdin))))"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            child.stdin.take().expect("stdin").write_all(yaml_out.stdout.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap_or_else(|e| panic!("python3 with PyYAML is needed (scripts/test.sh installs it): {e}"));
    assert!(read.status.success(), "PyYAML could not read it: {}", String::from_utf8_lossy(&read.stderr));
    let docs: Value = serde_json::from_slice(&read.stdout).expect("JSON from python");
    assert_eq!(docs, json!([json_out.json().expect("JSON answer")]));
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
            "params.format: not a parameter of render-fetch; only capture and pdf take it",
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
