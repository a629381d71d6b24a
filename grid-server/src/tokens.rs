//! Sign-in tokens: JWTs from the operator's OpenID issuer, checked with
//! jsonwebtoken against the issuer's JWKS (cached; fetched again when a
//! token names a key id the cache does not have).
//!
//! A token is accepted when its signature verifies with a key of the JWKS,
//! it has not expired, `iss` is the configured issuer, `aud` names the
//! resource it is sent to (`{base_url}`, or `{base_url}/mcp` on /mcp), it has
//! a `sub`, and its scopes (`scope`, space-separated, or `scp`) include
//! `grid.invoke`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::Value;

/// The scope a token must carry to call the grid.
pub const INVOKE_SCOPE: &str = "grid.invoke";
/// A token naming an unknown key fetches the JWKS at most this often.
const MIN_REFRESH: Duration = Duration::from_secs(2);
const ALGORITHMS: [Algorithm; 8] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::EdDSA,
];

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("token rejected: {0}")]
    Invalid(String),
    #[error("no sign-in issuer is configured")]
    NotConfigured,
    #[error("issuer keys unavailable: {0}")]
    KeysUnavailable(String),
}

/// Who a verified token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub issuer: String,
    pub subject: String,
}

#[derive(Deserialize)]
struct Claims {
    iss: String,
    sub: String,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Value>,
}

impl Claims {
    fn scopes(&self) -> Vec<String> {
        let mut out: Vec<String> = self.scope.iter().flat_map(|s| s.split_whitespace().map(str::to_string)).collect();
        match &self.scp {
            Some(Value::String(s)) => out.extend(s.split_whitespace().map(str::to_string)),
            Some(Value::Array(a)) => out.extend(a.iter().filter_map(|v| v.as_str().map(str::to_string))),
            _ => {}
        }
        out
    }
}

pub struct TokenVerifier {
    issuer: Option<String>,
    jwks_url: Option<String>,
    client: reqwest::Client,
    keys: Mutex<(JwkSet, Option<Instant>)>,
}

impl TokenVerifier {
    /// Fails only if reqwest cannot build a client (its TLS backend).
    pub fn new(issuer: Option<String>, jwks_url: Option<String>) -> Result<TokenVerifier, reqwest::Error> {
        let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
        Ok(TokenVerifier { issuer, jwks_url, client, keys: Mutex::new((JwkSet { keys: vec![] }, None)) })
    }

    pub async fn verify(&self, token: &str, audience: &str) -> Result<Identity, TokenError> {
        let issuer = self.issuer.as_deref().ok_or(TokenError::NotConfigured)?;
        let header = jsonwebtoken::decode_header(token).map_err(|e| TokenError::Invalid(e.to_string()))?;
        if !ALGORITHMS.contains(&header.alg) {
            return Err(TokenError::Invalid(format!("algorithm {:?} is not accepted", header.alg)));
        }
        let kid = header.kid.clone().ok_or_else(|| TokenError::Invalid("token names no key id (kid)".into()))?;
        let jwk = match self.cached(&kid) {
            Some(k) => k,
            None => {
                self.refresh(issuer).await?;
                self.cached(&kid).ok_or_else(|| TokenError::Invalid(format!("unknown key id {kid}")))?
            }
        };
        let key = DecodingKey::from_jwk(&jwk).map_err(|e| TokenError::Invalid(format!("key {kid}: {e}")))?;
        let mut v = Validation::new(header.alg);
        v.set_issuer(&[issuer]);
        v.set_audience(&[audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        v.leeway = 30;
        let data = jsonwebtoken::decode::<Claims>(token, &key, &v).map_err(|e| TokenError::Invalid(e.to_string()))?;
        let claims = data.claims;
        if !claims.scopes().iter().any(|s| s == INVOKE_SCOPE) {
            return Err(TokenError::Invalid(format!("scope {INVOKE_SCOPE} missing")));
        }
        Ok(Identity { issuer: claims.iss, subject: claims.sub })
    }

    fn cached(&self, kid: &str) -> Option<jsonwebtoken::jwk::Jwk> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner()).0.find(kid).cloned()
    }

    async fn refresh(&self, issuer: &str) -> Result<(), TokenError> {
        {
            let guard = self.keys.lock().unwrap_or_else(|p| p.into_inner());
            if guard.1.is_some_and(|at| at.elapsed() < MIN_REFRESH) {
                return Ok(());
            }
        }
        let url = match &self.jwks_url {
            Some(u) => u.clone(),
            None => self.discover(issuer).await?,
        };
        let set: JwkSet = serde_json::from_value(self.get_json(&url).await?)
            .map_err(|e| TokenError::KeysUnavailable(format!("JWKS at {url}: {e}")))?;
        tracing::info!(keys = set.keys.len(), %url, "fetched issuer keys");
        *self.keys.lock().unwrap_or_else(|p| p.into_inner()) = (set, Some(Instant::now()));
        Ok(())
    }

    async fn get_json(&self, url: &str) -> Result<Value, TokenError> {
        let fetch = async { self.client.get(url).send().await?.error_for_status()?.json::<Value>().await };
        fetch.await.map_err(|e| TokenError::KeysUnavailable(format!("{url}: {e}")))
    }

    /// The JWKS address from the issuer's OpenID configuration.
    async fn discover(&self, issuer: &str) -> Result<String, TokenError> {
        let url = format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/'));
        let doc = self.get_json(&url).await?;
        doc["jwks_uri"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| TokenError::KeysUnavailable(format!("{url} has no jwks_uri")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_come_from_scope_or_scp() {
        let c = Claims { iss: "i".into(), sub: "s".into(), scope: Some("openid grid.invoke".into()), scp: None };
        assert!(c.scopes().contains(&INVOKE_SCOPE.to_string()));
        let c = Claims { iss: "i".into(), sub: "s".into(), scope: None, scp: Some(serde_json::json!(["grid.invoke"])) };
        assert!(c.scopes().contains(&INVOKE_SCOPE.to_string()));
        let c = Claims { iss: "i".into(), sub: "s".into(), scope: Some("openid email".into()), scp: None };
        assert!(!c.scopes().contains(&INVOKE_SCOPE.to_string()));
    }
}
