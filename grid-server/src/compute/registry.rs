//! Resolves an image reference to the exact linux/amd64 image through the
//! registry's HTTP API (distribution v2), so a job always runs a pinned digest.

use std::time::Duration;

use grid_core::registry::{self, Admitted, ManifestChoice, MANIFEST_ACCEPT};
use grid_core::validate::job::ImageRef;
use serde_json::Value;

use crate::ids::sha256_hex;

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The image is refused: not admitted, missing, or not linux/amd64.
    #[error("{0}")]
    Invalid(String),
    /// The registry did not answer usefully; resending may work.
    #[error("registry unavailable: {0}")]
    Unavailable(String),
}

pub struct Registries {
    admitted: Vec<Admitted>,
    client: reqwest::Client,
}

impl Registries {
    /// Fails only if reqwest cannot build a client (its TLS backend).
    pub fn new(admitted: Vec<Admitted>) -> Result<Registries, reqwest::Error> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .connect_timeout(Duration::from_secs(5))
            .build()?;
        Ok(Registries { admitted, client })
    }

    /// `<repository>@sha256:<digest>` of the linux/amd64 image.
    pub async fn resolve(&self, image: &ImageRef) -> Result<String, ResolveError> {
        let resolved = self.resolve_uncounted(image).await;
        if let Err(ResolveError::Unavailable(_)) = &resolved {
            crate::metrics::get().registry_errors.inc();
        }
        resolved
    }

    async fn resolve_uncounted(&self, image: &ImageRef) -> Result<String, ResolveError> {
        let Some(admit) = self.admitted.iter().find(|a| a.admits(image)) else {
            let allowed = self.admitted.iter().map(|a| format!("{}/{}", a.host, a.prefix)).collect::<Vec<_>>();
            return Err(ResolveError::Invalid(format!(
                "image: {} is not in an admitted registry (admitted: {})",
                image.name(),
                if allowed.is_empty() { "none".to_string() } else { allowed.join(", ") }
            )));
        };
        let base = format!("{}://{}/v2/{}", admit.scheme(), admit.host, image.repository);
        let reference = image.digest.clone().or_else(|| image.tag.clone()).unwrap_or_else(|| "latest".into());
        let (media_type, body, digest) = self.manifest(&base, &reference, image).await?;
        let pinned = match registry::choose(&media_type, &body) {
            ManifestChoice::Platform { digest } => {
                let (mt, platform_body, _) = self.manifest(&base, &digest, image).await?;
                match registry::choose(&mt, &platform_body) {
                    ManifestChoice::Config { digest: cfg } => {
                        self.check_config(&base, &cfg, image).await.map(|_| digest)?
                    }
                    other => {
                        return Err(ResolveError::Invalid(format!("image: unreadable platform manifest ({other:?})")))
                    }
                }
            }
            ManifestChoice::Config { digest: cfg } => {
                self.check_config(&base, &cfg, image).await?;
                digest
            }
            ManifestChoice::NoAmd64 => {
                return Err(ResolveError::Invalid(format!("image: {} has no linux/amd64 image", image.name())))
            }
            ManifestChoice::Unreadable(why) => return Err(ResolveError::Invalid(format!("image: {why}"))),
        };
        Ok(format!("{}@{pinned}", image.name()))
    }

    /// Fetches a manifest: (media type, body, its digest).
    async fn manifest(
        &self,
        base: &str,
        reference: &str,
        image: &ImageRef,
    ) -> Result<(String, Value, String), ResolveError> {
        let resp = self
            .client
            .get(format!("{base}/manifests/{reference}"))
            .header(reqwest::header::ACCEPT, MANIFEST_ACCEPT)
            .send()
            .await
            .map_err(|e| ResolveError::Unavailable(e.to_string()))?;
        let status = resp.status();
        if status.as_u16() == 404 {
            return Err(ResolveError::Invalid(format!("image: {}:{reference} does not exist", image.name())));
        }
        if status.as_u16() == 401 || status.as_u16() == 403 {
            return Err(ResolveError::Invalid(format!("image: the registry refused access to {}", image.name())));
        }
        if !status.is_success() {
            return Err(ResolveError::Unavailable(format!("registry answered HTTP {status}")));
        }
        let media_type =
            resp.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let header_digest =
            resp.headers().get("docker-content-digest").and_then(|v| v.to_str().ok()).map(str::to_string);
        let bytes = resp.bytes().await.map_err(|e| ResolveError::Unavailable(e.to_string()))?;
        let digest = header_digest.unwrap_or_else(|| format!("sha256:{}", sha256_hex(&bytes)));
        let body = serde_json::from_slice(&bytes)
            .map_err(|e| ResolveError::Invalid(format!("image: manifest is not JSON ({e})")))?;
        Ok((media_type, body, digest))
    }

    async fn check_config(&self, base: &str, digest: &str, image: &ImageRef) -> Result<(), ResolveError> {
        let resp = self
            .client
            .get(format!("{base}/blobs/{digest}"))
            .send()
            .await
            .map_err(|e| ResolveError::Unavailable(e.to_string()))?;
        if !resp.status().is_success() {
            return Err(ResolveError::Unavailable(format!("config blob answered HTTP {}", resp.status())));
        }
        let config: Value = resp.json().await.map_err(|e| ResolveError::Invalid(format!("image: config ({e})")))?;
        if registry::config_is_linux_amd64(&config) {
            Ok(())
        } else {
            Err(ResolveError::Invalid(format!(
                "image: {} has no linux/amd64 image (it is {}/{})",
                image.name(),
                config["os"].as_str().unwrap_or("?"),
                config["architecture"].as_str().unwrap_or("?")
            )))
        }
    }
}
