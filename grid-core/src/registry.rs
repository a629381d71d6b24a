//! Which images the grid may run, and how a registry's manifests are read to
//! find the exact linux/amd64 image. The HTTP calls are the server's; the
//! decisions are here.

use serde_json::Value;

use crate::validate::job::ImageRef;

/// Media types the grid asks a registry for, most specific first.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
application/vnd.docker.distribution.manifest.list.v2+json, \
application/vnd.oci.image.manifest.v1+json, \
application/vnd.docker.distribution.manifest.v2+json";

/// An operator's `--admit-registry HOST[/PREFIX]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    pub host: String,
    /// Repository path prefix, whole path components (`tools` admits
    /// `tools/busybox`, not `toolsx/busybox`); empty admits every repository.
    pub prefix: String,
}

impl Admitted {
    pub fn parse(s: &str) -> Result<Admitted, String> {
        let s = s.trim().trim_end_matches('/');
        let (host, prefix) = s.split_once('/').unwrap_or((s, ""));
        if host.is_empty() || host.contains(char::is_whitespace) || s.contains("://") {
            return Err(format!("--admit-registry takes HOST[:PORT][/PREFIX], got \"{s}\""));
        }
        Ok(Admitted { host: host.to_ascii_lowercase(), prefix: prefix.to_string() })
    }

    pub fn admits(&self, image: &ImageRef) -> bool {
        let Some(host) = &image.registry else { return false };
        host.eq_ignore_ascii_case(&self.host)
            && (self.prefix.is_empty()
                || image.repository == self.prefix
                || image.repository.strip_prefix(&self.prefix).is_some_and(|rest| rest.starts_with('/')))
    }

    /// Registries on this machine are spoken to over plain HTTP (as the
    /// Docker Engine does for them); every other registry over HTTPS.
    pub fn scheme(&self) -> &'static str {
        let host = self.host.rsplit_once(':').map_or(self.host.as_str(), |(h, _)| h);
        if host == "localhost" || host.starts_with("127.") || host == "[::1]" {
            "http"
        } else {
            "https"
        }
    }
}

/// What a manifest says about the linux/amd64 image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestChoice {
    /// An index or manifest list: fetch this platform manifest next.
    Platform {
        digest: String,
    },
    /// A single-image manifest: its config blob tells the platform.
    Config {
        digest: String,
    },
    /// An index without a linux/amd64 entry.
    NoAmd64,
    Unreadable(String),
}

pub fn is_index(media_type: &str) -> bool {
    media_type.contains("manifest.list") || media_type.contains("image.index")
}

/// Reads a manifest body (of the given media type, from the response header
/// or the body's own `mediaType`).
pub fn choose(media_type: &str, body: &Value) -> ManifestChoice {
    let media_type = body.get("mediaType").and_then(Value::as_str).unwrap_or(media_type);
    if is_index(media_type) || body.get("manifests").is_some() {
        let Some(list) = body.get("manifests").and_then(Value::as_array) else {
            return ManifestChoice::Unreadable("index without manifests".into());
        };
        return list
            .iter()
            .find(|m| {
                let p = &m["platform"];
                p["os"] == "linux" && p["architecture"] == "amd64"
            })
            .and_then(|m| m["digest"].as_str())
            .map_or(ManifestChoice::NoAmd64, |d| ManifestChoice::Platform { digest: d.to_string() });
    }
    match body.pointer("/config/digest").and_then(Value::as_str) {
        Some(d) => ManifestChoice::Config { digest: d.to_string() },
        None => ManifestChoice::Unreadable("manifest without a config".into()),
    }
}

/// Whether an image config blob describes a linux/amd64 image.
pub fn config_is_linux_amd64(config: &Value) -> bool {
    config["os"] == "linux" && config["architecture"] == "amd64"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::job::parse_image_ref;
    use serde_json::json;

    #[test]
    fn admission_by_host_and_whole_path_prefix() {
        let a = Admitted::parse("127.0.0.1:5000/tools").unwrap();
        assert!(a.admits(&parse_image_ref("127.0.0.1:5000/tools/busybox:1").unwrap()));
        assert!(a.admits(&parse_image_ref("127.0.0.1:5000/tools").unwrap()));
        assert!(!a.admits(&parse_image_ref("127.0.0.1:5000/toolsx/busybox:1").unwrap()));
        assert!(!a.admits(&parse_image_ref("127.0.0.1:5001/tools/busybox:1").unwrap()));
        assert!(!a.admits(&parse_image_ref("busybox:1").unwrap()));
        let any = Admitted::parse("registry.example.com").unwrap();
        assert!(any.admits(&parse_image_ref("registry.example.com/a/b").unwrap()));
        assert_eq!(any.scheme(), "https");
        assert_eq!(a.scheme(), "http");
        assert!(Admitted::parse("http://x").is_err());
    }

    #[test]
    fn index_picks_linux_amd64() {
        let idx = json!({"mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
            {"digest": "sha256:arm", "platform": {"os": "linux", "architecture": "arm64"}},
            {"digest": "sha256:amd", "platform": {"os": "linux", "architecture": "amd64"}}]});
        assert_eq!(choose("", &idx), ManifestChoice::Platform { digest: "sha256:amd".into() });
        let arm_only =
            json!({"manifests": [{"digest": "sha256:arm", "platform": {"os": "linux", "architecture": "arm64"}}]});
        assert_eq!(choose("application/vnd.oci.image.index.v1+json", &arm_only), ManifestChoice::NoAmd64);
    }

    #[test]
    fn single_manifest_points_at_its_config() {
        let m = json!({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                       "config": {"digest": "sha256:cfg"}, "layers": []});
        assert_eq!(choose("", &m), ManifestChoice::Config { digest: "sha256:cfg".into() });
        assert!(config_is_linux_amd64(&json!({"os": "linux", "architecture": "amd64"})));
        assert!(!config_is_linux_amd64(&json!({"os": "linux", "architecture": "arm64"})));
    }
}
