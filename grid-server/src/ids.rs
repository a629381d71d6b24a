//! The driver's sources of time and identity: the only places the server
//! reads the clock or draws randomness for ids and secrets.

use grid_core::time::Millis;
use rand::RngCore;

pub fn now() -> Millis {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Millis(d.as_millis() as i64)
}

/// A new time-ordered id with the given prefix (`bt_01J...`).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", ulid::Ulid::new())
}

/// `n` ids that sort in the order they are made, even within one millisecond.
pub fn ordered_ids(prefix: &str, n: usize) -> Vec<String> {
    let mut g = ulid::Generator::new();
    (0..n)
        .map(|_| match g.generate() {
            Ok(u) => format!("{prefix}{u}"),
            // The generator overflows only after 2^80 ids in one millisecond.
            Err(_) => new_id(prefix),
        })
        .collect()
}

/// Random bytes as lower-case hex.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    hex::encode(buf)
}

/// `N` random bytes (nonces).
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    rand::rng().fill_bytes(&mut buf);
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
    }
}
