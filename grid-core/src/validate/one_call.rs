//! Bodies of the one-call captures, POST /screenshot, /pdf and /content:
//! one `url`, an optional `profileId`, and the parameters of the script the
//! route runs, flat beside them (docs/one-call.md). One definition serves
//! both: the parameters are the batch scripts' own (`params.rs`), and each
//! problem is named by the body's field instead of `params.`.

use serde_json::{Map, Value};

use super::batch::{absolute_http_url, profile};
use super::{json_type, params, Problems};
use crate::catalog::{ArtifactKind, Needs, Profile, Script};
use crate::error::ApiError;
use crate::wire::batch::BatchSubmission;

/// The members every one-call body may have besides its script's parameters.
pub const FIELDS: &[&str] = &["url", "profileId", "context"];

/// A one-call capture: which route, so which script and which of its files
/// the answer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OneCall {
    /// POST /screenshot: `capture`'s screenshot.
    Screenshot,
    /// POST /pdf: `pdf`'s document.
    Pdf,
    /// POST /content: `render-fetch`'s DOM, serialised after the page's
    /// scripts ran.
    Content,
}

impl OneCall {
    pub const ALL: [OneCall; 3] = [OneCall::Screenshot, OneCall::Pdf, OneCall::Content];

    pub fn script(self) -> Script {
        match self {
            OneCall::Screenshot => Script::Capture,
            OneCall::Pdf => Script::Pdf,
            OneCall::Content => Script::RenderFetch,
        }
    }

    /// The file the answer's body is.
    pub fn answers(self) -> ArtifactKind {
        match self {
            OneCall::Screenshot => ArtifactKind::Screenshot,
            OneCall::Pdf => ArtifactKind::Pdf,
            OneCall::Content => ArtifactKind::Html,
        }
    }

    /// The route's path.
    pub fn path(self) -> &'static str {
        match self {
            OneCall::Screenshot => "/screenshot",
            OneCall::Pdf => "/pdf",
            OneCall::Content => "/content",
        }
    }
}

/// The body as a batch of its one URL, every problem named by its field.
pub fn validate(call: OneCall, body: &Value) -> Result<BatchSubmission, ApiError> {
    let script = call.script();
    debug_assert!(matches!(script.row().needs, Needs::Browser));
    let mut p = Problems::default();
    let Some(obj) = p.object(body) else {
        return Err(ApiError::InvalidCaptureBody { detail: p.into_vec() });
    };
    let url = match obj.get("url") {
        None => {
            p.push("url", "is required: an absolute http or https URL");
            None
        }
        Some(Value::String(s)) => absolute_http_url(s).map_err(|msg| p.push("url", msg)).ok(),
        Some(v) => {
            p.push("url", format!("must be a string, got {}", json_type(v)));
            None
        }
    };
    let profile = profile(&mut p, obj, "profileId", &Profile::ALL);
    let context = super::batch::context(&mut p, obj);
    let params: Map<String, Value> =
        obj.iter().filter(|(k, _)| !FIELDS.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect();
    let mut problems = p.into_vec();
    match params::browser_problems(script, &params) {
        Ok(checked) => {
            if let Some(host) = url.as_deref().and_then(host_of) {
                problems.extend(checked.host_problems(&host).into_iter().map(|m| as_field(&m, script)));
            }
        }
        Err(found) => problems.extend(found.iter().map(|m| as_field(m, script))),
    }
    match (url, profile) {
        (Some(url), Some(profile)) if problems.is_empty() => {
            Ok(BatchSubmission { urls: vec![url], script, profile, params, priority: None, context, proxy: None })
        }
        _ => Err(ApiError::InvalidCaptureBody { detail: problems }),
    }
}

/// The URL's host as `BrowserParams::host_problems` takes it.
fn host_of(url: &str) -> Option<String> {
    match url::Url::parse(url).ok()?.host()? {
        url::Host::Ipv6(v6) => Some(format!("[{v6}]")),
        host => Some(host.to_string().to_ascii_lowercase()),
    }
}

/// A parameter problem (`params.name: ...`) named by the body's field; a
/// name no script takes is an unknown field of the body.
fn as_field(problem: &str, script: Script) -> String {
    let named = problem.strip_prefix("params.").unwrap_or(problem);
    match named.split_once(": ") {
        Some((field, msg)) if msg == format!("unknown parameter of {}", script.as_str()) => {
            format!("{field}: unknown field")
        }
        _ => named.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn detail(call: OneCall, body: Value) -> Vec<String> {
        match validate(call, &body) {
            Err(ApiError::InvalidCaptureBody { detail }) => detail,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_body_is_a_batch_of_its_one_url_with_the_rest_as_params() {
        let sub = validate(
            OneCall::Screenshot,
            &json!({"url": "https://example.com", "format": "jpeg", "viewport": {"width": 640, "height": 480}}),
        )
        .unwrap();
        assert_eq!(sub.urls, ["https://example.com/"]);
        assert_eq!(sub.script, Script::Capture);
        assert_eq!(sub.profile, Profile::DEFAULT);
        assert_eq!(Value::Object(sub.params), json!({"format": "jpeg", "viewport": {"width": 640, "height": 480}}));
        let sub =
            validate(OneCall::Pdf, &json!({"url": "http://a.test/x", "format": "A4", "landscape": true})).unwrap();
        assert_eq!(sub.script, Script::Pdf);
        let sub =
            validate(OneCall::Content, &json!({"url": "http://a.test/", "profileId": "native-headless-browser/v3"}))
                .unwrap();
        assert_eq!((sub.script, sub.profile), (Script::RenderFetch, Profile::NativeHeadlessShell));
    }

    #[test]
    fn every_problem_is_named_by_the_bodys_field() {
        let d = detail(
            OneCall::Screenshot,
            json!({"url": "ftp://x/", "profileId": 3, "bogus": 1, "quality": 500, "landscape": true,
                   "cookies": [{"name": "a", "value": "b", "domain": "other.test"}]}),
        );
        let joined = d.join("\n");
        for part in [
            "url: scheme \"ftp\" is not supported",
            "profileId: must be a string",
            "bogus: unknown field",
            "quality: must be a whole number from 0 to 100",
            "landscape: not a parameter of capture; only pdf takes it",
        ] {
            assert!(joined.contains(part), "{part} in {joined}");
        }
        assert!(d.iter().all(|m| !m.starts_with("params.")), "{joined}");
        let d = detail(OneCall::Content, json!({}));
        assert_eq!(d, ["url: is required: an absolute http or https URL"]);
        let d = detail(OneCall::Content, json!([]));
        assert_eq!(d, ["body: must be a JSON object, got an array"]);
        // A cookie for another site, checked against the URL.
        let d = detail(
            OneCall::Screenshot,
            json!({"url": "https://a.test/", "cookies": [{"name": "a", "value": "b", "domain": "other.test"}]}),
        );
        assert!(d[0].starts_with("cookies[0].domain: \"other.test\" is neither"), "{d:?}");
        let d = detail(OneCall::Pdf, json!({"url": "https://a.test/", "format": "png"}));
        assert!(d[0].starts_with("format: must be one of \"Letter\""), "{d:?}");
    }

    #[test]
    fn each_route_answers_a_file_its_script_publishes() {
        for call in OneCall::ALL {
            assert!(call.script().row().publishes.contains(&call.answers()), "{call:?}");
            assert!(call.script().needs_browser());
        }
    }
}
