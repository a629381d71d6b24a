//! Accept loops that back off when `accept` fails.
//!
//! A failed accept (EMFILE or ENFILE when the process or the system is out of
//! file descriptors, ENOBUFS, ENOMEM) leaves the connection waiting in the
//! listen backlog, so the listener is ready again at once: retrying at once
//! spins a core and writes a warning per try. Instead each failure in a row
//! pauses the loop (10 ms, doubling up to 1 s) with one warning per pause;
//! the first accepted connection ends the streak.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// The pause after the first failure of a streak.
pub const FIRST_PAUSE: Duration = Duration::from_millis(10);
/// The longest pause between two tries.
pub const MAX_PAUSE: Duration = Duration::from_secs(1);

/// Failures in a row of one accept loop.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: u32,
}

impl Backoff {
    /// Counts a failure; returns the pause before the next try.
    pub fn failed(&mut self) -> Duration {
        let pause = FIRST_PAUSE.saturating_mul(1u32 << self.failures.min(16)).min(MAX_PAUSE);
        self.failures = self.failures.saturating_add(1);
        pause
    }

    /// Ends a streak; returns how many failures it had (0: there was none).
    pub fn succeeded(&mut self) -> u32 {
        std::mem::take(&mut self.failures)
    }
}

/// Accepts one connection on `listener` (named `what` in the log). On a
/// failure, warns once, pauses as `backoff` says and returns `None`; the
/// caller loops. Cancel-safe: an accept loop may select on it with its
/// shutdown signal.
pub async fn accept(listener: &TcpListener, backoff: &mut Backoff, what: &str) -> Option<(TcpStream, SocketAddr)> {
    match listener.accept().await {
        Ok(accepted) => {
            let failures = backoff.succeeded();
            if failures > 0 {
                tracing::info!(listener = what, failures, "accepting connections again");
            }
            Some(accepted)
        }
        Err(e) => {
            let pause = backoff.failed();
            tracing::warn!(listener = what, error = %e, pause_ms = pause.as_millis() as u64, "accept failed; pausing");
            tokio::time::sleep(pause).await;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_from_10_ms_up_to_1_s_and_a_success_starts_over() {
        let mut b = Backoff::default();
        let pauses: Vec<u64> = (0..10).map(|_| b.failed().as_millis() as u64).collect();
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
        assert_eq!(b.succeeded(), 10);
        assert_eq!(b.succeeded(), 0);
        assert_eq!(b.failed(), FIRST_PAUSE);
    }

    #[test]
    fn a_long_streak_stays_at_the_longest_pause() {
        let mut b = Backoff { failures: u32::MAX - 1 };
        assert_eq!(b.failed(), MAX_PAUSE);
        assert_eq!(b.failed(), MAX_PAUSE);
    }
}
