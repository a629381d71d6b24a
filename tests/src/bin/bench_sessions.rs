//! Session latency: time from asking for a browser to its first CDP answer,
//! three ways in one run, everything on 127.0.0.1.
//!
//!     bench_sessions [--leases N] [--warm W] [--gap-ms G] [--browserless WS_URL] [--chromium PATH] [--timeout-secs S]
//!
//! - Grid: `grid-server serve --warm-sessions W`; per lease, from sending
//!   POST /sessions to the answer of `Browser.getVersion` sent over the
//!   `webSocketDebuggerUrl` of `{cdpUrl}/json/version` (the way Puppeteer
//!   connects; the grid holds the connection until the session runs). Each
//!   session is released after its answer (unmeasured).
//! - Browserless: from opening `ws://127.0.0.1:3999/chromium?token=peer`
//!   (a fresh browser per connection) to the answer of `Browser.getVersion`
//!   (start it with `bash ../shared/peers/browserless.sh`).
//! - Cold Chromium: from spawning Chromium with `--remote-debugging-port=0`
//!   (the grid's headless flags, a fresh user-data dir) to the answer of
//!   `Browser.getVersion` on the socket it announces.
//!
//! The run is N rounds of one of each (so the three see the same machine
//! load), with G ms after each round in which the grid's warm pool refills,
//! as between a lessee's leases. Prints p50 and p95 (nearest rank) of each
//! side and the grid's ratios to the other two (below 1: the grid answers
//! sooner).

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

/// One lease: POST /sessions to the first answer through its cdpUrl; the
/// session is released afterwards (unmeasured).
async fn grid_once(server: &GridServer, http: &reqwest::Client) -> Result<f64, String> {
    let start = Instant::now();
    let r = server.post("/sessions", &json!({"ttlMinutes": 5})).await;
    if r.status != 201 {
        return Err(format!("lease: {r}"));
    }
    let (id, cdp_url) = (r.json["sessionId"].as_str().unwrap_or(""), r.json["cdpUrl"].as_str().unwrap_or(""));
    let ws = cdp::ws_url(http, cdp_url).await?;
    first_answer(&ws).await?;
    let elapsed = ms(start.elapsed());
    let d = server.request(reqwest::Method::DELETE, &format!("/sessions/{id}"), Some(server.api_key()), None).await;
    if d.status != 204 {
        return Err(format!("release {id}: {d}"));
    }
    Ok(elapsed)
}

/// One Browserless connection (a fresh browser) to its first answer.
async fn browserless_once(cfg: &Config) -> Result<f64, String> {
    let start = Instant::now();
    first_answer(&cfg.browserless).await?;
    Ok(ms(start.elapsed()))
}

/// Kills the browser's whole process group and reaps it.
fn kill_group(child: &mut Child) {
    // SAFETY: kill(2) on the group of a child we spawned and have not reaped.
    unsafe {
        libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
    }
    let _ = child.wait();
}

/// One cold Chromium: spawn to the first answer on the socket it announces.
async fn cold_once(cfg: &Config) -> Result<f64, String> {
    use std::os::unix::process::CommandExt;
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
            return Err("no DevTools address within 30 s".into());
        }
    };
    let answered = first_answer(&ws).await;
    let elapsed = start.elapsed();
    kill_group(&mut child);
    answered.map(|()| ms(elapsed))
}

/// Samples of the three sides, or the first error of each.
struct Runs {
    grid: Result<Vec<f64>, String>,
    browserless: Result<Vec<f64>, String>,
    cold: Result<Vec<f64>, String>,
}

fn push(side: &mut Result<Vec<f64>, String>, sample: Result<f64, String>) {
    if let Ok(samples) = side {
        match sample {
            Ok(ms) => samples.push(ms),
            Err(e) => *side = Err(e),
        }
    }
}

/// Rounds of one Browserless connection, one cold start and one lease, so
/// the three sides see the same machine load; the pause after each round
/// lets the grid's warm pool refill, as between a lessee's leases.
async fn run_rounds(cfg: &Config) -> Runs {
    let server = GridServer::start(ServerOptions { warm_sessions: Some(cfg.warm), ..ServerOptions::default() });
    let http = http_client();
    // Let the warm pool fill (both profiles) before the first lease.
    tokio::time::sleep(Duration::from_secs(2 * u64::from(cfg.warm)) + cfg.gap).await;
    let mut runs = Runs { grid: Ok(Vec::new()), browserless: Ok(Vec::new()), cold: Ok(Vec::new()) };
    for i in 0..cfg.leases {
        if runs.browserless.is_ok() {
            push(&mut runs.browserless, browserless_once(cfg).await);
        }
        if runs.cold.is_ok() {
            push(&mut runs.cold, cold_once(cfg).await);
        }
        push(&mut runs.grid, grid_once(&server, &http).await);
        if runs.grid.is_err() {
            break;
        }
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            eprint!("\r    round {}/{}", i + 1, cfg.leases);
        }
        tokio::time::sleep(cfg.gap).await;
    }
    eprintln!();
    runs
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let cfg = parse_args();
    eprintln!(
        "==> {} rounds of: a Browserless connection ({}), a cold {} start, a grid lease (--warm-sessions {}); {:?} after each round",
        cfg.leases, cfg.browserless, cfg.chromium, cfg.warm, cfg.gap
    );
    let Ok(runs) = tokio::time::timeout(cfg.timeout, run_rounds(&cfg)).await else {
        eprintln!("bench_sessions: not finished within {:?}", cfg.timeout);
        std::process::exit(1)
    };
    let grid = match runs.grid {
        Ok(samples) => Figures::new(samples),
        Err(e) => {
            eprintln!("bench_sessions: grid: {e}");
            std::process::exit(1)
        }
    };
    println!("time to first CDP answer (Browser.getVersion), 127.0.0.1:");
    println!("{}", grid.line("grid (POST /sessions → answer)"));
    for (name, other) in
        [("browserless (connect → answer)", runs.browserless), ("cold chromium (spawn → answer)", runs.cold)]
    {
        match other {
            Ok(samples) if !samples.is_empty() => {
                let f = Figures::new(samples);
                println!("{}", f.line(name));
                println!(
                    "  grid / {:<30} p50 {:.2}x  p95 {:.2}x",
                    name.split(" (").next().unwrap_or(name),
                    grid.pct(50.0) / f.pct(50.0),
                    grid.pct(95.0) / f.pct(95.0)
                );
            }
            Ok(_) => println!("{name:<34} no samples"),
            Err(e) => println!("{name:<34} unavailable: {e}"),
        }
    }
}
