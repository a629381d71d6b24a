//! Request limits of the API port (docs/limits.md): a rate per credential,
//! bounded request bodies, and the time a client may take to send its
//! request head.
//!
//! Rates are kept per node in memory (GCRA, the `governor` crate): a key's
//! requests are counted where they arrive.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use grid_core::error::ApiError;

use crate::store::accounts::Caller;

/// Longest a client may take to send a request's line and headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy)]
pub struct RateConfig {
    /// Requests a credential may make per second, sustained.
    pub per_second: u32,
    /// Requests it may make at once above that.
    pub burst: u32,
}

pub struct RateLimits {
    limiter: RateLimiter<String, DefaultKeyedStateStore<String>, DefaultClock>,
    clock: DefaultClock,
}

impl RateLimits {
    pub fn new(config: RateConfig) -> RateLimits {
        let per_second = NonZeroU32::new(config.per_second.max(1)).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(config.burst.max(config.per_second).max(1)).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::per_second(per_second).allow_burst(burst);
        RateLimits { limiter: RateLimiter::keyed(quota), clock: DefaultClock::default() }
    }

    /// Counts one request of `caller`: refused with 429 and the whole
    /// seconds until the next one is allowed when over its rate.
    pub fn check(&self, caller: &Caller) -> Result<(), ApiError> {
        // A key is its own bucket; a sign-in token's is its account's.
        let key = match &caller.key_id {
            Some(k) => format!("key:{k}"),
            None => format!("account:{}", caller.account_id),
        };
        match self.limiter.check_key(&key) {
            Ok(()) => Ok(()),
            Err(not_until) => {
                let wait = not_until.wait_time_from(self.clock.now());
                Err(ApiError::RateLimited { retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64 })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(key: &str) -> Caller {
        Caller { account_id: "acc".into(), key_id: Some(key.into()), ..Default::default() }
    }

    #[test]
    fn a_key_over_its_burst_is_refused_with_retry_after_and_another_key_is_not() {
        let limits = RateLimits::new(RateConfig { per_second: 1, burst: 3 });
        for _ in 0..3 {
            limits.check(&caller("a")).unwrap();
        }
        match limits.check(&caller("a")) {
            Err(ApiError::RateLimited { retry_after_secs }) => assert!(retry_after_secs >= 1),
            other => panic!("expected 429, got {other:?}"),
        }
        limits.check(&caller("b")).unwrap();
    }
}
