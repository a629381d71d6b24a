//! Stored `Idempotency-Key`s of POST /batches and POST /sessions
//! (docs/idempotency.md; the pure rules are `grid_core::idempotency`).
//!
//! `once` runs a submission inside the caller's write transaction: it looks
//! the key up, answers a replay or a reuse, and otherwise performs the
//! submission and inserts the key row with its answer in that same
//! transaction. The writer connection takes the write lock up front
//! (`BEGIN IMMEDIATE`), so two requests with one key run one after the
//! other: the second sees the first's row and replays it. A key is never
//! "in flight" for another request to see.
//!
//! The stored answer is sealed with AES-256-GCM under a key derived (HKDF-
//! SHA-256) from the Idempotency-Key and the account; only the key's SHA-256
//! is stored. A lease answer holds the session's cdpUrl, whose token the
//! sessions table keeps only as a hash: a copy of grid.db alone does not
//! give it away.

use super::sql::{Conn, Optional, ReadConn};
use crate::params;
use grid_core::idempotency::{self as rules, Decision, StoredKey};
use grid_core::time::Millis;
use ring::{aead, hkdf};
use serde::Serialize;
use serde_json::Value;

use super::accounts::ReserveError;
use super::{StoreError, StoreResult};
use crate::ids::{random_bytes, sha256_hex};

/// How many expired rows one submission purges, besides its own key's.
const PURGE_BATCH: i64 = 100;
const NONCE_LEN: usize = 12;

/// An `Idempotency-Key` with the request it came with.
#[derive(Debug, Clone)]
pub struct Key {
    value: String,
    request_sha256: String,
}

impl Key {
    /// `value` is a key accepted by `grid_core::idempotency::parse_key`;
    /// `route` is `POST /batches` or `POST /sessions`.
    pub fn new(value: String, route: &str, body: &Value) -> Key {
        let request_sha256 = sha256_hex(rules::fingerprint_input(route, body).as_bytes());
        Key { value, request_sha256 }
    }

    fn key_sha256(&self) -> String {
        sha256_hex(self.value.as_bytes())
    }
}

/// An answer as sent: status and JSON body bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json<T: Serialize>(status: u16, value: &T) -> StoreResult<Answer> {
        Ok(Answer { status, body: super::to_json(value)?.into_bytes() })
    }
}

/// What a submission performed under `once` yields.
pub struct Created<T> {
    pub value: T,
    /// The batch or session id, kept with the key row.
    pub subject: String,
    pub answer: Answer,
}

pub enum Outcome<T> {
    /// Done now; the answer is stored under the key (if one was sent).
    Performed(T, Answer),
    /// The key's first answer, again; nothing was done.
    Replayed(Answer),
}

/// Runs `perform` unless `key` was already used in the account: the same
/// request again gets the stored answer, another request
/// `422 idempotency key reused`. A refusal of `perform` stores nothing.
pub fn once<T, E: From<ReserveError>>(
    tx: &Conn,
    account_id: &str,
    key: Option<&Key>,
    now: Millis,
    perform: impl FnOnce(&Conn) -> Result<Created<T>, E>,
) -> Result<Outcome<T>, E> {
    let Some(key) = key else {
        let created = perform(tx)?;
        return Ok(Outcome::Performed(created.value, created.answer));
    };
    let store = |e: StoreError| E::from(ReserveError::Store(e));
    // The key stays unclaimed as read until this request's answer is
    // recorded: a resend running at once waits, then replays it.
    super::accounts::lock_account(tx, account_id).map_err(store)?;
    let found = find(tx, account_id, key).map_err(store)?;
    let decision = rules::decide(found.as_ref().map(|f| &f.key), &key.request_sha256, now);
    match (decision, found) {
        (Decision::Replay, Some(Found { status, sealed, .. })) => {
            // Only the same request's answer is ever unsealed.
            let body = unseal(account_id, key, status, &sealed)
                .ok_or_else(|| store(StoreError::Invalid("stored idempotent answer does not unseal".into())))?;
            Ok(Outcome::Replayed(Answer { status, body }))
        }
        (Decision::Replay, None) => Err(store(StoreError::Invalid("a replay was decided without a stored key".into()))),
        (Decision::Reused, _) => Err(E::from(ReserveError::Refused(grid_core::error::ApiError::IdempotencyKeyReused))),
        (Decision::Perform, _) => {
            let created = perform(tx)?;
            record(tx, account_id, key, &created.subject, &created.answer, now).map_err(store)?;
            Ok(Outcome::Performed(created.value, created.answer))
        }
    }
}

/// A stored key row.
struct Found {
    key: StoredKey,
    status: u16,
    sealed: Vec<u8>,
}

fn find(conn: &ReadConn, account_id: &str, key: &Key) -> StoreResult<Option<Found>> {
    conn.query_row(
        "SELECT request_sha256, expires_at, status, response FROM idempotency_keys
              WHERE account_id = ?1 AND key_sha256 = ?2",
        (account_id, key.key_sha256()),
        |r| {
            Ok(Found {
                key: StoredKey { request_sha256: r.get(0)?, expires_at: Millis(r.get(1)?) },
                status: r.get(2)?,
                sealed: r.get(3)?,
            })
        },
    )
    .optional()
}

fn record(conn: &Conn, account_id: &str, key: &Key, subject: &str, answer: &Answer, now: Millis) -> StoreResult<()> {
    let key_sha256 = key.key_sha256();
    // An expired row of this very key goes first, then some others.
    conn.execute(
        "DELETE FROM idempotency_keys WHERE account_id = ?1 AND key_sha256 = ?2 AND expires_at <= ?3",
        (account_id, &key_sha256, now.0),
    )?;
    purge_expired(conn, now, PURGE_BATCH)?;
    conn.execute(
        "INSERT INTO idempotency_keys (account_id, key_sha256, request_sha256, subject, status, response,
                                       created_at, expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            account_id,
            key_sha256,
            key.request_sha256,
            subject,
            answer.status,
            seal(account_id, key, answer)?,
            now.0,
            rules::expires_at(now).0
        ],
    )?;
    Ok(())
}

/// Deletes up to `limit` rows whose 24 h are over; returns how many.
pub fn purge_expired(conn: &Conn, now: Millis, limit: i64) -> StoreResult<usize> {
    conn.execute(
        "DELETE FROM idempotency_keys WHERE (account_id, key_sha256) IN
               (SELECT account_id, key_sha256 FROM idempotency_keys WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2)",
        (now.0, limit),
    )
}

/// `None` only if HKDF-SHA-256 refuses 32 bytes of output, which it
/// never does (its limit is 255 × 32).
fn cipher(account_id: &str, key: &Key) -> Option<aead::LessSafeKey> {
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"grid idempotency-key answer v1").extract(key.value.as_bytes());
    let info = [account_id.as_bytes()];
    let okm = prk.expand(&info, &aead::AES_256_GCM).ok()?;
    Some(aead::LessSafeKey::new(aead::UnboundKey::from(okm)))
}

/// The row's request and status are bound to the sealed body.
fn aad(account_id: &str, key: &Key, status: u16) -> aead::Aad<Vec<u8>> {
    aead::Aad::from(format!("{account_id}\n{}\n{status}", key.request_sha256).into_bytes())
}

/// nonce || ciphertext || tag. The nonce is random: a key used again after
/// its 24 h derives the same AES key.
fn seal(account_id: &str, key: &Key, answer: &Answer) -> StoreResult<Vec<u8>> {
    let refused = || StoreError::Invalid("the idempotent answer could not be sealed".into());
    let nonce: [u8; NONCE_LEN] = random_bytes();
    let mut sealed = answer.body.clone();
    cipher(account_id, key)
        .ok_or_else(refused)?
        .seal_in_place_append_tag(
            aead::Nonce::assume_unique_for_key(nonce),
            aad(account_id, key, answer.status),
            &mut sealed,
        )
        .map_err(|_| refused())?;
    let mut out = nonce.to_vec();
    out.extend(sealed);
    Ok(out)
}

fn unseal(account_id: &str, key: &Key, status: u16, sealed: &[u8]) -> Option<Vec<u8>> {
    if sealed.len() < NONCE_LEN {
        return None;
    }
    let (nonce, ciphertext) = sealed.split_at(NONCE_LEN);
    let nonce = aead::Nonce::try_assume_unique_for_key(nonce).ok()?;
    let mut buf = ciphertext.to_vec();
    let plain = cipher(account_id, key)?.open_in_place(nonce, aad(account_id, key, status), &mut buf).ok()?;
    Some(plain.to_vec())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn key(value: &str, body: Value) -> Key {
        Key::new(value.into(), "POST /batches", &body)
    }

    #[test]
    fn sealed_answer_opens_only_with_its_key_account_and_status() {
        let k = key("k-1", json!({"urls": ["https://a.example/"]}));
        let answer = Answer { status: 201, body: br#"{"batchId":"bt_1","jobCount":1}"#.to_vec() };
        let sealed = seal("ac_1", &k, &answer).unwrap();
        assert!(!sealed.windows(7).any(|w| w == b"batchId"), "answer stored in plaintext");
        assert_eq!(unseal("ac_1", &k, 201, &sealed), Some(answer.body.clone()));
        assert_eq!(unseal("ac_2", &k, 201, &sealed), None);
        assert_eq!(unseal("ac_1", &key("k-2", json!({"urls": ["https://a.example/"]})), 201, &sealed), None);
        assert_eq!(unseal("ac_1", &k, 200, &sealed), None);
        assert_eq!(unseal("ac_1", &k, 201, &sealed[..5]), None);
        // A fresh nonce each time.
        assert_ne!(seal("ac_1", &k, &answer).unwrap(), sealed);
    }

    // ----- `once` against a real store (a temp grid.db) -----

    use std::time::Duration;

    use grid_core::catalog::{Profile, Script};
    use grid_core::error::ApiError;
    use grid_core::wire::batch::{BatchCreated, BatchSubmission};

    use crate::store::accounts::{self, Caller};
    use crate::store::items::ItemError;
    use crate::store::Store;
    use grid_core::item::TransitionError;

    const T: Millis = Millis(1_800_000_000_000);

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Duration::from_secs(1)).unwrap();
        (dir, store)
    }

    fn caller(store: &Store, credit: i64) -> Caller {
        store
            .write_blocking(|tx| {
                let id = accounts::create_account(tx, "t", credit, T)?;
                let k = accounts::create_key(tx, &id, None, false, Default::default(), T)?;
                Ok::<_, StoreError>(Caller { account_id: id, key_id: Some(k.key_id), ..Default::default() })
            })
            .unwrap()
    }

    fn body(n: usize) -> Value {
        json!({"urls": (0..n).map(|i| format!("http://t/{i}")).collect::<Vec<_>>(), "script": "fetch"})
    }

    /// POST /batches as the server runs it, with `key` sent along `body(n)` at `now`.
    fn submit(
        store: &Store,
        c: &Caller,
        n: usize,
        key: Option<&str>,
        now: Millis,
    ) -> Result<Outcome<BatchCreated>, ItemError> {
        let sub = BatchSubmission {
            urls: (0..n).map(|i| format!("http://t/{i}")).collect(),
            script: Script::Fetch,
            profile: Profile::DEFAULT,
            params: Default::default(),
            priority: None,
            context: None,
            proxy: None,
        };
        let key = key.map(|k| Key::new(k.into(), "POST /batches", &body(n)));
        let c = c.clone();
        store.write_blocking(move |tx| {
            once(tx, &c.account_id, key.as_ref(), now, |tx| {
                let created = crate::capture::driver::create_batch(tx, &c, &sub, now)?;
                let answer = Answer::json(201, &created)?;
                Ok(Created { subject: created.batch_id.clone(), answer, value: created })
            })
        })
    }

    fn reserved(store: &Store, c: &Caller) -> i64 {
        let id = c.account_id.clone();
        store.read_blocking(move |conn| accounts::balance(conn, &id)).unwrap().reserved_micros
    }

    fn rows(store: &Store) -> i64 {
        store.read_blocking(|c| c.query_row("SELECT COUNT(*) FROM idempotency_keys", (), |r| r.get(0))).unwrap()
    }

    #[test]
    fn a_key_replays_its_first_answer_and_reserves_once() {
        let (_d, s) = store();
        let c = caller(&s, 1_000_000);
        let Ok(Outcome::Performed(created, first)) = submit(&s, &c, 2, Some("k"), T) else { panic!("not performed") };
        assert_eq!(reserved(&s, &c), 240);
        let Ok(Outcome::Replayed(again)) = submit(&s, &c, 2, Some("k"), T.plus_ms(1)) else { panic!("not replayed") };
        assert_eq!(again, first);
        assert!(String::from_utf8(again.body).unwrap().contains(&created.batch_id));
        assert_eq!(reserved(&s, &c), 240);
        // Another body under the key: refused, nothing reserved.
        match submit(&s, &c, 3, Some("k"), T.plus_ms(2)) {
            Err(ItemError::Transition(TransitionError::Refused(ApiError::IdempotencyKeyReused))) => {}
            _ => panic!("expected idempotency key reused"),
        }
        assert_eq!(reserved(&s, &c), 240);
        // Without a key, or with another, each submission is new.
        assert!(matches!(submit(&s, &c, 2, None, T), Ok(Outcome::Performed(..))));
        assert!(matches!(submit(&s, &c, 2, Some("k2"), T), Ok(Outcome::Performed(..))));
        assert_eq!(reserved(&s, &c), 720);
    }

    #[test]
    fn keys_belong_to_one_account() {
        let (_d, s) = store();
        let (a, b) = (caller(&s, 1_000_000), caller(&s, 1_000_000));
        let Ok(Outcome::Performed(first, _)) = submit(&s, &a, 1, Some("k"), T) else { panic!() };
        let Ok(Outcome::Performed(second, _)) = submit(&s, &b, 1, Some("k"), T) else { panic!() };
        assert_ne!(first.batch_id, second.batch_id);
        // Even another body is fine in the other account.
        assert!(matches!(submit(&s, &b, 2, Some("k2"), T), Ok(Outcome::Performed(..))));
        assert!(matches!(submit(&s, &a, 3, Some("k2"), T), Ok(Outcome::Performed(..))));
    }

    #[test]
    fn a_refused_first_request_stores_no_key() {
        let (_d, s) = store();
        let c = caller(&s, 100);
        assert!(matches!(
            submit(&s, &c, 1, Some("k"), T),
            Err(ItemError::Transition(TransitionError::Refused(ApiError::InsufficientCredit { .. })))
        ));
        assert_eq!(rows(&s), 0);
        let id = c.account_id.clone();
        s.write_blocking(move |tx| accounts::add_credit(tx, &id, 1_000, T)).unwrap();
        assert!(matches!(submit(&s, &c, 1, Some("k"), T), Ok(Outcome::Performed(..))));
        assert_eq!(rows(&s), 1);
    }

    #[test]
    fn expired_keys_are_new_again_and_purged() {
        let (_d, s) = store();
        let c = caller(&s, 1_000_000);
        let Ok(Outcome::Performed(first, _)) = submit(&s, &c, 1, Some("old"), T) else { panic!() };
        assert!(matches!(submit(&s, &c, 1, Some("other"), T), Ok(Outcome::Performed(..))));
        // An expired answer is never unsealed, even a damaged one.
        s.write_blocking(|tx| tx.execute("UPDATE idempotency_keys SET response = x'00'", ())).unwrap();
        let later = rules::expires_at(T);
        // After 24 h the same request under the key is a new request ...
        let Ok(Outcome::Performed(second, _)) = submit(&s, &c, 1, Some("old"), later) else { panic!() };
        assert_ne!(first.batch_id, second.batch_id);
        // ... and the other expired row went with it.
        assert_eq!(rows(&s), 1);
    }
}
