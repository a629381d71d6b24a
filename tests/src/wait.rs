//! Waiting on a condition in a black-box test: never on time alone.

use std::time::{Duration, Instant};

/// Polls `probe` every 50 ms until it answers `Ok`; fails the test after
/// `timeout`, naming `what` and the probe's last answer.
pub async fn wait_until<T>(what: &str, timeout: Duration, mut probe: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let seen = match probe() {
            Ok(v) => return v,
            Err(seen) => seen,
        };
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}; last seen: {seen}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// [`wait_until`] with a probe that awaits (a request to the server, a
/// scrape of its metrics).
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let seen = match probe().await {
            Ok(v) => return v,
            Err(seen) => seen,
        };
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}; last seen: {seen}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
