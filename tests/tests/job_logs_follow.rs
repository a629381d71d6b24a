//! GET /jobs/{jobId}/logs?follow=true and `grid job logs --follow`: a
//! running attempt's output is seen as it is written, before the attempt
//! ends, and the stream ends once it has ended, with the whole published
//! log (docs/jobs.md). Real grid-server, real Docker Engine and registry
//! (scripts/compute-env.sh), the real `grid` binary.
//!
//! Runs on: both stores, because the attempt and its log are followed through store reads.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use serde_json::json;

use grid_tests::bins::{grid_cli_bin, scrub_env};
use grid_tests::http::assert_error;
use grid_tests::jobs::*;
use grid_tests::server::GridServer;

/// Prints a line, waits, prints more. The wait is the job's: the test
/// waits on what it reads, never on time. (One stream: the engine orders
/// stdout against stderr only as its two copiers happen to write them.)
const SCRIPT: &str = "echo first; sleep 4; echo second; echo third";
const WHOLE: &str = "first\nsecond\nthird\n";

/// GET /jobs/{id}/logs?follow=true with `key`, unread: the caller reads its
/// body as it comes. No request timeout: the answer lasts as the attempt.
async fn follow_request(server: &GridServer, key: &str, id: &str, query: &str) -> reqwest::Response {
    let client = reqwest::Client::builder().no_proxy().build().expect("reqwest client");
    client
        .get(format!("{}/jobs/{id}/logs?follow=true{query}", server.base_url()))
        .header("x-api-key", key)
        .send()
        .await
        .unwrap_or_else(|e| server.fail(&format!("follow request: {e}")))
}

/// `grid job logs ID --follow` started, its stdout read line by line on a
/// thread: each line (with its newline) comes over the channel as printed.
struct FollowingCli {
    child: std::process::Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    stderr: std::thread::JoinHandle<String>,
}

fn spawn_cli_follow(server: &GridServer, id: &str) -> FollowingCli {
    let mut cmd = Command::new(grid_cli_bin());
    cmd.args(["job", "logs", id, "--follow", "--timeout", "90"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    scrub_env(&mut cmd);
    cmd.env("GRID_URL", server.base_url()).env("GRID_API_KEY", server.api_key());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn grid: {e}"));
    let stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    FollowingCli { child, lines, stderr }
}

async fn phase(server: &GridServer, id: &str) -> String {
    job(server, id).await["phase"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn a_running_attempts_output_is_followed_as_written_through_the_cli_and_raw_http() {
    let server = start_compute_server();
    // The engine connection comes up just after start.
    wait_finished(&server, &job_id(&submit_job(&server, &sh_job("true")).await)).await;

    let id = job_id(&submit_job(&server, &sh_job(SCRIPT)).await);
    // Both followers start while the job is still queued or provisioning:
    // the server waits for the attempt to start.
    let mut cli = spawn_cli_follow(&server, &id);
    let mut raw = follow_request(&server, server.api_key(), &id, "").await;
    assert_eq!(raw.status(), 200);
    assert_eq!(raw.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(raw.headers()["x-grid-attempt"], "1");
    assert!(raw.headers().get("content-length").is_none(), "a streamed answer has no length");

    // The raw stream's first chunk is the first line, while the job runs.
    let first = tokio::time::timeout(JOB_TIMEOUT, raw.chunk())
        .await
        .unwrap_or_else(|_| server.fail("no first chunk from the followed log"))
        .unwrap_or_else(|e| server.fail(&format!("follow body: {e}")))
        .unwrap_or_else(|| server.fail("the followed log ended before its first line"));
    assert_eq!(phase(&server, &id).await, "RUNNING", "the first line came before the attempt ended");
    assert_eq!(&first[..], b"first\n");

    // So does the CLI's first printed line.
    let line = tokio::time::timeout(JOB_TIMEOUT, cli.lines.recv())
        .await
        .unwrap_or_else(|_| server.fail("the CLI printed no first line"))
        .unwrap_or_else(|| server.fail("the CLI ended before its first line"));
    assert_eq!(phase(&server, &id).await, "RUNNING", "the CLI printed the first line before the attempt ended");
    assert_eq!(line, "first\n");

    // The raw stream ends after the attempt, with every line once.
    let mut got = first.to_vec();
    loop {
        match tokio::time::timeout(JOB_TIMEOUT, raw.chunk()).await {
            Ok(Ok(Some(chunk))) => got.extend_from_slice(&chunk),
            Ok(Ok(None)) => break,
            Ok(Err(e)) => server.fail(&format!("the followed log broke off: {e}")),
            Err(_) => server.fail("the followed log did not end"),
        }
    }
    assert_eq!(String::from_utf8_lossy(&got), WHOLE);
    assert_eq!(phase(&server, &id).await, "SUCCEEDED", "the stream ended once the attempt had ended");

    // The CLI prints the rest and exits 0.
    let mut printed = line;
    while let Some(line) =
        tokio::time::timeout(JOB_TIMEOUT, cli.lines.recv()).await.unwrap_or_else(|_| server.fail("the CLI did not end"))
    {
        printed.push_str(&line);
    }
    let status = cli.child.wait().expect("wait for grid");
    let stderr = cli.stderr.join().unwrap_or_default();
    assert!(status.success(), "grid job logs --follow exited {status}: {stderr}");
    assert_eq!(printed, WHOLE, "{stderr}");

    // What was followed is the published log, byte for byte.
    let published = server.get(&format!("/jobs/{id}/logs")).await;
    assert_eq!((published.status, published.text.as_str()), (200, WHOLE), "{published}");
    wait_container_removed(&id, 1).await;
}

#[tokio::test]
async fn following_an_ended_attempt_answers_its_published_log_and_others_jobs_are_unknown() {
    let server = start_compute_server();
    let id = job_id(&submit_job(&server, &sh_job("echo done")).await);
    assert_eq!(wait_finished(&server, &id).await["phase"], "SUCCEEDED");

    // An ended attempt: its published log with the headers of a plain read.
    let plain = server.get(&format!("/jobs/{id}/logs")).await;
    for query in ["", "&attempt=1"] {
        let r = follow_request(&server, server.api_key(), &id, query).await;
        assert_eq!(r.status(), 200);
        for h in ["x-grid-attempt", "x-grid-artifact-id", "x-grid-logs-truncated", "content-type"] {
            assert_eq!(r.headers().get(h).map(|v| v.to_str().unwrap().to_string()).as_deref(), plain.header(h), "{h}");
        }
        assert_eq!(r.text().await.unwrap(), "done\n");
    }
    // follow=false is the plain read; bad values and unknown parameters are 400.
    let r = server.get(&format!("/jobs/{id}/logs?follow=false")).await;
    assert_eq!(
        (r.status, r.text.as_str(), r.header("x-grid-artifact-id")),
        (200, "done\n", plain.header("x-grid-artifact-id"))
    );
    for q in ["?follow=yes", "?follow=true&follow=true", "?follow=true&tail=1", "?follow=true&attempt=0"] {
        assert_error(&server.get(&format!("/jobs/{id}/logs{q}")).await, 400, "INVALID_LOG_QUERY");
    }
    // An attempt that never ran has no log.
    let r = follow_request(&server, server.api_key(), &id, "&attempt=2").await;
    assert_eq!(r.status(), 404);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"], "LOGS_NOT_AVAILABLE");

    // Another account's job, running or not, is an unknown job, as everywhere.
    let running = job_id(&submit_job(&server, &job_body(&["sleep", "30"])).await);
    wait_running(&server, &running).await;
    let (_, other) = server.create_account("other", 1_000_000);
    for job in [&id, &running, &"cj_doesnotexist".to_string()] {
        let r = server.get_as(Some(&other), &format!("/jobs/{job}/logs?follow=true")).await;
        assert_error(&r, 404, "unknown job");
    }
    let r = server.get_as(None, &format!("/jobs/{running}/logs?follow=true")).await;
    assert_eq!(r.status, 401, "{r}");
    server.post(&format!("/jobs/{running}/cancel"), &json!({})).await;
    assert_eq!(wait_finished(&server, &running).await["phase"], "CANCELLED");
    wait_container_removed(&running, 1).await;
    wait_container_removed(&id, 1).await;
}

/// The SDK's streaming call sees the first piece of output while the job runs.
#[tokio::test]
async fn sdk_follow_job_logs_calls_back_as_output_comes() {
    let server = start_compute_server();
    wait_finished(&server, &job_id(&submit_job(&server, &sh_job("true")).await)).await;
    let id = job_id(&submit_job(&server, &sh_job(SCRIPT)).await);
    let client = server.client();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let following = {
        let (client, id) = (client.clone(), id.clone());
        tokio::spawn(async move { client.follow_job_logs(&id, None, |chunk| drop(tx.send(chunk.to_vec()))).await })
    };
    let first = tokio::time::timeout(JOB_TIMEOUT, rx.recv())
        .await
        .unwrap_or_else(|_| server.fail("no output from follow_job_logs"))
        .unwrap_or_else(|| server.fail("follow_job_logs ended before any output"));
    assert_eq!(client.job(&id).await.unwrap().phase.as_str(), "RUNNING");
    assert_eq!(first, b"first\n");
    let followed = tokio::time::timeout(JOB_TIMEOUT, following)
        .await
        .unwrap_or_else(|_| server.fail("follow_job_logs did not end"))
        .unwrap()
        .unwrap_or_else(|e| server.fail(&format!("follow_job_logs: {e}")));
    let mut all = first;
    while let Ok(chunk) = rx.try_recv() {
        all.extend(chunk);
    }
    assert_eq!(String::from_utf8_lossy(&all), WHOLE);
    assert_eq!((followed.attempt, followed.byte_length), (1, WHOLE.len() as u64));
    assert_eq!(client.job(&id).await.unwrap().phase.as_str(), "SUCCEEDED");
    wait_container_removed(&id, 1).await;
}
