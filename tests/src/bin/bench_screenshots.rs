//! Screenshots per minute: the grid's `capture` script against Browserless's
//! `POST /chromium/screenshot`, same local pages (each runs a little
//! JavaScript), same concurrency, same run. Everything stays on 127.0.0.1.
//!
//!     bench_screenshots [--items N] [--browsers B] [--pages P] [--profiles P1,P2] [--browserless URL] [--timeout-secs S]
//!
//! Grid: `grid-server serve --browsers B --pages-per-browser P --workers B*P`,
//! one capture batch of N `/js/{n}` URLs per profile, a fresh server each:
//! by default `native-headless-browser/v3` (Chromium's headless shell) then
//! `native-headless-browser/v2` (the full Chromium), both 800x600,
//! Browserless's default viewport.
//! Browserless: the same N URLs, B*P requests at a time (start it with
//! `bash ../shared/peers/browserless.sh`, CONC=B*P). While each side runs,
//! the summed RSS and PSS of all `chromium` processes are sampled every
//! 100 ms; the peaks are printed (PSS is what the machine pays: RSS counts
//! the pages Chromium's processes share once per process).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use grid_tests::server::{GridServer, ServerOptions};
use grid_tests::target::Target;

struct Config {
    items: usize,
    browsers: u32,
    pages: u32,
    profiles: Vec<String>,
    browserless: String,
    timeout: Duration,
}

fn parse_args() -> Config {
    let mut c = Config {
        items: 200,
        browsers: 2,
        pages: 2,
        profiles: vec!["native-headless-browser/v3".into(), "native-headless-browser/v2".into()],
        browserless: "http://127.0.0.1:3999".into(),
        timeout: Duration::from_secs(900),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage(&format!("{arg} needs a value")));
        let number = |v: String| -> u64 { v.parse().unwrap_or_else(|e| usage(&format!("{v}: {e}"))) };
        match arg.as_str() {
            "--items" => c.items = number(value()) as usize,
            "--browsers" => c.browsers = number(value()) as u32,
            "--pages" => c.pages = number(value()) as u32,
            "--profiles" => c.profiles = value().split(',').map(String::from).collect(),
            "--browserless" => c.browserless = value(),
            "--timeout-secs" => c.timeout = Duration::from_secs(number(value())),
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if c.items == 0 || c.browsers == 0 || c.pages == 0 {
        usage("--items, --browsers and --pages must be positive");
    }
    c
}

fn usage(problem: &str) -> ! {
    if !problem.is_empty() {
        eprintln!("bench_screenshots: {problem}");
    }
    eprintln!("usage: bench_screenshots [--items N] [--browsers B] [--pages P] [--browserless URL] [--timeout-secs S]");
    std::process::exit(2)
}

/// Memory of every process whose name starts with "chromium" (browser,
/// zygotes, renderers, GPU and utility processes), in bytes: summed VmRSS,
/// which counts the pages the processes share (Chromium's own code, the
/// zygote's heap) once per process, and summed PSS (`smaps_rollup`), which
/// divides each shared page among the processes sharing it, so the sum is
/// what the machine pays.
#[derive(Debug, Clone, Copy, Default)]
struct Memory {
    rss: u64,
    pss: u64,
}

fn chromium_memory() -> Memory {
    let mut total = Memory::default();
    let Ok(dir) = std::fs::read_dir("/proc") else { return total };
    let kb_of = |text: &str, field: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    for entry in dir.flatten() {
        if !entry.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
        let name = status.lines().next().unwrap_or("").trim_start_matches("Name:").trim();
        if !name.starts_with("chromium") {
            continue;
        }
        total.rss += kb_of(&status, "VmRSS:") * 1024;
        let rollup = std::fs::read_to_string(entry.path().join("smaps_rollup")).unwrap_or_default();
        total.pss += kb_of(&rollup, "Pss:") * 1024;
    }
    total
}

/// Samples `chromium_memory` once a second until the returned flag is set;
/// the peaks (RSS, PSS) land in the counters. Reading `smaps_rollup` walks
/// every page table of every process: sampled every 100 ms it took about 8%
/// of the 2-core machine (perf), slowing both sides; the working set at a
/// fixed concurrency is flat, so a second's sampling still finds its peak.
fn sample_peak() -> (Arc<AtomicBool>, Arc<[AtomicU64; 2]>) {
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let (s, p) = (stop.clone(), peak.clone());
    std::thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            let m = chromium_memory();
            p[0].fetch_max(m.rss, Ordering::Relaxed);
            p[1].fetch_max(m.pss, Ordering::Relaxed);
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    (stop, peak)
}

fn peak_of(peak: &[AtomicU64; 2]) -> Memory {
    Memory { rss: peak[0].load(Ordering::Relaxed), pss: peak[1].load(Ordering::Relaxed) }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

#[tokio::main]
async fn main() {
    let c = parse_args();
    let deadline = Instant::now() + c.timeout;
    let concurrency = (c.browsers * c.pages) as usize;
    let target = Target::start();
    let urls: Vec<String> = (0..c.items).map(|n| target.url(&format!("/js/{n}"))).collect();

    // ----- the grid, once per profile -----
    let mut grid = Vec::new();
    for profile in &c.profiles {
        let server = GridServer::start(ServerOptions {
            workers: Some(concurrency as u32),
            // The server's default spare browser, as operators run it.
            spare_browsers: None,
            initial_credit_micros: Some(1_000_000_000),
            extra_args: vec![
                "--browsers".into(),
                c.browsers.to_string(),
                "--pages-per-browser".into(),
                c.pages.to_string(),
            ],
            ..Default::default()
        });
        eprintln!(
            "bench: grid-server on {}, {} pages, {} browsers x {} pages, {profile}",
            server.base_url(),
            c.items,
            c.browsers,
            c.pages
        );
        let (stop, peak) = sample_peak();
        let started = Instant::now();
        let batch =
            server.submit_as(server.api_key(), &json!({"urls": urls, "script": "capture", "profileId": profile})).await;
        let done = server.wait_batch_done(&batch, deadline.saturating_duration_since(Instant::now())).await;
        let secs = started.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        let peak = peak_of(&peak);
        let ok = done["counts"]["completed"].as_u64().unwrap_or(0);
        let rate = ok as f64 * 60.0 / secs;
        println!(
            "grid {profile}: {ok}/{} screenshots in {secs:.1} s = {rate:.0}/min, peak chromium RSS {:.0} MiB, PSS {:.0} MiB ({:.0} MiB per concurrent capture)",
            c.items,
            mib(peak.rss),
            mib(peak.pss),
            mib(peak.pss) / concurrency as f64
        );
        drop(server);
        // Let the grid's browsers exit before measuring the next side.
        let quiet = Instant::now() + Duration::from_secs(10);
        while chromium_memory().rss > 0 && Instant::now() < quiet {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        grid.push(json!({
            "profileId": profile, "seconds": secs, "completed": ok, "perMinute": rate,
            "peakChromiumRssMiB": mib(peak.rss), "peakChromiumPssMiB": mib(peak.pss),
        }));
    }

    // ----- Browserless -----
    let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(120)).build().unwrap();
    let endpoint = format!("{}/chromium/screenshot?token=peer", c.browserless.trim_end_matches('/'));
    let probe = client.get(format!("{}/pressure?token=peer", c.browserless.trim_end_matches('/'))).send().await;
    if !probe.is_ok_and(|r| r.status().is_success()) {
        eprintln!(
            "bench: Browserless not reachable at {}; start it with bash ../shared/peers/browserless.sh",
            c.browserless
        );
        std::process::exit(1);
    }
    let (stop, peak) = sample_peak();
    let next = Arc::new(AtomicUsize::new(0));
    let ok = Arc::new(AtomicUsize::new(0));
    let urls = Arc::new(urls);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, endpoint, next, ok, urls) =
            (client.clone(), endpoint.clone(), next.clone(), ok.clone(), urls.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(url) = urls.get(i) else { break };
                if Instant::now() >= deadline {
                    break;
                }
                let body = json!({"url": url, "options": {"type": "png"}, "gotoOptions": {"waitUntil": "load"}});
                match client.post(&endpoint).json(&body).send().await {
                    Ok(r) if r.status().is_success() => {
                        if r.bytes().await.is_ok_and(|b| b.starts_with(b"\x89PNG")) {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok(r) => eprintln!("browserless: {} for {url}", r.status()),
                    Err(e) => eprintln!("browserless: {e} for {url}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("browserless task");
    }
    let peer_secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let peer_peak = peak_of(&peak);
    let peer_ok = ok.load(Ordering::Relaxed);
    let peer_rate = peer_ok as f64 * 60.0 / peer_secs;
    println!(
        "browserless: {peer_ok}/{} screenshots in {peer_secs:.1} s = {peer_rate:.0}/min, peak chromium RSS {:.0} MiB, PSS {:.0} MiB ({:.0} MiB per concurrent capture; {concurrency} concurrent)",
        c.items,
        mib(peer_peak.rss),
        mib(peer_peak.pss),
        mib(peer_peak.pss) / concurrency as f64
    );
    for g in grid.iter_mut() {
        let ratio = g["perMinute"].as_f64().unwrap_or(0.0) / peer_rate;
        println!("ratio grid {} / browserless: {ratio:.2}", g["profileId"].as_str().unwrap_or(""));
        g["ratio"] = json!(ratio);
    }
    println!(
        "{}",
        json!({
            "items": c.items, "browsers": c.browsers, "pagesPerBrowser": c.pages, "concurrency": concurrency,
            "grid": grid,
            "browserlessSeconds": peer_secs, "browserlessOk": peer_ok, "browserlessPerMinute": peer_rate,
            "browserlessPeakChromiumRssMiB": mib(peer_peak.rss), "browserlessPeakChromiumPssMiB": mib(peer_peak.pss),
        })
    );
}
