//! The analytical job state machine, as pure transitions.
//!
//! ```text
//!           enqueue         provision            container started
//! ACCEPTED ────────► QUEUED ─────────► PROVISIONING ──────────────► RUNNING
//!  (attempt 0)      (attempt n made)    │ start failed,              │ exited, evicted,
//!                                       │ evicted, lost              │ lost (after a stop for
//!                                       │ (no log)                   │ cancel or deadline, or not)
//!                                       ▼                            ▼
//!                          SUCCEEDED | FAILED | TIMED_OUT | CANCELLED ◄── PUBLISHING
//!                                    │                       published (log)
//!            replay (PLATFORM_EVICTED, replays used < retries, no cancel) → QUEUED, attempt n+1, free
//!            retry  (FAILED or TIMED_OUT, no replay pending)              → QUEUED, attempt n+1, reserve
//! ```
//!
//! The job's phase is its current attempt's phase (ACCEPTED before the first
//! attempt exists). An attempt ends when its termination is decided; an
//! attempt whose container started then publishes its log (PUBLISHING), one
//! that never started has no log and finishes at once.
//!
//! Decisions the contract leaves open, made here:
//!
//! - **Termination reason.** A stop the grid asked for decides the reason,
//!   first cause wins: a deadline stop gives RUNNING_DEADLINE_EXCEEDED, a
//!   cancel gives CANCELLED, whatever the container did meanwhile (exit,
//!   eviction, loss, failed start). Otherwise: exit 0 → WORKLOAD_SUCCEEDED,
//!   OOM-killed → PLATFORM_OOM, other exit → WORKLOAD_FAILED, eviction →
//!   PLATFORM_EVICTED, failed start → PLATFORM_START_FAILED, other loss →
//!   PLATFORM_LOST. An exit the engine dates after the deadline comes after
//!   the deadline stop the grid owed (it may learn of both late, after a
//!   restart), so it is a deadline stop too.
//! - **End of a timed-out attempt** is its deadline: the time the grid took
//!   to notice the deadline and kill the container (late by a restart, or
//!   by the kill itself) is not the workload's, so neither its `endedAt`
//!   nor its charge goes past the deadline.
//! - **Due times.** `Job::next_due` says what the machine waits for and
//!   when: the running deadline, or a replay owed since an eviction. The
//!   driver stores it and applies the event at that time (not the time it
//!   got round to it).
//! - **Final phase** follows the last attempt's reason: WORKLOAD_SUCCEEDED →
//!   SUCCEEDED, RUNNING_DEADLINE_EXCEEDED → TIMED_OUT, CANCELLED → CANCELLED,
//!   anything else → FAILED.
//! - **Eviction and replay.** An evicted attempt takes the job to FAILED
//!   like any other final end; while a replay is still to come the job keeps
//!   its reservation and the driver is told `ReplayDue`. The replay is a new
//!   attempt funded by the same reservation. `retries` counts replays per
//!   reservation: a manual retry starts a fresh count.
//! - **Cancel.** Before the first attempt or while queued there is no
//!   container, so the job is CANCELLED at once (in ACCEPTED no attempt is
//!   made). While provisioning or running the container is stopped first.
//!   During PUBLISHING the attempt has already ended: its result stands and
//!   the cancel is only recorded (it stops a replay still to come). On
//!   FAILED or TIMED_OUT the cancel is recorded and stops a pending replay,
//!   settling the reservation. On SUCCEEDED, CANCELLED, or an attempt already
//!   being stopped, nothing changes.
//! - **Manual retry** is allowed on FAILED or TIMED_OUT when no replay is
//!   still to come (including a job whose last eviction used up its
//!   replays, and a job whose cancellation was recorded after it failed: the
//!   retry is a new request and clears that record). Otherwise 409
//!   JOB_NOT_RETRYABLE. A retry takes a new reservation.
//! - **phaseTimestamps** of the job hold ACCEPTED and the phases of the
//!   current attempt; every attempt keeps its own map.
//! - **Settlement.** Each reservation is settled once, when the last attempt
//!   it funds finishes: that attempt's run time is charged if its reason is
//!   charged and its container started, the rest is released.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::time::Millis;
use crate::wire::job::{JobPhase, Termination, TerminationReason};

/// What pays for an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Funding {
    /// Its own reservation: the first attempt and every manual retry.
    Reservation,
    /// A replay after an eviction: holds nothing more.
    Replay,
}

/// Why the grid asked an attempt's container to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StopCause {
    Cancel,
    Deadline,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// 1-based.
    pub number: u32,
    pub phase: JobPhase,
    pub phase_timestamps: BTreeMap<JobPhase, Millis>,
    pub funding: Funding,
    /// When the container started (entered RUNNING).
    pub started_at: Option<Millis>,
    /// When the termination was decided.
    pub ended_at: Option<Millis>,
    pub stopping: Option<StopCause>,
    pub termination: Option<Termination>,
    pub log_available: bool,
}

impl Attempt {
    fn new(number: u32, funding: Funding, now: Millis) -> Attempt {
        Attempt {
            number,
            phase: JobPhase::Queued,
            phase_timestamps: BTreeMap::from([(JobPhase::Queued, now)]),
            funding,
            started_at: None,
            ended_at: None,
            stopping: None,
            termination: None,
            log_available: false,
        }
    }

    /// Container run time, from start to end; `None` if it never started.
    pub fn run_millis(&self) -> Option<i64> {
        match (self.started_at, self.ended_at) {
            (Some(s), Some(e)) => Some((e.0 - s.0).max(0)),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Job {
    pub phase: JobPhase,
    pub phase_timestamps: BTreeMap<JobPhase, Millis>,
    pub attempts: Vec<Attempt>,
    /// From the submission: replays allowed per reservation.
    pub retries: u32,
    pub running_deadline_seconds: u32,
    /// Replays made under the current reservation.
    pub replays_used: u32,
    /// A cancellation was recorded (and not cleared by a later retry).
    pub cancel_requested: bool,
    /// The job holds a reservation not yet settled.
    pub reservation_open: bool,
}

impl Job {
    /// A job just accepted by POST /jobs; the driver takes its first
    /// reservation together with storing it.
    pub fn new(retries: u32, running_deadline_seconds: u32, now: Millis) -> Job {
        Job {
            phase: JobPhase::Accepted,
            phase_timestamps: BTreeMap::from([(JobPhase::Accepted, now)]),
            attempts: vec![],
            retries,
            running_deadline_seconds,
            replays_used: 0,
            cancel_requested: false,
            reservation_open: true,
        }
    }

    /// The record's `attempt`: 0 on a new job.
    pub fn attempt_number(&self) -> u32 {
        self.attempts.len() as u32
    }

    pub fn current_attempt(&self) -> Option<&Attempt> {
        self.attempts.last()
    }

    /// The record's `termination`: the current attempt's, once it ended.
    pub fn termination(&self) -> Option<&Termination> {
        self.current_attempt().and_then(|a| a.termination.as_ref())
    }

    /// FAILED by an eviction with an automatic replay still to come.
    pub fn replay_pending(&self) -> bool {
        self.phase == JobPhase::Failed && self.reservation_open
    }

    /// When a running attempt reaches `runningDeadlineSeconds`.
    pub fn deadline_at(&self) -> Option<Millis> {
        let a = self.current_attempt()?;
        match (self.phase, a.started_at) {
            (JobPhase::Running, Some(s)) => Some(s.plus_ms(self.deadline_millis())),
            _ => None,
        }
    }

    fn deadline_millis(&self) -> i64 {
        i64::from(self.running_deadline_seconds) * 1_000
    }

    /// The next event the machine waits for by time alone, and when it is
    /// due: the deadline of a running attempt not yet being stopped, or the
    /// replay owed since an eviction. `None` while it waits for something
    /// else (the scheduler, the container, a request).
    pub fn next_due(&self) -> Option<Due> {
        match self.phase {
            JobPhase::Running if self.current_attempt().is_some_and(|a| a.stopping.is_none()) => {
                self.deadline_at().map(|at| Due { at, event: Event::DeadlineExceeded })
            }
            JobPhase::Failed if self.replay_pending() => {
                self.phase_timestamps.get(&JobPhase::Failed).map(|&at| Due { at, event: Event::Replay })
            }
            _ => None,
        }
    }
}

/// An event the machine is owed at a time: apply `event` at `at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub at: Millis,
    pub event: Event,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The accepted job joins the queue; its first attempt is made.
    Enqueue,
    /// The scheduler picks the queued attempt and starts its container.
    Provision,
    /// The container is running.
    ContainerStarted,
    /// The container could not be created or started, or its start was
    /// aborted after a cancel.
    StartFailed,
    /// The running container exited.
    ContainerExited { exit_code: i32, oom_killed: bool },
    /// The running attempt reached its deadline.
    DeadlineExceeded,
    /// The container was lost because the machine ran short of resources.
    Evicted,
    /// The container was lost for another grid-side cause.
    Lost,
    /// The ended attempt's log was published (or could not be).
    Published { log_available: bool },
    /// The automatic replay after an eviction.
    Replay,
    /// POST /jobs/{jobId}/cancel.
    Cancel,
    /// POST /jobs/{jobId}/retry.
    Retry,
}

fn event_name(e: &Event) -> &'static str {
    match e {
        Event::Enqueue => "enqueue",
        Event::Provision => "provision",
        Event::ContainerStarted => "container started",
        Event::StartFailed => "start failed",
        Event::ContainerExited { .. } => "container exited",
        Event::DeadlineExceeded => "deadline exceeded",
        Event::Evicted => "evicted",
        Event::Lost => "lost",
        Event::Published { .. } => "published",
        Event::Replay => "replay",
        Event::Cancel => "cancel",
        Event::Retry => "retry",
    }
}

/// An attempt's charge, for the settlement pass to price with
/// `pricing::job_attempt_charge_micros`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptCharge {
    pub attempt: u32,
    /// Container run time, at most the running deadline.
    pub run_millis: i64,
}

/// An effect written in the transaction that applies the event: a failure
/// (a refused reservation) rolls the whole step back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxEffect {
    /// A new job (`submit`) or a manual retry needs a new reservation of
    /// the job formula for `attempt`. The driver checks credit first and
    /// drops the whole outcome on a refusal.
    Reserve { attempt: u32 },
    /// Settle the job's open reservation: charge `charge` if any, release
    /// the rest.
    Settle { charge: Option<AttemptCharge> },
}

/// An effect carried out once that transaction committed, outside the
/// database (the engine, another node, a later step).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutsideEffect {
    /// Pull, create and start the attempt's container.
    StartContainer { attempt: u32 },
    /// Stop (or abort the start of) the attempt's container.
    StopContainer { attempt: u32 },
    /// Publish the ended attempt's log, then report `Published`.
    PublishLog { attempt: u32 },
    /// An automatic replay is due; report `Replay`.
    ReplayDue,
}

/// What a transition asks of the driver, split by when it happens: the
/// driver has one exhaustive executor per half, so a new effect is placed
/// in one half here and does not compile until that half executes it,
/// like this pair of executors, each matching only its own half:
///
/// ```
/// use grid_core::job::{OutsideEffect, TxEffect};
/// fn execute_in_tx(e: &TxEffect) -> &'static str {
///     match e {
///         TxEffect::Reserve { .. } => "reserve",
///         TxEffect::Settle { .. } => "settle",
///     }
/// }
/// fn execute_after_commit(e: &OutsideEffect) -> &'static str {
///     match e {
///         OutsideEffect::StartContainer { .. } => "start",
///         OutsideEffect::StopContainer { .. } => "stop",
///         OutsideEffect::PublishLog { .. } => "publish",
///         OutsideEffect::ReplayDue => "replay",
///     }
/// }
/// # let _ = (execute_in_tx, execute_after_commit);
/// ```
///
/// A half that leaves an effect unhandled, as an executor does once a
/// variant is added here, fails to compile (E0004, non-exhaustive match):
///
/// ```compile_fail,E0004
/// use grid_core::job::OutsideEffect;
/// fn execute_after_commit(e: &OutsideEffect) -> &'static str {
///     match e {
///         OutsideEffect::StartContainer { .. } => "start",
///         OutsideEffect::StopContainer { .. } => "stop",
///         OutsideEffect::PublishLog { .. } => "publish",
///     }
/// }
/// ```
pub type Effects = crate::effects::Effects<TxEffect, OutsideEffect>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub job: Job,
    pub effects: Effects,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("event {event} is not allowed in phase {phase}")]
    NotAllowed { phase: &'static str, event: &'static str },
    #[error("deadline is not reached before {0:?}")]
    NotDue(Millis),
    #[error(transparent)]
    Refused(#[from] ApiError),
    /// A stored job that breaks the machine's own invariants (a phase past
    /// ACCEPTED without an attempt, an ended attempt without a termination).
    #[error("inconsistent job: {0}")]
    Inconsistent(&'static str),
}

/// The machine's first step: a job accepted by POST /jobs at `now`, its
/// first attempt's reservation taken in the transaction that stores it.
/// The scheduler, woken once it commits (the job holds no container),
/// queues it (`Event::Enqueue`).
pub fn submit(retries: u32, running_deadline_seconds: u32, now: Millis) -> Outcome {
    Outcome {
        job: Job::new(retries, running_deadline_seconds, now),
        effects: Effects::only_in_tx(vec![TxEffect::Reserve { attempt: 1 }]),
    }
}

/// Applies one event. Pure: `now` is an input.
pub fn apply(job: &Job, event: Event, now: Millis) -> Result<Outcome, TransitionError> {
    use JobPhase::*;
    let mut j = job.clone();
    let mut fx = Effects::default();
    let attempt = job.attempt_number();
    let stopping = job.current_attempt().and_then(|a| a.stopping);
    match (job.phase, &event) {
        (Accepted, Event::Enqueue) => new_attempt(&mut j, Funding::Reservation, now),
        (Queued, Event::Provision) => {
            enter(&mut j, Provisioning, now)?;
            fx.after_commit.push(OutsideEffect::StartContainer { attempt });
        }
        (Provisioning, Event::ContainerStarted) => {
            enter(&mut j, Running, now)?;
            current(&mut j)?.started_at = Some(now);
            if stopping.is_some() {
                fx.after_commit.push(OutsideEffect::StopContainer { attempt });
            }
        }
        (Provisioning, Event::StartFailed) => {
            end_attempt(&mut j, TerminationReason::PlatformStartFailed, None, now, &mut fx)?
        }
        (Running, Event::ContainerExited { exit_code, oom_killed }) => {
            if stopping.is_none() && job.deadline_at().is_some_and(|d| now > d) {
                current(&mut j)?.stopping = Some(StopCause::Deadline);
            }
            let own = match (exit_code, oom_killed) {
                (_, true) => TerminationReason::PlatformOom,
                (0, false) => TerminationReason::WorkloadSucceeded,
                _ => TerminationReason::WorkloadFailed,
            };
            end_attempt(&mut j, own, Some(*exit_code), now, &mut fx)?;
        }
        (Running, Event::DeadlineExceeded) => {
            let due = job.deadline_at().unwrap_or(now);
            if due > now {
                return Err(TransitionError::NotDue(due));
            }
            if stopping.is_none() {
                current(&mut j)?.stopping = Some(StopCause::Deadline);
                fx.after_commit.push(OutsideEffect::StopContainer { attempt });
            }
        }
        (Provisioning | Running, Event::Evicted) => {
            end_attempt(&mut j, TerminationReason::PlatformEvicted, None, now, &mut fx)?
        }
        (Provisioning | Running, Event::Lost) => {
            end_attempt(&mut j, TerminationReason::PlatformLost, None, now, &mut fx)?
        }
        (Publishing, Event::Published { log_available }) => {
            current(&mut j)?.log_available = *log_available;
            finish(&mut j, now, &mut fx)?;
        }
        (Failed, Event::Replay) if job.replay_pending() => {
            j.replays_used += 1;
            new_attempt(&mut j, Funding::Replay, now);
        }

        (Accepted, Event::Cancel) => {
            j.cancel_requested = true;
            j.phase = Cancelled;
            j.phase_timestamps.insert(Cancelled, now);
            settle(&mut j, &mut fx);
        }
        (Queued, Event::Cancel) => {
            j.cancel_requested = true;
            end_attempt(&mut j, TerminationReason::Cancelled, None, now, &mut fx)?;
        }
        (Provisioning | Running, Event::Cancel) => {
            j.cancel_requested = true;
            if stopping.is_none() {
                current(&mut j)?.stopping = Some(StopCause::Cancel);
                fx.after_commit.push(OutsideEffect::StopContainer { attempt });
            }
        }
        (Publishing | Failed | TimedOut, Event::Cancel) => {
            j.cancel_requested = true;
            if job.replay_pending() {
                settle(&mut j, &mut fx);
            }
        }
        (Succeeded | Cancelled, Event::Cancel) => {}

        (Failed | TimedOut, Event::Retry) if !job.replay_pending() => {
            j.cancel_requested = false;
            j.replays_used = 0;
            j.reservation_open = true;
            new_attempt(&mut j, Funding::Reservation, now);
            fx.in_tx.push(TxEffect::Reserve { attempt: j.attempt_number() });
        }
        (_, Event::Retry) => return Err(ApiError::JobNotRetryable.into()),
        (phase, e) => return Err(TransitionError::NotAllowed { phase: phase.as_str(), event: event_name(e) }),
    }
    Ok(Outcome { job: j, effects: fx })
}

/// The current attempt; every phase after ACCEPTED has one.
fn current(job: &mut Job) -> Result<&mut Attempt, TransitionError> {
    job.attempts.last_mut().ok_or(TransitionError::Inconsistent("a phase after ACCEPTED without an attempt"))
}

/// The job and its current attempt enter `phase`.
fn enter(job: &mut Job, phase: JobPhase, now: Millis) -> Result<(), TransitionError> {
    let a = current(job)?;
    a.phase = phase;
    a.phase_timestamps.insert(phase, now);
    job.phase = phase;
    job.phase_timestamps.insert(phase, now);
    Ok(())
}

fn new_attempt(job: &mut Job, funding: Funding, now: Millis) {
    job.attempts.push(Attempt::new(job.attempt_number() + 1, funding, now));
    job.phase = JobPhase::Queued;
    job.phase_timestamps.retain(|p, _| *p == JobPhase::Accepted);
    job.phase_timestamps.insert(JobPhase::Queued, now);
}

/// Decides the current attempt's termination; a stop the grid asked for
/// overrides what the container itself did (`own`).
fn end_attempt(
    job: &mut Job,
    own: TerminationReason,
    exit_code: Option<i32>,
    now: Millis,
    fx: &mut Effects,
) -> Result<(), TransitionError> {
    let cancel_requested = job.cancel_requested;
    let deadline = job.deadline_at();
    let a = current(job)?;
    let (reason, end) = match a.stopping {
        Some(StopCause::Deadline) => (TerminationReason::RunningDeadlineExceeded, deadline.map_or(now, |d| d.min(now))),
        Some(StopCause::Cancel) => (TerminationReason::Cancelled, now),
        None if cancel_requested => (TerminationReason::Cancelled, now),
        None => (own, now),
    };
    a.termination = Some(Termination::new(reason, exit_code));
    a.ended_at = Some(end);
    if a.started_at.is_some() {
        let attempt = a.number;
        enter(job, JobPhase::Publishing, end)?;
        fx.after_commit.push(OutsideEffect::PublishLog { attempt });
        Ok(())
    } else {
        finish(job, now, fx)
    }
}

/// The ended attempt reaches its final phase; the job then either awaits a
/// replay or settles its reservation.
fn finish(job: &mut Job, now: Millis, fx: &mut Effects) -> Result<(), TransitionError> {
    let termination = current(job)?.termination.as_ref();
    let reason =
        termination.ok_or(TransitionError::Inconsistent("an ended attempt without a termination"))?.reason.clone();
    enter(job, reason.final_phase(), now)?;
    if reason == TerminationReason::PlatformEvicted && job.replays_used < job.retries && !job.cancel_requested {
        fx.after_commit.push(OutsideEffect::ReplayDue);
    } else {
        settle(job, fx);
    }
    Ok(())
}

fn settle(job: &mut Job, fx: &mut Effects) {
    let cap = job.deadline_millis();
    let charge = job.current_attempt().and_then(|a| {
        let charged = a.termination.as_ref().is_some_and(|t| t.reason.is_charged());
        let run_millis = a.run_millis()?.min(cap);
        charged.then_some(AttemptCharge { attempt: a.number, run_millis })
    });
    job.reservation_open = false;
    fx.in_tx.push(TxEffect::Settle { charge });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::job::TerminationClass;
    use proptest::prelude::*;

    const T0: Millis = Millis(1_000_000);

    fn at(s: i64) -> Millis {
        T0.plus_ms(s * 1_000)
    }

    fn step(job: &Job, e: Event, now: Millis) -> Outcome {
        apply(job, e.clone(), now).unwrap_or_else(|err| panic!("{e:?} in {:?}: {err}", job.phase))
    }

    /// Walks a job of `retries` and a 60 s deadline to `phase` through its
    /// first attempt, one second per step.
    fn job_in(phase: JobPhase, retries: u32) -> Job {
        let mut j = Job::new(retries, 60, T0);
        let path = [
            (JobPhase::Queued, Event::Enqueue),
            (JobPhase::Provisioning, Event::Provision),
            (JobPhase::Running, Event::ContainerStarted),
        ];
        for (i, (reached, e)) in path.into_iter().enumerate() {
            if j.phase == phase {
                break;
            }
            j = step(&j, e, at(i as i64 + 1)).job;
            assert_eq!(j.phase, reached);
        }
        j
    }

    #[test]
    fn submit_reserves_the_first_attempt_in_the_transaction() {
        let o = submit(2, 60, T0);
        assert_eq!(o.job, Job::new(2, 60, T0));
        assert_eq!((o.job.phase, o.job.reservation_open), (JobPhase::Accepted, true));
        assert_eq!(o.effects, Effects::only_in_tx(vec![TxEffect::Reserve { attempt: 1 }]));
        // The reservation it took is the one its first attempt runs on.
        let queued = step(&o.job, Event::Enqueue, at(1)).job;
        assert_eq!(queued.current_attempt().map(|a| a.funding), Some(Funding::Reservation));
    }

    fn termination(j: &Job) -> (TerminationClass, Option<i32>, TerminationReason) {
        let t = j.termination().expect("termination");
        (t.class, t.exit_code, t.reason.clone())
    }

    /// Runs one attempt from RUNNING through exit and publishing.
    fn exit_and_publish(j: &Job, exit_code: i32, oom_killed: bool, secs: i64) -> (Job, Effects) {
        let o = step(j, Event::ContainerExited { exit_code, oom_killed }, at(secs));
        assert_eq!(o.job.phase, JobPhase::Publishing);
        assert_eq!(
            o.effects,
            Effects::only_after_commit(vec![OutsideEffect::PublishLog { attempt: j.attempt_number() }])
        );
        let o = step(&o.job, Event::Published { log_available: true }, at(secs + 1));
        (o.job, o.effects)
    }

    /// A stored job that breaks the machine's invariants used to panic the
    /// caller (`expect`); it is now an error the driver can log and answer.
    #[test]
    fn a_stored_job_without_its_attempt_is_an_error_not_a_panic() {
        let mut running = job_in(JobPhase::Running, 0);
        running.attempts.clear();
        let exited = apply(&running, Event::ContainerExited { exit_code: 0, oom_killed: false }, at(9));
        assert!(matches!(exited, Err(TransitionError::Inconsistent(_))), "{exited:?}");
        let mut publishing = exit_and_publish_pending(&job_in(JobPhase::Running, 0));
        publishing.attempts.last_mut().unwrap().termination = None;
        let published = apply(&publishing, Event::Published { log_available: true }, at(9));
        assert!(matches!(published, Err(TransitionError::Inconsistent(_))), "{published:?}");
    }

    fn exit_and_publish_pending(j: &Job) -> Job {
        step(j, Event::ContainerExited { exit_code: 0, oom_killed: false }, at(5)).job
    }

    #[test]
    fn new_job_is_accepted_with_no_attempt() {
        let j = Job::new(2, 60, T0);
        assert_eq!(j.phase, JobPhase::Accepted);
        assert_eq!(j.attempt_number(), 0);
        assert!(j.attempts.is_empty());
        assert_eq!(j.termination(), None);
        assert_eq!(j.phase_timestamps, BTreeMap::from([(JobPhase::Accepted, T0)]));
        assert!(j.reservation_open);
    }

    #[test]
    fn happy_path_records_every_phase_and_charges_run_time() {
        let j = job_in(JobPhase::Running, 0);
        assert_eq!(j.attempt_number(), 1);
        assert_eq!(j.deadline_at(), Some(at(3 + 60)));
        let (j, fx) = exit_and_publish(&j, 0, false, 33);
        assert_eq!(j.phase, JobPhase::Succeeded);
        assert_eq!(termination(&j), (TerminationClass::Workload, Some(0), TerminationReason::WorkloadSucceeded));
        assert_eq!(
            fx,
            Effects::only_in_tx(vec![TxEffect::Settle {
                charge: Some(AttemptCharge { attempt: 1, run_millis: 30_000 })
            }])
        );
        let a = &j.attempts[0];
        assert!(a.log_available);
        assert_eq!(a.funding, Funding::Reservation);
        let phases: Vec<_> = a.phase_timestamps.iter().map(|(p, t)| (*p, *t)).collect();
        assert_eq!(
            phases,
            [
                (JobPhase::Queued, at(1)),
                (JobPhase::Provisioning, at(2)),
                (JobPhase::Running, at(3)),
                (JobPhase::Publishing, at(33)),
                (JobPhase::Succeeded, at(34)),
            ]
        );
        assert_eq!(j.phase_timestamps[&JobPhase::Accepted], T0);
        assert_eq!(j.phase_timestamps.len(), 6);
        assert!(!j.reservation_open);
    }

    #[test]
    fn workload_failure_and_oom_are_failed_and_charged() {
        let (j, fx) = exit_and_publish(&job_in(JobPhase::Running, 3), 2, false, 13);
        assert_eq!(j.phase, JobPhase::Failed);
        assert_eq!(termination(&j), (TerminationClass::Workload, Some(2), TerminationReason::WorkloadFailed));
        assert_eq!(
            fx,
            Effects::only_in_tx(vec![TxEffect::Settle {
                charge: Some(AttemptCharge { attempt: 1, run_millis: 10_000 })
            }])
        );

        let (j, fx) = exit_and_publish(&job_in(JobPhase::Running, 3), 137, true, 5);
        assert_eq!(j.phase, JobPhase::Failed);
        assert_eq!(termination(&j), (TerminationClass::Workload, Some(137), TerminationReason::PlatformOom));
        assert_eq!(
            fx,
            Effects::only_in_tx(vec![TxEffect::Settle {
                charge: Some(AttemptCharge { attempt: 1, run_millis: 2_000 })
            }])
        );
        // Neither is replayed, whatever `retries` says.
        assert!(!j.replay_pending());
        assert!(apply(&j, Event::Replay, at(9)).is_err());
    }

    #[test]
    fn deadline_stops_the_container_and_times_out() {
        let j = job_in(JobPhase::Running, 0);
        assert_eq!(apply(&j, Event::DeadlineExceeded, at(62)), Err(TransitionError::NotDue(at(63))));
        let o = step(&j, Event::DeadlineExceeded, at(63));
        assert_eq!(o.job.phase, JobPhase::Running);
        assert_eq!(o.effects, Effects::only_after_commit(vec![OutsideEffect::StopContainer { attempt: 1 }]));
        // A second deadline tick changes nothing.
        let again = step(&o.job, Event::DeadlineExceeded, at(64));
        assert_eq!((again.job.clone(), again.effects), (o.job.clone(), Effects::default()));
        // The stopped container exits with SIGKILL's code; the stop decides.
        let (j, fx) = exit_and_publish(&o.job, 137, false, 65);
        assert_eq!(j.phase, JobPhase::TimedOut);
        assert_eq!(
            termination(&j),
            (TerminationClass::Workload, Some(137), TerminationReason::RunningDeadlineExceeded)
        );
        // The kill took 2 s past the deadline: the attempt still ends at its
        // deadline and is charged the 60 s up to it.
        assert_eq!(j.attempts[0].ended_at, Some(at(63)));
        assert_eq!(j.attempts[0].phase_timestamps[&JobPhase::Publishing], at(63));
        assert_eq!(
            fx,
            Effects::only_in_tx(vec![TxEffect::Settle {
                charge: Some(AttemptCharge { attempt: 1, run_millis: 60_000 })
            }])
        );
    }

    #[test]
    fn a_deadline_fired_late_still_ends_the_attempt_at_its_deadline() {
        // The grid was away: the deadline (due at 63) is applied at its due
        // time once the grid is back; the kill is dated 600 s later.
        let j = job_in(JobPhase::Running, 0);
        let due = j.next_due().expect("a running attempt has a deadline");
        assert_eq!(due, Due { at: at(63), event: Event::DeadlineExceeded });
        let stopping = step(&j, due.event, due.at).job;
        let o = step(&stopping, Event::ContainerExited { exit_code: 137, oom_killed: false }, at(663));
        assert_eq!(o.job.attempts[0].ended_at, Some(at(63)));
        let o = step(&o.job, Event::Published { log_available: true }, at(664));
        assert_eq!(o.job.phase, JobPhase::TimedOut);
        assert_eq!(
            o.effects,
            Effects::only_in_tx(vec![TxEffect::Settle {
                charge: Some(AttemptCharge { attempt: 1, run_millis: 60_000 })
            }])
        );
    }

    #[test]
    fn an_exit_dated_after_the_deadline_is_timed_out_at_the_deadline() {
        // The container exited by itself at 70, after its deadline at 63,
        // before the grid stopped it: the deadline came first.
        let j = job_in(JobPhase::Running, 0);
        let (j, fx) = exit_and_publish(&j, 0, false, 70);
        assert_eq!(j.phase, JobPhase::TimedOut);
        assert_eq!(termination(&j), (TerminationClass::Workload, Some(0), TerminationReason::RunningDeadlineExceeded));
        assert_eq!(j.attempts[0].ended_at, Some(at(63)));
        assert_eq!(
            fx,
            Effects::only_in_tx(vec![TxEffect::Settle {
                charge: Some(AttemptCharge { attempt: 1, run_millis: 60_000 })
            }])
        );
        // An exit at the deadline itself is within it.
        let (j, _) = exit_and_publish(&job_in(JobPhase::Running, 0), 0, false, 63);
        assert_eq!(j.phase, JobPhase::Succeeded);
    }

    #[test]
    fn a_cancelled_attempt_is_charged_at_most_its_deadline() {
        let o = step(&job_in(JobPhase::Running, 0), Event::Cancel, at(50));
        // The cancel's stop came first, so the deadline does not decide; the
        // kill landed late, the charge still stops at the deadline.
        assert_eq!(o.job.next_due(), None);
        let (j, fx) = exit_and_publish(&o.job, 137, false, 70);
        assert_eq!(j.phase, JobPhase::Cancelled);
        assert_eq!(j.attempts[0].ended_at, Some(at(70)));
        assert_eq!(
            fx,
            Effects::only_in_tx(vec![TxEffect::Settle {
                charge: Some(AttemptCharge { attempt: 1, run_millis: 60_000 })
            }])
        );
    }

    #[test]
    fn next_due_is_the_running_deadline_or_an_owed_replay() {
        let waiting = [Job::new(1, 60, T0), job_in(JobPhase::Queued, 1), job_in(JobPhase::Provisioning, 1)];
        for j in &waiting {
            assert_eq!(j.next_due(), None, "{:?}", j.phase);
        }
        let running = job_in(JobPhase::Running, 1);
        assert_eq!(running.next_due(), Some(Due { at: at(63), event: Event::DeadlineExceeded }));
        // Being stopped (for the deadline or a cancel): it waits for the container.
        let deadline_stop = step(&running, Event::DeadlineExceeded, at(63)).job;
        assert_eq!(deadline_stop.next_due(), None);
        assert_eq!(step(&running, Event::Cancel, at(10)).job.next_due(), None);
        // Publishing waits for the log.
        let evicted = step(&running, Event::Evicted, at(10)).job;
        assert_eq!(evicted.next_due(), None);
        // An eviction with a replay left: the replay is due from the moment it is owed.
        let owed = step(&evicted, Event::Published { log_available: true }, at(11)).job;
        assert!(owed.replay_pending());
        assert_eq!(owed.next_due(), Some(Due { at: at(11), event: Event::Replay }));
        let replayed = step(&owed, Event::Replay, at(12)).job;
        assert_eq!(replayed.next_due(), None);
        // A cancel stops the owed replay; nothing is due on a finished job.
        assert_eq!(step(&owed, Event::Cancel, at(12)).job.next_due(), None);
        let (succeeded, _) = exit_and_publish(&running, 0, false, 10);
        assert_eq!(succeeded.next_due(), None);
        // Used-up replays: FAILED for good, nothing due.
        let final_failure = step(&job_in(JobPhase::Provisioning, 0), Event::Evicted, at(5)).job;
        assert_eq!(final_failure.next_due(), None);
    }

    #[test]
    fn start_failure_and_loss_are_final_free_failures() {
        let o = step(&job_in(JobPhase::Provisioning, 3), Event::StartFailed, at(5));
        assert_eq!(o.job.phase, JobPhase::Failed);
        assert_eq!(termination(&o.job), (TerminationClass::Platform, None, TerminationReason::PlatformStartFailed));
        assert_eq!(o.effects, Effects::only_in_tx(vec![TxEffect::Settle { charge: None }]));
        assert!(!o.job.attempts[0].log_available);

        let o = step(&job_in(JobPhase::Running, 3), Event::Lost, at(5));
        assert_eq!(o.effects, Effects::only_after_commit(vec![OutsideEffect::PublishLog { attempt: 1 }]));
        let o = step(&o.job, Event::Published { log_available: false }, at(6));
        assert_eq!(o.job.phase, JobPhase::Failed);
        assert_eq!(termination(&o.job).2, TerminationReason::PlatformLost);
        assert_eq!(o.effects, Effects::only_in_tx(vec![TxEffect::Settle { charge: None }]));
    }

    // Contract row: an attempt lost with PLATFORM_EVICTED | automatic replay |
    // replays used < retries and no cancellation | a new attempt | free.
    #[test]
    fn eviction_is_replayed_for_free_while_retries_allow() {
        let o = step(&job_in(JobPhase::Running, 1), Event::Evicted, at(10));
        assert_eq!(o.job.phase, JobPhase::Publishing);
        let o = step(&o.job, Event::Published { log_available: true }, at(11));
        assert_eq!(o.job.phase, JobPhase::Failed);
        assert_eq!(termination(&o.job), (TerminationClass::Platform, None, TerminationReason::PlatformEvicted));
        assert_eq!(o.effects, Effects::only_after_commit(vec![OutsideEffect::ReplayDue]));
        assert!(o.job.replay_pending() && o.job.reservation_open);
        assert_eq!(apply(&o.job, Event::Retry, at(12)), Err(TransitionError::Refused(ApiError::JobNotRetryable)));

        let r = step(&o.job, Event::Replay, at(12));
        assert_eq!(r.effects, Effects::default());
        assert_eq!(r.job.phase, JobPhase::Queued);
        assert_eq!(r.job.attempt_number(), 2);
        assert_eq!(r.job.replays_used, 1);
        assert_eq!(r.job.attempts[1].funding, Funding::Replay);
        assert_eq!(r.job.termination(), None);
        assert_eq!(r.job.phase_timestamps, BTreeMap::from([(JobPhase::Accepted, T0), (JobPhase::Queued, at(12))]));
        // The first attempt is kept as it ended.
        assert_eq!(r.job.attempts[0], o.job.attempts[0]);

        // Evicted again while provisioning: replays are used up, so it is final.
        let j = step(&r.job, Event::Provision, at(13)).job;
        let o = step(&j, Event::Evicted, at(14));
        assert_eq!(o.job.phase, JobPhase::Failed);
        assert_eq!(o.effects, Effects::only_in_tx(vec![TxEffect::Settle { charge: None }]));
        assert!(!o.job.replay_pending());
        assert!(apply(&o.job, Event::Replay, at(15)).is_err());
    }

    #[test]
    fn eviction_with_no_retries_is_final() {
        let o = step(&job_in(JobPhase::Provisioning, 0), Event::Evicted, at(5));
        assert_eq!(o.job.phase, JobPhase::Failed);
        assert_eq!(o.effects, Effects::only_in_tx(vec![TxEffect::Settle { charge: None }]));
    }

    // Contract row: running | cancel | any state before finish | CANCELLED once
    // the container has stopped | class cancelled; no further retries; release.
    #[test]
    fn cancel_while_running_stops_then_cancels() {
        let o = step(&job_in(JobPhase::Running, 3), Event::Cancel, at(10));
        assert_eq!(o.job.phase, JobPhase::Running);
        assert!(o.job.cancel_requested);
        assert_eq!(o.effects, Effects::only_after_commit(vec![OutsideEffect::StopContainer { attempt: 1 }]));
        let (j, fx) = exit_and_publish(&o.job, 143, false, 12);
        assert_eq!(j.phase, JobPhase::Cancelled);
        assert_eq!(termination(&j), (TerminationClass::Cancelled, Some(143), TerminationReason::Cancelled));
        assert_eq!(
            fx,
            Effects::only_in_tx(vec![TxEffect::Settle {
                charge: Some(AttemptCharge { attempt: 1, run_millis: 9_000 })
            }])
        );
        assert_eq!(apply(&j, Event::Retry, at(20)), Err(TransitionError::Refused(ApiError::JobNotRetryable)));
    }

    #[test]
    fn cancel_before_a_container_exists_cancels_at_once() {
        let o = step(&Job::new(1, 60, T0), Event::Cancel, at(1));
        assert_eq!(o.job.phase, JobPhase::Cancelled);
        assert_eq!(o.job.attempt_number(), 0);
        assert_eq!(o.job.phase_timestamps[&JobPhase::Cancelled], at(1));
        assert_eq!(o.effects, Effects::only_in_tx(vec![TxEffect::Settle { charge: None }]));

        let o = step(&job_in(JobPhase::Queued, 1), Event::Cancel, at(5));
        assert_eq!(o.job.phase, JobPhase::Cancelled);
        assert_eq!(termination(&o.job), (TerminationClass::Cancelled, None, TerminationReason::Cancelled));
        assert_eq!(o.effects, Effects::only_in_tx(vec![TxEffect::Settle { charge: None }]));
    }

    #[test]
    fn cancel_while_provisioning_waits_for_the_container() {
        let o = step(&job_in(JobPhase::Provisioning, 1), Event::Cancel, at(5));
        assert_eq!(o.job.phase, JobPhase::Provisioning);
        assert_eq!(o.effects, Effects::only_after_commit(vec![OutsideEffect::StopContainer { attempt: 1 }]));
        // Aborted start: cancelled, nothing ran, no log.
        let aborted = step(&o.job, Event::StartFailed, at(6));
        assert_eq!(aborted.job.phase, JobPhase::Cancelled);
        assert_eq!(termination(&aborted.job).2, TerminationReason::Cancelled);
        assert_eq!(aborted.effects, Effects::only_in_tx(vec![TxEffect::Settle { charge: None }]));
        // The start won the race: stop it again, then it is cancelled.
        let started = step(&o.job, Event::ContainerStarted, at(6));
        assert_eq!(started.job.phase, JobPhase::Running);
        assert_eq!(started.effects, Effects::only_after_commit(vec![OutsideEffect::StopContainer { attempt: 1 }]));
        let (j, _) = exit_and_publish(&started.job, 0, false, 7);
        assert_eq!(j.phase, JobPhase::Cancelled);
    }

    #[test]
    fn cancel_beats_eviction_and_stops_replays() {
        let o = step(&job_in(JobPhase::Running, 3), Event::Cancel, at(5));
        let o = step(&o.job, Event::Evicted, at(6));
        let o = step(&o.job, Event::Published { log_available: true }, at(7));
        assert_eq!(o.job.phase, JobPhase::Cancelled);
        assert_eq!(termination(&o.job), (TerminationClass::Cancelled, None, TerminationReason::Cancelled));
        assert_eq!(
            o.effects,
            Effects::only_in_tx(vec![TxEffect::Settle {
                charge: Some(AttemptCharge { attempt: 1, run_millis: 3_000 })
            }])
        );
    }

    #[test]
    fn deadline_stop_wins_over_a_later_cancel() {
        let j = step(&job_in(JobPhase::Running, 0), Event::DeadlineExceeded, at(63)).job;
        let o = step(&j, Event::Cancel, at(64));
        assert_eq!(o.effects, Effects::default());
        assert!(o.job.cancel_requested);
        let (j, _) = exit_and_publish(&o.job, 137, false, 65);
        assert_eq!(j.phase, JobPhase::TimedOut);
    }

    // Contract row: SUCCEEDED or CANCELLED, or already being cancelled | cancel
    // | unchanged.
    #[test]
    fn cancel_on_finished_or_cancelling_job_changes_nothing() {
        let (succeeded, _) = exit_and_publish(&job_in(JobPhase::Running, 0), 0, false, 10);
        let cancelled = step(&job_in(JobPhase::Queued, 0), Event::Cancel, at(5)).job;
        let cancelling = step(&job_in(JobPhase::Running, 0), Event::Cancel, at(5)).job;
        for j in [succeeded, cancelled, cancelling] {
            let o = step(&j, Event::Cancel, at(50));
            assert_eq!((o.job, o.effects), (j, Effects::default()));
        }
    }

    // Contract row: FAILED or TIMED_OUT | cancel | keeps its phase |
    // cancellation recorded; stops a replay still to come.
    #[test]
    fn cancel_on_failed_or_timed_out_records_and_stops_replay() {
        let (failed, _) = exit_and_publish(&job_in(JobPhase::Running, 0), 1, false, 10);
        let o = step(&failed, Event::Cancel, at(20));
        assert_eq!(o.job.phase, JobPhase::Failed);
        assert!(o.job.cancel_requested);
        assert_eq!(o.effects, Effects::default());

        let j = step(&job_in(JobPhase::Running, 0), Event::DeadlineExceeded, at(63)).job;
        let (timed_out, _) = exit_and_publish(&j, 137, false, 64);
        let o = step(&timed_out, Event::Cancel, at(70));
        assert_eq!(o.job.phase, JobPhase::TimedOut);
        assert!(o.job.cancel_requested);

        let evicted = step(&job_in(JobPhase::Provisioning, 2), Event::Evicted, at(5));
        assert_eq!(evicted.effects, Effects::only_after_commit(vec![OutsideEffect::ReplayDue]));
        let o = step(&evicted.job, Event::Cancel, at(6));
        assert_eq!(o.job.phase, JobPhase::Failed);
        assert_eq!(o.effects, Effects::only_in_tx(vec![TxEffect::Settle { charge: None }]));
        assert!(!o.job.replay_pending());
        assert!(matches!(apply(&o.job, Event::Replay, at(7)), Err(TransitionError::NotAllowed { .. })));
    }

    #[test]
    fn cancel_while_publishing_keeps_the_result_and_stops_replay() {
        let o = step(&job_in(JobPhase::Running, 0), Event::ContainerExited { exit_code: 0, oom_killed: false }, at(10));
        let o = step(&o.job, Event::Cancel, at(11));
        assert_eq!((o.job.phase, o.effects.clone()), (JobPhase::Publishing, Effects::default()));
        let o = step(&o.job, Event::Published { log_available: true }, at(12));
        assert_eq!(o.job.phase, JobPhase::Succeeded);

        let o = step(&job_in(JobPhase::Running, 3), Event::Evicted, at(10));
        let o = step(&o.job, Event::Cancel, at(11));
        let o = step(&o.job, Event::Published { log_available: true }, at(12));
        assert_eq!(o.job.phase, JobPhase::Failed);
        assert_eq!(o.effects, Effects::only_in_tx(vec![TxEffect::Settle { charge: None }]));
    }

    // Contract row: a failed or timed-out job | retry | retryable | new
    // attempt queued | new reservation.
    #[test]
    fn retry_of_failed_or_timed_out_queues_a_new_reserved_attempt() {
        let (failed, _) = exit_and_publish(&job_in(JobPhase::Running, 2), 1, false, 10);
        let o = step(&failed, Event::Retry, at(20));
        assert_eq!(o.job.phase, JobPhase::Queued);
        assert_eq!(o.job.attempt_number(), 2);
        assert_eq!(o.job.attempts[1].funding, Funding::Reservation);
        assert_eq!(o.effects, Effects::only_in_tx(vec![TxEffect::Reserve { attempt: 2 }]));
        assert!(o.job.reservation_open);
        assert_eq!(o.job.phase_timestamps, BTreeMap::from([(JobPhase::Accepted, T0), (JobPhase::Queued, at(20))]));

        let j = step(&job_in(JobPhase::Running, 0), Event::DeadlineExceeded, at(63)).job;
        let (timed_out, _) = exit_and_publish(&j, 137, false, 64);
        assert_eq!(
            step(&timed_out, Event::Retry, at(70)).effects,
            Effects::only_in_tx(vec![TxEffect::Reserve { attempt: 2 }])
        );

        // A job whose evictions used up its replays is FAILED and retryable,
        // and the retry gets a fresh count of replays.
        let evicted = step(&job_in(JobPhase::Running, 0), Event::Evicted, at(5)).job;
        let evicted = step(&evicted, Event::Published { log_available: true }, at(6)).job;
        let o = step(&evicted, Event::Retry, at(7));
        assert_eq!(o.job.replays_used, 0);

        // A cancellation recorded after the failure does not block a retry;
        // the retry clears it.
        let recorded = step(&failed, Event::Cancel, at(30)).job;
        let o = step(&recorded, Event::Retry, at(31));
        assert!(!o.job.cancel_requested);
    }

    #[test]
    fn retry_elsewhere_is_not_retryable() {
        let (succeeded, _) = exit_and_publish(&job_in(JobPhase::Running, 0), 0, false, 10);
        let cancelled = step(&job_in(JobPhase::Queued, 0), Event::Cancel, at(5)).job;
        let mut jobs = vec![succeeded, cancelled];
        for p in [JobPhase::Accepted, JobPhase::Queued, JobPhase::Provisioning, JobPhase::Running] {
            jobs.push(job_in(p, 0));
        }
        jobs.push(
            step(&job_in(JobPhase::Running, 0), Event::ContainerExited { exit_code: 1, oom_killed: false }, at(9)).job,
        );
        for j in jobs {
            assert_eq!(
                apply(&j, Event::Retry, at(99)),
                Err(TransitionError::Refused(ApiError::JobNotRetryable)),
                "{:?}",
                j.phase
            );
        }
    }

    #[test]
    fn events_out_of_place_are_refused() {
        let accepted = Job::new(0, 60, T0);
        assert_eq!(
            apply(&accepted, Event::ContainerStarted, T0),
            Err(TransitionError::NotAllowed { phase: "ACCEPTED", event: "container started" })
        );
        let queued = job_in(JobPhase::Queued, 0);
        assert!(apply(&queued, Event::Enqueue, T0).is_err());
        assert!(apply(&queued, Event::ContainerExited { exit_code: 0, oom_killed: false }, T0).is_err());
        assert!(apply(&queued, Event::Evicted, T0).is_err());
        let provisioning = job_in(JobPhase::Provisioning, 0);
        assert!(apply(&provisioning, Event::ContainerExited { exit_code: 0, oom_killed: false }, T0).is_err());
        assert!(apply(&provisioning, Event::DeadlineExceeded, at(999)).is_err());
        assert!(apply(&job_in(JobPhase::Running, 0), Event::Published { log_available: true }, T0).is_err());
    }

    #[test]
    fn job_serializes_with_contract_phase_names() {
        let j = job_in(JobPhase::Running, 0);
        let v = serde_json::to_value(&j).unwrap();
        assert_eq!(v["phase"], "RUNNING");
        assert_eq!(v["phaseTimestamps"]["ACCEPTED"], "1970-01-01T00:16:40.000Z");
        assert_eq!(v["attempts"][0]["phaseTimestamps"]["RUNNING"], at(3).to_iso());
        let back: Job = serde_json::from_value(v).unwrap();
        assert_eq!(back, j);
    }

    fn arb_event() -> impl Strategy<Value = Event> {
        prop_oneof![
            Just(Event::Enqueue),
            Just(Event::Provision),
            Just(Event::ContainerStarted),
            Just(Event::StartFailed),
            (0i32..3, any::<bool>())
                .prop_map(|(exit_code, oom_killed)| Event::ContainerExited { exit_code, oom_killed }),
            Just(Event::DeadlineExceeded),
            Just(Event::Evicted),
            Just(Event::Evicted),
            Just(Event::Lost),
            any::<bool>().prop_map(|log_available| Event::Published { log_available }),
            Just(Event::Replay),
            Just(Event::Replay),
            Just(Event::Cancel),
            Just(Event::Retry),
        ]
    }

    proptest! {
        /// Whatever happens: attempts only grow, a finished attempt never
        /// changes, replays stay within `retries`, nothing is replayed after a
        /// cancel, every reservation is settled exactly once, and the phase
        /// always agrees with the current attempt.
        #[test]
        fn job_invariants(
            retries in 0u32..=3,
            events in proptest::collection::vec((arb_event(), 0i64..40_000), 0..80),
        ) {
            let mut job = Job::new(retries, 30, T0);
            let mut now = T0;
            let (mut reservations, mut settlements) = (1, 0);
            for (e, dt) in events {
                now = now.plus_ms(dt);
                let before = job.clone();
                let Ok(o) = apply(&job, e.clone(), now) else { continue };
                job = o.job;
                for fx in &o.effects.in_tx {
                    match fx {
                        TxEffect::Reserve { .. } => reservations += 1,
                        TxEffect::Settle { charge } => {
                            settlements += 1;
                            if let Some(c) = charge {
                                prop_assert!(c.run_millis >= 0);
                                prop_assert!(c.run_millis <= 30_000, "charged past the deadline: {c:?}");
                                let a = &job.attempts[c.attempt as usize - 1];
                                prop_assert!(a.termination.as_ref().unwrap().reason.is_charged());
                            }
                        }
                    }
                }
                prop_assert!(job.attempts.len() >= before.attempts.len());
                for (old, new) in before.attempts.iter().zip(&job.attempts) {
                    if old.phase.is_finished() {
                        prop_assert_eq!(old, new);
                    }
                    if old.termination.is_some() {
                        prop_assert_eq!(&old.termination, &new.termination);
                    }
                }
                prop_assert!(job.replays_used <= job.retries);
                if before.cancel_requested && e != Event::Retry {
                    prop_assert_eq!(job.attempts.len(), before.attempts.len());
                }
                prop_assert_eq!(reservations, settlements + i32::from(job.reservation_open));
                prop_assert!(settlements <= reservations);
                for (i, a) in job.attempts.iter().enumerate() {
                    prop_assert_eq!(a.number as usize, i + 1);
                    prop_assert_eq!(a.termination.is_some(), a.phase == JobPhase::Publishing || a.phase.is_finished());
                }
                // What the machine says is due, it accepts at its due time.
                if let Some(due) = job.next_due() {
                    prop_assert!(apply(&job, due.event.clone(), due.at).is_ok(), "{due:?} refused in {:?}", job.phase);
                }
                match job.current_attempt() {
                    Some(a) => prop_assert_eq!(a.phase, job.phase),
                    None => prop_assert!(matches!(job.phase, JobPhase::Accepted | JobPhase::Cancelled)),
                }
                if job.phase.is_finished() && !job.replay_pending() {
                    prop_assert!(!job.reservation_open);
                }
            }
        }
    }
}
