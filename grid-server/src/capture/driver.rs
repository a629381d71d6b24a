//! The capture item driver: the one place an item changes state.
//!
//! Every change is one step, in one transaction and in this order wherever
//! it happens (alone, a claim of many, the ends of many): load the item,
//! ask `grid_core::item::apply`, execute the effects the machine returned,
//! save the new state. The machine splits its effects by when they happen
//! (`item::Effects`) and each half has one executor, an exhaustive `match`
//! with no `_` arm: `execute_in_tx` gathers what the transaction writes
//! besides the state (files, ledger entries; written after the state, so a
//! fenced save refused writes nothing else), `execute_after_commit` the
//! wake-ups sent once it commits.
//! Workers only report what happened to an attempt (`AttemptEnd`); whether
//! that publishes files or a failure record, owes a charge or a release, or
//! requeues the item is the machine's answer, carried out here.
//!
//! The transactions travel through the group commit (`commits.rs`), each in
//! a savepoint of its own. An item's retry backoff is its `run_at`, a durable
//! due time: the due loop (`crate::due`) calls `fire_due`, which makes due
//! items claimable and wakes idle workers, whichever process set it.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::store::accounts::Settling;
use crate::store::Conn;
use crate::store::SealedProxy;
use futures_util::future::BoxFuture;
use grid_core::catalog::Profile;
use grid_core::error::ApiError;
use grid_core::ids;
use grid_core::item::{self, Backoff, Event, Failure, Outcome, OutsideEffect, TransitionError, TxEffect};
use grid_core::time::Millis;
use grid_core::wire::batch::{BatchCreated, BatchSubmission};
use grid_core::wire::item::ItemRetried;
use serde_json::json;
use tokio::sync::{mpsc, oneshot, Notify};

use super::commits::Commits;
use super::cross_node::{self, CrossNode};
use super::files::{self, FileContent};
use crate::clock::Clock;
use crate::due::DueTimes;
use crate::ids::new_id;
use crate::store::accounts::Caller;
use crate::store::accounts::{self, Entry};
use crate::store::idempotency::{self, Answer, Created};
use crate::store::items::{self, ItemError, ItemRow, PublishedFile};
use crate::store::{retry, Order, Store, StoreError};

/// How the driver wakes whoever waits on it, once a transaction committed.
#[derive(Clone, Default)]
pub struct Wake {
    /// Idle capture workers: items became claimable.
    pub queue: Arc<Notify>,
    /// The due loop: a due time was set that may be sooner than its next pass.
    pub due: Arc<Notify>,
    /// The other nodes' idle workers, when nodes share the store
    /// (`cross_node`): a permit is an announcement owed.
    pub elsewhere: Arc<Notify>,
}

/// What a worker reports at the end of an attempt.
#[derive(Debug, Clone)]
pub enum AttemptEnd {
    /// The script's whole file family, stored and checked, ready to publish.
    Succeeded(Vec<PublishedFile>),
    Failed(Failure),
}

impl AttemptEnd {
    fn event(&self) -> Event {
        match self {
            AttemptEnd::Succeeded(_) => Event::Succeed,
            AttemptEnd::Failed(f) => Event::Fail(f.clone()),
        }
    }

    fn files(&self) -> &[PublishedFile] {
        match self {
            AttemptEnd::Succeeded(files) => files,
            AttemptEnd::Failed(_) => &[],
        }
    }
}

pub struct ItemDriver {
    /// This node's name: the holder of the items it claims.
    node: Arc<str>,
    commits: Commits,
    store: Store,
    clock: Arc<dyn Clock>,
    backoff: Backoff,
    wake: Wake,
    /// Ends of attempts for the publisher (`publish`).
    ends: mpsc::UnboundedSender<EndRequest>,
    /// Reported ends (`end`) not stored yet.
    unstored: Arc<Unstored>,
    /// The wake-ups to and from other nodes, while the driver lives.
    _cross_node: Option<CrossNode>,
}

/// An attempt's end waiting to be stored, and who learns how it was.
struct EndRequest {
    claim: Arc<ItemRow>,
    end: Arc<AttemptEnd>,
    answer_to: AnswerTo,
    /// Times it met a database error so far.
    tries: u32,
}

enum AnswerTo {
    /// A caller waiting on `finish`: a one-call capture's, or a test.
    Caller(oneshot::Sender<Result<Outcome, ItemError>>),
    /// Nobody waits: the worker went on to its next item, and the publisher
    /// reports the end (`report_end`). The guard counts it unstored
    /// until then.
    Report(UnstoredEnd),
}

impl EndRequest {
    fn answer(self, answer: Result<Outcome, ItemError>) {
        match self.answer_to {
            AnswerTo::Caller(reply) => {
                let _ = reply.send(answer);
            }
            AnswerTo::Report(_unstored) => report_end(&self.claim, &answer),
        }
    }

    /// Whether anybody still wants the answer.
    fn wanted(&self) -> bool {
        match &self.answer_to {
            AnswerTo::Caller(reply) => !reply.is_closed(),
            AnswerTo::Report(_) => true,
        }
    }
}

/// Ends reported and not stored yet, so that a stopping pool can wait for
/// them (`ItemDriver::ends_stored`).
#[derive(Default)]
struct Unstored {
    count: AtomicUsize,
    none: Notify,
}

/// One end counted in `Unstored` until dropped (answered, or dropped with a
/// stopped publisher).
struct UnstoredEnd(Arc<Unstored>);

impl UnstoredEnd {
    fn new(unstored: &Arc<Unstored>) -> UnstoredEnd {
        unstored.count.fetch_add(1, Ordering::SeqCst);
        UnstoredEnd(unstored.clone())
    }
}

impl Drop for UnstoredEnd {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.none.notify_waiters();
        }
    }
}

/// Most attempt ends stored in one step of the publisher.
const MAX_ENDS: usize = 512;
impl ItemDriver {
    /// Starts the group commit the driver's transactions travel through,
    /// and the publisher of attempts' ends.
    pub fn start(
        store: Store,
        clock: Arc<dyn Clock>,
        backoff: Backoff,
        wake: Wake,
        node: &str,
    ) -> std::io::Result<ItemDriver> {
        let commits = Commits::start(store.clone())?;
        let (ends, pending) = mpsc::unbounded_channel();
        let publisher = Publisher {
            commits: commits.clone(),
            clock: clock.clone(),
            backoff,
            wake: wake.clone(),
            again: ends.downgrade(),
        };
        tokio::spawn(publish(publisher, pending));
        let unstored = Arc::default();
        let _cross_node = cross_node::start(&store, node, wake.queue.clone(), wake.elsewhere.clone());
        Ok(ItemDriver { node: node.into(), commits, store, clock, backoff, wake, ends, unstored, _cross_node })
    }

    /// Claims the next item in queue order (making due delayed items
    /// claimable first, so they keep their place in the queue).
    #[cfg(test)]
    pub async fn claim(&self) -> Result<Option<ItemRow>, ItemError> {
        Ok(self.claim_batch(1, usize::MAX).await?.pop())
    }

    /// Claims up to `limit` items from the head of the queue, in queue order
    /// and in one transaction (making due delayed items claimable first).
    /// At most `browser_limit` of them need the browser pool: the claim stops
    /// before the first one beyond it, so this node takes a prefix of the
    /// queue and never claims more browser items than it can start.
    ///
    /// Every item goes through the machine and gets a fencing token of its
    /// own (`items::take_lease`), exactly as if claimed alone.
    pub async fn claim_batch(&self, limit: usize, browser_limit: usize) -> Result<Vec<ItemRow>, ItemError> {
        let node = self.node.clone();
        self.transact(Order::Rows, move |tx, now, backoff, after| {
            claim_batch(tx, &node, limit, browser_limit, now, backoff, after)
        })
        .await
    }

    /// Ends an attempt of the item `claim` (as its claim answered it); the
    /// worker goes on to its next item at once, and the publisher reports
    /// how the end was stored (`report_end`). Tried again while the
    /// database fails (busy: an admin command may hold it for a moment),
    /// given up after about a minute: the item then stays active and is
    /// recovered on the next start.
    ///
    /// Stored only under the claim's fencing token: a claim taken over since
    /// (`ItemError::LeaseLost`) stores nothing.
    ///
    /// Ends waiting at the same moment are stored together, in one step of
    /// the publisher (`finish_all`): many items per statement.
    pub fn end(&self, claim: Arc<ItemRow>, end: AttemptEnd) {
        self.send(claim, end, AnswerTo::Report(UnstoredEnd::new(&self.unstored)));
    }

    /// `end`, answering how it was stored: what a one-call capture's caller
    /// waits for before it answers.
    pub async fn finish(&self, claim: &Arc<ItemRow>, end: AttemptEnd) -> Result<Outcome, ItemError> {
        let (reply, answer) = oneshot::channel();
        self.send(claim.clone(), end, AnswerTo::Caller(reply));
        answer.await.unwrap_or_else(|_| Err(publisher_stopped()))
    }

    /// Waits until every end given to `end` was stored or given up.
    pub async fn ends_stored(&self) {
        loop {
            let none = self.unstored.none.notified();
            if self.unstored.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            none.await;
        }
    }

    fn send(&self, claim: Arc<ItemRow>, end: AttemptEnd, answer_to: AnswerTo) {
        let request = EndRequest { claim, end: Arc::new(end), answer_to, tries: 0 };
        if let Err(mpsc::error::SendError(request)) = self.ends.send(request) {
            request.answer(Err(publisher_stopped()));
        }
    }

    /// POST /batches for `caller`: the batch stored and its items queued
    /// in one transaction, under the request's Idempotency-Key if it has
    /// one (`key`: a resend with the same body is answered the first
    /// answer, `Outcome::Replayed`, and queues nothing).
    pub async fn submit(
        &self,
        caller: &Caller,
        sub: BatchSubmission,
        sealed: Option<SealedProxy>,
        key: Option<idempotency::Key>,
    ) -> Result<idempotency::Outcome<BatchCreated>, ItemError> {
        let caller = caller.clone();
        let outcome = self
            .transact(Order::Rows, move |tx, now, _, after| {
                idempotency::once(tx, &caller.account_id, key.as_ref(), now, |tx| {
                    let created = submit_batch(tx, &caller, &sub, sealed.as_ref(), now, after)?;
                    let answer = Answer::json(201, &created)?;
                    Ok(Created { subject: created.batch_id.clone(), answer, value: created })
                })
            })
            .await?;
        if let idempotency::Outcome::Performed(created, _) = &outcome {
            tracing::info!(batch = %created.batch_id, items = created.job_count, "batch queued");
        }
        Ok(outcome)
    }

    /// A one-call capture for `caller` (POST /screenshot, /pdf, /content):
    /// a batch of its one attended item (`grid_core::item::submit_attended`),
    /// reserved and claimed by this node in one transaction, so no worker
    /// and no other node takes it. Its caller runs the attempt and ends it
    /// through `finish`.
    pub async fn take_attended(&self, caller: &Caller, sub: BatchSubmission) -> Result<Arc<ItemRow>, ItemError> {
        let (caller, node) = (caller.clone(), self.node.clone());
        let claim = self
            .transact(Order::Rows, move |tx, now, backoff, after| {
                let (created, rows) = create(tx, &caller, &sub, None, item::submit_attended(), now, after)?;
                // Its one item, as stored (its `seq` is the store's).
                let id = rows.first().map(|r| r.id.clone()).unwrap_or_default();
                let missing = || StoreError::NotFound(format!("the item of batch {}", created.batch_id));
                let row = items::load_item(tx, &id)?.ok_or_else(missing)?;
                Ok(claim_rows(tx, &node, vec![row], now, backoff, after)?.pop().ok_or_else(missing)?)
            })
            .await?;
        tracing::debug!(item = %claim.id, batch = %claim.batch_id, "one-call capture taken");
        Ok(Arc::new(claim))
    }

    /// POST /jobs/{id}/retry for a capture item of `account_id`. Ordered by
    /// its row (`retry` locks the item before it checks it).
    pub async fn retry(&self, account_id: &str, id: &str) -> Result<ItemRetried, ItemError> {
        let (account_id, id) = (account_id.to_string(), id.to_string());
        self.transact(Order::Rows, move |tx, now, backoff, after| retry(tx, &account_id, &id, now, backoff, after))
            .await
    }

    /// Puts every item left active (by a stopped server, or by workers cut
    /// short at shutdown) back in the queue without counting the attempt.
    pub async fn recover(&self) -> Result<usize, ItemError> {
        let node = self.node.clone();
        self.recover_node(&node).await
    }

    /// Puts the items `node` was running back in the queue, uncounted: this
    /// node's own at its start, a dead node's when it is taken over.
    pub async fn recover_node(&self, node: &str) -> Result<usize, ItemError> {
        let node = node.to_string();
        self.transact(Order::Grid, move |tx, now, backoff, after| recover_active(tx, &node, now, backoff, after)).await
    }

    /// Makes delayed items due by `now` claimable; answers the next due time.
    /// Writes only when something is due, so an idle grid's due loop costs
    /// one read per pass. Ordered by rows, as the claims that wake due items
    /// too: `items::due_delayed` locks each item it wakes.
    pub async fn fire(&self, now: Millis) -> Result<Option<Millis>, ItemError> {
        let next = self.store.read(items::next_wake).await?;
        if next.is_none_or(|t| t > now) {
            return Ok(next);
        }
        let backoff = self.backoff;
        let (next, after) = self
            .commits
            .run(Order::Rows, move |tx| {
                let mut after = After::default();
                wake_due(tx, now, backoff, &mut after)?;
                Ok((items::next_wake(tx)?, after))
            })
            .await?;
        self.wake.signal(&after);
        Ok(next)
    }

    /// Runs `work` as one transaction at the clock's time, then wakes whoever
    /// its effects asked for. `work` may run twice (a group that is run
    /// again request by request, `commits.rs`): it writes only through `tx`.
    async fn transact<T, F>(&self, order: Order, work: F) -> Result<T, ItemError>
    where
        T: Send + 'static,
        F: Fn(&Conn, Millis, Backoff, &mut After) -> Result<T, ItemError> + Send + 'static,
    {
        let (clock, backoff) = (self.clock.clone(), self.backoff);
        let (value, after) = self
            .commits
            .run(order, move |tx| {
                let mut after = After::default();
                let value = work(tx, clock.now(), backoff, &mut after)?;
                Ok((value, after))
            })
            .await?;
        self.wake.signal(&after);
        Ok(value)
    }
}

fn publisher_stopped() -> ItemError {
    ItemError::Store(StoreError::Task("the publisher of attempt ends has stopped".into()))
}

/// What the publisher needs: the group commit, and a way to send an end
/// again (weak, so that the publisher ends with the driver).
struct Publisher {
    commits: Commits,
    clock: Arc<dyn Clock>,
    backoff: Backoff,
    wake: Wake,
    again: mpsc::WeakUnboundedSender<EndRequest>,
}

/// The publisher: stores the ends of attempts that wait at the same moment
/// as one request of the group commit (`finish_all`), then answers each.
/// Should that request fail as a whole (a database error), every end of it
/// is stored alone, each in a request of its own, so only a faulty end
/// fails; an end that met a database error is tried again later.
///
/// One step is in flight at a time, on either store: the ends that arrive
/// while it waits on its round trips go into the next one, which grows with
/// them. On PostgreSQL a claim still runs beside it, on the other commit
/// thread (`Store::concurrent_writers`), so a claim does not wait for the
/// ends' round trips. Two steps in flight (one per commit thread) made smaller
/// groups whose transactions contended for the same pages: one node's
/// items per CPU-second rose 5% with one (bench/scale_out.sh, interleaved:
/// 14,085 / 13,889 / 14,493 against 13,158 / 13,889 / 12,987), and a
/// database 2 ms away ran 7,994 items/s against 7,299.
async fn publish(publisher: Publisher, mut pending: mpsc::UnboundedReceiver<EndRequest>) {
    loop {
        let Some(first) = pending.recv().await else { return };
        let mut batch = vec![first];
        while batch.len() < MAX_ENDS {
            match pending.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        store_ends(&publisher, batch).await;
    }
}

/// One step of the publisher: `batch`'s ends stored together, or each alone.
async fn store_ends(publisher: &Publisher, mut batch: Vec<EndRequest>) {
    let Publisher { commits, clock, backoff, wake, .. } = publisher;
    {
        let ends: Arc<Vec<(Arc<ItemRow>, Arc<AttemptEnd>)>> =
            Arc::new(batch.iter().map(|r| (r.claim.clone(), r.end.clone())).collect());
        let (together, at, backoff) = (ends.clone(), clock.clone(), *backoff);
        let stored = commits
            .run(Order::Rows, move |tx| {
                let mut after = After::default();
                let answers = finish_all(tx, &together, at.now(), backoff, &mut after)?;
                Ok((answers, after))
            })
            .await;
        match stored {
            Ok((answers, after)) => {
                wake.signal(&after);
                for (request, answer) in batch.into_iter().zip(answers) {
                    publisher.answer(request, answer);
                }
            }
            Err(e) if batch.len() == 1 => {
                if let Some(request) = batch.pop() {
                    publisher.answer(request, Err(e));
                }
            }
            Err(_) => {
                let alone = batch.into_iter().map(|request| {
                    let (clock, publisher) = (clock.clone(), publisher);
                    async move {
                        let (claim, end) = (request.claim.clone(), request.end.clone());
                        let stored = commits
                            .run(Order::Rows, move |tx| {
                                let mut after = After::default();
                                let outcome = finish(tx, &claim, &end, clock.now(), backoff, &mut after)?;
                                Ok((outcome, after))
                            })
                            .await;
                        let answer = stored.map(|(outcome, after)| {
                            wake.signal(&after);
                            outcome
                        });
                        publisher.answer(request, answer);
                    }
                });
                futures_util::future::join_all(alone).await;
            }
        }
    }
}

impl Publisher {
    /// Answers an end, or sends it again after a while if it met a
    /// database error and is still wanted.
    fn answer(&self, mut request: EndRequest, answer: Result<Outcome, ItemError>) {
        let Err(ItemError::Store(e)) = &answer else { return request.answer(answer) };
        request.tries += 1;
        if request.tries >= retry::TRIES || !request.wanted() {
            return request.answer(answer);
        }
        if !matches!(e, StoreError::Busy) {
            tracing::warn!(id = %request.claim.id, error = %e, "storing attempt end failed; trying again");
        }
        let (again, delay) = (self.again.clone(), retry::delay(request.tries));
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            match again.upgrade() {
                Some(again) => {
                    if let Err(mpsc::error::SendError(request)) = again.send(request) {
                        request.answer(Err(publisher_stopped()));
                    }
                }
                None => request.answer(Err(publisher_stopped())),
            }
        });
    }
}

impl DueTimes for ItemDriver {
    fn fire_due(&self, now: Millis) -> BoxFuture<'_, Option<Millis>> {
        Box::pin(async move {
            match self.fire(now).await {
                Ok(next) => next,
                Err(e) => {
                    tracing::warn!(error = %e, "waking due items failed; the next pass tries again");
                    None
                }
            }
        })
    }
}

/// Wake-ups owed once the transaction commits (never before: a worker woken
/// early would find nothing).
#[derive(Debug, Default)]
struct After {
    queue: bool,
    due: bool,
}

impl Wake {
    fn signal(&self, after: &After) {
        if after.queue {
            self.queue.notify_waiters();
            self.elsewhere.notify_one();
        }
        if after.due {
            // A permit, not `notify_waiters`: the loop may be mid-pass.
            self.due.notify_one();
        }
    }
}

/// The machine's first step for every item of a batch `caller` submitted
/// (`grid_core::item::submit`), in the caller's transaction: the batch and
/// its items stored, their reservation written (a refusal rolls all of it
/// back: nothing is queued), idle workers woken once it commits.
fn submit_batch(
    tx: &Conn,
    caller: &Caller,
    sub: &BatchSubmission,
    sealed: Option<&SealedProxy>,
    now: Millis,
    after: &mut After,
) -> Result<BatchCreated, ItemError> {
    create(tx, caller, sub, sealed, item::submit(sub.priority), now, after).map(|(created, _)| created)
}

/// A batch's creation from its items' first step (`first`, the machine's
/// answer for every item of it): the batch and its items stored, their
/// reservation written, the step's wake-ups owed.
fn create(
    tx: &Conn,
    caller: &Caller,
    sub: &BatchSubmission,
    sealed: Option<&SealedProxy>,
    first: Outcome,
    now: Millis,
    after: &mut After,
) -> Result<(BatchCreated, Vec<ItemRow>), ItemError> {
    let Outcome { item, effects } = first;
    let batch_id = sealed.map_or_else(|| new_id(ids::BATCH), |s| s.id.clone());
    let rows = items::new_rows(&batch_id, caller, sub, &item, now);
    items::insert_batch(tx, caller, sub, &batch_id, &rows, now, sealed.map(|s| s.bytes.as_slice()))?;
    let mut writes = Writes::paid_by(caller, &batch_id);
    for row in &rows {
        execute_in_tx(row, &[], &effects.in_tx, now, &mut writes);
    }
    execute_after_commit(&effects.after_commit, after);
    writes.store(tx, now)?;
    Ok((BatchCreated { batch_id: batch_id.clone(), job_count: rows.len() as u32 }, rows))
}

/// `submit_batch` alone, for tests that need a batch stored.
#[cfg(test)]
pub(crate) fn create_batch(
    tx: &Conn,
    caller: &Caller,
    sub: &BatchSubmission,
    now: Millis,
) -> Result<BatchCreated, ItemError> {
    submit_batch(tx, caller, sub, None, now, &mut After::default())
}

/// Load → apply → execute → save, all in the caller's transaction.
fn step(
    tx: &Conn,
    id: &str,
    event: Event,
    files: &[PublishedFile],
    now: Millis,
    backoff: Backoff,
    after: &mut After,
) -> Result<(ItemRow, Outcome), ItemError> {
    let row = items::load_item(tx, id)?.ok_or_else(|| StoreError::NotFound(format!("item {id}")))?;
    step_row(tx, row, event, files, now, backoff, after)
}

/// `step` for a row the caller already loaded in this transaction.
fn step_row(
    tx: &Conn,
    row: ItemRow,
    event: Event,
    files: &[PublishedFile],
    now: Millis,
    backoff: Backoff,
    after: &mut After,
) -> Result<(ItemRow, Outcome), ItemError> {
    let outcome = item::apply(&row.item, event, now, backoff)?;
    let mut writes = Writes::default();
    execute_in_tx(&row, files, &outcome.effects.in_tx, now, &mut writes);
    execute_after_commit(&outcome.effects.after_commit, after);
    items::save_item(tx, &row.id, &outcome.item, now)?;
    writes.store(tx, now)?;
    Ok((row, outcome))
}

/// What a transaction's effects write besides the items' states, gathered by
/// `execute` for many items and written by its caller in a few statements,
/// in the same transaction: the files it publishes and the ledger entries
/// its ends owe.
#[derive(Default)]
struct Writes<'a> {
    /// Who pays the reservations gathered in `reserve`, and its ledger
    /// subject: the caller and the batch, when a batch is created.
    payer: Option<(&'a Caller, &'a str)>,
    /// Sum of the reservations of the items created (one ledger entry).
    reserve: i64,
    publish: Vec<(&'a str, Cow<'a, PublishedFile>)>,
    settle: Vec<Entry<'a>>,
}

impl<'a> Writes<'a> {
    /// The writes of a batch's creation: its items' reservations are one
    /// entry, billed to `caller`, whose subject is the batch.
    fn paid_by(caller: &'a Caller, batch_id: &'a str) -> Writes<'a> {
        Writes { payer: Some((caller, batch_id)), ..Writes::default() }
    }

    fn store(&self, tx: &Conn, now: Millis) -> Result<(), ItemError> {
        if self.reserve > 0 {
            let Some((caller, subject)) = self.payer else {
                return Err(StoreError::Invalid("a reservation with no payer".into()).into());
            };
            accounts::reserve(tx, caller, self.reserve, subject, now)?;
        }
        // The files and the ledger's entries in one round trip. Every
        // settlement here is an end's that passed its claim's fence.
        let files = items::file_inserts(tx.dialect(), &self.publish, now);
        Ok(accounts::append_all_with(tx, files, &self.settle, Settling::Fenced, now)?)
    }
}

/// The one executor of the effects written in a step's transaction: what
/// they write besides the item's state is gathered in `writes` (files,
/// ledger entries), which the caller stores in the same transaction after
/// the state. No `_` arm: a new effect does not compile until it is
/// executed here.
fn execute_in_tx<'a>(
    row: &'a ItemRow,
    files: &'a [PublishedFile],
    effects: &[TxEffect],
    now: Millis,
    writes: &mut Writes<'a>,
) {
    for effect in effects {
        match effect {
            TxEffect::Reserve => writes.reserve += row.price_micros,
            TxEffect::PublishFiles => writes.publish.extend(files.iter().map(|f| (row.id.as_str(), Cow::Borrowed(f)))),
            TxEffect::PublishFailureRecord { attempt, reason } => {
                let record = files::inline(&row.id, failure_record(row, *attempt, reason, now));
                writes.publish.push((row.id.as_str(), Cow::Owned(record)));
            }
            // The charge or release, in the transaction that ends the item:
            // the balance is exact once the end is stored.
            TxEffect::Settle(owed) => writes.settle.push(items::settlement(row, *owed)),
        }
    }
}

/// The one executor of the effects that follow the commit: the wake-ups
/// are gathered in `after`, which `Wake::signal` sends once the transaction
/// committed (a group that runs again starts a new `After`). No `_` arm.
fn execute_after_commit(effects: &[OutsideEffect], after: &mut After) {
    for effect in effects {
        match effect {
            // The item's `run_at` is saved with it; the due loop, woken,
            // reads the earliest one from the store (`fire`) and sleeps
            // until then.
            OutsideEffect::Requeue => after.due = true,
            OutsideEffect::Enqueue => after.queue = true,
        }
    }
}

/// The meta file of a failed item (docs/captures.md). Small, so it is kept
/// in the database and written by the transaction that fails the item.
fn failure_record(row: &ItemRow, attempt: u32, reason: &str, now: Millis) -> FileContent {
    FileContent::meta(&json!({
        "outcome": "failure",
        "script": row.script.as_str(),
        "profileId": row.profile.as_str(),
        "url": row.url,
        "reason": reason,
        "attempt": attempt,
        "failedAt": now.to_iso(),
    }))
}

fn wake_due(tx: &Conn, now: Millis, backoff: Backoff, after: &mut After) -> Result<usize, ItemError> {
    let due = items::due_delayed(tx, now)?;
    wake(tx, &due, now, backoff, after)?;
    Ok(due.len())
}

/// Makes the delayed items `due` claimable (`items::due_delayed` locked them).
fn wake(tx: &Conn, due: &[String], now: Millis, backoff: Backoff, after: &mut After) -> Result<(), ItemError> {
    for id in due {
        step(tx, id, Event::Wake, &[], now, backoff, after)?;
    }
    Ok(())
}

fn claim_batch(
    tx: &Conn,
    node: &str,
    limit: usize,
    browser_limit: usize,
    now: Millis,
    backoff: Backoff,
    after: &mut After,
) -> Result<Vec<ItemRow>, ItemError> {
    // The due items and the head read together (one round trip on
    // PostgreSQL); woken, due items keep their place in the queue, ahead of
    // some of the head read before: it is read again. What that first read
    // locked stays this transaction's until it ends, as the claims do.
    let (due, mut head) = items::due_and_head(tx, Some(now), limit)?;
    if !due.is_empty() {
        wake(tx, &due, now, backoff, after)?;
        head = items::queue_head(tx, limit)?;
    }
    let mut rows = Vec::new();
    let mut browsers = 0;
    for row in head {
        if row.script.needs_browser() {
            if browsers == browser_limit {
                break;
            }
            browsers += 1;
        }
        rows.push(row);
    }
    claim_rows(tx, node, rows, now, backoff, after)
}

/// Claims `rows` for `node` in the caller's transaction: each through the
/// machine (`Event::Claim`) under a fencing token of its own
/// (`items::take_lease`); the rows as claimed, in order.
fn claim_rows(
    tx: &Conn,
    node: &str,
    rows: Vec<ItemRow>,
    now: Millis,
    backoff: Backoff,
    after: &mut After,
) -> Result<Vec<ItemRow>, ItemError> {
    let mut claimed = Vec::with_capacity(rows.len());
    for row in rows {
        let outcome = item::apply(&row.item, Event::Claim, now, backoff)?;
        claimed.push((row, outcome));
    }
    let mut writes = Writes::default();
    for (row, outcome) in &claimed {
        execute_in_tx(row, &[], &outcome.effects.in_tx, now, &mut writes);
        execute_after_commit(&outcome.effects.after_commit, after);
    }
    // Saved in runs of items the machine left in the same state (usually
    // the whole batch), each run in a few statements.
    let mut tokens = Vec::with_capacity(claimed.len());
    let alike = |(_, a): &(ItemRow, Outcome), (_, b): &(ItemRow, Outcome)| a.item == b.item;
    for run in claimed.chunk_by(alike) {
        let first = &run[0].1;
        let leases: Vec<&ItemRow> = run.iter().map(|(row, _)| row).collect();
        tokens.extend(items::take_lease(tx, &leases, &first.item, node, now)?);
    }
    writes.store(tx, now)?;
    let rows = claimed
        .into_iter()
        .zip(tokens)
        .map(|((row, outcome), lease_token)| ItemRow { item: outcome.item, lease_token, ..row })
        .collect();
    Ok(rows)
}

/// Ends an attempt, under the fence: only the claim that still holds the
/// item (same token, still active) may store its end. The machine steps
/// from the item as `claim` stored it; `items::save_end` writes the step
/// only if the stored row is still that one, and nothing else is written
/// before it.
fn finish(
    tx: &Conn,
    claim: &ItemRow,
    end: &AttemptEnd,
    now: Millis,
    backoff: Backoff,
    after: &mut After,
) -> Result<Outcome, ItemError> {
    let outcome = item::apply(&claim.item, end.event(), now, backoff)?;
    let mut writes = Writes::default();
    execute_in_tx(claim, end.files(), &outcome.effects.in_tx, now, &mut writes);
    if items::save_ends(tx, &[claim], claim.lease_token, &outcome.item, now)?.len() != 1 {
        return Err(ItemError::LeaseLost(claim.id.clone()));
    }
    // Only an end that was stored wakes anyone.
    execute_after_commit(&outcome.effects.after_commit, after);
    writes.store(tx, now)?;
    Ok(outcome)
}

/// The ends of many attempts in one step: each through the machine from its
/// claim, the states saved a run of alike items per statement, each fenced
/// by its statement (`items::save_ends` answers the items it stored), then
/// every file and every ledger entry of the ends stored in one statement
/// each. Each end answers on its own: a refused transition or a lost claim
/// writes nothing for that end and does not stop the others. Only a
/// database failure fails the whole step (the caller then stores each end
/// alone).
fn finish_all(
    tx: &Conn,
    ends: &[(Arc<ItemRow>, Arc<AttemptEnd>)],
    now: Millis,
    backoff: Backoff,
    after: &mut After,
) -> Result<Vec<Result<Outcome, ItemError>>, ItemError> {
    let mut answers: Vec<Result<Outcome, ItemError>> =
        ends.iter().map(|(claim, end)| Ok(item::apply(&claim.item, end.event(), now, backoff)?)).collect();
    // Runs of ends the machine left alike under the same token: usually
    // the whole group (completed, first claim).
    let mut taken: Vec<(&ItemRow, &Outcome)> = ends
        .iter()
        .zip(&answers)
        .filter_map(|((claim, _), answer)| answer.as_ref().ok().map(|o| (&**claim, o)))
        .collect();
    taken.sort_by_key(|(claim, o)| (claim.lease_token, o.item.state.as_str(), o.item.attempts_made));
    // Kept by item and token: two ends of one item under different claims
    // (a claim taken over, then the item claimed again here) may meet in
    // one step, and only the one its stored token fences in was stored.
    let mut kept = HashSet::with_capacity(taken.len());
    for run in taken.chunk_by(|(a, oa), (b, ob)| a.lease_token == b.lease_token && oa.item == ob.item) {
        let claims: Vec<&ItemRow> = run.iter().map(|(claim, _)| *claim).collect();
        let (claim, outcome) = run[0];
        let saved = items::save_ends(tx, &claims, claim.lease_token, &outcome.item, now)?;
        kept.extend(saved.into_iter().map(|seq| (seq, claim.lease_token)));
    }
    for ((claim, _), answer) in ends.iter().zip(answers.iter_mut()) {
        if answer.is_ok() && !kept.contains(&(claim.seq, claim.lease_token)) {
            *answer = Err(ItemError::LeaseLost(claim.id.clone()));
        }
    }
    let mut writes = Writes::default();
    for ((claim, end), answer) in ends.iter().zip(&answers) {
        if let Ok(outcome) = answer {
            execute_in_tx(claim, end.files(), &outcome.effects.in_tx, now, &mut writes);
            execute_after_commit(&outcome.effects.after_commit, after);
        }
    }
    writes.store(tx, now)?;
    Ok(answers)
}

fn recover_active(tx: &Conn, node: &str, now: Millis, backoff: Backoff, after: &mut After) -> Result<usize, ItemError> {
    let ids = items::active_ids(tx, node)?;
    for id in &ids {
        step(tx, id, Event::Recover, &[], now, backoff, after)?;
    }
    Ok(ids.len())
}

fn retry(
    tx: &Conn,
    account_id: &str,
    id: &str,
    now: Millis,
    backoff: Backoff,
    after: &mut After,
) -> Result<ItemRetried, ItemError> {
    // Locked as it is read, so two retries of one item (through two nodes)
    // run one after the other and the second finds it failed no more.
    let row = items::load_item_for_step(tx, id)?
        .filter(|r| r.account_id == account_id)
        .ok_or(TransitionError::Refused(ApiError::UnknownItemOrJob))?;
    // Every profile the grid has ever offered is still selectable today.
    let profile_selectable = Profile::ALL.contains(&row.profile);
    let (_, outcome) = step_row(tx, row, Event::Retry { profile_selectable }, &[], now, backoff, after)?;
    Ok(ItemRetried { job_id: id.to_string(), state: outcome.item.state })
}

/// How an attempt's end was stored, in the metrics and the log; called by
/// the item driver's publisher once it was (`ItemDriver::end`).
fn report_end(row: &ItemRow, stored: &Result<Outcome, ItemError>) {
    match stored {
        Ok(o) => {
            let state = o.item.state.as_str();
            crate::metrics::get().items_ended.with_label_values(&[row.script.as_str(), state]).inc();
            if o.item.state == grid_core::item::ItemState::Completed {
                tracing::debug!(id = %row.id, state, "attempt finished")
            } else {
                tracing::info!(
                    id = %row.id,
                    script = row.script.as_str(),
                    attempt = row.item.attempts_made + 1,
                    state,
                    reason = o.item.failed_reason.as_deref().unwrap_or(""),
                    "attempt finished"
                )
            }
        }
        Err(e @ ItemError::LeaseLost(_)) => {
            tracing::warn!(id = %row.id, error = %e, "attempt end dropped: another node holds the item now")
        }
        Err(e) => {
            tracing::error!(id = %row.id, error = %e, "attempt end not stored; the item is recovered on restart")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::VirtualClock;
    use crate::store::items::tests::{balance, caller, store, submit, T};
    use futures_util::FutureExt;
    use grid_core::catalog::{ArtifactKind, Script};
    use grid_core::item::{Item, ItemState};

    const B: Backoff = Backoff { base_ms: 1_000 };

    struct Grid {
        _dir: tempfile::TempDir,
        store: Store,
        clock: Arc<VirtualClock>,
        wake: Wake,
        driver: ItemDriver,
    }

    fn grid() -> Grid {
        let (dir, store) = store();
        let clock = Arc::new(VirtualClock::at(T));
        let wake = Wake::default();
        let driver = ItemDriver::start(store.clone(), clock.clone(), B, wake.clone(), "n1").unwrap();
        Grid { _dir: dir, store, clock, wake, driver }
    }

    impl Grid {
        /// Claims up to `n` items, none held back for the browser pool, as
        /// the workers hold them.
        async fn claim_batch(&self, n: usize) -> Vec<Arc<ItemRow>> {
            self.driver.claim_batch(n, usize::MAX).await.unwrap().into_iter().map(Arc::new).collect()
        }

        async fn item(&self, id: &str) -> Item {
            let id = id.to_string();
            self.store.read(move |c| items::load_item(c, &id)).await.unwrap().unwrap().item
        }

        /// The item's settlement in the ledger (`charge` or `release`), if
        /// any; and that no debt was left on the item.
        async fn settled(&self, id: &str) -> Option<String> {
            let id = id.to_string();
            let (kinds, debt): (Vec<String>, Option<String>) = self
                .store
                .read(move |c| {
                    let q = "SELECT kind FROM ledger WHERE subject = ?1 AND kind IN ('charge', 'release')";
                    let kinds = c.query_map(q, [id.as_str()], |r| r.get(0))?;
                    let debt =
                        c.query_row("SELECT settlement_due FROM items WHERE id = ?1", [id.as_str()], |r| r.get(0))?;
                    Ok::<_, StoreError>((kinds, debt))
                })
                .await
                .unwrap();
            assert_eq!(debt, None, "a debt left on the item");
            assert!(kinds.len() <= 1, "{kinds:?}");
            kinds.into_iter().next()
        }

        /// Published files of an item: kind and inline bytes, by kind.
        async fn published(&self, id: &str) -> Vec<(String, Option<Vec<u8>>)> {
            let id = id.to_string();
            self.store
                .read(move |c| {
                    let q = "SELECT kind, content FROM item_files WHERE item_id = ?1 ORDER BY kind";
                    c.query_map(q, [id], |r| Ok((r.get(0)?, r.get(1)?)))
                })
                .await
                .unwrap()
        }

        async fn settle(&self) -> usize {
            let now = self.clock.now();
            self.store.write(move |tx| items::settle_due(tx, now, 100)).await.unwrap()
        }
    }

    fn transient() -> AttemptEnd {
        AttemptEnd::Failed(Failure::Transient("target answered HTTP 503".into()))
    }

    #[tokio::test]
    async fn a_transient_failure_is_requeued_with_backoff_and_becomes_claimable_exactly_when_due() {
        let g = grid();
        let c = caller(&g.store, 10_000, None);
        submit(&g.store, &c, 1, None).unwrap();
        let row = Arc::new(g.driver.claim().await.unwrap().unwrap());
        g.clock.advance(250);
        let o = g.driver.finish(&row, transient()).await.unwrap();
        let due = T.plus_ms(250 + 1_000);
        assert_eq!((o.item.state, o.item.run_at), (ItemState::Delayed, Some(due)));
        assert!(g.wake.due.notified().now_or_never().is_some(), "the due loop learns of the new due time");
        assert_eq!(g.settled(&row.id).await, None);
        assert!(g.published(&row.id).await.is_empty());

        // A millisecond early, neither the due loop nor a claim takes it.
        g.clock.set(due.plus_ms(-1));
        assert_eq!(g.driver.fire_due(g.clock.now()).await, Some(due));
        assert!(g.driver.claim().await.unwrap().is_none());
        assert_eq!(g.item(&row.id).await.state, ItemState::Delayed);

        // At its due time the loop makes it claimable and wakes idle workers.
        g.clock.set(due);
        let ready = g.wake.queue.notified();
        assert_eq!(g.driver.fire_due(due).await, None, "nothing else is due");
        assert!(ready.now_or_never().is_some(), "idle workers are woken");
        assert_eq!(g.item(&row.id).await.state, ItemState::Waiting);
        let again = Arc::new(g.driver.claim().await.unwrap().unwrap());
        assert_eq!((&again.id, again.item.attempts_made), (&row.id, 1));
    }

    /// Claim order is unchanged by the due loop: a claim makes due items
    /// claimable itself, so a due item keeps its (older) place in the queue
    /// even when the loop has not fired yet.
    #[tokio::test]
    async fn a_claim_takes_a_due_item_in_its_queue_place_before_the_due_loop_fires() {
        let g = grid();
        let c = caller(&g.store, 10_000, None);
        submit(&g.store, &c, 1, None).unwrap();
        let first = Arc::new(g.driver.claim().await.unwrap().unwrap());
        g.driver.finish(&first, transient()).await.unwrap();
        submit(&g.store, &c, 1, None).unwrap();
        g.clock.advance(B.base_ms);
        let next = Arc::new(g.driver.claim().await.unwrap().unwrap());
        assert_eq!(next.id, first.id);
    }

    #[tokio::test]
    async fn a_terminal_failure_publishes_the_failure_record_the_machine_decides_and_owes_a_release() {
        let g = grid();
        let c = caller(&g.store, 10_000, None);
        submit(&g.store, &c, 1, None).unwrap();
        let row = Arc::new(g.driver.claim().await.unwrap().unwrap());
        g.clock.advance(40);
        let reason = "params.timeoutMs: must be at most 60000";
        let o = g.driver.finish(&row, AttemptEnd::Failed(Failure::Terminal(reason.into()))).await.unwrap();
        assert_eq!(o.item.state, ItemState::Failed);
        assert!(o.item.failure_published);

        let published = g.published(&row.id).await;
        assert_eq!(published.len(), 1, "only the failure record");
        assert_eq!(published[0].0, "meta");
        let record: serde_json::Value = serde_json::from_slice(published[0].1.as_deref().unwrap()).unwrap();
        assert_eq!(
            record,
            json!({
                "outcome": "failure",
                "script": "fetch",
                "profileId": Profile::DEFAULT.as_str(),
                "url": row.url,
                "reason": reason,
                "attempt": 1,
                "failedAt": T.plus_ms(40).to_iso(),
            })
        );

        assert_eq!(g.settled(&row.id).await.as_deref(), Some("release"));
        assert_eq!(g.settle().await, 0, "released with the end, nothing left for the pass");
        let bal = balance(&g.store, &c);
        assert_eq!((bal.credit_micros, bal.reserved_micros), (10_000, 0));
        // A published failure never changes.
        let refused = g.driver.retry(&c.account_id, &row.id).await.unwrap_err();
        assert!(
            matches!(refused, ItemError::Transition(TransitionError::Refused(ApiError::PublishedFailureImmutable))),
            "{refused:?}"
        );
    }

    /// The worker reports a transient failure each time; only the machine
    /// knows the third one ends the item, and that it publishes nothing.
    #[tokio::test]
    async fn an_item_out_of_transient_attempts_fails_unpublished_owes_a_release_and_stays_retryable() {
        let g = grid();
        let c = caller(&g.store, 10_000, None);
        submit(&g.store, &c, 1, None).unwrap();
        let mut o = None;
        for _ in 0..item::MAX_ATTEMPTS {
            g.clock.advance(60_000);
            let row = Arc::new(g.driver.claim().await.unwrap().unwrap());
            o = Some(g.driver.finish(&row, transient()).await.unwrap());
        }
        let o = o.unwrap();
        let id = {
            let id = g.store.read(|c| c.query_row("SELECT id FROM items", (), |r| r.get::<String>(0)));
            id.await.unwrap()
        };
        assert_eq!((o.item.state, o.item.attempts_made), (ItemState::Failed, item::MAX_ATTEMPTS));
        assert!(g.published(&id).await.is_empty());
        assert_eq!(g.settled(&id).await.as_deref(), Some("release"));

        let ready = g.wake.queue.notified();
        let retried = g.driver.retry(&c.account_id, &id).await.unwrap();
        assert_eq!(retried.state, ItemState::Waiting);
        assert!(ready.now_or_never().is_some(), "a retried item wakes idle workers");
        let other = caller(&g.store, 10_000, None);
        let refused = g.driver.retry(&other.account_id, &id).await.unwrap_err();
        assert!(matches!(refused, ItemError::Transition(TransitionError::Refused(ApiError::UnknownItemOrJob))));
    }

    fn family(id: &str) -> Vec<PublishedFile> {
        let body =
            FileContent { kind: ArtifactKind::Body, content_type: "text/plain".into(), bytes: b"hello".to_vec() };
        let meta = FileContent::meta(&json!({"outcome": "success"}));
        vec![files::inline(id, body), files::inline(id, meta)]
    }

    #[tokio::test]
    async fn a_success_publishes_the_files_and_owes_a_charge_once() {
        let g = grid();
        let c = caller(&g.store, 10_000, None);
        submit(&g.store, &c, 1, None).unwrap();
        let row = Arc::new(g.driver.claim().await.unwrap().unwrap());
        let o = g.driver.finish(&row, AttemptEnd::Succeeded(family(&row.id))).await.unwrap();
        assert_eq!(o.item.state, ItemState::Completed);
        let published = g.published(&row.id).await;
        let kinds: Vec<&str> = published.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds, ["body", "meta"]);
        assert_eq!(published[0].1.as_deref(), Some(&b"hello"[..]));
        assert_eq!(g.settled(&row.id).await.as_deref(), Some("charge"));

        // The same end reported again is refused (the claim ended with the
        // attempt, so the fence stops it) and changes nothing.
        let refused = g.driver.finish(&row, AttemptEnd::Succeeded(family(&row.id))).await.unwrap_err();
        assert!(matches!(refused, ItemError::LeaseLost(_)), "{refused:?}");
        assert_eq!(g.published(&row.id).await.len(), 2);
        assert_eq!(g.settled(&row.id).await.as_deref(), Some("charge"), "charged once");

        assert_eq!(g.settle().await, 0);
        let bal = balance(&g.store, &c);
        assert_eq!((bal.credit_micros, bal.reserved_micros), (10_000 - 120, 0));
    }

    /// Ends handed over without waiting (as workers do) are each stored
    /// once, and `ends_stored` answers only after the last of them; an end
    /// whose claim was taken over is reported and stores nothing.
    #[tokio::test]
    async fn ends_handed_over_are_all_stored_before_ends_stored_answers() {
        let g = grid();
        let c = caller(&g.store, 100_000, None);
        submit(&g.store, &c, 30, None).unwrap();
        let rows = g.claim_batch(30).await;
        for row in &rows {
            g.driver.end(row.clone(), AttemptEnd::Succeeded(family(&row.id)));
        }
        // The first item's end again: its fence refuses it.
        g.driver.end(rows[0].clone(), AttemptEnd::Succeeded(family(&rows[0].id)));
        g.driver.ends_stored().await;
        assert_eq!(g.driver.unstored.count.load(Ordering::SeqCst), 0);
        for row in &rows {
            assert_eq!(g.item(&row.id).await.state, ItemState::Completed, "{}", row.id);
            assert_eq!(g.published(&row.id).await.len(), 2, "{}", row.id);
            assert_eq!(g.settled(&row.id).await.as_deref(), Some("charge"), "{}", row.id);
        }
        // Nothing handed over: answers at once.
        g.driver.ends_stored().await;
    }

    /// Requests sharing a group transaction each run in a savepoint: one
    /// that fails half-way (its state saved, then its files refused) leaves
    /// nothing, and the other still commits.
    #[tokio::test]
    async fn a_request_failing_half_way_rolls_back_alone_in_its_group() {
        let g = grid();
        let c = caller(&g.store, 10_000, None);
        submit(&g.store, &c, 2, None).unwrap();
        let row = Arc::new(g.driver.claim().await.unwrap().unwrap());
        let mut twice = family(&row.id);
        twice.push(twice[0].clone());
        let end = AttemptEnd::Succeeded(twice);
        let claim = row.clone();
        let failing =
            g.driver.commits.run(Order::Rows, move |tx| finish(tx, &claim, &end, T, B, &mut After::default()));
        let (failed, claimed) = tokio::join!(failing, g.driver.claim());
        assert!(matches!(failed, Err(ItemError::Store(StoreError::Database(_)))), "{failed:?}");
        assert!(claimed.unwrap().is_some(), "the other request of the group committed");
        assert_eq!(g.item(&row.id).await.state, ItemState::Active);
        assert!(g.published(&row.id).await.is_empty());
        assert_eq!(g.settled(&row.id).await, None);
    }

    #[tokio::test]
    async fn recovery_requeues_active_items_without_counting_the_attempt() {
        let g = grid();
        let c = caller(&g.store, 10_000, None);
        submit(&g.store, &c, 3, Some(9)).unwrap();
        let a = Arc::new(g.driver.claim().await.unwrap().unwrap());
        Arc::new(g.driver.claim().await.unwrap().unwrap());
        let ready = g.wake.queue.notified();
        assert_eq!(g.driver.recover().await.unwrap(), 2);
        assert!(ready.now_or_never().is_some());
        let again = Arc::new(g.driver.claim().await.unwrap().unwrap());
        assert_eq!((&again.id, again.item.state, again.item.attempts_made), (&a.id, ItemState::Active, 0));
        assert_eq!(g.item(&a.id).await.priority, Some(9));
    }

    /// Fencing: a node taken for dead has its items recovered and claimed
    /// again by another; when the first one's attempt ends after all, its
    /// end is refused: nothing published, no state change, nothing owed.
    /// Only the live claim's end counts, once.
    #[tokio::test]
    async fn an_attempt_whose_claim_was_taken_over_stores_nothing() {
        let g = grid();
        let c = caller(&g.store, 10_000, None);
        submit(&g.store, &c, 1, None).unwrap();
        let first = Arc::new(g.driver.claim().await.unwrap().unwrap());
        // Node "n1" is taken for dead by another node, which recovers its items.
        assert_eq!(g.driver.recover_node("n1").await.unwrap(), 1);
        let second = Arc::new(g.driver.claim().await.unwrap().unwrap());
        assert_eq!(second.id, first.id);
        assert!(second.lease_token > first.lease_token);
        let stale = g.driver.finish(&first, AttemptEnd::Succeeded(family(&first.id))).await;
        assert!(matches!(stale, Err(ItemError::LeaseLost(_))), "{stale:?}");
        assert_eq!(g.item(&first.id).await.state, ItemState::Active);
        assert!(g.published(&first.id).await.is_empty());
        assert_eq!(g.settled(&first.id).await, None);
        // A recovered item with no new claim is fenced too.
        assert_eq!(g.driver.recover_node("n1").await.unwrap(), 1);
        let late = g.driver.finish(&second, transient()).await;
        assert!(matches!(late, Err(ItemError::LeaseLost(_))), "{late:?}");
        let third = Arc::new(g.driver.claim().await.unwrap().unwrap());
        let o = g.driver.finish(&third, AttemptEnd::Succeeded(family(&third.id))).await.unwrap();
        assert_eq!((o.item.state, o.item.attempts_made), (ItemState::Completed, 1));
        assert_eq!(g.settled(&third.id).await.as_deref(), Some("charge"));
        assert_eq!(g.published(&third.id).await.len(), 2);
    }

    /// A node recovers its own items only: another node's stay active.
    #[tokio::test]
    async fn a_node_recovers_only_the_items_it_holds() {
        let g = grid();
        let c = caller(&g.store, 10_000, None);
        submit(&g.store, &c, 2, None).unwrap();
        let mine = Arc::new(g.driver.claim().await.unwrap().unwrap());
        let other = ItemDriver::start(g.store.clone(), g.clock.clone(), B, g.wake.clone(), "n2").unwrap();
        let theirs = Arc::new(other.claim().await.unwrap().unwrap());
        assert_eq!(g.driver.recover().await.unwrap(), 1);
        assert_eq!(g.item(&mine.id).await.state, ItemState::Waiting);
        assert_eq!(g.item(&theirs.id).await.state, ItemState::Active);
        assert_eq!(other.recover().await.unwrap(), 1);
        assert_eq!(g.item(&theirs.id).await.state, ItemState::Waiting);
    }

    #[tokio::test]
    async fn unprioritised_items_run_first_then_by_priority_then_age() {
        let g = grid();
        let c = caller(&g.store, 1_000_000, None);
        submit(&g.store, &c, 1, Some(5)).unwrap();
        submit(&g.store, &c, 1, Some(2)).unwrap();
        let plain = submit(&g.store, &c, 2, None).unwrap();
        let mut order = vec![];
        while let Some(row) = g.driver.claim().await.unwrap() {
            order.push((row.batch_id, row.item.priority));
        }
        let priorities: Vec<Option<u32>> = order.iter().map(|o| o.1).collect();
        assert_eq!(priorities, vec![None, None, Some(2), Some(5)]);
        assert_eq!(order[0].0, plain.batch_id);
    }

    /// A batch claim takes the head of the queue in the contract's order
    /// (unprioritised first, then lower priority, then age), each item
    /// through the machine and under a token of its own; a due delayed item
    /// keeps its place. Over several claim statements' worth of items (the
    /// leases are written in chunks) every item is taken once.
    #[tokio::test]
    async fn a_batch_claim_takes_the_queue_head_in_order_each_item_under_its_own_token() {
        let g = grid();
        let c = caller(&g.store, 10_000_000, None);
        let low = submit(&g.store, &c, 2, Some(7)).unwrap();
        let high = submit(&g.store, &c, 2, Some(3)).unwrap();
        let plain = submit(&g.store, &c, 300, None).unwrap();
        let batch_of = |rows: &[ItemRow]| rows.iter().map(|r| r.batch_id.clone()).collect::<Vec<_>>();

        let first = g.driver.claim_batch(3, usize::MAX).await.unwrap();
        assert_eq!(batch_of(&first), vec![plain.batch_id.clone(); 3]);
        // The rest of the unprioritised batch and the two prioritised ones.
        let rest = g.driver.claim_batch(1_000, usize::MAX).await.unwrap();
        assert_eq!(rest.len(), 297 + 4);
        let mut expected = vec![plain.batch_id.clone(); 297];
        expected.extend([high.batch_id.clone(), high.batch_id.clone(), low.batch_id.clone(), low.batch_id.clone()]);
        assert_eq!(batch_of(&rest), expected);
        let all: Vec<&ItemRow> = first.iter().chain(&rest).collect();
        // Item ids sort in submission order within a batch: age order.
        assert!(all[..300].windows(2).all(|w| w[0].id < w[1].id));
        for row in &all {
            assert_eq!((row.item.state, row.lease_token), (ItemState::Active, 1), "{}", row.id);
            let stored = g.store.read({
                let id = row.id.clone();
                move |c| items::load_item(c, &id)
            });
            let stored = stored.await.unwrap().unwrap();
            assert_eq!((stored.item.state, stored.lease_token), (ItemState::Active, 1));
        }
        assert!(g.driver.claim_batch(10, usize::MAX).await.unwrap().is_empty());

        // A delayed item, once due, is claimed before younger waiting ones.
        let retried = Arc::new(first[0].clone());
        g.driver.finish(&retried, transient()).await.unwrap();
        submit(&g.store, &c, 2, None).unwrap();
        g.clock.advance(B.base_ms);
        let next = g.driver.claim_batch(2, usize::MAX).await.unwrap();
        assert_eq!(next[0].id, retried.id);
        assert_eq!((next[0].item.attempts_made, next[0].lease_token), (1, 2));
        assert_ne!(next[1].id, retried.id);
    }

    /// A batch claim stops before the first browser item beyond its room,
    /// so the node takes a prefix of the queue and no more browser items
    /// than it can start.
    #[tokio::test]
    async fn a_batch_claim_stops_before_a_browser_item_beyond_its_room() {
        let g = grid();
        let c = caller(&g.store, 10_000_000, None);
        for script in [Script::Fetch, Script::Capture, Script::Fetch, Script::Capture, Script::Fetch] {
            submit_script(&g.store, &c, script);
        }
        let scripts = |rows: &[ItemRow]| rows.iter().map(|r| r.script).collect::<Vec<_>>();
        let claimed = g.driver.claim_batch(10, 1).await.unwrap();
        assert_eq!(scripts(&claimed), [Script::Fetch, Script::Capture, Script::Fetch]);
        let none = g.driver.claim_batch(10, 0).await.unwrap();
        assert!(none.is_empty(), "the head is a browser item and there is no room");
        let claimed = g.driver.claim_batch(10, 1).await.unwrap();
        assert_eq!(scripts(&claimed), [Script::Capture, Script::Fetch]);
    }

    fn submit_script(store: &Store, c: &crate::store::accounts::Caller, script: Script) {
        let sub = grid_core::wire::batch::BatchSubmission {
            urls: vec!["http://t/x".into()],
            script,
            profile: Profile::DEFAULT,
            params: serde_json::Map::new(),
            priority: None,
            context: None,
            proxy: None,
        };
        let c = c.clone();
        store.write_blocking(move |tx| create_batch(tx, &c, &sub, T)).unwrap();
    }

    /// Fencing per item in a batch: after a takeover, each stale end of a
    /// batch claim is refused on its own, and the new claims' ends count,
    /// each once.
    #[tokio::test]
    async fn each_item_of_a_batch_claim_is_fenced_by_its_own_token() {
        let g = grid();
        let c = caller(&g.store, 10_000, None);
        submit(&g.store, &c, 3, None).unwrap();
        let stale = g.claim_batch(3).await;
        assert_eq!(g.driver.recover_node("n1").await.unwrap(), 3);
        let live = g.claim_batch(2).await;
        assert_eq!(live.iter().map(|r| r.lease_token).collect::<Vec<_>>(), [2, 2]);
        for row in &stale {
            let refused = g.driver.finish(row, AttemptEnd::Succeeded(family(&row.id))).await;
            assert!(matches!(refused, Err(ItemError::LeaseLost(_))), "{refused:?}");
        }
        // The third item, recovered and not claimed again, is fenced too.
        assert_eq!(g.item(&stale[2].id).await.state, ItemState::Waiting);
        for row in &live {
            let o = g.driver.finish(row, AttemptEnd::Succeeded(family(&row.id))).await.unwrap();
            assert_eq!(o.item.state, ItemState::Completed);
            assert_eq!(g.published(&row.id).await.len(), 2);
        }
        assert_eq!(g.settle().await, 0);
        let bal = balance(&g.store, &c);
        assert_eq!((bal.credit_micros, bal.reserved_micros), (10_000 - 2 * 120, 120));
    }

    /// Ends published together (one step of the publisher) each complete
    /// their item once and owe one charge; one failing end among them (its
    /// files refused) fails the step, after which each is stored alone: the
    /// faulty one leaves nothing while the others commit, once.
    #[tokio::test]
    async fn ends_stored_in_one_group_each_owe_exactly_one_charge() {
        let g = grid();
        let c = caller(&g.store, 100_000, None);
        submit(&g.store, &c, 20, None).unwrap();
        let rows = g.claim_batch(20).await;
        let (bad, good) = rows.split_first().unwrap();
        let mut twice = family(&bad.id);
        twice.push(twice[0].clone());
        // The faulty end is sent first; the test's runtime runs one task at
        // a time, so every end waits for the publisher at once. The faulty
        // one keeps being tried again (as any end that meets a database
        // error) until it is dropped.
        let mut failing = Box::pin(g.driver.finish(bad, AttemptEnd::Succeeded(twice)));
        assert!(failing.as_mut().now_or_never().is_none());
        let ends = good.iter().map(|row| g.driver.finish(row, AttemptEnd::Succeeded(family(&row.id))));
        let done = futures_util::future::join_all(ends).await;
        assert!(done.iter().all(|o| o.as_ref().is_ok_and(|o| o.item.state == ItemState::Completed)), "{done:?}");
        drop(failing);
        assert_eq!(g.item(&bad.id).await.state, ItemState::Active);
        assert!(g.published(&bad.id).await.is_empty());
        for row in good {
            assert_eq!(g.published(&row.id).await.len(), 2, "{}", row.id);
            assert_eq!(g.settled(&row.id).await.as_deref(), Some("charge"));
        }
        assert_eq!(g.settle().await, 0);
        let charges: Vec<(String, i64)> = g
            .store
            .read(|c| {
                c.query_map("SELECT subject, amount FROM ledger WHERE kind = 'charge'", (), |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
            })
            .await
            .unwrap();
        assert_eq!(charges.len(), 19);
        assert!(charges.iter().all(|(_, amount)| *amount == Script::Fetch.price_micros()));
        let mut subjects: Vec<&str> = charges.iter().map(|(s, _)| s.as_str()).collect();
        subjects.sort();
        subjects.dedup();
        assert_eq!(subjects.len(), 19, "one charge per item");
    }
}
