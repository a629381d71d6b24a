//! The `Idempotency-Key` request header of `POST /batches` and
//! `POST /sessions` (docs/idempotency.md): what a key may be, what makes two
//! requests "the same", and what a stored key means for a new request.
//!
//! The server keeps one row per (account, key) holding the fingerprint of
//! the first request and its answer, written in the transaction that created
//! the batch or session. Everything here is pure; the driver hashes the
//! fingerprint and reads the clock.

use serde_json::Value;

use crate::error::ApiError;
use crate::time::Millis;

/// The request header, as the docs spell it (header names are case-insensitive).
pub const HEADER: &str = "Idempotency-Key";
/// Response header set (to `true`) on an answer replayed from a stored key.
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";
/// Longest key, in characters (all ASCII, so also in bytes).
pub const MAX_KEY_CHARS: usize = 255;
/// How long a key is remembered after the request that created it: 24 h.
pub const RETENTION_MS: i64 = 24 * 60 * 60 * 1000;

/// The header's values as sent (0, 1 or more), to the key if there is one.
/// A key is 1 to 255 printable ASCII characters (space to `~`); sent twice
/// it is refused, as the two could differ.
pub fn parse_key(values: &[&[u8]]) -> Result<Option<String>, ApiError> {
    let refuse = |problem: String| ApiError::InvalidIdempotencyKey { detail: vec![format!("{HEADER}: {problem}")] };
    let value = match values {
        [] => return Ok(None),
        [one] => *one,
        _ => return Err(refuse(format!("sent {} times; send it once", values.len()))),
    };
    let printable = |b: &u8| (0x20..=0x7e).contains(b);
    if value.is_empty() || value.len() > MAX_KEY_CHARS || !value.iter().all(printable) {
        let got =
            if value.iter().all(printable) { format!("{} characters", value.len()) } else { "other bytes".to_string() };
        return Err(refuse(format!("must be 1 to {MAX_KEY_CHARS} printable ASCII characters, got {got}")));
    }
    // Checked above: every byte is printable ASCII.
    Ok(Some(String::from_utf8_lossy(value).into_owned()))
}

/// What the server hashes (SHA-256) to tell two requests apart under one
/// key: the route and the body as canonical JSON (object keys sorted at
/// every level, no whitespace). So key order and spacing do not matter, and
/// a key first used on `POST /batches` is "reused" on `POST /sessions`.
pub fn fingerprint_input(route: &str, body: &Value) -> String {
    format!("{route}\n{}", canonical_json(body))
}

/// A key row as stored: the fingerprint hash of its first request and when
/// it stops counting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredKey {
    pub request_sha256: String,
    pub expires_at: Millis,
}

/// What a request carrying a key must do, given the row stored for that
/// key in the caller's account (if any).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// No live row: perform the request, and store its answer if it succeeds.
    Perform,
    /// The same request again: answer the stored response, do nothing else.
    Replay,
    /// The key was used for another request: 422.
    Reused,
}

pub fn decide(stored: Option<&StoredKey>, request_sha256: &str, now: Millis) -> Decision {
    match stored {
        None => Decision::Perform,
        Some(s) if s.expires_at <= now => Decision::Perform,
        Some(s) if s.request_sha256 == request_sha256 => Decision::Replay,
        Some(_) => Decision::Reused,
    }
}

/// When a key first used at `now` expires.
pub fn expires_at(now: Millis) -> Millis {
    now.plus_ms(RETENTION_MS)
}

/// JSON with object keys sorted at every level and no whitespace. Sorts keys
/// itself rather than trusting `serde_json::Map`'s order, which a
/// `preserve_order` feature elsewhere in the build would change.
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn detail(e: ApiError) -> String {
        match e {
            ApiError::InvalidIdempotencyKey { detail } => detail.join("; "),
            other => panic!("not an idempotency key refusal: {other:?}"),
        }
    }

    #[test]
    fn no_header_is_no_key() {
        assert_eq!(parse_key(&[]), Ok(None));
    }

    #[test]
    fn printable_ascii_up_to_255_is_a_key() {
        assert_eq!(parse_key(&[b"k"]), Ok(Some("k".into())));
        let longest = "~".repeat(255);
        assert_eq!(parse_key(&[longest.as_bytes()]), Ok(Some(longest.clone())));
        assert_eq!(parse_key(&[b"a key with spaces/and:punct!"]), Ok(Some("a key with spaces/and:punct!".into())));
    }

    #[test]
    fn bad_keys_are_refused_naming_the_header() {
        let too_long = "a".repeat(256);
        assert_eq!(
            detail(parse_key(&[too_long.as_bytes()]).unwrap_err()),
            "Idempotency-Key: must be 1 to 255 printable ASCII characters, got 256 characters"
        );
        assert_eq!(
            detail(parse_key(&[b""]).unwrap_err()),
            "Idempotency-Key: must be 1 to 255 printable ASCII characters, got 0 characters"
        );
        for bad in [&b"tab\there"[..], "ü".as_bytes(), b"nul\0", b"del\x7f"] {
            assert_eq!(
                detail(parse_key(&[bad]).unwrap_err()),
                "Idempotency-Key: must be 1 to 255 printable ASCII characters, got other bytes",
                "{bad:?}"
            );
        }
        assert_eq!(detail(parse_key(&[b"a", b"a"]).unwrap_err()), "Idempotency-Key: sent 2 times; send it once");
        let e = parse_key(&[b""]).unwrap_err();
        assert_eq!(e.status(), 400);
        assert_eq!(e.body()["error"], "invalid idempotency key");
    }

    #[test]
    fn fingerprint_ignores_key_order_and_whitespace_but_not_values_or_route() {
        let a: Value =
            serde_json::from_str(r#"{"urls": ["https://a.example/"], "script": "fetch", "params": {"y": 1, "x": 2}}"#)
                .unwrap();
        let b: Value =
            serde_json::from_str(r#"{"params":{"x":2,"y":1},"script":"fetch","urls":["https://a.example/"]}"#).unwrap();
        assert_eq!(fingerprint_input("POST /batches", &a), fingerprint_input("POST /batches", &b));
        assert_eq!(
            fingerprint_input("POST /batches", &a),
            "POST /batches\n{\"params\":{\"x\":2,\"y\":1},\"script\":\"fetch\",\"urls\":[\"https://a.example/\"]}"
        );
        let c = json!({"urls": ["https://b.example/"], "script": "fetch", "params": {"x": 2, "y": 1}});
        assert_ne!(fingerprint_input("POST /batches", &a), fingerprint_input("POST /batches", &c));
        assert_ne!(fingerprint_input("POST /batches", &json!({})), fingerprint_input("POST /sessions", &json!({})));
        // Array order is part of the request.
        assert_ne!(canonical_json(&json!([1, 2])), canonical_json(&json!([2, 1])));
    }

    #[test]
    fn decisions() {
        let now = Millis(1_000_000);
        let row = StoredKey { request_sha256: "h1".into(), expires_at: expires_at(now) };
        assert_eq!(decide(None, "h1", now), Decision::Perform);
        assert_eq!(decide(Some(&row), "h1", now), Decision::Replay);
        assert_eq!(decide(Some(&row), "h2", now), Decision::Reused);
        // Still counts a millisecond before the 24 h are over, not at the end.
        let last = now.plus_ms(RETENTION_MS - 1);
        assert_eq!(decide(Some(&row), "h2", last), Decision::Reused);
        assert_eq!(decide(Some(&row), "h1", last.plus_ms(1)), Decision::Perform);
        assert_eq!(decide(Some(&row), "h2", last.plus_ms(1)), Decision::Perform);
    }
}
