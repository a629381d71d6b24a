//! Session latency: time from asking for a browser to its first CDP answer,
//! three ways in one run, everything on 127.0.0.1.
//!
//!     bench_sessions [--leases N] [--warm W] [--gap-ms G] [--browserless WS_URL] [--chromium PATH] [--timeout-secs S]
//!
//! - Grid: `grid-server serve --warm-sessions W`; per lease, from sending
//!   POST /sessions to the answer of `Browser.getVersion` sent over the
//!   `webSocketDebuggerUrl` of `{cdpUrl}/json/version` (the way Puppeteer
//!   connects; the grid holds the connection until the session runs). Each
//!   session is released after its answer, then G ms pass (unmeasured) so
//!   the warm pool can refill, as between a lessee's leases.
//! - Browserless: from opening `ws://127.0.0.1:3999/chromium?token=peer`
//!   (a fresh browser per connection) to the answer of `Browser.getVersion`
//!   (start it with `bash ../shared/peers/browserless.sh`).
//! - Cold Chromium: from spawning Chromium with `--remote-debugging-port=0`
//!   (the grid's headless flags, a fresh user-data dir) to the answer of
//!   `Browser.getVersion` on the socket it announces.
//!
//! Prints p50 and p95 (nearest rank) of N runs of each, and the grid's
//! ratios to the other two (below 1: the grid answers sooner).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use grid_tests::cdp::{self, Cdp};
use grid_tests::http::http_client;
use grid_tests::server::{GridServer, ServerOptions};

struct Config {
    leases: usize,
    warm: u32,
    gap: Duration,
    browserless: String,
    chromium: String,
    timeout: Duration,
}

fn parse_args() -> Config {
    let mut c = Config {
        leases: 30,
        warm: 2,
        gap: Duration::from_millis(1_500),
        browserless: "ws://127.0.0.1:3999/chromium?token=peer".into(),
        chromium: "/usr/bin/chromium".into(),
        timeout: Duration::from_secs(600),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage(&format!("{arg} needs a value")));
        let number = |v: String| -> u64 { v.parse().unwrap_or_else(|e| usage(&format!("{v}: {e}"))) };
        match arg.as_str() {
            "--leases" => c.leases = number(value()) as usize,
            "--warm" => c.warm = number(value()) as u32,
            "--gap-ms" => c.gap = Duration::from_millis(number(value())),
            "--browserless" => c.browserless = value(),
            "--chromium" => c.chromium = value(),
            "--timeout-secs" => c.timeout = Duration::from_secs(number(value())),
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if c.leases == 0 {
        usage("--leases must be positive");
    }
    c
}

fn usage(problem: &str) -> ! {
    if !problem.is_empty() {
        eprintln!("bench_sessions: {problem}");
    }
    eprintln!(
        "usage: bench_sessions [--leases N] [--warm W] [--gap-ms G] [--browserless WS_URL] [--chromium PATH] [--timeout-secs S]"
    );
    std::process::exit(2)
}

/// Sorted samples in milliseconds.
struct Figures {
    ms: Vec<f64>,
}

impl Figures {
    fn new(mut ms: Vec<f64>) -> Figures {
        ms.sort_by(f64::total_cmp);
        Figures { ms }
    }

    /// Nearest-rank percentile.
    fn pct(&self, p: f64) -> f64 {
        let rank = ((p / 100.0) * self.ms.len() as f64).ceil().max(1.0) as usize;
        self.ms[rank.min(self.ms.len()) - 1]
    }

    fn line(&self, name: &str) -> String {
        format!(
            "{name:<34} n={:<3} p50 {:>7.0} ms  p95 {:>7.0} ms  min {:>6.0}  max {:>6.0}",
            self.ms.len(),
            self.pct(50.0),
            self.pct(95.0),
            self.ms[0],
            self.ms[self.ms.len() - 1]
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

async fn first_answer(ws: &str) -> Result<(), String> {
    let mut c = Cdp::connect(ws).await.map_err(|e| format!("connect {ws}: {e:?}"))?;
    let v = c.call("Browser.getVersion", json!({}), None).await?;
    if v["product"].as_str().is_none() {
        return Err(format!("Browser.getVersion without product: {v}"));
    }
    Ok(())
}

async fn grid_runs(cfg: &Config) -> Result<Figures, String> {
    let server = GridServer::start(ServerOptions {
        extra_args: vec!["--warm-sessions".into(), cfg.warm.to_string()],
        ..ServerOptions::default()
    });
    let http = http_client();
    // Let the warm pool fill (both profiles) before the first lease.
    tokio::time::sleep(Duration::from_secs(2 * u64::from(cfg.warm)) + cfg.gap).await;
    let mut samples = Vec::new();
    for i in 0..cfg.leases {
        let start = Instant::now();
        let r = server.post("/sessions", &json!({"ttlMinutes": 5})).await;
        if r.status != 201 {
            return Err(format!("lease {i}: {r}"));
        }
        let (id, cdp_url) = (r.json["sessionId"].as_str().unwrap_or(""), r.json["cdpUrl"].as_str().unwrap_or(""));
        let ws = cdp::ws_url(&http, cdp_url).await?;
        first_answer(&ws).await?;
        samples.push(ms(start.elapsed()));
        let d = server.request(reqwest::Method::DELETE, &format!("/sessions/{id}"), Some(server.api_key()), None).await;
        if d.status != 204 {
            return Err(format!("release {id}: {d}"));
        }
        tokio::time::sleep(cfg.gap).await;
    }
    Ok(Figures::new(samples))
}

async fn browserless_runs(cfg: &Config) -> Result<Figures, String> {
    let mut samples = Vec::new();
    for _ in 0..cfg.leases {
        let start = Instant::now();
        first_answer(&cfg.browserless).await?;
        samples.push(ms(start.elapsed()));
        // Browserless ends the browser when the socket closes; let it.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Ok(Figures::new(samples))
}

/// Kills the browser's whole process group and reaps it.
fn kill_group(child: &mut Child) {
    // SAFETY: kill(2) on the group of a child we spawned and have not reaped.
    unsafe {
        libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
    }
    let _ = child.wait();
}

async fn cold_runs(cfg: &Config) -> Result<Figures, String> {
    use std::os::unix::process::CommandExt;
    let mut samples = Vec::new();
    for i in 0..cfg.leases {
        let dir = tempfile::Builder::new().prefix("bench-chromium-").tempdir().map_err(|e| e.to_string())?;
        let start = Instant::now();
        let mut child = Command::new(&cfg.chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", dir.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", cfg.chromium))?;
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(ws) = line.strip_prefix("DevTools listening on ") {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(ws.trim().to_string());
                    }
                }
            }
        });
        let ws = match tokio::time::timeout(Duration::from_secs(30), rx).await {
            Ok(Ok(ws)) => ws,
            _ => {
                kill_group(&mut child);
                return Err(format!("cold start {i}: no DevTools address within 30 s"));
            }
        };
        let answered = first_answer(&ws).await;
        let elapsed = start.elapsed();
        kill_group(&mut child);
        answered?;
        samples.push(ms(elapsed));
    }
    Ok(Figures::new(samples))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let cfg = parse_args();
    let run = async {
        eprintln!("==> grid: {} leases, --warm-sessions {}, {:?} between leases", cfg.leases, cfg.warm, cfg.gap);
        let grid = grid_runs(&cfg).await;
        eprintln!("==> browserless: {} connections to {}", cfg.leases, cfg.browserless);
        let browserless = browserless_runs(&cfg).await;
        eprintln!("==> cold chromium: {} starts of {}", cfg.leases, cfg.chromium);
        let cold = cold_runs(&cfg).await;
        (grid, browserless, cold)
    };
    let Ok((grid, browserless, cold)) = tokio::time::timeout(cfg.timeout, run).await else {
        eprintln!("bench_sessions: not finished within {:?}", cfg.timeout);
        std::process::exit(1)
    };
    println!("time to first CDP answer (Browser.getVersion), 127.0.0.1:");
    let grid = match grid {
        Ok(f) => f,
        Err(e) => {
            eprintln!("bench_sessions: grid: {e}");
            std::process::exit(1)
        }
    };
    println!("{}", grid.line("grid (POST /sessions → answer)"));
    for (name, other) in [("browserless (connect → answer)", &browserless), ("cold chromium (spawn → answer)", &cold)]
    {
        match other {
            Ok(f) => {
                println!("{}", f.line(name));
                println!(
                    "  grid / {:<30} p50 {:.2}x  p95 {:.2}x",
                    name.split(" (").next().unwrap_or(name),
                    grid.pct(50.0) / f.pct(50.0),
                    grid.pct(95.0) / f.pct(95.0)
                );
            }
            Err(e) => println!("{name:<34} unavailable: {e}"),
        }
    }
}
