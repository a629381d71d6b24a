//! Analytical jobs against the real Docker Engine and the local registry
//! that `scripts/compute-env.sh` prepares: a server admitting
//! `127.0.0.1:5000/tools`, job bodies, polling, the engine's CLI, the
//! ledger, and the contract's charge formula computed independently.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use grid_core::time::Millis;
use serde_json::{json, Value};

use crate::http::Resp;
use crate::server::{GridServer, ServerOptions};
use crate::stored::LedgerEntry;

/// The test image (FROM scratch + static busybox), pushed by scripts/compute-env.sh.
pub const IMAGE: &str = "127.0.0.1:5000/tools/busybox:1";
/// What the test servers admit.
pub const ADMITTED: &str = "127.0.0.1:5000/tools";
/// How long a test waits for a short container job.
pub const JOB_TIMEOUT: Duration = Duration::from_secs(90);

/// Server options of the jobs tests: the suite's defaults plus the admitted registry.
pub fn compute_options() -> ServerOptions {
    ServerOptions { extra_args: vec!["--admit-registry".into(), ADMITTED.into()], ..ServerOptions::default() }
}

/// Checks that the Docker Engine and the registry are there (panicking with
/// the remedy when not), then starts a server admitting the registry.
pub fn start_compute_server() -> GridServer {
    check_compute_env();
    GridServer::start(compute_options())
}

/// Panics with what to run when the engine's socket or the registry is missing.
pub fn check_compute_env() {
    let socket = std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(str::to_string))
        .unwrap_or_else(|| "/var/run/docker.sock".into());
    if std::os::unix::net::UnixStream::connect(&socket).is_err() {
        panic!("no Docker Engine answers on {socket}: run scripts/compute-env.sh (scripts/test.sh does)");
    }
    if std::net::TcpStream::connect_timeout(&"127.0.0.1:5000".parse().unwrap(), Duration::from_secs(2)).is_err() {
        panic!("no registry on 127.0.0.1:5000: run scripts/compute-env.sh (scripts/test.sh does)");
    }
}

/// A key no other test (or earlier run against the same engine) uses.
pub fn unique_key(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{tag}-{}-{nanos}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// A valid POST /jobs body: the test image, `command`, 500m CPU, 256Mi
/// memory and storage, a 60 s deadline, a fresh idempotency key.
pub fn job_body(command: &[&str]) -> Value {
    json!({
        "image": IMAGE,
        "command": command,
        "resources": {
            "cpu": {"request": "500m", "limit": "500m"},
            "memory": {"request": "256Mi", "limit": "256Mi"},
            "ephemeralStorage": {"request": "256Mi", "limit": "256Mi"},
        },
        "runningDeadlineSeconds": 60,
        "capabilities": {"networkProfile": "none"},
        "env": {},
        "labels": {},
        "idempotencyKey": unique_key("job"),
    })
}

/// `["sh", "-c", script]` as a body.
pub fn sh_job(script: &str) -> Value {
    job_body(&["sh", "-c", script])
}

/// Reservation of 500m + 256Mi for 60 s: (20,000 + 1,600) µ€/h × 60 s.
pub const DEFAULT_RESERVATION: i64 = 360;

/// How far an engine-measured run (FinishedAt - StartedAt) may fall short
/// of the command's own sleep: the engine stamps StartedAt after the process
/// is already running, and each timestamp is cut to the millisecond.
pub const ENGINE_CLOCK_SLACK_MS: i64 = 100;

/// POST /jobs with `key`, resending while the answer is 503
/// COMPUTE_UNAVAILABLE (the engine connection comes up just after the
/// server starts; the contract says to resend with the same
/// idempotencyKey), for up to 20 s. Returns the first other answer.
pub async fn post_job_as(server: &GridServer, key: &str, body: &Value) -> Resp {
    crate::wait::wait_for("POST /jobs answered other than 503 COMPUTE_UNAVAILABLE", Duration::from_secs(20), || async {
        let r = server.post_as(Some(key), "/jobs", Some(body)).await;
        match r.status == 503 && r.error() == "COMPUTE_UNAVAILABLE" {
            true => Err(r.to_string()),
            false => Ok(r),
        }
    })
    .await
}

/// [`post_job_as`], asserting 202 with a new record (ACCEPTED, attempt 0).
pub async fn submit_job_as(server: &GridServer, key: &str, body: &Value) -> Value {
    let r = post_job_as(server, key, body).await;
    if r.status != 202 {
        server.fail(&format!("POST /jobs {body}: expected 202, got {r}"));
    }
    if r.json["phase"] != "ACCEPTED" || r.json["attempt"] != 0 {
        server.fail(&format!("a new job is ACCEPTED with attempt 0: {r}"));
    }
    r.json
}

pub async fn submit_job(server: &GridServer, body: &Value) -> Value {
    submit_job_as(server, server.api_key(), body).await
}

/// The jobId of a record.
pub fn job_id(record: &Value) -> String {
    record["jobId"].as_str().unwrap_or_else(|| panic!("record without jobId: {record}")).to_string()
}

/// GET /jobs/{id} with `key`, asserting 200.
pub async fn job_as(server: &GridServer, key: &str, id: &str) -> Value {
    let r = server.get_as(Some(key), &format!("/jobs/{id}")).await;
    if r.status != 200 {
        server.fail(&format!("GET /jobs/{id}: expected 200, got {r}"));
    }
    r.json
}

pub async fn job(server: &GridServer, id: &str) -> Value {
    job_as(server, server.api_key(), id).await
}

/// Polls GET /jobs/{id} until `done(record)`; returns it and every phase
/// seen on the way (in order, without repeats).
pub async fn wait_job(
    server: &GridServer,
    id: &str,
    timeout: Duration,
    done: impl Fn(&Value) -> bool,
) -> (Value, Vec<String>) {
    let what = format!("job {id}");
    server.watch(&what, "phase", timeout, Duration::from_millis(25), || job(server, id), done).await
}

pub fn is_finished(record: &Value) -> bool {
    matches!(record["phase"].as_str(), Some("SUCCEEDED" | "FAILED" | "TIMED_OUT" | "CANCELLED"))
}

/// Waits until the job's phase is final and the engine no longer has the
/// current attempt's container (it is removed right after its log is
/// published; a test that ended in between would leave it behind).
pub async fn wait_finished(server: &GridServer, id: &str) -> Value {
    let record = wait_job(server, id, JOB_TIMEOUT, is_finished).await.0;
    let attempt = record["attempt"].as_u64().unwrap_or(0) as u32;
    wait_container_removed(id, attempt).await;
    record
}

/// Polls until no container of the job's attempt is left on the engine.
pub async fn wait_container_removed(id: &str, attempt: u32) {
    if attempt == 0 {
        return;
    }
    let what = format!("container grid-{id}-{attempt} removed");
    crate::wait::wait_until(&what, Duration::from_secs(20), || match all_containers(id, attempt) {
        left if left.is_empty() => Ok(()),
        left => Err(format!("{left:?}")),
    })
    .await;
}

/// Waits until the job is RUNNING (its container started).
pub async fn wait_running(server: &GridServer, id: &str) -> Value {
    let started = |r: &Value| !matches!(r["phase"].as_str(), Some("ACCEPTED" | "QUEUED" | "PROVISIONING"));
    let (record, seen) = wait_job(server, id, JOB_TIMEOUT, started).await;
    if record["phase"] != "RUNNING" {
        server.fail(&format!("job {id} went past RUNNING unseen ({seen:?}): {record}"));
    }
    record
}

/// Runs the `docker` CLI; panics on a failure to spawn.
pub fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker").args(args).output().unwrap_or_else(|e| panic!("docker {args:?}: {e}"))
}

/// Ids of running containers of a job's attempt (`grid-<jobId>-<attempt>`).
pub fn running_containers(job_id: &str, attempt: u32) -> Vec<String> {
    let filter = format!("name=^/?grid-{job_id}-{attempt}$");
    let out = docker(&["ps", "-q", "--filter", &filter]);
    assert!(out.status.success(), "docker ps: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect()
}

/// Ids of containers of a job's attempt, running or not.
pub fn all_containers(job_id: &str, attempt: u32) -> Vec<String> {
    let filter = format!("name=^/?grid-{job_id}-{attempt}$");
    let out = docker(&["ps", "-aq", "--filter", &filter]);
    assert!(out.status.success(), "docker ps -a: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect()
}

/// The ledger of a job settled from its first reservation: `reserved`
/// held, `charge` charged, the rest released (as `stored().job_ledger`
/// reads it).
pub fn settled_once(job_id: &str, reserved: i64, charge: i64) -> Vec<LedgerEntry> {
    let s = format!("{job_id}/r1");
    vec![
        ("reserve".into(), reserved, s.clone()),
        ("charge".into(), charge, s.clone()),
        ("release".into(), reserved - charge, s),
    ]
}

/// The published log file of an attempt: DATA_DIR/logs/<jobId>/attempt-<n>-<sha prefix>.
pub fn log_file(server: &GridServer, job_id: &str, attempt: u32) -> PathBuf {
    let dir = server.data_dir().join("logs").join(job_id);
    let prefix = format!("attempt-{attempt}-");
    let found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| server.fail(&format!("read {}: {e}", dir.display())))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix)))
        .collect();
    match found.as_slice() {
        [one] => one.clone(),
        other => server.fail(&format!("expected one {prefix}* in {}, found {other:?}", dir.display())),
    }
}

/// The contract's rate, computed here from its words rather than taken from
/// grid-core: (vCPU × 40,000 µ€ + GiB × 6,400 µ€) per hour × `millis`, exact,
/// rounded once, half up.
pub fn rate_micros(cpu_millis: u64, memory_bytes: u64, millis: i64) -> i64 {
    let gib: u128 = 1 << 30;
    let per_hour_times_1000_gib = u128::from(cpu_millis) * 40_000 * gib + u128::from(memory_bytes) * 6_400 * 1_000;
    let numerator = per_hour_times_1000_gib * millis.max(0) as u128;
    let denominator = 1_000 * gib * 3_600_000;
    ((2 * numerator + denominator) / (2 * denominator)) as i64
}

/// An instant of the record.
pub fn millis(v: &Value) -> i64 {
    Millis::parse_iso(v.as_str().unwrap_or_else(|| panic!("not a timestamp: {v}")))
        .unwrap_or_else(|| panic!("not an ISO 8601 timestamp: {v}"))
        .0
}

/// Run time of an attempt entry: its RUNNING timestamp (the engine's
/// StartedAt) to its PUBLISHING timestamp (the engine's FinishedAt).
pub fn run_millis(attempt: &Value) -> i64 {
    let ts = &attempt["phaseTimestamps"];
    millis(&ts["PUBLISHING"]) - millis(&ts["RUNNING"])
}

/// What an attempt entry is charged: the rate on the requested CPU and
/// memory × run time, capped at the deadline and the reservation.
pub fn expected_charge(attempt: &Value, cpu_millis: u64, memory_bytes: u64, deadline_secs: i64) -> i64 {
    let run = run_millis(attempt).min(deadline_secs * 1_000);
    rate_micros(cpu_millis, memory_bytes, run).min(rate_micros(cpu_millis, memory_bytes, deadline_secs * 1_000))
}

pub const MI: u64 = 1 << 20;
pub const GI: u64 = 1 << 30;
