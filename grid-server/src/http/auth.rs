//! Credential checks: an API key (`x-api-key`, or `Authorization: Bearer`
//! with the key, since many MCP clients can set only a bearer token), or
//! `Authorization: Bearer` with a sign-in token. A key is told from a token
//! by its `grid_` prefix (a JWT starts with `eyJ`). A check that cannot read
//! the account database in time answers 503 accounting_unavailable: nothing
//! was done, resending is safe.
//!
//! Checked keys are kept in memory (`KeyCache`), so a request does not look
//! its key up in the database each time; what keeps that correct is the
//! credentials generation every request reads (docs/accounts-and-keys.md).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use grid_core::error::ApiError;
use grid_core::time::Millis;
use hyper::HeaderMap;
use tokio::sync::oneshot;

use crate::app::App;
use crate::clock::Clock;
use crate::store::accounts::{self, Caller};
use crate::store::{ReadConn, Store, StoreError, StoreResult};

/// `audience` is the resource the request is for: the base URL, or the
/// base URL + `/mcp` on the MCP endpoint.
pub async fn authenticate(app: &App, keys: &KeyCache, headers: &HeaderMap, audience: &str) -> Result<Caller, ApiError> {
    if let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        if !key.starts_with(accounts::KEY_PREFIX) {
            return Err(ApiError::Unauthorized);
        }
        return key_caller(app, keys, key).await;
    }
    let bearer = headers
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    let Some(token) = bearer else { return Err(ApiError::Unauthorized) };
    if token.starts_with(accounts::KEY_PREFIX) {
        return key_caller(app, keys, token).await;
    }
    let identity = app.tokens.verify(token, audience).await.map_err(|e| {
        tracing::info!(error = %e, "bearer token refused");
        ApiError::Unauthorized
    })?;
    let (issuer, subject) = (identity.issuer.clone(), identity.subject.clone());
    let found = within_deadline(app, app.store.read(move |c| accounts::account_for_identity(c, &issuer, &subject)));
    match found.await? {
        // A valid sign-in with no account, or a suspended one: accept the
        // invitation first, or use a key.
        None | Some((_, true)) => Err(ApiError::Forbidden),
        Some((account_id, false)) => Ok(Caller { account_id, ..Default::default() }),
    }
}

async fn key_caller(app: &App, keys: &KeyCache, key: &str) -> Result<Caller, ApiError> {
    within_deadline(app, keys.caller(key)).await?.ok_or(ApiError::Unauthorized)
}

/// Runs a read of the account database within the accounting deadline.
async fn within_deadline<R>(app: &App, read: impl Future<Output = StoreResult<R>>) -> Result<R, ApiError> {
    match tokio::time::timeout(app.config.accounting_timeout, read).await {
        Err(_) | Ok(Err(StoreError::Busy)) => {
            crate::metrics::get().credential_timeouts.inc();
            Err(ApiError::AccountingUnavailable)
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "credential check failed");
            Err(ApiError::AccountingUnavailable)
        }
        Ok(Ok(r)) => Ok(r),
    }
}

/// How long a checked key is used before it is looked up again. Changes
/// made through grid-server (`key revoke`, `account suspend`/`resume`) are
/// seen on the next request through the credentials generation; this
/// bounds only changes made to the database behind its back.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(10);
/// Checked keys held at most (only keys that exist are held); when full,
/// the cache starts over.
const KEY_CACHE_ENTRIES: usize = 10_000;

/// API keys that checked out, by their hash, with the credentials
/// generation they were checked under. Every request reads the generation
/// from the store, in a read that starts after the request arrived
/// (requests arriving together share one read): a key revoked or an
/// account suspended before the request, by any process or node, changed
/// it in the same transaction, so the request finds the cache dropped and
/// looks its key up again.
pub struct KeyCache {
    store: Store,
    clock: Arc<dyn Clock>,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    entries: Mutex<Entries>,
    reads: Mutex<GenerationReads>,
    /// Keys looked up in the store (not found in the cache).
    #[cfg(test)]
    lookups: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct Entries {
    /// The generation every entry was checked under; `None`: none yet.
    generation: Option<String>,
    keys: HashMap<String, (Caller, Millis)>,
}

/// Requests waiting for a read of the generation that starts after they
/// arrived, and whether a task is reading for them.
#[derive(Default)]
struct GenerationReads {
    reading: bool,
    waiting: Vec<oneshot::Sender<Result<String, Failed>>>,
}

/// A failed generation read, as each waiting request reports it.
#[derive(Debug, Clone, Copy)]
enum Failed {
    Busy,
    Other,
}

impl KeyCache {
    pub fn new(store: Store, clock: Arc<dyn Clock>) -> KeyCache {
        KeyCache { store, clock, shared: Arc::default() }
    }

    /// The caller behind `api_key` (`None`: unknown, revoked, or of a
    /// suspended account), as `accounts::caller_for_key` answers it now.
    pub async fn caller(&self, api_key: &str) -> StoreResult<Option<Caller>> {
        let hash = accounts::key_hash(api_key);
        let generation = self.generation().await?;
        let now = self.clock.now();
        {
            let mut entries = lock(&self.shared.entries);
            if entries.generation.as_deref() != Some(generation.as_str()) {
                entries.keys.clear();
                entries.generation = Some(generation.clone());
            }
            if let Some((caller, checked)) = entries.keys.get(&hash) {
                if now.0.saturating_sub(checked.0) < KEY_CACHE_TTL.as_millis() as i64 {
                    return Ok(Some(caller.clone()));
                }
            }
        }
        #[cfg(test)]
        self.shared.lookups.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let h = hash.clone();
        let found = self.store.lookup(move |c| accounts::caller_for_key_hash(c, &h)).await?;
        if let Some(caller) = &found {
            let mut entries = lock(&self.shared.entries);
            // Kept only under the generation read before the lookup: if it
            // moved on meanwhile, the lookup may predate the change.
            if entries.generation.as_deref() == Some(generation.as_str()) {
                if entries.keys.len() >= KEY_CACHE_ENTRIES {
                    entries.keys.clear();
                }
                entries.keys.insert(hash, (caller.clone(), now));
            }
        }
        Ok(found)
    }

    /// The credentials generation, from a store read that starts after this
    /// call: one task reads it for every request waiting when its read
    /// starts, so a burst of requests costs one read, not one each.
    async fn generation(&self) -> StoreResult<String> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut reads = lock(&self.shared.reads);
            reads.waiting.push(tx);
            !std::mem::replace(&mut reads.reading, true)
        };
        if start {
            tokio::spawn(read_generations(self.store.clone(), self.shared.clone()));
        }
        match rx.await {
            Ok(Ok(generation)) => Ok(generation),
            Ok(Err(Failed::Busy)) => Err(StoreError::Busy),
            Ok(Err(Failed::Other)) => Err(StoreError::Task("credentials generation unreadable".into())),
            Err(_) => Err(StoreError::Task("credentials generation read abandoned".into())),
        }
    }
}

/// Reads the generation for the requests waiting, round after round, until
/// none wait.
async fn read_generations(store: Store, shared: Arc<Shared>) {
    // Whatever ends this task, the next request starts another.
    struct Done(Arc<Shared>);
    impl Drop for Done {
        fn drop(&mut self) {
            lock(&self.0.reads).reading = false;
        }
    }
    let _done = Done(shared.clone());
    loop {
        let waiting = {
            let mut reads = lock(&shared.reads);
            if reads.waiting.is_empty() {
                reads.reading = false;
                return;
            }
            std::mem::take(&mut reads.waiting)
        };
        // Starts after every request taken above arrived.
        let read = store.lookup(|c: &ReadConn| accounts::credentials_generation(c)).await.map_err(|e| match e {
            StoreError::Busy => Failed::Busy,
            other => {
                tracing::error!(error = %other, "credentials generation unreadable");
                Failed::Other
            }
        });
        for w in waiting {
            let _ = w.send(read.clone());
        }
    }
}

/// A poisoned lock only means a request panicked holding it; the entries
/// are whole (every change is one insert or clear).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::clock::VirtualClock;

    const T0: Millis = Millis(1_700_000_000_000);

    struct Fixture {
        _dir: tempfile::TempDir,
        /// The server's store, and a second one on the same file: another
        /// process (the admin subcommands).
        store: Store,
        admin: Store,
        clock: Arc<VirtualClock>,
        cache: KeyCache,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Duration::from_secs(1)).unwrap();
        let admin = Store::open(dir.path(), Duration::from_secs(1)).unwrap();
        let clock = Arc::new(VirtualClock::at(T0));
        let cache = KeyCache::new(store.clone(), clock.clone());
        Fixture { _dir: dir, store, admin, clock, cache }
    }

    impl Fixture {
        fn key(&self, internal: bool) -> accounts::NewKey {
            self.admin
                .write_blocking(|tx| {
                    let id = accounts::create_account(tx, "t", 1_000, T0)?;
                    accounts::create_key(tx, &id, Some(7), internal, Default::default(), T0)
                })
                .unwrap()
        }

        fn lookups(&self) -> u64 {
            self.cache.shared.lookups.load(Ordering::SeqCst)
        }
    }

    #[tokio::test]
    async fn a_checked_key_is_served_from_memory_as_the_store_answers_it() {
        let f = fixture();
        let key = f.key(false);
        let first = f.cache.caller(&key.api_key).await.unwrap().unwrap();
        assert_eq!(first.account_id, key.account_id);
        assert_eq!(first.key_id.as_deref(), Some(key.key_id.as_str()));
        assert_eq!(first.daily_cap_micros, Some(7));
        for _ in 0..5 {
            let again = f.cache.caller(&key.api_key).await.unwrap().unwrap();
            assert_eq!((again.account_id, again.key_id), (first.account_id.clone(), first.key_id.clone()));
        }
        assert_eq!(f.lookups(), 1, "one lookup, then the cache");
        // Unknown keys are looked up every time (never held).
        for _ in 0..2 {
            assert!(f.cache.caller("grid_unknown").await.unwrap().is_none());
        }
        assert_eq!(f.lookups(), 3);
    }

    #[tokio::test]
    async fn a_revocation_by_another_process_is_honoured_on_the_next_request() {
        let f = fixture();
        let (key, other) = (f.key(false), f.key(false));
        assert!(f.cache.caller(&key.api_key).await.unwrap().is_some());
        assert!(f.cache.caller(&other.api_key).await.unwrap().is_some());
        f.admin.write_blocking(|tx| accounts::revoke_key(tx, &key.key_id, T0)).unwrap();
        assert!(f.cache.caller(&key.api_key).await.unwrap().is_none(), "a revoked key was still accepted");
        assert!(f.cache.caller(&other.api_key).await.unwrap().is_some(), "another key is untouched");
    }

    #[tokio::test]
    async fn a_suspension_and_its_end_are_honoured_on_the_next_request() {
        let f = fixture();
        let (key, internal) = (f.key(false), f.key(true));
        assert!(f.cache.caller(&key.api_key).await.unwrap().is_some());
        assert!(!f.cache.caller(&internal.api_key).await.unwrap().unwrap().suspended_internal);
        for account in [&key.account_id, &internal.account_id] {
            f.admin.write_blocking(|tx| accounts::set_suspended(tx, account, true)).unwrap();
        }
        assert!(f.cache.caller(&key.api_key).await.unwrap().is_none(), "a suspended account's key was accepted");
        assert!(f.cache.caller(&internal.api_key).await.unwrap().unwrap().suspended_internal);
        for account in [&key.account_id, &internal.account_id] {
            f.admin.write_blocking(|tx| accounts::set_suspended(tx, account, false)).unwrap();
        }
        assert!(f.cache.caller(&key.api_key).await.unwrap().is_some(), "resumed, the key works again");
        assert!(!f.cache.caller(&internal.api_key).await.unwrap().unwrap().suspended_internal);
    }

    #[tokio::test]
    async fn a_checked_key_is_looked_up_again_after_the_ttl() {
        let f = fixture();
        let key = f.key(false);
        f.cache.caller(&key.api_key).await.unwrap();
        f.clock.advance(KEY_CACHE_TTL.as_millis() as i64 - 1);
        f.cache.caller(&key.api_key).await.unwrap();
        assert_eq!(f.lookups(), 1, "within the TTL");
        f.clock.advance(1);
        f.cache.caller(&key.api_key).await.unwrap();
        assert_eq!(f.lookups(), 2, "at the TTL the key is looked up again");
        f.cache.caller(&key.api_key).await.unwrap();
        assert_eq!(f.lookups(), 2, "and held again");
    }

    /// A change that bypasses grid-server (no new generation) is seen once
    /// the TTL has passed.
    #[tokio::test]
    async fn a_change_behind_grid_servers_back_is_seen_within_the_ttl() {
        let f = fixture();
        let key = f.key(false);
        assert!(f.cache.caller(&key.api_key).await.unwrap().is_some());
        let generation = f.store.read_blocking(accounts::credentials_generation).unwrap();
        f.admin.write_blocking(|tx| accounts::revoke_key(tx, &key.key_id, T0)).unwrap();
        // Put the generation back, as a hand edit of the key row would leave it.
        f.admin.write_blocking(|tx| crate::store::set_setting(tx, "credentials_generation", &generation)).unwrap();
        f.clock.advance(KEY_CACHE_TTL.as_millis() as i64);
        assert!(f.cache.caller(&key.api_key).await.unwrap().is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_requests_share_generation_reads_and_all_see_a_revocation() {
        let f = Arc::new(fixture());
        let key = f.key(false);
        f.cache.caller(&key.api_key).await.unwrap();
        f.admin.write_blocking(|tx| accounts::revoke_key(tx, &key.key_id, T0)).unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..200 {
            let (f, k) = (f.clone(), key.api_key.clone());
            tasks.spawn(async move { f.cache.caller(&k).await.unwrap() });
        }
        while let Some(r) = tasks.join_next().await {
            assert!(r.unwrap().is_none(), "a request after the revocation was accepted");
        }
    }
}
