//! Waiting on a condition in a black-box test: never on time alone.
//!
//! One family, one deadline: [`wait_until`] (a probe that answers at once),
//! [`wait_for`] (a probe that awaits: a request to the server, a scrape of
//! its metrics) and [`block_until`] (a probe that answers at once, for the
//! harness's synchronous functions: it sleeps the thread). Each asks the
//! probe until it answers `Ok`, every 50 ms unless told otherwise
//! ([`Within::every`]), and fails the test after the timeout, naming what
//! was waited for and the probe's last answer. A failure while a
//! `GridServer` is alive prints the server's log tail as it drops. Tidy's
//! `every_wait_goes_through_wait_rs` keeps hand-written deadline loops out
//! of the rest of the suite.

use std::time::{Duration, Instant};

/// How often a wait asks its probe, unless told otherwise.
pub const POLL: Duration = Duration::from_millis(50);

/// How long a wait lasts and how often it asks. A plain `Duration` is a
/// timeout asked every [`POLL`].
#[derive(Clone, Copy, Debug)]
pub struct Within {
    timeout: Duration,
    every: Duration,
}

impl Within {
    pub fn new(timeout: Duration) -> Within {
        Within { timeout, every: POLL }
    }

    /// Asks every `poll` instead: a wait that must see a short-lived state
    /// on the way, or take a lock the moment it is free.
    pub fn every(self, poll: Duration) -> Within {
        Within { every: poll, ..self }
    }
}

impl From<Duration> for Within {
    fn from(timeout: Duration) -> Within {
        Within::new(timeout)
    }
}

/// The deadline the three waits share.
struct Deadline {
    within: Within,
    at: Instant,
}

impl Deadline {
    fn start(within: impl Into<Within>) -> Deadline {
        let within = within.into();
        Deadline { within, at: Instant::now() + within.timeout }
    }

    /// The pause before the next ask; fails the test once past the deadline.
    fn pause(&self, what: &str, seen: &str) -> Duration {
        assert!(Instant::now() < self.at, "{what}: not within {:?}; last seen: {seen}", self.within.timeout);
        self.within.every
    }
}

/// Asks `probe` until it answers `Ok`; fails the test after `within`,
/// naming `what` and the probe's last answer.
pub async fn wait_until<T>(what: &str, within: impl Into<Within>, mut probe: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Deadline::start(within);
    loop {
        match probe() {
            Ok(v) => return v,
            Err(seen) => tokio::time::sleep(deadline.pause(what, &seen)).await,
        }
    }
}

/// [`wait_until`] with a probe that awaits.
pub async fn wait_for<T, F, Fut>(what: &str, within: impl Into<Within>, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Deadline::start(within);
    loop {
        match probe().await {
            Ok(v) => return v,
            Err(seen) => tokio::time::sleep(deadline.pause(what, &seen)).await,
        }
    }
}

/// [`wait_until`] for synchronous code: sleeps the thread between asks.
pub fn block_until<T>(what: &str, within: impl Into<Within>, mut probe: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Deadline::start(within);
    loop {
        match probe() {
            Ok(v) => return v,
            Err(seen) => std::thread::sleep(deadline.pause(what, &seen)),
        }
    }
}
