//! The one tick loop that fires durable due times.
//!
//! Every machine's next deadline (a job's running deadline or due replay, a
//! session's expiry or launch deadline, ...) is stored as `due_at` on its
//! row, written by its driver in the same transaction as the state it
//! follows from. This loop asks each driver to fire what is due, so a
//! deadline fires whichever process is alive, even when the task or the
//! process that set it is gone.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use grid_core::time::Millis;
use tokio::sync::{watch, Notify};

use crate::clock::Clock;

/// Longest sleep between two passes: the latest a due time set by another
/// process (or missed wake-up) is noticed.
pub const MAX_SLEEP: Duration = Duration::from_millis(500);

/// A driver with durable due times.
pub trait DueTimes: Send + Sync {
    /// Fires every due time at or before `now`; answers the earliest due
    /// time still ahead, if the driver knows it.
    fn fire_due(&self, now: Millis) -> BoxFuture<'_, Option<Millis>>;
}

/// Runs until `shutdown`; `wake` cuts a sleep short (a driver set a due
/// time sooner than the loop's next pass).
pub async fn run(
    drivers: Vec<Arc<dyn DueTimes>>,
    clock: Arc<dyn Clock>,
    wake: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let now = clock.now();
        let mut next: Option<Millis> = None;
        for d in &drivers {
            if let Some(t) = d.fire_due(now).await {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        let sleep = next.map_or(MAX_SLEEP, |t| {
            Duration::from_millis((t.0 - clock.now().0).clamp(0, MAX_SLEEP.as_millis() as i64) as u64)
        });
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = wake.notified() => {}
            _ = shutdown.changed() => return,
        }
    }
}
