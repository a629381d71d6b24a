//! Where the shell's drivers read the time: the system clock in the server,
//! a virtual clock in the drivers' unit tests, so deadlines and expiries can
//! be tested without waiting for them.

#[cfg(test)]
use std::sync::atomic::{AtomicI64, Ordering};

use grid_core::time::Millis;

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
