//! The capture runner: an elastic pool of workers that run claimed items'
//! scripts and report how each attempt ended.
//!
//! One dispatcher per node claims items from the durable queue in batches
//! (many items per transaction, in queue order) into the pool's queue, and
//! starts a worker for each while fewer than `--max-workers` run: the pool
//! grows with the queue up to that ceiling. A worker takes the next claimed
//! item as soon as its attempt ended (its end goes to the publisher, which
//! stores it while the worker runs the next one) and ends once none is
//! left, so an idle node runs none. To keep fast items from waiting on the
//! next claim's transaction, the dispatcher claims items ahead of its free
//! workers: about twice as many as its workers finish while one of the
//! recent slower claims is in flight, at most `AHEAD_MAX` (slow items,
//! which need none, get next to none); a worker wakes it when it leaves
//! that few. Browser items are claimed only while the browser pool has a
//! free page for them.
//!
//! **Invariant:** a worker changes an item only through the item driver
//! (`driver.rs`), which publishes files in the same transaction as the state
//! change. An item whose worker dies mid-attempt, or that was claimed and
//! not started when the server stopped, stays `active` in the store and is
//! put back in the queue on the next start (`ItemDriver::recover`).

pub mod commits;
mod cross_node;
pub mod driver;
pub mod fetch;
pub mod files;
pub mod guard;
pub mod scripts;

use std::collections::VecDeque;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use grid_core::catalog::Needs;
use grid_core::item::Failure;
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::browser::pool::BrowserPool;
use crate::store::items::{ItemError, ItemRow, PublishedFile};
use crate::store::Store;
use crate::upstream::Upstream;
use crate::vault::{Purpose, Vault};
use driver::{AttemptEnd, ItemDriver};
use fetch::Fetcher;
use files::FileContent;
use grid_core::wire::proxy::{ProxyCredentials, UpstreamProxy};

/// How long the dispatcher waits before looking at a queue it found empty
/// again (the driver wakes it sooner when items become claimable).
const IDLE_POLL: Duration = Duration::from_millis(500);
/// Most items one claim takes: one transaction, which on PostgreSQL holds
/// their rows' locks while it runs.
const CLAIM_MAX: usize = 1024;
/// Most items a node claims beyond its free workers: enough for fast local
/// fetches to keep every worker busy while a claim waits behind a
/// submission (docs/performance.md, "What makes a fetch item fast") or, on PostgreSQL, behind
/// the round trips of the transaction in flight. 512 bound the claims
/// there (twice what 16 workers finish in a claim of 10 to 30 ms). Raised
/// to 2,048 (bench/scale_out.sh, three pairs of runs): one node 14,599 /
/// 14,599 / 13,605 → 15,748 / 15,267 / 15,385 items per CPU-second, three
/// nodes 12,739 / 12,739 / 13,333 → 15,385 / 14,286 / 13,889 with half the
/// write transactions; against a database 2 ms away one node ran 8,244 →
/// 11,947 items/s (docs/scale-out.md, "Capacity"). SQLite's within the
/// noise or better.
const AHEAD_MAX: usize = 2048;
/// A family this small is checked on the runtime's thread; a larger one (or
/// one with a file for the disk) on the blocking pool.
const CHECK_ON_RUNTIME_BYTES: usize = 64 * 1024;

/// This node's workers, as the dispatcher, its workers and the metrics
/// see them.
#[derive(Default)]
pub struct Workers {
    /// Workers running an attempt now.
    busy: AtomicUsize,
    /// Of them, those running a browser script.
    browsers: AtomicUsize,
    /// Claimed items not started yet, and the workers that take them.
    queue: Mutex<Queue>,
    /// Set when the dispatcher should look again: a worker ended, a browser
    /// item ended, or the claimed items run low while no claim is in flight.
    freed: Notify,
    /// Whether the worker freed last ran a browser item: a claim that
    /// stopped at a browser item for want of room may go on now.
    browser_freed: AtomicBool,
    /// Whether a claim is in flight (its answer wakes the dispatcher anyway).
    claiming: AtomicBool,
    /// A worker that leaves no more than this many claimed items wakes the
    /// dispatcher (the items it keeps claimed ahead).
    low: AtomicUsize,
    /// Recent attempts' duration in microseconds (a moving average).
    attempt_micros: AtomicU64,
}

#[derive(Default)]
struct Queue {
    rows: VecDeque<Arc<ItemRow>>,
    /// Workers alive: running an attempt, or about to take the next item.
    workers: usize,
    /// Set at shutdown: workers take no more items.
    stopping: bool,
}

impl Workers {
    /// Workers running an attempt now.
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }

    /// Items this node has claimed that wait for a free worker.
    pub fn claimed(&self) -> usize {
        self.queue().rows.len()
    }

    /// A poisoned lock only means a worker panicked holding it; every change
    /// under it is a push, a pop or a count.
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds claimed items to the queue; answers the items to start new
    /// workers with (one each, while fewer than `max` are alive).
    fn hand_out(&self, rows: Vec<ItemRow>, max: usize) -> Vec<Arc<ItemRow>> {
        let mut q = self.queue();
        q.rows.extend(rows.into_iter().map(Arc::new));
        let start = max.saturating_sub(q.workers).min(q.rows.len());
        q.workers += start;
        q.rows.drain(..start).collect()
    }

    /// The next item for a worker whose attempt ended; `None` ends the
    /// worker (nothing claimed, or shutting down).
    fn next(&self) -> Option<Arc<ItemRow>> {
        let mut q = self.queue();
        if let Some(row) = q.rows.pop_front().filter(|_| !q.stopping) {
            let left = q.rows.len();
            drop(q);
            if left <= self.low.load(Ordering::SeqCst) && !self.claiming.load(Ordering::SeqCst) {
                self.freed.notify_one();
            }
            return Some(row);
        }
        q.workers -= 1;
        drop(q);
        self.freed.notify_one();
        None
    }

    /// Workers alive and the items waiting for them.
    fn load(&self) -> (usize, usize) {
        let q = self.queue();
        (q.workers, q.rows.len())
    }

    /// Stops handing out items; those claimed and not started are dropped
    /// (they stay active in the store, recovered on the next start).
    fn stop(&self) {
        let mut q = self.queue();
        q.stopping = true;
        q.rows.clear();
    }

    fn take(self: &Arc<Self>, browser: bool) -> Slot {
        self.busy.fetch_add(1, Ordering::Relaxed);
        if browser {
            self.browsers.fetch_add(1, Ordering::Relaxed);
        }
        Slot { workers: self.clone(), browser }
    }

    fn observe(&self, attempt: Duration) {
        // Racy between workers, which only blurs a figure used as a hint.
        let old = self.attempt_micros.load(Ordering::Relaxed);
        // Never 0 once timed: 0 means "no attempt timed yet" (`ahead`).
        self.attempt_micros.store(moving_average(old, attempt).max(1), Ordering::Relaxed);
    }
}

/// A worker's place in the pool, given back when dropped (the attempt
/// ended, or its task was cut short).
struct Slot {
    workers: Arc<Workers>,
    browser: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.workers.busy.fetch_sub(1, Ordering::Relaxed);
        if self.browser {
            self.workers.browsers.fetch_sub(1, Ordering::Relaxed);
            self.workers.browser_freed.store(true, Ordering::Relaxed);
            self.workers.freed.notify_one();
        }
    }
}

/// What the worker pool uses, built once by `main`: the item driver it
/// claims from and reports to, the store (whether files stay inline), its
/// workers' counts, the wake-up for claimable items, the browser pool of
/// the browser scripts, where files are written, and its bounds.
pub struct Runner {
    pub items: Arc<ItemDriver>,
    pub store: Store,
    pub workers: Arc<Workers>,
    /// Woken when items become claimable, so idle workers start at once.
    pub queue_ready: Arc<Notify>,
    /// `None` with `--browsers 0` or without a Chromium executable.
    pub browsers: Option<Arc<BrowserPool>>,
    pub artifacts_dir: PathBuf,
    /// `--max-workers`.
    pub max_workers: usize,
    /// `--allow-private-networks`.
    pub allow_private_networks: bool,
    /// Opens a signed-in capture's context and a batch's sealed proxy
    /// credentials (`vault.rs`).
    pub vault: Arc<Vault>,
    /// The grid's default upstream proxy (`--upstream-proxy`) for items
    /// whose batch names none.
    pub upstream_proxy: Option<UpstreamProxy>,
}

/// This node's workers, busy, claimed ahead and at most, on every scrape of
/// the metrics.
impl crate::metrics::GaugeSource for Runner {
    fn refresh(&self) -> futures_util::future::BoxFuture<'_, ()> {
        let m = crate::metrics::get();
        m.capture_workers.with_label_values(&["busy"]).set(self.workers.busy() as i64);
        m.capture_workers.with_label_values(&["claimed"]).set(self.workers.claimed() as i64);
        m.capture_workers.with_label_values(&["max"]).set(self.max_workers as i64);
        Box::pin(std::future::ready(()))
    }
}

/// Starts the dispatcher. The returned set ends once the pool stopped after
/// `shutdown` and its running attempts ended; aborting it cuts them short.
pub fn spawn_workers(runner: Arc<Runner>, shutdown: watch::Receiver<bool>) -> Result<JoinSet<()>, rustls::Error> {
    let fetcher = Arc::new(Fetcher::new(runner.allow_private_networks, runner.max_workers)?);
    let mut set = JoinSet::new();
    set.spawn(dispatch(runner, fetcher, shutdown));
    Ok(set)
}

type Claiming = Pin<Box<dyn Future<Output = (usize, Duration, Result<Vec<ItemRow>, ItemError>)> + Send>>;

async fn dispatch(runner: Arc<Runner>, fetcher: Arc<Fetcher>, mut shutdown: watch::Receiver<bool>) {
    let max = runner.max_workers.max(1);
    let browser_max = runner.browsers.as_ref().map_or(usize::MAX, |pool| pool.pages().1);
    let workers = runner.workers.clone();
    let mut running = JoinSet::new();
    let mut claiming: Option<Claiming> = None;
    let mut claim_micros: u64 = 0;
    // Whether the last claim found fewer items than it asked for: then the
    // next waits for a wake-up or the poll. A wake-up while a claim is in
    // flight may be for items that claim did not see: it is kept for when
    // the claim answers.
    let mut drained = false;
    let mut woken_while_claiming = false;
    let ready_on = runner.queue_ready.clone();
    let mut ready = Box::pin(ready_on.clone().notified_owned());
    loop {
        while running.try_join_next().is_some() {}
        if *shutdown.borrow() {
            break;
        }
        let (alive, waiting) = workers.load();
        if claiming.is_none() && !drained {
            let ahead = ahead(max, claim_micros, workers.attempt_micros.load(Ordering::Relaxed));
            workers.low.store(ahead, Ordering::SeqCst);
            let want = (max + ahead).saturating_sub(alive + waiting).min(CLAIM_MAX);
            if want > 0 {
                let claimed_browsers = workers.queue().rows.iter().filter(|r| r.script.needs_browser()).count();
                let browser_room =
                    browser_max.saturating_sub(workers.browsers.load(Ordering::Relaxed) + claimed_browsers);
                let items = runner.items.clone();
                workers.claiming.store(true, Ordering::SeqCst);
                claiming = Some(Box::pin(async move {
                    let started = Instant::now();
                    let rows = items.claim_batch(want, browser_room).await;
                    (want, started.elapsed(), rows)
                }));
            }
        }
        tokio::select! {
            (want, took, rows) = in_flight(&mut claiming) => {
                claiming = None;
                workers.claiming.store(false, Ordering::SeqCst);
                claim_micros = recent_peak(claim_micros, took);
                match rows {
                    Ok(rows) => {
                        drained = rows.len() < want && !std::mem::take(&mut woken_while_claiming);
                        for row in workers.hand_out(rows, max) {
                            running.spawn(work(runner.clone(), fetcher.clone(), row));
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "claim failed; trying again shortly");
                        drained = true;
                    }
                }
            }
            _ = &mut ready => {
                drained = false;
                woken_while_claiming = claiming.is_some();
                ready = Box::pin(ready_on.clone().notified_owned());
            }
            _ = workers.freed.notified() => {
                if workers.browser_freed.swap(false, Ordering::Relaxed) {
                    drained = false;
                }
            }
            // Only a drained queue needs looking at again unasked: otherwise
            // a claim in flight or a worker that frees wakes the loop.
            _ = tokio::time::sleep(IDLE_POLL), if drained => drained = false,
            _ = shutdown.changed() => {}
        }
    }
    // Claimed items not started stay active, held by this node: the
    // recovery after shutdown puts them back in the queue, uncounted. A
    // claim still in flight commits before that recovery (both travel
    // through the same group commit, in order).
    workers.stop();
    while running.join_next().await.is_some() {}
    // The workers' last ends, stored before the pool counts as stopped.
    runner.items.ends_stored().await;
}

/// A worker: runs items one after another, from the one it was started
/// with, while the dispatcher keeps the queue filled.
async fn work(runner: Arc<Runner>, fetcher: Arc<Fetcher>, first: Arc<ItemRow>) {
    let mut row = first;
    loop {
        let slot = runner.workers.take(row.script.needs_browser());
        run_item(&runner, &fetcher, row, slot).await;
        match runner.workers.next() {
            Some(next) => row = next,
            None => return,
        }
    }
}

/// A duration's moving average in microseconds, `sample` weighing an
/// eighth; the first sample (`old` 0) stands alone.
fn moving_average(old: u64, sample: Duration) -> u64 {
    let micros = sample.as_micros().min(u128::from(u32::MAX)) as u64;
    if old == 0 {
        micros
    } else {
        (old * 7 + micros) / 8
    }
}

/// Claims' recent duration in microseconds for `ahead`: a longer claim
/// counts at once, shorter ones bring it down by a sixty-fourth each. A
/// claim now and then takes several times the usual (it waits behind a
/// submission's transaction, or the writer's share of a checkpoint), and
/// such claims come every few dozen claims under load: the peak must last
/// until the next one, or the items claimed ahead run out during it and
/// every worker waits (measured in docs/performance.md, "What makes a fetch item fast").
fn recent_peak(old: u64, sample: Duration) -> u64 {
    let micros = sample.as_micros().min(u128::from(u32::MAX)) as u64;
    if micros >= old {
        micros
    } else {
        (old * 63 + micros) / 64
    }
}

/// The claim in flight, or never.
async fn in_flight(claiming: &mut Option<Claiming>) -> (usize, Duration, Result<Vec<ItemRow>, ItemError>) {
    match claiming {
        Some(claim) => claim.await,
        None => std::future::pending().await,
    }
}

/// Items to claim beyond the free workers: twice as many as the workers
/// finish while one claim is in flight (`claim_micros`, the recent slower
/// claims' duration: so none waits for the next claim when one takes longer
/// than the last), at most `AHEAD_MAX`. None until attempts were timed.
fn ahead(max: usize, claim_micros: u64, attempt_micros: u64) -> usize {
    if attempt_micros == 0 {
        return 0;
    }
    let finishing = (2 * max as u64).saturating_mul(claim_micros) / attempt_micros;
    usize::try_from(finishing).unwrap_or(usize::MAX).min(AHEAD_MAX)
}

/// An item's attempt runs in a debug-level span: at tens of thousands of
/// items a second, a span and a line per attempt at info level are a
/// measurable share of the server's CPU per item (measured in
/// docs/operations.md). Completed attempts log at debug; every other end,
/// and every warning, names its item itself, so an info-level log still
/// shows what went wrong and where.
async fn run_item(runner: &Runner, fetcher: &Fetcher, row: Arc<ItemRow>, slot: Slot) {
    let span =
        tracing::debug_span!("item", id = %row.id, script = row.script.as_str(), attempt = row.item.attempts_made + 1);
    run_attempt(runner, fetcher, row, slot).instrument(span).await
}

async fn run_attempt(runner: &Runner, fetcher: &Fetcher, row: Arc<ItemRow>, slot: Slot) {
    let started = Instant::now();
    let cookies = match &row.context_id {
        None => Ok(vec![]),
        Some(context) => context_cookies(runner, &row.account_id, context).await,
    };
    let result = match (item_upstream(runner, &row), cookies) {
        (Err(failure), _) | (_, Err(failure)) => Err(failure),
        (Ok(upstream), Ok(cookies)) => match row.script.row().needs {
            Needs::Browser => browser_script(runner, &row, upstream, &cookies).await,
            Needs::Http => fetcher.run(&row, upstream.as_ref(), &cookies).await,
        },
    };
    let end = stored_end(runner, &row.id, result).await;
    let took = started.elapsed();
    // The worker is free once its files are stored and checked: it takes
    // the next item while this end travels to the database.
    drop(slot);
    runner.workers.observe(took);
    observe_item(&row, took);
    runner.items.end(row, end);
}

/// The cookies of a signed-in capture's context, opened for its account;
/// a context deleted since the submission fails the item.
async fn context_cookies(runner: &Runner, account: &str, context: &str) -> Result<Vec<serde_json::Value>, Failure> {
    let (acc, id) = (account.to_string(), context.to_string());
    let sealed = runner
        .store
        .read(move |c| {
            Ok(match crate::store::contexts::owned(c, &acc, &id)? {
                true => Some(crate::store::contexts::sealed_state(c, &id)?),
                false => None,
            })
        })
        .await
        .map_err(|e| Failure::Transient(format!("the context was not read: {e}")))?;
    let Some(sealed) = sealed else {
        return Err(Failure::Terminal(format!("context {context} was deleted")));
    };
    let Some(sealed) = sealed else { return Ok(vec![]) };
    let plain = runner
        .vault
        .open(account, crate::vault::Purpose::ContextState, context, &sealed)
        .map_err(|e| Failure::Terminal(format!("context {context}: {e}")))?;
    let state: serde_json::Value = serde_json::from_slice(&plain)
        .map_err(|e| Failure::Terminal(format!("context {context} does not read: {e}")))?;
    Ok(state["cookies"].as_array().cloned().unwrap_or_default())
}

/// A browser script's attempt on the pool, or the failure of a grid that
/// runs no browsers.
async fn browser_script(
    runner: &Runner,
    row: &ItemRow,
    upstream: Option<Upstream>,
    cookies: &[serde_json::Value],
) -> Result<Vec<FileContent>, Failure> {
    match &runner.browsers {
        // Boxed: a browser script's state machine is about 14 KiB, and
        // inline it would make every fetch item's task that large too,
        // copied as the task is spawned and as it finishes.
        Some(pool) => Box::pin(scripts::run(pool, row, upstream, cookies)).await,
        None => Err(Failure::Terminal(format!(
            "script {} needs the browser pool, which this grid does not run (--browsers 0 or no Chromium)",
            row.script.as_str()
        ))),
    }
}

/// The upstream proxy an item's traffic goes through: its batch's (the
/// credentials opened from their sealed column), else the grid's default
/// (docs/proxies.md, precedence).
fn item_upstream(runner: &Runner, row: &ItemRow) -> Result<Option<Upstream>, Failure> {
    let Some(mut proxy) = row.proxy.clone().or_else(|| runner.upstream_proxy.clone()) else { return Ok(None) };
    if let (Some(sealed), true) = (&row.proxy_sealed, row.proxy.is_some()) {
        let plain = runner
            .vault
            .open(&row.account_id, Purpose::ProxyCredentials, &row.batch_id, sealed)
            .map_err(|e| Failure::Terminal(format!("the batch's proxy credentials could not be opened: {e}")))?;
        proxy.credentials = ProxyCredentials::from_sealable(&plain);
    }
    Ok(Some(Upstream { proxy, allow_private: runner.allow_private_networks }))
}

/// An attempt's end from what its script gave: its files written and
/// checked, or its failure.
async fn stored_end(runner: &Runner, item_id: &str, result: Result<Vec<FileContent>, Failure>) -> AttemptEnd {
    match result {
        Ok(files) => match write_files(runner, item_id, files).await {
            Ok(stored) => AttemptEnd::Succeeded(stored),
            Err(e) => AttemptEnd::Failed(Failure::Transient(format!("storing files failed: {e}"))),
        },
        Err(failure) => AttemptEnd::Failed(failure),
    }
}

/// An attempt's duration in the metrics, per script.
fn observe_item(row: &ItemRow, took: Duration) {
    crate::metrics::get().item_seconds.with_label_values(&[row.script.as_str()]).observe(crate::metrics::secs(took));
}

/// How a one-call capture's attempt ended, once stored.
pub enum Attended {
    /// Its files are published and its price charged: the answer's file,
    /// and the target's HTTP status as the meta file records it.
    Completed { file: FileContent, target_status: Option<u64>, charged_micros: i64 },
    /// It failed (published as its failure record, its reservation released).
    Failed(Failure),
}

/// Runs a one-call capture's attempt on the caller's task (the item was
/// claimed for it, `ItemDriver::take_attended`) on the browser pool, as a
/// worker runs a claimed item, and stores its end before answering: the
/// file `answers` is then published and charged, or the failure recorded
/// and released. The attempt holds a worker's browser place meanwhile, so
/// the dispatcher claims no more browser items than the pool has room for.
pub async fn run_attended(
    runner: &Runner,
    claim: Arc<ItemRow>,
    answers: grid_core::catalog::ArtifactKind,
) -> Result<Attended, ItemError> {
    let slot = runner.workers.take(true);
    let started = Instant::now();
    let result = match item_upstream(runner, &claim) {
        Err(failure) => Err(failure),
        Ok(upstream) => match &claim.context_id {
            None => browser_script(runner, &claim, upstream, &[]).await,
            Some(context) => match context_cookies(runner, &claim.account_id, context).await {
                Ok(cookies) => browser_script(runner, &claim, upstream, &cookies).await,
                Err(failure) => Err(failure),
            },
        },
    };
    // What the answer needs of the files, before they are written.
    let kept = result.as_ref().ok().map(|files| {
        let target_status = files
            .iter()
            .find(|f| f.kind == grid_core::catalog::ArtifactKind::Meta)
            .and_then(|m| serde_json::from_slice::<serde_json::Value>(&m.bytes).ok())
            .and_then(|meta| meta["status"].as_u64());
        (files.iter().find(|f| f.kind == answers).cloned(), target_status)
    });
    let end = match (stored_end(runner, &claim.id, result).await, &kept) {
        (AttemptEnd::Succeeded(_), Some((None, _))) => {
            AttemptEnd::Failed(Failure::Transient(format!("the page gave no {answers:?} file")))
        }
        (end, _) => end,
    };
    drop(slot);
    observe_item(&claim, started.elapsed());
    let failure = match &end {
        AttemptEnd::Failed(f) => Some(f.clone()),
        AttemptEnd::Succeeded(_) => None,
    };
    let outcome = runner.items.finish(&claim, end).await?;
    let charge = grid_core::item::TxEffect::Settle(grid_core::item::Settlement::Charge);
    let charged_micros = if outcome.effects.in_tx.contains(&charge) { claim.price_micros } else { 0 };
    Ok(match (failure, kept) {
        (None, Some((Some(file), target_status))) => Attended::Completed { file, target_status, charged_micros },
        (Some(failure), _) => Attended::Failed(failure),
        (None, _) => Attended::Failed(Failure::Transient("the attempt kept no file".into())),
    })
}

/// Writes and checks an attempt's files; the driver publishes them if the
/// item machine says so. A small family kept in the database is checked
/// here, without a hop to the blocking pool.
async fn write_files(runner: &Runner, item_id: &str, files: Vec<FileContent>) -> std::io::Result<Vec<PublishedFile>> {
    let all_inline = runner.store.files_inline();
    let bytes: usize = files.iter().map(|f| f.bytes.len()).sum();
    let stays_inline = all_inline || files.iter().all(|f| f.bytes.len() <= files::INLINE_MAX_BYTES);
    if stays_inline && bytes <= CHECK_ON_RUNTIME_BYTES {
        return Ok(files.into_iter().map(|f| files::inline(item_id, f)).collect());
    }
    let (root, id) = (runner.artifacts_dir.clone(), item_id.to_string());
    tokio::task::spawn_blocking(move || files::write_family(&root, &id, files, all_inline))
        .await
        .map_err(std::io::Error::other)?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn future_size<A, B, C, Fut>(_: impl FnOnce(A, B, C) -> Fut) -> usize {
        std::mem::size_of::<Fut>()
    }

    /// A worker's task holds `run_item`'s state and is moved as it is
    /// spawned and as it finishes: a browser script's state (about 14 KiB)
    /// inlined there made each fetch worker's task that large.
    #[test]
    fn a_workers_task_stays_small() {
        let size = future_size(work);
        assert!(size <= 2048, "a worker's future is {size} bytes");
    }

    /// The pool's queue: claimed items start workers up to the ceiling, the
    /// rest wait for a worker that finished, a worker that finds none ends,
    /// and none is handed out once stopping.
    #[test]
    fn workers_start_up_to_the_ceiling_take_what_waits_and_end_when_none_is_left() {
        let (_dir, store) = crate::store::items::tests::store();
        let c = crate::store::items::tests::caller(&store, 10_000, None);
        crate::store::items::tests::submit(&store, &c, 6, None).unwrap();
        let rows = store.write_blocking(|tx| crate::store::items::queue_head(tx, 6)).unwrap();
        let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
        let workers = Workers::default();
        let started: Vec<String> = workers.hand_out(rows[..5].to_vec(), 2).iter().map(|r| r.id.clone()).collect();
        assert_eq!(started, ids[..2]);
        assert_eq!(workers.load(), (2, 3));
        // A second claim while both run: nothing new starts.
        assert!(workers.hand_out(rows[5..].to_vec(), 2).is_empty());
        assert_eq!(workers.load(), (2, 4));
        let taken: Vec<String> = (0..4).map(|_| workers.next().unwrap().id.clone()).collect();
        assert_eq!(taken, ids[2..]);
        assert!(workers.next().is_none(), "nothing left: the worker ends");
        assert_eq!(workers.load(), (1, 0));
        assert_eq!(workers.hand_out(rows[..1].to_vec(), 2).len(), 1, "room for one more worker");
        workers.hand_out(rows[1..3].to_vec(), 2);
        workers.stop();
        assert_eq!(workers.load(), (2, 0), "claimed items dropped at shutdown");
        assert!(workers.next().is_none());
    }

    #[test]
    fn a_slow_claim_counts_at_once_and_fades_over_the_next_ones() {
        let ms = Duration::from_millis;
        let mut peak = recent_peak(0, ms(1));
        assert_eq!(peak, 1_000);
        peak = recent_peak(peak, ms(6));
        assert_eq!(peak, 6_000);
        peak = recent_peak(peak, ms(1));
        assert_eq!(peak, (6_000 * 63 + 1_000) / 64);
        // Still most of it a few dozen claims later; gone after a few hundred.
        for _ in 0..30 {
            peak = recent_peak(peak, ms(1));
        }
        assert!(peak > 3_000, "{peak}");
        for _ in 0..500 {
            peak = recent_peak(peak, ms(1));
        }
        assert!(peak < 1_010, "{peak}");
    }

    #[test]
    fn claims_ahead_only_what_workers_finish_while_a_claim_is_in_flight() {
        // Unknown attempt time: nothing ahead; attempts far longer than a
        // claim: nothing either.
        assert_eq!(ahead(16, 2_000, 0), 0);
        assert_eq!(ahead(4, 2_000, 1_500_000), 0);
        // 200 ms attempts, 2 ms claims: 1,000 workers finish 10 meanwhile;
        // twice that is claimed ahead.
        assert_eq!(ahead(1_000, 2_000, 200_000), 20);
        // Attempts shorter than a claim: several claims' worth, up to AHEAD_MAX.
        assert_eq!(ahead(16, 2_000, 400), 160);
        assert_eq!(ahead(1_000, 2_000, 200), AHEAD_MAX);
    }
}
