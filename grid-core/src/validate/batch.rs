//! POST /batches bodies.

use serde_json::{Map, Value};
use url::Url;

use super::{int_in_range, json_type, Problems};
use crate::catalog::{Profile, Script};
use crate::error::ApiError;
use crate::wire::batch::BatchSubmission;

pub const MIN_URLS: usize = 1;
pub const MAX_URLS: usize = 1_000;
pub const MIN_PRIORITY: i64 = 1;
pub const MAX_PRIORITY: i64 = 1_000_000;
/// The members a body may have.
pub const FIELDS: &[&str] = &["urls", "script", "profileId", "params", "priority", "context", "proxy"];

pub fn validate(body: &Value) -> Result<BatchSubmission, ApiError> {
    let mut p = Problems::default();
    let Some(obj) = p.object(body) else {
        return Err(ApiError::InvalidBatchBody { detail: p.into_vec() });
    };
    p.unknown_fields(obj, FIELDS);
    let urls = urls(&mut p, obj);
    let script = match obj.get("script") {
        None => Some(Script::DEFAULT),
        Some(Value::String(s)) => Script::parse(s).or_else(|| {
            let names: Vec<&str> = Script::ALL.iter().map(|s| s.as_str()).collect();
            p.push("script", format!("unknown script \"{s}\"; one of {}", names.join(", ")));
            None
        }),
        Some(v) => {
            p.push("script", format!("must be a string, got {}", json_type(v)));
            None
        }
    };
    let profile = profile(&mut p, obj, "profileId", &Profile::ALL);
    let params = match obj.get("params") {
        None => Some(Map::new()),
        Some(Value::Object(m)) => Some(m.clone()),
        Some(v) => {
            p.push("params", format!("must be an object, got {}", json_type(v)));
            None
        }
    };
    let priority = int_in_range(&mut p, obj, "priority", MIN_PRIORITY, MAX_PRIORITY);
    let context = context(&mut p, obj);
    let proxy = obj.get("proxy").and_then(|v| super::proxy::validate(&mut p, "proxy", v));
    match (urls, script, profile, params) {
        (Some(urls), Some(script), Some(profile), Some(params)) if p.is_empty() => {
            Ok(BatchSubmission { urls, script, profile, params, priority: priority.map(|n| n as u32), context, proxy })
        }
        _ => Err(ApiError::InvalidBatchBody { detail: p.into_vec() }),
    }
}

/// `context`: a signed-in capture's context id (docs/captures.md).
pub fn context(p: &mut Problems, obj: &Map<String, Value>) -> Option<String> {
    match obj.get("context") {
        None => None,
        Some(Value::String(id)) if super::session::is_context_id(id) => Some(id.clone()),
        Some(Value::String(_)) => {
            p.push("context", "must be a context id from POST /contexts (ctx_ and letters or digits)");
            None
        }
        Some(v) => {
            p.push("context", format!("must be a string, got {}", json_type(v)));
            None
        }
    }
}

/// A `profileId` field naming one of `among`: absent means the default
/// profile.
pub fn profile(p: &mut Problems, obj: &Map<String, Value>, field: &str, among: &[Profile]) -> Option<Profile> {
    match obj.get(field) {
        None => Some(Profile::DEFAULT),
        Some(Value::String(s)) => match Profile::parse(s) {
            Some(x) if among.contains(&x) => Some(x),
            known => {
                let names: Vec<&str> = among.iter().map(|p| p.as_str()).collect();
                let what = if known.is_some() { "profile for capture items only" } else { "unknown profile" };
                p.push(field, format!("{what} \"{s}\"; one of {}", names.join(", ")));
                None
            }
        },
        Some(v) => {
            p.push(field, format!("must be a string, got {}", json_type(v)));
            None
        }
    }
}

fn urls(p: &mut Problems, obj: &Map<String, Value>) -> Option<Vec<String>> {
    let list = match obj.get("urls") {
        None => {
            p.push("urls", format!("is required: {MIN_URLS} to {MAX_URLS} absolute URLs"));
            return None;
        }
        Some(Value::Array(a)) => a,
        Some(v) => {
            p.push("urls", format!("must be an array of strings, got {}", json_type(v)));
            return None;
        }
    };
    if list.len() < MIN_URLS {
        p.push("urls", format!("must hold at least {MIN_URLS} URL"));
        return None;
    }
    if list.len() > MAX_URLS {
        p.push("urls", format!("must hold at most {MAX_URLS} URLs, got {}", list.len()));
        return None;
    }
    let before = p.0.len();
    let mut out = Vec::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        let field = format!("urls[{i}]");
        match v {
            Value::String(s) => match absolute_http_url(s) {
                Ok(u) => out.push(u),
                Err(msg) => p.push(&field, msg),
            },
            other => p.push(&field, format!("must be a string, got {}", json_type(other))),
        }
    }
    (p.0.len() == before).then_some(out)
}

/// Parses an absolute http(s) URL, returning its normalised form.
pub fn absolute_http_url(s: &str) -> Result<String, String> {
    // The URL standard's parser strips these silently; a URL given with
    // them is not the URL the schema's `^https?:` describes, so say so.
    if s.starts_with(|c: char| c <= ' ') || s.ends_with(|c: char| c <= ' ') {
        return Err(format!("must not begin or end with spaces or control characters: \"{}\"", s.escape_debug()));
    }
    match Url::parse(s) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(u.to_string()),
        Ok(u) => Err(format!("scheme \"{}\" is not supported; use an absolute http or https URL", u.scheme())),
        Err(e) => Err(format!("not an absolute URL ({e}): \"{s}\"")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn detail(body: Value) -> Vec<String> {
        match validate(&body) {
            Err(ApiError::InvalidBatchBody { detail }) => detail,
            other => panic!("expected invalid batch body, got {other:?}"),
        }
    }

    #[test]
    fn defaults_apply() {
        let b = validate(&json!({"urls": ["http://127.0.0.1:9/a"]})).unwrap();
        assert_eq!(b.script, Script::Capture);
        assert_eq!(b.profile, Profile::DesktopBrowserNl);
        assert!(b.params.is_empty());
        assert_eq!(b.priority, None);
        assert_eq!(b.urls, vec!["http://127.0.0.1:9/a".to_string()]);
    }

    #[test]
    fn every_problem_is_listed_with_its_field() {
        let d = detail(
            json!({"urls": ["nope", 3, "ftp://x/"], "script": "scrape", "profileId": "x", "params": [], "priority": 0, "extra": 1}),
        );
        let fields: Vec<&str> = d.iter().map(|s| s.split(':').next().unwrap()).collect();
        assert_eq!(fields, vec!["extra", "urls[0]", "urls[1]", "urls[2]", "script", "profileId", "params", "priority"]);
    }

    #[test]
    fn url_count_bounds() {
        assert_eq!(detail(json!({"urls": []})), vec!["urls: must hold at least 1 URL"]);
        assert_eq!(detail(json!({})), vec!["urls: is required: 1 to 1000 absolute URLs"]);
        let many: Vec<String> = (0..1001).map(|i| format!("http://h/{i}")).collect();
        assert_eq!(detail(json!({"urls": many})), vec!["urls: must hold at most 1000 URLs, got 1001"]);
        let max: Vec<String> = (0..1000).map(|i| format!("http://h/{i}")).collect();
        assert_eq!(validate(&json!({"urls": max})).unwrap().urls.len(), 1000);
    }

    #[test]
    fn priority_bounds() {
        assert_eq!(validate(&json!({"urls": ["http://h/"], "priority": 1})).unwrap().priority, Some(1));
        assert_eq!(validate(&json!({"urls": ["http://h/"], "priority": 1_000_000})).unwrap().priority, Some(1_000_000));
        assert_eq!(detail(json!({"urls": ["http://h/"], "priority": 1_000_001})).len(), 1);
        assert_eq!(detail(json!({"urls": ["http://h/"], "priority": 1.5})).len(), 1);
    }

    #[test]
    fn urls_are_taken_as_written() {
        for s in [" http://h/", "http://h/ ", "\thttp://h/", "http://h/\n"] {
            let d = detail(json!({"urls": [s]}));
            assert!(d[0].starts_with("urls[0]: must not begin or end with spaces or control characters"), "{d:?}");
        }
        assert_eq!(
            detail(json!({"urls": ["ftp://h/"]})),
            vec!["urls[0]: scheme \"ftp\" is not supported; use an absolute http or https URL"]
        );
    }

    #[test]
    fn a_whole_number_may_be_written_with_a_fraction() {
        assert_eq!(validate(&json!({"urls": ["http://h/"], "priority": 7.0})).unwrap().priority, Some(7));
        assert_eq!(
            detail(json!({"urls": ["http://h/"], "priority": 7.5})),
            vec!["priority: must be a whole number between 1 and 1000000, got a number"]
        );
    }

    #[test]
    fn non_object_body() {
        assert_eq!(detail(json!([1])), vec!["body: must be a JSON object, got an array"]);
    }
}
