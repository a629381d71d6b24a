//! What recording a session costs, in one run: on one server, a session
//! leased without recording and then one with `"recording": true`, each
//! showing the same page that repaints on every animation frame (the
//! target's `/animated`: the most frames a recording takes) for
//! `--seconds S`. For each: the CPU time of the server and of every process
//! under it (the session's sandbox and Chromium), from /proc, over those S
//! seconds; for the recorded one also the replay page's bytes and frames.
//! Prints both, the CPU ratio, and the recording's bytes per minute
//! (docs/sessions.md, Recordings). `--static` shows a page of one colour
//! instead, which paints once: what an idle page costs.
//!
//!     bench_recording [--seconds S] [--static 1]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use grid_tests::bench::{count, cpu_ticks, parse, positive, ticks_per_second};
use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::sessions::{lease_running, release};
use grid_tests::target::Target;

/// The pids under `root` (its children, theirs, ...), `root` included.
fn tree(root: u32) -> Vec<u32> {
    let mut parent: HashMap<u32, u32> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else { continue };
        if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
            parent.insert(pid, ppid);
        }
    }
    let under = |mut pid: u32| loop {
        if pid == root {
            return true;
        }
        match parent.get(&pid) {
            Some(&p) if p != 0 && p != pid => pid = p,
            _ => return false,
        }
    };
    parent.keys().copied().filter(|&p| under(p)).collect()
}

/// CPU ticks of every process under `root` now, by pid.
fn ticks(root: u32) -> HashMap<u32, u64> {
    tree(root).into_iter().map(|p| (p, cpu_ticks(p))).collect()
}

/// Ticks spent between two readings: a process in both counts its growth,
/// one that started since counts all of its own.
fn spent(before: &HashMap<u32, u64>, after: &HashMap<u32, u64>) -> u64 {
    after.iter().map(|(pid, t)| t.saturating_sub(before.get(pid).copied().unwrap_or(0))).sum()
}

struct Run {
    cpu_secs: f64,
    /// The server process's own part of `cpu_secs`.
    server_cpu_secs: f64,
    wall_secs: f64,
    recording: Option<Value>,
}

async fn run(server: &GridServer, page: &str, seconds: u64, recording: bool) -> Run {
    let pid = server.pid().expect("the server runs");
    let (lease, mut cdp) = lease_running(server, json!({"ttlMinutes": 10, "recording": recording})).await;
    cdp.open_page(page).await.expect("the page");
    let (before, t0) = (ticks(pid), Instant::now());
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let (after, wall) = (ticks(pid), t0.elapsed());
    drop(cdp);
    release(server, &lease.id).await;
    let recording = if recording {
        let recording = grid_tests::wait::wait_for("the recording written", Duration::from_secs(60), || async {
            let r = server.get(&format!("/sessions/{}/recording", lease.id)).await;
            match r.status {
                200 => Ok(r.json),
                409 => Err(r.to_string()),
                _ => panic!("GET recording: {r}"),
            }
        })
        .await;
        Some(recording)
    } else {
        None
    };
    let server_ticks = after.get(&pid).copied().unwrap_or(0).saturating_sub(before.get(&pid).copied().unwrap_or(0));
    Run {
        cpu_secs: spent(&before, &after) as f64 / ticks_per_second(),
        server_cpu_secs: server_ticks as f64 / ticks_per_second(),
        wall_secs: wall.as_secs_f64(),
        recording,
    }
}

#[tokio::main]
async fn main() {
    let f = parse("bench_recording", &[positive("--seconds", 60), count("--static", 0)]);
    let seconds = f.get("--seconds");
    let target = Target::start();
    let (path, what) = match f.get("--static") {
        1 => ("/color/3366cc", "a page of one colour, painted once"),
        _ => ("/animated", "repaints every animation frame"),
    };
    let page = target.url(path);
    // No warm or pool browsers: only the measured session's runs.
    let server = GridServer::start(ServerOptions {
        warm_sessions: Some(0),
        extra_args: vec!["--browsers".into(), "0".into()],
        ..ServerOptions::default()
    });
    let plain = run(&server, &page, seconds, false).await;
    let recorded = run(&server, &page, seconds, true).await;
    let r = recorded.recording.clone().unwrap_or_default();
    let (bytes, frames) = (r["sizeBytes"].as_f64().unwrap_or(0.0), r["frames"].as_f64().unwrap_or(0.0));
    let minutes = recorded.wall_secs / 60.0;
    println!("page: {path} ({what}), {seconds} s per session, server + browser CPU");
    for (name, run) in [("unrecorded", &plain), ("recorded", &recorded)] {
        println!(
            "{name:>10}: {:.2} CPU s over {:.1} s ({:.1}% of one core), of which the server {:.2} s",
            run.cpu_secs,
            run.wall_secs,
            100.0 * run.cpu_secs / run.wall_secs,
            run.server_cpu_secs
        );
    }
    println!(
        "recording: {} bytes, {} frames ({:.1} frames/s), truncated {}",
        bytes,
        frames,
        frames / recorded.wall_secs,
        r["truncated"]
    );
    println!("bytes per minute: {:.0} ({:.2} MiB/min)", bytes / minutes, bytes / minutes / 1_048_576.0);
    println!("CPU ratio recorded/unrecorded: {:.2}", recorded.cpu_secs / plain.cpu_secs.max(1e-9));
}
