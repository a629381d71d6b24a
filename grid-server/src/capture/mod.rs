//! The capture runner: a bounded pool of workers that claim items from the
//! durable queue, run their script and publish the outcome.
//!
//! **Invariant:** a worker changes an item only through `store::items`
//! transitions, and publishes files in the same transaction as the state
//! change. An item whose worker dies mid-attempt stays `active` in the store
//! and is put back in the queue on the next start (`recover_active`).

pub mod commits;
pub mod fetch;
pub mod files;
pub mod guard;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use grid_core::item::{Event, Failure};
use serde_json::json;
use tokio::sync::watch;
use tracing::Instrument;

use crate::app::App;
use crate::ids::now;
use crate::store::items::{self, ItemError, ItemRow, PublishedFile};
use crate::store::StoreError;
use fetch::Fetcher;
use files::FileContent;

/// Longest an idle worker sleeps before looking at the queue again.
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
        // Register interest before looking, so a submission that lands
        // between the look and the wait still wakes this worker.
        let ready = app.queue_ready.notified();
        match app.commits.claim().await {
            Ok(Some(row)) => {
                app.busy_workers.fetch_add(1, Ordering::Relaxed);
                run_item(&app, &fetcher, row).await;
                app.busy_workers.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(worker = n, error = %e, "claim failed"),
        }
        let wait = match app.store.read(items::next_wake).await {
            Ok(Some(t)) => Duration::from_millis((t.0 - now().0).clamp(1, IDLE_POLL.as_millis() as i64) as u64),
            _ => IDLE_POLL,
        };
        tokio::select! {
            _ = ready => {}
            _ = tokio::time::sleep(wait) => {}
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
    let (event, files) = match result {
        Ok(files) => match publish_files(app, &row.id, files).await {
            Ok(published) => (Event::Succeed, published),
            Err(e) => (Event::Fail(Failure::Transient(format!("storing files failed: {e}"))), vec![]),
        },
        Err(Failure::Terminal(reason)) => {
            let meta = failure_meta(&row, &reason);
            match publish_files(app, &row.id, vec![FileContent::meta(&meta)]).await {
                Ok(published) => (Event::Fail(Failure::Terminal(reason)), published),
                Err(e) => (Event::Fail(Failure::Transient(format!("storing failure record failed: {e}"))), vec![]),
            }
        }
        Err(transient) => (Event::Fail(transient), vec![]),
    };
    let outcome = finish(app, &row.id, event, files).await;
    match outcome {
        Some(o) => tracing::info!(
            state = o.item.state.as_str(),
            reason = o.item.failed_reason.as_deref().unwrap_or(""),
            "attempt finished"
        ),
        None => tracing::error!("attempt outcome could not be stored; the item is recovered on restart"),
    }
}

/// The meta file of a failed item.
fn failure_meta(row: &ItemRow, reason: &str) -> serde_json::Value {
    json!({
        "outcome": "failure",
        "script": row.script.as_str(),
        "profileId": row.profile.as_str(),
        "url": row.url,
        "reason": reason,
        "attempt": row.item.attempts_made + 1,
        "failedAt": now().to_iso(),
    })
}

async fn publish_files(app: &App, item_id: &str, files: Vec<FileContent>) -> std::io::Result<Vec<PublishedFile>> {
    let root = app.artifacts_dir.clone();
    let id = item_id.to_string();
    tokio::task::spawn_blocking(move || files::write_family(&root, &id, files)).await.map_err(std::io::Error::other)?
}

/// Stores an attempt's end, retrying while the database is busy (an admin
/// command may hold it for a moment). Gives up after about a minute: the
/// item then stays active and is recovered on the next start.
async fn finish(app: &App, id: &str, event: Event, files: Vec<PublishedFile>) -> Option<grid_core::item::Outcome> {
    let mut delay = Duration::from_millis(50);
    for _ in 0..12 {
        match app.commits.finish(id, event.clone(), files.clone()).await {
            Ok(o) => return Some(o),
            Err(ItemError::Store(StoreError::Busy)) => {}
            Err(ItemError::Store(e)) => tracing::warn!(error = %e, "storing attempt end failed; trying again"),
            Err(e) => {
                tracing::error!(error = %e, "attempt end refused by the item's state");
                return None;
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(8));
    }
    None
}
