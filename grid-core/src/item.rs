//! The capture item state machine, as pure transitions.
//!
//! ```text
//!            claim              succeed
//! waiting ─────────► active ─────────────► completed   (charge due)
//! prioritized ─────►   │  fail (transient, attempts < 3)
//!    ▲                 ├───────────────────► delayed ──wake──► waiting|prioritized
//!    │                 │  fail (terminal, or attempts = 3)
//!    │                 └───────────────────► failed          (release due)
//!    │   recover (server died mid-attempt: attempt not counted)
//!    └──────────────── active
//!    retry (failed, failure record not published, profile selectable) ◄── failed
//! ```
//!
//! Every transition returns the effects it asks for (`Effects`: what to
//! write in its transaction, whom to wake after the commit); the driver
//! (`grid-server/src/capture/driver.rs`) executes them and decides nothing
//! itself. Settlement is decided here and written to the ledger by the
//! driver in the transaction that ends the item: a completed billable item
//! owes its price once, a finally
//! failed billable item returns its reservation. A manual retry is free: the
//! item was already released, so it is no longer billable. Only a terminal
//! failure publishes a failure record: an item that ran out of transient
//! attempts stays retryable.

use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::time::Millis;

/// An item is tried at most this many times.
pub const MAX_ATTEMPTS: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ItemState {
    Waiting,
    Prioritized,
    Delayed,
    Active,
    Completed,
    Failed,
}

impl ItemState {
    pub const ALL: [ItemState; 6] = [
        ItemState::Waiting,
        ItemState::Prioritized,
        ItemState::Delayed,
        ItemState::Active,
        ItemState::Completed,
        ItemState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ItemState::Waiting => "waiting",
            ItemState::Prioritized => "prioritized",
            ItemState::Delayed => "delayed",
            ItemState::Active => "active",
            ItemState::Completed => "completed",
            ItemState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<ItemState> {
        ItemState::ALL.into_iter().find(|x| x.as_str() == s)
    }

    pub fn is_finished(self) -> bool {
        matches!(self, ItemState::Completed | ItemState::Failed)
    }

    /// The queued state for an item with or without a priority.
    pub fn queued(priority: Option<u32>) -> ItemState {
        if priority.is_some() {
            ItemState::Prioritized
        } else {
            ItemState::Waiting
        }
    }
}

/// Why an attempt failed, and whether trying again can help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The world may answer differently next time (timeouts, refused
    /// connections, 5xx, a browser crash): retried while attempts remain.
    Transient(String),
    /// Trying again cannot help (bad params, a refused destination): the item
    /// fails at once and its failure record is published.
    Terminal(String),
}

impl Failure {
    pub fn reason(&self) -> &str {
        match self {
            Failure::Transient(r) | Failure::Terminal(r) => r,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A worker takes the item. Allowed from waiting/prioritized, and from
    /// delayed once its time has come.
    Claim,
    /// The attempt's whole file family is published and checked.
    Succeed,
    Fail(Failure),
    /// A delayed item's backoff is over.
    Wake,
    /// The server stopped while the item was active; the attempt is not
    /// counted because the grid, not the item, failed.
    Recover,
    /// POST /jobs/{jobId}/retry.
    Retry {
        profile_selectable: bool,
    },
}

/// What the settlement pass owes for an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Settlement {
    Charge,
    Release,
}

impl Settlement {
    pub fn as_str(self) -> &'static str {
        match self {
            Settlement::Charge => "charge",
            Settlement::Release => "release",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub state: ItemState,
    pub priority: Option<u32>,
    pub attempts_made: u32,
    pub failed_reason: Option<String>,
    /// A published failure record (meta with outcome failure) exists.
    pub failure_published: bool,
    /// When a delayed item may run again.
    pub run_at: Option<Millis>,
    /// Whether the item still holds its reservation.
    pub billable: bool,
    /// A one-call capture's item (POST /screenshot, /pdf, /content): its
    /// caller waits for this one attempt, so it is tried once. Any failure
    /// ends it (published, released), and an attempt its node never ended
    /// fails instead of running again with nobody to answer.
    pub attended: bool,
}

impl Item {
    pub fn new(priority: Option<u32>) -> Item {
        Item {
            state: ItemState::queued(priority),
            priority,
            attempts_made: 0,
            failed_reason: None,
            failure_published: false,
            run_at: None,
            billable: true,
            attended: false,
        }
    }
}

/// Backoff between attempts: `base_ms`, then twice that, and so on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base_ms: i64,
}

impl Backoff {
    /// Delay after the `attempts_made`-th failed attempt (1-based).
    pub fn delay_ms(self, attempts_made: u32) -> i64 {
        let exp = attempts_made.saturating_sub(1).min(16);
        self.base_ms.saturating_mul(1_i64 << exp)
    }
}

/// An effect written in the transaction that applies the event, with the
/// item's new state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxEffect {
    /// Reserve the item's script price with its creation (`submit`). The
    /// driver writes a batch's reservations as one ledger entry whose
    /// subject is the batch, as it writes many settlements per statement;
    /// each item's settlement later resolves its share.
    Reserve,
    /// Publish the file family the succeeding attempt stored, with the state
    /// change.
    PublishFiles,
    /// Publish the item's failure record (its meta, outcome failure) with the
    /// state change. Once published, the item can no longer be retried.
    PublishFailureRecord { attempt: u32, reason: String },
    /// The item owes this settlement, written to the ledger with the state
    /// change.
    Settle(Settlement),
}

/// An effect carried out once that transaction committed: whom to wake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutsideEffect {
    /// The item is delayed until its `run_at` (its retry backoff, carried by
    /// the item's state and stored with it): a due time the due loop must
    /// learn of; `Event::Wake` fires it. No payload: the one `run_at` is the
    /// state's, which the due loop reads from the store.
    Requeue,
    /// The item is claimable now: idle workers should look.
    Enqueue,
}

/// What a transition asks of the driver, split by when it happens: the
/// driver has one exhaustive executor per half, so a new effect is placed
/// in one half here and does not compile until that half executes it,
/// like this pair of executors, each matching only its own half:
///
/// ```
/// use grid_core::item::{OutsideEffect, TxEffect};
/// fn execute_in_tx(e: &TxEffect) -> &'static str {
///     match e {
///         TxEffect::Reserve => "reserve",
///         TxEffect::PublishFiles => "files",
///         TxEffect::PublishFailureRecord { .. } => "failure record",
///         TxEffect::Settle(_) => "settle",
///     }
/// }
/// fn execute_after_commit(e: &OutsideEffect) -> &'static str {
///     match e {
///         OutsideEffect::Requeue => "due loop",
///         OutsideEffect::Enqueue => "workers",
///     }
/// }
/// # let _ = (execute_in_tx, execute_after_commit);
/// ```
///
/// A half that leaves an effect unhandled, as an executor does once a
/// variant is added here, fails to compile (E0004, non-exhaustive match):
///
/// ```compile_fail,E0004
/// use grid_core::item::TxEffect;
/// fn execute_in_tx(e: &TxEffect) -> &'static str {
///     match e {
///         TxEffect::Reserve => "reserve",
///         TxEffect::PublishFiles => "files",
///         TxEffect::Settle(_) => "settle",
///     }
/// }
/// ```
pub type Effects = crate::effects::Effects<TxEffect, OutsideEffect>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub item: Item,
    pub effects: Effects,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("event {event} is not allowed in state {state}")]
    NotAllowed { state: &'static str, event: &'static str },
    #[error("delayed item is not due before {0:?}")]
    NotDue(Millis),
    #[error(transparent)]
    Refused(#[from] ApiError),
}

fn event_name(e: &Event) -> &'static str {
    match e {
        Event::Claim => "claim",
        Event::Succeed => "succeed",
        Event::Fail(_) => "fail",
        Event::Wake => "wake",
        Event::Recover => "recover",
        Event::Retry { .. } => "retry",
    }
}

/// The machine's first step: an item created by POST /batches, queued
/// (prioritized when it has a priority), its price reserved in the
/// transaction that stores it, and claimable once that commits.
pub fn submit(priority: Option<u32>) -> Outcome {
    Outcome {
        item: Item::new(priority),
        effects: Effects { in_tx: vec![TxEffect::Reserve], after_commit: vec![OutsideEffect::Enqueue] },
    }
}

/// The first step of a one-call capture's item: created with its
/// reservation and claimed by its caller's node in the same transaction
/// (`Event::Claim` next), so it is never enqueued for the workers.
pub fn submit_attended() -> Outcome {
    Outcome {
        item: Item { attended: true, ..Item::new(None) },
        effects: Effects { in_tx: vec![TxEffect::Reserve], after_commit: vec![] },
    }
}

/// Why an attended item whose node stopped mid-attempt failed.
pub const ATTENDED_LOST: &str =
    "the node running this one-call capture stopped before it ended; its caller got no answer, nothing is charged";

/// Applies one event. Pure: `now` and `backoff` are inputs.
pub fn apply(item: &Item, event: Event, now: Millis, backoff: Backoff) -> Result<Outcome, TransitionError> {
    use ItemState::*;
    let not_allowed = |e: &Event| TransitionError::NotAllowed { state: item.state.as_str(), event: event_name(e) };
    let mut next = item.clone();
    let mut effects = Effects::default();
    match (&item.state, &event) {
        (Waiting | Prioritized, Event::Claim) => {
            next.state = Active;
            next.run_at = None;
        }
        (Delayed, Event::Claim) | (Delayed, Event::Wake) => {
            let due = item.run_at.unwrap_or(now);
            if due > now {
                return Err(TransitionError::NotDue(due));
            }
            next.run_at = None;
            if matches!(event, Event::Claim) {
                next.state = Active;
            } else {
                next.state = ItemState::queued(item.priority);
                effects.after_commit.push(OutsideEffect::Enqueue);
            }
        }
        (Active, Event::Succeed) => {
            next.attempts_made += 1;
            next.state = Completed;
            next.failed_reason = None;
            effects.in_tx.push(TxEffect::PublishFiles);
            if item.billable {
                effects.in_tx.push(TxEffect::Settle(Settlement::Charge));
                next.billable = false;
            }
        }
        (Active, Event::Fail(failure)) => {
            next.attempts_made += 1;
            next.failed_reason = Some(failure.reason().to_string());
            // Nobody waits for an attended item's second attempt.
            let terminal = matches!(failure, Failure::Terminal(_)) || item.attended;
            if !terminal && next.attempts_made < MAX_ATTEMPTS {
                let run_at = now.plus_ms(backoff.delay_ms(next.attempts_made));
                next.state = Delayed;
                next.run_at = Some(run_at);
                effects.after_commit.push(OutsideEffect::Requeue);
            } else {
                next.state = Failed;
                if terminal {
                    next.failure_published = true;
                    effects.in_tx.push(TxEffect::PublishFailureRecord {
                        attempt: next.attempts_made,
                        reason: failure.reason().to_string(),
                    });
                }
                if item.billable {
                    effects.in_tx.push(TxEffect::Settle(Settlement::Release));
                    next.billable = false;
                }
            }
        }
        (Active, Event::Recover) if item.attended => {
            next.state = Failed;
            next.attempts_made += 1;
            next.failed_reason = Some(ATTENDED_LOST.to_string());
            next.failure_published = true;
            effects.in_tx.push(TxEffect::PublishFailureRecord {
                attempt: next.attempts_made,
                reason: ATTENDED_LOST.to_string(),
            });
            if item.billable {
                effects.in_tx.push(TxEffect::Settle(Settlement::Release));
                next.billable = false;
            }
        }
        (Active, Event::Recover) => {
            next.state = ItemState::queued(item.priority);
            effects.after_commit.push(OutsideEffect::Enqueue);
        }
        (Failed, Event::Retry { profile_selectable }) => {
            if item.failure_published {
                return Err(ApiError::PublishedFailureImmutable.into());
            }
            if !profile_selectable {
                return Err(ApiError::ProfileNotSelectable.into());
            }
            next.state = ItemState::queued(item.priority);
            next.attempts_made = 0;
            next.failed_reason = None;
            next.run_at = None;
            effects.after_commit.push(OutsideEffect::Enqueue);
        }
        (_, Event::Retry { .. }) => return Err(ApiError::OnlyFailedCanBeRetried.into()),
        (_, e) => return Err(not_allowed(e)),
    }
    Ok(Outcome { item: next, effects })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const B: Backoff = Backoff { base_ms: 1_000 };
    const T0: Millis = Millis(1_000_000);

    fn step(item: &Item, e: Event) -> Outcome {
        apply(item, e, T0, B).expect("transition allowed")
    }

    fn active(priority: Option<u32>) -> Item {
        step(&Item::new(priority), Event::Claim).item
    }

    #[test]
    fn an_attended_item_is_tried_once_and_never_runs_unattended() {
        let o = submit_attended();
        assert_eq!(o.effects.in_tx, vec![TxEffect::Reserve]);
        assert!(o.effects.after_commit.is_empty(), "its caller claims it: the workers are not woken");
        let active = step(&o.item, Event::Claim).item;
        // A transient failure ends it: the caller does not wait for a retry.
        let failed = step(&active, Event::Fail(Failure::Transient("timeout".into())));
        assert_eq!(failed.item.state, ItemState::Failed);
        assert!(failed.item.failure_published);
        assert!(failed.effects.in_tx.contains(&TxEffect::Settle(Settlement::Release)));
        assert!(failed.effects.after_commit.is_empty());
        // Its node stopped mid-attempt: failed and released, not requeued.
        let lost = step(&active, Event::Recover);
        assert_eq!(lost.item.state, ItemState::Failed);
        assert_eq!(lost.item.failed_reason.as_deref(), Some(ATTENDED_LOST));
        assert!(lost.effects.in_tx.contains(&TxEffect::Settle(Settlement::Release)));
        assert!(lost.effects.after_commit.is_empty());
        // And, its failure published, it cannot be retried into the queue.
        let retried = apply(&lost.item, Event::Retry { profile_selectable: true }, T0, B);
        assert_eq!(retried, Err(TransitionError::Refused(ApiError::PublishedFailureImmutable)));
        // Success charges once, as any item.
        let done = step(&active, Event::Succeed);
        assert_eq!(done.effects.in_tx, vec![TxEffect::PublishFiles, TxEffect::Settle(Settlement::Charge)]);
    }

    #[test]
    fn new_item_waits_or_is_prioritized() {
        assert_eq!(Item::new(None).state, ItemState::Waiting);
        assert_eq!(Item::new(Some(5)).state, ItemState::Prioritized);
    }

    #[test]
    fn submit_reserves_in_the_transaction_and_enqueues_after_it() {
        let o = submit(Some(3));
        assert_eq!(o.item, Item::new(Some(3)));
        assert!(o.item.billable, "the reservation it takes is the one its end settles");
        assert_eq!(o.effects.in_tx, vec![TxEffect::Reserve]);
        assert_eq!(o.effects.after_commit, vec![OutsideEffect::Enqueue]);
    }

    fn owed(o: &Outcome) -> Vec<Settlement> {
        o.effects
            .in_tx
            .iter()
            .filter_map(|e| match e {
                TxEffect::Settle(s) => Some(*s),
                TxEffect::Reserve | TxEffect::PublishFiles | TxEffect::PublishFailureRecord { .. } => None,
            })
            .collect()
    }

    #[test]
    fn claiming_a_queued_item_asks_for_nothing() {
        let o = step(&Item::new(Some(4)), Event::Claim);
        assert_eq!(o.item.state, ItemState::Active);
        assert_eq!(o.effects, Effects::default());
    }

    #[test]
    fn success_completes_publishes_and_charges_once() {
        let o = step(&active(None), Event::Succeed);
        assert_eq!(o.item.state, ItemState::Completed);
        assert_eq!(o.item.attempts_made, 1);
        assert_eq!(o.effects, Effects::only_in_tx(vec![TxEffect::PublishFiles, TxEffect::Settle(Settlement::Charge)]));
        assert!(!o.item.billable);
        assert!(apply(&o.item, Event::Succeed, T0, B).is_err());
    }

    #[test]
    fn transient_failure_delays_with_doubling_backoff() {
        let o = step(&active(None), Event::Fail(Failure::Transient("timeout".into())));
        assert_eq!(o.item.state, ItemState::Delayed);
        assert_eq!(o.item.run_at, Some(T0.plus_ms(1_000)));
        assert_eq!(o.effects, Effects::only_after_commit(vec![OutsideEffect::Requeue]));
        assert_eq!(o.item.failed_reason.as_deref(), Some("timeout"));

        // Not claimable before its time; claimable at it.
        assert_eq!(apply(&o.item, Event::Claim, T0, B), Err(TransitionError::NotDue(T0.plus_ms(1_000))));
        let again = apply(&o.item, Event::Claim, T0.plus_ms(1_000), B).unwrap().item;
        let o2 = step(&again, Event::Fail(Failure::Transient("timeout".into())));
        assert_eq!(o2.item.run_at, Some(T0.plus_ms(2_000)));
    }

    #[test]
    fn a_due_delayed_item_is_enqueued_by_its_wake() {
        let delayed = step(&active(Some(2)), Event::Fail(Failure::Transient("503".into()))).item;
        let due = delayed.run_at.unwrap();
        assert_eq!(apply(&delayed, Event::Wake, due.plus_ms(-1), B), Err(TransitionError::NotDue(due)));
        let o = apply(&delayed, Event::Wake, due, B).unwrap();
        assert_eq!(o.item.state, ItemState::Prioritized);
        assert_eq!(o.item.run_at, None);
        assert_eq!(o.effects, Effects::only_after_commit(vec![OutsideEffect::Enqueue]));
    }

    #[test]
    fn third_transient_failure_fails_and_releases_without_publishing() {
        let mut item = active(None);
        for _ in 0..2 {
            item = step(&item, Event::Fail(Failure::Transient("503".into()))).item;
            item = apply(&item, Event::Wake, Millis(i64::MAX), B).unwrap().item;
            item = step(&item, Event::Claim).item;
        }
        let o = step(&item, Event::Fail(Failure::Transient("503".into())));
        assert_eq!(o.item.state, ItemState::Failed);
        assert_eq!(o.item.attempts_made, 3);
        // No failure record: the item stays retryable.
        assert_eq!(o.effects, Effects::only_in_tx(vec![TxEffect::Settle(Settlement::Release)]));
        assert!(!o.item.failure_published);
    }

    #[test]
    fn terminal_failure_fails_at_once_and_publishes() {
        let o = step(&active(None), Event::Fail(Failure::Terminal("bad params".into())));
        assert_eq!(o.item.state, ItemState::Failed);
        assert_eq!(o.item.attempts_made, 1);
        assert!(o.item.failure_published);
        assert_eq!(
            o.effects,
            Effects::only_in_tx(vec![
                TxEffect::PublishFailureRecord { attempt: 1, reason: "bad params".into() },
                TxEffect::Settle(Settlement::Release)
            ])
        );
    }

    #[test]
    fn retry_rules_match_the_contract() {
        let waiting = Item::new(None);
        assert_eq!(
            apply(&waiting, Event::Retry { profile_selectable: true }, T0, B),
            Err(TransitionError::Refused(ApiError::OnlyFailedCanBeRetried))
        );
        let published = step(&active(None), Event::Fail(Failure::Terminal("x".into()))).item;
        assert_eq!(
            apply(&published, Event::Retry { profile_selectable: true }, T0, B),
            Err(TransitionError::Refused(ApiError::PublishedFailureImmutable))
        );
        let mut retryable = active(Some(7));
        retryable.attempts_made = 2;
        let retryable = step(&retryable, Event::Fail(Failure::Transient("x".into()))).item;
        assert_eq!(retryable.state, ItemState::Failed);
        assert_eq!(
            apply(&retryable, Event::Retry { profile_selectable: false }, T0, B),
            Err(TransitionError::Refused(ApiError::ProfileNotSelectable))
        );
        let o = step(&retryable, Event::Retry { profile_selectable: true });
        assert_eq!(o.item.state, ItemState::Prioritized);
        assert_eq!(o.item.attempts_made, 0);
        assert_eq!(o.effects, Effects::only_after_commit(vec![OutsideEffect::Enqueue]));
        // A retried item is free: succeeding later publishes but charges nothing.
        let done = step(&step(&o.item, Event::Claim).item, Event::Succeed);
        assert_eq!(done.effects, Effects::only_in_tx(vec![TxEffect::PublishFiles]));
    }

    #[test]
    fn recover_requeues_without_counting_the_attempt() {
        let o = step(&active(Some(3)), Event::Recover);
        assert_eq!(o.item.state, ItemState::Prioritized);
        assert_eq!(o.item.attempts_made, 0);
        assert!(o.item.billable);
        assert_eq!(o.effects, Effects::only_after_commit(vec![OutsideEffect::Enqueue]));
    }

    fn arb_event() -> impl Strategy<Value = Event> {
        prop_oneof![
            Just(Event::Claim),
            Just(Event::Succeed),
            Just(Event::Fail(Failure::Transient("t".into()))),
            Just(Event::Fail(Failure::Terminal("p".into()))),
            Just(Event::Wake),
            Just(Event::Recover),
            any::<bool>().prop_map(|p| Event::Retry { profile_selectable: p }),
        ]
    }

    proptest! {
        /// Whatever happens, an item owes at most one settlement per
        /// reservation, attempts never pass the limit, and published failures
        /// never change.
        #[test]
        fn at_most_one_settlement_and_bounded_attempts(
            priority in proptest::option::of(1u32..1_000_000),
            events in proptest::collection::vec(arb_event(), 0..60),
        ) {
            let mut item = Item::new(priority);
            let mut settlements = 0;
            let mut now = T0;
            for e in events {
                now = now.plus_ms(10_000);
                let before = item.clone();
                if let Ok(o) = apply(&item, e, now, B) {
                    settlements += owed(&o).len();
                    let publishes = o.effects.in_tx.iter().filter(|e| matches!(e, TxEffect::PublishFailureRecord { .. })).count();
                    prop_assert_eq!(publishes > 0, o.item.failure_published && !before.failure_published);
                    let requeued = o.effects.after_commit.contains(&OutsideEffect::Requeue);
                    prop_assert_eq!(requeued, o.item.state == ItemState::Delayed && before.state != ItemState::Delayed);
                    if before.failure_published { prop_assert!(false, "published failure changed"); }
                    item = o.item;
                }
                prop_assert!(item.attempts_made <= MAX_ATTEMPTS);
                prop_assert!(settlements <= 1);
                prop_assert_eq!(item.billable, settlements == 0);
                prop_assert_eq!(item.run_at.is_some(), item.state == ItemState::Delayed);
                if item.state == ItemState::Waiting { prop_assert!(item.priority.is_none()); }
                if item.state == ItemState::Prioritized { prop_assert!(item.priority.is_some()); }
            }
        }
    }
}
