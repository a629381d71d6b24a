//! API read throughput: `GET /jobs/{id}` on the grid against a bare hyper
//! handler answering a fixed JSON body of the same size, on the same machine,
//! in the same run.
//!
//!     bench_api_reads [--connections C] [--secs S] [--rate R]
//!
//! Starts `grid-server serve --admit-registry 127.0.0.1:5000/tools`
//! (GRID_SERVER_BIN; bench/api_reads.sh points it at the release build),
//! submits one analytical job and waits for its record to be final, then for
//! each side in turn:
//!
//! - closed loop: C connections (default 200), each sending the next request
//!   as soon as the last answered, for S seconds (default 10): requests/s and
//!   p50/p99 latency;
//! - open loop: R requests/s (default 1,000) spread over the same
//!   connections for S seconds: p50/p99 latency at that rate (what a client
//!   sees when the server is not saturated).
//!
//! Prints both sides and the ratio grid/bare, the CPU each side spent per
//! request of its closed loop (from /proc: the grid server plus the bench's
//! client against the bench process alone, whose handler and client share
//! it), which holds on a busy machine where requests/s do not, then one JSON
//! line with the figures. Needs scripts/compute-env.sh to have run (the job needs the
//! registry and the engine). Only 127.0.0.1 is contacted.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::json;

use grid_tests::bench::positive;
use grid_tests::jobs::{check_compute_env, compute_options, job_id, sh_job, submit_job, wait_finished};
use grid_tests::server::GridServer;

struct Config {
    connections: usize,
    secs: u64,
    rate: u64,
}

/// A hyper server answering every request with `body` as JSON: the floor a
/// Rust HTTP API cannot go below on this machine.
async fn bare_server(body: Bytes) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let body = body.clone();
            tokio::spawn(async move {
                let service = service_fn(move |_req| {
                    let body = body.clone();
                    async move {
                        let mut r = Response::new(Full::new(body));
                        *r.status_mut() = StatusCode::OK;
                        r.headers_mut().insert("content-type", "application/json".parse().expect("header"));
                        Ok::<_, Infallible>(r)
                    }
                });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    addr
}

/// CPU time (user + system) a process has used so far, from
/// `/proc/{pid}/stat`: the figure that holds on a busy machine, where
/// requests/s move with whatever else runs.
fn cpu_time(pid: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which may hold spaces but ends with ')'.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of stat(5); `fields` starts at 3.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_micros((ticks(11) + ticks(12)) * 1_000_000 / hz)
}

/// CPU per request of a saturated run: `server` (the grid's process, none
/// for the bare handler, which runs inside the bench) and the bench process
/// (its client, and for the bare side the handler too).
struct Cpu {
    server: Duration,
    bench: Duration,
}

async fn measured(server_pid: Option<u32>, run: impl std::future::Future<Output = Run>) -> (Run, Cpu) {
    let server = || server_pid.map_or(Duration::ZERO, |p| cpu_time(&p.to_string()));
    let (s0, b0) = (server(), cpu_time("self"));
    let run = run.await;
    let cpu = Cpu { server: server() - s0, bench: cpu_time("self") - b0 };
    (run, cpu)
}

impl Cpu {
    fn per_request_us(&self, run: &Run) -> (f64, f64) {
        let n = run.requests.max(1) as f64;
        (self.server.as_micros() as f64 / n, self.bench.as_micros() as f64 / n)
    }
}

struct Run {
    requests: usize,
    errors: usize,
    elapsed: Duration,
    latencies_us: Vec<u64>,
}

impl Run {
    fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile_ms(&mut self, p: f64) -> f64 {
        self.latencies_us.sort_unstable();
        if self.latencies_us.is_empty() {
            return f64::NAN;
        }
        let i = ((self.latencies_us.len() as f64 - 1.0) * p).round() as usize;
        self.latencies_us[i] as f64 / 1000.0
    }
}

/// Sends GETs to `url` over `connections` pooled connections for `secs`:
/// back to back (closed loop), or at `rate` per second overall (open loop).
async fn load(url: &str, key: Option<&str>, connections: usize, secs: u64, rate: Option<u64>) -> Run {
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(connections)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..connections {
        let (client, url, key) = (client.clone(), url.to_string(), key.map(str::to_string));
        // Open loop: each connection sends every `connections / rate`
        // seconds, offset so the sends spread evenly.
        let interval = rate.map(|r| Duration::from_secs_f64(connections as f64 / r as f64));
        tasks.spawn(async move {
            let mut latencies = vec![];
            let mut errors = 0;
            let mut next = start + interval.map_or(Duration::ZERO, |i| i.mul_f64(n as f64 / connections as f64));
            while Instant::now() < end {
                if interval.is_some() {
                    tokio::time::sleep_until(next.into()).await;
                }
                let t0 = Instant::now();
                let mut req = client.get(&url);
                if let Some(k) = &key {
                    req = req.header("x-api-key", k);
                }
                match req.send().await {
                    Ok(r) if r.status().is_success() => {
                        let _ = r.bytes().await;
                        latencies.push(t0.elapsed().as_micros() as u64);
                    }
                    _ => errors += 1,
                }
                if let Some(i) = interval {
                    next += i;
                }
            }
            (latencies, errors)
        });
    }
    let mut run = Run { requests: 0, errors: 0, elapsed: Duration::ZERO, latencies_us: vec![] };
    while let Some(done) = tasks.join_next().await {
        let (latencies, errors) = done.expect("load task");
        run.requests += latencies.len();
        run.errors += errors;
        run.latencies_us.extend(latencies);
    }
    run.elapsed = start.elapsed();
    run
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let flags = grid_tests::bench::parse(
        "bench_api_reads",
        &[positive("--connections", 200), positive("--secs", 10), positive("--rate", 1000)],
    );
    let config = Config {
        connections: flags.get("--connections") as usize,
        secs: flags.get("--secs"),
        rate: flags.get("--rate"),
    };
    check_compute_env();
    // The bench measures the read path, not the rate limit (docs/limits.md).
    let mut opts = compute_options();
    opts.extra_args.extend(["--rate-limit-per-second", "1000000", "--rate-limit-burst", "1000000"].map(String::from));
    let server = GridServer::start(opts);
    let job = job_id(&submit_job(&server, &sh_job("echo bench")).await);
    wait_finished(&server, &job).await;
    let grid_url = format!("{}/jobs/{job}", server.base_url());
    let body = reqwest::Client::new()
        .get(&grid_url)
        .header("x-api-key", server.api_key())
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .expect("GET /jobs/{id}")
        .bytes()
        .await
        .expect("record");
    let bare_url = format!("http://{}/jobs/{job}", bare_server(body.clone()).await);
    println!(
        "==> GET /jobs/{{id}} ({} bytes): {} connections, {} s per run; then {} requests/s",
        body.len(),
        config.connections,
        config.secs,
        config.rate
    );

    let (c, s, r) = (config.connections, config.secs, config.rate);
    let (mut grid, grid_cpu) = measured(server.pid(), load(&grid_url, Some(server.api_key()), c, s, None)).await;
    let (mut bare, bare_cpu) = measured(None, load(&bare_url, None, c, s, None)).await;
    let mut grid_paced = load(&grid_url, Some(server.api_key()), c, s, Some(r)).await;
    let mut bare_paced = load(&bare_url, None, c, s, Some(r)).await;

    let line = |name: &str, run: &mut Run, paced: &mut Run| {
        println!(
            "{name:5} saturated: {:>8.0} req/s  p50 {:>6.2} ms  p99 {:>7.2} ms  errors {} | at {r}/s: p50 {:>6.2} ms  p99 {:>7.2} ms  errors {}",
            run.rps(),
            run.percentile_ms(0.50),
            run.percentile_ms(0.99),
            run.errors,
            paced.percentile_ms(0.50),
            paced.percentile_ms(0.99),
            paced.errors
        );
    };
    line("grid", &mut grid, &mut grid_paced);
    line("bare", &mut bare, &mut bare_paced);
    let ratio = grid.rps() / bare.rps();
    println!(
        "ratio grid/bare requests/s: {ratio:.2}x (goal >= 0.5x); grid p99 at {r}/s: {:.2} ms (goal < 5 ms)",
        grid_paced.percentile_ms(0.99)
    );
    let (grid_server_us, grid_client_us) = grid_cpu.per_request_us(&grid);
    let (_, bare_us) = bare_cpu.per_request_us(&bare);
    let cpu_ratio = bare_us / (grid_server_us + grid_client_us);
    println!(
        "CPU per request: grid {:.0} µs (server {grid_server_us:.0} + client {grid_client_us:.0}), bare {bare_us:.0} µs (handler and client): ratio {cpu_ratio:.2}x",
        grid_server_us + grid_client_us
    );
    println!(
        "{}",
        json!({
            "cpuPerRequestUs": {"gridServer": grid_server_us, "gridClient": grid_client_us, "bare": bare_us, "ratio": cpu_ratio},
            "bench": "api_reads",
            "bodyBytes": body.len(),
            "connections": c,
            "grid": {"rps": grid.rps(), "p50Ms": grid.percentile_ms(0.5), "p99Ms": grid.percentile_ms(0.99), "errors": grid.errors,
                     "pacedP50Ms": grid_paced.percentile_ms(0.5), "pacedP99Ms": grid_paced.percentile_ms(0.99)},
            "bare": {"rps": bare.rps(), "p50Ms": bare.percentile_ms(0.5), "p99Ms": bare.percentile_ms(0.99), "errors": bare.errors,
                     "pacedP50Ms": bare_paced.percentile_ms(0.5), "pacedP99Ms": bare_paced.percentile_ms(0.99)},
            "ratio": ratio,
            "rate": r,
        })
    );
}
