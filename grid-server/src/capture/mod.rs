//! The capture runner: a bounded pool of workers that claim items from the
//! durable queue, run their script and report how the attempt ended.
//!
//! **Invariant:** a worker changes an item only through the item driver
//! (`driver.rs`), which publishes files in the same transaction as the state
//! change. An item whose worker dies mid-attempt stays `active` in the store
//! and is put back in the queue on the next start (`ItemDriver::recover`).

pub mod commits;
pub mod driver;
pub mod fetch;
pub mod files;
pub mod guard;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use grid_core::item::Failure;
use tokio::sync::watch;
use tracing::Instrument;

use crate::app::App;
use crate::store::items::{ItemError, ItemRow, PublishedFile};
use driver::AttemptEnd;
use fetch::Fetcher;
use files::FileContent;

/// Longest an idle worker sleeps before looking at the queue again (the
/// driver wakes it sooner when items become claimable).
const IDLE_POLL: Duration = Duration::from_millis(500);

pub fn spawn_workers(
    app: Arc<App>,
    shutdown: watch::Receiver<bool>,
) -> Result<tokio::task::JoinSet<()>, reqwest::Error> {
    let fetcher = Arc::new(Fetcher::new(app.config.allow_private_networks)?);
    let mut set = tokio::task::JoinSet::new();
    for n in 0..app.config.workers {
        set.spawn(worker(n, app.clone(), fetcher.clone(), shutdown.clone()));
    }
    Ok(set)
}

async fn worker(n: usize, app: Arc<App>, fetcher: Arc<Fetcher>, mut shutdown: watch::Receiver<bool>) {
    loop {
        if *shutdown.borrow() {
            return;
        }
        // Register interest before looking, so items that become claimable
        // between the look and the wait (a submission, a retry, a delayed
        // item fired by the due loop) still wake this worker.
        let ready = app.queue_ready.notified();
        match app.items.claim().await {
            Ok(Some(row)) => {
                app.busy_workers.fetch_add(1, Ordering::Relaxed);
                run_item(&app, &fetcher, row).await;
                app.busy_workers.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(worker = n, error = %e, "claim failed"),
        }
        tokio::select! {
            _ = ready => {}
            _ = tokio::time::sleep(IDLE_POLL) => {}
            _ = shutdown.changed() => {}
        }
    }
}

async fn run_item(app: &Arc<App>, fetcher: &Fetcher, row: ItemRow) {
    let span =
        tracing::info_span!("item", id = %row.id, script = row.script.as_str(), attempt = row.item.attempts_made + 1);
    run_attempt(app, fetcher, row).instrument(span).await
}

async fn run_attempt(app: &Arc<App>, fetcher: &Fetcher, row: ItemRow) {
    let started = std::time::Instant::now();
    let result = if row.script.needs_browser() {
        match &app.browsers {
            Some(pool) => crate::browser::scripts::run(pool, &row).await,
            None => Err(Failure::Terminal(format!(
                "script {} needs the browser pool, which this grid does not run (--browsers 0 or no Chromium)",
                row.script.as_str()
            ))),
        }
    } else {
        fetcher.run(&row).await
    };
    let end = match result {
        Ok(files) => match write_files(app, &row.id, files).await {
            Ok(stored) => AttemptEnd::Succeeded(stored),
            Err(e) => AttemptEnd::Failed(Failure::Transient(format!("storing files failed: {e}"))),
        },
        Err(failure) => AttemptEnd::Failed(failure),
    };
    let m = crate::metrics::get();
    m.item_seconds.with_label_values(&[row.script.as_str()]).observe(crate::metrics::secs(started.elapsed()));
    match app.items.finish(&row.id, row.lease_token, end).await {
        Ok(o) => {
            m.items_ended.with_label_values(&[row.script.as_str(), o.item.state.as_str()]).inc();
            tracing::info!(
                state = o.item.state.as_str(),
                reason = o.item.failed_reason.as_deref().unwrap_or(""),
                "attempt finished"
            )
        }
        Err(e @ ItemError::LeaseLost(_)) => {
            tracing::warn!(error = %e, "attempt end dropped: another node holds the item now")
        }
        Err(e) => tracing::error!(error = %e, "attempt end not stored; the item is recovered on restart"),
    }
}

/// Writes and checks an attempt's files; the driver publishes them if the
/// item machine says so.
async fn write_files(app: &App, item_id: &str, files: Vec<FileContent>) -> std::io::Result<Vec<PublishedFile>> {
    let root = app.artifacts_dir.clone();
    let (id, all_inline) = (item_id.to_string(), app.store.files_inline());
    tokio::task::spawn_blocking(move || files::write_family(&root, &id, files, all_inline))
        .await
        .map_err(std::io::Error::other)?
}
