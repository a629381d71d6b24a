//! The driver's sources of time and identity: the only places the server
//! reads the clock or draws randomness for ids and secrets.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use grid_core::time::Millis;
use rand::RngCore;

/// The server's time: the system's, plus the skew a test set
/// (`follow_skew_file`; zero in production).
pub fn now() -> Millis {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Millis(d.as_millis() as i64 + skew())
}

/// Milliseconds the server's clock runs ahead of the system's: always 0,
/// unless a test made the server follow a skew file.
static SKEW: AtomicI64 = AtomicI64::new(0);

/// How often a followed skew file is read again.
const SKEW_POLL: Duration = Duration::from_millis(20);

fn skew() -> i64 {
    SKEW.load(Ordering::Relaxed)
}

/// For black-box tests only (the hidden `serve --clock-skew-file`): from now
/// on the server's clock runs ahead of the system's by the milliseconds
/// `path` holds (a decimal number, 0 when the file is absent or unreadable),
/// read again every 20 ms. A test moves the server to a session's expiry, a
/// due retry or a dead node's lease end at once instead of waiting on the
/// wall clock for it; every reading of the time in the server goes through
/// `now`, so they all move together. The skew only grows forward:
/// a smaller number than the last is ignored, so the server's clock never
/// goes back.
pub fn follow_skew_file(path: PathBuf) -> std::io::Result<()> {
    read_skew(&path);
    std::thread::Builder::new()
        .name("clock-skew".into())
        .spawn(move || loop {
            std::thread::sleep(SKEW_POLL);
            read_skew(&path);
        })
        .map(drop)
}

fn read_skew(path: &Path) {
    if let Some(ms) = std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse::<i64>().ok()) {
        if SKEW.fetch_max(ms, Ordering::Relaxed) < ms {
            // What the test waits for before it looks at what the move did.
            tracing::info!(skew_ms = ms, "the server's clock moved forward (--clock-skew-file)");
        }
    }
}

/// A new time-ordered id with the given prefix (`bt_01J...`).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", new_ulid())
}

/// A ULID of the wall clock and the thread's generator; in the simulation
/// (`seeded`), of its clock and its seed.
fn new_ulid() -> ulid::Ulid {
    #[cfg(test)]
    if let Some(id) = seeded::ulid() {
        return id;
    }
    ulid::Ulid::new()
}

/// Fills `buf` from the thread's generator; in the simulation, from its seed.
fn fill(buf: &mut [u8]) {
    #[cfg(test)]
    if seeded::fill(buf) {
        return;
    }
    rand::rng().fill_bytes(buf);
}

/// The simulation's source of ids and secrets (`crate::sim`): on the thread
/// that runs it, every id is drawn from its seed and dated by its clock, so
/// a seed makes the same ids (and the same order of `created_at, id`) on
/// every run.
#[cfg(test)]
pub mod seeded {
    use std::cell::RefCell;
    use std::sync::Arc;

    use rand::rngs::StdRng;
    use rand::{Rng, RngCore, SeedableRng};

    use crate::clock::Clock;

    struct Source {
        rng: StdRng,
        clock: Arc<dyn Clock>,
    }

    thread_local! {
        static SOURCE: RefCell<Option<Source>> = const { RefCell::new(None) };
    }

    /// From now until the guard drops, ids made on this thread come from
    /// `seed` and `clock`.
    pub fn on_this_thread(seed: u64, clock: Arc<dyn Clock>) -> Guard {
        SOURCE.with(|s| *s.borrow_mut() = Some(Source { rng: StdRng::seed_from_u64(seed), clock }));
        Guard(std::marker::PhantomData)
    }

    /// Ends `on_this_thread` when dropped.
    pub struct Guard(std::marker::PhantomData<*const ()>);

    impl Drop for Guard {
        fn drop(&mut self) {
            SOURCE.with(|s| *s.borrow_mut() = None);
        }
    }

    pub(super) fn ulid() -> Option<ulid::Ulid> {
        SOURCE.with(|s| {
            let mut s = s.borrow_mut();
            let s = s.as_mut()?;
            Some(ulid::Ulid::from_parts(s.clock.now().0 as u64, s.rng.random()))
        })
    }

    pub(super) fn fill(buf: &mut [u8]) -> bool {
        SOURCE.with(|s| s.borrow_mut().as_mut().map(|s| s.rng.fill_bytes(buf)).is_some())
    }
}

/// `n` ids that sort in the order they are made and follow one another:
/// the first a new ULID, each next one the one above it (same time, random
/// part plus one). No id made elsewhere falls between the first and the last
/// (one in 2^80 would start that close), so a batch's items are the range of
/// the items' key between its first and last id (store::items::batch_view).
pub fn ordered_ids(prefix: &str, n: usize) -> Vec<String> {
    loop {
        let mut next = Some(new_ulid());
        let ids: Option<Vec<String>> = (0..n)
            .map(|_| {
                let id = next?;
                next = id.increment();
                Some(format!("{prefix}{id}"))
            })
            .collect();
        // None only when the random part ran past its largest value: start
        // again from another ULID.
        if let Some(ids) = ids {
            return ids;
        }
    }
}

/// Random bytes as lower-case hex.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    fill(&mut buf);
    hex::encode(buf)
}

/// `N` random bytes (nonces).
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    fill(&mut buf);
    buf
}

/// Every file's checksum, twice per fetched item: written through a table,
/// where `hex::encode` builds the string a char at a time through an
/// iterator.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(64);
    for b in Sha256::digest(data) {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_hex_is_the_lower_case_digest() {
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(sha256_hex(b""), hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"")));
    }

    #[test]
    fn ordered_ids_sort_in_creation_order() {
        let ids = ordered_ids("it_", 1000);
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
        assert!(ids[0].starts_with("it_"));
        // One after the other: each the ULID above the one before.
        for pair in ids.windows(2) {
            let [a, b] = [&pair[0], &pair[1]].map(|id| ulid::Ulid::from_string(&id[3..]).unwrap());
            assert_eq!(a.increment(), Some(b));
        }
    }
}
