//! Submit-to-RUNNING latency of analytical jobs against `docker run --rm` of
//! the same image, in the same run, on the same engine.
//!
//!     bench_job_latency [--jobs N] [--warmup W]
//!
//! Starts `grid-server serve --admit-registry 127.0.0.1:5000/tools`
//! (GRID_SERVER_BIN, else target/debug/grid-server; bench/job_latency.sh
//! points it at the release build). Then, N times, alternating:
//!
//! - grid: POST /jobs (`sh -c 'echo started'`, 250m, 256Mi) and poll
//!   GET /jobs/{id} until the job has a RUNNING timestamp; the latency is
//!   that timestamp (the engine's StartedAt of the container) minus the
//!   instant before the POST was sent. Waits until the job has finished
//!   before the next one, so runs never overlap.
//! - docker: spawn `docker run --rm --network none --memory 256m --cpus 0.25
//!   IMAGE sh -c 'echo started'`; the latency is the instant its first
//!   output line arrives minus the instant before the spawn.
//!
//! W runs of each are made first and not counted. Prints p50 and p95 of both,
//! the ratios grid/docker, and one JSON line with the figures.
//! Needs scripts/compute-env.sh to have run. Only 127.0.0.1 is contacted.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use grid_tests::bench::{count, positive};
use grid_tests::jobs::{
    check_compute_env, compute_options, is_finished, job_id, millis, sh_job, submit_job, wait_container_removed, IMAGE,
};
use grid_tests::server::GridServer;

struct Config {
    jobs: usize,
    warmup: usize,
}

fn wall_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_millis() as i64
}

/// One grid job: milliseconds from just before POST /jobs to its RUNNING timestamp.
async fn grid_once(server: &GridServer) -> i64 {
    let mut body = sh_job("echo started");
    body["resources"]["cpu"] = json!({"request": "250m", "limit": "250m"});
    let t0 = wall_ms();
    let id = job_id(&submit_job(server, &body).await);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut running_at = None;
    loop {
        let r = server.get(&format!("/jobs/{id}")).await;
        if r.status != 200 {
            server.fail(&format!("GET /jobs/{id}: {r}"));
        }
        if running_at.is_none() {
            running_at = r.json["phaseTimestamps"].get("RUNNING").map(millis);
        }
        if is_finished(&r.json) {
            if r.json["phase"] != "SUCCEEDED" {
                server.fail(&format!("bench job did not succeed: {r}"));
            }
            break;
        }
        if Instant::now() >= deadline {
            server.fail(&format!("job {id} not finished within 120 s: {r}"));
        }
        tokio::time::sleep(Duration::from_millis(if running_at.is_some() { 20 } else { 5 })).await;
    }
    let running = match running_at {
        Some(t) => t,
        // The job finished between two polls: its attempt keeps its RUNNING timestamp.
        None => millis(&server.get(&format!("/jobs/{id}")).await.json["attempts"][0]["phaseTimestamps"]["RUNNING"]),
    };
    wait_container_removed(&id, 1).await;
    running - t0
}

/// One `docker run --rm`: milliseconds from just before the spawn to its first output line.
fn docker_once() -> i64 {
    let t0 = Instant::now();
    let mut child = Command::new("docker")
        .args([
            "run",
            "--rm",
            "--network",
            "none",
            "--memory",
            "256m",
            "--cpus",
            "0.25",
            IMAGE,
            "sh",
            "-c",
            "echo started",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn docker run: {e}"));
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line).expect("read docker run output");
    let elapsed = t0.elapsed().as_millis() as i64;
    let status = child.wait().expect("wait for docker run");
    assert!(status.success() && line.trim() == "started", "docker run: {status}, output {line:?}");
    elapsed
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[i64], p: f64) -> i64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

#[tokio::main]
async fn main() {
    let flags = grid_tests::bench::parse("bench_job_latency", &[positive("--jobs", 50), count("--warmup", 2)]);
    let config = Config { jobs: flags.get("--jobs") as usize, warmup: flags.get("--warmup") as usize };
    check_compute_env();
    let server = GridServer::start(compute_options());
    eprintln!(
        "bench: grid-server on {}, {} jobs (+{} warm-up) each way, image {IMAGE}",
        server.base_url(),
        config.jobs,
        config.warmup
    );
    for _ in 0..config.warmup {
        grid_once(&server).await;
        docker_once();
    }
    let (mut grid, mut docker) = (Vec::with_capacity(config.jobs), Vec::with_capacity(config.jobs));
    for i in 0..config.jobs {
        grid.push(grid_once(&server).await);
        docker.push(tokio::task::block_in_place(docker_once));
        if (i + 1) % 10 == 0 {
            eprintln!("bench: {}/{} pairs", i + 1, config.jobs);
        }
    }
    grid.sort_unstable();
    docker.sort_unstable();
    let (g50, g95, d50, d95) =
        (percentile(&grid, 50.0), percentile(&grid, 95.0), percentile(&docker, 50.0), percentile(&docker, 95.0));
    let ratio = |a: i64, b: i64| a as f64 / b.max(1) as f64;
    println!("grid   submit-to-RUNNING: p50 {g50} ms, p95 {g95} ms (min {}, max {})", grid[0], grid[grid.len() - 1]);
    println!(
        "docker run --rm to first output: p50 {d50} ms, p95 {d95} ms (min {}, max {})",
        docker[0],
        docker[docker.len() - 1]
    );
    println!("ratio grid/docker: p50 {:.2}, p95 {:.2}", ratio(g50, d50), ratio(g95, d95));
    println!(
        "{}",
        json!({
            "bench": "job_latency",
            "jobs": config.jobs,
            "gridP50Ms": g50, "gridP95Ms": g95,
            "dockerP50Ms": d50, "dockerP95Ms": d95,
            "ratioP50": (ratio(g50, d50) * 1000.0).round() / 1000.0,
            "ratioP95": (ratio(g95, d95) * 1000.0).round() / 1000.0,
        })
    );
}
