//! Request limits of the API port (docs/limits.md): a rate per credential,
//! bounded request bodies and the time to send them, the time a connection
//! may go without a request (its first request head, or between requests),
//! and how many connections are open at once, in all and per peer.
//!
//! Rates and connection counts are kept per node in memory (GCRA, the
//! `governor` crate): a key's requests are counted where they arrive.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use governor::clock::{Clock, DefaultClock};
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use grid_core::error::ApiError;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::store::accounts::{Caller, KeyRate};

/// Request bodies larger than this are refused (413). 1,000 URLs of a few
/// kilobytes each fit comfortably.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateConfig {
    /// Requests a credential may make per second, sustained.
    pub per_second: u32,
    /// Requests it may make at once; never less than `per_second`.
    pub burst: u32,
}

impl RateConfig {
    /// The rate of a key: its own where it was given one, this (the
    /// server's) elsewhere.
    fn with(self, key: KeyRate) -> RateConfig {
        RateConfig { per_second: key.per_second.unwrap_or(self.per_second), burst: key.burst.unwrap_or(self.burst) }
    }

    fn quota(self) -> Quota {
        let per_second = NonZeroU32::new(self.per_second).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(self.burst.max(self.per_second)).unwrap_or(NonZeroU32::MIN);
        Quota::per_second(per_second).allow_burst(burst)
    }
}

type KeyedLimiter = RateLimiter<String, DefaultKeyedStateStore<String>, DefaultClock>;

pub struct RateLimits {
    default: RateConfig,
    /// One keyed limiter per rate in use: the server's, and each rate a key
    /// was given at `key create` (few: operators set them by hand).
    by_rate: Mutex<HashMap<RateConfig, Arc<KeyedLimiter>>>,
    clock: DefaultClock,
}

impl RateLimits {
    pub fn new(default: RateConfig) -> RateLimits {
        RateLimits { default, by_rate: Mutex::new(HashMap::new()), clock: DefaultClock::default() }
    }

    /// Counts one request of `caller`: refused with 429 and the whole
    /// seconds until the next one is allowed when over its rate.
    pub fn check(&self, caller: &Caller) -> Result<(), ApiError> {
        let rate = self.default.with(caller.rate);
        let limiter =
            lock(&self.by_rate).entry(rate).or_insert_with(|| Arc::new(RateLimiter::keyed(rate.quota()))).clone();
        // A key is its own bucket; a sign-in token's is its account's.
        let bucket = match &caller.key_id {
            Some(k) => format!("key:{k}"),
            None => format!("account:{}", caller.account_id),
        };
        match limiter.check_key(&bucket) {
            Ok(()) => Ok(()),
            Err(not_until) => {
                let wait = not_until.wait_time_from(self.clock.now());
                Err(ApiError::RateLimited { retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64 })
            }
        }
    }
}

/// A poisoned lock only means another request panicked while counting; the
/// counts are still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Time limits and connection bounds of the API port.
#[derive(Debug, Clone, Copy)]
pub struct ConnConfig {
    /// Longest a client may take to send a request's line and headers, and
    /// to send its first request on a new connection.
    pub header_read_timeout: Duration,
    /// Longest a client may take to send a request's body, once its head
    /// arrived.
    pub body_read_timeout: Duration,
    /// Longest a connection may stay open with no request in flight after
    /// its first (HTTP/2; an HTTP/1.1 connection waiting for its next
    /// request head is cut by `header_read_timeout` first).
    pub idle_timeout: Duration,
    /// Connections open at once; more are closed as they are accepted.
    pub max_connections: usize,
    /// Connections one peer address may hold open at once; 0: no bound.
    pub max_connections_per_peer: usize,
}

/// The request limits of one running server.
pub struct Limits {
    pub rates: RateLimits,
    pub conn: ConnConfig,
    open: Arc<Mutex<OpenConnections>>,
}

#[derive(Default)]
struct OpenConnections {
    total: usize,
    per_peer: HashMap<IpAddr, usize>,
}

/// Why a connection was refused or cut (the `reason` of
/// `grid_http_connections_cut_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    TooManyConnections,
    TooManyFromPeer,
    NoRequest,
    Idle,
    HeaderTimeout,
    /// A session's CDP client fell more than
    /// `browser::cdp::CLIENT_BACKLOG_BYTES` behind the browser.
    CdpBacklog,
}

impl Cut {
    pub const ALL: [Cut; 6] =
        [Cut::TooManyConnections, Cut::TooManyFromPeer, Cut::NoRequest, Cut::Idle, Cut::HeaderTimeout, Cut::CdpBacklog];

    pub fn label(self) -> &'static str {
        match self {
            Cut::TooManyConnections => "max_connections",
            Cut::TooManyFromPeer => "max_connections_per_peer",
            Cut::NoRequest => "no_request",
            Cut::Idle => "idle",
            Cut::HeaderTimeout => "header_timeout",
            Cut::CdpBacklog => "cdp_backlog",
        }
    }
}

impl Limits {
    pub fn new(rate: RateConfig, conn: ConnConfig) -> Limits {
        Limits { rates: RateLimits::new(rate), conn, open: Arc::default() }
    }

    /// Counts a new connection from `peer`, or refuses it when the server or
    /// that peer is at its bound. The connection is counted until the
    /// permit is dropped.
    pub fn admit(&self, peer: IpAddr) -> Result<ConnPermit, Cut> {
        let mut open = lock(&self.open);
        if open.total >= self.conn.max_connections {
            return Err(Cut::TooManyConnections);
        }
        let from_peer = open.per_peer.entry(peer).or_insert(0);
        if self.conn.max_connections_per_peer > 0 && *from_peer >= self.conn.max_connections_per_peer {
            return Err(Cut::TooManyFromPeer);
        }
        *from_peer += 1;
        open.total += 1;
        Ok(ConnPermit { open: self.open.clone(), peer })
    }
}

pub struct ConnPermit {
    open: Arc<Mutex<OpenConnections>>,
    peer: IpAddr,
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        let mut open = lock(&self.open);
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.per_peer.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                open.per_peer.remove(&self.peer);
            }
        }
    }
}

/// Why a body could not be read in full.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("over {MAX_BODY_BYTES} bytes")]
    TooLarge,
    #[error("not sent in time")]
    TooSlow,
    #[error("{0}")]
    Unreadable(String),
}

impl BodyError {
    /// The refusal of a body past a bound: 413 or 408 from the error table;
    /// `None` for a body that could not be read, which each endpoint
    /// answers in its own way.
    pub fn past_bound(&self, conn: &ConnConfig) -> Option<ApiError> {
        match self {
            BodyError::TooLarge => Some(ApiError::BodyTooLarge { limit_bytes: MAX_BODY_BYTES as u64 }),
            BodyError::TooSlow => Some(ApiError::BodyTooSlow { limit_secs: conn.body_read_timeout.as_secs().max(1) }),
            BodyError::Unreadable(_) => None,
        }
    }

    /// The refusal: past a bound as `past_bound`, else `unreadable`.
    pub fn refusal(self, conn: &ConnConfig, unreadable: impl FnOnce(String) -> ApiError) -> ApiError {
        match self.past_bound(conn) {
            Some(refusal) => refusal,
            None => unreadable(self.to_string()),
        }
    }
}

/// Reads a whole request body, at most `MAX_BODY_BYTES` within `within`: a
/// client that trickles its body holds a request only that long.
pub async fn read_body(body: Incoming, within: Duration) -> Result<Bytes, BodyError> {
    match tokio::time::timeout(within, Limited::new(body, MAX_BODY_BYTES).collect()).await {
        Err(_) => Err(BodyError::TooSlow),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge),
        Ok(Err(e)) => Err(BodyError::Unreadable(e.to_string())),
    }
}

/// What one connection is doing, for its watchdog (`idle_out`).
#[derive(Debug, Clone, Copy)]
pub struct Activity {
    /// Requests whose response has not been sent in full.
    in_flight: usize,
    /// When `in_flight` last changed (or the connection opened).
    since: Instant,
    /// Whether a request has arrived at all.
    served: bool,
}

/// The connection's side of its activity: each request holds an
/// [`InFlight`] until its response body is dropped.
#[derive(Clone)]
pub struct Tracker(Arc<watch::Sender<Activity>>);

pub struct InFlight(Arc<watch::Sender<Activity>>);

impl Tracker {
    pub fn new() -> (Tracker, watch::Receiver<Activity>) {
        let (tx, rx) = watch::channel(Activity { in_flight: 0, since: Instant::now(), served: false });
        (Tracker(Arc::new(tx)), rx)
    }

    pub fn begin(&self) -> InFlight {
        self.0.send_modify(|a| {
            a.in_flight += 1;
            a.since = Instant::now();
            a.served = true;
        });
        InFlight(self.0.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|a| {
            a.in_flight = a.in_flight.saturating_sub(1);
            a.since = Instant::now();
        });
    }
}

/// Resolves when the connection has had no request in flight for too long:
/// `first` before its first request (a client that connects and sends
/// nothing, or trickles the bytes before its first request head, in either
/// protocol), `idle` after one. Never resolves while a request is in flight.
pub async fn idle_out(mut activity: watch::Receiver<Activity>, first: Duration, idle: Duration) -> Cut {
    loop {
        let a = *activity.borrow_and_update();
        if a.in_flight > 0 {
            if activity.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
            continue;
        }
        let (limit, cut) = if a.served { (idle, Cut::Idle) } else { (first, Cut::NoRequest) };
        tokio::select! {
            _ = tokio::time::sleep_until(a.since + limit) => return cut,
            changed = activity.changed() => {
                if changed.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(key: &str, rate: KeyRate) -> Caller {
        Caller { account_id: "acc".into(), key_id: Some(key.into()), rate, ..Default::default() }
    }

    fn refused(r: Result<(), ApiError>) -> u64 {
        match r {
            Err(ApiError::RateLimited { retry_after_secs }) => retry_after_secs,
            other => panic!("expected 429, got {other:?}"),
        }
    }

    #[test]
    fn a_key_over_its_burst_is_refused_with_retry_after_and_another_key_is_not() {
        let limits = RateLimits::new(RateConfig { per_second: 1, burst: 3 });
        for _ in 0..3 {
            limits.check(&caller("a", KeyRate::default())).unwrap();
        }
        assert!(refused(limits.check(&caller("a", KeyRate::default()))) >= 1);
        limits.check(&caller("b", KeyRate::default())).unwrap();
    }

    #[test]
    fn a_key_with_its_own_rate_is_held_to_it_and_others_to_the_servers() {
        let limits = RateLimits::new(RateConfig { per_second: 1000, burst: 1000 });
        let own = KeyRate { per_second: Some(1), burst: Some(2) };
        for _ in 0..2 {
            limits.check(&caller("low", own)).unwrap();
        }
        assert!(refused(limits.check(&caller("low", own))) >= 1);
        for _ in 0..100 {
            limits.check(&caller("default", KeyRate::default())).unwrap();
        }
        // A key given only a burst keeps the server's sustained rate.
        let burst_only = KeyRate { per_second: None, burst: Some(5) };
        assert_eq!(RateConfig { per_second: 1000, burst: 1000 }.with(burst_only).burst, 5);
    }

    #[test]
    fn connections_are_bounded_in_all_and_per_peer_and_freed_when_dropped() {
        let conn = ConnConfig {
            header_read_timeout: Duration::from_secs(1),
            body_read_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
            max_connections: 3,
            max_connections_per_peer: 2,
        };
        let limits = Limits::new(RateConfig { per_second: 1, burst: 1 }, conn);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let a1 = limits.admit(a).unwrap();
        let _a2 = limits.admit(a).unwrap();
        assert_eq!(limits.admit(a).err(), Some(Cut::TooManyFromPeer));
        let _b1 = limits.admit(b).unwrap();
        assert_eq!(limits.admit(b).err(), Some(Cut::TooManyConnections));
        drop(a1);
        let _a3 = limits.admit(a).unwrap();
    }

    #[tokio::test]
    async fn a_connection_is_cut_before_its_first_request_or_when_idle_never_while_busy() {
        let (first, idle) = (Duration::from_millis(50), Duration::from_millis(100));
        let (tracker, rx) = Tracker::new();
        let started = Instant::now();
        assert_eq!(idle_out(rx.clone(), first, idle).await, Cut::NoRequest);
        assert!(started.elapsed() >= first);

        let busy = tracker.begin();
        let watchdog = tokio::spawn(idle_out(rx, first, idle));
        tokio::time::sleep(idle * 3).await;
        assert!(!watchdog.is_finished(), "cut while a request was in flight");
        let done = Instant::now();
        drop(busy);
        assert_eq!(watchdog.await.unwrap(), Cut::Idle);
        assert!(done.elapsed() >= idle);
    }
}
