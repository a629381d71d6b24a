//! Secrets at rest (docs/security.md, "Secrets at rest"): what the grid
//! keeps for an account that must never be stored in clear (a browser
//! context's saved state, an upstream proxy's credentials) is sealed here.
//!
//! One master key per grid, read from `--vault-key-file` (created, mode
//! 0600, on first start when absent). Each account gets keys of its own,
//! derived from the master with HKDF-SHA256 per account and purpose, so a
//! sealed value of one account or purpose never opens as another's. A
//! value is sealed with AES-256-GCM (ring) under a random 96-bit nonce;
//! the additional data binds it to its account, purpose and row, so a
//! sealed value copied to another row does not open either.
//!
//! Nodes sharing one store must share the master key: the store keeps a
//! check value of the key (an HMAC, not the key), and a node given another
//! key refuses to start instead of failing to open what the others sealed.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use ring::rand::SecureRandom as _;
use ring::{aead, hkdf, hmac, rand};

/// Bytes of the master key.
const KEY_BYTES: usize = 32;
/// The format's first byte; a later format gets another.
const VERSION: u8 = 1;
const NONCE_BYTES: usize = 12;

/// What a sealed value is for: each purpose has keys of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A browser context's saved state (cookies, storage).
    ContextState,
    /// An upstream proxy's user name and password.
    ProxyCredentials,
}

impl Purpose {
    fn label(self) -> &'static str {
        match self {
            Purpose::ContextState => "context-state",
            Purpose::ProxyCredentials => "proxy-credentials",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    #[error("the sealed value does not open with this grid's key (altered, moved to another row, or sealed under another key)")]
    DoesNotOpen,
    #[error("the system gave no randomness for a nonce, or the value is too long to seal")]
    CannotSeal,
    #[error("the vault key file {path}: {why}")]
    KeyFile { path: String, why: String },
}

pub struct Vault {
    master: hkdf::Prk,
    check: hmac::Key,
    random: rand::SystemRandom,
}

impl Vault {
    /// The vault of the master key in `path`, written there first (random,
    /// mode 0600) when the file does not exist.
    pub fn load_or_create(path: &Path) -> Result<Vault, VaultError> {
        let fail = |why: String| VaultError::KeyFile { path: path.display().to_string(), why };
        let key = match std::fs::read(path) {
            Ok(text) => hex::decode(String::from_utf8_lossy(&text).trim())
                .ok()
                .filter(|k| k.len() == KEY_BYTES)
                .ok_or_else(|| fail(format!("must hold {KEY_BYTES} bytes written as {} hex digits", KEY_BYTES * 2)))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut key = vec![0u8; KEY_BYTES];
                rand::SystemRandom::new().fill(&mut key).map_err(|_| fail("no randomness for a new key".into()))?;
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)
                    .map_err(|e| fail(format!("cannot create it: {e}")))?;
                file.write_all(hex::encode(&key).as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(|e| fail(format!("cannot write it: {e}")))?;
                key
            }
            Err(e) => return Err(fail(format!("cannot read it: {e}"))),
        };
        Ok(Vault::from_key(&key))
    }

    pub fn from_key(key: &[u8]) -> Vault {
        Vault {
            master: hkdf::Salt::new(hkdf::HKDF_SHA256, b"grid vault v1").extract(key),
            check: hmac::Key::new(hmac::HMAC_SHA256, key),
            random: rand::SystemRandom::new(),
        }
    }

    /// A value naming the master key without revealing it: the store keeps
    /// the first node's, and every node compares its own with it.
    pub fn check_value(&self) -> String {
        hex::encode(hmac::sign(&self.check, b"grid vault key check v1"))
    }

    fn cipher(&self, account: &str, purpose: Purpose) -> Result<aead::LessSafeKey, VaultError> {
        let info = [purpose.label().as_bytes(), b"\n", account.as_bytes()];
        // An AES-256 key is a valid HKDF-SHA256 length: this never fails.
        let okm = self.master.expand(&info, &aead::AES_256_GCM).map_err(|_| VaultError::CannotSeal)?;
        Ok(aead::LessSafeKey::new(aead::UnboundKey::from(okm)))
    }

    fn aad(account: &str, purpose: Purpose, row: &str) -> aead::Aad<Vec<u8>> {
        aead::Aad::from(format!("{}\n{account}\n{row}", purpose.label()).into_bytes())
    }

    /// `plain` sealed for `account`'s `purpose`, bound to the row `row`
    /// (its id): version, nonce, then the ciphertext and its tag.
    pub fn seal(&self, account: &str, purpose: Purpose, row: &str, plain: &[u8]) -> Result<Vec<u8>, VaultError> {
        let mut nonce = [0u8; NONCE_BYTES];
        self.random.fill(&mut nonce).map_err(|_| VaultError::CannotSeal)?;
        let mut body = plain.to_vec();
        self.cipher(account, purpose)?
            .seal_in_place_append_tag(
                aead::Nonce::assume_unique_for_key(nonce),
                Self::aad(account, purpose, row),
                &mut body,
            )
            .map_err(|_| VaultError::CannotSeal)?;
        let mut out = Vec::with_capacity(1 + NONCE_BYTES + body.len());
        out.push(VERSION);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// What `seal` sealed with the same account, purpose and row.
    pub fn open(&self, account: &str, purpose: Purpose, row: &str, sealed: &[u8]) -> Result<Vec<u8>, VaultError> {
        let (&version, rest) = sealed.split_first().ok_or(VaultError::DoesNotOpen)?;
        if version != VERSION || rest.len() < NONCE_BYTES {
            return Err(VaultError::DoesNotOpen);
        }
        let (nonce, body) = rest.split_at(NONCE_BYTES);
        let nonce = aead::Nonce::try_assume_unique_for_key(nonce).map_err(|_| VaultError::DoesNotOpen)?;
        let mut body = body.to_vec();
        let plain = self
            .cipher(account, purpose)?
            .open_in_place(nonce, Self::aad(account, purpose, row), &mut body)
            .map_err(|_| VaultError::DoesNotOpen)?;
        Ok(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn a_sealed_value_opens_only_for_its_account_purpose_row_and_key() {
        let v = Vault::from_key(&[7u8; KEY_BYTES]);
        let sealed = v.seal("acct_a", Purpose::ContextState, "ctx_1", b"cookie=canary").unwrap();
        assert!(!sealed.windows(6).any(|w| w == b"canary"), "the value is not in clear");
        assert_eq!(v.open("acct_a", Purpose::ContextState, "ctx_1", &sealed).unwrap(), b"cookie=canary");
        for (account, purpose, row) in [
            ("acct_b", Purpose::ContextState, "ctx_1"),
            ("acct_a", Purpose::ProxyCredentials, "ctx_1"),
            ("acct_a", Purpose::ContextState, "ctx_2"),
        ] {
            assert!(v.open(account, purpose, row, &sealed).is_err(), "{account} {purpose:?} {row}");
        }
        let other = Vault::from_key(&[8u8; KEY_BYTES]);
        assert!(other.open("acct_a", Purpose::ContextState, "ctx_1", &sealed).is_err());
        let mut altered = sealed.clone();
        *altered.last_mut().unwrap() ^= 1;
        assert!(v.open("acct_a", Purpose::ContextState, "ctx_1", &altered).is_err());
        assert!(v.open("acct_a", Purpose::ContextState, "ctx_1", &[]).is_err());
        // Two seals of one value differ (fresh nonces).
        assert_ne!(sealed, v.seal("acct_a", Purpose::ContextState, "ctx_1", b"cookie=canary").unwrap());
    }

    #[test]
    fn the_key_file_is_made_private_once_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vault.key");
        let first = Vault::load_or_create(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let again = Vault::load_or_create(&path).unwrap();
        assert_eq!(first.check_value(), again.check_value());
        let sealed = first.seal("a", Purpose::ProxyCredentials, "r", b"pw").unwrap();
        assert_eq!(again.open("a", Purpose::ProxyCredentials, "r", &sealed).unwrap(), b"pw");
        std::fs::write(&path, "not hex").unwrap();
        let err = Vault::load_or_create(&path).err().unwrap().to_string();
        assert!(err.contains("64 hex digits"), "{err}");
    }
}
