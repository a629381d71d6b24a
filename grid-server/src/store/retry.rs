//! How a fact that must be stored is tried again while the store fails: an
//! attempt's end (a capture item's, reported by its worker; an analytical
//! job's, read off the engine) happened whether or not the database took it
//! at once, so a busy database (an admin command holds it) or a failed
//! commit delays it rather than loses it. Given up after about a minute;
//! what is left then is recovered or reconciled at the next start.

use std::time::Duration;

use super::StoreError;

/// Times a fact is tried before it is given up: about a minute in all.
pub const TRIES: u32 = 12;

/// How long to wait before the `tries`th try again: from 50 ms, doubling,
/// at most 8 s.
pub fn delay(tries: u32) -> Duration {
    let doublings = tries.saturating_sub(1).min(16);
    Duration::from_millis(50u64 << doublings).min(Duration::from_secs(8))
}

/// Whether trying again may store it: the database failed, not the fact
/// (a row that is gone or a stored value that does not parse stays so).
pub fn worth_trying_again(e: &StoreError) -> bool {
    matches!(e, StoreError::Busy | StoreError::Conflict | StoreError::Database(_) | StoreError::Task(_))
}

/// Runs `attempt` until it stores: tried again after `delay` while it
/// fails for a store error (`store_error` finds it in `E`) that is
/// `worth_trying_again`, at most `TRIES` times; answers its last result.
/// `what` names the fact in the warnings.
pub async fn until_stored<T, E, Fut>(
    what: &str,
    store_error: fn(&E) -> Option<&StoreError>,
    mut attempt: impl FnMut() -> Fut,
) -> Result<T, E>
where
    Fut: std::future::Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let mut tries = 1;
    loop {
        match attempt().await {
            Err(e) if tries < TRIES && store_error(&e).is_some_and(worth_trying_again) => {
                tracing::warn!(error = %e, tries, "{what} not stored yet; trying again");
                tokio::time::sleep(delay(tries)).await;
                tries += 1;
            }
            last => return last,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fact_that_meets_a_failing_database_waits_50_ms_doubling_to_8_s() {
        let delays: Vec<u64> = (1..TRIES).map(|t| delay(t).as_millis() as u64).collect();
        assert_eq!(delays, [50, 100, 200, 400, 800, 1_600, 3_200, 6_400, 8_000, 8_000, 8_000]);
        let total: u64 = delays.iter().sum();
        assert!((30_000..90_000).contains(&total), "about a minute in all: {total} ms");
    }

    #[test]
    fn only_a_failing_database_is_tried_again() {
        assert!(worth_trying_again(&StoreError::Busy));
        assert!(worth_trying_again(&StoreError::Database("disk I/O error".into())));
        assert!(!worth_trying_again(&StoreError::NotFound("job cj_1".into())));
        assert!(!worth_trying_again(&StoreError::Invalid("bad machine".into())));
    }
}
