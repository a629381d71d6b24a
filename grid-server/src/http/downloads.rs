//! Signed download URLs: `{base}/downloads/{item}/{kind}?expires=S&sig=HEX`,
//! an HMAC-SHA256 over item, kind and expiry with a secret kept in the store.
//! They need no credential and stop working 15 minutes after issue.

use grid_core::catalog::ArtifactKind;
use grid_core::error::ApiError;
use grid_core::time::Millis;
use hmac::{Hmac, Mac};
use hyper::StatusCode;
use sha2::Sha256;

use super::captures::store_error;
use super::respond::{self, Resp};
use super::App;
use crate::ids::{now, sha256_hex};
use crate::store::items;

pub const VALIDITY_SECS: i64 = 15 * 60;

pub struct UrlSigner {
    secret: Vec<u8>,
    base_url: String,
}

impl UrlSigner {
    pub fn new(secret: Vec<u8>, base_url: String) -> UrlSigner {
        UrlSigner { secret, base_url }
    }

    fn mac(&self, item: &str, kind: &str, expires: i64) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.secret).expect("HMAC takes any key length");
        mac.update(format!("{item}\n{kind}\n{expires}").as_bytes());
        mac
    }

    pub fn sign(&self, item: &str, kind: ArtifactKind, now: Millis) -> String {
        let expires = now.0 / 1000 + VALIDITY_SECS;
        let sig = hex::encode(self.mac(item, kind.as_str(), expires).finalize().into_bytes());
        format!("{}/downloads/{item}/{}?expires={expires}&sig={sig}", self.base_url, kind.as_str())
    }

    /// Whether the signature is right (compared in constant time) and unexpired.
    pub fn verify(&self, item: &str, kind: &str, expires: i64, sig_hex: &str, now: Millis) -> bool {
        let Ok(sig) = hex::decode(sig_hex) else { return false };
        now.0 / 1000 <= expires && self.mac(item, kind, expires).verify_slice(&sig).is_ok()
    }
}

fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

pub async fn serve(app: &App, item: &str, kind: &str, query: Option<&str>) -> Result<Resp, ApiError> {
    let query = query.unwrap_or("");
    let expires = query_param(query, "expires").and_then(|s| s.parse::<i64>().ok());
    let sig = query_param(query, "sig");
    let (Some(expires), Some(sig)) = (expires, sig) else { return Err(ApiError::DownloadLinkInvalid) };
    if !app.signer.verify(item, kind, expires, sig, now()) {
        return Err(ApiError::DownloadLinkInvalid);
    }
    let kind = ArtifactKind::parse(kind).ok_or(ApiError::DownloadLinkInvalid)?;
    let item_id = item.to_string();
    let file = app
        .store
        .read(move |c| items::published_file(c, &item_id, kind))
        .await
        .map_err(store_error)?
        .ok_or(ApiError::ArtifactNotPresent)?;
    let path = app.artifacts_dir.join(&file.storage_name);
    let data = tokio::fs::read(&path).await.map_err(|e| {
        tracing::error!(path = %path.display(), error = %e, "published file unreadable");
        ApiError::Internal
    })?;
    if sha256_hex(&data) != file.sha256 {
        tracing::error!(path = %path.display(), "published file failed its checksum");
        return Err(ApiError::Internal);
    }
    Ok(respond::bytes(StatusCode::OK, &file.content_type, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_binds_item_kind_and_expiry() {
        let s = UrlSigner::new(b"secret".to_vec(), "http://h".into());
        let t = Millis(1_000_000_000);
        let url = s.sign("it_1", ArtifactKind::Body, t);
        let q = url.split_once('?').unwrap().1;
        let exp: i64 = query_param(q, "expires").unwrap().parse().unwrap();
        let sig = query_param(q, "sig").unwrap();
        assert_eq!(exp, 1_000_000 + 900);
        assert!(s.verify("it_1", "body", exp, sig, t));
        assert!(!s.verify("it_2", "body", exp, sig, t));
        assert!(!s.verify("it_1", "meta", exp, sig, t));
        assert!(!s.verify("it_1", "body", exp + 1, sig, t));
        assert!(!s.verify("it_1", "body", exp, sig, Millis((exp + 1) * 1000)));
        assert!(s.verify("it_1", "body", exp, sig, Millis(exp * 1000)));
    }
}
