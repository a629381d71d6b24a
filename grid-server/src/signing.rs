//! HMAC-SHA256 tokens made with one secret kept in the store: download URLs
//! and list cursors. Each use signs under its own domain string, so a token
//! of one kind is never valid as another.

use grid_core::catalog::ArtifactKind;
use grid_core::time::Millis;
use ring::hmac;

/// Download URLs work for this long after issue.
pub const DOWNLOAD_VALIDITY_SECS: i64 = 15 * 60;

/// What is percent-encoded in a path segment: everything but unreserved
/// characters (RFC 3986), so any file name is one segment.
const PATH_SEGMENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

pub struct Signer {
    key: hmac::Key,
    base_url: String,
}

impl Signer {
    pub fn new(secret: Vec<u8>, base_url: String) -> Signer {
        Signer { key: hmac::Key::new(hmac::HMAC_SHA256, &secret), base_url }
    }

    /// What is signed: the domain, a line break, the message.
    fn signed(domain: &str, message: &str) -> String {
        format!("{domain}\n{message}")
    }

    fn seal(&self, domain: &str, message: &str) -> String {
        hex::encode(hmac::sign(&self.key, Self::signed(domain, message).as_bytes()))
    }

    /// Compares in constant time.
    fn check(&self, domain: &str, message: &str, sig_hex: &str) -> bool {
        hex::decode(sig_hex)
            .is_ok_and(|sig| hmac::verify(&self.key, Self::signed(domain, message).as_bytes(), &sig).is_ok())
    }

    /// `{base}/downloads/{item}/{kind}?expires=S&sig=HEX`, valid 15 minutes.
    pub fn download_url(&self, item: &str, kind: ArtifactKind, now: Millis) -> String {
        let expires = now.0 / 1000 + DOWNLOAD_VALIDITY_SECS;
        let sig = self.seal("download", &format!("{item}\n{}\n{expires}", kind.as_str()));
        format!("{}/downloads/{item}/{}?expires={expires}&sig={sig}", self.base_url, kind.as_str())
    }

    pub fn download_valid(&self, item: &str, kind: &str, expires: i64, sig_hex: &str, now: Millis) -> bool {
        now.0 / 1000 <= expires && self.check("download", &format!("{item}\n{kind}\n{expires}"), sig_hex)
    }

    /// `{base}/downloads/sessions/{session}/{name}?expires=S&sig=HEX`, valid 15
    /// minutes: one file of a session's downloads (the name percent-encoded
    /// in the path, signed as it is).
    pub fn session_download_url(&self, session: &str, name: &str, now: Millis) -> String {
        let expires = now.0 / 1000 + DOWNLOAD_VALIDITY_SECS;
        let sig = self.seal("session-download", &format!("{session}\n{name}\n{expires}"));
        let path = percent_encoding::utf8_percent_encode(name, PATH_SEGMENT);
        format!("{}/downloads/sessions/{session}/{path}?expires={expires}&sig={sig}", self.base_url)
    }

    pub fn session_download_valid(&self, session: &str, name: &str, expires: i64, sig_hex: &str, now: Millis) -> bool {
        now.0 / 1000 <= expires && self.check("session-download", &format!("{session}\n{name}\n{expires}"), sig_hex)
    }

    /// `{base}/recordings/{session}?expires=S&sig=HEX`, valid 15 minutes: a
    /// session's replay page; answered with the time it stops working.
    pub fn recording_url(&self, session: &str, now: Millis) -> (String, Millis) {
        let expires = now.0 / 1000 + DOWNLOAD_VALIDITY_SECS;
        let sig = self.seal("session-recording", &format!("{session}\n{expires}"));
        (format!("{}/recordings/{session}?expires={expires}&sig={sig}", self.base_url), Millis(expires * 1000))
    }

    pub fn recording_valid(&self, session: &str, expires: i64, sig_hex: &str, now: Millis) -> bool {
        now.0 / 1000 <= expires && self.check("session-recording", &format!("{session}\n{expires}"), sig_hex)
    }

    /// An opaque cursor to continue a listing after `position`, bound to
    /// `scope` (the caller and the filters) so it only works for that query.
    pub fn seal_cursor(&self, scope: &str, position: i64) -> String {
        format!("{position}.{}", &self.seal("cursor", &format!("{scope}\n{position}"))[..32])
    }

    /// A cursor whose position is an id (GET /batches: ids sort in time
    /// order and hold no `.`), bound to `scope` as `seal_cursor`'s.
    pub fn seal_id_cursor(&self, scope: &str, id: &str) -> String {
        format!("{id}.{}", &self.seal("id-cursor", &format!("{scope}\n{id}"))[..32])
    }

    pub fn open_id_cursor(&self, scope: &str, cursor: &str) -> Option<String> {
        let (id, sig) = cursor.rsplit_once('.')?;
        let full = self.seal("id-cursor", &format!("{scope}\n{id}"));
        let ok = sig.len() == 32 && sig.bytes().zip(full.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
        ok.then(|| id.to_string())
    }

    pub fn open_cursor(&self, scope: &str, cursor: &str) -> Option<i64> {
        let (position, sig) = cursor.split_once('.')?;
        let position: i64 = position.parse().ok()?;
        let full = self.seal("cursor", &format!("{scope}\n{position}"));
        // Truncated MAC: compare the issued prefix in constant time.
        let ok = sig.len() == 32 && sig.bytes().zip(full.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
        ok.then_some(position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> Signer {
        Signer::new(b"secret".to_vec(), "http://h".into())
    }

    fn query_param<'a>(query: &'a str, name: &str) -> &'a str {
        query.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')).unwrap()
    }

    #[test]
    fn download_signature_binds_item_kind_and_expiry() {
        let s = signer();
        let t = Millis(1_000_000_000);
        let url = s.download_url("it_1", ArtifactKind::Body, t);
        let q = url.split_once('?').unwrap().1;
        let exp: i64 = query_param(q, "expires").parse().unwrap();
        let sig = query_param(q, "sig");
        assert_eq!(exp, 1_000_000 + 900);
        assert!(s.download_valid("it_1", "body", exp, sig, t));
        assert!(!s.download_valid("it_2", "body", exp, sig, t));
        assert!(!s.download_valid("it_1", "meta", exp, sig, t));
        assert!(!s.download_valid("it_1", "body", exp + 1, sig, t));
        assert!(!s.download_valid("it_1", "body", exp, sig, Millis((exp + 1) * 1000)));
        assert!(s.download_valid("it_1", "body", exp, sig, Millis(exp * 1000)));
    }

    /// Tokens issued before a restart (or by an older build) keep working:
    /// the signature is HMAC-SHA256 over `domain \n message`, whatever the
    /// library (known answers computed independently).
    #[test]
    fn signatures_are_plain_hmac_sha256_of_domain_and_message() {
        let s = signer();
        let url = s.download_url("it_1", ArtifactKind::Body, Millis(1_000_000_000));
        assert_eq!(
            query_param(url.split_once('?').unwrap().1, "sig"),
            "1b881a421519fe42c18550fc746fe8fd683fa877c763fe619bd4a31e4c71a41c"
        );
        assert_eq!(s.seal_cursor("acc_1|None", 42), "42.9e11c1879e26767d9f37f84aeab9e495");
        let id_cursor = s.seal_id_cursor("acc_1", "bt_01J");
        assert_eq!(s.open_id_cursor("acc_1", &id_cursor).as_deref(), Some("bt_01J"));
        assert_eq!(s.open_id_cursor("acc_2", &id_cursor), None, "bound to its caller");
        assert_eq!(s.open_id_cursor("acc_1", &id_cursor.replace("bt_01J", "bt_01K")), None);
        assert_eq!(s.open_cursor("acc_1", &id_cursor), None, "an id cursor is no seq cursor");
    }

    #[test]
    fn session_download_signatures_bind_session_name_and_expiry_and_are_not_capture_ones() {
        let s = signer();
        let t = Millis(1_000_000_000);
        let url = s.session_download_url("ses_1", "Rapport Q1 (2)/../é.pdf", t);
        let (path, q) = url.split_once('?').unwrap();
        assert_eq!(path, "http://h/downloads/sessions/ses_1/Rapport%20Q1%20%282%29%2F..%2F%C3%A9.pdf");
        let (exp, sig) = (query_param(q, "expires").parse::<i64>().unwrap(), query_param(q, "sig"));
        assert!(s.session_download_valid("ses_1", "Rapport Q1 (2)/../é.pdf", exp, sig, t));
        assert!(!s.session_download_valid("ses_2", "Rapport Q1 (2)/../é.pdf", exp, sig, t));
        assert!(!s.session_download_valid("ses_1", "other.pdf", exp, sig, t));
        assert!(!s.session_download_valid("ses_1", "Rapport Q1 (2)/../é.pdf", exp, sig, Millis((exp + 1) * 1000)));
        // A capture download's signature opens no session file, and back.
        let capture = s.download_url("ses_1", ArtifactKind::Body, t);
        let cq = capture.split_once('?').unwrap().1;
        assert!(!s.session_download_valid("ses_1", "body", exp, query_param(cq, "sig"), t));
        assert!(!s.download_valid("ses_1", "Rapport Q1 (2)/../é.pdf", exp, sig, t));
    }

    #[test]
    fn recording_signatures_bind_the_session_and_expiry_and_open_nothing_else() {
        let s = signer();
        let t = Millis(1_000_000_000);
        let (url, expires_at) = s.recording_url("ses_1", t);
        let (path, q) = url.split_once('?').unwrap();
        assert_eq!(path, "http://h/recordings/ses_1");
        let (exp, sig) = (query_param(q, "expires").parse::<i64>().unwrap(), query_param(q, "sig"));
        assert_eq!(expires_at, Millis(exp * 1000));
        assert!(s.recording_valid("ses_1", exp, sig, t));
        assert!(!s.recording_valid("ses_2", exp, sig, t));
        assert!(!s.recording_valid("ses_1", exp, sig, Millis((exp + 1) * 1000)));
        // A session download's signature is no recording's, and back.
        let file = s.session_download_url("ses_1", "recording.html", t);
        assert!(!s.recording_valid("ses_1", exp, query_param(file.split_once('?').unwrap().1, "sig"), t));
        assert!(!s.session_download_valid("ses_1", "recording.html", exp, sig, t));
    }

    #[test]
    fn cursors_only_open_for_their_scope() {
        let s = signer();
        let c = s.seal_cursor("acc_1|None", 42);
        assert_eq!(s.open_cursor("acc_1|None", &c), Some(42));
        assert_eq!(s.open_cursor("acc_2|None", &c), None);
        assert_eq!(s.open_cursor("acc_1|None", &c.replace("42.", "41.")), None);
        assert_eq!(s.open_cursor("acc_1|None", "garbage"), None);
        assert_eq!(s.open_cursor("acc_1|None", ""), None);
    }
}
