//! Prometheus metrics (docs/operations.md lists each and what to alert on).
//!
//! A leaf: it knows no other part of the server. Counters and histograms
//! are bumped where things happen, through one process-wide registry
//! (`get()`); gauges of state that lives elsewhere (the database's queue
//! depth, job phases, live sessions and ledger totals, the capture workers,
//! the browser pool) are set by their owners, each registered once by
//! `main` as a `GaugeSource` that the registry asks to refresh its gauges
//! when scraped, so they are never out of step. Served by `serve_metrics`
//! on `--metrics-listen`, never on the API port.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::future::BoxFuture;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};
use tokio::net::TcpListener;
use tokio::sync::watch;

use grid_core::catalog::Script;
use grid_core::ledger::EntryKind;
use grid_core::routes::Route;
use grid_core::session::EndCause;
use grid_core::wire::job::{JobPhase, TerminationReason};

/// An owner of gauges read at scrape time: it sets them (through `get()`)
/// when asked, just before the metrics are rendered.
pub trait GaugeSource: Send + Sync {
    fn refresh(&self) -> BoxFuture<'_, ()>;
}

/// Every metric of the server.
pub struct Metrics {
    registry: Registry,
    /// The process's own figures (CPU, memory, file descriptors, start
    /// time), under their conventional `process_` names, so not in the
    /// `grid_` registry.
    process: Registry,
    pub http_requests: IntCounterVec,
    pub http_seconds: HistogramVec,
    pub connections_cut: IntCounterVec,
    pub items_ended: IntCounterVec,
    pub item_seconds: HistogramVec,
    pub job_attempts_ended: IntCounterVec,
    pub sessions_ended: IntCounterVec,
    pub session_lease_to_ready_seconds: Histogram,
    pub browser_starts: IntCounterVec,
    pub browser_kills: IntCounter,
    pub engine_errors: IntCounterVec,
    pub registry_errors: IntCounter,
    pub credential_timeouts: IntCounter,
    pub queue_announcements: IntCounterVec,
    pub queue: IntGaugeVec,
    pub jobs: IntGaugeVec,
    pub sessions: IntGaugeVec,
    pub pool_pages: IntGaugeVec,
    pub capture_workers: IntGaugeVec,
    pub ledger_micros: IntGaugeVec,
    /// 1, labelled with this build's version and commit.
    pub build_info: IntGaugeVec,
    /// Who sets the gauges at scrape time.
    sources: Mutex<Vec<Arc<dyn GaugeSource>>>,
}

const NO_LABELS: &[&str] = &[];

/// Seconds, from a millisecond to ten minutes.
const LATENCY_BUCKETS: &[f64] =
    &[0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 600.0];

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| unreachable_metric(name, e));
    registry.register(Box::new(c.clone())).unwrap_or_else(|e| unreachable_metric(name, e));
    c
}

fn gauge(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| unreachable_metric(name, e));
    registry.register(Box::new(g.clone())).unwrap_or_else(|e| unreachable_metric(name, e));
    g
}

fn histogram(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    let opts = HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec());
    let h = HistogramVec::new(opts, labels).unwrap_or_else(|e| unreachable_metric(name, e));
    registry.register(Box::new(h.clone())).unwrap_or_else(|e| unreachable_metric(name, e));
    h
}

/// Metric definitions are constants of this file: a bad name or a duplicate
/// is a programming error found by the first unit test, not a runtime state.
fn unreachable_metric(name: &str, e: prometheus::Error) -> ! {
    panic!("metric {name} is defined wrongly: {e}")
}

impl Metrics {
    fn new() -> Metrics {
        let r = Registry::new_custom(Some("grid".into()), None).unwrap_or_else(|e| unreachable_metric("grid", e));
        Metrics {
            http_requests: counter(&r, "http_requests_total", "API requests by route, method and status.", &[
                "route", "method", "status",
            ]),
            http_seconds: histogram(&r, "http_request_duration_seconds", "API request latency by route.", &["route"]),
            connections_cut: counter(
                &r,
                "http_connections_cut_total",
                "API connections refused or closed by a limit (docs/limits.md), by reason.",
                &["reason"],
            ),
            items_ended: counter(
                &r,
                "item_attempts_total",
                "Capture item attempts by script and how the item stood after it (completed, delayed, failed).",
                &["script", "outcome"],
            ),
            item_seconds: histogram(&r, "item_attempt_duration_seconds", "Capture attempt run time by script.", &[
                "script",
            ]),
            job_attempts_ended: counter(
                &r,
                "job_attempts_ended_total",
                "Analytical job attempts by termination reason.",
                &["reason"],
            ),
            sessions_ended: counter(&r, "sessions_ended_total", "Browser sessions ended, by cause.", &["cause"]),
            session_lease_to_ready_seconds: histogram(
                &r,
                "session_lease_to_ready_seconds",
                "From POST /sessions to the browser attested and running.",
                &[],
            )
            .with_label_values(NO_LABELS),
            browser_starts: counter(&r, "browser_starts_total", "Chromium processes started, by use.", &["use"]),
            browser_kills: counter(&r, "browser_kills_total", "Pool browsers killed to be replaced (crash, hang, age).", &[])
                .with_label_values(NO_LABELS),
            engine_errors: counter(&r, "docker_errors_total", "Docker Engine calls that failed, by call.", &["call"]),
            registry_errors: counter(&r, "registry_errors_total", "Image resolutions that failed at the registry.", &[])
                .with_label_values(NO_LABELS),
            credential_timeouts: counter(
                &r,
                "credential_check_timeouts_total",
                "Credential checks that found the account database busy (answered 503).",
                &[],
            )
            .with_label_values(NO_LABELS),
            queue_announcements: counter(
                &r,
                "queue_announcements_total",
                "Announcements of claimable capture items between nodes sharing PostgreSQL: sent by this node, \
                 heard from the others.",
                &["direction"],
            ),
            queue: gauge(&r, "queue_items", "Capture items by queue state.", &["state"]),
            jobs: gauge(&r, "jobs", "Analytical jobs by phase.", &["phase"]),
            sessions: gauge(&r, "sessions", "Live browser sessions by status, and the slots.", &["status"]),
            pool_pages: gauge(&r, "browser_pool_pages", "Capture page slots of the browser pool.", &["state"]),
            capture_workers: gauge(
                &r,
                "capture_workers",
                "This node's capture workers: busy (running an attempt), claimed (items claimed for the next free \
                 worker), max (the ceiling, --max-workers).",
                &["state"],
            ),
            ledger_micros: gauge(
                &r,
                "ledger_micros",
                "Ledger totals in micro-euros by kind (charge, release, reserve, credit): what was charged and released.",
                &["kind"],
            ),
            build_info: gauge(
                &r,
                "build_info",
                "1, labelled with the server's version and the commit it was built from (unknown unless \
                 GRID_BUILD_COMMIT was set at build time).",
                &["version", "commit"],
            ),
            registry: r,
            process: process_registry(),
            sources: Mutex::new(vec![]),
        }
    }

    /// Every series whose label values are known before anything happens,
    /// at zero (gauges set by their sources at scrape time need none), so
    /// each family is there from the start and a rate or an alert has a
    /// series to read. Label values only other parts know (the engine's
    /// calls, the reasons a connection is cut) are added by their owners
    /// through `known`.
    fn zero_series(&self) {
        self.build_info.with_label_values(&[BUILD_VERSION, BUILD_COMMIT]).set(1);
        for route in Route::ALL.iter().map(|r| r.template()).chain(["other"]) {
            self.http_seconds.with_label_values(&[route]);
        }
        for script in Script::ALL.map(Script::as_str) {
            self.item_seconds.with_label_values(&[script]);
            for outcome in ITEM_OUTCOMES {
                self.items_ended.with_label_values(&[script, outcome]);
            }
        }
        for reason in TERMINATION_REASONS {
            self.job_attempts_ended.with_label_values(&[reason.as_str()]);
        }
        for cause in [EndCause::Released, EndCause::Expired, EndCause::Lost] {
            self.sessions_ended.with_label_values(&[cause.as_str()]);
        }
        for phase in JobPhase::ALL {
            self.jobs.with_label_values(&[phase.as_str()]);
        }
        for kind in EntryKind::ALL {
            self.ledger_micros.with_label_values(&[kind.as_str()]);
        }
        self.browser_starts.with_label_values(&["capture"]);
        for direction in ["sent", "heard"] {
            self.queue_announcements.with_label_values(&[direction]);
        }
    }

    /// Adds a zero series for each of `values` to `family` (an owner's known
    /// label values, registered by `main` at start).
    pub fn known(family: &IntCounterVec, values: &[&str]) {
        for v in values {
            family.with_label_values(&[v]);
        }
    }
}

/// This build's version (Cargo's) and commit (`GRID_BUILD_COMMIT` in the
/// build's environment, read at compile time; nothing is run to find it).
pub const BUILD_VERSION: &str = env!("CARGO_PKG_VERSION");
pub const BUILD_COMMIT: &str = match option_env!("GRID_BUILD_COMMIT") {
    Some(c) => c,
    None => "unknown",
};

/// How an item stands after an attempt (`grid_item_attempts_total`'s
/// `outcome`).
const ITEM_OUTCOMES: [&str; 3] = ["completed", "delayed", "failed"];

/// Every termination reason this build names (`Other` is a reason it does
/// not know, so it has no series until one is seen).
const TERMINATION_REASONS: [TerminationReason; 8] = [
    TerminationReason::WorkloadSucceeded,
    TerminationReason::WorkloadFailed,
    TerminationReason::PlatformOom,
    TerminationReason::RunningDeadlineExceeded,
    TerminationReason::Cancelled,
    TerminationReason::PlatformEvicted,
    TerminationReason::PlatformStartFailed,
    TerminationReason::PlatformLost,
];

/// The process collector of the `prometheus` crate (Linux: /proc/self).
fn process_registry() -> Registry {
    let r = Registry::new();
    #[cfg(target_os = "linux")]
    r.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))
        .unwrap_or_else(|e| unreachable_metric("process", e));
    r
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// The server's metrics.
pub fn get() -> &'static Metrics {
    METRICS.get_or_init(|| {
        let m = Metrics::new();
        m.zero_series();
        m
    })
}

/// Seconds of a duration, for histograms.
pub fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl Metrics {
    /// Adds an owner of gauges, asked to set them on every scrape.
    pub fn register(&self, source: Arc<dyn GaugeSource>) {
        self.sources.lock().unwrap_or_else(|p| p.into_inner()).push(source);
    }
}

/// Asks every gauge source to set its gauges, then renders every metric in
/// the text format.
pub async fn render() -> String {
    let m = get();
    let sources = m.sources.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for source in sources {
        source.refresh().await;
    }
    let mut out = vec![];
    let mut families = m.registry.gather();
    families.extend(m.process.gather());
    if let Err(e) = TextEncoder::new().encode(&families, &mut out) {
        tracing::error!(error = %e, "metrics could not be encoded");
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Serves `GET /metrics` (no credential) on its own listener until
/// `shutdown`.
pub async fn serve_metrics(listener: TcpListener, mut shutdown: watch::Receiver<bool>) {
    let mut backoff = crate::accept::Backoff::default();
    loop {
        tokio::select! {
            accepted = crate::accept::accept(&listener, &mut backoff, "metrics") => {
                let Some((stream, _)) = accepted else { continue };
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| async move {
                        Ok::<_, Infallible>(answer(&req).await)
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
            _ = shutdown.changed() => return,
        }
    }
}

async fn answer(req: &Request<Incoming>) -> Response<http_body_util::Full<bytes::Bytes>> {
    let (status, content_type, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => (StatusCode::OK, "text/plain; version=0.0.4; charset=utf-8", render().await),
        _ => (StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "only GET /metrics is served here\n".to_string()),
    };
    let mut r = Response::new(http_body_util::Full::new(bytes::Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_defined_and_rendered_with_the_grid_prefix() {
        // The registry is the process's, and other tests in this binary bump real series (under
        // plain `cargo test` they share the process): this test's series have labels of its own.
        let m = get();
        m.http_requests.with_label_values(&["/metrics-test", "POST", "201"]).inc();
        m.items_ended.with_label_values(&["metrics-test", "completed"]).inc();
        let mut out = vec![];
        TextEncoder::new().encode(&m.registry.gather(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("grid_http_requests_total{method=\"POST\",route=\"/metrics-test\",status=\"201\"} 1"),
            "{text}"
        );
        assert!(text.contains("grid_item_attempts_total{outcome=\"completed\",script=\"metrics-test\"} 1"), "{text}");
        assert!(text.contains("# TYPE grid_session_lease_to_ready_seconds histogram"), "{text}");
    }

    #[tokio::test]
    async fn known_label_values_build_info_and_the_process_are_there_from_the_start() {
        let text = render().await;
        for series in [
            "grid_jobs{phase=\"RUNNING\"} 0",
            "grid_jobs{phase=\"TIMED_OUT\"} 0",
            "grid_sessions_ended_total{cause=\"lost\"} 0",
            "grid_job_attempts_ended_total{reason=\"PLATFORM_OOM\"} 0",
            "grid_item_attempts_total{outcome=\"delayed\",script=\"render-fetch\"} 0",
            "grid_item_attempt_duration_seconds_count{script=\"browser-fetch\"} 0",
            "grid_http_request_duration_seconds_count{route=\"/jobs/{jobId}/logs\"} 0",
            "grid_ledger_micros{kind=\"release\"} 0",
        ] {
            assert!(text.lines().any(|l| l == series), "{series} in:\n{text}");
        }
        let version = format!("grid_build_info{{commit=\"{BUILD_COMMIT}\",version=\"{BUILD_VERSION}\"}} 1");
        assert!(text.lines().any(|l| l == version), "{version} in:\n{text}");
        #[cfg(target_os = "linux")]
        for family in ["process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"] {
            assert!(text.contains(&format!("# TYPE {family} ")), "{family} in:\n{text}");
        }
    }
}
