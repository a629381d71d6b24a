//! The browser session state machine, as pure transitions.
//!
//! ```text
//!          ready (first ready moment recorded: the meter starts)
//! pending ───────────► running
//!    │                    │
//!    └──── release | expiry | loss ────► ended   (settle once: ready time)
//! ```
//!
//! Settlement: the charge covers ready time only, from the first ready
//! moment to the end, capped at `expiresAt`; a session never ready costs
//! nothing. The amount is `pricing::session_charge_micros(ready_millis,
//! reserved)`; the rest of the reservation is released.
//!
//! Deadlines: a live session falls due at `next_due` (its expiry, and while
//! pending its launch deadline); the server stores that time with the
//! session and fires it whichever task or process is alive.

use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::time::Millis;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionStatus {
    Pending,
    Running,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Pending => "pending",
            SessionStatus::Running => "running",
        }
    }

    pub fn parse(s: &str) -> Option<SessionStatus> {
        [SessionStatus::Pending, SessionStatus::Running].into_iter().find(|x| x.as_str() == s)
    }
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndCause {
    /// DELETE /sessions/{sessionId}.
    Released,
    /// `expiresAt` passed.
    Expired,
    /// The browser died or could not be reached.
    Lost,
}

impl EndCause {
    pub fn as_str(self) -> &'static str {
        match self {
            EndCause::Released => "released",
            EndCause::Expired => "expired",
            EndCause::Lost => "lost",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ended {
    pub cause: EndCause,
    pub at: Millis,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub status: SessionStatus,
    pub created_at: Millis,
    pub expires_at: Millis,
    /// The first ready moment; the meter runs from here.
    pub ready_at: Option<Millis>,
    pub ended: Option<Ended>,
}

impl Session {
    /// A session just leased by POST /sessions.
    pub fn new(created_at: Millis, ttl_minutes: u32) -> Session {
        Session {
            status: SessionStatus::Pending,
            created_at,
            expires_at: created_at.plus_ms(i64::from(ttl_minutes) * 60_000),
            ready_at: None,
            ended: None,
        }
    }

    /// Ready time up to `end`, capped at `expiresAt`; 0 if never ready.
    pub fn ready_millis(&self, end: Millis) -> i64 {
        match self.ready_at {
            Some(r) => (end.min(self.expires_at).0 - r.0).max(0),
            None => 0,
        }
    }

    pub fn is_live(&self) -> bool {
        self.ended.is_none()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The browser is ready (its attestation is filled).
    Ready,
    /// DELETE /sessions/{sessionId}.
    Release,
    /// `expiresAt` passed (fired from the session's due time, `next_due`).
    Expire,
    /// The browser died or could not be reached.
    Lose,
}

fn event_name(e: Event) -> &'static str {
    match e {
        Event::Ready => "ready",
        Event::Release => "release",
        Event::Expire => "expire",
        Event::Lose => "lose",
    }
}

/// An effect written in the transaction that applies the event: a failure
/// rolls the whole step back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxEffect {
    /// Reserve the whole lifetime's price with the lease (`lease`).
    Reserve,
    /// Settle the reservation: charge `ready_millis` of ready time, release
    /// the rest.
    Settle { ready_millis: i64 },
}

/// An effect carried out once that transaction committed, outside the
/// database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutsideEffect {
    /// Start the leased session's browser on the node it was placed on
    /// (here, or by telling that node).
    StartBrowser,
    /// Stop the browser and revoke the cdpUrl's token.
    StopBrowser,
}

/// What a transition asks of the driver, split by when it happens: the
/// driver has one exhaustive executor per half, so a new effect is placed
/// in one half here and does not compile until that half executes it,
/// like this pair of executors, each matching only its own half:
///
/// ```
/// use grid_core::session::{OutsideEffect, TxEffect};
/// fn execute_in_tx(e: &TxEffect) -> i64 {
///     match e {
///         TxEffect::Reserve => 0,
///         TxEffect::Settle { ready_millis } => *ready_millis,
///     }
/// }
/// fn execute_after_commit(e: &OutsideEffect) -> &'static str {
///     match e {
///         OutsideEffect::StartBrowser => "start",
///         OutsideEffect::StopBrowser => "stop",
///     }
/// }
/// # let _ = (execute_in_tx, execute_after_commit);
/// ```
///
/// A half that leaves an effect unhandled, as an executor does once a
/// variant is added here, fails to compile (E0004, non-exhaustive match):
///
/// ```compile_fail,E0004
/// use grid_core::session::TxEffect;
/// fn execute_in_tx(e: &TxEffect) -> i64 {
///     match e {
///         TxEffect::Settle { ready_millis } => *ready_millis,
///     }
/// }
/// ```
pub type Effects = crate::effects::Effects<TxEffect, OutsideEffect>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub session: Session,
    pub effects: Effects,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("event {event} is not allowed in status {status}")]
    NotAllowed { status: &'static str, event: &'static str },
    #[error("session does not expire before {0:?}")]
    NotDue(Millis),
    #[error(transparent)]
    Refused(#[from] ApiError),
}

/// The machine's first step: a session leased by POST /sessions at
/// `created_at`, pending, its whole lifetime reserved in the transaction
/// that stores it, its browser started once that commits.
pub fn lease(created_at: Millis, ttl_minutes: u32) -> Outcome {
    Outcome {
        session: Session::new(created_at, ttl_minutes),
        effects: Effects { in_tx: vec![TxEffect::Reserve], after_commit: vec![OutsideEffect::StartBrowser] },
    }
}

/// Applies one event. Pure: `now` is an input.
pub fn apply(session: &Session, event: Event, now: Millis) -> Result<Outcome, TransitionError> {
    let not_allowed = |status: &'static str| TransitionError::NotAllowed { status, event: event_name(event) };
    if session.ended.is_some() {
        return Err(match event {
            Event::Release => ApiError::UnknownSession.into(),
            _ => not_allowed("ended"),
        });
    }
    let mut next = session.clone();
    let end = |next: &mut Session, cause: EndCause, at: Millis| {
        next.ended = Some(Ended { cause, at });
        Effects {
            in_tx: vec![TxEffect::Settle { ready_millis: session.ready_millis(at) }],
            after_commit: vec![OutsideEffect::StopBrowser],
        }
    };
    let effects = match (session.status, event) {
        (SessionStatus::Pending, Event::Ready) if now < session.expires_at => {
            next.status = SessionStatus::Running;
            next.ready_at = Some(now);
            Effects::default()
        }
        (SessionStatus::Pending, Event::Ready) => return Err(not_allowed("expired")),
        // Later ready signals (a re-attestation) keep the first moment.
        (SessionStatus::Running, Event::Ready) => Effects::default(),
        (_, Event::Release) => end(&mut next, EndCause::Released, now),
        (_, Event::Expire) if now < session.expires_at => return Err(TransitionError::NotDue(session.expires_at)),
        (_, Event::Expire) => end(&mut next, EndCause::Expired, session.expires_at),
        (_, Event::Lose) => end(&mut next, EndCause::Lost, now),
    };
    Ok(Outcome { session: next, effects })
}

/// Longest a pending session may take to become ready, from its lease: a
/// cold Chromium start (the server gives its first DevTools answer 30 s)
/// plus the attestation (30 s), with 30 s to spare for a busy machine. A
/// session still pending then is lost, even when the task launching it is
/// gone.
pub const LAUNCH_DEADLINE_MS: i64 = 90_000;

/// A session's next deadline: when it falls due and what happens then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    pub at: Millis,
    pub event: Event,
}

/// The next deadline of a live session: its expiry, and while pending the
/// launch deadline when that comes first. `None` once ended. Applying
/// `event` at `at` is always allowed.
pub fn next_due(session: &Session) -> Option<Due> {
    if session.ended.is_some() {
        return None;
    }
    let expiry = Due { at: session.expires_at, event: Event::Expire };
    Some(match session.status {
        SessionStatus::Running => expiry,
        SessionStatus::Pending => {
            let launch = session.created_at.plus_ms(LAUNCH_DEADLINE_MS);
            if launch < session.expires_at {
                Due { at: launch, event: Event::Lose }
            } else {
                expiry
            }
        }
    })
}

/// How a session left live by a server that stopped without ending it
/// ends, given the last moment that server is known to have been alive
/// (its last settlement heartbeat). A deadline that fell while it was alive
/// fires as it would have (an expiry at `expiresAt`, a missed launch
/// deadline); otherwise the browser died with the server and the session
/// is lost at the last moment known alive: the heartbeat, or the session's
/// own ready or lease moment when that is later (the server wrote it).
pub fn after_stop(session: &Session, last_alive: Millis) -> Due {
    let known_alive = last_alive.max(session.ready_at.unwrap_or(session.created_at));
    match next_due(session) {
        Some(due) if due.at <= known_alive => due,
        _ => Due { at: known_alive, event: Event::Lose },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pricing::{session_charge_micros, session_reservation_micros};
    use proptest::prelude::*;

    const T0: Millis = Millis(1_795_000_000_000);

    fn at(s: i64) -> Millis {
        T0.plus_ms(s * 1_000)
    }

    /// The effects of an end settling `ready_millis`.
    fn ended(ready_millis: i64) -> Effects {
        Effects { in_tx: vec![TxEffect::Settle { ready_millis }], after_commit: vec![OutsideEffect::StopBrowser] }
    }

    fn step(s: &Session, e: Event, now: Millis) -> Outcome {
        apply(s, e, now).unwrap_or_else(|err| panic!("{e:?}: {err}"))
    }

    #[test]
    fn new_session_is_pending_until_expiry() {
        let s = Session::new(T0, 30);
        assert_eq!(s.status, SessionStatus::Pending);
        assert_eq!(s.expires_at, at(1_800));
        assert_eq!(s.ready_millis(at(100)), 0);
        assert!(s.is_live());
    }

    #[test]
    fn lease_reserves_in_the_transaction_and_starts_the_browser_after_it() {
        let o = lease(T0, 30);
        assert_eq!(o.session, Session::new(T0, 30));
        assert_eq!(
            o.effects,
            Effects { in_tx: vec![TxEffect::Reserve], after_commit: vec![OutsideEffect::StartBrowser] }
        );
        // Its first due time is the launch deadline, stored with the lease.
        assert_eq!(next_due(&o.session).map(|d| d.event), Some(Event::Lose));
    }

    #[test]
    fn ready_starts_the_meter_once() {
        let s = step(&Session::new(T0, 30), Event::Ready, at(20)).session;
        assert_eq!((s.status, s.ready_at), (SessionStatus::Running, Some(at(20))));
        let again = step(&s, Event::Ready, at(50));
        assert_eq!((again.session.clone(), again.effects), (s, Effects::default()));
    }

    #[test]
    fn release_charges_ready_time_only() {
        let s = step(&Session::new(T0, 30), Event::Ready, at(20)).session;
        let o = step(&s, Event::Release, at(80));
        assert_eq!(o.session.ended, Some(Ended { cause: EndCause::Released, at: at(80) }));
        assert_eq!(o.effects, ended(60_000));
        // One minute at 0.07 €/h.
        assert_eq!(session_charge_micros(60_000, session_reservation_micros(30)), 1_167);
        // Releasing twice: the session is gone.
        assert_eq!(apply(&o.session, Event::Release, at(81)), Err(TransitionError::Refused(ApiError::UnknownSession)));
    }

    #[test]
    fn never_ready_costs_nothing() {
        for e in [Event::Release, Event::Lose] {
            let o = step(&Session::new(T0, 30), e, at(100));
            assert_eq!(o.effects, ended(0));
        }
        let o = step(&Session::new(T0, 1), Event::Expire, at(60));
        assert_eq!(o.effects.in_tx[0], TxEffect::Settle { ready_millis: 0 });
    }

    #[test]
    fn expiry_is_capped_at_expires_at() {
        let s = step(&Session::new(T0, 1), Event::Ready, at(10)).session;
        assert_eq!(apply(&s, Event::Expire, at(59)), Err(TransitionError::NotDue(at(60))));
        // Noticed late (after a restart, say); the meter stops at expiresAt.
        let o = step(&s, Event::Expire, at(85));
        assert_eq!(o.session.ended, Some(Ended { cause: EndCause::Expired, at: at(60) }));
        assert_eq!(o.effects.in_tx[0], TxEffect::Settle { ready_millis: 50_000 });
        // A loss noticed after expiry is capped the same way.
        let o = step(&s, Event::Lose, at(90));
        assert_eq!(o.effects.in_tx[0], TxEffect::Settle { ready_millis: 50_000 });
    }

    #[test]
    fn ready_after_expiry_and_events_after_end_are_refused() {
        let s = Session::new(T0, 1);
        assert_eq!(
            apply(&s, Event::Ready, at(60)),
            Err(TransitionError::NotAllowed { status: "expired", event: "ready" })
        );
        let ended = step(&s, Event::Lose, at(5)).session;
        for e in [Event::Ready, Event::Expire, Event::Lose] {
            assert_eq!(
                apply(&ended, e, at(6)),
                Err(TransitionError::NotAllowed { status: "ended", event: event_name(e) })
            );
        }
    }

    #[test]
    fn a_pending_session_falls_due_at_its_launch_deadline_then_at_expiry() {
        let s = Session::new(T0, 30);
        let launch = T0.plus_ms(LAUNCH_DEADLINE_MS);
        assert_eq!(next_due(&s), Some(Due { at: launch, event: Event::Lose }));
        // Lost at the launch deadline: never ready, so free.
        let o = step(&s, Event::Lose, launch);
        assert_eq!(o.session.ended, Some(Ended { cause: EndCause::Lost, at: launch }));
        assert_eq!(o.effects, ended(0));
        assert_eq!(next_due(&o.session), None);
        // Once running, only the expiry is due.
        let running = step(&s, Event::Ready, at(20)).session;
        assert_eq!(next_due(&running), Some(Due { at: at(1_800), event: Event::Expire }));
    }

    #[test]
    fn a_short_pending_session_falls_due_at_expiry_first() {
        // 1 minute lease: expiry (60 s) comes before the launch deadline (90 s).
        let s = Session::new(T0, 1);
        assert_eq!(next_due(&s), Some(Due { at: at(60), event: Event::Expire }));
        let o = step(&s, Event::Expire, at(60));
        assert_eq!(o.session.ended, Some(Ended { cause: EndCause::Expired, at: at(60) }));
    }

    #[test]
    fn after_a_stop_deadlines_passed_while_alive_fire_and_the_rest_is_lost_at_the_last_known_moment() {
        let running = step(&Session::new(T0, 1), Event::Ready, at(10)).session;
        // Alive past expiresAt: the expiry would have fired.
        assert_eq!(after_stop(&running, at(61)), Due { at: at(60), event: Event::Expire });
        assert_eq!(after_stop(&running, at(60)), Due { at: at(60), event: Event::Expire });
        // Stopped before it: lost at the heartbeat.
        assert_eq!(after_stop(&running, at(40)), Due { at: at(40), event: Event::Lose });
        // A heartbeat older than the ready moment: the server was alive then.
        assert_eq!(after_stop(&running, at(2)), Due { at: at(10), event: Event::Lose });
        let pending = Session::new(T0, 30);
        assert_eq!(after_stop(&pending, at(5)), Due { at: at(5), event: Event::Lose });
        assert_eq!(after_stop(&pending, at(200)), Due { at: at(90), event: Event::Lose });
        assert_eq!(after_stop(&pending, T0.plus_ms(-5_000)), Due { at: T0, event: Event::Lose });
    }

    #[test]
    fn status_names() {
        for s in [SessionStatus::Pending, SessionStatus::Running] {
            assert_eq!(SessionStatus::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), serde_json::json!(s.as_str()));
        }
        assert_eq!(EndCause::Expired.as_str(), "expired");
    }

    fn arb_event() -> impl Strategy<Value = Event> {
        prop_oneof![Just(Event::Ready), Just(Event::Release), Just(Event::Expire), Just(Event::Lose)]
    }

    proptest! {
        /// Settled exactly once at most, for no more than the ready time
        /// within the lease, and never more than the reservation.
        #[test]
        fn session_invariants(ttl in 1u32..=240, events in proptest::collection::vec((arb_event(), 0i64..3_600_000), 0..20)) {
            let mut s = Session::new(T0, ttl);
            let reserved = session_reservation_micros(ttl);
            let mut now = T0;
            let mut settled = 0;
            for (e, dt) in events {
                now = now.plus_ms(dt);
                let before = s.clone();
                let Ok(o) = apply(&s, e, now) else { continue };
                s = o.session;
                if before.ready_at.is_some() { prop_assert_eq!(before.ready_at, s.ready_at); }
                prop_assert!(before.ended.is_none());
                for fx in o.effects.in_tx {
                    match fx {
                        TxEffect::Settle { ready_millis } => {
                            settled += 1;
                            prop_assert!(ready_millis >= 0);
                            prop_assert!(ready_millis <= i64::from(ttl) * 60_000);
                            if s.ready_at.is_none() { prop_assert_eq!(ready_millis, 0); }
                            prop_assert!(session_charge_micros(ready_millis, reserved) <= reserved);
                        }
                        // Only the lease reserves, never a later event.
                        TxEffect::Reserve => prop_assert!(false, "{:?} reserved again", e),
                    }
                }
                prop_assert_eq!(settled, i32::from(s.ended.is_some()));
                // The due event is always allowed at its due time, and no earlier than now allows.
                if let Some(d) = next_due(&s) {
                    prop_assert!(apply(&s, d.event, d.at).is_ok());
                    prop_assert!(d.at <= s.expires_at);
                }
                if let Some(r) = s.ready_at { prop_assert!(r < s.expires_at && r >= s.created_at); }
            }
        }
    }
}
