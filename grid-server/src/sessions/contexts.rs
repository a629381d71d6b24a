//! A lease's persistent context (docs/sessions.md, "Contexts"), on the
//! session's side: contexts created and deleted, a context's state opened
//! for the browser that holds it, its save points while the session lives,
//! its save at a `persist` session's end, and the context let go however
//! the task ends (`finish_context`), which wakes the leases waiting for that
//! save (`SaveWaits`, `Sessions::wait_for_save`). What the state is, and
//! how it is read from and written into a browser, is `context_state.rs`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use super::context_state;
use super::Sessions;
use crate::browser::process::BrowserProcess;
use crate::store::contexts::{self, Finish};
use crate::store::StoreError;
use crate::vault::Purpose;

/// The end of a session on its context, stored: the context free again,
/// its state saved back (or the refusal recorded) as `finish` says. A
/// failed write leaves the holder set; the next lease takes it over.
pub(super) async fn finish_context(sessions: &Sessions, context_id: &str, session: &str, finish: Finish) {
    let (c, s, at) = (context_id.to_string(), session.to_string(), sessions.driver.now());
    let kind = match &finish {
        Finish::Keep => "kept",
        Finish::Save(_) => "saved",
        Finish::Refused(_) => "refused",
    };
    // Ordered by rows: `finish` is one update fenced by the holder.
    match sessions.store.write_rows(move |tx| contexts::finish(tx, &c, &s, &finish, at)).await {
        Ok(true) => tracing::info!(context = context_id, state = kind, "context released"),
        Ok(false) => tracing::warn!(context = context_id, "the context was taken over or deleted; nothing saved"),
        Err(e) => tracing::error!(context = context_id, error = %e, "the context's end was not stored"),
    }
    // Stored or not: a waiting lease looks again (and waits on if the
    // holder is still set).
    sessions.saves.finished(context_id);
}

/// What a `persist` session's end saves: its state read from the browser,
/// sealed and held to the bound.
pub(super) async fn save_context(
    sessions: &Sessions,
    browser: &BrowserProcess,
    account: &str,
    context_id: &str,
    origins: &context_state::Origins,
) -> Finish {
    // An origin's databases may take half the bound: a site's large cache
    // is left out rather than making the whole state too big to save.
    let max = sessions.config.context_max_bytes;
    let read = tokio::time::timeout(
        context_state::STATE_TIMEOUT,
        context_state::capture(&browser.cdp, &origins.get(), max / 2, max),
    )
    .await;
    sealed_within_bound(sessions, account, context_id, read).await
}

/// A state read for a save, sealed and held to the bound; a read that
/// failed or took too long keeps the state saved before.
async fn sealed_within_bound(
    sessions: &Sessions,
    account: &str,
    context_id: &str,
    read: Result<Result<context_state::State, context_state::ReadError>, tokio::time::error::Elapsed>,
) -> Finish {
    let state = match read {
        Ok(Ok(state)) => state,
        Ok(Err(context_state::ReadError::OverBound(why))) => {
            tracing::warn!(context = context_id, reason = %why, "context save refused");
            return Finish::Refused(why);
        }
        Ok(Err(e)) => {
            tracing::warn!(context = context_id, error = %e, "the context's state could not be read; the saved one is kept");
            return Finish::Keep;
        }
        Err(_) => {
            tracing::warn!(context = context_id, "the context's state was not read in time; the saved one is kept");
            return Finish::Keep;
        }
    };
    let sealed = match sessions.vault.seal(account, Purpose::ContextState, context_id, &state.to_bytes()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(context = context_id, error = %e, "the context's state was not sealed; the saved one is kept");
            return Finish::Keep;
        }
    };
    match context_state::check_bound(sealed.len(), sessions.config.context_max_bytes) {
        Ok(()) => Finish::Save(sealed),
        Err(why) => {
            tracing::warn!(context = context_id, reason = %why, "context save refused");
            Finish::Refused(why)
        }
    }
}

/// Save points of a live `persist` session's context, every
/// `--context-save-every-secs` (docs/sessions.md, "Contexts"), so that a
/// browser lost later does not take everything since its lease with it.
/// `last` is the state as loaded, then as last stored; a state unchanged
/// since is not stored again.
pub(super) struct SavePoints {
    every: Duration,
    next: tokio::time::Instant,
    last: context_state::State,
}

impl SavePoints {
    pub(super) fn new(every: Duration, loaded: context_state::State) -> SavePoints {
        SavePoints { every, next: tokio::time::Instant::now() + every, last: loaded }
    }

    /// Resolves when the next save point is due; never without save points.
    pub(super) async fn due(points: &Option<SavePoints>) {
        match points {
            Some(p) => tokio::time::sleep_until(p.next).await,
            None => std::future::pending().await,
        }
    }

    /// One save point of session `id` on `context_id`; whether to go on
    /// (not once the session no longer holds the context).
    pub(super) async fn save(
        &mut self,
        sessions: &Sessions,
        browser: &BrowserProcess,
        account: &str,
        context_id: &str,
        id: &str,
    ) -> bool {
        self.next = tokio::time::Instant::now() + self.every;
        // Stamped with the moment the read began: the state is at least as
        // new as `savedAt` says.
        let at = sessions.driver.now();
        let read = tokio::time::timeout(
            context_state::STATE_TIMEOUT,
            context_state::save_point(&browser.cdp, &self.last, sessions.config.context_max_bytes),
        )
        .await;
        let (c, s) = (context_id.to_string(), id.to_string());
        let state = match &read {
            Ok(Ok(state)) if *state == self.last => {
                // Nothing to seal: only `savedAt` moves on.
                let stored = sessions.store.write_rows(move |tx| contexts::save_point_unchanged(tx, &c, &s, at)).await;
                return self.stored(stored, context_id, None);
            }
            Ok(Ok(state)) => Some(state.clone()),
            _ => None,
        };
        let how = sealed_within_bound(sessions, account, context_id, read).await;
        if matches!(how, Finish::Keep) {
            return true;
        }
        let stored = sessions.store.write_rows(move |tx| contexts::save_point(tx, &c, &s, &how, at)).await;
        self.stored(stored, context_id, state)
    }

    /// What a save point's write did: whether to go on.
    fn stored(
        &mut self,
        stored: Result<bool, crate::store::StoreError>,
        context_id: &str,
        state: Option<context_state::State>,
    ) -> bool {
        match stored {
            Ok(true) => {
                if let Some(state) = state {
                    self.last = state;
                }
                tracing::debug!(context = context_id, "context save point stored");
                true
            }
            Ok(false) => {
                tracing::warn!(context = context_id, "the context was taken over or deleted; no more save points");
                false
            }
            Err(e) => {
                tracing::warn!(context = context_id, error = %e, "the context's save point was not stored");
                true
            }
        }
    }
}

impl Sessions {
    /// POST /contexts: a new empty context of `account` (docs/sessions.md,
    /// "Contexts"); its id. Ordered by rows: it checks nothing.
    pub async fn create_context(&self, account: &str) -> Result<String, StoreError> {
        let (account, at) = (account.to_string(), self.driver.now());
        self.store.write_rows(move |tx| contexts::create(tx, &account, at)).await
    }

    /// DELETE /contexts/{id}: the context and its state, unless it is none
    /// of `account`'s or a live session holds it. Ordered by rows: the
    /// account's row first, as a lease taking the context locks it.
    pub async fn delete_context(&self, account: &str, id: &str) -> Result<(), contexts::ContextError> {
        let (account, id) = (account.to_string(), id.to_string());
        self.store.write_rows(move |tx| contexts::delete(tx, &account, &id)).await
    }

    /// Waits while the context's last session has ended but not yet saved
    /// it back (its end answered before its browser gave up the state), so
    /// a lease right after a release starts from what that session saved.
    /// Woken by the save when this node's session task stores it; a save
    /// stored by another node sharing a PostgreSQL store is not announced
    /// here, so the store is also looked at every `SAVE_LOOK_EVERY`. Past
    /// `SAVE_WAIT` the lease takes the context over with the state saved
    /// before (the holder's node may be dead).
    pub async fn wait_for_save(&self, context_id: &str) -> Result<(), StoreError> {
        let deadline = tokio::time::Instant::now() + SAVE_WAIT;
        // Subscribed before the store is read: a save stored between the
        // read and the wait still wakes it.
        let mut waiting = self.saves.wait(context_id);
        loop {
            let id = context_id.to_string();
            let saving = self.store.lookup(move |c| contexts::saving(c, &id)).await?;
            let now = tokio::time::Instant::now();
            if saving.is_none() || now >= deadline {
                return Ok(());
            }
            let _ = tokio::time::timeout_at(deadline.min(now + SAVE_LOOK_EVERY), waiting.saved()).await;
        }
    }

    /// Whether `account`'s context `id` opens (its state unsealed and
    /// read), for a lease to refuse one that does not before it is made;
    /// `Ok` for a context that is not the account's (the lease answers
    /// `unknown context` for it).
    pub async fn check_context(&self, account: &str, id: &str) -> Result<(), String> {
        let (a, i) = (account.to_string(), id.to_string());
        match self.store.read(move |c| contexts::owned(c, &a, &i)).await {
            Ok(true) => load_context(self, account, id).await.map(drop),
            Ok(false) => Ok(()),
            Err(e) => Err(format!("the context's state was not read: {e}")),
        }
    }
}

/// Longest a lease waits for the context's last session to save it back.
pub(super) const SAVE_WAIT: Duration = Duration::from_secs(20);

/// How often a waiting lease looks at the store for a save no notification
/// announces: one stored by another node.
const SAVE_LOOK_EVERY: Duration = Duration::from_millis(250);

/// The leases waiting for a context's save, by context id: one channel per
/// context while anyone waits on it, which `finish_context` signals.
#[derive(Default)]
pub(super) struct SaveWaits(Mutex<HashMap<String, watch::Sender<()>>>);

impl SaveWaits {
    /// A wait on `context_id`'s next save.
    pub(super) fn wait(&self, context_id: &str) -> SaveWait<'_> {
        let mut waits = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let saved = waits.entry(context_id.to_string()).or_insert_with(|| watch::channel(()).0).subscribe();
        SaveWait { waits: self, context_id: context_id.to_string(), saved }
    }

    /// Whether a lease waits on `context_id`.
    #[cfg(test)]
    pub(super) fn waiting_on(&self, context_id: &str) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).contains_key(context_id)
    }

    /// `context_id`'s holder finished: every lease waiting on it looks again.
    pub(super) fn finished(&self, context_id: &str) {
        if let Some(waits) = self.0.lock().unwrap_or_else(|p| p.into_inner()).get(context_id) {
            waits.send_replace(());
        }
    }
}

/// One lease's wait on a context's save; its channel goes with the last.
pub(super) struct SaveWait<'a> {
    waits: &'a SaveWaits,
    context_id: String,
    saved: watch::Receiver<()>,
}

impl SaveWait<'_> {
    /// Resolves at the next save signalled since the last.
    pub(super) async fn saved(&mut self) {
        // The sender lives while this receiver does (dropped only with the
        // last one, below): `changed` fails never.
        let _ = self.saved.changed().await;
    }
}

impl Drop for SaveWait<'_> {
    fn drop(&mut self) {
        let mut waits = self.waits.0.lock().unwrap_or_else(|p| p.into_inner());
        // Subscribed under this lock: only this receiver left, none is coming.
        if waits.get(&self.context_id).is_some_and(|w| w.receiver_count() == 1) {
            waits.remove(&self.context_id);
        }
    }
}

/// The state of `context_id` opened for `account` (empty before a first
/// save).
pub(super) async fn load_context(
    sessions: &Sessions,
    account: &str,
    context_id: &str,
) -> Result<(context_state::State, Vec<u8>), String> {
    let id = context_id.to_string();
    let sealed = sessions
        .store
        .read(move |c| contexts::sealed_state(c, &id))
        .await
        .map_err(|e| format!("the context's state was not read: {e}"))?;
    let Some(sealed) = sealed else {
        let empty = context_state::State::default();
        let bytes = empty.to_bytes();
        return Ok((empty, bytes));
    };
    let plain = sessions
        .vault
        .open(account, Purpose::ContextState, context_id, &sealed)
        .map_err(|e| format!("the context's state: {e}"))?;
    Ok((context_state::State::from_bytes(&plain)?, plain))
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    /// A finish wakes every wait on its context, once, and no other.
    #[test]
    fn a_finish_wakes_the_waits_on_its_context_only() {
        let waits = SaveWaits::default();
        let (mut a, mut b, mut other) = (waits.wait("ctx_a"), waits.wait("ctx_a"), waits.wait("ctx_b"));
        assert!(a.saved().now_or_never().is_none(), "nothing saved yet");
        waits.finished("ctx_a");
        assert!(a.saved().now_or_never().is_some());
        assert!(b.saved().now_or_never().is_some());
        assert!(other.saved().now_or_never().is_none(), "another context's wait sleeps on");
        assert!(a.saved().now_or_never().is_none(), "woken once per finish");
    }

    /// A finish with nobody waiting keeps nothing; a wait's channel goes
    /// with its last wait, not before.
    #[test]
    fn a_context_s_channel_lives_while_a_lease_waits_on_it() {
        let waits = SaveWaits::default();
        waits.finished("ctx_a");
        assert!(!waits.waiting_on("ctx_a"));
        let (a, b) = (waits.wait("ctx_a"), waits.wait("ctx_a"));
        drop(a);
        assert!(waits.waiting_on("ctx_a"));
        drop(b);
        assert!(!waits.waiting_on("ctx_a"));
    }
}
