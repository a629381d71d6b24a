//! Where the shell's drivers read the time: the system clock in the server,
//! a virtual clock in the drivers' unit tests, so deadlines and expiries can
//! be tested without waiting for them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use grid_core::time::Millis;

/// Milliseconds the server's clock runs ahead of the system's: always 0,
/// unless a test made the server follow a skew file.
static SKEW: AtomicI64 = AtomicI64::new(0);

/// How often a followed skew file is read again.
const SKEW_POLL: Duration = Duration::from_millis(20);

pub fn skew() -> i64 {
    SKEW.load(Ordering::Relaxed)
}

/// For black-box tests only (the hidden `serve --clock-skew-file`): from now
/// on the server's clock runs ahead of the system's by the milliseconds
/// `path` holds (a decimal number, 0 when the file is absent or unreadable),
/// read again every 20 ms. A test moves the server to a session's expiry, a
/// due retry or a dead node's lease end at once instead of waiting on the
/// wall clock for it; every reading of the time in the server goes through
/// `crate::ids::now`, so they all move together. The skew only grows forward:
/// a smaller number than the last is ignored, so the server's clock never
/// goes back.
pub fn follow_skew_file(path: PathBuf) {
    read_skew(&path);
    std::thread::Builder::new()
        .name("clock-skew".into())
        .spawn(move || loop {
            std::thread::sleep(SKEW_POLL);
            read_skew(&path);
        })
        .expect("spawning the clock-skew thread");
}

fn read_skew(path: &Path) {
    if let Some(ms) = std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse::<i64>().ok()) {
        if SKEW.fetch_max(ms, Ordering::Relaxed) < ms {
            // What the test waits for before it looks at what the move did.
            tracing::info!(skew_ms = ms, "the server's clock moved forward (--clock-skew-file)");
        }
    }
}

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Millis;
}

/// The wall clock (`crate::ids::now`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Millis {
        crate::ids::now()
    }
}

/// A clock that moves only when told to.
#[cfg(test)]
#[derive(Debug, Default)]
pub struct VirtualClock(AtomicI64);

#[cfg(test)]
impl VirtualClock {
    pub fn at(t: Millis) -> VirtualClock {
        VirtualClock(AtomicI64::new(t.0))
    }

    pub fn advance(&self, ms: i64) -> Millis {
        Millis(self.0.fetch_add(ms, Ordering::SeqCst) + ms)
    }

    pub fn set(&self, t: Millis) {
        self.0.store(t.0, Ordering::SeqCst);
    }
}

#[cfg(test)]
impl Clock for VirtualClock {
    fn now(&self) -> Millis {
        Millis(self.0.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_virtual_clock_moves_only_when_told() {
        let c = VirtualClock::at(Millis(1_000));
        assert_eq!(c.now(), Millis(1_000));
        assert_eq!(c.advance(250), Millis(1_250));
        c.set(Millis(5));
        assert_eq!(c.now(), Millis(5));
    }
}
